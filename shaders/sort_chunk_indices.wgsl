// argsort of a row over one binding, last pass of one chunk: the index word (after the `{{NK}}`
// encoded keys, `{{WORDS}}` words per element) of each of the chunk's first `{{COUNT}}` sorted
// elements, as the result's i32 (padding past the row's end sorts last and is not stored).
@group(0) @binding(0) var<storage, read> run_in: array<u32>;
@group(0) @binding(1) var<storage, read_write> out0: array<i32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (t >= {{COUNT}}u) {
        return;
    }
    out0[t] = i32(run_in[t * {{WORDS}}u + {{NK}}u]);
}
