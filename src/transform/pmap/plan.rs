//! Planning a parallel call: which devices, which arguments are mapped and how, the shard
//! sizes (with the errors that say which of pmap and split mode was meant), tracing the per-device
//! program, cutting the arguments into shards, and which values vary between devices.

use super::*;

impl<F> Parallel<F>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    pub(super) fn available_devices(&self) -> Result<Vec<Device>> {
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

    /// Refuse donations a call cannot honour: a position past the arguments, a static argument,
    /// an array (or a shard of it) also given at another position.
    pub(super) fn check_donation(&self, args: &[Array]) -> Result<()> {
        crate::exec::check_donation(&self.donate, args)?;
        for &d in &self.donate {
            if self.static_argnums.contains(&d) {
                return Err(Error::BadDonation {
                    donated: d,
                    other: None,
                    detail: format!(
                        "argument {d} is static (static_argnums): its value is part of the program, \
                         not a buffer an output could take; do not donate it"
                    ),
                });
            }
            let bufs = |a: &Array| -> Vec<Arc<crate::device::DeviceBuffer>> {
                a.shards()
                    .unwrap_or(std::slice::from_ref(a))
                    .iter()
                    .filter_map(|s| s.buffer().cloned())
                    .collect()
            };
            let mine = bufs(&args[d]);
            let shared = (0..args.len()).find(|&j| {
                j != d
                    && bufs(&args[j])
                        .iter()
                        .any(|b| mine.iter().any(|m| m.same_wgpu_buffer(b)))
            });
            if let Some(j) = shared {
                return Err(Error::BadDonation {
                    donated: d,
                    other: Some(j),
                    detail: format!(
                        "argument {d} is donated (its shards may become outputs) but argument {j} \
                         shares a shard's buffer with it, which the program still reads: pass a \
                         copy at one of them or do not donate argument {d}"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Positions among the traced (non-static) arguments of the donated ones.
    pub(super) fn donated_inputs(&self) -> Vec<usize> {
        self.donate
            .iter()
            .filter(|d| !self.static_argnums.contains(d))
            .map(|&d| (0..d).filter(|i| !self.static_argnums.contains(i)).count())
            .collect()
    }

    /// The mapped axis of every argument (None for broadcast and static ones), checked.
    pub(super) fn mapped_axes(&self, args: &[Array]) -> Result<Vec<Option<usize>>> {
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
    pub(super) fn prepare(
        &self,
        args: &[Array],
    ) -> Result<(Arc<ParallelExe>, Vec<Device>, ArgPlan)> {
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
        let exe = self.cached_exe(args, shard_avals, &devices, |key| {
            self.trace(args, key, &mapped)
        })?;
        Ok((exe, devices, ArgPlan { mapped, n }))
    }

    /// The program for these per-device avals (and static argument values) on `devices`: from the
    /// cache, else traced by `trace` and kept (bounded by the devices' program cache capacity).
    pub(super) fn cached_exe(
        &self,
        args: &[Array],
        shard_avals: Vec<Aval>,
        devices: &[Device],
        trace: impl FnOnce(&Key) -> Result<ParallelExe>,
    ) -> Result<Arc<ParallelExe>> {
        let mut statics = Vec::new();
        for &s in &self.static_argnums {
            let h = host_data(&args[s])?;
            statics.push((s, args[s].aval().clone(), h.data.to_words()));
        }
        let key = Key {
            shard_avals,
            shards: devices.len(),
            statics,
        };
        if let Some(e) = self.cache.get(&key) {
            return Ok(e);
        }
        let e = Arc::new(trace(&key)?);
        let capacity = devices
            .iter()
            .map(Device::program_cache_capacity)
            .min()
            .unwrap_or(DEFAULT_PROGRAM_CACHE_CAPACITY);
        let kept = self.cache.insert_or_keep(key, e, Some(capacity), |_| true);
        count_program_evictions(kept.evicted);
        Ok(kept.value)
    }

    /// pmap: the mapped size is the number of shards.
    pub(super) fn pmap_size(
        &self,
        mapped: &[Option<usize>],
        args: &[Array],
        available: usize,
    ) -> Result<usize> {
        let n = crate::transform::mapped_size(
            "pmap",
            mapped,
            self.axis_size,
            "\nhelp: an argument every device needs whole (a weight matrix, say) takes in_axes None, e.g. .in_axes(&[Some(0), None])",
            |i, a| Ok(args[i].shape()[a]),
        )?;
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
    pub(super) fn split_size(
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

    pub(super) fn trace(
        &self,
        args: &[Array],
        key: &Key,
        mapped: &[Option<usize>],
    ) -> Result<ParallelExe> {
        let op = self.mode.op();
        // Across processes (feature `mpi`) the axis counts every process's devices.
        #[cfg(feature = "mpi")]
        let global = crate::distributed::span(key.shards);
        #[cfg(not(feature = "mpi"))]
        let global: Option<(usize, usize)> = None;
        let size = global.map_or(key.shards, |(_, total)| total);
        let axes: Vec<(String, usize)> = self
            .axis_name
            .iter()
            .map(|name| (name.clone(), size))
            .collect();
        let traced = self.trace_graph(args, key, &axes)?;
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
        Ok(ParallelExe::build(
            traced,
            vec![(axis_label, size)],
            out_layouts,
            &self.donated_inputs(),
        )
        .spanning(global))
    }

    /// Trace `f` on the per-device shapes of `key`, with the parallel `axes` bound for collectives.
    pub(super) fn trace_graph(
        &self,
        args: &[Array],
        key: &Key,
        axes: &[(String, usize)],
    ) -> Result<Graph> {
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
        let _bound: Vec<crate::collective::AxisBinding> = axes
            .iter()
            .map(|(name, size)| crate::collective::AxisBinding::new(name, *size))
            .collect();
        trace_args(&self.label, &self.f, &targs)
    }

    // ---- arguments ---------------------------------------------------------------------------------

    /// Each device's piece of every traced argument, on that device. Sharded arguments laid out as
    /// this call needs them, on the same devices, are used in place.
    pub(super) async fn shard_args(
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
            if x.shard_layout().as_ref() == Some(&want) && x.shard_devices() == devices {
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
                    ShardLayout::Named(_) => unreachable!("one-axis maps place by axis"),
                };
                per_device[d].push(piece);
            }
        }
        Ok(per_device)
    }
}

/// What `prepare` decided about the arguments.
pub(super) struct ArgPlan {
    pub(super) mapped: Vec<Option<usize>>,
    pub(super) n: usize,
}

/// For each variable, why it may differ between devices (None: identical on every device).
pub(super) fn varying_reasons(
    g: &Graph,
    input_mapped: &[bool],
    input_arg: &[usize],
) -> Vec<Option<String>> {
    let ins = (0..g.inputs.len())
        .map(|k| input_mapped[k].then(|| format!("it depends on mapped argument {}", input_arg[k])))
        .collect();
    varying(g, ins, None)
}

/// [`varying_reasons`] given a reason (or none) per graph input. A loop's results are judged
/// from its body: a carry varies when its start or the body makes it vary (a fixed point), and a
/// carry the body makes identical on every device (a pmean, say) is identical after the loop.
///
/// With `axis` (a mesh axis), "varies" means "differs between devices along `axis`": collectives
/// over other axes pass their operand's reason on, and their `axis_index` does not vary.
pub(super) fn varying(
    g: &Graph,
    ins: Vec<Option<String>>,
    axis: Option<&str>,
) -> Vec<Option<String>> {
    let mut why: Vec<Option<String>> = vec![None; g.avals.len()];
    for (v, r) in g.inputs.iter().zip(ins) {
        why[v.idx()] = r;
    }
    for e in &g.eqns {
        let reason_of = |v: &Var| why[v.idx()].clone();
        let other_axis = |c: &crate::ops::Collective| axis.is_some_and(|a| a != c.axis_name);
        let reasons: Vec<Option<String>> = match &e.prim {
            Prim::Collective(c) if other_axis(c) && c.kind == CollectiveKind::AxisIndex => {
                vec![None]
            }
            Prim::Collective(c) if other_axis(c) => vec![e.inputs.iter().find_map(reason_of)],
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
                    let w = varying(&p.body, body_ins, axis);
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
            Prim::Control(ControlOp::While(p)) => {
                // A carry varies when its start or the body makes it vary, and every carry may
                // when the number of iterations does (a predicate that varies).
                let (ncc, nbc) = (p.n_cond_consts, p.n_body_consts);
                let ins: Vec<Option<String>> = e.inputs.iter().map(reason_of).collect();
                let mut carry = ins[ncc + nbc..].to_vec();
                loop {
                    let mut body_ins = ins[ncc..ncc + nbc].to_vec();
                    body_ins.extend(carry.iter().cloned());
                    let w = varying(&p.body, body_ins, axis);
                    let mut cond_ins = ins[..ncc].to_vec();
                    cond_ins.extend(carry.iter().cloned());
                    let pred = varying(&p.cond, cond_ins, axis)[p.cond.outputs[0].idx()]
                        .clone()
                        .map(|r| format!("the number of while_loop iterations varies ({r})"));
                    let mut changed = false;
                    for (c, o) in carry.iter_mut().zip(&p.body.outputs) {
                        if c.is_none() {
                            if let Some(r) = w[o.idx()].clone().or_else(|| pred.clone()) {
                                *c = Some(r);
                                changed = true;
                            }
                        }
                    }
                    if !changed {
                        break carry;
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
