//! Element types and scalar values.

use std::fmt;

/// Element type of an array.
///
/// `Bool` is stored as one `u32` per element on devices: WGSL has no `bool` in storage buffers.
///
/// `F64` is a host-only dtype (like JAX with `jax_enable_x64`): host arrays, the CPU reference
/// interpreter and the `cpu` device compute it in double precision, while GPU devices refuse it
/// with [`crate::Error::BadDType`] (WGSL has no f64): cast to f32 first, or run on the `cpu` device.
/// Its use is exact oracles, such as finite differences of f32 gradients. Eager ops on host f64
/// arrays run on the host; `jit` and the transforms take `.on(cpu device)`. The VJP rules work in
/// f64 (`vjp`), while `grad` takes f32 arguments only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 32-bit signed integer.
    I32,
    /// 32-bit unsigned integer.
    U32,
    /// Boolean (one `u32`, 0 or 1, per element on devices).
    Bool,
    /// Double precision, host and `cpu` device only (see the type's documentation).
    F64,
}

impl DType {
    /// Bytes per element in host memory and in device buffers (8 for the host-only f64).
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F64 => 8,
            _ => 4,
        }
    }
    /// f32 or f64.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }
    /// i32 or u32.
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::U32)
    }
    /// Name used in printed graphs and error messages (`f32`, `i32`, `u32`, `bool`, `f64`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::Bool => "bool",
            DType::F64 => "f64",
        }
    }
    /// WGSL type of a value held in registers. WGSL has no `f64`: programs with f64 values are
    /// refused before code generation, and the name returned for it would not validate.
    pub fn wgsl(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::Bool => "bool",
            DType::F64 => "f64",
        }
    }
    /// WGSL element type of a storage buffer holding this dtype.
    pub fn wgsl_storage(self) -> &'static str {
        match self {
            DType::Bool => "u32",
            d => d.wgsl(),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A single value of some dtype. Used for constants (`full`, pad values, literals).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// A 32-bit float.
    F32(f32),
    /// A 32-bit signed integer.
    I32(i32),
    /// A 32-bit unsigned integer.
    U32(u32),
    /// A boolean.
    Bool(bool),
    /// A double-precision value (host-only dtype, see [`DType::F64`]).
    F64(f64),
}

impl Scalar {
    /// The value's dtype.
    pub fn dtype(self) -> DType {
        match self {
            Scalar::F32(_) => DType::F32,
            Scalar::I32(_) => DType::I32,
            Scalar::U32(_) => DType::U32,
            Scalar::Bool(_) => DType::Bool,
            Scalar::F64(_) => DType::F64,
        }
    }
    /// The value as f64 (bool: 0 or 1).
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::F32(v) => v as f64,
            Scalar::I32(v) => v as f64,
            Scalar::U32(v) => v as f64,
            Scalar::Bool(v) => v as u8 as f64,
            Scalar::F64(v) => v,
        }
    }
    /// Convert to another dtype with the same rules as [`crate::Tensor::cast`]
    /// (`convert_element_type`): float → int truncates toward zero and saturates (NaN → 0), f64 →
    /// f32 rounds to nearest (out of range → ±inf), → bool is `!= 0`.
    pub fn cast(self, to: DType) -> Scalar {
        match to {
            DType::F32 => Scalar::F32(match self {
                Scalar::F32(v) => v,
                Scalar::I32(v) => v as f32,
                Scalar::U32(v) => v as f32,
                Scalar::Bool(v) => v as u8 as f32,
                Scalar::F64(v) => v as f32,
            }),
            DType::I32 => Scalar::I32(match self {
                Scalar::F32(v) => v as i32,
                Scalar::I32(v) => v,
                Scalar::U32(v) => v as i32,
                Scalar::Bool(v) => v as i32,
                Scalar::F64(v) => v as i32,
            }),
            DType::U32 => Scalar::U32(match self {
                Scalar::F32(v) => v as u32,
                Scalar::I32(v) => v as u32,
                Scalar::U32(v) => v,
                Scalar::Bool(v) => v as u32,
                Scalar::F64(v) => v as u32,
            }),
            DType::Bool => Scalar::Bool(match self {
                Scalar::F32(v) => v != 0.0,
                Scalar::I32(v) => v != 0,
                Scalar::U32(v) => v != 0,
                Scalar::Bool(v) => v,
                Scalar::F64(v) => v != 0.0,
            }),
            DType::F64 => Scalar::F64(self.as_f64()),
        }
    }
    /// The 32 bits stored in a device buffer for this value. An f64 never reaches a device
    /// (devices refuse the dtype); it gives the bits of its f32 rounding.
    pub fn to_bits(self) -> u32 {
        match self {
            Scalar::F32(v) => v.to_bits(),
            Scalar::I32(v) => v as u32,
            Scalar::U32(v) => v,
            Scalar::Bool(v) => v as u32,
            Scalar::F64(v) => (v as f32).to_bits(),
        }
    }
    /// A WGSL literal for this value. Non-finite floats are written as bit casts through the
    /// `bf32_bits` helper every generated shader has: WGSL has no `inf`/`nan` literals, and
    /// browsers reject a constant `bitcast<f32>` that gives one.
    pub fn wgsl_literal(self) -> String {
        match self {
            Scalar::F32(v) if v.is_finite() => {
                let s = format!("{v:?}");
                if s.contains('.') || s.contains('e') {
                    format!("f32({s})")
                } else {
                    format!("f32({s}.0)")
                }
            }
            Scalar::F32(v) => format!("bf32_bits({}u)", v.to_bits()),
            Scalar::I32(v) if v == i32::MIN => "i32(-2147483647 - 1)".to_string(),
            Scalar::I32(v) => format!("i32({v})"),
            Scalar::U32(v) => format!("{v}u"),
            Scalar::Bool(v) => format!("{v}"),
            // Never emitted: programs with f64 values are refused before code generation. Should
            // one slip through, `f64(..)` fails WGSL validation instead of computing in f32.
            Scalar::F64(v) => format!("f64({v:?})"),
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::F32(v) => write!(f, "{v:?}"),
            Scalar::I32(v) => write!(f, "{v}"),
            Scalar::U32(v) => write!(f, "{v}u"),
            Scalar::Bool(v) => write!(f, "{v}"),
            Scalar::F64(v) => write!(f, "{v:?}"),
        }
    }
}

impl From<f32> for Scalar {
    fn from(v: f32) -> Self {
        Scalar::F32(v)
    }
}
impl From<i32> for Scalar {
    fn from(v: i32) -> Self {
        Scalar::I32(v)
    }
}
impl From<u32> for Scalar {
    fn from(v: u32) -> Self {
        Scalar::U32(v)
    }
}
impl From<f64> for Scalar {
    fn from(v: f64) -> Self {
        Scalar::F64(v)
    }
}
impl From<bool> for Scalar {
    fn from(v: bool) -> Self {
        Scalar::Bool(v)
    }
}
