//! `shard_map` over a [`Mesh`]: specs checked against the mesh and the arguments, the per-device
//! program traced with every mesh axis bound, arguments cut into their blocks, and the outputs'
//! specs checked against what varies along each mesh axis.

use super::plan::varying;
use super::*;
use crate::mesh::Mesh;

impl<F> Parallel<F>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    /// The traced program for `args`, with a mesh or without.
    pub(super) fn exe_for(&self, args: &[Array]) -> Result<Arc<ParallelExe>> {
        Ok(match &self.mesh {
            Some(mesh) => self.prepare_mesh(mesh, args)?.0,
            None => self.prepare(args)?.0,
        })
    }

    /// Check the mesh call, find each traced argument's sharding, trace if needed.
    pub(super) fn prepare_mesh(
        &self,
        mesh: &Mesh,
        args: &[Array],
    ) -> Result<(Arc<ParallelExe>, Vec<NamedSharding>)> {
        let (shardings, shard_avals) = self.mesh_shardings(mesh, args)?;
        let exe = self.cached_exe(args, shard_avals, mesh.devices(), |key| {
            self.trace_mesh(mesh, args, key, &shardings)
        })?;
        Ok((exe, shardings))
    }

    /// Check a mesh call (builder options, spec counts, static arguments, placement) and give
    /// each traced argument's sharding and block aval.
    pub(super) fn mesh_shardings(
        &self,
        mesh: &Mesh,
        args: &[Array],
    ) -> Result<(Vec<NamedSharding>, Vec<Aval>)> {
        let bad = |detail: String| Error::BadSharding {
            op: "shard_map",
            detail,
        };
        if self.mode == ParallelMode::Pmap {
            return Err(bad(
                "pmap maps one axis of devices; to run over a mesh use shard_map(f).mesh(&mesh).in_specs(..).out_specs(..)".into(),
            ));
        }
        let set: Vec<&str> = [
            ("devices", self.devices.is_some()),
            ("axis_name", self.axis_name.is_some()),
            ("axis_size", self.axis_size.is_some()),
            ("in_axes", self.in_axes.is_some()),
            ("out_axes", self.out_axes.is_some()),
        ]
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(n, _)| n)
        .collect();
        if !set.is_empty() {
            return Err(bad(format!(
                "mesh() replaces {}: the mesh gives the devices and axis names, in_specs/out_specs say what is split (e.g. P![\"data\", None] for rows over \"data\")",
                set.join(", ")
            )));
        }
        let Some(in_specs) = &self.in_specs else {
            return Err(bad(format!(
                "with a mesh, in_specs is required: one PartitionSpec per argument ({} here), P![] for an argument every device needs whole",
                args.len()
            )));
        };
        if in_specs.len() != args.len() {
            return Err(bad(format!(
                "in_specs has {} entries but {} arguments were given: give one PartitionSpec per argument",
                in_specs.len(),
                args.len()
            )));
        }
        if self.out_specs.is_none() {
            return Err(bad(
                "with a mesh, out_specs is required: one PartitionSpec per output (or one for all), e.g. P![\"data\"] to join the blocks along axis 0, P![] for a value identical on every device".into(),
            ));
        }
        if let Some(&s) = self.static_argnums.iter().find(|&&s| s >= args.len()) {
            return Err(Error::BadParallelArg {
                op: "shard_map",
                detail: format!(
                    "static_argnums names argument {s} but only {} arguments were given",
                    args.len()
                ),
            });
        }
        let is_static = |i: usize| self.static_argnums.contains(&i);
        let mut shardings = Vec::new();
        let mut shard_avals = Vec::new();
        for (i, (x, spec)) in args.iter().zip(in_specs).enumerate() {
            if is_static(i) {
                continue;
            }
            let s = NamedSharding::checked("shard_map", mesh, spec.clone())?;
            let local = s.shard_shape_for("shard_map", x.shape(), Some(i))?;
            // An array already spread over other devices is not moved silently (JAX refuses too).
            let on = x.shard_devices();
            if !on.is_empty() && !on.iter().all(|d| mesh.devices().contains(d)) {
                let ids = |ds: &[Device]| {
                    ds.iter()
                        .map(|d| d.index().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(bad(format!(
                    "argument {i} is sharded over devices [{}], which are not all in the mesh (devices [{}]): move it first with device_put(&x, &NamedSharding::new(&mesh, spec)?)",
                    ids(on),
                    ids(mesh.devices())
                )));
            }
            shard_avals.push(Aval::new(local, x.dtype()));
            shardings.push(s);
        }
        Ok((shardings, shard_avals))
    }

    /// [`Parallel::emulate`] of a mesh `shard_map`: one `vmap` per mesh axis (outermost first,
    /// named after it), nested. Each argument's split dimensions are cut into
    /// `(axis sizes…, block)` and the axis dimensions moved to the front in mesh order, so each
    /// level maps its axis at position 0; each output stacks the axes its spec names at the front
    /// (the others must not vary: `vmap` refuses a varying output with out_axes `None`), and is
    /// then joined back as its spec says.
    pub(super) fn emulated_mesh_body(
        &self,
        mesh: &Mesh,
        shardings: &[Option<NamedSharding>],
        ts: &[Tensor],
    ) -> Vec<Tensor> {
        let axes = mesh.axes();
        let pos = |name: &str| axes.iter().position(|(a, _)| a == name).unwrap_or(0);
        let size = |name: &str| mesh.axis_size(name).unwrap_or(1);
        // Arguments: the named axes' dimensions at the front, in mesh order.
        let args: Vec<Tensor> = ts
            .iter()
            .zip(shardings)
            .map(|(t, s)| {
                let Some(s) = s else { return t.clone() };
                let spec = s.spec();
                let mut shape: Vec<i64> = Vec::new();
                let mut named: Vec<(usize, usize)> = Vec::new(); // (mesh position, dim)
                let mut rest = Vec::new();
                for (k, &d) in t.shape().iter().enumerate() {
                    let split = spec.axes_of(k);
                    let parts: usize = split.iter().map(|a| size(a)).product();
                    for a in split {
                        named.push((pos(a), shape.len()));
                        shape.push(size(a) as i64);
                    }
                    rest.push(shape.len());
                    shape.push((d / parts.max(1)) as i64);
                }
                named.sort_unstable();
                let perm: Vec<usize> = named.iter().map(|&(_, d)| d).chain(rest).collect();
                t.reshape(&shape).transpose(&perm)
            })
            .collect();
        let outs = self.emulate_level(mesh, shardings, 0, &args);
        let specs = self.out_specs.as_deref().unwrap_or_default();
        outs.into_iter()
            .enumerate()
            .map(|(j, y)| {
                let Some(spec) = specs.get(if specs.len() == 1 { 0 } else { j }) else {
                    return y;
                };
                if y.error().is_some() {
                    return y;
                }
                // y: [sizes of the named axes in mesh order…, block…].
                let mut named: Vec<&str> = spec.named_axes();
                named.sort_by_key(|a| pos(a));
                let lead = named.len();
                let block = &y.shape()[lead..];
                let mut perm = Vec::new();
                let mut shape: Vec<i64> = Vec::new();
                for (k, &d) in block.iter().enumerate() {
                    let mut parts = 1;
                    for a in spec.axes_of(k) {
                        perm.push(named.iter().position(|n| n == a).unwrap_or(0));
                        parts *= size(a);
                    }
                    perm.push(lead + k);
                    shape.push((parts * d) as i64);
                }
                y.transpose(&perm).reshape(&shape)
            })
            .collect()
    }

    /// Level `level` of [`Parallel::emulated_mesh_body`]: `vmap` over mesh axis `level` of the
    /// levels inside it (the function itself past the last axis).
    fn emulate_level(
        &self,
        mesh: &Mesh,
        shardings: &[Option<NamedSharding>],
        level: usize,
        ts: &[Tensor],
    ) -> Vec<Tensor> {
        let Some((name, n)) = mesh.axes().get(level) else {
            return (self.f)(ts);
        };
        let named = |s: &PartitionSpec| s.named_axes().contains(&name.as_str());
        let in_axes: Vec<Option<usize>> = shardings
            .iter()
            .map(|s| s.as_ref().filter(|s| named(s.spec())).map(|_| 0))
            .collect();
        let out_axes: Vec<Option<usize>> = self
            .out_specs
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|s| named(s).then_some(0))
            .collect();
        crate::transform::vmap::vmap(|xs: &[Tensor]| {
            self.emulate_level(mesh, shardings, level + 1, xs)
        })
        .axis_name(name)
        .axis_size(*n)
        .in_axes(&in_axes)
        .out_axes(&out_axes)
        .apply(ts)
    }

    fn trace_mesh(
        &self,
        mesh: &Mesh,
        args: &[Array],
        key: &Key,
        shardings: &[NamedSharding],
    ) -> Result<ParallelExe> {
        let axes = mesh.axes().to_vec();
        let traced = self.trace_graph(args, key, &axes)?;
        let graph = crate::ops::control::inline_conds(&traced);
        let outs = graph.outputs.len();
        let specs = self.out_specs.as_deref().unwrap_or_default();
        let specs: Vec<PartitionSpec> = match specs.len() {
            1 => vec![specs[0].clone(); outs],
            k if k == outs => specs.to_vec(),
            k => {
                return Err(Error::BadSharding {
                    op: "shard_map",
                    detail: format!(
                        "out_specs has {k} entries but the function returns {outs} outputs: give one entry, or one per output"
                    ),
                });
            }
        };
        // Per mesh axis: why each variable differs between devices along it.
        let traced_args: Vec<usize> = (0..args.len())
            .filter(|i| !self.static_argnums.contains(i))
            .collect();
        let along: Vec<Vec<Option<String>>> = axes
            .iter()
            .map(|(a, _)| {
                let ins = shardings
                    .iter()
                    .zip(&traced_args)
                    .map(|(s, i)| {
                        s.spec().named_axes().contains(&a.as_str()).then(|| {
                            format!(
                                "it depends on argument {i}, split over '{a}' ({})",
                                s.spec()
                            )
                        })
                    })
                    .collect();
                varying(&graph, ins, Some(a))
            })
            .collect();
        let mut out_layouts = Vec::with_capacity(outs);
        for (j, (&v, spec)) in graph.outputs.iter().zip(&specs).enumerate() {
            let s = NamedSharding::checked("shard_map", mesh, spec.clone())?;
            let local = &graph.aval(v).shape;
            if spec.entries().len() > local.len() {
                return Err(Error::BadSharding {
                    op: "shard_map",
                    detail: format!(
                        "out_specs[{j}] is {spec} but output {j} has rank {} per device (shape {local:?}): give at most one entry per dimension",
                        local.len()
                    ),
                });
            }
            for ((a, size), why) in axes.iter().zip(&along) {
                // Nothing differs along an axis of one device.
                if *size == 1 || spec.named_axes().contains(&a.as_str()) {
                    continue;
                }
                if let Some(w) = &why[v.idx()] {
                    return Err(Error::BadSharding {
                        op: "shard_map",
                        detail: format!(
                            "out_specs[{j}] is {spec}, which does not name the mesh axis '{a}', so output {j} must be identical along '{a}'; it differs ({w}): name '{a}' in its spec to join the blocks, or make it identical first with psum/pmean/all_gather over '{a}'"
                        ),
                    });
                }
            }
            out_layouts.push(ShardLayout::Named(s));
        }
        // A mesh spanning processes runs this process's block of grid positions; every
        // exchange then combines over MPI (feature `mpi`).
        Ok(
            ParallelExe::build(traced, axes, out_layouts, &self.donated_inputs())
                .spanning(mesh.span()),
        )
    }

    /// Each device's block of every traced argument, on that device. Arguments already placed as
    /// their spec says, on the mesh's devices, are used in place.
    pub(super) async fn mesh_args(
        &self,
        args: &[Array],
        shardings: &[NamedSharding],
    ) -> Result<Vec<Vec<Array>>> {
        let Some(first) = shardings.first() else {
            let n = self.mesh.as_ref().map_or(0, |m| m.devices().len());
            return Ok(vec![Vec::new(); n]);
        };
        let devices = first.mesh().devices();
        let mut per_device: Vec<Vec<Array>> = vec![Vec::new(); devices.len()];
        let traced = args
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.static_argnums.contains(i))
            .map(|(_, x)| x);
        for (x, s) in traced.zip(shardings) {
            let in_place = x.sharding().is_some_and(|t| t.same_placement(s, x.ndim()))
                && !matches!(x.shard_layout(), Some(ShardLayout::Stacked { .. }));
            // An array spanning processes is gathered over MPI by `to_sharding` itself.
            #[cfg(feature = "mpi")]
            let spanning = !x.is_fully_addressable();
            #[cfg(not(feature = "mpi"))]
            let spanning = false;
            let placed = if x.host().is_some() || in_place || spanning {
                x.to_sharding(s)?
            } else {
                // Read back once (awaited, so this works in the browser too), then cut.
                Array::from_host(read_all(std::slice::from_ref(x)).await?.remove(0))
                    .to_sharding(s)?
            };
            for (d, b) in placed.shards().unwrap_or_default().iter().enumerate() {
                per_device[d].push(b.clone());
            }
        }
        Ok(per_device)
    }
}
