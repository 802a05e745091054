//! Batched matrix multiply kernels: `C[b] = op(A[b]) @ op(B[b])`, a small family to choose from.
//!
//! WGSL templates, instantiated by textual substitution of `{{NAME}}` placeholders:
//!
//! * `shaders/matmul_tiled.wgsl` — the fast f32 family ([`MatmulConfig::Tiled`]). A, B and C are
//!   bound as `array<vec4<f32>>`. Each invocation computes a `tm x 4*tc4` block of C
//!   (`tm` in {4, 8} rows, `tc4` in {1, 2} vec4s of columns) and walks k `ks` at a time; the loads
//!   and FMAs are generated unrolled here. Three operand layouts ([`Layout`]): plain (`nn`), B stored
//!   transposed (`nt`, `dA = dC @ B^T` of grad) and A stored transposed (`tn`, `dB = A^T @ dC`), so
//!   grad's transposed operands are read in place with vec4 loads along their contiguous axis.
//! * `shaders/matmul_subgroup.wgsl` — f32, `nn`/`nt`/`tn`, for adapters with `SUBGROUP` and a fixed
//!   subgroup size `s` ([`MatmulConfig::Subgroup`]): one subgroup per workgroup computes an
//!   `s x 4s` block, each lane loading its own row of A and broadcasting it to the others, so a lane
//!   loads 5 vec4s per 4 k steps instead of `tm + 4` (2.0-2.5x the tiled members on lavapipe).
//!   Only a device's chooser offers it.
//! * `shaders/matmul_texture.wgsl` — f32 `nn` with `k` and `n` multiples of 64
//!   ([`MatmulConfig::Texture`]): A and B are bound as `texture_2d<f32>` (rgba32float, read with
//!   `textureLoad`), filled from their buffers by the dispatch (`crate::device::texture`); an 8 x 8
//!   block of C per invocation. For SwiftShader (the browser without a GPU), where a storage load
//!   that differs per lane is a gather per scalar and a texel fetch is one load; only the browser
//!   takes it by default.
//! * `shaders/matmul_shared.wgsl` — f32, `nn`/`nt`/`tn`, for GPUs ([`MatmulConfig::Shared`]): a
//!   workgroup of 256 invocations computes a 64- or 128-square block of C from k slices of A and B
//!   it stages in workgroup memory (`bk` steps of k per barrier), so each operand element is read
//!   from storage once per workgroup. Only a device's chooser offers it, and only on adapters that
//!   are not CPUs.
//! * `shaders/matmul_generic.wgsl` — any `m, k, n >= 1`, element type `f32`, `i32` or `u32`, either
//!   operand transposed or not (strides), bound as `array<T>`; a 4 x 4 block of C per invocation from
//!   scalar loads.
//!
//! Which member runs is a [`MatmulConfig`] picked per problem by a [`MatmulChooser`]: the lowering is
//! pure and takes the chooser as an argument; [`DefaultChooser`] is the fixed heuristic (the 8 x 4
//! kernel measured best on lavapipe), `crate::device::tune` measures the candidates on the device.
//! Every tiled member computes each element of C as the same fma chain (k ascending, f32), so the
//! choice never changes a result; only the generic kernel (`+=` of products, integers wrap) differs,
//! and it is never a candidate when a tiled member applies.
//!
//! Only the workgroup-memory member uses workgroup memory and `workgroupBarrier` (barriers are
//! very costly on llvmpipe/lavapipe, our CI adapter, which never gets it offered; the tests run it
//! there for its values). The tiled and generic ones use 64 invocations per workgroup (within
//! SwiftShader's 256 limit). Invocations are numbered linearly over
//! `(batch, column tile, row tile)` with the row tile fastest (adjacent lanes share B's columns;
//! on llvmpipe this is ~1.4x faster than column-fastest at 2048³ and equal at 1024³); the linear
//! workgroup index `x + GRID_X * (y + GRID_Y * z)` is folded into three dispatch dimensions so
//! that none exceeds `max_workgroups_per_dim`, whatever the batch size. Invocations past the end
//! return at once.
//!
//! On lavapipe (Mesa 25.0.7) every storage-buffer load with a non-constant index becomes a per-lane
//! scalar loop with a bounds check, so the kernels are bound by load count and register pressure;
//! which tile wins depends on the shape and the machine, hence the measured choice.
//!
//! Bindings of every kernel: `@group(0) @binding(0)` A (read), `@binding(1)` B (read),
//! `@binding(2)` C (read_write); entry point `main`. A and B are storage buffers, or textures in
//! the texture member (the dispatch still binds their buffers: the device copies them over).

use std::fmt::Write as _;

const TILED_TEMPLATE: &str = include_str!("../../../shaders/matmul_tiled.wgsl");
const GENERIC_TEMPLATE: &str = include_str!("../../../shaders/matmul_generic.wgsl");
const SUBGROUP_TEMPLATE: &str = include_str!("../../../shaders/matmul_subgroup.wgsl");
const TEXTURE_TEMPLATE: &str = include_str!("../../../shaders/matmul_texture.wgsl");
const SHARED_TEMPLATE: &str = include_str!("../../../shaders/matmul_shared.wgsl");
/// Every template's shape constants (`{{SHAPE}}`) and the buffer members' bindings (`{{BUFFERS}}`,
/// of element `{{T}}`).
const SHAPE_LIB: &str = include_str!("../../../shaders/lib/matmul_shape.wgsl").trim_ascii_end();
const BUFFERS_LIB: &str = include_str!("../../../shaders/lib/matmul_buffers.wgsl").trim_ascii_end();

/// Invocations per workgroup of every kernel (`@workgroup_size(64, 1, 1)`).
pub(crate) const MATMUL_WORKGROUP_SIZE: u32 = 64;
/// Invocations per workgroup of the workgroup-memory member ([`MatmulConfig::Shared`], 16 x 16).
pub(crate) const SHARED_WORKGROUP_SIZE: u32 = 256;
/// Rows and columns of C per invocation in the generic kernel.
const GENERIC_TILE: u64 = 4;
/// Rows and columns of C per invocation in the texture kernel (8 x 8 invocations a workgroup).
const TEXTURE_TILE: u64 = 8;
/// The texture kernel's `k` and `n` are multiples of this: a row of an operand becomes a row of
/// texels, and `copy_buffer_to_texture` needs rows of a multiple of 256 bytes (64 f32).
pub(crate) const TEXTURE_ROW_ALIGN: usize = 64;

/// How the two operands are stored (C is always row-major `(batch, m, n)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Layout {
    /// A `(batch, m, k)`, B `(batch, k, n)`.
    Nn,
    /// A `(batch, m, k)`, B stored as `(batch, n, k)`.
    Nt,
    /// A stored as `(batch, k, m)`, B `(batch, k, n)`.
    Tn,
    /// Both stored transposed (generic kernel only).
    Tt,
}

impl Layout {
    fn of(ta: bool, tb: bool) -> Layout {
        match (ta, tb) {
            (false, false) => Layout::Nn,
            (false, true) => Layout::Nt,
            (true, false) => Layout::Tn,
            (true, true) => Layout::Tt,
        }
    }
    pub(crate) fn name(self) -> &'static str {
        match self {
            Layout::Nn => "nn",
            Layout::Nt => "nt",
            Layout::Tn => "tn",
            Layout::Tt => "tt",
        }
    }
}

/// One batched matmul to generate a kernel for: `C = op(A) @ op(B)`, C `(batch, m, n)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MatmulProblem {
    pub batch: usize,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// WGSL storage element type: `"f32"`, `"i32"` or `"u32"`.
    pub elem: &'static str,
    /// A is stored as `(batch, k, m)`.
    pub ta: bool,
    /// B is stored as `(batch, n, k)`.
    pub tb: bool,
}

impl MatmulProblem {
    /// A plain row-major problem.
    #[cfg(test)]
    pub(crate) fn plain(
        batch: usize,
        m: usize,
        k: usize,
        n: usize,
        elem: &'static str,
    ) -> MatmulProblem {
        MatmulProblem {
            batch,
            m,
            k,
            n,
            elem,
            ta: false,
            tb: false,
        }
    }

    pub(crate) fn layout(&self) -> Layout {
        Layout::of(self.ta, self.tb)
    }

    /// Whether the vec4 tiled family applies: f32, `n % 4 == 0`, and the operands' contiguous axes
    /// in multiples of 4 (`k` for `nn`/`nt`, `m` for `tn`; `tt` never).
    pub(crate) fn tiled_ok(&self) -> bool {
        let aligned = match self.layout() {
            Layout::Nn | Layout::Nt => self.k.is_multiple_of(4) && self.k > 0,
            Layout::Tn => self.m.is_multiple_of(4) && self.k > 0,
            Layout::Tt => false,
        };
        self.elem == "f32" && self.n.is_multiple_of(4) && self.n > 0 && aligned
    }

    /// Whether the texture member ([`MatmulConfig::Texture`]) applies: f32, `nn`, nothing empty,
    /// and `k`, `n` multiples of [`TEXTURE_ROW_ALIGN`]. The texture sizes are checked apart
    /// ([`MatmulProblem::texture_fits`]): they depend on the device.
    pub(crate) fn texture_ok(&self) -> bool {
        self.elem == "f32"
            && self.layout() == Layout::Nn
            && self.batch > 0
            && self.m > 0
            && self.k > 0
            && self.k.is_multiple_of(TEXTURE_ROW_ALIGN)
            && self.n.is_multiple_of(TEXTURE_ROW_ALIGN)
    }

    /// The two operand textures, `[width in texels, height in rows]` of A and of B: a row of the
    /// operand's `(batch * rows, cols)` view is a row of `cols / 4` rgba32float texels.
    pub(crate) fn texture_sizes(&self) -> [[u64; 2]; 2] {
        let (b, m, k, n) = (
            self.batch as u64,
            self.m as u64,
            self.k as u64,
            self.n as u64,
        );
        [[k / 4, b * m], [n / 4, b * k]]
    }

    /// Whether both operand textures fit a device whose `max_texture_dimension_2d` is `max_dim`.
    pub(crate) fn texture_fits(&self, max_dim: u32) -> bool {
        self.texture_sizes()
            .iter()
            .flatten()
            .all(|&d| d <= u64::from(max_dim))
    }

    /// Multiply-adds of the whole problem.
    pub(crate) fn macs(&self) -> u64 {
        self.batch as u64 * self.m as u64 * self.k as u64 * self.n as u64
    }

    /// The fixed choice: the 8 x 4 tiled kernel (measured best of its family on lavapipe at
    /// 256³-2048³) when it applies, else the generic one.
    pub(crate) fn heuristic(&self) -> MatmulConfig {
        if self.tiled_ok() {
            MatmulConfig::Tiled {
                tm: 8,
                tc4: 1,
                ks: self.default_ks(),
            }
        } else {
            MatmulConfig::Generic
        }
    }

    /// The choice where nothing can be measured: in the browser a WebGPU device must not block
    /// for a search (`crate::device::tune`). The 4 x 4 tiled kernel when the family applies, else
    /// the generic one. On SwiftShader (headless Chromium without a GPU) every storage-buffer load
    /// whose index differs per lane is a masked gather, one per scalar, and larger register tiles
    /// lose more to spills than they save in loads: `t4x1k4` measured 1.15-1.3x `t8x1k4` at
    /// 256-1024 in the same runs of the web bench (`t8x2`, `t4x2`, k unrolled by 8-32 and
    /// workgroup-memory tiles of A all measured slower than `t4x1k4` there).
    pub(crate) fn browser_heuristic(&self) -> MatmulConfig {
        if self.tiled_ok() {
            MatmulConfig::Tiled {
                tm: 4,
                tc4: 1,
                ks: self.default_ks(),
            }
        } else {
            MatmulConfig::Generic
        }
    }

    fn default_ks(&self) -> u8 {
        match self.layout() {
            Layout::Tn if !self.k.is_multiple_of(4) => 1,
            _ => 4,
        }
    }

    /// The members worth timing for this problem, the heuristic's choice first. Only tiled members
    /// when the family applies (they all round alike), else just the generic kernel.
    pub(crate) fn candidates(&self) -> Vec<MatmulConfig> {
        if !self.tiled_ok() {
            return vec![MatmulConfig::Generic];
        }
        let ks = self.default_ks();
        let mut out = vec![self.heuristic()];
        // The k step of 8 (`t8x1k8`) is a member but not a candidate: it lost at every size on
        // lavapipe and llvmpipe GL (0.5-0.75x of `t8x1k4`), and each candidate costs a compile.
        for (tm, tc4) in [(4, 1), (4, 2), (8, 2)] {
            out.push(MatmulConfig::Tiled { tm, tc4, ks });
        }
        out
    }
}

/// [`MatmulConfig::name`] of the texture member.
const TEXTURE_NAME: &str = "tex8x8";

/// One member of the kernel family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum MatmulConfig {
    /// `shaders/matmul_generic.wgsl`: any shape, dtype and layout.
    Generic,
    /// `shaders/matmul_tiled.wgsl`: f32, `tm` rows (4 or 8) x `tc4` vec4s of columns (1 or 2) per
    /// invocation, k in steps of `ks` (4 or 8 for `nn`/`nt`; 1, 4 or 8 for `tn`), `ks` dividing k.
    Tiled { tm: u8, tc4: u8, ks: u8 },
    /// `shaders/matmul_subgroup.wgsl`: f32, `nn`/`nt`/`tn` (also `k % 4 == 0`), one subgroup of `s` lanes per workgroup
    /// (`s` a power of two, 4 to 64) sharing A by broadcasts. Needs the `SUBGROUP` feature and a
    /// fixed subgroup size of `s`: only a device's chooser offers it ([`MatmulProblem::candidates`]
    /// never does).
    Subgroup { s: u8 },
    /// `shaders/matmul_texture.wgsl`: f32 `nn`, A and B read from rgba32float textures that the
    /// dispatch fills from their buffers (`copy_buffer_to_texture`), 8 x 8 blocks of C per
    /// invocation; `k` and `n` multiples of 64 ([`MatmulProblem::texture_ok`]) and textures
    /// within the device's `max_texture_dimension_2d` ([`MatmulProblem::texture_fits`]). The
    /// browser's choice where it applies (SwiftShader gathers every lane-varying storage load, a
    /// texel fetch is one load); natively only on request ([`MatmulProblem::candidates`] never
    /// offers it).
    Texture,
    /// `shaders/matmul_shared.wgsl`: f32, `nn`/`nt`/`tn`, for GPUs. 256 invocations a workgroup
    /// compute a `16 tm` square block of C (`tm` 4 or 8 rows and columns each) from slices of A
    /// and B staged in workgroup memory, `bk` (4 or 8, dividing k) steps of k per barrier. Only a
    /// device's chooser offers it, and only on an adapter that is not a CPU
    /// ([`MatmulProblem::candidates`] never does): on llvmpipe a barrier is costly.
    Shared { tm: u8, bk: u8 },
}

impl MatmulConfig {
    /// Whether this member can run `p` (a stale or foreign choice is checked before use).
    pub(crate) fn supports(&self, p: &MatmulProblem) -> bool {
        match *self {
            MatmulConfig::Generic => true,
            MatmulConfig::Texture => p.texture_ok(),
            MatmulConfig::Subgroup { s } => {
                p.tiled_ok() && p.k.is_multiple_of(4) && matches!(s, 4 | 8 | 16 | 32 | 64)
            }
            MatmulConfig::Shared { tm, bk } => {
                p.tiled_ok()
                    && matches!(tm, 4 | 8)
                    && matches!(bk, 4 | 8)
                    && p.k.is_multiple_of(bk as usize)
            }
            MatmulConfig::Tiled { tm, tc4, ks } => {
                let ks_ok = match p.layout() {
                    Layout::Tn => matches!(ks, 1 | 4 | 8),
                    _ => matches!(ks, 4 | 8),
                };
                p.tiled_ok()
                    && matches!(tm, 4 | 8)
                    && matches!(tc4, 1 | 2)
                    && ks_ok
                    && p.k.is_multiple_of(ks as usize)
            }
        }
    }

    /// A short stable name (`generic`, `t8x1k4`), used in labels and in the on-disk cache.
    pub(crate) fn name(&self) -> String {
        match self {
            MatmulConfig::Generic => "generic".to_string(),
            MatmulConfig::Tiled { tm, tc4, ks } => format!("t{tm}x{tc4}k{ks}"),
            MatmulConfig::Subgroup { s } => format!("s{s}"),
            MatmulConfig::Texture => TEXTURE_NAME.to_string(),
            MatmulConfig::Shared { tm, bk } => format!("w{tm}k{bk}"),
        }
    }

    /// The inverse of [`MatmulConfig::name`].
    pub(crate) fn parse(s: &str) -> Option<MatmulConfig> {
        if s == "generic" {
            return Some(MatmulConfig::Generic);
        }
        if s == TEXTURE_NAME {
            return Some(MatmulConfig::Texture);
        }
        if let Some(rest) = s.strip_prefix('w') {
            let (tm, bk) = rest.split_once('k')?;
            return Some(MatmulConfig::Shared {
                tm: tm.parse().ok()?,
                bk: bk.parse().ok()?,
            });
        }
        if let Some(size) = s.strip_prefix('s') {
            return Some(MatmulConfig::Subgroup {
                s: size.parse().ok()?,
            });
        }
        let rest = s.strip_prefix('t')?;
        let (tm, rest) = rest.split_once('x')?;
        let (tc4, ks) = rest.split_once('k')?;
        Some(MatmulConfig::Tiled {
            tm: tm.parse().ok()?,
            tc4: tc4.parse().ok()?,
            ks: ks.parse().ok()?,
        })
    }

    /// Invocations per workgroup.
    pub(crate) fn workgroup_size(&self) -> u32 {
        match *self {
            MatmulConfig::Subgroup { s } => s as u32,
            MatmulConfig::Shared { .. } => SHARED_WORKGROUP_SIZE,
            _ => MATMUL_WORKGROUP_SIZE,
        }
    }

    /// Bytes of workgroup memory the member declares (only [`MatmulConfig::Shared`] has any).
    pub(crate) fn workgroup_bytes(&self) -> u32 {
        match *self {
            MatmulConfig::Shared { tm, bk } => 2 * bk as u32 * shared_block(tm) * 4,
            _ => 0,
        }
    }

    /// Output blocks (invocations that do work; for the subgroup kernel, all lanes of the
    /// workgroups that do work).
    fn tiles(&self, p: &MatmulProblem) -> u64 {
        let (b, m, n) = (p.batch as u64, p.m as u64, p.n as u64);
        match *self {
            MatmulConfig::Generic => b * m.div_ceil(GENERIC_TILE) * n.div_ceil(GENERIC_TILE),
            MatmulConfig::Tiled { tm, tc4, .. } => {
                b * m.div_ceil(tm as u64) * (n / 4).div_ceil(tc4 as u64)
            }
            MatmulConfig::Subgroup { s } => {
                let s = s as u64;
                b * m.div_ceil(s) * (n / 4).div_ceil(s) * s
            }
            MatmulConfig::Shared { tm, .. } => {
                let bm = shared_block(tm) as u64;
                b * m.div_ceil(bm) * n.div_ceil(bm) * SHARED_WORKGROUP_SIZE as u64
            }
            // Whole workgroups of 8 x 8 blocks (the kernel numbers blocks per workgroup).
            MatmulConfig::Texture => {
                let t = TEXTURE_TILE;
                b * m.div_ceil(t).div_ceil(8) * n.div_ceil(t).div_ceil(8) * 64
            }
        }
    }
}

/// Picks the kernel for each matmul of a program being lowered.
pub(crate) trait MatmulChooser {
    /// The member to run `p` with (checked with [`MatmulConfig::supports`]; an unsupported answer
    /// falls back to the heuristic). `max_workgroups_per_dim` is the limit the program is planned
    /// against.
    fn choose(&self, p: &MatmulProblem, max_workgroups_per_dim: u32) -> MatmulConfig;

    /// Invocations a reduction of few outputs is spread over on this device: by default
    /// [`CPU_SPREAD`](crate::ops::reduce::kernel::CPU_SPREAD), the figure for CPU adapters; a
    /// device chooser answers for its adapter.
    fn reduce_spread(&self) -> usize {
        crate::ops::reduce::kernel::CPU_SPREAD
    }
}

/// The fixed, device-less choice ([`MatmulProblem::heuristic`]).
pub(crate) struct DefaultChooser;

impl MatmulChooser for DefaultChooser {
    fn choose(&self, p: &MatmulProblem, _max_workgroups_per_dim: u32) -> MatmulConfig {
        p.heuristic()
    }
}

/// A ready-to-compile matmul shader and the workgroup counts to dispatch it with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MatmulKernel {
    /// Human-readable name, e.g. `matmul_t8x1k4_nn_f32_b1_m1024_k1024_n1024`.
    pub label: String,
    /// Complete WGSL module; entry point `main`.
    pub wgsl: String,
    /// Arguments for `dispatch_workgroups(x, y, z)`; each at most `max_workgroups_per_dim`.
    /// All zero when there is nothing to compute (`batch`, `m` or `n` is zero).
    pub workgroups: [u32; 3],
}

/// The heuristic kernel for a plain row-major `C[b] = A[b] @ B[b]` (see [`kernel`]).
#[cfg(test)]
pub(crate) fn matmul_kernel(
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    elem: &'static str,
    max_workgroups_per_dim: u32,
) -> MatmulKernel {
    let p = MatmulProblem::plain(batch, m, k, n, elem);
    kernel(&p, p.heuristic(), max_workgroups_per_dim)
}

/// Instantiates member `cfg` for problem `p`.
///
/// # Panics
/// If `elem` is not one of the three types, if `cfg` does not support `p`, if
/// `max_workgroups_per_dim` is zero, or if the problem is too large for 32-bit indexing (more than
/// `u32::MAX` elements in one of A, B, C) or for `max_workgroups_per_dim³` workgroups. The lowering
/// checks sizes against the device limits (which are below these) before it gets here.
pub(crate) fn kernel(
    p: &MatmulProblem,
    cfg: MatmulConfig,
    max_workgroups_per_dim: u32,
) -> MatmulKernel {
    let elem = p.elem;
    assert!(
        matches!(elem, "f32" | "i32" | "u32"),
        "matmul: unsupported element type {elem:?} (expected f32, i32 or u32)"
    );
    assert!(
        max_workgroups_per_dim >= 1,
        "matmul: max_workgroups_per_dim must be at least 1"
    );
    assert!(cfg.supports(p), "matmul: {} cannot run {p:?}", cfg.name());
    let (b64, m64, k64, n64) = (p.batch as u64, p.m as u64, p.k as u64, p.n as u64);
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

    let tiles = cfg.tiles(p);
    let wg = cfg.workgroup_size() as u64;
    let workgroups = fold_workgroups(tiles.div_ceil(wg), max_workgroups_per_dim);
    let dispatched = workgroups.iter().map(|&w| w as u64).product::<u64>() * wg;
    assert!(
        dispatched <= limit + 1,
        "matmul: {dispatched} invocations do not fit the kernel's 32-bit invocation index"
    );
    // Degenerate problems dispatch nothing; give an empty dimension the value `min_mn` (1, or 4
    // where a dimension is counted in vec4s) so the module stays valid (the templates compute
    // `M - 1u` and the like). A non-empty dimension keeps its size: M = 3 rounded up to 4 reads
    // and writes a row past the end, which Vulkan's robust access drops but WebGPU clamps onto
    // the last row.
    // `buffers`: the element type of A, B and C bound as storage arrays (not the texture member).
    let common = |min_mn: usize, buffers: Option<&str>| {
        let nonempty = |d: usize| if d == 0 { min_mn } else { d };
        let mut values = Vec::new();
        if let Some(t) = buffers {
            values.extend([("BUFFERS", BUFFERS_LIB.to_string()), ("T", t.to_string())]);
        }
        values.extend([
            ("SHAPE", SHAPE_LIB.to_string()),
            ("BATCH", p.batch.max(1).to_string()),
            ("M", nonempty(p.m).to_string()),
            ("K", p.k.to_string()),
            ("N", nonempty(p.n).to_string()),
            ("GRID_X", workgroups[0].max(1).to_string()),
            ("GRID_Y", workgroups[1].max(1).to_string()),
        ]);
        values
    };
    let wgsl = match cfg {
        MatmulConfig::Generic => {
            let (m, k, n) = (p.m.max(1), p.k, p.n.max(1));
            // Strides of element (i, k) of A and (k, j) of B in their stored layouts.
            let (a_rs, a_ks) = if p.ta { (1, m) } else { (k, 1) };
            let (b_ks, b_cs) = if p.tb { (1, k) } else { (n, 1) };
            let mut values = common(1, Some(elem));
            values.push(("A_RS", a_rs.to_string()));
            values.push(("A_KS", a_ks.to_string()));
            values.push(("B_KS", b_ks.to_string()));
            values.push(("B_CS", b_cs.to_string()));
            fill(GENERIC_TEMPLATE, &values)
        }
        MatmulConfig::Tiled { tm, tc4, ks } => {
            let (setup, body, store) =
                tiled_parts(p.layout(), tm as usize, tc4 as usize, ks as usize);
            let mut values = common(4, Some("vec4<f32>"));
            values.extend([
                ("WG", MATMUL_WORKGROUP_SIZE.to_string()),
                ("TM", tm.to_string()),
                ("TC4", tc4.to_string()),
                ("KS", ks.to_string()),
                ("LAYOUT", p.layout().name().to_string()),
                ("SETUP", setup),
                ("BODY", body),
                ("STORE", store),
            ]);
            fill(TILED_TEMPLATE, &values)
        }
        MatmulConfig::Subgroup { s } => {
            let [setup, accs, loads, fmas, stores] = subgroup_parts(p.layout(), s as usize);
            let mut values = common(4, Some("vec4<f32>"));
            values.extend([
                ("S", s.to_string()),
                ("LAYOUT", p.layout().name().to_string()),
                ("SETUP", setup),
                ("ACCS", accs),
                ("LOADS", loads),
                ("FMAS", fmas),
                ("STORES", stores),
            ]);
            fill(SUBGROUP_TEMPLATE, &values)
        }
        MatmulConfig::Shared { tm, bk } => {
            let [setup, loads, body, store] = shared_parts(p.layout(), tm as usize, bk as usize);
            let bm = shared_block(tm);
            let mut values = common(4, Some("vec4<f32>"));
            values.extend([
                ("BK", bk.to_string()),
                ("BM", bm.to_string()),
                ("SLICE", (bk as u32 * bm / 4).to_string()),
                ("LAYOUT", p.layout().name().to_string()),
                ("SETUP", setup),
                ("LOADS", loads),
                ("BODY", body),
                ("STORE", store),
            ]);
            fill(SHARED_TEMPLATE, &values)
        }
        MatmulConfig::Texture => {
            let (setup, body, store) = texture_parts();
            let [[aw, ah], [bw, bh]] = p.texture_sizes();
            let mut values = common(4, None);
            values.extend([
                ("A_WIDTH", aw.to_string()),
                ("A_HEIGHT", ah.to_string()),
                ("B_WIDTH", bw.to_string()),
                ("B_HEIGHT", bh.to_string()),
                ("SETUP", setup),
                ("BODY", body),
                ("STORE", store),
            ]);
            fill(TEXTURE_TEMPLATE, &values)
        }
    };
    MatmulKernel {
        label: format!(
            "matmul_{}_{}_{elem}_b{}_m{}_k{}_n{}",
            cfg.name(),
            p.layout().name(),
            p.batch,
            p.m,
            p.k,
            p.n
        ),
        wgsl,
        workgroups,
    }
}

const LANES: [&str; 4] = ["x", "y", "z", "w"];

/// The generated parts of the subgroup kernel: operand pointers, `s` accumulators (rows
/// `row0 + i`), the loads and fmas of one k step of 4, and the stores. Each lane loads one vec4 of
/// the block's `s x 4` slice of A (`mine`); element (row `i`, k offset `r`) is lane `i`'s lane `r`
/// (nn) or lane `r * s/4 + i/4`'s lane `i % 4` (tn, A stored transposed).
fn subgroup_parts(layout: Layout, s: usize) -> [String; 5] {
    let [mut setup, mut accs, mut loads, mut fmas, mut stores]: [String; 5] = Default::default();
    macro_rules! line {
        ($dst:expr, $($arg:tt)*) => {{ let _ = writeln!($dst, $($arg)*); }};
    }
    let q = s / 4;
    match layout {
        Layout::Nn | Layout::Nt => {
            line!(
                setup,
                "    let pa = b * (M * K4) + min(row0 + lane, M - 1u) * K4;"
            );
            line!(loads, "        let mine = A[pa + kk];");
        }
        Layout::Tn => {
            line!(
                setup,
                "    let pa = b * (K * M4) + (lane / {q}u) * M4 + min(row0 / 4u + lane % {q}u, M4 - 1u);"
            );
            line!(loads, "        let mine = A[pa + kk * 4u * M4];");
        }
        Layout::Tt => unreachable!("the subgroup kernel has no tt layout (supports() excludes it)"),
    }
    match layout {
        Layout::Nn | Layout::Tn => {
            line!(setup, "    let pb = b * (K * N4) + min(col4, N4 - 1u);");
            for r in 0..4 {
                line!(loads, "        let b{r} = B[pb + (kk * 4u + {r}u) * N4];");
            }
        }
        Layout::Nt => {
            // Columns j of op(B) are rows of the stored B^T: four of them, transposed in registers.
            for j in 0..4 {
                line!(
                    setup,
                    "    let pbt{j} = b * (N * K4) + min(col4 * 4u + {j}u, N - 1u) * K4;"
                );
                line!(loads, "        let bt{j} = B[pbt{j} + kk];");
            }
            for (r, l) in LANES.iter().enumerate() {
                line!(
                    loads,
                    "        let b{r} = vec4<f32>(bt0.{l}, bt1.{l}, bt2.{l}, bt3.{l});"
                );
            }
        }
        Layout::Tt => unreachable!(),
    }
    if layout == Layout::Tn {
        for r in 0..4 {
            for g in 0..q {
                line!(
                    fmas,
                    "        let t{r}_{g} = subgroupBroadcast(mine, {}u);",
                    r * q + g
                );
            }
        }
    }
    for i in 0..s {
        line!(accs, "    var acc{i} = vec4<f32>(0.0);");
        if layout != Layout::Tn {
            line!(fmas, "        let a{i} = subgroupBroadcast(mine, {i}u);");
        }
        for (r, lane) in LANES.iter().enumerate() {
            let a = if layout == Layout::Tn {
                format!("t{r}_{}.{}", i / 4, LANES[i % 4])
            } else {
                format!("a{i}.{lane}")
            };
            line!(fmas, "        acc{i} = fma(vec4<f32>({a}), b{r}, acc{i});");
        }
        let at = format!("C[pc + {i}u * N4] = acc{i};");
        if i == 0 {
            line!(stores, "        {at}");
        } else {
            line!(stores, "        if (row0 + {i}u < M) {{ {at} }}");
        }
    }
    [setup, accs, loads, fmas, stores]
}

/// Rows (and columns) of the block of C one workgroup of [`MatmulConfig::Shared`] computes.
fn shared_block(tm: u8) -> u32 {
    16 * tm as u32
}

/// The generated parts of the workgroup-memory kernel: base pointers and accumulators, the copy
/// of one k slice of op(A) and op(B) into `As`/`Bs`, its `bk` rank-1 updates, and the stores.
/// Accumulator `acc{i}_{l}_{j}` holds row `row0 + 4 (ty + 16 i) + l`, column vec4
/// `col0 / 4 + tx + 16 j`. A slice stored along k (A in `nn`/`nt`, B in `nt`) is copied four
/// rows at a time and transposed in registers, so every store into workgroup memory is a whole
/// vec4.
fn shared_parts(layout: Layout, tm: usize, bk: usize) -> [String; 4] {
    let [mut setup, mut loads, mut body, mut store]: [String; 4] = Default::default();
    macro_rules! line {
        ($dst:expr, $($arg:tt)*) => {{ let _ = writeln!($dst, $($arg)*); }};
    }
    let wg = SHARED_WORKGROUP_SIZE as usize;
    let bm4 = shared_block(tm as u8) as usize / 4;
    let q = tm / 4;
    // `units` copies spread over the workgroup; `each` writes one (its index is `u`).
    let spread = |loads: &mut String, units: usize, each: &dyn Fn(&mut String)| {
        let mut one = String::new();
        each(&mut one);
        for s in 0..units.div_ceil(wg) {
            let u = match s * wg {
                0 => "lid".to_string(),
                off => format!("(lid + {off}u)"),
            };
            if (s + 1) * wg > units {
                line!(loads, "        if ({u} < {units}u) {{");
            } else {
                line!(loads, "        {{");
            }
            line!(loads, "            let u = {u};");
            loads.push_str(&one);
            line!(loads, "        }}");
        }
    };
    // Four rows stored along k (`row(j)` the clamped row index, `base` + `row * K4`): one vec4
    // each at k quad `kq`, transposed into four vec4s of the slice at `k = 4 kq + l`.
    let along_k = |one: &mut String,
                   src: &str,
                   dst: &str,
                   base: &str,
                   row: &dyn Fn(usize) -> String| {
        let kq4 = bk / 4;
        line!(one, "            let kq = u % {kq4}u;");
        line!(one, "            let rq = u / {kq4}u;");
        for j in 0..4 {
            line!(
                one,
                "            let x{j} = {src}[{base} + {} * K4 + k0 / 4u + kq];",
                row(j)
            );
        }
        for (l, lane) in LANES.iter().enumerate() {
            line!(
                one,
                "            {dst}[(kq * 4u + {l}u) * BM4 + rq] = vec4<f32>(x0.{lane}, x1.{lane}, x2.{lane}, x3.{lane});"
            );
        }
    };
    match layout {
        Layout::Nn | Layout::Nt => {
            line!(setup, "    let a_base = b * (M * K4);");
            spread(&mut loads, bm4 * (bk / 4), &|one| {
                along_k(one, "A", "As", "a_base", &|j| {
                    format!("min(row0 + rq * 4u + {j}u, M - 1u)")
                })
            });
        }
        Layout::Tn => {
            line!(setup, "    let at_base = b * (K * M4);");
            spread(&mut loads, bk * bm4, &|one| {
                line!(
                    one,
                    "            As[u] = A[at_base + (k0 + u / BM4) * M4 + min(row0 / 4u + u % BM4, M4 - 1u)];"
                );
            });
        }
        Layout::Tt => unreachable!("the shared kernel has no tt layout (supports() excludes it)"),
    }
    match layout {
        Layout::Nn | Layout::Tn => {
            line!(setup, "    let b_base = b * (K * N4);");
            spread(&mut loads, bk * bm4, &|one| {
                line!(
                    one,
                    "            Bs[u] = B[b_base + (k0 + u / BM4) * N4 + min(col0 / 4u + u % BM4, N4 - 1u)];"
                );
            });
        }
        Layout::Nt => {
            // Columns of op(B) are rows of the stored B^T.
            line!(setup, "    let bt_base = b * (N * K4);");
            spread(&mut loads, bm4 * (bk / 4), &|one| {
                along_k(one, "B", "Bs", "bt_base", &|j| {
                    format!("min(col0 + rq * 4u + {j}u, N - 1u)")
                })
            });
        }
        Layout::Tt => unreachable!(),
    }
    for i in 0..q {
        for l in 0..4 {
            for j in 0..q {
                line!(setup, "    var acc{i}_{l}_{j} = vec4<f32>(0.0);");
            }
        }
    }
    for kk in 0..bk {
        line!(body, "        {{");
        for i in 0..q {
            line!(
                body,
                "            let a{i} = As[{kk}u * BM4 + ty + {}u];",
                16 * i
            );
        }
        for j in 0..q {
            line!(
                body,
                "            let b{j} = Bs[{kk}u * BM4 + tx + {}u];",
                16 * j
            );
        }
        for i in 0..q {
            for (l, lane) in LANES.iter().enumerate() {
                for j in 0..q {
                    line!(
                        body,
                        "            acc{i}_{l}_{j} = fma(vec4<f32>(a{i}.{lane}), b{j}, acc{i}_{l}_{j});"
                    );
                }
            }
        }
        line!(body, "        }}");
    }
    line!(store, "    let c_base = b * (M * N4);");
    for j in 0..q {
        line!(store, "    let c{j} = col0 / 4u + tx + {}u;", 16 * j);
    }
    for i in 0..q {
        for l in 0..4 {
            line!(
                store,
                "    let r{i}_{l} = row0 + (ty + {}u) * 4u + {l}u;",
                16 * i
            );
            for j in 0..q {
                line!(
                    store,
                    "    if (r{i}_{l} < M && c{j} < N4) {{ C[c_base + r{i}_{l} * N4 + c{j}] = acc{i}_{l}_{j}; }}"
                );
            }
        }
    }
    [setup, loads, body, store]
}

/// The generated parts of the texture kernel (8 rows x 2 vec4s of columns per invocation):
/// texture rows and columns, accumulators, the loads and fmas of one k step of 4 (one texel of
/// each row of A, four texel rows of B), and the stores. Written out unrolled like the tiled
/// members: arrays indexed in a loop would be indexed per lane.
fn texture_parts() -> (String, String, String) {
    let (tm, tc4) = (TEXTURE_TILE as usize, TEXTURE_TILE as usize / 4);
    let [mut setup, mut body, mut store]: [String; 3] = Default::default();
    macro_rules! line {
        ($dst:expr, $($arg:tt)*) => {{ let _ = writeln!($dst, $($arg)*); }};
    }
    for i in 0..tm {
        line!(setup, "    let ar{i} = a_row + min(row0 + {i}u, M - 1u);");
    }
    for i in 0..tm {
        for c in 0..tc4 {
            line!(setup, "    var acc{i}_{c} = vec4<f32>(0.0);");
        }
    }
    for i in 0..tm {
        line!(
            body,
            "        let a{i} = textureLoad(A, vec2<u32>(kk, ar{i}), 0);"
        );
    }
    for (r, lane) in LANES.iter().enumerate() {
        for c in 0..tc4 {
            line!(
                body,
                "        let b{r}_{c} = textureLoad(B, vec2<u32>(col4 + {c}u, b_row + kk * 4u + {r}u), 0);"
            );
            for i in 0..tm {
                line!(
                    body,
                    "        acc{i}_{c} = fma(vec4<f32>(a{i}.{lane}), b{r}_{c}, acc{i}_{c});"
                );
            }
        }
    }
    for i in 0..tm {
        for c in 0..tc4 {
            let at = format!("C[pc + {i}u * N4 + {c}u] = acc{i}_{c};");
            if i == 0 {
                line!(store, "    {at}");
            } else {
                line!(store, "    if (row0 + {i}u < M) {{ {at} }}");
            }
        }
    }
    (setup, body, store)
}

/// The generated parts of a tiled kernel: setup (operand pointers, accumulators), the k loop, and
/// the stores. Pointers are in vec4 units. Accumulator `acc{i}_{c}` holds row `row0 + i`, columns
/// `4 * (col4 + c) ..+4`; every update is `fma(a, b, acc)` with k ascending.
fn tiled_parts(layout: Layout, tm: usize, tc4: usize, ks: usize) -> (String, String, String) {
    let mut setup = String::new();
    let mut body = String::new();
    let mut store = String::new();
    // `writeln!` into a String cannot fail.
    macro_rules! line {
        ($dst:expr, $($arg:tt)*) => {{ let _ = writeln!($dst, $($arg)*); }};
    }
    // Rows of A, read along k (nn, nt).
    let a_rows = |setup: &mut String| {
        line!(setup, "    let a_base = b * (M * K4);");
        for i in 0..tm {
            line!(
                setup,
                "    let pa{i} = a_base + min(row0 + {i}u, M - 1u) * K4;"
            );
        }
    };
    // vec4 column groups of B, read along its rows (nn, tn).
    let b_cols = |setup: &mut String| {
        line!(setup, "    let b_base = b * (K * N4);");
        for c in 0..tc4 {
            line!(setup, "    let pb{c} = b_base + min(col4 + {c}u, N4 - 1u);");
        }
    };
    match layout {
        Layout::Nn => {
            a_rows(&mut setup);
            b_cols(&mut setup);
        }
        Layout::Nt => {
            a_rows(&mut setup);
            // Columns j of op(B) are rows of the stored B^T, read along k.
            line!(setup, "    let bt_base = b * (N * K4);");
            for j in 0..4 * tc4 {
                line!(
                    setup,
                    "    let pb{j} = bt_base + min(col4 * 4u + {j}u, N - 1u) * K4;"
                );
            }
        }
        Layout::Tn => {
            // Row k of the stored A^T holds column k of op(A): rows row0.. are vec4s along it.
            line!(setup, "    let at_base = b * (K * M4);");
            for q in 0..tm / 4 {
                line!(
                    setup,
                    "    let pa{q} = at_base + min(row0 / 4u + {q}u, M4 - 1u);"
                );
            }
            b_cols(&mut setup);
        }
        Layout::Tt => unreachable!("the tiled family has no tt layout (supports() excludes it)"),
    }
    for i in 0..tm {
        for c in 0..tc4 {
            line!(setup, "    var acc{i}_{c} = vec4<f32>(0.0);");
        }
    }
    let fma = |body: &mut String, i: usize, c: usize, a: &str, bv: &str| {
        line!(
            body,
            "        acc{i}_{c} = fma(vec4<f32>({a}), {bv}, acc{i}_{c});"
        );
    };
    match layout {
        Layout::Nn | Layout::Nt => {
            let s4 = ks / 4;
            if layout == Layout::Nn {
                line!(body, "    var kb = 0u;");
            }
            line!(body, "    for (var kk = 0u; kk < K4; kk += {s4}u) {{");
            for s in 0..s4 {
                for i in 0..tm {
                    line!(body, "        let a{i}_{s} = A[pa{i} + kk + {s}u];");
                }
                if layout == Layout::Nt {
                    for j in 0..4 * tc4 {
                        line!(body, "        let bt{j}_{s} = B[pb{j} + kk + {s}u];");
                    }
                }
                for (r, lane) in LANES.iter().enumerate() {
                    for c in 0..tc4 {
                        let bv = format!("b{c}_{s}_{r}");
                        if layout == Layout::Nn {
                            line!(
                                body,
                                "        let {bv} = B[pb{c} + kb + {}u * N4];",
                                4 * s + r
                            );
                        } else {
                            let j = 4 * c;
                            line!(
                                body,
                                "        let {bv} = vec4<f32>(bt{}_{s}.{lane}, bt{}_{s}.{lane}, bt{}_{s}.{lane}, bt{}_{s}.{lane});",
                                j,
                                j + 1,
                                j + 2,
                                j + 3
                            );
                        }
                        for i in 0..tm {
                            fma(&mut body, i, c, &format!("a{i}_{s}.{lane}"), &bv);
                        }
                    }
                }
            }
            if layout == Layout::Nn {
                line!(body, "        kb += {ks}u * N4;");
            }
            line!(body, "    }}");
        }
        Layout::Tn => {
            line!(body, "    var ka = 0u;");
            line!(body, "    var kb = 0u;");
            line!(body, "    for (var k = 0u; k < K; k += {ks}u) {{");
            for s in 0..ks {
                for q in 0..tm / 4 {
                    line!(body, "        let a{q}_{s} = A[pa{q} + ka + {s}u * M4];");
                }
                for c in 0..tc4 {
                    let bv = format!("b{c}_{s}");
                    line!(body, "        let {bv} = B[pb{c} + kb + {s}u * N4];");
                    for i in 0..tm {
                        fma(
                            &mut body,
                            i,
                            c,
                            &format!("a{}_{s}.{}", i / 4, LANES[i % 4]),
                            &bv,
                        );
                    }
                }
            }
            line!(body, "        ka += {ks}u * M4;");
            line!(body, "        kb += {ks}u * N4;");
            line!(body, "    }}");
        }
        Layout::Tt => unreachable!("the tiled family has no tt layout"),
    }
    for i in 0..tm {
        for c in 0..tc4 {
            let at = format!("C[pc + {i}u * N4 + {c}u] = acc{i}_{c};");
            match (i, c) {
                (0, 0) => line!(store, "    {at}"),
                (_, 0) => line!(store, "    if (row0 + {i}u < M) {{ {at} }}"),
                (0, _) => line!(store, "    if (col4 + {c}u < N4) {{ {at} }}"),
                _ => line!(
                    store,
                    "    if (row0 + {i}u < M && col4 + {c}u < N4) {{ {at} }}"
                ),
            }
        }
    }
    (setup, body, store)
}

/// The shared template filler ([`crate::wgsl::fill`]) over owned values.
fn fill(template: &str, values: &[(&str, String)]) -> String {
    let pairs: Vec<(&str, &str)> = values.iter().map(|(k, v)| (*k, v.as_str())).collect();
    crate::wgsl::fill(template, &pairs)
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

    /// `shared`: bytes of workgroup memory the member declares (0: none, and no barriers).
    fn validate(wgsl: &str, label: &str, wg: u32, shared: u32) {
        let module = naga::front::wgsl::parse_str(wgsl)
            .unwrap_or_else(|e| panic!("{label}: parse error:\n{}", e.emit_to_string(wgsl)));
        Validator::new(ValidationFlags::all(), Capabilities::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{label}: validation error: {e:?}\n{wgsl}"));
        let ep = module
            .entry_points
            .iter()
            .find(|ep| ep.name == "main")
            .expect("entry point main");
        assert_eq!(ep.workgroup_size, [wg, 1, 1], "{label}");
        // Only the workgroup-memory member (offered on GPUs alone) uses barriers.
        assert_eq!(
            wgsl.contains("workgroupBarrier"),
            shared > 0,
            "{label}: barriers"
        );
        assert!(!wgsl.contains("{{"), "{label}: placeholder left");
        // Within the smallest of the limit sets tested elsewhere (downlevel: 4 storage buffers,
        // 256 invocations per workgroup, no workgroup memory needed).
        let limits = wgpu::Limits::downlevel_defaults();
        let textures = wgsl.matches("texture_2d<f32>;").count();
        assert_eq!(wgsl.matches("var<storage").count() + textures, 3, "{label}");
        assert!(textures <= limits.max_sampled_textures_per_shader_stage as usize);
        assert!(3 <= limits.max_storage_buffers_per_shader_stage, "{label}");
        assert!(wg <= limits.max_compute_invocations_per_workgroup);
        assert!(wg <= limits.max_compute_workgroup_size_x);
        assert_eq!(wgsl.contains("var<workgroup>"), shared > 0, "{label}");
        assert!(
            shared <= limits.max_compute_workgroup_storage_size,
            "{label}"
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
        (2, 12, 24, 12),
        (1, 256, 256, 256),
        (1, 1024, 1024, 1024),
        (1, 1000, 1000, 1000),
        (64, 16, 16, 16),
        (100_000, 2, 4, 4),
        (1, 2048, 2048, 2048),
    ];

    /// Every member the family has, whether or not it supports a given problem.
    fn all_configs() -> Vec<MatmulConfig> {
        let mut out = vec![MatmulConfig::Generic];
        for tm in [4, 8] {
            for tc4 in [1, 2] {
                for ks in [1, 4, 8] {
                    out.push(MatmulConfig::Tiled { tm, tc4, ks });
                }
            }
        }
        for s in [4, 8, 32] {
            out.push(MatmulConfig::Subgroup { s });
        }
        out.push(MatmulConfig::Texture);
        for tm in [4, 8] {
            for bk in [4, 8] {
                out.push(MatmulConfig::Shared { tm, bk });
            }
        }
        out
    }

    fn problems() -> Vec<MatmulProblem> {
        let mut out = Vec::new();
        for &(b, m, k, n) in SHAPES {
            for elem in ["f32", "i32", "u32"] {
                for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                    out.push(MatmulProblem {
                        batch: b,
                        m,
                        k,
                        n,
                        elem,
                        ta,
                        tb,
                    });
                }
            }
        }
        out
    }

    /// The per-dimension workgroup limits of the three limit sets tested elsewhere (wgpu defaults,
    /// lavapipe, downlevel: all 65 535) and two small ones that force folding.
    const MAX_WG: &[u32] = &[65_535, 255, 16];

    /// The shape constants are the problem's own sizes: a kernel told M = 4 for a 3-row problem
    /// reads and writes a row past the end (dropped by Vulkan's robust access, clamped onto the
    /// last row by WebGPU implementations).
    #[test]
    fn shape_constants_are_the_problem_sizes() {
        let mut checked = 0;
        for (b, m, k, n) in [
            (1, 1, 4, 4),
            (1, 2, 8, 8),
            (1, 3, 8, 8),
            (3, 3, 8, 4),
            (2, 5, 4, 12),
        ] {
            for (ta, tb) in [(false, false), (false, true), (true, false)] {
                let p = MatmulProblem {
                    batch: b,
                    m,
                    k,
                    n,
                    elem: "f32",
                    ta,
                    tb,
                };
                for cfg in all_configs() {
                    if !cfg.supports(&p) {
                        continue;
                    }
                    let wgsl = kernel(&p, cfg, 65_535).wgsl;
                    for (name, v) in [("BATCH", b), ("M", m), ("K", k), ("N", n)] {
                        let want = format!("const {name}: u32 = {v}u;");
                        assert!(
                            wgsl.contains(&want),
                            "{} for {p:?}: no `{want}`",
                            cfg.name()
                        );
                    }
                    checked += 1;
                }
            }
        }
        assert!(checked > 20, "only {checked} kernels checked");
    }

    #[test]
    fn every_supported_member_validates_for_shapes_layouts_and_dtypes() {
        let mut checked = 0;
        for p in problems() {
            for cfg in all_configs() {
                if !cfg.supports(&p) {
                    continue;
                }
                for &max in MAX_WG {
                    let groups = cfg.tiles(&p).div_ceil(cfg.workgroup_size() as u64);
                    if groups > (max as u64).pow(3) {
                        continue;
                    }
                    let kern = kernel(&p, cfg, max);
                    validate(
                        &kern.wgsl,
                        &kern.label,
                        cfg.workgroup_size(),
                        cfg.workgroup_bytes(),
                    );
                    checked += 1;
                }
            }
            assert!(p.candidates().iter().all(|c| c.supports(&p)), "{p:?}");
            assert!(p.heuristic().supports(&p));
            assert!(p.browser_heuristic().supports(&p), "{p:?}");
        }
        assert!(checked > 500, "only {checked} kernels checked");
    }

    #[test]
    fn tiled_family_applies_only_to_aligned_f32() {
        let p = |m, k, n, elem, ta, tb| MatmulProblem {
            batch: 1,
            m,
            k,
            n,
            elem,
            ta,
            tb,
        };
        assert!(p(3, 8, 12, "f32", false, false).tiled_ok());
        assert!(p(3, 8, 12, "f32", false, true).tiled_ok());
        assert!(!p(3, 8, 12, "f32", true, false).tiled_ok()); // tn needs m % 4
        assert!(p(4, 7, 12, "f32", true, false).tiled_ok()); // ... not k % 4
        assert!(!p(4, 8, 12, "f32", true, true).tiled_ok());
        assert!(!p(4, 8, 12, "i32", false, false).tiled_ok());
        assert!(!p(4, 6, 12, "f32", false, false).tiled_ok());
        assert!(!p(4, 8, 10, "f32", false, false).tiled_ok());
        assert_eq!(
            p(4, 8, 12, "f32", false, false).heuristic(),
            MatmulConfig::Tiled {
                tm: 8,
                tc4: 1,
                ks: 4
            }
        );
        assert_eq!(
            p(4, 7, 12, "f32", true, false).heuristic(),
            MatmulConfig::Tiled {
                tm: 8,
                tc4: 1,
                ks: 1
            }
        );
        assert_eq!(
            p(4, 8, 12, "u32", true, true).heuristic(),
            MatmulConfig::Generic
        );
        // The browser's fixed choice: the 4 x 4 tile, k by 1 where a tn problem's k is odd.
        assert_eq!(
            p(4, 8, 12, "f32", false, true).browser_heuristic(),
            MatmulConfig::Tiled {
                tm: 4,
                tc4: 1,
                ks: 4
            }
        );
        assert_eq!(
            p(4, 7, 12, "f32", true, false).browser_heuristic(),
            MatmulConfig::Tiled {
                tm: 4,
                tc4: 1,
                ks: 1
            }
        );
        assert_eq!(
            p(4, 8, 12, "i32", false, false).browser_heuristic(),
            MatmulConfig::Generic
        );
        assert_eq!(
            p(4, 8, 12, "u32", false, false).candidates(),
            vec![MatmulConfig::Generic]
        );
        let c = p(64, 64, 64, "f32", false, false).candidates();
        assert_eq!(c[0], p(64, 64, 64, "f32", false, false).heuristic());
        assert!(c.len() >= 4 && !c.contains(&MatmulConfig::Generic));
        assert!(
            matmul_kernel(1, 3, 4, 4, "f32", 65_535)
                .label
                .starts_with("matmul_t8x1k4_nn_f32")
        );
        assert!(
            matmul_kernel(1, 3, 5, 4, "f32", 65_535)
                .label
                .starts_with("matmul_generic_nn_f32")
        );
    }

    #[test]
    fn config_names_round_trip() {
        for cfg in all_configs() {
            assert_eq!(MatmulConfig::parse(&cfg.name()), Some(cfg));
        }
        for bad in [
            "", "t", "t8x", "t8x1", "t8x1k", "tax1k4", "gen", "t8x1k4x", "w", "w8", "w8k", "wxk8",
        ] {
            assert_eq!(MatmulConfig::parse(bad), None, "{bad}");
        }
        // Parsed but nonsensical members are refused by supports().
        for odd in ["t3x1k4", "s3", "s128", "w3k8", "w8k2"] {
            let odd = MatmulConfig::parse(odd).unwrap();
            assert!(!odd.supports(&MatmulProblem::plain(1, 8, 8, 8, "f32")));
        }
        let nt = MatmulProblem {
            tb: true,
            ..MatmulProblem::plain(1, 8, 8, 8, "f32")
        };
        assert!(MatmulConfig::Subgroup { s: 8 }.supports(&nt));
        let tn_k7 = MatmulProblem {
            ta: true,
            ..MatmulProblem::plain(1, 8, 7, 8, "f32")
        };
        assert!(tn_k7.tiled_ok() && !MatmulConfig::Subgroup { s: 8 }.supports(&tn_k7));
        // Only a device's chooser offers these.
        assert!(!nt.candidates().contains(&MatmulConfig::Subgroup { s: 8 }));
        let w8 = MatmulConfig::Shared { tm: 8, bk: 8 };
        assert!(w8.supports(&nt) && !nt.candidates().contains(&w8));
        // k must be a multiple of the k step.
        let k12 = MatmulProblem::plain(1, 8, 12, 8, "f32");
        assert!(!w8.supports(&k12) && MatmulConfig::Shared { tm: 8, bk: 4 }.supports(&k12));
    }

    /// Emulates the kernel's invocation numbering and checks that every output tile is
    /// computed exactly once and that no dimension exceeds the limit.
    fn check_coverage(cfg: MatmulConfig, b: usize, m: usize, k: usize, n: usize, max: u32) {
        let p = MatmulProblem::plain(b, m, k, n, "f32");
        let kern = kernel(&p, cfg, max);
        let [x, y, z] = kern.workgroups;
        assert!(
            x <= max && y <= max && z <= max,
            "{}: {:?} over {max}",
            kern.label,
            kern.workgroups
        );
        let tiles = cfg.tiles(&p);
        let wg = cfg.workgroup_size() as u64;
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
                let p = MatmulProblem::plain(b, m, k, n, "f32");
                for cfg in all_configs() {
                    let groups = cfg.tiles(&p).div_ceil(cfg.workgroup_size() as u64);
                    if cfg.supports(&p) && groups <= (max as u64).pow(3) {
                        check_coverage(cfg, b, m, k, n, max);
                    }
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
        validate(&kern.wgsl, &kern.label, MATMUL_WORKGROUP_SIZE, 0);
        let kern = matmul_kernel(1, 0, 3, 5, "u32", 65_535);
        assert_eq!(kern.workgroups, [0, 0, 0]);
        validate(&kern.wgsl, &kern.label, MATMUL_WORKGROUP_SIZE, 0);
        let p = MatmulProblem {
            ta: true,
            ..MatmulProblem::plain(1, 0, 4, 8, "f32")
        };
        let kern = kernel(&p, p.heuristic(), 65_535);
        assert_eq!(kern.workgroups, [0, 0, 0]);
        validate(&kern.wgsl, &kern.label, MATMUL_WORKGROUP_SIZE, 0);
    }

    #[test]
    #[should_panic(expected = "unsupported element type")]
    fn rejects_unknown_dtype() {
        matmul_kernel(1, 2, 2, 2, "f16", 65_535);
    }
}
