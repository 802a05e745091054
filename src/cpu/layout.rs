//! Layout primitives as strided copies: transpose, broadcast_in_dim and slice are one gather each
//! (an input offset per output axis: its stride, 0 for a stretched axis), copied row by row with
//! `copy_from_slice` / `fill` where the innermost stride allows; concatenate copies blocks; pad
//! fills and scatters. Pure data movement: the same values as the interpreter's index maps in
//! `crate::ops::layout`.

use super::par_fill;
use crate::dtype::Scalar;
use crate::error::Result;
use crate::host::{HostArray, HostData, strides};

/// Apply `$body` to the typed vector inside a `HostData`, rewrapping the result (`$v`: the slice).
macro_rules! typed {
    ($data:expr, |$v:ident| $body:expr) => {
        match $data {
            HostData::F32($v) => HostData::F32($body),
            HostData::F64($v) => HostData::F64($body),
            HostData::I32($v) => HostData::I32($body),
            HostData::U32($v) => HostData::U32($body),
            HostData::Bool($v) => HostData::Bool($body),
        }
    };
}
pub(crate) use typed;

/// A strided view: element `idx` of an array of `shape` sits at `base + Σ idx[d]·strides[d]`.
#[derive(Clone, Debug)]
pub(crate) struct View {
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub base: usize,
}

impl View {
    /// Merge axes that are one run in memory and drop size-1 axes (fewer, longer rows).
    fn simplified(&self) -> View {
        let mut shape: Vec<usize> = Vec::new();
        let mut st: Vec<usize> = Vec::new();
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            if n == 1 {
                continue;
            }
            match (shape.last_mut(), st.last_mut()) {
                // The previous axis steps over exactly this whole axis: one axis of n_prev·n.
                (Some(pn), Some(ps)) if *ps == s * n => {
                    *pn *= n;
                    *ps = s;
                }
                _ => {
                    shape.push(n);
                    st.push(s);
                }
            }
        }
        if shape.is_empty() {
            shape.push(1);
            st.push(0);
        }
        View {
            shape,
            strides: st,
            base: self.base,
        }
    }
    fn len(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Call `f(pos, offset, run)` for the rows covering linear positions `lo..hi` of `v` (row-major):
/// `run` elements starting at source offset `offset`, stepping by the innermost stride.
fn rows(v: &View, lo: usize, hi: usize, mut f: impl FnMut(usize, usize, usize)) {
    let r = v.shape.len();
    let inner = v.shape[r - 1];
    let is = v.strides[r - 1];
    let mut idx = crate::host::unravel(lo, &v.shape);
    let mut off = v.base
        + idx
            .iter()
            .zip(&v.strides)
            .map(|(i, s)| i * s)
            .sum::<usize>();
    let mut pos = lo;
    while pos < hi {
        let run = (inner - idx[r - 1]).min(hi - pos);
        f(pos, off, run);
        pos += run;
        idx[r - 1] += run;
        off += run * is;
        if idx[r - 1] < inner {
            continue;
        }
        // Carry into the outer axes.
        off -= inner * is;
        idx[r - 1] = 0;
        let mut d = r - 1;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            off += v.strides[d];
            if idx[d] < v.shape[d] {
                break;
            }
            off -= v.shape[d] * v.strides[d];
            idx[d] = 0;
        }
    }
}

/// The elements of view `v` of `src`, in row-major order.
pub(crate) fn gather<T: Copy + Default + Send + Sync>(src: &[T], v: &View) -> Vec<T> {
    let v = v.simplified();
    let mut out = vec![T::default(); v.len()];
    if out.is_empty() {
        return out;
    }
    let is = v.strides[v.strides.len() - 1];
    par_fill(&mut out, |at, o| {
        rows(&v, at, at + o.len(), |pos, off, run| {
            let dst = &mut o[pos - at..pos - at + run];
            match is {
                1 => dst.copy_from_slice(&src[off..off + run]),
                0 => dst.fill(src[off]),
                s => {
                    for (k, d) in dst.iter_mut().enumerate() {
                        *d = src[off + k * s];
                    }
                }
            }
        })
    });
    out
}

/// Write `src` (row-major, the shape of `v`) into view `v` of `dst`.
fn scatter<T: Copy>(dst: &mut [T], v: &View, src: &[T]) {
    let v = v.simplified();
    if src.is_empty() {
        return;
    }
    let is = v.strides[v.strides.len() - 1];
    rows(&v, 0, src.len(), |pos, off, run| match is {
        1 => dst[off..off + run].copy_from_slice(&src[pos..pos + run]),
        s => {
            for k in 0..run {
                dst[off + k * s] = src[pos + k];
            }
        }
    });
}

fn gather_data(x: &HostData, v: &View) -> HostData {
    typed!(x, |s| gather(s, v))
}

/// `transpose`: output axis `i` is input axis `perm[i]`.
pub(crate) fn transpose(x: &HostArray, perm: &[usize]) -> HostData {
    let st = strides(&x.shape);
    gather_data(
        &x.data,
        &View {
            shape: perm.iter().map(|&p| x.shape[p]).collect(),
            strides: perm.iter().map(|&p| st[p]).collect(),
            base: 0,
        },
    )
}

/// `broadcast_in_dim`: input axis `i` becomes output axis `dims[i]`; size-1 input axes stretch.
pub(crate) fn broadcast(x: &HostArray, shape: &[usize], dims: &[usize]) -> HostData {
    let st = strides(&x.shape);
    let mut out_st = vec![0; shape.len()];
    for (i, &d) in dims.iter().enumerate() {
        if x.shape[i] != 1 {
            out_st[d] = st[i];
        }
    }
    gather_data(
        &x.data,
        &View {
            shape: shape.to_vec(),
            strides: out_st,
            base: 0,
        },
    )
}

/// `slice` with start and stride per axis.
pub(crate) fn slice(x: &HostArray, start: &[usize], stride: &[usize], out: &[usize]) -> HostData {
    let st = strides(&x.shape);
    gather_data(
        &x.data,
        &View {
            shape: out.to_vec(),
            strides: st.iter().zip(stride).map(|(s, k)| s * k).collect(),
            base: start.iter().zip(&st).map(|(a, s)| a * s).sum(),
        },
    )
}

/// `concatenate` along `axis`: each input's block copied per outer index.
pub(crate) fn concatenate(xs: &[&HostArray], axis: usize, out: &[usize]) -> Option<HostData> {
    let first = xs.first()?;
    let outer: usize = out[..axis].iter().product();
    let inner: usize = out[axis + 1..].iter().product();
    macro_rules! cat {
        ($wrap:ident) => {{
            let parts = xs
                .iter()
                .map(|x| match &x.data {
                    HostData::$wrap(v) => Some((v.as_slice(), x.shape[axis] * inner)),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            let mut v = Vec::with_capacity(out.iter().product());
            for o in 0..outer {
                for (p, block) in &parts {
                    v.extend_from_slice(&p[o * block..(o + 1) * block]);
                }
            }
            HostData::$wrap(v)
        }};
    }
    Some(match &first.data {
        HostData::F32(_) => cat!(F32),
        HostData::F64(_) => cat!(F64),
        HostData::I32(_) => cat!(I32),
        HostData::U32(_) => cat!(U32),
        HostData::Bool(_) => cat!(Bool),
    })
}

/// `pad` (non-negative `lo`/`hi`, `interior` zeros between elements): the value everywhere, then
/// the input scattered at `lo + i·(interior + 1)` per axis.
pub(crate) fn pad(
    x: &HostArray,
    lo: &[usize],
    interior: &[usize],
    value: Scalar,
    out: &[usize],
) -> Result<HostData> {
    let n: usize = out.iter().product();
    let mut data = HostData::try_filled(value, n)?;
    let ost = strides(out);
    let v = View {
        shape: x.shape.clone(),
        strides: ost.iter().zip(interior).map(|(s, i)| s * (i + 1)).collect(),
        base: lo.iter().zip(&ost).map(|(l, s)| l * s).sum(),
    };
    match (&mut data, &x.data) {
        (HostData::F32(d), HostData::F32(s)) => scatter(d, &v, s),
        (HostData::F64(d), HostData::F64(s)) => scatter(d, &v, s),
        (HostData::I32(d), HostData::I32(s)) => scatter(d, &v, s),
        (HostData::U32(d), HostData::U32(s)) => scatter(d, &v, s),
        (HostData::Bool(d), HostData::Bool(s)) => scatter(d, &v, s),
        _ => {}
    }
    Ok(data)
}
