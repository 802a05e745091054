//! Where GL's (llvmpipe) first `sum` spends its time: compiles variants of the cooperative
//! reduction kernel through raw wgpu and times pipeline creation and the first dispatch apart.
//! `MESA_SHADER_CACHE_DISABLE=true BRIGADE_DEVICES=gl:1 cargo run --release --example gl_reduce_probe`

use std::time::Instant;

const HEAD: &str = "
@group(0) @binding(0) var<storage, read> in0: array<f32>;
@group(0) @binding(1) var<storage, read_write> out0: array<f32>;
var<workgroup> partial: array<f32, 256>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let wg = wid.y * nwg.x + wid.x;
    let part = wg % 4u;
    var acc: f32 = 0.0;
    for (var r: u32 = part * 256u + lid; r < 65536u; r = r + 1024u) { acc = acc + in0[r]; }
    partial[lid] = acc;
    workgroupBarrier();
";

fn variants() -> Vec<(&'static str, String)> {
    let looped = "
    for (var s: u32 = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) { partial[lid] = partial[lid] + partial[lid + s]; }
        workgroupBarrier();
    }
    if (lid == 0u) { out0[wg] = partial[0]; }
}";
    let mut unrolled = String::new();
    for s in [128, 64, 32, 16, 8, 4, 2, 1] {
        unrolled += &format!(
            "    if (lid < {s}u) {{ partial[lid] = partial[lid] + partial[lid + {s}u]; }}\n    workgroupBarrier();\n"
        );
    }
    unrolled += "    if (lid == 0u) { out0[wg] = partial[0]; }\n}";
    let serial = "
    if (lid == 0u) {
        var t: f32 = 0.0;
        for (var i: u32 = 0u; i < 256u; i = i + 1u) { t = t + partial[i]; }
        out0[wg] = t;
    }
}";
    let two_level = "
    if (lid < 16u) {
        var t: f32 = 0.0;
        for (var i: u32 = 0u; i < 16u; i = i + 1u) { t = t + partial[lid * 16u + i]; }
        partial[lid] = t;
    }
    workgroupBarrier();
    if (lid == 0u) {
        var t: f32 = 0.0;
        for (var i: u32 = 0u; i < 16u; i = i + 1u) { t = t + partial[i]; }
        out0[wg] = t;
    }
}";
    vec![
        (
            "tree loop with a barrier per step (brigade's)",
            format!("{HEAD}{looped}"),
        ),
        ("tree unrolled, 8 barriers", format!("{HEAD}{unrolled}")),
        ("one barrier, lane 0 adds 256", format!("{HEAD}{serial}")),
        (
            "two levels (16 x 16), 2 barriers",
            format!("{HEAD}{two_level}"),
        ),
    ]
}

fn main() {
    let rt = pollster::block_on(brigade::Runtime::new()).unwrap();
    let n = 65536usize;
    let data: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let want: f64 = data.iter().map(|&v| v as f64).sum();
    for dev in rt.devices().iter().filter(|d| !d.is_cpu()) {
        println!("\n## {}", dev.info());
        let x = dev.upload(&brigade::HostData::F32(data.clone())).unwrap();
        let y = dev.alloc(16).unwrap();
        let (device, queue) = dev.wgpu().unwrap();
        for zero_init in [true, false] {
            for (name, src) in variants() {
                // A comment makes every source distinct, so no cache anywhere can hit.
                let src = format!("// {name} {zero_init} {}\n{src}", std::process::id());
                let t = Instant::now();
                let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: None,
                    source: wgpu::ShaderSource::Wgsl(src.into()),
                });
                let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: None,
                    layout: None,
                    module: &module,
                    entry_point: Some("main"),
                    compilation_options: wgpu::PipelineCompilationOptions {
                        zero_initialize_workgroup_memory: zero_init,
                        ..Default::default()
                    },
                    cache: None,
                });
                let create = t.elapsed();
                let bg = device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &pipeline.get_bind_group_layout(0),
                    entries: &[
                        wgpu::BindGroupEntry {
                            binding: 0,
                            resource: x.raw().as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 1,
                            resource: y.raw().as_entire_binding(),
                        },
                    ],
                });
                let mut times = Vec::new();
                for _ in 0..2 {
                    let t = Instant::now();
                    let mut enc = device.create_command_encoder(&Default::default());
                    {
                        let mut pass = enc.begin_compute_pass(&Default::default());
                        pass.set_pipeline(&pipeline);
                        pass.set_bind_group(0, &bg, &[]);
                        pass.dispatch_workgroups(4, 1, 1);
                    }
                    queue.submit([enc.finish()]);
                    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
                    times.push(t.elapsed());
                }
                let out = dev.download_blocking(&y, brigade::DType::F32, 4).unwrap();
                let brigade::HostData::F32(v) = out else {
                    unreachable!()
                };
                let got: f64 = v.iter().map(|&a| a as f64).sum();
                assert_eq!(got, want, "{name}");
                println!(
                    "| {name} | zero-init workgroup memory {zero_init} | create {:.1} ms | first dispatch {:.1} ms | second {:.2} ms |",
                    create.as_secs_f64() * 1e3,
                    times[0].as_secs_f64() * 1e3,
                    times[1].as_secs_f64() * 1e3
                );
            }
        }
    }
}
