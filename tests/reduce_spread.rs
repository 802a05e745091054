//! The reduction kernels a GPU gets (`BRIGADE_REDUCE_SPREAD=gpu`, the default on discrete,
//! integrated and virtual GPUs), run on lavapipe and llvmpipe GL and compared with the reference
//! interpreter. CPU adapters get the narrower spread by default, so without the override these
//! shapes (1024 workgroups, a workgroup per long row) would never run in CI.
//!
//! The variable is set before the first program is compiled and never unset: this binary holds
//! only tests that want it.

mod common;

use brigade::device::REDUCE_SPREAD_ENV;
use brigade::{Array, Tensor, jit};
use common::*;

fn gpu_spread() {
    static SET: std::sync::Once = std::sync::Once::new();
    // SAFETY: set once, before any thread of this binary reads the environment through brigade
    // (every test calls this first, and `Once` makes the others wait for it).
    SET.call_once(|| unsafe { std::env::set_var(REDUCE_SPREAD_ENV, "gpu") });
}

/// Kernel labels and WGSL of `f`'s program on every GPU device of the shared runtime.
fn launches(f: impl Fn(&[Tensor]) -> Vec<Tensor>, args: &[Array]) -> Vec<Vec<(String, String)>> {
    let j = jit(f);
    gpu_devices()
        .iter()
        .map(|d| {
            let _guard = device_guard(d);
            j.program(args, d)
                .unwrap()
                .launches
                .iter()
                .map(|l| (l.label.clone(), l.wgsl.clone()))
                .collect()
        })
        .collect()
}

#[test]
fn a_full_sum_splits_over_256_workgroups_and_matches_the_reference() {
    gpu_spread();
    // 2^22 elements: 256 parts of 16384 under the GPU spread (64 under the CPU one).
    let n = 1 << 22;
    let x = rand_f32_in(&[n], 11, -1.0, 1.0);
    let y = rand_f32_in(&[n], 12, -1.0, 1.0);
    let f = |t: &[Tensor]| {
        vec![
            t[0].sum_all(),
            (&t[0] * &t[1]).sum_all(),
            t[0].max(0i64, false),
        ]
    };
    for l in launches(f, &[x.clone(), y.clone()]) {
        let names: Vec<&String> = l.iter().map(|(n, _)| n).collect();
        assert_eq!(l.len(), 6, "three two-pass reductions: {names:?}");
        let firsts: Vec<&String> = l
            .iter()
            .filter(|(n, _)| n.ends_with("_wg"))
            .map(|(_, w)| w)
            .collect();
        assert_eq!(firsts.len(), 3, "{names:?}");
        // Output `wg / 256` of the workgroup index: 256 parts per output.
        assert!(firsts.iter().all(|w| w.contains("wg / 256u")), "{names:?}");
    }
    check_on_all(f, &[x, y], Tol::REDUCE);
}

#[test]
fn long_rows_get_workgroups_of_their_own_instead_of_one_invocation_each() {
    gpu_spread();
    // 1024 rows: under the CPU spread (512) one invocation per row; under the GPU one (8192),
    // the cooperative kernel.
    let x = rand_f32_in(&[1024, 8192], 21, -2.0, 2.0);
    let f = |t: &[Tensor]| vec![t[0].sum(1i64, false), t[0].mean(1i64, true)];
    for l in launches(f, std::slice::from_ref(&x)) {
        let names: Vec<&String> = l.iter().map(|(n, _)| n).collect();
        let reductions: Vec<&&String> = names.iter().filter(|n| n.starts_with("reduce_")).collect();
        // The sum and the mean's sum (its scale is a fused kernel of its own).
        assert_eq!(reductions.len(), 2, "{names:?}");
        assert!(reductions.iter().all(|n| n.ends_with("_wg")), "{names:?}");
    }
    check_on_all(f, &[x], Tol::REDUCE);
    // Rows of a length that is no multiple of 4 (scalar loads), max and min.
    let x = rand_f32_in(&[300, 4099], 22, -3.0, 3.0);
    let f = |t: &[Tensor]| vec![t[0].max(1i64, false), t[0].min(1i64, false)];
    for l in launches(f, std::slice::from_ref(&x)) {
        let names: Vec<&String> = l.iter().map(|(n, _)| n).collect();
        assert!(
            names.len() == 2 && names.iter().all(|n| n.ends_with("_wg")),
            "{names:?}"
        );
    }
    check_on_all(f, &[x], Tol::EXACT);
}

#[test]
fn column_sums_split_their_rows_wider() {
    gpu_spread();
    // 64 columns (4 invocations of 16 outputs): the GPU spread splits the 8192 rows in 64 parts.
    let x = rand_f32_in(&[8192, 64], 31, -1.0, 1.0);
    let i = rand_i32(&[4096, 32], 32, -1000, 1000);
    check_on_all(|t| vec![t[0].sum(0i64, false)], &[x], Tol::REDUCE);
    check_on_all(|t| vec![t[0].sum(0i64, false)], &[i], Tol::EXACT);
}
