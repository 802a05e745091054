//! The tutorial's Python demo, ported line by line, then what JAX-exact `pmap` says to the same
//! calls.
//!
//! ```sh
//! cargo run --release --example seed_demo
//! BRIGADE_DEVICES=vulkan:4 cargo run --release --example seed_demo   # the tutorial's four chefs
//! ```
//!
//! The demo describes pmap as *splitting* a batch over the devices (each chef takes a block of the
//! 1000 tables). That is split mode here (`shard_map`, as in JAX); real `jax.pmap` maps one entry
//! per device, so the demo's calls fail in JAX. Part 1 runs the demo as the tutorial means it and
//! checks every result; part 2 makes the same calls with JAX-exact `pmap` and prints the errors,
//! each with its fix.
//!
//! Two departures, both for honest checks: the tutorial multiplies all-zero matrices and starts
//! gradient descent at w = 0, where this loss has a zero gradient; here A and B are random and w
//! starts away from zero, so every printed result says something.

use brigade::random;
use brigade::{Array, Device, HostArray, Result, Tensor, grad, jit, pmap, shard_map, vmap};

/// Part 1 and part 2; false if any result differs from its check.
pub fn run(quick: bool) -> Result<bool> {
    // 1. How many devices (chefs) are there?
    let devices = brigade::devices()?;
    let n_dev = devices.len();
    println!("可用设备数量 (devices available): {n_dev}");
    for d in &devices {
        println!("  {}", d.info());
    }
    let mut ok = true;

    // 2. Row-split matmul: A's rows cut into one block per device, B sent whole to every device.
    let (m, k, n) = if quick {
        (512, 64, 512)
    } else {
        (4096, 64, 4096)
    };
    let m = m - m % n_dev; // the blocks must be equal
    let a = random::uniform(&random::key(1), &[m, k], -1.0, 1.0).to_array()?;
    let b = random::uniform(&random::key(2), &[k, n], -1.0, 1.0).to_array()?;
    let matmul_row = shard_map(|x: &[Tensor]| vec![x[0].matmul(&x[1])]).in_axes(&[Some(0), None]);
    let c = matmul_row.call(&[a.clone(), b.clone()])?;
    println!(
        "并行矩阵乘法结果形状 (row-split matmul result shape): {:?}  ({} rows per device)",
        c[0].shape(),
        m / n_dev
    );
    // Check: the same product on one device. The kernels are the same WGSL, so on devices of one
    // adapter type the bits agree; across adapter types, the values agree to rounding.
    let one = jit(|x: &[Tensor]| vec![x[0].matmul(&x[1])]).on(&devices[0]);
    let want = one.call(&[a.clone(), b.clone()])?[0].to_host()?;
    let got = c[0].to_host()?;
    ok &= report(
        "C = A @ B equals the single-device product",
        &got,
        &want,
        same_adapter(&devices),
    );

    // 3. pmap(vmap(block_fn)): each device takes a block of rows, vmap runs block_fn on each row.
    let x = Array::from_vec((0..32).map(|v| v as f32).collect::<Vec<f32>>(), &[8, 4])?;
    let rows = if 8 % n_dev == 0 { n_dev } else { 1 };
    let y = shard_map(|b: &[Tensor]| vmap(|r: &[Tensor]| vec![&r[0] * 2.0]).apply(b))
        .axis_size(rows)
        .call(std::slice::from_ref(&x))?;
    println!(
        "vmap+pmap 组合结果形状 (vmap inside the split map): {:?}",
        y[0].shape()
    );
    let doubled: Vec<f32> = (0..32).map(|v| 2.0 * v as f32).collect();
    ok &= report(
        "Y = 2·X",
        &y[0].to_host()?,
        &HostArray::from_vec(doubled, &[8, 4])?,
        true,
    );

    // 4. One data-parallel gradient step: each device computes the gradient on its block of the
    //    batch, the gradients are averaged (the tutorial's jnp.mean over the device axis), w moves.
    let x_data = random::normal(&random::key(0), &[1024, 4]).to_array()?;
    let w0 = Array::from_vec(vec![0.5f32, -0.25, 1.0, 0.125], &[4, 1])?;
    let loss = |p: &[Tensor]| vec![p[1].matmul(&p[0]).square().mean_all()];
    let per_device = 1024 / n_dev;
    let x_batch = x_data.to_host()?;
    let x_batch = Array::from_vec(
        x_batch.to_vec::<f32>()?[..n_dev * per_device * 4].to_vec(),
        &[n_dev, per_device, 4],
    )?;
    let grads = pmap(move |p: &[Tensor]| grad(loss).apply(p))
        .in_axes(&[None, Some(0)])
        .call(&[w0.clone(), x_batch.clone()])?;
    println!(
        "每台设备的梯度形状 (gradients, one per device): {:?}",
        grads[0].shape()
    );
    let step = jit(|p: &[Tensor]| vec![&p[0] - &(p[1].mean(0, false) * 0.01)]);
    let w = step.call(&[w0.clone(), grads[0].clone()])?;
    println!("训练后参数形状 (w after one step): {:?}", w[0].shape());
    // Check against the gradient written out on the host in f64: d/dw mean((x w)^2) =
    // 2/N xᵀ(x w) per device block, averaged over the devices.
    let xs = x_batch.to_host()?.to_f64();
    let w0v: Vec<f64> = w0.to_host()?.to_f64();
    let mut g = [0.0f64; 4];
    for dev in 0..n_dev {
        for r in 0..per_device {
            let row = &xs[(dev * per_device + r) * 4..][..4];
            let pred: f64 = (0..4).map(|j| row[j] * w0v[j]).sum();
            for j in 0..4 {
                g[j] += 2.0 * pred * row[j] / per_device as f64 / n_dev as f64;
            }
        }
    }
    let w_host: Vec<f32> = (0..4).map(|j| (w0v[j] - 0.01 * g[j]) as f32).collect();
    ok &= report(
        "w after the step equals the host computation",
        &w[0].to_host()?,
        &HostArray::from_vec(w_host, &[4, 1])?,
        false,
    );

    // Part 2: the same calls with JAX-exact pmap.
    println!("\n-- JAX-exact pmap on the same calls (what jax.pmap would say) --");
    let exact = pmap(|x: &[Tensor]| vec![x[0].matmul(&x[1])]);
    explain(
        "pmap(matmul_row)(A, B)",
        exact.call(&[a.clone(), b.clone()]).err(),
    );
    let exact_b = pmap(|x: &[Tensor]| vec![x[0].matmul(&x[1])]).in_axes(&[Some(0), None]);
    explain(
        "pmap(matmul_row, in_axes=(0, None))(A, B)",
        exact_b.call(&[a.clone(), b.clone()]).err(),
    );
    let exact_v = pmap(|b: &[Tensor]| vmap(|r: &[Tensor]| vec![&r[0] * 2.0]).apply(b));
    explain(
        "pmap(vmap(block_fn))(X)",
        exact_v.call(std::slice::from_ref(&x)).err(),
    );
    let exact_g = pmap(move |p: &[Tensor]| grad(loss).apply(p));
    explain(
        "pmap(jax.grad(loss_fn))(w, x_batch)",
        exact_g.call(&[w0.clone(), x_batch.clone()]).err(),
    );
    Ok(ok)
}

/// Whether all devices come from adapters of one type (then results agree bit for bit).
fn same_adapter(devices: &[Device]) -> bool {
    devices
        .iter()
        .all(|d| d.info().adapter_index == devices[0].info().adapter_index)
}

/// Print one check: bitwise, or within 1e-5 of the largest magnitude.
fn report(what: &str, got: &HostArray, want: &HostArray, bitwise: bool) -> bool {
    let (g, w) = (got.to_f64(), want.to_f64());
    let scale = w.iter().fold(1e-12f64, |m, v| m.max(v.abs()));
    let err = g
        .iter()
        .zip(&w)
        .map(|(a, b)| (a - b).abs() / scale)
        .fold(0.0f64, f64::max);
    let ok = got.shape == want.shape
        && if bitwise {
            got.data == want.data
        } else {
            err <= 1e-5
        };
    println!(
        "  {} {what} ({})",
        if ok { "✓" } else { "✗" },
        if bitwise {
            "bitwise".to_string()
        } else {
            format!("max rel. error {err:.1e}")
        }
    );
    ok
}

/// Print what JAX-exact pmap says (or that it ran).
fn explain(call: &str, err: Option<brigade::Error>) {
    match err {
        Some(e) => println!("  {call}:\n    {}", e.to_string().replace('\n', "\n    ")),
        None => println!("  {call}: runs (as many entries as devices)"),
    }
}

/// `--quick` or `BRIGADE_QUICK=1`: a smaller matmul.
fn quick_requested() -> bool {
    std::env::args().any(|a| a == "--quick")
        || std::env::var("BRIGADE_QUICK").is_ok_and(|v| v == "1")
}

fn main() -> Result<()> {
    let ok = run(quick_requested())?;
    println!(
        "\n{}",
        if ok {
            "every result matches its check ✓"
        } else {
            "SOME RESULTS DIFFER ✗"
        }
    );
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
