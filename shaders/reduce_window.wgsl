// reduce_window, one invocation per output element: folds the cells of its window (row-major) into
// the monoid's identity, skipping padding and dilation holes (they hold the identity). The operand's
// elementwise prologue is inlined into the loop body.
{{PROLOGUE}}
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
