"""The Rust-constant writer the scripts/jax_*_vectors.py scripts share: `emit` appends
`pub const NAME: &[T]` and `NAME_SHAPE` to `out` (floats as bit patterns, so NaN and -0.0 survive).
"""
import numpy as np

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
