#!/usr/bin/env python3
"""Print tests/data/jax_pool.rs: what `lax.reduce_window` (max, min, sum) and the max/avg pools
built on it compute, forward and gradient, for fixed inputs this script derives (tests/pool.rs
rebuilds the same calls from the constants written here).

    python3 scripts/jax_pool_vectors.py > tests/data/jax_pool.rs

Pooling windows cover the spatial axes only (window and stride 1 on batch and channels). `avg_pool`
here divides by the full window size, counting padded cells (flax's `count_include_pad=True`
default), and `avg_pool_valid_count` by the number of real cells in each window (stax's
`AvgPool`, flax's `count_include_pad=False`). Gradients are of `sum(pool(x) * ct)` for a fixed
cotangent `ct`. TIES is an input of small integers with many equal neighbours: the max-pool
gradient goes to the first maximum of each window (row-major), as JAX's select_and_scatter_add.

Floats are written as their bit patterns, so every value survives exactly.
"""
import jax

jax.config.update("jax_platforms", "cpu")
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

from jax_rs_emit import emit, out  # noqa: E402


def full(spatial, nchw, lead=1):
    """Window/stride tuple over all axes for spatial values (NCHW: batch, channel first)."""
    return (1, 1) + tuple(spatial) if nchw else (1,) + tuple(spatial) + (1,)


def pads(x_shape, window, strides, padding):
    if isinstance(padding, str):
        return lax.padtype_to_pads(x_shape, window, strides, padding)
    return padding


def max_pool(x, window, strides, padding):
    p = pads(x.shape, window, strides, padding)
    return lax.reduce_window(x, -jnp.inf, lax.max, window, strides, p)


def sum_pool(x, window, strides, padding):
    p = pads(x.shape, window, strides, padding)
    return lax.reduce_window(x, 0.0, lax.add, window, strides, p)


def avg_pool(x, window, strides, padding):
    return sum_pool(x, window, strides, padding) / np.prod(window)


def avg_pool_valid_count(x, window, strides, padding):
    ones = jnp.ones(x.shape, x.dtype)
    return sum_pool(x, window, strides, padding) / sum_pool(ones, window, strides, padding)


def fwd_grad(name, f, x):
    y = f(x)
    ct = rng.uniform(-1, 1, y.shape).astype(np.float32)
    g = jax.grad(lambda x: jnp.sum(f(x) * ct))(x)
    emit(f"{name}_CT", ct)
    emit(f"{name}_Y", y)
    emit(f"{name}_G", g)


rng = np.random.default_rng(13)
# NCHW input, tie-free: distinct values in [-3, 3).
x = rng.permutation(np.linspace(-3, 3, 2 * 3 * 5 * 6, endpoint=False)).astype(np.float32)
x = x.reshape(2, 3, 5, 6)
# Ties: small integers, many equal values in every window.
ties = rng.integers(0, 3, (1, 2, 5, 5)).astype(np.float32)
# 1-d (batch, length, channel) input, tie-free.
x1 = rng.permutation(np.linspace(-2, 2, 2 * 9 * 2, endpoint=False)).astype(np.float32)
x1 = x1.reshape(2, 9, 2)
emit("X", x)
emit("TIES", ties)
emit("X1", x1)

# NCHW pools.
w22, s22 = full((2, 2), True), full((2, 2), True)
w33, s21 = full((3, 3), True), full((2, 1), True)
fwd_grad("MAX_VALID_2X2_S2", lambda x: max_pool(x, w22, s22, "VALID"), x)
fwd_grad("MAX_SAME_3X3_S21", lambda x: max_pool(x, w33, s21, "SAME"), x)
fwd_grad("AVG_SAME_3X3_S21", lambda x: avg_pool(x, w33, s21, "SAME"), x)
fwd_grad("AVGV_SAME_3X3_S21", lambda x: avg_pool_valid_count(x, w33, s21, "SAME"), x)
fwd_grad("AVG_VALID_2X2_S2", lambda x: avg_pool(x, w22, s22, "VALID"), x)
fwd_grad("SUM_SAME_2X3_S1", lambda x: sum_pool(x, full((2, 3), True), full((1, 1), True), "SAME"), x)
# Ties: overlapping 3x3 windows, stride 1, and 2x2 stride 1 with explicit padding.
fwd_grad("TIES_MAX_3X3_S1", lambda x: max_pool(x, w33, full((1, 1), True), "VALID"), ties)
fwd_grad(
    "TIES_MAX_2X2_PAD",
    lambda x: max_pool(x, w22, full((1, 1), True), ((0, 0), (0, 0), (1, 0), (0, 1))),
    ties,
)
# NHWC (the same x, transposed): a max pool with SAME padding.
xh = np.transpose(x, (0, 2, 3, 1)).copy()
emit("XH", xh)
fwd_grad("NHWC_MAX_SAME_3X3_S2", lambda x: max_pool(x, full((3, 3), False), full((2, 2), False), "SAME"), xh)
# 1-d reduce_window over the length axis: strides, padding, base and window dilation.
win1, str1 = (1, 3, 1), (1, 2, 1)
pad1 = ((0, 0), (2, 1), (0, 0))
fwd_grad("R1_SUM_PAD", lambda x: lax.reduce_window(x, 0.0, lax.add, win1, str1, pad1), x1)
fwd_grad("R1_MAX_PAD", lambda x: lax.reduce_window(x, -jnp.inf, lax.max, win1, str1, pad1), x1)
fwd_grad("R1_MIN_PAD", lambda x: lax.reduce_window(x, jnp.inf, lax.min, win1, str1, pad1), x1)
fwd_grad(
    "R1_SUM_DIL",
    lambda x: lax.reduce_window(
        x, 0.0, lax.add, (1, 2, 1), (1, 3, 1), ((0, 0), (1, 2), (0, 0)),
        base_dilation=(1, 2, 1), window_dilation=(1, 3, 1)),
    x1,
)
fwd_grad(
    "R1_MAX_BASE_DIL",
    lambda x: lax.reduce_window(
        x, -jnp.inf, lax.max, (1, 3, 1), (1, 2, 1), ((0, 0), (1, 1), (0, 0)),
        base_dilation=(1, 2, 1)),
    x1,
)
# Window dilation of max (forward only: JAX has no VJP for it).
emit(
    "R1_MAX_WIN_DIL_Y",
    lax.reduce_window(x1, -jnp.inf, lax.max, (1, 3, 1), (1, 1, 1), ((0, 0), (1, 1), (0, 0)),
                      window_dilation=(1, 2, 1)),
)
# Integers: i32 max and sum with padding (identity cells: i32::MIN and 0).
xi = rng.integers(-50, 50, (3, 7)).astype(np.int32)
emit("XI", xi)
emit("I_MAX", lax.reduce_window(xi, np.int32(-2**31), lax.max, (2, 3), (1, 2), ((1, 0), (1, 1))))
emit("I_SUM", lax.reduce_window(xi, np.int32(0), lax.add, (2, 3), (1, 2), ((1, 0), (1, 1))))

print(f"//! Generated by scripts/jax_pool_vectors.py with JAX {jax.__version__}; do not edit.")
print("#![allow(dead_code)]")
print("\n".join(out))
