//! Control flow: `cond` / `switch` (one of several branches, chosen by a traced index) and `scan` (a
//! loop with a carry and per-iteration inputs and stacked outputs; `fori_loop` is a scan). Both are
//! primitives that hold sub-programs ([`Graph`]s) and have several results.
//!
//! Rules, in one place:
//! - shape rule: `infer_cond`, `infer_scan` (typed errors for branches that disagree and carries
//!   that change);
//! - CPU reference: `eval_cond` evaluates the chosen branch only, `eval_scan` loops;
//! - lowering: a `cond` is inlined (`inline_conds`): every branch is computed and the results
//!   are selected by the index, so that no device waits for the host to read a predicate and every
//!   device of a parallel program runs the same kernels (as JAX does for `cond` under `vmap`). A
//!   `scan` becomes a loop in the program's schedule (`crate::lower`): the body's kernels run once
//!   per iteration, with buffer copies moving the carry and slicing `xs` / stacking `ys`, all in one
//!   submission. Under `pmap`, a scan whose body holds collectives is cut out of the stages like a
//!   collective and driven from the host (`lower::stages::HostLoop`);
//! - batching (`batch_cond`, `batch_scan`): an unbatched index keeps the `cond` (branches
//!   batched); a batched index computes every branch and selects per example, each branch on
//!   operands whose gradient is stopped in the examples that do not take it (JAX's rule, so an
//!   untaken branch's NaNs stay out of the gradient here too). A scan's carry is batched where
//!   the body makes it so (a fixed point);
//! - VJP (`vjp_cond`, `vjp_scan`): the cotangent of a `cond` is a `cond` over the branches'
//!   VJPs (the untaken branch's gradient never leaks in, unlike `select`); a scan's is a scan in
//!   the opposite direction over the forward carries (recomputed by one more forward scan).
//!
//! Binding (`bind`: trace the branches or the body, check them, apply the primitive) is shared by
//! the user-facing functions (`crate::transform::control`) and the rules above that re-emit a
//! control primitive. The rules reach the batching and reverse-mode interpreters
//! (`crate::transform::{batching, ad}`) and the tracing entry points, never a user-facing builder.

pub(crate) mod bind;

use crate::ops::{ElementwiseOp, LayoutOp};
use std::fmt;
use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::host::{HostArray, HostData};
use crate::ops::rules::{Emitted, Lowering, Rules};
use crate::ops::{BatchCtx, Batched, BinaryOp, Cotangents, Prim, move_axis, with_batch};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Eqn, Graph, Var};
use crate::wgsl::Emitter;
use bind::{Branch, scan_impl, switch_impl};

/// A branch built by a rule (closing over the rule's values).
type BoxedBranch<'a> = Box<dyn Fn(&[Tensor]) -> Vec<Tensor> + 'a>;

/// Parameters of a `scan`: operands are `consts ++ init ++ xs`, results `carry ++ ys`. The body's
/// inputs are `consts ++ carry ++ x` (one slice of each `xs` along axis 0), its outputs
/// `carry ++ y`; each `ys` stacks the per-iteration `y` along a new leading axis of `length`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScanParams {
    pub body: Arc<Graph>,
    pub length: usize,
    /// Iterate from the last slice to the first (`ys` stay in slice order).
    pub reverse: bool,
    pub n_consts: usize,
    pub n_carry: usize,
}

impl ScanParams {
    /// Number of per-iteration inputs.
    pub fn n_xs(&self) -> usize {
        self.body.inputs.len() - self.n_consts - self.n_carry
    }
    /// Number of stacked outputs.
    pub fn n_ys(&self) -> usize {
        self.body.outputs.len() - self.n_carry
    }
}

/// Parameters of a `while`: operands are `cond_consts ++ body_consts ++ init`, results the final
/// carry. `cond` takes `cond_consts ++ carry` and returns one bool scalar; `body` takes
/// `body_consts ++ carry` and returns the next carry.
#[derive(Clone, Debug, PartialEq)]
pub struct WhileParams {
    pub cond: Arc<Graph>,
    pub body: Arc<Graph>,
    pub n_cond_consts: usize,
    pub n_body_consts: usize,
}

impl WhileParams {
    /// Number of carried values.
    pub fn n_carry(&self) -> usize {
        self.body.outputs.len()
    }
    /// Number of operands (`cond_consts ++ body_consts ++ init`).
    pub fn n_operands(&self) -> usize {
        self.n_cond_consts + self.n_body_consts + self.n_carry()
    }
}

/// The control-flow primitives: they hold sub-programs and have several results.
#[derive(Clone, Debug, PartialEq)]
pub enum ControlOp {
    /// `cond(index, operands...)`: the outputs of `branches[index](operands)` (a bool index picks
    /// branch 1 when true).
    Cond { branches: Vec<Arc<Graph>> },
    /// A loop over the leading axis of its per-iteration operands, threading a carry.
    Scan(ScanParams),
    /// A loop that runs `body` while `cond` holds (`lax.while_loop`): the number of iterations
    /// is data, read back from the device each iteration.
    While(WhileParams),
}

impl ControlOp {
    /// The sub-programs, named as a printed graph names them.
    pub fn subgraphs(&self) -> Vec<(String, &Graph)> {
        match self {
            ControlOp::Cond { branches } => branches
                .iter()
                .enumerate()
                .map(|(j, b)| (format!("branch {j}"), &**b))
                .collect(),
            ControlOp::Scan(p) => vec![("body".to_string(), &*p.body)],
            ControlOp::While(p) => vec![
                ("cond".to_string(), &*p.cond),
                ("body".to_string(), &*p.body),
            ],
        }
    }
}

impl Rules for ControlOp {
    fn name(&self) -> &'static str {
        match self {
            ControlOp::Cond { .. } => "cond",
            ControlOp::Scan(_) => "scan",
            ControlOp::While(_) => "while",
        }
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlOp::Cond { branches } => write!(f, "[branches={}]", branches.len()),
            ControlOp::Scan(p) => write!(
                f,
                "[length={} reverse={} consts={} carry={} body={} eqns]",
                p.length,
                p.reverse,
                p.n_consts,
                p.n_carry,
                p.body.eqns.len()
            ),
            ControlOp::While(p) => write!(
                f,
                "[cond_consts={} body_consts={} carry={} cond={} eqns body={} eqns]",
                p.n_cond_consts,
                p.n_body_consts,
                p.n_carry(),
                p.cond.eqns.len(),
                p.body.eqns.len()
            ),
        }
    }

    fn arity(&self) -> Option<usize> {
        match self {
            ControlOp::Cond { .. } | ControlOp::Scan(_) | ControlOp::While(_) => None,
        }
    }

    fn result_count(&self) -> usize {
        match self {
            ControlOp::Cond { branches } => branches.first().map_or(0, |b| b.outputs.len()),
            ControlOp::Scan(p) => p.body.outputs.len(),
            ControlOp::While(p) => p.n_carry(),
        }
    }

    fn infer(&self, ins: &[&Aval]) -> Result<Vec<Aval>> {
        match self {
            ControlOp::Cond { branches } => infer_cond(branches, ins),
            ControlOp::Scan(p) => infer_scan(p, ins),
            ControlOp::While(p) => infer_while(p, ins),
        }
    }

    fn eval_cpu(&self, ins: &[&HostArray], _outs: &[Aval]) -> Result<Vec<HostArray>> {
        match self {
            ControlOp::Cond { branches } => eval_cond(branches, ins),
            ControlOp::Scan(p) => eval_scan(p, ins),
            ControlOp::While(p) => eval_while(p, ins),
        }
    }

    fn lowering(&self) -> Lowering<'_> {
        match self {
            ControlOp::Cond { .. } => Lowering::Inline,
            ControlOp::Scan(_) | ControlOp::While(_) => Lowering::Loop,
        }
    }

    fn emit_wgsl(&self, _em: &mut Emitter<'_>, _ins: &[Var], _idx: &[String]) -> Option<Emitted> {
        None
    }

    fn batch(&self, ins: &[Batched], ctx: &BatchCtx<'_>) -> Result<Vec<Batched>> {
        match self {
            ControlOp::Cond { branches } => batch_cond(branches, ins, ctx),
            ControlOp::Scan(p) => batch_scan(p, ins, ctx),
            ControlOp::While(p) => batch_while(p, ins, ctx),
        }
    }

    fn vjp(&self, ins: &[Tensor], outs: &[Tensor], cts: &[Option<Tensor>]) -> Result<Cotangents> {
        match self {
            ControlOp::Cond { branches } => vjp_cond(branches, ins, outs, cts),
            ControlOp::Scan(p) => vjp_scan(p, ins, outs, cts),
            ControlOp::While(_) => Err(while_vjp_error()),
        }
    }

    fn has_effect(&self) -> bool {
        match self {
            ControlOp::Cond { branches } => branches.iter().any(|b| !b.effects.is_empty()),
            ControlOp::Scan(p) => !p.body.effects.is_empty(),
            ControlOp::While(p) => !p.body.effects.is_empty() || !p.cond.effects.is_empty(),
        }
    }
}

fn aval_of(t: &Tensor) -> Aval {
    Aval::new(t.shape().to_vec(), t.dtype())
}

fn avals_of(g: &Graph, vars: &[Var]) -> Vec<Aval> {
    vars.iter().map(|v| g.aval(*v).clone()).collect()
}

/// "(f32[3], i32[])" for messages.
pub(crate) fn describe(avals: &[Aval]) -> String {
    let parts: Vec<String> = avals.iter().map(|a| a.to_string()).collect();
    format!("({})", parts.join(", "))
}

/// Check a branch index or predicate: a scalar bool (cond) or integer (switch).
pub(crate) fn check_index(op: &'static str, a: &Aval) -> Result<()> {
    if !a.shape.is_empty() {
        return Err(Error::BadShapeArg {
            op,
            shape: a.shape.clone(),
            detail: "the predicate (or branch index) must be a scalar: reduce it first (any/all/sum), or use `select` to choose per element".into(),
        });
    }
    if !matches!(a.dtype, DType::Bool | DType::I32 | DType::U32) {
        return Err(Error::BadDType {
            op,
            dtype: a.dtype,
            hint: "the predicate must be bool (compare first, e.g. `x.gt(0.0)`), or an i32 branch index for switch",
            shapes: vec![a.shape.clone()],
        });
    }
    Ok(())
}

/// Shape rule of `cond`: operands `[index, operands...]`; results: the branches' outputs.
pub(crate) fn infer_cond(branches: &[Arc<Graph>], ins: &[&Aval]) -> Result<Vec<Aval>> {
    let Some((index, ops)) = ins.split_first() else {
        return Err(Error::Arity {
            what: "cond".into(),
            expected: 1,
            got: 0,
        });
    };
    check_index("cond", index)?;
    let Some(first) = branches.first() else {
        return Err(Error::BadShapeArg {
            op: "cond",
            shape: vec![],
            detail: "no branches: give at least one".into(),
        });
    };
    let want_in: Vec<Aval> = ops.iter().map(|a| (*a).clone()).collect();
    let want_out = avals_of(first, &first.outputs);
    for (j, b) in branches.iter().enumerate() {
        let got_in = avals_of(b, &b.inputs);
        if got_in != want_in {
            return Err(Error::BadShapeArg {
                op: "cond",
                shape: vec![],
                detail: format!(
                    "{} takes {} but the operands are {}",
                    branch_name("cond", branches.len(), j),
                    describe(&got_in),
                    describe(&want_in)
                ),
            });
        }
        let got_out = avals_of(b, &b.outputs);
        if got_out != want_out {
            return Err(Error::BranchMismatch {
                op: "cond",
                branch: j,
                branch_name: branch_name("cond", branches.len(), j),
                reference: branch_name("cond", branches.len(), 0),
                want: describe(&want_out),
                got: describe(&got_out),
            });
        }
    }
    Ok(want_out)
}

/// How the user wrote branch `j` of `n`: `cond`'s two branches are `on_false` (0) and `on_true`
/// (1), in `lax.cond`'s order; otherwise `branch j`, as `switch` numbers them.
pub(crate) fn branch_name(op: &str, n: usize, j: usize) -> String {
    match (op, n, j) {
        ("cond", 2, 0) => "on_false".into(),
        ("cond", 2, 1) => "on_true".into(),
        _ => format!("branch {j}"),
    }
}

/// Shape rule of `scan`: see [`ScanParams`].
pub(crate) fn infer_scan(p: &ScanParams, ins: &[&Aval]) -> Result<Vec<Aval>> {
    let b = &p.body;
    let nb = b.inputs.len();
    if p.n_consts + p.n_carry > nb || p.n_carry > b.outputs.len() {
        return Err(Error::BadShapeArg {
            op: "scan",
            shape: vec![],
            detail: format!(
                "the body has {nb} inputs and {} outputs, fewer than its {} constants and {} carries (internal)",
                b.outputs.len(),
                p.n_consts,
                p.n_carry
            ),
        });
    }
    if ins.len() != nb {
        return Err(Error::Arity {
            what: "scan operands".into(),
            expected: nb,
            got: ins.len(),
        });
    }
    let body_in = avals_of(b, &b.inputs);
    let carry_in = &body_in[p.n_consts..p.n_consts + p.n_carry];
    for (i, (a, want)) in ins.iter().zip(&body_in).enumerate() {
        let expect = if i < p.n_consts + p.n_carry {
            want.clone()
        } else {
            let mut s = vec![p.length];
            s.extend_from_slice(&want.shape);
            Aval::new(s, want.dtype)
        };
        if **a != expect {
            return Err(Error::BadShapeArg {
                op: "scan",
                shape: a.shape.clone(),
                detail: format!("operand {i} is {a} but the body expects {expect}"),
            });
        }
    }
    let body_out = avals_of(b, &b.outputs);
    let carry_out = &body_out[..p.n_carry];
    if carry_out != carry_in {
        return Err(Error::CarryMismatch {
            op: "scan",
            want: describe(carry_in),
            got: describe(carry_out),
        });
    }
    let mut outs = carry_in.to_vec();
    for y in &body_out[p.n_carry..] {
        let mut s = vec![p.length];
        s.extend_from_slice(&y.shape);
        outs.push(Aval::new(s, y.dtype));
    }
    Ok(outs)
}

/// The branch an index selects: JAX clamps out-of-range indices into `0..n`.
pub(crate) fn branch_of(index: &HostArray, n: usize) -> usize {
    let i = index.data.get_f64(0);
    if i.is_nan() || i <= 0.0 {
        0
    } else {
        (i as usize).min(n - 1)
    }
}

/// How a sub-program is evaluated on the host: the reference interpreter, or the `cpu` device's
/// executor (which shares these control-flow rules).
pub(crate) type EvalGraph<'a> = &'a dyn Fn(&Graph, &[HostArray]) -> Result<Vec<HostArray>>;

/// CPU reference of `cond`: only the selected branch runs.
pub(crate) fn eval_cond(branches: &[Arc<Graph>], ins: &[&HostArray]) -> Result<Vec<HostArray>> {
    eval_cond_with(branches, ins, &crate::reference::eval_graph)
}

/// `cond` with the selected branch evaluated by `eval`.
pub(crate) fn eval_cond_with(
    branches: &[Arc<Graph>],
    ins: &[&HostArray],
    eval: EvalGraph<'_>,
) -> Result<Vec<HostArray>> {
    let j = branch_of(ins[0], branches.len());
    let ops: Vec<HostArray> = ins[1..].iter().map(|h| (*h).clone()).collect();
    eval(&branches[j], &ops)
}

/// Row `i` of `x` along axis 0.
fn row(x: &HostArray, i: usize) -> HostArray {
    let shape = x.shape[1..].to_vec();
    let n: usize = shape.iter().product();
    let w = x.data.dtype().size_bytes();
    let bytes = x.data.to_bytes();
    HostArray {
        data: HostData::from_bytes(x.data.dtype(), &bytes[i * n * w..(i + 1) * n * w]),
        shape,
    }
}

/// CPU reference of `scan`: the body evaluated once per iteration.
pub(crate) fn eval_scan(p: &ScanParams, ins: &[&HostArray]) -> Result<Vec<HostArray>> {
    eval_scan_with(p, ins, &crate::reference::eval_graph)
}

/// `scan` with the body evaluated by `eval`.
pub(crate) fn eval_scan_with(
    p: &ScanParams,
    ins: &[&HostArray],
    eval: EvalGraph<'_>,
) -> Result<Vec<HostArray>> {
    let (nc, nk) = (p.n_consts, p.n_carry);
    let consts: Vec<HostArray> = ins[..nc].iter().map(|h| (*h).clone()).collect();
    let mut carry: Vec<HostArray> = ins[nc..nc + nk].iter().map(|h| (*h).clone()).collect();
    let xs = &ins[nc + nk..];
    let body_out = avals_of(&p.body, &p.body.outputs);
    let mut ys: Vec<Vec<Vec<u8>>> = vec![vec![Vec::new(); p.length]; p.n_ys()];
    for k in 0..p.length {
        let i = if p.reverse { p.length - 1 - k } else { k };
        let mut args = consts.clone();
        args.extend(carry.iter().cloned());
        args.extend(xs.iter().map(|x| row(x, i)));
        let mut outs = eval(&p.body, &args)?;
        let y = outs.split_off(nk);
        carry = outs;
        for (j, y) in y.into_iter().enumerate() {
            ys[j][i] = y.data.to_bytes();
        }
    }
    let mut result = carry;
    for (j, parts) in ys.into_iter().enumerate() {
        let a = &body_out[nk + j];
        let mut shape = vec![p.length];
        shape.extend_from_slice(&a.shape);
        result.push(HostArray {
            data: HostData::from_bytes(a.dtype, &parts.concat()),
            shape,
        });
    }
    Ok(result)
}

/// Shape rule of `while`: see [`WhileParams`]. `cond` gives one bool scalar; `body` keeps the
/// carry's shapes and dtypes.
pub(crate) fn infer_while(p: &WhileParams, ins: &[&Aval]) -> Result<Vec<Aval>> {
    let (ncc, nbc, nk) = (p.n_cond_consts, p.n_body_consts, p.n_carry());
    let internal = |detail: String| Error::BadShapeArg {
        op: "while_loop",
        shape: vec![],
        detail,
    };
    if p.cond.inputs.len() != ncc + nk || p.body.inputs.len() != nbc + nk {
        return Err(internal(format!(
            "cond takes {} inputs and body {}, not {ncc} + {nk} and {nbc} + {nk} (internal)",
            p.cond.inputs.len(),
            p.body.inputs.len()
        )));
    }
    if ins.len() != p.n_operands() {
        return Err(Error::Arity {
            what: "while_loop operands".into(),
            expected: p.n_operands(),
            got: ins.len(),
        });
    }
    let cond_out = avals_of(&p.cond, &p.cond.outputs);
    if cond_out.len() != 1 || !cond_out[0].shape.is_empty() || cond_out[0].dtype != DType::Bool {
        return Err(Error::BadShapeArg {
            op: "while_loop",
            shape: cond_out
                .first()
                .map(|a| a.shape.clone())
                .unwrap_or_default(),
            detail: format!(
                "cond_fun must return one bool scalar, but it returns {}: compare (`x.lt(..)`) and reduce (`any`/`all`) first",
                describe(&cond_out)
            ),
        });
    }
    let carry_in = avals_of(&p.body, &p.body.inputs[nbc..]);
    let carry_out = avals_of(&p.body, &p.body.outputs);
    if carry_in != carry_out {
        return Err(Error::CarryMismatch {
            op: "while_loop",
            want: describe(&carry_in),
            got: describe(&carry_out),
        });
    }
    let mut want = avals_of(&p.cond, &p.cond.inputs[..ncc]);
    want.extend(avals_of(&p.body, &p.body.inputs[..nbc]));
    want.extend(carry_in.iter().cloned());
    for (i, (a, w)) in ins.iter().zip(&want).enumerate() {
        if **a != *w {
            return Err(Error::BadShapeArg {
                op: "while_loop",
                shape: a.shape.clone(),
                detail: format!("operand {i} is {a} but the loop expects {w}"),
            });
        }
    }
    if avals_of(&p.cond, &p.cond.inputs[ncc..]) != carry_in {
        return Err(internal(
            "cond and body take different carries (internal)".into(),
        ));
    }
    Ok(carry_in)
}

/// CPU reference of `while`: `cond`, then `body` while it holds.
pub(crate) fn eval_while(p: &WhileParams, ins: &[&HostArray]) -> Result<Vec<HostArray>> {
    eval_while_with(p, ins, &crate::reference::eval_graph)
}

/// `while` with `cond` and `body` evaluated by `eval`.
pub(crate) fn eval_while_with(
    p: &WhileParams,
    ins: &[&HostArray],
    eval: EvalGraph<'_>,
) -> Result<Vec<HostArray>> {
    let (ncc, nbc) = (p.n_cond_consts, p.n_body_consts);
    let cond_consts: Vec<HostArray> = ins[..ncc].iter().map(|h| (*h).clone()).collect();
    let body_consts: Vec<HostArray> = ins[ncc..ncc + nbc].iter().map(|h| (*h).clone()).collect();
    let mut carry: Vec<HostArray> = ins[ncc + nbc..].iter().map(|h| (*h).clone()).collect();
    loop {
        let mut args = cond_consts.clone();
        args.extend(carry.iter().cloned());
        let pred = eval(&p.cond, &args)?;
        if pred[0].data.get_f64(0) == 0.0 {
            return Ok(carry);
        }
        let mut args = body_consts.clone();
        args.extend(carry);
        carry = eval(&p.body, &args)?;
    }
}

// ---- lowering ---------------------------------------------------------------------------------

/// Replace every `cond` by all of its branches and a selection of their results (recursively,
/// branches included). Devices then run straight-line code; see the module comment.
pub(crate) fn inline_conds(g: &Graph) -> Graph {
    if !g
        .eqns
        .iter()
        .any(|e| matches!(e.prim, Prim::Control(ControlOp::Cond { .. })))
    {
        return g.clone();
    }
    let mut out = g.without_eqns();
    for e in &g.eqns {
        let Prim::Control(ControlOp::Cond { branches }) = &e.prim else {
            out.eqns.push(e.clone());
            continue;
        };
        let index = e.inputs[0];
        let ops = &e.inputs[1..];
        let results: Vec<Vec<Var>> = branches
            .iter()
            .map(|b| splice(&mut out, &inline_conds(b), ops))
            .collect();
        let outs: Vec<Var> = e.outs().collect();
        let n = branches.len();
        let idx_aval = g.aval(index).clone();
        // Branch j is taken where `index == j` (clamped into 0..n, as in JAX).
        let picks: Vec<Option<Var>> = (0..n)
            .map(|j| {
                if n == 1 || j == n - 1 {
                    return None;
                }
                Some(match idx_aval.dtype {
                    DType::Bool => {
                        // Two branches: [false, true]; pick branch 0 where the predicate is false.
                        push(
                            &mut out,
                            Prim::Elementwise(ElementwiseOp::Unary(crate::ops::UnaryOp::Not)),
                            vec![index],
                            &idx_aval.shape,
                            DType::Bool,
                        )
                    }
                    dt => {
                        let jv = push(
                            &mut out,
                            Prim::Elementwise(ElementwiseOp::Full {
                                value: crate::dtype::Scalar::I32(j as i32).cast(dt),
                                shape: vec![],
                            }),
                            vec![],
                            &[],
                            dt,
                        );
                        // Clamped: the first branch also takes indices below 0.
                        let op = if j == 0 { BinaryOp::Le } else { BinaryOp::Eq };
                        push(
                            &mut out,
                            Prim::Elementwise(ElementwiseOp::Binary(op)),
                            vec![index, jv],
                            &[],
                            DType::Bool,
                        )
                    }
                })
            })
            .collect();
        for (k, &o) in outs.iter().enumerate() {
            let aval = g.aval(o).clone();
            let mut acc = results[n - 1][k];
            for j in (0..n - 1).rev() {
                let pick = picks[j].expect("all but the last branch have a pick");
                let p = if aval.shape.is_empty() {
                    pick
                } else {
                    push(
                        &mut out,
                        Prim::Layout(LayoutOp::BroadcastInDim {
                            shape: aval.shape.clone(),
                            dims: vec![],
                        }),
                        vec![pick],
                        &aval.shape,
                        DType::Bool,
                    )
                };
                let dst = if j == 0 { o } else { out.new_var(aval.clone()) };
                out.eqns.push(Eqn::new(
                    Prim::Elementwise(ElementwiseOp::Select),
                    vec![p, results[j][k], acc],
                    dst,
                ));
                acc = dst;
            }
            if n == 1 {
                // One branch: its result is the output.
                out.eqns.push(Eqn::new(
                    Prim::Layout(LayoutOp::Reshape {
                        shape: aval.shape.clone(),
                    }),
                    vec![acc],
                    o,
                ));
            }
        }
    }
    out
}

/// Append `prim(inputs)` with result `shape`/`dt` to `g`.
fn push(g: &mut Graph, prim: Prim, inputs: Vec<Var>, shape: &[usize], dt: DType) -> Var {
    let v = g.new_var(Aval::new(shape.to_vec(), dt));
    g.eqns.push(Eqn::new(prim, inputs, v));
    v
}

/// Copy `sub`'s equations into `g` with `sub`'s inputs bound to `args`; returns its outputs' vars.
pub(crate) fn splice(g: &mut Graph, sub: &Graph, args: &[Var]) -> Vec<Var> {
    let mut map: Vec<Option<Var>> = vec![None; sub.avals.len()];
    for (v, a) in sub.inputs.iter().zip(args) {
        map[v.idx()] = Some(*a);
    }
    for (v, h) in &sub.consts {
        let nv = g.new_var(sub.aval(*v).clone());
        g.consts.push((nv, h.clone()));
        map[v.idx()] = Some(nv);
    }
    for e in &sub.eqns {
        let inputs = e
            .inputs
            .iter()
            .map(|v| map[v.idx()].expect("sub-graph is topologically ordered"))
            .collect();
        let outs: Vec<Var> = e
            .outs()
            .map(|o| {
                let nv = g.new_var(sub.aval(o).clone());
                map[o.idx()] = Some(nv);
                nv
            })
            .collect();
        g.eqns.push(Eqn {
            prim: e.prim.clone(),
            inputs,
            out: outs[0],
            extra_outs: outs[1..].to_vec(),
        });
    }
    sub.outputs
        .iter()
        .map(|v| map[v.idx()].expect("outputs are defined"))
        .collect()
}

// ---- batching -----------------------------------------------------------------------------------

/// Batch `g` on operands like `ins` (avals as the batched operands have them, and whether each is
/// batched) in a throwaway trace, and report which outputs come out batched.
fn batched_outputs(g: &Graph, ins: &[(Aval, bool)], ctx: &BatchCtx<'_>) -> Result<Vec<bool>> {
    let flags = std::cell::RefCell::new(Vec::new());
    let in_flags: Vec<bool> = ins.iter().map(|(_, b)| *b).collect();
    let avals: Vec<crate::trace::TraceArg> = ins
        .iter()
        .map(|(a, _)| crate::trace::TraceArg::Abstract(a.clone()))
        .collect();
    crate::trace::trace_capturing(
        "batching",
        &|ts: &[Tensor]| {
            let ins: Vec<Batched> = ts.iter().cloned().zip(in_flags.iter().copied()).collect();
            match crate::transform::batching::batch_graph(g, ins, ctx) {
                Ok(outs) => {
                    *flags.borrow_mut() = outs.iter().map(|(_, b)| *b).collect();
                    outs.into_iter().map(|(t, _)| t).collect()
                }
                Err(e) => vec![Tensor::failed_here(e)],
            }
        },
        &avals,
    )?;
    Ok(flags.into_inner())
}

/// Batch `g` on `ins` and give the outputs flagged in `force` the batch axis.
fn batch_forced(g: &Graph, ins: Vec<Batched>, ctx: &BatchCtx<'_>, force: &[bool]) -> Vec<Tensor> {
    match crate::transform::batching::batch_graph(g, ins, ctx) {
        Ok(outs) => outs
            .iter()
            .zip(force)
            .map(|(o, &f)| {
                if f {
                    with_batch(o, ctx.size)
                } else {
                    o.0.clone()
                }
            })
            .collect(),
        Err(e) => vec![Tensor::failed_here(e)],
    }
}

/// Batching rule of `cond`.
pub(crate) fn batch_cond(
    branches: &[Arc<Graph>],
    ins: &[Batched],
    ctx: &BatchCtx<'_>,
) -> Result<Vec<Batched>> {
    let (index, ops) = (&ins[0], &ins[1..]);
    let n_out = branches[0].outputs.len();
    let op_tensors: Vec<Tensor> = ops.iter().map(|(t, _)| t.clone()).collect();
    let op_flags: Vec<bool> = ops.iter().map(|(_, b)| *b).collect();
    if !index.1 {
        // One branch for the whole batch: keep the cond, batch its branches alike.
        let mut force = vec![false; n_out];
        let probe: Vec<(Aval, bool)> = ops.iter().map(|(t, b)| (aval_of(t), *b)).collect();
        for b in branches {
            for (f, o) in force.iter_mut().zip(batched_outputs(b, &probe, ctx)?) {
                *f |= o;
            }
        }
        let fns: Vec<BoxedBranch<'_>> = branches
            .iter()
            .map(|b| {
                let (force, op_flags) = (&force, &op_flags);
                Box::new(move |ts: &[Tensor]| {
                    let ins: Vec<Batched> =
                        ts.iter().cloned().zip(op_flags.iter().copied()).collect();
                    batch_forced(b, ins, ctx, force)
                }) as BoxedBranch<'_>
            })
            .collect();
        let refs: Vec<Branch<'_>> = fns.iter().map(|f| &**f as Branch<'_>).collect();
        let outs = switch_impl("cond", &index.0, &refs, &op_tensors)?;
        drop(refs);
        drop(fns);
        return Ok(outs.into_iter().zip(force).collect());
    }
    // A different branch per example: compute every branch for the whole batch, then pick.
    let idx = &index.0;
    let n = branches.len();
    let taken: Vec<Option<Tensor>> = (0..n).map(|j| taken_by(idx, n, j)).collect();
    // Branch j sees each float operand as `select(taken_j, x, stop_gradient(x))` (JAX's rule,
    // its issue #1052): the same values, but no cotangent flows back from the examples that do
    // not take branch j. The output select hands such an example a zero cotangent, which the
    // branch's VJP may turn into NaN (0 * inf: log at 0, sqrt below 0); it now stops at the
    // operand's select instead of reaching the operand. An unbatched float operand gets the batch
    // axis first (its cotangent sums the examples, each from its own branch); integer and bool
    // operands carry no gradient and go in as they are.
    let all = vec![true; n_out];
    let results: Vec<Vec<Tensor>> = branches
        .iter()
        .zip(&taken)
        .map(|(b, pick)| {
            let ins: Vec<Batched> = match pick {
                None => ops.to_vec(),
                Some(pick) => ops
                    .iter()
                    .map(|o| {
                        if !differentiable(&o.0) {
                            return o.clone();
                        }
                        let x = with_batch(o, ctx.size);
                        let live = pick.broadcast_in_dim(x.shape(), &[0]);
                        let stopped = crate::ops::ad_util::stop_gradient(&x);
                        (crate::tensor::select(&live, &x, &stopped), true)
                    })
                    .collect(),
            };
            batch_forced(b, ins, ctx, &all)
        })
        .collect();
    if let Some(e) = results.iter().flatten().find_map(|t| t.error()) {
        return Err(e.clone());
    }
    let mut outs = Vec::with_capacity(n_out);
    #[allow(clippy::needless_range_loop)] // k indexes every branch's results
    for k in 0..n_out {
        let mut acc = results[n - 1][k].clone();
        for j in (0..n - 1).rev() {
            let pick = match idx.dtype() {
                DType::Bool => idx.not(),
                _ => taken[j].clone().expect("two or more branches"),
            };
            let shape = acc.shape().to_vec();
            let pick = pick.broadcast_in_dim(&shape, &[0]);
            acc = crate::tensor::select(&pick, &results[j][k], &acc);
        }
        outs.push((acc, true));
    }
    Ok(outs)
}

/// Where branch `j` of `n` is taken, per example of a batched index `idx` (`None`: everywhere,
/// the only branch). Integer indices are clamped into `0..n` as JAX does; a bool index takes
/// branch 0 where false and the last branch where true, as the output select of `batch_cond`
/// and `inline_conds` pick.
fn taken_by(idx: &Tensor, n: usize, j: usize) -> Option<Tensor> {
    if n == 1 {
        return None;
    }
    let at = |i: usize| Tensor::full(crate::dtype::Scalar::I32(i as i32).cast(idx.dtype()), &[]);
    Some(match idx.dtype() {
        DType::Bool if j == 0 => idx.not(),
        DType::Bool if j == n - 1 => idx.clone(),
        DType::Bool => Tensor::full(false, idx.shape()),
        _ if j == 0 => idx.le(&at(0)),
        _ if j == n - 1 => idx.ge(&at(n - 1)),
        _ => idx.eq(&at(j)),
    })
}

/// Batching rule of `scan`.
pub(crate) fn batch_scan(
    p: &ScanParams,
    ins: &[Batched],
    ctx: &BatchCtx<'_>,
) -> Result<Vec<Batched>> {
    let (nc, nk) = (p.n_consts, p.n_carry);
    let consts = &ins[..nc];
    let init = &ins[nc..nc + nk];
    // The body sees one slice of each xs: a batched xs has its batch axis moved behind the scan
    // axis, so that slice i carries the batch axis in front.
    let xs: Vec<Tensor> = ins[nc + nk..]
        .iter()
        .map(|(t, b)| if *b { move_axis(t, 0, 1) } else { t.clone() })
        .collect();
    let x_flags: Vec<bool> = ins[nc + nk..].iter().map(|(_, b)| *b).collect();
    // Carry batching: a fixed point (a carry that the body makes batched is batched from the start).
    let mut carry_flags: Vec<bool> = init.iter().map(|(_, b)| *b).collect();
    let body_flags = loop {
        let mut probe: Vec<(Aval, bool)> = consts.iter().map(|(t, b)| (aval_of(t), *b)).collect();
        probe.extend(init.iter().zip(&carry_flags).map(|((c, b), &f)| {
            let mut a = aval_of(c);
            if f && !*b {
                a.shape.insert(0, ctx.size);
            }
            (a, f)
        }));
        probe.extend(xs.iter().zip(&x_flags).map(|(x, &f)| {
            let mut a = aval_of(x);
            a.shape.remove(0);
            (a, f)
        }));
        let out = batched_outputs(&p.body, &probe, ctx)?;
        let mut changed = false;
        for (f, &o) in carry_flags.iter_mut().zip(&out[..nk]) {
            if o && !*f {
                *f = true;
                changed = true;
            }
        }
        if !changed {
            break out;
        }
    };
    let mut force = carry_flags.clone();
    force.extend_from_slice(&body_flags[nk..]);
    let const_flags: Vec<bool> = consts.iter().map(|(_, b)| *b).collect();
    let const_tensors: Vec<Tensor> = consts.iter().map(|(t, _)| t.clone()).collect();
    let body = |carry: &[Tensor], x: &[Tensor]| -> (Vec<Tensor>, Vec<Tensor>) {
        let mut ins: Vec<Batched> = const_tensors
            .iter()
            .cloned()
            .zip(const_flags.iter().copied())
            .collect();
        ins.extend(carry.iter().cloned().zip(carry_flags.iter().copied()));
        ins.extend(x.iter().cloned().zip(x_flags.iter().copied()));
        let mut outs = batch_forced(&p.body, ins, ctx, &force);
        if outs.len() < nk {
            return (outs, Vec::new());
        }
        let ys = outs.split_off(nk);
        (outs, ys)
    };
    let init_t: Vec<Tensor> = init
        .iter()
        .zip(&carry_flags)
        .map(|(c, &f)| {
            if f {
                with_batch(c, ctx.size)
            } else {
                c.0.clone()
            }
        })
        .collect();
    let (carry, ys) = scan_impl("scan", &body, &init_t, &xs, Some(p.length), p.reverse)?;
    let mut result: Vec<Batched> = carry.into_iter().zip(carry_flags.iter().copied()).collect();
    // Stacked ys carry the batch axis behind the scan axis: move it in front.
    result.extend(ys.into_iter().zip(&body_flags[nk..]).map(|(y, &f)| {
        if f {
            (move_axis(&y, 1, 0), true)
        } else {
            (y, false)
        }
    }));
    Ok(result)
}

/// Batching rule of `while` (JAX's): a carry is batched where its start or the body makes it so
/// (a fixed point). With an unbatched predicate the loop stays one loop of batched bodies. With a
/// batched one (each example stops at its own iteration) every carry is batched, the loop runs
/// while any example's predicate holds, and an example whose predicate is false keeps its carry
/// (`select`), so each ends with the value its own loop would give.
pub(crate) fn batch_while(
    p: &WhileParams,
    ins: &[Batched],
    ctx: &BatchCtx<'_>,
) -> Result<Vec<Batched>> {
    let (ncc, nbc, nk) = (p.n_cond_consts, p.n_body_consts, p.n_carry());
    let cond_consts = &ins[..ncc];
    let body_consts = &ins[ncc..ncc + nbc];
    let init = &ins[ncc + nbc..];
    let mut carry_flags: Vec<bool> = init.iter().map(|(_, b)| *b).collect();
    let probe = |consts: &[Batched], flags: &[bool]| -> Vec<(Aval, bool)> {
        let mut v: Vec<(Aval, bool)> = consts.iter().map(|(t, b)| (aval_of(t), *b)).collect();
        v.extend(init.iter().zip(flags).map(|((c, b), &f)| {
            let mut a = aval_of(c);
            if f && !*b {
                a.shape.insert(0, ctx.size);
            }
            (a, f)
        }));
        v
    };
    let pred_batched = loop {
        let pred_batched = batched_outputs(&p.cond, &probe(cond_consts, &carry_flags), ctx)?[0];
        let out = batched_outputs(&p.body, &probe(body_consts, &carry_flags), ctx)?;
        let mut changed = false;
        for (f, &o) in carry_flags.iter_mut().zip(&out) {
            if (o || pred_batched) && !*f {
                *f = true;
                changed = true;
            }
        }
        if !changed {
            break pred_batched;
        }
    };
    let tensors = |xs: &[Batched]| -> Vec<Tensor> { xs.iter().map(|(t, _)| t.clone()).collect() };
    let flags = |xs: &[Batched]| -> Vec<bool> { xs.iter().map(|(_, b)| *b).collect() };
    let (cc_t, cc_f) = (tensors(cond_consts), flags(cond_consts));
    let (bc_t, bc_f) = (tensors(body_consts), flags(body_consts));
    let with_carry = |consts: &[Tensor], cflags: &[bool], carry: &[Tensor]| -> Vec<Batched> {
        let mut v: Vec<Batched> = consts.iter().cloned().zip(cflags.iter().copied()).collect();
        v.extend(carry.iter().cloned().zip(carry_flags.iter().copied()));
        v
    };
    // The batched predicate of every example (batch axis in front), or the one predicate.
    let pred_of = |carry: &[Tensor]| -> Tensor {
        batch_forced(&p.cond, with_carry(&cc_t, &cc_f, carry), ctx, &[false])
            .pop()
            .unwrap_or_else(|| Tensor::failed_here(while_arity_error()))
    };
    let cond = |carry: &[Tensor]| -> Tensor {
        let pred = pred_of(carry);
        if pred_batched {
            pred.max(0i64, false)
        } else {
            pred
        }
    };
    let body = |carry: &[Tensor]| -> Vec<Tensor> {
        let next = batch_forced(&p.body, with_carry(&bc_t, &bc_f, carry), ctx, &carry_flags);
        if !pred_batched || next.len() != carry.len() {
            return next;
        }
        let live = pred_of(carry);
        next.iter()
            .zip(carry)
            .map(|(n, c)| {
                let keep = live.broadcast_in_dim(n.shape(), &[0]);
                crate::tensor::select(&keep, n, c)
            })
            .collect()
    };
    let init_t: Vec<Tensor> = init
        .iter()
        .zip(&carry_flags)
        .map(|(c, &f)| {
            if f {
                with_batch(c, ctx.size)
            } else {
                c.0.clone()
            }
        })
        .collect();
    debug_assert_eq!(init_t.len(), nk);
    let outs = bind::while_impl("while_loop", &cond, &body, &init_t)?;
    Ok(outs.into_iter().zip(carry_flags.iter().copied()).collect())
}

fn while_arity_error() -> Error {
    Error::Arity {
        what: "while_loop cond_fun results".into(),
        expected: 1,
        got: 0,
    }
}

/// Why `grad` of a `while_loop` is refused (as JAX refuses it).
pub(crate) fn while_vjp_error() -> Error {
    Error::Unsupported {
        op: "while_loop",
        detail: "reverse-mode differentiation (grad, vjp, value_and_grad) through a while_loop: its number of \
                 iterations is data, so there is no fixed sequence of steps to run backwards (JAX refuses it too); \
                 use fori_loop or scan with a bound on the iterations, and `select` to keep the carry of the \
                 iterations past the stopping point"
            .into(),
    }
}

// ---- reverse mode -----------------------------------------------------------------------------

/// `ct` or zeros shaped like `like`.
fn ct_or_zeros(ct: &Option<Tensor>, like: &Tensor) -> Tensor {
    ct.clone()
        .unwrap_or_else(|| Tensor::zeros(like.shape(), like.dtype()))
}

fn differentiable(t: &Tensor) -> bool {
    t.dtype().is_float()
}

/// VJP rule of `cond`: a `cond` (same index) over the branches' VJPs.
pub(crate) fn vjp_cond(
    branches: &[Arc<Graph>],
    ins: &[Tensor],
    outs: &[Tensor],
    cts: &[Option<Tensor>],
) -> Result<Cotangents> {
    let ops = &ins[1..];
    let n_ops = ops.len();
    // Cotangents of the float outputs (zeros where none flows); other outputs have none.
    let float_out: Vec<bool> = outs.iter().map(differentiable).collect();
    let ct_args: Vec<Tensor> = outs
        .iter()
        .zip(cts)
        .filter(|(o, _)| differentiable(o))
        .map(|(o, c)| ct_or_zeros(c, o))
        .collect();
    let wanted: Vec<usize> = (0..n_ops).filter(|&i| differentiable(&ops[i])).collect();
    let fns: Vec<BoxedBranch<'_>> = branches
        .iter()
        .map(|b| {
            let (float_out, wanted) = (&float_out, &wanted);
            Box::new(move |ts: &[Tensor]| {
                let (primals, cts) = ts.split_at(n_ops);
                let mut it = cts.iter();
                let cts: Vec<Option<Tensor>> = float_out
                    .iter()
                    .map(|&f| if f { it.next().cloned() } else { None })
                    .collect();
                match crate::transform::ad::graph_vjp(b, primals, &cts) {
                    Ok(got) => wanted
                        .iter()
                        .map(|&i| ct_or_zeros(&got[i], &primals[i]))
                        .collect(),
                    Err(e) => vec![Tensor::failed_here(e)],
                }
            }) as BoxedBranch<'_>
        })
        .collect();
    let refs: Vec<Branch<'_>> = fns.iter().map(|f| &**f as Branch<'_>).collect();
    let mut args = ops.to_vec();
    args.extend(ct_args);
    let got = switch_impl("cond", &ins[0], &refs, &args)?;
    drop(refs);
    drop(fns);
    let mut result: Cotangents = vec![None; ins.len()];
    for (i, g) in wanted.into_iter().zip(got) {
        result[1 + i] = Some(g);
    }
    Ok(result)
}

/// VJP rule of `scan`: one more forward scan stacks the carry each iteration starts from; a scan in
/// the opposite direction then runs the body's VJP per iteration, carrying the carry's cotangent
/// and the sum of the constants' cotangents, and stacking the cotangents of `xs`.
pub(crate) fn vjp_scan(
    p: &ScanParams,
    ins: &[Tensor],
    outs: &[Tensor],
    cts: &[Option<Tensor>],
) -> Result<Cotangents> {
    let (nc, nk) = (p.n_consts, p.n_carry);
    let consts = &ins[..nc];
    let init = &ins[nc..nc + nk];
    let xs = &ins[nc + nk..];
    let body = &p.body;
    // Forward carries: ys of a scan that outputs the carry it receives.
    let fwd = |carry: &[Tensor], x: &[Tensor]| -> (Vec<Tensor>, Vec<Tensor>) {
        let mut args = consts.to_vec();
        args.extend_from_slice(carry);
        args.extend_from_slice(x);
        let outs = crate::transform::ad::graph_forward(body, &args);
        match outs {
            Ok(mut o) => {
                o.truncate(nk);
                (o, carry.to_vec())
            }
            Err(e) => (vec![Tensor::failed_here(e)], Vec::new()),
        }
    };
    let (_, carries) = scan_impl("scan", &fwd, init, xs, Some(p.length), p.reverse)?;

    let f_carry: Vec<usize> = (0..nk).filter(|&k| differentiable(&init[k])).collect();
    let f_const: Vec<usize> = (0..nc).filter(|&k| differentiable(&consts[k])).collect();
    let f_xs: Vec<usize> = (0..xs.len()).filter(|&k| differentiable(&xs[k])).collect();
    let ys_out = &outs[nk..];
    let f_ys: Vec<usize> = (0..ys_out.len())
        .filter(|&k| differentiable(&ys_out[k]))
        .collect();
    // Backward carry: carry cotangents, then accumulated constant cotangents.
    let mut init_b: Vec<Tensor> = f_carry
        .iter()
        .map(|&k| ct_or_zeros(&cts[k], &outs[k]))
        .collect();
    init_b.extend(
        f_const
            .iter()
            .map(|&k| Tensor::zeros(consts[k].shape(), consts[k].dtype())),
    );
    // Backward xs: forward carries, xs, ys cotangents.
    let mut xs_b: Vec<Tensor> = carries.clone();
    xs_b.extend_from_slice(xs);
    xs_b.extend(f_ys.iter().map(|&k| ct_or_zeros(&cts[nk + k], &ys_out[k])));
    let n_xs = xs.len();
    let bwd = |carry: &[Tensor], x: &[Tensor]| -> (Vec<Tensor>, Vec<Tensor>) {
        let (ct_carry, ct_acc) = carry.split_at(f_carry.len());
        let (c_i, rest) = x.split_at(nk);
        let (x_i, ct_y) = rest.split_at(n_xs);
        let mut primals = consts.to_vec();
        primals.extend_from_slice(c_i);
        primals.extend_from_slice(x_i);
        let mut out_cts: Vec<Option<Tensor>> = vec![None; body.outputs.len()];
        for (j, &k) in f_carry.iter().enumerate() {
            out_cts[k] = Some(ct_carry[j].clone());
        }
        for (j, &k) in f_ys.iter().enumerate() {
            out_cts[nk + k] = Some(ct_y[j].clone());
        }
        let got = match crate::transform::ad::graph_vjp(body, &primals, &out_cts) {
            Ok(g) => g,
            Err(e) => return (vec![Tensor::failed_here(e)], Vec::new()),
        };
        let mut new_carry: Vec<Tensor> = f_carry
            .iter()
            .map(|&k| ct_or_zeros(&got[nc + k], &primals[nc + k]))
            .collect();
        new_carry.extend(f_const.iter().zip(ct_acc).map(|(&k, acc)| match &got[k] {
            Some(g) => acc + g,
            None => acc.clone(),
        }));
        let ys = f_xs
            .iter()
            .map(|&k| ct_or_zeros(&got[nc + nk + k], &primals[nc + nk + k]))
            .collect();
        (new_carry, ys)
    };
    let (fin, ct_xs) = scan_impl("scan", &bwd, &init_b, &xs_b, Some(p.length), !p.reverse)?;
    let mut result: Cotangents = vec![None; ins.len()];
    for (j, &k) in f_carry.iter().enumerate() {
        result[nc + k] = Some(fin[j].clone());
    }
    for (j, &k) in f_const.iter().enumerate() {
        result[k] = Some(fin[f_carry.len() + j].clone());
    }
    for (j, &k) in f_xs.iter().enumerate() {
        result[nc + nk + k] = Some(ct_xs[j].clone());
    }
    Ok(result)
}
