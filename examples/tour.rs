//! The brigade tour: every scenario of the tutorial, on whatever adapters this machine has.
//!
//! Run with `cargo run --release --example tour`. Force a device layout with
//! `BRIGADE_DEVICES=vulkan:2,gl:1` (or `=cpu`, `=4`, ...). Each section prints what it ran, the
//! result checked against an independent computation (the CPU reference interpreter or plain host
//! loops), and how long it took; the tour exits with status 1 if any result differs.
//!
//! Chapters arrive with the issues that build them: today, counting the chefs (devices, forced
//! layouts, a `pmap` roll call with `psum` and `axis_index`), jit with fusion, reductions and matmul
//! on each device, the row-split matmul over all devices, the tutorial's Python demo ported line by
//! line, and data-parallel training with pmap(grad) + pmean. Debug builds (and `--quick` or
//! `BRIGADE_QUICK=1`) run the short versions of the multi-device chapters.

// Each chapter is a standalone example that includes `examples/common/util.rs` itself; the tour
// includes several of them, so that file is loaded once per chapter here.
#![allow(clippy::duplicate_mod)]

use std::time::Instant;

use brigade::{Array, Device, HostArray, Result, Runtime, Tensor, jit, reference};

// The multi-device chapters are the standalone examples themselves: `run` is shared, their
// `main` is unused here.
#[allow(dead_code)]
#[path = "big_matmul.rs"]
mod big_matmul;
#[allow(dead_code)]
#[path = "cnn_training.rs"]
mod cnn_training;
#[allow(dead_code)]
#[path = "data_parallel_training.rs"]
mod data_parallel_training;
#[allow(dead_code)]
#[path = "debugging.rs"]
mod debugging;
#[allow(dead_code)]
#[path = "device_planning.rs"]
mod device_planning;
#[allow(dead_code)]
#[path = "devices.rs"]
mod devices;
#[allow(dead_code)]
#[path = "model_parallel.rs"]
mod model_parallel;
#[allow(dead_code)]
#[path = "own_device.rs"]
mod own_device;
#[allow(dead_code)]
#[path = "parallel_matmul.rs"]
mod parallel_matmul;
#[allow(dead_code)]
#[path = "particles.rs"]
mod particles;
#[allow(dead_code)]
#[path = "seed_demo.rs"]
mod seed_demo;
#[allow(dead_code)]
#[path = "sharded_inference.rs"]
mod sharded_inference;

#[allow(dead_code)]
#[path = "common/util.rs"]
mod util;
use util::data;

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

fn chapter(title: &str) {
    println!("\n== {title} ==\n");
}

fn main() -> Result<()> {
    let quick = cfg!(debug_assertions) || parallel_matmul::quick_requested();
    // The global runtime: the one `pmap`/`shard_map` use by default.
    let rt = Runtime::global()?;
    println!(
        "brigade tour — the kitchen has {} chef(s){}",
        rt.devices().len(),
        if quick { " (quick run)" } else { "" }
    );
    let mut all_ok = true;

    chapter("Counting the chefs: devices, forced layouts, a pmap roll call (examples/devices.rs)");
    all_ok &= devices::run(quick)?;

    chapter("One chef at a time: jit, fusion, reductions and matmul on each device");
    for (i, dev) in rt.devices().iter().enumerate() {
        if i > 0 {
            println!();
        }
        println!("On device {}:", dev.name());
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

    chapter(
        "The matrix soup: A @ B with A's rows split over every chef (examples/parallel_matmul.rs)",
    );
    all_ok &= parallel_matmul::run(quick)?;

    chapter(
        "The tutorial's demo, line by line, and what JAX-exact pmap says (examples/seed_demo.rs)",
    );
    all_ok &= seed_demo::run(quick)?;

    chapter(
        "Data-parallel training: pmap(grad) + pmean on handwritten digits (examples/data_parallel_training.rs)",
    );
    all_ok &= data_parallel_training::run(quick)?;

    chapter(
        "A CNN trained data-parallel: convs, pooling, a residual add, shard_map + pmean on Fashion-MNIST (examples/cnn_training.rs)",
    );
    // The data set comes from a package: without it the chapter fails with the reader's message
    // (how to install it) rather than ending the tour.
    match cnn_training::run(quick) {
        Ok(ok) => all_ok &= ok,
        Err(e) => {
            println!("{e}");
            all_ok = false;
        }
    }

    chapter("How many chefs does the banquet need? Device planning (examples/device_planning.rs)");
    all_ok &= device_planning::run(quick)?;

    chapter(
        "Model parallelism: one course per chef, a pipeline over microbatches (examples/model_parallel.rs)",
    );
    all_ok &= model_parallel::run(quick)?;

    chapter(
        "The big product: 8192² over four devices, B past one storage binding (examples/big_matmul.rs)",
    );
    all_ok &= big_matmul::run(quick)?;

    chapter(
        "The big model: a transformer's layers over stages, its heads over a \"model\" axis, decoding token by token (examples/sharded_inference.rs)",
    );
    all_ok &= sharded_inference::run(quick)?;

    chapter(
        "When pmap goes wrong: three common errors, their fixes, one device first (examples/debugging.rs)",
    );
    all_ok &= debugging::run(quick)?;

    chapter(
        "Inside an app's frame: particles stepped by brigade, drawn by wgpu from the same buffer (examples/particles.rs)",
    );
    all_ok &= particles::run(quick)?;

    chapter(
        "Brigade in the app's kitchen: a wgpu device the app created itself (examples/own_device.rs)",
    );
    all_ok &= own_device::run(quick)?;

    println!(
        "\n{}",
        if all_ok {
            "all results match their independent checks ✓"
        } else {
            "SOME RESULTS DIFFER ✗"
        }
    );
    if !all_ok {
        std::process::exit(1);
    }
    Ok(())
}
