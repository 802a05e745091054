//! Running a traced parallel program: its stages on every device at once, the host-mediated
//! collectives between them, host-driven loops, and the sharded outputs.

use super::*;

/// A host loop's bookkeeping program: operand signature and kind (0 slice, 1 stack).
pub(super) type LoopKernelKey = (Vec<Aval>, usize);

/// A traced parallel program: the per-device graph, its stages compiled per device, and what
/// varies between devices.
pub(super) struct ParallelExe {
    /// The program that runs: prints taken out (their values extra outputs after the
    /// `n_outputs` real ones), conds inlined. The plan's variables are this graph's.
    pub(super) graph: Graph,
    pub(super) n_outputs: usize,
    /// The program as traced (what [`Parallel::graph`] shows).
    pub(super) shown: Graph,
    /// Per host-driven loop of the plan (`plan.loops`, flattened in order): its body as a parallel
    /// program of its own.
    pub(super) loop_bodies: Vec<Arc<ParallelExe>>,
    /// Per loop, the slicing program of each `xs` (`take` at a traced index) and the stacking
    /// program of its `ys`, by signature.
    pub(super) loop_kernels: SyncLru<LoopKernelKey, Arc<Executable>>,
    /// The prints of the program (their values are kept to the end of the run).
    pub(super) prints: Vec<crate::debug::PrintSpec>,
    /// The device grid, outermost axis first (one axis for pmap and one-axis shard_map): which
    /// devices a collective over an axis combines, a device's `axis_index`, its printed tag.
    pub(super) axes: Vec<(String, usize)>,
    pub(super) plan: StagePlan,
    pub(super) stages: Vec<Executable>,
    /// Per stage, per stage input: a donated argument this stage reads last, which a call that
    /// owns its arguments hands over (taken out of the environment, not cloned), so that the
    /// stage may compute an output into its buffer.
    pub(super) consumed: Vec<Vec<bool>>,
    pub(super) out_layouts: Vec<ShardLayout>,
    /// `axis_index` values per device id (uploaded once; locked only to look up and insert).
    pub(super) index_arrays: Mutex<HashMap<(u64, usize), Array>>,
    /// Host buffer of all-reduce results, kept between calls so that large collectives write
    /// into memory that is already mapped in. A call takes it out for its exchange and puts it
    /// back after (a concurrent call meanwhile finds it empty and grows its own).
    pub(super) scratch: Mutex<Vec<u32>>,
    /// A call spanning processes (feature `mpi`): this process's first global device index and
    /// the global device count. The axes then count every process's devices.
    pub(super) global: Option<(usize, usize)>,
}

// One traced parallel program is shared by the threads that call its map.
#[cfg(not(target_arch = "wasm32"))]
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<ParallelExe>();
};

impl ParallelExe {
    /// Cut `graph` into stages and compile them (and the bodies of host-driven loops).
    pub(super) fn build(
        shown: Graph,
        axes: Vec<(String, usize)>,
        out_layouts: Vec<ShardLayout>,
        donate: &[usize],
    ) -> ParallelExe {
        // Prints are taken out of the program (those in cond branches before the branches are
        // inlined); their values stay in each device's environment to the end of the run.
        let (stripped, prints) = crate::debug::strip_prints(&shown);
        let graph = crate::ops::control::inline_conds(&stripped);
        let plan = split_stages(&graph);
        let consumed = donated_last_reads(&graph, &plan, donate);
        let stages = plan
            .stages
            .iter()
            .zip(&consumed)
            .map(|(s, c)| {
                let d: Vec<usize> = (0..c.len()).filter(|&j| c[j]).collect();
                Executable::donating(s.graph.clone(), &d)
            })
            .collect();
        let loop_bodies = plan
            .loops
            .iter()
            .flatten()
            .map(|l| {
                Arc::new(ParallelExe::build(
                    (*l.params.body).clone(),
                    axes.clone(),
                    Vec::new(),
                    &[],
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
            axes,
            plan,
            stages,
            consumed,
            out_layouts,
            index_arrays: Mutex::new(HashMap::new()),
            scratch: Mutex::new(Vec::new()),
            global: None,
        }
    }

    /// Make this program (and its host loops' bodies) span processes: `global` as in
    /// [`ParallelExe::global`].
    pub(super) fn spanning(mut self, global: Option<(usize, usize)>) -> ParallelExe {
        self.global = global;
        self.loop_bodies = std::mem::take(&mut self.loop_bodies)
            .into_iter()
            .map(|b| {
                let b = Arc::try_unwrap(b).unwrap_or_else(|_| unreachable!("built just now"));
                Arc::new(b.spanning(global))
            })
            .collect();
        self
    }

    /// The global index of local device `d` (its own index in a one-process call).
    fn global_index(&self, d: usize) -> usize {
        self.global.map_or(0, |(offset, _)| offset) + d
    }

    /// A small program for a loop's bookkeeping (slicing `xs`, stacking `ys`), cached by signature.
    pub(super) fn loop_kernel(
        &self,
        avals: Vec<Aval>,
        kind: usize,
        f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
    ) -> Result<Arc<Executable>> {
        let key = (avals, kind);
        if let Some(e) = self.loop_kernels.get(&key) {
            return Ok(e);
        }
        let g = crate::trace::trace_fn("scan (host loop)", &f, &key.0)?;
        let e = Arc::new(Executable::new(g));
        let kept = self.loop_kernels.insert_or_keep(key, e, None, |_| true);
        count_program_evictions(kept.evicted);
        Ok(kept.value)
    }

    /// Run a scan whose body holds collectives: iteration by iteration, each a parallel run of
    /// the body on every device (slices of `xs` taken on the devices, `ys` stacked at the end).
    pub(super) async fn run_loop(
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
                        &|t: &[Tensor]| vec![t[0].index_take(&t[1], 0)],
                    )?;
                    a.extend(slice.run_planned(dev, &[x.clone(), index.clone()], limits)?);
                }
                args.push(a);
            }
            let outs = Box::pin(body.run(devices, args, false)).await?;
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
    /// `owned`: the caller gave up its handles to `args` (`call_donating`), so donated arguments
    /// are handed to the stage that reads them last.
    pub(super) async fn run(
        &self,
        devices: &[Device],
        args: Vec<Vec<Array>>,
        owned: bool,
    ) -> Result<Vec<Vec<Array>>> {
        let n = devices.len();
        let mut env: Vec<HashMap<Var, Array>> = vec![HashMap::new(); n];
        for (d, a) in args.into_iter().enumerate() {
            for (v, x) in self.graph.inputs.iter().zip(a) {
                env[d].insert(*v, x);
            }
        }
        // A device's index along an axis is its grid coordinate there.
        for (v, name) in &self.plan.axis_index {
            let p = self.axes.iter().position(|(a, _)| a == name).unwrap_or(0);
            for (d, dev) in devices.iter().enumerate() {
                let k = crate::mesh::coords(&self.axes, self.global_index(d))[p];
                let key = (dev.inner.id, k);
                let cached = lock(&self.index_arrays).get(&key).cloned();
                let a = match cached {
                    Some(a) => a,
                    None => {
                        // Uploaded outside the lock; a concurrent call's copy, if first, is kept.
                        let a = put(&HostArray::scalar(crate::Scalar::I32(k as i32)), dev)?;
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
                    let ins: Vec<Array> = stage
                        .inputs
                        .iter()
                        .zip(&self.consumed[s])
                        .map(|(v, &last)| match last && owned {
                            true => env[d].remove(v).expect("stage input computed"),
                            false => env[d][v].clone(),
                        })
                        .collect();
                    let outs = self.stages[s].run_planned_with(&devices[d], ins, &limits, owned)?;
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
    pub(super) async fn print(&self, devices: &[Device], env: &[HashMap<Var, Array>]) {
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
                    let at: Vec<String> = self
                        .axes
                        .iter()
                        .zip(crate::mesh::coords(&self.axes, self.global_index(d)))
                        .map(|((a, _), k)| format!("{a}={k}"))
                        .collect();
                    let tag = format!("{} {}", crate::debug::device_tag(dev), at.join(" "));
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
    pub(super) async fn exchange(
        &self,
        devices: &[Device],
        env: &[HashMap<Var, Array>],
        exchange: &[Exchange],
    ) -> Result<Vec<(Var, Vec<Array>)>> {
        #[cfg(feature = "mpi")]
        if let Some(global) = self.global {
            let t0 = std::time::Instant::now();
            let out = self.exchange_global(devices, env, exchange, global).await;
            crate::distributed::add_exchange_time(t0.elapsed());
            return out;
        }
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
                        let all = &bytes[k * n..(k + 1) * n];
                        let mut arrays: Vec<Option<Array>> = vec![None; n];
                        for group in self.groups(x) {
                            let parts: Vec<&[u8]> = group.iter().map(|&d| all[d]).collect();
                            if !x.collective.all_reduce_into(&parts, out, &mut scratch) {
                                return Err(Error::Unsupported {
                                    op: x.collective.name(),
                                    detail: "as a direct all-reduce".into(),
                                });
                            }
                            let words: &[u8] = bytemuck::cast_slice(&scratch[..out.size()]);
                            for &d in &group {
                                let dev = &devices[d];
                                arrays[d] = Some(Array::from_buffer(
                                    dev.clone(),
                                    dev.upload_bytes(words)?,
                                    out.clone(),
                                ));
                            }
                        }
                        Ok(arrays
                            .into_iter()
                            .map(|a| a.expect("every device is in one group"))
                            .collect())
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
                let mut all: Vec<Option<HostArray>> = host.by_ref().take(n).map(Some).collect();
                let mut arrays: Vec<Option<Array>> = vec![None; n];
                for group in self.groups(x) {
                    let parts: Vec<HostArray> = group
                        .iter()
                        .map(|&d| all[d].take().expect("every device is in one group"))
                        .collect();
                    let combined = x.collective.combine(parts, self.graph.aval(x.out));
                    for (k, &d) in group.iter().enumerate() {
                        arrays[d] = Some(put(combined.get(k), &devices[d])?);
                    }
                }
                results.push((x.out, arrays.into_iter().map(Option::unwrap).collect()));
            }
        }
        Ok(results)
    }
}

#[cfg(feature = "mpi")]
impl ParallelExe {
    /// [`ParallelExe::exchange`] across processes: read this process's operands, all-gather every
    /// process's (after the header check of [`crate::distributed::exchange`]), combine each
    /// group in global device order — the same fold as one process holding every device — and
    /// write this process's devices their results.
    async fn exchange_global(
        &self,
        devices: &[Device],
        env: &[HashMap<Var, Array>],
        exchange: &[Exchange],
        (offset, total): (usize, usize),
    ) -> Result<Vec<(Var, Vec<Array>)>> {
        let n = devices.len();
        let operands: Vec<Array> = exchange
            .iter()
            .flat_map(|x| (0..n).map(|d| env[d][&x.input].clone()).collect::<Vec<_>>())
            .collect();
        let host = read_all(&operands).await?;
        let fast_ok = |x: &Exchange| {
            x.collective.is_all_reduce()
                && self.graph.aval(x.input).dtype != crate::DType::Bool
                && self.groups(x).len() == 1
        };
        if crate::distributed::is_fast() && exchange.iter().all(fast_ok) {
            return self.exchange_fast(devices, exchange, host, total);
        }
        let pieces: Vec<Vec<u8>> = host.iter().map(|h| h.data.to_bytes()).collect();
        let header = exchange
            .iter()
            .map(|x| {
                let (i, o) = (self.graph.aval(x.input), self.graph.aval(x.out));
                format!(
                    "{} over {:?} of {:?} {:?} -> {:?}",
                    x.collective.name(),
                    x.axes,
                    i.dtype,
                    i.shape,
                    o.shape
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let header = format!("{header} on {n} devices of {total}");
        let per_process = crate::distributed::exchange(&header, &pieces.concat())?;
        // The headers matched, so every process sent pieces of these lengths in this order.
        let want: usize = pieces.iter().map(Vec::len).sum();
        for (p, bytes) in per_process.iter().enumerate() {
            if bytes.len() != want {
                return Err(Error::ProcessFailure {
                    op: "distributed exchange",
                    detail: format!(
                        "process {p} sent {} bytes of operands, this process {want}: the processes disagree on the operands' sizes",
                        bytes.len()
                    ),
                });
            }
        }
        let mut at = vec![0usize; per_process.len()];
        let mut results = Vec::with_capacity(exchange.len());
        for (k, x) in exchange.iter().enumerate() {
            let aval = self.graph.aval(x.input);
            // Process-major: process p's device d is global device p * n + d.
            let mut all: Vec<Option<HostArray>> = Vec::with_capacity(total);
            for (p, bytes) in per_process.iter().enumerate() {
                for d in 0..n {
                    let len = pieces[k * n + d].len();
                    let data = crate::HostData::from_bytes(aval.dtype, &bytes[at[p]..at[p] + len]);
                    at[p] += len;
                    all.push(Some(HostArray::new(aval.shape.clone(), data)?));
                }
            }
            let mut arrays: Vec<Option<Array>> = vec![None; n];
            for group in self.groups(x) {
                let mine = group.iter().any(|g| (offset..offset + n).contains(g));
                let parts: Vec<HostArray> = group
                    .iter()
                    .map(|&g| all[g].take().expect("every device is in one group"))
                    .collect();
                if !mine {
                    continue;
                }
                let combined = x.collective.combine(parts, self.graph.aval(x.out));
                for (j, &g) in group.iter().enumerate() {
                    if (offset..offset + n).contains(&g) {
                        arrays[g - offset] = Some(put(combined.get(j), &devices[g - offset])?);
                    }
                }
            }
            results.push((
                x.out,
                arrays
                    .into_iter()
                    .map(|a| a.expect("every local device is in one group"))
                    .collect(),
            ));
        }
        Ok(results)
    }

    /// Fast mode ([`crate::distributed::set_fast`]): all-reduces over every device, each process
    /// folding its devices first and MPI_Allreduce combining the processes (not bit-reproducible).
    fn exchange_fast(
        &self,
        devices: &[Device],
        exchange: &[Exchange],
        host: Vec<HostArray>,
        total: usize,
    ) -> Result<Vec<(Var, Vec<Array>)>> {
        use crate::distributed::ReduceOp;
        let n = devices.len();
        let mut host = host.into_iter();
        let mut results = Vec::with_capacity(exchange.len());
        for x in exchange {
            let out = self.graph.aval(x.out);
            let (kind, op) = match x.collective.kind {
                CollectiveKind::Pmax => (CollectiveKind::Pmax, ReduceOp::Max),
                CollectiveKind::Pmin => (CollectiveKind::Pmin, ReduceOp::Min),
                _ => (CollectiveKind::Psum, ReduceOp::Sum),
            };
            let local = crate::ops::collective::Collective {
                kind,
                ..x.collective.clone()
            }
            .combine(host.by_ref().take(n).collect(), out);
            let partial = local.get(0);
            let header = format!(
                "{} over {:?} of {:?} {:?} on {n} devices of {total}",
                x.collective.name(),
                x.axes,
                out.dtype,
                out.shape
            );
            let bytes =
                crate::distributed::all_reduce(&header, &partial.data.to_bytes(), out.dtype, op)?;
            let mut data = crate::HostData::from_bytes(out.dtype, &bytes);
            if x.collective.kind == CollectiveKind::Pmean {
                match &mut data {
                    crate::HostData::F32(v) => v.iter_mut().for_each(|e| *e /= total as f32),
                    crate::HostData::F64(v) => v.iter_mut().for_each(|e| *e /= total as f64),
                    _ => {}
                }
            }
            let reduced = HostArray::new(out.shape.clone(), data)?;
            let arrays = devices
                .iter()
                .map(|dev| put(&reduced, dev))
                .collect::<Result<Vec<_>>>()?;
            results.push((x.out, arrays));
        }
        Ok(results)
    }
}

impl ParallelExe {
    /// The device groups the collective of `x` combines, each in axis order.
    fn groups(&self, x: &Exchange) -> Vec<Vec<usize>> {
        let names: Vec<&str> = x.axes.iter().map(String::as_str).collect();
        crate::mesh::groups(&self.axes, &names)
    }
}

/// Host data onto `dev` (the cpu device keeps a copy on the host).
pub(super) fn put(h: &HostArray, dev: &Device) -> Result<Array> {
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

/// Per stage of `plan`, per stage input: whether it is a donated input of `graph` (positions
/// `donate`) that this stage reads last — no later stage, no exchange or host loop after it, and
/// no output reads it.
fn donated_last_reads(graph: &Graph, plan: &StagePlan, donate: &[usize]) -> Vec<Vec<bool>> {
    let donated: Vec<Var> = donate
        .iter()
        .filter_map(|&i| graph.inputs.get(i).copied())
        .collect();
    // The last reader of each donated input, as 2 * stage (+ 1 for what runs after the stage).
    let last = |v: Var| {
        let mut at = None;
        for (s, stage) in plan.stages.iter().enumerate() {
            if stage.inputs.contains(&v) {
                at = Some(2 * s);
            }
            let after = plan.exchanges[s].iter().any(|x| x.input == v)
                || plan.loops[s].iter().any(|l| l.inputs.contains(&v));
            if after {
                at = Some(2 * s + 1);
            }
        }
        at
    };
    plan.stages
        .iter()
        .enumerate()
        .map(|(s, stage)| {
            stage
                .inputs
                .iter()
                .map(|&v| {
                    donated.contains(&v) && !graph.outputs.contains(&v) && last(v) == Some(2 * s)
                })
                .collect()
        })
        .collect()
}
