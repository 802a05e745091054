//! The eager path: one primitive run on concrete arrays (an op outside `jit`), compiled once per
//! primitive and operand signature, and the choice of the device a call runs on.

use std::cell::RefCell;
use std::rc::Rc;

use crate::array::Array;
use crate::cache::Lru;
use crate::device::{Device, Runtime};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::exec::{Executable, count_program_evictions};
use crate::ops::Prim;
use crate::trace::graph::{Aval, Eqn, Graph};

/// Pick the device for a call: the explicit one, else the first argument on a device, else the
/// default device of the global runtime.
pub(crate) fn pick_device(explicit: Option<&Device>, args: &[&Array]) -> Result<Device> {
    if let Some(d) = explicit {
        return Ok(d.clone());
    }
    if let Some(d) = args.iter().find_map(|a| a.device()) {
        return Ok(d.clone());
    }
    let rt = Runtime::global()?;
    rt.devices()
        .first()
        .cloned()
        .ok_or_else(|| Error::NoDevice("the global runtime has no device".into()))
}

thread_local! {
    /// Eager ops by primitive and operand signature, bounded by the program cache capacity of the
    /// device each runs on.
    static EAGER: RefCell<Lru<String, Rc<Executable>>> =
        RefCell::new(Lru::new(crate::device::DEFAULT_PROGRAM_CACHE_CAPACITY));
    /// The cpu device eager f64 ops on host data run on (see [`eager`]).
    static HOST: Device = Device::new_cpu(0, 0);
}

/// Run one primitive on concrete arrays (an op outside `jit`), cached by primitive and shapes
/// (control flow, whose sub-programs are traced afresh at every call, is not cached).
pub(crate) fn eager(prim: Prim, args: &[&Array]) -> Result<Vec<Array>> {
    let avals: Vec<&Aval> = args.iter().map(|a| a.aval()).collect();
    let out_avals = prim.infer_outs(&avals)?;
    // f64 is host-only: an op on host data that involves f64 runs on a host cpu device (the
    // reference interpreter) instead of the default device, which would refuse it.
    let f64_op = out_avals
        .iter()
        .chain(avals.iter().copied())
        .any(|a| a.dtype == DType::F64);
    let dev = if f64_op && args.iter().all(|a| a.host().is_some()) {
        // A fresh one in destructors run while the thread ends.
        HOST.try_with(Device::clone)
            .unwrap_or_else(|_| Device::new_cpu(0, 0))
    } else {
        pick_device(None, args)?
    };
    let cacheable = !prim.is_control_flow();
    let key = if cacheable {
        format!("{prim:?}|{avals:?}")
    } else {
        String::new()
    };
    let cached = if cacheable {
        // Uncached in destructors run while the thread ends.
        EAGER
            .try_with(|c| c.borrow_mut().get(&key).cloned())
            .ok()
            .flatten()
    } else {
        None
    };
    let exe = match cached {
        Some(e) => e,
        None => {
            let mut g = Graph::default();
            let ins: Vec<_> = avals.iter().map(|a| g.new_var((*a).clone())).collect();
            g.inputs = ins.clone();
            let outs: Vec<_> = out_avals.into_iter().map(|a| g.new_var(a)).collect();
            let Some((&out, extra)) = outs.split_first() else {
                return Ok(Vec::new());
            };
            if prim.has_effect() {
                // A cond or loop that prints: its prints are printed by the executable.
                g.effects.push(out);
            }
            g.eqns.push(Eqn {
                prim,
                inputs: ins,
                out,
                extra_outs: extra.to_vec(),
            });
            g.outputs = outs;
            let e = Rc::new(Executable::new(g));
            if cacheable {
                let evicted = EAGER
                    .try_with(|c| {
                        let mut c = c.borrow_mut();
                        let mut out = c.set_capacity(dev.program_cache_capacity());
                        out.extend(c.insert(key, e.clone()));
                        out
                    })
                    .unwrap_or_default();
                count_program_evictions(evicted);
            }
            e
        }
    };
    let owned: Vec<Array> = args.iter().map(|a| (*a).clone()).collect();
    exe.run(&dev, &owned)
}

impl Device {
    /// Drop this device's compiled kernels and make every program compiled for it stale: the next
    /// call of any `jit`, `pmap` or eager op on this device compiles again (same results), and
    /// frees its old program then. The calling thread's eager op cache is emptied now. Buffers,
    /// arrays and the memory pool are not touched (see [`Device::trim_pool`]).
    pub fn clear_caches(&self) {
        self.clear_kernel_cache();
        let dropped = EAGER
            .try_with(|c| c.borrow_mut().drain())
            .unwrap_or_default();
        drop(dropped);
    }
}
