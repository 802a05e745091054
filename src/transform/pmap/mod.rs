//! `pmap` (JAX-exact) and `shard_map` (split mode): one program, run on several devices at once.
//!
//! Both trace the function once per signature on the *per-device* shapes, with the axis name bound
//! for collectives; cut the program into stages at collectives ([`crate::lower::stages`]); and run
//! every stage on every device before waiting on any. Between stages each collective reads every
//! device's operand back (all reads issued before any wait), combines them on the host in device
//! order, and writes each device its result. Outputs stay on their devices as sharded arrays; fed
//! to the next parallel call with the same layout they are used in place (no host round trip).
//!
//! Over a [`crate::Mesh`] (`shard_map(f).mesh(&m).in_specs(..).out_specs(..)`) the devices form a
//! grid with named axes and a collective over one axis combines the devices that share their other
//! coordinates; `pmap` and the one-axis `shard_map` run on the same executor with a one-axis grid.
//!
//! This file is the user-facing builder ([`Parallel`], [`pmap`], [`shard_map`]); `plan` decides
//! devices, mapped axes and shard sizes and traces the per-device program; `mesh` does the same
//! from a mesh and partition specs; `exec` runs either.

use crate::ops::ControlOp;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::array::{Array, ShardLayout, host_data, read_all};
use crate::cache::{SyncLru, lock};
use crate::device::read_mapped;
use crate::device::{DEFAULT_PROGRAM_CACHE_CAPACITY, Device, Runtime};
use crate::error::{Error, Result};
use crate::exec::{Executable, count_program_evictions};
use crate::host::HostArray;
use crate::lower::stages::{Exchange, StagePlan, split_stages};
use crate::mesh::{NamedSharding, PartitionSpec};
use crate::ops::collective::take_block;
use crate::ops::{CollectiveKind, Prim};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Graph, Var};
use crate::trace::{TraceArg, trace_args};

mod exec;
mod mesh;
mod plan;

use exec::{ParallelExe, put};

/// Which reading of "parallel map" a [`Parallel`] follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParallelMode {
    /// JAX's `pmap`: the mapped axis length is the number of shards, one entry per device; the
    /// function sees one entry (the axis removed); outputs are stacked along `out_axes`.
    Pmap,
    /// Split mode (JAX's `shard_map`, the tutorial's reading of pmap): the mapped axis of length
    /// `B` is cut into one block of `B / n` entries per device; the function sees its block (same
    /// rank); outputs are concatenated back along `out_axes`.
    Split,
}

impl ParallelMode {
    fn op(self) -> &'static str {
        match self {
            ParallelMode::Pmap => "pmap",
            ParallelMode::Split => "shard_map",
        }
    }
}

/// A function mapped over devices by [`pmap`] or [`shard_map`]. Configure with the builder methods,
/// run with [`Parallel::call`]. Traced once per argument signature; the stages are compiled once
/// per device and reused by later calls.
///
/// On native platforms a `Parallel` is `Send + Sync` when its function is (a closure that
/// captures only `Send + Sync` values): one map, shared with `Arc` or borrowed by scoped threads,
/// may be called from several threads at once. Its caches are locked only to look up and insert
/// (never while tracing, compiling or running); threads that trace the same new signature at once
/// each trace it and the first program is kept.
pub struct Parallel<F> {
    f: F,
    mode: ParallelMode,
    label: String,
    axis_name: Option<String>,
    in_axes: Option<Vec<Option<usize>>>,
    out_axes: Option<Vec<Option<usize>>>,
    axis_size: Option<usize>,
    devices: Option<Vec<Device>>,
    static_argnums: Vec<usize>,
    /// Arguments whose shards the stages may compute outputs into (`donate_argnums`).
    donate: Vec<usize>,
    /// `shard_map` over a mesh: the mesh and the per-argument / per-output specs.
    mesh: Option<crate::mesh::Mesh>,
    in_specs: Option<Vec<PartitionSpec>>,
    out_specs: Option<Vec<PartitionSpec>>,
    /// By signature, bounded by the first device's program cache capacity.
    cache: SyncLru<Key, Arc<ParallelExe>>,
    /// Single-device emulations ([`Parallel::emulate`]) by signature, bounded likewise.
    emulated: SyncLru<Key, Arc<Executable>>,
}

/// Entry `j` of a per-output list where one entry serves every output.
fn entry(v: &[Option<usize>], j: usize) -> Option<usize> {
    if v.len() == 1 {
        v[0]
    } else {
        v.get(j).copied().flatten()
    }
}

/// `vmap` of a one-axis map, for one argument or output: from the batch axis `v` (in the full
/// array) and the device axis `p` (in the array without the batch axis), the device axis in the
/// full array and the batch axis in a device's part (pmap removes the device axis; split mode
/// keeps it).
fn swap_axes(split: bool, v: Option<usize>, p: Option<usize>) -> (Option<usize>, Option<usize>) {
    match (v, p) {
        (v, None) => (None, v),
        (None, p) => (p, None),
        (Some(v), Some(p)) => {
            let full = if p >= v { p + 1 } else { p };
            let inner = if !split && v > full { v - 1 } else { v };
            (Some(full), Some(inner))
        }
    }
}

/// The arguments of a call: borrowed (`call`) or given up (`call_donating`).
enum ArgsIn<'a> {
    Borrowed(&'a [Array]),
    Owned(Vec<Array>),
}

impl ArgsIn<'_> {
    fn as_slice(&self) -> &[Array] {
        match self {
            ArgsIn::Borrowed(a) => a,
            ArgsIn::Owned(a) => a,
        }
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    shard_avals: Vec<Aval>,
    shards: usize,
    /// Static arguments by value.
    statics: Vec<(usize, Aval, Vec<u32>)>,
}

/// Map `f` over devices, JAX-exact (`jax.pmap`): every argument with `in_axes` `Some(a)` is cut along
/// axis `a` into one entry per device (the axis length is the number of shards, at most the number
/// of devices; fewer shards use the first devices); `None` arguments are sent whole to every
/// device. Inside `f` each device sees its entry without the mapped axis, and collectives
/// ([`crate::psum`], …) over [`Parallel::axis_name`] combine the devices. Outputs are stacked
/// along `out_axes` (default 0), and stay on their devices.
///
/// ```
/// use brigade::{pmap, pmean, Array, Tensor};
/// let n = brigade::devices()?.len().min(2);
/// // Four features per device-row; every device subtracts the mean row of all devices.
/// let x = Array::from_vec((0..n * 4).map(|v| v as f32).collect::<Vec<f32>>(), &[n, 4])?;
/// let center = pmap(|a: &[Tensor]| vec![&a[0] - pmean(&a[0], "batch")]).axis_name("batch");
/// let y = center.call(&[x])?;
/// assert_eq!(y[0].shape(), &[n, 4]);
/// let v = y[0].to_vec::<f32>()?;
/// let mean0: f32 = (0..n).map(|r| (r * 4) as f32).sum::<f32>() / n as f32;
/// assert_eq!(v[0], 0.0 - mean0);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn pmap<F>(f: F) -> Parallel<F>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    Parallel::new(f, ParallelMode::Pmap)
}

/// Split mode (JAX's `shard_map` over a one-axis mesh; what the tutorial calls pmap): every argument
/// with `in_axes` `Some(a)` is cut along axis `a` into one equal block per device (a batch of
/// `B` rows gives each of `n` devices `B / n` rows, so `B` must divide evenly); `None` arguments
/// are sent whole. `f` sees its block with the same rank; outputs are concatenated back along
/// `out_axes` (default 0) or, with `None`, returned once when a collective made them identical.
/// Uses every device of [`Parallel::devices`] (default: all), or the first `axis_size`.
///
/// ```
/// use brigade::{shard_map, psum, Array, Tensor};
/// let n = brigade::devices()?.len().min(2);
/// // 8 rows over n devices: each device sums its block, psum adds the devices' sums.
/// let x = Array::from_vec((0..8 * 2).map(|v| v as f32).collect::<Vec<f32>>(), &[8, 2])?;
/// let total = shard_map(|a: &[Tensor]| vec![psum(&a[0].sum(0, false), "rows")])
///     .axis_name("rows")
///     .axis_size(n)
///     .out_axes(&[None]);
/// let y = total.call(&[x])?;
/// assert_eq!(y[0].to_vec::<f32>()?, vec![56.0, 64.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn shard_map<F>(f: F) -> Parallel<F>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    Parallel::new(f, ParallelMode::Split)
}

impl<F> Parallel<F>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    fn new(f: F, mode: ParallelMode) -> Parallel<F> {
        Parallel {
            f,
            mode,
            label: mode.op().into(),
            axis_name: None,
            in_axes: None,
            out_axes: None,
            axis_size: None,
            devices: None,
            static_argnums: Vec::new(),
            donate: Vec::new(),
            mesh: None,
            in_specs: None,
            out_specs: None,
            cache: SyncLru::new(DEFAULT_PROGRAM_CACHE_CAPACITY),
            emulated: SyncLru::new(DEFAULT_PROGRAM_CACHE_CAPACITY),
        }
    }
    /// Run over every device of `mesh` (JAX's `shard_map(f, mesh=mesh, in_specs=…, out_specs=…)`):
    /// each argument is cut into blocks as its [`Parallel::in_specs`] entry says, every device
    /// sees its block, collectives name mesh axes (a `psum` over `"model"` combines the devices
    /// that share their `"data"` coordinate), and each output is joined from the blocks as its
    /// [`Parallel::out_specs`] entry says. Replaces `devices`, `axis_name`, `axis_size`,
    /// `in_axes` and `out_axes` (giving both is an error). `shard_map` only.
    ///
    /// ```
    /// use brigade::{shard_map, psum, Array, Mesh, Tensor, P};
    /// let devs = brigade::devices()?;
    /// let n = if devs.len() >= 2 { 2 } else { 1 };
    /// let mesh = Mesh::new(&devs[..n], &[("data", n), ("model", 1)])?;
    /// // x @ w with the rows of x split over "data" and w whole on every device.
    /// let f = shard_map(|a: &[Tensor]| vec![a[0].matmul(&a[1])])
    ///     .mesh(&mesh)
    ///     .in_specs(&[P!["data", None], P![]])
    ///     .out_specs(&[P!["data", None]]);
    /// let x = Array::from_vec((0..8).map(|v| v as f32).collect::<Vec<f32>>(), &[4, 2])?;
    /// let w = Array::from_vec(vec![1.0f32, 0.0, 0.0, 2.0], &[2, 2])?;
    /// let y = f.call(&[x, w])?;
    /// assert_eq!(y[0].to_vec::<f32>()?, vec![0.0, 2.0, 2.0, 6.0, 4.0, 10.0, 6.0, 14.0]);
    /// assert_eq!(y[0].sharding().unwrap().spec(), &P!["data", None]);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn mesh(mut self, mesh: &crate::mesh::Mesh) -> Self {
        self.mesh = Some(mesh.clone());
        self
    }
    /// With a mesh: per argument, how it is split over the mesh (`P![]`: whole on every device).
    /// Entries of static arguments are ignored.
    pub fn in_specs(mut self, specs: &[PartitionSpec]) -> Self {
        self.in_specs = Some(specs.to_vec());
        self
    }
    /// With a mesh: per output (one entry for all), how the device blocks form the result. A mesh
    /// axis an entry does not name must not vary the output (the blocks along it are identical,
    /// e.g. after a `psum` over it); one that it names concatenates the blocks along that dimension.
    pub fn out_specs(mut self, specs: &[PartitionSpec]) -> Self {
        self.out_specs = Some(specs.to_vec());
        self
    }
    /// The name collectives inside `f` use for this axis (none by default, as in JAX).
    pub fn axis_name(mut self, name: &str) -> Self {
        self.axis_name = Some(name.to_string());
        self
    }
    /// Per argument: the axis to map (`Some(a)`) or `None` to send the whole argument to every
    /// device. Default: `Some(0)` for every argument. Entries of static arguments are ignored.
    pub fn in_axes(mut self, axes: &[Option<usize>]) -> Self {
        self.in_axes = Some(axes.to_vec());
        self
    }
    /// Per output: where the device axis goes (`Some(a)`), or `None` to return one value that must
    /// be identical on every device. One entry applies to every output. Default `Some(0)`.
    pub fn out_axes(mut self, axes: &[Option<usize>]) -> Self {
        self.out_axes = Some(axes.to_vec());
        self
    }
    /// pmap: the number of shards, checked against the mapped arguments (needed when every
    /// `in_axes` is None). Split mode: the number of devices to use (the first ones).
    pub fn axis_size(mut self, n: usize) -> Self {
        self.axis_size = Some(n);
        self
    }
    /// Run on these devices (in this order) instead of the global runtime's.
    pub fn devices(mut self, devices: &[Device]) -> Self {
        self.devices = Some(devices.to_vec());
        self
    }
    /// Arguments at these positions are static: passed to `f` as concrete tensors (readable with
    /// `to_array`), not mapped, and part of the cache key by value (a new value retraces).
    pub fn static_argnums(mut self, nums: &[usize]) -> Self {
        self.static_argnums = nums.to_vec();
        self
    }
    /// Donate the arguments at these positions (JAX's `pmap(f, donate_argnums=…)`): on every
    /// device the stage that reads a donated argument's shard last may compute an output of the
    /// same byte size into that shard's buffer, so a replicated parameter update
    /// (`p - lr * pmean(g)`) needs no second copy of the parameters. Shards are reused only
    /// when the arguments are given up with [`Parallel::call_donating`] and nothing else holds
    /// them (no clone of the array); otherwise the output gets a copy and every holder keeps the
    /// old values, as with [`crate::Jit::donate_argnums`] (see [`crate::Counters::donations_reused`]).
    /// A position past the arguments, a static argument, or an array passed twice while donated
    /// is a typed [`Error::BadDonation`].
    ///
    /// ```
    /// use brigade::{pmap, pmean, Array, Tensor};
    /// let n = brigade::devices()?.len().min(2);
    /// // Replicated parameters, per-device gradients: every device applies the mean gradient.
    /// let step = pmap(|a: &[Tensor]| vec![&a[0] - pmean(&a[1], "d") * 0.5])
    ///     .axis_name("d")
    ///     .in_axes(&[None, Some(0)])
    ///     .out_axes(&[None])
    ///     .donate_argnums(&[0]);
    /// let g = Array::from_vec((0..n * 2).map(|v| v as f32).collect::<Vec<f32>>(), &[n, 2])?;
    /// let mut p = Array::from_vec(vec![1.0f32, 1.0], &[2])?;
    /// for _ in 0..3 {
    ///     p = step.call_donating(vec![p, g.clone()])?.remove(0);
    /// }
    /// assert_eq!(p.shape(), &[2]);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn donate_argnums(mut self, argnums: &[usize]) -> Self {
        let mut d = argnums.to_vec();
        d.sort_unstable();
        d.dedup();
        self.donate = d;
        self
    }

    /// `vmap(pmap(f))` (JAX's `jax.vmap(jax.pmap(f))`): vectorize this parallel map over one more
    /// axis, `in_axes` per argument (`None`: shared by every example) and `out_axes` per output
    /// (one entry for all; `None`: an output that does not vary over the examples). The result is
    /// `[pmap(f)(x_b) for each example b]` stacked at `out_axes`, computed as one parallel call:
    /// each device runs `vmap(f)` on its share of every example (the map and the batch axes
    /// swapped, as JAX's batching rule of `pmap` does), so collectives over the device axis combine
    /// the devices example by example. With `axis_name`, collectives may also name the batch axis.
    ///
    /// Over a mesh (`shard_map(f).mesh(..)`, JAX's `vmap(shard_map(f, mesh, …))`) the batch axis is
    /// a new dimension that no mesh axis splits: each `in_specs`/`out_specs` entry at or after the
    /// batch position moves up one, and every device runs `vmap(f)` on its blocks.
    ///
    /// ```
    /// use brigade::{pmap, psum, Array, Tensor};
    /// let n = brigade::devices()?.len().min(2);
    /// // 3 examples of an n-device sum: x[b, d, :] -> psum over d, per example.
    /// let sums = pmap(|a: &[Tensor]| vec![psum(&a[0], "i")])
    ///     .axis_name("i")
    ///     .vmap(&[Some(0)], &[Some(0)], None);
    /// let x = Array::from_vec((0..3 * n * 2).map(|v| v as f32).collect::<Vec<f32>>(), &[3, n, 2])?;
    /// let y = sums.call(&[x])?;
    /// assert_eq!(y[0].shape(), &[3, n, 2]);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn vmap(
        self,
        in_axes: &[Option<usize>],
        out_axes: &[Option<usize>],
        axis_name: Option<&str>,
    ) -> Parallel<impl Fn(&[Tensor]) -> Vec<Tensor>> {
        // Per output (one entry for all): where the batch axis goes.
        let vm_out = if out_axes.is_empty() {
            vec![Some(0)]
        } else {
            out_axes.to_vec()
        };
        #[allow(clippy::type_complexity)]
        let (outer_in, outer_out, inner_in, inner_out, in_specs, out_specs): (
            Option<Vec<Option<usize>>>,
            Option<Vec<Option<usize>>>,
            Vec<Option<usize>>,
            Vec<Option<usize>>,
            _,
            _,
        ) = if self.mesh.is_some() {
            // Over a mesh the batch dimension is a new, unsplit dimension of every block: the
            // specs move up one at it, and each device runs vmap(f) on its blocks.
            let inner_in: Vec<Option<usize>> = in_axes
                .iter()
                .enumerate()
                .map(|(i, &a)| a.filter(|_| !self.static_argnums.contains(&i)))
                .collect();
            let inner_out = vm_out;
            let in_specs = self.in_specs.as_ref().map(|specs| {
                specs
                    .iter()
                    .zip(inner_in.iter().chain(std::iter::repeat(&None)))
                    .map(|(s, a)| a.map_or_else(|| s.clone(), |a| s.with_unsplit_dim(a)))
                    .collect::<Vec<_>>()
            });
            let out_specs = self.out_specs.as_ref().map(|specs| {
                // One spec for all outputs stays one when one batch axis serves them all.
                let k = match (specs.len(), inner_out.len()) {
                    (1, 1) => 1,
                    (1, k) => k,
                    (k, _) => k,
                };
                (0..k)
                    .map(|j| {
                        let s = &specs[j.min(specs.len() - 1)];
                        entry(&inner_out, j).map_or_else(|| s.clone(), |a| s.with_unsplit_dim(a))
                    })
                    .collect::<Vec<_>>()
            });
            (None, None, inner_in, inner_out, in_specs, out_specs)
        } else {
            let split = self.mode == ParallelMode::Split;
            let n_args = in_axes.len();
            let map_in: Vec<Option<usize>> = match &self.in_axes {
                Some(a) => a.clone(),
                None => vec![Some(0); n_args],
            };
            // Per argument: the device axis in the full array, and the batch axis in a device's part.
            let (outer_in, inner_in): (Vec<Option<usize>>, Vec<Option<usize>>) =
                if map_in.len() == n_args {
                    in_axes
                        .iter()
                        .zip(&map_in)
                        .enumerate()
                        .map(|(i, (&va, &pa))| {
                            if self.static_argnums.contains(&i) {
                                return (pa, None);
                            }
                            swap_axes(split, va, pa)
                        })
                        .unzip()
                } else {
                    // The arity error is reported by the call (with both counts).
                    (map_in.clone(), in_axes.to_vec())
                };
            // Per output (one entry for all when both lists have one): where the device axis and the
            // batch axis go.
            let map_out = self.out_axes.clone().unwrap_or_else(|| vec![Some(0)]);
            let k = map_out.len().max(vm_out.len());
            let (outer_out, inner_out): (Vec<Option<usize>>, Vec<Option<usize>>) = (0..k)
                .map(|j| swap_axes(split, entry(&vm_out, j), entry(&map_out, j)))
                .unzip();
            (
                Some(outer_in),
                Some(outer_out),
                inner_in,
                inner_out,
                self.in_specs,
                self.out_specs,
            )
        };
        let f = self.f;
        let name = axis_name.map(str::to_string);
        let body = move |xs: &[Tensor]| {
            let mut v = crate::transform::vmap::vmap(&f)
                .in_axes(&inner_in)
                .out_axes(&inner_out);
            if let Some(n) = &name {
                v = v.axis_name(n);
            }
            v.apply(xs)
        };
        Parallel {
            f: body,
            mode: self.mode,
            label: format!("vmap({})", self.label),
            axis_name: self.axis_name,
            in_axes: outer_in,
            out_axes: outer_out,
            axis_size: self.axis_size,
            devices: self.devices,
            static_argnums: self.static_argnums,
            donate: self.donate,
            mesh: self.mesh,
            in_specs,
            out_specs,
            cache: SyncLru::new(DEFAULT_PROGRAM_CACHE_CAPACITY),
            emulated: SyncLru::new(DEFAULT_PROGRAM_CACHE_CAPACITY),
        }
    }

    /// Name used in messages and kernel labels.
    pub fn named(mut self, label: &str) -> Self {
        self.label = label.to_string();
        self
    }
    /// Which reading this map follows.
    pub fn mode(&self) -> ParallelMode {
        self.mode
    }

    /// The per-device program traced for these arguments (like `jax.make_jaxpr` of the mapped
    /// function): shapes are what one device sees; collectives appear as equations.
    pub fn graph(&self, args: &[Array]) -> Result<Graph> {
        let exe = self.exe_for(args)?;
        Ok(exe.shown.clone())
    }

    /// Number of argument signatures whose parallel programs this function holds (at most the
    /// smallest [`Device::program_cache_capacity`] of the devices it last compiled for), and of
    /// its single-device emulations ([`Parallel::emulate`]).
    pub fn programs_cached(&self) -> (usize, usize) {
        (self.cache.len(), self.emulated.len())
    }

    /// Number of stages and host round trips (collective exchanges) of the program for `args`.
    pub fn stage_count(&self, args: &[Array]) -> Result<(usize, usize)> {
        let exe = self.exe_for(args)?;
        Ok((exe.plan.stages.len(), exe.plan.exchange_count()))
    }

    /// Run on the devices. Returns one sharded array per output (see [`Array::shards`]); reading
    /// one gathers it, feeding it to another parallel call with the same layout does not.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn call(&self, args: &[Array]) -> Result<Vec<Array>> {
        pollster::block_on(self.call_async(args))
    }

    /// Call with arguments given up by the caller, so that donated arguments
    /// ([`Parallel::donate_argnums`]) can give their shards to the outputs. Otherwise as `call`.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn call_donating(&self, args: Vec<Array>) -> Result<Vec<Array>> {
        pollster::block_on(self.call_donating_async(args))
    }

    /// [`Parallel::call_donating`] for every platform.
    pub async fn call_donating_async(&self, args: Vec<Array>) -> Result<Vec<Array>> {
        self.run_call(ArgsIn::Owned(args)).await
    }

    /// [`Parallel::call`] for every platform: in the browser collectives await their reads.
    pub async fn call_async(&self, args: &[Array]) -> Result<Vec<Array>> {
        self.run_call(ArgsIn::Borrowed(args)).await
    }

    async fn run_call(&self, given: ArgsIn<'_>) -> Result<Vec<Array>> {
        let args = given.as_slice();
        // Arrays spanning processes (feature `mpi`) enter as this process's part.
        #[cfg(feature = "mpi")]
        let local_parts;
        #[cfg(feature = "mpi")]
        let args = match args.iter().all(Array::is_fully_addressable) {
            true => args,
            false => {
                let mapped = match self.mesh {
                    None => Some(self.mapped_axes(args)?),
                    Some(_) => None,
                };
                local_parts = crate::distributed::local_args(
                    self.mode.op(),
                    args,
                    mapped.as_deref(),
                    self.mode == ParallelMode::Split,
                    &self.static_argnums,
                )?;
                local_parts.as_slice()
            }
        };
        self.check_donation(args)?;
        let (exe, devices, shard_args) = match &self.mesh {
            Some(mesh) => {
                let (exe, shardings) = self.prepare_mesh(mesh, args)?;
                let shard_args = self.mesh_args(args, &shardings).await?;
                (exe, mesh.devices().to_vec(), shard_args)
            }
            None => {
                let (exe, devices, plan) = self.prepare(args)?;
                let shard_args = self.shard_args(args, &plan, &devices).await?;
                (exe, devices, shard_args)
            }
        };
        // The shards are now held by `shard_args` alone when the caller gave its arrays up.
        let owned = matches!(given, ArgsIn::Owned(_));
        drop(given);
        let per_device = exe.run(&devices, shard_args, owned).await?;
        // In the browser a kernel or dispatch error arrives asynchronously: report it here.
        #[cfg(target_arch = "wasm32")]
        for d in &devices {
            d.flush_errors().await?;
        }
        // Across processes the outputs are global arrays: this process's shards of values laid
        // out over every process's devices (`exe.global`'s total).
        let total = exe.global.map_or(devices.len(), |(_, total)| total);
        Ok(exe
            .out_layouts
            .iter()
            .enumerate()
            .map(|(j, layout)| {
                Array::from_shards_of(
                    layout.clone(),
                    per_device.iter().map(|outs| outs[j].clone()).collect(),
                    devices.clone(),
                    total,
                )
            })
            .collect())
    }

    /// Run on one device, emulating the devices with [`crate::vmap`] over the same axis name
    /// (the single-device fallback): the same results as [`Parallel::call`] — collectives become
    /// array work along the emulated axis — from one device, for any number of shards (pmap: the
    /// mapped size; split mode: `axis_size`, else the number of devices it would use). Compiled as
    /// one program per signature; the outputs are ordinary arrays on `device`. A mesh
    /// `shard_map` nests one `vmap` per mesh axis, each named after its axis, so collectives over
    /// one axis or several combine the emulated devices as the mesh would.
    pub fn emulate(&self, device: &Device, args: &[Array]) -> Result<Vec<Array>> {
        // Per argument: its sharding over the mesh (a mesh call), else its mapped axis.
        let (mapped, shardings, n) = match &self.mesh {
            Some(mesh) => {
                let (traced, _) = self.mesh_shardings(mesh, args)?;
                let mut traced = traced.into_iter();
                let shardings: Vec<Option<NamedSharding>> = (0..args.len())
                    .map(|i| match self.static_argnums.contains(&i) {
                        true => None,
                        false => traced.next(),
                    })
                    .collect();
                (vec![None; args.len()], shardings, mesh.size())
            }
            None => {
                let mapped = self.mapped_axes(args)?;
                let n = match self.mode {
                    ParallelMode::Pmap => self.pmap_size(&mapped, args, usize::MAX)?,
                    ParallelMode::Split => {
                        let n = match self.axis_size {
                            Some(k) => k,
                            None => self.available_devices()?.len(),
                        };
                        self.split_size(&mapped, args, n)?
                    }
                };
                (mapped, Vec::new(), n)
            }
        };
        let is_static = |i: usize| self.static_argnums.contains(&i);
        let mut statics = Vec::new();
        for &s in &self.static_argnums {
            statics.push((
                s,
                args[s].aval().clone(),
                host_data(&args[s])?.data.to_words(),
            ));
        }
        let key = Key {
            shard_avals: args.iter().map(|a| a.aval().clone()).collect(),
            shards: n,
            statics,
        };
        let cached = self.emulated.get(&key);
        let exe = match cached {
            Some(e) => e,
            None => {
                let targs: Vec<TraceArg> = args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        if is_static(i) {
                            TraceArg::Static(a.clone())
                        } else {
                            TraceArg::Abstract(a.aval().clone())
                        }
                    })
                    .collect();
                let f = |ts: &[Tensor]| match &self.mesh {
                    Some(mesh) => self.emulated_mesh_body(mesh, &shardings, ts),
                    None => self.emulated_body(ts, &mapped, n),
                };
                let g = trace_args(&format!("{} (emulated)", self.label), &f, &targs)?;
                let e = Arc::new(Executable::new(g));
                let kept = self.emulated.insert_or_keep(
                    key,
                    e,
                    Some(device.program_cache_capacity()),
                    |_| true,
                );
                count_program_evictions(kept.evicted);
                kept.value
            }
        };
        let traced: Vec<Array> = args
            .iter()
            .enumerate()
            .filter(|(i, _)| !is_static(*i))
            .map(|(_, a)| a.clone())
            .collect();
        exe.run(device, &traced)
    }

    /// The emulation as one traced function: `vmap` over the shards (split mode: over the blocks,
    /// each mapped axis first cut into `(n, B / n)`).
    fn emulated_body(&self, ts: &[Tensor], mapped: &[Option<usize>], n: usize) -> Vec<Tensor> {
        let split = self.mode == ParallelMode::Split;
        let args: Vec<Tensor> = ts
            .iter()
            .zip(mapped)
            .map(|(t, a)| match a {
                Some(a) if split => {
                    let mut shape: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
                    let b = shape[*a] / n as i64;
                    shape.splice(*a..=*a, [n as i64, b]);
                    t.reshape(&shape)
                }
                _ => t.clone(),
            })
            .collect();
        let mut v = crate::transform::vmap::vmap(|xs: &[Tensor]| (self.f)(xs))
            .axis_size(n)
            .in_axes(mapped);
        if let Some(name) = &self.axis_name {
            v = v.axis_name(name);
        }
        if let Some(o) = &self.out_axes {
            v = v.out_axes(o);
        }
        let outs = v.apply(&args);
        if !split {
            return outs;
        }
        // Split mode: merge the shard axis back into the block axis.
        let count = outs.len();
        let axes: Vec<Option<usize>> = match &self.out_axes {
            None => vec![Some(0); count],
            Some(o) if o.len() == 1 => vec![o[0]; count],
            Some(o) => o.clone(),
        };
        outs.into_iter()
            .zip(axes)
            .map(|(t, a)| match a {
                Some(a) if t.error().is_none() => {
                    let mut shape = t.shape().to_vec();
                    let merged = shape[a] * shape.get(a + 1).copied().unwrap_or(1);
                    shape.splice(a..(a + 2).min(shape.len()), [merged]);
                    t.reshape_exact(&shape)
                }
                _ => t,
            })
            .collect()
    }
}
