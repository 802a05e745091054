//! The logical device: wgpu `Device` + `Queue` (or the cpu device), error capture, allocation and
//! dispatch.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::kernel::Kernel;
use super::pool::{DeviceBuffer, MemoryStats, Pool, PoolStats, bucket_size};
use super::runtime::MEMORY_LIMIT_ENV;
use super::scopes::{Deferred, Origin};
use super::{DeviceInfo, DeviceLimits, backend_name, device_type_name, human_bytes};
use crate::counters::bump;
use crate::error::{Error, Result};

/// Lock a mutex, ignoring poisoning (a panic elsewhere must not turn into more panics here).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// wgpu's GL backend shares one context per adapter and panics ("Could not lock adapter context")
/// when a thread waits for it more than a few seconds — and llvmpipe holds it that long while it
/// compiles a big shader. So brigade serializes its own GL calls behind this lock instead.
static GL_CONTEXT: Mutex<()> = Mutex::new(());

thread_local! {
    /// No destructor, so never destroyed: `gl_guard`, reached from destructors while a thread
    /// ends, may read it then.
    static GL_HELD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Holds [`GL_CONTEXT`] (re-entrant per thread); empty for other backends.
pub(crate) struct GlGuard(Option<MutexGuard<'static, ()>>);

impl Drop for GlGuard {
    fn drop(&mut self) {
        if self.0.take().is_some() {
            let _ = GL_HELD.try_with(|h| h.set(false));
        }
    }
}

/// Error and loss state written by wgpu callbacks.
#[derive(Default)]
pub(crate) struct DeviceState {
    lost: Mutex<Option<String>>,
    last_error: Mutex<Option<String>>,
}

impl DeviceState {
    /// The reason the device was lost, if it was.
    pub(crate) fn lost(&self) -> Option<String> {
        lock(&self.lost).clone()
    }
    fn mark_lost(&self, reason: String) {
        let mut l = lock(&self.lost);
        if l.is_none() {
            *l = Some(reason);
        }
    }
}

/// The wgpu half of a GPU device.
pub(crate) struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) state: Arc<DeviceState>,
    pub(crate) pool: Mutex<Pool>,
    /// Compiled kernels by WGSL text, least recently used evicted first.
    pub(crate) kernels: Mutex<crate::cache::Lru<String, Arc<Kernel>>>,
    /// Textures that texture-reading kernels' operands are copied into (see `texture.rs`).
    pub(crate) textures: super::texture::TextureCache,
    /// Idle `MAP_READ` staging buffers kept for the next download (see `transfer.rs`).
    pub(crate) staging: Mutex<Vec<wgpu::Buffer>>,
    /// `MAP_WRITE` staging buffers of large uploads, each with its pending re-map.
    pub(crate) upload_staging: Mutex<Vec<(wgpu::Buffer, super::transfer::WriteMap)>>,
    /// True on wgpu's GL backend (see [`GL_CONTEXT`]).
    pub(crate) is_gl: bool,
    /// Error scopes popped in the browser and not yet resolved (see `scopes.rs`).
    pub(crate) deferred: Mutex<Deferred>,
    /// Set once [`Device::wgpu`] handed the wgpu device out: from then on its owner may destroy
    /// it behind brigade's back, which wgpu reports only from a poll (see [`Gpu::lost_now`]).
    pub(crate) handed_out: std::sync::atomic::AtomicBool,
    /// Present when array reads map storage buffers in place (`MAPPABLE_PRIMARY_BUFFERS` on a
    /// unified-memory adapter): storage buffers are also `MAP_READ`, and submits go through it.
    pub(crate) map_gate: Option<super::transfer::MapGate>,
    /// The on-disk pipeline cache, where the backend has one (`PIPELINE_CACHE`: Vulkan).
    pub(crate) pipelines: Option<super::kernel::PipelineDisk>,
    /// True for a device the app created and handed over ([`Device::from_wgpu`]): brigade never
    /// destroys it.
    pub(crate) app_owned: bool,
    /// True once brigade's uncaptured-error handler and device-lost callback are installed
    /// natively (always for devices brigade requested; on request for an app's device, see
    /// [`Device::install_wgpu_handlers`]). Without them a loss is found by probing
    /// ([`Gpu::probe_lost`]), since wgpu tells of a loss only through the callback.
    pub(crate) handlers: std::sync::atomic::AtomicBool,
    /// Slots proving that `Jit::encode`s' commands ran (see [`super::pool::EncodeMark`]).
    pub(crate) ledger: Arc<Mutex<super::pool::Ledger>>,
}

/// The largest array brigade stores on a GPU device: kernels index elements (4 bytes each) with
/// 32-bit integers.
pub(crate) const MAX_ARRAY_BYTES: u64 = u32::MAX as u64 * 4;

/// How long a call that failed waits for the device's queue to drain before it decides whether
/// the device was lost (wgpu reports a destroyed device only once its queue is empty).
#[cfg(not(target_arch = "wasm32"))]
const LOSS_DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Gpu {
    /// Why the device is lost, if it is, asking wgpu first.
    ///
    /// wgpu drops the errors of calls on a destroyed or lost device, and reports a
    /// `wgpu::Device::destroy` only from a later poll, once the queue is empty, so brigade's own
    /// state can lag behind. This polls once: with `drain` (after a call failed) waiting up to
    /// [`LOSS_DRAIN_WAIT`] for submitted work so that the lost callback runs; without it, never
    /// blocking, and only when the wgpu device was handed out ([`Device::wgpu`]): a driver loss
    /// runs the callback at once, inside the call that met it, so only an outside `destroy`
    /// needs the poll (about 8 µs on lavapipe, spared to every other submit).
    pub(crate) fn lost_now(&self, drain: bool) -> Option<String> {
        if let Some(reason) = self.state.lost() {
            return Some(reason);
        }
        if !drain && !self.handed_out.load(Ordering::Acquire) {
            return None;
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let poll = if drain {
                wgpu::PollType::Wait {
                    submission_index: None,
                    timeout: Some(LOSS_DRAIN_WAIT),
                }
            } else {
                wgpu::PollType::Poll
            };
            let _gl = self.gl_guard();
            // A poll error is no loss by itself; the callback decides.
            let _ = self.device.poll(poll);
            if self.state.lost().is_none()
                && !self.handlers.load(Ordering::Acquire)
                && self.probe_lost()
            {
                self.state.mark_lost(
                    "its wgpu device was destroyed or lost (wgpu::Device::destroy by the app, or a driver loss)"
                        .to_string(),
                );
            }
        }
        let _ = drain;
        self.state.lost()
    }

    /// True when wgpu has invalidated the device (an app's `destroy`, a driver loss), asked
    /// without a device-lost callback: a map of a fresh 4-byte buffer fails at once, inside
    /// `map_async`, exactly when the device is no longer valid (wgpu-core checks validity there
    /// before anything else can fail), and otherwise stays pending until the buffer is dropped.
    /// Runs inside brigade's error scopes so that nothing reaches the app's uncaptured-error
    /// handler. About as costly as a small allocation; only app devices without brigade's
    /// handlers use it.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn probe_lost(&self) -> bool {
        let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // An error a scope caught says nothing about loss (wgpu drops the errors of a lost
        // device); only the map's own answer counts.
        let (lost, _) = self.capture(|| {
            let probe = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("brigade loss probe"),
                size: 4,
                usage: wgpu::BufferUsages::MAP_READ,
                mapped_at_creation: false,
            });
            let f = failed.clone();
            probe.slice(..).map_async(wgpu::MapMode::Read, move |r| {
                if r.is_err() {
                    f.store(true, Ordering::Release);
                }
            });
            // Read before the drop below aborts a pending map (which also reports an error).
            let lost = failed.load(Ordering::Acquire);
            drop(probe);
            lost
        });
        lost
    }

    /// Serialize GL calls across threads; a no-op on other backends and when this thread holds it.
    ///
    /// Every wgpu call of brigade's takes it, so it also marks the thread as one that uses wgpu
    /// (see `thread_exit.rs`).
    pub(crate) fn gl_guard(&self) -> GlGuard {
        let guard = if !self.is_gl || GL_HELD.with(|h| h.get()) {
            GlGuard(None)
        } else {
            let g = lock(&GL_CONTEXT);
            GL_HELD.with(|h| h.set(true));
            GlGuard(Some(g))
        };
        super::thread_exit::enter(&self.device);
        guard
    }

    /// Run `f` inside validation, out-of-memory and internal error scopes and return the first
    /// error caught (out-of-memory first).
    ///
    /// Native scopes resolve immediately. In the browser popping a scope is asynchronous and these
    /// calls are synchronous, so the popped scopes are kept (see `scopes.rs`) and the error, if
    /// any, is returned by the next await on the device ([`Device::flush_errors`]); here the
    /// result is always `None` there.
    pub(crate) fn capture<T>(&self, f: impl FnOnce() -> T) -> (T, Option<wgpu::Error>) {
        self.capture_as(|| Origin::Work, f)
    }

    /// [`Gpu::capture`], saying what the work is (named in a browser error found later).
    pub(crate) fn capture_as<T>(
        &self,
        origin: impl FnOnce() -> Origin,
        f: impl FnOnce() -> T,
    ) -> (T, Option<wgpu::Error>) {
        let _gl = self.gl_guard();
        #[cfg(not(target_arch = "wasm32"))]
        {
            use futures::FutureExt;
            let _ = origin; // errors are the caller's to name natively
            let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
            let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
            let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
            let out = f();
            let e_val = validation.pop().now_or_never().flatten();
            let e_oom = oom.pop().now_or_never().flatten();
            let e_int = internal.pop().now_or_never().flatten();
            (out, e_oom.or(e_val).or(e_int))
        }
        #[cfg(target_arch = "wasm32")]
        {
            let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
            let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
            let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
            let out = f();
            // Popping takes effect at once; only the results arrive later.
            let (v, o, i) = (validation.pop(), oom.pop(), internal.pop());
            let errors = async move {
                let (v, o, i) = (v.await, o.await, i.await);
                o.or(v).or(i)
            };
            lock(&self.deferred).push(origin(), Box::pin(errors));
            (out, None)
        }
    }
}

/// Refuse an app's buffer that is mapped, or that brigade's wgpu device did not create, asking
/// only the buffer itself (its own wgpu context): the detail of the refusal, naming the fix.
///
/// A mapped buffer answers `get_mapped_range`. For the owner: a buffer reports the errors of its
/// own calls to the error sink of the device that created it, i.e. to that device's innermost
/// error scope on this thread. `unmap` of a buffer that is not mapped is such an error and
/// changes nothing, so inside a scope pushed on brigade's device it is caught exactly when
/// brigade's device made the buffer. Otherwise the error goes to the other device: to its
/// scope, its uncaptured-error handler (the app sees one spurious "not mapped" validation
/// error), or wgpu's default handler, which panics: caught here, without printing.
#[cfg(not(target_arch = "wasm32"))]
fn probe_app_buffer(gpu: &Gpu, buffer: &wgpu::Buffer) -> std::result::Result<(), String> {
    use futures::FutureExt;
    match buffer.slice(..).get_mapped_range() {
        Ok(view) => {
            drop(view);
            return Err(format!(
                "the buffer ({} bytes) is mapped (made with `mapped_at_creation: true`, or mapped by \
                 `map_async`), and kernels cannot use a mapped buffer: call `buffer.unmap()` (after \
                 writing its data) before importing it",
                buffer.size()
            ));
        }
        // "Buffer is not mapped": the case this import needs.
        Err(e) if e.to_string().contains("not mapped") => {}
        Err(e) => {
            return Err(format!(
                "wgpu cannot access the buffer ({e}): a buffer mapped in part must be unmapped \
                 (`buffer.unmap()`), a destroyed one cannot be imported"
            ));
        }
    }
    let _gl = gpu.gl_guard();
    let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let _ = quietly(|| buffer.unmap());
    let ours = scope.pop().now_or_never().flatten().is_some();
    if ours {
        return Ok(());
    }
    Err(
        "the buffer belongs to another wgpu device (or to another `wgpu::Instance`): create it with \
         this device's wgpu device (`device.wgpu()`), attach your device to brigade with \
         `Device::from_wgpu`, or copy its data over through the host. (A buffer with a `map_async` \
         still pending is refused the same way, its mapping aborted: wait for the map callback and \
         `unmap` it before importing it.)"
            .into(),
    )
}

/// Run `f`, catching a panic and keeping the panic hook quiet about it (the hook installed here
/// delegates to the previous one outside `quietly`).
#[cfg(not(target_arch = "wasm32"))]
fn quietly<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    use std::cell::Cell;
    thread_local! {
        static QUIET: Cell<bool> = const { Cell::new(false) };
    }
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info)
            }
        }));
    });
    let was = QUIET.with(|q| q.replace(true));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    out
}

/// Install brigade's uncaptured-error handler and/or device-lost callback on `g`'s device.
fn install_handlers(g: &Gpu, label: &str, uncaptured: bool, lost: bool) {
    if uncaptured {
        let state = g.state.clone();
        let label = label.to_string();
        g.device
            .on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
                let msg = e.to_string();
                log::error!("brigade: uncaptured wgpu error on device {label}: {msg}");
                *lock(&state.last_error) = Some(msg);
            }));
    }
    if lost {
        let state = g.state.clone();
        let label = label.to_string();
        g.device.set_device_lost_callback(move |reason, msg| {
            let reason = match reason {
                wgpu::DeviceLostReason::Destroyed => format!(
                    "its wgpu device was destroyed (wgpu::Device::destroy){}",
                    if msg.is_empty() {
                        String::new()
                    } else {
                        format!(" ({msg})")
                    }
                ),
                wgpu::DeviceLostReason::Unknown => {
                    if msg.is_empty() {
                        "lost by the driver".to_string()
                    } else {
                        msg
                    }
                }
            };
            if state.lost().is_none() {
                log::warn!("brigade: device {label} lost: {reason}");
            }
            state.mark_lost(reason);
        });
    }
    // Natively both together replace the probe; the browser's lost callback alone does too,
    // since there the probe cannot answer synchronously.
    if (uncaptured && lost) || cfg!(target_arch = "wasm32") {
        g.handlers.store(true, Ordering::Release);
    }
}

/// What brigade's kernels need of a device's compute limits: its elementwise and reduction
/// kernels are `@workgroup_size(256)` (the cooperative reduction keeps 256 4-byte partials in
/// workgroup memory) and a matmul binds 3 storage buffers. WebGPU guarantees all of these; an
/// app's device has less only when it was requested lower.
pub(crate) const KERNEL_NEEDS: [(&str, u64); 4] = [
    ("max_compute_workgroup_size_x", 256),
    ("max_compute_invocations_per_workgroup", 256),
    ("max_compute_workgroup_storage_size", 1024),
    ("max_storage_buffers_per_shader_stage", 3),
];

/// [`Error::Unsupported`] naming every limit of `l` below [`KERNEL_NEEDS`].
fn check_kernel_limits(label: &str, l: &wgpu::Limits) -> Result<()> {
    let have = |name: &str| -> u64 {
        match name {
            "max_compute_workgroup_size_x" => l.max_compute_workgroup_size_x.into(),
            "max_compute_invocations_per_workgroup" => {
                l.max_compute_invocations_per_workgroup.into()
            }
            "max_compute_workgroup_storage_size" => l.max_compute_workgroup_storage_size.into(),
            _ => l.max_storage_buffers_per_shader_stage.into(),
        }
    };
    let short: Vec<String> = KERNEL_NEEDS
        .iter()
        .filter(|(name, need)| have(name) < *need)
        .map(|(name, need)| format!("{name} is {} but brigade needs at least {need}", have(name)))
        .collect();
    if short.is_empty() {
        return Ok(());
    }
    Err(Error::Unsupported {
        op: "Device::from_wgpu",
        detail: format!(
            "on device {label}: {} (brigade's kernels use @workgroup_size(256), 1 KiB of workgroup \
             memory and 3 storage buffers); request the device with at least these limits, e.g. \
             starting from wgpu::Limits::downlevel_defaults() and lowering only buffer sizes and \
             workgroup counts",
            short.join(", ")
        ),
    })
}

/// Shared state of one logical device.
pub(crate) struct DeviceInner {
    pub(crate) id: u64,
    pub(crate) info: DeviceInfo,
    /// `index [backend: adapter]`, used in error messages.
    pub(crate) label: String,
    /// `None` for the cpu device.
    pub(crate) gpu: Option<Gpu>,
    /// Capacities of the caches that hold programs for this device (see `caches.rs`).
    pub(crate) caches: super::caches::CacheSettings,
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        // Dropping the queue and the pooled buffers takes wgpu's snatch lock, which a thread
        // that is ending may no longer take (see `thread_exit.rs`).
        if let Some(gpu) = self.gpu.take() {
            super::thread_exit::drop_safely(move || drop(gpu));
        }
    }
}

/// One logical device: a wgpu `Device` + `Queue` on some adapter, or the `cpu` device.
///
/// Cheap to clone (an `Arc` inside); clones are the same device. All methods take `&self` and may be
/// called from several threads on native. On the `cpu` device arrays are host data: the GPU methods
/// (`alloc`, `upload`, `kernel`, `run`, …) return [`Error::Unsupported`] there.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

/// One compute dispatch: a kernel, its buffers bound in order at `@group(0) @binding(0..n)`, and the
/// workgroup counts.
pub struct Dispatch<'a> {
    /// A kernel compiled on the same device by [`Device::kernel`].
    pub kernel: &'a Kernel,
    /// Buffers bound at `@group(0) @binding(i)`, one per binding the kernel declares.
    pub buffers: Vec<&'a DeviceBuffer>,
    /// Workgroup counts in x, y, z. A zero count skips the dispatch.
    pub workgroups: [u32; 3],
}

/// One step of [`Device::submit_commands`].
#[derive(Clone, Copy)]
pub enum Command<'a> {
    /// Run `dispatches[i]`.
    Dispatch(usize),
    /// Copy bytes between two buffers of the device.
    Copy(BufferCopy<'a>),
}

/// A buffer-to-buffer copy: `size` bytes from `src` at `src_offset` to `dst` at `dst_offset`
/// (offsets and size multiples of 4).
#[derive(Clone, Copy)]
pub struct BufferCopy<'a> {
    pub src: &'a DeviceBuffer,
    pub src_offset: u64,
    pub dst: &'a DeviceBuffer,
    pub dst_offset: u64,
    pub size: u64,
}

impl Device {
    pub(crate) fn from_inner(inner: Arc<DeviceInner>) -> Device {
        Device { inner }
    }

    /// A cpu device (no wgpu state).
    pub(crate) fn new_cpu(index: usize, adapter_index: usize) -> Device {
        let info = DeviceInfo {
            index,
            adapter_index,
            adapter_name: "cpu".to_string(),
            backend: "cpu".to_string(),
            device_type: "cpu".to_string(),
            limits: DeviceLimits::host(),
        };
        Device::from_parts(info, None)
    }

    /// Wrap a wgpu device and queue requested from an adapter, installing the error handlers.
    pub(crate) fn new_gpu(
        index: usize,
        adapter_index: usize,
        adapter: &wgpu::AdapterInfo,
        device: wgpu::Device,
        queue: wgpu::Queue,
        forced: super::runtime::Forced,
    ) -> Device {
        let dev = Device::wrap_gpu(index, adapter_index, adapter, device, queue, false, forced);
        if let Some(g) = &dev.inner.gpu {
            install_handlers(g, &dev.inner.label, true, true);
        }
        dev
    }

    /// Use a wgpu device the app created itself (a game's or renderer's own device), as one more
    /// brigade device.
    ///
    /// - **Limits and features are the device's** (`device.limits()`, `device.features()`), not
    ///   the adapter's: when the app requested fewer, brigade plans every program within them
    ///   (largest array = `max_storage_buffer_binding_size`, grids within
    ///   `max_compute_workgroups_per_dimension`, fusion within
    ///   `max_storage_buffers_per_shader_stage`) and only uses the optional features the device
    ///   has (`SUBGROUP`, `PIPELINE_CACHE`, `MAPPABLE_PRIMARY_BUFFERS`).
    /// - **brigade never destroys it**: [`Device::destroy`] on such a device frees brigade's
    ///   buffers and kernels and makes brigade's handle unusable, but leaves the wgpu device
    ///   alive for the app. The app may destroy it whenever it likes: brigade's next call then
    ///   returns [`Error::DeviceLost`].
    /// - **Error handlers stay the app's**: wgpu keeps one uncaptured-error handler and one
    ///   device-lost callback per device, and setting one replaces the other silently, so brigade
    ///   installs neither natively. It does not need them: every brigade call runs inside its own
    ///   error scopes ([`Error::Wgpu`], [`Error::Compile`], [`Error::OutOfMemory`] come back from
    ///   the call), and a loss is found by a cheap validity probe before each submit, write and
    ///   read. Errors of the app's own calls keep reaching the app's handler. An app without
    ///   handlers of its own may call [`Device::install_wgpu_handlers`] to get brigade's; one
    ///   with a lost callback may forward losses with [`Device::report_lost`]. In the browser
    ///   brigade does add its lost callback (there it is a `GPUDevice.lost.then`, which does not
    ///   replace the page's).
    /// - The device is standalone (index 0, adapter 0). To use it beside discovered devices in a
    ///   [`Runtime`](super::Runtime) (one index space, one `pmap` mesh), pass it to
    ///   [`RuntimeBuilder::with_wgpu_device`](super::RuntimeBuilder::with_wgpu_device) instead;
    ///   standalone devices can also be mixed in a `pmap` with a runtime's devices.
    /// - On wgpu's GL backend, wgpu panics when two threads wait long for its GL context: make the
    ///   app's own GL calls on the same thread as brigade's, or not at the same time.
    ///
    /// Errors: [`Error::Unsupported`] when the device's compute limits are below what brigade's
    /// kernels need (`@workgroup_size(256)`: `max_compute_workgroup_size_x` and
    /// `max_compute_invocations_per_workgroup` at least 256, 1 KiB of workgroup storage, 3
    /// storage buffers per shader stage; every WebGPU device has these unless requested lower),
    /// [`Error::DeviceLost`] when the device is already lost.
    ///
    /// **Browser:** this takes a `wgpu::Device` (a Rust app on wgpu's WebGPU backend). A page's
    /// own JavaScript `GPUDevice` cannot become one: wgpu 30 builds its WebGPU device wrapper only
    /// inside `Adapter::request_device` (`future_request_device` in `wgpu/src/backend/webgpu.rs`;
    /// the wrapper's fields are crate-private), and `wgpu::Device::from_custom` needs a whole
    /// custom backend. Go the other way: let brigade request the device and hand its
    /// `GPUDevice` to the page with `device.wgpu().unwrap().0.as_webgpu()`.
    ///
    /// ```
    /// # fn main() -> brigade::Result<()> { pollster::block_on(async {
    /// use brigade::{Array, Tensor, jit, wgpu};
    /// let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    /// let adapter = instance
    ///     .request_adapter(&wgpu::RequestAdapterOptions::default())
    ///     .await
    ///     .expect("an adapter");
    /// let limits = wgpu::Limits {
    ///     max_storage_buffer_binding_size: 1 << 20,
    ///     ..wgpu::Limits::downlevel_defaults()
    /// };
    /// let (device, queue) = adapter
    ///     .request_device(&wgpu::DeviceDescriptor { required_limits: limits, ..Default::default() })
    ///     .await
    ///     .expect("a device");
    /// let dev = brigade::Device::from_wgpu(adapter.get_info(), device.clone(), queue)?;
    /// assert_eq!(dev.limits().max_storage_buffer_binding_size, 1 << 20);
    /// let x = Array::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
    /// let y = jit(|a: &[Tensor]| vec![a[0].mul(&a[0])]).on(&dev).call(&[x])?;
    /// assert_eq!(y[0].to_vec::<f32>()?, vec![1.0, 4.0, 9.0]);
    /// dev.destroy(); // brigade lets go; the app's `device` stays usable
    /// # Ok(()) }) }
    /// ```
    pub fn from_wgpu(
        adapter_info: wgpu::AdapterInfo,
        device: wgpu::Device,
        queue: wgpu::Queue,
    ) -> Result<Device> {
        Device::from_app(0, 0, &adapter_info, device, queue, Default::default())
    }

    /// [`Device::from_wgpu`] at a position of a runtime.
    pub(crate) fn from_app(
        index: usize,
        adapter_index: usize,
        adapter: &wgpu::AdapterInfo,
        device: wgpu::Device,
        queue: wgpu::Queue,
        forced: super::runtime::Forced,
    ) -> Result<Device> {
        let limits = device.limits();
        let label = format!(
            "{index} [{}: {}]",
            backend_name(adapter.backend),
            adapter.name
        );
        check_kernel_limits(&label, &limits)?;
        let dev = Device::wrap_gpu(index, adapter_index, adapter, device, queue, true, forced);
        let g = dev.gpu("Device::from_wgpu")?;
        // A lost callback chains in the browser (`lost.then`); natively it would replace the app's.
        #[cfg(target_arch = "wasm32")]
        install_handlers(g, &dev.inner.label, false, true);
        if let Some(reason) = g.lost_now(false) {
            return Err(dev.lost_error(reason));
        }
        Ok(dev)
    }

    /// Install brigade's uncaptured-error handler and device-lost callback on an app's device
    /// ([`Device::from_wgpu`]), **replacing the app's own** (wgpu keeps one of each per device).
    ///
    /// With them, an error no scope caught is logged and kept in [`Device::last_error`], and a
    /// loss is known the moment wgpu reports it instead of by probing before each call. Devices
    /// brigade requested itself always have them (a no-op there). Errors:
    /// [`Error::Unsupported`] on the cpu device, [`Error::DeviceLost`] on a lost one.
    pub fn install_wgpu_handlers(&self) -> Result<()> {
        let g = self.gpu("Device::install_wgpu_handlers")?;
        if !g.handlers.load(Ordering::Acquire) {
            install_handlers(g, &self.inner.label, true, true);
        }
        Ok(())
    }

    /// Tell brigade that the wgpu device is lost, from the app's own device-lost callback (so
    /// that an app keeping its callback still has brigade stop at once): every later GPU call on
    /// this device returns [`Error::DeviceLost`] with `reason`. brigade also finds a loss by
    /// itself; this only makes it immediate. A no-op on the cpu device.
    ///
    /// ```no_run
    /// # fn demo(dev: brigade::Device, device: brigade::wgpu::Device) {
    /// let d = dev.clone();
    /// device.set_device_lost_callback(move |reason, msg| {
    ///     // ... the app's own handling ...
    ///     d.report_lost(format!("{reason:?}: {msg}"));
    /// });
    /// # }
    /// ```
    pub fn report_lost(&self, reason: impl Into<String>) {
        if let Some(g) = &self.inner.gpu {
            let reason = reason.into();
            if g.state.lost().is_none() {
                log::warn!("brigade: device {} lost: {reason}", self.inner.label);
            }
            g.state.mark_lost(reason);
        }
    }

    /// True when the wgpu device is the app's ([`Device::from_wgpu`]): brigade never destroys it.
    pub fn is_app_device(&self) -> bool {
        self.inner.gpu.as_ref().is_some_and(|g| g.app_owned)
    }

    fn wrap_gpu(
        index: usize,
        adapter_index: usize,
        adapter: &wgpu::AdapterInfo,
        device: wgpu::Device,
        queue: wgpu::Queue,
        app_owned: bool,
        forced: super::runtime::Forced,
    ) -> Device {
        let mut limits = DeviceLimits::from_wgpu(&device.limits());
        // Forced limits (`BRIGADE_MAX_BINDING`, `BRIGADE_MAX_BUFFER`) only ever lower the
        // device's own.
        forced.apply(&mut limits);
        let info = DeviceInfo {
            index,
            adapter_index,
            adapter_name: adapter.name.clone(),
            backend: backend_name(adapter.backend).to_string(),
            device_type: device_type_name(adapter.device_type).to_string(),
            limits,
        };
        let gpu = Gpu {
            queue,
            state: Arc::new(DeviceState::default()),
            pool: Mutex::new(Pool::new()),
            staging: Mutex::new(Vec::new()),
            upload_staging: Mutex::new(Vec::new()),
            kernels: Mutex::new(crate::cache::Lru::new(
                super::caches::CacheSettings::default().kernel_capacity(),
            )),
            textures: super::texture::new_cache(),
            is_gl: adapter.backend == wgpu::Backend::Gl,
            deferred: Mutex::new(Deferred::default()),
            // The app holds its device from the start and may destroy it at any time.
            handed_out: std::sync::atomic::AtomicBool::new(app_owned),
            map_gate: (device
                .features()
                .contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS)
                && super::runtime::mapped_reads_suit(adapter))
            .then(super::transfer::MapGate::default),
            pipelines: super::kernel::PipelineDisk::open(&device, adapter),
            device,
            app_owned,
            handlers: std::sync::atomic::AtomicBool::new(false),
            ledger: Default::default(),
        };
        Device::from_parts(info, Some(gpu))
    }

    fn from_parts(info: DeviceInfo, gpu: Option<Gpu>) -> Device {
        let label = Device::label_of(&info);
        Device {
            inner: Arc::new(DeviceInner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                info,
                label,
                gpu,
                caches: super::caches::CacheSettings::default(),
            }),
        }
    }

    fn label_of(info: &DeviceInfo) -> String {
        if info.backend == "cpu" {
            format!("{} [cpu]", info.index)
        } else {
            format!("{} [{}: {}]", info.index, info.backend, info.adapter_name)
        }
    }

    /// What this device is: index, adapter, backend, limits.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// Position of the device in its runtime's device list.
    pub fn index(&self) -> usize {
        self.inner.info.index
    }

    /// True for the `cpu` device (host data, run by `brigade::cpu`).
    pub fn is_cpu(&self) -> bool {
        self.inner.gpu.is_none()
    }

    /// The device's limits (shortcut for `info().limits`).
    pub fn limits(&self) -> &DeviceLimits {
        &self.inner.info.limits
    }

    /// A short name for messages: `0 [vulkan: llvmpipe (LLVM 15.0.6, 256 bits)]`.
    pub fn name(&self) -> &str {
        &self.inner.label
    }

    /// True once the device was lost or destroyed; every later GPU call returns
    /// [`Error::DeviceLost`].
    ///
    /// Also true right after `device.wgpu().0.destroy()` (wgpu's own destroy, behind brigade's
    /// back) once the work submitted before it has finished: this asks wgpu with one
    /// non-blocking poll. False for the cpu device.
    pub fn is_lost(&self) -> bool {
        self.inner
            .gpu
            .as_ref()
            .is_some_and(|g| g.lost_now(false).is_some())
    }

    /// The last wgpu error that no error scope caught (also logged with `log::error!`).
    pub fn last_error(&self) -> Option<String> {
        self.inner
            .gpu
            .as_ref()
            .and_then(|g| lock(&g.state.last_error).clone())
    }

    /// The wgpu device and queue, for code that records its own commands (`None` on the cpu device).
    ///
    /// brigade checks for a loss more often from then on (one non-blocking poll before each
    /// submit, write and read), since the caller may `destroy()` the device behind its back.
    pub fn wgpu(&self) -> Option<(&wgpu::Device, &wgpu::Queue)> {
        self.inner.gpu.as_ref().map(|g| {
            g.handed_out.store(true, Ordering::Release);
            (&g.device, &g.queue)
        })
    }

    /// The GPU half, or the error for a cpu or lost device.
    pub(crate) fn gpu(&self, op: &'static str) -> Result<&Gpu> {
        match &self.inner.gpu {
            None => Err(Error::Unsupported {
                op,
                detail: format!(
                    "on the cpu device {}: arrays there are host data, run by the host executor (`brigade::cpu`)",
                    self.inner.label
                ),
            }),
            Some(g) => match g.state.lost() {
                Some(reason) => Err(self.lost_error(reason)),
                None => Ok(g),
            },
        }
    }

    /// [`Device::gpu`] for a call that does work on the device (write, compile, allocate,
    /// submit, read): also asks wgpu whether the device was lost behind brigade's back, with one
    /// non-blocking poll ([`Gpu::lost_now`]), since wgpu silently drops such calls.
    pub(crate) fn live_gpu(&self, op: &'static str) -> Result<&Gpu> {
        let gpu = self.gpu(op)?;
        match gpu.lost_now(false) {
            Some(reason) => Err(self.lost_error(reason)),
            None => Ok(gpu),
        }
    }

    /// The error for a call that failed in a way a lost device also explains (a map that did not
    /// complete, a callback that never ran): [`Error::DeviceLost`] when wgpu, once the queue has
    /// drained, says the device is lost, else `otherwise`.
    pub(crate) fn lost_or(&self, otherwise: impl FnOnce() -> Error) -> Error {
        match self.inner.gpu.as_ref().and_then(|g| g.lost_now(true)) {
            Some(reason) => self.lost_error(reason),
            None => otherwise(),
        }
    }

    pub(crate) fn lost_error(&self, reason: String) -> Error {
        Error::DeviceLost {
            device: self.inner.label.clone(),
            reason,
        }
    }

    /// Turn a caught wgpu error into brigade's error (`what` says what was being done).
    ///
    /// A failure on a device that wgpu has invalidated (destroyed, lost) is [`Error::DeviceLost`]:
    /// the device is polled once (letting its queue drain) so that wgpu reports the loss, and a
    /// validation error that itself says the device is lost marks it lost.
    pub(crate) fn wgpu_error(&self, e: wgpu::Error, what: impl FnOnce() -> String) -> Error {
        let Some(gpu) = self.inner.gpu.as_ref() else {
            return Error::Wgpu {
                device: self.inner.label.clone(),
                message: format!("{}: {e}", what()),
            };
        };
        if let Some(reason) = gpu.lost_now(true) {
            return self.lost_error(reason);
        }
        if let Some(cause) = says_device_lost(&e) {
            let reason = format!("{}: {cause}", what());
            gpu.state.mark_lost(reason.clone());
            return self.lost_error(reason);
        }
        match e {
            wgpu::Error::OutOfMemory { .. } => Error::OutOfMemory {
                device: self.inner.label.clone(),
                detail: what(),
            },
            other => Error::Wgpu {
                device: self.inner.label.clone(),
                message: format!("{}: {other}", what()),
            },
        }
    }

    /// Check that an array of `bytes` bytes can live on this device; its size rounded up to 4.
    ///
    /// An array larger than one storage binding (`max_storage_buffer_binding_size`) is bound in
    /// segments, aligned sub-ranges each within the binding limit (see `lower::segments`); one
    /// larger than `max_buffer_size` is stored in several buffers, parts of
    /// [`DeviceLimits::part_bytes`] each (copies and transfers go part by part; no binding
    /// straddles two). What bounds an array is 32-bit kernel indexing ([`MAX_ARRAY_BYTES`]),
    /// refused here with [`Error::OverLimit`], and the memory budget ([`Error::OutOfMemory`]).
    pub(crate) fn check_fits(&self, bytes: u64, what: impl FnOnce() -> String) -> Result<u64> {
        match bytes.max(4).checked_next_multiple_of(4) {
            Some(size) if size <= MAX_ARRAY_BYTES => Ok(size),
            _ => Err(Error::OverLimit {
                device: self.inner.label.clone(),
                what: what(),
                needed: bytes,
                limit: MAX_ARRAY_BYTES,
                unit: "bytes",
                limit_name: "32-bit kernel indexing (2^32 - 1 elements of 4 bytes)",
            }),
        }
    }

    /// A buffer of at least `bytes` bytes (minimum 4), from the pool when one of the same bucket is
    /// free (see [`bucket_size`]). Its contents are unspecified.
    ///
    /// Errors: [`Error::OverLimit`] when `bytes` exceeds the device's `max_buffer_size` (never
    /// fits: split the work; arrays over the storage-binding limit are bound in segments), [`Error::OutOfMemory`] when it does not fit the device's
    /// memory budget ([`Device::set_memory_limit`]) next to the buffers in use, or the device cannot
    /// allocate it, even after the pool released its free buffers (free arrays and retry; the
    /// message names the bytes requested, in use and the limit), [`Error::DeviceLost`],
    /// [`Error::Unsupported`] on the cpu device.
    pub fn alloc(&self, bytes: u64) -> Result<Arc<DeviceBuffer>> {
        self.alloc_with(bytes, wgpu::BufferUsages::empty())
    }

    /// [`Device::alloc`] with `extra` usages (checked by [`check_output_usages`]) beyond
    /// brigade's own; pooled apart from buffers with other usages.
    pub(crate) fn alloc_with(
        &self,
        bytes: u64,
        extra: wgpu::BufferUsages,
    ) -> Result<Arc<DeviceBuffer>> {
        let gpu = self.gpu("alloc")?;
        let size = self.check_fits(bytes, || format!("a buffer of {}", human_bytes(bytes)))?;
        if size > self.inner.info.limits.max_buffer_size {
            return self.alloc_parts(size, extra);
        }
        let bucket = bucket_size(size, self.inner.info.limits.max_buffer_size);
        let mut freed = Vec::new();
        let reserved = {
            let mut pool = lock(&gpu.pool);
            if let Some(buffer) = pool.take(bucket, extra) {
                return Ok(self.wrap(buffer, size, bucket, extra));
            }
            pool.reserve(bucket, size, &mut freed)
        };
        let capacity = self.reserved(gpu, reserved, freed, bytes)?;
        // Mappable too where array reads map their buffer in place (see `transfer.rs`).
        let mut usage = wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST
            | extra;
        if gpu.map_gate.is_some() {
            usage |= wgpu::BufferUsages::MAP_READ;
        }
        let create = || {
            gpu.capture(|| {
                gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: capacity,
                    usage,
                    mapped_at_creation: false,
                })
            })
        };
        let (mut buffer, mut err) = create();
        if matches!(err, Some(wgpu::Error::OutOfMemory { .. })) {
            // Free what the pool holds and try once more.
            drop(buffer);
            let freed = lock(&gpu.pool).drain();
            let n = freed.len();
            drop(freed);
            log::warn!(
                "brigade: device {} out of memory allocating {}; freed {n} pooled buffers and retrying",
                self.inner.label,
                human_bytes(capacity)
            );
            (buffer, err) = create();
        }
        if let Some(e) = err {
            lock(&gpu.pool).unreserve(capacity);
            if matches!(e, wgpu::Error::OutOfMemory { .. }) && gpu.state.lost().is_none() {
                lock(&gpu.pool).oom += 1;
                return Err(self.out_of_memory(bytes, "the device could not allocate it"));
            }
            return Err(self.wgpu_error(e, || {
                format!(
                    "allocating a buffer of {} ({capacity} bytes)",
                    human_bytes(capacity)
                )
            }));
        }
        lock(&gpu.pool).stats.created += 1;
        Ok(self.wrap(buffer, size, capacity, extra))
    }

    /// The capacity the pool reserved for a new buffer of `bytes` requested bytes, after dropping
    /// the pooled buffers it `freed` to make room: [`Error::OutOfMemory`] when nothing could be
    /// reserved, [`Error::DeviceLost`] (the reservation given back) on a device wgpu has
    /// invalidated, where it would hand out an invalid buffer without a word.
    fn reserved(
        &self,
        gpu: &Gpu,
        reserved: Option<u64>,
        freed: Vec<wgpu::Buffer>,
        bytes: u64,
    ) -> Result<u64> {
        if !freed.is_empty() {
            // Destroying wgpu buffers touches the GL context: serialize like every GL call.
            let _gl = gpu.gl_guard();
            drop(freed);
        }
        let Some(capacity) = reserved else {
            return Err(self.out_of_memory(bytes, "it does not fit the memory limit"));
        };
        if let Some(reason) = gpu.lost_now(false) {
            lock(&gpu.pool).unreserve(capacity);
            return Err(self.lost_error(reason));
        }
        Ok(capacity)
    }

    /// A buffer of `size` bytes (a multiple of 4, over `max_buffer_size`) made of several wgpu
    /// buffers, parts of [`DeviceLimits::part_bytes`] each but the last, each allocated (and
    /// pooled) like any buffer.
    fn alloc_parts(&self, size: u64, extra: wgpu::BufferUsages) -> Result<Arc<DeviceBuffer>> {
        let part = self.inner.info.limits.part_bytes();
        let k = size.div_ceil(part);
        let parts = (0..k)
            .map(|i| self.alloc_with(part.min(size - i * part), extra))
            .collect::<Result<Vec<_>>>()
            .map_err(|e| match e {
                // Name the array, not the part that did not fit.
                Error::OutOfMemory { device, detail } => Error::OutOfMemory {
                    device,
                    detail: format!(
                        "an array of {} ({size} bytes) is stored in {k} parts of up to {}, and \
                         one of them could not be had: {detail}",
                        human_bytes(size),
                        human_bytes(part)
                    ),
                },
                e => e,
            })?;
        let capacity = parts.iter().map(|p| p.capacity).sum();
        let mut buf = self.wrap(wgpu::Buffer::clone(&parts[0].buffer), size, capacity, extra);
        let b = Arc::get_mut(&mut buf).expect("a buffer just made has one owner");
        (b.parts, b.part_bytes) = (parts, part);
        Ok(buf)
    }

    /// [`Error::OutOfMemory`] for a buffer of `bytes` bytes, naming what is in use and the limit.
    pub(super) fn out_of_memory(&self, bytes: u64, why: &str) -> Error {
        let m = self.memory_stats();
        let limit = match m.limit {
            Some(l) => format!(
                "the memory limit is {} ({l} bytes; set by memory_limit or {MEMORY_LIMIT_ENV})",
                human_bytes(l)
            ),
            None => "no memory limit is set".to_string(),
        };
        Error::OutOfMemory {
            device: self.inner.label.clone(),
            detail: format!(
                "a buffer of {} ({bytes} bytes) was requested but {why}: {} ({} bytes) are in use \
                 by live arrays and buffers, {} held free by the pool after releasing what it could; {limit}",
                human_bytes(bytes),
                human_bytes(m.bytes_in_use),
                m.bytes_in_use,
                human_bytes(m.bytes_held),
            ),
        }
    }

    fn wrap(
        &self,
        buffer: wgpu::Buffer,
        size: u64,
        capacity: u64,
        extra: wgpu::BufferUsages,
    ) -> Arc<DeviceBuffer> {
        Arc::new(DeviceBuffer {
            buffer: std::mem::ManuallyDrop::new(buffer),
            offset: 0,
            size,
            capacity,
            owner: self.inner.clone(),
            extra,
            imported: false,
            parts: Vec::new(),
            part_bytes: 0,
            shared: Default::default(),
            pending: Default::default(),
        })
    }

    /// Wrap `bytes` of an app's buffer from `offset` for an array of `aval` (see
    /// [`crate::Array::from_wgpu_buffer`], which documents the checks).
    pub(crate) fn import_buffer(
        &self,
        buffer: wgpu::Buffer,
        offset: u64,
        aval: &crate::trace::graph::Aval,
    ) -> Result<Arc<DeviceBuffer>> {
        const OP: &str = "Array::from_wgpu_buffer";
        if aval.dtype == crate::DType::F64 {
            return Err(crate::error::f64_on_gpu(OP, &aval.shape));
        }
        let gpu = self.live_gpu(OP)?;
        let bad = |detail: String| Error::BadBuffer {
            op: OP,
            device: self.inner.label.clone(),
            detail,
        };
        use wgpu::BufferUsages as U;
        let have = buffer.usage();
        let missing = (U::STORAGE | U::COPY_SRC | U::COPY_DST) - have;
        if !missing.is_empty() {
            return Err(bad(format!(
                "the buffer has usages {have:?}, without {missing:?}: create it with {missing:?} added \
                 (STORAGE: kernels bind it; COPY_SRC: reads and programs that copy their inputs; \
                 COPY_DST: outputs copied into it)"
            )));
        }
        let align = u64::from(gpu.device.limits().min_storage_buffer_offset_alignment);
        if !offset.is_multiple_of(align) {
            return Err(bad(format!(
                "offset {offset} is not a multiple of this device's min_storage_buffer_offset_alignment \
                 ({align} bytes): start the array at {} or {} instead",
                offset / align * align,
                offset.next_multiple_of(align)
            )));
        }
        let bytes = aval
            .shape
            .iter()
            .try_fold(4u64, |a, &d| a.checked_mul(d as u64))
            .ok_or_else(|| Error::ShapeTooLarge {
                op: OP,
                shape: aval.shape.clone(),
                detail: "its byte count overflows u64".into(),
            })?;
        let size = self.check_fits(bytes, || format!("importing an array of {aval}"))?;
        if offset
            .checked_add(size)
            .is_none_or(|end| end > buffer.size())
        {
            return Err(bad(format!(
                "an array of {aval} needs {size} bytes from offset {offset} (up to byte {}), but the buffer holds {} bytes: \
                 use a larger buffer, a smaller shape or a smaller offset",
                offset.saturating_add(size),
                buffer.size()
            )));
        }
        // Natively, whose buffer it is must be known before it meets brigade's device in any
        // call: wgpu-core looks a buffer up by its id in the registry of the device it is used
        // with, and a buffer of another `wgpu::Instance` has an id that is vacant there (a panic)
        // or names one of brigade's own buffers (a silent alias).
        #[cfg(not(target_arch = "wasm32"))]
        probe_app_buffer(gpu, &buffer).map_err(bad)?;
        // Binding it checks the rest (and, in the browser, the device, asynchronously).
        let ((), err) = gpu.capture(|| {
            let layout = gpu
                .device
                .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some("brigade import check"),
                    entries: &[wgpu::BindGroupLayoutEntry {
                        binding: 0,
                        visibility: wgpu::ShaderStages::COMPUTE,
                        ty: wgpu::BindingType::Buffer {
                            ty: wgpu::BufferBindingType::Storage { read_only: false },
                            has_dynamic_offset: false,
                            min_binding_size: None,
                        },
                        count: None,
                    }],
                });
            let group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("brigade import check"),
                layout: &layout,
                entries: &[wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &buffer,
                        offset,
                        size: wgpu::BufferSize::new(size),
                    }),
                }],
            });
            drop(group);
        });
        if let Some(e) = err {
            if let Some(reason) = gpu.lost_now(true) {
                return Err(self.lost_error(reason));
            }
            let text = e.to_string();
            let other_device = text.contains("cannot be used with") || text.contains("device");
            return Err(bad(if other_device {
                format!(
                    "the buffer belongs to another wgpu device: create it with this device's wgpu \
                     device (`device.wgpu()`), or copy its data over through the host (wgpu: {})",
                    text.trim()
                )
            } else {
                format!(
                    "wgpu refused to bind it as a storage buffer: {}",
                    text.trim()
                )
            }));
        }
        Ok(self.foreign_view(buffer, offset, size))
    }

    /// A view of `size` bytes of a wgpu buffer brigade does not own (an app's buffer, or the
    /// encode ledger's): never pooled, never mapped by a read (copied instead).
    fn foreign_view(&self, buffer: wgpu::Buffer, offset: u64, size: u64) -> Arc<DeviceBuffer> {
        Arc::new(DeviceBuffer {
            buffer: std::mem::ManuallyDrop::new(buffer),
            offset,
            size,
            capacity: size,
            owner: self.inner.clone(),
            extra: wgpu::BufferUsages::empty(),
            imported: true,
            parts: Vec::new(),
            part_bytes: 0,
            shared: std::sync::atomic::AtomicBool::new(true),
            pending: Default::default(),
        })
    }

    /// Usages added to every program output made on this device from now on (on top of those a
    /// program asks for with `Jit::output_usages`), e.g. `wgpu::BufferUsages::VERTEX` so that
    /// results can be bound as vertex buffers by the app's render pipelines
    /// ([`crate::Array::wgpu_buffer`]). Uploads and temporaries keep brigade's own usages.
    ///
    /// Allowed: `VERTEX`, `INDEX`, `UNIFORM`, `INDIRECT`. Binding them follows wgpu's rules: a
    /// `UNIFORM` binding is at most `max_uniform_buffer_binding_size` bytes (64 KiB by default,
    /// far below the storage limit), and an `INDIRECT` buffer must hold wgpu's indirect argument
    /// layout (`DispatchIndirectArgs` / `DrawIndirectArgs`, u32 words) at its offset. Errors: [`Error::BadBuffer`] for any other usage (e.g. `MAP_WRITE`),
    /// [`Error::Unsupported`] on the cpu device (its arrays are host data).
    ///
    /// ```no_run
    /// # fn demo(dev: &brigade::Device) -> brigade::Result<()> {
    /// dev.set_output_usages(wgpu::BufferUsages::VERTEX)?;
    /// assert_eq!(dev.output_usages(), wgpu::BufferUsages::VERTEX);
    /// # Ok(()) }
    /// ```
    pub fn set_output_usages(&self, usages: wgpu::BufferUsages) -> Result<()> {
        let gpu = self.gpu("set_output_usages")?;
        check_output_usages(usages, "Device::set_output_usages")?;
        lock(&gpu.pool).output_usages = usages;
        Ok(())
    }

    /// The usages [`Device::set_output_usages`] set (empty by default and on the cpu device).
    pub fn output_usages(&self) -> wgpu::BufferUsages {
        self.inner
            .gpu
            .as_ref()
            .map(|g| lock(&g.pool).output_usages)
            .unwrap_or(wgpu::BufferUsages::empty())
    }

    /// Like [`Device::alloc`], with every byte zero (one extra submit that clears the buffer).
    pub fn alloc_zeroed(&self, bytes: u64) -> Result<Arc<DeviceBuffer>> {
        let buf = self.alloc(bytes)?;
        let gpu = self.live_gpu("alloc_zeroed")?;
        let ((), err) = gpu.capture(|| {
            let mut enc = gpu
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("brigade clear"),
                });
            for (b, at, n) in buf.pieces(0, buf.capacity) {
                enc.clear_buffer(b, at, Some(n));
            }
            gpu.queue.submit([enc.finish()]);
        });
        if let Some(e) = err {
            return Err(self.wgpu_error(e, || "clearing a buffer".to_string()));
        }
        bump(|c| c.submits += 1);
        Ok(buf)
    }

    /// What this device's buffer pool holds and has done (all zero on the cpu device).
    pub fn pool_stats(&self) -> PoolStats {
        self.inner
            .gpu
            .as_ref()
            .map(|g| lock(&g.pool).stats)
            .unwrap_or_default()
    }

    /// The device memory brigade holds on this device and its budget (all zero on the cpu device,
    /// whose arrays are host memory).
    pub fn memory_stats(&self) -> MemoryStats {
        self.inner
            .gpu
            .as_ref()
            .map(|g| lock(&g.pool).memory_stats())
            .unwrap_or_default()
    }

    /// The memory budget of this device in bytes (None: unlimited).
    pub fn memory_limit(&self) -> Option<u64> {
        self.inner.gpu.as_ref().and_then(|g| lock(&g.pool).budget)
    }

    /// Set the memory budget of this device: the bytes of its storage buffers, in use or held free
    /// by the pool, never exceed `limit` (None: unlimited, the default); an allocation that would go
    /// over fails with [`Error::OutOfMemory`] after the pool released its free buffers. Lowering it
    /// below what is held frees pooled buffers now; buffers in use stay until dropped. Like JAX's
    /// memory fraction, set per device, usually for all devices through
    /// [`super::RuntimeBuilder::memory_limit`] or `BRIGADE_MEMORY_LIMIT`. No effect on the cpu device.
    pub fn set_memory_limit(&self, limit: Option<u64>) {
        if let Some(g) = &self.inner.gpu {
            let freed = {
                let mut pool = lock(&g.pool);
                pool.budget = limit;
                match limit {
                    Some(l) => {
                        let keep = l.saturating_sub(pool.stats.bytes_in_use);
                        pool.shrink_to(keep)
                    }
                    None => Vec::new(),
                }
            };
            let _gl = g.gl_guard();
            drop(freed);
        }
    }

    /// Bytes the pool may hold in free buffers (default 1 GiB).
    /// Lowering it frees the largest held buffers first; 0 disables pooling.
    pub fn set_pool_limit(&self, bytes: u64) {
        if let Some(g) = &self.inner.gpu {
            let freed = {
                let mut pool = lock(&g.pool);
                pool.limit = bytes;
                pool.shrink_to(bytes)
            };
            drop(freed);
        }
    }

    /// Free every buffer the pool holds (buffers in use are not affected).
    pub fn trim_pool(&self) {
        if let Some(g) = &self.inner.gpu {
            let freed = lock(&g.pool).drain();
            drop(freed);
            lock(&g.staging).clear();
            lock(&g.upload_staging).clear();
        }
    }

    /// Record `dispatches` in one command encoder and one compute pass (a bind group per dispatch),
    /// submit once, and (native) wait until the device has finished.
    ///
    /// Dispatches with a zero workgroup count are skipped; with nothing left, nothing is submitted.
    /// Errors: [`Error::OverLimit`] for a workgroup count above `max_compute_workgroups_per_dimension`
    /// (checked before anything is recorded), [`Error::Wgpu`] for a kernel or buffer from another
    /// device, a wrong number of buffers, or a wgpu validation error, [`Error::DeviceLost`].
    ///
    /// In the browser this cannot block: it returns after the submit, like [`Device::submit_only`];
    /// work submitted later, and downloads, still see its results (queue order).
    pub fn run(&self, dispatches: &[Dispatch<'_>]) -> Result<()> {
        self.submit_only(dispatches)?;
        self.wait()
    }

    /// Like [`Device::run`] but returns right after the submit, without waiting: submit to every
    /// device first, then wait on each ([`Device::wait`], or a download), so devices work at once.
    pub fn submit_only(&self, dispatches: &[Dispatch<'_>]) -> Result<()> {
        let order: Vec<Command<'_>> = (0..dispatches.len()).map(Command::Dispatch).collect();
        self.submit_commands(dispatches, &order)
    }

    /// Like [`Device::submit_only`], running `commands` in order: dispatches (by index into
    /// `dispatches`, each may run many times with one bind group) and buffer-to-buffer copies.
    /// Up to 4096 commands (and 32 compute passes) go in one submission; longer lists are
    /// submitted in chunks, each waiting for the chunk before the previous one, so that host
    /// memory stays bounded at any length. A compiled loop (`scan`) runs this way: the body's
    /// dispatches once per iteration, copies moving the per-iteration slices. Everything is
    /// checked before anything is recorded.
    ///
    /// Errors as [`Device::submit_only`], and [`Error::Wgpu`] for a copy outside a buffer, not a
    /// multiple of 4 bytes, within one buffer, or with a buffer of another device.
    pub fn submit_commands(
        &self,
        dispatches: &[Dispatch<'_>],
        commands: &[Command<'_>],
    ) -> Result<()> {
        let mut rec = self.recorder(dispatches)?;
        // Everything is checked before anything is recorded.
        for (i, c) in commands.iter().enumerate() {
            rec.check(i, c)?;
        }
        for c in commands {
            rec.push_checked(*c)?;
        }
        rec.finish()
    }

    /// A [`Recorder`] for commands over `dispatches` (checked here: device, buffer count, limits).
    pub(crate) fn recorder<'r, 'a>(
        &'r self,
        dispatches: &'r [Dispatch<'a>],
    ) -> Result<Recorder<'r, 'a>> {
        let gpu = self.gpu("run")?;
        let max_wg = self.inner.info.limits.max_compute_workgroups_per_dimension;
        let mut live = 0;
        // Position of each dispatch among the live ones (None: skipped, a zero workgroup count).
        let mut live_of: Vec<Option<usize>> = Vec::with_capacity(dispatches.len());
        for (i, d) in dispatches.iter().enumerate() {
            let k = d.kernel;
            if k.device_id != self.inner.id {
                return Err(Error::Wgpu {
                    device: self.inner.label.clone(),
                    message: format!(
                        "dispatch {i}: kernel `{}` was compiled on another device; compile it with this device's `kernel()`",
                        k.label()
                    ),
                });
            }
            if d.buffers.len() != k.bindings().len() {
                return Err(Error::Wgpu {
                    device: self.inner.label.clone(),
                    message: format!(
                        "dispatch {i}: kernel `{}` declares {} storage buffers (@group(0) @binding(0..{})) but {} were given",
                        k.label(),
                        k.bindings().len(),
                        k.bindings().len(),
                        d.buffers.len()
                    ),
                });
            }
            for (j, b) in d.buffers.iter().enumerate() {
                if b.owner.id != self.inner.id {
                    return Err(Error::Wgpu {
                        device: self.inner.label.clone(),
                        message: format!(
                            "dispatch {i}: buffer {j} of kernel `{}` lives on device {}, not on this one; download and upload it first",
                            k.label(),
                            b.owner.label
                        ),
                    });
                }
                let binding = &k.bindings()[j];
                // Arrays beyond the binding limit live in larger buffers (see `check_fits`):
                // binding one whole is refused here, typed, before wgpu's validation would.
                let max_binding = self.inner.info.limits.max_storage_buffer_binding_size;
                if binding.texture.is_none() && b.size > max_binding {
                    return Err(Error::OverLimit {
                        device: self.inner.label.clone(),
                        what: format!(
                            "binding {j} of dispatch {i} (kernel `{}`), a buffer range of {}",
                            k.label(),
                            human_bytes(b.size)
                        ),
                        needed: b.size,
                        limit: max_binding,
                        unit: "bytes",
                        limit_name: "max_storage_buffer_binding_size",
                    });
                }
                if let Some(why) = binding
                    .texture
                    .and_then(|t| super::texture::check_buffer(binding, t, b.offset, b.size))
                {
                    return Err(Error::Wgpu {
                        device: self.inner.label.clone(),
                        message: format!("dispatch {i} of kernel `{}`: {why}", k.label()),
                    });
                }
            }
            if let Some(&w) = d.workgroups.iter().find(|&&w| w > max_wg) {
                return Err(Error::OverLimit {
                    device: self.inner.label.clone(),
                    what: format!(
                        "dispatch {i} of kernel `{}` with workgroups {:?}",
                        k.label(),
                        d.workgroups
                    ),
                    needed: u64::from(w),
                    limit: u64::from(max_wg),
                    unit: "workgroups",
                    limit_name: "max_compute_workgroups_per_dimension",
                });
            }
            if d.workgroups.contains(&0) {
                live_of.push(None);
                continue;
            }
            live_of.push(Some(live));
            live += 1;
        }
        // Texture operands are made now, under the memory budget, so recording cannot fail.
        super::texture::reserve(self, gpu, dispatches)?;
        Ok(Recorder {
            dev: self,
            gpu,
            dispatches,
            live_of,
            groups: None,
            pending: Vec::new(),
            pushed: 0,
            passes: 0,
            in_flight: std::collections::VecDeque::new(),
        })
    }
    fn check_copy(&self, i: usize, c: &BufferCopy<'_>) -> Result<()> {
        let bad = |why: String| Error::Wgpu {
            device: self.inner.label.clone(),
            message: format!("command {i} (a buffer copy): {why}"),
        };
        if c.src.owner.id != self.inner.id || c.dst.owner.id != self.inner.id {
            return Err(bad("a buffer lives on another device".into()));
        }
        if std::ptr::eq(c.src, c.dst) || c.src.same_wgpu_buffer(c.dst) {
            return Err(bad("source and destination are the same buffer".into()));
        }
        if [c.src_offset, c.dst_offset, c.size]
            .iter()
            .any(|x| x % wgpu::COPY_BUFFER_ALIGNMENT != 0)
        {
            return Err(bad(format!(
                "offsets {} / {} and size {} must be multiples of {}",
                c.src_offset,
                c.dst_offset,
                c.size,
                wgpu::COPY_BUFFER_ALIGNMENT
            )));
        }
        let end = |o: u64| o.checked_add(c.size);
        if end(c.src_offset).is_none_or(|e| e > c.src.capacity)
            || end(c.dst_offset).is_none_or(|e| e > c.dst.capacity)
        {
            return Err(bad(format!(
                "{} bytes at {} of a {}-byte buffer into {} of a {}-byte buffer do not fit",
                c.size, c.src_offset, c.src.capacity, c.dst_offset, c.dst.capacity
            )));
        }
        Ok(())
    }

    /// Block until all work submitted to this device has finished (native). In the browser this
    /// returns at once (it cannot block); use [`Device::idle`] there. Nothing to do on the cpu device.
    pub fn wait(&self) -> Result<()> {
        let Some(gpu) = &self.inner.gpu else {
            return Ok(());
        };
        if let Some(reason) = gpu.state.lost() {
            return Err(self.lost_error(reason));
        }
        #[cfg(not(target_arch = "wasm32"))]
        if let Err(e) = {
            let _gl = gpu.gl_guard();
            gpu.device.poll(wgpu::PollType::wait_indefinitely())
        } {
            return Err(self.lost_or(|| Error::Wgpu {
                device: self.inner.label.clone(),
                message: format!("waiting for the device: {e}"),
            }));
        }
        match gpu.state.lost() {
            Some(reason) => Err(self.lost_error(reason)),
            None => Ok(()),
        }
    }

    /// Resolve when all work submitted so far has finished, on every platform (the browser's way
    /// to wait). Nothing to do on the cpu device.
    pub async fn idle(&self) -> Result<()> {
        let Some(gpu) = &self.inner.gpu else {
            return Ok(());
        };
        if let Some(reason) = gpu.state.lost() {
            return Err(self.lost_error(reason));
        }
        let (tx, rx) = futures::channel::oneshot::channel::<()>();
        gpu.queue.on_submitted_work_done(move || {
            let _ = tx.send(());
        });
        self.wait_for(rx, "waiting for submitted work").await
    }

    /// Report the errors wgpu caught in work brigade submitted so far on this device.
    ///
    /// In the browser error scopes resolve asynchronously, so a kernel the browser rejects, a
    /// dispatch that fails validation or an allocation that runs out of memory is not an error of
    /// the call that did it: this awaits the scopes brigade pushed around that work and returns
    /// the first error caught, once — [`Error::Compile`] for a shader (the kernel is dropped
    /// from the cache, so compiling it again fails again), [`Error::OutOfMemory`], or
    /// [`Error::Wgpu`] for other validation and internal errors. Every download and
    /// [`Device::idle`] runs it first, and a parallel call's `call_async` before it returns.
    /// Natively every call reports its own errors, so this only says whether the device is lost.
    /// Nothing to do on the cpu device.
    pub async fn flush_errors(&self) -> Result<()> {
        let Some(gpu) = &self.inner.gpu else {
            return Ok(());
        };
        let taken = lock(&gpu.deferred).take();
        let first = if taken.is_empty() {
            None
        } else {
            taken.first_error().await
        };
        if let Some(reason) = gpu.state.lost() {
            return Err(self.lost_error(reason));
        }
        match first {
            None => Ok(()),
            Some((Origin::Kernel { label, wgsl }, e)) => {
                lock(&gpu.kernels).remove(&wgsl);
                Err(super::scopes::kernel_error(
                    &self.inner.label,
                    &label,
                    &wgsl,
                    e,
                ))
            }
            Some((Origin::Work, e)) => Err(self.wgpu_error(e, || "device work".to_string())),
        }
    }

    /// Wait for a callback's channel: natively by polling the device, in the browser by awaiting.
    pub(crate) async fn wait_for<T>(
        &self,
        rx: futures::channel::oneshot::Receiver<T>,
        what: &str,
    ) -> Result<T> {
        let gpu = self.gpu("wait")?;
        #[cfg(not(target_arch = "wasm32"))]
        {
            let mut rx = rx;
            for attempt in 0..2000u32 {
                match rx.try_recv() {
                    Ok(Some(v)) => return Ok(v),
                    Ok(None) => {}
                    Err(_) => break,
                }
                if let Some(reason) = gpu.state.lost() {
                    return Err(self.lost_error(reason));
                }
                if attempt > 0 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                let polled = {
                    let _gl = gpu.gl_guard();
                    gpu.device.poll(wgpu::PollType::wait_indefinitely())
                };
                if let Err(e) = polled {
                    return Err(self.lost_or(|| Error::Wgpu {
                        device: self.inner.label.clone(),
                        message: format!("{what}: {e}"),
                    }));
                }
            }
            Err(self.lost_or(|| Error::Transfer {
                device: self.inner.label.clone(),
                detail: format!("{what}: the callback never ran"),
            }))
        }
        #[cfg(target_arch = "wasm32")]
        {
            let _ = gpu;
            // Work before this wait may have failed: report that rather than its results.
            self.flush_errors().await?;
            match rx.await {
                Ok(v) => Ok(v),
                Err(_) => Err(self.lost_or(|| Error::Transfer {
                    device: self.inner.label.clone(),
                    detail: format!("{what}: the callback was dropped"),
                })),
            }
        }
    }

    /// Number of kernels compiled and cached on this device.
    pub fn kernels_cached(&self) -> usize {
        self.inner
            .gpu
            .as_ref()
            .map(|g| lock(&g.kernels).len())
            .unwrap_or(0)
    }

    /// Destroy the wgpu device now: the device counts as lost and every later GPU call on it (and
    /// its clones) returns [`Error::DeviceLost`]. Frees pooled buffers and cached kernels.
    ///
    /// An app's device ([`Device::from_wgpu`]) is **not** destroyed: brigade lets go of it (its
    /// handle counts as lost, its pooled buffers, staging buffers and kernels are freed) and the
    /// wgpu device stays usable by the app. Arrays still alive keep their own buffers until
    /// dropped.
    pub fn destroy(&self) {
        if let Some(g) = &self.inner.gpu {
            g.state.mark_lost(if g.app_owned {
                "released by Device::destroy (the app's wgpu device itself stays alive)".to_string()
            } else {
                "destroyed by Device::destroy".to_string()
            });
            let freed = lock(&g.pool).drain();
            drop(freed);
            lock(&g.staging).clear();
            lock(&g.upload_staging).clear();
            let kernels = lock(&g.kernels).drain();
            drop(kernels);
            if !g.app_owned {
                g.device.destroy();
            }
        }
    }
}

/// The extra usages brigade may give output buffers: `VERTEX`, `INDEX`, `UNIFORM`, `INDIRECT`.
///
/// Binding such a buffer in the app's pipelines is the app's business, with wgpu's rules: a
/// `UNIFORM` binding is at most `max_uniform_buffer_binding_size` bytes (64 KiB by default, far
/// below the storage limit) at an offset that is a multiple of
/// `min_uniform_buffer_offset_alignment`, and an `INDIRECT` buffer must hold the exact layout of
/// `wgpu::util::DispatchIndirectArgs` / `DrawIndirectArgs` (u32 words) at its offset. `MAP_READ`
/// / `MAP_WRITE` and the copy and storage usages are not extras: brigade manages those itself.
pub(crate) fn check_output_usages(usages: wgpu::BufferUsages, op: &'static str) -> Result<()> {
    use wgpu::BufferUsages as U;
    let allowed = U::VERTEX | U::INDEX | U::UNIFORM | U::INDIRECT;
    let bad = usages - allowed;
    if bad.is_empty() {
        return Ok(());
    }
    Err(Error::BadBuffer {
        op,
        device: String::new(),
        detail: format!(
            "usages {bad:?} cannot be added to output buffers: only VERTEX, INDEX, UNIFORM and INDIRECT \
             are allowed (brigade sets STORAGE, COPY_SRC, COPY_DST and MAP_READ itself; to write an \
             output from the host, copy it with your own encoder or use Array::from_wgpu_buffer on a \
             buffer you created). UNIFORM bindings are limited to max_uniform_buffer_binding_size \
             (64 KiB by default); INDIRECT buffers must hold wgpu's indirect argument layout"
        ),
    })
}

/// Commands recorded into one command buffer before it is submitted. wgpu and the driver keep
/// every recorded command (and wgpu its resource tracking) until the submission has finished, so a
/// loop recorded whole costs host memory per iteration; chunks bound that to a few MiB.
pub(crate) const CHUNK_COMMANDS: usize = 4096;

/// Compute passes recorded into one command buffer before it is submitted. wgpu records every
/// pass into a driver command buffer of its own and keeps those for reuse by later encoders, so
/// a chunk of thousands of passes (a loop that copies between dispatches every iteration) leaves
/// thousands of driver command buffers that every later submission resets: measured on lavapipe,
/// small calls after a 10⁵-iteration loop fell from ~5 700/s to ~1 500/s and memory stayed taken.
const CHUNK_PASSES: usize = 32;

/// Chunks of one run queued at once: before a chunk is submitted, the one before the previous is
/// waited for (and wgpu frees what it tracked), so the device works on one chunk while the host
/// records the next.
const MAX_IN_FLIGHT: usize = 2;

/// Records a program's commands and submits them in chunks of [`CHUNK_COMMANDS`], with at most
/// [`MAX_IN_FLIGHT`] chunks queued: a loop of any length runs in bounded host memory. Bind groups
/// are made once per dispatch (at the first chunk) and reused by every chunk. Made by
/// [`Device::recorder`]; nothing is submitted until a chunk fills or [`Recorder::finish`].
pub(crate) struct Recorder<'r, 'a> {
    dev: &'r Device,
    gpu: &'r Gpu,
    dispatches: &'r [Dispatch<'a>],
    /// Position of each dispatch among the live ones (None: a zero workgroup count, skipped).
    live_of: Vec<Option<usize>>,
    /// One bind group (and its texture operands) per live dispatch.
    groups: Option<BindGroups>,
    /// Commands of the next chunk (only ones that do something).
    pending: Vec<Command<'a>>,
    /// Commands pushed so far (for messages).
    pushed: usize,
    /// Compute passes `pending` records.
    passes: usize,
    in_flight: std::collections::VecDeque<wgpu::SubmissionIndex>,
}

impl<'a> Recorder<'_, 'a> {
    /// Check command `i` (a dispatch index in range, a copy inside its buffers).
    pub(crate) fn check(&self, i: usize, c: &Command<'_>) -> Result<()> {
        match c {
            Command::Dispatch(d) if *d >= self.dispatches.len() => Err(Error::Wgpu {
                device: self.dev.inner.label.clone(),
                message: format!(
                    "command {i} runs dispatch {d} but only {} were given",
                    self.dispatches.len()
                ),
            }),
            Command::Copy(c) => self.dev.check_copy(i, c),
            Command::Dispatch(_) => Ok(()),
        }
    }

    /// Check and queue one command; a full chunk is submitted.
    pub(crate) fn push(&mut self, c: Command<'a>) -> Result<()> {
        self.check(self.pushed, &c)?;
        self.push_checked(c)
    }

    /// Queue a command [`Recorder::check`] accepted.
    pub(crate) fn push_checked(&mut self, c: Command<'a>) -> Result<()> {
        self.pushed += 1;
        let runs = match c {
            Command::Dispatch(d) => self.live_of[d].is_some(),
            Command::Copy(c) => c.size > 0,
        };
        if runs {
            if let Command::Dispatch(d) = c {
                // A dispatch that reads textures starts a pass of its own (after its copies).
                let own_pass = self.dispatches[d]
                    .kernel
                    .bindings()
                    .iter()
                    .any(|b| b.texture.is_some());
                if own_pass || !matches!(self.pending.last(), Some(Command::Dispatch(_))) {
                    if self.passes == CHUNK_PASSES {
                        self.flush()?;
                    }
                    self.passes += 1;
                }
            }
            self.pending.push(c);
            if self.pending.len() >= CHUNK_COMMANDS {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Submit what is queued and return without waiting (reads wait on the queue).
    pub(crate) fn finish(mut self) -> Result<()> {
        self.flush()
    }

    /// Submit what is queued and keep recording (before a read of what it computes).
    pub(crate) fn submit(&mut self) -> Result<()> {
        self.flush()
    }

    fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        // wgpu drops a submit to a device it has invalidated without a word: ask it first.
        if let Some(reason) = self.gpu.lost_now(false) {
            return Err(self.dev.lost_error(reason));
        }
        while self.in_flight.len() >= MAX_IN_FLIGHT {
            if let Some(idx) = self.in_flight.pop_front() {
                self.dev.wait_submission(idx)?;
            }
        }
        let gpu = self.gpu;
        let (dispatches, live_of, pending) = (self.dispatches, &self.live_of, &self.pending);
        let groups = &mut self.groups;
        let (idx, err) = gpu.capture(|| {
            let groups = groups.get_or_insert_with(|| bind_groups(gpu, dispatches, live_of));
            let mut enc = gpu
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("brigade run"),
                });
            record(&mut enc, dispatches, live_of, groups, pending);
            let cmd = enc.finish();
            // Not while another thread's read has one of these buffers mapped (see `transfer.rs`).
            let uses = |k: &super::transfer::GateKey| {
                pending.iter().any(|c| match c {
                    Command::Dispatch(d) => dispatches[*d]
                        .buffers
                        .iter()
                        .any(|b| super::transfer::gate_uses(b, k)),
                    Command::Copy(c) => {
                        super::transfer::gate_uses(c.src, k) || super::transfer::gate_uses(c.dst, k)
                    }
                })
            };
            gpu.unmapped(uses, || gpu.queue.submit([cmd]))
        });
        if let Some(e) = err {
            return Err(self.dev.wgpu_error(e, || {
                let names: Vec<&str> = dispatches
                    .iter()
                    .zip(live_of)
                    .filter(|(_, l)| l.is_some())
                    .map(|(d, _)| d.kernel.label())
                    .collect();
                format!("running {} dispatches ({})", names.len(), names.join(", "))
            }));
        }
        let idx = idx.map_err(|m| m.error(self.dev, "running a kernel"))?;
        let n = pending
            .iter()
            .filter(|c| matches!(c, Command::Dispatch(_)))
            .count() as u64;
        bump(|c| {
            c.dispatches += n;
            c.submits += 1;
        });
        self.pending.clear();
        self.passes = 0;
        self.in_flight.push_back(idx);
        Ok(())
    }
}

/// The bind groups of a run's live dispatches, and the textures each reads (empty for a kernel
/// that binds only buffers).
struct BindGroups {
    groups: Vec<wgpu::BindGroup>,
    textures: Vec<super::texture::Operands>,
}

/// One bind group per live dispatch (each buffer bound from its offset, `size` bytes; a texture
/// binding gets its texture's view).
fn bind_groups(gpu: &Gpu, dispatches: &[Dispatch<'_>], live_of: &[Option<usize>]) -> BindGroups {
    let live = || dispatches.iter().zip(live_of).filter(|(_, l)| l.is_some());
    let textures: Vec<super::texture::Operands> = live()
        .map(|(d, _)| super::texture::operands(gpu, d))
        .collect();
    let groups = live()
        .zip(&textures)
        .map(|((d, _), tex)| {
            let entries: Vec<wgpu::BindGroupEntry<'_>> = d
                .buffers
                .iter()
                .enumerate()
                .map(|(j, b)| wgpu::BindGroupEntry {
                    binding: j as u32,
                    resource: match tex.iter().find(|(t, _, _)| *t as usize == j) {
                        Some((_, _, view)) => wgpu::BindingResource::TextureView(view),
                        None => wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &b.buffer,
                            offset: b.offset,
                            size: wgpu::BufferSize::new(b.size),
                        }),
                    },
                })
                .collect();
            gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &d.kernel.bind_group_layout,
                entries: &entries,
            })
        })
        .collect();
    BindGroups { groups, textures }
}

/// Record a copy of `size` bytes from `(buffer, offset)` `src` to `dst`, one wgpu copy per run
/// of bytes that stays within one part of each (buffers stored in parts, see
/// [`DeviceBuffer::is_parted`]).
pub(crate) fn copy_pieces(
    enc: &mut wgpu::CommandEncoder,
    src: (&DeviceBuffer, u64),
    dst: (&DeviceBuffer, u64),
    size: u64,
) {
    let (s, d) = (src.0.pieces(src.1, size), dst.0.pieces(dst.1, size));
    let (mut i, mut j, mut si, mut dj) = (0, 0, 0u64, 0u64);
    while i < s.len() && j < d.len() {
        let n = (s[i].2 - si).min(d[j].2 - dj);
        enc.copy_buffer_to_buffer(s[i].0, s[i].1 + si, d[j].0, d[j].1 + dj, n);
        si += n;
        dj += n;
        if si == s[i].2 {
            (i, si) = (i + 1, 0);
        }
        if dj == d[j].2 {
            (j, dj) = (j + 1, 0);
        }
    }
}

/// Record `pending` into `enc`: runs of dispatches share one compute pass; copies go between
/// passes. A dispatch that reads textures starts a pass of its own, after the copies of its
/// operands into them.
fn record(
    enc: &mut wgpu::CommandEncoder,
    dispatches: &[Dispatch<'_>],
    live_of: &[Option<usize>],
    groups: &BindGroups,
    pending: &[Command<'_>],
) {
    let mut i = 0;
    while i < pending.len() {
        if let Command::Copy(c) = &pending[i] {
            copy_pieces(enc, (c.src, c.src_offset), (c.dst, c.dst_offset), c.size);
            i += 1;
            continue;
        }
        // The run's first live dispatch gets its texture operands filled before the pass.
        let mut copied = None;
        let mut j = i;
        while let Some(Command::Dispatch(d)) = pending.get(j) {
            if let Some(k) = live_of[*d] {
                super::texture::record_copies(enc, &dispatches[*d], &groups.textures[k]);
                copied = Some(j);
                break;
            }
            j += 1;
        }
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: None,
            timestamp_writes: None,
        });
        let mut bound: Option<usize> = None;
        while let Some(Command::Dispatch(d)) = pending.get(i) {
            if let Some(k) = live_of[*d] {
                if copied != Some(i) && !groups.textures[k].is_empty() {
                    break;
                }
                // A loop body of one dispatch binds once per pass, not per iteration.
                if bound != Some(k) {
                    pass.set_pipeline(&dispatches[*d].kernel.pipeline);
                    pass.set_bind_group(0, &groups.groups[k], &[]);
                    bound = Some(k);
                }
                let [x, y, z] = dispatches[*d].workgroups;
                pass.dispatch_workgroups(x, y, z);
            }
            i += 1;
        }
    }
}

impl Device {
    /// Check `commands` over `dispatches` and record them into the app's `enc`, submitting
    /// nothing (`Jit::encode`). The caller bounds the count (one encoder holds them all).
    pub(crate) fn encode_commands(
        &self,
        enc: &mut wgpu::CommandEncoder,
        dispatches: &[Dispatch<'_>],
        commands: &[Command<'_>],
    ) -> Result<()> {
        let rec = self.recorder(dispatches)?;
        for (i, c) in commands.iter().enumerate() {
            rec.check(i, c)?;
        }
        let gpu = self.live_gpu("encode")?;
        let live: Vec<Command<'_>> = commands
            .iter()
            .copied()
            .filter(|c| match c {
                Command::Dispatch(d) => rec.live_of[*d].is_some(),
                Command::Copy(c) => c.size > 0,
            })
            .collect();
        // Not while another thread's read has one of these buffers mapped: they are marked
        // shared, so no read maps them from now on, and none still does when this returns.
        let uses = |k: &super::transfer::GateKey| {
            dispatches
                .iter()
                .flat_map(|d| d.buffers.iter())
                .any(|b| super::transfer::gate_uses(b, k))
                || live.iter().any(|c| match c {
                    Command::Copy(c) => {
                        super::transfer::gate_uses(c.src, k) || super::transfer::gate_uses(c.dst, k)
                    }
                    Command::Dispatch(_) => false,
                })
        };
        let (res, err) = gpu.capture(|| {
            gpu.unmapped(uses, || {
                let groups = bind_groups(gpu, dispatches, &rec.live_of);
                record(enc, dispatches, &rec.live_of, &groups, &live);
            })
        });
        if let Some(e) = err {
            return Err(self.wgpu_error(e, || {
                format!("recording {} commands into the app's encoder", live.len())
            }));
        }
        res.map_err(|m| m.error(self, "recording into the app's encoder"))?;
        let n = live
            .iter()
            .filter(|c| matches!(c, Command::Dispatch(_)))
            .count() as u64;
        bump(|c| c.dispatches += n);
        Ok(())
    }

    /// After a program was recorded into the app's `enc`: append the copy that proves its
    /// commands ran (see [`super::pool::EncodeMark`]) and keep `hold` (the encode's temporaries)
    /// and the mark alive until the encoder's submission has finished, or until the encoder is
    /// dropped unsubmitted. The temporaries then go back to the pool, so a frame loop of encodes
    /// reuses them instead of allocating each frame, and no brigade work can take one while the
    /// app's commands may still use it. Returns the mark to set on the outputs.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn mark_encode(
        &self,
        enc: &mut wgpu::CommandEncoder,
        hold: Vec<Arc<DeviceBuffer>>,
    ) -> Result<Arc<super::pool::EncodeMark>> {
        // On failure the program is in the encoder already: its temporaries must not be pooled.
        let keep = |hold: &[Arc<DeviceBuffer>]| hold.iter().for_each(|b| b.share());
        let gpu = match self.live_gpu("encode") {
            Ok(g) => g,
            Err(e) => {
                keep(&hold);
                return Err(e);
            }
        };
        let (mark, src, ran) = super::pool::Ledger::take(&gpu.ledger, |label| {
            let _gl = gpu.gl_guard();
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: u64::from(super::pool::LEDGER_CHUNK) * 4,
                usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        let at = u64::from(mark.slot % super::pool::LEDGER_CHUNK) * 4;
        let ((), err) = gpu.capture(|| {
            gpu.queue.write_buffer(&src, at, &mark.token.to_le_bytes());
            enc.copy_buffer_to_buffer(&src, at, &ran, at, 4);
        });
        if let Some(e) = err {
            keep(&hold);
            return Err(self.wgpu_error(e, || "marking the encoded commands".into()));
        }
        let held = mark.clone();
        enc.on_submitted_work_done(move || drop((held, hold)));
        Ok(mark)
    }

    /// Before reading `buf` (or computing from it): when it is an output of an encode whose
    /// commands were not yet seen to run, read its mark's ran word: [`Error::NotComputed`] unless
    /// the commands ran. Costs a 4-byte read, once per encoded output.
    pub(crate) async fn check_encoded(&self, buf: &DeviceBuffer) -> Result<()> {
        let Some(mark) = buf.lock_pending().clone() else {
            return Ok(());
        };
        let gpu = self.gpu("read")?;
        let ran = {
            let l = lock(&gpu.ledger);
            l.chunks[(mark.slot / super::pool::LEDGER_CHUNK) as usize]
                .1
                .clone()
        };
        let at = u64::from(mark.slot % super::pool::LEDGER_CHUNK) * 4;
        let word = self.foreign_view(ran, at, 4);
        let got = self.read_array(&word, crate::DType::U32, 1).await?;
        if got.get_f64(0) as u32 == mark.token {
            let mut p = buf.lock_pending();
            if p.as_ref().is_some_and(|m| Arc::ptr_eq(m, &mark)) {
                *p = None;
            }
            return Ok(());
        }
        Err(Error::NotComputed {
            device: self.inner.label.clone(),
            detail: "this array is an output of `Jit::encode` / `Jit::encode_into` whose commands never ran: \
                     the encoder they were recorded into was not submitted yet, or its submission failed \
                     (an encoder of another wgpu device, or submitted on another device's queue). Record \
                     into an encoder of this device's wgpu device (`device.wgpu()`), submit it on this \
                     device's queue, then read; or use `call`"
                .into(),
        })
    }
}

impl Device {
    /// Block until submission `idx` has finished (native; a no-op in the browser, which cannot
    /// block and frees finished work itself).
    fn wait_submission(&self, idx: wgpu::SubmissionIndex) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            let gpu = self.gpu("run")?;
            let polled = {
                let _gl = gpu.gl_guard();
                gpu.device.poll(wgpu::PollType::Wait {
                    submission_index: Some(idx),
                    timeout: None,
                })
            };
            if let Err(e) = polled {
                return Err(match gpu.state.lost() {
                    Some(reason) => self.lost_error(reason),
                    None => Error::Wgpu {
                        device: self.inner.label.clone(),
                        message: format!("waiting for an earlier part of a long run: {e}"),
                    },
                });
            }
        }
        #[cfg(target_arch = "wasm32")]
        let _ = idx;
        Ok(())
    }
}

/// The line of a wgpu error that says its device is lost or invalid, if one does (wgpu's
/// `DeviceError::Lost` reads "Parent device is lost"; an invalid device, "Device ... is invalid").
fn says_device_lost(e: &wgpu::Error) -> Option<String> {
    let mut texts = vec![e.to_string()];
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        texts.push(s.to_string());
        source = s.source();
    }
    texts
        .iter()
        .flat_map(|t| t.lines())
        .map(str::trim)
        .find(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("device is lost") || (l.starts_with("device") && l.ends_with("is invalid"))
        })
        .map(str::to_string)
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner.info, f)
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Device({})", self.inner.label)
    }
}

impl PartialEq for Device {
    /// Clones of one device are equal; two devices from one adapter are not.
    fn eq(&self, other: &Device) -> bool {
        self.inner.id == other.inner.id
    }
}
impl Eq for Device {}
impl Hash for Device {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.id.hash(state);
    }
}
