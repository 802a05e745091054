//! `brigade::numpy` (clip, any, all, cumsum, cumprod, take_along_axis) on the Vulkan and GL devices
//! against the CPU reference (`check_on_all`), and the reference's answers against numbers printed
//! by JAX 0.10.2 for the same inputs (`scripts/jax_numpy_vectors.py`, stored in
//! `tests/data/jax_numpy.rs`). Integers and bools must match JAX exactly; floats to 1e-5 relative
//! (cumsum/cumprod add and multiply in log-step order), NaN for NaN. Also the gradients of cumsum,
//! cumprod and clip against derivatives computed here, and vmap of cumsum and take_along_axis.

mod common;
#[path = "data/jax_numpy.rs"]
mod jax;

use brigade::numpy as jnp;
use brigade::{Array, Axes, DType, Error, HostArray, Tensor, grad, vmap};
use common::*;

fn af(bits: &[u32], shape: &[usize]) -> Array {
    Array::from_vec(bits.iter().map(|&b| f32::from_bits(b)).collect(), shape).unwrap()
}
fn a<T: brigade::Element>(v: &[T], shape: &[usize]) -> Array {
    Array::from_vec(v.to_vec(), shape).unwrap()
}
fn xf() -> Array {
    af(jax::XF, jax::XF_SHAPE)
}
/// XF with its NaN replaced by 0, as the script's `np.nan_to_num(xf)`.
fn xf_finite() -> Array {
    let v: Vec<f32> = jax::XF
        .iter()
        .map(|&b| f32::from_bits(b))
        .map(|x| if x.is_nan() { 0.0 } else { x })
        .collect();
    Array::from_vec(v, jax::XF_SHAPE).unwrap()
}

/// Float result against JAX's: same shape, NaN where JAX has NaN, else within 1e-5 relative, and
/// the same sign for zeros JAX produced exactly.
fn like_jax_f32(got: &HostArray, bits: &[u32], shape: &[usize], what: &str) {
    assert_eq!(got.shape.as_slice(), shape, "{what}: shape");
    let g = got.to_vec::<f32>().unwrap();
    for (k, (&gv, &wb)) in g.iter().zip(bits).enumerate() {
        let w = f32::from_bits(wb);
        let ok = if w.is_nan() {
            gv.is_nan()
        } else if w == 0.0 {
            gv == 0.0 && gv.is_sign_negative() == w.is_sign_negative()
        } else {
            (gv - w).abs() <= 1e-5 * w.abs().max(1.0)
        };
        assert!(ok, "{what}[{k}]: brigade {gv:?}, JAX {w:?}\nbrigade {g:?}");
    }
    assert_eq!(g.len(), bits.len(), "{what}: length");
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

#[test]
fn clip_matches_jax() {
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                jnp::clip(&t[0], Some(&t[3]), Some(&Tensor::scalar(1.0f32))),
                jnp::clip(
                    &t[1],
                    Some(&Tensor::scalar(-5i32)),
                    Some(&Tensor::scalar(7i32)),
                ),
                jnp::clip(
                    &t[2],
                    Some(&Tensor::scalar(3u32)),
                    Some(&Tensor::scalar(30u32)),
                ),
                jnp::clip(
                    &t[0],
                    Some(&Tensor::scalar(1.0f32)),
                    Some(&Tensor::scalar(-1.0f32)),
                ),
                jnp::clip(&t[0], None, Some(&Tensor::scalar(0.5f32))),
            ]
        },
        &[
            xf(),
            a(jax::XI, jax::XI_SHAPE),
            a(jax::XU, jax::XU_SHAPE),
            af(jax::LO_ROW, jax::LO_ROW_SHAPE),
        ],
        Tol::EXACT,
    );
    like_jax_f32(&got[0], jax::CLIP_F, jax::CLIP_F_SHAPE, "clip f32 (row lo)");
    like_jax(&got[1], jax::CLIP_I, jax::CLIP_I_SHAPE, "clip i32");
    like_jax(&got[2], jax::CLIP_U, jax::CLIP_U_SHAPE, "clip u32");
    like_jax_f32(
        &got[3],
        jax::CLIP_LO_GT_HI,
        jax::CLIP_LO_GT_HI_SHAPE,
        "clip lo > hi",
    );
    like_jax_f32(
        &got[4],
        jax::CLIP_F_HI_ONLY,
        jax::CLIP_F_HI_ONLY_SHAPE,
        "clip hi only",
    );
}

#[test]
fn any_all_match_jax() {
    let got = check_on_all(
        |t: &[Tensor]| {
            let hundred = Tensor::scalar(100.0f32);
            vec![
                jnp::any(&t[0], 1, false),
                jnp::all(&t[0], 0, false),
                jnp::any(&t[1].eq(&hundred), Axes::All, false),
                jnp::any(&t[2].rem(&Tensor::scalar(3i32)), 0, false),
                jnp::all(&t[1], 1, true),
            ]
        },
        &[a(jax::XB, jax::XB_SHAPE), xf(), a(jax::XI, jax::XI_SHAPE)],
        Tol::EXACT,
    );
    like_jax(&got[0], jax::ANY_B1, jax::ANY_B1_SHAPE, "any bool axis 1");
    like_jax(&got[1], jax::ALL_B0, jax::ALL_B0_SHAPE, "all bool axis 0");
    like_jax(
        &got[2],
        jax::ANY_F_ALL,
        jax::ANY_F_ALL_SHAPE,
        "any all axes",
    );
    // Python's % and C's fmod differ in sign only, so `!= 0` is the same.
    like_jax(&got[3], jax::ANY_I0, jax::ANY_I0_SHAPE, "any i32 (x % 3)");
    like_jax(
        &got[4],
        jax::ALL_F1_KEEP,
        jax::ALL_F1_KEEP_SHAPE,
        "all f32 (NaN is true) keepdims",
    );
}

#[test]
fn any_all_of_an_empty_axis() {
    let got = check_on_all(
        |t: &[Tensor]| vec![jnp::any(&t[0], 1, false), jnp::all(&t[0], 1, false)],
        &[Array::from_vec(Vec::<f32>::new(), &[2, 0]).unwrap()],
        Tol::EXACT,
    );
    assert_eq!(got[0].to_vec::<bool>().unwrap(), vec![false, false]);
    assert_eq!(got[1].to_vec::<bool>().unwrap(), vec![true, true]);
}

#[test]
fn cumsum_cumprod_match_jax() {
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                jnp::cumsum(&t[0], 1),
                jnp::cumsum(&t[0], -2),
                jnp::cumsum(&t[1], -1),
                jnp::cumsum(&t[2], 0),
                jnp::cumsum(&t[3], 1),
                jnp::cumprod(&t[0], 1),
                jnp::cumprod(&t[1], 0),
                jnp::cumsum(&t[4], 0),
            ]
        },
        &[
            xf_finite(),
            a(jax::XI, jax::XI_SHAPE),
            a(jax::XU, jax::XU_SHAPE),
            a(jax::XB, jax::XB_SHAPE),
            a(jax::XLONG, jax::XLONG_SHAPE),
        ],
        Tol::REDUCE,
    );
    like_jax_f32(
        &got[0],
        jax::CUMSUM_F1,
        jax::CUMSUM_F1_SHAPE,
        "cumsum f32 axis 1",
    );
    like_jax_f32(
        &got[1],
        jax::CUMSUM_F0,
        jax::CUMSUM_F0_SHAPE,
        "cumsum f32 axis -2",
    );
    like_jax(
        &got[2],
        jax::CUMSUM_I1,
        jax::CUMSUM_I1_SHAPE,
        "cumsum i32 axis -1",
    );
    like_jax(
        &got[3],
        jax::CUMSUM_U0,
        jax::CUMSUM_U0_SHAPE,
        "cumsum u32 axis 0",
    );
    like_jax(
        &got[4],
        jax::CUMSUM_B1,
        jax::CUMSUM_B1_SHAPE,
        "cumsum bool -> i32",
    );
    like_jax_f32(
        &got[5],
        jax::CUMPROD_F1,
        jax::CUMPROD_F1_SHAPE,
        "cumprod f32 axis 1",
    );
    like_jax(
        &got[6],
        jax::CUMPROD_I0,
        jax::CUMPROD_I0_SHAPE,
        "cumprod i32 axis 0",
    );
    like_jax(
        &got[7],
        jax::CUMSUM_LONG,
        jax::CUMSUM_LONG_SHAPE,
        "cumsum of 37 (6 rounds)",
    );
}

#[test]
fn take_along_axis_matches_jax() {
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                jnp::take_along_axis(&t[0], &t[3], 1),
                jnp::take_along_axis(&t[1], &t[4], 0),
                jnp::take_along_axis(&t[2], &t[3].cast(DType::U32), -1),
                jnp::take_along_axis(&t[0], &t[5], 1),
            ]
        },
        &[
            xf(),
            a(jax::XI, jax::XI_SHAPE),
            a(jax::XU, jax::XU_SHAPE),
            a(jax::IDX1, jax::IDX1_SHAPE),
            a(jax::IDX0, jax::IDX0_SHAPE),
            a(jax::IDX_B, jax::IDX_B_SHAPE),
        ],
        Tol::EXACT,
    );
    like_jax_f32(
        &got[0],
        jax::TAKE_F1,
        jax::TAKE_F1_SHAPE,
        "take_along_axis f32 axis 1",
    );
    like_jax(
        &got[1],
        jax::TAKE_I0,
        jax::TAKE_I0_SHAPE,
        "take_along_axis i32 axis 0",
    );
    like_jax(
        &got[2],
        &u32_view_of_take_u1(),
        jax::TAKE_U1_SHAPE,
        "take_along_axis u32",
    );
    like_jax_f32(
        &got[3],
        jax::TAKE_BCAST,
        jax::TAKE_BCAST_SHAPE,
        "take_along_axis broadcast",
    );
}

/// The u32 case indexes with the i32 indices cast to u32 (negative ones become huge, out of range,
/// so they give the fill u32::MAX), while JAX was given the i32 indices (where -5..-1 count from
/// the end). Derive brigade's expectation from JAX's answer: the same where the index is >= 0.
fn u32_view_of_take_u1() -> Vec<u32> {
    jax::TAKE_U1
        .iter()
        .zip(jax::IDX1)
        .map(|(&v, &i)| if i < 0 { u32::MAX } else { v })
        .collect()
}

#[test]
fn gradients_of_cumsum_cumprod_clip() {
    // Strictly positive, distinct inputs away from the clip bounds' ties.
    let x = rand_f32_in(&[2, 5], 7, 0.5, 1.5);
    let w = rand_f32_in(&[2, 5], 8, -1.0, 1.0);
    let xv = host(&x).to_vec::<f32>().unwrap();
    let wv = host(&w).to_vec::<f32>().unwrap();
    // d/dx_j sum_i w_i cumsum(x)_i = sum_{i >= j} w_i (along axis 1).
    let mut d_sum = vec![0.0f32; 10];
    // d/dx_j sum_i w_i cumprod(x)_i = sum_{i >= j} w_i prod_{k <= i, k != j} x_k.
    let mut d_prod = vec![0.0f32; 10];
    for r in 0..2 {
        for j in 0..5 {
            for i in j..5 {
                d_sum[r * 5 + j] += wv[r * 5 + i];
                let p: f32 = (0..=i).filter(|&k| k != j).map(|k| xv[r * 5 + k]).product();
                d_prod[r * 5 + j] += wv[r * 5 + i] * p;
            }
        }
    }
    let (lo, hi) = (0.8f32, 1.2f32);
    let d_clip: Vec<f32> = xv
        .iter()
        .zip(&wv)
        .map(|(&x, &w)| if x > lo && x < hi { w } else { 0.0 })
        .collect();
    assert!(d_clip.contains(&0.0) && d_clip.iter().any(|&v| v != 0.0));
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        for (name, want) in [("cumsum", &d_sum), ("cumprod", &d_prod), ("clip", &d_clip)] {
            let loss = |t: &[Tensor]| {
                let y = match name {
                    "cumsum" => jnp::cumsum(&t[0], 1),
                    "cumprod" => jnp::cumprod(&t[0], -1),
                    _ => jnp::clip(&t[0], Some(&Tensor::scalar(lo)), Some(&Tensor::scalar(hi))),
                };
                vec![(&y * &t[1]).sum_all()]
            };
            let g = grad(loss)
                .on(&dev)
                .call(&[x.clone(), w.clone()])
                .unwrap_or_else(|e| panic!("grad of {name} on {dev:?}: {e}"));
            assert_f32s(
                &host(&g[0]),
                want,
                Tol::new(1e-4, 1e-5),
                &format!("grad {name}"),
            );
        }
    }
}

#[test]
fn vmap_of_cumsum_and_take_along_axis() {
    let x = rand_f32(&[3, 6], 21);
    let i = rand_i32(&[3, 4], 22, -6, 6);
    let got = check_on_all(
        |t: &[Tensor]| {
            let v = vmap(|u: &[Tensor]| {
                vec![jnp::cumsum(&u[0], 0), jnp::take_along_axis(&u[0], &u[1], 0)]
            })
            .apply(t);
            let mut out = v;
            // The batched forms, for comparison: the same along axis 1 of the whole batch.
            out.push(jnp::cumsum(&t[0], 1));
            out.push(jnp::take_along_axis(&t[0], &t[1], 1));
            out
        },
        &[x, i],
        Tol::REDUCE,
    );
    assert_close(
        &got[0],
        &got[2],
        Tol::REDUCE,
        "vmap(cumsum) vs cumsum axis 1",
    );
    assert_close(
        &got[1],
        &got[3],
        Tol::EXACT,
        "vmap(take_along_axis) vs axis 1",
    );
}

#[test]
fn bad_arguments_are_typed_errors() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    match jnp::cumsum(&x, 2).to_array() {
        Err(Error::BadAxis {
            op: "cumsum",
            axis: 2,
            rank: 2,
            ..
        }) => {}
        other => panic!("cumsum axis 2: {other:?}"),
    }
    match jnp::cumprod(&Tensor::scalar(1.0f32), 0).to_array() {
        Err(Error::BadAxis {
            op: "cumprod",
            rank: 0,
            ..
        }) => {}
        other => panic!("cumprod of a scalar: {other:?}"),
    }
    let i1 = Tensor::from_vec(vec![0i32, 1], &[2]);
    match jnp::take_along_axis(&x, &i1, 0).to_array() {
        Err(e @ Error::BadShapeArg { .. }) => {
            assert!(
                e.to_string().contains("[2]") && e.to_string().contains("rank"),
                "{e}"
            );
        }
        other => panic!("take_along_axis rank: {other:?}"),
    }
    let i3 = Tensor::from_vec(vec![0i32; 3], &[1, 3]);
    match jnp::take_along_axis(&x, &i3, 0).to_array() {
        Err(e @ Error::BadShapeArg { .. }) => assert!(e.to_string().contains("[1, 3]"), "{e}"),
        other => panic!("take_along_axis broadcast: {other:?}"),
    }
    let fi = Tensor::from_vec(vec![0.0f32; 2], &[1, 2]);
    assert!(matches!(
        jnp::take_along_axis(&x, &fi, 1).to_array(),
        Err(Error::BadDType {
            op: "take_along_axis",
            ..
        })
    ));
    match jnp::any(&x, 3, false).to_array() {
        Err(Error::BadAxis { axis: 3, .. }) => {}
        other => panic!("any axis 3: {other:?}"),
    }
    let bad = Tensor::from_vec(vec![0.0f32; 3], &[3]);
    assert!(matches!(
        jnp::clip(&x, Some(&bad), None).to_array(),
        Err(Error::ShapeMismatchBinaryOp { .. })
    ));
}
