//! Counting the chefs: which devices brigade sees, how to force a layout, and one `pmap` roll call
//! per layout in which every chef (device) reports its index and the banquet's total.
//!
//! ```sh
//! cargo run --release --example devices
//! BRIGADE_DEVICES=vulkan:4 cargo run --release --example devices     # four chefs on one adapter
//! BRIGADE_DEVICES=vulkan:1,gl:1 cargo run --release --example devices
//! BRIGADE_DEVICES=cpu:4 cargo run --release --example devices        # no GPU needed
//! ```
//!
//! In the tutorial Lao Zhang first counts his chefs (`jax.devices()`) before handing out the 1000
//! orders of the wedding banquet. Here `brigade::devices()` is that count; each chef then serves
//! 250 tables, `axis_index` is the chef's badge number and `psum` is the evening report to
//! headquarters, which every chef receives back. Every number printed is checked against plain
//! host loops; the example exits with status 1 if any differs.

use brigade::{DType, Device, Error, Result, Runtime, Tensor, axis_index, pmap, psum};

/// Tables each chef serves: four chefs make the tutorial's 1000-table banquet.
const TABLES_PER_CHEF: usize = 250;

/// The bill of table `t` (numbered across the whole banquet), in yuan: integers, so the sums
/// are exact on every device and in any order.
fn bill(t: usize) -> i32 {
    80 + ((t * 7919 + 13) % 421) as i32
}

/// List the devices and adapters of the global runtime, then run the roll call on it and on a few
/// forced layouts. Returns false if any chef's report differs from the host computation.
pub fn run(quick: bool) -> Result<bool> {
    let rt = Runtime::global()?;
    println!(
        "The global runtime (layout `{}`) sees {} adapter(s):",
        rt.layout(),
        rt.adapters().len()
    );
    for a in rt.adapters() {
        println!("  {a}");
    }
    let devices = brigade::devices()?;
    println!("and made {} device(s), brigade::devices():", devices.len());
    for d in &devices {
        println!("  {}", d.info());
    }
    println!(
        "\nForce a layout with the environment variable BRIGADE_DEVICES (like JAX's forced host device count):\n  \
         BRIGADE_DEVICES=vulkan:4       four logical devices on the first Vulkan adapter\n  \
         BRIGADE_DEVICES=vulkan:1,gl:1  one Vulkan and one GL device, in that order\n  \
         BRIGADE_DEVICES=cpu:4          four cpu devices (the reference interpreter; no GPU needed)\n  \
         BRIGADE_DEVICES=3              three devices on the preferred adapter\n\
         or in code: Runtime::builder().layout_str(\"vulkan:2\").build()."
    );

    let mut ok = roll_call("the global runtime", &devices)?;

    // Forced layouts, built in this process next to the global runtime. A machine without the
    // backend a layout names, or whose driver for it gives no device, skips it with a note: this
    // example runs anywhere.
    let layouts: &[&str] = if quick {
        &["vulkan:2", "cpu:4"]
    } else {
        &["vulkan:2", "vulkan:1,gl:1", "cpu:4"]
    };
    for spec in layouts {
        let built = pollster::block_on(
            Runtime::builder()
                .layout_str(spec)
                .allow_cpu_fallback(false)
                .build(),
        );
        match built {
            Ok(rt) => ok &= roll_call(&format!("layout `{spec}`"), rt.devices())?,
            Err(Error::NoDevice(why)) => {
                println!("\nLayout `{spec}`: skipped, this machine cannot build it ({why})")
            }
            // The adapter is there but its driver gave no device (wgpu's GL on NVIDIA's Linux
            // driver, for one): the same, said as it is.
            Err(e @ Error::Wgpu { .. }) => {
                println!("\nLayout `{spec}`: skipped, an adapter it names gave no device ({e})")
            }
            Err(e) => return Err(e),
        }
    }
    Ok(ok)
}

/// One `pmap` over `devices`: chef `i` gets row `i` of the bills, reports its badge number
/// (`axis_index`) and takings, and receives the banquet's total takings and tables (`psum`).
fn roll_call(title: &str, devices: &[Device]) -> Result<bool> {
    let n = devices.len();
    let bills: Vec<i32> = (0..n * TABLES_PER_CHEF).map(bill).collect();
    let x = brigade::Array::from_vec(bills.clone(), &[n, TABLES_PER_CHEF])?;
    let report = pmap(|a: &[Tensor]| {
        let takings = a[0].sum_all();
        let served = a[0].gt(&Tensor::scalar(0i32)).cast(DType::I32).sum_all();
        vec![
            axis_index("chefs"),
            takings.clone(),
            psum(&takings, "chefs"),
            psum(&served, "chefs"),
        ]
    })
    .axis_name("chefs")
    .devices(devices)
    .named("roll call");
    let out = report.call(&[x])?;
    let [badge, takings, total, tables] = [0, 1, 2, 3].map(|k| out[k].to_vec::<i32>());
    let (badge, takings, total, tables) = (badge?, takings?, total?, tables?);

    // The host's books: plain loops over the same bills.
    let want_takings: Vec<i32> = bills
        .chunks(TABLES_PER_CHEF)
        .map(|row| row.iter().sum())
        .collect();
    let want_total: i32 = bills.iter().sum();

    println!(
        "\nRoll call on {title}: {n} chef(s), {TABLES_PER_CHEF} tables each ({} tables)",
        n * TABLES_PER_CHEF
    );
    let mut ok = true;
    for (i, d) in devices.iter().enumerate() {
        let good = badge[i] == i as i32
            && takings[i] == want_takings[i]
            && total[i] == want_total
            && tables[i] == (n * TABLES_PER_CHEF) as i32;
        ok &= good;
        let info = d.info();
        println!(
            "  {} chef {i} on {} [{}]: axis_index {}, takings {} yuan (host {}), psum: banquet {} yuan (host {}) over {} tables",
            mark(good),
            info.adapter_name,
            info.backend,
            badge[i],
            takings[i],
            want_takings[i],
            total[i],
            want_total,
            tables[i]
        );
    }
    Ok(ok)
}

fn mark(ok: bool) -> &'static str {
    if ok { "✓" } else { "✗" }
}

/// `--quick` or `BRIGADE_QUICK=1`: fewer forced layouts.
fn quick_requested() -> bool {
    std::env::args().any(|a| a == "--quick")
        || std::env::var("BRIGADE_QUICK").is_ok_and(|v| v == "1")
}

fn main() -> Result<()> {
    let ok = run(quick_requested())?;
    println!(
        "\n{}",
        if ok {
            "every chef's report matches the host's books ✓"
        } else {
            "SOME REPORTS DIFFER ✗"
        }
    );
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
