//! Transforms of traced programs, one file each: [`pmap`] (and split mode, [`pmap::shard_map`]).
//! `vmap`, `grad` and control flow follow (issue #4).

pub mod pmap;
