//! Random numbers bit for bit as JAX's default PRNG (`jax.random` with threefry2x32 and
//! `jax_threefry_partitionable`, the default in current JAX, in JAX's default 32-bit mode).
//!
//! A key is an ordinary `u32[2]` [`Tensor`] (JAX's raw `PRNGKey` layout), so every function works
//! eagerly and inside `jit`, `vmap`, `grad` and `pmap`: keys are data, and the same key always gives
//! the same numbers. Never reuse a key for two draws that should be independent: [`split`] it, or
//! [`fold_in`] a counter, device index or step number.
//!
//! ```
//! use brigade::random;
//! let key = random::key(0);
//! let x = random::normal(&key, &[4]);
//! // The same numbers as `jax.random.normal(jax.random.PRNGKey(0), (4,))`.
//! assert_eq!(x.to_vec::<f32>()?, vec![1.6226422, 2.0252647, -0.43359444, -0.07861735]);
//! let keys = random::split(&key, 2);                     // u32[2, 2]: two fresh keys
//! let k1 = keys.slice_axis(0, 1, 2).reshape(&[2]);
//! let dice = random::randint(&k1, &[3], 1, 7);           // i32 in [1, 7)
//! assert!(dice.to_vec::<i32>()?.iter().all(|d| (1..7).contains(d)));
//! # Ok::<(), brigade::Error>(())
//! ```
//!
//! What matches JAX, and where (tests/random.rs checks each against vectors printed by JAX,
//! `scripts/jax_prng_vectors.py`):
//! - [`key`], [`split`], [`fold_in`], [`random_bits`], [`uniform`], [`bernoulli`], [`randint`],
//!   [`permutation`]: identical bits on the CPU reference and on every GPU backend (pure integer
//!   hashing; `uniform` scales with a fused multiply-add exactly as XLA does, computed with integer
//!   arithmetic on devices so no driver can round it differently).
//! - [`normal`]: `erf_inv` reproduces XLA's CPU computation operation by operation (including
//!   which multiply-adds XLA fuses): identical bits to JAX on the CPU reference (checked on all 2^23
//!   values `normal` can produce) and on lavapipe and llvmpipe GL. Devices compute its fused
//!   multiply-adds, divisions and square roots with integer arithmetic (WGSL lets hardware round
//!   those loosely), so other GPUs give the same bits too.
//! - [`gumbel`] (`-log(-log(u))` of the uniform bits) within a few ULP of JAX on every device (two
//!   logs), and [`categorical`] draws JAX's classes.
//!
//! Each function's output is exact; float arithmetic you fuse after it follows the device's usual
//! rules (compilers may, for example, reassociate products with constants).
//!
//! Random primitives have no gradient (keys are not differentiable), as in JAX.

use crate::dtype::DType;
use crate::error::Error;
use crate::ops::{ElementwiseOp, RandomOp};
use crate::ops::{Prim, UnaryOp};
use crate::tensor::Tensor;

/// Check that `key` is one key: `u32[2]`. The error names the shape and how to fix the call.
fn check_key(op: &'static str, key: &Tensor) -> Option<Tensor> {
    if key.error().is_some() {
        return Some(key.clone());
    }
    if key.dtype() != DType::U32 {
        return Some(key.fail_with(Error::BadDType {
            op,
            dtype: key.dtype(),
            hint: "a PRNG key is u32[2]: make one with brigade::random::key(seed), split or fold_in",
            shapes: vec![key.shape().to_vec()],
        }));
    }
    if key.shape() != [2] {
        let fix = if key.shape().last() == Some(&2) && key.ndim() > 1 {
            "pick one key of the array (e.g. keys.slice_axis(0, i, i + 1).reshape(&[2])), or vmap over the keys"
        } else {
            "make one with brigade::random::key(seed), split or fold_in"
        };
        return Some(key.fail_with(Error::BadShapeArg {
            op,
            shape: key.shape().to_vec(),
            detail: format!(
                "expects a single PRNG key of shape [2] (u32), got shape {:?}: {fix}",
                key.shape()
            ),
        }));
    }
    None
}

/// A PRNG key from an integer seed, like `jax.random.PRNGKey(seed)`: `u32[2]`.
///
/// JAX (in its default 32-bit mode) converts the seed to a 32-bit integer first, so the key is
/// `[0, seed mod 2^32]`: `key(2^32 + 7)` is `key(7)` and `key(-1)` is `[0, 0xffffffff]`, as in JAX.
/// (With `jax_enable_x64` JAX keeps the high word instead; build such a key directly with
/// `Tensor::from_vec(vec![hi, lo], &[2])`: any `u32[2]` tensor is a key.)
///
/// ```
/// let k = brigade::random::key(42);
/// assert_eq!(k.to_vec::<u32>()?, vec![0, 42]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn key(seed: i64) -> Tensor {
    Tensor::from_vec(vec![0u32, seed as u32], &[2])
}

/// `num` new keys from `key`, like `jax.random.split(key, num)`: `u32[num, 2]`.
///
/// Key `i` is the threefry hash of the counter `i` under `key`. Inside `pmap`, split keys sharded
/// over devices (`in_axes` `Some(0)`) give each device its own key.
///
/// ```
/// use brigade::random;
/// let keys = random::split(&random::key(0), 3);
/// assert_eq!(keys.shape(), &[3, 2]);
/// // Different keys draw different numbers.
/// let a = random::uniform(&keys.slice_axis(0, 0, 1).reshape(&[2]), &[2], 0.0, 1.0);
/// let b = random::uniform(&keys.slice_axis(0, 1, 2).reshape(&[2]), &[2], 0.0, 1.0);
/// assert_ne!(a.to_vec::<f32>()?, b.to_vec::<f32>()?);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn split(key: &Tensor, num: usize) -> Tensor {
    if let Some(bad) = check_key("random::split", key) {
        return bad;
    }
    Tensor::apply(
        Prim::Random(RandomOp::Bits {
            shape: vec![num],
            split: true,
        }),
        &[key],
    )
}

/// A new key from `key` and a 32-bit integer, like `jax.random.fold_in(key, data)`: `u32[2]`.
///
/// ```
/// use brigade::random;
/// let k = random::key(0);
/// let step_keys: Vec<Vec<u32>> = (0..3)
///     .map(|step| random::fold_in(&k, step).to_vec::<u32>())
///     .collect::<Result<_, _>>()?;
/// assert_ne!(step_keys[0], step_keys[1]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn fold_in(key: &Tensor, data: u32) -> Tensor {
    fold_in_tensor(key, &Tensor::scalar(data))
}

/// [`fold_in`] with the data as a scalar integer tensor (`i32` or `u32`, converted to `u32` as JAX
/// does), which may be traced: `fold_in_tensor(&key, &axis_index("i"))` gives every `pmap` device
/// its own key.
///
/// ```
/// use brigade::{jit, random, Array, Tensor};
/// let f = jit(|a: &[Tensor]| vec![random::fold_in_tensor(&a[0], &a[1])]);
/// let key = random::key(0).to_array()?;
/// let got = f.call(&[key, Array::scalar(7u32)])?;
/// assert_eq!(got[0].to_vec::<u32>()?, random::fold_in(&random::key(0), 7).to_vec::<u32>()?);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn fold_in_tensor(key: &Tensor, data: &Tensor) -> Tensor {
    if let Some(bad) = check_key("random::fold_in", key) {
        return bad;
    }
    if let Some(e) = data.error() {
        return Tensor::failed(e.clone());
    }
    if !data.dtype().is_int() || data.ndim() != 0 {
        return data.fail_with(Error::BadShapeArg {
            op: "random::fold_in",
            shape: data.shape().to_vec(),
            detail: format!(
                "the data must be a scalar integer (i32 or u32), got {}{:?}; vmap over an array of data",
                data.dtype(),
                data.shape()
            ),
        });
    }
    Tensor::apply(
        Prim::Random(RandomOp::FoldIn),
        &[key, &data.cast(DType::U32)],
    )
}

/// Uniform random `u32` bits of `shape`, like `jax.random.bits(key, shape)`.
///
/// ```
/// use brigade::random;
/// let b = random::random_bits(&random::key(0), &[3]);
/// assert_eq!(b.dtype(), brigade::DType::U32);
/// assert_eq!(b.shape(), &[3]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn random_bits(key: &Tensor, shape: &[usize]) -> Tensor {
    if let Some(bad) = check_key("random::random_bits", key) {
        return bad;
    }
    Tensor::apply(
        Prim::Random(RandomOp::Bits {
            shape: shape.to_vec(),
            split: false,
        }),
        &[key],
    )
}

/// `f32` values uniform in `[minval, maxval)`, like `jax.random.uniform(key, shape, minval=,
/// maxval=)`.
///
/// As JAX: the top 23 random bits become the mantissa of a float in `[1, 2)`, minus 1 gives
/// `[0, 1)` in steps of 2^-23; then `max(minval, fma(u, maxval - minval, minval))` (XLA fuses the
/// multiply and add into one rounding, and so does brigade, on every backend).
///
/// ```
/// use brigade::random;
/// let u = random::uniform(&random::key(1), &[1000], -2.0, 3.0).to_vec::<f32>()?;
/// assert!(u.iter().all(|&x| (-2.0..3.0).contains(&x)));
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn uniform(key: &Tensor, shape: &[usize], minval: f32, maxval: f32) -> Tensor {
    if let Some(bad) = check_key("random::uniform", key) {
        return bad;
    }
    let bits = random_bits(key, shape);
    // (bits >> 9) as the mantissa of 1.m, minus 1: exactly (bits >> 9) · 2^-23.
    let mantissa = &bits / &Tensor::scalar(512u32);
    let unit = mantissa.cast(DType::F32) * (1.0 / (1u32 << 23) as f32);
    let scaled = Tensor::apply(
        Prim::Elementwise(ElementwiseOp::Fma),
        &[
            &unit,
            &Tensor::full(maxval - minval, shape),
            &Tensor::full(minval, shape),
        ],
    );
    scaled.maximum(&Tensor::full(minval, shape))
}

/// Standard normal `f32` values, like `jax.random.normal(key, shape)`: `sqrt(2) · erf_inv(u)` for
/// `u` uniform in `(-1, 1)`, with XLA's single-precision `erf_inv` (see the module docs for where
/// the bits are identical to JAX).
///
/// ```
/// use brigade::random;
/// let z = random::normal(&random::key(0), &[10_000]).to_vec::<f32>()?;
/// let mean = z.iter().sum::<f32>() / z.len() as f32;
/// assert!(mean.abs() < 0.05);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn normal(key: &Tensor, shape: &[usize]) -> Tensor {
    if let Some(bad) = check_key("random::normal", key) {
        return bad;
    }
    // nextafter(-1, 0): the open interval (-1, 1) keeps erf_inv finite.
    let lo = f32::from_bits(0xBF7F_FFFF);
    let u = uniform(key, shape, lo, 1.0);
    let e = Tensor::apply(
        Prim::Elementwise(ElementwiseOp::Unary(UnaryOp::ErfInv)),
        &[&u],
    );
    // sqrt(2) · e, rounded once like a multiply, written as fma(e, sqrt 2, -0): GPU compilers may
    // reassociate a product with constants (x·c1·c2 → x·(c1·c2)), which would change these bits
    // once the caller scales the noise; the fused multiply-add is opaque to them.
    Tensor::apply(
        Prim::Elementwise(ElementwiseOp::Fma),
        &[
            &e,
            &Tensor::full(std::f32::consts::SQRT_2, shape),
            &Tensor::full(-0.0f32, shape),
        ],
    )
}

/// Standard Gumbel `f32` values, like `jax.random.gumbel(key, shape)` (its default "low" mode):
/// `-log(-log(u))` for `u` uniform in `[tiny, 1)`, `tiny` the smallest normal f32.
///
/// ```
/// use brigade::random;
/// let g = random::gumbel(&random::key(2), &[20_000]).to_vec::<f32>()?;
/// // The mean of a standard Gumbel is the Euler-Mascheroni constant, 0.5772...
/// let mean = g.iter().sum::<f32>() / g.len() as f32;
/// assert!((mean - 0.5772).abs() < 0.05);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn gumbel(key: &Tensor, shape: &[usize]) -> Tensor {
    if let Some(bad) = check_key("random::gumbel", key) {
        return bad;
    }
    -(-uniform(key, shape, f32::MIN_POSITIVE, 1.0).log()).log()
}

/// Draws from the categorical distributions whose unnormalized log-probabilities lie along `axis`
/// of `logits`, like `jax.random.categorical(key, logits, axis)` (with replacement, one draw per
/// distribution): the Gumbel-max trick, `argmax(gumbel(key, logits.shape) + logits, axis)`. The
/// result (i32) has `logits`' shape without `axis`; a logit of -inf is never drawn.
///
/// ```
/// use brigade::{random, Tensor};
/// // Two distributions over three classes; the second can only give class 2.
/// let logits = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, f32::NEG_INFINITY, f32::NEG_INFINITY, 0.0], &[2, 3]);
/// let c = random::categorical(&random::key(0), &logits, -1).to_vec::<i32>()?;
/// assert_eq!(c.len(), 2);
/// assert!((0..3).contains(&c[0]) && c[1] == 2);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn categorical(key: &Tensor, logits: &Tensor, axis: i64) -> Tensor {
    if let Some(bad) = check_key("random::categorical", key) {
        return bad;
    }
    let logits = if logits.dtype() == DType::F32 {
        logits.clone()
    } else {
        logits.cast(DType::F32)
    };
    (&gumbel(key, logits.shape()) + &logits).argmax(axis, false)
}

/// Bernoulli draws (`bool`) with probability `p` of `true`, like `jax.random.bernoulli(key, p,
/// shape)`: `uniform(key, shape) < p`.
///
/// ```
/// use brigade::random;
/// let heads = random::bernoulli(&random::key(3), 0.25, &[4000]).to_vec::<bool>()?;
/// let rate = heads.iter().filter(|&&h| h).count() as f32 / 4000.0;
/// assert!((rate - 0.25).abs() < 0.03);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn bernoulli(key: &Tensor, p: f32, shape: &[usize]) -> Tensor {
    if let Some(bad) = check_key("random::bernoulli", key) {
        return bad;
    }
    uniform(key, shape, 0.0, 1.0).lt(&Tensor::scalar(p))
}

/// `i32` values uniform in `[minval, maxval)`, like `jax.random.randint(key, shape, minval,
/// maxval)`; `maxval <= minval` gives `minval` everywhere, as in JAX.
///
/// JAX's algorithm: split the key in two, draw 32 bits from each, and combine them modulo the span
/// `maxval - minval` as a 64-bit number (`(hi % span) · (2^32 % span) + lo % span`, in wrapping u32
/// arithmetic), which keeps the modulo bias small.
///
/// ```
/// use brigade::random;
/// let d = random::randint(&random::key(5), &[600], -3, 3).to_vec::<i32>()?;
/// assert!(d.iter().all(|x| (-3..3).contains(x)));
/// assert!((-3..3).all(|v| d.contains(&v)));
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn randint(key: &Tensor, shape: &[usize], minval: i32, maxval: i32) -> Tensor {
    if let Some(bad) = check_key("random::randint", key) {
        return bad;
    }
    let keys = split(key, 2);
    let (k1, k2) = (
        keys.slice_axis(0, 0, 1).reshape_exact(&[2]),
        keys.slice_axis(0, 1, 2).reshape_exact(&[2]),
    );
    let (higher, lower) = (random_bits(&k1, shape), random_bits(&k2, shape));
    let span: u32 = if maxval <= minval {
        1
    } else {
        maxval.wrapping_sub(minval) as u32
    };
    // 2^32 mod span, as (2^16 mod span)^2 mod span.
    let m16 = (1u32 << 16) % span;
    let multiplier = m16.wrapping_mul(m16) % span;
    let sp = Tensor::scalar(span);
    let offset = (&(&(&higher % &sp) * &Tensor::scalar(multiplier)) + &(&lower % &sp)) % &sp;
    &offset.cast(DType::I32) + &Tensor::scalar(minval)
}

/// A random permutation of `0..n` (`i32[n]`), like `jax.random.permutation(key, n)`.
///
/// JAX sorts `0..n` by random 32-bit keys (stably, so ties keep their order), repeating with fresh
/// keys `ceil(3 ln n / ln(2^32 - 1))` times; brigade does the same with a stable
/// [`Tensor::argsort`] of the keys, `O(n log n)`, so the permutation is JAX's bit for bit.
///
/// ```
/// use brigade::random;
/// let mut p = random::permutation(&random::key(0), 8).to_vec::<i32>()?;
/// p.sort();
/// assert_eq!(p, (0..8).collect::<Vec<i32>>());
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn permutation(key: &Tensor, n: usize) -> Tensor {
    if let Some(bad) = check_key("random::permutation", key) {
        return bad;
    }
    let rounds = if n <= 1 {
        0
    } else {
        (3.0 * (n as f64).ln() / (u32::MAX as f64).ln()).ceil() as usize
    };
    let mut x = Tensor::arange(n);
    let mut key = key.clone();
    for _ in 0..rounds {
        let keys = split(&key, 2);
        key = keys.slice_axis(0, 0, 1).reshape_exact(&[2]);
        let sub = keys.slice_axis(0, 1, 2).reshape_exact(&[2]);
        let sort_keys = random_bits(&sub, &[n]);
        // JAX's sort_key_val(keys, x), stable: x gathered by the keys' stable argsort.
        x = x.index_take(&sort_keys.argsort(0), 0);
    }
    x
}
