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

use crate::error::{Error, Result};

/// The size of the mapped axis of a `vmap` or `pmap` call, with the checks (and messages) both
/// share: every argument with `in_axes` `Some(axis)` must have the same size along its axis, and
/// `axis_size`, when given, must agree with them (it is the size when nothing is mapped).
/// `size_of(i, axis)` is argument `i`'s size along `axis`, or the error for an axis it lacks;
/// `hint` ends the message of sizes that disagree.
pub(crate) fn mapped_size(
    op: &'static str,
    in_axes: &[Option<usize>],
    axis_size: Option<usize>,
    hint: &str,
    size_of: impl Fn(usize, usize) -> Result<usize>,
) -> Result<usize> {
    let mut first: Option<(usize, usize, usize)> = None; // (arg, axis, size)
    for (i, a) in in_axes.iter().enumerate() {
        let Some(a) = *a else { continue };
        let size = size_of(i, a)?;
        match first {
            None => first = Some((i, a, size)),
            Some((fi, fa, fs)) if fs != size => {
                return Err(Error::MappedSizeMismatch {
                    op,
                    first_arg: fi,
                    first_axis: fa,
                    first_size: fs,
                    arg: i,
                    axis: a,
                    size,
                    hint: hint.into(),
                });
            }
            Some(_) => {}
        }
    }
    match (first, axis_size) {
        (Some((i, a, size)), Some(k)) if k != size => Err(Error::AxisSizeMismatch {
            op,
            axis_size: k,
            arg: i,
            axis: a,
            size,
        }),
        (Some((_, _, size)), _) => Ok(size),
        (None, Some(k)) => Ok(k),
        (None, None) => Err(Error::NothingMapped { op }),
    }
}
