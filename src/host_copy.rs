//! Copies out of mapped device memory into host memory, split over threads when large.
//!
//! A read of device data ends in one host copy from the mapped staging (or storage) buffer. On the
//! 2-core CI machine (64 MiB, lavapipe) one thread does not reach memory bandwidth: a read into a
//! reused slice took 8.5-9.7 ms on one thread and 4.9-6.0 ms on two (a warm single-threaded memcpy:
//! 9-11 ms). A read into a fresh vector pays the page faults of its first write as well: 37-47 ms
//! on one thread, 24-25 ms on two.
//!
//! Tried and not kept: advising the fresh vector to use transparent huge pages
//! (`madvise(MADV_HUGEPAGE)`: 512 times fewer faults). It measured 15-19 ms while the kernel had
//! free huge pages, and 80-112 ms once memory was fragmented, since the default THP `defrag`
//! setting makes a fault in an advised region compact memory first.
//!
//! Large copies are split natively (not on wasm, which has no threads). A thread that cannot be
//! spawned means its part is copied on the calling thread.

use std::mem::MaybeUninit;

/// Copies of at least this many bytes are split over threads (a thread's start costs tens of
/// microseconds; 8 MiB take about a millisecond).
const PARALLEL_MIN: usize = 8 << 20;
/// Each thread copies at least this much.
const PER_THREAD_MIN: usize = 4 << 20;
/// At most this many threads (memory bandwidth is shared; more threads only add starts).
const MAX_THREADS: usize = 8;

/// Copy `src` into `dst` (equal lengths), over several threads when it is large.
fn copy_maybe_uninit(dst: &mut [MaybeUninit<u8>], src: &[u8]) {
    let n = dst.len().min(src.len());
    let threads = threads_for(n);
    let base = Dst(dst.as_mut_ptr().cast::<u8>());
    if threads <= 1 {
        // SAFETY: `dst` is borrowed mutably for `n` bytes, `src` for reading.
        unsafe { base.copy(src, 0, n) };
        return;
    }
    let chunk = n.div_ceil(threads).next_multiple_of(4096);
    let base = &base;
    std::thread::scope(|scope| {
        for start in (chunk..n).step_by(chunk) {
            let end = (start + chunk).min(n);
            // SAFETY (both calls): the ranges `start..end` are disjoint parts of `dst`, which is
            // borrowed mutably until the scope ends.
            let spawned = std::thread::Builder::new()
                .spawn_scoped(scope, move || unsafe { base.copy(src, start, end) });
            if let Err(e) = spawned {
                // Thread limits: this part is copied here instead.
                log::debug!("host copy: no thread ({e}); copying on the caller");
                unsafe { base.copy(src, start, end) };
            }
        }
        unsafe { base.copy(src, 0, chunk.min(n)) };
    });
}

/// The destination of a copy, shared by the threads that fill disjoint parts of it.
struct Dst(*mut u8);
// SAFETY: each thread writes only its own range (see `copy_maybe_uninit`).
unsafe impl Sync for Dst {}

impl Dst {
    /// Copy `src[start..end]` to the same range of the destination.
    ///
    /// # Safety
    /// The destination must be valid for writes up to `end`, and no other thread may access
    /// `start..end` meanwhile.
    unsafe fn copy(&self, src: &[u8], start: usize, end: usize) {
        let part = &src[start..end];
        // SAFETY: the caller's contract; writing bytes needs no prior initialization.
        unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), self.0.add(start), part.len()) }
    }
}

/// How many threads a copy of `bytes` uses.
fn threads_for(bytes: usize) -> usize {
    if cfg!(target_arch = "wasm32") || bytes < PARALLEL_MIN {
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.min(bytes / PER_THREAD_MIN).clamp(1, MAX_THREADS)
}

/// Fill `dst` from `src` (`dst` as bytes must be exactly `src`'s length).
pub(crate) fn copy_into<T: bytemuck::Pod>(dst: &mut [T], src: &[u8]) {
    let bytes = bytemuck::cast_slice_mut::<T, u8>(dst);
    assert_eq!(bytes.len(), src.len(), "copy_into: lengths differ");
    // SAFETY: `MaybeUninit<u8>` has the layout of `u8`; only initialized bytes are written, so
    // `dst` stays valid for `T: Pod`.
    let raw = unsafe {
        std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<MaybeUninit<u8>>(), bytes.len())
    };
    copy_maybe_uninit(raw, src);
}

/// A fresh vector of `src.len() / size_of::<T>()` elements copied from `src` (device bytes, which
/// need not be aligned for `T`; trailing bytes of a partial element are ignored).
pub(crate) fn vec_from_bytes<T: bytemuck::Pod>(src: &[u8]) -> Vec<T> {
    let size = std::mem::size_of::<T>().max(1);
    let n = src.len() / size;
    let mut v: Vec<T> = Vec::with_capacity(n);
    let spare = &mut v.spare_capacity_mut()[..n];
    // SAFETY: the spare capacity holds `n` elements, `n * size` bytes of `MaybeUninit` storage.
    let raw = unsafe {
        std::slice::from_raw_parts_mut(spare.as_mut_ptr().cast::<MaybeUninit<u8>>(), n * size)
    };
    copy_maybe_uninit(raw, &src[..n * size]);
    // SAFETY: all `n` elements were written, and every bit pattern is a valid `T: Pod`.
    unsafe { v.set_len(n) };
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size class (empty, below and above the threaded size, odd tails) copies
    /// exactly, into fresh and into reused memory.
    #[test]
    fn copies_are_exact_at_every_size() {
        for n in [
            0usize,
            1,
            4095,
            1 << 20,
            (PARALLEL_MIN / 4) + 3,
            (3 * PARALLEL_MIN / 4) + 1,
        ] {
            let src: Vec<u32> = (0..n as u32)
                .map(|i| i.wrapping_mul(2_654_435_761) ^ 0x5a5a)
                .collect();
            let bytes: &[u8] = bytemuck::cast_slice(&src);
            let fresh: Vec<u32> = vec_from_bytes(bytes);
            assert_eq!(fresh, src, "fresh vector of {n}");
            let mut reused = vec![7u32; n];
            copy_into(&mut reused, bytes);
            assert_eq!(reused, src, "reused slice of {n}");
        }
        // Unaligned source, trailing partial element ignored.
        let raw: Vec<u8> = (0..41u8).collect();
        let v: Vec<u32> = vec_from_bytes(&raw[1..]);
        assert_eq!(v.len(), 10);
        assert_eq!(v[0], u32::from_le_bytes([1, 2, 3, 4]));
        assert_eq!(v[9], u32::from_le_bytes([37, 38, 39, 40]));
    }

    #[test]
    fn threads_only_for_large_copies() {
        assert_eq!(threads_for(PARALLEL_MIN - 1), 1);
        assert!(threads_for(64 << 20) <= MAX_THREADS);
    }
}
