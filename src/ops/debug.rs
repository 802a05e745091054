//! `debug_print`: a side effect in a traced program. The equation takes the values to print and
//! yields a token (`u32[]`) that nothing reads; the graph lists it among its `effects`, so it is
//! never removed as dead code. Executors take the printed values out before compiling (see
//! `crate::debug`), read them after the run and print them, tagged with the device (and, in a
//! parallel program, the axis index) in device order.
//!
//! Rules: shape rule `infer` (the token); CPU reference: the token (printing is the executors'
//! job); batching: the print of the batched values (every example at once); VJP: nothing flows
//! (the token is not differentiable).

use crate::dtype::DType;
use crate::error::Result;
use crate::host::HostArray;
use crate::ops::{BatchCtx, Batched, Cotangents, Prim};
use crate::tensor::Tensor;
use crate::trace::graph::Aval;

/// The token a print yields.
pub(crate) fn infer() -> Result<Aval> {
    Ok(Aval::new(vec![], DType::U32))
}

pub(crate) fn eval_cpu() -> HostArray {
    HostArray::scalar(crate::dtype::Scalar::U32(0))
}

/// Print the batched values (the print sees the whole batch; examples along the leading axis).
pub(crate) fn batch(prim: &Prim, ins: &[Batched], _ctx: &BatchCtx<'_>) -> Batched {
    let refs: Vec<&Tensor> = ins.iter().map(|(t, _)| t).collect();
    (Tensor::apply(prim.clone(), &refs), false)
}

pub(crate) fn vjp(ins: &[Tensor]) -> Cotangents {
    vec![None; ins.len()]
}
