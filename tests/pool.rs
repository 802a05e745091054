//! `reduce_window` (sum, max, min) and the pools of `brigade::nn` on the Vulkan and GL devices
//! against the CPU reference (`check_on_all`), and the reference's answers against numbers printed
//! by JAX 0.10.2 for the same calls (`scripts/jax_pool_vectors.py`, stored in
//! `tests/data/jax_pool.rs`): forward values and gradients of `sum(pool(x) * ct)`, ties included
//! (the max-pool gradient goes to each window's first maximum). Max/min results must match
//! exactly; sums and averages (at most 9 terms) within 1e-5 relative + 1e-6 absolute, f32 against
//! the reference's f64 accumulation and against JAX's f32. Gradients are also checked against f64
//! central differences on tie-free inputs (`tests/common/fd.rs`, 1e-5), vmap against per-example
//! evaluation, and bad parameters against their typed errors.

mod common;
#[path = "data/jax_pool.rs"]
mod jax;

use brigade::nn::{self, Layout, Padding};
use brigade::{Array, DType, Error, HostArray, Tensor, Window, WindowOp, grad};
use common::batching::check_vmap;
use common::fd::{assert_fd, central_diff};
use common::*;

/// Window sums of at most a few dozen f32 terms (the reference accumulates in f64).
const SUMS: Tol = Tol {
    rtol: 1e-5,
    atol: 1e-6,
};

fn af(bits: &[u32], shape: &[usize]) -> Array {
    Array::from_vec(bits.iter().map(|&b| f32::from_bits(b)).collect(), shape).unwrap()
}

/// A float result against JAX's bits: same shape, within `tol`.
fn like_jax(got: &HostArray, bits: &[u32], shape: &[usize], tol: Tol, what: &str) {
    let want = HostArray::from_vec(bits.iter().map(|&b| f32::from_bits(b)).collect(), shape)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_close(
        got,
        &want,
        tol,
        &format!("{what}: brigade's reference vs JAX"),
    );
}

type Vec3<'a> = (&'a [u32], &'a [usize]);

/// `f` and the gradient of `sum(f(x) * ct)` on every GPU device against the reference, and the
/// reference against JAX's `y` and `g`.
fn against_jax(
    what: &str,
    f: &dyn Fn(&Tensor) -> Tensor,
    x: Vec3<'_>,
    ct: Vec3<'_>,
    y: Vec3<'_>,
    g: Vec3<'_>,
    tol: Tol,
) {
    let got = check_on_all(
        |t: &[Tensor]| {
            let loss = |u: &[Tensor]| vec![(&f(&u[0]) * &u[1]).sum_all()];
            let gr = grad(loss).apply(t);
            vec![f(&t[0]), gr[0].clone()]
        },
        &[af(x.0, x.1), af(ct.0, ct.1)],
        tol,
    );
    like_jax(&got[0], y.0, y.1, tol, &format!("{what} forward"));
    like_jax(&got[1], g.0, g.1, tol, &format!("{what} gradient"));
}

fn x() -> Vec3<'static> {
    (jax::X, jax::X_SHAPE)
}

#[test]
fn max_pool_matches_jax_nchw() {
    against_jax(
        "max_pool 2x2 stride 2 VALID",
        &|x| nn::max_pool(x, &[2, 2], &[2, 2], &Padding::Valid, Layout::Nchw),
        x(),
        (jax::MAX_VALID_2X2_S2_CT, jax::MAX_VALID_2X2_S2_CT_SHAPE),
        (jax::MAX_VALID_2X2_S2_Y, jax::MAX_VALID_2X2_S2_Y_SHAPE),
        (jax::MAX_VALID_2X2_S2_G, jax::MAX_VALID_2X2_S2_G_SHAPE),
        Tol::EXACT,
    );
    against_jax(
        "max_pool 3x3 stride (2, 1) SAME",
        &|x| nn::max_pool(x, &[3, 3], &[2, 1], &Padding::Same, Layout::Nchw),
        x(),
        (jax::MAX_SAME_3X3_S21_CT, jax::MAX_SAME_3X3_S21_CT_SHAPE),
        (jax::MAX_SAME_3X3_S21_Y, jax::MAX_SAME_3X3_S21_Y_SHAPE),
        (jax::MAX_SAME_3X3_S21_G, jax::MAX_SAME_3X3_S21_G_SHAPE),
        // Overlapping windows: a cell's gradient sums up to 6 cotangents.
        SUMS,
    );
}

#[test]
fn max_pool_matches_jax_nhwc() {
    against_jax(
        "max_pool NHWC 3x3 stride 2 SAME",
        &|x| nn::max_pool(x, &[3, 3], &[2, 2], &Padding::Same, Layout::Nhwc),
        (jax::XH, jax::XH_SHAPE),
        (
            jax::NHWC_MAX_SAME_3X3_S2_CT,
            jax::NHWC_MAX_SAME_3X3_S2_CT_SHAPE,
        ),
        (
            jax::NHWC_MAX_SAME_3X3_S2_Y,
            jax::NHWC_MAX_SAME_3X3_S2_Y_SHAPE,
        ),
        (
            jax::NHWC_MAX_SAME_3X3_S2_G,
            jax::NHWC_MAX_SAME_3X3_S2_G_SHAPE,
        ),
        SUMS,
    );
}

#[test]
fn max_pool_ties_go_to_the_first_maximum_as_in_jax() {
    against_jax(
        "max_pool ties 3x3 stride 1",
        &|x| nn::max_pool(x, &[3, 3], &[1, 1], &Padding::Valid, Layout::Nchw),
        (jax::TIES, jax::TIES_SHAPE),
        (jax::TIES_MAX_3X3_S1_CT, jax::TIES_MAX_3X3_S1_CT_SHAPE),
        (jax::TIES_MAX_3X3_S1_Y, jax::TIES_MAX_3X3_S1_Y_SHAPE),
        (jax::TIES_MAX_3X3_S1_G, jax::TIES_MAX_3X3_S1_G_SHAPE),
        SUMS,
    );
    against_jax(
        "max_pool ties 2x2 stride 1 padding (1, 0), (0, 1)",
        &|x| {
            nn::max_pool(
                x,
                &[2, 2],
                &[1, 1],
                &Padding::Explicit(vec![(1, 0), (0, 1)]),
                Layout::Nchw,
            )
        },
        (jax::TIES, jax::TIES_SHAPE),
        (jax::TIES_MAX_2X2_PAD_CT, jax::TIES_MAX_2X2_PAD_CT_SHAPE),
        (jax::TIES_MAX_2X2_PAD_Y, jax::TIES_MAX_2X2_PAD_Y_SHAPE),
        (jax::TIES_MAX_2X2_PAD_G, jax::TIES_MAX_2X2_PAD_G_SHAPE),
        SUMS,
    );
}

#[test]
fn avg_and_sum_pool_match_jax() {
    against_jax(
        "avg_pool 3x3 stride (2, 1) SAME, padding counted",
        &|x| nn::avg_pool(x, &[3, 3], &[2, 1], &Padding::Same, Layout::Nchw, true),
        x(),
        (jax::AVG_SAME_3X3_S21_CT, jax::AVG_SAME_3X3_S21_CT_SHAPE),
        (jax::AVG_SAME_3X3_S21_Y, jax::AVG_SAME_3X3_S21_Y_SHAPE),
        (jax::AVG_SAME_3X3_S21_G, jax::AVG_SAME_3X3_S21_G_SHAPE),
        SUMS,
    );
    against_jax(
        "avg_pool 3x3 stride (2, 1) SAME, real cells counted",
        &|x| nn::avg_pool(x, &[3, 3], &[2, 1], &Padding::Same, Layout::Nchw, false),
        x(),
        (jax::AVGV_SAME_3X3_S21_CT, jax::AVGV_SAME_3X3_S21_CT_SHAPE),
        (jax::AVGV_SAME_3X3_S21_Y, jax::AVGV_SAME_3X3_S21_Y_SHAPE),
        (jax::AVGV_SAME_3X3_S21_G, jax::AVGV_SAME_3X3_S21_G_SHAPE),
        SUMS,
    );
    against_jax(
        "avg_pool 2x2 stride 2 VALID",
        &|x| nn::avg_pool(x, &[2, 2], &[2, 2], &Padding::Valid, Layout::Nchw, true),
        x(),
        (jax::AVG_VALID_2X2_S2_CT, jax::AVG_VALID_2X2_S2_CT_SHAPE),
        (jax::AVG_VALID_2X2_S2_Y, jax::AVG_VALID_2X2_S2_Y_SHAPE),
        (jax::AVG_VALID_2X2_S2_G, jax::AVG_VALID_2X2_S2_G_SHAPE),
        SUMS,
    );
    against_jax(
        "sum_pool 2x3 stride 1 SAME",
        &|x| nn::sum_pool(x, &[2, 3], &[1, 1], &Padding::Same, Layout::Nchw),
        x(),
        (jax::SUM_SAME_2X3_S1_CT, jax::SUM_SAME_2X3_S1_CT_SHAPE),
        (jax::SUM_SAME_2X3_S1_Y, jax::SUM_SAME_2X3_S1_Y_SHAPE),
        (jax::SUM_SAME_2X3_S1_G, jax::SUM_SAME_2X3_S1_G_SHAPE),
        SUMS,
    );
}

#[test]
fn reduce_window_1d_matches_jax() {
    let x1 = (jax::X1, jax::X1_SHAPE);
    let pad1 = [(0, 0), (2, 1), (0, 0)];
    for (op, ct, y, g) in [
        (
            WindowOp::Sum,
            (jax::R1_SUM_PAD_CT, jax::R1_SUM_PAD_CT_SHAPE),
            (jax::R1_SUM_PAD_Y, jax::R1_SUM_PAD_Y_SHAPE),
            (jax::R1_SUM_PAD_G, jax::R1_SUM_PAD_G_SHAPE),
        ),
        (
            WindowOp::Max,
            (jax::R1_MAX_PAD_CT, jax::R1_MAX_PAD_CT_SHAPE),
            (jax::R1_MAX_PAD_Y, jax::R1_MAX_PAD_Y_SHAPE),
            (jax::R1_MAX_PAD_G, jax::R1_MAX_PAD_G_SHAPE),
        ),
        (
            WindowOp::Min,
            (jax::R1_MIN_PAD_CT, jax::R1_MIN_PAD_CT_SHAPE),
            (jax::R1_MIN_PAD_Y, jax::R1_MIN_PAD_Y_SHAPE),
            (jax::R1_MIN_PAD_G, jax::R1_MIN_PAD_G_SHAPE),
        ),
    ] {
        against_jax(
            &format!("reduce_window {op:?} window 3 stride 2 padding (2, 1)"),
            &|x| x.reduce_window(op, &[1, 3, 1], &[1, 2, 1], &pad1),
            x1,
            ct,
            y,
            g,
            SUMS,
        );
    }
    let dil = |pad: (usize, usize), dims: usize, stride: usize, bd: usize, wd: usize| Window {
        dims: vec![1, dims, 1],
        strides: vec![1, stride, 1],
        padding: vec![(0, 0), pad, (0, 0)],
        base_dilation: vec![1, bd, 1],
        window_dilation: vec![1, wd, 1],
    };
    let w = dil((1, 2), 2, 3, 2, 3);
    against_jax(
        "reduce_window sum, base dilation 2, window dilation 3",
        &|x| x.reduce_window_dilated(WindowOp::Sum, &w),
        x1,
        (jax::R1_SUM_DIL_CT, jax::R1_SUM_DIL_CT_SHAPE),
        (jax::R1_SUM_DIL_Y, jax::R1_SUM_DIL_Y_SHAPE),
        (jax::R1_SUM_DIL_G, jax::R1_SUM_DIL_G_SHAPE),
        SUMS,
    );
    let w = dil((1, 1), 3, 2, 2, 1);
    against_jax(
        "reduce_window max, base dilation 2",
        &|x| x.reduce_window_dilated(WindowOp::Max, &w),
        x1,
        (jax::R1_MAX_BASE_DIL_CT, jax::R1_MAX_BASE_DIL_CT_SHAPE),
        (jax::R1_MAX_BASE_DIL_Y, jax::R1_MAX_BASE_DIL_Y_SHAPE),
        (jax::R1_MAX_BASE_DIL_G, jax::R1_MAX_BASE_DIL_G_SHAPE),
        SUMS,
    );
    // Window dilation of max: JAX has no VJP for it, so the forward only (the gradient is checked
    // against finite differences below).
    let w = dil((1, 1), 3, 1, 1, 2);
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].reduce_window_dilated(WindowOp::Max, &w)],
        &[af(x1.0, x1.1)],
        Tol::EXACT,
    );
    like_jax(
        &got[0],
        jax::R1_MAX_WIN_DIL_Y,
        jax::R1_MAX_WIN_DIL_Y_SHAPE,
        Tol::EXACT,
        "reduce_window max, window dilation 2",
    );
}

#[test]
fn integer_reduce_window_matches_jax() {
    let xi = Array::from_vec(jax::XI.to_vec(), jax::XI_SHAPE).unwrap();
    let got = check_on_all(
        |t: &[Tensor]| {
            let pad = [(1, 0), (1, 1)];
            vec![
                t[0].reduce_window(WindowOp::Max, &[2, 3], &[1, 2], &pad),
                t[0].reduce_window(WindowOp::Sum, &[2, 3], &[1, 2], &pad),
            ]
        },
        &[xi],
        Tol::EXACT,
    );
    assert_eq!(got[0].shape.as_slice(), jax::I_MAX_SHAPE);
    assert_eq!(
        got[0].to_vec::<i32>().unwrap(),
        jax::I_MAX,
        "i32 max vs JAX"
    );
    assert_eq!(
        got[1].to_vec::<i32>().unwrap(),
        jax::I_SUM,
        "i32 sum vs JAX"
    );
}

/// Every op, dtype and geometry on the devices against the reference: 1-d to 3-d, strides,
/// overlapping windows, padding, base and window dilation, and an elementwise prologue fused into
/// the kernel's load.
#[test]
fn reduce_window_on_devices_matches_the_reference() {
    let cases: Vec<(Vec<usize>, Window)> = vec![
        (vec![7], Window::new(&[3], &[1], &[(0, 0)])),
        (vec![10], Window::new(&[4], &[3], &[(2, 3)])),
        (
            vec![9],
            Window {
                dims: vec![3],
                strides: vec![2],
                padding: vec![(1, 2)],
                base_dilation: vec![3],
                window_dilation: vec![2],
            },
        ),
        (
            vec![2, 6, 5],
            Window::new(&[1, 3, 2], &[1, 2, 1], &[(0, 0), (1, 1), (0, 1)]),
        ),
        (
            vec![4, 5],
            Window {
                dims: vec![2, 2],
                strides: vec![1, 2],
                padding: vec![(2, 0), (1, 1)],
                base_dilation: vec![2, 1],
                window_dilation: vec![1, 3],
            },
        ),
        (
            vec![2, 3, 4, 3],
            Window::new(
                &[1, 2, 2, 2],
                &[1, 1, 2, 1],
                &[(0, 0), (1, 0), (0, 0), (1, 1)],
            ),
        ),
    ];
    for (k, (shape, w)) in cases.iter().enumerate() {
        for dt in [DType::F32, DType::I32, DType::U32] {
            let x = rand_of(dt, shape, 100 + k as u64);
            let ops = [WindowOp::Sum, WindowOp::Max, WindowOp::Min];
            check_on_all(
                |t: &[Tensor]| {
                    let mut outs: Vec<Tensor> = ops
                        .iter()
                        .map(|&op| t[0].reduce_window_dilated(op, w))
                        .collect();
                    // A prologue inlined into the window loop.
                    let p = &(&t[0] * &t[0]) + &t[0];
                    outs.push(p.reduce_window_dilated(WindowOp::Max, w));
                    outs
                },
                &[x],
                SUMS,
            );
        }
    }
}

/// The max/min gradient kernel (select_and_scatter_add) on the devices against the reference,
/// over the same geometries, with ties.
#[test]
fn select_and_scatter_on_devices_matches_the_reference() {
    let cases: Vec<(Vec<usize>, Window)> = vec![
        (vec![8], Window::new(&[3], &[2], &[(1, 1)])),
        (
            vec![9],
            Window {
                dims: vec![3],
                strides: vec![2],
                padding: vec![(1, 2)],
                base_dilation: vec![2],
                window_dilation: vec![2],
            },
        ),
        (
            vec![2, 5, 6],
            Window::new(&[1, 3, 3], &[1, 2, 1], &[(0, 0), (1, 1), (1, 1)]),
        ),
    ];
    for (k, (shape, w)) in cases.iter().enumerate() {
        let out = w.out_shape("test", shape).unwrap();
        // Ties: values from {-1, 0, 1, 2}.
        let ties: Vec<f32> = i32s(numel(shape), 40 + k as u64, -1, 2)
            .into_iter()
            .map(|v| v as f32)
            .collect();
        let x = Array::from_vec(ties, shape).unwrap();
        let ct = rand_f32(&out, 60 + k as u64);
        for op in [WindowOp::Max, WindowOp::Min] {
            check_on_all(
                |t: &[Tensor]| {
                    let loss =
                        |u: &[Tensor]| vec![(&u[0].reduce_window_dilated(op, w) * &u[1]).sum_all()];
                    vec![grad(loss).apply(t)[0].clone()]
                },
                &[x.clone(), ct.clone()],
                SUMS,
            );
        }
    }
}

/// Gradients on the Vulkan device against f64 central differences, on tie-free inputs (distinct
/// values at least 0.03 apart, so a step of 1e-5 never changes a window's maximum).
#[test]
fn gradients_match_finite_differences() {
    let dev = device_of("vulkan");
    let distinct = |shape: &[usize], seed: u64| {
        let n = numel(shape);
        let mut v: Vec<f32> = (0..n).map(|i| -1.5 + 3.0 * i as f32 / n as f32).collect();
        let mut r = Lcg::new(seed);
        for i in (1..n).rev() {
            v.swap(i, r.next_u32() as usize % (i + 1));
        }
        Array::from_vec(v, shape).unwrap()
    };
    type Pool = Box<dyn Fn(&Tensor) -> Tensor>;
    let cases: Vec<(&str, Vec<usize>, Pool)> = vec![
        (
            "max_pool 3x3 stride 2 SAME",
            vec![1, 2, 5, 5],
            Box::new(|x| nn::max_pool(x, &[3, 3], &[2, 2], &Padding::Same, Layout::Nchw)),
        ),
        (
            "avg_pool 2x3 stride 1 SAME, real cells",
            vec![1, 4, 5, 2],
            Box::new(|x| nn::avg_pool(x, &[2, 3], &[1, 1], &Padding::Same, Layout::Nhwc, false)),
        ),
        (
            "min, window dilation 2, padding (1, 2)",
            vec![2, 7],
            Box::new(|x| {
                x.reduce_window_dilated(
                    WindowOp::Min,
                    &Window {
                        dims: vec![1, 3],
                        strides: vec![1, 1],
                        padding: vec![(0, 0), (1, 2)],
                        base_dilation: vec![1, 1],
                        window_dilation: vec![1, 2],
                    },
                )
            }),
        ),
        (
            "sum, base dilation 2, window dilation 2, stride 3",
            vec![2, 6],
            Box::new(|x| {
                x.reduce_window_dilated(
                    WindowOp::Sum,
                    &Window {
                        dims: vec![2, 3],
                        strides: vec![1, 3],
                        padding: vec![(1, 0), (4, 1)],
                        base_dilation: vec![1, 2],
                        window_dilation: vec![1, 2],
                    },
                )
            }),
        ),
    ];
    for (k, (name, shape, f)) in cases.iter().enumerate() {
        let x = distinct(shape, 7 + k as u64);
        let y = f(&Tensor::from(x.clone()));
        let r = rand_f32(y.shape(), 90 + k as u64);
        let loss = |t: &[Tensor]| vec![(&f(&t[0]) * &t[1]).sum_all()];
        let g = grad(loss)
            .on(&dev)
            .call(&[x.clone(), r.clone()])
            .unwrap_or_else(|e| panic!("{name}: grad failed: {e}"));
        let fd = central_diff(&loss, &[x, r], 0);
        assert!(fd.iter().any(|v| v.abs() > 1e-2), "{name}: vacuous check");
        assert_fd(
            &host(&g[0]),
            &fd,
            &format!("{name}: gradient vs f64 differences"),
        );
    }
}

#[test]
fn vmap_matches_per_example_evaluation() {
    // x: (3 examples, 1, 2, 5, 4) mapped over axis 0; each example an NCHW batch of one image.
    let x = rand_f32(&[3, 1, 2, 5, 4], 5);
    let ct = rand_f32(&[1, 2, 3, 2], 6);
    check_vmap(
        "max/avg pool and the max-pool gradient",
        |t: &[Tensor]| {
            let mp = |x: &Tensor| nn::max_pool(x, &[3, 2], &[2, 2], &Padding::Same, Layout::Nchw);
            let loss = |u: &[Tensor]| vec![(&mp(&u[0]) * &u[1]).sum_all()];
            vec![
                mp(&t[0]),
                nn::avg_pool(&t[0], &[2, 2], &[1, 1], &Padding::Valid, Layout::Nchw, true),
                grad(loss).apply(t)[0].clone(),
            ]
        },
        &[Some(0), None],
        &[Some(0)],
        &[x, ct],
        SUMS,
    );
    // A batch axis in the middle, and a batched cotangent.
    let x = rand_f32(&[6, 3, 5], 8);
    let ct = rand_f32(&[3, 3, 3], 9);
    check_vmap(
        "reduce_window min and its gradient, mapped over axis 1",
        |t: &[Tensor]| {
            let f =
                |x: &Tensor| x.reduce_window(WindowOp::Min, &[3, 2], &[2, 2], &[(0, 1), (1, 0)]);
            let loss = |u: &[Tensor]| vec![(&f(&u[0]) * &u[1]).sum_all()];
            vec![f(&t[0]), grad(loss).apply(t)[0].clone()]
        },
        &[Some(1), Some(0)],
        &[Some(0)],
        &[x, ct],
        SUMS,
    );
}

fn err_of(t: &Tensor) -> Error {
    match t.to_vec::<f32>() {
        Err(e) => e,
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

/// A window longer than the padded input fits nowhere: JAX 0.10.2 gives an empty axis,
/// `reduce_window(x(2, 5), window (1, 7), padding ((0, 0), (1, 0))).shape == (2, 0)`, and a zero
/// gradient; so does brigade, on both adapters and the reference, for every window op.
#[test]
fn a_window_longer_than_the_input_gives_an_empty_axis_as_jax() {
    let x = rand_f32(&[2, 5], 1);
    for op in [WindowOp::Sum, WindowOp::Max, WindowOp::Min] {
        let f = move |t: &Tensor| t.reduce_window(op, &[1, 7], &[1, 1], &[(0, 0), (1, 0)]);
        let out = check_on_all(
            move |a: &[Tensor]| vec![f(&a[0])],
            std::slice::from_ref(&x),
            Tol::EXACT,
        );
        assert_eq!(out[0].shape, vec![2, 0], "{op:?}");
        let loss = move |a: &[Tensor]| vec![(f(&a[0]) * 3.0).sum_all()];
        let g = check_on_all(
            move |a: &[Tensor]| grad(loss).apply(a),
            std::slice::from_ref(&x),
            Tol::EXACT,
        );
        assert_eq!(g[0].shape, vec![2, 5], "{op:?}");
        assert!(
            g[0].to_f64().iter().all(|&v| v == 0.0),
            "{op:?}: {:?}",
            g[0]
        );
    }
}

#[test]
fn bad_windows_are_typed_errors() {
    let x = Tensor::from(rand_f32(&[2, 5], 1));
    let e = err_of(&x.reduce_window(WindowOp::Sum, &[2], &[1], &[(0, 0)]));
    assert!(
        matches!(&e, Error::BadShapeArg { op: "reduce_window_sum", shape, .. } if shape == &[2, 5]),
        "{e}"
    );
    assert!(e.to_string().contains("rank 2"), "{e}");
    let e = err_of(&x.reduce_window(WindowOp::Max, &[1, 2], &[1, 0], &[(0, 0), (0, 0)]));
    assert!(e.to_string().contains("window stride 0 on axis 1"), "{e}");
    let b = Tensor::from(rand_bool(&[4], 2));
    let e = err_of(&b.reduce_window(WindowOp::Max, &[2], &[1], &[(0, 0)]));
    assert!(
        matches!(
            e,
            Error::BadDType {
                dtype: DType::Bool,
                ..
            }
        ),
        "{e}"
    );
    let i = Tensor::from(rand_i32(&[1, 1, 4], 3, -5, 5));
    let e = err_of(&nn::avg_pool(
        &i,
        &[2],
        &[1],
        &Padding::Valid,
        Layout::Nchw,
        true,
    ));
    assert!(matches!(e, Error::BadDType { op: "avg_pool", .. }), "{e}");
    let e = err_of(&nn::max_pool(
        &x,
        &[2, 2],
        &[1, 1],
        &Padding::Valid,
        Layout::Nchw,
    ));
    assert!(
        matches!(e, Error::BadShapeArg { op: "max_pool", .. }),
        "{e}"
    );
    let e = err_of(&nn::max_pool(
        &Tensor::from(rand_f32(&[1, 1, 4], 4)),
        &[2],
        &[1],
        &Padding::Explicit(vec![(0, 0), (1, 1)]),
        Layout::Nchw,
    ));
    assert!(
        e.to_string().contains("2 padding pairs for 1 spatial axes"),
        "{e}"
    );
}

/// Second order: the gradient of `sum(grad_x(sum(pool(x) * c)) * r)` with respect to `c` is
/// `select_and_gather(r, x)` (each window reads `r` at its first maximum); on every device against
/// the reference, and on Vulkan against the same derivative computed on the host (tie-free `x`;
/// finite differences cannot run here: `grad` takes f32 arguments only, and the inner gradient
/// would see f64 ones).
#[test]
fn second_order_max_and_min_pool_gradients() {
    let x = Array::from_vec(
        (0..40)
            .map(|i| ((i * 17) % 40) as f32 * 0.05 - 1.0)
            .collect(),
        &[1, 2, 4, 5],
    )
    .unwrap();
    let c = rand_f32(&[1, 2, 2, 3], 12);
    let r = rand_f32(&[1, 2, 4, 5], 13);
    for op in [WindowOp::Max, WindowOp::Min] {
        let pool = move |x: &Tensor| {
            x.reduce_window(
                op,
                &[1, 1, 2, 3],
                &[1, 1, 2, 2],
                &[(0, 0), (0, 0), (0, 0), (1, 1)],
            )
        };
        let outer = move |t: &[Tensor]| {
            let inner = |u: &[Tensor]| vec![(&pool(&u[0]) * &u[1]).sum_all()];
            let gx = grad(inner).apply(&t[..2]);
            vec![(&gx[0] * &t[2]).sum_all()]
        };
        let args = [x.clone(), c.clone(), r.clone()];
        check_on_all(
            |t: &[Tensor]| grad(outer).argnums(&[1, 2]).apply(t),
            &args,
            SUMS,
        );
        // The same derivative on the host: outer is linear in c, with coefficient r at the first
        // max (min) of x in each window (window 2x3, stride 2, one padding column on each side).
        let xs = host(&x).to_vec::<f32>().unwrap();
        let rs = host(&r).to_vec::<f32>().unwrap();
        let mut want = Vec::new();
        for ch in 0..2 {
            for oh in 0..2 {
                for ow in 0..3 {
                    let mut best: Option<(f32, usize)> = None;
                    for kh in 0..2 {
                        for kw in 0..3 {
                            let (h, w) = (oh * 2 + kh, (ow * 2 + kw) as i64 - 1);
                            if !(0..5).contains(&w) {
                                continue;
                            }
                            let i = (ch * 4 + h) * 5 + w as usize;
                            let better = match best {
                                None => true,
                                Some((b, _)) if op == WindowOp::Max => xs[i] > b,
                                Some((b, _)) => xs[i] < b,
                            };
                            if better {
                                best = Some((xs[i], i));
                            }
                        }
                    }
                    want.push(rs[best.unwrap().1]);
                }
            }
        }
        let g = grad(outer)
            .argnums(&[1])
            .on(&device_of("vulkan"))
            .call(&args)
            .unwrap_or_else(|e| panic!("{op:?}: second-order grad failed: {e}"));
        assert_f32s(
            &host(&g[0]),
            &want,
            Tol::EXACT,
            &format!("{op:?} pool: d/dc of the gradient vs the host"),
        );
    }
}

/// The generated kernels parse and validate with naga (all flags and capabilities), for every op
/// and dtype, with a fused prologue and through the gradient, without a device.
#[test]
fn kernels_are_valid_wgsl() {
    use brigade::device::DeviceLimits;
    use brigade::jit;
    let limits = DeviceLimits::from_wgpu(&wgpu::Limits::default());
    let w = Window {
        dims: vec![1, 3, 2],
        strides: vec![1, 2, 1],
        padding: vec![(0, 0), (1, 2), (1, 0)],
        base_dilation: vec![1, 2, 1],
        window_dilation: vec![1, 1, 2],
    };
    let mut kernels = 0;
    for dt in [DType::F32, DType::I32, DType::U32] {
        let x = rand_of(dt, &[2, 5, 4], 3);
        let f = |t: &[Tensor]| {
            let mut outs: Vec<Tensor> = [WindowOp::Sum, WindowOp::Max, WindowOp::Min]
                .iter()
                .map(|&op| t[0].reduce_window_dilated(op, &w))
                .collect();
            outs.push((&t[0] + &t[0]).reduce_window_dilated(WindowOp::Max, &w));
            if t[0].dtype() == DType::F32 {
                let loss =
                    |u: &[Tensor]| vec![u[0].reduce_window_dilated(WindowOp::Max, &w).sum_all()];
                outs.push(grad(loss).apply(t)[0].clone());
            }
            outs
        };
        let g = jit(f).graph(&[x]).unwrap();
        let p = brigade::lower::lower(&g, &limits).unwrap();
        for l in &p.launches {
            if !(l.label.contains("window") || l.label.contains("select_and_scatter")) {
                continue;
            }
            let module = naga::front::wgsl::parse_str(&l.wgsl).unwrap_or_else(|e| {
                panic!("{}: {}\n{}", l.label, e.emit_to_string(&l.wgsl), l.wgsl)
            });
            naga::valid::Validator::new(
                naga::valid::ValidationFlags::all(),
                naga::valid::Capabilities::all(),
            )
            .validate(&module)
            .unwrap_or_else(|e| panic!("{}: {}\n{}", l.label, e.emit_to_string(&l.wgsl), l.wgsl));
            kernels += 1;
        }
    }
    // 4 reduce_window kernels per dtype, and the f32 gradient's select_and_scatter_add.
    assert!(kernels >= 13, "{kernels} window kernels lowered");
}
