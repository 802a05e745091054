//! Lowering a [`Graph`] for one device: canonical matmuls, fusion, kernels and a buffer plan.
//!
//! Fusion rule: a variable is *materialized* (gets a buffer) when it is a graph input, constant or
//! output, the result of a non-fusable primitive (reduction, matmul), or used more than once (unless it
//! is cheap to recompute: constants, index-only layout ops of materialized values, and small
//! elementwise trees used by at most 3 consumers). Every other
//! variable is inlined into the kernel that consumes it, so a tree of elementwise ops with broadcasts
//! becomes one kernel, and a reduction absorbs its elementwise prologue.

mod segments;
pub mod stages;

use crate::device::DeviceLimits;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::host::HostArray;
use crate::ops::matmul::kernel::{
    DefaultChooser, MatmulChooser, MatmulProblem, kernel as matmul_kernel,
};
use crate::ops::reduce;
use crate::ops::rules::PlanCx;
use crate::ops::{ControlOp, DotDims, ElementwiseOp, LayoutOp, Lowering, Prim};
use crate::trace::graph::{Aval, Eqn, Graph, Var};
use crate::wgsl::{self, KernelSrc};

/// One dispatch of a compiled program: kernel source and the buffer slots it binds (inputs, then outputs).
#[derive(Clone, Debug)]
pub struct Launch {
    pub label: String,
    pub wgsl: String,
    pub workgroups: [u32; 3],
    pub slots: Vec<usize>,
    /// Per slot, the byte range bound when not the whole buffer: one segment of an array larger
    /// than a storage binding. Empty when every slot is bound whole.
    pub views: Vec<Option<View>>,
}

/// A byte range of a slot's buffer that a [`Launch`] binds (`offset` a multiple of 256).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    pub offset: u64,
    pub size: u64,
}

/// Where a copy of the schedule reads or writes: byte `base + stride * i`, `i` the iteration of
/// the innermost enclosing [`Op::Loop`] (0 outside loops).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At {
    pub base: u64,
    pub stride: u64,
}

impl At {
    pub const ZERO: At = At { base: 0, stride: 0 };
    pub fn at(self, i: usize) -> u64 {
        self.base + self.stride * i as u64
    }
}

/// One step of a program's schedule.
#[derive(Clone, Debug)]
pub enum Op {
    /// Run `launches[i]`.
    Launch(usize),
    /// Copy `bytes` between two slots.
    Copy {
        src: usize,
        src_at: At,
        dst: usize,
        dst_at: At,
        bytes: u64,
    },
    /// Run `body` `count` times, iterations numbered `0..count` (or backwards with `reverse`).
    /// With `odd`, every second run (the 2nd, 4th, … in execution order) runs `odd` instead: the
    /// body with the carries' input and output buffers swapped (ping-pong, no carry copies).
    Loop {
        count: usize,
        reverse: bool,
        body: Vec<Op>,
        odd: Option<Vec<Op>>,
    },
    /// Run `cond`, read the bool in slot `pred` back to the host, and while it is true run `body`
    /// and `cond` again (a `while_loop`: the iteration count is data).
    While {
        cond: Vec<Op>,
        pred: usize,
        body: Vec<Op>,
    },
}

/// A graph compiled for one device: kernels over numbered buffer slots, run in the order of the
/// schedule (straight-line programs: every launch once, in order).
#[derive(Clone, Debug)]
pub struct Program {
    pub launches: Vec<Launch>,
    pub schedule: Vec<Op>,
    /// Byte size of every slot.
    pub slot_bytes: Vec<u64>,
    pub input_slots: Vec<usize>,
    pub const_slots: Vec<(usize, HostArray)>,
    pub output_slots: Vec<usize>,
    pub output_avals: Vec<Aval>,
    /// Donated arguments whose buffer an output takes: `(argument, output)`, the output's slot
    /// being the argument's ([`crate::Jit::donate_argnums`]).
    pub donated: Vec<(usize, usize)>,
}

impl Program {
    pub fn dispatch_count(&self) -> usize {
        self.launches
            .iter()
            .filter(|l| l.workgroups.iter().all(|&w| w > 0))
            .count()
    }
}

/// Rewrite every `dot_general` into the canonical (batch, m, k) × (batch, k, n) form the kernels take,
/// with explicit transposes/reshapes around it (they fuse or alias away when they are identities).
pub fn canonicalize_dots(g: &Graph) -> Graph {
    let mut out = g.without_eqns();
    for e in &g.eqns {
        let Prim::DotGeneral(d) = &e.prim else {
            out.eqns.push(e.clone());
            continue;
        };
        let (ls, rs) = (
            g.aval(e.inputs[0]).shape.clone(),
            g.aval(e.inputs[1]).shape.clone(),
        );
        let dt = g.aval(e.inputs[0]).dtype;
        let (lf, rf) = (d.lhs_free(ls.len()), d.rhs_free(rs.len()));
        let prod = |s: &[usize], ax: &[usize]| ax.iter().map(|&a| s[a]).product::<usize>();
        let (b, m, k, n) = (
            prod(&ls, &d.lhs_batch),
            prod(&ls, &lf),
            prod(&ls, &d.lhs_contract),
            prod(&rs, &rf),
        );
        let lperm: Vec<usize> = d
            .lhs_batch
            .iter()
            .chain(&lf)
            .chain(&d.lhs_contract)
            .copied()
            .collect();
        let rperm: Vec<usize> = d
            .rhs_batch
            .iter()
            .chain(&d.rhs_contract)
            .chain(&rf)
            .copied()
            .collect();
        let a = arrange(&mut out, e.inputs[0], &ls, &lperm, [b, m, k], dt);
        let bb = arrange(&mut out, e.inputs[1], &rs, &rperm, [b, k, n], dt);
        let c = out.new_var(Aval::new(vec![b, m, n], dt));
        out.eqns.push(Eqn {
            prim: Prim::DotGeneral(DotDims {
                lhs_contract: vec![2],
                rhs_contract: vec![1],
                lhs_batch: vec![0],
                rhs_batch: vec![0],
            }),
            inputs: vec![a, bb],
            out: c,
            extra_outs: Vec::new(),
        });
        out.eqns.push(Eqn {
            prim: Prim::Layout(LayoutOp::Reshape {
                shape: g.aval(e.out).shape.clone(),
            }),
            inputs: vec![c],
            out: e.out,
            extra_outs: Vec::new(),
        });
    }
    out
}

/// Append `out = prim(input)` with result `shape`.
fn push_unary(
    out: &mut Graph,
    prim: Prim,
    input: Var,
    shape: Vec<usize>,
    dt: crate::dtype::DType,
) -> Var {
    let v = out.new_var(Aval::new(shape, dt));
    out.eqns.push(Eqn {
        prim,
        inputs: vec![input],
        out: v,
        extra_outs: Vec::new(),
    });
    v
}

/// Transpose `x` by `perm` (skipped when it is the identity), then reshape to `target`.
fn arrange(
    out: &mut Graph,
    x: Var,
    shape: &[usize],
    perm: &[usize],
    target: [usize; 3],
    dt: crate::dtype::DType,
) -> Var {
    let is_id = perm.iter().enumerate().all(|(i, &p)| i == p);
    let x = if is_id {
        x
    } else {
        push_unary(
            out,
            Prim::Layout(LayoutOp::Transpose {
                perm: perm.to_vec(),
            }),
            x,
            perm.iter().map(|&p| shape[p]).collect(),
            dt,
        )
    };
    push_unary(
        out,
        Prim::Layout(LayoutOp::Reshape {
            shape: target.to_vec(),
        }),
        x,
        target.to_vec(),
        dt,
    )
}

/// Rewrite concatenations of more operands than a kernel can bind into a tree of smaller ones
/// (the fusion pass then stores the inner ones as needed).
fn split_wide_concats(g: &Graph, max_inputs: usize) -> Graph {
    let mut out = g.without_eqns();
    for e in &g.eqns {
        let Prim::Layout(LayoutOp::Concatenate { axis }) = e.prim else {
            out.eqns.push(e.clone());
            continue;
        };
        let mut parts = e.inputs.clone();
        while parts.len() > max_inputs {
            let mut next = Vec::new();
            for chunk in parts.chunks(max_inputs) {
                if chunk.len() == 1 {
                    next.push(chunk[0]);
                    continue;
                }
                let mut shape = out.aval(chunk[0]).shape.clone();
                shape[axis] = chunk.iter().map(|v| out.aval(*v).shape[axis]).sum();
                let v = out.new_var(Aval::new(shape, out.aval(chunk[0]).dtype));
                out.eqns.push(Eqn {
                    prim: Prim::Layout(LayoutOp::Concatenate { axis }),
                    inputs: chunk.to_vec(),
                    out: v,
                    extra_outs: Vec::new(),
                });
                next.push(v);
            }
            parts = next;
        }
        out.eqns.push(Eqn {
            prim: e.prim.clone(),
            inputs: parts,
            out: e.out,
            extra_outs: Vec::new(),
        });
    }
    out
}

/// `[batch, m, k] x [batch, k, n]`, the form `canonicalize_dots` leaves every dot in.
fn is_canonical_dot(d: &DotDims) -> bool {
    d.lhs_contract == [2] && d.rhs_contract == [1] && d.lhs_batch == [0] && d.rhs_batch == [0]
}

/// The buffers a canonical dot's kernel reads and how they are laid out.
struct DotOperands {
    a: Var,
    b: Var,
    problem: MatmulProblem,
}

/// If `v` (an operand of a canonical dot, shape `(batch, r, c)`) is a reshape of a transpose of
/// some `x` whose row-major layout is `(batch, c, r)`, that `x`: the kernel can then read `x` in
/// place as the transposed operand instead of materializing the transpose (grad's `A^T`, `B^T`).
fn transposed_source(g: &Graph, producers: &[Option<usize>], v: Var) -> Option<Var> {
    let reshape = &g.eqns[producers[v.idx()]?];
    let Prim::Layout(LayoutOp::Reshape { shape }) = &reshape.prim else {
        return None;
    };
    let &[b, r, c] = shape.as_slice() else {
        return None;
    };
    let t = reshape.inputs[0];
    let transpose = &g.eqns[producers[t.idx()]?];
    let Prim::Layout(LayoutOp::Transpose { perm }) = &transpose.prim else {
        return None;
    };
    let x = transpose.inputs[0];
    let ts = &g.aval(t).shape;
    let prod = |axes: &[usize]| axes.iter().map(|&a| ts[a]).product::<usize>();
    let rank = perm.len();
    // Split the transposed axes into (batch | rows | cols); x must hold them as (batch | cols | rows).
    for i in 0..=rank {
        for j in i..=rank {
            let idx: Vec<usize> = (0..rank).collect();
            let (bs, rs, cs) = (&idx[..i], &idx[i..j], &idx[j..]);
            if prod(bs) != b || prod(rs) != r || prod(cs) != c {
                continue;
            }
            let order = bs.iter().chain(cs).chain(rs).map(|&a| perm[a]);
            if order.eq(0..rank) {
                return Some(x);
            }
        }
    }
    None
}

/// The operands of canonical dot `e`. A transposed operand is read in place when a vec4 tiled
/// kernel exists for the resulting layout (or when only the generic kernel applies anyway, which
/// reads any layout); otherwise the transpose is materialized and the plain layout used, as a
/// copy is O(size) and the tiled kernel is ~2x the generic one.
fn dot_operands(g: &Graph, producers: &[Option<usize>], e: &Eqn) -> DotOperands {
    let s = &g.aval(e.inputs[0]).shape;
    let (batch, m, k, n) = (s[0], s[1], s[2], g.aval(e.inputs[1]).shape[2]);
    let elem = g.aval(e.out).dtype.wgsl_storage();
    let src_a = transposed_source(g, producers, e.inputs[0]);
    let src_b = transposed_source(g, producers, e.inputs[1]);
    let problem = |ta: bool, tb: bool| MatmulProblem {
        batch,
        m,
        k,
        n,
        elem,
        ta,
        tb,
    };
    let (ta0, tb0) = (src_a.is_some(), src_b.is_some());
    let (ta, tb) = [(ta0, tb0), (ta0, false), (false, tb0), (false, false)]
        .into_iter()
        .find(|&(ta, tb)| problem(ta, tb).tiled_ok())
        .unwrap_or((ta0, tb0));
    DotOperands {
        a: if ta {
            src_a.expect("ta implies a source")
        } else {
            e.inputs[0]
        },
        b: if tb {
            src_b.expect("tb implies a source")
        } else {
            e.inputs[1]
        },
        problem: problem(ta, tb),
    }
}

/// Ops whose result is their input's buffer, reinterpreted (see `Step::Alias`).
fn is_alias_op(p: &Prim) -> bool {
    matches!(p.lowering(), Lowering::Remap { alias: true, .. })
}

/// Longest chain of ops inlined into one kernel.
const MAX_FUSION_DEPTH: usize = 128;
/// A value used by at most this many consumers, of at most this many inlined ops, is recomputed by
/// each of them instead of stored.
const MAX_RECOMPUTE_USES: usize = 3;
const MAX_RECOMPUTE_OPS: usize = 4;

/// Decide which variables get buffers.
fn materialize(g: &Graph, producers: &[Option<usize>]) -> Vec<bool> {
    let uses = g.use_counts();
    let mut mat = vec![false; g.avals.len()];
    for v in g
        .inputs
        .iter()
        .chain(g.consts.iter().map(|(v, _)| v))
        .chain(&g.outputs)
    {
        mat[v.idx()] = true;
    }
    for e in &g.eqns {
        if let Lowering::Loop = e.prim.lowering() {
            // The loop copies whole buffers in and out.
            for v in e.inputs.iter().copied().chain(e.outs()) {
                mat[v.idx()] = true;
            }
        }
        if !e.prim.is_fusable() {
            mat[e.out.idx()] = true;
            match e.prim.lowering() {
                // Matmul kernels read stored operands (plain, or transposed in place).
                Lowering::Matmul(d) if is_canonical_dot(d) => {
                    let ops = dot_operands(g, producers, e);
                    mat[ops.a.idx()] = true;
                    mat[ops.b.idx()] = true;
                }
                Lowering::Matmul(_) => {
                    for v in &e.inputs {
                        mat[v.idx()] = true;
                    }
                }
                Lowering::Kernel(k) if k.stores_operands() => {
                    for v in &e.inputs {
                        mat[v.idx()] = true;
                    }
                }
                Lowering::Passes(_) => {
                    for v in &e.inputs {
                        mat[v.idx()] = true;
                    }
                }
                _ => {}
            }
        }
        // Random primitives read both words of their key for every element: a computed key is
        // stored, not inlined (a chain of split/fold_in would otherwise recompute its hashes
        // 2^depth times).
        if let Lowering::Keyed = e.prim.lowering() {
            mat[e.inputs[0].idx()] = true;
        }
    }
    // Cheap variables may be recomputed by each consumer instead of stored.
    let mut cheap = vec![false; g.avals.len()];
    for e in &g.eqns {
        cheap[e.out.idx()] = match e.prim.lowering() {
            Lowering::Constant => true,
            Lowering::Remap { cheap: true, .. } => {
                let i = e.inputs[0].idx();
                cheap[i] || mat[i]
            }
            _ => false,
        };
    }
    // A small elementwise tree used a few times (softmax's `exp(x - max)`, read by its sum and by
    // the division) is recomputed by each consumer: that costs a few ops per element where
    // storing it costs a write and a read of the whole array, and memory is what kernels wait on.
    let mut ops = vec![0usize; g.avals.len()];
    for e in &g.eqns {
        let o = e.out.idx();
        let inlined: usize = e
            .inputs
            .iter()
            .filter(|v| !mat[v.idx()] && !cheap[v.idx()])
            .map(|v| ops[v.idx()])
            .sum();
        let arithmetic = matches!(e.prim.lowering(), Lowering::Elementwise);
        // Layout ops are index arithmetic only; they do not count.
        ops[o] = usize::from(arithmetic) + inlined;
        let recompute = arithmetic && uses[o] <= MAX_RECOMPUTE_USES && ops[o] <= MAX_RECOMPUTE_OPS;
        if uses[o] > 1 && !cheap[o] && !recompute {
            mat[o] = true;
        }
    }
    // A stored value that is a reshape (or identity transpose) of another reshape shares its
    // buffer when the inner one is stored too: store the inner one (free, an alias, or the same
    // copy moved up the chain) so grad's identity transposes around matmul results cost nothing.
    for e in g.eqns.iter().rev() {
        if mat[e.out.idx()] && is_alias_op(&e.prim) {
            let input = e.inputs[0];
            if producers[input.idx()].is_some_and(|p| is_alias_op(&g.eqns[p].prim)) {
                mat[input.idx()] = true;
            }
        }
    }
    // Bound the depth of inlined trees: the generator recurses per fused op, and one giant kernel
    // compiles slowly anyway. A value MAX_FUSION_DEPTH ops deep is stored and fusion restarts there.
    let mut depth = vec![0usize; g.avals.len()];
    for e in &g.eqns {
        let d = 1 + e
            .inputs
            .iter()
            .filter(|v| !mat[v.idx()])
            .map(|v| depth[v.idx()])
            .max()
            .unwrap_or(0);
        if d >= MAX_FUSION_DEPTH && e.prim.is_fusable() {
            mat[e.out.idx()] = true;
        }
        depth[e.out.idx()] = if mat[e.out.idx()] { 0 } else { d };
    }
    mat
}

/// Kernels for the materialized variables, in program order.
enum Step {
    Kernel {
        src: KernelSrc,
        out: Var,
    },
    /// Reduction through a temporary of `parts` partials per output.
    TwoPass {
        first: KernelSrc,
        second: KernelSrc,
        temp_bytes: u64,
        out: Var,
    },
    /// An elementwise kernel over an array larger than one binding: one dispatch per segment
    /// (see `segments`), all reading the same variables.
    Segmented {
        launches: Vec<segments::SegLaunch>,
        out: Var,
    },
    /// A reduction or matmul over arrays larger than one binding: small programs over blocks
    /// of rows (see `segments::blocked`).
    Blocked {
        blocked: segments::Blocked,
        out: Var,
    },
    /// A slice or concatenation over arrays larger than one binding, as buffer copies (see
    /// `segments::copies`).
    Copies {
        runs: Vec<segments::Run>,
        out: Var,
    },
    /// `out` shares `input`'s buffer (reshape of a materialized value).
    Alias {
        input: Var,
        out: Var,
    },
    /// Several dispatches of a primitive's own through temporaries (see `rules::OwnPasses`).
    Passes {
        plan: crate::ops::rules::PassPlan,
        out: Var,
    },
    /// A `scan` (equation `eqn` of the graph): its body lowered on its own, run as a loop.
    Scan {
        eqn: usize,
    },
}

impl Step {
    /// The variables the step reads.
    fn reads(&self, g: &Graph) -> Vec<Var> {
        match self {
            Step::Kernel { src, .. } | Step::TwoPass { first: src, .. } => src.inputs.clone(),
            Step::Segmented { launches, .. } => launches[0].0.inputs.clone(),
            Step::Blocked { blocked, .. } => blocked.reads(),
            Step::Copies { runs, .. } => {
                let mut v: Vec<Var> = Vec::new();
                for r in runs {
                    if !v.contains(&r.src) {
                        v.push(r.src);
                    }
                }
                v
            }
            Step::Alias { input, .. } => vec![*input],
            Step::Passes { plan, .. } => {
                let mut v: Vec<Var> = Vec::new();
                for p in &plan.passes {
                    for x in &p.src.inputs {
                        if !v.contains(x) {
                            v.push(*x);
                        }
                    }
                }
                v
            }
            Step::Scan { eqn } => g.eqns[*eqn].inputs.clone(),
        }
    }
    /// The variables the step defines.
    fn writes(&self, g: &Graph) -> Vec<Var> {
        match self {
            Step::Kernel { out, .. }
            | Step::TwoPass { out, .. }
            | Step::Segmented { out, .. }
            | Step::Blocked { out, .. }
            | Step::Copies { out, .. }
            | Step::Alias { out, .. }
            | Step::Passes { out, .. } => vec![*out],
            Step::Scan { eqn } => g.eqns[*eqn].outs().collect(),
        }
    }
}

fn plan_steps(
    g: &Graph,
    producers: &[Option<usize>],
    mat: &[bool],
    limits: &DeviceLimits,
    chooser: &dyn MatmulChooser,
) -> Result<Vec<Step>> {
    let max_wg = limits.max_compute_workgroups_per_dimension;
    let mut steps = Vec::new();
    for (i, e) in g.eqns.iter().enumerate() {
        if !mat[e.out.idx()] {
            continue;
        }
        let aval = g.aval(e.out);
        let canonical = match e.prim.lowering() {
            Lowering::Matmul(d) => is_canonical_dot(d),
            _ => true,
        };
        if e.inputs.iter().all(|v| mat[v.idx()]) {
            if let Some(runs) = segments::copies(g, e, limits)? {
                steps.push(Step::Copies { runs, out: e.out });
                continue;
            }
        }
        if canonical && segments::blocks_operands(e) && e.inputs.iter().all(|v| mat[v.idx()]) {
            if let Some(blocked) = segments::blocked(g, e, limits, chooser)? {
                steps.push(Step::Blocked {
                    blocked,
                    out: e.out,
                });
                continue;
            }
        }
        match e.prim.lowering() {
            Lowering::Loop => steps.push(Step::Scan { eqn: i }),
            // A reshape (or identity transpose) of a stored value shares its buffer.
            Lowering::Remap { alias: true, .. } if mat[e.inputs[0].idx()] => {
                steps.push(Step::Alias {
                    input: e.inputs[0],
                    out: e.out,
                })
            }
            Lowering::Reduce { op, axes } => {
                let mut axes = axes.to_vec();
                axes.sort_unstable();
                let axes = &axes;
                let plan = reduce::kernel::reduce_kernels(
                    g,
                    producers,
                    mat,
                    op,
                    e.inputs[0],
                    axes,
                    max_wg,
                    chooser.reduce_spread(),
                );
                match plan.second {
                    None => steps.push(Step::Kernel {
                        src: plan.first,
                        out: e.out,
                    }),
                    Some((parts, second)) => steps.push(Step::TwoPass {
                        first: plan.first,
                        second,
                        temp_bytes: (aval.size() * parts * aval.dtype.size_bytes()) as u64,
                        out: e.out,
                    }),
                }
            }
            Lowering::ArgReduce { op, axis } => steps.push(Step::Kernel {
                src: reduce::kernel::argreduce_kernel(
                    g,
                    producers,
                    mat,
                    op,
                    e.inputs[0],
                    axis,
                    max_wg,
                ),
                out: e.out,
            }),
            Lowering::Matmul(d) if is_canonical_dot(d) => {
                let ops = dot_operands(g, producers, e);
                // Over one binding this kernel never runs (it is planned again over blocks, or
                // refused): no measuring on buffers of these sizes.
                let large = [ops.a, ops.b, e.out]
                    .iter()
                    .any(|&v| segments::too_big(g, v, limits));
                let p = ops.problem;
                let chosen = if large {
                    p.heuristic()
                } else {
                    chooser.choose(&p, max_wg)
                };
                let cfg = if chosen.supports(&p) {
                    chosen
                } else {
                    p.heuristic()
                };
                let mk = matmul_kernel(&p, cfg, max_wg);
                steps.push(Step::Kernel {
                    src: KernelSrc {
                        label: mk.label,
                        wgsl: mk.wgsl,
                        inputs: vec![ops.a, ops.b],
                        workgroups: mk.workgroups,
                    },
                    out: e.out,
                });
            }
            Lowering::Kernel(k) => {
                let cx = PlanCx {
                    g,
                    producers,
                    materialized: mat,
                    max_wg,
                    limits,
                };
                steps.push(Step::Kernel {
                    src: k.kernel(&cx, e)?,
                    out: e.out,
                })
            }
            Lowering::Passes(k) => {
                let cx = PlanCx {
                    g,
                    producers,
                    materialized: mat,
                    max_wg,
                    limits,
                };
                steps.push(Step::Passes {
                    plan: k.passes(&cx, e)?,
                    out: e.out,
                })
            }
            Lowering::Matmul(_) => {
                return Err(Error::Unsupported {
                    op: "dot_general",
                    detail: "before canonicalization (internal)".into(),
                });
            }
            Lowering::Elementwise
            | Lowering::Constant
            | Lowering::Remap { .. }
            | Lowering::Keyed => {
                let src = wgsl::elementwise_kernel(g, producers, mat, e.out, max_wg);
                match segments::elementwise(g, producers, mat, &src, e.out, limits)? {
                    None => steps.push(Step::Kernel { src, out: e.out }),
                    Some(launches) => steps.push(Step::Segmented {
                        launches,
                        out: e.out,
                    }),
                }
            }
            // Conds are inlined, collectives cut out by the parallel executor and prints taken
            // out before lowering: reaching the planner is a bug upstream.
            Lowering::Inline | Lowering::StageBoundary | Lowering::HostOnly => {
                return Err(Error::Unsupported {
                    op: e.prim.name(),
                    detail: "reached the kernel planner (internal): it is inlined, cut out or \
                             taken out before lowering"
                        .into(),
                });
            }
        }
    }
    Ok(steps)
}

/// Compile `graph` for a device with `limits`, matmul kernels picked by the fixed heuristic.
pub fn lower(graph: &Graph, limits: &DeviceLimits) -> Result<Program> {
    lower_with(graph, limits, &DefaultChooser)
}

/// [`lower`] with the matmul kernels picked by `chooser` (a device's measured choice).
pub(crate) fn lower_with(
    graph: &Graph,
    limits: &DeviceLimits,
    chooser: &dyn MatmulChooser,
) -> Result<Program> {
    lower_donating(graph, limits, chooser, &[])
}

/// [`lower_with`] where the inputs numbered in `donate` are donated (`Jit::donate_argnums`): an
/// output may be computed into a donated input's slot when it has the input's byte size and the
/// input is read by no later step, so the program needs no buffer of its own for that output.
/// The step that reads the input last may be the one writing the output when it reads the whole
/// input before writing (a two-pass reduction), or when it is a fused elementwise kernel reading
/// the input only at the element it writes (then it runs in place). Which argument became which
/// output is [`Program::donated`]; a donated input no output can take keeps its own slot.
pub(crate) fn lower_donating(
    graph: &Graph,
    limits: &DeviceLimits,
    chooser: &dyn MatmulChooser,
    donate: &[usize],
) -> Result<Program> {
    graph.check()?;
    refuse_collectives(graph)?;
    refuse_f64(graph)?;
    let graph = &crate::ops::control::inline_conds(graph);
    let max_inputs = (limits.max_storage_buffers_per_shader_stage as usize)
        .saturating_sub(1)
        .max(2);
    // Matmuls too wide to run over blocks are split first: their parts may be concatenated.
    let g = segments::split_oversized(&canonicalize_dots(graph), limits);
    let mut g = split_wide_concats(&g, max_inputs);
    g.dce();
    check_sizes(&g)?;
    let producers = g.producers();
    let mut mat = materialize(&g, &producers);
    for e in &g.eqns {
        // A remap (layout op, gather) reading an array over one binding is never fused into a
        // consumer (kernels bind such arrays in segments, read at their own index): stored, with
        // stored operands. A reshape then shares its operand's buffer; the others run as a
        // kernel of their own over windows of the operand (see `segments::remap`).
        if matches!(e.prim.lowering(), Lowering::Remap { .. })
            && e.inputs.iter().any(|&v| segments::too_big(&g, v, limits))
        {
            mat[e.out.idx()] = true;
            for &v in &e.inputs {
                mat[v.idx()] = true;
            }
        }
        // Slices and concatenations of such arrays are buffer copies: stored, with stored
        // operands (an elementwise operand becomes a segmented kernel of its own).
        let large = std::iter::once(e.out)
            .chain(e.inputs.iter().copied())
            .any(|v| segments::too_big(&g, v, limits));
        if large && segments::copies_operands(e) {
            mat[e.out.idx()] = true;
            for &v in &e.inputs {
                mat[v.idx()] = true;
            }
        }
    }

    // Fuse as much as the binding limit allows: when a kernel reads too many buffers, store the
    // fusable operand that contributes the most of them and try again.
    let mut steps = loop {
        let steps = plan_steps(&g, &producers, &mat, limits, chooser)?;
        let over = steps.iter().find_map(|s| match s {
            Step::Kernel { src, out }
            | Step::TwoPass {
                first: src, out, ..
            } if src.inputs.len() > max_inputs => Some(*out),
            Step::Segmented { launches, out } if launches[0].0.inputs.len() > max_inputs => {
                Some(*out)
            }
            _ => None,
        });
        // A reduction or matmul whose kernel would bind an array over one binding runs over
        // blocks of its operands' buffers: store its operands (an elementwise prologue becomes
        // a kernel of its own, segmented where large) and plan again.
        if let Some(e) = unblocked(&g, &producers, &mat, &steps, limits) {
            for &v in &g.eqns[e].inputs {
                mat[v.idx()] = true;
            }
            continue;
        }
        let Some(out) = over else { break steps };
        let cut = pick_cut(&g, &producers, &mat, out).ok_or_else(|| Error::OverLimit {
            device: "target".into(),
            what: format!("a kernel reading {} buffers", max_inputs + 1),
            needed: (max_inputs + 1) as u64,
            limit: max_inputs as u64,
            unit: "storage buffers",
            limit_name: "max_storage_buffers_per_shader_stage",
        })?;
        mat[cut.idx()] = true;
    };
    check_bindings(&g, &producers, &steps, limits)?;
    // Buffer slots: one per materialized variable, aliases share, freed slots are reused by later
    // values of the same size.
    let mut slot_of: Vec<Option<usize>> = vec![None; g.avals.len()];
    let mut slot_bytes: Vec<u64> = Vec::new();
    // At least 16 bytes: a vec4 binding of an empty array still needs one element's room.
    let bytes = |v: Var| (g.aval(v).size_bytes().max(16)) as u64;
    let new_slot = |slot_bytes: &mut Vec<u64>, b: u64| {
        slot_bytes.push(b);
        slot_bytes.len() - 1
    };
    // Input and constant buffers belong to the caller / the executable: never reused.
    for &v in g.inputs.iter().chain(g.consts.iter().map(|(v, _)| v)) {
        slot_of[v.idx()] = Some(new_slot(&mut slot_bytes, bytes(v)));
    }
    let pinned = slot_bytes.len();
    // Last step reading each variable.
    let mut last_use = vec![usize::MAX; g.avals.len()];
    for (i, s) in steps.iter().enumerate() {
        for v in s.reads(&g) {
            last_use[v.idx()] = i;
        }
    }
    let is_out = |v: Var| g.outputs.contains(&v);
    let mut free: Vec<usize> = Vec::new();
    let mut launches = Vec::new();
    let mut schedule = Vec::new();
    let mut const_slots: Vec<(usize, HostArray)> = Vec::new();
    let mut holders: Vec<Vec<Var>> = vec![Vec::new(); slot_bytes.len()]; // variables sharing each slot
    // Donated inputs no output has taken yet, and the (input, output) pairs that share a slot.
    let mut donors: Vec<usize> = donate.to_vec();
    let mut donated: Vec<(usize, usize)> = Vec::new();
    for i in 0..steps.len() {
        let taken = take_donor(
            &g,
            &producers,
            &mat,
            &mut steps,
            i,
            &Donors {
                candidates: &donors,
                slot_of: &slot_of,
                holders: &holders,
                last_use: &last_use,
            },
            limits.max_compute_workgroups_per_dimension,
        );
        if let Some(d) = taken {
            donors.retain(|&x| x != d);
            let out = steps[i].writes(&g)[0];
            let sl = slot_of[g.inputs[d].idx()].expect("input slot");
            slot_of[out.idx()] = Some(sl);
            holders[sl].push(out);
            for (o, _) in g.outputs.iter().enumerate().filter(|(_, v)| **v == out) {
                donated.push((d, o));
            }
        }
        let s = &steps[i];
        for out in s.writes(&g) {
            if slot_of[out.idx()].is_some() {
                continue; // in a donated input's slot
            }
            let slot = if let Step::Alias { input, .. } = s {
                slot_of[input.idx()].expect("materialized input has a slot")
            } else {
                let b = bytes(out);
                match free.iter().position(|&f| slot_bytes[f] == b) {
                    Some(p) if !is_out(out) => free.swap_remove(p),
                    _ => new_slot(&mut slot_bytes, b),
                }
            };
            slot_of[out.idx()] = Some(slot);
            if holders.len() < slot_bytes.len() {
                holders.resize(slot_bytes.len(), Vec::new());
            }
            holders[slot].push(out);
        }
        let slot_of_var = |v: Var| slot_of[v.idx()].expect("inputs are computed before use");
        let ins = |src: &KernelSrc| {
            src.inputs
                .iter()
                .map(|v| slot_of_var(*v))
                .collect::<Vec<usize>>()
        };
        let launch = |l: Launch, launches: &mut Vec<Launch>, schedule: &mut Vec<Op>| {
            schedule.push(Op::Launch(launches.len()));
            launches.push(l);
        };
        // One kernel writing `out`, binding `views` (empty: every slot whole).
        let kernel = |src: &KernelSrc,
                      views: &[Option<View>],
                      out: Var,
                      launches: &mut Vec<Launch>,
                      schedule: &mut Vec<Op>| {
            let mut slots = ins(src);
            slots.push(slot_of_var(out));
            let l = Launch {
                label: src.label.clone(),
                wgsl: src.wgsl.clone(),
                workgroups: src.workgroups,
                slots,
                views: views.to_vec(),
            };
            launch(l, launches, schedule);
        };
        match s {
            Step::Kernel { src, out } => kernel(src, &[], *out, &mut launches, &mut schedule),
            Step::Copies { runs, out } => {
                for r in runs {
                    schedule.push(Op::Copy {
                        src: slot_of_var(r.src),
                        src_at: At {
                            base: r.src_offset,
                            stride: 0,
                        },
                        dst: slot_of_var(*out),
                        dst_at: At {
                            base: r.dst_offset,
                            stride: 0,
                        },
                        bytes: r.bytes,
                    });
                }
            }
            Step::Blocked { blocked, .. } => {
                let temps: Vec<usize> = blocked
                    .temps
                    .iter()
                    .map(|&b| new_slot(&mut slot_bytes, b.max(16)))
                    .collect();
                for b in &blocked.blocks {
                    let place = |p: &segments::Place| match p {
                        segments::Place::Var(v) => slot_of_var(*v),
                        segments::Place::Temp(t) => temps[*t],
                    };
                    let fresh = embed_block(
                        b,
                        &place,
                        &mut Embed {
                            launches: &mut launches,
                            slot_bytes: &mut slot_bytes,
                            const_slots: &mut const_slots,
                            schedule: &mut schedule,
                        },
                        limits,
                    )?;
                    free.extend(fresh);
                }
                free.extend(temps);
            }
            Step::Segmented {
                launches: segs,
                out,
            } => {
                for (src, views) in segs {
                    kernel(src, views, *out, &mut launches, &mut schedule);
                }
            }
            Step::TwoPass {
                first,
                second,
                temp_bytes,
                out,
            } => {
                let temp = new_slot(&mut slot_bytes, *temp_bytes);
                let mut slots = ins(first);
                slots.push(temp);
                launch(
                    Launch {
                        label: first.label.clone(),
                        wgsl: first.wgsl.clone(),
                        workgroups: first.workgroups,
                        slots,
                        views: Vec::new(),
                    },
                    &mut launches,
                    &mut schedule,
                );
                launch(
                    Launch {
                        label: second.label.clone(),
                        wgsl: second.wgsl.clone(),
                        workgroups: second.workgroups,
                        slots: vec![temp, slot_of_var(*out)],
                        views: Vec::new(),
                    },
                    &mut launches,
                    &mut schedule,
                );
                free.push(temp);
            }
            Step::Passes { plan, out } => {
                let temps: Vec<usize> = plan
                    .temp_bytes
                    .iter()
                    .map(|&b| new_slot(&mut slot_bytes, b.max(16)))
                    .collect();
                for p in &plan.passes {
                    let mut slots = ins(&p.src);
                    slots.extend(p.temps.iter().map(|&t| temps[t]));
                    if p.writes_out {
                        slots.push(slot_of_var(*out));
                    }
                    launch(
                        Launch {
                            label: p.src.label.clone(),
                            wgsl: p.src.wgsl.clone(),
                            workgroups: p.src.workgroups,
                            slots,
                            views: Vec::new(),
                        },
                        &mut launches,
                        &mut schedule,
                    );
                }
                free.extend(temps);
            }
            Step::Alias { .. } => {}
            Step::Scan { eqn } => {
                let e = &g.eqns[*eqn];
                let ins: Vec<usize> = e.inputs.iter().map(|v| slot_of_var(*v)).collect();
                let outs: Vec<usize> = e.outs().map(slot_of_var).collect();
                let in_avals: Vec<&Aval> = e.inputs.iter().map(|v| g.aval(*v)).collect();
                let mut to = Embed {
                    launches: &mut launches,
                    slot_bytes: &mut slot_bytes,
                    const_slots: &mut const_slots,
                    schedule: &mut schedule,
                };
                match &e.prim {
                    Prim::Control(ControlOp::Scan(p)) => {
                        lower_scan(p, &ins, &outs, &in_avals, limits, chooser, &mut to)?
                    }
                    Prim::Control(ControlOp::While(p)) => {
                        lower_while(p, &ins, &outs, &in_avals, limits, chooser, &mut to)?
                    }
                    _ => unreachable!("loop steps come from scan and while equations"),
                }
            }
        }
        // Release slots whose every holder is dead after this step (never inputs, consts or outputs).
        for v in s.reads(&g) {
            let Some(sl) = slot_of[v.idx()] else { continue };
            let dead = holders.get(sl).is_some_and(|h| {
                !h.is_empty() && h.iter().all(|&x| last_use[x.idx()] <= i && !is_out(x))
            });
            if dead && sl >= pinned && !free.contains(&sl) {
                free.push(sl);
            }
        }
    }
    let input_slots = g
        .inputs
        .iter()
        .map(|v| slot_of[v.idx()].expect("input slot"))
        .collect();
    const_slots.extend(
        g.consts
            .iter()
            .map(|(v, h)| (slot_of[v.idx()].expect("const slot"), h.clone())),
    );
    let output_slots = g
        .outputs
        .iter()
        .map(|v| slot_of[v.idx()].expect("output slot"))
        .collect();
    let output_avals = g.outputs.iter().map(|v| g.aval(*v).clone()).collect();
    Ok(Program {
        launches,
        schedule,
        slot_bytes,
        input_slots,
        const_slots,
        output_slots,
        output_avals,
        donated,
    })
}

/// What [`take_donor`] looks at: the donated inputs still free and the slot plan so far.
struct Donors<'a> {
    candidates: &'a [usize],
    slot_of: &'a [Option<usize>],
    holders: &'a [Vec<Var>],
    last_use: &'a [usize],
}

/// The donated input (its position among the graph's inputs) whose slot step `i`'s output can
/// take, if any (see [`lower_donating`]); an elementwise step that must run in place for it is
/// replaced by its in-place kernel.
fn take_donor(
    g: &Graph,
    producers: &[Option<usize>],
    mat: &[bool],
    steps: &mut [Step],
    i: usize,
    d: &Donors<'_>,
    max_wg: u32,
) -> Option<usize> {
    let out = match &steps[i] {
        Step::Kernel { out, .. } | Step::TwoPass { out, .. } | Step::Passes { out, .. } => *out,
        // Steps over segments bind their output in pieces: not planned into a donated buffer.
        Step::Alias { .. }
        | Step::Scan { .. }
        | Step::Segmented { .. }
        | Step::Blocked { .. }
        | Step::Copies { .. } => return None,
    };
    if !g.outputs.contains(&out) {
        return None;
    }
    // The real sizes, not the slots' (at least 16 bytes): the argument's buffer is the caller's,
    // of exactly its array's size.
    let size = |v: Var| g.aval(v).size_bytes();
    for &k in d.candidates {
        let x = g.inputs[k];
        let sl = d.slot_of[x.idx()].expect("input slot");
        let sharing: Vec<Var> = std::iter::once(x)
            .chain(d.holders[sl].iter().copied())
            .collect();
        let read_at = |v: Var| Some(d.last_use[v.idx()]).filter(|&u| u != usize::MAX);
        if size(x) != size(out)
            || g.aval(x).dtype.size_bytes() != g.aval(out).dtype.size_bytes()
            || sharing.iter().any(|v| g.outputs.contains(v))
            || sharing.iter().any(|&v| read_at(v).is_some_and(|u| u > i))
        {
            continue;
        }
        let read_here: Vec<Var> = sharing
            .iter()
            .copied()
            .filter(|&v| read_at(v) == Some(i))
            .collect();
        if read_here.is_empty() {
            return Some(k);
        }
        // A two-pass reduction reads everything in its first pass, the second writes the output.
        if matches!(steps[i], Step::TwoPass { .. }) {
            return Some(k);
        }
        let elementwise = matches!(steps[i], Step::Kernel { .. })
            && matches!(
                g.eqns[producers[out.idx()]?].prim.lowering(),
                Lowering::Elementwise
                    | Lowering::Constant
                    | Lowering::Remap { .. }
                    | Lowering::Keyed
            );
        if elementwise && read_here == [x] {
            if let Some(src) = wgsl::elementwise_kernel_in_place(g, producers, mat, out, x, max_wg)
            {
                steps[i] = Step::Kernel { src, out };
                return Some(k);
            }
        }
    }
    None
}

/// A copy of `bytes` from `(slot, byte offset)` `from` to `to`.
fn copy_op(from: (usize, u64), to: (usize, u64), bytes: u64) -> Op {
    let at = |base| At { base, stride: 0 };
    Op::Copy {
        src: from.0,
        src_at: at(from.1),
        dst: to.0,
        dst_at: at(to.1),
        bytes,
    }
}

/// Append block `b` of a blocked step (see `segments::blocked`) to the parent program: its
/// input and output slots become ranges of the parent's slots (`place`), its other slots new
/// ones, which are returned (free once the block has run).
fn embed_block(
    b: &segments::Block,
    place: &dyn Fn(&segments::Place) -> usize,
    to: &mut Embed<'_>,
    limits: &DeviceLimits,
) -> Result<Vec<usize>> {
    let p = &b.program;
    let mut map: Vec<Option<(usize, Option<View>)>> = vec![None; p.slot_bytes.len()];
    let mut fresh = Vec::new();
    // A range starting off the storage-offset alignment cannot be bound, nor one that straddles
    // two parts of an array stored in several buffers (over `max_buffer_size`; parts of
    // `part_bytes`, a power of two that divides every device's own): it is copied to (or, the
    // output, from) a slot of its own, bound whole. Copies cross parts.
    let part = limits.part_bytes();
    let straddles = |v: &View| v.offset / part != (v.offset + v.size.max(1) - 1) / part;
    let unaligned = |slot_bytes: u64, view: &Option<View>| {
        view.filter(|v| {
            v.offset % segments::ALIGN != 0 || (slot_bytes > limits.max_buffer_size && straddles(v))
        })
    };
    let staging = |view: View, slot_bytes: &mut Vec<u64>, fresh: &mut Vec<usize>| {
        slot_bytes.push(view.size.max(16));
        fresh.push(slot_bytes.len() - 1);
        slot_bytes.len() - 1
    };
    let mut copies_in = Vec::new();
    for (k, &s) in p.input_slots.iter().enumerate() {
        let (pl, view) = &b.ins[k];
        map[s] = Some(match unaligned(to.slot_bytes[place(pl)], view) {
            Some(v) => {
                let t = staging(v, to.slot_bytes, &mut fresh);
                copies_in.push(copy_op((place(pl), v.offset), (t, 0), v.size));
                (t, None)
            }
            None => (place(pl), *view),
        });
    }
    let [o] = p.output_slots.as_slice() else {
        unreachable!("a block computes one output")
    };
    if map[*o].is_some() {
        return Err(Error::Unsupported {
            op: "segments",
            detail: "a block whose output is one of its inputs (internal)".into(),
        });
    }
    let mut copy_out = None;
    map[*o] = Some(match unaligned(to.slot_bytes[place(&b.out.0)], &b.out.1) {
        Some(v) => {
            let t = staging(v, to.slot_bytes, &mut fresh);
            copy_out = Some(copy_op((t, 0), (place(&b.out.0), v.offset), v.size));
            (t, None)
        }
        None => (place(&b.out.0), b.out.1),
    });
    to.schedule.extend(copies_in);
    let map: Vec<(usize, Option<View>)> = map
        .into_iter()
        .enumerate()
        .map(|(s, m)| {
            m.unwrap_or_else(|| {
                to.slot_bytes.push(p.slot_bytes[s]);
                fresh.push(to.slot_bytes.len() - 1);
                (to.slot_bytes.len() - 1, None)
            })
        })
        .collect();
    let base = to.launches.len();
    to.launches.extend(p.launches.iter().map(|l| {
        let views: Vec<Option<View>> = l.slots.iter().map(|&s| map[s].1).collect();
        Launch {
            slots: l.slots.iter().map(|&s| map[s].0).collect(),
            views: if views.iter().any(Option::is_some) {
                views
            } else {
                Vec::new()
            },
            ..l.clone()
        }
    }));
    to.const_slots
        .extend(p.const_slots.iter().map(|(s, h)| (map[*s].0, h.clone())));
    for op in &p.schedule {
        match op {
            Op::Launch(i) => to.schedule.push(Op::Launch(base + i)),
            // A copy's offsets are within its slots: shifted by where the block's views start.
            &Op::Copy {
                src,
                src_at,
                dst,
                dst_at,
                bytes,
            } => {
                let shift = |s: usize, at: At| At {
                    base: at.base + map[s].1.map_or(0, |v| v.offset),
                    ..at
                };
                to.schedule.push(Op::Copy {
                    src: map[src].0,
                    src_at: shift(src, src_at),
                    dst: map[dst].0,
                    dst_at: shift(dst, dst_at),
                    bytes,
                });
            }
            Op::Loop { .. } | Op::While { .. } => {
                return Err(Error::Unsupported {
                    op: "segments",
                    detail: "a block program with loops (internal)".into(),
                });
            }
        }
    }
    to.schedule.extend(copy_out);
    Ok(fresh)
}

/// Where a loop body's program is appended in its parent's.
struct Embed<'a> {
    launches: &'a mut Vec<Launch>,
    slot_bytes: &'a mut Vec<u64>,
    const_slots: &'a mut Vec<(usize, HostArray)>,
    schedule: &'a mut Vec<Op>,
}

/// Lower a `scan` whose operands live in slots `ins` and results go to slots `outs`: the body is
/// lowered on its own and appended (its slots renumbered after the parent's; its constants read
/// straight from the operands' slots), then scheduled as a loop:
/// copy the initial carry in; per iteration copy slice `i` of each `xs` in, run the body, copy each
/// `y` to slice `i` of its stacked result and the new carry over the old; finally copy the carry out.
fn lower_scan(
    p: &crate::ops::control::ScanParams,
    ins: &[usize],
    outs: &[usize],
    in_avals: &[&Aval],
    limits: &DeviceLimits,
    chooser: &dyn MatmulChooser,
    to: &mut Embed<'_>,
) -> Result<()> {
    let (nc, nk) = (p.n_consts, p.n_carry);
    let body = lower_with(&fresh_outputs(&p.body), limits, chooser)?;
    // Renumber the body's slots: constants alias the parent's operands, the rest are new.
    let (map, base) = embed(&body, &|k| (k < nc).then(|| ins[k]), to);
    let copy = |src: usize, src_at: At, dst: usize, dst_at: At, bytes: u64| Op::Copy {
        src,
        src_at,
        dst,
        dst_at,
        bytes,
    };
    let body_in: Vec<usize> = body.input_slots.iter().map(|&s| map[s]).collect();
    let body_out: Vec<usize> = body.output_slots.iter().map(|&s| map[s]).collect();
    let carry_bytes: Vec<u64> = (0..nk)
        .map(|k| in_avals[nc + k].size_bytes() as u64)
        .collect();
    for k in 0..nk {
        to.schedule.push(copy(
            ins[nc + k],
            At::ZERO,
            body_in[nc + k],
            At::ZERO,
            carry_bytes[k],
        ));
    }
    // Ping-pong: odd iterations run a copy of the body with each carry's input and output
    // buffers swapped, so no carry is copied between iterations. A loop without `xs` and `ys`
    // (a `fori_loop`) is then dispatches only: one compute pass per chunk instead of one per
    // iteration (wgpu records every pass into a driver command buffer of its own).
    let ping_pong = nk > 0
        && (0..nk).all(|k| {
            let (i, o) = (body_in[nc + k], body_out[k]);
            i != o && to.slot_bytes[i] == to.slot_bytes[o]
        });
    let mut swapped = map.clone();
    if ping_pong {
        for s in swapped.iter_mut() {
            if let Some(k) = (0..nk).find(|&k| *s == body_in[nc + k]) {
                *s = body_out[k];
            } else if let Some(k) = (0..nk).find(|&k| *s == body_out[k]) {
                *s = body_in[nc + k];
            }
        }
    }
    let odd_base = to.launches.len();
    if ping_pong {
        to.launches.extend(body.launches.iter().map(|l| Launch {
            slots: l.slots.iter().map(|&s| swapped[s]).collect(),
            ..l.clone()
        }));
    }
    // One iteration: slice `i` of each `xs` in, the body, each `y` out to slice `i`.
    let iteration = |launch_base: usize, slots: &[usize]| {
        let mut ops = Vec::new();
        for (j, a) in in_avals[nc + nk..].iter().enumerate() {
            let slice = (a.size_bytes() / p.length.max(1)) as u64;
            let at = At {
                base: 0,
                stride: slice,
            };
            ops.push(copy(
                ins[nc + nk + j],
                at,
                body_in[nc + nk + j],
                At::ZERO,
                slice,
            ));
        }
        ops.extend(remap_schedule(&body.schedule, launch_base, slots));
        for (j, a) in body.output_avals[nk..].iter().enumerate() {
            let slice = a.size_bytes() as u64;
            let at = At {
                base: 0,
                stride: slice,
            };
            ops.push(copy(body_out[nk + j], At::ZERO, outs[nk + j], at, slice));
        }
        ops
    };
    let mut iter = iteration(base, &map);
    let odd = if ping_pong {
        Some(iteration(odd_base, &swapped))
    } else {
        for k in 0..nk {
            iter.push(copy(
                body_out[k],
                At::ZERO,
                body_in[nc + k],
                At::ZERO,
                carry_bytes[k],
            ));
        }
        None
    };
    to.schedule.push(Op::Loop {
        count: p.length,
        reverse: p.reverse,
        body: iter,
        odd,
    });
    // Where the carry ends: after an odd number of ping-pong iterations, in the outputs' buffers.
    let carry_at: Vec<usize> = (0..nk)
        .map(|k| {
            if ping_pong && p.length % 2 == 1 {
                body_out[k]
            } else {
                body_in[nc + k]
            }
        })
        .collect();
    for k in 0..nk {
        to.schedule.push(copy(
            carry_at[k],
            At::ZERO,
            outs[k],
            At::ZERO,
            carry_bytes[k],
        ));
    }
    Ok(())
}

/// Append program `sub` to `to`: its launches after the parent's, its slots renumbered (the
/// inputs `alias` gives a parent slot for read that slot, the others get new slots), its
/// constants bound. Returns the renumbering and the index of its first launch.
fn embed(
    sub: &Program,
    alias: &dyn Fn(usize) -> Option<usize>,
    to: &mut Embed<'_>,
) -> (Vec<usize>, usize) {
    let mut map = vec![usize::MAX; sub.slot_bytes.len()];
    for (k, &s) in sub.input_slots.iter().enumerate() {
        if let Some(parent) = alias(k) {
            map[s] = parent;
        }
    }
    for (s, m) in map.iter_mut().enumerate() {
        if *m == usize::MAX {
            to.slot_bytes.push(sub.slot_bytes[s]);
            *m = to.slot_bytes.len() - 1;
        }
    }
    let base = to.launches.len();
    to.launches.extend(sub.launches.iter().map(|l| Launch {
        slots: l.slots.iter().map(|&s| map[s]).collect(),
        ..l.clone()
    }));
    to.const_slots
        .extend(sub.const_slots.iter().map(|(s, h)| (map[*s], h.clone())));
    (map, base)
}

/// Lower a `while` whose operands live in slots `ins` and results go to slots `outs`: `body` and
/// `cond` are lowered on their own and appended (constants read from the operands' slots, `cond`
/// reading the body's carry slots), then scheduled as: copy the initial carry in; while `cond`'s
/// predicate (read back by the executor) holds, run the body and copy the new carry over the
/// old; copy the carry out. (No ping-pong: the parity of an unknown count is not known here.)
fn lower_while(
    p: &crate::ops::control::WhileParams,
    ins: &[usize],
    outs: &[usize],
    in_avals: &[&Aval],
    limits: &DeviceLimits,
    chooser: &dyn MatmulChooser,
    to: &mut Embed<'_>,
) -> Result<()> {
    let (ncc, nbc, nk) = (p.n_cond_consts, p.n_body_consts, p.n_carry());
    let body = lower_with(&fresh_outputs(&p.body), limits, chooser)?;
    let cond = lower_with(&fresh_outputs(&p.cond), limits, chooser)?;
    let (bmap, bbase) = embed(&body, &|k| (k < nbc).then(|| ins[ncc + k]), to);
    let body_in: Vec<usize> = body.input_slots.iter().map(|&s| bmap[s]).collect();
    let body_out: Vec<usize> = body.output_slots.iter().map(|&s| bmap[s]).collect();
    let (cmap, cbase) = embed(
        &cond,
        &|k| {
            Some(if k < ncc {
                ins[k]
            } else {
                body_in[nbc + k - ncc]
            })
        },
        to,
    );
    let copy = |src: usize, dst: usize, bytes: u64| Op::Copy {
        src,
        src_at: At::ZERO,
        dst,
        dst_at: At::ZERO,
        bytes,
    };
    let carry_bytes: Vec<u64> = (0..nk)
        .map(|k| in_avals[ncc + nbc + k].size_bytes() as u64)
        .collect();
    for k in 0..nk {
        to.schedule
            .push(copy(ins[ncc + nbc + k], body_in[nbc + k], carry_bytes[k]));
    }
    let mut step = remap_schedule(&body.schedule, bbase, &bmap);
    for k in 0..nk {
        step.push(copy(body_out[k], body_in[nbc + k], carry_bytes[k]));
    }
    to.schedule.push(Op::While {
        cond: remap_schedule(&cond.schedule, cbase, &cmap),
        pred: cmap[cond.output_slots[0]],
        body: step,
    });
    for k in 0..nk {
        to.schedule
            .push(copy(body_in[nbc + k], outs[k], carry_bytes[k]));
    }
    Ok(())
}

/// A body's schedule with launches offset by `base` and slots renumbered by `map`.
fn remap_schedule(ops: &[Op], base: usize, map: &[usize]) -> Vec<Op> {
    ops.iter()
        .map(|op| match op {
            Op::Launch(i) => Op::Launch(base + i),
            Op::Copy {
                src,
                src_at,
                dst,
                dst_at,
                bytes,
            } => Op::Copy {
                src: map[*src],
                src_at: *src_at,
                dst: map[*dst],
                dst_at: *dst_at,
                bytes: *bytes,
            },
            Op::Loop {
                count,
                reverse,
                body,
                odd,
            } => Op::Loop {
                count: *count,
                reverse: *reverse,
                body: remap_schedule(body, base, map),
                odd: odd.as_ref().map(|o| remap_schedule(o, base, map)),
            },
            Op::While { cond, pred, body } => Op::While {
                cond: remap_schedule(cond, base, map),
                pred: map[*pred],
                body: remap_schedule(body, base, map),
            },
        })
        .collect()
}

/// `g` with every output in a buffer of its own: an output that is an input, a constant, a
/// repeat of an earlier output or the result of an op that shares its operand's buffer (a
/// reshape, an identity transpose) is copied by an identity conversion. A loop body needs this: its outputs are copied over its inputs.
fn fresh_outputs(g: &Graph) -> Graph {
    let mut g = g.clone();
    let producers = g.producers();
    let mut seen = Vec::new();
    for k in 0..g.outputs.len() {
        let v = g.outputs[k];
        // An input, a constant, or an op that reuses its operand's buffer (a reshape, an
        // identity transpose): the output would share a slot with an input or another output,
        // and a loop's carry copies would then overwrite what they still read.
        let shared = match producers[v.idx()] {
            None => true,
            Some(p) => is_alias_op(&g.eqns[p].prim),
        };
        if shared || seen.contains(&v) {
            let aval = g.aval(v).clone();
            let nv = g.new_var(aval.clone());
            g.eqns.push(Eqn::new(
                Prim::Elementwise(ElementwiseOp::Cast(aval.dtype)),
                vec![v],
                nv,
            ));
            g.outputs[k] = nv;
        }
        seen.push(g.outputs[k]);
    }
    g
}

/// Refuse arrays that can never fit: kernels index with 32-bit integers. Arrays larger than one
/// storage binding are bound in segments (see `segments`; [`check_bindings`] refuses the kernels
/// that cannot), arrays larger than one buffer are stored in parts (`DeviceLimits::part_bytes`).
fn check_sizes(g: &Graph) -> Result<()> {
    for a in &g.avals {
        let n = a.size() as u64;
        if n > u32::MAX as u64 {
            return Err(Error::OverLimit {
                device: "target".into(),
                what: format!("an array of shape {:?}", a.shape),
                needed: n,
                limit: u32::MAX as u64,
                unit: "elements",
                limit_name: "32-bit kernel indexing",
            });
        }
    }
    Ok(())
}

/// The equation of a step that fuses operands into a reduction or matmul kernel binding an array
/// over one binding: with its operands stored, [`segments::blocked`] runs it over blocks.
fn unblocked(
    g: &Graph,
    producers: &[Option<usize>],
    mat: &[bool],
    steps: &[Step],
    limits: &DeviceLimits,
) -> Option<usize> {
    steps.iter().find_map(|s| {
        let (src, out) = match s {
            Step::Kernel { src, out }
            | Step::TwoPass {
                first: src, out, ..
            } => (src, *out),
            _ => return None,
        };
        let e = producers[out.idx()]?;
        let eqn = &g.eqns[e];
        let large = src
            .inputs
            .iter()
            .chain([&out])
            .any(|&v| segments::too_big(g, v, limits));
        (large && segments::blocks_operands(eqn) && eqn.inputs.iter().any(|v| !mat[v.idx()]))
            .then_some(e)
    })
}

/// Refuse a planned kernel that would bind an array (or a temporary) larger than one storage
/// binding whole: only segmented steps bind such arrays, one segment at a time.
fn check_bindings(
    g: &Graph,
    producers: &[Option<usize>],
    steps: &[Step],
    limits: &DeviceLimits,
) -> Result<()> {
    let max = limits.max_storage_buffer_binding_size;
    for s in steps {
        let (out, inputs, temps): (Var, Vec<Var>, Vec<u64>) = match s {
            Step::Kernel { src, out } => (*out, src.inputs.clone(), Vec::new()),
            Step::TwoPass {
                first,
                temp_bytes,
                out,
                ..
            } => (*out, first.inputs.clone(), vec![*temp_bytes]),
            Step::Passes { plan, out } => (*out, s.reads(g), plan.temp_bytes.clone()),
            Step::Segmented { .. }
            | Step::Blocked { .. }
            | Step::Copies { .. }
            | Step::Alias { .. }
            | Step::Scan { .. } => continue,
        };
        let prim = &g.eqns[producers[out.idx()].expect("steps compute produced variables")].prim;
        let family = segments::family(prim);
        if let Some(&v) = inputs.iter().find(|&&v| segments::too_big(g, v, limits)) {
            let how = format!("read by the `{}` kernel", prim.name());
            return Err(segments::unsupported(g, v, limits, &how, &family));
        }
        if segments::too_big(g, out, limits) {
            let how = format!("written by the `{}` kernel", prim.name());
            return Err(segments::unsupported(g, out, limits, &how, &family));
        }
        if let Some(&t) = temps.iter().find(|&&t| t > max) {
            return Err(Error::OverLimit {
                device: "target".into(),
                what: format!(
                    "a temporary of the `{}` kernels computing {}: segmented {family} are not supported yet",
                    prim.name(),
                    g.aval(out)
                ),
                needed: t,
                limit: max,
                unit: "bytes",
                limit_name: "max_storage_buffer_binding_size",
            });
        }
    }
    Ok(())
}

/// The fusable, not yet materialized operand subtree of `root`'s kernel that reads the most buffers.
fn pick_cut(g: &Graph, producers: &[Option<usize>], mat: &[bool], root: Var) -> Option<Var> {
    fn leaves(g: &Graph, producers: &[Option<usize>], mat: &[bool], v: Var, acc: &mut Vec<Var>) {
        if mat[v.idx()] {
            if !acc.contains(&v) {
                acc.push(v);
            }
            return;
        }
        if let Some(p) = producers[v.idx()] {
            for &i in &g.eqns[p].inputs {
                leaves(g, producers, mat, i, acc);
            }
        }
    }
    let e = &g.eqns[producers[root.idx()]?];
    let mut best: Option<(usize, Var)> = None;
    let mut stack: Vec<Var> = e.inputs.clone();
    while let Some(v) = stack.pop() {
        if mat[v.idx()] {
            continue;
        }
        let mut acc = Vec::new();
        leaves(g, producers, mat, v, &mut acc);
        if acc.len() >= 2 && best.is_none_or(|(n, _)| acc.len() > n) {
            best = Some((acc.len(), v));
        }
        if let Some(p) = producers[v.idx()] {
            stack.extend(g.eqns[p].inputs.iter().copied());
        }
    }
    best.map(|(_, v)| v)
}

/// WGSL has no f64: a program with an f64 value (argument, constant or intermediate, in cond
/// branches and scan bodies too) cannot be compiled for a GPU device. Names the first such value's
/// shape and the fix.
fn refuse_f64(g: &Graph) -> Result<()> {
    let vars = g
        .inputs
        .iter()
        .copied()
        .chain(g.consts.iter().map(|(v, _)| *v))
        .chain(g.eqns.iter().flat_map(|e| e.outs()));
    if let Some(a) = vars.map(|v| g.aval(v)).find(|a| a.dtype == DType::F64) {
        return Err(crate::error::f64_on_gpu(
            "running on a GPU device",
            &a.shape,
        ));
    }
    for e in &g.eqns {
        if let Prim::Control(c) = &e.prim {
            c.subgraphs()
                .into_iter()
                .try_for_each(|(_, b)| refuse_f64(b))?
        }
    }
    Ok(())
}

/// Collectives need the other devices: only the parallel executor runs them, between stages
/// ([`stages::split_stages`]). A single-device program containing one is a usage error.
pub(crate) fn refuse_collectives(g: &Graph) -> Result<()> {
    for e in &g.eqns {
        match &e.prim {
            Prim::Collective(c) => {
                return Err(Error::Unsupported {
                    op: c.name(),
                    detail: format!(
                        "on one device: a collective over axis '{}' runs only inside pmap/shard_map, which cut the program into stages at it",
                        c.axis_name
                    ),
                });
            }
            Prim::Control(ControlOp::Cond { branches }) => {
                branches.iter().try_for_each(|b| refuse_collectives(b))?
            }
            Prim::Control(ControlOp::Scan(p)) => {
                if let Some(c) = first_collective(&p.body) {
                    return Err(Error::Unsupported {
                        op: c.name(),
                        detail: format!(
                            "a collective over axis '{}' inside a scan / fori_loop body on one device: such a loop runs only inside pmap/shard_map, which drive it from the host iteration by iteration",
                            c.axis_name
                        ),
                    });
                }
            }
            Prim::Control(w @ ControlOp::While(_)) => {
                if let Some(c) = w
                    .subgraphs()
                    .into_iter()
                    .find_map(|(_, b)| first_collective(b))
                {
                    return Err(Error::Unsupported {
                        op: c.name(),
                        detail: format!(
                            "a collective over axis '{}' inside a while_loop's cond_fun or body_fun: not supported yet \
                             (on one device collectives need pmap/shard_map, and there a while_loop runs on each device on \
                             its own); use fori_loop or scan with a bound, which pmap drives from the host",
                            c.axis_name
                        ),
                    });
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The first collective in `g` or its sub-programs.
pub(crate) fn first_collective(g: &Graph) -> Option<&crate::ops::Collective> {
    g.eqns.iter().find_map(|e| match &e.prim {
        Prim::Collective(c) => Some(c),
        Prim::Control(c) => c
            .subgraphs()
            .into_iter()
            .find_map(|(_, b)| first_collective(b)),
        _ => None,
    })
}
