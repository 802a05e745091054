// Reduction, one invocation per output element: loops over the reduced elements in row-major order
// ({{LANES}} of them per step, as one vec4 load per buffer when the reduced axis is the last one).
// The reduced value's elementwise prologue is inlined into the loop body.
{{PROLOGUE}}
{{ACCS}}
    for (var rv: u32 = 0u; rv < {{RV}}u; rv = rv + 1u) {
        let r = rv * {{LANES}}u;
{{BODY}}
{{COMBINE}}
    }
{{FINISH}}
    out0[gi] = {{STORE}};
}
