// brigade: f32 batched matmul sharing A through subgroup broadcasts, C[b] = A[b] @ B[b].
//
// A (BATCH, M, K), B (BATCH, K, N), C (BATCH, M, N), row-major; needs K % 4 == 0, N % 4 == 0 and
// the SUBGROUP feature with a fixed subgroup size S == the workgroup size, so one workgroup is one
// subgroup and its lanes are told apart by subgroup_invocation_id alone.
//
// A workgroup computes an S x 4S block of C: S rows, one vec4 of columns per lane. Per step of 4
// in k every lane loads one vec4 of A (its own row) and four vec4s of B (its own columns); the S
// rows of A reach every lane by subgroupBroadcast instead of S loads each. Storage loads are the
// cost on CPU adapters (a per-lane loop with a bounds check on llvmpipe), so this cuts them from
// S + 4 to 5 per 4·S fmas per lane. Workgroups walk down the rows of one column group first.
// Every element of C is the same k-ascending fma chain as in the tiled family.
//
// Placeholders (filled by src/wgsl/matmul.rs): BATCH M K N GRID_X GRID_Y S, and the generated
// accumulators, fmas and stores.

// No `enable subgroups;`: naga 30 rejects the directive ("not yet supported") and accepts the
// builtins when the device has the SUBGROUP feature (native only; the browser never gets here).

@group(0) @binding(0) var<storage, read> A: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> B: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> C: array<vec4<f32>>;

const BATCH: u32 = {{BATCH}}u;
const M: u32 = {{M}}u;
const K: u32 = {{K}}u;
const N: u32 = {{N}}u;
const GRID_X: u32 = {{GRID_X}}u;
const GRID_Y: u32 = {{GRID_Y}}u;

const S: u32 = {{S}}u;
const K4: u32 = K / 4u;
const N4: u32 = N / 4u;
const ROW_TILES: u32 = (M + S - 1u) / S;
const COL_GROUPS: u32 = (N4 + S - 1u) / S;
const GROUPS: u32 = BATCH * ROW_TILES * COL_GROUPS;

@compute @workgroup_size({{S}}, 1, 1)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32) {
    // Uniform per workgroup, so the broadcasts below run in uniform control flow.
    let g = wid.x + GRID_X * (wid.y + GRID_Y * wid.z);
    if (g >= GROUPS) {
        return;
    }
    let row0 = (g % ROW_TILES) * S;
    let rest = g / ROW_TILES;
    let col4 = (rest % COL_GROUPS) * S + lane;
    let b = rest / COL_GROUPS;

    // Rows and columns past the edge are clamped on read and skipped on write.
    let pa = b * (M * K4) + min(row0 + lane, M - 1u) * K4;
    let pb = b * (K * N4) + min(col4, N4 - 1u);
{{ACCS}}
    var kb = 0u;
    for (var kk = 0u; kk < K4; kk++) {
        let mine = A[pa + kk];
        let b0 = B[pb + kb];
        let b1 = B[pb + kb + N4];
        let b2 = B[pb + kb + 2u * N4];
        let b3 = B[pb + kb + 3u * N4];
{{FMAS}}
        kb += 4u * N4;
    }

    if (col4 < N4) {
        let pc = b * (M * N4) + row0 * N4 + col4;
{{STORES}}
    }
}
