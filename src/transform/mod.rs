//! Transforms of traced programs, one file each: [`pmap`] (and split mode, [`pmap::shard_map`]) and
//! [`vmap`]. `grad` and control flow follow (issue #4).

pub mod pmap;
pub mod vmap;
