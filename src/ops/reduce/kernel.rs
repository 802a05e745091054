//! Kernels of the reduction primitives: `reduce_*` (`shaders/reduce.wgsl`, the cooperative
//! `shaders/reduce_wg.wgsl`, the column kernel `shaders/reduce_cols.wgsl`) and `argmax`/`argmin`
//! (`shaders/argreduce.wgsl`). The per-output kernels start with `shaders/prologue.wgsl`
//! (bindings, helpers, the invocation's index). The reduced operand is read through the
//! [`Emitter`], so its elementwise prologue (`sum(x * x)`) is computed in the loop body instead of
//! stored first.

use crate::dtype::DType;
use crate::ops::layout;
use crate::ops::{ArgOp, ReduceOp};
use crate::trace::graph::{Graph, Var};
use crate::wgsl::{
    Emitter, KernelSrc, LANES, WG, balanced_grid, bindings, bindings_vec, const_wgsl, fill,
    helpers_src, index_lets, prologue,
};

const REDUCE: &str = include_str!("../../../shaders/reduce.wgsl");
const REDUCE_WG: &str = include_str!("../../../shaders/reduce_wg.wgsl");
/// One unrolled step of the cooperative reduction's loop (no comment: it lands inside the loop).
const REDUCE_WG_STEP: &str = include_str!("../../../shaders/reduce_wg_step.wgsl").trim_ascii_end();
/// The bindings of the second pass of a split reduction (no comment: it lands in the prologue).
const REDUCE_PARTS_BINDINGS: &str = include_str!("../../../shaders/reduce_parts_bindings.wgsl");
const ARGREDUCE: &str = include_str!("../../../shaders/argreduce.wgsl");
const REDUCE_COLS: &str = include_str!("../../../shaders/reduce_cols.wgsl");

/// Shapes of a reduction: output (kept axes) and reduced axes.
struct RedGeom {
    out_shape: Vec<usize>,
    red_shape: Vec<usize>,
}

fn red_geom(in_shape: &[usize], axes: &[usize]) -> RedGeom {
    debug_assert!(
        axes.windows(2).all(|w| w[0] < w[1]),
        "reduction axes are sorted"
    );
    RedGeom {
        out_shape: in_shape
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .collect(),
        red_shape: axes.iter().map(|&a| in_shape[a]).collect(),
    }
}

/// Emit the reduced value at (output index, reduction counter `r`) into a new emitter.
fn red_body<'a>(
    g: &'a Graph,
    producers: &'a [Option<usize>],
    materialized: &'a [bool],
    input: Var,
    axes: &[usize],
    out_idx: &[String],
    indent: usize,
) -> (Emitter<'a>, String) {
    let (mut em, full) = red_index(
        g,
        producers,
        materialized,
        input,
        axes,
        out_idx,
        indent,
        "r",
    );
    let v = em.value(input, &full);
    (em, v)
}

/// A new emitter and the input's full index at (output index, reduction counter `r`).
#[allow(clippy::too_many_arguments)]
fn red_index<'a>(
    g: &'a Graph,
    producers: &'a [Option<usize>],
    materialized: &'a [bool],
    input: Var,
    axes: &[usize],
    out_idx: &[String],
    indent: usize,
    r: &str,
) -> (Emitter<'a>, Vec<String>) {
    let in_shape = g.aval(input).shape.clone();
    let geo = red_geom(&in_shape, axes);
    let mut em = Emitter::new(g, producers, materialized, indent);
    let ridx = em.bind_idx(layout::unravel_wgsl(&geo.red_shape, r));
    let mut full = Vec::with_capacity(in_shape.len());
    let (mut ko, mut kr) = (0, 0);
    for d in 0..in_shape.len() {
        if axes.contains(&d) {
            full.push(ridx[kr].clone());
            kr += 1;
        } else {
            full.push(out_idx[ko].clone());
            ko += 1;
        }
    }
    (em, full)
}

/// The loop body of a reduction and how its steps combine: one reduced element per step, or
/// [`LANES`] adjacent ones (`r .. r + 3`) when the last reduced axis is the input's last axis and a
/// multiple of 4 long, each into its own accumulator (`acc0..acc3`, combined after the loop).
struct RedLoop<'a> {
    em: Emitter<'a>,
    lanes: usize,
    accs: String,
    combine: String,
    finish: String,
}

#[allow(clippy::too_many_arguments)]
fn red_loop<'a>(
    g: &'a Graph,
    producers: &'a [Option<usize>],
    materialized: &'a [bool],
    op: ReduceOp,
    input: Var,
    axes: &[usize],
    out_idx: &[String],
    indent: usize,
    outer: usize,
) -> RedLoop<'a> {
    let in_aval = g.aval(input).clone();
    let (dt, rank) = (in_aval.dtype, in_aval.rank());
    let r: usize = axes.iter().map(|&a| in_aval.shape[a]).product();
    let pad = "    ".repeat(indent);
    let ident = const_wgsl(op.identity(dt));
    let t = dt.wgsl();
    let vectorize = rank > 0
        && axes.last() == Some(&(rank - 1))
        && in_aval.shape[rank - 1].is_multiple_of(LANES)
        && r > 0;
    if !vectorize {
        let (mut em, v) = red_body(g, producers, materialized, input, axes, out_idx, indent);
        em.line(&format!("let x = {v};"));
        return RedLoop {
            em,
            lanes: 1,
            accs: format!("{}var acc: {t} = {ident};", "    ".repeat(outer)),
            combine: format!("{pad}acc = {};", op.wgsl_combine(dt, "acc", "x")),
            finish: String::new(),
        };
    }
    let (em, full) = red_index(
        g,
        producers,
        materialized,
        input,
        axes,
        out_idx,
        indent,
        "r",
    );
    let names: [String; LANES] = std::array::from_fn(|c| format!("lane{c}"));
    let last = full[rank - 1].clone();
    let mut em = em.with_lanes(names.iter().cloned(), Some(names.clone()), "");
    for (c, nm) in names.iter().enumerate() {
        em.line(&format!("let {nm} = {last} + {c}u;"));
    }
    let mut combine = Vec::new();
    for (c, nm) in names.iter().enumerate() {
        em.set_lane(c);
        let mut ii = full.clone();
        ii[rank - 1] = nm.clone();
        let v = em.value(input, &ii);
        combine.push(format!(
            "{pad}acc{c} = {};",
            op.wgsl_combine(dt, &format!("acc{c}"), &v)
        ));
    }
    em.end_lanes();
    let outer = "    ".repeat(outer);
    let accs = (0..LANES)
        .map(|c| format!("{outer}var acc{c}: {t} = {ident};"))
        .collect::<Vec<_>>()
        .join("\n");
    let pair = |a: &str, b: &str| op.wgsl_combine(dt, a, b);
    let finish = format!(
        "{outer}let acc01 = {};\n{outer}let acc23 = {};\n{outer}let acc = {};",
        pair("acc0", "acc1"),
        pair("acc2", "acc3"),
        pair("acc01", "acc23"),
    );
    RedLoop {
        em,
        lanes: LANES,
        accs,
        combine: combine.join("\n"),
        finish,
    }
}

/// Invocations of the cooperative reduction that walk one contiguous range together, on adjacent
/// steps: lavapipe's SIMD width (llvmpipe runs 8 invocations as one AVX2 loop), and 8 vec4 loads
/// are one 128-byte segment on GPUs.
const RED_GROUP: usize = 8;
/// Steps each invocation of the cooperative reduction loads per loop iteration (measured on
/// lavapipe, 16 Mi f32: 4 beats 1 by 10 % and 2 by 5 %, 8 is slower; small for llvmpipe GL).
const RED_UNROLL: usize = 4;

/// Kernels of `out = reduce(op, input, axes)`. One kernel, or two when a long reduction is shared by
/// several workgroups per output: then the first writes `n_out * parts` partials to a temporary buffer.
pub(crate) struct ReducePlan {
    pub first: KernelSrc,
    /// (parts, second kernel reading the partials as its only input binding)
    pub second: Option<(usize, KernelSrc)>,
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce_kernels(
    g: &Graph,
    producers: &[Option<usize>],
    materialized: &[bool],
    op: ReduceOp,
    input: Var,
    axes: &[usize],
    max_wg: u32,
    spread: usize,
) -> ReducePlan {
    let in_aval = g.aval(input).clone();
    let dt = in_aval.dtype;
    let geo = red_geom(&in_aval.shape, axes);
    let n: usize = geo.out_shape.iter().product();
    let r: usize = geo.red_shape.iter().product();
    let t = dt.wgsl();
    let label = format!("{}_{}", op.name(), in_aval);
    if let Some(plan) = column_kernels(g, producers, materialized, op, input, axes, max_wg, spread)
    {
        return plan;
    }
    // One invocation per output leaves a device idle below `spread / 32` outputs (512 on CPU
    // adapters, 8192 on GPUs): then workgroups share each long output instead.
    if n < spread / 32 && r >= 4096 {
        // Cooperative: `parts` workgroups per output, 256 invocations each, in 32 groups of 8.
        let (index, idx) = index_lets(&geo.out_shape, "gi", "i", 2);
        // The accumulators live outside the `if`, at the function's top level.
        let rl = red_loop(g, producers, materialized, op, input, axes, &idx, 3, 1);
        let rv = r / rl.lanes;
        // Each workgroup's chunk is a whole number of unrolled iterations of its 32 groups, so
        // only the groups of the last chunk have tails; `parts` is recounted for that rounding.
        let span = RED_GROUP * RED_UNROLL;
        let per_wg = span * (WG as usize / RED_GROUP);
        // At least 16384 elements per workgroup, and at most `spread / 256` workgroups per
        // output (64 on CPU adapters), never over 256: the second pass combines an output's
        // parts serially in one invocation. 256 was not tuned against other caps on the H200.
        let most = (spread / WG as usize).clamp(1, 256);
        let chunk = rv.div_ceil((r / 16384).clamp(1, most)).div_ceil(per_wg) * per_wg;
        let parts = rv.div_ceil(chunk);
        let body = rl.em.body().trim_end();
        let unrolled = (0..RED_UNROLL)
            .map(|u| {
                fill(
                    REDUCE_WG_STEP,
                    &[
                        ("OFF", &(u * RED_GROUP).to_string()),
                        ("LANES", &rl.lanes.to_string()),
                        ("BODY", body),
                        ("COMBINE", &rl.combine),
                    ],
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        let wgsl = fill(
            REDUCE_WG,
            &[
                (
                    "BINDINGS",
                    &bindings_vec(g, &rl.em.inputs, rl.em.vec_inputs(), dt.wgsl_storage()),
                ),
                ("HELPERS", &helpers_src(&rl.em.helpers)),
                ("T", t),
                ("P", &parts.to_string()),
                ("G", &RED_GROUP.to_string()),
                ("CHUNK", &chunk.to_string()),
                ("SUB", &(chunk / (WG as usize / RED_GROUP)).to_string()),
                ("SPAN", &span.to_string()),
                ("UNROLL", &RED_UNROLL.to_string()),
                ("UNROLLED", &unrolled),
                ("N", &n.to_string()),
                ("RV", &rv.to_string()),
                ("LANES", &rl.lanes.to_string()),
                ("INDEX", index.trim_end()),
                ("ACCS", &rl.accs),
                ("BODY", body),
                ("COMBINE", &rl.combine),
                ("FINISH", &rl.finish),
                ("COMBINE_SHARED", &op.wgsl_combine(dt, "a", "x")),
                ("STORE", "acc"),
            ],
        );
        let first = KernelSrc {
            label: format!("{label}_wg"),
            wgsl,
            inputs: rl.em.inputs,
            workgroups: balanced_grid(n * parts, max_wg),
        };
        let second = (parts > 1).then(|| (parts, parts_kernel(op, dt, n, parts, &label, max_wg)));
        return ReducePlan { first, second };
    }
    let (index, idx) = index_lets(&geo.out_shape, "gi", "i", 1);
    let rl = red_loop(g, producers, materialized, op, input, axes, &idx, 2, 1);
    let wgsl = fill(
        REDUCE,
        &[
            (
                "PROLOGUE",
                &prologue(
                    &bindings_vec(g, &rl.em.inputs, rl.em.vec_inputs(), dt.wgsl_storage()),
                    &rl.em.helpers,
                    n,
                    &index,
                ),
            ),
            ("RV", &(r / rl.lanes).to_string()),
            ("LANES", &rl.lanes.to_string()),
            ("ACCS", &rl.accs),
            ("BODY", rl.em.body().trim_end()),
            ("COMBINE", &rl.combine),
            ("FINISH", &rl.finish),
            ("STORE", "acc"),
        ],
    );
    ReducePlan {
        first: KernelSrc {
            label,
            wgsl,
            inputs: rl.em.inputs,
            workgroups: balanced_grid(n.div_ceil(WG as usize), max_wg),
        },
        second: None,
    }
}

/// Invocations a reduction of few outputs is spread over (by splitting its reduced range) on a CPU
/// adapter, so that it does not run on a handful of workgroups: 64 workgroups of 256 keep
/// lavapipe's and llvmpipe's threads busy. The device's chooser gives the figure for its adapter
/// (`MatmulChooser::reduce_spread`).
pub(crate) const CPU_SPREAD: usize = 16384;
/// [`CPU_SPREAD`] for GPUs: 1024 workgroups of 256, several per multiprocessor of a large GPU
/// (an H200 has 132), so that memory requests in flight cover its bandwidth. Measured on an
/// H200 (docs/PERFORMANCE.md, "A real GPU"): row sums of 1024 x 65536 with one invocation per row
/// ran at 13 GB/s against a 2.5 TB/s copy.
pub(crate) const GPU_SPREAD: usize = 1 << 18;
/// Fewest reduced steps one part of a split column reduction takes.
const RED_PART_MIN: usize = 128;
/// `vec4`s of adjacent outputs each invocation of a column reduction computes, at most (measured
/// on lavapipe, column sums of 16384 x 1024: 1 vec4 17-18 ms, 2 13-14 ms, 4 8-10 ms).
const COL_VECS: usize = 4;

/// The reduction kernels when the last axis is kept and a multiple of 4 long (column sums, a bias
/// gradient's sum over the batch): up to [`COL_VECS`] groups of [`LANES`] adjacent outputs per
/// invocation, `vec4` loads along the last axis, and the reduced range split into parts (a second
/// pass combines them in order) when the outputs alone are too few invocations. `None` where it
/// does not apply.
#[allow(clippy::too_many_arguments)]
fn column_kernels(
    g: &Graph,
    producers: &[Option<usize>],
    materialized: &[bool],
    op: ReduceOp,
    input: Var,
    axes: &[usize],
    max_wg: u32,
    spread: usize,
) -> Option<ReducePlan> {
    let in_aval = g.aval(input).clone();
    let (dt, rank) = (in_aval.dtype, in_aval.rank());
    let geo = red_geom(&in_aval.shape, axes);
    let n: usize = geo.out_shape.iter().product();
    let r: usize = geo.red_shape.iter().product();
    let applies = rank > 0
        && !axes.contains(&(rank - 1))
        && in_aval.shape[rank - 1].is_multiple_of(LANES)
        && matches!(dt, DType::F32 | DType::I32 | DType::U32)
        && n > 0
        && r > 1;
    if !applies {
        return None;
    }
    // `kv` vec4s of adjacent outputs per invocation: more bytes of each row per invocation
    // (CPU adapters' prefetchers do not follow the row stride of a column walk).
    let last = in_aval.shape[rank - 1];
    let kv = [COL_VECS, 2, 1]
        .into_iter()
        .find(|&k| last.is_multiple_of(LANES * k))
        .unwrap_or(1);
    let per = LANES * kv;
    let ng = n / per;
    let parts = spread.div_ceil(ng).min(r / RED_PART_MIN).max(1);
    let chunk = r.div_ceil(parts);
    let parts = r.div_ceil(chunk);
    let t = dt.wgsl();
    let st = dt.wgsl_storage();
    let ident = const_wgsl(op.identity(dt));
    let out_rank = geo.out_shape.len();
    let (mut index, mut idx) = index_lets(&geo.out_shape, "gb", "i", 1);
    let names: Vec<[String; LANES]> = (0..kv)
        .map(|k| std::array::from_fn(|c| format!("lane{}", k * LANES + c)))
        .collect();
    for (j, nm) in names.iter().flatten().enumerate() {
        index.push_str(&format!("    let {nm} = {} + {j}u;\n", idx[out_rank - 1]));
    }
    idx[out_rank - 1] = names[0][0].clone();
    let (mut em, full) = red_index(g, producers, materialized, input, axes, &idx, 2, "r");
    let mut combine = Vec::new();
    for (k, group) in names.iter().enumerate() {
        em = em.with_lanes(group.iter().cloned(), Some(group.clone()), "");
        for (c, nm) in group.iter().enumerate() {
            em.set_lane(c);
            let mut ii = full.clone();
            ii[rank - 1] = nm.clone();
            let v = em.value(input, &ii);
            let acc = format!("acc{}", k * LANES + c);
            combine.push(format!(
                "        {acc} = {};",
                op.wgsl_combine(dt, &acc, &v)
            ));
        }
        // Every group reads the same buffers at the same alignment: the same declarations.
        em.end_lanes();
    }
    let accs = (0..per)
        .map(|j| format!("    var acc{j}: {t} = {ident};"))
        .collect::<Vec<_>>()
        .join("\n");
    let (store, out_elem) = if parts == 1 {
        let s = (0..kv)
            .map(|k| {
                let a = |c: usize| format!("acc{}", k * LANES + c);
                format!(
                    "    out0[gi * {kv}u + {k}u] = vec4<{st}>({}, {}, {}, {});",
                    a(0),
                    a(1),
                    a(2),
                    a(3)
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        (s, format!("vec4<{st}>"))
    } else {
        let s = (0..per)
            .map(|j| format!("    out0[(gb + {j}u) * {parts}u + part] = acc{j};"))
            .collect::<Vec<_>>()
            .join("\n");
        (s, st.to_string())
    };
    let wgsl = fill(
        REDUCE_COLS,
        &[
            (
                "BINDINGS",
                &bindings_vec(g, &em.inputs, em.vec_inputs(), &out_elem),
            ),
            ("HELPERS", &helpers_src(&em.helpers)),
            ("LANES", &per.to_string()),
            ("P", &parts.to_string()),
            ("CHUNK", &chunk.to_string()),
            ("NG", &ng.to_string()),
            ("R", &r.to_string()),
            ("INDEX", index.trim_end()),
            ("ACCS", &accs),
            ("BODY", em.body().trim_end()),
            ("COMBINE", &combine.join("\n")),
            ("STORE", &store),
        ],
    );
    let label = format!("{}_{}_cols", op.name(), in_aval);
    let first = KernelSrc {
        label: label.clone(),
        wgsl,
        inputs: em.inputs,
        workgroups: balanced_grid((ng * parts).div_ceil(WG as usize), max_wg),
    };
    let second = (parts > 1).then(|| (parts, parts_kernel(op, dt, n, parts, &label, max_wg)));
    Some(ReducePlan { first, second })
}

/// The second pass of a split reduction: output `gi` combines its `parts` partials (at
/// `gi * parts ..`) in order.
fn parts_kernel(
    op: ReduceOp,
    dt: DType,
    n: usize,
    parts: usize,
    label: &str,
    max_wg: u32,
) -> KernelSrc {
    let t = dt.wgsl();
    let ident = const_wgsl(op.identity(dt));
    let combine = op.wgsl_combine(dt, "acc", "x");
    let wgsl = fill(
        REDUCE,
        &[
            (
                "PROLOGUE",
                &prologue(&fill(REDUCE_PARTS_BINDINGS, &[("T", t)]), &[], n, ""),
            ),
            ("RV", &parts.to_string()),
            ("LANES", "1"),
            ("ACCS", &format!("    var acc: {t} = {ident};")),
            ("BODY", &format!("        let x = in0[gi * {parts}u + r];")),
            ("COMBINE", &format!("        acc = {combine};")),
            ("FINISH", ""),
            ("STORE", "acc"),
        ],
    );
    KernelSrc {
        label: format!("{label}_parts"),
        wgsl,
        inputs: vec![],
        workgroups: balanced_grid(n.div_ceil(WG as usize), max_wg),
    }
}

pub(crate) fn argreduce_kernel(
    g: &Graph,
    producers: &[Option<usize>],
    materialized: &[bool],
    op: ArgOp,
    input: Var,
    axis: usize,
    max_wg: u32,
) -> KernelSrc {
    let in_aval = g.aval(input).clone();
    let geo = red_geom(&in_aval.shape, &[axis]);
    let n: usize = geo.out_shape.iter().product();
    let r: usize = geo.red_shape.iter().product();
    let (index, idx) = index_lets(&geo.out_shape, "gi", "i", 1);
    let (em, v) = red_body(g, producers, materialized, input, &[axis], &idx, 2);
    let body = format!("{}\n        let x = {v};", em.body().trim_end());
    let wgsl = fill(
        ARGREDUCE,
        &[
            (
                "PROLOGUE",
                &prologue(&bindings(g, &em.inputs, "i32"), &em.helpers, n, &index),
            ),
            ("T", in_aval.dtype.wgsl()),
            ("R", &r.to_string()),
            ("BODY", &body),
            ("BETTER", &op.wgsl_better(in_aval.dtype, "x", "best")),
        ],
    );
    KernelSrc {
        label: format!("{}_{}", op.name(), in_aval),
        wgsl,
        inputs: em.inputs,
        workgroups: balanced_grid(n.div_ceil(WG as usize), max_wg),
    }
}
