//! Layout ops: transpose, reshape, broadcasting, adding and removing axes, slicing,
//! concatenation and stacking, padding.

use crate::dtype::Scalar;
use crate::error::Error;
use crate::ops::{LayoutOp, Prim};
use crate::tensor::{Tensor, norm_axis};

impl Tensor {
    /// Permute axes.
    pub fn transpose(&self, perm: &[usize]) -> Tensor {
        Tensor::apply(
            Prim::Layout(LayoutOp::Transpose {
                perm: perm.to_vec(),
            }),
            &[self],
        )
    }
    /// Reverse the axes (matrix transpose for 2-D).
    pub fn t(&self) -> Tensor {
        let perm: Vec<usize> = (0..self.ndim()).rev().collect();
        self.transpose(&perm)
    }
    /// Reshape; one entry may be -1 to be inferred.
    pub fn reshape(&self, shape: &[i64]) -> Tensor {
        if let Some(e) = self.error() {
            return Tensor::failed(e.clone());
        }
        let n = self.size();
        let known = if shape.contains(&0) {
            Some(0)
        } else {
            shape
                .iter()
                .filter(|&&d| d >= 0)
                .try_fold(1i64, |n, &d| n.checked_mul(d))
        };
        let Some(known) = known else {
            return self.fail_with(Error::ShapeTooLarge {
                op: "reshape",
                shape: self.shape().to_vec(),
                detail: format!(
                    "the target {shape:?} has more elements than 64-bit arithmetic counts"
                ),
            });
        };
        let holes = shape.iter().filter(|&&d| d < 0).count();
        let to_usize = |fill: usize| {
            shape
                .iter()
                .map(|&d| if d < 0 { fill } else { d as usize })
                .collect::<Vec<usize>>()
        };
        if shape.iter().any(|&d| d < -1) || holes > 1 {
            return self.fail_with(Error::BadShapeArg {
                op: "reshape",
                shape: self.shape().to_vec(),
                detail: format!(
                    "{shape:?}: only one -1 entry is allowed, other sizes must be >= 0"
                ),
            });
        }
        let target = if holes == 1 {
            if known == 0 || !n.is_multiple_of(known as usize) {
                return self.fail_with(Error::BadShapeArg {
                    op: "reshape",
                    shape: self.shape().to_vec(),
                    detail: format!("cannot infer the -1 in {shape:?}: {n} elements are not a multiple of {known}"),
                });
            }
            to_usize(n / known as usize)
        } else {
            to_usize(0)
        };
        self.reshape_exact(&target)
    }
    pub(crate) fn reshape_exact(&self, shape: &[usize]) -> Tensor {
        if self.shape() == shape && self.error().is_none() {
            return self.clone();
        }
        Tensor::apply(
            Prim::Layout(LayoutOp::Reshape {
                shape: shape.to_vec(),
            }),
            &[self],
        )
    }
    /// Broadcast to `shape` with NumPy rules (leading axes added, size-1 axes stretched).
    pub fn broadcast_to(&self, shape: &[usize]) -> Tensor {
        if let Some(e) = self.error() {
            return Tensor::failed(e.clone());
        }
        if self.shape() == shape {
            return self.clone();
        }
        let r = self.ndim();
        if r > shape.len() {
            return self.fail_with(Error::BadShapeArg {
                op: "broadcast_to",
                shape: self.shape().to_vec(),
                detail: format!("cannot broadcast to the lower-rank shape {shape:?}"),
            });
        }
        let dims: Vec<usize> = (shape.len() - r..shape.len()).collect();
        Tensor::apply(
            Prim::Layout(LayoutOp::BroadcastInDim {
                shape: shape.to_vec(),
                dims,
            }),
            &[self],
        )
    }
    /// XLA's `broadcast_in_dim`: input axis i becomes output axis `dims[i]`.
    pub fn broadcast_in_dim(&self, shape: &[usize], dims: &[usize]) -> Tensor {
        Tensor::apply(
            Prim::Layout(LayoutOp::BroadcastInDim {
                shape: shape.to_vec(),
                dims: dims.to_vec(),
            }),
            &[self],
        )
    }
    /// Insert a size-1 axis at `axis` (negative counts from the end of the result).
    pub fn expand_dims(&self, axis: i64) -> Tensor {
        if let Some(e) = self.error() {
            return Tensor::failed(e.clone());
        }
        let mut shape = self.shape().to_vec();
        let rank = shape.len() as i64 + 1;
        let a = if axis < 0 { axis + rank } else { axis };
        if a < 0 || a >= rank {
            return self.fail_with(Error::BadAxis {
                op: "expand_dims",
                axis,
                rank: rank as usize,
                shape,
            });
        }
        shape.insert(a as usize, 1);
        self.reshape_exact(&shape)
    }
    /// Remove the given size-1 axes.
    pub fn squeeze(&self, axes: &[i64]) -> Tensor {
        if let Some(e) = self.error() {
            return Tensor::failed(e.clone());
        }
        let mut ax = Vec::new();
        for &a in axes {
            match norm_axis("squeeze", a, self.shape()) {
                Ok(n) if ax.contains(&n) => {
                    // jnp.squeeze refuses a repeated axis too.
                    return self.fail_with(Error::BadShapeArg {
                        op: "squeeze",
                        shape: self.shape().to_vec(),
                        detail: format!(
                            "axis {n} is repeated in {axes:?}: name each axis to remove once"
                        ),
                    });
                }
                Ok(a) if self.shape()[a] == 1 => ax.push(a),
                Ok(a) => {
                    return self.fail_with(Error::BadShapeArg {
                        op: "squeeze",
                        shape: self.shape().to_vec(),
                        detail: format!("axis {a} has size {}, not 1", self.shape()[a]),
                    });
                }
                Err(e) => return self.fail_with(e),
            }
        }
        self.squeeze_axes(&ax)
    }
    pub(super) fn squeeze_axes(&self, axes: &[usize]) -> Tensor {
        let shape: Vec<usize> = self
            .shape()
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .collect();
        self.reshape_exact(&shape)
    }
    /// Strided slice: `start[i] .. limit[i]` step `strides[i]` (None: step 1).
    pub fn slice(&self, start: &[usize], limit: &[usize], strides: Option<&[usize]>) -> Tensor {
        let stride = strides
            .map(|s| s.to_vec())
            .unwrap_or_else(|| vec![1; start.len()]);
        Tensor::apply(
            Prim::Layout(LayoutOp::Slice {
                start: start.to_vec(),
                limit: limit.to_vec(),
                stride,
            }),
            &[self],
        )
    }
    /// Slice `start..end` along one axis.
    pub fn slice_axis(&self, axis: i64, start: usize, end: usize) -> Tensor {
        if let Some(e) = self.error() {
            return Tensor::failed(e.clone());
        }
        let ax = match norm_axis("slice_axis", axis, self.shape()) {
            Ok(a) => a,
            Err(e) => return self.fail_with(e),
        };
        let mut s = vec![0; self.ndim()];
        let mut l = self.shape().to_vec();
        s[ax] = start;
        l[ax] = end;
        self.slice(&s, &l, None)
    }
    /// Join tensors along an existing axis.
    pub fn concatenate(tensors: &[&Tensor], axis: i64) -> Tensor {
        if let Some(e) = tensors.iter().find_map(|t| t.error()) {
            return Tensor::failed(e.clone());
        }
        let Some(first) = tensors.first() else {
            return Tensor::failed(Error::BadShapeArg {
                op: "concatenate",
                shape: vec![],
                detail: "needs at least one tensor".into(),
            });
        };
        match norm_axis("concatenate", axis, first.shape()) {
            Ok(a) => Tensor::apply(Prim::Layout(LayoutOp::Concatenate { axis: a }), tensors),
            Err(e) => first.fail_with(e),
        }
    }
    /// Stack tensors of one shape along a new axis.
    pub fn stack(tensors: &[&Tensor], axis: i64) -> Tensor {
        if let Some(e) = tensors.iter().find_map(|t| t.error()) {
            return Tensor::failed(e.clone());
        }
        let Some(first) = tensors.first() else {
            return Tensor::failed_here(Error::BadShapeArg {
                op: "stack",
                shape: vec![],
                detail: "no arrays to stack: give at least one".into(),
            });
        };
        if let Some(t) = tensors.iter().find(|t| t.shape() != first.shape()) {
            // Name the shapes the user passed, not the expanded ones concatenate would see.
            return t.fail_with(Error::BadShapeArg {
                op: "stack",
                shape: first.shape().to_vec(),
                detail: format!(
                    "every array needs the same shape, but one is {:?}: reshape or pad them to agree",
                    t.shape()
                ),
            });
        }
        let ex: Vec<Tensor> = tensors.iter().map(|t| t.expand_dims(axis)).collect();
        let refs: Vec<&Tensor> = ex.iter().collect();
        Tensor::concatenate(&refs, axis)
    }
    /// Pad with `value`: `lo[i]` elements before and `hi[i]` after each axis.
    pub fn pad(&self, lo: &[usize], hi: &[usize], value: impl Into<Scalar>) -> Tensor {
        self.pad_interior(lo, hi, &vec![0; lo.len()], value)
    }
    /// Pad with `value`, including `interior[i]` elements between neighbours (XLA `pad`).
    pub fn pad_interior(
        &self,
        lo: &[usize],
        hi: &[usize],
        interior: &[usize],
        value: impl Into<Scalar>,
    ) -> Tensor {
        let value = value.into().cast(self.dtype());
        Tensor::apply(
            Prim::Layout(LayoutOp::Pad {
                lo: lo.to_vec(),
                hi: hi.to_vec(),
                interior: interior.to_vec(),
                value,
            }),
            &[self],
        )
    }
}
