//! Kernels of the window primitives (`crate::ops::window`): `reduce_window`,
//! `select_and_scatter_add` and `select_and_gather`, filled into `shaders/reduce_window.wgsl`,
//! `shaders/select_scatter.wgsl` and `shaders/select_gather.wgsl`. Operands are read through the [`Emitter`], so an elementwise
//! prologue (`max_pool(relu(x))`) is computed in the kernel's load instead of stored first.

use super::{Emitter, KernelSrc, WG, balanced_grid, bindings, const_wgsl, fill, helpers_src};
use super::{index_lets, layout};
use crate::dtype::Scalar;
use crate::ops::window::{Window, WindowKind, WindowOp, WindowPrim};
use crate::trace::graph::{Eqn, Graph, Var};

const REDUCE_WINDOW: &str = include_str!("../../shaders/reduce_window.wgsl");
const SELECT_SCATTER: &str = include_str!("../../shaders/select_scatter.wgsl");
const SELECT_GATHER: &str = include_str!("../../shaders/select_gather.wgsl");

/// WGSL: does candidate `x` replace the selected `best`? (XLA's select keeps `best` while
/// `best >= x`, `<=` for min: the first max/min wins ties.)
fn replaces(op: WindowOp) -> &'static str {
    match op {
        WindowOp::Min => "!(best <= x)",
        WindowOp::Max | WindowOp::Sum => "!(best >= x)",
    }
}

/// The kernel of window primitive `p`, equation `e` of `g`.
pub(crate) fn kernel(
    g: &Graph,
    producers: &[Option<usize>],
    materialized: &[bool],
    p: &WindowPrim,
    e: &Eqn,
    max_wg: u32,
) -> KernelSrc {
    let (op, w, ins) = (p.op, &p.window, &e.inputs);
    match p.kind {
        WindowKind::ReduceWindow => {
            reduce_window_kernel(g, producers, materialized, op, w, ins[0], e.out, max_wg)
        }
        WindowKind::SelectAndScatterAdd => {
            select_scatter_kernel(g, producers, materialized, op, w, ins[0], ins[1], max_wg)
        }
        WindowKind::SelectAndGather => select_gather_kernel(
            g,
            producers,
            materialized,
            op,
            w,
            ins[0],
            ins[1],
            e.out,
            max_wg,
        ),
    }
}

/// `ind` levels of indentation.
fn pad(ind: usize) -> String {
    "    ".repeat(ind)
}

/// Lines computing, for window cell counter `r` of the window at output index `o`, the operand
/// index `q{tag}_a` of every axis and `ok` (the cell is a real element, not padding or a hole). The
/// checks that the geometry makes always true are left out.
fn cell_lines(
    w: &Window,
    in_shape: &[usize],
    o: &[String],
    r: &str,
    tag: &str,
    ind: usize,
) -> (String, Vec<String>) {
    let mut s = String::new();
    let mut conds = Vec::new();
    let mut q = Vec::new();
    let ks = layout::unravel_wgsl(&w.dims, r);
    for a in 0..in_shape.len() {
        let (st, wd, bd) = (w.strides[a], w.window_dilation[a], w.base_dilation[a]);
        let (lo, hi) = w.padding[a];
        let k = format!("k{tag}_{a}");
        s.push_str(&format!("{}let {k} = {};\n", pad(ind), ks[a]));
        let p = format!("p{tag}_{a}");
        s.push_str(&format!(
            "{}let {p} = i32({} * {st}u + {k} * {wd}u) - {lo}i;\n",
            pad(ind),
            o[a]
        ));
        if lo > 0 {
            conds.push(format!("{p} >= 0i"));
        }
        if bd > 1 {
            conds.push(format!("{p} % {bd}i == 0i"));
        }
        if hi > 0 || bd > 1 {
            let dil = (in_shape[a].max(1) - 1) * bd + 1;
            conds.push(format!("{p} < {dil}i"));
        }
        let qa = format!("q{tag}_{a}");
        let div = if bd > 1 {
            format!(" / {bd}u")
        } else {
            String::new()
        };
        s.push_str(&format!("{}let {qa} = u32({p}){div};\n", pad(ind)));
        q.push(qa);
    }
    let ok = if conds.is_empty() {
        "true".to_string()
    } else {
        conds.join(" && ")
    };
    s.push_str(&format!("{}let ok = {ok};\n", pad(ind)));
    (s, q)
}

/// The `reduce_window` kernel of `input` (one invocation per output element).
#[allow(clippy::too_many_arguments)]
fn reduce_window_kernel(
    g: &Graph,
    producers: &[Option<usize>],
    materialized: &[bool],
    op: WindowOp,
    w: &Window,
    input: Var,
    out: Var,
    max_wg: u32,
) -> KernelSrc {
    let in_aval = g.aval(input).clone();
    let out_aval = g.aval(out).clone();
    let dt = in_aval.dtype;
    let n = out_aval.size();
    let (index, o) = index_lets(&out_aval.shape, "gi", "i", 1);
    let (cell, q) = cell_lines(w, &in_aval.shape, &o, "r", "", 2);
    let mut em = Emitter::new(g, producers, materialized, 3);
    let v = em.value(input, &q);
    let rop = op.reduce_op();
    let wgsl = fill(
        REDUCE_WINDOW,
        &[
            ("BINDINGS", &bindings(g, &em.inputs, dt.wgsl_storage())),
            ("HELPERS", &helpers_src(&em.helpers)),
            ("T", dt.wgsl()),
            ("N", &n.to_string()),
            ("W", &w.size().to_string()),
            ("INIT", &const_wgsl(rop.identity(dt))),
            ("INDEX", index.trim_end()),
            ("CELL", cell.trim_end()),
            ("BODY", em.body.trim_end()),
            ("COMBINE", &rop.wgsl_combine(dt, "acc", &v)),
        ],
    );
    KernelSrc {
        label: format!("{}_{}", op.name(), in_aval),
        wgsl,
        inputs: em.inputs,
        workgroups: balanced_grid(n.div_ceil(WG as usize), max_wg),
    }
}

/// The `select_and_scatter_add(source, operand)` kernel (one invocation per operand element).
#[allow(clippy::too_many_arguments)]
fn select_scatter_kernel(
    g: &Graph,
    producers: &[Option<usize>],
    materialized: &[bool],
    op: WindowOp,
    w: &Window,
    source: Var,
    operand: Var,
    max_wg: u32,
) -> KernelSrc {
    let src_aval = g.aval(source).clone();
    let x_aval = g.aval(operand).clone();
    let dt = x_aval.dtype;
    let n = x_aval.size();
    let (index, i) = index_lets(&x_aval.shape, "gi", "i", 1);
    // The windows holding operand cell i as their cell r: along each axis the padded position
    // i * bd + lo equals o * s + k * wd.
    let ks = layout::unravel_wgsl(&w.dims, "r");
    let mut win = String::new();
    let mut conds = Vec::new();
    let mut o = Vec::new();
    for a in 0..x_aval.rank() {
        let (st, wd, bd) = (w.strides[a], w.window_dilation[a], w.base_dilation[a]);
        let lo = w.padding[a].0;
        win.push_str(&format!("{}let kw_{a} = {};\n", pad(2), ks[a]));
        win.push_str(&format!(
            "{}let t_{a} = i32({} * {bd}u + {lo}u) - i32(kw_{a} * {wd}u);\n",
            pad(2),
            i[a]
        ));
        conds.push(format!("t_{a} >= 0i"));
        if st > 1 {
            conds.push(format!("t_{a} % {st}i == 0i"));
        }
        conds.push(format!("t_{a} < {}i", src_aval.shape[a] * st));
        let div = if st > 1 {
            format!(" / {st}u")
        } else {
            String::new()
        };
        win.push_str(&format!("{}let o_{a} = u32(t_{a}){div};\n", pad(2)));
        o.push(format!("o_{a}"));
    }
    win.push_str(&format!("{}let win = {};", pad(2), conds.join(" && ")));
    let (cell, q) = cell_lines(w, &x_aval.shape, &o, "r2", "2", 4);
    let mut em = Emitter::new(g, producers, materialized, 5);
    let x = em.value(operand, &q);
    let mut body = std::mem::take(&mut em.body);
    body.push_str(&format!("{}let x = {x};\n", pad(5)));
    em.indent = 4;
    let s = em.value(source, &o);
    let mut src = std::mem::take(&mut em.body);
    src.push_str(&format!("{}acc = acc + {s};\n", pad(4)));
    let wgsl = fill(
        SELECT_SCATTER,
        &[
            ("BINDINGS", &bindings(g, &em.inputs, dt.wgsl_storage())),
            ("HELPERS", &helpers_src(&em.helpers)),
            ("T", dt.wgsl()),
            ("N", &n.to_string()),
            ("W", &w.size().to_string()),
            ("ZERO", &const_wgsl(Scalar::F32(0.0).cast(dt))),
            ("INDEX", index.trim_end()),
            ("WINDOW", &win),
            ("CELL", cell.trim_end()),
            ("BODY", body.trim_end()),
            ("REPLACES", replaces(op)),
            ("SOURCE", src.trim_end()),
        ],
    );
    KernelSrc {
        label: format!("select_and_scatter_add_{}", x_aval),
        wgsl,
        inputs: em.inputs,
        workgroups: balanced_grid(n.div_ceil(WG as usize), max_wg),
    }
}

/// The `select_and_gather(tangent, operand)` kernel (one invocation per window).
#[allow(clippy::too_many_arguments)]
fn select_gather_kernel(
    g: &Graph,
    producers: &[Option<usize>],
    materialized: &[bool],
    op: WindowOp,
    w: &Window,
    tangent: Var,
    operand: Var,
    out: Var,
    max_wg: u32,
) -> KernelSrc {
    let x_aval = g.aval(operand).clone();
    let out_aval = g.aval(out).clone();
    let dt = x_aval.dtype;
    let n = out_aval.size();
    let (index, o) = index_lets(&out_aval.shape, "gi", "i", 1);
    let (cell, q) = cell_lines(w, &x_aval.shape, &o, "r", "", 2);
    let mut em = Emitter::new(g, producers, materialized, 3);
    let x = em.value(operand, &q);
    let mut body = std::mem::take(&mut em.body);
    body.push_str(&format!("{}let x = {x};\n", pad(3)));
    // The selected cell's indices again (a real cell: no check needed), and the tangent there.
    let (mut sel, qs) = cell_lines(w, &x_aval.shape, &o, "best_r", "s", 2);
    em.indent = 2;
    let t = em.value(tangent, &qs);
    sel.push_str(&em.body);
    sel.push_str(&format!("{}res = {t};\n", pad(2)));
    let wgsl = fill(
        SELECT_GATHER,
        &[
            ("BINDINGS", &bindings(g, &em.inputs, dt.wgsl_storage())),
            ("HELPERS", &helpers_src(&em.helpers)),
            ("T", dt.wgsl()),
            ("N", &n.to_string()),
            ("W", &w.size().to_string()),
            ("ZERO", &const_wgsl(Scalar::F32(0.0).cast(dt))),
            ("INDEX", index.trim_end()),
            ("CELL", cell.trim_end()),
            ("BODY", body.trim_end()),
            ("REPLACES", replaces(op)),
            ("SELECTED", sel.trim_end()),
        ],
    );
    KernelSrc {
        label: format!("select_and_gather_{}", x_aval),
        wgsl,
        inputs: em.inputs,
        workgroups: balanced_grid(n.div_ceil(WG as usize), max_wg),
    }
}
