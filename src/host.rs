//! Host-side array data: the currency of transfers and of the CPU reference interpreter.

use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};

/// Typed element storage on the host.
#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    F32(Vec<f32>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    Bool(Vec<bool>),
    /// Double precision: host and `cpu` device only (see [`DType::F64`]).
    F64(Vec<f64>),
}

impl HostData {
    pub fn dtype(&self) -> DType {
        match self {
            HostData::F32(_) => DType::F32,
            HostData::I32(_) => DType::I32,
            HostData::U32(_) => DType::U32,
            HostData::Bool(_) => DType::Bool,
            HostData::F64(_) => DType::F64,
        }
    }
    pub fn len(&self) -> usize {
        match self {
            HostData::F32(v) => v.len(),
            HostData::I32(v) => v.len(),
            HostData::U32(v) => v.len(),
            HostData::Bool(v) => v.len(),
            HostData::F64(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `n` copies of `value`.
    pub fn filled(value: Scalar, n: usize) -> HostData {
        match value {
            Scalar::F32(v) => HostData::F32(vec![v; n]),
            Scalar::I32(v) => HostData::I32(vec![v; n]),
            Scalar::U32(v) => HostData::U32(vec![v; n]),
            Scalar::Bool(v) => HostData::Bool(vec![v; n]),
            Scalar::F64(v) => HostData::F64(vec![v; n]),
        }
    }
    /// Element `i` as a scalar. Panics if out of range (internal use with checked indices).
    pub fn get(&self, i: usize) -> Scalar {
        match self {
            HostData::F32(v) => Scalar::F32(v[i]),
            HostData::I32(v) => Scalar::I32(v[i]),
            HostData::U32(v) => Scalar::U32(v[i]),
            HostData::Bool(v) => Scalar::Bool(v[i]),
            HostData::F64(v) => Scalar::F64(v[i]),
        }
    }
    /// Element `i` as f64 (bool: 0/1).
    pub fn get_f64(&self, i: usize) -> f64 {
        match self {
            HostData::F32(v) => v[i] as f64,
            HostData::I32(v) => v[i] as f64,
            HostData::U32(v) => v[i] as f64,
            HostData::Bool(v) => v[i] as u8 as f64,
            HostData::F64(v) => v[i],
        }
    }
    /// Build from scalars that all have dtype `dtype`.
    pub fn from_scalars(dtype: DType, it: impl IntoIterator<Item = Scalar>) -> HostData {
        let it = it.into_iter();
        match dtype {
            DType::F32 => HostData::F32(
                it.map(|s| {
                    if let Scalar::F32(v) = s.cast(DType::F32) {
                        v
                    } else {
                        0.0
                    }
                })
                .collect(),
            ),
            DType::I32 => HostData::I32(
                it.map(|s| {
                    if let Scalar::I32(v) = s.cast(DType::I32) {
                        v
                    } else {
                        0
                    }
                })
                .collect(),
            ),
            DType::U32 => HostData::U32(
                it.map(|s| {
                    if let Scalar::U32(v) = s.cast(DType::U32) {
                        v
                    } else {
                        0
                    }
                })
                .collect(),
            ),
            DType::Bool => HostData::Bool(
                it.map(|s| {
                    if let Scalar::Bool(v) = s.cast(DType::Bool) {
                        v
                    } else {
                        false
                    }
                })
                .collect(),
            ),
            DType::F64 => HostData::F64(it.map(|s| s.as_f64()).collect()),
        }
    }
    /// The 32-bit words stored in a device buffer (bool as 0/1 u32; f64, which no device holds,
    /// as two words per element, low word first).
    pub fn to_words(&self) -> Vec<u32> {
        match self {
            HostData::F32(v) => bytemuck::cast_slice(v).to_vec(),
            HostData::I32(v) => bytemuck::cast_slice(v).to_vec(),
            HostData::U32(v) => v.clone(),
            HostData::Bool(v) => v.iter().map(|&b| b as u32).collect(),
            HostData::F64(v) => v
                .iter()
                .flat_map(|x| {
                    let b = x.to_bits();
                    [b as u32, (b >> 32) as u32]
                })
                .collect(),
        }
    }
    /// Raw little-endian bytes as stored on a device (f64: 8 bytes per element).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            HostData::F32(v) => bytemuck::cast_slice(v).to_vec(),
            HostData::I32(v) => bytemuck::cast_slice(v).to_vec(),
            HostData::U32(v) => bytemuck::cast_slice(v).to_vec(),
            HostData::Bool(v) => v.iter().flat_map(|&b| (b as u32).to_le_bytes()).collect(),
            HostData::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }
    /// Rebuild from device bytes (`bytes.len()` must be a multiple of the element size: 4, or 8
    /// for f64). One copy for the 32-bit types (device and host share little-endian order on every
    /// target brigade builds for).
    pub fn from_bytes(dtype: DType, bytes: &[u8]) -> HostData {
        let size = dtype.size_bytes();
        let n = bytes.len() / size * size;
        let bytes = &bytes[..n];
        match dtype {
            DType::F32 => HostData::F32(bytemuck::pod_collect_to_vec(bytes)),
            DType::I32 => HostData::I32(bytemuck::pod_collect_to_vec(bytes)),
            DType::U32 => HostData::U32(bytemuck::pod_collect_to_vec(bytes)),
            DType::Bool => HostData::Bool(
                bytes
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) != 0)
                    .collect(),
            ),
            DType::F64 => HostData::F64(
                bytes
                    .chunks_exact(8)
                    .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                    .collect(),
            ),
        }
    }
}

/// Element types that can be moved in and out of arrays.
pub trait Element: Copy + Send + Sync + 'static {
    const DTYPE: DType;
    fn wrap(v: Vec<Self>) -> HostData;
    fn unwrap(d: &HostData) -> Option<&[Self]>;
}
macro_rules! element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            fn wrap(v: Vec<Self>) -> HostData {
                HostData::$d(v)
            }
            fn unwrap(d: &HostData) -> Option<&[Self]> {
                if let HostData::$d(v) = d {
                    Some(v)
                } else {
                    None
                }
            }
        }
    };
}
element!(f32, F32);
element!(i32, I32);
element!(u32, U32);
element!(bool, Bool);
element!(f64, F64);

/// An array whose data lives in host memory.
#[derive(Clone, Debug, PartialEq)]
pub struct HostArray {
    pub shape: Vec<usize>,
    pub data: HostData,
}

impl HostArray {
    /// Checked constructor: the data length must equal the product of `shape`.
    pub fn new(shape: Vec<usize>, data: HostData) -> Result<HostArray> {
        let expected: usize = shape.iter().product();
        if data.len() != expected {
            return Err(Error::DataLength {
                shape,
                expected,
                got: data.len(),
            });
        }
        Ok(HostArray { shape, data })
    }
    pub fn from_vec<T: Element>(v: Vec<T>, shape: &[usize]) -> Result<HostArray> {
        HostArray::new(shape.to_vec(), T::wrap(v))
    }
    pub fn scalar(s: Scalar) -> HostArray {
        HostArray {
            shape: vec![],
            data: HostData::filled(s, 1),
        }
    }
    pub fn full(s: Scalar, shape: &[usize]) -> HostArray {
        HostArray {
            shape: shape.to_vec(),
            data: HostData::filled(s, shape.iter().product()),
        }
    }
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }
    pub fn len(&self) -> usize {
        self.data.len()
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    pub fn size_bytes(&self) -> usize {
        self.len() * self.dtype().size_bytes()
    }
    /// Copy the elements out as `T` (must be the array's dtype).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        T::unwrap(&self.data)
            .map(|s| s.to_vec())
            .ok_or(Error::DTypeMismatch {
                op: "to_vec",
                lhs: self.dtype(),
                rhs: T::DTYPE,
                shapes: vec![self.shape.clone()],
            })
    }
    /// All elements as f64, for comparisons.
    pub fn to_f64(&self) -> Vec<f64> {
        (0..self.len()).map(|i| self.data.get_f64(i)).collect()
    }
}

/// Row-major strides (in elements) of a shape.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Split a linear row-major index into a multi-index.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            idx[d] = i % shape[d];
            i /= shape[d];
        }
    }
    idx
}
