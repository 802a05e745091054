// reduce_window, one invocation per output element: folds the cells of its window (row-major) into
// the monoid's identity, skipping padding and dilation holes (they hold the identity). The operand's
// elementwise prologue is inlined into the loop body.
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
    var acc: {{T}} = {{INIT}};
    for (var r: u32 = 0u; r < {{W}}u; r = r + 1u) {
{{CELL}}
        if (ok) {
{{BODY}}
            acc = {{COMBINE}};
        }
    }
    out0[gi] = acc;
}
