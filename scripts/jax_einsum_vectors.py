#!/usr/bin/env python3
"""Print tests/data/jax_einsum.rs: what jnp.einsum computes for fixed inputs (every input is
written too, tests/einsum.rs reads them back), what cumsum/cumprod give with axis=None, what
take_along_axis gives in its modes, how clip and the binary jnp functions promote mixed dtypes,
and the whole jnp.result_type table over brigade's dtypes and Python's weak scalars (x64 off;
the f64 row with x64 on).

    python3 scripts/jax_einsum_vectors.py > tests/data/jax_einsum.rs

Floats are written as their bit patterns, so NaN and -0.0 survive exactly.
"""
import jax

jax.config.update("jax_platforms", "cpu")
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import dtypes  # noqa: E402

out = []


def emit(name, values):
    vals = np.asarray(values)
    shape = ", ".join(str(d) for d in vals.shape)
    flat = vals.reshape(-1)
    if vals.dtype == np.float32:
        ty, body = "u32", ", ".join(f"0x{int(v):08x}" for v in flat.view(np.uint32))
    elif vals.dtype == np.bool_:
        ty, body = "bool", ", ".join("true" if v else "false" for v in flat)
    elif vals.dtype == np.int32:
        ty, body = "i32", ", ".join(str(int(v)) for v in flat)
    elif vals.dtype == np.uint32:
        ty, body = "u32", ", ".join(str(int(v)) for v in flat)
    else:
        raise TypeError(vals.dtype)
    out.append(f"pub const {name}: &[{ty}] = &[{body}];")
    out.append(f"pub const {name}_SHAPE: &[usize] = &[{shape}];")


rng = np.random.default_rng(5)


def f32(*shape):
    return rng.uniform(-2, 2, shape).astype(np.float32)


inputs = {
    "A": f32(3, 4),
    "B": f32(4, 5),
    "C": f32(5, 2),
    "A1": f32(1, 4),
    "X": f32(2, 3, 4),
    "Y": f32(2, 4, 5),
    "S": f32(4, 4),
    "R": f32(3, 3, 2),
    "U": f32(3),
    "V": f32(5),
    "P": f32(2, 1, 3, 4),
    "Q": f32(5, 4, 2),
    "T": f32(3, 4, 2),
    "W": f32(4, 3, 5),
    "Z": f32(3, 5, 6),
    "SC": np.float32(rng.uniform(-2, 2)),
    "IA": rng.integers(-5, 6, (3, 4)).astype(np.int32),
    "IB": rng.integers(-5, 6, (4, 5)).astype(np.int32),
    "BA": rng.integers(0, 2, (3, 4)).astype(np.bool_),
    "BB": rng.integers(0, 2, (4, 5)).astype(np.bool_),
}
for k, v in inputs.items():
    emit("IN_" + k, v)

# (name, subscripts, operand names): tests/einsum.rs holds the same list.
cases = [
    ("MATMUL", "ij,jk->ik", "A B"),
    ("MATMUL_IMPLICIT", "ij,jk", "A B"),
    ("BATCHED", "bij,bjk->bik", "X Y"),
    ("DIAG", "ii->i", "S"),
    ("TRACE", "ii", "S"),
    ("SUM_ALL", "ij->", "A"),
    ("SUM_ROWS", "ij->j", "A"),
    ("TRANSPOSE", "ij->ji", "A"),
    ("IMPLICIT_TRANSPOSE", "ba", "A"),
    ("OUTER", "i,j->ij", "U V"),
    ("OUTER_UPPER", "a,B", "U V"),
    ("ELLIPSIS_BATCH", "...ij,...jk->...ik", "P Q"),
    ("PERMUTED", "ijk,jil->kl", "T W"),
    ("CHAIN", "ij,jk,kl->il", "A B C"),
    ("SCALAR_TIMES", ",i->i", "SC U"),
    ("SCALARS", ",", "SC SC"),
    ("DIAG_SUM", "iij->j", "R"),
    ("BROADCAST_ONE", "ij,ij->ij", "A A1"),
    ("ELLIPSIS_SUMMED", "...ij->ij", "X"),
    ("ELLIPSIS_IMPLICIT", "i...,i", "Z U"),
    ("HADAMARD_SUM", "ij,ij->i", "A A"),
    ("INT", "ij,jk->ik", "IA IB"),
    ("INT_FLOAT", "ij,jk->ik", "IA B"),
    ("BOOL", "ij,jk->ik", "BA BB"),
]
for name, sub, ops in cases:
    emit("EINSUM_" + name, jnp.einsum(sub, *[inputs[o] for o in ops.split()]))

# cumsum / cumprod with axis=None (flattened).
xf = rng.uniform(-1.5, 1.5, (3, 4)).astype(np.float32)
xi = rng.integers(-20, 20, (3, 5)).astype(np.int32)
xu = rng.integers(0, 40, (3, 5)).astype(np.uint32)
xb = rng.integers(0, 2, (3, 5)).astype(np.bool_)
emit("XF", xf)
emit("XI", xi)
emit("XU", xu)
emit("XB", xb)
emit("CUMSUM_NONE_F", jnp.cumsum(xf))
emit("CUMSUM_NONE_I", jnp.cumsum(xi))
emit("CUMSUM_NONE_B", jnp.cumsum(xb))
emit("CUMPROD_NONE_F", jnp.cumprod(xf))
emit("CUMSUM_SCALAR", jnp.cumsum(np.float32(2.5)))

# take_along_axis modes: indices in range, negative and out of range.
idx1 = rng.integers(-7, 7, (3, 6)).astype(np.int32)
idx0 = rng.integers(-5, 5, (4, 5)).astype(np.int32)
emit("IDX1", idx1)
emit("IDX0", idx0)
emit("TAKE_CLIP_F1", jnp.take_along_axis(xf, idx1, axis=1, mode="clip"))
emit("TAKE_FILL_F1", jnp.take_along_axis(xf, idx1, axis=1, mode="fill", fill_value=-9.5))
emit("TAKE_CLIP_I0", jnp.take_along_axis(xi, idx0, axis=0, mode="clip"))
emit("TAKE_FILL_I0", jnp.take_along_axis(xi, idx0, axis=0, mode="fill", fill_value=77))

# Promotion in clip and the binary functions (Python scalars are weak).
lo_row = rng.uniform(-10, 0, (1, 5)).astype(np.float32)
emit("LO_ROW", lo_row)
emit("CLIP_I_FLOAT_BOUNDS", jnp.clip(xi, -5.5, 7.5))
emit("CLIP_I_INT_BOUNDS", jnp.clip(xi, -5, 7))
emit("CLIP_U_INT_BOUNDS", jnp.clip(xu, 3, 30))
emit("CLIP_I_F32_ROW", jnp.clip(xi, lo_row, None))
emit("CLIP_U_I32_BOUND", jnp.clip(xu, np.int32(3), None))
emit("ADD_I_FLOAT", jnp.add(xi, 2.5))
emit("ADD_I_U", jnp.add(xi, xu))
emit("ADD_B_B", jnp.add(xb, xb[::-1]))
emit("ADD_B_INT", jnp.add(xb, 3))
emit("SUB_U_I", jnp.subtract(xu, xi))
emit("MUL_U_INT", jnp.multiply(xu, 3))
emit("MUL_B_B", jnp.multiply(xb, xb[::-1]))
emit("TRUEDIV_I_INT", jnp.true_divide(xi, 4))
emit("FLOORDIV_I_FLOAT", jnp.floor_divide(xi, 3.0))
emit("REM_U_INT", jnp.remainder(xu, 7))
emit("MAX_I_F", jnp.maximum(xi, xf[:, :1]))
emit("MIN_B_U", jnp.minimum(xb, xu))
emit("WHERE_I_FLOAT", jnp.where(xb, xi, 0.5))

print("//! Generated by scripts/jax_einsum_vectors.py with JAX " + jax.__version__ + "; do not edit.")
print("\n".join(out))

# The promotion table: (a, b, result dtype, weak), every pair, x64 off.
types = {
    "bool": np.bool_,
    "i32": np.int32,
    "u32": np.uint32,
    "f32": np.float32,
    "int": int,
    "float": float,
}
names = {"bool": "bool", "int32": "i32", "uint32": "u32", "float32": "f32", "float64": "f64"}


def table(tys):
    rows = []
    for a, ta in tys.items():
        for b, tb in tys.items():
            dt, weak = dtypes.result_type(ta, tb, return_weak_type_flag=True)
            rows.append(f'    ("{a}", "{b}", "{names[str(dt)]}", {"true" if weak else "false"}),')
    return rows


print("/// `jnp.result_type(a, b)` with jax_enable_x64 off: (a, b, result, weak). `int`/`float`: Python scalars.")
print("pub const RESULT_TYPE: &[(&str, &str, &str, bool)] = &[")
print("\n".join(table(types)))
print("];")
jax.config.update("jax_enable_x64", True)
f64_rows = []
for b, tb in {**types, "f64": np.float64}.items():
    dt, weak = dtypes.result_type(np.float64, tb, return_weak_type_flag=True)
    f64_rows.append(f'    ("f64", "{b}", "{names[str(dt)]}", {"true" if weak else "false"}),')
print("/// `jnp.result_type(float64, b)` with jax_enable_x64 on (brigade's host-only f64).")
print("pub const RESULT_TYPE_F64: &[(&str, &str, &str, bool)] = &[")
print("\n".join(f64_rows))
print("];")
