//! Model parallelism: the layers of one model placed on different devices, activations moving
//! between them, and a GPipe-style pipeline over microbatches, with a printed timeline.
//!
//! ```sh
//! cargo run --release --example model_parallel
//! BRIGADE_DEVICES=vulkan:4 cargo run --release --example model_parallel
//! ```
//!
//! The tutorial's other kitchen: when one dish is too big for one chef, each chef cooks one
//! course (a layer) and passes the plate on. Stage `s` runs on device `s mod n`. The batch is cut
//! into microbatches; at clock tick `t` stage `s` works on microbatch `t - s`, so while the last
//! stage finishes one microbatch the first is already on the next. Every call only submits work
//! (devices run concurrently); an activation is copied to the next stage's device when that stage
//! needs it. The output is checked against the whole model run on one device. The timeline is
//! printed twice: as the schedule (clock ticks) and in milliseconds, from each stage's measured
//! time per microbatch, beside the measured wall time of the whole pipeline.

use std::time::Instant;

use brigade::{Array, Device, HostArray, Jit, Result, Tensor, device_put, jit, random};

const WIDTH: usize = 256;

/// One stage: a dense layer with tanh (the last one without).
fn stage_fn(last: bool) -> impl Fn(&[Tensor]) -> Vec<Tensor> {
    move |a: &[Tensor]| {
        let y = a[0].matmul(&a[1]) + &a[2];
        vec![if last { y } else { y.tanh() }]
    }
}

/// Pipeline a batch through `stages` layers; false if the output differs from one device's.
pub fn run(quick: bool) -> Result<bool> {
    let devices = brigade::devices()?;
    let n = devices.len();
    let stages = 4usize;
    let (batch, micro) = if quick { (256, 4) } else { (1024, 8) };
    let mb = batch / micro;
    println!(
        "{stages} layers of {WIDTH}×{WIDTH} on {n} device(s) (stage s on device s mod {n}); batch {batch} in {micro} microbatches of {mb}"
    );

    // Parameters, each on its stage's device.
    let keys = random::split(&random::key(7), stages * 2);
    let mut params: Vec<(Array, Array)> = Vec::new();
    for s in 0..stages {
        let k = |i: usize| keys.slice(&[i, 0], &[i + 1, 2], None).reshape(&[2]);
        let w = random::normal(&k(2 * s), &[WIDTH, WIDTH]) * (1.0 / (WIDTH as f32).sqrt());
        let b = random::uniform(&k(2 * s + 1), &[WIDTH], -0.1, 0.1);
        let dev = &devices[s % n];
        params.push((
            device_put(&w.to_array()?, dev)?,
            device_put(&b.to_array()?, dev)?,
        ));
    }
    let layers: Vec<(Device, Jit<_>)> = (0..stages)
        .map(|s| {
            let dev = devices[s % n].clone();
            let f = jit(stage_fn(s + 1 == stages)).on(&dev);
            (dev, f)
        })
        .collect();
    let x = random::normal(&random::key(8), &[batch, WIDTH]).to_array()?;
    let xh = x.to_host()?;
    let micro_in: Vec<Array> = (0..micro)
        .map(|m| {
            let rows = xh.to_vec::<f32>()?[m * mb * WIDTH..(m + 1) * mb * WIDTH].to_vec();
            Array::from_vec(rows, &[mb, WIDTH])
        })
        .collect::<Result<_>>()?;

    // Warm up (compile every stage's kernels) on the first microbatch.
    let mut warm = micro_in[0].clone();
    for (s, (dev, f)) in layers.iter().enumerate() {
        let input = device_put(&warm, dev)?;
        warm = f
            .call(&[input, params[s].0.clone(), params[s].1.clone()])?
            .remove(0);
    }
    warm.to_host()?;

    // Each stage's measured time for one microbatch on its device (median of 3, compiled).
    let mut stage_ms = Vec::with_capacity(stages);
    for (s, (dev, f)) in layers.iter().enumerate() {
        let input = device_put(&micro_in[0], dev)?;
        let mut times: Vec<f64> = (0..3)
            .map(|_| {
                let t = Instant::now();
                f.call(&[input.clone(), params[s].0.clone(), params[s].1.clone()])?[0].to_host()?;
                Ok(t.elapsed().as_secs_f64() * 1e3)
            })
            .collect::<Result<_>>()?;
        times.sort_by(f64::total_cmp);
        stage_ms.push(times[1]);
    }

    // The pipeline: tick t runs stage s on microbatch t - s, for every stage that has one.
    let t0 = Instant::now();
    let mut acts: Vec<Option<Array>> = micro_in.iter().cloned().map(Some).collect();
    let mut timeline: Vec<Vec<String>> = vec![Vec::new(); stages];
    for t in 0..micro + stages - 1 {
        // Last stage first, so that each stage consumes the activation of the previous tick.
        for s in (0..stages).rev() {
            let Some(m) = t.checked_sub(s).filter(|&m| m < micro) else {
                timeline[s].push("  .  ".into());
                continue;
            };
            let (dev, f) = &layers[s];
            let input = device_put(
                acts[m].as_ref().expect("activation of the previous stage"),
                dev,
            )?;
            let out = f.call(&[input, params[s].0.clone(), params[s].1.clone()])?;
            acts[m] = out.into_iter().next();
            timeline[s].push(format!(" m{m:<2} "));
        }
    }
    let outs: Vec<HostArray> = acts
        .iter()
        .map(|a| a.as_ref().expect("output").to_host())
        .collect::<Result<_>>()?;
    let piped = t0.elapsed();

    println!("schedule (rows: stages; columns: clock ticks; mK = microbatch K):");
    for (s, row) in timeline.iter().enumerate() {
        println!("  stage {s} on device {} |{}|", s % n, row.join("|"));
    }
    // The same schedule in time, from the measured stage times: a stage starts when its input
    // is ready and its device is free (stages sharing a device run one after the other).
    let mut end = vec![vec![0.0f64; micro]; stages];
    let mut device_free = vec![0.0f64; n];
    for t in 0..micro + stages - 1 {
        for s in (0..stages).rev() {
            let Some(m) = t.checked_sub(s).filter(|&m| m < micro) else {
                continue;
            };
            let ready = if s == 0 { 0.0 } else { end[s - 1][m] };
            let start = ready.max(device_free[s % n]);
            end[s][m] = start + stage_ms[s];
            device_free[s % n] = end[s][m];
        }
    }
    let makespan = end[stages - 1][micro - 1];
    println!("timeline from the measured stage times (ms; each bar one microbatch):");
    for s in 0..stages {
        let bars: Vec<String> = (0..micro)
            .map(|m| format!("m{m} {:.1}–{:.1}", end[s][m] - stage_ms[s], end[s][m]))
            .collect();
        println!(
            "  stage {s} on {}:{} ({:.2} ms/microbatch): {}",
            devices[s % n].info().backend,
            s % n,
            stage_ms[s],
            bars.join(" | ")
        );
    }
    let serial: f64 = stage_ms.iter().sum::<f64>() * micro as f64;
    println!(
        "  predicted {makespan:.1} ms for the pipeline vs {serial:.1} ms one stage at a time; measured {:.1} ms \
         (on software adapters sharing two CPU cores the devices barely overlap)",
        piped.as_secs_f64() * 1e3
    );

    // The same model, whole batch, on one device.
    let dev0 = &devices[0];
    let t1 = Instant::now();
    let mut h = x.to_device(dev0)?;
    for (s, (w, b)) in params.iter().enumerate() {
        let f = jit(stage_fn(s + 1 == stages)).on(dev0);
        h = f
            .call(&[h, w.to_device(dev0)?, b.to_device(dev0)?])?
            .remove(0);
    }
    let want = h.to_host()?.to_vec::<f32>()?;
    let single = t1.elapsed();
    let got: Vec<f32> = outs
        .iter()
        .map(|o| o.to_vec::<f32>())
        .collect::<Result<Vec<_>>>()?
        .concat();
    let scale = want.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
    let err = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs() / scale)
        .fold(0.0f32, f32::max);
    let same_kind = devices
        .iter()
        .all(|d| d.info().adapter_index == devices[0].info().adapter_index);
    let ok = if same_kind { got == want } else { err <= 1e-5 };
    println!(
        "pipelined {:.1} ms, one device {:.1} ms (includes compiling its kernels); output {} the single-device model {}",
        piped.as_secs_f64() * 1e3,
        single.as_secs_f64() * 1e3,
        if same_kind {
            "bitwise equal to".to_string()
        } else {
            format!("within {err:.1e} of")
        },
        if ok { "✓" } else { "✗" }
    );
    Ok(ok)
}

fn main() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick")
        || std::env::var("BRIGADE_QUICK").is_ok_and(|v| v == "1");
    if !run(quick)? {
        println!("\nTHE PIPELINE'S OUTPUT DIFFERS ✗");
        std::process::exit(1);
    }
    println!("\nthe pipeline's output matches ✓");
    Ok(())
}
