//! The tracing entry points: how a Rust closure over [`Tensor`]s becomes a [`Graph`]. Every
//! transform (`jit`, `vmap`, `grad`, `pmap`) and every higher-order primitive (`cond`, `scan`)
//! traces its functions through here.

use crate::array::Array;
use crate::error::{Error, Result};
use crate::tensor::{Repr, Tensor};
use crate::trace::graph::{Aval, Graph};
use crate::trace::tracer::Trace;

/// Trace `f` on abstract inputs into a graph.
pub(crate) fn trace_fn<F>(label: &str, f: &F, avals: &[Aval]) -> Result<Graph>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let args: Vec<TraceArg> = avals.iter().cloned().map(TraceArg::Abstract).collect();
    trace_args(label, f, &args)
}

/// An argument of a function being traced.
pub(crate) enum TraceArg {
    /// Traced: becomes a graph input.
    Abstract(Aval),
    /// Static: passed as a concrete tensor (captured as a constant where used).
    Static(Array),
}

/// Trace `f` into a graph whose inputs are the abstract arguments, in order. A function run on its
/// own (jit, pmap) may not close over values traced by an enclosing transform.
pub(crate) fn trace_args<F>(label: &str, f: &F, args: &[TraceArg]) -> Result<Graph>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let (g, captured) = trace_capturing(label, f, args)?;
    if !captured.is_empty() {
        return Err(Error::Unsupported {
            op: "closure over a traced value",
            detail: format!(
                "in `{label}`: the function uses {} value(s) traced by an enclosing transform, but it is compiled and run on its own; pass them as arguments instead",
                captured.len()
            ),
        });
    }
    Ok(g)
}

/// [`trace_args`], also returning the values of enclosing traces that `f` closed over: they are
/// extra graph inputs after the arguments, in this order (for transforms that re-emit the graph
/// into the enclosing trace, like `vmap`).
pub(crate) fn trace_capturing<F>(
    label: &str,
    f: &F,
    args: &[TraceArg],
) -> Result<(Graph, Vec<Tensor>)>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let tr = Trace::new(label);
    let ins: Vec<Tensor> = args
        .iter()
        .map(|a| match a {
            TraceArg::Abstract(a) => {
                let v = tr.add_input(a.clone());
                Tensor::traced(tr.clone(), v, a.clone())
            }
            TraceArg::Static(x) => Tensor::from(x.clone()),
        })
        .collect();
    let outs = {
        let _active = crate::trace::tracer::Activation::new(&tr);
        f(&ins)
    };
    let mut out_vars = Vec::with_capacity(outs.len());
    for t in &outs {
        match &*t.repr {
            Repr::Traced { trace, var, .. } if trace.id == tr.id => out_vars.push(*var),
            Repr::Traced { trace, var, aval }
                if crate::trace::tracer::depth_of(trace.id).is_some() =>
            {
                out_vars.push(tr.capture(trace.id, *var, t, aval))
            }
            Repr::Traced { .. } => {
                return Err(t.stale("output").unwrap_or(Error::TraceMismatch {
                    op: "output",
                    detail: crate::tensor::MIXED_TRACES.into(),
                }));
            }
            Repr::Concrete(a) => out_vars.push(tr.lift(a)?),
            Repr::Failed(e) => return Err(e.clone()),
        }
    }
    if let Some(e) = tr.state.borrow().error.clone() {
        return Err(e);
    }
    drop(ins);
    drop(outs);
    let (mut g, captured) = {
        let mut st = tr.state.borrow_mut();
        let captured: Vec<Tensor> = st.captured.drain(..).map(|(_, t)| t).collect();
        (std::mem::take(&mut st.graph), captured)
    };
    g.outputs = out_vars;
    g.dce();
    Ok((g, captured))
}
