//! Structured control flow on traced values: [`cond`], [`switch`], [`scan`], [`fori_loop`],
//! [`while_loop`] (JAX's `lax.cond`, `lax.switch`, `lax.scan`, `lax.fori_loop`,
//! `lax.while_loop`).
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
//! collectives is driven from the host, each iteration a parallel run of the body. A
//! `while_loop`'s number of iterations is data: the device computes the predicate and the host
//! reads it back (4 bytes) before each iteration, as XLA does on GPUs.

use crate::dtype::DType;
use crate::error::{Error, Result};
pub use crate::ops::control::bind::Branch;
use crate::ops::control::bind::{aval, scan_impl, switch_impl, while_impl};
use crate::tensor::Tensor;
use crate::trace::graph::Aval;
use crate::trace::{TraceArg, trace_capturing};

/// `n` failed tensors carrying `e` (at least one), failing the enclosing trace.
fn failed(e: Error, n: usize) -> Vec<Tensor> {
    let t = Tensor::failed_here(e);
    vec![t; n.max(1)]
}

/// `on_true(operands)` where the scalar bool `pred` is true, else `on_false(operands)` (JAX's
/// `lax.cond`; an integer `pred` counts as true where it is not 0, as there). Both branches take
/// the same operands and must return outputs of the same shapes and dtypes ([`Error::BranchMismatch`] otherwise). They may use any value of the enclosing
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
    // An integer predicate is true where it is not 0, as in `lax.cond`; a float one is refused
    // there too.
    let pred = match pred.dtype() {
        DType::I32 | DType::U32 => pred.ne(&Tensor::full(
            crate::dtype::Scalar::I32(0).cast(pred.dtype()),
            &[],
        )),
        _ => pred.clone(),
    };
    if pred.dtype() != DType::Bool && pred.shape().is_empty() {
        let e = Error::BadDType {
            op: "cond",
            dtype: pred.dtype(),
            hint: "the predicate of cond must be bool or an integer: compare first (e.g. `x.gt(&Tensor::scalar(0.0f32))`), or use `switch` with an integer index",
            shapes: vec![pred.shape().to_vec()],
        };
        return failed(e, 1);
    }
    // Branch 0 is taken for false, branch 1 for true (lax.cond's order).
    let branches: [Branch<'_>; 2] = [&on_false, &on_true];
    match switch_impl("cond", &pred, &branches, operands) {
        Ok(v) => v,
        Err(e) => failed(e, 1),
    }
}

/// `branches[index](operands)` for a scalar integer `index`, clamped into `0..branches.len()` (JAX's
/// `lax.switch`, which first converts the index to i32: u32 indices from 2^31 on take branch 0). Every branch must return outputs of the same shapes and dtypes.
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
    // JAX converts the index to i32 first: a u32 index of 2^31 or more wraps to a negative one
    // (so it takes branch 0), and a bool index is 0 or 1 whatever the number of branches.
    let index = match index.dtype() {
        DType::U32 => index.cast(DType::I32),
        DType::Bool if branches.len() != 2 => index.cast(DType::I32),
        _ => index.clone(),
    };
    match switch_impl("switch", &index, branches, operands) {
        Ok(v) => v,
        Err(e) => failed(e, 1),
    }
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

/// Run `body` while `cond` holds, threading a carry (JAX's `lax.while_loop`):
/// `while cond(&carry) { carry = body(&carry) }`, returning the final carry. `cond` returns a bool
/// scalar (reduce an array with [`crate::numpy::any`] / [`crate::numpy::all`]); `body` keeps the carry's shapes and
/// dtypes ([`Error::CarryMismatch`] otherwise).
///
/// The number of iterations is data: before each iteration the device computes `cond` and the
/// host reads the predicate back, so each iteration costs a round trip (use [`fori_loop`] or
/// [`scan`] when the count is known). Works eagerly, under `jit`, `vmap` (a batched predicate runs
/// the loop until every example is done, each example keeping its carry from the iteration its
/// own predicate failed) and `pmap` (each device runs its own loop; collectives in `cond` or
/// `body` are not supported there yet). Like JAX, reverse-mode differentiation through it is an
/// [`Error::Unsupported`]: the number of steps to replay is unknown when tracing. A predicate that
/// never becomes false loops forever, as in JAX. `Jit::encode` (recording into your encoder) and
/// the browser cannot wait for the predicate, and refuse programs holding one.
///
/// ```
/// use brigade::{while_loop, Tensor};
/// // Halve x until it is below 1, counting the steps: 10 -> 5 -> 2.5 -> 1.25 -> 0.625.
/// let out = while_loop(
///     |c: &[Tensor]| c[0].ge(&Tensor::scalar(1.0f32)),
///     |c: &[Tensor]| vec![&c[0] * 0.5, &c[1] + &Tensor::scalar(1i32)],
///     &[Tensor::scalar(10.0f32), Tensor::scalar(0i32)],
/// );
/// assert_eq!(out[0].to_vec::<f32>()?, vec![0.625]);
/// assert_eq!(out[1].to_vec::<i32>()?, vec![4]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn while_loop<C, B>(cond: C, body: B, init: &[Tensor]) -> Vec<Tensor>
where
    C: Fn(&[Tensor]) -> Tensor,
    B: Fn(&[Tensor]) -> Vec<Tensor>,
{
    match while_impl("while_loop", &cond, &body, init) {
        Ok(v) => v,
        Err(e) => failed(e, init.len()),
    }
}
