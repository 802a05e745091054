// argsort, one merge pass: runs of `{{RUN}}` sorted elements are merged pairwise. One invocation
// per element, no barriers: an element's place in the merged run is its rank in its own run plus
// the number of elements of the partner run ordered before it (a binary search). Elements are
// `{{WORDS}}` words (the encoded keys, then the index), compared lexicographically; the index
// makes every element distinct, so the merge is stable and the ranks never collide.
{{BINDINGS}}
// Is the element at word offset `a` of `run_in` ordered before the one at `b`?
fn before(a: u32, b: u32) -> bool {
    for (var k = 0u; k < {{WORDS}}u; k = k + 1u) {
        let x = run_in[a + k];
        let y = run_in[b + k];
        if (x != y) {
            return x < y;
        }
    }
    return false;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (t >= {{TOTAL}}u) {
        return;
    }
    let r = t / {{N}}u;
    let i = t % {{N}}u;
    let base = r * {{N}}u;
    let q = i / {{RUN}}u;
    let own = q * {{RUN}}u;
    let partner = (q ^ 1u) * {{RUN}}u;
    // The partner run may be short (the row's tail) or missing.
    var lo = 0u;
    var hi = 0u;
    if (partner < {{N}}u) {
        hi = min({{RUN}}u, {{N}}u - partner);
    }
    let me = t * {{WORDS}}u;
    while (lo < hi) {
        let mid = (lo + hi) / 2u;
        if (before((base + partner + mid) * {{WORDS}}u, me)) {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    let dest = min(own, partner) + (i - own) + lo;
{{STORE}}
}
