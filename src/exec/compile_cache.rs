//! The compile cache: a function's compiled programs by argument signature, shared by every
//! transform that runs a traced function on arrays (`jit`, `vmap(..).call`, `grad(..).call`).

use std::sync::Arc;

use crate::array::Array;
use crate::cache::SyncLru;
use crate::device::Device;
use crate::error::Result;
use crate::exec::{Executable, RunOpts, pick_device};
use crate::tensor::Tensor;
use crate::trace::graph::Aval;
use crate::trace::trace_fn;

/// The compiled programs of a function called on arrays, by argument signature: what `jit`,
/// `vmap(..).call` and `grad(..).call` share. The function is traced once per signature; the
/// program is lowered and cached per device by [`Executable`].
/// Bounded (least recently used first) by the program cache capacity of the device a call runs on.
///
/// Shared by every thread that calls the function: the lock is held for the lookup and the
/// insert only, never while tracing (tracing may call back into this cache, e.g. a `grad` traced
/// inside its own `jit`) — see [`crate::cache`].
pub(crate) struct CompileCache {
    map: SyncLru<Vec<Aval>, Arc<Executable>>,
    /// Arguments whose buffers the programs may give to their outputs (`Jit::donate_argnums`).
    donate: Vec<usize>,
}

/// Count (and drop) programs evicted from a full program cache.
pub(crate) fn count_program_evictions<T>(evicted: Vec<T>) {
    if !evicted.is_empty() {
        let n = evicted.len() as u64;
        drop(evicted);
        crate::counters::bump(|c| c.programs_evicted += n);
    }
}

impl CompileCache {
    pub(crate) fn new() -> CompileCache {
        CompileCache::donating(&[])
    }
    /// A cache whose programs take the buffers of the arguments at positions `donate` for
    /// their outputs where they can (see [`crate::lower::lower_donating`]).
    pub(crate) fn donating(donate: &[usize]) -> CompileCache {
        CompileCache {
            map: SyncLru::new(crate::device::DEFAULT_PROGRAM_CACHE_CAPACITY),
            donate: donate.to_vec(),
        }
    }
    /// Signatures held.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
    /// The program of `f` for arguments like `args` (tracing it the first time; then the cache
    /// keeps at most `capacity` programs, when given). Threads that miss on the same signature at
    /// once each trace it; the first program inserted is the one every caller gets.
    pub(crate) fn executable(
        &self,
        label: &str,
        f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
        args: &[Array],
        capacity: Option<usize>,
    ) -> Result<Arc<Executable>> {
        let avals: Vec<Aval> = args.iter().map(|a| a.aval().clone()).collect();
        self.executable_for(label, f, avals, capacity)
    }
    /// [`CompileCache::executable`] for arguments of these shapes and dtypes (no data needed).
    pub(crate) fn executable_for(
        &self,
        label: &str,
        f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
        avals: Vec<Aval>,
        capacity: Option<usize>,
    ) -> Result<Arc<Executable>> {
        if let Some(e) = self.map.get(&avals) {
            return Ok(e);
        }
        let g = trace_fn(label, &f, &avals)?;
        let e = Arc::new(Executable::donating(g, &self.donate));
        let kept = self.map.insert_or_keep(avals, e, capacity, |_| true);
        count_program_evictions(kept.evicted);
        Ok(kept.value)
    }
    /// Run `f`'s program on the explicit device, else where [`pick_device`] says.
    pub(crate) fn call(
        &self,
        label: &str,
        f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
        device: Option<&Device>,
        args: &[Array],
    ) -> Result<Vec<Array>> {
        let refs: Vec<&Array> = args.iter().collect();
        let dev = pick_device(device, &refs)?;
        let exe = self.executable(label, f, args, Some(dev.program_cache_capacity()))?;
        exe.run(&dev, args)
    }
    /// [`CompileCache::call`] with `opts`; without an explicit device, the arrays of
    /// `opts.into` also say where to run.
    pub(crate) fn call_with(
        &self,
        label: &str,
        f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
        device: Option<&Device>,
        args: &[Array],
        opts: RunOpts<'_>,
    ) -> Result<Vec<Array>> {
        let refs: Vec<&Array> = args.iter().chain(opts.into.unwrap_or_default()).collect();
        let dev = pick_device(device, &refs)?;
        let exe = self.executable(label, f, args, Some(dev.program_cache_capacity()))?;
        exe.run_with(&dev, args, opts)
    }
}
// Compiled programs are shared by the threads that call them (see [`crate::Jit`]'s notes on threads).
#[cfg(not(target_arch = "wasm32"))]
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Executable>();
    send_sync::<CompileCache>();
};
