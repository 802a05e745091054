//! Elementwise primitives on typed slices. Every value comes from the op's row in
//! `crate::ops::elementwise` (`UnaryOp::eval_f32`, `BinaryOp::eval_i32`, ... are generated from
//! the rows), the functions the reference interpreter calls through `Scalar`: the results are the
//! same bits. `per_unary!`/`per_binary!` (also generated from the rows) compile a loop per op.

use super::par_fill;
use crate::dtype::{DType, Scalar};
use crate::host::HostData;
use crate::ops::elementwise::{per_binary, per_unary};
use crate::ops::{BinaryOp, UnaryOp};

/// `out[i] = f(a[i])`, on several threads when large.
fn map1<A: Copy + Sync, R: Copy + Default + Send>(a: &[A], f: impl Fn(A) -> R + Sync) -> Vec<R> {
    let mut out = vec![R::default(); a.len()];
    par_fill(&mut out, |at, o| {
        let a = &a[at..at + o.len()];
        for (r, &x) in o.iter_mut().zip(a) {
            *r = f(x);
        }
    });
    out
}

/// `out[i] = f(a[i], b[i])`.
fn map2<A: Copy + Sync, B: Copy + Sync, R: Copy + Default + Send>(
    a: &[A],
    b: &[B],
    f: impl Fn(A, B) -> R + Sync,
) -> Vec<R> {
    let mut out = vec![R::default(); a.len()];
    par_fill(&mut out, |at, o| {
        let (a, b) = (&a[at..at + o.len()], &b[at..at + o.len()]);
        for ((r, &x), &y) in o.iter_mut().zip(a).zip(b) {
            *r = f(x, y);
        }
    });
    out
}

/// `out[i] = f(a[i], b[i], c[i])`.
fn map3<A: Copy + Sync, B: Copy + Sync, C: Copy + Sync, R: Copy + Default + Send>(
    a: &[A],
    b: &[B],
    c: &[C],
    f: impl Fn(A, B, C) -> R + Sync,
) -> Vec<R> {
    let mut out = vec![R::default(); a.len()];
    par_fill(&mut out, |at, o| {
        let r = at..at + o.len();
        let (a, b, c) = (&a[r.clone()], &b[r.clone()], &c[r]);
        for (((r, &x), &y), &z) in o.iter_mut().zip(a).zip(b).zip(c) {
            *r = f(x, y, z);
        }
    });
    out
}

/// A unary op (`None`: a dtype the op has no rule for, left to the interpreter).
pub(crate) fn unary(op: UnaryOp, x: &HostData) -> Option<HostData> {
    if op.is_predicate() {
        return Some(HostData::Bool(match x {
            HostData::F32(v) => per_unary!(op, |o| map1(v, |a| o.pred_f32(a))),
            HostData::F64(v) => map1(v, |a| op.pred_f64(a)),
            other => vec![op.pred_other(); other.len()],
        }));
    }
    Some(match x {
        HostData::F32(v) => HostData::F32(per_unary!(op, |o| map1(v, |a| o.eval_f32(a)))),
        HostData::F64(v) => HostData::F64(per_unary!(op, |o| map1(v, |a| o.eval_f64(a)))),
        HostData::I32(v) => HostData::I32(map1(v, |a| op.eval_i32(a))),
        HostData::U32(v) => HostData::U32(map1(v, |a| op.eval_u32(a))),
        HostData::Bool(v) => HostData::Bool(map1(v, |a| op.eval_bool(a))),
    })
}

/// A binary op on operands of one dtype and length.
pub(crate) fn binary(op: BinaryOp, a: &HostData, b: &HostData) -> Option<HostData> {
    use HostData as H;
    if a.len() != b.len() {
        return None;
    }
    if op.is_comparison() {
        return Some(H::Bool(match (a, b) {
            (H::F32(x), H::F32(y)) => per_binary!(op, |o| map2(x, y, |p, q| o.compare(p, q))),
            (H::F64(x), H::F64(y)) => map2(x, y, |p, q| op.compare(p, q)),
            (H::I32(x), H::I32(y)) => per_binary!(op, |o| map2(x, y, |p, q| o.compare(p, q))),
            (H::U32(x), H::U32(y)) => map2(x, y, |p, q| op.compare(p, q)),
            (H::Bool(x), H::Bool(y)) => map2(x, y, |p, q| op.compare(p, q)),
            _ => return None,
        }));
    }
    Some(match (a, b) {
        (H::F32(x), H::F32(y)) => H::F32(per_binary!(op, |o| map2(x, y, |p, q| o.eval_f32(p, q)))),
        (H::F64(x), H::F64(y)) => H::F64(per_binary!(op, |o| map2(x, y, |p, q| o.eval_f64(p, q)))),
        (H::I32(x), H::I32(y)) => H::I32(per_binary!(op, |o| map2(x, y, |p, q| o.eval_i32(p, q)))),
        (H::U32(x), H::U32(y)) => H::U32(map2(x, y, |p, q| op.eval_u32(p, q))),
        (H::Bool(x), H::Bool(y)) => H::Bool(map2(x, y, |p, q| op.eval_bool(p, q))),
        _ => return None,
    })
}

/// `select(pred, on_true, on_false)`.
pub(crate) fn select(p: &HostData, t: &HostData, f: &HostData) -> Option<HostData> {
    use HostData as H;
    let H::Bool(p) = p else { return None };
    if p.len() != t.len() || t.len() != f.len() {
        return None;
    }
    // A generic function (not a closure) so that it serves every dtype.
    fn pick<T>(p: bool, t: T, f: T) -> T {
        if p { t } else { f }
    }
    Some(match (t, f) {
        (H::F32(t), H::F32(f)) => H::F32(map3(p, t, f, pick)),
        (H::F64(t), H::F64(f)) => H::F64(map3(p, t, f, pick)),
        (H::I32(t), H::I32(f)) => H::I32(map3(p, t, f, pick)),
        (H::U32(t), H::U32(f)) => H::U32(map3(p, t, f, pick)),
        (H::Bool(t), H::Bool(f)) => H::Bool(map3(p, t, f, pick)),
        _ => return None,
    })
}

/// `fma(a, b, c)`: the interpreter's rule (`crate::ops::elementwise::fma_eval`), one rounding.
pub(crate) fn fma(a: &HostData, b: &HostData, c: &HostData) -> Option<HostData> {
    use HostData as H;
    if a.len() != b.len() || b.len() != c.len() {
        return None;
    }
    Some(match (a, b, c) {
        (H::F32(a), H::F32(b), H::F32(c)) => H::F32(map3(a, b, c, f32::mul_add)),
        (H::F64(a), H::F64(b), H::F64(c)) => H::F64(map3(a, b, c, f64::mul_add)),
        _ => return None,
    })
}

/// `convert_element_type` with [`Scalar::cast`]'s rules, element by element on unboxed values.
pub(crate) fn cast(x: &HostData, to: DType) -> HostData {
    if x.dtype() == to {
        return x.clone();
    }
    // The source is known per arm: `Scalar::cast` inlines to one conversion there.
    macro_rules! from {
        ($v:expr, $wrap:ident) => {{
            let v = $v;
            match to {
                DType::F32 => HostData::F32(map1(v, |a| match Scalar::$wrap(a).cast(to) {
                    Scalar::F32(r) => r,
                    _ => 0.0,
                })),
                DType::F64 => HostData::F64(map1(v, |a| Scalar::$wrap(a).as_f64())),
                DType::I32 => HostData::I32(map1(v, |a| match Scalar::$wrap(a).cast(to) {
                    Scalar::I32(r) => r,
                    _ => 0,
                })),
                DType::U32 => HostData::U32(map1(v, |a| match Scalar::$wrap(a).cast(to) {
                    Scalar::U32(r) => r,
                    _ => 0,
                })),
                DType::Bool => HostData::Bool(map1(v, |a| match Scalar::$wrap(a).cast(to) {
                    Scalar::Bool(r) => r,
                    _ => false,
                })),
            }
        }};
    }
    match x {
        HostData::F32(v) => from!(v, F32),
        HostData::F64(v) => from!(v, F64),
        HostData::I32(v) => from!(v, I32),
        HostData::U32(v) => from!(v, U32),
        HostData::Bool(v) => from!(v, Bool),
    }
}

/// A binary op of an array and one value broadcast over it (`left`: the value is the left
/// operand), without materializing the broadcast.
pub(crate) fn binary_splat(op: BinaryOp, x: &HostData, s: Scalar, left: bool) -> Option<HostData> {
    use HostData as H;
    // `$f(p, q)` with the splat's value on its side, one loop per op for f32 and i32.
    macro_rules! side {
        ($v:expr, $c:expr, |$p:ident, $q:ident| $f:expr) => {{
            let (v, c) = ($v, $c);
            if left {
                map1(v, |b| {
                    let ($p, $q) = (c, b);
                    $f
                })
            } else {
                map1(v, |a| {
                    let ($p, $q) = (a, c);
                    $f
                })
            }
        }};
    }
    if op.is_comparison() {
        return Some(H::Bool(match (x, s) {
            (H::F32(v), Scalar::F32(c)) => {
                per_binary!(op, |o| side!(v, c, |p, q| o.compare(p, q)))
            }
            (H::F64(v), Scalar::F64(c)) => side!(v, c, |p, q| op.compare(p, q)),
            (H::I32(v), Scalar::I32(c)) => {
                per_binary!(op, |o| side!(v, c, |p, q| o.compare(p, q)))
            }
            (H::U32(v), Scalar::U32(c)) => side!(v, c, |p, q| op.compare(p, q)),
            (H::Bool(v), Scalar::Bool(c)) => side!(v, c, |p, q| op.compare(p, q)),
            _ => return None,
        }));
    }
    Some(match (x, s) {
        (H::F32(v), Scalar::F32(c)) => {
            H::F32(per_binary!(op, |o| side!(v, c, |p, q| o.eval_f32(p, q))))
        }
        (H::F64(v), Scalar::F64(c)) => {
            H::F64(per_binary!(op, |o| side!(v, c, |p, q| o.eval_f64(p, q))))
        }
        (H::I32(v), Scalar::I32(c)) => {
            H::I32(per_binary!(op, |o| side!(v, c, |p, q| o.eval_i32(p, q))))
        }
        (H::U32(v), Scalar::U32(c)) => H::U32(side!(v, c, |p, q| op.eval_u32(p, q))),
        (H::Bool(v), Scalar::Bool(c)) => H::Bool(side!(v, c, |p, q| op.eval_bool(p, q))),
        _ => return None,
    })
}

// ---- in place -----------------------------------------------------------------------------------

/// The other operand of an in-place binary op: an array, or a splat's value.
pub(crate) enum Other<'a> {
    Arr(&'a HostData),
    Splat(Scalar),
}

fn map_inplace<T: Copy + Send>(v: &mut [T], f: impl Fn(T) -> T + Sync) {
    par_fill(v, |_, o| {
        for r in o.iter_mut() {
            *r = f(*r);
        }
    });
}

fn zip_inplace<T: Copy + Send + Sync>(v: &mut [T], y: &[T], f: impl Fn(T, T) -> T + Sync) {
    par_fill(v, |at, o| {
        let y = &y[at..at + o.len()];
        for (r, &b) in o.iter_mut().zip(y) {
            *r = f(*r, b);
        }
    });
}

/// `x = op(x)` in the operand's own buffer (floats: the chains that matter), saving an allocation
/// and its page faults. False when not covered; then `x` is untouched.
pub(crate) fn unary_inplace(op: UnaryOp, x: &mut HostData) -> bool {
    if op.is_predicate() {
        return false;
    }
    match x {
        HostData::F32(v) => per_unary!(op, |o| map_inplace(v, |a| o.eval_f32(a))),
        HostData::F64(v) => per_unary!(op, |o| map_inplace(v, |a| o.eval_f64(a))),
        _ => return false,
    }
    true
}

/// `x = op(x, other)` (`x_left`) or `x = op(other, x)` in `x`'s buffer, for float results. False
/// when not covered; then `x` is untouched.
pub(crate) fn binary_inplace(
    op: BinaryOp,
    x: &mut HostData,
    other: Other<'_>,
    x_left: bool,
) -> bool {
    if op.is_comparison() {
        return false;
    }
    macro_rules! go {
        ($v:expr, $wrap:ident, $eval:ident) => {{
            let v = $v;
            match other {
                Other::Arr(HostData::$wrap(y)) if y.len() == v.len() => per_binary!(op, |o| {
                    if x_left {
                        zip_inplace(v, y, |a, b| o.$eval(a, b))
                    } else {
                        zip_inplace(v, y, |a, b| o.$eval(b, a))
                    }
                }),
                Other::Splat(Scalar::$wrap(c)) => per_binary!(op, |o| {
                    if x_left {
                        map_inplace(v, |a| o.$eval(a, c))
                    } else {
                        map_inplace(v, |a| o.$eval(c, a))
                    }
                }),
                _ => return false,
            }
        }};
    }
    match x {
        HostData::F32(v) => go!(v, F32, eval_f32),
        HostData::F64(v) => go!(v, F64, eval_f64),
        _ => return false,
    }
    true
}
