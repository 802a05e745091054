//! Prints the WGSL brigade generates for a function (a debugging aid for kernel work):
//! `cargo run --example dump_wgsl`.
use brigade::device::DeviceLimits;
use brigade::lower::lower;
use brigade::{Array, Tensor, jit};

fn main() -> brigade::Result<()> {
    let n = 1 << 16;
    let x = Array::from_vec(vec![1.0f32; n], &[n / 64, 64])?;
    let f = jit(|a: &[Tensor]| vec![a[0].softmax(-1), (&a[0] * &a[0]).sum_all()]);
    let g = f.graph(&[x])?;
    let p = lower(&g, &DeviceLimits::from_wgpu(&wgpu::Limits::default()))?;
    for l in &p.launches {
        println!("// {} {:?}\n{}", l.label, l.workgroups, l.wgsl);
    }
    Ok(())
}
