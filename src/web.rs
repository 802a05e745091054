//! Browser exports for the demo page in `web/` (feature `web`, built for `wasm32-unknown-unknown`
//! with wasm-bindgen).
//!
//! Every export is an `async fn` that returns a JSON string (or rejects with an error's text): the
//! page awaits it, draws what it measured, and never blocks. The numbers come from brigade's real
//! kernels on the browser's WebGPU devices (one `requestAdapter` per logical device, `webgpu:N`),
//! or, without WebGPU, from `cpu:N` devices. Each demo checks its result against the CPU
//! reference interpreter (a `cpu` device in the same wasm) within [`TOL`].
//!
//! Timings are `performance.now()` around awaited work: upload, submission and read-back.
//! While a demo runs, the exports call the page's `brigadeEvent(kind, json)` (lane lit, lane done)
//! so that the page can show each device's work as it happens.
//!
//! The module is plain async Rust over brigade's public API: natively (with the `web` feature) the
//! same functions run on any layout, which the unit tests at the bottom use.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::rc::Rc;

use futures::future::join_all;
use wasm_bindgen::prelude::*;

use crate::device::{BackendKind, Dispatch, Runtime};
use crate::optim::{Adam, AdamState};
use crate::{
    Array, DType, Device, Error, HostArray, Jit, Parallel, Result, Tensor, Vmap,
    device_put_replicated, jit, pmap, pmean, shard_map, value_and_grad, vmap,
};

/// The tolerance of every check on the page: `max |device - reference| / max(1, max |reference|)`.
/// Results are f32 sums of at most a few thousand products, computed in a different order than
/// the reference (which accumulates in f64).
pub const TOL: f64 = 1e-4;

// ---- the page's side -----------------------------------------------------------------------------

#[cfg(target_arch = "wasm32")]
#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn perf_now() -> f64;
    #[wasm_bindgen(js_namespace = console, js_name = error)]
    fn console_error(msg: &str);
    // `catch`: a page without the hook (or one that throws) must not unwind through wasm.
    #[wasm_bindgen(catch, js_name = brigadeEvent)]
    fn brigade_event(kind: &str, detail: &str) -> std::result::Result<(), JsValue>;
}

/// Milliseconds on the page's clock (`performance.now()`); natively, since the first call.
fn now() -> f64 {
    #[cfg(target_arch = "wasm32")]
    {
        perf_now()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<std::time::Instant> = OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_secs_f64()
            * 1e3
    }
}

/// Tell the page something happened (a lane lit up, a device finished). Natively: nothing.
fn emit(kind: &str, detail: &str) {
    #[cfg(target_arch = "wasm32")]
    {
        let _ = brigade_event(kind, detail);
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (kind, detail);
    }
}

/// Route panics to the console and the page (once), instead of an opaque `unreachable` trap.
/// A small hook of our own: it is all `console_error_panic_hook` would do here.
fn install_panic_hook() {
    #[cfg(target_arch = "wasm32")]
    {
        use std::sync::Once;
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            std::panic::set_hook(Box::new(|info| {
                let msg = format!("brigade panicked: {info}");
                console_error(&msg);
                let _ = brigade_event("panic", &json_str(&msg));
            }));
        });
    }
}

// ---- JSON out -------------------------------------------------------------------------------------

/// `s` as a JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A number as JSON (`null` for NaN and infinities, which JSON lacks).
fn json_num(v: f64) -> String {
    if v.is_finite() {
        // Enough digits for timings and errors, short enough to read.
        let s = format!("{v:.6}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        if s.is_empty() || s == "-" || s == "-0" {
            "0".into()
        } else {
            s.to_string()
        }
    } else {
        "null".into()
    }
}

fn json_nums(v: &[f64]) -> String {
    let parts: Vec<String> = v.iter().map(|&x| json_num(x)).collect();
    format!("[{}]", parts.join(","))
}

fn json_ints(v: &[usize]) -> String {
    let parts: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", parts.join(","))
}

/// A JSON object built field by field.
struct Obj(String);

impl Obj {
    fn new() -> Obj {
        Obj(String::from("{"))
    }
    fn raw(mut self, key: &str, json: impl AsRef<str>) -> Obj {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        self.0.push_str(&json_str(key));
        self.0.push(':');
        self.0.push_str(json.as_ref());
        self
    }
    fn num(self, key: &str, v: f64) -> Obj {
        self.raw(key, json_num(v))
    }
    fn int(self, key: &str, v: usize) -> Obj {
        self.raw(key, v.to_string())
    }
    fn str(self, key: &str, v: &str) -> Obj {
        self.raw(key, json_str(v))
    }
    fn bool(self, key: &str, v: bool) -> Obj {
        self.raw(key, if v { "true" } else { "false" })
    }
    fn end(mut self) -> String {
        self.0.push('}');
        self.0
    }
}

fn json_list(items: impl IntoIterator<Item = String>) -> String {
    format!("[{}]", items.into_iter().collect::<Vec<_>>().join(","))
}

/// The work brigade did between two counter snapshots (dispatches > 0 means real kernels ran).
fn work_json(before: &crate::Counters) -> String {
    let w = crate::counters().since(before);
    Obj::new()
        .int("dispatches", w.dispatches as usize)
        .int("submits", w.submits as usize)
        .int("pipelines", w.pipelines_created as usize)
        .int("bytes_up", w.bytes_uploaded as usize)
        .int("bytes_down", w.bytes_downloaded as usize)
        .end()
}

/// The variant name of an error (`IndivisibleSplit`), for the page's machine-readable status.
fn error_kind(e: &Error) -> String {
    let dbg = format!("{e:?}");
    dbg.split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("Error")
        .to_string()
}

fn to_js(r: Result<String>) -> std::result::Result<String, JsValue> {
    r.map_err(|e| JsValue::from_str(&e.to_string()))
}

// ---- data and checks ------------------------------------------------------------------------------

/// The most elements one demo array may have (64 MiB of f32): the page's inputs are free text.
const MAX_ELEMENTS: usize = 1 << 24;

/// Refuse sizes the page cannot sensibly run (zero, or too large for the browser) with a typed
/// error instead of an overflow or an allocation failure.
fn check_size(op: &'static str, dims: &[usize]) -> Result<()> {
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
fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(12_345);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

fn arr(v: Vec<f32>, shape: &[usize]) -> Result<Array> {
    Array::from_vec(v, shape)
}

/// `max |got - want| / max(1, max |want|)`.
fn rel_err(got: &[f64], want: &[f64]) -> f64 {
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

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Read every shard of a sharded array at once; each resolves on its own, and the page is told
/// when (lane `device` of `mode` done, ms since `t0`). Returns the shards' data and those times.
async fn read_shards(mode: &str, x: &Array, t0: f64) -> Result<(Vec<HostArray>, Vec<f64>)> {
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

fn lanes_busy(mode: &str, n: usize) {
    for d in 0..n {
        emit(
            "lane",
            &Obj::new()
                .str("mode", mode)
                .int("device", d)
                .str("state", "busy")
                .end(),
        );
    }
}

/// The row blocks of a split result, joined in device order.
fn join_rows(parts: &[HostArray]) -> Vec<f64> {
    parts.iter().flat_map(|p| p.to_f64()).collect()
}

/// The first host result of a call on the cpu device (the reference interpreter).
fn host_of(outs: &[Array], i: usize) -> Result<HostArray> {
    outs.get(i)
        .and_then(|a| a.host().cloned())
        .ok_or_else(|| Error::Unsupported {
            op: "reference",
            detail: "gave no host result".into(),
        })
}

// ---- the session: devices and compiled programs -------------------------------------------------

type Body = Box<dyn Fn(&[Tensor]) -> Vec<Tensor>>;

/// The devices the page picked, the cpu device of the reference, and every program the demos
/// run, kept so that a second run reuses the compiled kernels.
struct Session {
    devices: Vec<Device>,
    cpu: Device,
    webgpu: bool,
    /// Why the page runs on cpu devices, when it does.
    fallback: String,
    // Basics: one dish per table.
    dish_split: Parallel<Body>,
    dish_vmap: Vmap<Body>,
    dish_ref: Jit<Body>,
    // Advanced.
    tables: Parallel<Body>,
    bcast: Parallel<Body>,
    bcast_all_mapped: Parallel<Body>,
    nested: Parallel<Body>,
    center: Parallel<Body>,
    // Stages of `center`, run one by one to time them.
    stage_a: Vec<Jit<Body>>,
    stage_b: Vec<Jit<Body>>,
    // Matmuls.
    mm_split: Parallel<Body>,
    mm_one: Jit<Body>,
    mm_ref: Jit<Body>,
    mm_dev: Vec<Jit<Body>>,
    train: RefCell<Option<Training>>,
}

thread_local! {
    static SESSION: RefCell<Option<Rc<Session>>> = const { RefCell::new(None) };
}

fn session() -> Result<Rc<Session>> {
    SESSION
        .with(|s| s.borrow().clone())
        .ok_or_else(|| Error::NoDevice("the page has not called start() yet".into()))
}

fn dish(a: &[Tensor]) -> Vec<Tensor> {
    // One table's order: its features through one layer (the "recipe" is the same for all).
    vec![(a[0].matmul(&a[1]) + &a[2]).tanh()]
}

fn body(f: fn(&[Tensor]) -> Vec<Tensor>) -> Body {
    Box::new(f)
}

impl Session {
    fn new(devices: Vec<Device>, cpu: Device, webgpu: bool, fallback: String) -> Session {
        let dev0 = devices[0].clone();
        let per_device = |f: fn(&[Tensor]) -> Vec<Tensor>, label: &str| -> Vec<Jit<Body>> {
            devices
                .iter()
                .map(|d| jit(body(f)).named(label).on(d))
                .collect()
        };
        Session {
            dish_split: shard_map(body(dish))
                .in_axes(&[Some(0), None, None])
                .devices(&devices)
                .named("dish (split)"),
            dish_vmap: vmap(body(dish))
                .in_axes(&[Some(0), None, None])
                .named("dish (vmap)")
                .on(&dev0),
            dish_ref: jit(body(dish)).named("dish (reference)").on(&cpu),
            tables: shard_map(body(|a| {
                let per_table = a[0].sum(1, false);
                let total = crate::psum(&per_table.sum_all(), "tables");
                vec![per_table, total]
            }))
            .axis_name("tables")
            .out_axes(&[Some(0), None])
            .devices(&devices)
            .named("tables"),
            bcast: pmap(body(|a| vec![a[0].matmul(&a[1]).relu()]))
                .in_axes(&[Some(0), None])
                .devices(&devices)
                .named("in_axes (Some(0), None)"),
            bcast_all_mapped: pmap(body(|a| vec![a[0].matmul(&a[1]).relu()]))
                .devices(&devices)
                .named("in_axes (Some(0), Some(0))"),
            nested: pmap(body(|a| {
                vmap(|e: &[Tensor]| vec![e[0].matmul(&e[1]).tanh()])
                    .in_axes(&[Some(0), None])
                    .apply(&[a[0].clone(), a[1].clone()])
            }))
            .in_axes(&[Some(0), None])
            .devices(&devices)
            .named("pmap(vmap(f))"),
            center: pmap(body(|a| {
                let h = a[0].matmul(&a[1]).tanh();
                let m = pmean(&h.mean(0, false), "i");
                vec![&h - &m]
            }))
            .axis_name("i")
            .in_axes(&[Some(0), None])
            .devices(&devices)
            .named("center"),
            stage_a: per_device(
                |a| {
                    let h = a[0].matmul(&a[1]).tanh();
                    vec![h.clone(), h.mean(0, false)]
                },
                "stage 1",
            ),
            stage_b: per_device(|a| vec![&a[0] - &a[1]], "stage 2"),
            mm_split: shard_map(body(|a| vec![a[0].matmul(&a[1])]))
                .in_axes(&[Some(0), None])
                .devices(&devices)
                .named("row-split matmul"),
            mm_one: jit(body(|a| vec![a[0].matmul(&a[1])]))
                .named("matmul")
                .on(&dev0),
            mm_ref: jit(body(|a| vec![a[0].matmul(&a[1])]))
                .named("matmul (reference)")
                .on(&cpu),
            mm_dev: per_device(|a| vec![a[0].matmul(&a[1])], "matmul block"),
            train: RefCell::new(None),
            devices,
            cpu,
            webgpu,
            fallback,
        }
    }

    fn n(&self) -> usize {
        self.devices.len()
    }

    fn describe(&self) -> String {
        let devs = self.devices.iter().map(|d| {
            let i = d.info();
            Obj::new()
                .int("index", i.index)
                .str("name", &i.adapter_name)
                .str("backend", &i.backend)
                .str("type", &i.device_type)
                .int(
                    "max_binding",
                    i.limits.max_storage_buffer_binding_size as usize,
                )
                .int(
                    "max_invocations",
                    i.limits.max_compute_invocations_per_workgroup as usize,
                )
                .end()
        });
        Obj::new()
            .bool("webgpu", self.webgpu)
            .str(
                "backend",
                self.devices
                    .first()
                    .map(|d| d.info().backend.as_str())
                    .unwrap_or("none"),
            )
            .int("count", self.n())
            .str("fallback", &self.fallback)
            .num("tol", TOL)
            .raw("devices", json_list(devs))
            .end()
    }
}

/// Build the session on `layout`; without a usable WebGPU adapter, on `cpu:N`.
async fn start_inner(n: usize, layout: &str) -> Result<String> {
    let n = n.clamp(1, 4);
    let cpu = Runtime::builder().layout_str("cpu:1").build().await?;
    let cpu = cpu.devices()[0].clone();
    let (devices, webgpu, fallback) = if layout.starts_with("cpu") {
        let rt = Runtime::builder().layout_str(layout).build().await?;
        (
            rt.devices().to_vec(),
            false,
            "cpu devices were asked for".to_string(),
        )
    } else {
        let tried = Runtime::builder()
            .layout_str(layout)
            .allow_cpu_fallback(false)
            .build()
            .await;
        match tried {
            Ok(rt) => {
                let web = rt.devices().iter().all(|d| d.info().backend == "webgpu");
                (rt.devices().to_vec(), web, String::new())
            }
            Err(e) => {
                let rt = Runtime::builder()
                    .layout_str(&format!("cpu:{n}"))
                    .build()
                    .await?;
                (rt.devices().to_vec(), false, e.to_string())
            }
        }
    };
    let s = Session::new(devices, cpu, webgpu, fallback);
    let out = s.describe();
    SESSION.with(|slot| *slot.borrow_mut() = Some(Rc::new(s)));
    Ok(out)
}

/// Open `n` (1–4) logical devices: one WebGPU adapter each (`webgpu:n`), or `cpu:n` when
/// `use_webgpu` is false or the browser has no WebGPU adapter (the reason is in `fallback`).
/// Returns the devices as JSON. Replaces the previous session.
#[wasm_bindgen]
pub async fn start(n: usize, use_webgpu: bool) -> std::result::Result<String, JsValue> {
    install_panic_hook();
    let layout = if use_webgpu {
        format!("webgpu:{}", n.clamp(1, 4))
    } else {
        format!("cpu:{}", n.clamp(1, 4))
    };
    to_js(start_inner(n, &layout).await)
}

/// The work counters of the page so far (JSON): dispatches, submits, pipelines, bytes moved.
#[wasm_bindgen]
pub fn counters_json() -> String {
    work_json(&crate::Counters::default())
}

// ---- 入门 Basics ------------------------------------------------------------------------------------

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

// ---- 进阶 Advanced ----------------------------------------------------------------------------------

async fn divisibility_inner(batch: usize, shards: usize) -> Result<String> {
    let s = session()?;
    let before = crate::counters();
    const COLS: usize = 8;
    check_size("divisibility", &[batch, COLS, shards])?;
    let x = arr(data(batch * COLS, 4), &[batch, COLS])?;
    let prog = shard_map(body(|a| {
        let per_table = a[0].sum(1, false);
        let total = crate::psum(&per_table.sum_all(), "tables");
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

fn graph_io(g: &crate::Graph) -> (Vec<String>, Vec<String>) {
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
    let before = crate::counters();
    let x = arr(data(n * rows * dim, 5), &[n, rows, dim])?;
    let w = arr(data(dim * out_dim, 6), &[dim, out_dim])?;
    let args = [x, w];
    // Without None, pmap would cut w too: the real message says what to do.
    let all_mapped = match s.bcast_all_mapped.call_async(&args).await {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
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
    let before = crate::counters();
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

/// One bar of a timeline: `who` (a device index, or the host as -1) did `stage` from `t0` to `t1`.
fn bar(who: i64, stage: &str, t0: f64, t1: f64) -> String {
    Obj::new()
        .raw("device", who.to_string())
        .str("stage", stage)
        .num("t0", t0)
        .num("t1", t1)
        .end()
}

async fn barrier_inner(rows: usize, dim: usize) -> Result<String> {
    let s = session()?;
    let n = s.n();
    check_size("barrier", &[n, rows, dim])?;
    check_size("barrier", &[dim, dim])?;
    let before = crate::counters();
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
    for round in 0..2 {
        // Round 0 compiles; round 1 is the one drawn.
        bars.clear();
        let t0 = now();
        let mut stage1 = Vec::with_capacity(n);
        for (d, dev) in s.devices.iter().enumerate() {
            let xd = blocks[d].to_device(dev)?;
            let wd = w.to_device(dev)?;
            stage1.push(s.stage_a[d].call(&[xd, wd])?);
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
        .raw("timeline", json_list(bars))
        .num("err", err)
        .num("err_staged", err_staged)
        .bool("ok", err <= TOL && err_staged <= TOL)
        .raw("work", work_json(&before))
        .end())
}

/// 进阶: `pmean` as a barrier. Runs `h = tanh(x W); y = h - pmean(mean(h))` as a pmap (timed,
/// checked), then the same two stages by hand on every device with each device's arrival at the
/// barrier, the host's read, average and write, and stage 2, timed (`timeline`, ms).
#[wasm_bindgen]
pub async fn barrier(rows: usize, dim: usize) -> std::result::Result<String, JsValue> {
    to_js(barrier_inner(rows, dim).await)
}

// ---- 实战 Hands-on: data-parallel training ---------------------------------------------------------

const DIGITS: &[u8] = include_bytes!("../data/digits.bin");
const HIDDEN: usize = 32;
/// Samples per step, divisible by 1, 2, 3 and 4 devices.
const BATCH: usize = 240;
const TRAIN: usize = 1440;

struct Training {
    step: Parallel<Body>,
    grad_ref: crate::Grad<Body>,
    predict: Jit<Body>,
    predict_ref: Jit<Body>,
    pixels: Vec<f32>,
    labels: Vec<i32>,
    /// params (4), Adam state (11), stacked over the devices.
    carried: Vec<Array>,
    steps: usize,
    losses: Vec<f64>,
}

fn digits() -> Result<(Vec<f32>, Vec<i32>)> {
    let bad = || Error::BadShapeArg {
        op: "digits.bin",
        shape: vec![DIGITS.len()],
        detail: "not a DIGITS01 file of the stated length".into(),
    };
    if DIGITS.len() < 12 || &DIGITS[..8] != b"DIGITS01" {
        return Err(bad());
    }
    let n = u32::from_le_bytes([DIGITS[8], DIGITS[9], DIGITS[10], DIGITS[11]]) as usize;
    if DIGITS.len() != 12 + n * 65 {
        return Err(bad());
    }
    Ok((
        DIGITS[12..12 + n * 64]
            .iter()
            .map(|&p| p as f32 / 16.0)
            .collect(),
        DIGITS[12 + n * 64..].iter().map(|&l| l as i32).collect(),
    ))
}

fn forward(p: &[Tensor], x: &Tensor) -> Tensor {
    let h = (x.matmul(&p[0]) + &p[1]).tanh();
    h.matmul(&p[2]) + &p[3]
}

fn loss(p: &[Tensor], x: &Tensor, y: &Tensor) -> Tensor {
    let logp = forward(p, x).log_softmax(-1);
    -(&logp * &y.one_hot(10).cast(DType::F32)).sum_all() / x.shape()[0] as f32
}

fn loss_fn(q: &[Tensor]) -> Vec<Tensor> {
    vec![loss(&q[..4], &q[4], &q[5])]
}

const LR: f32 = 0.02;

/// One data-parallel step: each device's gradient on its block, their pmean, the same Adam update
/// everywhere. Outputs: params (4), state (11), mean loss, local grads (4), averaged grads (4).
fn train_step_body(a: &[Tensor]) -> Vec<Tensor> {
    let (x, y) = (&a[15], &a[16]);
    let vg = value_and_grad(loss_fn).argnums(&[0, 1, 2, 3]).apply(&[
        a[0].clone(),
        a[1].clone(),
        a[2].clone(),
        a[3].clone(),
        x.clone(),
        y.clone(),
    ]);
    let local: Vec<Tensor> = vg[1..5].to_vec();
    let grads: Vec<Tensor> = local.iter().map(|g| pmean(g, "batch")).collect();
    let Some(state) = AdamState::from_slice(&a[4..15], 4) else {
        return vec![Tensor::failed(Error::Arity {
            what: "Adam state".into(),
            expected: 11,
            got: a.len().saturating_sub(6),
        })];
    };
    let (params, state) = Adam::new(LR).update(&a[..4], &grads, &state);
    let mut out = params;
    out.extend(state.to_vec());
    out.push(pmean(&vg[0], "batch"));
    out.extend(local);
    out.extend(grads);
    out
}

/// Host-made initial weights (scaled normal from a fixed LCG + Box-Muller): no device work needed.
fn init_params() -> Result<Vec<Tensor>> {
    let mut s: u64 = 0x2545_f491_4f6c_dd1d;
    let mut uniform = move || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut normal = |n: usize, scale: f64| -> Vec<f32> {
        (0..n)
            .map(|_| {
                let (u, v) = (uniform(), uniform());
                ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos() * scale) as f32
            })
            .collect()
    };
    Ok(vec![
        Tensor::from(arr(normal(64 * HIDDEN, 1.0 / 8.0), &[64, HIDDEN])?),
        Tensor::zeros(&[HIDDEN], DType::F32),
        Tensor::from(arr(
            normal(HIDDEN * 10, 1.0 / (HIDDEN as f64).sqrt()),
            &[HIDDEN, 10],
        )?),
        Tensor::zeros(&[10], DType::F32),
    ])
}

async fn train_init_inner() -> Result<String> {
    let s = session()?;
    let n = s.n();
    let (pixels, labels) = digits()?;
    let init = init_params()?;
    let state = Adam::new(LR).init(&init);
    let mut carried = Vec::new();
    for t in init.iter().chain(state.to_vec().iter()) {
        carried.push(device_put_replicated(&t.to_array()?, &s.devices)?);
    }
    let predict_body = || body(|a| vec![forward(&a[..4], &a[4]).argmax(-1, false)]);
    let t = Training {
        step: pmap(body(train_step_body))
            .axis_name("batch")
            .devices(&s.devices)
            .named("train step"),
        grad_ref: value_and_grad(body(loss_fn))
            .argnums(&[0, 1, 2, 3])
            .named("grad (reference)")
            .on(&s.cpu),
        predict: jit(predict_body()).named("predict").on(&s.devices[0]),
        predict_ref: jit(predict_body()).named("predict (reference)").on(&s.cpu),
        pixels,
        labels,
        carried,
        steps: 0,
        losses: Vec::new(),
    };
    let out = Obj::new()
        .int("devices", n)
        .int("batch", BATCH)
        .int("per_device", BATCH / n)
        .int("train", TRAIN)
        .int("test", t.labels.len() - TRAIN)
        .int("hidden", HIDDEN)
        .num("lr", LR as f64)
        .end();
    *s.train.borrow_mut() = Some(t);
    Ok(out)
}

/// 实战: set up data-parallel training of a 64→32→10 MLP on the shipped 8×8 digits: parameters
/// and Adam state replicated on every device. Returns the setup as JSON.
#[wasm_bindgen]
pub async fn train_init() -> std::result::Result<String, JsValue> {
    to_js(train_init_inner().await)
}

async fn train_step_inner() -> Result<String> {
    let s = session()?;
    let n = s.n();
    let before = crate::counters();
    // Taken out for the step (no RefCell borrow across awaits), put back after.
    let mut t = s
        .train
        .borrow_mut()
        .take()
        .ok_or_else(|| Error::NoDevice("call train_init() first".into()))?;
    let res = train_step_with(&mut t, n).await;
    *s.train.borrow_mut() = Some(t);
    let mut out = res?;
    out = out.raw("work", work_json(&before));
    Ok(out.end())
}

async fn train_step_with(t: &mut Training, n: usize) -> Result<Obj> {
    let per = BATCH / n;
    let first = (t.steps * BATCH) % TRAIN;
    let rows = first..first + BATCH;
    let xb = arr(
        t.pixels[rows.start * 64..rows.end * 64].to_vec(),
        &[n, per, 64],
    )?;
    let yb = Array::from_vec(t.labels[rows.clone()].to_vec(), &[n, per])?;
    let mut args = t.carried.clone();
    args.push(xb);
    args.push(yb);
    lanes_busy("train", n);
    let t0 = now();
    let out = t.step.call_async(&args).await?;
    // Read what the page shows: loss, every device's local gradients and the averaged ones.
    let reads: Vec<&Array> = out[15..24].iter().collect();
    let hosts = join_all(reads.iter().map(|a| a.to_host_async()))
        .await
        .into_iter()
        .collect::<Result<Vec<HostArray>>>()?;
    let ms = now() - t0;
    for d in 0..n {
        emit(
            "lane",
            &Obj::new()
                .str("mode", "train")
                .int("device", d)
                .str("state", "done")
                .num("ms", ms)
                .end(),
        );
    }
    let loss = hosts[0].to_f64()[0];
    // Each device's gradients (stacked: device d's are the d-th slice of every output).
    let local: Vec<Vec<f64>> = hosts[1..5].iter().map(|h| h.to_f64()).collect();
    let mean: Vec<Vec<f64>> = hosts[5..9].iter().map(|h| h.to_f64()).collect();
    let sizes = [64 * HIDDEN, HIDDEN, HIDDEN * 10, 10];
    let slice = |g: &[f64], k: usize, d: usize| g[d * sizes[k]..(d + 1) * sizes[k]].to_vec();
    // pmean check: the averaged gradient equals the mean of the local ones, on every device.
    let mut err_pmean = 0.0f64;
    for k in 0..4 {
        let host_mean: Vec<f64> = (0..sizes[k])
            .map(|i| (0..n).map(|d| local[k][d * sizes[k] + i]).sum::<f64>() / n as f64)
            .collect();
        for d in 0..n {
            err_pmean = err_pmean.max(rel_err(&slice(&mean[k], k, d), &host_mean));
        }
    }
    // Reference check: each device's local gradient against the CPU interpreter's gradient of the
    // loss on that device's block, at the parameters before the step.
    let params_before: Vec<HostArray> = {
        let mut v = Vec::with_capacity(4);
        for p in &t.carried[..4] {
            let shard0 = p
                .shards()
                .map(|s| s[0].clone())
                .unwrap_or_else(|| p.clone());
            v.push(shard0.to_host_async().await?);
        }
        v
    };
    let mut err_ref = 0.0f64;
    let mut ref_loss = 0.0f64;
    for d in 0..n {
        let r = first + d * per..first + (d + 1) * per;
        let mut ref_args: Vec<Array> = params_before
            .iter()
            .map(|h| Array::from_host_array(h.clone()))
            .collect::<Result<_>>()?;
        ref_args.push(arr(
            t.pixels[r.start * 64..r.end * 64].to_vec(),
            &[per, 64],
        )?);
        ref_args.push(Array::from_vec(t.labels[r].to_vec(), &[per])?);
        let g = t.grad_ref.call(&ref_args)?;
        ref_loss += host_of(&g, 0)?.to_f64()[0] / n as f64;
        for (k, l) in local.iter().enumerate() {
            err_ref = err_ref.max(rel_err(&slice(l, k, d), &host_of(&g, k + 1)?.to_f64()));
        }
    }
    err_ref = err_ref.max(rel_err(&[loss], &[ref_loss]));
    // Every device holds the same parameters after the step.
    let mut identical = true;
    for p in &out[..4] {
        let shards = p.shards().unwrap_or_default();
        let hs = join_all(shards.iter().map(|s| s.to_host_async()))
            .await
            .into_iter()
            .collect::<Result<Vec<HostArray>>>()?;
        identical &= hs.iter().all(|h| h.data == hs[0].data);
    }
    t.carried = out[..15].to_vec();
    t.steps += 1;
    t.losses.push(loss);
    // What the page draws: the output-bias gradient (10 numbers) per device and averaged, and
    // every device's gradient norm.
    let norms: Vec<f64> = (0..n)
        .map(|d| {
            (0..4)
                .map(|k| slice(&local[k], k, d).iter().map(|v| v * v).sum::<f64>())
                .sum::<f64>()
                .sqrt()
        })
        .collect();
    let b2_local = json_list((0..n).map(|d| json_nums(&slice(&local[3], 3, d))));
    Ok(Obj::new()
        .int("step", t.steps)
        .num("loss", loss)
        .num("ms", ms)
        .raw("grad_norms", json_nums(&norms))
        .raw("b2_grad_local", b2_local)
        .raw("b2_grad_mean", json_nums(&slice(&mean[3], 3, 0)))
        .num("err_pmean", err_pmean)
        .num("err_ref", err_ref)
        .bool("identical", identical)
        .bool("ok", err_pmean <= TOL && err_ref <= TOL && identical))
}

/// 实战: one training step on every device (see [`train_init`]): the loss, each device's gradient
/// norm and output-bias gradient, their pmean, and the checks (pmean = mean of the local
/// gradients; each local gradient = the reference's on that block; parameters identical).
#[wasm_bindgen]
pub async fn train_step() -> std::result::Result<String, JsValue> {
    to_js(train_step_inner().await)
}

async fn train_eval_inner() -> Result<String> {
    let s = session()?;
    let before = crate::counters();
    let t = s
        .train
        .borrow_mut()
        .take()
        .ok_or_else(|| Error::NoDevice("call train_init() first".into()))?;
    let res = async {
        let test = t.labels.len() - TRAIN;
        let mut args = Vec::with_capacity(5);
        for p in &t.carried[..4] {
            let shard0 = p
                .shards()
                .map(|s| s[0].clone())
                .unwrap_or_else(|| p.clone());
            args.push(Array::from_host_array(shard0.to_host_async().await?)?);
        }
        args.push(arr(t.pixels[TRAIN * 64..].to_vec(), &[test, 64])?);
        let t0 = now();
        let pred = t.predict.call(&args)?[0].to_host_async().await?.to_f64();
        let ms = now() - t0;
        let want = host_of(&t.predict_ref.call(&args)?, 0)?.to_f64();
        let correct = pred
            .iter()
            .zip(&t.labels[TRAIN..])
            .filter(|(p, l)| **p as i32 == **l)
            .count();
        let agree = pred.iter().zip(&want).filter(|(a, b)| a == b).count();
        let first = t.losses.first().copied().unwrap_or(f64::NAN);
        let last = t.losses.last().copied().unwrap_or(f64::NAN);
        // Ties between logits may round differently; allow one disagreement in 200.
        let ok = agree * 200 >= test * 199 && last < 0.5 * first;
        Ok::<String, Error>(
            Obj::new()
                .int("steps", t.steps)
                .int("test", test)
                .int("correct", correct)
                .num("accuracy", correct as f64 / test as f64)
                .int("agree_with_reference", agree)
                .num("first_loss", first)
                .num("last_loss", last)
                .num("ms", ms)
                .bool("ok", ok)
                .raw("work", work_json(&before))
                .end(),
        )
    }
    .await;
    *s.train.borrow_mut() = Some(t);
    res
}

/// 实战: held-out accuracy of device 0's parameters, its predictions against the reference's, and
/// whether the loss fell by half.
#[wasm_bindgen]
pub async fn train_eval() -> std::result::Result<String, JsValue> {
    to_js(train_eval_inner().await)
}

// ---- 实战 / 优化: matmul --------------------------------------------------------------------------

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

fn pick_rows(v: &[f64], n: usize, rows: &[usize]) -> Vec<f64> {
    rows.iter()
        .flat_map(|&r| v[r * n..(r + 1) * n].iter().copied())
        .collect()
}

async fn matmul_inner(n: usize) -> Result<String> {
    let s = session()?;
    let k = s.n();
    check_size("row_split_matmul", &[n, n])?;
    let before = crate::counters();
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
    let before = crate::counters();
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
    let rows = check_rows(n, k, 128);
    let want = reference_rows(&s, &a, &b, n, &rows)?;
    let err_one = rel_err(&pick_rows(&got_one, n, &rows), &want);
    let err_split = rel_err(&pick_rows(&got_split, n, &rows), &want);
    let err_between = rel_err(&got_split, &got_one);
    let (single_ms, split_ms) = (median(t1), median(tk));
    Ok(Obj::new()
        .int("n", n)
        .int("devices", k)
        .num("single_ms", single_ms)
        .num("split_ms", split_ms)
        .num("single_cold_ms", one_cold)
        .num("split_cold_ms", split_cold)
        .num("speedup", single_ms / split_ms)
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
        .bool(
            "ok",
            err_one <= TOL && err_split <= TOL && err_between <= TOL,
        )
        .raw("work", work_json(&before))
        .end())
}

/// 优化: one point of the sweep: `n × n` matmul on device 0 against row-split over every device,
/// cold and warm (median of `reps`), each call timed from upload to read-back; both results checked
/// against the reference (all rows up to n = 128, else a sample) and against each other.
#[wasm_bindgen]
pub async fn sweep_point(n: usize, reps: usize) -> std::result::Result<String, JsValue> {
    to_js(sweep_inner(n, reps).await)
}

async fn timeline_inner(n: usize) -> Result<String> {
    let s = session()?;
    let k = s.n();
    check_size("timeline", &[n, n])?;
    let before = crate::counters();
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

// ---- bench: brigade's speed in this browser (issue #11) -----------------------------------------

/// The most timed runs one `bench` call may make.
const MAX_BENCH_REPS: usize = 1000;

/// What `bench` times: `C = A @ B` (n × n f32), or the fused chain `tanh(exp(x*1.5+2))*y` over
/// `n` f32 elements (one kernel on a GPU device).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BenchKind {
    Matmul,
    Fused,
}

impl BenchKind {
    fn parse(s: &str) -> Result<BenchKind> {
        match s {
            "matmul" => Ok(BenchKind::Matmul),
            "fused" => Ok(BenchKind::Fused),
            _ => Err(Error::Unsupported {
                op: "bench",
                detail: format!("unknown benchmark {s:?}: use \"matmul\" or \"fused\""),
            }),
        }
    }
    fn name(self) -> &'static str {
        match self {
            BenchKind::Matmul => "matmul",
            BenchKind::Fused => "fused",
        }
    }
    /// Input shapes and the work one call does: floating-point operations (for the chain: mul,
    /// add, exp, tanh, mul, one each per element) and the bytes it must move at least (every
    /// input read once, the output written once).
    fn shape_work(self, n: usize) -> (Vec<usize>, f64, f64) {
        let nf = n as f64;
        match self {
            BenchKind::Matmul => (vec![n, n], 2.0 * nf * nf * nf, 12.0 * nf * nf),
            BenchKind::Fused => (vec![n], 5.0 * nf, 12.0 * nf),
        }
    }
}

fn bench_matmul(a: &[Tensor]) -> Vec<Tensor> {
    vec![a[0].matmul(&a[1])]
}

fn bench_fused(a: &[Tensor]) -> Vec<Tensor> {
    vec![(&a[0] * 1.5 + 2.0).exp().tanh() * &a[1]]
}

/// One device of `bench` and its two programs, kept across calls so that only a shape's first
/// call compiles (and is excluded from the timing by the warm-up).
struct BenchDevice {
    device: Device,
    matmul: Jit<Body>,
    fused: Jit<Body>,
}

thread_local! {
    /// Per device name (`webgpu`, `cpu`, natively `vulkan`…): its own device, apart from the
    /// page's session, so that a benchmark neither needs `start()` nor disturbs its devices.
    static BENCH: RefCell<Vec<(String, Rc<BenchDevice>)>> = const { RefCell::new(Vec::new()) };
}

async fn bench_device(name: &str) -> Result<Rc<BenchDevice>> {
    let kind = BackendKind::parse(name).ok_or_else(|| Error::BadDeviceSpec {
        spec: name.to_string(),
        detail: "bench runs on one device: give a backend name, e.g. \"webgpu\" or \"cpu\"".into(),
    })?;
    let key = kind.name().to_string();
    if let Some(d) = BENCH.with(|b| {
        b.borrow()
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, d)| d.clone())
    }) {
        return Ok(d);
    }
    // No silent cpu fallback: a benchmark of "webgpu" that ran elsewhere would mislead.
    let rt = Runtime::builder()
        .layout_str(&format!("{key}:1"))
        .allow_cpu_fallback(false)
        .build()
        .await?;
    let device = rt.devices()[0].clone();
    let d = Rc::new(BenchDevice {
        matmul: jit(body(bench_matmul)).named("bench matmul").on(&device),
        fused: jit(body(bench_fused)).named("bench fused").on(&device),
        device,
    });
    BENCH.with(|b| b.borrow_mut().push((key, d.clone())));
    Ok(d)
}

/// Indices the untimed check compares with the reference interpreter: for the matmul, up to four
/// rows (first, two inner, last); for the chain, the first and last 512 elements and 1024 spread
/// over the rest.
fn bench_sample(kind: BenchKind, n: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = match kind {
        BenchKind::Matmul => vec![0, n / 3, (2 * n) / 3, n - 1],
        BenchKind::Fused => (0..n.min(512))
            .chain(n.saturating_sub(512)..n)
            .chain((0..1024).map(|i| i * (n / 1024).max(1) % n))
            .collect(),
    };
    idx.sort_unstable();
    idx.dedup();
    idx
}

async fn bench_inner(
    kind: &str,
    n: usize,
    device: &str,
    warmup: usize,
    reps: usize,
) -> Result<String> {
    let kind = BenchKind::parse(kind)?;
    let (shape, flops, bytes) = kind.shape_work(n);
    check_size("bench", &shape)?;
    if reps == 0 || reps > MAX_BENCH_REPS || warmup > MAX_BENCH_REPS {
        return Err(Error::Unsupported {
            op: "bench",
            detail: format!(
                "reps must be 1 to {MAX_BENCH_REPS} and warmup at most {MAX_BENCH_REPS} (got reps {reps}, warmup {warmup})"
            ),
        });
    }
    let bd = bench_device(device).await?;
    let dev = &bd.device;
    let prog = match kind {
        BenchKind::Matmul => &bd.matmul,
        BenchKind::Fused => &bd.fused,
    };
    let size: usize = shape.iter().product();
    let host_in = [data(size, 21), data(size, 22)];
    // Inputs live on the device before the clock starts, as a program's weights would.
    let args = [
        arr(host_in[0].clone(), &shape)?.to_device(dev)?,
        arr(host_in[1].clone(), &shape)?.to_device(dev)?,
    ];
    dev.idle().await?;
    let before = crate::counters();
    // Each timed region: the call (submission) and the device's wait for it; nothing else.
    let mut cold_ms = f64::NAN;
    let mut times = Vec::with_capacity(reps);
    let mut last = None;
    for i in 0..warmup + reps {
        let t0 = now();
        let out = prog.call(&args)?;
        dev.idle().await?;
        let t = now() - t0;
        if i == 0 {
            cold_ms = t;
        }
        if i >= warmup {
            times.push(t);
        }
        last = Some(out);
    }
    let work = work_json(&before);
    // Untimed: errors the device reported, then a sample of the result against the reference
    // interpreter run on the same program traced for the sampled inputs.
    dev.flush_errors().await?;
    let out = last
        .and_then(|o| o.into_iter().next())
        .ok_or_else(|| Error::Unsupported {
            op: "bench",
            detail: "the program returned no output".into(),
        })?;
    let got = out.to_host_async().await?.to_f64();
    let sample = bench_sample(kind, n);
    let (want, got_sample) = match kind {
        BenchKind::Matmul => {
            let rows = arr(
                sample
                    .iter()
                    .flat_map(|&r| host_in[0][r * n..(r + 1) * n].iter().copied())
                    .collect(),
                &[sample.len(), n],
            )?;
            let b = arr(host_in[1].clone(), &[n, n])?;
            let g = jit(body(bench_matmul)).graph(&[rows.clone(), b.clone()])?;
            let hosts = [host_of(&[rows], 0)?, host_of(&[b], 0)?];
            let want = crate::reference::eval_graph(&g, &hosts)?;
            (want[0].to_f64(), pick_rows(&got, n, &sample))
        }
        BenchKind::Fused => {
            let pick = |v: &[f32]| sample.iter().map(|&i| v[i]).collect::<Vec<f32>>();
            let xs = arr(pick(&host_in[0]), &[sample.len()])?;
            let ys = arr(pick(&host_in[1]), &[sample.len()])?;
            let g = jit(body(bench_fused)).graph(&[xs.clone(), ys.clone()])?;
            let hosts = [host_of(&[xs], 0)?, host_of(&[ys], 0)?];
            let want = crate::reference::eval_graph(&g, &hosts)?;
            (
                want[0].to_f64(),
                sample.iter().map(|&i| got[i]).collect::<Vec<f64>>(),
            )
        }
    };
    let err = rel_err(&got_sample, &want);
    let ms = median(times.clone());
    let best = times.iter().copied().fold(f64::INFINITY, f64::min);
    let info = dev.info();
    Ok(Obj::new()
        .str("kind", kind.name())
        .int("n", n)
        .str("device", &info.backend)
        .str("adapter", &info.adapter_name)
        .int("warmup", warmup)
        .int("reps", reps)
        .num("ms", ms)
        .num("ms_min", best)
        .num("cold_ms", cold_ms)
        .raw("times_ms", json_nums(&times))
        .num("flops", flops)
        .num("bytes", bytes)
        .num("gflops", flops / (ms * 1e6))
        .num("gbps", bytes / (ms * 1e6))
        .int("checked", want.len())
        // In full: f32 rounding errors are far below the six decimals of `num`.
        .raw(
            "err",
            if err.is_finite() {
                format!("{err:e}")
            } else {
                "null".into()
            },
        )
        .num("tol", TOL)
        .bool("ok", err <= TOL)
        .raw("work", work)
        .end())
}

/// Time brigade in this browser: `kind` `"matmul"` (`C = A @ B`, `n × n` f32) or `"fused"`
/// (`tanh(exp(x*1.5+2))*y` over `n` f32 elements, one fused kernel), on `device` `"webgpu"` (one
/// adapter of its own, no cpu fallback) or `"cpu"`. Inputs are put on the device first; then
/// `warmup` untimed calls (the first compiles) and `reps` timed ones, each timed from the call to
/// the device's wait for its work (`performance.now()`), with no check inside. Returns JSON: the
/// median `ms` (and `ms_min`, `cold_ms`, every `times_ms`), `gflops` and `gbps` from the median
/// (matmul: 2n³ flops; the chain: 5 per element; bytes: inputs read and output written once), and
/// an untimed check of the last result against the reference interpreter (`err`, `ok`: a sample
/// of rows or elements within [`TOL`]). Rejects bad sizes, names and counts with brigade's error.
#[wasm_bindgen]
pub async fn bench(
    kind: String,
    n: usize,
    device: String,
    warmup: usize,
    reps: usize,
) -> std::result::Result<String, JsValue> {
    install_panic_hook();
    to_js(bench_inner(&kind, n, &device, warmup, reps).await)
}

// ---- errors caught in the browser (the browser test's check) ------------------------------------

/// A shader naga accepts and browsers reject: an inf constant (a const-evaluated `bitcast<f32>`).
const INF_CONSTANT_WGSL: &str = "@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(1) fn main() { y[0] = bitcast<f32>(0x7f800000u); }";

/// A kernel that needs 32 bytes at binding 0 (`array<f32, 8>`): dispatching it with a 4-byte
/// buffer fails validation.
const FIXED8_WGSL: &str = "@group(0) @binding(0) var<storage, read_write> y: array<f32, 8>;
@compute @workgroup_size(1) fn main() { y[7] = 1.0; }";

const DOUBLE_WGSL: &str = "@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (i.x < arrayLength(&y)) { y[i.x] = 2.0 * y[i.x]; }
}";

/// `{"kind": "Compile", "message": …}` for an error, `{"kind": "none"}` for none.
fn outcome_json(r: &Result<()>) -> String {
    match r {
        Ok(()) => Obj::new().str("kind", "none").end(),
        Err(e) => {
            let msg = e.to_string();
            let short: String = msg.chars().take(400).collect();
            Obj::new()
                .str("kind", &error_kind(e))
                .str("message", &short)
                .end()
        }
    }
}

async fn error_capture_inner(layout: &str) -> Result<String> {
    let rt = Runtime::builder()
        .layout_str(layout)
        .allow_cpu_fallback(false)
        .build()
        .await?;
    let dev = rt.devices()[0].clone();
    let one = |k: &crate::device::Kernel, b: &crate::device::DeviceBuffer| {
        dev.submit_only(&[Dispatch {
            kernel: k,
            buffers: vec![b],
            workgroups: [1, 1, 1],
        }])
    };
    // 1. A shader the browser rejects: compiling and dispatching return at once; the read that
    //    follows reports the shader error.
    let shader: Result<()> = async {
        let k = dev.kernel("inf_constant", INF_CONSTANT_WGSL)?;
        let y = dev.alloc(4)?;
        one(&k, &y)?;
        dev.download(&y, DType::F32, 1).await.map(|_| ())
    }
    .await;
    // 2. The same shader again: it was dropped from the cache, so it fails again.
    let shader_again: Result<()> = async {
        dev.kernel("inf_constant", INF_CONSTANT_WGSL)?;
        dev.flush_errors().await
    }
    .await;
    // 3. A dispatch that fails validation (4 bytes bound where 32 are needed): the next await
    //    reports it.
    let validation: Result<()> = async {
        let k = dev.kernel("fixed8", FIXED8_WGSL)?;
        let small = dev.alloc(4)?;
        one(&k, &small)?;
        dev.flush_errors().await
    }
    .await;
    // 4. The same failing dispatch, then a parallel call on the device: its `call_async`
    //    returns the error before it returns.
    let parallel: Result<()> = async {
        let k = dev.kernel("fixed8", FIXED8_WGSL)?;
        let small = dev.alloc(4)?;
        one(&k, &small)?;
        let x = Array::from_vec(vec![1.0f32, 2.0, 3.0], &[1, 3])?;
        pmap(|a: &[Tensor]| vec![a[0].add(&a[0])])
            .devices(std::slice::from_ref(&dev))
            .call_async(&[x])
            .await
            .map(|_| ())
    }
    .await;
    // 5. Each error is reported once: the device computes right afterwards.
    let input = vec![1.0f32, -2.5, 0.0, 3.0];
    let after: Result<crate::HostData> = async {
        let x = dev.upload(&crate::HostData::F32(input.clone()))?;
        let k = dev.kernel("double", DOUBLE_WGSL)?;
        one(&k, &x)?;
        dev.download(&x, DType::F32, input.len()).await
    }
    .await;
    let want = crate::HostData::F32(input.iter().map(|v| 2.0 * v).collect());
    let after_ok = matches!(&after, Ok(d) if *d == want);
    Ok(Obj::new()
        .str("backend", &dev.info().backend)
        .raw("shader", outcome_json(&shader))
        .raw("shader_again", outcome_json(&shader_again))
        .raw("validation", outcome_json(&validation))
        .raw("call_async", outcome_json(&parallel))
        .bool("after_ok", after_ok)
        .str("after", &format!("{after:?}"))
        .end())
}

/// For the browser test: on a fresh WebGPU device, provoke a shader the browser rejects (naga
/// accepts it) and a dispatch that fails validation, through brigade's own kernel and dispatch
/// paths, and report (JSON) the typed errors the next awaits returned, and whether the device
/// still computes right afterwards.
#[wasm_bindgen]
pub async fn error_capture_check() -> std::result::Result<String, JsValue> {
    install_panic_hook();
    to_js(error_capture_inner("webgpu:1").await)
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    fn field<'a>(json: &'a str, key: &str) -> &'a str {
        let pat = format!("\"{key}\":");
        let at = json.find(&pat).unwrap_or_else(|| panic!("{key} in {json}"));
        let rest = &json[at + pat.len()..];
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        &rest[..end]
    }

    #[test]
    fn json_is_escaped() {
        assert_eq!(json_str("a\"b\\\n"), "\"a\\\"b\\\\\\n\"");
        assert_eq!(json_num(f64::NAN), "null");
        assert_eq!(json_num(1.5), "1.5");
        assert_eq!(json_num(2.0), "2");
        assert_eq!(
            Obj::new().int("a", 1).str("b", "x").end(),
            r#"{"a":1,"b":"x"}"#
        );
    }

    /// Every demo on two cpu devices (the page's fallback): results verified, the indivisible
    /// batch reported with brigade's message.
    #[test]
    fn demos_on_cpu_devices() {
        pollster::block_on(async {
            let d = start_inner(2, "cpu:2").await.unwrap();
            assert!(d.contains("\"count\":2"), "{d}");
            for (name, out) in [
                ("basics", basics_inner(48, 8, 1).await),
                ("divisible", divisibility_inner(10, 2).await),
                ("in_axes", in_axes_inner(3, 4, 5).await),
                ("nesting", nesting_inner(3, 4).await),
                ("barrier", barrier_inner(4, 8).await),
                ("matmul", matmul_inner(32).await),
                ("sweep", sweep_inner(16, 1).await),
                ("timeline", timeline_inner(16).await),
            ] {
                let out = out.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(field(&out, "ok"), "true", "{name}: {out}");
            }
            for bad in [basics_inner(0, 8, 1).await, matmul_inner(1 << 20).await] {
                assert!(matches!(bad, Err(Error::BadShapeArg { .. })), "{bad:?}");
            }
            let bad = divisibility_inner(1001, 2).await.unwrap();
            assert!(bad.contains("IndivisibleSplit"), "{bad}");
            assert!(bad.contains("cannot be split evenly"), "{bad}");
            train_init_inner().await.unwrap();
            for _ in 0..12 {
                let st = train_step_inner().await.unwrap();
                assert_eq!(field(&st, "ok"), "true", "{st}");
            }
            let ev = train_eval_inner().await.unwrap();
            assert_eq!(field(&ev, "ok"), "true", "{ev}");
        });
    }

    /// `bench` on the cpu device: the timing fields agree with each other, the check passes, and
    /// bad arguments come back as errors.
    #[test]
    fn bench_on_cpu() {
        pollster::block_on(async {
            for (kind, n, flops) in [
                ("matmul", 24, 2.0 * 24f64.powi(3)),
                ("fused", 3000, 15000.0),
            ] {
                let out = bench_inner(kind, n, "cpu", 1, 3).await.unwrap();
                assert_eq!(field(&out, "ok"), "true", "{out}");
                assert_eq!(field(&out, "device"), "\"cpu\"", "{out}");
                assert_eq!(field(&out, "reps"), "3", "{out}");
                let num = |k: &str| field(&out, k).parse::<f64>().unwrap();
                assert_eq!(num("flops"), flops, "{out}");
                assert!(num("ms") > 0.0 && num("ms_min") <= num("ms"), "{out}");
                let gflops = flops / (num("ms") * 1e6);
                assert!(
                    (num("gflops") - gflops).abs() <= 1e-3 * gflops + 1e-6,
                    "{out}"
                );
                let times = out.split("\"times_ms\":[").nth(1).unwrap();
                let times = &times[..times.find(']').unwrap()];
                assert_eq!(times.split(',').count(), 3, "{out}");
                assert!(
                    num("checked") >= if kind == "matmul" { 4.0 * 24.0 } else { 1000.0 },
                    "{out}"
                );
            }
            for (kind, n, dev, reps) in [
                ("matmul", 0, "cpu", 3),
                ("matmul", 1 << 13, "cpu", 3),
                ("conv", 8, "cpu", 3),
                ("fused", 8, "cpu:2", 3),
                ("fused", 8, "cpu", 0),
            ] {
                let bad = bench_inner(kind, n, dev, 0, reps).await;
                assert!(bad.is_err(), "{kind} {n} {dev} {reps}: {bad:?}");
            }
            assert!(matches!(
                bench_inner("matmul", 0, "cpu", 1, 1).await,
                Err(Error::BadShapeArg { .. })
            ));
        });
    }
}
