//! The brigade tour: every scenario of the tutorial, on whatever adapters this machine has.
//!
//! Run with `cargo run --release --example tour`: every chapter at quick sizes, each result still
//! checked; `-- --full` (or `BRIGADE_TOUR=full`) runs every chapter at its standalone example's
//! full sizes. Force a device layout with `BRIGADE_DEVICES=vulkan:2,gl:1`
//! (or `=cpu`, `=4`, ...).
//!
//! Each chapter is one of the standalone examples: counting the chefs (devices, forced layouts, a
//! `pmap` roll call with `psum` and `axis_index`), jit with fusion, reductions and matmul on each
//! device, the row-split matmul, the tutorial's Python demo line by line, data-parallel training
//! with pmap(grad) + pmean, a CNN on Fashion-MNIST, device planning, a model-parallel pipeline, the
//! 8192² product past one storage binding, sharded transformer decoding, debugging, particles drawn
//! by wgpu from brigade's buffer, and an app's own wgpu device. Each prints what it ran and checks
//! its results against an independent computation (the CPU reference interpreter or plain host
//! loops); the tour ends with a table of each chapter's time and exits with status 1 if any result
//! differs.

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

/// The per-device chapter: a fused chain, a softmax, a dense layer, reductions and a large sum on
/// `dev`, each checked against the reference interpreter.
fn one_device(dev: &Device) -> Result<bool> {
    let mut ok = true;
    let x = Array::from_vec(data(64 * 256, 1), &[64, 256])?;
    let w = Array::from_vec(data(256 * 128, 2), &[256, 128])?;
    let b = Array::from_vec(data(128, 3), &[128])?;
    ok &= run_checked(
        dev,
        "fused chain: tanh(exp(x*0.5+0.25)-1)*x",
        |a| vec![((&a[0] * 0.5 + 0.25).exp() - 1.0).tanh() * &a[0]],
        std::slice::from_ref(&x),
        1e-5,
    )?;
    ok &= run_checked(
        dev,
        "row softmax + argmax",
        |a| vec![a[0].softmax(-1), a[0].argmax(-1, false)],
        std::slice::from_ref(&x),
        1e-5,
    )?;
    ok &= run_checked(
        dev,
        "dense layer: relu(x @ w + b)",
        |a| vec![(a[0].matmul(&a[1]) + &a[2]).relu()],
        &[x.clone(), w.clone(), b.clone()],
        1e-5,
    )?;
    ok &= run_checked(
        dev,
        "mean / logsumexp over axes",
        |a| vec![a[0].mean(0, false), a[0].logsumexp(1, true)],
        std::slice::from_ref(&x),
        1e-5,
    )?;
    let big = Array::from_vec(data(1 << 20, 4), &[1 << 20])?;
    ok &= run_checked(
        dev,
        "sum of squares of 1M elements",
        |a| vec![a[0].square().sum_all()],
        &[big],
        1e-5,
    )?;
    Ok(ok)
}

/// Every chapter's name, time and verdict, for the table at the end.
struct Tour {
    rows: Vec<(&'static str, f64, bool)>,
    start: Instant,
}

impl Tour {
    /// Print the chapter's heading, run it, and record how long it took and whether its checks
    /// passed.
    fn chapter(
        &mut self,
        short: &'static str,
        title: &str,
        run: impl FnOnce() -> Result<bool>,
    ) -> Result<()> {
        println!("\n== {title} ==\n");
        let t0 = Instant::now();
        let ok = run()?;
        self.rows.push((short, t0.elapsed().as_secs_f64(), ok));
        Ok(())
    }

    fn all_ok(&self) -> bool {
        self.rows.iter().all(|r| r.2)
    }

    fn print_times(&self) {
        println!("\n== Chapter times ==\n");
        for (name, secs, ok) in &self.rows {
            println!("  {} {name:<30} {secs:>7.1} s", if *ok { "✓" } else { "✗" });
        }
        println!(
            "    {:<30} {:>7.1} s",
            "total",
            self.start.elapsed().as_secs_f64()
        );
    }
}

/// `--full` or `BRIGADE_TOUR=full`: every chapter at the standalone examples' full sizes (about a
/// quarter of an hour on a 2-core machine with software adapters). By default each chapter runs at
/// quick sizes and still checks every result.
fn full_requested() -> bool {
    std::env::args().any(|a| a == "--full")
        || std::env::var("BRIGADE_TOUR").is_ok_and(|v| v.trim() == "full")
}

fn main() -> Result<()> {
    let quick = !full_requested();
    // The global runtime: the one `pmap`/`shard_map` use by default.
    let rt = Runtime::global()?;
    println!(
        "brigade tour — the kitchen has {} chef(s){}",
        rt.devices().len(),
        if quick {
            " (quick sizes; --full for the examples' full sizes)"
        } else {
            " (full sizes)"
        }
    );
    let mut tour = Tour {
        rows: Vec::new(),
        start: Instant::now(),
    };

    tour.chapter(
        "devices and a pmap roll call",
        "Counting the chefs: devices, forced layouts, a pmap roll call (examples/devices.rs)",
        || devices::run(quick),
    )?;

    tour.chapter(
        "jit on each device",
        "One chef at a time: jit, fusion, reductions and matmul on each device",
        || {
            let mut ok = true;
            for (i, dev) in rt.devices().iter().enumerate() {
                if i > 0 {
                    println!();
                }
                println!("On device {}:", dev.name());
                ok &= one_device(dev)?;
            }
            Ok(ok)
        },
    )?;

    tour.chapter(
        "the matrix soup",
        "The matrix soup: A @ B with A's rows split over every chef (examples/parallel_matmul.rs)",
        || parallel_matmul::run(quick),
    )?;

    tour.chapter(
        "the tutorial's demo",
        "The tutorial's demo, line by line, and what JAX-exact pmap says (examples/seed_demo.rs)",
        || seed_demo::run(quick),
    )?;

    tour.chapter(
        "data-parallel training",
        "Data-parallel training: pmap(grad) + pmean on handwritten digits (examples/data_parallel_training.rs)",
        || data_parallel_training::run(quick),
    )?;

    tour.chapter(
        "a CNN on Fashion-MNIST",
        "A CNN trained data-parallel: convs, pooling, a residual add, shard_map + pmean on Fashion-MNIST (examples/cnn_training.rs)",
        // The data set comes from a package: without it the chapter fails with the reader's
        // message (how to install it) rather than ending the tour.
        || match cnn_training::run(quick) {
            Ok(ok) => Ok(ok),
            Err(e) => {
                println!("{e}");
                Ok(false)
            }
        },
    )?;

    tour.chapter(
        "device planning",
        "How many chefs does the banquet need? Device planning (examples/device_planning.rs)",
        || device_planning::run(quick),
    )?;

    tour.chapter(
        "model parallelism",
        "Model parallelism: one course per chef, a pipeline over microbatches (examples/model_parallel.rs)",
        || model_parallel::run(quick),
    )?;

    tour.chapter(
        "the big product",
        if quick {
            "The big product over four devices, B past one storage binding (examples/big_matmul.rs; 8192² with --full)"
        } else {
            "The big product: 8192² over four devices, B past one storage binding (examples/big_matmul.rs)"
        },
        || big_matmul::run(quick),
    )?;

    tour.chapter(
        "the big model",
        "The big model: a transformer's layers over stages, its heads over a \"model\" axis, decoding token by token (examples/sharded_inference.rs)",
        || sharded_inference::run(quick),
    )?;

    tour.chapter(
        "debugging",
        "When pmap goes wrong: three common errors, their fixes, one device first (examples/debugging.rs)",
        || debugging::run(quick),
    )?;

    tour.chapter(
        "particles in an app's frame",
        "Inside an app's frame: particles stepped by brigade, drawn by wgpu from the same buffer (examples/particles.rs)",
        || particles::run(quick),
    )?;

    tour.chapter(
        "the app's own device",
        "Brigade in the app's kitchen: a wgpu device the app created itself (examples/own_device.rs)",
        || own_device::run(quick),
    )?;

    tour.print_times();
    let all_ok = tour.all_ok();
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
