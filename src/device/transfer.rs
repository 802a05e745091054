//! Host ↔ device transfers.
//!
//! Uploads go through `queue.write_buffer`. Downloads copy into `MAP_READ` staging buffers, submit,
//! `map_async` every staging buffer, and only then wait: natively by polling the device (blocking
//! inside the returned future), in the browser by awaiting the map callback through a oneshot
//! channel (never blocking). The copy and submit happen when the download function is *called*, not
//! when its future is first polled, so calling `download` on several devices and then awaiting the
//! futures overlaps the devices' work; [`download_all`] does exactly that.

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

/// One requested read inside a pending batch.
struct Part {
    dtype: DType,
    len: usize,
    /// Index into `PendingRead::staging`, `None` for an empty read.
    staging: Option<usize>,
    offset: u64,
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
        let staged = if n >= STAGED_WRITE_MIN {
            self.write_staged(gpu, buf, bytes)?
        } else {
            false
        };
        if !staged {
            let ((), err) = gpu.capture(|| gpu.queue.write_buffer(&buf.buffer, 0, bytes));
            if let Some(e) = err {
                return Err(self.wgpu_error(e, || format!("writing {} bytes", bytes.len())));
            }
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
                enc.copy_buffer_to_buffer(&staging, 0, &buf.buffer, 0, n);
                gpu.queue.submit([enc.finish()]);
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

    /// Encode copies of `reads` into staging buffers, submit once, request the maps.
    pub(crate) fn issue_reads(
        &self,
        reads: &[(&DeviceBuffer, DType, usize)],
    ) -> Result<PendingRead> {
        let gpu = self.live_gpu("download")?;
        let max_staging = self.limits().max_buffer_size;
        let mut parts = Vec::with_capacity(reads.len());
        // (staging size, [(part index, source, bytes)])
        let mut groups: Vec<u64> = Vec::new();
        let mut copies: Vec<(&DeviceBuffer, usize, u64, u64)> = Vec::new(); // (src, staging, offset, bytes)
        for (buf, dtype, len) in reads.iter().copied() {
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
                    staging: None,
                    offset: 0,
                });
                continue;
            }
            let fits = groups
                .last()
                .is_some_and(|&used| used + bytes <= max_staging);
            if !fits {
                groups.push(0);
            }
            let g = groups.len() - 1;
            let offset = groups[g];
            groups[g] += bytes;
            copies.push((buf, g, offset, bytes));
            parts.push(Part {
                dtype,
                len,
                staging: Some(g),
                offset,
            });
        }
        if groups.is_empty() {
            return Ok(PendingRead {
                device: self.clone(),
                staging: Vec::new(),
                parts,
            });
        }
        let total: u64 = groups.iter().sum();
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
            for &(src, g, offset, bytes) in &copies {
                enc.copy_buffer_to_buffer(&src.buffer, 0, &buffers[g], offset, bytes);
            }
            gpu.queue.submit([enc.finish()]);
            buffers
                .into_iter()
                .zip(&groups)
                .map(|(b, &used)| {
                    let (tx, rx) = oneshot::channel();
                    b.slice(..used).map_async(wgpu::MapMode::Read, move |r| {
                        let _ = tx.send(r);
                    });
                    (b, used, Some(rx))
                })
                .collect::<Vec<_>>()
        });
        if let Some(e) = err {
            return Err(self.wgpu_error(e, || format!("downloading {}", human_bytes(total))));
        }
        bump(|c| {
            c.submits += 1;
            c.bytes_downloaded += total;
        });
        Ok(PendingRead {
            device: self.clone(),
            staging,
            parts,
        })
    }
}

impl PendingRead {
    /// Wait until every staging buffer of this batch is mapped.
    async fn mapped(&mut self) -> Result<()> {
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

    /// The mapped bytes of each staging buffer (call after [`PendingRead::mapped`]).
    fn views(&self) -> Result<Vec<wgpu::BufferView>> {
        self.staging
            .iter()
            .map(|(b, used, _)| {
                b.slice(..*used).get_mapped_range().map_err(|e| {
                    self.device.lost_or(|| Error::Transfer {
                        device: self.device.name().to_string(),
                        detail: format!("reading a mapped staging buffer: {e:?}"),
                    })
                })
            })
            .collect()
    }

    /// Each part's bytes inside `views`.
    fn part_bytes<'v>(&self, views: &'v [wgpu::BufferView]) -> Vec<&'v [u8]> {
        self.parts
            .iter()
            .map(|p| match p.staging {
                None => &[][..],
                Some(g) => {
                    let start = p.offset as usize;
                    &views[g][start..start + p.len * p.dtype.size_bytes()]
                }
            })
            .collect()
    }

    /// Unmap the staging buffers and keep a few for the next read.
    fn recycle(self) {
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
                .map(|(b, p)| HostData::from_bytes(p.dtype, b))
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
    let mut groups: Vec<(Device, Vec<usize>)> = Vec::new();
    for (i, (dev, _, _, _)) in reads.iter().enumerate() {
        match groups.iter_mut().find(|(d, _)| d == dev) {
            Some((_, idx)) => idx.push(i),
            None => groups.push((dev.clone(), vec![i])),
        }
    }
    let mut pending = Vec::with_capacity(groups.len());
    for (dev, idx) in groups {
        let batch: Vec<(&DeviceBuffer, DType, usize)> = idx
            .iter()
            .map(|&i| (&*reads[i].1, reads[i].2, reads[i].3))
            .collect();
        pending.push((dev.issue_reads(&batch)?, idx));
    }
    for (p, _) in &mut pending {
        p.mapped().await?;
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
        let mut slices: Vec<&[u8]> = vec![&[]; reads.len()];
        for ((p, idx), v) in pending.iter().zip(&views) {
            for (b, &i) in p.part_bytes(v).into_iter().zip(idx) {
                slices[i] = b;
            }
        }
        f(&slices)
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
            let batch: Vec<(&DeviceBuffer, DType, usize)> = idx
                .iter()
                .map(|&i| (&*reads[i].1, reads[i].2, reads[i].3))
                .collect();
            dev.issue_reads(&batch).map(|p| (p, idx))
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
