//! The batching interpreter (JAX's `interpreters/batching.py`): re-emit a graph with every
//! primitive replaced by its batching rule. Machinery: the [`vmap`](crate::vmap) builder and the
//! rules of higher-order primitives (`cond`, `scan` in `crate::ops::control`) call it; it does not
//! depend on any builder.

use crate::array::Array;
use crate::error::Result;
use crate::ops::{BatchCtx, Batched};
use crate::tensor::Tensor;
use crate::trace::graph::Graph;

/// Re-emit `g` with every primitive replaced by its batching rule, on inputs `ins` (one per graph
/// input, each flagged with whether it carries the batch axis in front). Returns the outputs,
/// flagged alike. Used by [`crate::Vmap`] and by the rules of control flow for their sub-programs.
pub(crate) fn batch_graph(
    g: &Graph,
    ins: Vec<Batched>,
    ctx: &BatchCtx<'_>,
) -> Result<Vec<Batched>> {
    let mut env: Vec<Option<Batched>> = vec![None; g.avals.len()];
    for (v, x) in g.inputs.iter().zip(ins) {
        env[v.idx()] = Some(x);
    }
    for (v, h) in &g.consts {
        env[v.idx()] = Some((Tensor::from(Array::from_host(h.clone())), false));
    }
    for e in &g.eqns {
        let ins: Vec<Batched> = e
            .inputs
            .iter()
            .map(|v| {
                env[v.idx()]
                    .clone()
                    .expect("graph is topologically ordered")
            })
            .collect();
        let outs = e.prim.batch_multi(&ins, ctx)?;
        for (o, val) in e.outs().zip(outs) {
            env[o.idx()] = Some(val);
        }
    }
    Ok(g.outputs
        .iter()
        .map(|v| env[v.idx()].clone().expect("outputs are defined"))
        .collect())
}
