// argsort, first pass: one invocation per element. Encodes the element's keys as unsigned words
// whose order is the sort's order, and stores them with the element's index along the axis
// (`{{WORDS}}` words per element, rows of `{{N}}` elements one after the other): the runs of one
// element that the merge passes then merge.
{{BINDINGS}}
{{ENCODE}}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (t >= {{TOTAL}}u) {
        return;
    }
    // Element t is position i of row r; a row is an (outer, inner) pair around the sorted axis.
    let r = t / {{N}}u;
    let i = t % {{N}}u;
    let elem = (r / {{INNER}}u) * {{N}}u * {{INNER}}u + i * {{INNER}}u + r % {{INNER}}u;
{{STORE}}
}
