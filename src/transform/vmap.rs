//! `vmap`: vectorize a function over a batch axis (JAX's `jax.vmap`).
//!
//! The function is traced once per signature on the shapes of *one example* (the mapped axes
//! removed). The traced program is then re-emitted with every primitive replaced by its batching
//! rule (`Prim::batch`, declared next to each primitive family in `src/ops/`), operating on values
//! that carry the batch axis in front — or that do not vary over the batch at all, which the rules
//! keep unbatched as long as they can. Re-emitting goes through ordinary tensor operations, so
//! `vmap` composes: inside `jit`, `pmap` or another `vmap` the batched program is staged into the
//! enclosing trace; on concrete arrays [`Vmap::call`] compiles it as one program.
//!
//! With an `axis_name`, collectives over that name inside the function act along the batch axis
//! (`psum` sums the examples, `axis_index` numbers them), as in JAX.
//!
//! This module is the user-facing builder; the re-emitting itself is the batching interpreter in
//! `crate::transform::batching`, which the rules of higher-order primitives call too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::array::Array;
use crate::cache::lock;
use crate::error::{Error, Result};
use crate::exec::CompileCache;
use crate::ops::{BatchCtx, Batched, move_axis, with_batch};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Graph};
use crate::trace::{TraceArg, trace_capturing};
use crate::transform::batching::batch_graph;

/// One example's signature, the batch size, and the parallel axes bound around the application
/// (collectives over them are traced with their sizes).
type ExampleKey = (Vec<Aval>, usize, Vec<(String, usize)>);

/// A function vectorized by [`vmap`]; configure with the builder methods, then [`Vmap::apply`] it
/// to tensors (composable) or [`Vmap::call`] it on arrays (compiled).
///
/// On native platforms a `Vmap` is `Send + Sync` when its function is: one vectorized function
/// may be applied or called from several threads at once. Its caches are locked only to look up
/// and insert, never while tracing (see [`crate::jit`]'s notes on threads).
pub struct Vmap<F> {
    f: F,
    label: String,
    axis_name: Option<String>,
    in_axes: Option<Vec<Option<usize>>>,
    out_axes: Option<Vec<Option<usize>>>,
    axis_size: Option<usize>,
    device: Option<crate::Device>,
    /// Per-example programs by per-example signature (locked only to look up and insert: the
    /// trace runs unlocked, and may re-enter this `Vmap` for another signature).
    traced: Mutex<HashMap<ExampleKey, Arc<Graph>>>,
    /// Compiled batched programs by batched signature ([`Vmap::call`]).
    compiled: CompileCache,
}

/// Vectorize `f` over a batch axis (JAX's `jax.vmap`): every argument with `in_axes` `Some(a)` has
/// its axis `a` mapped (all mapped sizes must agree), `None` arguments are shared by every example.
/// `f` is written for one example. Outputs carry the batch axis at `out_axes` (default 0).
///
/// ```
/// use brigade::{vmap, Array, Tensor};
/// // A per-example dot product, vectorized over 3 examples.
/// let dot = vmap(|a: &[Tensor]| vec![(&a[0] * &a[1]).sum_all()]);
/// let x = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
/// let w = Array::from_vec(vec![10.0f32, 1.0], &[2])?;
/// let y = dot.in_axes(&[Some(0), None]).call(&[x, w])?;
/// assert_eq!(y[0].to_vec::<f32>()?, vec![12.0, 34.0, 56.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn vmap<F>(f: F) -> Vmap<F>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    Vmap {
        f,
        label: "vmap".into(),
        axis_name: None,
        in_axes: None,
        out_axes: None,
        axis_size: None,
        device: None,
        traced: Mutex::new(HashMap::new()),
        compiled: CompileCache::new(),
    }
}

impl<F> Vmap<F>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    /// Name the batch axis, for collectives inside `f` (`psum(x, name)` sums over the examples).
    pub fn axis_name(mut self, name: &str) -> Self {
        self.axis_name = Some(name.to_string());
        self
    }
    /// Per argument: the mapped axis (`Some(a)`) or `None` (shared). Default `Some(0)` for all.
    pub fn in_axes(mut self, axes: &[Option<usize>]) -> Self {
        self.in_axes = Some(axes.to_vec());
        self
    }
    /// Per output (or one entry for all): where the batch axis goes, or `None` for an output that
    /// does not vary over the batch. Default `Some(0)`.
    pub fn out_axes(mut self, axes: &[Option<usize>]) -> Self {
        self.out_axes = Some(axes.to_vec());
        self
    }
    /// The batch size: needed when every `in_axes` is None, checked against the data otherwise.
    pub fn axis_size(mut self, n: usize) -> Self {
        self.axis_size = Some(n);
        self
    }
    /// Name used in messages and kernel labels.
    pub fn named(mut self, label: &str) -> Self {
        self.label = label.to_string();
        self
    }
    /// Run [`Vmap::call`] on this device.
    pub fn on(mut self, device: &crate::Device) -> Self {
        self.device = Some(device.clone());
        self
    }

    /// Apply to tensors: concrete ones run the batched program eagerly, traced ones (inside `jit`,
    /// `pmap`, another `vmap`) stage it into their trace. Errors come back as failed tensors, and
    /// fail the enclosing trace.
    pub fn apply(&self, args: &[Tensor]) -> Vec<Tensor> {
        match self.apply_inner(args) {
            Ok(v) => v,
            Err(e) => vec![Tensor::failed_here(e)],
        }
    }

    /// Call on arrays: the batched program is traced and compiled once per signature (one fused
    /// program, like `jit(vmap(f))` in JAX), then run on the device.
    pub fn call(&self, args: &[Array]) -> Result<Vec<Array>> {
        self.compiled.call(
            &self.label,
            &|ts| self.apply(ts),
            self.device.as_ref(),
            args,
        )
    }

    /// Number of argument signatures whose compiled programs [`Self::call`] holds (at most the
    /// [`crate::Device::program_cache_capacity`] of the device it last compiled for).
    pub fn programs_cached(&self) -> usize {
        self.compiled.len()
    }

    /// The compiled program for these arguments (what [`Self::call`] runs).
    pub fn graph(&self, args: &[Array]) -> Result<Graph> {
        Ok(self
            .compiled
            .executable(&self.label, &|ts| self.apply(ts), args, None)?
            .graph
            .clone())
    }

    fn apply_inner(&self, args: &[Tensor]) -> Result<Vec<Tensor>> {
        if let Some(e) = args.iter().find_map(|t| t.error()) {
            return Err(e.clone());
        }
        let in_axes: Vec<Option<usize>> = match &self.in_axes {
            Some(a) if a.len() != args.len() => {
                return Err(Error::BadParallelArg {
                    op: "vmap",
                    detail: format!(
                        "in_axes has {} entries but {} arguments were given: give one entry (Some(axis) or None) per argument",
                        a.len(),
                        args.len()
                    ),
                });
            }
            Some(a) => a.clone(),
            None => vec![Some(0); args.len()],
        };
        // The batch size, and the same checks (and messages) as pmap's.
        let b = crate::transform::mapped_size("vmap", &in_axes, self.axis_size, "", |i, a| {
            let t = &args[i];
            if a >= t.ndim() {
                return Err(Error::BadParallelArg {
                    op: "vmap",
                    detail: format!(
                        "in_axes[{i}] is Some({a}) but argument {i} has rank {} (shape {:?}): map an axis below {}, or use None to share it",
                        t.ndim(),
                        t.shape(),
                        t.ndim()
                    ),
                });
            }
            Ok(t.shape()[a])
        })?;
        // Batch axes to the front; the per-example signature.
        let mut vals: Vec<Batched> = Vec::with_capacity(args.len());
        let mut avals = Vec::with_capacity(args.len());
        for (t, a) in args.iter().zip(&in_axes) {
            match a {
                Some(a) => {
                    let moved = move_axis(t, *a, 0);
                    avals.push(Aval::new(moved.shape()[1..].to_vec(), t.dtype()));
                    vals.push((moved, true));
                }
                None => {
                    avals.push(Aval::new(t.shape().to_vec(), t.dtype()));
                    vals.push((t.clone(), false));
                }
            }
        }
        let (g, captured) = self.per_example(&avals, b)?;
        let ctx = BatchCtx {
            size: b,
            axis_name: self.axis_name.as_deref(),
        };
        // Re-emit the program with batching rules: the function's own inputs, then the enclosing
        // traces' values it closed over (shared by every example).
        let ins: Vec<Batched> = vals
            .into_iter()
            .chain(captured.into_iter().map(|t| (t, false)))
            .collect();
        let results = batch_graph(&g, ins, &ctx)?;
        let outs = results.len();
        let out_axes: Vec<Option<usize>> = match &self.out_axes {
            None => vec![Some(0); outs],
            Some(a) if a.len() == 1 => vec![a[0]; outs],
            Some(a) if a.len() == outs => a.clone(),
            Some(a) => {
                return Err(Error::BadParallelArg {
                    op: "vmap",
                    detail: format!(
                        "out_axes has {} entries but the function returns {outs} outputs: give one entry, or one per output",
                        a.len()
                    ),
                });
            }
        };
        results
            .into_iter()
            .zip(out_axes)
            .enumerate()
            .map(|(j, (val, ax))| {
                match ax {
                    None if val.1 => Err(Error::VaryingOutput {
                        op: "vmap",
                        output: j,
                        why: "it depends on a mapped argument".into(),
                    }),
                    None => Ok(val.0),
                    Some(a) => {
                        let rank = val.0.ndim() + usize::from(!val.1);
                        if a >= rank {
                            return Err(Error::BadParallelArg {
                                op: "vmap",
                                detail: format!(
                                    "out_axes[{j}] is Some({a}) but output {j} has rank {rank} with the batch axis: use an axis below {rank}"
                                ),
                            });
                        }
                        Ok(move_axis(&with_batch(&val, b), 0, a))
                    }
                }
            })
            .collect()
    }

    /// The program of one example and the enclosing traces' values it closed over. Traced once
    /// per signature and batch size, unless it closes over traced values (those change with every
    /// enclosing trace, so such a function is traced on every application).
    fn per_example(&self, avals: &[Aval], b: usize) -> Result<(Arc<Graph>, Vec<Tensor>)> {
        let key = (avals.to_vec(), b, crate::collective::bound_axes());
        if let Some(g) = lock(&self.traced).get(&key) {
            return Ok((g.clone(), Vec::new()));
        }
        let args: Vec<TraceArg> = avals.iter().cloned().map(TraceArg::Abstract).collect();
        let (g, captured) = {
            let _axis = self
                .axis_name
                .as_ref()
                .map(|n| crate::collective::AxisBinding::new(n, b));
            trace_capturing(&self.label, &self.f, &args)?
        };
        let g = Arc::new(g);
        if captured.is_empty() {
            // Another thread may have traced the same signature meanwhile: keep the first graph.
            let g = lock(&self.traced).entry(key).or_insert(g).clone();
            return Ok((g, captured));
        }
        Ok((g, captured))
    }
}
