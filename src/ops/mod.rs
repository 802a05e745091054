//! The primitive registry: every primitive of the IR, its parameters, and dispatch to the rules that
//! each family module declares (shape/dtype rule, CPU reference, WGSL lowering).
//!
//! Families: [`elementwise`] (unary, binary, select, fma, cast, full, iota), [`reduce`], [`matmul`]
//! (dot_general), [`layout`] (transpose, reshape, broadcast_in_dim, slice, concatenate, pad),
//! [`indexing`] (take), [`window`] (reduce_window and the pooling gradients), [`random`]
//! (threefry random bits, split, fold_in), [`control`] (cond and
//! scan, which hold sub-programs and have several results) and [`collective`]
//! (psum, all_gather, ppermute, …, run between the stages of a parallel program). Adding a primitive
//! touches its family module and this registry only.
//!
//! Rules per primitive, and where they live:
//! - shape/dtype rule: [`Prim::infer`], delegating to the family module;
//! - CPU reference: `Prim::eval_cpu`, delegating to the family module (the oracle and the `cpu`
//!   device);
//! - WGSL lowering: index maps and expressions in the family module, assembled by `crate::wgsl`;
//! - batching (vmap) rule: `Prim::batch`, a `batch` function in each family module;
//! - VJP (reverse-mode) rule: `Prim::vjp`, a `vjp` function in each family module.

pub mod collective;
pub mod control;
pub mod debug;
pub mod elementwise;
pub mod indexing;
pub mod layout;
pub mod matmul;
pub mod random;
pub mod reduce;
pub mod window;

use std::fmt;

use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::host::{HostArray, HostData};
use crate::trace::graph::Aval;

pub use collective::{Collective, CollectiveKind};
pub use elementwise::{BinaryOp, UnaryOp};
pub use matmul::DotDims;
pub use reduce::{ArgOp, ReduceOp};
pub use window::{Window, WindowKind, WindowOp, WindowPrim};

/// A primitive with its static parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Prim {
    Unary(UnaryOp),
    Binary(BinaryOp),
    /// `select(pred, on_true, on_false)`, all of one shape; pred is bool.
    Select,
    /// `fma(a, b, c)`: `a * b + c` rounded once (f32, or the host-only f64; all of one shape and
    /// dtype).
    Fma,
    Cast(DType),
    /// A constant array filled with one value.
    Full {
        value: Scalar,
        shape: Vec<usize>,
    },
    /// `0, 1, 2, ...` along `axis`, broadcast over the other axes.
    Iota {
        dtype: DType,
        shape: Vec<usize>,
        axis: usize,
    },
    Reduce {
        op: ReduceOp,
        axes: Vec<usize>,
    },
    ArgReduce {
        op: ArgOp,
        axis: usize,
    },
    DotGeneral(DotDims),
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
    Take {
        axis: usize,
    },
    /// Communication between the shards of a parallel axis; only inside `pmap` / `shard_map`,
    /// where the program is cut into stages at each one.
    Collective(Collective),
    /// Threefry random bits of keys `u32[..., 2]`: `u32[..., shape...]` (the two hash words
    /// xor-ed), or with `split` both words, `u32[..., shape..., 2]` (new keys). See [`random`].
    RandomBits {
        shape: Vec<usize>,
        split: bool,
    },
    /// `fold_in(keys u32[..., 2], data u32[...])`: new keys `u32[..., 2]`. See [`random`].
    RandomFoldIn,
    /// `cond(index, operands...)`: the outputs of `branches[index](operands)` (a bool index picks
    /// branch 1 when true). Several results. See [`control`].
    Cond {
        branches: Vec<std::sync::Arc<crate::trace::graph::Graph>>,
    },
    /// A loop over the leading axis of its per-iteration operands, threading a carry. Several
    /// results. See [`control::ScanParams`].
    Scan(control::ScanParams),
    /// `debug_print(fmt, values...)`: a side effect; yields a token. See [`debug`].
    DebugPrint {
        fmt: String,
    },
    /// The window family: `reduce_window`, `select_and_scatter_add`, `select_and_gather` (pooling
    /// and its gradients). See [`window`].
    Window(WindowPrim),
}

impl Prim {
    pub fn name(&self) -> &'static str {
        match self {
            Prim::Unary(op) => op.name(),
            Prim::Binary(op) => op.name(),
            Prim::Select => "select",
            Prim::Fma => "fma",
            Prim::Cast(_) => "convert_element_type",
            Prim::Full { .. } => "full",
            Prim::Iota { .. } => "iota",
            Prim::Reduce { op, .. } => op.name(),
            Prim::ArgReduce { op, .. } => op.name(),
            Prim::DotGeneral(_) => "dot_general",
            Prim::Transpose { .. } => "transpose",
            Prim::Reshape { .. } => "reshape",
            Prim::BroadcastInDim { .. } => "broadcast_in_dim",
            Prim::Slice { .. } => "slice",
            Prim::Concatenate { .. } => "concatenate",
            Prim::Pad { .. } => "pad",
            Prim::Take { .. } => "take",
            Prim::Collective(c) => c.name(),
            Prim::RandomBits { split: false, .. } => "random_bits",
            Prim::RandomBits { split: true, .. } => "random_split",
            Prim::RandomFoldIn => "random_fold_in",
            Prim::Cond { .. } => "cond",
            Prim::Scan(_) => "scan",
            Prim::DebugPrint { .. } => "debug_print",
            Prim::Window(p) => p.name(),
        }
    }

    /// A side effect, or control flow holding one (kept although unused; prints are never
    /// compiled into a kernel).
    pub fn has_effect(&self) -> bool {
        match self {
            Prim::DebugPrint { .. } => true,
            Prim::Cond { branches } => branches.iter().any(|b| !b.effects.is_empty()),
            Prim::Scan(p) => !p.body.effects.is_empty(),
            _ => false,
        }
    }

    /// A control-flow primitive (holds sub-programs, may have several results).
    pub fn is_control_flow(&self) -> bool {
        matches!(self, Prim::Cond { .. } | Prim::Scan(_))
    }

    /// How many results the primitive has.
    pub fn result_count(&self) -> usize {
        match self {
            Prim::Cond { branches } => branches.first().map_or(0, |b| b.outputs.len()),
            Prim::Scan(p) => p.body.outputs.len(),
            _ => 1,
        }
    }

    /// Shape and dtype rule of every result (one for all but control flow).
    pub fn infer_outs(&self, ins: &[&Aval]) -> Result<Vec<Aval>> {
        let outs = match self {
            Prim::Cond { branches } => control::infer_cond(branches, ins)?,
            Prim::Scan(p) => control::infer_scan(p, ins)?,
            _ => return Ok(vec![self.infer(ins)?]),
        };
        // A loop's stacked outputs grow with its length: their sizes must be countable too.
        for a in &outs {
            crate::host::shape_bytes(self.name(), &a.shape, a.dtype)?;
        }
        Ok(outs)
    }

    /// Can this primitive be inlined into a fused kernel (computed per output element with no
    /// communication between elements)?
    pub fn is_fusable(&self) -> bool {
        !matches!(
            self,
            Prim::Reduce { .. }
                | Prim::ArgReduce { .. }
                | Prim::DotGeneral(_)
                | Prim::Collective(_)
                | Prim::Cond { .. }
                | Prim::Scan(_)
                | Prim::DebugPrint { .. }
                | Prim::Window(_)
        )
    }

    /// Expected operand count (None: variadic).
    pub fn arity(&self) -> Option<usize> {
        match self {
            Prim::Full { .. } | Prim::Iota { .. } => Some(0),
            Prim::Binary(_) | Prim::DotGeneral(_) | Prim::Take { .. } | Prim::RandomFoldIn => {
                Some(2)
            }
            Prim::Select | Prim::Fma => Some(3),
            Prim::Concatenate { .. }
            | Prim::Cond { .. }
            | Prim::Scan(_)
            | Prim::DebugPrint { .. } => None,
            Prim::Collective(c) => Some(c.arity()),
            Prim::Window(p) => Some(p.arity()),
            _ => Some(1),
        }
    }

    /// Shape and dtype rule.
    pub fn infer(&self, ins: &[&Aval]) -> Result<Aval> {
        let shapes = || ins.iter().map(|a| a.shape.clone()).collect::<Vec<_>>();
        let out = self.infer_unchecked(ins).map_err(|e| match e {
            // Name the operand shapes in dtype errors too.
            Error::DTypeMismatch {
                op,
                lhs,
                rhs,
                shapes: s,
            } if s.is_empty() => Error::DTypeMismatch {
                op,
                lhs,
                rhs,
                shapes: shapes(),
            },
            Error::BadDType {
                op,
                dtype,
                hint,
                shapes: s,
            } if s.is_empty() => Error::BadDType {
                op,
                dtype,
                hint,
                shapes: shapes(),
            },
            e => e,
        })?;
        // Sizes must be countable: a shape whose element count overflows can never exist.
        crate::host::shape_bytes(self.name(), &out.shape, out.dtype)?;
        Ok(out)
    }

    fn infer_unchecked(&self, ins: &[&Aval]) -> Result<Aval> {
        if let Some(n) = self.arity() {
            if ins.len() != n {
                return Err(Error::Arity {
                    what: self.name().to_string(),
                    expected: n,
                    got: ins.len(),
                });
            }
        }
        let same_shape = |op: &'static str, a: &Aval, b: &Aval| -> Result<()> {
            if a.shape != b.shape {
                return Err(Error::ShapeMismatchBinaryOp {
                    op,
                    lhs: a.shape.clone(),
                    rhs: b.shape.clone(),
                });
            }
            Ok(())
        };
        Ok(match self {
            Prim::Unary(op) => Aval::new(ins[0].shape.clone(), op.out_dtype(ins[0].dtype)?),
            Prim::Binary(op) => {
                same_shape(op.name(), ins[0], ins[1])?;
                Aval::new(
                    ins[0].shape.clone(),
                    op.out_dtype(ins[0].dtype, ins[1].dtype)?,
                )
            }
            Prim::Select => {
                if ins[0].dtype != DType::Bool {
                    return Err(Error::BadDType {
                        op: "select (predicate)",
                        dtype: ins[0].dtype,
                        hint: "the predicate must be bool: compare, or cast to bool",
                        shapes: vec![],
                    });
                }
                same_shape("select", ins[0], ins[1])?;
                same_shape("select", ins[1], ins[2])?;
                if ins[1].dtype != ins[2].dtype {
                    return Err(Error::DTypeMismatch {
                        op: "select",
                        lhs: ins[1].dtype,
                        rhs: ins[2].dtype,
                        shapes: vec![],
                    });
                }
                ins[1].clone()
            }
            Prim::Fma => elementwise::fma_infer(ins)?,
            Prim::Cast(t) => Aval::new(ins[0].shape.clone(), *t),
            Prim::Full { value, shape } => Aval::new(shape.clone(), value.dtype()),
            Prim::Iota { dtype, shape, axis } => {
                if *axis >= shape.len() {
                    return Err(Error::BadAxis {
                        op: "iota",
                        axis: *axis as i64,
                        rank: shape.len(),
                        shape: shape.clone(),
                    });
                }
                Aval::new(shape.clone(), *dtype)
            }
            Prim::Reduce { op, axes } => {
                let axes = reduce::check_axes(op.name(), &ins[0].shape, axes)?;
                Aval::new(
                    reduce::reduced_shape(&ins[0].shape, &axes),
                    reduce::reduce_dtype(*op, ins[0].dtype)?,
                )
            }
            Prim::ArgReduce { op, axis } => {
                let axes = reduce::check_axes(op.name(), &ins[0].shape, &[*axis])?;
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
                Aval::new(reduce::reduced_shape(&ins[0].shape, &axes), DType::I32)
            }
            Prim::DotGeneral(d) => Aval::new(
                matmul::dot_shape(&ins[0].shape, &ins[1].shape, d, ins[0].dtype, ins[1].dtype)?,
                ins[0].dtype,
            ),
            Prim::Transpose { perm } => {
                Aval::new(layout::transpose_shape(&ins[0].shape, perm)?, ins[0].dtype)
            }
            Prim::Reshape { shape } => {
                let (from_n, to_n) = (ins[0].size(), crate::host::shape_size("reshape", shape)?);
                if from_n != to_n {
                    return Err(Error::BadReshape {
                        from: ins[0].shape.clone(),
                        from_n,
                        to: shape.clone(),
                        to_n,
                    });
                }
                Aval::new(shape.clone(), ins[0].dtype)
            }
            Prim::BroadcastInDim { shape, dims } => {
                layout::broadcast_check(&ins[0].shape, shape, dims)?;
                Aval::new(shape.clone(), ins[0].dtype)
            }
            Prim::Slice {
                start,
                limit,
                stride,
            } => Aval::new(
                layout::slice_shape(&ins[0].shape, start, limit, stride)?,
                ins[0].dtype,
            ),
            Prim::Concatenate { axis } => {
                let shapes: Vec<&[usize]> = ins.iter().map(|a| a.shape.as_slice()).collect();
                let out = layout::concat_shape(&shapes, *axis)?;
                if let Some(b) = ins.iter().find(|a| a.dtype != ins[0].dtype) {
                    return Err(Error::DTypeMismatch {
                        op: "concatenate",
                        lhs: ins[0].dtype,
                        rhs: b.dtype,
                        shapes: vec![],
                    });
                }
                Aval::new(out, ins[0].dtype)
            }
            Prim::Pad {
                lo,
                hi,
                interior,
                value,
            } => {
                if value.dtype() != ins[0].dtype {
                    return Err(Error::DTypeMismatch {
                        op: "pad (value)",
                        lhs: ins[0].dtype,
                        rhs: value.dtype(),
                        shapes: vec![],
                    });
                }
                Aval::new(
                    layout::pad_shape(&ins[0].shape, lo, hi, interior)?,
                    ins[0].dtype,
                )
            }
            Prim::Take { axis } => Aval::new(
                indexing::take_shape(&ins[0].shape, &ins[1].shape, ins[1].dtype, *axis)?,
                ins[0].dtype,
            ),
            Prim::Collective(c) => c.infer(ins)?,
            Prim::RandomBits { shape, split } => random::bits_infer(ins[0], shape, *split)?,
            Prim::RandomFoldIn => random::fold_in_infer(ins[0], ins[1])?,
            Prim::DebugPrint { .. } => debug::infer()?,
            Prim::Window(p) => p.infer(ins)?,
            Prim::Cond { .. } | Prim::Scan(_) => {
                let mut outs = self.infer_outs(ins)?;
                if outs.len() != 1 {
                    return Err(Error::Unsupported {
                        op: self.name(),
                        detail: format!("{} results where one was expected (internal)", outs.len()),
                    });
                }
                outs.remove(0)
            }
        })
    }

    /// CPU reference evaluation. Inputs have already passed [`Prim::infer`]; `out` is its result.
    pub(crate) fn eval_cpu(&self, ins: &[&HostArray], out: &Aval) -> HostArray {
        let map = |f: &dyn Fn(usize) -> Scalar| HostArray {
            shape: out.shape.clone(),
            data: HostData::from_scalars(out.dtype, (0..out.size()).map(f)),
        };
        match self {
            Prim::Unary(op) => map(&|i| op.eval(ins[0].data.get(i))),
            Prim::Binary(op) => map(&|i| op.eval(ins[0].data.get(i), ins[1].data.get(i))),
            Prim::Select => map(&|i| {
                if ins[0].data.get(i) == Scalar::Bool(true) {
                    ins[1].data.get(i)
                } else {
                    ins[2].data.get(i)
                }
            }),
            Prim::Fma => map(&|i| {
                elementwise::fma_eval(ins[0].data.get(i), ins[1].data.get(i), ins[2].data.get(i))
            }),
            Prim::Cast(t) => map(&|i| ins[0].data.get(i).cast(*t)),
            Prim::Full { value, shape } => HostArray::full_checked(*value, shape),
            Prim::Iota { dtype, shape, axis } => {
                let st = crate::host::strides(shape);
                map(&|i| Scalar::U32(((i / st[*axis]) % shape[*axis].max(1)) as u32).cast(*dtype))
            }
            Prim::Reduce { op, axes } => {
                let mut a = axes.clone();
                a.sort_unstable();
                reduce::reduce_cpu(*op, ins[0], &a)
            }
            Prim::ArgReduce { op, axis } => reduce::argreduce_cpu(*op, ins[0], *axis),
            Prim::DotGeneral(d) => matmul::dot_cpu(ins[0], ins[1], d, &out.shape),
            Prim::Transpose { perm } => layout::transpose_cpu(ins[0], perm, &out.shape),
            Prim::Reshape { shape } => HostArray {
                shape: shape.clone(),
                data: ins[0].data.clone(),
            },
            Prim::BroadcastInDim { shape, dims } => layout::broadcast_cpu(ins[0], shape, dims),
            Prim::Slice { start, stride, .. } => {
                layout::slice_cpu(ins[0], start, stride, &out.shape)
            }
            Prim::Concatenate { axis } => layout::concat_cpu(ins, *axis, &out.shape),
            Prim::Pad {
                lo,
                interior,
                value,
                ..
            } => layout::pad_cpu(ins[0], lo, interior, *value, &out.shape),
            Prim::Take { axis } => indexing::take_cpu(ins[0], ins[1], *axis, &out.shape),
            // A single shard's view; graphs with collectives over several shards are run stage
            // by stage by the parallel executor, and `eval_graph` refuses them.
            Prim::Collective(c) => {
                let parts: Vec<HostArray> = ins.iter().map(|h| (*h).clone()).collect();
                c.combine(parts, out).get(0).clone()
            }
            Prim::RandomBits { shape, split } => random::bits_cpu(ins[0], shape, *split, out),
            Prim::RandomFoldIn => random::fold_in_cpu(ins[0], ins[1], out),
            Prim::DebugPrint { .. } => debug::eval_cpu(),
            Prim::Window(p) => p.eval_cpu(ins, out),
            Prim::Cond { .. } | Prim::Scan(_) => {
                // Single-result uses only; `eval_cpu_multi` is the general entry.
                match self.eval_cpu_multi(ins, std::slice::from_ref(out)) {
                    Ok(mut v) if !v.is_empty() => v.remove(0),
                    _ => HostArray::full_checked(Scalar::F32(f32::NAN).cast(out.dtype), &out.shape),
                }
            }
        }
    }

    /// CPU reference evaluation of every result.
    pub(crate) fn eval_cpu_multi(
        &self,
        ins: &[&HostArray],
        outs: &[Aval],
    ) -> Result<Vec<HostArray>> {
        match self {
            Prim::Cond { branches } => control::eval_cond(branches, ins),
            Prim::Scan(p) => control::eval_scan(p, ins),
            _ => Ok(vec![self.eval_cpu(ins, &outs[0])]),
        }
    }
}

impl fmt::Display for Prim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.name();
        match self {
            Prim::Cast(t) => write!(f, "{n}[new_dtype={t}]"),
            Prim::Full { value, shape } => write!(f, "{n}[value={value} shape={shape:?}]"),
            Prim::Iota { dtype, shape, axis } => {
                write!(f, "{n}[dtype={dtype} shape={shape:?} dimension={axis}]")
            }
            Prim::Reduce { axes, .. } => write!(f, "{n}[axes={axes:?}]"),
            Prim::ArgReduce { axis, .. } => write!(f, "{n}[axis={axis}]"),
            Prim::DotGeneral(d) => write!(
                f,
                "{n}[contract=({:?}, {:?}) batch=({:?}, {:?})]",
                d.lhs_contract, d.rhs_contract, d.lhs_batch, d.rhs_batch
            ),
            Prim::Transpose { perm } => write!(f, "{n}[permutation={perm:?}]"),
            Prim::Reshape { shape } => write!(f, "{n}[new_sizes={shape:?}]"),
            Prim::BroadcastInDim { shape, dims } => {
                write!(f, "{n}[shape={shape:?} broadcast_dimensions={dims:?}]")
            }
            Prim::Slice {
                start,
                limit,
                stride,
            } => write!(f, "{n}[start={start:?} limit={limit:?} strides={stride:?}]"),
            Prim::Concatenate { axis } => write!(f, "{n}[dimension={axis}]"),
            Prim::Pad {
                lo,
                hi,
                interior,
                value,
            } => write!(
                f,
                "{n}[lo={lo:?} hi={hi:?} interior={interior:?} value={value}]"
            ),
            Prim::Take { axis } => write!(f, "{n}[axis={axis}]"),
            Prim::Collective(c) => write!(f, "{c}"),
            Prim::Cond { branches } => write!(f, "{n}[branches={}]", branches.len()),
            Prim::DebugPrint { fmt } => write!(f, "{n}[fmt={fmt:?}]"),
            Prim::Window(p) => write!(f, "{p}"),
            Prim::Scan(p) => write!(
                f,
                "{n}[length={} reverse={} consts={} carry={} body={} eqns]",
                p.length,
                p.reverse,
                p.n_consts,
                p.n_carry,
                p.body.eqns.len()
            ),
            Prim::RandomBits { shape, .. } => write!(f, "{n}[shape={shape:?}]"),
            _ => f.write_str(n),
        }
    }
}

// ---- batching (vmap) ------------------------------------------------------------------------------

/// What a batching rule needs to know about the `vmap` it serves.
pub(crate) struct BatchCtx<'a> {
    /// The batch size.
    pub size: usize,
    /// The vmap's axis name: collectives over it reduce along the batch axis.
    pub axis_name: Option<&'a str>,
}

/// An operand inside a batching rule: a tensor, and whether it carries the batch axis in front.
pub(crate) type Batched = (crate::tensor::Tensor, bool);

impl Prim {
    /// Batching rule: the primitive applied to operands of which some carry a leading batch axis.
    /// Returns the result and whether it is batched (its batch axis in front).
    pub(crate) fn batch(&self, ins: &[Batched], ctx: &BatchCtx<'_>) -> Batched {
        use crate::tensor::Tensor;
        if !ins.iter().any(|(_, b)| *b) && !self.is_control_flow() {
            if let Prim::Collective(c) = self {
                if Some(c.axis_name.as_str()) == ctx.axis_name {
                    // A collective over the vmapped axis of a value that does not vary along it.
                    return collective::batch(c, ins, ctx);
                }
            }
            let refs: Vec<&Tensor> = ins.iter().map(|(t, _)| t).collect();
            return (Tensor::apply(self.clone(), &refs), false);
        }
        match self {
            Prim::Unary(_)
            | Prim::Binary(_)
            | Prim::Select
            | Prim::Fma
            | Prim::Cast(_)
            | Prim::Full { .. }
            | Prim::Iota { .. } => elementwise::batch(self, ins, ctx),
            Prim::Reduce { .. } | Prim::ArgReduce { .. } => reduce::batch(self, ins),
            Prim::DotGeneral(d) => matmul::batch(d, ins, ctx),
            Prim::Transpose { .. }
            | Prim::Reshape { .. }
            | Prim::BroadcastInDim { .. }
            | Prim::Slice { .. }
            | Prim::Concatenate { .. }
            | Prim::Pad { .. } => layout::batch(self, ins, ctx),
            Prim::Take { axis } => indexing::batch(*axis, ins, ctx),
            Prim::Collective(c) => collective::batch(c, ins, ctx),
            Prim::RandomBits { .. } | Prim::RandomFoldIn => random::batch(self, ins, ctx),
            Prim::DebugPrint { .. } => debug::batch(self, ins, ctx),
            Prim::Window(p) => p.batch(ins, ctx),
            Prim::Cond { .. } | Prim::Scan(_) => match self.batch_multi(ins, ctx) {
                Ok(mut v) if !v.is_empty() => v.remove(0),
                Ok(_) => (
                    crate::tensor::Tensor::failed_here(Error::Unsupported {
                        op: self.name(),
                        detail: "no result (internal)".into(),
                    }),
                    false,
                ),
                Err(e) => (crate::tensor::Tensor::failed_here(e), false),
            },
        }
    }

    /// Batching rule of every result (the general entry; control flow has several).
    pub(crate) fn batch_multi(&self, ins: &[Batched], ctx: &BatchCtx<'_>) -> Result<Vec<Batched>> {
        // Nothing batched and no collective that could name this vmap's axis: unchanged.
        if self.is_control_flow() && ctx.axis_name.is_none() && !ins.iter().any(|(_, b)| *b) {
            let refs: Vec<&crate::tensor::Tensor> = ins.iter().map(|(t, _)| t).collect();
            let outs = crate::tensor::Tensor::apply_multi(self.clone(), &refs);
            if let Some(e) = outs.iter().find_map(|t| t.error()) {
                return Err(e.clone());
            }
            return Ok(outs.into_iter().map(|t| (t, false)).collect());
        }
        let out = match self {
            Prim::Cond { branches } => return control::batch_cond(branches, ins, ctx),
            Prim::Scan(p) => return control::batch_scan(p, ins, ctx),
            _ => self.batch(ins, ctx),
        };
        if let Some(e) = out.0.error() {
            return Err(e.clone());
        }
        Ok(vec![out])
    }
}

/// Apply `prim` after giving every operand the batch axis (broadcasting unbatched ones): the rule
/// of every primitive that does not care where the batch axis is, or whose parameters were already
/// shifted past it.
pub(crate) fn apply_batched(prim: Prim, ins: &[Batched], size: usize) -> Batched {
    let full: Vec<crate::tensor::Tensor> = ins.iter().map(|b| with_batch(b, size)).collect();
    let refs: Vec<&crate::tensor::Tensor> = full.iter().collect();
    (crate::tensor::Tensor::apply(prim, &refs), true)
}

/// `t` with a leading batch axis of `size` (broadcast when it has none).
pub(crate) fn with_batch((t, batched): &Batched, size: usize) -> crate::tensor::Tensor {
    if *batched {
        return t.clone();
    }
    let mut shape = vec![size];
    shape.extend_from_slice(t.shape());
    let dims: Vec<usize> = (1..=t.ndim()).collect();
    t.broadcast_in_dim(&shape, &dims)
}

/// Move axis `from` of `t` to position `to`.
pub(crate) fn move_axis(
    t: &crate::tensor::Tensor,
    from: usize,
    to: usize,
) -> crate::tensor::Tensor {
    if from == to {
        return t.clone();
    }
    let mut perm: Vec<usize> = (0..t.ndim()).filter(|&a| a != from).collect();
    perm.insert(to, from);
    t.transpose(&perm)
}

// ---- reverse mode (VJP) ---------------------------------------------------------------------------

/// A cotangent per operand: `None` where the operand is not differentiable (integers, booleans,
/// indices).
pub(crate) type Cotangents = Vec<Option<crate::tensor::Tensor>>;

impl Prim {
    /// VJP rule: given the operands, the result and the result's cotangent `ct`, the cotangent of
    /// each operand. Written with primitives that have VJP rules themselves, so that `grad` of
    /// `grad` works.
    pub(crate) fn vjp(
        &self,
        ins: &[crate::tensor::Tensor],
        out: &crate::tensor::Tensor,
        ct: &crate::tensor::Tensor,
    ) -> Cotangents {
        match self {
            Prim::Unary(_)
            | Prim::Binary(_)
            | Prim::Select
            | Prim::Fma
            | Prim::Cast(_)
            | Prim::Full { .. }
            | Prim::Iota { .. } => elementwise::vjp(self, ins, out, ct),
            Prim::Reduce { .. } | Prim::ArgReduce { .. } => reduce::vjp(self, ins, out, ct),
            Prim::DotGeneral(d) => matmul::vjp(d, ins, ct),
            Prim::Transpose { .. }
            | Prim::Reshape { .. }
            | Prim::BroadcastInDim { .. }
            | Prim::Slice { .. }
            | Prim::Concatenate { .. }
            | Prim::Pad { .. } => layout::vjp(self, ins, ct),
            Prim::Take { axis } => indexing::vjp(*axis, ins, ct),
            Prim::Collective(c) => collective::vjp(c, ins, out, ct),
            Prim::RandomBits { .. } | Prim::RandomFoldIn => random::vjp(ins),
            Prim::DebugPrint { .. } => debug::vjp(ins),
            Prim::Window(p) => p.vjp(ins, ct),
            Prim::Cond { .. } | Prim::Scan(_) => {
                match self.vjp_multi(ins, std::slice::from_ref(out), &[Some(ct.clone())]) {
                    Ok(v) => v,
                    Err(e) => vec![Some(crate::tensor::Tensor::failed_here(e)); ins.len()],
                }
            }
        }
    }

    /// VJP rule with every result and its cotangent (`None`: none flows); the general entry.
    pub(crate) fn vjp_multi(
        &self,
        ins: &[crate::tensor::Tensor],
        outs: &[crate::tensor::Tensor],
        cts: &[Option<crate::tensor::Tensor>],
    ) -> Result<Cotangents> {
        match self {
            Prim::Cond { branches } => control::vjp_cond(branches, ins, outs, cts),
            Prim::Scan(p) => control::vjp_scan(p, ins, outs, cts),
            _ => Ok(match &cts[0] {
                Some(c) => self.vjp(ins, &outs[0], c),
                None => vec![None; ins.len()],
            }),
        }
    }
}

/// Zeros shaped like `t`.
pub(crate) fn zeros_like(t: &crate::tensor::Tensor) -> crate::tensor::Tensor {
    crate::tensor::Tensor::zeros(t.shape(), t.dtype())
}
