// Reduction, one invocation per output element: loops over the reduced elements in row-major order
// ({{LANES}} of them per step, as one vec4 load per buffer when the reduced axis is the last one).
// The reduced value's elementwise prologue is inlined into the loop body.
{{BINDINGS}}
{{HELPERS}}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let gi = (wid.y * nwg.x + wid.x) * 256u + lid;
    // A zero the shader compiler cannot see (nwg.z is never 0 when the kernel runs): float zeros
    // and non-finite constants are built from it, since compilers fold `x * 0.0` and `x / 0.0`.
    let bzero = u32(nwg.z == 0u);
    if (gi >= {{N}}u) {
        return;
    }
{{INDEX}}
{{ACCS}}
    for (var rv: u32 = 0u; rv < {{RV}}u; rv = rv + 1u) {
        let r = rv * {{LANES}}u;
{{BODY}}
{{COMBINE}}
    }
{{FINISH}}
    out0[gi] = {{STORE}};
}
