//! Texture operands: kernels that read some inputs as `texture_2d<f32>` (the texture matmul,
//! `shaders/matmul_texture.wgsl`), fed from the buffers a dispatch binds.
//!
//! A kernel declares a texture binding with its size in texels ([`super::KernelBinding::texture`]);
//! a dispatch binds a buffer to it like to any other binding. When the dispatch is recorded, the
//! buffer's first `16 * width * height` bytes are copied into an rgba32float texture of that size
//! (`copy_buffer_to_texture`, outside the compute pass), and the bind group holds the texture's
//! view. So the program, its buffer plan and its schedule know nothing of textures.
//!
//! Textures are kept per device in a small cache keyed by `(binding, width, height)`: a second
//! dispatch of the same shape reuses them instead of allocating. Reuse within one submission is
//! safe because every copy is recorded right before the dispatch that reads it, in the same
//! command buffer, and wgpu orders a copy after the earlier dispatches that read the texture.
//! The cache holds at most [`CACHED_TEXTURES`] of them. While cached, a texture's bytes count as
//! memory in use in the device's pool, under its memory budget ([`reserve`], run before a run
//! records anything, creates the textures the run needs there and refuses with
//! [`crate::Error::OutOfMemory`] past the budget); an evicted texture is given back.

use std::sync::Mutex;

use super::Device;
use super::gpu::{Dispatch, Gpu, lock};
use super::kernel::KernelBinding;
use crate::cache::Lru;
use crate::error::Result;

/// Textures a device keeps for later dispatches (the two operands of four matmul shapes).
pub(crate) const CACHED_TEXTURES: usize = 8;

/// Bytes of one rgba32float texel.
const TEXEL_BYTES: u64 = 16;

/// The bind-group-layout entry type of a texture binding: a 2-D f32 texture read with
/// `textureLoad` (rgba32float is not filterable, and no sampler is bound).
pub(crate) const BINDING_TYPE: wgpu::BindingType = wgpu::BindingType::Texture {
    sample_type: wgpu::TextureSampleType::Float { filterable: false },
    view_dimension: wgpu::TextureViewDimension::D2,
    multisampled: false,
};

/// A device's idle textures by `(binding, width, height)`.
pub(crate) type TextureCache = Mutex<Lru<(u32, u32, u32), (wgpu::Texture, wgpu::TextureView)>>;

/// A new, empty cache.
pub(crate) fn new_cache() -> TextureCache {
    Mutex::new(Lru::new(CACHED_TEXTURES))
}

/// Whether a kernel's texture bindings fit the device: how many it binds
/// (`max_sampled_textures_per_shader_stage`) and their sizes (`max_texture_dimension_2d`).
/// `Err` is the reason, for a compile error.
pub(crate) fn check_kernel(
    limits: &wgpu::Limits,
    device: &str,
    bindings: &[KernelBinding],
) -> Result<(), String> {
    let sizes: Vec<(&KernelBinding, [u32; 2])> = bindings
        .iter()
        .filter_map(|b| b.texture.map(|s| (b, s)))
        .collect();
    if sizes.len() as u64 > u64::from(limits.max_sampled_textures_per_shader_stage) {
        return Err(format!(
            "the kernel binds {} textures but device {device} allows {} (max_sampled_textures_per_shader_stage)",
            sizes.len(),
            limits.max_sampled_textures_per_shader_stage
        ));
    }
    let max = limits.max_texture_dimension_2d;
    for (b, [w, h]) in sizes {
        if w > max || h > max {
            return Err(format!(
                "texture `{}` is {w} x {h} texels but device {device} allows {max} a side (max_texture_dimension_2d); \
                 use a kernel that reads the buffer instead",
                b.name.as_deref().unwrap_or("?")
            ));
        }
    }
    Ok(())
}

/// Why buffer `buf` cannot fill texture binding `b` of `size` texels (too small, or an offset a
/// copy cannot start at), if it cannot.
pub(crate) fn check_buffer(
    b: &KernelBinding,
    [w, h]: [u32; 2],
    offset: u64,
    size: u64,
) -> Option<String> {
    let need = TEXEL_BYTES * u64::from(w) * u64::from(h);
    let name = b.name.as_deref().unwrap_or("?");
    if size < need {
        return Some(format!(
            "texture `{name}` ({w} x {h} texels) needs {need} bytes but the buffer bound to it has {size}"
        ));
    }
    if !offset.is_multiple_of(TEXEL_BYTES) {
        return Some(format!(
            "the buffer bound to texture `{name}` starts at byte {offset} of its wgpu buffer, not a multiple of {TEXEL_BYTES}"
        ));
    }
    None
}

/// Bytes of a cached texture (what the pool counts for it).
fn texture_bytes(t: &wgpu::Texture) -> u64 {
    let s = t.size();
    TEXEL_BYTES * u64::from(s.width) * u64::from(s.height)
}

/// A new rgba32float texture of `w x h` texels and its view.
fn create(gpu: &Gpu, w: u32, h: u32) -> (wgpu::Texture, wgpu::TextureView) {
    let texture = gpu.device.create_texture(&wgpu::TextureDescriptor {
        label: Some("brigade operand texture"),
        size: wgpu::Extent3d {
            width: w,
            height: h,
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::Rgba32Float,
        usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
        view_formats: &[],
    });
    let view = texture.create_view(&wgpu::TextureViewDescriptor::default());
    (texture, view)
}

/// Cache a texture whose bytes the pool already counts; the pool stops counting the evicted
/// ones (which stay alive while a bind group still holds them).
fn keep(gpu: &Gpu, key: (u32, u32, u32), entry: (wgpu::Texture, wgpu::TextureView)) {
    let evicted = lock(&gpu.textures).insert(key, entry);
    if !evicted.is_empty() {
        let mut pool = lock(&gpu.pool);
        for (t, _) in &evicted {
            pool.unreserve(texture_bytes(t));
        }
    }
}

/// Make the textures that `dispatches` read resident in `gpu`'s cache, each new one reserved in
/// the pool under `dev`'s memory budget first (held free buffers are released when that makes
/// room). [`crate::Error::OutOfMemory`] when one does not fit next to the memory in use.
pub(crate) fn reserve(dev: &Device, gpu: &Gpu, dispatches: &[Dispatch<'_>]) -> Result<()> {
    for d in dispatches {
        for b in d.kernel.bindings() {
            let Some([w, h]) = b.texture else { continue };
            let key = (b.binding, w, h);
            if lock(&gpu.textures).get(&key).is_some() {
                continue;
            }
            let bytes = TEXEL_BYTES * u64::from(w) * u64::from(h);
            let mut freed = Vec::new();
            let reserved = lock(&gpu.pool).reserve(bytes, bytes, &mut freed);
            if !freed.is_empty() {
                let _gl = gpu.gl_guard();
                drop(freed);
            }
            if reserved.is_none() {
                return Err(dev.out_of_memory(
                    bytes,
                    &format!(
                        "it is the {w} x {h} rgba32f texture of binding {} of kernel `{}`, and it does not fit the memory limit",
                        b.binding,
                        d.kernel.label()
                    ),
                ));
            }
            keep(gpu, key, create(gpu, w, h));
        }
    }
    Ok(())
}

/// The textures of one live dispatch: `(binding, texture, view)` for each texture binding.
pub(crate) type Operands = Vec<(u32, wgpu::Texture, wgpu::TextureView)>;

/// The textures `d` reads, from `gpu`'s cache or made now. Two bindings of one dispatch never
/// share a texture (the binding is part of the key).
pub(crate) fn operands(gpu: &Gpu, d: &Dispatch<'_>) -> Operands {
    let mut out = Operands::new();
    for b in d.kernel.bindings() {
        let Some([w, h]) = b.texture else { continue };
        let key = (b.binding, w, h);
        let cached = lock(&gpu.textures).get(&key).cloned();
        let (texture, view) = match cached {
            Some(t) => t,
            None => {
                // Evicted since `reserve` (a run reading more textures than the cache holds):
                // made again and counted, past the budget check.
                let (texture, view) = create(gpu, w, h);
                lock(&gpu.pool).mark_in_use(texture_bytes(&texture));
                keep(gpu, key, (texture.clone(), view.clone()));
                (texture, view)
            }
        };
        out.push((b.binding, texture, view));
    }
    out
}

/// Record the copies of `d`'s texture operands from their buffers (before its compute pass).
pub(crate) fn record_copies(enc: &mut wgpu::CommandEncoder, d: &Dispatch<'_>, ops: &Operands) {
    for (binding, texture, _) in ops {
        let buf = d.buffers[*binding as usize];
        let size = texture.size();
        enc.copy_buffer_to_texture(
            wgpu::TexelCopyBufferInfo {
                buffer: &buf.buffer,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: buf.offset,
                    bytes_per_row: Some(size.width * TEXEL_BYTES as u32),
                    rows_per_image: Some(size.height),
                },
            },
            wgpu::TexelCopyTextureInfo {
                texture,
                mip_level: 0,
                origin: wgpu::Origin3d::ZERO,
                aspect: wgpu::TextureAspect::All,
            },
            size,
        );
    }
}
