// Fused elementwise kernel: each invocation computes {{REPS}} groups of {{LANES}} adjacent output
// elements (`gb` is a group's first linear index, `gv` the group's index).
// The body is an inlined tree of elementwise and layout ops over the input buffers, once per element;
// operands read at 4 adjacent aligned positions are one vec4 load shared by the 4 elements.
{{BINDINGS}}
{{HELPERS}}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // Workgroups are laid out in x then y so that more than 65 535 of them can run.
    let g0 = (wid.y * nwg.x + wid.x) * 256u + lid;
    let stride = nwg.x * nwg.y * 256u;
    // A zero the shader compiler cannot see (nwg.z is never 0 when the kernel runs): float zeros
    // and non-finite constants are built from it, since compilers fold `x * 0.0` and `x / 0.0`.
    let bzero = u32(nwg.z == 0u);
    // {{REPS}} groups per invocation, a whole grid apart (neighbouring invocations read neighbouring
    // memory in every round).
    for (var rep = 0u; rep < {{REPS}}u; rep++) {
        let gv = {{GV}};
        if (gv >= {{NV}}u) {
            return;
        }
        let gb = gv * {{LANES}}u;
{{INDEX}}
{{BODY}}
{{STORE}}
    }
}
