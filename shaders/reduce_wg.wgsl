// Cooperative reduction for long reductions: {{P}} workgroups of 256 invocations share each output.
// Workgroup (o, p) reduces the chunk p of output o with a strided loop ({{LANES}} reduced elements per
// step, as one vec4 load per buffer when the reduced axis is the last one), then invocation 0
// combines the workgroup's 256 partials from shared memory and writes one partial; a second kernel
// combines the {{P}} partials of each output (skipped when P is 1).
// brigade: workgroup memory is written before it is read
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
    // One barrier, then invocation 0 combines the 256 partials in order: a barrier per tree level
    // costs more on software adapters (and compiles for seconds on llvmpipe GL) than 255 combines.
    if (lid == 0u && gi < {{N}}u) {
        var acc = partial[0];
        for (var s: u32 = 1u; s < 256u; s = s + 1u) {
            let x = partial[s];
            let a = acc;
            acc = {{COMBINE_SHARED}};
        }
        out0[wg] = {{STORE}};
    }
}
