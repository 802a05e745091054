//! Device planning: how many examples fit on one device, and so how many devices a batch needs
//! (the tutorial's `N = ceil(B_total / b_cap)`).
//!
//! The memory of a batched program grows linearly with the batch: [`plan`] compiles `vmap(f)` for
//! two batch sizes, reads the buffer plan of each (what the device would really allocate), and
//! fits `bytes(b) = fixed + per_sample · b` for the whole program and for its largest buffer. The
//! per-device cap `b_cap` is the largest batch whose largest buffer still fits the device's
//! storage-binding limit (wgpu reports no memory size, so the binding limit is the hard limit a
//! device gives; the total is reported beside it).

use std::fmt;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::lower::lower;
use crate::tensor::Tensor;
use crate::trace::graph::Aval;
use crate::trace::trace_fn;

/// What [`plan`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Examples in the whole batch.
    pub batch_total: usize,
    /// Bytes of all buffers of the batched program per example, and independent of the batch.
    pub bytes_per_sample: u64,
    pub bytes_fixed: u64,
    /// The largest single buffer per example, and independent of the batch.
    pub largest_buffer_per_sample: u64,
    pub largest_buffer_fixed: u64,
    /// The device's storage-binding limit, bytes (no buffer may be larger).
    pub binding_limit: u64,
    /// Most examples one device can take (`usize::MAX` when no buffer grows with the batch).
    pub batch_cap: usize,
    /// Devices needed: `ceil(batch_total / batch_cap)`.
    pub devices_needed: usize,
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} B per example + {} B fixed (largest buffer {} B per example + {} B); binding limit {} B → at most {} examples per device → {} device(s) for {} examples",
            self.bytes_per_sample,
            self.bytes_fixed,
            self.largest_buffer_per_sample,
            self.largest_buffer_fixed,
            self.binding_limit,
            self.batch_cap,
            self.devices_needed,
            self.batch_total
        )
    }
}

/// Plan the batch of `f` (written for one example of the shapes `example`) on `device`: bytes per
/// example, the per-device cap and the number of devices `batch_total` examples need.
///
/// ```
/// use brigade::{plan, Aval, DType, Tensor};
/// let dev = &brigade::devices()?[0];
/// // Each example: the outer product of a 256-vector with itself (256 KiB per example).
/// let p = plan(|a: &[Tensor]| {
///     let v = a[0].reshape(&[256, 1]);
///     vec![v.matmul(&v.reshape(&[1, 256]))]
/// }, &[Aval::new(vec![256], DType::F32)], 10_000, dev)?;
/// assert_eq!(p.largest_buffer_per_sample, 256 * 256 * 4);
/// assert_eq!(p.devices_needed, 10_000usize.div_ceil(p.batch_cap));
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn plan<F>(f: F, example: &[Aval], batch_total: usize, device: &Device) -> Result<Plan>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    if batch_total == 0 {
        return Err(Error::BadParallelArg {
            op: "plan",
            detail: "the batch is empty (batch_total 0): nothing to plan".into(),
        });
    }
    let limits = *device.limits();
    let batched = crate::transform::vmap::vmap(&f);
    // Two batch sizes large enough that buffer rounding does not matter.
    let (b1, b2) = (64usize, 128usize);
    let measure = |b: usize| -> Result<(u64, u64)> {
        let avals: Vec<Aval> = example
            .iter()
            .map(|a| {
                let mut shape = vec![b];
                shape.extend_from_slice(&a.shape);
                Aval::new(shape, a.dtype)
            })
            .collect();
        let g = trace_fn("plan", &|ts: &[Tensor]| batched.apply(ts), &avals)?;
        // Planned without limits: the point is to see how large the buffers would be (with the
        // values of any debug_print kept, as the executors keep them).
        let (g, _) = crate::debug::strip_prints(&g);
        let p = lower(&g, &crate::device::DeviceLimits::host())?;
        let total: u64 = p.slot_bytes.iter().sum();
        let largest = p.slot_bytes.iter().copied().max().unwrap_or(0);
        Ok((total, largest))
    };
    let (t1, l1) = measure(b1)?;
    let (t2, l2) = measure(b2)?;
    let d = (b2 - b1) as u64;
    let per = t2.saturating_sub(t1) / d;
    let lper = l2.saturating_sub(l1) / d;
    let fixed = t1.saturating_sub(per * b1 as u64);
    let lfixed = l1.saturating_sub(lper * b1 as u64);
    let limit = limits.max_array_bytes();
    let cap = limit
        .saturating_sub(lfixed)
        .checked_div(lper)
        .map_or(usize::MAX, |c| c as usize);
    if cap == 0 {
        return Err(Error::OverLimit {
            device: device.name().to_string(),
            what: "one example of this function".into(),
            needed: lper + lfixed,
            limit,
            unit: "bytes",
            limit_name: "max_storage_buffer_binding_size",
        });
    }
    Ok(Plan {
        batch_total,
        bytes_per_sample: per,
        bytes_fixed: fixed,
        largest_buffer_per_sample: lper,
        largest_buffer_fixed: lfixed,
        binding_limit: limit,
        batch_cap: cap,
        devices_needed: batch_total.div_ceil(cap),
    })
}
