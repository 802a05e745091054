// brigade: conv_general_dilated as an implicit GEMM (f32), filled in by src/ops/conv.rs.
//
// Per feature group g the convolution is a GEMM: rows are (batch, output position), columns the
// group's output features, and the contraction runs over the group's input features and the
// window taps. Every invocation accumulates a TM x TN register tile of Y; SETUP decodes each
// row's output position and each column's kernel offset, BODY is the contraction as nested loops
// (input feature, then one loop per spatial dimension of the window) whose loads of X compute the
// input position on the fly: a position in the padding or between dilated input elements reads
// zero, so no im2col buffer is ever stored. Like the tiled matmul, no workgroup memory and no
// barriers (very costly on llvmpipe): a workgroup is WG lanes over consecutive row tiles, which
// read the same kernel taps. Tiles are numbered over (group, column tile, row tile), row tile
// fastest; rows and columns past the edge are clamped on read and skipped on write. The host
// folds the linear workgroup index into x/y/z so that no dispatch dimension exceeds the limit.

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> K: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;

const WG: u32 = {{WG}}u;
const TM: u32 = {{TM}}u;
const TN: u32 = {{TN}}u;
const ROW_TILES: u32 = {{ROW_TILES}}u;
const COL_TILES: u32 = {{COL_TILES}}u;
const TILES: u32 = {{TILES}}u;
const GRID_X: u32 = {{GRID_X}}u;
const GRID_Y: u32 = {{GRID_Y}}u;

@compute @workgroup_size({{WG}}, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = (wid.x + GRID_X * (wid.y + GRID_Y * wid.z)) * WG + lid;
    if (t >= TILES) {
        return;
    }
    let row0 = (t % ROW_TILES) * TM;
    let rest = t / ROW_TILES;
    let col0 = (rest % COL_TILES) * TN;
    let g = rest / COL_TILES;

{{SETUP}}
{{BODY}}
{{STORE}}
}
