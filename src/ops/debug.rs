//! `debug_print`: a side effect in a traced program. The equation takes the values to print and
//! yields a token (`u32[]`) that nothing reads; the graph lists it among its `effects`, so it is
//! never removed as dead code. Executors take the printed values out before compiling (see
//! `crate::debug`), read them after the run and print them, tagged with the device (and, in a
//! parallel program, the axis index) in device order.
//!
//! Rules: shape rule `infer` (the token); CPU reference: the token (printing is the executors'
//! job); batching: the print of the batched values (every example at once); VJP: nothing flows
//! (the token is not differentiable).

use std::fmt;

use crate::dtype::DType;
use crate::error::Result;
use crate::host::HostArray;
use crate::ops::rules::{Emitted, Lowering, Rules, single_batch};
use crate::ops::{BatchCtx, Batched, Cotangents, Prim};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Var};
use crate::wgsl::Emitter;

/// The token a print yields.
fn infer() -> Result<Aval> {
    Ok(Aval::new(vec![], DType::U32))
}

fn eval_cpu() -> HostArray {
    HostArray::scalar(crate::dtype::Scalar::U32(0))
}

/// Print the batched values (the print sees the whole batch; examples along the leading axis).
fn batch(op: &DebugOp, ins: &[Batched]) -> Batched {
    let refs: Vec<&Tensor> = ins.iter().map(|(t, _)| t).collect();
    (Tensor::apply(Prim::Debug(op.clone()), &refs), false)
}

fn vjp(ins: &[Tensor]) -> Cotangents {
    vec![None; ins.len()]
}

/// The effect primitives.
#[derive(Clone, Debug, PartialEq)]
pub enum DebugOp {
    /// `debug_print(fmt, values...)`: yields a token.
    Print { fmt: String },
}

impl Rules for DebugOp {
    fn name(&self) -> &'static str {
        match self {
            DebugOp::Print { .. } => "debug_print",
        }
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DebugOp::Print { fmt } => write!(f, "[fmt={fmt:?}]"),
        }
    }

    fn arity(&self) -> Option<usize> {
        match self {
            DebugOp::Print { .. } => None,
        }
    }

    fn result_count(&self) -> usize {
        1
    }

    fn infer(&self, _ins: &[&Aval]) -> Result<Vec<Aval>> {
        Ok(vec![infer()?])
    }

    fn eval_cpu(&self, _ins: &[&HostArray], _outs: &[Aval]) -> Result<Vec<HostArray>> {
        Ok(vec![eval_cpu()])
    }

    fn lowering(&self) -> Lowering<'_> {
        Lowering::HostOnly
    }

    fn emit_wgsl(&self, _em: &mut Emitter<'_>, _ins: &[Var], _idx: &[String]) -> Option<Emitted> {
        None
    }

    fn batch(&self, ins: &[Batched], _ctx: &BatchCtx<'_>) -> Result<Vec<Batched>> {
        single_batch(batch(self, ins))
    }

    fn vjp(&self, ins: &[Tensor], _outs: &[Tensor], _cts: &[Option<Tensor>]) -> Result<Cotangents> {
        Ok(vjp(ins))
    }

    fn has_effect(&self) -> bool {
        true
    }
}
