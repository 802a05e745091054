// argmax / argmin along one axis, one invocation per output element; ties keep the first index.
{{PROLOGUE}}
    var best: {{T}};
    var best_i: u32 = 0u;
    for (var r: u32 = 0u; r < {{R}}u; r = r + 1u) {
{{BODY}}
        if (r == 0u || {{BETTER}}) {
            best = x;
            best_i = r;
        }
    }
    out0[gi] = i32(best_i);
}
