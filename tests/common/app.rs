//! What the embedding tests (tests/embed_buffers.rs, tests/encode.rs, tests/embed_device.rs) do as
//! "the app": find an adapter from its own wgpu instance, read its own buffers back through a
//! `MAP_READ` staging buffer, and the step and reference they share.

use brigade::{Array, Device, HostArray, Tensor, jit, reference};
use wgpu::BufferUsages as U;

/// The llvmpipe adapter of `backend` (Vulkan: lavapipe; GL: llvmpipe through EGL), from the app's
/// own instance. Panics with the packages to install when it is missing.
pub fn adapter_of(backend: wgpu::Backends) -> (wgpu::Instance, wgpu::Adapter) {
    let _ = env_logger::builder().is_test(true).try_init();
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backend;
    let instance = wgpu::Instance::new(desc);
    let adapters = pollster::block_on(instance.enumerate_adapters(backend));
    let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
    let adapter = adapters
        .into_iter()
        .find(|a| a.get_info().name.contains("llvmpipe"))
        .unwrap_or_else(|| {
            panic!(
                "no llvmpipe adapter for {backend:?} (found {names:?}); {}",
                super::INSTALL
            )
        });
    (instance, adapter)
}

/// A simulation step that reads neighbours through the mean: an in-place kernel writing as it
/// reads would go wrong.
pub fn step(x: &[Tensor]) -> Vec<Tensor> {
    vec![&x[0] * 0.9 + x[0].sin() * 0.25 - x[0].mean_all() * 0.1]
}

/// `f` evaluated by the CPU reference on host arrays.
pub fn reference_of(f: impl Fn(&[Tensor]) -> Vec<Tensor>, args: &[HostArray]) -> Vec<HostArray> {
    let arrays: Vec<Array> = args
        .iter()
        .map(|h| Array::from_host_array(h.clone()).unwrap())
        .collect();
    let g = jit(f).graph(&arrays).unwrap();
    reference::eval_graph(&g, args).unwrap()
}

/// A `MAP_READ | COPY_DST` buffer of `size` bytes on `dev`'s wgpu device.
pub fn staging(dev: &Device, size: u64) -> wgpu::Buffer {
    dev.wgpu()
        .expect("a GPU device")
        .0
        .create_buffer(&wgpu::BufferDescriptor {
            label: Some("test readback"),
            size,
            usage: U::MAP_READ | U::COPY_DST,
            mapped_at_creation: false,
        })
}

/// Map a `MAP_READ` buffer the app owns (its copies submitted) and read it as f32.
pub fn map_read(dev: &Device, buf: &wgpu::Buffer) -> Vec<f32> {
    let wdev = dev.wgpu().expect("a GPU device").0;
    let (tx, rx) = std::sync::mpsc::channel();
    buf.slice(..)
        .map_async(wgpu::MapMode::Read, move |r| tx.send(r).unwrap());
    wdev.poll(wgpu::PollType::wait_indefinitely())
        .expect("poll");
    rx.recv().unwrap().expect("map");
    let out = bytemuck::cast_slice::<u8, f32>(&buf.slice(..).get_mapped_range().unwrap()).to_vec();
    buf.unmap();
    out
}

/// `size` bytes of an app buffer from `offset`, read the way an app would: its own copy into a
/// staging buffer, one submit, a map.
pub fn app_read(dev: &Device, buffer: &wgpu::Buffer, offset: u64, size: u64) -> Vec<f32> {
    let (wdev, queue) = dev.wgpu().expect("a GPU device");
    let out = staging(dev, size);
    let mut enc = wdev.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    enc.copy_buffer_to_buffer(buffer, offset, &out, 0, size);
    queue.submit([enc.finish()]);
    map_read(dev, &out)
}
