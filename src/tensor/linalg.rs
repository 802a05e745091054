//! Contractions: `dot_general`, convolutions and NumPy's `matmul` (1-D promotion, broadcast batch
//! axes).

use crate::dtype::DType;
use crate::error::Error;
use crate::ops::{DotDims, Prim};
use crate::tensor::{Tensor, broadcast_shapes};

impl Tensor {
    /// General contraction (XLA `dot_general`): output axes are batch, lhs free, rhs free.
    pub fn dot_general(&self, rhs: &Tensor, dims: DotDims) -> Tensor {
        Tensor::apply(Prim::DotGeneral(dims), &[self, rhs])
    }
    /// N-d convolution, `jax.lax.conv_general_dilated`: strides, padding (`Padding::Same`,
    /// `Valid` or explicit), lhs/rhs dilation, layouts and feature groups in `opts`. f32 on GPU
    /// devices (f64 on the cpu device). Differentiable in both operands and batchable.
    ///
    /// ```no_run
    /// use brigade::{ConvOptions, Padding, Tensor};
    /// // NHWC images, HWIO kernel: 2 images 8x8 with 3 channels, 16 filters of 3x3.
    /// let x = Tensor::ones(&[2, 8, 8, 3], brigade::DType::F32);
    /// let k = Tensor::ones(&[3, 3, 3, 16], brigade::DType::F32);
    /// let opts = ConvOptions::new(&[2, 2], Padding::Same).dimension_numbers("NHWC", "HWIO", "NHWC");
    /// let y = x.conv_general_dilated(&k, &opts);
    /// assert_eq!(y.shape(), &[2, 4, 4, 16]);
    /// ```
    pub fn conv_general_dilated(&self, rhs: &Tensor, opts: &crate::ops::ConvOptions) -> Tensor {
        crate::ops::conv::apply(self, rhs, opts)
    }
    /// Convolution of an `NC...` input with an `OI...` kernel (NCHW / OIHW in 2-d): the common
    /// case of [`Tensor::conv_general_dilated`].
    pub fn conv(&self, rhs: &Tensor, strides: &[usize], padding: crate::ops::Padding) -> Tensor {
        self.conv_general_dilated(rhs, &crate::ops::ConvOptions::new(strides, padding))
    }
    /// Matrix product with NumPy `matmul` rules: 1-D operands are promoted (and the added axis removed),
    /// leading batch axes broadcast.
    pub fn matmul(&self, rhs: &Tensor) -> Tensor {
        if let Some(e) = self.error().or(rhs.error()) {
            return Tensor::failed(e.clone());
        }
        // Bool operands: an OR of ANDs with a bool result, as jnp.matmul (counted in i32; a count
        // cannot wrap to 0 within the 2^32-element limit).
        if self.dtype() == DType::Bool && rhs.dtype() == DType::Bool {
            let r = self.cast(DType::I32).matmul(&rhs.cast(DType::I32));
            return r.ne(&Tensor::scalar(0i32));
        }
        if self.dtype() != rhs.dtype() {
            let [a, b] = Tensor::promote_floats([self, rhs]);
            if a.dtype() == b.dtype() {
                return a.matmul(&b);
            }
        }
        let (la, ra) = (self.shape().to_vec(), rhs.shape().to_vec());
        let err = |detail: String| Error::MatmulShape {
            op: "matmul",
            lhs: la.clone(),
            rhs: ra.clone(),
            detail,
        };
        if la.is_empty() || ra.is_empty() {
            return self.fail_with(err(
                "matmul needs arrays of rank >= 1; use * for scalars".into()
            ));
        }
        let a = if la.len() == 1 {
            self.reshape_exact(&[1, la[0]])
        } else {
            self.clone()
        };
        let b = if ra.len() == 1 {
            rhs.reshape_exact(&[ra[0], 1])
        } else {
            rhs.clone()
        };
        let (ash, bsh) = (a.shape().to_vec(), b.shape().to_vec());
        let (m, k) = (ash[ash.len() - 2], ash[ash.len() - 1]);
        let (k2, n) = (bsh[bsh.len() - 2], bsh[bsh.len() - 1]);
        if k != k2 {
            return self.fail_with(err(format!("inner dimensions differ: {k} (last axis of lhs) vs {k2} (second-to-last axis of rhs)")));
        }
        let batch = match broadcast_shapes("matmul", &ash[..ash.len() - 2], &bsh[..bsh.len() - 2]) {
            Ok(b) => b,
            Err(_) => return self.fail_with(err("batch axes do not broadcast".into())),
        };
        let out = if batch.is_empty() {
            a.dot_general(
                &b,
                DotDims {
                    lhs_contract: vec![1],
                    rhs_contract: vec![0],
                    lhs_batch: vec![],
                    rhs_batch: vec![],
                },
            )
        } else if bsh.len() == 2 {
            // (batch..., m, k) @ (k, n): fold the batch into rows, no batch axes needed.
            let mut full = batch.clone();
            full.extend([m, k]);
            let a = a.broadcast_to(&full);
            a.dot_general(
                &b,
                DotDims {
                    lhs_contract: vec![full.len() - 1],
                    rhs_contract: vec![0],
                    lhs_batch: vec![],
                    rhs_batch: vec![],
                },
            )
        } else {
            let nb = batch.len();
            let mut fa = batch.clone();
            fa.extend([m, k]);
            let mut fb = batch.clone();
            fb.extend([k, n]);
            let (a, b) = (a.broadcast_to(&fa), b.broadcast_to(&fb));
            a.dot_general(
                &b,
                DotDims {
                    lhs_contract: vec![nb + 1],
                    rhs_contract: vec![nb],
                    lhs_batch: (0..nb).collect(),
                    rhs_batch: (0..nb).collect(),
                },
            )
        };
        // Drop the axes added for 1-D operands.
        let mut shape = batch;
        if la.len() > 1 {
            shape.push(m);
        }
        if ra.len() > 1 {
            shape.push(n);
        }
        out.reshape_exact(&shape)
    }
}
