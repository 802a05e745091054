//! `pmap` (JAX-exact) and `shard_map` (split mode) end to end, on forced device layouts of Mesa's
//! software drivers (`vulkan:N` = N logical lavapipe devices, `vulkan:1,gl:1` = a lavapipe and an
//! llvmpipe GL device):
//!
//! - pmap semantics: `in_axes` Some(1) and None, `out_axes` Some(1) and None, `static_argnums`
//!   (retraced per value), device subsets and fewer shards than devices;
//! - split mode: blocks of B / n rows per device, broadcast arguments, psum'd outputs;
//! - every parallel error variant, with the numbers its message must carry;
//! - sharded results fed to the next parallel call in place (no bytes moved), `device_put_sharded`
//!   and `device_put_replicated`, and a layout change (host round trip, still correct);
//! - compiled stages reused on a second call; a mesh mixing a Vulkan and a GL device;
//! - a row-split matmul bitwise equal to the single-device matmul.
//!
//! Every expected value is computed here on the host from the global input data with plain loops.
//! Float tolerances: `Tol::ARITH` (1e-5 relative + 1e-6 absolute) for a few elementwise
//! operations, `Tol::REDUCE` (1e-4 relative + 1e-4 absolute) where sums or contractions of up to
//! a few thousand terms are compared with f64 host sums; exact for integers and for the bitwise
//! matmul tests.

mod common;

use brigade::{
    Array, DType, Device, Error, Parallel, ShardLayout, Tensor, all_gather, axis_index, counters,
    device_put_replicated, device_put_sharded, jit, pmap, pmean, ppermute, psum, psum_scatter,
    shard_map,
};
use common::*;

// ---- helpers --------------------------------------------------------------------------------------

/// `n` logical lavapipe devices (one runtime per layout and test binary).
fn vulkan(n: usize) -> Vec<Device> {
    devices_with(&format!("vulkan:{n}"))
}

fn f32s_of(a: &Array) -> Vec<f32> {
    host(a)
        .to_vec::<f32>()
        .unwrap_or_else(|e| panic!("reading {a:?} as f32: {e}"))
}

/// Host array of shape `shape` from f32 values computed on the host.
fn want_f32(shape: &[usize], v: Vec<f32>) -> brigade::HostArray {
    brigade::HostArray::from_vec(v, shape).unwrap()
}

/// Row-major matmul on the host, accumulated in f64: (m, k) x (k, n).
fn matmul_host(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0f64;
            for t in 0..k {
                s += a[i * k + t] as f64 * b[t * n + j] as f64;
            }
            out[i * n + j] = s as f32;
        }
    }
    out
}

/// Per-device input shapes of the traced program.
fn input_shapes(g: &brigade::Graph) -> Vec<Vec<usize>> {
    g.inputs.iter().map(|&v| g.aval(v).shape.clone()).collect()
}

/// Call `p` expecting an error; checks it is a user error and that `graph` fails the same way.
fn call_err<F>(p: &Parallel<F>, args: &[Array], what: &str) -> Error
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let e = match p.call(args) {
        Ok(outs) => panic!(
            "{what}: expected an error, got outputs {:?}",
            outs.iter().map(|o| o.shape().to_vec()).collect::<Vec<_>>()
        ),
        Err(e) => e,
    };
    assert!(e.is_user_error(), "{what}: {e:?} should be a user error");
    match p.graph(args) {
        Ok(g) => panic!("{what}: call failed with {e} but graph() succeeded:\n{g}"),
        Err(g) => assert_eq!(g, e, "{what}: graph() and call() disagree"),
    }
    e
}

fn assert_bits_eq(got: &[f32], want: &[f32], ctx: &str) {
    assert_eq!(got.len(), want.len(), "{ctx}: length");
    let bad: Vec<usize> = (0..got.len())
        .filter(|&i| got[i].to_bits() != want[i].to_bits())
        .collect();
    if let Some(&i) = bad.first() {
        panic!(
            "{ctx}: {} of {} values differ bitwise; first at {i}: got {} ({:#010x}), want {} ({:#010x})",
            bad.len(),
            got.len(),
            got[i],
            got[i].to_bits(),
            want[i],
            want[i].to_bits()
        );
    }
}

// ---- A. pmap semantics ----------------------------------------------------------------------------

/// in_axes Some(1) maps a non-leading axis; each device sees column i of x and row i of y.
#[test]
fn pmap_maps_a_non_leading_axis() {
    let devs = vulkan(4);
    let x = rand_f32(&[3, 4], 1);
    let y = rand_f32(&[4, 3], 2);
    let f = pmap(|a: &[Tensor]| vec![&a[0] * &a[1] + &a[0]])
        .in_axes(&[Some(1), Some(0)])
        .devices(&devs);
    let g = f.graph(&[x.clone(), y.clone()]).unwrap();
    assert_eq!(
        input_shapes(&g),
        vec![vec![3], vec![3]],
        "per-device shapes\n{g}"
    );
    let out = f.call(&[x.clone(), y.clone()]).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].shape(), &[4, 3]);
    assert_eq!(
        out[0].shard_layout(),
        Some(ShardLayout::Stacked { axis: 0 })
    );
    let (xv, yv) = (f32s_of(&x), f32s_of(&y));
    let mut want = vec![0f32; 12];
    for i in 0..4 {
        for r in 0..3 {
            let xe = xv[r * 4 + i];
            want[i * 3 + r] = xe * yv[i * 3 + r] + xe;
        }
    }
    assert_close(
        &host(&out[0]),
        &want_f32(&[4, 3], want),
        Tol::ARITH,
        "in_axes Some(1)",
    );
}

/// in_axes None sends the whole argument to every device (here a matrix every entry multiplies).
#[test]
fn pmap_broadcasts_in_axes_none() {
    let devs = vulkan(4);
    let x = rand_f32(&[4, 2, 3], 3);
    let w = rand_f32(&[3, 5], 4);
    let f = pmap(|a: &[Tensor]| vec![a[0].matmul(&a[1]) - &a[1].sum(0, false)])
        .in_axes(&[Some(0), None])
        .devices(&devs);
    let g = f.graph(&[x.clone(), w.clone()]).unwrap();
    assert_eq!(
        input_shapes(&g),
        vec![vec![2, 3], vec![3, 5]],
        "per-device shapes\n{g}"
    );
    let out = f.call(&[x.clone(), w.clone()]).unwrap();
    assert_eq!(out[0].shape(), &[4, 2, 5]);
    let (xv, wv) = (f32s_of(&x), f32s_of(&w));
    let colsum: Vec<f32> = (0..5)
        .map(|j| (0..3).map(|t| wv[t * 5 + j] as f64).sum::<f64>() as f32)
        .collect();
    let mut want = Vec::new();
    for i in 0..4 {
        let prod = matmul_host(&xv[i * 6..(i + 1) * 6], &wv, 2, 3, 5);
        for (k, p) in prod.iter().enumerate() {
            want.push(p - colsum[k % 5]);
        }
    }
    assert_close(
        &host(&out[0]),
        &want_f32(&[4, 2, 5], want),
        Tol::REDUCE,
        "in_axes None",
    );
}

/// out_axes Some(1) puts the device axis second: out[a][i][b] = f(x[i])[a][b].
#[test]
fn pmap_out_axes_some_1() {
    let devs = vulkan(4);
    let x = rand_f32(&[4, 2, 3], 5);
    let f = pmap(|a: &[Tensor]| vec![&a[0] * 2.0 + 1.0])
        .out_axes(&[Some(1)])
        .devices(&devs);
    let out = f.call(std::slice::from_ref(&x)).unwrap();
    assert_eq!(out[0].shape(), &[2, 4, 3]);
    assert_eq!(
        out[0].shard_layout(),
        Some(ShardLayout::Stacked { axis: 1 })
    );
    let shards = out[0].shards().expect("a sharded result");
    assert_eq!(shards.len(), 4);
    for s in shards {
        assert_eq!(s.shape(), &[2, 3]);
    }
    let xv = f32s_of(&x);
    let mut want = vec![0f32; 24];
    for i in 0..4 {
        for a in 0..2 {
            for b in 0..3 {
                want[a * 12 + i * 3 + b] = xv[i * 6 + a * 3 + b] * 2.0 + 1.0;
            }
        }
    }
    assert_close(
        &host(&out[0]),
        &want_f32(&[2, 4, 3], want),
        Tol::ARITH,
        "out_axes Some(1)",
    );

    // The device axis last (position = per-device rank): out[b][i] = f(x[i])[b].
    let x = rand_f32(&[4, 3], 15);
    let f = pmap(|a: &[Tensor]| vec![&a[0] * 2.0])
        .out_axes(&[Some(1)])
        .devices(&devs);
    let out = f.call(std::slice::from_ref(&x)).unwrap();
    assert_eq!(out[0].shape(), &[3, 4]);
    let xv = f32s_of(&x);
    let want: Vec<f32> = (0..12).map(|k| xv[(k % 4) * 3 + k / 4] * 2.0).collect();
    assert_close(
        &host(&out[0]),
        &want_f32(&[3, 4], want),
        Tol::ARITH,
        "device axis last",
    );
}

/// out_axes None for a psum'd value: returned once, Replicated, without the device axis; the
/// other output (per-output out_axes) stays stacked.
#[test]
fn pmap_out_axes_none_for_psum() {
    let devs = vulkan(4);
    let x = rand_f32(&[4, 3], 6);
    let f = pmap(|a: &[Tensor]| vec![&a[0] * 2.0, psum(&a[0], "i")])
        .axis_name("i")
        .out_axes(&[Some(0), None])
        .devices(&devs);
    let out = f.call(std::slice::from_ref(&x)).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].shape(), &[4, 3]);
    assert_eq!(
        out[0].shard_layout(),
        Some(ShardLayout::Stacked { axis: 0 })
    );
    assert_eq!(
        out[1].shape(),
        &[3],
        "a replicated output has no device axis"
    );
    assert_eq!(out[1].shard_layout(), Some(ShardLayout::Replicated));
    let xv = f32s_of(&x);
    let sums: Vec<f32> = (0..3)
        .map(|c| (0..4).map(|r| xv[r * 3 + c]).fold(0f32, |s, v| s + v))
        .collect();
    assert_close(
        &host(&out[1]),
        &want_f32(&[3], sums.clone()),
        Tol::REDUCE,
        "psum out_axes None",
    );
    // Every device holds the same value.
    let shards = out[1].shards().expect("replicated shards");
    assert_eq!(shards.len(), 4);
    for (d, s) in shards.iter().enumerate() {
        assert_close(
            &host(s),
            &want_f32(&[3], sums.clone()),
            Tol::REDUCE,
            &format!("replica {d}"),
        );
    }
    let doubled: Vec<f32> = xv.iter().map(|v| v * 2.0).collect();
    assert_close(
        &host(&out[0]),
        &want_f32(&[4, 3], doubled),
        Tol::ARITH,
        "stacked output",
    );
}

/// A static argument is a concrete tensor inside f (its value changes the program); a new value
/// retraces, the same value (even in a new array) does not.
#[test]
fn pmap_static_argnums_retrace_per_value() {
    let devs = vulkan(4);
    let x = rand_f32(&[4, 3], 7);
    let f = pmap(|a: &[Tensor]| {
        let s = a[1]
            .to_array()
            .and_then(|s| s.item())
            .expect("a static argument is concrete")
            .as_f64() as f32;
        vec![&a[0] * s + s]
    })
    .in_axes(&[Some(0), None])
    .static_argnums(&[1])
    .devices(&devs);
    let xv = f32s_of(&x);
    let want = |s: f32| want_f32(&[4, 3], xv.iter().map(|v| v * s + s).collect());

    let g = f.graph(&[x.clone(), Array::scalar(2.5f32)]).unwrap();
    assert_eq!(
        input_shapes(&g),
        vec![vec![3]],
        "a static argument is no graph input\n{g}"
    );

    let before = counters();
    let out = f.call(&[x.clone(), Array::scalar(2.5f32)]).unwrap();
    assert_eq!(
        counters().since(&before).traces,
        0,
        "graph() traced 2.5 already"
    );
    assert_close(&host(&out[0]), &want(2.5), Tol::ARITH, "static 2.5");

    let before = counters();
    let out = f.call(&[x.clone(), Array::scalar(-1.5f32)]).unwrap();
    assert_eq!(
        counters().since(&before).traces,
        1,
        "a new static value retraces"
    );
    assert_close(&host(&out[0]), &want(-1.5), Tol::ARITH, "static -1.5");

    let before = counters();
    let out = f.call(&[x.clone(), Array::scalar(-1.5f32)]).unwrap();
    assert_eq!(
        counters().since(&before).traces,
        0,
        "the same static value does not retrace"
    );
    assert_close(&host(&out[0]), &want(-1.5), Tol::ARITH, "static -1.5 again");

    let before = counters();
    let out = f.call(&[x.clone(), Array::scalar(2.5f32)]).unwrap();
    assert_eq!(counters().since(&before).traces, 0, "2.5 is still cached");
    assert_close(&host(&out[0]), &want(2.5), Tol::ARITH, "static 2.5 again");
}

/// `.devices(&subset)` runs on those devices in that order; fewer shards use the first k.
#[test]
fn pmap_uses_the_first_k_devices() {
    let devs = vulkan(4);
    let subset = vec![devs[3].clone(), devs[1].clone(), devs[2].clone()];
    let x = rand_f32(&[2, 3], 8);
    let f = pmap(|a: &[Tensor]| vec![&a[0] - 0.5]).devices(&subset);
    let out = f.call(std::slice::from_ref(&x)).unwrap();
    assert_eq!(out[0].shard_devices(), &subset[..2]);
    for (d, s) in out[0].shards().unwrap().iter().enumerate() {
        assert_eq!(
            s.device(),
            Some(&subset[d]),
            "shard {d} lives on its device"
        );
    }
    let want: Vec<f32> = f32s_of(&x).iter().map(|v| v - 0.5).collect();
    assert_close(
        &host(&out[0]),
        &want_f32(&[2, 3], want),
        Tol::ARITH,
        "subset",
    );

    // Three shards on four devices: the first three.
    let x3 = rand_f32(&[3, 2], 9);
    let f = pmap(|a: &[Tensor]| vec![&a[0] * &a[0]]).devices(&devs);
    let out = f.call(std::slice::from_ref(&x3)).unwrap();
    assert_eq!(out[0].shard_devices(), &devs[..3]);
    assert_eq!(out[0].shards().unwrap().len(), 3);
    let want: Vec<f32> = f32s_of(&x3).iter().map(|v| v * v).collect();
    assert_close(
        &host(&out[0]),
        &want_f32(&[3, 2], want),
        Tol::ARITH,
        "3 of 4 devices",
    );
}

// ---- B. split mode --------------------------------------------------------------------------------

/// 1000 rows over 4 devices: 250 each, concatenated back to 1000.
#[test]
fn split_mode_cuts_rows_into_blocks() {
    let devs = vulkan(4);
    let x = rand_f32(&[1000, 3], 10);
    let f = shard_map(|a: &[Tensor]| vec![&a[0] * &a[0] + 1.0]).devices(&devs);
    let g = f.graph(std::slice::from_ref(&x)).unwrap();
    assert_eq!(
        input_shapes(&g),
        vec![vec![250, 3]],
        "per-device block\n{g}"
    );
    let out = f.call(std::slice::from_ref(&x)).unwrap();
    assert_eq!(out[0].shape(), &[1000, 3]);
    assert_eq!(out[0].shard_layout(), Some(ShardLayout::Blocks { axis: 0 }));
    assert_eq!(out[0].shard_devices(), &devs[..]);
    let shards = out[0].shards().unwrap();
    assert_eq!(shards.len(), 4);
    let xv = f32s_of(&x);
    for (d, s) in shards.iter().enumerate() {
        assert_eq!(s.shape(), &[250, 3], "block {d}");
        let want: Vec<f32> = xv[d * 750..(d + 1) * 750]
            .iter()
            .map(|v| v * v + 1.0)
            .collect();
        assert_close(
            &host(s),
            &want_f32(&[250, 3], want),
            Tol::ARITH,
            &format!("block {d}"),
        );
    }
    let want: Vec<f32> = xv.iter().map(|v| v * v + 1.0).collect();
    assert_close(
        &host(&out[0]),
        &want_f32(&[1000, 3], want),
        Tol::ARITH,
        "gathered",
    );
}

/// axis_size in split mode is the number of devices to use: the first ones.
#[test]
fn split_mode_axis_size_uses_the_first_devices() {
    let devs = vulkan(4);
    let x = rand_f32(&[6, 3], 16);
    let f = shard_map(|a: &[Tensor]| vec![&a[0] * 2.0])
        .axis_size(2)
        .devices(&devs);
    let g = f.graph(std::slice::from_ref(&x)).unwrap();
    assert_eq!(
        input_shapes(&g),
        vec![vec![3, 3]],
        "6 rows over 2 devices\n{g}"
    );
    let out = f.call(std::slice::from_ref(&x)).unwrap();
    assert_eq!(out[0].shard_devices(), &devs[..2]);
    let want: Vec<f32> = f32s_of(&x).iter().map(|v| v * 2.0).collect();
    assert_close(
        &host(&out[0]),
        &want_f32(&[6, 3], want),
        Tol::ARITH,
        "axis_size 2",
    );
}

/// Split along axis 1 and concatenate back along axis 1.
#[test]
fn split_mode_along_axis_1() {
    let devs = vulkan(4);
    let x = rand_f32(&[3, 8], 11);
    let f = shard_map(|a: &[Tensor]| vec![&a[0] * 3.0])
        .in_axes(&[Some(1)])
        .out_axes(&[Some(1)])
        .devices(&devs);
    let g = f.graph(std::slice::from_ref(&x)).unwrap();
    assert_eq!(input_shapes(&g), vec![vec![3, 2]], "per-device block\n{g}");
    let out = f.call(std::slice::from_ref(&x)).unwrap();
    assert_eq!(out[0].shape(), &[3, 8]);
    assert_eq!(out[0].shard_layout(), Some(ShardLayout::Blocks { axis: 1 }));
    let want: Vec<f32> = f32s_of(&x).iter().map(|v| v * 3.0).collect();
    assert_close(
        &host(&out[0]),
        &want_f32(&[3, 8], want),
        Tol::ARITH,
        "axis 1 blocks",
    );
}

/// A broadcast weight (in_axes None) in split mode: every block is multiplied by all of w.
#[test]
fn split_mode_broadcasts_in_axes_none() {
    let devs = vulkan(4);
    let x = rand_f32(&[1000, 3], 12);
    let w = rand_f32(&[3, 2], 13);
    let f = shard_map(|a: &[Tensor]| vec![a[0].matmul(&a[1])])
        .in_axes(&[Some(0), None])
        .devices(&devs);
    let g = f.graph(&[x.clone(), w.clone()]).unwrap();
    assert_eq!(
        input_shapes(&g),
        vec![vec![250, 3], vec![3, 2]],
        "per-device shapes\n{g}"
    );
    let out = f.call(&[x.clone(), w.clone()]).unwrap();
    assert_eq!(out[0].shape(), &[1000, 2]);
    for s in out[0].shards().unwrap() {
        assert_eq!(s.shape(), &[250, 2]);
    }
    let want = matmul_host(&f32s_of(&x), &f32s_of(&w), 1000, 3, 2);
    assert_close(
        &host(&out[0]),
        &want_f32(&[1000, 2], want),
        Tol::REDUCE,
        "x @ w",
    );
}

/// out_axes None for a psum of the blocks' column sums: the column sums of all 1000 rows.
#[test]
fn split_mode_out_axes_none_for_psum() {
    let devs = vulkan(4);
    let x = rand_f32(&[1000, 3], 14);
    let f = shard_map(|a: &[Tensor]| vec![psum(&a[0].sum(0, false), "rows")])
        .axis_name("rows")
        .out_axes(&[None])
        .devices(&devs);
    let out = f.call(std::slice::from_ref(&x)).unwrap();
    assert_eq!(out[0].shape(), &[3]);
    assert_eq!(out[0].shard_layout(), Some(ShardLayout::Replicated));
    assert_eq!(out[0].shard_devices(), &devs[..]);
    let xv = f32s_of(&x);
    let want: Vec<f32> = (0..3)
        .map(|c| (0..1000).map(|r| xv[r * 3 + c] as f64).sum::<f64>() as f32)
        .collect();
    assert_close(
        &host(&out[0]),
        &want_f32(&[3], want),
        Tol::REDUCE,
        "column sums",
    );
}

// ---- C. errors ------------------------------------------------------------------------------------

#[test]
fn error_indivisible_split() {
    let devs = vulkan(3);
    let x = rand_f32(&[1000, 3], 20);
    let f = shard_map(|a: &[Tensor]| vec![&a[0] * 2.0]).devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "1000 rows on 3 devices");
    let msg = e.to_string();
    match &e {
        Error::IndivisibleSplit {
            op,
            arg,
            axis,
            size,
            devices,
            fits,
            pad,
            ..
        } => {
            assert_eq!(
                (*op, *arg, *axis, *size, *devices, *pad),
                ("shard_map", 0, 0, 1000, 3, 1002)
            );
            assert_eq!(fits, "1, 2, 4, 5 or 8");
        }
        other => panic!("want IndivisibleSplit, got {other:?}"),
    }
    assert!(msg.contains("use 1, 2, 4, 5 or 8 devices"), "{msg}");
    assert!(msg.contains("pad to 1002"), "{msg}");
    assert_eq!(
        msg,
        "shard_map: argument 0 has 1000 rows along axis 0, which cannot be split evenly over 3 devices: use 1, 2, 4, 5 or 8 devices, or pad to 1002 rows"
    );
}

/// pmap over 1000 entries on 4 devices: the hint points to shard_map with blocks of 250.
#[test]
fn error_too_many_shards_suggests_shard_map() {
    let devs = vulkan(4);
    let x = rand_f32(&[1000, 3], 21);
    let f = pmap(|a: &[Tensor]| vec![&a[0] * 2.0]).devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "pmap of 1000 entries");
    let msg = e.to_string();
    match &e {
        Error::TooManyShards {
            shards,
            devices,
            hint,
        } => {
            assert_eq!((*shards, *devices), (1000, 4));
            assert!(hint.contains("shard_map"), "{hint}");
            assert!(hint.contains("250"), "{hint}");
        }
        other => panic!("want TooManyShards, got {other:?}"),
    }
    assert!(
        msg.contains("1000 entries") && msg.contains("only 4 devices"),
        "{msg}"
    );
    // And split mode does run it.
    let ok = shard_map(|a: &[Tensor]| vec![&a[0] * 2.0]).devices(&devs);
    let out = ok.call(std::slice::from_ref(&x)).unwrap();
    let want: Vec<f32> = f32s_of(&x).iter().map(|v| v * 2.0).collect();
    assert_close(
        &host(&out[0]),
        &want_f32(&[1000, 3], want),
        Tol::ARITH,
        "split mode",
    );

    // Not divisible by 4: the hint gives the padded size.
    let x = rand_f32(&[1001, 2], 22);
    let e = call_err(&f, std::slice::from_ref(&x), "pmap of 1001 entries");
    match &e {
        Error::TooManyShards {
            shards,
            devices,
            hint,
        } => {
            assert_eq!((*shards, *devices), (1001, 4));
            assert!(
                hint.contains("shard_map") && hint.contains("1004"),
                "{hint}"
            );
        }
        other => panic!("want TooManyShards, got {other:?}"),
    }
}

/// shard_map of 3 rows on 4 devices: the message says pmap would run 3 shards.
#[test]
fn error_split_of_fewer_rows_than_devices_suggests_pmap() {
    let devs = vulkan(4);
    let x = rand_f32(&[3, 5], 23);
    let f = shard_map(|a: &[Tensor]| vec![&a[0] + 1.0]).devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "3 rows on 4 devices");
    let msg = e.to_string();
    match &e {
        Error::IndivisibleSplit {
            size,
            devices,
            fits,
            pad,
            hint,
            ..
        } => {
            assert_eq!((*size, *devices, *pad), (3, 4, 4));
            assert_eq!(fits, "1 or 3");
            assert!(hint.contains("pmap") && hint.contains("3 shards"), "{hint}");
        }
        other => panic!("want IndivisibleSplit, got {other:?}"),
    }
    assert!(msg.contains("pmap"), "{msg}");
    // pmap does run it, on the first 3 devices.
    let p = pmap(|a: &[Tensor]| vec![&a[0] + 1.0]).devices(&devs);
    let out = p.call(std::slice::from_ref(&x)).unwrap();
    assert_eq!(out[0].shard_devices(), &devs[..3]);
    let want: Vec<f32> = f32s_of(&x).iter().map(|v| v + 1.0).collect();
    assert_close(
        &host(&out[0]),
        &want_f32(&[3, 5], want),
        Tol::ARITH,
        "pmap of 3",
    );
}

#[test]
fn error_mapped_sizes_disagree() {
    let devs = vulkan(4);
    let x = rand_f32(&[4, 3], 24);
    let y = rand_f32(&[3, 3], 25);
    let f = pmap(|a: &[Tensor]| vec![&a[0] + &a[1]])
        .in_axes(&[Some(0), Some(1)])
        .devices(&devs);
    let e = call_err(&f, &[x, y], "sizes 4 and 3");
    let msg = e.to_string();
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
        } => assert_eq!(
            (
                *op,
                *first_arg,
                *first_axis,
                *first_size,
                *arg,
                *axis,
                *size
            ),
            ("pmap", 0, 0, 4, 1, 1, 3)
        ),
        other => panic!("want MappedSizeMismatch, got {other:?}"),
    }
    assert!(
        msg.contains("argument 0 has 4 entries along axis 0")
            && msg.contains("argument 1 has 3 along axis 1"),
        "{msg}"
    );
}

#[test]
fn error_axis_size_disagrees_with_data() {
    let devs = vulkan(4);
    let x = rand_f32(&[4, 3], 26);
    let f = pmap(|a: &[Tensor]| vec![&a[0] * 2.0])
        .axis_size(3)
        .devices(&devs);
    let e = call_err(&f, &[x], "axis_size 3, data 4");
    let msg = e.to_string();
    match &e {
        Error::AxisSizeMismatch {
            op,
            axis_size,
            arg,
            axis,
            size,
        } => assert_eq!((*op, *axis_size, *arg, *axis, *size), ("pmap", 3, 0, 0, 4)),
        other => panic!("want AxisSizeMismatch, got {other:?}"),
    }
    assert!(
        msg.contains("axis_size is 3") && msg.contains("4 entries"),
        "{msg}"
    );
}

/// Every in_axes None: an error without axis_size, k identical shards with it.
#[test]
fn error_nothing_mapped_and_axis_size_fixes_it() {
    let devs = vulkan(4);
    let x = rand_f32(&[5], 27);
    let f = pmap(|a: &[Tensor]| vec![&a[0] * 2.0])
        .in_axes(&[None])
        .devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "nothing mapped");
    assert_eq!(e, Error::NothingMapped { op: "pmap" });
    assert!(e.to_string().contains("axis_size"), "{e}");

    let f = pmap(|a: &[Tensor]| vec![&a[0] * 2.0])
        .in_axes(&[None])
        .axis_size(3)
        .devices(&devs);
    let out = f.call(std::slice::from_ref(&x)).unwrap();
    assert_eq!(out[0].shape(), &[3, 5]);
    assert_eq!(out[0].shard_devices(), &devs[..3]);
    let row: Vec<f32> = f32s_of(&x).iter().map(|v| v * 2.0).collect();
    let want: Vec<f32> = row.iter().cycle().take(15).copied().collect();
    assert_close(
        &host(&out[0]),
        &want_f32(&[3, 5], want),
        Tol::ARITH,
        "3 copies",
    );

    // No argument at all: axis_size alone sets the shards; axis_index tells them apart.
    let f = pmap(|_: &[Tensor]| vec![axis_index("i") * 10])
        .axis_name("i")
        .axis_size(4)
        .devices(&devs);
    let out = f.call(&[]).unwrap();
    assert_eq!(out[0].shape(), &[4]);
    let want: Vec<i32> = (0..4).map(|d| d * 10).collect();
    assert_eq!(host(&out[0]).to_vec::<i32>().unwrap(), want);
}

#[test]
fn error_unbound_axis() {
    let devs = vulkan(4);
    let x = rand_f32(&[4, 3], 28);
    // Another name is bound.
    let f = pmap(|a: &[Tensor]| vec![psum(&a[0], "j") * 2.0])
        .axis_name("i")
        .devices(&devs);
    let e = call_err(
        &f,
        std::slice::from_ref(&x),
        "psum over 'j' inside pmap 'i'",
    );
    match &e {
        Error::UnboundAxis { op, name, bound } => {
            assert_eq!((*op, name.as_str()), ("psum", "j"));
            assert!(bound.contains("'i'") && bound.contains("size 4"), "{bound}");
        }
        other => panic!("want UnboundAxis, got {other:?}"),
    }
    assert!(e.to_string().contains("'j'"), "{e}");
    // No axis name at all.
    let f = pmap(|a: &[Tensor]| vec![pmean(&a[0], "i")]).devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "pmean without axis_name");
    match &e {
        Error::UnboundAxis { op, name, bound } => {
            assert_eq!((*op, name.as_str()), ("pmean", "i"));
            assert!(bound.contains("no pmap/shard_map"), "{bound}");
        }
        other => panic!("want UnboundAxis, got {other:?}"),
    }
    // Split mode too.
    let f = shard_map(|a: &[Tensor]| vec![axis_index("rows").cast(DType::F32) + &a[0]])
        .axis_name("cols")
        .devices(&devs);
    let e = call_err(
        &f,
        std::slice::from_ref(&x),
        "axis_index over 'rows' in 'cols'",
    );
    match &e {
        Error::UnboundAxis { op, name, bound } => {
            assert_eq!((*op, name.as_str()), ("axis_index", "rows"));
            assert!(bound.contains("'cols'"), "{bound}");
        }
        other => panic!("want UnboundAxis, got {other:?}"),
    }
}

/// An unbound axis fails the trace even when the collective's result is not used, as every other
/// op error does (a bad reshape or a bad all_gather axis whose result is dropped fails `jit` and
/// `pmap` alike).
#[test]
fn error_unbound_axis_with_unused_result() {
    let devs = vulkan(4);
    let x = rand_f32(&[4, 3], 37);
    // Control: an unused all_gather with a bad axis fails the trace.
    let f = pmap(|a: &[Tensor]| {
        let _unused = all_gather(&a[0], "i", 5, false);
        vec![&a[0] * 2.0]
    })
    .axis_name("i")
    .devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "unused bad all_gather");
    assert!(matches!(e, Error::BadCollective { .. }), "{e:?}");
    // The same for an unused psum over an unbound axis.
    let f = pmap(|a: &[Tensor]| {
        let _unused = psum(&a[0], "j");
        vec![&a[0] * 2.0]
    })
    .axis_name("i")
    .devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "unused psum over unbound 'j'");
    match &e {
        Error::UnboundAxis { op, name, .. } => assert_eq!((*op, name.as_str()), ("psum", "j")),
        other => panic!("want UnboundAxis, got {other:?}"),
    }
}

/// out_axes None on a value that differs between devices.
#[test]
fn error_varying_output() {
    let devs = vulkan(4);
    let x = rand_f32(&[4, 3], 29);
    let check = |e: &Error, want_output: usize, why_has: &str, what: &str| match e {
        Error::VaryingOutput { output, why, .. } => {
            assert_eq!(*output, want_output, "{what}");
            assert!(why.contains(why_has), "{what}: {why}");
        }
        other => panic!("{what}: want VaryingOutput, got {other:?}"),
    };
    // A mapped argument.
    let f = pmap(|a: &[Tensor]| vec![&a[0] * 2.0])
        .out_axes(&[None])
        .devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "mapped value");
    check(&e, 0, "mapped argument 0", "mapped value");
    assert!(
        e.to_string().contains("output 0 differs between devices"),
        "{e}"
    );
    // axis_index (second output).
    let f = pmap(|a: &[Tensor]| vec![psum(&a[0], "i"), axis_index("i")])
        .axis_name("i")
        .out_axes(&[None])
        .devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "axis_index");
    check(&e, 1, "axis_index", "axis_index");
    // ppermute of an invariant value still differs per device.
    let f = pmap(|a: &[Tensor]| vec![ppermute(&psum(&a[0], "i"), "i", &[(0, 1), (1, 0)])])
        .axis_name("i")
        .out_axes(&[None])
        .devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "ppermute");
    check(&e, 0, "ppermute", "ppermute");
    // Split mode: a block's own sum.
    let f = shard_map(|a: &[Tensor]| vec![a[0].sum(0, false)])
        .out_axes(&[None])
        .devices(&devs);
    let e = call_err(&f, &[rand_f32(&[8, 3], 30)], "split block sum");
    check(&e, 0, "mapped argument 0", "split block sum");
    // A broadcast argument is identical everywhere: allowed.
    let w = rand_f32(&[3], 31);
    let f = pmap(|a: &[Tensor]| vec![&a[0] + &a[1], &a[1] * 2.0])
        .in_axes(&[Some(0), None])
        .out_axes(&[Some(0), None])
        .devices(&devs);
    let out = f.call(&[x.clone(), w.clone()]).unwrap();
    assert_eq!(out[1].shape(), &[3]);
    let want: Vec<f32> = f32s_of(&w).iter().map(|v| v * 2.0).collect();
    assert_close(
        &host(&out[1]),
        &want_f32(&[3], want),
        Tol::ARITH,
        "broadcast out_axes None",
    );
}

#[test]
fn error_bad_collective() {
    let devs = vulkan(4);
    let x = rand_f32(&[4, 3], 32);
    let check = |e: &Error, want_op: &str, detail_has: &str| match e {
        Error::BadCollective {
            op,
            axis_name,
            shape,
            detail,
        } => {
            assert_eq!(*op, want_op);
            assert_eq!(axis_name, "i");
            assert_eq!(shape, &vec![3], "{want_op}: operand shape");
            assert!(detail.contains(detail_has), "{want_op}: {detail}");
        }
        other => panic!("{want_op}: want BadCollective, got {other:?}"),
    };
    let f = pmap(|a: &[Tensor]| vec![all_gather(&a[0], "i", 2, false)])
        .axis_name("i")
        .devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "all_gather axis 2 of rank 1");
    check(
        &e,
        "all_gather",
        "axis 2 is out of range: it must be below 2",
    );
    let f = pmap(|a: &[Tensor]| vec![all_gather(&a[0], "i", 1, true)])
        .axis_name("i")
        .devices(&devs);
    let e = call_err(
        &f,
        std::slice::from_ref(&x),
        "tiled all_gather axis 1 of rank 1",
    );
    check(
        &e,
        "all_gather",
        "axis 1 is out of range: it must be below 1",
    );
    let f = pmap(|a: &[Tensor]| vec![ppermute(&a[0], "i", &[(0, 1), (2, 1)])])
        .axis_name("i")
        .devices(&devs);
    let e = call_err(
        &f,
        std::slice::from_ref(&x),
        "ppermute repeated destination",
    );
    check(&e, "ppermute", "shard 1 is a destination twice");
    let f = pmap(|a: &[Tensor]| vec![ppermute(&a[0], "i", &[(0, 4)])])
        .axis_name("i")
        .devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "ppermute out of range");
    check(&e, "ppermute", "(0, 4)");
    let f = pmap(|a: &[Tensor]| vec![psum_scatter(&a[0], "i", 0, false)])
        .axis_name("i")
        .devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "psum_scatter of 3 over 4");
    check(
        &e,
        "psum_scatter",
        "has 3 entries but must equal the axis size 4",
    );
    let f = pmap(|a: &[Tensor]| vec![psum_scatter(&a[0], "i", 0, true)])
        .axis_name("i")
        .devices(&devs);
    let e = call_err(
        &f,
        std::slice::from_ref(&x),
        "tiled psum_scatter of 3 over 4",
    );
    check(&e, "psum_scatter", "not a multiple of the axis size 4");
}

#[test]
fn error_bad_parallel_arg() {
    let devs = vulkan(4);
    let x = rand_f32(&[4, 3], 33);
    let y = rand_f32(&[4, 3], 34);
    let check = |e: &Error, want_op: &str, detail_has: &[&str], what: &str| match e {
        Error::BadParallelArg { op, detail } => {
            assert_eq!(*op, want_op, "{what}");
            for d in detail_has {
                assert!(detail.contains(d), "{what}: {detail:?} lacks {d:?}");
            }
        }
        other => panic!("{what}: want BadParallelArg, got {other:?}"),
    };
    let f = pmap(|a: &[Tensor]| vec![&a[0] + &a[1]])
        .in_axes(&[Some(0)])
        .devices(&devs);
    let e = call_err(&f, &[x.clone(), y.clone()], "in_axes arity");
    check(
        &e,
        "pmap",
        &["in_axes has 1 entries", "2 arguments"],
        "in_axes arity",
    );
    let f = pmap(|a: &[Tensor]| vec![&a[0] * 2.0])
        .in_axes(&[Some(2)])
        .devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "in_axes beyond rank");
    check(
        &e,
        "pmap",
        &["in_axes[0] is Some(2)", "rank 2"],
        "in_axes beyond rank",
    );
    let f = shard_map(|a: &[Tensor]| vec![&a[0] * 2.0])
        .in_axes(&[Some(3)])
        .devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "split in_axes beyond rank");
    check(
        &e,
        "shard_map",
        &["in_axes[0] is Some(3)"],
        "split in_axes beyond rank",
    );
    let f = pmap(|a: &[Tensor]| vec![&a[0] * 2.0, &a[0] + 1.0])
        .out_axes(&[Some(0), Some(0), Some(0)])
        .devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "out_axes arity");
    check(
        &e,
        "pmap",
        &["out_axes has 3 entries", "returns 2 outputs"],
        "out_axes arity",
    );
    let f = pmap(|a: &[Tensor]| vec![&a[0] * 2.0])
        .out_axes(&[Some(2)])
        .devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "out_axes beyond rank");
    check(
        &e,
        "pmap",
        &["out_axes[0] is Some(2)"],
        "out_axes beyond rank",
    );
    let f = pmap(|a: &[Tensor]| vec![&a[0] * 2.0])
        .static_argnums(&[2])
        .devices(&devs);
    let e = call_err(&f, &[x.clone(), y.clone()], "static_argnums out of range");
    check(
        &e,
        "pmap",
        &["static_argnums names argument 2", "2 arguments"],
        "static_argnums",
    );
    let f = pmap(|a: &[Tensor]| vec![&a[0] * 2.0]).devices(&devs);
    let empty = Array::from_vec(Vec::<f32>::new(), &[0, 3]).unwrap();
    let e = call_err(&f, &[empty], "pmap over an empty axis");
    check(&e, "pmap", &["empty (size 0)"], "empty mapped axis");
    let f = shard_map(|a: &[Tensor]| vec![&a[0] * 2.0])
        .axis_size(5)
        .devices(&devs);
    let e = call_err(&f, &[rand_f32(&[10, 3], 35)], "split axis_size 5 of 4");
    check(
        &e,
        "shard_map",
        &["axis_size 5", "only 4"],
        "split axis_size over count",
    );
}

#[test]
fn error_psum_of_bool() {
    let devs = vulkan(4);
    let x = rand_bool(&[4, 3], 36);
    let f = pmap(|a: &[Tensor]| vec![psum(&a[0], "i")])
        .axis_name("i")
        .devices(&devs);
    let e = call_err(&f, std::slice::from_ref(&x), "psum of bool");
    match &e {
        Error::BadDType { op, dtype, .. } => assert_eq!((*op, *dtype), ("psum", DType::Bool)),
        other => panic!("want BadDType, got {other:?}"),
    }
    // Cast first: counts the true values per column.
    let f = pmap(|a: &[Tensor]| vec![psum(&a[0].cast(DType::I32), "i")])
        .axis_name("i")
        .out_axes(&[None])
        .devices(&devs);
    let out = f.call(std::slice::from_ref(&x)).unwrap();
    let xb = host(&x).to_vec::<bool>().unwrap();
    let want: Vec<i32> = (0..3)
        .map(|c| (0..4).filter(|&r| xb[r * 3 + c]).count() as i32)
        .collect();
    assert_eq!(host(&out[0]).to_vec::<i32>().unwrap(), want);
}

// ---- D. sharded values stay in place --------------------------------------------------------------

/// pmap f, then pmap g on its output: no bytes move during g; reading gathers correctly.
#[test]
fn pmap_output_feeds_next_pmap_in_place() {
    let devs = vulkan(4);
    let x = rand_f32(&[4, 6], 40);
    let f = pmap(|a: &[Tensor]| vec![&a[0] * 2.0 + 1.0]).devices(&devs);
    let g = pmap(|a: &[Tensor]| vec![&a[0] * &a[0] - &a[0]]).devices(&devs);
    let y = f.call(std::slice::from_ref(&x)).unwrap();
    let before = counters();
    let z = g.call(&y).unwrap();
    let moved = counters().since(&before);
    assert_eq!(
        (moved.bytes_uploaded, moved.bytes_downloaded),
        (0, 0),
        "feeding a Stacked output to the next pmap: {moved:?}"
    );
    assert!(moved.dispatches > 0, "g ran: {moved:?}");
    assert_eq!(z[0].shard_layout(), Some(ShardLayout::Stacked { axis: 0 }));
    let want: Vec<f32> = f32s_of(&x)
        .iter()
        .map(|v| {
            let y = v * 2.0 + 1.0;
            y * y - y
        })
        .collect();
    assert_close(
        &host(&z[0]),
        &want_f32(&[4, 6], want),
        Tol::ARITH,
        "g(f(x))",
    );
}

/// shard_map chaining, with a Replicated (out_axes None) output fed as a broadcast argument.
#[test]
fn shard_map_outputs_feed_next_shard_map_in_place() {
    let devs = vulkan(4);
    let x = rand_f32(&[8, 3], 41);
    let f = shard_map(|a: &[Tensor]| {
        let y = &a[0] * 2.0 + 1.0;
        let mean = psum(&y.sum(0, false), "r") / 8.0;
        vec![y, mean]
    })
    .axis_name("r")
    .out_axes(&[Some(0), None])
    .devices(&devs);
    let g = shard_map(|a: &[Tensor]| vec![&a[0] - &a[1]])
        .in_axes(&[Some(0), None])
        .devices(&devs);
    let h = shard_map(|a: &[Tensor]| vec![&a[0] * &a[0]]).devices(&devs);
    let ym = f.call(std::slice::from_ref(&x)).unwrap();
    assert_eq!(ym[1].shard_layout(), Some(ShardLayout::Replicated));
    let before = counters();
    let c = g.call(&ym).unwrap();
    let sq = h.call(&c).unwrap();
    let moved = counters().since(&before);
    assert_eq!(
        (moved.bytes_uploaded, moved.bytes_downloaded),
        (0, 0),
        "Blocks and Replicated outputs fed to the next shard_map: {moved:?}"
    );
    let yv: Vec<f32> = f32s_of(&x).iter().map(|v| v * 2.0 + 1.0).collect();
    let mean: Vec<f32> = (0..3)
        .map(|j| ((0..8).map(|r| yv[r * 3 + j] as f64).sum::<f64>() / 8.0) as f32)
        .collect();
    let centered: Vec<f32> = (0..24).map(|k| yv[k] - mean[k % 3]).collect();
    assert_close(
        &host(&c[0]),
        &want_f32(&[8, 3], centered.clone()),
        Tol::REDUCE,
        "centered",
    );
    let squares: Vec<f32> = centered.iter().map(|v| v * v).collect();
    assert_close(
        &host(&sq[0]),
        &want_f32(&[8, 3], squares),
        Tol::REDUCE,
        "squared",
    );
}

/// device_put_sharded / device_put_replicated place the data before the call: none is uploaded
/// during it.
#[test]
fn device_put_sharded_and_replicated_then_pmap() {
    let devs = vulkan(4);
    let parts: Vec<Array> = (0..4).map(|i| rand_f32(&[3], 50 + i)).collect();
    let w = rand_f32(&[3], 60);
    let xs = device_put_sharded(&parts, &devs).unwrap();
    let ws = device_put_replicated(&w, &devs).unwrap();
    assert_eq!(xs.shape(), &[4, 3]);
    assert_eq!(ws.shape(), &[4, 3]);
    assert_eq!(xs.shard_layout(), Some(ShardLayout::Stacked { axis: 0 }));
    assert_eq!(xs.shard_devices(), &devs[..]);
    let f = pmap(|a: &[Tensor]| vec![&a[0] * &a[1] - &a[1]]).devices(&devs);
    let before = counters();
    let out = f.call(&[xs.clone(), ws.clone()]).unwrap();
    let moved = counters().since(&before);
    assert_eq!(moved.bytes_uploaded, 0, "placed arguments: {moved:?}");
    assert_eq!(moved.bytes_downloaded, 0, "no collective: {moved:?}");
    let wv = f32s_of(&w);
    let mut want = Vec::new();
    for p in &parts {
        for (k, v) in f32s_of(p).iter().enumerate() {
            want.push(v * wv[k] - wv[k]);
        }
    }
    assert_close(
        &host(&out[0]),
        &want_f32(&[4, 3], want),
        Tol::ARITH,
        "placed",
    );
    // Reading the placed arrays gives their parts back.
    let mut all = Vec::new();
    for p in &parts {
        all.extend(f32s_of(p));
    }
    assert_eq!(f32s_of(&xs), all);
    assert_eq!(
        f32s_of(&ws),
        [wv.clone(), wv.clone(), wv.clone(), wv].concat()
    );
}

/// A layout the next call does not use (Stacked into shard_map, Blocks into pmap over another
/// axis, or other devices) still gives the right values.
#[test]
fn layout_change_between_calls_is_correct() {
    let devs = vulkan(4);
    let x = rand_f32(&[4, 8], 70);
    let xv = f32s_of(&x);
    let f = pmap(|a: &[Tensor]| vec![&a[0] + 1.0]).devices(&devs);
    let y = f.call(std::slice::from_ref(&x)).unwrap();
    let yv: Vec<f32> = xv.iter().map(|v| v + 1.0).collect();
    // Stacked{0} into split mode along axis 1: blocks (4, 2).
    let g = shard_map(|a: &[Tensor]| vec![&a[0] * &a[0]])
        .in_axes(&[Some(1)])
        .out_axes(&[Some(1)])
        .devices(&devs);
    let z = g.call(&y).unwrap();
    assert_eq!(z[0].shard_layout(), Some(ShardLayout::Blocks { axis: 1 }));
    let zv: Vec<f32> = yv.iter().map(|v| v * v).collect();
    assert_close(
        &host(&z[0]),
        &want_f32(&[4, 8], zv.clone()),
        Tol::ARITH,
        "stacked -> blocks",
    );
    // Stacked{0} into split mode along axis 0 on the same devices (one row per device: same
    // pieces, but another layout).
    let g0 = shard_map(|a: &[Tensor]| vec![&a[0] - 2.0]).devices(&devs);
    let z0 = g0.call(&y).unwrap();
    let want: Vec<f32> = yv.iter().map(|v| v - 2.0).collect();
    assert_close(
        &host(&z0[0]),
        &want_f32(&[4, 8], want),
        Tol::ARITH,
        "stacked -> blocks{0}",
    );
    // Blocks{1} into pmap over axis 0, on the devices in reverse order.
    let rev: Vec<Device> = devs.iter().rev().cloned().collect();
    let p = pmap(|a: &[Tensor]| vec![a[0].sum(0, false)]).devices(&rev);
    let r = p.call(std::slice::from_ref(&z[0])).unwrap();
    assert_eq!(r[0].shard_devices(), &rev[..]);
    assert_eq!(r[0].shape(), &[4]);
    let want: Vec<f32> = (0..4)
        .map(|row| (0..8).map(|c| zv[row * 8 + c] as f64).sum::<f64>() as f32)
        .collect();
    assert_close(
        &host(&r[0]),
        &want_f32(&[4], want),
        Tol::REDUCE,
        "blocks -> pmap",
    );
}

// ---- E. compiled stages are reused ----------------------------------------------------------------

/// A program with two collectives (three stages): the second call with the same shapes traces
/// nothing and creates no pipeline, in pmap and in split mode.
#[test]
fn second_call_reuses_traces_and_pipelines() {
    let devs = vulkan(4);
    let body = |a: &[Tensor]| {
        let c = &a[0] - pmean(&a[0], "i");
        let v = psum(&(&c * &c), "i");
        vec![&c * &v]
    };
    // Host: per column, the mean over the rows of every device, then the sum of squares.
    let want = |x: &Array, per_dev_rows: usize| {
        let xv = f32s_of(x);
        let cols = 5;
        let rows = xv.len() / cols;
        let devices = rows / per_dev_rows;
        // pmean/psum act elementwise across devices: element (r, j) of device d meets the same
        // element of every other device.
        let mut out = vec![0f32; xv.len()];
        for r in 0..per_dev_rows {
            for j in 0..cols {
                let at = |d: usize| (d * per_dev_rows + r) * cols + j;
                let mean = (0..devices).map(|d| xv[at(d)] as f64).sum::<f64>() / devices as f64;
                let c: Vec<f64> = (0..devices).map(|d| xv[at(d)] as f64 - mean).collect();
                let v: f64 = c.iter().map(|c| c * c).sum();
                for d in 0..devices {
                    out[at(d)] = (c[d] * v) as f32;
                }
            }
        }
        want_f32(x.shape(), out)
    };

    let f = pmap(body).axis_name("i").devices(&devs);
    let x1 = rand_f32(&[4, 5], 80);
    let x2 = rand_f32(&[4, 5], 81);
    let (stages, exchanges) = f.stage_count(std::slice::from_ref(&x1)).unwrap();
    assert_eq!(exchanges, 2, "pmean and psum are two exchanges");
    assert_eq!(stages, 3, "cut at each of the two collectives");
    let out = f.call(std::slice::from_ref(&x1)).unwrap();
    assert_close(
        &host(&out[0]),
        &want(&x1, 1),
        Tol::REDUCE,
        "pmap first call",
    );
    let before = counters();
    let out = f.call(std::slice::from_ref(&x2)).unwrap();
    let work = counters().since(&before);
    assert_eq!(
        (work.traces, work.pipelines_created),
        (0, 0),
        "pmap second call: {work:?}"
    );
    assert!(work.dispatches > 0, "{work:?}");
    assert_close(
        &host(&out[0]),
        &want(&x2, 1),
        Tol::REDUCE,
        "pmap second call",
    );

    let s = shard_map(body).axis_name("i").devices(&devs);
    let x1 = rand_f32(&[8, 5], 82);
    let x2 = rand_f32(&[8, 5], 83);
    let out = s.call(std::slice::from_ref(&x1)).unwrap();
    assert_close(
        &host(&out[0]),
        &want(&x1, 2),
        Tol::REDUCE,
        "split first call",
    );
    let before = counters();
    let out = s.call(std::slice::from_ref(&x2)).unwrap();
    let work = counters().since(&before);
    assert_eq!(
        (work.traces, work.pipelines_created),
        (0, 0),
        "split second call: {work:?}"
    );
    assert_close(
        &host(&out[0]),
        &want(&x2, 2),
        Tol::REDUCE,
        "split second call",
    );
}

// ---- F. heterogeneous mesh ------------------------------------------------------------------------

/// One pmap over a Vulkan and a GL device: a matmul per device and a psum across them.
#[test]
fn heterogeneous_mesh_vulkan_and_gl() {
    let devs = devices_with("vulkan:1,gl:1");
    let backends: Vec<&str> = devs.iter().map(|d| d.info().backend.as_ref()).collect();
    assert_eq!(backends, ["vulkan", "gl"]);
    let _gl = device_guard(&devs[1]);
    let x = rand_f32(&[2, 4, 3], 90);
    let w = rand_f32(&[3, 5], 91);
    let f = pmap(|a: &[Tensor]| {
        let y = a[0].matmul(&a[1]);
        vec![y.clone(), psum(&y, "d")]
    })
    .axis_name("d")
    .in_axes(&[Some(0), None])
    .out_axes(&[Some(0), None])
    .devices(&devs);
    let out = f.call(&[x.clone(), w.clone()]).unwrap();
    assert_eq!(out[0].shape(), &[2, 4, 5]);
    assert_eq!(out[1].shape(), &[4, 5]);
    assert_eq!(out[0].shard_devices(), &devs[..]);
    let (xv, wv) = (f32s_of(&x), f32s_of(&w));
    let y0 = matmul_host(&xv[..12], &wv, 4, 3, 5);
    let y1 = matmul_host(&xv[12..], &wv, 4, 3, 5);
    let sum: Vec<f32> = y0.iter().zip(&y1).map(|(a, b)| a + b).collect();
    assert_close(
        &host(&out[0]),
        &want_f32(&[2, 4, 5], [y0, y1].concat()),
        Tol::REDUCE,
        "y",
    );
    assert_close(
        &host(&out[1]),
        &want_f32(&[4, 5], sum.clone()),
        Tol::REDUCE,
        "psum(y)",
    );
    for (d, s) in out[1].shards().unwrap().iter().enumerate() {
        assert_close(
            &host(s),
            &want_f32(&[4, 5], sum.clone()),
            Tol::REDUCE,
            &format!("psum on {d}"),
        );
    }
}

// ---- G. row-split matmul is bitwise the single-device matmul ---------------------------------------

fn mm(a: &[Tensor]) -> Vec<Tensor> {
    vec![a[0].matmul(&a[1])]
}

/// Split A's rows over the devices, B whole: compare bits with `jit(matmul)` on one device.
fn check_row_split(devs: &[Device], single: &Device, m: usize, k: usize, n: usize, seed: u64) {
    let a = rand_f32(&[m, k], seed);
    let b = rand_f32(&[k, n], seed + 1);
    let ctx = format!("A ({m}, {k}) x B ({k}, {n}) over {} devices", devs.len());
    let want = f32s_of(&jit(mm).on(single).call(&[a.clone(), b.clone()]).unwrap()[0]);
    // Sanity: the single-device result is right.
    let host_mm = matmul_host(&f32s_of(&a), &f32s_of(&b), m, k, n);
    assert_close(
        &want_f32(&[m, n], want.clone()),
        &want_f32(&[m, n], host_mm),
        Tol::REDUCE,
        &format!("{ctx}: single device vs host"),
    );
    let s = shard_map(mm).in_axes(&[Some(0), None]).devices(devs);
    let out = s.call(&[a, b]).unwrap();
    assert_eq!(out[0].shape(), &[m, n], "{ctx}");
    let rows = m / devs.len();
    for (d, sh) in out[0].shards().unwrap().iter().enumerate() {
        assert_eq!(sh.shape(), &[rows, n], "{ctx}: block {d}");
        assert_bits_eq(
            &f32s_of(sh),
            &want[d * rows * n..(d + 1) * rows * n],
            &format!("{ctx}: block {d}"),
        );
    }
    assert_bits_eq(&f32s_of(&out[0]), &want, &format!("{ctx}: gathered"));
}

#[test]
fn row_split_matmul_bitwise_on_vulkan() {
    let four = vulkan(4);
    let single = four[0].clone();
    check_row_split(&vulkan(2), &single, 256, 64, 128, 100);
    check_row_split(&four, &single, 256, 64, 128, 100);
    // Rows per device not a multiple of 4 or 8 (10 and 9), and odd N.
    check_row_split(&vulkan(3), &single, 30, 20, 14, 102);
    check_row_split(&four, &single, 36, 20, 14, 104);
    check_row_split(&vulkan(3), &single, 36, 20, 12, 106);
}

/// On a Vulkan + GL mesh each block equals, bit for bit, the rows of the single-device matmul
/// computed on that block's own device.
#[test]
fn row_split_matmul_bitwise_on_mixed_mesh() {
    let devs = devices_with("vulkan:1,gl:1");
    let _gl = device_guard(&devs[1]);
    for (m, k, n, seed) in [(256, 64, 128, 110), (18, 20, 14, 112)] {
        let a = rand_f32(&[m, k], seed);
        let b = rand_f32(&[k, n], seed + 1);
        let ctx = format!("A ({m}, {k}) x B ({k}, {n}) over vulkan:1,gl:1");
        let s = shard_map(mm).in_axes(&[Some(0), None]).devices(&devs);
        let out = s.call(&[a.clone(), b.clone()]).unwrap();
        let rows = m / 2;
        let host_mm = matmul_host(&f32s_of(&a), &f32s_of(&b), m, k, n);
        assert_close(
            &host(&out[0]),
            &want_f32(&[m, n], host_mm),
            Tol::REDUCE,
            &ctx,
        );
        for (d, sh) in out[0].shards().unwrap().iter().enumerate() {
            let own = f32s_of(&jit(mm).on(&devs[d]).call(&[a.clone(), b.clone()]).unwrap()[0]);
            assert_bits_eq(
                &f32s_of(sh),
                &own[d * rows * n..(d + 1) * rows * n],
                &format!("{ctx}: block {d} on {}", devs[d].info().backend),
            );
        }
    }
}

/// Large all-reduces (operands over the staged-transfer threshold) called repeatedly with new data:
/// staging buffers are reused between calls for the reads and the writes, and every call must
/// still see exactly its own data.
#[test]
fn large_psum_repeated_with_new_data() {
    let devs = vulkan(3);
    let n = 3usize;
    let len = 1 << 19; // 2 MiB of f32 per device
    let f = pmap(|a: &[Tensor]| vec![psum(&a[0], "i"), brigade::pmax(&a[0], "i")])
        .axis_name("i")
        .devices(&devs);
    for round in 0..4u32 {
        let data: Vec<i32> = (0..(n * len) as u32)
            .map(|k| (k.wrapping_mul(2654435761) ^ round.wrapping_mul(977)) as i32 >> 8)
            .collect();
        let x = Array::from_vec(data.clone(), &[n, len]).unwrap();
        let out = f.call(std::slice::from_ref(&x)).unwrap();
        let (sum, max) = (
            out[0].to_vec::<i32>().unwrap(),
            out[1].to_vec::<i32>().unwrap(),
        );
        for d in 0..n {
            for k in (0..len).step_by(997).chain([len - 1]) {
                let col: Vec<i32> = (0..n).map(|r| data[r * len + k]).collect();
                let want_sum = col.iter().fold(0i32, |a, &b| a.wrapping_add(b));
                let want_max = *col.iter().max().unwrap();
                assert_eq!(
                    sum[d * len + k],
                    want_sum,
                    "round {round} device {d} elem {k}"
                );
                assert_eq!(
                    max[d * len + k],
                    want_max,
                    "round {round} device {d} elem {k}"
                );
            }
        }
    }
}

/// The single-device fallback: `emulate` runs the mapped function with vmap over the same axis
/// name on one device and must agree with the real multi-device run for every collective, in
/// both modes; it also runs more shards than there are devices.
#[test]
fn emulation_on_one_device_agrees_with_pmap_for_every_collective() {
    use brigade::{all_gather, all_to_all, axis_index, pmax, pmean, pmin, ppermute, psum_scatter};
    let devs = vulkan(3);
    let n = 3usize;
    let one = &devs[0];
    let body = |a: &[Tensor]| {
        let x = &a[0]; // per device: (3, 2)
        vec![
            psum(x, "i"),
            pmean(x, "i"),
            pmax(x, "i"),
            pmin(x, "i"),
            all_gather(x, "i", 0, false),
            all_gather(x, "i", 1, true),
            psum_scatter(x, "i", 0, false),
            ppermute(x, "i", &[(0, 1), (1, 2), (2, 0)]),
            ppermute(x, "i", &[(0, 2)]),
            all_to_all(x, "i", 0, 1, false),
            axis_index("i").cast(brigade::DType::F32) + &x.sum_all(),
        ]
    };
    let x = common::rand_f32(&[n, 3, 2], 77);
    let p = pmap(body).axis_name("i").devices(&devs);
    let real = p.call(std::slice::from_ref(&x)).unwrap();
    let emulated = p.emulate(one, std::slice::from_ref(&x)).unwrap();
    assert_eq!(real.len(), emulated.len());
    for (k, (r, e)) in real.iter().zip(&emulated).enumerate() {
        assert_eq!(r.shape(), e.shape(), "output {k}");
        assert!(
            e.shards().is_none() && e.device() == Some(one),
            "output {k} lives on one device"
        );
        common::assert_close(
            &common::host(e),
            &common::host(r),
            common::Tol::REDUCE,
            &format!("pmap output {k}: emulated vs real"),
        );
    }
    // Split mode, and a psum made identical (out_axes None).
    let s = shard_map(|a: &[Tensor]| vec![&a[0] * 2.0, psum(&a[0].sum(0, false), "i")])
        .axis_name("i")
        .devices(&devs)
        .out_axes(&[Some(0), None]);
    let xs = common::rand_f32(&[12, 2], 78);
    let real = s.call(std::slice::from_ref(&xs)).unwrap();
    let emulated = s.emulate(one, std::slice::from_ref(&xs)).unwrap();
    for (k, (r, e)) in real.iter().zip(&emulated).enumerate() {
        assert_eq!(r.shape(), e.shape(), "split output {k}");
        common::assert_close(
            &common::host(e),
            &common::host(r),
            common::Tol::REDUCE,
            &format!("split output {k}: emulated vs real"),
        );
    }
    // More shards than devices: 5 emulated shards of a psum on one device.
    let x5 = common::rand_f32(&[5, 4], 79);
    let e5 = pmap(|a: &[Tensor]| vec![psum(&a[0], "i")])
        .axis_name("i")
        .devices(&devs[..1])
        .emulate(one, std::slice::from_ref(&x5))
        .unwrap();
    let h = common::host(&x5).to_f64();
    let col: Vec<f64> = (0..4).map(|c| (0..5).map(|r| h[r * 4 + c]).sum()).collect();
    let want: Vec<f32> = (0..5).flat_map(|_| col.iter().map(|&v| v as f32)).collect();
    common::assert_f32s(
        &common::host(&e5[0]),
        &want,
        common::Tol::REDUCE,
        "5 emulated shards",
    );
}
