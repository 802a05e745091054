// brigade: fast f32 batched matmul, C[b] = A[b] @ B[b].
//
// A: (BATCH, M, K), B: (BATCH, K, N), C: (BATCH, M, N), all row-major and contiguous.
// Requires K % 4 == 0 and N % 4 == 0 (the buffers are viewed as arrays of vec4<f32>);
// M is arbitrary (rows past the edge are clamped on read and skipped on write).
//
// Register-blocked, no workgroup memory, no barriers. Every invocation computes one
// TM x 4 block of C (TM = 8 rows, one vec4 of columns) and walks k in steps of 4:
// 8 vec4 loads of A (one per row, k..k+3) + 4 vec4 loads of B (rows k..k+3) feed
// 32 vec4 FMAs. Invocations are numbered linearly over (batch, column vec4, row tile)
// with the row tile fastest: the lanes of a SIMD group take adjacent 8-row blocks and
// read the same vec4s of B, and consecutive workgroups walk down the same column strip
// of B. On llvmpipe this order is as fast as column-fastest at 1024^3 and ~1.5x faster
// at 2048^3 (B rows are 8 KiB apart there and column-fastest misses cache on them).
// The linear workgroup index is folded into x/y/z by the host so that no dispatch
// dimension exceeds the device limit.
//
// Accumulation is in f32, k ascending, one fma per (row, k) -> deterministic.
//
// Placeholders (filled by src/wgsl/matmul.rs): {{BATCH}} {{M}} {{K}} {{N}} {{GRID_X}} {{GRID_Y}}

@group(0) @binding(0) var<storage, read> A: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> B: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> C: array<vec4<f32>>;

const BATCH: u32 = {{BATCH}}u;
const M: u32 = {{M}}u;
const K: u32 = {{K}}u;
const N: u32 = {{N}}u;
const GRID_X: u32 = {{GRID_X}}u;
const GRID_Y: u32 = {{GRID_Y}}u;

const WG: u32 = 64u;
const TM: u32 = 8u;
const K4: u32 = K / 4u;
const N4: u32 = N / 4u;
const ROW_TILES: u32 = (M + TM - 1u) / TM;
const TILES: u32 = BATCH * ROW_TILES * N4;

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = (wid.x + GRID_X * (wid.y + GRID_Y * wid.z)) * WG + lid;
    if (t >= TILES) {
        return;
    }
    let row0 = (t % ROW_TILES) * TM;
    let rest = t / ROW_TILES;
    let col4 = rest % N4;
    let b = rest / N4;

    // Row starts of A (in vec4 units), clamped to the last row at the bottom edge.
    let a_base = b * (M * K4);
    let pa0 = a_base + row0 * K4;
    let pa1 = a_base + min(row0 + 1u, M - 1u) * K4;
    let pa2 = a_base + min(row0 + 2u, M - 1u) * K4;
    let pa3 = a_base + min(row0 + 3u, M - 1u) * K4;
    let pa4 = a_base + min(row0 + 4u, M - 1u) * K4;
    let pa5 = a_base + min(row0 + 5u, M - 1u) * K4;
    let pa6 = a_base + min(row0 + 6u, M - 1u) * K4;
    let pa7 = a_base + min(row0 + 7u, M - 1u) * K4;
    var pb = b * (K * N4) + col4;

    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    var acc4 = vec4<f32>(0.0);
    var acc5 = vec4<f32>(0.0);
    var acc6 = vec4<f32>(0.0);
    var acc7 = vec4<f32>(0.0);

    for (var kk = 0u; kk < K4; kk++) {
        let a0 = A[pa0 + kk];
        let a1 = A[pa1 + kk];
        let a2 = A[pa2 + kk];
        let a3 = A[pa3 + kk];
        let a4 = A[pa4 + kk];
        let a5 = A[pa5 + kk];
        let a6 = A[pa6 + kk];
        let a7 = A[pa7 + kk];

        let b0 = B[pb];
        acc0 = fma(vec4<f32>(a0.x), b0, acc0);
        acc1 = fma(vec4<f32>(a1.x), b0, acc1);
        acc2 = fma(vec4<f32>(a2.x), b0, acc2);
        acc3 = fma(vec4<f32>(a3.x), b0, acc3);
        acc4 = fma(vec4<f32>(a4.x), b0, acc4);
        acc5 = fma(vec4<f32>(a5.x), b0, acc5);
        acc6 = fma(vec4<f32>(a6.x), b0, acc6);
        acc7 = fma(vec4<f32>(a7.x), b0, acc7);

        let b1 = B[pb + N4];
        acc0 = fma(vec4<f32>(a0.y), b1, acc0);
        acc1 = fma(vec4<f32>(a1.y), b1, acc1);
        acc2 = fma(vec4<f32>(a2.y), b1, acc2);
        acc3 = fma(vec4<f32>(a3.y), b1, acc3);
        acc4 = fma(vec4<f32>(a4.y), b1, acc4);
        acc5 = fma(vec4<f32>(a5.y), b1, acc5);
        acc6 = fma(vec4<f32>(a6.y), b1, acc6);
        acc7 = fma(vec4<f32>(a7.y), b1, acc7);

        let b2 = B[pb + 2u * N4];
        acc0 = fma(vec4<f32>(a0.z), b2, acc0);
        acc1 = fma(vec4<f32>(a1.z), b2, acc1);
        acc2 = fma(vec4<f32>(a2.z), b2, acc2);
        acc3 = fma(vec4<f32>(a3.z), b2, acc3);
        acc4 = fma(vec4<f32>(a4.z), b2, acc4);
        acc5 = fma(vec4<f32>(a5.z), b2, acc5);
        acc6 = fma(vec4<f32>(a6.z), b2, acc6);
        acc7 = fma(vec4<f32>(a7.z), b2, acc7);

        let b3 = B[pb + 3u * N4];
        acc0 = fma(vec4<f32>(a0.w), b3, acc0);
        acc1 = fma(vec4<f32>(a1.w), b3, acc1);
        acc2 = fma(vec4<f32>(a2.w), b3, acc2);
        acc3 = fma(vec4<f32>(a3.w), b3, acc3);
        acc4 = fma(vec4<f32>(a4.w), b3, acc4);
        acc5 = fma(vec4<f32>(a5.w), b3, acc5);
        acc6 = fma(vec4<f32>(a6.w), b3, acc6);
        acc7 = fma(vec4<f32>(a7.w), b3, acc7);

        pb += 4u * N4;
    }

    let pc = b * (M * N4) + row0 * N4 + col4;
    C[pc] = acc0;
    if (row0 + 1u < M) { C[pc + N4] = acc1; }
    if (row0 + 2u < M) { C[pc + 2u * N4] = acc2; }
    if (row0 + 3u < M) { C[pc + 3u * N4] = acc3; }
    if (row0 + 4u < M) { C[pc + 4u * N4] = acc4; }
    if (row0 + 5u < M) { C[pc + 5u * N4] = acc5; }
    if (row0 + 6u < M) { C[pc + 6u * N4] = acc6; }
    if (row0 + 7u < M) { C[pc + 7u * N4] = acc7; }
}
