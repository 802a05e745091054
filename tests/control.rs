//! Control flow: `cond`, `switch`, `scan`, `fori_loop` — on every GPU device against the CPU
//! reference and host loops, under `vmap`, `grad` and `pmap`, nested, and their typed errors.
//!
//! Oracles never come from the code under test:
//! - values: host loops over the data (f64 arithmetic, compared in f32 tolerance), and the CPU
//!   reference interpreter, which runs only the chosen branch of a cond and iterates a scan
//!   itself, while devices compute every branch and select, and run a scan as a scheduled loop
//!   of kernels and buffer copies;
//! - `vmap`: the function traced unbatched on one example at a time and evaluated by the
//!   reference (`common::batching::check_vmap`), never the batching rules;
//! - `grad`: central differences in f64 of the loss on the reference interpreter ([`check_fd`],
//!   `common::fd`), the f32 gradients on every GPU device within 1e-5 (derived in tests/grad.rs).
//!
//! Tolerances: `Tol::EXACT` where values move unchanged or integers are computed, `Tol::ARITH` /
//! `Tol::TRANS` for short float chains, `Tol::REDUCE` for sums and for loops that accumulate
//! rounding over their iterations (host values are computed in f64).

mod common;

use brigade::{
    Array, DType, Error, ScanOptions, Tensor, cond, counters, fori_loop, grad, jit, pmap, psum,
    scan, scan_with, switch,
};
use common::batching::check_vmap;
use common::fd::{assert_fd, central_diff};
use common::{
    Tol, assert_close, assert_f32s, check_on_all, devices_with, f32s, gpu_devices, host, run_on,
};

fn arr(v: Vec<f32>, shape: &[usize]) -> Array {
    Array::from_vec(v, shape).unwrap()
}

fn vals(a: &Array) -> Vec<f32> {
    host(a).to_vec::<f32>().unwrap()
}

fn s(x: f32) -> Tensor {
    Tensor::scalar(x)
}

// ---- finite differences ---------------------------------------------------------------------------

/// `grad(loss)` w.r.t. `argnums` on every GPU device against f64 central differences of the same
/// loss on the reference interpreter (`common::fd`; tolerance `fd::FD`, derived in tests/grad.rs).
fn check_fd(
    name: &str,
    loss: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
    args: &[Array],
    argnums: &[usize],
) {
    let fds: Vec<Vec<f64>> = argnums
        .iter()
        .map(|&k| central_diff(loss, args, k))
        .collect();
    for dev in gpu_devices() {
        let g = grad(loss)
            .argnums(argnums)
            .on(&dev)
            .call(args)
            .unwrap_or_else(|e| panic!("{name} on {}: grad failed: {e}", dev.name()));
        for ((gk, &k), fd) in g.iter().zip(argnums).zip(&fds) {
            assert!(
                fd.iter().any(|v| v.abs() > 1e-2),
                "{name}: finite differences w.r.t. argument {k} are ~0: the check would be vacuous"
            );
            assert_fd(
                &host(gk),
                fd,
                &format!(
                    "{name} on {}: d/d arg {k} vs f64 central differences",
                    dev.name()
                ),
            );
        }
    }
}

/// `sum(y * r)` with fixed pseudo-random weights: every element of `y` matters.
fn weighted_sum(y: &Tensor, seed: u64) -> Tensor {
    let r = Tensor::from_vec(f32s(y.size(), seed, -1.0, 1.0), y.shape());
    (y * &r).sum_all()
}

// ---- cond / switch --------------------------------------------------------------------------------

/// `cond(sum(x) > t, [2x + 1, sum x], [exp(x) - x, max x])`: two outputs of different shapes.
fn two_way(a: &[Tensor]) -> Vec<Tensor> {
    let pred = a[0].sum_all().gt(&a[1]);
    cond(
        &pred,
        |x| vec![&x[0] * 2.0 + 1.0, x[0].sum_all()],
        |x| vec![&x[0].exp() - &x[0], x[0].max(brigade::Axes::All, false)],
        &a[..1],
    )
}

#[test]
fn cond_takes_the_branch_its_predicate_picks_on_every_device() {
    let x: Vec<f32> = f32s(12, 1, -1.0, 1.0);
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    for (t, taken) in [(sum as f32 - 0.5, true), (sum as f32 + 0.5, false)] {
        let args = [arr(x.clone(), &[3, 4]), Array::scalar(t)];
        let want = check_on_all(two_way, &args, Tol::TRANS);
        // The host's own expectation of the branch taken.
        let (y0, y1): (Vec<f32>, f32) = if taken {
            (x.iter().map(|v| 2.0 * v + 1.0).collect(), sum as f32)
        } else {
            (
                x.iter()
                    .map(|&v| ((v as f64).exp() - v as f64) as f32)
                    .collect(),
                x.iter().copied().fold(f32::MIN, f32::max),
            )
        };
        assert_f32s(
            &want[0],
            &y0,
            Tol::TRANS,
            &format!("branch taken = {taken}"),
        );
        assert_f32s(
            &want[1],
            &[y1],
            Tol::REDUCE,
            &format!("branch taken = {taken}"),
        );
    }
}

#[test]
fn cond_runs_eagerly_on_concrete_values() {
    let x = Tensor::from_vec(vec![0.25f32, -0.5, 1.5], &[3]);
    let pred = x.sum_all().gt(&s(1.0));
    let y = cond(&pred, |a| vec![&a[0] * 10.0], |a| vec![a[0].neg()], &[x]);
    assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![2.5, -5.0, 15.0]);
}

#[test]
fn cond_branches_close_over_values_of_the_enclosing_function() {
    // Branch 1 uses `w` (not an operand) and a captured constant array; branch 0 uses `b`.
    let table: Vec<f32> = f32s(4, 3, -1.0, 1.0);
    let f = {
        let table = table.clone();
        move |a: &[Tensor]| {
            let (x, w, b) = (&a[0], &a[1], &a[2]);
            let c = Tensor::from(Array::from_vec(table.clone(), &[4]).unwrap());
            let pred = w.sum_all().gt(&s(0.0));
            cond(
                &pred,
                |o| vec![&(&o[0] * w) + &c],
                |o| vec![&o[0] - b],
                std::slice::from_ref(x),
            )
        }
    };
    for sign in [1.0f32, -1.0] {
        let x = f32s(4, 4, -1.0, 1.0);
        let w: Vec<f32> = f32s(4, 5, 0.1, 1.0).iter().map(|v| v * sign).collect();
        let b = f32s(4, 6, -1.0, 1.0);
        let args = [
            arr(x.clone(), &[4]),
            arr(w.clone(), &[4]),
            arr(b.clone(), &[4]),
        ];
        let got = check_on_all(&f, &args, Tol::ARITH);
        let want: Vec<f32> = (0..4)
            .map(|i| {
                if sign > 0.0 {
                    x[i] * w[i] + table[i]
                } else {
                    x[i] - b[i]
                }
            })
            .collect();
        assert_f32s(&got[0], &want, Tol::ARITH, &format!("w of sign {sign}"));
    }
}

#[test]
fn switch_picks_by_index_and_clamps_like_jax() {
    let f = |a: &[Tensor]| {
        let b0 = |o: &[Tensor]| vec![&o[0] + 1.0];
        let b1 = |o: &[Tensor]| vec![&o[0] * &o[0]];
        let b2 = |o: &[Tensor]| vec![o[0].neg() * 3.0];
        switch(&a[1], &[&b0, &b1, &b2], &a[..1])
    };
    let x = f32s(6, 7, -2.0, 2.0);
    for (i, branch) in [(-3, 0usize), (0, 0), (1, 1), (2, 2), (9, 2)] {
        let args = [arr(x.clone(), &[2, 3]), Array::scalar(i)];
        let got = check_on_all(f, &args, Tol::ARITH);
        let want: Vec<f32> = x
            .iter()
            .map(|&v| match branch {
                0 => v + 1.0,
                1 => v * v,
                _ => -v * 3.0,
            })
            .collect();
        assert_f32s(&got[0], &want, Tol::ARITH, &format!("index {i}"));
    }
}

/// `lax.switch` converts its index to i32 first (JAX 0.10.2): a u32 index from 2^31 on wraps to a
/// negative one and takes branch 0, and a bool index is 0 or 1 whatever the number of branches
/// (the devices used to take the last branch for `true`, the reference branch 1). Scalar indices,
/// and a batched index under `vmap`: `jax.vmap(lambda i, x: lax.switch(i, [x+1, x*10, x-5], x))`
/// of i = [0, 2, 7, 2^31, 2^32-1] and x = [1, 2, 3, 4, 5] is [2, -3, -2, 5, 6].
#[test]
fn switch_converts_u32_and_bool_indices_to_i32_like_jax() {
    let f = |a: &[Tensor]| {
        let b0 = |o: &[Tensor]| vec![&o[0] + 1.0];
        let b1 = |o: &[Tensor]| vec![&o[0] * 10.0];
        let b2 = |o: &[Tensor]| vec![&o[0] - 5.0];
        switch(&a[1], &[&b0, &b1, &b2], &a[..1])
    };
    let x = || arr(vec![2.0], &[1]);
    let cases = [
        (Array::scalar(1u32 << 31), 3.0),
        (Array::scalar(u32::MAX), 3.0),
        (Array::scalar(2u32), -3.0),
        (Array::scalar(true), 20.0),
        (Array::scalar(false), 3.0),
    ];
    for (i, want) in cases {
        let what = format!("index {i:?}");
        let got = check_on_all(f, &[x(), i], Tol::EXACT);
        assert_f32s(&got[0], &[want], Tol::EXACT, &what);
    }
    let idx = Array::from_vec(vec![0u32, 2, 7, 1 << 31, u32::MAX], &[5]).unwrap();
    let xs = arr(vec![1.0, 2.0, 3.0, 4.0, 5.0], &[5]);
    let batched = |a: &[Tensor]| brigade::vmap(f).apply(&[a[0].clone(), a[1].clone()]);
    let got = check_on_all(batched, &[xs, idx], Tol::EXACT);
    assert_f32s(
        &got[0],
        &[2.0, -3.0, -2.0, 5.0, 6.0],
        Tol::EXACT,
        "vmap over the index",
    );
}

/// `lax.cond` takes an integer predicate as `pred != 0` (JAX 0.10.2: `lax.cond(jnp.int32(3), ..)`
/// takes the true branch, `jnp.uint32(0)` the false one), also per example under `vmap`.
#[test]
fn cond_takes_an_integer_predicate_as_nonzero_like_jax() {
    let f = |a: &[Tensor]| cond(&a[1], |o| vec![&o[0] * 10.0], |o| vec![o[0].neg()], &a[..1]);
    let x = || arr(vec![2.0, -1.5], &[2]);
    for (p, want) in [
        (Array::scalar(3i32), [20.0, -15.0]),
        (Array::scalar(-1i32), [20.0, -15.0]),
        (Array::scalar(0i32), [-2.0, 1.5]),
        (Array::scalar(0u32), [-2.0, 1.5]),
        (Array::scalar(u32::MAX), [20.0, -15.0]),
    ] {
        let got = check_on_all(f, &[x(), p.clone()], Tol::EXACT);
        assert_f32s(&got[0], &want, Tol::EXACT, &format!("predicate {p:?}"));
    }
    let preds = Array::from_vec(vec![0i32, 7], &[2]).unwrap();
    let batched = |a: &[Tensor]| brigade::vmap(f).apply(&[a[0].clone(), a[1].clone()]);
    let got = check_on_all(batched, &[x(), preds], Tol::EXACT);
    assert_f32s(
        &got[0],
        &[-2.0, -15.0],
        Tol::EXACT,
        "vmap over the predicate",
    );
}

#[test]
fn cond_under_vmap_with_a_shared_or_a_per_example_predicate() {
    let per_example = |a: &[Tensor]| {
        let pred = a[0].sum_all().gt(&s(0.0));
        cond(
            &pred,
            |o| vec![o[0].tanh() * &o[1], o[0].sum_all()],
            |o| vec![&o[0] - &o[1], o[1].sum_all()],
            &a[..2],
        )
    };
    // Per-example predicate: each example takes its own branch (both kinds present).
    let x = arr(f32s(6 * 4, 8, -1.0, 1.0), &[6, 4]);
    let preds: Vec<bool> = vals(&x)
        .chunks(4)
        .map(|r| r.iter().map(|&v| v as f64).sum::<f64>() > 0.0)
        .collect();
    assert!(
        preds.contains(&true) && preds.contains(&false),
        "both branches must occur: {preds:?}"
    );
    let w = arr(f32s(4, 9, -1.0, 1.0), &[4]);
    check_vmap(
        "cond, batched predicate",
        per_example,
        &[Some(0), None],
        &[Some(0)],
        &[x.clone(), w.clone()],
        Tol::TRANS,
    );
    // Shared predicate (from an unbatched argument), batched operands.
    let shared = |a: &[Tensor]| {
        let pred = a[2].gt(&s(0.0));
        cond(
            &pred,
            |o| vec![&o[0] * &o[1]],
            |o| vec![&o[0] + &o[1]],
            &a[..2],
        )
    };
    for t in [1.0f32, -1.0] {
        check_vmap(
            "cond, shared predicate",
            shared,
            &[Some(0), None, None],
            &[Some(0)],
            &[x.clone(), w.clone(), Array::scalar(t)],
            Tol::ARITH,
        );
    }
}

#[test]
fn cond_gradients_match_finite_differences_on_both_branches() {
    let loss = |a: &[Tensor]| {
        let pred = a[0].sum_all().gt(&a[2]);
        let out = cond(
            &pred,
            |o| vec![(&o[0] * &o[1]).tanh()],
            |o| vec![o[0].sin() + &o[1] * &o[1]],
            &a[..2],
        );
        vec![weighted_sum(&out[0], 11)]
    };
    let x = f32s(6, 12, -1.0, 1.0);
    let sum: f32 = x.iter().sum();
    for t in [sum - 1.0, sum + 1.0] {
        let args = [
            arr(x.clone(), &[2, 3]),
            arr(f32s(6, 13, -1.0, 1.0), &[2, 3]),
            Array::scalar(t),
        ];
        check_fd(&format!("cond with threshold {t}"), &loss, &args, &[0, 1]);
    }
}

#[test]
fn the_untaken_branch_leaks_no_nan_into_the_gradient() {
    // cond(x > 0, sqrt x, x^2) at x = -4: the forward value is 16 and d/dx = 2x = -8. On devices
    // both branches run, and sqrt(-4) is NaN; the cond VJP must not let it in (a `where_` of the
    // two would: its gradient multiplies the NaN by zero).
    let f = |a: &[Tensor]| {
        let x = &a[0];
        let out = cond(
            &x.gt(&s(0.0)),
            |o| vec![o[0].sqrt()],
            |o| vec![&o[0] * &o[0]],
            &a[..1],
        );
        vec![out[0].clone()]
    };
    for dev in gpu_devices() {
        let g = brigade::value_and_grad(f)
            .on(&dev)
            .call(&[Array::scalar(-4.0f32)])
            .unwrap();
        assert_eq!(vals(&g[0]), vec![16.0], "value on {}", dev.name());
        assert_eq!(vals(&g[1]), vec![-8.0], "gradient on {}", dev.name());
    }
    // The same with where_: the NaN does leak (the reason cond has its own VJP).
    let leaky = |a: &[Tensor]| {
        let x = &a[0];
        vec![x.gt(&s(0.0)).where_(&x.sqrt(), &(x * x))]
    };
    let g = grad(leaky)
        .on(&gpu_devices()[0])
        .call(&[Array::scalar(-4.0f32)])
        .unwrap();
    assert!(
        vals(&g[0])[0].is_nan(),
        "where_ gradient at -4: {:?}",
        vals(&g[0])
    );
}

/// `grad(sum(vmap(f)))` on every GPU device (checked against the reference interpreter by
/// `check_on_all`) and against gradients derived by hand. `argnums` are the arguments
/// differentiated; `in_axes` the vmap's. The forward values of `vmap(f)` are, bit for bit on
/// every GPU device, those of `selects`: the branches applied to the whole batch and selected
/// per example (what the batching rule computes, the gradient stop aside).
#[allow(clippy::too_many_arguments)]
fn check_vmapped_grad(
    name: &str,
    f: fn(&[Tensor]) -> Vec<Tensor>,
    selects: fn(&[Tensor]) -> Vec<Tensor>,
    in_axes: &[Option<usize>],
    args: &[Array],
    argnums: &[usize],
    want_value: &[f32],
    want_grads: &[&[f32]],
) {
    for dev in gpu_devices() {
        let axes = in_axes.to_vec();
        let got = run_on(
            &dev,
            move |a: &[Tensor]| brigade::vmap(f).in_axes(&axes).apply(a),
            args,
        );
        let want = run_on(&dev, selects, args);
        let bits = |h: &brigade::HostArray| -> Vec<u32> {
            h.to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect()
        };
        assert_eq!(
            bits(&got[0]),
            bits(&want[0]),
            "{name}: forward bits on {}",
            dev.name()
        );
    }
    let in_axes = in_axes.to_vec();
    let argnums = argnums.to_vec();
    let loss = move |a: &[Tensor]| {
        let y = brigade::vmap(f).in_axes(&in_axes).apply(a);
        vec![y[0].sum_all(), y[0].clone()]
    };
    let got = check_on_all(
        |a: &[Tensor]| {
            brigade::value_and_grad(&loss)
                .argnums(&argnums)
                .has_aux(true)
                .apply(a)
        },
        args,
        Tol::TRANS,
    );
    // [sum, grads..., per-example values]
    let n = want_grads.len();
    assert_f32s(
        &got[n + 1],
        want_value,
        Tol::TRANS,
        &format!("{name}: values"),
    );
    for (k, want) in want_grads.iter().enumerate() {
        assert_f32s(
            &got[1 + k],
            want,
            Tol::TRANS,
            &format!("{name}: gradient {k}"),
        );
    }
}

/// `cond(x > 0, log x, x * 0 - 7)`: the repro of the untaken branch's NaN under `vmap`.
fn log_or_minus_seven(t: &[Tensor]) -> Vec<Tensor> {
    cond(
        &t[0].gt(&s(0.0)),
        |x| vec![x[0].log()],
        |x| vec![&(&x[0] * 0.0) - 7.0],
        &t[..1],
    )
}

/// `switch(i, [sqrt x, log x, x^2 + f32(k)], (x, k = i))`: an integer operand rides along.
fn sqrt_log_square(t: &[Tensor]) -> Vec<Tensor> {
    switch(
        &t[1],
        &[
            &|o: &[Tensor]| vec![o[0].sqrt()],
            &|o: &[Tensor]| vec![o[0].log()],
            &|o: &[Tensor]| vec![&(&o[0] * &o[0]) + &o[1].cast(DType::F32)],
        ],
        &t[..2],
    )
}

/// `cond(x > 0, log(x) * w, w^2 - x)` with two float operands.
fn log_times_w_or_w2_minus_x(t: &[Tensor]) -> Vec<Tensor> {
    cond(
        &t[0].gt(&s(0.0)),
        |o| vec![&o[0].log() * &o[1]],
        |o| vec![&(&o[1] * &o[1]) - &o[0]],
        &t[..2],
    )
}

/// [`log_or_minus_seven`] on a batch, as selects of its branches.
fn log_or_minus_seven_selects(t: &[Tensor]) -> Vec<Tensor> {
    let x = &t[0];
    vec![brigade::select(
        &x.gt(&s(0.0)),
        &x.log(),
        &(&(x * 0.0) - 7.0),
    )]
}

/// [`sqrt_log_square`] on a batch, as selects of its branches (the index clamped).
fn sqrt_log_square_selects(t: &[Tensor]) -> Vec<Tensor> {
    let (x, i) = (&t[0], &t[1]);
    let last = &(x * x) + &i.cast(DType::F32);
    let rest = brigade::select(&i.eq(&Tensor::scalar(1i32)), &x.log(), &last);
    vec![brigade::select(
        &i.le(&Tensor::scalar(0i32)),
        &x.sqrt(),
        &rest,
    )]
}

/// [`log_times_w_or_w2_minus_x`] on a batch, as selects of its branches.
fn log_times_w_or_w2_minus_x_selects(t: &[Tensor]) -> Vec<Tensor> {
    let (x, w) = (&t[0], &t[1]);
    let w = w.broadcast_in_dim(x.shape(), &(0..w.ndim()).collect::<Vec<_>>());
    vec![brigade::select(
        &x.gt(&s(0.0)),
        &(&x.log() * &w),
        &(&(&w * &w) - x),
    )]
}

#[test]
fn a_per_example_predicate_under_vmap_leaks_no_nan_into_the_gradient() {
    // Under vmap with a per-example predicate every branch runs on the whole batch and the
    // results are selected; as in JAX (issue #1052), each branch sees its operands with the
    // gradient stopped in the examples that do not take it, so the cotangent that the output
    // select hands an untaken branch (zero) never meets that branch's infinities.
    // Values confirmed with JAX 0.10.2 (JAX_PLATFORMS=cpu), e.g. for the first case
    //   jax.grad(lambda xs: jnp.sum(jax.vmap(lambda x: lax.cond(x > 0., jnp.log,
    //       lambda x: x * 0. - 7., x))(xs)))(jnp.array([0., -1., 2.]))  ->  [0, 0, 0.5].

    // 1. cond(x > 0, log x, x*0 - 7) at x = [0, -1, 2]: examples 0 and 1 take `x*0 - 7`
    //    (value -7, d/dx 0), example 2 takes log (value ln 2, d/dx 1/2 = 0.5). Without the stop,
    //    log's VJP at x = 0 turns the zero cotangent into 0/0 = NaN: [NaN, 0, 0.5].
    check_vmapped_grad(
        "cond(x > 0, log x, x*0 - 7)",
        log_or_minus_seven,
        log_or_minus_seven_selects,
        &[Some(0)],
        &[arr(vec![0.0, -1.0, 2.0], &[3])],
        &[0],
        &[-7.0, -7.0, std::f32::consts::LN_2],
        &[&[0.0, 0.0, 0.5]],
    );

    // 2. switch(i, [sqrt x, log x, x^2 + k]) with a batched index i = [0, 2, 7, 1, -2] (clamped
    //    to [0, 2, 2, 1, 0]) at x = [4, 0, -1, 2, 9], k = i (an i32 operand):
    //    example 0: sqrt 4 = 2,         d/dx 1/(2 sqrt 4) = 0.25
    //    example 1: 0^2 + 2 = 2,        d/dx 2x = 0      (untaken: sqrt' = 1/0 = inf, log' = 1/0)
    //    example 2: (-1)^2 + 7 = 8,     d/dx 2x = -2     (untaken: sqrt(-1) = NaN)
    //    example 3: ln 2,               d/dx 1/2 = 0.5
    //    example 4: sqrt 9 = 3,         d/dx 1/(2*3) = 1/6
    let idx = Array::from_vec(vec![0i32, 2, 7, 1, -2], &[5]).unwrap();
    check_vmapped_grad(
        "switch(i, [sqrt x, log x, x^2 + k])",
        sqrt_log_square,
        sqrt_log_square_selects,
        &[Some(0), Some(0)],
        &[arr(vec![4.0, 0.0, -1.0, 2.0, 9.0], &[5]), idx],
        &[0],
        &[2.0, 2.0, 8.0, std::f32::consts::LN_2, 3.0],
        &[&[0.25, 0.0, -2.0, 0.5, 1.0 / 6.0]],
    );

    // 3. Two operands, cond(x > 0, log(x) * w, w^2 - x) at x = [0, 2, -1, 3], w = 1.5:
    //    example 0: false: 2.25 - 0 = 2.25, d/dx -1, d/dw 2w = 3  (untaken: log' 0/0, ln 0 * 0)
    //    example 1: true: 1.5 ln 2,         d/dx w/x = 0.75, d/dw ln 2
    //    example 2: false: 2.25 + 1 = 3.25, d/dx -1, d/dw 3       (untaken: ln(-1) = NaN)
    //    example 3: true: 1.5 ln 3,         d/dx 0.5, d/dw ln 3
    //    With w shared (in_axes None) its gradient sums the examples: 6 + ln 6; batched, it is
    //    the per-example column.
    let x = arr(vec![0.0, 2.0, -1.0, 3.0], &[4]);
    let (ln2, ln3) = (2f32.ln(), 3f32.ln());
    let values = [2.25, 1.5 * ln2, 3.25, 1.5 * ln3];
    let dx = [-1.0, 0.75, -1.0, 0.5];
    check_vmapped_grad(
        "cond(x > 0, log(x) w, w^2 - x), w shared",
        log_times_w_or_w2_minus_x,
        log_times_w_or_w2_minus_x_selects,
        &[Some(0), None],
        &[x.clone(), Array::scalar(1.5f32)],
        &[0, 1],
        &values,
        &[&dx, &[6.0 + 6f32.ln()]],
    );
    check_vmapped_grad(
        "cond(x > 0, log(x) w, w^2 - x), w per example",
        log_times_w_or_w2_minus_x,
        log_times_w_or_w2_minus_x_selects,
        &[Some(0), Some(0)],
        &[x, arr(vec![1.5; 4], &[4])],
        &[0, 1],
        &values,
        &[&dx, &[3.0, ln2, 3.0, ln3]],
    );
}

#[test]
fn cond_inside_pmap_with_collectives_in_a_branch() {
    // Devices whose shard sums above 0 take psum(x); the others 2x. Every device computes both
    // branches (so all join the psum), then keeps its own.
    let f = |a: &[Tensor]| {
        let pred = a[0].sum_all().gt(&s(0.0));
        cond(
            &pred,
            |o| vec![psum(&o[0], "i")],
            |o| vec![&o[0] * 2.0],
            &a[..1],
        )
    };
    let x = f32s(4 * 3, 21, -1.0, 1.0);
    let rows: Vec<&[f32]> = x.chunks(3).collect();
    let total: Vec<f64> = (0..3)
        .map(|j| rows.iter().map(|r| r[j] as f64).sum())
        .collect();
    let want: Vec<f32> = rows
        .iter()
        .flat_map(|r| {
            let up = r.iter().map(|&v| v as f64).sum::<f64>() > 0.0;
            let total = &total;
            (0..3).map(move |j| if up { total[j] as f32 } else { 2.0 * r[j] })
        })
        .collect();
    assert!(
        rows.iter().any(|r| r.iter().sum::<f32>() > 0.0)
            && rows.iter().any(|r| r.iter().sum::<f32>() <= 0.0),
        "both branches must occur"
    );
    for layout in ["vulkan:4", "cpu:4"] {
        let devs = devices_with(layout);
        let got = pmap(f)
            .axis_name("i")
            .devices(&devs)
            .call(&[arr(x.clone(), &[4, 3])])
            .unwrap();
        assert_f32s(
            &host(&got[0]),
            &want,
            Tol::REDUCE,
            &format!("pmap on {layout}"),
        );
    }
    // The single-device emulation (vmap with a per-example predicate: select) agrees.
    let em = pmap(f)
        .axis_name("i")
        .emulate(&gpu_devices()[0], &[arr(x.clone(), &[4, 3])])
        .unwrap();
    assert_f32s(&host(&em[0]), &want, Tol::REDUCE, "emulated on one device");
}

// ---- scan / fori_loop ------------------------------------------------------------------------------

/// A scan with two carries of different dtypes, two xs and two ys:
/// `(h, n), (x, k) -> (h + x * k, n + k), ys = (h * 2, n)` over xs f32[L, 3], i32[L].
fn two_carry_scan(a: &[Tensor]) -> Vec<Tensor> {
    let (carry, ys) = scan(
        |c: &[Tensor], x: &[Tensor]| {
            let k = x[1].cast(DType::F32);
            let h = &c[0] + &(&x[0] * &k);
            let n = &c[1] + &x[1];
            (vec![h, n], vec![&c[0] * 2.0, c[1].clone()])
        },
        &[a[0].clone(), Tensor::scalar(5i32)],
        &a[1..3],
    );
    carry.into_iter().chain(ys).collect()
}

#[test]
fn scan_threads_its_carry_and_stacks_its_outputs_on_every_device() {
    let len = 7;
    let h0 = f32s(3, 31, -1.0, 1.0);
    let xs = f32s(len * 3, 32, -1.0, 1.0);
    let ks: Vec<i32> = (0..len as i32).map(|i| (i * 5) % 7 - 3).collect();
    let args = [
        arr(h0.clone(), &[3]),
        arr(xs.clone(), &[len, 3]),
        Array::from_vec(ks.clone(), &[len]).unwrap(),
    ];
    let got = check_on_all(two_carry_scan, &args, Tol::ARITH);
    // Host loop.
    let mut h: Vec<f64> = h0.iter().map(|&v| v as f64).collect();
    let mut n = 5i32;
    let (mut ys0, mut ys1) = (Vec::new(), Vec::new());
    for i in 0..len {
        ys0.extend(h.iter().map(|v| (2.0 * v) as f32));
        ys1.push(n);
        for j in 0..3 {
            h[j] += xs[i * 3 + j] as f64 * ks[i] as f64;
        }
        n += ks[i];
    }
    let hf: Vec<f32> = h.iter().map(|&v| v as f32).collect();
    assert_f32s(&got[0], &hf, Tol::REDUCE, "final h");
    assert_eq!(got[1].to_vec::<i32>().unwrap(), vec![n], "final n");
    assert_f32s(&got[2], &ys0, Tol::REDUCE, "stacked 2h");
    assert_eq!(got[3].to_vec::<i32>().unwrap(), ys1, "stacked n");
    assert_eq!(got[2].shape, vec![len, 3]);
}

#[test]
fn reverse_scan_iterates_from_the_last_slice() {
    // Suffix sums: ys[i] = x[i] + ... + x[L-1].
    let f = |a: &[Tensor]| {
        let (c, ys) = scan_with(
            |c: &[Tensor], x: &[Tensor]| {
                let t = &c[0] + &x[0];
                (vec![t.clone()], vec![t])
            },
            &[Tensor::zeros(&[2], DType::F32)],
            &a[..1],
            ScanOptions {
                length: None,
                reverse: true,
            },
        );
        vec![c[0].clone(), ys[0].clone()]
    };
    let x = f32s(5 * 2, 41, -1.0, 1.0);
    let got = check_on_all(f, &[arr(x.clone(), &[5, 2])], Tol::ARITH);
    let mut want = vec![0f32; 10];
    let mut acc = [0f64; 2];
    for i in (0..5).rev() {
        for j in 0..2 {
            acc[j] += x[i * 2 + j] as f64;
            want[i * 2 + j] = acc[j] as f32;
        }
    }
    assert_f32s(&got[1], &want, Tol::ARITH, "suffix sums");
    assert_f32s(&got[0], &want[..2], Tol::ARITH, "total");
}

#[test]
fn fori_loop_runs_newtons_iteration() {
    // x <- (x + a / x) / 2, six steps from 1: converges to sqrt(a); compared with the same steps
    // on the host, and the loop counter is used too (y <- y + i).
    let f = |a: &[Tensor]| {
        fori_loop(
            0,
            6,
            |i, v| {
                vec![
                    (&v[0] + &(&a[0] / &v[0])) * 0.5,
                    &v[1] + &i.cast(DType::F32),
                ]
            },
            &[
                Tensor::ones(a[0].shape(), DType::F32),
                Tensor::scalar(0.0f32),
            ],
        )
    };
    let a = vec![2.0f32, 9.0, 0.25, 50.0];
    let got = check_on_all(f, &[arr(a.clone(), &[4])], Tol::ARITH);
    let want: Vec<f32> = a
        .iter()
        .map(|&a| {
            let mut x = 1.0f64;
            for _ in 0..6 {
                x = (x + a as f64 / x) / 2.0;
            }
            x as f32
        })
        .collect();
    assert_f32s(&got[0], &want, Tol::ARITH, "newton");
    assert_f32s(&got[1], &[15.0], Tol::EXACT, "sum of the counter 0..6");
    // An empty range returns the initial values.
    let empty = |a: &[Tensor]| fori_loop(3, 3, |_, v| vec![&v[0] * 2.0], &a[..1]);
    let got = check_on_all(empty, &[arr(a.clone(), &[4])], Tol::EXACT);
    assert_f32s(&got[0], &a, Tol::EXACT, "zero iterations");
}

#[test]
fn a_long_scan_runs_as_one_submission_and_compiles_once() {
    // 1000 iterations of x <- x * 0.999 + 0.001 * i (one kernel per iteration after fusion).
    let f = |a: &[Tensor]| {
        fori_loop(
            0,
            1000,
            |i, v| vec![&v[0] * 0.999 + i.cast(DType::F32) * 0.001],
            &a[..1],
        )
    };
    let x = f32s(64, 51, -1.0, 1.0);
    let mut want: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for i in 0..1000 {
        for w in &mut want {
            *w = *w * 0.999f32 as f64 + i as f64 * 0.001f32 as f64;
        }
    }
    let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
    for dev in gpu_devices() {
        let _g = common::device_guard(&dev);
        let j = jit(f).on(&dev);
        let args = [arr(x.clone(), &[64])];
        let first = j.call(&args).unwrap();
        assert_f32s(
            &host(&first[0]),
            &want,
            Tol::REDUCE,
            &format!("on {}", dev.name()),
        );
        let before = counters();
        let again = j.call(&args).unwrap();
        let c = counters().since(&before);
        assert_eq!(
            c.submits,
            1,
            "one submission for 1000 iterations on {}",
            dev.name()
        );
        assert_eq!(c.pipelines_created, 0, "no recompilation on {}", dev.name());
        assert!(
            c.dispatches >= 1000,
            "the body ran per iteration: {} dispatches",
            c.dispatches
        );
        assert_eq!(vals(&again[0]), vals(&first[0]), "same result twice");
    }
}

#[test]
fn control_flow_nests() {
    // A scan whose body holds a cond and an inner fori_loop, inside a cond.
    let f = |a: &[Tensor]| {
        let outer = a[1].gt(&s(0.0));
        cond(
            &outer,
            |o| {
                let (c, ys) = scan(
                    |c: &[Tensor], x: &[Tensor]| {
                        let pick = x[0].sum_all().gt(&s(0.0));
                        let step = cond(
                            &pick,
                            |v| vec![&v[0] + &v[1]],
                            |v| vec![&v[0] - &v[1]],
                            &[c[0].clone(), x[0].clone()],
                        );
                        let twice = fori_loop(0, 2, |_, v| vec![&v[0] * 1.5], &step);
                        (twice.clone(), vec![twice[0].sum_all()])
                    },
                    &[Tensor::zeros(&[3], DType::F32)],
                    &o[..1],
                );
                vec![c[0].clone(), ys[0].clone()]
            },
            |o| vec![o[0].sum(0i64, false), o[0].sum(1i64, false)],
            &a[..1],
        )
    };
    let x = f32s(4 * 3, 61, -1.0, 1.0);
    let args = [arr(x.clone(), &[4, 3]), Array::scalar(1.0f32)];
    let got = check_on_all(f, &args, Tol::REDUCE);
    let mut c = [0f64; 3];
    let mut ys = Vec::new();
    for r in x.chunks(3) {
        let up = r.iter().map(|&v| v as f64).sum::<f64>() > 0.0;
        for j in 0..3 {
            c[j] = if up {
                c[j] + r[j] as f64
            } else {
                c[j] - r[j] as f64
            } * 2.25;
        }
        ys.push(c.iter().sum::<f64>() as f32);
    }
    let cf: Vec<f32> = c.iter().map(|&v| v as f32).collect();
    assert_f32s(&got[0], &cf, Tol::REDUCE, "nested carry");
    assert_f32s(&got[1], &ys, Tol::REDUCE, "nested ys");
}

/// One step of a small recurrent cell: `tanh(W h + x)` for `h`, `x` of shape [3].
fn rnn_step(w: &Tensor, h: &Tensor, x: &Tensor) -> Tensor {
    (w.matmul(&h.reshape(&[3, 1])).reshape(&[3]) + x).tanh()
}

#[test]
fn scan_under_vmap_batches_xs_init_and_a_carry_the_body_makes_batched() {
    let rnn = |a: &[Tensor]| {
        // h <- tanh(W h + x_i); ys = h.
        let w = a[0].clone();
        let (c, ys) = scan(
            |c: &[Tensor], x: &[Tensor]| {
                let h = rnn_step(&w, &c[0], &x[0]);
                (vec![h.clone()], vec![h])
            },
            &a[1..2],
            &a[2..3],
        );
        vec![c[0].clone(), ys[0].clone()]
    };
    let w = arr(f32s(9, 71, -0.8, 0.8), &[3, 3]);
    let h0 = arr(f32s(5 * 3, 72, -1.0, 1.0), &[5, 3]);
    let xs = arr(f32s(5 * 4 * 3, 73, -1.0, 1.0), &[5, 4, 3]);
    // Batched xs and init.
    check_vmap(
        "rnn, batched h0 and xs",
        rnn,
        &[None, Some(0), Some(0)],
        &[Some(0)],
        &[w.clone(), h0.clone(), xs.clone()],
        Tol::REDUCE,
    );
    // Only xs batched: the carry starts shared and becomes batched (a fixed point).
    let h_shared = arr(f32s(3, 74, -1.0, 1.0), &[3]);
    check_vmap(
        "rnn, batched xs only",
        rnn,
        &[None, None, Some(0)],
        &[Some(0)],
        &[w.clone(), h_shared, xs.clone()],
        Tol::REDUCE,
    );
    // Only the weights batched (a closed-over constant of the body).
    let ws = arr(f32s(5 * 9, 75, -0.8, 0.8), &[5, 3, 3]);
    let xs1 = arr(f32s(4 * 3, 76, -1.0, 1.0), &[4, 3]);
    check_vmap(
        "rnn, batched weights",
        rnn,
        &[Some(0), None, None],
        &[Some(0)],
        &[ws, arr(f32s(3, 77, -1.0, 1.0), &[3]), xs1],
        Tol::REDUCE,
    );
}

#[test]
fn scan_gradients_match_finite_differences() {
    let loss = |a: &[Tensor]| {
        let w = a[0].clone();
        let (c, ys) = scan(
            |c: &[Tensor], x: &[Tensor]| {
                let h = rnn_step(&w, &c[0], &x[0]);
                (vec![h.clone()], vec![&h * &x[0]])
            },
            &a[1..2],
            &a[2..3],
        );
        vec![weighted_sum(&ys[0], 81) + c[0].sum_all()]
    };
    let args = [
        arr(f32s(9, 82, -0.8, 0.8), &[3, 3]),
        arr(f32s(3, 83, -1.0, 1.0), &[3]),
        arr(f32s(4 * 3, 84, -1.0, 1.0), &[4, 3]),
    ];
    check_fd("rnn scan", &loss, &args, &[0, 1, 2]);
    // Reverse, with an integer carry beside the float one.
    let rev = |a: &[Tensor]| {
        let (c, ys) = scan_with(
            |c: &[Tensor], x: &[Tensor]| {
                let k = c[1].cast(DType::F32);
                (
                    vec![
                        (&c[0] * &x[0]).sin() + &k * 0.1,
                        &c[1] + &Tensor::scalar(1i32),
                    ],
                    vec![&c[0] * &c[0]],
                )
            },
            &[a[0].clone(), Tensor::scalar(0i32)],
            &a[1..2],
            ScanOptions {
                length: Some(3),
                reverse: true,
            },
        );
        vec![weighted_sum(&ys[0], 85) + c[0].sum_all()]
    };
    let args = [
        arr(f32s(2, 86, 0.5, 1.5), &[2]),
        arr(f32s(3 * 2, 87, 0.5, 1.5), &[3, 2]),
    ];
    check_fd("reverse scan with an int carry", &rev, &args, &[0, 1]);
}

#[test]
fn fori_loop_gradient_and_grad_of_grad() {
    // f(x) = x after 3 steps of x <- x * x * 0.5 + sin(x): d/dx by FD, and d²/dx² of a scalar loop
    // against the finite difference of its grad.
    let loss = |a: &[Tensor]| {
        let out = fori_loop(0, 3, |_, v| vec![&v[0] * &v[0] * 0.5 + v[0].sin()], &a[..1]);
        vec![weighted_sum(&out[0], 91)]
    };
    check_fd(
        "fori_loop",
        &loss,
        &[arr(f32s(4, 92, -0.8, 0.8), &[4])],
        &[0],
    );
    let scalar = |a: &[Tensor]| fori_loop(0, 2, |_, v| vec![v[0].sin() * &v[0]], &a[..1]);
    let d1 = |a: &[Tensor]| grad(scalar).apply(a);
    let dev = gpu_devices()[0].clone();
    let d2 = grad(d1).on(&dev).call(&[Array::scalar(0.7f32)]).unwrap();
    let cpu = devices_with("cpu:1")[0].clone();
    let g1 = |x: f32| vals(&grad(scalar).on(&cpu).call(&[Array::scalar(x)]).unwrap()[0])[0] as f64;
    let fd = ((g1(0.71) - g1(0.69)) / 0.02) as f32;
    // f32 differences of an f32 gradient, step 1e-2: rounding ~1e-5 and truncation ~1e-4 relative.
    let tol = Tol {
        rtol: 2e-3,
        atol: 2e-3,
    };
    assert_f32s(
        &host(&d2[0]),
        &[fd],
        tol,
        "second derivative through fori_loop",
    );
}

#[test]
fn scan_inside_pmap_runs_per_device() {
    let f = |a: &[Tensor]| {
        let (c, _) = scan(
            |c: &[Tensor], x: &[Tensor]| (vec![&c[0] * 0.5 + &x[0]], vec![]),
            &[Tensor::zeros(&[2], DType::F32)],
            &[a[0].clone()],
        );
        vec![c[0].clone()]
    };
    let x = f32s(3 * 4 * 2, 101, -1.0, 1.0);
    let devs = devices_with("vulkan:3");
    let got = pmap(f)
        .devices(&devs)
        .call(&[arr(x.clone(), &[3, 4, 2])])
        .unwrap();
    let mut want = Vec::new();
    for d in x.chunks(8) {
        let mut c = [0f64; 2];
        for r in d.chunks(2) {
            for j in 0..2 {
                c[j] = c[j] * 0.5 + r[j] as f64;
            }
        }
        want.extend(c.iter().map(|&v| v as f32));
    }
    assert_f32s(&host(&got[0]), &want, Tol::ARITH, "per-device scans");
}

#[test]
fn collectives_inside_a_loop_body_under_pmap() {
    // c <- psum(0.5 c + x_i) over the devices, ys = c * axis_index, iterated in reverse: the loop is
    // driven from the host, each iteration a parallel run of the body.
    let f = |a: &[Tensor]| {
        let (c, ys) = scan_with(
            |c: &[Tensor], x: &[Tensor]| {
                let next = psum(&(&c[0] * 0.5 + &x[0]), "i");
                let who = brigade::axis_index("i").cast(DType::F32);
                (vec![next.clone()], vec![&next * &who])
            },
            &[Tensor::zeros(&[2], DType::F32)],
            &[a[0].clone()],
            ScanOptions {
                length: None,
                reverse: true,
            },
        );
        vec![c[0].clone(), ys[0].clone()]
    };
    let (n, len) = (3, 4);
    let x = f32s(n * len * 2, 102, -1.0, 1.0);
    // Host: every device holds the same carry after each psum.
    let mut c = [0f64; 2];
    let mut ys = vec![[0f64; 2]; len];
    for i in (0..len).rev() {
        for j in 0..2 {
            c[j] = (0..n)
                .map(|d| c[j] * 0.5 + x[(d * len + i) * 2 + j] as f64)
                .sum();
        }
        ys[i] = c;
    }
    let want_c: Vec<f32> = (0..n).flat_map(|_| c.iter().map(|&v| v as f32)).collect();
    let want_y: Vec<f32> = (0..n)
        .flat_map(|d| {
            let ys = &ys;
            (0..len).flat_map(move |i| ys[i].iter().map(move |&v| (v * d as f64) as f32))
        })
        .collect();
    for layout in ["vulkan:3", "vulkan:2,gl:1", "cpu:3"] {
        let devs = devices_with(layout);
        let got = pmap(f)
            .axis_name("i")
            .devices(&devs)
            .call(&[arr(x.clone(), &[n, len, 2])])
            .unwrap();
        assert_f32s(
            &host(&got[0]),
            &want_c,
            Tol::REDUCE,
            &format!("carry on {layout}"),
        );
        assert_f32s(
            &host(&got[1]),
            &want_y,
            Tol::REDUCE,
            &format!("ys on {layout}"),
        );
    }
    // On one device (jit), the same loop is a typed error: no parallel axis named "i".
    let e = jit(|a: &[Tensor]| {
        let (c, _) = scan(
            |c: &[Tensor], x: &[Tensor]| (vec![psum(&(&c[0] + &x[0]), "i")], vec![]),
            &[Tensor::zeros(&[2], DType::F32)],
            &[a[0].clone()],
        );
        c
    })
    .call(&[arr(x, &[n * len, 2])])
    .unwrap_err();
    assert!(matches!(e, Error::UnboundAxis { .. }), "{e:?}");
}

#[test]
fn data_parallel_training_loop_inside_pmap() {
    // 15 steps of gradient descent on a linear regression inside fori_loop, each device on its own
    // rows, gradients averaged with pmean in the loop body: the parameters agree on every device
    // and equal full-batch gradient descent computed on the host.
    let f = |a: &[Tensor]| {
        let (x, y) = (a[1].clone(), a[2].clone());
        let loss = move |p: &[Tensor]| vec![(&x.matmul(&p[0]) - &y).square().mean_all()];
        fori_loop(
            0,
            15,
            |_, w| {
                let g = brigade::pmean(&grad(&loss).apply(w)[0], "i");
                vec![&w[0] - &(&g * 0.2)]
            },
            &a[..1],
        )
    };
    let (n, m, k) = (2, 8, 3);
    let xs = f32s(n * m * k, 103, -1.0, 1.0);
    let true_w = [0.5f64, -1.0, 2.0];
    let ys: Vec<f32> = xs
        .chunks(k)
        .map(|r| {
            r.iter()
                .zip(true_w)
                .map(|(a, b)| *a as f64 * b)
                .sum::<f64>() as f32
        })
        .collect();
    let mut w = [0f64; 3];
    for _ in 0..15 {
        let mut g = [0f64; 3];
        for (r, &yv) in xs.chunks(k).zip(&ys) {
            let e: f64 = r.iter().zip(&w).map(|(a, b)| *a as f64 * b).sum::<f64>() - yv as f64;
            for j in 0..k {
                g[j] += 2.0 * e * r[j] as f64 / (n * m) as f64;
            }
        }
        for j in 0..k {
            w[j] -= 0.2 * g[j];
        }
    }
    let want: Vec<f32> = (0..n).flat_map(|_| w.iter().map(|&v| v as f32)).collect();
    let devs = devices_with("vulkan:2");
    let p = pmap(f)
        .axis_name("i")
        .in_axes(&[None, Some(0), Some(0)])
        .devices(&devs);
    let args = [
        arr(vec![0.0; 3], &[3, 1]),
        arr(xs.clone(), &[n, m, k]),
        arr(ys.clone(), &[n, m, 1]),
    ];
    let got = host(&p.call(&args).unwrap()[0]);
    assert_f32s(&got, &want, Tol::REDUCE, "trained weights on both devices");
    let per = got.to_vec::<f32>().unwrap();
    assert_eq!(per[..3], per[3..], "identical parameters on every device");
    let em = p.emulate(&gpu_devices()[0], &args).unwrap();
    assert_f32s(&host(&em[0]), &want, Tol::REDUCE, "emulated on one device");
    // The loop's pmean makes the weights identical on every device: out_axes None returns them
    // once (the loop's result is judged from its body).
    let once = pmap(f)
        .axis_name("i")
        .in_axes(&[None, Some(0), Some(0)])
        .out_axes(&[None])
        .devices(&devs)
        .call(&args)
        .unwrap();
    assert_eq!(once[0].shape(), &[3, 1]);
    assert_f32s(
        &host(&once[0]),
        &want[..3],
        Tol::REDUCE,
        "replicated weights",
    );
    // Without the pmean the weights differ per device: the typed error names the loop's input.
    let g = |a: &[Tensor]| {
        let (x, y) = (a[1].clone(), a[2].clone());
        let loss = move |p: &[Tensor]| vec![(&x.matmul(&p[0]) - &y).square().mean_all()];
        fori_loop(
            0,
            3,
            |_, w| vec![&w[0] - &(&grad(&loss).apply(w)[0] * 0.2)],
            &a[..1],
        )
    };
    let e = pmap(g)
        .axis_name("i")
        .in_axes(&[None, Some(0), Some(0)])
        .out_axes(&[None])
        .devices(&devs)
        .call(&args)
        .unwrap_err();
    assert!(matches!(e, Error::VaryingOutput { .. }), "{e:?}");
}

// ---- errors ---------------------------------------------------------------------------------------

#[test]
fn cond_branches_that_disagree_are_refused() {
    let x = arr(f32s(6, 111, -1.0, 1.0), &[2, 3]);
    let shape = jit(|a: &[Tensor]| {
        cond(
            &a[0].sum_all().gt(&s(0.0)),
            |o| vec![o[0].clone()],
            |o| vec![o[0].sum(0i64, false)],
            &a[..1],
        )
    })
    .call(std::slice::from_ref(&x))
    .unwrap_err();
    assert!(
        matches!(&shape, Error::BranchMismatch { branch: 1, .. }),
        "{shape:?}"
    );
    let msg = shape.to_string();
    assert!(msg.contains("f32[2,3]") && msg.contains("f32[3]"), "{msg}");
    let dtype = jit(|a: &[Tensor]| {
        cond(
            &a[0].sum_all().gt(&s(0.0)),
            |o| vec![o[0].clone()],
            |o| vec![o[0].cast(DType::I32)],
            &a[..1],
        )
    })
    .call(std::slice::from_ref(&x))
    .unwrap_err();
    assert!(matches!(&dtype, Error::BranchMismatch { .. }), "{dtype:?}");
    assert!(dtype.to_string().contains("i32[2,3]"), "{dtype}");
    let count = cond(
        &Tensor::scalar(true),
        |o| vec![o[0].clone(), o[0].clone()],
        |o| vec![o[0].clone()],
        &[Tensor::from(x.clone())],
    );
    let e = count[0].to_array().unwrap_err();
    assert!(matches!(&e, Error::BranchMismatch { .. }), "{e:?}");
}

#[test]
fn cond_needs_a_scalar_bool_predicate() {
    let x = Tensor::from_vec(vec![1.0f32, -1.0], &[2]);
    let e = cond(
        &x.gt(&s(0.0)),
        |o| vec![o[0].clone()],
        |o| vec![o[0].neg()],
        std::slice::from_ref(&x),
    )[0]
    .to_array()
    .unwrap_err();
    assert!(matches!(&e, Error::BadShapeArg { op: "cond", .. }), "{e:?}");
    assert!(e.to_string().contains("select"), "{e}");
    let e = cond(
        &s(1.0),
        |o| vec![o[0].clone()],
        |o| vec![o[0].neg()],
        std::slice::from_ref(&x),
    )[0]
    .to_array()
    .unwrap_err();
    assert!(
        matches!(
            &e,
            Error::BadDType {
                dtype: DType::F32,
                ..
            }
        ),
        "{e:?}"
    );
    let e = switch(&s(1.0), &[&|o: &[Tensor]| vec![o[0].clone()]], &[x])[0]
        .to_array()
        .unwrap_err();
    assert!(matches!(&e, Error::BadDType { .. }), "{e:?}");
}

#[test]
fn a_scan_carry_that_changes_is_refused() {
    let xs = Tensor::from_vec(f32s(6, 121, -1.0, 1.0), &[3, 2]);
    // Shape: the carry grows.
    let (c, _) = scan(
        |c: &[Tensor], x: &[Tensor]| (vec![Tensor::concatenate(&[&c[0], &x[0]], 0)], vec![]),
        &[Tensor::zeros(&[2], DType::F32)],
        std::slice::from_ref(&xs),
    );
    let e = c[0].to_array().unwrap_err();
    assert!(
        matches!(&e, Error::CarryMismatch { op: "scan", .. }),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("(f32[2])") && msg.contains("(f32[4])"),
        "{msg}"
    );
    // Dtype, and the number of carries.
    let (c, _) = scan(
        |c: &[Tensor], _x: &[Tensor]| (vec![c[0].cast(DType::I32)], vec![]),
        &[Tensor::zeros(&[2], DType::F32)],
        std::slice::from_ref(&xs),
    );
    assert!(matches!(
        c[0].to_array().unwrap_err(),
        Error::CarryMismatch { .. }
    ));
    let (c, _) = scan(
        |c: &[Tensor], _x: &[Tensor]| (vec![c[0].clone(), c[0].clone()], vec![]),
        &[Tensor::zeros(&[2], DType::F32)],
        std::slice::from_ref(&xs),
    );
    assert!(matches!(
        c[0].to_array().unwrap_err(),
        Error::CarryMismatch { .. }
    ));
    // fori_loop reports it under its own name.
    let out = fori_loop(
        0,
        3,
        |_, v| vec![v[0].sum_all()],
        &[Tensor::zeros(&[2], DType::F32)],
    );
    assert!(matches!(
        out[0].to_array().unwrap_err(),
        Error::CarryMismatch {
            op: "fori_loop",
            ..
        }
    ));
}

#[test]
fn scan_lengths_must_agree_and_be_known() {
    let a = Tensor::from_vec(f32s(6, 131, -1.0, 1.0), &[3, 2]);
    let b = Tensor::from_vec(f32s(8, 132, -1.0, 1.0), &[4, 2]);
    let body = |c: &[Tensor], x: &[Tensor]| (vec![&c[0] + &x[0]], vec![]);
    let init = [Tensor::zeros(&[2], DType::F32)];
    let (c, _) = scan(body, &init, &[a.clone(), b]);
    let e = c[0].to_array().unwrap_err();
    assert!(
        matches!(&e, Error::BadShapeArg { op: "scan", .. })
            && e.to_string().contains("leading size 4"),
        "{e}"
    );
    let (c, _) = scan_with(
        body,
        &init,
        std::slice::from_ref(&a),
        ScanOptions {
            length: Some(5),
            reverse: false,
        },
    );
    let e = c[0].to_array().unwrap_err();
    assert!(e.to_string().contains("length is 5"), "{e}");
    let (c, _) = scan(
        |c: &[Tensor], _x: &[Tensor]| (vec![c[0].clone()], vec![]),
        &init,
        &[],
    );
    let e = c[0].to_array().unwrap_err();
    assert!(e.to_string().contains("length"), "{e}");
    let (c, _) = scan(body, &init, &[Tensor::scalar(1.0f32)]);
    assert!(c[0].to_array().unwrap_err().to_string().contains("rank 1"));
}

#[test]
fn the_cpu_device_and_the_gpus_agree_on_a_training_loop() {
    // A small regression fitted by 20 steps of gradient descent inside fori_loop (grad inside the
    // loop body): the loss falls, and every device matches the reference.
    let f = |a: &[Tensor]| {
        let (x, y) = (a[1].clone(), a[2].clone());
        let loss = move |p: &[Tensor]| {
            let pred = x.matmul(&p[0]);
            vec![(&pred - &y).square().mean_all()]
        };
        let w = fori_loop(
            0,
            20,
            |_, w| {
                let g = grad(&loss).apply(w);
                vec![&w[0] - &(&g[0] * 0.1)]
            },
            &a[..1],
        );
        let before = loss(&a[..1])[0].clone();
        let after = loss(&w)[0].clone();
        vec![w[0].clone(), before, after]
    };
    let x = arr(f32s(16 * 3, 141, -1.0, 1.0), &[16, 3]);
    let true_w = [0.5f32, -1.0, 2.0];
    let y: Vec<f32> = vals(&x)
        .chunks(3)
        .map(|r| r.iter().zip(true_w).map(|(a, b)| a * b).sum())
        .collect();
    let args = [arr(vec![0.0, 0.0, 0.0], &[3, 1]), x, arr(y, &[16, 1])];
    let got = check_on_all(f, &args, Tol::REDUCE);
    let (before, after) = (
        got[1].to_vec::<f32>().unwrap()[0],
        got[2].to_vec::<f32>().unwrap()[0],
    );
    assert!(after < before * 0.5, "loss {before} -> {after}");
    let cpu = devices_with("cpu:1");
    let on_cpu = run_on(&cpu[0], f, &args);
    assert_close(&on_cpu[0], &got[0], Tol::EXACT, "cpu device = reference");
}
