//! Binding the control primitives: trace a `cond`'s branches or a `scan`'s body into
//! sub-programs, check them, and apply the primitive. Machinery: the user-facing functions in
//! [`crate::transform::control`] and the batching and VJP rules of `cond` and `scan` (which
//! re-emit a control primitive) call it.

use crate::ops::ControlOp;
use std::cell::Cell;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ops::Prim;
use crate::ops::control::{ScanParams, WhileParams, describe};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Graph};
use crate::trace::{TraceArg, trace_capturing};
/// A branch of [`switch`](crate::switch): operands in, outputs out.
pub type Branch<'a> = &'a dyn Fn(&[Tensor]) -> Vec<Tensor>;

/// A scan body as the internal builder takes it: `(carry, x) -> (carry, y)`.
pub(crate) type Body<'a> = &'a dyn Fn(&[Tensor], &[Tensor]) -> (Vec<Tensor>, Vec<Tensor>);

pub(crate) fn aval(t: &Tensor) -> Aval {
    Aval::new(t.shape().to_vec(), t.dtype())
}

/// Trace every branch on the operands' shapes, check that they agree, and apply the `cond`
/// primitive to `[index, operands..., captured values...]`.
pub(crate) fn switch_impl(
    op: &'static str,
    index: &Tensor,
    branches: &[Branch<'_>],
    operands: &[Tensor],
) -> Result<Vec<Tensor>> {
    if let Some(e) = std::iter::once(index)
        .chain(operands)
        .find_map(|t| t.error())
    {
        return Err(e.clone());
    }
    crate::ops::control::check_index(op, &aval(index))?;
    if branches.is_empty() {
        return Err(Error::BadShapeArg {
            op,
            shape: vec![],
            detail: "no branches: give at least one".into(),
        });
    }
    let args: Vec<TraceArg> = operands
        .iter()
        .map(|t| TraceArg::Abstract(aval(t)))
        .collect();
    let mut traced: Vec<(Graph, Vec<Tensor>)> = Vec::with_capacity(branches.len());
    for (j, b) in branches.iter().enumerate() {
        let (g, caps) = trace_capturing(&format!("{op} branch {j}"), b, &args)?;
        traced.push((g, caps));
    }
    // Outputs must agree before anything is staged.
    let outs_of =
        |g: &Graph| -> Vec<Aval> { g.outputs.iter().map(|v| g.aval(*v).clone()).collect() };
    let want = outs_of(&traced[0].0);
    for (j, (g, _)) in traced.iter().enumerate().skip(1) {
        let got = outs_of(g);
        if got != want {
            return Err(Error::BranchMismatch {
                op,
                branch: j,
                branch_name: crate::ops::control::branch_name(op, traced.len(), j),
                reference: crate::ops::control::branch_name(op, traced.len(), 0),
                want: describe(&want),
                got: describe(&got),
            });
        }
    }
    if want.is_empty() {
        // Nothing to compute (a branch that only prints has nothing to hand its print to).
        return Ok(Vec::new());
    }
    // Every branch takes the operands, then the captured values of all branches in branch order
    // (each reads only its own; the others are unused inputs).
    let n_ops = operands.len();
    let cap_avals: Vec<Vec<Aval>> = traced
        .iter()
        .map(|(_, caps)| caps.iter().map(aval).collect())
        .collect();
    let mut all_caps: Vec<Tensor> = Vec::new();
    let mut graphs = Vec::with_capacity(traced.len());
    for (j, (mut g, caps)) in traced.into_iter().enumerate() {
        let own = g.inputs.split_off(n_ops);
        for (i, avals) in cap_avals.iter().enumerate() {
            if i == j {
                g.inputs.extend_from_slice(&own);
            } else {
                for a in avals {
                    let v = g.new_var(a.clone());
                    g.inputs.push(v);
                }
            }
        }
        all_caps.extend(caps);
        graphs.push(g);
    }
    let prim = Prim::Control(ControlOp::Cond {
        branches: graphs.into_iter().map(Arc::new).collect(),
    });
    let mut ins: Vec<&Tensor> = vec![index];
    ins.extend(operands);
    ins.extend(all_caps.iter());
    let outs = Tensor::apply_multi(prim, &ins);
    if let Some(e) = outs.iter().find_map(|t| t.error()) {
        return Err(e.clone());
    }
    Ok(outs)
}

/// Trace `f(carry, x)` on one slice, check the carry, and apply the `scan` primitive to
/// `[captured values..., init..., xs...]`. Returns the final carry and the stacked outputs.
pub(crate) fn scan_impl(
    op: &'static str,
    f: Body<'_>,
    init: &[Tensor],
    xs: &[Tensor],
    length: Option<usize>,
    reverse: bool,
) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
    if let Some(e) = init.iter().chain(xs).find_map(|t| t.error()) {
        return Err(e.clone());
    }
    // The number of iterations: every xs has it as its leading size.
    let mut len = length;
    for (i, x) in xs.iter().enumerate() {
        let Some(&n) = x.shape().first() else {
            return Err(Error::BadShapeArg {
                op,
                shape: x.shape().to_vec(),
                detail: format!(
                    "xs[{i}] is a scalar: every xs is sliced along its leading axis, so it needs rank 1 or more"
                ),
            });
        };
        match len {
            Some(l) if l != n => {
                let what = if length.is_some() {
                    format!("length is {l}")
                } else {
                    format!("xs[0] has leading size {l}")
                };
                return Err(Error::BadShapeArg {
                    op,
                    shape: x.shape().to_vec(),
                    detail: format!(
                        "xs[{i}] has leading size {n} but {what}: every xs must have the loop length as its leading size"
                    ),
                });
            }
            _ => len = Some(n),
        }
    }
    let Some(length) = len else {
        return Err(Error::BadShapeArg {
            op,
            shape: vec![],
            detail: "no xs and no length: give the number of iterations with ScanOptions { length: Some(n), .. }".into(),
        });
    };
    let nk = init.len();
    let carry_avals: Vec<Aval> = init.iter().map(aval).collect();
    let mut args: Vec<TraceArg> = carry_avals
        .iter()
        .cloned()
        .map(TraceArg::Abstract)
        .collect();
    args.extend(xs.iter().map(|x| {
        let mut a = aval(x);
        a.shape.remove(0);
        TraceArg::Abstract(a)
    }));
    // The body as one function of carry ++ x, returning carry ++ y; remember how many it returned
    // as carry.
    let returned = Cell::new(0usize);
    let flat = |ts: &[Tensor]| -> Vec<Tensor> {
        let (c, x) = ts.split_at(nk);
        let (c2, y) = f(c, x);
        returned.set(c2.len());
        c2.into_iter().chain(y).collect()
    };
    let (mut g, caps) = trace_capturing(op, &flat, &args)?;
    let outs: Vec<Aval> = g.outputs.iter().map(|v| g.aval(*v).clone()).collect();
    let got_carry = &outs[..returned.get().min(outs.len())];
    if returned.get() != nk || got_carry != carry_avals.as_slice() {
        return Err(Error::CarryMismatch {
            op,
            want: describe(&carry_avals),
            got: describe(got_carry),
        });
    }
    let n_ys = outs.len() - nk;
    if outs.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    // Body inputs in the primitive's order: captured values first (constants of the loop).
    let own = g.inputs.split_off(nk + xs.len());
    let mut inputs = own;
    inputs.append(&mut g.inputs);
    g.inputs = inputs;
    let prim = Prim::Control(ControlOp::Scan(ScanParams {
        body: Arc::new(g),
        length,
        reverse,
        n_consts: caps.len(),
        n_carry: nk,
    }));
    let mut ins: Vec<&Tensor> = caps.iter().collect();
    ins.extend(init);
    ins.extend(xs);
    let mut res = Tensor::apply_multi(prim, &ins);
    if let Some(e) = res.iter().find_map(|t| t.error()) {
        return Err(e.clone());
    }
    let ys = res.split_off(nk);
    debug_assert_eq!(ys.len(), n_ys);
    Ok((res, ys))
}

/// A `while_loop` predicate as the internal builder takes it: carry in, bool scalar out.
pub(crate) type Cond<'a> = &'a dyn Fn(&[Tensor]) -> Tensor;
/// A `while_loop` body: carry in, next carry out.
pub(crate) type Step<'a> = &'a dyn Fn(&[Tensor]) -> Vec<Tensor>;

/// Trace `cond(carry)` and `body(carry)` on the carry's shapes, check them, and apply the `while`
/// primitive to `[cond's captured values..., body's captured values..., init...]`. Returns the
/// final carry.
pub(crate) fn while_impl(
    op: &'static str,
    cond: Cond<'_>,
    body: Step<'_>,
    init: &[Tensor],
) -> Result<Vec<Tensor>> {
    if let Some(e) = init.iter().find_map(|t| t.error()) {
        return Err(e.clone());
    }
    let nk = init.len();
    let carry_avals: Vec<Aval> = init.iter().map(aval).collect();
    let args: Vec<TraceArg> = carry_avals
        .iter()
        .cloned()
        .map(TraceArg::Abstract)
        .collect();
    let cond_flat = |ts: &[Tensor]| vec![cond(ts)];
    let (mut cg, cond_caps) = trace_capturing(&format!("{op} cond_fun"), &cond_flat, &args)?;
    let pred: Vec<Aval> = cg.outputs.iter().map(|v| cg.aval(*v).clone()).collect();
    if !pred[0].shape.is_empty() {
        return Err(Error::BadShapeArg {
            op,
            shape: pred[0].shape.clone(),
            detail: format!(
                "cond_fun must return a bool scalar, but it returns {}: reduce over the elements first \
                 (`jnp::any(&p, Axes::All, false)` or `jnp::all`)",
                pred[0]
            ),
        });
    }
    if pred[0].dtype != crate::DType::Bool {
        return Err(Error::BadDType {
            op,
            dtype: pred[0].dtype,
            hint: "cond_fun must return a bool scalar (as in JAX): compare first, e.g. `x.ne(&zero)`",
            shapes: vec![vec![]],
        });
    }
    let (mut bg, body_caps) = trace_capturing(&format!("{op} body_fun"), &body, &args)?;
    let outs: Vec<Aval> = bg.outputs.iter().map(|v| bg.aval(*v).clone()).collect();
    if outs != carry_avals {
        return Err(Error::CarryMismatch {
            op,
            want: describe(&carry_avals),
            got: describe(&outs),
        });
    }
    if !cg.effects.is_empty() || !bg.effects.is_empty() {
        return Err(Error::Unsupported {
            op,
            detail: "debug_print inside a while_loop's cond_fun or body_fun: not supported yet (prints are \
                     collected per iteration of a loop whose count is known when it is compiled); print the \
                     loop's results, or use fori_loop / scan"
                .into(),
        });
    }
    if nk == 0 {
        // No carry, no results: nothing to compute (JAX would spin forever on a true predicate).
        return Ok(Vec::new());
    }
    // Captured values first (constants of the loop), then the carry.
    for g in [&mut cg, &mut bg] {
        let mut inputs = g.inputs.split_off(nk);
        inputs.append(&mut g.inputs);
        g.inputs = inputs;
    }
    let prim = Prim::Control(ControlOp::While(WhileParams {
        cond: Arc::new(cg),
        body: Arc::new(bg),
        n_cond_consts: cond_caps.len(),
        n_body_consts: body_caps.len(),
    }));
    let mut ins: Vec<&Tensor> = cond_caps.iter().collect();
    ins.extend(body_caps.iter());
    ins.extend(init);
    let res = Tensor::apply_multi(prim, &ins);
    if let Some(e) = res.iter().find_map(|t| t.error()) {
        return Err(e.clone());
    }
    Ok(res)
}
