//! Trace dispatch: how applying a primitive to tensors records an equation into the innermost
//! active trace, or runs it eagerly on concrete arrays (`crate::exec::eager`).

use std::rc::Rc;

use crate::array::Array;
use crate::error::Error;
use crate::ops::Prim;
use crate::tensor::{MIXED_TRACES, Repr, Tensor};
use crate::trace::tracer::Trace;

impl Tensor {
    /// Apply a primitive: record it when any input is traced, run it eagerly otherwise.
    pub(crate) fn apply(prim: Prim, inputs: &[&Tensor]) -> Tensor {
        Tensor::apply_multi(prim, inputs)
            .into_iter()
            .next()
            .unwrap_or_else(|| {
                Tensor::failed(Error::Arity {
                    what: "primitive results".into(),
                    expected: 1,
                    got: 0,
                })
            })
    }

    /// [`Tensor::apply`] for primitives with several results (control flow): one tensor per
    /// result (failed ones, as many as the primitive declares, when it fails).
    pub(crate) fn apply_multi(prim: Prim, inputs: &[&Tensor]) -> Vec<Tensor> {
        let n = prim.result_count();
        let fail = |e: Error| vec![Tensor::failed(e); n.max(1)];
        // The trace to record into: the innermost one among the inputs'. Values of enclosing
        // (outer, still active) traces are captured into it as extra inputs, as JAX does with
        // tracers a transformed function closes over.
        let mut trace: Option<&Rc<Trace>> = None;
        for t in inputs {
            if let Some(e) = t.stale(prim.name()) {
                if let Some(tr) = crate::trace::tracer::current() {
                    tr.fail(e.clone());
                }
                return fail(e);
            }
            match &*t.repr {
                Repr::Failed(e) => return fail(e.clone()),
                Repr::Traced { trace: tr, .. } => {
                    if let Some(prev) = trace {
                        if prev.id != tr.id {
                            let depth = |x: &Rc<Trace>| crate::trace::tracer::depth_of(x.id);
                            match (depth(prev), depth(tr)) {
                                (Some(a), Some(b)) => {
                                    if b > a {
                                        trace = Some(tr);
                                    }
                                    continue;
                                }
                                _ => {
                                    let e = Error::TraceMismatch {
                                        op: prim.name(),
                                        detail: MIXED_TRACES.into(),
                                    };
                                    tr.fail(e.clone());
                                    return fail(e);
                                }
                            }
                        }
                    }
                    trace = Some(tr);
                }
                Repr::Concrete(_) => {}
            }
        }
        let active = if trace.is_none() {
            crate::trace::tracer::current()
        } else {
            None
        };
        match trace.or(active.as_ref()) {
            Some(tr) => {
                let tr = tr.clone();
                let mut vars = Vec::with_capacity(inputs.len());
                for t in inputs {
                    match &*t.repr {
                        Repr::Traced {
                            trace: own,
                            var,
                            aval,
                        } if own.id != tr.id => vars.push(tr.capture(own.id, *var, t, aval)),
                        Repr::Traced { var, .. } => vars.push(*var),
                        Repr::Concrete(a) => match tr.lift(a) {
                            Ok(v) => vars.push(v),
                            Err(e) => {
                                tr.fail(e.clone());
                                return fail(e);
                            }
                        },
                        Repr::Failed(_) => unreachable!("handled above"),
                    }
                }
                match tr.push(prim, vars) {
                    Ok(outs) => outs
                        .into_iter()
                        .map(|(var, aval)| Tensor::traced(tr.clone(), var, aval))
                        .collect(),
                    Err(e) => {
                        tr.fail(e.clone());
                        fail(e)
                    }
                }
            }
            None => {
                let arrays: Vec<&Array> = inputs
                    .iter()
                    .map(|t| match &*t.repr {
                        Repr::Concrete(a) => a,
                        _ => unreachable!("all concrete"),
                    })
                    .collect();
                match crate::exec::eager(prim, &arrays) {
                    Ok(outs) => outs.into_iter().map(Tensor::from).collect(),
                    Err(e) => fail(e),
                }
            }
        }
    }
}

/// Run a zero-input primitive (a constant) eagerly on the host: constants are cheap and
/// should not wake a device until they are combined with device data. While a trace is being
/// recorded the primitive is recorded instead and never materialized on the host: the device
/// computes it in its kernel (or refuses it with a typed error when it cannot hold it).
pub(super) fn apply_eager_host(prim: Prim) -> Tensor {
    if crate::trace::tracer::current().is_some() {
        return Tensor::apply(prim, &[]);
    }
    let h = prim.infer(&[]).and_then(|aval| {
        let bytes = crate::host::shape_bytes(prim.name(), &aval.shape, aval.dtype)?;
        crate::host::check_host_alloc(bytes, || {
            format!("{} of shape {:?}", prim.name(), aval.shape)
        })?;
        prim.eval_cpu(&[], &aval)
    });
    match h {
        Ok(h) => Array::from_constant(prim, h).into(),
        Err(e) => Tensor::failed(e),
    }
}
