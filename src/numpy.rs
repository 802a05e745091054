//! `jax.numpy` functions built from brigade's existing primitives.
//!
//! Every function here is a composite: it calls [`Tensor`] ops (elementwise, reductions, pad,
//! slice, take, ...), so `jit`, `grad` and `vmap` handle it through its parts and no backend needs
//! anything new. Errors surface like every op's: a failed tensor carrying a typed [`Error`].
//!
//! ```
//! use brigade::{Tensor, numpy as jnp};
//! let x = Tensor::from_vec(vec![1i32, 2, 3, 4], &[4]);
//! assert_eq!(jnp::cumsum(&x, 0).to_vec::<i32>()?, vec![1, 3, 6, 10]);
//! # Ok::<(), brigade::Error>(())
//! ```

use crate::dtype::{DType, Scalar};
use crate::error::Error;
use crate::tensor::{Axes, Tensor, broadcast_shapes, norm_axis};

/// The first error among `ts`, as a failed tensor.
fn first_error(ts: &[&Tensor]) -> Option<Tensor> {
    ts.iter()
        .find_map(|t| t.error())
        .map(|e| Tensor::failed(e.clone()))
}

/// `jnp.clip(x, lo, hi)`: `minimum(maximum(x, lo), hi)`, broadcasting all three. Either bound may be
/// `None` (no bound on that side). A NaN in `x` stays NaN (and a NaN bound gives NaN), and where
/// `lo > hi` the result is `hi`, as in `jnp.clip`. The bounds are cast to `x`'s dtype first, so a
/// scalar bound behaves like JAX's weakly typed Python scalar (pass `Tensor::scalar(v)`); integer
/// and unsigned dtypes clip too.
///
/// ```
/// use brigade::{Tensor, numpy as jnp};
/// let x = Tensor::from_vec(vec![-2.0f32, 0.5, 3.0, f32::NAN], &[4]);
/// let y = jnp::clip(&x, Some(&Tensor::scalar(0.0f32)), Some(&Tensor::scalar(1.0f32)));
/// let y = y.to_vec::<f32>()?;
/// assert_eq!(&y[..3], &[0.0, 0.5, 1.0]);
/// assert!(y[3].is_nan());
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn clip(x: &Tensor, lo: Option<&Tensor>, hi: Option<&Tensor>) -> Tensor {
    let bounds: Vec<&Tensor> = lo.into_iter().chain(hi).collect();
    let mut all = vec![x];
    all.extend(&bounds);
    if let Some(f) = first_error(&all) {
        return f;
    }
    let dt = x.dtype();
    let mut y = x.clone();
    if let Some(lo) = lo {
        y = y.maximum(&lo.cast(dt));
    }
    if let Some(hi) = hi {
        y = y.minimum(&hi.cast(dt));
    }
    y
}

/// How many elements of `x` are non-zero (true, or NaN for floats, as `x != 0` is) over `axes`.
fn count_nonzero(x: &Tensor, axes: Axes, keepdims: bool) -> Tensor {
    let nz = if x.dtype() == DType::Bool {
        x.clone()
    } else {
        x.ne(&Tensor::zeros(&[], x.dtype()))
    };
    // Sums of bools count them in i32 (see `Tensor::sum`).
    nz.sum(axes, keepdims)
}

/// `jnp.any(x, axes, keepdims=...)`: true where some element over `axes` is true. Non-bool inputs
/// are tested with `x != 0` (so NaN counts as true), as `jnp.any` does. An empty axis gives false.
/// The result is bool.
///
/// ```
/// use brigade::{Axes, Tensor, numpy as jnp};
/// let x = Tensor::from_vec(vec![0.0f32, 0.0, 2.0, 0.0], &[2, 2]);
/// assert_eq!(jnp::any(&x, 1, false).to_vec::<bool>()?, vec![false, true]);
/// assert_eq!(jnp::all(&x, Axes::All, false).to_vec::<bool>()?, vec![false]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn any(x: &Tensor, axes: impl Into<Axes>, keepdims: bool) -> Tensor {
    if let Some(f) = first_error(&[x]) {
        return f;
    }
    count_nonzero(x, axes.into(), keepdims).gt(&Tensor::scalar(0i32))
}

/// `jnp.all(x, axes, keepdims=...)`: true where every element over `axes` is true (`x != 0` for
/// non-bool inputs; NaN counts as true). An empty axis gives true. The result is bool.
pub fn all(x: &Tensor, axes: impl Into<Axes>, keepdims: bool) -> Tensor {
    if let Some(f) = first_error(&[x]) {
        return f;
    }
    let is_zero = if x.dtype() == DType::Bool {
        x.eq(&Tensor::scalar(false))
    } else {
        x.eq(&Tensor::zeros(&[], x.dtype()))
    };
    // NaN == 0 is false, so NaN is "true" here as in jnp.
    is_zero.sum(axes.into(), keepdims).eq(&Tensor::scalar(0i32))
}

/// Inclusive scan of `x` along `axis` with `combine` and its identity `ident`: Hillis-Steele, one
/// round per power of two below the axis length. Round k combines every element with the one
/// `2^k` before it (a slice shifted by padding with the identity), so the scan stays a handful of
/// fused elementwise/layout ops: O(n log n) work and ceil(log2 n) rounds, no host loop and no
/// O(n^2) triangular matmul.
fn scan_axis(
    op: &'static str,
    x: &Tensor,
    axis: i64,
    ident: Scalar,
    combine: fn(&Tensor, &Tensor) -> Tensor,
) -> Tensor {
    if let Some(f) = first_error(&[x]) {
        return f;
    }
    if x.ndim() == 0 {
        return x.fail_with(Error::BadAxis {
            op,
            axis,
            rank: 0,
            shape: vec![],
        });
    }
    let a = match norm_axis(op, axis, x.shape()) {
        Ok(a) => a,
        Err(e) => return x.fail_with(e),
    };
    // jnp accumulates bools in the default integer type.
    let mut y = if x.dtype() == DType::Bool {
        x.cast(DType::I32)
    } else {
        x.clone()
    };
    let n = x.shape()[a];
    let rank = x.ndim();
    let mut shift = 1usize;
    while shift < n {
        let mut lo = vec![0; rank];
        lo[a] = shift;
        let shifted =
            y.slice_axis(a as i64, 0, n - shift)
                .pad(&lo, &vec![0; rank], ident.cast(y.dtype()));
        y = combine(&y, &shifted);
        shift *= 2;
    }
    y
}

/// `jnp.cumsum(x, axis)`: running sums along `axis` (negative counts from the end). Integer dtypes
/// wrap as in JAX; bools are counted in i32. For f32 the log-step scan adds in a different order
/// from a sequential loop, so results agree with JAX to rounding (about `log2(n)` ulps), not bit
/// for bit. A scalar or an axis out of range is [`Error::BadAxis`].
///
/// ```
/// use brigade::{Tensor, numpy as jnp};
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
/// assert_eq!(jnp::cumsum(&x, -1).to_vec::<f32>()?, vec![1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
/// assert_eq!(jnp::cumprod(&x, 0).to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0, 10.0, 18.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn cumsum(x: &Tensor, axis: i64) -> Tensor {
    scan_axis("cumsum", x, axis, Scalar::F32(0.0), |a, b| a.add(b))
}

/// `jnp.cumprod(x, axis)`: running products along `axis` (see [`cumsum`]). The gradient comes from
/// the multiplications, so it is right at zeros too (no division).
pub fn cumprod(x: &Tensor, axis: i64) -> Tensor {
    scan_axis("cumprod", x, axis, Scalar::F32(1.0), |a, b| a.mul(b))
}

/// `jnp.take_along_axis(x, indices, axis)`: `out[..., j, ...] = x[..., indices[..., j, ...], ...]`
/// along `axis`. `indices` (i32 or u32) has `x`'s rank; on every other axis the two broadcast
/// (each size equal or 1), and the result has the broadcast shape with `indices`' length on
/// `axis`. Out-of-range indices follow JAX's default (`mode="fill"`): a negative index in
/// `[-n, 0)` counts from the end, and an index outside `[-n, n)` gives the fill value of
/// [`TakeMode::Fill`](crate::TakeMode::Fill) (NaN for floats, `i32::MIN`, `u32::MAX`, `true`).
///
/// Built from `iota`, arithmetic and a flat [`Tensor::take`], so its gradient (a scatter-add into
/// `x`) and batching come from those.
///
/// ```
/// use brigade::{Tensor, numpy as jnp};
/// let x = Tensor::from_vec(vec![10.0f32, 20.0, 30.0, 40.0, 50.0, 60.0], &[2, 3]);
/// let i = Tensor::from_vec(vec![2i32, 0, -1, 1], &[2, 2]);
/// let y = jnp::take_along_axis(&x, &i, 1).to_vec::<f32>()?;
/// assert_eq!(y, vec![30.0, 10.0, 60.0, 50.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn take_along_axis(x: &Tensor, indices: &Tensor, axis: i64) -> Tensor {
    const OP: &str = "take_along_axis";
    if let Some(f) = first_error(&[x, indices]) {
        return f;
    }
    let it = indices.dtype();
    if !it.is_int() {
        return x.fail_with(Error::BadDType {
            op: OP,
            dtype: it,
            hint: "indices must be i32 or u32 (cast them with .cast(DType::I32))",
            shapes: vec![x.shape().to_vec(), indices.shape().to_vec()],
        });
    }
    if x.ndim() != indices.ndim() {
        return x.fail_with(Error::BadShapeArg {
            op: OP,
            shape: x.shape().to_vec(),
            detail: format!(
                "indices have shape {:?} (rank {}) but must have the array's rank {}; add axes of size 1 with expand_dims",
                indices.shape(),
                indices.ndim(),
                x.ndim()
            ),
        });
    }
    let a = match norm_axis(OP, axis, x.shape()) {
        Ok(a) => a,
        Err(e) => return x.fail_with(e),
    };
    let n = x.shape()[a];
    // The shape of the result: broadcast on every axis but `a`, which is the indices' length.
    let mut xs = x.shape().to_vec();
    xs[a] = 1;
    let mut is = indices.shape().to_vec();
    is[a] = 1;
    let mut out = match broadcast_shapes(OP, &xs, &is) {
        Ok(s) => s,
        Err(_) => {
            return x.fail_with(Error::BadShapeArg {
                op: OP,
                shape: x.shape().to_vec(),
                detail: format!(
                    "indices of shape {:?} do not broadcast with the array on the axes other than {a} (each size must be equal or 1)",
                    indices.shape()
                ),
            });
        }
    };
    out[a] = indices.shape()[a];
    if n == 0 {
        // Nothing to take from: the primitive's own error (or an empty result when no index).
        return x.take(indices, axis);
    }
    let mut xfull = out.clone();
    xfull[a] = n;
    let idx = indices.broadcast_to(&out);
    // Normalized index in i32, and whether it is inside [-n, n).
    let n_i = Tensor::scalar(n as i32);
    let (valid, pos) = if it == DType::I32 {
        let valid = idx.ge(&Tensor::scalar(-(n as i32))).and(&idx.lt(&n_i));
        let wrapped = idx.lt(&Tensor::scalar(0i32)).where_(&(&idx + &n_i), &idx);
        let pos = wrapped
            .maximum(&Tensor::scalar(0i32))
            .minimum(&Tensor::scalar(n as i32 - 1));
        (valid, pos)
    } else {
        let valid = idx.lt(&Tensor::scalar(n as u32));
        let pos = idx.minimum(&Tensor::scalar(n as u32 - 1)).cast(DType::I32);
        (valid, pos)
    };
    // Flat index into x broadcast to `xfull` (row-major strides).
    let mut flat = Tensor::zeros(&out, DType::I32);
    let mut stride = 1i64;
    for d in (0..out.len()).rev() {
        let coord = if d == a {
            pos.clone()
        } else {
            Tensor::iota(DType::I32, &out, d)
        };
        flat = &flat + &(&coord * &Tensor::scalar(stride as i32));
        stride *= xfull[d] as i64;
    }
    if stride > i32::MAX as i64 {
        return x.fail_with(Error::BadShapeArg {
            op: OP,
            shape: x.shape().to_vec(),
            detail: format!(
                "the broadcast array {xfull:?} has more than 2^31 elements; take along a smaller array"
            ),
        });
    }
    let src = x.broadcast_to(&xfull).reshape(&[-1]);
    let got = src.take(&flat, 0);
    let fill = match x.dtype() {
        DType::F32 => Scalar::F32(f32::NAN),
        DType::F64 => Scalar::F64(f64::NAN),
        DType::I32 => Scalar::I32(i32::MIN),
        DType::U32 => Scalar::U32(u32::MAX),
        DType::Bool => Scalar::Bool(true),
    };
    valid.where_(&got, &Tensor::full(fill, &[]))
}

// ---- sorting ---------------------------------------------------------------------------------------

/// The axis `axis` of `x` (`None`: `x` flattened, axis 0), as `jnp.sort` / `jnp.argsort` take it.
fn sort_operand(
    op: &'static str,
    x: &Tensor,
    axis: Option<i64>,
) -> Result<(Tensor, usize), Tensor> {
    let x = match axis {
        None => x.reshape(&[-1]),
        Some(_) => x.clone(),
    };
    if let Some(e) = x.error() {
        return Err(Tensor::failed(e.clone()));
    }
    match norm_axis(op, axis.unwrap_or(0), x.shape()) {
        Ok(a) => Ok((x, a)),
        Err(e) => Err(x.fail_with(e)),
    }
}

/// `jnp.sort(x, axis, descending=...)`: the values sorted along `axis` (`None`: of the flattened
/// array). Ascending in `lax.sort`'s order (`-0.0` and `+0.0` equal and kept in their order, NaNs
/// last); `descending` is the ascending result reversed, as JAX computes it (NaNs first).
///
/// ```
/// use brigade::{Tensor, numpy as jnp};
/// let x = Tensor::from_vec(vec![2.0f32, -1.0, 5.0, 0.5], &[2, 2]);
/// assert_eq!(jnp::sort(&x, None, false).to_vec::<f32>()?, vec![-1.0, 0.5, 2.0, 5.0]);
/// assert_eq!(jnp::sort(&x, Some(0), true).to_vec::<f32>()?, vec![5.0, 0.5, 2.0, -1.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn sort(x: &Tensor, axis: Option<i64>, descending: bool) -> Tensor {
    let (x, a) = match sort_operand("sort", x, axis) {
        Ok(p) => p,
        Err(f) => return f,
    };
    let sorted = x.sort(a as i64);
    if descending {
        reverse_axis(&sorted, a)
    } else {
        sorted
    }
}

/// `jnp.argsort(x, axis, stable=True, descending=...)`: i32 indices sorting `x` along `axis`
/// (`None`: of the flattened array), ties in index order in both directions (JAX's stable
/// descending argsort keeps equal elements in their original order).
///
/// ```
/// use brigade::{Tensor, numpy as jnp};
/// let x = Tensor::from_vec(vec![1i32, 3, 1, 2], &[4]);
/// assert_eq!(jnp::argsort(&x, Some(-1), false).to_vec::<i32>()?, vec![0, 2, 3, 1]);
/// assert_eq!(jnp::argsort(&x, Some(-1), true).to_vec::<i32>()?, vec![1, 3, 0, 2]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn argsort(x: &Tensor, axis: Option<i64>, descending: bool) -> Tensor {
    match sort_operand("argsort", x, axis) {
        Ok((x, a)) => x.argsort_order(a as i64, descending),
        Err(f) => f,
    }
}

/// `x` reversed along axis `a` (`lax.rev`), as a gather by `n - 1 - i`.
fn reverse_axis(x: &Tensor, a: usize) -> Tensor {
    let n = x.shape()[a];
    if n <= 1 {
        return x.clone();
    }
    let rev = &Tensor::scalar(n as i32 - 1) - &Tensor::iota(DType::I32, &[n], 0);
    x.take(&rev, a as i64)
}
