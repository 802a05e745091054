//! 入门 Basics: one dish per table, by split-mode pmap over every device and by vmap on one.

use wasm_bindgen::prelude::*;

use super::TOL;
use super::data::{
    arr, check_size, data, host_of, join_rows, lanes_busy, lanes_state, median, read_shards,
    rel_err,
};
use super::json::{Obj, error_kind, json_ints, json_nums, to_js, work_json};
use super::page::now;
use super::session::session;
use brigade::{Array, Error, Result};

/// One way of cooking, timed: the first call (compile included), the warm calls, each device's
/// finish time on the last warm call, and the joined result.
struct Timed {
    cold: f64,
    warm: Vec<f64>,
    device_ms: Vec<f64>,
    got: Vec<f64>,
}

impl Timed {
    fn json(&self) -> String {
        Obj::new()
            .num("cold_ms", self.cold)
            .num("warm_ms", median(self.warm.clone()))
            .raw("device_ms", json_nums(&self.device_ms))
            .end()
    }
}

/// Run `call` `reps + 1` times (the first is the cold one), lanes of `mode` lit meanwhile.
async fn timed<F>(mode: &str, lanes: usize, reps: usize, call: F) -> Result<Timed>
where
    F: AsyncFn() -> Result<Vec<Array>>,
{
    let mut t = Timed {
        cold: 0.0,
        warm: Vec::new(),
        device_ms: Vec::new(),
        got: Vec::new(),
    };
    for r in 0..=reps.max(1) {
        lanes_busy(mode, lanes);
        let t0 = now();
        let out = match call().await {
            Ok(o) => o,
            Err(e) => {
                // The lanes must not stay lit: they show the refusal.
                lanes_state(mode, lanes, "error");
                return Err(e);
            }
        };
        let (parts, times) = read_shards(mode, &out[0], t0).await?;
        let ms = now() - t0;
        if r == 0 {
            t.cold = ms;
        } else {
            t.warm.push(ms);
            t.device_ms = times;
        }
        t.got = join_rows(&parts);
    }
    Ok(t)
}

async fn basics_inner(batch: usize, dim: usize, reps: usize) -> Result<String> {
    let s = session()?;
    let n = s.n();
    check_size("basics", &[batch, dim])?;
    check_size("basics", &[dim, dim])?;
    let before = brigade::counters();
    let x = arr(data(batch * dim, 1), &[batch, dim])?;
    let w = arr(
        data(dim * dim, 2).iter().map(|v| v * 0.25).collect(),
        &[dim, dim],
    )?;
    let b = arr(data(dim, 3), &[dim])?;
    let args = [x, w, b];
    let want = host_of(&s.dish_ref.call(&args)?, 0)?.to_f64();

    // pmap (split mode): one block of tables per device. An indivisible batch is brigade's typed
    // refusal, shown on the page; the other two ways still cook (vmap needs no divisibility).
    let split = timed("basics", n, reps, async || {
        s.dish_split.call_async(&args).await
    })
    .await;
    let (split_json, err_split, split_refused) = match &split {
        Ok(t) => (t.json(), rel_err(&t.got, &want), false),
        Err(e @ Error::IndivisibleSplit { .. }) => (
            Obj::new()
                .str("error", &e.to_string())
                .str("kind", &error_kind(e))
                .end(),
            f64::NAN,
            true,
        ),
        Err(e) => return Err(e.clone()),
    };
    // The one-chef baseline: the same split program on device 0 alone.
    let one = timed("basics-one", 1, reps, async || {
        s.dish_one.call_async(&args).await
    })
    .await?;
    // vmap: the same batch on one device, as one vectorized call.
    let vm = timed("basics-vmap", 1, reps, async || s.dish_vmap.call(&args)).await?;
    let err_one = rel_err(&one.got, &want);
    let err_vmap = rel_err(&vm.got, &want);
    let same = match &split {
        Ok(t) => rel_err(&t.got, &vm.got),
        Err(_) => f64::NAN,
    };
    let ok = err_one <= TOL && err_vmap <= TOL && (split_refused || err_split <= TOL);
    let speedup = match &split {
        Ok(t) => median(one.warm.clone()) / median(t.warm.clone()),
        Err(_) => f64::NAN,
    };
    Ok(Obj::new()
        .int("batch", batch)
        .int("dim", dim)
        .int("devices", n)
        .int("rows_per_device", batch / n)
        .int("reps", reps.max(1))
        .raw("pmap", split_json)
        .raw("one", one.json())
        .raw("vmap", vm.json())
        .num("speedup", speedup)
        .raw("out_shape", json_ints(&[batch, dim]))
        .raw("sample", json_nums(&vm.got[..vm.got.len().min(4)]))
        .num("err_pmap", err_split)
        .num("err_one", err_one)
        .num("err_vmap", err_vmap)
        .num("pmap_vs_vmap", same)
        .num("tol", TOL)
        .bool("ok", ok)
        .raw("work", work_json(&before))
        .end())
}

/// 入门: `batch` tables of `dim` features, one dish each (`tanh(x W + b)`), cooked by split-mode
/// pmap over every device, by the same program on device 0 alone (the one-chef baseline) and by
/// vmap on device 0; cold (first call, compile included) and warm (median of `reps`) timings, each
/// device's finish time, and every result against the reference. An indivisible batch gives
/// brigade's refusal for pmap (`pmap.error`, `pmap.kind`) while the other two still run.
#[wasm_bindgen]
pub async fn basics(batch: usize, dim: usize, reps: usize) -> std::result::Result<String, JsValue> {
    to_js(basics_inner(batch, dim, reps).await)
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::super::json::field;
    use super::super::session::start_inner;
    use super::*;
    use brigade::Error;

    /// On two cpu devices (the page's fallback): pmap and vmap verified; a zero size refused.
    #[test]
    fn basics_on_cpu_devices() {
        pollster::block_on(async {
            start_inner(2, "cpu:2").await.unwrap();
            let out = basics_inner(48, 8, 1).await.unwrap();
            assert_eq!(field(&out, "ok"), "true", "{out}");
            // 49 tables over 2 devices: pmap refused with the typed error, vmap still verified.
            let odd = basics_inner(49, 8, 1).await.unwrap();
            assert_eq!(field(&odd, "ok"), "true", "{odd}");
            assert!(odd.contains("IndivisibleSplit"), "{odd}");
            assert!(
                field(&odd, "err_vmap").parse::<f64>().unwrap() <= TOL,
                "{odd}"
            );
            let bad = basics_inner(0, 8, 1).await;
            assert!(matches!(bad, Err(Error::BadShapeArg { .. })), "{bad:?}");
        });
    }
}
