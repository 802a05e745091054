//! 进阶 Advanced: divisibility of a split, `in_axes`, `pmap(vmap(f))`, and `pmean` as a barrier.

use futures::future::join_all;
use wasm_bindgen::prelude::*;

use super::TOL;
use super::data::{arr, check_size, data, host_of, join_rows, lanes_busy, read_shards, rel_err};
use super::json::{
    Obj, bar, error_kind, json_ints, json_list, json_nums, json_str, to_js, work_json,
};
use super::page::{emit, now};
use super::session::{body, session};
use brigade::{Array, Error, HostArray, Result, Tensor, jit, shard_map};

async fn divisibility_inner(batch: usize, shards: usize) -> Result<String> {
    let s = session()?;
    let before = brigade::counters();
    const COLS: usize = 8;
    check_size("divisibility", &[batch, COLS, shards])?;
    let x = arr(data(batch * COLS, 4), &[batch, COLS])?;
    let prog = shard_map(body(|a| {
        let per_table = a[0].sum(1, false);
        let total = brigade::psum(&per_table.sum_all(), "tables");
        vec![per_table, total]
    }))
    .axis_name("tables")
    .out_axes(&[Some(0), None])
    .axis_size(shards)
    .devices(&s.devices)
    .named("tables");
    // Reuse the session's compiled program when the whole mesh is used.
    let p = if shards == s.n() { &s.tables } else { &prog };
    lanes_busy("advanced", shards);
    let t0 = now();
    let out = match p.call_async(std::slice::from_ref(&x)).await {
        Ok(o) => o,
        Err(e) => {
            return Ok(Obj::new()
                .int("batch", batch)
                .int("shards", shards)
                .str("error", &e.to_string())
                .str("kind", &error_kind(&e))
                .bool("user_error", e.is_user_error())
                .bool("ok", true)
                .raw("work", work_json(&before))
                .end());
        }
    };
    let (parts, times) = read_shards("advanced", &out[0], t0).await?;
    let total = out[1].to_host_async().await?.to_f64()[0];
    let ms = now() - t0;
    let want = p.emulate(&s.cpu, std::slice::from_ref(&x))?;
    let want_rows = host_of(&want, 0)?.to_f64();
    let want_total = host_of(&want, 1)?.to_f64()[0];
    let err = rel_err(&join_rows(&parts), &want_rows).max(rel_err(&[total], &[want_total]));
    Ok(Obj::new()
        .int("batch", batch)
        .int("shards", shards)
        .int("rows_per_device", batch / shards)
        .raw(
            "device_rows",
            json_ints(&parts.iter().map(|p| p.len()).collect::<Vec<_>>()),
        )
        .raw("device_ms", json_nums(&times))
        .num("total", total)
        .num("ms", ms)
        .num("err", err)
        .bool("ok", err <= TOL)
        .raw("work", work_json(&before))
        .end())
}

/// 进阶: `batch` tables split over the first `shards` devices (split mode). An indivisible batch
/// returns brigade's own error (`error`, `kind`); otherwise each device's rows, per-table sums and
/// their psum, checked against the reference.
#[wasm_bindgen]
pub async fn divisibility(batch: usize, shards: usize) -> std::result::Result<String, JsValue> {
    to_js(divisibility_inner(batch, shards).await)
}

fn graph_io(g: &brigade::Graph) -> (Vec<String>, Vec<String>) {
    (
        g.inputs.iter().map(|v| g.aval(*v).to_string()).collect(),
        g.outputs.iter().map(|v| g.aval(*v).to_string()).collect(),
    )
}

fn strs(v: &[String]) -> String {
    json_list(v.iter().map(|s| json_str(s)))
}

async fn in_axes_inner(rows: usize, dim: usize, out_dim: usize) -> Result<String> {
    let s = session()?;
    let n = s.n();
    check_size("in_axes_demo", &[n, rows, dim])?;
    check_size("in_axes_demo", &[dim, out_dim])?;
    let before = brigade::counters();
    let x = arr(data(n * rows * dim, 5), &[n, rows, dim])?;
    let w = arr(data(dim * out_dim, 6), &[dim, out_dim])?;
    let args = [x, w];
    // Without None, pmap would cut w too: the real message says what to do.
    let (all_mapped, all_mapped_kind) = match s.bcast_all_mapped.call_async(&args).await {
        Ok(_) => (String::new(), String::new()),
        Err(e) => (e.to_string(), error_kind(&e)),
    };
    let g = s.bcast.graph(&args)?;
    let (ins, outs) = graph_io(&g);
    lanes_busy("in_axes", n);
    let t0 = now();
    let out = s.bcast.call_async(&args).await?;
    let (parts, times) = read_shards("in_axes", &out[0], t0).await?;
    let ms = now() - t0;
    let want = host_of(&s.bcast.emulate(&s.cpu, &args)?, 0)?.to_f64();
    let err = rel_err(&join_rows(&parts), &want);
    Ok(Obj::new()
        .raw("x_shape", json_ints(&[n, rows, dim]))
        .raw("w_shape", json_ints(&[dim, out_dim]))
        .raw("device_inputs", strs(&ins))
        .raw("device_outputs", strs(&outs))
        .raw("out_shape", json_ints(out[0].shape()))
        .str("without_none", &all_mapped)
        .str("without_kind", &all_mapped_kind)
        .raw("device_ms", json_nums(&times))
        .num("ms", ms)
        .num("err", err)
        .bool("ok", err <= TOL && !all_mapped.is_empty())
        .raw("work", work_json(&before))
        .end())
}

/// 进阶: pmap with `in_axes (Some(0), None)`: x is cut, w is sent whole to every device. Returns the
/// shapes each device sees (from the traced per-device program), the error brigade gives when w
/// is mapped too, timings and the check.
#[wasm_bindgen]
pub async fn in_axes_demo(
    rows: usize,
    dim: usize,
    out_dim: usize,
) -> std::result::Result<String, JsValue> {
    to_js(in_axes_inner(rows, dim, out_dim).await)
}

async fn nesting_inner(per_device: usize, dim: usize) -> Result<String> {
    let s = session()?;
    let n = s.n();
    check_size("nesting", &[n, per_device, dim])?;
    check_size("nesting", &[dim, dim])?;
    let before = brigade::counters();
    let x = arr(data(n * per_device * dim, 7), &[n, per_device, dim])?;
    let w = arr(
        data(dim * dim, 8).iter().map(|v| v * 0.5).collect(),
        &[dim, dim],
    )?;
    let args = [x, w.clone()];
    // The three levels: the whole batch, what one device sees, what one example sees.
    let device_graph = s.nested.graph(&args)?;
    let example = jit(|e: &[Tensor]| vec![e[0].matmul(&e[1]).tanh()]);
    let example_graph = example.graph(&[arr(vec![0.0; dim], &[dim])?, w])?;
    let (dev_in, dev_out) = graph_io(&device_graph);
    let (ex_in, ex_out) = graph_io(&example_graph);
    lanes_busy("nesting", n);
    let t0 = now();
    let out = s.nested.call_async(&args).await?;
    let (parts, times) = read_shards("nesting", &out[0], t0).await?;
    let ms = now() - t0;
    let want = host_of(&s.nested.emulate(&s.cpu, &args)?, 0)?.to_f64();
    let err = rel_err(&join_rows(&parts), &want);
    Ok(Obj::new()
        .raw("x_shape", json_ints(&[n, per_device, dim]))
        .raw("device_inputs", strs(&dev_in))
        .raw("device_outputs", strs(&dev_out))
        .raw("example_inputs", strs(&ex_in))
        .raw("example_outputs", strs(&ex_out))
        .raw("out_shape", json_ints(out[0].shape()))
        .str("device_program", &device_graph.to_string())
        .raw("device_ms", json_nums(&times))
        .num("ms", ms)
        .num("err", err)
        .bool("ok", err <= TOL)
        .raw("work", work_json(&before))
        .end())
}

/// 进阶: `pmap(vmap(f))` on `(n, per_device, dim)`: the shapes at each level (from the traced
/// programs), the per-device program as text, timings and the check.
#[wasm_bindgen]
pub async fn nesting(per_device: usize, dim: usize) -> std::result::Result<String, JsValue> {
    to_js(nesting_inner(per_device, dim).await)
}

async fn barrier_inner(rows: usize, dim: usize, uneven: bool) -> Result<String> {
    let s = session()?;
    let n = s.n();
    check_size("barrier", &[n, rows, dim])?;
    check_size("barrier", &[dim, dim])?;
    let before = brigade::counters();
    let x = arr(data(n * rows * dim, 9), &[n, rows, dim])?;
    let w = arr(
        data(dim * dim, 10).iter().map(|v| v * 0.3).collect(),
        &[dim, dim],
    )?;
    let args = [x.clone(), w.clone()];
    let (stages, exchanges) = s.center.stage_count(&args)?;

    // The real pmap (warm it first: the first call compiles).
    s.center.call_async(&args).await?;
    let t0 = now();
    let out = s.center.call_async(&args).await?;
    let (parts, _) = read_shards("advanced-pmap", &out[0], t0).await?;
    let pmap_ms = now() - t0;
    let got = join_rows(&parts);
    let want = host_of(&s.center.emulate(&s.cpu, &args)?, 0)?.to_f64();
    let err = rel_err(&got, &want);

    // The same program stage by stage, timed: stage 1 on every device, the barrier (every device's
    // mean read back, averaged on the host, written to every device), stage 2.
    let xh = x.host().cloned().ok_or_else(|| Error::Unsupported {
        op: "barrier",
        detail: "input not on the host".into(),
    })?;
    let blocks: Vec<Array> = (0..n)
        .map(|d| {
            let v = xh.to_f64()[d * rows * dim..(d + 1) * rows * dim]
                .iter()
                .map(|&f| f as f32)
                .collect();
            arr(v, &[rows, dim])
        })
        .collect::<Result<_>>()?;
    let mut bars = Vec::new();
    let mut staged = Vec::new();
    let mut waits = Vec::new();
    for round in 0..2 {
        // Round 0 compiles; round 1 is the one drawn.
        bars.clear();
        let t0 = now();
        let mut stage1 = Vec::with_capacity(n);
        for (d, dev) in s.devices.iter().enumerate() {
            let xd = blocks[d].to_device(dev)?;
            let wd = w.to_device(dev)?;
            // Uneven load: the last device cooks stage 1 `UNEVEN` times over (the same result
            // each time), so everyone else waits for it at the barrier.
            let times = if uneven && d + 1 == n { UNEVEN } else { 1 };
            let mut o = s.stage_a[d].call(&[xd.clone(), wd.clone()])?;
            for _ in 1..times {
                o = s.stage_a[d].call(&[xd.clone(), wd.clone()])?;
            }
            stage1.push(o);
        }
        let submitted = now() - t0;
        let arrive = join_all(s.devices.iter().enumerate().map(|(d, dev)| async move {
            dev.idle().await?;
            let t = now() - t0;
            emit(
                "lane",
                &Obj::new()
                    .str("mode", "barrier")
                    .int("device", d)
                    .str("state", "arrived")
                    .num("ms", t)
                    .end(),
            );
            Ok::<f64, Error>(t)
        }))
        .await
        .into_iter()
        .collect::<Result<Vec<f64>>>()?;
        let means = join_all(stage1.iter().map(|o| o[1].to_host_async()))
            .await
            .into_iter()
            .collect::<Result<Vec<HostArray>>>()?;
        let read = now() - t0;
        let mut mean = vec![0.0f64; dim];
        for m in &means {
            for (acc, v) in mean.iter_mut().zip(m.to_f64()) {
                *acc += v / n as f64;
            }
        }
        let mean = arr(mean.iter().map(|&v| v as f32).collect(), &[dim])?;
        let combined = now() - t0;
        let mut stage2 = Vec::with_capacity(n);
        for (d, dev) in s.devices.iter().enumerate() {
            let md = mean.to_device(dev)?;
            stage2.push(s.stage_b[d].call(&[stage1[d][0].clone(), md])?);
        }
        let written = now() - t0;
        let done = join_all(s.devices.iter().map(|dev| async move {
            dev.idle().await?;
            Ok::<f64, Error>(now() - t0)
        }))
        .await
        .into_iter()
        .collect::<Result<Vec<f64>>>()?;
        let outs = join_all(stage2.iter().map(|o| o[0].to_host_async()))
            .await
            .into_iter()
            .collect::<Result<Vec<HostArray>>>()?;
        let end = now() - t0;
        let last = arrive.iter().copied().fold(0.0, f64::max);
        for d in 0..n {
            bars.push(bar(d as i64, "stage 1", 0.0, arrive[d]));
            bars.push(bar(d as i64, "wait", arrive[d], last));
            bars.push(bar(d as i64, "stage 2", written, done[d]));
        }
        bars.push(bar(-1, "submit", 0.0, submitted));
        bars.push(bar(-1, "read", last, read));
        bars.push(bar(-1, "pmean", read, combined));
        bars.push(bar(-1, "write", combined, written));
        bars.push(bar(
            -1,
            "read",
            done.iter().copied().fold(0.0, f64::max),
            end,
        ));
        if round == 1 {
            staged = join_rows(&outs);
            waits = arrive.iter().map(|a| last - a).collect();
        }
    }
    let err_staged = rel_err(&staged, &want);
    Ok(Obj::new()
        .int("devices", n)
        .int("rows", rows)
        .int("dim", dim)
        .int("stages", stages)
        .int("exchanges", exchanges)
        .num("pmap_ms", pmap_ms)
        .bool("uneven", uneven)
        .int("uneven_factor", if uneven { UNEVEN } else { 1 })
        .raw("wait_ms", json_nums(&waits))
        .raw("timeline", json_list(bars))
        .num("err", err)
        .num("err_staged", err_staged)
        .bool("ok", err <= TOL && err_staged <= TOL)
        .raw("work", work_json(&before))
        .end())
}

/// 进阶: `pmean` as a barrier. Runs `h = tanh(x W); y = h - pmean(mean(h))` as a pmap (timed,
/// checked), then the same two stages by hand on every device with each device's arrival at the
/// barrier, the host's read, average and write, and stage 2, timed (`timeline`, ms). With
/// `uneven`, the last device does stage 1 `UNEVEN` (4) times over: the others' wait (`wait_ms`)
/// shows that a barrier waits for the slowest.
#[wasm_bindgen]
pub async fn barrier(
    rows: usize,
    dim: usize,
    uneven: bool,
) -> std::result::Result<String, JsValue> {
    to_js(barrier_inner(rows, dim, uneven).await)
}

/// How many times over the slow device does stage 1 in the uneven barrier demo.
const UNEVEN: usize = 4;

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::super::json::field;
    use super::super::session::start_inner;
    use super::*;

    /// Every advanced demo on two cpu devices: results verified, the indivisible batch reported
    /// with brigade's message.
    #[test]
    fn advanced_on_cpu_devices() {
        pollster::block_on(async {
            start_inner(2, "cpu:2").await.unwrap();
            for (name, out) in [
                ("divisible", divisibility_inner(10, 2).await),
                ("in_axes", in_axes_inner(3, 4, 5).await),
                ("nesting", nesting_inner(3, 4).await),
                ("barrier", barrier_inner(4, 8, false).await),
                ("uneven barrier", barrier_inner(4, 8, true).await),
            ] {
                let out = out.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(field(&out, "ok"), "true", "{name}: {out}");
            }
            let bad = divisibility_inner(1001, 2).await.unwrap();
            assert!(bad.contains("IndivisibleSplit"), "{bad}");
            assert!(bad.contains("cannot be split evenly"), "{bad}");
        });
    }
}
