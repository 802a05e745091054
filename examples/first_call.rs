//! First-call time of fresh jitted functions (compile + run + read), (docs/PERFORMANCE.md): run it
//! twice with the same `BRIGADE_CACHE_DIR` to see what the on-disk pipeline cache saves the second
//! process (Vulkan only; GL has no pipeline cache). `MESA_SHADER_CACHE_DISABLE=true` also turns off
//! Mesa's own shader cache, to see brigade's alone.
//!
//! `BRIGADE_CACHE_DIR=/tmp/bc cargo run --release --example first_call` (twice).

use std::time::Instant;

use brigade::{Array, Runtime, Tensor, jit};

fn main() -> brigade::Result<()> {
    // RUST_LOG=brigade=debug shows each kernel's compile time.
    let _ = env_logger::try_init();
    let rt = pollster::block_on(Runtime::new())?;
    // Every adapter found, with the reason the default layout skipped one (if it did).
    for a in rt.adapters() {
        println!("{a}");
    }
    let n = 1 << 16;
    let x: Vec<f32> = (0..n).map(|i| ((i % 97) as f32 - 48.0) / 16.0).collect();
    let m = 256;
    let a: Vec<f32> = (0..m * m).map(|i| ((i % 13) as f32 - 6.0) / 8.0).collect();
    for dev in rt.devices().iter().filter(|d| !d.is_cpu()) {
        println!("\n## {}", dev.info());
        let xs = Array::from_vec(x.clone(), &[n])?.to_device(dev)?;
        let am = Array::from_vec(a.clone(), &[m, m])?.to_device(dev)?;
        let t = Instant::now();
        let y = jit(|v: &[Tensor]| vec![(&v[0] * 1.5 + 2.0).exp().tanh() * &v[0]])
            .on(dev)
            .call(std::slice::from_ref(&xs))?;
        y[0].to_vec::<f32>()?;
        let elementwise = t.elapsed();
        let t = Instant::now();
        let s = jit(|v: &[Tensor]| vec![v[0].sum_all()])
            .on(dev)
            .call(std::slice::from_ref(&xs))?;
        let sum_call = t.elapsed();
        dev.wait()?;
        let sum_run = t.elapsed() - sum_call;
        s[0].to_vec::<f32>()?;
        let sum = t.elapsed();
        let t = Instant::now();
        let p = jit(|v: &[Tensor]| vec![v[0].matmul(&v[0])])
            .on(dev)
            .call(std::slice::from_ref(&am))?;
        p[0].to_vec::<f32>()?;
        let matmul = t.elapsed();
        println!(
            "| first call | elementwise {:.1} ms | sum {:.1} ms (call {:.1}, first run {:.1}) | matmul {m} {:.1} ms | kernels {} |",
            elementwise.as_secs_f64() * 1e3,
            sum.as_secs_f64() * 1e3,
            sum_call.as_secs_f64() * 1e3,
            sum_run.as_secs_f64() * 1e3,
            matmul.as_secs_f64() * 1e3,
            dev.kernels_cached()
        );
    }
    Ok(())
}
