//! Bounded memory and steady speed: long loops run in flat host
//! memory and leave later calls as fast as before; the kernel and program caches are LRU-bounded,
//! count their evictions, and an evicted program compiles again to the same result. On lavapipe
//! (Vulkan) and llvmpipe (GL), values checked against the CPU reference, with NaN, ±inf and zeros
//! in the data.
//!
//! Resident memory (RSS) is process-wide, so the tests of this binary run one at a time
//! ([`serial`]). Figures are printed (`cargo test --test memory -- --nocapture`); the bounds are
//! generous: before the fix a 10⁵-iteration loop took ~1.9 GB and small calls after it ran 4×
//! slower.

mod common;

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use brigade::{
    Array, DType, Device, HostArray, Runtime, ScanOptions, Tensor, counters, fori_loop, jit, psum,
    reference, scan_with, shard_map,
};
use common::{Tol, assert_close, assert_f32s, check_on_all, device_guard, device_of, f32s, host};

/// One test at a time: RSS and call rates are measured for the whole process.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Resident set size in bytes (`/proc/self/statm`, field 2, in pages).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("statm's resident field");
    pages * 4096
}

fn mib(b: i64) -> f64 {
    b as f64 / (1 << 20) as f64
}

const MIB: i64 = 1 << 20;

/// Small jit calls per second on `dev` (each reads its result back): the best of five 150 ms
/// windows, so that a moment of load from other processes does not decide the figure.
fn small_call_rate(dev: &Device) -> f64 {
    let f = jit(|a: &[Tensor]| vec![&a[0] * 2.0 + 1.0]).on(dev);
    let x = Array::from_vec(vec![1.0f32, -0.0, 3.5, 4.0], &[4])
        .and_then(|x| x.to_device(dev))
        .unwrap();
    let args = [x];
    let got = f.call(&args).unwrap()[0].to_vec::<f32>().unwrap();
    assert_eq!(got, vec![3.0, 1.0, 8.0, 9.0], "the small call's value");
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t = Instant::now();
        let mut n = 0u32;
        while t.elapsed() < Duration::from_millis(150) {
            f.call(&args).unwrap()[0].to_vec::<f32>().unwrap();
            n += 1;
        }
        best = best.max(f64::from(n) / t.elapsed().as_secs_f64());
    }
    best
}

/// Lanes with NaN, ±inf and signed zeros first, then values in [-3, 3).
fn special_then_random(n: usize, seed: u64) -> Vec<f32> {
    let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0];
    let mut v: Vec<f32> = special.iter().copied().take(n).collect();
    v.extend(f32s(n.saturating_sub(v.len()), seed, -3.0, 3.0));
    v
}

/// `x <- x * d + 0.001 * i` for `i` in `0..iters`, a per-lane decay `d` in [0.5, 0.99): every
/// lane's value depends on every iteration, and stays in range.
fn decay_loop(iters: i32) -> impl Fn(&[Tensor]) -> Vec<Tensor> {
    move |a: &[Tensor]| {
        let d = a[1].clone();
        fori_loop(
            0,
            iters,
            move |i, v| vec![&v[0] * &d + i.cast(DType::F32) * 0.001],
            &a[..1],
        )
    }
}

fn decay_args() -> Vec<Array> {
    let x0 = special_then_random(64, 7);
    let d = f32s(64, 8, 0.5, 0.99);
    vec![
        Array::from_vec(x0, &[64]).unwrap(),
        Array::from_vec(d, &[64]).unwrap(),
    ]
}

/// The reference interpreter's outputs for `f` on `args`.
fn reference_of<F: Fn(&[Tensor]) -> Vec<Tensor>>(f: F, args: &[Array]) -> Vec<HostArray> {
    let g = jit(f).graph(args).unwrap();
    let hosts: Vec<HostArray> = args.iter().map(host).collect();
    reference::eval_graph(&g, &hosts).unwrap()
}

/// Each decay step rounds twice (or once, fused); a decay below 0.99 damps old errors, so the
/// error stays within ~100 steps' worth of roundings.
const LOOP_TOL: Tol = Tol {
    rtol: 1e-4,
    atol: 1e-4,
};

#[test]
fn a_long_loop_runs_in_flat_memory_and_leaves_small_calls_fast() {
    let _s = serial();
    let args = decay_args();
    let want_short = reference_of(decay_loop(10_000), &args);
    let want = reference_of(decay_loop(100_000), &args);
    // The reference kept NaN, ±inf in their lanes: the data is not only finite.
    let w = want[0].to_f64();
    assert!(w[0].is_nan() && w[1] == f64::INFINITY && w[2] == f64::NEG_INFINITY);
    for backend in ["vulkan", "gl"] {
        let dev = device_of(backend);
        let _g = device_guard(&dev);
        let name = dev.name().to_string();
        let rate_before = small_call_rate(&dev);
        // Warm up with a shorter loop of the same kernels: pools, encoders and pipelines exist.
        let short = jit(decay_loop(10_000)).on(&dev);
        let got = short.call(&args).unwrap();
        assert_close(
            &host(&got[0]),
            &want_short[0],
            LOOP_TOL,
            &format!("10⁴ iterations on {name}"),
        );
        drop(got);
        let long = jit(decay_loop(100_000)).on(&dev);
        let rss0 = rss() as i64;
        let before = counters();
        let t = Instant::now();
        let first = host(&long.call(&args).unwrap()[0]);
        let secs = t.elapsed().as_secs_f64();
        let work = counters().since(&before);
        let rss1 = rss() as i64;
        let second = host(&long.call(&args).unwrap()[0]);
        let rss2 = rss() as i64;
        let rate_after = small_call_rate(&dev);
        println!(
            "{name}: 10⁵-iteration fori_loop in {secs:.2} s ({} submits, {} dispatches); RSS {:.1} MiB before, +{:.1} MiB after one, +{:.1} MiB after two; small calls {rate_before:.0}/s before, {rate_after:.0}/s after",
            work.submits,
            work.dispatches,
            mib(rss0),
            mib(rss1 - rss0),
            mib(rss2 - rss0),
        );
        assert_close(
            &first,
            &want[0],
            LOOP_TOL,
            &format!("10⁵ iterations on {name}"),
        );
        assert_eq!(
            first.data.to_words(),
            second.data.to_words(),
            "the same loop twice gives the same bits on {name}"
        );
        assert!(
            work.dispatches >= 100_000,
            "the body ran every iteration on {name}: {work:?}"
        );
        assert!(
            work.submits > 1,
            "a 10⁵-iteration loop is submitted in chunks on {name}: {work:?}"
        );
        assert!(
            rss2 - rss0 < 64 * MIB,
            "two 10⁵-iteration loops grew RSS by {:.1} MiB on {name} (bound 64 MiB)",
            mib(rss2 - rss0)
        );
        assert!(
            rate_after >= 0.5 * rate_before,
            "small calls on {name} slowed from {rate_before:.0}/s to {rate_after:.0}/s after the loop"
        );
    }
}

/// A scan that slices `xs` and stacks `ys` copies between dispatches every iteration (a compute
/// pass each): chunks are cut by passes too.
#[test]
fn a_long_scan_with_xs_and_ys_runs_in_bounded_memory() {
    let _s = serial();
    const N: usize = 20_000;
    let f = |a: &[Tensor]| {
        let (carry, ys) = scan_with(
            |c: &[Tensor], x: &[Tensor]| {
                let s = &c[0] * 0.9 + &x[0];
                (vec![s.clone()], vec![&s * 2.0])
            },
            &a[..1],
            &a[1..],
            ScanOptions {
                length: None,
                reverse: true,
            },
        );
        vec![carry[0].clone(), ys[0].clone()]
    };
    let init = Array::from_vec(special_then_random(4, 3), &[4]).unwrap();
    let xs = Array::from_vec(f32s(N * 4, 4, -1.0, 1.0), &[N, 4]).unwrap();
    let args = [init, xs];
    let rss0 = rss() as i64;
    let before = counters();
    let want = check_on_all(f, &args, LOOP_TOL);
    let work = counters().since(&before);
    let grown = rss() as i64 - rss0;
    println!(
        "reverse scan of {N} steps with xs and ys on both adapters: {} submits, RSS +{:.1} MiB",
        work.submits,
        mib(grown)
    );
    assert!(want[0].to_f64()[0].is_nan() && want[0].to_f64()[1] == f64::INFINITY);
    assert!(work.submits > 2, "chunked: {work:?}");
    assert!(
        grown < 64 * MIB,
        "scans grew RSS by {:.1} MiB (bound 64 MiB)",
        mib(grown)
    );
}

/// Carries ping-pong between two buffers: every parity of the length, reverse, several carries
/// (one a counter), zero and one iteration, against the reference on both adapters.
#[test]
fn ping_pong_carries_are_right_for_every_parity() {
    let _s = serial();
    for len in [0usize, 1, 2, 3, 7, 8] {
        for reverse in [false, true] {
            let f = move |a: &[Tensor]| {
                let (carry, ys) = scan_with(
                    |c: &[Tensor], x: &[Tensor]| {
                        let s = &c[0] * &c[1] + &x[0];
                        let k = &c[1] + 0.5;
                        (vec![s.clone(), k], vec![s])
                    },
                    &a[..2],
                    &a[2..],
                    ScanOptions {
                        length: Some(len),
                        reverse,
                    },
                );
                vec![carry[0].clone(), carry[1].clone(), ys[0].clone()]
            };
            let args = [
                Array::from_vec(special_then_random(6, 11), &[6]).unwrap(),
                Array::from_vec(f32s(6, 12, 0.1, 0.7), &[6]).unwrap(),
                Array::from_vec(f32s(len * 6, 13, -2.0, 2.0), &[len, 6]).unwrap(),
            ];
            let want = check_on_all(f, &args, Tol::ARITH);
            let x0 = want[1].to_f64();
            let k0 = host(&args[1]).to_f64();
            for (k, (&got, &start)) in x0.iter().zip(&k0).enumerate() {
                let expect = (start as f32 + 0.5 * len as f32) as f64;
                assert!(
                    (got - expect).abs() < 1e-5,
                    "len {len} reverse {reverse}: carry 1 lane {k} = {got}, want {expect}"
                );
            }
        }
    }
    // fori_loop, whose counter is a carry as well, for odd and even trip counts.
    for n in [1, 2, 5, 6] {
        let f = move |a: &[Tensor]| {
            fori_loop(
                0,
                n,
                |i, v| vec![&v[0] * 0.5 + i.cast(DType::F32), &v[1] - &v[0]],
                &a[..2],
            )
        };
        let args = [
            Array::from_vec(special_then_random(5, 21), &[5]).unwrap(),
            Array::from_vec(f32s(5, 22, -1.0, 1.0), &[5]).unwrap(),
        ];
        check_on_all(f, &args, Tol::ARITH);
    }
}

/// A runtime of its own (Vulkan and GL) with small caches: 8 kernels, 4 programs per device.
fn small_cache_runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        pollster::block_on(
            Runtime::builder()
                .layout_str("vulkan:1,gl:1")
                .allow_cpu_fallback(false)
                .kernel_cache_capacity(8)
                .program_cache_capacity(4)
                .build(),
        )
        .unwrap_or_else(|e| panic!("no vulkan:1,gl:1 runtime: {e}. {}", common::INSTALL))
    })
}

fn shaped(n: usize, seed: u64) -> Array {
    Array::from_vec(special_then_random(n, seed), &[n]).unwrap()
}

/// `x * 2 + 1` and the sum of `x * x`: two kernels whose WGSL depends on the shape.
fn two_kernels(a: &[Tensor]) -> Vec<Tensor> {
    vec![&a[0] * 2.0 + 1.0, (&a[0] * &a[0]).sum_all()]
}

/// Compare with the reference outputs `want` (traced and evaluated outside the counted work).
fn check_outputs(got: &[Array], want: &[HostArray], context: &str) -> Vec<HostArray> {
    let got: Vec<HostArray> = got.iter().map(host).collect();
    assert_close(&got[0], &want[0], Tol::ARITH, context);
    assert_close(&got[1], &want[1], Tol::REDUCE, context);
    got
}

#[test]
fn a_jit_fed_many_shapes_keeps_at_most_its_capacities() {
    let _s = serial();
    let rt = small_cache_runtime();
    for dev in rt.devices() {
        let _g = device_guard(dev);
        let name = dev.name();
        assert_eq!(
            (dev.kernel_cache_capacity(), dev.program_cache_capacity()),
            (8, 4)
        );
        let f = jit(two_kernels).on(dev);
        let args: Vec<[Array; 1]> = (1..=40).map(|n| [shaped(n, 100 + n as u64)]).collect();
        let wants: Vec<Vec<HostArray>> =
            args.iter().map(|a| reference_of(two_kernels, a)).collect();
        let kernels_before = dev.kernels_cached();
        let before = counters();
        let first_args = &args[0];
        let first = check_outputs(&f.call(first_args).unwrap(), &wants[0], name);
        for n in 2..=40 {
            let got = f.call(&args[n - 1]).unwrap();
            check_outputs(&got, &wants[n - 1], &format!("n = {n} on {name}"));
            assert!(
                f.programs_cached() <= 4,
                "{} programs on {name}",
                f.programs_cached()
            );
            assert!(
                dev.kernels_cached() <= 8,
                "{} kernels on {name}",
                dev.kernels_cached()
            );
        }
        let work = counters().since(&before);
        println!("{name}: 40 shapes with capacities 8 kernels / 4 programs: {work:?}");
        assert_eq!(work.traces, 40, "one trace per signature on {name}");
        assert_eq!(
            work.programs_evicted, 36,
            "40 signatures into 4 places on {name}"
        );
        // Every kernel created went into the cache; what is not there now was evicted.
        assert!(
            work.pipelines_created >= 40,
            "shape-specific kernels: {work:?}"
        );
        assert_eq!(
            kernels_before as u64 + work.pipelines_created - work.kernels_evicted,
            dev.kernels_cached() as u64,
            "kernel cache accounting on {name}: {work:?}"
        );
        // The first signature was evicted long ago: it is traced and compiled again, and gives
        // the same bits.
        let before = counters();
        let again = check_outputs(&f.call(first_args).unwrap(), &wants[0], name);
        let work = counters().since(&before);
        assert_eq!(
            work.traces, 1,
            "the evicted program is traced again: {work:?}"
        );
        assert!(work.pipelines_created > 0, "and compiled again: {work:?}");
        assert_eq!(work.programs_evicted, 1, "{work:?}");
        for (a, b) in first.iter().zip(&again) {
            assert_eq!(
                a.data.to_words(),
                b.data.to_words(),
                "same bits after eviction on {name}"
            );
        }
        // A cache hit costs nothing.
        let before = counters();
        f.call(first_args).unwrap();
        let work = counters().since(&before);
        assert_eq!((work.traces, work.pipelines_created), (0, 0), "{work:?}");
    }
}

#[test]
fn clear_caches_drops_kernels_and_programs_recompile_to_the_same_result() {
    let _s = serial();
    let rt = small_cache_runtime();
    for dev in rt.devices() {
        let _g = device_guard(dev);
        let name = dev.name();
        let f = jit(two_kernels).on(dev);
        let args = [shaped(33, 5)];
        let want = reference_of(two_kernels, &args);
        let first = check_outputs(&f.call(&args).unwrap(), &want, name);
        assert!(dev.kernels_cached() > 0);
        dev.clear_caches();
        assert_eq!(
            dev.kernels_cached(),
            0,
            "clear_caches empties the kernel cache of {name}"
        );
        let before = counters();
        let again = check_outputs(&f.call(&args).unwrap(), &want, name);
        let work = counters().since(&before);
        assert_eq!(work.traces, 0, "the traced program is kept: {work:?}");
        assert!(
            work.pipelines_created >= 2,
            "the kernels are compiled again: {work:?}"
        );
        for (a, b) in first.iter().zip(&again) {
            assert_eq!(
                a.data.to_words(),
                b.data.to_words(),
                "same bits after clear_caches"
            );
        }
    }
}

#[test]
fn eager_and_shard_map_caches_are_bounded_too() {
    let _s = serial();
    let rt = small_cache_runtime();
    // Eager ops on arrays of this device run there, cached by op and shape on this thread.
    for dev in rt.devices() {
        let _g = device_guard(dev);
        let before = counters();
        for n in 1..=12 {
            let x = special_then_random(n, 40 + n as u64);
            let t = Tensor::from(
                Array::from_vec(x.clone(), &[n])
                    .unwrap()
                    .to_device(dev)
                    .unwrap(),
            );
            let y = &(&t * 3.0) - &t;
            let want: Vec<f32> = x.iter().map(|v| v * 3.0 - v).collect();
            assert_f32s(&host(&y.to_array().unwrap()), &want, Tol::ARITH, dev.name());
        }
        let work = counters().since(&before);
        // At least 12 shapes x 2 ops went through a cache of 4.
        assert!(
            work.programs_evicted >= 20,
            "eager cache on {}: {work:?}",
            dev.name()
        );
    }
    // shard_map over both devices: one signature per block shape.
    let devices = rt.devices().to_vec();
    let f = shard_map(|a: &[Tensor]| vec![psum(&(&a[0] * 2.0).sum(0, false), "rows")])
        .axis_name("rows")
        .devices(&devices)
        .out_axes(&[None]);
    let before = counters();
    for n in 1..=7 {
        let x = special_then_random(2 * n * 3, 60 + n as u64);
        let args = [Array::from_vec(x.clone(), &[2 * n, 3]).unwrap()];
        let got = {
            let _g = device_guard(&devices[1]);
            host(&f.call(&args).unwrap()[0])
        };
        let want: Vec<f32> = (0..3)
            .map(|c| (0..2 * n).map(|r| x[r * 3 + c] * 2.0).sum::<f32>())
            .collect();
        assert_f32s(
            &got,
            &want,
            Tol::REDUCE,
            &format!("shard_map, {} rows", 2 * n),
        );
        assert!(f.programs_cached().0 <= 4, "{:?}", f.programs_cached());
    }
    let work = counters().since(&before);
    assert!(work.programs_evicted >= 3, "shard_map cache: {work:?}");
}

#[test]
fn many_shapes_keep_memory_bounded() {
    let _s = serial();
    let rt = small_cache_runtime();
    let dev = rt
        .devices()
        .iter()
        .find(|d| d.info().backend == "vulkan")
        .expect("vulkan device");
    let f = jit(two_kernels).on(dev);
    let run = |n: usize| {
        let args = [shaped(n, n as u64)];
        let got = f.call(&args).unwrap();
        if n.is_multiple_of(25) {
            check_outputs(&got, &reference_of(two_kernels, &args), &format!("n = {n}"));
        } else {
            host(&got[1]);
        }
    };
    for n in 1..=40 {
        run(n);
    }
    let rss0 = rss() as i64;
    let before = counters();
    for n in 41..=400 {
        run(n);
    }
    let work = counters().since(&before);
    let grown = rss() as i64 - rss0;
    println!(
        "{}: 360 more shapes: {} pipelines created, {} evicted, {} programs evicted; RSS +{:.1} MiB, {} kernels cached",
        dev.name(),
        work.pipelines_created,
        work.kernels_evicted,
        work.programs_evicted,
        mib(grown),
        dev.kernels_cached()
    );
    assert!(dev.kernels_cached() <= 8);
    assert!(f.programs_cached() <= 4);
    assert!(work.kernels_evicted + 8 >= work.pipelines_created);
    assert!(
        grown < 32 * MIB,
        "360 shapes grew RSS by {:.1} MiB with 8 kernels cached (bound 32 MiB)",
        mib(grown)
    );
}
