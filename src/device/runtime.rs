//! Runtime: adapter discovery, the device layout, and the process-wide default runtime.

use std::fmt;
use std::sync::Arc;

use super::gpu::Device;
use super::layout::{BackendKind, DeviceLayout};
use super::{DeviceLimits, backend_name, device_type_name};
use crate::error::{Error, Result};

/// The environment variable [`Runtime::new`] reads the device layout from (see [`DeviceLayout`]),
/// e.g. `BRIGADE_DEVICES=cpu:4` or `BRIGADE_DEVICES=vulkan:2,gl:1`.
pub const DEVICES_ENV: &str = "BRIGADE_DEVICES";

/// The environment variable that sets a memory budget for every GPU device of a runtime when
/// [`RuntimeBuilder::memory_limit`] is not called: bytes, or a number with a binary suffix
/// (`K`, `M`, `G`, `T`, optionally followed by `iB` or `B`: `512M`, `2GiB`, `1.5G`); exactly
/// the grammar of [`parse_memory_limit`], anything else fails [`RuntimeBuilder::build`]. See
/// [`crate::Device::set_memory_limit`].
pub const MEMORY_LIMIT_ENV: &str = "BRIGADE_MEMORY_LIMIT";

/// The environment variable that lowers every GPU device's storage-binding limit
/// (`max_storage_buffer_binding_size`) when [`RuntimeBuilder::max_binding`] is not called: bytes
/// in the syntax of [`MEMORY_LIMIT_ENV`] (`64K`, `1M`, `65536`). Arrays larger than the limit are
/// stored and computed in segments, so a small value drives those paths with small arrays (tests,
/// CI); it never raises a device's own limit. See [`parse_max_binding`].
pub const MAX_BINDING_ENV: &str = "BRIGADE_MAX_BINDING";

/// The environment variable that lowers every GPU device's buffer limit (`max_buffer_size`) when
/// [`RuntimeBuilder::max_buffer`] is not called, in the syntax of [`MAX_BINDING_ENV`]. Arrays
/// larger than the limit are stored in several wgpu buffers (parts), so a small value drives
/// those paths with small arrays (tests, CI); it never raises a device's own limit, and the
/// binding limit is lowered to it when larger. See [`parse_max_binding`] for the accepted values.
pub const MAX_BUFFER_ENV: &str = "BRIGADE_MAX_BUFFER";

/// Limits forced lower than a device's own ([`RuntimeBuilder::max_binding`],
/// [`RuntimeBuilder::max_buffer`] or their environment variables).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Forced {
    /// `max_storage_buffer_binding_size`.
    pub binding: Option<u64>,
    /// `max_buffer_size`.
    pub buffer: Option<u64>,
}

impl Forced {
    /// `limits` lowered as forced; the binding limit never exceeds the buffer limit.
    pub(crate) fn apply(&self, limits: &mut super::DeviceLimits) {
        if let Some(b) = self.buffer {
            limits.max_buffer_size = limits.max_buffer_size.min(b);
        }
        if let Some(b) = self.binding {
            limits.max_storage_buffer_binding_size = limits.max_storage_buffer_binding_size.min(b);
        }
        limits.max_storage_buffer_binding_size = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size);
    }
}

/// Parse a forced binding limit ([`MAX_BINDING_ENV`], [`RuntimeBuilder::max_binding`]): the
/// syntax of [`parse_memory_limit`], and the value must be a multiple of 4 bytes (a storage
/// binding's granularity) and at least 256 bytes (one segment of an array is at least one
/// storage-offset alignment, at most 256 bytes on every adapter).
///
/// Errors: [`Error::BadDeviceSpec`] naming the value and the nearest sizes that work.
///
/// ```
/// use brigade::device::parse_max_binding;
/// assert_eq!(parse_max_binding("64K").unwrap(), 64 << 10);
/// assert!(parse_max_binding("1001").is_err()); // not a multiple of 4
/// assert!(parse_max_binding("128").is_err()); // below 256 bytes
/// ```
pub fn parse_max_binding(text: &str) -> Result<u64> {
    check_max_binding(text, super::env::parse_bytes("", text)?)
}

/// The checks of [`parse_max_binding`] on a number of bytes.
fn check_max_binding(spec: &str, bytes: u64) -> Result<u64> {
    let bad = |detail: String| Error::BadDeviceSpec {
        spec: spec.to_string(),
        detail,
    };
    if bytes < MIN_MAX_BINDING {
        return Err(bad(format!(
            "a binding limit of {bytes} bytes is below {MIN_MAX_BINDING} bytes (the largest storage-offset \
             alignment, the smallest segment of an array); give at least {MIN_MAX_BINDING}"
        )));
    }
    if !bytes.is_multiple_of(4) {
        return Err(bad(format!(
            "a binding limit of {bytes} bytes is not a multiple of 4 bytes (storage bindings hold 4-byte words); \
             use {}",
            match bytes.checked_next_multiple_of(4) {
                Some(up) => format!("{} or {up}", bytes / 4 * 4),
                // u64::MAX and its neighbours: no multiple of 4 above them fits 64 bits.
                None => (bytes / 4 * 4).to_string(),
            }
        )));
    }
    Ok(bytes)
}

/// The smallest forced binding limit ([`parse_max_binding`]).
const MIN_MAX_BINDING: u64 = 256;

/// Parse a memory budget: bytes (`1048576` or `4096B`), or a number with a binary suffix `K`,
/// `M`, `G` or `T` (×1024 each step), optionally followed by `iB` or `B` (`512M`, `512MiB`, `2G`,
/// `1.5GB`); a decimal fraction only before a suffix (rounded to the nearest byte); case and
/// surrounding spaces ignored. No sign, no exponent (`1e3`), no separators.
///
/// Errors: [`Error::BadDeviceSpec`] for anything else, for 0, and for sizes of 2^64 bytes or more.
///
/// ```
/// use brigade::device::parse_memory_limit;
/// assert_eq!(parse_memory_limit("512M").unwrap(), 512 << 20);
/// assert_eq!(parse_memory_limit("1.5GiB").unwrap(), 3 << 29);
/// assert!(parse_memory_limit("lots").is_err());
/// assert!(parse_memory_limit("1e3").is_err());
/// ```
pub fn parse_memory_limit(text: &str) -> Result<u64> {
    super::env::parse_bytes("", text)
}

/// One wgpu adapter the runtime found (whether or not it got devices).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AdapterSummary {
    /// Position in [`Runtime::adapters`] (preference order: Vulkan > Metal > DX12 > GL > WebGPU,
    /// then discrete > integrated > virtual > other > cpu).
    pub index: usize,
    /// The adapter's name.
    pub name: String,
    /// `vulkan`, `gl`, `metal`, `dx12` or `webgpu`.
    pub backend: String,
    /// `cpu`, `integrated`, `discrete`, `virtual` or `other`.
    pub device_type: String,
    /// Driver name and info, as reported.
    pub driver: String,
    /// The adapter's limits (devices are requested with these); for the adapter of an app's
    /// device ([`RuntimeBuilder::with_wgpu_device`]), that device's limits.
    pub limits: DeviceLimits,
    /// Why the runtime made no device on this adapter although its layout wanted one: under the
    /// default layout an adapter whose device request fails is skipped, not fatal (wgpu's GL
    /// backend on NVIDIA's Linux driver, for one, cannot build compute pipelines). `None` when the
    /// adapter works or the layout never asked for it.
    pub unusable: Option<String>,
}

impl fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "adapter {}: {} [{}, {}]",
            self.index, self.name, self.backend, self.device_type
        )?;
        if !self.driver.is_empty() {
            write!(f, " driver {}", self.driver)?;
        }
        if let Some(why) = &self.unusable {
            write!(f, " (skipped: {why})")?;
        }
        Ok(())
    }
}

struct RuntimeInner {
    devices: Vec<Device>,
    adapters: Vec<AdapterSummary>,
    layout: DeviceLayout,
    // Kept alive for as long as the devices.
    _instance: Option<wgpu::Instance>,
}

/// An ordered set of logical devices. Cheap to clone (an `Arc` inside).
///
/// ```no_run
/// # async fn demo() -> brigade::Result<()> {
/// use brigade::device::Runtime;
/// let rt = Runtime::new().await?;                         // layout from BRIGADE_DEVICES
/// let rt2 = Runtime::builder().layout_str("cpu:2").build().await?;
/// for d in rt.devices() { println!("{d}"); }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

/// Options for [`Runtime`]: backends, layout, subset, cpu fallback, memory budget, cache capacities.
#[derive(Clone, Debug)]
pub struct RuntimeBuilder {
    backends: Option<Vec<String>>,
    devices_per_adapter: usize,
    subset: Option<Vec<usize>>,
    layout: Option<String>,
    from_env: bool,
    allow_cpu_fallback: bool,
    memory_limit: Option<u64>,
    max_binding: Option<u64>,
    max_buffer: Option<u64>,
    /// Cache capacities given to every device (None: the defaults or the environment's).
    kernel_cache_capacity: Option<usize>,
    program_cache_capacity: Option<usize>,
    /// The app's own wgpu devices ([`RuntimeBuilder::with_wgpu_device`]), in order.
    app_devices: Vec<AppDevice>,
}

/// One wgpu device an app handed to [`RuntimeBuilder::with_wgpu_device`].
#[derive(Clone, Debug)]
struct AppDevice {
    info: wgpu::AdapterInfo,
    device: wgpu::Device,
    queue: wgpu::Queue,
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        RuntimeBuilder {
            backends: None,
            devices_per_adapter: 1,
            subset: None,
            layout: None,
            from_env: false,
            allow_cpu_fallback: true,
            memory_limit: None,
            max_binding: None,
            max_buffer: None,
            kernel_cache_capacity: None,
            program_cache_capacity: None,
            app_devices: Vec::new(),
        }
    }
}

impl RuntimeBuilder {
    /// Only look at these backends (`vulkan`, `metal`, `dx12`, `gl`, `webgpu`, `cpu`). Default: all.
    /// Names are checked by [`RuntimeBuilder::build`] ([`Error::BadDeviceSpec`] for unknown ones).
    /// An empty list discovers nothing: the runtime is made only of the app's devices given to
    /// [`RuntimeBuilder::with_wgpu_device`] (without any, [`RuntimeBuilder::build`] refuses it).
    pub fn backends(mut self, names: &[&str]) -> Self {
        self.backends = Some(names.iter().map(|s| s.to_string()).collect());
        self
    }

    /// With the `auto` layout: this many logical devices on every adapter (default 1). An explicit
    /// layout string takes precedence.
    pub fn devices_per_adapter(mut self, n: usize) -> Self {
        // More than MAX_LOGICAL_DEVICES per adapter is never useful; clamp rather than exhaust memory.
        self.devices_per_adapter = n.min(super::layout::MAX_LOGICAL_DEVICES);
        self
    }

    /// Keep only these devices of the layout, in this order (like `CUDA_VISIBLE_DEVICES`); devices
    /// are renumbered `0..indices.len()`. Devices not picked are never created.
    pub fn subset(mut self, indices: &[usize]) -> Self {
        self.subset = Some(indices.to_vec());
        self
    }

    /// The layout, in the grammar of [`DeviceLayout`] (`"2"`, `"vulkan:2,gl:1"`, `"cpu:3"`).
    /// Overrides [`RuntimeBuilder::layout_from_env`].
    pub fn layout_str(mut self, spec: &str) -> Self {
        self.layout = Some(spec.to_string());
        self
    }

    /// Take the layout from [`DEVICES_ENV`] (`BRIGADE_DEVICES`) when it is set and no
    /// [`RuntimeBuilder::layout_str`] was given.
    pub fn layout_from_env(mut self) -> Self {
        self.from_env = true;
        self
    }

    /// When no adapter is found for an `auto` or `N` layout, make cpu devices instead (with one
    /// `log::warn!` line) rather than failing with [`Error::NoDevice`]. Default true.
    pub fn allow_cpu_fallback(mut self, allow: bool) -> Self {
        self.allow_cpu_fallback = allow;
        self
    }

    /// A memory budget of `bytes` for every GPU device (each device its own, like JAX's memory
    /// fraction): the device's buffers, in use or pooled, never exceed it, and an allocation that
    /// would go over fails with [`Error::OutOfMemory`] (see [`crate::Device::set_memory_limit`]).
    /// Overrides [`MEMORY_LIMIT_ENV`]; 0 is refused by [`RuntimeBuilder::build`].
    pub fn memory_limit(mut self, bytes: u64) -> Self {
        self.memory_limit = Some(bytes);
        self
    }

    /// Lower every GPU device's storage-binding limit (`max_storage_buffer_binding_size` in
    /// [`crate::DeviceLimits`]) to `bytes`; a device whose own limit is lower keeps its own.
    /// Arrays larger than the limit are stored in segments that kernels bind one at a time, so a
    /// small limit runs those paths with small arrays (how the tests cover them). Overrides
    /// [`MAX_BINDING_ENV`]; [`RuntimeBuilder::build`] refuses values [`parse_max_binding`]
    /// refuses (below 256 bytes, not a multiple of 4).
    ///
    /// ```no_run
    /// # async fn demo() -> brigade::Result<()> {
    /// let rt = brigade::Runtime::builder().max_binding(64 << 10).build().await?;
    /// assert!(rt.devices()[0].limits().max_storage_buffer_binding_size <= 64 << 10);
    /// # Ok(()) }
    /// ```
    pub fn max_binding(mut self, bytes: u64) -> Self {
        self.max_binding = Some(bytes);
        self
    }

    /// Lower every GPU device's buffer limit (`max_buffer_size` in [`crate::DeviceLimits`]) to
    /// `bytes`; a device whose own limit is lower keeps its own, and the binding limit is lowered
    /// to it when larger. An array larger than the limit is stored in several wgpu buffers
    /// (parts of [`crate::DeviceLimits::part_bytes`] each), which every kernel, copy and transfer
    /// handles, so a small limit runs those paths with small arrays (how the tests cover them).
    /// Overrides [`MAX_BUFFER_ENV`]; the values [`parse_max_binding`] refuses are refused.
    ///
    /// ```no_run
    /// # async fn demo() -> brigade::Result<()> {
    /// let rt = brigade::Runtime::builder().max_buffer(256 << 10).build().await?;
    /// assert!(rt.devices()[0].limits().max_buffer_size <= 256 << 10);
    /// # Ok(()) }
    /// ```
    pub fn max_buffer(mut self, bytes: u64) -> Self {
        self.max_buffer = Some(bytes);
        self
    }

    /// The forced limits in effect: the builder's, else [`MAX_BINDING_ENV`] /
    /// [`MAX_BUFFER_ENV`] when set and not empty.
    fn forced_in_effect(&self) -> Result<Forced> {
        let one = |given: Option<u64>, name: &str, env: &str| -> Result<Option<u64>> {
            match given {
                Some(b) => check_max_binding(&format!("{name}({b})"), b).map(Some),
                None => match super::env::get(env) {
                    Some(v) => super::env::parse_bytes(env, &v)
                        .and_then(|b| check_max_binding(&format!("{env}={v}"), b))
                        .map(Some)
                        .map_err(|e| match e {
                            Error::BadDeviceSpec { spec, detail } if !detail.contains(env) => {
                                Error::BadDeviceSpec {
                                    spec,
                                    detail: format!(
                                        "{detail} (from the environment variable {env})"
                                    ),
                                }
                            }
                            e => e,
                        }),
                    None => Ok(None),
                },
            }
        };
        Ok(Forced {
            binding: one(self.max_binding, "max_binding", MAX_BINDING_ENV)?,
            buffer: one(self.max_buffer, "max_buffer", MAX_BUFFER_ENV)?,
        })
    }

    /// Add a wgpu device the app created itself (see [`Device::from_wgpu`] for what brigade
    /// reads from it, never destroys, and which error handlers it leaves alone).
    ///
    /// The app's devices come after the discovered ones, in the order given: with `n` devices
    /// from the layout (after [`RuntimeBuilder::subset`]), the first app device is
    /// `devices()[n]`; each gets its own entry in [`Runtime::adapters`] (with the device's
    /// limits). With [`RuntimeBuilder::backends`]`(&[])` nothing is discovered and the runtime
    /// holds only the app's devices. The memory limit and cache capacities apply to them too.
    /// [`RuntimeBuilder::build`] fails with [`Error::Unsupported`] when a device's compute limits
    /// are below what brigade's kernels need.
    ///
    /// ```no_run
    /// # async fn demo(info: brigade::wgpu::AdapterInfo, device: brigade::wgpu::Device, queue: brigade::wgpu::Queue) -> brigade::Result<()> {
    /// use brigade::Runtime;
    /// // The app's device beside one discovered lavapipe device, mixed in one mesh.
    /// let rt = Runtime::builder()
    ///     .layout_str("vulkan:1")
    ///     .with_wgpu_device(info, device, queue)
    ///     .build()
    ///     .await?;
    /// assert!(rt.devices()[1].is_app_device());
    /// # Ok(()) }
    /// ```
    pub fn with_wgpu_device(
        mut self,
        adapter_info: wgpu::AdapterInfo,
        device: wgpu::Device,
        queue: wgpu::Queue,
    ) -> Self {
        self.app_devices.push(AppDevice {
            info: adapter_info,
            device,
            queue,
        });
        self
    }

    /// The memory budget in effect: the builder's, else [`MEMORY_LIMIT_ENV`] when set and not empty.
    fn memory_budget(&self) -> Result<Option<u64>> {
        match self.memory_limit {
            Some(0) => Err(Error::BadDeviceSpec {
                spec: "memory_limit(0)".into(),
                detail: "a limit of 0 bytes leaves no memory for any array; give at least 1 byte, or leave it unset for no limit".into(),
            }),
            Some(b) => Ok(Some(b)),
            None => super::env::read(MEMORY_LIMIT_ENV, super::env::parse_bytes),
        }
    }

    /// Compiled kernels each device keeps (least recently used evicted first; at least 1). Default
    /// [`super::DEFAULT_KERNEL_CACHE_CAPACITY`], or [`super::KERNEL_CACHE_ENV`]
    /// (`BRIGADE_KERNEL_CACHE`). See [`Device::kernel_cache_capacity`].
    pub fn kernel_cache_capacity(mut self, n: usize) -> Self {
        self.kernel_cache_capacity = Some(n.max(1));
        self
    }

    /// Programs (argument signatures) that each `jit`, `pmap`/`shard_map` function and eager op
    /// cache keep for these devices (least recently used evicted first; at least 1). Default
    /// [`super::DEFAULT_PROGRAM_CACHE_CAPACITY`], or [`super::PROGRAM_CACHE_ENV`]
    /// (`BRIGADE_PROGRAM_CACHE`). See [`Device::program_cache_capacity`].
    pub fn program_cache_capacity(mut self, n: usize) -> Self {
        self.program_cache_capacity = Some(n.max(1));
        self
    }

    /// The layout string in effect and where it came from.
    fn layout_spec(&self) -> (String, &'static str) {
        if let Some(s) = &self.layout {
            return (s.clone(), "layout_str");
        }
        if self.from_env {
            if let Ok(s) = std::env::var(DEVICES_ENV) {
                return (s, DEVICES_ENV);
            }
        }
        (String::new(), "default")
    }

    /// Discover adapters and request the devices.
    ///
    /// Errors: [`Error::BadDeviceSpec`] (layout, backend names, subset, `devices_per_adapter(0)`,
    /// `memory_limit(0)`, a bad [`RuntimeBuilder::max_binding`] or [`RuntimeBuilder::max_buffer`],
    /// and any `BRIGADE_*` variable whose value is outside its grammar: [`MEMORY_LIMIT_ENV`],
    /// [`MAX_BINDING_ENV`], [`MAX_BUFFER_ENV`], [`super::KERNEL_CACHE_ENV`],
    /// [`super::PROGRAM_CACHE_ENV`], [`super::TUNE_ENV`], [`super::TEXTURE_ENV`],
    /// [`super::REDUCE_SPREAD_ENV`], [`MAPPED_READS_ENV`], and with the `mpi` feature
    /// `BRIGADE_MPI_FAST` and `BRIGADE_MPI_TIMEOUT`: the error names the variable, its value and the
    /// grammar),
    /// [`Error::NoDevice`] (a requested backend has no adapter; the message lists what was found),
    /// [`Error::Wgpu`] (a device request failed).
    pub async fn build(self) -> Result<Runtime> {
        // Every variable once, here: later readers (caches, tuning) cannot return an error.
        super::env::check_all()?;
        let (spec, source) = self.layout_spec();
        let layout = DeviceLayout::parse(&spec).map_err(|e| match e {
            Error::BadDeviceSpec { spec, detail } if source == DEVICES_ENV => {
                Error::BadDeviceSpec {
                    spec,
                    detail: format!("{detail} (from the environment variable {DEVICES_ENV})"),
                }
            }
            e => e,
        })?;
        if self.devices_per_adapter == 0 {
            return Err(Error::BadDeviceSpec {
                spec: "devices_per_adapter(0)".into(),
                detail: "ask for at least 1 device per adapter".into(),
            });
        }
        let discover = !self.backends.as_ref().is_some_and(|b| b.is_empty());
        if !discover {
            if self.app_devices.is_empty() {
                return Err(Error::BadDeviceSpec {
                    spec: "backends([])".into(),
                    detail: "no backend named and no device of the app's given; name backends, or add the app's devices with with_wgpu_device".into(),
                });
            }
            if layout != DeviceLayout::Auto {
                return Err(Error::BadDeviceSpec {
                    spec,
                    detail: "this layout needs adapters but backends([]) discovers none; drop the layout (the runtime then holds only the app's devices) or name backends".into(),
                });
            }
        }
        let (wgpu_backends, cpu_allowed_by_filter) = if discover {
            self.backend_filter()?
        } else {
            (wgpu::Backends::empty(), false)
        };
        let memory_limit = self.memory_budget()?;
        let forced = self.forced_in_effect()?;

        // Enumerate adapters unless the layout needs none.
        let needs_adapters = discover && !layout.cpu_only() && !wgpu_backends.is_empty();
        let (instance, adapters) = if needs_adapters {
            enumerate(wgpu_backends).await
        } else {
            (None, Vec::new())
        };
        let mut summaries: Vec<AdapterSummary> = adapters.iter().map(|(_, s)| s.clone()).collect();

        let plan = if discover {
            self.plan(
                &layout,
                &spec,
                &summaries,
                wgpu_backends,
                cpu_allowed_by_filter,
            )?
        } else {
            Vec::new()
        };
        let plan = match &self.subset {
            None => plan,
            Some(idx) => pick_subset(plan, idx)?,
        };
        // The cpu device's virtual adapter comes after every real one, the app's included.
        let cpu_adapter = summaries.len() + self.app_devices.len();

        #[cfg(target_arch = "wasm32")]
        let mut used_adapters = std::collections::HashSet::new();
        let request = async |index: usize, a: usize| -> Result<Device> {
            let adapter = &adapters[a].0;
            // In the browser one adapter yields one device: request a fresh adapter for
            // every further device.
            #[cfg(target_arch = "wasm32")]
            let fresh;
            #[cfg(target_arch = "wasm32")]
            let adapter = if used_adapters.insert(a) {
                adapter
            } else {
                let inst = instance
                    .as_ref()
                    .ok_or_else(|| Error::NoDevice("no wgpu instance".into()))?;
                fresh = inst
                    .request_adapter(&wgpu::RequestAdapterOptions::default())
                    .await
                    .map_err(|e| {
                        Error::NoDevice(format!(
                            "the browser gave no further adapter for device {index}: {e}"
                        ))
                    })?;
                &fresh
            };
            request_device(adapter, index, a, forced).await
        };
        let skip_failures = layout == DeviceLayout::Auto;
        let (mut devices, failed) = realize(plan, skip_failures, cpu_adapter, request).await?;
        for (a, e) in &failed {
            summaries[*a].unusable = Some(e.to_string());
        }
        if devices.is_empty() && !failed.is_empty() && self.app_devices.is_empty() {
            let why: Vec<String> = failed
                .iter()
                .map(|(a, e)| {
                    format!(
                        "#{a} {} [{}]: {e}",
                        summaries[*a].name, summaries[*a].backend
                    )
                })
                .collect();
            let why = format!("no adapter gave a device ({})", why.join("; "));
            let slots = self.cpu_fallback(self.devices_per_adapter, &why)?;
            devices = (0..slots.len())
                .map(|i| Device::new_cpu(i, cpu_adapter))
                .collect();
        }
        for device in &devices {
            device.set_memory_limit(memory_limit);
            if let Some(n) = self.kernel_cache_capacity {
                device.set_kernel_cache_capacity(n);
            }
            if let Some(n) = self.program_cache_capacity {
                device.set_program_cache_capacity(n);
            }
        }
        for app in &self.app_devices {
            let adapter_index = summaries.len();
            let device = Device::from_app(
                devices.len(),
                adapter_index,
                &app.info,
                app.device.clone(),
                app.queue.clone(),
                forced,
            )?;
            summaries.push(summary_of(adapter_index, &app.info, &app.device.limits()));
            device.set_memory_limit(memory_limit);
            if let Some(n) = self.kernel_cache_capacity {
                device.set_kernel_cache_capacity(n);
            }
            if let Some(n) = self.program_cache_capacity {
                device.set_program_cache_capacity(n);
            }
            devices.push(device);
        }
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                devices,
                adapters: summaries,
                layout,
                _instance: instance,
            }),
        })
    }

    /// The wgpu backends to enumerate and whether cpu devices are allowed by the filter.
    fn backend_filter(&self) -> Result<(wgpu::Backends, bool)> {
        let Some(names) = &self.backends else {
            return Ok((wgpu::Backends::all() - wgpu::Backends::NOOP, true));
        };
        let mut bits = wgpu::Backends::empty();
        let mut cpu = false;
        for n in names {
            match BackendKind::parse(n) {
                Some(BackendKind::Cpu) => cpu = true,
                Some(k) => bits |= k.to_wgpu(),
                None => {
                    return Err(Error::BadDeviceSpec {
                        spec: format!("backends({names:?})"),
                        detail: format!(
                            "unknown backend `{n}`; known: vulkan, metal, dx12, gl, webgpu, cpu"
                        ),
                    });
                }
            }
        }
        if bits.is_empty() && !cpu {
            return Err(Error::BadDeviceSpec {
                spec: format!("backends({names:?})"),
                detail: "no backend named".into(),
            });
        }
        Ok((bits, cpu))
    }

    /// Which adapter (or cpu) each device of the layout goes to.
    fn plan(
        &self,
        layout: &DeviceLayout,
        spec: &str,
        adapters: &[AdapterSummary],
        wgpu_backends: wgpu::Backends,
        cpu_allowed: bool,
    ) -> Result<Vec<Slot>> {
        let found = || describe_found(adapters, wgpu_backends);
        let fallback = |n: usize| -> Result<Vec<Slot>> {
            let only_cpu = wgpu_backends.is_empty() && cpu_allowed;
            if only_cpu {
                return Ok(vec![Slot::Cpu; n]);
            }
            self.cpu_fallback(n, &format!("no GPU adapter found ({})", found()))
        };
        match layout {
            DeviceLayout::Auto => {
                if adapters.is_empty() {
                    return fallback(self.devices_per_adapter);
                }
                Ok((0..adapters.len())
                    .flat_map(|a| std::iter::repeat_n(Slot::Adapter(a), self.devices_per_adapter))
                    .collect())
            }
            DeviceLayout::Count(n) => {
                if adapters.is_empty() {
                    return fallback(*n);
                }
                Ok(vec![Slot::Adapter(0); *n])
            }
            DeviceLayout::PerBackend(items) => {
                let mut plan = Vec::new();
                for &(kind, n) in items {
                    if kind == BackendKind::Cpu {
                        plan.extend(std::iter::repeat_n(Slot::Cpu, n));
                        continue;
                    }
                    if !wgpu_backends.contains(kind.to_wgpu()) {
                        return Err(Error::NoDevice(format!(
                            "layout {spec:?} asks for {kind} but the builder's backends filter excludes it; add \"{kind}\" to backends(...)"
                        )));
                    }
                    match adapters.iter().position(|a| a.backend == kind.name()) {
                        Some(a) => plan.extend(std::iter::repeat_n(Slot::Adapter(a), n)),
                        None => {
                            let usable: Vec<&str> = {
                                let mut v: Vec<&str> =
                                    adapters.iter().map(|a| a.backend.as_str()).collect();
                                v.dedup();
                                v.push("cpu");
                                v
                            };
                            return Err(Error::NoDevice(format!(
                                "layout {spec:?} asks for a {kind} adapter but none was found ({}); use one of: {}",
                                found(),
                                usable.join(", ")
                            )));
                        }
                    }
                }
                Ok(plan)
            }
        }
    }
}

impl RuntimeBuilder {
    /// `n` cpu slots in place of the GPU devices that `why` says are missing, with a warning,
    /// when cpu fallback is allowed; else [`Error::NoDevice`] saying why and what to do.
    fn cpu_fallback(&self, n: usize, why: &str) -> Result<Vec<Slot>> {
        if self.allow_cpu_fallback {
            log::warn!(
                "brigade: {why}; running on {n} cpu device{} (host executor). Install or update a driver (Linux: mesa-vulkan-drivers) for GPU execution",
                if n == 1 { "" } else { "s" }
            );
            return Ok(vec![Slot::Cpu; n]);
        }
        Err(Error::NoDevice(format!(
            "{why} and cpu fallback is off; install or update a driver (Linux: mesa-vulkan-drivers for lavapipe, libegl-mesa0 for GL) or use allow_cpu_fallback(true) / the `cpu` layout"
        )))
    }
}

/// Makes the devices of `plan`, in order: `request(index, adapter)` makes the device of an adapter
/// slot, cpu slots get host devices. With `skip_failures` (the default layout, which named no
/// adapter) an adapter whose device request fails is logged and skipped with all its slots, and
/// returned beside the devices, so one broken backend does not cost the adapters that work; under
/// a layout that named its adapters a failure is the error.
async fn realize(
    plan: Vec<Slot>,
    skip_failures: bool,
    cpu_adapter: usize,
    mut request: impl AsyncFnMut(usize, usize) -> Result<Device>,
) -> Result<(Vec<Device>, Vec<(usize, Error)>)> {
    let mut devices: Vec<Device> = Vec::with_capacity(plan.len());
    let mut failed: Vec<(usize, Error)> = Vec::new();
    for slot in plan {
        let index = devices.len();
        let device = match slot {
            Slot::Cpu => Device::new_cpu(index, cpu_adapter),
            Slot::Adapter(a) if failed.iter().any(|(f, _)| *f == a) => continue,
            Slot::Adapter(a) => match request(index, a).await {
                Ok(d) => d,
                Err(e) if skip_failures => {
                    log::warn!("brigade: adapter #{a} skipped, its device request failed: {e}");
                    failed.push((a, e));
                    continue;
                }
                Err(e) => return Err(e),
            },
        };
        devices.push(device);
    }
    Ok((devices, failed))
}

/// Where one planned device goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Cpu,
    Adapter(usize),
}

fn pick_subset(plan: Vec<Slot>, idx: &[usize]) -> Result<Vec<Slot>> {
    let spec = format!("subset({idx:?})");
    if idx.is_empty() {
        return Err(Error::BadDeviceSpec {
            spec,
            detail: "an empty subset leaves no device; pick at least one index".into(),
        });
    }
    let mut out = Vec::with_capacity(idx.len());
    for (k, &i) in idx.iter().enumerate() {
        if idx[..k].contains(&i) {
            return Err(Error::BadDeviceSpec {
                spec,
                detail: format!("device {i} is listed twice"),
            });
        }
        match plan.get(i) {
            Some(&s) => out.push(s),
            None => {
                return Err(Error::BadDeviceSpec {
                    spec,
                    detail: format!(
                        "device {i} does not exist: the layout gives {} devices (0..{})",
                        plan.len(),
                        plan.len()
                    ),
                });
            }
        }
    }
    Ok(out)
}

fn describe_found(adapters: &[AdapterSummary], searched: wgpu::Backends) -> String {
    let names: Vec<&str> = BackendKind::ALL
        .iter()
        .filter(|k| searched.contains(k.to_wgpu()) && **k != BackendKind::Cpu)
        .map(|k| k.name())
        .collect();
    if adapters.is_empty() {
        return format!("searched {} and found no adapter", names.join(", "));
    }
    let list: Vec<String> = adapters
        .iter()
        .map(|a| format!("#{} {} [{}]", a.index, a.name, a.backend))
        .collect();
    format!("found {}", list.join(", "))
}

fn backend_rank(b: wgpu::Backend) -> usize {
    BackendKind::from_wgpu(b)
        .map(|k| k as usize)
        .unwrap_or(usize::MAX)
}

fn type_rank(t: wgpu::DeviceType) -> usize {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// All adapters of `backends`, sorted by preference, with their summaries.
async fn enumerate(
    backends: wgpu::Backends,
) -> (Option<wgpu::Instance>, Vec<(wgpu::Adapter, AdapterSummary)>) {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    let instance = wgpu::Instance::new(desc);
    let mut adapters: Vec<(wgpu::Adapter, wgpu::AdapterInfo)> = instance
        .enumerate_adapters(backends)
        .await
        .into_iter()
        .map(|a| {
            let info = a.get_info();
            (a, info)
        })
        .filter(|(_, i)| i.backend != wgpu::Backend::Noop)
        .collect();
    adapters.sort_by_key(|(_, i)| (backend_rank(i.backend), type_rank(i.device_type)));
    let out = adapters
        .into_iter()
        .enumerate()
        .map(|(index, (a, info))| {
            let summary = summary_of(index, &info, &a.limits());
            (a, summary)
        })
        .collect();
    (Some(instance), out)
}

/// The summary of adapter `index` (for an app's device, `limits` are the device's).
fn summary_of(index: usize, info: &wgpu::AdapterInfo, limits: &wgpu::Limits) -> AdapterSummary {
    let driver = match (info.driver.is_empty(), info.driver_info.is_empty()) {
        (false, false) => format!("{} ({})", info.driver, info.driver_info),
        (false, true) => info.driver.clone(),
        (true, _) => info.driver_info.clone(),
    };
    AdapterSummary {
        index,
        name: info.name.clone(),
        backend: backend_name(info.backend).to_string(),
        device_type: device_type_name(info.device_type).to_string(),
        driver,
        limits: DeviceLimits::from_wgpu(limits),
        unusable: None,
    }
}

/// The environment variable that turns off mapped reads (`off`, `0` or `false`; `on`, `1` or
/// `true` keep them; anything else fails [`RuntimeBuilder::build`]): every read then copies
/// through a staging buffer, as on adapters without unified memory. For measuring and debugging.
pub const MAPPED_READS_ENV: &str = "BRIGADE_MAPPED_READS";

/// The optional wgpu features brigade uses when the adapter has them:
/// - `MAPPABLE_PRIMARY_BUFFERS` on unified-memory adapters (device type cpu or integrated:
///   lavapipe, Apple, integrated GPUs), so an array is read by mapping its own storage buffer
///   (one copy, no staging buffer; see `transfer.rs`). Not on discrete GPUs, where wgpu warns that
///   mappable storage buffers are slow to compute on, and not when [`MAPPED_READS_ENV`] is `off`.
/// - `PIPELINE_CACHE` (Vulkan), so compiled pipelines persist on disk between processes
///   (see `kernel.rs`).
/// - `SUBGROUP` where the adapter has it natively: the matmul search offers a kernel that shares
///   operands by broadcast (`tune.rs`).
fn wanted_features(adapter: &wgpu::Adapter, info: &wgpu::AdapterInfo) -> wgpu::Features {
    let have = adapter.features();
    let mut want = wgpu::Features::empty();
    if mapped_reads_suit(info) {
        want |= wgpu::Features::MAPPABLE_PRIMARY_BUFFERS;
    }
    want |= wgpu::Features::PIPELINE_CACHE | wgpu::Features::SUBGROUP;
    want & have
}

/// Whether reads may map storage buffers in place on this adapter (when its device has
/// `MAPPABLE_PRIMARY_BUFFERS`): unified memory (device type cpu or integrated) and
/// [`MAPPED_READS_ENV`] not `off`. Also decides it for an app's device that has the feature for
/// its own reasons, so a discrete GPU never gets slow mappable storage buffers from brigade.
pub(crate) fn mapped_reads_suit(info: &wgpu::AdapterInfo) -> bool {
    let unified = matches!(
        info.device_type,
        wgpu::DeviceType::Cpu | wgpu::DeviceType::IntegratedGpu
    );
    let mapped_off =
        super::env::read_or_warn(MAPPED_READS_ENV, super::env::parse_switch) == Some(false);
    unified && !mapped_off
}

/// Request one logical device with the adapter's own limits and the optional features of
/// [`wanted_features`] that the adapter has.
async fn request_device(
    adapter: &wgpu::Adapter,
    index: usize,
    adapter_index: usize,
    forced: Forced,
) -> Result<Device> {
    let info = adapter.get_info();
    let label = format!("brigade device {index}");
    let desc = wgpu::DeviceDescriptor {
        label: Some(&label),
        required_features: wanted_features(adapter, &info),
        required_limits: adapter.limits(),
        ..Default::default()
    };
    let (device, queue) = adapter
        .request_device(&desc)
        .await
        .map_err(|e| Error::Wgpu {
            device: format!("{index} [{}: {}]", backend_name(info.backend), info.name),
            message: format!("request_device failed: {e}"),
        })?;
    Ok(Device::new_gpu(
        index,
        adapter_index,
        &info,
        device,
        queue,
        forced,
    ))
}

impl Runtime {
    /// The default runtime: layout from [`DEVICES_ENV`] (`BRIGADE_DEVICES`) if set, else one
    /// device per adapter on every backend; cpu fallback allowed.
    pub async fn new() -> Result<Runtime> {
        Runtime::builder().layout_from_env().build().await
    }

    /// Options for a runtime. A builder ignores `BRIGADE_DEVICES` unless
    /// [`RuntimeBuilder::layout_from_env`] is called; it reads [`MEMORY_LIMIT_ENV`]
    /// (`BRIGADE_MEMORY_LIMIT`) unless [`RuntimeBuilder::memory_limit`] is given.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// The logical devices, in order (`devices()[i].index() == i`).
    pub fn devices(&self) -> &[Device] {
        &self.inner.devices
    }

    /// Every adapter found (empty when the layout needed none, e.g. `cpu:2`), then one per app
    /// device ([`RuntimeBuilder::with_wgpu_device`]).
    pub fn adapters(&self) -> &[AdapterSummary] {
        &self.inner.adapters
    }

    /// The layout the runtime was built from.
    pub fn layout(&self) -> &DeviceLayout {
        &self.inner.layout
    }

    /// The process-wide default runtime.
    ///
    /// Native: created on first use with [`Runtime::new`] (blocking, via pollster) unless
    /// [`Runtime::set_global`] or [`init`] ran first; later calls return the same runtime (or the
    /// same error). Browser: the one set by [`init`] / [`Runtime::set_global`], else an error
    /// saying to call `brigade::init().await` first (the browser cannot block to create one).
    pub fn global() -> Result<Runtime> {
        global::get()
    }

    /// Make `rt` the process-wide default. The first runtime set (or created by
    /// [`Runtime::global`]) stays: if one exists already, `rt` is handed back as the error.
    pub fn set_global(rt: Runtime) -> std::result::Result<(), Runtime> {
        global::set(rt)
    }
}

/// Create the default runtime ([`Runtime::new`]) and make it the global one, or return the global
/// runtime if one exists. The browser must call this (and await it) before [`Runtime::global`].
pub async fn init() -> Result<Runtime> {
    if let Some(rt) = global::existing() {
        return rt;
    }
    let rt = Runtime::new().await?;
    match global::set(rt.clone()) {
        Ok(()) => Ok(rt),
        // Someone else won the race: use theirs.
        Err(_) => global::existing().unwrap_or(Ok(rt)),
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod global {
    use super::Runtime;
    use crate::error::Result;
    use std::sync::OnceLock;

    static GLOBAL: OnceLock<Result<Runtime>> = OnceLock::new();

    pub(super) fn existing() -> Option<Result<Runtime>> {
        GLOBAL.get().cloned()
    }
    pub(super) fn get() -> Result<Runtime> {
        GLOBAL
            .get_or_init(|| pollster::block_on(Runtime::new()))
            .clone()
    }
    pub(super) fn set(rt: Runtime) -> std::result::Result<(), Runtime> {
        GLOBAL.set(Ok(rt)).map_err(|v| match v {
            Ok(rt) => rt,
            Err(_) => unreachable!("only Ok values are set"),
        })
    }
}

#[cfg(target_arch = "wasm32")]
mod global {
    use super::Runtime;
    use crate::error::{Error, Result};
    use std::cell::RefCell;

    thread_local! {
        static GLOBAL: RefCell<Option<Runtime>> = const { RefCell::new(None) };
    }

    pub(super) fn existing() -> Option<Result<Runtime>> {
        GLOBAL.with(|g| g.borrow().clone()).map(Ok)
    }
    pub(super) fn get() -> Result<Runtime> {
        GLOBAL.with(|g| g.borrow().clone()).ok_or_else(|| {
            Error::NoDevice("no global runtime yet: in the browser call `brigade::init().await` first (it cannot block to create one)".into())
        })
    }
    pub(super) fn set(rt: Runtime) -> std::result::Result<(), Runtime> {
        GLOBAL.with(|g| {
            let mut g = g.borrow_mut();
            if g.is_some() {
                return Err(rt);
            }
            *g = Some(rt);
            Ok(())
        })
    }
}

impl fmt::Display for Runtime {
    /// One line per device.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.inner.devices.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("layout", &self.inner.layout.to_string())
            .field("devices", &self.inner.devices)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapter(index: usize, backend: &str) -> AdapterSummary {
        AdapterSummary {
            index,
            name: format!("fake{index}"),
            backend: backend.into(),
            device_type: "cpu".into(),
            driver: String::new(),
            limits: DeviceLimits::host(),
            unusable: None,
        }
    }

    fn plan(layout: &str, adapters: &[AdapterSummary]) -> Result<Vec<Slot>> {
        let b = Runtime::builder().allow_cpu_fallback(false);
        let l = DeviceLayout::parse(layout)?;
        b.plan(&l, layout, adapters, wgpu::Backends::all(), true)
    }

    /// The default layout skips an adapter whose device request fails (every slot of it) and
    /// numbers the devices that remain densely; a layout that named its adapters fails instead.
    #[test]
    fn failed_adapters_are_skipped_only_under_the_default_layout() {
        let plan = vec![
            Slot::Adapter(0),
            Slot::Adapter(1),
            Slot::Adapter(1),
            Slot::Adapter(2),
            Slot::Cpu,
        ];
        let mut asked = Vec::new();
        let request = async |index: usize, a: usize| -> Result<Device> {
            asked.push(a);
            if a == 1 {
                return Err(Error::Wgpu {
                    device: format!("{index} [gl: fake1]"),
                    message: "request_device failed: Parent device is lost".into(),
                });
            }
            // A host device stands in for the adapter's; its adapter index tells them apart.
            Ok(Device::new_cpu(index, a))
        };
        let (devices, failed) =
            pollster::block_on(realize(plan.clone(), true, 9, request)).unwrap();
        // Adapter 1 is asked once: its second slot is skipped without a second request.
        assert_eq!(asked, [0, 1, 2]);
        let got: Vec<(usize, usize)> = devices
            .iter()
            .map(|d| (d.index(), d.info().adapter_index))
            .collect();
        assert_eq!(got, [(0, 0), (1, 2), (2, 9)]);
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].0, 1);
        assert!(failed[0].1.to_string().contains("Parent device is lost"));

        let request = async |index: usize, a: usize| -> Result<Device> {
            if a == 1 {
                return Err(Error::NoDevice("fake failure".into()));
            }
            Ok(Device::new_cpu(index, a))
        };
        let err = pollster::block_on(realize(plan, false, 9, request)).unwrap_err();
        assert!(err.to_string().contains("fake failure"), "{err}");
    }

    /// When no adapter gives a device, the fallback says why: cpu devices if allowed, else an
    /// error that carries the reason.
    #[test]
    fn cpu_fallback_names_the_reason() {
        let why = "no adapter gave a device (#1 fake [gl]: lost)";
        let slots = Runtime::builder().cpu_fallback(2, why).unwrap();
        assert_eq!(slots, [Slot::Cpu, Slot::Cpu]);
        let err = Runtime::builder()
            .allow_cpu_fallback(false)
            .cpu_fallback(2, why)
            .unwrap_err();
        assert!(matches!(err, Error::NoDevice(_)), "{err:?}");
        assert!(err.to_string().contains(why), "{err}");
    }

    #[test]
    fn plans() {
        let a = [adapter(0, "vulkan"), adapter(1, "gl")];
        assert_eq!(
            plan("", &a).unwrap(),
            vec![Slot::Adapter(0), Slot::Adapter(1)]
        );
        assert_eq!(plan("3", &a).unwrap(), vec![Slot::Adapter(0); 3]);
        assert_eq!(
            plan("gl:1,vulkan:2,cpu", &a).unwrap(),
            vec![
                Slot::Adapter(1),
                Slot::Adapter(0),
                Slot::Adapter(0),
                Slot::Cpu
            ]
        );
        match plan("metal:1", &a) {
            Err(Error::NoDevice(m)) => assert!(
                m.contains("metal") && m.contains("fake0") && m.contains("vulkan, gl, cpu"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(plan("2", &[]), Err(Error::NoDevice(_))));
        assert_eq!(
            pick_subset(vec![Slot::Adapter(0), Slot::Cpu], &[1, 0]).unwrap(),
            vec![Slot::Cpu, Slot::Adapter(0)]
        );
        assert!(matches!(
            pick_subset(vec![Slot::Cpu], &[1]),
            Err(Error::BadDeviceSpec { .. })
        ));
        assert!(matches!(
            pick_subset(vec![Slot::Cpu, Slot::Cpu], &[0, 0]),
            Err(Error::BadDeviceSpec { .. })
        ));
    }

    #[test]
    fn fallback_to_cpu() {
        let b = Runtime::builder();
        let l = DeviceLayout::parse("2").unwrap();
        assert_eq!(
            b.plan(&l, "2", &[], wgpu::Backends::all(), true).unwrap(),
            vec![Slot::Cpu; 2]
        );
    }
}
