//! Transforms of traced programs. The user-facing builders, one module each: [`jit`], [`vmap`],
//! reverse-mode [`grad`] (`grad`, `value_and_grad`, `vjp`), [`pmap`] (and split mode,
//! [`pmap::shard_map`]; its builder, planning and executor in three files) and structured
//! [`control`] flow (`cond`, `switch`, `scan`, `fori_loop`).
//!
//! The machinery they run on lives apart, as JAX keeps `api.py` apart from its interpreters:
//! `batching` (the batching interpreter, `batch_graph`), `ad` (the reverse-mode one:
//! `Linearized`, `graph_forward`, `graph_vjp`), the tracing entry points in [`crate::trace`],
//! binding of the control primitives in `crate::ops::control`, and the executor with its
//! compile cache and eager path in `crate::exec`. Dependencies point one way: builders use the
//! machinery, the machinery and the primitives' rules never use a builder (the rules of
//! `cond`/`scan` in `crate::ops::control` call `batching`, `ad` and the tracing entry points).

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
