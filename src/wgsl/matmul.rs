//! Batched matrix multiply kernels: `C[b] = A[b] @ B[b]`.
//!
//! Two WGSL templates, instantiated by textual substitution of `{{NAME}}` placeholders:
//!
//! * `shaders/matmul_vec4.wgsl` — the fast f32 kernel. A, B and C are bound as
//!   `array<vec4<f32>>`, so it needs `k % 4 == 0` and `n % 4 == 0`; any `m`. Each invocation
//!   computes an 8 x 4 block of C (8 rows x one vec4 of columns), stepping k by 4.
//! * `shaders/matmul_generic.wgsl` — any `m, k, n >= 1`, element type `f32`, `i32` or `u32`,
//!   bound as `array<T>`. Each invocation computes a 4 x 4 block of C from scalar loads.
//!
//! Neither kernel uses workgroup memory or `workgroupBarrier` (barriers are very costly on
//! llvmpipe/lavapipe, our CI adapter). Both use 64 invocations per workgroup (within
//! SwiftShader's 256 limit). Invocations are numbered linearly over
//! `(batch, column tile, row tile)` with the row tile fastest (adjacent lanes share B's columns;
//! on llvmpipe this is ~1.4x faster than column-fastest at 2048³ and equal at 1024³); the linear
//! workgroup index `x + GRID_X * (y + GRID_Y * z)` is folded into three dispatch dimensions so
//! that none exceeds `max_workgroups_per_dim`, whatever the batch size. Invocations past the end
//! return at once.
//!
//! Measured on lavapipe (Mesa 25.0.7, 2 cores; CPU time normalised to 2 cores because the box was
//! shared), 8 x 4 vec4 kernel: ~9.5-11 GFLOP/s at 256³-1024³, ~6.5-8 at 2048³; the generic
//! kernel ~6. On this driver (and on 22.3.6) every storage-buffer load
//! with a non-constant index becomes a per-lane scalar loop with a bounds check, so the kernels
//! are bound by load count and register pressure: 8 x 4 beat 4 x 4, 8 x 8, 16 x 4 and 16 x 16 blocks.
//!
//! Accumulation runs in the element type (f32 for floats) with k ascending, so results are
//! deterministic for a given adapter.
//!
//! Bindings of both kernels: `@group(0) @binding(0)` A (read), `@binding(1)` B (read),
//! `@binding(2)` C (read_write); entry point `main`.

const VEC4_TEMPLATE: &str = include_str!("../../shaders/matmul_vec4.wgsl");
const GENERIC_TEMPLATE: &str = include_str!("../../shaders/matmul_generic.wgsl");

/// Invocations per workgroup of both kernels (`@workgroup_size(64, 1, 1)` in the templates).
pub(crate) const MATMUL_WORKGROUP_SIZE: u32 = 64;
/// Rows of C per invocation in the vec4 kernel (`TM` in the template).
const VEC4_TILE_ROWS: u64 = 8;
/// Columns of C per invocation in the vec4 kernel (one vec4).
const VEC4_TILE_COLS: u64 = 4;
/// Rows and columns of C per invocation in the generic kernel.
const GENERIC_TILE: u64 = 4;

/// A ready-to-compile matmul shader and the workgroup counts to dispatch it with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MatmulKernel {
    /// Human-readable name, e.g. `matmul_vec4_f32_b1_m1024_k1024_n1024`.
    pub label: String,
    /// Complete WGSL module; entry point `main`.
    pub wgsl: String,
    /// Arguments for `dispatch_workgroups(x, y, z)`; each at most `max_workgroups_per_dim`.
    /// All zero when there is nothing to compute (`batch`, `m` or `n` is zero).
    pub workgroups: [u32; 3],
}

/// Which template a shape/dtype uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MatmulVariant {
    /// `shaders/matmul_vec4.wgsl` (f32, `k % 4 == 0`, `n % 4 == 0`).
    Vec4,
    /// `shaders/matmul_generic.wgsl` (anything else).
    Generic,
}

impl MatmulVariant {
    /// The variant [`matmul_kernel`] picks for this shape and element type.
    pub(crate) fn choose(k: usize, n: usize, elem: &str) -> MatmulVariant {
        if elem == "f32" && k.is_multiple_of(4) && n.is_multiple_of(4) && n > 0 && k > 0 {
            MatmulVariant::Vec4
        } else {
            MatmulVariant::Generic
        }
    }

    /// Number of invocations that do work (one per output block).
    fn tiles(self, batch: u64, m: u64, n: u64) -> u64 {
        match self {
            MatmulVariant::Vec4 => batch * m.div_ceil(VEC4_TILE_ROWS) * (n / VEC4_TILE_COLS),
            MatmulVariant::Generic => batch * m.div_ceil(GENERIC_TILE) * n.div_ceil(GENERIC_TILE),
        }
    }
}

/// `C[b] = A[b] @ B[b]` for `b in 0..batch`; A is (batch, m, k), B is (batch, k, n), C is
/// (batch, m, n), all row-major contiguous. Bindings: `@group(0) @binding(0)` A (read),
/// `@binding(1)` B (read), `@binding(2)` C (read_write). `elem` is the WGSL storage element type
/// name: `"f32"`, `"i32"` or `"u32"`. Chooses the vec4 kernel when `elem` is f32 and
/// `k % 4 == 0 && n % 4 == 0`, otherwise the generic one.
///
/// # Panics
/// If `elem` is not one of the three types, if `max_workgroups_per_dim` is zero, or if the
/// problem is too large for 32-bit indexing (more than `u32::MAX` elements in one of A, B, C)
/// or for `max_workgroups_per_dim³` workgroups.
pub(crate) fn matmul_kernel(
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    elem: &str,
    max_workgroups_per_dim: u32,
) -> MatmulKernel {
    let variant = MatmulVariant::choose(k, n, elem);
    instantiate(variant, batch, m, k, n, elem, max_workgroups_per_dim)
}

/// Instantiates a specific template (the generic one accepts any shape; the vec4 one needs
/// f32 and `k % 4 == 0`, `n % 4 == 0`).
pub(crate) fn instantiate(
    variant: MatmulVariant,
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    elem: &str,
    max_workgroups_per_dim: u32,
) -> MatmulKernel {
    assert!(
        matches!(elem, "f32" | "i32" | "u32"),
        "matmul: unsupported element type {elem:?} (expected f32, i32 or u32)"
    );
    assert!(
        max_workgroups_per_dim >= 1,
        "matmul: max_workgroups_per_dim must be at least 1"
    );
    if variant == MatmulVariant::Vec4 {
        assert!(
            elem == "f32" && k.is_multiple_of(4) && n.is_multiple_of(4),
            "matmul: the vec4 kernel needs f32 and k, n multiples of 4 (got {elem}, k={k}, n={n})"
        );
    }
    let (b64, m64, k64, n64) = (batch as u64, m as u64, k as u64, n as u64);
    let limit = u32::MAX as u64;
    for (name, elems) in [
        ("A", b64 * m64 * k64),
        ("B", b64 * k64 * n64),
        ("C", b64 * m64 * n64),
    ] {
        assert!(
            elems <= limit,
            "matmul: {name} has {elems} elements, more than 32-bit indexing allows"
        );
    }

    let tiles = variant.tiles(b64, m64, n64);
    let workgroups = fold_workgroups(
        tiles.div_ceil(MATMUL_WORKGROUP_SIZE as u64),
        max_workgroups_per_dim,
    );
    let dispatched =
        workgroups.iter().map(|&w| w as u64).product::<u64>() * MATMUL_WORKGROUP_SIZE as u64;
    assert!(
        dispatched <= limit + 1,
        "matmul: {dispatched} invocations do not fit the kernel's 32-bit invocation index"
    );

    let (template, kind) = match variant {
        MatmulVariant::Vec4 => (VEC4_TEMPLATE, "vec4"),
        MatmulVariant::Generic => (GENERIC_TEMPLATE, "generic"),
    };
    // Degenerate problems dispatch nothing; keep the constants >= 1 so the module stays valid
    // (the templates compute `M - 1u` and divide by tile counts).
    let wgsl = fill(
        template,
        &[
            ("T", elem.to_string()),
            ("BATCH", batch.max(1).to_string()),
            ("M", m.max(1).to_string()),
            ("K", k.to_string()),
            (
                "N",
                n.max(if variant == MatmulVariant::Vec4 { 4 } else { 1 })
                    .to_string(),
            ),
            ("GRID_X", workgroups[0].max(1).to_string()),
            ("GRID_Y", workgroups[1].max(1).to_string()),
        ],
    );
    MatmulKernel {
        label: format!("matmul_{kind}_{elem}_b{batch}_m{m}_k{k}_n{n}"),
        wgsl,
        workgroups,
    }
}

/// Replaces every `{{NAME}}` in `template`; panics if a placeholder is left over.
fn fill(template: &str, values: &[(&str, String)]) -> String {
    let mut out = template.to_string();
    for (name, value) in values {
        out = out.replace(&format!("{{{{{name}}}}}"), value);
    }
    if let Some(pos) = out.find("{{") {
        let end = out[pos..].find("}}").map_or(out.len(), |e| pos + e + 2);
        panic!(
            "matmul: unfilled placeholder {} in template",
            &out[pos..end]
        );
    }
    out
}

/// Splits `total` workgroups into `[x, y, z]` with every dimension at most `max_per_dim`
/// and `x * y * z >= total` (the kernel linearises `x + X * (y + Y * z)` and skips indices
/// past the end). The excess is less than `y * z` workgroups. `total == 0` gives `[0, 0, 0]`.
pub(crate) fn fold_workgroups(total: u64, max_per_dim: u32) -> [u32; 3] {
    assert!(max_per_dim >= 1, "max_per_dim must be at least 1");
    if total == 0 {
        return [0, 0, 0];
    }
    let max = max_per_dim as u64;
    if total <= max {
        return [total as u32, 1, 1];
    }
    let z = total.div_ceil(max * max);
    assert!(
        z <= max,
        "matmul: {total} workgroups exceed {max_per_dim}^3 (the dispatch limit)"
    );
    let per_z = total.div_ceil(z); // <= max * max
    let y = per_z.div_ceil(max); // <= max
    let x = per_z.div_ceil(y); // <= max because per_z <= y * max
    [x as u32, y as u32, z as u32]
}

#[cfg(test)]
mod tests {
    use super::*;
    use naga::valid::{Capabilities, ValidationFlags, Validator};

    fn validate(wgsl: &str, label: &str) {
        let module = naga::front::wgsl::parse_str(wgsl)
            .unwrap_or_else(|e| panic!("{label}: parse error:\n{}", e.emit_to_string(wgsl)));
        Validator::new(ValidationFlags::all(), Capabilities::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{label}: validation error: {e:?}"));
        let ep = module
            .entry_points
            .iter()
            .find(|ep| ep.name == "main")
            .expect("entry point main");
        assert_eq!(ep.workgroup_size, [MATMUL_WORKGROUP_SIZE, 1, 1], "{label}");
        assert!(
            !wgsl.contains("workgroupBarrier"),
            "{label}: kernels must not use barriers"
        );
    }

    const SHAPES: &[(usize, usize, usize, usize)] = &[
        (1, 1, 1, 1),
        (1, 3, 5, 7),
        (3, 33, 17, 65),
        (1, 4, 4, 4),
        (2, 1, 8, 4),
        (1, 7, 12, 20),
        (5, 9, 4, 8),
        (1, 256, 256, 256),
        (1, 1024, 1024, 1024),
        (1, 1000, 1000, 1000),
        (64, 16, 16, 16),
        (100_000, 2, 4, 4),
        (1, 2048, 2048, 2048),
    ];

    #[test]
    fn templates_validate_for_shapes_and_dtypes() {
        for &(b, m, k, n) in SHAPES {
            for elem in ["f32", "i32", "u32"] {
                let kern = matmul_kernel(b, m, k, n, elem, 65_535);
                validate(&kern.wgsl, &kern.label);
                let generic = instantiate(MatmulVariant::Generic, b, m, k, n, elem, 65_535);
                validate(&generic.wgsl, &generic.label);
            }
            if k.is_multiple_of(4) && n.is_multiple_of(4) {
                let v = instantiate(MatmulVariant::Vec4, b, m, k, n, "f32", 65_535);
                validate(&v.wgsl, &v.label);
            }
        }
    }

    #[test]
    fn no_placeholders_left() {
        for variant in [MatmulVariant::Vec4, MatmulVariant::Generic] {
            let k = instantiate(variant, 2, 5, 8, 12, "f32", 65_535);
            assert!(!k.wgsl.contains("{{"), "{}", k.label);
        }
    }

    #[test]
    fn chooses_vec4_only_when_aligned_f32() {
        assert_eq!(MatmulVariant::choose(8, 12, "f32"), MatmulVariant::Vec4);
        assert_eq!(MatmulVariant::choose(8, 12, "i32"), MatmulVariant::Generic);
        assert_eq!(MatmulVariant::choose(8, 12, "u32"), MatmulVariant::Generic);
        assert_eq!(MatmulVariant::choose(6, 12, "f32"), MatmulVariant::Generic);
        assert_eq!(MatmulVariant::choose(8, 10, "f32"), MatmulVariant::Generic);
        assert!(
            matmul_kernel(1, 3, 4, 4, "f32", 65_535)
                .label
                .starts_with("matmul_vec4_f32")
        );
        assert!(
            matmul_kernel(1, 3, 5, 4, "f32", 65_535)
                .label
                .starts_with("matmul_generic_f32")
        );
        assert!(
            matmul_kernel(1, 3, 4, 4, "i32", 65_535)
                .label
                .starts_with("matmul_generic_i32")
        );
    }

    /// Emulates the kernel's invocation numbering and checks that every output tile is
    /// computed exactly once and that no dimension exceeds the limit.
    fn check_coverage(variant: MatmulVariant, b: usize, m: usize, k: usize, n: usize, max: u32) {
        let kern = instantiate(variant, b, m, k, n, "f32", max);
        let [x, y, z] = kern.workgroups;
        assert!(
            x <= max && y <= max && z <= max,
            "{}: {:?} over {max}",
            kern.label,
            kern.workgroups
        );
        let tiles = variant.tiles(b as u64, m as u64, n as u64);
        let wg = MATMUL_WORKGROUP_SIZE as u64;
        let dispatched = x as u64 * y as u64 * z as u64 * wg;
        assert!(
            dispatched >= tiles,
            "{}: {dispatched} invocations < {tiles} tiles",
            kern.label
        );
        // Excess is less than one row of the folded grid (plus the partial last workgroup).
        assert!(
            dispatched - tiles < (y as u64 * z as u64 + 1) * wg,
            "{}: too much slack",
            kern.label
        );
        if dispatched <= 4_000_000 {
            let mut seen = vec![false; tiles as usize];
            for wz in 0..z as u64 {
                for wy in 0..y as u64 {
                    for wx in 0..x as u64 {
                        for lid in 0..wg {
                            let t = (wx + x as u64 * (wy + y as u64 * wz)) * wg + lid;
                            if t < tiles {
                                assert!(!seen[t as usize], "{}: tile {t} twice", kern.label);
                                seen[t as usize] = true;
                            }
                        }
                    }
                }
            }
            assert!(
                seen.iter().all(|&s| s),
                "{}: some tile not covered",
                kern.label
            );
        }
    }

    #[test]
    fn workgroups_cover_output_within_limits() {
        for &max in &[1u32, 2, 7, 16, 255, 65_535] {
            for &(b, m, k, n) in &[
                (1usize, 1usize, 1usize, 1usize),
                (1, 3, 5, 7),
                (3, 33, 17, 65),
                (2, 9, 8, 12),
                (1, 256, 256, 256),
                (100_000, 1, 1, 1),
                (100_000, 4, 4, 4),
                (1000, 17, 8, 33),
            ] {
                let fits = |v: MatmulVariant| {
                    let groups = v
                        .tiles(b as u64, m as u64, n as u64)
                        .div_ceil(MATMUL_WORKGROUP_SIZE as u64);
                    groups <= (max as u64).pow(3)
                };
                if fits(MatmulVariant::Generic) {
                    check_coverage(MatmulVariant::Generic, b, m, k, n, max);
                }
                if k.is_multiple_of(4) && n.is_multiple_of(4) && fits(MatmulVariant::Vec4) {
                    check_coverage(MatmulVariant::Vec4, b, m, k, n, max);
                }
            }
        }
    }

    #[test]
    fn large_batch_folds_into_y_and_z() {
        // 100 000 tiny matmuls with a small per-dimension limit.
        let kern = matmul_kernel(100_000, 1, 1, 1, "f32", 16);
        let [x, y, z] = kern.workgroups;
        assert!(x <= 16 && y <= 16 && z <= 16);
        assert!(x as u64 * y as u64 * z as u64 * 64 >= 100_000);
        // Large batch of 64x64 with the usual limit: 100 000 * 8 * 16 tiles.
        let kern = matmul_kernel(100_000, 64, 64, 64, "f32", 65_535);
        let [x, y, z] = kern.workgroups;
        assert!(x <= 65_535 && y <= 65_535 && z <= 65_535 && y > 1);
        assert!(x as u64 * y as u64 * z as u64 * 64 >= 100_000 * 8 * 16);
    }

    #[test]
    fn fold_workgroups_bounds() {
        assert_eq!(fold_workgroups(0, 10), [0, 0, 0]);
        assert_eq!(fold_workgroups(5, 10), [5, 1, 1]);
        assert_eq!(fold_workgroups(10, 10), [10, 1, 1]);
        for max in [1u32, 2, 3, 10, 255, 65_535] {
            let cap = (max as u64).pow(3).min(1 << 40);
            for total in [
                1u64,
                2,
                11,
                99,
                100,
                101,
                999,
                1000,
                12345,
                1 << 20,
                1 << 32,
                cap,
            ] {
                if total > cap {
                    continue;
                }
                let [x, y, z] = fold_workgroups(total, max);
                assert!(x <= max && y <= max && z <= max, "{total} {max}");
                let prod = x as u64 * y as u64 * z as u64;
                assert!(
                    prod >= total && prod - total < y as u64 * z as u64,
                    "{total} {max} -> {x} {y} {z}"
                );
            }
        }
    }

    #[test]
    fn degenerate_shapes_dispatch_nothing() {
        let kern = matmul_kernel(0, 4, 4, 4, "f32", 65_535);
        assert_eq!(kern.workgroups, [0, 0, 0]);
        validate(&kern.wgsl, &kern.label);
        let kern = matmul_kernel(1, 0, 3, 5, "u32", 65_535);
        assert_eq!(kern.workgroups, [0, 0, 0]);
        validate(&kern.wgsl, &kern.label);
    }

    #[test]
    #[should_panic(expected = "unsupported element type")]
    fn rejects_unknown_dtype() {
        matmul_kernel(1, 2, 2, 2, "f16", 65_535);
    }
}
