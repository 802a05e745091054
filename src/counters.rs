//! Work counters: traces, pipelines created, dispatches, bytes moved, cache evictions.
//!
//! Counters are kept per thread (brigade issues all device work from the calling thread), so a test
//! can measure exactly the work its own calls caused while other tests run in parallel.

use std::cell::Cell;

/// A snapshot of the work counters of the calling thread.
///
/// New counters may come in minor releases (`#[non_exhaustive]`): read fields by name, and use
/// `Counters::default()` rather than a struct literal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Closures traced into graphs (by `jit`, transforms, or eager ops on a cache miss).
    pub traces: u64,
    /// Compute pipelines created (shader modules compiled). A cache hit does not count.
    pub pipelines_created: u64,
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// Command buffers submitted.
    pub submits: u64,
    /// Bytes copied host → device.
    pub bytes_uploaded: u64,
    /// Bytes copied device → host.
    pub bytes_downloaded: u64,
    /// Compiled kernels evicted from a device's full kernel cache
    /// ([`crate::Device::kernel_cache_capacity`]).
    pub kernels_evicted: u64,
    /// Programs evicted from a full program cache of `jit`, `pmap`/`shard_map` or eager ops
    /// ([`crate::Device::program_cache_capacity`]).
    pub programs_evicted: u64,
    /// Donated arguments whose buffer became an output (`Jit::donate_argnums`): no buffer was
    /// allocated for that output.
    pub donations_reused: u64,
    /// Donated arguments whose buffer was still held elsewhere (a clone of the array, an app's
    /// handle, a call with borrowed arguments): the output got a fresh buffer, filled with a copy
    /// of the argument, and the argument kept its values.
    pub donations_copied: u64,
    /// Predicates of a `while_loop` read back to decide whether to run another iteration (one
    /// per iteration, plus the last, false one).
    pub loop_predicate_reads: u64,
}

impl Counters {
    /// Work done between `earlier` and `self`.
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            traces: self.traces.saturating_sub(earlier.traces),
            pipelines_created: self
                .pipelines_created
                .saturating_sub(earlier.pipelines_created),
            dispatches: self.dispatches.saturating_sub(earlier.dispatches),
            submits: self.submits.saturating_sub(earlier.submits),
            bytes_uploaded: self.bytes_uploaded.saturating_sub(earlier.bytes_uploaded),
            bytes_downloaded: self
                .bytes_downloaded
                .saturating_sub(earlier.bytes_downloaded),
            kernels_evicted: self.kernels_evicted.saturating_sub(earlier.kernels_evicted),
            programs_evicted: self
                .programs_evicted
                .saturating_sub(earlier.programs_evicted),
            donations_reused: self
                .donations_reused
                .saturating_sub(earlier.donations_reused),
            loop_predicate_reads: self
                .loop_predicate_reads
                .saturating_sub(earlier.loop_predicate_reads),
            donations_copied: self
                .donations_copied
                .saturating_sub(earlier.donations_copied),
        }
    }
}

thread_local! {
    static COUNTERS: Cell<Counters> = const { Cell::new(Counters {
        traces: 0, pipelines_created: 0, dispatches: 0, submits: 0, bytes_uploaded: 0, bytes_downloaded: 0,
        kernels_evicted: 0, programs_evicted: 0, donations_reused: 0, donations_copied: 0,
        loop_predicate_reads: 0,
    }) };
}

/// The calling thread's counters.
///
/// ```
/// let before = brigade::counters();
/// // ... run something ...
/// let work = brigade::counters().since(&before);
/// assert_eq!(work.traces, 0);
/// ```
pub fn counters() -> Counters {
    COUNTERS.with(|c| c.get())
}

pub(crate) fn bump(f: impl FnOnce(&mut Counters)) {
    // Reached from destructors (evictions); `try_with` keeps them safe while the thread ends.
    let _ = COUNTERS.try_with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
    });
}
