//! brigade parallel benchmarks: collectives, pmap call overhead, and concurrency across devices.
//!
//! `cargo bench --bench parallel` measures:
//! - psum and pmean of 1 KiB … 64 MiB per device over 2 and 4 logical devices (lavapipe), beside a host
//!   memcpy of the same bytes. A host-mediated all-reduce over `n` devices moves `n · S` bytes down and
//!   `n · S` bytes up; "moved" is that traffic per second, "per device" is `S / t`;
//! - the overhead of a tiny pmap call over 1, 2 and 4 devices (inputs already sharded);
//! - concurrency: `N` equal matmul shards on `N` devices of separate adapters (Vulkan + GL) against one
//!   shard on one device. Software adapters share the machine's cores; run with `LP_NUM_THREADS=1` so
//!   each adapter models one independent processor (otherwise one shard already uses every core).
//!
//! Under `cargo test` (no `--bench` argument) every measurement runs once at tiny sizes (smoke test).
//! Timings on shared machines vary: compare ratios measured in one run.

mod common;

use std::time::Duration;

use common::{data, mib};

use brigade::{
    Array, Device, Result, Runtime, Tensor, device_put_sharded, jit, pmap, pmean, psum, shard_map,
};

/// Median of `reps` timed calls of `f` after one warm-up call.
fn time(reps: usize, f: impl FnMut() -> Result<()>) -> Result<Duration> {
    Ok(common::measure(1, reps, None, f)?.median)
}

fn wait_all(devs: &[Device]) -> Result<()> {
    for d in devs {
        // write_buffer is staged until the next submit: flush it so the upload is part of the time.
        if let Some((_, q)) = d.wgpu() {
            q.submit([]);
        }
        d.wait()?;
    }
    Ok(())
}

fn runtime(layout: &str) -> Result<Runtime> {
    pollster::block_on(
        Runtime::builder()
            .layout_str(layout)
            .allow_cpu_fallback(false)
            .build(),
    )
}

/// psum / pmean throughput over the devices of `devs`.
fn bench_collectives(devs: &[Device], sizes: &[usize], reps: usize) -> Result<()> {
    let n = devs.len();
    println!("\n## psum / pmean over {n} devices ({})", devs[0].name());
    println!(
        "| collective | bytes per device | time (median) | per device S/t | moved 2nS/t | host memcpy of S | moved / memcpy |"
    );
    println!("|---|---|---|---|---|---|---|");
    type Body = fn(&[Tensor]) -> Vec<Tensor>;
    let sum = pmap((|a: &[Tensor]| vec![psum(&a[0], "i")]) as Body)
        .axis_name("i")
        .devices(devs);
    let mean = pmap((|a: &[Tensor]| vec![pmean(&a[0], "i")]) as Body)
        .axis_name("i")
        .devices(devs);
    for &bytes in sizes {
        let elems = bytes / 4;
        let shards: Vec<Array> = (0..n)
            .map(|d| Array::from_vec(data(elems, d as u32 + 1), &[elems]))
            .collect::<Result<_>>()?;
        let x = device_put_sharded(&shards, devs)?;
        wait_all(devs)?;
        let src = data(elems, 99);
        let mut dst = vec![0.0f32; elems];
        let r = if bytes >= 16 << 20 {
            reps.div_ceil(2)
        } else {
            reps
        };
        let t_copy = time(r, || {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&dst);
            Ok(())
        })?;
        let copy_bw = bytes as f64 / t_copy.as_secs_f64() / 1e9;
        for (name, f) in [("psum", &sum), ("pmean", &mean)] {
            let t = time(r, || {
                let out = f.call(std::slice::from_ref(&x))?;
                drop(out);
                wait_all(devs)
            })?;
            let secs = t.as_secs_f64();
            let per = bytes as f64 / secs / 1e9;
            let moved = (2 * n * bytes) as f64 / secs / 1e9;
            println!(
                "| {name} | {} | {:.3} ms | {per:.2} GB/s | {moved:.2} GB/s | {copy_bw:.2} GB/s | {:.0} % |",
                mib(bytes),
                secs * 1e3,
                100.0 * moved / copy_bw
            );
        }
    }
    Ok(())
}

/// Per-call overhead of a tiny pmap over the first 1, 2, 4 devices, inputs already sharded.
fn bench_overhead(devs: &[Device], calls: usize) -> Result<()> {
    println!("\n## pmap call overhead (x * 2 + 1 on 4 f32 per device, input already sharded)");
    println!("| devices | submit only | with a psum (one host round trip) | call + read |");
    println!("|---|---|---|---|");
    for k in [1, 2, 4].into_iter().filter(|&k| k <= devs.len()) {
        let ds = &devs[..k];
        let shards: Vec<Array> = (0..k)
            .map(|d| Array::from_vec(vec![d as f32, 1.0, 2.0, 3.0], &[4]))
            .collect::<Result<_>>()?;
        let x = device_put_sharded(&shards, ds)?;
        let f = pmap(|a: &[Tensor]| vec![&a[0] * 2.0 + 1.0]).devices(ds);
        let g = pmap(|a: &[Tensor]| vec![psum(&(&a[0] * 2.0 + 1.0), "i")])
            .axis_name("i")
            .devices(ds);
        let per_call = |h: &dyn Fn() -> Result<()>| -> Result<f64> {
            let t = time(3, || {
                for _ in 0..calls {
                    h()?;
                }
                wait_all(ds)
            })?;
            Ok(t.as_secs_f64() * 1e6 / calls as f64)
        };
        let plain = per_call(&|| f.call(std::slice::from_ref(&x)).map(drop))?;
        let with_psum = per_call(&|| g.call(std::slice::from_ref(&x)).map(drop))?;
        let read = per_call(&|| f.call(std::slice::from_ref(&x))?[0].to_host().map(drop))?;
        println!("| {k} | {plain:.0} µs | {with_psum:.0} µs | {read:.0} µs |");
    }
    Ok(())
}

/// N equal matmul shards on N devices against one shard on one device.
fn bench_concurrency(devs: &[Device], m: usize, reps: usize) -> Result<()> {
    let names: Vec<String> = devs.iter().map(|d| d.info().backend.clone()).collect();
    println!(
        "\n## concurrency: one {m}×{m}×{m} matmul shard per device ({}), LP_NUM_THREADS={}",
        names.join(" + "),
        std::env::var("LP_NUM_THREADS").unwrap_or_else(|_| "unset".into())
    );
    println!("| run | time (median) | vs one shard |");
    println!("|---|---|---|");
    let n = devs.len();
    let a = Array::from_vec(data(n * m * m, 11), &[n * m, m])?;
    let b = Array::from_vec(data(m * m, 12), &[m, m])?;
    let split = shard_map(|x: &[Tensor]| vec![x[0].matmul(&x[1])])
        .in_axes(&[Some(0), None])
        .devices(devs);
    let a_sh = {
        let out = shard_map(|x: &[Tensor]| vec![x[0].clone()])
            .devices(devs)
            .call(std::slice::from_ref(&a))?;
        out.into_iter().next().expect("one output")
    };
    let b_rep = shard_map(|x: &[Tensor]| vec![x[0].clone()])
        .in_axes(&[None])
        .out_axes(&[None])
        .devices(devs)
        .call(std::slice::from_ref(&b))?
        .remove(0);
    let mut singles = Vec::new();
    for d in devs {
        let one = jit(|x: &[Tensor]| vec![x[0].matmul(&x[1])]).on(d);
        let a1 = Array::from_vec(data(m * m, 11), &[m, m])?.to_device(d)?;
        let b1 = b.to_device(d)?;
        let t = time(reps, || {
            drop(one.call(&[a1.clone(), b1.clone()])?);
            d.wait()
        })?;
        println!(
            "| one shard on {} alone | {:.1} ms | 1.00 |",
            d.name(),
            t.as_secs_f64() * 1e3
        );
        singles.push(t.as_secs_f64());
    }
    let t = time(reps, || {
        drop(split.call(&[a_sh.clone(), b_rep.clone()])?);
        wait_all(devs)
    })?;
    let slowest = singles.iter().cloned().fold(0.0, f64::max);
    let sum: f64 = singles.iter().sum();
    println!(
        "| {n} shards on {n} devices at once | {:.1} ms | {:.2} × the slowest single shard; sequential would be {:.2} × |",
        t.as_secs_f64() * 1e3,
        t.as_secs_f64() / slowest,
        sum / slowest
    );
    Ok(())
}

fn main() -> Result<()> {
    let full = std::env::args().any(|a| a == "--bench");
    println!(
        "# brigade parallel benchmarks ({})",
        if full {
            "full"
        } else {
            "smoke run; `cargo bench --bench parallel` for figures"
        }
    );
    let (sizes, reps, calls, m): (Vec<usize>, usize, usize, usize) = if full {
        (
            vec![1 << 10, 16 << 10, 256 << 10, 4 << 20, 64 << 20],
            5,
            50,
            512,
        )
    } else {
        (vec![1 << 10, 64 << 10], 1, 2, 32)
    };
    let four = runtime("vulkan:4")?;
    let devs = four.devices();
    bench_collectives(&devs[..2], &sizes, reps)?;
    bench_collectives(devs, &sizes, reps)?;
    bench_overhead(devs, calls)?;
    let mixed = runtime("vulkan:1,gl:1")?;
    bench_concurrency(mixed.devices(), m, reps)?;
    bench_concurrency(&devs[..2], m, reps)?;
    Ok(())
}
