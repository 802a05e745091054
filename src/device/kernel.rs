//! Kernels: naga validation, reflection of bindings, compiled compute pipelines cached per device.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use super::gpu::{Device, lock};
use crate::counters::bump;
use crate::error::{Error, Result};

/// One storage buffer a kernel declares at `@group(0) @binding(n)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelBinding {
    /// The binding number (bindings are always `0..n`).
    pub binding: u32,
    /// The variable's name in the WGSL.
    pub name: Option<String>,
    /// `var<storage, read>` (true) or `var<storage, read_write>` (false).
    pub read_only: bool,
}

/// A compiled compute kernel: WGSL with an `@compute fn main`, storage buffers at
/// `@group(0) @binding(0..n)`. Made by [`Device::kernel`], valid on that device only.
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
        let read_only = match var.space {
            naga::AddressSpace::Storage { access } => !access.contains(naga::StorageAccess::STORE),
            other => {
                return Err(compile_error(
                    label,
                    wgsl,
                    format!(
                        "`{shown}` at @binding({}) is in address space {other:?}: brigade binds storage buffers only (use var<storage, read>)",
                        rb.binding
                    ),
                ));
            }
        };
        bindings.push(KernelBinding {
            binding: rb.binding,
            name,
            read_only,
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

/// Check a kernel's WGSL without a device, as [`Device::kernel`] does before compiling: it must parse
/// and validate with naga (all capabilities), have an `@compute fn main`, and declare only storage
/// buffers at `@group(0) @binding(0..n)`.
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
    /// The pipeline layout is built from the declared bindings (not wgpu's automatic layout), so a
    /// binding the shader declares but never uses is still bound in order.
    ///
    /// Errors: [`Error::Compile`] (naga's or the driver's message, with the WGSL),
    /// [`Error::OutOfMemory`], [`Error::DeviceLost`], [`Error::Unsupported`] on the cpu device.
    pub fn kernel(&self, label: &str, wgsl: &str) -> Result<Arc<Kernel>> {
        let gpu = self.gpu("kernel")?;
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
        if refl.bindings.len() as u64 > u64::from(limits.max_storage_buffers_per_shader_stage) {
            return Err(compile_error(
                label,
                wgsl,
                format!(
                    "the kernel binds {} storage buffers but device {} allows {} (max_storage_buffers_per_shader_stage); split it into smaller kernels",
                    refl.bindings.len(),
                    self.name(),
                    limits.max_storage_buffers_per_shader_stage
                ),
            ));
        }
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
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Storage {
                            read_only: b.read_only,
                        },
                        has_dynamic_offset: false,
                        min_binding_size: None,
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
                    compilation_options: Default::default(),
                    cache: None,
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
        if !evicted.is_empty() {
            let n = evicted.len() as u64;
            // Destroying a pipeline is a GL call on GL.
            let _gl = gpu.gl_guard();
            drop(evicted);
            bump(|c| c.kernels_evicted += n);
        }
        Ok(kernel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
