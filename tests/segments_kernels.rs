//! Kernel families over arrays larger than one storage binding, driven with small arrays on the
//! forced 64 KiB limit (`tests/common/segments.rs`): reductions and arg-reductions whose rows
//! are too wide for 64 of them to fit a binding, or which reduce over the cut axis (partials per
//! chunk, combined by one more program). Every case runs on Vulkan and GL, checks that the
//! program binds segments (views within the limit at 256-byte aligned offsets) and compares with
//! the CPU reference.

mod common;

use brigade::nn::{self, Layout};
use brigade::{Array, ConvOptions, Error, Padding, Tensor, Window, WindowOp, grad, jit};
use common::segments::*;
use common::*;

/// f32 with many ties (small integers) and NaNs at `nans` (flat indices).
fn ties_and_nans(shape: &[usize], seed: u64, nans: &[usize]) -> Array {
    let mut v: Vec<f32> = i32s(numel(shape), seed, -3, 3)
        .into_iter()
        .map(|x| x as f32)
        .collect();
    for &i in nans {
        v[i] = f32::NAN;
    }
    Array::from_vec(v, shape).unwrap()
}

#[test]
fn arg_reductions_along_the_cut_axis_combine_chunk_partials() {
    let [rows, cols] = ODD;
    // NaNs: column 5 in the last chunk only, column 9 in two chunks (the first one wins), column
    // 12 in the first row; every other column ties (values in -3..3, 301 rows).
    let nans = [
        290 * cols + 5,
        200 * cols + 9,
        70 * cols + 9,
        12,
        250 * cols + 12,
    ];
    let a = ties_and_nans(&ODD, 81, &nans);
    let got = check_segmented(
        |x: &[Tensor]| vec![x[0].argmax(0, false), x[0].argmin(0, false)],
        std::slice::from_ref(&a),
        Tol::EXACT,
    );
    // The reference keeps JAX's rules: the first NaN, else the first of the tied extremes.
    let first = got[0].to_vec::<i32>().unwrap();
    assert_eq!((first[5], first[9], first[12]), (290, 70, 0));
    assert_eq!(got[1].to_vec::<i32>().unwrap()[9], 70);
    assert!(first.iter().all(|&i| (0..rows as i32).contains(&i)));
    // Integers, and a middle axis of a 3-d array: rows of [301, 90] per leading index, cut into
    // chunks of 128 (three partials per row, nine in all).
    check_segmented(
        |x: &[Tensor]| vec![x[0].argmax(0, false), x[1].argmin(1, true)],
        &[
            rand_i32(&ODD, 82, -50, 50),
            ties_and_nans(&[3, 301, 90], 83, &[301 * 90 + 200 * 90 + 7]),
        ],
        Tol::EXACT,
    );
}

#[test]
fn reductions_with_rows_wider_than_64_per_binding() {
    // 64 rows of 257 f32 exceed 64 KiB: blocks of 63 rows, their views and results staged
    // through copies (offsets off the 256-byte alignment).
    let a = rand_f32(&ODD, 91);
    check_segmented(
        |x: &[Tensor]| {
            vec![
                x[0].sum(1i64, false),
                x[0].max(1i64, true),
                x[0].argmax(1, false),
                x[0].argmin(1, false),
            ]
        },
        std::slice::from_ref(&a),
        Tol::REDUCE,
    );
    // One row over the limit (70 001 f32): the reduced axis cut into chunks, partials combined;
    // a mean over a middle axis; axes 0 and 2 of [301, 3, 90] (a partial of 3 per chunk).
    check_segmented(
        |x: &[Tensor]| {
            vec![
                x[0].sum(1i64, false),
                x[0].argmax(1, false),
                x[1].mean(1i64, false),
                x[2].sum(&[0i64, 2][..], false),
                x[2].min(&[0i64, 2][..], false),
            ]
        },
        &[
            rand_f32(&[3, 70_001], 92),
            rand_f32(&[3, 301, 90], 93),
            rand_f32(&[301, 3, 90], 94),
        ],
        Tol::REDUCE,
    );
}

#[test]
fn reductions_whose_partials_exceed_one_binding_are_cut_along_a_kept_axis() {
    // Column sums and arg-reductions of [300, 1201]: one slice of the reduced axis is 4 804
    // bytes, so chunks of 13 rows give 24 partials of 4 864 bytes (116 736 bytes, over the
    // limit): the columns are cut in two pieces, each reduced in chunks, then concatenated.
    // A mean over the middle axis of [3, 200, 701] (27 partials of 3 072 bytes), and a column
    // sum whose result alone (17 001 f32, 68 004 bytes) is over the limit (16 pieces).
    check_segmented(
        |x: &[Tensor]| {
            vec![
                x[0].sum(0i64, false),
                x[0].argmax(0, false),
                x[0].argmin(0, true),
                x[1].mean(1i64, false),
                x[2].sum(0i64, false),
            ]
        },
        &[
            ties_and_nans(&[300, 1201], 95, &[290 * 1201 + 5, 70 * 1201 + 5, 3]),
            rand_f32(&[3, 200, 701], 96),
            rand_f32(&[40, 17_001], 97),
        ],
        Tol::REDUCE,
    );
}

/// NCHW, 81 KiB: 15 rows (batch x channels) of 33 x 41 f32, 12 per block.
const POOL: [usize; 4] = [3, 5, 33, 41];

#[test]
fn pooling_and_its_gradient_over_blocks_of_batch_and_channels() {
    let x = rand_f32(&POOL, 101);
    check_segmented(
        |t: &[Tensor]| {
            vec![
                nn::max_pool(&t[0], &[2, 2], &[2, 2], &Padding::Valid, Layout::Nchw),
                nn::max_pool(&t[0], &[3, 3], &[2, 1], &Padding::Same, Layout::Nchw),
                t[0].reduce_window(WindowOp::Sum, &[1, 1, 3, 2], &[1, 1, 1, 2], &[(0, 0); 4]),
            ]
        },
        std::slice::from_ref(&x),
        Tol::REDUCE,
    );
    // NHWC: only the batch leads (5 rows of 21 216 bytes, 3 per block).
    check_segmented(
        |t: &[Tensor]| {
            vec![nn::avg_pool(
                &t[0],
                &[3, 3],
                &[2, 2],
                &Padding::Same,
                Layout::Nhwc,
                false,
            )]
        },
        &[rand_f32(&[5, 17, 13, 24], 102)],
        Tol::ARITH,
    );
    // The gradient of a max pool (select_and_scatter_add writing an array over the limit), and
    // of the pooled values' sum of squares through a segmented elementwise step. Ties (small
    // integers) exercise the first-maximum rule.
    let ties = ties_and_nans(&POOL, 103, &[]);
    for a in [x, ties] {
        check_segmented(
            |t: &[Tensor]| {
                grad(|p: &[Tensor]| {
                    let y = nn::max_pool(&p[0], &[3, 3], &[2, 2], &Padding::Same, Layout::Nchw);
                    vec![(&y * &y).sum_all()]
                })
                .apply(t)
            },
            std::slice::from_ref(&a),
            Tol::ARITH,
        );
    }
}

#[test]
fn windows_spanning_the_cut_axis_read_overlapping_rows() {
    // One row of 70 001 f32: chunks of windows, each reading the rows its windows cover (stride
    // 2, padding (2, 1); a dilated window of span 7).
    let dilated = Window {
        dims: vec![4],
        strides: vec![3],
        padding: vec![(3, 5)],
        base_dilation: vec![1],
        window_dilation: vec![2],
    };
    check_segmented(
        move |t: &[Tensor]| {
            vec![
                t[0].reduce_window(WindowOp::Max, &[3], &[2], &[(2, 1)]),
                t[0].reduce_window_dilated(WindowOp::Sum, &dilated),
            ]
        },
        &[rand_f32(&[70_001], 104)],
        Tol::REDUCE,
    );
    // NHWC with a batch of 1 (164 KiB): cut along the height the window spans.
    let x = rand_f32(&[1, 97, 53, 8], 105);
    check_segmented(
        |t: &[Tensor]| {
            vec![
                nn::max_pool(&t[0], &[3, 3], &[2, 2], &Padding::Same, Layout::Nhwc),
                nn::avg_pool(&t[0], &[2, 3], &[1, 2], &Padding::Valid, Layout::Nhwc, true),
            ]
        },
        std::slice::from_ref(&x),
        Tol::ARITH,
    );
    // Max-pool gradients (select_and_scatter_add): chunks of result rows, each scattered from
    // every window overlapping it. Overlapping windows (span 3, stride 2), windows with gaps
    // between them (rows no window covers get 0), the NHWC pool with a batch of 1, and ties.
    let pooled_grad = |pool: fn(&Tensor) -> Tensor| {
        move |t: &[Tensor]| {
            grad(move |p: &[Tensor]| {
                let y = pool(&p[0]);
                vec![(&y * &y).sum_all()]
            })
            .apply(t)
        }
    };
    for pool in [
        (|x: &Tensor| x.reduce_window(WindowOp::Max, &[3], &[2], &[(2, 1)]))
            as fn(&Tensor) -> Tensor,
        |x: &Tensor| x.reduce_window(WindowOp::Min, &[2], &[3], &[(0, 0)]),
    ] {
        check_segmented(
            pooled_grad(pool),
            &[ties_and_nans(&[70_001], 108, &[])],
            Tol::ARITH,
        );
    }
    check_segmented(
        pooled_grad(|x: &Tensor| nn::max_pool(x, &[3, 3], &[2, 2], &Padding::Same, Layout::Nhwc)),
        std::slice::from_ref(&x),
        Tol::ARITH,
    );
    check_segmented(
        pooled_grad(|x: &Tensor| {
            x.reduce_window(WindowOp::Max, &[3, 1], &[1, 1], &[(1, 1), (0, 0)])
        }),
        &[rand_f32(&ODD, 109)],
        Tol::ARITH,
    );
    // select_and_gather (the second-order max-pool gradient): d/dc of
    // sum(grad_x(sum(pool(x) * c)) * r) reads r at every window's first maximum.
    let pool = |x: &Tensor| nn::max_pool(x, &[3, 3], &[2, 2], &Padding::Same, Layout::Nhwc);
    check_segmented(
        move |t: &[Tensor]| {
            grad(move |p: &[Tensor]| {
                let inner = move |u: &[Tensor]| vec![(&pool(&u[0]) * &u[1]).sum_all()];
                let gx = grad(inner).apply(&[p[0].clone(), p[1].clone()]);
                vec![(&gx[0] * &p[2]).sum_all()]
            })
            .argnums(&[1])
            .apply(t)
        },
        &[
            x,
            rand_f32(&[1, 49, 27, 8], 106),
            rand_f32(&[1, 97, 53, 8], 107),
        ],
        Tol::ARITH,
    );
}

#[test]
fn convolutions_and_their_gradients_over_blocks_of_the_batch() {
    // NCHW input of 67 x [3, 13, 11] (115 KiB), result 67 x [8, 11, 9] (207 KiB): blocks of 20.
    let x = rand_f32(&[67, 3, 13, 11], 111);
    let w = rand_f32(&[8, 3, 3, 3], 112);
    check_segmented(
        |t: &[Tensor]| {
            vec![
                t[0].conv(&t[1], &[1, 1], Padding::Valid),
                t[0].conv(&t[1], &[2, 1], Padding::Same),
            ]
        },
        &[x.clone(), w.clone()],
        Tol::REDUCE,
    );
    // Both gradients: the input's (a convolution per block of the batch) and the kernel's (the
    // batch contracted: per-block partials summed). The kernel gradient sums 67 x 99 products
    // of about unit size per element.
    check_segmented(
        |t: &[Tensor]| {
            grad(|p: &[Tensor]| {
                let y = p[0].conv(&p[1], &[1, 1], Padding::Same).tanh();
                vec![(&y * &y).sum_all()]
            })
            .argnums(&[0, 1])
            .apply(t)
        },
        &[x, w],
        Tol::REDUCE,
    );
    // NHWC (the batch leads here too), stride 2.
    let opts = ConvOptions::new(&[2, 2], Padding::Same).dimension_numbers("NHWC", "HWIO", "NHWC");
    check_segmented(
        move |t: &[Tensor]| vec![t[0].conv_general_dilated(&t[1], &opts)],
        &[
            rand_f32(&[41, 17, 13, 6], 113),
            rand_f32(&[3, 3, 6, 5], 114),
        ],
        Tol::REDUCE,
    );
}

#[test]
fn convolutions_of_one_large_image_read_overlapping_rows() {
    // NHWC with a batch of 2 (each 164 KiB): chunks of result rows along the height, each
    // reading the rows its windows cover. SAME with stride (2, 1), and a dilated VALID kernel.
    let x = rand_f32(&[2, 97, 53, 8], 115);
    let w = rand_f32(&[3, 3, 8, 5], 116);
    let nhwc = |strides: &[usize], padding: Padding| {
        ConvOptions::new(strides, padding).dimension_numbers("NHWC", "HWIO", "NHWC")
    };
    let (same, dilated) = (
        nhwc(&[2, 1], Padding::Same),
        nhwc(&[1, 1], Padding::Valid).rhs_dilation(&[2, 3]),
    );
    check_segmented(
        move |t: &[Tensor]| {
            vec![
                t[0].conv_general_dilated(&t[1], &same),
                t[0].conv_general_dilated(&t[1], &dilated),
            ]
        },
        &[x.clone(), w.clone()],
        Tol::REDUCE,
    );
    // The input gradient (a stride-1 convolution of the cotangent, cut the same way).
    let opts = nhwc(&[1, 1], Padding::Same);
    check_segmented(
        move |t: &[Tensor]| {
            grad(|p: &[Tensor]| {
                let y = p[0].conv_general_dilated(&p[1], &opts).tanh();
                vec![(&y * &y).sum_all()]
            })
            .argnums(&[0])
            .apply(t)
        },
        &[x, w],
        Tol::REDUCE,
    );
}

#[test]
fn argsort_over_blocks_of_rows() {
    // Rows of 257 f32 (63 per block) with ties and NaNs; the last axis of a 3-d array. The
    // sorted values too (gathered through the segmented `take_along_axis`), ascending and
    // descending (NaNs last, ties stable).
    check_segmented(
        |t: &[Tensor]| {
            vec![
                t[0].argsort(1),
                t[1].argsort(2),
                t[0].sort(1),
                brigade::numpy::sort(&t[1], Some(2), true),
            ]
        },
        &[
            ties_and_nans(&ODD, 121, &[5, 300, 257 * 40 + 7]),
            rand_f32(&[3, 301, 90], 122),
        ],
        Tol::EXACT,
    );
}

/// A sort along a middle axis whose one block of leading rows is over the limit (rows of
/// 20 000 keys): the axis is moved last (a transpose over segments), sorted over merged chunks,
/// and the indices moved back.
#[test]
fn a_middle_axis_sort_row_over_one_binding_runs_on_transposed_keys() {
    let x = ties_and_nans(&[2, 20_000, 3], 132, &[5, 40_001, 119_999]);
    check_segmented(
        |t: &[Tensor]| {
            vec![
                t[0].argsort(1),
                t[0].sort(1),
                brigade::numpy::argsort(&t[0], Some(1), true),
            ]
        },
        std::slice::from_ref(&x),
        Tol::EXACT,
    );
}

#[test]
fn a_sort_row_over_one_binding_merges_sorted_chunks() {
    // 1-D rows of 40 001 and 100 003 keys: 8 192 elements of sort state (a key and its index)
    // per 64 KiB chunk, so 5 and 13 chunks (the tail padded), each sorted alone, then merged by
    // a network over 8 and 16 chunks whose comparators with a missing chunk are left out. Ties (small integers) and NaNs, also at chunk edges,
    // check the stable order and NaN placement, ascending and descending; i32 keys too. The
    // sorted values are gathered through the segmented `take_along_axis`.
    use brigade::numpy;
    let edges = [0, 17, 8191, 8192, 16_385, 40_000];
    check_segmented(
        |t: &[Tensor]| {
            vec![
                t[0].argsort(0),
                t[0].sort(0),
                numpy::argsort(&t[0], Some(0), true),
                t[1].argsort(0),
                numpy::sort(&t[1], Some(0), true),
                numpy::argsort(&t[1], Some(0), true),
                t[2].argsort(0),
                t[2].sort(0),
                numpy::argsort(&t[2], Some(0), true),
            ]
        },
        &[
            ties_and_nans(&[40_001], 141, &edges),
            ties_and_nans(&[100_003], 142, &[5, 8192, 50_000, 99_999, 100_002]),
            rand_i32(&[100_003], 143, -50, 50),
        ],
        Tol::EXACT,
    );
    // The merge-sort state holds the row's 13 chunks only, twice (the network runs over 16,
    // its comparators with the 3 missing chunks left out): 2 × 13 × 64 KiB, not 2 × 16.
    let x = ties_and_nans(&[100_003], 146, &[]);
    let dev = &devices()[0];
    let mem = jit(|t: &[Tensor]| vec![t[0].argsort(0)])
        .on(dev)
        .memory_analysis(&[x])
        .unwrap();
    let state = 2 * 13 * LIMIT;
    assert!(
        mem.temp_bytes >= state && mem.temp_bytes < state + 3 * LIMIT,
        "on {dev}: temporaries {} bytes, want 2 × 13 chunks ({state}) and little else",
        mem.temp_bytes
    );
    // Several rows over the limit (rows of 20 001 keys start off the 256-byte alignment: their
    // chunks are staged through copies), and a sort along the leading axis whose transposed row
    // is over the limit.
    check_segmented(
        |t: &[Tensor]| {
            vec![
                t[0].argsort(1),
                numpy::argsort(&t[0], Some(1), true),
                t[1].argsort(0),
            ]
        },
        &[
            ties_and_nans(&[3, 20_001], 144, &[3, 20_001 + 8192, 2 * 20_001 + 20_000]),
            ties_and_nans(&[20_001, 2], 145, &[0, 1, 4001]),
        ],
        Tol::EXACT,
    );
}

#[test]
fn kernels_that_cannot_be_cut_refuse_with_typed_errors() {
    let a = rand_f32(&ODD, 131);
    for dev in devices() {
        let _g = device_guard(&dev);
        // A window along the cut axis whose one window (300 rows of 1 028 bytes) is over one
        // binding. (An input dilation along that axis is cut: tests/segments_conv.rs.)
        let tall = Window::new(&[300, 1], &[1, 1], &[(0, 0); 2]);
        refused(
            &dev,
            move |t: &[Tensor]| vec![t[0].reduce_window_dilated(WindowOp::Max, &tall)],
            std::slice::from_ref(&a),
            "`reduce_window_max` kernels",
        );
        // (Sorting along the leading axis runs on transposed keys: tests/segments.rs.)
    }
    let dev = &devices()[0];
    let _g = device_guard(dev);
    // A convolution whose kernel (73 728 bytes) is over the limit: every block binds it whole.
    // (The kernel gradient of one image over the limit is cut: tests/segments_conv.rs.)
    let opts = ConvOptions::new(&[1, 1], Padding::Same).dimension_numbers("NHWC", "HWIO", "NHWC");
    let err = jit(move |t: &[Tensor]| vec![t[0].conv_general_dilated(&t[1], &opts)])
        .on(dev)
        .call(&[
            rand_f32(&[2, 9, 9, 32], 133),
            rand_f32(&[3, 3, 32, 64], 134),
        ])
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, Error::OverLimit { limit: LIMIT, .. })
            && msg.contains("[3, 3, 32, 64]")
            && msg.contains("kernel bound whole"),
        "{msg}"
    );
}
