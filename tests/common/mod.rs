//! Shared helpers of the integration tests: the GPU devices every test runs on, deterministic
//! pseudo-random data, tolerant comparisons, and `check_on_all`, which runs a jitted function on
//! every GPU device and compares each output with the CPU reference interpreter.
//!
//! Each test binary compiles this module separately and uses a different part of it.
#![allow(dead_code)]

pub mod app;

use std::sync::OnceLock;

use brigade::{Array, DType, Device, HostArray, HostData, Runtime, Tensor, jit, reference};

pub const INSTALL: &str = "the GPU tests need Mesa's software drivers, lavapipe (Vulkan) and llvmpipe (GL through EGL): \
    apt-get install -y mesa-vulkan-drivers libvulkan1 libegl1 libegl-mesa0 libgl1-mesa-dri, \
    and set XDG_RUNTIME_DIR to an existing directory (mode 700) for EGL; scripts/test.sh does both";

/// The runtime all tests share: one logical device per adapter, no cpu fallback.
pub fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        let _ = env_logger::builder().is_test(true).try_init();
        let rt = pollster::block_on(Runtime::builder().allow_cpu_fallback(false).build())
            .unwrap_or_else(|e| panic!("no GPU runtime could be built: {e}. {INSTALL}"));
        let listing: Vec<String> = rt.adapters().iter().map(|a| a.to_string()).collect();
        for backend in ["vulkan", "gl"] {
            assert!(
                rt.adapters()
                    .iter()
                    .any(|a| a.backend == backend && a.name.contains("llvmpipe")),
                "no {backend} llvmpipe adapter was found (adapters: {listing:?}); {INSTALL}"
            );
        }
        assert!(
            rt.devices().iter().any(|d| !d.is_cpu()),
            "the runtime has no GPU device (adapters: {listing:?}); {INSTALL}"
        );
        rt
    })
}

/// A runtime with a forced layout (`"vulkan:4"`, `"vulkan:1,gl:1"`, `"cpu:3"`), built once per layout
/// and test binary. Panics (with the packages to install) when the layout's adapters are missing.
pub fn runtime_with(layout: &str) -> &'static Runtime {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static RTS: OnceLock<Mutex<HashMap<String, &'static Runtime>>> = OnceLock::new();
    let _ = env_logger::builder().is_test(true).try_init();
    let mut map = RTS
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    map.entry(layout.to_string()).or_insert_with(|| {
        let rt = pollster::block_on(
            Runtime::builder()
                .layout_str(layout)
                .allow_cpu_fallback(false)
                .build(),
        )
        .unwrap_or_else(|e| panic!("no runtime for layout {layout}: {e}. {INSTALL}"));
        Box::leak(Box::new(rt))
    })
}

/// A runtime with a forced layout and every device's storage-binding limit lowered to
/// `max_binding` bytes (`RuntimeBuilder::max_binding`), built once per (layout, limit) and test
/// binary: small arrays then take the segmented paths of arrays larger than one binding.
pub fn runtime_max_binding(layout: &str, max_binding: u64) -> &'static Runtime {
    runtime_forced(layout, max_binding, None)
}

/// [`runtime_max_binding`] with the buffer limit lowered too (`RuntimeBuilder::max_buffer`):
/// small arrays then take the paths of arrays stored in several wgpu buffers.
pub fn runtime_forced(layout: &str, max_binding: u64, max_buffer: Option<u64>) -> &'static Runtime {
    use std::collections::HashMap;
    use std::sync::Mutex;
    type Key = (String, u64, Option<u64>);
    static RTS: OnceLock<Mutex<HashMap<Key, &'static Runtime>>> = OnceLock::new();
    let _ = env_logger::builder().is_test(true).try_init();
    let mut map = RTS
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    map.entry((layout.to_string(), max_binding, max_buffer))
        .or_insert_with(|| {
            let mut b = Runtime::builder()
                .layout_str(layout)
                .max_binding(max_binding)
                .allow_cpu_fallback(false);
            if let Some(m) = max_buffer {
                b = b.max_buffer(m);
            }
            let rt = pollster::block_on(b.build())
                .unwrap_or_else(|e| panic!("no runtime for layout {layout}: {e}. {INSTALL}"));
            Box::leak(Box::new(rt))
        })
}

/// Run this test binary's test `child` alone in a child process with the extra environment
/// `envs` (the environment of this multi-threaded process is not changed); panics, with its
/// output, unless it passes. Returns its output.
pub fn run_child_test(child: &str, envs: &[(&str, &str)]) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--exact", child, "--nocapture", "--test-threads=1"])
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "child {child} with {envs:?} failed:\n{text}"
    );
    text
}

/// The devices of [`runtime_with`]`(layout)`.
pub fn devices_with(layout: &str) -> Vec<Device> {
    runtime_with(layout).devices().to_vec()
}

/// Every non-cpu device of the shared runtime (at least a Vulkan and a GL llvmpipe device).
/// Panics, with the packages to install, when those adapters are missing: tests never skip.
pub fn gpu_devices() -> Vec<Device> {
    runtime()
        .devices()
        .iter()
        .filter(|d| !d.is_cpu())
        .cloned()
        .collect()
}

/// Serializes the tests' work on GL devices.
///
/// wgpu's GL backend holds one EGL context lock per adapter during every GL call, including a
/// dispatch whose shader llvmpipe compiles on first use (seconds for big kernels with a cold Mesa
/// shader cache, as on CI), and a thread that waits more than 6 s for that lock panics inside
/// wgpu-hal ("Could not lock adapter context"). brigade serializes its own GL calls behind one
/// lock (tests/threads.rs calls GL from 8 threads without this guard); the guard keeps test
/// threads from queueing many long GL compiles at once, which would still make each one wait for
/// the others. Hold it while calling, reading and dropping results on `dev`; a no-op for non-GL
/// devices. Not re-entrant: a test that holds it must not call `check_on` (which takes it).
pub fn device_guard(dev: &Device) -> Option<std::sync::MutexGuard<'static, ()>> {
    static GL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    (dev.info().backend == "gl").then(|| GL.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The first device of a backend (`vulkan` or `gl`).
pub fn device_of(backend: &str) -> Device {
    gpu_devices()
        .into_iter()
        .find(|d| d.info().backend == backend)
        .unwrap_or_else(|| panic!("no {backend} device; {INSTALL}"))
}

// ---- deterministic data -------------------------------------------------------------------------

/// A small 64-bit linear congruential generator (Knuth's MMIX constants): deterministic across
/// platforms and runs.
#[derive(Clone, Debug)]
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Lcg {
        let mut l = Lcg(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03);
        l.next_u32();
        l
    }
    pub fn next_u32(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as u32
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        self.next_u32() as f64 / (1u64 << 31) as f64
    }
    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
}

/// `n` f32 values in `[lo, hi)`, never exactly zero (a zero is replaced by `hi / 2`, or 0.5 when
/// that is zero too). With `lo < 0 < hi` both signs occur.
pub fn f32s(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut r = Lcg::new(seed);
    let mut v: Vec<f32> = (0..n)
        .map(|_| {
            let x = r.range(lo as f64, hi as f64) as f32;
            if x == 0.0 {
                if hi / 2.0 != 0.0 { hi / 2.0 } else { 0.5 }
            } else {
                x
            }
        })
        .collect();
    // Make sure a signed range really produces both signs.
    if n >= 2 && lo < 0.0 && hi > 0.0 {
        if v.iter().all(|&x| x > 0.0) {
            v[0] = lo / 2.0;
        }
        if v.iter().all(|&x| x < 0.0) {
            v[n - 1] = hi / 2.0;
        }
    }
    v
}

/// `n` i32 values in `[lo, hi]`, never zero unless the range is `[0, 0]`.
pub fn i32s(n: usize, seed: u64, lo: i32, hi: i32) -> Vec<i32> {
    let mut r = Lcg::new(seed);
    let span = (hi as i64 - lo as i64 + 1) as u64;
    (0..n)
        .map(|_| {
            let x = (lo as i64 + (r.next_u32() as u64 % span) as i64) as i32;
            if x == 0 && (lo != 0 || hi != 0) {
                if hi > 0 { hi } else { lo }
            } else {
                x
            }
        })
        .collect()
}

/// `n` u32 values in `[lo, hi]`, never zero unless `hi == 0`.
pub fn u32s(n: usize, seed: u64, lo: u32, hi: u32) -> Vec<u32> {
    let mut r = Lcg::new(seed);
    let span = (hi as u64 - lo as u64) + 1;
    (0..n)
        .map(|_| {
            let x = (lo as u64 + r.next_u32() as u64 % span) as u32;
            if x == 0 { hi } else { x }
        })
        .collect()
}

/// `n` bools, both values present when `n >= 2`.
pub fn bools(n: usize, seed: u64) -> Vec<bool> {
    let mut r = Lcg::new(seed);
    let mut v: Vec<bool> = (0..n).map(|_| r.next_u32() & 1 == 1).collect();
    if n >= 2 {
        v[0] = true;
        v[n - 1] = false;
    }
    v
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// f32 array in [-3, 3) (non-zero, both signs).
pub fn rand_f32(shape: &[usize], seed: u64) -> Array {
    Array::from_vec(f32s(numel(shape), seed, -3.0, 3.0), shape).unwrap()
}
/// f32 array in [lo, hi).
pub fn rand_f32_in(shape: &[usize], seed: u64, lo: f32, hi: f32) -> Array {
    Array::from_vec(f32s(numel(shape), seed, lo, hi), shape).unwrap()
}
/// f32 array in [0.1, 4): a safe domain for log, sqrt, rsqrt, pow.
pub fn rand_pos(shape: &[usize], seed: u64) -> Array {
    Array::from_vec(f32s(numel(shape), seed, 0.1, 4.0), shape).unwrap()
}
pub fn rand_i32(shape: &[usize], seed: u64, lo: i32, hi: i32) -> Array {
    Array::from_vec(i32s(numel(shape), seed, lo, hi), shape).unwrap()
}
pub fn rand_u32(shape: &[usize], seed: u64, lo: u32, hi: u32) -> Array {
    Array::from_vec(u32s(numel(shape), seed, lo, hi), shape).unwrap()
}
pub fn rand_bool(shape: &[usize], seed: u64) -> Array {
    Array::from_vec(bools(numel(shape), seed), shape).unwrap()
}
/// f64 array in [lo, hi) (the f32 values of [`f32s`], widened).
pub fn rand_f64_in(shape: &[usize], seed: u64, lo: f32, hi: f32) -> Array {
    let v: Vec<f64> = f32s(numel(shape), seed, lo, hi)
        .into_iter()
        .map(f64::from)
        .collect();
    Array::from_vec(v, shape).unwrap()
}
/// A random array of `dtype` with small values (f32 and f64 in [-3, 3), i32 in [-20, 20], u32 in
/// [1, 40]).
pub fn rand_of(dtype: DType, shape: &[usize], seed: u64) -> Array {
    match dtype {
        DType::F32 => rand_f32(shape, seed),
        DType::I32 => rand_i32(shape, seed, -20, 20),
        DType::U32 => rand_u32(shape, seed, 1, 40),
        DType::Bool => rand_bool(shape, seed),
        DType::F64 => rand_f64_in(shape, seed, -3.0, 3.0),
    }
}

pub fn host(a: &Array) -> HostArray {
    a.to_host()
        .unwrap_or_else(|e| panic!("reading {a:?} back: {e}"))
}

// ---- comparisons --------------------------------------------------------------------------------

/// Tolerance for float outputs: `|got - want| <= atol + rtol * |want|`. Integer and bool outputs
/// are always compared exactly.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tol {
    pub rtol: f64,
    pub atol: f64,
}

impl Tol {
    /// Bit-exact up to the sign of zero (layout ops, select, casts, integer ops, min/max, floor/...).
    pub const EXACT: Tol = Tol {
        rtol: 0.0,
        atol: 0.0,
    };
    /// f32 arithmetic (add/sub/mul/div, a few roundings away from the reference): ~1e-5 relative.
    pub const ARITH: Tol = Tol {
        rtol: 1e-5,
        atol: 1e-6,
    };
    /// Transcendentals (exp, log, sqrt, rsqrt, sin, cos, tanh, sigmoid, pow = exp2(y·log2 x)).
    /// WGSL bounds these loosely: exp 3 + 2·|x| ULP, log 3 ULP outside [0.5, 2] and 2^-21 absolute
    /// inside, sin/cos 2^-11 absolute on [-π, π]. Measured on lavapipe and llvmpipe GL (Mesa 22.3,
    /// LLVM 15) over 20 001-point grids: exp ≤ 3 ULP on [-3, 3] and 3.8e-6 relative (32 ULP, i.e.
    /// ~4.3e-8·|x|) on [-87, 88]; log ≤ 2.2e-7 absolute near 1 and 6 ULP elsewhere on [1e-3, 1e3];
    /// sin/cos < 1 ULP on [-100, 100]; tanh ≤ 1.4e-7 absolute; sigmoid 2.7 ULP; sqrt/rsqrt < 1 ULP;
    /// pow 6.3e-7 relative for bases in [0.1, 4] and exponents in [-3, 3]. 1e-5 relative plus 1e-6
    /// absolute (for results near zero) covers these with 2.5-5x margin and still fails a wrong
    /// formula or a lost term.
    pub const TRANS: Tol = Tol {
        rtol: 1e-5,
        atol: 1e-6,
    };
    /// Reductions and contractions of up to a few thousand f32 terms against the f64-accumulating
    /// reference: error grows ~ sqrt(n)·ulp, so 1e-4 relative with a small absolute floor for sums
    /// that cancel to near zero.
    pub const REDUCE: Tol = Tol {
        rtol: 1e-4,
        atol: 1e-4,
    };

    pub fn new(rtol: f64, atol: f64) -> Tol {
        Tol { rtol, atol }
    }
}

/// Compare `got` with `want`: same shape, same dtype, and values within `tol` (floats; NaN matches
/// NaN, infinities must be equal) or exactly (integers, bools). Panics with the shapes, the number
/// of mismatches, the worst index (flat and multi-dimensional) and its values.
pub fn assert_close(got: &HostArray, want: &HostArray, tol: Tol, context: &str) {
    assert_eq!(
        got.shape, want.shape,
        "{context}: shape: got {:?}, want {:?}",
        got.shape, want.shape
    );
    assert_eq!(
        got.dtype(),
        want.dtype(),
        "{context}: dtype: got {}, want {} (shape {:?})",
        got.dtype(),
        want.dtype(),
        got.shape
    );
    let n = want.len();
    assert_eq!(
        got.len(),
        n,
        "{context}: {} elements for shape {:?}",
        got.len(),
        got.shape
    );
    let exact = !want.dtype().is_float();
    let mut bad = 0usize;
    let mut worst: Option<(usize, f64)> = None;
    for i in 0..n {
        let (g, w) = (got.data.get_f64(i), want.data.get_f64(i));
        let excess = if exact {
            if got.data.get(i) == want.data.get(i) {
                0.0
            } else {
                f64::INFINITY
            }
        } else if w.is_nan() || g.is_nan() {
            if w.is_nan() && g.is_nan() {
                0.0
            } else {
                f64::INFINITY
            }
        } else if w.is_infinite() || g.is_infinite() {
            if g == w { 0.0 } else { f64::INFINITY }
        } else {
            let err = (g - w).abs();
            let allowed = tol.atol + tol.rtol * w.abs();
            if err <= allowed {
                0.0
            } else {
                err / allowed.max(f64::MIN_POSITIVE)
            }
        };
        if excess > 0.0 {
            bad += 1;
            if worst.is_none_or(|(_, e)| excess > e) {
                worst = Some((i, excess));
            }
        }
    }
    if let Some((i, excess)) = worst {
        let (g, w) = (got.data.get(i), want.data.get(i));
        let diff = (got.data.get_f64(i) - want.data.get_f64(i)).abs();
        panic!(
            "{context}: {bad} of {n} elements differ (shape {:?}, {}, tol rtol={} atol={}); worst at flat index {i} = {:?}: got {g}, want {w} (|diff| {diff:e}, {excess:.3}x the allowed error){}",
            want.shape,
            want.dtype(),
            tol.rtol,
            tol.atol,
            brigade::host::unravel(i, &want.shape),
            preview(got, want, i),
        );
    }
}

/// A few neighbouring values around index `i`, for failure messages.
fn preview(got: &HostArray, want: &HostArray, i: usize) -> String {
    let lo = i.saturating_sub(3);
    let hi = (i + 4).min(want.len());
    let g: Vec<String> = (lo..hi).map(|k| got.data.get(k).to_string()).collect();
    let w: Vec<String> = (lo..hi).map(|k| want.data.get(k).to_string()).collect();
    format!(
        "\n  got [{lo}..{hi}]:  {}\n  want [{lo}..{hi}]: {}",
        g.join(", "),
        w.join(", ")
    )
}

/// Compare host data with a vector of f32 values computed on the host.
pub fn assert_f32s(got: &HostArray, want: &[f32], tol: Tol, context: &str) {
    let w = HostArray::new(got.shape.clone(), HostData::F32(want.to_vec()))
        .unwrap_or_else(|e| panic!("{context}: {e}"));
    assert_close(got, &w, tol, context);
}

// ---- running on every device ---------------------------------------------------------------------

/// Trace `f` with `jit`, evaluate the traced graph with the CPU reference, run it on every GPU
/// device and compare every output (shape, dtype and values within `tol`). Returns the reference
/// outputs, for extra host-side checks.
pub fn check_on_all<F>(f: F, args: &[Array], tol: Tol) -> Vec<HostArray>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    check_on(&gpu_devices(), f, args, tol)
}

/// [`check_on_all`] on chosen devices.
pub fn check_on<F>(devices: &[Device], f: F, args: &[Array], tol: Tol) -> Vec<HostArray>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let hosts: Vec<HostArray> = args.iter().map(host).collect();
    let shapes: Vec<String> = args
        .iter()
        .map(|a| format!("{}{:?}", a.dtype(), a.shape()))
        .collect();
    let probe = jit(&f);
    let graph = probe
        .graph(args)
        .unwrap_or_else(|e| panic!("tracing for arguments {shapes:?} failed: {e}"));
    let want = reference::eval_graph(&graph, &hosts)
        .unwrap_or_else(|e| panic!("reference evaluation failed: {e}\n{graph}"));
    assert_eq!(want.len(), graph.outputs.len());
    for dev in devices {
        let _guard = device_guard(dev);
        let j = jit(&f).on(dev);
        let outs = j.call(args).unwrap_or_else(|e| {
            panic!(
                "on {}: call failed: {e}\nargs {shapes:?}\n{graph}",
                dev.name()
            )
        });
        assert_eq!(
            outs.len(),
            want.len(),
            "on {}: number of outputs\n{graph}",
            dev.name()
        );
        for (k, (o, w)) in outs.iter().zip(&want).enumerate() {
            assert_eq!(
                o.shape(),
                w.shape.as_slice(),
                "on {}: output {k} shape\n{graph}",
                dev.name()
            );
            assert_eq!(
                o.dtype(),
                w.dtype(),
                "on {}: output {k} dtype\n{graph}",
                dev.name()
            );
            let g = o.to_host().unwrap_or_else(|e| {
                panic!("on {}: reading output {k} failed: {e}\n{graph}", dev.name())
            });
            assert_close(
                &g,
                w,
                tol,
                &format!(
                    "on {}: output {k} of\n{graph}\nargs {shapes:?}\n",
                    dev.name()
                ),
            );
        }
    }
    want
}

/// Run `f` (jitted) on `dev` and read every output back.
pub fn run_on<F>(dev: &Device, f: F, args: &[Array]) -> Vec<HostArray>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let _guard = device_guard(dev);
    let j = jit(f).on(dev);
    j.call(args)
        .unwrap_or_else(|e| panic!("on {}: {e}", dev.name()))
        .iter()
        .map(host)
        .collect()
}

/// Run a lowered [`brigade::lower::Program`] by hand on `dev` (for graphs built directly, e.g. with
/// primitives that user code cannot record yet): upload inputs and constants, allocate the other
/// slots, compile every launch, dispatch them in one submit and read the outputs.
pub fn run_program(
    dev: &Device,
    p: &brigade::lower::Program,
    inputs: &[HostArray],
) -> Vec<HostArray> {
    use std::sync::Arc;
    let _guard = device_guard(dev);
    let ctx = |e: brigade::Error| format!("on {}: {e}", dev.name());
    assert_eq!(
        inputs.len(),
        p.input_slots.len(),
        "number of program inputs"
    );
    let mut slots: Vec<Option<Arc<brigade::device::DeviceBuffer>>> = vec![None; p.slot_bytes.len()];
    for (h, &s) in inputs.iter().zip(&p.input_slots) {
        slots[s] = Some(dev.upload(&h.data).unwrap_or_else(|e| panic!("{}", ctx(e))));
    }
    for (s, h) in &p.const_slots {
        slots[*s] = Some(dev.upload(&h.data).unwrap_or_else(|e| panic!("{}", ctx(e))));
    }
    for (s, slot) in slots.iter_mut().enumerate() {
        if slot.is_none() {
            *slot = Some(
                dev.alloc(p.slot_bytes[s])
                    .unwrap_or_else(|e| panic!("{}", ctx(e))),
            );
        }
    }
    let kernels: Vec<_> = p
        .launches
        .iter()
        .map(|l| {
            dev.kernel(&l.label, &l.wgsl)
                .unwrap_or_else(|e| panic!("{}", ctx(e)))
        })
        .collect();
    let dispatches: Vec<brigade::device::Dispatch<'_>> = p
        .launches
        .iter()
        .zip(&kernels)
        .map(|(l, k)| brigade::device::Dispatch {
            kernel: k,
            buffers: l
                .slots
                .iter()
                .map(|&s| &**slots[s].as_ref().unwrap())
                .collect(),
            workgroups: l.workgroups,
        })
        .collect();
    dev.run(&dispatches)
        .unwrap_or_else(|e| panic!("{}", ctx(e)));
    p.output_slots
        .iter()
        .zip(&p.output_avals)
        .map(|(&s, aval)| {
            let data = dev
                .download_blocking(slots[s].as_ref().unwrap(), aval.dtype, aval.size())
                .unwrap_or_else(|e| panic!("{}", ctx(e)));
            HostArray::new(aval.shape.clone(), data).unwrap()
        })
        .collect()
}

/// A binary op of the `Tensor` surface.
pub type BinaryFn = fn(&Tensor, &Tensor) -> Tensor;

/// Every binary op defined on integers, by name.
pub const INT_BINARY_OPS: [(&str, BinaryFn); 15] = [
    ("add", Tensor::add),
    ("sub", Tensor::sub),
    ("mul", Tensor::mul),
    ("div", Tensor::div),
    ("rem", Tensor::rem),
    ("max", Tensor::maximum),
    ("min", Tensor::minimum),
    ("and", Tensor::and),
    ("or", Tensor::or),
    ("eq", Tensor::eq),
    ("ne", Tensor::ne),
    ("lt", Tensor::lt),
    ("le", Tensor::le),
    ("gt", Tensor::gt),
    ("ge", Tensor::ge),
];
pub mod batching;
pub mod fd;
pub mod segments;
