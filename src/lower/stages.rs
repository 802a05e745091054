//! Cutting a parallel program into stages at its collectives.
//!
//! A graph traced under `pmap` / `shard_map` may contain collective equations. Devices cannot talk to
//! each other inside a kernel, so the program runs as alternating *stages* (ordinary collective-free
//! graphs, compiled and run on every device) and *exchanges* (the collectives, combined on the host).
//!
//! Each variable gets a level: graph inputs 0; an ordinary equation the highest level of its inputs;
//! a collective one more than its operand. Stage `s` holds the ordinary equations of level `s`;
//! exchange `s` (after stage `s`) holds the collectives of level `s + 1`. So independent collectives
//! (the gradients of every parameter, say) share one exchange: one round trip for all of them.
//!
//! A `scan` whose body holds collectives is cut out like a collective (a [`HostLoop`] after
//! exchange `s`): the executor runs it iteration by iteration, each a parallel program of its own.
//!
//! Values cross from stage to stage in device buffers (the per-device environment of the executor);
//! constants and zero-input equations (`full`, `iota`) are re-emitted in every stage that needs them
//! instead of being carried. `axis_index` needs no communication: the executor gives each device
//! its own index as an environment value.

use std::collections::HashMap;

use crate::host::HostArray;
use crate::ops::{Collective, CollectiveKind, ControlOp, Lowering, Prim};
use crate::trace::graph::{Eqn, Graph, Var};

/// One stage: a collective-free graph whose inputs and outputs name variables of the original graph.
#[derive(Clone, Debug)]
pub struct Stage {
    pub graph: Graph,
    /// Original variables fed to `graph.inputs`, in order.
    pub inputs: Vec<Var>,
    /// Original variables that `graph.outputs` compute, in order.
    pub outputs: Vec<Var>,
}

/// One collective of an exchange: `out = collective(input)` in the original graph, over the
/// devices that differ along `axes` (the collective's own axis, or several when a chain of the
/// same reduction over different axes, `psum_axes`, was merged into one exchange).
#[derive(Clone, Debug)]
pub struct Exchange {
    pub collective: Collective,
    pub axes: Vec<String>,
    pub input: Var,
    pub out: Var,
}

/// A `scan` whose body holds collectives: the executor drives it from the host, one iteration
/// at a time, each a parallel program of its own (stages and exchanges of the body).
#[derive(Clone, Debug)]
pub struct HostLoop {
    pub params: crate::ops::control::ScanParams,
    /// Operands (`consts ++ init ++ xs`) and results (`carry ++ ys`) in the original graph.
    pub inputs: Vec<Var>,
    pub outs: Vec<Var>,
}

/// A parallel program: stages and, after each, the collectives to perform.
#[derive(Clone, Debug)]
pub struct StagePlan {
    pub stages: Vec<Stage>,
    /// `exchanges[s]` runs after `stages[s]` (empty for the last stage).
    pub exchanges: Vec<Vec<Exchange>>,
    /// `loops[s]` run after `exchanges[s]`, beside them (they need the same values).
    pub loops: Vec<Vec<HostLoop>>,
    /// Variables holding `axis_index(name)`, filled per device by the executor.
    pub axis_index: Vec<(Var, String)>,
}

impl StagePlan {
    /// Number of host round trips (exchanges with at least one collective).
    pub fn exchange_count(&self) -> usize {
        self.exchanges.iter().filter(|e| !e.is_empty()).count()
    }
}

/// Cut `g` into stages at its collectives. A graph without collectives gives one stage.
pub fn split_stages(g: &Graph) -> StagePlan {
    // Branches of a cond run inline (both computed, one selected): their collectives are the
    // program's own.
    let inlined = crate::ops::control::inline_conds(g);
    let g = &inlined;
    let n = g.avals.len();
    let producers = g.producers();
    let mut level = vec![0usize; n];
    // Free values: rebuilt wherever used (constants and zero-input equations).
    let mut free = vec![false; n];
    for (v, _) in &g.consts {
        free[v.idx()] = true;
    }
    let mut axis_index = Vec::new();
    // A loop with collectives in its body is cut out like a collective.
    let host_loop = |e: &Eqn| match &e.prim {
        Prim::Control(ControlOp::Scan(p)) => crate::lower::first_collective(&p.body).is_some(),
        _ => false,
    };
    // A reduction over one axis of the result of the same reduction over other axes
    // (`psum_axes(x, &["data", "model"])`), that result used nowhere else, is one collective over
    // all those axes: same level, one exchange (sum of sums, max of maxes, mean of equal-size
    // means). `merged[out]` = (the first operand, the axes so far).
    let uses = g.use_counts();
    let mut merged: HashMap<Var, (Var, Vec<String>)> = HashMap::new();
    let mut absorbed = vec![false; n];
    let reduction = |c: &Collective| {
        matches!(
            c.kind,
            CollectiveKind::Psum
                | CollectiveKind::Pmean
                | CollectiveKind::Pmax
                | CollectiveKind::Pmin
        )
    };
    for e in &g.eqns {
        let (Prim::Collective(c), Some(x)) = (&e.prim, e.inputs.first()) else {
            continue;
        };
        let inner = producers[x.idx()].map(|i| &g.eqns[i]);
        let chained = match inner.map(|i| (i, &i.prim)) {
            Some((i, Prim::Collective(c0)))
                if reduction(c)
                    && c0.kind == c.kind
                    && uses[i.out.idx()] == 1
                    && !g.outputs.contains(&i.out) =>
            {
                let (root, mut axes) = merged
                    .get(&i.out)
                    .cloned()
                    .unwrap_or_else(|| (i.inputs[0], vec![c0.axis_name.clone()]));
                (!axes.contains(&c.axis_name)).then(|| {
                    axes.push(c.axis_name.clone());
                    (i.out, root, axes)
                })
            }
            _ => None,
        };
        if let Some((inner_out, root, axes)) = chained {
            absorbed[inner_out.idx()] = true;
            merged.insert(e.out, (root, axes));
        }
    }
    for e in &g.eqns {
        if merged.contains_key(&e.out) {
            // Merged with the collective it reads: the same exchange.
            level[e.out.idx()] = level[e.inputs[0].idx()];
            continue;
        }
        let top = e.inputs.iter().map(|v| level[v.idx()]).max().unwrap_or(0);
        let top_out = if host_loop(e) { top + 1 } else { top };
        for x in &e.extra_outs {
            level[x.idx()] = top_out;
        }
        level[e.out.idx()] = match &e.prim {
            _ if host_loop(e) => top + 1,
            Prim::Collective(c) if c.kind == CollectiveKind::AxisIndex => {
                axis_index.push((e.out, c.axis_name.clone()));
                0
            }
            Prim::Collective(_) => top + 1,
            _ if e.inputs.is_empty() && !e.prim.is_control_flow() => {
                free[e.out.idx()] = true;
                0
            }
            _ => top,
        };
    }
    let is_ordinary = |e: &Eqn| {
        !matches!(e.prim.lowering(), Lowering::StageBoundary)
            && !host_loop(e)
            && (!e.inputs.is_empty() || e.prim.is_control_flow())
    };
    let last = g.eqns.iter().map(|e| level[e.out.idx()]).max().unwrap_or(0);
    // The last stage each variable is needed in (by an equation, a collective, or as an output).
    let mut needed_after = vec![None::<usize>; n];
    let mut need = |v: Var, s: usize| {
        let slot = &mut needed_after[v.idx()];
        *slot = Some(slot.map_or(s, |t: usize| t.max(s)));
    };
    for e in &g.eqns {
        let s = level[e.out.idx()];
        for &v in &e.inputs {
            // (A collective of level s reads its operand in the exchange before stage s.)
            need(v, s);
        }
    }
    for &v in &g.outputs {
        need(v, last + 1);
    }
    let ctx = Ctx {
        g,
        free: &free,
        producers: &producers,
        consts: g.consts.iter().map(|(v, h)| (*v, h)).collect(),
    };

    let mut stages = Vec::with_capacity(last + 1);
    let mut exchanges = Vec::with_capacity(last + 1);
    let mut loops = Vec::with_capacity(last + 1);
    for s in 0..=last {
        let mut b = Builder {
            ctx: &ctx,
            sg: Graph::default(),
            map: HashMap::new(),
            inputs: Vec::new(),
        };
        let mut outputs = Vec::new();
        for e in g
            .eqns
            .iter()
            .filter(|e| is_ordinary(e) && level[e.out.idx()] == s)
        {
            let ins: Vec<Var> = e.inputs.iter().map(|&v| b.bring(v)).collect();
            let outs: Vec<Var> = e
                .outs()
                .map(|o| {
                    let m = b.sg.new_var(g.aval(o).clone());
                    b.map.insert(o, m);
                    m
                })
                .collect();
            b.sg.eqns.push(Eqn {
                prim: e.prim.clone(),
                inputs: ins,
                out: outs[0],
                extra_outs: outs[1..].to_vec(),
            });
            for o in e.outs() {
                if needed_after[o.idx()].is_some_and(|t| t > s) {
                    outputs.push(o);
                }
            }
        }
        // Free values read by the next exchange (`psum(1.0)`) are materialized by this stage,
        // those that are program outputs by the last one.
        let mut materialize: Vec<Var> = g
            .eqns
            .iter()
            .filter(|e| {
                (matches!(e.prim.lowering(), Lowering::StageBoundary) || host_loop(e))
                    && level[e.out.idx()] == s + 1
            })
            .flat_map(|e| e.inputs.iter().copied())
            .collect();
        if s == last {
            materialize.extend(g.outputs.iter().copied());
        }
        for v in materialize {
            if free[v.idx()] && !outputs.contains(&v) {
                b.bring(v);
                outputs.push(v);
            }
        }
        let Builder {
            mut sg,
            map,
            inputs,
            ..
        } = b;
        sg.outputs = outputs.iter().map(|v| map[v]).collect();
        stages.push(Stage {
            graph: sg,
            inputs,
            outputs,
        });
        exchanges.push(
            g.eqns
                .iter()
                .filter_map(|e| match &e.prim {
                    Prim::Collective(c)
                        if c.kind != CollectiveKind::AxisIndex
                            && level[e.out.idx()] == s + 1
                            && !absorbed[e.out.idx()] =>
                    {
                        let (input, axes) = merged
                            .get(&e.out)
                            .cloned()
                            .unwrap_or_else(|| (e.inputs[0], vec![c.axis_name.clone()]));
                        Some(Exchange {
                            collective: c.clone(),
                            axes,
                            input,
                            out: e.out,
                        })
                    }
                    _ => None,
                })
                .collect(),
        );
        loops.push(
            g.eqns
                .iter()
                .filter(|e| host_loop(e) && level[e.out.idx()] == s + 1)
                .filter_map(|e| match &e.prim {
                    Prim::Control(ControlOp::Scan(p)) => Some(HostLoop {
                        params: p.clone(),
                        inputs: e.inputs.clone(),
                        outs: e.outs().collect(),
                    }),
                    _ => None,
                })
                .collect(),
        );
    }
    StagePlan {
        stages,
        exchanges,
        loops,
        axis_index,
    }
}

struct Ctx<'a> {
    g: &'a Graph,
    free: &'a [bool],
    producers: &'a [Option<usize>],
    consts: HashMap<Var, &'a HostArray>,
}

/// One stage graph being assembled, with the map from original to stage variables.
struct Builder<'a> {
    ctx: &'a Ctx<'a>,
    sg: Graph,
    map: HashMap<Var, Var>,
    inputs: Vec<Var>,
}

impl Builder<'_> {
    /// Bring original variable `v` into the stage: defined here already, rebuilt if free (a
    /// constant or zero-input equation), else a stage input read from the environment.
    fn bring(&mut self, v: Var) -> Var {
        if let Some(&m) = self.map.get(&v) {
            return m;
        }
        let c = self.ctx;
        let m = self.sg.new_var(c.g.aval(v).clone());
        self.map.insert(v, m);
        if c.free[v.idx()] {
            if let Some(h) = c.consts.get(&v) {
                self.sg.consts.push((m, (*h).clone()));
            } else if let Some(p) = c.producers[v.idx()] {
                self.sg.eqns.push(Eqn {
                    prim: c.g.eqns[p].prim.clone(),
                    inputs: vec![],
                    out: m,
                    extra_outs: Vec::new(),
                });
            }
        } else {
            self.sg.inputs.push(m);
            self.inputs.push(v);
        }
        m
    }
}
