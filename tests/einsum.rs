//! `brigade::numpy::einsum`, JAX's type promotion (`result_type`, the promoting binary functions,
//! `clip`'s bounds), `cumsum`/`cumprod` with `axis = None` and `take_along_axis`'s modes.
//!
//! Each runs on the Vulkan and GL devices against the CPU reference (`check_on_all`), and the
//! reference's answers are compared with numbers printed by JAX 0.10.2 for the same inputs
//! (`scripts/jax_einsum_vectors.py`, stored in `tests/data/jax_einsum.rs`). Integers and bools
//! must match JAX exactly; floats to 2e-5 relative to max(1, |JAX|) (contractions of at most a
//! few dozen f32 products, summed in another order than XLA's). Gradients of einsum are checked
//! against f64 central differences (`common::fd`), and `vmap` of einsum against the batched
//! subscripts.

mod common;
#[path = "data/jax_einsum.rs"]
mod jax;

use brigade::numpy::{self as jnp, JaxType};
use brigade::{Array, DType, Error, HostArray, TakeMode, Tensor, grad, jit, vmap};
use common::fd::{assert_fd, central_diff};
use common::*;

fn af(bits: &[u32], shape: &[usize]) -> Array {
    Array::from_vec(bits.iter().map(|&b| f32::from_bits(b)).collect(), shape).unwrap()
}
fn a<T: brigade::Element>(v: &[T], shape: &[usize]) -> Array {
    Array::from_vec(v.to_vec(), shape).unwrap()
}

/// Float result against JAX's: same shape and dtype, NaN where JAX has NaN, else within 2e-5
/// relative to max(1, |JAX|).
fn like_jax_f32(got: &HostArray, bits: &[u32], shape: &[usize], what: &str) {
    assert_eq!(got.shape.as_slice(), shape, "{what}: shape");
    assert_eq!(got.dtype(), DType::F32, "{what}: dtype");
    let g = got.to_vec::<f32>().unwrap();
    assert_eq!(g.len(), bits.len(), "{what}: length");
    for (k, (&gv, &wb)) in g.iter().zip(bits).enumerate() {
        let w = f32::from_bits(wb);
        let ok = if w.is_nan() {
            gv.is_nan()
        } else {
            (gv - w).abs() <= 2e-5 * w.abs().max(1.0)
        };
        assert!(ok, "{what}[{k}]: brigade {gv:?}, JAX {w:?}\nbrigade {g:?}");
    }
}
fn like_jax<T: brigade::Element + PartialEq + std::fmt::Debug>(
    got: &HostArray,
    want: &[T],
    shape: &[usize],
    what: &str,
) {
    assert_eq!(got.shape.as_slice(), shape, "{what}: shape");
    assert_eq!(got.dtype(), T::DTYPE, "{what}: dtype");
    assert_eq!(got.to_vec::<T>().unwrap(), want, "{what}");
}

// ---- einsum against JAX --------------------------------------------------------------------------

/// The script's inputs, by name.
fn input(name: &str) -> Array {
    match name {
        "A" => af(jax::IN_A, jax::IN_A_SHAPE),
        "B" => af(jax::IN_B, jax::IN_B_SHAPE),
        "C" => af(jax::IN_C, jax::IN_C_SHAPE),
        "A1" => af(jax::IN_A1, jax::IN_A1_SHAPE),
        "X" => af(jax::IN_X, jax::IN_X_SHAPE),
        "Y" => af(jax::IN_Y, jax::IN_Y_SHAPE),
        "S" => af(jax::IN_S, jax::IN_S_SHAPE),
        "R" => af(jax::IN_R, jax::IN_R_SHAPE),
        "U" => af(jax::IN_U, jax::IN_U_SHAPE),
        "V" => af(jax::IN_V, jax::IN_V_SHAPE),
        "P" => af(jax::IN_P, jax::IN_P_SHAPE),
        "Q" => af(jax::IN_Q, jax::IN_Q_SHAPE),
        "T" => af(jax::IN_T, jax::IN_T_SHAPE),
        "W" => af(jax::IN_W, jax::IN_W_SHAPE),
        "Z" => af(jax::IN_Z, jax::IN_Z_SHAPE),
        "SC" => af(jax::IN_SC, jax::IN_SC_SHAPE),
        "IA" => a(jax::IN_IA, jax::IN_IA_SHAPE),
        "IB" => a(jax::IN_IB, jax::IN_IB_SHAPE),
        "BA" => a(jax::IN_BA, jax::IN_BA_SHAPE),
        "BB" => a(jax::IN_BB, jax::IN_BB_SHAPE),
        other => panic!("no input {other}"),
    }
}

/// JAX's answer for a case: f32 bits, i32 or bool values, and the shape.
enum Want {
    F(&'static [u32]),
    I(&'static [i32]),
    B(&'static [bool]),
}

/// (subscripts, operands, JAX's result, its shape): the script's list, in its order.
fn cases() -> Vec<(&'static str, &'static str, Want, &'static [usize])> {
    use Want::*;
    vec![
        (
            "ij,jk->ik",
            "A B",
            F(jax::EINSUM_MATMUL),
            jax::EINSUM_MATMUL_SHAPE,
        ),
        (
            "ij,jk",
            "A B",
            F(jax::EINSUM_MATMUL_IMPLICIT),
            jax::EINSUM_MATMUL_IMPLICIT_SHAPE,
        ),
        (
            "bij,bjk->bik",
            "X Y",
            F(jax::EINSUM_BATCHED),
            jax::EINSUM_BATCHED_SHAPE,
        ),
        ("ii->i", "S", F(jax::EINSUM_DIAG), jax::EINSUM_DIAG_SHAPE),
        ("ii", "S", F(jax::EINSUM_TRACE), jax::EINSUM_TRACE_SHAPE),
        (
            "ij->",
            "A",
            F(jax::EINSUM_SUM_ALL),
            jax::EINSUM_SUM_ALL_SHAPE,
        ),
        (
            "ij->j",
            "A",
            F(jax::EINSUM_SUM_ROWS),
            jax::EINSUM_SUM_ROWS_SHAPE,
        ),
        (
            "ij->ji",
            "A",
            F(jax::EINSUM_TRANSPOSE),
            jax::EINSUM_TRANSPOSE_SHAPE,
        ),
        (
            "ba",
            "A",
            F(jax::EINSUM_IMPLICIT_TRANSPOSE),
            jax::EINSUM_IMPLICIT_TRANSPOSE_SHAPE,
        ),
        (
            "i,j->ij",
            "U V",
            F(jax::EINSUM_OUTER),
            jax::EINSUM_OUTER_SHAPE,
        ),
        (
            "a,B",
            "U V",
            F(jax::EINSUM_OUTER_UPPER),
            jax::EINSUM_OUTER_UPPER_SHAPE,
        ),
        (
            "...ij,...jk->...ik",
            "P Q",
            F(jax::EINSUM_ELLIPSIS_BATCH),
            jax::EINSUM_ELLIPSIS_BATCH_SHAPE,
        ),
        (
            "ijk,jil->kl",
            "T W",
            F(jax::EINSUM_PERMUTED),
            jax::EINSUM_PERMUTED_SHAPE,
        ),
        (
            "ij,jk,kl->il",
            "A B C",
            F(jax::EINSUM_CHAIN),
            jax::EINSUM_CHAIN_SHAPE,
        ),
        (
            ",i->i",
            "SC U",
            F(jax::EINSUM_SCALAR_TIMES),
            jax::EINSUM_SCALAR_TIMES_SHAPE,
        ),
        (
            ",",
            "SC SC",
            F(jax::EINSUM_SCALARS),
            jax::EINSUM_SCALARS_SHAPE,
        ),
        (
            "iij->j",
            "R",
            F(jax::EINSUM_DIAG_SUM),
            jax::EINSUM_DIAG_SUM_SHAPE,
        ),
        (
            "ij,ij->ij",
            "A A1",
            F(jax::EINSUM_BROADCAST_ONE),
            jax::EINSUM_BROADCAST_ONE_SHAPE,
        ),
        (
            "...ij->ij",
            "X",
            F(jax::EINSUM_ELLIPSIS_SUMMED),
            jax::EINSUM_ELLIPSIS_SUMMED_SHAPE,
        ),
        (
            "i...,i",
            "Z U",
            F(jax::EINSUM_ELLIPSIS_IMPLICIT),
            jax::EINSUM_ELLIPSIS_IMPLICIT_SHAPE,
        ),
        (
            "ij,ij->i",
            "A A",
            F(jax::EINSUM_HADAMARD_SUM),
            jax::EINSUM_HADAMARD_SUM_SHAPE,
        ),
        (
            "ij,jk->ik",
            "IA IB",
            I(jax::EINSUM_INT),
            jax::EINSUM_INT_SHAPE,
        ),
        (
            "ij,jk->ik",
            "IA B",
            F(jax::EINSUM_INT_FLOAT),
            jax::EINSUM_INT_FLOAT_SHAPE,
        ),
        (
            "ij,jk->ik",
            "BA BB",
            B(jax::EINSUM_BOOL),
            jax::EINSUM_BOOL_SHAPE,
        ),
    ]
}

#[test]
fn einsum_matches_jax() {
    let cases = cases();
    // Every case's operands are arguments of one jitted function, in order.
    let mut args = Vec::new();
    let mut slots = Vec::new();
    for (_, ops, _, _) in &cases {
        let mut idx = Vec::new();
        for o in ops.split(' ') {
            idx.push(args.len());
            args.push(input(o));
        }
        slots.push(idx);
    }
    let specs: Vec<&str> = cases.iter().map(|c| c.0).collect();
    let got = check_on_all(
        |t: &[Tensor]| {
            specs
                .iter()
                .zip(&slots)
                .map(|(s, idx)| {
                    let ops: Vec<&Tensor> = idx.iter().map(|&i| &t[i]).collect();
                    jnp::einsum(s, &ops)
                })
                .collect()
        },
        &args,
        Tol::REDUCE,
    );
    for ((sub, ops, want, shape), g) in cases.iter().zip(&got) {
        let what = format!("einsum {sub:?} of {ops}");
        match want {
            Want::F(bits) => like_jax_f32(g, bits, shape, &what),
            Want::I(v) => like_jax(g, v, shape, &what),
            Want::B(v) => like_jax(g, v, shape, &what),
        }
    }
}

#[test]
fn einsum_lowers_to_the_expected_primitives() {
    let names = |spec: &'static str, args: &[Array]| -> Vec<&'static str> {
        let g = jit(move |t: &[Tensor]| {
            let ops: Vec<&Tensor> = t.iter().collect();
            vec![jnp::einsum(spec, &ops)]
        })
        .graph(args)
        .unwrap_or_else(|e| panic!("{spec}: {e}"));
        g.eqns.iter().map(|e| e.prim.name()).collect()
    };
    // Batched matmul: one dot_general with a batch axis, nothing broadcast or transposed.
    let x = rand_f32(&[4, 3, 5], 1);
    let y = rand_f32(&[4, 5, 2], 2);
    assert_eq!(
        names("bij,bjk->bik", &[x.clone(), y.clone()]),
        vec!["dot_general"]
    );
    assert_eq!(
        names("ij,jk->ik", &[rand_f32(&[3, 5], 3), rand_f32(&[5, 2], 4)]),
        vec!["dot_general"]
    );
    // The batch index out of front is still one dot_general, plus the transpose into the output.
    let n = names("bij,bjk->ibk", &[x, y]);
    assert_eq!(n, vec!["dot_general", "transpose"]);
    // A diagonal is a transpose (none needed here), a reshape and a strided slice: no gather.
    let n = names("ii->i", &[rand_f32(&[4, 4], 5)]);
    assert_eq!(n, vec!["reshape", "slice"]);
    // An outer product is an elementwise multiply, not a matmul.
    let n = names("i,j->ij", &[rand_f32(&[3], 6), rand_f32(&[4], 7)]);
    assert!(n.contains(&"mul") && !n.contains(&"dot_general"), "{n:?}");
}

#[test]
fn einsum_errors_are_typed_and_name_the_problem() {
    let x = Tensor::from_vec(vec![1.0f32; 6], &[2, 3]);
    let y = Tensor::from_vec(vec![1.0f32; 20], &[4, 5]);
    let check =
        |spec: &str, ops: &[&Tensor], needles: &[&str]| match jnp::einsum(spec, ops).to_array() {
            Err(e @ Error::BadSubscripts { op: "einsum", .. }) => {
                let msg = e.to_string();
                for n in needles {
                    assert!(msg.contains(n), "{spec}: {msg:?} lacks {n:?}");
                }
            }
            other => panic!("{spec}: expected BadSubscripts, got {other:?}"),
        };
    check("ij,jk->ik", &[&x, &y], &["'j'", "size 3", "size 4"]);
    check("ij,jk", &[&x], &["2 operand terms", "1 operands"]);
    check("ijk,jk", &[&x, &y], &["operand 0 has rank 2", "3 axes"]);
    check("i,jk", &[&x, &y], &["operand 0 has rank 2", "1 axes"]);
    check("ij,kl->iz", &[&x, &y], &["'z'", "does not appear"]);
    check("ij,kl->ii", &[&x, &y], &["'i'", "more than once"]);
    check("i2,kl", &[&x, &y], &["'2'", "not an index"]);
    check("i.j,kl", &[&x, &y], &["'...'"]);
    check("......,kl", &[&x, &y], &["'...'"]);
    check("ij,kl->ik->l", &[&x, &y], &["'->'"]);
    check("ij-kl", &[&x, &y], &["'-'"]);
    // Inside a jitted function the error fails the call.
    let r = jit(|t: &[Tensor]| vec![jnp::einsum("ij,jk->ik", &[&t[0], &t[1]])])
        .call(&[rand_f32(&[2, 3], 1), rand_f32(&[4, 5], 2)]);
    assert!(matches!(r, Err(Error::BadSubscripts { .. })), "{r:?}");
}

// ---- grad and vmap ----------------------------------------------------------------------------------

#[test]
fn grad_of_einsum_matches_finite_differences() {
    let dev = device_of("vulkan");
    let cases: Vec<(&str, Vec<Vec<usize>>)> = vec![
        ("ij,jk->ik", vec![vec![3, 4], vec![4, 2]]),
        ("bij,bjk->bik", vec![vec![2, 3, 4], vec![2, 4, 2]]),
        ("ii->i", vec![vec![4, 4]]),
        ("iij->j", vec![vec![3, 3, 2]]),
        ("i,j->ij", vec![vec![3], vec![4]]),
        ("ij,jk,kl->il", vec![vec![2, 3], vec![3, 4], vec![4, 2]]),
        ("...ij,...jk->...ik", vec![vec![2, 1, 2, 3], vec![3, 3, 2]]),
        ("ijk,jil->kl", vec![vec![2, 3, 2], vec![3, 2, 3]]),
    ];
    for (c, (spec, shapes)) in cases.into_iter().enumerate() {
        let args: Vec<Array> = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| rand_f32_in(s, 300 + 10 * c as u64 + k as u64, -1.5, 1.5))
            .collect();
        let loss = move |t: &[Tensor]| {
            let ops: Vec<&Tensor> = t.iter().collect();
            let y = jnp::einsum(spec, &ops);
            // sum(y * r) with a fixed r of y's dtype, so every output element matters.
            let r = Tensor::from_vec(f32s(y.size(), 900 + c as u64, -1.0, 1.0), y.shape())
                .cast(y.dtype());
            vec![(&y * &r).sum_all()]
        };
        let argnums: Vec<usize> = (0..args.len()).collect();
        let g = grad(loss)
            .argnums(&argnums)
            .on(&dev)
            .call(&args)
            .unwrap_or_else(|e| panic!("grad of einsum {spec}: {e}"));
        for (k, gk) in g.iter().enumerate() {
            let fd = central_diff(&loss, &args, k);
            assert!(fd.iter().any(|v| v.abs() > 1e-2), "{spec}: vacuous check");
            assert_fd(
                &host(gk),
                &fd,
                &format!("grad of einsum {spec:?} w.r.t. operand {k}"),
            );
        }
    }
}

#[test]
fn vmap_of_einsum_matches_the_batched_subscripts() {
    let x = rand_f32(&[3, 4, 5], 11);
    let y = rand_f32(&[3, 5, 2], 12);
    let s = rand_f32(&[3, 4, 4], 13);
    let w = rand_f32(&[5, 2], 14);
    let got = check_on_all(
        |t: &[Tensor]| {
            let mut out = vmap(|u: &[Tensor]| {
                vec![
                    jnp::einsum("ij,jk->ik", &[&u[0], &u[1]]),
                    jnp::einsum("ii->i", &[&u[2]]),
                ]
            })
            .apply(&t[..3]);
            // One operand unbatched.
            out.extend(
                vmap(|u: &[Tensor]| vec![jnp::einsum("ij,jk->ki", &[&u[0], &u[1]])])
                    .in_axes(&[Some(0), None])
                    .apply(&[t[0].clone(), t[3].clone()]),
            );
            out.push(jnp::einsum("bij,bjk->bik", &[&t[0], &t[1]]));
            out.push(jnp::einsum("bii->bi", &[&t[2]]));
            out.push(jnp::einsum("bij,jk->bki", &[&t[0], &t[3]]));
            out
        },
        &[x, y, s, w],
        Tol::REDUCE,
    );
    assert_close(
        &got[0],
        &got[3],
        Tol::REDUCE,
        "vmap(ij,jk->ik) vs bij,bjk->bik",
    );
    assert_close(&got[1], &got[4], Tol::EXACT, "vmap(ii->i) vs bii->bi");
    assert_close(
        &got[2],
        &got[5],
        Tol::REDUCE,
        "vmap(ij,jk->ki) in_axes (0, None) vs bij,jk->bki",
    );
}

// ---- promotion ----------------------------------------------------------------------------------------

fn jax_type(name: &str) -> JaxType {
    match name {
        "bool" => JaxType::Strong(DType::Bool),
        "i32" => JaxType::Strong(DType::I32),
        "u32" => JaxType::Strong(DType::U32),
        "f32" => JaxType::Strong(DType::F32),
        "f64" => JaxType::Strong(DType::F64),
        "int" => JaxType::WeakInt,
        "float" => JaxType::WeakFloat,
        other => panic!("no type {other}"),
    }
}

/// JAX's (dtype, weak) result as a `JaxType`.
fn jax_result(dtype: &str, weak: bool) -> JaxType {
    match (dtype, weak) {
        ("i32", true) => JaxType::WeakInt,
        ("f32", true) => JaxType::WeakFloat,
        (d, false) => jax_type(d),
        (d, true) => panic!("JAX gave a weak {d}"),
    }
}

#[test]
fn result_type_table_matches_jax() {
    let mut table = String::new();
    for &(x, y, dt, weak) in jax::RESULT_TYPE.iter().chain(jax::RESULT_TYPE_F64) {
        let got = jnp::result_type(jax_type(x), jax_type(y));
        let want = jax_result(dt, weak);
        table.push_str(&format!(
            "{x:>5} + {y:<5} -> brigade {got:?}, JAX {dt}{}\n",
            if weak { " (weak)" } else { "" }
        ));
        assert_eq!(got, want, "result_type({x}, {y})\n{table}");
        // Symmetric, and the dtype of a weak result is JAX's default.
        assert_eq!(
            jnp::result_type(jax_type(y), jax_type(x)),
            got,
            "result_type({y}, {x})"
        );
        assert_eq!(got.dtype().name(), dt, "{x} + {y}: dtype");
    }
    assert_eq!(jax::RESULT_TYPE.len(), 36, "every pair of the six types");
    println!("{table}");
}

fn xf() -> Array {
    af(jax::XF, jax::XF_SHAPE)
}
fn xi() -> Array {
    a(jax::XI, jax::XI_SHAPE)
}
fn xu() -> Array {
    a(jax::XU, jax::XU_SHAPE)
}
fn xb() -> Array {
    a(jax::XB, jax::XB_SHAPE)
}

#[test]
fn promoting_functions_match_jax() {
    let got = check_on_all(
        |t: &[Tensor]| {
            let (xf, xi, xu, xb, lo) = (&t[0], &t[1], &t[2], &t[3], &t[4]);
            let xb_rev = xb.slice(&[2, 0], &[3, 5], None);
            let xb_rev = Tensor::concatenate(
                &[
                    &xb_rev,
                    &xb.slice(&[1, 0], &[2, 5], None),
                    &xb.slice(&[0, 0], &[1, 5], None),
                ],
                0,
            );
            vec![
                jnp::clip(xi, -5.5, 7.5),
                jnp::clip(xi, -5, 7),
                jnp::clip(xu, 3, 30),
                jnp::clip(xi, lo, None),
                jnp::clip(xu, Some(&Tensor::scalar(3i32)), None),
                jnp::add(xi, 2.5),
                jnp::add(xi, xu),
                jnp::add(xb, &xb_rev),
                jnp::add(xb, 3),
                jnp::subtract(xu, xi),
                jnp::multiply(xu, 3),
                jnp::multiply(xb, &xb_rev),
                jnp::true_divide(xi, 4),
                jnp::floor_divide(xi, 3.0),
                jnp::remainder(xu, 7),
                jnp::maximum(xi, &xf.slice(&[0, 0], &[3, 1], None)),
                jnp::minimum(xb, xu),
                jnp::where_(xb, xi, 0.5),
            ]
        },
        &[xf(), xi(), xu(), xb(), af(jax::LO_ROW, jax::LO_ROW_SHAPE)],
        Tol::EXACT,
    );
    like_jax_f32(
        &got[0],
        jax::CLIP_I_FLOAT_BOUNDS,
        jax::CLIP_I_FLOAT_BOUNDS_SHAPE,
        "clip(i32, 5.5, 7.5) is f32",
    );
    like_jax(
        &got[1],
        jax::CLIP_I_INT_BOUNDS,
        jax::CLIP_I_INT_BOUNDS_SHAPE,
        "clip(i32, -5, 7)",
    );
    like_jax(
        &got[2],
        jax::CLIP_U_INT_BOUNDS,
        jax::CLIP_U_INT_BOUNDS_SHAPE,
        "clip(u32, 3, 30)",
    );
    like_jax_f32(
        &got[3],
        jax::CLIP_I_F32_ROW,
        jax::CLIP_I_F32_ROW_SHAPE,
        "clip(i32, f32 row)",
    );
    like_jax(
        &got[4],
        jax::CLIP_U_I32_BOUND,
        jax::CLIP_U_I32_BOUND_SHAPE,
        "clip(u32, i32 bound) is i32",
    );
    like_jax_f32(
        &got[5],
        jax::ADD_I_FLOAT,
        jax::ADD_I_FLOAT_SHAPE,
        "i32 + 2.5",
    );
    like_jax(&got[6], jax::ADD_I_U, jax::ADD_I_U_SHAPE, "i32 + u32");
    like_jax(&got[7], jax::ADD_B_B, jax::ADD_B_B_SHAPE, "bool + bool");
    like_jax(&got[8], jax::ADD_B_INT, jax::ADD_B_INT_SHAPE, "bool + 3");
    like_jax(&got[9], jax::SUB_U_I, jax::SUB_U_I_SHAPE, "u32 - i32");
    like_jax(&got[10], jax::MUL_U_INT, jax::MUL_U_INT_SHAPE, "u32 * 3");
    like_jax(&got[11], jax::MUL_B_B, jax::MUL_B_B_SHAPE, "bool * bool");
    like_jax_f32(
        &got[12],
        jax::TRUEDIV_I_INT,
        jax::TRUEDIV_I_INT_SHAPE,
        "i32 / 4",
    );
    like_jax_f32(
        &got[13],
        jax::FLOORDIV_I_FLOAT,
        jax::FLOORDIV_I_FLOAT_SHAPE,
        "i32 // 3.0",
    );
    like_jax(&got[14], jax::REM_U_INT, jax::REM_U_INT_SHAPE, "u32 % 7");
    like_jax_f32(
        &got[15],
        jax::MAX_I_F,
        jax::MAX_I_F_SHAPE,
        "maximum(i32, f32 column)",
    );
    like_jax(
        &got[16],
        jax::MIN_B_U,
        jax::MIN_B_U_SHAPE,
        "minimum(bool, u32)",
    );
    like_jax_f32(
        &got[17],
        jax::WHERE_I_FLOAT,
        jax::WHERE_I_FLOAT_SHAPE,
        "where(b, i32, 0.5)",
    );
}

#[test]
fn an_integer_literal_too_large_for_the_dtype_is_an_error() {
    let x = Tensor::from_vec(vec![1i32, 2], &[2]);
    match jnp::add(&x, 3_000_000_000i64).to_array() {
        Err(Error::BadDType {
            op: "add",
            dtype: DType::I32,
            ..
        }) => {}
        other => panic!("i32 + 3e9: {other:?}"),
    }
    // A float literal is fine: the result is f32.
    assert_eq!(jnp::add(&x, 3e9).dtype(), DType::F32);
}

// ---- cumsum/cumprod axis=None, take_along_axis modes --------------------------------------------------

#[test]
fn cumsum_cumprod_over_the_flattened_array_match_jax() {
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                jnp::cumsum(&t[0], None),
                jnp::cumsum(&t[1], None),
                jnp::cumsum(&t[2], None),
                jnp::cumprod(&t[0], None),
                jnp::cumsum(&t[3], None),
            ]
        },
        &[
            xf(),
            xi(),
            xb(),
            Array::from_vec(vec![2.5f32], &[]).unwrap(),
        ],
        Tol::REDUCE,
    );
    like_jax_f32(
        &got[0],
        jax::CUMSUM_NONE_F,
        jax::CUMSUM_NONE_F_SHAPE,
        "cumsum f32 axis=None",
    );
    like_jax(
        &got[1],
        jax::CUMSUM_NONE_I,
        jax::CUMSUM_NONE_I_SHAPE,
        "cumsum i32 axis=None",
    );
    like_jax(
        &got[2],
        jax::CUMSUM_NONE_B,
        jax::CUMSUM_NONE_B_SHAPE,
        "cumsum bool axis=None",
    );
    like_jax_f32(
        &got[3],
        jax::CUMPROD_NONE_F,
        jax::CUMPROD_NONE_F_SHAPE,
        "cumprod f32 axis=None",
    );
    like_jax_f32(
        &got[4],
        jax::CUMSUM_SCALAR,
        jax::CUMSUM_SCALAR_SHAPE,
        "cumsum of a scalar",
    );
}

#[test]
fn take_along_axis_modes_match_jax() {
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                jnp::take_along_axis_mode(&t[0], &t[2], 1, TakeMode::Clip, None),
                jnp::take_along_axis_mode(&t[0], &t[2], 1, TakeMode::Fill, Some((-9.5f32).into())),
                jnp::take_along_axis_mode(&t[1], &t[3], 0, TakeMode::Clip, None),
                jnp::take_along_axis_mode(&t[1], &t[3], 0, TakeMode::Fill, Some(77i32.into())),
                jnp::take_along_axis_mode(&t[0], &t[2], 1, TakeMode::Wrap, None),
            ]
        },
        &[
            xf(),
            xi(),
            a(jax::IDX1, jax::IDX1_SHAPE),
            a(jax::IDX0, jax::IDX0_SHAPE),
        ],
        Tol::EXACT,
    );
    like_jax_f32(
        &got[0],
        jax::TAKE_CLIP_F1,
        jax::TAKE_CLIP_F1_SHAPE,
        "take_along_axis clip",
    );
    like_jax_f32(
        &got[1],
        jax::TAKE_FILL_F1,
        jax::TAKE_FILL_F1_SHAPE,
        "take_along_axis fill -9.5",
    );
    like_jax(
        &got[2],
        jax::TAKE_CLIP_I0,
        jax::TAKE_CLIP_I0_SHAPE,
        "take_along_axis i32 clip",
    );
    like_jax(
        &got[3],
        jax::TAKE_FILL_I0,
        jax::TAKE_FILL_I0_SHAPE,
        "take_along_axis i32 fill 77",
    );
    // Wrap (not a jnp.take_along_axis mode): derived here from the input, index modulo 4.
    let x = host(&xf()).to_vec::<f32>().unwrap();
    let want: Vec<f32> = jax::IDX1
        .iter()
        .enumerate()
        .map(|(k, &i)| x[(k / 6) * 4 + i.rem_euclid(4) as usize])
        .collect();
    assert_f32s(&got[4], &want, Tol::EXACT, "take_along_axis wrap");
}
