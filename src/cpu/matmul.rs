//! `dot_general` as batched GEMMs. Each batch index `b` computes `C_b (m × n) = A_b (m × k) · B_b
//! (k × n)`, where `m`, `k`, `n` are the products of the lhs free, contracted and rhs free axes.
//! An operand whose free axes and contracted axes each form one strided run in memory (plain,
//! transposed, or batched matrices: every layout the tracer's `matmul` makes) goes to the GEMM as
//! it is, with its row and column strides; any other layout is first gathered into `(batch, rows,
//! cols)` order. Floats go through `matrixmultiply` (SIMD kernels chosen at run time, threads
//! natively; f32 accumulates in f32, the interpreter in f64: they agree to a few ulps of
//! `Σ|a||b|`), integers through a wrapping loop with the interpreter's u32 arithmetic (the same bits).

use super::layout::{View, gather};
use crate::host::{HostArray, HostData, strides, unravel};
use crate::ops::DotDims;

/// One operand as strided matrices: `base(b) + row·rs + col·cs`.
struct Operand<'a, T: Clone> {
    data: std::borrow::Cow<'a, [T]>,
    /// Offset of each batch index's matrix.
    bases: Vec<usize>,
    rs: usize,
    cs: usize,
}

/// The single stride of `axes` taken as one index (row-major over them), if they form one run.
fn run_stride(shape: &[usize], st: &[usize], axes: &[usize]) -> Option<usize> {
    let live: Vec<usize> = axes.iter().copied().filter(|&a| shape[a] != 1).collect();
    let Some(&last) = live.last() else {
        return Some(0);
    };
    for w in live.windows(2) {
        if st[w[0]] != st[w[1]] * shape[w[1]] {
            return None;
        }
    }
    Some(st[last])
}

/// View `x` as matrices of `rows × cols` per batch index (`batch`, `row_axes`, `col_axes` are axes
/// of `x`), gathering a copy only when the axes do not form strided runs.
fn operand<'a, T: Copy + Default + Send + Sync>(
    x: &'a [T],
    shape: &[usize],
    batch: &[usize],
    row_axes: &[usize],
    col_axes: &[usize],
) -> Operand<'a, T> {
    let st = strides(shape);
    let bshape: Vec<usize> = batch.iter().map(|&a| shape[a]).collect();
    let nb: usize = bshape.iter().product();
    if let (Some(rs), Some(cs)) = (
        run_stride(shape, &st, row_axes),
        run_stride(shape, &st, col_axes),
    ) {
        let bases = (0..nb)
            .map(|b| {
                unravel(b, &bshape)
                    .iter()
                    .zip(batch)
                    .map(|(i, &a)| i * st[a])
                    .sum()
            })
            .collect();
        return Operand {
            data: std::borrow::Cow::Borrowed(x),
            bases,
            rs,
            cs,
        };
    }
    let perm: Vec<usize> = batch
        .iter()
        .chain(row_axes)
        .chain(col_axes)
        .copied()
        .collect();
    let v = View {
        shape: perm.iter().map(|&p| shape[p]).collect(),
        strides: perm.iter().map(|&p| st[p]).collect(),
        base: 0,
    };
    let rows: usize = row_axes.iter().map(|&a| shape[a]).product();
    let cols: usize = col_axes.iter().map(|&a| shape[a]).product();
    Operand {
        data: std::borrow::Cow::Owned(gather(x, &v)),
        bases: (0..nb).map(|b| b * rows * cols).collect(),
        rs: cols,
        cs: 1,
    }
}

/// `dot_general` of `l` and `r` (one dtype, checked by the shape rule; `None` otherwise).
pub(crate) fn dot_general(
    l: &HostArray,
    r: &HostArray,
    d: &DotDims,
    out: &[usize],
) -> Option<HostData> {
    let (lf, rf) = (d.lhs_free(l.shape.len()), d.rhs_free(r.shape.len()));
    let size = |s: &[usize], axes: &[usize]| axes.iter().map(|&a| s[a]).product::<usize>();
    let (m, k, n) = (
        size(&l.shape, &lf),
        size(&l.shape, &d.lhs_contract),
        size(&r.shape, &rf),
    );
    let nb = size(&l.shape, &d.lhs_batch);
    debug_assert_eq!(nb * m * n, out.iter().product::<usize>());
    let dims = Dims { nb, m, k, n };
    macro_rules! ops {
        ($a:expr, $b:expr) => {
            (
                operand($a, &l.shape, &d.lhs_batch, &lf, &d.lhs_contract),
                operand($b, &r.shape, &d.rhs_batch, &d.rhs_contract, &rf),
            )
        };
    }
    Some(match (&l.data, &r.data) {
        (HostData::F32(a), HostData::F32(b)) => {
            let (a, b) = ops!(a, b);
            HostData::F32(float_gemm(&a, &b, dims))
        }
        (HostData::F64(a), HostData::F64(b)) => {
            let (a, b) = ops!(a, b);
            HostData::F64(float_gemm(&a, &b, dims))
        }
        (HostData::I32(a), HostData::I32(b)) => {
            let (a, b): (&[u32], &[u32]) = (bytemuck::cast_slice(a), bytemuck::cast_slice(b));
            let (a, b) = ops!(a, b);
            HostData::I32(
                int_gemm(&a, &b, dims)
                    .into_iter()
                    .map(|v| v as i32)
                    .collect(),
            )
        }
        (HostData::U32(a), HostData::U32(b)) => {
            let (a, b) = ops!(a, b);
            HostData::U32(int_gemm(&a, &b, dims))
        }
        _ => return None,
    })
}

/// A GEMM of `matrixmultiply`'s signature: `C (m × n) = alpha·A (m × k)·B (k × n) + beta·C`, each
/// matrix given by a pointer and its row and column strides.
type GemmFn<T> = unsafe fn(
    usize,
    usize,
    usize,
    T,
    *const T,
    isize,
    isize,
    *const T,
    isize,
    isize,
    T,
    *mut T,
    isize,
    isize,
);

/// The float types `matrixmultiply` has a GEMM for.
trait Float: Copy + Default {
    const ONE: Self;
    const GEMM: GemmFn<Self>;
}

impl Float for f32 {
    const ONE: f32 = 1.0;
    const GEMM: GemmFn<f32> = matrixmultiply::sgemm;
}

impl Float for f64 {
    const ONE: f64 = 1.0;
    const GEMM: GemmFn<f64> = matrixmultiply::dgemm;
}

/// A batched product's sizes: `nb` batch indices of `m × k · k × n`.
#[derive(Clone, Copy)]
struct Dims {
    nb: usize,
    m: usize,
    k: usize,
    n: usize,
}

/// The batched product `C (nb × m × n, row-major)` of `a` and `b`: `one(bi, c_bi)` adds batch
/// index `bi`'s product into its zeroed `m × n` matrix (called only when there is work: no
/// operand is empty).
fn batched<T: Copy + Default>(d: Dims, one: impl Fn(usize, &mut [T])) -> Vec<T> {
    let mut c = vec![T::default(); d.nb * d.m * d.n];
    if d.k == 0 || c.is_empty() {
        return c;
    }
    for (bi, cb) in c.chunks_mut(d.m * d.n).enumerate() {
        one(bi, cb);
    }
    c
}

/// Float batched matmul through `matrixmultiply`: one GEMM per batch index.
fn float_gemm<T: Float>(a: &Operand<'_, T>, b: &Operand<'_, T>, d: Dims) -> Vec<T> {
    batched(d, |bi, cb| {
        // Each batch index's matrix starts inside its operand (no operand is empty here).
        let (pa, pb) = (
            a.data[a.bases[bi]..].as_ptr(),
            b.data[b.bases[bi]..].as_ptr(),
        );
        // SAFETY: the offsets `base + i·rs + j·cs` for i < rows, j < cols stay inside each
        // operand (its strides come from its own shape, or it was gathered into that layout), and
        // `cb` holds m·n elements written with row stride n.
        unsafe {
            T::GEMM(
                d.m,
                d.k,
                d.n,
                T::ONE,
                pa,
                a.rs as isize,
                a.cs as isize,
                pb,
                b.rs as isize,
                b.cs as isize,
                T::default(),
                cb.as_mut_ptr(),
                d.n as isize,
                1,
            )
        }
    })
}

/// Integer matmul with wrapping u32 arithmetic (two's complement: the same bits for i32), the
/// interpreter's rule; i-k-j order so the inner loop runs along rows of C and B.
fn int_gemm(a: &Operand<'_, u32>, b: &Operand<'_, u32>, d: Dims) -> Vec<u32> {
    let (m, k, n) = (d.m, d.k, d.n);
    batched(d, |bi, cb: &mut [u32]| {
        let (ab, bb) = (a.bases[bi], b.bases[bi]);
        for i in 0..m {
            let row = &mut cb[i * n..(i + 1) * n];
            for p in 0..k {
                let x = a.data[ab + i * a.rs + p * a.cs];
                let brow = bb + p * b.rs;
                if b.cs == 1 {
                    for (cv, &y) in row.iter_mut().zip(&b.data[brow..brow + n]) {
                        *cv = cv.wrapping_add(x.wrapping_mul(y));
                    }
                } else {
                    for (j, cv) in row.iter_mut().enumerate() {
                        *cv = cv.wrapping_add(x.wrapping_mul(b.data[brow + j * b.cs]));
                    }
                }
            }
        }
    })
}
