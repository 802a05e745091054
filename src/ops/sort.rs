//! Sorting: `argsort`, the stable sorting permutation of one or several keys along one axis, and
//! the sorts built on it ([`Tensor::sort`], [`Tensor::argsort`], [`Tensor::top_k`], [`sort`]).
//!
//! JAX's `lax.sort` sorts several operands together by their first `num_keys`; `argsort` is sorting
//! the keys together with an `iota`. brigade's primitive is that permutation itself: `argsort(k₀,
//! …, k_{m-1})` gives, along `axis`, the indices that order the elements lexicographically by the
//! keys, ties kept in index order (stable). Sorted values are then a gather by the permutation
//! (`take_along_axis`), so the VJP of a sort is the gather's (a scatter-add of the cotangent back
//! through the permutation) and the permutation itself, an integer result, has no cotangent.
//!
//! Order ([`FloatOrder`]): `lax.sort`'s float order treats `-0.0` and `+0.0` as equal and every NaN
//! as one value after `+inf` ([`FloatOrder::Sort`]); `lax.top_k` uses the IEEE total order, where
//! `-NaN < -inf < … < -0.0 < +0.0 < … < +inf < +NaN` ([`FloatOrder::Total`]). Both are decided on
//! the bits (a key is mapped to an unsigned word whose order is the wanted one), never by float
//! comparisons, which shader compilers may fold for NaN. `descending` reverses the keys' order but
//! not the tie rule (ties stay in index order, as `jnp.argsort(descending=True)`).
//!
//! Kernels (`shaders/sort_init.wgsl`, `shaders/sort_merge.wgsl`): a merge sort of every row at
//! once, in passes over global memory: the first pass stores each element's encoded keys and index,
//! then `ceil(log2 n)` passes merge runs of 1, 2, 4, … elements pairwise, each element finding its
//! place by a binary search in the partner run (no barriers, any row length, as many rows as the
//! grid holds); the last pass writes the indices. The plan refuses with `Error::OverLimit` what
//! the device cannot bind: more keys than the stage's storage buffers less one (the first pass
//! binds every key and the sort state), or a sort state (`4 × (keys + 1)` bytes per element) over
//! one binding or buffer. The rules are all here: shape/dtype, CPU reference,
//! lowering, batching (the axis shifted past the batch axis) and VJP (none: integer result).

use std::cmp::Ordering;
use std::fmt;

use crate::device::DeviceLimits;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::host::{HostArray, HostData};
use crate::ops::rules::{
    Emitted, Lowering, OwnPasses, Pass, PassPlan, PlanCx, Rules, single_batch,
};
use crate::ops::{BatchCtx, Batched, Cotangents, Prim};
use crate::tensor::{Tensor, norm_axis};
use crate::trace::graph::{Aval, Eqn, Var};
use crate::wgsl::{Emitter, KernelSrc, WG, balanced_grid, fill};

const SORT_INIT: &str = include_str!("../../shaders/sort_init.wgsl");
const SORT_MERGE: &str = include_str!("../../shaders/sort_merge.wgsl");
const SORT_MERGE_SPLIT: &str = include_str!("../../shaders/sort_merge_split.wgsl");
const SORT_CHUNK_INDICES: &str = include_str!("../../shaders/sort_chunk_indices.wgsl");

/// How float keys are ordered (integers and booleans have one order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FloatOrder {
    /// `lax.sort`'s: `-0.0 == +0.0`, every NaN equal to every other and after `+inf`.
    Sort,
    /// The IEEE total order (`lax.top_k`'s): `-NaN < -inf < … < -0.0 < +0.0 < … < +inf < +NaN`.
    Total,
}

impl FloatOrder {
    fn name(self) -> &'static str {
        match self {
            FloatOrder::Sort => "sort",
            FloatOrder::Total => "total",
        }
    }
}

/// The sort family.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SortOp {
    /// `argsort(keys…)`: i32 indices along `axis` ordering the elements by the keys
    /// (lexicographically, first key first), ties in index order. Every key has one shape.
    Argsort {
        axis: usize,
        descending: bool,
        order: FloatOrder,
    },
}

impl SortOp {
    /// Bytes of merge-sort state per element sorted by `keys` keys (the keys and the index, one
    /// 4-byte word each): the state of the elements sorted at once must fit one binding.
    pub(crate) fn state_bytes(keys: usize) -> usize {
        (keys + 1) * 4
    }
}

impl Rules for SortOp {
    fn name(&self) -> &'static str {
        match self {
            SortOp::Argsort { .. } => "argsort",
        }
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SortOp::Argsort {
                axis,
                descending,
                order,
            } => write!(
                f,
                "[dimension={axis} descending={descending} order={}]",
                order.name()
            ),
        }
    }

    fn arity(&self) -> Option<usize> {
        match self {
            // One or more keys.
            SortOp::Argsort { .. } => None,
        }
    }

    fn result_count(&self) -> usize {
        match self {
            SortOp::Argsort { .. } => 1,
        }
    }

    fn infer(&self, ins: &[&Aval]) -> Result<Vec<Aval>> {
        match self {
            SortOp::Argsort { axis, .. } => Ok(vec![infer_argsort(*axis, ins)?]),
        }
    }

    fn eval_cpu(&self, ins: &[&HostArray], _outs: &[Aval]) -> Result<Vec<HostArray>> {
        match self {
            SortOp::Argsort {
                axis,
                descending,
                order,
            } => Ok(vec![argsort_cpu(ins, *axis, *descending, *order)]),
        }
    }

    fn lowering(&self) -> Lowering<'_> {
        match self {
            SortOp::Argsort { .. } => Lowering::Passes(self),
        }
    }

    fn emit_wgsl(&self, _em: &mut Emitter<'_>, _ins: &[Var], _idx: &[String]) -> Option<Emitted> {
        // Dispatches of their own (`OwnPasses`).
        None
    }

    /// Batching rule: every key given the batch axis, the sorted axis shifted past it.
    fn batch(&self, ins: &[Batched], ctx: &BatchCtx<'_>) -> Result<Vec<Batched>> {
        match self {
            SortOp::Argsort {
                axis,
                descending,
                order,
            } => {
                let shifted = SortOp::Argsort {
                    axis: axis + 1,
                    descending: *descending,
                    order: *order,
                };
                single_batch(super::apply_batched(Prim::Sort(shifted), ins, ctx.size))
            }
        }
    }

    /// VJP rule: the permutation is piecewise constant in the keys and an integer, so no cotangent
    /// flows to them (sorted values get theirs through the gather that applies the permutation).
    fn vjp(&self, ins: &[Tensor], _outs: &[Tensor], _cts: &[Option<Tensor>]) -> Result<Cotangents> {
        match self {
            SortOp::Argsort { .. } => Ok(vec![None; ins.len()]),
        }
    }

    fn has_effect(&self) -> bool {
        match self {
            SortOp::Argsort { .. } => false,
        }
    }
}

// ---- shape and dtype rule -----------------------------------------------------------------------

/// Shape and dtype rule of `argsort` along `axis`: at least one key, all of one shape, each f32,
/// f64 (host), i32, u32 or bool; the axis at most `i32::MAX` long (the indices are i32).
pub fn infer_argsort(axis: usize, keys: &[&Aval]) -> Result<Aval> {
    let Some(first) = keys.first() else {
        return Err(Error::Arity {
            what: "argsort keys (at least one)".into(),
            expected: 1,
            got: 0,
        });
    };
    let shape = &first.shape;
    if axis >= shape.len() {
        return Err(Error::BadAxis {
            op: "sort",
            axis: axis as i64,
            rank: shape.len(),
            shape: shape.clone(),
        });
    }
    for k in keys {
        if k.shape != *shape {
            return Err(Error::BadShapeArg {
                op: "sort",
                shape: shape.clone(),
                detail: format!(
                    "sort keys have shapes {:?}: every key (and every operand sorted along) \
                     must have one shape; broadcast them first",
                    keys.iter().map(|k| k.shape.clone()).collect::<Vec<_>>()
                ),
            });
        }
    }
    if shape[axis] > i32::MAX as usize {
        return Err(Error::BadShapeArg {
            op: "sort",
            shape: shape.clone(),
            detail: format!(
                "axis {axis} has {} elements, more than the i32 indices of a sort reach \
                 ({}); sort shorter rows",
                shape[axis],
                i32::MAX
            ),
        });
    }
    Ok(Aval::new(shape.clone(), DType::I32))
}

// ---- CPU reference ------------------------------------------------------------------------------

/// `lax.sort`'s standardization on the bits of an f32: `-0.0` becomes `+0.0`, every NaN the
/// canonical quiet NaN.
fn std_f32_bits(b: u32) -> u32 {
    if b & 0x7fff_ffff == 0 {
        0
    } else if b & 0x7fff_ffff > 0x7f80_0000 {
        0x7fc0_0000
    } else {
        b
    }
}

/// The same for an f64.
fn std_f64_bits(b: u64) -> u64 {
    const ABS: u64 = 0x7fff_ffff_ffff_ffff;
    if b & ABS == 0 {
        0
    } else if b & ABS > 0x7ff0_0000_0000_0000 {
        0x7ff8_0000_0000_0000
    } else {
        b
    }
}

/// Element `i` of a key as an unsigned word whose order is the sort's order (ascending).
fn key_word(d: &HostData, i: usize, order: FloatOrder, descending: bool) -> u64 {
    let std = order == FloatOrder::Sort;
    let (w, bits) = match d {
        HostData::F32(v) => {
            let b = v[i].to_bits();
            let b = if std { std_f32_bits(b) } else { b };
            // Negative floats: all bits flipped (larger magnitude first); positive: sign set.
            let m = if b & 0x8000_0000 != 0 {
                !b
            } else {
                b | 0x8000_0000
            };
            (m as u64, 32)
        }
        HostData::F64(v) => {
            let b = v[i].to_bits();
            let b = if std { std_f64_bits(b) } else { b };
            let m = if b >> 63 != 0 { !b } else { b | 1 << 63 };
            (m, 64)
        }
        HostData::I32(v) => (((v[i] as u32) ^ 0x8000_0000) as u64, 32),
        HostData::U32(v) => (v[i] as u64, 32),
        HostData::Bool(v) => (v[i] as u64, 32),
    };
    match (descending, bits) {
        (false, _) => w,
        (true, 64) => !w,
        (true, _) => w ^ 0xffff_ffff,
    }
}

/// The CPU reference of `argsort`: per row, a stable sort of the indices by the encoded keys.
fn argsort_cpu(keys: &[&HostArray], axis: usize, descending: bool, order: FloatOrder) -> HostArray {
    let shape = &keys[0].shape;
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let words: Vec<Vec<u64>> = keys
        .iter()
        .map(|k| {
            (0..k.len())
                .map(|i| key_word(&k.data, i, order, descending))
                .collect()
        })
        .collect();
    let mut out = vec![0i32; outer * n * inner];
    let mut idx: Vec<usize> = Vec::with_capacity(n);
    for o in 0..outer {
        for j in 0..inner {
            let at = |i: usize| o * n * inner + i * inner + j;
            idx.clear();
            idx.extend(0..n);
            // `sort_by` is stable: ties keep index order.
            idx.sort_by(|&a, &b| {
                words
                    .iter()
                    .map(|w| w[at(a)].cmp(&w[at(b)]))
                    .find(|c| *c != Ordering::Equal)
                    .unwrap_or(Ordering::Equal)
            });
            for (p, &i) in idx.iter().enumerate() {
                out[at(p)] = i as i32;
            }
        }
    }
    HostArray {
        shape: shape.clone(),
        data: HostData::I32(out),
    }
}

// ---- kernels ------------------------------------------------------------------------------------

impl OwnPasses for SortOp {
    fn passes(&self, cx: &PlanCx<'_>, e: &Eqn) -> Result<PassPlan> {
        match self {
            SortOp::Argsort {
                axis,
                descending,
                order,
            } => {
                let dts: Vec<DType> = e.inputs.iter().map(|v| cx.g.aval(*v).dtype).collect();
                let shape = &cx.g.aval(e.out).shape;
                argsort_passes(e, shape, &dts, *axis, *descending, *order, cx.limits)
            }
        }
    }
}

/// WGSL of a function `key{k}(b: u32) -> u32` mapping the bits of key `k` to its sort word.
fn encode_wgsl(k: usize, dt: DType, order: FloatOrder, descending: bool) -> Result<String> {
    let flip = if descending { " ^ 0xffffffffu" } else { "" };
    let body = match dt {
        DType::F32 => {
            let standardize = match order {
                // `lax.sort`: -0.0 as +0.0, every NaN as the canonical one (tested on the bits:
                // a compiler may fold `x != x`).
                FloatOrder::Sort => {
                    "    var c = select(b, 0u, (b & 0x7fffffffu) == 0u);\n    \
                     c = select(c, 0x7fc00000u, (b & 0x7fffffffu) > 0x7f800000u);\n"
                }
                FloatOrder::Total => "    let c = b;\n",
            };
            format!(
                "{standardize}    return (c ^ select(0x80000000u, 0xffffffffu, (c & 0x80000000u) != 0u)){flip};\n"
            )
        }
        DType::I32 => format!("    return (b ^ 0x80000000u){flip};\n"),
        DType::U32 | DType::Bool => format!("    return b{flip};\n"),
        DType::F64 => {
            return Err(Error::BadDType {
                op: "sort",
                dtype: dt,
                hint: crate::error::F64_ON_GPU,
                shapes: vec![],
            });
        }
    };
    Ok(format!("fn key{k}(b: u32) -> u32 {{\n{body}}}\n"))
}

/// The dispatches of `argsort` over keys of dtypes `dts` and `shape` along `axis`.
fn argsort_passes(
    e: &Eqn,
    shape: &[usize],
    dts: &[DType],
    axis: usize,
    descending: bool,
    order: FloatOrder,
    limits: &DeviceLimits,
) -> Result<PassPlan> {
    let max_wg = limits.max_compute_workgroups_per_dimension;
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let total: usize = shape.iter().product();
    let nk = dts.len();
    let words = SortOp::state_bytes(nk) / 4;
    if total == 0 {
        return Ok(PassPlan {
            temp_bytes: Vec::new(),
            passes: Vec::new(),
        });
    }
    // Word offsets in u32 arithmetic.
    let temp_words = total as u64 * words as u64;
    if temp_words > u32::MAX as u64 {
        return Err(Error::OverLimit {
            device: "target".into(),
            what: format!(
                "sorting an array of shape {shape:?} by {nk} key(s) ({temp_words} words of \
                 sort state)"
            ),
            needed: temp_words,
            limit: u32::MAX as u64,
            unit: "words",
            limit_name: "32-bit kernel indexing",
        });
    }
    // The first pass binds every key and the sort state (or the result): one storage buffer more
    // than there are keys.
    let max_buffers = limits.max_storage_buffers_per_shader_stage as u64;
    if nk as u64 + 1 > max_buffers {
        let most = max_buffers.saturating_sub(1);
        return Err(Error::OverLimit {
            device: "target".into(),
            what: format!(
                "sorting an array of shape {shape:?} by {nk} keys (argsort's first pass binds \
                 every key and its result; sort by at most {most} keys at once, or sort by the \
                 least significant keys first and then stably by the others)"
            ),
            needed: nk as u64 + 1,
            limit: max_buffers,
            unit: "storage buffers",
            limit_name: "max_storage_buffers_per_shader_stage",
        });
    }
    let merges = n.next_power_of_two().trailing_zeros() as usize;
    // The merge passes' sort state: one buffer (two when they alternate) of `words` words per
    // element, larger than any key: it must fit one binding and one buffer.
    let temp_bytes = temp_words * 4;
    let (limit, limit_name) = if limits.max_storage_buffer_binding_size <= limits.max_buffer_size {
        (
            limits.max_storage_buffer_binding_size,
            "max_storage_buffer_binding_size",
        )
    } else {
        (limits.max_buffer_size, "max_buffer_size")
    };
    if merges > 0 && temp_bytes > limit {
        return Err(Error::OverLimit {
            device: "target".into(),
            what: format!(
                "sorting an array of shape {shape:?} by {nk} key(s) (a merge-sort temporary of \
                 {words} 4-byte words per element: the keys and the index)"
            ),
            needed: temp_bytes,
            limit,
            unit: "bytes",
            limit_name,
        });
    }
    let grid = balanced_grid(total.div_ceil(WG as usize), max_wg);
    let shape_s = format!("{shape:?}");
    // The index of (row r, position `pos`) in the row-major array (the result's layout).
    let at =
        |pos: &str| format!("(r / {inner}u) * {n}u * {inner}u + {pos} * {inner}u + r % {inner}u");
    let out_decl =
        |b: usize| format!("@group(0) @binding({b}) var<storage, read_write> out0: array<i32>;\n");
    let temp_decl = |b: usize, name: &str, access: &str| {
        format!("@group(0) @binding({b}) var<storage, {access}> {name}: array<u32>;\n")
    };
    let mut passes = Vec::new();
    // First pass: encode.
    {
        let mut bind = String::new();
        let mut encode = String::new();
        for (k, &dt) in dts.iter().enumerate() {
            // Every key read as its bits (f32 and i32 bound as u32 words; bool is stored as u32).
            bind.push_str(&format!(
                "@group(0) @binding({k}) var<storage, read> in{k}: array<u32>;\n"
            ));
            encode.push_str(&encode_wgsl(k, dt, order, descending)?);
        }
        let store = if merges == 0 {
            // Rows of one element: the permutation is 0.
            bind.push_str(&out_decl(nk));
            "    out0[elem] = i32(i);".to_string()
        } else {
            bind.push_str(&temp_decl(nk, "run_out", "read_write"));
            let mut s = String::new();
            for k in 0..nk {
                s.push_str(&format!(
                    "    run_out[t * {words}u + {k}u] = key{k}(in{k}[elem]);\n"
                ));
            }
            s.push_str(&format!("    run_out[t * {words}u + {nk}u] = i;"));
            s
        };
        let wgsl = fill(
            SORT_INIT,
            &[
                ("BINDINGS", &bind),
                ("ENCODE", &encode),
                ("WORDS", &words.to_string()),
                ("TOTAL", &total.to_string()),
                ("N", &n.to_string()),
                ("INNER", &inner.to_string()),
                ("STORE", &store),
            ],
        );
        passes.push(Pass {
            src: KernelSrc {
                label: format!("argsort_init {shape_s} axis {axis}"),
                wgsl,
                inputs: e.inputs.clone(),
                workgroups: grid,
            },
            temps: if merges == 0 { vec![] } else { vec![0] },
            writes_out: merges == 0,
        });
    }
    // Merge passes: runs of 2^p merged; temporaries 0 and 1 alternate as source and destination.
    for p in 0..merges {
        let run = 1usize << p;
        let last = p + 1 == merges;
        let (from, to) = (p % 2, 1 - p % 2);
        let mut bind = temp_decl(0, "run_in", "read");
        let store = if last {
            bind.push_str(&out_decl(1));
            format!("    out0[{}] = i32(run_in[me + {nk}u]);", at("dest"))
        } else {
            bind.push_str(&temp_decl(1, "run_out", "read_write"));
            copy_state(words)
        };
        let wgsl = merge_wgsl(&bind, words, run, total, n, &store);
        passes.push(Pass {
            src: KernelSrc {
                label: format!("argsort_merge {shape_s} axis {axis} run {run}"),
                wgsl,
                inputs: Vec::new(),
                workgroups: grid,
            },
            temps: if last { vec![from] } else { vec![from, to] },
            writes_out: last,
        });
    }
    Ok(PassPlan {
        temp_bytes: if merges >= 2 {
            vec![temp_bytes, temp_bytes]
        } else if merges == 1 {
            vec![temp_bytes]
        } else {
            Vec::new()
        },
        passes,
    })
}

/// The WGSL of one merge pass (`shaders/sort_merge.wgsl`): runs of `run` elements of `words`
/// words merged pairwise in rows of `n`, `total` elements in all, each element stored by `store`.
fn merge_wgsl(bind: &str, words: usize, run: usize, total: usize, n: usize, store: &str) -> String {
    fill(
        SORT_MERGE,
        &[
            ("BINDINGS", bind),
            ("WORDS", &words.to_string()),
            ("RUN", &run.to_string()),
            ("TOTAL", &total.to_string()),
            ("N", &n.to_string()),
            ("STORE", store),
        ],
    )
}

/// A merge pass's store of an element's state words at its place in the merged run.
fn copy_state(words: usize) -> String {
    format!(
        "    for (var k = 0u; k < {words}u; k = k + 1u) {{\n        \
         run_out[(base + dest) * {words}u + k] = run_in[me + k];\n    }}"
    )
}

/// The kernels of an argsort whose one row is over one binding, run over chunks of the row
/// (`lower::segments` binds each to its chunks): every chunk holds `c` elements of sort state (a
/// power of two; the row's tail is padded with elements that sort last), is written by
/// [`ChunkSort::init`] and sorted by [`ChunkSort::merge`] passes (the row kernel's own passes, on
/// a row of `c`), then chunks are merged pairwise by [`ChunkSort::merge_split`] and the indices
/// written by [`ChunkSort::indices`]. The state is the row kernel's (encoded keys, then the
/// index along the row, which makes every element distinct), so the order, stability and NaN
/// rules are the row kernel's exactly.
pub(crate) struct ChunkSort<'a> {
    pub dts: &'a [DType],
    pub order: FloatOrder,
    pub descending: bool,
    /// Elements per chunk, a power of two.
    pub c: usize,
    pub max_wg: u32,
}

impl ChunkSort<'_> {
    /// Words of sort state per element.
    pub(crate) fn words(&self) -> usize {
        SortOp::state_bytes(self.dts.len()) / 4
    }

    fn src(&self, label: String, wgsl: String, threads: usize) -> KernelSrc {
        KernelSrc {
            label,
            wgsl,
            inputs: Vec::new(),
            workgroups: balanced_grid(threads.div_ceil(WG as usize), self.max_wg),
        }
    }

    /// The first pass of a chunk starting at index `base` of its row, `count` of whose elements
    /// are in the row (the others are padding: every key word all ones, their index past the
    /// row's, so they sort after every element). Binds the `count` elements of every key (none
    /// when `count` is 0), then the chunk's state.
    pub(crate) fn init(&self, count: usize, base: usize) -> Result<KernelSrc> {
        let (nk, words) = (self.dts.len(), self.words());
        let mut bind = String::new();
        let mut encode = String::new();
        let (mut keys, mut pads) = (String::new(), String::new());
        for (k, &dt) in self.dts.iter().enumerate() {
            if count > 0 {
                bind.push_str(&format!(
                    "@group(0) @binding({k}) var<storage, read> in{k}: array<u32>;\n"
                ));
                encode.push_str(&encode_wgsl(k, dt, self.order, self.descending)?);
                keys.push_str(&format!(
                    "        run_out[t * {words}u + {k}u] = key{k}(in{k}[elem]);\n"
                ));
            }
            pads.push_str(&format!(
                "        run_out[t * {words}u + {k}u] = 0xffffffffu;\n"
            ));
        }
        let at = if count > 0 { nk } else { 0 };
        bind.push_str(&format!(
            "@group(0) @binding({at}) var<storage, read_write> run_out: array<u32>;\n"
        ));
        let store = format!(
            "    if (i < {count}u) {{\n{keys}    }} else {{\n{pads}    }}\n    \
             run_out[t * {words}u + {nk}u] = {base}u + i;"
        );
        let c = self.c.to_string();
        let wgsl = fill(
            SORT_INIT,
            &[
                ("BINDINGS", &bind),
                ("ENCODE", &encode),
                ("WORDS", &words.to_string()),
                ("TOTAL", &c),
                ("N", &c),
                ("INNER", "1"),
                ("STORE", &store),
            ],
        );
        Ok(self.src(
            format!("argsort_chunk_init {count} at {base}"),
            wgsl,
            self.c,
        ))
    }

    /// A merge pass of runs of `run` elements within a chunk: binds the chunk's state, then its
    /// state in the other temporary.
    pub(crate) fn merge(&self, run: usize) -> KernelSrc {
        let words = self.words();
        let bind = "@group(0) @binding(0) var<storage, read> run_in: array<u32>;\n\
                    @group(0) @binding(1) var<storage, read_write> run_out: array<u32>;\n";
        let wgsl = merge_wgsl(bind, words, run, self.c, self.c, &copy_state(words));
        self.src(
            format!("argsort_chunk_merge {} run {run}", self.c),
            wgsl,
            self.c,
        )
    }

    /// One half of a compare-exchange of two sorted chunks (the block sorting network's
    /// comparator): binds the lower chunk, the upper one, and the chunk to which the first
    /// (`upper` false) or last `c` elements of the merged pair go.
    pub(crate) fn merge_split(&self, upper: bool) -> KernelSrc {
        let wgsl = fill(
            SORT_MERGE_SPLIT,
            &[
                ("WORDS", &self.words().to_string()),
                ("C", &self.c.to_string()),
                ("HALF", if upper { "1" } else { "0" }),
            ],
        );
        let half = if upper { "upper" } else { "lower" };
        self.src(
            format!("argsort_merge_split {} {half}", self.c),
            wgsl,
            2 * self.c,
        )
    }

    /// The last pass of a chunk: the indices of its first `count` elements, from its state.
    pub(crate) fn indices(&self, count: usize) -> KernelSrc {
        let wgsl = fill(
            SORT_CHUNK_INDICES,
            &[
                ("WORDS", &self.words().to_string()),
                ("NK", &self.dts.len().to_string()),
                ("COUNT", &count.to_string()),
            ],
        );
        self.src(format!("argsort_chunk_indices {count}"), wgsl, count)
    }
}

// ---- the API ------------------------------------------------------------------------------------

/// The stable sorting permutation of `keys` (one shape, compared lexicographically) along `axis`
/// (already normalized): the `argsort` primitive.
fn argsort_prim(keys: &[&Tensor], axis: usize, descending: bool, order: FloatOrder) -> Tensor {
    Tensor::apply(
        Prim::Sort(SortOp::Argsort {
            axis,
            descending,
            order,
        }),
        keys,
    )
}

/// `x` gathered along `axis` by `perm` (indices of `x`'s shape, all in range).
fn gather(x: &Tensor, perm: &Tensor, axis: usize) -> Tensor {
    crate::numpy::take_along_axis(x, perm, axis as i64)
}

/// `lax.sort(operands, dimension, num_keys)`: every operand (all of one shape) reordered along
/// `dimension` by the stable sort of the first `num_keys` operands (compared lexicographically,
/// floats in `lax.sort`'s order: `-0.0 == +0.0`, NaNs last). Returns the sorted operands.
///
/// Sorting `(keys, iota)` gives the argsort; sorting `(keys, values)` a key–value sort. Gradients
/// flow to every float operand through the permutation.
///
/// ```
/// use brigade::Tensor;
/// use brigade::ops::sort;
/// let k = Tensor::from_vec(vec![3i32, 1, 2, 1], &[4]);
/// let v = Tensor::from_vec(vec![30.0f32, 10.0, 20.0, 11.0], &[4]);
/// let out = sort::sort(&[k, v], 0, 1);
/// assert_eq!(out[0].to_vec::<i32>()?, vec![1, 1, 2, 3]);
/// assert_eq!(out[1].to_vec::<f32>()?, vec![10.0, 11.0, 20.0, 30.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn sort(operands: &[Tensor], dimension: i64, num_keys: usize) -> Vec<Tensor> {
    let fail = |e: Error| vec![Tensor::failed(e); operands.len().max(1)];
    if let Some(e) = operands.iter().find_map(|t| t.error()) {
        return fail(e.clone());
    }
    let Some(first) = operands.first() else {
        return fail(Error::Arity {
            what: "sort operands (at least one)".into(),
            expected: 1,
            got: 0,
        });
    };
    if num_keys == 0 || num_keys > operands.len() {
        return fail(Error::BadShapeArg {
            op: "sort",
            shape: first.shape().to_vec(),
            detail: format!(
                "num_keys = {num_keys} with {} operand(s): it must be between 1 and the number \
                 of operands",
                operands.len()
            ),
        });
    }
    let axis = match norm_axis("sort", dimension, first.shape()) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    if let Some(o) = operands.iter().find(|o| o.shape() != first.shape()) {
        return fail(Error::BadShapeArg {
            op: "sort",
            shape: first.shape().to_vec(),
            detail: format!(
                "an operand has shape {:?}: every operand must have the keys' shape",
                o.shape()
            ),
        });
    }
    let keys: Vec<&Tensor> = operands[..num_keys].iter().collect();
    let perm = argsort_prim(&keys, axis, false, FloatOrder::Sort);
    if let Some(e) = perm.error() {
        return fail(e.clone());
    }
    operands.iter().map(|o| gather(o, &perm, axis)).collect()
}

impl Tensor {
    /// The values sorted ascending along `axis` (negative counts from the end), like
    /// `jnp.sort(x, axis)`: floats in `lax.sort`'s order (`-0.0` and `+0.0` equal and kept in
    /// their order, NaNs last). Differentiable: the cotangent goes back through the permutation.
    ///
    /// ```
    /// use brigade::Tensor;
    /// let x = Tensor::from_vec(vec![3.0f32, f32::NAN, -1.0, 2.0, 0.5, -4.0], &[2, 3]);
    /// let s = x.sort(1).to_vec::<f32>()?;
    /// assert_eq!(&s[..2], &[-1.0, 3.0]);
    /// assert!(s[2].is_nan());
    /// assert_eq!(&s[3..], &[-4.0, 0.5, 2.0]);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn sort(&self, axis: i64) -> Tensor {
        sort(std::slice::from_ref(self), axis, 1)
            .into_iter()
            .next()
            .unwrap_or_else(|| self.clone())
    }

    /// The indices (i32) that sort `self` along `axis`, stable (ties in index order), like
    /// `jnp.argsort(x, axis, stable=True)`.
    ///
    /// ```
    /// use brigade::Tensor;
    /// let x = Tensor::from_vec(vec![2i32, 1, 2, 0], &[4]);
    /// assert_eq!(x.argsort(0).to_vec::<i32>()?, vec![3, 1, 0, 2]);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn argsort(&self, axis: i64) -> Tensor {
        self.argsort_order(axis, false)
    }

    /// [`Tensor::argsort`], descending when `descending` (ties still in index order, as
    /// `jnp.argsort(x, descending=True)`).
    pub fn argsort_order(&self, axis: i64, descending: bool) -> Tensor {
        if let Some(e) = self.error() {
            return Tensor::failed(e.clone());
        }
        match norm_axis("argsort", axis, self.shape()) {
            Ok(a) => argsort_prim(&[self], a, descending, FloatOrder::Sort),
            Err(e) => self.fail_with(e),
        }
    }

    /// The `k` largest entries along the last axis and their indices (i32), largest first, like
    /// `lax.top_k(x, k)`: ties go to the lower index first; floats in the IEEE total order
    /// (`+NaN` largest, `-NaN` smallest, `+0.0` above `-0.0`); booleans with `true` largest.
    /// `k = 0` gives empty results. Errors: a scalar, `k` greater than the last axis.
    ///
    /// ```
    /// use brigade::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 5.0, 3.0, 5.0], &[4]);
    /// let (v, i) = x.top_k(2);
    /// assert_eq!(v.to_vec::<f32>()?, vec![5.0, 5.0]);
    /// assert_eq!(i.to_vec::<i32>()?, vec![1, 3]);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn top_k(&self, k: usize) -> (Tensor, Tensor) {
        let fail = |e: Error| (Tensor::failed(e.clone()), Tensor::failed(e));
        if let Some(e) = self.error() {
            return fail(e.clone());
        }
        let shape = self.shape().to_vec();
        let Some(&n) = shape.last() else {
            return fail(Error::BadShapeArg {
                op: "top_k",
                shape,
                detail: "top_k needs an operand with at least one axis (it takes the last); \
                         reshape the scalar to [1]"
                    .into(),
            });
        };
        if k > n {
            return fail(Error::BadShapeArg {
                op: "top_k",
                shape,
                detail: format!(
                    "k = {k} is greater than the last axis ({n}); k must be at most {n}"
                ),
            });
        }
        let axis = shape.len() - 1;
        let perm = argsort_prim(&[self], axis, true, FloatOrder::Total);
        let idx = perm.slice_axis(axis as i64, 0, k);
        (gather(self, &idx, axis), idx)
    }
}
