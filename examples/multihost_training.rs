//! Data-parallel training over many processes (feature `mpi`): the MLP of
//! `data_parallel_training` on the 8×8 digits, one `pmap` whose `pmean` spans every process's
//! devices — the tutorial's step from one machine to a cluster.
//!
//! ```sh
//! cargo build --release --features mpi --example multihost_training
//! BRIGADE_DEVICES=cpu:1 mpirun -n 4 target/release/examples/multihost_training
//! # the same computation in one process holding 4 devices:
//! BRIGADE_DEVICES=cpu:4 target/release/examples/multihost_training --single
//! ```
//!
//! Each process feeds its devices their blocks of the global batch (rows of global devices
//! `offset..offset + local`); `pmean` gathers every device's gradient across processes and sums
//! them in global device order, so every process applies the same update and the parameters stay
//! bit-identical on every process — and equal to the one-process run with as many devices (the
//! `PARAMS` fingerprint printed by each process). `--quick`: fewer steps.

use brigade::optim::Adam;
use brigade::{
    Array, DType, Device, Parallel, Result, Tensor, device_put_replicated, pmap, random,
};

#[allow(dead_code)]
#[path = "data_parallel_training.rs"]
mod data_parallel_training;
pub use data_parallel_training::{BATCH, HIDDEN, TRAIN, adam_step, load};

#[allow(dead_code)]
#[path = "common/util.rs"]
pub mod util;

/// FNV-1a over the parameters' bytes: equal fingerprints, equal bits.
fn fingerprint(params: &[Array]) -> Result<u64> {
    let mut h = 0xcbf29ce484222325u64;
    for p in params {
        for b in p.to_host()?.data.to_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100000001b3);
        }
    }
    Ok(h)
}

fn main() -> Result<()> {
    let single = std::env::args().any(|a| a == "--single");
    if !single {
        brigade::distributed::initialize()?;
    }
    let result = train(util::quick_requested());
    if let Err(e) = &result {
        // After a failed exchange MPI cannot finalize: leave with an error status at once.
        println!(
            "ERROR process {}: {e}",
            brigade::distributed::process_index()
        );
        std::process::exit(3);
    }
    brigade::distributed::shutdown();
    if !result? {
        std::process::exit(1);
    }
    Ok(())
}

/// The data-parallel Adam step over `devices` (this process's) and its starting state: the
/// parameters and Adam's moments, replicated on every device.
// The step's closure type has no name (an `impl Fn` cannot go in a type alias).
#[allow(clippy::type_complexity)]
pub fn model(
    devices: &[Device],
) -> Result<(Parallel<impl Fn(&[Tensor]) -> Vec<Tensor>>, Vec<Array>)> {
    let keys = random::split(&random::key(0), 2);
    let k0 = keys.slice(&[0, 0], &[1, 2], None).reshape(&[2]);
    let k1 = keys.slice(&[1, 0], &[2, 2], None).reshape(&[2]);
    let init = [
        random::normal(&k0, &[64, HIDDEN]) * (1.0 / 8.0),
        Tensor::zeros(&[HIDDEN], DType::F32),
        random::normal(&k1, &[HIDDEN, 10]) * (1.0 / (HIDDEN as f32).sqrt()),
        Tensor::zeros(&[10], DType::F32),
    ];
    let opt = Adam::new(0.01);
    let mut carried: Vec<Array> = Vec::new();
    for t in init.iter().chain(opt.init(&init).to_vec().iter()) {
        carried.push(device_put_replicated(&t.to_array()?, devices)?);
    }
    let step = pmap(move |a: &[Tensor]| adam_step(&opt, a))
        .axis_name("batch")
        .devices(devices);
    Ok((step, carried))
}

/// Step `s`'s inputs (pixels, labels) for this process's `n` devices, global devices
/// `offset..offset + n`: their blocks of the global batch of [`BATCH`] rows.
pub fn batch(
    pixels: &[f32],
    labels: &[i32],
    s: usize,
    offset: usize,
    n: usize,
) -> Result<[Array; 2]> {
    let per = BATCH / (n * brigade::distributed::process_count());
    let start = (s % (TRAIN / BATCH)) * BATCH + offset * per;
    let rows = start..start + n * per;
    Ok([
        Array::from_vec(
            pixels[rows.start * 64..rows.end * 64].to_vec(),
            &[n, per, 64],
        )?,
        Array::from_vec(labels[rows].to_vec(), &[n, per])?,
    ])
}

/// Train; false if the loss does not fall or a process's devices disagree.
fn train(quick: bool) -> Result<bool> {
    let (p, count) = (
        brigade::distributed::process_index(),
        brigade::distributed::process_count(),
    );
    let devices = brigade::distributed::local_devices()?;
    let n = devices.len();
    let total = n * count;
    let offset = p * n;
    let per = BATCH / total;
    let (pixels, labels) = load()?;
    if p == 0 {
        println!(
            "{count} process(es) × {n} device(s) = {total} devices, {per} samples each per step"
        );
    }

    let (step, mut carried) = model(&devices)?;

    let steps = if quick { 6 } else { 4 * TRAIN / BATCH };
    let mut losses = Vec::new();
    for s in 0..steps {
        let mut args = carried.clone();
        args.extend(batch(&pixels, &labels, s, offset, n)?);
        let mut out = step.call(&args)?;
        let l = out.pop().expect("loss").shards().expect("sharded")[0].to_vec::<f32>()?[0];
        losses.push(l);
        carried = out;
    }
    // Every local device holds the same parameters; their fingerprint is compared across
    // processes (and with `--single`) by whoever runs this.
    let mut prints = Vec::new();
    for d in 0..n {
        let params: Vec<Array> = carried[..4]
            .iter()
            .map(|a| a.shards().expect("sharded")[d].clone())
            .collect();
        prints.push(fingerprint(&params)?);
    }
    let same = prints.iter().all(|&h| h == prints[0]);
    let falling = losses.last().copied().unwrap_or(f32::MAX) < losses[0];
    println!(
        "process {p}: {steps} steps, loss {:.4} → {:.4} {}; devices agree {}; PARAMS {:016x}",
        losses[0],
        losses.last().copied().unwrap_or(f32::NAN),
        if falling { "✓" } else { "✗" },
        if same { "✓" } else { "✗" },
        prints[0]
    );
    Ok(same && falling)
}
