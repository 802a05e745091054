//! Bring your own wgpu device: `Device::from_wgpu` and
//! `RuntimeBuilder::with_wgpu_device`, on lavapipe Vulkan and llvmpipe GL.
//!
//! The "app" here requests its devices itself, with lower limits than its adapter and no optional
//! features, and brigade must plan within them, compute what the CPU reference computes, leave
//! the app's error handlers alone, report the app's `destroy` as a typed loss, and never destroy
//! the app's device itself. Inputs are pseudo-random, non-zero, of both signs; tolerances are
//! `common::Tol`'s (exact for elementwise `x*2+1`, REDUCE for sums and matmuls).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use brigade::{
    Array, ConvOptions, Device, DeviceLimits, Error, HostData, Padding, Runtime, Tensor, grad, jit,
    pmap, psum, wgpu,
};
use common::app::adapter_of;
use common::*;

/// A device the test requested itself, as an app would.
struct AppGpu {
    _instance: wgpu::Instance,
    adapter: wgpu::Adapter,
    info: wgpu::AdapterInfo,
    device: wgpu::Device,
    queue: wgpu::Queue,
    limits: wgpu::Limits,
}

/// Lower than the adapter's: 1 MiB bindings, 2 MiB buffers, 64 workgroups per dimension, 4
/// storage buffers per stage.
fn lowered(a: &wgpu::Adapter) -> wgpu::Limits {
    let mut l = a.limits();
    l.max_storage_buffer_binding_size = 1 << 20;
    l.max_buffer_size = 2 << 20;
    l.max_compute_workgroups_per_dimension = 64;
    l.max_storage_buffers_per_shader_stage = 4;
    l
}

fn app_gpu(backend: wgpu::Backends, limits: impl FnOnce(&wgpu::Adapter) -> wgpu::Limits) -> AppGpu {
    let (instance, adapter) = adapter_of(backend);
    let limits = limits(&adapter);
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("the app's device"),
        required_features: wgpu::Features::empty(),
        required_limits: limits.clone(),
        ..Default::default()
    }))
    .unwrap_or_else(|e| panic!("the app's request_device on {backend:?} failed: {e}"));
    AppGpu {
        _instance: instance,
        info: adapter.get_info(),
        adapter,
        device,
        queue,
        limits,
    }
}

fn attach(app: &AppGpu) -> Device {
    Device::from_wgpu(app.info.clone(), app.device.clone(), app.queue.clone())
        .unwrap_or_else(|e| panic!("from_wgpu on {}: {e}", app.info.name))
}

const BACKENDS: [wgpu::Backends; 2] = [wgpu::Backends::VULKAN, wgpu::Backends::GL];

/// A program with an elementwise chain, a row sum (a reduction) and a matmul.
fn model(a: &[Tensor]) -> Vec<Tensor> {
    let y = a[0].tanh().mul(&Tensor::scalar(2.0f32)).add(&a[0]);
    vec![y.sum(1i64, false), a[0].matmul(&a[1]), y]
}

/// `(x [512, 400], w [400, 64])`: x is 800 KiB, under the lowered 1 MiB binding limit.
fn model_args() -> Vec<Array> {
    vec![rand_f32(&[512, 400], 11), rand_f32(&[400, 64], 12)]
}

/// The number in `@workgroup_size(a, b, c)` products of a kernel (1 for absent factors).
fn workgroup_invocations(wgsl: &str) -> (u32, u32) {
    let at = wgsl
        .find("@workgroup_size(")
        .unwrap_or_else(|| panic!("no @workgroup_size in\n{wgsl}"));
    let rest = &wgsl[at + "@workgroup_size(".len()..];
    let dims: Vec<u32> = rest[..rest.find(')').unwrap()]
        .split(',')
        .map(|d| d.trim().trim_end_matches('u').parse().unwrap())
        .collect();
    (dims[0], dims.iter().product())
}

/// `common::check_on` for one device whose GL guard the caller already holds (`check_on` takes
/// it itself, and the guard is not re-entrant): `f` traced, evaluated by the CPU reference, run
/// with jit on `dev`, every output compared within `tol`.
fn check_here(dev: &Device, f: fn(&[Tensor]) -> Vec<Tensor>, args: &[Array], tol: Tol) {
    let hosts: Vec<_> = args.iter().map(host).collect();
    let graph = jit(f).graph(args).unwrap();
    let want = brigade::reference::eval_graph(&graph, &hosts).unwrap();
    let outs = jit(f)
        .on(dev)
        .call(args)
        .unwrap_or_else(|e| panic!("{}: {e}", dev.name()));
    assert_eq!(outs.len(), want.len());
    for (i, (o, w)) in outs.iter().zip(&want).enumerate() {
        assert_close(&host(o), w, tol, &format!("{}: output {i}", dev.name()));
    }
}

#[test]
fn limits_and_features_come_from_the_device_and_plans_respect_them() {
    for backend in BACKENDS {
        let app = app_gpu(backend, lowered);
        let dev = attach(&app);
        let _gl = device_guard(&dev);
        let what = dev.name().to_string();
        assert!(dev.is_app_device(), "{what}");
        assert_eq!(
            *dev.limits(),
            DeviceLimits::from_wgpu(&app.limits),
            "{what}"
        );
        assert_ne!(
            *dev.limits(),
            DeviceLimits::from_wgpu(&app.adapter.limits()),
            "{what}: the lowered limits equal the adapter's, the test proves nothing"
        );
        assert_eq!(
            dev.limits().max_storage_buffer_binding_size,
            1 << 20,
            "{what}"
        );
        assert_eq!(
            dev.limits().max_compute_workgroups_per_dimension,
            64,
            "{what}"
        );

        let args = model_args();
        let program = jit(model).program(&args, &dev).unwrap();
        assert!(program.launches.len() >= 3, "{what}: {program:?}");
        for l in &program.launches {
            for (axis, &n) in l.workgroups.iter().enumerate() {
                assert!(
                    n <= 64,
                    "{what}: {} dispatches {n} workgroups on axis {axis}",
                    l.label
                );
            }
            let (x, inv) = workgroup_invocations(&l.wgsl);
            assert!(
                x <= dev.limits().max_compute_workgroup_size_x,
                "{what}: {}",
                l.label
            );
            assert!(
                inv <= dev.limits().max_compute_invocations_per_workgroup,
                "{what}: {}",
                l.label
            );
            let bindings = l.wgsl.matches("@binding(").count();
            assert!(
                bindings <= 4,
                "{what}: {} binds {bindings} buffers",
                l.label
            );
            assert!(
                !l.wgsl.contains("subgroup"),
                "{what}: {} uses subgroups the device lacks",
                l.label
            );
        }
        for (slot, &b) in program.slot_bytes.iter().enumerate() {
            assert!(
                b <= 1 << 20,
                "{what}: slot {slot} is {b} bytes, over the 1 MiB binding limit"
            );
        }
        check_here(&dev, model, &args, Tol::REDUCE);
        // brigade asked for nothing on the app's device.
        assert_eq!(app.device.features(), wgpu::Features::empty(), "{what}");
    }
}

fn square_and_sums(a: &[Tensor]) -> Vec<Tensor> {
    vec![a[0].mul(&a[0]), a[0].sum_all(), a[0].sum(1i64, false)]
}

/// The kernel gradient of `sum(conv(x, w))` (NHWC, stride 1, SAME).
fn kernel_grad(t: &[Tensor]) -> Vec<Tensor> {
    let opts = ConvOptions::new(&[1, 1], Padding::Same).dimension_numbers("NHWC", "HWIO", "NHWC");
    grad(move |p: &[Tensor]| vec![p[0].conv_general_dilated(&p[1], &opts).sum_all()])
        .argnums(&[1])
        .apply(t)
}

/// `kernel_grad` over one 300 x 300 x 4 image: each element sums about 90 000 input values in
/// [-3, 3) (the cotangent is 1), around 520 in size. Accumulated in f32 the rounding error grows
/// like eps * 1.73 * n / sqrt(2), about 7e-3; 0.05 absolute (plus 1e-4 relative) is 7 times that,
/// and a chunk of rows dropped or counted twice moves elements by tens.
const KERNEL_GRAD: Tol = Tol {
    rtol: 1e-4,
    atol: 5e-2,
};

/// Over the app's 1 MiB binding limit, elementwise kernels, reductions, a transpose, one sort
/// row of the whole flattened array (sorted over chunks of the binding, its 4 MiB merge-sort
/// state stored in parts of the app's 2 MiB buffers) and a convolution's kernel gradient over one
/// image larger than the binding run; what cannot be cut (a convolution whose kernel is over the
/// binding) is a typed error naming the limit.
#[test]
fn an_array_over_the_apps_binding_limit_is_a_typed_error() {
    for backend in BACKENDS {
        let app = app_gpu(backend, lowered);
        let dev = attach(&app);
        let _gl = device_guard(&dev);
        // 300 000 f32 = 1 200 000 bytes > 1 MiB.
        let x = rand_f32(&[600, 500], 3);
        check_here(&dev, square_and_sums, std::slice::from_ref(&x), Tol::REDUCE);
        check_here(
            &dev,
            |a: &[Tensor]| vec![a[0].transpose(&[1, 0]), a[0].reshape(&[-1]).argsort(0)],
            std::slice::from_ref(&x),
            Tol::EXACT,
        );
        // The kernel gradient of a convolution whose one batch entry (1 440 000 bytes) is over
        // the binding: partials over chunks of rows of the image, summed.
        check_here(
            &dev,
            kernel_grad,
            &[rand_f32(&[1, 300, 300, 4], 4), rand_f32(&[3, 3, 4, 5], 5)],
            KERNEL_GRAD,
        );
        // A convolution whose kernel (1 179 648 bytes) is over the binding: every block binds
        // it whole, so it cannot be cut.
        let opts =
            ConvOptions::new(&[1, 1], Padding::Same).dimension_numbers("NHWC", "HWIO", "NHWC");
        let r = jit(move |t: &[Tensor]| vec![t[0].conv_general_dilated(&t[1], &opts)])
            .on(&dev)
            .call(&[rand_f32(&[1, 8, 8, 128], 4), rand_f32(&[3, 3, 128, 256], 5)]);
        match r {
            Err(e @ Error::OverLimit { .. }) => {
                let Error::OverLimit { limit, .. } = &e else {
                    unreachable!()
                };
                assert_eq!(*limit, 1 << 20, "{e}");
                assert!(e.to_string().contains("[3, 3, 128, 256]"), "{e}");
                assert!(e.to_string().contains("kernel bound whole"), "{e}");
            }
            other => panic!(
                "{}: expected OverLimit for a kernel over the binding, got {other:?}",
                dev.name()
            ),
        }
        // The device still works after the refusal.
        check_here(&dev, model, &model_args(), Tol::REDUCE);
    }
}

#[test]
fn compute_limits_below_brigades_kernels_are_refused_by_name() {
    for backend in BACKENDS {
        let app = app_gpu(backend, |a| wgpu::Limits {
            max_compute_workgroup_size_x: 64,
            max_compute_invocations_per_workgroup: 64,
            ..a.limits()
        });
        match Device::from_wgpu(app.info.clone(), app.device.clone(), app.queue.clone()) {
            Err(Error::Unsupported { detail, .. }) => {
                assert!(
                    detail.contains("max_compute_workgroup_size_x is 64")
                        && detail.contains("max_compute_invocations_per_workgroup is 64")
                        && detail.contains("at least 256"),
                    "{detail}"
                );
            }
            Err(e) => panic!("expected Unsupported, got {e}"),
            Ok(d) => panic!("{} was accepted with 64-wide workgroups", d.name()),
        }
    }
}

/// `x * 2 + 1` and `psum(x)` over the mesh.
fn mesh_body(x: &[Tensor]) -> Vec<Tensor> {
    vec![
        x[0].mul(&Tensor::scalar(2.0f32))
            .add(&Tensor::scalar(1.0f32)),
        psum(&x[0], "i"),
    ]
}

#[test]
fn app_devices_join_a_runtime_and_a_pmap_beside_discovered_ones() {
    let app_gl = app_gpu(wgpu::Backends::GL, lowered);
    let app_vk = app_gpu(wgpu::Backends::VULKAN, lowered);
    let rt = pollster::block_on(
        Runtime::builder()
            .layout_str("vulkan:1")
            .allow_cpu_fallback(false)
            .with_wgpu_device(
                app_gl.info.clone(),
                app_gl.device.clone(),
                app_gl.queue.clone(),
            )
            .with_wgpu_device(
                app_vk.info.clone(),
                app_vk.device.clone(),
                app_vk.queue.clone(),
            )
            .build(),
    )
    .unwrap_or_else(|e| panic!("runtime with the app's devices: {e}. {INSTALL}"));
    let devs = rt.devices().to_vec();
    assert_eq!(devs.len(), 3, "{rt}");
    for (i, d) in devs.iter().enumerate() {
        assert_eq!(d.index(), i, "{rt}");
        assert_eq!(d.is_app_device(), i > 0, "{rt}");
    }
    assert_eq!(devs[1].info().backend, "gl");
    assert_eq!(devs[2].info().backend, "vulkan");
    let n_adapters = rt.adapters().len();
    assert_eq!(
        devs[1].info().adapter_index,
        n_adapters - 2,
        "{:?}",
        rt.adapters()
    );
    assert_eq!(
        devs[2].info().adapter_index,
        n_adapters - 1,
        "{:?}",
        rt.adapters()
    );
    assert_eq!(
        rt.adapters()[n_adapters - 1].limits,
        DeviceLimits::from_wgpu(&app_vk.limits)
    );
    assert_eq!(*devs[1].limits(), DeviceLimits::from_wgpu(&app_gl.limits));
    let _gl = device_guard(&devs[1]);

    // The mesh: [the app's GL device, the discovered lavapipe device, the app's Vulkan device].
    let mesh = [devs[1].clone(), devs[0].clone(), devs[2].clone()];
    let (k, n) = (mesh.len(), 1000);
    let data = f32s(k * n, 21, -3.0, 3.0);
    let x = Array::from_vec(data.clone(), &[k, n]).unwrap();
    let outs = pmap(mesh_body)
        .axis_name("i")
        .devices(&mesh)
        .call(&[x])
        .unwrap_or_else(|e| panic!("pmap over the app's and discovered devices: {e}"));
    let want_affine: Vec<f32> = data.iter().map(|v| v * 2.0 + 1.0).collect();
    let sums: Vec<f32> = (0..n)
        .map(|j| (0..k).fold(0.0f32, |s, r| s + data[r * n + j]))
        .collect();
    let want_psum: Vec<f32> = (0..k).flat_map(|_| sums.iter().copied()).collect();
    assert_f32s(&host(&outs[0]), &want_affine, Tol::EXACT, "pmap x*2+1");
    assert_f32s(&host(&outs[1]), &want_psum, Tol::ARITH, "pmap psum");

    // jit on each app device of the runtime, against the reference.
    for d in &devs[1..] {
        check_here(d, model, &model_args(), Tol::REDUCE);
    }
}

#[test]
fn a_runtime_of_app_devices_only_discovers_nothing() {
    let app = app_gpu(wgpu::Backends::VULKAN, lowered);
    let rt = pollster::block_on(
        Runtime::builder()
            .backends(&[])
            .with_wgpu_device(app.info.clone(), app.device.clone(), app.queue.clone())
            .build(),
    )
    .unwrap();
    assert_eq!(rt.devices().len(), 1, "{rt}");
    assert_eq!(rt.adapters().len(), 1, "{:?}", rt.adapters());
    let dev = &rt.devices()[0];
    assert!(dev.is_app_device() && dev.index() == 0 && dev.info().adapter_index == 0);
    check_here(dev, model, &model_args(), Tol::REDUCE);

    // Nothing to discover and nothing given, or a layout with discovery off: typed errors.
    match pollster::block_on(Runtime::builder().backends(&[]).build()) {
        Err(Error::BadDeviceSpec { detail, .. }) => {
            assert!(detail.contains("with_wgpu_device"), "{detail}")
        }
        other => panic!(
            "expected BadDeviceSpec, got {:?}",
            other.map(|r| r.to_string())
        ),
    }
    let r = pollster::block_on(
        Runtime::builder()
            .backends(&[])
            .layout_str("vulkan:1")
            .with_wgpu_device(app.info.clone(), app.device.clone(), app.queue.clone())
            .build(),
    );
    match r {
        Err(Error::BadDeviceSpec { detail, .. }) => {
            assert!(detail.contains("backends([])"), "{detail}")
        }
        other => panic!(
            "expected BadDeviceSpec, got {:?}",
            other.map(|r| r.to_string())
        ),
    }
}

#[test]
fn the_apps_error_handler_keeps_its_errors_and_brigade_keeps_its_own() {
    for backend in BACKENDS {
        let app = app_gpu(backend, lowered);
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        {
            let seen = seen.clone();
            app.device
                .on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
                    seen.lock().unwrap().push(e.to_string());
                }));
        }
        let dev = attach(&app);
        let _gl = device_guard(&dev);
        check_here(&dev, model, &model_args(), Tol::REDUCE);
        // brigade's error comes back typed from the call and never reaches the app's handler.
        match dev.kernel(
            "broken",
            "@compute @workgroup_size(64) fn main() { let x: f32 = true; }",
        ) {
            Err(Error::Compile { kernel, .. }) => assert_eq!(kernel, "broken"),
            Err(e) => panic!("{}: expected Compile, got {e}", dev.name()),
            Ok(_) => panic!("{}: broken WGSL compiled", dev.name()),
        }
        assert!(
            seen.lock().unwrap().is_empty(),
            "{}: brigade's work reached the app's handler: {:?}",
            dev.name(),
            seen.lock().unwrap()
        );
        // The app's own invalid call still reaches the app's handler (MAP_READ | MAP_WRITE
        // together needs MAPPABLE_PRIMARY_BUFFERS, which the device lacks).
        let bad = app.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("the app's bad buffer"),
            size: 16,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::MAP_WRITE,
            mapped_at_creation: false,
        });
        drop(bad);
        let got = seen.lock().unwrap().clone();
        assert_eq!(
            got.len(),
            1,
            "{}: the app's handler saw {got:?}",
            dev.name()
        );
        assert_eq!(
            dev.last_error(),
            None,
            "{}: brigade took the app's error",
            dev.name()
        );
        // brigade keeps working after the app's error.
        check_here(&dev, model, &model_args(), Tol::REDUCE);
    }
}

fn assert_lost<T: std::fmt::Debug>(r: brigade::Result<T>, dev: &Device, what: &str) -> String {
    match r {
        Err(Error::DeviceLost { device, reason }) => {
            assert_eq!(device, dev.name(), "{what}");
            reason
        }
        other => panic!(
            "{what}: expected DeviceLost for {}, got {other:?}",
            dev.name()
        ),
    }
}

#[test]
fn the_apps_destroy_is_a_typed_loss_on_brigades_next_call() {
    for backend in BACKENDS {
        let app = app_gpu(backend, lowered);
        let dev = attach(&app);
        let _gl = device_guard(&dev);
        let what = format!("{} destroyed by the app", dev.name());
        let x = rand_f32(&[4096], 5);
        let before = jit(|a: &[Tensor]| vec![a[0].mul(&a[0])])
            .on(&dev)
            .call(std::slice::from_ref(&x))
            .unwrap();
        assert!(!dev.is_lost(), "{what}: lost before the destroy");
        app.device.destroy();
        let reason = assert_lost(
            jit(|a: &[Tensor]| vec![a[0].add(&a[0])])
                .on(&dev)
                .call(std::slice::from_ref(&x)),
            &dev,
            &what,
        );
        assert!(reason.contains("destroyed"), "{what}: {reason}");
        assert!(dev.is_lost(), "{what}: is_lost() stays false");
        assert_lost(
            dev.upload(&HostData::F32(vec![1.0; 8])),
            &dev,
            &format!("{what}, upload"),
        );
        assert_lost(
            before[0].to_host(),
            &dev,
            &format!("{what}, reading an earlier result"),
        );
        assert_lost(dev.alloc(64), &dev, &format!("{what}, alloc"));
    }
}

#[test]
fn brigade_destroy_releases_the_apps_device_without_destroying_it() {
    for backend in BACKENDS {
        let app = app_gpu(backend, lowered);
        let dev = attach(&app);
        let _gl = device_guard(&dev);
        let what = format!("{} released by Device::destroy", dev.name());
        check_here(&dev, model, &model_args(), Tol::REDUCE);
        dev.destroy();
        let reason = assert_lost(dev.alloc(64), &dev, &what);
        assert!(reason.contains("stays alive"), "{what}: {reason}");

        // The app's device still works: a copy and a map of its own buffers, no error.
        let scope = app.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let data: Vec<u32> = (0..64u32).map(|i| i * 7 + 3).collect();
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        let src = app.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("the app's src"),
            size: 256,
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let dst = app.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("the app's dst"),
            size: 256,
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
            mapped_at_creation: false,
        });
        app.queue.write_buffer(&src, 0, &bytes);
        let mut enc = app.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&src, 0, &dst, 0, 256);
        app.queue.submit([enc.finish()]);
        let mapped = Arc::new(AtomicUsize::new(0));
        let m = mapped.clone();
        dst.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            m.store(if r.is_ok() { 1 } else { 2 }, Ordering::SeqCst)
        });
        app.device
            .poll(wgpu::PollType::Wait {
                submission_index: None,
                timeout: Some(std::time::Duration::from_secs(30)),
            })
            .unwrap_or_else(|e| panic!("{what}: the app's poll: {e}"));
        assert_eq!(
            mapped.load(Ordering::SeqCst),
            1,
            "{what}: the app's map failed"
        );
        let got: Vec<u32> = dst
            .slice(..)
            .get_mapped_range()
            .unwrap_or_else(|e| panic!("{what}: the app's mapped range: {e:?}"))
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, data, "{what}: the app's copy");
        dst.unmap();
        let err = pollster::block_on(scope.pop());
        assert!(err.is_none(), "{what}: the app's calls failed: {err:?}");

        // And brigade can attach to it again.
        let again = attach(&app);
        check_here(&again, model, &model_args(), Tol::REDUCE);
    }
}

#[test]
fn brigades_handlers_on_request_and_losses_the_app_reports() {
    for backend in BACKENDS {
        // Opt-in handlers: the loss is known from wgpu's callback.
        let app = app_gpu(backend, lowered);
        let dev = attach(&app);
        let _gl = device_guard(&dev);
        dev.install_wgpu_handlers().unwrap();
        check_here(&dev, model, &model_args(), Tol::REDUCE);
        app.device.destroy();
        let reason = assert_lost(
            dev.upload(&HostData::F32(vec![2.0; 8])),
            &dev,
            "after install_wgpu_handlers",
        );
        assert!(reason.contains("destroyed"), "{reason}");

        // The app keeps its own lost callback and forwards the loss.
        let app = app_gpu(backend, lowered);
        let dev = attach(&app);
        dev.report_lost("the app's renderer saw the device go");
        let reason = assert_lost(dev.alloc(16), &dev, "after report_lost");
        assert_eq!(reason, "the app's renderer saw the device go");
    }
}
