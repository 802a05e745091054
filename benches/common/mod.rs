//! Helpers shared by the benchmark harnesses: deterministic data, the timing loop, and byte sizes
//! as table labels.
//!
//! Each harness compiles this module on its own and uses a different part of it.
#![allow(dead_code)]

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

/// One timed measurement: the median timed call, the first (warm-up) call, and how many calls
/// were timed.
pub struct Measured {
    pub median: Duration,
    pub first: Duration,
    pub runs: usize,
}

impl Measured {
    /// The same figures for one of `k` equal steps that each timed call made (`runs` unchanged).
    pub fn per(&self, k: usize) -> Measured {
        let k = k.max(1) as u32;
        Measured {
            median: self.median / k,
            first: self.first / k,
            runs: self.runs,
        }
    }
}

/// `warmup` untimed calls of `f` (at least one), then the median of `reps` timed calls. With a
/// `budget`, fewer timed calls (at least one) when the last warm-up call says `reps` of them would
/// take longer than that.
pub fn measure(
    warmup: usize,
    reps: usize,
    budget: Option<Duration>,
    f: impl FnMut() -> Result<()>,
) -> Result<Measured> {
    measure_warm(warmup, Duration::ZERO, reps, budget, f)
}

/// [`measure`], with untimed calls going on until they have taken `warm_for` in all: a GPU lowers
/// its clocks while it idles and raises them only under sustained work, so a row timed right after
/// host-only work measures part of the ramp (seen on an H200 with one warm-up call: the fused
/// elementwise row at 421 µs in one pass and 665 µs in the next of the same run; with 0.3 s of
/// warm-up the passes agreed).
pub fn measure_warm(
    warmup: usize,
    warm_for: Duration,
    reps: usize,
    budget: Option<Duration>,
    mut f: impl FnMut() -> Result<()>,
) -> Result<Measured> {
    let mut first = Duration::ZERO;
    let mut last = Duration::ZERO;
    let start = Instant::now();
    let mut i = 0;
    while i < warmup.max(1) || start.elapsed() < warm_for {
        let t = Instant::now();
        f()?;
        last = t.elapsed();
        if i == 0 {
            first = last;
        }
        i += 1;
    }
    let reps = match budget {
        Some(b) => reps.min((b.as_secs_f64() / last.as_secs_f64().max(1e-9)) as usize),
        None => reps,
    }
    .max(1);
    let mut ts = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        ts.push(t.elapsed());
    }
    ts.sort();
    Ok(Measured {
        median: ts[ts.len() / 2],
        first,
        runs: reps,
    })
}

/// `bytes` as a table label: whole MiB from 1 MiB up, else whole KiB.
pub fn mib(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}
