//! Kernel families over arrays larger than one storage binding, driven with small arrays on the
//! forced 64 KiB limit (`tests/common/segments.rs`): reductions and arg-reductions whose rows
//! are too wide for 64 of them to fit a binding, or which reduce over the cut axis (partials per
//! chunk, combined by one more program). Every case runs on Vulkan and GL, checks that the
//! program binds segments (views within the limit at 256-byte aligned offsets) and compares with
//! the CPU reference.

mod common;

use brigade::{Array, Tensor};
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
