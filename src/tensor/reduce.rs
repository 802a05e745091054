//! Reductions: sum, prod, max, min (with or without an initial value), mean, argmax/argmin, the
//! numerically stable compositions (logsumexp, softmax, log_softmax) and windowed reductions
//! (`reduce_window`).

use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::ops::{ArgOp, BinaryOp, Prim, ReduceOp, ReductionOp};
use crate::tensor::{Axes, Tensor, norm_axis};

impl Tensor {
    pub(crate) fn reduce_axes(&self, op: &'static str, axes: Axes) -> Result<Vec<usize>> {
        match axes {
            Axes::All => Ok((0..self.ndim()).collect()),
            Axes::Some(v) => v.iter().map(|&a| norm_axis(op, a, self.shape())).collect(),
        }
    }
    fn reduce(&self, op: ReduceOp, axes: Axes, keepdims: bool) -> Tensor {
        if let Some(e) = self.error() {
            return Tensor::failed(e.clone());
        }
        let axes = match self.reduce_axes(op.name(), axes) {
            // The primitive takes axes in increasing order, as its kernels assume.
            Ok(mut a) => {
                a.sort_unstable();
                a
            }
            Err(e) => return self.fail_with(e),
        };
        // Sums of bools count them, like jnp; max and min of bools are `any` and `all` (bool
        // results), computed on 0/1.
        let is_bool = self.dtype() == DType::Bool;
        let x = match op {
            ReduceOp::Sum | ReduceOp::Prod if is_bool => self.cast(DType::I32),
            ReduceOp::Max | ReduceOp::Min if is_bool => {
                let axes = Axes::Some(axes.iter().map(|&a| a as i64).collect());
                return self
                    .cast(DType::U32)
                    .reduce(op, axes, keepdims)
                    .cast(DType::Bool);
            }
            _ => self.clone(),
        };
        let r = Tensor::apply(
            Prim::Reduction(ReductionOp::Reduce {
                op,
                axes: axes.clone(),
            }),
            &[&x],
        );
        if keepdims {
            r.keep_dims(self.shape(), &axes)
        } else {
            r
        }
    }
    fn keep_dims(&self, full: &[usize], axes: &[usize]) -> Tensor {
        let shape: Vec<usize> = full
            .iter()
            .enumerate()
            .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
            .collect();
        self.reshape_exact(&shape)
    }
    /// Sum over `axes` (`Axes::All` for every axis). Over an empty axis the sum is +0.0 (and
    /// [`Tensor::prod`] 1), as `jnp.sum`.
    pub fn sum(&self, axes: impl Into<Axes>, keepdims: bool) -> Tensor {
        self.reduce(ReduceOp::Sum, axes.into(), keepdims)
    }
    /// The sum of every element, a scalar.
    pub fn sum_all(&self) -> Tensor {
        self.reduce(ReduceOp::Sum, Axes::All, false)
    }
    /// The product over `axes`; `keepdims` keeps them as length 1.
    pub fn prod(&self, axes: impl Into<Axes>, keepdims: bool) -> Tensor {
        self.reduce(ReduceOp::Prod, axes.into(), keepdims)
    }
    /// Largest element over `axes`, like `jnp.max`: NaN propagates (a NaN in the group gives NaN);
    /// an empty reduced axis is an error ([`Error::BadShapeArg`]: max has no identity), use
    /// [`Tensor::max_initial`] there.
    pub fn max(&self, axes: impl Into<Axes>, keepdims: bool) -> Tensor {
        self.reduce_no_identity(ReduceOp::Max, axes.into(), keepdims)
    }
    /// Smallest element over `axes`, like `jnp.min` (see [`Tensor::max`]).
    pub fn min(&self, axes: impl Into<Axes>, keepdims: bool) -> Tensor {
        self.reduce_no_identity(ReduceOp::Min, axes.into(), keepdims)
    }
    /// `jnp.max(x, axes, initial=initial)`: the maximum of `initial` and the elements over `axes`
    /// (`initial` for an empty axis). `initial` is weakly typed: it takes this tensor's dtype.
    pub fn max_initial(
        &self,
        axes: impl Into<Axes>,
        keepdims: bool,
        initial: impl Into<Scalar>,
    ) -> Tensor {
        self.reduce_initial(ReduceOp::Max, axes.into(), keepdims, initial.into())
    }
    /// `jnp.min(x, axes, initial=initial)` (see [`Tensor::max_initial`]).
    pub fn min_initial(
        &self,
        axes: impl Into<Axes>,
        keepdims: bool,
        initial: impl Into<Scalar>,
    ) -> Tensor {
        self.reduce_initial(ReduceOp::Min, axes.into(), keepdims, initial.into())
    }
    fn reduce_initial(&self, op: ReduceOp, axes: Axes, keepdims: bool, init: Scalar) -> Tensor {
        if let Some(e) = self.error() {
            return Tensor::failed(e.clone());
        }
        // The primitive (like lax.reduce_max) starts from the identity (-inf for max), so the
        // result over an empty axis is the identity, which `initial` then replaces.
        let r = self.reduce(op, axes, keepdims);
        let init = init.cast(self.dtype());
        if init == op.identity(self.dtype()) {
            // max(r, -inf) is r for every r (NaN included): no op to compute or to differentiate
            // (logsumexp and softmax pass -inf; one op less keeps their shift cheap to recompute).
            return r;
        }
        let init = Tensor::scalar(init);
        let binop = if op == ReduceOp::Max {
            BinaryOp::Max
        } else {
            BinaryOp::Min
        };
        r.binary(binop, &init)
    }
    /// max/min as `jnp` has them: no identity, so an empty reduced axis is an error.
    fn reduce_no_identity(&self, op: ReduceOp, axes: Axes, keepdims: bool) -> Tensor {
        let name = if op == ReduceOp::Max { "max" } else { "min" };
        if self.error().is_none() {
            if let Ok(ax) = self.reduce_axes(op.name(), axes.clone()) {
                if let Some(&a) = ax.iter().find(|&&a| self.shape()[a] == 0) {
                    return self.fail_with(Error::BadShapeArg {
                        op: name,
                        shape: self.shape().to_vec(),
                        detail: format!(
                            "zero-size reduction: axis {a} has size 0 and {name} has no identity; pass an initial value with {name}_initial(axes, keepdims, initial)"
                        ),
                    });
                }
            }
        }
        self.reduce(op, axes, keepdims)
    }
    /// Mean over `axes`, computed in f32 for integer inputs (in f64 for f64 inputs).
    pub fn mean(&self, axes: impl Into<Axes>, keepdims: bool) -> Tensor {
        if let Some(e) = self.error() {
            return Tensor::failed(e.clone());
        }
        let axes = axes.into();
        let n: usize = match self.reduce_axes("mean", axes.clone()) {
            Ok(a) => a.iter().map(|&i| self.shape()[i]).product(),
            Err(e) => return self.fail_with(e),
        };
        let x = if self.dtype().is_float() {
            self.clone()
        } else {
            self.cast(DType::F32)
        };
        x.reduce(ReduceOp::Sum, axes, keepdims)
            .mul_literal(1.0 / n as f64)
    }
    /// The mean of every element, a scalar.
    pub fn mean_all(&self) -> Tensor {
        self.mean(Axes::All, false)
    }
    fn argreduce(&self, op: ArgOp, axis: i64, keepdims: bool) -> Tensor {
        if let Some(e) = self.error() {
            return Tensor::failed(e.clone());
        }
        let ax = match norm_axis(op.name(), axis, self.shape()) {
            Ok(a) => a,
            Err(e) => return self.fail_with(e),
        };
        // Bools as 0/1 (jnp.argmax of a bool array is the first true's index).
        let x = if self.dtype() == DType::Bool {
            self.cast(DType::U32)
        } else {
            self.clone()
        };
        let r = Tensor::apply(
            Prim::Reduction(ReductionOp::ArgReduce { op, axis: ax }),
            &[&x],
        );
        if keepdims {
            r.keep_dims(self.shape(), &[ax])
        } else {
            r
        }
    }
    /// Index (i32) of the largest element along `axis`; ties pick the first, and a NaN counts as
    /// the largest (the first NaN's index, as `jnp.argmax`).
    pub fn argmax(&self, axis: i64, keepdims: bool) -> Tensor {
        self.argreduce(ArgOp::ArgMax, axis, keepdims)
    }
    /// Index (i32) of the smallest element along `axis`; ties pick the first, and a NaN counts as
    /// the smallest (the first NaN's index, as `jnp.argmin`).
    pub fn argmin(&self, axis: i64, keepdims: bool) -> Tensor {
        self.argreduce(ArgOp::ArgMin, axis, keepdims)
    }

    // ---- numerically stable compositions ---------------------------------------------------------------

    /// `log(sum(exp(x)))` over `axes`, shifted by the max so large inputs do not overflow.
    pub fn logsumexp(&self, axes: impl Into<Axes>, keepdims: bool) -> Tensor {
        if !self.dtype().is_float() && self.error().is_none() {
            return self.cast(DType::F32).logsumexp(axes, keepdims);
        }
        let axes = axes.into();
        // initial=-inf as jax.nn.logsumexp: an empty axis gives -inf, not an error.
        let m = self.max_initial(axes.clone(), true, f32::NEG_INFINITY);
        // A row of -inf would give -inf - -inf = NaN; shift by 0 there instead.
        let finite = m
            .abs()
            .lt(&Tensor::scalar(Scalar::F32(f32::INFINITY).cast(m.dtype())));
        // The shift cancels in the result: no gradient through it (as jax.nn.logsumexp).
        let m = crate::stop_gradient(
            &finite.where_(&m, &Tensor::scalar(Scalar::F32(0.0).cast(m.dtype()))),
        );
        let s = (self - &m).exp().sum(axes.clone(), true).log() + &m;
        if keepdims {
            s
        } else {
            match self.reduce_axes("logsumexp", axes) {
                Ok(a) => s.squeeze_axes(&a),
                Err(e) => self.fail_with(e),
            }
        }
    }
    /// `exp(x - max) / sum(exp(x - max))` along `axis`.
    pub fn softmax(&self, axis: i64) -> Tensor {
        // initial=-inf as jax.nn.softmax, so an empty axis gives an empty result, not an error.
        // The shift cancels in the result: no gradient through it (as jax.nn.softmax).
        let m = crate::stop_gradient(&self.max_initial(axis, true, f32::NEG_INFINITY));
        let e = (self - &m).exp();
        &e / &e.sum(axis, true)
    }
    /// `x - logsumexp(x)` along `axis`, computed as `jax.nn.log_softmax` does: `s - log(sum(exp(s)))`
    /// with `s = x - max(x)`, so that values far from 0 keep their precision (`[1e30, 1e30, -1e30]`
    /// gives `[-ln 2, -ln 2, -2e30]`) and a row holding +inf is NaN throughout.
    pub fn log_softmax(&self, axis: i64) -> Tensor {
        if !self.dtype().is_float() && self.error().is_none() {
            return self.cast(DType::F32).log_softmax(axis);
        }
        let shifted =
            self - &crate::stop_gradient(&self.max_initial(axis, true, f32::NEG_INFINITY));
        &shifted - &shifted.exp().sum(axis, true).log()
    }

    // ---- windows ----------------------------------------------------------------------------------

    /// `lax.reduce_window` with the monoid's identity as the initial value: output element `o`
    /// reduces (sum, max or min) the cells `o * strides + k`, `k < window`, of `self` padded by
    /// `padding` (`(lo, hi)` per axis, identity cells). One entry per axis; pooling layers with
    /// SAME/VALID padding are in [`crate::nn`], dilations in [`Tensor::reduce_window_dilated`].
    ///
    /// ```
    /// use brigade::{Tensor, WindowOp};
    /// let x = Tensor::from_vec(vec![1.0f32, 5.0, 2.0, 4.0, 3.0], &[5]);
    /// let y = x.reduce_window(WindowOp::Max, &[2], &[2], &[(0, 1)]);
    /// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 4.0, 3.0]);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn reduce_window(
        &self,
        op: crate::ops::WindowOp,
        window: &[usize],
        strides: &[usize],
        padding: &[(usize, usize)],
    ) -> Tensor {
        let w = crate::ops::Window::new(window, strides, padding);
        crate::ops::window::reduce_window(self, op, &w)
    }
    /// [`Tensor::reduce_window`] with every parameter of [`crate::ops::Window`], base (input) and
    /// window dilation included.
    pub fn reduce_window_dilated(
        &self,
        op: crate::ops::WindowOp,
        window: &crate::ops::Window,
    ) -> Tensor {
        crate::ops::window::reduce_window(self, op, window)
    }
}
