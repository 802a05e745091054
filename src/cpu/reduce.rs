//! Reductions on typed slices, with the rules of `crate::ops::reduce` (`ReduceOp::combine_f64`,
//! `combine_i32`, `combine_u32`, `ArgOp::pick`).
//!
//! The reduced axes are brought into one run (a transpose first when they are not adjacent), so
//! every reduction is `(outer, len, inner)`: `out[o, j] = fold_r x[o, r, j]`. Floats accumulate in
//! f64 like the interpreter. Each output folds its elements in the interpreter's order, so results
//! are bit-identical, except full-row sums (`inner == 1`), which use eight accumulators and, for
//! long rows, several threads: those differ from the interpreter by f64 rounding only (relative
//! 1e-15 of `Σ|x|` before the final rounding to the output dtype). Max/min keep the order, so the
//! first NaN wins as in the interpreter.

use super::layout::{View, gather};
use super::{par_fill_weighted, threads_for};
use crate::dtype::{DType, Scalar};
use crate::host::{HostArray, HostData, strides};
use crate::ops::{ArgOp, ReduceOp};

/// The reduction's `(outer, len, inner)` view of `x`, transposing it when the axes are not
/// adjacent (then `Some(data)` holds the transposed copy).
fn canonical(x: &HostArray, axes: &[usize]) -> (Option<HostData>, usize, usize, usize) {
    let mut axes = axes.to_vec();
    axes.sort_unstable();
    let r = x.shape.len();
    let adjacent = axes.windows(2).all(|w| w[1] == w[0] + 1);
    let (data, shape, a0, a1) = if adjacent {
        let a0 = axes.first().copied().unwrap_or(r);
        (None, x.shape.clone(), a0, a0 + axes.len())
    } else {
        let kept: Vec<usize> = (0..r).filter(|a| !axes.contains(a)).collect();
        let perm: Vec<usize> = kept.iter().chain(&axes).copied().collect();
        let st = strides(&x.shape);
        let v = View {
            shape: perm.iter().map(|&p| x.shape[p]).collect(),
            strides: perm.iter().map(|&p| st[p]).collect(),
            base: 0,
        };
        let data = super::layout::typed!(&x.data, |s| gather(s, &v));
        (Some(data), v.shape, kept.len(), r)
    };
    let prod = |s: &[usize]| s.iter().product::<usize>();
    (
        data,
        prod(&shape[..a0]),
        prod(&shape[a0..a1]),
        prod(&shape[a1..]),
    )
}

/// A reduction over `axes` (`None` for bool, which has no reduction).
pub(crate) fn reduce(op: ReduceOp, x: &HostArray, axes: &[usize]) -> Option<HostData> {
    let (moved, outer, len, inner) = canonical(x, axes);
    let data = moved.as_ref().unwrap_or(&x.data);
    let shape = (outer, len, inner);
    Some(match data {
        HostData::F32(v) => HostData::F32(fold_f64(op, v, shape, |a| a as f64, |s| s as f32)),
        HostData::F64(v) => HostData::F64(fold_f64(op, v, shape, |a| a, |s| s)),
        HostData::I32(v) => {
            let Scalar::I32(id) = op.identity(DType::I32) else {
                return None;
            };
            HostData::I32(fold_int(v, shape, id, |a, b| op.combine_i32(a, b)))
        }
        HostData::U32(v) => {
            let Scalar::U32(id) = op.identity(DType::U32) else {
                return None;
            };
            HostData::U32(fold_int(v, shape, id, |a, b| op.combine_u32(a, b)))
        }
        HostData::Bool(_) => return None,
    })
}

/// Float reduction in f64: `to` widens an element, `from` rounds the result back.
fn fold_f64<T: Copy + Sync, R: Copy + Default + Send>(
    op: ReduceOp,
    x: &[T],
    (outer, len, inner): (usize, usize, usize),
    to: impl Fn(T) -> f64 + Sync,
    from: impl Fn(f64) -> R + Sync,
) -> Vec<R> {
    let id = op.identity(DType::F64).as_f64();
    let mut out = vec![R::default(); outer * inner];
    if inner == 1 {
        par_fill_weighted(&mut out, len, |at, o| {
            for (k, r) in o.iter_mut().enumerate() {
                let row = &x[(at + k) * len..(at + k + 1) * len];
                *r = from(match op {
                    ReduceOp::Sum => sum_row(row, &to),
                    _ => row.iter().fold(id, |a, &v| op.combine_f64(a, to(v))),
                });
            }
        });
    } else {
        columns(
            &mut out,
            x,
            len,
            inner,
            id,
            |a, v| op.combine_f64(a, to(v)),
            &from,
        );
    }
    out
}

/// Integer reduction (wrapping: the order does not change the result).
fn fold_int<T: Copy + Default + Send + Sync>(
    x: &[T],
    (outer, len, inner): (usize, usize, usize),
    id: T,
    combine: impl Fn(T, T) -> T + Sync,
) -> Vec<T> {
    let mut out = vec![T::default(); outer * inner];
    if inner == 1 {
        par_fill_weighted(&mut out, len, |at, o| {
            for (k, r) in o.iter_mut().enumerate() {
                let row = &x[(at + k) * len..(at + k + 1) * len];
                *r = row.iter().fold(id, |a, &v| combine(a, v));
            }
        });
    } else {
        columns(&mut out, x, len, inner, id, &combine, |a| a);
    }
    out
}

/// `out[o·inner + j] = from(fold_r combine(acc, x[(o·len + r)·inner + j]))`, rows in order (the
/// interpreter's order), on several threads over the outputs when large.
fn columns<T: Copy + Sync, A: Copy + Send + Sync, R: Copy + Send>(
    out: &mut [R],
    x: &[T],
    len: usize,
    inner: usize,
    id: A,
    combine: impl Fn(A, T) -> A + Sync,
    from: impl Fn(A) -> R + Sync,
) {
    par_fill_weighted(out, len, |at, o| {
        let mut p = 0;
        let mut acc: Vec<A> = Vec::new();
        while p < o.len() {
            let (oi, j0) = ((at + p) / inner, (at + p) % inner);
            let j1 = inner.min(j0 + o.len() - p);
            acc.clear();
            acc.resize(j1 - j0, id);
            for r in 0..len {
                let row = &x[(oi * len + r) * inner + j0..(oi * len + r) * inner + j1];
                for (a, &v) in acc.iter_mut().zip(row) {
                    *a = combine(*a, v);
                }
            }
            for (d, &a) in o[p..p + (j1 - j0)].iter_mut().zip(&acc) {
                *d = from(a);
            }
            p += j1 - j0;
        }
    });
}

/// Sum of a row in f64 from +0.0: eight accumulators (vectorizable), and for long rows one part per
/// thread, the parts added in order.
fn sum_row<T: Copy + Sync>(row: &[T], to: &(impl Fn(T) -> f64 + Sync)) -> f64 {
    let t = threads_for(row.len());
    if t <= 1 {
        return sum8(row, to);
    }
    let part = row.len().div_ceil(t);
    std::thread::scope(|s| {
        let handles: Vec<_> = row
            .chunks(part)
            .skip(1)
            .map(|c| s.spawn(move || sum8(c, to)))
            .collect();
        let first = sum8(&row[..part.min(row.len())], to);
        handles
            .into_iter()
            .fold(first, |a, h| a + h.join().unwrap_or(f64::NAN))
    })
}

fn sum8<T: Copy>(row: &[T], to: &impl Fn(T) -> f64) -> f64 {
    let mut acc = [0f64; 8];
    let chunks = row.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += to(v);
        }
    }
    let mut s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for &v in tail {
        s += to(v);
    }
    s
}

/// argmax / argmin along `axis` with `ArgOp::pick`, the interpreter's rule.
pub(crate) fn argreduce(op: ArgOp, x: &HostArray, axis: usize) -> HostData {
    let (_, outer, len, inner) = canonical(x, &[axis]);
    let mut out = vec![0i32; outer * inner];
    macro_rules! pick {
        ($v:expr, $to:expr) => {{
            let v = $v;
            par_fill_weighted(&mut out, len, |at, o| {
                for (k, r) in o.iter_mut().enumerate() {
                    let (oi, j) = ((at + k) / inner, (at + k) % inner);
                    let base = oi * len * inner + j;
                    *r = op.pick((0..len).map(|i| $to(v[base + i * inner]))) as i32;
                }
            })
        }};
    }
    match &x.data {
        HostData::F32(v) => pick!(v, |a: f32| a as f64),
        HostData::F64(v) => pick!(v, |a: f64| a),
        HostData::I32(v) => pick!(v, |a: i32| a as f64),
        HostData::U32(v) => pick!(v, |a: u32| a as f64),
        HostData::Bool(v) => pick!(v, |a: bool| a as u8 as f64),
    }
    HostData::I32(out)
}
