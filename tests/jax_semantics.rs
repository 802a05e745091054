//! brigade against numbers printed by JAX 0.10.2 (`scripts/jax_semantics_vectors.py`, stored in
//! `tests/data/jax_semantics.rs`) at the edges where libraries disagree: integer division and
//! remainder by zero, Python's `//` and `%`, casts of NaN and out-of-range floats, NaN in
//! max/min/argmax/argmin, `jnp.take`'s modes and `nan_to_num`. Every case runs on the Vulkan and
//! the GL device and on the CPU reference (`check_on_all`), and the reference's answer is compared
//! with JAX's: bit for bit for integers and bools; for floats the same value, NaN for NaN (its
//! sign and payload are not part of any contract), and the same sign of zero where JAX's is part
//! of the op's definition.

mod common;
#[path = "data/jax_semantics.rs"]
mod jax;

use brigade::{Array, DType, HostArray, TakeMode, Tensor, WindowOp, jit};
use common::*;

fn f32s(bits: &[u32]) -> Vec<f32> {
    bits.iter().map(|&b| f32::from_bits(b)).collect()
}
fn arr_f32(bits: &[u32]) -> Array {
    Array::from_vec(f32s(bits), &[bits.len()]).unwrap()
}
fn arr<T: brigade::Element>(v: &[T]) -> Array {
    Array::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

/// `f`'s outputs on the CPU reference (after `check_on_all` compared every GPU device with it
/// within `tol`), on each GPU device and on a `cpu` device, each with its name: for the checks
/// `check_on_all` leaves out, such as the sign of a zero.
fn on_every_device<F>(f: F, args: &[Array], tol: Tol) -> Vec<(String, Vec<HostArray>)>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let mut out = vec![("reference".to_string(), check_on_all(&f, args, tol))];
    let cpu = runtime_with("cpu:1").devices()[0].clone();
    for dev in gpu_devices().into_iter().chain([cpu]) {
        let got = jit(&f)
            .on(&dev)
            .call(args)
            .unwrap_or_else(|e| panic!("{}: {e}", dev.name()));
        out.push((dev.name().to_string(), got.iter().map(host).collect()));
    }
    out
}

/// Float results against JAX's within `ulps` units in the last place of JAX's value (NaN for NaN,
/// infinities equal).
fn assert_f32_near_jax(got: &HostArray, want_bits: &[u32], ulps: f32, what: &str) {
    let got = got.to_vec::<f32>().unwrap();
    let want = f32s(want_bits);
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() || *w == 0.0 {
            g == w
        } else {
            let ulp = f32::from_bits(w.abs().to_bits() + 1) - w.abs();
            (g - w).abs() <= ulps * ulp
        };
        assert!(
            ok,
            "{what}[{k}]: brigade {g:e}, JAX {w:e}\nbrigade {got:?}\nJAX {want:?}"
        );
    }
}

/// Float results against JAX's: NaN where JAX has NaN, else equal values with equal signs.
fn assert_f32_like_jax(got: &HostArray, want_bits: &[u32], what: &str) {
    let got = got.to_vec::<f32>().unwrap();
    let want = f32s(want_bits);
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let same = if w.is_nan() {
            g.is_nan()
        } else {
            g == w && g.is_sign_negative() == w.is_sign_negative()
        };
        assert!(
            same,
            "{what}[{k}]: brigade {g:?}, JAX {w:?}\nbrigade {got:?}\nJAX {want:?}"
        );
    }
}

/// lax.div, lax.rem, jnp.floor_divide and jnp.remainder of `a` by `b` on every device and the
/// reference, against JAX's four answers.
fn check_divisions<T: brigade::Element + PartialEq + std::fmt::Debug>(
    a: &[T],
    b: &[T],
    want: [&[T]; 4],
) {
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].div(&t[1]),
                t[0].rem(&t[1]),
                t[0].floor_divide(&t[1]),
                t[0].remainder(&t[1]),
            ]
        },
        &[arr(a), arr(b)],
        Tol::EXACT,
    );
    let names = ["lax.div", "lax.rem", "jnp.floor_divide", "jnp.remainder"];
    for (k, (w, what)) in want.iter().zip(names).enumerate() {
        assert_eq!(&got[k].to_vec::<T>().unwrap(), w, "{:?} {what}", T::DTYPE);
    }
}

#[test]
fn integer_division_and_remainder_by_zero_are_xlas() {
    check_divisions(
        jax::I32_A,
        jax::I32_B,
        [
            jax::I32_LAX_DIV,
            jax::I32_LAX_REM,
            jax::I32_FLOOR_DIVIDE,
            jax::I32_REMAINDER,
        ],
    );
    check_divisions(
        jax::U32_A,
        jax::U32_B,
        [
            jax::U32_LAX_DIV,
            jax::U32_LAX_REM,
            jax::U32_FLOOR_DIVIDE,
            jax::U32_REMAINDER,
        ],
    );
}

#[test]
fn float_floor_divide_and_remainder_are_jnps() {
    let args = [arr_f32(jax::F32_A), arr_f32(jax::F32_B)];
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].floor_divide(&t[1]),
                t[0].remainder(&t[1]),
                t[0].rem(&t[1]),
            ]
        },
        &args,
        Tol::EXACT,
    );
    assert_f32_like_jax(&got[0], jax::F32_FLOOR_DIVIDE, "jnp.floor_divide");
    assert_f32_like_jax(&got[1], jax::F32_REMAINDER, "jnp.remainder");
    assert_f32_like_jax(&got[2], jax::F32_LAX_REM, "lax.rem");
}

#[test]
fn take_modes_and_indexing_are_jnps() {
    let args = [arr_f32(jax::TAKE_X), arr(jax::TAKE_I)];
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].take_mode(&t[1], 0, TakeMode::Fill),
                t[0].take_mode(&t[1], 0, TakeMode::Clip),
                t[0].take_mode(&t[1], 0, TakeMode::Wrap),
                t[0].index_take(&t[1], 0),
                t[0].take(&t[1], 0),
                t[0].take_mode(&t[1], 0, TakeMode::PromiseInBounds),
            ]
        },
        &args,
        Tol::EXACT,
    );
    assert_f32_like_jax(&got[0], jax::TAKE_FILL, "jnp.take mode=fill");
    assert_f32_like_jax(&got[1], jax::TAKE_CLIP, "jnp.take mode=clip");
    assert_f32_like_jax(&got[2], jax::TAKE_WRAP, "jnp.take mode=wrap");
    assert_f32_like_jax(&got[3], jax::TAKE_GETITEM, "x[idx]");
    // Plain `take` is `jnp.take` (mode "fill"); PromiseInBounds is `x[idx]`.
    assert_f32_like_jax(&got[4], jax::TAKE_FILL, "take = jnp.take");
    assert_f32_like_jax(
        &got[5],
        jax::TAKE_GETITEM,
        "take_mode PromiseInBounds = x[idx]",
    );
}

/// `Tensor::take` is `jnp.take`: `jnp.take(x, [1, 7, 2], axis=1)` on a (4, 6) f32 array gives a
/// NaN column for the index 7 (its default mode, "fill"), on Vulkan, GL and cpu; i32, u32 and
/// bool data fill with JAX's values (`i32::MIN`, `u32::MAX`, `true`), u32 indices fill too, and
/// a filled index gets no gradient.
#[test]
fn take_fills_out_of_range_indices_like_jnp_take() {
    let (rows, cols) = (4usize, 6usize);
    let n = rows * cols;
    let xf: Vec<f32> = (0..n).map(|k| k as f32 * 0.75 - 7.5).collect();
    let xi = i32s(n, 7001, -50, 50);
    let xu = u32s(n, 7002, 0, 1000);
    // Column 5 (where a clamp of 7 would read) holds a false: a clamped bool read would show.
    let xb: Vec<bool> = (0..n).map(|k| k % 4 != 1).collect();
    assert!((0..rows).any(|r| !xb[r * cols + 5]));
    let sh = [rows, cols];
    let args = [
        Array::from_vec(xf.clone(), &sh).unwrap(),
        Array::from_vec(xi.clone(), &sh).unwrap(),
        Array::from_vec(xu.clone(), &sh).unwrap(),
        Array::from_vec(xb.clone(), &sh).unwrap(),
        arr(&[1i32, 7, 2]),
        arr(&[1u32, 7, 2]),
        Array::from_vec(f32s_lin(rows * 3), &[rows, 3]).unwrap(),
    ];
    let f = |t: &[Tensor]| {
        let dx = brigade::grad(|u: &[Tensor]| vec![(&u[0].take(&u[1], 1) * &u[2]).sum_all()])
            .apply(&[t[0].clone(), t[4].clone(), t[6].clone()])
            .remove(0);
        vec![
            t[0].take(&t[4], 1),
            t[1].take(&t[4], 1),
            t[2].take(&t[4], 1),
            t[3].take(&t[4], 1),
            t[0].take(&t[5], 1),
            dx,
        ]
    };
    let cols_taken = [Some(1usize), None, Some(2)];
    // Row-major (4, 3) results: column j of the result is column cols_taken[j] of x, or the fill.
    fn expect<T: Copy>(x: &[T], cols_taken: &[Option<usize>], fill: T) -> Vec<T> {
        (0..4)
            .flat_map(|r| {
                cols_taken
                    .iter()
                    .map(move |c| c.map_or(fill, |c| x[r * 6 + c]))
            })
            .collect()
    }
    let w = f32s_lin(rows * 3);
    let mut dx = vec![0.0f32; n];
    for r in 0..rows {
        for (j, c) in cols_taken.iter().enumerate() {
            if let Some(c) = c {
                dx[r * cols + c] += w[r * 3 + j];
            }
        }
    }
    for (name, got) in on_every_device(f, &args, Tol::EXACT) {
        assert_eq!(got[0].shape, vec![rows, 3], "{name}");
        let g = got[0].to_vec::<f32>().unwrap();
        let want = expect(&xf, &cols_taken, f32::NAN);
        for (k, (g, w)) in g.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{name}: f32 take at {k}: got {g}, want {w}"
            );
        }
        assert!(
            g[1].is_nan() && g[4].is_nan() && g[7].is_nan() && g[10].is_nan(),
            "{name}: the column of index 7 is NaN: {g:?}"
        );
        let gu = got[4].to_vec::<f32>().unwrap();
        assert!(
            gu.iter()
                .zip(&g)
                .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())),
            "{name}: u32 indices: {gu:?}, i32 indices: {g:?}"
        );
        assert_eq!(
            got[1].to_vec::<i32>().unwrap(),
            expect(&xi, &cols_taken, i32::MIN),
            "{name}: i32"
        );
        assert_eq!(
            got[2].to_vec::<u32>().unwrap(),
            expect(&xu, &cols_taken, u32::MAX),
            "{name}: u32"
        );
        assert_eq!(
            got[3].to_vec::<bool>().unwrap(),
            expect(&xb, &cols_taken, true),
            "{name}: bool"
        );
        assert_eq!(
            got[5].to_vec::<f32>().unwrap(),
            dx,
            "{name}: gradient (none for index 7)"
        );
    }
}

/// Half-integers from `0.5 - n / 3` up: distinct, nonzero, of both signs.
fn f32s_lin(n: usize) -> Vec<f32> {
    (0..n).map(|k| k as f32 + 0.5 - n as f32 / 3.0).collect()
}

#[test]
fn casts_of_nan_and_out_of_range_floats_are_jaxs() {
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].cast(DType::I32),
                t[0].cast(DType::U32),
                t[0].cast(DType::Bool),
            ]
        },
        &[arr_f32(jax::CAST_IN)],
        Tol::EXACT,
    );
    assert_eq!(got[0].to_vec::<i32>().unwrap(), jax::CAST_I32, "f32 -> i32");
    assert_eq!(got[1].to_vec::<u32>().unwrap(), jax::CAST_U32, "f32 -> u32");
    assert_eq!(
        got[2].to_vec::<bool>().unwrap(),
        jax::CAST_BOOL,
        "f32 -> bool"
    );
}

#[test]
fn nan_in_reductions_and_arg_reductions_is_jaxs() {
    let m = Array::from_vec(f32s(jax::RED_IN), &[4, 5]).unwrap();
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].max(1i64, false),
                t[0].min(1i64, false),
                t[0].argmax(1, false),
                t[0].argmin(1, false),
            ]
        },
        std::slice::from_ref(&m),
        Tol::EXACT,
    );
    assert_f32_like_jax(&got[0], jax::RED_MAX, "jnp.max");
    assert_f32_like_jax(&got[1], jax::RED_MIN, "jnp.min");
    assert_eq!(
        got[2].to_vec::<i32>().unwrap(),
        jax::RED_ARGMAX,
        "jnp.argmax"
    );
    assert_eq!(
        got[3].to_vec::<i32>().unwrap(),
        jax::RED_ARGMIN,
        "jnp.argmin"
    );
}

#[test]
fn nan_in_maximum_minimum_and_relu_is_jaxs() {
    let args = [arr_f32(jax::PAIR_A), arr_f32(jax::PAIR_B)];
    // JAX orders -0 below +0 in maximum/minimum (and relu(-0.0) is +0.0): the signs of zeros are
    // compared too, on every device.
    let f = |t: &[Tensor]| vec![t[0].maximum(&t[1]), t[0].minimum(&t[1]), t[0].relu()];
    for (name, got) in on_every_device(f, &args, Tol::EXACT) {
        assert_f32_like_jax(&got[0], jax::PAIR_MAXIMUM, &format!("{name}: jnp.maximum"));
        assert_f32_like_jax(&got[1], jax::PAIR_MINIMUM, &format!("{name}: jnp.minimum"));
        assert_f32_like_jax(&got[2], jax::RELU, &format!("{name}: jax.nn.relu"));
    }
}

#[test]
fn nan_to_num_is_jnps() {
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].nan_to_num_default()],
        &[arr_f32(jax::NAN_TO_NUM_IN)],
        Tol::EXACT,
    );
    assert_f32_like_jax(&got[0], jax::NAN_TO_NUM, "jnp.nan_to_num");
}

#[test]
fn signs_of_zero_in_sign_tanh_max_min_and_abs_grad_are_jaxs() {
    let z = [arr_f32(jax::ZERO_IN)];
    let f = |t: &[Tensor]| vec![t[0].sign(), t[0].tanh()];
    for (name, got) in on_every_device(f, &z, Tol::TRANS) {
        assert_f32_like_jax(&got[0], jax::ZERO_SIGN, &format!("{name}: jnp.sign"));
        // tanh(±1e-30) is ±1e-30 exactly, tanh(1.5) and tanh(-2) within the TRANS tolerance.
        let g = got[1].to_vec::<f32>().unwrap();
        let w = f32s(jax::ZERO_TANH);
        for k in [0, 1, 5, 6] {
            assert_eq!(
                g[k].to_bits(),
                w[k].to_bits(),
                "{name}: jnp.tanh[{k}] {g:?} {w:?}"
            );
        }
        assert!(g[2].is_nan(), "{name}: tanh(NaN)");
    }
    let g = |t: &[Tensor]| brigade::grad(|t: &[Tensor]| vec![t[0].abs().sum_all()]).apply(t);
    for (name, got) in on_every_device(g, &z, Tol::EXACT) {
        assert_f32_like_jax(&got[0], jax::ZERO_GRAD_ABS, &format!("{name}: grad of abs"));
    }
    let m = [Array::from_vec(f32s(jax::ZRED_IN), &[4, 3]).unwrap()];
    let f = |t: &[Tensor]| vec![t[0].max(1i64, false), t[0].min(1i64, false)];
    for (name, got) in on_every_device(f, &m, Tol::EXACT) {
        assert_f32_like_jax(&got[0], jax::ZRED_MAX, &format!("{name}: jnp.max"));
        assert_f32_like_jax(&got[1], jax::ZRED_MIN, &format!("{name}: jnp.min"));
    }
}

#[test]
fn integer_to_f32_to_integer_rounds_through_f32_as_jax() {
    // One fused kernel per chain: llvmpipe GL used to fold i32(f32(x)) back to x.
    let f = |t: &[Tensor]| {
        vec![
            t[0].cast(DType::F32).cast(DType::I32),
            t[1].cast(DType::F32).cast(DType::U32),
        ]
    };
    let args = [arr(jax::CHAIN_I32_IN), arr(jax::CHAIN_U32_IN)];
    for (name, got) in on_every_device(f, &args, Tol::EXACT) {
        assert_eq!(
            got[0].to_vec::<i32>().unwrap(),
            jax::CHAIN_I32,
            "{name}: i32 -> f32 -> i32"
        );
        assert_eq!(
            got[1].to_vec::<u32>().unwrap(),
            jax::CHAIN_U32,
            "{name}: u32 -> f32 -> u32"
        );
    }
}

#[test]
fn negative_int_literals_wrap_for_u32_as_jax() {
    use brigade::numpy as jnp;
    let f = |t: &[Tensor]| {
        vec![
            &t[0] + (-1),
            &t[0] * (-1),
            &t[0] - (-1),
            jnp::add(&t[0], -1),
            jnp::add(&t[0], -(1i64 << 31)),
        ]
    };
    let want = [
        jax::ULIT_ADD_M1,
        jax::ULIT_MUL_M1,
        jax::ULIT_SUB_M1,
        jax::ULIT_ADD_M1,
        jax::ULIT_ADD_MIN,
    ];
    for (name, got) in on_every_device(f, &[arr(jax::ULIT_IN)], Tol::EXACT) {
        for (k, w) in want.iter().enumerate() {
            assert_eq!(&got[k].to_vec::<u32>().unwrap(), w, "{name}: output {k}");
        }
    }
    // Outside the range JAX accepts: a typed error, as JAX's OverflowError.
    let x = Tensor::from_vec(vec![1u32, 2], &[2]);
    for bad in [jnp::add(&x, -(1i64 << 31) - 1), jnp::add(&x, 1i64 << 32)] {
        let e = bad.to_vec::<u32>().unwrap_err();
        assert!(matches!(e, brigade::Error::BadDType { .. }), "{e}");
    }
}

#[test]
fn log_softmax_shifts_by_the_max_as_jax() {
    let x = [Array::from_vec(f32s(jax::LSM_IN), &[7, 3]).unwrap()];
    let f = |t: &[Tensor]| vec![t[0].log_softmax(1)];
    for (name, got) in on_every_device(f, &x, Tol::TRANS) {
        assert_f32_near_jax(
            &got[0],
            jax::LSM,
            4.0,
            &format!("{name}: jax.nn.log_softmax"),
        );
    }
}

#[test]
fn log_is_accurate_near_one_as_jax() {
    // JAX's log is within 1 ULP; brigade's (shaders/lib/log.wgsl on the GPU) within 2 of it.
    // Mesa's own log was 537 ULP off at 0.999 and 73 % off at 0.99999994.
    let f = |t: &[Tensor]| vec![t[0].log()];
    for (name, got) in on_every_device(f, &[arr_f32(jax::LOG_IN)], Tol::TRANS) {
        assert_f32_near_jax(&got[0], jax::LOG, 2.0, &format!("{name}: jnp.log"));
    }
}

#[test]
fn bool_max_min_argmax_matmul_maximum_and_minimum_are_jnps() {
    let a = Array::from_vec(jax::BOOL_IN.to_vec(), &[4, 3]).unwrap();
    let b = Array::from_vec(jax::BOOL_RHS.to_vec(), &[3, 2]).unwrap();
    let f = |t: &[Tensor]| {
        vec![
            t[0].max(1i64, false),
            t[0].min(1i64, false),
            t[0].argmax(1, false),
            t[0].argmin(1, false),
            t[0].matmul(&t[1]),
            t[0].maximum(&t[2]),
            t[0].minimum(&t[2]),
        ]
    };
    let c = Array::from_vec(jax::BOOL_IN2.to_vec(), &[4, 3]).unwrap();
    for (name, got) in on_every_device(f, &[a, b, c], Tol::EXACT) {
        assert_eq!(
            got[0].to_vec::<bool>().unwrap(),
            jax::BOOL_MAX,
            "{name}: max"
        );
        assert_eq!(
            got[1].to_vec::<bool>().unwrap(),
            jax::BOOL_MIN,
            "{name}: min"
        );
        assert_eq!(
            got[2].to_vec::<i32>().unwrap(),
            jax::BOOL_ARGMAX,
            "{name}: argmax"
        );
        assert_eq!(
            got[3].to_vec::<i32>().unwrap(),
            jax::BOOL_ARGMIN,
            "{name}: argmin"
        );
        assert_eq!(
            got[4].to_vec::<bool>().unwrap(),
            jax::BOOL_MATMUL,
            "{name}: matmul"
        );
        assert_eq!(got[4].shape, vec![4, 2], "{name}: matmul shape");
        assert_eq!(
            got[5].to_vec::<bool>().unwrap(),
            jax::BOOL_MAXIMUM,
            "{name}: maximum"
        );
        assert_eq!(
            got[6].to_vec::<bool>().unwrap(),
            jax::BOOL_MINIMUM,
            "{name}: minimum"
        );
    }
}

#[test]
fn gradients_of_max_and_min_around_nan_are_jaxs() {
    // maximum/minimum: where a NaN is involved neither operand gets the cotangent (brigade gave
    // it all to the second operand).
    let args = [arr_f32(jax::PAIR_A), arr_f32(jax::PAIR_B)];
    let g = |t: &[Tensor]| {
        let max =
            brigade::grad(|t: &[Tensor]| vec![t[0].maximum(&t[1]).sum_all()]).argnums(&[0, 1]);
        let min =
            brigade::grad(|t: &[Tensor]| vec![t[0].minimum(&t[1]).sum_all()]).argnums(&[0, 1]);
        [max.apply(t), min.apply(t)].concat()
    };
    for (name, got) in on_every_device(g, &args, Tol::EXACT) {
        assert_f32_like_jax(
            &got[0],
            jax::GRAD_MAXIMUM_A,
            &format!("{name}: d maximum / da"),
        );
        assert_f32_like_jax(
            &got[1],
            jax::GRAD_MAXIMUM_B,
            &format!("{name}: d maximum / db"),
        );
        assert_f32_like_jax(
            &got[2],
            jax::GRAD_MINIMUM_A,
            &format!("{name}: d minimum / da"),
        );
        assert_f32_like_jax(
            &got[3],
            jax::GRAD_MINIMUM_B,
            &format!("{name}: d minimum / db"),
        );
    }
    // Window max/min (max pooling): XLA's select replaces the pick with a NaN and a NaN with the
    // next cell; llvmpipe GL compiled the test so that a NaN stayed picked.
    let w = |op: WindowOp| {
        move |t: &[Tensor]| {
            brigade::grad(move |t: &[Tensor]| {
                vec![t[0].reduce_window(op, &[3], &[1], &[(0, 0)]).sum_all()]
            })
            .apply(t)
        }
    };
    let x = [arr_f32(jax::WIN_IN)];
    for (op, want, what) in [
        (WindowOp::Max, jax::WIN_GRAD_MAX, "window max"),
        (WindowOp::Min, jax::WIN_GRAD_MIN, "window min"),
    ] {
        for (name, got) in on_every_device(w(op), &x, Tol::EXACT) {
            assert_f32_like_jax(&got[0], want, &format!("{name}: grad of {what}"));
        }
    }
}

#[test]
fn var_std_linspace_and_isclose_are_jnps() {
    use brigade::{Axes, numpy as jnp};
    let x = Array::from_vec(f32s(jax::VAR_IN), &[3, 4]).unwrap();
    let xi = Array::from_vec(jax::VAR_INT_IN.to_vec(), &[2, 3]).unwrap();
    let stats = |t: &[Tensor]| {
        vec![
            jnp::var(&t[0], 1, 0, false),
            jnp::var(&t[0], 0, 1, false),
            jnp::std(&t[0], Axes::All, 1, false),
            jnp::var(&t[0], 1, 4, false),
            jnp::var(&t[1], 1, 0, false),
            jnp::var(&t[0], 1, 0, true),
        ]
    };
    // Sums of a few terms in another order than XLA's: within 8 ULP of JAX.
    for (name, got) in on_every_device(stats, &[x, xi], Tol::REDUCE) {
        assert_f32_near_jax(&got[0], jax::VAR_AX1, 8.0, &format!("{name}: var axis 1"));
        assert_f32_near_jax(
            &got[1],
            jax::VAR_AX0_DDOF1,
            8.0,
            &format!("{name}: var ddof 1"),
        );
        assert_f32_near_jax(&got[2], jax::STD_ALL_DDOF1, 8.0, &format!("{name}: std"));
        assert_f32_near_jax(
            &got[3],
            jax::VAR_AX1_DDOF4,
            0.0,
            &format!("{name}: ddof >= n"),
        );
        assert_f32_near_jax(
            &got[4],
            jax::VAR_INT_AX1,
            8.0,
            &format!("{name}: var of i32"),
        );
        assert_eq!(got[5].shape, vec![3, 1], "{name}: keepdims");
    }
    // linspace: JAX's formula on the host, which XLA rounds a little differently: endpoints
    // exact, the rest within 4 ULPs of the endpoints' magnitude (3 measured over 200 ranges).
    let cases = [
        (0.0f32, 1.0f32, 7usize, true, jax::LINSPACE_0),
        (-3.3, 17.1, 11, false, jax::LINSPACE_1),
        (1e-3, 1e4, 9, true, jax::LINSPACE_2),
        (5.0, -2.0, 6, true, jax::LINSPACE_3),
        (0.1, 0.7, 13, true, jax::LINSPACE_4),
        (2.5, 9.0, 1, true, jax::LINSPACE_5),
    ];
    for (lo, hi, num, ep, want) in cases {
        let got = jnp::linspace(lo, hi, num, ep).to_vec::<f32>().unwrap();
        let want = f32s(want);
        let what = format!("linspace({lo}, {hi}, {num}, {ep})");
        assert_eq!(got.len(), num, "{what}");
        assert_eq!(got[0].to_bits(), lo.to_bits(), "{what}: start");
        if ep && num > 1 {
            assert_eq!(got[num - 1].to_bits(), hi.to_bits(), "{what}: stop");
        }
        let m = lo.abs().max(hi.abs());
        let ulp = f32::from_bits(m.to_bits() + 1) - m;
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 4.0 * ulp,
                "{what}[{k}]: {g} against JAX's {w}"
            );
        }
    }
    assert_eq!(jnp::linspace(0.0, 1.0, 0, true).shape(), &[0]);
    let close = |t: &[Tensor]| {
        vec![
            jnp::isclose(&t[0], &t[1], 1e-5, 1e-8, false),
            jnp::isclose(&t[0], &t[1], 1e-5, 1e-8, true),
            jnp::isclose(&t[0], &t[1], 0.2, 1e-3, false),
            jnp::allclose(&t[0], &t[1], 0.2, 1e-3, true),
        ]
    };
    let args = [arr_f32(jax::CLOSE_A), arr_f32(jax::CLOSE_B)];
    for (name, got) in on_every_device(close, &args, Tol::EXACT) {
        assert_eq!(got[0].to_vec::<bool>().unwrap(), jax::ISCLOSE, "{name}");
        assert_eq!(
            got[1].to_vec::<bool>().unwrap(),
            jax::ISCLOSE_NAN,
            "{name}: equal_nan"
        );
        assert_eq!(
            got[2].to_vec::<bool>().unwrap(),
            jax::ISCLOSE_LOOSE,
            "{name}: loose"
        );
        let want_all = jax::ISCLOSE_LOOSE
            .iter()
            .zip(jax::ISCLOSE_NAN)
            .all(|(l, n)| *l || *n);
        assert_eq!(
            got[3].to_vec::<bool>().unwrap(),
            vec![want_all],
            "{name}: allclose"
        );
    }
}
