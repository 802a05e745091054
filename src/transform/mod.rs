//! Transforms of traced programs, one file each: [`pmap`] (and split mode, [`pmap::shard_map`]),
//! [`vmap`], reverse-mode [`grad`], and structured [`control`] flow (`cond`, `switch`, `scan`,
//! `fori_loop`).

pub mod control;
pub mod grad;
pub mod pmap;
pub mod vmap;
