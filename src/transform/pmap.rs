//! `pmap` (JAX-exact) and `shard_map` (split mode): one program, run on several devices at once.
//!
//! Both trace the function once per signature on the *per-device* shapes, with the axis name bound
//! for collectives; cut the program into stages at collectives ([`crate::lower::stages`]); and run
//! every stage on every device before waiting on any. Between stages each collective reads every
//! device's operand back (all reads issued before any wait), combines them on the host in device
//! order, and writes each device its result. Outputs stay on their devices as sharded arrays; fed
//! to the next parallel call with the same layout they are used in place (no host round trip).

use crate::ops::ControlOp;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::array::{Array, ShardLayout, host_data, read_all};
use crate::cache::{SyncLru, lock};
use crate::device::read_mapped;
use crate::device::{DEFAULT_PROGRAM_CACHE_CAPACITY, Device, Runtime};
use crate::error::{Error, Result};
use crate::exec::{Executable, TraceArg, count_program_evictions, trace_args};
use crate::host::HostArray;
use crate::lower::stages::{Exchange, StagePlan, split_stages};
use crate::ops::collective::take_block;
use crate::ops::{CollectiveKind, Prim};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Graph, Var};

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
    /// By signature, bounded by the first device's program cache capacity.
    cache: SyncLru<Key, Arc<ParallelExe>>,
    /// Single-device emulations ([`Parallel::emulate`]) by signature, bounded likewise.
    emulated: SyncLru<Key, Arc<Executable>>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    shard_avals: Vec<Aval>,
    shards: usize,
    /// Static arguments by value.
    statics: Vec<(usize, Aval, Vec<u32>)>,
}

/// A host loop's bookkeeping program: operand signature and kind (0 slice, 1 stack).
type LoopKernelKey = (Vec<Aval>, usize);

/// A traced parallel program: the per-device graph, its stages compiled per device, and what
/// varies between devices.
struct ParallelExe {
    /// The program that runs: prints taken out (their values extra outputs after the
    /// `n_outputs` real ones), conds inlined. The plan's variables are this graph's.
    graph: Graph,
    n_outputs: usize,
    /// The program as traced (what [`Parallel::graph`] shows).
    shown: Graph,
    /// Per host-driven loop of the plan (`plan.loops`, flattened in order): its body as a parallel
    /// program of its own.
    loop_bodies: Vec<Arc<ParallelExe>>,
    /// Per loop, the slicing program of each `xs` (`take` at a traced index) and the stacking
    /// program of its `ys`, by signature.
    loop_kernels: SyncLru<LoopKernelKey, Arc<Executable>>,
    /// The prints of the program (their values are kept to the end of the run).
    prints: Vec<crate::debug::PrintSpec>,
    /// How a device's axis index is shown in its printed lines (`i` for axis name "i").
    axis_label: String,
    plan: StagePlan,
    stages: Vec<Executable>,
    out_layouts: Vec<ShardLayout>,
    /// `axis_index` values per device id (uploaded once; locked only to look up and insert).
    index_arrays: Mutex<HashMap<(u64, usize), Array>>,
    /// Host buffer of all-reduce results, kept between calls so that large collectives write
    /// into memory that is already mapped in. A call takes it out for its exchange and puts it
    /// back after (a concurrent call meanwhile finds it empty and grows its own).
    scratch: Mutex<Vec<u32>>,
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
            cache: SyncLru::new(DEFAULT_PROGRAM_CACHE_CAPACITY),
            emulated: SyncLru::new(DEFAULT_PROGRAM_CACHE_CAPACITY),
        }
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
    /// `vmap(pmap(f))` (JAX's `jax.vmap(jax.pmap(f))`): vectorize this parallel map over one more
    /// axis, `in_axes` per argument (`None`: shared by every example) and `out_axes` per output
    /// (one entry for all; `None`: an output that does not vary over the examples). The result is
    /// `[pmap(f)(x_b) for each example b]` stacked at `out_axes`, computed as one parallel call:
    /// each device runs `vmap(f)` on its share of every example (the map and the batch axes
    /// swapped, as JAX's batching rule of `pmap` does), so collectives over the device axis combine
    /// the devices example by example. With `axis_name`, collectives may also name the batch axis.
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
                        match (va, pa) {
                            (va, None) => (None, va),
                            (None, pa) => (pa, None),
                            (Some(va), Some(pa)) => {
                                let full = if pa >= va { pa + 1 } else { pa };
                                let inner = if !split && va > full { va - 1 } else { va };
                                (Some(full), Some(inner))
                            }
                        }
                    })
                    .unzip()
            } else {
                // The arity error is reported by the call (with both counts).
                (map_in.clone(), in_axes.to_vec())
            };
        // Per output (one entry for all when both lists have one): where the device axis and the
        // batch axis go.
        let map_out = self.out_axes.clone().unwrap_or_else(|| vec![Some(0)]);
        let vm_out = if out_axes.is_empty() {
            vec![Some(0)]
        } else {
            out_axes.to_vec()
        };
        let k = map_out.len().max(vm_out.len());
        let pick = |v: &[Option<usize>], j: usize| {
            if v.len() == 1 {
                v[0]
            } else {
                v.get(j).copied().flatten()
            }
        };
        let (outer_out, inner_out): (Vec<Option<usize>>, Vec<Option<usize>>) = (0..k)
            .map(|j| match (pick(&vm_out, j), pick(&map_out, j)) {
                (vo, None) => (None, vo),
                (None, po) => (po, None),
                (Some(vo), Some(po)) => {
                    let full = if po >= vo { po + 1 } else { po };
                    let inner = if !split && vo > full { vo - 1 } else { vo };
                    (Some(full), Some(inner))
                }
            })
            .unzip();
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
            in_axes: Some(outer_in),
            out_axes: Some(outer_out),
            axis_size: self.axis_size,
            devices: self.devices,
            static_argnums: self.static_argnums,
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
        let (exe, _, _) = self.prepare(args)?;
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
        let (exe, _, _) = self.prepare(args)?;
        Ok((exe.plan.stages.len(), exe.plan.exchange_count()))
    }

    /// Run on the devices. Returns one sharded array per output (see [`Array::shards`]); reading
    /// one gathers it, feeding it to another parallel call with the same layout does not.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn call(&self, args: &[Array]) -> Result<Vec<Array>> {
        pollster::block_on(self.call_async(args))
    }

    /// [`Parallel::call`] for every platform: in the browser collectives await their reads.
    pub async fn call_async(&self, args: &[Array]) -> Result<Vec<Array>> {
        let (exe, devices, plan) = self.prepare(args)?;
        let shard_args = self.shard_args(args, &plan, &devices).await?;
        let per_device = exe.run(&devices, shard_args).await?;
        // In the browser a kernel or dispatch error arrives asynchronously: report it here.
        #[cfg(target_arch = "wasm32")]
        for d in &devices {
            d.flush_errors().await?;
        }
        Ok(exe
            .out_layouts
            .iter()
            .enumerate()
            .map(|(j, &layout)| {
                Array::from_shards(
                    layout,
                    per_device.iter().map(|outs| outs[j].clone()).collect(),
                    devices.clone(),
                )
            })
            .collect())
    }

    /// Run on one device, emulating the devices with [`crate::vmap`] over the same axis name
    /// (the single-device fallback): the same results as [`Parallel::call`] — collectives become
    /// array work along the emulated axis — from one device, for any number of shards (pmap: the
    /// mapped size; split mode: `axis_size`, else the number of devices it would use). Compiled as
    /// one program per signature; the outputs are ordinary arrays on `device`.
    pub fn emulate(&self, device: &Device, args: &[Array]) -> Result<Vec<Array>> {
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
                let f = |ts: &[Tensor]| self.emulated_body(ts, &mapped, n);
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

    // ---- planning --------------------------------------------------------------------------------

    fn available_devices(&self) -> Result<Vec<Device>> {
        let devs = match &self.devices {
            Some(d) => d.clone(),
            None => Runtime::global()?.devices().to_vec(),
        };
        if devs.is_empty() && self.devices.is_some() {
            return Err(Error::BadParallelArg {
                op: self.mode.op(),
                detail: "devices(&[]) leaves no device to run on: pass at least one device".into(),
            });
        }
        if devs.is_empty() {
            return Err(Error::NoDevice(format!(
                "{}: no device to run on (the device list is empty)",
                self.mode.op()
            )));
        }
        Ok(devs)
    }

    /// The mapped axis of every argument (None for broadcast and static ones), checked.
    fn mapped_axes(&self, args: &[Array]) -> Result<Vec<Option<usize>>> {
        let op = self.mode.op();
        let in_axes: Vec<Option<usize>> = match &self.in_axes {
            Some(a) if a.len() != args.len() => {
                return Err(Error::BadParallelArg {
                    op,
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
        if let Some(&s) = self.static_argnums.iter().find(|&&s| s >= args.len()) {
            return Err(Error::BadParallelArg {
                op,
                detail: format!(
                    "static_argnums names argument {s} but only {} arguments were given",
                    args.len()
                ),
            });
        }
        let is_static = |i: usize| self.static_argnums.contains(&i);
        let mapped: Vec<Option<usize>> = in_axes
            .iter()
            .enumerate()
            .map(|(i, a)| if is_static(i) { None } else { *a })
            .collect();
        for (i, (a, x)) in mapped.iter().zip(args).enumerate() {
            if let Some(a) = *a {
                if a >= x.ndim() {
                    return Err(Error::BadParallelArg {
                        op,
                        detail: format!(
                            "in_axes[{i}] is Some({a}) but argument {i} has rank {} (shape {:?}): map an axis below {}, or use None to send it whole",
                            x.ndim(),
                            x.shape(),
                            x.ndim()
                        ),
                    });
                }
            }
        }
        Ok(mapped)
    }

    /// Check the arguments, pick the devices and the per-device shapes, trace if needed.
    fn prepare(&self, args: &[Array]) -> Result<(Arc<ParallelExe>, Vec<Device>, ArgPlan)> {
        let mapped = self.mapped_axes(args)?;
        let is_static = |i: usize| self.static_argnums.contains(&i);
        let available = self.available_devices()?;
        let n = match self.mode {
            ParallelMode::Pmap => self.pmap_size(&mapped, args, available.len())?,
            ParallelMode::Split => self.split_size(&mapped, args, available.len())?,
        };
        let devices = available[..n].to_vec();
        let shard_avals: Vec<Aval> = args
            .iter()
            .enumerate()
            .filter(|(i, _)| !is_static(*i))
            .map(|(i, x)| {
                let mut s = x.shape().to_vec();
                match (mapped[i], self.mode) {
                    (Some(a), ParallelMode::Pmap) => {
                        s.remove(a);
                    }
                    (Some(a), ParallelMode::Split) => s[a] /= n,
                    (None, _) => {}
                }
                Aval::new(s, x.dtype())
            })
            .collect();
        let mut statics = Vec::new();
        for &s in &self.static_argnums {
            let h = host_data(&args[s])?;
            statics.push((s, args[s].aval().clone(), h.data.to_words()));
        }
        let key = Key {
            shard_avals,
            shards: n,
            statics,
        };
        let cached = self.cache.get(&key);
        let exe = match cached {
            Some(e) => e,
            None => {
                let e = Arc::new(self.trace(args, &key, &mapped)?);
                let capacity = devices
                    .iter()
                    .map(Device::program_cache_capacity)
                    .min()
                    .unwrap_or(DEFAULT_PROGRAM_CACHE_CAPACITY);
                let kept = self.cache.insert_or_keep(key, e, Some(capacity), |_| true);
                count_program_evictions(kept.evicted);
                kept.value
            }
        };
        Ok((exe, devices, ArgPlan { mapped, n }))
    }

    /// pmap: the mapped size is the number of shards.
    fn pmap_size(
        &self,
        mapped: &[Option<usize>],
        args: &[Array],
        available: usize,
    ) -> Result<usize> {
        let mut first: Option<(usize, usize, usize)> = None; // (arg, axis, size)
        for (i, a) in mapped.iter().enumerate() {
            let Some(a) = *a else { continue };
            let size = args[i].shape()[a];
            match first {
                None => first = Some((i, a, size)),
                Some((fi, fa, fs)) if fs != size => {
                    return Err(Error::MappedSizeMismatch {
                        op: "pmap",
                        first_arg: fi,
                        first_axis: fa,
                        first_size: fs,
                        arg: i,
                        axis: a,
                        size,
                        hint: "\nhelp: an argument every device needs whole (a weight matrix, say) takes in_axes None, e.g. .in_axes(&[Some(0), None])".into(),
                    });
                }
                Some(_) => {}
            }
        }
        let n = match (first, self.axis_size) {
            (Some((i, a, size)), Some(k)) if k != size => {
                return Err(Error::AxisSizeMismatch {
                    op: "pmap",
                    axis_size: k,
                    arg: i,
                    axis: a,
                    size,
                });
            }
            (Some((_, _, size)), _) => size,
            (None, Some(k)) => k,
            (None, None) => return Err(Error::NothingMapped { op: "pmap" }),
        };
        if n == 0 {
            return Err(Error::BadParallelArg {
                op: "pmap",
                detail: "the mapped axis is empty (size 0): there is no shard to run".into(),
            });
        }
        if n > available {
            let hint = if n.is_multiple_of(available) {
                format!(
                    "\nhelp: to cut these {n} rows into {available} blocks of {} (one block per device, as the tutorial describes), use shard_map (split mode) instead of pmap",
                    n / available
                )
            } else {
                // A reshape into `available` rows needs a multiple of `available`: pad first.
                let per = n.div_ceil(available);
                format!(
                    "\nhelp: pad the batch from {n} to {} rows, then reshape it to ({available}, {per}, ...) and pmap over the first axis, or use shard_map (split mode) on the padded batch ({available} blocks of {per})",
                    per * available
                )
            };
            return Err(Error::TooManyShards {
                shards: n,
                devices: available,
                hint,
            });
        }
        Ok(n)
    }

    /// Split mode: the number of devices; every mapped size must divide evenly.
    fn split_size(
        &self,
        mapped: &[Option<usize>],
        args: &[Array],
        available: usize,
    ) -> Result<usize> {
        let n = match self.axis_size {
            Some(0) => {
                return Err(Error::BadParallelArg {
                    op: "shard_map",
                    detail: "axis_size is 0: at least one device is needed".into(),
                });
            }
            Some(k) if k > available => {
                return Err(Error::BadParallelArg {
                    op: "shard_map",
                    detail: format!(
                        "axis_size {k} asks for {k} devices but only {available} are available: use at most {available}"
                    ),
                });
            }
            Some(k) => k,
            None => available,
        };
        for (i, a) in mapped.iter().enumerate() {
            let Some(a) = *a else { continue };
            let size = args[i].shape()[a];
            if !size.is_multiple_of(n) {
                let upto = available.max(8);
                let fits: Vec<usize> = (1..=upto).filter(|&d| size.is_multiple_of(d)).collect();
                let fits = match fits.split_last() {
                    Some((last, rest)) if !rest.is_empty() => format!(
                        "{} or {last}",
                        rest.iter()
                            .map(|d| d.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    Some((last, _)) => last.to_string(),
                    None => "1".into(),
                };
                let hint = if size <= available && size > 0 {
                    format!(
                        "\nhelp: pmap (JAX-exact) maps one entry per device: pmap would run these {size} entries as {size} shards on the first {size} devices"
                    )
                } else {
                    String::new()
                };
                return Err(Error::IndivisibleSplit {
                    op: "shard_map",
                    arg: i,
                    axis: a,
                    size,
                    devices: n,
                    fits,
                    pad: size.div_ceil(n) * n,
                    hint,
                });
            }
        }
        Ok(n)
    }

    fn trace(&self, args: &[Array], key: &Key, mapped: &[Option<usize>]) -> Result<ParallelExe> {
        let op = self.mode.op();
        let mut shard = key.shard_avals.iter();
        let targs: Vec<TraceArg> = args
            .iter()
            .enumerate()
            .map(|(i, x)| {
                if self.static_argnums.contains(&i) {
                    TraceArg::Static(x.clone())
                } else {
                    TraceArg::Abstract(shard.next().expect("one aval per traced argument").clone())
                }
            })
            .collect();
        let graph = {
            let _axis = self
                .axis_name
                .as_ref()
                .map(|name| crate::collective::AxisBinding::new(name, key.shards));
            trace_args(&self.label, &self.f, &targs)?
        };
        let traced = graph;
        // A cond's branches run inline on devices (see `ops::control`): their collectives are
        // the program's own, for what varies between devices too.
        let graph = crate::ops::control::inline_conds(&traced);
        // Which traced inputs are mapped, in graph-input order.
        let input_mapped: Vec<bool> = (0..args.len())
            .filter(|i| !self.static_argnums.contains(i))
            .map(|i| mapped[i].is_some())
            .collect();
        let input_arg: Vec<usize> = (0..args.len())
            .filter(|i| !self.static_argnums.contains(i))
            .collect();
        let why = varying_reasons(&graph, &input_mapped, &input_arg);
        let outs = graph.outputs.len();
        let out_axes: Vec<Option<usize>> = match &self.out_axes {
            None => vec![Some(0); outs],
            Some(a) if a.len() == 1 => vec![a[0]; outs],
            Some(a) if a.len() == outs => a.clone(),
            Some(a) => {
                return Err(Error::BadParallelArg {
                    op,
                    detail: format!(
                        "out_axes has {} entries but the function returns {outs} outputs: give one entry, or one per output",
                        a.len()
                    ),
                });
            }
        };
        let mut out_layouts = Vec::with_capacity(outs);
        for (j, (&v, ax)) in graph.outputs.iter().zip(&out_axes).enumerate() {
            let rank = graph.aval(v).rank();
            out_layouts.push(match (ax, self.mode) {
                (None, _) => {
                    if let Some(w) = &why[v.idx()] {
                        return Err(Error::VaryingOutput {
                            op,
                            output: j,
                            why: w.clone(),
                        });
                    }
                    ShardLayout::Replicated
                }
                (Some(a), ParallelMode::Pmap) if *a <= rank => ShardLayout::Stacked { axis: *a },
                (Some(a), ParallelMode::Split) if *a < rank => ShardLayout::Blocks { axis: *a },
                (Some(a), _) => {
                    return Err(Error::BadParallelArg {
                        op,
                        detail: format!(
                            "out_axes[{j}] is Some({a}) but output {j} has rank {rank} per device (shape {:?}); {}",
                            graph.aval(v).shape,
                            if self.mode == ParallelMode::Split {
                                "split mode concatenates along an existing axis: use an axis below the rank, or None for a value identical on every device"
                            } else {
                                "the device axis can go at most at position rank"
                            }
                        ),
                    });
                }
            });
        }
        let axis_label = self.axis_name.clone().unwrap_or_else(|| "shard".into());
        Ok(ParallelExe::build(traced, axis_label, out_layouts))
    }

    // ---- arguments ---------------------------------------------------------------------------------

    /// Each device's piece of every traced argument, on that device. Sharded arguments laid out as
    /// this call needs them, on the same devices, are used in place.
    async fn shard_args(
        &self,
        args: &[Array],
        plan: &ArgPlan,
        devices: &[Device],
    ) -> Result<Vec<Vec<Array>>> {
        let n = plan.n;
        let mut per_device: Vec<Vec<Array>> = vec![Vec::new(); n];
        for (i, x) in args.iter().enumerate() {
            if self.static_argnums.contains(&i) {
                continue;
            }
            let want = match (plan.mapped[i], self.mode) {
                (Some(a), ParallelMode::Pmap) => ShardLayout::Stacked { axis: a },
                (Some(a), ParallelMode::Split) => ShardLayout::Blocks { axis: a },
                (None, _) => ShardLayout::Replicated,
            };
            if x.shard_layout() == Some(want) && x.shard_devices() == devices {
                for (d, s) in x.shards().unwrap_or_default().iter().enumerate() {
                    per_device[d].push(s.clone());
                }
                continue;
            }
            // Host data is cut in place; anything else is read back once.
            let h: std::borrow::Cow<'_, HostArray> = match x.host() {
                Some(h) => std::borrow::Cow::Borrowed(h),
                None => std::borrow::Cow::Owned(read_all(std::slice::from_ref(x)).await?.remove(0)),
            };
            for (d, dev) in devices.iter().enumerate() {
                let piece = match want {
                    ShardLayout::Stacked { axis } => {
                        let mut b = take_block(&h, axis, d, 1);
                        b.shape.remove(axis);
                        put(&b, dev)?
                    }
                    ShardLayout::Blocks { axis } => {
                        let rows = h.shape[axis] / n;
                        put(&take_block(&h, axis, d * rows, rows), dev)?
                    }
                    ShardLayout::Replicated => put(&h, dev)?,
                };
                per_device[d].push(piece);
            }
        }
        Ok(per_device)
    }
}

/// What `prepare` decided about the arguments.
struct ArgPlan {
    mapped: Vec<Option<usize>>,
    n: usize,
}

/// For each variable, why it may differ between devices (None: identical on every device).
fn varying_reasons(g: &Graph, input_mapped: &[bool], input_arg: &[usize]) -> Vec<Option<String>> {
    let ins = (0..g.inputs.len())
        .map(|k| input_mapped[k].then(|| format!("it depends on mapped argument {}", input_arg[k])))
        .collect();
    varying(g, ins)
}

/// [`varying_reasons`] given a reason (or none) per graph input. A loop's results are judged
/// from its body: a carry varies when its start or the body makes it vary (a fixed point), and a
/// carry the body makes identical on every device (a pmean, say) is identical after the loop.
fn varying(g: &Graph, ins: Vec<Option<String>>) -> Vec<Option<String>> {
    let mut why: Vec<Option<String>> = vec![None; g.avals.len()];
    for (v, r) in g.inputs.iter().zip(ins) {
        why[v.idx()] = r;
    }
    for e in &g.eqns {
        let reason_of = |v: &Var| why[v.idx()].clone();
        let reasons: Vec<Option<String>> = match &e.prim {
            Prim::Collective(c) if c.result_is_invariant() => vec![None],
            Prim::Collective(c) if c.kind == CollectiveKind::AxisIndex => {
                vec![Some("it depends on axis_index".into())]
            }
            Prim::Collective(c) => vec![Some(format!(
                "it comes from {}, which differs per device",
                c.name()
            ))],
            Prim::Control(ControlOp::Scan(p)) => {
                let (nc, nk) = (p.n_consts, p.n_carry);
                let ins: Vec<Option<String>> = e.inputs.iter().map(reason_of).collect();
                let mut carry = ins[nc..nc + nk].to_vec();
                loop {
                    let mut body_ins = ins[..nc].to_vec();
                    body_ins.extend(carry.iter().cloned());
                    body_ins.extend(ins[nc + nk..].iter().cloned());
                    let w = varying(&p.body, body_ins);
                    let outs: Vec<Option<String>> =
                        p.body.outputs.iter().map(|v| w[v.idx()].clone()).collect();
                    let mut changed = false;
                    for (c, o) in carry.iter_mut().zip(&outs) {
                        if c.is_none() && o.is_some() {
                            *c = o.clone();
                            changed = true;
                        }
                    }
                    if !changed {
                        // No iteration: the carry is its start.
                        break if p.length == 0 {
                            ins[nc..nc + nk]
                                .iter()
                                .cloned()
                                .chain(outs[nk..].iter().cloned())
                                .collect()
                        } else {
                            outs
                        };
                    }
                }
            }
            _ => vec![e.inputs.iter().find_map(reason_of)],
        };
        for (k, o) in e.outs().enumerate() {
            why[o.idx()] = reasons
                .get(k)
                .cloned()
                .unwrap_or_else(|| reasons[0].clone());
        }
    }
    why
}

// One traced parallel program is shared by the threads that call its map.
#[cfg(not(target_arch = "wasm32"))]
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<ParallelExe>();
};

impl ParallelExe {
    /// Cut `graph` into stages and compile them (and the bodies of host-driven loops).
    fn build(shown: Graph, axis_label: String, out_layouts: Vec<ShardLayout>) -> ParallelExe {
        // Prints are taken out of the program (those in cond branches before the branches are
        // inlined); their values stay in each device's environment to the end of the run.
        let (stripped, prints) = crate::debug::strip_prints(&shown);
        let graph = crate::ops::control::inline_conds(&stripped);
        let plan = split_stages(&graph);
        let stages = plan
            .stages
            .iter()
            .map(|s| Executable::new(s.graph.clone()))
            .collect();
        let loop_bodies = plan
            .loops
            .iter()
            .flatten()
            .map(|l| {
                Arc::new(ParallelExe::build(
                    (*l.params.body).clone(),
                    axis_label.clone(),
                    Vec::new(),
                ))
            })
            .collect();
        ParallelExe {
            n_outputs: shown.outputs.len(),
            shown,
            graph,
            loop_bodies,
            loop_kernels: SyncLru::new(DEFAULT_PROGRAM_CACHE_CAPACITY),
            prints,
            axis_label,
            plan,
            stages,
            out_layouts,
            index_arrays: Mutex::new(HashMap::new()),
            scratch: Mutex::new(Vec::new()),
        }
    }

    /// A small program for a loop's bookkeeping (slicing `xs`, stacking `ys`), cached by signature.
    fn loop_kernel(
        &self,
        avals: Vec<Aval>,
        kind: usize,
        f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
    ) -> Result<Arc<Executable>> {
        let key = (avals, kind);
        if let Some(e) = self.loop_kernels.get(&key) {
            return Ok(e);
        }
        let g = crate::exec::trace_fn("scan (host loop)", &f, &key.0)?;
        let e = Arc::new(Executable::new(g));
        let kept = self.loop_kernels.insert_or_keep(key, e, None, |_| true);
        count_program_evictions(kept.evicted);
        Ok(kept.value)
    }

    /// Run a scan whose body holds collectives: iteration by iteration, each a parallel run of
    /// the body on every device (slices of `xs` taken on the devices, `ys` stacked at the end).
    async fn run_loop(
        &self,
        devices: &[Device],
        body: &ParallelExe,
        l: &crate::lower::stages::HostLoop,
        ins: Vec<Vec<Array>>,
        limits: &crate::DeviceLimits,
    ) -> Result<Vec<Vec<Array>>> {
        let p = &l.params;
        let (nc, nk) = (p.n_consts, p.n_carry);
        let n = devices.len();
        let mut carry: Vec<Vec<Array>> = ins.iter().map(|a| a[nc..nc + nk].to_vec()).collect();
        // The loop length is user input: a capacity hint only, never an allocation it sizes.
        let hint = p.length.min(4096);
        let mut ys: Vec<Vec<Vec<Array>>> = vec![vec![Vec::with_capacity(hint); p.n_ys()]; n];
        for k in 0..p.length {
            let i = if p.reverse { p.length - 1 - k } else { k };
            let index = Array::scalar(i as i32);
            let mut args = Vec::with_capacity(n);
            for (d, dev) in devices.iter().enumerate() {
                let mut a = ins[d][..nc].to_vec();
                a.extend(carry[d].iter().cloned());
                for x in &ins[d][nc + nk..] {
                    let slice = self.loop_kernel(
                        vec![x.aval().clone(), index.aval().clone()],
                        0,
                        &|t: &[Tensor]| vec![t[0].take(&t[1], 0)],
                    )?;
                    a.extend(slice.run_planned(dev, &[x.clone(), index.clone()], limits)?);
                }
                args.push(a);
            }
            let outs = Box::pin(body.run(devices, args)).await?;
            for (d, mut o) in outs.into_iter().enumerate() {
                let y = o.split_off(nk);
                carry[d] = o;
                for (j, y) in y.into_iter().enumerate() {
                    ys[d][j].push(y);
                }
            }
        }
        let mut result = Vec::with_capacity(n);
        for (d, dev) in devices.iter().enumerate() {
            let mut r = std::mem::take(&mut carry[d]);
            for y in std::mem::take(&mut ys[d]) {
                let mut y = y;
                if p.reverse {
                    y.reverse();
                }
                let avals: Vec<Aval> = y.iter().map(|a| a.aval().clone()).collect();
                if avals.is_empty() {
                    // A zero-length loop: an empty stack.
                    let a = p.body.aval(p.body.outputs[r.len()]).clone();
                    let mut shape = vec![0];
                    shape.extend_from_slice(&a.shape);
                    r.push(Array::from_host(crate::HostArray::full_checked(
                        crate::Scalar::F32(0.0).cast(a.dtype),
                        &shape,
                    )));
                    continue;
                }
                let stack = self.loop_kernel(avals, 1, &|t: &[Tensor]| {
                    let refs: Vec<&Tensor> = t.iter().collect();
                    vec![Tensor::stack(&refs, 0)]
                })?;
                r.extend(stack.run_planned(dev, &y, limits)?);
            }
            result.push(r);
        }
        Ok(result)
    }

    /// Run every stage on every device; collectives in between. Returns each device's outputs.
    async fn run(&self, devices: &[Device], args: Vec<Vec<Array>>) -> Result<Vec<Vec<Array>>> {
        let n = devices.len();
        let mut env: Vec<HashMap<Var, Array>> = vec![HashMap::new(); n];
        for (d, a) in args.into_iter().enumerate() {
            for (v, x) in self.graph.inputs.iter().zip(a) {
                env[d].insert(*v, x);
            }
        }
        // One parallel axis per map: a device's index is its position.
        for (v, _name) in &self.plan.axis_index {
            for (d, dev) in devices.iter().enumerate() {
                let key = (dev.inner.id, d);
                let cached = lock(&self.index_arrays).get(&key).cloned();
                let a = match cached {
                    Some(a) => a,
                    None => {
                        // Uploaded outside the lock; a concurrent call's copy, if first, is kept.
                        let a = put(&HostArray::scalar(crate::Scalar::I32(d as i32)), dev)?;
                        lock(&self.index_arrays).entry(key).or_insert(a).clone()
                    }
                };
                env[d].insert(*v, a);
            }
        }
        // Submit to devices whose submit returns at once first: wgpu's GL backend executes during
        // submit, so a GL device submitted first would hold back every other device.
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&d| devices[d].info().backend == "gl");
        // One plan for the whole mesh: every device runs the same kernels (same fusion, same
        // rounding), so values that are identical in the program stay bit-identical on devices
        // of different adapters too.
        let limits = devices
            .iter()
            .map(|d| *d.limits())
            .reduce(|a, b| a.meet(&b))
            .expect("at least one device");
        let mut next_loop = 0;
        for (s, stage) in self.plan.stages.iter().enumerate() {
            if !stage.graph.eqns.is_empty() || !stage.graph.outputs.is_empty() {
                for &d in &order {
                    let ins: Vec<Array> = stage.inputs.iter().map(|v| env[d][v].clone()).collect();
                    let outs = self.stages[s].run_planned(&devices[d], &ins, &limits)?;
                    for (v, x) in stage.outputs.iter().zip(outs) {
                        env[d].insert(*v, x);
                    }
                }
            }
            let exchange = &self.plan.exchanges[s];
            if !exchange.is_empty() {
                for (v, arrays) in self.exchange(devices, &env, exchange).await? {
                    for (d, a) in arrays.into_iter().enumerate() {
                        env[d].insert(v, a);
                    }
                }
            }
            for l in &self.plan.loops[s] {
                let body = self.loop_bodies[next_loop].clone();
                next_loop += 1;
                let ins: Vec<Vec<Array>> = (0..n)
                    .map(|d| l.inputs.iter().map(|v| env[d][v].clone()).collect())
                    .collect();
                let outs = self.run_loop(devices, &body, l, ins, &limits).await?;
                for (d, o) in outs.into_iter().enumerate() {
                    for (v, a) in l.outs.iter().zip(o) {
                        env[d].insert(*v, a);
                    }
                }
            }
        }
        if !self.prints.is_empty() {
            self.print(devices, &env).await;
        }
        Ok((0..n)
            .map(|d| {
                self.graph.outputs[..self.n_outputs]
                    .iter()
                    .map(|v| env[d][v].clone())
                    .collect()
            })
            .collect())
    }

    /// Read every device's printed values (all reads issued at once) and print them, one block of
    /// lines per device in device order, tagged with the device and its axis index.
    async fn print(&self, devices: &[Device], env: &[HashMap<Var, Array>]) {
        let vars: Vec<Var> = self.prints.iter().flat_map(|p| p.vars.clone()).collect();
        let arrays: Vec<Array> = env
            .iter()
            .flat_map(|e| vars.iter().map(|v| e[v].clone()))
            .collect();
        let lines = match crate::array::read_all(&arrays).await {
            Ok(values) => values
                .chunks(vars.len().max(1))
                .zip(devices)
                .enumerate()
                .flat_map(|(d, (vals, dev))| {
                    let tag = format!("{} {}={d}", crate::debug::device_tag(dev), self.axis_label);
                    crate::debug::lines(&tag, &self.prints, vals)
                })
                .collect(),
            Err(e) => vec![format!("debug_print: cannot read the printed values: {e}")],
        };
        crate::debug::emit(lines);
    }
}

impl ParallelExe {
    /// Perform the collectives of one exchange on the host: read every device's operands (all reads
    /// issued before any wait), combine in device order, and write each device its result. Returns
    /// each collective's result variable with its per-device arrays.
    async fn exchange(
        &self,
        devices: &[Device],
        env: &[HashMap<Var, Array>],
        exchange: &[Exchange],
    ) -> Result<Vec<(Var, Vec<Array>)>> {
        let n = devices.len();
        // All-reduces of 32-bit numbers on GPU devices fold straight from the mapped staging memory
        // into a reused host buffer, which is written to every device.
        let direct = |x: &Exchange| {
            x.collective.is_all_reduce()
                && self.graph.aval(x.input).dtype != crate::DType::Bool
                && (0..n).all(|d| env[d][&x.input].buffer().is_some())
        };
        let (fast, slow): (Vec<&Exchange>, Vec<&Exchange>) =
            exchange.iter().partition(|x| direct(x));
        let mut results = Vec::with_capacity(exchange.len());
        if !fast.is_empty() {
            let mut reads = Vec::with_capacity(fast.len() * n);
            for x in &fast {
                for (d, dev) in devices.iter().enumerate() {
                    let a = &env[d][&x.input];
                    if let Some(b) = a.buffer() {
                        reads.push((dev.clone(), b.clone(), a.dtype(), a.size()));
                    }
                }
            }
            // Taken out for the call (no lock held across the await or the uploads).
            let mut scratch = std::mem::take(&mut *lock(&self.scratch));
            let uploaded = read_mapped(&reads, |bytes| -> Result<Vec<Vec<Array>>> {
                fast.iter()
                    .enumerate()
                    .map(|(k, x)| {
                        let out = self.graph.aval(x.out);
                        let parts = &bytes[k * n..(k + 1) * n];
                        if !x.collective.all_reduce_into(parts, out, &mut scratch) {
                            return Err(Error::Unsupported {
                                op: x.collective.name(),
                                detail: "as a direct all-reduce".into(),
                            });
                        }
                        let words: &[u8] = bytemuck::cast_slice(&scratch[..out.size()]);
                        devices
                            .iter()
                            .map(|dev| {
                                Ok(Array::from_buffer(
                                    dev.clone(),
                                    dev.upload_bytes(words)?,
                                    out.clone(),
                                ))
                            })
                            .collect()
                    })
                    .collect()
            })
            .await;
            // Put back unless a concurrent call left a larger buffer meanwhile.
            {
                let mut kept = lock(&self.scratch);
                if kept.capacity() < scratch.capacity() {
                    *kept = scratch;
                }
            }
            for (x, arrays) in fast.iter().zip(uploaded??) {
                results.push((x.out, arrays));
            }
        }
        if !slow.is_empty() {
            let operands: Vec<Array> = slow
                .iter()
                .flat_map(|x| (0..n).map(|d| env[d][&x.input].clone()).collect::<Vec<_>>())
                .collect();
            let mut host = read_all(&operands).await?.into_iter();
            for x in slow {
                let parts: Vec<HostArray> = host.by_ref().take(n).collect();
                let combined = x.collective.combine(parts, self.graph.aval(x.out));
                let arrays = devices
                    .iter()
                    .enumerate()
                    .map(|(d, dev)| put(combined.get(d), dev))
                    .collect::<Result<Vec<_>>>()?;
                results.push((x.out, arrays));
            }
        }
        Ok(results)
    }
}

/// Host data onto `dev` (the cpu device keeps a copy on the host).
fn put(h: &HostArray, dev: &Device) -> Result<Array> {
    if dev.is_cpu() {
        return Ok(Array::from_host(h.clone()));
    }
    let buf = dev.upload(&h.data)?;
    Ok(Array::from_buffer(
        dev.clone(),
        buf,
        Aval::new(h.shape.clone(), h.dtype()),
    ))
}
