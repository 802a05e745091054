//! Device planning: how many chefs does a banquet need? `N = ceil(B_total / b_cap)`, where `b_cap`
//! is the most examples one device can take — from the device's real limits and the function's
//! memory per example, measured by compiling it (`brigade::plan`); with `BRIGADE_MEMORY_LIMIT` set,
//! the memory budget caps the batch too.
//!
//! ```sh
//! cargo run --release --example device_planning
//! ```
//!
//! The check: the batched function really runs with `b_cap` examples on the device, and one more
//! example is refused with a typed over-limit error naming the sizes (never a driver crash).

use brigade::{Aval, DType, Error, Result, Tensor, jit, plan, random, vmap};

/// Per example: the outer product of a feature vector with itself, then a row softmax — a layer
/// whose memory grows with the square of the features.
fn layer(a: &[Tensor]) -> Vec<Tensor> {
    let n = a[0].shape()[0] as i64;
    let v = a[0].reshape(&[n, 1]);
    vec![v.matmul(&v.reshape(&[1, n])).softmax(-1)]
}

/// Plan, then check the cap on the device; false if the check fails.
pub fn run(quick: bool) -> Result<bool> {
    let dev = brigade::devices()?[0].clone();
    let features = if quick { 256 } else { 512 };
    let banquet = 1_000_000;
    let p = plan(
        layer,
        &[Aval::new(vec![features], DType::F32)],
        banquet,
        &dev,
    )?;
    println!("device: {}", dev.info());
    println!("plan for {banquet} examples of {features} features: {p}");
    println!(
        "  N = ceil(B_total / b_cap) = ceil({banquet} / {}) = {}",
        p.batch_cap, p.devices_needed
    );
    if dev.is_cpu() {
        println!("  (the cpu device has no binding limit to check)");
        return Ok(true);
    }
    // b_cap examples run with every buffer inside one storage binding; past it the output is
    // stored and computed in segments (or, past a memory budget, refused).
    let batched = vmap(layer).on(&dev);
    let fits = random::normal(&random::key(3), &[p.batch_cap, features]).to_array()?;
    let ran = batched.call(std::slice::from_ref(&fits))?;
    // Row sums on the device: the output fills the binding limit, reading it all back is not needed.
    let row_sums = jit(|a: &[Tensor]| vec![a[0].sum(-1, false)]).on(&dev);
    let sums = row_sums.call(&ran)?[0].to_host()?;
    let rows_ok = sums.to_f64().iter().all(|s| (s - 1.0).abs() < 1e-3);
    println!(
        "  {} examples ran on the device: output {:?}, every one of its {} softmax rows sums to 1 {}",
        p.batch_cap,
        ran[0].shape(),
        sums.len(),
        if rows_ok { "✓" } else { "✗" }
    );
    // The cap is planned for a device holding nothing else.
    drop((ran, fits));
    let over = random::normal(&random::key(4), &[p.batch_cap + 1, features]).to_array()?;
    // Over the binding limit the output no longer fits one binding: it is stored in one buffer
    // and bound in segments (slower, but it runs). Over a memory budget (BRIGADE_MEMORY_LIMIT),
    // when that is the tighter cap, it is out of memory.
    let by_budget = p.budget_cap.is_some_and(|c| c < p.binding_cap);
    let limit = dev.limits().max_storage_buffer_binding_size;
    let past = match batched.call(std::slice::from_ref(&over)) {
        Err(e @ Error::OutOfMemory { .. }) if by_budget => {
            println!("  {} examples are refused ✓:\n    {e}", p.batch_cap + 1);
            true
        }
        Ok(out) if !by_budget => {
            let bytes = out[0].size() as u64 * 4;
            let sums = row_sums.call(&out)?[0].to_host()?;
            let ok = bytes > limit && sums.to_f64().iter().all(|s| (s - 1.0).abs() < 1e-3);
            println!(
                "  {} examples ran with the output ({bytes} B) past one binding ({limit} B), stored and reduced in segments; rows sum to 1 {}",
                p.batch_cap + 1,
                if ok { "✓" } else { "✗" }
            );
            ok
        }
        Err(e) => {
            println!("  {} examples failed ✗: {e}", p.batch_cap + 1);
            false
        }
        Ok(_) => {
            println!(
                "  {} examples ran past the budget cap: the cap is not tight ✗",
                p.batch_cap + 1
            );
            false
        }
    };
    Ok(rows_ok && past)
}

fn main() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick")
        || std::env::var("BRIGADE_QUICK").is_ok_and(|v| v == "1");
    if !run(quick)? {
        println!("\nTHE PLAN DOES NOT HOLD ✗");
        std::process::exit(1);
    }
    println!("\nthe plan holds ✓");
    Ok(())
}
