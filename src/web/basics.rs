//! 入门 Basics: one dish per table, by split-mode pmap over every device and by vmap on one.

use wasm_bindgen::prelude::*;

use super::TOL;
use super::data::{
    arr, check_size, data, host_of, join_rows, lanes_busy, median, read_shards, rel_err,
};
use super::json::{Obj, json_ints, json_nums, to_js, work_json};
use super::page::now;
use super::session::session;
use crate::Result;

async fn basics_inner(batch: usize, dim: usize, reps: usize) -> Result<String> {
    let s = session()?;
    let n = s.n();
    check_size("basics", &[batch, dim])?;
    check_size("basics", &[dim, dim])?;
    let before = crate::counters();
    let x = arr(data(batch * dim, 1), &[batch, dim])?;
    let w = arr(
        data(dim * dim, 2).iter().map(|v| v * 0.25).collect(),
        &[dim, dim],
    )?;
    let b = arr(data(dim, 3), &[dim])?;
    let args = [x, w, b];
    let want = host_of(&s.dish_ref.call(&args)?, 0)?.to_f64();

    // pmap (split mode): one block of tables per device.
    let mut split_times = Vec::new();
    let mut device_ms = Vec::new();
    let mut split_cold = 0.0;
    let mut got_split = Vec::new();
    for r in 0..=reps.max(1) {
        lanes_busy("basics", n);
        let t0 = now();
        let out = s.dish_split.call_async(&args).await?;
        let (parts, times) = read_shards("basics", &out[0], t0).await?;
        let t = now() - t0;
        if r == 0 {
            split_cold = t;
        } else {
            split_times.push(t);
            device_ms = times;
        }
        got_split = join_rows(&parts);
    }
    // vmap: the same batch on one device.
    let mut vmap_times = Vec::new();
    let mut vmap_cold = 0.0;
    let mut got_vmap = Vec::new();
    for r in 0..=reps.max(1) {
        lanes_busy("basics-vmap", 1);
        let t0 = now();
        let out = s.dish_vmap.call(&args)?;
        let (parts, _) = read_shards("basics-vmap", &out[0], t0).await?;
        let t = now() - t0;
        if r == 0 {
            vmap_cold = t;
        } else {
            vmap_times.push(t);
        }
        got_vmap = join_rows(&parts);
    }
    let err_split = rel_err(&got_split, &want);
    let err_vmap = rel_err(&got_vmap, &want);
    let same = rel_err(&got_split, &got_vmap);
    let ok = err_split <= TOL && err_vmap <= TOL;
    Ok(Obj::new()
        .int("batch", batch)
        .int("dim", dim)
        .int("devices", n)
        .int("rows_per_device", batch / n)
        .raw(
            "pmap",
            Obj::new()
                .num("cold_ms", split_cold)
                .num("warm_ms", median(split_times))
                .raw("device_ms", json_nums(&device_ms))
                .end(),
        )
        .raw(
            "vmap",
            Obj::new()
                .num("cold_ms", vmap_cold)
                .num("warm_ms", median(vmap_times))
                .end(),
        )
        .raw("out_shape", json_ints(&[batch, dim]))
        .raw("sample", json_nums(&got_split[..got_split.len().min(4)]))
        .num("err_pmap", err_split)
        .num("err_vmap", err_vmap)
        .num("pmap_vs_vmap", same)
        .num("tol", TOL)
        .bool("ok", ok)
        .raw("work", work_json(&before))
        .end())
}

/// 入门: `batch` tables of `dim` features, one dish each (`tanh(x W + b)`), cooked by split-mode
/// pmap over every device and by vmap on device 0; cold and warm (median of `reps`) timings,
/// each device's finish time, and both results against the reference.
#[wasm_bindgen]
pub async fn basics(batch: usize, dim: usize, reps: usize) -> std::result::Result<String, JsValue> {
    to_js(basics_inner(batch, dim, reps).await)
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::super::json::field;
    use super::super::session::start_inner;
    use super::*;
    use crate::Error;

    /// On two cpu devices (the page's fallback): pmap and vmap verified; a zero size refused.
    #[test]
    fn basics_on_cpu_devices() {
        pollster::block_on(async {
            start_inner(2, "cpu:2").await.unwrap();
            let out = basics_inner(48, 8, 1).await.unwrap();
            assert_eq!(field(&out, "ok"), "true", "{out}");
            let bad = basics_inner(0, 8, 1).await;
            assert!(matches!(bad, Err(Error::BadShapeArg { .. })), "{bad:?}");
        });
    }
}
