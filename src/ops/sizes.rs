//! Checked size arithmetic shared by the shape rules of windowed ops (convolution,
//! `reduce_window`): every size, padding, stride and dilation a generated kernel indexes with is
//! computed in `i128` (no 64-bit input can overflow a sum or one product of two of them) and must
//! fit [`KERNEL_INDEX_MAX`], because the kernels compute positions in WGSL's 32-bit signed `i32`
//! (and write sizes as `i32`/`u32` literals). A value past it is a shape error naming it, raised
//! by the shape rule, long before any WGSL is generated.

/// The largest size, padding, stride, dilation or position a generated kernel can index with
/// (`i32::MAX`).
pub const KERNEL_INDEX_MAX: i128 = i32::MAX as i128;

/// `n` positions with `dil - 1` holes between neighbours (0 stays 0), exactly.
pub(crate) fn dilated(n: usize, dil: usize) -> i128 {
    if n == 0 {
        0
    } else {
        // At most (2^64 - 1)^2 + 1: fits i128 only through the checked product.
        (n as i128 - 1)
            .checked_mul(dil as i128)
            .map_or(i128::MAX, |v| v + 1)
    }
}

/// Windows of span `span` at step `stride` over `padded` positions (0 where the span exceeds
/// them, as JAX's shape rule), exactly: a stride past the padded length leaves one window.
pub(crate) fn windows(padded: i128, span: i128, stride: usize) -> i128 {
    if padded < span {
        0
    } else {
        (padded - span) / (stride.max(1) as i128) + 1
    }
}

/// `Err(detail)` when `value` (named by `what`) is outside `[-KERNEL_INDEX_MAX,
/// KERNEL_INDEX_MAX]`: the detail names it, the bound and why.
pub(crate) fn kernel_index(what: &str, value: i128) -> std::result::Result<(), String> {
    if value.abs() > KERNEL_INDEX_MAX {
        Err(format!(
            "{what} is {value}, more than {KERNEL_INDEX_MAX}, the largest size the kernels can index \
             with (they compute positions as 32-bit signed integers): use smaller sizes"
        ))
    } else {
        Ok(())
    }
}

/// For an axis with at most one window (`windows(padded, span, stride) <= 1`), the smallest
/// stride that keeps it so: `padded - span + 1` (1 when no window fits), never more than
/// `stride`. Results are the same with it, and it is at most the padded length, so it fits the
/// kernels whenever the axis does.
pub(crate) fn one_window_stride(padded: i128, span: i128, stride: usize) -> usize {
    if padded < span {
        1
    } else {
        usize::try_from(padded - span + 1).map_or(stride, |s| s.clamp(1, stride))
    }
}
