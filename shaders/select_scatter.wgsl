// select_and_scatter_add, one invocation per operand element: for each window holding the element
// (as window cell r), find that window's selected cell (the first max or min, row-major, as XLA's
// select with `ge`/`le`) and, when it is cell r, add the window's source value. Gathering instead
// of scattering needs no atomics; each window is searched once per cell it holds.
{{PROLOGUE}}
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
