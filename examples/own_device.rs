//! brigade on a wgpu device the app created itself, with fewer limits than its adapter.
//!
//! Run with `cargo run --release --example own_device`. The "app" opens its own wgpu instance,
//! picks an adapter (every Vulkan and GL adapter found; `BRIGADE_DEVICES=gl:1` or `=vulkan:1`
//! keeps one backend), and requests a device with lowered limits: 1 MiB storage bindings, 2 MiB
//! buffers, 256 workgroups per dimension. brigade then
//! 1. wraps that device (`Device::from_wgpu`), reading the limits from the device, not the adapter;
//! 2. runs a jitted softmax-and-matmul on it, planned within those limits, and checks it against
//!    the CPU reference interpreter;
//! 3. squares and sums an array over the 1 MiB binding limit in segments (kernels bind it a
//!    segment or a block of rows at a time), transposes it in segments too, argsorts it
//!    flattened (one sort row, sorted over chunks of the binding, its 4 MiB merge-sort state
//!    stored in parts of the 2 MiB buffers), computes a convolution's kernel gradient over one
//!    image larger than the binding (in chunks of rows, checked against the CPU reference), and
//!    refuses a convolution whose kernel is over the binding with a typed `Error::OverLimit`;
//! 4. refuses a device whose workgroups are narrower than its kernels (`max_compute_workgroup_size_x`
//!    64) with a typed `Error::Unsupported` naming the limit;
//! 5. lets go of the device on `Device::destroy` without destroying it: the app's device still runs
//!    its own work afterwards.
//!
//! Exits with status 1 if a result differs from the reference or an error is not the one expected.

use brigade::{
    Array, ConvOptions, Device, Error, Padding, Result, Tensor, grad, jit, reference, wgpu,
};

#[path = "common/util.rs"]
#[allow(dead_code)] // only `data` is used here
mod util;
use util::data;

/// The backends to try: the one `BRIGADE_DEVICES` names first, else Vulkan and GL.
fn backends() -> Vec<(wgpu::Backends, &'static str)> {
    let all = vec![
        (wgpu::Backends::VULKAN, "vulkan"),
        (wgpu::Backends::GL, "gl"),
    ];
    match std::env::var(brigade::device::DEVICES_ENV) {
        Ok(spec) => {
            let first = spec
                .split([',', ':'])
                .next()
                .unwrap_or("")
                .trim()
                .to_string();
            let picked: Vec<_> = all.iter().copied().filter(|(_, n)| *n == first).collect();
            if picked.is_empty() { all } else { picked }
        }
        Err(_) => all,
    }
}

/// The limits the app asks for: its adapter's, with smaller buffers and grids.
fn app_limits(adapter: &wgpu::Adapter) -> wgpu::Limits {
    let a = adapter.limits();
    wgpu::Limits {
        max_storage_buffer_binding_size: (1 << 20).min(a.max_storage_buffer_binding_size),
        max_buffer_size: (2 << 20).min(a.max_buffer_size),
        max_compute_workgroups_per_dimension: 256.min(a.max_compute_workgroups_per_dimension),
        ..a
    }
}

fn request(adapter: &wgpu::Adapter, limits: &wgpu::Limits) -> Option<(wgpu::Device, wgpu::Queue)> {
    let desc = wgpu::DeviceDescriptor {
        label: Some("the app's own device"),
        required_limits: limits.clone(),
        ..Default::default()
    };
    match pollster::block_on(adapter.request_device(&desc)) {
        Ok(dq) => Some(dq),
        Err(e) => {
            println!("  the adapter refused the device: {e}");
            None
        }
    }
}

/// Largest difference relative to the largest reference value.
fn max_rel_err(got: &[f64], want: &[f64]) -> f64 {
    let scale = want.iter().fold(1e-6f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs() / scale)
        .fold(0.0, f64::max)
}

fn program(a: &[Tensor]) -> Vec<Tensor> {
    vec![a[0].softmax(-1), a[0].matmul(&a[1]).tanh()]
}

/// Steps 1-5 on one adapter; true when every check passed.
fn on_adapter(adapter: &wgpu::Adapter) -> Result<bool> {
    let info = adapter.get_info();
    let limits = app_limits(adapter);
    println!(
        "  the adapter allows {} MiB bindings and {} workgroups per dimension; the app asks for {} KiB and {}",
        adapter.limits().max_storage_buffer_binding_size >> 20,
        adapter.limits().max_compute_workgroups_per_dimension,
        limits.max_storage_buffer_binding_size >> 10,
        limits.max_compute_workgroups_per_dimension
    );
    let Some((device, queue)) = request(adapter, &limits) else {
        return Ok(false);
    };
    let dev = Device::from_wgpu(info.clone(), device.clone(), queue.clone())?;
    println!("  brigade sees {}", dev.info());
    let mut ok = true;
    if dev.limits().max_storage_buffer_binding_size != limits.max_storage_buffer_binding_size {
        println!("  MISMATCH: brigade read other limits than the device's");
        ok = false;
    }

    // 2. A jit within the limits: x is 256 x 512 f32 = 512 KiB.
    let x = Array::from_vec(data(256 * 512, 1), &[256, 512])?;
    let w = Array::from_vec(data(512 * 64, 2), &[512, 64])?;
    let args = [x, w];
    let f = jit(program).on(&dev);
    let plan = f.program(&args, &dev)?;
    let widest = plan
        .launches
        .iter()
        .flat_map(|l| l.workgroups)
        .max()
        .unwrap_or(0);
    let outs = f.call(&args)?;
    let graph = f.graph(&args)?;
    let hosts: Vec<_> = args.iter().map(|a| a.to_host()).collect::<Result<_>>()?;
    let want = reference::eval_graph(&graph, &hosts)?;
    println!(
        "  the jit: {} dispatches, at most {widest} workgroups per dimension",
        plan.launches.len()
    );
    // The matmul sums 512 f32 products; the reference accumulates in f64.
    let checks = [("softmax(x)", 1e-5), ("tanh(x @ w)", 1e-4)];
    for ((name, tol), (o, w)) in checks.iter().zip(outs.iter().zip(&want)) {
        let err = max_rel_err(&o.to_host()?.to_f64(), &w.to_f64());
        let good = err <= *tol;
        ok &= good;
        println!(
            "  {name}: max rel. error vs the CPU reference {err:.1e} (tolerance {tol:.0e}) {}",
            if good { "✓" } else { "MISMATCH" }
        );
    }
    if widest > limits.max_compute_workgroups_per_dimension {
        println!("  MISMATCH: a dispatch exceeds the app's workgroup limit");
        ok = false;
    }

    // 3. An array over the app's binding limit: 512 Ki f32 = 2 MiB, squared and summed in
    // segments of the 1 MiB binding.
    let values = data(512 * 1024, 3);
    let big = Array::from_vec(values.clone(), &[512, 1024])?;
    let out = jit(|a: &[Tensor]| vec![a[0].square(), a[0].sum_all()])
        .on(&dev)
        .call(std::slice::from_ref(&big))?;
    let squared = out[0].to_vec::<f32>()?;
    let sum = f64::from(out[1].to_vec::<f32>()?[0]);
    let want: f64 = values.iter().map(|&v| f64::from(v)).sum();
    if squared.iter().zip(&values).all(|(s, v)| *s == v * v) && (sum - want).abs() < 1e-2 {
        println!("  2 MiB array squared and summed in segments of the 1 MiB binding ✓");
    } else {
        println!(
            "  MISMATCH: the 2 MiB array squared and summed in segments (sum {sum}, want {want})"
        );
        ok = false;
    }
    // Its transpose runs in segments too (one dispatch per pair of segments it touches).
    let t = jit(|a: &[Tensor]| vec![a[0].transpose(&[1, 0])])
        .on(&dev)
        .call(std::slice::from_ref(&big))?;
    let t = t[0].to_vec::<f32>()?;
    let transposed = (0..1024).all(|c| (0..512).all(|r| t[c * 512 + r] == values[r * 1024 + c]));
    if transposed {
        println!("  its transpose, 2 MiB over the 1 MiB binding, equal to the host's ✓");
    } else {
        println!("  MISMATCH: the segmented transpose of the 2 MiB array");
        ok = false;
    }
    // One sort row of the whole flattened array is sorted over chunks of the binding; its
    // merge-sort state (a key and an index per element, 4 MiB) is stored in parts of the 2 MiB
    // buffers. The order is the host's stable one.
    let order = jit(|a: &[Tensor]| vec![a[0].reshape(&[-1]).argsort(0)])
        .on(&dev)
        .call(std::slice::from_ref(&big))?;
    let order = order[0].to_vec::<i32>()?;
    let mut want: Vec<i32> = (0..values.len() as i32).collect();
    want.sort_by(|&i, &j| values[i as usize].total_cmp(&values[j as usize]));
    if order == want {
        println!("  an argsort of it flattened (one 2 MiB sort row, 4 MiB of state in parts) ✓");
    } else {
        println!("  MISMATCH: the argsort of the flattened 2 MiB array");
        ok = false;
    }
    // The kernel gradient of a convolution whose one image (1.4 MB) is over the binding: it
    // contracts over the image's rows, so chunks of rows give partials that are summed.
    let opts = ConvOptions::new(&[1, 1], Padding::Same).dimension_numbers("NHWC", "HWIO", "NHWC");
    let image = Array::from_vec(data(300 * 300 * 4, 11), &[1, 300, 300, 4])?;
    let kernel = Array::from_vec(data(3 * 3 * 4 * 5, 12), &[3, 3, 4, 5])?;
    let o = opts.clone();
    let kgrad = jit(move |t: &[Tensor]| {
        let o = o.clone();
        grad(move |p: &[Tensor]| vec![p[0].conv_general_dilated(&p[1], &o).sum_all()])
            .argnums(&[1])
            .apply(t)
    })
    .on(&dev);
    let args = [image, kernel];
    let got = kgrad.call(&args)?;
    let hosts: Vec<_> = args.iter().map(|a| a.to_host()).collect::<Result<_>>()?;
    let want = reference::eval_graph(&kgrad.graph(&args)?, &hosts)?;
    // Each element sums 90 000 f32 terms; the reference accumulates in f64.
    let err = max_rel_err(&got[0].to_host()?.to_f64(), &want[0].to_f64());
    if err <= 1e-4 {
        println!(
            "  a kernel gradient over one 1.4 MB image, in chunks of rows: max rel. error {err:.1e} ✓"
        );
    } else {
        println!("  MISMATCH: the kernel gradient over one image (max rel. error {err:.1e})");
        ok = false;
    }
    // A convolution whose kernel (1.2 MB) is over the binding cannot be cut (every block binds
    // the kernel whole): a typed refusal.
    let small = Array::from_vec(data(8 * 8 * 128, 13), &[1, 8, 8, 128])?;
    let wide = Array::from_vec(data(3 * 3 * 128 * 256, 14), &[3, 3, 128, 256])?;
    match jit(move |t: &[Tensor]| vec![t[0].conv_general_dilated(&t[1], &opts)])
        .on(&dev)
        .call(&[small, wide])
    {
        Err(e @ Error::OverLimit { .. }) => {
            println!("  a convolution with a 1.2 MB kernel refused as expected: {e}")
        }
        Err(e) => {
            println!("  UNEXPECTED error for the convolution with a 1.2 MB kernel: {e}");
            ok = false;
        }
        Ok(_) => {
            println!(
                "  UNEXPECTED: a convolution whose kernel is over the binding ran (it is refused)"
            );
            ok = false;
        }
    }

    // 4. A device with workgroups narrower than brigade's kernels.
    let narrow = wgpu::Limits {
        max_compute_workgroup_size_x: 64,
        max_compute_invocations_per_workgroup: 64,
        ..limits.clone()
    };
    if let Some((d, q)) = request(adapter, &narrow) {
        match Device::from_wgpu(info.clone(), d, q) {
            Err(e @ Error::Unsupported { .. }) => {
                println!("  64-wide workgroups refused as expected: {e}")
            }
            Err(e) => {
                println!("  UNEXPECTED error for 64-wide workgroups: {e}");
                ok = false;
            }
            Ok(_) => {
                println!("  UNEXPECTED: a device with 64-wide workgroups was accepted");
                ok = false;
            }
        }
    }

    // 5. brigade lets go; the app's device lives on.
    drop(outs);
    dev.destroy();
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let buf = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("the app's buffer after brigade let go"),
        size: 1024,
        usage: wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    queue.write_buffer(&buf, 0, &[7u8; 1024]);
    queue.submit([]);
    let polled = device.poll(wgpu::PollType::wait_indefinitely());
    let err = pollster::block_on(scope.pop());
    let alive = polled.is_ok() && err.is_none();
    ok &= alive && dev.is_lost();
    println!(
        "  after Device::destroy: brigade's handle is lost ({}), the app's device still works ({})",
        dev.is_lost(),
        if alive { "✓" } else { "NO" }
    );
    Ok(ok)
}

pub fn run(_quick: bool) -> Result<bool> {
    let mut ok = true;
    let mut ran = 0;
    for (bits, name) in backends() {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = bits;
        let instance = wgpu::Instance::new(desc);
        let adapters = pollster::block_on(instance.enumerate_adapters(bits));
        let Some(adapter) = adapters.first() else {
            println!("{name}: no adapter found, skipped");
            continue;
        };
        println!("{name}: the app's adapter is {}", adapter.get_info().name);
        ok &= on_adapter(adapter)?;
        ran += 1;
    }
    if ran == 0 {
        println!("no Vulkan or GL adapter on this machine: nothing to embed into");
    }
    Ok(ok)
}

fn main() -> Result<()> {
    let _ = env_logger::try_init();
    if !run(false)? {
        eprintln!("own_device: a check failed");
        std::process::exit(1);
    }
    Ok(())
}
