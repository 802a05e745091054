//! Kernels: naga validation, reflection of bindings, compiled compute pipelines cached per device.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use super::gpu::{Device, lock};
use crate::counters::bump;
use crate::error::{Error, Result};

/// One binding a kernel declares at `@group(0) @binding(n)`: a storage buffer, or a
/// `texture_2d<f32>` that the dispatch fills from the buffer given for it (see [`Kernel`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelBinding {
    /// The binding number (bindings are always `0..n`).
    pub binding: u32,
    /// The variable's name in the WGSL.
    pub name: Option<String>,
    /// `var<storage, read>` or a texture (true), or `var<storage, read_write>` (false).
    pub read_only: bool,
    /// For a texture binding, its `[width, height]` in rgba32float texels (from the WGSL's
    /// `<NAME>_TEXTURE_WIDTH` / `<NAME>_TEXTURE_HEIGHT` constants); `None` for a storage buffer.
    pub texture: Option<[u32; 2]>,
}

/// A compiled compute kernel: WGSL with an `@compute fn main`, storage buffers at
/// `@group(0) @binding(0..n)`. Made by [`Device::kernel`], valid on that device only.
///
/// A binding may also be a `texture_2d<f32>` read with `textureLoad` (no sampler), declared with
/// two `u32` constants `<NAME>_TEXTURE_WIDTH` and `<NAME>_TEXTURE_HEIGHT` (texels). A dispatch
/// still binds a buffer to it: before the dispatch runs, the first `16 * width * height` bytes of
/// that buffer are copied into an rgba32float texture of that size (4 consecutive f32 a texel,
/// rows of `width` texels; `16 * width` must be a multiple of 256), which the kernel reads. The
/// device keeps such textures for the next dispatch of the same size
/// (`crate::device::texture`). brigade's texture matmul works this way.
pub struct Kernel {
    label: String,
    wgsl: String,
    bindings: Vec<KernelBinding>,
    workgroup_size: [u32; 3],
    pub(crate) device_id: u64,
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) bind_group_layout: wgpu::BindGroupLayout,
}

impl Kernel {
    /// The label given at compile time (used in error messages).
    pub fn label(&self) -> &str {
        &self.label
    }
    /// The WGSL source.
    pub fn wgsl(&self) -> &str {
        &self.wgsl
    }
    /// The storage buffers the kernel declares, in binding order.
    pub fn bindings(&self) -> &[KernelBinding] {
        &self.bindings
    }
    /// `@workgroup_size` of `main`.
    pub fn workgroup_size(&self) -> [u32; 3] {
        self.workgroup_size
    }
    /// The wgpu pipeline, for code that records its own commands.
    pub fn raw_pipeline(&self) -> &wgpu::ComputePipeline {
        &self.pipeline
    }
    /// The layout of bind group 0.
    pub fn raw_bind_group_layout(&self) -> &wgpu::BindGroupLayout {
        &self.bind_group_layout
    }
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("label", &self.label)
            .field("bindings", &self.bindings.len())
            .field("workgroup_size", &self.workgroup_size)
            .finish()
    }
}

/// A line that, anywhere in a kernel's WGSL, turns off wgpu's zero-initialization of its
/// `var<workgroup>` memory. Only for kernels whose invocations never read workgroup memory that
/// no invocation of the workgroup wrote before a barrier (a reduction tree that stores every
/// lane's partial first). WGSL says workgroup memory starts zeroed, so every other kernel,
/// including every user kernel without this line, keeps that.
///
/// Why: on GL, naga emulates the zeroing with one invocation assigning a constructor of every
/// element (`partial = float[256](0.0, 0.0, ...)`), which llvmpipe compiles for seconds: a
/// 256-lane tree reduction took 5.1 s to its first dispatch with it, 1.2 s without (Vulkan drivers
/// zero natively and see no difference).
pub const SKIP_WORKGROUP_ZERO_INIT: &str =
    "// brigade: workgroup memory is written before it is read";

/// Environment variable naming a directory to which every WGSL module compiled through
/// [`Device::kernel`] is written, as `<label>-<hash>.wgsl` (`hash`: 16 hex digits of a 64-bit
/// FNV-1a hash of the text, stable across Rust versions and platforms). Each distinct label and
/// text is written once per process, whether it was compiled or found in a kernel cache, so the
/// directory holds every kernel the process used. Unset or empty: nothing is written.
///
/// For comparing the generated WGSL before and after a change to the code generator
/// (`scripts/wgsl_dump.sh` runs the tour with it; `diff -r` of two such directories is the proof).
/// Read once, at the first kernel of the process. A file that cannot be written is a logged
/// warning, never an error of the program. Native only: in the browser it is ignored.
pub const DUMP_WGSL_ENV: &str = "BRIGADE_DUMP_WGSL";

/// The 64-bit FNV-1a hash of `text`: the dump's file names. Written here rather than taken from
/// std because `DefaultHasher`'s output may change between Rust releases, and a dump must name
/// the same text the same way on every toolchain. FNV-1a maps two texts of equal length that
/// differ in one byte to different hashes (each step is a bijection of the state).
#[cfg(not(target_arch = "wasm32"))]
fn fnv1a64(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in text.as_bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The dump directory ([`DUMP_WGSL_ENV`]) and the file names already written to it.
#[cfg(not(target_arch = "wasm32"))]
struct WgslDump {
    dir: std::path::PathBuf,
    written: std::sync::Mutex<std::collections::HashSet<String>>,
}

#[cfg(not(target_arch = "wasm32"))]
impl WgslDump {
    /// The process's dump, when [`DUMP_WGSL_ENV`] names a directory.
    fn get() -> Option<&'static WgslDump> {
        static DUMP: std::sync::LazyLock<Option<WgslDump>> = std::sync::LazyLock::new(|| {
            let dir = std::env::var_os(DUMP_WGSL_ENV).filter(|v| !v.is_empty())?;
            Some(WgslDump::new(dir.into()))
        });
        DUMP.as_ref()
    }

    fn new(dir: std::path::PathBuf) -> WgslDump {
        WgslDump {
            dir,
            written: std::sync::Mutex::new(Default::default()),
        }
    }

    /// The file name of a kernel: its label made safe for every file system (ASCII, at most 120
    /// characters: names are limited to 255 bytes), and the text's hash.
    fn file_name(label: &str, wgsl: &str) -> String {
        let mut safe = super::disk_cache::file_name(label);
        safe.truncate(120);
        format!("{safe}-{:016x}.wgsl", fnv1a64(wgsl))
    }

    /// Write `wgsl` unless this label and text were written already. Best effort: a failure is a
    /// warning (and is not retried, so a read-only directory warns once per kernel, not per call).
    fn write(&self, label: &str, wgsl: &str) {
        let name = Self::file_name(label, wgsl);
        if !lock(&self.written).insert(name.clone()) {
            return;
        }
        let result = (|| -> std::io::Result<()> {
            std::fs::create_dir_all(&self.dir)?;
            // Through a temporary file renamed into place: processes sharing a directory (test
            // binaries run at once) never see half a file.
            let tmp = self.dir.join(format!(".{name}.{}.tmp", std::process::id()));
            std::fs::write(&tmp, wgsl)?;
            std::fs::rename(&tmp, self.dir.join(&name))
        })();
        if let Err(e) = result {
            log::warn!(
                "brigade: cannot write WGSL of kernel `{label}` to {} ({DUMP_WGSL_ENV}): {e}",
                self.dir.join(&name).display()
            );
        }
    }
}

/// A device's `wgpu::PipelineCache`, loaded from and saved to the disk cache
/// ([`super::disk_cache`]) so that a second process on the same machine compiles warm.
///
/// Only where the backend has `PIPELINE_CACHE` (Vulkan) and a cache directory exists. The file
/// is wgpu's data (which wgpu checks itself: adapter, driver, version) inside brigade's envelope
/// (magic, length, checksum): a file that fails either check is ignored and the cache starts empty
/// (`fallback: true`), so a corrupt file costs a cold compile and nothing else.
///
/// Saved after a compile unless the last save was recent (at most ~10 % of the time goes to
/// saving: the wait after a save is ten times what the save took, at least 20 ms), and when the
/// device is dropped; [`Device::save_pipeline_cache`] saves now.
pub(crate) struct PipelineDisk {
    pub(crate) cache: wgpu::PipelineCache,
    file: String,
    /// Bytes of intact cache data read from the file when the device was made (0: none).
    loaded: u64,
    saves: std::sync::Mutex<SaveState>,
}

#[derive(Default)]
struct SaveState {
    /// Compiles since the last save.
    dirty: bool,
    /// When the last save finished, and how long it took.
    last: Option<(std::time::Instant, std::time::Duration)>,
}

/// The envelope's magic (brigade pipeline cache, format 1).
const PIPELINE_MAGIC: &[u8; 8] = b"BRGDPC01";

/// A 64-bit checksum of `bytes` (FNV-1a over 8-byte words, then the tail): catches truncated and
/// damaged files, not tampering.
fn checksum(bytes: &[u8]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let v = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        h = (h ^ v).wrapping_mul(PRIME);
        h ^= h >> 29;
    }
    for &b in words.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(PRIME);
    }
    h
}

/// wgpu's cache data inside the envelope: magic, payload length, checksum, payload.
fn wrap_pipeline_data(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + data.len());
    out.extend_from_slice(PIPELINE_MAGIC);
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&checksum(data).to_le_bytes());
    out.extend_from_slice(data);
    out
}

/// The payload of an envelope, or `None` when anything about it is off.
fn unwrap_pipeline_data(file: &[u8]) -> Option<&[u8]> {
    let (head, data) = file.split_at_checked(24)?;
    let len = u64::from_le_bytes(head[8..16].try_into().ok()?);
    let sum = u64::from_le_bytes(head[16..24].try_into().ok()?);
    (&head[..8] == PIPELINE_MAGIC && len == data.len() as u64 && sum == checksum(data))
        .then_some(data)
}

impl PipelineDisk {
    /// The cache for a new device: from its file when that is intact, else empty. `None` without
    /// `PIPELINE_CACHE` or without a cache directory (then nothing is read or written).
    pub(crate) fn open(device: &wgpu::Device, info: &wgpu::AdapterInfo) -> Option<PipelineDisk> {
        if !device.features().contains(wgpu::Features::PIPELINE_CACHE) {
            return None;
        }
        super::disk_cache::cache_dir()?;
        let key = wgpu::util::pipeline_cache_key(info)?;
        // The driver is part of the name, so two drivers of one device do not evict each other's
        // file (wgpu would also refuse the other's data).
        let driver =
            checksum(format!("{}|{}|{}", info.name, info.driver, info.driver_info).as_bytes());
        let file = format!("pipelines-{key}-{driver:016x}.bin");
        let raw = super::disk_cache::read(&file);
        let data = raw.as_deref().and_then(|f| {
            let d = unwrap_pipeline_data(f);
            if d.is_none() {
                log::debug!("brigade cache: ignoring damaged pipeline cache file {file}");
            }
            d
        });
        // SAFETY: `data` is what `PipelineCache::get_data` returned on an adapter with the same
        // `pipeline_cache_key` (the file name), byte for byte (the checksum); wgpu checks its own
        // header against this adapter and driver and, with `fallback`, starts empty otherwise.
        let cache = unsafe {
            device.create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
                label: Some("brigade pipeline cache"),
                data,
                fallback: true,
            })
        };
        Some(PipelineDisk {
            cache,
            file,
            loaded: data.map_or(0, |d| d.len() as u64),
            saves: std::sync::Mutex::new(SaveState::default()),
        })
    }

    /// After a compile: save unless the last save was too recent (then at the next chance).
    pub(crate) fn compiled(&self) {
        let due = {
            let mut s = lock(&self.saves);
            s.dirty = true;
            s.last.is_none_or(|(at, took)| {
                at.elapsed() >= (took * 10).max(std::time::Duration::from_millis(20))
            })
        };
        if due {
            self.save();
        }
    }

    /// Write the cache's data to its file now (if there is any). Returns whether it was written.
    pub(crate) fn save(&self) -> bool {
        let start = std::time::Instant::now();
        let Some(data) = self.cache.get_data() else {
            return false;
        };
        let written = super::disk_cache::write(&self.file, &wrap_pipeline_data(&data));
        let mut s = lock(&self.saves);
        s.dirty = false;
        s.last = Some((std::time::Instant::now(), start.elapsed()));
        written
    }
}

impl Drop for PipelineDisk {
    fn drop(&mut self) {
        if lock(&self.saves).dirty {
            self.save();
        }
    }
}

/// What naga tells us about a shader.
pub(crate) struct Reflection {
    pub(crate) bindings: Vec<KernelBinding>,
    pub(crate) workgroup_size: [u32; 3],
}

fn compile_error(label: &str, wgsl: &str, message: String) -> Error {
    Error::Compile {
        kernel: label.to_string(),
        message,
        wgsl: wgsl.to_string(),
    }
}

/// Parse and validate WGSL with naga (all capabilities) and read its bindings.
pub(crate) fn reflect(label: &str, wgsl: &str) -> Result<Reflection> {
    let module = naga::front::wgsl::parse_str(wgsl)
        .map_err(|e| compile_error(label, wgsl, e.emit_to_string(wgsl)))?;
    let mut validator = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    );
    validator
        .validate(&module)
        .map_err(|e| compile_error(label, wgsl, e.emit_to_string(wgsl)))?;

    let Some(entry) = module
        .entry_points
        .iter()
        .find(|e| e.name == "main" && e.stage == naga::ShaderStage::Compute)
    else {
        return Err(compile_error(
            label,
            wgsl,
            "no `@compute fn main` entry point: brigade runs the compute entry point named `main`"
                .into(),
        ));
    };
    let mut bindings = Vec::new();
    for (_, var) in module.global_variables.iter() {
        let Some(rb) = &var.binding else { continue };
        let name = var.name.clone();
        let shown = name.clone().unwrap_or_else(|| "?".into());
        if rb.group != 0 {
            return Err(compile_error(
                label,
                wgsl,
                format!(
                    "`{shown}` is at @group({}): brigade binds buffers at @group(0) only",
                    rb.group
                ),
            ));
        }
        let (read_only, texture) = match var.space {
            naga::AddressSpace::Storage { access } => {
                (!access.contains(naga::StorageAccess::STORE), None)
            }
            naga::AddressSpace::Handle => (true, Some(texture_size(&module, var, label, wgsl)?)),
            other => {
                return Err(compile_error(
                    label,
                    wgsl,
                    format!(
                        "`{shown}` at @binding({}) is in address space {other:?}: brigade binds storage buffers only (use var<storage, read>), besides `texture_2d<f32>` filled from buffers",
                        rb.binding
                    ),
                ));
            }
        };
        bindings.push(KernelBinding {
            binding: rb.binding,
            name,
            read_only,
            texture,
        });
    }
    bindings.sort_by_key(|b| b.binding);
    for (i, b) in bindings.iter().enumerate() {
        if b.binding != i as u32 {
            let have: Vec<u32> = bindings.iter().map(|b| b.binding).collect();
            return Err(compile_error(
                label,
                wgsl,
                format!(
                    "bindings must be numbered 0..{} without gaps or repeats, found {have:?}",
                    bindings.len()
                ),
            ));
        }
    }
    Ok(Reflection {
        bindings,
        workgroup_size: entry.workgroup_size,
    })
}

/// The `[width, height]` of texture binding `var`: it must be a `texture_2d<f32>` (single-sampled,
/// not arrayed) with `const <NAME>_TEXTURE_WIDTH: u32` and `..._HEIGHT` literals, both at least 1.
fn texture_size(
    module: &naga::Module,
    var: &naga::GlobalVariable,
    label: &str,
    wgsl: &str,
) -> Result<[u32; 2]> {
    let name = var.name.clone().unwrap_or_default();
    let plain_2d = matches!(
        module.types[var.ty].inner,
        naga::TypeInner::Image {
            dim: naga::ImageDimension::D2,
            arrayed: false,
            class: naga::ImageClass::Sampled {
                kind: naga::ScalarKind::Float,
                multi: false,
            },
        }
    );
    if !plain_2d || name.is_empty() {
        return Err(compile_error(
            label,
            wgsl,
            format!(
                "`{name}` is a handle brigade cannot bind: besides storage buffers, a kernel may declare \
                 named `texture_2d<f32>` bindings only (filled from buffers, read with textureLoad)"
            ),
        ));
    }
    let constant = |suffix: &str| -> Result<u32> {
        let want = format!("{name}_TEXTURE_{suffix}");
        module
            .constants
            .iter()
            .find(|(_, c)| c.name.as_deref() == Some(want.as_str()))
            .and_then(|(_, c)| match module.global_expressions[c.init] {
                naga::Expression::Literal(naga::Literal::U32(v)) if v > 0 => Some(v),
                _ => None,
            })
            .ok_or_else(|| {
                compile_error(
                    label,
                    wgsl,
                    format!(
                        "texture `{name}` needs `const {want}: u32 = <texels>u;` (a positive literal): \
                         the dispatch copies that many texels from the buffer bound to it"
                    ),
                )
            })
    };
    let size = [constant("WIDTH")?, constant("HEIGHT")?];
    if !(16 * u64::from(size[0])).is_multiple_of(u64::from(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT)) {
        return Err(compile_error(
            label,
            wgsl,
            format!(
                "texture `{name}` is {} texels wide: a row of the copy from its buffer must be a multiple of {} bytes \
                 (16 texels), so make the width a multiple of 16",
                size[0],
                wgpu::COPY_BYTES_PER_ROW_ALIGNMENT
            ),
        ));
    }
    Ok(size)
}

/// Check a kernel's WGSL without a device, as [`Device::kernel`] does before compiling: it must parse
/// and validate with naga (all capabilities), have an `@compute fn main`, and declare only storage
/// buffers (or `texture_2d<f32>` fed from buffers, see [`Kernel`]) at `@group(0) @binding(0..n)`.
///
/// Errors are [`Error::Compile`] with naga's message (source excerpt included) and the WGSL.
///
/// ```
/// let ok = "@group(0) @binding(0) var<storage, read_write> y: array<f32>;
///           @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) { y[i.x] = 1.0; }";
/// brigade::device::validate_wgsl("fill", ok).unwrap();
/// assert!(brigade::device::validate_wgsl("broken", "fn main( {").is_err());
/// ```
pub fn validate_wgsl(label: &str, wgsl: &str) -> Result<()> {
    reflect(label, wgsl).map(|_| ())
}

impl Device {
    /// The compiled kernel for `wgsl`, from this device's cache (keyed by the exact WGSL text) or
    /// compiled now (evicting the least recently used kernel beyond
    /// [`Device::kernel_cache_capacity`]): validated with naga first ([`validate_wgsl`]), checked against the device's
    /// limits (storage buffers per stage, workgroup size), then a shader module and compute
    /// pipeline are created inside an error scope. A compile counts one
    /// [`crate::Counters::pipelines_created`]; a cache hit counts nothing.
    ///
    /// With [`DUMP_WGSL_ENV`] (`BRIGADE_DUMP_WGSL=DIR`) set, every label and text given here is
    /// also written to `DIR` (native only; best effort).
    ///
    /// The pipeline layout is built from the declared bindings (not wgpu's automatic layout), so a
    /// binding the shader declares but never uses is still bound in order.
    ///
    /// Errors: [`Error::Compile`] (naga's or the driver's message, with the WGSL),
    /// [`Error::OutOfMemory`], [`Error::DeviceLost`], [`Error::Unsupported`] on the cpu device.
    pub fn kernel(&self, label: &str, wgsl: &str) -> Result<Arc<Kernel>> {
        let gpu = self.gpu("kernel")?;
        // Before the cache: a text first compiled under another label is dumped under this one too.
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(dump) = WgslDump::get() {
            dump.write(label, wgsl);
        }
        // Held while compiling so a second caller with the same text waits and then hits the cache.
        let mut cache = lock(&gpu.kernels);
        if let Some(k) = cache.get(wgsl) {
            return Ok(k.clone());
        }
        let refl = reflect(label, wgsl)?;
        // wgpu makes an invalid pipeline, silently, on a device it has invalidated.
        if let Some(reason) = gpu.lost_now(false) {
            return Err(self.lost_error(reason));
        }
        let limits = self.limits();
        let storage = refl.bindings.iter().filter(|b| b.texture.is_none()).count();
        if storage as u64 > u64::from(limits.max_storage_buffers_per_shader_stage) {
            return Err(compile_error(
                label,
                wgsl,
                format!(
                    "the kernel binds {storage} storage buffers but device {} allows {} (max_storage_buffers_per_shader_stage); split it into smaller kernels",
                    self.name(),
                    limits.max_storage_buffers_per_shader_stage
                ),
            ));
        }
        super::texture::check_kernel(&gpu.device.limits(), self.name(), &refl.bindings)
            .map_err(|why| compile_error(label, wgsl, why))?;
        let [wx, wy, wz] = refl.workgroup_size;
        let invocations = u64::from(wx) * u64::from(wy) * u64::from(wz);
        if invocations > u64::from(limits.max_compute_invocations_per_workgroup)
            || wx > limits.max_compute_workgroup_size_x
        {
            return Err(compile_error(
                label,
                wgsl,
                format!(
                    "@workgroup_size({wx}, {wy}, {wz}) is too large for device {}: at most {} invocations (max_compute_invocations_per_workgroup) and {} in x (max_compute_workgroup_size_x)",
                    self.name(),
                    limits.max_compute_invocations_per_workgroup,
                    limits.max_compute_workgroup_size_x
                ),
            ));
        }

        #[cfg(not(target_arch = "wasm32"))]
        let started = std::time::Instant::now();
        let origin = || super::scopes::Origin::Kernel {
            label: label.to_string(),
            wgsl: wgsl.to_string(),
        };
        let ((pipeline, bind_group_layout), err) = gpu.capture_as(origin, || {
            let module = gpu
                .device
                .create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(label),
                    source: wgpu::ShaderSource::Wgsl(Cow::Borrowed(wgsl)),
                });
            let entries: Vec<wgpu::BindGroupLayoutEntry> = refl
                .bindings
                .iter()
                .map(|b| wgpu::BindGroupLayoutEntry {
                    binding: b.binding,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: match b.texture {
                        Some(_) => super::texture::BINDING_TYPE,
                        None => wgpu::BindingType::Buffer {
                            ty: wgpu::BufferBindingType::Storage {
                                read_only: b.read_only,
                            },
                            has_dynamic_offset: false,
                            min_binding_size: None,
                        },
                    },
                    count: None,
                })
                .collect();
            let bgl = gpu
                .device
                .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some(label),
                    entries: &entries,
                });
            let layout = gpu
                .device
                .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                    label: Some(label),
                    bind_group_layouts: &[Some(&bgl)],
                    immediate_size: 0,
                });
            let pipeline = gpu
                .device
                .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(label),
                    layout: Some(&layout),
                    module: &module,
                    entry_point: Some("main"),
                    compilation_options: wgpu::PipelineCompilationOptions {
                        zero_initialize_workgroup_memory: !wgsl.contains(SKIP_WORKGROUP_ZERO_INIT),
                        ..Default::default()
                    },
                    cache: gpu.pipelines.as_ref().map(|p| &p.cache),
                });
            (pipeline, bgl)
        });
        if let Some(e) = err {
            return Err(match e {
                wgpu::Error::OutOfMemory { .. } => {
                    self.wgpu_error(e, || format!("compiling kernel `{label}`"))
                }
                other => match gpu.lost_now(true) {
                    Some(reason) => self.lost_error(reason),
                    None => super::scopes::kernel_error(self.name(), label, wgsl, other),
                },
            });
        }
        bump(|c| c.pipelines_created += 1);
        #[cfg(not(target_arch = "wasm32"))]
        log::debug!(
            "brigade: compiled kernel `{label}` on device {} in {:.1} ms ({} bytes of WGSL)",
            self.name(),
            started.elapsed().as_secs_f64() * 1e3,
            wgsl.len()
        );
        log::trace!("brigade: WGSL of kernel `{label}`:\n{wgsl}");
        let kernel = Arc::new(Kernel {
            label: label.to_string(),
            wgsl: wgsl.to_string(),
            bindings: refl.bindings,
            workgroup_size: refl.workgroup_size,
            device_id: self.inner.id,
            pipeline,
            bind_group_layout,
        });
        let evicted = cache.insert(wgsl.to_string(), kernel.clone());
        drop(cache);
        if !evicted.is_empty() {
            let n = evicted.len() as u64;
            // Destroying a pipeline is a GL call on GL.
            let _gl = gpu.gl_guard();
            drop(evicted);
            bump(|c| c.kernels_evicted += n);
        }
        // Outside the kernel cache's lock: other compiles need not wait for the file.
        if let Some(p) = &gpu.pipelines {
            p.compiled();
        }
        Ok(kernel)
    }

    /// The on-disk pipeline cache of this device: `None` when it has none (backends without
    /// `PIPELINE_CACHE`, i.e. all but Vulkan; the disk cache off; the cpu device), else the bytes
    /// of intact cache data read from disk when the device was made (0: it started empty, with no
    /// file or a damaged one). Note that some drivers keep little in it: lavapipe stores only its
    /// 32-byte header and relies on Mesa's own shader cache (`MESA_SHADER_CACHE_DIR`) instead.
    pub fn pipeline_cache_loaded(&self) -> Option<u64> {
        self.inner
            .gpu
            .as_ref()
            .and_then(|g| g.pipelines.as_ref())
            .map(|p| p.loaded)
    }

    /// Write this device's pipeline cache to disk now; true when a file was written. Brigade also
    /// saves it after compiles (debounced) and when the device is dropped; this is for a process
    /// about to exit without dropping its runtime (the global runtime is never dropped) right
    /// after compiling. False on backends without a pipeline cache (only Vulkan has one), when the
    /// disk cache is off (`BRIGADE_CACHE_DIR=off`), and on the cpu device.
    pub fn save_pipeline_cache(&self) -> bool {
        self.inner
            .gpu
            .as_ref()
            .and_then(|g| g.pipelines.as_ref())
            .is_some_and(|p| p.save())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_hash_is_fnv1a_64() {
        // The published FNV-1a test vectors: the dump's file names must never change meaning.
        assert_eq!(fnv1a64(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64("foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(
            WgslDump::file_name("matmul 2/3", "a"),
            "matmul_2_3-af63dc4c8601ec8c.wgsl"
        );
        let long = WgslDump::file_name(&"é".repeat(300), "");
        assert_eq!(long, format!("{}-cbf29ce484222325.wgsl", "_".repeat(120)));
    }

    #[test]
    fn dump_writes_each_label_and_text_once() {
        let dir = std::env::temp_dir().join(format!("brigade-dump-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let dump = WgslDump::new(dir.join("nested"));
        let (a, b) = ("// kernel a\n", "// kernel b\n");
        dump.write("k", a);
        dump.write("k", b);
        dump.write("other", a);
        let name_a = WgslDump::file_name("k", a);
        // A second write of a name already written does not touch the file.
        std::fs::write(dir.join("nested").join(&name_a), "changed").unwrap();
        dump.write("k", a);
        let mut names: Vec<String> = std::fs::read_dir(dir.join("nested"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let mut want = vec![
            name_a.clone(),
            WgslDump::file_name("k", b),
            WgslDump::file_name("other", a),
        ];
        want.sort();
        assert_eq!(
            names, want,
            "no temporary files left, one file per label and text"
        );
        let read = |n: &str| std::fs::read_to_string(dir.join("nested").join(n)).unwrap();
        assert_eq!(read(&name_a), "changed");
        assert_eq!(read(&WgslDump::file_name("k", b)), b);
        assert_eq!(read(&WgslDump::file_name("other", a)), a);

        // An unwritable directory (a path below a regular file) warns and carries on.
        let blocked = WgslDump::new(dir.join("nested").join(&name_a).join("sub"));
        blocked.write("k", a);
        assert!(!dir.join("nested").join(&name_a).join("sub").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pipeline_envelope_rejects_damage() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let file = wrap_pipeline_data(&data);
        assert_eq!(unwrap_pipeline_data(&file), Some(&data[..]));
        // Truncated, extended, one bit flipped anywhere, another magic: all refused.
        assert_eq!(unwrap_pipeline_data(&file[..file.len() - 1]), None);
        assert_eq!(unwrap_pipeline_data(&file[..10]), None);
        let mut longer = file.clone();
        longer.push(0);
        assert_eq!(unwrap_pipeline_data(&longer), None);
        for at in [0, 9, 17, 24, 500, file.len() - 1] {
            let mut bad = file.clone();
            bad[at] ^= 0x10;
            assert_eq!(unwrap_pipeline_data(&bad), None, "flip at {at}");
        }
        assert_eq!(
            unwrap_pipeline_data(&wrap_pipeline_data(&[])),
            Some(&[][..])
        );
    }

    #[test]
    fn reflects_bindings() {
        let src = "@group(0) @binding(1) var<storage, read_write> y: array<f32>;
                   @group(0) @binding(0) var<storage, read> x: array<f32>;
                   @compute @workgroup_size(8, 2) fn main(@builtin(global_invocation_id) i: vec3<u32>) { y[i.x] = x[i.x]; }";
        let r = reflect("copy", src).unwrap();
        assert_eq!(r.workgroup_size, [8, 2, 1]);
        assert_eq!(r.bindings.len(), 2);
        assert!(r.bindings[0].read_only && r.bindings[0].name.as_deref() == Some("x"));
        assert!(!r.bindings[1].read_only);
        assert!(r.bindings.iter().all(|b| b.texture.is_none()));
    }

    /// A texture binding's size comes from its two constants; without them, with a width whose
    /// rows are not a multiple of 256 bytes, or of another texture type, it is refused.
    #[test]
    fn reflects_texture_bindings_and_their_sizes() {
        let kernel = |decls: &str, ty: &str| {
            format!(
                "@group(0) @binding(0) var T: {ty};
                 @group(0) @binding(1) var<storage, read_write> y: array<vec4<f32>>;
                 {decls}
                 @compute @workgroup_size(1) fn main() {{ y[0] = vec4<f32>(textureLoad(T, vec2<u32>(0u, 0u), 0)); }}"
            )
        };
        let sizes = "const T_TEXTURE_WIDTH: u32 = 32u; const T_TEXTURE_HEIGHT: u32 = 5u;";
        let r = reflect("tex", &kernel(sizes, "texture_2d<f32>")).unwrap();
        assert_eq!(r.bindings[0].texture, Some([32, 5]));
        assert!(r.bindings[0].read_only && r.bindings[1].texture.is_none());
        for (decls, ty, needle) in [
            ("", "texture_2d<f32>", "T_TEXTURE_WIDTH"),
            (
                "const T_TEXTURE_WIDTH: u32 = 32u;",
                "texture_2d<f32>",
                "T_TEXTURE_HEIGHT",
            ),
            (
                "const T_TEXTURE_WIDTH: u32 = 8u; const T_TEXTURE_HEIGHT: u32 = 5u;",
                "texture_2d<f32>",
                "multiple of 16",
            ),
            (sizes, "texture_2d<i32>", "texture_2d<f32>"),
        ] {
            let src = kernel(decls, ty);
            match reflect("tex", &src) {
                Err(Error::Compile { message, .. }) => {
                    assert!(message.contains(needle), "{needle:?} not in {message}")
                }
                Err(other) => panic!("{src}: {other:?}"),
                Ok(_) => panic!("{src}: accepted"),
            }
        }
    }

    #[test]
    fn rejects_what_brigade_cannot_bind() {
        let cases = [
            ("fn main( {", "expected"),
            (
                "@compute @workgroup_size(1) fn other() {}",
                "no `@compute fn main`",
            ),
            (
                "@group(1) @binding(0) var<storage, read_write> y: array<f32>;
                 @compute @workgroup_size(1) fn main() { y[0] = 1.0; }",
                "@group(1)",
            ),
            (
                "@group(0) @binding(0) var<uniform> u: vec4<f32>;
                 @group(0) @binding(1) var<storage, read_write> y: array<f32>;
                 @compute @workgroup_size(1) fn main() { y[0] = u.x; }",
                "storage buffers only",
            ),
            (
                "@group(0) @binding(2) var<storage, read_write> y: array<f32>;
                 @compute @workgroup_size(1) fn main() { y[0] = 1.0; }",
                "without gaps",
            ),
            // Type error: naga's validator / frontend catches it.
            (
                "@group(0) @binding(0) var<storage, read_write> y: array<f32>;
                 @compute @workgroup_size(1) fn main() { y[0] = 1u; }",
                "",
            ),
        ];
        for (src, needle) in cases {
            match validate_wgsl("t", src) {
                Err(Error::Compile {
                    kernel,
                    message,
                    wgsl,
                }) => {
                    assert_eq!(kernel, "t");
                    assert_eq!(wgsl, src);
                    assert!(message.contains(needle), "{needle:?} not in {message}");
                }
                other => panic!("{src}: {other:?}"),
            }
        }
    }
}
