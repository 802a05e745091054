//! WGSL code generation: one generator for fused bodies, filled into the templates of `shaders/`.
//!
//! The `Emitter` inlines a tree of fusable primitives (elementwise and layout ops) into straight-line
//! WGSL that computes one variable at one multi-index, reading materialized variables from storage
//! buffers. Kernels (elementwise, reduction, argreduce) wrap that body in a template.

pub(crate) mod matmul;

use crate::dtype::{DType, Scalar};
use crate::ops::{ArgOp, Prim, ReduceOp, elementwise, indexing, layout, random};
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

/// Split `n` workgroups over x and y so neither exceeds `max_per_dim`.
pub(crate) fn grid(n_workgroups: usize, max_per_dim: u32) -> [u32; 3] {
    if n_workgroups == 0 {
        return [0, 1, 1];
    }
    let max = max_per_dim.max(1) as usize;
    let x = n_workgroups.min(max);
    let y = n_workgroups.div_ceil(x);
    [x as u32, y as u32, 1]
}

/// Inlines fusable primitives into WGSL statements.
pub(crate) struct Emitter<'a> {
    g: &'a Graph,
    producers: &'a [Option<usize>],
    materialized: &'a [bool],
    /// Materialized variables read by the kernel, in binding order.
    pub inputs: Vec<Var>,
    pub helpers: Vec<&'static str>,
    body: String,
    n_tmp: usize,
    indent: usize,
    /// The kernel's own output index (per-axis names, shape, linear name): a read at exactly that
    /// position of an array of that shape uses the linear index directly, no re-linearizing.
    root: Option<(Vec<String>, Vec<usize>, String)>,
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
        }
    }
    /// Declare the kernel's output index (see `root`).
    pub fn with_root(mut self, idx: &[String], shape: &[usize], lin: &str) -> Self {
        self.root = Some((idx.to_vec(), shape.to_vec(), lin.to_string()));
        self
    }
    fn tmp(&mut self, p: &str) -> String {
        self.n_tmp += 1;
        format!("{p}{}", self.n_tmp)
    }
    fn line(&mut self, s: &str) {
        for _ in 0..self.indent {
            self.body.push_str("    ");
        }
        self.body.push_str(s);
        self.body.push('\n');
    }
    /// Bind non-trivial index expressions to names so expressions stay small.
    fn bind_idx(&mut self, idx: Vec<String>) -> Vec<String> {
        idx.into_iter()
            .map(|e| {
                if is_simple(&e) {
                    e
                } else {
                    let t = self.tmp("j");
                    self.line(&format!("let {t} = {e};"));
                    t
                }
            })
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
    fn key_words(&mut self, key: Var, lead: &[String]) -> (String, String) {
        let mut ii = lead.to_vec();
        ii.push("0u".into());
        let k0 = self.value(key, &ii);
        ii[lead.len()] = "1u".into();
        let k1 = self.value(key, &ii);
        (k0, k1)
    }
    /// `bthreefry` of the counter `(0, lo)` bound to a name (a `vec2<u32>`).
    fn hash(&mut self, k0: &str, k1: &str, lo: &str) -> String {
        self.helpers.push(random::THREEFRY_WGSL);
        let h = self.tmp("h");
        self.line(&format!("let {h} = bthreefry({k0}, {k1}, 0u, {lo});"));
        h
    }
    /// Emit statements computing `v` at multi-index `idx`; returns a WGSL expression for the value.
    pub fn value(&mut self, v: Var, idx: &[String]) -> String {
        let aval = self.g.aval(v).clone();
        if self.materialized[v.idx()] {
            let b = self.binding(v);
            let lin = match &self.root {
                Some((ri, rs, rl)) if ri.as_slice() == idx && rs == &aval.shape => rl.clone(),
                _ => layout::linear_wgsl(&aval.shape, idx),
            };
            let t = self.tmp("v");
            let load = if aval.dtype == DType::Bool {
                format!("(in{b}[{lin}] != 0u)")
            } else {
                format!("in{b}[{lin}]")
            };
            self.line(&format!("let {t} = {load};"));
            return t;
        }
        let e = &self.g.eqns
            [self.producers[v.idx()].expect("non-materialized variables have producers")];
        let (prim, ins) = (e.prim.clone(), e.inputs.clone());
        let in_dt = |k: usize| self.g.aval(ins[k]).dtype;
        let expr = match &prim {
            Prim::Full { value, .. } => return const_wgsl(*value),
            Prim::Iota { dtype, axis, .. } => {
                return elementwise::cast_wgsl(DType::U32, *dtype, &idx[*axis]);
            }
            Prim::Unary(op) => {
                let a = self.value(ins[0], idx);
                op.wgsl(in_dt(0), &a, &mut self.helpers)
            }
            Prim::Binary(op) => {
                let a = self.value(ins[0], idx);
                let b = self.value(ins[1], idx);
                op.wgsl(in_dt(0), &a, &b, &mut self.helpers)
            }
            Prim::Select => {
                let p = self.value(ins[0], idx);
                let a = self.value(ins[1], idx);
                let b = self.value(ins[2], idx);
                elementwise::select_wgsl(&p, &a, &b)
            }
            Prim::Fma => {
                let a = self.value(ins[0], idx);
                let b = self.value(ins[1], idx);
                let c = self.value(ins[2], idx);
                self.helpers.push(elementwise::FMA_F32);
                format!("bfma({a}, {b}, {c})")
            }
            Prim::Cast(t) => {
                let a = self.value(ins[0], idx);
                elementwise::cast_wgsl(in_dt(0), *t, &a)
            }
            Prim::RandomBits { shape, split } => {
                // Leading axes pick the key, the next ones count within `shape`.
                let lead = self.g.aval(ins[0]).rank() - 1;
                let (k0, k1) = self.key_words(ins[0], &idx[..lead]);
                // The counter is the row-major index within `shape`; arrays on devices have fewer
                // than 2^32 elements, so its high word is 0.
                let counter = layout::linear_wgsl(shape, &idx[lead..lead + shape.len()]);
                let h = self.hash(&k0, &k1, &counter);
                if *split {
                    format!("select({h}.x, {h}.y, {} == 1u)", idx[lead + shape.len()])
                } else {
                    format!("({h}.x ^ {h}.y)")
                }
            }
            Prim::RandomFoldIn => {
                let lead = self.g.aval(ins[0]).rank() - 1;
                let (k0, k1) = self.key_words(ins[0], &idx[..lead]);
                let d = self.value(ins[1], &idx[..lead]);
                let h = self.hash(&k0, &k1, &d);
                format!("select({h}.x, {h}.y, {} == 1u)", idx[lead])
            }
            Prim::Transpose { perm } => {
                return self.value(ins[0], &layout::transpose_wgsl(perm, idx));
            }
            Prim::BroadcastInDim { dims, .. } => {
                let in_shape = self.g.aval(ins[0]).shape.clone();
                return self.value(ins[0], &layout::broadcast_wgsl(&in_shape, dims, idx));
            }
            Prim::Slice { start, stride, .. } => {
                let ii = self.bind_idx(layout::slice_wgsl(start, stride, idx));
                return self.value(ins[0], &ii);
            }
            Prim::Reshape { .. } => {
                let in_shape = self.g.aval(ins[0]).shape.clone();
                let l = self.tmp("l");
                self.line(&format!(
                    "let {l} = {};",
                    layout::linear_wgsl(&aval.shape, idx)
                ));
                let ii = self.bind_idx(layout::unravel_wgsl(&in_shape, &l));
                return self.value(ins[0], &ii);
            }
            Prim::Pad {
                lo,
                interior,
                value,
                ..
            } => {
                let in_shape = self.g.aval(ins[0]).shape.clone();
                let (cond, ii) = layout::pad_wgsl(&in_shape, lo, interior, idx);
                let t = self.tmp("p");
                self.line(&format!(
                    "var {t}: {} = {};",
                    aval.dtype.wgsl(),
                    const_wgsl(*value)
                ));
                self.line(&format!("if ({cond}) {{"));
                self.indent += 1;
                let ii = self.bind_idx(ii);
                let x = self.value(ins[0], &ii);
                self.line(&format!("{t} = {x};"));
                self.indent -= 1;
                self.line("}");
                return t;
            }
            Prim::Concatenate { axis } => {
                let t = self.tmp("c");
                self.line(&format!("var {t}: {};", aval.dtype.wgsl()));
                let mut parts = Vec::new();
                let mut start = 0usize;
                for &inp in &ins {
                    let len = self.g.aval(inp).shape[*axis];
                    if len > 0 {
                        parts.push((inp, start, start + len));
                    }
                    start += len;
                }
                let last = parts.len().saturating_sub(1);
                for (j, &(inp, start, end)) in parts.iter().enumerate() {
                    let head = match (j, parts.len()) {
                        (_, 1) => "{".to_string(),
                        (0, _) => format!("if ({} < {end}u) {{", idx[*axis]),
                        (j, _) if j == last => "} else {".to_string(),
                        _ => format!("}} else if ({} < {end}u) {{", idx[*axis]),
                    };
                    self.line(&head);
                    self.indent += 1;
                    let mut ii = idx.to_vec();
                    if start > 0 {
                        ii[*axis] = format!("({} - {start}u)", idx[*axis]);
                    }
                    let ii = self.bind_idx(ii);
                    let x = self.value(inp, &ii);
                    self.line(&format!("{t} = {x};"));
                    self.indent -= 1;
                }
                if parts.is_empty() {
                    return t;
                }
                self.line("}");
                return t;
            }
            Prim::Take { axis } => {
                let x_shape = self.g.aval(ins[0]).shape.clone();
                let r = self.g.aval(ins[1]).rank();
                let raw = self.value(ins[1], &idx[*axis..*axis + r]);
                let j = self.tmp("k");
                self.line(&format!(
                    "let {j} = {};",
                    indexing::norm_index_wgsl(&raw, in_dt(1), x_shape[*axis])
                ));
                let mut ii: Vec<String> = idx[..*axis].to_vec();
                ii.push(j);
                ii.extend_from_slice(&idx[*axis + r..]);
                return self.value(ins[0], &ii);
            }
            Prim::Reduce { .. }
            | Prim::ArgReduce { .. }
            | Prim::DotGeneral(_)
            | Prim::Collective(_)
            | Prim::Cond { .. }
            | Prim::Scan(_)
            | Prim::DebugPrint { .. } => {
                unreachable!(
                    "non-fusable primitives are materialized; collectives and conds never lowered"
                )
            }
        };
        let t = self.tmp("t");
        self.line(&format!("let {t} = {expr};"));
        t
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
fn bindings(g: &Graph, inputs: &[Var], out_elem: &str) -> String {
    let mut s = String::new();
    for (i, v) in inputs.iter().enumerate() {
        s.push_str(&format!(
            "@group(0) @binding({i}) var<storage, read> in{i}: array<{}>;\n",
            g.aval(*v).dtype.wgsl_storage()
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
pub(crate) const F32_BITS: &str = "fn bf32_bits(b: u32) -> f32 { return bitcast<f32>(b); }";

fn helpers_src(h: &[&'static str]) -> String {
    let mut seen: Vec<&str> = vec![F32_BITS];
    for x in h {
        if !seen.contains(x) {
            seen.push(x);
        }
    }
    seen.join("\n")
}

/// Per-axis index names `i0, i1, ...` of linear index `lin` in `shape`, as `let` lines.
fn index_lets(shape: &[usize], lin: &str, prefix: &str, indent: usize) -> (String, Vec<String>) {
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

fn store_expr(dt: DType, val: &str) -> String {
    if dt == DType::Bool {
        format!("select(0u, 1u, {val})")
    } else {
        val.to_string()
    }
}

fn fill(template: &str, pairs: &[(&str, &str)]) -> String {
    let mut s = template.to_string();
    for (k, v) in pairs {
        s = s.replace(&format!("{{{{{k}}}}}"), v);
    }
    s
}

const ELEMENTWISE: &str = include_str!("../../shaders/elementwise.wgsl");
const REDUCE: &str = include_str!("../../shaders/reduce.wgsl");
const REDUCE_WG: &str = include_str!("../../shaders/reduce_wg.wgsl");
const ARGREDUCE: &str = include_str!("../../shaders/argreduce.wgsl");

/// A kernel materializing fusable variable `root` (one invocation per element).
pub(crate) fn elementwise_kernel(
    g: &Graph,
    producers: &[Option<usize>],
    materialized: &[bool],
    root: Var,
    max_wg: u32,
) -> KernelSrc {
    let aval = g.aval(root).clone();
    let n = aval.size();
    let (index, idx) = index_lets(&aval.shape, "gi", "i", 1);
    // Emit with `root` itself treated as computed (it is the output, not an input).
    let mut mat = materialized.to_vec();
    mat[root.idx()] = false;
    let mut em = Emitter::new(g, producers, &mat, 1).with_root(&idx, &aval.shape, "gi");
    let val = em.value(root, &idx);
    let name = g.eqns[producers[root.idx()].expect("kernels compute produced variables")]
        .prim
        .name();
    let wgsl = fill(
        ELEMENTWISE,
        &[
            (
                "BINDINGS",
                &bindings(g, &em.inputs, aval.dtype.wgsl_storage()),
            ),
            ("HELPERS", &helpers_src(&em.helpers)),
            ("N", &n.to_string()),
            ("INDEX", index.trim_end()),
            ("BODY", em.body.trim_end()),
            ("STORE", &store_expr(aval.dtype, &val)),
        ],
    );
    KernelSrc {
        label: format!("fused_{name}_{}", aval),
        wgsl,
        inputs: em.inputs,
        workgroups: grid(n.div_ceil(WG as usize), max_wg),
    }
}

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
    let in_shape = g.aval(input).shape.clone();
    let geo = red_geom(&in_shape, axes);
    let mut em = Emitter::new(g, producers, materialized, indent);
    let ridx = em.bind_idx(layout::unravel_wgsl(&geo.red_shape, "r"));
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
    let v = em.value(input, &full);
    (em, v)
}

/// Kernels of `out = reduce(op, input, axes)`. One kernel, or two when a long reduction is shared by
/// several workgroups per output: then the first writes `n_out * parts` partials to a temporary buffer.
pub(crate) struct ReducePlan {
    pub first: KernelSrc,
    /// (parts, second kernel reading the partials as its only input binding)
    pub second: Option<(usize, KernelSrc)>,
}

pub(crate) fn reduce_kernels(
    g: &Graph,
    producers: &[Option<usize>],
    materialized: &[bool],
    op: ReduceOp,
    input: Var,
    axes: &[usize],
    max_wg: u32,
) -> ReducePlan {
    let in_aval = g.aval(input).clone();
    let dt = in_aval.dtype;
    let geo = red_geom(&in_aval.shape, axes);
    let n: usize = geo.out_shape.iter().product();
    let r: usize = geo.red_shape.iter().product();
    let ident = const_wgsl(op.identity(dt));
    let t = dt.wgsl();
    let label = format!("{}_{}", op.name(), in_aval);
    if n < 512 && r >= 4096 {
        // Cooperative: `parts` workgroups per output, 256 invocations each.
        let parts = (r / 16384).clamp(1, 64);
        let (index, idx) = index_lets(&geo.out_shape, "gi", "i", 2);
        let (em, v) = red_body(g, producers, materialized, input, axes, &idx, 3);
        let body = format!("{}\n            let x = {v};", em.body.trim_end());
        let combine = op.wgsl_combine(dt, "acc", "x");
        let wgsl = fill(
            REDUCE_WG,
            &[
                ("BINDINGS", &bindings(g, &em.inputs, dt.wgsl_storage())),
                ("HELPERS", &helpers_src(&em.helpers)),
                ("T", t),
                ("IDENTITY", &ident),
                ("P", &parts.to_string()),
                ("STEP", &(256 * parts).to_string()),
                ("N", &n.to_string()),
                ("R", &r.to_string()),
                ("INDEX", index.trim_end()),
                ("BODY", &body),
                ("COMBINE", &combine),
                ("COMBINE_SHARED", &op.wgsl_combine(dt, "a", "x")),
                ("STORE", "acc"),
            ],
        );
        let first = KernelSrc {
            label: format!("{label}_wg"),
            wgsl,
            inputs: em.inputs,
            workgroups: grid(n * parts, max_wg),
        };
        let second = (parts > 1).then(|| {
            let wgsl = fill(
                REDUCE,
                &[
                    ("BINDINGS", &format!("@group(0) @binding(0) var<storage, read> in0: array<{t}>;\n@group(0) @binding(1) var<storage, read_write> out0: array<{t}>;\n")),
                    ("HELPERS", &helpers_src(&[])),
                    ("T", t),
                    ("IDENTITY", &ident),
                    ("N", &n.to_string()),
                    ("R", &parts.to_string()),
                    ("INDEX", ""),
                    ("BODY", &format!("        let x = in0[gi * {parts}u + r];")),
                    ("COMBINE", &combine),
                    ("STORE", "acc"),
                ],
            );
            (parts, KernelSrc { label: format!("{label}_parts"), wgsl, inputs: vec![], workgroups: grid(n.div_ceil(WG as usize), max_wg) })
        });
        return ReducePlan { first, second };
    }
    let (index, idx) = index_lets(&geo.out_shape, "gi", "i", 1);
    let (em, v) = red_body(g, producers, materialized, input, axes, &idx, 2);
    let body = format!("{}\n        let x = {v};", em.body.trim_end());
    let wgsl = fill(
        REDUCE,
        &[
            ("BINDINGS", &bindings(g, &em.inputs, dt.wgsl_storage())),
            ("HELPERS", &helpers_src(&em.helpers)),
            ("T", t),
            ("IDENTITY", &ident),
            ("N", &n.to_string()),
            ("R", &r.to_string()),
            ("INDEX", index.trim_end()),
            ("BODY", &body),
            ("COMBINE", &op.wgsl_combine(dt, "acc", "x")),
            ("STORE", "acc"),
        ],
    );
    ReducePlan {
        first: KernelSrc {
            label,
            wgsl,
            inputs: em.inputs,
            workgroups: grid(n.div_ceil(WG as usize), max_wg),
        },
        second: None,
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
    let body = format!("{}\n        let x = {v};", em.body.trim_end());
    let wgsl = fill(
        ARGREDUCE,
        &[
            ("BINDINGS", &bindings(g, &em.inputs, "i32")),
            ("HELPERS", &helpers_src(&em.helpers)),
            ("T", in_aval.dtype.wgsl()),
            ("N", &n.to_string()),
            ("R", &r.to_string()),
            ("INDEX", index.trim_end()),
            ("BODY", &body),
            ("BETTER", &op.wgsl_better(in_aval.dtype, "x", "best")),
        ],
    );
    KernelSrc {
        label: format!("{}_{}", op.name(), in_aval),
        wgsl,
        inputs: em.inputs,
        workgroups: grid(n.div_ceil(WG as usize), max_wg),
    }
}
