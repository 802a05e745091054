//! The demos' data and checks: size limits, deterministic inputs, the error against the reference,
//! and reading sharded results while telling the page which lane finished.

use futures::future::join_all;

use super::json::Obj;
use super::page::{emit, now};
use brigade::{Array, Error, HostArray, Result};

/// The most elements one demo array may have (64 MiB of f32): the page's inputs are free text.
const MAX_ELEMENTS: usize = 1 << 24;

/// Refuse sizes the page cannot sensibly run (zero, or too large for the browser) with a typed
/// error instead of an overflow or an allocation failure.
pub(super) fn check_size(op: &'static str, dims: &[usize]) -> Result<()> {
    let total = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&t| t <= MAX_ELEMENTS);
    if dims.contains(&0) || total.is_none() {
        return Err(Error::BadShapeArg {
            op,
            shape: dims.to_vec(),
            detail: format!(
                "every size must be at least 1 and an array at most {MAX_ELEMENTS} elements"
            ),
        });
    }
    Ok(())
}

/// Deterministic data in [-1, 1).
pub(super) fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(12_345);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

pub(super) fn arr(v: Vec<f32>, shape: &[usize]) -> Result<Array> {
    Array::from_vec(v, shape)
}

/// `max |got - want| / max(1, max |want|)`.
pub(super) fn rel_err(got: &[f64], want: &[f64]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            let d = (g - w).abs();
            if d.is_nan() { f64::INFINITY } else { d }
        })
        .fold(0.0, f64::max)
        / scale
}

pub(super) fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Read every shard of a sharded array at once; each resolves on its own, and the page is told
/// when (lane `device` of `mode` done, ms since `t0`). Returns the shards' data and those times.
pub(super) async fn read_shards(
    mode: &str,
    x: &Array,
    t0: f64,
) -> Result<(Vec<HostArray>, Vec<f64>)> {
    let single = [x.clone()];
    let shards = x.shards().unwrap_or(&single);
    let reads = shards.iter().enumerate().map(|(d, s)| async move {
        let h = s.to_host_async().await;
        let t = now() - t0;
        emit(
            "lane",
            &Obj::new()
                .str("mode", mode)
                .int("device", d)
                .str("state", "done")
                .num("ms", t)
                .end(),
        );
        h.map(|h| (h, t))
    });
    let mut hosts = Vec::with_capacity(shards.len());
    let mut times = Vec::with_capacity(shards.len());
    for r in join_all(reads).await {
        let (h, t) = r?;
        hosts.push(h);
        times.push(t);
    }
    Ok((hosts, times))
}

pub(super) fn lanes_busy(mode: &str, n: usize) {
    lanes_state(mode, n, "busy");
}

/// Tell the page that lanes `0..n` of `mode` are in `state` (`busy`, `error`).
pub(super) fn lanes_state(mode: &str, n: usize, state: &str) {
    for d in 0..n {
        emit(
            "lane",
            &Obj::new()
                .str("mode", mode)
                .int("device", d)
                .str("state", state)
                .end(),
        );
    }
}

/// The row blocks of a split result, joined in device order.
pub(super) fn join_rows(parts: &[HostArray]) -> Vec<f64> {
    parts.iter().flat_map(|p| p.to_f64()).collect()
}

/// The first host result of a call on the cpu device (the reference interpreter).
pub(super) fn host_of(outs: &[Array], i: usize) -> Result<HostArray> {
    outs.get(i)
        .and_then(|a| a.host().cloned())
        .ok_or_else(|| Error::Unsupported {
            op: "reference",
            detail: "gave no host result".into(),
        })
}
