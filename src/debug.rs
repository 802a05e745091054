//! Printing values from inside traced code: [`debug_print`] (JAX's `jax.debug.print`).
//!
//! A print inside `jit`, `pmap`, `shard_map`, `vmap` or `grad` is staged into the program as a side
//! effect; the executor reads the values after the run and prints one line per print, tagged with
//! where it ran: `[vulkan:0]` for a program on one device (backend and position in the runtime's
//! device list), `[gl:1 i=1]` per device of a parallel program (with the axis name and the
//! device's index along it), devices in order — so the output is the same on every run. Outside any transform the line is printed at once, tagged `[eager]`.
//!
//! Lines go to standard output, or to [`capture_debug_prints`] (tests, pages).

use crate::ops::{ControlOp, DebugOp, ElementwiseOp};
use std::cell::RefCell;

use crate::dtype::Scalar;
use crate::error::Result;
use crate::host::HostArray;
use crate::ops::Prim;
use crate::tensor::Tensor;
use crate::trace::graph::{Graph, Var};

thread_local! {
    /// Lines captured by `capture_debug_prints` on this thread (None: print them).
    static CAPTURE: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// Print `values` formatted by `fmt` when the program runs: each `{}` is replaced by the next
/// value; values left over are appended. Inside a parallel program every device prints its own
/// values, tagged with its device and axis index, in device order.
///
/// ```
/// use brigade::{debug_print, capture_debug_prints, jit, Array, Tensor};
/// let f = jit(|a: &[Tensor]| {
///     let y = &a[0] * 2.0;
///     debug_print("y = {}", &[&y]);
///     vec![y]
/// });
/// let (out, lines) = capture_debug_prints(|| f.call(&[Array::from_vec(vec![1.0f32, 2.5], &[2]).unwrap()]));
/// out?;
/// assert!(lines[0].ends_with("y = [2, 5]"), "{}", lines[0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn debug_print(fmt: &str, values: &[&Tensor]) {
    if let Some(e) = values.iter().find_map(|t| t.error()) {
        // The failure is reported by whatever reads the failed value; nothing to print.
        let _ = e;
        return;
    }
    let traced = values.iter().any(|t| t.is_traced()) || crate::trace::tracer::current().is_some();
    if traced {
        let _ = Tensor::apply(
            Prim::Debug(DebugOp::Print {
                fmt: fmt.to_string(),
            }),
            values,
        );
        return;
    }
    let hosts: Result<Vec<HostArray>> = values
        .iter()
        .map(|t| crate::array::host_data(&t.to_array()?))
        .collect();
    match hosts {
        Ok(h) => emit(vec![format!("[eager] {}", format_values(fmt, &h))]),
        Err(e) => emit(vec![format!("[eager] {fmt}: cannot read the values: {e}")]),
    }
}

/// Run `f`, returning the lines that [`debug_print`] produced on this thread meanwhile instead of
/// printing them.
pub fn capture_debug_prints<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    let outer = CAPTURE.with(|c| c.borrow_mut().replace(Vec::new()));
    let r = f();
    let lines = CAPTURE.with(|c| {
        let mut c = c.borrow_mut();
        let lines = c.take().unwrap_or_default();
        *c = outer;
        lines
    });
    (r, lines)
}

/// A device as print tags show it: backend and position, e.g. `vulkan:0`, `gl:1`, `cpu:0`.
pub(crate) fn device_tag(dev: &crate::Device) -> String {
    let info = dev.info();
    format!("{}:{}", info.backend, info.index)
}

/// Print (or capture) lines.
pub(crate) fn emit(lines: Vec<String>) {
    // Printed, not captured, by destructors run while the thread ends.
    let captured = CAPTURE
        .try_with(|c| match c.borrow_mut().as_mut() {
            Some(buf) => {
                buf.extend(lines.iter().cloned());
                true
            }
            None => false,
        })
        .unwrap_or(false);
    if !captured {
        for l in lines {
            println!("{l}");
        }
    }
}

/// One print of a program: its format and the variables it reads, as variables of the stripped
/// graph. A print inside loops reads its values stacked along one leading axis per enclosing loop
/// (outermost first) and prints once per iteration; a print inside cond branches prints only where
/// its branch was taken.
#[derive(Clone, Debug)]
pub(crate) struct PrintSpec {
    pub fmt: String,
    /// The printed values, then one index value per guard.
    pub vars: Vec<Var>,
    pub n_values: usize,
    /// Per enclosing cond (innermost first): the branch holding the print, the number of
    /// branches, and how many of the enclosing loops are inside that cond (its index value is
    /// stacked by the others only).
    pub guards: Vec<(usize, usize, usize)>,
    /// Enclosing loops, outermost first: (length, reverse).
    pub loops: Vec<(usize, bool)>,
}

/// `g` without its prints, its outputs followed by every printed variable (in print order), and
/// the prints. Executors compile this graph and print the extra outputs after the run. Prints
/// inside a scan body become extra stacked outputs of the scan; prints inside cond branches extra
/// outputs of the cond (zeros from the other branches), guarded by the cond's index.
pub(crate) fn strip_prints(g: &Graph) -> (Graph, Vec<PrintSpec>) {
    if g.effects.is_empty() {
        return (g.clone(), Vec::new());
    }
    let mut out = g.without_eqns();
    out.effects.clear();
    let mut prints = Vec::new();
    for e in &g.eqns {
        match &e.prim {
            Prim::Debug(DebugOp::Print { fmt }) => prints.push(PrintSpec {
                fmt: fmt.clone(),
                vars: e.inputs.clone(),
                n_values: e.inputs.len(),
                guards: Vec::new(),
                loops: Vec::new(),
            }),
            Prim::Control(ControlOp::Scan(p)) if !p.body.effects.is_empty() => {
                let (body, specs) = strip_prints(&p.body);
                let n_old = p.body.outputs.len();
                let stacked: Vec<Var> = body.outputs[n_old..]
                    .iter()
                    .map(|v| {
                        let a = body.aval(*v);
                        let mut shape = vec![p.length];
                        shape.extend_from_slice(&a.shape);
                        out.new_var(crate::trace::graph::Aval::new(shape, a.dtype))
                    })
                    .collect();
                let mut eq = e.clone();
                eq.prim = Prim::Control(ControlOp::Scan(crate::ops::control::ScanParams {
                    body: std::sync::Arc::new(body.clone()),
                    ..p.clone()
                }));
                eq.extra_outs.extend(stacked.iter().copied());
                out.eqns.push(eq);
                let lift = remap(&body.outputs[n_old..], &stacked);
                for mut sp in specs {
                    sp.vars = sp.vars.iter().map(|v| lift(*v)).collect();
                    sp.loops.insert(0, (p.length, p.reverse));
                    prints.push(sp);
                }
            }
            Prim::Control(ControlOp::Cond { branches })
                if branches.iter().any(|b| !b.effects.is_empty()) =>
            {
                let stripped: Vec<(Graph, Vec<PrintSpec>)> =
                    branches.iter().map(|b| strip_prints(b)).collect();
                let n_old = branches[0].outputs.len();
                // Every branch returns every branch's printed values (zeros for the others').
                let extra: Vec<Vec<crate::trace::graph::Aval>> = stripped
                    .iter()
                    .map(|(b, _)| {
                        b.outputs[n_old..]
                            .iter()
                            .map(|v| b.aval(*v).clone())
                            .collect()
                    })
                    .collect();
                let mut new_branches = Vec::with_capacity(stripped.len());
                for (j, (b, _)) in stripped.iter().enumerate() {
                    let mut b = b.clone();
                    let own = b.outputs.split_off(n_old);
                    for (k, avals) in extra.iter().enumerate() {
                        if k == j {
                            b.outputs.extend_from_slice(&own);
                            continue;
                        }
                        for a in avals {
                            let z = b.new_var(a.clone());
                            b.eqns.push(crate::trace::graph::Eqn::new(
                                Prim::Elementwise(ElementwiseOp::Full {
                                    value: crate::dtype::Scalar::F32(0.0).cast(a.dtype),
                                    shape: a.shape.clone(),
                                }),
                                vec![],
                                z,
                            ));
                            b.outputs.push(z);
                        }
                    }
                    new_branches.push(std::sync::Arc::new(b));
                }
                let added: Vec<Var> = extra
                    .iter()
                    .flatten()
                    .map(|a| out.new_var(a.clone()))
                    .collect();
                let mut eq = e.clone();
                eq.prim = Prim::Control(ControlOp::Cond {
                    branches: new_branches,
                });
                eq.extra_outs.extend(added.iter().copied());
                out.eqns.push(eq);
                let index = e.inputs[0];
                let mut offset = 0;
                for (j, (b, specs)) in stripped.into_iter().enumerate() {
                    let mine = &added[offset..offset + extra[j].len()];
                    offset += extra[j].len();
                    let lift = remap(&b.outputs[n_old..], mine);
                    for mut sp in specs {
                        sp.vars = sp.vars.iter().map(|v| lift(*v)).collect();
                        sp.vars.push(index);
                        sp.guards.push((j, branches.len(), sp.loops.len()));
                        prints.push(sp);
                    }
                }
            }
            _ => out.eqns.push(e.clone()),
        }
    }
    for p in &prints {
        out.outputs.extend(p.vars.iter().copied());
    }
    (out, prints)
}

/// Map the variables `from` (outputs of a sub-program) to `to` (their results in the parent).
fn remap<'a>(from: &'a [Var], to: &'a [Var]) -> impl Fn(Var) -> Var + 'a {
    move |v| {
        from.iter()
            .position(|&f| f == v)
            .map(|i| to[i])
            .unwrap_or(v)
    }
}

/// The lines of `prints` given the printed values (in [`strip_prints`] order), each prefixed with
/// `tag`: one per print, per iteration of its loops, where its branches were taken. Prints in the
/// same loops come iteration by iteration, in the order the loops ran.
pub(crate) fn lines(tag: &str, prints: &[PrintSpec], values: &[HostArray]) -> Vec<String> {
    let mut it = values.iter();
    let per: Vec<Vec<&HostArray>> = prints
        .iter()
        .map(|p| it.by_ref().take(p.vars.len()).collect())
        .collect();
    let mut out = Vec::new();
    let mut s = 0;
    while s < prints.len() {
        // A run of prints in the same loops.
        let loops = &prints[s].loops;
        let e = s + prints[s..].iter().take_while(|p| &p.loops == loops).count();
        let total = loops.len();
        let count: usize = loops.iter().map(|l| l.0).product();
        let mut idx = vec![0usize; total];
        for step in 0..count {
            let mut k = step;
            for (d, &(len, rev)) in loops.iter().enumerate().rev() {
                idx[d] = if rev { len - 1 - k % len } else { k % len };
                k /= len;
            }
            for (p, vals) in prints[s..e].iter().zip(&per[s..e]) {
                let taken = p
                    .guards
                    .iter()
                    .zip(&vals[p.n_values..])
                    .all(|(&(j, n, inner), g)| {
                        crate::ops::control::branch_of(&at(g, &idx[..total - inner]), n) == j
                    });
                if taken {
                    let vs: Vec<HostArray> =
                        vals[..p.n_values].iter().map(|v| at(v, &idx)).collect();
                    out.push(format!("[{tag}] {}", format_values(&p.fmt, &vs)));
                }
            }
        }
        s = e;
    }
    out
}

/// `h[idx...]`: the sub-array at a leading multi-index.
fn at(h: &HostArray, idx: &[usize]) -> HostArray {
    if idx.is_empty() {
        return h.clone();
    }
    let shape = h.shape[idx.len()..].to_vec();
    let inner: usize = shape.iter().product();
    let mut lin = 0;
    for (i, d) in idx.iter().zip(&h.shape) {
        lin = lin * d + i;
    }
    HostArray {
        data: crate::host::HostData::from_scalars(
            h.dtype(),
            (lin * inner..(lin + 1) * inner).map(|i| h.data.get(i)),
        ),
        shape,
    }
}

/// `fmt` with each `{}` replaced by the next value (values left over appended).
pub(crate) fn format_values(fmt: &str, values: &[HostArray]) -> String {
    let mut out = String::new();
    let mut it = values.iter();
    let mut rest = fmt;
    while let Some(p) = rest.find("{}") {
        out.push_str(&rest[..p]);
        match it.next() {
            Some(v) => out.push_str(&format_array(v)),
            None => out.push_str("{}"),
        }
        rest = &rest[p + 2..];
    }
    out.push_str(rest);
    for v in it {
        out.push(' ');
        out.push_str(&format_array(v));
    }
    out
}

/// Nested brackets like NumPy, at most 6 entries per axis (then `…`).
fn format_array(h: &HostArray) -> String {
    const MAX: usize = 6;
    fn rec(h: &HostArray, dim: usize, offset: usize, out: &mut String) {
        if dim == h.shape.len() {
            out.push_str(&match h.data.get(offset) {
                Scalar::F32(v) => v.to_string(),
                Scalar::I32(v) => v.to_string(),
                Scalar::U32(v) => v.to_string(),
                Scalar::Bool(v) => v.to_string(),
                Scalar::F64(v) => v.to_string(),
            });
            return;
        }
        let n = h.shape[dim];
        let stride: usize = h.shape[dim + 1..].iter().product();
        out.push('[');
        for i in 0..n.min(MAX) {
            if i > 0 {
                out.push_str(", ");
            }
            rec(h, dim + 1, offset + i * stride, out);
        }
        if n > MAX {
            out.push_str(", …");
        }
        out.push(']');
    }
    let mut s = String::new();
    rec(h, 0, 0, &mut s);
    s
}
