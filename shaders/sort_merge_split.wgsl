// argsort of a row over one binding, one comparator of the block sorting network over its chunks:
// two sorted chunks of `{{C}}` elements (`{{WORDS}}` words each: the encoded keys, then the index
// along the row) are merged, and half `{{HALF}}` of the merged pair (0: its first `{{C}}`
// elements, 1: its last) is stored. One invocation per element of both chunks, no barriers: an
// element's place in the merged pair is its rank in its own chunk plus the number of elements of
// the other chunk ordered before it (a binary search). The index makes every element distinct, so
// the places never collide and the merge is stable.
@group(0) @binding(0) var<storage, read> lo: array<u32>;
@group(0) @binding(1) var<storage, read> hi: array<u32>;
@group(0) @binding(2) var<storage, read_write> run_out: array<u32>;

// Is element `a` of `lo` ordered before element `b` of `hi`?
fn lo_before_hi(a: u32, b: u32) -> bool {
    for (var k = 0u; k < {{WORDS}}u; k = k + 1u) {
        let x = lo[a * {{WORDS}}u + k];
        let y = hi[b * {{WORDS}}u + k];
        if (x != y) {
            return x < y;
        }
    }
    return false;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (t >= 2u * {{C}}u) {
        return;
    }
    let from_hi = t >= {{C}}u;
    let i = t % {{C}}u;
    // How many elements of the other chunk come before element i.
    var l = 0u;
    var h = {{C}}u;
    while (l < h) {
        let mid = (l + h) / 2u;
        var ahead = false;
        if (from_hi) {
            ahead = lo_before_hi(mid, i);
        } else {
            ahead = !lo_before_hi(i, mid);
        }
        if (ahead) {
            l = mid + 1u;
        } else {
            h = mid;
        }
    }
    let dest = i + l;
    if (dest / {{C}}u != {{HALF}}u) {
        return;
    }
    let at = (dest - {{HALF}}u * {{C}}u) * {{WORDS}}u;
    for (var k = 0u; k < {{WORDS}}u; k = k + 1u) {
        run_out[at + k] = select(lo[i * {{WORDS}}u + k], hi[i * {{WORDS}}u + k], from_hi);
    }
}
