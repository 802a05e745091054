//! Random-number primitives: the counter-based threefry2x32 hash behind JAX's default PRNG.
//!
//! A key is a `u32[2]` array (JAX's raw `PRNGKey` layout). Two primitives cover what JAX builds its
//! samplers from, with `jax_threefry_partitionable` semantics (the default in current JAX; checked
//! against JAX 0.10.2):
//!
//! - `random_bits[shape]` / `random_split[shape]` (`Prim::Random(RandomOp::Bits { shape, split })`): element
//!   `i` (row-major linear index, a 64-bit counter split into `hi = i >> 32`, `lo = i & 0xffffffff`)
//!   is `threefry2x32(key, (hi, lo))`; `random_bits` returns the two output words xor-ed, `random_split`
//!   both words on a trailing axis of 2 (so `split(key, n)` is `random_split[shape=[n]]`).
//! - `random_fold_in` (`Prim::Random(RandomOp::FoldIn)`): `threefry2x32(key, (0, data))`, both words, a new key.
//!
//! Both take keys of shape `u32[..., 2]`: leading axes are independent keys, and the result gets the
//! same leading axes (`[B, 2]` keys give `[B, shape...]`). That is the batching rule: `vmap` over keys
//! adds a leading key axis and needs nothing else (fold_in's data gets the same leading axes). The
//! public functions in [`crate::random`] accept single keys only, like JAX.
//!
//! The hash is pure u32 arithmetic, computed per output element inline in fused kernels (WGSL) and
//! by the same function on the CPU, so every backend gives the same bits. Random primitives have no
//! gradient: the VJP gives no cotangent for keys or data.

use std::fmt;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::host::{HostArray, HostData};
use crate::ops::rules::{Emitted, Lowering, Rules, single_batch};
use crate::ops::{BatchCtx, Batched, Cotangents, Prim};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Var};
use crate::wgsl::Emitter;

/// Threefry's key-schedule parity constant.
const PARITY: u32 = 0x1BD1_1BDA;
/// Rotation amounts of the even and odd groups of four rounds.
const ROTATIONS: [[u32; 4]; 2] = [[13, 15, 26, 6], [17, 29, 16, 24]];

/// The threefry2x32 block function (20 rounds): hash the counter pair `x` under `key`.
pub fn threefry2x32(key: [u32; 2], x: [u32; 2]) -> [u32; 2] {
    let ks = [key[0], key[1], key[0] ^ key[1] ^ PARITY];
    let mut v = [x[0].wrapping_add(ks[0]), x[1].wrapping_add(ks[1])];
    for group in 0..5usize {
        for r in ROTATIONS[group % 2] {
            v[0] = v[0].wrapping_add(v[1]);
            v[1] = v[1].rotate_left(r) ^ v[0];
        }
        // Key injection after every four rounds: the schedule rotates by one word each time.
        v[0] = v[0].wrapping_add(ks[(group + 1) % 3]);
        v[1] = v[1]
            .wrapping_add(ks[(group + 2) % 3])
            .wrapping_add(group as u32 + 1);
    }
    v
}

/// WGSL of [`threefry2x32`]: `bthreefry(k0, k1, hi, lo) -> vec2<u32>`, the same rounds unrolled.
pub(crate) const THREEFRY_WGSL: &str =
    include_str!("../../shaders/lib/threefry.wgsl").trim_ascii_end();

/// Check that `key` is an array of keys `u32[..., 2]`; returns its leading (batch) axes.
fn key_lead<'a>(op: &'static str, key: &'a Aval) -> Result<&'a [usize]> {
    if key.dtype != DType::U32 {
        return Err(Error::BadDType {
            op,
            dtype: key.dtype,
            hint: "a PRNG key is u32[2]: make one with brigade::random::key(seed), split or fold_in",
            shapes: vec![key.shape.clone()],
        });
    }
    match key.shape.split_last() {
        Some((2, lead)) => Ok(lead),
        _ => Err(Error::BadShapeArg {
            op,
            shape: key.shape.clone(),
            detail: format!(
                "a PRNG key has shape [2] (u32), got {:?}: make one with brigade::random::key(seed), split or fold_in",
                key.shape
            ),
        }),
    }
}

/// Shape rule of `random_bits` / `random_split`: keys `u32[lead..., 2]` give
/// `u32[lead..., shape...]` (plus a trailing 2 for `split`).
pub(crate) fn bits_infer(key: &Aval, shape: &[usize], split: bool) -> Result<Aval> {
    let op = if split { "random_split" } else { "random_bits" };
    let mut out = key_lead(op, key)?.to_vec();
    out.extend_from_slice(shape);
    if split {
        out.push(2);
    }
    Ok(Aval::new(out, DType::U32))
}

/// Shape rule of `random_fold_in`: keys `u32[lead..., 2]` and data `u32[lead...]` give new keys
/// `u32[lead..., 2]`.
pub(crate) fn fold_in_infer(key: &Aval, data: &Aval) -> Result<Aval> {
    let lead = key_lead("random_fold_in", key)?;
    if data.dtype != DType::U32 {
        return Err(Error::BadDType {
            op: "random_fold_in (data)",
            dtype: data.dtype,
            hint: "the data folded into a key is u32: cast it with .cast(DType::U32)",
            shapes: vec![key.shape.clone(), data.shape.clone()],
        });
    }
    if data.shape != lead {
        return Err(Error::BadShapeArg {
            op: "random_fold_in",
            shape: data.shape.clone(),
            detail: format!(
                "the data must have the key's leading shape {lead:?} (one u32 per key of {:?}), got {:?}",
                key.shape, data.shape
            ),
        });
    }
    Ok(key.clone())
}

fn words(h: &HostArray) -> &[u32] {
    match &h.data {
        HostData::U32(v) => v,
        _ => unreachable!("checked by the shape rule: keys and data are u32"),
    }
}

/// CPU rule of `random_bits` / `random_split` (see the module docs for the counter layout).
pub(crate) fn bits_cpu(key: &HostArray, shape: &[usize], split: bool, out: &Aval) -> HostArray {
    let k = words(key);
    let n: usize = shape.iter().product();
    let n_keys = k.len() / 2;
    let mut data = Vec::with_capacity(out.size());
    for j in 0..n_keys {
        let kk = [k[2 * j], k[2 * j + 1]];
        for i in 0..n {
            let c = i as u64;
            let h = threefry2x32(kk, [(c >> 32) as u32, c as u32]);
            if split {
                data.extend_from_slice(&h);
            } else {
                data.push(h[0] ^ h[1]);
            }
        }
    }
    HostArray {
        shape: out.shape.clone(),
        data: HostData::U32(data),
    }
}

/// CPU rule of `random_fold_in`.
pub(crate) fn fold_in_cpu(key: &HostArray, data: &HostArray, out: &Aval) -> HostArray {
    let (k, d) = (words(key), words(data));
    let mut v = Vec::with_capacity(out.size());
    for (j, &dj) in d.iter().enumerate() {
        v.extend_from_slice(&threefry2x32([k[2 * j], k[2 * j + 1]], [0, dj]));
    }
    HostArray {
        shape: out.shape.clone(),
        data: HostData::U32(v),
    }
}

// ---- batching rule ------------------------------------------------------------------------------

/// Keys with a batch axis in front are just more keys: the primitives take `u32[..., 2]` and give
/// results with the same leading axes. fold_in's unbatched operand gets the batch axis broadcast.
fn batch(op: &RandomOp, ins: &[Batched], ctx: &BatchCtx<'_>) -> Batched {
    super::apply_batched(Prim::Random(op.clone()), ins, ctx.size)
}

// ---- VJP rule -----------------------------------------------------------------------------------

/// Random bits do not depend differentiably on keys or data: no cotangents.
fn vjp(ins: &[Tensor]) -> Cotangents {
    vec![None; ins.len()]
}

// ---- the family -----------------------------------------------------------------------------------

/// The random primitives (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub enum RandomOp {
    /// Threefry random bits of keys `u32[..., 2]`: `u32[..., shape...]` (the two hash words
    /// xor-ed), or with `split` both words, `u32[..., shape..., 2]` (new keys).
    Bits { shape: Vec<usize>, split: bool },
    /// `fold_in(keys u32[..., 2], data u32[...])`: new keys `u32[..., 2]`.
    FoldIn,
}

impl Rules for RandomOp {
    fn name(&self) -> &'static str {
        match self {
            RandomOp::Bits { split: false, .. } => "random_bits",
            RandomOp::Bits { split: true, .. } => "random_split",
            RandomOp::FoldIn => "random_fold_in",
        }
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RandomOp::Bits { shape, .. } => write!(f, "[shape={shape:?}]"),
            RandomOp::FoldIn => Ok(()),
        }
    }

    fn arity(&self) -> Option<usize> {
        Some(match self {
            RandomOp::Bits { .. } => 1,
            RandomOp::FoldIn => 2,
        })
    }

    fn result_count(&self) -> usize {
        1
    }

    fn infer(&self, ins: &[&Aval]) -> Result<Vec<Aval>> {
        Ok(vec![match self {
            RandomOp::Bits { shape, split } => bits_infer(ins[0], shape, *split)?,
            RandomOp::FoldIn => fold_in_infer(ins[0], ins[1])?,
        }])
    }

    fn eval_cpu(&self, ins: &[&HostArray], outs: &[Aval]) -> Result<Vec<HostArray>> {
        Ok(vec![match self {
            RandomOp::Bits { shape, split } => bits_cpu(ins[0], shape, *split, &outs[0]),
            RandomOp::FoldIn => fold_in_cpu(ins[0], ins[1], &outs[0]),
        }])
    }

    fn lowering(&self) -> Lowering<'_> {
        match self {
            RandomOp::Bits { .. } | RandomOp::FoldIn => Lowering::Keyed,
        }
    }

    fn emit_wgsl(&self, em: &mut Emitter<'_>, ins: &[Var], idx: &[String]) -> Option<Emitted> {
        // Leading axes pick the key.
        let lead = em.g.aval(ins[0]).rank() - 1;
        let (k0, k1) = em.key_words(ins[0], &idx[..lead]);
        Some(Emitted::Expr(match self {
            RandomOp::Bits { shape, split } => {
                // The next axes count within `shape`: the counter is the row-major index within
                // it; arrays on devices have fewer than 2^32 elements, so its high word is 0.
                let counter = super::layout::linear_wgsl(shape, &idx[lead..lead + shape.len()]);
                let h = em.hash(&k0, &k1, &counter);
                if *split {
                    format!("select({h}.x, {h}.y, {} == 1u)", idx[lead + shape.len()])
                } else {
                    format!("({h}.x ^ {h}.y)")
                }
            }
            RandomOp::FoldIn => {
                let d = em.value(ins[1], &idx[..lead]);
                let h = em.hash(&k0, &k1, &d);
                format!("select({h}.x, {h}.y, {} == 1u)", idx[lead])
            }
        }))
    }

    fn batch(&self, ins: &[Batched], ctx: &BatchCtx<'_>) -> Result<Vec<Batched>> {
        single_batch(batch(self, ins, ctx))
    }

    fn vjp(&self, ins: &[Tensor], _outs: &[Tensor], _cts: &[Option<Tensor>]) -> Result<Cotangents> {
        Ok(vjp(ins))
    }

    fn has_effect(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::threefry2x32;

    #[test]
    fn known_answer() {
        // Random123's known-answer vectors for threefry2x32-20 (key, counter -> output), which
        // JAX's `threefry_2x32` reproduces (checked with JAX 0.10.2).
        assert_eq!(threefry2x32([0, 0], [0, 0]), [0x6b20_0159, 0x99ba_4efe]);
        assert_eq!(
            threefry2x32([u32::MAX, u32::MAX], [u32::MAX, u32::MAX]),
            [0x1cb9_96fc, 0xbb00_2be7]
        );
        assert_eq!(
            threefry2x32([0x1319_8a2e, 0x0370_7344], [0x243f_6a88, 0x85a3_08d3]),
            [0xc492_3a9c, 0x483d_f7a0]
        );
    }
}
