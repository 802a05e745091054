// brigade: general batched matmul for any M, K, N >= 1 and element type f32 / i32 / u32.
// C[b] = op(A[b]) @ op(B[b]); C: (BATCH, M, N), row-major. A is (BATCH, M, K) row-major, or
// stored transposed as (BATCH, K, M); B is (BATCH, K, N), or stored transposed as (BATCH, N, K).
// Element (i, k) of A sits at b * M * K + i * A_RS + k * A_KS, element (k, j) of B at
// b * K * N + k * B_KS + j * B_CS, so transposed operands (from grad) are read in place.
//
// Used when the vec4 kernel's alignment conditions fail (K or N not a multiple of 4) or the
// element type is an integer. No workgroup memory, no barriers. Every invocation computes a
// 4 x 4 block of C from scalar loads (per k: 4 loads of A, 4 of B, 16 multiply-adds), with the
// block's rows and columns clamped on read and skipped on write at the edges. Invocations are
// numbered linearly over (batch, column tile, row tile), row tile fastest (adjacent lanes share
// the B columns and walk down the same column strip; on llvmpipe ~1.4x faster than
// column-fastest at 2048^3, equal at 1024^3). The host folds the linear workgroup index into
// x/y/z so that no dispatch dimension exceeds the device limit.
//
// Accumulation is in T (f32 for floats; wrapping i32/u32 for integers), k ascending -> deterministic.
//
// Placeholders (filled by src/ops/matmul/kernel.rs): {{T}} {{BATCH}} {{M}} {{K}} {{N}} {{GRID_X}} {{GRID_Y}}
// {{A_RS}} {{A_KS}} {{B_KS}} {{B_CS}}

{{BUFFERS}}

alias T = {{T}};

{{SHAPE}}
const A_RS: u32 = {{A_RS}}u;
const A_KS: u32 = {{A_KS}}u;
const B_KS: u32 = {{B_KS}}u;
const B_CS: u32 = {{B_CS}}u;

const WG: u32 = 64u;
const ROW_TILES: u32 = (M + 3u) / 4u;
const COL_TILES: u32 = (N + 3u) / 4u;
const TILES: u32 = BATCH * ROW_TILES * COL_TILES;

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = (wid.x + GRID_X * (wid.y + GRID_Y * wid.z)) * WG + lid;
    if (t >= TILES) {
        return;
    }
    let row0 = (t % ROW_TILES) * 4u;
    let rest = t / ROW_TILES;
    let col0 = (rest % COL_TILES) * 4u;
    let b = rest / COL_TILES;

    // Clamped rows of A and columns of B: reads stay in bounds, the extra results are dropped.
    let a_base = b * (M * K);
    let pa0 = a_base + row0 * A_RS;
    let pa1 = a_base + min(row0 + 1u, M - 1u) * A_RS;
    let pa2 = a_base + min(row0 + 2u, M - 1u) * A_RS;
    let pa3 = a_base + min(row0 + 3u, M - 1u) * A_RS;
    let c0 = col0 * B_CS;
    let c1 = min(col0 + 1u, N - 1u) * B_CS;
    let c2 = min(col0 + 2u, N - 1u) * B_CS;
    let c3 = min(col0 + 3u, N - 1u) * B_CS;

    var acc0 = vec4<T>();
    var acc1 = vec4<T>();
    var acc2 = vec4<T>();
    var acc3 = vec4<T>();

    var ka = 0u;
    var pb = b * (K * N);
    for (var k = 0u; k < K; k++) {
        let bv = vec4<T>(B[pb + c0], B[pb + c1], B[pb + c2], B[pb + c3]);
        acc0 += vec4<T>(A[pa0 + ka]) * bv;
        acc1 += vec4<T>(A[pa1 + ka]) * bv;
        acc2 += vec4<T>(A[pa2 + ka]) * bv;
        acc3 += vec4<T>(A[pa3 + ka]) * bv;
        ka += A_KS;
        pb += B_KS;
    }

    let c_base = b * (M * N);
    store_row(c_base + row0 * N, col0, acc0);
    if (row0 + 1u < M) { store_row(c_base + (row0 + 1u) * N, col0, acc1); }
    if (row0 + 2u < M) { store_row(c_base + (row0 + 2u) * N, col0, acc2); }
    if (row0 + 3u < M) { store_row(c_base + (row0 + 3u) * N, col0, acc3); }
}

fn store_row(row_start: u32, col0: u32, v: vec4<T>) {
    let p = row_start + col0;
    C[p] = v.x;
    if (col0 + 1u < N) { C[p + 1u] = v.y; }
    if (col0 + 2u < N) { C[p + 2u] = v.z; }
    if (col0 + 3u < N) { C[p + 3u] = v.w; }
}
