//! Compiled programs shared between threads.
//!
//! - static assertions: `Jit`, `Parallel`, `Vmap`, `Grad` (and the maps built from them), `Array`,
//!   `Device` and `Runtime` are `Send + Sync` (this file stops compiling if one regresses);
//! - one `Jit`, one `Grad`, one `Vmap` and one two-device `pmap` (a lavapipe Vulkan and an llvmpipe
//!   GL device in one mesh), each shared by 8 threads that call it at once on both adapters, with
//!   several shapes so that threads trace and compile different signatures concurrently (and the
//!   same signature on both devices at once); every result is compared with a host reference;
//! - a `jit` whose traced function applies a shared `Grad` and a shared `Vmap` (tracing re-enters
//!   their caches from several threads);
//! - no thread holds the tests' GL guard: brigade's own GL lock must serialize the GL device, and
//!   a watchdog fails the test (instead of hanging) when the threads take more than 120 s.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use brigade::{
    Array, Device, Grad, HostArray, Jit, Parallel, Runtime, Tensor, Vmap, grad, jit, pmap, psum,
    reference, vmap,
};
use common::*;

type PlainFn = fn(&[Tensor]) -> Vec<Tensor>;

// Compile-time: the callables (for a `Send + Sync` function) and the values they take.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Jit<PlainFn>>();
    send_sync::<Parallel<PlainFn>>();
    send_sync::<Vmap<PlainFn>>();
    send_sync::<Grad<PlainFn>>();
    send_sync::<Array>();
    send_sync::<Device>();
    send_sync::<Runtime>();
    send_sync::<brigade::Error>();
};

fn assert_send_sync<T: Send + Sync>(_: &T) {}

/// Closures (capturing shared state) keep the callables `Send + Sync`, and so do the maps built
/// from maps (`pmap(..).vmap(..)`, `vmap(&f)`, `jit(&grad)`).
#[test]
fn closures_and_composed_maps_are_send_and_sync() {
    let scale = Arc::new(2.0f32);
    let s = scale.clone();
    let j = jit(move |x: &[Tensor]| vec![&x[0] * *s]);
    assert_send_sync(&j);
    let p = pmap(|x: &[Tensor]| vec![psum(&x[0], "i")])
        .axis_name("i")
        .vmap(&[Some(0)], &[Some(0)], None);
    assert_send_sync(&p);
    let g = grad(|x: &[Tensor]| vec![(&x[0] * &x[0]).sum_all()]);
    assert_send_sync(&g);
    let jg = jit(|x: &[Tensor]| x.to_vec());
    assert_send_sync(&jg);
    let v = vmap(move |x: &[Tensor]| g.apply(x));
    assert_send_sync(&v);
    // The closure is still usable, and computes what it says.
    let x = Array::from_vec(vec![1.0f32, -3.0], &[2]).unwrap();
    assert_eq!(
        j.call(std::slice::from_ref(&x)).unwrap()[0]
            .to_vec::<f32>()
            .unwrap(),
        vec![2.0, -6.0]
    );
    assert_eq!(
        v.call(&[Array::from_vec(vec![1.0f32, -3.0, 0.5, 2.0], &[2, 2]).unwrap()])
            .unwrap()[0]
            .to_vec::<f32>()
            .unwrap(),
        vec![2.0, -6.0, 1.0, 4.0]
    );
}

const THREADS: usize = 8;
const WATCHDOG: Duration = Duration::from_secs(120);

/// Run `work(t)` on `THREADS` threads that start together; fail (do not hang) when one panics or
/// when they are not all done within [`WATCHDOG`]. Threads still stuck are left behind: the test
/// binary exits when the tests are over.
fn on_threads(what: &str, work: impl Fn(usize) + Send + Sync + 'static) {
    let work = Arc::new(work);
    let start = Arc::new(Barrier::new(THREADS));
    let (tx, rx) = mpsc::channel::<(usize, Result<(), String>)>();
    for t in 0..THREADS {
        let (work, start, tx) = (work.clone(), start.clone(), tx.clone());
        std::thread::Builder::new()
            .name(format!("{what} {t}"))
            .spawn(move || {
                start.wait();
                let r = catch_unwind(AssertUnwindSafe(|| work(t))).map_err(|e| {
                    e.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "a panic without a message".into())
                });
                let _ = tx.send((t, r));
            })
            .expect("spawning a test thread");
    }
    drop(tx);
    let deadline = Instant::now() + WATCHDOG;
    let mut done = [false; THREADS];
    let mut failures = Vec::new();
    while done.iter().any(|d| !d) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((t, r)) => {
                done[t] = true;
                if let Err(e) = r {
                    failures.push(format!("thread {t}: {e}"));
                }
            }
            Err(_) => {
                let stuck: Vec<usize> = (0..THREADS).filter(|&t| !done[t]).collect();
                panic!(
                    "{what}: threads {stuck:?} of {THREADS} were not done after {WATCHDOG:?} (a deadlock or a hang); failures so far: {failures:?}"
                );
            }
        }
    }
    assert!(failures.is_empty(), "{what}: {}", failures.join("\n"));
}

/// The two adapters: the first lavapipe Vulkan and the first llvmpipe GL device.
fn two_adapters() -> [Device; 2] {
    [device_of("vulkan"), device_of("gl")]
}

/// Shapes the threads cycle through (several signatures compiled at once).
const SHAPES: [&[usize]; 3] = [&[4, 8], &[16, 5], &[3, 33]];

fn jitted(x: &[Tensor]) -> Vec<Tensor> {
    // Elementwise work, a broadcast row, a reduction and a second output.
    let y = (&x[0] * &x[1] + 0.5).tanh();
    vec![y.sum(1, false), &y * &x[0]]
}

/// One `Jit` called by 8 threads at once, each thread on one of two adapters (by where its
/// arguments live) and on every shape in turn, starting at a different one.
#[test]
fn one_jit_from_eight_threads_on_two_adapters() {
    let devs = two_adapters();
    let f: Arc<Jit<PlainFn>> = Arc::new(jit(jitted as PlainFn).named("threads"));
    // Arguments and reference outputs per shape, computed before the threads start.
    let cases: Vec<(Vec<HostArray>, Vec<HostArray>)> = SHAPES
        .iter()
        .enumerate()
        .map(|(k, &shape)| {
            let args = vec![
                rand_f32(shape, 10 + k as u64),
                rand_f32(&[shape[1]], 20 + k as u64),
            ];
            let g = jit(jitted as PlainFn).graph(&args).unwrap();
            let hosts: Vec<HostArray> = args.iter().map(host).collect();
            let want = reference::eval_graph(&g, &hosts).unwrap();
            (hosts, want)
        })
        .collect();
    let cases = Arc::new(cases);
    let shared = f.clone();
    on_threads("jit", move |t| {
        let dev = &devs[t % 2];
        for round in 0..2 * SHAPES.len() {
            let k = (t + round) % SHAPES.len();
            let (hosts, want) = &cases[k];
            let args: Vec<Array> = hosts
                .iter()
                .map(|h| {
                    Array::from_host_array(h.clone())
                        .unwrap()
                        .to_device(dev)
                        .unwrap()
                })
                .collect();
            let outs = shared
                .call(&args)
                .unwrap_or_else(|e| panic!("on {}: shape {:?}: {e}", dev.name(), SHAPES[k]));
            assert_eq!(outs.len(), want.len());
            for (i, (o, w)) in outs.iter().zip(want).enumerate() {
                assert!(o.device().is_some_and(|d| d.name() == dev.name()));
                // tanh (TRANS) summed over up to 33 terms: the reduction tolerance.
                assert_close(
                    &host(o),
                    w,
                    Tol::REDUCE,
                    &format!("thread {t} round {round} on {}: output {i}", dev.name()),
                );
            }
        }
    });
    // Concurrent misses on a signature keep one program each.
    assert_eq!(f.programs_cached(), SHAPES.len());
}

fn loss(x: &[Tensor]) -> Vec<Tensor> {
    vec![(&x[0] * &x[1]).tanh().sum_all()]
}

/// `d/dx sum(tanh(x * w))` and `d/dw` on the host, in f64.
fn grad_reference(x: &[f32], w: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let d: Vec<f64> = x
        .iter()
        .zip(w)
        .map(|(&a, &b)| 1.0 - (a as f64 * b as f64).tanh().powi(2))
        .collect();
    (
        d.iter()
            .zip(w)
            .map(|(d, &b)| (d * b as f64) as f32)
            .collect(),
        d.iter()
            .zip(x)
            .map(|(d, &a)| (d * a as f64) as f32)
            .collect(),
    )
}

/// Gradients of tanh against the f64 reference (see the comment at the use).
const GRAD_TOL: Tol = Tol {
    rtol: 1e-4,
    atol: 2e-6,
};

/// One `Grad` called by 8 threads at once on two adapters, several lengths.
#[test]
fn one_grad_from_eight_threads_on_two_adapters() {
    let devs = two_adapters();
    let g: Arc<Grad<PlainFn>> = Arc::new(grad(loss as PlainFn).argnums(&[0, 1]));
    let lens = [7usize, 64, 300];
    let shared = g.clone();
    on_threads("grad", move |t| {
        let dev = &devs[t % 2];
        for round in 0..2 * lens.len() {
            let n = lens[(t + round) % lens.len()];
            let x = f32s(n, 100 + n as u64, -2.0, 2.0);
            let w = f32s(n, 200 + n as u64, -1.5, 1.5);
            let args = [
                Array::from_vec(x.clone(), &[n])
                    .unwrap()
                    .to_device(dev)
                    .unwrap(),
                Array::from_vec(w.clone(), &[n])
                    .unwrap()
                    .to_device(dev)
                    .unwrap(),
            ];
            let outs = shared
                .call(&args)
                .unwrap_or_else(|e| panic!("on {}: length {n}: {e}", dev.name()));
            let (dx, dw) = grad_reference(&x, &w);
            let what = format!("thread {t} round {round} on {}, length {n}", dev.name());
            // 1 - tanh² in f32 where tanh is near 1 loses ~3e-7 absolute, times |w| <= 1.5.
            assert_f32s(&host(&outs[0]), &dx, GRAD_TOL, &format!("{what}: d/dx"));
            assert_f32s(&host(&outs[1]), &dw, GRAD_TOL, &format!("{what}: d/dw"));
        }
    });
    assert_eq!(g.programs_cached(), lens.len());
}

fn per_example(x: &[Tensor]) -> Vec<Tensor> {
    // One example: a row dotted with a shared vector, then scaled by its own sum.
    let d = (&x[0] * &x[1]).sum_all();
    vec![&x[0] * &d]
}

/// One `Vmap` called by 8 threads at once on two adapters, several batch sizes.
#[test]
fn one_vmap_from_eight_threads_on_two_adapters() {
    let devs = two_adapters();
    let v: Arc<Vmap<PlainFn>> = Arc::new(vmap(per_example as PlainFn).in_axes(&[Some(0), None]));
    let batches = [2usize, 5, 9];
    let width = 6;
    on_threads("vmap", move |t| {
        let dev = &devs[t % 2];
        for round in 0..2 * batches.len() {
            let b = batches[(t + round) % batches.len()];
            let x = f32s(b * width, 300 + b as u64, -1.0, 1.0);
            let w = f32s(width, 400, -1.0, 1.0);
            let args = [
                Array::from_vec(x.clone(), &[b, width])
                    .unwrap()
                    .to_device(dev)
                    .unwrap(),
                Array::from_vec(w.clone(), &[width])
                    .unwrap()
                    .to_device(dev)
                    .unwrap(),
            ];
            let outs = v
                .call(&args)
                .unwrap_or_else(|e| panic!("on {}: batch {b}: {e}", dev.name()));
            let want: Vec<f32> = x
                .chunks(width)
                .flat_map(|row| {
                    let d: f64 = row.iter().zip(&w).map(|(a, b)| *a as f64 * *b as f64).sum();
                    row.iter().map(move |a| (*a as f64 * d) as f32)
                })
                .collect();
            assert_f32s(
                &host(&outs[0]),
                &want,
                Tol::REDUCE,
                &format!("thread {t} round {round} on {}, batch {b}", dev.name()),
            );
        }
    });
}

fn centered(x: &[Tensor]) -> Vec<Tensor> {
    // Per device: its row minus the mean row of the mesh, and the mesh-wide sum of squares.
    let total = psum(&x[0], "i");
    vec![
        &x[0] - &(&total * 0.5),
        psum(&(&x[0] * &x[0]).sum_all(), "i"),
    ]
}

/// One `pmap` over a Vulkan and a GL device (one mesh of both adapters), called by 8 threads at
/// once with several row lengths: every call runs on both devices and exchanges through the host.
#[test]
fn one_pmap_over_two_adapters_from_eight_threads() {
    let devs = two_adapters();
    let p: Arc<Parallel<PlainFn>> = Arc::new(
        pmap(centered as PlainFn)
            .axis_name("i")
            .devices(&devs)
            .named("threads pmap"),
    );
    let widths = [3usize, 16, 41];
    let shared = p.clone();
    on_threads("pmap", move |t| {
        for round in 0..2 * widths.len() {
            let n = widths[(t + round) % widths.len()];
            let x = f32s(2 * n, 500 + (t * 7 + round) as u64, -3.0, 3.0);
            let outs = shared
                .call(&[Array::from_vec(x.clone(), &[2, n]).unwrap()])
                .unwrap_or_else(|e| panic!("width {n}: {e}"));
            let mean: Vec<f64> = (0..n)
                .map(|j| (x[j] as f64 + x[n + j] as f64) / 2.0)
                .collect();
            let want0: Vec<f32> = (0..2 * n)
                .map(|k| (x[k] as f64 - mean[k % n]) as f32)
                .collect();
            let sq: f64 = x.iter().map(|v| *v as f64 * *v as f64).sum();
            let what = format!("thread {t} round {round}, width {n}");
            assert_eq!(outs[0].shape(), &[2, n], "{what}");
            assert_f32s(
                &host(&outs[0]),
                &want0,
                Tol::REDUCE,
                &format!("{what}: centered"),
            );
            assert_f32s(
                &host(&outs[1]),
                &[sq as f32, sq as f32],
                Tol::REDUCE,
                &format!("{what}: sum of squares"),
            );
        }
    });
    assert_eq!(p.programs_cached().0, widths.len());
}

/// A `jit` whose function applies a `Grad` and a `Vmap` shared with it (captured by `Arc`): tracing
/// on 8 threads re-enters those caches concurrently, inside the jit's own compile.
#[test]
fn nested_transforms_share_caches_across_threads() {
    let devs = two_adapters();
    let g = Arc::new(grad(loss as PlainFn));
    let v = Arc::new(vmap(per_example as PlainFn).in_axes(&[Some(0), None]));
    let (gi, vi) = (g.clone(), v.clone());
    let f = Arc::new(jit(move |x: &[Tensor]| {
        let dx = gi.apply(&[x[0].clone(), x[1].clone()]).remove(0);
        let rows = vi.apply(&[x[2].clone(), x[1].clone()]).remove(0);
        vec![&dx + 1.0, rows]
    }));
    assert_send_sync(&*f);
    let lens = [4usize, 10];
    let shared = f.clone();
    on_threads("nested", move |t| {
        let dev = &devs[t % 2];
        for round in 0..4 {
            let n = lens[(t + round) % lens.len()];
            let x = f32s(n, 600 + n as u64, -1.0, 1.0);
            let w = f32s(n, 700 + n as u64, -1.0, 1.0);
            let rows = f32s(3 * n, 800 + n as u64, -1.0, 1.0);
            let put = |v: &[f32], s: &[usize]| {
                Array::from_vec(v.to_vec(), s)
                    .unwrap()
                    .to_device(dev)
                    .unwrap()
            };
            let outs = shared
                .call(&[put(&x, &[n]), put(&w, &[n]), put(&rows, &[3, n])])
                .unwrap_or_else(|e| panic!("on {}: length {n}: {e}", dev.name()));
            let (dx, _) = grad_reference(&x, &w);
            let want0: Vec<f32> = dx.iter().map(|v| v + 1.0).collect();
            let want1: Vec<f32> = rows
                .chunks(n)
                .flat_map(|r| {
                    let d: f64 = r.iter().zip(&w).map(|(a, b)| *a as f64 * *b as f64).sum();
                    r.iter().map(move |a| (*a as f64 * d) as f32)
                })
                .collect();
            let what = format!("thread {t} round {round} on {}, length {n}", dev.name());
            assert_f32s(&host(&outs[0]), &want0, GRAD_TOL, &format!("{what}: grad"));
            assert_f32s(
                &host(&outs[1]),
                &want1,
                Tol::REDUCE,
                &format!("{what}: vmap"),
            );
        }
    });
    assert_eq!(f.programs_cached(), lens.len());
}

/// A runtime of its own (one Vulkan and one GL device) whose caches are tiny: 2 programs per
/// compiled function, 3 kernels per device, so that threads evict what others are about to run.
fn tiny_cache_runtime() -> &'static Runtime {
    static RT: std::sync::OnceLock<Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        pollster::block_on(
            Runtime::builder()
                .layout_str("vulkan:1,gl:1")
                .allow_cpu_fallback(false)
                .kernel_cache_capacity(3)
                .program_cache_capacity(2)
                .build(),
        )
        .unwrap_or_else(|e| panic!("no vulkan:1,gl:1 runtime: {e}. {INSTALL}"))
    })
}

/// A shared `Jit` fed 6 shapes by 8 threads on devices that keep 2 programs: programs are evicted
/// while other threads still run them (each call holds its own reference), every result stays
/// right, the cache never holds more than its capacity, and the evictions add up.
#[test]
fn evictions_under_concurrent_calls_keep_results_and_bounds() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let devs: Vec<Device> = tiny_cache_runtime().devices().to_vec();
    assert_eq!(devs.len(), 2);
    for d in &devs {
        assert_eq!(
            (d.kernel_cache_capacity(), d.program_cache_capacity()),
            (3, 2)
        );
    }
    let lens = [5usize, 12, 31, 64, 100, 257];
    let f: Arc<Jit<PlainFn>> = Arc::new(jit(loss as PlainFn));
    let evicted = Arc::new(AtomicU64::new(0));
    let (shared, count) = (f.clone(), evicted.clone());
    on_threads("evictions", move |t| {
        let dev = &devs[t % 2];
        let before = brigade::counters();
        for round in 0..lens.len() {
            let n = lens[(t + round) % lens.len()];
            let x = f32s(n, 900 + n as u64, -2.0, 2.0);
            let w = f32s(n, 950 + n as u64, -1.0, 1.0);
            let args = [
                Array::from_vec(x.clone(), &[n])
                    .unwrap()
                    .to_device(dev)
                    .unwrap(),
                Array::from_vec(w.clone(), &[n])
                    .unwrap()
                    .to_device(dev)
                    .unwrap(),
            ];
            let out = shared
                .call(&args)
                .unwrap_or_else(|e| panic!("on {}: length {n}: {e}", dev.name()));
            let want: f64 = x
                .iter()
                .zip(&w)
                .map(|(a, b)| (*a as f64 * *b as f64).tanh())
                .sum();
            assert_f32s(
                &host(&out[0]),
                &[want as f32],
                Tol::REDUCE,
                &format!("thread {t} round {round} on {}, length {n}", dev.name()),
            );
            assert!(
                shared.programs_cached() <= 2,
                "{} programs held",
                shared.programs_cached()
            );
        }
        // Counters are per thread: add this thread's evictions.
        count.fetch_add(
            brigade::counters().since(&before).programs_evicted,
            Ordering::Relaxed,
        );
    });
    // Every one of the 6 signatures was inserted at least once and at most 2 stay: at least 4
    // evictions (a duplicate compiled by a racing thread is dropped, not counted).
    assert!(f.programs_cached() <= 2);
    let n = evicted.load(Ordering::Relaxed);
    assert!(n >= 4, "{n} programs evicted");
}

thread_local! {
    /// Runtimes (and arrays on them) kept by a thread in its own thread-local, as an app that
    /// builds one runtime per worker thread does: they are dropped by the thread's exit.
    static KEPT: std::cell::RefCell<Vec<(Runtime, Vec<Array>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Heavy use on one thread of runtimes it keeps in a `thread_local!`: jit calls, eager ops, reads,
/// a two-device pmap with a collective, arrays dropped and kept. Returns how many results it
/// checked.
fn use_kept_runtimes() -> usize {
    let layouts = ["vulkan:2", "gl:1,vulkan:1", "cpu:2"];
    // Touched first, as an app that sets up its per-thread state before any work does: its
    // destructor then runs after those of every thread-local brigade and wgpu use afterwards.
    KEPT.with(|r| r.borrow_mut().clear());
    let mut checked = 0;
    for (k, layout) in layouts.iter().enumerate() {
        let rt = pollster::block_on(
            Runtime::builder()
                .layout_str(layout)
                .allow_cpu_fallback(false)
                .build(),
        )
        .unwrap_or_else(|e| panic!("no runtime for {layout}: {e}. {INSTALL}"));
        let devs = rt.devices().to_vec();
        let f = jit(jitted as PlainFn).named("kept");
        let mut kept = Vec::new();
        for (d, dev) in devs.iter().enumerate() {
            let x = f32s(4 * 8, 1000 + (k * 10 + d) as u64, -1.0, 1.0);
            let w = f32s(8, 1100 + (k * 10 + d) as u64, -1.0, 1.0);
            let xa = Array::from_vec(x.clone(), &[4, 8])
                .unwrap()
                .to_device(dev)
                .unwrap();
            let wa = Array::from_vec(w.clone(), &[8])
                .unwrap()
                .to_device(dev)
                .unwrap();
            let outs = f
                .call(&[xa.clone(), wa.clone()])
                .unwrap_or_else(|e| panic!("{layout} on {}: {e}", dev.name()));
            let want: Vec<f32> = x
                .chunks(8)
                .map(|r| {
                    r.iter()
                        .zip(&w)
                        .map(|(a, b)| (*a as f64 * *b as f64 + 0.5).tanh())
                        .sum::<f64>() as f32
                })
                .collect();
            assert_f32s(
                &host(&outs[0]),
                &want,
                Tol::REDUCE,
                &format!("{layout} jit on {}", dev.name()),
            );
            // Eager ops on the device, read back.
            let e = (Tensor::from(&xa) * 3.0 - Tensor::from(&xa)).sum_all();
            let sum: f64 = x.iter().map(|v| *v as f64 * 2.0).sum();
            assert_f32s(
                &host(&e.to_array().unwrap()),
                &[sum as f32],
                Tol::REDUCE,
                &format!("{layout} eager on {}", dev.name()),
            );
            checked += 2;
            // Some results stay in the thread-local with the runtime, the rest are dropped here.
            kept.push(outs[1].clone());
            kept.push(e.to_array().unwrap());
            drop(outs);
        }
        if devs.len() == 2 {
            let p = pmap(centered as PlainFn).axis_name("i").devices(&devs);
            let n = 5;
            let x = f32s(2 * n, 1200 + k as u64, -3.0, 3.0);
            let outs = p
                .call(&[Array::from_vec(x.clone(), &[2, n]).unwrap()])
                .unwrap_or_else(|e| panic!("{layout} pmap: {e}"));
            let sq: f64 = x.iter().map(|v| *v as f64 * *v as f64).sum();
            assert_f32s(
                &host(&outs[1]),
                &[sq as f32, sq as f32],
                Tol::REDUCE,
                &format!("{layout} pmap psum"),
            );
            checked += 1;
            kept.extend(outs);
        }
        KEPT.with(|r| r.borrow_mut().push((rt, kept)));
    }
    checked
}

/// A thread that keeps runtimes (Vulkan, GL and cpu devices) and arrays in a `thread_local!` and
/// ends after heavy use drops them in its thread-local destructors: that must not panic (a panic
/// there aborts the whole process, which fails this binary loudly).
#[test]
fn runtimes_kept_in_a_thread_local_drop_cleanly_at_thread_exit() {
    let h = std::thread::Builder::new()
        .name("kept runtimes".into())
        .spawn(use_kept_runtimes)
        .unwrap();
    assert_eq!(h.join().expect("the worker thread panicked"), 3 * 2 * 2 + 3);
}
