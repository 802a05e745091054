//! Indexing ops: `take` (with JAX's out-of-bounds modes), `x[idx]` (`index_take`) and `one_hot`.

use crate::dtype::{DType, Scalar};
use crate::error::Error;
use crate::ops::{IndexOp, Prim};
use crate::tensor::{TakeMode, Tensor, norm_axis};

impl Tensor {
    /// `jnp.take(x, indices, axis)`: gather slices along `axis` by integer `indices`; the result
    /// has shape `shape[..axis] + indices.shape + shape[axis+1..]`. As in JAX (its default mode,
    /// "fill"), an index in `[-n, 0)` counts from the end and one outside `[-n, n)` gives a fill
    /// value: NaN for f32/f64, `i32::MIN` for i32, `u32::MAX` for u32, `true` for bool. A filled
    /// index gets no gradient. [`Tensor::take_mode`] takes JAX's other modes;
    /// [`Tensor::index_take`] is `x[indices]` indexing (clamped).
    ///
    /// ```
    /// use brigade::{Tensor, grad};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4]);
    /// let i = Tensor::from_vec(vec![0i32, 7, -1, -9], &[4]);
    /// let got = x.take(&i, 0).to_vec::<f32>()?;
    /// assert_eq!((got[0], got[2]), (1.0, 4.0));
    /// // 7 and -9 are outside [-4, 4): NaN, and no gradient.
    /// assert!(got[1].is_nan() && got[3].is_nan());
    /// let dx = grad(|t: &[Tensor]| vec![t[0].take(&t[1], 0).sum_all()]).apply(&[x, i]);
    /// assert_eq!(dx[0].to_vec::<f32>()?, vec![1.0, 0.0, 0.0, 1.0]);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn take(&self, indices: &Tensor, axis: i64) -> Tensor {
        self.take_mode(indices, axis, TakeMode::Fill)
    }
    /// `x[indices]` along `axis` (JAX's indexing, a gather promised in bounds): like
    /// [`Tensor::take`], but an index still out of range after negatives count from the end
    /// once is clamped into `[0, n)` instead of filled. Named apart from `take` because the two
    /// differ only on out-of-range indices, where a silent clamp would hide a bug; use it where
    /// indices are in range by construction (embeddings, permutations, sort and slice helpers).
    ///
    /// The gradient is JAX's for `x[indices]`: each taken slice's cotangent adds into the slice
    /// it came from, and an index outside `[-n, n)` (`[0, n)` for u32) adds nothing, though the
    /// forward clamped it. The same holds under `vmap`.
    ///
    /// ```
    /// use brigade::{Tensor, grad};
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4]);
    /// let i = Tensor::from_vec(vec![0i32, 7, -1, -9], &[4]);
    /// assert_eq!(x.index_take(&i, 0).to_vec::<f32>()?, vec![1.0, 4.0, 4.0, 1.0]);
    /// let dx = grad(|t: &[Tensor]| vec![t[0].index_take(&t[1], 0).sum_all()]).apply(&[x, i]);
    /// // 7 and -9 are outside [-4, 4): no gradient; -1 is element 3.
    /// assert_eq!(dx[0].to_vec::<f32>()?, vec![1.0, 0.0, 0.0, 1.0]);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn index_take(&self, indices: &Tensor, axis: i64) -> Tensor {
        if let Some(e) = self.error() {
            return Tensor::failed(e.clone());
        }
        match norm_axis("take", axis, self.shape()) {
            Ok(a) => Tensor::apply(Prim::Indexing(IndexOp::Take { axis: a }), &[self, indices]),
            Err(e) => self.fail_with(e),
        }
    }
    /// [`Tensor::take`] with JAX's treatment of out-of-range indices (`mode=`):
    /// [`TakeMode::Fill`] (`jnp.take`'s default, plain `take`) gives a fill value for an index
    /// outside `[-n, n)` (NaN for f32/f64, `i32::MIN`, `u32::MAX`, `true` for bool; negative
    /// indices in range count from the end), [`TakeMode::Clip`] clamps every index into `[0, n)`
    /// (a negative one gives element 0), [`TakeMode::Wrap`] takes it modulo `n`, and
    /// [`TakeMode::PromiseInBounds`] is `x[idx]` indexing ([`Tensor::index_take`]: negatives
    /// count from the end once, then the index is clamped and, unlike `Clip`, gets no gradient).
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
    /// assert_eq!(
    ///     x.take_mode(&i, 0, TakeMode::PromiseInBounds).to_vec::<f32>()?,
    ///     vec![30.0, 30.0, 10.0, 20.0]
    /// );
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
            return self.index_take(indices, axis);
        }
        // Array lengths fit in i32 on every device; saturate just in case (the clamp is a no-op).
        let n_lit = |k: i64| match it {
            DType::I32 => Tensor::scalar(k.clamp(i32::MIN as i64, i32::MAX as i64) as i32),
            _ => Tensor::scalar(k.clamp(0, u32::MAX as i64) as u32),
        };
        let last = n_lit(n as i64 - 1);
        match mode {
            TakeMode::PromiseInBounds => self.index_take(indices, axis),
            TakeMode::Clip => {
                let i = if it == DType::I32 {
                    indices.maximum(&n_lit(0)).minimum(&last)
                } else {
                    indices.minimum(&last)
                };
                self.index_take(&i, axis)
            }
            TakeMode::Wrap => self.index_take(&indices.remainder(&n_lit(n as i64)), axis),
            TakeMode::Fill => {
                let mut valid = indices.lt(&n_lit(n as i64));
                if it == DType::I32 {
                    valid = valid.and(&indices.ge(&n_lit(-(n as i64))));
                }
                let got = self.index_take(indices, axis);
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
    /// `lax.dynamic_slice(x, starts, sizes)`: the block of shape `sizes` whose corner is at
    /// `starts`, one integer scalar tensor per axis (traced values allowed: the position may be
    /// computed on the device). As in JAX, a negative i32 start counts from the end once
    /// (`start + dim`), then each start is clamped into `[0, dim - size]`, so the block always
    /// lies inside `x`. Built from `index_take` along each axis whose size changes, so
    /// `grad` adds the cotangent into the block and `vmap` batches the starts too.
    ///
    /// ```
    /// use brigade::Tensor;
    /// let x = Tensor::from_vec((0..12).map(|v| v as f32).collect(), &[3, 4]);
    /// let i = Tensor::scalar(1i32);
    /// let got = x.dynamic_slice(&[i.clone(), Tensor::scalar(2i32)], &[2, 2]);
    /// assert_eq!(got.to_vec::<f32>()?, vec![6.0, 7.0, 10.0, 11.0]);
    /// // A start past the end is clamped: the last two columns.
    /// let got = x.dynamic_slice(&[i.clone(), Tensor::scalar(9i32)], &[1, 2]);
    /// assert_eq!(got.to_vec::<f32>()?, vec![6.0, 7.0]);
    /// // -3 counts from the end: column 1.
    /// let got = x.dynamic_slice(&[i, Tensor::scalar(-3i32)], &[1, 2]);
    /// assert_eq!(got.to_vec::<f32>()?, vec![5.0, 6.0]);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn dynamic_slice(&self, starts: &[Tensor], sizes: &[usize]) -> Tensor {
        if let Some(e) = self.error().or(starts.iter().find_map(|t| t.error())) {
            return Tensor::failed(e.clone());
        }
        let shape = self.shape().to_vec();
        if let Err(e) = check_starts("dynamic_slice", &shape, starts, sizes, "sizes") {
            return self.fail_with(e);
        }
        let mut x = self.clone();
        for (k, (&size, &dim)) in sizes.iter().zip(&shape).enumerate() {
            if size == dim {
                // The start clamps to 0: the whole axis.
                continue;
            }
            let start = clamped_start(&starts[k], dim, size);
            let idx = &Tensor::iota(DType::I32, &[size], 0) + &start;
            x = x.index_take(&idx, k as i64);
        }
        x
    }

    /// `lax.dynamic_update_slice(x, update, starts)`: `x` with the block `update` written at
    /// `starts` (one integer scalar tensor per axis; as in JAX a negative one counts from the end
    /// once, then each is clamped into `[0, dim - update_dim]`). Built from `index_take` and `select`: the gradient of `x` is the cotangent outside the
    /// block, that of `update` the cotangent inside it.
    ///
    /// ```
    /// use brigade::Tensor;
    /// let x = Tensor::zeros(&[2, 3], brigade::DType::F32);
    /// let u = Tensor::from_vec(vec![5.0f32, 6.0], &[1, 2]);
    /// let got = x.dynamic_update_slice(&u, &[Tensor::scalar(1i32), Tensor::scalar(1i32)]);
    /// assert_eq!(got.to_vec::<f32>()?, vec![0.0, 0.0, 0.0, 0.0, 5.0, 6.0]);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn dynamic_update_slice(&self, update: &Tensor, starts: &[Tensor]) -> Tensor {
        if let Some(e) = self
            .error()
            .or(update.error())
            .or(starts.iter().find_map(|t| t.error()))
        {
            return Tensor::failed(e.clone());
        }
        if update.dtype() != self.dtype() {
            return self.fail_with(Error::DTypeMismatch {
                op: "dynamic_update_slice",
                lhs: self.dtype(),
                rhs: update.dtype(),
                shapes: vec![self.shape().to_vec(), update.shape().to_vec()],
            });
        }
        let shape = self.shape().to_vec();
        let sizes = update.shape().to_vec();
        if sizes.len() != shape.len() {
            return self.fail_with(Error::BadShapeArg {
                op: "dynamic_update_slice",
                shape: sizes.clone(),
                detail: format!(
                    "the update has rank {} but the operand {:?} has rank {}: give the update one axis per operand axis",
                    sizes.len(),
                    shape,
                    shape.len()
                ),
            });
        }
        if let Err(e) = check_starts(
            "dynamic_update_slice",
            &shape,
            starts,
            &sizes,
            "update shape",
        ) {
            return self.fail_with(e);
        }
        if sizes.contains(&0) {
            // An empty update writes nothing.
            return self.clone();
        }
        // Spread the update over x's shape (position p of axis k reads update element p - start,
        // clamped) and keep it where every axis is inside the block.
        let mut spread = update.clone();
        let mut inside: Option<Tensor> = None;
        for (k, (&size, &dim)) in sizes.iter().zip(&shape).enumerate() {
            if size == dim {
                continue;
            }
            let start = clamped_start(&starts[k], dim, size);
            let p = &Tensor::iota(DType::I32, &[dim], 0) - &start;
            let zero = Tensor::scalar(0i32);
            let within = p.ge(&zero).and(&p.lt(&Tensor::scalar(size as i32)));
            let read = p.maximum(&zero).minimum(&Tensor::scalar(size as i32 - 1));
            spread = spread.index_take(&read, k as i64);
            let within = within.broadcast_in_dim(&shape, &[k]);
            inside = Some(match inside {
                Some(m) => m.and(&within),
                None => within,
            });
        }
        match inside {
            Some(m) => crate::tensor::select(&m, &spread, self),
            // The update covers x.
            None => update.clone(),
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

/// Check `starts` (one integer scalar per axis) and the block's `sizes` against `shape`.
fn check_starts(
    op: &'static str,
    shape: &[usize],
    starts: &[Tensor],
    sizes: &[usize],
    what: &str,
) -> crate::error::Result<()> {
    if starts.len() != shape.len() || sizes.len() != shape.len() {
        return Err(Error::BadShapeArg {
            op,
            shape: shape.to_vec(),
            detail: format!(
                "{} starts and {} {what} for an operand of rank {} ({shape:?}): give one of each per axis",
                starts.len(),
                sizes.len(),
                shape.len()
            ),
        });
    }
    for (k, s) in starts.iter().enumerate() {
        if !s.shape().is_empty() {
            return Err(Error::BadShapeArg {
                op,
                shape: s.shape().to_vec(),
                detail: format!(
                    "start {k} has shape {:?}: each start is a scalar",
                    s.shape()
                ),
            });
        }
        if !s.dtype().is_int() {
            return Err(Error::BadDType {
                op,
                dtype: s.dtype(),
                hint: "starts are integer scalars (i32 or u32)",
                shapes: vec![vec![]],
            });
        }
    }
    if let Some(k) = (0..shape.len()).find(|&k| sizes[k] > shape[k]) {
        return Err(Error::BadShapeArg {
            op,
            shape: sizes.to_vec(),
            detail: format!(
                "the block is {sizes:?} but the operand is {shape:?}: axis {k} is {} long, so the block's {} does not fit",
                shape[k], sizes[k]
            ),
        });
    }
    Ok(())
}

/// A start on an axis of length `dim` for a block of `size`, as JAX takes it: a negative i32 start
/// counts from the end once (`start + dim`), then it is clamped into `[0, dim - size]`; a u32
/// start is clamped before the cast to i32, so a huge one gives `dim - size`.
fn clamped_start(start: &Tensor, dim: usize, size: usize) -> Tensor {
    let hi = (dim - size).min(i32::MAX as usize);
    match start.dtype() {
        DType::U32 => start.minimum(&Tensor::scalar(hi as u32)).cast(DType::I32),
        _ => {
            let s = start.cast(DType::I32);
            let zero = Tensor::scalar(0i32);
            let from_end = &s + &Tensor::scalar(dim.min(i32::MAX as usize) as i32);
            crate::tensor::select(&s.lt(&zero), &from_end, &s)
                .maximum(&zero)
                .minimum(&Tensor::scalar(hi as i32))
        }
    }
}
