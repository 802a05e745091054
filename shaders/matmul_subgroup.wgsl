// brigade: f32 batched matmul sharing A through subgroup broadcasts, C[b] = A[b] @ B[b].
//
// C (BATCH, M, N) row-major. Layouts as in matmul_tiled.wgsl (this instance: {{LAYOUT}}): nn reads
// A (BATCH, M, K) and B (BATCH, K, N); nt reads B stored (BATCH, N, K); tn reads A stored
// (BATCH, K, M). Needs K % 4 == 0, N % 4 == 0 (and M % 4 == 0 for tn) and
// the SUBGROUP feature with a fixed subgroup size S == the workgroup size, so one workgroup is one
// subgroup and its lanes are told apart by subgroup_invocation_id alone.
//
// A workgroup computes an S x 4S block of C: S rows, one vec4 of columns per lane. Per step of 4
// in k every lane loads one vec4 of the block's S x 4 slice of A (nn: its own row; tn: a quarter
// row of the stored A^T) and four vec4s of B (its own columns; nt: four stored rows, transposed in
// registers); the slice of A reaches every lane by subgroupBroadcast instead of S loads each. Storage loads are the
// cost on CPU adapters (a per-lane loop with a bounds check on llvmpipe), so this cuts them from
// S + 4 to 5 per 4·S fmas per lane. Workgroups walk down the rows of one column group first.
// Every element of C is the same k-ascending fma chain as in the tiled family.
//
// Placeholders (filled by src/ops/matmul/kernel.rs): BATCH M K N GRID_X GRID_Y S, and the generated
// accumulators, fmas and stores.

// No `enable subgroups;`: naga 30 rejects the directive ("not yet supported") and accepts the
// builtins when the device has the SUBGROUP feature (native only; the browser never gets here).

{{BUFFERS}}

{{SHAPE}}

const S: u32 = {{S}}u;
const K4: u32 = K / 4u;
const M4: u32 = M / 4u;
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
{{SETUP}}
{{ACCS}}
    for (var kk = 0u; kk < K / 4u; kk++) {
{{LOADS}}
{{FMAS}}
    }

    if (col4 < N4) {
        let pc = b * (M * N4) + row0 * N4 + col4;
{{STORES}}
    }
}
