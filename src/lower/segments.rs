//! Arrays larger than one storage binding (`max_storage_buffer_binding_size`).
//!
//! Such an array lives in one buffer, or in several (*parts*) when it is larger than
//! `max_buffer_size` (see `Device::check_fits`), and is *bound* in segments: aligned sub-ranges
//! of at most [`segment_bytes`] each, every one but the last a multiple of the storage-offset
//! alignment. Segments and parts are powers of two, so a segment never straddles two parts; a
//! block's range that would is staged through a copy (`embed_block`), and copies cross parts. A kernel family that handles segments emits
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
//! [`Error::OverLimit`]: a bound on one op's work list, reached only under a binding limit below
//! WebGPU's 128 MiB minimum, since an array of at most 16 GiB (32-bit indexing) then has at most
//! 128 segments and a transpose of it 16 384 pairs). Matmuls whose operand or result has rows
//! too wide for 64 of them to fit one binding are first rewritten into smaller ones
//! ([`split_oversized`]): a sum over
//! chunks of the contraction (the gradient `x^T @ g` of a weight reads blocks of rows of `x`,
//! transposed in place), or blocks of rows or columns of the result, concatenated.
//!
//! Reductions and arg-reductions see their input as `[a, k, rest..]` (kept rows, the first
//! reduced axis, the rest): rows wider than 64 per binding are cut into blocks of fewer rows,
//! and a row over one binding into chunks of its reduced axis whose partial results (an
//! arg-reduction's: the chunk's extreme value and index) one program combines, keeping the
//! kernel's rules across chunks (first index on ties, NaN first). A block's range that starts
//! off the 256-byte alignment is staged through a copy to or from a slot of its own. Where even
//! that cannot fit (a slice of the reduced axis, the partials or the combined result over one
//! binding), [`split_oversized`] first cuts the input along a kept axis and concatenates the
//! pieces' results.
//!
//! Kernels of their own are cut along leading axes by their family's rule ([`KernelCut`]):
//! pooling and its gradients (`reduce_window`, `select_and_scatter_add`, `select_and_gather`) over
//! the leading axes their window does not span (batch, channels), convolutions and their input
//! gradient over the batch (the kernel bound whole), the kernel gradient over the batch it
//! contracts (per-block partials summed), `argsort` over the rows before its axis (the block's
//! merge-sort state within one binding too). Window kernels whose window spans the cut axis, and
//! NHWC convolutions whose batch entries are each over one binding, are cut along that axis into
//! chunks reading overlapping input rows ([`window_halo`], [`conv_halo`]; an input dilation
//! along that axis maps a chunk to the undilated rows it covers, [`Strip`]); the kernel
//! gradient of such a convolution sums partials over chunks of the cotangent's rows, each
//! reading the input rows they cover ([`summed_halo`]). A convolution of another layout
//! (channels first) whose one entry is over one binding first runs transposed to that one
//! ([`conv_layout`]); a sort along the leading axis, or along a middle axis whose one block of
//! leading rows is over one binding, first becomes one along the last axis of its keys
//! transposed ([`leading_sort`]). A sort row over one binding (1-D, or along the last axis) is
//! sorted in chunks of one binding that a network of merge-splits then merges
//! ([`merged_sort`]). A convolution kernel over one binding, and one window over one binding,
//! are refused.
//!
//! Batched matmuls whose 64 batch entries exceed one binding become one matmul per entry
//! ([`split_oversized`]). Refused ([`unsupported`]): the reduction, window, convolution and sort cases named above and in [`blocked`], and kernels of
//! the other families binding a large array.

use crate::device::DeviceLimits;
use crate::error::{Error, Result};
use crate::ops::matmul::kernel::MatmulChooser;
use crate::ops::{
    ArgOp, ConvParams, LayoutOp, Lowering, Prim, ReduceOp, ReductionOp, SortOp, Window, WindowKind,
    WindowPrim,
};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Eqn, Graph, Var};
use crate::wgsl::{self, KernelSrc, Segment};

use super::{Program, View};

/// The largest storage-offset alignment wgpu allows (`min_storage_buffer_offset_alignment` is at
/// most 256 on every adapter): segment starts are multiples of it, so they bind everywhere.
pub(crate) const ALIGN: u64 = 256;

/// Bytes of every segment but the last ([`DeviceLimits::segment_bytes`]: a power of two within
/// the binding limit, at least [`ALIGN`]).
pub(crate) fn segment_bytes(limits: &DeviceLimits) -> u64 {
    limits.segment_bytes()
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
    /// Per input of `program`, in order: the buffer and the range (`None`: the whole buffer; a
    /// range starting off [`ALIGN`] is staged through a copy, as is such an output range).
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
/// when all fit. Errors ([`unsupported`]) for the cases not cut yet: matmul rows too wide for
/// even 64 to fit, a reduction's slice or partials over the limit ([`reduction`]).
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
    let cx = Cx {
        g,
        limits,
        lower: &lower,
        refuse: &refuse,
    };
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
        Lowering::Reduce { .. } | Lowering::ArgReduce { .. } => reduction(&cx, e).map(Some),
        Lowering::Kernel(_) | Lowering::Passes(_) => match kernel_cut(e) {
            Some(Ok(KernelCut::Rows { lead, cut, scratch })) => {
                match (rows_of(&cx, e, (lead, &cut, scratch)), &e.prim) {
                    // Rows over one binding: a window kernel is cut along its window too.
                    (Err(_), Prim::Window(w)) => window_halo(&cx, e, w).map(Some),
                    (Err(_), Prim::Conv(p)) => conv_halo(&cx, e, p).map(Some),
                    // A sort row over one binding: the row over chunks.
                    (Err(_), Prim::Sort(_)) => merged_sort(&cx, e).map(Some),
                    (r, _) => r.map(Some),
                }
            }
            Some(Ok(KernelCut::Summed)) => summed(&cx, e).map(Some),
            Some(Ok(KernelCut::Merged)) => merged_sort(&cx, e).map(Some),
            Some(Ok(KernelCut::Halo)) => match &e.prim {
                Prim::Window(w) => window_halo(&cx, e, w).map(Some),
                _ => unreachable!("halos are cut for window kernels"),
            },
            Some(Err(why)) => Err(refuse(first_big, &why)),
            None => Ok(None),
        },
        Lowering::Elementwise
        | Lowering::Constant
        | Lowering::Remap { .. }
        | Lowering::Keyed
        | Lowering::Loop
        | Lowering::Inline
        | Lowering::StageBoundary
        | Lowering::HostOnly => Ok(None),
    }
}

/// What the block builders of one equation share: the graph, the limits, how a block's graph
/// is lowered, and the typed refusal naming an array and why.
#[derive(Clone, Copy)]
struct Cx<'a> {
    g: &'a Graph,
    limits: &'a DeviceLimits,
    lower: &'a dyn Fn(&Graph) -> Result<Program>,
    refuse: &'a dyn Fn(Var, &str) -> Error,
}

/// [`rows_per_block`], or else any number of rows that fits (blocks whose views start off the
/// storage-offset alignment are staged through copies when the program is assembled).
fn rows_staged(rows: usize, row_bytes: &[usize], limits: &DeviceLimits) -> Option<usize> {
    rows_per_block(rows, row_bytes, limits).or_else(|| {
        let widest = row_bytes.iter().copied().max().unwrap_or(1).max(1);
        let fit = limits.max_storage_buffer_binding_size as usize / widest;
        (fit > 0).then_some(fit.min(rows))
    })
}

/// A graph of one output traced from `f` over inputs of `ins`.
fn traced(ins: &[Aval], f: impl Fn(&[Tensor]) -> Tensor) -> Result<Graph> {
    crate::trace::trace_fn("segments", &|x: &[Tensor]| vec![f(x)], ins)
}

/// A reduction's input as `[a, k, rest..]`: `a` the kept axes before the first reduced one, `k`
/// the first reduced axis, `rest` the axes after it, adjacent axes merged where both are kept or
/// both reduced (so each `a` row and each `k` slice is contiguous); `red`: the reduced axes of
/// `[k, rest..]`.
struct Normal {
    a: usize,
    k: usize,
    rest: Vec<usize>,
    red: Vec<usize>,
}

fn normalize(shape: &[usize], reduced: &[usize]) -> Normal {
    let mut groups: Vec<(usize, bool)> = Vec::new();
    for (i, &d) in shape.iter().enumerate() {
        let r = reduced.contains(&i);
        match groups.last_mut() {
            Some((n, gr)) if *gr == r => *n *= d,
            _ => groups.push((d, r)),
        }
    }
    let p = groups.iter().position(|g| g.1).unwrap_or(groups.len());
    let a = groups[..p].iter().map(|g| g.0).product();
    let k = groups.get(p).map_or(1, |g| g.0);
    let rest: Vec<(usize, bool)> = groups.get(p + 1..).unwrap_or_default().to_vec();
    let mut red = vec![0];
    red.extend((0..rest.len()).filter(|&i| rest[i].1).map(|i| i + 1));
    Normal {
        a,
        k,
        rest: rest.iter().map(|g| g.0).collect(),
        red,
    }
}

/// Whether [`reduction`] can cut a reduction of `x` over `reduced` (giving elements of `oelem`
/// bytes): one row of kept axes per block, or chunks of the reduced axis whose partial results
/// and combined result each fit one binding (`arg`: an arg-reduction also keeps the partial
/// values). The condition [`split_reductions`] cuts kept axes until it holds.
fn reduction_fits(
    x: &Aval,
    reduced: &[usize],
    oelem: usize,
    arg: bool,
    limits: &DeviceLimits,
) -> bool {
    let lim = limits.max_storage_buffer_binding_size as usize;
    let n = normalize(&x.shape, reduced);
    let elem = x.dtype.size_bytes();
    let r: usize = n.rest.iter().product();
    let o = kept_rest(&n);
    if rows_staged(n.a, &[n.k * r * elem, o * oelem], limits).is_some() {
        return true;
    }
    if n.a * o * oelem > lim {
        return false;
    }
    let Some(kc) = rows_staged(n.k, &[r * elem], limits) else {
        return false;
    };
    let nb = n.a * n.k.div_ceil(kc);
    let stride = |el: usize| (o * el).max(4).next_multiple_of(ALIGN as usize);
    nb * stride(oelem) <= lim && (!arg || nb * stride(elem) <= lim)
}

/// Elements of the result per kept row of a [`Normal`] input: the kept axes of `rest`.
fn kept_rest(n: &Normal) -> usize {
    n.rest
        .iter()
        .enumerate()
        .filter(|(i, _)| !n.red.contains(&(i + 1)))
        .map(|(_, &d)| d)
        .product()
}

/// A reduction or arg-reduction over arrays larger than one binding, its input seen as
/// `[a, k, rest..]` ([`normalize`]). When one `a` row fits a binding, blocks of rows reduce into
/// the same rows of the result. Else each row's reduced axis is cut into chunks of `k`, every
/// chunk's partial result (an arg-reduction's: the chunk's extreme value and its index in the
/// row) goes to its own 256-byte aligned place of a temporary, and one program combines them:
/// the reduction again over the chunks, or for an arg-reduction the index of the chunk an
/// arg-reduction of the partial values picks (first chunk on ties, NaN first, as the kernel does
/// within a chunk). Errors ([`unsupported`]) when one slice of the reduced axis, the partial
/// results or a result combined from partials exceeds one binding.
fn reduction(cx: &Cx<'_>, e: &Eqn) -> Result<Blocked> {
    let (g, limits, lower, refuse) = (cx.g, cx.limits, cx.lower, cx.refuse);
    let (xv, x, out) = (e.inputs[0], g.aval(e.inputs[0]), g.aval(e.out));
    let (n, arg) = match e.prim.lowering() {
        Lowering::Reduce { axes, .. } => (normalize(&x.shape, axes), None),
        Lowering::ArgReduce { op, axis } => (normalize(&x.shape, &[axis]), Some(op)),
        _ => unreachable!("reductions only"),
    };
    let apply = |t: &Tensor, axes: Vec<usize>| match &e.prim {
        Prim::Reduction(ReductionOp::Reduce { op, .. }) => {
            Tensor::apply(Prim::Reduction(ReductionOp::Reduce { op: *op, axes }), &[t])
        }
        Prim::Reduction(ReductionOp::ArgReduce { op, .. }) => Tensor::apply(
            Prim::Reduction(ReductionOp::ArgReduce {
                op: *op,
                axis: axes[0],
            }),
            &[t],
        ),
        _ => unreachable!("reductions only"),
    };
    let dims = |lead: &[usize]| -> Vec<i64> {
        lead.iter()
            .chain(&n.rest)
            .map(|&d| d as i64)
            .collect::<Vec<_>>()
    };
    let (elem, oelem) = (x.dtype.size_bytes(), out.dtype.size_bytes());
    let r: usize = n.rest.iter().product();
    let o = out.size() / n.a.max(1);
    let flat = |a: &Aval, len: usize| Aval::new(vec![len], a.dtype);
    let mut blocks = Vec::new();
    // Whole rows of `a`: each block reduces its rows into the same rows of the result.
    if let Some(rows) = rows_staged(n.a, &[n.k * r * elem, o * oelem], limits) {
        let row = n.k * r * elem;
        for a0 in (0..n.a).step_by(rows) {
            let len = rows.min(n.a - a0);
            let red: Vec<usize> = n.red.iter().map(|&i| i + 1).collect();
            let sub = traced(&[flat(x, len * n.k * r)], |t| {
                apply(&t[0].reshape(&dims(&[len, n.k])), red.clone()).reshape(&[-1])
            })?;
            blocks.push(Block {
                program: lower(&sub)?,
                ins: vec![(Place::Var(xv), rows_view(a0, len, row))],
                out: (Place::Var(e.out), rows_view(a0, len, o * oelem)),
            });
        }
        return Ok(Blocked {
            temps: Vec::new(),
            blocks,
        });
    }
    if too_big(g, e.out, limits) {
        return Err(refuse(
            e.out,
            "a result combined from partials over one binding",
        ));
    }
    let Some(kc) = rows_staged(n.k, &[r * elem], limits) else {
        return Err(refuse(
            xv,
            "one slice of the reduced axis exceeds one binding",
        ));
    };
    let nc = n.k.div_ceil(kc);
    let nb = n.a * nc;
    // Partial values (and an arg-reduction's indices, i32) at 256-byte strides.
    let stride = |el: usize| (o * el).max(4).next_multiple_of(ALIGN as usize);
    let pdt = out.dtype;
    let vdt = x.dtype;
    let temps: Vec<u64> = match arg {
        None => vec![(nb * stride(oelem)) as u64],
        Some(_) => vec![(nb * stride(elem)) as u64, (nb * stride(oelem)) as u64],
    };
    if temps
        .iter()
        .any(|&t| t > limits.max_storage_buffer_binding_size)
    {
        return Err(refuse(
            xv,
            &format!("{nb} partial results exceed one binding"),
        ));
    }
    let part = |t: usize, i: usize, el: usize| {
        (
            Place::Temp(t),
            Some(View {
                offset: (i * stride(el)) as u64,
                size: (o * el).max(4) as u64,
            }),
        )
    };
    for a in 0..n.a {
        for (c, k0) in (0..n.k).step_by(kc).enumerate() {
            let len = kc.min(n.k - k0);
            let i = a * nc + c;
            let input = (Place::Var(xv), rows_view(a * n.k + k0, len, r * elem));
            let chunk = [flat(x, len * r)];
            let program = |f: &dyn Fn(&Tensor) -> Tensor| -> Result<Program> {
                lower(&traced(&chunk, |t| {
                    f(&t[0].reshape(&dims(&[len]))).reshape(&[-1])
                })?)
            };
            match arg {
                None => blocks.push(Block {
                    program: program(&|t| apply(t, n.red.clone()))?,
                    ins: vec![input],
                    out: part(0, i, oelem),
                }),
                Some(op) => {
                    // The chunk's extreme value: max for argmax, min for argmin (both NaN first).
                    let vop = match op {
                        ArgOp::ArgMax => ReduceOp::Max,
                        ArgOp::ArgMin => ReduceOp::Min,
                    };
                    let value = |t: &Tensor| {
                        Tensor::apply(
                            Prim::Reduction(ReductionOp::Reduce {
                                op: vop,
                                axes: vec![0],
                            }),
                            &[t],
                        )
                    };
                    blocks.push(Block {
                        program: program(&value)?,
                        ins: vec![input],
                        out: part(0, i, elem),
                    });
                    let index = |t: &Tensor| {
                        let j = apply(t, vec![0]);
                        if k0 == 0 { j } else { j + k0 as i32 }
                    };
                    blocks.push(Block {
                        program: program(&index)?,
                        ins: vec![input],
                        out: part(1, i, oelem),
                    });
                }
            }
        }
    }
    // Combine: the partials out of their strides as [a, chunks, o], reduced over the chunks.
    let shape: Vec<i64> = out.shape.iter().map(|&d| d as i64).collect();
    let comb = match arg {
        None => traced(&[Aval::new(vec![nb, stride(oelem) / oelem], pdt)], |t| {
            let p = t[0]
                .slice(&[0, 0], &[nb, o], None)
                .reshape(&[n.a as i64, nc as i64, o as i64]);
            apply(&p, vec![1]).reshape(&shape)
        })?,
        Some(_) => traced(
            &[
                Aval::new(vec![nb, stride(elem) / elem], vdt),
                Aval::new(vec![nb, stride(oelem) / oelem], pdt),
            ],
            |t| {
                let p = |t: &Tensor| {
                    t.slice(&[0, 0], &[nb, o], None)
                        .reshape(&[n.a as i64, nc as i64, o as i64])
                };
                let (v, idx) = (p(&t[0]), p(&t[1]));
                // The chunk holding the pick, as a one-hot mask over the chunks.
                let j = apply(&v, vec![1]).broadcast_in_dim(&[n.a, nc, o], &[0, 2]);
                let hot = Tensor::iota(pdt, &[n.a, nc, o], 1).eq(&j).cast(pdt);
                (&idx * &hot).sum(1i64, false).reshape(&shape)
            },
        )?,
    };
    let ins = (0..temps.len()).map(|t| (Place::Temp(t), None)).collect();
    blocks.push(Block {
        program: lower(&comb)?,
        ins,
        out: (Place::Var(e.out), None),
    });
    Ok(Blocked { temps, blocks })
}

/// A program of one kernel, `src`, binding inputs of `ins` bytes and an output of `out` bytes
/// (a block whose views the parent gives).
fn kernel_program(src: KernelSrc, ins: &[u64], out: u64) -> Program {
    let k = ins.len();
    Program {
        launches: vec![super::Launch {
            label: src.label,
            wgsl: src.wgsl,
            workgroups: src.workgroups,
            slots: (0..=k).collect(),
            views: Vec::new(),
        }],
        schedule: vec![super::Op::Launch(0)],
        slot_bytes: ins.iter().copied().chain([out]).collect(),
        input_slots: (0..k).collect(),
        const_slots: Vec::new(),
        output_slots: vec![k],
        output_avals: vec![Aval::new(
            vec![(out / 4) as usize],
            crate::dtype::DType::U32,
        )],
        donated: Vec::new(),
    }
}

/// A program copying its one input of `bytes` to its output (no kernel).
fn copy_program(bytes: u64) -> Program {
    Program {
        launches: Vec::new(),
        schedule: vec![super::copy_op((0, 0), (1, 0), bytes)],
        slot_bytes: vec![bytes, bytes],
        input_slots: vec![0],
        const_slots: Vec::new(),
        output_slots: vec![1],
        output_avals: vec![Aval::new(
            vec![(bytes / 4) as usize],
            crate::dtype::DType::U32,
        )],
        donated: Vec::new(),
    }
}

/// The comparators of a sorting network over `m` wires (a power of two), stage by stage, each
/// `(i, j)` with `i < j` sending the smaller elements to `i`: Batcher's bitonic sort in the form
/// whose comparators all point one way (each merge's first stage compares mirrored wires), so
/// that every wire is in one comparator per stage.
fn bitonic_stages(m: usize) -> Vec<Vec<(usize, usize)>> {
    let mut stages = Vec::new();
    let mut size = 2;
    while size <= m {
        stages.push(
            (0..m)
                .filter(|i| i % size < size / 2)
                .map(|i| (i, i - i % size + size - 1 - i % size))
                .collect(),
        );
        let mut h = size / 4;
        while h >= 1 {
            stages.push((0..m).filter(|i| i & h == 0).map(|i| (i, i + h)).collect());
            h /= 2;
        }
        size *= 2;
    }
    stages
}

/// An argsort along the last axis whose one row (its keys or indices) is over one binding, and
/// so cannot be cut into blocks of rows: each row over chunks of `c` elements (a power of two,
/// `c` elements of sort state in one binding; the tail padded with elements that sort last).
/// Each chunk's state is written and sorted alone by the row kernel's own passes, then the
/// chunks are merged by a sorting network whose comparator is a merge-split of two sorted
/// chunks (the lower `c` elements of the pair to the lower chunk, the upper to the other), and
/// the indices written. Any sorting network sorts sequences of sorted blocks when its
/// comparators are merge-splits; a bitonic network is chosen because every chunk is in at most
/// one comparator per stage, so each comparator reads one temporary and writes the other (a
/// merge path would need the split points of runs spanning several bindings, found by searches
/// across them). The network is over the next power of two of chunks; the comparators with a
/// chunk past the row's are no-ops and are left out (their other chunk is copied across), so the
/// state holds the row's chunks only. A comparator binds 2 chunks read and 1 written,
/// per half. The state (encoded keys, then the index along the row) is the row kernel's, every
/// element distinct: order, stability and NaN placement are the row kernel's exactly.
/// Errors ([`unsupported`]) for a sort along another axis and a limit below 64 elements of state.
fn merged_sort(cx: &Cx<'_>, e: &Eqn) -> Result<Blocked> {
    let (g, limits, refuse) = (cx.g, cx.limits, cx.refuse);
    let Prim::Sort(SortOp::Argsort {
        axis,
        descending,
        order,
    }) = &e.prim
    else {
        unreachable!("merged sorts are argsorts")
    };
    let y = g.aval(e.out);
    if axis + 1 != y.shape.len() {
        return Err(refuse(
            e.out,
            "one sort row over one binding along an axis other than the first or last",
        ));
    }
    let dts: Vec<crate::dtype::DType> = e.inputs.iter().map(|&v| g.aval(v).dtype).collect();
    let sorter = crate::ops::sort::ChunkSort {
        dts: &dts,
        order: *order,
        descending: *descending,
        c: 1,
        max_wg: limits.max_compute_workgroups_per_dimension,
    };
    let words = sorter.words();
    let per = segment_bytes(limits) as usize / (4 * words);
    let c = 1usize << per.max(1).ilog2();
    if c < 64 {
        return Err(refuse(
            e.out,
            &format!(
                "64 elements of its sort state ({words} 4-byte words each) exceed one binding"
            ),
        ));
    }
    let sorter = crate::ops::sort::ChunkSort { c, ..sorter };
    let n = y.shape[*axis];
    let rows = y.size() / n.max(1);
    let (m, chunk) = (n.div_ceil(c), c * words * 4);
    // A state over `max_buffer_size` is stored in parts: chunks whose bytes are a power of
    // two never straddle two; others are staged through a copy (`embed_block`).
    let temp = (m * chunk) as u64;
    let state = |t: usize, ch: usize| {
        (
            Place::Temp(t),
            Some(View {
                offset: (ch * chunk) as u64,
                size: chunk as u64,
            }),
        )
    };
    let chunk_bytes = chunk as u64;
    let passes = c.ilog2() as usize;
    let mut blocks = Vec::new();
    for r in 0..rows {
        for ch in 0..m {
            let count = (n - ch * c).min(c);
            let at = |b: usize| {
                Some(View {
                    offset: ((r * n + ch * c) * b) as u64,
                    size: (count * b) as u64,
                })
            };
            let ins: Vec<(Place, Option<View>)> = e
                .inputs
                .iter()
                .map(|&v| (Place::Var(v), at(g.aval(v).dtype.size_bytes())))
                .collect();
            let sizes: Vec<u64> = ins.iter().map(|(_, v)| v.expect("a view").size).collect();
            blocks.push(Block {
                program: kernel_program(sorter.init(count, ch * c)?, &sizes, chunk_bytes),
                ins,
                out: state(0, ch),
            });
        }
        for p in 0..passes {
            for ch in 0..m {
                blocks.push(Block {
                    program: kernel_program(sorter.merge(1 << p), &[chunk_bytes], chunk_bytes),
                    ins: vec![state(p % 2, ch)],
                    out: state(1 - p % 2, ch),
                });
            }
        }
        // The network runs over a power of two of chunks, those past `m` standing for chunks
        // of elements that sort last. Every comparator puts the lower half in its lower chunk,
        // so one with such a chunk leaves both as they are: it is left out, and those chunks
        // need no memory. A chunk left out of a stage is copied to the other temporary (one
        // dispatch must not bind a temporary both read and written); a stage with no real
        // comparator is left out whole.
        let mut cur = passes % 2;
        for stage in bitonic_stages(m.next_power_of_two()) {
            if stage.iter().all(|&(_, j)| j >= m) {
                continue;
            }
            for (i, j) in stage.into_iter().filter(|&(i, _)| i < m) {
                if j >= m {
                    blocks.push(Block {
                        program: copy_program(chunk_bytes),
                        ins: vec![state(cur, i)],
                        out: state(1 - cur, i),
                    });
                    continue;
                }
                for (upper, to) in [(false, i), (true, j)] {
                    blocks.push(Block {
                        program: kernel_program(
                            sorter.merge_split(upper),
                            &[chunk_bytes, chunk_bytes],
                            chunk_bytes,
                        ),
                        ins: vec![state(cur, i), state(cur, j)],
                        out: state(1 - cur, to),
                    });
                }
            }
            cur = 1 - cur;
        }
        for ch in 0..m {
            let count = (n - ch * c).min(c);
            blocks.push(Block {
                program: kernel_program(sorter.indices(count), &[chunk_bytes], (count * 4) as u64),
                ins: vec![state(cur, ch)],
                out: (
                    Place::Var(e.out),
                    Some(View {
                        offset: ((r * n + ch * c) * 4) as u64,
                        size: (count * 4) as u64,
                    }),
                ),
            });
        }
    }
    Ok(Blocked {
        temps: vec![temp, temp],
        blocks,
    })
}

/// How a kernel of its own (window, convolution, sort) is cut along its arrays' leading axes
/// when one is over one binding: the family's rule.
enum KernelCut {
    /// The first `lead` axes of the inputs marked in `cut` and of the result are independent:
    /// blocks of rows (over those axes merged), the other inputs bound whole; the block's
    /// kernels also bind `scratch` bytes of temporaries per element of its result.
    Rows {
        lead: usize,
        cut: Vec<bool>,
        scratch: usize,
    },
    /// The first axis of every input is contracted: each block of it gives a partial of the
    /// whole result, the partials summed.
    Summed,
    /// A window kernel whose window spans the leading axis: [`window_halo`].
    Halo,
    /// A sort of a 1-D array: its one row over chunks ([`merged_sort`]).
    Merged,
}

/// The [`KernelCut`] of equation `e`, `Err(why)` when its family cannot be cut (`None`: not a
/// family cut this way).
fn kernel_cut(e: &Eqn) -> Option<std::result::Result<KernelCut, String>> {
    let rows = |lead: usize, cut: Vec<bool>, scratch: usize| {
        Some(Ok(KernelCut::Rows { lead, cut, scratch }))
    };
    match &e.prim {
        Prim::Window(w) => match w.window.unit_lead() {
            0 => Some(Ok(KernelCut::Halo)),
            lead => rows(lead, vec![true; e.inputs.len()], 0),
        },
        Prim::Conv(c) if c.batch_leads() => rows(1, vec![true, false], 0),
        Prim::Conv(c) if c.contracts_lead() => Some(Ok(KernelCut::Summed)),
        Prim::Conv(_) => Some(Err(
            "neither the batch nor the contracted features lead the operands".into(),
        )),
        // (A leading-axis sort of rank 2 or more was moved to the last axis by `leading_sort`.)
        Prim::Sort(SortOp::Argsort { axis: 0, .. }) => Some(Ok(KernelCut::Merged)),
        Prim::Sort(SortOp::Argsort { axis, .. }) => rows(
            *axis,
            vec![true; e.inputs.len()],
            SortOp::state_bytes(e.inputs.len()),
        ),
        _ => None,
    }
}

/// The shape of `rows` rows of `a` cut along its `lead` leading axes merged: `[1.., rows, rest]`
/// (the axes stay, so the primitive's parameters apply unchanged).
fn lead_rows(a: &Aval, lead: usize, rows: usize) -> Aval {
    let mut a = a.clone();
    for d in &mut a.shape[..lead] {
        *d = 1;
    }
    a.shape[lead - 1] = rows;
    a
}

/// Blocks of rows of a kernel of its own ([`KernelCut::Rows`]).
fn rows_of(cx: &Cx<'_>, e: &Eqn, (lead, cut, scratch): (usize, &[bool], usize)) -> Result<Blocked> {
    let (g, limits, lower, refuse) = (cx.g, cx.limits, cx.lower, cx.refuse);
    if let Some(&v) = (e.inputs.iter().zip(cut))
        .find(|&(&v, &c)| !c && too_big(g, v, limits))
        .map(|(v, _)| v)
    {
        return Err(refuse(v, "an operand bound whole by every block"));
    }
    let out = g.aval(e.out);
    let rows: usize = out.shape[..lead].iter().product();
    let row = |a: &Aval| a.size_bytes() / rows.max(1);
    let cuts: Vec<Var> = (e.inputs.iter().zip(cut))
        .filter(|&(_, &c)| c)
        .map(|(&v, _)| v)
        .chain([e.out])
        .collect();
    let mut widths: Vec<usize> = cuts.iter().map(|&v| row(g.aval(v))).collect();
    widths.push(out.size() / rows.max(1) * scratch);
    let Some(r) = rows_staged(rows, &widths, limits) else {
        let (v, w) = (cuts.iter().zip(&widths))
            .max_by_key(|(_, w)| **w)
            .expect("the result is cut");
        let w = w.max(&widths[cuts.len()]);
        return Err(refuse(
            *v,
            &format!(
                "one row of its leading {lead} axes needs {w} bytes in one binding \
                 (its data, or its kernels' temporaries)"
            ),
        ));
    };
    let mut blocks = Vec::new();
    for r0 in (0..rows).step_by(r) {
        let len = r.min(rows - r0);
        let ins: Vec<Aval> = (e.inputs.iter().zip(cut))
            .map(|(&v, &c)| {
                let a = g.aval(v);
                if c {
                    lead_rows(a, lead, len)
                } else {
                    a.clone()
                }
            })
            .collect();
        let sub = one_eqn(e.prim.clone(), &ins, lead_rows(out, lead, len));
        blocks.push(Block {
            program: lower(&sub)?,
            ins: (e.inputs.iter().zip(cut))
                .map(|(&v, &c)| {
                    let view = c.then(|| rows_view(r0, len, row(g.aval(v)))).flatten();
                    (Place::Var(v), view)
                })
                .collect(),
            out: (Place::Var(e.out), rows_view(r0, len, row(out))),
        });
    }
    Ok(Blocked {
        temps: Vec::new(),
        blocks,
    })
}

/// Windows along one axis of `n` input rows dilated by `ld` (`ld - 1` holes between
/// neighbours, so row `i` sits at position `i * ld`): stride `s`, low padding `lo` (negative:
/// cropped), each spanning `span` positions (dilation included).
#[derive(Clone, Copy)]
struct Strip {
    n: usize,
    s: i64,
    lo: i64,
    span: i64,
    ld: i64,
}

impl Strip {
    /// The input rows windows `o0..o1` cover, clipped to the input (`i0`, length), and the
    /// padding of that range's own edges (in dilated positions), which puts its windows where
    /// the whole kernel's are; `None` when they lie wholly in the padding or the holes.
    ///
    /// The windows cover positions `start..end`; the rows there are the multiples of `ld`
    /// within the input's `0..=(n - 1) * ld`. The range's first row `i0` sits `i0 * ld - start`
    /// positions after `start` (its low padding), and the last one, dilated with the rows before
    /// it, leaves the rest of `end - start` as high padding. Both are at least 0.
    fn covered(&self, o0: i64, o1: i64) -> Option<(usize, usize, (i64, i64))> {
        let ld = self.ld;
        let (start, end) = (
            o0 * self.s - self.lo,
            (o1 - 1) * self.s - self.lo + self.span,
        );
        let (p0, p1) = (start.max(0), (end - 1).min((self.n as i64 - 1) * ld));
        if p1 < p0 {
            return None;
        }
        let (i0, i1) = ((p0 + ld - 1) / ld, p1 / ld);
        if i1 < i0 {
            return None;
        }
        let len = i1 - i0 + 1;
        let pad_lo = i0 * ld - start;
        Some((
            i0 as usize,
            len as usize,
            (pad_lo, end - start - pad_lo - ((len - 1) * ld + 1)),
        ))
    }

    /// Windows per chunk when `fit` input rows and `out_fit` result rows fit one binding: `c`
    /// windows cover `(c - 1) * s + span` positions, so at most `fit` rows when that is within
    /// `fit * ld`.
    fn per_chunk(&self, fit: usize, out_fit: usize) -> i64 {
        let fit = fit as i64 * self.ld;
        if fit < self.span {
            return 0;
        }
        ((fit - self.span) / self.s + 1).min(out_fit as i64)
    }
}

/// `v` as one leading row (the axes before `a` of size 1) of `rows` rows along axis `a`.
fn strip_rows(v: &Aval, a: usize, rows: usize) -> Aval {
    let mut v = v.clone();
    v.shape[..a].iter_mut().for_each(|d| *d = 1);
    v.shape[a] = rows;
    v
}

/// A window kernel over an axis its window spans, `a`, the first that is not a unit of the
/// window, when the rows of the axes before it do not fit one binding: blocks of one leading row
/// and a chunk along `a`, each reading the input rows its windows cover (overlapping its
/// neighbours' by the window's span) with the padding of its own edges, so that each block's
/// windows are the whole kernel's. `reduce_window` and `select_and_gather` (one result per
/// window) are cut into chunks of windows; `select_and_scatter_add` (one result per input
/// element) into chunks of result rows, each computed from every window overlapping it and
/// sliced out (rows no window of the chunk covers get nothing, as in the whole kernel). An
/// input dilation along `a` (`base_dilation`, as in an average pool's gradient) is the
/// [`Strip`]'s: a chunk's windows map to the undilated rows they cover. Errors
/// ([`unsupported`]) for a window over one binding and a chunk no window covers.
fn window_halo(cx: &Cx<'_>, e: &Eqn, w: &WindowPrim) -> Result<Blocked> {
    let (g, limits, lower, refuse) = (cx.g, cx.limits, cx.lower, cx.refuse);
    let win = &w.window;
    let a = win.unit_lead();
    let scatter = w.kind == WindowKind::SelectAndScatterAdd;
    let xv = *e.inputs.last().expect("window kernels have operands");
    // One row along `a` per window: the source of a scatter, else the result.
    let wv = if scatter { e.inputs[0] } else { e.out };
    let (x, out, wa) = (g.aval(xv), g.aval(e.out), g.aval(wv));
    let (n, m) = (x.shape[a], wa.shape[a]);
    let lead: usize = x.shape[..a].iter().product();
    let inner = |v: &Aval| v.shape[a + 1..].iter().product::<usize>() * v.dtype.size_bytes();
    let (rin, rout, rw) = (inner(x), inner(out), inner(wa));
    let strip = Strip {
        n,
        s: win.strides[a] as i64,
        lo: win.padding[a].0 as i64,
        span: ((win.dims[a] - 1) * win.window_dilation[a] + 1) as i64,
        ld: win.base_dilation[a] as i64,
    };
    let (s, lo, span, ld) = (strip.s, strip.lo, strip.span, strip.ld);
    let max = limits.max_storage_buffer_binding_size as usize;
    let fit = (max / rin.max(1)) as i64;
    // Chunk length: windows, or result rows of a scatter. The windows overlapping `c` result
    // rows start within `(c - 1) * ld + span - 1` positions of each other, so there are at most
    // `wfit` of them when that is below `wfit * s`; the input rows they cover are the chunk's
    // and at most `(span - 1) / ld` more on either side.
    let c = if scatter {
        let wfit = (max / rw.max(1)) as i64;
        (fit - 2 * ((span - 1) / ld))
            .min((max / rout.max(1)) as i64)
            .min((wfit * s - span).div_euclid(ld) + 1)
    } else {
        strip.per_chunk(fit as usize, max / rout.max(1))
    };
    if c <= 0 {
        return Err(refuse(
            xv,
            &format!(
                "one window along axis {a} needs {} bytes of one binding",
                span as usize * rin
            ),
        ));
    }
    let shaped = |v: &Aval, rows: usize| strip_rows(v, a, rows);
    // The input rows windows `o0..o1` cover and the window with their edges' padding.
    let covered = |o0: i64, o1: i64| {
        strip.covered(o0, o1).map(|(i0, len, (plo, phi))| {
            let mut wb = win.clone();
            wb.padding[a] = (plo as usize, phi as usize);
            (i0, len, wb)
        })
    };
    let prim = |wb: Window| {
        Prim::Window(WindowPrim {
            window: wb,
            ..w.clone()
        })
    };
    let none_covers = || {
        refuse(
            xv,
            "a chunk along the axis its window spans that no window covers",
        )
    };
    let mut blocks = Vec::new();
    let total = if scatter { n } else { m } as i64;
    for l in 0..lead {
        for c0 in (0..total).step_by(c as usize) {
            let c1 = (c0 + c).min(total);
            if !scatter {
                let (i0, len, wb) = covered(c0, c1).ok_or_else(none_covers)?;
                let ins: Vec<Aval> = e.inputs.iter().map(|&v| shaped(g.aval(v), len)).collect();
                let sub = one_eqn(prim(wb), &ins, shaped(out, (c1 - c0) as usize));
                blocks.push(Block {
                    program: lower(&sub)?,
                    ins: e
                        .inputs
                        .iter()
                        .map(|&v| (Place::Var(v), rows_view(l * n + i0, len, rin)))
                        .collect(),
                    out: (
                        Place::Var(e.out),
                        rows_view(l * m + c0 as usize, (c1 - c0) as usize, rout),
                    ),
                });
                continue;
            }
            // The windows overlapping result rows c0..c1 (row `r` sits at padded position
            // `r * ld + lo`, window `o` covers `o * s..o * s + span`), the rows they cover, and
            // the chunk's rows sliced out of their scatter (padded where no window reaches).
            let o0 = ((c0 * ld + lo - span).div_euclid(s) + 1).max(0);
            let o1 = (((c1 - 1) * ld + lo).div_euclid(s) + 1).min(m as i64);
            if o1 <= o0 {
                return Err(none_covers());
            }
            let (i0, len, wb) = covered(o0, o1).ok_or_else(none_covers)?;
            let (k0, k1) = (
                (c0 as usize).max(i0),
                (c1 as usize).min(i0 + len).max((c0 as usize).max(i0)),
            );
            let (before, after) = (k0 - c0 as usize, c1 as usize - k1);
            let rank = out.rank();
            let edge = |k: usize| {
                let mut v = vec![0; rank];
                v[a] = k;
                v
            };
            let zero = crate::dtype::Scalar::F32(0.0).cast(out.dtype);
            let ins = [shaped(wa, (o1 - o0) as usize), shaped(x, len)];
            let sub = traced(&ins, |t| {
                Tensor::apply(prim(wb.clone()), &[&t[0], &t[1]])
                    .slice_axis(a as i64, k0 - i0, k1 - i0)
                    .pad(&edge(before), &edge(after), zero)
            })?;
            blocks.push(Block {
                program: lower(&sub)?,
                ins: vec![
                    (
                        Place::Var(wv),
                        rows_view(l * m + o0 as usize, (o1 - o0) as usize, rw),
                    ),
                    (Place::Var(xv), rows_view(l * n + i0, len, rin)),
                ],
                out: (
                    Place::Var(e.out),
                    rows_view(l * n + c0 as usize, (c1 - c0) as usize, rout),
                ),
            });
        }
    }
    Ok(Blocked {
        temps: Vec::new(),
        blocks,
    })
}

/// A convolution whose batch entries are each over one binding, its first spatial axis right
/// after the batch in the input and the result (NHWC): blocks of one batch entry and a chunk of
/// result rows along that axis, each reading the input rows its windows cover with the padding
/// of its own edges ([`Strip`], an input dilation along that axis included), the kernel bound
/// whole. Other layouts were moved to this one by [`conv_layout`]. Errors ([`unsupported`]) for
/// another layout, a kernel over one binding or a window over one binding.
fn conv_halo(cx: &Cx<'_>, e: &Eqn, p: &ConvParams) -> Result<Blocked> {
    let (g, limits, lower, refuse) = (cx.g, cx.limits, cx.lower, cx.refuse);
    let (xv, kv) = (e.inputs[0], e.inputs[1]);
    if !p.spatial_follows_batch() {
        return Err(refuse(
            xv,
            "one batch entry exceeds one binding, and the first spatial axis does not follow \
             the batch",
        ));
    }
    if too_big(g, kv, limits) {
        return Err(refuse(kv, "a kernel bound whole by every block"));
    }
    let (x, k, out) = (g.aval(xv), g.aval(kv), g.aval(e.out));
    let (n, m) = (x.shape[1], out.shape[1]);
    let inner = |v: &Aval| v.shape[2..].iter().product::<usize>() * v.dtype.size_bytes();
    let (rin, rout) = (inner(x), inner(out));
    let strip = Strip {
        n,
        s: p.window_strides[0] as i64,
        lo: p.padding[0].0,
        span: ((k.shape[p.dims.rhs[2]] - 1) * p.rhs_dilation[0] + 1) as i64,
        ld: p.lhs_dilation[0] as i64,
    };
    let max = limits.max_storage_buffer_binding_size as usize;
    let c = strip.per_chunk(max / rin.max(1), max / rout.max(1));
    if c <= 0 {
        return Err(refuse(
            xv,
            &format!(
                "one window along its first spatial axis needs {} bytes of one binding",
                strip.span as usize * rin
            ),
        ));
    }
    let mut blocks = Vec::new();
    for b in 0..x.shape[0] {
        for o0 in (0..m as i64).step_by(c as usize) {
            let o1 = (o0 + c).min(m as i64);
            let Some((i0, len, pads)) = strip.covered(o0, o1) else {
                return Err(refuse(xv, "a chunk of windows lies wholly in the padding"));
            };
            let mut q = p.clone();
            q.padding[0] = pads;
            let rows = (o1 - o0) as usize;
            let sub = one_eqn(
                Prim::Conv(q),
                &[strip_rows(x, 1, len), k.clone()],
                strip_rows(out, 1, rows),
            );
            blocks.push(Block {
                program: lower(&sub)?,
                ins: vec![
                    (Place::Var(xv), rows_view(b * n + i0, len, rin)),
                    (Place::Var(kv), None),
                ],
                out: (
                    Place::Var(e.out),
                    rows_view(b * m + o0 as usize, rows, rout),
                ),
            });
        }
    }
    Ok(Blocked {
        temps: Vec::new(),
        blocks,
    })
}

/// The running sum of `n` blocks' partial results: block `j` computes its partial and adds the
/// sum of the blocks before it, the sums alternating between `temp` and `result` so that no
/// dispatch reads and writes one buffer and the last lands in `result`.
struct RunningSum {
    n: usize,
    result: (Place, Option<View>),
    temp: (Place, Option<View>),
}

impl RunningSum {
    /// Where block `j`'s sum goes: the result when an even number of blocks follow it.
    fn dest(&self, j: usize) -> (Place, Option<View>) {
        if (self.n - 1 - j).is_multiple_of(2) {
            self.result
        } else {
            self.temp
        }
    }

    /// Makes block `j`'s program `sub` (whose one output is its partial) add the sum of the
    /// blocks before it, read from where that went (pushed onto `ins`), and returns where block
    /// `j` writes.
    fn add_previous(
        &self,
        j: usize,
        sub: &mut Graph,
        ins: &mut Vec<(Place, Option<View>)>,
    ) -> (Place, Option<View>) {
        if j > 0 {
            let part = sub.outputs[0];
            let a = sub.aval(part).clone();
            let prev = sub.new_var(a.clone());
            let o = sub.new_var(a);
            sub.inputs.push(prev);
            let add =
                Prim::Elementwise(crate::ops::ElementwiseOp::Binary(crate::ops::BinaryOp::Add));
            sub.eqns.push(Eqn::new(add, vec![prev, part], o));
            sub.outputs = vec![o];
            ins.push(self.dest(j - 1));
        }
        self.dest(j)
    }
}

/// Blocks of the contracted leading axis of every input ([`Split::Summed`]), their partials
/// added up ([`RunningSum`]).
fn summed(cx: &Cx<'_>, e: &Eqn) -> Result<Blocked> {
    let (g, limits, lower, refuse) = (cx.g, cx.limits, cx.lower, cx.refuse);
    let out = g.aval(e.out);
    if too_big(g, e.out, limits) {
        return Err(refuse(
            e.out,
            "a result summed over blocks, over one binding",
        ));
    }
    let rows = g.aval(e.inputs[0]).shape[0];
    let widths: Vec<usize> = e.inputs.iter().map(|&v| row_bytes(g.aval(v))).collect();
    let Some(r) = rows_staged(rows, &widths, limits) else {
        return match &e.prim {
            Prim::Conv(p) => summed_halo(cx, e, p),
            _ => Err(refuse(
                e.inputs[0],
                "one entry of the contracted leading axis exceeds one binding",
            )),
        };
    };
    let sum = RunningSum {
        n: rows.div_ceil(r),
        result: (Place::Var(e.out), None),
        temp: (Place::Temp(0), None),
    };
    let mut blocks = Vec::new();
    for (j, r0) in (0..rows).step_by(r).enumerate() {
        let len = r.min(rows - r0);
        let ins: Vec<Aval> = e
            .inputs
            .iter()
            .map(|&v| with_rows(g.aval(v), len))
            .collect();
        let mut sub = one_eqn(e.prim.clone(), &ins, out.clone());
        let mut views: Vec<(Place, Option<View>)> = e
            .inputs
            .iter()
            .zip(&widths)
            .map(|(&v, &w)| (Place::Var(v), rows_view(r0, len, w)))
            .collect();
        let dest = sum.add_previous(j, &mut sub, &mut views);
        blocks.push(Block {
            program: lower(&sub)?,
            ins: views,
            out: dest,
        });
    }
    Ok(Blocked {
        temps: vec![out.size_bytes() as u64],
        blocks,
    })
}

/// A convolution's kernel gradient ([`ConvParams::contracts_lead`]: the input `x` and the
/// cotangent `ct` both lead with the batch it contracts) whose one batch entry is over one
/// binding, the first spatial axis following the batch in both
/// ([`ConvParams::spatial_follows_contracted`]; other layouts were moved to this one by
/// [`conv_layout`]).
///
/// Along that axis the gradient's "window" is `ct` (its rows dilated by the forward stride,
/// `rhs_dilation` here) and its result positions are the kernel's rows (stride: the forward
/// kernel dilation): kernel row `h` sums `x[j * s + h * d - lo] * ct[j]` over the rows `j` of
/// `ct`. So a chunk of rows `j0..j1` of `ct` reads the rows of `x` that a [`Strip`] whose
/// "windows" are those rows covers (stride `s`, span `(kh - 1) * d + 1`, `x`'s own input
/// dilation included), with the padding of its own edges, and gives a partial of the whole
/// gradient. Blocks of one batch entry and one chunk; the partials added up ([`RunningSum`]).
/// A chunk whose rows of `x` all lie in the padding adds nothing and is skipped. Errors
/// ([`unsupported`]) for another layout, and a chunk of one row of `ct` over one binding.
fn summed_halo(cx: &Cx<'_>, e: &Eqn, p: &ConvParams) -> Result<Blocked> {
    let (g, limits, lower, refuse) = (cx.g, cx.limits, cx.lower, cx.refuse);
    let (xv, cv) = (e.inputs[0], e.inputs[1]);
    if !p.spatial_follows_contracted() {
        return Err(refuse(
            xv,
            "one entry of the contracted leading axis exceeds one binding, and the first \
             spatial axis does not follow it",
        ));
    }
    let (x, ct, out) = (g.aval(xv), g.aval(cv), g.aval(e.out));
    let (n, m) = (x.shape[1], ct.shape[1]);
    let inner = |v: &Aval| v.shape[2..].iter().product::<usize>() * v.dtype.size_bytes();
    let (rin, rct) = (inner(x), inner(ct));
    let strip = Strip {
        n,
        s: p.rhs_dilation[0] as i64,
        lo: p.padding[0].0,
        span: ((out.shape[p.dims.out[2]] as i64 - 1) * p.window_strides[0] as i64 + 1),
        ld: p.lhs_dilation[0] as i64,
    };
    let max = limits.max_storage_buffer_binding_size as usize;
    let c = strip.per_chunk(max / rin.max(1), max / rct.max(1));
    if c <= 0 {
        return Err(refuse(
            xv,
            &format!(
                "one row of the cotangent reads {} bytes of the input in one binding",
                strip.span as usize * rin
            ),
        ));
    }
    // (batch entry, rows of `ct`, rows of `x` and their padding) per block.
    let mut chunks = Vec::new();
    for b in 0..x.shape[0] {
        for j0 in (0..m as i64).step_by(c as usize) {
            let j1 = (j0 + c).min(m as i64);
            if let Some(rows) = strip.covered(j0, j1) {
                chunks.push((b, j0 as usize, (j1 - j0) as usize, rows));
            }
        }
    }
    if chunks.is_empty() {
        return Err(refuse(xv, "every row of the cotangent meets only padding"));
    }
    let sum = RunningSum {
        n: chunks.len(),
        result: (Place::Var(e.out), None),
        temp: (Place::Temp(0), None),
    };
    let mut blocks = Vec::new();
    for (j, &(b, j0, rows, (i0, len, pads))) in chunks.iter().enumerate() {
        let mut q = p.clone();
        q.padding[0] = pads;
        let mut sub = one_eqn(
            Prim::Conv(q),
            &[strip_rows(x, 1, len), strip_rows(ct, 1, rows)],
            out.clone(),
        );
        let mut ins = vec![
            (Place::Var(xv), rows_view(b * n + i0, len, rin)),
            (Place::Var(cv), rows_view(b * m + j0, rows, rct)),
        ];
        let dest = sum.add_previous(j, &mut sub, &mut ins);
        blocks.push(Block {
            program: lower(&sub)?,
            ins,
            out: dest,
        });
    }
    Ok(Blocked {
        temps: vec![out.size_bytes() as u64],
        blocks,
    })
}

/// A `[1, m, k] x [1, k, n]` matmul whose `B` is over one binding: for every block of rows of
/// `A` and `C`, the contraction is cut into chunks of rows of `B` (contiguous in its buffer), each
/// chunk's product `A[rows, chunk] @ B[chunk]` added to the sum of the chunks before it
/// ([`RunningSum`]: temporary `0` and the block of `C`).
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
    // Rows of A are bound whole (each block slices its chunk of columns out of them); blocks of
    // them starting off the alignment are staged. (Chunks of B stay aligned: each is read by
    // every block of rows, and would be copied once per block.)
    let Some(r) = rows_staged(m, &[k * a.dtype.size_bytes(), n * elem], limits) else {
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
        let sum = RunningSum {
            n: chunks.len(),
            result: c_block,
            temp,
        };
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
            sub.outputs = vec![d];
            let dest = sum.add_previous(j, &mut sub, &mut ins);
            blocks.push(Block {
                program: lower(&sub)?,
                ins,
                out: dest,
            });
        }
    }
    Ok(Blocked {
        temps: vec![(r.min(m) * n * elem) as u64],
        blocks,
    })
}

/// How [`split_oversized`] cuts a matmul none of whose blocks of 64 rows fit one binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Split {
    /// `A`'s rows are too wide: a sum over chunks of the contraction.
    K,
    /// `C`'s rows are too wide (one fits): `C`'s rows in blocks, concatenated.
    M,
    /// `B`'s rows (or a single row of `C`) are too wide: `C`'s columns in blocks, concatenated.
    N,
    /// A batched matmul whose 64 batch entries exceed one binding: one `[1, m, k] x [1, k, n]`
    /// matmul per entry (each cut further by the next pass if needed), concatenated.
    Batch,
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
/// - A batched matmul whose 64 batch entries exceed one binding: one matmul per batch entry
///   (`A[i] @ B[i]`, each cut further by the next pass when needed), concatenated along the
///   batch.
///
/// Reductions that [`reduction`] cannot cut are split here too ([`split_reduction`]), and sorts
/// along the leading axis (or a middle one too wide for blocks of rows) become sorts along the
/// last axis ([`leading_sort`]), and convolutions whose layout the chunks of one entry cannot
/// cut run transposed to one they can ([`conv_layout`]): every op over arrays too large for its
/// kernel's own cuts is rewritten into ops that have them, hence the name.
///
/// Slices and concatenations of large arrays are buffer copies ([`copies`]) or remaps over
/// windows ([`remap`]).
pub(crate) fn split_oversized(g: &Graph, limits: &DeviceLimits) -> Graph {
    let mut g = g.clone();
    while let Some(next) = split_pass(&g, limits) {
        g = next;
    }
    g
}

/// The split [`split_oversized`] makes of equation `e`, if any. A left operand `x^T` of a
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
    if !super::is_canonical_dot(d) {
        return None;
    }
    if a.shape[0] != 1 {
        let b = g.aval(e.inputs[1]);
        let any_big = [e.inputs[0], e.inputs[1], e.out]
            .iter()
            .any(|&v| too_big(g, v, limits));
        let rows = [row_bytes(a), row_bytes(b), row_bytes(c)];
        return (any_big && rows_per_block(a.shape[0], &rows, limits).is_none())
            .then_some(Split::Batch);
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

/// One pass of [`split_oversized`]: `None` when no matmul needed a split.
fn split_pass(g: &Graph, limits: &DeviceLimits) -> Option<Graph> {
    let producers = g.producers();
    let mut out = g.without_eqns();
    let mut changed = false;
    let lim = limits.max_storage_buffer_binding_size as usize;
    for e in &g.eqns {
        if split_reduction(g, &mut out, e, limits)
            || leading_sort(g, &mut out, e, limits)
            || conv_layout(g, &mut out, e, limits)
        {
            changed = true;
            continue;
        }
        let Some(split) = split_of(g, &producers, e, limits) else {
            out.eqns.push(e.clone());
            continue;
        };
        changed = true;
        let (a, c) = (g.aval(e.inputs[0]), g.aval(e.out));
        let (batch, m, k, n) = (a.shape[0], a.shape[1], a.shape[2], c.shape[2]);
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
            Split::Batch => (0..batch)
                .map(|i| {
                    let ai = slice(&mut out, e.inputs[0], vec![i, 0, 0], vec![i + 1, m, k]);
                    let bi = slice(&mut out, e.inputs[1], vec![i, 0, 0], vec![i + 1, k, n]);
                    matmul(&mut out, ai, bi, m, n)
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
            Split::M | Split::N | Split::Batch => {
                let axis = match split {
                    Split::Batch => 0,
                    Split::M => 1,
                    _ => 2,
                };
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

/// If `e` is a reduction or arg-reduction of a large array that [`reduction`] cannot cut (one
/// slice of the reduced axis, the partial results or the combined result over one binding),
/// pushes onto `out` the same reduction of pieces of its input cut along its largest kept axis
/// after the first reduced one, halved until each piece can be cut, and their results
/// concatenated; `false` (nothing pushed) when `e` needs no such split or none helps.
fn split_reduction(g: &Graph, out: &mut Graph, e: &Eqn, limits: &DeviceLimits) -> bool {
    let (reduced, arg) = match e.prim.lowering() {
        Lowering::Reduce { axes, .. } => (axes.to_vec(), false),
        Lowering::ArgReduce { axis, .. } => (vec![axis], true),
        _ => return false,
    };
    let (x, y) = (g.aval(e.inputs[0]), g.aval(e.out));
    let oelem = y.dtype.size_bytes();
    if !too_big(g, e.inputs[0], limits) || reduction_fits(x, &reduced, oelem, arg, limits) {
        return false;
    }
    let first = reduced.iter().copied().min().unwrap_or(0);
    let Some(ax) = (first + 1..x.shape.len())
        .filter(|i| !reduced.contains(i) && x.shape[*i] > 1)
        .max_by_key(|&i| (x.shape[i], std::cmp::Reverse(i)))
    else {
        return false;
    };
    let piece_fits = |len: usize| {
        let mut p = x.clone();
        p.shape[ax] = len;
        reduction_fits(&p, &reduced, oelem, arg, limits)
    };
    let mut len = x.shape[ax];
    while !piece_fits(len) {
        if len == 1 {
            return false;
        }
        len = len.div_ceil(2);
    }
    // The result's axis of `ax`: kept axes before it, in order.
    let oax = (0..ax).filter(|i| !reduced.contains(i)).count();
    let mut parts = Vec::new();
    for s in (0..x.shape[ax]).step_by(len) {
        let l = len.min(x.shape[ax] - s);
        let (mut start, mut limit) = (vec![0; x.shape.len()], x.shape.clone());
        start[ax] = s;
        limit[ax] = s + l;
        let mut xs = x.clone();
        xs.shape[ax] = l;
        let piece = out.new_var(xs);
        out.eqns.push(Eqn::new(
            Prim::Layout(LayoutOp::Slice {
                stride: vec![1; start.len()],
                start,
                limit,
            }),
            vec![e.inputs[0]],
            piece,
        ));
        let mut ys = y.clone();
        ys.shape[oax] = l;
        let r = out.new_var(ys);
        out.eqns.push(Eqn::new(e.prim.clone(), vec![piece], r));
        parts.push(r);
    }
    out.eqns.push(Eqn::new(
        Prim::Layout(LayoutOp::Concatenate { axis: oax }),
        parts,
        e.out,
    ));
    true
}

/// If `e` is an argsort of large keys of rank 2 or more along the leading axis (which blocks of
/// leading rows cannot cut) or along a middle axis whose one block of leading rows (the axes
/// from the sort axis on) is over one binding, pushes onto `out` the same argsort along the last
/// axis of the keys transposed (the sort axis moved last), its indices transposed back: both
/// transposes are remaps over segments and the sort runs over blocks of rows (or, a row over one
/// binding, over merged chunks). `false` (nothing pushed) otherwise.
fn leading_sort(g: &Graph, out: &mut Graph, e: &Eqn, limits: &DeviceLimits) -> bool {
    let Prim::Sort(SortOp::Argsort {
        axis,
        descending,
        order,
    }) = &e.prim
    else {
        return false;
    };
    let (a, rank) = (*axis, g.aval(e.out).shape.len());
    if rank < 2
        || a + 1 == rank
        || !e
            .inputs
            .iter()
            .chain([&e.out])
            .any(|&v| too_big(g, v, limits))
    {
        return false;
    }
    if a > 0 {
        // Blocks of the rows before the axis cut it, unless one block's sort state is over one
        // binding.
        let block: usize = g.aval(e.out).shape[a..].iter().product();
        let state = SortOp::state_bytes(e.inputs.len());
        if (block * state) as u64 <= limits.max_storage_buffer_binding_size {
            return false;
        }
    }
    let to_last: Vec<usize> = (0..rank).filter(|&i| i != a).chain([a]).collect();
    let mut back = vec![0; rank];
    for (i, &p) in to_last.iter().enumerate() {
        back[p] = i;
    }
    let keys: Vec<Var> = e
        .inputs
        .iter()
        .map(|&v| transposed(out, v, &to_last))
        .collect();
    let y = g.aval(e.out);
    let shape: Vec<usize> = to_last.iter().map(|&p| y.shape[p]).collect();
    let idx = out.new_var(Aval::new(shape, y.dtype));
    out.eqns.push(Eqn::new(
        Prim::Sort(SortOp::Argsort {
            axis: rank - 1,
            descending: *descending,
            order: *order,
        }),
        keys,
        idx,
    ));
    out.eqns.push(Eqn::new(
        Prim::Layout(LayoutOp::Transpose { perm: back }),
        vec![idx],
        e.out,
    ));
    true
}

/// `v` transposed by `perm`, pushed onto `out`.
fn transposed(out: &mut Graph, v: Var, perm: &[usize]) -> Var {
    let a = out.aval(v).clone();
    let shape: Vec<usize> = perm.iter().map(|&p| a.shape[p]).collect();
    let r = out.new_var(Aval::new(shape, a.dtype));
    out.eqns.push(Eqn::new(
        Prim::Layout(LayoutOp::Transpose {
            perm: perm.to_vec(),
        }),
        vec![v],
        r,
    ));
    r
}

/// If `e` is a convolution whose one entry of its leading axis (the batch, or the batch a
/// kernel gradient contracts) is over one binding but whose layout the chunks along the first
/// spatial axis cannot cut (channels first, NCHW, or any layout where that axis does not follow
/// the leading one; or one where neither the batch nor the contracted axis leads), pushes onto
/// `out` the same convolution in the layout they cut: the input (and a kernel gradient's
/// cotangent) transposed to `[lead, spatial.., feature]`, a forward result computed as
/// `[batch, spatial.., feature]` and transposed back. `false` (nothing pushed) otherwise.
///
/// Transposes, not a strip over a strided layout: the transposes are remaps over segments that
/// exist already, and a strip of channels-first rows would be one strided range per channel,
/// which a block cannot bind as one view. The cost is a copy of each large array.
fn conv_layout(g: &Graph, out: &mut Graph, e: &Eqn, limits: &DeviceLimits) -> bool {
    let Prim::Conv(p) = &e.prim else {
        return false;
    };
    let d = &p.dims;
    let rank = d.lhs.len();
    let max = limits.max_storage_buffer_binding_size as usize;
    let (xv, kv) = (e.inputs[0], e.inputs[1]);
    // Whether one entry of the leading axis of each of `vs` fits one binding.
    let fits = |vs: &[Var]| vs.iter().all(|&v| row_bytes(g.aval(v)) <= max);
    if rank < 3 || ![xv, kv, e.out].iter().any(|&v| too_big(g, v, limits)) {
        return false;
    }
    let lead_last = |spec: &[usize], lead: usize, last: usize| -> Vec<usize> {
        std::iter::once(spec[lead])
            .chain(spec[2..].iter().copied())
            .chain([spec[last]])
            .collect()
    };
    // Spec of an operand laid out `[a, spatial.., b]`: `a` at 0, `b` last.
    let spec = |a: usize, b: usize| -> Vec<usize> {
        let mut s = vec![0; rank];
        s[a] = 0;
        s[b] = rank - 1;
        for (i, x) in s[2..].iter_mut().enumerate() {
            *x = i + 1;
        }
        s
    };
    // (An operand already in place is not copied.)
    let moved = |out: &mut Graph, v: Var, perm: &[usize]| {
        if perm.iter().enumerate().all(|(i, &a)| i == a) {
            v
        } else {
            transposed(out, v, perm)
        }
    };
    if p.contracts_lead() && !p.batch_leads() {
        // A kernel gradient: `x` and the cotangent to `[contracted, spatial.., other]`.
        if fits(&[xv, kv]) || p.spatial_follows_contracted() || too_big(g, e.out, limits) {
            return false;
        }
        let x = moved(out, xv, &lead_last(&d.lhs, 1, 0));
        let ct = moved(out, kv, &lead_last(&d.rhs, 1, 0));
        let mut q = p.clone();
        q.dims.lhs = spec(1, 0);
        q.dims.rhs = spec(1, 0);
        out.eqns.push(Eqn::new(Prim::Conv(q), vec![x, ct], e.out));
        return true;
    }
    if p.batch_leads() && (fits(&[xv, e.out]) || p.spatial_follows_batch()) {
        return false;
    }
    if too_big(g, kv, limits) {
        // (Every block binds the kernel whole: refused whatever the layout.)
        return false;
    }
    let x = moved(out, xv, &lead_last(&d.lhs, 0, 1));
    let to = lead_last(&d.out, 0, 1);
    let mut q = p.clone();
    q.dims.lhs = spec(0, 1);
    q.dims.out = spec(0, 1);
    if to.iter().enumerate().all(|(i, &a)| i == a) {
        out.eqns.push(Eqn::new(Prim::Conv(q), vec![x, kv], e.out));
        return true;
    }
    let y = g.aval(e.out);
    let r = out.new_var(Aval::new(to.iter().map(|&a| y.shape[a]).collect(), y.dtype));
    out.eqns.push(Eqn::new(Prim::Conv(q), vec![x, kv], r));
    let mut back = vec![0; rank];
    for (i, &a) in to.iter().enumerate() {
        back[a] = i;
    }
    out.eqns.push(Eqn::new(
        Prim::Layout(LayoutOp::Transpose { perm: back }),
        vec![r],
        e.out,
    ));
    true
}

/// Whether equation `e` is lowered by [`blocked`] when its arrays are over one binding: its
/// operands must then be stored (not fused into its kernel).
pub(crate) fn blocks_operands(e: &Eqn) -> bool {
    matches!(
        e.prim.lowering(),
        Lowering::Matmul(_) | Lowering::Reduce { .. } | Lowering::ArgReduce { .. }
    ) || kernel_cut(e).is_some()
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
