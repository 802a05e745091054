//! Device loss is named right.
//!
//! wgpu drops every call on a device it has invalidated (`wgpu::Device::destroy`, a driver reset)
//! without an error and reports the loss only from a later poll, once the device's queue is
//! empty. brigade asks wgpu (one poll) before work and after any failure, so that every call on a
//! lost device returns `Error::DeviceLost` naming it and `is_lost()` turns true, while the other
//! devices of the mesh and a new `Runtime` keep working.
//!
//! Each test builds its own runtime (never the shared one: a destroyed device stays destroyed).
//! Data holds NaN, ±inf, ±0 and a value whose double overflows; expected values are computed on
//! the host with f32 IEEE arithmetic: `x * 2 + 1` is exact for every value used (or overflows to
//! inf under either rounding order), and a psum is compared with the sum in device order within
//! `Tol::ARITH` (NaN matches NaN, infinities must be equal).

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use brigade::{Array, DType, Device, Error, HostArray, HostData, Runtime, Tensor, jit, pmap, psum};
use common::*;

fn fresh(layout: &str) -> Runtime {
    let _ = env_logger::builder().is_test(true).try_init();
    pollster::block_on(
        Runtime::builder()
            .layout_str(layout)
            .allow_cpu_fallback(false)
            .build(),
    )
    .unwrap_or_else(|e| panic!("no runtime for layout {layout}: {e}. {INSTALL}"))
}

/// The values every input cycles through: NaN, ±inf, ±0, finite values, one that overflows when
/// doubled.
const SPECIAL: [f32; 8] = [
    1.5,
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    0.0,
    -0.0,
    -2.25,
    3.0e38,
];

/// Row `r` of a `rows x n` input: `SPECIAL` shifted by `r`, so columns mix inf with -inf and NaN.
fn rows(rows: usize, n: usize) -> Vec<f32> {
    (0..rows)
        .flat_map(|r| (0..n).map(move |j| SPECIAL[(j + r) % SPECIAL.len()]))
        .collect()
}

fn affine(x: &[Tensor]) -> Vec<Tensor> {
    vec![
        x[0].mul(&Tensor::scalar(2.0f32))
            .add(&Tensor::scalar(1.0f32)),
    ]
}

/// The parallel program: `x * 2 + 1` and `psum(x)` per device.
fn parallel_body(x: &[Tensor]) -> Vec<Tensor> {
    vec![
        x[0].mul(&Tensor::scalar(2.0f32))
            .add(&Tensor::scalar(1.0f32)),
        psum(&x[0], "i"),
    ]
}

fn want_affine(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| v * 2.0 + 1.0).collect()
}

/// Column sums of a `rows x n` matrix in row (device) order, replicated on every row.
fn want_psum(x: &[f32], rows: usize, n: usize) -> Vec<f32> {
    let sums: Vec<f32> = (0..n)
        .map(|j| (0..rows).fold(0.0f32, |s, r| s + x[r * n + j]))
        .collect();
    (0..rows).flat_map(|_| sums.iter().copied()).collect()
}

/// Run the parallel program over `devices` on a `devices.len() x n` input.
fn run_pmap(devices: &[Device], n: usize) -> Result<Vec<HostArray>, Error> {
    let k = devices.len();
    let x = Array::from_vec(rows(k, n), &[k, n])?;
    let outs = pmap(parallel_body)
        .axis_name("i")
        .devices(devices)
        .call(&[x])?;
    outs.iter().map(|o| o.to_host()).collect()
}

/// [`run_pmap`], checking the values.
fn check_pmap(devices: &[Device], n: usize, what: &str) {
    let k = devices.len();
    let outs = run_pmap(devices, n).unwrap_or_else(|e| panic!("{what}: {e}"));
    let x = rows(k, n);
    assert_f32s(
        &outs[0],
        &want_affine(&x),
        Tol::EXACT,
        &format!("{what}: x*2+1"),
    );
    assert_f32s(
        &outs[1],
        &want_psum(&x, k, n),
        Tol::ARITH,
        &format!("{what}: psum"),
    );
}

/// `x * 2 + 1` with jit on `dev`, checked.
fn check_jit(dev: &Device, what: &str) {
    let x = rows(1, 64);
    let out = jit(affine)
        .on(dev)
        .call(&[Array::from_vec(x.clone(), &[64]).unwrap()])
        .and_then(|o| o[0].to_host())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_f32s(&out, &want_affine(&x), Tol::EXACT, what);
}

/// `r` must be `Error::DeviceLost` naming `dev`.
fn assert_lost<T: std::fmt::Debug>(r: Result<T, Error>, dev: &Device, what: &str) {
    match r {
        Err(Error::DeviceLost { device, reason }) => {
            assert_eq!(device, dev.name(), "{what}: names another device");
            assert!(!reason.is_empty(), "{what}: no reason given");
        }
        other => panic!(
            "{what}: expected DeviceLost for {}, got {other:?}",
            dev.name()
        ),
    }
}

#[derive(Clone, Copy, Debug)]
enum Destroy {
    /// `device.wgpu().0.destroy()`: behind brigade's back, like a real loss.
    Wgpu,
    /// brigade's own `Device::destroy`.
    Brigade,
}

#[derive(Clone, Copy, Debug)]
enum FirstCall {
    Upload,
    DevicePut,
    Readback,
    Eager,
    Jit,
    Kernel,
    Pmap,
    Wait,
}

const DOUBLE_WGSL: &str = "@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (i.x < arrayLength(&y)) { y[i.x] = 2.0 * y[i.x]; }
}";

/// On a fresh `vulkan:1,gl:1` runtime: destroy device `lost` after a pmap over both and a
/// readback, then make `call` the first call touching it: it must be DeviceLost naming the
/// device, `is_lost()` must be true, and the other device must still compute right.
fn first_call_after_loss(lost: usize, destroy: Destroy, call: FirstCall) {
    let rt = fresh("vulkan:1,gl:1");
    let devs = rt.devices().to_vec();
    let (dev, other) = (&devs[lost], &devs[1 - lost]);
    let what = format!("{} destroyed by {destroy:?}, then {call:?}", dev.name());
    let _gl = device_guard(&devs[1]);
    check_pmap(&devs, 8, &format!("{what}: before"));
    let data = rows(1, 16);
    let on_dev = brigade::device_put(&Array::from_vec(data.clone(), &[16]).unwrap(), dev).unwrap();
    assert_f32s(
        &host(&on_dev),
        &data,
        Tol::EXACT,
        &format!("{what}: readback before"),
    );
    let raw_buf = dev.upload(&HostData::F32(data.clone())).unwrap();
    match destroy {
        Destroy::Wgpu => dev.wgpu().expect("a GPU device").0.destroy(),
        Destroy::Brigade => dev.destroy(),
    }
    let host_x = Array::from_vec(data.clone(), &[16]).unwrap();
    match call {
        FirstCall::Upload => assert_lost(dev.upload(&HostData::F32(data)), dev, &what),
        FirstCall::DevicePut => assert_lost(brigade::device_put(&host_x, dev), dev, &what),
        FirstCall::Readback => assert_lost(on_dev.to_host(), dev, &what),
        FirstCall::Eager => {
            let t: Tensor = on_dev.clone().into();
            let y = t.mul(&t);
            assert_lost(y.to_array().and_then(|a| a.to_host()), dev, &what);
        }
        FirstCall::Jit => assert_lost(jit(affine).on(dev).call(&[host_x]), dev, &what),
        FirstCall::Kernel => assert_lost(dev.kernel("double", DOUBLE_WGSL), dev, &what),
        FirstCall::Pmap => assert_lost(run_pmap(&devs, 8), dev, &what),
        FirstCall::Wait => assert_lost(dev.wait(), dev, &what),
    }
    assert!(dev.is_lost(), "{what}: is_lost() stays false");
    assert!(!other.is_lost(), "{what}: the other device counts as lost");
    // Every later call fails the same way, and a download of an empty array too.
    assert_lost(dev.alloc(64), dev, &format!("{what}, then alloc"));
    assert_lost(
        pollster::block_on(dev.download(&raw_buf, DType::F32, 16)),
        dev,
        &format!("{what}, then download"),
    );
    check_jit(other, &format!("{what}: the other device"));
    drop((on_dev, raw_buf));
}

const FIRST_CALLS: [FirstCall; 8] = [
    FirstCall::Upload,
    FirstCall::DevicePut,
    FirstCall::Readback,
    FirstCall::Eager,
    FirstCall::Jit,
    FirstCall::Kernel,
    FirstCall::Pmap,
    FirstCall::Wait,
];

#[test]
fn first_call_after_a_wgpu_destroy_is_device_lost_on_vulkan() {
    for call in FIRST_CALLS {
        first_call_after_loss(0, Destroy::Wgpu, call);
    }
}

#[test]
fn first_call_after_a_wgpu_destroy_is_device_lost_on_gl() {
    for call in FIRST_CALLS {
        first_call_after_loss(1, Destroy::Wgpu, call);
    }
}

#[test]
fn first_call_after_device_destroy_is_device_lost() {
    for call in FIRST_CALLS {
        first_call_after_loss(0, Destroy::Brigade, call);
        first_call_after_loss(1, Destroy::Brigade, call);
    }
}

/// Four lavapipe devices; device 2 destroyed between two pmap calls (behind brigade's back).
#[test]
fn loss_between_pmap_calls_leaves_the_rest_of_the_mesh_working() {
    let rt = fresh("vulkan:4");
    let devs = rt.devices().to_vec();
    check_pmap(&devs, 256, "4 devices before the loss");
    let lost = &devs[2];
    let placed = brigade::device_put(&Array::from_vec(rows(1, 8), &[8]).unwrap(), lost).unwrap();
    lost.wgpu().unwrap().0.destroy();

    assert_lost(
        run_pmap(&devs, 256),
        lost,
        "pmap over 4 devices after the loss",
    );
    assert!(lost.is_lost());
    for (i, d) in devs.iter().enumerate() {
        assert_eq!(d.is_lost(), i == 2, "is_lost of device {i}");
    }
    // Everything on the lost device fails, naming it.
    assert_lost(placed.to_host(), lost, "readback");
    assert_lost(lost.upload(&HostData::F32(vec![1.0; 8])), lost, "upload");
    let t: Tensor = placed.clone().into();
    assert_lost(t.add(&t).to_array(), lost, "eager add");
    assert_lost(
        jit(affine)
            .on(lost)
            .call(&[Array::from_vec(rows(1, 8), &[8]).unwrap()]),
        lost,
        "jit",
    );
    // The three others still run a pmap (and again), and a single-device jit.
    let rest = [devs[0].clone(), devs[1].clone(), devs[3].clone()];
    check_pmap(&rest, 256, "pmap over the 3 remaining devices");
    check_pmap(&rest, 1000, "a second pmap over the 3 remaining devices");
    check_jit(&devs[3], "jit on device 3");
    // A new runtime gets new devices.
    let rt2 = fresh("vulkan:4");
    assert!(rt2.devices().iter().all(|d| !d.is_lost()));
    check_pmap(rt2.devices(), 256, "a new runtime");
    drop(placed);
}

/// What the worker thread of the concurrent test reports.
enum Report {
    Started,
    /// The first error, after `calls` correct calls.
    Failed {
        calls: usize,
        error: Error,
    },
    /// No error in this many calls.
    NeverFailed(usize),
}

/// Four lavapipe devices; device 1 destroyed from another thread while a loop of pmap calls (each
/// read back and checked) runs, at several delays after the first call so that the destroy lands
/// in different phases of a call. Every call either returns correct values or, from some call on,
/// DeviceLost naming device 1; the loop never hangs (a watchdog bounds it) or panics.
#[test]
fn loss_during_pmap_calls_is_device_lost_and_never_hangs() {
    for delay_ms in [0, 2, 7, 15, 40] {
        loss_during_pmap_calls(Duration::from_millis(delay_ms));
    }
}

fn loss_during_pmap_calls(delay: Duration) {
    const N: usize = 1 << 15;
    const MAX_CALLS: usize = 2000;
    let rt = fresh("vulkan:4");
    let devs = rt.devices().to_vec();
    let raw = devs[1].wgpu().unwrap().0.clone();
    let (tx, rx) = mpsc::channel();
    let worker = {
        let devs = devs.clone();
        std::thread::spawn(move || {
            let x = rows(4, N);
            let (w_aff, w_sum) = (want_affine(&x), want_psum(&x, 4, N));
            for calls in 0..MAX_CALLS {
                match run_pmap(&devs, N) {
                    Ok(outs) => {
                        assert_f32s(&outs[0], &w_aff, Tol::EXACT, &format!("call {calls}"));
                        assert_f32s(&outs[1], &w_sum, Tol::ARITH, &format!("call {calls}"));
                        if calls == 0 {
                            let _ = tx.send(Report::Started);
                        }
                    }
                    Err(error) => {
                        let _ = tx.send(Report::Failed { calls, error });
                        return;
                    }
                }
            }
            let _ = tx.send(Report::NeverFailed(MAX_CALLS));
        })
    };
    let watchdog = Duration::from_secs(120);
    match rx.recv_timeout(watchdog) {
        Ok(Report::Started) => {}
        Ok(Report::Failed { error, .. }) => panic!("the first call failed: {error}"),
        Ok(Report::NeverFailed(_)) | Err(_) => panic!("the first call did not finish"),
    }
    // Let a few more calls start, then destroy device 1 in the middle of one.
    std::thread::sleep(delay);
    let t0 = Instant::now();
    raw.destroy();
    match rx.recv_timeout(watchdog) {
        Ok(Report::Failed { calls, error }) => {
            eprintln!(
                "device 1 destroyed {delay:?} after the first call, during call ~{calls}; the loop got {error} after {:?}",
                t0.elapsed()
            );
            assert_lost(Err::<(), _>(error), &devs[1], "the call during the loss");
        }
        Ok(Report::NeverFailed(n)) => panic!("{n} calls after the loss all succeeded"),
        Ok(Report::Started) => unreachable!(),
        Err(_) => panic!("the pmap loop hung for {watchdog:?} after the loss"),
    }
    worker.join().expect("the worker thread panicked");
    assert!(devs[1].is_lost());
    assert!(!devs[0].is_lost() && !devs[2].is_lost() && !devs[3].is_lost());
    let rest = [devs[0].clone(), devs[2].clone(), devs[3].clone()];
    check_pmap(&rest, 4096, "pmap over the 3 remaining devices");
    check_pmap(fresh("vulkan:4").devices(), 4096, "a new runtime");
}

// ---- wgpu errors are typed (the native side) --------------------------------

/// A kernel that needs 32 bytes at binding 0 (`array<f32, 8>`).
const FIXED8_WGSL: &str = "@group(0) @binding(0) var<storage, read_write> y: array<f32, 8>;
@compute @workgroup_size(1) fn main() { y[7] = 1.0; }";

/// Natively a dispatch that fails wgpu's validation (4 bytes bound where the shader needs 32) is
/// `Error::Wgpu` from the call itself, on both adapters; nothing is left for `flush_errors`, the
/// device is not counted lost, and it computes right afterwards. (In the browser the same
/// dispatch returns at once and the next await reports it: `error_capture_check` in web.rs,
/// checked by web/test/browser.mjs.)
#[test]
fn a_dispatch_failing_validation_is_error_wgpu_and_the_device_stays_usable() {
    let rt = fresh("vulkan:1,gl:1");
    for dev in rt.devices() {
        let _gl = device_guard(dev);
        let k = dev.kernel("fixed8", FIXED8_WGSL).unwrap();
        let small = dev.alloc(4).unwrap();
        let r = dev.submit_only(&[brigade::device::Dispatch {
            kernel: &k,
            buffers: vec![&small],
            workgroups: [1, 1, 1],
        }]);
        match r {
            Err(Error::Wgpu { device, message }) => {
                assert_eq!(device, dev.name());
                assert!(message.contains("fixed8"), "{message}");
            }
            other => panic!("{}: expected Error::Wgpu, got {other:?}", dev.name()),
        }
        pollster::block_on(dev.flush_errors()).unwrap();
        assert!(!dev.is_lost(), "{}", dev.name());
        let data = rows(1, 8);
        let full = dev.upload(&HostData::F32(data.clone())).unwrap();
        dev.run(&[brigade::device::Dispatch {
            kernel: &k,
            buffers: vec![&full],
            workgroups: [1, 1, 1],
        }])
        .unwrap();
        let mut want = data;
        want[7] = 1.0;
        let got = pollster::block_on(dev.download(&full, DType::F32, 8)).unwrap();
        let got = HostArray::new(vec![8], got).unwrap();
        assert_f32s(&got, &want, Tol::EXACT, dev.name());
    }
}
