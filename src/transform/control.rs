//! Structured control flow on traced values: [`cond`], [`switch`], [`scan`], [`fori_loop`] (JAX's
//! `lax.cond`, `lax.switch`, `lax.scan`, `lax.fori_loop`).
//!
//! A host `if` cannot look at a traced value (its data does not exist while tracing); these
//! functions stage the choice or the loop into the program instead. Each branch or loop body is
//! traced once into a sub-program; values of the enclosing function that it uses are passed in
//! automatically. They work eagerly, inside `jit`, `pmap`, `vmap` and `grad`, and nest. The
//! primitives and all their rules live in `crate::ops::control`.
//!
//! On devices, a `cond` computes every branch and selects the result (no device ever waits for the
//! host to read a predicate, and all devices of a parallel program run the same kernels); the CPU
//! reference runs only the chosen branch. Branches must therefore be free of side effects — they
//! are, since brigade programs are pure. A `scan` runs its body's kernels once per iteration in
//! one submission, moving the carry with buffer copies; under `pmap`, a scan whose body holds
//! collectives is driven from the host, each iteration a parallel run of the body.

use crate::ops::ControlOp;
use std::cell::Cell;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ops::Prim;
use crate::ops::control::{ScanParams, describe};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Graph};
use crate::trace::{TraceArg, trace_capturing};

/// A branch of [`switch`]: operands in, outputs out.
pub type Branch<'a> = &'a dyn Fn(&[Tensor]) -> Vec<Tensor>;

/// A scan body as the internal builder takes it: `(carry, x) -> (carry, y)`.
pub(crate) type Body<'a> = &'a dyn Fn(&[Tensor], &[Tensor]) -> (Vec<Tensor>, Vec<Tensor>);

fn aval(t: &Tensor) -> Aval {
    Aval::new(t.shape().to_vec(), t.dtype())
}

/// `n` failed tensors carrying `e` (at least one), failing the enclosing trace.
fn failed(e: Error, n: usize) -> Vec<Tensor> {
    let t = Tensor::failed_here(e);
    vec![t; n.max(1)]
}

/// `on_true(operands)` where the scalar bool `pred` is true, else `on_false(operands)` (JAX's
/// `lax.cond`). Both branches take the same operands and must return outputs of the same shapes
/// and dtypes ([`Error::BranchMismatch`] otherwise). They may use any value of the enclosing
/// function, not only the operands.
///
/// ```
/// use brigade::{cond, jit, Array, Tensor};
/// // |x| sums to more than 1: halve it, else double it, with the choice made on the device.
/// let f = jit(|a: &[Tensor]| {
///     let big = a[0].abs().sum_all().gt(&Tensor::scalar(1.0f32));
///     cond(&big, |x| vec![&x[0] * 0.5], |x| vec![&x[0] * 2.0], &a[..1])
/// });
/// let y = f.call(&[Array::from_vec(vec![0.25f32, -0.5], &[2])?])?;
/// assert_eq!(y[0].to_vec::<f32>()?, vec![0.5, -1.0]);
/// let y = f.call(&[Array::from_vec(vec![2.0f32, -4.0], &[2])?])?;
/// assert_eq!(y[0].to_vec::<f32>()?, vec![1.0, -2.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn cond<T, F>(pred: &Tensor, on_true: T, on_false: F, operands: &[Tensor]) -> Vec<Tensor>
where
    T: Fn(&[Tensor]) -> Vec<Tensor>,
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    if let Some(e) = pred.error() {
        return failed(e.clone(), 1);
    }
    if pred.dtype() != crate::DType::Bool && pred.shape().is_empty() {
        let e = Error::BadDType {
            op: "cond",
            dtype: pred.dtype(),
            hint: "the predicate of cond must be bool: compare first (e.g. `x.gt(&Tensor::scalar(0.0f32))`), or use `switch` with an integer index",
            shapes: vec![pred.shape().to_vec()],
        };
        return failed(e, 1);
    }
    // Branch 0 is taken for false, branch 1 for true (lax.cond's order).
    let branches: [Branch<'_>; 2] = [&on_false, &on_true];
    match switch_impl("cond", pred, &branches, operands) {
        Ok(v) => v,
        Err(e) => failed(e, 1),
    }
}

/// `branches[index](operands)` for a scalar integer `index`, clamped into `0..branches.len()` (JAX's
/// `lax.switch`). Every branch must return outputs of the same shapes and dtypes.
///
/// ```
/// use brigade::{switch, Tensor};
/// let x = Tensor::from_vec(vec![3.0f32], &[1]);
/// let neg = |a: &[Tensor]| vec![a[0].neg()];
/// let sq = |a: &[Tensor]| vec![a[0].square()];
/// let y = switch(&Tensor::scalar(1i32), &[&neg, &sq], &[x]);
/// assert_eq!(y[0].to_vec::<f32>()?, vec![9.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn switch(index: &Tensor, branches: &[Branch<'_>], operands: &[Tensor]) -> Vec<Tensor> {
    match switch_impl("switch", index, branches, operands) {
        Ok(v) => v,
        Err(e) => failed(e, 1),
    }
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

/// Options of [`scan_with`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ScanOptions {
    /// Number of iterations: required when there are no `xs`, checked against them otherwise.
    pub length: Option<usize>,
    /// Iterate from the last slice of `xs` to the first (`ys` stay in slice order).
    pub reverse: bool,
}

/// Loop `f` over the leading axis of `xs`, threading a carry (JAX's `lax.scan`):
/// `f(carry, x_i) -> (carry, y_i)`. Returns the final carry and the `y_i` stacked along a new
/// leading axis. The carry must keep its shapes and dtypes ([`Error::CarryMismatch`] otherwise).
///
/// ```
/// use brigade::{scan, Tensor};
/// // Running sum: carry s, y_i = s + x_i.
/// let xs = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4]);
/// let (carry, ys) = scan(
///     |c: &[Tensor], x: &[Tensor]| {
///         let s = &c[0] + &x[0];
///         (vec![s.clone()], vec![s])
///     },
///     &[Tensor::scalar(0.0f32)],
///     &[xs],
/// );
/// assert_eq!(carry[0].to_vec::<f32>()?, vec![10.0]);
/// assert_eq!(ys[0].to_vec::<f32>()?, vec![1.0, 3.0, 6.0, 10.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn scan<F>(f: F, init: &[Tensor], xs: &[Tensor]) -> (Vec<Tensor>, Vec<Tensor>)
where
    F: Fn(&[Tensor], &[Tensor]) -> (Vec<Tensor>, Vec<Tensor>),
{
    scan_with(f, init, xs, ScanOptions::default())
}

/// [`scan`] with a `length` (needed when there are no `xs`) or in `reverse`.
pub fn scan_with<F>(
    f: F,
    init: &[Tensor],
    xs: &[Tensor],
    opts: ScanOptions,
) -> (Vec<Tensor>, Vec<Tensor>)
where
    F: Fn(&[Tensor], &[Tensor]) -> (Vec<Tensor>, Vec<Tensor>),
{
    match scan_impl("scan", &f, init, xs, opts.length, opts.reverse) {
        Ok(v) => v,
        Err(e) => (failed(e.clone(), init.len()), failed(e, 1)),
    }
}

/// `body(i, vals)` for `i` in `lower..upper`, threading `vals` (JAX's `lax.fori_loop`); `i` is an
/// i32 scalar. Returns the final `vals`. Runs as a [`scan`] with the counter in the carry.
///
/// ```
/// use brigade::{fori_loop, Tensor};
/// // x <- 2x + i for i in 0..4, starting at 1: 1 -> 2 -> 5 -> 12 -> 27.
/// let out = fori_loop(0, 4, |i, v| vec![&v[0] * 2.0 + i.cast(brigade::DType::F32)], &[Tensor::scalar(1.0f32)]);
/// assert_eq!(out[0].to_vec::<f32>()?, vec![27.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn fori_loop<F>(lower: i32, upper: i32, body: F, init: &[Tensor]) -> Vec<Tensor>
where
    F: Fn(&Tensor, &[Tensor]) -> Vec<Tensor>,
{
    let length = (i64::from(upper) - i64::from(lower)).max(0) as usize;
    // A body that never reads the counter does not carry it (one kernel less per iteration).
    let uses_counter = match counter_used(&body, init) {
        Ok(u) => u,
        Err(e) => return failed(e, init.len()),
    };
    let mut carry = Vec::with_capacity(init.len() + 1);
    if uses_counter {
        carry.push(Tensor::scalar(lower));
    }
    carry.extend_from_slice(init);
    let skip = usize::from(uses_counter);
    let step = |c: &[Tensor], _: &[Tensor]| {
        let mut next = Vec::with_capacity(c.len());
        let vals = if uses_counter {
            let i = &c[0];
            next.push(i + &Tensor::scalar(1i32));
            body(i, &c[1..])
        } else {
            body(&Tensor::scalar(lower), c)
        };
        next.extend(vals);
        (next, Vec::new())
    };
    match scan_impl("fori_loop", &step, &carry, &[], Some(length), false) {
        Ok((mut c, _)) => c.split_off(skip),
        Err(e) => failed(e, init.len()),
    }
}

/// Does `body` read its loop counter? (Traced once on abstract values to find out.)
fn counter_used<F>(body: &F, init: &[Tensor]) -> Result<bool>
where
    F: Fn(&Tensor, &[Tensor]) -> Vec<Tensor>,
{
    if let Some(e) = init.iter().find_map(|t| t.error()) {
        return Err(e.clone());
    }
    let mut args = vec![TraceArg::Abstract(Aval::new(vec![], crate::DType::I32))];
    args.extend(init.iter().map(|t| TraceArg::Abstract(aval(t))));
    let f = |ts: &[Tensor]| body(&ts[0], &ts[1..]);
    let (g, _) = trace_capturing("fori_loop", &f, &args)?;
    Ok(g.use_counts()[g.inputs[0].idx()] > 0)
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
