//! `vmap`: every batching rule (unary, binary, select, cast, reductions, dot_general, layout ops,
//! take, one_hot, softmax), collectives over the vmapped axis name, nesting (pmap∘vmap, vmap∘vmap,
//! jit∘vmap, outer-axis collectives inside a vmap), typed errors and the trace cache.
//!
//! Oracles never come from the batching rules under test:
//! - batching rules: the *unbatched* function is traced with `jit` on one example at a time (the
//!   mapped axis removed on the host), evaluated by the CPU reference interpreter
//!   (`reference::eval_graph`), and the per-example results are stacked on the host along the
//!   out axis. The batched program runs with `vmap(..).on(dev).call` on every GPU device (Vulkan
//!   and GL llvmpipe). Tolerances: `Tol::EXACT` for layout, indexing, integer and bool results
//!   (values move unchanged), `Tol::ARITH`/`TRANS` (1e-5 relative + 1e-6 absolute) for
//!   elementwise float math, `Tol::REDUCE` (1e-4 relative + 1e-4 absolute) for reductions and
//!   contractions (f32 accumulation against the f64-accumulating reference).
//! - collectives over the vmapped axis: the same function under `pmap` over the same axis name on
//!   `cpu:n` devices (the reference interpreter as executor) or `vulkan:n`; "vmap emulates pmap"
//!   means the same values, compared exactly for everything, including f32 sums (both fold the n
//!   values in order in f32).
//! - nesting: plain index loops over the host data of the global inputs.

mod common;

use brigade::ops::DotDims;
use brigade::{
    Array, DType, Device, Error, HostArray, HostData, Tensor, all_gather, all_to_all, axis_index,
    axis_size, counters, grad, jit, pmap, pmax, pmean, pmin, ppermute, psum, psum_scatter, select,
    shard_map, vmap,
};
use common::batching::{batch_size, check_vmap, expected};
use common::{
    Tol, assert_close, device_guard, device_of, devices_with, gpu_devices, host, rand_bool,
    rand_f32, rand_i32, rand_pos, rand_u32,
};

/// "vmap emulates pmap": `f` with its batch axis named "b" under `vmap` on every GPU device must
/// give the values of `f` under `pmap` with axis name "b" on `pmap_devices` (one per example).
fn check_like_pmap<F>(
    what: &str,
    f: F,
    args: &[Array],
    in_axes: &[Option<usize>],
    out_axes: &[Option<usize>],
    pmap_devices: &[Device],
    tol: Tol,
) -> Vec<HostArray>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let hosts: Vec<HostArray> = args.iter().map(host).collect();
    let n = batch_size(&hosts, in_axes);
    assert_eq!(pmap_devices.len(), n, "{what}: one pmap device per example");
    let want: Vec<HostArray> = pmap(&f)
        .axis_name("b")
        .in_axes(in_axes)
        .out_axes(out_axes)
        .devices(pmap_devices)
        .call(args)
        .unwrap_or_else(|e| panic!("{what}: pmap oracle failed: {e}"))
        .iter()
        .map(host)
        .collect();
    for dev in gpu_devices() {
        let _guard = device_guard(&dev);
        let outs = vmap(&f)
            .axis_name("b")
            .in_axes(in_axes)
            .out_axes(out_axes)
            .on(&dev)
            .call(args)
            .unwrap_or_else(|e| panic!("{what} on {}: vmap call failed: {e}", dev.name()));
        assert_eq!(outs.len(), want.len(), "{what}: number of outputs");
        for (k, (o, w)) in outs.iter().zip(&want).enumerate() {
            assert_close(
                &host(o),
                w,
                tol,
                &format!(
                    "{what}: vmap on {} vs pmap on {:?}: output {k}",
                    dev.name(),
                    pmap_devices.iter().map(|d| d.name()).collect::<Vec<_>>()
                ),
            );
        }
    }
    want
}

fn cpu(n: usize) -> Vec<Device> {
    let d = devices_with(&format!("cpu:{n}"));
    assert_eq!(d.len(), n, "cpu:{n} layout");
    d
}

fn f32s_of(h: &HostArray) -> Vec<f32> {
    h.to_vec::<f32>().unwrap()
}

fn i32_array(v: Vec<i32>, shape: &[usize]) -> Array {
    Array::from_vec(v, shape).unwrap()
}

// ---- elementwise ---------------------------------------------------------------------------------

#[test]
fn unary_ops_mapped_and_stacked_on_a_middle_axis() {
    // x: (4, B=3, 2), examples are x[:, i, :]; outputs stacked on axis 1.
    let x = rand_f32(&[4, 3, 2], 1);
    check_vmap(
        "unary",
        |a: &[Tensor]| {
            let x = &a[0];
            vec![
                x.exp(),
                x.sin(),
                x.abs().sqrt(),
                x.neg().floor(),
                x.tanh(),
                x.sigmoid(),
            ]
        },
        &[Some(1)],
        &[Some(1)],
        &[x],
        Tol::TRANS,
    );
}

#[test]
fn binary_ops_with_one_operand_shared() {
    // Batched lhs (examples (2, 4)), shared rhs (4,) broadcast inside each example.
    let x = rand_f32(&[3, 2, 4], 2);
    let w = rand_pos(&[4], 3);
    check_vmap(
        "binary, shared rhs",
        |a: &[Tensor]| {
            let (x, w) = (&a[0], &a[1]);
            vec![x * w + x, w - x, x.maximum(w), x.lt(w), x / w, w * 2.0]
        },
        &[Some(0), None],
        &[Some(0)],
        &[x, w],
        Tol::ARITH,
    );
    // Shared lhs (2, 4), rhs mapped on its last axis; stacked on axis 1.
    let w2 = rand_pos(&[2, 4], 4);
    let y = rand_pos(&[2, 4, 3], 5);
    check_vmap(
        "binary, shared lhs",
        |a: &[Tensor]| {
            let (w, y) = (&a[0], &a[1]);
            vec![w / y, w.pow(&(y - 2.0)), w.ge(y), y.minimum(w)]
        },
        &[None, Some(2)],
        &[Some(1)],
        &[w2, y],
        Tol::TRANS,
    );
    // Integers: truncating division and remainder by a shared divisor, bitwise and.
    let xi = rand_i32(&[5, 3], 6, -20, 20);
    let d = rand_i32(&[5], 7, 1, 7);
    check_vmap(
        "binary i32, shared divisor",
        |a: &[Tensor]| {
            let (x, d) = (&a[0], &a[1]);
            vec![x / d, x.rem(d), x.and(d), x * d - 3, x.eq(d)]
        },
        &[Some(1), None],
        &[Some(0)],
        &[xi, d],
        Tol::EXACT,
    );
}

#[test]
fn binary_ops_with_both_operands_batched_on_different_axes() {
    // x: (B=3, 2, 4) on axis 0, y: (2, 3, 4) on axis 1; examples (2, 4); stacked on axis 2.
    let x = rand_f32(&[3, 2, 4], 8);
    let y = rand_pos(&[2, 3, 4], 9);
    check_vmap(
        "binary, both batched",
        |a: &[Tensor]| {
            let (x, y) = (&a[0], &a[1]);
            vec![x * y, x - y, x / y, x.gt(y), y.pow(x)]
        },
        &[Some(0), Some(1)],
        &[Some(2)],
        &[x, y],
        Tol::TRANS,
    );
    // Broadcasting between the examples' shapes: (2, 1) against (4,).
    let p = rand_f32(&[2, 1, 3], 10);
    let q = rand_f32(&[3, 4], 11);
    check_vmap(
        "binary, broadcasting both batched",
        |a: &[Tensor]| vec![&a[0] + &a[1], &a[0] * &a[1]],
        &[Some(2), Some(0)],
        &[Some(0)],
        &[p, q],
        Tol::ARITH,
    );
}

#[test]
fn select_with_each_operand_batched_or_shared() {
    let f = |a: &[Tensor]| vec![select(&a[0], &a[1], &a[2]), a[0].where_(&a[2], &a[1])];
    // Batched predicate and on_false, shared on_true.
    check_vmap(
        "select pred+false batched",
        f,
        &[Some(0), None, Some(0)],
        &[Some(0)],
        &[
            rand_bool(&[3, 2, 4], 12),
            rand_f32(&[2, 4], 13),
            rand_f32(&[3, 2, 4], 14),
        ],
        Tol::EXACT,
    );
    // Shared predicate, both values batched on different axes.
    check_vmap(
        "select shared pred",
        f,
        &[None, Some(0), Some(1)],
        &[Some(1)],
        &[
            rand_bool(&[2, 4], 15),
            rand_f32(&[3, 2, 4], 16),
            rand_f32(&[2, 3, 4], 17),
        ],
        Tol::EXACT,
    );
    // Only the predicate batched (a scalar-per-example predicate broadcast over the values).
    check_vmap(
        "select only pred batched",
        f,
        &[Some(0), None, None],
        &[Some(0)],
        &[
            rand_bool(&[4], 18),
            rand_i32(&[2, 3], 19, -9, 9),
            rand_i32(&[2, 3], 20, -9, 9),
        ],
        Tol::EXACT,
    );
}

#[test]
fn casts_between_every_dtype() {
    // f32 mapped on axis 1, i32 on axis 0, bool shared.
    let x = Array::from_vec(
        vec![-2.7f32, 0.5, 1.9, -0.2, 3.5, -1.5, 2.2, -3.9, 0.7],
        &[3, 3],
    )
    .unwrap();
    let i = rand_i32(&[3, 3], 21, -20, 20);
    let p = rand_bool(&[3], 22);
    check_vmap(
        "cast",
        |a: &[Tensor]| {
            let (x, i, p) = (&a[0], &a[1], &a[2]);
            vec![
                x.cast(DType::I32),
                x.cast(DType::U32),
                x.cast(DType::Bool),
                i.cast(DType::F32),
                i.cast(DType::U32),
                p.cast(DType::F32) + x,
                p.cast(DType::I32) * i,
            ]
        },
        &[Some(1), Some(0), None],
        &[Some(0)],
        &[x, i, p],
        Tol::EXACT,
    );
}

#[test]
fn constants_iota_and_unbatched_outputs_are_broadcast() {
    // Outputs that do not depend on the mapped argument (a constant, a function of the shared
    // argument only, the shared argument itself) still get the batch axis; the identity on a
    // mapped argument moves its axis from in_axes to out_axes.
    let x = rand_f32(&[4, 3], 23);
    let w = rand_f32(&[4], 24);
    let want = check_vmap(
        "broadcast outputs",
        |a: &[Tensor]| {
            let (x, w) = (&a[0], &a[1]);
            vec![
                x.clone(),
                w.clone(),
                w * 3.0,
                Tensor::from_vec(vec![1.5f32, -2.0], &[2]),
                x + Tensor::arange(4).cast(DType::F32),
                Tensor::full(2.5f32, &[4]) * x,
            ]
        },
        &[Some(1), None],
        &[Some(1)],
        &[x.clone(), w.clone()],
        Tol::ARITH,
    );
    // Independent check of the identity output: x mapped on axis 1 and stacked on axis 1 is x.
    assert_close(&want[0], &host(&x), Tol::EXACT, "identity");
    assert_eq!(want[1].shape, vec![4, 3]);
    assert_eq!(want[3].shape, vec![2, 3]);
}

// ---- reductions -----------------------------------------------------------------------------------

#[test]
fn reductions_over_several_axes_with_and_without_keepdims() {
    // x: (2, 3, B=5, 4) mapped on axis 2; examples (2, 3, 4).
    let x = rand_f32(&[2, 3, 5, 4], 25);
    check_vmap(
        "reductions f32",
        |a: &[Tensor]| {
            let x = &a[0];
            vec![
                x.sum([0i64, 2], false),
                x.sum([2i64, 1], true),
                x.max(1, true),
                x.min(-1, false),
                x.argmax(2, false),
                x.argmin(0, true),
                x.argmax(1, true),
                x.mean_all(),
                x.sum_all(),
                x.prod(1, false),
                x.mean([0i64, 1], true),
            ]
        },
        &[Some(2)],
        &[Some(0)],
        &[x],
        Tol::REDUCE,
    );
    let xi = rand_i32(&[3, 2, 4], 26, -20, 20);
    check_vmap(
        "reductions i32",
        |a: &[Tensor]| {
            let x = &a[0];
            vec![
                x.sum(1, false),
                x.max(0, true),
                x.min([0i64, 1], false),
                x.argmax(1, false),
                x.sum_all(),
            ]
        },
        &[Some(0)],
        &[Some(1), Some(1), Some(0), Some(0), Some(0)],
        &[xi],
        Tol::EXACT,
    );
}

// ---- dot_general ------------------------------------------------------------------------------------

/// Per-example `(3, 2, 5) x (5, 3, 4)` with batch axes lhs 0 / rhs 1, contracting lhs 2 / rhs 0:
/// result `(3, 2, 4)`.
fn odd_dot(a: &[Tensor]) -> Vec<Tensor> {
    vec![a[0].dot_general(
        &a[1],
        DotDims {
            lhs_contract: vec![2],
            rhs_contract: vec![0],
            lhs_batch: vec![0],
            rhs_batch: vec![1],
        },
    )]
}

#[test]
fn matmul_with_only_the_lhs_batched() {
    let mm = |a: &[Tensor]| vec![a[0].matmul(&a[1])];
    // (2, 3) @ (3, 4), lhs mapped on axis 0.
    check_vmap(
        "matmul lhs batched",
        mm,
        &[Some(0), None],
        &[Some(0)],
        &[rand_f32(&[3, 2, 3], 27), rand_f32(&[3, 4], 28)],
        Tol::REDUCE,
    );
    // Matrix-vector: (2, 3) @ (3,), lhs mapped on axis 2.
    check_vmap(
        "matvec lhs batched",
        mm,
        &[Some(2), None],
        &[Some(1)],
        &[rand_f32(&[2, 3, 4], 29), rand_f32(&[3], 30)],
        Tol::REDUCE,
    );
    // A 3-D per-example matmul (batch axis inside each example): (2, 2, 3) @ (2, 3, 4).
    check_vmap(
        "batched matmul, lhs batched",
        mm,
        &[Some(0), None],
        &[Some(0)],
        &[rand_f32(&[3, 2, 2, 3], 31), rand_f32(&[2, 3, 4], 32)],
        Tol::REDUCE,
    );
    // Broadcasting per-example matmul (2, 2, 3) @ (3, 4) (folded into rows).
    check_vmap(
        "broadcast matmul, lhs batched",
        mm,
        &[Some(1), None],
        &[Some(2)],
        &[rand_f32(&[2, 3, 2, 3], 33), rand_f32(&[3, 4], 34)],
        Tol::REDUCE,
    );
    check_vmap(
        "dot_general with inner batch axes, lhs batched",
        odd_dot,
        &[Some(3), None],
        &[Some(1)],
        &[rand_f32(&[3, 2, 5, 2], 35), rand_f32(&[5, 3, 4], 36)],
        Tol::REDUCE,
    );
}

#[test]
fn matmul_with_only_the_rhs_batched() {
    let mm = |a: &[Tensor]| vec![a[0].matmul(&a[1])];
    // (2, 3) @ (3, 4), rhs mapped on axis 1.
    check_vmap(
        "matmul rhs batched",
        mm,
        &[None, Some(1)],
        &[Some(0)],
        &[rand_f32(&[2, 3], 37), rand_f32(&[3, 3, 4], 38)],
        Tol::REDUCE,
    );
    // Vector-matrix: (3,) @ (3, 4).
    check_vmap(
        "vecmat rhs batched",
        mm,
        &[None, Some(0)],
        &[Some(1)],
        &[rand_f32(&[3], 39), rand_f32(&[2, 3, 4], 40)],
        Tol::REDUCE,
    );
    check_vmap(
        "batched matmul, rhs batched",
        mm,
        &[None, Some(2)],
        &[Some(0)],
        &[rand_f32(&[2, 2, 3], 41), rand_f32(&[2, 3, 3, 4], 42)],
        Tol::REDUCE,
    );
    check_vmap(
        "dot_general with inner batch axes, rhs batched",
        odd_dot,
        &[None, Some(0)],
        &[Some(3)],
        &[rand_f32(&[3, 2, 5], 43), rand_f32(&[2, 5, 3, 4], 44)],
        Tol::REDUCE,
    );
}

#[test]
fn matmul_with_both_operands_batched() {
    let mm = |a: &[Tensor]| vec![a[0].matmul(&a[1])];
    check_vmap(
        "matmul both batched",
        mm,
        &[Some(0), Some(2)],
        &[Some(1)],
        &[rand_f32(&[3, 2, 3], 45), rand_f32(&[3, 4, 3], 46)],
        Tol::REDUCE,
    );
    check_vmap(
        "batched matmul, both batched",
        mm,
        &[Some(1), Some(0)],
        &[Some(0)],
        &[rand_f32(&[2, 3, 2, 3], 47), rand_f32(&[3, 2, 3, 4], 48)],
        Tol::REDUCE,
    );
    check_vmap(
        "dot_general with inner batch axes, both batched",
        odd_dot,
        &[Some(1), Some(3)],
        &[Some(2)],
        &[rand_f32(&[3, 2, 2, 5], 49), rand_f32(&[5, 3, 4, 2], 50)],
        Tol::REDUCE,
    );
    // Contracting non-last axes, no batch axes: (3, 2) x (4, 3) over lhs 0 / rhs 1.
    check_vmap(
        "dot_general transposed contraction, both batched",
        |a: &[Tensor]| {
            vec![a[0].dot_general(
                &a[1],
                DotDims {
                    lhs_contract: vec![0],
                    rhs_contract: vec![1],
                    lhs_batch: vec![],
                    rhs_batch: vec![],
                },
            )]
        },
        &[Some(2), Some(0)],
        &[Some(0)],
        &[rand_f32(&[3, 2, 4], 51), rand_f32(&[4, 4, 3], 52)],
        Tol::REDUCE,
    );
}

// ---- layout ------------------------------------------------------------------------------------------

#[test]
fn transpose_reshape_expand_and_squeeze() {
    // x: (2, 3, 4, B=5) mapped on the last axis; outputs stacked on axis 2.
    let x = rand_f32(&[2, 3, 4, 5], 53);
    check_vmap(
        "transpose/reshape",
        |a: &[Tensor]| {
            let x = &a[0];
            vec![
                x.transpose(&[2, 0, 1]),
                x.t(),
                x.reshape(&[-1, 4]),
                x.reshape(&[4, 6]),
                x.reshape(&[24, 1]),
                x.expand_dims(1),
                x.slice_axis(1, 1, 2).squeeze(&[1]),
            ]
        },
        &[Some(3)],
        &[Some(2)],
        &[x],
        Tol::EXACT,
    );
}

#[test]
fn broadcast_to_and_broadcast_in_dim() {
    // v: examples (3,) mapped on axis 1 of (3, B=4); m shared (2, 3).
    let v = rand_f32(&[3, 4], 54);
    let m = rand_f32(&[2, 3], 55);
    check_vmap(
        "broadcasts",
        |a: &[Tensor]| {
            let (v, m) = (&a[0], &a[1]);
            vec![
                v.broadcast_to(&[2, 3]),
                v.broadcast_in_dim(&[3, 2], &[0]),
                v.broadcast_in_dim(&[2, 3, 4], &[1]),
                v.expand_dims(0).broadcast_to(&[2, 2, 3]),
                m + v,
                m.broadcast_to(&[2, 2, 3]),
            ]
        },
        &[Some(1), None],
        &[Some(1)],
        &[v, m],
        Tol::EXACT,
    );
}

#[test]
fn slices_with_strides() {
    let x = rand_f32(&[5, 3, 6], 56);
    check_vmap(
        "slice",
        |a: &[Tensor]| {
            let x = &a[0];
            vec![
                x.slice(&[1, 0], &[5, 6], Some(&[2, 3])),
                x.slice_axis(1, 2, 5),
                x.slice(&[0, 1], &[3, 4], None),
                x.slice(&[4, 5], &[5, 6], None),
            ]
        },
        &[Some(1)],
        &[Some(2)],
        &[x],
        Tol::EXACT,
    );
}

#[test]
fn concatenate_batched_and_shared_operands() {
    // x batched (examples (2, 3)), w shared (2, 3), z shared (4, 3), y batched on axis 2.
    let x = rand_f32(&[3, 2, 3], 57);
    let w = rand_f32(&[2, 3], 58);
    let z = rand_f32(&[4, 3], 59);
    let y = rand_f32(&[2, 1, 3], 60);
    check_vmap(
        "concatenate",
        |a: &[Tensor]| {
            let (x, w, z, y) = (&a[0], &a[1], &a[2], &a[3]);
            vec![
                Tensor::concatenate(&[x, w], 0),
                Tensor::concatenate(&[w, x, w], 1),
                Tensor::concatenate(&[z, x], 0),
                Tensor::concatenate(&[x, y], 1),
                Tensor::concatenate(&[w, z], 0),
                Tensor::stack(&[x, w, x], 1),
            ]
        },
        &[Some(0), None, None, Some(2)],
        &[Some(1)],
        &[x, w, z, y],
        Tol::EXACT,
    );
}

#[test]
fn pad_with_edges_and_interior() {
    let x = rand_f32(&[3, 3, 2], 61);
    let xi = rand_i32(&[3, 2, 3], 62, -9, 9);
    check_vmap(
        "pad",
        |a: &[Tensor]| {
            let (x, xi) = (&a[0], &a[1]);
            vec![
                x.pad(&[1, 0], &[2, 1], 7.0f32),
                x.pad_interior(&[0, 1], &[1, 0], &[1, 2], -1.5f32),
                xi.pad_interior(&[2, 0], &[0, 1], &[2, 0], 5i32),
            ]
        },
        &[Some(0), Some(2)],
        &[Some(1)],
        &[x, xi],
        Tol::EXACT,
    );
}

// ---- indexing ------------------------------------------------------------------------------------

#[test]
fn take_with_x_batched_and_indices_shared() {
    // x examples (5, 4); idx shared (2, 2) with negative and out-of-range entries.
    let x = rand_f32(&[3, 5, 4], 63);
    let idx = i32_array(vec![0, -1, 7, 2], &[2, 2]);
    check_vmap(
        "take x batched",
        |a: &[Tensor]| {
            let (x, i) = (&a[0], &a[1]);
            vec![x.index_take(i, 0), x.index_take(i, 1), x.index_take(i, -1)]
        },
        &[Some(0), None],
        &[Some(0)],
        &[x, idx.clone()],
        Tol::EXACT,
    );
    // x mapped on its middle axis, u32 indices.
    let x2 = rand_f32(&[5, 3, 4], 64);
    let iu = rand_u32(&[3], 65, 0, 6);
    check_vmap(
        "take x batched on axis 1, u32 idx",
        |a: &[Tensor]| vec![a[0].index_take(&a[1], 1), a[0].index_take(&a[1], 0)],
        &[Some(1), None],
        &[Some(2)],
        &[x2, iu],
        Tol::EXACT,
    );
}

#[test]
fn take_with_x_shared_and_indices_batched() {
    // x shared (5, 4); idx examples (3,) mapped on axis 1 of (3, B=4).
    let x = rand_f32(&[5, 4], 66);
    let idx = rand_i32(&[3, 4], 67, -6, 6);
    check_vmap(
        "take idx batched",
        |a: &[Tensor]| {
            let (x, i) = (&a[0], &a[1]);
            vec![x.index_take(i, 0), x.index_take(i, 1)]
        },
        &[None, Some(1)],
        &[Some(0)],
        &[x, idx],
        Tol::EXACT,
    );
    // 3-D x, 2-D index examples.
    let x3 = rand_i32(&[2, 5, 3], 68, -50, 50);
    let idx2 = rand_i32(&[3, 2, 2], 69, -5, 4);
    check_vmap(
        "take idx batched, 2-D idx",
        |a: &[Tensor]| vec![a[0].index_take(&a[1], 1), a[0].index_take(&a[1], 2)],
        &[None, Some(0)],
        &[Some(1)],
        &[x3, idx2],
        Tol::EXACT,
    );
}

#[test]
fn take_with_both_batched_and_negative_indices() {
    // x examples (5, 4) mapped on axis 1; idx examples (2, 3) mapped on axis 0, with negative
    // indices (wrapped once) and out-of-range ones both ways (clamped).
    let x = rand_f32(&[5, 3, 4], 70);
    let idx = i32_array(
        vec![
            0, -1, 4, 9, -5, -9, //
            2, -2, 1, 3, -4, 6, //
            -3, 0, 5, 1, -1, -6,
        ],
        &[3, 2, 3],
    );
    let want = check_vmap(
        "take both batched",
        |a: &[Tensor]| {
            let (x, i) = (&a[0], &a[1]);
            vec![x.index_take(i, 0), x.index_take(i, 1)]
        },
        &[Some(1), Some(0)],
        &[Some(0)],
        &[x.clone(), idx.clone()],
        Tol::EXACT,
    );
    // Independent host check of output 0: out[b][p][q][k] = x[norm(idx[b][p][q])][b][k].
    let (xh, ih) = (f32s_of(&host(&x)), host(&idx).to_vec::<i32>().unwrap());
    let norm = |i: i32, n: i32| (if i < 0 { i + n } else { i }).clamp(0, n - 1) as usize;
    let mut w0 = Vec::new();
    for b in 0..3 {
        for pq in 0..6 {
            let r = norm(ih[b * 6 + pq], 5);
            for k in 0..4 {
                w0.push(xh[(r * 3 + b) * 4 + k]);
            }
        }
    }
    assert_eq!(want[0].shape, vec![3, 2, 3, 4]);
    assert_eq!(f32s_of(&want[0]), w0, "host check of the take oracle");
    // x with axes before and after the taken one: examples (2, 5, 3), take along axis 1 with
    // 2-D indices (result (2, 2, 2, 3)); x mapped on axis 0, idx on axis 2.
    let x3 = rand_i32(&[3, 2, 5, 3], 71, -50, 50);
    let idx3 = rand_i32(&[2, 2, 3], 72, -7, 7);
    check_vmap(
        "take both batched, middle axis",
        |a: &[Tensor]| {
            vec![
                a[0].index_take(&a[1], 1),
                a[0].index_take(&a[1], 2),
                a[0].index_take(&a[1], 0),
            ]
        },
        &[Some(0), Some(2)],
        &[Some(3)],
        &[x3, idx3],
        Tol::EXACT,
    );
    // u32 indices within range and just past the end.
    let xu = rand_f32(&[3, 4, 2], 73);
    let iu = rand_u32(&[3, 3], 74, 0, 6);
    check_vmap(
        "take both batched, u32",
        |a: &[Tensor]| vec![a[0].index_take(&a[1], 0)],
        &[Some(0), Some(1)],
        &[Some(0)],
        &[xu, iu],
        Tol::EXACT,
    );
}

#[test]
fn take_with_both_batched_and_huge_u32_indices_clamps_like_take() {
    // `take` clamps an out-of-range u32 index to the last entry (min(i, n - 1)); indices of 2^31
    // and more must not turn into negative i32 inside the batching rule.
    let x = rand_f32(&[2, 4], 75);
    let idx = Array::from_vec(vec![3_000_000_000u32, 1, 2_147_483_648, 0], &[2, 2]).unwrap();
    let want = check_vmap(
        "take both batched, u32 >= 2^31",
        |a: &[Tensor]| vec![a[0].index_take(&a[1], 0)],
        &[Some(0), Some(0)],
        &[Some(0)],
        &[x.clone(), idx],
        Tol::EXACT,
    );
    // Host check of the oracle: example b picks x[b][min(i, 3)].
    let xh = f32s_of(&host(&x));
    assert_eq!(
        f32s_of(&want[0]),
        vec![xh[3], xh[1], xh[7], xh[4]],
        "host check of the oracle"
    );
}

#[test]
fn one_hot_of_batched_and_shared_classes() {
    // Classes in [-1, 6] with depth 5: -1 and 5, 6 give all-zero rows.
    let idx = i32_array(vec![0, 4, -1, 2, 5, 1, 3, 6, 2, 2, 0, 4], &[3, 4]);
    let x = rand_f32(&[4, 5, 3], 76);
    let shared = i32_array(vec![3, 0, 4, 1], &[4]);
    check_vmap(
        "one_hot",
        |a: &[Tensor]| {
            let (i, x, s) = (&a[0], &a[1], &a[2]);
            vec![i.one_hot(5), s.one_hot(5) * x, i.one_hot(5) * x]
        },
        &[Some(0), Some(2), None],
        &[Some(0)],
        &[idx, x, shared],
        Tol::EXACT,
    );
}

#[test]
fn softmax_log_softmax_and_logsumexp() {
    // x: (4, B=3, 5) mapped on axis 1; examples (4, 5).
    let x = rand_f32(&[4, 3, 5], 77);
    check_vmap(
        "softmax",
        |a: &[Tensor]| {
            let x = &a[0];
            vec![
                x.softmax(-1),
                x.softmax(0),
                x.log_softmax(1),
                x.log_softmax(0),
                x.logsumexp([0i64, 1], false),
            ]
        },
        &[Some(1)],
        &[Some(1), Some(1), Some(1), Some(1), Some(0)],
        &[x],
        Tol::REDUCE,
    );
}

#[test]
fn a_small_mlp_per_example() {
    // A composite: per-example MLP with shared weights, cross-entropy against batched labels.
    let x = rand_f32(&[3, 4], 78);
    let w1 = rand_f32(&[4, 5], 79);
    let w2 = rand_f32(&[5, 3], 80);
    let y = i32_array(vec![2, 0, 1], &[3]);
    check_vmap(
        "mlp",
        |a: &[Tensor]| {
            let (x, w1, w2, y) = (&a[0], &a[1], &a[2], &a[3]);
            let h = x.matmul(w1).relu();
            let logits = h.matmul(w2);
            let loss = -(logits.log_softmax(-1) * y.one_hot(3)).sum_all();
            vec![logits.clone(), loss, logits.argmax(-1, false)]
        },
        &[Some(0), None, None, Some(0)],
        &[Some(0)],
        &[x, w1, w2, y],
        Tol::REDUCE,
    );
}

// ---- collectives over the vmapped axis ---------------------------------------------------------------

#[test]
fn psum_over_the_vmapped_axis_matches_pmap() {
    // f32 mapped on axis 1 (n = 3), and i32; a psum result is the same for every example.
    let x = rand_f32(&[2, 3, 4], 81);
    let xi = rand_i32(&[3, 4], 82, -20, 20);
    let want = check_like_pmap(
        "psum",
        |a: &[Tensor]| {
            let (x, xi) = (&a[0], &a[1]);
            vec![psum(x, "b"), psum(xi, "b"), x * psum(x, "b")]
        },
        &[x.clone(), xi.clone()],
        &[Some(1), Some(0)],
        &[Some(0)],
        &cpu(3),
        Tol::EXACT,
    );
    // Host check of the oracle: every example gets the i32 column sums.
    let xh = host(&xi).to_vec::<i32>().unwrap();
    let sums: Vec<i32> = (0..4)
        .map(|k| (0..3).map(|r| xh[r * 4 + k]).sum())
        .collect();
    let got = want[1].to_vec::<i32>().unwrap();
    for r in 0..3 {
        assert_eq!(
            got[r * 4..r * 4 + 4],
            sums[..],
            "psum host check, example {r}"
        );
    }
    // The same against pmap on two Vulkan devices.
    check_like_pmap(
        "psum vs vulkan pmap",
        |a: &[Tensor]| vec![psum(&a[0], "b"), psum(&a[0], "b") - &a[0]],
        &[rand_f32(&[2, 3, 2], 83)],
        &[Some(0)],
        &[Some(0)],
        &devices_with("vulkan:2"),
        Tol::EXACT,
    );
}

#[test]
fn psum_with_out_axes_none_returns_one_value() {
    let x = rand_f32(&[4, 3], 84);
    let want = check_like_pmap(
        "psum out_axes None",
        |a: &[Tensor]| vec![psum(&a[0], "b"), pmax(&a[0], "b"), &a[0] * 2.0],
        std::slice::from_ref(&x),
        &[Some(0)],
        &[None, None, Some(1)],
        &cpu(4),
        Tol::EXACT,
    );
    assert_eq!(want[0].shape, vec![3]);
    assert_eq!(want[2].shape, vec![3, 4]);
}

#[test]
fn pmean_of_f32_over_the_vmapped_axis_matches_pmap() {
    // n = 3 (not a power of two): pmap divides the sum by 3, so vmap must too (multiplying by
    // the rounded 1/3 gives a different last bit for some values).
    let x = rand_f32(&[3, 2, 5], 85);
    check_like_pmap(
        "pmean f32",
        |a: &[Tensor]| vec![pmean(&a[0], "b"), &a[0] - pmean(&a[0], "b")],
        &[x],
        &[Some(0)],
        &[Some(0)],
        &cpu(3),
        Tol::EXACT,
    );
}

#[test]
fn pmean_of_i32_over_the_vmapped_axis_matches_pmap() {
    // Integers are averaged as psum -> f32 -> / n under both.
    let xi = rand_i32(&[5, 3], 86, -20, 20);
    let want = check_like_pmap(
        "pmean i32",
        |a: &[Tensor]| vec![pmean(&a[0], "b")],
        std::slice::from_ref(&xi),
        &[Some(1)],
        &[Some(0)],
        &cpu(3),
        Tol::EXACT,
    );
    // Host check of the oracle: example r of row k is sum_r' xi[k][r'] / 3 (f32 division).
    let xh = host(&xi).to_vec::<i32>().unwrap();
    let got = f32s_of(&want[0]);
    for r in 0..3 {
        for k in 0..5 {
            let s: i32 = (0..3).map(|c| xh[k * 3 + c]).sum();
            assert_eq!(
                got[r * 5 + k],
                s as f32 / 3.0,
                "pmean i32 host check ({r}, {k})"
            );
        }
    }
}

#[test]
fn pmax_and_pmin_over_the_vmapped_axis_match_pmap() {
    let x = rand_f32(&[2, 4, 3], 87);
    let xi = rand_i32(&[4, 3], 88, -20, 20);
    check_like_pmap(
        "pmax/pmin",
        |a: &[Tensor]| {
            let (x, xi) = (&a[0], &a[1]);
            vec![pmax(x, "b"), pmin(x, "b"), pmax(xi, "b"), pmin(xi, "b")]
        },
        &[x, xi],
        &[Some(1), Some(0)],
        &[Some(1)],
        &cpu(4),
        Tol::EXACT,
    );
}

#[test]
fn all_gather_stacked_and_tiled_matches_pmap() {
    let x = rand_f32(&[3, 2, 4], 89);
    check_like_pmap(
        "all_gather",
        |a: &[Tensor]| {
            let x = &a[0];
            vec![
                all_gather(x, "b", 0, false),
                all_gather(x, "b", 1, false),
                all_gather(x, "b", 2, false),
                all_gather(x, "b", 0, true),
                all_gather(x, "b", 1, true),
            ]
        },
        &[x],
        &[Some(0)],
        &[Some(0)],
        &cpu(3),
        Tol::EXACT,
    );
}

#[test]
fn psum_scatter_untiled_and_tiled_matches_pmap() {
    // Examples (2, 3) for the untiled scatter along axis 1 (size n = 3) and (6, 2) for the tiled
    // scatter along axis 0 (blocks of 2).
    let x = rand_f32(&[3, 2, 3], 90);
    let y = rand_i32(&[6, 3, 2], 91, -20, 20);
    check_like_pmap(
        "psum_scatter",
        |a: &[Tensor]| {
            let (x, y) = (&a[0], &a[1]);
            vec![
                psum_scatter(x, "b", 1, false),
                psum_scatter(y, "b", 0, true),
                psum_scatter(x, "b", 1, true),
            ]
        },
        &[x, y],
        &[Some(0), Some(1)],
        &[Some(0)],
        &cpu(3),
        Tol::EXACT,
    );
}

#[test]
fn ppermute_cyclic_and_partial_matches_pmap() {
    let x = rand_f32(&[4, 2, 3], 92);
    let xi = rand_i32(&[2, 4], 93, -20, 20);
    let want = check_like_pmap(
        "ppermute",
        |a: &[Tensor]| {
            let (x, xi) = (&a[0], &a[1]);
            vec![
                ppermute(x, "b", &[(0, 1), (1, 2), (2, 3), (3, 0)]),
                ppermute(x, "b", &[(0, 2), (2, 1)]),
                ppermute(xi, "b", &[(3, 0), (1, 3)]),
            ]
        },
        &[x.clone(), xi],
        &[Some(0), Some(1)],
        &[Some(0)],
        &cpu(4),
        Tol::EXACT,
    );
    // Host check of the partial permutation: example 2 gets example 0, 1 gets 2, 0 and 3 zeros.
    let xh = f32s_of(&host(&x));
    let got = f32s_of(&want[1]);
    assert_eq!(got[12..18], xh[0..6]);
    assert_eq!(got[6..12], xh[12..18]);
    assert!(got[0..6].iter().chain(&got[18..24]).all(|&v| v == 0.0));
}

#[test]
fn all_to_all_untiled_and_tiled_matches_pmap() {
    // n = 3. Untiled: examples (2, 3, 4) split along axis 1 (size n), concatenated at 0 or 2;
    // and (3, 2) split 0 concat 1. Tiled: examples (6, 2) split 0 (chunks of 2) concat 1, and
    // split 0 concat 0 (the same axis); examples (2, 3, 4) split 1 (chunks of 1) concat 0.
    let x = rand_f32(&[3, 2, 3, 4], 94);
    let y = rand_f32(&[3, 3, 2], 95);
    let z = rand_i32(&[6, 3, 2], 96, -20, 20);
    check_like_pmap(
        "all_to_all",
        |a: &[Tensor]| {
            let (x, y, z) = (&a[0], &a[1], &a[2]);
            vec![
                all_to_all(x, "b", 1, 0, false),
                all_to_all(x, "b", 1, 2, false),
                all_to_all(x, "b", 1, 1, false),
                all_to_all(y, "b", 0, 1, false),
                all_to_all(z, "b", 0, 1, true),
                all_to_all(z, "b", 0, 0, true),
                all_to_all(x, "b", 1, 0, true),
            ]
        },
        &[x, y, z],
        &[Some(0), Some(0), Some(1)],
        &[Some(0)],
        &cpu(3),
        Tol::EXACT,
    );
    // And against pmap on two Vulkan devices.
    check_like_pmap(
        "all_to_all vs vulkan pmap",
        |a: &[Tensor]| {
            vec![
                all_to_all(&a[0], "b", 0, 1, false),
                all_to_all(&a[0], "b", 1, 0, true),
            ]
        },
        &[rand_f32(&[2, 2, 4], 97)],
        &[Some(0)],
        &[Some(0)],
        &devices_with("vulkan:2"),
        Tol::EXACT,
    );
}

#[test]
fn axis_index_and_axis_size_match_pmap() {
    let x = rand_f32(&[2, 3], 98);
    let want = check_like_pmap(
        "axis_index/axis_size",
        |a: &[Tensor]| {
            let n = axis_size("b").expect("the axis is bound") as f32;
            vec![
                axis_index("b"),
                &a[0] + axis_index("b").cast(DType::F32),
                &a[0] * n,
                axis_index("b") * 10 + 1,
            ]
        },
        &[x],
        &[Some(1)],
        &[Some(0)],
        &cpu(3),
        Tol::EXACT,
    );
    assert_eq!(want[0].to_vec::<i32>().unwrap(), vec![0, 1, 2]);
}

#[test]
fn collectives_of_a_shared_argument_match_pmap() {
    // w is not mapped: psum gives n * w, all_gather n copies, ppermute moves copies around.
    let x = rand_f32(&[3, 6], 99);
    let w = rand_f32(&[6], 100);
    check_like_pmap(
        "collectives of a shared value",
        |a: &[Tensor]| {
            let (x, w) = (&a[0], &a[1]);
            vec![
                psum(w, "b"),
                all_gather(w, "b", 0, false),
                ppermute(w, "b", &[(0, 1), (1, 2)]) + x,
                psum_scatter(&w.reshape(&[3, 2]), "b", 0, false),
                pmax(w, "b"),
            ]
        },
        &[x, w],
        &[Some(0), None],
        &[Some(0)],
        &cpu(3),
        Tol::EXACT,
    );
}

// ---- nesting -------------------------------------------------------------------------------------------

/// Index of `idx` in a row-major array of `shape`.
fn at(shape: &[usize], idx: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (i, s)| {
        assert!(i < s);
        acc * s + i
    })
}

#[test]
fn pmap_of_vmap_closing_over_the_pmap_argument() {
    // pmap over 2 Vulkan devices of vmap over 3 examples; the vmap body uses the pmap argument w
    // (different on each device) and returns it as is.
    let devs = devices_with("vulkan:2");
    let x = rand_f32(&[2, 3, 4], 101);
    let w = rand_f32(&[2, 4], 102);
    let f = pmap(|a: &[Tensor]| {
        let w = a[1].clone();
        vmap(move |b: &[Tensor]| vec![&b[0] * &w + w.sum_all(), w.clone(), b[0].matmul(&w)])
            .apply(&a[..1])
    })
    .devices(&devs);
    let outs = f.call(&[x.clone(), w.clone()]).expect("pmap(vmap)");
    let (xh, wh) = (f32s_of(&host(&x)), f32s_of(&host(&w)));
    let (mut w0, mut w1, mut w2) = (Vec::new(), Vec::new(), Vec::new());
    for d in 0..2 {
        let ws: f32 = wh[d * 4..d * 4 + 4].iter().sum();
        for i in 0..3 {
            let mut dot = 0.0f32;
            for k in 0..4 {
                let xv = xh[at(&[2, 3, 4], &[d, i, k])];
                w0.push(xv * wh[d * 4 + k] + ws);
                w1.push(wh[d * 4 + k]);
                dot += xv * wh[d * 4 + k];
            }
            w2.push(dot);
        }
    }
    let want =
        |v: Vec<f32>, shape: &[usize]| HostArray::new(shape.to_vec(), HostData::F32(v)).unwrap();
    assert_close(
        &host(&outs[0]),
        &want(w0, &[2, 3, 4]),
        Tol::ARITH,
        "x * w + sum(w)",
    );
    assert_close(
        &host(&outs[1]),
        &want(w1, &[2, 3, 4]),
        Tol::EXACT,
        "captured w returned",
    );
    assert_close(&host(&outs[2]), &want(w2, &[2, 3]), Tol::REDUCE, "x @ w");
}

#[test]
fn vmap_of_vmap_with_different_in_axes() {
    // Outer: X (4, B1=3, 2) mapped on axis 1, Y (2, 4) shared -> x (4, 2), y (2, 4).
    // Inner: x mapped on axis 1, y on axis 0 -> vectors of 4.
    let xs = rand_f32(&[4, 3, 2], 103);
    let ys = rand_f32(&[2, 4], 104);
    let inner = |a: &[Tensor]| {
        vmap(|b: &[Tensor]| vec![(&b[0] * &b[1]).sum_all(), &b[0] * &b[1]])
            .in_axes(&[Some(1), Some(0)])
            .out_axes(&[Some(0), Some(1)])
            .apply(a)
    };
    let (xh, yh) = (f32s_of(&host(&xs)), f32s_of(&host(&ys)));
    // out0[j][i] = sum_k X[k][i][j] Y[j][k] (inner stacks j at 0, outer stacks i at 1);
    // out1[k][i][j] = X[k][i][j] Y[j][k] (inner stacks j at 1 of (4, 2), outer i at 1).
    let mut w0 = vec![0.0f32; 6];
    let mut w1 = vec![0.0f32; 24];
    for j in 0..2 {
        for i in 0..3 {
            for k in 0..4 {
                let p = xh[at(&[4, 3, 2], &[k, i, j])] * yh[j * 4 + k];
                w0[j * 3 + i] += p;
                w1[at(&[4, 3, 2], &[k, i, j])] = p;
            }
        }
    }
    for dev in gpu_devices() {
        let _guard = device_guard(&dev);
        let outs = vmap(inner)
            .in_axes(&[Some(1), None])
            .out_axes(&[Some(1)])
            .on(&dev)
            .call(&[xs.clone(), ys.clone()])
            .unwrap_or_else(|e| panic!("vmap(vmap) on {}: {e}", dev.name()));
        let ctx = format!("vmap(vmap) on {}", dev.name());
        let o0 = host(&outs[0]);
        assert_eq!(o0.shape, vec![2, 3], "{ctx}");
        assert_close(
            &o0,
            &HostArray::new(vec![2, 3], HostData::F32(w0.clone())).unwrap(),
            Tol::REDUCE,
            &ctx,
        );
        assert_close(
            &host(&outs[1]),
            &HostArray::new(vec![4, 3, 2], HostData::F32(w1.clone())).unwrap(),
            Tol::ARITH,
            &ctx,
        );
    }
}

#[test]
fn vmap_of_vmap_with_named_axes() {
    // X (3, 2, 4): outer axis "a" (3 examples), inner axis "c" (2). Collectives over either name
    // from inside the inner function.
    let xs = rand_f32(&[3, 2, 4], 105);
    let f = |a: &[Tensor]| {
        vmap(|b: &[Tensor]| {
            let x = &b[0];
            vec![
                psum(x, "a"),
                psum(x, "c"),
                axis_index("a") * 10 + axis_index("c"),
                all_gather(x, "a", 0, false),
            ]
        })
        .axis_name("c")
        .apply(a)
    };
    let xh = f32s_of(&host(&xs));
    let s = [3, 2, 4];
    let mut w0 = vec![0.0f32; 24];
    let mut w1 = vec![0.0f32; 24];
    let mut w3 = vec![0.0f32; 3 * 2 * 3 * 4];
    for i in 0..3 {
        for j in 0..2 {
            for k in 0..4 {
                let here = at(&s, &[i, j, k]);
                w0[here] = (0..3).map(|i2| xh[at(&s, &[i2, j, k])]).sum();
                w1[here] = (0..2).map(|j2| xh[at(&s, &[i, j2, k])]).sum();
                for i2 in 0..3 {
                    w3[at(&[3, 2, 3, 4], &[i, j, i2, k])] = xh[at(&s, &[i2, j, k])];
                }
            }
        }
    }
    for dev in gpu_devices() {
        let _guard = device_guard(&dev);
        let outs = vmap(f)
            .axis_name("a")
            .on(&dev)
            .call(std::slice::from_ref(&xs))
            .unwrap_or_else(|e| panic!("named vmap(vmap) on {}: {e}", dev.name()));
        let ctx = format!("named vmap(vmap) on {}", dev.name());
        let f32h = |v: &[f32], shape: &[usize]| {
            HostArray::new(shape.to_vec(), HostData::F32(v.to_vec())).unwrap()
        };
        assert_close(
            &host(&outs[0]),
            &f32h(&w0, &s),
            Tol::REDUCE,
            &format!("{ctx}: psum a"),
        );
        assert_close(
            &host(&outs[1]),
            &f32h(&w1, &s),
            Tol::REDUCE,
            &format!("{ctx}: psum c"),
        );
        assert_eq!(
            host(&outs[2]).to_vec::<i32>().unwrap(),
            vec![0, 1, 10, 11, 20, 21],
            "{ctx}: axis indices"
        );
        assert_close(
            &host(&outs[3]),
            &f32h(&w3, &[3, 2, 3, 4]),
            Tol::EXACT,
            &format!("{ctx}: all_gather a"),
        );
    }
}

#[test]
fn vmap_inside_jit() {
    // jit(|a| vmap(g).apply(a) + 1) against the per-example oracle of g (+ 1 on the host).
    let x = rand_f32(&[2, 3, 4], 106);
    let w = rand_f32(&[4, 2], 107);
    let g = |b: &[Tensor]| vec![b[0].matmul(&b[1]).softmax(-1), b[0].sum(0, false)];
    let want = expected(&g, &[x.clone(), w.clone()], &[Some(1), None], &[Some(1)]);
    for dev in gpu_devices() {
        let _guard = device_guard(&dev);
        let j = jit(|a: &[Tensor]| {
            let y = vmap(g)
                .in_axes(&[Some(1), None])
                .out_axes(&[Some(1)])
                .apply(a);
            vec![&y[0] + 1.0, y[1].clone()]
        })
        .on(&dev);
        let outs = j
            .call(&[x.clone(), w.clone()])
            .unwrap_or_else(|e| panic!("jit(vmap) on {}: {e}", dev.name()));
        let plus1: Vec<f32> = f32s_of(&want[0]).iter().map(|v| v + 1.0).collect();
        let w0 = HostArray::new(want[0].shape.clone(), HostData::F32(plus1)).unwrap();
        let ctx = format!("jit(vmap) on {}", dev.name());
        assert_close(&host(&outs[0]), &w0, Tol::REDUCE, &ctx);
        assert_close(&host(&outs[1]), &want[1], Tol::REDUCE, &ctx);
    }
}

#[test]
fn vmap_applied_to_concrete_tensors_runs_eagerly() {
    let dev = device_of("vulkan");
    let x = rand_f32(&[3, 4], 108).to_device(&dev).unwrap();
    let w = rand_f32(&[4], 109).to_device(&dev).unwrap();
    let g = |b: &[Tensor]| vec![(&b[0] * &b[1]).sum_all()];
    let out = vmap(g)
        .in_axes(&[Some(0), None])
        .apply(&[Tensor::from(&x), Tensor::from(&w)]);
    assert!(!out[0].is_traced());
    let got = out[0].to_array().expect("eager vmap result");
    let want = expected(&g, &[x, w], &[Some(0), None], &[Some(0)]);
    assert_close(&host(&got), &want[0], Tol::REDUCE, "eager vmap");
}

#[test]
fn collectives_over_an_outer_pmap_axis_inside_vmap() {
    // pmap over n devices (axis "i") of vmap over B = 3 examples of (n, 3); every collective is
    // over the pmap axis, so it runs across devices for each example separately.
    for (layout, n) in [("vulkan:2", 2usize), ("cpu:3", 3)] {
        let devs = devices_with(layout);
        assert_eq!(devs.len(), n);
        let x = rand_f32(&[n, 3, n, 3], 110 + n as u64);
        let f = pmap(|a: &[Tensor]| {
            vmap(|b: &[Tensor]| {
                let x = &b[0];
                vec![
                    psum(x, "i"),
                    all_gather(x, "i", 0, false),
                    all_gather(x, "i", 1, true),
                    psum_scatter(x, "i", 0, false),
                    ppermute(x, "i", &[(0, 1)]),
                    all_to_all(x, "i", 0, 1, false),
                    x + axis_index("i").cast(DType::F32),
                    pmax(x, "i"),
                ]
            })
            .apply(a)
        })
        .axis_name("i")
        .devices(&devs);
        let outs = f
            .call(std::slice::from_ref(&x))
            .unwrap_or_else(|e| panic!("{layout}: pmap(vmap(psum)) failed: {e}"));
        let xh = f32s_of(&host(&x));
        let s = [n, 3, n, 3];
        let xv = |d: usize, i: usize, p: usize, q: usize| xh[at(&s, &[d, i, p, q])];
        let mut w: Vec<(Vec<usize>, Vec<f32>)> = vec![
            (vec![n, 3, n, 3], vec![]),
            (vec![n, 3, n, n, 3], vec![]),
            (vec![n, 3, n, n * 3], vec![]),
            (vec![n, 3, 3], vec![]),
            (vec![n, 3, n, 3], vec![]),
            (vec![n, 3, 3, n], vec![]),
            (vec![n, 3, n, 3], vec![]),
            (vec![n, 3, n, 3], vec![]),
        ];
        for d in 0..n {
            for i in 0..3 {
                for p in 0..n {
                    for q in 0..3 {
                        w[0].1.push((0..n).map(|d2| xv(d2, i, p, q)).sum());
                        w[4].1.push(if d == 1 { xv(0, i, p, q) } else { 0.0 });
                        w[6].1.push(xv(d, i, p, q) + d as f32);
                        w[7].1
                            .push((0..n).map(|d2| xv(d2, i, p, q)).fold(f32::MIN, f32::max));
                    }
                }
                for d2 in 0..n {
                    for p in 0..n {
                        for q in 0..3 {
                            w[1].1.push(xv(d2, i, p, q));
                        }
                    }
                }
                for p in 0..n {
                    for d2 in 0..n {
                        for q in 0..3 {
                            w[2].1.push(xv(d2, i, p, q));
                        }
                    }
                }
                for q in 0..3 {
                    w[3].1.push((0..n).map(|d2| xv(d2, i, d, q)).sum());
                    for j in 0..n {
                        w[5].1.push(xv(j, i, d, q));
                    }
                }
            }
        }
        let names = [
            "psum",
            "all_gather",
            "all_gather tiled",
            "psum_scatter",
            "ppermute",
            "all_to_all",
            "axis_index",
            "pmax",
        ];
        assert_eq!(outs.len(), w.len());
        for (k, ((shape, v), name)) in w.into_iter().zip(names).enumerate() {
            let tol = if name.starts_with("ps") {
                Tol::REDUCE
            } else {
                Tol::EXACT
            };
            assert_close(
                &host(&outs[k]),
                &HostArray::new(shape, HostData::F32(v)).unwrap(),
                tol,
                &format!("{layout}: output {k} ({name}) of pmap(vmap)"),
            );
        }
    }
}

// ---- errors ------------------------------------------------------------------------------------------

fn err_of(r: brigade::Result<Vec<Array>>) -> Error {
    match r {
        Ok(v) => panic!("expected an error, got {} outputs", v.len()),
        Err(e) => e,
    }
}

fn assert_mentions(e: &Error, needles: &[&str]) {
    let msg = e.to_string();
    for n in needles {
        assert!(msg.contains(n), "message {msg:?} should mention {n:?}");
    }
}

fn double(a: &[Tensor]) -> Vec<Tensor> {
    a.iter().map(|t| t * 2.0).collect()
}

#[test]
fn in_axes_arity_and_rank_errors() {
    let x = rand_f32(&[3, 2], 120);
    let y = rand_f32(&[3, 2], 121);
    let e = err_of(
        vmap(double)
            .in_axes(&[Some(0)])
            .call(&[x.clone(), y.clone()]),
    );
    assert!(
        matches!(&e, Error::BadParallelArg { op: "vmap", .. }),
        "{e:?}"
    );
    assert_mentions(&e, &["in_axes has 1 entries", "2 arguments"]);
    let e = err_of(vmap(double).in_axes(&[Some(0), Some(2)]).call(&[x, y]));
    assert!(
        matches!(&e, Error::BadParallelArg { op: "vmap", .. }),
        "{e:?}"
    );
    assert_mentions(&e, &["in_axes[1] is Some(2)", "rank 2", "[3, 2]"]);
}

#[test]
fn mismatched_mapped_sizes_name_both_arguments() {
    let x = rand_f32(&[3, 2], 122);
    let y = rand_f32(&[2, 4], 123);
    let e = err_of(vmap(double).in_axes(&[Some(0), Some(1)]).call(&[x, y]));
    match &e {
        Error::MappedSizeMismatch {
            op,
            first_arg,
            first_axis,
            first_size,
            arg,
            axis,
            size,
            ..
        } => {
            assert_eq!(
                (
                    *op,
                    *first_arg,
                    *first_axis,
                    *first_size,
                    *arg,
                    *axis,
                    *size
                ),
                ("vmap", 0, 0, 3, 1, 1, 4)
            );
        }
        other => panic!("expected MappedSizeMismatch, got {other:?}"),
    }
    assert_mentions(&e, &["vmap", "argument 0 has 3", "argument 1 has 4"]);
}

#[test]
fn axis_size_must_agree_with_the_data() {
    let x = rand_f32(&[3, 2], 124);
    let e = err_of(vmap(double).axis_size(5).call(&[x]));
    match &e {
        Error::AxisSizeMismatch {
            op,
            axis_size,
            arg,
            axis,
            size,
        } => assert_eq!((*op, *axis_size, *arg, *axis, *size), ("vmap", 5, 0, 0, 3)),
        other => panic!("expected AxisSizeMismatch, got {other:?}"),
    }
    assert_mentions(&e, &["axis_size is 5", "3 entries"]);
}

#[test]
fn nothing_mapped_needs_axis_size_and_then_broadcasts() {
    let w = rand_f32(&[2, 3], 125);
    let e = err_of(vmap(double).in_axes(&[None]).call(std::slice::from_ref(&w)));
    assert!(matches!(e, Error::NothingMapped { op: "vmap" }), "{e:?}");
    // With axis_size, every example computes the same thing: the result is broadcast.
    let dev = device_of("vulkan");
    let outs = vmap(|a: &[Tensor]| vec![&a[0] * 2.0, psum(&a[0], "b")])
        .in_axes(&[None])
        .axis_size(4)
        .axis_name("b")
        .on(&dev)
        .call(std::slice::from_ref(&w))
        .expect("vmap with axis_size and nothing mapped");
    let wh = f32s_of(&host(&w));
    let o0 = host(&outs[0]);
    assert_eq!(o0.shape, vec![4, 2, 3]);
    let twice: Vec<f32> = (0..4).flat_map(|_| wh.iter().map(|v| v * 2.0)).collect();
    assert_eq!(f32s_of(&o0), twice);
    let o1 = host(&outs[1]);
    assert_eq!(o1.shape, vec![4, 2, 3]);
    let four: Vec<f32> = (0..4).flat_map(|_| wh.iter().map(|v| v * 4.0)).collect();
    assert_close(
        &o1,
        &HostArray::new(vec![4, 2, 3], HostData::F32(four)).unwrap(),
        Tol::ARITH,
        "psum of a broadcast value",
    );
}

#[test]
fn out_axes_errors() {
    let x = rand_f32(&[3, 2], 126);
    let w = rand_f32(&[2], 127);
    let f = |a: &[Tensor]| vec![&a[1] + 1.0, &a[0] * &a[1]];
    // None for an output that varies over the batch.
    let e = err_of(
        vmap(f)
            .in_axes(&[Some(0), None])
            .out_axes(&[None, None])
            .call(&[x.clone(), w.clone()]),
    );
    match &e {
        Error::VaryingOutput { op, output, .. } => assert_eq!((*op, *output), ("vmap", 1)),
        other => panic!("expected VaryingOutput, got {other:?}"),
    }
    assert_mentions(&e, &["output 1"]);
    // Beyond the output's rank (2 with the batch axis).
    let e = err_of(
        vmap(f)
            .in_axes(&[Some(0), None])
            .out_axes(&[Some(0), Some(2)])
            .call(&[x.clone(), w.clone()]),
    );
    assert!(
        matches!(&e, Error::BadParallelArg { op: "vmap", .. }),
        "{e:?}"
    );
    assert_mentions(&e, &["out_axes[1] is Some(2)", "rank 2"]);
    // Wrong number of entries.
    let e = err_of(
        vmap(f)
            .in_axes(&[Some(0), None])
            .out_axes(&[Some(0), Some(0), Some(0)])
            .call(&[x.clone(), w.clone()]),
    );
    assert!(
        matches!(&e, Error::BadParallelArg { op: "vmap", .. }),
        "{e:?}"
    );
    assert_mentions(&e, &["out_axes has 3 entries", "2 outputs"]);
    // None is fine for the output that does not vary: returned once, without a batch axis.
    let dev = device_of("vulkan");
    let outs = vmap(f)
        .in_axes(&[Some(0), None])
        .out_axes(&[None, Some(1)])
        .on(&dev)
        .call(&[x.clone(), w.clone()])
        .expect("out_axes None for an unbatched output");
    let wh = f32s_of(&host(&w));
    assert_eq!(host(&outs[0]).shape, vec![2]);
    assert_eq!(f32s_of(&host(&outs[0])), vec![wh[0] + 1.0, wh[1] + 1.0]);
    assert_eq!(host(&outs[1]).shape, vec![2, 3]);
}

#[test]
fn errors_inside_enclosing_transforms_and_collectives() {
    let x = rand_f32(&[3, 2], 128);
    // An in_axes error of a vmap applied inside jit fails the jit call.
    let e = err_of(
        jit(|a: &[Tensor]| vmap(double).in_axes(&[Some(4)]).apply(a))
            .call(std::slice::from_ref(&x)),
    );
    assert!(
        matches!(&e, Error::BadParallelArg { op: "vmap", .. }),
        "{e:?}"
    );
    // A collective over a name no vmap binds.
    let e = err_of(
        vmap(|a: &[Tensor]| vec![psum(&a[0], "zz")])
            .axis_name("b")
            .call(std::slice::from_ref(&x)),
    );
    match &e {
        Error::UnboundAxis { name, .. } => assert_eq!(name, "zz"),
        other => panic!("expected UnboundAxis, got {other:?}"),
    }
    assert_mentions(&e, &["'b' of size 3"]);
    // psum_scatter over the vmapped axis needs the scatter dimension to have n entries.
    let e = err_of(
        vmap(|a: &[Tensor]| vec![psum_scatter(&a[0], "b", 0, false)])
            .axis_name("b")
            .call(std::slice::from_ref(&x)),
    );
    assert!(
        matches!(
            &e,
            Error::BadCollective {
                op: "psum_scatter",
                ..
            }
        ),
        "{e:?}"
    );
}

// ---- caching ---------------------------------------------------------------------------------------------

#[test]
fn a_second_call_with_the_same_shapes_does_not_trace_again() {
    let dev = device_of("vulkan");
    let g = |a: &[Tensor]| vec![(a[0].exp() * &a[1]).sum(0, false)];
    let v = vmap(g).in_axes(&[Some(1), None]).on(&dev);
    let (x1, x2) = (rand_f32(&[4, 3], 130), rand_f32(&[4, 3], 131));
    let w = rand_f32(&[4], 132);
    let c0 = counters();
    let r1 = v.call(&[x1.clone(), w.clone()]).expect("first call");
    let c1 = counters();
    let r2 = v.call(&[x2.clone(), w.clone()]).expect("second call");
    let c2 = counters();
    let first = c1.since(&c0);
    let second = c2.since(&c1);
    assert!(first.traces >= 1, "the first call traces ({first:?})");
    assert_eq!(
        second.traces, 0,
        "the second call reuses the trace ({second:?})"
    );
    assert_eq!(
        second.pipelines_created, 0,
        "and the pipelines ({second:?})"
    );
    assert!(
        second.dispatches > 0,
        "the second call still runs ({second:?})"
    );
    for (r, x) in [(&r1, &x1), (&r2, &x2)] {
        let want = expected(&g, &[x.clone(), w.clone()], &[Some(1), None], &[Some(0)]);
        assert_close(&host(&r[0]), &want[0], Tol::REDUCE, "cached vmap result");
    }
    // A different batch size is a new signature: traced again, and still right.
    let x3 = rand_f32(&[4, 5], 133);
    let c3 = counters();
    let r3 = v.call(&[x3.clone(), w.clone()]).expect("third call");
    assert!(counters().since(&c3).traces >= 1, "a new batch size traces");
    let want = expected(&g, &[x3, w], &[Some(1), None], &[Some(0)]);
    assert_close(&host(&r3[0]), &want[0], Tol::REDUCE, "new batch size");
}

#[test]
fn vmap_of_vmap_closing_over_the_outer_example() {
    // The inner function uses the outer example x (a value of the outer vmap's trace) besides its
    // own argument: out[i][j][k] = x[i][k] * y[j][k] + x[i][0].
    let xs = rand_f32(&[3, 4], 140);
    let ys = rand_f32(&[2, 4], 141);
    let f = |a: &[Tensor]| {
        let x = a[0].clone();
        vmap(move |b: &[Tensor]| vec![&b[0] * &x + x.slice_axis(0, 0, 1)]).apply(&a[1..])
    };
    let (xh, yh) = (f32s_of(&host(&xs)), f32s_of(&host(&ys)));
    let mut w = Vec::new();
    for i in 0..3 {
        for j in 0..2 {
            for k in 0..4 {
                w.push(xh[i * 4 + k] * yh[j * 4 + k] + xh[i * 4]);
            }
        }
    }
    let want = HostArray::new(vec![3, 2, 4], HostData::F32(w)).unwrap();
    for dev in gpu_devices() {
        let _guard = device_guard(&dev);
        let outs = vmap(f)
            .in_axes(&[Some(0), None])
            .on(&dev)
            .call(&[xs.clone(), ys.clone()])
            .unwrap_or_else(|e| panic!("vmap(vmap) closing over x on {}: {e}", dev.name()));
        assert_close(
            &host(&outs[0]),
            &want,
            Tol::ARITH,
            &format!("vmap(vmap) closing over x on {}", dev.name()),
        );
    }
}

#[test]
fn one_vmap_applied_inside_pmaps_of_different_sizes() {
    // The same Vmap object, applied inside pmap over 2 and then 3 devices, to examples of the
    // same shape: a collective over the pmap axis must see the size of the pmap it runs in
    // (all_gather stacks n entries, and a sum over them adds n values).
    let v = vmap(|b: &[Tensor]| vec![all_gather(&b[0], "i", 0, false), psum(&b[0], "i")]);
    for (n, layout) in [(2usize, "vulkan:2"), (3, "vulkan:3"), (3, "cpu:3")] {
        let devs = devices_with(layout);
        assert_eq!(devs.len(), n);
        let x = rand_f32(&[n, 2, 3], 150 + n as u64);
        let p = pmap(|a: &[Tensor]| {
            let o = v.apply(a);
            vec![o[0].clone(), o[0].sum(1, false), o[1].clone()]
        })
        .axis_name("i")
        .devices(&devs);
        let ctx = format!("reused vmap inside pmap over {layout}");
        let g = p
            .graph(std::slice::from_ref(&x))
            .unwrap_or_else(|e| panic!("{ctx}: graph: {e}"));
        let outs = p
            .call(std::slice::from_ref(&x))
            .unwrap_or_else(|e| panic!("{ctx}: {e}\n{g}"));
        let xh = f32s_of(&host(&x));
        let s = [n, 2, 3];
        let (mut gathered, mut summed) = (Vec::new(), Vec::new());
        for _d in 0..n {
            for i in 0..2 {
                for d2 in 0..n {
                    for q in 0..3 {
                        gathered.push(xh[at(&s, &[d2, i, q])]);
                    }
                }
                for q in 0..3 {
                    summed.push((0..n).map(|d2| xh[at(&s, &[d2, i, q])]).sum::<f32>());
                }
            }
        }
        let f32h = |v: Vec<f32>, shape: &[usize]| {
            HostArray::new(shape.to_vec(), HostData::F32(v)).unwrap()
        };
        assert_close(
            &host(&outs[0]),
            &f32h(gathered, &[n, 2, n, 3]),
            Tol::EXACT,
            &format!("{ctx}: all_gather"),
        );
        assert_close(
            &host(&outs[1]),
            &f32h(summed.clone(), &[n, 2, 3]),
            Tol::REDUCE,
            &format!("{ctx}: sum over the gathered axis"),
        );
        assert_close(
            &host(&outs[2]),
            &f32h(summed, &[n, 2, 3]),
            Tol::REDUCE,
            &format!("{ctx}: psum"),
        );
        // And the traced program says so.
        assert_eq!(
            g.avals[g.outputs[0].idx()].shape,
            vec![2, n, 3],
            "{ctx}: per-device all_gather shape in\n{g}"
        );
    }
}

#[test]
fn a_vmap_reused_outside_its_pmap_reports_the_unbound_axis() {
    // Traced once inside a pmap binding "i", then applied inside a plain jit, where no axis "i"
    // is bound: the same UnboundAxis error as a fresh vmap gives.
    let v = vmap(|b: &[Tensor]| vec![psum(&b[0], "i")]);
    let x = rand_f32(&[2, 2, 3], 160);
    pmap(|a: &[Tensor]| v.apply(a))
        .axis_name("i")
        .devices(&cpu(2))
        .call(std::slice::from_ref(&x))
        .expect("inside pmap");
    let dev = device_of("vulkan");
    let y = rand_f32(&[2, 3], 161);
    let fresh = vmap(|b: &[Tensor]| vec![psum(&b[0], "i")]);
    let e = err_of(
        jit(|a: &[Tensor]| fresh.apply(a))
            .on(&dev)
            .call(std::slice::from_ref(&y)),
    );
    assert!(matches!(&e, Error::UnboundAxis { .. }), "fresh vmap: {e:?}");
    let e = err_of(
        jit(|a: &[Tensor]| v.apply(a))
            .on(&dev)
            .call(std::slice::from_ref(&y)),
    );
    match &e {
        Error::UnboundAxis { op, name, .. } => assert_eq!((*op, name.as_str()), ("psum", "i")),
        other => panic!("reused vmap: expected UnboundAxis, got {other:?}"),
    }
}

/// Collectives over several axis names at once: inside pmap("i") over vmap("b"), psum over
/// ("i", "b") sums every example of every device; pmean and pmax likewise. Checked against host
/// loops on a Vulkan pair and on cpu devices.
#[test]
fn collectives_over_two_axis_names_in_pmap_of_vmap() {
    use brigade::{pmax_axes, pmean_axes, psum_axes};
    for layout in ["vulkan:2", "cpu:3"] {
        let devs = devices_with(layout);
        let n = devs.len();
        let (b, k) = (4usize, 3usize);
        let x = rand_f32(&[n, b, k], 91);
        let f = pmap(|a: &[Tensor]| {
            vmap(|e: &[Tensor]| {
                vec![
                    psum_axes(&e[0], &["i", "b"]),
                    pmean_axes(&e[0], &["b", "i"]),
                    pmax_axes(&e[0], &["i", "b"]),
                ]
            })
            .axis_name("b")
            .apply(a)
        })
        .axis_name("i")
        .devices(&devs);
        let out = f.call(std::slice::from_ref(&x)).unwrap();
        let h = host(&x).to_f64();
        let mut sum = vec![0.0f64; k];
        let mut max = vec![f64::NEG_INFINITY; k];
        for r in 0..n * b {
            for c in 0..k {
                sum[c] += h[r * k + c];
                max[c] = max[c].max(h[r * k + c]);
            }
        }
        let total = (n * b) as f64;
        let tile = |v: &[f64]| -> Vec<f32> {
            (0..n * b)
                .flat_map(|_| v.iter().map(|&x| x as f32))
                .collect()
        };
        let mean: Vec<f64> = sum.iter().map(|s| s / total).collect();
        for (o, want, what) in [
            (&out[0], tile(&sum), "psum over (i, b)"),
            (&out[1], tile(&mean), "pmean over (b, i)"),
            (&out[2], tile(&max), "pmax over (i, b)"),
        ] {
            assert_eq!(o.shape(), &[n, b, k], "{layout} {what}");
            common::assert_f32s(&host(o), &want, Tol::REDUCE, &format!("{layout} {what}"));
        }
    }
}

// ---- vmap of pmap --------------------------------------------------------------------------------

/// `x[..]` of a row-major `shape` at `idx`.
fn elem(x: &[f32], shape: &[usize], idx: &[usize]) -> f32 {
    x[at(shape, idx)]
}

#[test]
fn vmap_of_pmap_maps_every_example_over_the_devices() {
    // f: x - pmean(x over devices) + axis_index, per example. Oracle: host loops (f64 mean), and
    // one pmap call per example (the same kernels and fold order: equal bits).
    let f = |a: &[Tensor]| {
        let i = axis_index("i").cast(DType::F32);
        vec![&(&a[0] - &pmean(&a[0], "i")) + &i]
    };
    let (b, k) = (3, 4);
    for layout in ["vulkan:2", "vulkan:1,gl:1", "cpu:3"] {
        let devs = devices_with(layout);
        let n = devs.len();
        let xv: Vec<f32> = (0..b * n * k)
            .map(|v| ((v * 7) % 11) as f32 - 5.0)
            .collect();
        let x = Array::from_vec(xv.clone(), &[b, n, k]).unwrap();
        let vp = pmap(f)
            .axis_name("i")
            .devices(&devs)
            .vmap(&[Some(0)], &[Some(0)], None);
        let got = host(&vp.call(std::slice::from_ref(&x)).unwrap()[0]);
        assert_eq!(got.shape, vec![b, n, k], "{layout}");
        let mut want = Vec::new();
        for e in 0..b {
            for d in 0..n {
                for j in 0..k {
                    let mean: f64 = (0..n)
                        .map(|dd| elem(&xv, &[b, n, k], &[e, dd, j]) as f64)
                        .sum::<f64>()
                        / n as f64;
                    want.push((elem(&xv, &[b, n, k], &[e, d, j]) as f64 - mean + d as f64) as f32);
                }
            }
        }
        assert_close(
            &got,
            &HostArray::from_vec(want, &[b, n, k]).unwrap(),
            Tol::ARITH,
            &format!("vmap(pmap) on {layout} vs host"),
        );
        // One pmap per example gives the same bits.
        let p = pmap(f).axis_name("i").devices(&devs);
        let per: Vec<f32> = (0..b)
            .flat_map(|e| {
                let xe = Array::from_vec(xv[e * n * k..(e + 1) * n * k].to_vec(), &[n, k]).unwrap();
                host(&p.call(&[xe]).unwrap()[0]).to_vec::<f32>().unwrap()
            })
            .collect();
        assert_eq!(
            got.to_vec::<f32>().unwrap(),
            per,
            "{layout}: vs one pmap per example"
        );
    }
}

#[test]
fn vmap_of_pmap_with_other_axes_broadcasts_and_split_mode() {
    let devs = devices_with("vulkan:2");
    let n = 2;
    // The batch on axis 1 of x, the devices on axis 0; w shared by every example and device;
    // outputs with the batch axis last.
    let f = |a: &[Tensor]| vec![psum(&(&a[0] * &a[1]), "i")];
    let (b, k) = (3, 4);
    let xv: Vec<f32> = (0..n * b * k).map(|v| (v % 5) as f32 - 2.0).collect();
    let wv: Vec<f32> = (0..k).map(|v| v as f32 + 0.5).collect();
    let vp = pmap(f)
        .axis_name("i")
        .in_axes(&[Some(0), None])
        .devices(&devs)
        .vmap(&[Some(1), None], &[Some(2)], None);
    let got = host(
        &vp.call(&[
            Array::from_vec(xv.clone(), &[n, b, k]).unwrap(),
            Array::from_vec(wv.clone(), &[k]).unwrap(),
        ])
        .unwrap()[0],
    );
    // pmap's output [n, k] (device axis 0), the batch at 2: [n, k, b]; psum is equal on devices.
    assert_eq!(got.shape, vec![n, k, b]);
    let mut want = Vec::new();
    for _d in 0..n {
        for (j, w) in wv.iter().enumerate() {
            for e in 0..b {
                let s: f64 = (0..n)
                    .map(|dd| (elem(&xv, &[n, b, k], &[dd, e, j]) * w) as f64)
                    .sum();
                want.push(s as f32);
            }
        }
    }
    assert_close(
        &got,
        &HostArray::from_vec(want, &[n, k, b]).unwrap(),
        Tol::ARITH,
        "vmap over axis 1 of pmap over axis 0",
    );
    // Split mode: every example's rows cut into blocks; the block sums summed over devices.
    let g = |a: &[Tensor]| vec![psum(&a[0].sum(0i64, false), "i")];
    let rows = 6;
    let yv: Vec<f32> = (0..b * rows * 2).map(|v| (v % 7) as f32).collect();
    let vs = shard_map(g)
        .axis_name("i")
        .out_axes(&[None])
        .devices(&devs)
        .vmap(&[Some(0)], &[Some(0)], None);
    let got = host(
        &vs.call(&[Array::from_vec(yv.clone(), &[b, rows, 2]).unwrap()])
            .unwrap()[0],
    );
    let want: Vec<f32> = (0..b)
        .flat_map(|e| {
            let yv = &yv;
            (0..2).map(move |c| (0..rows).map(|r| yv[(e * rows + r) * 2 + c]).sum::<f32>())
        })
        .collect();
    assert_eq!(got.shape, vec![b, 2]);
    assert_eq!(got.to_vec::<f32>().unwrap(), want, "split mode per example");
    // One vmap entry for two arguments: the vmap's arity error.
    let e = pmap(f)
        .axis_name("i")
        .in_axes(&[Some(0), None])
        .devices(&devs)
        .vmap(&[Some(1)], &[Some(0)], None)
        .call(&[
            Array::from_vec(xv.clone(), &[n, b, k]).unwrap(),
            Array::from_vec(wv.clone(), &[k]).unwrap(),
        ])
        .unwrap_err();
    assert!(
        matches!(&e, Error::BadParallelArg { op: "vmap", .. })
            && e.to_string().contains("1 entries but 2 arguments"),
        "{e}"
    );
}

#[test]
fn vmap_of_pmap_collectives_over_both_axis_names() {
    use brigade::psum_axes;
    let devs = devices_with("vulkan:2");
    let n = 2;
    let (b, k) = (3, 2);
    // psum over the devices and the examples at once; the batch axis named "b".
    let f = |a: &[Tensor]| vec![psum_axes(&a[0], &["i", "b"]), psum(&a[0], "b")];
    let xv: Vec<f32> = (0..b * n * k).map(|v| v as f32 * 0.5).collect();
    let vp = pmap(f)
        .axis_name("i")
        .devices(&devs)
        .vmap(&[Some(0)], &[Some(0)], Some("b"));
    let got = vp
        .call(&[Array::from_vec(xv.clone(), &[b, n, k]).unwrap()])
        .unwrap();
    let all: Vec<f64> = (0..k)
        .map(|j| {
            (0..b)
                .flat_map(|e| (0..n).map(move |d| (e, d)))
                .map(|(e, d)| elem(&xv, &[b, n, k], &[e, d, j]) as f64)
                .sum()
        })
        .collect();
    let want_all: Vec<f32> = (0..b * n)
        .flat_map(|_| all.iter().map(|&v| v as f32))
        .collect();
    assert_eq!(
        host(&got[0]).to_vec::<f32>().unwrap(),
        want_all,
        "psum over (i, b)"
    );
    let want_b: Vec<f32> = (0..b)
        .flat_map(|_| {
            (0..n).flat_map(move |d| {
                (0..k).map(move |j| {
                    (0..b)
                        .map(|e| (e * n * k + d * k + j) as f32 * 0.5)
                        .sum::<f32>()
                })
            })
        })
        .collect();
    assert_eq!(
        host(&got[1]).to_vec::<f32>().unwrap(),
        want_b,
        "psum over b"
    );
}

/// `take` with both operands batched is `take_batched` (each example takes from its own slice);
/// under a second vmap that batches `x`, the indices or both, every example must still read
/// `x[outer][inner][norm(idx[outer][inner][..])]`, and the gradient (which drops out-of-range
/// indices) must batch the same way. Indices fall outside `[-n, n)` on both sides.
#[test]
fn take_batched_under_another_vmap() {
    let x4 = rand_f32(&[2, 3, 5, 4], 76);
    let x3 = rand_f32(&[3, 5, 4], 77);
    let i3 = i32_array(vec![0, -1, 5, -6, 9, 2, -5, 4, 3, -2, 1, 7], &[2, 3, 2]);
    let i2 = i32_array(vec![4, -9, -1, 0, 6, 2], &[3, 2]);
    fn inner(a: &[Tensor]) -> Vec<Tensor> {
        let taken = |u: &[Tensor]| vec![u[0].index_take(&u[1], 0), u[0].index_take(&u[1], 1)];
        let mut out = vmap(taken).apply(a);
        let loss = move |u: &[Tensor]| {
            let y = vmap(taken).apply(u);
            vec![y[0].square().sum_all() + y[1].sin().sum_all()]
        };
        out.extend(grad(loss).apply(a));
        out
    }
    for (what, axes, args) in [
        ("x batched", [Some(0), None], [x4.clone(), i2.clone()]),
        ("indices batched", [None, Some(0)], [x3.clone(), i3.clone()]),
        ("both batched", [Some(0), Some(0)], [x4.clone(), i3.clone()]),
    ] {
        check_vmap(
            &format!("vmap of take_batched, {what}"),
            inner,
            &axes,
            &[Some(0), Some(0), Some(0)],
            &args,
            Tol::REDUCE,
        );
    }
}
