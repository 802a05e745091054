//! The reverse-mode interpreter (JAX's `interpreters/ad.py`): linearize a traced function (run
//! it forward keeping every value) and pull cotangents back through each primitive's VJP rule.
//! Machinery: the [`grad`](crate::grad) and [`vjp`](crate::vjp) builders and the VJP rules of
//! higher-order primitives (`cond`, `scan` in `crate::ops::control`) call it; it does not depend
//! on any builder.

use crate::array::Array;
use crate::error::Result;
use crate::ops::{AdUtilOp, ControlOp, Prim};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Graph};
use crate::trace::{TraceArg, trace_capturing};

/// A function's forward pass, with every intermediate value kept for the backward pass.
pub(crate) struct Linearized {
    graph: Graph,
    /// Value of every variable of `graph` that the forward pass computed.
    values: Vec<Option<Tensor>>,
}

/// Trace `f` and run it forward on `primals` (in the current context: eagerly or staged).
pub(crate) fn linearize<F>(label: &str, f: &F, primals: &[Tensor]) -> Result<Linearized>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    if let Some(e) = primals.iter().find_map(|t| t.error()) {
        return Err(e.clone());
    }
    let args: Vec<TraceArg> = primals
        .iter()
        .map(|t| TraceArg::Abstract(Aval::new(t.shape().to_vec(), t.dtype())))
        .collect();
    let (graph, captured) = trace_capturing(label, f, &args)?;
    let inputs: Vec<Tensor> = primals.iter().cloned().chain(captured).collect();
    forward(graph, &inputs)
}

/// Run `graph` forward on `inputs` (one per graph input) by re-emitting its equations, keeping
/// every value.
fn forward(graph: Graph, inputs: &[Tensor]) -> Result<Linearized> {
    let mut values: Vec<Option<Tensor>> = vec![None; graph.avals.len()];
    for (v, t) in graph.inputs.iter().zip(inputs) {
        values[v.idx()] = Some(t.clone());
    }
    for (v, h) in &graph.consts {
        values[v.idx()] = Some(Tensor::from(Array::from_host(h.clone())));
    }
    for e in &graph.eqns {
        let ins: Vec<Tensor> = e
            .inputs
            .iter()
            .map(|v| {
                values[v.idx()]
                    .clone()
                    .expect("graph is topologically ordered")
            })
            .collect();
        let refs: Vec<&Tensor> = ins.iter().collect();
        let outs = Tensor::apply_multi(e.prim.clone(), &refs);
        if let Some(err) = outs.iter().find_map(|t| t.error()) {
            return Err(err.clone());
        }
        for (o, t) in e.outs().zip(outs) {
            values[o.idx()] = Some(t);
        }
    }
    Ok(Linearized { graph, values })
}

/// The outputs of `g` applied to `inputs` (re-emitted as ordinary operations).
pub(crate) fn graph_forward(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(forward(g.clone(), inputs)?.outputs())
}

/// Cotangents of `g`'s inputs at `primals`, given cotangents of its outputs (`None`: zero); the
/// forward pass is recomputed. Used by the VJP rules of control flow for their sub-programs.
pub(crate) fn graph_vjp(
    g: &Graph,
    primals: &[Tensor],
    cts: &[Option<Tensor>],
) -> Result<Vec<Option<Tensor>>> {
    let lin = forward(g.clone(), primals)?;
    let got = lin.backward(cts);
    if let Some(e) = got.iter().flatten().find_map(|t| t.error()) {
        return Err(e.clone());
    }
    Ok(got)
}

impl Linearized {
    pub(crate) fn outputs(&self) -> Vec<Tensor> {
        self.graph
            .outputs
            .iter()
            .map(|v| self.values[v.idx()].clone().expect("outputs are computed"))
            .collect()
    }

    /// Cotangents of the graph inputs given cotangents of the outputs (None: zero).
    pub(crate) fn backward(&self, out_cts: &[Option<Tensor>]) -> Vec<Option<Tensor>> {
        let g = &self.graph;
        let mut ct: Vec<Option<Tensor>> = vec![None; g.avals.len()];
        let add = |slot: &mut Option<Tensor>, c: Tensor| {
            *slot = Some(match slot.take() {
                Some(prev) => &prev + &c,
                None => c,
            });
        };
        for (v, c) in g.outputs.iter().zip(out_cts) {
            if let Some(c) = c {
                add(&mut ct[v.idx()], c.clone());
            }
        }
        // Equations whose operands carry no gradient from the inputs pass no cotangent to them:
        // they are skipped (no work for constants, and a `while_loop` over constants is no
        // error, as in JAX). Gradients stop at `stop_gradient` and at integer or bool values, and
        // a `while_loop`'s predicate constants carry none into its results.
        let mut depends = vec![false; g.avals.len()];
        for v in &g.inputs {
            depends[v.idx()] = g.aval(*v).dtype.is_float();
        }
        let carries = |e: &crate::trace::graph::Eqn, depends: &[bool]| -> bool {
            let ins: &[crate::trace::graph::Var] = match &e.prim {
                Prim::AdUtil(AdUtilOp::StopGradient) => &[],
                Prim::Control(ControlOp::While(p)) => &e.inputs[p.n_cond_consts..],
                _ => &e.inputs,
            };
            ins.iter().any(|v| depends[v.idx()])
        };
        for e in &g.eqns {
            if carries(e, &depends) {
                for o in e.outs() {
                    depends[o.idx()] = g.aval(o).dtype.is_float();
                }
            }
        }
        for e in g.eqns.iter().rev() {
            if !carries(e, &depends) {
                continue;
            }
            let cts: Vec<Option<Tensor>> = e.outs().map(|o| ct[o.idx()].clone()).collect();
            if cts.iter().all(Option::is_none) {
                continue;
            }
            let ins: Vec<Tensor> = e
                .inputs
                .iter()
                .map(|v| self.values[v.idx()].clone().expect("forward values kept"))
                .collect();
            let outs: Vec<Tensor> = e
                .outs()
                .map(|o| self.values[o.idx()].clone().expect("forward values kept"))
                .collect();
            let in_cts = match e.prim.vjp_multi(&ins, &outs, &cts) {
                Ok(c) => c,
                Err(err) => vec![Some(Tensor::failed_here(err)); ins.len()],
            };
            for (v, ci) in e.inputs.iter().zip(in_cts) {
                if let Some(ci) = ci {
                    add(&mut ct[v.idx()], ci);
                }
            }
        }
        g.inputs.iter().map(|v| ct[v.idx()].clone()).collect()
    }
}
