//! Transforms of traced programs, one module each: [`pmap`] (and split mode, [`pmap::shard_map`];
//! its builder, planning and executor in three files),
//! [`vmap`], reverse-mode [`grad`], and structured [`control`] flow (`cond`, `switch`, `scan`,
//! `fori_loop`).

pub(crate) mod ad;
pub(crate) mod batching;
pub mod control;
pub mod grad;
pub mod jit;
pub mod pmap;
pub mod vmap;
