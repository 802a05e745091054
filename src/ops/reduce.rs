//! Reductions: sum, prod, max, min over any set of axes, and argmax/argmin over one axis.
//!
//! The device kernels live in `shaders/reduce.wgsl` / `shaders/argreduce.wgsl`; the code generator
//! inlines the elementwise prologue of the reduced value into the kernel's load, so `sum(x * y)` is one
//! pass. The CPU reference accumulates floats in f64 (the oracle should be more exact than the device).

use std::fmt;

use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::host::{HostArray, HostData, strides, unravel};
use crate::ops::rules::{Emitted, Lowering, Rules, single_batch, single_vjp};
use crate::ops::{BatchCtx, Batched, Cotangents, Prim};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Var};
use crate::wgsl::Emitter;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgOp {
    ArgMax,
    ArgMin,
}

impl ReduceOp {
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "reduce_sum",
            ReduceOp::Prod => "reduce_prod",
            ReduceOp::Max => "reduce_max",
            ReduceOp::Min => "reduce_min",
        }
    }
    /// The identity element, also the result of reducing zero elements.
    pub fn identity(self, dt: DType) -> Scalar {
        match (self, dt) {
            (ReduceOp::Sum, d) => Scalar::F32(0.0).cast(d),
            (ReduceOp::Prod, d) => Scalar::F32(1.0).cast(d),
            (ReduceOp::Max, DType::F32) => Scalar::F32(f32::NEG_INFINITY),
            (ReduceOp::Max, DType::F64) => Scalar::F64(f64::NEG_INFINITY),
            (ReduceOp::Max, DType::I32) => Scalar::I32(i32::MIN),
            (ReduceOp::Max, _) => Scalar::U32(0),
            (ReduceOp::Min, DType::F32) => Scalar::F32(f32::INFINITY),
            (ReduceOp::Min, DType::F64) => Scalar::F64(f64::INFINITY),
            (ReduceOp::Min, DType::I32) => Scalar::I32(i32::MAX),
            (ReduceOp::Min, _) => Scalar::U32(u32::MAX),
        }
    }
    /// The CPU rule for floats, in f64 (the reference accumulates f32 in f64): max/min propagate
    /// NaN, the first NaN operand winning.
    #[inline(always)]
    pub(crate) fn combine_f64(self, a: f64, b: f64) -> f64 {
        use super::elementwise::{nan_max, nan_min};
        match self {
            ReduceOp::Sum => a + b,
            ReduceOp::Prod => a * b,
            ReduceOp::Max => nan_max(a, b),
            ReduceOp::Min => nan_min(a, b),
        }
    }
    /// The CPU rule for i32 (wrapping, like the device).
    #[inline(always)]
    pub(crate) fn combine_i32(self, a: i32, b: i32) -> i32 {
        match self {
            ReduceOp::Sum => a.wrapping_add(b),
            ReduceOp::Prod => a.wrapping_mul(b),
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }
    }
    /// The CPU rule for u32 (wrapping).
    #[inline(always)]
    pub(crate) fn combine_u32(self, a: u32, b: u32) -> u32 {
        match self {
            ReduceOp::Sum => a.wrapping_add(b),
            ReduceOp::Prod => a.wrapping_mul(b),
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }
    }
    /// WGSL combining expression for values of dtype `dt` (float max/min propagate NaN, as
    /// `jnp.max`).
    pub fn wgsl_combine(self, dt: DType, acc: &str, x: &str) -> String {
        use crate::ops::BinaryOp;
        match self {
            ReduceOp::Sum => format!("{acc} + {x}"),
            ReduceOp::Prod => format!("{acc} * {x}"),
            ReduceOp::Max => super::elementwise::max_min_wgsl(BinaryOp::Max, dt, acc, x),
            ReduceOp::Min => super::elementwise::max_min_wgsl(BinaryOp::Min, dt, acc, x),
        }
    }
}

impl ArgOp {
    /// The CPU rule: the index picked among `vals` (the first index wins ties; the first NaN wins
    /// over numbers, as `jnp.argmax`). 0 for no values.
    #[inline]
    pub(crate) fn pick(self, vals: impl Iterator<Item = f64>) -> usize {
        let (mut best, mut b) = (0usize, f64::NAN);
        for (k, v) in vals.enumerate() {
            if k == 0 {
                b = v;
                continue;
            }
            if b.is_nan() {
                break;
            }
            let better = v.is_nan()
                || match self {
                    ArgOp::ArgMax => v > b,
                    ArgOp::ArgMin => v < b,
                };
            if better {
                (best, b) = (k, v);
            }
        }
        best
    }
    pub fn name(self) -> &'static str {
        match self {
            ArgOp::ArgMax => "argmax",
            ArgOp::ArgMin => "argmin",
        }
    }
    /// WGSL comparison: does candidate `x` replace the best `b` (strictly better, so ties keep the
    /// first)? For floats a NaN is better than any number and no value replaces a NaN, so the
    /// first NaN's index wins, as `jnp.argmax`.
    pub fn wgsl_better(self, dt: DType, x: &str, b: &str) -> String {
        let cmp = match self {
            ArgOp::ArgMax => format!("{x} > {b}"),
            ArgOp::ArgMin => format!("{x} < {b}"),
        };
        if dt == DType::F32 {
            let (nx, nb) = (
                super::elementwise::isnan_wgsl(x),
                super::elementwise::isnan_wgsl(b),
            );
            format!("(!{nb} && ({nx} || {cmp}))")
        } else {
            cmp
        }
    }
}

/// Check and normalize reduction axes (sorted, unique, in range).
pub fn check_axes(op: &'static str, shape: &[usize], axes: &[usize]) -> Result<Vec<usize>> {
    let mut a = axes.to_vec();
    a.sort_unstable();
    for w in a.windows(2) {
        if w[0] == w[1] {
            return Err(Error::BadShapeArg {
                op,
                shape: shape.to_vec(),
                detail: format!("axis {} is repeated in {axes:?}", w[0]),
            });
        }
    }
    if let Some(&bad) = a.iter().find(|&&x| x >= shape.len()) {
        return Err(Error::BadAxis {
            op,
            axis: bad as i64,
            rank: shape.len(),
            shape: shape.to_vec(),
        });
    }
    Ok(a)
}

/// Dtype rule for reductions: numeric only.
pub fn reduce_dtype(op: ReduceOp, dt: DType) -> Result<DType> {
    if dt == DType::Bool {
        return Err(Error::BadDType {
            op: op.name(),
            dtype: dt,
            hint: "cast to i32 or f32 first (sum of bools counts them)",
            shapes: vec![],
        });
    }
    Ok(dt)
}

/// Shape after removing `axes`.
pub fn reduced_shape(shape: &[usize], axes: &[usize]) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, &d)| d)
        .collect()
}

/// For each output element, the list of input linear offsets it reduces over (in row-major order of the reduced axes).
fn groups(shape: &[usize], axes: &[usize]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let out_shape = reduced_shape(shape, axes);
    let red_shape: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
    let kept: Vec<usize> = (0..shape.len()).filter(|i| !axes.contains(i)).collect();
    let st = strides(shape);
    let n_out: usize = out_shape.iter().product();
    let n_red: usize = red_shape.iter().product();
    let g = (0..n_out)
        .map(|o| {
            let oi = unravel(o, &out_shape);
            let base: usize = kept.iter().zip(&oi).map(|(&k, &i)| st[k] * i).sum();
            (0..n_red)
                .map(|r| {
                    let ri = unravel(r, &red_shape);
                    base + axes
                        .iter()
                        .zip(&ri)
                        .map(|(&a, &i)| st[a] * i)
                        .sum::<usize>()
                })
                .collect()
        })
        .collect();
    (out_shape, g)
}

/// CPU reference of a reduction (floats accumulate in f64; integers wrap like the device).
pub(crate) fn reduce_cpu(op: ReduceOp, x: &HostArray, axes: &[usize]) -> HostArray {
    let (out_shape, groups) = groups(&x.shape, axes);
    let dt = x.dtype();
    let vals = groups.iter().map(|g| match dt {
        DType::F32 | DType::F64 => {
            let it = g.iter().map(|&i| x.data.get_f64(i));
            // Folds from the identity: +0.0 for an empty sum (std's `sum` starts at -0.0), and
            // max/min propagate NaN like `jnp.max`.
            Scalar::F64(it.fold(op.identity(DType::F64).as_f64(), |a, b| {
                op.combine_f64(a, b)
            }))
            .cast(dt)
        }
        _ => {
            let id = op.identity(dt);
            g.iter().fold(id, |acc, &i| {
                let v = x.data.get(i);
                match (acc, v) {
                    (Scalar::I32(a), Scalar::I32(b)) => Scalar::I32(op.combine_i32(a, b)),
                    (Scalar::U32(a), Scalar::U32(b)) => Scalar::U32(op.combine_u32(a, b)),
                    _ => acc,
                }
            })
        }
    });
    HostArray {
        shape: out_shape,
        data: HostData::from_scalars(dt, vals),
    }
}

/// CPU reference of argmax/argmin along one axis (first index wins ties; the first NaN wins over
/// numbers). Result dtype i32.
pub(crate) fn argreduce_cpu(op: ArgOp, x: &HostArray, axis: usize) -> HostArray {
    let (out_shape, groups) = groups(&x.shape, &[axis]);
    let vals: Vec<i32> = groups
        .iter()
        .map(|g| op.pick(g.iter().map(|&i| x.data.get_f64(i))) as i32)
        .collect();
    HostArray {
        shape: out_shape,
        data: HostData::I32(vals),
    }
}

// ---- batching rule ------------------------------------------------------------------------------

/// Reductions batch by shifting their axes past the leading batch axis.
fn batch(r: &ReductionOp, ins: &[Batched]) -> Batched {
    let shifted = match r {
        ReductionOp::Reduce { op, axes } => ReductionOp::Reduce {
            op: *op,
            axes: axes.iter().map(|a| a + 1).collect(),
        },
        ReductionOp::ArgReduce { op, axis } => ReductionOp::ArgReduce {
            op: *op,
            axis: axis + 1,
        },
    };
    (Tensor::apply(Prim::Reduction(shifted), &[&ins[0].0]), true)
}

// ---- VJP rule -----------------------------------------------------------------------------------

/// Reductions: a sum spreads its cotangent back over the reduced axes; max and min give it to the
/// elements equal to the result, shared evenly among ties; prod multiplies by the other factors.
fn vjp(r: &ReductionOp, ins: &[Tensor], out: &Tensor, ct: &Tensor) -> Cotangents {
    let x = &ins[0];
    let (op, axes) = match r {
        ReductionOp::Reduce { op, axes } => (op, axes),
        // argmax / argmin: an integer result.
        ReductionOp::ArgReduce { .. } => return vec![None],
    };
    if !x.dtype().is_float() {
        return vec![None];
    }
    // Kept axes of x, in order: where the result's axes go back.
    let kept: Vec<usize> = (0..x.ndim()).filter(|a| !axes.contains(a)).collect();
    let back = |t: &Tensor| t.broadcast_in_dim(x.shape(), &kept);
    let g = match op {
        ReduceOp::Sum => back(ct),
        ReduceOp::Prod => {
            // The product of the other factors, without dividing by x (which may be 0): with no
            // zero in a group it is prod / x; with one zero, only the zero's slot gets the product
            // of the rest; with more, nothing.
            let zero = Tensor::zeros(x.shape(), x.dtype());
            let one = Tensor::ones(x.shape(), x.dtype());
            let is_zero = x.eq(&zero);
            let nonzero = is_zero.where_(&one, x);
            let reduce = |op: ReduceOp, t: &Tensor| {
                Tensor::apply(
                    Prim::Reduction(ReductionOp::Reduce {
                        op,
                        axes: axes.clone(),
                    }),
                    &[t],
                )
            };
            let prod_nz = back(&reduce(ReduceOp::Prod, &nonzero));
            let zeros = back(&reduce(ReduceOp::Sum, &is_zero.cast(x.dtype())));
            let only_zero = &zeros.eq(&one).where_(&one, &zero) * &is_zero.cast(x.dtype());
            let others = zeros
                .eq(&zero)
                .where_(&(&prod_nz / &nonzero), &(&only_zero * &prod_nz));
            &back(ct) * &others
        }
        ReduceOp::Max | ReduceOp::Min => {
            let hit = x.eq(&back(out)).cast(x.dtype());
            let count = Tensor::apply(
                Prim::Reduction(ReductionOp::Reduce {
                    op: ReduceOp::Sum,
                    axes: axes.clone(),
                }),
                &[&hit],
            );
            &back(&(ct / &count)) * &hit
        }
    };
    vec![Some(g)]
}

// ---- the family -----------------------------------------------------------------------------------

/// The reductions: over a set of axes, or (arg-reductions) over one.
#[derive(Clone, Debug, PartialEq)]
pub enum ReductionOp {
    Reduce { op: ReduceOp, axes: Vec<usize> },
    ArgReduce { op: ArgOp, axis: usize },
}

impl Rules for ReductionOp {
    fn name(&self) -> &'static str {
        match self {
            ReductionOp::Reduce { op, .. } => op.name(),
            ReductionOp::ArgReduce { op, .. } => op.name(),
        }
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReductionOp::Reduce { axes, .. } => write!(f, "[axes={axes:?}]"),
            ReductionOp::ArgReduce { axis, .. } => write!(f, "[axis={axis}]"),
        }
    }

    fn arity(&self) -> Option<usize> {
        Some(1)
    }

    fn result_count(&self) -> usize {
        1
    }

    fn infer(&self, ins: &[&Aval]) -> Result<Vec<Aval>> {
        let out = match self {
            ReductionOp::Reduce { op, axes } => {
                let axes = check_axes(op.name(), &ins[0].shape, axes)?;
                Aval::new(
                    reduced_shape(&ins[0].shape, &axes),
                    reduce_dtype(*op, ins[0].dtype)?,
                )
            }
            ReductionOp::ArgReduce { op, axis } => {
                let axes = check_axes(op.name(), &ins[0].shape, &[*axis])?;
                if ins[0].shape[*axis] == 0 {
                    return Err(Error::BadShapeArg {
                        op: op.name(),
                        shape: ins[0].shape.clone(),
                        detail: format!("axis {axis} is empty: no element to pick"),
                    });
                }
                if ins[0].dtype == DType::Bool {
                    return Err(Error::BadDType {
                        op: op.name(),
                        dtype: DType::Bool,
                        hint: "cast to i32 first",
                        shapes: vec![],
                    });
                }
                Aval::new(reduced_shape(&ins[0].shape, &axes), DType::I32)
            }
        };
        Ok(vec![out])
    }

    fn eval_cpu(&self, ins: &[&HostArray], _outs: &[Aval]) -> Result<Vec<HostArray>> {
        Ok(vec![match self {
            ReductionOp::Reduce { op, axes } => {
                let mut a = axes.clone();
                a.sort_unstable();
                reduce_cpu(*op, ins[0], &a)
            }
            ReductionOp::ArgReduce { op, axis } => argreduce_cpu(*op, ins[0], *axis),
        }])
    }

    fn lowering(&self) -> Lowering<'_> {
        match self {
            ReductionOp::Reduce { op, axes } => Lowering::Reduce { op: *op, axes },
            ReductionOp::ArgReduce { op, axis } => Lowering::ArgReduce {
                op: *op,
                axis: *axis,
            },
        }
    }

    fn emit_wgsl(&self, _em: &mut Emitter<'_>, _ins: &[Var], _idx: &[String]) -> Option<Emitted> {
        // Reductions have kernels of their own (`crate::wgsl::reduce_kernels`).
        None
    }

    fn batch(&self, ins: &[Batched], _ctx: &BatchCtx<'_>) -> Result<Vec<Batched>> {
        single_batch(batch(self, ins))
    }

    fn vjp(&self, ins: &[Tensor], outs: &[Tensor], cts: &[Option<Tensor>]) -> Result<Cotangents> {
        single_vjp(ins, cts, |ct| vjp(self, ins, &outs[0], ct))
    }

    fn has_effect(&self) -> bool {
        false
    }
}
