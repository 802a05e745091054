//! Sharded inference: a small decoder-only transformer (multi-head attention with a KV cache, an
//! MLP, RMS norms, tied embeddings) decoding greedily, with its layers placed over devices
//! (pipeline stages) and its heads and MLP split over a `"model"` mesh axis (tensor parallel).
//!
//! ```sh
//! cargo run --release --example sharded_inference
//! BRIGADE_DEVICES=vulkan:4 cargo run --release --example sharded_inference
//! ```
//!
//! The tutorial's 13-billion-parameter dialogue model, at a size that runs on CPU adapters: each
//! placement is `stages × model`. Stage `s` holds a contiguous run of layers on its own mesh of
//! `model` devices; inside a stage every layer's query/key/value columns and output-projection rows
//! are split by heads, the MLP's first layer by columns and its second by rows (Megatron), so each
//! layer needs two `psum`s over `"model"`. The KV cache of a layer lives split by heads on its
//! stage's devices and never leaves them. Between stages only the hidden vector moves. Every
//! placement decodes the same prompt and must produce exactly the tokens of the one-device model
//! (a plain `jit` on one device, no mesh). Printed per placement: per-token latency and the bytes
//! that crossed between host and devices per token (brigade's transfer counters).

use std::time::Instant;

use brigade::{
    Array, Device, Mesh, NamedSharding, P, PartitionSpec, Result, Tensor, counters, jit, psum,
    random, shard_map,
};

#[allow(dead_code)]
#[path = "common/util.rs"]
mod util;

/// The model's sizes.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub vocab: usize,
    pub dim: usize,
    pub heads: usize,
    pub layers: usize,
    pub hidden: usize,
    /// Cache length: prompt + generated tokens must fit.
    pub max_len: usize,
}

impl Config {
    fn head_dim(&self) -> usize {
        self.dim / self.heads
    }
}

/// Per layer: rms gain 1, wq, wk, wv, wo, rms gain 2, w1, w2.
const PER_LAYER: usize = 8;

/// The weights: embedding [vocab, dim] (tied with the output head), positions [max_len, dim],
/// final rms gain [dim], then `PER_LAYER` arrays per layer. One uniform draw from the PRNG, cut
/// on the host (one sampler shape to compile).
fn weights(c: &Config, seed: i64) -> Result<Vec<Array>> {
    let (d, f) = (c.dim, c.hidden);
    let mut shapes: Vec<Vec<usize>> = vec![vec![c.vocab, d], vec![c.max_len, d], vec![d]];
    for _ in 0..c.layers {
        shapes.extend([
            vec![d],
            vec![d, d],
            vec![d, d],
            vec![d, d],
            vec![d, d],
            vec![d],
            vec![d, f],
            vec![f, d],
        ]);
    }
    let total: usize = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
    let all = random::uniform(&random::key(seed), &[total], -1.0, 1.0)
        .to_array()?
        .to_vec::<f32>()?;
    let mut at = 0;
    shapes
        .iter()
        .map(|s| {
            let n: usize = s.iter().product();
            let v = &all[at..at + n];
            at += n;
            // Gains near 1; matrices with standard deviation 2/sqrt(fan-in) (a lively random model
            // whose greedy tokens vary); embeddings as drawn.
            let data: Vec<f32> = match s.len() {
                1 => v.iter().map(|x| 1.0 + 0.1 * x).collect(),
                _ if s[0] == c.vocab || s[0] == c.max_len => v.to_vec(),
                _ => v.iter().map(|x| x * (12.0 / s[0] as f32).sqrt()).collect(),
            };
            Array::from_vec(data, s)
        })
        .collect()
}

fn rms(x: &Tensor, g: &Tensor) -> Tensor {
    &(x * &((x * x).mean(1, true) + 1e-5).rsqrt()) * g
}

/// One layer on one device for the token at position `t`, with this device's share of the heads
/// (`c.heads / model`) and their KV caches [heads, max_len, head_dim], updated at `t`. With
/// `model > 1` the partial attention and MLP outputs meet in a psum over "model".
fn layer(
    h: &Tensor,
    p: &[Tensor],
    kc: &Tensor,
    vc: &Tensor,
    t: &Tensor,
    c: &Config,
    model: usize,
) -> (Tensor, Tensor, Tensor) {
    let (heads, dh) = (c.heads / model, c.head_dim());
    let join = |x: Tensor| if model > 1 { psum(&x, "model") } else { x };
    let max_len = kc.shape()[1];
    let x = rms(h, &p[0]);
    let split = |w: &Tensor| x.matmul(w).reshape(&[heads as i64, 1, dh as i64]);
    let (q, k, v) = (split(&p[1]), split(&p[2]), split(&p[3]));
    // Write this position's key and value into the caches.
    let pos = Tensor::arange(max_len);
    let here = pos
        .eq(t)
        .cast(brigade::DType::F32)
        .reshape(&[1, max_len as i64, 1]);
    let keep = &(&here * -1.0) + 1.0;
    let kc = &(kc * &keep) + &(&k * &here);
    let vc = &(vc * &keep) + &(&v * &here);
    // Attend to positions 0..=t.
    let scores = &q.matmul(&kc.transpose(&[0, 2, 1])) * (1.0 / (dh as f32).sqrt());
    let visible = pos.le(t).reshape(&[1, 1, max_len as i64]);
    let scores = visible.where_(&scores, &Tensor::full(-1e30f32, &[1]));
    let ctx = scores
        .softmax(-1)
        .matmul(&vc)
        .reshape(&[1, (heads * dh) as i64]);
    let h = h + &join(ctx.matmul(&p[4]));
    let m = rms(&h, &p[5]).matmul(&p[6]).relu().matmul(&p[7]);
    (&h + &join(m), kc, vc)
}

/// A stage's program: `args` = [input, t, embedding, positions, final gain, layer weights...,
/// caches (k, v per layer)...]; the first stage's input is the token ([1] i32), the others' the
/// hidden vector [1, dim]. Returns [next token or hidden, caches...].
fn stage(
    args: &[Tensor],
    layers: usize,
    first: bool,
    last: bool,
    c: &Config,
    model: usize,
) -> Vec<Tensor> {
    let (input, t, emb, posw, gf) = (&args[0], &args[1], &args[2], &args[3], &args[4]);
    let weights = &args[5..5 + layers * PER_LAYER];
    let caches = &args[5 + layers * PER_LAYER..];
    let mut h = if first {
        &emb.index_take(input, 0) + &posw.index_take(&t.reshape(&[1]), 0)
    } else {
        input.clone()
    };
    let mut out_caches = Vec::with_capacity(2 * layers);
    for l in 0..layers {
        let (nh, kc, vc) = layer(
            &h,
            &weights[l * PER_LAYER..(l + 1) * PER_LAYER],
            &caches[2 * l],
            &caches[2 * l + 1],
            t,
            c,
            model,
        );
        h = nh;
        out_caches.extend([kc, vc]);
    }
    let out = if last {
        rms(&h, gf).matmul(&emb.transpose(&[1, 0])).argmax(1, false)
    } else {
        h
    };
    let mut outs = vec![out];
    outs.extend(out_caches);
    outs
}

/// The specs of one layer's weights: heads and MLP columns/rows split over "model".
fn layer_specs() -> [PartitionSpec; PER_LAYER] {
    [
        P![],
        P![None, "model"],
        P![None, "model"],
        P![None, "model"],
        P!["model", None],
        P![],
        P![None, "model"],
        P!["model", None],
    ]
}

/// Greedy decoding of `steps` tokens after `prompt` with the model placed as `stages × model` over
/// `devices`. Returns the tokens, the median ms per generated token and bytes moved per token.
pub fn decode_placed(
    c: &Config,
    w: &[Array],
    prompt: &[i32],
    steps: usize,
    devices: &[Device],
    stages: usize,
    model: usize,
) -> Result<(Vec<i32>, f64, f64)> {
    let cache_zero = Array::full(0.0f32, &[c.heads, c.max_len, c.head_dim()])?;
    let mut programs = Vec::new();
    let mut meshes = Vec::new();
    let mut caches: Vec<Vec<Array>> = Vec::new();
    let mut layer_weights: Vec<Vec<Array>> = Vec::new();
    for s in 0..stages {
        let (l0, l1) = (s * c.layers / stages, (s + 1) * c.layers / stages);
        let n = l1 - l0;
        let mesh = Mesh::new(&devices[s * model..(s + 1) * model], &[("model", model)])?;
        let (first, last, cfg) = (s == 0, s + 1 == stages, *c);
        let mut in_specs = vec![P![]; 5];
        for _ in 0..n {
            in_specs.extend(layer_specs());
        }
        in_specs.extend(vec![P!["model"]; 2 * n]);
        let mut out_specs = vec![P![]];
        out_specs.extend(vec![P!["model"]; 2 * n]);
        programs.push(
            shard_map(move |a: &[Tensor]| stage(a, n, first, last, &cfg, model))
                .mesh(&mesh)
                .in_specs(&in_specs)
                .out_specs(&out_specs)
                .named(&format!("stage {s}")),
        );
        // Weights placed once on the stage's devices (each device its blocks), caches likewise.
        let mut placed = Vec::new();
        for x in &w[..3] {
            placed.push(brigade::device_put(x, &NamedSharding::new(&mesh, P![])?)?);
        }
        for l in l0..l1 {
            for (x, spec) in w[3 + l * PER_LAYER..3 + (l + 1) * PER_LAYER]
                .iter()
                .zip(layer_specs())
            {
                placed.push(brigade::device_put(x, &NamedSharding::new(&mesh, spec)?)?);
            }
        }
        layer_weights.push(placed);
        let kv = NamedSharding::new(&mesh, P!["model"])?;
        caches.push(
            (0..2 * n)
                .map(|_| brigade::device_put(&cache_zero, &kv))
                .collect::<Result<_>>()?,
        );
        meshes.push(mesh);
    }
    let mut tokens = prompt.to_vec();
    let mut times = Vec::new();
    let mut moved = 0u64;
    for t in 0..prompt.len() + steps - 1 {
        let start = Instant::now();
        let before = counters();
        let mut x = Array::from_vec(vec![tokens[t]], &[1])?;
        for s in 0..stages {
            if s > 0 {
                // The hidden vector moves to the next stage's devices (every one needs it whole).
                x = brigade::device_put(&x, &NamedSharding::new(&meshes[s], P![])?)?;
            }
            let mut args = vec![x.clone(), Array::scalar(t as i32)];
            args.extend(layer_weights[s].iter().cloned());
            args.extend(caches[s].iter().cloned());
            let mut out = programs[s].call(&args)?;
            caches[s] = out.split_off(1);
            x = out.remove(0);
        }
        let next = x.to_vec::<i32>()?[0];
        let work = counters().since(&before);
        if t + 1 >= prompt.len() {
            tokens.push(next);
            times.push(start.elapsed().as_secs_f64() * 1e3);
            moved += work.bytes_uploaded + work.bytes_downloaded;
        }
    }
    times.sort_by(f64::total_cmp);
    let generated = &tokens[prompt.len()..];
    Ok((
        generated.to_vec(),
        times[times.len() / 2],
        moved as f64 / steps as f64,
    ))
}

/// The one-device model: one `jit` over every layer (no mesh, no collectives).
pub fn decode_one_device(
    c: &Config,
    w: &[Array],
    prompt: &[i32],
    steps: usize,
    device: &Device,
) -> Result<(Vec<i32>, f64)> {
    let cfg = *c;
    let f = jit(move |a: &[Tensor]| stage(a, cfg.layers, true, true, &cfg, 1)).on(device);
    let w: Vec<Array> = w
        .iter()
        .map(|x| x.to_device(device))
        .collect::<Result<_>>()?;
    let zero = Array::full(0.0f32, &[c.heads, c.max_len, c.head_dim()])?.to_device(device)?;
    let mut caches = vec![zero; 2 * c.layers];
    let mut tokens = prompt.to_vec();
    let mut times = Vec::new();
    for t in 0..prompt.len() + steps - 1 {
        let start = Instant::now();
        let mut args = vec![
            Array::from_vec(vec![tokens[t]], &[1])?,
            Array::scalar(t as i32),
        ];
        args.extend(w.iter().cloned());
        args.extend(caches.iter().cloned());
        let mut out = f.call(&args)?;
        caches = out.split_off(1);
        let next = out[0].to_vec::<i32>()?[0];
        if t + 1 >= prompt.len() {
            tokens.push(next);
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok((tokens[prompt.len()..].to_vec(), times[times.len() / 2]))
}

/// The placements that fit `n` devices: pipeline only, tensor parallel only, and both.
fn placements(n: usize, c: &Config) -> Vec<(usize, usize)> {
    let divides = |m: usize| c.heads.is_multiple_of(m) && c.hidden.is_multiple_of(m);
    let stages = n.min(c.layers);
    let model = (1..=n).rev().find(|&m| divides(m)).unwrap_or(1);
    let mut v = vec![(stages, 1), (1, model)];
    if n >= 4 && divides(n / 2) {
        v.push((2, n / 2));
    }
    v.dedup();
    v
}

/// Decode with every placement; false if any differs from the one-device tokens.
pub fn run(quick: bool) -> Result<bool> {
    let devices = brigade::devices()?;
    let c = if quick {
        Config {
            vocab: 64,
            dim: 32,
            heads: 4,
            layers: 4,
            hidden: 64,
            max_len: 40,
        }
    } else {
        Config {
            vocab: 256,
            dim: 128,
            heads: 8,
            layers: 4,
            hidden: 512,
            max_len: 48,
        }
    };
    let (prompt, steps) = (vec![3, 14, 15, 9], 32);
    println!(
        "decoder: {} layers, dim {}, {} heads, MLP {}, vocab {}, KV cache {} positions; prompt {prompt:?}, {steps} tokens greedy",
        c.layers, c.dim, c.heads, c.hidden, c.vocab, c.max_len
    );
    let w = weights(&c, 42)?;
    let (want, one_ms) = decode_one_device(&c, &w, &prompt, steps, &devices[0])?;
    println!(
        "  one device ({}): {one_ms:.2} ms/token; tokens {:?}",
        devices[0].info().backend,
        want
    );
    let mut ok = true;
    for (stages, model) in placements(devices.len(), &c) {
        let (got, ms, bytes) = decode_placed(&c, &w, &prompt, steps, &devices, stages, model)?;
        let same = got == want;
        ok &= same;
        println!(
            "  {stages} stage(s) × {model} model-parallel device(s): {ms:.2} ms/token, {:.0} bytes moved/token; tokens {} the one-device model's {}",
            bytes,
            if same { "equal" } else { "DIFFER from" },
            if same { "✓" } else { "✗" }
        );
        if !same {
            println!("    got {got:?}");
        }
    }
    Ok(ok)
}

#[allow(dead_code)]
fn main() -> Result<()> {
    if !run(util::quick_requested())? {
        println!("\nA PLACEMENT DECODED OTHER TOKENS ✗");
        std::process::exit(1);
    }
    println!("\nevery placement decoded the one-device tokens ✓");
    Ok(())
}
