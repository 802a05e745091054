//! The `cpu` device's throughput beside numpy in the same run, and beside the reference
//! interpreter that the device ran before it had its own executor.
//!
//! ```text
//! cargo run --release --example cpu_device_bench            # all rows
//! MATMUL_NUM_THREADS=1 cargo run --release --example cpu_device_bench   # single-threaded GEMM
//! ```
//! numpy is run through `python3` (skipped when it is missing), with its BLAS threads as set in
//! the environment (`OMP_NUM_THREADS` / `OPENBLAS_NUM_THREADS`). Each row is the best of a few
//! calls; compare rows of one run.

use std::time::{Duration, Instant};

use brigade::{Array, HostArray, Runtime, Tensor, jit};

fn best(reps: usize, mut f: impl FnMut()) -> Duration {
    f();
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

fn main() -> brigade::Result<()> {
    let rt = pollster::block_on(Runtime::builder().layout_str("cpu:1").build())?;
    let dev = rt.devices()[0].clone();
    let threads = std::env::var("MATMUL_NUM_THREADS").unwrap_or_else(|_| "default".into());
    println!("cpu device: {}; GEMM threads: {threads}", dev.name());
    println!("| benchmark | size | cpu device | reference interpreter |");
    println!("|---|---|---|---|");
    let mm = jit(|x: &[Tensor]| vec![x[0].matmul(&x[1])]).on(&dev);
    for n in [256usize, 512, 1024] {
        let a = Array::from_vec(data(n * n, 1), &[n, n])?;
        let b = Array::from_vec(data(n * n, 2), &[n, n])?;
        let reps = if n >= 1024 { 5 } else { 10 };
        let t = best(reps, || {
            mm.call(&[a.clone(), b.clone()]).expect("matmul");
        });
        let gflops = |t: Duration| 2.0 * (n as f64).powi(3) / t.as_secs_f64() / 1e9;
        let before = if n <= 256 {
            let g = mm.graph(&[a.clone(), b.clone()])?;
            let h = [a.to_host()?, b.to_host()?];
            let t0 = best(1, || {
                brigade::reference::eval_graph(&g, &h).expect("reference");
            });
            format!("{:.3} GFLOP/s", gflops(t0))
        } else {
            "-".into()
        };
        println!(
            "| matmul f32 | {n}³ | {:.1} GFLOP/s ({:.2} ms) | {before} |",
            gflops(t),
            t.as_secs_f64() * 1e3
        );
    }
    // Elementwise and reductions: GB/s of the arrays read and written by the whole program.
    type Prog = fn(&[Tensor]) -> Vec<Tensor>;
    let rows: [(&str, Prog, usize, usize); 4] = [
        ("x * y", |a| vec![&a[0] * &a[1]], 2, 3),
        (
            "tanh(exp(x*1.5+2))*y",
            |a| vec![&(&a[0] * 1.5 + 2.0).exp().tanh() * &a[1]],
            2,
            3,
        ),
        ("sum(x)", |a| vec![a[0].sum_all()], 1, 1),
        (
            "row sums x[1024, n/1024]",
            |a| vec![a[0].sum(-1, false)],
            1,
            1,
        ),
    ];
    for n in [1usize << 20, 1 << 24] {
        let x = Array::from_vec(data(n, 3), &[1024, n / 1024])?;
        let y = Array::from_vec(data(n, 4), &[1024, n / 1024])?;
        for (name, f, ins, arrays) in rows {
            let args: Vec<Array> = [x.clone(), y.clone()][..ins].to_vec();
            let j = jit(f).on(&dev);
            let t = best(5, || {
                j.call(&args).expect("call");
            });
            let gbs = |t: Duration| (arrays * 4 * n) as f64 / t.as_secs_f64() / 1e9;
            let before = if n <= 1 << 20 {
                let g = j.graph(&args)?;
                let h: Vec<HostArray> =
                    args.iter().map(|a| a.to_host()).collect::<Result<_, _>>()?;
                let t0 = best(1, || {
                    brigade::reference::eval_graph(&g, &h).expect("reference");
                });
                format!("{:.3} GB/s ({:.1} ms)", gbs(t0), t0.as_secs_f64() * 1e3)
            } else {
                "-".into()
            };
            println!(
                "| {name} | {n} f32 | {:.2} GB/s ({:.2} ms) | {before} |",
                gbs(t),
                t.as_secs_f64() * 1e3
            );
        }
    }
    numpy();
    Ok(())
}

/// The same matmuls and elementwise chain in numpy, when python3 has it.
fn numpy() {
    let script = r#"
import time, os, numpy as np
def best(f, reps):
    f(); b = 1e9
    for _ in range(reps):
        t = time.perf_counter(); f(); b = min(b, time.perf_counter() - t)
    return b
th = os.environ.get('OPENBLAS_NUM_THREADS') or os.environ.get('OMP_NUM_THREADS') or 'default'
for n in (256, 512, 1024):
    a = np.random.rand(n, n).astype(np.float32); b = np.random.rand(n, n).astype(np.float32)
    t = best(lambda: a @ b, 5 if n >= 1024 else 10)
    print(f"| numpy matmul f32 (BLAS threads: {th}) | {n}³ | {2*n**3/t/1e9:.1f} GFLOP/s ({t*1e3:.2f} ms) | |")
for n in (1 << 20, 1 << 24):
    x = np.random.rand(n).astype(np.float32); y = np.random.rand(n).astype(np.float32)
    t = best(lambda: x * y, 5)
    print(f"| numpy x * y | {n} f32 | {12*n/t/1e9:.2f} GB/s ({t*1e3:.2f} ms) | |")
    t = best(lambda: np.tanh(np.exp(x * np.float32(1.5) + np.float32(2))) * y, 5)
    print(f"| numpy tanh(exp(x*1.5+2))*y | {n} f32 | {12*n/t/1e9:.2f} GB/s ({t*1e3:.2f} ms) | |")
    t = best(lambda: x.sum(), 5)
    print(f"| numpy sum(x) | {n} f32 | {4*n/t/1e9:.2f} GB/s ({t*1e3:.2f} ms) | |")
"#;
    match std::process::Command::new("python3")
        .args(["-c", script])
        .output()
    {
        Ok(o) if o.status.success() => print!("{}", String::from_utf8_lossy(&o.stdout)),
        Ok(o) => println!(
            "(numpy not run: {})",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => println!("(numpy not run: {e})"),
    }
}
