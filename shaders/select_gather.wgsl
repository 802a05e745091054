// select_and_gather, one invocation per window: finds the window's selected cell (the first max or
// min, row-major, as select_and_scatter_add) and reads the tangent there (0 for a window of padding
// and holes only).
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
    var best: {{T}} = {{ZERO}};
    var best_r: u32 = {{W}}u;
    for (var r: u32 = 0u; r < {{W}}u; r = r + 1u) {
{{CELL}}
        if (ok) {
{{BODY}}
            if (best_r == {{W}}u || {{REPLACES}}) {
                best = x;
                best_r = r;
            }
        }
    }
    var res: {{T}} = {{ZERO}};
    if (best_r < {{W}}u) {
{{SELECTED}}
    }
    out0[gi] = res;
}
