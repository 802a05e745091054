//! What crossing processes costs (feature `mpi`): `psum` and `all_gather` inside a `pmap` over
//! every process, beside a bare `MPI_Allreduce` / `MPI_Allgather` of the same bytes in the same
//! run, and one training step of `multihost_training` split into compute and communication.
//!
//! ```sh
//! cargo build --release --features mpi --example mpi_bench
//! BRIGADE_DEVICES=cpu:1 mpirun -n 2 --oversubscribe target/release/examples/mpi_bench
//! BRIGADE_DEVICES=vulkan:1 mpirun -n 4 --oversubscribe target/release/examples/mpi_bench --quick
//! ```
//!
//! Sizes are each device's operand: 1 KiB to 64 MiB (`--quick`: to 1 MiB, `--large`: 16 and 64
//! MiB). A time is the slowest process's median over the repetitions, each started after a barrier;
//! a brigade call is timed until its outputs are on the devices (`Device::wait`). `psum` is the
//! default exact exchange (every process's operand all-gathered and summed in global device order),
//! `psum fast` the `MPI_Allreduce` path (`distributed::set_fast`); the ratios divide by the bare
//! MPI call on the same bytes. The training step's communication is the time inside cross-process
//! exchanges (`distributed::counters().exchange_time`: device reads, MPI, combining, writes);
//! compute is the rest of the step. Process 0 prints the table, a `SPLIT` line per size (where
//! psum's time goes: the exchange, and the MPI waits within it), and `RATIO name value` lines for
//! tests.

use std::time::{Duration, Instant};

use brigade::{Array, Device, Result, Tensor, all_gather, device_put_sharded, pmap, psum};
use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::CommunicatorCollectives;

#[allow(dead_code)]
#[path = "multihost_training.rs"]
mod multihost_training;
use multihost_training::util;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// Repetitions for an operand of `bytes`: many for small ones (noisy), few for large ones.
fn reps(bytes: usize) -> usize {
    (16 * MIB / bytes).clamp(3, 20)
}

/// The slowest process's median of `times` (every process calls it: a collective).
fn slowest_median(world: &SimpleCommunicator, mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    let mine = times[times.len() / 2];
    let mut worst = 0.0f64;
    world.all_reduce_into(&mine, &mut worst, SystemOperation::max());
    worst
}

/// Time `f` `reps` times after one warm-up call, each run started after a barrier.
fn time(world: &SimpleCommunicator, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        world.barrier();
        let t0 = Instant::now();
        f()?;
        times.push(t0.elapsed().as_secs_f64());
    }
    Ok(slowest_median(world, times))
}

fn wait_all(devices: &[Device]) -> Result<()> {
    devices.iter().try_for_each(Device::wait)
}

fn ms(s: f64) -> String {
    format!("{:.3}", s * 1e3)
}

fn size_name(bytes: usize) -> String {
    match bytes {
        b if b >= MIB => format!("{} MiB", b / MIB),
        b => format!("{} KiB", b / KIB),
    }
}

fn main() -> Result<()> {
    brigade::distributed::initialize()?;
    let result = run(util::quick_requested());
    if let Err(e) = &result {
        // After a failed exchange MPI cannot finalize: leave with an error status at once.
        println!(
            "ERROR process {}: {e}",
            brigade::distributed::process_index()
        );
        std::process::exit(3);
    }
    brigade::distributed::shutdown();
    result
}

fn run(quick: bool) -> Result<()> {
    let world = SimpleCommunicator::world();
    let (p, count) = (
        brigade::distributed::process_index(),
        brigade::distributed::process_count(),
    );
    let devices = brigade::distributed::local_devices()?;
    let n = devices.len();
    let main = p == 0;
    if main {
        println!("{count} process(es) × {n} device(s): {}", devices[0].info());
        println!(
            "| size/device | psum ms | psum fast ms | MPI_Allreduce ms | psum ÷ bare | fast ÷ bare | all_gather ms | MPI_Allgather ms | all_gather ÷ bare |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
    }
    let sum = pmap(|a: &[Tensor]| vec![psum(&a[0], "i")])
        .axis_name("i")
        .devices(&devices);
    let gather = pmap(|a: &[Tensor]| vec![all_gather(&a[0], "i", 0, false)])
        .axis_name("i")
        .devices(&devices);
    // `--large`: only the sizes where the copies dominate (the long runs).
    let large = std::env::args().any(|a| a == "--large");
    let (min, max) = match (quick, large) {
        (true, _) => (0, MIB),
        (false, true) => (16 * MIB, 64 * MIB),
        (false, false) => (0, 64 * MIB),
    };
    let sizes = [KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB];
    for &bytes in sizes.iter().filter(|&&b| (min..=max).contains(&b)) {
        let elems = bytes / 4;
        let reps = reps(bytes);
        let shards = (0..n)
            .map(|d| Array::from_vec(util::data(elems, (p * n + d) as u32 + 1), &[elems]))
            .collect::<Result<Vec<_>>>()?;
        let x = device_put_sharded(&shards, &devices)?;
        let call = |f: &dyn Fn(&[Array]) -> Result<Vec<Array>>| {
            let out = f(std::slice::from_ref(&x))?;
            wait_all(&devices)?;
            drop(out);
            Ok(())
        };
        let before = brigade::distributed::counters();
        let exact = time(&world, reps, || call(&|a| sum.call(a)))?;
        let inside = brigade::distributed::counters().since(&before);
        brigade::distributed::set_fast(true);
        let before = brigade::distributed::counters();
        let fast = time(&world, reps, || call(&|a| sum.call(a)))?;
        let inside_fast = brigade::distributed::counters().since(&before);
        brigade::distributed::set_fast(false);
        let gathered = time(&world, reps, || call(&|a| gather.call(a)))?;
        // The bare calls move what one process contributes: its devices' operands.
        let send = shards
            .iter()
            .map(|s| s.to_vec::<f32>())
            .collect::<Result<Vec<_>>>()?
            .concat();
        let mut reduced = vec![0f32; send.len()];
        let bare_reduce = time(&world, reps, || {
            world.all_reduce_into(&send[..], &mut reduced[..], SystemOperation::sum());
            Ok(())
        })?;
        // The same all-reduce started nonblocking and polled with MPI_Test, as brigade waits.
        let bare_polled = time(&world, reps, || {
            mpi::request::scope(|scope| {
                let mut req = world.immediate_all_reduce_into(
                    scope,
                    &send[..],
                    &mut reduced[..],
                    SystemOperation::sum(),
                );
                while let Err(r) = req.test() {
                    req = r;
                }
            });
            Ok(())
        })?;
        let mut all = vec![0f32; send.len() * count];
        let bare_gather = time(&world, reps, || {
            world.all_gather_into(&send[..], &mut all[..]);
            Ok(())
        })?;
        if main {
            let (r_sum, r_fast, r_gather) = (
                exact / bare_reduce,
                fast / bare_reduce,
                gathered / bare_gather,
            );
            println!(
                "| {} | {} | {} | {} | {:.1} | {:.1} | {} | {} | {:.1} |",
                size_name(bytes),
                ms(exact),
                ms(fast),
                ms(bare_reduce),
                r_sum,
                r_fast,
                ms(gathered),
                ms(bare_gather),
                r_gather
            );
            // Where a call's time goes (this process's means over the calls, warm-up
            // included): the cross-process exchange (device reads, MPI, combining, writes) and,
            // within it, the waits on MPI.
            let calls = (reps + 1) as f64;
            let split = |c: &brigade::distributed::ExchangeCounters, t: f64| {
                format!(
                    "median {} ms, mean exchange {} ms of which MPI waits {} ms",
                    ms(t),
                    ms(c.exchange_time.as_secs_f64() / calls),
                    ms(c.mpi_time.as_secs_f64() / calls)
                )
            };
            println!(
                "SPLIT {}: psum {}; psum fast {}; MPI_Iallreduce polled by MPI_Test {} ms",
                size_name(bytes),
                split(&inside, exact),
                split(&inside_fast, fast),
                ms(bare_polled)
            );
            println!("RATIO psum_{bytes} {r_sum}");
            println!("RATIO psum_fast_{bytes} {r_fast}");
            println!("RATIO all_gather_{bytes} {r_gather}");
        }
    }
    training_step(&world, &devices, if quick { 3 } else { 10 })
}

/// Time `steps` training steps of `multihost_training` (after one warm-up step), split into the
/// cross-process exchanges and the rest.
fn training_step(world: &SimpleCommunicator, devices: &[Device], steps: usize) -> Result<()> {
    let (p, n) = (brigade::distributed::process_index(), devices.len());
    let (pixels, labels) = multihost_training::load()?;
    let (step, mut carried) = multihost_training::model(devices)?;
    let mut run = |s: usize| -> Result<()> {
        let mut args = carried.clone();
        args.extend(multihost_training::batch(&pixels, &labels, s, p * n, n)?);
        let mut out = step.call(&args)?;
        out.pop();
        wait_all(devices)?;
        carried = out;
        Ok(())
    };
    run(0)?;
    let mut totals = Vec::with_capacity(steps);
    let mut comms = Vec::with_capacity(steps);
    for s in 1..=steps {
        world.barrier();
        let before = brigade::distributed::counters();
        let t0 = Instant::now();
        run(s)?;
        totals.push(t0.elapsed().as_secs_f64());
        let c = brigade::distributed::counters().since(&before);
        comms.push(c.exchange_time.as_secs_f64());
    }
    let computes: Vec<f64> = totals.iter().zip(&comms).map(|(t, c)| t - c).collect();
    let (total, comm, compute) = (
        slowest_median(world, totals),
        slowest_median(world, comms),
        slowest_median(world, computes),
    );
    if p == 0 {
        println!(
            "training step (multihost_training's MLP, batch {}): {} ms = compute {} ms + communication {} ms ({:.0} % communication; medians of {steps}, slowest process)",
            multihost_training::BATCH,
            ms(total),
            ms(compute),
            ms(comm),
            100.0 * comm / total.max(Duration::from_nanos(1).as_secs_f64())
        );
        println!("RATIO step_comm_share {}", comm / total);
    }
    Ok(())
}
