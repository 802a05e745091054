//! [`Tensor`]: the value type user closures compute with.
//!
//! A tensor is either concrete (an [`Array`]; ops run eagerly on its device, like JAX without `jit`)
//! or traced (a variable of a graph being recorded by `jit` or a transform). One closure works both
//! ways. Ops never panic and never return `Result`: an invalid op yields a *failed* tensor that carries
//! the [`Error`]; the error propagates through later ops and is returned by the transform that traced
//! the closure, or by [`Tensor::to_array`]. So closures read like NumPy:
//!
//! ```
//! use brigade::{Tensor, Array};
//! let x = Tensor::from(Array::from_vec(vec![1.0f32, -2.0, 3.0], &[3])?);
//! let y = (&x * 2.0 + 1.0).relu().sum_all();
//! assert_eq!(y.to_array()?.to_vec::<f32>()?, vec![10.0]);
//! # Ok::<(), brigade::Error>(())
//! ```
//!
//! This file holds the value type (the struct, its conversions, inspection and creation, [`Axes`],
//! shape helpers). The rest is split by idea: `dispatch` (how applying a primitive records an
//! equation under a trace or runs eagerly), the op methods by family (`elementwise`, `reduce`,
//! `linalg`, `layout`, `indexing`; sorting lives with its primitive in `crate::ops::sort`) and
//! `operators` (the `+ - * / %` and unary `-` overloads).

use crate::ops::ElementwiseOp;
use std::rc::Rc;

use crate::array::Array;
use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::ops::Prim;
use crate::trace::graph::{Aval, Var};
use crate::trace::tracer::Trace;

mod dispatch;
mod elementwise;
mod indexing;
mod layout;
mod linalg;
mod operators;
mod reduce;

use dispatch::apply_eager_host;
pub use elementwise::select;

/// A value inside a brigade computation: concrete, traced, or failed. Cheap to clone.
#[derive(Clone)]
pub struct Tensor {
    pub(crate) repr: Rc<Repr>,
}

pub(crate) enum Repr {
    Concrete(Array),
    Traced {
        trace: Rc<Trace>,
        var: Var,
        aval: Aval,
    },
    Failed(Error),
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.repr {
            Repr::Concrete(a) => write!(f, "Tensor({a:?})"),
            Repr::Traced { aval, .. } => write!(f, "Tensor(traced {aval})"),
            Repr::Failed(e) => write!(f, "Tensor(failed: {e})"),
        }
    }
}

impl From<Array> for Tensor {
    fn from(a: Array) -> Tensor {
        Tensor {
            repr: Rc::new(Repr::Concrete(a)),
        }
    }
}
impl From<&Array> for Tensor {
    fn from(a: &Array) -> Tensor {
        Tensor::from(a.clone())
    }
}

/// How [`Tensor::take_mode`] treats indices out of range (JAX's `mode=` of `jnp.take` and
/// `x.at[idx].get`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TakeMode {
    /// An index in `[-n, 0)` counts from the end; one outside `[-n, n)` gives a fill value (NaN,
    /// `i32::MIN`, `u32::MAX`, `true`) and gets no gradient: `jnp.take`'s default
    /// ([`Tensor::take`]).
    #[default]
    Fill,
    /// Every index is clamped into `[0, n)`; negative ones give element 0.
    Clip,
    /// Every index is taken modulo `n` (Python's `%`).
    Wrap,
    /// `x[idx]` indexing ([`Tensor::index_take`]): an index in `[-n, 0)` counts from the end,
    /// and one still out of range is clamped (what XLA does with a gather promised in bounds)
    /// and gets no gradient.
    PromiseInBounds,
}

/// Axes argument of reductions: one axis, several, or all. Negative axes count from the end.
#[derive(Clone, Debug)]
pub enum Axes {
    All,
    Some(Vec<i64>),
}
impl From<i64> for Axes {
    fn from(a: i64) -> Axes {
        Axes::Some(vec![a])
    }
}
impl From<i32> for Axes {
    fn from(a: i32) -> Axes {
        Axes::Some(vec![a as i64])
    }
}
impl From<&[i64]> for Axes {
    fn from(a: &[i64]) -> Axes {
        Axes::Some(a.to_vec())
    }
}
impl<const N: usize> From<[i64; N]> for Axes {
    fn from(a: [i64; N]) -> Axes {
        Axes::Some(a.to_vec())
    }
}
impl From<Vec<i64>> for Axes {
    fn from(a: Vec<i64>) -> Axes {
        Axes::Some(a)
    }
}

/// What [`Error::TraceMismatch`] says when values of two unrelated traces meet.
pub(crate) const MIXED_TRACES: &str = "tensors from different traces were combined; pass every value the function needs as an argument or capture concrete arrays only";

/// Normalize a possibly negative axis against `rank`.
pub(crate) fn norm_axis(op: &'static str, axis: i64, shape: &[usize]) -> Result<usize> {
    let rank = shape.len() as i64;
    let a = if axis < 0 { axis + rank } else { axis };
    if a < 0 || a >= rank {
        return Err(Error::BadAxis {
            op,
            axis,
            rank: shape.len(),
            shape: shape.to_vec(),
        });
    }
    Ok(a as usize)
}

/// The product of `shape`, saturating instead of overflowing.
pub(crate) fn saturating_size(shape: &[usize]) -> usize {
    if shape.contains(&0) {
        return 0;
    }
    shape.iter().fold(1usize, |n, &d| n.saturating_mul(d))
}

/// NumPy broadcast of two shapes.
pub(crate) fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::ShapeMismatchBinaryOp {
                op,
                lhs: a.to_vec(),
                rhs: b.to_vec(),
            });
        };
    }
    Ok(out)
}

impl Tensor {
    /// A tensor that carries the error `e` instead of a value, as every op's own errors do: ops
    /// on it propagate `e`, and the call that returns it (`jit(..).call`, `to_array`, a read)
    /// fails with `e`. For a traced closure that checks its own arguments.
    ///
    /// ```
    /// use brigade::{Array, Error, Tensor, jit};
    /// let f = jit(|a: &[Tensor]| match a {
    ///     [x] => vec![x * 2.0],
    ///     _ => vec![Tensor::failed(Error::Arity { what: "arguments".into(), expected: 1, got: a.len() })],
    /// });
    /// let x = Array::from_vec(vec![1.0f32], &[1])?;
    /// assert!(matches!(f.call(&[x.clone(), x]), Err(Error::Arity { got: 2, .. })));
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn failed(e: Error) -> Tensor {
        Tensor {
            repr: Rc::new(Repr::Failed(e)),
        }
    }
    /// A failed tensor whose error also fails the trace being recorded on this thread, so that the
    /// error surfaces even when the tensor is never used (as every op's own errors do).
    pub(crate) fn failed_here(e: Error) -> Tensor {
        if let Some(tr) = crate::trace::tracer::current() {
            tr.fail(e.clone());
        }
        Tensor::failed(e)
    }
    /// The error for a traced tensor whose trace has finished (it escaped the traced function and
    /// is used later): [`Error::TraceMismatch`] naming it. `None` for every other tensor.
    pub(crate) fn stale(&self, op: &'static str) -> Option<Error> {
        match &*self.repr {
            Repr::Traced { trace, aval, .. }
                if crate::trace::tracer::depth_of(trace.id).is_none() =>
            {
                Some(Error::TraceMismatch {
                    op,
                    detail: format!(
                        "a traced tensor ({aval}) of `{}` was used after that trace finished: a traced value exists only while its function is being traced; return it from the function and use the returned Array instead of keeping the tensor outside",
                        trace.label
                    ),
                })
            }
            _ => None,
        }
    }
    pub(crate) fn traced(trace: Rc<Trace>, var: Var, aval: Aval) -> Tensor {
        Tensor {
            repr: Rc::new(Repr::Traced { trace, var, aval }),
        }
    }

    // ---- inspection -------------------------------------------------------------------------------

    /// Shape (empty for a failed tensor).
    pub fn shape(&self) -> &[usize] {
        match &*self.repr {
            Repr::Concrete(a) => a.shape(),
            Repr::Traced { aval, .. } => &aval.shape,
            Repr::Failed(_) => &[],
        }
    }
    /// Dtype (f32 for a failed tensor).
    pub fn dtype(&self) -> DType {
        match &*self.repr {
            Repr::Concrete(a) => a.dtype(),
            Repr::Traced { aval, .. } => aval.dtype,
            Repr::Failed(_) => DType::F32,
        }
    }
    pub fn ndim(&self) -> usize {
        self.shape().len()
    }
    /// Number of elements (saturating at `usize::MAX`; shapes that large are refused when made).
    pub fn size(&self) -> usize {
        saturating_size(self.shape())
    }
    /// True while being traced by `jit` or a transform.
    pub fn is_traced(&self) -> bool {
        matches!(&*self.repr, Repr::Traced { .. })
    }
    /// The error this tensor carries, if an op that produced it failed.
    pub fn error(&self) -> Option<&Error> {
        match &*self.repr {
            Repr::Failed(e) => Some(e),
            _ => None,
        }
    }
    /// The concrete array. Fails for traced tensors (their data does not exist yet: use
    /// `select`/`where_` for data-dependent choices) and for failed ones (their error).
    pub fn to_array(&self) -> Result<Array> {
        match &*self.repr {
            Repr::Concrete(a) => Ok(a.clone()),
            Repr::Traced { trace, aval, .. } => {
                let e = Error::TracedValue {
                    shape: aval.shape.clone(),
                    dtype: aval.dtype,
                    context: trace.label.clone(),
                };
                trace.fail(e.clone());
                Err(e)
            }
            Repr::Failed(e) => Err(e.clone()),
        }
    }
    /// Read the data as a `Vec<T>` (concrete tensors only; see [`Tensor::to_array`]).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn to_vec<T: crate::host::Element>(&self) -> Result<Vec<T>> {
        self.to_array()?.to_vec()
    }

    // ---- creation ---------------------------------------------------------------------------------

    /// A tensor from host data.
    pub fn from_vec<T: crate::host::Element>(data: Vec<T>, shape: &[usize]) -> Tensor {
        match Array::from_vec(data, shape) {
            Ok(a) => a.into(),
            Err(e) => Tensor::failed(e),
        }
    }
    /// A tensor of `shape` filled with `value` (its dtype is the value's).
    ///
    /// Outside a trace it is made on the host; inside `jit` (or any transform) it is recorded as a
    /// `full` primitive that the device computes, never materialized on the host. A shape whose
    /// size overflows fails with [`Error::ShapeTooLarge`]; one the host cannot hold with
    /// [`Error::OutOfMemory`] (device `host`); under `jit`, one over a device limit with
    /// [`Error::OverLimit`]. The same holds for [`Tensor::zeros`], [`Tensor::ones`],
    /// [`Tensor::iota`] and [`Tensor::arange`].
    pub fn full(value: impl Into<Scalar>, shape: &[usize]) -> Tensor {
        apply_eager_host(Prim::Elementwise(ElementwiseOp::Full {
            value: value.into(),
            shape: shape.to_vec(),
        }))
    }
    pub fn scalar(value: impl Into<Scalar>) -> Tensor {
        Array::scalar(value).into()
    }
    pub fn zeros(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::full(Scalar::F32(0.0).cast(dtype), shape)
    }
    pub fn ones(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::full(Scalar::F32(1.0).cast(dtype), shape)
    }
    /// `0, 1, ..., n-1` as i32.
    pub fn arange(n: usize) -> Tensor {
        Tensor::iota(DType::I32, &[n], 0)
    }
    /// Indices along `axis` of an array of `shape`.
    pub fn iota(dtype: DType, shape: &[usize], axis: usize) -> Tensor {
        apply_eager_host(Prim::Elementwise(ElementwiseOp::Iota {
            dtype,
            shape: shape.to_vec(),
            axis,
        }))
    }
}
