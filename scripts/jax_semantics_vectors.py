#!/usr/bin/env python3
"""Print tests/data/jax_semantics.rs: what JAX computes at the edges brigade must agree on.

Integer division and remainder by zero (lax.div / lax.rem, jnp.floor_divide / jnp.remainder),
float floor division with infinities and NaN, casts of NaN and out-of-range floats, NaN in
max/min/argmax/argmin and maximum/minimum, jnp.take's modes, and jnp.nan_to_num.

    pip install "jax[cpu]==0.10.2"
    python3 scripts/jax_semantics_vectors.py > tests/data/jax_semantics.rs

Floats are written as their bit patterns, so NaN and -0.0 survive exactly.
"""
import jax

jax.config.update("jax_platforms", "cpu")
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

NAN, INF = float("nan"), float("inf")
out = []


def emit(name, rust_ty, values):
    vals = np.asarray(values).reshape(-1)
    if rust_ty == "f32":
        body = ", ".join(f"0x{int(v):08x}" for v in vals.astype(np.float32).view(np.uint32))
        out.append(f"pub const {name}: &[u32] = &[{body}];")
    elif rust_ty == "bool":
        body = ", ".join("true" if v else "false" for v in vals)
        out.append(f"pub const {name}: &[bool] = &[{body}];")
    else:
        body = ", ".join(str(int(v)) for v in vals)
        out.append(f"pub const {name}: &[{rust_ty}] = &[{body}];")


i32 = lambda v: jnp.array(v, jnp.int32)  # noqa: E731
u32 = lambda v: jnp.array(v, jnp.uint32)  # noqa: E731
f32 = lambda v: jnp.array(v, jnp.float32)  # noqa: E731

a = [7, -7, 0, 7, -7, 6, -6, 1, -1, 2147483647, -2147483648, -2147483648, 5]
b = [0, 0, 0, 2, -2, 3, -3, 7, 7, -1, -1, 3, 2147483647]
emit("I32_A", "i32", a)
emit("I32_B", "i32", b)
emit("I32_LAX_DIV", "i32", lax.div(i32(a), i32(b)))
emit("I32_LAX_REM", "i32", lax.rem(i32(a), i32(b)))
emit("I32_FLOOR_DIVIDE", "i32", jnp.floor_divide(i32(a), i32(b)))
emit("I32_REMAINDER", "i32", jnp.remainder(i32(a), i32(b)))

ua = [7, 0, 4294967295, 9, 1]
ub = [0, 0, 2, 4, 4294967295]
emit("U32_A", "u32", ua)
emit("U32_B", "u32", ub)
emit("U32_LAX_DIV", "u32", lax.div(u32(ua), u32(ub)))
emit("U32_LAX_REM", "u32", lax.rem(u32(ua), u32(ub)))
emit("U32_FLOOR_DIVIDE", "u32", jnp.floor_divide(u32(ua), u32(ub)))
emit("U32_REMAINDER", "u32", jnp.remainder(u32(ua), u32(ub)))

fa = [7.5, -7.5, 7.5, -7.5, 6.0, -0.5, 3.0, NAN, 1.0, INF, 5.0, -5.0, 0.0]
fb = [2.0, 2.0, -2.0, -2.0, 3.0, INF, INF, 2.0, NAN, 2.0, 0.0, -INF, 3.0]
emit("F32_A", "f32", fa)
emit("F32_B", "f32", fb)
emit("F32_FLOOR_DIVIDE", "f32", jnp.floor_divide(f32(fa), f32(fb)))
emit("F32_REMAINDER", "f32", jnp.remainder(f32(fa), f32(fb)))
emit("F32_LAX_REM", "f32", lax.rem(f32(fa), f32(fb)))

c = [NAN, INF, -INF, 3e9, -3e9, -1.5, 2.7, -0.0, 0.0, 4.5e9]
emit("CAST_IN", "f32", c)
emit("CAST_I32", "i32", f32(c).astype(jnp.int32))
emit("CAST_U32", "u32", f32(c).astype(jnp.uint32))
emit("CAST_BOOL", "bool", f32(c).astype(jnp.bool_))

# Rows of a [4, 5] matrix with NaN in some rows: reductions and arg-reductions along axis 1.
m = [[1.0, NAN, -1.0, NAN, 3.0],
     [2.0, 5.0, -4.0, 0.5, 5.0],
     [NAN, 1.0, 2.0, 3.0, 4.0],
     [-INF, -INF, 0.0, INF, INF]]
emit("RED_IN", "f32", m)
emit("RED_MAX", "f32", jnp.max(f32(m), axis=1))
emit("RED_MIN", "f32", jnp.min(f32(m), axis=1))
emit("RED_ARGMAX", "i32", jnp.argmax(f32(m), axis=1))
emit("RED_ARGMIN", "i32", jnp.argmin(f32(m), axis=1))
pa = [NAN, 1.0, NAN, -0.0, 0.0, INF, -INF, 2.0]
pb = [1.0, NAN, NAN, 0.0, -0.0, NAN, 3.0, 2.0]
emit("PAIR_A", "f32", pa)
emit("PAIR_B", "f32", pb)
emit("PAIR_MAXIMUM", "f32", jnp.maximum(f32(pa), f32(pb)))
emit("PAIR_MINIMUM", "f32", jnp.minimum(f32(pa), f32(pb)))
emit("RELU", "f32", jax.nn.relu(f32(pa)))

tx = [10.0, 20.0, 30.0, 40.0, 50.0]
ti = [0, 4, 5, -1, -5, -6, 17, -17, 2147483647, -2147483648, 2, -3]
emit("TAKE_X", "f32", tx)
emit("TAKE_I", "i32", ti)
emit("TAKE_FILL", "f32", jnp.take(f32(tx), i32(ti)))
emit("TAKE_CLIP", "f32", jnp.take(f32(tx), i32(ti), mode="clip"))
emit("TAKE_WRAP", "f32", jnp.take(f32(tx), i32(ti), mode="wrap"))
emit("TAKE_GETITEM", "f32", f32(tx)[i32(ti)])

n = [NAN, INF, -INF, 1.5, -0.0]
emit("NAN_TO_NUM_IN", "f32", n)
emit("NAN_TO_NUM", "f32", jnp.nan_to_num(f32(n)))

# Signs of zero: sign and tanh keep -0.0; maximum/minimum and max/min of tied zeros (+0.0 for
# max, -0.0 for min, in either order); the gradient of abs (+1 at ±0, -1 at NaN).
z = [-0.0, 0.0, NAN, 1.5, -2.0, 1e-30, -1e-30]
emit("ZERO_IN", "f32", z)
emit("ZERO_SIGN", "f32", jnp.sign(f32(z)))
emit("ZERO_TANH", "f32", jnp.tanh(f32(z)))
emit("ZERO_GRAD_ABS", "f32", jax.grad(lambda x: jnp.sum(jnp.abs(x)))(f32(z)))
zm = [[-0.0, 0.0, -0.0], [0.0, -0.0, 0.0], [-0.0, -0.0, -0.0], [0.0, 0.0, 0.0]]
emit("ZRED_IN", "f32", zm)
emit("ZRED_MAX", "f32", jnp.max(f32(zm), axis=1))
emit("ZRED_MIN", "f32", jnp.min(f32(zm), axis=1))

# int -> f32 -> int rounds through f32 (2^24 + 1 is not an f32).
ci = [16777217, 123456789, -2147483647, 2147483647, -16777217, 7]
emit("CHAIN_I32_IN", "i32", ci)
emit("CHAIN_I32", "i32", i32(ci).astype(jnp.float32).astype(jnp.int32))
cu = [16777217, 4294967295, 4294967040, 123456789, 7]
emit("CHAIN_U32_IN", "u32", cu)
emit("CHAIN_U32", "u32", u32(cu).astype(jnp.float32).astype(jnp.uint32))

# A negative Python int with a uint32 array wraps (JAX takes [-2^31, 2^32) for uint32).
ul = [5, 0, 4294967295]
emit("ULIT_IN", "u32", ul)
emit("ULIT_ADD_M1", "u32", u32(ul) + (-1))
emit("ULIT_MUL_M1", "u32", u32(ul) * (-1))
emit("ULIT_SUB_M1", "u32", u32(ul) - (-1))
emit("ULIT_ADD_MIN", "u32", jnp.add(u32(ul), -(2**31)))

# log_softmax as jax.nn.log_softmax computes it: shifted by the row's max.
ls = [[1e30, 1e30, -1e30], [INF, 1.0, 2.0], [INF, INF, 0.0], [INF, -INF, 0.0],
      [-INF, -INF, -INF], [1.0, 2.0, 3.0], [-1e30, 5.0, -INF]]
emit("LSM_IN", "f32", ls)
emit("LSM", "f32", jax.nn.log_softmax(f32(ls), axis=1))

# log near 1, at the ends of the range and at the special values (no subnormals: XLA's CPU
# flushes them to zero).
lg = [0.99999994, 0.999999, 0.999, 0.99, 0.75, 1.0000001, 1.00001, 1.5, 0.5, 2.0, 10.0,
      1e-30, 1.2e-38, 3e38, 1.0, 0.0, -0.0, -1.0, INF, -INF, NAN, 0.70710677, 1.4142135]
emit("LOG_IN", "f32", lg)
emit("LOG", "f32", jnp.log(f32(lg)))

# Bools: max/min are any/all, argmax/argmin the first true/false, matmul an OR of ANDs.
bm = [[True, False, True], [False, False, False], [True, True, True], [False, True, False]]
bb = [[True, False], [False, False], [True, True]]
emit("BOOL_IN", "bool", bm)
emit("BOOL_RHS", "bool", bb)
emit("BOOL_MAX", "bool", jnp.max(jnp.array(bm), axis=1))
emit("BOOL_MIN", "bool", jnp.min(jnp.array(bm), axis=1))
emit("BOOL_ARGMAX", "i32", jnp.argmax(jnp.array(bm), axis=1))
emit("BOOL_ARGMIN", "i32", jnp.argmin(jnp.array(bm), axis=1))
emit("BOOL_MATMUL", "bool", jnp.matmul(jnp.array(bm), jnp.array(bb)))
# Elementwise maximum/minimum of bools are or/and.
bm2 = [[True, True, False], [False, True, False], [False, True, True], [False, False, False]]
emit("BOOL_IN2", "bool", bm2)
emit("BOOL_MAXIMUM", "bool", jnp.maximum(jnp.array(bm), jnp.array(bm2)))
emit("BOOL_MINIMUM", "bool", jnp.minimum(jnp.array(bm), jnp.array(bm2)))

# Gradients where a NaN meets max/min: maximum/minimum give neither operand the cotangent, and
# the window max/min (max pooling) sends it to the cell XLA's select picks (a NaN replaces and is
# replaced).
for name, fn in [("MAXIMUM", jnp.maximum), ("MINIMUM", jnp.minimum)]:
    ga, gb = jax.grad(lambda x, y: jnp.sum(fn(x, y)), argnums=(0, 1))(f32(pa), f32(pb))
    emit(f"GRAD_{name}_A", "f32", ga)
    emit(f"GRAD_{name}_B", "f32", gb)
wx = [3.0, NAN, 0.0, NAN, 1.0, 2.0, 3.0, NAN, 0.0, 5.0, 5.0, 4.0, -1.0]
emit("WIN_IN", "f32", wx)
for name, init, op in [("MAX", -INF, lax.max), ("MIN", INF, lax.min)]:
    g = jax.grad(lambda x: jnp.sum(lax.reduce_window(x, init, op, (3,), (1,), "VALID")))(f32(wx))
    emit(f"WIN_GRAD_{name}", "f32", g)

# Statistics and comparisons: jnp.var/std (ddof, an axis, all axes, ddof >= n gives NaN, ints
# in f32), jnp.linspace (endpoint or not, reversed, num 1 and 0), jnp.isclose at the edges.
vx = [[1.5, -2.25, 3.0, 10.0], [0.125, 7.0, -4.5, 2.0], [100.0, 99.5, 101.25, 98.0]]
emit("VAR_IN", "f32", vx)
emit("VAR_AX1", "f32", jnp.var(f32(vx), axis=1))
emit("VAR_AX0_DDOF1", "f32", jnp.var(f32(vx), axis=0, ddof=1))
emit("STD_ALL_DDOF1", "f32", jnp.std(f32(vx), ddof=1))
emit("VAR_AX1_DDOF4", "f32", jnp.var(f32(vx), axis=1, ddof=4))
vi = [[3, -8, 11], [40, 2, 7]]
emit("VAR_INT_IN", "i32", vi)
emit("VAR_INT_AX1", "f32", jnp.var(i32(vi), axis=1))
for k, (lo, hi, num, ep) in enumerate([(0.0, 1.0, 7, True), (-3.3, 17.1, 11, False),
                                       (1e-3, 1e4, 9, True), (5.0, -2.0, 6, True),
                                       (0.1, 0.7, 13, True), (2.5, 9.0, 1, True)]):
    emit(f"LINSPACE_{k}", "f32", jnp.linspace(f32(lo), f32(hi), num, endpoint=ep))
ca = [1.0, 1.0, 1e6, INF, INF, -INF, NAN, NAN, 0.0, 1e-9, 5.0, 1.0]
cb = [1.000001, 1.1, 1.00001e6, INF, -INF, -INF, NAN, 1.0, 1e-9, 0.0, INF, NAN]
emit("CLOSE_A", "f32", ca)
emit("CLOSE_B", "f32", cb)
emit("ISCLOSE", "bool", jnp.isclose(f32(ca), f32(cb)))
emit("ISCLOSE_NAN", "bool", jnp.isclose(f32(ca), f32(cb), equal_nan=True))
emit("ISCLOSE_LOOSE", "bool", jnp.isclose(f32(ca), f32(cb), rtol=0.2, atol=1e-3))

print(f"//! Generated by scripts/jax_semantics_vectors.py with JAX {jax.__version__} (CPU). Do not edit.")
print("//! Floats are f32 bit patterns.")
print("#![allow(dead_code)]")
print()
print("\n".join(out))
