//! The primitive registry: every primitive of the IR and the one dispatch point to the rules its
//! family declares.
//!
//! Families: [`elementwise`] (unary, binary, select, fma, cast, full, iota), [`reduce`], [`matmul`]
//! (dot_general), [`conv`] (conv_general_dilated), [`layout`] (transpose, reshape, broadcast_in_dim, slice, concatenate, pad),
//! [`indexing`] (take), [`sort`] (argsort: the stable sorting permutation by one or several keys), [`window`] (reduce_window and the pooling gradients), [`random`] (threefry random bits, split, fold_in), [`control`] (cond and
//! scan, which hold sub-programs and have several results), [`collective`] (psum, all_gather,
//! ppermute, …, run between the stages of a parallel program), [`debug`] (debug_print) and
//! [`ad_util`] (stop_gradient).
//!
//! Each family is an enum of its primitives, and implements `rules::Rules`: name and parameters,
//! arity and result count, the shape/dtype rule, the CPU reference, how it lowers (fused body,
//! reduction, matmul, loop, stage boundary, host only) and its WGSL, the batching (vmap) rule, the
//! VJP rule and effects. `Prim::rules` is the one `match` mapping a primitive to its family;
//! the shape checker, the reference interpreter, vmap, grad, the kernel planner and the WGSL
//! generator all go through it. Adding a primitive touches its family module (and, for a new
//! family, one arm of `Prim::rules`).

pub mod ad_util;
pub mod collective;
pub mod control;
pub mod conv;
pub mod debug;
pub mod elementwise;
pub mod indexing;
pub mod layout;
pub mod matmul;
pub mod random;
pub mod reduce;
pub(crate) mod rules;
pub(crate) mod sizes;
pub mod sort;
pub mod window;

use std::fmt;

use crate::error::{Error, Result};
use crate::host::HostArray;
use crate::trace::graph::Aval;

pub use ad_util::AdUtilOp;
pub use collective::{Collective, CollectiveKind};
pub use control::{ControlOp, ScanParams, WhileParams};
pub use conv::{ConvDims, ConvOptions, ConvParams, Padding};
pub use debug::DebugOp;
pub use elementwise::{BinaryOp, ElementwiseOp, UnaryOp};
pub use indexing::IndexOp;
pub use layout::LayoutOp;
pub use matmul::DotDims;
pub use random::RandomOp;
pub use reduce::{ArgOp, ReduceOp, ReductionOp};
pub(crate) use rules::{Lowering, Rules};
pub use sort::{FloatOrder, SortOp};
pub use window::{Window, WindowKind, WindowOp, WindowPrim};

/// A primitive with its static parameters: one variant per family, each holding the family's own
/// enum (see `rules.rs` for what every family declares).
#[derive(Clone, Debug, PartialEq)]
pub enum Prim {
    /// Unary and binary maps, select, fma, cast, and the constant leaves `full` / `iota`.
    Elementwise(ElementwiseOp),
    /// Reductions over axes and arg-reductions over one axis.
    Reduction(ReductionOp),
    /// `dot_general`: contraction and batch dimensions of both operands.
    DotGeneral(DotDims),
    /// `conv_general_dilated(lhs, rhs)`: N-d convolution. See [`conv`].
    Conv(ConvParams),
    /// transpose, reshape, broadcast_in_dim, slice, concatenate, pad.
    Layout(LayoutOp),
    /// `take` along an axis.
    Indexing(IndexOp),
    /// The window family: `reduce_window`, `select_and_scatter_add`, `select_and_gather` (pooling
    /// and its gradients). See [`window`].
    Window(WindowPrim),
    /// Threefry random bits, split and fold_in. See [`random`].
    Random(RandomOp),
    /// The stable sorting permutation along one axis (`argsort`). See [`sort`].
    Sort(SortOp),
    /// `cond` and `scan`, which hold sub-programs and have several results. See [`control`].
    Control(ControlOp),
    /// Communication between the shards of a parallel axis; only inside `pmap` / `shard_map`,
    /// where the program is cut into stages at each one.
    Collective(Collective),
    /// `debug_print`, a side effect. See [`debug`].
    Debug(DebugOp),
    /// `stop_gradient`: the identity, with no cotangent flowing back. See [`ad_util`].
    AdUtil(AdUtilOp),
}

impl Prim {
    /// The family's rules: the one place a primitive is mapped to them.
    pub(crate) fn rules(&self) -> &dyn Rules {
        match self {
            Prim::Elementwise(p) => p,
            Prim::Reduction(p) => p,
            Prim::DotGeneral(p) => p,
            Prim::Conv(p) => p,
            Prim::Layout(p) => p,
            Prim::Indexing(p) => p,
            Prim::Window(p) => p,
            Prim::Random(p) => p,
            Prim::Sort(p) => p,
            Prim::Control(p) => p,
            Prim::Collective(p) => p,
            Prim::Debug(p) => p,
            Prim::AdUtil(p) => p,
        }
    }

    pub fn name(&self) -> &'static str {
        self.rules().name()
    }

    /// A side effect, or control flow holding one (kept although unused; prints are never
    /// compiled into a kernel).
    pub fn has_effect(&self) -> bool {
        self.rules().has_effect()
    }

    /// A control-flow primitive (holds sub-programs, may have several results).
    pub fn is_control_flow(&self) -> bool {
        matches!(self.rules().lowering(), Lowering::Loop | Lowering::Inline)
    }

    /// How many results the primitive has.
    pub fn result_count(&self) -> usize {
        self.rules().result_count()
    }

    /// How the primitive lowers to kernels.
    pub(crate) fn lowering(&self) -> Lowering<'_> {
        self.rules().lowering()
    }

    /// Can this primitive be inlined into a fused kernel (computed per output element with no
    /// communication between elements)?
    pub fn is_fusable(&self) -> bool {
        self.lowering().is_fusable()
    }

    /// Expected operand count (None: variadic).
    pub fn arity(&self) -> Option<usize> {
        self.rules().arity()
    }

    /// Shape and dtype rule of every result.
    pub fn infer_outs(&self, ins: &[&Aval]) -> Result<Vec<Aval>> {
        if let Some(n) = self.arity() {
            if ins.len() != n {
                return Err(Error::Arity {
                    what: self.name().to_string(),
                    expected: n,
                    got: ins.len(),
                });
            }
        }
        let shapes = || ins.iter().map(|a| a.shape.clone()).collect::<Vec<_>>();
        let outs = self.rules().infer(ins).map_err(|e| match e {
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
        // Sizes must be countable: a shape whose element count overflows can never exist (a
        // loop's stacked outputs grow with its length).
        for a in &outs {
            crate::host::shape_bytes(self.name(), &a.shape, a.dtype)?;
        }
        Ok(outs)
    }

    /// Shape and dtype rule of a one-result primitive.
    pub fn infer(&self, ins: &[&Aval]) -> Result<Aval> {
        let mut outs = self.infer_outs(ins)?;
        if outs.len() != 1 {
            return Err(Error::Unsupported {
                op: self.name(),
                detail: format!("{} results where one was expected (internal)", outs.len()),
            });
        }
        Ok(outs.remove(0))
    }

    /// CPU reference evaluation of a one-result primitive. Inputs have already passed
    /// [`Prim::infer`]; `out` is its result.
    pub(crate) fn eval_cpu(&self, ins: &[&HostArray], out: &Aval) -> Result<HostArray> {
        let mut outs = self.eval_cpu_multi(ins, std::slice::from_ref(out))?;
        if outs.len() != 1 {
            return Err(Error::Unsupported {
                op: self.name(),
                detail: format!("{} results where one was expected (internal)", outs.len()),
            });
        }
        Ok(outs.remove(0))
    }

    /// CPU reference evaluation of every result.
    pub(crate) fn eval_cpu_multi(
        &self,
        ins: &[&HostArray],
        outs: &[Aval],
    ) -> Result<Vec<HostArray>> {
        self.rules().eval_cpu(ins, outs)
    }
}

impl fmt::Display for Prim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        self.rules().fmt_params(f)
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
    /// Batching rule of every result: the primitive applied to operands of which some carry a
    /// leading batch axis; each result and whether it is batched (its batch axis in front).
    pub(crate) fn batch_multi(&self, ins: &[Batched], ctx: &BatchCtx<'_>) -> Result<Vec<Batched>> {
        use crate::tensor::Tensor;
        if !ins.iter().any(|(_, b)| *b) {
            match self {
                // A collective over the vmapped axis of a value that does not vary along it.
                Prim::Collective(c) if Some(c.axis_name.as_str()) == ctx.axis_name => {}
                // Control flow may hold a collective over this vmap's axis.
                _ if self.is_control_flow() && ctx.axis_name.is_some() => {}
                // Nothing batched: unchanged.
                _ => {
                    let refs: Vec<&Tensor> = ins.iter().map(|(t, _)| t).collect();
                    let outs = Tensor::apply_multi(self.clone(), &refs);
                    if let Some(e) = outs.iter().find_map(|t| t.error()) {
                        return Err(e.clone());
                    }
                    return Ok(outs.into_iter().map(|t| (t, false)).collect());
                }
            }
        }
        self.rules().batch(ins, ctx)
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
    /// VJP rule with every result and its cotangent (`None`: none flows).
    pub(crate) fn vjp_multi(
        &self,
        ins: &[crate::tensor::Tensor],
        outs: &[crate::tensor::Tensor],
        cts: &[Option<crate::tensor::Tensor>],
    ) -> Result<Cotangents> {
        self.rules().vjp(ins, outs, cts)
    }
}

/// Zeros shaped like `t`.
pub(crate) fn zeros_like(t: &crate::tensor::Tensor) -> crate::tensor::Tensor {
    crate::tensor::Tensor::zeros(t.shape(), t.dtype())
}
