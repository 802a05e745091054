//! Host ↔ device transfers.
//!
//! Uploads go through `queue.write_buffer`. Downloads copy into `MAP_READ` staging buffers, submit,
//! `map_async` every staging buffer, and only then wait: natively by polling the device (blocking
//! inside the returned future), in the browser by awaiting the map callback through a oneshot
//! channel (never blocking). The copy and submit happen when the download function is *called*, not
//! when its future is first polled, so calling `download` on several devices and then awaiting the
//! futures overlaps the devices' work; [`download_all`] does exactly that.
//!
//! # Mapped reads
//! On unified-memory adapters (device type cpu or integrated) that have
//! `MAPPABLE_PRIMARY_BUFFERS` (Vulkan, Metal, DX12; never GL or the browser), storage buffers are
//! created `MAP_READ` too and reads of an [`crate::Array`] map the array's own buffer: no staging
//! buffer, no copy on the device, one copy out of mapped memory. wgpu makes the map wait for the
//! submitted work that writes the buffer (and flushes pending `write_buffer`s to it first).
//!
//! A buffer whose map is pending or active must not be used by a submission (wgpu rejects the
//! whole submit), and arrays are shared between threads, so each such device has a [`MapGate`]:
//! a read marks its buffers mapped (waiting while another read has them, or while a submit is
//! under way), and every submit, `write_buffer` and copy checks, under the same lock, that none
//! of its buffers is marked, waiting until the read has unmapped them. The marks are the wgpu
//! buffers themselves, so a kernel binding a view of a mapped buffer (one segment of an array
//! larger than a binding) or one part of an array stored in parts waits too. A read holds its
//! marks only from the map request to the unmap, inside one await (the map is requested when the
//! read is awaited, not when it is issued), so the thread that reads never submits while it
//! holds them.
//! Buffers an app may use in its own submissions are never mapped (they are read through a
//! staging copy): exported ones ([`crate::Array::wgpu_buffer`]), imported ones
//! ([`crate::Array::from_wgpu_buffer`]) and any recorded into an app's encoder (`Jit::encode`),
//! so a submit the app makes cannot meet a mapping brigade holds.
//! Arrays are immutable, so reading at await time sees what the array holds; raw buffer reads
//! ([`Device::download`], [`download_all`]) keep the staging copy made when they are called.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use futures::channel::oneshot;

use super::gpu::Device;
use super::human_bytes;
use super::pool::{DeviceBuffer, bucket_size};
use crate::counters::bump;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::host::HostData;

/// Where the bytes of one read come from.
#[derive(Clone)]
enum Source {
    /// An empty read.
    Empty,
    /// `PendingRead::staging[group]`, from `offset`.
    Staging { group: usize, offset: u64 },
    /// `PendingRead::direct.buffers[index]`, mapped itself, from its start.
    Direct { index: usize },
    /// A buffer stored in parts: `(group, offset, bytes)` of each part's bytes, in order.
    Pieces(Vec<(usize, u64, u64)>),
    /// A buffer stored in parts, each part mapped itself: `(index in
    /// PendingRead::direct.buffers, bytes)` of each part, in order.
    DirectPieces(Vec<(usize, u64)>),
}

/// One requested read inside a pending batch.
struct Part {
    dtype: DType,
    len: usize,
    source: Source,
}

/// What a [`MapGate`] tracks: the wgpu buffers themselves (a handle compares equal to its
/// clones), so that a view binding a range of a mapped buffer, or one part of an array stored in
/// parts, is seen to use it.
pub(crate) type GateKey = wgpu::Buffer;

/// Does `buf` use the mapped buffer `key` (as itself, a view of it, or one of its parts)?
pub(crate) fn gate_uses(buf: &DeviceBuffer, key: &GateKey) -> bool {
    buf.wgpu_buffers().any(|b| b == key)
}

/// Keeps submissions off storage buffers that a mapped read has mapped (see the module docs).
#[derive(Default)]
pub(crate) struct MapGate {
    /// The buffers mapped now (or about to be), one entry per holder.
    mapped: std::sync::Mutex<Vec<GateKey>>,
    unmapped: std::sync::Condvar,
}

impl MapGate {
    fn wait<'a>(
        &self,
        mut g: std::sync::MutexGuard<'a, Vec<GateKey>>,
    ) -> std::sync::MutexGuard<'a, Vec<GateKey>> {
        g = self.unmapped.wait(g).unwrap_or_else(|e| e.into_inner());
        g
    }

    /// Run `f` (a submit, a `write_buffer`) once no buffer for which `uses` is true is mapped,
    /// holding the gate during it so that no map request comes in between. With nothing mapped
    /// (the usual case) this costs one uncontended lock and `uses` is never called. Refused
    /// (instead of waiting forever) when this thread is inside a read closure that holds one
    /// of those buffers mapped.
    pub(crate) fn unmapped<T>(
        &self,
        uses: impl Fn(&GateKey) -> bool,
        f: impl FnOnce() -> T,
    ) -> std::result::Result<T, MappedHere> {
        let mut g = super::gpu::lock(&self.mapped);
        if g.iter().any(&uses) && held_here(&uses) {
            return Err(MappedHere);
        }
        while g.iter().any(&uses) {
            g = self.wait(g);
        }
        let out = f();
        drop(g);
        Ok(out)
    }

    /// Mark `keys` mapped, waiting while another read holds any of them. All at once, so two
    /// reads of overlapping buffers never hold one each while waiting for the other. Refused
    /// when this thread's read closure holds one of them already.
    fn hold(&self, keys: &[GateKey]) -> std::result::Result<(), MappedHere> {
        let mut g = super::gpu::lock(&self.mapped);
        if held_here(|k| keys.contains(k)) {
            return Err(MappedHere);
        }
        while g.iter().any(|k| keys.contains(k)) {
            g = self.wait(g);
        }
        g.extend_from_slice(keys);
        Ok(())
    }

    /// Undo [`MapGate::hold`] (after the buffers were unmapped) and wake the waiters.
    fn release(&self, keys: &[GateKey]) {
        let mut g = super::gpu::lock(&self.mapped);
        for k in keys {
            if let Some(i) = g.iter().position(|x| x == k) {
                g.swap_remove(i);
            }
        }
        drop(g);
        self.unmapped.notify_all();
    }
}

/// Work that would wait for a mapping the waiting thread itself holds (inside the closure of
/// [`crate::Array::read_with`]): refused with [`MappedHere::error`] instead of a hang.
#[derive(Debug)]
pub(crate) struct MappedHere;

impl MappedHere {
    /// The typed error for `what` on `device`.
    pub(crate) fn error(self, device: &Device, what: &str) -> Error {
        Error::Transfer {
            device: device.name().to_string(),
            detail: format!(
                "{what} needs a buffer that this thread holds mapped inside `Array::read_with`; \
                 finish the closure first (copy what it needs out with `read_into`, or run the \
                 work after `read_with` returns)"
            ),
        }
    }
}

thread_local! {
    /// The buffers mapped in place for the read closure this thread is running now (a
    /// closure runs synchronously, so no other task can be on this thread meanwhile).
    static CLOSURE_HOLDS: std::cell::RefCell<Vec<GateKey>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// True when the running read closure of this thread holds a buffer for which `uses` is true.
fn held_here(uses: impl Fn(&GateKey) -> bool) -> bool {
    // While the thread ends (its thread-locals being destroyed) no read closure runs on it.
    CLOSURE_HOLDS
        .try_with(|h| h.borrow().iter().any(uses))
        .unwrap_or(false)
}

/// Marks `keys` as held by this thread's read closure until dropped (also on a panic in it).
struct ClosureHolds(usize);

impl ClosureHolds {
    fn enter(keys: &[GateKey]) -> ClosureHolds {
        CLOSURE_HOLDS.with(|h| h.borrow_mut().extend_from_slice(keys));
        ClosureHolds(keys.len())
    }
}

impl Drop for ClosureHolds {
    fn drop(&mut self) {
        // Gone already while the thread ends: nothing left to release.
        let _ = CLOSURE_HOLDS.try_with(|h| {
            let mut h = h.borrow_mut();
            let keep = h.len().saturating_sub(self.0);
            h.truncate(keep);
        });
    }
}

/// The storage buffers a pending read maps itself, with the bytes mapped of each. Mapped and
/// marked in the device's [`MapGate`] by [`PendingRead::mapped`]; dropping this unmaps them and
/// lifts the marks, also when the read failed or its future was dropped half way.
#[derive(Default)]
struct DirectMaps {
    device: Option<Device>,
    buffers: Vec<(Arc<DeviceBuffer>, u64)>,
    /// True between the gate's hold and release.
    held: bool,
}

impl DirectMaps {
    fn keys(&self) -> Vec<GateKey> {
        // A buffer mapped in place is one wgpu buffer (an array in parts maps each part).
        self.buffers
            .iter()
            .map(|(b, _)| wgpu::Buffer::clone(&b.buffer))
            .collect()
    }
}

impl Drop for DirectMaps {
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        let Some(gpu) = self.device.as_ref().and_then(|d| d.inner.gpu.as_ref()) else {
            return;
        };
        // Unmapping a buffer whose map is still pending cancels it (its callback sees an error).
        for (b, _) in &self.buffers {
            b.buffer.unmap();
        }
        if let Some(gate) = &gpu.map_gate {
            gate.release(&self.keys());
        }
        self.held = false;
    }
}

/// The re-map of an upload staging buffer: pending, or complete (the buffer is mapped and idle).
pub(crate) enum WriteMap {
    Pending(MapCallback),
    Ready,
}

pub(crate) type MapCallback = oneshot::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>;

/// Copies submitted and maps requested on one device; `finish` waits and reads.
pub(crate) struct PendingRead {
    device: Device,
    /// Staging buffers with the bytes used in each and their map callbacks.
    staging: Vec<(wgpu::Buffer, u64, Option<MapCallback>)>,
    /// Storage buffers read by mapping them (mapped reads; empty elsewhere).
    direct: DirectMaps,
    parts: Vec<Part>,
}

/// Raw bytes of host data, borrowing when the layout already matches the device's.
fn host_bytes(data: &HostData) -> std::borrow::Cow<'_, [u8]> {
    use std::borrow::Cow;
    match data {
        HostData::F32(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
        HostData::I32(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
        HostData::U32(v) => Cow::Borrowed(bytemuck::cast_slice(v)),
        HostData::Bool(_) | HostData::F64(_) => Cow::Owned(data.to_bytes()),
    }
}

impl Device {
    /// Copy host data into a new buffer of `4 * data.len()` bytes (at least 4). Bool is stored as one
    /// `u32` (0 or 1) per element. Counts [`crate::Counters::bytes_uploaded`].
    ///
    /// Errors as [`Device::alloc`] (an array over the binding limit is [`Error::OverLimit`]);
    /// f64 data is [`Error::BadDType`] (WGSL has no f64).
    pub fn upload(&self, data: &HostData) -> Result<Arc<DeviceBuffer>> {
        if data.dtype() == DType::F64 && !self.is_cpu() {
            return Err(crate::error::f64_on_gpu(
                "uploading to a GPU device",
                &[data.len()],
            ));
        }
        let bytes = (data.len() as u64).saturating_mul(data.dtype().size_bytes() as u64);
        self.check_fits(bytes, || {
            format!(
                "uploading {} {} elements ({})",
                data.len(),
                data.dtype(),
                human_bytes(bytes)
            )
        })?;
        let buf = self.alloc(bytes)?;
        self.write(&buf, data)?;
        Ok(buf)
    }

    /// Copy raw device bytes (32-bit words) into a new buffer. Counts
    /// [`crate::Counters::bytes_uploaded`].
    pub(crate) fn upload_bytes(&self, bytes: &[u8]) -> Result<Arc<DeviceBuffer>> {
        let gpu = self.gpu("upload")?;
        let n = bytes.len() as u64;
        self.check_fits(n, || format!("uploading {}", human_bytes(n)))?;
        let buf = self.alloc(n)?;
        if !bytes.is_empty() {
            self.write_bytes(gpu, &buf, bytes)?;
        }
        Ok(buf)
    }

    /// Overwrite the start of `buf` with `data` (`queue.write_buffer`; ordered before work submitted
    /// later). Counts [`crate::Counters::bytes_uploaded`].
    pub fn write(&self, buf: &DeviceBuffer, data: &HostData) -> Result<()> {
        let gpu = self.gpu("write")?;
        if data.dtype() == DType::F64 {
            return Err(crate::error::f64_on_gpu(
                "writing to a GPU device",
                &[data.len()],
            ));
        }
        self.check_owner(buf, "write")?;
        if data.is_empty() {
            return Ok(());
        }
        let bytes = host_bytes(data);
        if bytes.len() as u64 > buf.size {
            return Err(Error::Transfer {
                device: self.name().to_string(),
                detail: format!(
                    "writing {} {} elements ({} bytes) into a buffer of {} bytes",
                    data.len(),
                    data.dtype(),
                    bytes.len(),
                    buf.size
                ),
            });
        }
        self.write_bytes(gpu, buf, &bytes)
    }

    /// Write raw bytes at the start of `buf` (checked by the caller to fit). Large writes go through
    /// a reused `MAP_WRITE` staging buffer when one is ready (no allocation, so no page faults on
    /// unified memory, where `queue.write_buffer` stages into fresh memory every time); otherwise
    /// through `queue.write_buffer`. Both are ordered before work submitted later.
    fn write_bytes(&self, gpu: &super::gpu::Gpu, buf: &DeviceBuffer, bytes: &[u8]) -> Result<()> {
        // wgpu drops a write to a device it has invalidated without a word: ask it first.
        if let Some(reason) = gpu.lost_now(false) {
            return Err(self.lost_error(reason));
        }
        let n = bytes.len() as u64;
        if buf.is_parted() {
            // Part by part: each write stays within one wgpu buffer.
            let part = buf.part_bytes;
            for start in (0..n).step_by(part as usize) {
                let len = part.min(n - start);
                let piece = buf.view(start, len)?;
                self.write_bytes(gpu, &piece, &bytes[start as usize..(start + len) as usize])?;
            }
            return Ok(());
        }
        let staged = if n >= STAGED_WRITE_MIN {
            self.write_staged(gpu, buf, bytes)?
        } else {
            false
        };
        if !staged {
            let (res, err) = gpu.capture(|| {
                gpu.unmapped(
                    |k| gate_uses(buf, k),
                    || gpu.queue.write_buffer(&buf.buffer, buf.offset, bytes),
                )
            });
            if let Some(e) = err {
                return Err(self.wgpu_error(e, || format!("writing {} bytes", bytes.len())));
            }
            res.map_err(|m| m.error(self, "writing to an array"))?;
        }
        bump(|c| c.bytes_uploaded += n);
        Ok(())
    }

    /// The staged path of [`Device::write_bytes`]; false when no staging buffer was ready.
    fn write_staged(
        &self,
        gpu: &super::gpu::Gpu,
        buf: &DeviceBuffer,
        bytes: &[u8],
    ) -> Result<bool> {
        let n = bytes.len() as u64;
        let want = bucket_size(n, self.limits().max_buffer_size);
        // A cached buffer whose re-map has completed (never wait: a busy device would stall the
        // caller), else a new one mapped at creation while the cache has room.
        let _gl = gpu.gl_guard(); // buffers of a GL device are dropped inside its context
        let ready = {
            let mut cache = super::gpu::lock(&gpu.upload_staging);
            // Learn which re-maps completed; forget buffers whose map failed or was cancelled.
            cache.retain_mut(|(_, state)| {
                if let WriteMap::Pending(rx) = state {
                    match rx.try_recv() {
                        Ok(None) => {}
                        Ok(Some(Ok(()))) => *state = WriteMap::Ready,
                        Ok(Some(Err(_))) | Err(_) => return false,
                    }
                }
                true
            });
            let ready = |s: &WriteMap| matches!(s, WriteMap::Ready);
            match cache
                .iter()
                .position(|(b, st)| b.size() == want && ready(st))
            {
                Some(i) => Some(cache.swap_remove(i).0),
                None => {
                    // Make room by dropping an idle buffer of another size.
                    loop {
                        let held: u64 = cache.iter().map(|(b, _)| b.size()).sum();
                        if cache.len() < STAGING_KEEP && held + want <= STAGING_KEEP_BYTES {
                            break;
                        }
                        match cache.iter().position(|(_, st)| ready(st)) {
                            Some(i) => drop(cache.swap_remove(i)),
                            None => return Ok(false),
                        }
                    }
                    None
                }
            }
        };
        let mut held = false;
        let (res, err) = gpu.capture(|| {
            let staging = ready.unwrap_or_else(|| {
                gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("brigade upload staging"),
                    size: want,
                    usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: true,
                })
            });
            let written = match staging.slice(..n).get_mapped_range_mut() {
                Ok(mut view) => {
                    view.copy_from_slice(bytes);
                    true
                }
                Err(_) => false,
            };
            staging.unmap();
            if written {
                let mut enc = gpu
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("brigade upload"),
                    });
                enc.copy_buffer_to_buffer(&staging, 0, &buf.buffer, buf.offset, n);
                let cmd = enc.finish();
                held = gpu
                    .unmapped(|k| gate_uses(buf, k), || gpu.queue.submit([cmd]))
                    .is_err();
            }
            // Map again right away: it completes once the copy has run, ready for the next write.
            let (tx, rx) = oneshot::channel();
            staging.slice(..).map_async(wgpu::MapMode::Write, move |r| {
                let _ = tx.send(r);
            });
            super::gpu::lock(&gpu.upload_staging).push((staging, WriteMap::Pending(rx)));
            written
        });
        if let Some(e) = err {
            return Err(self.wgpu_error(e, || format!("writing {}", human_bytes(n))));
        }
        if held {
            return Err(MappedHere.error(self, "writing to an array"));
        }
        if res {
            bump(|c| c.submits += 1);
        }
        Ok(res)
    }

    fn check_owner(&self, buf: &DeviceBuffer, op: &str) -> Result<()> {
        if buf.owner.id != self.inner.id {
            return Err(Error::Transfer {
                device: self.name().to_string(),
                detail: format!(
                    "{op}: the buffer lives on device {}, not on this one",
                    buf.owner.label
                ),
            });
        }
        Ok(())
    }

    /// Read the first `len` elements of `buf` as `dtype`. Counts
    /// [`crate::Counters::bytes_downloaded`].
    ///
    /// The copy is submitted when this is called; the returned future waits (native: polls the
    /// device, blocking; browser: awaits the map callback) and converts.
    ///
    /// Errors: [`Error::Transfer`] (more elements than the buffer holds, buffer from another device,
    /// mapping failed), [`Error::DeviceLost`], [`Error::OutOfMemory`] (staging buffer).
    pub fn download(
        &self,
        buf: &DeviceBuffer,
        dtype: DType,
        len: usize,
    ) -> impl Future<Output = Result<HostData>> + use<> {
        let pending = self.issue_reads(&[(buf, dtype, len)]);
        async move {
            let mut out = pending?.finish().await?;
            Ok(out
                .pop()
                .unwrap_or_else(|| HostData::from_bytes(dtype, &[])))
        }
    }

    /// Read several buffers of this device with one submit: all copies are encoded into one command
    /// buffer, all staging buffers are mapped, then the future waits once. Results are in order.
    pub fn download_many(
        &self,
        reads: &[(&DeviceBuffer, DType, usize)],
    ) -> impl Future<Output = Result<Vec<HostData>>> + use<> {
        let pending = self.issue_reads(reads);
        async move { pending?.finish().await }
    }

    /// Blocking [`Device::download`] (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn download_blocking(
        &self,
        buf: &DeviceBuffer,
        dtype: DType,
        len: usize,
    ) -> Result<HostData> {
        pollster::block_on(self.download(buf, dtype, len))
    }

    /// True when reads of arrays on this device map the arrays' storage buffers in place (a
    /// unified-memory adapter with `MAPPABLE_PRIMARY_BUFFERS`, unless `BRIGADE_MAPPED_READS=off`):
    /// one copy out of device memory, no staging buffer. Storage buffers are then also
    /// `MAP_READ`. brigade keeps its own submits off a buffer while a read has it mapped; code that
    /// submits its own commands through [`Device::wgpu`] must not use an array's buffer while
    /// another thread reads that array (wgpu rejects a submit that uses a mapped buffer), unless
    /// it got the buffer from [`crate::Array::wgpu_buffer`] or `Jit::encode`: such buffers, and
    /// imported ones, are read through a staging copy, never mapped.
    pub fn maps_reads(&self) -> bool {
        self.inner
            .gpu
            .as_ref()
            .is_some_and(|g| g.map_gate.is_some())
    }

    /// Encode copies of `reads` into staging buffers, submit once, request the maps.
    pub(crate) fn issue_reads(
        &self,
        reads: &[(&DeviceBuffer, DType, usize)],
    ) -> Result<PendingRead> {
        self.issue(reads, None)
    }

    /// [`Device::issue_reads`] for the buffers of arrays (immutable, kept alive by the read): on a
    /// device that [maps reads](Device::maps_reads) nothing is submitted and the buffers
    /// themselves are mapped when the read is awaited.
    pub(crate) fn issue_array_reads(
        &self,
        reads: &[(Arc<DeviceBuffer>, DType, usize)],
    ) -> Result<PendingRead> {
        let refs: Vec<(&DeviceBuffer, DType, usize)> =
            reads.iter().map(|(b, d, l)| (&**b, *d, *l)).collect();
        if self.maps_reads() {
            let keep: Vec<Arc<DeviceBuffer>> = reads.iter().map(|r| r.0.clone()).collect();
            self.issue(&refs, Some(&keep))
        } else {
            self.issue(&refs, None)
        }
    }

    /// Read the first `len` elements of an array's buffer: [`Device::download`], mapping the
    /// buffer itself where the device [maps reads](Device::maps_reads).
    pub(crate) async fn read_array(
        &self,
        buf: &Arc<DeviceBuffer>,
        dtype: DType,
        len: usize,
    ) -> Result<HostData> {
        let mut out = self
            .issue_array_reads(&[(buf.clone(), dtype, len)])?
            .finish()
            .await?;
        Ok(out
            .pop()
            .unwrap_or_else(|| HostData::from_bytes(dtype, &[])))
    }

    /// Check reads and plan them: copies into staging buffers, or (with `direct`, the `Arc`s of
    /// the buffers of `reads` in order) maps of the buffers themselves. Copies are submitted now.
    fn issue(
        &self,
        reads: &[(&DeviceBuffer, DType, usize)],
        direct: Option<&[Arc<DeviceBuffer>]>,
    ) -> Result<PendingRead> {
        let gpu = self.live_gpu("download")?;
        let max_staging = self.limits().max_buffer_size;
        let mut parts = Vec::with_capacity(reads.len());
        let mut maps = DirectMaps {
            device: Some(self.clone()),
            buffers: Vec::new(),
            held: false,
        };
        // (staging size, [(part index, source, bytes)])
        let mut groups: Vec<u64> = Vec::new();
        // (src, staging, offset, bytes); a buffer stored in parts gives one copy per part.
        let mut copies: Vec<((wgpu::Buffer, u64), usize, u64, u64)> = Vec::new();
        let mut sources: Vec<&DeviceBuffer> = Vec::new();
        for (i, (buf, dtype, len)) in reads.iter().copied().enumerate() {
            self.check_owner(buf, "download")?;
            if dtype == DType::F64 {
                return Err(crate::error::f64_on_gpu(
                    "reading from a GPU device",
                    &[len],
                ));
            }
            let bytes = (len as u64)
                .checked_mul(dtype.size_bytes() as u64)
                .filter(|&b| b <= buf.size)
                .ok_or_else(|| Error::Transfer {
                    device: self.name().to_string(),
                    detail: format!(
                        "reading {len} {dtype} elements from a buffer of {} bytes ({} elements)",
                        buf.size,
                        buf.size / 4
                    ),
                })?;
            if bytes == 0 {
                parts.push(Part {
                    dtype,
                    len,
                    source: Source::Empty,
                });
                continue;
            }
            // Buffers an app can bind (exported, imported, recorded into its encoder) are
            // copied, never mapped: the app's own submits would race a mapping.
            // One map per buffer, however often it is read in this batch.
            let mut map = |b: &Arc<DeviceBuffer>, bytes: u64| match maps
                .buffers
                .iter()
                .position(|(m, _)| Arc::ptr_eq(m, b))
            {
                Some(k) => {
                    maps.buffers[k].1 = maps.buffers[k].1.max(bytes);
                    k
                }
                None => {
                    maps.buffers.push((b.clone(), bytes));
                    maps.buffers.len() - 1
                }
            };
            if let Some(keep) = direct.filter(|_| buf.mappable()) {
                let index = map(&keep[i], bytes);
                parts.push(Part {
                    dtype,
                    len,
                    source: Source::Direct { index },
                });
                continue;
            }
            // An array in parts: each part mapped itself.
            if let Some(pieces) = direct.and_then(|_| buf.mappable_parts(bytes)) {
                let source =
                    Source::DirectPieces(pieces.iter().map(|(p, n)| (map(p, *n), *n)).collect());
                parts.push(Part { dtype, len, source });
                continue;
            }
            sources.push(buf);
            let mut pieces = Vec::new();
            for (src, at, n) in buf.pieces(0, bytes) {
                let fits = groups.last().is_some_and(|&used| used + n <= max_staging);
                if !fits {
                    groups.push(0);
                }
                let g = groups.len() - 1;
                let offset = groups[g];
                groups[g] += n;
                copies.push(((src.clone(), at), g, offset, n));
                pieces.push((g, offset, n));
            }
            let source = match pieces.as_slice() {
                &[(group, offset, _)] => Source::Staging { group, offset },
                _ => Source::Pieces(pieces),
            };
            parts.push(Part { dtype, len, source });
        }
        let mapped_bytes: u64 = maps.buffers.iter().map(|(_, b)| b).sum();
        let total: u64 = groups.iter().sum::<u64>() + mapped_bytes;
        if groups.is_empty() {
            if mapped_bytes > 0 {
                crate::host::check_host_alloc(mapped_bytes as usize, || {
                    format!(
                        "reading {} back from device {}",
                        human_bytes(mapped_bytes),
                        self.name()
                    )
                })?;
                bump(|c| c.bytes_downloaded += mapped_bytes);
            }
            return Ok(PendingRead {
                device: self.clone(),
                staging: Vec::new(),
                direct: maps,
                parts,
            });
        }
        // The host copy of what is read must fit in host memory (a typed error, not an abort).
        crate::host::check_host_alloc(total as usize, || {
            format!(
                "reading {} back from device {}",
                human_bytes(total),
                self.name()
            )
        })?;
        let (staging, err) = gpu.capture(|| {
            let buffers: Vec<wgpu::Buffer> = groups
                .iter()
                .map(|&size| {
                    // Reuse an idle staging buffer of a fitting bucket: a fresh one costs an
                    // allocation and, on unified-memory adapters, a page fault per 4 KiB.
                    let want = bucket_size(size, max_staging);
                    let mut cache = super::gpu::lock(&gpu.staging);
                    match cache.iter().position(|b| b.size() == want) {
                        Some(i) => cache.swap_remove(i),
                        None => gpu.device.create_buffer(&wgpu::BufferDescriptor {
                            label: Some("brigade staging"),
                            size: want,
                            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                            mapped_at_creation: false,
                        }),
                    }
                })
                .collect();
            let mut enc = gpu
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("brigade download"),
                });
            for ((src, at), g, offset, bytes) in &copies {
                enc.copy_buffer_to_buffer(src, *at, &buffers[*g], *offset, *bytes);
            }
            let cmd = enc.finish();
            // A source another thread's mapped read has mapped cannot be copied until unmapped.
            gpu.unmapped(
                |k| sources.iter().any(|b| gate_uses(b, k)),
                || gpu.queue.submit([cmd]),
            )?;
            Ok(buffers
                .into_iter()
                .zip(&groups)
                .map(|(b, &used)| {
                    let (tx, rx) = oneshot::channel();
                    b.slice(..used).map_async(wgpu::MapMode::Read, move |r| {
                        let _ = tx.send(r);
                    });
                    (b, used, Some(rx))
                })
                .collect::<Vec<_>>())
        });
        if let Some(e) = err {
            return Err(self.wgpu_error(e, || format!("downloading {}", human_bytes(total))));
        }
        let staging = staging.map_err(|m: MappedHere| m.error(self, "reading an array"))?;
        bump(|c| {
            c.submits += 1;
            c.bytes_downloaded += total;
        });
        Ok(PendingRead {
            device: self.clone(),
            staging,
            direct: maps,
            parts,
        })
    }
}

impl super::gpu::Gpu {
    /// Run `f` (work that submits or writes buffers) under the device's [`MapGate`], once no
    /// buffer for which `uses` is true is mapped by a read; just `f` on devices without one.
    pub(crate) fn unmapped<T>(
        &self,
        uses: impl Fn(&GateKey) -> bool,
        f: impl FnOnce() -> T,
    ) -> std::result::Result<T, MappedHere> {
        match &self.map_gate {
            Some(gate) => gate.unmapped(uses, f),
            None => Ok(f()),
        }
    }
}

impl PendingRead {
    /// Wait until every staging buffer of this batch is mapped, and map the buffers read in
    /// place (marking them in the device's [`MapGate`] first).
    async fn mapped(&mut self) -> Result<()> {
        if !self.direct.buffers.is_empty() && !self.direct.held {
            let gpu = self.device.gpu("download")?;
            let Some(gate) = &gpu.map_gate else {
                return Err(Error::Transfer {
                    device: self.device.name().to_string(),
                    detail: "a mapped read on a device that does not map reads".into(),
                });
            };
            gate.hold(&self.direct.keys())
                .map_err(|m| m.error(&self.device, "reading an array"))?;
            self.direct.held = true;
            let (rxs, err) = gpu.capture(|| {
                self.direct
                    .buffers
                    .iter()
                    .map(|(b, used)| {
                        let (tx, rx) = oneshot::channel();
                        b.buffer
                            .slice(..*used)
                            .map_async(wgpu::MapMode::Read, move |r| {
                                let _ = tx.send(r);
                            });
                        rx
                    })
                    .collect::<Vec<_>>()
            });
            if let Some(e) = err {
                return Err(self
                    .device
                    .wgpu_error(e, || "mapping an array's buffer".into()));
            }
            for rx in rxs {
                let ok = self
                    .device
                    .wait_for(rx, "mapping an array's buffer")
                    .await?;
                if let Err(e) = ok {
                    return Err(self.device.lost_or(|| Error::Transfer {
                        device: self.device.name().to_string(),
                        detail: format!("map_async of an array's buffer failed: {e}"),
                    }));
                }
            }
        }
        for (_, _, rx) in &mut self.staging {
            let Some(rx) = rx.take() else { continue };
            let ok = self.device.wait_for(rx, "mapping a staging buffer").await?;
            if let Err(e) = ok {
                // A map fails at once on a device wgpu has invalidated; it reports the loss
                // itself only once the queue has drained.
                return Err(self.device.lost_or(|| Error::Transfer {
                    device: self.device.name().to_string(),
                    detail: format!("map_async of a staging buffer failed: {e}"),
                }));
            }
        }
        Ok(())
    }

    /// The mapped bytes of each staging buffer, then of each buffer read in place (call after
    /// [`PendingRead::mapped`]).
    fn views(&self) -> Result<Vec<wgpu::BufferView>> {
        let staging = self.staging.iter().map(|(b, used, _)| (b, *used));
        let direct = self
            .direct
            .buffers
            .iter()
            .map(|(b, used)| (&*b.buffer, *used));
        staging
            .chain(direct)
            .map(|(b, used)| {
                b.slice(..used).get_mapped_range().map_err(|e| {
                    self.device.lost_or(|| Error::Transfer {
                        device: self.device.name().to_string(),
                        detail: format!("reading a mapped buffer: {e:?}"),
                    })
                })
            })
            .collect()
    }

    /// Each part's bytes inside `views`, in pieces: one, or one per part of a buffer stored in
    /// parts (none for an empty read).
    fn part_pieces<'v>(&self, views: &'v [wgpu::BufferView]) -> Vec<Vec<&'v [u8]>> {
        let n = self.staging.len();
        self.parts
            .iter()
            .map(|p| {
                let bytes = p.len * p.dtype.size_bytes();
                match &p.source {
                    Source::Empty => Vec::new(),
                    Source::Staging { group, offset } => {
                        let start = *offset as usize;
                        vec![&views[*group][start..start + bytes]]
                    }
                    Source::Direct { index } => vec![&views[n + index][..bytes]],
                    Source::Pieces(pieces) => pieces
                        .iter()
                        .map(|&(g, at, len)| &views[g][at as usize..(at + len) as usize])
                        .collect(),
                    Source::DirectPieces(pieces) => pieces
                        .iter()
                        .map(|&(index, len)| &views[n + index][..len as usize])
                        .collect(),
                }
            })
            .collect()
    }

    /// Each part's bytes inside `views` (gathered into one host copy for a buffer stored in
    /// parts, whose pieces lie in different places).
    fn part_bytes<'v>(&self, views: &'v [wgpu::BufferView]) -> Vec<Cow<'v, [u8]>> {
        self.part_pieces(views)
            .into_iter()
            .map(|p| match p.as_slice() {
                [] => Cow::Borrowed(&[][..]),
                [one] => Cow::Borrowed(*one),
                _ => Cow::Owned(p.concat()),
            })
            .collect()
    }

    /// Unmap the buffers read in place (lifting their marks), unmap the staging buffers and keep
    /// a few for the next read. The views must be dropped first.
    fn recycle(mut self) {
        drop(std::mem::take(&mut self.direct));
        let Ok(gpu) = self.device.gpu("download") else {
            return;
        };
        let _gl = gpu.gl_guard();
        let mut cache = super::gpu::lock(&gpu.staging);
        for (buffer, _, _) in self.staging {
            buffer.unmap();
            let held: u64 = cache.iter().map(|b| b.size()).sum();
            if cache.len() < STAGING_KEEP && held + buffer.size() <= STAGING_KEEP_BYTES {
                cache.push(buffer);
            }
            // else dropped here, while the GL guard is held
        }
    }

    /// Wait for every map of this batch, then convert each part (one copy, from mapped memory).
    pub(crate) async fn finish(mut self) -> Result<Vec<HostData>> {
        self.mapped().await?;
        let out = {
            let _gl = self.device.gpu("download")?.gl_guard();
            let views = self.views()?;
            self.part_bytes(&views)
                .into_iter()
                .zip(&self.parts)
                .map(|(b, p)| HostData::from_bytes(p.dtype, &b))
                .collect()
        };
        self.recycle();
        Ok(out)
    }
}

/// Read buffers from several devices and hand `f` their bytes in place, in the order given: every
/// device's copies are submitted before any wait, every staging buffer is mapped, then `f` reads them
/// all at once (no intermediate host copy: a host-side reduction reads device data exactly once).
pub(crate) async fn read_mapped<R>(
    reads: &[(Device, Arc<DeviceBuffer>, DType, usize)],
    f: impl FnOnce(&[&[u8]]) -> R,
) -> Result<R> {
    read_mapped_pieces(reads, |pieces| {
        let bytes: Vec<Cow<'_, [u8]>> = pieces
            .iter()
            .map(|p| match p.as_slice() {
                [] => Cow::Borrowed(&[][..]),
                [one] => Cow::Borrowed(*one),
                _ => Cow::Owned(p.concat()),
            })
            .collect();
        let slices: Vec<&[u8]> = bytes.iter().map(|b| &**b).collect();
        f(&slices)
    })
    .await
}

/// [`read_mapped`] handing `f` each read's bytes in pieces (one per part of an array stored in
/// parts), so that a reader copying them out needs no gathered host copy first.
pub(crate) async fn read_mapped_pieces<R>(
    reads: &[(Device, Arc<DeviceBuffer>, DType, usize)],
    f: impl FnOnce(&[Vec<&[u8]>]) -> R,
) -> Result<R> {
    let mut groups: Vec<(Device, Vec<usize>)> = Vec::new();
    for (i, (dev, _, _, _)) in reads.iter().enumerate() {
        match groups.iter_mut().find(|(d, _)| d == dev) {
            Some((_, idx)) => idx.push(i),
            None => groups.push((dev.clone(), vec![i])),
        }
    }
    let mut pending = Vec::with_capacity(groups.len());
    for (dev, idx) in groups {
        let batch: Vec<(Arc<DeviceBuffer>, DType, usize)> = idx
            .iter()
            .map(|&i| (reads[i].1.clone(), reads[i].2, reads[i].3))
            .collect();
        pending.push((dev.issue_array_reads(&batch)?, idx));
    }
    // Every device's buffers stay mapped until `f` returns: map the devices in one global order
    // (by id) so that two such reads over the same devices never wait for each other.
    let mut order: Vec<usize> = (0..pending.len()).collect();
    order.sort_by_key(|&k| pending[k].0.device.inner.id);
    for k in order {
        pending[k].0.mapped().await?;
    }
    let out = {
        // Held across every device's views: GL buffers are read inside its context.
        let _gl: Vec<_> = pending
            .iter()
            .filter_map(|(p, _)| p.device.inner.gpu.as_ref().map(|g| g.gl_guard()))
            .collect();
        let views: Vec<Vec<wgpu::BufferView>> = pending
            .iter()
            .map(|(p, _)| p.views())
            .collect::<Result<_>>()?;
        let mut pieces: Vec<Vec<&[u8]>> = vec![Vec::new(); reads.len()];
        for ((p, idx), v) in pending.iter().zip(&views) {
            for (b, &i) in p.part_pieces(v).into_iter().zip(idx) {
                pieces[i] = b;
            }
        }
        // Work inside `f` that needs one of these buffers is refused, not left waiting.
        let keys: Vec<GateKey> = pending.iter().flat_map(|(p, _)| p.direct.keys()).collect();
        let _holds = ClosureHolds::enter(&keys);
        f(&pieces)
    };
    for (p, _) in pending {
        p.recycle();
    }
    Ok(out)
}

/// Writes of at least this many bytes go through a reused staging buffer.
const STAGED_WRITE_MIN: u64 = 1 << 20;

/// Idle staging buffers kept per device (for reads; as many again for writes), and the total size of
/// the read ones at most.
const STAGING_KEEP: usize = 4;
const STAGING_KEEP_BYTES: u64 = 512 << 20;

/// Read buffers from several devices: every device's copies are submitted (one submit per device,
/// see [`Device::download_many`]) before the future waits on any, so the devices work at once.
/// Results are in the order given. Each buffer must live on the device it is paired with.
///
/// Issued when called; the returned future only waits and converts.
pub fn download_all(
    reads: &[(Device, Arc<DeviceBuffer>, DType, usize)],
) -> impl Future<Output = Result<Vec<HostData>>> + use<> {
    download_grouped(reads, false)
}

/// [`download_all`] for the buffers of arrays: mapped in place where the device
/// [maps reads](Device::maps_reads) (each device's buffers mapped, copied out and unmapped in
/// turn, so no two devices' marks are held at once).
pub(crate) fn download_arrays(
    reads: &[(Device, Arc<DeviceBuffer>, DType, usize)],
) -> impl Future<Output = Result<Vec<HostData>>> + use<> {
    download_grouped(reads, true)
}

fn download_grouped(
    reads: &[(Device, Arc<DeviceBuffer>, DType, usize)],
    arrays: bool,
) -> impl Future<Output = Result<Vec<HostData>>> + use<> {
    // Group by device, keeping first-appearance order of devices and the input position of each read.
    let mut groups: Vec<(Device, Vec<usize>)> = Vec::new();
    for (i, (dev, _, _, _)) in reads.iter().enumerate() {
        match groups.iter_mut().find(|(d, _)| d == dev) {
            Some((_, idx)) => idx.push(i),
            None => groups.push((dev.clone(), vec![i])),
        }
    }
    let issued: Result<Vec<(PendingRead, Vec<usize>)>> = groups
        .into_iter()
        .map(|(dev, idx)| {
            let pending = if arrays {
                let batch: Vec<(Arc<DeviceBuffer>, DType, usize)> = idx
                    .iter()
                    .map(|&i| (reads[i].1.clone(), reads[i].2, reads[i].3))
                    .collect();
                dev.issue_array_reads(&batch)
            } else {
                let batch: Vec<(&DeviceBuffer, DType, usize)> = idx
                    .iter()
                    .map(|&i| (&*reads[i].1, reads[i].2, reads[i].3))
                    .collect();
                dev.issue_reads(&batch)
            };
            pending.map(|p| (p, idx))
        })
        .collect();
    let n = reads.len();
    async move {
        let mut out: Vec<Option<HostData>> = vec![None; n];
        for (pending, idx) in issued? {
            for (data, i) in pending.finish().await?.into_iter().zip(idx) {
                out[i] = Some(data);
            }
        }
        Ok(out
            .into_iter()
            .map(|d| d.unwrap_or_else(|| HostData::from_bytes(DType::F32, &[])))
            .collect())
    }
}
