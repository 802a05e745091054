//! [`Array`]: concrete data, on the host or on one device.

use std::sync::Arc;

use crate::device::{Device, DeviceBuffer};
use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::host::{Element, HostArray};
use crate::mesh::{Mesh, NamedSharding, PartitionSpec, SpecEntry};
use crate::trace::graph::Aval;

/// A concrete n-dimensional array. Cheap to clone (shared, immutable).
///
/// Data lives either in host memory or in a buffer on one [`Device`]. Results of device computations
/// stay on their device until read with [`Array::to_vec`] / [`Array::to_host`].
///
/// ```
/// use brigade::Array;
/// let a = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
/// assert_eq!(a.shape(), &[2, 2]);
/// assert_eq!(a.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
#[derive(Clone)]
pub struct Array {
    pub(crate) inner: Arc<ArrayInner>,
}

pub(crate) struct ArrayInner {
    pub(crate) aval: Aval,
    pub(crate) storage: Storage,
    /// The zero-input primitive (`full`, `iota`) this constant came from, so that a trace records
    /// the primitive (computed in the kernel) instead of capturing and uploading its data.
    pub(crate) origin: Option<crate::ops::Prim>,
}

pub(crate) enum Storage {
    Host(HostArray),
    Device {
        device: Device,
        buffer: Arc<DeviceBuffer>,
    },
    /// One piece per device (each a host or single-device array), from a parallel call or
    /// [`crate::device_put_sharded`].
    Sharded {
        layout: ShardLayout,
        shards: Vec<Array>,
        devices: Vec<Device>,
    },
}

/// How a sharded array's value is spread over its devices (shard `i` lives on device `i` of
/// [`Array::shard_devices`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardLayout {
    /// `pmap` style: shard `i` is entry `i` along `axis` of the global array (which has one entry
    /// per device there; the shards lack that axis).
    Stacked { axis: usize },
    /// Split style (`shard_map`): shard `i` is the `i`-th block of equal size along `axis`.
    Blocks { axis: usize },
    /// Every device holds the whole value (a result made identical by a collective).
    Replicated,
    /// Blocks over a [`crate::Mesh`] as a [`crate::PartitionSpec`] says ([`crate::device_put`] with a
    /// [`NamedSharding`], [`crate::shard_map`] over a mesh): shard `i` is the block of mesh device `i`.
    Named(NamedSharding),
}

impl ShardLayout {
    /// The global shape for shards of `shard` shape over `n` devices.
    pub fn global_shape(&self, shard: &[usize], n: usize) -> Vec<usize> {
        let mut s = shard.to_vec();
        match self {
            ShardLayout::Stacked { axis } => s.insert(*axis, n),
            ShardLayout::Blocks { axis } => s[*axis] *= n,
            ShardLayout::Replicated => {}
            ShardLayout::Named(sharding) => return sharding.global_shape(shard),
        }
        s
    }

    /// The same placement as a [`NamedSharding`] over `devices`: one-axis layouts get a mesh with
    /// one axis named `"shard"` (a stacked axis is split into blocks of one entry).
    pub fn to_named(&self, devices: &[Device], rank: usize) -> Result<NamedSharding> {
        match self {
            ShardLayout::Named(s) => Ok(s.clone()),
            _ => self.on_shard_axis(&Mesh::new(devices, &[("shard", devices.len())])?, rank),
        }
    }

    /// A one-axis layout as a [`NamedSharding`] over `mesh`, whose one axis is `"shard"`.
    pub(crate) fn on_shard_axis(&self, mesh: &Mesh, rank: usize) -> Result<NamedSharding> {
        let axis = match self {
            ShardLayout::Stacked { axis } | ShardLayout::Blocks { axis } if *axis < rank => {
                Some(*axis)
            }
            _ => None,
        };
        let mut entries = vec![SpecEntry::Replicated; axis.map_or(0, |a| a + 1)];
        if let Some(a) = axis {
            entries[a] = SpecEntry::from("shard");
        }
        NamedSharding::new(mesh, PartitionSpec::new(entries))
    }
}

/// A layout given by reference (`&ShardLayout::Stacked { axis: 0 }`), as
/// `Array::from_process_local` (feature `mpi`) takes it.
impl From<&ShardLayout> for ShardLayout {
    fn from(l: &ShardLayout) -> ShardLayout {
        l.clone()
    }
}

/// A [`NamedSharding`] as the layout [`ShardLayout::Named`].
impl From<&NamedSharding> for ShardLayout {
    fn from(s: &NamedSharding) -> ShardLayout {
        ShardLayout::Named(s.clone())
    }
}

impl From<NamedSharding> for ShardLayout {
    fn from(s: NamedSharding) -> ShardLayout {
        ShardLayout::Named(s)
    }
}

/// The bytes of one array inside a wgpu buffer, to bind in an app's own pipelines
/// ([`Array::wgpu_buffer`]): `buffer.slice(offset..offset + size)`.
#[derive(Clone, Debug)]
pub struct BufferView {
    /// The wgpu buffer (a shared handle: cloning it does not copy).
    pub buffer: wgpu::Buffer,
    /// Where the array starts, in bytes.
    pub offset: u64,
    /// The array's bytes: its element count × 4 (every dtype is 32-bit on a device; bool is one
    /// `u32`, 0 or 1, per element).
    pub size: u64,
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let place = match &self.inner.storage {
            Storage::Host(_) => "host".to_string(),
            Storage::Device { device, .. } => format!("device {}", device.index()),
            Storage::Sharded { layout, shards, .. } => {
                format!("{} devices, {layout:?}", shards.len())
            }
        };
        write!(f, "Array({} on {place})", self.inner.aval)
    }
}

impl Array {
    // On the web wgpu handles are not Send, so neither are arrays there; sharing stays single-threaded.
    #[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
    pub(crate) fn from_host(h: HostArray) -> Array {
        let aval = Aval::new(h.shape.clone(), h.dtype());
        Array {
            inner: Arc::new(ArrayInner {
                aval,
                storage: Storage::Host(h),
                origin: None,
            }),
        }
    }
    #[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
    pub(crate) fn from_buffer(device: Device, buffer: Arc<DeviceBuffer>, aval: Aval) -> Array {
        Array {
            inner: Arc::new(ArrayInner {
                aval,
                storage: Storage::Device { device, buffer },
                origin: None,
            }),
        }
    }
    /// A host constant made by a zero-input primitive, remembered for tracing.
    #[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
    pub(crate) fn from_constant(prim: crate::ops::Prim, h: HostArray) -> Array {
        let aval = Aval::new(h.shape.clone(), h.dtype());
        Array {
            inner: Arc::new(ArrayInner {
                aval,
                storage: Storage::Host(h),
                origin: Some(prim),
            }),
        }
    }
    /// An array from a vector and a shape; the length must match the shape.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Array> {
        Ok(Array::from_host(HostArray::from_vec(data, shape)?))
    }
    /// A host array from [`HostArray`] data (its length must match its shape).
    pub fn from_host_array(h: HostArray) -> Result<Array> {
        Ok(Array::from_host(HostArray::new(h.shape, h.data)?))
    }
    /// A rank-0 array.
    pub fn scalar(v: impl Into<Scalar>) -> Array {
        Array::from_host(HostArray::scalar(v.into()))
    }
    /// A host array of `shape` filled with `v`.
    ///
    /// Errors: [`Error::ShapeTooLarge`] when the shape's element count overflows,
    /// [`Error::OutOfMemory`] (device `host`, naming the bytes) when the host cannot allocate it.
    /// Inside `jit`, prefer [`crate::Tensor::full`]: it stays a primitive that the device computes.
    pub fn full(v: impl Into<Scalar>, shape: &[usize]) -> Result<Array> {
        Ok(Array::from_host(HostArray::full(v.into(), shape)?))
    }
    pub fn shape(&self) -> &[usize] {
        &self.inner.aval.shape
    }
    pub fn dtype(&self) -> DType {
        self.inner.aval.dtype
    }
    pub fn aval(&self) -> &Aval {
        &self.inner.aval
    }
    /// Number of elements.
    pub fn size(&self) -> usize {
        self.inner.aval.size()
    }
    pub fn ndim(&self) -> usize {
        self.inner.aval.rank()
    }
    /// The device holding the data, or None for host arrays.
    pub fn device(&self) -> Option<&Device> {
        match &self.inner.storage {
            Storage::Device { device, .. } => Some(device),
            _ => None,
        }
    }
    pub(crate) fn buffer(&self) -> Option<&Arc<DeviceBuffer>> {
        match &self.inner.storage {
            Storage::Device { buffer, .. } => Some(buffer),
            _ => None,
        }
    }
    /// The host data if the array lives on the host.
    pub fn host(&self) -> Option<&HostArray> {
        match &self.inner.storage {
            Storage::Host(h) => Some(h),
            _ => None,
        }
    }
    /// The shards of a sharded array (one per device, in device order), like JAX's
    /// `addressable_shards`; None for host and single-device arrays.
    pub fn shards(&self) -> Option<&[Array]> {
        match &self.inner.storage {
            Storage::Sharded { shards, .. } => Some(shards),
            _ => None,
        }
    }
    /// How a sharded array is spread over its devices; None for host and single-device arrays.
    pub fn shard_layout(&self) -> Option<ShardLayout> {
        match &self.inner.storage {
            Storage::Sharded { layout, .. } => Some(layout.clone()),
            _ => None,
        }
    }
    /// How the array is placed over devices, as a [`NamedSharding`] (JAX's `Array.sharding`): for
    /// arrays placed with one or made by `shard_map` over a mesh, that sharding; for the outputs of
    /// `pmap` and one-axis `shard_map`, the same placement over a one-axis mesh named `"shard"`.
    /// When the array spans processes (feature `mpi`) that mesh runs over every process's devices,
    /// process by process, taking each process's devices at the local positions this process
    /// used (the same program runs on every process). None for host and single-device arrays
    /// (and for shards on devices of a runtime other than the one `distributed` was started on).
    pub fn sharding(&self) -> Option<NamedSharding> {
        match &self.inner.storage {
            Storage::Sharded {
                layout, devices, ..
            } => {
                #[cfg(feature = "mpi")]
                if !matches!(layout, ShardLayout::Named(_)) && !self.is_fully_addressable() {
                    return crate::distributed::spanning_sharding(layout, devices, self.ndim())
                        .ok();
                }
                layout.to_named(devices, self.ndim()).ok()
            }
            _ => None,
        }
    }
    /// Place the array as `sharding` says (what [`crate::device_put`] does with a
    /// [`NamedSharding`]): each mesh device receives its block. Free when the array is already
    /// placed that way; otherwise the value is gathered once and its blocks uploaded. An array
    /// spanning processes (feature `mpi`) is gathered over MPI first, as
    /// `distributed::process_allgather` does: every process must then make the same call.
    pub fn to_sharding(&self, sharding: &NamedSharding) -> Result<Array> {
        sharding.shard_shape_for("device_put", self.shape(), None)?;
        if self
            .sharding()
            .is_some_and(|s| s.same_placement(sharding, self.ndim()))
            && !matches!(self.shard_layout(), Some(ShardLayout::Stacked { .. }))
        {
            if let Storage::Sharded { shards, .. } = &self.inner.storage {
                return Ok(Array::from_shards(
                    ShardLayout::Named(sharding.clone()),
                    shards.clone(),
                    sharding.mesh().devices().to_vec(),
                ));
            }
        }
        #[cfg(feature = "mpi")]
        let h = crate::distributed::process_allgather_host(self)?;
        #[cfg(not(feature = "mpi"))]
        let h = host_data(self)?;
        // On a mesh spanning processes each process places its own devices' blocks.
        let offset = sharding.mesh().offset();
        let shards = sharding
            .mesh()
            .devices()
            .iter()
            .enumerate()
            .map(|(i, d)| Array::from_host(sharding.block_of(&h, offset + i)).to_device(d))
            .collect::<Result<Vec<_>>>()?;
        Ok(Array::from_shards(
            ShardLayout::Named(sharding.clone()),
            shards,
            sharding.mesh().devices().to_vec(),
        ))
    }
    /// The devices holding a sharded array, in shard order (empty for unsharded arrays).
    pub fn shard_devices(&self) -> &[Device] {
        match &self.inner.storage {
            Storage::Sharded { devices, .. } => devices,
            _ => &[],
        }
    }
    /// A sharded array from its pieces (one per device, each already on its device).
    #[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
    pub(crate) fn from_shards(
        layout: ShardLayout,
        shards: Vec<Array>,
        devices: Vec<Device>,
    ) -> Array {
        let n = shards.len();
        Array::from_shards_of(layout, shards, devices, n)
    }
    /// [`Array::from_shards`] of this process's shards of a value over `total` devices (more
    /// than `shards.len()` when the value spans processes).
    pub(crate) fn from_shards_of(
        layout: ShardLayout,
        shards: Vec<Array>,
        devices: Vec<Device>,
        total: usize,
    ) -> Array {
        let shape = layout.global_shape(shards[0].shape(), total);
        let aval = Aval::new(shape, shards[0].dtype());
        Array {
            inner: Arc::new(ArrayInner {
                aval,
                storage: Storage::Sharded {
                    layout,
                    shards,
                    devices,
                },
                origin: None,
            }),
        }
    }
    /// Copy the data to `device` (JAX's `device_put`). Free if it is already there.
    pub fn to_device(&self, device: &Device) -> Result<Array> {
        if let Some(d) = self.device() {
            if crate::exec::same_device(d, device) {
                return Ok(self.clone());
            }
        }
        if let Storage::Sharded {
            layout: ShardLayout::Replicated,
            shards,
            devices,
        } = &self.inner.storage
        {
            if let Some(i) = devices.iter().position(|d| d == device) {
                return Ok(shards[i].clone());
            }
        }
        if device.is_cpu() {
            // The cpu device computes on host memory.
            return Ok(if self.host().is_some() {
                self.clone()
            } else {
                Array::from_host(host_data(self)?)
            });
        }
        if self.dtype() == DType::F64 {
            return Err(crate::error::f64_on_gpu(
                "uploading to a GPU device",
                self.shape(),
            ));
        }
        let buf = match self.host() {
            Some(h) => device.upload(&h.data)?,
            None => device.upload(&host_data(self)?.data)?,
        };
        Ok(Array::from_buffer(
            device.clone(),
            buf,
            self.inner.aval.clone(),
        ))
    }
    /// The wgpu buffer holding this array, to bind in the app's own pipelines (a vertex buffer, a
    /// storage buffer of its compute pass) with no copy. Needs a device array: a host array is
    /// [`Error::BadBuffer`] naming [`Array::to_device`]; sharded arrays name
    /// [`Array::shards`]. Extra usages (e.g. `VERTEX`) come from `Jit::output_usages` or
    /// [`Device::set_output_usages`]: check `view.buffer.usage()`.
    ///
    /// Lifetimes: once exported, the buffer is never handed to another array: when brigade's last
    /// array using it drops, it is not returned to the pool but released, and wgpu frees it once
    /// the app's handle (`BufferView::buffer` and its clones) and every command using it are gone
    /// too. So the app may keep drawing from it as long as it holds the handle; brigade does not
    /// write it again except through `Jit::call_into` with this array as an output. Reads of the
    /// array copy it through a staging buffer (never map it), so the app's submits cannot meet a
    /// mapping. The app must not write it while brigade still reads the array.
    ///
    /// Errors: [`Error::BadBuffer`] for a host, sharded or parted array (naming the way to
    /// export it), [`Error::DeviceLost`] once its device is lost or destroyed.
    ///
    /// ```no_run
    /// use brigade::{Array, Tensor, jit};
    /// # fn demo(dev: &brigade::Device) -> brigade::Result<()> {
    /// let step = jit(|x: &[Tensor]| vec![&x[0] * 0.5]).on(dev).output_usages(wgpu::BufferUsages::VERTEX);
    /// let x = Array::from_vec(vec![1.0f32; 8], &[4, 2])?.to_device(dev)?;
    /// let y = step.call(&[x])?;
    /// let view = y[0].wgpu_buffer()?;
    /// assert!(view.buffer.usage().contains(wgpu::BufferUsages::VERTEX));
    /// // render_pass.set_vertex_buffer(0, view.buffer.slice(view.offset..view.offset + view.size));
    /// # Ok(()) }
    /// ```
    pub fn wgpu_buffer(&self) -> Result<BufferView> {
        if let Storage::Device { device, .. } = &self.inner.storage {
            // A handle to a buffer of a device brigade destroyed would only fail in the app.
            device.live_gpu("wgpu_buffer")?;
        }
        match &self.inner.storage {
            Storage::Device { buffer, .. } if buffer.is_parted() => Err(Error::BadBuffer {
                op: "wgpu_buffer",
                device: buffer.device().name().to_string(),
                detail: format!(
                    "the array ({}, {} bytes) is larger than the device's max_buffer_size ({} \
                     bytes) and is stored in several wgpu buffers; take them with \
                     `array.wgpu_buffer_parts()`",
                    self.inner.aval,
                    self.size() as u64 * 4,
                    buffer.device().limits().max_buffer_size
                ),
            }),
            Storage::Device { buffer, .. } => {
                buffer.share();
                Ok(BufferView {
                    buffer: wgpu::Buffer::clone(&buffer.buffer),
                    offset: buffer.offset,
                    size: self.size() as u64 * 4,
                })
            }
            Storage::Host(_) => Err(Error::BadBuffer {
                op: "wgpu_buffer",
                device: String::new(),
                detail: format!(
                    "the array ({}) is host data (or on the cpu device), not in a wgpu buffer; move it to a GPU device first with `array.to_device(&device)`",
                    self.inner.aval
                ),
            }),
            Storage::Sharded { shards, .. } => Err(Error::BadBuffer {
                op: "wgpu_buffer",
                device: String::new(),
                detail: format!(
                    "the array ({}) is sharded over {} devices, one buffer each: export a shard with `array.shards()[i].wgpu_buffer()`",
                    self.inner.aval,
                    shards.len()
                ),
            }),
        }
    }

    /// The wgpu buffers holding this array, to bind in the app's own pipelines (lifetimes as
    /// for [`Array::wgpu_buffer`]): one entry, or for an array larger than its device's
    /// `max_buffer_size` one entry per part, in order, every part but the last
    /// [`crate::DeviceLimits::part_bytes`] long.
    pub fn wgpu_buffer_parts(&self) -> Result<Vec<BufferView>> {
        match &self.inner.storage {
            Storage::Device { buffer, .. } if buffer.is_parted() => {
                buffer.share();
                Ok(buffer
                    .pieces(0, self.size() as u64 * 4)
                    .into_iter()
                    .map(|(b, offset, size)| BufferView {
                        buffer: b.clone(),
                        offset,
                        size,
                    })
                    .collect())
            }
            _ => self.wgpu_buffer().map(|v| vec![v]),
        }
    }

    /// An array that reads and writes `shape.iter().product() * 4` bytes of an app's wgpu buffer
    /// from `offset`, with no copy (dtype any 32-bit type; bool is one `u32` per element). The
    /// buffer must have been created on `device`'s wgpu device (e.g. one given with
    /// `Device::from_wgpu`, or the one [`Device::wgpu`] returns).
    ///
    /// The app keeps the buffer: brigade never pools or frees it (it holds a handle until the
    /// array and every array sharing it are dropped). Programs read it as an input, and write it
    /// when the array is an output of `Jit::call_into`; the app's own writes
    /// (`queue.write_buffer`, its passes) are ordered with brigade's work by the queue. Reads
    /// ([`Array::to_host`]) copy it through a staging buffer.
    ///
    /// Needs usages `STORAGE` (kernels bind it), `COPY_SRC` (reads, and programs that copy their
    /// inputs) and `COPY_DST` (outputs copied into it).
    ///
    /// An array larger than the device's `max_storage_buffer_binding_size` is accepted: kernels
    /// bind it in segments, each within the limit, as they do brigade's own large arrays.
    ///
    /// Errors ([`Error::BadBuffer`] unless said otherwise, each naming the fix): a usage missing;
    /// `offset` not a multiple of the device's `min_storage_buffer_offset_alignment`; the bytes
    /// not inside the buffer (`offset + bytes > buffer.size()`); a mapped buffer
    /// (`mapped_at_creation`, or mapped by `map_async`: `unmap` it first); a buffer of another
    /// wgpu device or of another `wgpu::Instance`; [`Error::OverLimit`] for an array past 32-bit
    /// element indexing (more than 2^32 - 1 elements); [`Error::BadDType`] for f64;
    /// [`Error::DeviceLost`]; [`Error::Unsupported`] on the cpu device.
    ///
    /// Natively the owner is found by asking the buffer itself, never by handing it to this
    /// device's wgpu calls first: an `unmap` of the (unmapped) buffer inside an error scope of
    /// this device, whose "not mapped" error reaches that scope only when this device made the
    /// buffer. For a buffer of another device that error reaches the other device instead: its
    /// error scope or uncaptured-error handler sees one spurious "Buffer is not mapped"
    /// validation error (wgpu's default handler's panic is caught here, silently). A buffer with
    /// a `map_async` still pending is refused, its mapping aborted. In the browser wgpu's answer
    /// to the other-device check is asynchronous: it comes from the next
    /// [`Device::flush_errors`] (every read runs it) instead.
    ///
    /// ```no_run
    /// use brigade::{Array, DType};
    /// # fn demo(dev: &brigade::Device) -> brigade::Result<()> {
    /// let (wdev, queue) = dev.wgpu().expect("a GPU device");
    /// let buf = wdev.create_buffer(&wgpu::BufferDescriptor {
    ///     label: Some("positions"),
    ///     size: 1024 * 8,
    ///     usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::VERTEX
    ///         | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
    ///     mapped_at_creation: false,
    /// });
    /// queue.write_buffer(&buf, 0, bytemuck::cast_slice(&vec![0.5f32; 2048]));
    /// let x = Array::from_wgpu_buffer(dev, buf, 0, &[1024, 2], DType::F32)?;
    /// assert_eq!(x.to_vec::<f32>()?[0], 0.5);
    /// # Ok(()) }
    /// ```
    pub fn from_wgpu_buffer(
        device: &Device,
        buffer: wgpu::Buffer,
        offset: u64,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Array> {
        let aval = Aval::new(shape.to_vec(), dtype);
        let buf = device.import_buffer(buffer, offset, &aval)?;
        Ok(Array::from_buffer(device.clone(), buf, aval))
    }

    /// True while this array (or a shard of it) is an output of a `Jit::encode` not yet seen to
    /// have run: [`Array::check_computed`] then has a slot to read.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn encode_pending(&self) -> bool {
        match &self.inner.storage {
            Storage::Device { buffer, .. } => buffer.lock_pending().is_some(),
            Storage::Sharded { shards, .. } => shards.iter().any(Array::encode_pending),
            Storage::Host(_) => false,
        }
    }

    /// [`Error::NotComputed`] for an output (or a shard of one) of a `Jit::encode` whose
    /// commands never ran; checked once per encoded output, before its first read or use.
    pub(crate) async fn check_computed(&self) -> Result<()> {
        match &self.inner.storage {
            Storage::Device { device, buffer } => device.check_encoded(buffer).await,
            Storage::Sharded { shards, .. } => {
                for s in shards {
                    if let Storage::Device { device, buffer } = &s.inner.storage {
                        device.check_encoded(buffer).await?;
                    }
                }
                Ok(())
            }
            Storage::Host(_) => Ok(()),
        }
    }

    /// Read the data back to the host (waits for pending work on its device).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn to_host(&self) -> Result<HostArray> {
        pollster::block_on(self.to_host_async())
    }
    /// Read the data back to the host. On the web this is the only way (never blocks).
    pub async fn to_host_async(&self) -> Result<HostArray> {
        match &self.inner.storage {
            Storage::Host(h) => Ok(h.clone()),
            Storage::Device { device, buffer } => {
                let a = &self.inner.aval;
                device.check_encoded(buffer).await?;
                let data = device.read_array(buffer, a.dtype, a.size()).await?;
                HostArray::new(a.shape.clone(), data)
            }
            Storage::Sharded { layout, shards, .. } => {
                // Another process holds the rest of a value spanning processes.
                #[cfg(feature = "mpi")]
                self.check_addressable("to_host")?;
                // The assembled value must fit in host memory (a typed error, not an abort).
                let a = &self.inner.aval;
                crate::host::check_host_alloc(a.size_bytes(), || format!("assembling {a}"))?;
                // A replicated value is read from its first device only.
                let shards: Vec<Array> = match layout {
                    ShardLayout::Replicated => shards[..1].to_vec(),
                    ShardLayout::Named(s) => s
                        .local_blocks(a.rank())
                        .ok_or_else(|| Error::NotFullyAddressable {
                            op: "to_host",
                            shape: a.shape.clone(),
                            processes: s.mesh().size() / shards.len().max(1),
                            here: s.mesh().offset() / shards.len().max(1),
                            first: s.mesh().offset(),
                            last: s.mesh().offset() + shards.len(),
                        })?
                        .into_iter()
                        .map(|i| shards[i].clone())
                        .collect(),
                    _ => shards.to_vec(),
                };
                let parts = read_all(&shards).await?;
                Ok(assemble(layout, parts))
            }
        }
    }
    /// Read the data back as a `Vec<T>`; `T` must match the dtype.
    ///
    /// On wasm use [`Array::to_host_async`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DTypeMismatch {
                op: "to_vec",
                lhs: self.dtype(),
                rhs: T::DTYPE,
                shapes: vec![self.shape().to_vec()],
            });
        }
        self.to_host()?.to_vec()
    }
    /// Read the data into `out`, whose length must be the array's size and whose element type its
    /// dtype. For an array on one device this is one copy, from the mapped staging memory straight
    /// into `out`, with no allocation: reuse `out` from read to read and a readback costs a warm
    /// memcpy, where [`Array::to_vec`] also pays for faulting in a fresh vector's pages. Sharded
    /// arrays are assembled first (one more copy).
    ///
    /// ```
    /// use brigade::{Array, Tensor, jit};
    /// let f = jit(|a: &[Tensor]| vec![&a[0] * 2.0]);
    /// let mut out = vec![0.0f32; 3];
    /// for k in 0..2 {
    ///     let x = Array::from_vec(vec![1.0f32 + k as f32, -2.0, 0.5], &[3])?;
    ///     f.call(&[x])?[0].read_into(&mut out)?; // the same memory every time
    ///     assert_eq!(out, vec![2.0 + 2.0 * k as f32, -4.0, 1.0]);
    /// }
    /// # Ok::<(), brigade::Error>(())
    /// ```
    ///
    /// Errors: [`Error::DTypeMismatch`] (element type and dtype differ), [`Error::DataLength`]
    /// (`out` has another length), and those of [`Array::to_host`]. On wasm use
    /// [`Array::read_into_async`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_into<T: Element>(&self, out: &mut [T]) -> Result<()> {
        pollster::block_on(self.read_into_async(out))
    }
    /// [`Array::read_into`], awaiting the read (never blocks; the way on the web).
    pub async fn read_into_async<T: Element>(&self, out: &mut [T]) -> Result<()> {
        let a = &self.inner.aval;
        if T::DTYPE != a.dtype {
            return Err(Error::DTypeMismatch {
                op: "read_into",
                lhs: a.dtype,
                rhs: T::DTYPE,
                shapes: vec![a.shape.clone()],
            });
        }
        if out.len() != a.size() {
            return Err(Error::DataLength {
                shape: a.shape.clone(),
                expected: a.size(),
                got: out.len(),
            });
        }
        let host = match &self.inner.storage {
            Storage::Device { device, buffer } => {
                device.check_encoded(buffer).await?;
                let read = [(device.clone(), buffer.clone(), a.dtype, a.size())];
                // Piece by piece (an array in parts has one per part): no gathered copy.
                return crate::device::read_mapped_pieces(&read, |pieces| {
                    let total: usize = pieces[0].iter().map(|p| p.len()).sum();
                    let per = total / out.len().max(1);
                    let mut at = 0;
                    for p in &pieces[0] {
                        let n = p.len() / per.max(1);
                        T::read_device_bytes(&mut out[at..at + n], p);
                        at += n;
                    }
                })
                .await;
            }
            Storage::Host(h) => std::borrow::Cow::Borrowed(h),
            Storage::Sharded { .. } => std::borrow::Cow::Owned(self.to_host_async().await?),
        };
        let src = T::unwrap(&host.data).ok_or_else(|| Error::DTypeMismatch {
            op: "read_into",
            lhs: host.dtype(),
            rhs: T::DTYPE,
            shapes: vec![host.shape.clone()],
        })?;
        out.copy_from_slice(src);
        Ok(())
    }
    /// Run `f` on the array's data where it lies, with no copy where the device allows it, and
    /// return what `f` returns. On a device that [maps reads](Device::maps_reads) (a CPU or
    /// integrated adapter with mappable storage buffers: lavapipe, Apple) `f` reads the array's
    /// own buffer, mapped: no copy at all. Elsewhere it reads the mapped staging buffer of one
    /// device copy, never a host copy. Bool arrays (4 bytes per element on the device) and
    /// sharded arrays are converted or assembled first (one host copy).
    ///
    /// The buffer stays mapped while `f` runs, so keep `f` short and do not run brigade work on
    /// this array inside it: such work (a kernel reading the array, another read of it) is
    /// refused with [`Error::Transfer`] rather than left waiting for `f`. Copy out what you need
    /// to keep, or use [`Array::read_into`].
    ///
    /// ```
    /// use brigade::{Array, Tensor, jit};
    /// let f = jit(|a: &[Tensor]| vec![&a[0] * 2.0]);
    /// let y = &f.call(&[Array::from_vec(vec![1.0f32, -2.0, 0.5], &[3])?])?[0];
    /// let (sum, last) = y.read_with(|v: &[f32]| (v.iter().sum::<f32>(), v[2]))?;
    /// assert_eq!((sum, last), (-1.0, 1.0));
    /// # Ok::<(), brigade::Error>(())
    /// ```
    ///
    /// Errors: [`Error::DTypeMismatch`] (element type and dtype differ) and those of
    /// [`Array::to_host`]. On wasm use [`Array::read_with_async`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_with<T: Element, R>(&self, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        pollster::block_on(self.read_with_async(f))
    }
    /// [`Array::read_with`], awaiting the read (never blocks; the way on the web).
    pub async fn read_with_async<T: Element, R>(&self, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        let a = &self.inner.aval;
        let mismatch = |dtype: DType| Error::DTypeMismatch {
            op: "read_with",
            lhs: dtype,
            rhs: T::DTYPE,
            shapes: vec![a.shape.clone()],
        };
        if T::DTYPE != a.dtype {
            return Err(mismatch(a.dtype));
        }
        let host = match &self.inner.storage {
            Storage::Device { device, buffer } => {
                device.check_encoded(buffer).await?;
                let read = [(device.clone(), buffer.clone(), a.dtype, a.size())];
                return crate::device::read_mapped(&read, |bytes| {
                    match T::view_device_bytes(bytes[0]) {
                        Some(v) => Ok(f(v)),
                        // Not viewable in place (bool, or unaligned): convert into a copy.
                        None => {
                            let data = crate::host::HostData::from_bytes(a.dtype, bytes[0]);
                            T::unwrap(&data)
                                .map(f)
                                .ok_or_else(|| mismatch(data.dtype()))
                        }
                    }
                })
                .await?;
            }
            Storage::Host(h) => std::borrow::Cow::Borrowed(h),
            Storage::Sharded { .. } => std::borrow::Cow::Owned(self.to_host_async().await?),
        };
        T::unwrap(&host.data)
            .map(f)
            .ok_or_else(|| mismatch(host.dtype()))
    }
    /// The single element of a size-1 array.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn item(&self) -> Result<Scalar> {
        let h = self.to_host()?;
        if h.len() != 1 {
            return Err(Error::BadShapeArg {
                op: "item",
                shape: h.shape.clone(),
                detail: "needs exactly one element".into(),
            });
        }
        Ok(h.data.get(0))
    }
}

impl From<f32> for Array {
    fn from(v: f32) -> Array {
        Array::scalar(v)
    }
}

/// A rank-0 f64 array (host-only dtype, see [`DType::F64`]).
impl From<f64> for Array {
    fn from(v: f64) -> Array {
        Array::scalar(v)
    }
}

/// Host data of several arrays (used by the CPU device path).
pub(crate) fn host_data(a: &Array) -> Result<HostArray> {
    match &a.inner.storage {
        Storage::Host(h) => Ok(h.clone()),
        Storage::Device { .. } | Storage::Sharded { .. } => {
            #[cfg(not(target_arch = "wasm32"))]
            {
                a.to_host()
            }
            #[cfg(target_arch = "wasm32")]
            {
                Err(Error::Unsupported {
                    op: "read",
                    detail: "synchronously on the web: use to_host_async".into(),
                })
            }
        }
    }
}

/// Read several arrays to the host: every device read is issued before any wait.
pub(crate) async fn read_all(arrays: &[Array]) -> Result<Vec<HostArray>> {
    for a in arrays {
        a.check_computed().await?;
    }
    let reads: Vec<(Device, Arc<DeviceBuffer>, crate::DType, usize)> = arrays
        .iter()
        .filter_map(|a| match &a.inner.storage {
            Storage::Device { device, buffer } => {
                Some((device.clone(), buffer.clone(), a.dtype(), a.size()))
            }
            _ => None,
        })
        .collect();
    let mut fetched = crate::device::download_arrays(&reads).await?.into_iter();
    let mut out = Vec::with_capacity(arrays.len());
    for a in arrays {
        out.push(match &a.inner.storage {
            Storage::Host(h) => h.clone(),
            Storage::Device { .. } => {
                let data = fetched.next().ok_or_else(|| Error::Transfer {
                    device: "?".into(),
                    detail: "a read returned no data".into(),
                })?;
                HostArray::new(a.shape().to_vec(), data)?
            }
            Storage::Sharded { .. } => Box::pin(a.to_host_async()).await?,
        });
    }
    Ok(out)
}

/// The global value from the shards' host data (for a [`ShardLayout::Named`] layout: the blocks of
/// [`NamedSharding::distinct_blocks`], in that order).
pub(crate) fn assemble(layout: &ShardLayout, mut parts: Vec<HostArray>) -> HostArray {
    use crate::ops::collective::concat_axis;
    match layout {
        ShardLayout::Replicated => parts.swap_remove(0),
        ShardLayout::Blocks { axis } => concat_axis(&parts.iter().collect::<Vec<_>>(), *axis),
        ShardLayout::Stacked { axis } => {
            for p in &mut parts {
                p.shape.insert(*axis, 1);
            }
            concat_axis(&parts.iter().collect::<Vec<_>>(), *axis)
        }
        ShardLayout::Named(s) => s.assemble(parts),
    }
}
