//! Neural-network layers built from primitives: pooling (`max_pool`, `avg_pool`, `sum_pool`) on
//! [`Tensor::reduce_window`], for channels-first (`NCHW`, `NCW`, ...) and channels-last (`NHWC`)
//! layouts with any number of spatial axes.
//!
//! Windows and strides name the spatial axes only; the batch and channel axes get a window and
//! stride of 1. Padding is [`Padding::Valid`] (none), [`Padding::Same`] (`ceil(n / stride)`
//! outputs, the extra cell at the end when the total is odd, as `lax.padtype_to_pads`) or
//! explicit `(lo, hi)` pairs. Padded cells never win a max and add nothing to a sum.
//!
//! ```
//! use brigade::{Tensor, nn};
//! // One 1x4x4 image (NCHW), 2x2 windows moving by 2.
//! let x = Tensor::from_vec((0..16).map(|v| v as f32).collect(), &[1, 1, 4, 4]);
//! let m = nn::max_pool(&x, &[2, 2], &[2, 2], &nn::Padding::Valid, nn::Layout::Nchw);
//! assert_eq!(m.to_vec::<f32>()?, vec![5.0, 7.0, 13.0, 15.0]);
//! let a = nn::avg_pool(&x, &[2, 2], &[2, 2], &nn::Padding::Valid, nn::Layout::Nchw, true);
//! assert_eq!(a.to_vec::<f32>()?, vec![2.5, 4.5, 10.5, 12.5]);
//! # Ok::<(), brigade::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::ops::{Window, WindowOp};
use crate::tensor::Tensor;

/// Padding of a pooling window over the spatial axes: the same [`Padding`] as convolutions take
/// (pooling refuses negative explicit padding: a window cannot start before the input's edge).
pub use crate::ops::conv::Padding;

/// Where the channel axis is: after the batch axis (`NCHW`) or last (`NHWC`). The batch axis is
/// first either way; the spatial axes are the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Batch, channels, then the spatial axes (`NCW`, `NCHW`, `NCDHW`).
    Nchw,
    /// Batch, the spatial axes, then channels (`NWC`, `NHWC`, `NDHWC`).
    Nhwc,
}

/// The window over every axis of an operand of `shape` for spatial `window`, `strides` and
/// `padding`.
fn full_window(
    op: &'static str,
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    padding: &Padding,
    layout: Layout,
) -> Result<Window> {
    let k = window.len();
    if shape.len() != k + 2 || strides.len() != k {
        return Err(Error::BadShapeArg {
            op,
            shape: shape.to_vec(),
            detail: format!(
                "a window over {k} spatial axes with {} strides needs an operand of rank {} \
                 (batch, channels and {k} spatial axes) and one stride per spatial axis",
                strides.len(),
                k + 2
            ),
        });
    }
    let spatial: Vec<usize> = match layout {
        Layout::Nchw => (2..k + 2).collect(),
        Layout::Nhwc => (1..k + 1).collect(),
    };
    let pads: Vec<(usize, usize)> = match padding {
        Padding::Valid => vec![(0, 0); k],
        Padding::Explicit(p) if p.len() == k => {
            let mut pads = Vec::with_capacity(k);
            for &(lo, hi) in p {
                match (usize::try_from(lo), usize::try_from(hi)) {
                    (Ok(lo), Ok(hi)) => pads.push((lo, hi)),
                    _ => {
                        return Err(Error::BadShapeArg {
                            op,
                            shape: shape.to_vec(),
                            detail: format!(
                                "negative padding {p:?}: pooling pads with the monoid's identity \
                                 only; slice the input to crop it"
                            ),
                        });
                    }
                }
            }
            pads
        }
        Padding::Explicit(p) => {
            return Err(Error::BadShapeArg {
                op,
                shape: shape.to_vec(),
                detail: format!(
                    "{} padding pairs for {k} spatial axes: give one (lo, hi) per spatial axis",
                    p.len()
                ),
            });
        }
        Padding::Same => (0..k)
            .map(|a| {
                let (n, s) = (shape[spatial[a]], strides[a].max(1));
                let out = n.div_ceil(s);
                // Saturating: a stride or window too large for 64 bits saturates, and the
                // window's shape rule then refuses the padding by name.
                let total = ((out.max(1) - 1).saturating_mul(s))
                    .saturating_add(window[a])
                    .saturating_sub(n);
                (total / 2, total - total / 2)
            })
            .collect(),
    };
    let r = k + 2;
    let mut w = Window::new(&vec![1; r], &vec![1; r], &vec![(0, 0); r]);
    for (a, &d) in spatial.iter().enumerate() {
        w.dims[d] = window[a];
        w.strides[d] = strides[a];
        w.padding[d] = pads[a];
    }
    Ok(w)
}

fn pool(
    op: WindowOp,
    name: &'static str,
    x: &Tensor,
    window: &[usize],
    strides: &[usize],
    padding: &Padding,
    layout: Layout,
) -> Tensor {
    if let Some(e) = x.error() {
        return Tensor::failed(e.clone());
    }
    match full_window(name, x.shape(), window, strides, padding, layout) {
        Ok(w) => x.reduce_window_dilated(op, &w),
        Err(e) => x.fail_with(e),
    }
}

/// Max pooling (`flax.linen.max_pool`): the maximum of each window; padding never wins. Its
/// gradient goes to the first maximum of each window (row-major), as JAX's. Any numeric dtype.
///
/// ```
/// use brigade::{Tensor, nn};
/// // NHWC: one 3x3 image with 1 channel; SAME padding keeps 3x3 outputs with stride 1.
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], &[1, 3, 3, 1]);
/// let y = nn::max_pool(&x, &[2, 2], &[1, 1], &nn::Padding::Same, nn::Layout::Nhwc);
/// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 6.0, 6.0, 8.0, 9.0, 9.0, 8.0, 9.0, 9.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn max_pool(
    x: &Tensor,
    window: &[usize],
    strides: &[usize],
    padding: &Padding,
    layout: Layout,
) -> Tensor {
    pool(
        WindowOp::Max,
        "max_pool",
        x,
        window,
        strides,
        padding,
        layout,
    )
}

/// Sum pooling: the sum of each window (padding adds 0). Any numeric dtype.
///
/// ```
/// use brigade::{Tensor, nn};
/// let x = Tensor::from_vec(vec![1i32, 2, 3, 4, 5], &[1, 1, 5]); // NCW
/// let y = nn::sum_pool(&x, &[2], &[2], &nn::Padding::Same, nn::Layout::Nchw);
/// assert_eq!(y.to_vec::<i32>()?, vec![3, 7, 5]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn sum_pool(
    x: &Tensor,
    window: &[usize],
    strides: &[usize],
    padding: &Padding,
    layout: Layout,
) -> Tensor {
    pool(
        WindowOp::Sum,
        "sum_pool",
        x,
        window,
        strides,
        padding,
        layout,
    )
}

/// Average pooling: the window's sum divided by its number of cells. With `count_include_pad`
/// (flax's `avg_pool` default, `True`) every window divides by the full window size, padded cells
/// counting as zeros; without it (flax's `count_include_pad=False`, `jax.example_libraries.stax`'s
/// `AvgPool`) by the number of real cells in that window. The two agree with VALID padding. Float
/// dtypes only.
///
/// ```
/// use brigade::{Tensor, nn};
/// let x = Tensor::from_vec(vec![2.0f32, 4.0, 6.0], &[1, 1, 3]); // NCW
/// let pad = nn::Padding::Explicit(vec![(1, 0)]);
/// let with = nn::avg_pool(&x, &[2], &[1], &pad, nn::Layout::Nchw, true);
/// assert_eq!(with.to_vec::<f32>()?, vec![1.0, 3.0, 5.0]);
/// let without = nn::avg_pool(&x, &[2], &[1], &pad, nn::Layout::Nchw, false);
/// assert_eq!(without.to_vec::<f32>()?, vec![2.0, 3.0, 5.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn avg_pool(
    x: &Tensor,
    window: &[usize],
    strides: &[usize],
    padding: &Padding,
    layout: Layout,
    count_include_pad: bool,
) -> Tensor {
    if let Some(e) = x.error() {
        return Tensor::failed(e.clone());
    }
    if !x.dtype().is_float() {
        return x.fail_with(Error::BadDType {
            op: "avg_pool",
            dtype: x.dtype(),
            hint: "an average is a float: cast to f32 first (or use sum_pool)",
            shapes: vec![x.shape().to_vec()],
        });
    }
    let w = match full_window("avg_pool", x.shape(), window, strides, padding, layout) {
        Ok(w) => w,
        Err(e) => return x.fail_with(e),
    };
    let sum = x.reduce_window_dilated(WindowOp::Sum, &w);
    if count_include_pad {
        let n = w.size() as f64;
        sum.div(&Tensor::scalar(
            crate::dtype::Scalar::F64(n).cast(x.dtype()),
        ))
    } else {
        // The real cells of each window: a window sum of ones (computed in the kernel's load).
        let count = Tensor::ones(x.shape(), x.dtype()).reduce_window_dilated(WindowOp::Sum, &w);
        sum.div(&count)
    }
}
