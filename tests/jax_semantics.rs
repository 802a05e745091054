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

use brigade::{Array, DType, HostArray, HostData, TakeMode, Tensor};
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
                t[0].take(&t[1], 0),
            ]
        },
        &args,
        Tol::EXACT,
    );
    assert_f32_like_jax(&got[0], jax::TAKE_FILL, "jnp.take mode=fill");
    assert_f32_like_jax(&got[1], jax::TAKE_CLIP, "jnp.take mode=clip");
    assert_f32_like_jax(&got[2], jax::TAKE_WRAP, "jnp.take mode=wrap");
    assert_f32_like_jax(&got[3], jax::TAKE_GETITEM, "x[idx]");
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
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].maximum(&t[1]), t[0].minimum(&t[1]), t[0].relu()],
        &args,
        Tol::EXACT,
    );
    // JAX orders -0 below +0 in maximum/minimum; WGSL leaves the sign of a zero result open, so
    // zeros are compared by value here (a NaN or a wrong number still fails).
    let unsign = |bits: &[u32]| -> Vec<u32> {
        bits.iter()
            .map(|&b| if b & 0x7fff_ffff == 0 { 0 } else { b })
            .collect()
    };
    let unsign_host = |h: &HostArray| {
        let v: Vec<f32> = h
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(|x| if x == 0.0 { 0.0 } else { x })
            .collect();
        HostArray::new(h.shape.clone(), HostData::F32(v)).unwrap()
    };
    assert_f32_like_jax(
        &unsign_host(&got[0]),
        &unsign(jax::PAIR_MAXIMUM),
        "jnp.maximum",
    );
    assert_f32_like_jax(
        &unsign_host(&got[1]),
        &unsign(jax::PAIR_MINIMUM),
        "jnp.minimum",
    );
    assert_f32_like_jax(&unsign_host(&got[2]), &unsign(jax::RELU), "jax.nn.relu");
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
