//! Device layer against real adapters: on CI and dev machines these are Mesa's software drivers,
//! lavapipe (Vulkan) and llvmpipe (GL through EGL). Both are required here: a missing adapter is a
//! failure with the packages to install, never a skip.

use std::sync::{Arc, OnceLock};

use brigade::device::{DeviceLayout, Dispatch, Runtime, download_all, validate_wgsl};
use brigade::{DType, Error, HostData};

fn block<F: std::future::Future>(f: F) -> F::Output {
    pollster::block_on(f)
}

fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

/// One runtime shared by the tests: two logical devices on every adapter.
fn shared() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        init_log();
        block(
            Runtime::builder()
                .devices_per_adapter(2)
                .allow_cpu_fallback(false)
                .build(),
        )
        .unwrap_or_else(|e| panic!("no GPU runtime: {e}. {INSTALL}"))
    })
}

const INSTALL: &str = "This test needs Mesa's software drivers: \
    apt-get install -y mesa-vulkan-drivers libvulkan1 libegl1 libegl-mesa0 libgl1-mesa-dri \
    (lavapipe for Vulkan, llvmpipe for GL through EGL)";

/// y[i] = x[i] * 2 + i, over the first `arrayLength(&y)` elements.
const AFFINE: &str = "
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i < arrayLength(&y)) {
        y[i] = x[i] * 2.0 + f32(i);
    }
}
";

fn inputs(n: usize, seed: u32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| {
            ((i.wrapping_mul(2654435761).wrapping_add(seed) >> 7) % 2001) as f32 * 0.125 - 125.0
        })
        .collect()
}

fn affine_on_host(x: &[f32]) -> Vec<f32> {
    x.iter()
        .enumerate()
        .map(|(i, &v)| v * 2.0 + i as f32)
        .collect()
}

fn workgroups(n: usize) -> [u32; 3] {
    [n.div_ceil(64) as u32, 1, 1]
}

#[test]
fn finds_vulkan_and_gl_llvmpipe() {
    let rt = shared();
    let adapters = rt.adapters();
    let listing: Vec<String> = adapters.iter().map(|a| a.to_string()).collect();
    for backend in ["vulkan", "gl"] {
        assert!(
            adapters
                .iter()
                .any(|a| a.backend == backend && a.name.contains("llvmpipe")),
            "no {backend} llvmpipe adapter among {listing:?}. {INSTALL}"
        );
    }
    // Two devices per adapter, numbered in order, each reporting its adapter.
    assert_eq!(rt.devices().len(), 2 * adapters.len());
    for (i, d) in rt.devices().iter().enumerate() {
        let info = d.info();
        assert_eq!(info.index, i);
        assert_eq!(d.index(), i);
        assert!(!d.is_cpu());
        let a = &adapters[info.adapter_index];
        assert_eq!(
            (a.name.as_str(), a.backend.as_str()),
            (info.adapter_name.as_str(), info.backend.as_str())
        );
        assert!(
            ["cpu", "integrated", "discrete", "virtual", "other"]
                .contains(&info.device_type.as_str())
        );
        // Requested with the adapter's limits, not wgpu's defaults (128 MiB binding on lavapipe).
        assert_eq!(info.limits, a.limits);
        assert!(
            info.limits.max_storage_buffer_binding_size >= 128 << 20,
            "{info}"
        );
        let line = info.to_string();
        assert!(
            !line.contains('\n')
                && line.contains(&info.backend)
                && line.contains(&info.adapter_name),
            "{line}"
        );
    }
    // Devices from one adapter are distinct.
    assert_ne!(rt.devices()[0], rt.devices()[1]);
    assert_eq!(rt.devices()[0], rt.devices()[0].clone());
}

#[test]
fn two_devices_per_adapter_run_a_kernel() {
    let rt = shared();
    // Every device on its own thread, at the same time.
    std::thread::scope(|s| {
        for (k, dev) in rt.devices().iter().enumerate() {
            s.spawn(move || {
                let n = 1000 + 37 * k; // not a multiple of the workgroup size
                let x = inputs(n, k as u32);
                let xb = dev.upload(&HostData::F32(x.clone())).unwrap();
                let yb = dev.alloc(4 * n as u64).unwrap();
                let kernel = dev.kernel("affine", AFFINE).unwrap();
                assert_eq!(kernel.bindings().len(), 2);
                assert_eq!(kernel.workgroup_size(), [64, 1, 1]);
                dev.run(&[Dispatch {
                    kernel: &kernel,
                    buffers: vec![&xb, &yb],
                    workgroups: workgroups(n),
                }])
                .unwrap();
                let got = block(dev.download(&yb, DType::F32, n)).unwrap();
                assert_eq!(got, HostData::F32(affine_on_host(&x)), "device {dev}");
            });
        }
    });
}

#[test]
fn submit_everywhere_then_read_everything() {
    let rt = shared();
    let n = 300;
    let mut reads = Vec::new();
    let mut want = Vec::new();
    let before = brigade::counters();
    for (k, dev) in rt.devices().iter().enumerate() {
        let x = inputs(n, 100 + k as u32);
        let xb = dev.upload(&HostData::F32(x.clone())).unwrap();
        let yb = dev.alloc(4 * n as u64).unwrap();
        let zb = dev.alloc(4 * n as u64).unwrap();
        let kernel = dev.kernel("affine", AFFINE).unwrap();
        // Two chained dispatches in one pass: z = (x*2+i)*2+i. A zero-count dispatch is skipped.
        dev.submit_only(&[
            Dispatch {
                kernel: &kernel,
                buffers: vec![&xb, &yb],
                workgroups: workgroups(n),
            },
            Dispatch {
                kernel: &kernel,
                buffers: vec![&xb, &zb],
                workgroups: [0, 1, 1],
            },
            Dispatch {
                kernel: &kernel,
                buffers: vec![&yb, &zb],
                workgroups: workgroups(n),
            },
        ])
        .unwrap();
        want.push(HostData::F32(affine_on_host(&affine_on_host(&x))));
        want.push(HostData::F32(x.clone()));
        reads.push((dev.clone(), zb, DType::F32, n));
        reads.push((dev.clone(), xb, DType::F32, n));
    }
    let got = block(download_all(&reads)).unwrap();
    assert_eq!(got, want);
    let work = brigade::counters().since(&before);
    let ndev = rt.devices().len() as u64;
    assert_eq!(work.dispatches, 2 * ndev);
    assert_eq!(
        work.submits,
        2 * ndev,
        "one run submit and one download submit per device"
    );
    assert_eq!(work.bytes_uploaded, ndev * 4 * n as u64);
    assert_eq!(work.bytes_downloaded, ndev * 2 * 4 * n as u64);
    for d in rt.devices() {
        d.wait().unwrap();
        block(d.idle()).unwrap();
    }
}

#[test]
fn round_trips_every_dtype() {
    let rt = shared();
    let cases = [
        HostData::F32(vec![
            0.0,
            -0.0,
            1.5,
            -3.25e-7,
            f32::MAX,
            f32::MIN_POSITIVE,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ]),
        HostData::I32(vec![0, 1, -1, i32::MIN, i32::MAX, 123_456_789, -987_654]),
        HostData::U32(vec![0, 1, u32::MAX, 0x8000_0000, 42, 7]),
        HostData::Bool(vec![true, false, false, true, true]),
        HostData::F32(vec![]),
        HostData::I32((0..5000).map(|i| i * i - 7 * i).collect()),
    ];
    for dev in rt.devices() {
        let bufs: Vec<_> = cases.iter().map(|c| dev.upload(c).unwrap()).collect();
        for (c, b) in cases.iter().zip(&bufs) {
            assert_eq!(b.size(), (4 * c.len() as u64).max(4));
            assert_eq!(
                &block(dev.download(b, c.dtype(), c.len())).unwrap(),
                c,
                "{dev}"
            );
        }
        // The same reads in one submit.
        let reads: Vec<_> = cases
            .iter()
            .zip(&bufs)
            .map(|(c, b)| (&**b, c.dtype(), c.len()))
            .collect();
        assert_eq!(block(dev.download_many(&reads)).unwrap(), cases.to_vec());
        // NaN keeps its bits.
        let nan = f32::from_bits(0x7fc0_1234);
        let b = dev.upload(&HostData::F32(vec![nan])).unwrap();
        match dev.download_blocking(&b, DType::F32, 1).unwrap() {
            HostData::F32(v) => assert_eq!(v[0].to_bits(), nan.to_bits()),
            other => panic!("{other:?}"),
        }
        // Reinterpreting is allowed; reading more than the buffer holds is not.
        assert_eq!(
            block(dev.download(&bufs[2], DType::I32, 3)).unwrap(),
            HostData::I32(vec![0, 1, -1])
        );
        assert!(matches!(
            block(dev.download(&bufs[2], DType::U32, 7)),
            Err(Error::Transfer { .. })
        ));
    }
}

#[test]
fn too_big_is_over_limit_not_a_panic() {
    let rt = shared();
    for dev in rt.devices() {
        let lim = dev.limits();
        // Arrays over one binding are bound in segments, over one buffer stored in parts
        // (tests/parts.rs): 32-bit element indexing (2^32 - 1 elements of 4 bytes) refuses.
        let max = u32::MAX as u64 * 4;
        for bytes in [max + 1, u64::MAX] {
            match dev.alloc(bytes) {
                Err(Error::OverLimit {
                    needed,
                    limit,
                    limit_name,
                    ..
                }) => {
                    assert_eq!((needed, limit), (bytes, max));
                    assert!(limit_name.contains("32-bit"), "{limit_name}");
                }
                other => panic!("alloc({bytes}) on {dev}: {other:?}"),
            }
        }
        let msg = dev.alloc(max + 1).unwrap_err().to_string();
        assert!(
            msg.contains(&(max + 1).to_string()) && msg.contains(&max.to_string()),
            "{msg}"
        );
        // Dispatches beyond the workgroup-count limit are refused before anything is recorded.
        let k = dev.kernel("affine", AFFINE).unwrap();
        let b = dev.alloc(16).unwrap();
        let too_many = lim.max_compute_workgroups_per_dimension + 1;
        match dev.run(&[Dispatch {
            kernel: &k,
            buffers: vec![&b, &b],
            workgroups: [too_many, 1, 1],
        }]) {
            Err(Error::OverLimit {
                limit_name: "max_compute_workgroups_per_dimension",
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn wgsl_errors_are_compile_errors() {
    let rt = shared();
    let broken = "@compute @workgroup_size(1) fn main() { let x = ; }";
    let want_message = match validate_wgsl("broken", broken) {
        Err(Error::Compile {
            kernel,
            message,
            wgsl,
        }) => {
            assert_eq!(kernel, "broken");
            assert_eq!(wgsl, broken);
            assert!(message.contains("expected"), "{message}");
            message
        }
        other => panic!("{other:?}"),
    };
    for dev in rt.devices() {
        let before = brigade::counters();
        match dev.kernel("broken", broken) {
            Err(e @ Error::Compile { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains(&want_message) && text.contains(broken),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(brigade::counters().since(&before).pipelines_created, 0);
    }
    validate_wgsl("affine", AFFINE).unwrap();
}

#[test]
fn kernels_are_cached_by_text() {
    let rt = shared();
    // A text no other test uses, so this thread's counter sees exactly one compile per device.
    let src = format!("{AFFINE}\n// cache test");
    for dev in rt.devices() {
        let before = brigade::counters();
        let a = dev.kernel("affine-cached", &src).unwrap();
        let b = dev.kernel("affine-cached", &src).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(
            brigade::counters().since(&before).pipelines_created,
            1,
            "{dev}"
        );
    }
    // Kernels are per device: one compiled elsewhere is refused.
    let (d0, d1) = (&rt.devices()[0], &rt.devices()[1]);
    let k0 = d0.kernel("affine-cached", &src).unwrap();
    let b1 = d1.alloc(64).unwrap();
    assert!(matches!(
        d1.run(&[Dispatch {
            kernel: &k0,
            buffers: vec![&b1, &b1],
            workgroups: [1, 1, 1]
        }]),
        Err(Error::Wgpu { .. })
    ));
    // So are buffers, and the buffer count must match the bindings.
    let k1 = d1.kernel("affine-cached", &src).unwrap();
    let b0 = d0.alloc(64).unwrap();
    let out = d1.alloc(64).unwrap();
    assert!(matches!(
        d1.run(&[Dispatch {
            kernel: &k1,
            buffers: vec![&b0, &out],
            workgroups: [1, 1, 1]
        }]),
        Err(Error::Wgpu { .. })
    ));
    assert!(matches!(
        d1.run(&[Dispatch {
            kernel: &k1,
            buffers: vec![&out],
            workgroups: [1, 1, 1]
        }]),
        Err(Error::Wgpu { .. })
    ));
}

#[test]
fn unused_declared_bindings_still_bind_in_order() {
    let rt = shared();
    let src = "
        @group(0) @binding(0) var<storage, read> unused: array<f32>;
        @group(0) @binding(1) var<storage, read_write> y: array<u32>;
        @compute @workgroup_size(32)
        fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
            if (gid.x < arrayLength(&y)) { y[gid.x] = gid.x * gid.x + 3u; }
        }";
    for dev in rt.devices() {
        let k = dev.kernel("squares", src).unwrap();
        let a = dev.alloc(4).unwrap();
        let y = dev.alloc(4 * 70).unwrap();
        dev.run(&[Dispatch {
            kernel: &k,
            buffers: vec![&a, &y],
            workgroups: [3, 1, 1],
        }])
        .unwrap();
        let want: Vec<u32> = (0..70).map(|i| i * i + 3).collect();
        assert_eq!(
            dev.download_blocking(&y, DType::U32, 70).unwrap(),
            HostData::U32(want)
        );
    }
}

#[test]
fn layout_strings() {
    init_log();
    // `N`: N devices on the preferred adapter (Vulkan here).
    let rt = block(Runtime::builder().layout_str("2").build()).unwrap();
    let backends: Vec<&str> = rt
        .devices()
        .iter()
        .map(|d| d.info().backend.as_str())
        .collect();
    assert_eq!(backends, ["vulkan", "vulkan"]);
    assert_eq!(rt.layout(), &DeviceLayout::Count(2));

    let rt = block(Runtime::builder().layout_str("vulkan:2,gl:1").build()).unwrap();
    let backends: Vec<&str> = rt
        .devices()
        .iter()
        .map(|d| d.info().backend.as_str())
        .collect();
    assert_eq!(backends, ["vulkan", "vulkan", "gl"]);
    assert!(rt.devices().iter().enumerate().all(|(i, d)| d.index() == i));

    // Subset picks from the layout and renumbers.
    let rt = block(
        Runtime::builder()
            .layout_str("vulkan:2,gl:1")
            .subset(&[2, 0])
            .build(),
    )
    .unwrap();
    let backends: Vec<&str> = rt
        .devices()
        .iter()
        .map(|d| d.info().backend.as_str())
        .collect();
    assert_eq!(backends, ["gl", "vulkan"]);
    assert_eq!(rt.devices()[0].index(), 0);

    // Backend filter.
    let rt = block(Runtime::builder().backends(&["gl"]).build()).unwrap();
    assert!(rt.devices().iter().all(|d| d.info().backend == "gl") && !rt.devices().is_empty());

    // cpu:N needs no adapter; GPU calls there are refused with a typed error.
    let rt = block(Runtime::builder().layout_str("cpu:3").build()).unwrap();
    assert_eq!(rt.devices().len(), 3);
    assert!(
        rt.devices()
            .iter()
            .all(|d| d.is_cpu() && d.info().backend == "cpu" && d.info().device_type == "cpu")
    );
    assert!(rt.adapters().is_empty());
    assert!(matches!(
        rt.devices()[0].alloc(16),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        rt.devices()[0].kernel("affine", AFFINE),
        Err(Error::Unsupported { .. })
    ));

    for bad in ["vulkan:x", "0", "cuda:1", "vulkan:1,vulkan:1"] {
        match block(Runtime::builder().layout_str(bad).build()) {
            Err(Error::BadDeviceSpec { spec, detail }) => {
                assert!(spec == bad && !detail.is_empty(), "{bad}: {detail}")
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    match block(Runtime::builder().layout_str("metal:1").build()) {
        Err(Error::NoDevice(msg)) => assert!(
            msg.contains("metal") && msg.contains("llvmpipe") && msg.contains("vulkan"),
            "{msg}"
        ),
        other => panic!("metal:1: {other:?}"),
    }
    match block(
        Runtime::builder()
            .layout_str("vulkan:1")
            .subset(&[1])
            .build(),
    ) {
        Err(Error::BadDeviceSpec { .. }) => {}
        other => panic!("{other:?}"),
    }
    match block(Runtime::builder().backends(&["opencl"]).build()) {
        Err(Error::BadDeviceSpec { detail, .. }) => assert!(detail.contains("opencl"), "{detail}"),
        other => panic!("{other:?}"),
    }
    // Parsing alone.
    assert_eq!(
        "cpu:3".parse::<DeviceLayout>().unwrap().to_string(),
        "cpu:3"
    );
}

#[test]
fn pool_reuses_freed_buffers() {
    init_log();
    let rt = block(Runtime::builder().layout_str("vulkan:1").build()).unwrap();
    let dev = &rt.devices()[0];
    let s0 = dev.pool_stats();
    assert_eq!((s0.created, s0.reused, s0.buffers_held), (0, 0, 0));
    let a = dev.alloc(1000).unwrap();
    assert_eq!(a.size(), 1000);
    assert_eq!(a.capacity(), 1024);
    assert_eq!(dev.pool_stats().buffers_in_use, 1);
    drop(a);
    let s1 = dev.pool_stats();
    assert_eq!(
        (s1.buffers_held, s1.bytes_held, s1.buffers_in_use),
        (1, 1024, 0)
    );
    let b = dev.alloc(1000).unwrap();
    let s2 = dev.pool_stats();
    assert_eq!((s2.created, s2.reused, s2.buffers_held), (1, 1, 0), "{s2}");
    // A size in the same bucket reuses too; a different bucket does not.
    drop(b);
    let c = dev.alloc(900).unwrap();
    let d = dev.alloc(5000).unwrap();
    let s3 = dev.pool_stats();
    assert_eq!(
        (s3.created, s3.reused, s3.buffers_in_use),
        (2, 2, 2),
        "{s3}"
    );
    // A reused buffer still works, and zero-size arrays get a buffer.
    dev.write(&c, &HostData::U32(vec![9; 225])).unwrap();
    assert_eq!(
        dev.download_blocking(&c, DType::U32, 225).unwrap(),
        HostData::U32(vec![9; 225])
    );
    let z = dev.alloc(0).unwrap();
    assert_eq!(z.size(), 4);
    let zeroed = dev.alloc_zeroed(1000).unwrap();
    assert_eq!(
        dev.download_blocking(&zeroed, DType::U32, 250).unwrap(),
        HostData::U32(vec![0; 250])
    );
    drop((c, d, z, zeroed));
    assert_eq!(dev.pool_stats().buffers_in_use, 0);
    dev.trim_pool();
    assert_eq!(dev.pool_stats().bytes_held, 0);
}

#[test]
fn a_destroyed_device_reports_lost() {
    init_log();
    let rt = block(Runtime::builder().layout_str("gl:1").build()).unwrap();
    let dev = rt.devices()[0].clone();
    let buf = dev.upload(&HostData::F32(vec![1.0; 8])).unwrap();
    dev.destroy();
    assert!(dev.is_lost());
    assert!(matches!(dev.alloc(16), Err(Error::DeviceLost { .. })));
    assert!(matches!(
        dev.kernel("affine", AFFINE),
        Err(Error::DeviceLost { .. })
    ));
    assert!(matches!(
        block(dev.download(&buf, DType::F32, 8)),
        Err(Error::DeviceLost { .. })
    ));
    assert!(matches!(dev.wait(), Err(Error::DeviceLost { .. })));
    drop(buf);
}

#[test]
fn no_adapter_falls_back_to_one_cpu_device() {
    init_log();
    // No DX12 adapter exists on Linux: an `auto` layout over DX12 only finds nothing.
    let rt = block(Runtime::builder().backends(&["dx12"]).build()).unwrap();
    assert_eq!(rt.devices().len(), 1);
    assert!(rt.devices()[0].is_cpu());
    match block(
        Runtime::builder()
            .backends(&["dx12"])
            .allow_cpu_fallback(false)
            .build(),
    ) {
        Err(Error::NoDevice(msg)) => assert!(msg.contains("dx12"), "{msg}"),
        other => panic!("{other:?}"),
    }
    // An explicit backend that is missing is an error even with fallback on.
    assert!(matches!(
        block(
            Runtime::builder()
                .backends(&["dx12"])
                .layout_str("dx12:1")
                .build()
        ),
        Err(Error::NoDevice(_))
    ));
}

#[test]
fn global_runtime_is_created_once() {
    init_log();
    let a = Runtime::global().unwrap();
    let b = Runtime::global().unwrap();
    assert_eq!(a.devices(), b.devices());
    assert!(!a.devices().is_empty());
    // The first global stays.
    let other = block(Runtime::builder().layout_str("cpu:1").build()).unwrap();
    assert!(Runtime::set_global(other).is_err());
    assert_eq!(
        block(brigade::device::init()).unwrap().devices(),
        a.devices()
    );
}

/// Large writes go through reused staging buffers: many back-to-back uploads of different data
/// (more than the staging cache holds, of two sizes) must each arrive intact, with no write
/// overtaking or overwriting another.
#[test]
fn large_uploads_through_reused_staging_arrive_intact() {
    for dev in shared().devices().iter().filter(|d| !d.is_cpu()) {
        let mut placed = Vec::new();
        for i in 0..7u32 {
            // 1.5 MiB and 2 MiB: both above the staged-write threshold, in different buckets.
            let n = if i % 2 == 0 { 3 << 17 } else { 1 << 19 };
            let data: Vec<u32> = (0..n as u32)
                .map(|k| k.wrapping_mul(2654435761) ^ i)
                .collect();
            let buf = dev.upload(&HostData::U32(data.clone())).unwrap();
            placed.push((buf, data));
        }
        // Overwrite one buffer in place after the others were queued.
        let (first, _) = &placed[0];
        let again: Vec<u32> = (0..(3u32 << 17)).map(|k| k ^ 0xA5A5_A5A5).collect();
        dev.write(first, &HostData::U32(again.clone())).unwrap();
        placed[0].1 = again;
        for (i, (buf, want)) in placed.iter().enumerate() {
            let got = dev.download_blocking(buf, DType::U32, want.len()).unwrap();
            assert!(
                got == HostData::U32(want.clone()),
                "upload {i} on {} came back changed",
                dev.name()
            );
        }
    }
}
