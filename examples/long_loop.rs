//! A long `fori_loop` inside `jit` runs in flat host memory, and leaves later calls as fast as
//! before: this example prints the process's resident memory (RSS) and the rate of small jit
//! calls before and after loops of growing length, on every GPU device (or the one that
//! `BRIGADE_DEVICES` picks), and checks each loop's value against the host.
//!
//! `cargo run --release --example long_loop -- 1000000` runs 10⁶ iterations (default 10⁵).
//! Exits with status 1 when a value is wrong or memory grew by more than 64 MiB.

use std::time::{Duration, Instant};

use brigade::{Array, Device, Result, Runtime, Tensor, fori_loop, jit};

/// Resident set size in bytes, from `/proc/self/statm` (0 where it does not exist).
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

/// Small jit calls per second on `dev` (each call waits for its result).
fn call_rate(dev: &Device) -> Result<f64> {
    let f = jit(|a: &[Tensor]| vec![&a[0] * 2.0 + 1.0]).on(dev);
    let x = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4])?.to_device(dev)?;
    f.call(std::slice::from_ref(&x))?[0].to_vec::<f32>()?;
    let t = Instant::now();
    let mut n = 0u32;
    while t.elapsed() < Duration::from_millis(500) {
        f.call(std::slice::from_ref(&x))?[0].to_vec::<f32>()?;
        n += 1;
    }
    Ok(f64::from(n) / t.elapsed().as_secs_f64())
}

/// `x <- x * 0.999 + 0.001 * i` over 8 lanes, `iters` times; returns the device's and the host's values.
fn run_loop(dev: &Device, iters: i32) -> Result<(Vec<f32>, Vec<f32>)> {
    let f = jit(move |a: &[Tensor]| {
        fori_loop(
            0,
            iters,
            |i, v| vec![&v[0] * 0.999 + i.cast(brigade::DType::F32) * 0.001],
            &a[..1],
        )
    })
    .on(dev);
    let x0: Vec<f32> = (0..8).map(|k| k as f32 - 3.5).collect();
    let got = f.call(&[Array::from_vec(x0.clone(), &[8])?])?[0].to_vec::<f32>()?;
    let mut want = x0;
    for i in 0..iters {
        for v in &mut want {
            *v = *v * 0.999 + i as f32 * 0.001;
        }
    }
    Ok((got, want))
}

fn main() -> Result<()> {
    let iters: i32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let rt = pollster::block_on(Runtime::new())?;
    let mut ok = true;
    for dev in rt.devices().iter().filter(|d| !d.is_cpu()) {
        println!("{}", dev.name());
        let rate0 = call_rate(dev)?;
        let rss0 = rss();
        for round in 0..2 {
            let t = Instant::now();
            let (got, want) = run_loop(dev, iters)?;
            let secs = t.elapsed().as_secs_f64();
            let err = got
                .iter()
                .zip(&want)
                .map(|(g, w)| ((g - w) / w.abs().max(1.0)).abs())
                .fold(0.0f32, f32::max);
            let grown = rss().saturating_sub(rss0);
            println!(
                "  loop {round}: {iters} iterations in {secs:.2} s ({:.1} µs each), RSS {:.1} MiB (+{:.1}), max rel err {err:.2e}",
                secs * 1e6 / f64::from(iters.max(1)),
                mib(rss()),
                mib(grown)
            );
            ok &= err < 1e-3 && grown < 64 << 20;
        }
        let rate1 = call_rate(dev)?;
        println!("  small calls: {rate0:.0}/s before, {rate1:.0}/s after");
        ok &= rate1 >= 0.5 * rate0;
    }
    if !ok {
        eprintln!("FAILED: a value, the memory bound or the call rate was off");
        std::process::exit(1);
    }
    Ok(())
}
