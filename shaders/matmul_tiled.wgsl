// brigade: register-tiled f32 batched matmul family, C[b] = op(A[b]) @ op(B[b]).
//
// One template for every tile shape and operand layout; src/ops/matmul/kernel.rs fills in the tile
// constants and generates the unrolled setup, k loop (loads and FMAs) and stores.
// Layouts (this instance: {{LAYOUT}}):
//   nn: A (BATCH, M, K), B (BATCH, K, N)           needs K % 4 == 0 and N % 4 == 0
//   nt: A (BATCH, M, K), B stored (BATCH, N, K)    needs K % 4 == 0 and N % 4 == 0
//   tn: A stored (BATCH, K, M), B (BATCH, K, N)    needs M % 4 == 0 and N % 4 == 0
// so the transposed operands that grad produces are read in place, with vec4 loads along their
// contiguous axis. C is (BATCH, M, N), row-major.
//
// Every invocation computes a TM x (4 * TC4) block of C (TM rows, TC4 vec4s of columns) and walks
// k in steps of KS. No workgroup memory and no barriers (barriers are very costly on llvmpipe).
// Tiles are numbered linearly over (batch, column tile, row tile), row tile fastest: adjacent
// lanes share the same B columns. Rows and columns past the edge are clamped on read and skipped
// on write. The host folds the linear workgroup index into x/y/z so that no dispatch dimension
// exceeds the device limit.
//
// Every element of C is one fma chain over k ascending from 0, in f32, whatever the tile shape
// and layout: all members of the family give bit-identical results on one adapter, so the
// measured choice between them never changes a value.

{{BUFFERS}}

{{SHAPE}}

const WG: u32 = {{WG}}u;
const TM: u32 = {{TM}}u;
const TC4: u32 = {{TC4}}u;
const KS: u32 = {{KS}}u;
const K4: u32 = K / 4u;
const N4: u32 = N / 4u;
const M4: u32 = M / 4u;
const ROW_TILES: u32 = (M + TM - 1u) / TM;
const COL_TILES: u32 = (N4 + TC4 - 1u) / TC4;
const TILES: u32 = BATCH * ROW_TILES * COL_TILES;

@compute @workgroup_size({{WG}}, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = (wid.x + GRID_X * (wid.y + GRID_Y * wid.z)) * WG + lid;
    if (t >= TILES) {
        return;
    }
    let row0 = (t % ROW_TILES) * TM;
    let rest = t / ROW_TILES;
    let col4 = (rest % COL_TILES) * TC4;
    let b = rest / COL_TILES;

{{SETUP}}
{{BODY}}
    let pc = b * (M * N4) + row0 * N4 + col4;
{{STORE}}
}
