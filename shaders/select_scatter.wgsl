// select_and_scatter_add, one invocation per operand element: for each window holding the element
// (as window cell r), find that window's selected cell (the first max or min, row-major, as XLA's
// select with `ge`/`le`) and, when it is cell r, add the window's source value. Gathering instead
// of scattering needs no atomics; each window is searched once per cell it holds.
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
    var acc: {{T}} = {{ZERO}};
    for (var r: u32 = 0u; r < {{W}}u; r = r + 1u) {
{{WINDOW}}
        if (win) {
            var best: {{T}} = {{ZERO}};
            var best_r: u32 = {{W}}u;
            for (var r2: u32 = 0u; r2 < {{W}}u; r2 = r2 + 1u) {
{{CELL}}
                if (ok) {
{{BODY}}
                    if (best_r == {{W}}u || {{REPLACES}}) {
                        best = x;
                        best_r = r2;
                    }
                }
            }
            if (best_r == r) {
{{SOURCE}}
            }
        }
    }
    out0[gi] = acc;
}
