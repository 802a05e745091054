//! Indexing: the `take` primitive (gather whole slices along one axis by integer indices, as
//! `x[idx]` does: `Tensor::index_take`; `Tensor::take` and `take_mode` build JAX's modes on it).
//!
//! Index semantics (same on CPU and device): a negative index counts from the end once (`-1` is the
//! last element, as in NumPy); anything still out of range is clamped into `[0, n)`, the way XLA's
//! gather clamps. The gradient is JAX's for `x[idx]` (a gather in `PROMISE_IN_BOUNDS` mode): its
//! transpose is a scatter-add that drops the updates of indices outside `[-n, n)` (`[0, n)` for
//! u32), so an index that was clamped contributes no gradient. `one_hot` is a composition
//! (`eq(expand(idx), iota)`), see `Tensor::one_hot`.
//!
//! `take_batched` is `take` under `vmap` with both operands batched (JAX's gather with batching
//! dimensions): every example takes from its own slice of `x`, with the same index semantics and
//! gradient.

use std::fmt;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::host::{HostArray, HostData, strides, unravel};
use crate::ops::rules::{Emitted, Lowering, Rules, single_batch, single_vjp};
use crate::ops::{BatchCtx, Batched, Cotangents};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Var};
use crate::wgsl::Emitter;

/// Shape rule of `take(x, idx, axis)`: `x.shape[..axis] ++ idx.shape ++ x.shape[axis+1..]`.
pub fn take_shape(x: &[usize], idx: &[usize], idx_dtype: DType, axis: usize) -> Result<Vec<usize>> {
    if axis >= x.len() {
        return Err(Error::BadAxis {
            op: "take",
            axis: axis as i64,
            rank: x.len(),
            shape: x.to_vec(),
        });
    }
    if !idx_dtype.is_int() {
        return Err(Error::BadDType {
            op: "take (indices)",
            dtype: idx_dtype,
            hint: "indices must be i32 or u32; cast them",
            shapes: vec![],
        });
    }
    let n_idx: usize = idx.iter().product();
    if x[axis] == 0 && n_idx > 0 {
        return Err(Error::BadShapeArg {
            op: "take",
            shape: x.to_vec(),
            detail: format!("cannot take {n_idx} indices from axis {axis} of size 0"),
        });
    }
    let mut out = x[..axis].to_vec();
    out.extend_from_slice(idx);
    out.extend_from_slice(&x[axis + 1..]);
    Ok(out)
}

/// Shape rule of `take_batched(x, idx, axis)`: `x` is `(B, ...)`, `idx` is `(B, ...)` and example `b`
/// takes `idx[b]` from `x[b]` along `axis` (an axis of `x`, at least 1): the result is
/// `x.shape[..axis] ++ idx.shape[1..] ++ x.shape[axis+1..]`.
pub fn take_batched_shape(
    x: &[usize],
    idx: &[usize],
    idx_dtype: DType,
    axis: usize,
) -> Result<Vec<usize>> {
    if axis == 0 || axis >= x.len() {
        return Err(Error::BadAxis {
            op: "take_batched",
            axis: axis as i64,
            rank: x.len(),
            shape: x.to_vec(),
        });
    }
    if idx.first() != Some(&x[0]) {
        return Err(Error::BadShapeArg {
            op: "take_batched",
            shape: x.to_vec(),
            detail: format!(
                "indices of shape {idx:?} must have the array's batch size {} on axis 0",
                x[0]
            ),
        });
    }
    let mut out = vec![x[0]];
    out.extend(take_shape(&x[1..], &idx[1..], idx_dtype, axis - 1)?);
    Ok(out)
}

/// Normalize one index into `[0, n)` (wrap negatives once, then clamp).
pub fn norm_index(i: i64, n: usize) -> usize {
    let n = n as i64;
    let i = if i < 0 { i + n } else { i };
    i.clamp(0, (n - 1).max(0)) as usize
}

/// `take` on the host. The first `nb` axes (0, or 1 for `take_batched`) are batch axes that `x`,
/// `idx` and the result share.
pub(crate) fn take_cpu(
    x: &HostArray,
    idx: &HostArray,
    axis: usize,
    nb: usize,
    out_shape: &[usize],
) -> HostArray {
    let st = strides(&x.shape);
    let ist = strides(&idx.shape);
    // The indices' own (non-batch) axes.
    let r = idx.shape.len() - nb;
    let n: usize = out_shape.iter().product();
    let vals = (0..n).map(|o| {
        let oi = unravel(o, out_shape);
        let idx_lin: usize = oi[..nb]
            .iter()
            .chain(&oi[axis..axis + r])
            .zip(&ist)
            .map(|(a, b)| a * b)
            .sum();
        let raw = match idx.data.get(idx_lin) {
            crate::Scalar::I32(v) => v as i64,
            s => s.as_f64() as i64,
        };
        let j = norm_index(raw, x.shape[axis]);
        let mut off = 0;
        for d in 0..axis {
            off += oi[d] * st[d];
        }
        off += j * st[axis];
        for d in axis + 1..x.shape.len() {
            off += oi[d - 1 + r] * st[d];
        }
        x.data.get(off)
    });
    HostArray {
        shape: out_shape.to_vec(),
        data: HostData::from_scalars(x.dtype(), vals),
    }
}

/// WGSL for the normalized index: `raw` is an i32 or u32 expression, `n` the axis length (> 0).
pub fn norm_index_wgsl(raw: &str, dt: DType, n: usize) -> String {
    match dt {
        DType::I32 => format!(
            "u32(clamp(select({raw}, {raw} + {n}i, {raw} < 0i), 0i, {}i))",
            n.max(1) - 1
        ),
        _ => format!("min({raw}, {}u)", n.max(1) - 1),
    }
}

// ---- batching rule ------------------------------------------------------------------------------

/// `take(x, idx, axis)` under vmap. A batched `x` with shared indices takes along `axis + 1`.
/// Shared `x` with batched indices takes as usual and moves the batch axis (now at `axis`) to the
/// front. When both are batched, each example must index its own slice: that is `take_batched`
/// along `axis + 1` (clamping and dropping out-of-range gradients within each example).
fn batch(axis: usize, ins: &[super::Batched]) -> super::Batched {
    use super::Prim;
    use crate::tensor::Tensor;
    let ((x, xb), (idx, ib)) = (&ins[0], &ins[1]);
    let take = |op: IndexOp, x: &Tensor, idx: &Tensor| Tensor::apply(Prim::Indexing(op), &[x, idx]);
    match (xb, ib) {
        (true, false) => (take(IndexOp::Take { axis: axis + 1 }, x, idx), true),
        (false, true) => {
            let out = take(IndexOp::Take { axis }, x, idx);
            (super::move_axis(&out, axis, 0), true)
        }
        (true, true) => (take(IndexOp::TakeBatched { axis: axis + 1 }, x, idx), true),
        (false, false) => (take(IndexOp::Take { axis }, x, idx), false),
    }
}

/// `take_batched(x, idx, axis)` under another vmap (its batch axis `C` in front of the `B` one).
/// A batched `x` becomes `(B, C, ...)` and takes along `axis + 1`; batched indices become
/// `(B, C, ...)`, one more index axis, whose place in the result (`axis`) moves to the front; when
/// both are batched, `C` and `B` merge into one batch axis of `C * B` examples.
fn batch_batched(axis: usize, ins: &[super::Batched]) -> super::Batched {
    use super::Prim;
    use crate::tensor::Tensor;
    let ((x, xb), (idx, ib)) = (&ins[0], &ins[1]);
    let take = |axis: usize, x: &Tensor, idx: &Tensor| {
        Tensor::apply(Prim::Indexing(IndexOp::TakeBatched { axis }), &[x, idx])
    };
    match (xb, ib) {
        (true, false) => {
            let out = take(axis + 1, &super::move_axis(x, 0, 1), idx);
            (super::move_axis(&out, 1, 0), true)
        }
        (false, true) => {
            let out = take(axis, x, &super::move_axis(idx, 0, 1));
            (super::move_axis(&out, axis, 0), true)
        }
        (true, true) => {
            let merge = |t: &Tensor| {
                let mut s = vec![t.shape()[0] * t.shape()[1]];
                s.extend_from_slice(&t.shape()[2..]);
                t.reshape_exact(&s)
            };
            let out = take(axis, &merge(x), &merge(idx));
            let mut s = x.shape()[..2].to_vec();
            s.extend_from_slice(&out.shape()[1..]);
            (out.reshape_exact(&s), true)
        }
        (false, false) => (take(axis, x, idx), false),
    }
}

// ---- VJP rule -----------------------------------------------------------------------------------

/// `take` scatters its cotangent back: every taken slice adds into the row it came from, as the
/// transpose of JAX's `x[idx]` gather (`PROMISE_IN_BOUNDS`) does. That scatter-add drops the
/// updates of out-of-bounds indices: an index outside `[-n, n)` (`[0, n)` for u32), which the
/// forward clamped, contributes nothing. Written as a contraction with the one-hot matrix of the
/// indices (a zero row for a dropped index), which is differentiable again. The first `nb` axes
/// of `x`, `idx` and `ct` are batch axes (`take_batched`), kept apart in the contraction.
fn vjp(
    axis: usize,
    nb: usize,
    ins: &[crate::tensor::Tensor],
    ct: &crate::tensor::Tensor,
) -> super::Cotangents {
    let (x, idx) = (&ins[0], &ins[1]);
    if !x.dtype().is_float() {
        return vec![None, None];
    }
    let n = x.shape()[axis];
    let oh = in_bounds_one_hot(idx, n).cast(x.dtype()); // idx.shape + [n]
    let k = idx.ndim() - nb;
    // ct axes: batch (..nb), x[nb..axis], idx axes (axis..axis+k), x[axis+1..]; contract the idx
    // axes, pair the batch axes.
    let g = ct.dot_general(
        &oh,
        super::DotDims {
            lhs_contract: (axis..axis + k).collect(),
            rhs_contract: (nb..nb + k).collect(),
            lhs_batch: (0..nb).collect(),
            rhs_batch: (0..nb).collect(),
        },
    );
    // g axes: batch, x[nb..axis], x[axis+1..], n  -> move n back to `axis`.
    let last = g.ndim() - 1;
    vec![Some(super::move_axis(&g, last, axis)), None]
}

/// The one-hot rows (`idx.shape + [n]`) of the positions `take` reads from, for the indices JAX's
/// scatter-add keeps: a negative i32 index in `[-n, 0)` counts from the end, and an index outside
/// `[-n, n)` (`[0, n)` for u32) gets a row of zeros. The wrapped i32 index is then below 0 or at
/// least `n`, and a u32 one at least `n`, so it equals no class of `one_hot`: no clamp, no mask.
fn in_bounds_one_hot(idx: &crate::tensor::Tensor, n: usize) -> crate::tensor::Tensor {
    use crate::tensor::Tensor;
    if idx.dtype() == DType::U32 {
        return idx.one_hot(n);
    }
    let i = idx.cast(DType::I32);
    // `i + n` for negative `i` cannot overflow.
    let wrapped = i.lt(&Tensor::scalar(0i32)).where_(&(&i + n as i32), &i);
    wrapped.one_hot(n)
}

// ---- the family -----------------------------------------------------------------------------------

/// The indexing primitives.
#[derive(Clone, Debug, PartialEq)]
pub enum IndexOp {
    /// `take(x, idx)` along `axis` (see the module's index semantics).
    Take { axis: usize },
    /// `take` with a shared leading batch axis: `x` is `(B, ...)`, `idx` is `(B, ...)`, and
    /// example `b` takes `idx[b]` from `x[b]` along `axis` (an axis of `x`, at least 1). The
    /// batching rule of `take` when both operands are batched (JAX's gather with batching dims).
    TakeBatched { axis: usize },
}

impl IndexOp {
    /// The taken axis of `x`, and how many leading batch axes `x`, `idx` and the result share.
    fn axis_and_batch(&self) -> (usize, usize) {
        match self {
            IndexOp::Take { axis } => (*axis, 0),
            IndexOp::TakeBatched { axis } => (*axis, 1),
        }
    }
}

impl Rules for IndexOp {
    fn name(&self) -> &'static str {
        match self {
            IndexOp::Take { .. } => "take",
            IndexOp::TakeBatched { .. } => "take_batched",
        }
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexOp::Take { axis } | IndexOp::TakeBatched { axis } => write!(f, "[axis={axis}]"),
        }
    }

    fn arity(&self) -> Option<usize> {
        match self {
            IndexOp::Take { .. } | IndexOp::TakeBatched { .. } => Some(2),
        }
    }

    fn result_count(&self) -> usize {
        1
    }

    fn infer(&self, ins: &[&Aval]) -> Result<Vec<Aval>> {
        match self {
            IndexOp::Take { axis } => Ok(vec![Aval::new(
                take_shape(&ins[0].shape, &ins[1].shape, ins[1].dtype, *axis)?,
                ins[0].dtype,
            )]),
            IndexOp::TakeBatched { axis } => Ok(vec![Aval::new(
                take_batched_shape(&ins[0].shape, &ins[1].shape, ins[1].dtype, *axis)?,
                ins[0].dtype,
            )]),
        }
    }

    fn eval_cpu(&self, ins: &[&HostArray], outs: &[Aval]) -> Result<Vec<HostArray>> {
        let (axis, nb) = self.axis_and_batch();
        Ok(vec![take_cpu(ins[0], ins[1], axis, nb, &outs[0].shape)])
    }

    fn lowering(&self) -> Lowering<'_> {
        match self {
            IndexOp::Take { .. } | IndexOp::TakeBatched { .. } => Lowering::Remap {
                cheap: false,
                alias: false,
            },
        }
    }

    fn emit_wgsl(&self, em: &mut Emitter<'_>, ins: &[Var], idx: &[String]) -> Option<Emitted> {
        let (axis, nb) = self.axis_and_batch();
        let n = em.g.aval(ins[0]).shape[axis];
        let (r, idx_dt) = {
            let a = em.g.aval(ins[1]);
            (a.rank() - nb, a.dtype)
        };
        // The index's coordinates: the shared batch ones, then its own axes (at `axis` in the
        // result).
        let mut ic: Vec<String> = idx[..nb].to_vec();
        ic.extend_from_slice(&idx[axis..axis + r]);
        let raw = em.value(ins[1], &ic);
        let j = em.bind("k", norm_index_wgsl(&raw, idx_dt, n));
        let mut ii: Vec<String> = idx[..axis].to_vec();
        ii.push(j);
        ii.extend_from_slice(&idx[axis + r..]);
        Some(Emitted::Value(em.value(ins[0], &ii)))
    }

    fn batch(&self, ins: &[Batched], _ctx: &BatchCtx<'_>) -> Result<Vec<Batched>> {
        match self {
            IndexOp::Take { axis } => single_batch(batch(*axis, ins)),
            IndexOp::TakeBatched { axis } => single_batch(batch_batched(*axis, ins)),
        }
    }

    fn vjp(&self, ins: &[Tensor], _outs: &[Tensor], cts: &[Option<Tensor>]) -> Result<Cotangents> {
        let (axis, nb) = self.axis_and_batch();
        single_vjp(ins, cts, |ct| vjp(axis, nb, ins, ct))
    }

    fn has_effect(&self) -> bool {
        false
    }
}
