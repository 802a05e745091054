//! Collectives by axis name, for use inside [`crate::pmap`] and [`crate::shard_map`] (JAX's
//! `jax.lax.psum`, `pmean`, …).
//!
//! Each one records a collective primitive into the traced program. At run time the program is cut
//! into stages at collectives: every device runs its stage, every device's operand is read back
//! (all reads issued before any wait), the host combines them in a fixed device order (the same
//! inputs give the same bits on every run) and writes each device its result before the next stage
//! runs.
//!
//! ```
//! use brigade::{pmap, psum, Array, Tensor};
//! // Each device holds one row; psum gives every device the sum of all rows.
//! let n = brigade::devices()?.len().min(2);
//! let x = Array::from_vec((0..n * 3).map(|v| v as f32).collect::<Vec<f32>>(), &[n, 3])?;
//! let f = pmap(|a: &[Tensor]| vec![psum(&a[0], "i")]).axis_name("i");
//! let y = f.call(&[x])?[0].to_vec::<f32>()?;
//! let col0: f32 = (0..n).map(|r| (r * 3) as f32).sum();
//! assert_eq!(y[0], col0);
//! assert_eq!(y.len(), n * 3);
//! # Ok::<(), brigade::Error>(())
//! ```

use std::cell::RefCell;

use crate::error::{Error, Result};
use crate::ops::{Collective, CollectiveKind, Prim};
use crate::tensor::Tensor;

thread_local! {
    /// Parallel axes bound by the pmap/shard_map being traced on this thread, innermost last.
    static AXES: RefCell<Vec<(String, usize)>> = const { RefCell::new(Vec::new()) };
}

/// Binds a named parallel axis of `size` shards until dropped.
pub(crate) struct AxisBinding;

impl AxisBinding {
    pub(crate) fn new(name: &str, size: usize) -> AxisBinding {
        AXES.with(|a| a.borrow_mut().push((name.to_string(), size)));
        AxisBinding
    }
}

impl Drop for AxisBinding {
    fn drop(&mut self) {
        // Gone already while the thread ends: nothing left to pop.
        let _ = AXES.try_with(|a| {
            a.borrow_mut().pop();
        });
    }
}

/// The parallel axes bound on this thread, outermost first (part of the key of anything traced
/// under them: a collective's meaning depends on them).
pub(crate) fn bound_axes() -> Vec<(String, usize)> {
    // None bound in destructors run while the thread ends.
    AXES.try_with(|a| a.borrow().clone()).unwrap_or_default()
}

/// The size of the bound axis `name`, or the typed error naming what is bound.
fn lookup(op: &'static str, name: &str) -> Result<usize> {
    let a = bound_axes();
    if let Some((_, n)) = a.iter().rev().find(|(m, _)| m == name) {
        return Ok(*n);
    }
    let bound = if a.is_empty() {
        "no pmap/shard_map with an axis_name is being traced".to_string()
    } else {
        format!(
            "bound axes: {}",
            a.iter()
                .map(|(m, n)| format!("'{m}' of size {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Err(Error::UnboundAxis {
        op,
        name: name.to_string(),
        bound,
    })
}

fn collective(op: &'static str, x: Option<&Tensor>, name: &str, kind: CollectiveKind) -> Tensor {
    match lookup(op, name) {
        Ok(size) => {
            let prim = Prim::Collective(Collective {
                axis_name: name.to_string(),
                size,
                kind,
            });
            match x {
                Some(x) => Tensor::apply(prim, &[x]),
                None => Tensor::apply(prim, &[]),
            }
        }
        Err(e) => Tensor::failed_here(e),
    }
}

/// Sum of `x` over all shards of the axis `axis_name`; every shard receives the sum.
/// Integer sums wrap; bool operands are refused (cast first).
pub fn psum(x: &Tensor, axis_name: &str) -> Tensor {
    collective("psum", Some(x), axis_name, CollectiveKind::Psum)
}

/// Mean of `x` over the shards of `axis_name` (the sum divided by the axis size, in the float
/// dtype of `x`). Integer operands are averaged as f32, as `psum(x) / n` does in JAX.
pub fn pmean(x: &Tensor, axis_name: &str) -> Tensor {
    if x.dtype().is_float() || x.error().is_some() {
        collective("pmean", Some(x), axis_name, CollectiveKind::Pmean)
    } else {
        match lookup("pmean", axis_name) {
            Ok(n) => psum(x, axis_name).cast(crate::DType::F32) / n as f32,
            Err(e) => Tensor::failed_here(e),
        }
    }
}

/// Elementwise maximum of `x` over the shards of `axis_name`.
pub fn pmax(x: &Tensor, axis_name: &str) -> Tensor {
    collective("pmax", Some(x), axis_name, CollectiveKind::Pmax)
}

/// Elementwise minimum of `x` over the shards of `axis_name`.
pub fn pmin(x: &Tensor, axis_name: &str) -> Tensor {
    collective("pmin", Some(x), axis_name, CollectiveKind::Pmin)
}

/// Every shard receives the operands of all shards: stacked as a new axis at `axis` (shape
/// `x.shape` with `n` inserted), or with `tiled` concatenated along the existing `axis`.
pub fn all_gather(x: &Tensor, axis_name: &str, axis: usize, tiled: bool) -> Tensor {
    collective(
        "all_gather",
        Some(x),
        axis_name,
        CollectiveKind::AllGather { axis, tiled },
    )
}

/// Sum over shards, then shard `i` keeps entry `i` along `scatter_dimension` (whose size must equal
/// the axis size), or with `tiled` block `i` of `size / n` entries.
pub fn psum_scatter(x: &Tensor, axis_name: &str, scatter_dimension: usize, tiled: bool) -> Tensor {
    collective(
        "psum_scatter",
        Some(x),
        axis_name,
        CollectiveKind::PsumScatter {
            dim: scatter_dimension,
            tiled,
        },
    )
}

/// Shard `dst` receives `x` of shard `src` for every `(src, dst)` pair; shards that are no
/// destination receive zeros. Each shard may be a source once and a destination once.
pub fn ppermute(x: &Tensor, axis_name: &str, perm: &[(usize, usize)]) -> Tensor {
    collective(
        "ppermute",
        Some(x),
        axis_name,
        CollectiveKind::Ppermute {
            perm: perm.to_vec(),
        },
    )
}

/// Shard `i` receives chunk `i` along `split_axis` from every shard, in shard order, joined along
/// `concat_axis`. Untiled (`tiled = false`, JAX's default), `x.shape[split_axis]` must equal the
/// axis size; the result drops `split_axis` and inserts an axis of that size at `concat_axis`.
/// Tiled, chunks of `size / n` are concatenated and the rank stays.
pub fn all_to_all(
    x: &Tensor,
    axis_name: &str,
    split_axis: usize,
    concat_axis: usize,
    tiled: bool,
) -> Tensor {
    collective(
        "all_to_all",
        Some(x),
        axis_name,
        CollectiveKind::AllToAll {
            split_axis,
            concat_axis,
            tiled,
        },
    )
}

/// This shard's index along `axis_name` (an `i32` scalar, different on every device).
pub fn axis_index(axis_name: &str) -> Tensor {
    collective("axis_index", None, axis_name, CollectiveKind::AxisIndex)
}

/// The number of shards along `axis_name` (a trace-time constant).
pub fn axis_size(axis_name: &str) -> Result<usize> {
    lookup("axis_size", axis_name)
}

/// [`psum`] over several axis names at once (JAX's `psum(x, ("i", "j"))`): the sum over every
/// shard of every named axis, e.g. the devices of a `pmap` and the examples of a `vmap` inside it.
pub fn psum_axes(x: &Tensor, axis_names: &[&str]) -> Tensor {
    axis_names.iter().fold(x.clone(), |t, n| psum(&t, n))
}

/// [`pmean`] over several axis names at once: the mean over all their shards (the groups have equal
/// sizes, so the mean of means is the mean).
pub fn pmean_axes(x: &Tensor, axis_names: &[&str]) -> Tensor {
    axis_names.iter().fold(x.clone(), |t, n| pmean(&t, n))
}

/// [`pmax`] over several axis names at once.
pub fn pmax_axes(x: &Tensor, axis_names: &[&str]) -> Tensor {
    axis_names.iter().fold(x.clone(), |t, n| pmax(&t, n))
}

/// [`pmin`] over several axis names at once.
pub fn pmin_axes(x: &Tensor, axis_names: &[&str]) -> Tensor {
    axis_names.iter().fold(x.clone(), |t, n| pmin(&t, n))
}
