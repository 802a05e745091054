//! `while_loop` (JAX's `lax.while_loop`): on every GPU device against the CPU reference and host
//! loops, eagerly and under `jit`, `vmap` and `pmap`, nested with `scan`, with its predicate
//! read back once per iteration, and its typed errors (`grad`, bad predicates and carries,
//! collectives inside it, `Jit::encode`).
//!
//! Oracles: host loops over the same data (integers exact; the float loops halve, which is exact
//! in f32 too), the reference interpreter (which loops on the host, where devices run a
//! scheduled loop whose predicate the executor reads back), and for `vmap` the function traced on
//! one example at a time (`common::batching::check_vmap`), never the batching rule itself.

mod common;

use brigade::{
    Array, Axes, DType, Error, Tensor, counters, fori_loop, grad, jit, numpy as jnp, pmap, psum,
    scan, while_loop,
};
use common::batching::check_vmap;
use common::{Tol, assert_f32s, check_on_all, devices_with, gpu_devices, host, i32s, runtime_with};

/// Collatz steps of each element: `n <- n / 2` (even) or `3n + 1` (odd) until every element is 1,
/// counting each element's own steps. The loop runs until the slowest element is done.
fn collatz(a: &[Tensor]) -> Vec<Tensor> {
    let one = Tensor::scalar(1i32);
    let out = while_loop(
        |c: &[Tensor]| jnp::any(&c[0].ne(&one), Axes::All, false),
        |c: &[Tensor]| {
            let n = &c[0];
            let live = n.ne(&one);
            let even = n.rem(&Tensor::scalar(2i32)).eq(&Tensor::scalar(0i32));
            let next = brigade::select(&even, &n.div(&Tensor::scalar(2i32)), &(n * 3i32 + 1i32));
            vec![
                brigade::select(&live, &next, n),
                &c[1] + &live.cast(DType::I32),
            ]
        },
        &[a[0].clone(), Tensor::zeros(a[0].shape(), DType::I32)],
    );
    vec![out[0].clone(), out[1].clone()]
}

fn collatz_steps(mut n: i64) -> i32 {
    let mut k = 0;
    while n != 1 {
        n = if n % 2 == 0 { n / 2 } else { 3 * n + 1 };
        k += 1;
    }
    k
}

#[test]
fn while_loop_runs_until_its_predicate_fails_on_every_device() {
    let n = vec![6i32, 7, 1, 27, 97, 12, 3, 871];
    let want: Vec<i32> = n.iter().map(|&v| collatz_steps(v as i64)).collect();
    let got = check_on_all(
        collatz,
        &[Array::from_vec(n.clone(), &[8]).unwrap()],
        Tol::EXACT,
    );
    assert_eq!(got[0].to_vec::<i32>().unwrap(), vec![1; 8], "all reach 1");
    assert_eq!(got[1].to_vec::<i32>().unwrap(), want, "steps per element");
    // The predicate is read once per iteration and once more (the false one), per call.
    let iterations = *want.iter().max().unwrap() as u64;
    // The cpu device's executor runs the loop on the host.
    let cpu = runtime_with("cpu:1").devices()[0].clone();
    let on_cpu = jit(collatz)
        .on(&cpu)
        .call(&[Array::from_vec(n.clone(), &[8]).unwrap()])
        .unwrap();
    assert_eq!(host(&on_cpu[1]).to_vec::<i32>().unwrap(), want, "on cpu");
    for dev in gpu_devices() {
        let _g = common::device_guard(&dev);
        let j = jit(collatz).on(&dev);
        let args = [Array::from_vec(n.clone(), &[8]).unwrap()];
        j.call(&args).unwrap();
        let before = counters();
        let out = j.call(&args).unwrap();
        let c = counters().since(&before);
        assert_eq!(
            c.loop_predicate_reads,
            iterations + 1,
            "predicate reads on {}",
            dev.name()
        );
        assert_eq!(c.pipelines_created, 0, "no recompilation on {}", dev.name());
        assert_eq!(host(&out[1]).to_vec::<i32>().unwrap(), want);
    }
}

#[test]
fn a_false_predicate_runs_no_iteration_and_constants_are_closed_over() {
    // Halve x while its largest element is at least `limit` (both from the enclosing function,
    // captured by cond_fun and body_fun); count the halvings. Halving is exact in f32.
    let f = |a: &[Tensor]| {
        let (limit, factor) = (a[1].clone(), a[2].clone());
        while_loop(
            |c: &[Tensor]| c[0].max(Axes::All, false).ge(&limit),
            |c: &[Tensor]| vec![&c[0] * &factor, &c[1] + &Tensor::scalar(1i32)],
            &[a[0].clone(), Tensor::scalar(0i32)],
        )
    };
    let x = vec![10.0f32, 3.0, 700.0, 0.5, -4.0];
    for (limit, want_k) in [(1.0f32, 10), (1000.0, 0), (700.0, 1)] {
        let args = [
            Array::from_vec(x.clone(), &[5]).unwrap(),
            Array::scalar(limit),
            Array::scalar(0.5f32),
        ];
        let got = check_on_all(f, &args, Tol::EXACT);
        let scale = 0.5f32.powi(want_k);
        let want: Vec<f32> = x.iter().map(|v| v * scale).collect();
        assert_f32s(&got[0], &want, Tol::EXACT, &format!("limit {limit}"));
        assert_eq!(
            got[1].to_vec::<i32>().unwrap(),
            vec![want_k],
            "limit {limit}"
        );
    }
    // Eagerly, on concrete tensors.
    let out = while_loop(
        |c: &[Tensor]| c[0].lt(&Tensor::scalar(100i32)),
        |c: &[Tensor]| vec![&c[0] * 3i32],
        &[Tensor::scalar(2i32)],
    );
    assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![162]);
}

#[test]
fn while_loop_nests_with_scan() {
    // A scan over rows; each row runs its own while_loop (Collatz of the row's first element),
    // and the steps are stacked. Then a while_loop whose body runs a fori_loop.
    let f = |a: &[Tensor]| {
        let (_, ys) = scan(
            |c: &[Tensor], x: &[Tensor]| {
                let steps = collatz(&[x[0].clone()])[1].clone();
                (vec![&c[0] + &steps.sum_all()], vec![steps])
            },
            &[Tensor::scalar(0i32)],
            &a[..1],
        );
        let doubled = while_loop(
            |c: &[Tensor]| c[0].lt(&Tensor::scalar(1000i32)),
            |c: &[Tensor]| fori_loop(0, 3, |_, v| vec![&v[0] * 2i32], c),
            &[Tensor::scalar(5i32)],
        );
        vec![ys[0].clone(), doubled[0].clone()]
    };
    let n = vec![6i32, 27, 1, 9, 12, 5];
    let got = check_on_all(
        f,
        &[Array::from_vec(n.clone(), &[3, 2]).unwrap()],
        Tol::EXACT,
    );
    let want: Vec<i32> = n.iter().map(|&v| collatz_steps(v as i64)).collect();
    assert_eq!(got[0].to_vec::<i32>().unwrap(), want);
    // 5 -> 40 -> 320 -> 2560.
    assert_eq!(got[1].to_vec::<i32>().unwrap(), vec![2560]);
}

#[test]
fn while_loop_under_vmap_with_a_per_example_or_a_shared_predicate() {
    // Per example: each row stops at its own iteration (the loop runs for the slowest row and
    // the others keep their carry).
    let per_row = |a: &[Tensor]| collatz(&a[..1]);
    let n = i32s(5 * 3, 31, 1, 60);
    check_vmap(
        "collatz, batched rows",
        per_row,
        &[Some(0)],
        &[Some(0), Some(0)],
        &[Array::from_vec(n.clone(), &[5, 3]).unwrap()],
        Tol::EXACT,
    );
    // A predicate shared by the batch (it reads only an unbatched counter), a batched body.
    let shared = |a: &[Tensor]| {
        let scale = a[0].clone();
        let out = while_loop(
            |c: &[Tensor]| c[1].lt(&a[1]),
            |c: &[Tensor]| vec![&c[0] * &scale + 1.0f32, &c[1] + &Tensor::scalar(1i32)],
            &[Tensor::ones(&[2], DType::F32), Tensor::scalar(0i32)],
        );
        vec![out[0].clone()]
    };
    check_vmap(
        "batched body, shared predicate",
        shared,
        &[Some(0), None],
        &[Some(0)],
        &[
            Array::from_vec(vec![0.5f32, 2.0, -1.0, 1.5], &[4]).unwrap(),
            Array::scalar(4i32),
        ],
        Tol::ARITH,
    );
    // The limit batched: the predicate becomes per example through a batched constant of
    // cond_fun while the carry starts unbatched.
    check_vmap(
        "batched limit",
        shared,
        &[None, Some(0)],
        &[Some(0)],
        &[
            Array::scalar(1.5f32),
            Array::from_vec(vec![0i32, 3, 1, 5], &[4]).unwrap(),
        ],
        Tol::ARITH,
    );
}

#[test]
fn while_loop_inside_pmap_runs_each_devices_own_count() {
    // Each device's shard needs its own number of iterations.
    let devs = devices_with("vulkan:2");
    let n = vec![27i32, 7, 6, 1];
    let got = pmap(collatz)
        .devices(&devs)
        .call(&[Array::from_vec(n.clone(), &[2, 2]).unwrap()])
        .unwrap();
    let want: Vec<i32> = n.iter().map(|&v| collatz_steps(v as i64)).collect();
    assert_eq!(host(&got[1]).to_vec::<i32>().unwrap(), want);
    assert_eq!(host(&got[0]).to_vec::<i32>().unwrap(), vec![1; 4]);
    // A loop over an unmapped argument is the same on every device: it may be returned once
    // (out_axes None); one whose count depends on the mapped argument may not.
    let both = |a: &[Tensor]| {
        let shared = collatz(&a[1..2]);
        let own = collatz(&a[..1]);
        vec![shared[1].clone(), own[1].clone()]
    };
    let args = [
        Array::from_vec(n.clone(), &[2, 2]).unwrap(),
        Array::from_vec(vec![27i32], &[1]).unwrap(),
    ];
    let got = pmap(both)
        .in_axes(&[Some(0), None])
        .out_axes(&[None, Some(0)])
        .devices(&devs)
        .call(&args)
        .unwrap();
    assert_eq!(
        host(&got[0]).to_vec::<i32>().unwrap(),
        vec![collatz_steps(27)]
    );
    assert_eq!(host(&got[1]).to_vec::<i32>().unwrap(), want);
    let e = pmap(both)
        .in_axes(&[Some(0), None])
        .out_axes(&[None, None])
        .devices(&devs)
        .call(&args)
        .unwrap_err();
    assert!(
        matches!(&e, Error::VaryingOutput { output: 1, .. }),
        "{e:?}"
    );
    // A collective inside the loop is refused with a typed error (not a hang).
    let e = pmap(|a: &[Tensor]| {
        while_loop(
            |c: &[Tensor]| psum(&c[0], "i").lt(&Tensor::scalar(100.0f32)),
            |c: &[Tensor]| vec![&c[0] * 2.0f32],
            &a[..1],
        )
    })
    .axis_name("i")
    .devices(&devs)
    .call(&[Array::from_vec(vec![1.0f32, 2.0], &[2]).unwrap()])
    .unwrap_err();
    assert!(matches!(&e, Error::Unsupported { .. }), "{e:?}");
    assert!(e.to_string().contains("while_loop"), "{e}");
}

#[test]
fn carries_that_swap_through_identity_layout_ops_stay_apart() {
    // Each body returns the other carry through an identity transpose (which shares its
    // operand's buffer): the carry copies must not overwrite a value they still read.
    let f = |a: &[Tensor]| {
        let w = while_loop(
            |c: &[Tensor]| c[2].lt(&Tensor::scalar(3i32)),
            |c: &[Tensor]| {
                vec![
                    c[1].transpose(&[0]),
                    c[0].transpose(&[0]),
                    &c[2] + &Tensor::scalar(1i32),
                ]
            },
            &[a[0].clone(), a[1].clone(), Tensor::scalar(0i32)],
        );
        let (s, _) = scan(
            |c: &[Tensor], _x: &[Tensor]| {
                (vec![c[1].transpose(&[0]), c[0].transpose(&[0])], vec![])
            },
            &[a[0].clone(), a[1].clone()],
            &[Tensor::zeros(&[3], DType::F32)],
        );
        vec![w[0].clone(), w[1].clone(), s[0].clone(), s[1].clone()]
    };
    let (x, y) = (vec![1.0f32, 2.0], vec![-3.0f32, 4.0]);
    let args = [
        Array::from_vec(x.clone(), &[2]).unwrap(),
        Array::from_vec(y.clone(), &[2]).unwrap(),
    ];
    let got = check_on_all(f, &args, Tol::EXACT);
    // Three swaps in both loops: the carries end swapped.
    for k in [0, 2] {
        assert_f32s(&got[k], &y, Tol::EXACT, "first carry after three swaps");
        assert_f32s(
            &got[k + 1],
            &x,
            Tol::EXACT,
            "second carry after three swaps",
        );
    }
}

#[test]
fn grad_through_a_while_loop_is_refused_as_in_jax() {
    let f = |a: &[Tensor]| {
        let out = while_loop(
            |c: &[Tensor]| c[0].lt(&Tensor::scalar(10.0f32)),
            |c: &[Tensor]| vec![&c[0] * 2.0f32],
            &a[..1],
        );
        vec![out[0].clone()]
    };
    let e = grad(f).call(&[Array::scalar(1.5f32)]).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Unsupported {
                op: "while_loop",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("fori_loop"), "{e}");
    // A loop that does not depend on the differentiated input is a constant: grad works (x * 12).
    let g = grad(|a: &[Tensor]| {
        let k = while_loop(
            |c: &[Tensor]| c[0].lt(&Tensor::scalar(10.0f32)),
            |c: &[Tensor]| vec![&c[0] * 2.0f32],
            &[Tensor::scalar(1.5f32)],
        );
        vec![&a[0] * &k[0]]
    })
    .call(&[Array::scalar(3.0f32)])
    .unwrap();
    assert_eq!(host(&g[0]).to_vec::<f32>().unwrap(), vec![12.0]);
    // As in JAX, no gradient flows through the predicate's constants, nor through a carry
    // started from stop_gradient: both are fine (d/dx (k(x) + x) = 1, d/dx (k(x) * x) = k).
    let f = |a: &[Tensor]| {
        let k = while_loop(
            |c: &[Tensor]| c[0].lt(&a[0]),
            |c: &[Tensor]| vec![&c[0] * 2.0f32],
            &[Tensor::scalar(1.0f32)],
        );
        let m = while_loop(
            |c: &[Tensor]| c[0].lt(&Tensor::scalar(10.0f32)),
            |c: &[Tensor]| vec![&c[0] * 2.0f32],
            &[brigade::stop_gradient(&a[0])],
        );
        vec![&(&k[0] + &a[0]) + &(&m[0] * &a[0])]
    };
    // x = 3: k = 4 (1 -> 2 -> 4), m = 12 (3 -> 6 -> 12): the gradient is 1 + 12.
    let g = grad(f).call(&[Array::scalar(3.0f32)]).unwrap();
    assert_eq!(host(&g[0]).to_vec::<f32>().unwrap(), vec![13.0]);
}

#[test]
fn bad_predicates_carries_and_encode_are_typed_errors() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]);
    // A predicate that is an array.
    let e = while_loop(
        |c: &[Tensor]| c[0].lt(&Tensor::scalar(3.0f32)),
        |c: &[Tensor]| vec![&c[0] * 2.0f32],
        std::slice::from_ref(&x),
    )[0]
    .to_array()
    .unwrap_err();
    assert!(
        matches!(&e, Error::BadShapeArg { op: "while_loop", shape, .. } if shape == &vec![2]),
        "{e:?}"
    );
    assert!(e.to_string().contains("jnp::any"), "{e}");
    // A predicate that is not bool.
    let e = while_loop(
        |c: &[Tensor]| c[0].sum_all(),
        |c: &[Tensor]| vec![&c[0] * 2.0f32],
        std::slice::from_ref(&x),
    )[0]
    .to_array()
    .unwrap_err();
    assert!(
        matches!(
            &e,
            Error::BadDType {
                op: "while_loop",
                dtype: DType::F32,
                ..
            }
        ),
        "{e:?}"
    );
    // A body that changes the carry's shape.
    let e = while_loop(
        |c: &[Tensor]| c[0].sum_all().lt(&Tensor::scalar(3.0f32)),
        |c: &[Tensor]| vec![c[0].sum_all()],
        std::slice::from_ref(&x),
    )[0]
    .to_array()
    .unwrap_err();
    assert!(
        matches!(
            &e,
            Error::CarryMismatch {
                op: "while_loop",
                ..
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(msg.contains("f32[2]") && msg.contains("f32[]"), "{msg}");
    // debug_print inside the loop.
    let e = while_loop(
        |c: &[Tensor]| c[0].sum_all().lt(&Tensor::scalar(30.0f32)),
        |c: &[Tensor]| {
            brigade::debug_print("x {}", &[&c[0]]);
            vec![&c[0] * 2.0f32]
        },
        std::slice::from_ref(&x),
    )[0]
    .to_array()
    .unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Unsupported {
                op: "while_loop",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("debug_print"), "{e}");
    // Recording into an app's encoder cannot wait for the predicate.
    let dev = common::device_of("vulkan");
    let _g = common::device_guard(&dev);
    let j = jit(|a: &[Tensor]| {
        while_loop(
            |c: &[Tensor]| c[0].lt(&Tensor::scalar(10.0f32)),
            |c: &[Tensor]| vec![&c[0] * 2.0f32],
            &a[..1],
        )
    })
    .on(&dev);
    let (gpu, _) = dev.wgpu().expect("a GPU device");
    let mut enc = gpu.create_command_encoder(&Default::default());
    let e = j.encode(&mut enc, &[Array::scalar(1.0f32)]).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Unsupported {
                op: "Jit::encode",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("while_loop"), "{e}");
}
