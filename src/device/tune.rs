//! The measured choice of matmul kernel: per adapter and shape class, a short search on the device,
//! remembered in memory and on disk.
//!
//! When a program with a large enough matmul is lowered for a GPU device, [`DeviceChooser`] looks up
//! `(adapter, dtype, layout, shape class)`; on a miss it times the candidates of the kernel family
//! ([`MatmulProblem::candidates`]) on the device at that shape and keeps the fastest. The result is
//! cached in memory for the process and in the file [`MATMUL_CACHE_FILE`] of the brigade cache directory
//! (`crate::device::disk_cache`), so a second process on the same machine searches nothing.
//!
//! * The search runs every candidate's real kernel (same WGSL as the program will run, so the
//!   winner's pipeline is already compiled), dispatching only a prefix of its workgroups sized to
//!   take about [`SAMPLE`] of device time (or, where the whole first dimension of workgroups takes
//!   much less, as on a GPU, that many dispatches repeated in one submission), and keeps the best
//!   of two samples. Candidates go most
//!   promising first; after the first two, a budget ([`BUDGET`]) stops the search, so the first
//!   call of a new shape stays near half a second (compiles included) even where a full dispatch
//!   takes seconds.
//! * Small problems (fewer than [`MIN_MACS`] multiply-adds) take the heuristic: their whole run is
//!   shorter than a search, and their choice hardly matters.
//! * [`TUNE_ENV`] (`BRIGADE_MATMUL_TUNE=off`) turns the search off: the heuristic everywhere.
//! * The tiled members all compute every output as the same fma chain, so the choice never changes
//!   a value (tests check values, never which kernel ran).
//! * In the browser nothing can block for a measurement: it takes the texture member where the
//!   shape allows ([`TEXTURE_ENV`]), else [`MatmulProblem::browser_heuristic`] (the 4 x 4 tile,
//!   measured best of the buffer kernels on SwiftShader). Natively [`TEXTURE_ENV`] selects the
//!   texture member too (the tests use it). The cpu device has no kernels: it takes the heuristic.
//!
//! What is fastest is machine-specific on purpose: on lavapipe loads are per-lane scalar loops with
//! bounds checks and register pressure spills, a real GPU prefers other shapes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use super::gpu::{Device, lock};
use crate::ops::matmul::kernel::{MatmulChooser, MatmulConfig, MatmulProblem};

/// Environment variable: `off`, `0` or `false` disables the measured search (heuristic kernels);
/// `on`, `1` or `true` (or unset) keeps it; anything else fails `RuntimeBuilder::build`.
pub const TUNE_ENV: &str = "BRIGADE_MATMUL_TUNE";
/// Environment variable: whether f32 matmuls read their operands from textures
/// (`MatmulConfig::Texture`, `shaders/matmul_texture.wgsl`) where the shape allows (`nn`, `k` and
/// `n` multiples of 64, textures within the device's `max_texture_dimension_2d`). `on`, `1` or
/// `true`: yes, on every GPU device, without a search; `off`, `0` or `false`: never. Unset: in
/// the browser yes (on SwiftShader it measured ~1.5x brigade's buffer kernels, ~2x jax-js),
/// natively no (the measured search keeps to the buffer kernels: on lavapipe the texture member,
/// which also pays two copies a call, ran at 0.4-0.64x of them, docs/PERFORMANCE.md, "Why some things are the way they are").
/// Read when a program is compiled; any other value fails `RuntimeBuilder::build`.
pub const TEXTURE_ENV: &str = "BRIGADE_MATMUL_TEXTURE";
/// Environment variable: how widely reductions of few outputs are spread on a GPU device (see
/// `reduce_spread`): `gpu` (1024 workgroups of 256, the default on discrete, integrated and
/// virtual GPUs), `cpu` (64 workgroups, the default on CPU adapters and where the adapter does not
/// say what it is), or a number of invocations (at least 256). For measuring, and for running the
/// GPU's reduction kernels on a CPU adapter in tests. Read when a program is compiled; any other
/// value fails `RuntimeBuilder::build`.
pub const REDUCE_SPREAD_ENV: &str = "BRIGADE_REDUCE_SPREAD";
/// Bump when the kernel family or the measurement changes: older cached choices are ignored.
const TUNE_VERSION: u32 = 2;
/// Name of the cache file in the brigade cache directory.
pub const MATMUL_CACHE_FILE: &str = "matmul-choices-v1.txt";
/// Problems below this many multiply-adds (128³) are not searched.
const MIN_MACS: u64 = 128 * 128 * 128;
/// Device time aimed at per timed sample.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
const SAMPLE: Duration = Duration::from_millis(10);
/// Most dispatches in one timed sample (see `search`).
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
const MAX_REPS: usize = 256;
/// Wall time after which the search stops trying new candidates.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
const BUDGET: Duration = Duration::from_millis(500);

/// How often this process searched or found a choice (for tests and diagnostics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TuneStats {
    /// Measured searches run.
    pub searches: u64,
    /// Choices found in memory (searched or loaded earlier in this process).
    pub memory_hits: u64,
    /// Choices loaded from the disk cache.
    pub disk_hits: u64,
}

static SEARCHES: AtomicU64 = AtomicU64::new(0);
/// Candidates whose sample repeated the dispatch (tests).
#[cfg(test)]
static REPEATED_SAMPLES: AtomicU64 = AtomicU64::new(0);
static MEMORY_HITS: AtomicU64 = AtomicU64::new(0);
static DISK_HITS: AtomicU64 = AtomicU64::new(0);

/// The counts of this process so far.
pub fn tune_stats() -> TuneStats {
    TuneStats {
        searches: SEARCHES.load(Ordering::Relaxed),
        memory_hits: MEMORY_HITS.load(Ordering::Relaxed),
        disk_hits: DISK_HITS.load(Ordering::Relaxed),
    }
}

/// Where a choice came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Disk,
    Measured,
}

/// The process-wide choices: `(adapter key, class) -> member`, and whether the disk file was read.
struct Choices {
    loaded: bool,
    map: HashMap<(String, String), (MatmulConfig, Origin)>,
}

static CHOICES: LazyLock<Mutex<Choices>> = LazyLock::new(|| {
    Mutex::new(Choices {
        loaded: false,
        map: HashMap::new(),
    })
});

/// Whether [`TEXTURE_ENV`] asks for the texture member (else the platform's default).
fn textures_wanted() -> bool {
    super::env::read_or_warn(TEXTURE_ENV, super::env::parse_switch)
        .unwrap_or(cfg!(target_arch = "wasm32"))
}

/// The texture member when it is wanted ([`TEXTURE_ENV`]) and can run `p` on `dev`: a GPU
/// device whose `max_texture_dimension_2d` holds both operand textures.
fn texture_choice(dev: &Device, p: &MatmulProblem) -> Option<MatmulConfig> {
    let d = wgpu_device(dev)?;
    let fits = p.texture_ok() && p.texture_fits(d.limits().max_texture_dimension_2d);
    (fits && textures_wanted()).then_some(MatmulConfig::Texture)
}

/// Whether the search is on (not disabled by [`TUNE_ENV`]).
fn enabled() -> bool {
    super::env::read_or_warn(TUNE_ENV, super::env::parse_switch).unwrap_or(true)
}

/// The wgpu device, read in place: [`Device::wgpu`] would mark it handed out to the app, which
/// costs a loss poll before every later submit.
fn wgpu_device(dev: &Device) -> Option<&wgpu::Device> {
    dev.inner.gpu.as_ref().map(|g| &g.device)
}

/// Identifies the adapter and driver: a choice measured on one never applies to another.
fn adapter_key(dev: &Device) -> Option<String> {
    let d = wgpu_device(dev)?;
    let i = d.adapter_info();
    let raw = format!(
        "{}|{}|{:x}:{:x}|{}|{}",
        super::backend_name(i.backend),
        i.name,
        i.vendor,
        i.device,
        i.driver,
        i.driver_info
    );
    Some(clean(&raw))
}

/// Tabs and line breaks would break the file format.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn log2_ceil(x: usize) -> u32 {
    x.max(1).next_power_of_two().trailing_zeros()
}

/// Problems that share a choice: same dtype and layout, each of batch, m, k, n in the same
/// power-of-two bucket, and the same alignment of k (which decides the candidates).
fn shape_class(p: &MatmulProblem) -> String {
    let layout = p.layout().name();
    let k_align = if p.k.is_multiple_of(8) {
        8
    } else if p.k.is_multiple_of(4) {
        4
    } else {
        1
    };
    format!(
        "v{TUNE_VERSION} {} {layout} b{} m{} k{}a{k_align} n{}",
        p.elem,
        log2_ceil(p.batch),
        log2_ceil(p.m),
        log2_ceil(p.k),
        log2_ceil(p.n)
    )
}

/// The cache file's text: a header line, then `adapter \t class \t member \t GFLOP/s` lines.
fn encode(entries: &[(String, String, MatmulConfig, f64)]) -> String {
    let mut out = format!("brigade matmul choices v{TUNE_VERSION}\n");
    for (a, c, m, g) in entries {
        out.push_str(&format!("{a}\t{c}\t{}\t{g:.3}\n", m.name()));
    }
    out
}

/// The inverse of [`encode`]; lines that do not parse are skipped (a damaged file is a miss).
fn decode(text: &str) -> Vec<(String, String, MatmulConfig, f64)> {
    let mut lines = text.lines();
    if lines.next() != Some(&format!("brigade matmul choices v{TUNE_VERSION}")) {
        return Vec::new();
    }
    lines
        .filter_map(|l| {
            let mut f = l.split('\t');
            let (a, c, m, g) = (f.next()?, f.next()?, f.next()?, f.next()?);
            if f.next().is_some() {
                return None;
            }
            Some((
                a.to_string(),
                c.to_string(),
                MatmulConfig::parse(m)?,
                g.parse().ok()?,
            ))
        })
        .collect()
}

/// Add one entry to the disk file (read, merge, atomic write; best effort).
fn persist(adapter: &str, class: &str, cfg: MatmulConfig, gflops: f64) {
    let mut entries = super::disk_cache::read(MATMUL_CACHE_FILE)
        .and_then(|b| String::from_utf8(b).ok())
        .map(|t| decode(&t))
        .unwrap_or_default();
    entries.retain(|(a, c, _, _)| !(a == adapter && c == class));
    entries.push((adapter.to_string(), class.to_string(), cfg, gflops));
    super::disk_cache::write(MATMUL_CACHE_FILE, encode(&entries).as_bytes());
}

/// A [`MatmulChooser`] that measures on `dev` (see the module doc).
pub(crate) struct DeviceChooser<'a> {
    pub(crate) dev: &'a Device,
}

/// The subgroup member this device can run: it has `SUBGROUP` (requested when the adapter has it)
/// and one fixed subgroup size, which becomes the kernel's workgroup size.
fn device_subgroup(dev: &Device) -> Option<MatmulConfig> {
    let d = wgpu_device(dev)?;
    let info = d.adapter_info();
    let size = info.subgroup_min_size;
    let fits = size <= dev.limits().max_compute_invocations_per_workgroup
        && size <= dev.limits().max_compute_workgroup_size_x;
    if !(d.features().contains(wgpu::Features::SUBGROUP) && size == info.subgroup_max_size && fits)
    {
        return None;
    }
    Some(MatmulConfig::Subgroup {
        s: u8::try_from(size).ok()?,
    })
}

/// Whether `dev` is a GPU that can run the workgroup-memory member `cfg` (its 256 invocations and
/// its workgroup memory within the limits). Never on a CPU adapter: llvmpipe and lavapipe run a
/// workgroup's invocations as loops that every barrier splits, and the search's compile of a
/// candidate that cannot win costs them 0.1-0.3 s.
fn shared_runs_on(dev: &Device, cfg: MatmulConfig) -> bool {
    let Some(d) = wgpu_device(dev) else {
        return false;
    };
    let l = dev.limits();
    let wg = cfg.workgroup_size();
    matches!(cfg, MatmulConfig::Shared { .. })
        && d.adapter_info().device_type != wgpu::DeviceType::Cpu
        && wg <= l.max_compute_invocations_per_workgroup
        && wg <= l.max_compute_workgroup_size_x
        && cfg.workgroup_bytes() <= l.max_compute_workgroup_storage_size
}

/// The workgroup-memory members to time for `p` on `dev` (none on a CPU adapter): the 128-square
/// block, then the 64-square one (four times the workgroups, for shapes that fill a GPU
/// otherwise), each with k steps of 8 where k allows.
fn device_shared(dev: &Device, p: &MatmulProblem) -> Vec<MatmulConfig> {
    shared_members(p)
        .into_iter()
        .filter(|&c| shared_runs_on(dev, c))
        .collect()
}

/// The workgroup-memory members that can run `p`, whatever the device: 128-square block first,
/// k steps of 8 where k allows.
fn shared_members(p: &MatmulProblem) -> Vec<MatmulConfig> {
    let bk = if p.k.is_multiple_of(8) { 8 } else { 4 };
    [8, 4]
        .into_iter()
        .map(|tm| MatmulConfig::Shared { tm, bk })
        .filter(|c| c.supports(p))
        .collect()
}

/// The members to time for `p` on `dev`, most promising first (the budget may stop the search
/// early): the heuristic's, on a GPU the workgroup-memory members, the subgroup member where it
/// runs (2-2.7x the others on lavapipe), then the other tiled members.
fn device_candidates(dev: &Device, p: &MatmulProblem) -> Vec<MatmulConfig> {
    let mut out = p.candidates();
    if let Some(sg) = device_subgroup(dev).filter(|c| c.supports(p)) {
        out.insert(1.min(out.len()), sg);
    }
    for (i, c) in device_shared(dev, p).into_iter().enumerate() {
        out.insert((1 + i).min(out.len()), c);
    }
    out
}

impl MatmulChooser for DeviceChooser<'_> {
    /// GPUs (discrete, integrated, virtual) get the wider spread; CPU adapters, adapters that do
    /// not say what they are (the browser's) and the cpu device keep the figure measured on
    /// lavapipe.
    fn reduce_spread(&self) -> usize {
        use crate::ops::reduce::kernel::{CPU_SPREAD, GPU_SPREAD};
        let device_type = wgpu_device(self.dev).map(|d| d.adapter_info().device_type);
        if device_type.is_some() {
            use super::env::{Spread, parse_spread, read_or_warn};
            match read_or_warn(REDUCE_SPREAD_ENV, parse_spread) {
                Some(Spread::Gpu) => return GPU_SPREAD,
                Some(Spread::Cpu) => return CPU_SPREAD,
                Some(Spread::Invocations(n)) => return n,
                None => {}
            }
        }
        match device_type {
            Some(
                wgpu::DeviceType::DiscreteGpu
                | wgpu::DeviceType::IntegratedGpu
                | wgpu::DeviceType::VirtualGpu,
            ) => GPU_SPREAD,
            _ => CPU_SPREAD,
        }
    }

    fn choose(&self, p: &MatmulProblem, max_workgroups_per_dim: u32) -> MatmulConfig {
        // Asked for (or the browser's default): never measured, the texture member applies to a
        // narrow set of shapes where it is known to win.
        if let Some(tex) = texture_choice(self.dev, p) {
            return tex;
        }
        // In the browser nothing may block for a measurement: its own fixed choice (measured on
        // SwiftShader, see `browser_heuristic`).
        let fallback = if cfg!(target_arch = "wasm32") {
            p.browser_heuristic()
        } else {
            p.heuristic()
        };
        let candidates = device_candidates(self.dev, p);
        let subgroup = device_subgroup(self.dev).filter(|c| c.supports(p));
        if cfg!(target_arch = "wasm32")
            || candidates.len() < 2
            || p.macs() < MIN_MACS
            || self.dev.is_cpu()
            || !enabled()
        {
            return fallback;
        }
        let Some(adapter) = adapter_key(self.dev) else {
            return fallback;
        };
        let class = shape_class(p);
        let key = (adapter, class);
        {
            let mut ch = lock(&CHOICES);
            if !ch.loaded {
                ch.loaded = true;
                let text = super::disk_cache::read(MATMUL_CACHE_FILE)
                    .and_then(|b| String::from_utf8(b).ok());
                for (a, c, m, _) in text.map(|t| decode(&t)).unwrap_or_default() {
                    ch.map.entry((a, c)).or_insert((m, Origin::Disk));
                }
            }
            if let Some(&(cfg, origin)) = ch.map.get(&key) {
                let runnable = match cfg {
                    MatmulConfig::Subgroup { .. } => subgroup == Some(cfg),
                    MatmulConfig::Shared { .. } => shared_runs_on(self.dev, cfg),
                    _ => true,
                };
                if cfg.supports(p) && runnable {
                    let counter = match origin {
                        Origin::Disk => &DISK_HITS,
                        Origin::Measured => &MEMORY_HITS,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    return cfg;
                }
            }
        }
        SEARCHES.fetch_add(1, Ordering::Relaxed);
        let (cfg, gflops) = match search(self.dev, p, &candidates, max_workgroups_per_dim) {
            Ok(best) => best,
            Err(e) => {
                // Not cached on disk: a later process may measure successfully.
                log::debug!("brigade: matmul search on {} failed: {e}", self.dev.name());
                lock(&CHOICES).map.insert(key, (fallback, Origin::Measured));
                return fallback;
            }
        };
        persist(&key.0, &key.1, cfg, gflops);
        lock(&CHOICES).map.insert(key, (cfg, Origin::Measured));
        cfg
    }
}

/// Time `candidates` for `p` on `dev`; the fastest and its rate in GFLOP/s. The thread's work
/// counters are left as if only the winner had been compiled (its pipeline is reused).
#[cfg(not(target_arch = "wasm32"))]
fn search(
    dev: &Device,
    p: &MatmulProblem,
    candidates: &[MatmulConfig],
    max_workgroups_per_dim: u32,
) -> crate::Result<(MatmulConfig, f64)> {
    use crate::counters::{bump, counters};
    use crate::host::HostData;
    use std::time::Instant;

    let saved = counters();
    let start = Instant::now();
    let result = (|| {
        dev.wait()?;
        // Operands with ordinary values (denormals or NaN from a recycled buffer could run at a
        // different speed on a CPU adapter).
        let fill = |elems: u64| {
            let v: Vec<f32> = (0..elems.max(4))
                .map(|i| 0.25 + (i % 7) as f32 * 0.125)
                .collect();
            dev.upload(&HostData::F32(v))
        };
        let (b, m, k, n) = (p.batch as u64, p.m as u64, p.k as u64, p.n as u64);
        let a = fill(b * m * k)?;
        let bb = fill(b * k * n)?;
        let c = dev.alloc((b * m * n * 4).max(16))?;
        let mut best: Option<(MatmulConfig, f64, bool)> = None;
        // The first two candidates (the heuristic's and the most promising other) are always
        // timed; the budget only cuts the rest.
        let over = |measured: usize| measured >= 2 && start.elapsed() > BUDGET;
        for (measured, &cfg) in candidates.iter().enumerate() {
            if over(measured) {
                break;
            }
            let mk = crate::ops::matmul::kernel::kernel(p, cfg, max_workgroups_per_dim);
            let before = counters().pipelines_created;
            let kernel = dev.kernel(&mk.label, &mk.wgsl)?;
            let compiled = counters().pipelines_created > before;
            // A prefix of the linear workgroup index: x up to GRID_X runs tiles 0.. in order.
            let max_x = mk.workgroups[0].max(1);
            let macs_per_group = p.macs() as f64
                / mk.workgroups
                    .iter()
                    .map(|&w| w as f64)
                    .product::<f64>()
                    .max(1.0);
            // `reps` dispatches of the first `groups` workgroups in one submission, waited for.
            let run = |groups: u32, reps: usize| -> crate::Result<f64> {
                let t = Instant::now();
                let d = [super::Dispatch {
                    kernel: &kernel,
                    buffers: vec![&a, &bb, &c],
                    workgroups: [groups, 1, 1],
                }];
                dev.submit_commands(&d, &vec![super::Command::Dispatch(0); reps])?;
                dev.wait()?;
                Ok(t.elapsed().as_secs_f64())
            };
            // Warm-up (first-use costs), calibration on a small prefix, then two samples.
            let mut groups = max_x.min(8);
            run(groups, 1)?;
            let t0 = run(groups, 1)?;
            // Over budget (a slow compile, a busy machine): keep what was measured.
            if over(measured) {
                break;
            }
            let scale = SAMPLE.as_secs_f64() / t0.max(1e-6);
            groups = ((groups as f64 * scale) as u32).clamp(1, max_x);
            // Where the whole first dimension runs well within a sample (a GPU, whose submit and
            // wait would otherwise be most of what is timed), the sample repeats the dispatch.
            let mut reps = 1;
            if groups == max_x {
                let t1 = run(groups, 1)?;
                if t1 < SAMPLE.as_secs_f64() / 2.0 {
                    reps = ((SAMPLE.as_secs_f64() / t1.max(1e-6)).ceil() as usize).min(MAX_REPS);
                    #[cfg(test)]
                    REPEATED_SAMPLES.fetch_add(1, Ordering::Relaxed);
                }
            }
            let t = run(groups, reps)?.min(run(groups, reps)?);
            let gflops = 2.0 * macs_per_group * (groups as usize * reps) as f64 / t.max(1e-9) / 1e9;
            log::debug!(
                "brigade: matmul {} on {}: {gflops:.2} GFLOP/s ({groups} workgroups x {reps}, {:.2} ms)",
                mk.label,
                dev.name(),
                t * 1e3
            );
            if best.is_none_or(|(_, g, _)| gflops > g) {
                best = Some((cfg, gflops, compiled));
            }
        }
        best.ok_or_else(|| crate::Error::Unsupported {
            op: "matmul search",
            detail: "no candidate kernel".into(),
        })
    })();
    // Restore the thread's counters: the search is not the caller's work, except for the winner's
    // compile, which its own kernel request would otherwise have done.
    bump(|c| *c = saved);
    let (cfg, gflops, compiled) = result?;
    if compiled {
        bump(|c| c.pipelines_created += 1);
    }
    log::debug!(
        "brigade: matmul {p:?} on {}: chose {} ({gflops:.2} GFLOP/s) in {:.0} ms",
        dev.name(),
        cfg.name(),
        start.elapsed().as_secs_f64() * 1e3
    );
    Ok((cfg, gflops))
}

#[cfg(target_arch = "wasm32")]
fn search(
    _dev: &Device,
    p: &MatmulProblem,
    _candidates: &[MatmulConfig],
    _max_workgroups_per_dim: u32,
) -> crate::Result<(MatmulConfig, f64)> {
    Ok((p.browser_heuristic(), 0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_text_round_trips_and_rejects_damage() {
        let entries = vec![
            (
                "vulkan|llvmpipe (LLVM 15.0.6, 256 bits)|10005:0|llvmpipe|Mesa 25.0.7".to_string(),
                shape_class(&MatmulProblem::plain(1, 1024, 1024, 1024, "f32")),
                MatmulConfig::Tiled {
                    tm: 4,
                    tc4: 2,
                    ks: 4,
                },
                12.5,
            ),
            (
                "gl|llvmpipe|0:0|x|y".to_string(),
                "v1 f32 tn b0 m9 k9a8 n9".to_string(),
                MatmulConfig::Generic,
                3.25,
            ),
        ];
        let text = encode(&entries);
        assert_eq!(decode(&text), entries);
        // A damaged line is skipped, the rest kept; another version's file is ignored whole.
        let damaged = text.replace("t4x2k4", "t4x2q4");
        assert_eq!(decode(&damaged), entries[1..].to_vec());
        assert!(
            decode(&text.replace(&format!("choices v{TUNE_VERSION}"), "choices v0")).is_empty()
        );
        assert!(decode("").is_empty());
    }

    #[test]
    fn shape_classes_bucket_sizes_and_keep_alignment() {
        let c = |b, m, k, n| shape_class(&MatmulProblem::plain(b, m, k, n, "f32"));
        assert_eq!(c(1, 1000, 1000, 1000), c(1, 1024, 1024, 1024));
        assert_ne!(c(1, 1024, 1024, 1024), c(1, 2048, 1024, 1024));
        assert_ne!(c(1, 1024, 1020, 1024), c(1, 1024, 1024, 1024)); // k % 8 differs
        assert_ne!(c(2, 512, 512, 512), c(1, 512, 512, 512));
        let t = MatmulProblem {
            ta: true,
            ..MatmulProblem::plain(1, 512, 512, 512, "f32")
        };
        assert_ne!(shape_class(&t), c(1, 512, 512, 512));
        assert_eq!(clean("a\tb\nc"), "a b c");
    }

    /// Every member (and the subgroup one where the device has it) gives the same bits as the
    /// heuristic's kernel, for every layout of the same operands: the measured choice can never
    /// change a value. The values themselves are checked against an f64 host product.
    #[test]
    fn every_member_and_layout_gives_the_same_bits() {
        use crate::dtype::DType;
        use crate::host::HostData;
        let rt = pollster::block_on(crate::device::Runtime::builder().build()).unwrap();
        let mut checked_subgroup = false;
        let mut checked_shared = 0;
        for dev in rt.devices().iter().filter(|d| !d.is_cpu()) {
            let max_wg = dev.limits().max_compute_workgroups_per_dimension;
            for &(batch, m, k, n) in &[
                (1usize, 37usize, 24usize, 44usize),
                (2, 16, 8, 12),
                (1, 130, 64, 68),
                (2, 19, 64, 128), // the texture member's shapes: k and n multiples of 64
            ] {
                let vals = |len: usize, seed: usize| -> Vec<f32> {
                    (0..len)
                        .map(|i| ((i * 7 + seed * 13) % 23) as f32 / 11.0 - 1.0)
                        .collect()
                };
                let a = vals(batch * m * k, 1);
                let b = vals(batch * k * n, 2);
                let tr = |v: &[f32], r: usize, c: usize| -> Vec<f32> {
                    let mut out = vec![0.0; v.len()];
                    for bi in 0..batch {
                        for i in 0..r {
                            for j in 0..c {
                                out[bi * r * c + j * r + i] = v[bi * r * c + i * c + j];
                            }
                        }
                    }
                    out
                };
                let up = |v: Vec<f32>| dev.upload(&HostData::F32(v)).unwrap();
                let (ga, gb) = (up(a.clone()), up(b.clone()));
                let (gat, gbt) = (up(tr(&a, m, k)), up(tr(&b, k, n)));
                let run = |p: &MatmulProblem, cfg: MatmulConfig| -> Vec<f32> {
                    let mk = crate::ops::matmul::kernel::kernel(p, cfg, max_wg);
                    let kern = dev.kernel(&mk.label, &mk.wgsl).unwrap();
                    let c = dev.alloc((batch * m * n * 4) as u64).unwrap();
                    let x = if p.ta { &gat } else { &ga };
                    let y = if p.tb { &gbt } else { &gb };
                    dev.run(&[super::super::Dispatch {
                        kernel: &kern,
                        buffers: vec![x, y, &c],
                        workgroups: mk.workgroups,
                    }])
                    .unwrap();
                    let out =
                        pollster::block_on(dev.download(&c, DType::F32, batch * m * n)).unwrap();
                    let HostData::F32(v) = out else {
                        unreachable!()
                    };
                    v
                };
                let plain = MatmulProblem::plain(batch, m, k, n, "f32");
                let want = run(&plain, plain.heuristic());
                for bi in 0..batch {
                    for i in 0..m {
                        for j in 0..n {
                            let exact: f64 = (0..k)
                                .map(|q| {
                                    a[bi * m * k + i * k + q] as f64
                                        * b[bi * k * n + q * n + j] as f64
                                })
                                .sum();
                            let got = want[bi * m * n + i * n + j] as f64;
                            assert!(
                                (got - exact).abs() <= 1e-5 * (1.0 + exact.abs()),
                                "{got} vs {exact}"
                            );
                        }
                    }
                }
                for (ta, tb) in [(false, false), (false, true), (true, false)] {
                    let p = MatmulProblem { ta, tb, ..plain };
                    let mut members = device_candidates(dev, &p);
                    // Not candidates here (the texture member is never searched, the
                    // workgroup-memory ones only on GPUs), but they must round alike too.
                    if MatmulConfig::Texture.supports(&p) {
                        members.push(MatmulConfig::Texture);
                    }
                    // Both block sizes and both k steps in two members, on the shapes with
                    // partial blocks, several row blocks and a batch; on GL the batched one only
                    // (each is a compile of 1-3 s on llvmpipe).
                    let vulkan = dev.info().backend == "vulkan";
                    if m == 19 || (m == 130 && vulkan) {
                        for (tm, bk) in [(8, 8), (4, 4)] {
                            let w = MatmulConfig::Shared { tm, bk };
                            if w.supports(&p) && !members.contains(&w) {
                                members.push(w);
                                checked_shared += 1;
                            }
                        }
                    }
                    for cfg in members {
                        checked_subgroup |= matches!(cfg, MatmulConfig::Subgroup { .. });
                        let got = run(&p, cfg);
                        let same = got
                            .iter()
                            .zip(&want)
                            .all(|(x, y)| x.to_bits() == y.to_bits());
                        assert!(
                            same,
                            "{} {} {} differs from the heuristic",
                            dev.name(),
                            p.layout().name(),
                            cfg.name()
                        );
                    }
                }
            }
            println!("{}: subgroup member {:?}", dev.name(), device_subgroup(dev));
        }
        println!("subgroup kernel checked: {checked_subgroup}");
        // Vulkan: 2 shapes x 3 layouts x 2 members.
        assert!(
            checked_shared >= 12,
            "{checked_shared} workgroup-memory kernels checked"
        );
    }

    /// A problem whose whole dispatch takes well under a sample (here one or two workgroups, as a
    /// GPU runs whole dispatches of much larger ones) is timed over repeated dispatches, and the
    /// search still returns a runnable member with a finite rate.
    #[test]
    fn short_dispatches_are_repeated_within_a_sample() {
        let rt = pollster::block_on(
            crate::device::Runtime::builder()
                .layout_str("vulkan:1")
                .build(),
        )
        .unwrap();
        let dev = &rt.devices()[0];
        let p = MatmulProblem::plain(1, 8, 16, 8, "f32");
        let before = REPEATED_SAMPLES.load(Ordering::Relaxed);
        let max_wg = dev.limits().max_compute_workgroups_per_dimension;
        let (cfg, gflops) = search(dev, &p, &device_candidates(dev, &p), max_wg).unwrap();
        assert!(
            cfg.supports(&p) && gflops.is_finite() && gflops > 0.0,
            "{cfg:?} {gflops}"
        );
        assert!(REPEATED_SAMPLES.load(Ordering::Relaxed) > before);
    }

    /// Full-size timings of every candidate and of the search, in one process (the figures of
    /// docs/PERFORMANCE.md). `MM_SIZES=256,512 [MM_LAYOUTS=all] [MM_BACKEND=vulkan] [MM_SHARED=1]
    /// cargo test --lib measure_family -- --ignored --nocapture`.
    #[test]
    #[ignore = "a benchmark: minutes on a software adapter"]
    fn measure_family() {
        use crate::host::HostData;
        use std::time::Instant;
        let rt = pollster::block_on(crate::device::Runtime::builder().build()).unwrap();
        let sizes: Vec<usize> = std::env::var("MM_SIZES")
            .unwrap_or_else(|_| "256,512,1024,2048".into())
            .split(',')
            .map(|s| s.trim().parse().unwrap())
            .collect();
        let layouts: Vec<(bool, bool)> = match std::env::var("MM_LAYOUTS").as_deref() {
            Ok("all") => vec![(false, false), (false, true), (true, false)],
            _ => vec![(false, false)],
        };
        let backend = std::env::var("MM_BACKEND").ok();
        for dev in rt
            .devices()
            .iter()
            .filter(|d| !d.is_cpu() && backend.as_ref().is_none_or(|b| *b == d.info().backend))
        {
            let max_wg = dev.limits().max_compute_workgroups_per_dimension;
            for &n in &sizes {
                for &(ta, tb) in &layouts {
                    let p = MatmulProblem {
                        ta,
                        tb,
                        ..MatmulProblem::plain(1, n, n, n, "f32")
                    };
                    let t = Instant::now();
                    let members = device_candidates(dev, &p);
                    let (chosen, rate) = search(dev, &p, &members, max_wg).unwrap();
                    let search_ms = t.elapsed().as_secs_f64() * 1e3;
                    let v: Vec<f32> = (0..n * n)
                        .map(|i| (i % 13) as f32 * 0.0625 - 0.375)
                        .collect();
                    let a = dev.upload(&HostData::F32(v.clone())).unwrap();
                    let b = dev.upload(&HostData::F32(v)).unwrap();
                    let c = dev.alloc((n * n * 4) as u64).unwrap();
                    let reps = if n >= 2048 { 2 } else { 4 };
                    // `MM_SHARED=1`: the workgroup-memory members too, where they are no candidate.
                    let mut timed = members.clone();
                    if std::env::var("MM_SHARED").is_ok() {
                        for w in shared_members(&p) {
                            if !timed.contains(&w) {
                                timed.push(w);
                            }
                        }
                    }
                    for &cfg in &timed {
                        let mk = crate::ops::matmul::kernel::kernel(&p, cfg, max_wg);
                        let tc = Instant::now();
                        let k = dev
                            .kernel(
                                &format!("bench {}", mk.label),
                                &format!("{}\n// bench", mk.wgsl),
                            )
                            .unwrap();
                        let compile_ms = tc.elapsed().as_secs_f64() * 1e3;
                        let d = [super::super::Dispatch {
                            kernel: &k,
                            buffers: vec![&a, &b, &c],
                            workgroups: mk.workgroups,
                        }];
                        dev.run(&d).unwrap();
                        let mut times = Vec::new();
                        for _ in 0..reps {
                            let t = Instant::now();
                            dev.run(&d).unwrap();
                            times.push(t.elapsed().as_secs_f64());
                        }
                        times.sort_by(f64::total_cmp);
                        let med = times[times.len() / 2];
                        println!(
                            "| {} | {n} | {} | {} | {:.1} ms | {:.2} GFLOP/s | compile {compile_ms:.0} ms |{}",
                            dev.name(),
                            p.layout().name(),
                            cfg.name(),
                            med * 1e3,
                            2.0 * (n as f64).powi(3) / med / 1e9,
                            if cfg == chosen {
                                format!(" <- search ({search_ms:.0} ms, sampled {rate:.2})")
                            } else {
                                String::new()
                            }
                        );
                    }
                }
            }
        }
    }
}
