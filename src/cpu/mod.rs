//! The `cpu` device's executor: walks a [`Graph`] like the reference interpreter
//! ([`crate::reference::eval_graph`], which stays the oracle) but computes on typed slices.
//!
//! - elementwise ops (`cpu/elementwise.rs`): tight loops that call each op's typed rule (the same
//!   functions the interpreter calls through `Scalar`, so results agree bit for bit);
//! - layout ops (`cpu/layout.rs`): transposes, broadcasts and slices as strided row copies;
//! - reductions (`cpu/reduce.rs`): f64 accumulation like the interpreter; max/min/prod and reductions
//!   over leading or middle axes fold in the interpreter's order (bit-identical), full-row sums use
//!   several accumulators and threads (within f64 rounding of the interpreter);
//! - `dot_general` (`cpu/matmul.rs`): canonicalized to batched row/column-strided GEMMs for the
//!   `matrixmultiply` crate (f32 and f64), a wrapping loop for integers;
//! - `cond` / `scan`: the interpreter's control-flow rules with this executor for the bodies.
//!
//! Everything else goes to the primitive's own CPU rule (`Prim::eval_cpu_multi`). Large loops run on
//! several threads natively (none on wasm32). Values are dropped after their last use.

pub(crate) mod elementwise;
pub(crate) mod layout;
pub(crate) mod matmul;
pub(crate) mod reduce;

use crate::ops::{ControlOp, ElementwiseOp, LayoutOp, ReductionOp};
use std::borrow::Cow;

use crate::dtype::Scalar;
use crate::error::Result;
use crate::host::HostArray;
use crate::ops::Prim;
use crate::trace::graph::{Aval, Graph};

/// Evaluate `graph` on `inputs` (one per graph input, in order) with the `cpu` device's fast paths.
/// Same checks, errors and results as [`crate::reference::eval_graph`] (reductions and float matmuls
/// within rounding: see the module documentation).
pub fn eval_graph(graph: &Graph, inputs: &[HostArray]) -> Result<Vec<HostArray>> {
    let refs: Vec<&HostArray> = inputs.iter().collect();
    eval_graph_refs(graph, &refs)
}

/// [`eval_graph`] on borrowed inputs (no copy of the arguments).
pub(crate) fn eval_graph_refs(graph: &Graph, inputs: &[&HostArray]) -> Result<Vec<HostArray>> {
    crate::reference::check_inputs(graph, inputs.iter().copied())?;
    let mut env = crate::reference::initial_env(graph, inputs.iter().copied(), |x| {
        Val::Arr(Cow::Borrowed(x))
    });
    // Remaining uses of each value: freed after the last one (outputs count as a use, so they stay).
    let mut uses = graph.use_counts();
    for e in &graph.eqns {
        let avals = crate::reference::result_avals(graph, e)?;
        let lazy = match in_place(e, &mut env, &uses, &avals[0]) {
            Some(v) => Some(v),
            None => splat_eqn(&e.prim, &crate::reference::operands(&env, e), &avals[0]),
        };
        let outs = match lazy {
            Some(v) => vec![v],
            None => {
                // Every other consumer reads arrays: materialize the splats it reads, once.
                for v in &e.inputs {
                    if let Some(Val::Splat(x, shape)) = &env[v.idx()] {
                        let arr = HostArray::full_checked(*x, shape);
                        env[v.idx()] = Some(Val::Arr(Cow::Owned(arr)));
                    }
                }
                let ins: Vec<&HostArray> = e
                    .inputs
                    .iter()
                    .map(|v| match &env[v.idx()] {
                        Some(Val::Arr(a)) => &**a,
                        _ => unreachable!("inputs are defined and materialized"),
                    })
                    .collect();
                eval_eqn(&e.prim, &ins, &avals)?
                    .into_iter()
                    .map(|x| Val::Arr(Cow::Owned(x)))
                    .collect()
            }
        };
        for v in &e.inputs {
            uses[v.idx()] -= 1;
            if uses[v.idx()] == 0 {
                env[v.idx()] = None;
            }
        }
        for (o, x) in e.outs().zip(outs) {
            env[o.idx()] = Some(x);
        }
    }
    let mut outs = Vec::with_capacity(graph.outputs.len());
    for v in &graph.outputs {
        uses[v.idx()] -= 1;
        let x = if uses[v.idx()] == 0 {
            env[v.idx()].take()
        } else {
            env[v.idx()].as_ref().map(Val::shallow_clone)
        };
        outs.push(x.expect("output is defined").into_array());
    }
    Ok(outs)
}

/// An elementwise float op whose operand dies here writes its result into that operand's buffer
/// (an owned array at its last use, of the result's shape and dtype). `None`: not applicable, and
/// `env` is unchanged.
fn in_place<'a>(
    e: &crate::trace::graph::Eqn,
    env: &mut [Option<Val<'a>>],
    uses: &[usize],
    out: &Aval,
) -> Option<Val<'a>> {
    if !matches!(&e.prim, Prim::Elementwise(ElementwiseOp::Unary(op)) if !op.is_predicate())
        && !matches!(&e.prim, Prim::Elementwise(ElementwiseOp::Binary(op)) if !op.is_comparison())
    {
        return None;
    }
    let k = e.inputs.iter().position(|v| {
        uses[v.idx()] == 1
            && matches!(&env[v.idx()], Some(Val::Arr(Cow::Owned(a)))
                if a.shape == out.shape && a.dtype() == out.dtype && out.dtype.is_float())
    })?;
    let v = e.inputs[k];
    let Some(Val::Arr(Cow::Owned(mut buf))) = env[v.idx()].take() else {
        unreachable!("checked above");
    };
    let done = match &e.prim {
        Prim::Elementwise(ElementwiseOp::Unary(op)) => {
            elementwise::unary_inplace(*op, &mut buf.data)
        }
        Prim::Elementwise(ElementwiseOp::Binary(op)) => {
            let other = match &env[e.inputs[1 - k].idx()] {
                Some(Val::Arr(a)) => elementwise::Other::Arr(&a.data),
                Some(Val::Splat(x, _)) => elementwise::Other::Splat(*x),
                None => unreachable!("graph is topologically ordered"),
            };
            elementwise::binary_inplace(*op, &mut buf.data, other, k == 0)
        }
        _ => false,
    };
    if done {
        Some(Val::Arr(Cow::Owned(buf)))
    } else {
        env[v.idx()] = Some(Val::Arr(Cow::Owned(buf)));
        None
    }
}

/// A value in the executor: an array, or one value over a whole shape (a broadcast literal),
/// kept unmaterialized for the elementwise ops that read it.
enum Val<'a> {
    Arr(Cow<'a, HostArray>),
    Splat(Scalar, Vec<usize>),
}

impl Val<'_> {
    fn shallow_clone(&self) -> Self {
        match self {
            Val::Arr(a) => Val::Arr(Cow::Owned(a.as_ref().clone())),
            Val::Splat(x, s) => Val::Splat(*x, s.clone()),
        }
    }
    fn into_array(self) -> HostArray {
        match self {
            Val::Arr(a) => a.into_owned(),
            Val::Splat(x, s) => HostArray::full_checked(x, &s),
        }
    }
}

/// Equations that keep or consume splats without materializing them: a broadcast of one element
/// becomes a splat; unary ops, casts and reshapes of splats and binary ops of two splats stay
/// splats (the scalar rules give their value); a binary op of an array and a splat reads the
/// splat's value once. `None`: evaluate on arrays.
fn splat_eqn(prim: &Prim, ins: &[&Val<'_>], out: &Aval) -> Option<Val<'static>> {
    let one = |v: &Val<'_>| match v {
        Val::Splat(x, _) => Some(*x),
        Val::Arr(a) if a.len() == 1 => Some(a.data.get(0)),
        Val::Arr(_) => None,
    };
    let splat = |x: Scalar| Some(Val::Splat(x, out.shape.clone()));
    match (prim, ins) {
        (
            Prim::Layout(LayoutOp::BroadcastInDim { .. }) | Prim::Layout(LayoutOp::Reshape { .. }),
            [x],
        ) => splat(one(x)?),
        (Prim::Elementwise(ElementwiseOp::Unary(op)), [Val::Splat(x, _)]) => splat(op.eval(*x)),
        (Prim::Elementwise(ElementwiseOp::Cast(t)), [Val::Splat(x, _)]) => splat(x.cast(*t)),
        (Prim::Elementwise(ElementwiseOp::Binary(op)), [Val::Splat(a, _), Val::Splat(b, _)]) => {
            splat(op.eval(*a, *b))
        }
        (Prim::Elementwise(ElementwiseOp::Binary(op)), [Val::Arr(a), Val::Splat(b, _)]) => {
            let data = elementwise::binary_splat(*op, &a.data, *b, false)?;
            Some(Val::Arr(Cow::Owned(HostArray {
                shape: out.shape.clone(),
                data,
            })))
        }
        (Prim::Elementwise(ElementwiseOp::Binary(op)), [Val::Splat(a, _), Val::Arr(b)]) => {
            let data = elementwise::binary_splat(*op, &b.data, *a, true)?;
            Some(Val::Arr(Cow::Owned(HostArray {
                shape: out.shape.clone(),
                data,
            })))
        }
        _ => None,
    }
}

/// One equation: a fast path where there is one, else the primitive's reference rule.
fn eval_eqn(prim: &Prim, ins: &[&HostArray], avals: &[Aval]) -> Result<Vec<HostArray>> {
    let body = |g: &Graph, args: &[HostArray]| eval_graph(g, args);
    match prim {
        Prim::Control(ControlOp::Cond { branches }) => {
            crate::ops::control::eval_cond_with(branches, ins, &body)
        }
        Prim::Control(ControlOp::Scan(p)) => crate::ops::control::eval_scan_with(p, ins, &body),
        Prim::Control(ControlOp::While(p)) => crate::ops::control::eval_while_with(p, ins, &body),
        _ => match fast(prim, ins, &avals[0])? {
            Some(out) => Ok(vec![out]),
            None => prim.eval_cpu_multi(ins, avals),
        },
    }
}

/// The fast path of `prim`, or `None` where the reference rule is used.
fn fast(prim: &Prim, ins: &[&HostArray], out: &Aval) -> Result<Option<HostArray>> {
    let data = match prim {
        Prim::Elementwise(ElementwiseOp::Unary(op)) => elementwise::unary(*op, &ins[0].data),
        Prim::Elementwise(ElementwiseOp::Binary(op)) => {
            elementwise::binary(*op, &ins[0].data, &ins[1].data)
        }
        Prim::Elementwise(ElementwiseOp::Select) => {
            elementwise::select(&ins[0].data, &ins[1].data, &ins[2].data)
        }
        Prim::Elementwise(ElementwiseOp::Fma) => {
            elementwise::fma(&ins[0].data, &ins[1].data, &ins[2].data)
        }
        Prim::Elementwise(ElementwiseOp::Cast(t)) => Some(elementwise::cast(&ins[0].data, *t)),
        Prim::Layout(LayoutOp::Transpose { perm }) => Some(layout::transpose(ins[0], perm)),
        Prim::Layout(LayoutOp::BroadcastInDim { dims, .. }) => {
            Some(layout::broadcast(ins[0], &out.shape, dims))
        }
        Prim::Layout(LayoutOp::Slice { start, stride, .. }) => {
            Some(layout::slice(ins[0], start, stride, &out.shape))
        }
        Prim::Layout(LayoutOp::Concatenate { axis }) => layout::concatenate(ins, *axis, &out.shape),
        Prim::Layout(LayoutOp::Pad {
            lo,
            interior,
            value,
            ..
        }) => Some(layout::pad(ins[0], lo, interior, *value, &out.shape)?),
        Prim::Reduction(ReductionOp::Reduce { op, axes }) => reduce::reduce(*op, ins[0], axes),
        Prim::Reduction(ReductionOp::ArgReduce { op, axis }) => {
            Some(reduce::argreduce(*op, ins[0], *axis))
        }
        Prim::DotGeneral(d) => matmul::dot_general(ins[0], ins[1], d, &out.shape),
        _ => None,
    };
    Ok(data.map(|data| HostArray {
        shape: out.shape.clone(),
        data,
    }))
}

// ---- threads ------------------------------------------------------------------------------------

/// Elements one thread handles at least: below this a loop stays on the calling thread (spawning a
/// scoped thread costs tens of microseconds).
#[cfg(not(target_arch = "wasm32"))]
const PER_THREAD: usize = 1 << 17;

/// How many threads a loop over `n` elements uses: one on wasm32 (the browser gives none), else up
/// to the host's parallelism.
pub(crate) fn threads_for(n: usize) -> usize {
    #[cfg(target_arch = "wasm32")]
    {
        let _ = n;
        1
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let cores = *CORES.get_or_init(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        });
        (n / PER_THREAD).clamp(1, cores)
    }
}

/// Fill `out` by calling `f(offset, chunk)` on disjoint chunks (`offset`: the chunk's first index),
/// on several threads when `out` is large.
pub(crate) fn par_fill<T: Send>(out: &mut [T], f: impl Fn(usize, &mut [T]) + Sync) {
    par_fill_weighted(out, 1, f)
}

/// [`par_fill`] where each output element costs `weight` elements of work (a reduction's row).
pub(crate) fn par_fill_weighted<T: Send>(
    out: &mut [T],
    weight: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let t = threads_for(out.len().saturating_mul(weight.max(1))).min(out.len().max(1));
    if t <= 1 {
        f(0, out);
        return;
    }
    let chunk = out.len().div_ceil(t);
    let f = &f;
    std::thread::scope(|s| {
        let mut parts = out.chunks_mut(chunk).enumerate();
        // The calling thread takes the first chunk itself.
        let first = parts.next();
        for (i, c) in parts {
            s.spawn(move || f(i * chunk, c));
        }
        if let Some((_, c)) = first {
            f(0, c);
        }
    });
}
