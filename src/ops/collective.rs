//! Collectives: communication between the shards of a parallel axis (`pmap` / `shard_map`).
//!
//! Each collective declares here its shape/dtype rule ([`Collective::infer`]) and its host
//! combination ([`Collective::combine`]): given every device's operand, in device order, what each
//! device receives. The executor cuts a parallel program into stages at collectives
//! (`crate::lower::stages`), reads every device's operand back, calls `combine` on the host and
//! writes the results to the devices (`crate::transform::pmap`). The combination order is fixed
//! (device 0, 1, 2, …), so the same inputs give the same bits on every run.
//!
//! Batching and VJP rules go here too.

use crate::ops::{IndexOp, LayoutOp};
use std::fmt;

use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::host::{HostArray, HostData};
use crate::ops::rules::{Emitted, Lowering, Rules, single_batch, single_vjp};
use crate::ops::{BatchCtx, Batched, Cotangents};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Var};
use crate::wgsl::Emitter;

/// A collective over the parallel axis `axis_name`, whose size (the number of shards) was fixed
/// when the program was traced.
#[derive(Clone, Debug, PartialEq)]
pub struct Collective {
    pub axis_name: String,
    /// Number of shards along the axis.
    pub size: usize,
    pub kind: CollectiveKind,
}

/// What a collective computes (JAX's `jax.lax` parallel operators).
#[derive(Clone, Debug, PartialEq)]
pub enum CollectiveKind {
    /// Sum over shards; every shard receives the sum.
    Psum,
    /// Mean over shards (float operands).
    Pmean,
    /// Elementwise maximum over shards.
    Pmax,
    /// Elementwise minimum over shards.
    Pmin,
    /// Every shard receives all operands, stacked at `axis` (or concatenated along it if `tiled`).
    AllGather { axis: usize, tiled: bool },
    /// Sum, then shard `i` keeps slice `i` along `dim` (block `i` if `tiled`).
    PsumScatter { dim: usize, tiled: bool },
    /// Shard `dst` receives the operand of shard `src` for each `(src, dst)`; others receive zeros.
    Ppermute { perm: Vec<(usize, usize)> },
    /// Shard `i` receives chunk `i` (along `split_axis`) of every shard, stacked (or concatenated
    /// if `tiled`) along `concat_axis`.
    AllToAll {
        split_axis: usize,
        concat_axis: usize,
        tiled: bool,
    },
    /// The shard's own index along the axis (an `i32` scalar); no communication.
    AxisIndex,
}

/// What a collective gives the devices: one array for all, or one each.
pub enum Combined {
    Same(HostArray),
    PerDevice(Vec<HostArray>),
}

impl Combined {
    pub fn get(&self, device: usize) -> &HostArray {
        match self {
            Combined::Same(h) => h,
            Combined::PerDevice(v) => &v[device],
        }
    }
}

impl Collective {
    pub fn name(&self) -> &'static str {
        match self.kind {
            CollectiveKind::Psum => "psum",
            CollectiveKind::Pmean => "pmean",
            CollectiveKind::Pmax => "pmax",
            CollectiveKind::Pmin => "pmin",
            CollectiveKind::AllGather { .. } => "all_gather",
            CollectiveKind::PsumScatter { .. } => "psum_scatter",
            CollectiveKind::Ppermute { .. } => "ppermute",
            CollectiveKind::AllToAll { .. } => "all_to_all",
            CollectiveKind::AxisIndex => "axis_index",
        }
    }

    pub fn arity(&self) -> usize {
        match self.kind {
            CollectiveKind::AxisIndex => 0,
            _ => 1,
        }
    }

    /// psum, pmean, pmax or pmin: an elementwise fold over shards.
    pub fn is_all_reduce(&self) -> bool {
        matches!(
            self.kind,
            CollectiveKind::Psum
                | CollectiveKind::Pmean
                | CollectiveKind::Pmax
                | CollectiveKind::Pmin
        )
    }

    /// Does every shard receive the same value (so the result no longer varies across the axis)?
    pub fn result_is_invariant(&self) -> bool {
        matches!(
            self.kind,
            CollectiveKind::Psum
                | CollectiveKind::Pmean
                | CollectiveKind::Pmax
                | CollectiveKind::Pmin
                | CollectiveKind::AllGather { .. }
        )
    }

    fn bad(&self, x: &Aval, detail: String) -> Error {
        Error::BadCollective {
            op: self.name(),
            axis_name: self.axis_name.clone(),
            shape: x.shape.clone(),
            detail,
        }
    }

    /// Shape and dtype rule (per shard).
    pub fn infer(&self, ins: &[&Aval]) -> Result<Aval> {
        if ins.len() != self.arity() {
            return Err(Error::Arity {
                what: self.name().to_string(),
                expected: self.arity(),
                got: ins.len(),
            });
        }
        let n = self.size;
        let Some(x) = ins.first() else {
            return Ok(Aval::new(vec![], DType::I32));
        };
        let rank = x.rank();
        let no_bool = |hint: &'static str| -> Result<()> {
            if x.dtype == DType::Bool {
                return Err(Error::BadDType {
                    op: self.name(),
                    dtype: DType::Bool,
                    hint,
                    shapes: vec![x.shape.clone()],
                });
            }
            Ok(())
        };
        let axis_in = |a: usize, limit: usize, what: &str| -> Result<()> {
            if a >= limit {
                return Err(self.bad(
                    x,
                    format!("{what} {a} is out of range: it must be below {limit}"),
                ));
            }
            Ok(())
        };
        // The axis a scatter splits into n pieces: n entries, or (tiled) a multiple of n.
        let splits = |a: usize, what: &str, tiled: bool| -> Result<()> {
            let size = x.shape[a];
            if tiled && !size.is_multiple_of(n) {
                return Err(self.bad(
                    x,
                    format!(
                        "tiled: {what} {a} has {size} entries, not a multiple of the axis size {n}"
                    ),
                ));
            }
            if !tiled && size != n {
                return Err(self.bad(
                    x,
                    format!(
                        "{what} {a} has {size} entries but must equal the axis size {n} (or pass tiled = true)"
                    ),
                ));
            }
            Ok(())
        };
        let mut shape = x.shape.clone();
        let dtype = match &self.kind {
            CollectiveKind::Psum => {
                no_bool("cast to i32 or f32 first")?;
                x.dtype
            }
            CollectiveKind::Pmean => {
                if !x.dtype.is_float() {
                    return Err(Error::BadDType {
                        op: "pmean",
                        dtype: x.dtype,
                        hint: "pmean averages floats: cast to f32 first",
                        shapes: vec![x.shape.clone()],
                    });
                }
                x.dtype
            }
            CollectiveKind::Pmax | CollectiveKind::Pmin => x.dtype,
            CollectiveKind::AllGather { axis, tiled } => {
                if *tiled {
                    axis_in(*axis, rank, "axis")?;
                    shape[*axis] *= n;
                } else {
                    axis_in(*axis, rank + 1, "axis")?;
                    shape.insert(*axis, n);
                }
                x.dtype
            }
            CollectiveKind::PsumScatter { dim, tiled } => {
                no_bool("cast to i32 or f32 first")?;
                axis_in(*dim, rank, "scatter_dimension")?;
                splits(*dim, "dimension", *tiled)?;
                if *tiled {
                    shape[*dim] /= n;
                } else {
                    shape.remove(*dim);
                }
                x.dtype
            }
            CollectiveKind::Ppermute { perm } => {
                let mut src_seen = vec![false; n];
                let mut dst_seen = vec![false; n];
                for &(s, d) in perm {
                    if s >= n || d >= n {
                        return Err(
                            self.bad(x, format!("pair ({s}, {d}) names a shard outside 0..{n}"))
                        );
                    }
                    if std::mem::replace(&mut src_seen[s], true) {
                        return Err(self.bad(x, format!("shard {s} is a source twice")));
                    }
                    if std::mem::replace(&mut dst_seen[d], true) {
                        return Err(self.bad(x, format!("shard {d} is a destination twice")));
                    }
                }
                x.dtype
            }
            CollectiveKind::AllToAll {
                split_axis,
                concat_axis,
                tiled,
            } => {
                axis_in(*split_axis, rank, "split_axis")?;
                splits(*split_axis, "split_axis", *tiled)?;
                // Untiled, concat_axis indexes the shape without split_axis plus the new axis: also
                // below the rank.
                axis_in(*concat_axis, rank, "concat_axis")?;
                if *tiled {
                    shape[*split_axis] /= n;
                    shape[*concat_axis] *= n;
                } else {
                    shape.remove(*split_axis);
                    shape.insert(*concat_axis, n);
                }
                x.dtype
            }
            CollectiveKind::AxisIndex => unreachable!("arity 0 handled above"),
        };
        Ok(Aval::new(shape, dtype))
    }

    /// Combine the operands of all shards (`parts[i]` from shard `i`, each of the operand's aval)
    /// into what each shard receives. `out` is the result of [`Collective::infer`].
    pub fn combine(&self, parts: Vec<HostArray>, out: &Aval) -> Combined {
        let n = parts.len();
        match &self.kind {
            CollectiveKind::Psum => Combined::Same(reduce_parts(parts, Fold::Sum)),
            CollectiveKind::Pmean => {
                let mut s = reduce_parts(parts, Fold::Sum);
                match &mut s.data {
                    HostData::F32(v) => v.iter_mut().for_each(|x| *x /= n as f32),
                    HostData::F64(v) => v.iter_mut().for_each(|x| *x /= n as f64),
                    _ => {}
                }
                Combined::Same(s)
            }
            CollectiveKind::Pmax => Combined::Same(reduce_parts(parts, Fold::Max)),
            CollectiveKind::Pmin => Combined::Same(reduce_parts(parts, Fold::Min)),
            CollectiveKind::AllGather { axis, tiled } => {
                // Stacking is concatenation of the operands seen with a unit axis at `axis`.
                let lifted: Vec<HostArray> = if *tiled {
                    Vec::new()
                } else {
                    parts
                        .iter()
                        .map(|p| {
                            let mut shape = p.shape.clone();
                            shape.insert(*axis, 1);
                            HostArray {
                                shape,
                                data: p.data.clone(),
                            }
                        })
                        .collect()
                };
                let refs: Vec<&HostArray> = if *tiled {
                    parts.iter().collect()
                } else {
                    lifted.iter().collect()
                };
                Combined::Same(concat_axis(&refs, *axis))
            }
            CollectiveKind::PsumScatter { dim, tiled } => {
                let sum = reduce_parts(parts, Fold::Sum);
                let block = if *tiled { sum.shape[*dim] / n } else { 1 };
                Combined::PerDevice(
                    (0..n)
                        .map(|i| {
                            let mut b = take_block(&sum, *dim, i * block, block);
                            b.shape = out.shape.clone();
                            b
                        })
                        .collect(),
                )
            }
            CollectiveKind::Ppermute { perm } => {
                let mut outs: Vec<HostArray> = (0..n)
                    .map(|_| HostArray::full_checked(Scalar::F32(0.0).cast(out.dtype), &out.shape))
                    .collect();
                for &(s, d) in perm {
                    outs[d] = parts[s].clone();
                }
                Combined::PerDevice(outs)
            }
            CollectiveKind::AllToAll {
                split_axis,
                concat_axis: cat,
                tiled,
            } => {
                let chunk = parts[0].shape[*split_axis] / n;
                Combined::PerDevice(
                    (0..n)
                        .map(|i| {
                            // Chunk i of every shard, in shard order.
                            let pieces: Vec<HostArray> = parts
                                .iter()
                                .map(|p| {
                                    let mut b = take_block(p, *split_axis, i * chunk, chunk);
                                    if !*tiled {
                                        // drop the unit split axis, add a unit concat axis
                                        b.shape.remove(*split_axis);
                                        b.shape.insert(*cat, 1);
                                    }
                                    b
                                })
                                .collect();
                            concat_axis(&pieces.iter().collect::<Vec<_>>(), *cat)
                        })
                        .collect(),
                )
            }
            CollectiveKind::AxisIndex => Combined::PerDevice(
                (0..n)
                    .map(|i| HostArray::scalar(Scalar::I32(i as i32)))
                    .collect(),
            ),
        }
    }
}

#[derive(Clone, Copy)]
enum Fold {
    Sum,
    Max,
    Min,
}

/// Elementwise fold of equally shaped operands, in operand order (deterministic). Integer sums
/// wrap, as on the device; float max/min propagate NaN like the reference interpreter's.
fn reduce_parts(parts: Vec<HostArray>, fold: Fold) -> HostArray {
    let shape = parts[0].shape.clone();
    macro_rules! slices {
        ($variant:ident) => {
            parts
                .iter()
                .map(|p| match &p.data {
                    HostData::$variant(v) => v.as_slice(),
                    _ => unreachable!("operands share one dtype"),
                })
                .collect::<Vec<_>>()
        };
    }
    let data = match &parts[0].data {
        HostData::F32(_) => HostData::F32(fold_numeric(&slices!(F32), fold)),
        HostData::I32(_) => HostData::I32(fold_numeric(&slices!(I32), fold)),
        HostData::U32(_) => HostData::U32(fold_numeric(&slices!(U32), fold)),
        HostData::F64(_) => HostData::F64(fold_numeric(&slices!(F64), fold)),
        HostData::Bool(_) => HostData::Bool(match fold {
            Fold::Min => fold_all(&slices!(Bool), |x: bool, y: bool| x & y),
            Fold::Sum | Fold::Max => fold_all(&slices!(Bool), |x: bool, y: bool| x | y),
        }),
    };
    HostArray { shape, data }
}

/// The numeric types an all-reduce folds (f64 only on the host: `cpu` devices).
trait Numeric: Copy + Default + Send + Sync + PartialOrd + bytemuck::Pod {
    fn add(self, o: Self) -> Self;
    fn max_of(self, o: Self) -> Self;
    fn min_of(self, o: Self) -> Self;
}

macro_rules! numeric_int {
    ($t:ty) => {
        impl Numeric for $t {
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn max_of(self, o: Self) -> Self {
                self.max(o)
            }
            fn min_of(self, o: Self) -> Self {
                self.min(o)
            }
        }
    };
}
numeric_int!(i32);
numeric_int!(u32);

macro_rules! numeric_float {
    ($t:ty) => {
        impl Numeric for $t {
            fn add(self, o: Self) -> Self {
                self + o
            }
            // NaN propagates, as jnp.maximum / lax.pmax on JAX's backends.
            fn max_of(self, o: Self) -> Self {
                super::elementwise::nan_max(self, o)
            }
            fn min_of(self, o: Self) -> Self {
                super::elementwise::nan_min(self, o)
            }
        }
    };
}
numeric_float!(f32);
numeric_float!(f64);

fn fold_numeric<T: Numeric>(parts: &[&[T]], fold: Fold) -> Vec<T> {
    let mut out = vec![T::default(); parts[0].len()];
    fold_numeric_into(&mut out, parts, fold);
    out
}

fn fold_numeric_into<T: Numeric>(out: &mut [T], parts: &[&[T]], fold: Fold) {
    match fold {
        Fold::Sum => fold_into(out, parts, T::add),
        Fold::Max => fold_into(out, parts, T::max_of),
        Fold::Min => fold_into(out, parts, T::min_of),
    }
}

/// `fold_into` a new vector.
fn fold_all<T: Copy + Default + Send + Sync>(
    parts: &[&[T]],
    f: impl Fn(T, T) -> T + Copy + Send + Sync,
) -> Vec<T> {
    let mut out = vec![T::default(); parts[0].len()];
    fold_into(&mut out, parts, f);
    out
}

/// `out[i] = f(...f(f(parts[0][i], parts[1][i]), parts[2][i])...)`. The operand order is fixed per
/// element, so splitting the range across threads changes no result bit.
fn fold_into<T: Copy + Send + Sync>(
    out: &mut [T],
    parts: &[&[T]],
    f: impl Fn(T, T) -> T + Copy + Send + Sync,
) {
    // Chunked so each chunk of the result stays in cache while every operand is added.
    const CHUNK: usize = 16 * 1024;
    let run = |acc: &mut [T], base: usize| {
        for (c, a) in acc.chunks_mut(CHUNK).enumerate() {
            let start = base + c * CHUNK;
            let end = start + a.len();
            a.copy_from_slice(&parts[0][start..end]);
            for o in &parts[1..] {
                for (x, y) in a.iter_mut().zip(&o[start..end]) {
                    *x = f(*x, *y);
                }
            }
        }
    };
    // Large folds use a second core: the host combine is the bandwidth-bound heart of psum.
    #[cfg(not(target_arch = "wasm32"))]
    if out.len() >= 1 << 20 {
        let mid = out.len() / 2;
        let (lo, hi) = out.split_at_mut(mid);
        std::thread::scope(|s| {
            s.spawn(|| run(hi, mid));
            run(lo, 0);
        });
        return;
    }
    run(out, 0);
}

impl Collective {
    /// psum / pmean / pmax / pmin straight from device bytes (`parts[i]`: shard `i`'s operand as
    /// stored on its device; each is read once, with no host copy first) into `scratch`, which
    /// ends up holding the result's 32-bit words (reused between calls: no fresh memory to fault
    /// in). False, with nothing done, for other collectives and for bool operands (use
    /// [`Collective::combine`]).
    pub fn all_reduce_into(&self, parts: &[&[u8]], out: &Aval, scratch: &mut Vec<u32>) -> bool {
        let fold = match self.kind {
            CollectiveKind::Psum | CollectiveKind::Pmean => Fold::Sum,
            CollectiveKind::Pmax => Fold::Max,
            CollectiveKind::Pmin => Fold::Min,
            _ => return false,
        };
        fn run<T: Numeric>(parts: &[&[u8]], fold: Fold, out: &mut [T]) {
            let owned: Vec<std::borrow::Cow<'_, [T]>> = parts
                .iter()
                .map(|b| match bytemuck::try_cast_slice::<u8, T>(b) {
                    Ok(s) => std::borrow::Cow::Borrowed(s),
                    // Mapped ranges are aligned; copy only if one ever is not.
                    Err(_) => std::borrow::Cow::Owned(bytemuck::pod_collect_to_vec(b)),
                })
                .collect();
            let refs: Vec<&[T]> = owned.iter().map(|c| c.as_ref()).collect();
            fold_numeric_into(out, &refs, fold);
        }
        scratch.clear();
        scratch.resize(out.size(), 0);
        match out.dtype {
            DType::F32 => {
                let v: &mut [f32] = bytemuck::cast_slice_mut(scratch.as_mut_slice());
                run(parts, fold, v);
                if self.kind == CollectiveKind::Pmean {
                    let d = parts.len() as f32;
                    v.iter_mut().for_each(|x| *x /= d);
                }
            }
            DType::I32 => run::<i32>(
                parts,
                fold,
                bytemuck::cast_slice_mut(scratch.as_mut_slice()),
            ),
            DType::U32 => run::<u32>(parts, fold, scratch),
            // Device bytes are never f64 (devices refuse it).
            DType::Bool | DType::F64 => return false,
        }
        true
    }
}

/// `(outer, dim, inner)` view of `shape` around `axis`.
fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

/// Entries `start..start + len` of `x` along `axis` (contiguous block copies).
pub fn take_block(x: &HostArray, axis: usize, start: usize, len: usize) -> HostArray {
    let (outer, dim, inner) = split_at_axis(&x.shape, axis);
    let mut shape = x.shape.clone();
    shape[axis] = len;
    macro_rules! blocks {
        ($v:expr, $variant:ident) => {{
            let mut out = Vec::with_capacity(outer * len * inner);
            for o in 0..outer {
                let s = (o * dim + start) * inner;
                out.extend_from_slice(&$v[s..s + len * inner]);
            }
            HostData::$variant(out)
        }};
    }
    let data = match &x.data {
        HostData::F32(v) => blocks!(v, F32),
        HostData::I32(v) => blocks!(v, I32),
        HostData::U32(v) => blocks!(v, U32),
        HostData::Bool(v) => blocks!(v, Bool),
        HostData::F64(v) => blocks!(v, F64),
    };
    HostArray { shape, data }
}

/// Concatenate equally typed arrays along `axis` (all other dimensions equal).
pub fn concat_axis(parts: &[&HostArray], axis: usize) -> HostArray {
    let mut shape = parts[0].shape.clone();
    shape[axis] = parts.iter().map(|p| p.shape[axis]).sum();
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    macro_rules! cat {
        ($variant:ident) => {{
            let srcs: Vec<&[_]> = parts
                .iter()
                .map(|p| match &p.data {
                    HostData::$variant(v) => v.as_slice(),
                    _ => unreachable!("parts share one dtype"),
                })
                .collect();
            let mut out = Vec::with_capacity(outer * shape[axis] * inner);
            for o in 0..outer {
                for (p, s) in parts.iter().zip(&srcs) {
                    let run = p.shape[axis] * inner;
                    out.extend_from_slice(&s[o * run..(o + 1) * run]);
                }
            }
            HostData::$variant(out)
        }};
    }
    let data = match &parts[0].data {
        HostData::F32(_) => cat!(F32),
        HostData::I32(_) => cat!(I32),
        HostData::U32(_) => cat!(U32),
        HostData::Bool(_) => cat!(Bool),
        HostData::F64(_) => cat!(F64),
    };
    HostArray { shape, data }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        self.params(f)
    }
}

impl Collective {
    /// The parameters as JAX prints them.
    fn params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = &self.axis_name;
        match &self.kind {
            CollectiveKind::AllGather { axis, tiled } => {
                write!(f, "[axis_name={a} axis={axis} tiled={tiled}]")
            }
            CollectiveKind::PsumScatter { dim, tiled } => {
                write!(f, "[axis_name={a} scatter_dimension={dim} tiled={tiled}]")
            }
            CollectiveKind::Ppermute { perm } => write!(f, "[axis_name={a} perm={perm:?}]"),
            CollectiveKind::AllToAll {
                split_axis,
                concat_axis,
                tiled,
            } => write!(
                f,
                "[axis_name={a} split_axis={split_axis} concat_axis={concat_axis} tiled={tiled}]"
            ),
            _ => write!(f, "[axis_name={a}]"),
        }
    }
}

// ---- batching rule ------------------------------------------------------------------------------

/// Collectives under `vmap`. Over another axis (an enclosing `pmap`'s), the collective runs as is
/// with its axis parameters shifted past the batch axis. Over the vmapped axis itself, the batch
/// axis *is* the axis of shards, so the collective becomes local array work along it: psum a sum
/// over the batch axis (unbatched afterwards: every example sees the same value), all_gather the
/// batch axis moved into place, ppermute a gather along it, and so on.
fn batch(c: &Collective, ins: &[super::Batched], ctx: &super::BatchCtx<'_>) -> super::Batched {
    use super::Prim;
    use crate::tensor::Tensor;
    let b = ctx.size;
    if Some(c.axis_name.as_str()) != ctx.axis_name {
        let kind = match &c.kind {
            CollectiveKind::AllGather { axis, tiled } => CollectiveKind::AllGather {
                axis: axis + 1,
                tiled: *tiled,
            },
            CollectiveKind::PsumScatter { dim, tiled } => CollectiveKind::PsumScatter {
                dim: dim + 1,
                tiled: *tiled,
            },
            CollectiveKind::AllToAll {
                split_axis,
                concat_axis,
                tiled,
            } => CollectiveKind::AllToAll {
                split_axis: split_axis + 1,
                concat_axis: concat_axis + 1,
                tiled: *tiled,
            },
            k => k.clone(),
        };
        let prim = Prim::Collective(Collective {
            axis_name: c.axis_name.clone(),
            size: c.size,
            kind,
        });
        let x = super::with_batch(&ins[0], b);
        return (Tensor::apply(prim, &[&x]), true);
    }
    if c.kind == CollectiveKind::AxisIndex {
        return (Tensor::iota(DType::I32, &[b], 0), true);
    }
    let x = super::with_batch(&ins[0], b);
    let rank = x.ndim() - 1; // an example's rank
    match &c.kind {
        CollectiveKind::Psum => (x.sum(0, false), false),
        // The sum divided by n, as pmap's pmean does (not times 1/n: the bits must agree).
        CollectiveKind::Pmean => (x.sum(0, false) / b as f32, false),
        CollectiveKind::Pmax => (x.max(0, false), false),
        CollectiveKind::Pmin => (x.min(0, false), false),
        CollectiveKind::AllGather { axis, tiled } => {
            let moved = super::move_axis(&x, 0, *axis);
            if *tiled {
                // (…, B, d, …) -> (…, B·d, …)
                let mut shape = x.shape()[1..].to_vec();
                shape[*axis] *= b;
                (moved.reshape_exact(&shape), false)
            } else {
                (moved, false)
            }
        }
        CollectiveKind::PsumScatter { dim, tiled } => {
            let s = x.sum(0, false);
            if *tiled {
                let mut split = s.shape().to_vec();
                let c = split[*dim] / b;
                split.splice(*dim..=*dim, [b, c]);
                (super::move_axis(&s.reshape_exact(&split), *dim, 0), true)
            } else {
                (super::move_axis(&s, *dim, 0), true)
            }
        }
        CollectiveKind::Ppermute { perm } => {
            // Example dst reads example src; the others read an appended row of zeros.
            let mut src = vec![b as i32; b];
            for &(s, d) in perm {
                src[d] = s as i32;
            }
            let mut zshape = x.shape().to_vec();
            zshape[0] = 1;
            let zeros = Tensor::zeros(&zshape, x.dtype());
            let ext = Tensor::apply(
                Prim::Layout(LayoutOp::Concatenate { axis: 0 }),
                &[&x, &zeros],
            );
            let idx = Tensor::from_vec(src, &[b]);
            (
                Tensor::apply(Prim::Indexing(IndexOp::Take { axis: 0 }), &[&ext, &idx]),
                true,
            )
        }
        CollectiveKind::AllToAll {
            split_axis,
            concat_axis,
            tiled,
        } => {
            let (s, cat) = (*split_axis, *concat_axis);
            if !*tiled {
                // x axes: 0 = source example j, s+1 = destination example i.
                let mut rest: Vec<usize> = (1..=rank).filter(|&a| a != s + 1).collect();
                rest.insert(cat, 0);
                let mut perm = vec![s + 1];
                perm.extend(rest);
                (x.transpose(&perm), true)
            } else {
                // Split axis s into (B destination, chunk), then bring the destination to the
                // front and the source next to the concat axis, and merge those two.
                let shape = x.shape().to_vec();
                let chunk = shape[s + 1] / b;
                let mut split = shape.clone();
                split.splice(s + 1..=s + 1, [b, chunk]);
                let xs = x.reshape_exact(&split);
                let pos = |a: usize| if a < s { a + 1 } else { a + 2 }; // a == s: the chunk axis
                let mut perm = vec![s + 1];
                for a in 0..rank {
                    if a == cat {
                        perm.push(0);
                    }
                    perm.push(pos(a));
                }
                let t = xs.transpose(&perm);
                let mut out_shape = vec![b];
                for a in 0..rank {
                    let d = if a == s { chunk } else { shape[a + 1] };
                    out_shape.push(if a == cat { d * b } else { d });
                }
                (t.reshape_exact(&out_shape), true)
            }
        }
        CollectiveKind::AxisIndex => unreachable!("handled above"),
    }
}

// ---- VJP rule -----------------------------------------------------------------------------------

/// Collectives transpose into collectives: psum's cotangent is summed over the shards again
/// (every shard's value reached every shard), all_gather and psum_scatter transpose into each
/// other, ppermute into the inverse permutation, all_to_all into the swapped one.
fn vjp(
    c: &Collective,
    ins: &[crate::tensor::Tensor],
    out: &crate::tensor::Tensor,
    ct: &crate::tensor::Tensor,
) -> super::Cotangents {
    use super::Prim;
    use crate::tensor::Tensor;
    let Some(x) = ins.first() else {
        return vec![];
    };
    if !x.dtype().is_float() {
        return vec![None];
    }
    let again = |kind: CollectiveKind, t: &Tensor| {
        Tensor::apply(
            Prim::Collective(Collective {
                axis_name: c.axis_name.clone(),
                size: c.size,
                kind,
            }),
            &[t],
        )
    };
    let g = match &c.kind {
        CollectiveKind::Psum => again(CollectiveKind::Psum, ct),
        CollectiveKind::Pmean => again(CollectiveKind::Pmean, ct),
        CollectiveKind::Pmax | CollectiveKind::Pmin => {
            // Every shard's loss saw the winner's value: the winner gets the summed cotangent,
            // shared evenly among shards tied for the result.
            let hit = x.eq(out).cast(x.dtype());
            &(&again(CollectiveKind::Psum, ct) * &hit) / &again(CollectiveKind::Psum, &hit)
        }
        CollectiveKind::AllGather { axis, tiled } => again(
            CollectiveKind::PsumScatter {
                dim: *axis,
                tiled: *tiled,
            },
            ct,
        ),
        CollectiveKind::PsumScatter { dim, tiled } => again(
            CollectiveKind::AllGather {
                axis: *dim,
                tiled: *tiled,
            },
            ct,
        ),
        CollectiveKind::Ppermute { perm } => again(
            CollectiveKind::Ppermute {
                perm: perm.iter().map(|&(s, d)| (d, s)).collect(),
            },
            ct,
        ),
        CollectiveKind::AllToAll {
            split_axis,
            concat_axis,
            tiled,
        } => again(
            CollectiveKind::AllToAll {
                split_axis: *concat_axis,
                concat_axis: *split_axis,
                tiled: *tiled,
            },
            ct,
        ),
        CollectiveKind::AxisIndex => return vec![],
    };
    vec![Some(g)]
}

impl Rules for Collective {
    fn name(&self) -> &'static str {
        Collective::name(self)
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.params(f)
    }

    fn arity(&self) -> Option<usize> {
        Some(Collective::arity(self))
    }

    fn result_count(&self) -> usize {
        1
    }

    fn infer(&self, ins: &[&Aval]) -> Result<Vec<Aval>> {
        Ok(vec![Collective::infer(self, ins)?])
    }

    /// A single shard's view; graphs with collectives over several shards are run stage by stage
    /// by the parallel executor, and `eval_graph` refuses them.
    fn eval_cpu(&self, ins: &[&HostArray], outs: &[Aval]) -> Result<Vec<HostArray>> {
        let parts: Vec<HostArray> = ins.iter().map(|h| (*h).clone()).collect();
        Ok(vec![self.combine(parts, &outs[0]).get(0).clone()])
    }

    fn lowering(&self) -> Lowering<'_> {
        Lowering::StageBoundary
    }

    fn emit_wgsl(&self, _em: &mut Emitter<'_>, _ins: &[Var], _idx: &[String]) -> Option<Emitted> {
        None
    }

    fn batch(&self, ins: &[Batched], ctx: &BatchCtx<'_>) -> Result<Vec<Batched>> {
        single_batch(batch(self, ins, ctx))
    }

    fn vjp(&self, ins: &[Tensor], outs: &[Tensor], cts: &[Option<Tensor>]) -> Result<Cotangents> {
        single_vjp(ins, cts, |ct| vjp(self, ins, &outs[0], ct))
    }

    fn has_effect(&self) -> bool {
        false
    }
}
