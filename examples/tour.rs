//! The brigade tour: every scenario of the tutorial, on whatever adapters this machine has.
//!
//! Run with `cargo run --release --example tour`. Force a device layout with
//! `BRIGADE_DEVICES=vulkan:2,gl:1` (or `=cpu`, `=4`, ...). Each section prints what it ran, the
//! result checked against the CPU reference interpreter, and how long it took.
//!
//! Chapters arrive with the issues that build them: today, the kitchen (devices), jit with fusion,
//! reductions and matmul on each device.

use std::time::Instant;

use brigade::{Array, Device, HostArray, Result, Runtime, Tensor, jit, reference};

/// Deterministic, non-trivial data in [-1, 1).
fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

fn max_rel_err(got: &HostArray, want: &HostArray) -> f64 {
    let (g, w) = (got.to_f64(), want.to_f64());
    let scale = w.iter().fold(1e-6f64, |m, v| m.max(v.abs()));
    g.iter()
        .zip(&w)
        .map(|(a, b)| (a - b).abs() / scale)
        .fold(0.0, f64::max)
}

/// Run a jitted function on `dev`, check every output against the reference, print one line.
fn run_checked<F>(dev: &Device, title: &str, f: F, args: &[Array], tol: f64) -> Result<bool>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let f = jit(f).named(title).on(dev);
    let t0 = Instant::now();
    let outs = f.call(args)?;
    let hosts: Vec<HostArray> = outs.iter().map(|o| o.to_host()).collect::<Result<_>>()?;
    let first = t0.elapsed();
    let t1 = Instant::now();
    let reps = 5;
    for _ in 0..reps {
        for o in f.call(args)? {
            o.to_host()?;
        }
    }
    let warm = t1.elapsed() / reps;
    let graph = f.graph(args)?;
    let args_h: Vec<HostArray> = args.iter().map(|a| a.to_host()).collect::<Result<_>>()?;
    let want = reference::eval_graph(&graph, &args_h)?;
    let err = hosts
        .iter()
        .zip(&want)
        .map(|(g, w)| max_rel_err(g, w))
        .fold(0.0, f64::max);
    let launches = if dev.is_cpu() {
        0
    } else {
        f.program(args, dev)?.launches.len()
    };
    let ok = err <= tol;
    println!(
        "  {} {title:<44} {launches:>2} kernel(s)  first {:>8.2} ms  warm {:>8.3} ms  max rel err {err:.1e}",
        if ok { "✓" } else { "✗" },
        first.as_secs_f64() * 1e3,
        warm.as_secs_f64() * 1e3
    );
    Ok(ok)
}

fn main() -> Result<()> {
    let rt = pollster::block_on(Runtime::new())?;
    println!(
        "brigade tour — the kitchen has {} chef(s):",
        rt.devices().len()
    );
    for d in rt.devices() {
        println!("  {}", d.info());
    }
    let mut all_ok = true;
    for dev in rt.devices() {
        println!("\nOn device {}:", dev.name());
        let x = Array::from_vec(data(64 * 256, 1), &[64, 256])?;
        let w = Array::from_vec(data(256 * 128, 2), &[256, 128])?;
        let b = Array::from_vec(data(128, 3), &[128])?;
        all_ok &= run_checked(
            dev,
            "fused chain: tanh(exp(x*0.5+0.25)-1)*x",
            |a| vec![((&a[0] * 0.5 + 0.25).exp() - 1.0).tanh() * &a[0]],
            std::slice::from_ref(&x),
            1e-5,
        )?;
        all_ok &= run_checked(
            dev,
            "row softmax + argmax",
            |a| vec![a[0].softmax(-1), a[0].argmax(-1, false)],
            std::slice::from_ref(&x),
            1e-5,
        )?;
        all_ok &= run_checked(
            dev,
            "dense layer: relu(x @ w + b)",
            |a| vec![(a[0].matmul(&a[1]) + &a[2]).relu()],
            &[x.clone(), w.clone(), b.clone()],
            1e-5,
        )?;
        all_ok &= run_checked(
            dev,
            "mean / logsumexp over axes",
            |a| vec![a[0].mean(0, false), a[0].logsumexp(1, true)],
            std::slice::from_ref(&x),
            1e-5,
        )?;
        let big = Array::from_vec(data(1 << 20, 4), &[1 << 20])?;
        all_ok &= run_checked(
            dev,
            "sum of squares of 1M elements",
            |a| vec![a[0].square().sum_all()],
            &[big],
            1e-5,
        )?;
    }
    println!(
        "\n{}",
        if all_ok {
            "all results match the CPU reference ✓"
        } else {
            "SOME RESULTS DIFFER ✗"
        }
    );
    if !all_ok {
        std::process::exit(1);
    }
    Ok(())
}
