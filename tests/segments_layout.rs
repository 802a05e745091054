//! Layout ops and gathers over arrays larger than one storage binding, driven with small arrays
//! on a Vulkan and a GL device with a forced 64 KiB binding limit (see `tests/common/segments.rs`).
//! Such a remap runs as a kernel of its own, once per pair of segments of its result and its
//! large operand, each invocation storing its element only when its source lies in the bound
//! segment. Every result is compared with the CPU reference; layout ops move values, so they are
//! compared exactly, arithmetic on top of them within `Tol::ARITH` / `Tol::TRANS`.

mod common;

use brigade::{Array, DType, Error, Tensor, jit};
use common::segments::*;
use common::*;

/// A transpose of a 2-D array over the limit (the result over it too), odd sizes; and of a 3-D one.
#[test]
fn transposes_over_segments() {
    let a = rand_f32(&ODD, 101);
    check_segmented(
        |x: &[Tensor]| vec![x[0].transpose(&[1, 0])],
        std::slice::from_ref(&a),
        Tol::EXACT,
    );
    // Fused consumers: the transpose is stored, then a segmented elementwise kernel.
    check_segmented(
        |x: &[Tensor]| vec![x[0].transpose(&[1, 0]) * 2.0 + 1.0],
        std::slice::from_ref(&a),
        Tol::ARITH,
    );
    // A chain reading the large operand both in place and transposed: (x^T * 2 + 1) and
    // x^T + y with y of the transposed shape, and integers.
    let y = rand_f32(&[ODD[1], ODD[0]], 102);
    check_segmented(
        |x: &[Tensor]| {
            vec![
                (x[0].transpose(&[1, 0]) * 2.0 + 1.0).tanh(),
                x[0].transpose(&[1, 0]) + &x[1],
            ]
        },
        &[a.clone(), y],
        Tol::TRANS,
    );
    check_segmented(
        |x: &[Tensor]| vec![x[0].transpose(&[2, 0, 1])],
        &[rand_i32(&[37, 41, 53], 103, -1000, 1000)],
        Tol::EXACT,
    );
}

/// Strided slices, a slice of a transpose, pads (non-zero value, interior) and broadcasts.
#[test]
fn slices_pads_and_broadcasts_over_segments() {
    let a = rand_f32(&ODD, 111);
    check_segmented(
        |x: &[Tensor]| {
            vec![
                // Every second row: large in, large out.
                x[0].slice(&[0, 0], &[300, 257], Some(&[2, 1])),
                // Strided both ways, small result.
                x[0].slice(&[1, 3], &[301, 250], Some(&[7, 5])),
                // A block of the transpose.
                x[0].transpose(&[1, 0]).slice(&[10, 20], &[200, 290], None),
            ]
        },
        std::slice::from_ref(&a),
        Tol::EXACT,
    );
    check_segmented(
        |x: &[Tensor]| {
            vec![
                // A non-zero pad value around the large array, and an interior pad.
                x[0].pad(&[3, 1], &[2, 5], 1.5f32),
                x[0].pad_interior(&[0, 2], &[1, 0], &[1, 0], -2.0f32),
                // Whole segments of the result that are padding only (they read no operand).
                x[0].pad(&[0, 0], &[130, 0], 3.0f32),
            ]
        },
        std::slice::from_ref(&a),
        Tol::EXACT,
    );
    // A small array broadcast to a large result (bound whole), and a broadcast of the large one.
    let row = rand_f32(&[ODD[1]], 112);
    check_segmented(
        |x: &[Tensor]| {
            vec![
                x[1].broadcast_to(&ODD) * 3.0,
                x[0].reshape(&[1, ODD[0] as i64, ODD[1] as i64])
                    .broadcast_to(&[2, ODD[0], ODD[1]]),
            ]
        },
        &[a, row],
        Tol::ARITH,
    );
}

/// `take` along axis 0 and axis 1 of a large table, small and large results, and with the
/// table's values used afterwards.
#[test]
fn gathers_from_a_large_table() {
    let table = rand_f32(&ODD, 121);
    let rows = Array::from_vec(i32s(40, 122, -301, 301), &[40]).unwrap();
    let cols = Array::from_vec(i32s(23, 123, 0, 257), &[23]).unwrap();
    let many = Array::from_vec(i32s(600, 124, 0, 301), &[600]).unwrap();
    check_segmented(
        |x: &[Tensor]| {
            vec![
                x[0].index_take(&x[1], 0),
                x[0].index_take(&x[2], 1) * 2.0,
                // 600 rows: a result over the limit too.
                x[0].index_take(&x[3], 0),
            ]
        },
        &[table, rows, cols, many],
        Tol::ARITH,
    );
    // An embedding lookup: a 2-D batch of token ids into a large table of integers.
    let emb = rand_i32(&[5000, 19], 125, -100, 100);
    let ids = Array::from_vec(i32s(6 * 7, 126, 0, 5000), &[6, 7]).unwrap();
    let out = check_segmented(
        |x: &[Tensor]| vec![x[0].index_take(&x[1], 0)],
        &[emb, ids],
        Tol::EXACT,
    );
    assert_eq!(out[0].shape, vec![6, 7, 19]);
    assert_eq!(out[0].dtype(), DType::I32);
}

/// A remap that reads no input for some elements and several large operands: concatenation of
/// two large arrays along columns with more runs than copies take (1000 rows of short runs)
/// runs over windows of both.
#[test]
fn concatenations_with_many_runs() {
    let a = rand_f32(&[5000, 5], 131);
    let b = rand_f32(&[5000, 4], 132);
    check_segmented(
        |x: &[Tensor]| vec![Tensor::concatenate(&[&x[0], &x[1]], 1)],
        &[a, b],
        Tol::EXACT,
    );
}

/// The same programs run twice on one device give the same values (the windows' stores do not
/// race: each element is stored by the dispatches holding its source only).
#[test]
fn remaps_are_deterministic() {
    let a = rand_f32(&ODD, 141);
    for dev in devices() {
        let _g = device_guard(&dev);
        let f = jit(|x: &[Tensor]| vec![x[0].transpose(&[1, 0]).pad(&[1, 1], &[1, 1], 7.0f32)])
            .on(&dev);
        let r1 = f.call(std::slice::from_ref(&a)).unwrap()[0]
            .to_vec::<f32>()
            .unwrap();
        let r2 = f.call(std::slice::from_ref(&a)).unwrap()[0]
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(r1, r2, "{}", dev.name());
        assert_eq!(r1.len(), (ODD[1] + 2) * (ODD[0] + 2));
    }
}

/// Contractions too wide for 64 rows of the left operand to fit one binding: the product is
/// a sum over chunks of the contraction. `[40, 1201] x [1201, 9]` (rows of 4.7 KiB) and
/// `[300, 200] x [200, 150]`-sized odd shapes.
#[test]
fn wide_contractions_sum_over_chunks() {
    check_segmented(
        |x: &[Tensor]| vec![x[0].matmul(&x[1])],
        &[rand_f32(&[40, 1201], 151), rand_f32(&[1201, 9], 152)],
        Tol::REDUCE,
    );
    check_segmented(
        |x: &[Tensor]| vec![x[0].matmul(&x[1]).tanh()],
        &[rand_f32(&ODD, 153), rand_f32(&[ODD[1], 33], 154)],
        Tol::REDUCE,
    );
    // The right operand over the limit with rows too wide for 64 to fit (1028 bytes): blocks of
    // its columns, the products concatenated. And a result with such rows: blocks of rows.
    check_segmented(
        |x: &[Tensor]| vec![x[1].matmul(&x[0])],
        &[rand_f32(&ODD, 155), rand_f32(&[8, ODD[0]], 156)],
        Tol::REDUCE,
    );
    check_segmented(
        |x: &[Tensor]| vec![x[0].matmul(&x[1])],
        &[rand_f32(&[ODD[0], 6], 157), rand_f32(&[6, ODD[1]], 158)],
        Tol::REDUCE,
    );
}

/// Narrow rows (61 f32) and wide ones (257 f32): x over the limit in both.
const TALL: [usize; 2] = [1201, 61];

/// The gradient of `sum(tanh(x @ W))` with `x` over the limit, with respect to `W` (`x^T @ g`
/// contracts over the large row axis of x: a sum over blocks of rows of x, each read
/// transposed in place) and to `x` (`g @ W^T`, row blocks), against the reference.
#[test]
fn weight_gradients_over_large_inputs() {
    for (shape, n, seed) in [(TALL, 7, 161), (ODD, 5, 163)] {
        let x = rand_f32(&shape, seed);
        let w = rand_f32(&[shape[1], n], seed + 1);
        let f = |a: &[Tensor]| {
            brigade::grad(|p: &[Tensor]| vec![p[0].matmul(&p[1]).tanh().sum_all()])
                .argnums(&[0, 1])
                .apply(a)
        };
        // No transposed copy of x: no kernel transposes a segment of it.
        let program = jit(f)
            .program(&[x.clone(), w.clone()], &devices()[0])
            .unwrap();
        for l in &program.launches {
            assert!(
                !(l.label.contains("transpose") && l.label.contains("seg")),
                "{}",
                l.label
            );
        }
        check_segmented(f, &[x, w], Tol::REDUCE);
    }
}

/// A remap needing more than 65 536 dispatches (a transpose of 257 segments of its operand and
/// 257 of its result, 16 MiB at the forced 64 KiB) is refused with a typed error naming the
/// count and the fix, when the program is compiled.
#[test]
fn too_many_remap_dispatches_refuse_with_a_typed_error() {
    let x = rand_f32(&[2056, 2048], 171);
    for dev in devices() {
        let _g = device_guard(&dev);
        let r = jit(|a: &[Tensor]| vec![a[0].transpose(&[1, 0])])
            .program(std::slice::from_ref(&x), &dev);
        let msg = r.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
        match r {
            Err(Error::OverLimit {
                needed,
                limit,
                limit_name,
                ..
            }) => {
                assert_eq!((needed, limit), (257 * 257, 1 << 16), "{msg}");
                assert_eq!(limit_name, "segmented layout ops", "{msg}");
                assert!(
                    msg.contains("[2056, 2048]") && msg.contains("raise the binding limit"),
                    "{msg}"
                );
            }
            other => panic!("{}: expected OverLimit, got {:?}", dev.name(), other.err()),
        }
    }
}

/// A slice or pad reads only the segments of its operand that each segment of its result maps
/// to: about (result segments + operand segments) dispatches, not their product; a transpose
/// reads all of them.
#[test]
fn slices_and_pads_dispatch_only_where_their_sources_lie() {
    let a = rand_f32(&ODD, 181);
    let dev = &devices()[0];
    let launches = |f: fn(&[Tensor]) -> Vec<Tensor>| {
        jit(f)
            .program(std::slice::from_ref(&a), dev)
            .unwrap()
            .launches
            .len()
    };
    // 5 segments of the operand; results of 3 (the slice) and 5 (the pad) segments.
    let slice = launches(|x| vec![x[0].slice(&[0, 0], &[300, 257], Some(&[2, 1]))]);
    let pad = launches(|x| vec![x[0].pad(&[3, 1], &[2, 5], 1.5f32)]);
    let transpose = launches(|x| vec![x[0].transpose(&[1, 0])]);
    assert!(slice <= 3 + 5, "{slice}");
    assert!(pad <= 5 + 5, "{pad}");
    assert_eq!(transpose, 5 * 5);
}

/// Large operands read through a layout op by a reduction and a matmul: the transpose is stored
/// (over windows), then reduced or multiplied over blocks of rows. x = [61, 1201], 286 KiB.
#[test]
fn layout_ops_feeding_reductions_and_matmuls() {
    let x = rand_f32(&[61, 1201], 191);
    let w = rand_f32(&[61, 7], 192);
    check_segmented(
        |a: &[Tensor]| {
            let t = a[0].transpose(&[1, 0]);
            vec![
                t.sum(1i64, false),
                t.matmul(&a[1]),
                (&t * 2.0).max(1i64, false),
            ]
        },
        &[x, w],
        Tol::REDUCE,
    );
}
