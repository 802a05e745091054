//! Printing values from inside traced code: [`debug_print`] (JAX's `jax.debug.print`).
//!
//! A print inside `jit`, `pmap`, `shard_map`, `vmap` or `grad` is staged into the program as a side
//! effect; the executor reads the values after the run and prints one line per print, tagged with
//! where it ran: `[vulkan:0]` for a program on one device (backend and position in the runtime's
//! device list), `[gl:1 i=1]` per device of a parallel program (with the axis name and the
//! device's index along it), devices in order — so the output is the same on every run. Outside any transform the line is printed at once, tagged `[eager]`.
//!
//! Lines go to standard output, or to [`capture_debug_prints`] (tests, pages).

use std::cell::RefCell;

use crate::dtype::Scalar;
use crate::error::{Error, Result};
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
            Prim::DebugPrint {
                fmt: fmt.to_string(),
            },
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
    let captured = CAPTURE.with(|c| match c.borrow_mut().as_mut() {
        Some(buf) => {
            buf.extend(lines.iter().cloned());
            true
        }
        None => false,
    });
    if !captured {
        for l in lines {
            println!("{l}");
        }
    }
}

/// One print of a program: its format and the variables it prints.
#[derive(Clone, Debug)]
pub(crate) struct PrintSpec {
    pub fmt: String,
    pub vars: Vec<Var>,
}

/// `g` without its prints, its outputs followed by every printed variable (in print order), and
/// the prints. Executors compile this graph and print the extra outputs after the run.
pub(crate) fn strip_prints(g: &Graph) -> (Graph, Vec<PrintSpec>) {
    if g.effects.is_empty() {
        return (g.clone(), Vec::new());
    }
    let mut out = g.without_eqns();
    out.effects.clear();
    let mut prints = Vec::new();
    for e in &g.eqns {
        match &e.prim {
            Prim::DebugPrint { fmt } => {
                out.outputs.extend(e.inputs.iter().copied());
                prints.push(PrintSpec {
                    fmt: fmt.clone(),
                    vars: e.inputs.clone(),
                });
            }
            _ => out.eqns.push(e.clone()),
        }
    }
    (out, prints)
}

/// A sub-program (cond branch, loop body) may not print yet: its prints would need the host
/// inside the loop, or only for the branch taken.
pub(crate) fn refuse_prints_in(op: &'static str, g: &Graph) -> Result<()> {
    if g.effects.is_empty() {
        return Ok(());
    }
    Err(Error::Unsupported {
        op: "debug_print",
        detail: format!(
            "inside a {op} branch or body: print the values the {op} returns instead (prints inside control flow are not supported yet)"
        ),
    })
}

/// The lines of `prints` given the printed values (in [`strip_prints`] order), each prefixed with
/// `tag`.
pub(crate) fn lines(tag: &str, prints: &[PrintSpec], values: &[HostArray]) -> Vec<String> {
    let mut it = values.iter();
    prints
        .iter()
        .map(|p| {
            let vals: Vec<HostArray> = it.by_ref().take(p.vars.len()).cloned().collect();
            format!("[{tag}] {}", format_values(&p.fmt, &vals))
        })
        .collect()
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
