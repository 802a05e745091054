//! The tutorial's big matrix product: C = A · B with A and B 8192 × 8192 f32 (256 MiB each), A's
//! rows split over 4 devices, B replicated on every device.
//!
//! ```sh
//! cargo run --release --example big_matmul                 # 8192², four devices on the first adapter
//! cargo run --release --example big_matmul -- --quick      # 512² with a 128 KiB binding limit
//! ```
//!
//! B alone is twice lavapipe's 128 MiB storage-binding limit, so it lives on each device as one
//! buffer bound in segments, and each device's product sums over chunks of the contraction (the
//! chunks of B's rows that one binding holds). Quick mode forces a 128 KiB binding limit on a
//! 512² product, so the same segmented code paths run in seconds (the tour runs it that way).
//!
//! Checked: 64 entries of C against an f64 dot product on the host, and the whole of C against the
//! one-device product (`jit` on one device, A and C segmented too). Printed: the time of the product
//! on 1, 2 and 4 devices (B already placed; the time to place it is printed apart).

use std::time::Instant;

use brigade::{
    Array, Device, Mesh, NamedSharding, P, Result, Runtime, Tensor, device_put, jit, shard_map,
};

#[allow(dead_code)]
#[path = "common/util.rs"]
mod util;
use util::data;

/// Four logical devices on the first adapter (or `BRIGADE_DEVICES`), with the binding limit
/// forced down to `max_binding` bytes when given.
fn devices(max_binding: Option<u64>) -> Result<Vec<Device>> {
    let mut b = Runtime::builder();
    b = if std::env::var("BRIGADE_DEVICES").is_ok_and(|v| !v.trim().is_empty()) {
        b.layout_from_env()
    } else {
        b.layout_str("4").subset(&[0, 1, 2, 3])
    };
    if let Some(bytes) = max_binding {
        b = b.max_binding(bytes);
    }
    let rt = pollster::block_on(b.build())?;
    Ok(rt.devices().iter().take(4).cloned().collect())
}

/// Row-split product on `k` devices; false if a check fails.
pub fn run(quick: bool) -> Result<bool> {
    let (n, max_binding) = if quick {
        (512usize, Some(128u64 << 10))
    } else {
        (8192, None)
    };
    let devs = devices(max_binding)?;
    let limit = devs[0].limits().max_storage_buffer_binding_size;
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    println!(
        "C = A·B, {n}×{n} f32: A, B and C {:.1} MiB each; storage binding limit {:.3} MiB{} on {} ({} device(s))",
        mib(n * n * 4),
        limit as f64 / (1 << 20) as f64,
        if max_binding.is_some() {
            " (forced)"
        } else {
            ""
        },
        devs[0].info().adapter_name,
        devs.len()
    );
    let a = Array::from_vec(data(n * n, 1), &[n, n])?;
    let b = Array::from_vec(data(n * n, 2), &[n, n])?;
    let (ah, bh) = (a.to_vec::<f32>()?, b.to_vec::<f32>()?);

    // The one-device product, segmented where the arrays are over the limit.
    let one = jit(|x: &[Tensor]| vec![x[0].matmul(&x[1])]).on(&devs[0]);
    let (a0, b0) = (a.to_device(&devs[0])?, b.to_device(&devs[0])?);
    one.call(&[a0.clone(), b0.clone()])?[0].to_host()?; // compile
    let t = Instant::now();
    let want = one.call(&[a0, b0])?.remove(0).to_vec::<f32>()?;
    let one_ms = t.elapsed().as_secs_f64() * 1e3;
    let flops = 2.0 * (n as f64).powi(3);
    println!(
        "  1 device : {one_ms:9.1} ms  ({:.1} GFLOP/s)",
        flops / one_ms / 1e6
    );

    let mut ok = true;
    for k in [2usize, 4].into_iter().filter(|&k| k <= devs.len()) {
        let mesh = Mesh::new(&devs[..k], &[("rows", k)])?;
        let t = Instant::now();
        let a_rows = device_put(&a, &NamedSharding::new(&mesh, P!["rows", None])?)?;
        let b_all = device_put(&b, &NamedSharding::new(&mesh, P![])?)?;
        let place_ms = t.elapsed().as_secs_f64() * 1e3;
        let f = shard_map(|x: &[Tensor]| vec![x[0].matmul(&x[1])])
            .mesh(&mesh)
            .in_specs(&[P!["rows", None], P![]])
            .out_specs(&[P!["rows", None]]);
        f.call(&[a_rows.clone(), b_all.clone()])?; // compile on every device
        let t = Instant::now();
        let c = f.call(&[a_rows, b_all])?.remove(0);
        c.shards()
            .expect("sharded")
            .iter()
            .try_for_each(|s| s.to_host().map(drop))?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let got = c.to_vec::<f32>()?;
        // 64 entries against an f64 dot product, the error relative to the sum of the products'
        // magnitudes (what f32 rounding of a sum scales with); 1e-4 is far above the rounding of
        // a sum of n products and far below what a missing or repeated chunk would give.
        let mut worst = 0.0f64;
        for s in 0..64u64 {
            let (i, j) = (
                (s * 7919 % n as u64) as usize,
                (s * 104_729 % n as u64) as usize,
            );
            let (mut dot, mut mag) = (0.0f64, 0.0f64);
            for kk in 0..n {
                let p = ah[i * n + kk] as f64 * bh[kk * n + j] as f64;
                dot += p;
                mag += p.abs();
            }
            worst = worst.max((got[i * n + j] as f64 - dot).abs() / mag);
        }
        let spot_ok = worst <= 1e-4;
        let max_c = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let diff = got
            .iter()
            .zip(&want)
            .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        let same_ok = diff <= 1e-5 * max_c;
        ok &= spot_ok && same_ok;
        println!(
            "  {k} devices: {ms:9.1} ms  ({:.1} GFLOP/s, {:.2}x one device; placing A's rows and {k} copies of B took {place_ms:.0} ms)",
            flops / ms / 1e6,
            one_ms / ms
        );
        println!(
            "             64 entries against f64: worst error {worst:.1e} of the magnitude sum (bound 1e-4) {}; C {} the one-device product {}",
            if spot_ok { "✓" } else { "✗" },
            if diff == 0.0 {
                "bitwise equal to".to_string()
            } else {
                format!("within {diff:.1e} (max |C| {max_c:.1}) of")
            },
            if same_ok { "✓" } else { "✗" }
        );
    }
    Ok(ok)
}

#[allow(dead_code)]
fn main() -> Result<()> {
    if !run(util::quick_requested())? {
        println!("\nTHE PRODUCT DIFFERS ✗");
        std::process::exit(1);
    }
    println!("\nthe row-split product matches ✓");
    Ok(())
}
