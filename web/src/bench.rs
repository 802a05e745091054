//! bench: brigade's speed in this browser, on a device of its own apart from the
//! page's session.

use std::cell::RefCell;
use std::rc::Rc;

use wasm_bindgen::prelude::*;

use super::TOL;
use super::data::{arr, check_size, data, host_of, median, rel_err};
use super::json::{Obj, json_nums, to_js, work_json};
use super::matmul::pick_rows;
use super::page::{install_panic_hook, now};
use super::session::{Body, body};
use brigade::device::{BackendKind, Runtime};
use brigade::{Device, Error, Jit, Result, Tensor, jit};

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
    let before = brigade::counters();
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
            let want = brigade::reference::eval_graph(&g, &hosts)?;
            (want[0].to_f64(), pick_rows(&got, n, &sample))
        }
        BenchKind::Fused => {
            let pick = |v: &[f32]| sample.iter().map(|&i| v[i]).collect::<Vec<f32>>();
            let xs = arr(pick(&host_in[0]), &[sample.len()])?;
            let ys = arr(pick(&host_in[1]), &[sample.len()])?;
            let g = jit(body(bench_fused)).graph(&[xs.clone(), ys.clone()])?;
            let hosts = [host_of(&[xs], 0)?, host_of(&[ys], 0)?];
            let want = brigade::reference::eval_graph(&g, &hosts)?;
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

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::super::json::field;
    use super::*;

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
