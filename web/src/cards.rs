//! 专题 Topics: the tutorial's sections that the four modes do not show — debugging (the three
//! common errors with brigade's real messages, per-device prints, the one-device fallback, the
//! planner), the random-key pitfall, `device_put` and placement, and model parallelism.
//!
//! Every card runs real kernels on the session's devices and checks its result against the CPU
//! reference interpreter (the session's `cpu` device) within [`TOL`].

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::join_all;
use wasm_bindgen::prelude::*;

use super::TOL;
use super::data::{arr, check_size, data, host_of, join_rows, read_shards, rel_err};
use super::json::{
    Obj, bar, error_kind, json_ints, json_list, json_nums, json_str, to_js, work_json,
};
use super::page::now;
use super::session::{body, session};
use brigade::{
    Array, Aval, DType, Error, HostArray, Mesh, NamedSharding, P, Result, Tensor,
    capture_debug_prints, cond, debug_print, device_put, device_put_sharded, jit, plan, pmap, psum,
    random, shard_map, vmap,
};

/// A future whose `debug_print` lines are captured: every poll runs inside
/// [`capture_debug_prints`], so the lines a parallel program prints while it runs (in the browser,
/// after its reads resolve) are collected instead of printed.
struct Captured<F: Future> {
    inner: Pin<Box<F>>,
    lines: Vec<String>,
}

impl<F: Future> Future for Captured<F> {
    type Output = (F::Output, Vec<String>);
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let (p, lines) = capture_debug_prints(|| this.inner.as_mut().poll(cx));
        this.lines.extend(lines);
        match p {
            Poll::Ready(v) => Poll::Ready((v, std::mem::take(&mut this.lines))),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn captured<F: Future>(f: F) -> Captured<F> {
    Captured {
        inner: Box::pin(f),
        lines: Vec::new(),
    }
}

/// An error as the page shows it: the variant and brigade's own message.
fn error_json(e: &Error) -> String {
    Obj::new()
        .str("kind", &error_kind(e))
        .str("message", &e.to_string())
        .end()
}

async fn host(a: &Array) -> Result<Vec<f64>> {
    Ok(a.to_host_async().await?.to_f64())
}

// ---- 调试与降级 Debugging ------------------------------------------------------------------------

/// Error 1 splits a batch of `4n + 1` rows over `n` devices: each device sums its rows, psum
/// adds the devices' sums.
fn column_sum(a: &[Tensor]) -> Vec<Tensor> {
    vec![psum(&a[0].sum(0, false), "i")]
}

/// Error 2, the host `if`: reading a traced value to branch on it fails while tracing.
fn host_if(a: &[Tensor]) -> Vec<Tensor> {
    let total = a[0].sum_all();
    let positive = total
        .to_array()
        .is_ok_and(|t| t.host().is_some_and(|h| h.to_f64()[0] > 0.0));
    vec![if positive { a[0].clone() } else { -&a[0] }]
}

/// The fix: the choice staged into the program with `cond`, each device taking its own branch.
fn with_cond(a: &[Tensor]) -> Vec<Tensor> {
    let positive = a[0].sum_all().gt(&Tensor::scalar(0.0f32));
    cond(&positive, |x| vec![x[0].clone()], |x| vec![-&x[0]], &a[..1])
}

async fn debug_errors_inner() -> Result<String> {
    let s = session()?;
    let n = s.n();
    let before = brigade::counters();

    // 1. The batch does not divide over the devices; the fix pads it with zero rows.
    let rows = 4 * n + 1;
    let x = arr(data(rows * 2, 21), &[rows, 2])?;
    let f = shard_map(column_sum)
        .axis_name("i")
        .out_axes(&[None])
        .devices(&s.devices)
        .named("column sums");
    let split_error = f.call_async(std::slice::from_ref(&x)).await.err();
    let padded_rows = rows.div_ceil(n) * n;
    let mut padded = data(rows * 2, 21);
    padded.resize(padded_rows * 2, 0.0);
    let padded = arr(padded, &[padded_rows, 2])?;
    let got = host(&f.call_async(std::slice::from_ref(&padded)).await?[0]).await?;
    let want = host_of(&f.emulate(&s.cpu, std::slice::from_ref(&padded))?, 0)?.to_f64();
    let err_pad = rel_err(&got, &want);
    // An indivisible batch is an error only with more than one device.
    let split_ok = match &split_error {
        Some(Error::IndivisibleSplit { .. }) => n > 1,
        None => n == 1,
        Some(_) => false,
    };

    // 2. A host if on a traced value, then cond.
    // Rows of alternating sign, so that with two devices or more they take different branches.
    let signed = |(i, v): (usize, &f32)| if (i / 3) % 2 == 0 { v.abs() } else { -v.abs() };
    let xs = arr(
        data(n * 3, 22).iter().enumerate().map(signed).collect(),
        &[n, 3],
    )?;
    let branchy = pmap(host_if).devices(&s.devices).named("host if");
    let if_error = branchy.call_async(std::slice::from_ref(&xs)).await.err();
    let if_ok = matches!(if_error, Some(Error::TracedValue { .. }));
    let selecty = pmap(with_cond).devices(&s.devices).named("cond");
    let out = selecty.call_async(std::slice::from_ref(&xs)).await?;
    let (parts, _) = read_shards("debug", &out[0], now()).await?;
    let got_cond = join_rows(&parts);
    let want_cond = host_of(&selecty.emulate(&s.cpu, std::slice::from_ref(&xs))?, 0)?.to_f64();
    let err_cond = rel_err(&got_cond, &want_cond);
    // Which branch each device took: its rows' sum decides.
    let xh = xs.host().map(|h| h.to_f64()).unwrap_or_default();
    let branches: Vec<String> = xh
        .chunks(3)
        .map(|r| {
            json_str(if r.iter().sum::<f64>() > 0.0 {
                "x"
            } else {
                "-x"
            })
        })
        .collect();

    let ok = split_ok && err_pad <= TOL && if_ok && err_cond <= TOL;
    Ok(Obj::new()
        .int("devices", n)
        .raw(
            "split",
            Obj::new()
                .int("rows", rows)
                .raw(
                    "error",
                    split_error
                        .as_ref()
                        .map(error_json)
                        .unwrap_or("null".into()),
                )
                .int("padded_rows", padded_rows)
                .raw("sums", json_nums(&got))
                .num("err", err_pad)
                .bool("ok", split_ok && err_pad <= TOL)
                .end(),
        )
        .raw(
            "host_if",
            Obj::new()
                .raw(
                    "error",
                    if_error.as_ref().map(error_json).unwrap_or("null".into()),
                )
                .raw("input", json_nums(&xh))
                .raw("branches", json_list(branches))
                .raw("cond", json_nums(&got_cond))
                .num("err", err_cond)
                .bool("ok", if_ok && err_cond <= TOL)
                .end(),
        )
        .num("tol", TOL)
        .bool("ok", ok)
        .raw("work", work_json(&before))
        .end())
}

/// 专题 · 调试: the three common errors of a parallel program, run for real. An indivisible batch
/// (brigade's `IndivisibleSplit` message, then the zero-padded batch, checked); a host `if` on a
/// traced value (the `TracedValue` message, then `cond`, each device taking its own branch,
/// checked). The third, one random key on every device, is `random_keys`.
#[wasm_bindgen]
pub async fn debug_errors() -> std::result::Result<String, JsValue> {
    to_js(debug_errors_inner().await)
}

/// Every device prints its rows' sum and the psum of all (the tutorial's walkie-talkie).
fn talk(a: &[Tensor]) -> Vec<Tensor> {
    let mine = a[0].sum_all();
    debug_print(
        "my rows sum to {}, all rows to {}",
        &[&mine, &psum(&mine, "i")],
    );
    vec![mine]
}

/// The one-device fallback: each row minus the mean over the devices.
fn centered(a: &[Tensor]) -> Vec<Tensor> {
    let n = brigade::axis_size("i").unwrap_or(1) as f32;
    vec![&a[0] - &(psum(&a[0], "i") / n)]
}

async fn debug_prints_inner(rows: usize) -> Result<String> {
    let s = session()?;
    let n = s.n();
    check_size("debug_prints", &[n, rows])?;
    let before = brigade::counters();
    let x = arr(data(n * rows, 23), &[n, rows])?;
    let p = pmap(talk).axis_name("i").devices(&s.devices).named("talk");
    let (res, lines) = captured(p.call_async(std::slice::from_ref(&x))).await;
    let out = res?;
    host(&out[0]).await?;
    let xh = x.host().map(|h| h.to_f64()).unwrap_or_default();
    let sums: Vec<f64> = xh.chunks(rows).map(|r| r.iter().sum()).collect();
    let total: f64 = sums.iter().sum();
    // One line per device, in device order, tagged with the device and its axis index, each with
    // its own sum and the same total (parsed back and compared with the host's sums).
    let parsed: Vec<Option<(f64, f64)>> = lines
        .iter()
        .map(|l| {
            let rest = l.split("my rows sum to ").nth(1)?;
            let (a, b) = rest.split_once(", all rows to ")?;
            Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
        })
        .collect();
    let scale = total.abs().max(1.0);
    let prints_ok = lines.len() == n
        && lines.iter().enumerate().all(|(d, l)| {
            l.starts_with(&format!("[{}:", s.devices[d].info().backend))
                && l.contains(&format!(" i={d}]"))
        })
        && parsed.iter().zip(&sums).all(|(p, &want)| {
            p.is_some_and(|(mine, all)| {
                (mine - want).abs() / scale <= TOL && (all - total).abs() / scale <= TOL
            })
        });

    // Run it on one device first: the same pmap emulated on device 0 (vmap over the axis),
    // against the real run on every device and the reference.
    let program = pmap(centered)
        .axis_name("i")
        .devices(&s.devices)
        .named("centered");
    let t0 = now();
    let real = program.call_async(std::slice::from_ref(&x)).await?;
    let (parts, _) = read_shards("debug", &real[0], t0).await?;
    let real_ms = now() - t0;
    let got_real = join_rows(&parts);
    let t1 = now();
    let one = program.emulate(&s.devices[0], std::slice::from_ref(&x))?;
    let got_one = host(&one[0]).await?;
    let one_ms = now() - t1;
    let want = host_of(&program.emulate(&s.cpu, std::slice::from_ref(&x))?, 0)?.to_f64();
    let err_real = rel_err(&got_real, &want);
    let err_one = rel_err(&got_one, &want);
    let agree = rel_err(&got_real, &got_one);
    let ok = prints_ok && err_real <= TOL && err_one <= TOL;
    Ok(Obj::new()
        .int("devices", n)
        .int("rows", rows)
        .raw("lines", json_list(lines.iter().map(|l| json_str(l))))
        .raw("sums", json_nums(&sums))
        .num("total", total)
        .bool("prints_ok", prints_ok)
        .raw(
            "fallback",
            Obj::new()
                .num("real_ms", real_ms)
                .num("one_ms", one_ms)
                .num("err_real", err_real)
                .num("err_one", err_one)
                .num("agree", agree)
                .end(),
        )
        .num("tol", TOL)
        .bool("ok", ok)
        .raw("work", work_json(&before))
        .end())
}

/// 专题 · 调试: `debug_print` inside a pmap (one line per device, tagged with its device and
/// axis index, each checked against the host's sums), and the one-device fallback (the same pmap
/// emulated on device 0 against the real run; both against the reference).
#[wasm_bindgen]
pub async fn debug_prints(rows: usize) -> std::result::Result<String, JsValue> {
    to_js(debug_prints_inner(rows).await)
}

/// Per example: the outer product of a feature vector with itself, then a row softmax (memory
/// grows with the square of the features).
fn outer_softmax(a: &[Tensor]) -> Vec<Tensor> {
    let n = a[0].shape()[0] as i64;
    let v = a[0].reshape(&[n, 1]);
    vec![v.matmul(&v.reshape(&[1, n])).softmax(-1)]
}

async fn planner_inner(batch_total: usize, features: usize) -> Result<String> {
    let s = session()?;
    let n = s.n();
    check_size("planner", &[batch_total])?;
    check_size("planner", &[features, features])?;
    let before = brigade::counters();
    let dev = &s.devices[0];
    let p = plan(
        outer_softmax,
        &[Aval::new(vec![features], DType::F32)],
        batch_total,
        dev,
    )?;
    // The plan's own arithmetic, checked: b_cap examples fit the binding, one more does not, and
    // N = ceil(B / b_cap).
    let bytes = |b: usize| {
        p.largest_buffer_per_sample
            .saturating_mul(b as u64)
            .saturating_add(p.largest_buffer_fixed)
    };
    let cap_fits = p.batch_cap == usize::MAX
        || (bytes(p.batch_cap) <= p.binding_limit
            && (p.batch_cap < p.binding_cap || bytes(p.batch_cap + 1) > p.binding_limit));
    let n_ok = (p.batch_cap == usize::MAX && p.devices_needed == 1)
        || p.devices_needed == batch_total.div_ceil(p.batch_cap);
    // The planned function on the device with a few examples, against the reference.
    let few = 4usize;
    let x = arr(data(few * features, 24), &[few, features])?;
    let batched = vmap(outer_softmax).on(dev).named("outer softmax");
    let got = host(&batched.call(std::slice::from_ref(&x))?[0]).await?;
    let want = host_of(
        &vmap(outer_softmax)
            .on(&s.cpu)
            .call(std::slice::from_ref(&x))?,
        0,
    )?
    .to_f64();
    let err = rel_err(&got, &want);
    let share = batch_total.div_ceil(n);
    let limits = dev.limits();
    Ok(Obj::new()
        .int("batch_total", batch_total)
        .int("features", features)
        .str(
            "device",
            &format!("{}:{}", dev.info().backend, dev.info().index),
        )
        .bool("cpu", dev.is_cpu())
        .num("binding_limit", p.binding_limit as f64)
        .num("max_buffer", limits.max_buffer_size as f64)
        .num("bytes_per_sample", p.largest_buffer_per_sample as f64)
        .num("bytes_fixed", p.largest_buffer_fixed as f64)
        .num("peak_per_sample", p.bytes_per_sample as f64)
        .num(
            "b_cap",
            if p.batch_cap == usize::MAX {
                -1.0
            } else {
                p.batch_cap as f64
            },
        )
        .int("devices_needed", p.devices_needed)
        .int("devices", n)
        .int("page_devices", n)
        .int("share", share)
        .bool(
            "share_fits",
            p.batch_cap == usize::MAX || share <= p.batch_cap,
        )
        .bool("plan_ok", cap_fits && n_ok)
        .num("err", err)
        .bool("ok", cap_fits && n_ok && err <= TOL)
        .raw("work", work_json(&before))
        .end())
}

/// 专题 · 调试: the planner `N = ceil(B / b_cap)` with device 0's real limits: `b_cap` from
/// brigade's plan of a layer of `features` features (checked: `b_cap` fits the binding, one more
/// does not), and the planned function run on the device against the reference.
#[wasm_bindgen]
pub async fn planner(batch_total: usize, features: usize) -> std::result::Result<String, JsValue> {
    to_js(planner_inner(batch_total, features).await)
}

// ---- 随机数陷阱 The random-key pitfall -------------------------------------------------------------

/// Augment every device's rows with noise from its key argument.
fn noisy(a: &[Tensor]) -> Vec<Tensor> {
    let noise = random::normal(&a[1], &[a[0].shape()[0]]);
    vec![&a[0] + &(&noise * 0.1), noise]
}

/// The same, with one key for all folded with the device's index.
fn noisy_fold(a: &[Tensor]) -> Vec<Tensor> {
    let key = random::fold_in_tensor(&a[1], &brigade::axis_index("i"));
    let noise = random::normal(&key, &[a[0].shape()[0]]);
    vec![&a[0] + &(&noise * 0.1), noise]
}

/// Rows of `v` (of width `w`) that equal another row.
fn repeated_rows(v: &[f64], w: usize) -> usize {
    let rows: Vec<&[f64]> = v.chunks(w).collect();
    (0..rows.len())
        .filter(|&i| (0..rows.len()).any(|j| j != i && rows[j] == rows[i]))
        .count()
}

async fn random_keys_inner(width: usize, seed: u32) -> Result<String> {
    let s = session()?;
    let n = s.n();
    check_size("random_keys", &[n, width])?;
    let before = brigade::counters();
    let x = arr(data(n * width, 25), &[n, width])?;
    let key = Array::from_vec(vec![0u32, seed], &[2])?;
    // The keys, made by the reference (they are tiny): one key copied to every device, and
    // split(key, n).
    let same = Array::from_vec(
        (0..n).flat_map(|_| [0u32, seed]).collect::<Vec<u32>>(),
        &[n, 2],
    )?;
    let split_fn = move |a: &[Tensor]| vec![random::split(&a[0], n)];
    let split = jit(split_fn)
        .on(&s.cpu)
        .call(std::slice::from_ref(&key))?
        .remove(0);

    let per_key = pmap(body(noisy))
        .devices(&s.devices)
        .named("noise (key per device)");
    let folded = pmap(body(noisy_fold))
        .axis_name("i")
        .in_axes(&[Some(0), None])
        .devices(&s.devices)
        .named("noise (fold_in axis_index)");
    let mut runs = Vec::new();
    let mut all_ok = true;
    for (name, prog, k) in [
        ("same", &per_key, &same),
        ("split", &per_key, &split),
        ("fold_in", &folded, &key),
    ] {
        let args = [x.clone(), k.clone()];
        let t0 = now();
        let out = prog.call_async(&args).await?;
        let (parts, _) = read_shards("random", &out[1], t0).await?;
        let ms = now() - t0;
        let noise = join_rows(&parts);
        let want = prog.emulate(&s.cpu, &args)?;
        let err = rel_err(&noise, &host_of(&want, 1)?.to_f64())
            .max(rel_err(&host(&out[0]).await?, &host_of(&want, 0)?.to_f64()));
        let repeated = repeated_rows(&noise, width);
        // Same key: every device's noise identical. Split or folded keys: no two alike.
        let expected = if name == "same" {
            n == 1 || repeated == n
        } else {
            repeated == 0
        };
        let ok = err <= TOL && expected;
        all_ok &= ok;
        runs.push(
            Obj::new()
                .str("name", name)
                .raw("noise", json_nums(&noise))
                .int("repeated_rows", repeated)
                .num("ms", ms)
                .num("err", err)
                .bool("ok", ok)
                .end(),
        );
    }
    let keys = host(&split).await?;
    Ok(Obj::new()
        .int("devices", n)
        .int("width", width)
        .raw("split_keys", json_nums(&keys))
        .raw("runs", json_list(runs))
        .num("tol", TOL)
        .bool("ok", all_ok)
        .raw("work", work_json(&before))
        .end())
}

/// 专题 · 随机数陷阱: noise drawn inside a pmap with one key copied to every device (identical
/// noise on every device), with `split(key, n)` sharded over the devices, and with one key folded
/// with `axis_index` (each device its own); each checked against the reference.
#[wasm_bindgen]
pub async fn random_keys(width: usize, seed: u32) -> std::result::Result<String, JsValue> {
    to_js(random_keys_inner(width, seed).await)
}

// ---- device_put 设备管理 -----------------------------------------------------------------------------

fn scale_rows(a: &[Tensor]) -> Vec<Tensor> {
    vec![(&a[0] * 2.0).tanh()]
}

fn placed_where(a: &Array) -> String {
    match (a.device(), a.shards()) {
        (Some(d), _) => json_list([json_str(&format!(
            "{}:{}",
            d.info().backend,
            d.info().index
        ))]),
        (_, Some(sh)) => json_list(sh.iter().map(|s| {
            let d = s
                .device()
                .map(|d| format!("{}:{}", d.info().backend, d.info().index));
            Obj::new()
                .str("device", d.as_deref().unwrap_or("host"))
                .raw("shape", json_ints(s.shape()))
                .end()
        })),
        _ => json_list([json_str("host")]),
    }
}

async fn placement_inner(rows_per_device: usize, cols: usize) -> Result<String> {
    let s = session()?;
    let n = s.n();
    check_size("placement", &[n, rows_per_device, cols])?;
    let before = brigade::counters();
    let rows = n * rows_per_device;
    let x = arr(data(rows * cols, 26), &[rows, cols])?;
    // A shard_map over a one-axis mesh: each device's block of rows, as the sharding places them.
    let mesh = Mesh::new(&s.devices, &[("data", n)])?;
    let prog = shard_map(scale_rows)
        .mesh(&mesh)
        .in_specs(&[P!["data", None]])
        .out_specs(&[P!["data", None]])
        .named("scale rows");
    let want = host_of(&prog.emulate(&s.cpu, std::slice::from_ref(&x))?, 0)?.to_f64();

    // device_put on one device: the whole array there.
    let last = &s.devices[n - 1];
    let on_last = device_put(&x, last)?;
    let back = host(&on_last).await?;
    let copy_ok = rel_err(&back, &x.host().map(|h| h.to_f64()).unwrap_or_default()) == 0.0;

    // device_put with a sharding: one row block per device of the mesh.
    let sharding = NamedSharding::new(&mesh, P!["data", None])?;
    let c0 = brigade::counters();
    let t0 = now();
    let placed = device_put(&x, &sharding)?;
    for d in &s.devices {
        d.idle().await?;
    }
    let put_ms = now() - t0;
    let put_bytes = brigade::counters().since(&c0).bytes_uploaded as usize;

    // The same program on the host array (it is cut and uploaded at call time) and on the placed
    // one (nothing to move): bytes uploaded by each call, and both results checked.
    let mut calls = Vec::new();
    let mut uploaded = Vec::new();
    let mut ok = copy_ok;
    for (name, input) in [("host", &x), ("placed", &placed)] {
        // Warm first (compile), then the call that is measured.
        prog.call_async(std::slice::from_ref(input)).await?;
        let c = brigade::counters();
        let t0 = now();
        let out = prog.call_async(std::slice::from_ref(input)).await?;
        let (parts, _) = read_shards("placement", &out[0], t0).await?;
        let ms = now() - t0;
        let w = brigade::counters().since(&c);
        let err = rel_err(&join_rows(&parts), &want);
        ok &= err <= TOL;
        uploaded.push(w.bytes_uploaded as usize);
        calls.push(
            Obj::new()
                .str("input", name)
                .num("ms", ms)
                .int("bytes_up", w.bytes_uploaded as usize)
                .int("bytes_down", w.bytes_downloaded as usize)
                .num("err", err)
                .end(),
        );
    }
    // device_put_sharded: one piece per device, stacked (pmap's form).
    let pieces: Vec<Array> = (0..n)
        .map(|d| arr(data(cols, 30 + d as u32), &[cols]))
        .collect::<Result<_>>()?;
    let stacked = device_put_sharded(&pieces, &s.devices)?;
    let stacked_back = host(&stacked).await?;
    let pieces_host: Vec<f64> = pieces
        .iter()
        .flat_map(|p| p.host().map(|h| h.to_f64()).unwrap_or_default())
        .collect();
    let stacked_ok = stacked_back == pieces_host;
    ok &= stacked_ok;
    // The placed input's call uploads nothing; the host input's uploads at least x (on cpu
    // devices nothing is uploaded either way).
    let placed_none = uploaded[1] == 0 && (s.devices[0].is_cpu() || uploaded[0] >= rows * cols * 4);
    ok &= placed_none;
    Ok(Obj::new()
        .int("devices", n)
        .raw("shape", json_ints(&[rows, cols]))
        .raw("one_device", placed_where(&on_last))
        .bool("one_device_ok", copy_ok)
        .raw("sharded", placed_where(&placed))
        .num("put_ms", put_ms)
        .int("put_bytes", put_bytes)
        .raw("calls", json_list(calls))
        .raw("stacked", placed_where(&stacked))
        .bool("stacked_ok", stacked_ok)
        .bool("placed_moves_nothing", placed_none)
        .num("tol", TOL)
        .bool("ok", ok)
        .raw("work", work_json(&before))
        .end())
}

/// 专题 · device_put: an array put on one device, over a mesh (one row block per device) and
/// stacked with `device_put_sharded`, where each shard lives; the same program called on the
/// host array and on the placed one (bytes each call uploads), results checked.
#[wasm_bindgen]
pub async fn placement(
    rows_per_device: usize,
    cols: usize,
) -> std::result::Result<String, JsValue> {
    to_js(placement_inner(rows_per_device, cols).await)
}

// ---- 模型并行 Model parallelism ------------------------------------------------------------------

/// One stage: a dense layer with tanh.
fn layer(a: &[Tensor]) -> Vec<Tensor> {
    vec![(a[0].matmul(&a[1]) + &a[2]).tanh()]
}

async fn model_parallel_inner(width: usize, batch: usize, micro: usize) -> Result<String> {
    let s = session()?;
    let n = s.n();
    const STAGES: usize = 4;
    check_size("model_parallel", &[batch, width])?;
    check_size("model_parallel", &[width, width])?;
    let micro = micro.clamp(1, batch);
    if !batch.is_multiple_of(micro) {
        return Err(Error::BadShapeArg {
            op: "model_parallel",
            shape: vec![batch, micro],
            detail: format!("the batch ({batch}) must divide into {micro} microbatches"),
        });
    }
    let before = brigade::counters();
    let mb = batch / micro;
    // Stage s and its parameters live on device s mod n.
    let params: Vec<(Array, Array)> = (0..STAGES)
        .map(|st| {
            let scale = 1.0 / (width as f32).sqrt();
            let w = arr(
                data(width * width, 40 + st as u32)
                    .iter()
                    .map(|v| v * scale)
                    .collect(),
                &[width, width],
            )?;
            let b = arr(
                data(width, 50 + st as u32)
                    .iter()
                    .map(|v| v * 0.1)
                    .collect(),
                &[width],
            )?;
            Ok((w, b))
        })
        .collect::<Result<_>>()?;
    let placed: Vec<(Array, Array)> = params
        .iter()
        .enumerate()
        .map(|(st, (w, b))| {
            let dev = &s.devices[st % n];
            Ok((device_put(w, dev)?, device_put(b, dev)?))
        })
        .collect::<Result<_>>()?;
    let stages: Vec<_> = (0..STAGES)
        .map(|st| jit(layer).on(&s.devices[st % n]).named("layer"))
        .collect();
    let xs = data(batch * width, 41);
    let micro_in: Vec<Array> = (0..micro)
        .map(|m| {
            arr(
                xs[m * mb * width..(m + 1) * mb * width].to_vec(),
                &[mb, width],
            )
        })
        .collect::<Result<_>>()?;

    // Each stage alone on one microbatch (the first run compiles; median of 3 after it).
    let mut stage_ms = Vec::with_capacity(STAGES);
    for (st, f) in stages.iter().enumerate() {
        let dev = &s.devices[st % n];
        let input = device_put(&micro_in[0], dev)?;
        let mut times = Vec::new();
        for r in 0..4 {
            let t0 = now();
            let out = f.call(&[input.clone(), placed[st].0.clone(), placed[st].1.clone()])?;
            out[0].to_host_async().await?;
            if r > 0 {
                times.push(now() - t0);
            }
        }
        times.sort_by(f64::total_cmp);
        stage_ms.push(times[times.len() / 2]);
    }

    // The pipeline: at tick t stage s works on microbatch t - s. Every stage of a tick is submitted
    // first (devices run at once), then their outputs are read; an activation moves to the next
    // stage's device through the host. Each bar: from the tick's start to when its output arrived.
    let t0 = now();
    let mut acts: Vec<Array> = micro_in.clone();
    let mut bars = Vec::new();
    for t in 0..micro + STAGES - 1 {
        let tick = now() - t0;
        let mut running = Vec::new();
        for (st, f) in stages.iter().enumerate() {
            let Some(m) = t.checked_sub(st).filter(|&m| m < micro) else {
                continue;
            };
            let input = device_put(&acts[m], &s.devices[st % n])?;
            let out = f.call(&[input, placed[st].0.clone(), placed[st].1.clone()])?;
            running.push((st, m, out.into_iter().next().expect("one output")));
        }
        let reads = running.iter().map(|(_, _, a)| async move {
            let h = a.to_host_async().await;
            (h, now() - t0)
        });
        for ((st, m, _), (h, end)) in running.iter().zip(join_all(reads).await) {
            let h: HostArray = h?;
            acts[*m] = Array::from_host_array(h)?;
            bars.push(
                Obj::new()
                    .int("stage", *st)
                    .int("device", st % n)
                    .int("micro", *m)
                    .num("t0", tick)
                    .num("t1", end)
                    .end(),
            );
        }
    }
    let piped_ms = now() - t0;

    // The schedule from the measured stage times: a stage starts when its input is ready and its
    // device is free (stages sharing a device run one after the other).
    let mut end = vec![vec![0.0f64; micro]; STAGES];
    let mut free = vec![0.0f64; n];
    let mut predicted = Vec::new();
    for t in 0..micro + STAGES - 1 {
        for st in 0..STAGES {
            let Some(m) = t.checked_sub(st).filter(|&m| m < micro) else {
                continue;
            };
            let ready = if st == 0 { 0.0 } else { end[st - 1][m] };
            let start = ready.max(free[st % n]);
            end[st][m] = start + stage_ms[st];
            free[st % n] = end[st][m];
            predicted.push(bar(st as i64, &format!("m{m}"), start, end[st][m]));
        }
    }
    let makespan = end[STAGES - 1][micro - 1];
    let serial: f64 = stage_ms.iter().sum::<f64>() * micro as f64;

    // The reference: the whole model, whole batch, on the cpu device.
    let mut h = arr(xs.clone(), &[batch, width])?;
    for (w, b) in &params {
        h = jit(layer)
            .on(&s.cpu)
            .call(&[h, w.clone(), b.clone()])?
            .remove(0);
    }
    let want = host_of(std::slice::from_ref(&h), 0)?.to_f64();
    let mut got = Vec::with_capacity(batch * width);
    for a in &acts {
        got.extend(host(a).await?);
    }
    let err = rel_err(&got, &want);
    Ok(Obj::new()
        .int("devices", n)
        .int("stages", STAGES)
        .int("width", width)
        .int("batch", batch)
        .int("micro", micro)
        .raw(
            "stage_device",
            json_ints(&(0..STAGES).map(|st| st % n).collect::<Vec<_>>()),
        )
        .raw("stage_ms", json_nums(&stage_ms))
        .raw("measured", json_list(bars))
        .raw("predicted", json_list(predicted))
        .num("piped_ms", piped_ms)
        .num("predicted_ms", makespan)
        .num("serial_ms", serial)
        .num("err", err)
        .num("tol", TOL)
        .bool("ok", err <= TOL)
        .raw("work", work_json(&before))
        .end())
}

/// 专题 · 模型并行: four dense layers, layer s (and its parameters) on device s mod n, a batch in
/// `micro` microbatches through a GPipe-style pipeline (activations moving between devices
/// through the host). Each stage's measured time, the measured pipeline (one bar per stage and
/// microbatch) and the schedule those stage times predict; the output against the whole model on
/// the reference.
#[wasm_bindgen]
pub async fn model_parallel(
    width: usize,
    batch: usize,
    micro: usize,
) -> std::result::Result<String, JsValue> {
    to_js(model_parallel_inner(width, batch, micro).await)
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::super::json::field;
    use super::super::session::start_inner;
    use super::*;

    /// Every topic card on two cpu devices (the page's fallback): verified, with the real errors.
    #[test]
    fn cards_on_cpu_devices() {
        pollster::block_on(async {
            start_inner(2, "cpu:2").await.unwrap();
            let errs = debug_errors_inner().await.unwrap();
            assert_eq!(field(&errs, "ok"), "true", "{errs}");
            assert!(errs.contains("IndivisibleSplit"), "{errs}");
            assert!(errs.contains("TracedValue"), "{errs}");
            let prints = debug_prints_inner(3).await.unwrap();
            assert_eq!(field(&prints, "ok"), "true", "{prints}");
            assert!(prints.contains("i=1]"), "{prints}");
            let p = planner_inner(100_000, 32).await.unwrap();
            assert_eq!(field(&p, "ok"), "true", "{p}");
            let r = random_keys_inner(6, 3).await.unwrap();
            assert_eq!(field(&r, "ok"), "true", "{r}");
            let pl = placement_inner(3, 4).await.unwrap();
            assert_eq!(field(&pl, "ok"), "true", "{pl}");
            let m = model_parallel_inner(8, 8, 4).await.unwrap();
            assert_eq!(field(&m, "ok"), "true", "{m}");
            let bad = model_parallel_inner(8, 9, 4).await;
            assert!(matches!(bad, Err(Error::BadShapeArg { .. })), "{bad:?}");
        });
    }

    /// The same cards on two real adapters (Vulkan, as CI installs): real kernels, verified.
    #[test]
    fn cards_on_vulkan() {
        pollster::block_on(async {
            start_inner(2, "vulkan:2").await.unwrap();
            for (name, out) in [
                ("errors", debug_errors_inner().await),
                ("prints", debug_prints_inner(3).await),
                ("planner", planner_inner(100_000, 32).await),
                ("random", random_keys_inner(6, 3).await),
                ("placement", placement_inner(3, 4).await),
                ("model", model_parallel_inner(8, 8, 4).await),
            ] {
                let out = out.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(field(&out, "ok"), "true", "{name}: {out}");
            }
            // Drop the GPU session now, not in the thread-local destructors at thread exit.
            start_inner(1, "cpu:1").await.unwrap();
        });
    }
}
