//! The rules every primitive family declares, behind one trait: [`Rules`].
//!
//! [`super::Prim`] is an enum of family enums; [`super::Prim::rules`] is the one `match` that maps a
//! primitive to its family, and everything else (the shape checker, the CPU reference, vmap, grad,
//! the kernel planner and the WGSL generator) asks the family through this trait. The trait has no
//! default methods, so a new family must state every rule, and each family's methods match its
//! own enum exhaustively, so a new primitive in a family is refused by the compiler until each rule
//! names it.

use std::fmt;

use crate::device::DeviceLimits;
use crate::error::Result;
use crate::host::HostArray;
use crate::ops::{ArgOp, BatchCtx, Batched, Cotangents, DotDims, ReduceOp};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Eqn, Graph, Var};
use crate::wgsl::{Emitter, KernelSrc};

/// How a primitive is lowered to kernels (what the planner, the fusion check and the stage cutter
/// ask instead of matching primitives).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lowering<'a> {
    /// Computed per element inside a fused kernel from its operands at the same index; counts
    /// toward the budget of ops that a consumer may recompute instead of reading a stored value.
    Elementwise,
    /// A constant computed from the element's index alone (`full`, `iota`): every consumer
    /// recomputes it.
    Constant,
    /// Index arithmetic inside a fused kernel: reads its operands at remapped indices (layout ops,
    /// `take`). `cheap`: recomputed by each consumer when its operand is stored or cheap itself;
    /// `alias`: the result is the operand's buffer reinterpreted, when that buffer is stored.
    Remap { cheap: bool, alias: bool },
    /// Fused, but reads both words of its key operand (operand 0) for every element: a computed
    /// key is stored rather than recomputed (random bits, fold_in).
    Keyed,
    /// A reduction kernel (its elementwise prologue fused into the load).
    Reduce { op: ReduceOp, axes: &'a [usize] },
    /// An arg-reduction kernel.
    ArgReduce { op: ArgOp, axis: usize },
    /// A tiled matmul kernel, after canonicalization to `[batch, m, k] x [batch, k, n]`.
    Matmul(&'a DotDims),
    /// A kernel of the primitive's own, reading its operands from stored buffers.
    Kernel(&'a dyn OwnKernel),
    /// Several dispatches of the primitive's own through temporary buffers (a sort's merge
    /// passes), reading its operands from stored buffers.
    Passes(&'a dyn OwnPasses),
    /// A loop (`scan`): its body is lowered on its own and run as a loop of kernels.
    Loop,
    /// Control flow inlined before lowering (`cond`, as a select of its branches).
    Inline,
    /// Communication between shards: the parallel executor cuts the program into stages here.
    StageBoundary,
    /// Never compiled: taken out of the program before lowering (`debug_print`).
    HostOnly,
}

impl Lowering<'_> {
    /// Computed inside a fused elementwise kernel (no communication between elements).
    pub(crate) fn is_fusable(self) -> bool {
        match self {
            Lowering::Elementwise
            | Lowering::Constant
            | Lowering::Remap { .. }
            | Lowering::Keyed => true,
            Lowering::Reduce { .. }
            | Lowering::ArgReduce { .. }
            | Lowering::Matmul(_)
            | Lowering::Kernel(_)
            | Lowering::Passes(_)
            | Lowering::Loop
            | Lowering::Inline
            | Lowering::StageBoundary
            | Lowering::HostOnly => false,
        }
    }
}

/// What a kernel generator sees of the program being planned.
pub(crate) struct PlanCx<'a> {
    pub g: &'a Graph,
    /// The equation producing each variable, if any.
    pub producers: &'a [Option<usize>],
    /// Which variables are stored in buffers (the others are inlined by the `Emitter`).
    pub materialized: &'a [bool],
    /// The device's `max_compute_workgroups_per_dimension`.
    pub max_wg: u32,
    /// The limits the program is planned against (binding counts and sizes of temporaries).
    pub limits: &'a DeviceLimits,
}

/// A primitive with a kernel generator of its own (convolution, pooling).
pub(crate) trait OwnKernel {
    /// Whether the kernel reads every operand from a stored buffer; `false`: it reads them
    /// through the `Emitter`, fusing their elementwise producers into its loads.
    fn stores_operands(&self) -> bool;
    /// The kernel computing equation `e` (its result bound last).
    fn kernel(&self, cx: &PlanCx<'_>, e: &Eqn) -> Result<KernelSrc>;
}

impl fmt::Debug for dyn OwnKernel + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnKernel")
    }
}

/// A primitive computed by several dispatches of its own, in order, through temporaries: one
/// pass's result feeds the next (merge sort), which one kernel cannot do without a grid-wide
/// barrier.
pub(crate) trait OwnPasses {
    /// The dispatches computing equation `e` (every operand stored).
    fn passes(&self, cx: &PlanCx<'_>, e: &Eqn) -> Result<PassPlan>;
}

impl fmt::Debug for dyn OwnPasses + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnPasses")
    }
}

/// The dispatches of an [`OwnPasses`] primitive and the temporaries they share.
pub(crate) struct PassPlan {
    /// Byte size of each temporary buffer (alive for the whole plan).
    pub temp_bytes: Vec<u64>,
    pub passes: Vec<Pass>,
}

/// One dispatch of a [`PassPlan`]. It binds `src.inputs` (stored variables), then the
/// temporaries listed in `temps`, then the equation's result if `writes_out`.
pub(crate) struct Pass {
    pub src: KernelSrc,
    pub temps: Vec<usize>,
    pub writes_out: bool,
}

/// A fused primitive's WGSL at one output index.
pub(crate) enum Emitted {
    /// An expression to bind to a fresh temporary.
    Expr(String),
    /// A name (or constant) that is already the value: used as is.
    Value(String),
}

/// The rules of one primitive family. Every method is required.
pub(crate) trait Rules {
    /// The JAX name (`add`, `reduce_sum`, `dot_general`, …).
    fn name(&self) -> &'static str;
    /// The parameters as JAX prints them (`[axes=(0,)]`), or nothing.
    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
    /// Operand count (`None`: variadic).
    fn arity(&self) -> Option<usize>;
    /// How many results.
    fn result_count(&self) -> usize;
    /// Shape and dtype of every result, or a typed error naming the operands.
    fn infer(&self, ins: &[&Aval]) -> Result<Vec<Aval>>;
    /// The CPU reference (the oracle): every result, given operands that passed `infer`.
    fn eval_cpu(&self, ins: &[&HostArray], outs: &[Aval]) -> Result<Vec<HostArray>>;
    /// How the primitive lowers to kernels.
    fn lowering(&self) -> Lowering<'_>;
    /// WGSL of a fused primitive at multi-index `idx` of its result (operands `ins` read through
    /// `em`); `None` for primitives that are never fused (the planner stores their results).
    fn emit_wgsl(&self, em: &mut Emitter<'_>, ins: &[Var], idx: &[String]) -> Option<Emitted>;
    /// Batching (vmap) rule for operands of which some carry a leading batch axis: every result
    /// and whether it is batched.
    fn batch(&self, ins: &[Batched], ctx: &BatchCtx<'_>) -> Result<Vec<Batched>>;
    /// VJP rule: given operands, results and each result's cotangent (`None`: none flows), the
    /// cotangent of each operand. Written with primitives that have VJP rules themselves, so that
    /// `grad` of `grad` works.
    fn vjp(&self, ins: &[Tensor], outs: &[Tensor], cts: &[Option<Tensor>]) -> Result<Cotangents>;
    /// A side effect (or control flow holding one): kept although its result is unused.
    fn has_effect(&self) -> bool;
}

/// The VJP of a one-result primitive: no cotangent flows when the result has none.
pub(crate) fn single_vjp(
    ins: &[Tensor],
    cts: &[Option<Tensor>],
    rule: impl FnOnce(&Tensor) -> Cotangents,
) -> Result<Cotangents> {
    Ok(match cts.first() {
        Some(Some(ct)) => rule(ct),
        _ => vec![None; ins.len()],
    })
}

/// A one-result batching rule's answer, with the error a failed trace carries surfaced.
pub(crate) fn single_batch(out: Batched) -> Result<Vec<Batched>> {
    if let Some(e) = out.0.error() {
        return Err(e.clone());
    }
    Ok(vec![out])
}
