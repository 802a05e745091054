//! Elementwise ops: unary math, casts, binary arithmetic and comparisons (with jnp's promotion
//! of mixed dtypes and broadcasting), and `select`.

use crate::dtype::{DType, Scalar};
use crate::error::Error;
use crate::ops::{BinaryOp, ElementwiseOp, Prim, UnaryOp};
use crate::tensor::{Repr, Tensor, broadcast_shapes};

impl Tensor {
    pub(super) fn unary(&self, op: UnaryOp) -> Tensor {
        // Like jnp: transcendental ops on integers/bools compute in f32.
        if op.float_only() && !self.dtype().is_float() && self.error().is_none() {
            return self.cast(DType::F32).unary(op);
        }
        Tensor::apply(Prim::Elementwise(ElementwiseOp::Unary(op)), &[self])
    }
    /// `-x`.
    pub fn neg(&self) -> Tensor {
        self.unary(UnaryOp::Neg)
    }
    /// `|x|`.
    pub fn abs(&self) -> Tensor {
        self.unary(UnaryOp::Abs)
    }
    /// `e^x`.
    pub fn exp(&self) -> Tensor {
        self.unary(UnaryOp::Exp)
    }
    /// The natural logarithm (within 2 ULP on every device).
    pub fn log(&self) -> Tensor {
        self.unary(UnaryOp::Log)
    }
    /// The square root.
    pub fn sqrt(&self) -> Tensor {
        self.unary(UnaryOp::Sqrt)
    }
    /// `1 / sqrt(x)`.
    pub fn rsqrt(&self) -> Tensor {
        self.unary(UnaryOp::Rsqrt)
    }
    /// The sine.
    pub fn sin(&self) -> Tensor {
        self.unary(UnaryOp::Sin)
    }
    /// The cosine.
    pub fn cos(&self) -> Tensor {
        self.unary(UnaryOp::Cos)
    }
    /// The hyperbolic tangent.
    pub fn tanh(&self) -> Tensor {
        self.unary(UnaryOp::Tanh)
    }
    /// The logistic function `1 / (1 + e^-x)`.
    pub fn sigmoid(&self) -> Tensor {
        self.unary(UnaryOp::Sigmoid)
    }
    /// `max(x, 0)`; `relu(NaN)` is NaN, as `jax.nn.relu`.
    pub fn relu(&self) -> Tensor {
        self.unary(UnaryOp::Relu)
    }
    /// `x * x`.
    pub fn square(&self) -> Tensor {
        self.unary(UnaryOp::Square)
    }
    /// -1, 0 or 1 as `x` is negative, zero or positive (a signed zero keeps its sign).
    pub fn sign(&self) -> Tensor {
        self.unary(UnaryOp::Sign)
    }
    /// Rounds toward negative infinity.
    pub fn floor(&self) -> Tensor {
        self.unary(UnaryOp::Floor)
    }
    /// Rounds toward positive infinity.
    pub fn ceil(&self) -> Tensor {
        self.unary(UnaryOp::Ceil)
    }
    /// Round half to even.
    pub fn round(&self) -> Tensor {
        self.unary(UnaryOp::Round)
    }
    /// Logical not (bool) or bitwise not (integers).
    pub fn not(&self) -> Tensor {
        self.unary(UnaryOp::Not)
    }
    /// `jnp.isnan`: true where the element is NaN (bool result; false for integers and bools).
    /// Tested by the bits on devices, so it holds on every backend. No derivative.
    pub fn is_nan(&self) -> Tensor {
        Tensor::apply(
            Prim::Elementwise(ElementwiseOp::Unary(UnaryOp::IsNan)),
            &[self],
        )
    }
    /// `jnp.isinf`: true where the element is +inf or -inf (false for integers and bools).
    pub fn is_inf(&self) -> Tensor {
        Tensor::apply(
            Prim::Elementwise(ElementwiseOp::Unary(UnaryOp::IsInf)),
            &[self],
        )
    }
    /// `jnp.isfinite`: true where the element is neither NaN nor ±inf (true for integers and bools).
    pub fn is_finite(&self) -> Tensor {
        Tensor::apply(
            Prim::Elementwise(ElementwiseOp::Unary(UnaryOp::IsFinite)),
            &[self],
        )
    }
    /// `jnp.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf)`: NaN becomes `nan`, +inf
    /// `posinf` and -inf `neginf` (`None`: the dtype's largest / most negative finite value, as
    /// JAX). Values take this tensor's dtype; integer and bool tensors are returned unchanged.
    /// Its derivative passes the cotangent where `x` is finite and is 0 elsewhere.
    pub fn nan_to_num(&self, nan: f64, posinf: Option<f64>, neginf: Option<f64>) -> Tensor {
        let dt = self.dtype();
        if !dt.is_float() || self.error().is_some() {
            return self.clone();
        }
        let (hi, lo) = match dt {
            DType::F64 => (f64::MAX, f64::MIN),
            _ => (f32::MAX as f64, f32::MIN as f64),
        };
        let lit = |v: f64| Tensor::scalar(Scalar::F64(v).cast(dt));
        let nan_free = self.is_nan().where_(&lit(nan), self);
        // ±inf found by bits; the sign tells which replacement applies.
        let negative = self.lt(&lit(0.0));
        let inf_value = negative.where_(&lit(neginf.unwrap_or(lo)), &lit(posinf.unwrap_or(hi)));
        self.is_inf().where_(&inf_value, &nan_free)
    }
    /// [`Tensor::nan_to_num`] with JAX's defaults: NaN → 0, +inf → the dtype's max, -inf → its min.
    pub fn nan_to_num_default(&self) -> Tensor {
        self.nan_to_num(0.0, None, None)
    }
    /// Convert to another dtype (float → int truncates toward zero and saturates).
    pub fn cast(&self, dtype: DType) -> Tensor {
        if self.dtype() == dtype && self.error().is_none() {
            return self.clone();
        }
        Tensor::apply(Prim::Elementwise(ElementwiseOp::Cast(dtype)), &[self])
    }

    /// Broadcast both operands to a common shape (NumPy rules) and apply a binary op.
    pub(crate) fn binary(&self, op: BinaryOp, other: &Tensor) -> Tensor {
        if let Some(e) = self.error().or(other.error()) {
            return Tensor::failed(e.clone());
        }
        if let Some(e) = self.stale(op.name()).or_else(|| other.stale(op.name())) {
            return Tensor::failed_here(e);
        }
        let shape = match broadcast_shapes(op.name(), self.shape(), other.shape()) {
            Ok(s) => s,
            Err(e) => return self.fail_with(e),
        };
        // jnp.maximum/minimum of bools are or/and (True > False).
        let op = match (op, self.dtype(), other.dtype()) {
            (BinaryOp::Max, DType::Bool, DType::Bool) => BinaryOp::Or,
            (BinaryOp::Min, DType::Bool, DType::Bool) => BinaryOp::And,
            _ => op,
        };
        let [a, b] = Tensor::promote_floats([self, other]);
        let [a, b] = Tensor::align([&a, &b]);
        let (a, b) = (a.broadcast_to(&shape), b.broadcast_to(&shape));
        Tensor::apply(Prim::Elementwise(ElementwiseOp::Binary(op)), &[&a, &b])
    }
    /// When any operand is traced, bring concrete operands into that trace first, so that their
    /// broadcasts are recorded in the graph instead of running eagerly.
    pub(crate) fn align<const N: usize>(ts: [&Tensor; N]) -> [Tensor; N] {
        let trace = ts
            .iter()
            .find_map(|t| match &*t.repr {
                Repr::Traced { trace, .. } => Some(trace.clone()),
                _ => None,
            })
            .or_else(crate::trace::tracer::current);
        ts.map(|t| match (&*t.repr, &trace) {
            (Repr::Concrete(a), Some(tr)) => match tr.lift(a) {
                Ok(v) => Tensor::traced(tr.clone(), v, a.aval().clone()),
                Err(e) => Tensor::failed(e),
            },
            _ => t.clone(),
        })
    }
    /// JAX's dtype promotion between floats of two widths, as with `jax_enable_x64`: when one
    /// operand is f32 and another f64, the f32 ones are cast to f64. Other mixes are left alone
    /// (the primitive reports them as a dtype mismatch).
    pub(crate) fn promote_floats<const N: usize>(ts: [&Tensor; N]) -> [Tensor; N] {
        let wide = ts
            .iter()
            .any(|t| t.dtype() == DType::F64 && t.error().is_none());
        ts.map(|t| {
            if wide && t.dtype() == DType::F32 && t.error().is_none() {
                t.cast(DType::F64)
            } else {
                t.clone()
            }
        })
    }
    /// A binary op with a scalar that takes this tensor's dtype (JAX's weak typing of literals).
    ///
    /// As in JAX, a float literal with an integer or bool tensor promotes the computation to f32
    /// (`x_i32 / 2.0` is true division); an integer literal takes the tensor's dtype. With an f64
    /// tensor, an f32 literal is widened exactly (`x_f64 * 0.1` multiplies by `0.1f32 as f64`).
    pub(super) fn binary_scalar(&self, op: BinaryOp, v: f64, scalar_on_left: bool) -> Tensor {
        self.binary_literal(op, Scalar::F32(v as f32), scalar_on_left)
    }
    /// `self * v` with `v` weakly typed: rounded to f32 for f32 tensors, exact for f64 ones.
    pub(crate) fn mul_literal(&self, v: f64) -> Tensor {
        self.binary_literal(BinaryOp::Mul, Scalar::F64(v), false)
    }
    pub(super) fn binary_literal(&self, op: BinaryOp, lit: Scalar, scalar_on_left: bool) -> Tensor {
        let x = if lit.dtype().is_float() && !self.dtype().is_float() && self.error().is_none() {
            self.cast(DType::F32)
        } else {
            self.clone()
        };
        let Some(v) = Scalar::F32(0.0).cast(x.dtype()).with_f64(lit.as_f64()) else {
            return x.fail_with(Error::BadDType {
                op: "binary op with a literal",
                dtype: x.dtype(),
                hint: "the integer literal does not fit this dtype (JAX raises OverflowError); use a Tensor of another dtype or a float literal",
                shapes: vec![x.shape().to_vec()],
            });
        };
        let s = Tensor::scalar(v);
        let this = &x;
        if scalar_on_left {
            s.binary(op, this)
        } else {
            this.binary(op, &s)
        }
    }
    /// Record `e` in the trace of `self` (if any) and return a failed tensor.
    pub(crate) fn fail_with(&self, e: Error) -> Tensor {
        if let Repr::Traced { trace, .. } = &*self.repr {
            trace.fail(e.clone());
        }
        Tensor::failed(e)
    }
    /// `self + o`, broadcasting (as the `+` operator).
    pub fn add(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::Add, o)
    }
    /// `self - o`, broadcasting (as the `-` operator).
    pub fn sub(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::Sub, o)
    }
    /// `self * o`, broadcasting (as the `*` operator).
    pub fn mul(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::Mul, o)
    }
    /// Float division, or integer division truncating toward zero.
    pub fn div(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::Div, o)
    }
    /// `self` to the power `o`, broadcasting (C's `pow` at the edges).
    pub fn pow(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::Pow, o)
    }
    /// `self ** v` for a scalar exponent.
    pub fn powf(&self, v: f32) -> Tensor {
        self.binary_scalar(BinaryOp::Pow, v as f64, false)
    }
    /// Elementwise maximum; NaN propagates (`jnp.maximum`: a NaN operand gives NaN). Bools: or.
    pub fn maximum(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::Max, o)
    }
    /// Elementwise minimum; NaN propagates (`jnp.minimum`). Bools: and.
    pub fn minimum(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::Min, o)
    }
    /// Remainder with the sign of the dividend (C fmod).
    pub fn rem(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::Rem, o)
    }
    /// Floor division with Python's (and `jnp.floor_divide`'s, `//`'s) rounding: toward minus
    /// infinity, where [`Tensor::div`] (`lax.div`) truncates toward zero. `-7 // 2 == -4`.
    /// Computed from `div` and `rem` with `jnp`'s own formulas, so edge cases agree with JAX too
    /// (an integer divisor of 0 gives `div`'s -1, less one where the dividend is non-zero).
    ///
    /// ```
    /// use brigade::Tensor;
    /// let a = Tensor::from_vec(vec![-7i32, 7, -7, 7], &[4]);
    /// let b = Tensor::from_vec(vec![2i32, 2, -2, -2], &[4]);
    /// assert_eq!(a.floor_divide(&b).to_vec::<i32>()?, vec![-4, 3, 3, -4]);
    /// assert_eq!(a.remainder(&b).to_vec::<i32>()?, vec![1, 1, -1, -1]);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn floor_divide(&self, o: &Tensor) -> Tensor {
        let dt = self.dtype();
        let zero = Tensor::zeros(&[], dt);
        let one = Tensor::ones(&[], dt);
        if dt.is_float() {
            // jnp's float divmod (CPython's float_divmod): divide the exact multiple a - rem(a, b)
            // (a itself where b is 0, so that 5 // 0 is inf), then step down where the
            // truncated remainder's sign is not the divisor's.
            let r = self.rem(o);
            let num = o.eq(&zero).where_(self, &(self - &r));
            let q = num.div(o);
            let fix = r.ne(&zero).and(&o.sign().ne(&r.sign()));
            return fix.where_(&(&q - &one), &q).round();
        }
        let q = self.div(o);
        if dt != DType::I32 {
            // Unsigned (and bool, which div refuses with its own error): truncation is flooring.
            return q;
        }
        let fix = self.sign().ne(&o.sign()).and(&self.rem(o).ne(&zero));
        fix.where_(&(&q - &one), &q)
    }
    /// Remainder with the sign of the divisor (Python's `%`, `jnp.remainder`), where
    /// [`Tensor::rem`] (`lax.rem`, C's `fmod`) takes the dividend's. `-7 % 2 == 1`. An integer
    /// divisor of 0 gives 0, as in `jnp`.
    pub fn remainder(&self, o: &Tensor) -> Tensor {
        let dt = self.dtype();
        let zero = Tensor::zeros(&[], dt);
        // jnp divides integers by 1 where the divisor is 0.
        let o = if dt.is_int() {
            o.eq(&zero).where_(&Tensor::ones(&[], dt), o)
        } else {
            o.clone()
        };
        let r = self.rem(&o);
        let fix = r.lt(&zero).ne(&o.lt(&zero)).and(&r.ne(&zero));
        fix.where_(&(&r + &o), &r)
    }
    /// `self == o` elementwise, a bool tensor.
    pub fn eq(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::Eq, o)
    }
    /// Not equal: true where either operand is NaN (IEEE), on every backend.
    pub fn ne(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::Ne, o)
    }
    /// `self < o` elementwise, a bool tensor.
    pub fn lt(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::Lt, o)
    }
    /// `self <= o` elementwise, a bool tensor.
    pub fn le(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::Le, o)
    }
    /// `self > o` elementwise, a bool tensor.
    pub fn gt(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::Gt, o)
    }
    /// `self >= o` elementwise, a bool tensor.
    pub fn ge(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::Ge, o)
    }
    /// Logical and (bool) or bitwise and (integers).
    pub fn and(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::And, o)
    }
    /// Logical or (bool) or bitwise or (integers).
    pub fn or(&self, o: &Tensor) -> Tensor {
        self.binary(BinaryOp::Or, o)
    }
    /// `where(self, on_true, on_false)`: `self` is the bool predicate; all three broadcast.
    pub fn where_(&self, on_true: &Tensor, on_false: &Tensor) -> Tensor {
        select(self, on_true, on_false)
    }
}

impl Scalar {
    /// A scalar of the same dtype holding `v` (converted).
    /// `v` (an integer value when `self` is an integer) as a scalar of `self`'s dtype, the way
    /// JAX converts a Python int for an array of that dtype: u32 takes [-2^31, 2^32) and wraps
    /// (`u - 1` subtracts one), i32 takes i32's range; `None` outside (JAX's `OverflowError`).
    pub(crate) fn with_f64(self, v: f64) -> Option<Scalar> {
        Some(match self {
            Scalar::F32(_) => Scalar::F32(v as f32),
            Scalar::I32(_) if (-2f64.powi(31)..2f64.powi(31)).contains(&v) => Scalar::I32(v as i32),
            Scalar::U32(_) if (-2f64.powi(31)..2f64.powi(32)).contains(&v) => {
                Scalar::U32(v as i64 as u32)
            }
            Scalar::I32(_) | Scalar::U32(_) => return None,
            Scalar::Bool(_) => Scalar::Bool(v != 0.0),
            Scalar::F64(_) => Scalar::F64(v),
        })
    }
}

/// `select(pred, on_true, on_false)` with broadcasting (JAX's `jnp.where`).
pub fn select(pred: &Tensor, on_true: &Tensor, on_false: &Tensor) -> Tensor {
    for t in [pred, on_true, on_false] {
        if let Some(e) = t.error() {
            return Tensor::failed(e.clone());
        }
    }
    let shape = match broadcast_shapes("select", pred.shape(), on_true.shape())
        .and_then(|s| broadcast_shapes("select", &s, on_false.shape()))
    {
        Ok(s) => s,
        Err(e) => return pred.fail_with(e),
    };
    let [t, f] = Tensor::promote_floats([on_true, on_false]);
    let [p, t, f] = Tensor::align([pred, &t, &f]);
    let (p, t, f) = (
        p.broadcast_to(&shape),
        t.broadcast_to(&shape),
        f.broadcast_to(&shape),
    );
    Tensor::apply(Prim::Elementwise(ElementwiseOp::Select), &[&p, &t, &f])
}
