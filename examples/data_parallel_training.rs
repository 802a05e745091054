//! Data-parallel training: an MLP learns the 8×8 handwritten digits shipped in `data/digits.bin`,
//! with `pmap(grad)` and `pmean` over every device — the tutorial's "每家店算自己的梯度, 总部取平均".
//!
//! ```sh
//! cargo run --release --example data_parallel_training
//! BRIGADE_DEVICES=vulkan:4 cargo run --release --example data_parallel_training
//! ```
//!
//! Each step, every device takes its block of the batch, computes the loss gradient on it,
//! `pmean` averages the gradients over the devices (one host round trip for all of them), and each
//! device applies the same Adam update to its own copy of the parameters. The copies never leave
//! the devices between steps (the sharded outputs feed the next step in place); after every step
//! the example reads them back and asserts that all devices hold bit-identical parameters. At the
//! end it reports the loss curve and the accuracy on held-out digits.

use std::time::Instant;

use brigade::optim::{Adam, AdamState};
use brigade::{
    Array, DType, Result, Tensor, device_put_replicated, jit, pmap, pmean, random, value_and_grad,
};

const DIGITS: &[u8] = include_bytes!("../data/digits.bin");
pub const HIDDEN: usize = 32;
pub const BATCH: usize = 240; // divisible by 1, 2, 3, 4, 5, 6 and 8 devices
pub const TRAIN: usize = 1440;

/// Pixels scaled to [0, 1] and labels, from the shipped file.
pub fn load() -> Result<(Vec<f32>, Vec<i32>)> {
    let bad = |detail: &str| brigade::Error::BadShapeArg {
        op: "digits.bin",
        shape: vec![DIGITS.len()],
        detail: detail.to_string(),
    };
    if DIGITS.len() < 12 || &DIGITS[..8] != b"DIGITS01" {
        return Err(bad("not a DIGITS01 file"));
    }
    let n = u32::from_le_bytes([DIGITS[8], DIGITS[9], DIGITS[10], DIGITS[11]]) as usize;
    if DIGITS.len() != 12 + n * 65 {
        return Err(bad("length does not match the sample count"));
    }
    let pixels = DIGITS[12..12 + n * 64]
        .iter()
        .map(|&p| p as f32 / 16.0)
        .collect();
    let labels = DIGITS[12 + n * 64..].iter().map(|&l| l as i32).collect();
    Ok((pixels, labels))
}

/// Logits of the MLP: 64 → HIDDEN (tanh) → 10.
pub fn forward(p: &[Tensor], x: &Tensor) -> Tensor {
    let h = (x.matmul(&p[0]) + &p[1]).tanh();
    h.matmul(&p[2]) + &p[3]
}

/// Mean cross-entropy of the batch.
pub fn loss(p: &[Tensor], x: &Tensor, y: &Tensor) -> Tensor {
    let logp = forward(p, x).log_softmax(-1);
    -(&logp * &y.one_hot(10).cast(DType::F32)).sum_all() / x.shape()[0] as f32
}

/// Train; false if a check fails (parameters differ between devices, the loss does not fall, or
/// the held-out accuracy is poor).
pub fn run(quick: bool) -> Result<bool> {
    let devices = brigade::devices()?;
    let n_dev = devices.len();
    let (pixels, labels) = load()?;
    let n = labels.len();
    println!(
        "{n} digits (8×8); training on {TRAIN}, testing on {}; {n_dev} device(s), {} samples each per step",
        n - TRAIN,
        BATCH / n_dev
    );

    // Parameters, initialized with brigade's PRNG (scaled normal), copied to every device.
    let keys = random::split(&random::key(0), 2);
    let k0 = keys.slice(&[0, 0], &[1, 2], None).reshape(&[2]);
    let k1 = keys.slice(&[1, 0], &[2, 2], None).reshape(&[2]);
    let w1 = random::normal(&k0, &[64, HIDDEN]) * (1.0 / 8.0);
    let w2 = random::normal(&k1, &[HIDDEN, 10]) * (1.0 / (HIDDEN as f32).sqrt());
    let init = [
        w1,
        Tensor::zeros(&[HIDDEN], DType::F32),
        w2,
        Tensor::zeros(&[10], DType::F32),
    ];
    let opt = Adam::new(0.01);
    let state0 = opt.init(&init);
    let mut carried: Vec<Array> = Vec::new(); // params (4), m (4), v (4), step, b1^t, b2^t
    for t in init.iter().chain(state0.to_vec().iter()) {
        carried.push(device_put_replicated(&t.to_array()?, &devices)?);
    }

    // One training step on every device: gradient on the local block, pmean, Adam update.
    let step = pmap(move |a: &[Tensor]| adam_step(&opt, a))
        .axis_name("batch")
        .devices(&devices);

    let epochs = if quick { 3 } else { 12 };
    let per = BATCH / n_dev;
    let mut curve = Vec::new();
    let mut identical = true;
    let t0 = Instant::now();
    for epoch in 0..epochs {
        let mut epoch_loss = 0.0;
        let steps = TRAIN / BATCH;
        for s in 0..steps {
            let rows = (s * BATCH)..((s + 1) * BATCH);
            let xb = Array::from_vec(
                pixels[rows.start * 64..rows.end * 64].to_vec(),
                &[n_dev, per, 64],
            )?;
            let yb = Array::from_vec(labels[rows].to_vec(), &[n_dev, per])?;
            let mut args = carried.clone();
            args.push(xb);
            args.push(yb);
            let mut out = step.call(&args)?;
            let l = out.pop().expect("loss").shards().expect("sharded")[0].to_vec::<f32>()?[0];
            epoch_loss += l / steps as f32;
            identical &= same_on_every_device(&out[..4])?;
            carried = out;
        }
        curve.push(epoch_loss);
        println!("  epoch {epoch:2}: loss {epoch_loss:.4}");
    }
    println!(
        "{} steps in {:.2} s; parameters bit-identical on all {n_dev} devices after every step: {}",
        epochs * (TRAIN / BATCH),
        t0.elapsed().as_secs_f64(),
        if identical { "✓" } else { "✗" }
    );

    // Accuracy with device 0's copy of the parameters.
    let params: Vec<Array> = carried[..4]
        .iter()
        .map(|p| p.shards().expect("sharded")[0].clone())
        .collect();
    let test_x = Array::from_vec(pixels[TRAIN * 64..].to_vec(), &[n - TRAIN, 64])?;
    let predict = jit(|a: &[Tensor]| vec![forward(&a[..4], &a[4]).argmax(-1, false)]);
    let mut args = params.clone();
    args.push(test_x);
    let pred = predict.call(&args)?[0].to_vec::<i32>()?;
    let correct = pred
        .iter()
        .zip(&labels[TRAIN..])
        .filter(|(p, l)| p == l)
        .count();
    let acc = correct as f64 / (n - TRAIN) as f64;
    let falling = curve.last().copied().unwrap_or(f32::MAX) < 0.5 * curve[0];
    let good = acc >= if quick { 0.7 } else { 0.85 };
    println!(
        "held-out accuracy: {correct}/{} = {:.1} % {}; loss {:.3} → {:.3} {}",
        n - TRAIN,
        100.0 * acc,
        if good { "✓" } else { "✗" },
        curve[0],
        curve.last().copied().unwrap_or(f32::NAN),
        if falling { "✓" } else { "✗" }
    );
    Ok(identical && falling && good)
}

/// Whether every shard of each stacked parameter holds the same bits.
fn same_on_every_device(params: &[Array]) -> Result<bool> {
    for p in params {
        let shards = p.shards().unwrap_or_default();
        let first = shards[0].to_host()?;
        for s in &shards[1..] {
            if s.to_host()?.data != first.data {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// `--quick` or `BRIGADE_QUICK=1`: fewer epochs.
fn quick_requested() -> bool {
    std::env::args().any(|a| a == "--quick")
        || std::env::var("BRIGADE_QUICK").is_ok_and(|v| v == "1")
}

fn main() -> Result<()> {
    let ok = run(quick_requested())?;
    println!(
        "\n{}",
        if ok {
            "training checks passed ✓"
        } else {
            "TRAINING CHECKS FAILED ✗"
        }
    );
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}

/// One data-parallel training step on every device: the gradient of the loss on the device's
/// block `a[15..17]` (x, y), averaged over the `batch` axis (pmean), then an Adam update of the
/// parameters `a[..4]` with state `a[4..15]`; returns the new parameters, state and mean loss.
pub fn adam_step(opt: &Adam, a: &[Tensor]) -> Vec<Tensor> {
    let (x, y) = (&a[15], &a[16]);
    let vg = value_and_grad(|q: &[Tensor]| vec![loss(&q[..4], &q[4], &q[5])])
        .argnums(&[0, 1, 2, 3])
        .apply(&[
            a[0].clone(),
            a[1].clone(),
            a[2].clone(),
            a[3].clone(),
            x.clone(),
            y.clone(),
        ]);
    let grads: Vec<Tensor> = vg[1..5].iter().map(|g| pmean(g, "batch")).collect();
    let state = AdamState::from_slice(&a[4..15], 4).expect("Adam state");
    let (params, state) = opt.update(&a[..4], &grads, &state);
    let mut out = params;
    out.extend(state.to_vec());
    out.push(pmean(&vg[0], "batch"));
    out
}
