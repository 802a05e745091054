//! JAX's type promotion for brigade's dtypes, and the `jnp` binary functions that apply it.
//!
//! JAX promotes along a lattice (`jax.numpy.promote_types`): `bool → int* → {u32, i32} → i64 →
//! float* → f32 → f64`, where `int*` and `float*` are the weak types of Python scalars; the result
//! of two types is their least upper bound. With `jax_enable_x64` off (brigade's 32-bit integers)
//! the bound `i64` of `i32` and `u32` is canonicalized to `i32`. brigade's host-only `f64` sits on
//! top as in JAX's x64 mode, so any float meeting an f64 gives f64.

use super::first_error;
use crate::dtype::{DType, Scalar};
use crate::error::Error;
use crate::tensor::Tensor;

/// A type as JAX's promotion sees it: an array's dtype (strong), or the weak type of a Python
/// scalar literal (`2` is [`JaxType::WeakInt`], `2.0` is [`JaxType::WeakFloat`]). A weak type
/// gives way to any strong dtype of its kind or above: `x_i32 + 2` stays i32, `x_i32 + 2.0` is f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JaxType {
    /// The dtype of an array (or of a typed scalar such as `jnp.float32(2)`).
    Strong(DType),
    /// A Python `int`: i32 unless the other operand decides.
    WeakInt,
    /// A Python `float`: f32 unless the other operand decides.
    WeakFloat,
}

impl JaxType {
    /// The concrete dtype of a value of this type: a weak int is i32 and a weak float f32, as in
    /// JAX with `jax_enable_x64` off.
    pub fn dtype(self) -> DType {
        match self {
            JaxType::Strong(d) => d,
            JaxType::WeakInt => DType::I32,
            JaxType::WeakFloat => DType::F32,
        }
    }
    /// True for the weak types of Python scalars.
    pub fn is_weak(self) -> bool {
        !matches!(self, JaxType::Strong(_))
    }
}

impl From<DType> for JaxType {
    fn from(d: DType) -> JaxType {
        JaxType::Strong(d)
    }
}

/// The nodes of JAX's promotion lattice that brigade's types reach (`i64` only as the bound of
/// `i32` and `u32`; JAX's narrower ints and halves sit on paths that change no bound here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    B1,
    IntWeak,
    U32,
    I32,
    I64,
    FloatWeak,
    F32,
    F64,
}

impl Node {
    fn of(t: JaxType) -> Node {
        match t {
            JaxType::Strong(DType::Bool) => Node::B1,
            JaxType::Strong(DType::I32) => Node::I32,
            JaxType::Strong(DType::U32) => Node::U32,
            JaxType::Strong(DType::F32) => Node::F32,
            JaxType::Strong(DType::F64) => Node::F64,
            JaxType::WeakInt => Node::IntWeak,
            JaxType::WeakFloat => Node::FloatWeak,
        }
    }
    /// The types directly above this one.
    fn parents(self) -> &'static [Node] {
        match self {
            Node::B1 => &[Node::IntWeak],
            Node::IntWeak => &[Node::U32, Node::I32],
            Node::U32 | Node::I32 => &[Node::I64],
            Node::I64 => &[Node::FloatWeak],
            Node::FloatWeak => &[Node::F32],
            Node::F32 => &[Node::F64],
            Node::F64 => &[],
        }
    }
    /// This node and every node above it.
    fn upper_set(self) -> Vec<Node> {
        let mut out = vec![self];
        let mut k = 0;
        while k < out.len() {
            for &p in out[k].parents() {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
            k += 1;
        }
        out
    }
    /// The node as a brigade type, canonicalized as JAX does with x64 off (`i64` → `i32`).
    fn to_type(self) -> JaxType {
        match self {
            Node::B1 => JaxType::Strong(DType::Bool),
            Node::IntWeak => JaxType::WeakInt,
            Node::U32 => JaxType::Strong(DType::U32),
            Node::I32 | Node::I64 => JaxType::Strong(DType::I32),
            Node::FloatWeak => JaxType::WeakFloat,
            Node::F32 => JaxType::Strong(DType::F32),
            Node::F64 => JaxType::Strong(DType::F64),
        }
    }
}

/// `jnp.result_type(a, b)` (with `jax_enable_x64` off): the type two operands promote to, the
/// least upper bound of the two in JAX's promotion lattice. Weak types stay weak only against
/// weak types or `bool` (`2 + True` is a weak int, `2.0 + x_i32` a weak float, i.e. f32).
///
/// | | bool | i32 | u32 | f32 | int | float |
/// |---|---|---|---|---|---|---|
/// | **bool** | bool | i32 | u32 | f32 | int | float |
/// | **i32** | i32 | i32 | i32 | f32 | i32 | float |
/// | **u32** | u32 | i32 | u32 | f32 | u32 | float |
/// | **f32** | f32 | f32 | f32 | f32 | f32 | f32 |
///
/// (`int`, `float`: the weak types; with x64 off, JAX's `i64` bound of i32 and u32 is i32.) f64
/// with anything is f64, as in JAX's x64 mode.
///
/// ```
/// use brigade::DType;
/// use brigade::numpy::{JaxType, result_type};
/// assert_eq!(result_type(DType::I32, DType::F32), JaxType::Strong(DType::F32));
/// assert_eq!(result_type(DType::I32, DType::U32), JaxType::Strong(DType::I32));
/// assert_eq!(result_type(DType::I32, JaxType::WeakFloat), JaxType::WeakFloat);
/// assert_eq!(result_type(DType::F32, JaxType::WeakInt), JaxType::Strong(DType::F32));
/// ```
pub fn result_type(a: impl Into<JaxType>, b: impl Into<JaxType>) -> JaxType {
    let (ua, ub) = (
        Node::of(a.into()).upper_set(),
        Node::of(b.into()).upper_set(),
    );
    let common: Vec<Node> = ua.into_iter().filter(|n| ub.contains(n)).collect();
    // The least common upper node is the one whose own upper set holds all the others.
    let least = common
        .iter()
        .copied()
        .find(|n| {
            let up = n.upper_set();
            common.iter().all(|c| up.contains(c))
        })
        .expect("the promotion lattice has a top (f64)");
    least.to_type()
}

/// An operand of the `jnp` binary functions: an array, or a Rust literal standing for a Python
/// scalar. Integer literals are weak ints and float literals weak floats (they take the other
/// operand's dtype where it is of their kind or above); `bool` is a strong bool, as in Python.
#[derive(Clone, Copy, Debug)]
pub enum Operand<'a> {
    /// An array: its dtype is strong.
    Tensor(&'a Tensor),
    /// A Python `int` (weakly typed).
    Int(i64),
    /// A Python `float` (weakly typed).
    Float(f64),
    /// A Python `bool` (strongly typed bool).
    Bool(bool),
}

impl<'a> From<&'a Tensor> for Operand<'a> {
    fn from(t: &'a Tensor) -> Operand<'a> {
        Operand::Tensor(t)
    }
}
impl From<i32> for Operand<'_> {
    fn from(v: i32) -> Self {
        Operand::Int(v as i64)
    }
}
impl From<i64> for Operand<'_> {
    fn from(v: i64) -> Self {
        Operand::Int(v)
    }
}
impl From<u32> for Operand<'_> {
    fn from(v: u32) -> Self {
        Operand::Int(v as i64)
    }
}
impl From<f32> for Operand<'_> {
    fn from(v: f32) -> Self {
        Operand::Float(v as f64)
    }
}
impl From<f64> for Operand<'_> {
    fn from(v: f64) -> Self {
        Operand::Float(v)
    }
}
impl From<bool> for Operand<'_> {
    fn from(v: bool) -> Self {
        Operand::Bool(v)
    }
}

impl Operand<'_> {
    /// The operand's type for promotion.
    pub fn jax_type(&self) -> JaxType {
        match self {
            Operand::Tensor(t) => JaxType::Strong(t.dtype()),
            Operand::Int(_) => JaxType::WeakInt,
            Operand::Float(_) => JaxType::WeakFloat,
            Operand::Bool(_) => JaxType::Strong(DType::Bool),
        }
    }
    fn error(&self) -> Option<&Error> {
        match self {
            Operand::Tensor(t) => t.error(),
            _ => None,
        }
    }
    /// The operand as a tensor of dtype `dt`. An integer literal that `dt` cannot hold is an
    /// error, as JAX's `OverflowError` ("Python int too large to convert to int32").
    fn as_dtype(&self, op: &'static str, dt: DType) -> Tensor {
        match *self {
            Operand::Tensor(t) => t.cast(dt),
            Operand::Int(v) => {
                let fits = match dt {
                    DType::I32 => i32::try_from(v).is_ok(),
                    // JAX wraps a negative Python int for a uint32 array (`u - 1`).
                    DType::U32 => (-(1i64 << 31)..1i64 << 32).contains(&v),
                    DType::Bool | DType::F32 | DType::F64 => true,
                };
                if !fits {
                    return Tensor::failed_here(Error::BadDType {
                        op,
                        dtype: dt,
                        hint: "the integer literal does not fit this dtype (JAX raises OverflowError); use a Tensor of another dtype or a float literal",
                        shapes: vec![],
                    });
                }
                Tensor::scalar(match dt {
                    DType::I32 => Scalar::I32(v as i32),
                    DType::U32 => Scalar::U32(v as u32),
                    DType::F32 => Scalar::F32(v as f32),
                    DType::F64 => Scalar::F64(v as f64),
                    DType::Bool => Scalar::Bool(v != 0),
                })
            }
            Operand::Float(v) => Tensor::scalar(Scalar::F64(v).cast(dt)),
            Operand::Bool(v) => Tensor::scalar(Scalar::Bool(v).cast(dt)),
        }
    }
}

/// The operands' common dtype ([`result_type`] folded over them; weak types give their default).
pub fn promote_dtype(operands: &[Operand]) -> DType {
    operands
        .iter()
        .map(|o| o.jax_type())
        .reduce(result_type)
        .map(JaxType::dtype)
        .unwrap_or(DType::F32)
}

/// Every operand cast to the operands' common dtype, or the first operand's error.
pub(crate) fn promote_all<const N: usize>(
    op: &'static str,
    operands: [Operand; N],
) -> Result<[Tensor; N], Tensor> {
    if let Some(e) = operands.iter().find_map(|o| o.error()) {
        return Err(Tensor::failed(e.clone()));
    }
    let dt = promote_dtype(&operands);
    let out = operands.map(|o| o.as_dtype(op, dt));
    let refs: Vec<&Tensor> = out.iter().collect();
    if let Some(f) = first_error(&refs) {
        return Err(f);
    }
    Ok(out)
}

/// One `jnp` binary function: promote, then apply `f`, or `on_bool` when both are bool.
fn binary<'a, 'b>(
    op: &'static str,
    a: impl Into<Operand<'a>>,
    b: impl Into<Operand<'b>>,
    f: fn(&Tensor, &Tensor) -> Tensor,
    on_bool: Option<fn(&Tensor, &Tensor) -> Tensor>,
) -> Tensor {
    match promote_all(op, [a.into(), b.into()]) {
        Ok([x, y]) => match on_bool {
            Some(g) if x.dtype() == DType::Bool => g(&x, &y),
            _ => f(&x, &y),
        },
        Err(failed) => failed,
    }
}

/// `jnp.add(a, b)` with JAX's type promotion ([`result_type`]): `x_i32 + 2.5` is f32, `x_u32 + 2`
/// stays u32, `x_i32 + x_u32` is i32. Bools add as logical or, as in `jnp`.
///
/// ```
/// use brigade::{DType, Tensor, numpy as jnp};
/// let x = Tensor::from_vec(vec![1i32, 2, 3], &[3]);
/// let y = jnp::add(&x, 0.5);
/// assert_eq!(y.dtype(), DType::F32);
/// assert_eq!(y.to_vec::<f32>()?, vec![1.5, 2.5, 3.5]);
/// assert_eq!(jnp::add(&x, 2).dtype(), DType::I32);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn add<'a, 'b>(a: impl Into<Operand<'a>>, b: impl Into<Operand<'b>>) -> Tensor {
    binary("add", a, b, Tensor::add, Some(Tensor::or))
}

/// `jnp.subtract(a, b)` with JAX's type promotion. Bools are refused (as `jnp`: use `!=`).
pub fn subtract<'a, 'b>(a: impl Into<Operand<'a>>, b: impl Into<Operand<'b>>) -> Tensor {
    binary("subtract", a, b, Tensor::sub, None)
}

/// `jnp.multiply(a, b)` with JAX's type promotion; bools multiply as logical and.
pub fn multiply<'a, 'b>(a: impl Into<Operand<'a>>, b: impl Into<Operand<'b>>) -> Tensor {
    binary("multiply", a, b, Tensor::mul, Some(Tensor::and))
}

/// `jnp.true_divide(a, b)` (`jnp.divide`, `/`): promote, then divide in floating point. Integer
/// and bool operands are divided as f32 (JAX's default float), so `7 / 2 == 3.5`.
///
/// ```
/// use brigade::{Tensor, numpy as jnp};
/// let x = Tensor::from_vec(vec![7i32, -7], &[2]);
/// assert_eq!(jnp::true_divide(&x, 2).to_vec::<f32>()?, vec![3.5, -3.5]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn true_divide<'a, 'b>(a: impl Into<Operand<'a>>, b: impl Into<Operand<'b>>) -> Tensor {
    match promote_all("true_divide", [a.into(), b.into()]) {
        Ok([x, y]) if x.dtype().is_float() => x.div(&y),
        Ok([x, y]) => x.cast(DType::F32).div(&y.cast(DType::F32)),
        Err(failed) => failed,
    }
}

/// `jnp.divide`: the same as [`true_divide`].
pub fn divide<'a, 'b>(a: impl Into<Operand<'a>>, b: impl Into<Operand<'b>>) -> Tensor {
    true_divide(a, b)
}

/// `jnp.floor_divide(a, b)` (`//`) with JAX's type promotion ([`Tensor::floor_divide`]).
pub fn floor_divide<'a, 'b>(a: impl Into<Operand<'a>>, b: impl Into<Operand<'b>>) -> Tensor {
    binary("floor_divide", a, b, Tensor::floor_divide, None)
}

/// `jnp.remainder(a, b)` (`%`) with JAX's type promotion ([`Tensor::remainder`]).
pub fn remainder<'a, 'b>(a: impl Into<Operand<'a>>, b: impl Into<Operand<'b>>) -> Tensor {
    binary("remainder", a, b, Tensor::remainder, None)
}

/// `jnp.maximum(a, b)` with JAX's type promotion; NaN propagates. Bools: logical or.
pub fn maximum<'a, 'b>(a: impl Into<Operand<'a>>, b: impl Into<Operand<'b>>) -> Tensor {
    binary("maximum", a, b, Tensor::maximum, Some(Tensor::or))
}

/// `jnp.minimum(a, b)` with JAX's type promotion; NaN propagates. Bools: logical and.
pub fn minimum<'a, 'b>(a: impl Into<Operand<'a>>, b: impl Into<Operand<'b>>) -> Tensor {
    binary("minimum", a, b, Tensor::minimum, Some(Tensor::and))
}

/// `jnp.where(cond, a, b)`: `a` where the bool `cond` is true, else `b`, with `a` and `b`
/// promoted together ([`result_type`]) and all three broadcast.
///
/// ```
/// use brigade::{DType, Tensor, numpy as jnp};
/// let c = Tensor::from_vec(vec![true, false], &[2]);
/// let x = Tensor::from_vec(vec![1i32, 2], &[2]);
/// let y = jnp::where_(&c, &x, 0.5);
/// assert_eq!(y.dtype(), DType::F32);
/// assert_eq!(y.to_vec::<f32>()?, vec![1.0, 0.5]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn where_<'a, 'b>(
    cond: &Tensor,
    a: impl Into<Operand<'a>>,
    b: impl Into<Operand<'b>>,
) -> Tensor {
    if let Some(f) = first_error(&[cond]) {
        return f;
    }
    match promote_all("where", [a.into(), b.into()]) {
        Ok([x, y]) => cond.where_(&x, &y),
        Err(failed) => failed,
    }
}
