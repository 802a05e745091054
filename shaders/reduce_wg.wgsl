// Cooperative reduction for long reductions: {{P}} workgroups of 256 invocations share each output.
// Workgroup (o, p) reduces the chunk p of output o with a strided loop ({{LANES}} reduced elements per
// step, as one vec4 load per buffer when the reduced axis is the last one), then a tree in shared
// memory, and writes one partial; a second kernel combines the {{P}} partials (skipped when P is 1).
{{BINDINGS}}
{{HELPERS}}
var<workgroup> partial: array<{{T}}, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let wg = wid.y * nwg.x + wid.x;
    // A zero the shader compiler cannot see (nwg.z is never 0 when the kernel runs): float zeros
    // and non-finite constants are built from it, since compilers fold `x * 0.0` and `x / 0.0`.
    let bzero = u32(nwg.z == 0u);
    let gi = wg / {{P}}u;
    let part = wg % {{P}}u;
{{ACCS}}
    if (gi < {{N}}u) {
{{INDEX}}
        for (var rv: u32 = part * 256u + lid; rv < {{RV}}u; rv = rv + {{STEP}}u) {
            let r = rv * {{LANES}}u;
{{BODY}}
{{COMBINE}}
        }
    }
{{FINISH}}
    partial[lid] = acc;
    workgroupBarrier();
    for (var s: u32 = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let x = partial[lid + s];
            let a = partial[lid];
            partial[lid] = {{COMBINE_SHARED}};
        }
        workgroupBarrier();
    }
    if (lid == 0u && gi < {{N}}u) {
        let acc = partial[0];
        out0[wg] = {{STORE}};
    }
}
