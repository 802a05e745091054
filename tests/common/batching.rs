//! Oracles for batching: a function traced unbatched on one example at a time, evaluated by the
//! CPU reference interpreter, and the per-example results stacked on the host ([`expected`]);
//! [`check_vmap`] compares `vmap` on every GPU device with it.

use brigade::{Array, HostArray, HostData, Tensor, jit, reference, vmap};

use super::{Tol, assert_close, device_guard, gpu_devices, host};

/// Entry `i` along `axis` of `h`, that axis removed.
pub fn index_axis(h: &HostArray, axis: usize, i: usize) -> HostArray {
    let n = h.shape[axis];
    assert!(i < n, "index {i} outside axis {axis} of {:?}", h.shape);
    let outer: usize = h.shape[..axis].iter().product();
    let inner: usize = h.shape[axis + 1..].iter().product();
    let mut vals = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for k in 0..inner {
            vals.push(h.data.get((o * n + i) * inner + k));
        }
    }
    let mut shape = h.shape.clone();
    shape.remove(axis);
    HostArray::new(shape, HostData::from_scalars(h.dtype(), vals)).unwrap()
}

/// Equally shaped arrays stacked along a new axis at `axis`.
pub fn stack(parts: &[HostArray], axis: usize) -> HostArray {
    let shape = parts[0].shape.clone();
    for p in parts {
        assert_eq!(p.shape, shape, "stacking arrays of different shapes");
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis..].iter().product();
    let mut vals = Vec::with_capacity(outer * inner * parts.len());
    for o in 0..outer {
        for p in parts {
            for k in 0..inner {
                vals.push(p.data.get(o * inner + k));
            }
        }
    }
    let mut out_shape = shape;
    out_shape.insert(axis, parts.len());
    HostArray::new(out_shape, HostData::from_scalars(parts[0].dtype(), vals)).unwrap()
}

pub fn to_array(h: &HostArray) -> Array {
    Array::from_host_array(h.clone()).unwrap()
}

/// The mapped size of `args` under `in_axes` (they must agree).
pub fn batch_size(args: &[HostArray], in_axes: &[Option<usize>]) -> usize {
    let sizes: Vec<usize> = args
        .iter()
        .zip(in_axes)
        .filter_map(|(h, a)| a.map(|a| h.shape[a]))
        .collect();
    assert!(!sizes.is_empty(), "the test maps no argument");
    assert!(
        sizes.iter().all(|&s| s == sizes[0]),
        "mapped sizes {sizes:?}"
    );
    sizes[0]
}

/// One out axis per output (a single entry applies to all).
pub fn per_output(out_axes: &[Option<usize>], n: usize) -> Vec<Option<usize>> {
    if out_axes.len() == 1 {
        vec![out_axes[0]; n]
    } else {
        assert_eq!(out_axes.len(), n, "out_axes entries");
        out_axes.to_vec()
    }
}

/// The expected batched outputs: `f` traced unbatched (jit) on each example and evaluated by the
/// CPU reference interpreter, the results stacked along their out axis (an out axis None requires
/// all examples to agree and returns that value once).
pub fn expected<F>(
    f: &F,
    args: &[Array],
    in_axes: &[Option<usize>],
    out_axes: &[Option<usize>],
) -> Vec<HostArray>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let hosts: Vec<HostArray> = args.iter().map(host).collect();
    let b = batch_size(&hosts, in_axes);
    let mut per: Vec<Vec<HostArray>> = Vec::with_capacity(b);
    for i in 0..b {
        let ex: Vec<HostArray> = hosts
            .iter()
            .zip(in_axes)
            .map(|(h, a)| match a {
                Some(a) => index_axis(h, *a, i),
                None => h.clone(),
            })
            .collect();
        let ex_arrays: Vec<Array> = ex.iter().map(to_array).collect();
        let g = jit(f)
            .graph(&ex_arrays)
            .unwrap_or_else(|e| panic!("tracing example {i} unbatched: {e}"));
        per.push(
            reference::eval_graph(&g, &ex)
                .unwrap_or_else(|e| panic!("reference of example {i}: {e}\n{g}")),
        );
    }
    let n = per[0].len();
    per_output(out_axes, n)
        .into_iter()
        .enumerate()
        .map(|(k, ax)| {
            let parts: Vec<HostArray> = per.iter().map(|o| o[k].clone()).collect();
            match ax {
                Some(a) => stack(&parts, a),
                None => {
                    for (i, p) in parts.iter().enumerate() {
                        assert_close(
                            p,
                            &parts[0],
                            Tol::EXACT,
                            &format!("output {k}, example {i}"),
                        );
                    }
                    parts[0].clone()
                }
            }
        })
        .collect()
}

/// Run `vmap(f)` with these axes on every GPU device and compare every output with [`expected`].
/// Returns the expected outputs.
pub fn check_vmap<F>(
    what: &str,
    f: F,
    in_axes: &[Option<usize>],
    out_axes: &[Option<usize>],
    args: &[Array],
    tol: Tol,
) -> Vec<HostArray>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let want = expected(&f, args, in_axes, out_axes);
    let shapes: Vec<String> = args
        .iter()
        .map(|a| format!("{}{:?}", a.dtype(), a.shape()))
        .collect();
    for dev in gpu_devices() {
        let _guard = device_guard(&dev);
        let v = vmap(&f).in_axes(in_axes).out_axes(out_axes).on(&dev);
        let outs = v
            .call(args)
            .unwrap_or_else(|e| panic!("{what} on {}: vmap call failed: {e}", dev.name()));
        assert_eq!(outs.len(), want.len(), "{what}: number of outputs");
        for (k, (o, w)) in outs.iter().zip(&want).enumerate() {
            assert_close(
                &host(o),
                w,
                tol,
                &format!(
                    "{what} on {}: output {k} (args {shapes:?}, in_axes {in_axes:?}, out_axes {out_axes:?})",
                    dev.name()
                ),
            );
        }
    }
    want
}
