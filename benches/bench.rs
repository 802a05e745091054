//! brigade benchmark harness: prints a table per device.
//!
//! `cargo bench --bench bench` measures: matmul GFLOP/s at 256, 512, 1024, 2048; fused elementwise and
//! reduction GB/s; upload and readback GB/s; the per-call overhead of a tiny jitted function; the
//! per-step cost of a compiled `fori_loop` against a host loop of jitted calls, and the host memory
//! a long `fori_loop` takes.
//! Under `cargo test` (no `--bench` argument) it runs every measurement once at tiny sizes, as a smoke
//! test that the harness itself works. Set `BRIGADE_DEVICES` to pick devices (e.g. `vulkan:1`).
//! Timings on shared machines vary: compare ratios measured in one run.

mod common;

use common::{data, time};

use brigade::{Array, Device, Result, Runtime, Tensor, fori_loop, jit};

struct Sizes {
    matmul: Vec<usize>,
    elems: usize,
    transfer: usize,
    reps: usize,
    loop_iters: usize,
    loop_elems: usize,
    long_loop_iters: usize,
}

fn bench_device(dev: &Device, s: &Sizes) -> Result<()> {
    println!("\n## {}", dev.info());
    println!("| benchmark | size | time (median) | rate |");
    println!("|---|---|---|---|");
    let wait = |outs: Vec<Array>| -> Result<()> {
        drop(outs);
        dev.wait()
    };
    // Matmul.
    for &n in &s.matmul {
        let a = Array::from_vec(data(n * n, 1), &[n, n])?.to_device(dev)?;
        let b = Array::from_vec(data(n * n, 2), &[n, n])?.to_device(dev)?;
        let f = jit(|x: &[Tensor]| vec![x[0].matmul(&x[1])]).on(dev);
        let reps = if n >= 2048 { 1.max(s.reps / 3) } else { s.reps };
        let t = time(reps, || wait(f.call(&[a.clone(), b.clone()])?))?;
        let gflops = 2.0 * (n as f64).powi(3) / t.as_secs_f64() / 1e9;
        println!(
            "| matmul f32 | {n}×{n}×{n} | {:.2} ms | {gflops:.2} GFLOP/s |",
            t.as_secs_f64() * 1e3
        );
    }
    // Fused elementwise: 3 reads + 1 write of f32.
    let n = s.elems;
    let x = Array::from_vec(data(n, 3), &[n])?.to_device(dev)?;
    let y = Array::from_vec(data(n, 4), &[n])?.to_device(dev)?;
    let z = Array::from_vec(data(n, 5), &[n])?.to_device(dev)?;
    let f = jit(|a: &[Tensor]| vec![((&a[0] * &a[1] + &a[2]).tanh() * 0.5 + 0.5).maximum(&a[2])])
        .on(dev);
    let t = time(s.reps, || {
        wait(f.call(&[x.clone(), y.clone(), z.clone()])?)
    })?;
    let gbs = (4 * 4 * n) as f64 / t.as_secs_f64() / 1e9;
    println!(
        "| fused elementwise (6 ops, 3 in, 1 out) | {n} f32 | {:.2} ms | {gbs:.2} GB/s |",
        t.as_secs_f64() * 1e3
    );
    // Reductions: full and per row.
    let f = jit(|a: &[Tensor]| vec![(&a[0] * &a[1]).sum_all()]).on(dev);
    let t = time(s.reps, || wait(f.call(&[x.clone(), y.clone()])?))?;
    println!(
        "| reduction sum(x*y) to a scalar | {n} f32 | {:.2} ms | {:.2} GB/s |",
        t.as_secs_f64() * 1e3,
        (8 * n) as f64 / t.as_secs_f64() / 1e9
    );
    let rows = 1024.min(n);
    let xr = Array::from_vec(data(n, 6), &[rows, n / rows])?.to_device(dev)?;
    let f = jit(|a: &[Tensor]| vec![a[0].sum(-1, false)]).on(dev);
    let t = time(s.reps, || wait(f.call(std::slice::from_ref(&xr))?))?;
    println!(
        "| reduction row sums | {rows}×{} f32 | {:.2} ms | {:.2} GB/s |",
        n / rows,
        t.as_secs_f64() * 1e3,
        (4 * n) as f64 / t.as_secs_f64() / 1e9
    );
    // Transfers.
    let m = s.transfer;
    let host = Array::from_vec(data(m, 7), &[m])?;
    let t = time(s.reps, || {
        let a = host.to_device(dev)?;
        drop(a);
        // write_buffer is staged until the next submit: submit an empty batch so the copy happens.
        if let Some((_, q)) = dev.wgpu() {
            q.submit([]);
        }
        dev.wait()
    })?;
    println!(
        "| upload | {} MiB | {:.2} ms | {:.2} GB/s |",
        (m * 4) >> 20,
        t.as_secs_f64() * 1e3,
        (4 * m) as f64 / t.as_secs_f64() / 1e9
    );
    let on_dev = host.to_device(dev)?;
    dev.wait()?;
    let t = time(s.reps, || on_dev.to_host().map(|_| ()))?;
    println!(
        "| readback | {} MiB | {:.2} ms | {:.2} GB/s |",
        (m * 4) >> 20,
        t.as_secs_f64() * 1e3,
        (4 * m) as f64 / t.as_secs_f64() / 1e9
    );
    // Into memory the caller keeps: one copy out of the mapped staging buffer, no page faults.
    let mut into = vec![0.0f32; m];
    let t = time(s.reps, || on_dev.read_into(&mut into))?;
    println!(
        "| readback into a reused slice (read_into) | {} MiB | {:.2} ms | {:.2} GB/s |",
        (m * 4) >> 20,
        t.as_secs_f64() * 1e3,
        (4 * m) as f64 / t.as_secs_f64() / 1e9
    );
    let src: Vec<f32> = data(m, 7);
    let t = time(s.reps, || {
        std::hint::black_box(src.clone());
        Ok(())
    })?;
    println!(
        "| host memcpy into a fresh Vec (clone, for scale) | {} MiB | {:.2} ms | {:.2} GB/s |",
        (m * 4) >> 20,
        t.as_secs_f64() * 1e3,
        (4 * m) as f64 / t.as_secs_f64() / 1e9
    );
    let mut warm = vec![0.0f32; m];
    let t = time(s.reps, || {
        warm.copy_from_slice(&src);
        std::hint::black_box(&warm);
        Ok(())
    })?;
    println!(
        "| warm host memcpy (into reused memory, for scale) | {} MiB | {:.2} ms | {:.2} GB/s |",
        (m * 4) >> 20,
        t.as_secs_f64() * 1e3,
        (4 * m) as f64 / t.as_secs_f64() / 1e9
    );
    // Per-call overhead of a tiny jitted function (dispatch + submit, no readback).
    let tiny = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4])?.to_device(dev)?;
    let f = jit(|a: &[Tensor]| vec![&a[0] * 2.0 + 1.0]).on(dev);
    let calls = 20 * s.reps;
    let t = time(3, || {
        for _ in 0..calls {
            drop(f.call(std::slice::from_ref(&tiny))?);
        }
        dev.wait()
    })?;
    println!(
        "| tiny jitted call (submit only) | 4 f32 | {:.1} µs / call | |",
        t.as_secs_f64() * 1e6 / calls as f64
    );
    let t = time(s.reps, || {
        f.call(std::slice::from_ref(&tiny))?[0]
            .to_host()
            .map(|_| ())
    })?;
    println!(
        "| tiny jitted call + readback | 4 f32 | {:.1} µs / call | |",
        t.as_secs_f64() * 1e6
    );
    // A loop compiled into one program (fori_loop: the body's kernel per iteration, the carry
    // ping-ponging between two buffers, submitted in chunks) against the same steps as a host loop
    // of calls.
    let iters = s.loop_iters;
    let x = Array::from_vec(data(s.loop_elems, 9), &[s.loop_elems])?.to_device(dev)?;
    let step = |v: &Tensor| v * 0.999 + 0.001;
    let looped =
        jit(|a: &[Tensor]| fori_loop(0, iters as i32, |_, v| vec![step(&v[0])], a)).on(dev);
    let t_loop = time(s.reps, || wait(looped.call(std::slice::from_ref(&x))?))?;
    let one = jit(|a: &[Tensor]| vec![step(&a[0])]).on(dev);
    let t_host = time(s.reps, || {
        let mut v = x.clone();
        for _ in 0..iters {
            v = one.call(std::slice::from_ref(&v))?.remove(0);
        }
        wait(vec![v])
    })?;
    println!(
        "| fori_loop, {iters} steps (one program) | {} f32 | {:.1} µs / step | {:.2}× faster than a host loop of calls ({:.1} µs / step) |",
        s.loop_elems,
        t_loop.as_secs_f64() * 1e6 / iters as f64,
        t_host.as_secs_f64() / t_loop.as_secs_f64(),
        t_host.as_secs_f64() * 1e6 / iters as f64
    );
    // A long loop: host memory (RSS) before and after, which chunked submission keeps flat.
    let long = s.long_loop_iters;
    let looped = jit(|a: &[Tensor]| fori_loop(0, long as i32, |_, v| vec![step(&v[0])], a)).on(dev);
    wait(looped.call(std::slice::from_ref(&x))?)?;
    let rss0 = rss();
    let t_long = time(1, || wait(looped.call(std::slice::from_ref(&x))?))?;
    println!(
        "| fori_loop, {long} steps | {} f32 | {:.1} µs / step | RSS {:+.1} MiB over the call |",
        s.loop_elems,
        t_long.as_secs_f64() * 1e6 / long as f64,
        (rss() as f64 - rss0 as f64) / (1u64 << 20) as f64
    );
    Ok(())
}

/// Resident set size in bytes (`/proc/self/statm`; 0 where there is none).
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn main() -> Result<()> {
    let full = std::env::args().any(|a| a == "--bench");
    let sizes = if full {
        Sizes {
            matmul: vec![256, 512, 1024, 2048],
            elems: 1 << 24,
            transfer: 16 << 20,
            reps: 5,
            loop_iters: 1000,
            loop_elems: 1 << 10,
            long_loop_iters: 100_000,
        }
    } else {
        Sizes {
            matmul: vec![64],
            elems: 1 << 12,
            transfer: 1 << 12,
            reps: 1,
            loop_iters: 10,
            loop_elems: 64,
            long_loop_iters: 5000,
        }
    };
    let rt = pollster::block_on(Runtime::new())?;
    println!(
        "# brigade benchmarks ({})",
        if full {
            "full"
        } else {
            "smoke run; `cargo bench` for figures"
        }
    );
    for dev in rt.devices() {
        if dev.is_cpu() {
            println!(
                "\n## {} — the cpu device runs the reference interpreter; skipped",
                dev.info()
            );
            continue;
        }
        bench_device(dev, &sizes)?;
    }
    Ok(())
}
