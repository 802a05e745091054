// brigade: f32 batched matmul through workgroup memory, C[b] = op(A[b]) @ op(B[b]).
// brigade: workgroup memory is written before it is read
//
// For GPUs: a workgroup of 256 invocations (16 x 16) computes a BM x BM block of C (BM = 16 TM),
// each invocation TM rows x TM columns of it. Per step of BK in k the workgroup copies the
// block's BM x BK slice of op(A) and BK x BM slice of op(B) into workgroup memory (As, Bs), waits
// at a barrier, and every invocation runs BK rank-1 updates from there; each operand element is
// read from storage once per workgroup instead of once per invocation that needs it. CPU adapters
// (llvmpipe, lavapipe), where barriers are costly, never get it offered (src/device/tune.rs).
//
// Layouts as in matmul_tiled.wgsl (this instance: {{LAYOUT}}): nn reads A (BATCH, M, K) and
// B (BATCH, K, N); nt reads B stored (BATCH, N, K); tn reads A stored (BATCH, K, M). Needs
// K % BK == 0, N % 4 == 0, and K % 4 == 0 (nn, nt) or M % 4 == 0 (tn).
//
// As[k * BM4 + r4] holds rows 4 r4 .. 4 r4 + 3 of the block at k (the slice transposed, so an
// invocation reads four rows with one load); Bs[k * BM4 + c4] holds columns 4 c4 .. 4 c4 + 3.
// Invocation (tx, ty) owns rows 4 (ty + 16 i) + l and column vec4s tx + 16 j (i, j < TM / 4,
// l < 4): in a 32-lane subgroup the A reads are two broadcasts and the B reads 16 consecutive
// vec4s. Rows and columns past the edge are clamped on read and skipped on write.
//
// Every element of C is one fma chain over k ascending from 0, in f32, as in the other members:
// the measured choice between them never changes a value.

{{BUFFERS}}

{{SHAPE}}

const BK: u32 = {{BK}}u;
const BM: u32 = {{BM}}u;
const BM4: u32 = BM / 4u;
const K4: u32 = K / 4u;
const M4: u32 = M / 4u;
const N4: u32 = N / 4u;
const ROW_BLOCKS: u32 = (M + BM - 1u) / BM;
const COL_BLOCKS: u32 = (N + BM - 1u) / BM;
const BLOCKS: u32 = BATCH * ROW_BLOCKS * COL_BLOCKS;

var<workgroup> As: array<vec4<f32>, {{SLICE}}>;
var<workgroup> Bs: array<vec4<f32>, {{SLICE}}>;

@compute @workgroup_size(256, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // Uniform per workgroup: the barriers below stay in uniform control flow.
    let blk = wid.x + GRID_X * (wid.y + GRID_Y * wid.z);
    if (blk >= BLOCKS) {
        return;
    }
    let row0 = (blk % ROW_BLOCKS) * BM;
    let rest = blk / ROW_BLOCKS;
    let col0 = (rest % COL_BLOCKS) * BM;
    let b = rest / COL_BLOCKS;
    let tx = lid % 16u;
    let ty = lid / 16u;

{{SETUP}}
    for (var k0 = 0u; k0 < K; k0 += BK) {
{{LOADS}}
        workgroupBarrier();
{{BODY}}
        workgroupBarrier();
    }
{{STORE}}
}
