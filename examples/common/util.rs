//! Small helpers the standalone examples share (each includes this file with `#[path]`).

/// `--quick` on the command line or `BRIGADE_QUICK=1`: the short version of an example.
pub fn quick_requested() -> bool {
    std::env::args().any(|a| a == "--quick")
        || std::env::var("BRIGADE_QUICK").is_ok_and(|v| v == "1")
}

/// Deterministic, non-trivial data in [-1, 1) (a 32-bit linear congruential generator).
pub fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}
