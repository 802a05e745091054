//! WGSL code generation: one generator for fused bodies, filled into the templates of `shaders/`.
//!
//! The `Emitter` inlines a tree of fusable primitives (elementwise and layout ops) into straight-line
//! WGSL that computes one variable at one multi-index, reading materialized variables from storage
//! buffers. The fused elementwise kernel wraps that body in `shaders/elementwise.wgsl`; the kernels
//! of other families live beside them (reductions in `ops/reduce/kernel.rs`, matmuls in
//! `ops/matmul/kernel.rs`, windows in `ops/window/kernel.rs`, …) and wrap it in theirs, with the
//! helpers here (`fill`, `prologue`, `bindings`).

use std::collections::{HashMap, HashSet};

use crate::dtype::{DType, Scalar};
use crate::ops::rules::Emitted;
use crate::ops::{layout, random};
use crate::trace::graph::{Graph, Var};

/// Workgroup size of the generated elementwise and reduction kernels (the browser allows 256 at most).
pub(crate) const WG: u32 = 256;

/// A generated kernel: its source, its input variables in binding order (the output binding follows
/// them) and its dispatch size.
#[derive(Clone, Debug)]
pub(crate) struct KernelSrc {
    pub label: String,
    pub wgsl: String,
    pub inputs: Vec<Var>,
    pub workgroups: [u32; 3],
}

/// Inlines fusable primitives into WGSL statements.
pub(crate) struct Emitter<'a> {
    pub(crate) g: &'a Graph,
    producers: &'a [Option<usize>],
    materialized: &'a [bool],
    /// Materialized variables read by the kernel, in binding order.
    pub inputs: Vec<Var>,
    pub helpers: Vec<&'static str>,
    body: String,
    n_tmp: usize,
    pub(crate) indent: usize,
    /// The kernel's own output index (per-axis names, shape, linear name): a read at exactly that
    /// position of an array of that shape uses the linear index directly, no re-linearizing.
    root: Option<(Vec<String>, Vec<usize>, String)>,
    /// Set when the kernel computes several adjacent output elements ("lanes") per invocation.
    lanes: Option<Lanes>,
    /// Per input binding, after lane mode: whether it is declared `array<vec4<T>>`.
    vec_inputs: Vec<bool>,
    /// For a kernel over one segment of its output (see [`Segment`]): reads of the inputs bound at
    /// that segment only are shifted by its start.
    seg: Option<SegReads>,
    /// A materialized input that lives in the output's own buffer (a donated argument updated in
    /// place, see [`elementwise_kernel_in_place`]): read from `out0`, never bound on its own.
    in_place: Option<Var>,
    /// Set when `in_place` was read anywhere but at the invocation's own output positions: the
    /// kernel would then read elements another invocation may already have overwritten.
    in_place_off_root: bool,
}

/// One segment of an elementwise kernel's output: elements `base..base + len`, with the inputs
/// `vars` (same shape as the output, too large to bind whole) bound at the same elements. The
/// kernel computes global indices, so operands bound whole (broadcasts, small arrays) are read
/// as usual; `base` is a multiple of [`LANES`].
///
/// With `windows` (a remap of large inputs: a transpose, a strided slice, a gather), each such
/// input is bound at one window of its elements and read anywhere: an element is stored only
/// when every windowed read it makes lies in its window, or, with `first`, when it makes none
/// (a pad value). The caller dispatches once per combination of windows, so every element is
/// stored by exactly the dispatches that hold its source. Such a kernel computes one element
/// per invocation.
#[derive(Clone, Debug)]
pub(crate) struct Segment {
    pub base: usize,
    pub len: usize,
    pub vars: Vec<Var>,
    pub windows: Vec<Window>,
    pub first: bool,
}

/// A large input bound at its elements `base..base + len` only (see [`Segment::windows`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    pub var: Var,
    pub base: usize,
    pub len: usize,
}

/// Names of the flags of a kernel over [`Segment::windows`]: whether every windowed read so far
/// was in its window, and whether there was one.
const SEG_HIT: &str = "seg_hit";
const SEG_TOUCHED: &str = "seg_touched";

/// What an [`Emitter`] over a [`Segment`] shifts, and which segment-bound inputs it read away
/// from the output's own index (a segment binding cannot serve those).
struct SegReads {
    vars: Vec<Var>,
    base: usize,
    off_root: Vec<Var>,
    windows: Vec<Window>,
}

/// Lane state of an [`Emitter`] whose kernel computes `LANES` adjacent output elements per
/// invocation: the body is emitted once per lane, and loads that all lanes make from 4 adjacent
/// elements of one buffer become one `vec4` load (memory instructions per element, not math, are
/// what software adapters pay for), while loads that do not depend on the lane are made once.
struct Lanes {
    /// The lane being emitted.
    lane: usize,
    /// Names whose values differ between lanes (the lanes' index names, and every name computed
    /// from one). A `var` is always treated as lane-dependent: branches may assign it.
    tainted: HashSet<String>,
    /// Loads already emitted at the top level: (binding, index expression) -> name of the value.
    memo: HashMap<(usize, String), String>,
    /// Lane-independent expressions already bound at the top level -> their names.
    cse: HashMap<String, String>,
    /// Names of the last axis's index in each lane when lanes run along the last axis (its size a
    /// multiple of 4), so a read whose last index is the lane's is a `vec4` load; `None` when each
    /// lane unravels its own linear index.
    last_axis: Option<[String; LANES]>,
    /// The vector index of the lanes' group of output elements (`gv`), used by reads at exactly the
    /// output index when every lane unravels its own index.
    root_vec: String,
    /// Per input binding: whether it is declared `array<vec4<T>>`.
    vec_inputs: Vec<bool>,
    /// Indentation of the body's top level (memoized loads are made there only).
    top: usize,
}

/// Output elements per invocation of the vectorized elementwise kernel.
pub(crate) const LANES: usize = 4;
const LANE_FIELDS: [&str; LANES] = ["x", "y", "z", "w"];

/// The identifiers an expression mentions.
fn tokens(e: &str) -> impl Iterator<Item = &str> {
    e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|t| !t.is_empty())
}

fn is_simple(e: &str) -> bool {
    e.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl<'a> Emitter<'a> {
    pub fn new(
        g: &'a Graph,
        producers: &'a [Option<usize>],
        materialized: &'a [bool],
        indent: usize,
    ) -> Emitter<'a> {
        Emitter {
            g,
            producers,
            materialized,
            inputs: Vec::new(),
            helpers: Vec::new(),
            body: String::new(),
            n_tmp: 0,
            indent,
            root: None,
            lanes: None,
            vec_inputs: Vec::new(),
            seg: None,
            in_place: None,
            in_place_off_root: false,
        }
    }
    /// The index `lin` of a read of `v` (in units of `per` elements), relative to `v`'s segment
    /// binding when it has one; `at_root` says whether the read is at the output's own index.
    fn seg_lin(&mut self, v: Var, lin: String, at_root: bool, per: usize) -> String {
        let window = self
            .seg
            .as_ref()
            .and_then(|s| s.windows.iter().find(|w| w.var == v).copied());
        if let Some(w) = window {
            // Relative to the window (wrapping below it), clamped so the load stays in bounds.
            let j = self.bind("j", format!("({lin}) - {}u", w.base));
            self.line(&format!("{SEG_TOUCHED} = true;"));
            self.line(&format!("{SEG_HIT} = {SEG_HIT} && {j} < {}u;", w.len));
            return format!("min({j}, {}u)", w.len.max(1) - 1);
        }
        match &mut self.seg {
            Some(s) if s.vars.contains(&v) => {
                if !at_root && !s.off_root.contains(&v) {
                    s.off_root.push(v);
                }
                format!("({lin} - {}u)", s.base / per)
            }
            _ => lin,
        }
    }
    /// Declare the kernel's output index (see `root`).
    pub fn with_root(mut self, idx: &[String], shape: &[usize], lin: &str) -> Self {
        self.root = Some((idx.to_vec(), shape.to_vec(), lin.to_string()));
        self
    }
    pub(crate) fn tmp(&mut self, p: &str) -> String {
        self.n_tmp += 1;
        format!("{p}{}", self.n_tmp)
    }
    pub(crate) fn line(&mut self, s: &str) {
        if let Some(l) = &mut self.lanes {
            // `let NAME = EXPR;` / `var NAME...` / `NAME = EXPR;`: track which names depend on the lane.
            let (name, rhs, is_var) = if let Some(r) = s.strip_prefix("let ") {
                let (n, e) = r.split_once('=').unwrap_or((r, ""));
                (n.split(':').next().unwrap_or(n).trim(), e, false)
            } else if let Some(r) = s.strip_prefix("var ") {
                (
                    r.split([':', '=', ';']).next().unwrap_or(r).trim(),
                    "",
                    true,
                )
            } else if let Some((n, e)) = s.split_once(" = ") {
                (n.trim(), e, false)
            } else {
                ("", "", false)
            };
            if !name.is_empty() && (is_var || tokens(rhs).any(|t| l.tainted.contains(t))) {
                l.tainted.insert(name.to_string());
            }
        }
        for _ in 0..self.indent {
            self.body.push_str("    ");
        }
        self.body.push_str(s);
        self.body.push('\n');
    }
    /// The statements emitted so far, leaving the body empty (kernels that place operand reads
    /// at several points of their template take each part in turn).
    pub(crate) fn take_body(&mut self) -> String {
        std::mem::take(&mut self.body)
    }
    /// `let NAME = expr;` with a new name. In lane mode an expression that does not depend on the
    /// lane and was already bound at the top level reuses that name: the lanes share it.
    pub(crate) fn bind(&mut self, prefix: &str, expr: String) -> String {
        let shared =
            self.lanes.as_ref().is_some_and(|l| self.indent == l.top) && !self.lane_dep(&expr);
        if shared {
            if let Some(n) = self.lanes.as_ref().and_then(|l| l.cse.get(&expr)) {
                return n.clone();
            }
        }
        let t = self.tmp(prefix);
        self.line(&format!("let {t} = {expr};"));
        if shared {
            self.lanes
                .as_mut()
                .expect("lane mode")
                .cse
                .insert(expr, t.clone());
        }
        t
    }
    /// Bind non-trivial index expressions to names so expressions stay small.
    pub(crate) fn bind_idx(&mut self, idx: Vec<String>) -> Vec<String> {
        idx.into_iter()
            .map(|e| if is_simple(&e) { e } else { self.bind("j", e) })
            .collect()
    }
    /// The binding number of a materialized input.
    fn binding(&mut self, v: Var) -> usize {
        if let Some(i) = self.inputs.iter().position(|&x| x == v) {
            i
        } else {
            self.inputs.push(v);
            self.inputs.len() - 1
        }
    }
    /// The two words of the key at leading index `lead` of keys `key` (`u32[..., 2]`).
    pub(crate) fn key_words(&mut self, key: Var, lead: &[String]) -> (String, String) {
        let mut ii = lead.to_vec();
        ii.push("0u".into());
        let k0 = self.value(key, &ii);
        ii[lead.len()] = "1u".into();
        let k1 = self.value(key, &ii);
        (k0, k1)
    }
    /// `bthreefry` of the counter `(0, lo)` bound to a name (a `vec2<u32>`).
    pub(crate) fn hash(&mut self, k0: &str, k1: &str, lo: &str) -> String {
        self.helpers.push(random::THREEFRY_WGSL);
        self.bind("h", format!("bthreefry({k0}, {k1}, 0u, {lo})"))
    }
    /// Switch to lane mode (see [`Lanes`]): `tainted` names the per-lane index names, `last_axis`
    /// the last axis's index name per lane when lanes run along the last axis.
    pub(crate) fn with_lanes(
        mut self,
        tainted: impl IntoIterator<Item = String>,
        last_axis: Option<[String; LANES]>,
        root_vec: &str,
    ) -> Self {
        self.lanes = Some(Lanes {
            lane: 0,
            tainted: tainted.into_iter().collect(),
            memo: HashMap::new(),
            cse: HashMap::new(),
            last_axis,
            root_vec: root_vec.to_string(),
            vec_inputs: Vec::new(),
            top: self.indent,
        });
        self
    }
    /// In lane mode: emit the next values for lane `lane`.
    pub(crate) fn set_lane(&mut self, lane: usize) {
        self.lanes.as_mut().expect("lane mode").lane = lane;
    }
    /// Leave lane mode, keeping which input bindings it declared `vec4` (see
    /// [`Emitter::vec_inputs`]).
    pub(crate) fn end_lanes(&mut self) {
        let l = self.lanes.take().expect("lane mode");
        self.vec_inputs = l.vec_inputs;
    }
    /// Per input binding, after lane mode: whether it is declared `array<vec4<T>>`.
    pub(crate) fn vec_inputs(&self) -> &[bool] {
        &self.vec_inputs
    }
    /// The statements emitted so far.
    pub(crate) fn body(&self) -> &str {
        &self.body
    }
    /// The binding of `v` in lane mode, declaring it `vec4` when its length allows.
    fn lane_binding(&mut self, v: Var) -> (usize, bool) {
        let b = self.binding(v);
        let aval = self.g.aval(v);
        let vec = aval.dtype.size_bytes() == 4 && aval.size() > 0 && aval.size().is_multiple_of(4);
        let l = self.lanes.as_mut().expect("lane mode");
        if l.vec_inputs.len() <= b {
            l.vec_inputs.resize(b + 1, false);
            l.vec_inputs[b] = vec;
        }
        (b, l.vec_inputs[b])
    }
    /// A load of materialized `v` at `idx` in the current lane: a component of a `vec4` load shared
    /// by the lanes when they read 4 adjacent aligned elements, one load shared by all lanes when the
    /// index does not depend on the lane, else a load of its own.
    fn lane_load(&mut self, v: Var, idx: &[String]) -> String {
        if self.in_place == Some(v) {
            return self.in_place_lane_load(v, idx);
        }
        let aval = self.g.aval(v).clone();
        let (b, vec) = self.lane_binding(v);
        let l = self.lanes.as_ref().expect("lane mode");
        let (lane, top) = (l.lane, self.indent == l.top);
        let rank = aval.rank();
        let is_root =
            matches!(&self.root, Some((ri, rs, _)) if ri.as_slice() == idx && rs == &aval.shape);
        // The vector index of a vec4 load shared by the lanes, when there is one.
        let shared_vec = match (&l.last_axis, vec) {
            (_, false) => None,
            (_, true) if is_root => Some(l.root_vec.clone()),
            (Some(last), true) => {
                let aligned = rank > 0
                    && aval.shape[rank - 1].is_multiple_of(4)
                    && idx[rank - 1] == last[lane]
                    && !idx[..rank - 1]
                        .iter()
                        .zip(&aval.shape)
                        .any(|(e, &n)| n != 1 && self.lane_dep(e));
                aligned.then(|| {
                    let mut ii = idx.to_vec();
                    ii[rank - 1] = last[0].clone();
                    format!("({}) / 4u", layout::linear_wgsl(&aval.shape, &ii))
                })
            }
            (None, true) => None,
        };
        let wrap = |e: String| {
            if aval.dtype == DType::Bool {
                format!("({e} != 0u)")
            } else {
                e
            }
        };
        if let Some(vi) = shared_vec {
            let vi = self.seg_lin(v, vi, is_root, LANES);
            let name = self.vec_load((b, format!("v:{vi}")), format!("in{b}[{vi}]"), top);
            let t = self.tmp("v");
            let field = format!("{name}.{}", LANE_FIELDS[lane]);
            self.line(&format!("let {t} = {};", wrap(field)));
            return t;
        }
        let lin = match &self.root {
            Some((ri, rs, rl)) if ri.as_slice() == idx && rs == &aval.shape => rl.clone(),
            _ => layout::linear_wgsl(&aval.shape, idx),
        };
        let lin = self.seg_lin(v, lin, is_root, 1);
        let invariant = !self.lane_dep(&lin);
        let key = (b, format!("s:{lin}"));
        if invariant {
            if let Some(n) = self.lanes.as_ref().and_then(|l| l.memo.get(&key).cloned()) {
                return n;
            }
        }
        let load = if vec {
            let j = self.bind("j", lin);
            format!("in{b}[{j} / 4u][{j} % 4u]")
        } else {
            format!("in{b}[{lin}]")
        };
        let t = self.tmp("v");
        self.line(&format!("let {t} = {};", wrap(load)));
        if invariant && top {
            let l = self.lanes.as_mut().expect("lane mode");
            l.memo.insert(key, t.clone());
        }
        t
    }
    /// The name of a `vec4` load shared by the lanes (`load`, memoized under `key` when made at
    /// the body's top level, `top`).
    fn vec_load(&mut self, key: (usize, String), load: String, top: bool) -> String {
        if let Some(n) = self.lanes.as_ref().and_then(|l| l.memo.get(&key).cloned()) {
            return n;
        }
        let t = self.tmp("w");
        self.line(&format!("let {t} = {load};"));
        if top {
            let l = self.lanes.as_mut().expect("lane mode");
            l.tainted.remove(&t);
            l.memo.insert(key, t.clone());
        }
        t
    }
    /// A lane's load of the in-place input `v`: its own element of `out0`, one `vec4` load shared by
    /// the lanes when the output is stored as `vec4` (the in-place input has the output's length
    /// and element type, so it is laid out as the output is).
    fn in_place_lane_load(&mut self, v: Var, idx: &[String]) -> String {
        let aval = self.g.aval(v).clone();
        let l = self.lanes.as_ref().expect("lane mode");
        let (lane, top, root_vec) = (l.lane, self.indent == l.top, l.root_vec.clone());
        let root_lin = match &self.root {
            Some((ri, rs, rl)) if ri.as_slice() == idx && rs == &aval.shape => Some(rl.clone()),
            _ => None,
        };
        let Some(lin) = root_lin else {
            self.in_place_off_root = true;
            return "0".into();
        };
        let wrap = |e: String| {
            if aval.dtype == DType::Bool {
                format!("({e} != 0u)")
            } else {
                e
            }
        };
        let load = if aval.size().is_multiple_of(LANES) {
            let key = (usize::MAX, format!("v:{root_vec}"));
            let name = self.vec_load(key, format!("out0[{root_vec}]"), top);
            format!("{name}.{}", LANE_FIELDS[lane])
        } else {
            format!("out0[{lin}]")
        };
        let t = self.tmp("v");
        self.line(&format!("let {t} = {};", wrap(load)));
        t
    }
    /// Whether expression `e` depends on the lane (lane mode only).
    fn lane_dep(&self, e: &str) -> bool {
        self.lanes
            .as_ref()
            .is_some_and(|l| tokens(e).any(|t| l.tainted.contains(t)))
    }
    /// Emit statements computing `v` at multi-index `idx`; returns a WGSL expression for the value.
    pub fn value(&mut self, v: Var, idx: &[String]) -> String {
        let aval = self.g.aval(v).clone();
        if self.materialized[v.idx()] {
            if self.lanes.is_some() {
                return self.lane_load(v, idx);
            }
            let (lin, at_root) = match &self.root {
                Some((ri, rs, rl)) if ri.as_slice() == idx && rs == &aval.shape => {
                    (rl.clone(), true)
                }
                _ => (layout::linear_wgsl(&aval.shape, idx), false),
            };
            let buffer = if self.in_place == Some(v) {
                self.in_place_off_root |= !at_root;
                "out0".to_string()
            } else {
                format!("in{}", self.binding(v))
            };
            let lin = self.seg_lin(v, lin, at_root, 1);
            let t = self.tmp("v");
            let load = if aval.dtype == DType::Bool {
                format!("({buffer}[{lin}] != 0u)")
            } else {
                format!("{buffer}[{lin}]")
            };
            self.line(&format!("let {t} = {load};"));
            return t;
        }
        let e = &self.g.eqns
            [self.producers[v.idx()].expect("non-materialized variables have producers")];
        let (prim, ins) = (e.prim.clone(), e.inputs.clone());
        match prim.rules().emit_wgsl(self, &ins, idx) {
            Some(Emitted::Value(v)) => v,
            Some(Emitted::Expr(expr)) => self.bind("t", expr),
            None => unreachable!(
                "{} is not fused: the planner stores its result (or never lowers it)",
                prim.name()
            ),
        }
    }
}

/// A constant in a generated kernel body. Float zeros and non-finite floats are built at run time
/// from their bits and `bzero`, a `u32` zero that every template's `main` defines from a builtin
/// the compiler cannot see through: Mesa (lavapipe and llvmpipe GL) folds `x * 0.0` and `0.0 / x`
/// to 0 and drops the store of `x / 0.0` altogether, wrong for inf, NaN and zero operands, and
/// the same happens through `bitcast` of a literal bit pattern.
pub(crate) fn const_wgsl(v: Scalar) -> String {
    match v {
        Scalar::F32(f) if f == 0.0 || !f.is_finite() => {
            format!("bitcast<f32>(bzero ^ {:#010x}u)", f.to_bits())
        }
        v => v.wgsl_literal(),
    }
}

/// Binding declarations: inputs then the output.
pub(crate) fn bindings(g: &Graph, inputs: &[Var], out_elem: &str) -> String {
    bindings_vec(g, inputs, &[], out_elem)
}

/// Binding declarations, the inputs flagged in `vec` as `array<vec4<T>>`.
pub(crate) fn bindings_vec(g: &Graph, inputs: &[Var], vec: &[bool], out_elem: &str) -> String {
    let mut s = String::new();
    for (i, v) in inputs.iter().enumerate() {
        let t = g.aval(*v).dtype.wgsl_storage();
        let t = if vec.get(i) == Some(&true) {
            format!("vec4<{t}>")
        } else {
            t.to_string()
        };
        s.push_str(&format!(
            "@group(0) @binding({i}) var<storage, read> in{i}: array<{t}>;\n"
        ));
    }
    s.push_str(&format!(
        "@group(0) @binding({}) var<storage, read_write> out0: array<{out_elem}>;\n",
        inputs.len()
    ));
    s
}

/// `bitcast<f32>` of a constant is evaluated when the shader is created, and Chrome's WGSL compiler
/// (Tint) rejects one that gives inf or NaN; a call to a function of ours is never constant. Every
/// generated shader has it ([`crate::Scalar::wgsl_literal`] writes non-finite floats with it).
pub(crate) const F32_BITS: &str = include_str!("../../shaders/lib/f32_bits.wgsl").trim_ascii_end();

/// Panics unless the shader library functions `parts` (dependencies first, `bf32_bits` implied)
/// parse and validate with naga inside a minimal compute module: the unit test of each file of
/// `shaders/lib/`.
#[cfg(test)]
pub(crate) fn assert_library_valid(name: &str, parts: &[&str]) {
    let src = format!(
        "{F32_BITS}\n{}\n@compute @workgroup_size(1)\nfn main() {{}}\n",
        parts.join("\n")
    );
    if let Err(e) = crate::device::validate_wgsl(name, &src) {
        panic!("shaders/lib/{name}.wgsl: {e}");
    }
}

pub(crate) fn helpers_src(h: &[&'static str]) -> String {
    let mut seen: Vec<&str> = vec![F32_BITS];
    for x in h {
        if !seen.contains(x) {
            seen.push(x);
        }
    }
    seen.join("\n")
}

/// Per-axis index names `i0, i1, ...` of linear index `lin` in `shape`, as `let` lines.
pub(crate) fn index_lets(
    shape: &[usize],
    lin: &str,
    prefix: &str,
    indent: usize,
) -> (String, Vec<String>) {
    let exprs = layout::unravel_wgsl(shape, lin);
    let mut s = String::new();
    let mut names = Vec::new();
    for (d, e) in exprs.into_iter().enumerate() {
        if is_simple(&e) {
            names.push(e);
        } else {
            let n = format!("{prefix}{d}");
            s.push_str(&format!("{}let {n} = {e};\n", "    ".repeat(indent)));
            names.push(n);
        }
    }
    (s, names)
}

/// Fewest workgroups an elementwise kernel is narrowed to by computing several groups per
/// invocation.
const MIN_WORKGROUPS: usize = 256;

/// `text` one level (4 spaces) deeper.
fn indent(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("    {l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn store_expr(dt: DType, val: &str) -> String {
    if dt == DType::Bool {
        format!("select(0u, 1u, {val})")
    } else {
        val.to_string()
    }
}

/// `shaders/prologue.wgsl`: the start of the kernels with one invocation `gi` per output element
/// (reductions, argreductions, window kernels). No comment of its own: it lands in the middle of
/// each kernel.
const PROLOGUE: &str = include_str!("../../shaders/prologue.wgsl").trim_ascii_end();

/// The filled [`PROLOGUE`]: declarations `bindings`, library functions `helpers`, the invocation
/// `gi` (returning past `n`) and the `let` lines `index` of its output index.
pub(crate) fn prologue(bindings: &str, helpers: &[&'static str], n: usize, index: &str) -> String {
    fill(
        PROLOGUE,
        &[
            ("BINDINGS", bindings),
            ("HELPERS", &helpers_src(helpers)),
            ("N", &n.to_string()),
            ("INDEX", index.trim_end()),
        ],
    )
}

/// Fills every `{{NAME}}` of a kernel template (the one filler of every template in `shaders/`).
/// A name the template lacks, or a placeholder left over, is a bug in the generator: it panics
/// there (every template is exercised by the tests and `tests/wgsl_golden.rs`) rather than send
/// a broken kernel to the driver.
pub(crate) fn fill(template: &str, pairs: &[(&str, &str)]) -> String {
    let mut s = template.to_string();
    for (k, v) in pairs {
        let key = format!("{{{{{k}}}}}");
        assert!(s.contains(&key), "kernel template has no placeholder {key}");
        s = s.replace(&key, v);
    }
    if let Some(pos) = s.find("{{") {
        let end = s[pos..].find("}}").map_or(s.len(), |e| pos + e + 2);
        panic!("kernel template: unfilled placeholder {}", &s[pos..end]);
    }
    s
}

const ELEMENTWISE: &str = include_str!("../../shaders/elementwise.wgsl");

/// Split `n` workgroups over x and y so neither exceeds `max_per_dim`, with fewer than `y` idle
/// workgroups (not up to a whole row of them, as filling x first would leave).
pub(crate) fn balanced_grid(n_workgroups: usize, max_per_dim: u32) -> [u32; 3] {
    if n_workgroups == 0 {
        return [0, 1, 1];
    }
    let max = max_per_dim.max(1) as usize;
    let y = n_workgroups.div_ceil(max);
    let x = n_workgroups.div_ceil(y);
    [x as u32, y as u32, 1]
}

/// Whether a body calls the integer emulations of IEEE arithmetic (`bfma`, and through erf_inv
/// `bdiv`/`bsqrt`): such a body is compute-bound, so shared `vec4` loads save nothing, while each
/// extra inlined copy (4 lanes, several groups per invocation) multiplies the shader compiler's
/// work: lavapipe took 15.8 s to build `normal`'s kernel with 4 lanes and 1.3 s with one.
fn calls_soft_float(helpers: &[&'static str]) -> bool {
    helpers.contains(&crate::ops::elementwise::FMA_F32)
}

/// A kernel materializing fusable variable `root`. Each invocation computes [`LANES`] adjacent
/// output elements (one when there are fewer, or when the body is soft-float arithmetic), reading
/// operands at the output's own index, or along its last axis when that axis is a multiple of 4
/// long, as one `vec4` per buffer and storing one `vec4`; a final group past the end of the output
/// stores only its elements that exist.
pub(crate) fn elementwise_kernel(
    g: &Graph,
    producers: &[Option<usize>],
    materialized: &[bool],
    root: Var,
    max_wg: u32,
) -> KernelSrc {
    elementwise_kernel_with(g, producers, materialized, root, max_wg, None, None)
        .expect("a kernel without an in-place input is always made")
        .0
}

/// [`elementwise_kernel`] computing `root` in place of materialized `input` (a donated argument
/// of the same length and storage type): `input` is read from the output buffer `out0` instead of
/// a binding of its own, so one buffer is both. None when that is unsafe: when the body reads
/// `input` anywhere but at the element being written (a transpose or broadcast of it), another
/// invocation could overwrite an element before it is read.
pub(crate) fn elementwise_kernel_in_place(
    g: &Graph,
    producers: &[Option<usize>],
    materialized: &[bool],
    root: Var,
    input: Var,
    max_wg: u32,
) -> Option<KernelSrc> {
    let (a, b) = (g.aval(input), g.aval(root));
    if a.size() != b.size() || a.dtype.wgsl_storage() != b.dtype.wgsl_storage() {
        return None;
    }
    elementwise_kernel_with(g, producers, materialized, root, max_wg, None, Some(input))
        .map(|k| k.0)
}

/// [`elementwise_kernel`] over one segment of the output (all of it with `None`): the kernel
/// writes elements `seg.base..seg.base + seg.len` into an output bound at those elements only,
/// reading the inputs `seg.vars` bound likewise. The WGSL differs from the whole kernel's only
/// in where `gv` starts and in the shifted reads and stores. Also returns the segment-bound
/// inputs read away from the output's own index (a transpose, a slice): the caller must not
/// run such a kernel.
pub(crate) fn elementwise_segment(
    g: &Graph,
    producers: &[Option<usize>],
    materialized: &[bool],
    root: Var,
    max_wg: u32,
    seg: Option<&Segment>,
) -> (KernelSrc, Vec<Var>) {
    elementwise_kernel_with(g, producers, materialized, root, max_wg, seg, None)
        .expect("a kernel without an in-place input is always made")
}

/// The elementwise kernel over `seg` (or the whole output) with `in_place` read from `out0`; None
/// when the in-place input is read away from the element being written.
fn elementwise_kernel_with(
    g: &Graph,
    producers: &[Option<usize>],
    materialized: &[bool],
    root: Var,
    max_wg: u32,
    seg: Option<&Segment>,
    in_place: Option<Var>,
) -> Option<(KernelSrc, Vec<Var>)> {
    let aval = g.aval(root).clone();
    let n = aval.size();
    let seg_reads = || {
        seg.map(|s| SegReads {
            vars: s.vars.clone(),
            base: s.base,
            off_root: Vec::new(),
            windows: s.windows.clone(),
        })
    };
    let windowed = seg.is_some_and(|s| !s.windows.is_empty());
    // Shifts of the stores (elements, and groups of LANES) and of the first group.
    let (base, len) = seg.map_or((0, n), |s| (s.base, s.len));
    // Emit with `root` itself treated as computed (it is the output, not an input).
    let mut mat = materialized.to_vec();
    mat[root.idx()] = false;
    let st = aval.dtype.wgsl_storage();
    let name = g.eqns[producers[root.idx()].expect("kernels compute produced variables")]
        .prim
        .name();
    // The one-element body first: cheap to build, and it tells which library functions the
    // body calls.
    let (ix1, idx1) = index_lets(&aval.shape, "gb", "i", 1);
    let mut em1 = Emitter::new(g, producers, &mat, 1).with_root(&idx1, &aval.shape, "gb");
    em1.seg = seg_reads();
    em1.in_place = in_place;
    let val1 = em1.value(root, &idx1);
    let heavy = calls_soft_float(&em1.helpers);
    let lanes = if n >= LANES && !heavy && !windowed {
        LANES
    } else {
        1
    };
    // Groups this kernel computes, and the shift of the stores in elements.
    let nv = len.div_ceil(lanes);
    let sb = if base > 0 {
        format!(" - {base}u")
    } else {
        String::new()
    };
    let (index, body, store, inputs, vec_inputs, helpers, off_root);
    if lanes == 1 {
        index = ix1;
        let put = format!("out0[gb{sb}] = {};", store_expr(aval.dtype, &val1));
        if em1.in_place_off_root {
            return None;
        }
        off_root = em1.seg.map(|s| s.off_root).unwrap_or_default();
        (inputs, vec_inputs, helpers) = (em1.inputs, Vec::new(), em1.helpers);
        // Over windows: store only where the reads were in them (see `Segment::windows`).
        (body, store) = match seg {
            Some(s) if windowed => {
                let cond = if s.first {
                    SEG_HIT.to_string()
                } else {
                    format!("{SEG_TOUCHED} && {SEG_HIT}")
                };
                (
                    format!(
                        "    var {SEG_HIT} = true;\n    var {SEG_TOUCHED} = false;\n{}",
                        em1.body
                    ),
                    format!("    if ({cond}) {{\n        {put}\n    }}"),
                )
            }
            _ => (em1.body, format!("    {put}")),
        };
    } else {
        let rank = aval.rank();
        let along_last =
            n.is_multiple_of(LANES) && rank > 0 && aval.shape[rank - 1].is_multiple_of(LANES);
        let mut ix = String::new();
        let mut tainted = Vec::new();
        // Per lane: the output index, and its linear index.
        let mut lane_idx: Vec<(Vec<String>, String)> = Vec::new();
        let mut last = None;
        if along_last {
            let (s0, idx) = index_lets(&aval.shape, "gb", "i", 1);
            ix.push_str(&s0);
            let names: [String; LANES] = std::array::from_fn(|c| format!("lane{c}"));
            for (c, nm) in names.iter().enumerate() {
                ix.push_str(&format!("    let {nm} = {} + {c}u;\n", idx[rank - 1]));
                ix.push_str(&format!("    let r{c} = gb + {c}u;\n"));
                let mut ii = idx.clone();
                ii[rank - 1] = nm.clone();
                lane_idx.push((ii, format!("r{c}")));
                tainted.extend([nm.clone(), format!("r{c}")]);
            }
            last = Some(names);
        } else {
            for c in 0..LANES {
                // Lanes past the end (a final partial group) compute the last element again.
                let l = if n.is_multiple_of(LANES) {
                    format!("gb + {c}u")
                } else {
                    format!("min(gb + {c}u, {}u)", n - 1)
                };
                ix.push_str(&format!("    let r{c} = {l};\n"));
                let (s0, idx) = index_lets(&aval.shape, &format!("r{c}"), &format!("i{c}_"), 1);
                ix.push_str(&s0);
                tainted.push(format!("r{c}"));
                tainted.extend(idx.iter().filter(|e| is_simple(e)).cloned());
                lane_idx.push((idx, format!("r{c}")));
            }
        }
        let mut em = Emitter::new(g, producers, &mat, 1).with_lanes(tainted, last, "gv");
        em.seg = seg_reads();
        em.in_place = in_place;
        let mut vals = Vec::new();
        for (c, (idx, lin)) in lane_idx.iter().enumerate() {
            em.lanes.as_mut().expect("lane mode").lane = c;
            em.root = Some((idx.clone(), aval.shape.clone(), lin.clone()));
            let v = em.value(root, idx);
            vals.push(store_expr(aval.dtype, &v));
        }
        index = ix;
        store = if n.is_multiple_of(LANES) {
            let sv = if base > 0 {
                format!(" - {}u", base / LANES)
            } else {
                String::new()
            };
            format!("    out0[gv{sv}] = vec4<{st}>({});", vals.join(", "))
        } else {
            let mut s = format!("    out0[gb{sb}] = {};", vals[0]);
            for (c, v) in vals.iter().enumerate().skip(1) {
                s.push_str(&format!(
                    "\n    if (gb + {c}u < {n}u) {{\n        out0[gb + {c}u{sb}] = {v};\n    }}"
                ));
            }
            s
        };
        if em.in_place_off_root {
            return None;
        }
        off_root = em.seg.take().map(|s| s.off_root).unwrap_or_default();
        let l = em.lanes.take().expect("lane mode");
        (body, inputs, vec_inputs, helpers) = (em.body, em.inputs, l.vec_inputs, em.helpers);
    }
    // Several groups per invocation where the grid stays wide: on lavapipe a copy kernel moving
    // 4 vec4 per invocation reaches 1.45x the bandwidth of one moving 1 (benches/bench.rs
    // `copy_vec4_*`), and the fused bodies gain the same way; on a GPU 256+ workgroups still fill it.
    let reps = [4usize, 2]
        .into_iter()
        .find(|&r| !heavy && nv >= r * WG as usize * MIN_WORKGROUPS)
        .unwrap_or(1);
    // The segment's first group: `gv` stays the global group index.
    let gv = if base > 0 {
        format!("g0 + rep * stride + {}u", base / lanes)
    } else {
        "g0 + rep * stride".to_string()
    };
    let out_elem = if lanes == LANES && n.is_multiple_of(LANES) {
        format!("vec4<{st}>")
    } else {
        st.to_string()
    };
    let wgsl = fill(
        ELEMENTWISE,
        &[
            (
                "BINDINGS",
                &bindings_vec(g, &inputs, &vec_inputs, &out_elem),
            ),
            ("HELPERS", &helpers_src(&helpers)),
            ("GV", &gv),
            ("NV", &(base / lanes + nv).to_string()),
            ("LANES", &lanes.to_string()),
            ("REPS", &reps.to_string()),
            ("INDEX", &indent(index.trim_end())),
            ("BODY", &indent(body.trim_end())),
            ("STORE", &indent(&store)),
        ],
    );
    let place = if in_place.is_some() { "_inplace" } else { "" };
    let label = match seg {
        Some(s) => format!("fused_{name}{place}_{}_seg{}+{}", aval, s.base, s.len),
        None => format!("fused_{name}{place}_{}", aval),
    };
    Some((
        KernelSrc {
            label,
            wgsl,
            inputs,
            workgroups: balanced_grid(nv.div_ceil(WG as usize * reps), max_wg),
        },
        off_root,
    ))
}

#[cfg(test)]
mod tests {
    /// `bf32_bits` (in every shader) and the counter-based generator of `random` are valid WGSL.
    #[test]
    fn shader_libraries_are_naga_valid() {
        super::assert_library_valid("f32_bits", &[]);
        super::assert_library_valid("threefry", &[crate::ops::random::THREEFRY_WGSL]);
    }
}
