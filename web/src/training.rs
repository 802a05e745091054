//! 实战 Hands-on: data-parallel training of a small MLP on the shipped 8×8 digits, each step
//! checked against the reference interpreter.

use futures::future::join_all;
use wasm_bindgen::prelude::*;

use super::TOL;
use super::data::{arr, host_of, lanes_busy, rel_err};
use super::json::{Obj, json_list, json_nums, to_js, work_json};
use super::page::{emit, now};
use super::session::{Body, body, session};
use brigade::optim::{Adam, AdamState};
use brigade::{
    Array, DType, Error, HostArray, Jit, Parallel, Result, Tensor, device_put_replicated, jit,
    pmap, pmean, value_and_grad,
};

const DIGITS: &[u8] = include_bytes!("../../data/digits.bin");
const HIDDEN: usize = 32;
/// Samples per step, divisible by 1, 2, 3 and 4 devices.
const BATCH: usize = 240;
const TRAIN: usize = 1440;

pub(super) struct Training {
    step: Parallel<Body>,
    grad_ref: brigade::Grad<Body>,
    predict: Jit<Body>,
    predict_ref: Jit<Body>,
    pixels: Vec<f32>,
    labels: Vec<i32>,
    /// params (4), Adam state (11), stacked over the devices.
    carried: Vec<Array>,
    steps: usize,
    losses: Vec<f64>,
}

fn digits() -> Result<(Vec<f32>, Vec<i32>)> {
    let bad = || Error::BadShapeArg {
        op: "digits.bin",
        shape: vec![DIGITS.len()],
        detail: "not a DIGITS01 file of the stated length".into(),
    };
    if DIGITS.len() < 12 || &DIGITS[..8] != b"DIGITS01" {
        return Err(bad());
    }
    let n = u32::from_le_bytes([DIGITS[8], DIGITS[9], DIGITS[10], DIGITS[11]]) as usize;
    if DIGITS.len() != 12 + n * 65 {
        return Err(bad());
    }
    Ok((
        DIGITS[12..12 + n * 64]
            .iter()
            .map(|&p| p as f32 / 16.0)
            .collect(),
        DIGITS[12 + n * 64..].iter().map(|&l| l as i32).collect(),
    ))
}

fn forward(p: &[Tensor], x: &Tensor) -> Tensor {
    let h = (x.matmul(&p[0]) + &p[1]).tanh();
    h.matmul(&p[2]) + &p[3]
}

fn loss(p: &[Tensor], x: &Tensor, y: &Tensor) -> Tensor {
    let logp = forward(p, x).log_softmax(-1);
    -(&logp * &y.one_hot(10).cast(DType::F32)).sum_all() / x.shape()[0] as f32
}

fn loss_fn(q: &[Tensor]) -> Vec<Tensor> {
    vec![loss(&q[..4], &q[4], &q[5])]
}

const LR: f32 = 0.02;

/// One data-parallel step: each device's gradient on its block, their pmean, the same Adam update
/// everywhere. Outputs: params (4), state (11), mean loss, local grads (4), averaged grads (4).
fn train_step_body(a: &[Tensor]) -> Vec<Tensor> {
    let (x, y) = (&a[15], &a[16]);
    let vg = value_and_grad(loss_fn).argnums(&[0, 1, 2, 3]).apply(&[
        a[0].clone(),
        a[1].clone(),
        a[2].clone(),
        a[3].clone(),
        x.clone(),
        y.clone(),
    ]);
    let local: Vec<Tensor> = vg[1..5].to_vec();
    let grads: Vec<Tensor> = local.iter().map(|g| pmean(g, "batch")).collect();
    let Some(state) = AdamState::from_slice(&a[4..15], 4) else {
        return vec![Tensor::failed(Error::Arity {
            what: "Adam state".into(),
            expected: 11,
            got: a.len().saturating_sub(6),
        })];
    };
    let (params, state) = Adam::new(LR).update(&a[..4], &grads, &state);
    let mut out = params;
    out.extend(state.to_vec());
    out.push(pmean(&vg[0], "batch"));
    out.extend(local);
    out.extend(grads);
    out
}

/// Host-made initial weights (scaled normal from a fixed LCG + Box-Muller): no device work needed.
fn init_params() -> Result<Vec<Tensor>> {
    let mut s: u64 = 0x2545_f491_4f6c_dd1d;
    let mut uniform = move || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut normal = |n: usize, scale: f64| -> Vec<f32> {
        (0..n)
            .map(|_| {
                let (u, v) = (uniform(), uniform());
                ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos() * scale) as f32
            })
            .collect()
    };
    Ok(vec![
        Tensor::from(arr(normal(64 * HIDDEN, 1.0 / 8.0), &[64, HIDDEN])?),
        Tensor::zeros(&[HIDDEN], DType::F32),
        Tensor::from(arr(
            normal(HIDDEN * 10, 1.0 / (HIDDEN as f64).sqrt()),
            &[HIDDEN, 10],
        )?),
        Tensor::zeros(&[10], DType::F32),
    ])
}

async fn train_init_inner() -> Result<String> {
    let s = session()?;
    let n = s.n();
    let (pixels, labels) = digits()?;
    let init = init_params()?;
    let state = Adam::new(LR).init(&init);
    let mut carried = Vec::new();
    for t in init.iter().chain(state.to_vec().iter()) {
        carried.push(device_put_replicated(&t.to_array()?, &s.devices)?);
    }
    let predict_body = || body(|a| vec![forward(&a[..4], &a[4]).argmax(-1, false)]);
    let t = Training {
        step: pmap(body(train_step_body))
            .axis_name("batch")
            .devices(&s.devices)
            .named("train step"),
        grad_ref: value_and_grad(body(loss_fn))
            .argnums(&[0, 1, 2, 3])
            .named("grad (reference)")
            .on(&s.cpu),
        predict: jit(predict_body()).named("predict").on(&s.devices[0]),
        predict_ref: jit(predict_body()).named("predict (reference)").on(&s.cpu),
        pixels,
        labels,
        carried,
        steps: 0,
        losses: Vec::new(),
    };
    let out = Obj::new()
        .int("devices", n)
        .int("batch", BATCH)
        .int("per_device", BATCH / n)
        .int("train", TRAIN)
        .int("test", t.labels.len() - TRAIN)
        .int("hidden", HIDDEN)
        .num("lr", LR as f64)
        .end();
    *s.train.borrow_mut() = Some(t);
    Ok(out)
}

/// 实战: set up data-parallel training of a 64→32→10 MLP on the shipped 8×8 digits: parameters
/// and Adam state replicated on every device. Returns the setup as JSON.
#[wasm_bindgen]
pub async fn train_init() -> std::result::Result<String, JsValue> {
    to_js(train_init_inner().await)
}

async fn train_step_inner() -> Result<String> {
    let s = session()?;
    let n = s.n();
    let before = brigade::counters();
    // Taken out for the step (no RefCell borrow across awaits), put back after.
    let mut t = s
        .train
        .borrow_mut()
        .take()
        .ok_or_else(|| Error::NoDevice("call train_init() first".into()))?;
    let res = train_step_with(&mut t, n).await;
    *s.train.borrow_mut() = Some(t);
    let mut out = res?;
    out = out.raw("work", work_json(&before));
    Ok(out.end())
}

async fn train_step_with(t: &mut Training, n: usize) -> Result<Obj> {
    let per = BATCH / n;
    let first = (t.steps * BATCH) % TRAIN;
    let rows = first..first + BATCH;
    let xb = arr(
        t.pixels[rows.start * 64..rows.end * 64].to_vec(),
        &[n, per, 64],
    )?;
    let yb = Array::from_vec(t.labels[rows.clone()].to_vec(), &[n, per])?;
    let mut args = t.carried.clone();
    args.push(xb);
    args.push(yb);
    lanes_busy("train", n);
    let t0 = now();
    let out = t.step.call_async(&args).await?;
    // Read what the page shows: loss, every device's local gradients and the averaged ones.
    let reads: Vec<&Array> = out[15..24].iter().collect();
    let hosts = join_all(reads.iter().map(|a| a.to_host_async()))
        .await
        .into_iter()
        .collect::<Result<Vec<HostArray>>>()?;
    let ms = now() - t0;
    for d in 0..n {
        emit(
            "lane",
            &Obj::new()
                .str("mode", "train")
                .int("device", d)
                .str("state", "done")
                .num("ms", ms)
                .end(),
        );
    }
    let loss = hosts[0].to_f64()[0];
    // Each device's gradients (stacked: device d's are the d-th slice of every output).
    let local: Vec<Vec<f64>> = hosts[1..5].iter().map(|h| h.to_f64()).collect();
    let mean: Vec<Vec<f64>> = hosts[5..9].iter().map(|h| h.to_f64()).collect();
    let sizes = [64 * HIDDEN, HIDDEN, HIDDEN * 10, 10];
    let slice = |g: &[f64], k: usize, d: usize| g[d * sizes[k]..(d + 1) * sizes[k]].to_vec();
    // pmean check: the averaged gradient equals the mean of the local ones, on every device.
    let mut err_pmean = 0.0f64;
    for k in 0..4 {
        let host_mean: Vec<f64> = (0..sizes[k])
            .map(|i| (0..n).map(|d| local[k][d * sizes[k] + i]).sum::<f64>() / n as f64)
            .collect();
        for d in 0..n {
            err_pmean = err_pmean.max(rel_err(&slice(&mean[k], k, d), &host_mean));
        }
    }
    // Reference check: each device's local gradient against the CPU interpreter's gradient of the
    // loss on that device's block, at the parameters before the step.
    let params_before: Vec<HostArray> = {
        let mut v = Vec::with_capacity(4);
        for p in &t.carried[..4] {
            let shard0 = p
                .shards()
                .map(|s| s[0].clone())
                .unwrap_or_else(|| p.clone());
            v.push(shard0.to_host_async().await?);
        }
        v
    };
    let mut err_ref = 0.0f64;
    let mut ref_loss = 0.0f64;
    for d in 0..n {
        let r = first + d * per..first + (d + 1) * per;
        let mut ref_args: Vec<Array> = params_before
            .iter()
            .map(|h| Array::from_host_array(h.clone()))
            .collect::<Result<_>>()?;
        ref_args.push(arr(
            t.pixels[r.start * 64..r.end * 64].to_vec(),
            &[per, 64],
        )?);
        ref_args.push(Array::from_vec(t.labels[r].to_vec(), &[per])?);
        let g = t.grad_ref.call(&ref_args)?;
        ref_loss += host_of(&g, 0)?.to_f64()[0] / n as f64;
        for (k, l) in local.iter().enumerate() {
            err_ref = err_ref.max(rel_err(&slice(l, k, d), &host_of(&g, k + 1)?.to_f64()));
        }
    }
    err_ref = err_ref.max(rel_err(&[loss], &[ref_loss]));
    // Every device holds the same parameters after the step.
    let mut identical = true;
    for p in &out[..4] {
        let shards = p.shards().unwrap_or_default();
        let hs = join_all(shards.iter().map(|s| s.to_host_async()))
            .await
            .into_iter()
            .collect::<Result<Vec<HostArray>>>()?;
        identical &= hs.iter().all(|h| h.data == hs[0].data);
    }
    t.carried = out[..15].to_vec();
    t.steps += 1;
    t.losses.push(loss);
    // What the page draws: the output-bias gradient (10 numbers) per device and averaged, and
    // every device's gradient norm.
    let norms: Vec<f64> = (0..n)
        .map(|d| {
            (0..4)
                .map(|k| slice(&local[k], k, d).iter().map(|v| v * v).sum::<f64>())
                .sum::<f64>()
                .sqrt()
        })
        .collect();
    let b2_local = json_list((0..n).map(|d| json_nums(&slice(&local[3], 3, d))));
    Ok(Obj::new()
        .int("step", t.steps)
        .num("loss", loss)
        .num("ms", ms)
        .raw("grad_norms", json_nums(&norms))
        .raw("b2_grad_local", b2_local)
        .raw("b2_grad_mean", json_nums(&slice(&mean[3], 3, 0)))
        .num("err_pmean", err_pmean)
        .num("err_ref", err_ref)
        .bool("identical", identical)
        .bool("ok", err_pmean <= TOL && err_ref <= TOL && identical))
}

/// 实战: one training step on every device (see [`train_init`]): the loss, each device's gradient
/// norm and output-bias gradient, their pmean, and the checks (pmean = mean of the local
/// gradients; each local gradient = the reference's on that block; parameters identical).
#[wasm_bindgen]
pub async fn train_step() -> std::result::Result<String, JsValue> {
    to_js(train_step_inner().await)
}

async fn train_eval_inner() -> Result<String> {
    let s = session()?;
    let before = brigade::counters();
    let t = s
        .train
        .borrow_mut()
        .take()
        .ok_or_else(|| Error::NoDevice("call train_init() first".into()))?;
    let res = async {
        let test = t.labels.len() - TRAIN;
        let mut args = Vec::with_capacity(5);
        for p in &t.carried[..4] {
            let shard0 = p
                .shards()
                .map(|s| s[0].clone())
                .unwrap_or_else(|| p.clone());
            args.push(Array::from_host_array(shard0.to_host_async().await?)?);
        }
        args.push(arr(t.pixels[TRAIN * 64..].to_vec(), &[test, 64])?);
        let t0 = now();
        let pred = t.predict.call(&args)?[0].to_host_async().await?.to_f64();
        let ms = now() - t0;
        let want = host_of(&t.predict_ref.call(&args)?, 0)?.to_f64();
        let correct = pred
            .iter()
            .zip(&t.labels[TRAIN..])
            .filter(|(p, l)| **p as i32 == **l)
            .count();
        let agree = pred.iter().zip(&want).filter(|(a, b)| a == b).count();
        let first = t.losses.first().copied().unwrap_or(f64::NAN);
        let last = t.losses.last().copied().unwrap_or(f64::NAN);
        // Ties between logits may round differently; allow one disagreement in 200.
        let ok = agree * 200 >= test * 199 && last < 0.5 * first;
        Ok::<String, Error>(
            Obj::new()
                .int("steps", t.steps)
                .int("test", test)
                .int("correct", correct)
                .num("accuracy", correct as f64 / test as f64)
                .int("agree_with_reference", agree)
                .num("first_loss", first)
                .num("last_loss", last)
                .num("ms", ms)
                .bool("ok", ok)
                .raw("work", work_json(&before))
                .end(),
        )
    }
    .await;
    *s.train.borrow_mut() = Some(t);
    res
}

/// 实战: held-out accuracy of device 0's parameters, its predictions against the reference's, and
/// whether the loss fell by half.
#[wasm_bindgen]
pub async fn train_eval() -> std::result::Result<String, JsValue> {
    to_js(train_eval_inner().await)
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::super::json::field;
    use super::super::session::start_inner;
    use super::*;

    /// Twelve data-parallel steps on two cpu devices, each checked (pmean, reference gradients,
    /// identical parameters), then the held-out evaluation.
    #[test]
    fn training_on_cpu_devices() {
        pollster::block_on(async {
            start_inner(2, "cpu:2").await.unwrap();
            train_init_inner().await.unwrap();
            for _ in 0..12 {
                let st = train_step_inner().await.unwrap();
                assert_eq!(field(&st, "ok"), "true", "{st}");
            }
            let ev = train_eval_inner().await.unwrap();
            assert_eq!(field(&ev, "ok"), "true", "{ev}");
        });
    }
}
