//! brigade benchmark harness: prints a table per device, every row beside in-run references.
//!
//! `cargo bench --bench bench` measures, on each GPU device:
//! - references: a hand-written `vec4` copy kernel run through brigade's raw kernel API
//!   (`Device::kernel` + `Device::run`, the adapter's achievable bandwidth, read + write) and a warm
//!   host memcpy;
//! - the first call of a fresh jitted function of a new shape (elementwise, sum, matmul), compile
//!   included, and its second call;
//! - matmul GFLOP/s at 256…4096; fused elementwise and sum GB/s as % of the copy kernel;
//!   upload and readback GB/s as % of the warm memcpy; the overhead of tiny calls; compiled loops;
//!   arrays stored in 4 parts (over `max_buffer_size`) beside the same arrays in one buffer;
//!
//! and on the `cpu` device (its own runtime when the layout has none) matmul, the fused elementwise
//! and the sum beside numpy measured in the same run (`python3`; "numpy: not available" without it).
//!
//! Under `cargo test` (no `--bench` argument) every row runs once at tiny sizes, results checked, as
//! a smoke test of the harness itself.
//!
//! Environment:
//! - `BRIGADE_DEVICES`: the devices (e.g. `vulkan:1`, `gl:1`);
//! - `BRIGADE_BENCH`: a comma list of row groups to run (default all): `compile`, `copy`, `memcpy`,
//!   `matmul`, `elementwise`, `sum`, `reduce`, `upload`, `readback`, `tiny`, `loop`, `parts`,
//!   `cpu`. A group that is shown as a % of a reference runs that reference too;
//! - `BRIGADE_BENCH_MATMUL`, `BRIGADE_BENCH_CPU_MATMUL`: matmul sizes (comma list);
//!   `BRIGADE_BENCH_ELEMS`, `BRIGADE_BENCH_CPU_ELEMS`: f32 elements of the elementwise, sum, copy and
//!   transfer rows; `BRIGADE_BENCH_REPS` (timed runs, median), `BRIGADE_BENCH_WARMUP` (untimed
//!   calls first), `BRIGADE_BENCH_BUDGET_S` (fewer timed runs where one call is slow);
//! - `BRIGADE_BENCH_OUT`: a file to append one tab-separated line per row to
//!   (`device, id, median ms, first-call ms, rate, unit, runs`), for scripts such as
//!   `scripts/bench_vs_burn.py`. Row ids are stable.
//!
//! The byte and FLOP accounting of the rows Burn's peer benchmark also has is the same as Burn's:
//! matmul `2n³` FLOP; the fused `tanh(exp(x*1.5+2))*y` 3 × 4 bytes per element; the sum 4 bytes per
//! element; transfers the array's bytes. Timings on shared machines vary: compare ratios measured in
//! one run.

mod common;

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Measured, data, mib};

use brigade::device::Dispatch;
use brigade::{
    Array, DType, Device, HostData, Jit, Result, Runtime, Tensor, fori_loop, jit, while_loop,
};

/// Row groups `BRIGADE_BENCH` may name.
const GROUPS: [&str; 13] = [
    "compile",
    "copy",
    "memcpy",
    "matmul",
    "elementwise",
    "sum",
    "reduce",
    "upload",
    "readback",
    "tiny",
    "loop",
    "parts",
    "cpu",
];

/// Failed result checks (printed where they happen; the run exits non-zero at the end).
static FAILED_CHECKS: AtomicUsize = AtomicUsize::new(0);

/// Sizes of one run. The cpu rows have their own table: today's cpu device is the reference
/// interpreter (slow), so its sizes stay smaller, and larger matmuls are skipped when the previous
/// size predicts a call over `CPU_SKIP_S` (unless the sizes were given explicitly).
struct Sizes {
    matmul: Vec<usize>,
    elems: usize,
    cpu_matmul: Vec<usize>,
    cpu_matmul_explicit: bool,
    cpu_elems: usize,
    compile_elems: usize,
    compile_matmul: usize,
    loop_iters: usize,
    loop_elems: usize,
    long_loop_iters: usize,
    parts_elems: usize,
}

/// Predicted seconds per call above which the cpu matmul skips the next size.
const CPU_SKIP_S: f64 = 10.0;

struct Config {
    sizes: Sizes,
    timing: Timing,
    /// `None`: every group.
    groups: Option<Vec<String>>,
    out: Option<std::fs::File>,
}

impl Config {
    fn wants(&self, group: &str) -> bool {
        self.groups
            .as_ref()
            .is_none_or(|g| g.iter().any(|x| x == group))
    }
    fn wants_any(&self, groups: &[&str]) -> bool {
        groups.iter().any(|g| self.wants(g))
    }
}

/// How a row is timed: `warmup` untimed calls, then the median of `reps` timed calls; fewer timed
/// calls (at least one) when the last warm-up call says they would take more than `budget`.
#[derive(Clone, Copy)]
struct Timing {
    warmup: usize,
    reps: usize,
    budget: Duration,
    /// Untimed calls go on until they have taken this long (GPUs: see `common::measure_warm`).
    warm_for: Duration,
}

impl Timing {
    fn measure(&self, f: impl FnMut() -> Result<()>) -> Result<Measured> {
        self.measure_n(self.warmup, self.reps, f)
    }

    fn measure_n(
        &self,
        warmup: usize,
        reps: usize,
        f: impl FnMut() -> Result<()>,
    ) -> Result<Measured> {
        common::measure_warm(warmup, self.warm_for, reps, Some(self.budget), f)
    }

    /// `measure`, also returning what the last call returned (for the result checks).
    fn measure_last<T>(&self, f: impl FnMut() -> Result<T>) -> Result<(Measured, T)> {
        self.measure_last_n(self.warmup, self.reps, f)
    }

    fn measure_last_n<T>(
        &self,
        warmup: usize,
        reps: usize,
        mut f: impl FnMut() -> Result<T>,
    ) -> Result<(Measured, T)> {
        let mut last = None;
        let m = self.measure_n(warmup, reps, || {
            last = Some(f()?);
            Ok(())
        })?;
        Ok((m, last.expect("measure calls f at least once")))
    }
}

/// What a row's rate is computed from.
#[derive(Clone, Copy)]
enum Rate {
    /// Bytes moved per call: GB/s (10^9 bytes).
    Bytes(f64),
    /// FLOPs per call: GFLOP/s.
    Flops(f64),
    /// No rate column: the time is the figure (per-call overheads).
    Time,
}

impl Rate {
    fn value(self, t: Duration) -> (f64, &'static str) {
        let s = t.as_secs_f64();
        match self {
            Rate::Bytes(b) => (b / s / 1e9, "GB/s"),
            Rate::Flops(f) => (f / s / 1e9, "GFLOP/s"),
            Rate::Time => (s * 1e6, "µs"),
        }
    }
}

fn fmt_time(t: Duration) -> String {
    let s = t.as_secs_f64();
    if s < 1e-3 {
        format!("{:.1} µs", s * 1e6)
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}

/// Prints one device's table and appends its rows to `BRIGADE_BENCH_OUT`.
struct Table<'c> {
    device: String,
    out: Option<&'c mut std::fs::File>,
}

impl<'c> Table<'c> {
    fn new(title: &str, device: String, out: Option<&'c mut std::fs::File>) -> Table<'c> {
        println!("\n## {title}");
        println!("| benchmark | size | time (median) | rate | beside the references |");
        println!("|---|---|---|---|---|");
        Table { device, out }
    }

    /// One row; returns the rate (GB/s, GFLOP/s or µs) for the callers that relate rows.
    fn row(
        &mut self,
        id: &str,
        what: &str,
        size: &str,
        m: &Measured,
        rate: Rate,
        note: Note,
    ) -> f64 {
        let (v, unit) = rate.value(m.median);
        let shown = match rate {
            Rate::Time => String::new(),
            _ => format!("{v:.2} {unit}"),
        };
        let note = match note {
            Note::Text(s) => s.to_string(),
            Note::Of(Some(r), of) if r > 0.0 => format!("{:.0} % of {of}", 100.0 * v / r),
            Note::Of(..) => String::new(),
            Note::Numpy(Err(_), _) => "numpy: not available".into(),
            Note::Numpy(Ok(_), None) => "numpy: no figure".into(),
            Note::Numpy(Ok(_), Some(secs)) => self.numpy(id, secs, rate, v),
        };
        println!(
            "| {what} | {size} | {} | {shown} | {note} |",
            fmt_time(m.median)
        );
        self.record(id, m, v, unit);
        v
    }

    /// numpy's figure beside a cpu row (`ours`: the row's rate), also recorded as a row of device
    /// `numpy`.
    fn numpy(&mut self, id: &str, secs: f64, rate: Rate, ours: f64) -> String {
        let d = Duration::from_secs_f64(secs);
        let (v, unit) = rate.value(d);
        let m = Measured {
            median: d,
            first: d,
            runs: 0,
        };
        let dev = std::mem::replace(&mut self.device, "numpy".into());
        self.record(id, &m, v, unit);
        self.device = dev;
        format!(
            "numpy {v:.2} {unit} ({}); brigade {:.2}× numpy",
            fmt_time(d),
            ours / v
        )
    }

    fn record(&mut self, id: &str, m: &Measured, v: f64, unit: &str) {
        if let Some(f) = self.out.as_deref_mut() {
            let line = format!(
                "{}\t{id}\t{:.6}\t{:.6}\t{v:.6}\t{unit}\t{}\n",
                self.device,
                m.median.as_secs_f64() * 1e3,
                m.first.as_secs_f64() * 1e3,
                m.runs
            );
            if let Err(e) = f.write_all(line.as_bytes()) {
                eprintln!("BRIGADE_BENCH_OUT: cannot write: {e}");
            }
        }
    }
}

/// The last column of a row.
#[derive(Clone, Copy)]
enum Note<'a> {
    Text(&'a str),
    /// The row's rate as a % of a reference rate of this run, named by the `str` (empty where the
    /// reference was not measured).
    Of(Option<f64>, &'a str),
    /// A cpu row beside numpy's time of the same work in seconds (`None`: numpy gave none), or
    /// why numpy could not run.
    Numpy(&'a std::result::Result<Numpy, String>, Option<f64>),
}

/// Records a failed result check: printed now, and the run exits non-zero at the end.
fn check(ok: bool, what: &str, detail: impl FnOnce() -> String) {
    if !ok {
        FAILED_CHECKS.fetch_add(1, Ordering::Relaxed);
        println!("CHECK FAILED: {what}: {}", detail());
    }
}

/// Deterministic data in [-1, 1) (the range of Burn's peer benchmark), never exactly zero.
fn signed(n: usize, seed: u32) -> Vec<f32> {
    data(n, seed)
        .into_iter()
        .map(|v| if v == 0.0 { 1e-3 } else { 2.0 * v })
        .collect()
}

fn vec_of(a: &Array) -> Result<Vec<f32>> {
    a.to_vec::<f32>()
}

/// The issue's fused expression, as brigade code and as the host reference.
fn fused(x: &Tensor, y: &Tensor) -> Tensor {
    (x * 1.5 + 2.0).exp().tanh() * y
}
fn fused_host(x: f32, y: f32) -> f32 {
    (x * 1.5 + 2.0).exp().tanh() * y
}

fn check_fused(label: &str, out: &[f32], x: &[f32], y: &[f32]) {
    let step = (out.len() / 97).max(1);
    let worst = (0..out.len())
        .step_by(step)
        .map(|i| (out[i] - fused_host(x[i], y[i])).abs())
        .fold(0.0f32, f32::max);
    // exp and tanh of the GPU's math library against the host's: a few ulps of values up to |y| <= 1.
    check(worst <= 1e-5, label, || {
        format!("max abs error {worst:.2e} > 1e-5")
    });
}

/// Whether `got` is `(x*1.5+2)*y` as the host rounds it, or as a compiler that contracts
/// `x*1.5+2` into one fma rounds it (WGSL allows it; NVIDIA's Vulkan driver does, lavapipe does
/// not, XLA does on GPUs). With t = 1.5x + 2 the two differ by at most the host's rounding of
/// 1.5x (ε/2 |1.5x y|), both roundings of the sum (ε |t y|) and both of the product (ε |t y|):
/// under 2.5 ε (|1.5x| + 2) |y|.
fn affine_close(got: f32, x: f32, y: f32) -> bool {
    let want = (x * 1.5 + 2.0) * y;
    let tol = 2.5 * f32::EPSILON * ((1.5 * x).abs() + 2.0) * y.abs();
    (got - want).abs() <= tol
}

/// Sum of `x` in f64 and of |x|, for a relative check of an f32 sum.
fn check_sum(label: &str, got: f32, x: &[f32]) {
    let want: f64 = x.iter().map(|&v| f64::from(v)).sum();
    let mag: f64 = x.iter().map(|&v| f64::from(v).abs()).sum();
    let err = (f64::from(got) - want).abs() / mag.max(1e-30);
    // f32 accumulation of n terms in a tree: error well under 1e-5 of sum|x| at these sizes.
    check(err <= 1e-5, label, || {
        format!("got {got}, f64 sum {want}, error {err:.2e} of sum|x|")
    });
}

/// A few entries of an `m×k · k×n` product against f64 dot products.
fn check_matmul(label: &str, c: &[f32], a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize)) {
    let probes = [
        (0, 0),
        (m - 1, n - 1),
        (m / 2, n / 3),
        (m / 3, n - 1),
        (m - 1, 0),
    ];
    let mut worst = 0.0f64;
    for &(i, j) in &probes {
        let (mut acc, mut mag) = (0.0f64, 0.0f64);
        for p in 0..k {
            let v = f64::from(a[i * k + p]) * f64::from(b[p * n + j]);
            acc += v;
            mag += v.abs();
        }
        worst = worst.max((f64::from(c[i * n + j]) - acc).abs() / mag.max(1e-30));
    }
    // Burn's peer check: |error| / sum |a·b| under 1e-4.
    check(worst <= 1e-4, label, || {
        format!("max error {worst:.2e} of sum|a*b| > 1e-4")
    });
}

/// WGSL of the reference copy: each invocation copies `per` `vec4<f32>`s, either consecutive
/// (`strided == false`) or one per grid of invocations (`strided == true`, every pass coalesced).
/// The grid is 2-D (`num_workgroups` gives its width) so no workgroup is idle.
fn copy_wgsl(per: u32, strided: bool) -> String {
    let index = if strided {
        "t + j * total"
    } else {
        "t * PER + j"
    }
    .replace("PER", &format!("{per}u"));
    format!(
        "@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {{
    let t = (wid.y * nwg.x + wid.x) * 256u + lid;
    let total = nwg.x * nwg.y * 256u;
    let n = arrayLength(&dst);
    for (var j = 0u; j < {per}u; j++) {{
        let i = {index};
        if (i < n) {{ dst[i] = src[i]; }}
    }}
}}"
    )
}

/// Workgroups for `invocations` at 256 per group: as wide as the device allows, then rows.
fn grid(dev: &Device, invocations: usize) -> [u32; 3] {
    let groups = invocations.div_ceil(256).max(1);
    let max = dev.limits().max_compute_workgroups_per_dimension as usize;
    let x = groups.min(max);
    [x as u32, groups.div_ceil(x) as u32, 1]
}

/// `host` as an array of `shape` on `dev`.
fn put(dev: &Device, host: Vec<f32>, shape: &[usize]) -> Result<Array> {
    Array::from_vec(host, shape)?.to_device(dev)
}

/// The size column of a row of `n` f32.
fn f32s(n: usize) -> String {
    format!("{n} f32")
}

/// Timed calls of `f` on `args`, each finished on `dev`; returns the last call's outputs too.
fn time_call<F: Fn(&[Tensor]) -> Vec<Tensor>>(
    cfg: &Config,
    dev: &Device,
    f: &Jit<F>,
    args: &[Array],
) -> Result<(Measured, Vec<Array>)> {
    cfg.timing.measure_last(|| {
        let out = f.call(args)?;
        dev.wait()?;
        Ok(out)
    })
}

/// The copy kernel references: each variant's read+write GB/s; returns the best.
fn bench_copy(dev: &Device, cfg: &Config, t: &mut Table) -> Result<f64> {
    let n = cfg.sizes.elems / 4 * 4;
    let src_host = data(n, 11);
    let src = dev.upload(&HostData::F32(src_host.clone()))?;
    let dst = dev.alloc(src.size())?;
    let mut best = 0.0f64;
    for (per, strided, name) in [
        (1, false, "1 vec4 / invocation"),
        (4, true, "4 vec4 / invocation, strided"),
        (4, false, "4 vec4 / invocation, consecutive"),
    ] {
        let k = dev.kernel("bench_copy_vec4", &copy_wgsl(per, strided))?;
        let wg = grid(dev, (n / 4).div_ceil(per as usize));
        let run = || {
            dev.run(&[Dispatch {
                kernel: &k,
                buffers: vec![&src, &dst],
                workgroups: wg,
            }])
        };
        let m = cfg.timing.measure(run)?;
        let got = pollster::block_on(dev.download(&dst, DType::F32, n))?;
        check(
            got == HostData::F32(src_host.clone()),
            "copy kernel",
            || format!("{name}: the copy differs from its source"),
        );
        let id = format!("copy_vec4_x{per}{}", if strided { "s" } else { "" });
        let what = format!("reference: vec4 copy kernel ({name})");
        let rate = Rate::Bytes((8 * n) as f64);
        let gbs = t.row(&id, &what, &f32s(n), &m, rate, Note::Text("read + write"));
        best = best.max(gbs);
    }
    Ok(best)
}

/// Warm host memcpy (into reused memory) and a copy into a fresh `Vec`; returns the warm GB/s.
fn bench_memcpy(cfg: &Config, t: &mut Table) -> Result<f64> {
    let m = cfg.sizes.elems;
    let (size, rate) = (mib(4 * m), Rate::Bytes((4 * m) as f64));
    let src: Vec<f32> = data(m, 7);
    let mut warm = vec![0.0f32; m];
    let r = cfg.timing.measure(|| {
        warm.copy_from_slice(&src);
        std::hint::black_box(&warm);
        Ok(())
    })?;
    let what = "reference: warm host memcpy (into reused memory)";
    let gbs = t.row("memcpy_warm", what, &size, &r, rate, Note::Text(""));
    let r = cfg.timing.measure(|| {
        std::hint::black_box(src.clone());
        Ok(())
    })?;
    let what = "host memcpy into a fresh Vec (clone)";
    t.row("memcpy_fresh", what, &size, &r, rate, Note::Text(""));
    Ok(gbs)
}

/// A per-process number, so the compile rows' shapes and constants are new to every cache
/// (in memory and on disk).
fn salt() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64 ^ d.as_secs());
    nanos ^ (u64::from(std::process::id()) << 20)
}

/// First and second call of a fresh jitted function of a new shape, with the pipelines created by
/// the first call (0 means every kernel came from a cache).
fn first_and_second(
    t: &mut Table,
    id: &str,
    what: &str,
    size: &str,
    mut call: impl FnMut() -> Result<Vec<Array>>,
) -> Result<Vec<Array>> {
    let before = brigade::counters();
    let t0 = Instant::now();
    let out = call()?;
    for o in &out {
        o.device().map_or(Ok(()), |d| d.wait())?;
    }
    let first = t0.elapsed();
    let compiled = brigade::counters().since(&before).pipelines_created;
    let t1 = Instant::now();
    let again = call()?;
    for o in &again {
        o.device().map_or(Ok(()), |d| d.wait())?;
    }
    let second = t1.elapsed();
    let m = Measured {
        median: second,
        first,
        runs: 1,
    };
    println!(
        "| first call, new shape: {what} | {size} | first {}, second {} | | {compiled} pipeline{} compiled by the first call |",
        fmt_time(first),
        fmt_time(second),
        if compiled == 1 { "" } else { "s" }
    );
    t.record(id, &m, first.as_secs_f64() * 1e3, "ms");
    Ok(out)
}

fn bench_compile(dev: &Device, cfg: &Config, t: &mut Table) -> Result<()> {
    let s = salt();
    // A constant in [1, 1.01) and lengths unique to this process.
    let c = 1.0 + (s % 9973) as f32 * 1e-6;
    let n = cfg.sizes.compile_elems + 4 * (s % 1024) as usize;
    let x = put(dev, signed(n, 21), &[n])?;
    let y = put(dev, signed(n, 22), &[n])?;
    let f = jit(move |a: &[Tensor]| vec![(&a[0] * c + 0.5).tanh() * &a[1]]).on(dev);
    let out = first_and_second(t, "compile_elementwise", "elementwise", &f32s(n), || {
        f.call(&[x.clone(), y.clone()])
    })?;
    let (xs, ys, o) = (vec_of(&x)?, vec_of(&y)?, vec_of(&out[0])?);
    let worst = (0..n)
        .step_by(n / 31 + 1)
        .map(|i| (o[i] - (xs[i] * c + 0.5).tanh() * ys[i]).abs())
        .fold(0.0f32, f32::max);
    check(worst <= 1e-5, "compile row: elementwise", || {
        format!("max abs error {worst:.2e}")
    });

    let n2 = cfg.sizes.compile_elems + 4 * ((s >> 10) % 1024) as usize + 8;
    let x2 = put(dev, signed(n2, 23), &[n2])?;
    let f = jit(move |a: &[Tensor]| vec![(&a[0] * c).sum_all()]).on(dev);
    let out = first_and_second(t, "compile_sum", "sum", &f32s(n2), || {
        f.call(std::slice::from_ref(&x2))
    })?;
    let scaled: Vec<f32> = vec_of(&x2)?.iter().map(|v| v * c).collect();
    check_sum("compile row: sum", vec_of(&out[0])?[0], &scaled);

    let base = cfg.sizes.compile_matmul;
    let (m, k, nn) = (
        base + 4 * (s % 32) as usize,
        base + 4 * ((s >> 5) % 32) as usize,
        base + 4 * ((s >> 10) % 32) as usize,
    );
    let (ah, bh) = (signed(m * k, 24), signed(k * nn, 25));
    let a = put(dev, ah.clone(), &[m, k])?;
    let b = put(dev, bh.clone(), &[k, nn])?;
    let f = jit(|x: &[Tensor]| vec![x[0].matmul(&x[1])]).on(dev);
    let size = format!("{m}×{k}×{nn}");
    let out = first_and_second(t, "compile_matmul", "matmul", &size, || {
        f.call(&[a.clone(), b.clone()])
    })?;
    let c = vec_of(&out[0])?;
    check_matmul("compile row: matmul", &c, &ah, &bh, (m, k, nn));
    Ok(())
}

/// Where the last timed call of a row spent its time: submitting (`call` returning) and waiting for
/// the device, and the buffers the pool had to create over all the row's calls (a reused output
/// buffer costs nothing; a created one costs an allocation, which a GPU's driver may clear).
struct CallSplit {
    submit: Duration,
    wait: Duration,
    created: u64,
    calls: usize,
    pool: brigade::device::PoolStats,
}

impl CallSplit {
    fn note(&self) -> String {
        format!(
            "last call: submit {}, wait {}; {} buffers created in {} calls; pool: {}",
            fmt_time(self.submit),
            fmt_time(self.wait),
            self.created,
            self.calls,
            self.pool
        )
    }
}

/// Whether `dev` computes on the CPU: the cpu device, or a software adapter (lavapipe, llvmpipe).
fn software(dev: &Device) -> bool {
    dev.is_cpu() || dev.info().device_type == "cpu"
}

/// An `n×n×n` f32 matmul on `dev` timed, its result checked; with its rate and where the last
/// call's time went.
fn time_matmul(
    dev: &Device,
    cfg: &Config,
    n: usize,
    label: &str,
) -> Result<(Measured, Rate, CallSplit)> {
    let (ah, bh) = (signed(n * n, 1), signed(n * n, 2));
    let args = [
        put(dev, ah.clone(), &[n, n])?,
        put(dev, bh.clone(), &[n, n])?,
    ];
    dev.wait()?;
    let f = jit(|x: &[Tensor]| vec![x[0].matmul(&x[1])]).on(dev);
    // 4096³ takes seconds a call on a software adapter: one warm-up, one timed call. A GPU gets
    // the row's usual count (one sample of a few ms is noise there).
    let (warmup, reps) = if n >= 4096 && software(dev) {
        (1, 1)
    } else {
        (cfg.timing.warmup, cfg.timing.reps)
    };
    let created0 = dev.pool_stats().created;
    let (mut submit, mut wait, mut calls) = (Duration::ZERO, Duration::ZERO, 0);
    let (m, out) = cfg.timing.measure_last_n(warmup, reps, || {
        let t0 = Instant::now();
        let out = f.call(&args)?;
        let t1 = Instant::now();
        dev.wait()?;
        (submit, wait, calls) = (t1 - t0, t1.elapsed(), calls + 1);
        Ok(out)
    })?;
    let split = CallSplit {
        submit,
        wait,
        created: dev.pool_stats().created - created0,
        calls,
        pool: dev.pool_stats(),
    };
    check_matmul(label, &vec_of(&out[0])?, &ah, &bh, (n, n, n));
    Ok((m, Rate::Flops(2.0 * (n as f64).powi(3)), split))
}

/// The issue's fused expression on `n` f32 on `dev` timed, its result checked; with its rate and
/// the two inputs.
fn time_fused(
    dev: &Device,
    cfg: &Config,
    n: usize,
    label: &str,
) -> Result<(Measured, Rate, [Array; 2])> {
    let (xh, yh) = (signed(n, 3), signed(n, 4));
    let args = [put(dev, xh.clone(), &[n])?, put(dev, yh.clone(), &[n])?];
    let f = jit(|a: &[Tensor]| vec![fused(&a[0], &a[1])]).on(dev);
    let (m, out) = time_call(cfg, dev, &f, &args)?;
    check_fused(label, &vec_of(&out[0])?, &xh, &yh);
    Ok((m, Rate::Bytes((12 * n) as f64), args))
}

/// The full sum of `n` f32 on `dev` timed, its result checked; with its rate, the input and the
/// jitted sum.
#[allow(clippy::type_complexity)]
fn time_sum(
    dev: &Device,
    cfg: &Config,
    n: usize,
    label: &str,
) -> Result<(Measured, Rate, Array, Jit<Prog>)> {
    let xh = signed(n, 3);
    let x = put(dev, xh.clone(), &[n])?;
    let f = jit((|a: &[Tensor]| vec![a[0].sum_all()]) as Prog).on(dev);
    let (m, out) = time_call(cfg, dev, &f, std::slice::from_ref(&x))?;
    check_sum(label, vec_of(&out[0])?[0], &xh);
    Ok((m, Rate::Bytes((4 * n) as f64), x, f))
}

/// A traced program as a plain function (so helpers can return the `Jit` they build).
type Prog = fn(&[Tensor]) -> Vec<Tensor>;

fn bench_matmul(dev: &Device, cfg: &Config, t: &mut Table) -> Result<()> {
    for &n in &cfg.sizes.matmul {
        let (m, rate, split) = time_matmul(dev, cfg, n, &format!("matmul {n}"))?;
        let note = format!("first call {}; {}", fmt_time(m.first), split.note());
        let size = format!("{n}×{n}×{n}");
        t.row(
            &format!("matmul_{n}"),
            "matmul f32",
            &size,
            &m,
            rate,
            Note::Text(&note),
        );
    }
    Ok(())
}

fn bench_elementwise(dev: &Device, cfg: &Config, t: &mut Table, copy: Option<f64>) -> Result<()> {
    let n = cfg.sizes.elems;
    let vs = Note::Of(copy, "the copy kernel");
    let (m, rate, [x, y]) = time_fused(dev, cfg, n, "fused elementwise")?;
    let what = "fused elementwise tanh(exp(x*1.5+2))*y (2 in, 1 out)";
    t.row("elementwise", what, &f32s(n), &m, rate, vs);
    // The same traffic with a body of plain arithmetic: what fusion costs beside the copy kernel
    // when the math is cheap (the row above is bound by exp and tanh on CPU adapters).
    let (xh, yh) = (vec_of(&x)?, vec_of(&y)?);
    let f = jit(|a: &[Tensor]| vec![(&a[0] * 1.5 + 2.0) * &a[1]]).on(dev);
    let (m, out) = time_call(cfg, dev, &f, &[x.clone(), y.clone()])?;
    let got = vec_of(&out[0])?;
    let want = |i: usize| (xh[i] * 1.5 + 2.0) * yh[i];
    let bad = (0..n).find(|&i| !affine_close(got[i], xh[i], yh[i]));
    check(bad.is_none(), "fused elementwise (x*1.5+2)*y", || {
        let i = bad.unwrap_or(0);
        format!(
            "element {i}: {} != {} (beyond one fma contraction)",
            got[i],
            want(i)
        )
    });
    let what = "fused elementwise (x*1.5+2)*y (2 in, 1 out)";
    t.row("elementwise_affine", what, &f32s(n), &m, rate, vs);
    // Six ops, three inputs: 4 × 4 bytes per element.
    let z = put(dev, data(n, 5), &[n])?;
    let f = jit(|a: &[Tensor]| vec![((&a[0] * &a[1] + &a[2]).tanh() * 0.5 + 0.5).maximum(&a[2])])
        .on(dev);
    let (m, _) = time_call(cfg, dev, &f, &[x, y, z])?;
    let (what, rate) = (
        "fused elementwise (6 ops, 3 in, 1 out)",
        Rate::Bytes((16 * n) as f64),
    );
    t.row("elementwise6", what, &f32s(n), &m, rate, vs);
    Ok(())
}

/// The full sum of 16 Mi f32 (Burn's row): 4 bytes per element, against the copy kernel's read
/// bandwidth (half of its read + write); and the same with the scalar read back.
fn bench_sum(dev: &Device, cfg: &Config, t: &mut Table, copy: Option<f64>) -> Result<()> {
    let n = cfg.sizes.elems;
    let read = Note::Of(copy.map(|c| c / 2.0), "the copy kernel's read bandwidth");
    let (m, rate, x, f) = time_sum(dev, cfg, n, "sum")?;
    t.row("sum", "full sum of x to a scalar", &f32s(n), &m, rate, read);
    let m = cfg.timing.measure(|| {
        let v = f.call(std::slice::from_ref(&x))?[0].to_vec::<f32>()?;
        std::hint::black_box(v);
        Ok(())
    })?;
    let what = "full sum of x + reading the scalar back";
    t.row("sum_scalar", what, &f32s(n), &m, rate, Note::Text(""));
    Ok(())
}

/// sum(x*y) to a scalar and row sums (brigade's earlier reduction rows).
fn bench_reduce(dev: &Device, cfg: &Config, t: &mut Table, copy: Option<f64>) -> Result<()> {
    let n = cfg.sizes.elems;
    let read = Note::Of(copy.map(|c| c / 2.0), "the copy kernel's read bandwidth");
    let x = put(dev, data(n, 3), &[n])?;
    let y = put(dev, data(n, 4), &[n])?;
    let f = jit(|a: &[Tensor]| vec![(&a[0] * &a[1]).sum_all()]).on(dev);
    let (m, _) = time_call(cfg, dev, &f, &[x, y])?;
    let (what, rate) = (
        "reduction sum(x*y) to a scalar",
        Rate::Bytes((8 * n) as f64),
    );
    t.row("sum_xy", what, &f32s(n), &m, rate, read);
    let rows = 1024.min(n);
    let xr = put(dev, data(n, 6), &[rows, n / rows])?;
    let f = jit(|a: &[Tensor]| vec![a[0].sum(-1, false)]).on(dev);
    let (m, _) = time_call(cfg, dev, &f, &[xr])?;
    let size = format!("{rows}×{} f32", n / rows);
    let rate = Rate::Bytes((4 * n) as f64);
    t.row("rowsum", "reduction row sums", &size, &m, rate, read);
    // Column sums (a bias gradient's sum over the batch): 1024 outputs, each over n / 1024 rows.
    let cols = 1024.min(n);
    let xh = data(n, 8);
    let xc = put(dev, xh.clone(), &[n / cols, cols])?;
    let f = jit(|a: &[Tensor]| vec![a[0].sum(0i64, false)]).on(dev);
    let (m, out) = time_call(cfg, dev, &f, &[xc])?;
    let got = vec_of(&out[0])?;
    for c in [0, cols / 3, cols - 1] {
        let (want, mag) = (0..n / cols).fold((0f64, 0f64), |(s, a), r| {
            let v = xh[r * cols + c] as f64;
            (s + v, a + v.abs())
        });
        let err = (got[c] as f64 - want).abs();
        check(err <= 1e-5 * mag + 1e-6, "column sums", || {
            format!("column {c}: {} vs {want} (sum of |x| {mag})", got[c])
        });
    }
    let size = format!("{}×{cols} f32", n / cols);
    t.row("colsum", "reduction column sums", &size, &m, rate, read);
    Ok(())
}

/// Upload: the host array to a device array, finished (a submit flushes queued writes, then a
/// wait), like Burn's `from_data` + `sync`.
fn bench_upload(dev: &Device, cfg: &Config, t: &mut Table, memcpy: Option<f64>) -> Result<()> {
    let m = cfg.sizes.elems;
    let host = Array::from_vec(data(m, 7), &[m])?;
    // A one-workgroup kernel on two tiny buffers: its submit flushes the staged writes without
    // taking the raw wgpu queue (which would make brigade poll for device loss more often).
    let k = dev.kernel("bench_flush", &copy_wgsl(1, false))?;
    let (s16, d16) = (dev.alloc(16)?, dev.alloc(16)?);
    let (r, a) = cfg.timing.measure_last(|| {
        let a = host.to_device(dev)?;
        dev.run(&[Dispatch {
            kernel: &k,
            buffers: vec![&s16, &d16],
            workgroups: [1, 1, 1],
        }])?;
        Ok(a)
    })?;
    check(a.to_vec::<f32>()? == data(m, 7), "upload", || {
        "the uploaded array reads back different".into()
    });
    let (what, rate) = (
        "upload (host array to device, finished)",
        Rate::Bytes((4 * m) as f64),
    );
    t.row(
        "upload",
        what,
        &mib(4 * m),
        &r,
        rate,
        Note::Of(memcpy, "the warm memcpy"),
    );
    Ok(())
}

fn bench_readback(dev: &Device, cfg: &Config, t: &mut Table, memcpy: Option<f64>) -> Result<()> {
    let m = cfg.sizes.elems;
    let (size, rate) = (mib(4 * m), Rate::Bytes((4 * m) as f64));
    let vs = Note::Of(memcpy, "the warm memcpy");
    let want = data(m, 8);
    let on_dev = put(dev, want.clone(), &[m])?;
    dev.wait()?;
    let (r, h) = cfg.timing.measure_last(|| on_dev.to_host())?;
    check(h.data == HostData::F32(want.clone()), "readback", || {
        "to_host differs from the uploaded data".into()
    });
    let what = "readback into a fresh array (to_host)";
    t.row("readback", what, &size, &r, rate, vs);
    // Into memory the caller keeps: no page faults on fresh memory.
    let mut into = vec![0.0f32; m];
    let r = cfg.timing.measure(|| on_dev.read_into(&mut into))?;
    check(into == want, "readback", || {
        "read_into differs from the uploaded data".into()
    });
    let what = "readback into a reused slice (read_into)";
    t.row("readback_into", what, &size, &r, rate, vs);
    // In place: the closure sees the mapped data (no copy on a device that maps reads) and,
    // like Burn's readback row, looks at one element; the whole view is checked once after.
    let r = cfg.timing.measure(|| {
        on_dev.read_with(|v: &[f32]| {
            std::hint::black_box(v[m / 3]);
        })
    })?;
    let same = on_dev.read_with(|v: &[f32]| v == want.as_slice())?;
    check(same, "readback", || {
        "read_with differs from the uploaded data".into()
    });
    let what = "readback viewed in place (read_with, one element used)";
    t.row("readback_view", what, &size, &r, rate, vs);
    Ok(())
}

/// Per-call overheads: a tiny jitted call (submit only, and with a readback), Burn's tiny op
/// (1024 f32 plus a scalar, then a wait) and an idle wait.
fn bench_tiny(dev: &Device, cfg: &Config, t: &mut Table) -> Result<()> {
    let per_call = Note::Text("per call");
    let tiny = put(dev, vec![1.0f32, 2.0, 3.0, 4.0], &[4])?;
    let f = jit(|a: &[Tensor]| vec![&a[0] * 2.0 + 1.0]).on(dev);
    let calls = 20 * cfg.timing.reps;
    let m = cfg.timing.measure_n(1, 3, || {
        for _ in 0..calls {
            drop(f.call(std::slice::from_ref(&tiny))?);
        }
        dev.wait()
    })?;
    let m = Measured {
        runs: m.runs * calls,
        ..m.per(calls)
    };
    let what = "tiny jitted call (submit only)";
    t.row("tiny_submit", what, "4 f32", &m, Rate::Time, per_call);
    let many = cfg.timing.reps.max(21);
    let m = cfg.timing.measure_n(cfg.timing.warmup, many, || {
        let v = f.call(std::slice::from_ref(&tiny))?[0].to_vec::<f32>()?;
        check(v == [3.0, 5.0, 7.0, 9.0], "tiny call", || {
            format!("got {v:?}")
        });
        Ok(())
    })?;
    let what = "tiny jitted call + readback";
    t.row("tiny_readback", what, "4 f32", &m, Rate::Time, per_call);
    let small = put(dev, signed(1024, 9), &[1024])?;
    let g = jit(|a: &[Tensor]| vec![&a[0] + 1.0]).on(dev);
    let m = cfg.timing.measure_n(cfg.timing.warmup + 3, many, || {
        drop(g.call(std::slice::from_ref(&small))?);
        dev.wait()
    })?;
    t.row(
        "tiny_sync",
        "tiny op x+1 + wait",
        "1024 f32",
        &m,
        Rate::Time,
        per_call,
    );
    let m = cfg
        .timing
        .measure_n(cfg.timing.warmup, many, || dev.wait())?;
    let what = "idle Device::wait (nothing queued)";
    t.row("idle_wait", what, "", &m, Rate::Time, Note::Text(""));
    Ok(())
}

/// A loop compiled into one program (fori_loop: the body's kernel per iteration, the carry
/// ping-ponging between two buffers, submitted in chunks) against the same steps as a host loop of
/// calls; and a long loop with the host memory (RSS) it takes.
fn bench_loop(dev: &Device, cfg: &Config, t: &mut Table) -> Result<()> {
    let s = &cfg.sizes;
    let iters = s.loop_iters;
    let size = f32s(s.loop_elems);
    let x = put(dev, data(s.loop_elems, 9), &[s.loop_elems])?;
    let step = |v: &Tensor| v * 0.999 + 0.001;
    let looped =
        jit(|a: &[Tensor]| fori_loop(0, iters as i32, |_, v| vec![step(&v[0])], a)).on(dev);
    let (t_loop, _) = time_call(cfg, dev, &looped, std::slice::from_ref(&x))?;
    let one = jit(|a: &[Tensor]| vec![step(&a[0])]).on(dev);
    let t_host = cfg.timing.measure(|| {
        let mut v = x.clone();
        for _ in 0..iters {
            v = one.call(std::slice::from_ref(&v))?.remove(0);
        }
        drop(v);
        dev.wait()
    })?;
    let note = format!(
        "per step; a host loop of calls: {} / step ({:.2}× the loop's time)",
        fmt_time(t_host.median / iters as u32),
        t_host.median.as_secs_f64() / t_loop.median.as_secs_f64()
    );
    let what = format!("fori_loop, {iters} steps (one program)");
    let m = t_loop.per(iters);
    t.row("loop_fori", &what, &size, &m, Rate::Time, Note::Text(&note));
    // The same steps as a while_loop: a counter in the carry, the predicate read back per step.
    let limit = iters as i32;
    let whiled = jit(|a: &[Tensor]| {
        let out = while_loop(
            |c: &[Tensor]| c[1].lt(&Tensor::scalar(limit)),
            |c: &[Tensor]| vec![step(&c[0]), &c[1] + &Tensor::scalar(1i32)],
            &[a[0].clone(), Tensor::scalar(0i32)],
        );
        vec![out[0].clone()]
    })
    .on(dev);
    let (t_while, _) = time_call(cfg, dev, &whiled, std::slice::from_ref(&x))?;
    let same = whiled.call(std::slice::from_ref(&x))?[0].to_vec::<f32>()?
        == looped.call(std::slice::from_ref(&x))?[0].to_vec::<f32>()?;
    check(same, "while_loop = fori_loop", String::new);
    let note = format!(
        "per step, predicate read back each step ({:.1}× the fori_loop's step)",
        t_while.median.as_secs_f64() / t_loop.median.as_secs_f64()
    );
    let what = format!("while_loop, {iters} steps");
    t.row(
        "loop_while",
        &what,
        &size,
        &t_while.per(iters),
        Rate::Time,
        Note::Text(&note),
    );
    let long = s.long_loop_iters;
    let looped = jit(|a: &[Tensor]| fori_loop(0, long as i32, |_, v| vec![step(&v[0])], a)).on(dev);
    drop(looped.call(std::slice::from_ref(&x))?);
    dev.wait()?;
    let rss0 = rss();
    let m = cfg.timing.measure_n(0, 1, || {
        drop(looped.call(std::slice::from_ref(&x))?);
        dev.wait()
    })?;
    let grown = (rss() as f64 - rss0 as f64) / (1u64 << 20) as f64;
    let note = format!("per step; RSS {grown:+.1} MiB over the calls");
    let what = format!("fori_loop, {long} steps");
    t.row(
        "loop_long",
        &what,
        &size,
        &m.per(long),
        Rate::Time,
        Note::Text(&note),
    );
    Ok(())
}

/// What storing an array in parts costs: the same work on arrays of `parts_elems` f32 stored in
/// one buffer and in 4 parts (a second and third runtime on `dev`'s backend; only their
/// `max_buffer` differs, both bind the same segments of a quarter of the array), row by row:
/// upload, the fused `(x*1.5+2)*y`, the full sum and a read into a reused slice.
fn bench_parts(dev: &Device, cfg: &Config, t: &mut Table) -> Result<()> {
    let n = cfg.sizes.parts_elems;
    let part = (n as u64).min(dev.limits().segment_bytes());
    let layout = format!("{}:1", dev.info().backend);
    let runtime = |parted: bool| {
        let b = Runtime::builder().layout_str(&layout).max_binding(part);
        pollster::block_on(if parted { b.max_buffer(part) } else { b }.build())
    };
    let (one, parted) = (runtime(false)?, runtime(true)?);
    let (xh, yh) = (signed(n, 3), signed(n, 4));
    let (size, bytes) = (mib(4 * n), (4 * n) as f64);
    let mut firsts = Vec::new();
    for (rt, label) in [(&one, "one buffer"), (&parted, "4 parts")] {
        let d = &rt.devices()[0];
        let host = [
            Array::from_vec(xh.clone(), &[n])?,
            Array::from_vec(yh.clone(), &[n])?,
        ];
        let (m, x) = cfg.timing.measure_last(|| {
            let x = host[0].to_device(d)?;
            d.wait()?;
            Ok(x)
        })?;
        let args = [x, host[1].to_device(d)?];
        let p = args[0].wgpu_buffer_parts()?.len() > 1;
        check(p == (label != "one buffer"), "parts", || {
            format!(
                "the {label} array is stored {}in parts",
                if p { "" } else { "not " }
            )
        });
        let note = format!("{label}, {} MiB segments", part >> 20);
        t.row(
            "parts_upload",
            &format!("upload ({label})"),
            &size,
            &m,
            Rate::Bytes(bytes),
            Note::Text(&note),
        );
        let f = jit(|a: &[Tensor]| vec![(&a[0] * 1.5 + 2.0) * &a[1]]).on(d);
        let (m, out) = time_call(cfg, d, &f, &args)?;
        let what = format!("fused (x*1.5+2)*y ({label})");
        t.row(
            "parts_elementwise",
            &what,
            &f32s(n),
            &m,
            Rate::Bytes(3.0 * bytes),
            Note::Text(&note),
        );
        let sum = jit(|a: &[Tensor]| vec![a[0].sum_all()]).on(d);
        let (ms, s) = time_call(cfg, d, &sum, &args[..1])?;
        let what = format!("full sum ({label})");
        t.row(
            "parts_sum",
            &what,
            &f32s(n),
            &ms,
            Rate::Bytes(bytes),
            Note::Text(&note),
        );
        let mut into = vec![0.0f32; n];
        let mr = cfg.timing.measure(|| out[0].read_into(&mut into))?;
        let what = format!("read_into ({label})");
        t.row(
            "parts_read",
            &what,
            &size,
            &mr,
            Rate::Bytes(bytes),
            Note::Text(&note),
        );
        firsts.push((into, vec_of(&s[0])?[0]));
    }
    for (label, (got, _)) in ["one buffer", "4 parts"].iter().zip(&firsts) {
        let bad = (0..got.len()).find(|&i| !affine_close(got[i], xh[i], yh[i]));
        check(bad.is_none(), "parts", || {
            let i = bad.unwrap_or(0);
            format!("(x*1.5+2)*y in {label}: element {i} is {}", got[i])
        });
    }
    check(firsts[0].1 == firsts[1].1, "parts", || {
        format!(
            "the sums differ: one buffer {} and parts {}",
            firsts[0].1, firsts[1].1
        )
    });
    check_sum("parts sum", firsts[1].1, &xh);
    Ok(())
}

fn bench_gpu(dev: &Device, cfg: &mut Config) -> Result<()> {
    // A real GPU's clocks follow its load: keep each row's warm-up calls going for a while
    // (BRIGADE_BENCH_WARM_S, default 0.3 s). Software adapters run at the CPU's clock: none.
    let warm = env_num("BRIGADE_BENCH_WARM_S").unwrap_or(if software(dev) { 0.0 } else { 0.3 });
    cfg.timing.warm_for = Duration::from_secs_f64(warm);
    let key = format!("{}:{}", dev.info().backend, dev.index());
    with_table(cfg, &dev.info().to_string(), key, |cfg, t| {
        // Compile rows first, while the device's kernel cache holds nothing of this run.
        if cfg.wants("compile") {
            bench_compile(dev, cfg, t)?;
        }
        let copy = if cfg.wants_any(&["copy", "elementwise", "sum", "reduce"]) {
            Some(bench_copy(dev, cfg, t)?)
        } else {
            None
        };
        let memcpy = if cfg.wants_any(&["memcpy", "upload", "readback"]) {
            Some(bench_memcpy(cfg, t)?)
        } else {
            None
        };
        if cfg.wants("matmul") {
            bench_matmul(dev, cfg, t)?;
        }
        if cfg.wants("elementwise") {
            bench_elementwise(dev, cfg, t, copy)?;
        }
        if cfg.wants("sum") {
            bench_sum(dev, cfg, t, copy)?;
        }
        if cfg.wants("reduce") {
            bench_reduce(dev, cfg, t, copy)?;
        }
        if cfg.wants("upload") {
            bench_upload(dev, cfg, t, memcpy)?;
        }
        if cfg.wants("readback") {
            bench_readback(dev, cfg, t, memcpy)?;
        }
        if cfg.wants("tiny") {
            bench_tiny(dev, cfg, t)?;
        }
        if cfg.wants("loop") {
            bench_loop(dev, cfg, t)?;
        }
        if cfg.wants("parts") {
            bench_parts(dev, cfg, t)?;
        }
        Ok(())
    })
}

/// Runs `body` on a new table of `device` titled `title` (its rows also appended to
/// `BRIGADE_BENCH_OUT`).
fn with_table(
    cfg: &mut Config,
    title: &str,
    device: String,
    body: impl FnOnce(&Config, &mut Table) -> Result<()>,
) -> Result<()> {
    let mut out = cfg.out.take();
    let mut t = Table::new(title, device, out.as_mut());
    let result = body(cfg, &mut t);
    drop(t);
    cfg.out = out;
    result
}

/// numpy's timings of the cpu rows (seconds, median), measured by `python3` in this run.
struct Numpy {
    version: String,
    matmul: Vec<(usize, f64)>,
    elementwise: Option<f64>,
    sum: Option<f64>,
}

/// The same work as the cpu rows, in numpy: `a @ b` (f32), `np.tanh(np.exp(x*1.5+2))*y` (the
/// plain expression, op by op), `x.sum()`. Medians of `reps` after `warmup` calls.
const NUMPY_SCRIPT: &str = r#"
import sys, time
try:
    import numpy as np
except Exception as e:
    print("unavailable", type(e).__name__)
    sys.exit(0)
reps, warmup, elems = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
sizes = [int(s) for s in sys.argv[4].split(",") if s]
def med(f):
    for _ in range(warmup):
        f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2]
rng = np.random.default_rng(1)
print("version", np.__version__)
for n in sizes:
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    print("matmul", n, med(lambda: a @ b))
x = rng.uniform(-1, 1, elems).astype(np.float32)
y = rng.uniform(-1, 1, elems).astype(np.float32)
print("elementwise", med(lambda: np.tanh(np.exp(x * 1.5 + 2)) * y))
print("sum", med(lambda: x.sum()))
"#;

/// numpy's figures, or why there are none.
fn numpy(cfg: &Config) -> std::result::Result<Numpy, String> {
    let s = &cfg.sizes;
    let sizes = s
        .cpu_matmul
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(NUMPY_SCRIPT)
        .arg(cfg.timing.reps.to_string())
        .arg(cfg.timing.warmup.max(1).to_string())
        .arg(s.cpu_elems.to_string())
        .arg(sizes)
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "python3 exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let mut np = Numpy {
        version: String::new(),
        matmul: Vec::new(),
        elementwise: None,
        sum: None,
    };
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["unavailable", why] => return Err(format!("numpy cannot be imported ({why})")),
            ["version", v] => np.version = (*v).to_string(),
            ["matmul", n, t] => {
                if let (Ok(n), Ok(t)) = (n.parse(), t.parse()) {
                    np.matmul.push((n, t));
                }
            }
            ["elementwise", t] => np.elementwise = t.parse().ok(),
            ["sum", t] => np.sum = t.parse().ok(),
            _ => {}
        }
    }
    Ok(np)
}

/// The cpu device: matmul, the fused elementwise and the sum, beside numpy in the same run.
fn bench_cpu(dev: &Device, cfg: &mut Config) -> Result<()> {
    let np = numpy(cfg);
    let title = match &np {
        Ok(n) => format!(
            "{} — beside numpy {} in the same run",
            dev.info(),
            n.version
        ),
        Err(why) => format!("{} — numpy: not available ({why})", dev.info()),
    };
    let figures = np.as_ref().ok();
    with_table(cfg, &title, format!("cpu:{}", dev.index()), |cfg, t| {
        let s = &cfg.sizes;
        // (size, seconds a call) of the last size measured: a call grows as n³.
        let mut measured: Option<(usize, f64)> = None;
        for &n in &s.cpu_matmul {
            let predicted = measured.map(|(m, secs)| secs * (n as f64 / m as f64).powi(3));
            if let Some(p) = predicted.filter(|&p| p > CPU_SKIP_S && !s.cpu_matmul_explicit) {
                println!(
                    "| cpu matmul f32 | {n}×{n}×{n} | skipped | | the previous size predicts {p:.0} s a call (set BRIGADE_BENCH_CPU_MATMUL to run it) |"
                );
                continue;
            }
            let (m, rate, _) = time_matmul(dev, cfg, n, &format!("cpu matmul {n}"))?;
            measured = Some((n, m.median.as_secs_f64()));
            let secs =
                figures.and_then(|p| p.matmul.iter().find(|(k, _)| *k == n).map(|&(_, t)| t));
            let (id, size) = (format!("matmul_{n}"), format!("{n}×{n}×{n}"));
            let note = Note::Numpy(&np, secs);
            t.row(&id, "cpu matmul f32", &size, &m, rate, note);
        }
        let n = s.cpu_elems;
        let (m, rate, _) = time_fused(dev, cfg, n, "cpu fused elementwise")?;
        let what = "cpu fused elementwise tanh(exp(x*1.5+2))*y";
        let note = Note::Numpy(&np, figures.and_then(|p| p.elementwise));
        t.row("elementwise", what, &f32s(n), &m, rate, note);
        let (m, rate, ..) = time_sum(dev, cfg, n, "cpu sum")?;
        let note = Note::Numpy(&np, figures.and_then(|p| p.sum));
        t.row("sum", "cpu full sum of x", &f32s(n), &m, rate, note);
        Ok(())
    })
}

/// Resident set size in bytes (`/proc/self/statm`; 0 where there is none).
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// A harness setting that cannot be used: printed, and the run stops (exit status 2).
fn bad_setting(name: &str, value: &str, want: &str) -> ! {
    eprintln!("{name}={value:?}: {want}");
    std::process::exit(2)
}

fn env_list(name: &str) -> Option<Vec<usize>> {
    let v = std::env::var(name).ok()?;
    let sizes: std::result::Result<Vec<usize>, _> = v
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse::<usize>())
        .collect();
    match sizes {
        Ok(s) if s.iter().all(|&n| n > 0) => Some(s),
        _ => bad_setting(name, &v, "want a comma list of positive integers"),
    }
}

fn env_num(name: &str) -> Option<f64> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Some(x),
        _ => bad_setting(name, &v, "want a non-negative number"),
    }
}

fn config(full: bool) -> Config {
    let mut sizes = if full {
        Sizes {
            matmul: vec![256, 512, 1024, 2048, 4096],
            elems: 1 << 24,
            cpu_matmul: vec![256, 512, 1024],
            cpu_matmul_explicit: false,
            cpu_elems: 1 << 22,
            compile_elems: 1 << 20,
            compile_matmul: 256,
            loop_iters: 1000,
            loop_elems: 1 << 10,
            long_loop_iters: 100_000,
            parts_elems: 1 << 27,
        }
    } else {
        Sizes {
            matmul: vec![64],
            elems: 1 << 12,
            cpu_matmul: vec![32],
            cpu_matmul_explicit: false,
            cpu_elems: 1 << 12,
            compile_elems: 1 << 10,
            compile_matmul: 32,
            loop_iters: 10,
            loop_elems: 64,
            long_loop_iters: 5000,
            parts_elems: 1 << 16,
        }
    };
    if let Some(m) = env_list("BRIGADE_BENCH_MATMUL") {
        sizes.matmul = m;
    }
    if let Some(m) = env_list("BRIGADE_BENCH_CPU_MATMUL") {
        sizes.cpu_matmul = m;
        sizes.cpu_matmul_explicit = true;
    }
    // Whole vec4s: the copy reference moves the same bytes as the rows it is compared with.
    let elems = |name: &str| {
        env_num(name).map(|v| {
            let n = v as usize;
            if n < 4 || !n.is_multiple_of(4) {
                bad_setting(name, &v.to_string(), "want a multiple of 4, at least 4");
            }
            n
        })
    };
    if let Some(n) = elems("BRIGADE_BENCH_ELEMS") {
        sizes.elems = n;
    }
    if let Some(n) = elems("BRIGADE_BENCH_CPU_ELEMS") {
        sizes.cpu_elems = n;
    }
    let timing = Timing {
        warmup: env_num("BRIGADE_BENCH_WARMUP").map_or(1, |v| (v as usize).max(1)),
        reps: env_num("BRIGADE_BENCH_REPS")
            .map_or(if full { 5 } else { 1 }, |v| (v as usize).max(1)),
        budget: Duration::from_secs_f64(env_num("BRIGADE_BENCH_BUDGET_S").unwrap_or(20.0)),
        warm_for: Duration::ZERO,
    };
    let groups = std::env::var("BRIGADE_BENCH").ok().map(|v| {
        let g: Vec<String> = v
            .split(',')
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty())
            .collect();
        if let Some(bad) = g.iter().find(|s| !GROUPS.contains(&s.as_str())) {
            bad_setting(
                "BRIGADE_BENCH",
                &v,
                &format!("unknown group `{bad}`; groups: {}", GROUPS.join(", ")),
            );
        }
        g
    });
    let out = std::env::var("BRIGADE_BENCH_OUT").ok().map(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .unwrap_or_else(|e| bad_setting("BRIGADE_BENCH_OUT", &p, &format!("cannot open: {e}")))
    });
    Config {
        sizes,
        timing,
        groups,
        out,
    }
}

fn main() -> Result<()> {
    // `RUST_LOG=brigade::device::tune=debug` prints the matmul search's per-candidate rates.
    let _ = env_logger::try_init();
    let full = std::env::args().any(|a| a == "--bench");
    let mut cfg = config(full);
    let rt = pollster::block_on(Runtime::new())?;
    let mut header = format!(
        "# brigade benchmarks ({}; median of {} timed runs after {} warm-up",
        if full {
            "full"
        } else {
            "smoke run; `cargo bench` for figures"
        },
        cfg.timing.reps,
        cfg.timing.warmup
    );
    if let Some(g) = &cfg.groups {
        let _ = write!(header, "; rows: {}", g.join(","));
    }
    println!("{header})");
    let mut cpu_done = false;
    for dev in rt.devices() {
        if dev.is_cpu() {
            if !cpu_done && cfg.wants("cpu") {
                bench_cpu(dev, &mut cfg)?;
                cpu_done = true;
            }
            continue;
        }
        // For finding out what buffer reuse costs a row (0: every dropped buffer is freed).
        if let Some(limit) = env_num("BRIGADE_BENCH_POOL_LIMIT") {
            dev.set_pool_limit(limit as u64);
        }
        bench_gpu(dev, &mut cfg)?;
    }
    if !cpu_done && cfg.wants("cpu") {
        // The layout has no cpu device: the cpu rows get one of their own.
        let cpu = pollster::block_on(Runtime::builder().layout_str("cpu:1").build())?;
        bench_cpu(&cpu.devices()[0], &mut cfg)?;
    }
    let failed = FAILED_CHECKS.load(Ordering::Relaxed);
    if failed > 0 {
        eprintln!("{failed} result check(s) failed (see CHECK FAILED above)");
        std::process::exit(1);
    }
    Ok(())
}
