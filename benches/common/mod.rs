//! Helpers shared by the benchmark harnesses.

use std::time::{Duration, Instant};

use brigade::Result;

/// Deterministic data in [-0.5, 0.5).
pub fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(7);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

/// Median of `reps` timings of `f` after one warm-up.
pub fn time(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<Duration> {
    f()?;
    let mut ts = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        ts.push(t.elapsed());
    }
    ts.sort();
    Ok(ts[ts.len() / 2])
}
