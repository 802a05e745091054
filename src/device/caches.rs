//! How much a device's caches may hold: compiled kernels (per device) and programs (the per-signature
//! caches of `jit`, `pmap`/`shard_map` and eager ops, bounded by the device they run on).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::gpu::{Device, lock};
use crate::counters::bump;

/// Default number of compiled kernels (compute pipelines) a device keeps. A pipeline costs about
/// 100–160 KiB of host memory on llvmpipe, so the default bounds the cache near 80 MiB.
pub const DEFAULT_KERNEL_CACHE_CAPACITY: usize = 512;

/// Default number of programs (argument signatures) that one `jit`, `pmap` or `shard_map`
/// function, and the eager op cache of a thread, keep for a device.
pub const DEFAULT_PROGRAM_CACHE_CAPACITY: usize = 256;

/// Environment variable that overrides [`DEFAULT_KERNEL_CACHE_CAPACITY`] for new devices: a
/// positive whole number (digits only); anything else fails `RuntimeBuilder::build`.
pub const KERNEL_CACHE_ENV: &str = "BRIGADE_KERNEL_CACHE";

/// Environment variable that overrides [`DEFAULT_PROGRAM_CACHE_CAPACITY`] for new devices: a
/// positive whole number (digits only); anything else fails `RuntimeBuilder::build`.
pub const PROGRAM_CACHE_ENV: &str = "BRIGADE_PROGRAM_CACHE";

/// A capacity from the environment: a positive integer (`super::env::parse_count`), else
/// `default`. A bad value is refused by `RuntimeBuilder::build`; here it only warns.
fn from_env(var: &str, default: usize) -> usize {
    super::env::read_or_warn(var, super::env::parse_count).unwrap_or(default)
}

/// The cache capacities of one device, and its cache epoch (bumped by `clear_caches`, so that
/// programs compiled for the device before are compiled again).
pub(crate) struct CacheSettings {
    kernels: AtomicUsize,
    programs: AtomicUsize,
    epoch: AtomicU64,
}

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings {
            kernels: AtomicUsize::new(from_env(KERNEL_CACHE_ENV, DEFAULT_KERNEL_CACHE_CAPACITY)),
            programs: AtomicUsize::new(from_env(PROGRAM_CACHE_ENV, DEFAULT_PROGRAM_CACHE_CAPACITY)),
            epoch: AtomicU64::new(0),
        }
    }
}

impl CacheSettings {
    pub(crate) fn kernel_capacity(&self) -> usize {
        self.kernels.load(Ordering::Relaxed)
    }
}

impl Device {
    /// How many compiled kernels (compute pipelines) this device keeps; the least recently used
    /// one is evicted when a new kernel would exceed it (counted in
    /// [`crate::Counters::kernels_evicted`]). Default [`DEFAULT_KERNEL_CACHE_CAPACITY`], or
    /// [`KERNEL_CACHE_ENV`]; set by [`super::RuntimeBuilder::kernel_cache_capacity`]. A program
    /// that is still cached keeps its own kernels alive, so an eviction only frees a pipeline no
    /// cached program uses.
    pub fn kernel_cache_capacity(&self) -> usize {
        self.inner.caches.kernels.load(Ordering::Relaxed)
    }

    /// Change [`Device::kernel_cache_capacity`] (at least 1), evicting the least recently used
    /// kernels that no longer fit.
    pub fn set_kernel_cache_capacity(&self, n: usize) {
        let n = n.max(1);
        self.inner.caches.kernels.store(n, Ordering::Relaxed);
        if let Some(g) = &self.inner.gpu {
            let evicted = lock(&g.kernels).set_capacity(n);
            let count = evicted.len() as u64;
            // Pipelines are destroyed here: on GL that is a GL call.
            let _gl = g.gl_guard();
            drop(evicted);
            bump(|c| c.kernels_evicted += count);
        }
    }

    /// How many programs (argument signatures) one `jit`, `pmap` or `shard_map` function, and the
    /// eager op cache of a thread, keep when they run on this device: the least recently used is
    /// evicted when a new signature would exceed it (counted in
    /// [`crate::Counters::programs_evicted`]); an evicted program is traced and compiled again
    /// when its signature comes back. Default [`DEFAULT_PROGRAM_CACHE_CAPACITY`], or
    /// [`PROGRAM_CACHE_ENV`]; set by [`super::RuntimeBuilder::program_cache_capacity`].
    pub fn program_cache_capacity(&self) -> usize {
        self.inner.caches.programs.load(Ordering::Relaxed)
    }

    /// Change [`Device::program_cache_capacity`] (at least 1). Caches shrink to it the next time
    /// they store a program for this device.
    pub fn set_program_cache_capacity(&self, n: usize) {
        self.inner
            .caches
            .programs
            .store(n.max(1), Ordering::Relaxed);
    }

    /// The cache epoch: programs compiled for this device at an older epoch are stale.
    pub(crate) fn cache_epoch(&self) -> u64 {
        self.inner.caches.epoch.load(Ordering::Relaxed)
    }

    /// Drop every cached kernel of this device and make every program compiled for it stale.
    pub(crate) fn clear_kernel_cache(&self) {
        self.inner.caches.epoch.fetch_add(1, Ordering::Relaxed);
        if let Some(g) = &self.inner.gpu {
            let dropped = lock(&g.kernels).drain();
            let _gl = g.gl_guard();
            drop(dropped);
        }
    }
}
