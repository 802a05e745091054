// Reduction over axes that exclude the last one, {{LANES}} adjacent outputs along the last axis per
// invocation: each step of the loop reads them as vec4s of each operand read along that axis (a
// column sum reads {{LANES}} columns of a row). The reduced range is split into {{P}} parts of
// {{CHUNK}} steps, one per slice of {{NG}} invocations, so few outputs still fill the device;
// with several parts each writes its partials (`out0[output * {{P}} + part]`) for a second pass.
{{BINDINGS}}
{{HELPERS}}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = (wid.y * nwg.x + wid.x) * 256u + lid;
    // A zero the shader compiler cannot see (nwg.z is never 0 when the kernel runs): float zeros
    // and non-finite constants are built from it, since compilers fold `x * 0.0` and `x / 0.0`.
    let bzero = u32(nwg.z == 0u);
    let part = t / {{NG}}u;
    let gi = t % {{NG}}u;
    if (part >= {{P}}u) {
        return;
    }
    let gb = gi * {{LANES}}u;
{{INDEX}}
{{ACCS}}
    let r_end = min((part + 1u) * {{CHUNK}}u, {{R}}u);
    for (var r: u32 = part * {{CHUNK}}u; r < r_end; r = r + 1u) {
{{BODY}}
{{COMBINE}}
    }
{{STORE}}
}
