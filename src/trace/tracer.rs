//! The tracer: records primitives applied to traced tensors into a [`Graph`].

use crate::ops::ElementwiseOp;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::array::Array;
use crate::error::{Error, Result};
use crate::ops::Prim;
use crate::trace::graph::{Aval, Eqn, Graph, Var};

static NEXT_TRACE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The traces being recorded on this thread, innermost last. Ops whose inputs are all concrete
    /// are recorded into the innermost one (as in JAX, everything computed inside a transformed
    /// function is staged), instead of running eagerly on a device at trace time.
    static ACTIVE: RefCell<Vec<Rc<Trace>>> = const { RefCell::new(Vec::new()) };
}

/// The innermost trace being recorded on this thread.
///
/// Ops run by destructors while the thread ends (its thread-locals being destroyed) see none.
pub(crate) fn current() -> Option<Rc<Trace>> {
    ACTIVE
        .try_with(|a| a.borrow().last().cloned())
        .ok()
        .flatten()
}

/// Position of the trace `id` in the stack of active traces (higher is more inner), if active.
pub(crate) fn depth_of(id: u64) -> Option<usize> {
    ACTIVE
        .try_with(|a| a.borrow().iter().position(|t| t.id == id))
        .ok()
        .flatten()
}

/// Marks `trace` active until dropped (also on panic).
pub(crate) struct Activation;

impl Activation {
    pub(crate) fn new(trace: &Rc<Trace>) -> Activation {
        ACTIVE.with(|a| a.borrow_mut().push(trace.clone()));
        Activation
    }
}

impl Drop for Activation {
    fn drop(&mut self) {
        // Gone already while the thread ends: nothing left to pop.
        let _ = ACTIVE.try_with(|a| {
            a.borrow_mut().pop();
        });
    }
}

/// One tracing session: the graph being built and the first error met.
pub(crate) struct Trace {
    pub(crate) id: u64,
    pub(crate) label: String,
    pub(crate) state: RefCell<TraceState>,
}

pub(crate) struct TraceState {
    pub(crate) graph: Graph,
    pub(crate) error: Option<Error>,
    /// Captured concrete arrays already lifted into the graph, by identity.
    lifted: HashMap<usize, (Var, Array)>,
    /// Traced values of enclosing traces used here (a closure over an outer transform's value):
    /// each is an extra input of this graph, after the function's own inputs.
    pub(crate) captured: Vec<(Var, crate::tensor::Tensor)>,
    captured_ids: HashMap<(u64, Var), Var>,
}

impl Trace {
    pub(crate) fn new(label: &str) -> Rc<Trace> {
        crate::counters::bump(|c| c.traces += 1);
        Rc::new(Trace {
            id: NEXT_TRACE.fetch_add(1, Ordering::Relaxed),
            label: label.to_string(),
            state: RefCell::new(TraceState {
                graph: Graph::default(),
                error: None,
                lifted: HashMap::new(),
                captured: Vec::new(),
                captured_ids: HashMap::new(),
            }),
        })
    }
    pub(crate) fn add_input(&self, aval: Aval) -> Var {
        let mut st = self.state.borrow_mut();
        let v = st.graph.new_var(aval);
        st.graph.inputs.push(v);
        v
    }
    /// Record the first error of the trace (later errors are consequences of it).
    pub(crate) fn fail(&self, e: Error) {
        let mut st = self.state.borrow_mut();
        if st.error.is_none() {
            st.error = Some(e);
        }
    }
    /// Make a concrete array usable inside the graph: a `full` for single elements, a captured
    /// constant otherwise (read to the host once per trace).
    pub(crate) fn lift(&self, a: &Array) -> Result<Var> {
        let key = std::sync::Arc::as_ptr(&a.inner) as usize;
        if let Some((v, _)) = self.state.borrow().lifted.get(&key) {
            return Ok(*v);
        }
        if let Some(prim) = &a.inner.origin {
            let mut st = self.state.borrow_mut();
            let v = st.graph.new_var(a.aval().clone());
            st.graph.eqns.push(Eqn {
                prim: prim.clone(),
                inputs: vec![],
                out: v,
                extra_outs: Vec::new(),
            });
            st.lifted.insert(key, (v, a.clone()));
            return Ok(v);
        }
        let h = crate::array::host_data(a)?;
        let mut st = self.state.borrow_mut();
        let v = if h.len() == 1 {
            let aval = Aval::new(h.shape.clone(), h.dtype());
            let v = st.graph.new_var(aval);
            st.graph.eqns.push(Eqn {
                prim: Prim::Elementwise(ElementwiseOp::Full {
                    value: h.data.get(0),
                    shape: h.shape.clone(),
                }),
                inputs: vec![],
                out: v,
                extra_outs: Vec::new(),
            });
            v
        } else {
            let v = st.graph.new_var(Aval::new(h.shape.clone(), h.dtype()));
            st.graph.consts.push((v, h));
            v
        };
        st.lifted.insert(key, (v, a.clone()));
        Ok(v)
    }
    /// Make a value of the enclosing trace `outer` (variable `var` there) an input of this graph.
    pub(crate) fn capture(
        &self,
        outer: u64,
        var: Var,
        t: &crate::tensor::Tensor,
        aval: &Aval,
    ) -> Var {
        let mut st = self.state.borrow_mut();
        if let Some(v) = st.captured_ids.get(&(outer, var)) {
            return *v;
        }
        let v = st.graph.new_var(aval.clone());
        st.graph.inputs.push(v);
        st.captured.push((v, t.clone()));
        st.captured_ids.insert((outer, var), v);
        v
    }
    /// Append `outs = prim(inputs)` after checking the shape rule; the results with their avals.
    pub(crate) fn push(&self, prim: Prim, inputs: Vec<Var>) -> Result<Vec<(Var, Aval)>> {
        let mut st = self.state.borrow_mut();
        let avals: Vec<&Aval> = inputs.iter().map(|v| st.graph.aval(*v)).collect();
        let outs = prim.infer_outs(&avals)?;
        let vars: Vec<Var> = outs.iter().map(|a| st.graph.new_var(a.clone())).collect();
        let Some((&out, extra)) = vars.split_first() else {
            return Err(Error::Unsupported {
                op: prim.name(),
                detail: "a primitive application with no result (internal)".into(),
            });
        };
        if prim.has_effect() {
            st.graph.effects.push(out);
        }
        st.graph.eqns.push(Eqn {
            prim,
            inputs,
            out,
            extra_outs: extra.to_vec(),
        });
        Ok(vars.into_iter().zip(outs).collect())
    }
}
