//! Optimizers against step-by-step host computations in f64, eagerly and inside `jit`, and a
//! convergence check on a least-squares problem.

mod common;

use brigade::optim::{Adam, AdamState, Sgd};
use brigade::{Array, Tensor, grad, jit};
use common::{Lcg, f32s};

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_array()
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|&v| v as f64)
        .collect()
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, want {w} (tol {tol})"
        );
    }
}

/// Three Adam steps with fixed gradients, against the update rule written out in f64.
#[test]
fn adam_matches_the_update_rule() {
    let p0 = f32s(6, 1, -1.0, 1.0);
    let grads: Vec<Vec<f32>> = (0..3).map(|s| f32s(6, 10 + s, -2.0, 2.0)).collect();
    let opt = Adam {
        lr: 0.05,
        b1: 0.8,
        b2: 0.95,
        eps: 1e-6,
    };
    let mut params = vec![Tensor::from_vec(p0.clone(), &[2, 3])];
    let mut state = opt.init(&params);
    let (mut p, mut m, mut v) = (
        p0.iter().map(|&x| x as f64).collect::<Vec<f64>>(),
        vec![0.0f64; 6],
        vec![0.0f64; 6],
    );
    for (step, g) in grads.iter().enumerate() {
        let t = (step + 1) as i32;
        let gt = vec![Tensor::from_vec(g.clone(), &[2, 3])];
        (params, state) = opt.update(&params, &gt, &state);
        for i in 0..6 {
            let gi = g[i] as f64;
            m[i] = 0.8 * m[i] + 0.2 * gi;
            v[i] = 0.95 * v[i] + 0.05 * gi * gi;
            let mh = m[i] / (1.0 - 0.8f64.powi(t));
            let vh = v[i] / (1.0 - 0.95f64.powi(t));
            p[i] -= 0.05 * mh / (vh.sqrt() + 1e-6);
        }
        close(
            &vals(&params[0]),
            &p,
            1e-5,
            &format!("params after step {t}"),
        );
        close(&vals(&state.m[0]), &m, 1e-5, "m");
        close(&vals(&state.v[0]), &v, 1e-5, "v");
        assert_eq!(vals(&state.step), vec![t as f64]);
    }
}

/// SGD with and without momentum against the rule in f64.
#[test]
fn sgd_matches_the_update_rule() {
    let p0 = f32s(4, 3, -1.0, 1.0);
    for momentum in [0.0f32, 0.9] {
        let opt = Sgd::with_momentum(0.1, momentum);
        let mut params = vec![Tensor::from_vec(p0.clone(), &[4])];
        let mut state = opt.init(&params);
        let mut p: Vec<f64> = p0.iter().map(|&x| x as f64).collect();
        let mut vel = [0.0f64; 4];
        for s in 0..3 {
            let g = f32s(4, 20 + s, -1.0, 1.0);
            (params, state) = opt.update(&params, &[Tensor::from_vec(g.clone(), &[4])], &state);
            for i in 0..4 {
                vel[i] = momentum as f64 * vel[i] + g[i] as f64;
                p[i] -= 0.1 * vel[i];
            }
            close(
                &vals(&params[0]),
                &p,
                1e-6,
                &format!("sgd momentum {momentum} step {s}"),
            );
        }
    }
}

/// A whole training step (loss, gradient, Adam update) compiled by `jit` on every GPU device,
/// with the state passed in and out as arrays, fits a least-squares problem whose solution is
/// known: y = X w* exactly, so the loss must fall close to zero and w close to w*.
#[test]
fn jitted_adam_step_fits_least_squares() {
    let (n, d) = (32, 3);
    let mut rng = Lcg::new(5);
    let x: Vec<f32> = (0..n * d).map(|_| rng.range(-1.0, 1.0) as f32).collect();
    let w_star = [0.5f32, -1.5, 2.0];
    let y: Vec<f32> = (0..n)
        .map(|r| (0..d).map(|c| x[r * d + c] * w_star[c]).sum())
        .collect();
    let opt = Adam::new(0.1);
    for dev in common::gpu_devices() {
        let _guard = common::device_guard(&dev);
        let step = jit(move |a: &[Tensor]| {
            // a: w, m, v, step, b1^t, b2^t, x, y
            let loss = |p: &[Tensor]| {
                let r = &p[1].matmul(&p[0].reshape(&[3, 1])).reshape(&[-1]) - &p[2];
                vec![r.square().mean_all()]
            };
            let g = grad(loss).apply(&[a[0].clone(), a[6].clone(), a[7].clone()]);
            let state = AdamState::from_slice(&a[1..6], 1).expect("m, v, step, powers");
            let (p, s) = opt.update(&a[..1], &g, &state);
            let l = loss(&[a[0].clone(), a[6].clone(), a[7].clone()]);
            let mut out = p;
            out.extend(s.to_vec());
            out.extend(l);
            out
        })
        .on(&dev);
        let xa = Array::from_vec(x.clone(), &[n, d]).unwrap();
        let ya = Array::from_vec(y.clone(), &[n]).unwrap();
        let mut w = Array::from_vec(vec![0.0f32; d], &[d]).unwrap();
        let mut m = Array::from_vec(vec![0.0f32; d], &[d]).unwrap();
        let mut v = Array::from_vec(vec![0.0f32; d], &[d]).unwrap();
        let mut t = Array::scalar(0.0f32);
        let mut b1p = Array::scalar(1.0f32);
        let mut b2p = Array::scalar(1.0f32);
        let mut first = None;
        let mut last = 0.0;
        for _ in 0..300 {
            let out = step
                .call(&[w, m, v, t, b1p, b2p, xa.clone(), ya.clone()])
                .unwrap();
            last = out[6].to_vec::<f32>().unwrap()[0];
            first.get_or_insert(last);
            (w, m, v, t, b1p, b2p) = (
                out[0].clone(),
                out[1].clone(),
                out[2].clone(),
                out[3].clone(),
                out[4].clone(),
                out[5].clone(),
            );
        }
        let first = first.unwrap();
        assert!(
            last < 1e-4 * first.max(1e-3) && last < 1e-3,
            "{}: loss {first} -> {last}",
            dev.name()
        );
        let wv = w.to_vec::<f32>().unwrap();
        for (g, want) in wv.iter().zip(w_star) {
            assert!(
                (g - want).abs() < 2e-2,
                "{}: w {wv:?} vs {w_star:?}",
                dev.name()
            );
        }
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![300.0]);
    }
}

/// The same training step donating the parameters and the optimizer state
/// (`donate_argnums(&[0, 1, 2, 3, 4, 5])`, arguments moved in with `call_donating`): the updated
/// parameters and moments are written into the buffers of the old ones, the call's peak memory
/// is lower, and 25 steps give bit-identical results to the plain step.
#[test]
fn donated_adam_step_is_bit_identical_and_takes_less_memory() {
    let (n, d) = (64, 8);
    let mut rng = Lcg::new(9);
    let x: Vec<f32> = (0..n * d).map(|_| rng.range(-1.0, 1.0) as f32).collect();
    let y: Vec<f32> = (0..n).map(|_| rng.range(-1.0, 1.0) as f32).collect();
    let opt = Adam::new(0.05);
    let body = move |a: &[Tensor]| {
        // a: w, m, v, step, b1^t, b2^t, x, y
        let loss = |p: &[Tensor]| {
            let r = &p[1].matmul(&p[0].reshape(&[-1, 1])).reshape(&[-1]) - &p[2];
            vec![r.square().mean_all()]
        };
        let g = grad(loss).apply(&[a[0].clone(), a[6].clone(), a[7].clone()]);
        let state = AdamState::from_slice(&a[1..6], 1).expect("m, v, step, powers");
        let (p, s) = opt.update(&a[..1], &g, &state);
        let mut out = p;
        out.extend(s.to_vec());
        out
    };
    for dev in common::gpu_devices() {
        let _guard = common::device_guard(&dev);
        let plain = jit(body).on(&dev);
        let donating = jit(body).on(&dev).donate_argnums(&[0, 1, 2, 3, 4, 5]);
        let xa = Array::from_vec(x.clone(), &[n, d])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let ya = Array::from_vec(y.clone(), &[n])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let start = || -> Vec<Array> {
            let w = Array::from_vec((0..d).map(|i| i as f32 * 0.1).collect(), &[d]).unwrap();
            let z = Array::from_vec(vec![0.0f32; d], &[d]).unwrap();
            [
                w,
                z.clone(),
                z,
                Array::scalar(0.0f32),
                Array::scalar(1.0f32),
                Array::scalar(1.0f32),
            ]
            .iter()
            .map(|a| a.to_device(&dev).unwrap())
            .collect()
        };
        let args = |state: Vec<Array>| -> Vec<Array> {
            state.into_iter().chain([xa.clone(), ya.clone()]).collect()
        };
        let mp = plain.memory_analysis(&args(start())).unwrap();
        let md = donating.memory_analysis(&args(start())).unwrap();
        assert!(
            md.peak_bytes < mp.peak_bytes && md.donated.len() >= 3,
            "{}: donating {md} vs plain {mp}",
            dev.name()
        );
        let (mut a, mut b) = (start(), start());
        let before = brigade::counters();
        for _ in 0..25 {
            a = plain.call(&args(a)).unwrap();
            b = donating.call_donating(args(b)).unwrap();
        }
        let work = brigade::counters().since(&before);
        assert_eq!(work.donations_copied, 0, "{}", dev.name());
        assert_eq!(
            work.donations_reused,
            25 * md.donated.len() as u64,
            "{}",
            dev.name()
        );
        for (i, (p, q)) in a.iter().zip(&b).enumerate() {
            let (p, q) = (p.to_vec::<f32>().unwrap(), q.to_vec::<f32>().unwrap());
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&p),
                bits(&q),
                "{}: output {i} {p:?} vs {q:?}",
                dev.name()
            );
        }
    }
}
