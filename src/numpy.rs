//! `jax.numpy` functions built from brigade's existing primitives.
//!
//! Every function here is a composite: it calls [`Tensor`] ops (elementwise, reductions, pad,
//! slice, take, dot_general, ...), so `jit`, `grad` and `vmap` handle it through its parts and no
//! backend needs anything new. Errors surface like every op's: a failed tensor carrying a typed
//! [`Error`].
//!
//! - [`einsum`]: Einstein summation, lowered to `dot_general` and layout ops.
//! - JAX's type promotion: [`result_type`] (the lattice, with `jax_enable_x64` off), and the
//!   binary functions that apply it to arrays and weakly typed literals ([`add`], [`subtract`],
//!   [`multiply`], [`true_divide`], [`floor_divide`], [`remainder`], [`maximum`], [`minimum`],
//!   [`where_`], and [`clip`]'s bounds).
//! - [`clip`], [`any`], [`all`], [`cumsum`], [`cumprod`] (`axis = None` too),
//!   [`take_along_axis`] and [`take_along_axis_mode`].
//! - [`var`] and [`std`](fn@std) (with `ddof`), [`linspace`], [`isclose`] and [`allclose`].
//!
//! ```
//! use brigade::{Tensor, numpy as jnp};
//! let x = Tensor::from_vec(vec![1i32, 2, 3, 4], &[4]);
//! assert_eq!(jnp::cumsum(&x, 0).to_vec::<i32>()?, vec![1, 3, 6, 10]);
//! # Ok::<(), brigade::Error>(())
//! ```

use crate::dtype::{DType, Scalar};
use crate::error::Error;
use crate::tensor::{Axes, TakeMode, Tensor, broadcast_shapes, norm_axis};

mod einsum;
mod promote;

pub use einsum::einsum;
pub use promote::{
    JaxType, Operand, add, divide, floor_divide, maximum, minimum, multiply, promote_dtype,
    remainder, result_type, subtract, true_divide, where_,
};

/// The first error among `ts`, as a failed tensor.
fn first_error(ts: &[&Tensor]) -> Option<Tensor> {
    ts.iter()
        .find_map(|t| t.error())
        .map(|e| Tensor::failed(e.clone()))
}

/// A bound of [`clip`]: absent (`None`), an array (`&tensor` or `Some(&tensor)`, strongly
/// typed), or a Rust literal standing for a Python scalar (`0.5`, `3`: weakly typed, see
/// [`Operand`]).
#[derive(Clone, Copy, Debug)]
pub struct ClipBound<'a>(Option<Operand<'a>>);

impl<'a> From<Option<&'a Tensor>> for ClipBound<'a> {
    fn from(t: Option<&'a Tensor>) -> Self {
        ClipBound(t.map(Operand::Tensor))
    }
}
impl<'a> From<&'a Tensor> for ClipBound<'a> {
    fn from(t: &'a Tensor) -> Self {
        ClipBound(Some(Operand::Tensor(t)))
    }
}
macro_rules! clip_bound_from_literal {
    ($($t:ty),*) => {$(
        impl From<$t> for ClipBound<'_> {
            fn from(v: $t) -> Self {
                ClipBound(Some(Operand::from(v)))
            }
        }
    )*};
}
clip_bound_from_literal!(i32, i64, u32, f32, f64, bool);

/// `jnp.clip(x, lo, hi)`: `minimum(maximum(x, lo), hi)`, broadcasting all three. Either bound may be
/// `None` (no bound on that side). A NaN in `x` stays NaN (and a NaN bound gives NaN), and where
/// `lo > hi` the result is `hi`, as in `jnp.clip`. Integer and unsigned dtypes clip too.
///
/// The three promote together as in JAX ([`result_type`]): a bound given as a literal is weakly
/// typed, so `clip(&x_i32, -5, 7)` stays i32 while `clip(&x_i32, 0.5, None)` is f32 (the bound is
/// not truncated to 0); a bound given as a tensor is strongly typed (`Tensor::scalar(0.5f32)` makes
/// an i32 `x` f32 as well).
///
/// ```
/// use brigade::{DType, Tensor, numpy as jnp};
/// let x = Tensor::from_vec(vec![-2.0f32, 0.5, 3.0, f32::NAN], &[4]);
/// let y = jnp::clip(&x, Some(&Tensor::scalar(0.0f32)), 1.0);
/// let y = y.to_vec::<f32>()?;
/// assert_eq!(&y[..3], &[0.0, 0.5, 1.0]);
/// assert!(y[3].is_nan());
/// let i = Tensor::from_vec(vec![-3i32, 0, 3], &[3]);
/// assert_eq!(jnp::clip(&i, -1, 1).to_vec::<i32>()?, vec![-1, 0, 1]);
/// let f = jnp::clip(&i, 0.5, None);
/// assert_eq!(f.dtype(), DType::F32);
/// assert_eq!(f.to_vec::<f32>()?, vec![0.5, 0.5, 3.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn clip<'a, 'b>(
    x: &Tensor,
    lo: impl Into<ClipBound<'a>>,
    hi: impl Into<ClipBound<'b>>,
) -> Tensor {
    let (lo, hi) = (lo.into().0, hi.into().0);
    let mut all = vec![Operand::Tensor(x)];
    all.extend(lo);
    all.extend(hi);
    let dt = promote_dtype(&all);
    let mut y = x.cast(dt);
    if let Some(lo) = lo {
        y = maximum(&y, lo);
    }
    if let Some(hi) = hi {
        y = minimum(&y, hi);
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

/// The scan of `x` along `axis`, or along `x` flattened when `axis` is `None` (`axis=None`).
fn scan(
    op: &'static str,
    x: &Tensor,
    axis: Option<i64>,
    ident: Scalar,
    combine: fn(&Tensor, &Tensor) -> Tensor,
) -> Tensor {
    match axis {
        Some(a) => scan_axis(op, x, a, ident, combine),
        None => scan_axis(op, &x.reshape(&[-1]), 0, ident, combine),
    }
}

/// `jnp.cumsum(x, axis)`: running sums along `axis` (negative counts from the end), or over `x`
/// flattened in row-major order when `axis` is `None` (`jnp.cumsum`'s default `axis=None`; the
/// result is 1-D, a scalar becomes a 1-element array). The axis is `impl Into<Option<i64>>`
/// so that `cumsum(&x, 1)` reads as before and `cumsum(&x, None)` is JAX's spelling.
/// Integer dtypes wrap as in JAX; bools are counted in i32. For f32 the log-step scan adds in a
/// different order from a sequential loop, so results agree with JAX to rounding (about
/// `log2(n)` ulps), not bit for bit. A scalar with an axis, or an axis out of range, is
/// [`Error::BadAxis`].
///
/// ```
/// use brigade::{Tensor, numpy as jnp};
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
/// assert_eq!(jnp::cumsum(&x, -1).to_vec::<f32>()?, vec![1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
/// assert_eq!(jnp::cumprod(&x, 0).to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0, 10.0, 18.0]);
/// let flat = jnp::cumsum(&x, None);
/// assert_eq!(flat.shape(), &[6]);
/// assert_eq!(flat.to_vec::<f32>()?, vec![1.0, 3.0, 6.0, 10.0, 15.0, 21.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn cumsum(x: &Tensor, axis: impl Into<Option<i64>>) -> Tensor {
    scan("cumsum", x, axis.into(), Scalar::F32(0.0), |a, b| a.add(b))
}

/// `jnp.cumprod(x, axis)`: running products along `axis`, or over `x` flattened when `axis` is
/// `None` (see [`cumsum`]). The gradient comes from the multiplications, so it is right at zeros
/// too (no division).
pub fn cumprod(x: &Tensor, axis: impl Into<Option<i64>>) -> Tensor {
    scan("cumprod", x, axis.into(), Scalar::F32(1.0), |a, b| a.mul(b))
}

/// `jnp.take_along_axis(x, indices, axis)`: `out[..., j, ...] = x[..., indices[..., j, ...], ...]`
/// along `axis`. `indices` (i32 or u32) has `x`'s rank; on every other axis the two broadcast
/// (each size equal or 1), and the result has the broadcast shape with `indices`' length on
/// `axis`. Out-of-range indices follow JAX's default (`mode="fill"`): a negative index in
/// `[-n, 0)` counts from the end, and an index outside `[-n, n)` gives the fill value of
/// [`TakeMode::Fill`] (NaN for floats, `i32::MIN`, `u32::MAX`, `true`).
///
/// Built from `iota`, arithmetic and a flat [`Tensor::index_take`], so its gradient (a scatter-add into
/// `x`; nothing for an index that gives the fill value) and batching come from those. An empty
/// `axis` with no indices gives an empty result of that shape (`jnp.sort` of a `(2, 0)` array
/// along axis 1 is `(2, 0)`). [`take_along_axis_mode`] offers JAX's other modes and a fill value.
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
    take_along_axis_mode(x, indices, axis, TakeMode::Fill, None)
}

/// [`take_along_axis`] with `jnp.take_along_axis`'s `mode` and `fill_value`. A negative index in
/// `[-n, 0)` first counts from the end (as in JAX, for every mode); then an index still outside
/// `[0, n)` is treated by `mode`:
/// - [`TakeMode::Fill`] (JAX's default): gives `fill_value` (cast to `x`'s dtype), or without one
///   the dtype's default fill (NaN, `i32::MIN`, `u32::MAX`, `true`);
/// - [`TakeMode::Clip`]: clamped into `[0, n)` (`-n - 2` → `-2` → 0);
/// - [`TakeMode::Wrap`]: taken modulo `n`, as `jnp.take`'s `mode="wrap"` (`jnp.take_along_axis`
///   itself has no wrap mode).
///
/// `fill_value` is ignored by the other modes. Under [`TakeMode::PromiseInBounds`] JAX leaves
/// out-of-range indices undefined; here they are clamped as under `Clip` (same cost, never
/// garbage).
///
/// ```
/// use brigade::{TakeMode, Tensor, numpy as jnp};
/// let x = Tensor::from_vec(vec![10.0f32, 20.0, 30.0], &[3]);
/// let i = Tensor::from_vec(vec![-5i32, -1, 1, 4], &[4]);
/// let clip = jnp::take_along_axis_mode(&x, &i, 0, TakeMode::Clip, None).to_vec::<f32>()?;
/// assert_eq!(clip, vec![10.0, 30.0, 20.0, 30.0]);
/// let fill = jnp::take_along_axis_mode(&x, &i, 0, TakeMode::Fill, Some((-1.0f32).into()));
/// assert_eq!(fill.to_vec::<f32>()?, vec![-1.0, 30.0, 20.0, -1.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn take_along_axis_mode(
    x: &Tensor,
    indices: &Tensor,
    axis: i64,
    mode: TakeMode,
    fill_value: Option<Scalar>,
) -> Tensor {
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
        // Nothing to take from. No index (the result is empty, as sorting along an empty axis
        // gives): an empty array of the result's shape. Otherwise `take`'s own error.
        if out.contains(&0) {
            return Tensor::zeros(&out, x.dtype());
        }
        return x.index_take(indices, axis);
    }
    let mut xfull = out.clone();
    xfull[a] = n;
    let idx = indices.broadcast_to(&out);
    // The index as a position in [0, n) (i32), and whether it was inside [-n, n).
    let n_i = Tensor::scalar(n as i32);
    let last = Tensor::scalar(n as i32 - 1);
    let (valid, pos) = if it == DType::I32 {
        let valid = idx.ge(&Tensor::scalar(-(n as i32))).and(&idx.lt(&n_i));
        let pos = match mode {
            TakeMode::Wrap => idx.remainder(&n_i),
            TakeMode::Fill | TakeMode::Clip | TakeMode::PromiseInBounds => {
                let wrapped = idx.lt(&Tensor::scalar(0i32)).where_(&(&idx + &n_i), &idx);
                wrapped.maximum(&Tensor::scalar(0i32)).minimum(&last)
            }
        };
        (valid, pos)
    } else {
        let valid = idx.lt(&Tensor::scalar(n as u32));
        let pos = match mode {
            TakeMode::Wrap => idx.rem(&Tensor::scalar(n as u32)),
            TakeMode::Fill | TakeMode::Clip | TakeMode::PromiseInBounds => {
                idx.minimum(&Tensor::scalar(n as u32 - 1))
            }
        };
        (valid, pos.cast(DType::I32))
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
    let got = src.index_take(&flat, 0);
    if mode != TakeMode::Fill {
        return got;
    }
    let fill = match (fill_value, x.dtype()) {
        (Some(v), dt) => v.cast(dt),
        (None, DType::F32) => Scalar::F32(f32::NAN),
        (None, DType::F64) => Scalar::F64(f64::NAN),
        (None, DType::I32) => Scalar::I32(i32::MIN),
        (None, DType::U32) => Scalar::U32(u32::MAX),
        (None, DType::Bool) => Scalar::Bool(true),
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
    x.index_take(&rev, a as i64)
}

/// `jnp.var(x, axes, ddof=ddof, keepdims=...)`: the mean squared deviation from the mean over
/// `axes`, divided by `n - ddof` instead of `n` (`ddof = 1`: the unbiased estimate). Integer and
/// bool inputs are computed in f32. Where `n - ddof <= 0` the result is NaN, as in JAX.
///
/// ```
/// use brigade::{Axes, Tensor, numpy as jnp};
/// // Rows with means 2 and 5: squared deviations sum to 2 and 26.
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 2.0, 4.0, 9.0], &[2, 3]);
/// assert_eq!(jnp::var(&x, 1, 0, false).to_vec::<f32>()?, vec![2.0 / 3.0, 26.0 / 3.0]);
/// assert_eq!(jnp::var(&x, 1, 1, false).to_vec::<f32>()?, vec![1.0, 13.0]);
/// assert_eq!(jnp::std(&x, Axes::All, 1, false).shape(), &[] as &[usize]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn var(x: &Tensor, axes: impl Into<Axes>, ddof: usize, keepdims: bool) -> Tensor {
    if let Some(f) = first_error(&[x]) {
        return f;
    }
    let axes = axes.into();
    let n: usize = match x.reduce_axes("var", axes.clone()) {
        Ok(a) => a.iter().map(|&i| x.shape()[i]).product(),
        Err(e) => return x.fail_with(e),
    };
    let x = if x.dtype().is_float() {
        x.clone()
    } else {
        x.cast(DType::F32)
    };
    let dt = x.dtype();
    let count = |k: usize| Tensor::full(Scalar::F64(k as f64).cast(dt), &[]);
    // JAX's steps: the mean as a division by n, squared deviations, their sum over n - ddof.
    let mean = x.sum(axes.clone(), true).div(&count(n));
    let centered = x.sub(&mean);
    let total = centered.mul(&centered).sum(axes, keepdims);
    if n <= ddof {
        return Tensor::full(Scalar::F64(f64::NAN).cast(dt), total.shape());
    }
    total.div(&count(n - ddof))
}

/// `jnp.std(x, axes, ddof=ddof, keepdims=...)`: the square root of [`var`].
pub fn std(x: &Tensor, axes: impl Into<Axes>, ddof: usize, keepdims: bool) -> Tensor {
    var(x, axes, ddof, keepdims).sqrt()
}

/// `jnp.linspace(start, stop, num, endpoint=...)` in f32: `num` evenly spaced values from `start`
/// to `stop` (included with `endpoint`, else the spacing is `(stop - start) / num`). Computed on
/// the host with JAX's formula, `start * (1 - t) + stop * t` with `t = i / div` in f32, so the
/// endpoints are exact; XLA rounds the same formula a little differently, so values agree with
/// JAX's within 3 ULPs of `max(|start|, |stop|)` (over 200 random ranges). `num = 1` gives
/// `[start]`, `num = 0` an empty array.
///
/// ```
/// use brigade::numpy as jnp;
/// assert_eq!(jnp::linspace(0.0, 1.0, 5, true).to_vec::<f32>()?, vec![0.0, 0.25, 0.5, 0.75, 1.0]);
/// assert_eq!(jnp::linspace(0.0, 1.0, 4, false).to_vec::<f32>()?, vec![0.0, 0.25, 0.5, 0.75]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn linspace(start: f32, stop: f32, num: usize, endpoint: bool) -> Tensor {
    let div = if endpoint { num.saturating_sub(1) } else { num };
    let values: Vec<f32> = (0..num)
        .map(|i| {
            if num == 1 {
                start
            } else if endpoint && i == num - 1 {
                stop
            } else {
                let t = i as f32 / div as f32;
                start * (1.0 - t) + stop * t
            }
        })
        .collect();
    Tensor::from_vec(values, &[num])
}

/// `jnp.isclose(a, b, rtol, atol, equal_nan)`: where `|a - b| <= atol + rtol * |b|` (with `b`
/// finite) or `a == b` (equal infinities), elementwise after broadcasting; NaNs are close to
/// each other only with `equal_nan`. Integer and bool operands are compared as f32. JAX's
/// defaults are `rtol = 1e-5`, `atol = 1e-8`.
///
/// ```
/// use brigade::{Tensor, numpy as jnp};
/// let a = Tensor::from_vec(vec![1.0f32, 1.0, f32::INFINITY, f32::NAN], &[4]);
/// let b = Tensor::from_vec(vec![1.000001f32, 1.1, f32::INFINITY, f32::NAN], &[4]);
/// let close = jnp::isclose(&a, &b, 1e-5, 1e-8, false);
/// assert_eq!(close.to_vec::<bool>()?, vec![true, false, true, false]);
/// assert!(!jnp::allclose(&a, &b, 1e-5, 1e-8, true).to_vec::<bool>()?[0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn isclose(a: &Tensor, b: &Tensor, rtol: f64, atol: f64, equal_nan: bool) -> Tensor {
    if let Some(f) = first_error(&[a, b]) {
        return f;
    }
    let float = |t: &Tensor| {
        if t.dtype().is_float() {
            t.clone()
        } else {
            t.cast(DType::F32)
        }
    };
    let (a, b) = (float(a), float(b));
    let lit = |v: f64| Tensor::full(Scalar::F64(v).cast(b.dtype()), &[]);
    let in_range = a.sub(&b).abs().le(&lit(atol).add(&lit(rtol).mul(&b.abs())));
    let out = a.eq(&b).or(&b.is_finite().and(&in_range));
    if equal_nan {
        out.or(&a.is_nan().and(&b.is_nan()))
    } else {
        out
    }
}

/// `jnp.allclose(a, b, rtol, atol, equal_nan)`: whether [`isclose`] holds everywhere (a bool
/// scalar).
pub fn allclose(a: &Tensor, b: &Tensor, rtol: f64, atol: f64, equal_nan: bool) -> Tensor {
    all(&isclose(a, b, rtol, atol, equal_nan), Axes::All, false)
}
