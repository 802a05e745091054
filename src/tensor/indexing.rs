//! Indexing ops: `take` (with JAX's out-of-bounds modes) and `one_hot`.

use crate::dtype::{DType, Scalar};
use crate::error::Error;
use crate::ops::{IndexOp, Prim};
use crate::tensor::{TakeMode, Tensor, norm_axis};

impl Tensor {
    /// Gather slices along `axis` by integer `indices` (like `x[indices]` in JAX): the result has
    /// shape `shape[..axis] + indices.shape + shape[axis+1..]`. Negative indices count from the end
    /// once; indices still out of range are clamped.
    ///
    /// The gradient is JAX's for `x[indices]` (a gather in `PROMISE_IN_BOUNDS` mode): each taken
    /// slice's cotangent adds into the slice it came from, and an index outside `[-n, n)` (`[0, n)`
    /// for u32) adds nothing, though the forward clamped it. The same holds under `vmap`.
    /// [`Tensor::take_mode`]'s gradients are those of `jnp.take(mode=...)`.
    ///
    /// ```
    /// use brigade::{Tensor, grad};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4]);
    /// let i = Tensor::from_vec(vec![0i32, 7, -1, -9], &[4]);
    /// assert_eq!(x.take(&i, 0).to_vec::<f32>()?, vec![1.0, 4.0, 4.0, 1.0]);
    /// let dx = grad(|t: &[Tensor]| vec![t[0].take(&t[1], 0).sum_all()]).apply(&[x, i]);
    /// // 7 and -9 are outside [-4, 4): no gradient; -1 is element 3.
    /// assert_eq!(dx[0].to_vec::<f32>()?, vec![1.0, 0.0, 0.0, 1.0]);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn take(&self, indices: &Tensor, axis: i64) -> Tensor {
        if let Some(e) = self.error() {
            return Tensor::failed(e.clone());
        }
        match norm_axis("take", axis, self.shape()) {
            Ok(a) => Tensor::apply(Prim::Indexing(IndexOp::Take { axis: a }), &[self, indices]),
            Err(e) => self.fail_with(e),
        }
    }
    /// [`Tensor::take`] with `jnp.take`'s treatment of out-of-range indices (`mode=`):
    /// [`TakeMode::Fill`] (`jnp.take`'s default) gives a fill value for an index outside
    /// `[-n, n)` (NaN for f32/f64, `i32::MIN`, `u32::MAX`, `true` for bool; negative indices in
    /// range count from the end), [`TakeMode::Clip`] clamps every index into `[0, n)` (a negative
    /// one gives element 0), [`TakeMode::Wrap`] takes it modulo `n`. Plain `take` is `x[idx]`
    /// indexing: negatives count from the end once, then the index is clamped (and, unlike `Clip`,
    /// a clamped index gets no gradient).
    ///
    /// Gradients are those of `jnp.take(mode=...)`: under `Clip` and `Wrap` the cotangent goes to
    /// the element that was read; under `Fill` an index outside `[-n, n)` gets none.
    ///
    /// ```
    /// use brigade::{Tensor, TakeMode};
    /// let x = Tensor::from_vec(vec![10.0f32, 20.0, 30.0], &[3]);
    /// let i = Tensor::from_vec(vec![-1i32, 3, -4, 1], &[4]);
    /// let fill = x.take_mode(&i, 0, TakeMode::Fill).to_vec::<f32>()?;
    /// assert_eq!((fill[0], fill[3]), (30.0, 20.0));
    /// assert!(fill[1].is_nan() && fill[2].is_nan());
    /// assert_eq!(x.take_mode(&i, 0, TakeMode::Clip).to_vec::<f32>()?, vec![10.0, 30.0, 10.0, 20.0]);
    /// assert_eq!(x.take_mode(&i, 0, TakeMode::Wrap).to_vec::<f32>()?, vec![30.0, 10.0, 30.0, 20.0]);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn take_mode(&self, indices: &Tensor, axis: i64, mode: TakeMode) -> Tensor {
        if let Some(e) = self.error().or(indices.error()) {
            return Tensor::failed(e.clone());
        }
        let a = match norm_axis("take", axis, self.shape()) {
            Ok(a) => a,
            Err(e) => return self.fail_with(e),
        };
        let n = self.shape()[a];
        let it = indices.dtype();
        if !it.is_int() || n == 0 {
            // The primitive's own error (dtype of the indices, or an empty axis).
            return self.take(indices, axis);
        }
        // Array lengths fit in i32 on every device; saturate just in case (the clamp is a no-op).
        let n_lit = |k: i64| match it {
            DType::I32 => Tensor::scalar(k.clamp(i32::MIN as i64, i32::MAX as i64) as i32),
            _ => Tensor::scalar(k.clamp(0, u32::MAX as i64) as u32),
        };
        let last = n_lit(n as i64 - 1);
        match mode {
            TakeMode::Clip => {
                let i = if it == DType::I32 {
                    indices.maximum(&n_lit(0)).minimum(&last)
                } else {
                    indices.minimum(&last)
                };
                self.take(&i, axis)
            }
            TakeMode::Wrap => self.take(&indices.remainder(&n_lit(n as i64)), axis),
            TakeMode::Fill => {
                let mut valid = indices.lt(&n_lit(n as i64));
                if it == DType::I32 {
                    valid = valid.and(&indices.ge(&n_lit(-(n as i64))));
                }
                let got = self.take(indices, axis);
                let r = indices.ndim();
                let dims: Vec<usize> = (a..a + r).collect();
                let valid = valid.broadcast_in_dim(got.shape(), &dims);
                let fill = match self.dtype() {
                    DType::F32 => Scalar::F32(f32::NAN),
                    DType::F64 => Scalar::F64(f64::NAN),
                    DType::I32 => Scalar::I32(i32::MIN),
                    DType::U32 => Scalar::U32(u32::MAX),
                    DType::Bool => Scalar::Bool(true),
                };
                valid.where_(&got, &Tensor::full(fill, &[]))
            }
        }
    }
    /// One-hot encoding of integer class indices: adds a trailing axis of length `depth` (f32 0/1).
    pub fn one_hot(&self, depth: usize) -> Tensor {
        if let Some(e) = self.error() {
            return Tensor::failed(e.clone());
        }
        if !self.dtype().is_int() {
            return self.fail_with(Error::BadDType {
                op: "one_hot",
                dtype: self.dtype(),
                hint: "class indices must be i32 or u32",
                shapes: vec![self.shape().to_vec()],
            });
        }
        let mut shape = self.shape().to_vec();
        shape.push(depth);
        let classes = Tensor::iota(self.dtype(), &shape, shape.len() - 1);
        let idx = self.expand_dims(-1).broadcast_to(&shape);
        idx.eq(&classes).cast(DType::F32)
    }
}
