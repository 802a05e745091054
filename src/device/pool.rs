//! Device buffers and the per-device buffer pool.
//!
//! Buffers are handed out in size buckets so that a freed buffer is likely to fit the next request
//! of a similar size (see [`bucket_size`]). Dropping the last `Arc<DeviceBuffer>` returns its wgpu
//! buffer to the pool of its device instead of freeing it, until the pool holds its limit
//! ([`super::Device::set_pool_limit`], default [`DEFAULT_POOL_LIMIT`]); beyond that, buffers are freed.
//!
//! A device may also have a memory budget ([`super::Device::set_memory_limit`],
//! `Runtime::builder().memory_limit(..)`, `BRIGADE_MEMORY_LIMIT`): the bytes of its storage buffers,
//! in use or held free by the pool, never exceed it. An allocation that would go over first frees
//! held buffers, then fails with [`crate::Error::OutOfMemory`]. Software adapters such as lavapipe
//! never fail an allocation themselves (device memory is host memory), so the budget is the way to
//! bound what a device takes and to see out-of-memory as a typed error there.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::gpu::DeviceInner;

/// Bytes a pool holds at most by default (1 GiB). The pool never holds more than the peak of what
/// was in use at once, and an allocation that runs out of memory empties the pool and retries.
pub const DEFAULT_POOL_LIMIT: u64 = 1 << 30;

/// Requests up to this size are rounded up to a multiple of 256 bytes.
const SMALL: u64 = 64 << 10;

/// The capacity of the buffer handed out for a request of `bytes` bytes, on a device whose largest
/// array is `max` bytes.
///
/// - at least 256 bytes (zero-size arrays still get a buffer), always a multiple of 4;
/// - up to 64 KiB: rounded up to a multiple of 256 B;
/// - above: rounded up to a quarter step of its power of two (…, 1 MiB, 1.25 MiB, 1.5 MiB,
///   1.75 MiB, 2 MiB, …), so at most 25 % is wasted and similar sizes share a bucket;
/// - never above `max` when the request itself fits: then the request rounded to 4 bytes is used.
///
/// ```
/// use brigade::device::bucket_size;
/// let max = 128 << 20;
/// assert_eq!(bucket_size(0, max), 256);
/// assert_eq!(bucket_size(100, max), 256);
/// assert_eq!(bucket_size(65 << 10, max), 80 << 10);
/// assert_eq!(bucket_size(100 << 20, max), 112 << 20);
/// assert_eq!(bucket_size(127 << 20, max), 128 << 20);
/// ```
pub fn bucket_size(bytes: u64, max: u64) -> u64 {
    let b = bytes.max(4).next_multiple_of(4);
    let c = if b <= SMALL {
        b.next_multiple_of(256)
    } else {
        let p = 1u64 << (63 - b.leading_zeros());
        b.next_multiple_of(p / 4)
    };
    if c > max && b <= max { b } else { c }
}

/// What a device's buffer pool holds and has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Free buffers kept for reuse.
    pub buffers_held: usize,
    /// Bytes of free buffers kept for reuse.
    pub bytes_held: u64,
    /// Buffers handed out and not yet dropped.
    pub buffers_in_use: usize,
    /// Bytes (capacity) of buffers handed out and not yet dropped.
    pub bytes_in_use: u64,
    /// wgpu buffers created (pool misses).
    pub created: u64,
    /// Allocations served from the pool (hits).
    pub reused: u64,
}

impl fmt::Display for PoolStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} buffers in use ({}), {} held ({}), {} created, {} reused",
            self.buffers_in_use,
            super::human_bytes(self.bytes_in_use),
            self.buffers_held,
            super::human_bytes(self.bytes_held),
            self.created,
            self.reused
        )
    }
}

/// The device memory a device's storage buffers take, and its budget
/// ([`super::Device::memory_stats`]). Staging buffers of transfers are not counted (at most a few
/// of them, bounded, are kept between transfers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes (capacity) of buffers handed out and not yet dropped: arrays and temporaries.
    pub bytes_in_use: u64,
    /// Bytes of free buffers the pool keeps for reuse.
    pub bytes_held: u64,
    /// `bytes_in_use + bytes_held`: the device memory brigade holds, which the budget bounds.
    pub bytes_total: u64,
    /// The highest `bytes_total` seen.
    pub peak_bytes: u64,
    /// The budget in bytes, if one is set.
    pub limit: Option<u64>,
    /// Allocations refused with [`crate::Error::OutOfMemory`] (over the budget, or by wgpu).
    pub out_of_memory: u64,
}

impl fmt::Display for MemoryStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} in use, {} held by the pool, peak {}, limit {}",
            super::human_bytes(self.bytes_in_use),
            super::human_bytes(self.bytes_held),
            super::human_bytes(self.peak_bytes),
            self.limit.map_or("none".to_string(), super::human_bytes)
        )
    }
}

/// A pool bucket: the capacity, and the usages asked for beyond brigade's own (outputs made for
/// an app's vertex buffers are kept apart from plain storage buffers).
type PoolKey = (u64, wgpu::BufferUsages);

/// Free buffers of one device, by capacity and extra usages.
pub(crate) struct Pool {
    free: HashMap<PoolKey, Vec<wgpu::Buffer>>,
    pub(crate) stats: PoolStats,
    pub(crate) limit: u64,
    /// The memory budget (bytes in use + held), if any.
    pub(crate) budget: Option<u64>,
    pub(crate) peak: u64,
    pub(crate) oom: u64,
    /// Extra usages of every program output made on this device
    /// ([`super::Device::set_output_usages`]).
    pub(crate) output_usages: wgpu::BufferUsages,
}

impl Pool {
    pub(crate) fn new() -> Pool {
        Pool {
            free: HashMap::new(),
            stats: PoolStats::default(),
            limit: DEFAULT_POOL_LIMIT,
            budget: None,
            peak: 0,
            oom: 0,
            output_usages: wgpu::BufferUsages::empty(),
        }
    }

    /// Bytes of device memory the pool accounts for: buffers in use plus free buffers held.
    pub(crate) fn total(&self) -> u64 {
        self.stats.bytes_in_use + self.stats.bytes_held
    }

    pub(crate) fn memory_stats(&self) -> MemoryStats {
        MemoryStats {
            bytes_in_use: self.stats.bytes_in_use,
            bytes_held: self.stats.bytes_held,
            bytes_total: self.total(),
            peak_bytes: self.peak,
            limit: self.budget,
            out_of_memory: self.oom,
        }
    }

    /// Account for a new buffer before it is created, under the budget. Tries `capacity` (the
    /// bucket), then `exact` (the request rounded to 4 bytes) when only that fits. Held free
    /// buffers are released first when the budget needs it (pushed to `freed`: the caller drops
    /// them outside the lock). Returns the capacity reserved, or None when even `exact` does not
    /// fit next to the buffers in use.
    pub(crate) fn reserve(
        &mut self,
        capacity: u64,
        exact: u64,
        freed: &mut Vec<wgpu::Buffer>,
    ) -> Option<u64> {
        let cap = match self.budget {
            None => capacity,
            Some(limit) => {
                let in_use = self.stats.bytes_in_use;
                let fits = |c: u64| in_use.checked_add(c).is_some_and(|t| t <= limit);
                let cap = if fits(capacity) {
                    capacity
                } else if fits(exact) {
                    exact
                } else {
                    self.oom += 1;
                    return None;
                };
                if self.total().saturating_add(cap) > limit {
                    freed.extend(self.shrink_to(limit - in_use - cap));
                }
                cap
            }
        };
        self.mark_in_use(cap);
        Some(cap)
    }

    /// Undo [`Pool::reserve`] for a buffer that could not be created.
    pub(crate) fn unreserve(&mut self, capacity: u64) {
        self.stats.buffers_in_use = self.stats.buffers_in_use.saturating_sub(1);
        self.stats.bytes_in_use = self.stats.bytes_in_use.saturating_sub(capacity);
    }

    /// A free buffer of exactly `capacity` bytes and `extra` usages, marked in use.
    pub(crate) fn take(
        &mut self,
        capacity: u64,
        extra: wgpu::BufferUsages,
    ) -> Option<wgpu::Buffer> {
        let key = (capacity, extra);
        let list = self.free.get_mut(&key)?;
        let buf = list.pop()?;
        if list.is_empty() {
            self.free.remove(&key);
        }
        self.stats.buffers_held -= 1;
        self.stats.bytes_held -= capacity;
        self.stats.reused += 1;
        self.mark_in_use(capacity);
        Some(buf)
    }

    pub(crate) fn mark_in_use(&mut self, capacity: u64) {
        self.stats.buffers_in_use += 1;
        self.stats.bytes_in_use += capacity;
        self.peak = self.peak.max(self.total());
    }

    /// Take back a buffer that was in use. Returns it when the pool is full (the caller drops it
    /// outside the lock).
    pub(crate) fn give(
        &mut self,
        buf: wgpu::Buffer,
        capacity: u64,
        extra: wgpu::BufferUsages,
    ) -> Option<wgpu::Buffer> {
        self.unreserve(capacity);
        if self.stats.bytes_held + capacity > self.limit {
            return Some(buf);
        }
        self.stats.buffers_held += 1;
        self.stats.bytes_held += capacity;
        self.free.entry((capacity, extra)).or_default().push(buf);
        None
    }

    /// Remove every free buffer (the caller drops them outside the lock).
    pub(crate) fn drain(&mut self) -> Vec<wgpu::Buffer> {
        self.stats.buffers_held = 0;
        self.stats.bytes_held = 0;
        self.free.drain().flat_map(|(_, v)| v).collect()
    }

    /// Free buffers until at most `limit` bytes are held.
    pub(crate) fn shrink_to(&mut self, limit: u64) -> Vec<wgpu::Buffer> {
        let mut out = Vec::new();
        if self.stats.bytes_held <= limit {
            return out;
        }
        // Free the largest buffers first.
        let mut caps: Vec<PoolKey> = self.free.keys().copied().collect();
        caps.sort_unstable_by_key(|k| std::cmp::Reverse(k.0));
        for cap in caps {
            while self.stats.bytes_held > limit {
                let Some(list) = self.free.get_mut(&cap) else {
                    break;
                };
                let Some(buf) = list.pop() else { break };
                self.stats.buffers_held -= 1;
                self.stats.bytes_held -= cap.0;
                out.push(buf);
            }
            if self.free.get(&cap).is_some_and(|l| l.is_empty()) {
                self.free.remove(&cap);
            }
        }
        out
    }
}

/// A storage buffer on one GPU device (usage `STORAGE | COPY_SRC | COPY_DST`, plus the extra
/// usages asked for outputs, plus `MAP_READ` where reads map buffers), or a range of an app's
/// buffer ([`crate::Array::from_wgpu_buffer`]).
///
/// Created by [`super::Device::alloc`] / [`super::Device::upload`]; hold it in an `Arc`. When the
/// last reference is dropped the wgpu buffer goes back to its device's pool, unless it was shared
/// with code brigade does not control (see [`DeviceBuffer::is_shared`]). Its contents after
/// [`super::Device::alloc`] are unspecified (a reused buffer keeps old data): kernels must write
/// every element of their outputs, or use [`super::Device::alloc_zeroed`].
pub struct DeviceBuffer {
    /// Dropped by hand in `drop`: while the thread ends, on another thread (see `thread_exit.rs`).
    pub(crate) buffer: std::mem::ManuallyDrop<wgpu::Buffer>,
    /// Where brigade's bytes start in `buffer` (0 except for imported buffers).
    pub(crate) offset: u64,
    pub(crate) size: u64,
    pub(crate) capacity: u64,
    pub(crate) owner: Arc<DeviceInner>,
    /// The usages beyond brigade's own it was made with (its pool bucket).
    pub(crate) extra: wgpu::BufferUsages,
    /// True for an app's buffer: never pooled, never counted in the pool's memory.
    pub(crate) imported: bool,
    /// For an array larger than its device's `max_buffer_size`: every part, each a pooled buffer
    /// of its own (`buffer` is a handle of the first), `part_bytes` long but the last. The parts
    /// are counted in the pool's memory and go back to it when this buffer is dropped, so a
    /// second array of the same size reuses warm memory. Empty for one buffer.
    pub(crate) parts: Vec<Arc<DeviceBuffer>>,
    /// Bytes of every part but the last (0 for one buffer).
    pub(crate) part_bytes: u64,
    /// Set once the buffer was handed to code brigade does not control: exported with
    /// [`crate::Array::wgpu_buffer`], or recorded into an app's command encoder. Such a buffer is
    /// never returned to the pool (the app may still bind it, or its commands may not have run
    /// yet) and never mapped by a read (the app's submits would race the mapping).
    pub(crate) shared: AtomicBool,
    /// Set on the outputs of `Jit::encode` / `encode_into`: the proof, to check before their first
    /// read, that the app's submission of the encoder ran (see [`EncodeMark`]).
    pub(crate) pending: std::sync::Mutex<Option<Arc<EncodeMark>>>,
}

/// One `Jit::encode`'s slot in its device's [`Ledger`]. The encode writes `token` into the
/// slot's source word (`queue.write_buffer`) and appends to the app's encoder a copy of that word
/// into the slot's "ran" word, so the ran word holds `token` exactly when the app's submission of
/// the encoder executed. A failed submission (an encoder of another device), an encoder dropped
/// unsubmitted or not yet submitted leaves an older token there (tokens are never reused).
///
/// The slot goes back to the ledger once this is dropped, which happens only after both the
/// outputs marked with it and the encoder's submitted-work-done callback (run after the
/// submission finished, or dropped with an encoder that was never submitted) let go: a slot is
/// never rewritten while an encoder that copies into it may still run.
pub(crate) struct EncodeMark {
    pub(crate) slot: u32,
    pub(crate) token: u32,
    ledger: std::sync::Weak<std::sync::Mutex<Ledger>>,
}

impl Drop for EncodeMark {
    fn drop(&mut self) {
        if let Some(l) = self.ledger.upgrade() {
            super::gpu::lock(&l).free.push(self.slot);
        }
    }
}

/// Slots of one wgpu buffer pair (source and ran words, 4 bytes a slot).
pub(crate) const LEDGER_CHUNK: u32 = 64;

/// A device's encode slots (see [`EncodeMark`]): pairs of small wgpu buffers, made when every
/// slot is taken (once, in a frame loop: slots come back as the frames' submissions finish).
#[derive(Default)]
#[cfg_attr(target_arch = "wasm32", allow(dead_code))] // encodes are not marked in the browser
pub(crate) struct Ledger {
    /// (source words, ran words) of [`LEDGER_CHUNK`] slots each.
    pub(crate) chunks: Vec<(wgpu::Buffer, wgpu::Buffer)>,
    pub(crate) free: Vec<u32>,
    pub(crate) last_token: u32,
}

#[cfg(not(target_arch = "wasm32"))]
impl Ledger {
    /// Take a free slot (adding a chunk made by `make` if none is) and a fresh token (never 0,
    /// the ran words' first value).
    pub(crate) fn take(
        ledger: &Arc<std::sync::Mutex<Ledger>>,
        make: impl Fn(&'static str) -> wgpu::Buffer,
    ) -> (Arc<EncodeMark>, wgpu::Buffer, wgpu::Buffer) {
        let mut l = super::gpu::lock(ledger);
        if l.free.is_empty() {
            let k = l.chunks.len() as u32;
            let pair = (make("brigade encode tokens"), make("brigade encode ran"));
            l.chunks.push(pair);
            l.free
                .extend((k * LEDGER_CHUNK..(k + 1) * LEDGER_CHUNK).rev());
        }
        let slot = l.free.pop().expect("a free slot");
        l.last_token = l.last_token.wrapping_add(1).max(1);
        let (src, ran) = l.chunks[(slot / LEDGER_CHUNK) as usize].clone();
        let mark = Arc::new(EncodeMark {
            slot,
            token: l.last_token,
            ledger: Arc::downgrade(ledger),
        });
        (mark, src, ran)
    }
}

impl DeviceBuffer {
    /// The encode mark of an output of `Jit::encode` not yet seen to have run (see
    /// [`EncodeMark`]).
    pub(crate) fn lock_pending(&self) -> std::sync::MutexGuard<'_, Option<Arc<EncodeMark>>> {
        super::gpu::lock(&self.pending)
    }

    /// Usable bytes: the requested size rounded up to a multiple of 4, at least 4. This is the size
    /// bound to kernels, so `arrayLength` in WGSL sees `size() / 4` elements.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes brigade may use from [`DeviceBuffer::offset`]: for its own buffers, the whole wgpu
    /// buffer (the pool bucket, ≥ `size()`); for an imported one, `size()`.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Where this buffer's bytes start inside [`DeviceBuffer::raw`]: 0 for brigade's own
    /// buffers, the offset given to [`crate::Array::from_wgpu_buffer`] for an imported one.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The wgpu buffer, for code that records its own commands (bind from
    /// [`DeviceBuffer::offset`]). For an array stored in parts ([`DeviceBuffer::is_parted`]),
    /// its first part only: [`crate::Array::wgpu_buffer_parts`] gives them all.
    pub fn raw(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// The device the buffer lives on.
    pub fn device(&self) -> super::Device {
        super::Device::from_inner(self.owner.clone())
    }

    /// True when the buffer lives on `device`.
    pub fn is_on(&self, device: &super::Device) -> bool {
        self.owner.id == device.inner.id
    }

    /// True for a range of an app's wgpu buffer ([`crate::Array::from_wgpu_buffer`]).
    pub fn is_imported(&self) -> bool {
        self.imported
    }

    /// True once the buffer was handed out ([`crate::Array::wgpu_buffer`]) or recorded into an
    /// app's encoder (`Jit::encode`): it is then freed, not pooled, when dropped, and reads copy
    /// it instead of mapping it.
    pub fn is_shared(&self) -> bool {
        self.shared.load(Ordering::Acquire)
    }

    /// Mark the buffer shared (see [`DeviceBuffer::is_shared`]).
    pub(crate) fn share(&self) {
        self.shared.store(true, Ordering::Release);
    }

    /// True for an array stored in several wgpu buffers (larger than its device's
    /// `max_buffer_size`): [`DeviceBuffer::raw`] is then its first part only.
    pub fn is_parted(&self) -> bool {
        !self.parts.is_empty()
    }

    /// The wgpu buffers holding bytes `offset..offset + len` of this buffer, in order: `(buffer,
    /// offset in that wgpu buffer, bytes)`. One entry unless the range crosses parts.
    pub(crate) fn pieces(&self, offset: u64, len: u64) -> Vec<(&wgpu::Buffer, u64, u64)> {
        if self.parts.is_empty() {
            return vec![(&self.buffer, self.offset + offset, len)];
        }
        let mut out = Vec::new();
        let (mut at, end) = (offset, offset + len);
        while at < end {
            let part = (at / self.part_bytes) as usize;
            let within = at % self.part_bytes;
            let n = (self.part_bytes - within).min(end - at);
            out.push((&*self.parts[part].buffer, within, n));
            at += n;
        }
        out
    }

    /// True when reads may map this buffer itself: brigade's own, never handed out, mappable.
    pub(crate) fn mappable(&self) -> bool {
        !self.imported
            && self.parts.is_empty()
            && !self.is_shared()
            && self.buffer.usage().contains(wgpu::BufferUsages::MAP_READ)
    }

    /// Bytes `offset..offset + size` of this buffer, for binding one segment of an array larger
    /// than a storage binding (`offset` a multiple of the storage-offset alignment). The view is
    /// never pooled or counted (the whole buffer is); it keeps the wgpu buffer alive, not this
    /// [`DeviceBuffer`], so hold both while the view is used.
    ///
    /// In a parted buffer the range must lie within one part (the lowering never binds one that
    /// straddles two: segments and parts are powers of two, see
    /// [`super::DeviceLimits::part_bytes`]); one that does not is an internal
    /// [`crate::Error::Unsupported`].
    pub(crate) fn view(&self, offset: u64, size: u64) -> crate::Result<Arc<DeviceBuffer>> {
        debug_assert!(offset + size <= self.capacity, "a view inside its buffer");
        let (buffer, start) = match self.pieces(offset, size).as_slice() {
            [(b, at, _)] => ((*b).clone(), *at),
            [] => (wgpu::Buffer::clone(&self.buffer), self.offset + offset),
            _ => {
                return Err(crate::Error::Unsupported {
                    op: "segments",
                    detail: format!(
                        "a kernel binding bytes {offset}..{} of an array stored in parts of {} \
                         bytes straddles two parts (internal)",
                        offset + size,
                        self.part_bytes
                    ),
                });
            }
        };
        Ok(Arc::new(DeviceBuffer {
            buffer: std::mem::ManuallyDrop::new(buffer),
            offset: start,
            size,
            capacity: size,
            owner: self.owner.clone(),
            extra: self.extra,
            imported: true,
            parts: Vec::new(),
            part_bytes: 0,
            shared: AtomicBool::new(self.is_shared()),
            pending: Default::default(),
        }))
    }

    /// Every wgpu buffer this one uses (its parts, or the one buffer).
    pub(crate) fn wgpu_buffers(&self) -> impl Iterator<Item = &wgpu::Buffer> {
        let one = self.parts.is_empty().then_some(&*self.buffer);
        one.into_iter().chain(self.parts.iter().map(|p| &*p.buffer))
    }

    /// The parts of an array stored in parts, each with the bytes of the first `bytes` of the
    /// array it holds, when reads may map every one of them in place (see
    /// [`DeviceBuffer::mappable`]); `None` otherwise.
    pub(crate) fn mappable_parts(&self, bytes: u64) -> Option<Vec<(Arc<DeviceBuffer>, u64)>> {
        if self.parts.is_empty() || self.is_shared() || !self.parts.iter().all(|p| p.mappable()) {
            return None;
        }
        let per = self.part_bytes;
        let n = bytes.div_ceil(per) as usize;
        Some(
            self.parts[..n]
                .iter()
                .enumerate()
                .map(|(i, p)| (p.clone(), per.min(bytes - i as u64 * per)))
                .collect(),
        )
    }

    /// True when `self` and `other` use a same wgpu buffer (any range of it: wgpu refuses a
    /// dispatch that binds one buffer both read-only and writable, and a copy within one buffer).
    pub(crate) fn same_wgpu_buffer(&self, other: &DeviceBuffer) -> bool {
        self.wgpu_buffers()
            .any(|b| other.wgpu_buffers().any(|o| o == b))
    }
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("device", &self.owner.info.index)
            .field("offset", &self.offset)
            .field("size", &self.size)
            .field("capacity", &self.capacity)
            .field("imported", &self.imported)
            .field("shared", &self.is_shared())
            .finish()
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: `buffer` is not used after this line.
        let buffer = unsafe { std::mem::ManuallyDrop::take(&mut self.buffer) };
        let spill = self.release(&buffer);
        // Dropping the last handle of a wgpu buffer takes wgpu's snatch lock, which a thread that
        // is ending may no longer take (see `thread_exit.rs`). Destroying wgpu buffers touches the
        // GL context: serialize like every GL call.
        let owner = self.owner.clone();
        super::thread_exit::drop_safely(move || {
            let _gl = owner.gpu.as_ref().map(|g| g.gl_guard());
            drop(spill);
            drop(buffer);
        });
    }
}

impl DeviceBuffer {
    /// Give `buffer` (this buffer's handle) back to the pool where it goes there, and the parts
    /// back as they drop. Returns what the pool let go.
    fn release(&mut self, buffer: &wgpu::Buffer) -> Option<wgpu::Buffer> {
        if self.imported {
            // The app's buffer: the app frees it.
            return None;
        }
        if let Some(gpu) = &self.owner.gpu {
            if gpu.state.lost().is_some() {
                return None;
            }
            if !self.parts.is_empty() {
                // The parts give themselves back (or are freed, once handed out) as they drop,
                // before the caller takes the GL guard: their own drops take it.
                if self.is_shared() {
                    self.parts.iter().for_each(|p| p.share());
                }
                self.parts.clear();
            } else if self.is_shared() {
                // Not reused: the app may still bind it. wgpu frees it once the app's handle and
                // every command using it are gone.
                super::gpu::lock(&gpu.pool).unreserve(self.capacity);
            } else {
                // `wgpu::Buffer` is a reference-counted handle: the clone goes to the pool and
                // `buffer` is released right after.
                return super::gpu::lock(&gpu.pool).give(buffer.clone(), self.capacity, self.extra);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_bounds_reservations() {
        let mut p = Pool::new();
        let mut freed = Vec::new();
        // No budget: anything is reserved.
        assert_eq!(p.reserve(1 << 40, 1 << 40, &mut freed), Some(1 << 40));
        p.unreserve(1 << 40);
        assert_eq!(p.stats.bytes_in_use, 0);
        let mut p = Pool::new();
        p.budget = Some(1000);
        assert_eq!(p.reserve(600, 500, &mut freed), Some(600));
        // Neither the bucket nor the exact size fits next to 600 bytes in use.
        assert_eq!(p.reserve(600, 500, &mut freed), None);
        assert_eq!(p.oom, 1);
        // The bucket does not fit, the exact size does.
        assert_eq!(p.reserve(512, 400, &mut freed), Some(400));
        assert_eq!((p.stats.bytes_in_use, p.stats.buffers_in_use), (1000, 2));
        assert_eq!(p.reserve(4, 4, &mut freed), None);
        let m = p.memory_stats();
        assert_eq!(
            (m.bytes_total, m.peak_bytes, m.limit, m.out_of_memory),
            (1000, 1000, Some(1000), 2)
        );
        p.unreserve(400);
        assert_eq!(p.reserve(400, 400, &mut freed), Some(400));
        assert!(freed.is_empty());
    }

    #[test]
    fn buckets() {
        let max = 128 << 20;
        assert_eq!(bucket_size(0, max), 256);
        assert_eq!(bucket_size(1, max), 256);
        assert_eq!(bucket_size(256, max), 256);
        assert_eq!(bucket_size(257, max), 512);
        assert_eq!(bucket_size(64 << 10, max), 64 << 10);
        assert_eq!(bucket_size((64 << 10) + 4, max), 80 << 10);
        assert_eq!(bucket_size(1 << 20, max), 1 << 20);
        assert_eq!(bucket_size((1 << 20) + 4, max), 1280 << 10);
        // Near the limit: never round past it.
        assert_eq!(bucket_size((120 << 20) + 4, 121 << 20), (120 << 20) + 4);
        // Over the limit: the caller reports OverLimit; bucketing stays monotone.
        assert!(bucket_size(200 << 20, max) >= 200 << 20);
        for b in [3u64, 5, 1000, 70_000, 1_000_001, 33 << 20] {
            let c = bucket_size(b, max);
            assert!(
                c >= b && c.is_multiple_of(4) && (c as f64) <= (b as f64) * 1.25 + 256.0,
                "{b} -> {c}"
            );
        }
    }
}
