//! Running compiled programs on devices; `jit` and the eager path.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::array::{Array, host_data};
use crate::cache::{Lru, SyncLru};
use crate::device::{
    BufferCopy, Command, Device, DeviceBuffer, DeviceLimits, Dispatch, Kernel, Runtime,
};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::host::HostArray;
use crate::lower::{Op, Program, lower_with};
use crate::ops::Prim;
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Eqn, Graph};
use crate::trace::trace_fn;

/// A graph with its per-device compiled programs, pipelines and constant buffers. `Send + Sync`:
/// shared (`Arc`) by the threads that call one compiled function; see [`crate::cache`] for how
/// its per-device cache is locked.
pub(crate) struct Executable {
    /// The program as traced (prints included).
    pub(crate) graph: Graph,
    /// What runs: `graph` without its prints, the printed values as extra outputs.
    run_graph: Graph,
    prints: Vec<crate::debug::PrintSpec>,
    /// By device and the limits the program was planned against, with the device's cache epoch
    /// when compiled (an entry from before [`Device::clear_caches`] is compiled again). Bounded:
    /// devices that come and go (new runtimes) do not pile up programs here.
    compiled: SyncLru<CompiledKey, (u64, Arc<Compiled>)>,
}

/// A device's id and the limits a program was planned against.
type CompiledKey = (u64, DeviceLimits);

/// Devices one [`Executable`] keeps compiled programs for.
const DEVICES_PER_EXECUTABLE: usize = 64;

struct Compiled {
    program: Program,
    kernels: Vec<Arc<Kernel>>,
    consts: Vec<(usize, Arc<DeviceBuffer>)>,
}

pub(crate) fn same_device(a: &Device, b: &Device) -> bool {
    a.inner.id == b.inner.id
}

impl Executable {
    pub(crate) fn new(graph: Graph) -> Executable {
        let (run_graph, prints) = crate::debug::strip_prints(&graph);
        Executable {
            graph,
            run_graph,
            prints,
            compiled: SyncLru::new(DEVICES_PER_EXECUTABLE),
        }
    }

    /// Lower for `dev` (planned against `limits`, at most the device's own), create its pipelines
    /// and upload constants: once per device and limits. The cache lock is not held while
    /// lowering or creating pipelines (see [`crate::cache::SyncLru`]): two threads that miss at
    /// once both compile, and the first to finish is kept.
    fn compiled_for(&self, dev: &Device, limits: &DeviceLimits) -> Result<Arc<Compiled>> {
        let key = (dev.inner.id, *limits);
        let epoch = dev.cache_epoch();
        if let Some((e, c)) = self.compiled.get(&key) {
            if e == epoch {
                return Ok(c);
            }
        }
        // Matmul kernels are picked by measurement on this device (cached per adapter and shape).
        let chooser = crate::device::tune::DeviceChooser { dev };
        let program = lower_with(&self.run_graph, limits, &chooser).map_err(|e| match e {
            // The lowering knows the limits, not the device: name it here.
            Error::OverLimit {
                what,
                needed,
                limit,
                unit,
                limit_name,
                ..
            } => Error::OverLimit {
                device: dev.name().to_string(),
                what,
                needed,
                limit,
                unit,
                limit_name,
            },
            e => e,
        })?;
        let kernels = program
            .launches
            .iter()
            .map(|l| dev.kernel(&l.label, &l.wgsl))
            .collect::<Result<Vec<_>>>()?;
        let consts = program
            .const_slots
            .iter()
            .map(|(s, h)| Ok((*s, dev.upload(&h.data)?)))
            .collect::<Result<Vec<_>>>()?;
        let c = Arc::new(Compiled {
            program,
            kernels,
            consts,
        });
        // Keep another thread's program if it is at least as fresh (same or later epoch); the
        // loser and anything evicted are dropped here, after the lock is released.
        let kept = self
            .compiled
            .insert_or_keep(key, (epoch, c), None, |(e, _)| *e >= epoch);
        Ok(kept.value.1)
    }

    /// The program compiled for `dev` (compiling it if needed).
    pub(crate) fn program_for(&self, dev: &Device) -> Result<Program> {
        Ok(self.compiled_for(dev, dev.limits())?.program.clone())
    }

    /// Run on `dev`. Arguments not on `dev` are copied there first. Returns without waiting for the
    /// device: outputs are device arrays that are ready when read.
    pub(crate) fn run(&self, dev: &Device, args: &[Array]) -> Result<Vec<Array>> {
        self.run_planned(dev, args, dev.limits())
    }

    /// [`Executable::run`] with the program planned against `limits` (the meet of a mesh's limits,
    /// so that every device of a parallel call runs the same kernels and rounds alike).
    pub(crate) fn run_planned(
        &self,
        dev: &Device,
        args: &[Array],
        limits: &DeviceLimits,
    ) -> Result<Vec<Array>> {
        let outs = self.run_unprinted(dev, args, limits, RunOpts::default())?;
        Ok(self.print_extras(dev, outs))
    }

    /// Run on `dev` with `opts` (extra output usages, outputs written into given arrays, or
    /// recorded into an app's encoder).
    pub(crate) fn run_with(
        &self,
        dev: &Device,
        args: &[Array],
        opts: RunOpts<'_>,
    ) -> Result<Vec<Array>> {
        if opts.encoder.is_some() && !self.prints.is_empty() {
            return Err(Error::Unsupported {
                op: "Jit::encode",
                detail: format!(
                    "of a program with {} debug_print(s): printing reads the values on the host after the \
                     program ran, which needs a submit and a wait; use `call` (or remove the prints)",
                    self.prints.len()
                ),
            });
        }
        let outs = self.run_unprinted(dev, args, dev.limits(), opts)?;
        Ok(self.print_extras(dev, outs))
    }

    /// Print the values a run's prints read (they come after the outputs) and return the outputs.
    fn print_extras(&self, dev: &Device, mut outs: Vec<Array>) -> Vec<Array> {
        if self.prints.is_empty() {
            return outs;
        }
        // Printed values come after the outputs: read them (this waits for the device) and print.
        let printed = outs.split_off(self.graph.outputs.len());
        let lines = match printed
            .iter()
            .map(crate::array::host_data)
            .collect::<Result<Vec<_>>>()
        {
            Ok(values) => {
                crate::debug::lines(&crate::debug::device_tag(dev), &self.prints, &values)
            }
            Err(e) => vec![format!(
                "[{}] debug_print: cannot read the values: {e}",
                crate::debug::device_tag(dev)
            )],
        };
        crate::debug::emit(lines);
        outs
    }

    /// Run the program, returning its outputs followed by the values its prints read.
    fn run_unprinted(
        &self,
        dev: &Device,
        args: &[Array],
        limits: &DeviceLimits,
        opts: RunOpts<'_>,
    ) -> Result<Vec<Array>> {
        let g = &self.run_graph;
        if args.len() != g.inputs.len() {
            return Err(Error::Arity {
                what: "compiled function".into(),
                expected: g.inputs.len(),
                got: args.len(),
            });
        }
        if dev.is_cpu() && (opts.into.is_some() || opts.encoder.is_some()) {
            return Err(Error::Unsupported {
                op: if opts.into.is_some() {
                    "Jit::call_into"
                } else {
                    "Jit::encode"
                },
                detail: format!(
                    "on the cpu device {}: its arrays are host data, with no wgpu buffer to write or encoder to record into; \
                     run on a GPU device with `.on(device)`",
                    dev.name()
                ),
            });
        }
        if dev.is_cpu() {
            // Host arguments are read in place; others are read back first.
            let read: Vec<Option<HostArray>> = args
                .iter()
                .map(|a| match a.host() {
                    Some(_) => Ok(None),
                    None => host_data(a).map(Some),
                })
                .collect::<Result<_>>()?;
            let hosts: Vec<&HostArray> = args
                .iter()
                .zip(&read)
                .map(|(a, r)| r.as_ref().or(a.host()).expect("read or host"))
                .collect();
            let outs = crate::cpu::eval_graph_refs(g, &hosts)?;
            return Ok(outs.into_iter().map(Array::from_host).collect());
        }
        let c = self.compiled_for(dev, limits)?;
        let p = &c.program;
        let RunOpts {
            usages,
            into,
            encoder,
        } = opts;
        crate::device::check_output_usages(usages, "Jit::output_usages")?;
        let extra = dev.output_usages() | usages;
        let mut slots: Vec<Option<Arc<DeviceBuffer>>> = vec![None; p.slot_bytes.len()];
        for (arg, &s) in args.iter().zip(&p.input_slots) {
            let on_dev = match (arg.device(), arg.buffer()) {
                (Some(d), Some(b)) if same_device(d, dev) => b.clone(),
                _ => arg
                    .to_device(dev)?
                    .buffer()
                    .cloned()
                    .ok_or_else(|| Error::Transfer {
                        device: dev.name().into(),
                        detail: "upload gave no buffer".into(),
                    })?,
            };
            slots[s] = Some(on_dev);
        }
        for (s, b) in &c.consts {
            slots[*s] = Some(b.clone());
        }
        // With `into`: each output is written into the caller's buffer. Bound as the output slot
        // itself where nothing else uses that slot's buffer and the sizes agree (kernels see the
        // bound size as `arrayLength`); computed into a temporary and copied there after the
        // program otherwise.
        let targets: Vec<Arc<DeviceBuffer>> = match into {
            Some(outs) => check_into(dev, &self.graph, p, outs)?,
            None => Vec::new(),
        };
        let mut copy_after: Vec<usize> = Vec::new();
        for (i, target) in targets.iter().enumerate() {
            let s = p.output_slots[i];
            let shared_slot =
                slots[s].is_some() || p.output_slots.iter().filter(|&&o| o == s).count() > 1;
            // wgpu refuses one buffer bound read-only and writable in one dispatch: an output that
            // shares its wgpu buffer with an input or another output goes through a temporary.
            let aliased = args
                .iter()
                .filter_map(Array::buffer)
                .chain(c.consts.iter().map(|(_, b)| b))
                .any(|b| b.same_wgpu_buffer(target))
                || targets
                    .iter()
                    .enumerate()
                    .any(|(j, t)| j != i && t.same_wgpu_buffer(target));
            let size_fits = target.size() == p.slot_bytes[s].max(4).next_multiple_of(4);
            if shared_slot || aliased || !size_fits {
                copy_after.push(i);
            } else {
                slots[s] = Some(target.clone());
            }
        }
        let output_slot = |s: usize| into.is_none() && p.output_slots.contains(&s);
        for (s, slot) in slots.iter_mut().enumerate() {
            if slot.is_none() {
                *slot = Some(if output_slot(s) {
                    dev.alloc_with(p.slot_bytes[s], extra)?
                } else {
                    dev.alloc(p.slot_bytes[s])?
                });
            }
        }
        // A copy within one wgpu buffer is refused too: such an output is staged through a
        // temporary of its own.
        let mut staged: Vec<Option<Arc<DeviceBuffer>>> = vec![None; targets.len()];
        for &i in &copy_after {
            let src = slots[p.output_slots[i]].as_ref().expect("slot filled");
            if src.same_wgpu_buffer(&targets[i]) {
                staged[i] = Some(dev.alloc(targets[i].size())?);
            }
        }
        let dispatches: Vec<Dispatch<'_>> = p
            .launches
            .iter()
            .zip(&c.kernels)
            .map(|(l, k)| Dispatch {
                kernel: k,
                buffers: l
                    .slots
                    .iter()
                    .map(|&s| &**slots[s].as_ref().expect("every slot is filled"))
                    .collect(),
                workgroups: l.workgroups,
            })
            .collect();
        let buf = |s: usize| &**slots[s].as_ref().expect("every slot is filled");
        // The copies into the caller's buffers, after the program.
        let mut finals: Vec<Command<'_>> = Vec::new();
        for &i in &copy_after {
            let src = buf(p.output_slots[i]);
            let dst = &*targets[i];
            let bytes = p.output_avals[i].size() as u64 * 4;
            if bytes == 0 {
                continue;
            }
            let copy = |src, dst| {
                Command::Copy(BufferCopy {
                    src,
                    src_offset: 0,
                    dst,
                    dst_offset: 0,
                    size: bytes,
                })
            };
            match &staged[i] {
                Some(t) => {
                    finals.push(copy(src, t));
                    finals.push(copy(t, dst));
                }
                None => finals.push(copy(src, dst)),
            }
        }
        match encoder {
            None => {
                // Loops are unrolled as they are recorded and submitted in chunks (bounded memory
                // at any iteration count). Submit and return: outputs are ready when read (reads
                // wait on the queue).
                let mut rec = dev.recorder(&dispatches)?;
                walk(&p.schedule, 0, &buf, &mut |c| rec.push(c))?;
                for c in finals {
                    rec.push(c)?;
                }
                rec.finish()?;
            }
            Some(enc) => {
                let mut commands: Vec<Command<'_>> = Vec::new();
                walk(&p.schedule, 0, &buf, &mut |c| {
                    push_encoded(&mut commands, c)
                })?;
                for c in finals {
                    push_encoded(&mut commands, c)?;
                }
                // Every buffer the app's commands will use stays out of the pool and is never
                // mapped by a read until brigade and the app have both dropped it: the commands
                // run only when the app submits.
                for b in slots.iter().flatten().chain(staged.iter().flatten()) {
                    b.share();
                }
                for t in &targets {
                    t.share();
                }
                dev.encode_commands(enc, &dispatches, &commands)?;
            }
        }
        if into.is_some() {
            // The caller's arrays, then the printed values (in fresh buffers).
            let mut outs: Vec<Array> = into.unwrap_or_default().to_vec();
            outs.extend(
                p.output_slots
                    .iter()
                    .zip(&p.output_avals)
                    .skip(targets.len())
                    .map(|(&s, aval)| {
                        Array::from_buffer(
                            dev.clone(),
                            slots[s].clone().expect("output slot filled"),
                            aval.clone(),
                        )
                    }),
            );
            return Ok(outs);
        }
        Ok(p.output_slots
            .iter()
            .zip(&p.output_avals)
            .map(|(&s, aval)| {
                Array::from_buffer(
                    dev.clone(),
                    slots[s].clone().expect("output slot filled"),
                    aval.clone(),
                )
            })
            .collect())
    }
}

/// Queue one command of `Jit::encode`: all go in the app's one encoder, so a program longer
/// than a chunk is refused.
fn push_encoded<'a>(commands: &mut Vec<Command<'a>>, c: Command<'a>) -> Result<()> {
    let limit = crate::device::CHUNK_COMMANDS;
    if commands.len() == limit {
        return Err(Error::Unsupported {
            op: "Jit::encode",
            detail: format!(
                "of a program of more than {limit} commands (loops unrolled): `call` submits such a program in \
                 chunks, waiting between them to bound host memory, which one encoder of yours cannot do; \
                 use `call`, or fewer loop iterations per encode"
            ),
        });
    }
    commands.push(c);
    Ok(())
}

/// How a run hands back its outputs (see [`Executable::run_with`]).
pub(crate) struct RunOpts<'o> {
    /// Usages added to fresh output buffers, on top of the device's
    /// ([`Device::set_output_usages`]).
    pub(crate) usages: wgpu::BufferUsages,
    /// Write the program's outputs into these device arrays (`call_into`).
    pub(crate) into: Option<&'o [Array]>,
    /// Record into this encoder instead of submitting (`encode`).
    pub(crate) encoder: Option<&'o mut wgpu::CommandEncoder>,
}

impl Default for RunOpts<'_> {
    fn default() -> Self {
        RunOpts {
            usages: wgpu::BufferUsages::empty(),
            into: None,
            encoder: None,
        }
    }
}

/// Check the arrays given to `call_into` against the program's outputs: as many, each a device
/// array on `dev` of the output's shape and dtype, no array given twice. Returns their buffers.
fn check_into(
    dev: &Device,
    graph: &Graph,
    p: &Program,
    outs: &[Array],
) -> Result<Vec<Arc<DeviceBuffer>>> {
    let n = graph.outputs.len();
    if outs.len() != n {
        return Err(Error::Arity {
            what: "call_into outputs (one array per output of the program)".into(),
            expected: n,
            got: outs.len(),
        });
    }
    let bad = |detail: String| Error::BadBuffer {
        op: "call_into",
        device: dev.name().to_string(),
        detail,
    };
    let mut bufs: Vec<Arc<DeviceBuffer>> = Vec::with_capacity(n);
    for (i, (o, want)) in outs.iter().zip(&p.output_avals).enumerate() {
        if o.shape() != want.shape.as_slice() || o.dtype() != want.dtype {
            return Err(bad(format!(
                "output {i} of the program is {want} but the array given for it is {}: pass an array of that shape and dtype",
                o.aval()
            )));
        }
        let b = match (o.device(), o.buffer()) {
            (Some(d), Some(b)) if same_device(d, dev) => b.clone(),
            (Some(d), Some(_)) => {
                return Err(bad(format!(
                    "the array given for output {i} lives on device {}, not on the device the program runs on: \
                     pass an array of this device (or run the program there with `.on(device)`)",
                    d.name()
                )));
            }
            _ => {
                return Err(bad(format!(
                    "the array given for output {i} ({}) is not in a buffer of this device (host, cpu or sharded data): \
                     pass a device array, e.g. `array.to_device(&device)?` or `Array::from_wgpu_buffer`",
                    o.aval()
                )));
            }
        };
        if let Some(j) = bufs.iter().position(|x| Arc::ptr_eq(x, &b)) {
            return Err(bad(format!(
                "the arrays given for outputs {j} and {i} share one buffer: each output needs its own"
            )));
        }
        bufs.push(b);
    }
    Ok(bufs)
}

/// Emit the device commands of a schedule, loops unrolled (`i`: the enclosing loop's iteration).
fn walk<'a>(
    ops: &[Op],
    i: usize,
    buf: &dyn Fn(usize) -> &'a DeviceBuffer,
    out: &mut dyn FnMut(Command<'a>) -> Result<()>,
) -> Result<()> {
    for op in ops {
        match op {
            Op::Launch(l) => out(Command::Dispatch(*l))?,
            Op::Copy {
                src,
                src_at,
                dst,
                dst_at,
                bytes,
            } => {
                if *bytes > 0 {
                    out(Command::Copy(BufferCopy {
                        src: buf(*src),
                        src_offset: src_at.at(i),
                        dst: buf(*dst),
                        dst_offset: dst_at.at(i),
                        size: *bytes,
                    }))?
                }
            }
            Op::Loop {
                count,
                reverse,
                body,
                odd,
            } => {
                for k in 0..*count {
                    let it = if *reverse { count - 1 - k } else { k };
                    let ops = match odd {
                        Some(o) if k % 2 == 1 => o,
                        _ => body,
                    };
                    walk(ops, it, buf, out)?;
                }
            }
        }
    }
    Ok(())
}

/// Pick the device for a call: the explicit one, else the first argument on a device, else the
/// default device of the global runtime.
pub(crate) fn pick_device(explicit: Option<&Device>, args: &[&Array]) -> Result<Device> {
    if let Some(d) = explicit {
        return Ok(d.clone());
    }
    if let Some(d) = args.iter().find_map(|a| a.device()) {
        return Ok(d.clone());
    }
    let rt = Runtime::global()?;
    rt.devices()
        .first()
        .cloned()
        .ok_or_else(|| Error::NoDevice("the global runtime has no device".into()))
}

thread_local! {
    /// Eager ops by primitive and operand signature, bounded by the program cache capacity of the
    /// device each runs on.
    static EAGER: RefCell<Lru<String, Rc<Executable>>> =
        RefCell::new(Lru::new(crate::device::DEFAULT_PROGRAM_CACHE_CAPACITY));
    /// The cpu device eager f64 ops on host data run on (see [`eager`]).
    static HOST: Device = Device::new_cpu(0, 0);
}

/// Run one primitive on concrete arrays (an op outside `jit`), cached by primitive and shapes
/// (control flow, whose sub-programs are traced afresh at every call, is not cached).
pub(crate) fn eager(prim: Prim, args: &[&Array]) -> Result<Vec<Array>> {
    let avals: Vec<&Aval> = args.iter().map(|a| a.aval()).collect();
    let out_avals = prim.infer_outs(&avals)?;
    // f64 is host-only: an op on host data that involves f64 runs on a host cpu device (the
    // reference interpreter) instead of the default device, which would refuse it.
    let f64_op = out_avals
        .iter()
        .chain(avals.iter().copied())
        .any(|a| a.dtype == DType::F64);
    let dev = if f64_op && args.iter().all(|a| a.host().is_some()) {
        HOST.with(Device::clone)
    } else {
        pick_device(None, args)?
    };
    let cacheable = !prim.is_control_flow();
    let key = if cacheable {
        format!("{prim:?}|{avals:?}")
    } else {
        String::new()
    };
    let cached = if cacheable {
        EAGER.with(|c| c.borrow_mut().get(&key).cloned())
    } else {
        None
    };
    let exe = match cached {
        Some(e) => e,
        None => {
            let mut g = Graph::default();
            let ins: Vec<_> = avals.iter().map(|a| g.new_var((*a).clone())).collect();
            g.inputs = ins.clone();
            let outs: Vec<_> = out_avals.into_iter().map(|a| g.new_var(a)).collect();
            let Some((&out, extra)) = outs.split_first() else {
                return Ok(Vec::new());
            };
            if prim.has_effect() {
                // A cond or loop that prints: its prints are printed by the executable.
                g.effects.push(out);
            }
            g.eqns.push(Eqn {
                prim,
                inputs: ins,
                out,
                extra_outs: extra.to_vec(),
            });
            g.outputs = outs;
            let e = Rc::new(Executable::new(g));
            if cacheable {
                let evicted = EAGER.with(|c| {
                    let mut c = c.borrow_mut();
                    let mut out = c.set_capacity(dev.program_cache_capacity());
                    out.extend(c.insert(key, e.clone()));
                    out
                });
                count_program_evictions(evicted);
            }
            e
        }
    };
    let owned: Vec<Array> = args.iter().map(|a| (*a).clone()).collect();
    exe.run(&dev, &owned)
}

/// The compiled programs of a function called on arrays, by argument signature: what `jit`,
/// `vmap(..).call` and `grad(..).call` share. The function is traced once per signature; the
/// program is lowered and cached per device by [`Executable`].
/// Bounded (least recently used first) by the program cache capacity of the device a call runs on.
///
/// Shared by every thread that calls the function: the lock is held for the lookup and the
/// insert only, never while tracing (tracing may call back into this cache, e.g. a `grad` traced
/// inside its own `jit`) — see [`crate::cache`].
pub(crate) struct CompileCache {
    map: SyncLru<Vec<Aval>, Arc<Executable>>,
}

/// Count (and drop) programs evicted from a full program cache.
pub(crate) fn count_program_evictions<T>(evicted: Vec<T>) {
    if !evicted.is_empty() {
        let n = evicted.len() as u64;
        drop(evicted);
        crate::counters::bump(|c| c.programs_evicted += n);
    }
}

impl CompileCache {
    pub(crate) fn new() -> CompileCache {
        CompileCache {
            map: SyncLru::new(crate::device::DEFAULT_PROGRAM_CACHE_CAPACITY),
        }
    }
    /// Signatures held.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
    /// The program of `f` for arguments like `args` (tracing it the first time; then the cache
    /// keeps at most `capacity` programs, when given). Threads that miss on the same signature at
    /// once each trace it; the first program inserted is the one every caller gets.
    pub(crate) fn executable(
        &self,
        label: &str,
        f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
        args: &[Array],
        capacity: Option<usize>,
    ) -> Result<Arc<Executable>> {
        let avals: Vec<Aval> = args.iter().map(|a| a.aval().clone()).collect();
        if let Some(e) = self.map.get(&avals) {
            return Ok(e);
        }
        let g = trace_fn(label, &f, &avals)?;
        let e = Arc::new(Executable::new(g));
        let kept = self.map.insert_or_keep(avals, e, capacity, |_| true);
        count_program_evictions(kept.evicted);
        Ok(kept.value)
    }
    /// Run `f`'s program on the explicit device, else where [`pick_device`] says.
    pub(crate) fn call(
        &self,
        label: &str,
        f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
        device: Option<&Device>,
        args: &[Array],
    ) -> Result<Vec<Array>> {
        let refs: Vec<&Array> = args.iter().collect();
        let dev = pick_device(device, &refs)?;
        let exe = self.executable(label, f, args, Some(dev.program_cache_capacity()))?;
        exe.run(&dev, args)
    }
    /// [`CompileCache::call`] with `opts`; without an explicit device, the arrays of
    /// `opts.into` also say where to run.
    pub(crate) fn call_with(
        &self,
        label: &str,
        f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
        device: Option<&Device>,
        args: &[Array],
        opts: RunOpts<'_>,
    ) -> Result<Vec<Array>> {
        let refs: Vec<&Array> = args.iter().chain(opts.into.unwrap_or_default()).collect();
        let dev = pick_device(device, &refs)?;
        let exe = self.executable(label, f, args, Some(dev.program_cache_capacity()))?;
        exe.run_with(&dev, args, opts)
    }
}

/// A function compiled with [`jit`]: traced once per input signature, lowered and cached per device.
///
/// # Threads
///
/// On native platforms a `Jit` is `Send + Sync` whenever its function is (every closure that
/// captures only `Send + Sync` values, e.g. none, or `Arc`s), so one compiled function, shared with
/// an `Arc` or borrowed by scoped threads, can be called from many threads at once, on one device
/// or several. The program caches are behind locks held only to look up or insert a program,
/// never while tracing, compiling or running; two threads that meet a new signature at the same
/// time both trace it, and the first program is the one kept (no thread waits on another's
/// compile, so no lock order with the GL lock or the caller's own locks can deadlock). Tracing
/// itself is per thread: a [`Tensor`] stays on the thread that made it. In the browser (single
/// threaded) nothing changes.
///
/// ```
/// use brigade::{jit, Array, Tensor};
/// let f = jit(|x: &[Tensor]| vec![&x[0] * 3.0]);
/// std::thread::scope(|s| {
///     for t in 0..2 {
///         let f = &f;
///         s.spawn(move || {
///             // A different shape per thread: each compiles its own signature.
///             let x = Array::from_vec(vec![t as f32; t + 1], &[t + 1]).unwrap();
///             assert_eq!(f.call(&[x]).unwrap()[0].to_vec::<f32>().unwrap(), vec![3.0 * t as f32; t + 1]);
///         });
///     }
/// });
/// assert_eq!(f.programs_cached(), 2);
/// ```
pub struct Jit<F> {
    f: F,
    label: String,
    device: Option<Device>,
    cache: CompileCache,
    /// Extra usages of the output buffers ([`Jit::output_usages`]).
    usages: wgpu::BufferUsages,
}

/// Compile `f` (JAX's `jax.jit`). The first call with a given signature (shapes and dtypes) traces `f`
/// into a graph and compiles it for the target device; later calls with the same signature reuse
/// the compiled kernels: no tracing, no pipeline creation.
///
/// ```
/// use brigade::{jit, Array, Tensor};
/// let f = jit(|x: &[Tensor]| vec![(&x[0] * 2.0 + 1.0).exp().sum_all()]);
/// let x = Array::from_vec(vec![0.0f32, 0.5, 1.0], &[3])?;
/// let y = f.call(&[x])?;
/// let want: f32 = [0.0f32, 0.5, 1.0].iter().map(|v| (v * 2.0 + 1.0).exp()).sum();
/// assert!((y[0].to_vec::<f32>()?[0] - want).abs() < 1e-3);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn jit<F>(f: F) -> Jit<F>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    Jit {
        f,
        label: "jit".into(),
        device: None,
        cache: CompileCache::new(),
        usages: wgpu::BufferUsages::empty(),
    }
}

impl<F> Jit<F>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    /// Name used in messages and kernel labels.
    pub fn named(mut self, label: &str) -> Self {
        self.label = label.to_string();
        self
    }
    /// Run on this device (by default: the device of the first device-resident argument, else the
    /// global runtime's first device).
    pub fn on(mut self, device: &Device) -> Self {
        self.device = Some(device.clone());
        self
    }
    /// The traced program for arguments of these shapes (like `jax.make_jaxpr`).
    pub fn graph(&self, args: &[Array]) -> Result<Graph> {
        Ok(self
            .cache
            .executable(&self.label, &self.f, args, None)?
            .graph
            .clone())
    }
    /// The compiled program (kernels, WGSL, buffer plan) for these arguments on `device`.
    pub fn program(&self, args: &[Array], device: &Device) -> Result<Program> {
        self.cache
            .executable(
                &self.label,
                &self.f,
                args,
                Some(device.program_cache_capacity()),
            )?
            .program_for(device)
    }
    /// Number of argument signatures whose programs this function holds (at most the
    /// [`Device::program_cache_capacity`] of the device it last compiled for).
    pub fn programs_cached(&self) -> usize {
        self.cache.len()
    }
    /// Call with concrete arrays.
    pub fn call(&self, args: &[Array]) -> Result<Vec<Array>> {
        if self.usages.is_empty() {
            return self
                .cache
                .call(&self.label, &self.f, self.device.as_ref(), args);
        }
        let opts = RunOpts {
            usages: self.usages,
            ..RunOpts::default()
        };
        self.cache
            .call_with(&self.label, &self.f, self.device.as_ref(), args, opts)
    }

    /// Give this program's output buffers `usages` on top of brigade's own (and of the device's,
    /// [`Device::set_output_usages`]), so that the app can bind them in its pipelines: e.g.
    /// `wgpu::BufferUsages::VERTEX` to draw an output as a vertex buffer
    /// ([`Array::wgpu_buffer`]). Allowed: `VERTEX`, `INDEX`, `UNIFORM` (a uniform binding is at
    /// most `max_uniform_buffer_binding_size` bytes, 64 KiB by default), `INDIRECT` (the buffer
    /// must then hold wgpu's indirect argument layout). Another usage (e.g. `MAP_WRITE`) makes
    /// every call fail with [`Error::BadBuffer`]. Outputs with different usages come from
    /// different pool buckets.
    pub fn output_usages(mut self, usages: wgpu::BufferUsages) -> Self {
        self.usages = usages;
        self
    }

    /// Run the program and write its outputs into `outs` (device arrays of the outputs' shapes
    /// and dtypes, e.g. an app's vertex buffers imported with [`Array::from_wgpu_buffer`])
    /// instead of new buffers: a simulation step `x = f(x)` updates `x` in place every frame,
    /// with no allocation and no transfer. Submits and returns without waiting, like `call`.
    ///
    /// An output array may also be an argument (`call_into(&[x.clone()], &[x])`): the results
    /// are computed into a temporary and copied over afterwards, so the program reads the old
    /// values. Each output is otherwise bound as the kernels' output buffer itself (no copy),
    /// unless the program's output is one of its inputs or constants, or shares a buffer with
    /// another output: then it is copied. Other arrays sharing an output's buffer (clones) see
    /// the new values.
    ///
    /// ```
    /// use brigade::{Array, Tensor, jit};
    /// let step = jit(|x: &[Tensor]| vec![&x[0] * 0.5 + 1.0]);
    /// # let Some(dev) = brigade::Runtime::global()?.devices().iter().find(|d| !d.is_cpu()).cloned() else { return Ok(()) };
    /// let x = Array::from_vec(vec![2.0f32, 4.0], &[2])?.to_device(&dev)?;
    /// for _ in 0..3 {
    ///     step.call_into(&[x.clone()], &[x.clone()])?;
    /// }
    /// assert_eq!(x.to_vec::<f32>()?, vec![2.0, 2.25]); // 2 stays 2; 4 → 3 → 2.5 → 2.25
    /// # Ok::<(), brigade::Error>(())
    /// ```
    ///
    /// Errors: [`Error::Arity`] (not one array per output), [`Error::BadBuffer`] (an array of
    /// another shape or dtype, on another device, on the host, or given for two outputs),
    /// [`Error::Unsupported`] on the cpu device, and those of `call`.
    pub fn call_into(&self, args: &[Array], outs: &[Array]) -> Result<()> {
        let opts = RunOpts {
            usages: self.usages,
            into: Some(outs),
            encoder: None,
        };
        self.cache
            .call_with(&self.label, &self.f, self.device.as_ref(), args, opts)
            .map(drop)
    }

    /// Record the program into the app's `encoder` without submitting or waiting, so that its
    /// compute and the app's render passes go in one submission, ordered by wgpu; the outputs
    /// are valid once the app has submitted the encoder (read them, or bind their
    /// [`Array::wgpu_buffer`], after that). `call` keeps submitting on its own.
    ///
    /// The encoder must come from the wgpu device of the device the program runs on
    /// ([`Jit::on`], else the first device argument's, else the global runtime's first).
    /// Arguments not on that device are uploaded now with `queue.write_buffer` (counted in
    /// [`crate::Counters::bytes_uploaded`]), which wgpu orders before the app's later submit.
    ///
    /// Every buffer the recorded commands use (arguments, outputs, temporaries, constants) is
    /// marked shared: it never returns to the pool, so no later brigade work can overwrite it
    /// before the app's commands have run, and reads copy it instead of mapping it, so the app's
    /// submit cannot meet a mapping brigade holds (a read of an argument that was already waiting
    /// on another thread is waited for here). Temporaries are therefore allocated afresh at
    /// every encode.
    ///
    /// Errors: [`Error::Unsupported`] for a program that needs a host step between its stages:
    /// one with `debug_print` (printing reads values on the host), or more than 4096 commands
    /// with loops unrolled (`call` submits those in chunks and waits between them); use `call`
    /// for those. Also the errors of `call`. wgpu reports an encoder from another device when
    /// the app finishes or submits it.
    pub fn encode(&self, encoder: &mut wgpu::CommandEncoder, args: &[Array]) -> Result<Vec<Array>> {
        let opts = RunOpts {
            usages: self.usages,
            into: None,
            encoder: Some(encoder),
        };
        self.cache
            .call_with(&self.label, &self.f, self.device.as_ref(), args, opts)
    }

    /// [`Jit::encode`] writing the outputs into `outs`, as [`Jit::call_into`] does: a step
    /// `x = f(x)` on an app's vertex buffer recorded into the frame's encoder.
    pub fn encode_into(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        args: &[Array],
        outs: &[Array],
    ) -> Result<()> {
        let opts = RunOpts {
            usages: self.usages,
            into: Some(outs),
            encoder: Some(encoder),
        };
        self.cache
            .call_with(&self.label, &self.f, self.device.as_ref(), args, opts)
            .map(drop)
    }
}

// Compiled programs are shared by the threads that call them (see [`Jit`]'s notes on threads).
#[cfg(not(target_arch = "wasm32"))]
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Executable>();
    send_sync::<CompileCache>();
};

impl Device {
    /// Drop this device's compiled kernels and make every program compiled for it stale: the next
    /// call of any `jit`, `pmap` or eager op on this device compiles again (same results), and
    /// frees its old program then. The calling thread's eager op cache is emptied now. Buffers,
    /// arrays and the memory pool are not touched (see [`Device::trim_pool`]).
    pub fn clear_caches(&self) {
        self.clear_kernel_cache();
        let dropped = EAGER.with(|c| c.borrow_mut().drain());
        drop(dropped);
    }
}
