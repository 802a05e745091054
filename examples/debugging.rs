//! Debugging a parallel program: the tutorial's three common pmap errors reproduced, each with the
//! error brigade gives and the fix, then the tutorial's advice "先单卡跑通" — run the same program
//! on one device first.
//!
//! ```sh
//! cargo run --release --example debugging
//! ```
//!
//! 1. The batch does not divide over the devices: a typed error names the sizes, the device counts
//!    that work and the padded size; padding fixes it.
//! 2. A host `if` on a traced value: reading a traced value is an error that says to use `cond`
//!    (or `select`/`where_` per element); the same choice written with `cond` runs, each device
//!    taking its own branch.
//! 3. One random key on every device: identical noise everywhere; split keys give each device its
//!    own.
//! 4. `debug_print` inside the pmap-ed function: every device reports its own values, tagged with
//!    its device and axis index, in device order (the tutorial's walkie-talkie per chef).
//! 5. Fallback: `Parallel::emulate` runs the pmap-ed function on one device (vmap over the same
//!    axis name) with the same results.

use brigade::{
    Array, Error, Result, Tensor, capture_debug_prints, cond, debug_print, pmap, psum, random,
    shard_map,
};

/// Every scenario; false if one does not behave as described.
pub fn run(_quick: bool) -> Result<bool> {
    let devices = brigade::devices()?;
    let n = devices.len();
    let mut ok = true;

    // 1. A batch that does not divide over the devices.
    println!("1. batch size not divisible by the device count");
    let rows = 4 * n + 1;
    let x = Array::from_vec(
        (0..rows * 2).map(|v| v as f32).collect::<Vec<f32>>(),
        &[rows, 2],
    )?;
    let f = shard_map(|a: &[Tensor]| vec![psum(&a[0].sum(0, false), "i")])
        .axis_name("i")
        .out_axes(&[None]);
    let split_hit = match f.call(std::slice::from_ref(&x)) {
        Err(e @ Error::IndivisibleSplit { .. }) if n > 1 => {
            println!("   error: {e}");
            true
        }
        Err(e) => {
            println!("   unexpected error: {e}");
            false
        }
        // One device divides everything.
        Ok(_) => n == 1,
    };
    // The fix: pad the batch with rows that do not change the result (zeros for a sum).
    let padded_rows = rows.div_ceil(n) * n;
    let mut data = x.to_vec::<f32>()?;
    data.resize(padded_rows * 2, 0.0);
    let padded = Array::from_vec(data, &[padded_rows, 2])?;
    let total = f.call(std::slice::from_ref(&padded))?[0].to_vec::<f32>()?;
    let want: Vec<f32> = (0..2)
        .map(|c| (0..rows).map(|r| (r * 2 + c) as f32).sum())
        .collect();
    let fixed = total == want;
    println!(
        "   fix: pad {rows} rows to {padded_rows} with zeros: column sums {total:?} {}",
        if fixed { "✓" } else { "✗" }
    );
    ok &= split_hit && fixed;

    // 2. A host `if` on a traced value.
    println!("2. a host `if` on a traced value");
    let x = Array::from_vec(
        (0..n * 3).map(|v| v as f32 - 2.0).collect::<Vec<f32>>(),
        &[n, 3],
    )?;
    let branchy = pmap(|a: &[Tensor]| {
        // Reading the value to branch on it on the host cannot work while tracing: the read
        // fails, and so does the call.
        let total = a[0].sum_all();
        let positive = total
            .to_array()
            .and_then(|t| t.item())
            .is_ok_and(|v| v.as_f64() > 0.0);
        vec![if positive { a[0].clone() } else { -&a[0] }]
    });
    let traced_hit = match branchy.call(std::slice::from_ref(&x)) {
        Err(e @ Error::TracedValue { .. }) => {
            println!("   error: {e}");
            true
        }
        other => {
            println!(
                "   expected a TracedValue error, got {:?}",
                other.map(|v| v.len())
            );
            false
        }
    };
    // The fix (the tutorial's `lax.cond`): the choice is staged into the program.
    let selecty = pmap(|a: &[Tensor]| {
        let positive = a[0].sum_all().gt(&Tensor::scalar(0.0f32));
        cond(&positive, |x| vec![x[0].clone()], |x| vec![-&x[0]], &a[..1])
    });
    let got = selecty.call(std::slice::from_ref(&x))?[0].to_vec::<f32>()?;
    let xs = x.to_vec::<f32>()?;
    let want: Vec<f32> = xs
        .chunks(3)
        .flat_map(|row| {
            let s: f32 = row.iter().sum();
            row.iter().map(move |&v| if s > 0.0 { v } else { -v })
        })
        .collect();
    let select_ok = got == want;
    println!(
        "   fix: cond(sum > 0, x, -x) per device gives {got:?} {}",
        if select_ok { "✓" } else { "✗" }
    );
    ok &= traced_hit && select_ok;

    // 3. One key on every device.
    println!("3. the same random key on every device");
    let noise = pmap(|a: &[Tensor]| vec![random::normal(&a[0], &[4])]);
    let one_key = brigade::device_put_replicated(&random::key(0).to_array()?, &devices)?;
    let same = noise.call(std::slice::from_ref(&one_key))?[0].to_vec::<f32>()?;
    let all_same = same.chunks(4).all(|c| c == &same[..4]);
    println!(
        "   one key replicated: every device draws {:?} {}",
        &same[..4],
        if all_same {
            "(identical noise, as the tutorial warns) ✓"
        } else {
            "✗"
        }
    );
    let keys = random::split(&random::key(0), n).to_array()?;
    let own = noise.call(std::slice::from_ref(&keys))?[0].to_vec::<f32>()?;
    let distinct = n == 1
        || own
            .chunks(4)
            .enumerate()
            .all(|(i, c)| own.chunks(4).skip(i + 1).all(|d| d != c));
    println!(
        "   fix: split(key, {n}) sharded over the devices: every device draws its own noise {}",
        if distinct { "✓" } else { "✗" }
    );
    ok &= all_same && distinct;

    // 4. Print from inside the parallel program.
    println!("4. debug_print on every device");
    let talk = pmap(|a: &[Tensor]| {
        let mine = a[0].sum_all();
        debug_print(
            "my rows sum to {}, all rows to {}",
            &[&mine, &psum(&mine, "i")],
        );
        vec![mine]
    })
    .axis_name("i")
    .devices(&devices);
    let (res, lines) = capture_debug_prints(|| talk.call(std::slice::from_ref(&x)));
    res?;
    for l in &lines {
        println!("   {l}");
    }
    let sums: Vec<f32> = xs.chunks(3).map(|r| r.iter().sum()).collect();
    let total: f32 = sums.iter().sum();
    let in_order = lines.len() == n
        && lines.iter().enumerate().all(|(d, l)| {
            l.starts_with(&format!("[{}:{d} i={d}]", devices[d].info().backend))
                && l.ends_with(&format!("my rows sum to {}, all rows to {total}", sums[d]))
        });
    println!(
        "   one line per device, in device order, with each device's own sum {}",
        if in_order { "✓" } else { "✗" }
    );
    ok &= in_order;

    // 5. Fall back to one device.
    println!("5. run it on one device first (the single-device fallback)");
    let program = pmap(|a: &[Tensor]| vec![&a[0] - &psum(&a[0], "i") / n as f32])
        .axis_name("i")
        .devices(&devices);
    let real = program.call(std::slice::from_ref(&x))?[0].to_vec::<f32>()?;
    let emulated = program.emulate(&devices[0], std::slice::from_ref(&x))?[0].to_vec::<f32>()?;
    let agree = real == emulated;
    println!(
        "   pmap over {n} device(s) and its emulation on device 0 agree bit for bit {}",
        if agree { "✓" } else { "✗" }
    );
    ok &= agree;
    Ok(ok)
}

fn main() -> Result<()> {
    let ok = run(false)?;
    println!(
        "\n{}",
        if ok {
            "every scenario behaves as described ✓"
        } else {
            "SOME SCENARIOS DIFFER ✗"
        }
    );
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
