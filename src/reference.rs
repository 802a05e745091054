//! The CPU reference interpreter: evaluates a [`Graph`] on host data, primitive by primitive, with
//! each primitive's own CPU rule. It is the oracle of every test, including those of the `cpu`
//! device's executor ([`crate::cpu`]), which shares the primitives' rules but computes on typed slices.

use crate::error::{Error, Result};
use crate::host::HostArray;
use crate::trace::graph::{Aval, Eqn, Graph};

/// The checks every evaluator of a graph on host data makes first: a valid graph without
/// collectives, one input per graph input, each with as many elements as its shape and the
/// shape and dtype the graph expects.
pub(crate) fn check_inputs<'a>(
    graph: &Graph,
    inputs: impl ExactSizeIterator<Item = &'a HostArray>,
) -> Result<()> {
    graph.check()?;
    crate::lower::refuse_collectives(graph)?;
    if inputs.len() != graph.inputs.len() {
        return Err(Error::Arity {
            what: "graph inputs".into(),
            expected: graph.inputs.len(),
            got: inputs.len(),
        });
    }
    for (v, x) in graph.inputs.iter().zip(inputs) {
        let want = graph.aval(*v);
        if x.data.len() != x.shape.iter().product::<usize>() {
            return Err(Error::DataLength {
                shape: x.shape.clone(),
                expected: x.shape.iter().product(),
                got: x.data.len(),
            });
        }
        if x.shape != want.shape || x.dtype() != want.dtype {
            return Err(Error::BadShapeArg {
                op: "eval_graph",
                shape: x.shape.clone(),
                detail: format!("input {} expected {want}", v.0),
            });
        }
    }
    Ok(())
}

/// An evaluator's environment before the first equation: one slot per value of `graph`, the
/// graph's inputs (`inputs`, in order) and constants in theirs, each as `wrap` makes it.
pub(crate) fn initial_env<'g, T>(
    graph: &'g Graph,
    inputs: impl IntoIterator<Item = &'g HostArray>,
    wrap: impl Fn(&'g HostArray) -> T,
) -> Vec<Option<T>> {
    let mut env: Vec<Option<T>> = (0..graph.avals.len()).map(|_| None).collect();
    for (v, x) in graph.inputs.iter().zip(inputs) {
        env[v.idx()] = Some(wrap(x));
    }
    for (v, x) in &graph.consts {
        env[v.idx()] = Some(wrap(x));
    }
    env
}

/// The values `e` reads, from an evaluator's environment (every one is defined: a checked graph
/// is topologically ordered).
pub(crate) fn operands<'e, T>(env: &'e [Option<T>], e: &Eqn) -> Vec<&'e T> {
    e.inputs
        .iter()
        .map(|v| {
            env[v.idx()]
                .as_ref()
                .expect("graph is topologically ordered")
        })
        .collect()
}

/// The avals of the results of `e`, an equation of `graph`, once the host is known to be able to
/// hold each of them (a huge one is a typed error, not an abort): the check every evaluator makes
/// before an equation runs.
pub(crate) fn result_avals(graph: &Graph, e: &Eqn) -> Result<Vec<Aval>> {
    let avals: Vec<Aval> = e.outs().map(|o| graph.aval(o).clone()).collect();
    for a in &avals {
        let bytes = crate::host::shape_bytes(e.prim.name(), &a.shape, a.dtype)?;
        crate::host::check_host_alloc(bytes, || format!("the result {a} of {}", e.prim.name()))?;
    }
    Ok(avals)
}

/// Evaluate `graph` on `inputs` (one per graph input, in order).
pub fn eval_graph(graph: &Graph, inputs: &[HostArray]) -> Result<Vec<HostArray>> {
    check_inputs(graph, inputs.iter())?;
    let mut env = initial_env(graph, inputs, HostArray::clone);
    for e in &graph.eqns {
        let ins = operands(&env, e);
        let avals = result_avals(graph, e)?;
        let outs = e.prim.eval_cpu_multi(&ins, &avals)?;
        for (o, x) in e.outs().zip(outs) {
            env[o.idx()] = Some(x);
        }
    }
    Ok(graph
        .outputs
        .iter()
        .map(|v| env[v.idx()].clone().expect("output is defined"))
        .collect())
}
