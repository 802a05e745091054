//! `stop_gradient` (JAX's `ad_util.stop_gradient_p`): the identity on values, a wall for
//! cotangents. Users reach it through [`crate::stop_gradient`]; the batching rule of `cond` with
//! a per-example index uses it to keep an untaken branch's gradient out (JAX issue #1052).
//!
//! Rules: shape rule `infer` (the operand's aval); CPU reference: the operand; lowering: an
//! elementwise identity (the operand's value at the same index inside a fused kernel), so the
//! forward values are the operand's bits; batching: the op on the
//! batched operand; VJP: no cotangent flows to the operand.

use std::fmt;

use crate::error::Result;
use crate::host::HostArray;
use crate::ops::rules::{Emitted, Lowering, Rules, single_batch};
use crate::ops::{BatchCtx, Batched, Cotangents, Prim};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Var};
use crate::wgsl::Emitter;

/// The primitives that only matter to differentiation.
#[derive(Clone, Debug, PartialEq)]
pub enum AdUtilOp {
    /// `stop_gradient(x)`: `x`, with no cotangent flowing back to it.
    StopGradient,
}

/// `stop_gradient(x)` staged or run like any primitive (any dtype; the public
/// [`crate::stop_gradient`] binds it on float tensors only).
pub(crate) fn stop_gradient(x: &Tensor) -> Tensor {
    Tensor::apply(Prim::AdUtil(AdUtilOp::StopGradient), &[x])
}

impl Rules for AdUtilOp {
    fn name(&self) -> &'static str {
        match self {
            AdUtilOp::StopGradient => "stop_gradient",
        }
    }

    fn fmt_params(&self, _f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdUtilOp::StopGradient => Ok(()),
        }
    }

    fn arity(&self) -> Option<usize> {
        match self {
            AdUtilOp::StopGradient => Some(1),
        }
    }

    fn result_count(&self) -> usize {
        1
    }

    fn infer(&self, ins: &[&Aval]) -> Result<Vec<Aval>> {
        match self {
            AdUtilOp::StopGradient => Ok(vec![ins[0].clone()]),
        }
    }

    fn eval_cpu(&self, ins: &[&HostArray], _outs: &[Aval]) -> Result<Vec<HostArray>> {
        match self {
            AdUtilOp::StopGradient => Ok(vec![ins[0].clone()]),
        }
    }

    fn lowering(&self) -> Lowering<'_> {
        match self {
            // The operand's value at the same index: lowered as an elementwise op, so a small
            // tree under it is still recomputed by each consumer instead of stored (logsumexp's
            // shift stays inside its sum's loop).
            AdUtilOp::StopGradient => Lowering::Elementwise,
        }
    }

    fn emit_wgsl(&self, em: &mut Emitter<'_>, ins: &[Var], idx: &[String]) -> Option<Emitted> {
        match self {
            AdUtilOp::StopGradient => Some(Emitted::Value(em.value(ins[0], idx))),
        }
    }

    fn batch(&self, ins: &[Batched], _ctx: &BatchCtx<'_>) -> Result<Vec<Batched>> {
        match self {
            AdUtilOp::StopGradient => single_batch((stop_gradient(&ins[0].0), ins[0].1)),
        }
    }

    fn vjp(&self, ins: &[Tensor], _outs: &[Tensor], _cts: &[Option<Tensor>]) -> Result<Cotangents> {
        match self {
            AdUtilOp::StopGradient => Ok(vec![None; ins.len()]),
        }
    }

    fn has_effect(&self) -> bool {
        false
    }
}
