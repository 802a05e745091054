//! Browser exports for brigade's demo page in `web/` (the `brigade-web` crate, built for
//! `wasm32-unknown-unknown` with wasm-bindgen by `web/build.sh`).
//!
//! Every export is an `async fn` that returns a JSON string (or rejects with an error's text): the
//! page awaits it, draws what it measured, and never blocks. The numbers come from brigade's real
//! kernels on the browser's WebGPU devices (one `requestAdapter` per logical device, `webgpu:N`),
//! or, without WebGPU, from `cpu:N` devices. Each demo checks its result against the CPU
//! reference interpreter (a `cpu` device in the same wasm) within [`TOL`].
//!
//! Timings are `performance.now()` around awaited work: upload, submission and read-back.
//! While a demo runs, the exports call the page's `brigadeEvent(kind, json)` (lane lit, lane done)
//! so that the page can show each device's work as it happens.
//!
//! The crate is plain async Rust over brigade's public API: natively the same functions run on any
//! layout, which the unit tests beside each demo use.
//!
//! One file per idea: the page's side (`page.rs`: clock, events, panic hook), JSON out
//! (`json.rs`), the demos' data and checks (`data.rs`), the session of devices and compiled
//! programs (`session.rs`), the demos (`basics.rs`, `advanced.rs`, `training.rs`, `matmul.rs`, and the topic cards in
//! `cards.rs`),
//! the benchmark (`bench.rs`) and the browser's error checks (`errors.rs`). The exports the page
//! calls are re-exported here under their JS names.

mod advanced;
mod basics;
mod bench;
mod cards;
mod data;
mod errors;
mod json;
mod matmul;
mod page;
mod session;
mod training;

pub use advanced::{barrier, divisibility, in_axes_demo, nesting};
pub use basics::basics;
pub use bench::bench;
pub use cards::{debug_errors, debug_prints, model_parallel, placement, planner, random_keys};
pub use errors::error_capture_check;
pub use matmul::{row_split_matmul, sweep_point, timeline};
pub use session::{counters_json, start};
pub use training::{train_eval, train_init, train_step};

/// The tolerance of every check on the page: `max |device - reference| / max(1, max |reference|)`.
/// Results are f32 sums of at most a few thousand products, computed in a different order than
/// the reference (which accumulates in f64).
pub const TOL: f64 = 1e-4;
