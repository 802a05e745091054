// brigade: f32 batched matmul reading its operands from textures, C[b] = A[b] @ B[b] (nn only).
//
// A (BATCH, M, K) and B (BATCH, K, N) reach the kernel as rgba32float textures: the host copies
// each operand's buffer into a texture before the dispatch (src/device/texture.rs), a row of the
// buffer's 2-D view (BATCH * rows, cols) becoming a row of cols / 4 texels. The sizes it copies
// are the `<NAME>_TEXTURE_WIDTH` / `_HEIGHT` constants below (the host reads them from the WGSL).
// Why textures: on SwiftShader (Chromium's WebGPU without a GPU) every storage-buffer load whose
// index differs per lane is a masked gather, one per scalar, where a texel fetch is one 16-byte
// load per lane (docs/PERFORMANCE.md, browser matmul).
//
// Every invocation computes an 8 x 8 block of C (TM = 8 rows, TC4 = 2 vec4s of columns): per
// step of 4 in k it fetches 8 texels of A and 8 of B. A workgroup of 64 covers 8 x 8 blocks,
// column blocks fastest (lid % 8), then rows; workgroups go over (column blocks, row blocks,
// batch), the linear index folded into x/y/z by the host. Rows past M are clamped on read and
// skipped on write; N is a multiple of 64 (a texture row of the copy is a multiple of 256 bytes),
// so column blocks never straddle the edge.
//
// Every element of C is one fma chain over k ascending from 0, in f32, as in the buffer members
// (shaders/matmul_tiled.wgsl): the choice between them never changes a value.

@group(0) @binding(0) var A: texture_2d<f32>;
@group(0) @binding(1) var B: texture_2d<f32>;
@group(0) @binding(2) var<storage, read_write> C: array<vec4<f32>>;

{{SHAPE}}

const A_TEXTURE_WIDTH: u32 = {{A_WIDTH}}u;
const A_TEXTURE_HEIGHT: u32 = {{A_HEIGHT}}u;
const B_TEXTURE_WIDTH: u32 = {{B_WIDTH}}u;
const B_TEXTURE_HEIGHT: u32 = {{B_HEIGHT}}u;

const TM: u32 = 8u;
const TC4: u32 = 2u;
const K4: u32 = K / 4u;
const N4: u32 = N / 4u;
const ROW_TILES: u32 = (M + TM - 1u) / TM;
const COL_TILES: u32 = N4 / TC4;
const WG_ROWS: u32 = (ROW_TILES + 7u) / 8u;
const WG_COLS: u32 = (COL_TILES + 7u) / 8u;

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let w = wid.x + GRID_X * (wid.y + GRID_Y * wid.z);
    let b = w / (WG_COLS * WG_ROWS);
    let rest = w % (WG_COLS * WG_ROWS);
    let ct = (rest % WG_COLS) * 8u + lid % 8u;
    let rt = (rest / WG_COLS) * 8u + lid / 8u;
    if (b >= BATCH || ct >= COL_TILES || rt >= ROW_TILES) {
        return;
    }
    let row0 = rt * TM;
    let col4 = ct * TC4;
    // Texture rows of this batch's blocks of A and B.
    let a_row = b * M;
    let b_row = b * K;

{{SETUP}}
    for (var kk = 0u; kk < K4; kk += 1u) {
{{BODY}}
    }
    let pc = b * (M * N4) + row0 * N4 + col4;
{{STORE}}
}
