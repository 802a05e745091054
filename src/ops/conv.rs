//! `conv_general_dilated`: N-d convolution with strides, padding, input (lhs) and kernel (rhs)
//! dilation, dimension numbers and feature groups, as XLA and `jax.lax.conv_general_dilated`
//! define it. Every rule of the primitive lives here: parameters and their printing, the
//! shape/dtype rule, the CPU reference, the batching and VJP rules, and the GPU kernel (an
//! implicit GEMM, template `shaders/conv.wgsl`).
//!
//! Per spatial dimension, with input size `i`, window `w`, stride `s`, padding `(lo, hi)`, lhs
//! dilation `ld` and rhs dilation `rd`: the input is dilated to `(i - 1) * ld + 1` positions
//! (zeros between), padded by `lo` / `hi` zeros (negative padding crops), and the window, dilated
//! to `(w - 1) * rd + 1`, slides over it in steps of `s`: `out = (padded - window) / s + 1`, or 0
//! when the window is longer than the padded input (JAX's empty axis).
//! Output feature `o` belongs to group `o / (O / G)`, which reads input features
//! `g * C/G .. (g + 1) * C/G`; the kernel holds `C / G` input features.

use std::fmt;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::host::{HostArray, HostData, strides, unravel};
use crate::ops::rules::{Emitted, Lowering, OwnKernel, PlanCx, Rules, single_batch, single_vjp};
use crate::ops::sizes::{KERNEL_INDEX_MAX, dilated, kernel_index, one_window_stride, windows};
use crate::ops::{BatchCtx, Batched, Cotangents};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Eqn, Var};
use crate::wgsl::{Emitter, KernelSrc, fill};

const OP: &str = "conv_general_dilated";

/// Dimension numbers of a convolution (JAX's `ConvDimensionNumbers`): for each operand, the axis
/// positions of its batch-like and feature-like dimensions and then of its spatial dimensions.
/// Spatial dimension `d` of the three operands pair up.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConvDims {
    /// lhs (input): `[batch, feature, spatial...]` axis positions.
    pub lhs: Vec<usize>,
    /// rhs (kernel): `[out feature, in feature, spatial...]` axis positions.
    pub rhs: Vec<usize>,
    /// Output: `[batch, feature, spatial...]` axis positions.
    pub out: Vec<usize>,
}

impl ConvDims {
    /// The layout `NC...` / `OI...` / `NC...` (NCHW, OIHW, NCHW for 2-d) with `spatial` spatial
    /// dimensions: every spec is the identity.
    pub fn channels_first(spatial: usize) -> ConvDims {
        let id: Vec<usize> = (0..spatial + 2).collect();
        ConvDims {
            lhs: id.clone(),
            rhs: id.clone(),
            out: id,
        }
    }

    /// Dimension numbers from layout strings, as `jax.lax.conv_dimension_numbers` reads them:
    /// lhs and out strings name `N` (batch) and `C` (feature), the rhs string `O` (out feature)
    /// and `I` (in feature); any other letters are spatial dimensions, ordered as they appear in
    /// the rhs string and paired by letter: `("NHWC", "HWIO", "NHWC")`.
    pub fn from_specs(lhs: &str, rhs: &str, out: &str) -> Result<ConvDims> {
        let bad = |detail: String| Error::BadShapeArg {
            op: OP,
            shape: vec![],
            detail,
        };
        let (l, r, o): (Vec<char>, Vec<char>, Vec<char>) = (
            lhs.chars().collect(),
            rhs.chars().collect(),
            out.chars().collect(),
        );
        if l.len() != r.len() || l.len() != o.len() {
            return Err(bad(format!(
                "dimension numbers {lhs:?}, {rhs:?}, {out:?} have different lengths; each names every axis once"
            )));
        }
        let find = |spec: &[char], c: char, s: &str| -> Result<usize> {
            let n = spec.iter().filter(|&&x| x == c).count();
            if n != 1 {
                return Err(bad(format!(
                    "dimension numbers {s:?} must name '{c}' exactly once (found {n} times)"
                )));
            }
            Ok(spec.iter().position(|&x| x == c).unwrap_or(0))
        };
        let spatial: Vec<char> = r
            .iter()
            .copied()
            .filter(|&c| c != 'O' && c != 'I')
            .collect();
        let mut dims = ConvDims {
            lhs: vec![find(&l, 'N', lhs)?, find(&l, 'C', lhs)?],
            rhs: vec![find(&r, 'O', rhs)?, find(&r, 'I', rhs)?],
            out: vec![find(&o, 'N', out)?, find(&o, 'C', out)?],
        };
        for c in spatial {
            dims.rhs.push(find(&r, c, rhs)?);
            dims.lhs.push(find(&l, c, lhs)?);
            dims.out.push(find(&o, c, out)?);
        }
        Ok(dims)
    }

    /// Number of spatial dimensions.
    pub fn spatial(&self) -> usize {
        self.lhs.len().saturating_sub(2)
    }
}

/// How to pad the input of a convolution (or any windowed op).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Padding {
    /// No padding: only windows that fit entirely inside the input.
    Valid,
    /// `ceil(input / stride)` outputs per spatial dimension; the total padding needed is split
    /// with the smaller half in front (`lo = total / 2`), as JAX's `"SAME"`.
    Same,
    /// `(lo, hi)` per spatial dimension; negative values crop.
    Explicit(Vec<(i64, i64)>),
}

impl Padding {
    /// Explicit `(lo, hi)` pairs for inputs of spatial sizes `input`, windows of sizes `window`
    /// (before dilation) with dilation `rhs_dilation` and `strides`, computed as JAX's
    /// `padtype_to_pads` does.
    pub fn resolve(
        &self,
        input: &[usize],
        window: &[usize],
        strides: &[usize],
        rhs_dilation: &[usize],
    ) -> Result<Vec<(i64, i64)>> {
        let n = input.len();
        if window.len() != n || strides.len() != n || rhs_dilation.len() != n {
            return Err(Error::BadShapeArg {
                op: OP,
                shape: input.to_vec(),
                detail: format!(
                    "padding: {n} spatial dimensions but window {window:?}, strides {strides:?}, rhs_dilation {rhs_dilation:?}"
                ),
            });
        }
        Ok(match self {
            Padding::Valid => vec![(0, 0); n],
            Padding::Explicit(p) => p.clone(),
            Padding::Same => (0..n)
                .map(|d| {
                    // Exact in i128: a stride or dilation up to usize::MAX cannot wrap.
                    let s = strides[d].max(1) as i128;
                    let i = input[d] as i128;
                    let k = dilated(window[d], rhs_dilation[d]);
                    let out = (i + s - 1) / s;
                    let total = ((out - 1).max(0).saturating_mul(s).saturating_add(k) - i).max(0);
                    let lo = i64::try_from(total / 2);
                    let hi = i64::try_from(total - total / 2);
                    match (lo, hi) {
                        (Ok(lo), Ok(hi)) => Ok((lo, hi)),
                        _ => Err(Error::BadShapeArg {
                            op: OP,
                            shape: input.to_vec(),
                            detail: format!(
                                "padding: SAME padding of spatial dimension {d} (window {}, rhs_dilation {}, stride {}) is {total}, more than an i64 holds: use a smaller window or dilation",
                                window[d], rhs_dilation[d], strides[d]
                            ),
                        }),
                    }
                })
                .collect::<Result<_>>()?,
        })
    }
}

/// Parameters of `conv_general_dilated` (all per spatial dimension except the last two).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConvParams {
    /// Step of the window per spatial dimension.
    pub window_strides: Vec<usize>,
    /// `(lo, hi)` zeros added before and after the (dilated) input; negative values crop.
    pub padding: Vec<(i64, i64)>,
    /// Holes between input elements (1: none), the transposed convolution's stride.
    pub lhs_dilation: Vec<usize>,
    /// Holes between kernel taps (1: none), "atrous" convolution.
    pub rhs_dilation: Vec<usize>,
    /// Where the batch, feature and spatial axes of each operand are.
    pub dims: ConvDims,
    /// Input and output features are split into this many groups, each convolved with its own
    /// slice of the kernel's output features (`C` for depthwise convolution).
    pub feature_group_count: usize,
}

impl ConvParams {
    /// Stride 1, no padding, no dilation, one group, channels-first layout.
    pub fn plain(spatial: usize) -> ConvParams {
        ConvParams {
            window_strides: vec![1; spatial],
            padding: vec![(0, 0); spatial],
            lhs_dilation: vec![1; spatial],
            rhs_dilation: vec![1; spatial],
            dims: ConvDims::channels_first(spatial),
            feature_group_count: 1,
        }
    }
}

impl fmt::Display for ConvParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(OP)?;
        self.params(f)
    }
}

impl ConvParams {
    /// Whether the batch is the leading axis of the input and of the result: batch entries are
    /// independent, so arrays over one storage binding are cut into blocks of them
    /// (`lower::segments`).
    pub(crate) fn batch_leads(&self) -> bool {
        self.dims.lhs[0] == 0 && self.dims.out[0] == 0
    }

    /// Whether the first spatial axis directly follows the batch in the input and the result
    /// (NHWC): rows along it are contiguous within a batch entry, so a batch entry over one
    /// storage binding is cut into chunks of them (`lower::segments`).
    pub(crate) fn spatial_follows_batch(&self) -> bool {
        let d = &self.dims;
        d.lhs.len() > 2 && (d.lhs[0], d.lhs[2], d.out[0], d.out[2]) == (0, 1, 0, 1)
    }

    /// Whether the first spatial axis directly follows the contracted leading axis in both
    /// operands of a kernel gradient ([`ConvParams::contracts_lead`]; the forward pass was
    /// NHWC): rows along it are contiguous within one entry, so an entry over one storage
    /// binding is cut into chunks of them (`lower::segments`).
    pub(crate) fn spatial_follows_contracted(&self) -> bool {
        let d = &self.dims;
        d.lhs.len() > 2 && self.contracts_lead() && (d.lhs[2], d.rhs[2]) == (1, 1)
    }

    /// Whether both operands' (input) feature axes lead and are one group (the kernel gradient,
    /// which contracts over the batch): blocks of that axis give partial results to be summed.
    pub(crate) fn contracts_lead(&self) -> bool {
        self.dims.lhs[1] == 0 && self.dims.rhs[1] == 0 && self.feature_group_count == 1
    }

    /// The parameters as JAX prints them.
    fn params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.dims;
        write!(
            f,
            "[window_strides={:?} padding={:?} lhs_dilation={:?} rhs_dilation={:?} dimension_numbers=ConvDimensionNumbers(lhs_spec={:?}, rhs_spec={:?}, out_spec={:?}) feature_group_count={} batch_group_count=1]",
            self.window_strides,
            self.padding,
            self.lhs_dilation,
            self.rhs_dilation,
            d.lhs,
            d.rhs,
            d.out,
            self.feature_group_count
        )
    }
}

/// The user-facing options of [`crate::Tensor::conv_general_dilated`], mirroring the keyword
/// arguments of `jax.lax.conv_general_dilated`: strides and padding, then optional dilations,
/// layout strings and the feature group count (defaults: no dilation, channels-first layout
/// `NC...`/`OI...`/`NC...`, one group). Resolved against the operand shapes into the
/// primitive's [`ConvParams`] by [`ConvOptions::params`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvOptions {
    /// Per spatial dimension; empty means 1 everywhere.
    pub window_strides: Vec<usize>,
    /// `SAME`, `VALID` or explicit `(lo, hi)` pairs.
    pub padding: Padding,
    /// Per spatial dimension; `None` means 1 everywhere.
    pub lhs_dilation: Option<Vec<usize>>,
    /// Per spatial dimension; `None` means 1 everywhere.
    pub rhs_dilation: Option<Vec<usize>>,
    /// Layout strings `(lhs, rhs, out)` such as `("NHWC", "HWIO", "NHWC")` (see
    /// [`ConvDims::from_specs`]); `None` means channels first.
    pub dimension_numbers: Option<(String, String, String)>,
    /// Feature groups (1: an ordinary convolution).
    pub feature_group_count: usize,
}

impl ConvOptions {
    /// Strides (empty: 1 everywhere) and padding; everything else at its default.
    pub fn new(window_strides: &[usize], padding: Padding) -> ConvOptions {
        ConvOptions {
            window_strides: window_strides.to_vec(),
            padding,
            lhs_dilation: None,
            rhs_dilation: None,
            dimension_numbers: None,
            feature_group_count: 1,
        }
    }
    /// Holes between input elements (a transposed convolution's stride).
    pub fn lhs_dilation(mut self, d: &[usize]) -> ConvOptions {
        self.lhs_dilation = Some(d.to_vec());
        self
    }
    /// Holes between kernel taps (atrous convolution).
    pub fn rhs_dilation(mut self, d: &[usize]) -> ConvOptions {
        self.rhs_dilation = Some(d.to_vec());
        self
    }
    /// Layout strings, e.g. `("NHWC", "HWIO", "NHWC")`.
    pub fn dimension_numbers(mut self, lhs: &str, rhs: &str, out: &str) -> ConvOptions {
        self.dimension_numbers = Some((lhs.into(), rhs.into(), out.into()));
        self
    }
    /// Split features into `g` groups (`g` = input features: depthwise).
    pub fn feature_group_count(mut self, g: usize) -> ConvOptions {
        self.feature_group_count = g;
        self
    }

    /// The primitive's parameters for operands of shapes `lhs` and `rhs` (padding resolved).
    pub fn params(&self, lhs: &[usize], rhs: &[usize]) -> Result<ConvParams> {
        let err = |detail: String| Error::MatmulShape {
            op: OP,
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
            detail,
        };
        let rank = lhs.len();
        if rank < 2 || rhs.len() != rank {
            return Err(err(format!(
                "input and kernel must have the same rank, at least 2 (batch/feature axes plus spatial axes); got ranks {rank} and {}",
                rhs.len()
            )));
        }
        let nsp = rank - 2;
        let dims = match &self.dimension_numbers {
            Some((l, r, o)) => ConvDims::from_specs(l, r, o)?,
            None => ConvDims::channels_first(nsp),
        };
        if dims.lhs.len() != rank {
            return Err(err(format!(
                "dimension numbers name {} axes but the operands have rank {rank}",
                dims.lhs.len()
            )));
        }
        let ones = vec![1; nsp];
        let dilates_input = self
            .lhs_dilation
            .as_ref()
            .is_some_and(|d| d.iter().any(|&v| v != 1));
        if self.padding == Padding::Same && dilates_input {
            // As JAX: SAME is ambiguous for a transposed convolution.
            return Err(err(
                "Padding::Same is not defined together with lhs_dilation (a transposed convolution): give the padding as Padding::Explicit".into(),
            ));
        }
        let window_strides = if self.window_strides.is_empty() {
            ones.clone()
        } else {
            self.window_strides.clone()
        };
        let rhs_dilation = self.rhs_dilation.clone().unwrap_or_else(|| ones.clone());
        let input: Vec<usize> = dims.lhs[2..].iter().map(|&a| lhs[a]).collect();
        let window: Vec<usize> = dims.rhs[2..].iter().map(|&a| rhs[a]).collect();
        if window_strides.len() != nsp || rhs_dilation.len() != nsp {
            return Err(err(format!(
                "window_strides {window_strides:?} and rhs_dilation {rhs_dilation:?} need {nsp} entries, one per spatial dimension"
            )));
        }
        let padding = self
            .padding
            .resolve(&input, &window, &window_strides, &rhs_dilation)?;
        let lhs_dilation = self.lhs_dilation.clone().unwrap_or(ones);
        // Along an axis with at most one window the stride never multiplies a nonzero position:
        // a stride the kernels cannot index with (past i32, e.g. usize::MAX: JAX gives one
        // window) becomes the smallest that still leaves one window, with the same result, so
        // it stays out of the kernels and of the gradient's dilations. Representable strides
        // are kept as given (the program prints as JAX's).
        let mut window_strides = window_strides;
        if lhs_dilation.len() == nsp && padding.len() == nsp {
            for k in 0..nsp {
                let (lo, hi) = padding[k];
                let padded = dilated(input[k], lhs_dilation[k]) + lo as i128 + hi as i128;
                let span = dilated(window[k], rhs_dilation[k]);
                if window_strides[k] as i128 > KERNEL_INDEX_MAX
                    && windows(padded, span, window_strides[k]) <= 1
                {
                    window_strides[k] = one_window_stride(padded, span, window_strides[k]);
                }
            }
        }
        Ok(ConvParams {
            window_strides,
            padding,
            lhs_dilation,
            rhs_dilation,
            dims,
            feature_group_count: self.feature_group_count,
        })
    }
}

/// `conv_general_dilated(lhs, rhs)` with `opts` (see [`crate::Tensor::conv_general_dilated`]).
pub(crate) fn apply(
    lhs: &crate::tensor::Tensor,
    rhs: &crate::tensor::Tensor,
    opts: &ConvOptions,
) -> crate::tensor::Tensor {
    use crate::tensor::Tensor;
    if let Some(e) = lhs.error().or(rhs.error()) {
        return Tensor::failed(e.clone());
    }
    match opts.params(lhs.shape(), rhs.shape()) {
        Ok(p) => Tensor::apply(super::Prim::Conv(p), &[lhs, rhs]),
        Err(e) => lhs.fail_with(e),
    }
}

// ---- shape and dtype rule -----------------------------------------------------------------------

/// Sizes of one convolution, read through its dimension numbers.
struct Geometry {
    batch: usize,
    out_features: usize,
    /// Input features per group (the kernel's in-feature size).
    group_in: usize,
    input: Vec<usize>,
    window: Vec<usize>,
    output: Vec<usize>,
}

fn geometry(p: &ConvParams, lhs: &[usize], rhs: &[usize]) -> Result<Geometry> {
    let shape_err = |detail: String| Error::MatmulShape {
        op: OP,
        lhs: lhs.to_vec(),
        rhs: rhs.to_vec(),
        detail,
    };
    let d = &p.dims;
    let rank = lhs.len();
    if rank < 2 || rhs.len() != rank {
        return Err(shape_err(format!(
            "input and kernel must have the same rank, at least 2 (batch/feature axes plus spatial axes); got ranks {rank} and {}",
            rhs.len()
        )));
    }
    let nsp = rank - 2;
    for (what, spec) in [("lhs", &d.lhs), ("rhs", &d.rhs), ("out", &d.out)] {
        let mut s = spec.clone();
        s.sort_unstable();
        if !s.iter().copied().eq(0..rank) {
            return Err(shape_err(format!(
                "{what} dimension numbers {spec:?} must be a permutation of 0..{rank} (the operands have rank {rank})"
            )));
        }
    }
    for (what, n) in [
        ("window_strides", p.window_strides.len()),
        ("padding", p.padding.len()),
        ("lhs_dilation", p.lhs_dilation.len()),
        ("rhs_dilation", p.rhs_dilation.len()),
    ] {
        if n != nsp {
            return Err(shape_err(format!(
                "{what} has {n} entries but the operands have {nsp} spatial dimensions"
            )));
        }
    }
    for (what, v) in [
        ("window_strides", &p.window_strides),
        ("lhs_dilation", &p.lhs_dilation),
        ("rhs_dilation", &p.rhs_dilation),
    ] {
        if v.contains(&0) {
            return Err(shape_err(format!(
                "{what} {v:?} must be at least 1 everywhere"
            )));
        }
    }
    let g = p.feature_group_count;
    let (c, ci, o) = (lhs[d.lhs[1]], rhs[d.rhs[1]], rhs[d.rhs[0]]);
    if g == 0 || c % g != 0 || c / g != ci {
        return Err(shape_err(format!(
            "the input has {c} features and the kernel {ci} input features; with feature_group_count {g} they must satisfy input = {g} x kernel (use feature_group_count {} or a kernel with {} input features)",
            if ci > 0 && c % ci == 0 { c / ci } else { 1 },
            c.checked_div(g).unwrap_or(c)
        )));
    }
    if o % g != 0 {
        return Err(shape_err(format!(
            "the kernel's {o} output features do not split into feature_group_count {g} groups: use a multiple of {g}"
        )));
    }
    let input: Vec<usize> = d.lhs[2..].iter().map(|&a| lhs[a]).collect();
    let window: Vec<usize> = d.rhs[2..].iter().map(|&a| rhs[a]).collect();
    let mut output = Vec::with_capacity(nsp);
    for k in 0..nsp {
        let (lo, hi) = p.padding[k];
        let dil_in = dilated(input[k], p.lhs_dilation[k]);
        let padded = dil_in + lo as i128 + hi as i128;
        let win = dilated(window[k], p.rhs_dilation[k]);
        let out = windows(padded, win, p.window_strides[k]);
        // Every value the kernel indexes with (and so every literal it is written with) must
        // fit i32; checked before the crop test so a huge dilation is named as such.
        let limits = [
            ("the input size", input[k] as i128),
            ("the window size", window[k] as i128),
            ("the window stride", p.window_strides[k] as i128),
            ("the lhs_dilation", p.lhs_dilation[k] as i128),
            ("the rhs_dilation", p.rhs_dilation[k] as i128),
            ("the low padding", lo as i128),
            ("the high padding", hi as i128),
            ("the dilated input's length", dil_in),
            ("the dilated window's span", win),
            (
                "the dilated input's length plus the padding",
                dil_in + (lo as i128).abs() + (hi as i128).abs(),
            ),
        ];
        for (what, v) in limits {
            kernel_index(what, v).map_err(|e| shape_err(format!("spatial dimension {k}: {e}")))?;
        }
        if padded < 0 {
            return Err(shape_err(format!(
                "spatial dimension {k}: the padding ({lo}, {hi}) crops more than the input's {dil_in} positions (size {} with lhs_dilation {}); crop less",
                input[k], p.lhs_dilation[k]
            )));
        }
        // A window longer than the padded input fits nowhere: an empty axis, as JAX's shape rule
        // gives (not an error).
        output.push(out as usize);
    }
    Ok(Geometry {
        batch: lhs[d.lhs[0]],
        out_features: o,
        group_in: ci,
        input,
        window,
        output,
    })
}

/// Shape and dtype rule: float operands of one dtype (f32 on GPU devices; f64 on the cpu device).
fn infer(p: &ConvParams, lhs: &Aval, rhs: &Aval) -> Result<Aval> {
    if lhs.dtype != rhs.dtype {
        return Err(Error::DTypeMismatch {
            op: OP,
            lhs: lhs.dtype,
            rhs: rhs.dtype,
            shapes: vec![],
        });
    }
    if !lhs.dtype.is_float() {
        return Err(Error::BadDType {
            op: OP,
            dtype: lhs.dtype,
            hint: "convolution is defined for floats: cast both operands to f32 (the GPU kernel is f32 only; f64 runs on the cpu device)",
            shapes: vec![],
        });
    }
    let geo = geometry(p, &lhs.shape, &rhs.shape)?;
    let mut out = vec![0; lhs.shape.len()];
    out[p.dims.out[0]] = geo.batch;
    out[p.dims.out[1]] = geo.out_features;
    for (k, &a) in p.dims.out[2..].iter().enumerate() {
        out[a] = geo.output[k];
    }
    Ok(Aval::new(out, lhs.dtype))
}

// ---- CPU reference ------------------------------------------------------------------------------

/// CPU reference: direct loops, f64 accumulation. Inputs have passed [`infer`].
fn eval_cpu(p: &ConvParams, x: &HostArray, k: &HostArray, out: &Aval) -> HostArray {
    let d = &p.dims;
    let n_out = out.size();
    let mut acc = vec![0f64; n_out];
    if let Ok(geo) = geometry(p, &x.shape, &k.shape) {
        let (xs, ks) = (strides(&x.shape), strides(&k.shape));
        let og = geo.out_features / p.feature_group_count;
        let win_n: usize = geo.window.iter().product();
        let nsp = geo.window.len();
        for (lin, a) in acc.iter_mut().enumerate() {
            let idx = unravel(lin, &out.shape);
            let (n, o) = (idx[d.out[0]], idx[d.out[1]]);
            let g = o / og.max(1);
            let mut sum = 0f64;
            for c in 0..geo.group_in {
                let xb = n * xs[d.lhs[0]] + (g * geo.group_in + c) * xs[d.lhs[1]];
                let kb = o * ks[d.rhs[0]] + c * ks[d.rhs[1]];
                'window: for w in 0..win_n {
                    let wi = unravel(w, &geo.window);
                    let (mut xo, mut ko) = (xb, kb);
                    for s in 0..nsp {
                        let pos = (idx[d.out[2 + s]] * p.window_strides[s]
                            + wi[s] * p.rhs_dilation[s]) as i64
                            - p.padding[s].0;
                        let ld = p.lhs_dilation[s] as i64;
                        if pos < 0 || pos % ld != 0 || pos / ld >= geo.input[s] as i64 {
                            continue 'window;
                        }
                        xo += (pos / ld) as usize * xs[d.lhs[2 + s]];
                        ko += wi[s] * ks[d.rhs[2 + s]];
                    }
                    sum += x.data.get_f64(xo) * k.data.get_f64(ko);
                }
            }
            *a = sum;
        }
    }
    let data = match out.dtype {
        DType::F64 => HostData::F64(acc),
        _ => HostData::F32(acc.into_iter().map(|v| v as f32).collect()),
    };
    HostArray {
        shape: out.shape.clone(),
        data,
    }
}

// ---- batching rule ------------------------------------------------------------------------------

/// `t` with axis `from` moved to just before axis `into` (numbered without `from`) and merged
/// with it, `from` the major part.
fn fold_axis(t: &crate::tensor::Tensor, from: usize, into: usize) -> crate::tensor::Tensor {
    let moved = super::move_axis(t, from, into);
    let mut shape = moved.shape().to_vec();
    let b = shape.remove(into);
    shape[into] *= b;
    moved.reshape_exact(&shape)
}

/// Axis `axis` of `t` split into `(b, rest)` and the `b` part moved to the front.
fn unfold_axis(t: &crate::tensor::Tensor, axis: usize, b: usize) -> crate::tensor::Tensor {
    let mut shape = t.shape().to_vec();
    let n = shape[axis];
    shape[axis] = n / b.max(1);
    shape.insert(axis, b);
    super::move_axis(&t.reshape_exact(&shape), axis, 0)
}

/// Batching rule, as JAX's: a batched input folds the vmap axis into its batch dimension; a
/// batched kernel folds it into the output features (inside each feature group); both batched
/// fold it into the features of both and multiply the groups, so each example is convolved with
/// its own kernel. The result's vmap axis is unfolded from where it went and moved to the front.
fn batch(p: &ConvParams, ins: &[super::Batched], ctx: &super::BatchCtx<'_>) -> super::Batched {
    use crate::tensor::Tensor;
    let ((x, xb), (k, kb)) = (&ins[0], &ins[1]);
    let bsz = ctx.size;
    let d = &p.dims;
    let g = p.feature_group_count;
    let apply =
        |q: ConvParams, x: &Tensor, k: &Tensor| Tensor::apply(super::Prim::Conv(q), &[x, k]);
    match (*xb, *kb) {
        (true, false) => {
            let x = fold_axis(x, 0, d.lhs[0]);
            (unfold_axis(&apply(p.clone(), &x, k), d.out[0], bsz), true)
        }
        (false, true) => {
            // Output features are group-major: (G, O/G) becomes (G, B, O/G).
            let o = d.rhs[0];
            let moved = super::move_axis(k, 0, o);
            let mut shape = moved.shape().to_vec();
            let of = shape[o + 1];
            shape.splice(o..o + 2, [bsz, g, of / g]);
            let k = super::move_axis(&moved.reshape_exact(&shape), o + 1, o);
            let mut merged = k.shape().to_vec();
            merged.splice(o..o + 3, [bsz * of]);
            let k = k.reshape_exact(&merged);
            let y = apply(p.clone(), x, &k);
            let f = d.out[1];
            let mut split = y.shape().to_vec();
            split.splice(f..f + 1, [g, bsz, of / g]);
            let y = super::move_axis(&y.reshape_exact(&split), f + 1, 0);
            let mut back = y.shape().to_vec();
            back.splice(f + 1..f + 3, [of]);
            (y.reshape_exact(&back), true)
        }
        (true, true) => {
            let x = fold_axis(x, 0, d.lhs[1]);
            let k = fold_axis(k, 0, d.rhs[0]);
            let q = ConvParams {
                feature_group_count: g * bsz,
                ..p.clone()
            };
            (unfold_axis(&apply(q, &x, &k), d.out[1], bsz), true)
        }
        (false, false) => (apply(p.clone(), x, k), false),
    }
}

// ---- VJP rule -----------------------------------------------------------------------------------

/// `t` reversed along `axes` (a gather with reversed indices; its VJP is a scatter-add).
fn flip(t: &crate::tensor::Tensor, axes: &[usize]) -> crate::tensor::Tensor {
    let mut out = t.clone();
    for &a in axes {
        let n = out.shape()[a];
        if n > 1 {
            let idx: Vec<i32> = (0..n as i32).rev().collect();
            out = out.index_take(&crate::tensor::Tensor::from_vec(idx, &[n]), a as i64);
        }
    }
    out
}

/// VJP rule: both cotangents are convolutions (JAX's transpose rules of the bilinear primitive).
///
/// Input: the cotangent, dilated by the strides (`lhs_dilation = window_strides`), convolved with
/// the spatially flipped kernel whose in/out features are swapped (per group), with stride
/// `lhs_dilation`, padding `lo' = window - 1 - lo` and `hi' = (i - 1) * ld - (o - 1) * s + lo`
/// (so that the result has the input's size; negative values crop positions that only met
/// padding).
///
/// Kernel: the input convolved with the cotangent, batch and feature roles swapped (the batch is
/// contracted, the input features become the batch): stride `rhs_dilation`, rhs dilation
/// `window_strides`, lhs dilation kept, padding `lo` and `hi' = (w - 1) * rd + (o - 1) * s -
/// (i - 1) * ld - lo`. With feature groups, one such convolution per group.
fn vjp(
    p: &ConvParams,
    ins: &[crate::tensor::Tensor],
    ct: &crate::tensor::Tensor,
) -> super::Cotangents {
    use crate::tensor::Tensor;
    let (x, k) = (&ins[0], &ins[1]);
    let Ok(geo) = geometry(p, x.shape(), k.shape()) else {
        return vec![None, None];
    };
    let d = &p.dims;
    let nsp = geo.window.len();
    let g = p.feature_group_count;
    let empty = x.size() == 0 || k.size() == 0 || ct.size() == 0;
    if empty {
        return vec![Some(super::zeros_like(x)), Some(super::zeros_like(k))];
    }
    let conv = |q: ConvParams, a: &Tensor, b: &Tensor| Tensor::apply(super::Prim::Conv(q), &[a, b]);
    let sp = |k: usize| -> (i64, i64, i64, i64, i64, i64, i64) {
        (
            geo.input[k] as i64,
            geo.window[k] as i64,
            geo.output[k] as i64,
            p.window_strides[k] as i64,
            p.lhs_dilation[k] as i64,
            p.rhs_dilation[k] as i64,
            p.padding[k].0,
        )
    };

    // d lhs: kernel in canonical (O, I, spatial) order, regrouped to (C, O/G, spatial), flipped.
    let canon = k.transpose(&d.rhs);
    let (o, ci) = (geo.out_features, geo.group_in);
    let mut shape = canon.shape().to_vec();
    let regrouped = if g == 1 {
        let mut perm: Vec<usize> = (0..nsp + 2).collect();
        perm.swap(0, 1);
        canon.transpose(&perm)
    } else {
        shape.splice(0..1, [g, o / g]);
        let mut perm: Vec<usize> = (0..nsp + 3).collect();
        perm.swap(1, 2);
        let t = canon.reshape_exact(&shape).transpose(&perm);
        let mut merged = t.shape().to_vec();
        merged.splice(0..2, [g * ci]);
        t.reshape_exact(&merged)
    };
    let spatial_axes: Vec<usize> = (2..nsp + 2).collect();
    let kt = flip(&regrouped, &spatial_axes);
    let lhs_q = ConvParams {
        window_strides: p.lhs_dilation.clone(),
        padding: (0..nsp)
            .map(|k| {
                let (i, w, o, s, ld, rd, lo) = sp(k);
                let win = (w - 1) * rd + 1;
                (win - 1 - lo, (i - 1) * ld - (o - 1) * s + lo)
            })
            .collect(),
        lhs_dilation: p.window_strides.clone(),
        rhs_dilation: p.rhs_dilation.clone(),
        dims: ConvDims {
            lhs: d.out.clone(),
            rhs: (0..nsp + 2).collect(),
            out: d.lhs.clone(),
        },
        feature_group_count: g,
    };
    let dx = conv(lhs_q, ct, &kt);

    // d rhs: per group, the input (features as batch) convolved with the cotangent.
    let swap = |v: &[usize]| -> Vec<usize> {
        let mut s = v.to_vec();
        s.swap(0, 1);
        s
    };
    let rhs_q = ConvParams {
        window_strides: p.rhs_dilation.clone(),
        padding: (0..nsp)
            .map(|k| {
                let (i, w, o, s, ld, rd, lo) = sp(k);
                (lo, (w - 1) * rd + (o - 1) * s - (i - 1) * ld - lo)
            })
            .collect(),
        lhs_dilation: p.lhs_dilation.clone(),
        rhs_dilation: p.window_strides.clone(),
        dims: ConvDims {
            lhs: swap(&d.lhs),
            rhs: swap(&d.out),
            out: swap(&d.rhs),
        },
        feature_group_count: 1,
    };
    let dk = if g == 1 {
        conv(rhs_q, x, ct)
    } else {
        let og = o / g;
        let parts: Vec<Tensor> = (0..g)
            .map(|j| {
                let xg = x.slice_axis(d.lhs[1] as i64, j * ci, (j + 1) * ci);
                let cg = ct.slice_axis(d.out[1] as i64, j * og, (j + 1) * og);
                conv(rhs_q.clone(), &xg, &cg)
            })
            .collect();
        let refs: Vec<&Tensor> = parts.iter().collect();
        Tensor::concatenate(&refs, d.rhs[0] as i64)
    };
    vec![Some(dx), Some(dk)]
}

// ---- GPU lowering: an implicit GEMM -------------------------------------------------------------

const TEMPLATE: &str = include_str!("../../shaders/conv.wgsl");

/// Invocations per workgroup of the kernel.
const WORKGROUP: u32 = 64;

/// The kernel computing `y = conv(x, k)` for the shapes given (f32; all three arrays row-major in
/// their own layouts): label, WGSL and workgroup counts.
///
/// Per feature group it is a GEMM with `M = batch x output positions` rows, `N = output features
/// of the group` columns and `K = input features of the group x window taps`: each invocation
/// accumulates a `tm x tn` register tile of `y` (as the tiled matmul does, no workgroup memory:
/// barriers are very costly on llvmpipe), walking K as nested loops over input features and
/// window taps. The A operand (im2col) is never stored: every load computes its input position
/// from the output position and tap, and loads a zero where that position falls into padding or
/// between dilated input elements. Invocations are numbered over (group, column tile, row tile),
/// row tile fastest, so neighbouring lanes read the same kernel taps and neighbouring inputs.
pub(crate) fn kernel(
    p: &ConvParams,
    x_shape: &[usize],
    k_shape: &[usize],
    y_shape: &[usize],
    max_workgroups_per_dim: u32,
) -> Result<(String, String, [u32; 3])> {
    let geo = geometry(p, x_shape, k_shape)?;
    let d = &p.dims;
    let nsp = geo.window.len();
    let (xs, ks, ys) = (strides(x_shape), strides(k_shape), strides(y_shape));
    let g = p.feature_group_count;
    let og = geo.out_features / g;
    let positions: usize = geo.output.iter().product();
    let m = geo.batch * positions;
    let tn = match og {
        0..=1 => 1,
        2..=3 => 2,
        _ => 4,
    };
    let tm = if tn == 4 { 4 } else { 8 };
    let row_tiles = m.div_ceil(tm);
    let col_tiles = og.div_ceil(tn);
    let tiles = (g * row_tiles * col_tiles) as u64;
    let workgroups = crate::ops::matmul::kernel::fold_workgroups(
        tiles.div_ceil(WORKGROUP as u64),
        max_workgroups_per_dim.max(1),
    );
    let mut setup = String::new();
    let mut line = |s: String| {
        setup.push_str("    ");
        setup.push_str(&s);
        setup.push('\n');
    };
    // Rows: output position (n, o_0, ..) of each row, its first padded input position per
    // spatial dimension, and its output offset.
    for i in 0..tm {
        line(format!("let m{i} = min(row0 + {i}u, {}u);", m.max(1) - 1));
        line(format!("let n{i} = m{i} / {}u;", positions.max(1)));
        line(format!("var r{i} = m{i} % {}u;", positions.max(1)));
        let mut yoff = format!("n{i} * {}u", ys[d.out[0]]);
        for s in (0..nsp).rev() {
            line(format!("let od{i}_{s} = r{i} % {}u;", geo.output[s].max(1)));
            line(format!("r{i} = r{i} / {}u;", geo.output[s].max(1)));
            line(format!(
                "let p{i}_{s} = i32(od{i}_{s} * {}u) - ({}i);",
                p.window_strides[s], p.padding[s].0
            ));
            yoff.push_str(&format!(" + od{i}_{s} * {}u", ys[d.out[2 + s]]));
        }
        line(format!(
            "let xb{i} = n{i} * {}u + g * {}u;",
            xs[d.lhs[0]],
            geo.group_in * xs[d.lhs[1]]
        ));
        line(format!("let yb{i} = {yoff};"));
    }
    for j in 0..tn {
        line(format!(
            "let o{j} = g * {og}u + min(col0 + {j}u, {}u);",
            og.max(1) - 1
        ));
        line(format!("let kb{j} = o{j} * {}u;", ks[d.rhs[0]]));
        for i in 0..tm {
            line(format!("var acc{i}_{j} = 0.0;"));
        }
    }
    // The K loop: input features, then one nested loop per spatial dimension of the window.
    let mut body = String::new();
    let mut indent = 1;
    let emit = |body: &mut String, indent: usize, s: String| {
        body.push_str(&"    ".repeat(indent));
        body.push_str(&s);
        body.push('\n');
    };
    emit(
        &mut body,
        indent,
        format!("for (var c = 0u; c < {}u; c += 1u) {{", geo.group_in),
    );
    indent += 1;
    emit(
        &mut body,
        indent,
        format!("let kc = c * {}u;", ks[d.rhs[1]]),
    );
    for i in 0..tm {
        emit(
            &mut body,
            indent,
            format!("let xo{i}_c = xb{i} + c * {}u;", xs[d.lhs[1]]),
        );
        emit(&mut body, indent, format!("let ok{i}_c = true;"));
    }
    let mut prev = "c".to_string();
    let mut kprev = "kc".to_string();
    for s in 0..nsp {
        emit(
            &mut body,
            indent,
            format!(
                "for (var w{s} = 0u; w{s} < {}u; w{s} += 1u) {{",
                geo.window[s]
            ),
        );
        indent += 1;
        emit(
            &mut body,
            indent,
            format!("let k{s} = {kprev} + w{s} * {}u;", ks[d.rhs[2 + s]]),
        );
        let ld = p.lhs_dilation[s];
        let extent = dilated(geo.input[s], ld);
        for i in 0..tm {
            emit(
                &mut body,
                indent,
                format!(
                    "let q{i}_{s} = p{i}_{s} + i32(w{s} * {}u);",
                    p.rhs_dilation[s]
                ),
            );
            let hole = if ld > 1 {
                format!(" && (q{i}_{s} % {ld}i) == 0i")
            } else {
                String::new()
            };
            emit(
                &mut body,
                indent,
                format!(
                    "let ok{i}_{s} = ok{i}_{prev} && q{i}_{s} >= 0i && q{i}_{s} < {extent}i{hole};"
                ),
            );
            emit(
                &mut body,
                indent,
                format!(
                    "let xo{i}_{s} = xo{i}_{prev} + (u32(max(q{i}_{s}, 0i)) / {ld}u) * {}u;",
                    xs[d.lhs[2 + s]]
                ),
            );
        }
        prev = s.to_string();
        kprev = format!("k{s}");
    }
    for j in 0..tn {
        emit(&mut body, indent, format!("let b{j} = K[kb{j} + {kprev}];"));
    }
    for i in 0..tm {
        emit(&mut body, indent, format!("var a{i} = 0.0;"));
        emit(
            &mut body,
            indent,
            format!("if (ok{i}_{prev}) {{ a{i} = X[xo{i}_{prev}]; }}"),
        );
        for j in 0..tn {
            emit(
                &mut body,
                indent,
                format!("acc{i}_{j} = fma(a{i}, b{j}, acc{i}_{j});"),
            );
        }
    }
    while indent > 1 {
        indent -= 1;
        emit(&mut body, indent, "}".into());
    }
    let mut store = String::new();
    for i in 0..tm {
        for j in 0..tn {
            store.push_str(&format!(
                "    if (row0 + {i}u < {m}u && col0 + {j}u < {og}u) {{ Y[yb{i} + o{j} * {}u] = acc{i}_{j}; }}\n",
                ys[d.out[1]]
            ));
        }
    }
    let wgsl = fill(
        TEMPLATE,
        &[
            ("WG", &WORKGROUP.to_string()),
            ("TM", &tm.to_string()),
            ("TN", &tn.to_string()),
            ("ROW_TILES", &row_tiles.max(1).to_string()),
            ("COL_TILES", &col_tiles.max(1).to_string()),
            ("TILES", &tiles.to_string()),
            ("GRID_X", &workgroups[0].max(1).to_string()),
            ("GRID_Y", &workgroups[1].max(1).to_string()),
            ("SETUP", &setup),
            ("BODY", &body),
            ("STORE", &store),
        ],
    );
    let label = format!(
        "conv_t{tm}x{tn}_x{}_k{}_y{}_g{g}",
        dims_label(x_shape),
        dims_label(k_shape),
        dims_label(y_shape)
    );
    Ok((label, wgsl, workgroups))
}

fn dims_label(s: &[usize]) -> String {
    s.iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join("x")
}

/// The lowering step of a convolution equation: its kernel, reading both operands from stored
/// buffers (the planner materializes them).
fn kernel_src(
    p: &ConvParams,
    g: &crate::trace::graph::Graph,
    e: &crate::trace::graph::Eqn,
    max_workgroups_per_dim: u32,
) -> Result<crate::wgsl::KernelSrc> {
    let (x, k) = (e.inputs[0], e.inputs[1]);
    let (label, wgsl, workgroups) = kernel(
        p,
        &g.aval(x).shape,
        &g.aval(k).shape,
        &g.aval(e.out).shape,
        max_workgroups_per_dim,
    )?;
    Ok(crate::wgsl::KernelSrc {
        label,
        wgsl,
        inputs: vec![x, k],
        workgroups,
    })
}

// ---- the family -----------------------------------------------------------------------------------

/// `conv_general_dilated` is the family's one primitive; [`ConvParams`] are its parameters.
impl Rules for ConvParams {
    fn name(&self) -> &'static str {
        OP
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.params(f)
    }

    fn arity(&self) -> Option<usize> {
        Some(2)
    }

    fn result_count(&self) -> usize {
        1
    }

    fn infer(&self, ins: &[&Aval]) -> Result<Vec<Aval>> {
        Ok(vec![infer(self, ins[0], ins[1])?])
    }

    fn eval_cpu(&self, ins: &[&HostArray], outs: &[Aval]) -> Result<Vec<HostArray>> {
        Ok(vec![eval_cpu(self, ins[0], ins[1], &outs[0])])
    }

    fn lowering(&self) -> Lowering<'_> {
        Lowering::Kernel(self)
    }

    fn emit_wgsl(&self, _em: &mut Emitter<'_>, _ins: &[Var], _idx: &[String]) -> Option<Emitted> {
        // An implicit GEMM kernel of its own (see `OwnKernel`).
        None
    }

    fn batch(&self, ins: &[Batched], ctx: &BatchCtx<'_>) -> Result<Vec<Batched>> {
        single_batch(batch(self, ins, ctx))
    }

    fn vjp(&self, ins: &[Tensor], _outs: &[Tensor], cts: &[Option<Tensor>]) -> Result<Cotangents> {
        single_vjp(ins, cts, |ct| vjp(self, ins, ct))
    }

    fn has_effect(&self) -> bool {
        false
    }
}

impl OwnKernel for ConvParams {
    fn stores_operands(&self) -> bool {
        true
    }

    fn kernel(&self, cx: &PlanCx<'_>, e: &Eqn) -> Result<KernelSrc> {
        kernel_src(self, cx.g, e, cx.max_wg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_like_jax() {
        let d = ConvDims::from_specs("NHWC", "HWIO", "NHWC").unwrap();
        assert_eq!(d.lhs, vec![0, 3, 1, 2]);
        assert_eq!(d.rhs, vec![3, 2, 0, 1]);
        assert_eq!(d.out, vec![0, 3, 1, 2]);
        let d = ConvDims::from_specs("NCHW", "OIHW", "NCHW").unwrap();
        assert_eq!(d, ConvDims::channels_first(2));
        assert!(ConvDims::from_specs("NCHW", "OIH", "NCHW").is_err());
        assert!(ConvDims::from_specs("NCHH", "OIHW", "NCHW").is_err());
    }

    #[test]
    fn same_padding_matches_jax() {
        // in 5, window 3, stride 2: out 3, total pad (3-1)*2+3-5 = 2 -> (1, 1).
        let p = Padding::Same.resolve(&[5], &[3], &[2], &[1]).unwrap();
        assert_eq!(p, vec![(1, 1)]);
        // in 6, window 3, stride 2: out 3, total 1 -> (0, 1).
        let p = Padding::Same.resolve(&[6], &[3], &[2], &[1]).unwrap();
        assert_eq!(p, vec![(0, 1)]);
        // window 3 dilated by 2 spans 5: stride 1 -> total 4 -> (2, 2).
        let p = Padding::Same.resolve(&[7], &[3], &[1], &[2]).unwrap();
        assert_eq!(p, vec![(2, 2)]);
    }

    #[test]
    fn kernels_are_naga_valid() {
        let mut cases = vec![];
        let mut p = ConvParams::plain(2);
        cases.push((p.clone(), vec![2, 3, 5, 5], vec![4, 3, 3, 3]));
        p.window_strides = vec![2, 1];
        p.padding = vec![(1, -1), (2, 0)];
        p.lhs_dilation = vec![2, 1];
        p.rhs_dilation = vec![1, 2];
        p.feature_group_count = 3;
        cases.push((p, vec![1, 6, 4, 5], vec![3, 2, 2, 2]));
        let mut q = ConvParams::plain(1);
        q.dims = ConvDims::from_specs("NWC", "WIO", "NWC").unwrap();
        cases.push((q, vec![2, 7, 3], vec![2, 3, 1]));
        for (p, xs, ks) in cases {
            let y = infer(
                &p,
                &Aval::new(xs.clone(), DType::F32),
                &Aval::new(ks.clone(), DType::F32),
            )
            .unwrap();
            let (label, wgsl, _) = kernel(&p, &xs, &ks, &y.shape, 65_535).unwrap();
            crate::device::validate_wgsl(&label, &wgsl)
                .unwrap_or_else(|e| panic!("{label}: {e}\n{wgsl}"));
        }
    }
}
