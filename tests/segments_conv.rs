//! Convolutions and windows whose one leading entry (one image, one batch entry a kernel
//! gradient contracts) is larger than one storage binding, in the cases that were refused
//! before: the kernel gradient of such an image, channels-first layouts, and an input dilation
//! along the axis the chunks cut. Driven with small arrays on the forced 64 KiB limit
//! (`tests/common/segments.rs`), on Vulkan and GL, against the CPU reference.

mod common;

use brigade::{Array, ConvOptions, Padding, Tensor, Window, WindowOp, grad};
use common::segments::*;
use common::*;

/// One NHWC image of 97 x 53 x 8 f32 (164 KiB, over the 64 KiB limit), values in [-1, 1).
fn image(seed: u64) -> Array {
    rand_f32_in(&[1, 97, 53, 8], seed, -1.0, 1.0)
}

/// The gradients `argnums` of `sum(conv(x, w) * c)`: the cotangent of the convolution is `c`.
fn conv_grads(
    opts: ConvOptions,
    argnums: &'static [usize],
) -> impl Fn(&[Tensor]) -> Vec<Tensor> + Clone {
    move |t: &[Tensor]| {
        let opts = opts.clone();
        grad(move |p: &[Tensor]| vec![(&p[0].conv_general_dilated(&p[1], &opts) * &p[2]).sum_all()])
            .argnums(argnums)
            .apply(t)
    }
}

/// A kernel gradient element sums up to 97 x 53 = 5 141 products of an input in [-1, 1) and a
/// cotangent in [-1, 1) (standard deviation about 0.19 each). Accumulated in f32, the rounding
/// error grows like eps * 0.19 * n / sqrt(2), about 4e-5 at n = 5 141; the elements themselves are
/// about 0.19 * sqrt(n), around 14. 1e-3 absolute (plus the suites' 1e-4 relative) leaves a
/// margin over 20x, and a chunk dropped or added twice moves elements by about 1.
const KERNEL_GRAD: Tol = Tol {
    rtol: 1e-4,
    atol: 1e-3,
};

#[test]
fn kernel_gradient_of_one_image_over_the_limit_sums_chunks_of_rows() {
    let nhwc = |strides: &[usize], padding: Padding| {
        ConvOptions::new(strides, padding).dimension_numbers("NHWC", "HWIO", "NHWC")
    };
    let w = rand_f32_in(&[3, 3, 8, 5], 201, -1.0, 1.0);
    // (options, result shape): stride 1 SAME (the cotangent over the limit too), stride 2
    // VALID and SAME (odd sizes: rows of the input no window reads at the end).
    for (opts, out, seed) in [
        (nhwc(&[1, 1], Padding::Same), [1, 97, 53, 5], 202),
        (nhwc(&[2, 2], Padding::Valid), [1, 48, 26, 5], 203),
        (nhwc(&[2, 1], Padding::Same), [1, 49, 53, 5], 204),
    ] {
        check_segmented(
            conv_grads(opts, &[1]),
            &[
                image(seed),
                w.clone(),
                rand_f32_in(&out, seed + 10, -1.0, 1.0),
            ],
            KERNEL_GRAD,
        );
    }
    // Two images, and a kernel dilated along the cut axis.
    check_segmented(
        conv_grads(nhwc(&[1, 2], Padding::Valid).rhs_dilation(&[3, 1]), &[1]),
        &[
            rand_f32_in(&[2, 97, 53, 8], 205, -1.0, 1.0),
            w,
            rand_f32_in(&[2, 91, 26, 5], 206, -1.0, 1.0),
        ],
        KERNEL_GRAD,
    );
}

#[test]
fn channels_first_convolutions_of_one_image_over_the_limit_run_transposed() {
    // NCHW image of 8 x 97 x 53 (164 KiB), OIHW kernel: the forward pass, its input gradient
    // (stride 2: an input dilation of 2 along the height) and its kernel gradient.
    let x = rand_f32_in(&[1, 8, 97, 53], 211, -1.0, 1.0);
    let w = rand_f32_in(&[5, 8, 3, 3], 212, -1.0, 1.0);
    let (same, strided) = (
        ConvOptions::new(&[1, 1], Padding::Same),
        ConvOptions::new(&[2, 1], Padding::Same),
    );
    let (s, t) = (same.clone(), strided.clone());
    check_segmented(
        move |a: &[Tensor]| {
            vec![
                a[0].conv_general_dilated(&a[1], &s),
                a[0].conv_general_dilated(&a[1], &t),
            ]
        },
        &[x.clone(), w.clone()],
        Tol::REDUCE,
    );
    for (opts, out) in [(same, [1, 5, 97, 53]), (strided, [1, 5, 49, 53])] {
        check_segmented(
            conv_grads(opts, &[0, 1]),
            &[x.clone(), w.clone(), rand_f32_in(&out, 213, -1.0, 1.0)],
            KERNEL_GRAD,
        );
    }
    // A layout where neither the batch nor the features lead ("HNWC"-like: CHWN for the
    // input), one image over the limit.
    let opts = ConvOptions::new(&[1, 1], Padding::Valid).dimension_numbers("HNWC", "HWIO", "NHWC");
    check_segmented(
        move |a: &[Tensor]| vec![a[0].conv_general_dilated(&a[1], &opts)],
        &[
            rand_f32_in(&[97, 1, 53, 8], 214, -1.0, 1.0),
            rand_f32_in(&[3, 3, 8, 5], 215, -1.0, 1.0),
        ],
        Tol::REDUCE,
    );
}

#[test]
fn an_input_dilation_along_the_cut_axis_maps_chunks_to_undilated_rows() {
    // A transposed convolution (lhs dilation 2 along the height) of one NHWC image of
    // 60 x 40 x 8 (75 KiB), result 119 x 40 x 5 (93 KiB): forward, and both gradients (the
    // kernel's reads the dilated input in chunks of rows of the cotangent).
    let opts = ConvOptions::new(&[1, 1], Padding::Explicit(vec![(1, 1), (1, 1)]))
        .lhs_dilation(&[2, 1])
        .dimension_numbers("NHWC", "HWIO", "NHWC");
    let x = rand_f32_in(&[1, 60, 40, 8], 221, -1.0, 1.0);
    let w = rand_f32_in(&[3, 3, 8, 5], 222, -1.0, 1.0);
    let o = opts.clone();
    check_segmented(
        move |a: &[Tensor]| vec![a[0].conv_general_dilated(&a[1], &o)],
        &[x.clone(), w.clone()],
        Tol::REDUCE,
    );
    check_segmented(
        conv_grads(opts, &[0, 1]),
        &[x, w, rand_f32_in(&[1, 119, 40, 5], 223, -1.0, 1.0)],
        KERNEL_GRAD,
    );
    // The input gradient of a strided NHWC convolution: the cotangent dilated by the stride.
    let strided =
        ConvOptions::new(&[3, 2], Padding::Same).dimension_numbers("NHWC", "HWIO", "NHWC");
    check_segmented(
        conv_grads(strided, &[0]),
        &[
            image(224),
            rand_f32_in(&[3, 3, 8, 5], 225, -1.0, 1.0),
            rand_f32_in(&[1, 33, 27, 5], 226, -1.0, 1.0),
        ],
        Tol::REDUCE,
    );
    // reduce_window with a base dilation along the axis its window spans: one row of 70 001
    // (every window of 3 meets a real cell), a 2-D array cut along its rows (refused before),
    // and the max's gradient (select_and_scatter_add over the dilated input).
    let row = Window {
        dims: vec![3],
        strides: vec![2],
        padding: vec![(1, 1)],
        base_dilation: vec![2],
        window_dilation: vec![1],
    };
    let rows = Window {
        dims: vec![3, 1],
        strides: vec![2, 1],
        padding: vec![(0, 0); 2],
        base_dilation: vec![2, 1],
        window_dilation: vec![1, 1],
    };
    let (r, rs) = (row.clone(), rows.clone());
    check_segmented(
        move |a: &[Tensor]| {
            vec![
                a[0].reduce_window_dilated(WindowOp::Max, &r),
                a[0].reduce_window_dilated(WindowOp::Sum, &r),
                a[1].reduce_window_dilated(WindowOp::Max, &rs),
            ]
        },
        &[rand_f32(&[70_001], 227), rand_f32(&ODD, 228)],
        Tol::REDUCE,
    );
    check_segmented(
        move |a: &[Tensor]| {
            let (r, rs) = (row.clone(), rows.clone());
            grad(move |p: &[Tensor]| {
                let y = p[0].reduce_window_dilated(WindowOp::Max, &r);
                let z = p[1].reduce_window_dilated(WindowOp::Max, &rs);
                vec![&(&y * &y).sum_all() + &(&z * &z).sum_all()]
            })
            .argnums(&[0, 1])
            .apply(a)
        },
        &[rand_f32(&[70_001], 229), rand_f32(&ODD, 230)],
        Tol::ARITH,
    );
}
