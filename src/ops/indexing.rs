//! Indexing: `take` (gather whole slices along one axis by integer indices).
//!
//! Index semantics (same on CPU and device): a negative index counts from the end once (`-1` is the
//! last element, as in NumPy); anything still out of range is clamped into `[0, n)`, the way XLA's
//! gather clamps. `one_hot` is a composition (`eq(expand(idx), iota)`), see `Tensor::one_hot`.

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

/// Normalize one index into `[0, n)` (wrap negatives once, then clamp).
pub fn norm_index(i: i64, n: usize) -> usize {
    let n = n as i64;
    let i = if i < 0 { i + n } else { i };
    i.clamp(0, (n - 1).max(0)) as usize
}

pub(crate) fn take_cpu(
    x: &HostArray,
    idx: &HostArray,
    axis: usize,
    out_shape: &[usize],
) -> HostArray {
    let st = strides(&x.shape);
    let r = idx.shape.len();
    let n: usize = out_shape.iter().product();
    let vals = (0..n).map(|o| {
        let oi = unravel(o, out_shape);
        let idx_lin: usize = {
            let isub = &oi[axis..axis + r];
            let ist = strides(&idx.shape);
            isub.iter().zip(&ist).map(|(a, b)| a * b).sum()
        };
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
/// front. When both are batched, each example must index its own slice: `x` is viewed as
/// `(batch * n, ...)` along the taken axis and each example's indices are offset by `b * n`
/// (after resolving negative and out-of-range indices the way `take` does).
fn batch(axis: usize, ins: &[super::Batched], ctx: &super::BatchCtx<'_>) -> super::Batched {
    use super::Prim;
    use crate::tensor::Tensor;
    let ((x, xb), (idx, ib)) = (&ins[0], &ins[1]);
    match (xb, ib) {
        (true, false) => (
            Tensor::apply(Prim::Indexing(IndexOp::Take { axis: axis + 1 }), &[x, idx]),
            true,
        ),
        (false, true) => {
            let out = Tensor::apply(Prim::Indexing(IndexOp::Take { axis }), &[x, idx]);
            (super::move_axis(&out, axis, 0), true)
        }
        _ => {
            let b = ctx.size;
            // x: (B, ..., n at axis+1, ...) -> (B, n, rest...) -> (B*n, rest...)
            let x1 = super::move_axis(x, axis + 1, 1);
            let n = x.shape().get(axis + 1).copied().unwrap_or(0);
            let rest: Vec<usize> = x1.shape().iter().skip(2).copied().collect();
            let mut flat = vec![b * n];
            flat.extend_from_slice(&rest);
            let xf = x1.reshape_exact(&flat);
            // Indices resolved into [0, n), as take does, then offset per example.
            let ni = n as i32;
            let clamped = resolve_indices(idx, n);
            let ishape = idx.shape().to_vec();
            let offs = Tensor::iota(DType::I32, &ishape, 0) * ni;
            let flat_idx = &clamped + &offs;
            // Result: (B, idx..., rest...) with idx's own batch axis first; then the taken axes go
            // back between the leading axes of x and its trailing ones.
            let out = Tensor::apply(Prim::Indexing(IndexOp::Take { axis: 0 }), &[&xf, &flat_idx]);
            // out axes: [B, idx_rest..., x axes before `axis`..., x axes after `axis`...]
            let k = ishape.len() - 1; // idx axes besides the batch axis
            let before = axis; // x axes before the taken one (excluding batch)
            let total = out.ndim();
            let mut perm: Vec<usize> = vec![0];
            perm.extend(1 + k..1 + k + before);
            perm.extend(1..1 + k);
            perm.extend(1 + k + before..total);
            (out.transpose(&perm), true)
        }
    }
}

// ---- VJP rule -----------------------------------------------------------------------------------

/// `take` scatters its cotangent back: every taken slice adds into the row it came from. Written as
/// a contraction with the one-hot matrix of the (resolved) indices, which is differentiable again.
fn vjp(
    axis: usize,
    ins: &[crate::tensor::Tensor],
    ct: &crate::tensor::Tensor,
) -> super::Cotangents {
    let (x, idx) = (&ins[0], &ins[1]);
    if !x.dtype().is_float() {
        return vec![None, None];
    }
    let n = x.shape()[axis];
    let resolved = resolve_indices(idx, n);
    let oh = resolved.one_hot(n).cast(x.dtype()); // idx.shape + [n]
    let k = idx.ndim();
    // ct axes: x[..axis], idx axes (axis..axis+k), x[axis+1..]; contract the idx axes.
    let g = ct.dot_general(
        &oh,
        super::DotDims {
            lhs_contract: (axis..axis + k).collect(),
            rhs_contract: (0..k).collect(),
            lhs_batch: vec![],
            rhs_batch: vec![],
        },
    );
    // g axes: x[..axis], x[axis+1..], n  -> move n back to `axis`.
    let last = g.ndim() - 1;
    vec![Some(super::move_axis(&g, last, axis)), None]
}

/// Indices resolved the way `take` reads them, as i32 in `[0, n)`: a negative i32 counts from the
/// end once, then everything is clamped (u32 indices are clamped before the cast, so that large
/// ones do not wrap to negative).
fn resolve_indices(idx: &crate::tensor::Tensor, n: usize) -> crate::tensor::Tensor {
    use crate::tensor::Tensor;
    let last = n.saturating_sub(1);
    if idx.dtype() == DType::U32 {
        return idx.minimum(&Tensor::scalar(last as u32)).cast(DType::I32);
    }
    let i = idx.cast(DType::I32);
    let ni = n as i32;
    let wrapped = i.lt(&Tensor::scalar(0i32)).where_(&(&i + ni), &i);
    wrapped
        .maximum(&Tensor::scalar(0i32))
        .minimum(&Tensor::scalar(last as i32))
}

// ---- the family -----------------------------------------------------------------------------------

/// The indexing primitives.
#[derive(Clone, Debug, PartialEq)]
pub enum IndexOp {
    /// `take(x, idx)` along `axis` (see the module's index semantics).
    Take { axis: usize },
}

impl Rules for IndexOp {
    fn name(&self) -> &'static str {
        match self {
            IndexOp::Take { .. } => "take",
        }
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexOp::Take { axis } => write!(f, "[axis={axis}]"),
        }
    }

    fn arity(&self) -> Option<usize> {
        match self {
            IndexOp::Take { .. } => Some(2),
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
        }
    }

    fn eval_cpu(&self, ins: &[&HostArray], outs: &[Aval]) -> Result<Vec<HostArray>> {
        match self {
            IndexOp::Take { axis } => Ok(vec![take_cpu(ins[0], ins[1], *axis, &outs[0].shape)]),
        }
    }

    fn lowering(&self) -> Lowering<'_> {
        match self {
            IndexOp::Take { .. } => Lowering::Remap {
                cheap: false,
                alias: false,
            },
        }
    }

    fn emit_wgsl(&self, em: &mut Emitter<'_>, ins: &[Var], idx: &[String]) -> Option<Emitted> {
        match self {
            IndexOp::Take { axis } => {
                let axis = *axis;
                let n = em.g.aval(ins[0]).shape[axis];
                let (r, idx_dt) = {
                    let a = em.g.aval(ins[1]);
                    (a.rank(), a.dtype)
                };
                let raw = em.value(ins[1], &idx[axis..axis + r]);
                let j = em.bind("k", norm_index_wgsl(&raw, idx_dt, n));
                let mut ii: Vec<String> = idx[..axis].to_vec();
                ii.push(j);
                ii.extend_from_slice(&idx[axis + r..]);
                Some(Emitted::Value(em.value(ins[0], &ii)))
            }
        }
    }

    fn batch(&self, ins: &[Batched], ctx: &BatchCtx<'_>) -> Result<Vec<Batched>> {
        match self {
            IndexOp::Take { axis } => single_batch(batch(*axis, ins, ctx)),
        }
    }

    fn vjp(&self, ins: &[Tensor], _outs: &[Tensor], cts: &[Option<Tensor>]) -> Result<Cotangents> {
        match self {
            IndexOp::Take { axis } => single_vjp(ins, cts, |ct| vjp(*axis, ins, ct)),
        }
    }

    fn has_effect(&self) -> bool {
        false
    }
}
