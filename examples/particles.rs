//! Particles: a 2-D N-body system stepped by a jitted brigade program and drawn by this example's
//! own wgpu render pipeline, which reads brigade's state buffer **as its vertex buffer**.
//!
//! ```text
//! cargo run --release --example particles                    # headless: frames into a PNG
//! cargo run --release --example particles -- --window        # a real window (winit)
//!     [--backend vulkan|gl] [--frames N] [--n PARTICLES] [--png PATH] [--screenshot PATH]
//! ```
//!
//! The example is the app: it creates its own wgpu instance, adapter and device (Vulkan first, GL
//! otherwise), hands the device to brigade (`Device::from_wgpu`), and allocates the two state
//! buffers itself (`STORAGE | VERTEX`), which brigade imports without a copy
//! (`Array::from_wgpu_buffer`). Every frame records brigade's step into the frame's own command
//! encoder (`Jit::encode_into`: state A -> state B, in place in the app's buffer) followed by the
//! render pass that draws B as instanced quads, and submits once: no byte crosses the host between
//! step and draw (checked with brigade's counters).
//!
//! Checks (exit status 1 if one fails): the positions drawn after the last frame equal the CPU
//! reference (the same traced step run by brigade's reference interpreter, frame after frame); the
//! pixel under every particle's projected centre is lit and most of the image is background; brigade
//! moved zero bytes between host and device during the frame loop. In a window (`--window`, e.g.
//! under Xvfb) `--screenshot` also grabs the X display with `xwd` after the last frame and checks
//! that the window shows the particles.

use std::time::Instant;

use brigade::{Array, DType, Device, HostArray, Result, Tensor, jit, reference, wgpu};

/// Image size of the headless frames (and the window's initial size).
const SIZE: u32 = 512;
/// World coordinates in [-EXTENT, EXTENT] fill the image.
const EXTENT: f32 = 1.25;
/// Half the side of a particle's quad, in pixels.
const HALF_PX: f32 = 1.5;
const DT: f32 = 0.002;
/// Softening length squared: keeps close encounters smooth (and the GPU and the reference close).
const EPS2: f32 = 0.01;
/// Background colour of the frames (the checks look for pixels that differ from it).
const BACKGROUND: [f64; 4] = [0.02, 0.02, 0.05, 1.0];
/// Bytes of one particle: x, y, vx, vy (f32). The render pipeline reads x, y at offset 0.
const STRIDE: u64 = 16;

/// One step of the system, for `n` particles in a `[n, 4]` state (x, y, vx, vy):
/// semi-implicit Euler under softened gravity, total mass 1.
fn step(s: &[Tensor]) -> Vec<Tensor> {
    let n = s[0].shape()[0];
    let p = s[0].slice_axis(1, 0, 2);
    let v = s[0].slice_axis(1, 2, 4);
    // d[i, j] = p[j] - p[i]; a[i] = sum_j m d / (|d|^2 + eps^2)^(3/2).
    let d = &p.expand_dims(0) - &p.expand_dims(1);
    let r2 = (&d * &d).sum(2, false) + EPS2;
    let inv = r2.rsqrt();
    let w = &(&inv * &inv) * &inv * (1.0 / n as f32);
    let a = (&d * &w.expand_dims(2)).sum(1, false);
    let v2 = &v + &(a * DT);
    let p2 = &p + &(&v2 * DT);
    vec![Tensor::concatenate(&[&p2, &v2], 1)]
}

/// A rotating disc of `n` particles (deterministic): radius in (0.1, 1), roughly circular speeds.
fn initial_state(n: usize) -> Vec<f32> {
    let mut s: u32 = 12345;
    let mut next = || {
        s = s.wrapping_mul(1664525).wrapping_add(1013904223);
        (s >> 8) as f32 / (1u32 << 24) as f32
    };
    let mut out = Vec::with_capacity(n * 4);
    for _ in 0..n {
        let r = 0.1 + 0.9 * next().sqrt();
        let t = next() * std::f32::consts::TAU;
        let (x, y) = (r * t.cos(), r * t.sin());
        // Enclosed mass of a uniform disc ~ r^2: circular speed ~ sqrt(r^2 / r) = sqrt(r).
        let speed = 0.8 * r.sqrt();
        out.extend_from_slice(&[x, y, -speed * t.sin(), speed * t.cos()]);
    }
    out
}

/// The app's own wgpu objects: what a game or visualisation already has before brigade arrives.
struct App {
    adapter: wgpu::Adapter,
    device: wgpu::Device,
    queue: wgpu::Queue,
}

impl App {
    /// An adapter of `backend` (any: Vulkan first, then Metal/DX12, then GL; software ones
    /// included), able to present to `surface` when there is one. `None` if there is none.
    fn new(
        instance: &wgpu::Instance,
        surface: Option<&wgpu::Surface<'_>>,
        backend: Option<wgpu::Backend>,
    ) -> Option<App> {
        App::try_new(instance, surface, backend).unwrap_or_else(|e| panic!("particles: {e}"))
    }

    /// [`App::new`], with an adapter whose driver gives no device as an error (wgpu's GL on
    /// NVIDIA's Linux driver, for one) instead of a panic.
    fn try_new(
        instance: &wgpu::Instance,
        surface: Option<&wgpu::Surface<'_>>,
        backend: Option<wgpu::Backend>,
    ) -> std::result::Result<Option<App>, String> {
        let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
        let rank = |a: &wgpu::Adapter| match a.get_info().backend {
            wgpu::Backend::Vulkan => 0,
            wgpu::Backend::Metal | wgpu::Backend::Dx12 => 1,
            _ => 2,
        };
        let adapter = adapters
            .into_iter()
            .filter(|a| backend.is_none_or(|b| a.get_info().backend == b))
            .filter(|a| a.get_info().backend != wgpu::Backend::Noop)
            .filter(|a| surface.is_none_or(|s| a.is_surface_supported(s)))
            .min_by_key(rank);
        let Some(adapter) = adapter else {
            return Ok(None);
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("particles app device"),
            required_limits: adapter.limits(),
            ..Default::default()
        }))
        .map_err(|e| {
            let info = adapter.get_info();
            format!(
                "request_device failed on {} [{:?}]: {e}",
                info.name, info.backend
            )
        })?;
        Ok(Some(App {
            adapter,
            device,
            queue,
        }))
    }
}

/// The render side: instanced quads, one per particle, from the state buffer at stride 16.
struct Renderer {
    pipeline: wgpu::RenderPipeline,
}

const RENDER_WGSL: &str = "
struct Out {
    @builtin(position) pos: vec4<f32>,
    @location(0) color: vec4<f32>,
};

const CORNERS = array<vec2<f32>, 6>(
    vec2(-1.0, -1.0), vec2(1.0, -1.0), vec2(-1.0, 1.0),
    vec2(-1.0, 1.0), vec2(1.0, -1.0), vec2(1.0, 1.0),
);

@group(0) @binding(0) var<uniform> view: vec4<f32>; // 1 / extent, quad half-size in NDC (x, y)

@vertex
fn vs(@builtin(vertex_index) corner: u32, @location(0) p: vec2<f32>, @location(1) v: vec2<f32>) -> Out {
    var out: Out;
    let c = CORNERS[corner];
    out.pos = vec4(p * view.x + c * view.yz, 0.0, 1.0);
    // Slow particles blue, fast ones orange.
    let t = clamp(length(v) / 1.2, 0.0, 1.0);
    out.color = vec4(mix(vec3(0.3, 0.6, 1.0), vec3(1.0, 0.6, 0.2), t), 1.0);
    return out;
}

@fragment
fn fs(in: Out) -> @location(0) vec4<f32> {
    return in.color;
}
";

impl Renderer {
    fn new(device: &wgpu::Device, format: wgpu::TextureFormat) -> Renderer {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("particles render"),
            source: wgpu::ShaderSource::Wgsl(RENDER_WGSL.into()),
        });
        let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
            label: Some("particles"),
            layout: None,
            vertex: wgpu::VertexState {
                module: &module,
                entry_point: Some("vs"),
                compilation_options: Default::default(),
                // brigade's state buffer, one instance per particle: (x, y) then (vx, vy).
                buffers: &[Some(wgpu::VertexBufferLayout {
                    array_stride: STRIDE,
                    step_mode: wgpu::VertexStepMode::Instance,
                    attributes: &wgpu::vertex_attr_array![0 => Float32x2, 1 => Float32x2],
                })],
            },
            primitive: wgpu::PrimitiveState::default(),
            depth_stencil: None,
            multisample: wgpu::MultisampleState::default(),
            fragment: Some(wgpu::FragmentState {
                module: &module,
                entry_point: Some("fs"),
                compilation_options: Default::default(),
                targets: &[Some(format.into())],
            }),
            multiview_mask: None,
            cache: None,
        });
        Renderer { pipeline }
    }

    /// Records a render pass drawing `n` particles from `state` (bound as the vertex buffer).
    fn draw(
        &self,
        app: &App,
        enc: &mut wgpu::CommandEncoder,
        target: &wgpu::TextureView,
        (width, height): (u32, u32),
        state: &brigade::BufferView,
        n: usize,
    ) {
        let view = [
            1.0 / EXTENT,
            HALF_PX * 2.0 / width as f32,
            HALF_PX * 2.0 / height as f32,
            0.0,
        ];
        let uniform = app.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("particles view"),
            size: 16,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        app.queue
            .write_buffer(&uniform, 0, bytemuck::cast_slice(&view));
        let bind = app.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &self.pipeline.get_bind_group_layout(0),
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: uniform.as_entire_binding(),
            }],
        });
        let [r, g, b, a] = BACKGROUND;
        let mut pass = enc.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("particles"),
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: target,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations {
                    load: wgpu::LoadOp::Clear(wgpu::Color { r, g, b, a }),
                    store: wgpu::StoreOp::Store,
                },
            })],
            ..Default::default()
        });
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.set_vertex_buffer(
            0,
            state.buffer.slice(state.offset..state.offset + state.size),
        );
        pass.draw(0..6, 0..n as u32);
    }
}

/// The step as a plain function pointer (a nameable type to keep in a struct).
type StepFn = fn(&[Tensor]) -> Vec<Tensor>;

/// The simulation as the app holds it: two state buffers of its own, imported by brigade.
struct Sim {
    step: brigade::Jit<StepFn>,
    states: [Array; 2],
    /// Index of the state that holds the latest positions.
    current: usize,
    n: usize,
}

impl Sim {
    fn new(app: &App, n: usize) -> Result<Sim> {
        let dev = Device::from_wgpu(
            app.adapter.get_info(),
            app.device.clone(),
            app.queue.clone(),
        )?;
        let init = initial_state(n);
        let make = |label| {
            let b = app.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: n as u64 * STRIDE,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::VERTEX
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            // The app fills its own buffer; brigade sees the bytes through the import.
            app.queue.write_buffer(&b, 0, bytemuck::cast_slice(&init));
            b
        };
        let buffers = [make("particles state A"), make("particles state B")];
        let states = [
            Array::from_wgpu_buffer(&dev, buffers[0].clone(), 0, &[n, 4], DType::F32)?,
            Array::from_wgpu_buffer(&dev, buffers[1].clone(), 0, &[n, 4], DType::F32)?,
        ];
        let step = jit(step as StepFn).named("particles step").on(&dev);
        Ok(Sim {
            step,
            states,
            current: 0,
            n,
        })
    }

    /// Records one step (current -> other) into `enc`; the other state becomes current.
    fn encode_step(&mut self, enc: &mut wgpu::CommandEncoder) -> Result<()> {
        let (src, dst) = (self.current, 1 - self.current);
        self.step.encode_into(
            enc,
            &[self.states[src].clone()],
            &[self.states[dst].clone()],
        )?;
        self.current = dst;
        Ok(())
    }

    fn current_view(&self) -> Result<brigade::BufferView> {
        self.states[self.current].wgpu_buffer()
    }
}

/// `frames` steps of the reference interpreter on the same traced step.
fn reference_states(n: usize, frames: usize) -> Result<HostArray> {
    let x0 = Array::from_vec(initial_state(n), &[n, 4])?;
    let graph = jit(step).graph(std::slice::from_ref(&x0))?;
    let mut s = x0.to_host()?;
    for _ in 0..frames {
        s = reference::eval_graph(&graph, &[s])?.remove(0);
    }
    Ok(s)
}

/// Compares positions (and velocities) with the reference: returns the largest difference.
fn max_abs_diff(got: &[f64], want: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max)
}

/// An RGBA8 image: checks that every particle's projected centre is lit and most pixels are
/// background. Returns (lit pixels, particles whose centre pixel is dark).
fn check_pixels(
    rgba: &[u8],
    width: u32,
    height: u32,
    positions: &[f64],
    bgra: bool,
) -> (usize, usize) {
    let bg: Vec<u8> = BACKGROUND
        .iter()
        .map(|c| (srgb(*c) * 255.0).round() as u8)
        .collect();
    let lit_at = |x: u32, y: u32| {
        let i = ((y * width + x) * 4) as usize;
        let px = &rgba[i..i + 4];
        let (r, g, b) = if bgra {
            (px[2], px[1], px[0])
        } else {
            (px[0], px[1], px[2])
        };
        // Background is dark blue; particles are bright (every channel of theirs >= 0.2).
        let d = |a: u8, b: u8| (a as i32 - b as i32).abs();
        d(r, bg[0]) + d(g, bg[1]) + d(b, bg[2]) > 60
    };
    let lit = (0..height)
        .flat_map(|y| (0..width).map(move |x| (x, y)))
        .filter(|&(x, y)| lit_at(x, y))
        .count();
    let mut dark = 0;
    for p in positions.chunks(4) {
        let (nx, ny) = (p[0] / EXTENT as f64, p[1] / EXTENT as f64);
        if nx.abs() >= 0.99 || ny.abs() >= 0.99 {
            continue; // off screen (or on its edge): nothing to see
        }
        let px = ((nx + 1.0) * 0.5 * width as f64) as u32;
        let py = ((1.0 - ny) * 0.5 * height as f64) as u32;
        if !lit_at(px.min(width - 1), py.min(height - 1)) {
            dark += 1;
        }
    }
    (lit, dark)
}

/// The sRGB encoding of a linear channel value (what an `*Srgb` target stores).
fn srgb(c: f64) -> f64 {
    if c <= 0.0031308 {
        c * 12.92
    } else {
        1.055 * c.powf(1.0 / 2.4) - 0.055
    }
}

/// What a run measured, for the checks.
struct Outcome {
    frames: usize,
    n: usize,
    ms_per_frame: f64,
    bytes_moved: u64,
    max_diff: f64,
    lit: usize,
    dark: usize,
    adapter: String,
}

impl Outcome {
    fn ok(&self) -> bool {
        let pixels = (SIZE * SIZE) as usize;
        self.bytes_moved == 0
            && self.max_diff <= 1e-3
            && self.dark == 0
            && self.lit > 0
            && self.lit < pixels / 2
    }

    fn print(&self) {
        println!(
            "  {} {} particles, {} frames on {}: {:.2} ms/frame, bytes moved by brigade during the loop {}, \
             max |GPU - reference| {:.1e}, lit pixels {}, particles drawn dark {}",
            if self.ok() { "✓" } else { "✗" },
            self.n,
            self.frames,
            self.adapter,
            self.ms_per_frame,
            self.bytes_moved,
            self.max_diff,
            self.lit,
            self.dark
        );
    }
}

/// Headless: `frames` frames into an offscreen texture, the last one saved as `png`.
fn run_headless(
    n: usize,
    frames: usize,
    png: Option<&str>,
    backend: Option<wgpu::Backend>,
) -> Result<Outcome> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let app = App::new(&instance, None, backend).unwrap_or_else(|| no_adapter(backend));
    run_headless_on(app, n, frames, png)
}

/// [`run_headless`] on an app device already made.
fn run_headless_on(app: App, n: usize, frames: usize, png: Option<&str>) -> Result<Outcome> {
    let format = wgpu::TextureFormat::Rgba8UnormSrgb;
    let renderer = Renderer::new(&app.device, format);
    let texture = app.device.create_texture(&wgpu::TextureDescriptor {
        label: Some("particles frame"),
        size: wgpu::Extent3d {
            width: SIZE,
            height: SIZE,
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        view_formats: &[],
    });
    let target = texture.create_view(&Default::default());
    let mut sim = Sim::new(&app, n)?;

    let before = brigade::counters();
    let t0 = Instant::now();
    for _ in 0..frames {
        let mut enc = app.device.create_command_encoder(&Default::default());
        sim.encode_step(&mut enc)?;
        renderer.draw(
            &app,
            &mut enc,
            &target,
            (SIZE, SIZE),
            &sim.current_view()?,
            n,
        );
        app.queue.submit([enc.finish()]);
    }
    app.device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("particles: poll failed");
    let elapsed = t0.elapsed();
    let work = brigade::counters().since(&before);

    let rgba = read_texture(&app, &texture, SIZE, SIZE);
    if let Some(path) = png {
        save_png(path, &rgba, SIZE, SIZE, false);
        println!("  saved the last frame to {path}");
    }
    let got = sim.states[sim.current].to_host()?.to_f64();
    let want = reference_states(n, frames)?.to_f64();
    let (lit, dark) = check_pixels(&rgba, SIZE, SIZE, &got, false);
    drop(sim);
    Ok(Outcome {
        frames,
        n,
        ms_per_frame: elapsed.as_secs_f64() * 1e3 / frames as f64,
        bytes_moved: work.bytes_uploaded + work.bytes_downloaded,
        max_diff: max_abs_diff(&got, &want),
        lit,
        dark,
        adapter: format!(
            "{:?}: {}",
            app.adapter.get_info().backend,
            app.adapter.get_info().name
        ),
    })
}

/// Copies a texture (RGBA8 or BGRA8, `width * 4` a multiple of 256) to the host.
fn read_texture(app: &App, texture: &wgpu::Texture, width: u32, height: u32) -> Vec<u8> {
    let row = width * 4;
    assert!(
        row.is_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT),
        "width * 4 must be a multiple of 256"
    );
    let buf = app.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("particles readback"),
        size: (row * height) as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = app.device.create_command_encoder(&Default::default());
    enc.copy_texture_to_buffer(
        texture.as_image_copy(),
        wgpu::TexelCopyBufferInfo {
            buffer: &buf,
            layout: wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(row),
                rows_per_image: Some(height),
            },
        },
        texture.size(),
    );
    app.queue.submit([enc.finish()]);
    buf.slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.expect("particles: map failed"));
    app.device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("particles: poll failed");
    let bytes = buf
        .slice(..)
        .get_mapped_range()
        .expect("particles: mapped range")
        .to_vec();
    buf.unmap();
    bytes
}

fn save_png(path: &str, rgba: &[u8], width: u32, height: u32, bgra: bool) {
    let mut data = rgba.to_vec();
    if bgra {
        for px in data.chunks_mut(4) {
            px.swap(0, 2);
        }
    }
    let file = std::fs::File::create(path).expect("particles: cannot create the PNG file");
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), width, height);
    enc.set_color(png::ColorType::Rgba);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().expect("particles: PNG header");
    w.write_image_data(&data).expect("particles: PNG data");
}

fn no_adapter(backend: Option<wgpu::Backend>) -> ! {
    eprintln!(
        "particles: no {} adapter (install Mesa's lavapipe and llvmpipe: see README)",
        backend.map_or("wgpu".to_string(), |b| format!("{b:?}"))
    );
    std::process::exit(1)
}

/// The tour's chapter: a short headless run on Vulkan and on GL, checked. Both adapters are
/// required: the tour runs where Mesa's lavapipe and llvmpipe are installed. An adapter that is
/// there but whose driver gives no device (wgpu's GL on NVIDIA's Linux driver) is skipped with a
/// note.
pub fn run(quick: bool) -> Result<bool> {
    let (n, frames) = if quick { (512, 20) } else { (2048, 60) };
    let mut ok = true;
    for backend in [wgpu::Backend::Vulkan, wgpu::Backend::Gl] {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
        let app = match App::try_new(&instance, None, Some(backend)) {
            Ok(Some(app)) => app,
            Ok(None) => no_adapter(Some(backend)),
            Err(e) => {
                println!("{backend:?}: skipped, {e}");
                continue;
            }
        };
        let out = run_headless_on(app, n, frames, None)?;
        out.print();
        ok &= out.ok();
    }
    Ok(ok)
}

struct Args {
    window: bool,
    backend: Option<wgpu::Backend>,
    frames: usize,
    n: usize,
    png: Option<String>,
    screenshot: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        window: false,
        backend: None,
        frames: 120,
        n: 2048,
        png: None,
        screenshot: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().unwrap_or_else(|| panic!("{name} needs a value"));
        match arg.as_str() {
            "--window" => a.window = true,
            "--backend" => {
                a.backend = Some(match value("--backend").as_str() {
                    "vulkan" => wgpu::Backend::Vulkan,
                    "gl" => wgpu::Backend::Gl,
                    "metal" => wgpu::Backend::Metal,
                    "dx12" => wgpu::Backend::Dx12,
                    other => panic!("--backend {other}: one of vulkan, gl, metal, dx12"),
                })
            }
            "--frames" => a.frames = value("--frames").parse().expect("--frames N"),
            "--n" => a.n = value("--n").parse().expect("--n PARTICLES"),
            "--png" => a.png = Some(value("--png")),
            "--screenshot" => a.screenshot = Some(value("--screenshot")),
            other => {
                panic!("unknown argument {other} (see the doc comment of examples/particles.rs)")
            }
        }
    }
    a
}

fn main() -> Result<()> {
    let a = args();
    let out = if a.window {
        window::run(a.n, a.frames, a.screenshot.as_deref(), a.backend)?
    } else {
        let png = a.png.as_deref().unwrap_or("particles.png");
        run_headless(a.n, a.frames, Some(png), a.backend)?
    };
    out.print();
    if !out.ok() {
        std::process::exit(1);
    }
    Ok(())
}

/// The windowed mode: winit's event loop, the same step and draw into the window's surface.
mod window {
    use super::*;
    use std::sync::Arc;
    use winit::application::ApplicationHandler;
    use winit::event::WindowEvent;
    use winit::event_loop::{ActiveEventLoop, EventLoop};
    use winit::window::{Window, WindowId};

    struct State {
        window: Arc<Window>,
        surface: wgpu::Surface<'static>,
        config: wgpu::SurfaceConfiguration,
        app: App,
        renderer: Renderer,
        sim: Sim,
    }

    struct Handler {
        n: usize,
        backend: Option<wgpu::Backend>,
        frames: usize,
        drawn: usize,
        state: Option<State>,
        result: Option<Result<Outcome>>,
        screenshot: Option<String>,
        before: brigade::Counters,
        t0: Option<Instant>,
    }

    impl Handler {
        fn init(&mut self, event_loop: &ActiveEventLoop) -> Result<()> {
            let window = Arc::new(
                event_loop
                    .create_window(
                        Window::default_attributes()
                            .with_title("brigade particles")
                            .with_inner_size(winit::dpi::PhysicalSize::new(SIZE, SIZE))
                            .with_resizable(false),
                    )
                    .expect("particles: cannot open a window"),
            );
            let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_with_display_handle(
                Box::new(event_loop.owned_display_handle()),
            ));
            let surface = instance
                .create_surface(window.clone())
                .expect("particles: cannot create a surface for the window");
            let app = App::new(&instance, Some(&surface), self.backend)
                .unwrap_or_else(|| no_adapter(self.backend));
            let size = window.inner_size();
            let mut config = surface
                .get_default_config(&app.adapter, size.width.max(1), size.height.max(1))
                .expect("particles: the adapter cannot present to this window");
            config.present_mode = wgpu::PresentMode::Fifo;
            surface.configure(&app.device, &config);
            let renderer = Renderer::new(&app.device, config.format);
            let sim = Sim::new(&app, self.n)?;
            self.before = brigade::counters();
            self.t0 = Some(Instant::now());
            window.request_redraw();
            self.state = Some(State {
                window,
                surface,
                config,
                app,
                renderer,
                sim,
            });
            Ok(())
        }

        fn frame(&mut self) -> Result<bool> {
            let st = self.state.as_mut().expect("initialised");
            let frame = match st.surface.get_current_texture() {
                wgpu::CurrentSurfaceTexture::Success(f)
                | wgpu::CurrentSurfaceTexture::Suboptimal(f) => f,
                wgpu::CurrentSurfaceTexture::Outdated | wgpu::CurrentSurfaceTexture::Lost => {
                    st.surface.configure(&st.app.device, &st.config);
                    return Ok(false);
                }
                other => {
                    log::warn!("particles: skipping a frame ({other:?})");
                    return Ok(false);
                }
            };
            let view = frame.texture.create_view(&Default::default());
            let mut enc = st.app.device.create_command_encoder(&Default::default());
            st.sim.encode_step(&mut enc)?;
            let size = (st.config.width, st.config.height);
            st.renderer.draw(
                &st.app,
                &mut enc,
                &view,
                size,
                &st.sim.current_view()?,
                st.sim.n,
            );
            st.app.queue.submit([enc.finish()]);
            st.app.queue.present(frame);
            self.drawn += 1;
            Ok(self.drawn >= self.frames)
        }

        fn finish(&mut self) -> Result<Outcome> {
            let st = self.state.as_ref().expect("initialised");
            st.app
                .device
                .poll(wgpu::PollType::wait_indefinitely())
                .expect("particles: poll failed");
            let elapsed = self.t0.expect("started").elapsed();
            let work = brigade::counters().since(&self.before);
            let got = st.sim.states[st.sim.current].to_host()?.to_f64();
            let want = reference_states(self.n, self.frames)?.to_f64();
            let (mut lit, mut dark) = (1, 0);
            if let Some(path) = &self.screenshot {
                (lit, dark) = screenshot(path, &st.window, &got);
            }
            Ok(Outcome {
                frames: self.frames,
                n: self.n,
                ms_per_frame: elapsed.as_secs_f64() * 1e3 / self.frames as f64,
                bytes_moved: work.bytes_uploaded + work.bytes_downloaded,
                max_diff: max_abs_diff(&got, &want),
                lit,
                dark,
                adapter: format!(
                    "{:?}: {} (window)",
                    st.app.adapter.get_info().backend,
                    st.app.adapter.get_info().name
                ),
            })
        }
    }

    impl ApplicationHandler for Handler {
        fn resumed(&mut self, event_loop: &ActiveEventLoop) {
            if self.state.is_none() {
                if let Err(e) = self.init(event_loop) {
                    self.result = Some(Err(e));
                    event_loop.exit();
                }
            }
        }

        fn window_event(&mut self, event_loop: &ActiveEventLoop, _: WindowId, event: WindowEvent) {
            match event {
                WindowEvent::CloseRequested => event_loop.exit(),
                WindowEvent::RedrawRequested => match self.frame() {
                    Ok(false) => self
                        .state
                        .as_ref()
                        .expect("initialised")
                        .window
                        .request_redraw(),
                    Ok(true) => {
                        self.result = Some(self.finish());
                        event_loop.exit();
                    }
                    Err(e) => {
                        self.result = Some(Err(e));
                        event_loop.exit();
                    }
                },
                _ => {}
            }
        }
    }

    pub(super) fn run(
        n: usize,
        frames: usize,
        screenshot: Option<&str>,
        backend: Option<wgpu::Backend>,
    ) -> Result<Outcome> {
        let event_loop =
            EventLoop::new().expect("particles: no display (set DISPLAY, or run headless)");
        let mut h = Handler {
            n,
            backend,
            frames,
            drawn: 0,
            state: None,
            result: None,
            screenshot: screenshot.map(str::to_string),
            before: brigade::counters(),
            t0: None,
        };
        event_loop
            .run_app(&mut h)
            .expect("particles: event loop failed");
        h.result
            .expect("particles: the event loop ended before the last frame")
    }

    /// Grabs the whole X display with `xwd` (what the window really shows), saves it as a PNG and
    /// checks the particles' pixels inside the window's area.
    fn screenshot(path: &str, window: &Window, positions: &[f64]) -> (usize, usize) {
        let out = std::process::Command::new("xwd")
            .args(["-root", "-silent"])
            .output()
            .expect(
                "particles: --screenshot needs `xwd` (Debian package x11-apps) and an X display",
            );
        assert!(
            out.status.success(),
            "particles: xwd failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (w, h, rgba) = xwd_to_rgba(&out.stdout);
        save_png(path, &rgba, w, h, false);
        println!("  saved a screenshot of the display to {path}");
        // The window's content area on the display.
        let origin = window.inner_position().unwrap_or_default();
        let size = window.inner_size();
        let (x0, y0) = (origin.x.max(0) as u32, origin.y.max(0) as u32);
        let (cw, ch) = (size.width.min(w - x0), size.height.min(h - y0));
        let mut crop = Vec::with_capacity((cw * ch * 4) as usize);
        for y in y0..y0 + ch {
            let row = ((y * w + x0) * 4) as usize;
            crop.extend_from_slice(&rgba[row..row + (cw * 4) as usize]);
        }
        check_pixels(&crop, cw, ch, positions, false)
    }

    /// Decodes an XWD image (ZPixmap, 24 or 32 bits per pixel) into RGBA8.
    fn xwd_to_rgba(b: &[u8]) -> (u32, u32, Vec<u8>) {
        let be =
            |i: usize| u32::from_be_bytes([b[i * 4], b[i * 4 + 1], b[i * 4 + 2], b[i * 4 + 3]]);
        let header_size = be(0) as usize;
        let (format, width, height) = (be(2), be(4), be(5));
        let byte_order = be(7);
        let bits_per_pixel = be(11);
        let bytes_per_line = be(12) as usize;
        let (red_mask, green_mask, blue_mask) = (be(14), be(15), be(16));
        let ncolors = be(19) as usize;
        assert!(
            format == 2 && (bits_per_pixel == 32 || bits_per_pixel == 24),
            "xwd: unsupported image"
        );
        let data = &b[header_size + ncolors * 12..];
        let bpp = (bits_per_pixel / 8) as usize;
        let shift = |m: u32| m.trailing_zeros();
        let mut rgba = Vec::with_capacity((width * height * 4) as usize);
        for y in 0..height as usize {
            for x in 0..width as usize {
                let p = &data[y * bytes_per_line + x * bpp..][..bpp];
                let mut v = 0u32;
                for (i, &byte) in p.iter().enumerate() {
                    // byte_order 0: least significant byte first.
                    v |= (byte as u32)
                        << if byte_order == 0 {
                            8 * i
                        } else {
                            8 * (bpp - 1 - i)
                        };
                }
                let c = |m: u32| ((v & m) >> shift(m)) as u8;
                rgba.extend_from_slice(&[c(red_mask), c(green_mask), c(blue_mask), 255]);
            }
        }
        (width, height, rgba)
    }
}
