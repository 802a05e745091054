//! Arrays larger than one storage binding (`max_storage_buffer_binding_size`).
//!
//! Such an array lives in one buffer (up to `max_buffer_size`, see `Device::check_fits`) and is
//! *bound* in segments: aligned sub-ranges of at most [`segment_bytes`] each, every one but the
//! last a multiple of the storage-offset alignment. A kernel family that handles segments emits
//! one dispatch per segment, each binding the sub-ranges it touches ([`View`]); every other family
//! refuses such an array with a typed [`Error::OverLimit`] that names it, the limit, and the
//! family ([`unsupported`]), never a wgpu validation error.
//!
//! Handled: fused elementwise kernels whose large operands are read at the output's own index
//! (the index space is cut at segment boundaries; broadcast and small operands are bound whole);
//! reductions, arg-reductions and matmuls as small programs over blocks of rows ([`blocked`]:
//! each block's arrays fit one binding, partial reductions over the cut axis are combined by one
//! more program, a matmul whose `B` is over the limit also sums over chunks of its contraction); slices (unit strides) and concatenations as buffer copies of contiguous runs
//! ([`copies`]); every other remap of a large operand (transpose, strided slice, pad,
//! broadcast, reshape that is not an alias, concatenation of more than 4096 runs, `take`) as a
//! kernel of its own, never fused into its consumer, run once per pair of segments of its
//! result and its large operand, each invocation storing its element only when its source lies
//! in the bound segment ([`remap`]; more than 65 536 such dispatches are refused with a typed
//! [`Error::OverLimit`]). Matmuls whose operand or result has rows too wide for 64 of them to
//! fit one binding are first rewritten into smaller ones ([`split_contractions`]): a sum over
//! chunks of the contraction (the gradient `x^T @ g` of a weight reads blocks of rows of `x`,
//! transposed in place), or blocks of rows or columns of the result, concatenated.
//!
//! Refused ([`unsupported`]): batched matmuls whose 64 batch entries exceed one binding, the
//! reduction cases named in [`blocked`], and kernels of the other families (convolutions,
//! windows, sorts, …) binding a large array.

use crate::device::DeviceLimits;
use crate::error::{Error, Result};
use crate::ops::matmul::kernel::MatmulChooser;
use crate::ops::{LayoutOp, Lowering, Prim, ReductionOp};
use crate::trace::graph::{Aval, Eqn, Graph, Var};
use crate::wgsl::{self, KernelSrc, Segment};

use super::{Program, View};

/// The largest storage-offset alignment wgpu allows (`min_storage_buffer_offset_alignment` is at
/// most 256 on every adapter): segment starts are multiples of it, so they bind everywhere.
pub(crate) const ALIGN: u64 = 256;

/// Bytes of every segment but the last: the largest multiple of [`ALIGN`] within the binding
/// limit (at least [`ALIGN`]).
pub(crate) fn segment_bytes(limits: &DeviceLimits) -> u64 {
    (limits.max_storage_buffer_binding_size / ALIGN).max(1) * ALIGN
}

/// Bytes of variable `v`.
fn bytes(g: &Graph, v: Var) -> u64 {
    g.aval(v).size_bytes() as u64
}

/// True when `v` cannot be bound whole.
pub(crate) fn too_big(g: &Graph, v: Var, limits: &DeviceLimits) -> bool {
    bytes(g, v) > limits.max_storage_buffer_binding_size
}

/// The kernel family of `p`, for messages.
pub(crate) fn family(p: &Prim) -> String {
    match p.lowering() {
        Lowering::Reduce { .. } | Lowering::ArgReduce { .. } => "reductions".into(),
        Lowering::Matmul(_) => "matmul".into(),
        Lowering::Remap { .. } => "layout ops".into(),
        Lowering::Elementwise | Lowering::Constant | Lowering::Keyed => {
            "elementwise kernels".into()
        }
        Lowering::Kernel(_)
        | Lowering::Passes(_)
        | Lowering::Loop
        | Lowering::Inline
        | Lowering::StageBoundary
        | Lowering::HostOnly => format!("`{}` kernels", p.name()),
    }
}

/// [`Error::OverLimit`] for array `v`, which a kernel of `family` would bind whole (`how` says how
/// it is used, e.g. "read by the `reduce_sum` kernel").
pub(crate) fn unsupported(
    g: &Graph,
    v: Var,
    limits: &DeviceLimits,
    how: &str,
    family: &str,
) -> Error {
    let a = g.aval(v);
    Error::OverLimit {
        device: "target".into(),
        what: format!(
            "an array of shape {:?} ({}) {how}: it is larger than one storage binding \
             (segmented {family}: not supported yet)",
            a.shape, a.dtype
        ),
        needed: bytes(g, v),
        limit: limits.max_storage_buffer_binding_size,
        unit: "bytes",
        limit_name: "max_storage_buffer_binding_size",
    }
}

/// One dispatch of a segmented kernel: its source and, per binding (inputs then output), the
/// sub-range it binds (`None`: the whole buffer).
pub(crate) type SegLaunch = (KernelSrc, Vec<Option<View>>);

/// The per-segment kernels of the fused elementwise kernel `whole` computing `out`, or `None`
/// when every array it binds fits one binding.
///
/// The output is cut into segments of [`segment_bytes`]; operands as large as the output are
/// bound at the same segment, the others whole. A kernel computing a remap of large operands
/// runs over windows of them ([`remap`]). Errors ([`unsupported`]) for a large operand any other
/// kernel reads away from the output's own index, and for a large operand of a small output
/// (the planner stores remaps of large arrays, so neither happens).
pub(crate) fn elementwise(
    g: &Graph,
    producers: &[Option<usize>],
    mat: &[bool],
    whole: &KernelSrc,
    out: Var,
    limits: &DeviceLimits,
) -> Result<Option<Vec<SegLaunch>>> {
    let big: Vec<Var> = whole
        .inputs
        .iter()
        .copied()
        .filter(|&v| too_big(g, v, limits))
        .collect();
    let prim = &g.eqns[producers[out.idx()].expect("kernels compute produced variables")].prim;
    let layout_read = |v: Var| {
        unsupported(
            g,
            v,
            limits,
            &format!(
                "is read through a layout op fused into the `{}` kernel",
                prim.name()
            ),
            "layout ops",
        )
    };
    if matches!(prim.lowering(), Lowering::Remap { .. }) && !big.is_empty() {
        return remap(g, producers, mat, out, &big, limits).map(Some);
    }
    if !too_big(g, out, limits) {
        return match big.first() {
            None => Ok(None),
            Some(&v) => Err(layout_read(v)),
        };
    }
    let n = g.aval(out).size();
    let elem = g.aval(out).dtype.size_bytes();
    let per = (segment_bytes(limits) as usize / elem).max(1);
    let max_wg = limits.max_compute_workgroups_per_dimension;
    let mut launches = Vec::new();
    for base in (0..n).step_by(per) {
        let seg = Segment {
            base,
            len: per.min(n - base),
            vars: big.clone(),
            windows: Vec::new(),
            first: true,
        };
        let (src, off_root) = wgsl::elementwise_segment(g, producers, mat, out, max_wg, Some(&seg));
        if let Some(&v) = off_root.first() {
            return Err(layout_read(v));
        }
        let view = |v: Var| View {
            offset: (base * g.aval(v).dtype.size_bytes()) as u64,
            size: (seg.len * g.aval(v).dtype.size_bytes()) as u64,
        };
        let mut views: Vec<Option<View>> = src
            .inputs
            .iter()
            .map(|&v| big.contains(&v).then(|| view(v)))
            .collect();
        views.push(Some(view(out)));
        launches.push((src, views));
    }
    Ok(Some(launches))
}

/// Most dispatches one remap over windows ([`remap`]) may take.
const MAX_REMAP_DISPATCHES: usize = 1 << 16;

/// The `(start, len)` element ranges of the segments of `v` (one, `(0, 0)`, when it is empty).
fn cuts(g: &Graph, v: Var, limits: &DeviceLimits) -> Vec<(usize, usize)> {
    let n = g.aval(v).size();
    let per = (segment_bytes(limits) as usize / g.aval(v).dtype.size_bytes()).max(1);
    let mut c: Vec<(usize, usize)> = (0..n).step_by(per).map(|b| (b, per.min(n - b))).collect();
    if c.is_empty() {
        c.push((0, 0));
    }
    c
}

/// The dispatches of the kernel computing `out`, a remap (a layout op or gather) whose operands
/// `big` are over one binding: the output is cut into segments (when it is over one binding
/// itself) and, for each, the kernel runs once per combination of one segment of every large
/// operand that the output segment may read ([`source_range`]), bound as a window
/// ([`wgsl::Window`]). An invocation stores its element only when its source lies in the bound
/// windows (elements that read no large operand, such as a pad value, are stored by the first
/// combination), so each element is written by the dispatch holding its source. Dispatches:
/// about the segments of the result plus those of the operand for slices, pads and broadcasts,
/// their product for a transpose or a gather.
fn remap(
    g: &Graph,
    producers: &[Option<usize>],
    mat: &[bool],
    out: Var,
    big: &[Var],
    limits: &DeviceLimits,
) -> Result<Vec<SegLaunch>> {
    let out_big = too_big(g, out, limits);
    let outs = if out_big {
        cuts(g, out, limits)
    } else {
        vec![(0, g.aval(out).size())]
    };
    let ins: Vec<Vec<(usize, usize)>> = big.iter().map(|&v| cuts(g, v, limits)).collect();
    let e = &g.eqns[producers[out.idx()].expect("kernels compute produced variables")];
    // Per output segment and large operand, the operand's segments it may read (the first one
    // when it reads none: its reads never run).
    let cands: Vec<Vec<Vec<(usize, usize)>>> = outs
        .iter()
        .map(|&(base, len)| {
            big.iter()
                .zip(&ins)
                .map(|(&v, segs)| {
                    let range = e
                        .inputs
                        .iter()
                        .enumerate()
                        .filter(|&(_, &x)| x == v)
                        .filter_map(|(j, _)| source_range(g, e, j, base, base + len))
                        .reduce(|(a, b), (c, d)| (a.min(c), b.max(d)));
                    let hit: Vec<(usize, usize)> = match range {
                        Some((lo, hi)) => segs
                            .iter()
                            .copied()
                            .filter(|&(s, l)| s <= hi && lo < s + l.max(1))
                            .collect(),
                        None => Vec::new(),
                    };
                    if hit.is_empty() { vec![segs[0]] } else { hit }
                })
                .collect()
        })
        .collect();
    let total: usize = cands
        .iter()
        .map(|c| c.iter().map(Vec::len).product::<usize>())
        .sum();
    if total > MAX_REMAP_DISPATCHES {
        let a = g.aval(big[0]);
        return Err(Error::OverLimit {
            device: "target".into(),
            what: format!(
                "`{}` of an array of shape {:?} ({}) larger than one storage binding: it runs \
                 once per pair of segments of its operand and result that it reads, {total} \
                 dispatches; raise the binding limit or split the array",
                e.prim.name(),
                a.shape,
                a.dtype
            ),
            needed: total as u64,
            limit: MAX_REMAP_DISPATCHES as u64,
            unit: "dispatches",
            limit_name: "segmented layout ops",
        });
    }
    let max_wg = limits.max_compute_workgroups_per_dimension;
    let view = |v: Var, (base, len): (usize, usize)| {
        let e = g.aval(v).dtype.size_bytes();
        View {
            offset: (base * e) as u64,
            size: (len * e).max(4) as u64,
        }
    };
    let mut launches = Vec::new();
    for (&(base, len), cands) in outs.iter().zip(&cands) {
        let combos: usize = cands.iter().map(Vec::len).product();
        for c in 0..combos {
            // Combination `c`, one segment per large operand (mixed radix).
            let mut rest = c;
            let windows: Vec<wgsl::Window> = big
                .iter()
                .zip(cands.iter())
                .map(|(&var, segs)| {
                    let (b, l) = segs[rest % segs.len()];
                    rest /= segs.len();
                    wgsl::Window {
                        var,
                        base: b,
                        len: l,
                    }
                })
                .collect();
            let seg = Segment {
                base,
                len,
                vars: Vec::new(),
                windows: windows.clone(),
                first: c == 0,
            };
            let (src, _) = wgsl::elementwise_segment(g, producers, mat, out, max_wg, Some(&seg));
            let mut views: Vec<Option<View>> = src
                .inputs
                .iter()
                .map(|&v| {
                    windows
                        .iter()
                        .find(|w| w.var == v)
                        .map(|w| view(v, (w.base, w.len)))
                })
                .collect();
            views.push(out_big.then(|| view(out, (base, len))));
            launches.push((src, views));
        }
    }
    Ok(launches)
}

/// A superset of the linear indices of operand `j` of remap `e` that elements `a..b` of its
/// result read, as an inclusive range; `None` when they read none of it. The elements span a box
/// of multi-indices (fixed leading axes, a range on the first axis where `a` and `b - 1` differ,
/// every later axis whole), mapped axis by axis to the operand.
fn source_range(g: &Graph, e: &Eqn, j: usize, a: usize, b: usize) -> Option<(usize, usize)> {
    let out = &g.aval(e.out).shape;
    let shape = &g.aval(e.inputs[j]).shape;
    if b <= a || shape.contains(&0) {
        return None;
    }
    let whole = Some((0, shape.iter().product::<usize>() - 1));
    let (ia, ib) = (
        crate::host::unravel(a, out),
        crate::host::unravel(b - 1, out),
    );
    let split = (0..out.len())
        .find(|&d| ia[d] != ib[d])
        .unwrap_or(out.len());
    let r#box: Vec<(usize, usize)> = (0..out.len())
        .map(|d| match d.cmp(&split) {
            std::cmp::Ordering::Less => (ia[d], ia[d]),
            std::cmp::Ordering::Equal => (ia[d], ib[d]),
            std::cmp::Ordering::Greater => (0, out[d] - 1),
        })
        .collect();
    let in_box: Vec<(usize, usize)> = match &e.prim {
        Prim::Layout(LayoutOp::Reshape { .. }) => return Some((a, b - 1)),
        Prim::Layout(LayoutOp::Transpose { perm }) => {
            let mut ib = vec![(0, 0); perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                ib[p] = r#box[i];
            }
            ib
        }
        Prim::Layout(LayoutOp::BroadcastInDim { dims, .. }) => dims
            .iter()
            .enumerate()
            .map(|(i, &d)| if shape[i] == 1 { (0, 0) } else { r#box[d] })
            .collect(),
        Prim::Layout(LayoutOp::Slice { start, stride, .. }) => (0..shape.len())
            .map(|d| {
                let (lo, hi) = r#box[d];
                (start[d] + lo * stride[d], start[d] + hi * stride[d])
            })
            .collect(),
        Prim::Layout(LayoutOp::Pad { lo, interior, .. }) => {
            let mut ib = Vec::new();
            for d in 0..shape.len() {
                let (l, h) = r#box[d];
                let step = interior[d] + 1;
                if h < lo[d] {
                    return None;
                }
                let first = l.saturating_sub(lo[d]).div_ceil(step);
                let last = ((h - lo[d]) / step).min(shape[d] - 1);
                if first > last {
                    return None;
                }
                ib.push((first, last));
            }
            ib
        }
        Prim::Layout(LayoutOp::Concatenate { axis }) => {
            let at: usize = e.inputs[..j].iter().map(|&v| g.aval(v).shape[*axis]).sum();
            let (l, h) = r#box[*axis];
            if h < at || l >= at + shape[*axis] {
                return None;
            }
            let mut ib = r#box.clone();
            ib[*axis] = (l.max(at) - at, h.min(at + shape[*axis] - 1) - at);
            ib
        }
        Prim::Indexing(crate::ops::IndexOp::Take { axis }) => {
            let r = g.aval(e.inputs[1]).rank();
            if j == 1 {
                r#box[*axis..*axis + r].to_vec()
            } else {
                let mut ib = r#box[..*axis].to_vec();
                ib.push((0, shape[*axis] - 1));
                ib.extend_from_slice(&r#box[*axis + r..]);
                ib
            }
        }
        _ => return whole,
    };
    let st = crate::host::strides(shape);
    let lin = |f: fn(&(usize, usize)) -> usize| -> usize {
        in_box.iter().zip(&st).map(|(x, s)| f(x) * s).sum()
    };
    Some((lin(|x| x.0), lin(|x| x.1)))
}

/// Where a block of a [`Blocked`] step reads or writes: a variable of the parent graph, or one
/// of the step's temporaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    Var(Var),
    Temp(usize),
}

/// One block of a [`Blocked`] step: a small program (one primitive over a block of rows),
/// reading its inputs from, and writing its one output to, byte ranges of the parent's buffers.
#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub program: Program,
    /// Per input of `program`, in order: the buffer and the range (`None`: the whole buffer).
    pub ins: Vec<(Place, Option<View>)>,
    pub out: (Place, Option<View>),
}

/// A primitive over arrays larger than one binding, run as programs over blocks of rows (every
/// block's arrays within one binding), then, for a reduction over the blocked axis, one program
/// combining the blocks' partial results (kept in temporary `0`, one per 256-byte stride).
#[derive(Clone, Debug)]
pub(crate) struct Blocked {
    pub temps: Vec<u64>,
    pub blocks: Vec<Block>,
}

impl Blocked {
    /// The parent variables the blocks read.
    pub(crate) fn reads(&self) -> Vec<Var> {
        let mut v = Vec::new();
        for b in &self.blocks {
            for (p, _) in &b.ins {
                if let Place::Var(x) = p {
                    if !v.contains(x) {
                        v.push(*x);
                    }
                }
            }
        }
        v
    }
}

/// Rows per block when cutting `rows` rows of arrays along one axis whose rows hold `row_bytes`
/// bytes each (one entry per array cut): all of them when they fit one binding, else the most
/// rows, a multiple of 64, that keep every array's block within one binding (64 rows of 4-byte
/// elements start every block at a multiple of 256 bytes). `None` when not even 64 rows fit.
fn rows_per_block(rows: usize, row_bytes: &[usize], limits: &DeviceLimits) -> Option<usize> {
    let widest = row_bytes.iter().copied().max().unwrap_or(1).max(1);
    let fit = limits.max_storage_buffer_binding_size as usize / widest;
    if rows <= fit {
        return Some(rows.max(1));
    }
    let r = fit / 64 * 64;
    (r > 0).then_some(r)
}

/// A graph of one equation: `prim` over inputs of `ins`, giving `out`.
fn one_eqn(prim: Prim, ins: &[Aval], out: Aval) -> Graph {
    let mut g = Graph::default();
    let inputs: Vec<Var> = ins.iter().map(|a| g.new_var(a.clone())).collect();
    let o = g.new_var(out);
    g.inputs = inputs.clone();
    g.eqns.push(Eqn::new(prim, inputs, o));
    g.outputs = vec![o];
    g
}

/// `a` with its first axis `rows` long.
fn with_rows(a: &Aval, rows: usize) -> Aval {
    let mut a = a.clone();
    a.shape[0] = rows;
    a
}

/// Bytes of one row of `a` along its first axis.
fn row_bytes(a: &Aval) -> usize {
    a.shape[1..].iter().product::<usize>() * a.dtype.size_bytes()
}

/// The view of rows `r0..r0 + len` of an array whose rows hold `row` bytes.
fn rows_view(r0: usize, len: usize, row: usize) -> Option<View> {
    Some(View {
        offset: (r0 * row) as u64,
        size: (len * row).max(4) as u64,
    })
}

/// The blocks of equation `e` (a reduction, arg-reduction or canonical matmul reading and
/// writing materialized variables) when one of its arrays is larger than a binding, `None`
/// when all fit. Errors ([`unsupported`]) for the cases not cut yet: a matmul whose `B` is over
/// the limit, an arg-reduction along the first axis, rows too wide for even 64 to fit.
pub(crate) fn blocked(
    g: &Graph,
    e: &Eqn,
    limits: &DeviceLimits,
    chooser: &dyn MatmulChooser,
) -> Result<Option<Blocked>> {
    let big = |v: Var| too_big(g, v, limits);
    if !big(e.out) && !e.inputs.iter().any(|&v| big(v)) {
        return Ok(None);
    }
    let fam = family(&e.prim);
    let name = e.prim.name();
    let refuse = |v: Var, why: &str| {
        unsupported(
            g,
            v,
            limits,
            &format!("bound by the `{name}` kernel ({why})"),
            &fam,
        )
    };
    let first_big = e
        .inputs
        .iter()
        .copied()
        .chain([e.out])
        .find(|&v| big(v))
        .expect("some array is big");
    let lower = |sub: &Graph| super::lower_with(sub, limits, chooser);
    match e.prim.lowering() {
        Lowering::Matmul(_) => {
            let (a, b) = (g.aval(e.inputs[0]), g.aval(e.inputs[1]));
            let c = g.aval(e.out);
            let (batch, m, k, n) = (a.shape[0], a.shape[1], a.shape[2], b.shape[2]);
            if batch == 1 {
                if big(e.inputs[1]) {
                    return k_chunks(e, g, limits, &lower, &refuse).map(Some);
                }
                // Rows of A and C, B whole: a [1, r, k] x [1, k, n] matmul per block.
                let elem = a.dtype.size_bytes();
                let Some(r) = rows_per_block(m, &[k * elem, n * elem], limits) else {
                    return Err(refuse(first_big, "64 rows exceed one binding"));
                };
                let mut blocks = Vec::new();
                for r0 in (0..m).step_by(r) {
                    let len = r.min(m - r0);
                    let mut sa = a.clone();
                    sa.shape[1] = len;
                    let mut sc = c.clone();
                    sc.shape[1] = len;
                    let sub = one_eqn(e.prim.clone(), &[sa, b.clone()], sc);
                    blocks.push(Block {
                        program: lower(&sub)?,
                        ins: vec![
                            (Place::Var(e.inputs[0]), rows_view(r0, len, k * elem)),
                            (Place::Var(e.inputs[1]), None),
                        ],
                        out: (Place::Var(e.out), rows_view(r0, len, n * elem)),
                    });
                }
                return Ok(Some(Blocked {
                    temps: Vec::new(),
                    blocks,
                }));
            }
            // Blocks of the batch: A, B and C all cut along it.
            let rows = [row_bytes(a), row_bytes(b), row_bytes(c)];
            let Some(r) = rows_per_block(batch, &rows, limits) else {
                return Err(refuse(first_big, "64 batch entries exceed one binding"));
            };
            let mut blocks = Vec::new();
            for r0 in (0..batch).step_by(r) {
                let len = r.min(batch - r0);
                let sub = one_eqn(
                    e.prim.clone(),
                    &[with_rows(a, len), with_rows(b, len)],
                    with_rows(c, len),
                );
                blocks.push(Block {
                    program: lower(&sub)?,
                    ins: vec![
                        (Place::Var(e.inputs[0]), rows_view(r0, len, rows[0])),
                        (Place::Var(e.inputs[1]), rows_view(r0, len, rows[1])),
                    ],
                    out: (Place::Var(e.out), rows_view(r0, len, rows[2])),
                });
            }
            Ok(Some(Blocked {
                temps: Vec::new(),
                blocks,
            }))
        }
        Lowering::Reduce { op, axes } => {
            let x = g.aval(e.inputs[0]);
            let out = g.aval(e.out);
            let rank = x.rank();
            // A reduction over every axis is one over the flat array.
            let (xs, axes): (Aval, Vec<usize>) = if axes.len() == rank {
                (Aval::new(vec![x.size()], x.dtype), vec![0])
            } else {
                (x.clone(), axes.to_vec())
            };
            let prim = |axes: Vec<usize>| Prim::Reduction(ReductionOp::Reduce { op, axes });
            let rows = xs.shape[0];
            if !axes.contains(&0) {
                // Rows are independent: each block reduces its rows into the same rows of out.
                let Some(r) = rows_per_block(rows, &[row_bytes(&xs), row_bytes(out)], limits)
                else {
                    return Err(refuse(first_big, "64 rows exceed one binding"));
                };
                let mut blocks = Vec::new();
                for r0 in (0..rows).step_by(r) {
                    let len = r.min(rows - r0);
                    let sub = one_eqn(
                        prim(axes.clone()),
                        &[with_rows(&xs, len)],
                        with_rows(out, len),
                    );
                    blocks.push(Block {
                        program: lower(&sub)?,
                        ins: vec![(Place::Var(e.inputs[0]), rows_view(r0, len, row_bytes(&xs)))],
                        out: (Place::Var(e.out), rows_view(r0, len, row_bytes(out))),
                    });
                }
                return Ok(Some(Blocked {
                    temps: Vec::new(),
                    blocks,
                }));
            }
            if big(e.out) {
                return Err(refuse(e.out, "a partial result over one binding"));
            }
            // Over the first axis too: each block's partial result goes to its own 256-byte
            // aligned place of a temporary, and one more program reduces the partials.
            let Some(r) = rows_per_block(rows, &[row_bytes(&xs)], limits) else {
                return Err(refuse(first_big, "64 rows exceed one binding"));
            };
            let nb = rows.div_ceil(r);
            let elem = out.dtype.size_bytes();
            let stride = (out.size() * elem).max(4).next_multiple_of(ALIGN as usize);
            let temp_bytes = (nb * stride) as u64;
            if temp_bytes > limits.max_storage_buffer_binding_size {
                return Err(refuse(first_big, "too many partial results"));
            }
            let mut blocks = Vec::new();
            for (i, r0) in (0..rows).step_by(r).enumerate() {
                let len = r.min(rows - r0);
                let sub = one_eqn(prim(axes.clone()), &[with_rows(&xs, len)], out.clone());
                blocks.push(Block {
                    program: lower(&sub)?,
                    ins: vec![(Place::Var(e.inputs[0]), rows_view(r0, len, row_bytes(&xs)))],
                    out: (
                        Place::Temp(0),
                        Some(View {
                            offset: (i * stride) as u64,
                            size: (out.size() * elem).max(4) as u64,
                        }),
                    ),
                });
            }
            // Combine: slice the partials out of their strides, reduce over the blocks.
            let mut comb = Graph::default();
            let t = comb.new_var(Aval::new(vec![nb, stride / elem], out.dtype));
            let s = comb.new_var(Aval::new(vec![nb, out.size()], out.dtype));
            let mut parts_shape = vec![nb];
            parts_shape.extend(&out.shape);
            let p = comb.new_var(Aval::new(parts_shape.clone(), out.dtype));
            let o = comb.new_var(out.clone());
            comb.inputs = vec![t];
            comb.eqns.push(Eqn::new(
                Prim::Layout(LayoutOp::Slice {
                    start: vec![0, 0],
                    limit: vec![nb, out.size()],
                    stride: vec![1, 1],
                }),
                vec![t],
                s,
            ));
            comb.eqns.push(Eqn::new(
                Prim::Layout(LayoutOp::Reshape { shape: parts_shape }),
                vec![s],
                p,
            ));
            comb.eqns.push(Eqn::new(prim(vec![0]), vec![p], o));
            comb.outputs = vec![o];
            blocks.push(Block {
                program: lower(&comb)?,
                ins: vec![(Place::Temp(0), None)],
                out: (Place::Var(e.out), None),
            });
            Ok(Some(Blocked {
                temps: vec![temp_bytes],
                blocks,
            }))
        }
        Lowering::ArgReduce { axis, .. } => {
            let x = g.aval(e.inputs[0]);
            let out = g.aval(e.out);
            if axis == 0 || x.rank() < 2 {
                return Err(refuse(
                    first_big,
                    "arg-reductions are cut along another axis",
                ));
            }
            let Some(r) = rows_per_block(x.shape[0], &[row_bytes(x), row_bytes(out)], limits)
            else {
                return Err(refuse(first_big, "64 rows exceed one binding"));
            };
            let rows = x.shape[0];
            let mut blocks = Vec::new();
            for r0 in (0..rows).step_by(r) {
                let len = r.min(rows - r0);
                let sub = one_eqn(e.prim.clone(), &[with_rows(x, len)], with_rows(out, len));
                blocks.push(Block {
                    program: lower(&sub)?,
                    ins: vec![(Place::Var(e.inputs[0]), rows_view(r0, len, row_bytes(x)))],
                    out: (Place::Var(e.out), rows_view(r0, len, row_bytes(out))),
                });
            }
            Ok(Some(Blocked {
                temps: Vec::new(),
                blocks,
            }))
        }
        Lowering::Elementwise
        | Lowering::Constant
        | Lowering::Remap { .. }
        | Lowering::Keyed
        | Lowering::Kernel(_)
        | Lowering::Passes(_)
        | Lowering::Loop
        | Lowering::Inline
        | Lowering::StageBoundary
        | Lowering::HostOnly => Ok(None),
    }
}

/// A `[1, m, k] x [1, k, n]` matmul whose `B` is over one binding: for every block of rows of
/// `A` and `C`, the contraction is cut into chunks of rows of `B` (contiguous in its buffer), each
/// chunk's product `A[rows, chunk] @ B[chunk]` added to the sum of the chunks before it. The sums
/// alternate between temporary `0` and the block of `C`, so that no dispatch reads and writes one
/// buffer and the last lands in `C`.
fn k_chunks(
    e: &Eqn,
    g: &Graph,
    limits: &DeviceLimits,
    lower: &dyn Fn(&Graph) -> Result<Program>,
    refuse: &dyn Fn(Var, &str) -> Error,
) -> Result<Blocked> {
    let (a, b, c) = (g.aval(e.inputs[0]), g.aval(e.inputs[1]), g.aval(e.out));
    let (m, k, n) = (a.shape[1], a.shape[2], b.shape[2]);
    let elem = c.dtype.size_bytes();
    // Rows of A are bound whole (each block slices its chunk of columns out of them).
    let Some(r) = rows_per_block(m, &[k * a.dtype.size_bytes(), n * elem], limits) else {
        return Err(refuse(
            e.inputs[0],
            "64 rows of the left operand exceed one binding",
        ));
    };
    let Some(rk) = rows_per_block(k, &[n * b.dtype.size_bytes()], limits) else {
        return Err(refuse(
            e.inputs[1],
            "64 rows of the right operand exceed one binding",
        ));
    };
    let chunks: Vec<(usize, usize)> = (0..k).step_by(rk).map(|k0| (k0, rk.min(k - k0))).collect();
    let add = Prim::Elementwise(crate::ops::ElementwiseOp::Binary(crate::ops::BinaryOp::Add));
    let mut blocks = Vec::new();
    for r0 in (0..m).step_by(r) {
        let len = r.min(m - r0);
        let shaped = |x: &Aval, rows: usize, cols: usize| {
            let mut x = x.clone();
            x.shape[1] = rows;
            x.shape[2] = cols;
            x
        };
        let c_block = (Place::Var(e.out), rows_view(r0, len, n * elem));
        let temp = (
            Place::Temp(0),
            Some(View {
                offset: 0,
                size: (len * n * elem).max(4) as u64,
            }),
        );
        for (j, &(k0, klen)) in chunks.iter().enumerate() {
            // The chunk's product, plus the running sum from the chunk before.
            let mut sub = Graph::default();
            let ai = sub.new_var(shaped(a, len, k));
            let bj = sub.new_var(shaped(b, klen, n));
            let s = sub.new_var(shaped(a, len, klen));
            let d = sub.new_var(shaped(c, len, n));
            sub.inputs = vec![ai, bj];
            sub.eqns.push(Eqn::new(
                Prim::Layout(LayoutOp::Slice {
                    start: vec![0, 0, k0],
                    limit: vec![1, len, k0 + klen],
                    stride: vec![1, 1, 1],
                }),
                vec![ai],
                s,
            ));
            sub.eqns.push(Eqn::new(e.prim.clone(), vec![s, bj], d));
            let mut ins = vec![
                (
                    Place::Var(e.inputs[0]),
                    rows_view(r0, len, k * a.dtype.size_bytes()),
                ),
                (
                    Place::Var(e.inputs[1]),
                    rows_view(k0, klen, n * b.dtype.size_bytes()),
                ),
            ];
            // Chunk j writes C when an even number of chunks follow it, else the temporary.
            let dest = |j: usize| {
                if (chunks.len() - 1 - j).is_multiple_of(2) {
                    c_block
                } else {
                    temp
                }
            };
            let out = if j == 0 {
                d
            } else {
                let prev = sub.new_var(shaped(c, len, n));
                let o = sub.new_var(shaped(c, len, n));
                sub.inputs.push(prev);
                sub.eqns.push(Eqn::new(add.clone(), vec![prev, d], o));
                ins.push(dest(j - 1));
                o
            };
            sub.outputs = vec![out];
            blocks.push(Block {
                program: lower(&sub)?,
                ins,
                out: dest(j),
            });
        }
    }
    Ok(Blocked {
        temps: vec![(r.min(m) * n * elem) as u64],
        blocks,
    })
}

/// How [`split_contractions`] cuts a matmul none of whose blocks of 64 rows fit one binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Split {
    /// `A`'s rows are too wide: a sum over chunks of the contraction.
    K,
    /// `C`'s rows are too wide (one fits): `C`'s rows in blocks, concatenated.
    M,
    /// `B`'s rows (or a single row of `C`) are too wide: `C`'s columns in blocks, concatenated.
    N,
}

/// `g` with every canonical `[1, m, k] x [1, k, n]` matmul that [`blocked`] cannot cut (64 rows
/// of one of its operands or of its result over one binding) rewritten into smaller ones, until
/// none is left:
/// - `A` too wide (a very wide contraction, or the gradient `x^T @ g` of a weight, contracting
///   over the rows of a large `x`): a sum over chunks of the contraction, `A[:, :, chunk] @
///   B[:, chunk, :]`, added up in order. When `A` is `x^T` for a 2-D `x`, its chunk is the
///   transpose of a block of contiguous rows of `x` (a buffer copy, read transposed in place:
///   no transposed copy of `x`; done for every large such `x` whose rows fit one binding when
///   the result does too); otherwise a slice of `A`'s columns.
/// - `C` too wide: blocks of rows of `A`, their products concatenated along the rows.
/// - `B` too wide: blocks of columns of `B`, their products concatenated along the columns.
///
/// Slices and concatenations of large arrays are buffer copies ([`copies`]) or remaps over
/// windows ([`remap`]).
pub(crate) fn split_contractions(g: &Graph, limits: &DeviceLimits) -> Graph {
    let mut g = g.clone();
    while let Some(next) = split_pass(&g, limits) {
        g = next;
    }
    g
}

/// The split [`split_contractions`] makes of equation `e`, if any. A left operand `x^T` of a
/// large 2-D `x` is always cut along the contraction when the result fits one binding (blocks of
/// rows of `x` are contiguous: no transposed copy of `x`).
fn split_of(
    g: &Graph,
    producers: &[Option<usize>],
    e: &Eqn,
    limits: &DeviceLimits,
) -> Option<Split> {
    let Lowering::Matmul(d) = e.prim.lowering() else {
        return None;
    };
    let (a, c) = (g.aval(e.inputs[0]), g.aval(e.out));
    if !super::is_canonical_dot(d) || a.shape[0] != 1 {
        return None;
    }
    let (m, k, n) = (a.shape[1], a.shape[2], c.shape[2]);
    let elem = a.dtype.size_bytes();
    let narrow = |v: Var, rows: usize, row: usize| {
        !too_big(g, v, limits) || rows_per_block(rows, &[row * elem], limits).is_some()
    };
    let lim = limits.max_storage_buffer_binding_size as usize;
    // (Only when a row of `x` fits one binding: each chunk then does, and is not cut again.)
    let transposed = || {
        m * elem <= lim
            && super::transposed_source(g, producers, e.inputs[0])
                .is_some_and(|x| g.aval(x).shape == [k, m])
    };
    let a_big = too_big(g, e.inputs[0], limits);
    if !narrow(e.inputs[0], m, k) || (a_big && !too_big(g, e.out, limits) && transposed()) {
        Some(Split::K)
    } else if !narrow(e.inputs[1], k, n) || n * elem > lim {
        Some(Split::N)
    } else if !narrow(e.out, m, n) {
        Some(Split::M)
    } else {
        None
    }
}

/// One pass of [`split_contractions`]: `None` when no matmul needed a split.
fn split_pass(g: &Graph, limits: &DeviceLimits) -> Option<Graph> {
    let producers = g.producers();
    let mut out = g.without_eqns();
    let mut changed = false;
    let lim = limits.max_storage_buffer_binding_size as usize;
    for e in &g.eqns {
        let Some(split) = split_of(g, &producers, e, limits) else {
            out.eqns.push(e.clone());
            continue;
        };
        changed = true;
        let (a, c) = (g.aval(e.inputs[0]), g.aval(e.out));
        let (m, k, n) = (a.shape[1], a.shape[2], c.shape[2]);
        let dt = a.dtype;
        let elem = dt.size_bytes();
        // Pieces along the cut axis of `len`, each with `cross` elements across it: the whole
        // piece within one binding when possible, else 64 rows of it.
        let piece = |len: usize, cross: usize| {
            let rows = if cross * elem <= lim {
                cross.max(1)
            } else {
                64
            };
            let per = (lim / (rows * elem)).max(1);
            (0..len)
                .step_by(per)
                .map(|s| (s, (s + per).min(len)))
                .collect::<Vec<(usize, usize)>>()
        };
        let slice = |out: &mut Graph, v: Var, start: Vec<usize>, limit: Vec<usize>| {
            let shape: Vec<usize> = start.iter().zip(&limit).map(|(s, l)| l - s).collect();
            let r = out.new_var(Aval::new(shape, dt));
            out.eqns.push(Eqn::new(
                Prim::Layout(LayoutOp::Slice {
                    stride: vec![1; start.len()],
                    start,
                    limit,
                }),
                vec![v],
                r,
            ));
            r
        };
        let unary = |out: &mut Graph, prim: Prim, v: Var, shape: Vec<usize>| {
            let r = out.new_var(Aval::new(shape, dt));
            out.eqns.push(Eqn::new(prim, vec![v], r));
            r
        };
        let matmul = |out: &mut Graph, a: Var, b: Var, rows: usize, cols: usize| {
            let r = out.new_var(Aval::new(vec![1, rows, cols], dt));
            out.eqns.push(Eqn::new(e.prim.clone(), vec![a, b], r));
            r
        };
        let parts: Vec<Var> = match split {
            Split::K => {
                // `x` with A = reshape(transpose(x)), x = [k, m].
                let x = super::transposed_source(g, &producers, e.inputs[0])
                    .filter(|&x| g.aval(x).shape == [k, m]);
                piece(k, m)
                    .into_iter()
                    .map(|(k0, k1)| {
                        let aj = match x {
                            Some(x) => {
                                let rows = slice(&mut out, x, vec![k0, 0], vec![k1, m]);
                                let t = unary(
                                    &mut out,
                                    Prim::Layout(LayoutOp::Transpose { perm: vec![1, 0] }),
                                    rows,
                                    vec![m, k1 - k0],
                                );
                                let shape = vec![1, m, k1 - k0];
                                unary(
                                    &mut out,
                                    Prim::Layout(LayoutOp::Reshape {
                                        shape: shape.clone(),
                                    }),
                                    t,
                                    shape,
                                )
                            }
                            None => slice(&mut out, e.inputs[0], vec![0, 0, k0], vec![1, m, k1]),
                        };
                        let bj = slice(&mut out, e.inputs[1], vec![0, k0, 0], vec![1, k1, n]);
                        matmul(&mut out, aj, bj, m, n)
                    })
                    .collect()
            }
            Split::M => piece(m, n)
                .into_iter()
                .map(|(m0, m1)| {
                    let ai = slice(&mut out, e.inputs[0], vec![0, m0, 0], vec![1, m1, k]);
                    matmul(&mut out, ai, e.inputs[1], m1 - m0, n)
                })
                .collect(),
            Split::N => piece(n, k)
                .into_iter()
                .map(|(n0, n1)| {
                    let bj = slice(&mut out, e.inputs[1], vec![0, 0, n0], vec![1, k, n1]);
                    matmul(&mut out, e.inputs[0], bj, m, n1 - n0)
                })
                .collect(),
        };
        // Join the parts into `e.out`: added up in order, or concatenated.
        match split {
            Split::K => {
                let add =
                    Prim::Elementwise(crate::ops::ElementwiseOp::Binary(crate::ops::BinaryOp::Add));
                let mut sum = parts[0];
                for (j, &p) in parts.iter().enumerate().skip(1) {
                    let r = if j + 1 == parts.len() {
                        e.out
                    } else {
                        out.new_var(c.clone())
                    };
                    out.eqns.push(Eqn::new(add.clone(), vec![sum, p], r));
                    sum = r;
                }
                if parts.len() == 1 {
                    out.eqns.push(Eqn::new(
                        Prim::Layout(LayoutOp::Reshape {
                            shape: c.shape.clone(),
                        }),
                        vec![sum],
                        e.out,
                    ));
                }
            }
            Split::M | Split::N => {
                let axis = if split == Split::M { 1 } else { 2 };
                out.eqns.push(Eqn::new(
                    Prim::Layout(LayoutOp::Concatenate { axis }),
                    parts,
                    e.out,
                ));
            }
        }
    }
    changed.then_some(out)
}

/// Whether equation `e` is lowered by [`blocked`] when its arrays are over one binding: its
/// operands must then be stored (not fused into its kernel).
pub(crate) fn blocks_operands(e: &Eqn) -> bool {
    matches!(
        e.prim.lowering(),
        Lowering::Matmul(_) | Lowering::Reduce { .. } | Lowering::ArgReduce { .. }
    )
}

/// One byte run of a [`copies`] step: `bytes` from `src` at `src_offset` to the output at
/// `dst_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub src: Var,
    pub src_offset: u64,
    pub dst_offset: u64,
    pub bytes: u64,
}

/// Most runs one [`copies`] step may schedule (each is one buffer copy command).
const MAX_RUNS: usize = 4096;

/// Whether `e` is a layout op [`copies`] may turn into buffer copies: its operands and result
/// are then stored.
pub(crate) fn copies_operands(e: &Eqn) -> bool {
    matches!(
        e.prim,
        Prim::Layout(LayoutOp::Slice { .. } | LayoutOp::Concatenate { .. })
    )
}

/// A slice (unit strides) or concatenation involving an array over one binding, as buffer-to-
/// buffer copies of contiguous runs (copies are bounded by the buffer size only): `None` when
/// every array fits a binding, or the op is not one of these, and for a strided slice or more
/// than 4096 runs (those run as a remap over windows, see [`remap`]).
pub(crate) fn copies(g: &Graph, e: &Eqn, limits: &DeviceLimits) -> Result<Option<Vec<Run>>> {
    if !copies_operands(e)
        || !std::iter::once(e.out)
            .chain(e.inputs.iter().copied())
            .any(|v| too_big(g, v, limits))
    {
        return Ok(None);
    }
    let elem = g.aval(e.out).dtype.size_bytes() as u64;
    let mut runs = Vec::new();
    match &e.prim {
        Prim::Layout(LayoutOp::Slice {
            start,
            limit,
            stride,
        }) => {
            if stride.iter().any(|&s| s != 1) {
                return Ok(None); // a remap over windows (see `remap`)
            }
            let shape = &g.aval(e.inputs[0]).shape;
            let rank = shape.len();
            // The last axis cut short: every axis after it is whole, so each index of the
            // axes before it (and of it) starts one contiguous run.
            let c = (0..rank)
                .rev()
                .find(|&a| start[a] != 0 || limit[a] != shape[a])
                .unwrap_or(0);
            let inner: usize = shape[c + 1..].iter().product();
            let run = ((limit[c] - start[c]) * inner) as u64 * elem;
            let outer: Vec<usize> = (0..c).map(|a| limit[a] - start[a]).collect();
            let count: usize = outer.iter().product();
            if count > MAX_RUNS {
                return Ok(None);
            }
            let strides = crate::host::strides(shape);
            for k in 0..count {
                // Unravel k over the leading axes, offset by the slice's start.
                let (mut rest, mut off) = (k, start[c] * strides[c]);
                for a in (0..c).rev() {
                    off += (start[a] + rest % outer[a]) * strides[a];
                    rest /= outer[a];
                }
                runs.push(Run {
                    src: e.inputs[0],
                    src_offset: off as u64 * elem,
                    dst_offset: k as u64 * run,
                    bytes: run,
                });
            }
        }
        Prim::Layout(LayoutOp::Concatenate { axis }) => {
            let out = &g.aval(e.out).shape;
            let outer: usize = out[..*axis].iter().product();
            if outer * e.inputs.len() > MAX_RUNS {
                return Ok(None);
            }
            let out_row = out[*axis..].iter().product::<usize>() as u64 * elem;
            for o in 0..outer {
                let mut at = o as u64 * out_row;
                for &v in &e.inputs {
                    let row = g.aval(v).shape[*axis..].iter().product::<usize>() as u64 * elem;
                    runs.push(Run {
                        src: v,
                        src_offset: o as u64 * row,
                        dst_offset: at,
                        bytes: row,
                    });
                    at += row;
                }
            }
        }
        _ => return Ok(None),
    }
    runs.retain(|r| r.bytes > 0);
    Ok(Some(runs))
}
