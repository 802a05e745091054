//! The tutorial's "matrix soup" (并行矩阵运算): C = A @ B with A cut into row blocks, one per chef
//! (device), and B broadcast whole to every chef. Each chef computes its block A_i @ B; the blocks
//! are stacked back into C.
//!
//! ```sh
//! cargo run --release --example parallel_matmul              # every device of this machine
//! BRIGADE_DEVICES=vulkan:4 cargo run --release --example parallel_matmul
//! cargo run --example parallel_matmul -- --quick              # tiny sweep (or BRIGADE_QUICK=1)
//! ```
//!
//! For each size n it times one device (`jit`) against all devices (`shard_map` with
//! `in_axes(&[Some(0), None])`), every call including the upload of A and B and the read-back of C,
//! and checks the split result against the single-device one: bit for bit when every device is the
//! same kind of adapter (the same kernel sums each element in the same order), else within a
//! stated tolerance. A few rows are also checked against a plain f64 loop on the host. Then it
//! shows why splitting pays only for large n: compute grows as n³, transfers as n².

use std::time::{Duration, Instant};

use brigade::{Array, Device, Result, Tensor, counters, jit, shard_map};

#[allow(dead_code)]
#[path = "common/util.rs"]
mod util;
use util::data;
pub use util::quick_requested;

/// Relative tolerance (to the largest |value|) between devices of different adapter types, and
/// between the device result and the f64 host rows: f32 sums of up to 1024 products.
const TOL: f64 = 1e-5;

/// Median wall time of `reps` calls of each of `fs`. The calls are interleaved (every round runs
/// each function once) so that a change in the machine's load affects them all alike.
fn medians<const K: usize>(
    reps: usize,
    mut fs: [&mut dyn FnMut() -> Result<()>; K],
) -> Result<[Duration; K]> {
    let mut times = [(); K].map(|_| Vec::with_capacity(reps));
    for _ in 0..reps {
        for (f, t) in fs.iter_mut().zip(&mut times) {
            let start = Instant::now();
            f()?;
            t.push(start.elapsed());
        }
    }
    Ok(times.map(|mut t| {
        t.sort();
        t[reps / 2]
    }))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Largest |got - want| relative to the largest |want|.
fn max_rel_err(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .map(|(g, w)| (*g as f64 - w).abs() / scale)
        .fold(0.0, f64::max)
}

/// One measured size.
struct Row {
    n: usize,
    transfer: Duration,
    single: Duration,
    split: Duration,
}

/// Sweep n, time one device against all devices, check every result. Returns false on a mismatch.
pub fn run(quick: bool) -> Result<bool> {
    let devices = brigade::devices()?;
    let k = devices.len();
    let one = &devices[0];
    let same_kind = devices.iter().all(|d| {
        d.info().backend == one.info().backend && d.info().adapter_name == one.info().adapter_name
    });
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    println!(
        "Row-split matmul: A (n×n) cut into {k} row blocks, B (n×n) sent whole to each of {k} device(s):"
    );
    for d in &devices {
        println!("  {}", d.info());
    }
    println!(
        "check: split result vs one device {}; 8 rows vs an f64 host loop (tol {TOL:.0e})",
        if same_kind {
            "bit for bit (every device is the same adapter type)".to_string()
        } else {
            format!(
                "within {TOL:.0e} of the largest |value| (the devices are different adapter types)"
            )
        }
    );

    let single = jit(|a: &[Tensor]| vec![a[0].matmul(&a[1])])
        .named("matmul")
        .on(one);
    let split = shard_map(|a: &[Tensor]| vec![a[0].matmul(&a[1])])
        .in_axes(&[Some(0), None])
        .devices(&devices)
        .named("row-split matmul");

    let sizes: &[usize] = if quick {
        &[32, 64, 128]
    } else {
        &[64, 128, 256, 512, 1024]
    };
    // Stop the sweep before a size whose single-device call is predicted (n³ from the last size)
    // to take longer than this: the cpu device and slow adapters stay quick too.
    let budget = Duration::from_secs(if quick { 1 } else { 3 });

    println!(
        "\ntimes: median of a few warm calls (interleaved), each with the upload of A and B and the \
         read-back of C; MB moved: what the split call copies (A once, B to every device, C back);\n\
         transfer: one device's copies without the matmul; comp/xfer: (1 device - transfer) / transfer\n"
    );
    println!(
        "{:>5} {:>8} {:>10} {:>11} {:>11} {:>11} {:>8} {:>9}  check",
        "n",
        "GFLOP",
        "MB moved",
        "transfer",
        "1 device",
        format!("{k} devices"),
        "speed-up",
        "comp/xfer"
    );
    let mut ok = true;
    let mut rows: Vec<Row> = Vec::new();
    for &n0 in sizes {
        // Round up so that the rows split evenly over the devices.
        let n = n0.div_ceil(k) * k;
        if let Some(last) = rows.last() {
            let predicted = last.single.mul_f64((n as f64 / last.n as f64).powi(3));
            if predicted > budget {
                println!(
                    "{n:>5}  skipped: one call would take about {:.1} s on one device here",
                    predicted.as_secs_f64()
                );
                break;
            }
        }
        let a_host = data(n * n, n as u32);
        let b_host = data(n * n, n as u32 + 1);
        let a = Array::from_vec(a_host.clone(), &[n, n])?;
        let b = Array::from_vec(b_host.clone(), &[n, n])?;
        let args = [a.clone(), b.clone()];

        // Warm up: trace, compile, fill the buffer pools.
        single.call(&args)?[0].to_vec::<f32>()?;
        split.call(&args)?[0].to_vec::<f32>()?;

        let reps = if n >= 512 || quick { 3 } else { 5 };
        let (mut c1, mut c2, mut bytes) = (Vec::new(), Vec::new(), 0u64);
        let [t_single, t_split, t_transfer] = medians(
            reps,
            [
                &mut || {
                    c1 = single.call(&args)?[0].to_vec::<f32>()?;
                    Ok(())
                },
                &mut || {
                    let before = counters();
                    c2 = split.call(&args)?[0].to_vec::<f32>()?;
                    let moved = counters().since(&before);
                    bytes = moved.bytes_uploaded + moved.bytes_downloaded;
                    Ok(())
                },
                // What one device's call moves, without the compute: A and B up, an n×n array back.
                &mut || {
                    let ad = a.to_device(one)?;
                    b.to_device(one)?;
                    ad.to_vec::<f32>()?;
                    Ok(())
                },
            ],
        )?;

        // Checks: split vs single device, and 8 rows of the single-device result vs f64 loops.
        let (split_ok, split_note) = if same_kind {
            let same =
                c1.len() == c2.len() && c1.iter().zip(&c2).all(|(x, y)| x.to_bits() == y.to_bits());
            (
                same,
                if same {
                    "bitwise".to_string()
                } else {
                    "NOT bitwise".to_string()
                },
            )
        } else {
            let want: Vec<f64> = c1.iter().map(|&v| v as f64).collect();
            let err = max_rel_err(&c2, &want);
            (err <= TOL, format!("rel err {err:.1e}"))
        };
        let sample: Vec<usize> = (0..8).map(|i| i * (n - 1) / 7).collect();
        let mut got = Vec::new();
        let mut want = Vec::new();
        for &r in &sample {
            for j in 0..n {
                got.push(c1[r * n + j]);
                want.push(
                    (0..n)
                        .map(|t| a_host[r * n + t] as f64 * b_host[t * n + j] as f64)
                        .sum::<f64>(),
                );
            }
        }
        let host_err = max_rel_err(&got, &want);
        let good = split_ok && host_err <= TOL;
        ok &= good;

        let row = Row {
            n,
            transfer: t_transfer,
            single: t_single,
            split: t_split,
        };
        // The cpu device computes in host memory: nothing to copy, no ratio to show.
        let (transfer, comp_xfer) = if one.is_cpu() {
            ("—".to_string(), "—".to_string())
        } else {
            (
                format!("{:.2} ms", ms(t_transfer)),
                format!("{:.1}", ratio(&row)),
            )
        };
        println!(
            "{n:>5} {:>8.3} {:>10.2} {transfer:>11} {:>8.2} ms {:>8.2} ms {:>7.2}× {comp_xfer:>9}  {} {split_note}, host rows {host_err:.1e}",
            2.0 * (n as f64).powi(3) / 1e9,
            bytes as f64 / 1e6,
            ms(t_single),
            ms(t_split),
            speed_up(&row),
            if good { "✓" } else { "✗" }
        );
        rows.push(row);
    }
    explain(&rows, &devices, cores);
    Ok(ok)
}

/// Where splitting stops and starts paying, from the measured rows.
fn explain(rows: &[Row], devices: &[Device], cores: usize) {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return;
    };
    let k = devices.len();
    let grow = last.n as f64 / first.n as f64;
    println!(
        "\nWhy splitting pays only for big pots: from n={} to n={} the work (2n³ flops) grew {:.0}× \
         but the data (3n² floats for one device, {}n² with B copied to each of {k} devices) only {:.0}×.",
        first.n,
        last.n,
        grow.powi(3),
        k + 2,
        grow.powi(2)
    );
    let single = format!(
        "one device's call grew {:.0}× ({:.2} → {:.2} ms)",
        last.single.as_secs_f64() / first.single.as_secs_f64(),
        ms(first.single),
        ms(last.single)
    );
    if devices[0].is_cpu() {
        println!(
            "Measured here: {single}; the cpu device computes in host memory, so nothing is copied."
        );
    } else {
        println!(
            "Measured here: {single} while the transfer round trip grew {:.0}× ({:.2} → {:.2} ms); \
             compute per transfer time went from {:.1} to {:.1}.",
            last.transfer.as_secs_f64() / first.transfer.as_secs_f64(),
            ms(first.transfer),
            ms(last.transfer),
            ratio(first),
            ratio(last)
        );
    }
    if k == 1 {
        println!(
            "With one device there is nobody to split with: try BRIGADE_DEVICES=vulkan:2 or cpu:4."
        );
        return;
    }
    // Speed-ups within 10% of 1 are call-to-call noise on a shared machine.
    let group = |keep: &dyn Fn(f64) -> bool| -> String {
        rows.iter()
            .filter(|r| keep(speed_up(r)))
            .map(|r| format!("n={} ({:.2}×)", r.n, speed_up(r)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let lost = group(&|s| s < 0.9);
    let even = group(&|s| (0.9..=1.1).contains(&s));
    let paid = group(&|s| s > 1.1);
    let software = devices
        .iter()
        .all(|d| d.is_cpu() || d.info().device_type == "cpu");
    if !lost.is_empty() {
        println!(
            "Splitting over {k} devices lost at {lost}: the fixed cost of driving {k} devices and \
             copying B {k} times{} outweighed the compute saved.",
            if software {
                ", and here the devices competing for the same CPU cores,"
            } else {
                ""
            }
        );
    }
    if !even.is_empty() {
        println!("It broke even (within 10%) at {even}.");
    }
    if !paid.is_empty() {
        println!("It paid at {paid}: there the compute saved outweighs the extra copies.");
    }
    if devices.iter().all(|d| d.is_cpu()) {
        println!(
            "Note: cpu devices run the reference interpreter one after another on the calling \
             thread, so {k} of them take as long as one: they show that the split is right, not \
             that it is fast."
        );
    } else if software {
        println!(
            "Note: every device here is a software driver (lavapipe/llvmpipe) on the same {cores} CPU \
             core(s), so the chefs share one stove: one device already spreads its work over the \
             cores, and a speed-up here comes from how the drivers schedule their threads (and the \
             machine's other load), not from added hardware. On {k} real GPUs the compute part \
             divides by {k}."
        );
    }
}

fn speed_up(r: &Row) -> f64 {
    r.single.as_secs_f64() / r.split.as_secs_f64()
}

/// Compute time (one device's call minus its transfer round trip) per transfer time.
fn ratio(r: &Row) -> f64 {
    r.single.saturating_sub(r.transfer).as_secs_f64() / r.transfer.as_secs_f64().max(1e-9)
}

fn main() -> Result<()> {
    let ok = run(quick_requested())?;
    println!(
        "\n{}",
        if ok {
            "every product matches ✓"
        } else {
            "SOME PRODUCTS DIFFER ✗"
        }
    );
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
