//! Sorting (`argsort` primitive; `Tensor::sort`, `argsort`, `top_k`, `ops::sort::sort`,
//! `jnp::sort`, `jnp::argsort`) on the Vulkan and GL devices against the CPU reference
//! (`check_on_all`: integer results exact, float results bit-exact in value and NaN), and the
//! reference's answers against numbers printed by JAX 0.10.2 for the same inputs
//! (`scripts/jax_sort_vectors.py`, stored in `tests/data/jax_sort.rs`): indices and integers must
//! match exactly, floats bit for bit (NaN for NaN, the sign of zeros). Also: the multi-pass path on
//! one long row, vmap of sort/argsort, gradients of functions of sorted values against f64 central
//! differences, and the typed errors.

mod common;
#[path = "data/jax_sort.rs"]
mod jax;

use brigade::numpy as jnp;
use brigade::ops::sort as lax;
use brigade::{Array, Error, HostArray, Tensor, grad};
use common::batching::check_vmap;
use common::fd::{assert_fd, central_diff};
use common::*;

fn af(bits: &[u32], shape: &[usize]) -> Array {
    Array::from_vec(bits.iter().map(|&b| f32::from_bits(b)).collect(), shape).unwrap()
}
fn a<T: brigade::Element>(v: &[T], shape: &[usize]) -> Array {
    Array::from_vec(v.to_vec(), shape).unwrap()
}

/// The four JAX inputs.
fn inputs() -> Vec<(&'static str, Array)> {
    vec![
        ("F", af(jax::XF, jax::XF_SHAPE)),
        ("I", a(jax::XI, jax::XI_SHAPE)),
        ("U", a(jax::XU, jax::XU_SHAPE)),
        ("B", a(jax::XB, jax::XB_SHAPE)),
    ]
}

/// `got` against JAX's output: same shape and dtype; floats by bits (NaN sign included), others
/// by value.
fn like_jax(got: &HostArray, want: &Array, what: &str) {
    let w = host(want);
    assert_eq!(got.shape, w.shape, "{what}: shape");
    assert_eq!(got.dtype(), w.dtype(), "{what}: dtype");
    match (got.to_vec::<f32>(), w.to_vec::<f32>()) {
        (Ok(g), Ok(wv)) => {
            for (k, (x, y)) in g.iter().zip(&wv).enumerate() {
                let same = if y.is_nan() {
                    x.is_nan() && x.is_sign_negative() == y.is_sign_negative()
                } else {
                    x.to_bits() == y.to_bits()
                };
                assert!(same, "{what}[{k}]: brigade {x:?}, JAX {y:?}\nbrigade {g:?}");
            }
        }
        _ => assert_eq!(got.data, w.data, "{what}"),
    }
}

#[test]
fn sort_argsort_top_k_match_jax_on_every_device() {
    for (name, x) in inputs() {
        let f = |t: &[Tensor]| {
            let (v, i) = t[0].top_k(4);
            vec![
                t[0].sort(1),
                t[0].sort(0),
                t[0].argsort(1),
                t[0].argsort(0),
                jnp::argsort(&t[0], Some(-1), true),
                jnp::sort(&t[0], Some(-1), true),
                v,
                i,
            ]
        };
        let got = check_on_all(f, std::slice::from_ref(&x), Tol::EXACT);
        let want = expected(name);
        for (k, (g, (what, w))) in got.iter().zip(&want).enumerate() {
            like_jax(g, w, &format!("{name}: output {k} ({what})"));
        }
    }
}

/// JAX's outputs for input `name`, in the order the test computes them.
fn expected(name: &str) -> Vec<(&'static str, Array)> {
    match name {
        "F" => vec![
            ("sort 1", af(jax::SORT_F1, jax::SORT_F1_SHAPE)),
            ("sort 0", af(jax::SORT_F0, jax::SORT_F0_SHAPE)),
            ("argsort 1", a(jax::ARGSORT_F1, jax::ARGSORT_F1_SHAPE)),
            ("argsort 0", a(jax::ARGSORT_F0, jax::ARGSORT_F0_SHAPE)),
            (
                "argsort desc",
                a(jax::ARGSORT_DESC_F1, jax::ARGSORT_DESC_F1_SHAPE),
            ),
            ("sort desc", af(jax::SORT_DESC_F1, jax::SORT_DESC_F1_SHAPE)),
            (
                "top_k values",
                af(jax::TOPK_F_VALUES, jax::TOPK_F_VALUES_SHAPE),
            ),
            (
                "top_k indices",
                a(jax::TOPK_F_INDICES, jax::TOPK_F_INDICES_SHAPE),
            ),
        ],
        "I" => vec![
            ("sort 1", a(jax::SORT_I1, jax::SORT_I1_SHAPE)),
            ("sort 0", a(jax::SORT_I0, jax::SORT_I0_SHAPE)),
            ("argsort 1", a(jax::ARGSORT_I1, jax::ARGSORT_I1_SHAPE)),
            ("argsort 0", a(jax::ARGSORT_I0, jax::ARGSORT_I0_SHAPE)),
            (
                "argsort desc",
                a(jax::ARGSORT_DESC_I1, jax::ARGSORT_DESC_I1_SHAPE),
            ),
            ("sort desc", a(jax::SORT_DESC_I1, jax::SORT_DESC_I1_SHAPE)),
            (
                "top_k values",
                a(jax::TOPK_I_VALUES, jax::TOPK_I_VALUES_SHAPE),
            ),
            (
                "top_k indices",
                a(jax::TOPK_I_INDICES, jax::TOPK_I_INDICES_SHAPE),
            ),
        ],
        "U" => vec![
            ("sort 1", a(jax::SORT_U1, jax::SORT_U1_SHAPE)),
            ("sort 0", a(jax::SORT_U0, jax::SORT_U0_SHAPE)),
            ("argsort 1", a(jax::ARGSORT_U1, jax::ARGSORT_U1_SHAPE)),
            ("argsort 0", a(jax::ARGSORT_U0, jax::ARGSORT_U0_SHAPE)),
            (
                "argsort desc",
                a(jax::ARGSORT_DESC_U1, jax::ARGSORT_DESC_U1_SHAPE),
            ),
            ("sort desc", a(jax::SORT_DESC_U1, jax::SORT_DESC_U1_SHAPE)),
            (
                "top_k values",
                a(jax::TOPK_U_VALUES, jax::TOPK_U_VALUES_SHAPE),
            ),
            (
                "top_k indices",
                a(jax::TOPK_U_INDICES, jax::TOPK_U_INDICES_SHAPE),
            ),
        ],
        _ => vec![
            ("sort 1", a(jax::SORT_B1, jax::SORT_B1_SHAPE)),
            ("sort 0", a(jax::SORT_B0, jax::SORT_B0_SHAPE)),
            ("argsort 1", a(jax::ARGSORT_B1, jax::ARGSORT_B1_SHAPE)),
            ("argsort 0", a(jax::ARGSORT_B0, jax::ARGSORT_B0_SHAPE)),
            (
                "argsort desc",
                a(jax::ARGSORT_DESC_B1, jax::ARGSORT_DESC_B1_SHAPE),
            ),
            ("sort desc", a(jax::SORT_DESC_B1, jax::SORT_DESC_B1_SHAPE)),
            (
                "top_k values",
                a(jax::TOPK_B_VALUES, jax::TOPK_B_VALUES_SHAPE),
            ),
            (
                "top_k indices",
                a(jax::TOPK_B_INDICES, jax::TOPK_B_INDICES_SHAPE),
            ),
        ],
    }
}

#[test]
fn flattened_and_several_keys_match_jax() {
    let x = af(jax::XF, jax::XF_SHAPE);
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                jnp::sort(&t[0], None, false),
                jnp::argsort(&t[0], None, false),
            ]
        },
        std::slice::from_ref(&x),
        Tol::EXACT,
    );
    like_jax(
        &got[0],
        &af(jax::SORT_F_FLAT, jax::SORT_F_FLAT_SHAPE),
        "sort flat",
    );
    like_jax(
        &got[1],
        &a(jax::ARGSORT_F_FLAT, jax::ARGSORT_F_FLAT_SHAPE),
        "argsort flat",
    );
    // lax.sort((xi, xf, xu), dimension=1, num_keys=2).
    let args = [a(jax::XI, jax::XI_SHAPE), x, a(jax::XU, jax::XU_SHAPE)];
    let got = check_on_all(|t: &[Tensor]| lax::sort(t, 1, 2), &args, Tol::EXACT);
    like_jax(
        &got[0],
        &a(jax::LAX2_K0, jax::LAX2_K0_SHAPE),
        "lax.sort key 0",
    );
    like_jax(
        &got[1],
        &af(jax::LAX2_K1, jax::LAX2_K1_SHAPE),
        "lax.sort key 1",
    );
    like_jax(
        &got[2],
        &a(jax::LAX2_V, jax::LAX2_V_SHAPE),
        "lax.sort carried",
    );
}

/// Random data with many ties and special floats, every dtype, shapes with odd rows, rows of one,
/// many rows, and a sorted axis that is not the last.
#[test]
fn random_shapes_and_dtypes_agree_with_the_reference() {
    let shapes: &[(&[usize], i64)] = &[
        (&[1], 0),
        (&[7], 0),
        (&[5, 1], 1),
        (&[3, 33], 1),
        (&[33, 3], 0),
        (&[2, 17, 3], 1),
        (&[600, 5], 1),
        (&[4, 1000], -1),
        (&[0, 4], 1),
    ];
    for (k, &(shape, axis)) in shapes.iter().enumerate() {
        let n = numel(shape);
        let seed = 100 + k as u64;
        // Few distinct values (ties) and every special float.
        let specials = [
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
        ];
        let fv: Vec<f32> = i32s(n, seed, -4, 4)
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                if i % 5 == 3 {
                    specials[i % 6]
                } else {
                    v as f32 * 0.25
                }
            })
            .collect();
        let args = [
            a(&fv, shape),
            a(&i32s(n, seed + 1, -3, 3), shape),
            a(&u32s(n, seed + 2, 0, 5), shape),
            rand_bool(shape, seed + 3),
        ];
        check_on_all(
            move |t: &[Tensor]| {
                let mut out = Vec::new();
                for x in t {
                    out.push(x.argsort(axis));
                    out.push(x.argsort_order(axis, true));
                    out.push(x.sort(axis));
                }
                out
            },
            &args,
            Tol::EXACT,
        );
    }
}

/// One row of 2^18: 18 merge passes over global memory; checked against the reference and, on
/// the host, that the result is a permutation ordering the keys.
#[test]
fn one_long_row_takes_the_multi_pass_path() {
    const N: usize = 1 << 18;
    let keys: Vec<f32> = f32s(N, 7, -1000.0, 1000.0)
        .into_iter()
        .map(|v| v.round())
        .collect();
    let x = a(&keys, &[N]);
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].argsort(0), t[0].sort(0)],
        std::slice::from_ref(&x),
        Tol::EXACT,
    );
    let perm = got[0].to_vec::<i32>().unwrap();
    let mut seen = vec![false; N];
    for w in perm.windows(2) {
        let (p, q) = (w[0] as usize, w[1] as usize);
        assert!(
            keys[p] < keys[q] || (keys[p] == keys[q] && p < q),
            "not a stable ascending order at {p}, {q}"
        );
    }
    for &p in &perm {
        seen[p as usize] = true;
    }
    assert!(seen.iter().all(|&s| s), "not a permutation");
}

#[test]
fn vmap_of_sort_and_argsort() {
    let x = rand_f32(&[4, 9, 3], 31);
    for axis in [0usize, 1, 2] {
        check_vmap(
            "sort/argsort",
            move |t: &[Tensor]| {
                let ax = axis.min(1) as i64;
                vec![t[0].sort(ax), t[0].argsort(ax), t[0].top_k(2).1]
            },
            &[Some(axis)],
            &[Some(0), Some(0), Some(0)],
            std::slice::from_ref(&x),
            Tol::EXACT,
        );
    }
    // A key batched, a carried operand not: lax.sort broadcasts the carried one.
    let k = rand_i32(&[3, 6], 32, -2, 2);
    let v = rand_f32(&[6], 33);
    check_vmap(
        "lax.sort batched keys",
        |t: &[Tensor]| lax::sort(t, 0, 1),
        &[Some(0), None],
        &[Some(0), Some(0)],
        &[k, v],
        Tol::EXACT,
    );
}

/// Gradients of functions of sorted values (sort, top_k, jnp.sort descending) against f64 central
/// differences; the weights make every position matter. Values are distinct, so the permutation
/// is locally constant.
/// A scalar loss of (x, weights).
type Loss = fn(&[Tensor]) -> Vec<Tensor>;

#[test]
fn grad_through_sort_matches_finite_differences() {
    let x = rand_f32(&[3, 7], 41);
    let w = rand_f32(&[3, 7], 42);
    let losses: [(&str, Loss); 3] = [
        ("sort", |t| vec![(&t[0].sort(1).square() * &t[1]).sum_all()]),
        ("top_k", |t| {
            let (v, _) = t[0].top_k(3);
            vec![(&v.sin() * &t[1].slice_axis(1, 0, 3)).sum_all()]
        }),
        ("jnp.sort axis 0 descending", |t| {
            vec![(&jnp::sort(&t[0], Some(0), true).exp() * &t[1]).sum_all()]
        }),
    ];
    for (name, loss) in losses {
        let fd = central_diff(&loss, &[x.clone(), w.clone()], 0);
        for dev in gpu_devices() {
            let _guard = device_guard(&dev);
            let g = grad(loss)
                .on(&dev)
                .call(&[x.clone(), w.clone()])
                .unwrap_or_else(|e| panic!("grad of {name} on {}: {e}", dev.name()));
            assert_fd(
                &host(&g[0]),
                &fd,
                &format!("grad of {name} on {}", dev.name()),
            );
        }
    }
}

/// Sorting along an empty axis keeps the operand's shape, as in JAX 0.10.2 (`jnp.sort`,
/// `lax.sort`, `jnp.take_along_axis` of a `(2, 0)` array along axis 1 are all `(2, 0)`): `sort`
/// gathers with `take_along_axis`, whose result has the broadcast shape of the array and the
/// indices on the other axes and the indices' length on `axis`, here `[2, 0]`, not `take`'s
/// `[2] ++ [2, 0] ++ []`. The broadcasting forms follow the same rule: `(1, 0)` with indices
/// `(3, 0)` is `(3, 0)`, `(3, 0, 2)` with `(1, 0, 1)` is `(3, 0, 2)` (JAX prints these shapes too),
/// in every mode. The gradient of a sum of the sorted values has the operand's shape.
#[test]
fn sorting_along_an_empty_axis_keeps_the_shape() {
    let mut devs = gpu_devices();
    devs.extend(devices_with("cpu:1"));
    let e = |shape: &[usize]| Array::from_vec(Vec::<f32>::new(), shape).unwrap();
    let ei = |shape: &[usize]| Array::from_vec(Vec::<i32>::new(), shape).unwrap();
    let got = check_on(
        &devs,
        |t: &[Tensor]| {
            let x = &t[0];
            let mut out = vec![
                x.sort(1),
                x.sort(0),
                x.argsort(1),
                jnp::sort(x, Some(1), false),
                jnp::sort(x, Some(-1), true),
                jnp::argsort(x, Some(1), true),
                jnp::take_along_axis(x, &t[1], 1),
                jnp::take_along_axis(&t[2], &t[3], 1),
                jnp::take_along_axis(&t[4], &t[5], 1),
                jnp::take_along_axis_mode(&t[4], &t[5], 1, brigade::TakeMode::Clip, None),
                jnp::take_along_axis(&t[1], &t[1], 1),
                grad(|u: &[Tensor]| vec![u[0].sort(1).sum_all()]).apply(&t[..1])[0].clone(),
            ];
            out.extend(lax::sort(&[x.clone(), x.clone()], 1, 1));
            out
        },
        &[
            e(&[2, 0]),
            ei(&[2, 0]),
            e(&[1, 0]),
            ei(&[3, 0]),
            e(&[3, 0, 2]),
            ei(&[1, 0, 1]),
        ],
        Tol::EXACT,
    );
    let want: [&[usize]; 14] = [
        &[2, 0],
        &[2, 0],
        &[2, 0],
        &[2, 0],
        &[2, 0],
        &[2, 0],
        &[2, 0],
        &[3, 0],
        &[3, 0, 2],
        &[3, 0, 2],
        &[2, 0],
        &[2, 0],
        &[2, 0],
        &[2, 0],
    ];
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.shape, w, "output {k}");
    }
    assert_eq!(
        got[10].dtype(),
        brigade::DType::I32,
        "take_along_axis of i32"
    );
}

#[test]
fn errors_are_typed_and_name_the_sizes() {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let msg = |e: &Error| e.to_string();
    let e = x.sort(2).error().cloned().expect("an error");
    assert!(
        matches!(
            e,
            Error::BadAxis {
                axis: 2,
                rank: 2,
                ..
            }
        ),
        "{e}"
    );
    let e = x.argsort(-3).error().cloned().expect("an error");
    assert!(matches!(e, Error::BadAxis { axis: -3, .. }), "{e}");
    let (v, i) = x.top_k(4);
    let e = v.error().cloned().expect("an error");
    assert!(matches!(e, Error::BadShapeArg { op: "top_k", .. }), "{e}");
    assert!(msg(&e).contains("k = 4") && msg(&e).contains('3'), "{e}");
    assert!(i.error().is_some());
    let e = Tensor::scalar(1.0f32)
        .top_k(1)
        .0
        .error()
        .cloned()
        .expect("an error");
    assert!(matches!(e, Error::BadShapeArg { op: "top_k", .. }), "{e}");
    // k = 0 is allowed, as in JAX: empty results.
    let (v, i) = x.top_k(0);
    assert_eq!(v.shape(), &[2, 0]);
    assert_eq!(i.to_vec::<i32>().unwrap(), Vec::<i32>::new());
    // lax.sort: num_keys, shapes.
    let y = Tensor::from_vec(vec![1i32, 2, 3], &[3]);
    let e = lax::sort(&[x.clone(), x.clone()], 0, 3)[0]
        .error()
        .cloned()
        .expect("an error");
    assert!(matches!(e, Error::BadShapeArg { op: "sort", .. }), "{e}");
    assert!(msg(&e).contains("num_keys = 3"), "{e}");
    let e = lax::sort(&[x.clone(), y], 0, 1)[1]
        .error()
        .cloned()
        .expect("an error");
    assert!(msg(&e).contains("[3]") && msg(&e).contains("[2, 3]"), "{e}");
    // f64 keys sort on the host but are refused on a GPU, with the fix.
    let dev = device_of("vulkan");
    let e = brigade::jit(|t: &[Tensor]| vec![t[0].argsort(0)])
        .on(&dev)
        .call(&[a(&[2.0f64, 1.0], &[2])])
        .unwrap_err();
    assert!(matches!(e, Error::BadDType { .. }), "{e}");
}

#[test]
fn host_and_eager_results_and_printing() {
    // Eager (no device): the CPU reference.
    let x = Tensor::from_vec(vec![3.0f64, -1.0, f64::NAN, -0.0, 0.0, -2.0], &[6]);
    assert_eq!(
        x.argsort(0).to_vec::<i32>().unwrap(),
        vec![5, 1, 3, 4, 0, 2]
    );
    let g = brigade::jit(|t: &[Tensor]| vec![t[0].argsort_order(1, true)])
        .graph(&[a(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2])])
        .unwrap();
    let printed = g.to_string();
    assert!(
        printed.contains("argsort[dimension=1 descending=true order=sort]"),
        "{printed}"
    );
}

/// `jnp.sort`/`jnp.argsort` descending and flattened forms against the reference on the devices.
#[test]
fn numpy_forms_agree_with_the_reference() {
    let x = rand_i32(&[5, 4, 3], 51, -2, 2);
    check_on_all(
        |t: &[Tensor]| {
            vec![
                jnp::sort(&t[0], Some(0), true),
                jnp::argsort(&t[0], Some(1), true),
                jnp::argsort(&t[0], None, true),
                jnp::sort(&t[0], None, false),
            ]
        },
        std::slice::from_ref(&x),
        Tol::EXACT,
    );
}

// ---- device limits ------------------------------------------------------------------------------

/// The llvmpipe adapter of `backend` (Vulkan: lavapipe; GL: llvmpipe) with its limits lowered to
/// 4 storage buffers per stage, 1 MiB bindings and 2 MiB buffers, attached as a brigade device
/// (the app's own wgpu device, as `tests/embed_device.rs` makes them).
fn lowered_device(backend: wgpu::Backends) -> brigade::Device {
    let (_instance, adapter) = common::app::adapter_of(backend);
    let mut limits = adapter.limits();
    limits.max_storage_buffers_per_shader_stage = 4;
    limits.max_storage_buffer_binding_size = 1 << 20;
    limits.max_buffer_size = 2 << 20;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("sort limits"),
        required_limits: limits,
        ..Default::default()
    }))
    .unwrap_or_else(|e| panic!("request_device on {backend:?} failed: {e}"));
    brigade::Device::from_wgpu(adapter.get_info(), device, queue)
        .unwrap_or_else(|e| panic!("from_wgpu on {backend:?}: {e}"))
}

/// `f` on `dev` against the CPU reference: every result equal (sorts only move values).
fn exact_on(dev: &brigade::Device, f: fn(&[Tensor]) -> Vec<Tensor>, args: &[Array], what: &str) {
    let hosts: Vec<HostArray> = args.iter().map(host).collect();
    let graph = brigade::jit(f).graph(args).unwrap();
    let want = brigade::reference::eval_graph(&graph, &hosts).unwrap();
    let got = brigade::jit(f)
        .on(dev)
        .call(args)
        .unwrap_or_else(|e| panic!("{what} on {}: {e}", dev.name()));
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(host(g), *w, "{what} on {}: result {k}", dev.name());
    }
}

/// The `Error::OverLimit` of running `f` on `dev`, checked to name the device and `limit_name`.
fn over_limit(
    dev: &brigade::Device,
    f: fn(&[Tensor]) -> Vec<Tensor>,
    args: &[Array],
    limit_name: &str,
) -> (u64, u64, String) {
    match brigade::jit(f).on(dev).call(args) {
        Err(
            e @ Error::OverLimit {
                needed,
                limit,
                limit_name: name,
                ..
            },
        ) => {
            let msg = e.to_string();
            assert_eq!(name, limit_name, "{msg}");
            assert!(msg.contains(dev.name()), "the device is named: {msg}");
            (needed, limit, msg)
        }
        other => panic!(
            "{}: expected Error::OverLimit ({limit_name}), got {other:?}",
            dev.name()
        ),
    }
}

/// Keys `0..k` of shape `[2, 50]` (f32, i32, u32, then f32 again), with many ties so that every
/// key decides some order.
fn keys(k: usize) -> Vec<Array> {
    (0..k)
        .map(|j| match j % 3 {
            0 => {
                let v = f32s(100, 31 + j as u64, -3.0, 3.0);
                a(&v.iter().map(|x| x.round()).collect::<Vec<f32>>(), &[2, 50])
            }
            1 => rand_i32(&[2, 50], 31 + j as u64, -2, 3),
            _ => rand_u32(&[2, 50], 31 + j as u64, 0, 3),
        })
        .collect()
}

fn sort_by_3_keys(x: &[Tensor]) -> Vec<Tensor> {
    lax::sort(x, 1, 3)
}
fn sort_by_4_keys(x: &[Tensor]) -> Vec<Tensor> {
    lax::sort(x, 1, 4)
}
fn argsort_last(x: &[Tensor]) -> Vec<Tensor> {
    vec![x[0].argsort(-1)]
}

/// More keys than the stage's storage buffers allow, and a merge-sort state larger than one
/// binding, are `Error::OverLimit` naming the sizes and the limit (not a wgpu validation error),
/// on both adapters with lowered limits; one key fewer, and the largest state that fits, run and
/// agree with the reference.
#[test]
fn over_limit_sorts_are_typed_errors_on_both_adapters() {
    for backend in [wgpu::Backends::VULKAN, wgpu::Backends::GL] {
        let dev = lowered_device(backend);
        let _gl = device_guard(&dev);
        let what = dev.name().to_string();
        assert_eq!(
            dev.limits().max_storage_buffers_per_shader_stage,
            4,
            "{what}"
        );
        // 3 keys: the first pass binds 3 keys and the sort state, 4 buffers.
        exact_on(&dev, sort_by_3_keys, &keys(3), "lax.sort by 3 keys");
        // 4 keys: 5 buffers.
        let (needed, limit, msg) = over_limit(
            &dev,
            sort_by_4_keys,
            &keys(4),
            "max_storage_buffers_per_shader_stage",
        );
        assert_eq!((needed, limit), (5, 4), "{msg}");
        assert!(
            msg.contains("by 4 keys") && msg.contains("at most 3 keys") && msg.contains("[2, 50]"),
            "{msg}"
        );
        // One key: 2 words of 4 bytes per element; 131072 elements are exactly the 1 MiB binding.
        let fits = rand_f32_in(&[131072], 7, -100.0, 100.0);
        exact_on(&dev, argsort_last, &[fits], "argsort of 131072 elements");
        let over = rand_f32_in(&[131073], 8, -100.0, 100.0);
        let (needed, limit, msg) = over_limit(
            &dev,
            argsort_last,
            &[over],
            "max_storage_buffer_binding_size",
        );
        assert_eq!((needed, limit), (131073 * 8, 1 << 20), "{msg}");
        assert!(
            msg.contains("[131073]") && msg.contains("2 4-byte words"),
            "{msg}"
        );
        // The device still runs after the refusals.
        exact_on(&dev, sort_by_3_keys, &keys(3), "lax.sort by 3 keys again");
    }
}

/// The temporary is checked against the smaller of the binding and buffer limits, naming the one
/// it exceeds (planned without a device: the lowering is what refuses).
#[test]
fn the_sort_state_is_checked_against_the_buffer_limit() {
    let mut limits = brigade::device::DeviceLimits::from_wgpu(&wgpu::Limits::default());
    limits.max_storage_buffer_binding_size = 4 << 20;
    limits.max_buffer_size = 1 << 20;
    let x = rand_f32_in(&[1000, 200], 9, -1.0, 1.0);
    let graph = brigade::jit(argsort_last).graph(&[x]).unwrap();
    let Err(e) = brigade::lower::lower(&graph, &limits) else {
        panic!("a sort state of 1.6 MB over a 1 MiB buffer limit was planned");
    };
    match &e {
        Error::OverLimit {
            needed,
            limit,
            limit_name,
            ..
        } => {
            assert_eq!(
                (*needed, *limit, *limit_name),
                (1000 * 200 * 8, 1 << 20, "max_buffer_size"),
                "{e}"
            );
        }
        other => panic!("expected Error::OverLimit, got {other:?}"),
    }
    // Under the default limits the same program plans.
    let limits = brigade::device::DeviceLimits::from_wgpu(&wgpu::Limits::default());
    assert!(brigade::lower::lower(&graph, &limits).is_ok());
}
