//! Transforms of traced programs, one file each: [`pmap`] (and split mode, [`pmap::shard_map`]) and
//! [`vmap`], reverse-mode [`grad`]. Control flow follows (issue #4).

pub mod grad;
pub mod pmap;
pub mod vmap;
