//! Tracing: the [`Graph`](graph::Graph) IR, the tracer that records user closures into it, and the
//! entry points (`trace_fn`, `trace_args`, `trace_capturing`) that transforms and higher-order
//! primitives trace their functions with.

mod entry;
pub mod graph;
pub(crate) mod tracer;

pub(crate) use entry::{TraceArg, trace_args, trace_capturing, trace_fn};
