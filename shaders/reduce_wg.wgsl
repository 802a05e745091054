// Cooperative reduction for long reductions: {{P}} workgroups of 256 invocations share each output.
// Workgroup (o, p) reduces the contiguous chunk p ({{CHUNK}} steps of {{LANES}} reduced elements, one
// vec4 load per buffer when the reduced axis is the last one) of output o. Its invocations work in
// groups of {{G}} (lid / {{G}}), each group on its own contiguous {{SUB}} steps, the {{G}} of a group
// on adjacent steps, {{UNROLL}} per iteration: CPU adapters (lavapipe runs 8 invocations as one
// SIMD-8 loop) then stream memory instead of jumping by a grid stride (3x faster), and on GPUs each
// group still reads whole 128-byte segments. Then invocation 0 combines the workgroup's 256 partials
// from shared memory and writes one partial; a second kernel combines the {{P}} partials of each
// output (skipped when P is 1). The combine order depends on the shape only: results are
// deterministic.
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
        let l = lid % {{G}}u;
        let start = min(part * {{CHUNK}}u + (lid / {{G}}u) * {{SUB}}u, {{RV}}u);
        let end = min(start + {{SUB}}u, {{RV}}u);
        var b = start;
        for (; b + {{SPAN}}u <= end; b = b + {{SPAN}}u) {
{{UNROLLED}}
        }
        // The group's last steps (fewer than {{SPAN}}).
        for (var rv: u32 = b + l; rv < end; rv = rv + {{G}}u) {
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
