//! Device planning: how many examples fit on one device, and so how many devices a batch needs
//! (the tutorial's `N = ceil(B_total / b_cap)`).
//!
//! The memory of a batched program grows linearly with the batch: [`plan`] compiles `vmap(f)` for
//! two batch sizes, reads the buffer plan of each (what the device would really allocate), and
//! fits `bytes(b) = fixed + per_sample · b` for the whole program (its peak, from the same
//! [`MemoryAnalysis`] that [`crate::Jit::memory_analysis`] reports) and for its largest buffer.
//! The per-device cap `b_cap` is the largest batch whose largest buffer still fits the device's
//! storage-binding limit and, when the device has a memory budget, whose call fits the budget
//! (wgpu reports no memory size, so the binding limit is the hard limit a device gives and the
//! budget the one a user sets).

use std::fmt;

use crate::device::{Device, bucket_size, human_bytes};
use crate::error::{Error, Result};
use crate::lower::{Program, lower};
use crate::tensor::Tensor;
use crate::trace::graph::Aval;
use crate::trace::trace_fn;

/// What [`plan`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Examples in the whole batch.
    pub batch_total: usize,
    /// The peak device bytes of a call of the batched program ([`MemoryAnalysis::peak_bytes`]:
    /// every buffer it holds at once, input batch and outputs included) per example, and
    /// independent of the batch.
    pub bytes_per_sample: u64,
    /// The peak device bytes that do not grow with the batch (parameters, constants).
    pub bytes_fixed: u64,
    /// The largest single buffer per example, and independent of the batch.
    pub largest_buffer_per_sample: u64,
    /// The largest single buffer that does not grow with the batch.
    pub largest_buffer_fixed: u64,
    /// The device's storage-binding limit, bytes (no buffer may be larger).
    pub binding_limit: u64,
    /// The device's memory budget, bytes ([`Device::memory_limit`]: set by
    /// `Runtime::builder().memory_limit(..)`, `BRIGADE_MEMORY_LIMIT` or
    /// [`Device::set_memory_limit`]), if it has one.
    pub memory_budget: Option<u64>,
    /// Most examples whose largest buffer fits the binding limit (`usize::MAX` when no buffer
    /// grows with the batch).
    pub binding_cap: usize,
    /// Most examples whose call fits the memory budget on a device that holds nothing else,
    /// counted as the budget counts: each buffer of the call's plan, in the order the call
    /// allocates them, takes its pool bucket where that fits under the budget and its exact size
    /// where only that does (so the cap lies between the batches whose
    /// [`MemoryAnalysis::pool_peak_bytes`] and [`MemoryAnalysis::peak_bytes`] fill the budget).
    /// None without a budget, `usize::MAX` when nothing grows with the batch. Arrays the device
    /// already holds count against the budget too.
    pub budget_cap: Option<usize>,
    /// Most examples one device can take: the smaller of `binding_cap` and `budget_cap`.
    pub batch_cap: usize,
    /// Devices needed: `ceil(batch_total / batch_cap)`.
    pub devices_needed: usize,
    /// The memory analysis of one device's share, `ceil(batch_total / devices_needed)` examples.
    pub per_device: MemoryAnalysis,
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} B per example + {} B fixed (largest buffer {} B per example + {} B); binding limit {} B",
            self.bytes_per_sample,
            self.bytes_fixed,
            self.largest_buffer_per_sample,
            self.largest_buffer_fixed,
            self.binding_limit,
        )?;
        if let (Some(budget), Some(cap)) = (self.memory_budget, self.budget_cap) {
            write!(
                f,
                " (at most {} examples), memory budget {budget} B (at most {cap} examples)",
                self.binding_cap
            )?;
        }
        write!(
            f,
            " → at most {} examples per device → {} device(s) for {} examples; each device: {}",
            self.batch_cap, self.devices_needed, self.batch_total, self.per_device
        )
    }
}

/// Plan the batch of `f` (written for one example of the shapes `example`) on `device`: bytes per
/// example, the per-device cap and the number of devices `batch_total` examples need.
///
/// The cap is the largest batch whose largest buffer fits the device's storage-binding limit
/// and, when the device has a memory budget, whose call fits the budget ([`Plan::budget_cap`]).
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
///
/// Errors: [`Error::OverLimit`] when one example's buffer exceeds the binding limit,
/// [`Error::OutOfMemory`] when one example's call exceeds the memory budget.
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
    let limit = limits.max_array_bytes();
    let batched = crate::transform::vmap::vmap(&f);
    // The memory analysis and largest buffer of the program for `b` examples, and whether its
    // buffers fit the budget.
    let measure = |b: usize| -> Result<Measured> {
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
        let largest = p.slot_bytes.iter().copied().max().unwrap_or(0);
        let fits = |budget: u64| pool_fits(&p.slot_bytes, budget, limit);
        Ok(Measured {
            analysis: MemoryAnalysis::of(&p, &[], limit),
            largest,
            fits: device.memory_limit().is_none_or(fits),
        })
    };
    // Two batch sizes large enough that buffer rounding does not matter.
    let (b1, b2) = (64usize, 128usize);
    let (m1, m2) = (measure(b1)?, measure(b2)?);
    let (l1, l2) = (m1.largest, m2.largest);
    let (t1, t2) = (m1.analysis.peak_bytes, m2.analysis.peak_bytes);
    let d = (b2 - b1) as u64;
    let per = t2.saturating_sub(t1) / d;
    let lper = l2.saturating_sub(l1) / d;
    let fixed = t1.saturating_sub(per * b1 as u64);
    let lfixed = l1.saturating_sub(lper * b1 as u64);
    let binding_cap = limit
        .saturating_sub(lfixed)
        .checked_div(lper)
        .map_or(usize::MAX, |c| c as usize);
    if binding_cap == 0 {
        return Err(Error::OverLimit {
            device: device.name().to_string(),
            what: "one example of this function".into(),
            needed: lper + lfixed,
            limit,
            unit: "bytes",
            limit_name: "max_storage_buffer_binding_size",
        });
    }
    let budget = device.memory_limit();
    let budget_cap = match budget {
        None => None,
        Some(budget) => Some(budget_cap(
            &measure,
            budget,
            per,
            fixed,
            binding_cap,
            device,
        )?),
    };
    let cap = budget_cap.map_or(binding_cap, |c| c.min(binding_cap));
    let devices_needed = batch_total.div_ceil(cap);
    let per_device = measure(batch_total.div_ceil(devices_needed))?.analysis;
    Ok(Plan {
        batch_total,
        bytes_per_sample: per,
        bytes_fixed: fixed,
        largest_buffer_per_sample: lper,
        largest_buffer_fixed: lfixed,
        binding_limit: limit,
        memory_budget: budget,
        binding_cap,
        budget_cap,
        batch_cap: cap,
        devices_needed,
        per_device,
    })
}

/// What `plan` measures of the batched program for one batch size.
struct Measured {
    analysis: MemoryAnalysis,
    largest: u64,
    /// Its buffers fit the device's memory budget ([`pool_fits`]); true without one.
    fits: bool,
}

/// Whether buffers of `slots` bytes, allocated in this order on a device holding nothing else,
/// stay under `budget` as the pool allocates them: each takes its bucket
/// ([`crate::device::bucket_size`]) where that fits, else its exact size (rounded to 4 bytes)
/// where that fits.
fn pool_fits(slots: &[u64], budget: u64, max_buffer: u64) -> bool {
    let mut in_use = 0u64;
    for &b in slots {
        let exact = b.max(4).next_multiple_of(4);
        let Some(take) = [bucket_size(b, max_buffer), exact]
            .into_iter()
            .find(|&c| in_use.saturating_add(c) <= budget)
        else {
            return false;
        };
        in_use += take;
    }
    true
}

/// The largest batch (at most `binding_cap`, the search's upper end when nothing grows) whose
/// call fits `budget` ([`pool_fits`]): searched up to the linear estimate from the requested
/// bytes (`fixed + per · b`, which the pool never undercuts) from a quarter below it (buckets
/// waste at most a quarter of a large buffer), measuring the compiled plan at each probe.
fn budget_cap(
    measure: &dyn Fn(usize) -> Result<Measured>,
    budget: u64,
    per: u64,
    fixed: u64,
    binding_cap: usize,
    device: &Device,
) -> Result<usize> {
    let fits = |b: usize| -> Result<bool> { Ok(measure(b)?.fits) };
    let one = measure(1)?;
    if !one.fits {
        return Err(Error::OutOfMemory {
            device: device.name().to_string(),
            detail: format!(
                "one example of this function needs {} bytes of buffers but the memory budget is {budget} \
                 bytes: raise the budget (memory_limit, BRIGADE_MEMORY_LIMIT) or shrink the example",
                one.analysis.peak_bytes
            ),
        });
    }
    if per == 0 {
        return Ok(binding_cap);
    }
    let high = (budget.saturating_sub(fixed) / per).min(binding_cap as u64) as usize;
    let mut lo = (high - high / 4).max(1);
    if !fits(lo)? {
        lo = 1;
    }
    // Invariant: `lo` fits; find the largest fitting b in lo..=high.
    let mut hi = high.max(lo);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(lo)
}

/// The device memory one call of a compiled program takes (JAX's `compiled.memory_analysis()`),
/// read from the buffer plan the executor allocates: [`crate::Jit::memory_analysis`].
///
/// A call holds every buffer of its plan at once, from its start until it returns (buffers whose
/// values are dead by then were already shared by later values in the plan), so the peak is the
/// sum of the plan's distinct buffers: arguments, constants, outputs and temporaries, an output
/// that lives in an argument's buffer (a donated argument, or an argument returned as it is)
/// counted once. Byte counts are the buffers' sizes (at least 16 bytes each); the `pool_*`
/// counts are the capacities the device's pool hands out for them
/// ([`crate::device::bucket_size`]), which is what a memory budget
/// ([`Device::set_memory_limit`]) counts.
///
/// ```
/// use brigade::{jit, Array, Tensor};
/// // y = 2x + 1 on 1000 floats: the input, the output, no temporary (the chain is one kernel).
/// let f = jit(|a: &[Tensor]| vec![&a[0] * 2.0 + 1.0]).donate_argnums(&[0]);
/// let x = Array::from_vec(vec![1.0f32; 1000], &[1000])?;
/// let m = f.memory_analysis(&[x])?;
/// assert_eq!((m.argument_bytes, m.output_bytes, m.temp_bytes), (4000, 4000, 0));
/// // The donated x becomes the output: the call needs 4000 bytes, not 8000.
/// assert_eq!((m.alias_bytes, m.peak_bytes), (4000, 4000));
/// assert_eq!(m.donated, vec![(0, 0)]);
/// # Ok::<(), brigade::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryAnalysis {
    /// Bytes of the arguments' buffers.
    pub argument_bytes: u64,
    /// Bytes of the outputs' buffers (outputs sharing one buffer counted once), including those
    /// that live in an argument's or constant's buffer.
    pub output_bytes: u64,
    /// Bytes of the outputs that live in an argument's or constant's buffer (donated arguments,
    /// arguments or constants returned as they are): no memory beyond the arguments'.
    pub alias_bytes: u64,
    /// Bytes of the constants the program uploads once and keeps (captured arrays).
    pub constant_bytes: u64,
    /// Bytes of the intermediate buffers: values the fused kernels cannot keep in registers
    /// (matmul and reduction results used later, partial sums of two-pass reductions).
    pub temp_bytes: u64,
    /// `argument + constant + output - alias + temp`: the device bytes a call holds at once.
    pub peak_bytes: u64,
    /// `peak_bytes` in the pool's buffer capacities (what a memory budget counts).
    pub pool_peak_bytes: u64,
    /// Buffers the call holds at once.
    pub buffers: usize,
    /// `(argument, output)`: donated arguments whose buffer becomes that output.
    pub donated: Vec<(usize, usize)>,
    /// Donated arguments no output could take (no output of their byte size is computed after
    /// their last use): they keep their own buffer, as JAX warns "donated buffers were not usable".
    pub unused_donations: Vec<usize>,
}

impl MemoryAnalysis {
    /// The analysis of `program`, whose arguments `donate` were donated, on a device whose largest
    /// buffer is `max_buffer` bytes (for the pool's capacities).
    pub(crate) fn of(program: &Program, donate: &[usize], max_buffer: u64) -> MemoryAnalysis {
        let p = program;
        let n = p.slot_bytes.len();
        let (mut is_arg, mut is_const, mut is_out) =
            (vec![false; n], vec![false; n], vec![false; n]);
        for &s in &p.input_slots {
            is_arg[s] = true;
        }
        for (s, _) in &p.const_slots {
            is_const[*s] = true;
        }
        for &s in &p.output_slots {
            is_out[s] = true;
        }
        let mut m = MemoryAnalysis {
            buffers: n,
            donated: p.donated.clone(),
            unused_donations: donate
                .iter()
                .copied()
                .filter(|d| !p.donated.iter().any(|(a, _)| a == d))
                .collect(),
            ..MemoryAnalysis::default()
        };
        for (s, &b) in p.slot_bytes.iter().enumerate() {
            let pool = bucket_size(b, max_buffer);
            m.pool_peak_bytes += pool;
            m.peak_bytes += b;
            if is_arg[s] {
                m.argument_bytes += b;
            } else if is_const[s] {
                m.constant_bytes += b;
            }
            if is_out[s] {
                m.output_bytes += b;
                if is_arg[s] || is_const[s] {
                    m.alias_bytes += b;
                }
            }
            if !(is_arg[s] || is_const[s] || is_out[s]) {
                m.temp_bytes += b;
            }
        }
        m
    }
}

impl fmt::Display for MemoryAnalysis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arguments {}, outputs {} ({} in argument or constant buffers), constants {}, temporaries {}; peak {} in {} buffers ({} in pool capacities)",
            human_bytes(self.argument_bytes),
            human_bytes(self.output_bytes),
            human_bytes(self.alias_bytes),
            human_bytes(self.constant_bytes),
            human_bytes(self.temp_bytes),
            human_bytes(self.peak_bytes),
            self.buffers,
            human_bytes(self.pool_peak_bytes),
        )?;
        for (a, o) in &self.donated {
            write!(f, "; argument {a} donated to output {o}")?;
        }
        if !self.unused_donations.is_empty() {
            write!(
                f,
                "; donated but not usable (no output of their size computed after their last use): {:?}",
                self.unused_donations
            )?;
        }
        Ok(())
    }
}
