//! Kernels of the window primitives: `reduce_window`, `select_and_scatter_add` and
//! `select_and_gather`, filled into `shaders/reduce_window.wgsl`, `shaders/select_scatter.wgsl`
//! and `shaders/select_gather.wgsl`, which start with `shaders/prologue.wgsl` (bindings, helpers,
//! the invocation's index) like the reductions. Operands are read through the [`Emitter`], so an
//! elementwise prologue (`max_pool(relu(x))`) is computed in the kernel's load instead of stored
//! first.

use super::{Window, WindowKind, WindowOp, WindowPrim};
use crate::dtype::{DType, Scalar};
use crate::ops::layout;
use crate::ops::rules::PlanCx;
use crate::trace::graph::{Eqn, Var};
use crate::wgsl::{
    Emitter, KernelSrc, WG, balanced_grid, bindings, const_wgsl, fill, index_lets, prologue,
};

const REDUCE_WINDOW: &str = include_str!("../../../shaders/reduce_window.wgsl");
const SELECT_SCATTER: &str = include_str!("../../../shaders/select_scatter.wgsl");
const SELECT_GATHER: &str = include_str!("../../../shaders/select_gather.wgsl");

/// WGSL: does candidate `x` of dtype `dt` replace the selected `best`? XLA's select keeps `best`
/// while `best >= x` (`<=` for min): the first max/min wins ties, and a NaN on either side
/// replaces. For f32 the NaN cases are tested by their bits: llvmpipe GL compiles `!(best >= x)`
/// as `best < x`, which is false for a NaN.
fn replaces(op: WindowOp, dt: DType) -> String {
    let order = match op {
        WindowOp::Min => "best > x",
        WindowOp::Max | WindowOp::Sum => "best < x",
    };
    if dt == DType::F32 {
        use crate::ops::elementwise::isnan_wgsl;
        format!("({} || {} || {order})", isnan_wgsl("best"), isnan_wgsl("x"))
    } else {
        order.to_string()
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

/// The kernel of window primitive `p`, equation `e`.
pub(super) fn kernel(cx: &PlanCx<'_>, p: &WindowPrim, e: &Eqn) -> KernelSrc {
    let (op, w, ins) = (p.op, &p.window, &e.inputs);
    match p.kind {
        WindowKind::ReduceWindow => reduce_window_kernel(cx, op, w, ins[0], e.out),
        WindowKind::SelectAndScatterAdd => select_scatter_kernel(cx, op, w, ins[0], ins[1]),
        WindowKind::SelectAndGather => select_gather_kernel(cx, op, w, ins[0], ins[1], e.out),
    }
}

/// What the window kernels share: one invocation (`gi`) per element of a shape, the index names
/// of that element, and the emitter reading the operands (their producers inlined).
struct Invocation<'a> {
    cx: &'a PlanCx<'a>,
    em: Emitter<'a>,
    /// `let` lines of the element's index, and its per-axis names.
    index: String,
    idx: Vec<String>,
    n: usize,
}

impl<'a> Invocation<'a> {
    /// One invocation per element of `shape`; the emitter writes at `indent` levels.
    fn new(cx: &'a PlanCx<'a>, shape: &[usize], indent: usize) -> Self {
        let (index, idx) = index_lets(shape, "gi", "i", 1);
        Invocation {
            cx,
            em: Emitter::new(cx.g, cx.producers, cx.materialized, indent),
            index,
            idx,
            n: crate::tensor::saturating_size(shape),
        }
    }

    /// The window at this invocation's index (cell counter `r`, at indentation 2) and `operand`
    /// read at its cell: the cell's lines, the read's statements and the value read.
    fn read_cell(&mut self, w: &Window, operand: Var) -> (String, String, String) {
        let (cell, q) = cell_lines(w, &self.cx.g.aval(operand).shape, &self.idx, "r", "", 2);
        let v = self.em.value(operand, &q);
        (cell, self.em.take_body(), v)
    }

    /// The kernel: `template` filled with the prologue, the element type `T` (`dt`), the window's
    /// cell count `W` and the kernel's own `pairs`.
    fn finish(
        self,
        template: &str,
        label: String,
        dt: DType,
        w: &Window,
        pairs: &[(&str, &str)],
    ) -> KernelSrc {
        let bindings = bindings(self.cx.g, &self.em.inputs, dt.wgsl_storage());
        let prologue = prologue(&bindings, &self.em.helpers, self.n, &self.index);
        let cells = w.size().to_string();
        let mut all = vec![
            ("PROLOGUE", prologue.as_str()),
            ("T", dt.wgsl()),
            ("W", cells.as_str()),
        ];
        all.extend_from_slice(pairs);
        KernelSrc {
            label,
            wgsl: fill(template, &all),
            inputs: self.em.inputs,
            workgroups: balanced_grid(self.n.div_ceil(WG as usize), self.cx.max_wg),
        }
    }
}

/// WGSL zero of `dt`.
fn zero(dt: DType) -> String {
    const_wgsl(Scalar::F32(0.0).cast(dt))
}

/// The `reduce_window` kernel of `input` (one invocation per output element).
fn reduce_window_kernel(
    cx: &PlanCx<'_>,
    op: WindowOp,
    w: &Window,
    input: Var,
    out: Var,
) -> KernelSrc {
    let in_aval = cx.g.aval(input);
    let dt = in_aval.dtype;
    let mut inv = Invocation::new(cx, &cx.g.aval(out).shape, 3);
    let (cell, body, v) = inv.read_cell(w, input);
    let rop = op.reduce_op();
    inv.finish(
        REDUCE_WINDOW,
        format!("{}_{}", op.name(), in_aval),
        dt,
        w,
        &[
            ("INIT", &const_wgsl(rop.identity(dt))),
            ("CELL", cell.trim_end()),
            ("BODY", body.trim_end()),
            ("COMBINE", &rop.wgsl_combine(dt, "acc", &v)),
        ],
    )
}

/// The `select_and_scatter_add(source, operand)` kernel (one invocation per operand element).
fn select_scatter_kernel(
    cx: &PlanCx<'_>,
    op: WindowOp,
    w: &Window,
    source: Var,
    operand: Var,
) -> KernelSrc {
    let src_aval = cx.g.aval(source);
    let x_aval = cx.g.aval(operand);
    let dt = x_aval.dtype;
    let mut inv = Invocation::new(cx, &x_aval.shape, 5);
    let i = &inv.idx;
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
    let x = inv.em.value(operand, &q);
    let mut body = inv.em.take_body();
    body.push_str(&format!("{}let x = {x};\n", pad(5)));
    inv.em.indent = 4;
    let s = inv.em.value(source, &o);
    let mut src = inv.em.take_body();
    src.push_str(&format!("{}acc = acc + {s};\n", pad(4)));
    inv.finish(
        SELECT_SCATTER,
        format!("select_and_scatter_add_{}", x_aval),
        dt,
        w,
        &[
            ("ZERO", &zero(dt)),
            ("WINDOW", &win),
            ("CELL", cell.trim_end()),
            ("BODY", body.trim_end()),
            ("REPLACES", &replaces(op, dt)),
            ("SOURCE", src.trim_end()),
        ],
    )
}

/// The `select_and_gather(tangent, operand)` kernel (one invocation per window).
fn select_gather_kernel(
    cx: &PlanCx<'_>,
    op: WindowOp,
    w: &Window,
    tangent: Var,
    operand: Var,
    out: Var,
) -> KernelSrc {
    let x_aval = cx.g.aval(operand);
    let dt = x_aval.dtype;
    let mut inv = Invocation::new(cx, &cx.g.aval(out).shape, 3);
    let (cell, mut body, x) = inv.read_cell(w, operand);
    body.push_str(&format!("{}let x = {x};\n", pad(3)));
    // The selected cell's indices again (a real cell: no check needed), and the tangent there.
    let (mut sel, qs) = cell_lines(w, &x_aval.shape, &inv.idx, "best_r", "s", 2);
    inv.em.indent = 2;
    let t = inv.em.value(tangent, &qs);
    sel.push_str(&inv.em.take_body());
    sel.push_str(&format!("{}res = {t};\n", pad(2)));
    inv.finish(
        SELECT_GATHER,
        format!("select_and_gather_{}", x_aval),
        dt,
        w,
        &[
            ("ZERO", &zero(dt)),
            ("CELL", cell.trim_end()),
            ("BODY", body.trim_end()),
            ("REPLACES", &replaces(op, dt)),
            ("SELECTED", sel.trim_end()),
        ],
    )
}
