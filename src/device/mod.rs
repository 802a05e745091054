//! Devices: discovery, logical devices, the memory pool, transfers, kernels and dispatch.
//!
//! A [`Runtime`] owns an ordered list of logical [`Device`]s. Each GPU device is one wgpu
//! `Device` + `Queue` requested from an adapter (several per adapter on request); the `cpu`
//! device has no wgpu state at all: arrays on it are host data run by the host executor (`brigade::cpu`).
//!
//! ```no_run
//! # async fn demo() -> brigade::Result<()> {
//! use brigade::device::{Dispatch, Runtime};
//! use brigade::{DType, HostData};
//!
//! let rt = Runtime::builder().layout_str("vulkan:2").build().await?;
//! let dev = &rt.devices()[0];
//! let x = dev.upload(&HostData::F32(vec![1.0, 2.0, 3.0]))?;
//! let y = dev.alloc(x.size())?;
//! let k = dev.kernel("double", "
//!     @group(0) @binding(0) var<storage, read> x: array<f32>;
//!     @group(0) @binding(1) var<storage, read_write> y: array<f32>;
//!     @compute @workgroup_size(64)
//!     fn main(@builtin(global_invocation_id) id: vec3<u32>) {
//!         if (id.x < arrayLength(&y)) { y[id.x] = 2.0 * x[id.x]; }
//!     }")?;
//! dev.run(&[Dispatch { kernel: &k, buffers: vec![&x, &y], workgroups: [1, 1, 1] }])?;
//! let out = dev.download(&y, DType::F32, 3).await?;
//! assert_eq!(out, HostData::F32(vec![2.0, 4.0, 6.0]));
//! # Ok(()) }
//! ```
//!
//! # Layouts
//! The devices a runtime gets are chosen by a layout string, given to
//! [`RuntimeBuilder::layout_str`] or read by [`Runtime::new`] from the environment variable
//! [`DEVICES_ENV`] (`BRIGADE_DEVICES`); see [`DeviceLayout`] for the grammar.
//!
//! # Errors
//! wgpu errors never panic: device calls run inside error scopes (native) and every device has an
//! uncaptured-error handler that logs and records the message ([`Device::last_error`]) and a
//! device-lost callback after which every call returns [`crate::Error::DeviceLost`].
//!
//! A device the app created itself ([`Device::from_wgpu`], [`RuntimeBuilder::with_wgpu_device`])
//! keeps the app's own handlers: brigade installs none natively (wgpu would replace the app's),
//! finds a loss by probing, and never destroys the device; see [`Device::from_wgpu`].
//!
//! # Platform notes
//! Software drivers: `mesa-vulkan-drivers` (lavapipe) and `libegl-mesa0` + `libgl1-mesa-dri`
//! (llvmpipe GL through EGL). While probing EGL displays wgpu logs
//! `EGL 'eglInitialize' code 0x3001: DRI2: failed to load driver` on machines without a render node;
//! it then falls back to a surfaceless llvmpipe display and the GL adapter works. Setting
//! `XDG_RUNTIME_DIR` makes no difference to that (checked with Mesa 25.0.7), so brigade does not
//! touch the environment.

// wgpu types are not Send/Sync in the browser; `Arc` there is only for cheap clones.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

mod caches;
pub(crate) mod disk_cache;
pub(crate) mod env;
mod gpu;
mod kernel;
mod layout;
mod pool;
mod runtime;
mod scopes;
mod texture;
mod thread_exit;
mod transfer;
pub(crate) mod tune;

use std::fmt;

pub use caches::{
    DEFAULT_KERNEL_CACHE_CAPACITY, DEFAULT_PROGRAM_CACHE_CAPACITY, KERNEL_CACHE_ENV,
    PROGRAM_CACHE_ENV,
};
pub use disk_cache::CACHE_DIR_ENV;
pub use gpu::{BufferCopy, Command, Device, Dispatch};
pub(crate) use gpu::{CHUNK_COMMANDS, Recorder, check_output_usages};
pub use kernel::{DUMP_WGSL_ENV, Kernel, KernelBinding, SKIP_WORKGROUP_ZERO_INIT, validate_wgsl};
pub use layout::{BackendKind, DeviceLayout};
pub use pool::{DeviceBuffer, MemoryStats, PoolStats, bucket_size};
pub use runtime::{
    AdapterSummary, DEVICES_ENV, MAPPED_READS_ENV, MAX_BINDING_ENV, MAX_BUFFER_ENV,
    MEMORY_LIMIT_ENV, Runtime, RuntimeBuilder, init, parse_max_binding, parse_memory_limit,
};
pub use transfer::download_all;
pub(crate) use transfer::{download_arrays, read_mapped, read_mapped_pieces};
pub use tune::{
    MATMUL_CACHE_FILE, REDUCE_SPREAD_ENV, TEXTURE_ENV, TUNE_ENV, TuneStats, tune_stats,
};

/// The limits of one device that brigade plans around (a subset of `wgpu::Limits`).
///
/// Devices are requested with their adapter's own limits, so these are the adapter's real
/// capabilities, not wgpu's conservative defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceLimits {
    /// Largest storage-buffer binding, in bytes (lowered by [`MAX_BINDING_ENV`] /
    /// [`RuntimeBuilder::max_binding`]). A larger array is bound in segments; the kernel
    /// families that do not do that yet refuse it with [`crate::Error::OverLimit`].
    pub max_storage_buffer_binding_size: u64,
    /// Largest wgpu buffer, in bytes (lowered by [`MAX_BUFFER_ENV`] /
    /// [`RuntimeBuilder::max_buffer`]). A larger array is stored in several buffers, parts of
    /// [`DeviceLimits::part_bytes`] each, that no kernel binding straddles.
    pub max_buffer_size: u64,
    /// Storage buffers one compute shader may bind (Vulkan llvmpipe: 32; GL: often 16 or 8).
    pub max_storage_buffers_per_shader_stage: u32,
    /// Invocations in one workgroup (product of the workgroup size).
    pub max_compute_invocations_per_workgroup: u32,
    /// Largest workgroup size in x.
    pub max_compute_workgroup_size_x: u32,
    /// Largest workgroup count in any one dispatch dimension (usually 65 535).
    pub max_compute_workgroups_per_dimension: u32,
    /// Bytes of `var<workgroup>` memory per workgroup.
    pub max_compute_workgroup_storage_size: u32,
}

impl DeviceLimits {
    /// The limits of a wgpu device or adapter.
    pub fn from_wgpu(l: &wgpu::Limits) -> DeviceLimits {
        DeviceLimits {
            max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
            max_buffer_size: l.max_buffer_size,
            max_storage_buffers_per_shader_stage: l.max_storage_buffers_per_shader_stage,
            max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
            max_compute_workgroup_size_x: l.max_compute_workgroup_size_x,
            max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
            max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
        }
    }

    /// Limits of the `cpu` device: bounded only by host memory.
    pub fn host() -> DeviceLimits {
        DeviceLimits {
            max_storage_buffer_binding_size: isize::MAX as u64,
            max_buffer_size: isize::MAX as u64,
            max_storage_buffers_per_shader_stage: u32::MAX,
            max_compute_invocations_per_workgroup: u32::MAX,
            max_compute_workgroup_size_x: u32::MAX,
            max_compute_workgroups_per_dimension: u32::MAX,
            max_compute_workgroup_storage_size: u32::MAX,
        }
    }

    /// The limits both `self` and `other` satisfy (the smaller of each). A parallel program is
    /// planned against the meet of its devices' limits, so that every device runs the same kernels.
    pub fn meet(&self, other: &DeviceLimits) -> DeviceLimits {
        DeviceLimits {
            max_storage_buffer_binding_size: self
                .max_storage_buffer_binding_size
                .min(other.max_storage_buffer_binding_size),
            max_buffer_size: self.max_buffer_size.min(other.max_buffer_size),
            max_storage_buffers_per_shader_stage: self
                .max_storage_buffers_per_shader_stage
                .min(other.max_storage_buffers_per_shader_stage),
            max_compute_invocations_per_workgroup: self
                .max_compute_invocations_per_workgroup
                .min(other.max_compute_invocations_per_workgroup),
            max_compute_workgroup_size_x: self
                .max_compute_workgroup_size_x
                .min(other.max_compute_workgroup_size_x),
            max_compute_workgroups_per_dimension: self
                .max_compute_workgroups_per_dimension
                .min(other.max_compute_workgroups_per_dimension),
            max_compute_workgroup_storage_size: self
                .max_compute_workgroup_storage_size
                .min(other.max_compute_workgroup_storage_size),
        }
    }

    /// The largest array, in bytes, that one kernel binding holds whole: the smaller of the
    /// binding limit and the buffer limit. Arrays up to `max_buffer_size` are stored too, and
    /// bound in segments.
    pub fn max_array_bytes(&self) -> u64 {
        self.max_storage_buffer_binding_size
            .min(self.max_buffer_size)
    }

    /// Bytes of every segment but the last of an array larger than one binding: the largest
    /// power of two within [`DeviceLimits::max_array_bytes`] (at least 256, the largest
    /// storage-offset alignment). A power of two, so that segments never straddle the parts of
    /// an array stored in several buffers ([`DeviceLimits::part_bytes`]).
    pub fn segment_bytes(&self) -> u64 {
        pow2_floor(self.max_array_bytes()).max(256)
    }

    /// Bytes of every part but the last of an array larger than `max_buffer_size`, which is
    /// stored in several wgpu buffers: the largest power of two within `max_buffer_size` (at
    /// least [`DeviceLimits::segment_bytes`]). Powers of two divide each other, so a range that
    /// stays within one part of the smallest part size of a mesh ([`DeviceLimits::meet`]) stays
    /// within one part on every device of it.
    pub fn part_bytes(&self) -> u64 {
        pow2_floor(self.max_buffer_size).max(self.segment_bytes())
    }
}

/// The largest power of two `<= x` (1 for 0).
fn pow2_floor(x: u64) -> u64 {
    if x == 0 {
        1
    } else {
        1 << (63 - x.leading_zeros())
    }
}

/// What a logical device is: its position, the adapter it came from and its limits.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceInfo {
    /// Position of the device in [`Runtime::devices`].
    pub index: usize,
    /// Position of its adapter in [`Runtime::adapters`]. The `cpu` device reports the position
    /// one past the last wgpu adapter (a virtual adapter).
    pub adapter_index: usize,
    /// The adapter's name, e.g. `llvmpipe (LLVM 15.0.6, 256 bits)`; `cpu` for the cpu device.
    pub adapter_name: String,
    /// `vulkan`, `gl`, `metal`, `dx12`, `webgpu` or `cpu`.
    pub backend: String,
    /// `cpu`, `integrated`, `discrete`, `virtual` or `other`.
    pub device_type: String,
    /// The device's limits.
    pub limits: DeviceLimits,
}

impl fmt::Display for DeviceInfo {
    /// One line, e.g. `device 0: llvmpipe (LLVM 15.0.6, 256 bits) [vulkan, cpu] on adapter 0, max binding 128 MiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "device {}: {} [{}, {}] on adapter {}, max binding {}",
            self.index,
            self.adapter_name,
            self.backend,
            self.device_type,
            self.adapter_index,
            human_bytes(self.limits.max_storage_buffer_binding_size)
        )
    }
}

/// `bytes` as a short human string (`512 B`, `64 KiB`, `128 MiB`, `1.5 GiB`).
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// brigade's name of a wgpu backend.
pub(crate) fn backend_name(b: wgpu::Backend) -> &'static str {
    match b {
        wgpu::Backend::Vulkan => "vulkan",
        wgpu::Backend::Metal => "metal",
        wgpu::Backend::Dx12 => "dx12",
        wgpu::Backend::Gl => "gl",
        wgpu::Backend::BrowserWebGpu => "webgpu",
        wgpu::Backend::Noop => "noop",
    }
}

/// brigade's name of a wgpu device type.
pub(crate) fn device_type_name(t: wgpu::DeviceType) -> &'static str {
    match t {
        wgpu::DeviceType::Cpu => "cpu",
        wgpu::DeviceType::IntegratedGpu => "integrated",
        wgpu::DeviceType::DiscreteGpu => "discrete",
        wgpu::DeviceType::VirtualGpu => "virtual",
        wgpu::DeviceType::Other => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_reads_well() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(64 << 10), "64 KiB");
        assert_eq!(human_bytes(128 << 20), "128 MiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
    }
}
