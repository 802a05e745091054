//! Running compiled programs on devices: [`Executable`] (a graph with its per-device compiled
//! programs), the eager path ([`eager`]: one primitive on concrete arrays) and the compile cache
//! ([`CompileCache`]) that the user-facing transforms (`jit`, `vmap(..).call`, `grad(..).call`,
//! `pmap`) run their traced functions through. The builders themselves live in
//! [`crate::transform`]; nothing here depends on them.

mod compile_cache;
mod eager;

pub(crate) use compile_cache::{CompileCache, count_program_evictions};
pub(crate) use eager::{eager, pick_device};

use std::sync::Arc;

use crate::array::{Array, host_data};
use crate::cache::SyncLru;
use crate::device::{BufferCopy, Command, Device, DeviceBuffer, DeviceLimits, Dispatch, Kernel};
use crate::error::{Error, Result};
use crate::host::HostArray;
use crate::lower::{Op, Program, lower_donating};
use crate::trace::graph::Graph;

/// A graph with its per-device compiled programs, pipelines and constant buffers. `Send + Sync`:
/// shared (`Arc`) by the threads that call one compiled function; see [`crate::cache`] for how
/// its per-device cache is locked.
pub(crate) struct Executable {
    /// The program as traced (prints included).
    pub(crate) graph: Graph,
    /// What runs: `graph` without its prints, the printed values as extra outputs.
    run_graph: Graph,
    prints: Vec<crate::debug::PrintSpec>,
    /// Arguments donated to the outputs (`Jit::donate_argnums`), sorted, no repeats.
    donate: Vec<usize>,
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
        Executable::donating(graph, &[])
    }

    /// An executable whose arguments `donate` (positions) give their buffers to the outputs.
    pub(crate) fn donating(graph: Graph, donate: &[usize]) -> Executable {
        let (run_graph, prints) = crate::debug::strip_prints(&graph);
        let mut donate = donate.to_vec();
        donate.sort_unstable();
        donate.dedup();
        Executable {
            graph,
            run_graph,
            prints,
            donate,
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
        let (g, donate) = (&self.run_graph, &self.donate);
        let program = lower_donating(g, limits, &chooser, donate).map_err(|e| match e {
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

    /// The memory a call on `dev` takes, from the program it runs there (on the cpu device,
    /// which interprets the graph, the plan a GPU device of its limits would allocate).
    pub(crate) fn memory_analysis(&self, dev: &Device) -> Result<crate::plan::MemoryAnalysis> {
        let limits = dev.limits();
        let max = limits.max_array_bytes();
        if dev.is_cpu() {
            let chooser = crate::ops::matmul::kernel::DefaultChooser;
            let p = lower_donating(&self.run_graph, limits, &chooser, &self.donate)?;
            return Ok(crate::plan::MemoryAnalysis::of(&p, &self.donate, max));
        }
        let c = self.compiled_for(dev, limits)?;
        Ok(crate::plan::MemoryAnalysis::of(
            &c.program,
            &self.donate,
            max,
        ))
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

    /// [`Executable::run_planned`] with arguments the caller may have given up (`owned`: see
    /// [`RunOpts::owned`]), for a parallel stage that hands a donated shard over.
    pub(crate) fn run_planned_with(
        &self,
        dev: &Device,
        args: Vec<Array>,
        limits: &DeviceLimits,
        owned: bool,
    ) -> Result<Vec<Array>> {
        let opts = RunOpts {
            owned,
            ..RunOpts::default()
        };
        let outs = self.run_unprinted(dev, &args, limits, opts)?;
        drop(args);
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
        check_donation(&self.donate, args)?;
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
            owned,
        } = opts;
        let encoding = encoder.is_some();
        // Computing from an output of an encode whose commands never ran would compute from
        // stale data: checked here (a 4-byte read, once per such output). An encode reading one
        // relies on the app submitting both encoders in order.
        #[cfg(not(target_arch = "wasm32"))]
        if !encoding {
            for a in args.iter().filter(|a| a.encode_pending()) {
                pollster::block_on(a.check_computed())?;
            }
        }
        crate::device::check_output_usages(usages, "Jit::output_usages")?;
        let extra = dev.output_usages() | usages;
        // Donated arguments an output takes (before the slots below hold more handles).
        let donated: Vec<usize> = {
            let mut d: Vec<usize> = p.donated.iter().map(|&(a, _)| a).collect();
            d.dedup();
            d
        };
        let reusable: Vec<bool> = donated
            .iter()
            .map(|&a| donation_reusable(&args[a], dev, owned, extra))
            .collect();
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
        // A donated buffer someone else still holds (a clone of the array, an app, a view) keeps
        // its values: the output gets a fresh buffer, filled with the argument first, and the
        // program updates that instead.
        let mut donation_copies: Vec<(Arc<DeviceBuffer>, usize, u64)> = Vec::new();
        for (&a, &reuse) in donated.iter().zip(&reusable) {
            let s = p.input_slots[a];
            if reuse {
                crate::counters::bump(|c| c.donations_reused += 1);
                continue;
            }
            crate::counters::bump(|c| c.donations_copied += 1);
            let src = slots[s].take().expect("argument slot filled");
            slots[s] = Some(dev.alloc_with(p.slot_bytes[s], extra)?);
            donation_copies.push((src, s, args[a].aval().size_bytes() as u64));
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
        // Segments of arrays larger than one binding: sub-ranges of their slots' buffers.
        let views: Vec<Vec<Option<Arc<DeviceBuffer>>>> = p
            .launches
            .iter()
            .map(|l| {
                l.views
                    .iter()
                    .zip(&l.slots)
                    .map(|(v, &s)| {
                        v.map(|v| {
                            slots[s]
                                .as_ref()
                                .expect("every slot is filled")
                                .view(v.offset, v.size)
                        })
                        .transpose()
                    })
                    .collect::<Result<_>>()
            })
            .collect::<Result<_>>()?;
        let dispatches: Vec<Dispatch<'_>> = p
            .launches
            .iter()
            .zip(&c.kernels)
            .zip(&views)
            .map(|((l, k), views)| Dispatch {
                kernel: k,
                buffers: l
                    .slots
                    .iter()
                    .enumerate()
                    .map(|(j, &s)| match views.get(j) {
                        Some(Some(v)) => &**v,
                        _ => &**slots[s].as_ref().expect("every slot is filled"),
                    })
                    .collect(),
                workgroups: l.workgroups,
            })
            .collect();
        let buf = |s: usize| &**slots[s].as_ref().expect("every slot is filled");
        let firsts: Vec<Command<'_>> = donation_copies
            .iter()
            .filter(|(_, _, bytes)| *bytes > 0)
            .map(|(src, s, bytes)| {
                Command::Copy(BufferCopy {
                    src,
                    src_offset: 0,
                    dst: buf(*s),
                    dst_offset: 0,
                    size: *bytes,
                })
            })
            .collect();
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
                for c in firsts {
                    rec.push(c)?;
                }
                walk(
                    &p.schedule,
                    0,
                    &buf,
                    &mut Submitting {
                        rec: &mut rec,
                        dev,
                        slots: &slots,
                    },
                )?;
                for c in finals {
                    rec.push(c)?;
                }
                rec.finish()?;
            }
            Some(enc) => {
                let mut commands: Vec<Command<'_>> = Vec::new();
                for c in firsts {
                    push_encoded(&mut commands, c)?;
                }
                walk(&p.schedule, 0, &buf, &mut Encoding(&mut commands))?;
                for c in finals {
                    push_encoded(&mut commands, c)?;
                }
                // The commands run only when the app submits. Buffers that live on in arrays
                // (arguments, constants, outputs, the caller's targets) stay out of the pool and
                // are never mapped by a read until brigade and the app have both dropped them.
                // Temporaries (natively) are held by the encoder until its submission finished
                // and then pooled, so that a frame loop of encodes reuses them.
                let lives_on = |b: &Arc<DeviceBuffer>| {
                    args.iter()
                        .filter_map(Array::buffer)
                        .any(|a| Arc::ptr_eq(a, b))
                        || c.consts.iter().any(|(_, k)| Arc::ptr_eq(k, b))
                        || targets.iter().any(|t| Arc::ptr_eq(t, b))
                        || (into.is_none()
                            && p.output_slots
                                .iter()
                                .any(|&o| slots[o].as_ref().is_some_and(|x| Arc::ptr_eq(x, b))))
                };
                let mut temps: Vec<Arc<DeviceBuffer>> = Vec::new();
                for b in slots.iter().flatten().chain(staged.iter().flatten()) {
                    if cfg!(target_arch = "wasm32") || lives_on(b) {
                        b.share();
                    } else if !temps.iter().any(|t| Arc::ptr_eq(t, b)) {
                        temps.push(b.clone());
                    }
                }
                for t in &targets {
                    t.share();
                }
                for (src, _, _) in &donation_copies {
                    src.share();
                }
                if let Err(e) = dev.encode_commands(enc, &dispatches, &commands) {
                    // Part of the program may be in the encoder already.
                    temps.iter().for_each(|t| t.share());
                    return Err(e);
                }
                #[cfg(not(target_arch = "wasm32"))]
                {
                    // Outputs read as values only once the app's submission is seen to have run.
                    let mark = dev.mark_encode(enc, temps)?;
                    let written: Vec<&Arc<DeviceBuffer>> = match into {
                        Some(_) => targets.iter().collect(),
                        None => p
                            .output_slots
                            .iter()
                            .filter_map(|&o| slots[o].as_ref())
                            .filter(|b| {
                                !args
                                    .iter()
                                    .filter_map(Array::buffer)
                                    .any(|a| Arc::ptr_eq(a, b))
                                    && !c.consts.iter().any(|(_, k)| Arc::ptr_eq(k, b))
                            })
                            .collect(),
                    };
                    for b in written {
                        *b.lock_pending() = Some(mark.clone());
                    }
                }
                #[cfg(target_arch = "wasm32")]
                drop(temps);
            }
        }
        if into.is_some() && !encoding {
            // Written by this call: whatever an earlier encode left pending there is replaced.
            for t in &targets {
                *t.lock_pending() = None;
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
    /// The caller gave up its handles to the arguments (`Jit::call_donating`): a donated
    /// argument's buffer that nothing else holds may become an output.
    pub(crate) owned: bool,
}

impl Default for RunOpts<'_> {
    fn default() -> Self {
        RunOpts {
            usages: wgpu::BufferUsages::empty(),
            into: None,
            encoder: None,
            owned: false,
        }
    }
}

/// Refuse a donation the program cannot honour: a donated position past the arguments, or an
/// array (or its buffer) given at a donated position and at another one (JAX refuses both).
pub(crate) fn check_donation(donate: &[usize], args: &[Array]) -> Result<()> {
    for &d in donate {
        let Some(a) = args.get(d) else {
            return Err(Error::BadDonation {
                donated: d,
                other: None,
                detail: format!(
                    "the function takes {} argument(s), so there is no argument {d} to donate: \
                     donate_argnums counts from 0",
                    args.len()
                ),
            });
        };
        let same = |b: &Array| {
            Arc::ptr_eq(&a.inner, &b.inner)
                || matches!((a.buffer(), b.buffer()), (Some(x), Some(y)) if x.same_wgpu_buffer(y))
        };
        if let Some(j) = (0..args.len()).find(|&j| j != d && same(&args[j])) {
            return Err(Error::BadDonation {
                donated: d,
                other: Some(j),
                detail: format!(
                    "argument {d} is donated (its buffer may become an output) but the same array is also \
                     argument {j}, which the program still reads: pass a copy at one of them \
                     (`array.to_device(&device)` of a host copy) or do not donate argument {d}"
                ),
            });
        }
    }
    Ok(())
}

/// Whether donated argument `arg`'s buffer may become an output on `dev`: an upload made for this
/// call always may; a device array only when the caller handed it over (`owned`) and nothing else
/// holds it: no clone of the array, no other array on the buffer, not an app's buffer or one
/// handed to the app, and with the usages the outputs get.
fn donation_reusable(arg: &Array, dev: &Device, owned: bool, extra: wgpu::BufferUsages) -> bool {
    match (arg.device(), arg.buffer()) {
        (Some(d), Some(b)) if same_device(d, dev) => {
            owned
                && Arc::strong_count(&arg.inner) == 1
                && Arc::strong_count(b) == 1
                && !b.imported
                && !b.is_shared()
                && b.extra == extra
        }
        // Uploaded for this call: a fresh buffer nobody else holds (a replicated array has its
        // own shard on `dev` instead, which it keeps).
        _ => arg.shards().is_none() && extra.is_empty(),
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

/// Where [`walk`] sends a schedule's commands.
trait Sink<'a> {
    fn command(&mut self, c: Command<'a>) -> Result<()>;
    /// Run everything queued so far and read back the bool in slot `slot` (a `while_loop`'s
    /// predicate).
    fn predicate(&mut self, slot: usize) -> Result<bool>;
}

/// `call`: commands recorded and submitted in chunks; a predicate submits and waits.
struct Submitting<'r, 's, 'a> {
    rec: &'r mut crate::device::Recorder<'s, 'a>,
    dev: &'s Device,
    slots: &'s [Option<Arc<DeviceBuffer>>],
}

impl<'a> Sink<'a> for Submitting<'_, '_, 'a> {
    fn command(&mut self, c: Command<'a>) -> Result<()> {
        self.rec.push(c)
    }
    fn predicate(&mut self, slot: usize) -> Result<bool> {
        self.rec.submit()?;
        let buf = self.slots[slot].as_ref().expect("every slot is filled");
        crate::counters::bump(|c| c.loop_predicate_reads += 1);
        #[cfg(not(target_arch = "wasm32"))]
        {
            let data = pollster::block_on(self.dev.read_array(buf, crate::DType::Bool, 1))?;
            Ok(data.get_f64(0) != 0.0)
        }
        #[cfg(target_arch = "wasm32")]
        {
            let _ = (buf, self.dev);
            Err(Error::Unsupported {
                op: "while_loop",
                detail: "in the browser: each iteration waits for the device to hand its predicate back, \
                         which a page's thread cannot block on; use fori_loop or scan with a bound"
                    .into(),
            })
        }
    }
}

/// `Jit::encode`: commands queued for the app's encoder, which cannot wait for a predicate.
struct Encoding<'c, 'a>(&'c mut Vec<Command<'a>>);

impl<'a> Sink<'a> for Encoding<'_, 'a> {
    fn command(&mut self, c: Command<'a>) -> Result<()> {
        push_encoded(self.0, c)
    }
    fn predicate(&mut self, _slot: usize) -> Result<bool> {
        Err(Error::Unsupported {
            op: "Jit::encode",
            detail: "of a program holding a while_loop: its iterations depend on a predicate the host reads back \
                     after each one, and nothing runs until you submit your encoder; use `call`, or fori_loop / \
                     scan with a bound"
                .into(),
        })
    }
}

/// Emit the device commands of a schedule, loops unrolled (`i`: the enclosing loop's iteration).
fn walk<'a>(
    ops: &[Op],
    i: usize,
    buf: &dyn Fn(usize) -> &'a DeviceBuffer,
    out: &mut dyn Sink<'a>,
) -> Result<()> {
    for op in ops {
        match op {
            Op::Launch(l) => out.command(Command::Dispatch(*l))?,
            Op::Copy {
                src,
                src_at,
                dst,
                dst_at,
                bytes,
            } => {
                if *bytes > 0 {
                    out.command(Command::Copy(BufferCopy {
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
            Op::While { cond, pred, body } => loop {
                walk(cond, i, buf, out)?;
                if !out.predicate(*pred)? {
                    break;
                }
                walk(body, i, buf, out)?;
            },
        }
    }
    Ok(())
}
