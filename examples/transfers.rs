//! Readback and upload speed against a warm host memcpy, per device, (docs/PERFORMANCE.md).
//!
//! `cargo run --release --example transfers` (set `BRIGADE_DEVICES=vulkan:1`, and
//! `BRIGADE_MAPPED_READS=off` to compare with the staging path). Prints the median of
//! `REPS` runs of each row; rows alternate inside each round so drift hits them alike.

use std::time::{Duration, Instant};

use brigade::{Array, Runtime, Tensor, jit};

const REPS: usize = 9;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> brigade::Result<()> {
    let mib: usize = std::env::var("MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let n = (mib << 20) / 4;
    let rt = pollster::block_on(Runtime::new())?;
    let src: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.5 - 7.0).collect();
    for dev in rt.devices().iter().filter(|d| !d.is_cpu()) {
        println!("\n## {} (maps reads: {})", dev.info(), dev.maps_reads());
        let host = Array::from_vec(src.clone(), &[n])?;
        let on_dev = host.to_device(dev)?;
        dev.wait()?;
        let tiny = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4])?.to_device(dev)?;
        let f = jit(|a: &[Tensor]| vec![&a[0] * 2.0 + 1.0]).on(dev);
        let mut into = vec![0.0f32; n];
        let mut warm = vec![0.0f32; n];
        let rows = [
            "upload (to_device + wait)",
            "readback to_host (fresh Vec)",
            "readback read_into (reused slice)",
            "host: warm memcpy into reused memory",
            "host: clone into a fresh Vec",
            "host: Vec::with_capacity + extend_from_slice",
            "tiny jitted call + to_host (µs)",
            "kernel: fused tanh(exp(x*1.5+2))*x + wait (GB/s of x)",
        ];
        let fused = jit(|a: &[Tensor]| vec![(&a[0] * 1.5 + 2.0).exp().tanh() * &a[0]]).on(dev);
        drop(fused.call(std::slice::from_ref(&on_dev))?);
        dev.wait()?;
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); rows.len()];
        for _ in 0..REPS {
            let t = Instant::now();
            let a = host.to_device(dev)?;
            if let Some((_, q)) = dev.wgpu() {
                q.submit([]);
            }
            dev.wait()?;
            times[0].push(t.elapsed());
            drop(a);
            let t = Instant::now();
            let h = on_dev.to_host()?;
            times[1].push(t.elapsed());
            drop(std::hint::black_box(h));
            let t = Instant::now();
            on_dev.read_into(&mut into)?;
            times[2].push(t.elapsed());
            assert!(into == src, "read_into returned other values");
            let t = Instant::now();
            warm.copy_from_slice(&src);
            std::hint::black_box(&warm);
            times[3].push(t.elapsed());
            let t = Instant::now();
            let c = std::hint::black_box(src.clone());
            times[4].push(t.elapsed());
            drop(c);
            let t = Instant::now();
            let mut v: Vec<f32> = Vec::with_capacity(n);
            v.extend_from_slice(&src);
            std::hint::black_box(&v);
            times[5].push(t.elapsed());
            drop(v);
            let t = Instant::now();
            for _ in 0..20 {
                f.call(std::slice::from_ref(&tiny))?[0].to_host()?;
            }
            times[6].push(t.elapsed() / 20);
            let t = Instant::now();
            let out = fused.call(std::slice::from_ref(&on_dev))?;
            dev.wait()?;
            times[7].push(t.elapsed());
            drop(out);
        }
        let memcpy = median(times[3].clone()).as_secs_f64();
        println!("| what | {mib} MiB | GB/s | vs warm memcpy |");
        println!("|---|---|---|---|");
        for (row, t) in rows.iter().zip(times) {
            let t = median(t).as_secs_f64();
            if row.ends_with("(µs)") {
                println!("| {row} | {:.1} µs | | |", t * 1e6);
            } else {
                let gbs = (4 * n) as f64 / t / 1e9;
                println!(
                    "| {row} | {:.2} ms | {gbs:.2} | {:.0} % |",
                    t * 1e3,
                    100.0 * memcpy / t
                );
            }
        }
    }
    Ok(())
}
