//! Tracing: the [`Graph`](graph::Graph) IR and the tracer that records user closures into it.

pub mod graph;
pub(crate) mod tracer;
