//! Host-side array data: the currency of transfers and of the CPU reference interpreter.

use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};

/// Typed element storage on the host.
#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    /// 32-bit floats.
    F32(Vec<f32>),
    /// 32-bit signed integers.
    I32(Vec<i32>),
    /// 32-bit unsigned integers.
    U32(Vec<u32>),
    /// Booleans.
    Bool(Vec<bool>),
    /// Double precision: host and `cpu` device only (see [`DType::F64`]).
    F64(Vec<f64>),
}

impl HostData {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            HostData::F32(_) => DType::F32,
            HostData::I32(_) => DType::I32,
            HostData::U32(_) => DType::U32,
            HostData::Bool(_) => DType::Bool,
            HostData::F64(_) => DType::F64,
        }
    }
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            HostData::F32(v) => v.len(),
            HostData::I32(v) => v.len(),
            HostData::U32(v) => v.len(),
            HostData::Bool(v) => v.len(),
            HostData::F64(v) => v.len(),
        }
    }
    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `n` copies of `value`, or [`Error::OutOfMemory`] (device `host`, naming the bytes) when the
    /// host cannot allocate them.
    pub fn try_filled(value: Scalar, n: usize) -> Result<HostData> {
        let what = || format!("{n} elements of {}", value.dtype());
        Ok(match value {
            Scalar::F32(v) => HostData::F32(try_vec(v, n, what)?),
            Scalar::I32(v) => HostData::I32(try_vec(v, n, what)?),
            Scalar::U32(v) => HostData::U32(try_vec(v, n, what)?),
            Scalar::Bool(v) => HostData::Bool(try_vec(v, n, what)?),
            Scalar::F64(v) => HostData::F64(try_vec(v, n, what)?),
        })
    }
    /// `n` copies of `value`, for sizes already checked (it aborts like `vec!` if the host cannot
    /// allocate them); sizes that user input decides go through [`HostData::try_filled`].
    pub(crate) fn filled(value: Scalar, n: usize) -> HostData {
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
    /// for f64). One copy (device and host share little-endian order on every
    /// target brigade builds for).
    pub fn from_bytes(dtype: DType, bytes: &[u8]) -> HostData {
        let size = dtype.size_bytes();
        let n = bytes.len() / size * size;
        let bytes = &bytes[..n];
        match dtype {
            DType::F32 => HostData::F32(crate::host_copy::vec_from_bytes(bytes)),
            DType::I32 => HostData::I32(crate::host_copy::vec_from_bytes(bytes)),
            DType::U32 => HostData::U32(crate::host_copy::vec_from_bytes(bytes)),
            DType::Bool => HostData::Bool(
                bytes
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) != 0)
                    .collect(),
            ),
            DType::F64 => HostData::F64(crate::host_copy::vec_from_bytes(bytes)),
        }
    }
}

/// Element types that can be moved in and out of arrays.
pub trait Element: Copy + Send + Sync + 'static {
    /// The dtype of this element type.
    const DTYPE: DType;
    /// The host data holding `v`.
    fn wrap(v: Vec<Self>) -> HostData;
    /// The elements of `d` if they are of this type.
    fn unwrap(d: &HostData) -> Option<&[Self]>;
    /// Fill `dst` from device bytes (little-endian, in the device's storage layout: 4 bytes per
    /// bool); `src` holds exactly `dst.len()` elements.
    #[doc(hidden)]
    fn read_device_bytes(dst: &mut [Self], src: &[u8]);
    /// Device bytes (as for [`Element::read_device_bytes`]) viewed in place as elements, where
    /// the storage layout is the host's and `src` is aligned for `Self`; `None` otherwise.
    #[doc(hidden)]
    fn view_device_bytes(src: &[u8]) -> Option<&[Self]>;
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
            fn read_device_bytes(dst: &mut [Self], src: &[u8]) {
                // One memcpy (over threads when large): viewing `dst` as bytes needs no
                // alignment, unlike viewing `src` (mapped memory) as elements.
                crate::host_copy::copy_into(dst, src);
            }
            fn view_device_bytes(src: &[u8]) -> Option<&[Self]> {
                bytemuck::try_cast_slice(src).ok()
            }
        }
    };
}
element!(f32, F32);
element!(i32, I32);
element!(u32, U32);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn wrap(v: Vec<Self>) -> HostData {
        HostData::Bool(v)
    }
    fn unwrap(d: &HostData) -> Option<&[Self]> {
        if let HostData::Bool(v) = d {
            Some(v)
        } else {
            None
        }
    }
    fn read_device_bytes(dst: &mut [Self], src: &[u8]) {
        for (d, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
            *d = c != [0, 0, 0, 0];
        }
    }
    fn view_device_bytes(_: &[u8]) -> Option<&[Self]> {
        None // 4 bytes per bool on the device
    }
}
element!(f64, F64);

/// An array whose data lives in host memory.
#[derive(Clone, Debug, PartialEq)]
pub struct HostArray {
    /// The dimensions, outermost first (row-major).
    pub shape: Vec<usize>,
    /// The elements, row-major.
    pub data: HostData,
}

impl HostArray {
    /// Checked constructor: the data length must equal the product of `shape`
    /// ([`Error::DataLength`]; [`Error::ShapeTooLarge`] when that product overflows).
    pub fn new(shape: Vec<usize>, data: HostData) -> Result<HostArray> {
        let expected = shape_bytes("array", &shape, data.dtype())? / data.dtype().size_bytes();
        if data.len() != expected {
            return Err(Error::DataLength {
                shape,
                expected,
                got: data.len(),
            });
        }
        Ok(HostArray { shape, data })
    }
    /// The array of `shape` holding `v` (row-major); [`Error::DataLength`] when the lengths differ.
    pub fn from_vec<T: Element>(v: Vec<T>, shape: &[usize]) -> Result<HostArray> {
        HostArray::new(shape.to_vec(), T::wrap(v))
    }
    /// A rank-0 array holding `s`.
    pub fn scalar(s: Scalar) -> HostArray {
        HostArray {
            shape: vec![],
            data: HostData::filled(s, 1),
        }
    }
    /// An array of `shape` filled with `s`. Errors: [`Error::ShapeTooLarge`] when the shape's size
    /// overflows, [`Error::OutOfMemory`] (device `host`) when the host cannot allocate it.
    pub fn full(s: Scalar, shape: &[usize]) -> Result<HostArray> {
        let n = shape_bytes("full", shape, s.dtype())? / s.dtype().size_bytes();
        Ok(HostArray {
            shape: shape.to_vec(),
            data: HostData::try_filled(s, n).map_err(|e| name_shape(e, shape))?,
        })
    }
    /// [`HostArray::full`] for a shape whose size was already checked (a graph's aval after
    /// [`check_host_alloc`]); aborts like `vec!` if the host cannot allocate it.
    pub(crate) fn full_checked(s: Scalar, shape: &[usize]) -> HostArray {
        HostArray {
            shape: shape.to_vec(),
            data: HostData::filled(s, shape.iter().product()),
        }
    }
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }
    /// The number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }
    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// The bytes the elements take (4 per element, 8 for f64).
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

// ---- sizes and fallible host allocation ---------------------------------------------------------

/// Host allocations below this size are not probed: the allocator cannot refuse them in practice.
const PROBE_MIN: usize = 1 << 20;

/// The element count of `shape`, or [`Error::ShapeTooLarge`] when the product of its dimensions
/// overflows `usize` (a shape with a zero dimension has 0 elements, whatever the others are).
///
/// ```
/// use brigade::{Error, host::shape_size};
/// assert_eq!(shape_size("demo", &[2, 3]).unwrap(), 6);
/// assert_eq!(shape_size("demo", &[1 << 40, 1 << 40, 0]).unwrap(), 0);
/// assert!(matches!(shape_size("demo", &[1 << 32, 1 << 32]), Err(Error::ShapeTooLarge { .. })));
/// ```
pub fn shape_size(op: &'static str, shape: &[usize]) -> Result<usize> {
    if shape.contains(&0) {
        return Ok(0);
    }
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| Error::ShapeTooLarge {
            op,
            shape: shape.to_vec(),
            detail: format!(
                "the product of its dimensions overflows {}-bit arithmetic",
                usize::BITS
            ),
        })
}

/// The bytes an array of `shape` and `dtype` takes, or [`Error::ShapeTooLarge`] when its element
/// count overflows or its size exceeds `isize::MAX` bytes (the most any allocation can hold).
pub fn shape_bytes(op: &'static str, shape: &[usize], dtype: DType) -> Result<usize> {
    let n = shape_size(op, shape)?;
    n.checked_mul(dtype.size_bytes())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| Error::ShapeTooLarge {
            op,
            shape: shape.to_vec(),
            detail: format!(
                "{n} elements of {dtype} ({} bytes each) exceed the {} bytes one allocation may hold",
                dtype.size_bytes(),
                isize::MAX
            ),
        })
}

/// True when `bytes` is more than the host's memory and swap together (Linux: `/proc/meminfo`).
/// Such an allocation can never be filled, yet where the kernel overcommits memory it would be
/// granted and the process killed while writing it.
fn exceeds_host_memory(bytes: usize) -> bool {
    host_memory_bytes().is_some_and(|total| bytes as u64 > total)
}

/// Total memory plus swap of the host, in bytes, where the platform says (Linux).
fn host_memory_bytes() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        static TOTAL: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
        *TOTAL.get_or_init(|| {
            let info = std::fs::read_to_string("/proc/meminfo").ok()?;
            let kib = |key: &str| -> Option<u64> {
                let line = info.lines().find(|l| l.starts_with(key))?;
                line[key.len()..]
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .ok()
            };
            Some((kib("MemTotal:")? + kib("SwapTotal:").unwrap_or(0)).saturating_mul(1024))
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// The error for a host allocation of `bytes` that failed.
pub(crate) fn host_oom(bytes: usize, what: &str) -> Error {
    Error::OutOfMemory {
        device: "host".into(),
        detail: format!(
            "allocating {} ({bytes} bytes) for {what} failed{}",
            crate::device::human_bytes(bytes as u64),
            host_memory_bytes().map_or(String::new(), |t| format!(
                " (the host has {} of memory and swap)",
                crate::device::human_bytes(t)
            ))
        ),
    }
}

/// Add "of shape [..]" to a host out-of-memory error.
fn name_shape(e: Error, shape: &[usize]) -> Error {
    match e {
        Error::OutOfMemory { device, detail } => Error::OutOfMemory {
            device,
            detail: format!("{detail} (an array of shape {shape:?})"),
        },
        e => e,
    }
}

/// `n` copies of `value` in a vector allocated fallibly ([`Error::OutOfMemory`] on device `host`).
pub(crate) fn try_vec<T: Clone>(
    value: T,
    n: usize,
    what: impl FnOnce() -> String,
) -> Result<Vec<T>> {
    let bytes = n.saturating_mul(std::mem::size_of::<T>());
    if bytes >= PROBE_MIN && exceeds_host_memory(bytes) {
        return Err(host_oom(bytes, &what()));
    }
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| host_oom(bytes, &what()))?;
    v.resize(n, value);
    Ok(v)
}

/// Check, before an infallible allocation of `bytes` (a `collect`, a `vec!`), that the host can
/// give them: reserves and frees them once, so an impossible size becomes [`Error::OutOfMemory`]
/// (device `host`) instead of an abort. Small sizes are not probed.
pub(crate) fn check_host_alloc(bytes: usize, what: impl FnOnce() -> String) -> Result<()> {
    if bytes < PROBE_MIN {
        return Ok(());
    }
    if exceeds_host_memory(bytes) {
        return Err(host_oom(bytes, &what()));
    }
    let mut probe: Vec<u8> = Vec::new();
    probe
        .try_reserve_exact(bytes)
        .map_err(|_| host_oom(bytes, &what()))
}
