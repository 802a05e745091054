//! 实战 / 优化: row-split matmul, the single-device-against-split sweep, and a per-device timeline.

use futures::future::join_all;
use wasm_bindgen::prelude::*;

use super::TOL;
use super::data::{
    arr, check_size, data, host_of, join_rows, lanes_busy, median, read_shards, rel_err,
};
use super::json::{Obj, bar, json_ints, json_list, json_nums, to_js, work_json};
use super::page::now;
use super::session::{Session, session};
use brigade::{Array, Error, HostArray, Result};

/// The rows of `a @ b` at `rows` (of an `n × n` product), from the reference interpreter.
fn reference_rows(s: &Session, a: &[f32], b: &Array, n: usize, rows: &[usize]) -> Result<Vec<f64>> {
    let mut picked = Vec::with_capacity(rows.len() * n);
    for &r in rows {
        picked.extend_from_slice(&a[r * n..(r + 1) * n]);
    }
    let ap = arr(picked, &[rows.len(), n])?;
    Ok(host_of(&s.mm_ref.call(&[ap, b.clone()])?, 0)?.to_f64())
}

/// Rows to check against the reference: all of them up to `full`, else the first and last four of
/// every device's block.
fn check_rows(n: usize, devices: usize, full: usize) -> Vec<usize> {
    if n <= full {
        return (0..n).collect();
    }
    let per = n / devices;
    let mut rows = Vec::new();
    for d in 0..devices {
        let lo = d * per;
        rows.extend(lo..lo + 4.min(per));
        rows.extend((lo + per).saturating_sub(4).max(lo + 4.min(per))..lo + per);
    }
    rows
}

pub(super) fn pick_rows(v: &[f64], n: usize, rows: &[usize]) -> Vec<f64> {
    rows.iter()
        .flat_map(|&r| v[r * n..(r + 1) * n].iter().copied())
        .collect()
}

async fn matmul_inner(n: usize) -> Result<String> {
    let s = session()?;
    let k = s.n();
    check_size("row_split_matmul", &[n, n])?;
    let before = brigade::counters();
    let a = data(n * n, 11);
    let b = arr(data(n * n, 12), &[n, n])?;
    let args = [arr(a.clone(), &[n, n])?, b.clone()];
    lanes_busy("matmul", k);
    let t0 = now();
    let out = s.mm_split.call_async(&args).await?;
    let (parts, times) = read_shards("matmul", &out[0], t0).await?;
    let ms = now() - t0;
    let got = join_rows(&parts);
    let rows = check_rows(n, k, 256);
    let want = reference_rows(&s, &a, &b, n, &rows)?;
    let err = rel_err(&pick_rows(&got, n, &rows), &want);
    Ok(Obj::new()
        .int("n", n)
        .int("devices", k)
        .raw(
            "device_rows",
            json_ints(&parts.iter().map(|p| p.shape[0]).collect::<Vec<_>>()),
        )
        .raw("device_ms", json_nums(&times))
        .num("ms", ms)
        .int("rows_checked", rows.len())
        .num("err", err)
        .bool("ok", err <= TOL)
        .raw("work", work_json(&before))
        .end())
}

/// 实战: `C = A @ B` (n × n) with A's rows split over every device and B sent whole; each device's
/// block and time, and C's rows against the reference (all rows up to n = 256, else a sample).
#[wasm_bindgen]
pub async fn row_split_matmul(n: usize) -> std::result::Result<String, JsValue> {
    to_js(matmul_inner(n).await)
}

async fn sweep_inner(n: usize, reps: usize) -> Result<String> {
    let s = session()?;
    let k = s.n();
    check_size("sweep_point", &[n, n])?;
    let before = brigade::counters();
    let a = data(n * n, 13);
    let b = arr(data(n * n, 14), &[n, n])?;
    let args = [arr(a.clone(), &[n, n])?, b.clone()];
    // Each timed call uploads A and B from the host, runs, and reads C back.
    let one = || async {
        let t0 = now();
        let c = s.mm_one.call(&args)?;
        let h = c[0].to_host_async().await?;
        Ok::<(f64, Vec<f64>), Error>((now() - t0, h.to_f64()))
    };
    let split = || async {
        let t0 = now();
        let c = s.mm_split.call_async(&args).await?;
        let (parts, _) = read_shards("sweep", &c[0], t0).await?;
        Ok::<(f64, Vec<f64>), Error>((now() - t0, join_rows(&parts)))
    };
    let (one_cold, got_one) = one().await?;
    let (split_cold, got_split) = split().await?;
    let (mut t1, mut tk) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(1) {
        // Interleaved, so that a change in the machine's load hits both alike.
        t1.push(one().await?.0);
        tk.push(split().await?.0);
    }
    // Compute and transfer apart, on device 0: the whole product, and one device's block of
    // n / k rows (what each of k independent devices would do). The prediction for k real devices
    // is the block's upload + compute + read-back, all of them measured here.
    let per = n / k.max(1);
    let a_blk = arr(a[..per * n].to_vec(), &[per, n])?;
    let whole = pieces(&s, &args[0], &b, reps).await?;
    let block = pieces(&s, &a_blk, &b, reps).await?;
    let rows = check_rows(n, k, 128);
    let want = reference_rows(&s, &a, &b, n, &rows)?;
    let err_one = rel_err(&pick_rows(&got_one, n, &rows), &want);
    let err_split = rel_err(&pick_rows(&got_split, n, &rows), &want);
    let err_between = rel_err(&got_split, &got_one);
    let err_pieces = rel_err(&whole.got, &got_one).max(rel_err(&block.got, &got_one[..per * n]));
    let (single_ms, split_ms) = (median(t1), median(tk));
    let one_total = whole.total();
    let predicted = block.total();
    Ok(Obj::new()
        .int("n", n)
        .int("devices", k)
        .num("single_ms", single_ms)
        .num("split_ms", split_ms)
        .num("single_cold_ms", one_cold)
        .num("split_cold_ms", split_cold)
        .num("speedup", single_ms / split_ms)
        .raw("one", whole.json())
        .raw("block", block.json())
        .num("compute_share", whole.compute / one_total)
        .num("predicted_ms", predicted)
        .num("predicted_speedup", one_total / predicted)
        .num("flops", 2.0 * (n as f64).powi(3))
        .num("bytes_moved", 4.0 * (3 * n * n) as f64)
        .num(
            "bytes_moved_split",
            4.0 * (n * n + k * n * n + n * n) as f64,
        )
        .int("rows_checked", rows.len())
        .num("err_single", err_one)
        .num("err_split", err_split)
        .num("err_between", err_between)
        .num("err_pieces", err_pieces)
        .bool(
            "ok",
            err_one <= TOL && err_split <= TOL && err_between <= TOL && err_pieces <= TOL,
        )
        .raw("work", work_json(&before))
        .end())
}

/// One matmul on device 0 taken apart: upload, compute, read-back (medians, ms) and its result.
struct Pieces {
    upload: f64,
    compute: f64,
    read: f64,
    got: Vec<f64>,
}

impl Pieces {
    fn total(&self) -> f64 {
        self.upload + self.compute + self.read
    }
    fn json(&self) -> String {
        Obj::new()
            .num("upload_ms", self.upload)
            .num("compute_ms", self.compute)
            .num("read_ms", self.read)
            .end()
    }
}

/// `a @ b` on device 0, each stage awaited on its own: one call to compile, then `reps` timed.
async fn pieces(s: &Session, a: &Array, b: &Array, reps: usize) -> Result<Pieces> {
    let dev = &s.devices[0];
    let (mut up, mut comp, mut rd) = (Vec::new(), Vec::new(), Vec::new());
    let mut got = Vec::new();
    for r in 0..=reps.max(1) {
        let t0 = now();
        let ad = a.to_device(dev)?;
        let bd = b.to_device(dev)?;
        dev.idle().await?;
        let t1 = now();
        let c = s.mm_dev[0].call(&[ad, bd])?;
        dev.idle().await?;
        let t2 = now();
        let h = c[0].to_host_async().await?;
        let t3 = now();
        if r > 0 {
            up.push(t1 - t0);
            comp.push(t2 - t1);
            rd.push(t3 - t2);
        }
        got = h.to_f64();
    }
    Ok(Pieces {
        upload: median(up),
        compute: median(comp),
        read: median(rd),
        got,
    })
}

/// 优化: one point of the sweep: `n × n` matmul on device 0 against row-split over every device,
/// cold and warm (median of `reps`), each call timed from upload to read-back; then upload,
/// compute and read-back timed apart on device 0 for the whole product (`one`) and for one
/// device's block of n / k rows (`block`): the compute share, and the time k independent devices
/// would take (`predicted_ms`: the block's three stages). Every result checked against the
/// reference (all rows up to n = 128, else a sample) and against each other.
#[wasm_bindgen]
pub async fn sweep_point(n: usize, reps: usize) -> std::result::Result<String, JsValue> {
    to_js(sweep_inner(n, reps).await)
}

async fn timeline_inner(n: usize) -> Result<String> {
    let s = session()?;
    let k = s.n();
    check_size("timeline", &[n, n])?;
    let before = brigade::counters();
    let per = n / k.max(1);
    if per == 0 || !n.is_multiple_of(k) {
        return Err(Error::BadShapeArg {
            op: "timeline",
            shape: vec![n, n],
            detail: format!("n must be a positive multiple of the {k} devices"),
        });
    }
    let a = data(n * n, 15);
    let b = arr(data(n * n, 16), &[n, n])?;
    let blocks: Vec<Array> = (0..k)
        .map(|d| arr(a[d * per * n..(d + 1) * per * n].to_vec(), &[per, n]))
        .collect::<Result<_>>()?;
    let mut bars = Vec::new();
    let mut got = Vec::new();
    for round in 0..2 {
        // Round 0 compiles the kernels; round 1 is drawn.
        let t0 = now();
        let runs = s.devices.iter().enumerate().map(|(d, dev)| {
            let (blk, b, kernel) = (&blocks[d], &b, &s.mm_dev[d]);
            async move {
                let u0 = now() - t0;
                let ad = blk.to_device(dev)?;
                let bd = b.to_device(dev)?;
                dev.idle().await?;
                let u1 = now() - t0;
                let c = kernel.call(&[ad, bd])?;
                dev.idle().await?;
                let c1 = now() - t0;
                let h = c[0].to_host_async().await?;
                let r1 = now() - t0;
                Ok::<(Vec<String>, HostArray), Error>((
                    vec![
                        bar(d as i64, "upload", u0, u1),
                        bar(d as i64, "compute", u1, c1),
                        bar(d as i64, "read", c1, r1),
                    ],
                    h,
                ))
            }
        });
        let results = join_all(runs).await;
        bars.clear();
        got.clear();
        for r in results {
            let (b, h) = r?;
            bars.extend(b);
            got.extend(h.to_f64());
        }
        let _ = round;
    }
    let rows = check_rows(n, k, 128);
    let want = reference_rows(&s, &a, &b, n, &rows)?;
    let err = rel_err(&pick_rows(&got, n, &rows), &want);
    Ok(Obj::new()
        .int("n", n)
        .int("devices", k)
        .raw("timeline", json_list(bars))
        .num("err", err)
        .bool("ok", err <= TOL)
        .raw("work", work_json(&before))
        .end())
}

/// 优化: a per-device timeline of one row-split matmul (`n × n`), each device's upload, compute and
/// read-back timed on its own (ms since the start), and the result checked.
#[wasm_bindgen]
pub async fn timeline(n: usize) -> std::result::Result<String, JsValue> {
    to_js(timeline_inner(n).await)
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::super::json::field;
    use super::super::session::start_inner;
    use super::*;

    /// The matmul demos on two cpu devices: results verified; a size over the limit refused.
    #[test]
    fn matmuls_on_cpu_devices() {
        pollster::block_on(async {
            start_inner(2, "cpu:2").await.unwrap();
            for (name, out) in [
                ("matmul", matmul_inner(32).await),
                ("sweep", sweep_inner(16, 1).await),
                ("timeline", timeline_inner(16).await),
            ] {
                let out = out.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(field(&out, "ok"), "true", "{name}: {out}");
            }
            let bad = matmul_inner(1 << 20).await;
            assert!(matches!(bad, Err(Error::BadShapeArg { .. })), "{bad:?}");
        });
    }
}
