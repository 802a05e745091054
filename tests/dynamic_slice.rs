//! `Tensor::dynamic_slice` and `Tensor::dynamic_update_slice` (JAX's `lax.dynamic_slice` and
//! `lax.dynamic_update_slice`): starts computed at run time, clamped so the block lies inside the
//! operand. Checked on every device against the reference and against host indexing written out
//! here (the oracle: loops over the block with JAX's clamping rule), under `grad` (host-derived
//! cotangents: the block of the weights, the weights outside the block), `vmap` (per-example
//! starts, against the function on one example at a time) and inside a `fori_loop`.

mod common;

use brigade::{Array, DType, Error, Tensor, fori_loop, grad, jit};
use common::batching::check_vmap;
use common::{Tol, assert_f32s, check_on_all, f32s, gpu_devices, host};

const SHAPE: [usize; 3] = [4, 5, 3];

/// Row-major offset of `idx` in `shape`.
fn offset(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |o, (&i, &n)| o * n + i)
}

/// Every multi-index of `shape`, row-major.
fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let mut out = vec![vec![]];
    for &n in shape {
        out = out
            .into_iter()
            .flat_map(|p| {
                (0..n).map(move |i| {
                    let mut q = p.clone();
                    q.push(i);
                    q
                })
            })
            .collect();
    }
    out
}

/// JAX's rule for a start: a negative one counts from the end once, then it is clamped into
/// `[0, dim - size]`.
fn clamp(start: i64, dim: usize, size: usize) -> usize {
    let s = if start < 0 { start + dim as i64 } else { start };
    s.clamp(0, (dim - size) as i64) as usize
}

fn host_slice(x: &[f32], shape: &[usize], starts: &[i64], sizes: &[usize]) -> Vec<f32> {
    let s: Vec<usize> = (0..shape.len())
        .map(|k| clamp(starts[k], shape[k], sizes[k]))
        .collect();
    indices(sizes)
        .iter()
        .map(|b| {
            let at: Vec<usize> = b.iter().zip(&s).map(|(i, o)| i + o).collect();
            x[offset(&at, shape)]
        })
        .collect()
}

fn host_update(x: &[f32], shape: &[usize], u: &[f32], sizes: &[usize], starts: &[i64]) -> Vec<f32> {
    let s: Vec<usize> = (0..shape.len())
        .map(|k| clamp(starts[k], shape[k], sizes[k]))
        .collect();
    let mut out = x.to_vec();
    for b in indices(sizes) {
        let at: Vec<usize> = b.iter().zip(&s).map(|(i, o)| i + o).collect();
        out[offset(&at, shape)] = u[offset(&b, sizes)];
    }
    out
}

fn starts_of(t: &[Tensor]) -> Vec<Tensor> {
    t.to_vec()
}

#[test]
fn dynamic_slice_and_update_match_host_indexing_on_every_device() {
    let x = f32s(60, 1, -5.0, 5.0);
    let sizes = [2usize, 3, 3];
    let u = f32s(18, 2, 10.0, 20.0);
    // Inside, at the far corner, negative (from the end, then clamped), far below the start
    // (clamped to 0) and past the end (clamped back).
    for starts in [
        [1i64, 1, 0],
        [2, 2, 0],
        [-3, 0, -1],
        [-1, -4, -3],
        [-50, -6, 0],
        [7, 4, 2],
        [0, 9, 0],
    ] {
        let f = |t: &[Tensor]| {
            let st = starts_of(&t[2..]);
            vec![
                t[0].dynamic_slice(&st, &sizes),
                t[0].dynamic_update_slice(&t[1], &st),
            ]
        };
        let mut args = vec![
            Array::from_vec(x.clone(), &SHAPE).unwrap(),
            Array::from_vec(u.clone(), &sizes).unwrap(),
        ];
        args.extend(starts.iter().map(|&s| Array::scalar(s as i32)));
        let got = check_on_all(f, &args, Tol::EXACT);
        let what = format!("starts {starts:?}");
        assert_f32s(
            &got[0],
            &host_slice(&x, &SHAPE, &starts, &sizes),
            Tol::EXACT,
            &what,
        );
        assert_eq!(got[0].shape, sizes.to_vec(), "{what}");
        assert_f32s(
            &got[1],
            &host_update(&x, &SHAPE, &u, &sizes, &starts),
            Tol::EXACT,
            &what,
        );
    }
    // u32 starts: a huge one clamps to the last position, not to 0.
    let f = |t: &[Tensor]| {
        vec![t[0].dynamic_slice(&[t[1].clone(), t[2].clone(), t[3].clone()], &[1, 2, 3])]
    };
    let args = [
        Array::from_vec(x.clone(), &SHAPE).unwrap(),
        Array::scalar(u32::MAX),
        Array::scalar(1u32),
        Array::scalar(0u32),
    ];
    let got = check_on_all(f, &args, Tol::EXACT);
    assert_f32s(
        &got[0],
        &host_slice(&x, &SHAPE, &[3, 1, 0], &[1, 2, 3]),
        Tol::EXACT,
        "u32 starts",
    );
    // Integers and a block the size of the operand.
    let xi: Vec<i32> = (0..60).map(|v| v * 7 - 100).collect();
    let f = |t: &[Tensor]| {
        let st = starts_of(&t[1..]);
        vec![t[0].dynamic_slice(&st, &[4, 1, 3])]
    };
    let mut args = vec![Array::from_vec(xi.clone(), &SHAPE).unwrap()];
    args.extend([5i32, 3, 2].iter().map(|&s| Array::scalar(s)));
    let got = check_on_all(f, &args, Tol::EXACT);
    let xf: Vec<f32> = xi.iter().map(|&v| v as f32).collect();
    let want: Vec<i32> = host_slice(&xf, &SHAPE, &[5, 3, 2], &[4, 1, 3])
        .iter()
        .map(|&v| v as i32)
        .collect();
    assert_eq!(got[0].to_vec::<i32>().unwrap(), want);
}

#[test]
fn gradients_go_to_the_block_and_around_it() {
    let x = f32s(60, 3, -1.0, 1.0);
    let sizes = [2usize, 2, 3];
    let w = f32s(12, 4, -2.0, 2.0);
    let v = f32s(60, 5, -2.0, 2.0);
    let u = f32s(12, 6, -1.0, 1.0);
    let starts = [3i64, 1, 5];
    let start_args: Vec<Array> = starts.iter().map(|&s| Array::scalar(s as i32)).collect();
    // d/dx sum(w * dynamic_slice(x)) = w placed at the (clamped) block, zero elsewhere.
    let s: Vec<usize> = (0..3)
        .map(|k| clamp(starts[k], SHAPE[k], sizes[k]))
        .collect();
    let mut want_dx = vec![0f32; 60];
    for b in indices(&sizes) {
        let at: Vec<usize> = b.iter().zip(&s).map(|(i, o)| i + o).collect();
        want_dx[offset(&at, &SHAPE)] = w[offset(&b, &sizes)];
    }
    // d/dx sum(v * dynamic_update_slice(x, u)) = v outside the block; d/du = v inside it.
    let mut want_dx2 = v.clone();
    let mut want_du = vec![0f32; 12];
    for b in indices(&sizes) {
        let at: Vec<usize> = b.iter().zip(&s).map(|(i, o)| i + o).collect();
        want_dx2[offset(&at, &SHAPE)] = 0.0;
        want_du[offset(&b, &sizes)] = v[offset(&at, &SHAPE)];
    }
    for dev in gpu_devices() {
        let _g = common::device_guard(&dev);
        let g = grad(|t: &[Tensor]| {
            let st = starts_of(&t[2..]);
            vec![(&t[0].dynamic_slice(&st, &sizes) * &t[1]).sum_all()]
        })
        .on(&dev);
        let mut args = vec![
            Array::from_vec(x.clone(), &SHAPE).unwrap(),
            Array::from_vec(w.clone(), &sizes).unwrap(),
        ];
        args.extend(start_args.iter().cloned());
        let got = g.call(&args).unwrap();
        assert_f32s(
            &host(&got[0]),
            &want_dx,
            Tol::EXACT,
            &format!("dx on {}", dev.name()),
        );
        let g = grad(|t: &[Tensor]| {
            let st = starts_of(&t[3..]);
            vec![(&t[0].dynamic_update_slice(&t[1], &st) * &t[2]).sum_all()]
        })
        .argnums(&[0, 1])
        .on(&dev);
        let mut args = vec![
            Array::from_vec(x.clone(), &SHAPE).unwrap(),
            Array::from_vec(u.clone(), &sizes).unwrap(),
            Array::from_vec(v.clone(), &SHAPE).unwrap(),
        ];
        args.extend(start_args.iter().cloned());
        let got = g.call(&args).unwrap();
        let on = dev.name();
        assert_f32s(
            &host(&got[0]),
            &want_dx2,
            Tol::EXACT,
            &format!("update dx on {on}"),
        );
        assert_f32s(
            &host(&got[1]),
            &want_du,
            Tol::EXACT,
            &format!("update du on {on}"),
        );
    }
}

#[test]
fn per_example_starts_under_vmap_and_a_sliding_window_in_a_loop() {
    let f = |t: &[Tensor]| {
        vec![
            t[0].dynamic_slice(&[t[1].clone(), t[2].clone()], &[2, 2]),
            t[0].dynamic_update_slice(&t[3], &[t[2].clone(), t[1].clone()]),
        ]
    };
    let x = Array::from_vec(f32s(6 * 4 * 5, 7, -1.0, 1.0), &[6, 4, 5]).unwrap();
    let r = Array::from_vec(vec![0i32, 3, -1, 2, 1, 9], &[6]).unwrap();
    let c = Array::from_vec(vec![4i32, 0, 2, 1, 3, -2], &[6]).unwrap();
    let u = Array::from_vec(f32s(4, 8, 5.0, 6.0), &[2, 2]).unwrap();
    check_vmap(
        "batched operand and starts",
        f,
        &[Some(0), Some(0), Some(0), None],
        &[Some(0), Some(0)],
        &[x, r, c, u.clone()],
        Tol::EXACT,
    );
    let x1 = Array::from_vec(f32s(4 * 5, 9, -1.0, 1.0), &[4, 5]).unwrap();
    check_vmap(
        "shared operand, batched starts",
        f,
        &[None, Some(0), None, None],
        &[Some(0), Some(0)],
        &[
            x1,
            Array::from_vec(vec![2i32, 0, 3], &[3]).unwrap(),
            Array::scalar(1i32),
            u,
        ],
        Tol::EXACT,
    );
    // Sums of a sliding window of 3 along a 10-vector: sum over i of sum(x[i..i + 3]).
    let xs = f32s(10, 10, -1.0, 1.0);
    let f = |t: &[Tensor]| {
        let x = t[0].clone();
        fori_loop(
            0,
            8,
            |i, acc| vec![&acc[0] + &x.dynamic_slice(std::slice::from_ref(i), &[3]).sum_all()],
            &[Tensor::scalar(0.0f32)],
        )
    };
    let got = check_on_all(
        f,
        &[Array::from_vec(xs.clone(), &[10]).unwrap()],
        Tol::ARITH,
    );
    let want: f64 = (0..8)
        .map(|i| xs[i..i + 3].iter().map(|&v| v as f64).sum::<f64>())
        .sum();
    assert_f32s(&got[0], &[want as f32], Tol::ARITH, "sliding window");
}

#[test]
fn bad_starts_and_blocks_are_typed_errors() {
    let x = Tensor::from_vec(f32s(12, 11, -1.0, 1.0), &[3, 4]);
    let i = Tensor::scalar(1i32);
    let err = |t: Tensor| t.to_array().unwrap_err();
    let e = err(x.dynamic_slice(std::slice::from_ref(&i), &[1, 1]));
    assert!(
        matches!(
            &e,
            Error::BadShapeArg {
                op: "dynamic_slice",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("rank 2"), "{e}");
    let e = err(x.dynamic_slice(&[i.clone(), i.clone()], &[2, 5]));
    assert!(matches!(&e, Error::BadShapeArg { .. }), "{e:?}");
    assert!(
        e.to_string().contains("[2, 5]") && e.to_string().contains("[3, 4]"),
        "{e}"
    );
    let e = err(x.dynamic_slice(&[i.clone(), Tensor::scalar(1.0f32)], &[1, 1]));
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
    let e = err(x.dynamic_slice(&[i.clone(), Tensor::from_vec(vec![1i32, 2], &[2])], &[1, 1]));
    assert!(matches!(&e, Error::BadShapeArg { .. }), "{e:?}");
    let e = err(x.dynamic_update_slice(&Tensor::zeros(&[2], DType::F32), &[i.clone(), i.clone()]));
    assert!(
        matches!(
            &e,
            Error::BadShapeArg {
                op: "dynamic_update_slice",
                ..
            }
        ),
        "{e:?}"
    );
    let e =
        err(x.dynamic_update_slice(&Tensor::zeros(&[1, 1], DType::I32), &[i.clone(), i.clone()]));
    assert!(matches!(&e, Error::DTypeMismatch { .. }), "{e:?}");
    // Under jit the call returns the error.
    let e = jit(|t: &[Tensor]| vec![t[0].dynamic_slice(&[t[1].clone()], &[5])])
        .call(&[
            Array::from_vec(f32s(4, 12, 0.0, 1.0), &[4]).unwrap(),
            Array::scalar(0i32),
        ])
        .unwrap_err();
    assert!(matches!(&e, Error::BadShapeArg { .. }), "{e:?}");
}
