//! Workgroup memory starts zeroed (WGSL) unless a kernel opts out with
//! `SKIP_WORKGROUP_ZERO_INIT`; a reduction that opts out still sums right. On Vulkan and GL.

mod common;

use brigade::device::{Dispatch, SKIP_WORKGROUP_ZERO_INIT};
use brigade::{DType, HostData};
use common::*;

/// A tree sum of 65 536 values by 4 workgroups of 256 (one partial each), every lane storing its
/// partial before the first barrier: the shape of brigade's cooperative reduction.
fn tree_sum(marker: &str) -> String {
    format!(
        "{marker}
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
var<workgroup> partial: array<f32, 256>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
    var acc = 0.0;
    for (var r = wid.x * 256u + lid; r < 65536u; r = r + 1024u) {{ acc = acc + x[r]; }}
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {{
        if (lid < s) {{ partial[lid] = partial[lid] + partial[lid + s]; }}
        workgroupBarrier();
    }}
    if (lid == 0u) {{ y[wid.x] = partial[0]; }}
}}"
    )
}

#[test]
fn a_reduction_that_skips_the_zeroing_sums_right() {
    let xs = f32s(65536, 5, -2.0, 2.0);
    let want: f64 = xs.iter().map(|&v| v as f64).sum();
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let x = dev.upload(&HostData::F32(xs.clone())).unwrap();
        let y = dev.alloc(16).unwrap();
        let k = dev
            .kernel("tree_sum", &tree_sum(SKIP_WORKGROUP_ZERO_INIT))
            .unwrap();
        dev.run(&[Dispatch {
            kernel: &k,
            buffers: vec![&x, &y],
            workgroups: [4, 1, 1],
        }])
        .unwrap();
        let HostData::F32(parts) = dev.download_blocking(&y, DType::F32, 4).unwrap() else {
            unreachable!()
        };
        let got: f64 = parts.iter().map(|&v| v as f64).sum();
        assert!(
            (got - want).abs() < 1e-3,
            "on {}: {got} vs {want}",
            dev.name()
        );
    }
}

/// Without the marker, workgroup memory nobody wrote reads as zero, as WGSL says: lanes add a
/// slot of a shared array that only some lanes write, the others must see 0.
#[test]
fn other_kernels_keep_zeroed_workgroup_memory() {
    let src = "
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
var<workgroup> shared_: array<f32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32) {
    if (lid < 8u) { shared_[lid] = f32(lid) + 1.0; }
    workgroupBarrier();
    y[lid] = shared_[lid] + 0.5;
}";
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let y = dev.alloc(64 * 4).unwrap();
        // Dirty the output (and, on reuse, the memory) first.
        dev.write(&y, &HostData::F32(vec![9.0; 64])).unwrap();
        let k = dev.kernel("zeroed", src).unwrap();
        for _ in 0..2 {
            dev.run(&[Dispatch {
                kernel: &k,
                buffers: vec![&y],
                workgroups: [1, 1, 1],
            }])
            .unwrap();
            let got = dev.download_blocking(&y, DType::F32, 64).unwrap();
            let want: Vec<f32> = (0..64)
                .map(|i| if i < 8 { i as f32 + 1.5 } else { 0.5 })
                .collect();
            assert_eq!(got, HostData::F32(want), "on {}", dev.name());
        }
    }
}
