//! Layout primitives: transpose, reshape, broadcast_in_dim, slice (strided), concatenate, pad.
//!
//! All of them only move elements, so each is described by an index map from an output position
//! to an input position. The same map drives the CPU reference and the WGSL lowering, where the map
//! is inlined into whatever kernel consumes the result (layout ops never need their own pass unless
//! their result must be materialized).

use std::fmt;

use crate::dtype::Scalar;
use crate::error::{Error, Result};
use crate::host::{HostArray, HostData, strides, unravel};
use crate::ops::rules::{Emitted, Lowering, Rules, single_batch, single_vjp};
use crate::ops::{BatchCtx, Batched, Cotangents, Prim, ReductionOp};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Var};
use crate::wgsl::{Emitter, const_wgsl};

/// Output shape of `transpose(x, perm)`.
pub fn transpose_shape(shape: &[usize], perm: &[usize]) -> Result<Vec<usize>> {
    let mut seen = vec![false; shape.len()];
    let valid = perm.len() == shape.len()
        && perm
            .iter()
            .all(|&p| p < shape.len() && !std::mem::replace(&mut seen[p], true));
    if !valid {
        return Err(Error::BadShapeArg {
            op: "transpose",
            shape: shape.to_vec(),
            detail: format!("{perm:?} is not a permutation of 0..{}", shape.len()),
        });
    }
    Ok(perm.iter().map(|&p| shape[p]).collect())
}

/// Validate `broadcast_in_dim(x, shape, dims)`: input axis i maps to output axis `dims[i]` and must equal it or be 1.
pub fn broadcast_check(in_shape: &[usize], shape: &[usize], dims: &[usize]) -> Result<()> {
    let bad = |detail: String| {
        Err(Error::BadShapeArg {
            op: "broadcast_in_dim",
            shape: in_shape.to_vec(),
            detail,
        })
    };
    if dims.len() != in_shape.len() {
        return bad(format!(
            "needs one output axis per input axis, got dims {dims:?}"
        ));
    }
    for (i, &d) in dims.iter().enumerate() {
        if d >= shape.len() || (i > 0 && dims[i - 1] >= d) {
            return bad(format!(
                "dims {dims:?} must be increasing axes of the target {shape:?}"
            ));
        }
        if in_shape[i] != 1 && in_shape[i] != shape[d] {
            return bad(format!(
                "cannot broadcast to {shape:?}: axis {i} has size {} but the target axis {d} has {}",
                in_shape[i], shape[d]
            ));
        }
    }
    Ok(())
}

/// Output shape of a strided slice.
pub fn slice_shape(
    shape: &[usize],
    start: &[usize],
    limit: &[usize],
    stride: &[usize],
) -> Result<Vec<usize>> {
    let bad = |detail: String| {
        Err(Error::BadShapeArg {
            op: "slice",
            shape: shape.to_vec(),
            detail,
        })
    };
    if start.len() != shape.len() || limit.len() != shape.len() || stride.len() != shape.len() {
        return bad(format!(
            "start {start:?}, limit {limit:?} and strides {stride:?} need one entry per axis ({} axes)",
            shape.len()
        ));
    }
    let mut out = Vec::with_capacity(shape.len());
    for i in 0..shape.len() {
        if start[i] > limit[i] || limit[i] > shape[i] || stride[i] == 0 {
            return bad(format!(
                "axis {i}: need 0 <= start ({}) <= limit ({}) <= size ({}) and stride ({}) >= 1",
                start[i], limit[i], shape[i], stride[i]
            ));
        }
        out.push((limit[i] - start[i]).div_ceil(stride[i]));
    }
    Ok(out)
}

/// Output shape of concatenating `shapes` along `axis`.
pub fn concat_shape(shapes: &[&[usize]], axis: usize) -> Result<Vec<usize>> {
    let Some(first) = shapes.first() else {
        return Err(Error::BadShapeArg {
            op: "concatenate",
            shape: vec![],
            detail: "needs at least one array".into(),
        });
    };
    if axis >= first.len() {
        return Err(Error::BadAxis {
            op: "concatenate",
            axis: axis as i64,
            rank: first.len(),
            shape: first.to_vec(),
        });
    }
    let mut out = first.to_vec();
    for s in &shapes[1..] {
        let same_rest =
            s.len() == first.len() && (0..s.len()).all(|i| i == axis || s[i] == first[i]);
        if !same_rest {
            return Err(Error::BadShapeArg {
                op: "concatenate",
                shape: s.to_vec(),
                detail: format!("all arrays must match {first:?} except along axis {axis}"),
            });
        }
        out[axis] = out[axis]
            .checked_add(s[axis])
            .ok_or_else(|| Error::ShapeTooLarge {
                op: "concatenate",
                shape: out.clone(),
                detail: format!("adding {} rows along axis {axis} overflows", s[axis]),
            })?;
    }
    Ok(out)
}

/// Output shape of `pad` with low/high/interior padding per axis.
pub fn pad_shape(
    shape: &[usize],
    lo: &[usize],
    hi: &[usize],
    interior: &[usize],
) -> Result<Vec<usize>> {
    if lo.len() != shape.len() || hi.len() != shape.len() || interior.len() != shape.len() {
        return Err(Error::BadShapeArg {
            op: "pad",
            shape: shape.to_vec(),
            detail: format!("lo {lo:?}, hi {hi:?}, interior {interior:?} need one entry per axis"),
        });
    }
    (0..shape.len())
        .map(|i| {
            shape[i]
                .saturating_sub(1)
                .checked_mul(interior[i])
                .and_then(|n| n.checked_add(lo[i]))
                .and_then(|n| n.checked_add(hi[i]))
                .and_then(|n| n.checked_add(shape[i]))
        })
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| Error::ShapeTooLarge {
            op: "pad",
            shape: shape.to_vec(),
            detail: format!("padding it by lo {lo:?}, hi {hi:?}, interior {interior:?} overflows"),
        })
}

// ---- CPU reference -----------------------------------------------------------------------------

/// Gather every output element from the input through `map` (None: use `fill`).
fn gather(
    x: &HostArray,
    out_shape: &[usize],
    fill: Option<Scalar>,
    map: impl Fn(&[usize]) -> Option<Vec<usize>>,
) -> HostArray {
    let n: usize = out_shape.iter().product();
    let st = strides(&x.shape);
    let vals = (0..n).map(|i| {
        let oi = unravel(i, out_shape);
        match map(&oi) {
            Some(ii) => x.data.get(ii.iter().zip(&st).map(|(a, b)| a * b).sum()),
            None => fill.unwrap_or(Scalar::F32(0.0)).cast(x.dtype()),
        }
    });
    HostArray {
        shape: out_shape.to_vec(),
        data: HostData::from_scalars(x.dtype(), vals),
    }
}

pub(crate) fn transpose_cpu(x: &HostArray, perm: &[usize], out_shape: &[usize]) -> HostArray {
    gather(x, out_shape, None, |o| {
        let mut ii = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            ii[p] = o[i];
        }
        Some(ii)
    })
}

pub(crate) fn broadcast_cpu(x: &HostArray, shape: &[usize], dims: &[usize]) -> HostArray {
    gather(x, shape, None, |o| {
        Some(
            dims.iter()
                .enumerate()
                .map(|(i, &d)| if x.shape[i] == 1 { 0 } else { o[d] })
                .collect(),
        )
    })
}

pub(crate) fn slice_cpu(
    x: &HostArray,
    start: &[usize],
    stride: &[usize],
    out_shape: &[usize],
) -> HostArray {
    gather(x, out_shape, None, |o| {
        Some((0..o.len()).map(|i| start[i] + o[i] * stride[i]).collect())
    })
}

pub(crate) fn pad_cpu(
    x: &HostArray,
    lo: &[usize],
    interior: &[usize],
    value: Scalar,
    out_shape: &[usize],
) -> HostArray {
    gather(x, out_shape, Some(value), |o| {
        let mut ii = Vec::with_capacity(o.len());
        for d in 0..o.len() {
            let p = o[d].checked_sub(lo[d])?;
            let step = interior[d] + 1;
            if p % step != 0 || p / step >= x.shape[d] {
                return None;
            }
            ii.push(p / step);
        }
        Some(ii)
    })
}

pub(crate) fn concat_cpu(xs: &[&HostArray], axis: usize, out_shape: &[usize]) -> HostArray {
    let n: usize = out_shape.iter().product();
    let dt = xs[0].dtype();
    let vals = (0..n).map(|i| {
        let mut oi = unravel(i, out_shape);
        let mut k = 0;
        while oi[axis] >= xs[k].shape[axis] {
            oi[axis] -= xs[k].shape[axis];
            k += 1;
        }
        let st = strides(&xs[k].shape);
        xs[k].data.get(oi.iter().zip(&st).map(|(a, b)| a * b).sum())
    });
    HostArray {
        shape: out_shape.to_vec(),
        data: HostData::from_scalars(dt, vals),
    }
}

// ---- WGSL index maps ------------------------------------------------------------------------------
// Index expressions are WGSL `u32` expressions, one per axis.

pub fn transpose_wgsl(perm: &[usize], out_idx: &[String]) -> Vec<String> {
    let mut ii = vec![String::new(); perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        ii[p] = out_idx[i].clone();
    }
    ii
}

pub fn broadcast_wgsl(in_shape: &[usize], dims: &[usize], out_idx: &[String]) -> Vec<String> {
    dims.iter()
        .enumerate()
        .map(|(i, &d)| {
            if in_shape[i] == 1 {
                "0u".to_string()
            } else {
                out_idx[d].clone()
            }
        })
        .collect()
}

pub fn slice_wgsl(start: &[usize], stride: &[usize], out_idx: &[String]) -> Vec<String> {
    (0..out_idx.len())
        .map(|i| match (start[i], stride[i]) {
            (0, 1) => out_idx[i].clone(),
            (s, 1) => format!("({} + {s}u)", out_idx[i]),
            (s, t) => format!("({}u + {} * {t}u)", s, out_idx[i]),
        })
        .collect()
}

/// Linear row-major offset of `idx` in `shape`, as WGSL.
pub fn linear_wgsl(shape: &[usize], idx: &[String]) -> String {
    let st = strides(shape);
    let terms: Vec<String> = (0..shape.len())
        .filter(|&i| shape[i] != 1)
        .map(|i| {
            if st[i] == 1 {
                idx[i].clone()
            } else {
                format!("{} * {}u", idx[i], st[i])
            }
        })
        .collect();
    if terms.is_empty() {
        "0u".to_string()
    } else {
        terms.join(" + ")
    }
}

/// Per-axis indices of linear offset `lin` (a WGSL expression) in `shape`.
pub fn unravel_wgsl(shape: &[usize], lin: &str) -> Vec<String> {
    // An array with a zero-size axis has no elements, so this code never runs for it; treating
    // such axes as size 1 keeps the shader free of divisions by zero that naga rejects.
    let shape: Vec<usize> = shape.iter().map(|&d| d.max(1)).collect();
    let shape = shape.as_slice();
    let st = strides(shape);
    (0..shape.len())
        .map(|i| {
            if shape[i] == 1 {
                "0u".to_string()
            } else if i == 0 {
                if st[0] == 1 {
                    lin.to_string()
                } else {
                    format!("({lin} / {}u)", st[0])
                }
            } else if st[i] == 1 {
                format!("({lin} % {}u)", shape[i])
            } else {
                format!("(({lin} / {}u) % {}u)", st[i], shape[i])
            }
        })
        .collect()
}

/// For pad: (condition that the output position holds an input element, input indices).
pub fn pad_wgsl(
    in_shape: &[usize],
    lo: &[usize],
    interior: &[usize],
    out_idx: &[String],
) -> (String, Vec<String>) {
    let mut conds = Vec::new();
    let mut ii = Vec::new();
    for d in 0..in_shape.len() {
        let p = if lo[d] == 0 {
            out_idx[d].clone()
        } else {
            format!("({} - {}u)", out_idx[d], lo[d])
        };
        if lo[d] > 0 {
            conds.push(format!("{} >= {}u", out_idx[d], lo[d]));
        }
        let step = interior[d] + 1;
        if step > 1 {
            conds.push(format!("{p} % {step}u == 0u"));
            ii.push(format!("({p} / {step}u)"));
        } else {
            ii.push(p);
        }
        conds.push(format!("{} < {}u", ii[d], in_shape[d]));
    }
    (
        if conds.is_empty() {
            "true".into()
        } else {
            conds.join(" && ")
        },
        ii,
    )
}

// ---- batching rule ------------------------------------------------------------------------------

/// Layout primitives batch by leaving the leading batch axis alone: every axis parameter shifts by
/// one and every shape parameter gains the batch size in front.
fn batch(op: &LayoutOp, ins: &[Batched], ctx: &BatchCtx<'_>) -> Batched {
    let n = ctx.size;
    let front = |v: &[usize], first: usize| -> Vec<usize> {
        std::iter::once(first).chain(v.iter().copied()).collect()
    };
    let shifted = match op {
        LayoutOp::Transpose { perm } => LayoutOp::Transpose {
            perm: std::iter::once(0)
                .chain(perm.iter().map(|p| p + 1))
                .collect(),
        },
        LayoutOp::Reshape { shape } => LayoutOp::Reshape {
            shape: front(shape, n),
        },
        LayoutOp::BroadcastInDim { shape, dims } => LayoutOp::BroadcastInDim {
            shape: front(shape, n),
            dims: std::iter::once(0)
                .chain(dims.iter().map(|d| d + 1))
                .collect(),
        },
        LayoutOp::Slice {
            start,
            limit,
            stride,
        } => LayoutOp::Slice {
            start: front(start, 0),
            limit: front(limit, n),
            stride: front(stride, 1),
        },
        LayoutOp::Concatenate { axis } => LayoutOp::Concatenate { axis: axis + 1 },
        LayoutOp::Pad {
            lo,
            hi,
            interior,
            value,
        } => LayoutOp::Pad {
            lo: front(lo, 0),
            hi: front(hi, 0),
            interior: front(interior, 0),
            value: *value,
        },
    };
    // Concatenate may mix batched and unbatched operands; the others have one operand.
    super::apply_batched(Prim::Layout(shifted), ins, n)
}

// ---- VJP rule -----------------------------------------------------------------------------------

/// Layout primitives move values without changing them; their cotangents move back: transpose by
/// the inverse permutation, reshape to the old shape, sum what a broadcast copied, pad what a slice
/// dropped (and slice what a pad added), split what a concatenation joined.
fn vjp(op: &LayoutOp, ins: &[Tensor], ct: &Tensor) -> Cotangents {
    use super::ReduceOp;
    let x = &ins[0];
    if !x.dtype().is_float() {
        return vec![None; ins.len()];
    }
    match op {
        LayoutOp::Transpose { perm } => {
            let mut inv = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv[p] = i;
            }
            vec![Some(ct.transpose(&inv))]
        }
        LayoutOp::Reshape { .. } => vec![Some(ct.reshape_exact(x.shape()))],
        LayoutOp::BroadcastInDim { shape, dims } => {
            // Sum over new axes and stretched size-1 axes, then restore x's shape.
            let summed: Vec<usize> = (0..shape.len())
                .filter(|o| match dims.iter().position(|d| d == o) {
                    None => true,
                    Some(i) => x.shape()[i] == 1 && shape[*o] != 1,
                })
                .collect();
            let s = if summed.is_empty() {
                ct.clone()
            } else {
                Tensor::apply(
                    Prim::Reduction(ReductionOp::Reduce {
                        op: ReduceOp::Sum,
                        axes: summed.clone(),
                    }),
                    &[ct],
                )
            };
            // Remaining axes are output axes in increasing order; put them in x's axis order.
            let kept: Vec<usize> = (0..shape.len()).filter(|o| !summed.contains(o)).collect();
            let kept_in: Vec<usize> = dims
                .iter()
                .filter(|d| kept.contains(d))
                .map(|d| kept.iter().position(|k| k == d).unwrap_or(0))
                .collect();
            let s = if kept_in.windows(2).all(|w| w[0] < w[1]) {
                s
            } else {
                s.transpose(&kept_in)
            };
            vec![Some(s.reshape_exact(x.shape()))]
        }
        LayoutOp::Slice {
            start,
            limit: _,
            stride,
        } => {
            if ct.size() == 0 {
                return vec![Some(super::zeros_like(x))];
            }
            let hi: Vec<usize> = (0..x.ndim())
                .map(|a| {
                    let last = start[a] + (ct.shape()[a] - 1) * stride[a];
                    x.shape()[a] - last - 1
                })
                .collect();
            let interior: Vec<usize> = stride.iter().map(|s| s - 1).collect();
            vec![Some(Tensor::apply(
                Prim::Layout(LayoutOp::Pad {
                    lo: start.clone(),
                    hi,
                    interior,
                    value: crate::Scalar::F32(0.0).cast(ct.dtype()),
                }),
                &[ct],
            ))]
        }
        LayoutOp::Concatenate { axis } => {
            let mut at = 0;
            ins.iter()
                .map(|t| {
                    let len = t.shape()[*axis];
                    let mut start = vec![0; ct.ndim()];
                    let mut limit = ct.shape().to_vec();
                    start[*axis] = at;
                    limit[*axis] = at + len;
                    at += len;
                    Some(Tensor::apply(
                        Prim::Layout(LayoutOp::Slice {
                            start,
                            limit,
                            stride: vec![1; ct.ndim()],
                        }),
                        &[ct],
                    ))
                })
                .collect()
        }
        LayoutOp::Pad { lo, interior, .. } => {
            if x.size() == 0 {
                return vec![Some(super::zeros_like(x))];
            }
            let stride: Vec<usize> = interior.iter().map(|i| i + 1).collect();
            let limit: Vec<usize> = (0..x.ndim())
                .map(|a| lo[a] + (x.shape()[a] - 1) * stride[a] + 1)
                .collect();
            vec![Some(Tensor::apply(
                Prim::Layout(LayoutOp::Slice {
                    start: lo.clone(),
                    limit,
                    stride,
                }),
                &[ct],
            ))]
        }
    }
}

// ---- the family -----------------------------------------------------------------------------------

/// The layout primitives (one operand each, except `concatenate`).
#[derive(Clone, Debug, PartialEq)]
pub enum LayoutOp {
    Transpose {
        perm: Vec<usize>,
    },
    Reshape {
        shape: Vec<usize>,
    },
    /// Input axis i becomes output axis `dims[i]`; size-1 input axes stretch.
    BroadcastInDim {
        shape: Vec<usize>,
        dims: Vec<usize>,
    },
    Slice {
        start: Vec<usize>,
        limit: Vec<usize>,
        stride: Vec<usize>,
    },
    Concatenate {
        axis: usize,
    },
    Pad {
        lo: Vec<usize>,
        hi: Vec<usize>,
        interior: Vec<usize>,
        value: Scalar,
    },
}

impl Rules for LayoutOp {
    fn name(&self) -> &'static str {
        match self {
            LayoutOp::Transpose { .. } => "transpose",
            LayoutOp::Reshape { .. } => "reshape",
            LayoutOp::BroadcastInDim { .. } => "broadcast_in_dim",
            LayoutOp::Slice { .. } => "slice",
            LayoutOp::Concatenate { .. } => "concatenate",
            LayoutOp::Pad { .. } => "pad",
        }
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutOp::Transpose { perm } => write!(f, "[permutation={perm:?}]"),
            LayoutOp::Reshape { shape } => write!(f, "[new_sizes={shape:?}]"),
            LayoutOp::BroadcastInDim { shape, dims } => {
                write!(f, "[shape={shape:?} broadcast_dimensions={dims:?}]")
            }
            LayoutOp::Slice {
                start,
                limit,
                stride,
            } => write!(f, "[start={start:?} limit={limit:?} strides={stride:?}]"),
            LayoutOp::Concatenate { axis } => write!(f, "[dimension={axis}]"),
            LayoutOp::Pad {
                lo,
                hi,
                interior,
                value,
            } => write!(
                f,
                "[lo={lo:?} hi={hi:?} interior={interior:?} value={value}]"
            ),
        }
    }

    fn arity(&self) -> Option<usize> {
        match self {
            LayoutOp::Concatenate { .. } => None,
            LayoutOp::Transpose { .. }
            | LayoutOp::Reshape { .. }
            | LayoutOp::BroadcastInDim { .. }
            | LayoutOp::Slice { .. }
            | LayoutOp::Pad { .. } => Some(1),
        }
    }

    fn result_count(&self) -> usize {
        1
    }

    fn infer(&self, ins: &[&Aval]) -> Result<Vec<Aval>> {
        let dt = ins.first().map(|a| a.dtype).unwrap_or(crate::DType::F32);
        let shape = match self {
            LayoutOp::Transpose { perm } => transpose_shape(&ins[0].shape, perm)?,
            LayoutOp::Reshape { shape } => {
                let (from_n, to_n) = (ins[0].size(), crate::host::shape_size("reshape", shape)?);
                if from_n != to_n {
                    return Err(Error::BadReshape {
                        from: ins[0].shape.clone(),
                        from_n,
                        to: shape.clone(),
                        to_n,
                    });
                }
                shape.clone()
            }
            LayoutOp::BroadcastInDim { shape, dims } => {
                broadcast_check(&ins[0].shape, shape, dims)?;
                shape.clone()
            }
            LayoutOp::Slice {
                start,
                limit,
                stride,
            } => slice_shape(&ins[0].shape, start, limit, stride)?,
            LayoutOp::Concatenate { axis } => {
                let shapes: Vec<&[usize]> = ins.iter().map(|a| a.shape.as_slice()).collect();
                let out = concat_shape(&shapes, *axis)?;
                if let Some(b) = ins.iter().find(|a| a.dtype != dt) {
                    return Err(Error::DTypeMismatch {
                        op: "concatenate",
                        lhs: dt,
                        rhs: b.dtype,
                        shapes: vec![],
                    });
                }
                out
            }
            LayoutOp::Pad {
                lo,
                hi,
                interior,
                value,
            } => {
                if value.dtype() != dt {
                    return Err(Error::DTypeMismatch {
                        op: "pad (value)",
                        lhs: dt,
                        rhs: value.dtype(),
                        shapes: vec![],
                    });
                }
                pad_shape(&ins[0].shape, lo, hi, interior)?
            }
        };
        Ok(vec![Aval::new(shape, dt)])
    }

    fn eval_cpu(&self, ins: &[&HostArray], outs: &[Aval]) -> Result<Vec<HostArray>> {
        let out = &outs[0].shape;
        Ok(vec![match self {
            LayoutOp::Transpose { perm } => transpose_cpu(ins[0], perm, out),
            LayoutOp::Reshape { shape } => HostArray {
                shape: shape.clone(),
                data: ins[0].data.clone(),
            },
            LayoutOp::BroadcastInDim { shape, dims } => broadcast_cpu(ins[0], shape, dims),
            LayoutOp::Slice { start, stride, .. } => slice_cpu(ins[0], start, stride, out),
            LayoutOp::Concatenate { axis } => concat_cpu(ins, *axis, out),
            LayoutOp::Pad {
                lo,
                interior,
                value,
                ..
            } => pad_cpu(ins[0], lo, interior, *value, out),
        }])
    }

    fn lowering(&self) -> Lowering<'_> {
        match self {
            // An identity transpose (grad of dot_general emits them around its results) is a
            // reshape to the same shape.
            LayoutOp::Transpose { perm } => Lowering::Remap {
                cheap: true,
                alias: perm.iter().enumerate().all(|(i, &p)| i == p),
            },
            LayoutOp::Reshape { .. } => Lowering::Remap {
                cheap: false,
                alias: true,
            },
            LayoutOp::BroadcastInDim { .. } | LayoutOp::Slice { .. } => Lowering::Remap {
                cheap: true,
                alias: false,
            },
            LayoutOp::Concatenate { .. } | LayoutOp::Pad { .. } => Lowering::Remap {
                cheap: false,
                alias: false,
            },
        }
    }

    fn emit_wgsl(&self, em: &mut Emitter<'_>, ins: &[Var], idx: &[String]) -> Option<Emitted> {
        let in_shape = em.g.aval(ins[0]).shape.clone();
        Some(Emitted::Value(match self {
            LayoutOp::Transpose { perm } => em.value(ins[0], &transpose_wgsl(perm, idx)),
            LayoutOp::BroadcastInDim { dims, .. } => {
                em.value(ins[0], &broadcast_wgsl(&in_shape, dims, idx))
            }
            LayoutOp::Slice { start, stride, .. } => {
                let ii = em.bind_idx(slice_wgsl(start, stride, idx));
                em.value(ins[0], &ii)
            }
            LayoutOp::Reshape { shape } => {
                let l = em.bind("l", linear_wgsl(shape, idx));
                let ii = em.bind_idx(unravel_wgsl(&in_shape, &l));
                em.value(ins[0], &ii)
            }
            LayoutOp::Pad {
                lo,
                interior,
                value,
                ..
            } => {
                let (cond, ii) = pad_wgsl(&in_shape, lo, interior, idx);
                let t = em.tmp("p");
                em.line(&format!(
                    "var {t}: {} = {};",
                    value.dtype().wgsl(),
                    const_wgsl(*value)
                ));
                em.line(&format!("if ({cond}) {{"));
                em.indent += 1;
                let ii = em.bind_idx(ii);
                let x = em.value(ins[0], &ii);
                em.line(&format!("{t} = {x};"));
                em.indent -= 1;
                em.line("}");
                t
            }
            LayoutOp::Concatenate { axis } => concat_emit(em, ins, *axis, idx),
        }))
    }

    fn batch(&self, ins: &[Batched], ctx: &BatchCtx<'_>) -> Result<Vec<Batched>> {
        single_batch(batch(self, ins, ctx))
    }

    fn vjp(&self, ins: &[Tensor], _outs: &[Tensor], cts: &[Option<Tensor>]) -> Result<Cotangents> {
        single_vjp(ins, cts, |ct| vjp(self, ins, ct))
    }

    fn has_effect(&self) -> bool {
        false
    }
}

/// `concatenate` in WGSL: the operand whose range along `axis` holds the index.
fn concat_emit(em: &mut Emitter<'_>, ins: &[Var], axis: usize, idx: &[String]) -> String {
    let dt = em.g.aval(ins[0]).dtype;
    let t = em.tmp("c");
    em.line(&format!("var {t}: {};", dt.wgsl()));
    let mut parts = Vec::new();
    let mut start = 0usize;
    for &inp in ins {
        let len = em.g.aval(inp).shape[axis];
        if len > 0 {
            parts.push((inp, start, start + len));
        }
        start += len;
    }
    let last = parts.len().saturating_sub(1);
    for (j, &(inp, start, end)) in parts.iter().enumerate() {
        let head = match (j, parts.len()) {
            (_, 1) => "{".to_string(),
            (0, _) => format!("if ({} < {end}u) {{", idx[axis]),
            (j, _) if j == last => "} else {".to_string(),
            _ => format!("}} else if ({} < {end}u) {{", idx[axis]),
        };
        em.line(&head);
        em.indent += 1;
        let mut ii = idx.to_vec();
        if start > 0 {
            ii[axis] = format!("({} - {start}u)", idx[axis]);
        }
        let ii = em.bind_idx(ii);
        let x = em.value(inp, &ii);
        em.line(&format!("{t} = {x};"));
        em.indent -= 1;
    }
    if !parts.is_empty() {
        em.line("}");
    }
    t
}
