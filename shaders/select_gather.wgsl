// select_and_gather, one invocation per window: finds the window's selected cell (the first max or
// min, row-major, as select_and_scatter_add) and reads the tangent there (0 for a window of padding
// and holes only).
{{PROLOGUE}}
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
