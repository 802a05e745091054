//! Elementwise primitives: unary and binary maps, select, fused multiply-add, cast, and the constant
//! leaves `full`/`iota`.
//!
//! Each unary and binary op is one row of `unary_ops!`/`binary_ops!`: its name, dtype class, CPU
//! rule per dtype (scalar functions, exact in f32 like the device, except where noted; the
//! reference interpreter and the `cpu` device's loops both call them), WGSL expression and VJP.
//! Every piece is mandatory, so a new op that lacks one does not compile. The WGSL libraries the
//! expressions call live in `shaders/lib/`. Shapes are equal for all operands: broadcasting is made
//! explicit by the tracer with `broadcast_in_dim`, as in JAX. Batching (vmap) of an elementwise op
//! is trivially elementwise.

use std::fmt;

use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};
use crate::host::{HostArray, HostData};
use crate::ops::rules::{Emitted, Lowering, Rules, single_batch, single_vjp};
use crate::ops::{BatchCtx, Batched, Cotangents, zeros_like};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Var};
use crate::wgsl::Emitter;

/// Which dtypes an elementwise op accepts, and what it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpClass {
    /// Numbers (not bool) in, the same dtype out.
    Numeric,
    /// Floats only (transcendental, rounding, `pow`), the same dtype out.
    Float,
    /// Bool (logical) or integers (bitwise), the same dtype out.
    Logical,
    /// Any dtype in (operands of one dtype), bool out: comparisons and IEEE class tests.
    Predicate,
}

/// One rule of a row: `_` where the op's class refuses the dtype (the dtype rule rejects such
/// programs before any rule runs), which expands to `$none`; otherwise the rule itself.
macro_rules! rule {
    (_, $none:expr) => {
        $none
    };
    ($rule:tt, $none:expr) => {
        $rule
    };
}

/// One scalar rule function of a row macro: `fn $name(self, args) -> $r`, an arm per row
/// (`$none` for the rows that write `_`).
macro_rules! rule_fn {
    (
        $(#[$doc:meta])* $vis:vis fn $name:ident $(<$T:ident: $bound:path>)? ($($x:ident: $t:ty),*) -> $r:ty,
        $none:expr, [$($E:ident::$V:ident => $rule:tt),*]
    ) => {
        $(#[$doc])*
        #[inline(always)]
        $vis fn $name $(<$T: $bound>)? (self, $($x: $t),*) -> $r {
            match self {
                $($E::$V => rule!($rule, $none),)*
            }
        }
    };
}

/// A row's VJP rule: `_` (not differentiable) gives no cotangent.
macro_rules! grad {
    (_) => {
        None
    };
    ($g:tt) => {{
        let g = $g;
        Some(g)
    }};
}

/// The parts every row macro generates: the enum, `ALL`, `name`, `class`, and a macro
/// (`$per`) that runs a body once per op with the op bound to a constant, for loops that must be
/// compiled per op (the `cpu` device's).
macro_rules! op_enum {
    ($d:tt $per:ident, $(#[$em:meta])* $E:ident { $( $(#[$m:meta])* $V:ident = $name:literal, $class:ident; )* }) => {
        $(#[$em])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $E {
            $( $(#[$m])* $V, )*
        }

        impl $E {
            /// Every op of the kind, in declaration order.
            pub const ALL: &'static [$E] = &[$($E::$V),*];
            /// The JAX name.
            pub fn name(self) -> &'static str {
                match self {
                    $($E::$V => $name,)*
                }
            }
            /// The dtypes it accepts and returns.
            pub fn class(self) -> OpClass {
                match self {
                    $($E::$V => OpClass::$class,)*
                }
            }
        }

        /// `(op, |o| body)`: `body` with `o` bound to the constant op, one arm per op, so that a
        /// loop in `body` is compiled for one op (the rule's `match` folds away).
        macro_rules! $per {
            ($d op:expr, |$d o:ident| $d body:expr) => {
                match $d op {
                    $($d crate::ops::elementwise::$E::$V => {
                        let $d o = $d crate::ops::elementwise::$E::$V;
                        $d body
                    })*
                }
            };
        }
        pub(crate) use $per;
    };
}

/// The unary ops, one row each: variant (with its doc), JAX name, [`OpClass`], then every rule of
/// the op, each one mandatory (`_`: the class refuses that dtype), so that a new row without a
/// rule does not compile:
/// - `float`: the f32 and f64 rule (one body, instantiated for both widths: they follow the same
///   rules; exact in f32 like the device);
/// - `i32`, `u32`, `bool`: the integer (wrapping, as XLA) and bool rules;
/// - `pred`: for the IEEE class tests, the result from `nan` and `inf` (the operand's class);
/// - `wgsl`: the WGSL expression for the operand expression `x` of dtype `dt`, pushing onto
///   `helpers` the library functions it calls (emitted once per shader);
/// - `vjp`: the operand's cotangent from the operand `x`, the result `out` and the result's
///   cotangent `ct` (float operands; `_`: not differentiable, no cotangent).
///
/// The reference interpreter and the `cpu` device's loops both call the generated functions, so
/// both paths agree bit for bit.
macro_rules! unary_ops {
    (
        $d:tt $per:ident, $(#[$em:meta])*
        pub enum $E:ident |$x:ident, $nan:ident, $inf:ident, $dt:ident, $h:ident, $out:ident, $ct:ident| {
            $(
                $(#[$m:meta])*
                $V:ident = $name:literal, $class:ident {
                    float: $f:tt, i32: $i:tt, u32: $u:tt, bool: $b:tt, pred: $p:tt,
                    wgsl: $w:expr,
                    vjp: $g:tt $(,)?
                }
            )*
        }
    ) => {
        op_enum!($d $per, $(#[$em])* $E { $( $(#[$m])* $V = $name, $class; )* });

        impl $E {
            rule_fn!(
                /// The f32 rule of a non-predicate op (exact in f32, like the device).
                pub fn eval_f32($x: f32) -> f32,
                $x, [$($E::$V => $f),*]
            );
            rule_fn!(
                /// The f64 rule of a non-predicate op (Rust's f64 functions).
                pub fn eval_f64($x: f64) -> f64,
                $x, [$($E::$V => $f),*]
            );
            rule_fn!(
                /// The i32 rule (wrapping, as XLA).
                pub fn eval_i32($x: i32) -> i32,
                $x, [$($E::$V => $i),*]
            );
            rule_fn!(
                /// The u32 rule (wrapping).
                pub fn eval_u32($x: u32) -> u32,
                $x, [$($E::$V => $u),*]
            );
            rule_fn!(
                /// The bool rule.
                pub fn eval_bool($x: bool) -> bool,
                $x, [$($E::$V => $b),*]
            );
            rule_fn!(
                /// A predicate (`is_nan`, `is_inf`, `is_finite`) of an operand of class `nan`/`inf`.
                fn pred_class($nan: bool, $inf: bool) -> bool,
                false, [$($E::$V => $p),*]
            );
            /// WGSL expression for operand expression `x` of dtype `dt`. `helpers` collects helper
            /// functions the expression needs (emitted once per shader).
            pub fn wgsl(self, $dt: DType, $x: &str, $h: &mut Vec<&'static str>) -> String {
                match self {
                    $($E::$V => $w,)*
                }
            }
            /// The operand's cotangent (`None`: not differentiable).
            fn vjp_rule(self, $x: &Tensor, $out: &Tensor, $ct: &Tensor) -> Option<Tensor> {
                match self {
                    $($E::$V => grad!($g),)*
                }
            }
        }
    };
}

/// The binary ops, one row each, like [`unary_ops!`]: `float`, `i32`, `u32`, `bool` (rules of the
/// operands `a`, `b`), `cmp` (the comparisons, on any ordered dtype: IEEE, false with a NaN but
/// for `ne`), `wgsl` (of operand expressions `a`, `b` of dtype `dt`), `vjp` (both operands'
/// cotangents from `a`, `b`, `out`, `ct`).
macro_rules! binary_ops {
    (
        $d:tt $per:ident, $(#[$em:meta])*
        pub enum $E:ident |$a:ident, $b:ident, $dt:ident, $h:ident, $out:ident, $ct:ident| {
            $(
                $(#[$m:meta])*
                $V:ident = $name:literal, $class:ident {
                    float: $f:tt, i32: $i:tt, u32: $u:tt, bool: $bo:tt, cmp: $c:tt,
                    wgsl: $w:expr,
                    vjp: $g:tt $(,)?
                }
            )*
        }
    ) => {
        op_enum!($d $per, $(#[$em])* $E { $( $(#[$m])* $V = $name, $class; )* });

        impl $E {
            rule_fn!(
                /// The f32 rule of a non-comparison op.
                pub fn eval_f32($a: f32, $b: f32) -> f32,
                $a, [$($E::$V => $f),*]
            );
            rule_fn!(
                /// The f64 rule of a non-comparison op.
                pub fn eval_f64($a: f64, $b: f64) -> f64,
                $a, [$($E::$V => $f),*]
            );
            rule_fn!(
                /// The i32 rule: wrapping, with XLA's answers for division by zero and `i32::MIN / -1`.
                pub fn eval_i32($a: i32, $b: i32) -> i32,
                $a, [$($E::$V => $i),*]
            );
            rule_fn!(
                /// The u32 rule: wrapping, x / 0 = `u32::MAX`, x % 0 = x.
                pub fn eval_u32($a: u32, $b: u32) -> u32,
                $a, [$($E::$V => $u),*]
            );
            rule_fn!(
                /// The bool rule (logical and/or).
                pub fn eval_bool($a: bool, $b: bool) -> bool,
                $a, [$($E::$V => $bo),*]
            );
            rule_fn!(
                /// A comparison (`eq` .. `ge`) of two values of one dtype (IEEE: false with a NaN, but
                /// `ne`).
                pub fn compare<T: PartialOrd>($a: T, $b: T) -> bool,
                false, [$($E::$V => $c),*]
            );
            /// WGSL expression. `helpers` collects helper functions the expression needs (emitted
            /// once per shader).
            pub fn wgsl(self, $dt: DType, $a: &str, $b: &str, $h: &mut Vec<&'static str>) -> String {
                match self {
                    $($E::$V => $w,)*
                }
            }
            /// Both operands' cotangents (`None`: not differentiable).
            fn vjp_rule(
                self,
                $a: &Tensor,
                $b: &Tensor,
                $out: &Tensor,
                $ct: &Tensor,
            ) -> Option<(Tensor, Tensor)> {
                match self {
                    $($E::$V => grad!($g),)*
                }
            }
        }
    };
}

unary_ops! {
    $ per_unary,
    /// Unary elementwise operations.
    pub enum UnaryOp |x, nan, inf, dt, helpers, out, ct| {
        Neg = "neg", Numeric {
            float: { -x }, i32: { x.wrapping_neg() }, u32: { x.wrapping_neg() }, bool: _, pred: _,
            wgsl: match dt {
                DType::U32 => format!("(0u - {x})"),
                _ => format!("(-{x})"),
            },
            vjp: { -ct },
        }
        Abs = "abs", Numeric {
            float: { x.abs() }, i32: { x.wrapping_abs() }, u32: x, bool: _, pred: _,
            wgsl: match dt {
                DType::U32 => x.to_string(),
                _ => format!("abs({x})"),
            },
            // JAX's rule: +ct where x >= 0 (so at ±0), -ct elsewhere (NaN included).
            vjp: { x.ge(&zero(x)).where_(ct, &-ct) },
        }
        Exp = "exp", Float {
            float: { x.exp() }, i32: _, u32: _, bool: _, pred: _,
            wgsl: format!("exp({x})"),
            vjp: { ct * out },
        }
        Log = "log", Float {
            float: { x.ln() }, i32: _, u32: _, bool: _, pred: _,
            // Mesa's log is off near 1 and for subnormals (shaders/lib/log.wgsl).
            wgsl: {
                helpers.push(LOG_F32);
                format!("blog({x})")
            },
            vjp: { ct / x },
        }
        Sqrt = "sqrt", Float {
            float: { x.sqrt() }, i32: _, u32: _, bool: _, pred: _,
            wgsl: format!("sqrt({x})"),
            vjp: { ct / &(out * 2.0) },
        }
        Rsqrt = "rsqrt", Float {
            float: { 1.0 / x.sqrt() }, i32: _, u32: _, bool: _, pred: _,
            wgsl: format!("(1.0 / sqrt({x}))"),
            // d/dx x^-1/2 = -1/2 · x^-1/2 / x
            vjp: { &(ct * out) * -0.5 / x },
        }
        Sin = "sin", Float {
            float: { x.sin() }, i32: _, u32: _, bool: _, pred: _,
            wgsl: format!("sin({x})"),
            vjp: { ct * &x.cos() },
        }
        Cos = "cos", Float {
            float: { x.cos() }, i32: _, u32: _, bool: _, pred: _,
            wgsl: format!("cos({x})"),
            vjp: { -(ct * &x.sin()) },
        }
        Tanh = "tanh", Float {
            float: { x.tanh() }, i32: _, u32: _, bool: _, pred: _,
            // WGSL's tanh overflows to NaN for large |x| on some drivers and costs two exps on
            // Mesa; btanh needs neither a clamp nor a second exp.
            wgsl: {
                helpers.push(TANH_F32);
                format!("btanh({x})")
            },
            vjp: { ct * &(1.0 - out * out) },
        }
        Sigmoid = "sigmoid", Float {
            float: { 1.0 / (1.0 + (-x).exp()) }, i32: _, u32: _, bool: _, pred: _,
            wgsl: format!("(1.0 / (1.0 + exp(-{x})))"),
            vjp: { ct * &(out * &(1.0 - out)) },
        }
        Relu = "relu", Numeric {
            // max(NaN, 0) is NaN and relu(-0.0) is +0.0, as jax.nn.relu.
            float: { nan_max(x, 0.0) },
            i32: { x.max(0) }, u32: x, bool: _, pred: _,
            wgsl: match dt {
                DType::F32 => format!(
                    "select(select(max({x}, 0.0), 0.0, {x} == 0.0), {x}, {})",
                    isnan_wgsl(x)
                ),
                DType::I32 => format!("max({x}, 0i)"),
                _ => x.to_string(),
            },
            vjp: { x.gt(&zero(x)).where_(ct, &zero(x)) },
        }
        Square = "square", Numeric {
            float: { x * x }, i32: { x.wrapping_mul(x) }, u32: { x.wrapping_mul(x) }, bool: _,
            pred: _,
            wgsl: format!("({x} * {x})"),
            vjp: { ct * &(x * 2.0) },
        }
        Sign = "sign", Numeric {
            float: { if x > 0.0 { 1.0 } else if x < 0.0 { -1.0 } else { x } },
            i32: { x.signum() }, u32: { (x > 0) as u32 }, bool: _, pred: _,
            wgsl: match dt {
                DType::U32 => format!("select(0u, 1u, {x} > 0u)"),
                // WGSL's sign gives +0.0 for -0.0 (Mesa); NaN and both zeros are their own sign.
                DType::F32 => format!("select(sign({x}), {x}, {} || {x} == 0.0)", isnan_wgsl(x)),
                _ => format!("sign({x})"),
            },
            vjp: { zeros_like(x) },
        }
        Floor = "floor", Float {
            float: { x.floor() }, i32: _, u32: _, bool: _, pred: _,
            wgsl: format!("floor({x})"),
            vjp: { zeros_like(x) },
        }
        Ceil = "ceil", Float {
            float: { x.ceil() }, i32: _, u32: _, bool: _, pred: _,
            wgsl: format!("ceil({x})"),
            vjp: { zeros_like(x) },
        }
        /// Round half to even, like `jnp.round` and WGSL `round`.
        Round = "round", Float {
            float: { x.round_ties_even() }, i32: _, u32: _, bool: _, pred: _,
            wgsl: format!("round({x})"),
            vjp: { zeros_like(x) },
        }
        /// Logical not for bool, bitwise not for integers.
        Not = "not", Logical {
            float: _, i32: { !x }, u32: { !x }, bool: { !x }, pred: _,
            wgsl: match dt {
                DType::Bool => format!("(!{x})"),
                _ => format!("(~{x})"),
            },
            vjp: _,
        }
        /// Inverse error function (`lax.erf_inv`), computed exactly as XLA's CPU backend does: the
        /// bits match JAX on the CPU (see [`erf_inv_f32`]). In f64 (host only): [`erf_inv_f64`].
        ErfInv = "erf_inv", Float {
            float: { ErfInvWidth::erf_inv(x) }, i32: _, u32: _, bool: _, pred: _,
            wgsl: {
                helpers.push(FMA_F32);
                helpers.push(DIV_SQRT_F32);
                helpers.push(ERF_INV_WGSL.as_str());
                format!("berfinv({x})")
            },
            // d/dx erf_inv(x) = sqrt(pi)/2 · exp(erf_inv(x)^2)
            vjp: { ct * &out.square().exp().mul_literal(std::f64::consts::PI.sqrt() / 2.0) },
        }
        /// `jnp.isnan`: a bool result, false for integers and bools. Tested by bits on devices.
        IsNan = "is_nan", Predicate {
            float: _, i32: _, u32: _, bool: _, pred: nan,
            wgsl: match dt {
                DType::F32 => isnan_wgsl(x),
                _ => "false".to_string(),
            },
            vjp: _,
        }
        /// `jnp.isinf`: ±inf; false for integers and bools.
        IsInf = "is_inf", Predicate {
            float: _, i32: _, u32: _, bool: _, pred: inf,
            wgsl: match dt {
                DType::F32 => format!("((bitcast<u32>({x}) & 0x7fffffffu) == 0x7f800000u)"),
                _ => "false".to_string(),
            },
            vjp: _,
        }
        /// `lax.is_finite`: neither NaN nor ±inf; true for integers and bools.
        IsFinite = "is_finite", Predicate {
            float: _, i32: _, u32: _, bool: _, pred: { !nan && !inf },
            wgsl: match dt {
                DType::F32 => format!("((bitcast<u32>({x}) & 0x7fffffffu) < 0x7f800000u)"),
                _ => "true".to_string(),
            },
            vjp: _,
        }
    }
}

binary_ops! {
    $ per_binary,
    /// Binary elementwise operations on operands of equal shape and dtype.
    pub enum BinaryOp |a, b, dt, helpers, out, ct| {
        Add = "add", Numeric {
            float: { a + b }, i32: { a.wrapping_add(b) }, u32: { a.wrapping_add(b) }, bool: _,
            cmp: _,
            wgsl: add_sub_wgsl('+', dt, a, b),
            vjp: { (ct.clone(), ct.clone()) },
        }
        Sub = "sub", Numeric {
            float: { a - b }, i32: { a.wrapping_sub(b) }, u32: { a.wrapping_sub(b) }, bool: _,
            cmp: _,
            wgsl: add_sub_wgsl('-', dt, a, b),
            vjp: { (ct.clone(), -ct) },
        }
        Mul = "mul", Numeric {
            float: { a * b }, i32: { a.wrapping_mul(b) }, u32: { a.wrapping_mul(b) }, bool: _,
            cmp: _,
            wgsl: format!("({a} * {b})"),
            vjp: { (ct * b, ct * a) },
        }
        /// Float division; integer division truncates toward zero (`lax.div`). Integer x / 0 gives -1
        /// (all bits set: `u32::MAX` for u32) and `i32::MIN / -1` gives `i32::MIN`, as XLA defines them.
        Div = "div", Numeric {
            float: { a / b },
            i32: { if b == 0 { -1 } else { a.wrapping_div(b) } },
            u32: { a.checked_div(b).unwrap_or(u32::MAX) },
            bool: _, cmp: _,
            wgsl: if dt.is_int() {
                int_div_wgsl("bdiv", dt, a, b, helpers)
            } else {
                format!("({a} / {b})")
            },
            vjp: { (ct / b, -(ct * out) / b) },
        }
        /// Float only. `pow(x, y)` for negative `x` is defined when `y` is an integer, NaN otherwise.
        Pow = "pow", Float {
            float: { a.powf(b) }, i32: _, u32: _, bool: _, cmp: _,
            wgsl: {
                helpers.push(POW_F32);
                format!("bpow({a}, {b})")
            },
            // d/da = b · a^(b-1); d/db = out · log a (0 where a == 0, as JAX)
            vjp: {
                let da = b * &a.pow(&(b - 1.0));
                let loga = a.eq(&zero(a)).where_(&zero(a), &a.log());
                (ct * &da, ct * &(out * &loga))
            },
        }
        Max = "max", Numeric {
            float: { nan_max(a, b) }, i32: { a.max(b) }, u32: { a.max(b) }, bool: _, cmp: _,
            wgsl: max_min_wgsl(BinaryOp::Max, dt, a, b),
            vjp: { max_min_vjp(&a.gt(b), &a.lt(b), a, b, ct) },
        }
        Min = "min", Numeric {
            float: { nan_min(a, b) }, i32: { a.min(b) }, u32: { a.min(b) }, bool: _, cmp: _,
            wgsl: max_min_wgsl(BinaryOp::Min, dt, a, b),
            vjp: { max_min_vjp(&a.lt(b), &a.gt(b), a, b, ct) },
        }
        /// Remainder with the sign of the dividend (C `fmod`, `lax.rem`). Integer x % 0 gives x and
        /// `i32::MIN % -1` gives 0, as XLA defines them.
        Rem = "rem", Numeric {
            float: { a % b },
            i32: { if b == 0 { a } else { a.wrapping_rem(b) } },
            u32: { a.checked_rem(b).unwrap_or(a) },
            bool: _, cmp: _,
            wgsl: if dt.is_int() {
                int_div_wgsl("brem", dt, a, b, helpers)
            } else {
                helpers.push(FMOD_F32);
                format!("bfmod({a}, {b})")
            },
            // a - b·trunc(a/b): d/da = 1, d/db = -trunc(a/b)
            vjp: {
                let q = a / b;
                let trunc = &q.sign() * &q.abs().floor();
                (ct.clone(), -(ct * &trunc))
            },
        }
        Eq = "eq", Predicate {
            float: _, i32: _, u32: _, bool: _, cmp: { a == b },
            wgsl: format!("({a} == {b})"),
            vjp: _,
        }
        Ne = "ne", Predicate {
            float: _, i32: _, u32: _, bool: _, cmp: { a != b },
            // Not `!=`: naga writes it as an ordered compare (false for NaN on Vulkan).
            wgsl: format!("(!({a} == {b}))"),
            vjp: _,
        }
        Lt = "lt", Predicate {
            float: _, i32: _, u32: _, bool: _, cmp: { a < b },
            wgsl: order_wgsl("<", dt, a, b),
            vjp: _,
        }
        Le = "le", Predicate {
            float: _, i32: _, u32: _, bool: _, cmp: { a <= b },
            wgsl: order_wgsl("<=", dt, a, b),
            vjp: _,
        }
        Gt = "gt", Predicate {
            float: _, i32: _, u32: _, bool: _, cmp: { a > b },
            wgsl: order_wgsl(">", dt, a, b),
            vjp: _,
        }
        Ge = "ge", Predicate {
            float: _, i32: _, u32: _, bool: _, cmp: { a >= b },
            wgsl: order_wgsl(">=", dt, a, b),
            vjp: _,
        }
        /// Logical and for bool, bitwise and for integers.
        And = "and", Logical {
            float: _, i32: { a & b }, u32: { a & b }, bool: { a && b }, cmp: _,
            wgsl: match dt {
                DType::Bool => format!("({a} && {b})"),
                _ => format!("({a} & {b})"),
            },
            vjp: _,
        }
        /// Logical or for bool, bitwise or for integers.
        Or = "or", Logical {
            float: _, i32: { a | b }, u32: { a | b }, bool: { a || b }, cmp: _,
            wgsl: match dt {
                DType::Bool => format!("({a} || {b})"),
                _ => format!("({a} | {b})"),
            },
            vjp: _,
        }
    }
}

impl UnaryOp {
    /// True for the IEEE class tests (`is_nan`, `is_inf`, `is_finite`): any dtype in, bool out.
    pub fn is_predicate(self) -> bool {
        self.class() == OpClass::Predicate
    }
    /// True for transcendental and rounding ops that only exist for floats.
    pub fn float_only(self) -> bool {
        self.class() == OpClass::Float
    }
    /// Dtype rule: the result has the operand's dtype.
    pub fn out_dtype(self, x: DType) -> Result<DType> {
        if self.is_predicate() {
            return Ok(DType::Bool);
        }
        let ok = match self.class() {
            OpClass::Logical => matches!(x, DType::Bool | DType::I32 | DType::U32),
            OpClass::Float => x.is_float(),
            OpClass::Numeric => x != DType::Bool,
            OpClass::Predicate => true,
        };
        if ok {
            Ok(x)
        } else {
            Err(Error::BadDType {
                op: self.name(),
                dtype: x,
                hint: if self == UnaryOp::Not {
                    "use it on bool or integer arrays"
                } else if self.float_only() {
                    "cast to f32 first"
                } else {
                    "cast the bool array to f32 or i32 first"
                },
                shapes: vec![],
            })
        }
    }
    /// CPU reference (f64 in f64 with Rust's f64 functions). The typed rules below are the same
    /// rules on unboxed values: the `cpu` device's loops call them, so both paths agree bit for bit.
    pub fn eval(self, x: Scalar) -> Scalar {
        if self.is_predicate() {
            return Scalar::Bool(match x {
                Scalar::F32(v) => self.pred_f32(v),
                Scalar::F64(v) => self.pred_f64(v),
                _ => self.pred_other(),
            });
        }
        match x {
            Scalar::F32(v) => Scalar::F32(self.eval_f32(v)),
            Scalar::F64(v) => Scalar::F64(self.eval_f64(v)),
            Scalar::I32(v) => Scalar::I32(self.eval_i32(v)),
            Scalar::U32(v) => Scalar::U32(self.eval_u32(v)),
            Scalar::Bool(v) => Scalar::Bool(self.eval_bool(v)),
        }
    }
    /// A predicate (`is_nan`, `is_inf`, `is_finite`) of an f32.
    #[inline(always)]
    pub fn pred_f32(self, v: f32) -> bool {
        self.pred_class(v.is_nan(), v.is_infinite())
    }
    /// A predicate of an f64.
    #[inline(always)]
    pub fn pred_f64(self, v: f64) -> bool {
        self.pred_class(v.is_nan(), v.is_infinite())
    }
    /// A predicate of an integer or bool: never NaN nor infinite.
    #[inline(always)]
    pub fn pred_other(self) -> bool {
        self.pred_class(false, false)
    }
}

impl BinaryOp {
    /// True for the comparisons (`eq` .. `ge`): bool out.
    pub fn is_comparison(self) -> bool {
        self.class() == OpClass::Predicate
    }
    /// Dtype rule: operands share a dtype; comparisons give bool, the rest keep the dtype.
    pub fn out_dtype(self, a: DType, b: DType) -> Result<DType> {
        if a != b {
            return Err(Error::DTypeMismatch {
                op: self.name(),
                lhs: a,
                rhs: b,
                shapes: vec![],
            });
        }
        let bad = |hint| {
            Err(Error::BadDType {
                op: self.name(),
                dtype: a,
                hint,
                shapes: vec![],
            })
        };
        match self.class() {
            OpClass::Predicate => Ok(DType::Bool),
            OpClass::Logical if a.is_float() => {
                bad("and/or are logical (bool) or bitwise (integers); compare first, e.g. x.gt(0)")
            }
            OpClass::Logical => Ok(a),
            OpClass::Float if !a.is_float() => bad("cast to f32 first"),
            OpClass::Float => Ok(a),
            OpClass::Numeric if a == DType::Bool => {
                bad("cast the bool arrays to f32 or i32 first, or use and/or")
            }
            OpClass::Numeric => Ok(a),
        }
    }
    /// CPU reference. The typed rules below are the same rules on unboxed values: the `cpu`
    /// device's loops call them, so both paths agree bit for bit.
    pub fn eval(self, a: Scalar, b: Scalar) -> Scalar {
        if self.is_comparison() {
            let r = match (a, b) {
                (Scalar::F32(x), Scalar::F32(y)) => self.compare(x, y),
                (Scalar::F64(x), Scalar::F64(y)) => self.compare(x, y),
                (Scalar::I32(x), Scalar::I32(y)) => self.compare(x, y),
                (Scalar::U32(x), Scalar::U32(y)) => self.compare(x, y),
                (Scalar::Bool(x), Scalar::Bool(y)) => self.compare(x, y),
                _ => false,
            };
            return Scalar::Bool(r);
        }
        match (a, b) {
            (Scalar::F32(x), Scalar::F32(y)) => Scalar::F32(self.eval_f32(x, y)),
            (Scalar::F64(x), Scalar::F64(y)) => Scalar::F64(self.eval_f64(x, y)),
            (Scalar::I32(x), Scalar::I32(y)) => Scalar::I32(self.eval_i32(x, y)),
            (Scalar::U32(x), Scalar::U32(y)) => Scalar::U32(self.eval_u32(x, y)),
            (Scalar::Bool(x), Scalar::Bool(y)) => Scalar::Bool(self.eval_bool(x, y)),
            _ => a,
        }
    }
}

/// WGSL test for NaN by its bits. Float compares cannot test it: naga's SPIR-V backend emits
/// ordered comparisons (`x != x` is false for NaN on Vulkan), and shader compilers may assume
/// that compared values are never NaN.
pub(crate) fn isnan_wgsl(x: &str) -> String {
    format!("((bitcast<u32>({x}) & 0x7fffffffu) > 0x7f800000u)")
}

/// `max`/`min` that propagate NaN like `jnp.maximum`/`lax.max` (WGSL's built-ins return the other
/// operand, or anything, for a NaN one).
pub(crate) fn max_min_wgsl(op: BinaryOp, dt: DType, a: &str, b: &str) -> String {
    let (f, bits) = if op == BinaryOp::Max {
        ("max", "&")
    } else {
        ("min", "|")
    };
    if dt == DType::F32 {
        // Equal operands (±0 included) combine their bits: max(-0, +0) = +0 and min = -0 in either
        // order, as XLA (WGSL leaves the zero's sign open; Mesa's depends on the order).
        format!(
            "select(select(select({f}({a}, {b}), bitcast<f32>(bitcast<u32>({a}) {bits} bitcast<u32>({b})), {a} == {b}), {b}, {}), {a}, {})",
            isnan_wgsl(b),
            isnan_wgsl(a)
        )
    } else {
        format!("{f}({a}, {b})")
    }
}

/// NaN-propagating maximum of the CPU reference (`jnp.maximum`): the first NaN operand wins.
pub(crate) fn nan_max<T: num_like::Float>(a: T, b: T) -> T {
    if a.is_nan_() {
        a
    } else if b.is_nan_() {
        b
    } else {
        a.max_(b)
    }
}

/// NaN-propagating minimum of the CPU reference (`jnp.minimum`).
pub(crate) fn nan_min<T: num_like::Float>(a: T, b: T) -> T {
    if a.is_nan_() {
        a
    } else if b.is_nan_() {
        b
    } else {
        a.min_(b)
    }
}

/// The two float widths, for the NaN-propagating max/min shared by the reference and collectives.
pub(crate) mod num_like {
    pub trait Float: Copy {
        fn is_nan_(self) -> bool;
        fn max_(self, o: Self) -> Self;
        fn min_(self, o: Self) -> Self;
    }
    macro_rules! float {
        ($($t:ty),*) => {$(
            impl Float for $t {
                fn is_nan_(self) -> bool {
                    self.is_nan()
                }
                // A tie of zeros is +0.0 for max and -0.0 for min, in either order (XLA's rule):
                // equal values combine their bits.
                fn max_(self, o: Self) -> Self {
                    if self == o { <$t>::from_bits(self.to_bits() & o.to_bits()) } else { self.max(o) }
                }
                fn min_(self, o: Self) -> Self {
                    if self == o { <$t>::from_bits(self.to_bits() | o.to_bits()) } else { self.min(o) }
                }
            }
        )*};
    }
    float!(f32, f64);
}

/// `a + b` or `a - b` (`op`) in WGSL. Mesa applies inexact algebraic rules (naga never asks for
/// IEEE inf/NaN preservation): `x - x` and `-x + x` become 0, wrong for inf and NaN. For f32 the
/// right operand goes through the kernel's run-time zero (`bzero`) so no compiler can prove it
/// equals the left one.
fn add_sub_wgsl(op: char, dt: DType, a: &str, b: &str) -> String {
    if dt == DType::F32 {
        format!("({a} {op} bitcast<f32>(bitcast<u32>({b}) | bzero))")
    } else {
        format!("({a} {op} {b})")
    }
}

/// Integer `div` or `rem` (`f`: `bdiv` or `brem`) in WGSL, through the library with XLA's answers.
fn int_div_wgsl(f: &str, dt: DType, a: &str, b: &str, helpers: &mut Vec<&'static str>) -> String {
    helpers.push(if dt == DType::I32 {
        INT_DIV_I32
    } else {
        INT_DIV_U32
    });
    format!("{f}_{}({a}, {b})", dt.wgsl())
}

/// An ordering comparison (`op`: `<`, `<=`, `>`, `>=`) in WGSL. WGSL orders only numbers: bools
/// are compared as 0/1.
fn order_wgsl(op: &str, dt: DType, a: &str, b: &str) -> String {
    if dt == DType::Bool {
        format!("(select(0u, 1u, {a}) {op} select(0u, 1u, {b}))")
    } else {
        format!("({a} {op} {b})")
    }
}

/// The erf_inv of each float width, so that one row body serves both.
trait ErfInvWidth {
    fn erf_inv(self) -> Self;
}

impl ErfInvWidth for f32 {
    #[inline(always)]
    fn erf_inv(self) -> f32 {
        erf_inv_f32(self)
    }
}

impl ErfInvWidth for f64 {
    #[inline(always)]
    fn erf_inv(self) -> f64 {
        erf_inv_f64(self)
    }
}
// Integer division and remainder with XLA's (and so JAX's) answers where C leaves them undefined:
// x / 0 = -1 (all bits set), x % 0 = x, i32::MIN / -1 = i32::MIN, i32::MIN % -1 = 0. Written out
// so every backend agrees with the CPU reference (WGSL's own rule is x / 0 = x, x % 0 = 0).
const INT_DIV_I32: &str = include_str!("../../shaders/lib/int_div_i32.wgsl").trim_ascii_end();
const INT_DIV_U32: &str = include_str!("../../shaders/lib/int_div_u32.wgsl").trim_ascii_end();
// Exact C fmod: subtract y·2^k for k from the exponent gap down to 0. Each subtraction is exact
// (t <= r < 2t, Sterbenz), unlike a - b*trunc(a/b), which loses the result when a/b rounds.
const FMOD_F32: &str = include_str!("../../shaders/lib/fmod.wgsl").trim_ascii_end();
// WGSL's pow is only defined for x >= 0; this one follows C/IEEE pow (as Rust's `powf` and
// `jnp.power`) in every special case: zeros and infinities by sign, NaN operands by bits
// (pow(x, ±0) = 1 and pow(1, y) = 1 even for NaN), pow(-1, ±inf) = 1, odd integer exponents
// keep the sign of a negative base.
const POW_F32: &str = include_str!("../../shaders/lib/pow.wgsl").trim_ascii_end();
// tanh with one exp and no clamp (see the file).
const TANH_F32: &str = include_str!("../../shaders/lib/tanh.wgsl").trim_ascii_end();
const LOG_F32: &str = include_str!("../../shaders/lib/log.wgsl").trim_ascii_end();

// ---- fused multiply-add and erf_inv --------------------------------------------------------------

/// WGSL `bfma(a, b, c)`: `a * b + c` rounded once (IEEE fused multiply-add, round to nearest even),
/// computed with integer arithmetic so that it is exact on every backend: WGSL's own `fma` may be
/// evaluated as a multiply and an add (software drivers do), which is not the same value.
/// The 48-bit product and the addend are aligned in 64-bit integers (two u32 words, `x` high),
/// the smaller operand shifted right with a sticky bit, and the sum rounded once. Checked against
/// Rust's `f32::mul_add` on 2·10^8 random triples (normal, subnormal, cancelling, inf/NaN).
pub(crate) const FMA_F32: &str = include_str!("../../shaders/lib/fma.wgsl").trim_ascii_end();

/// WGSL `bdiv(a, b)` and `bsqrt(x)`: f32 division and square root rounded correctly (to nearest
/// even) with integer arithmetic. WGSL allows 2.5 ULP for both and GPUs commonly approximate
/// division (llvmpipe happens to round both correctly). Long division / digit-by-digit square root
/// to 26 bits, then one rounding. Checked against Rust's `/` (3·10^8 random pairs) and `sqrt`
/// (every 7th positive f32).
pub(crate) const DIV_SQRT_F32: &str =
    include_str!("../../shaders/lib/div_sqrt.wgsl").trim_ascii_end();

// XLA's single-precision erf_inv (Giles' polynomial, as `chlo.erf_inv` decomposes it) and the log1p
// and log it calls, reproduced operation by operation as XLA's CPU backend runs them, including
// which multiply-adds the backend fuses into one rounding (written `mul_add` / `bfma`). Constants
// are the f32 bit patterns of XLA's coefficients. Checked bit for bit against `jax.lax.erf_inv` and
// `jax.random.normal` (JAX 0.10.2, CPU) on all 2^23 inputs `normal` can produce.

/// sqrt(1/2), where log's mantissa reduction switches.
const LOG_SQRT_HALF: u32 = 0x3F35_04F3;
/// Cephes' logf polynomial, evaluated as three interleaved Horner chains of three.
const LOG_P: [u32; 9] = [
    0x3D90_21BB,
    0xBDEB_D1B8,
    0x3DEF_251A,
    0xBDFE_5D4F,
    0x3E11_E9BF,
    0xBE2A_AE50,
    0x3E4C_CEAC,
    0xBE7F_FFFC,
    0x3EAA_AAAA,
];
/// ln 2 split in two: a low correction and a high part with few mantissa bits.
const LOG_LN2_LO: u32 = 0xB95E_8083;
const LOG_LN2_HI: u32 = 0x3F31_8000;
/// Below this |x| (sqrt(2) - 1), log1p uses a rational approximation instead of log(1 + x).
const LOG1P_SMALL: u32 = 0x3ED4_13CD;
const LOG1P_NUM: [u32; 7] = [
    0x383D_E04B,
    0x3EFF_40C5,
    0x40D2_84FA,
    0x41EF_4B9C,
    0x4273_CC76,
    0x4264_73AD,
    0x41A0_5101,
];
const LOG1P_DEN: [u32; 7] = [
    0x3F80_0000,
    0x4171_01AD,
    0x42A6_185B,
    0x435D_C32D,
    0x439A_8CA3,
    0x4358_6D8A,
    0x4270_7982,
];
/// Giles' erf_inv coefficients for w = -log(1 - x^2) < 5 (in w - 2.5) and >= 5 (in sqrt(w) - 3).
const ERF_INV_LT5: [u32; 9] = [
    0x32F1_6588,
    0x34B8_4B36,
    0xB66C_7357,
    0xB693_5AC1,
    0x3965_32DB,
    0xBAA4_5408,
    0xBB88_E4EF,
    0x3E7C_8F63,
    0x3FC0_2E2F,
];
const ERF_INV_GE5: [u32; 9] = [
    0xB951_F09B,
    0x38D3_B56B,
    0x3AB0_DC72,
    0xBB70_BDE7,
    0x3BBC_127B,
    0xBBF9_C5D7,
    0x3C1A_A57E,
    0x3F80_36DB,
    0x4035_4F7E,
];

fn f(bits: u32) -> f32 {
    f32::from_bits(bits)
}

/// XLA CPU's f32 `log`.
fn xla_log_f32(v: f32) -> f32 {
    if v.is_nan() || v < 0.0 {
        return f32::from_bits(u32::MAX);
    }
    if v == 0.0 {
        return f32::NEG_INFINITY;
    }
    if v == f32::INFINITY {
        return v;
    }
    let bits = v.max(f32::MIN_POSITIVE).to_bits();
    let mut e = ((bits >> 23) as i32 - 127) as f32 + 1.0;
    let m = f((bits & 0x807f_ffff) | 0x3f00_0000);
    let below = m < f(LOG_SQRT_HALF);
    let mut x = (m - 1.0) + if below { m } else { 0.0 };
    e -= if below { 1.0 } else { 0.0 };
    let (x2, p) = (x * x, LOG_P.map(f));
    let x3 = x2 * x;
    let y = x.mul_add(p[0], p[1]).mul_add(x, p[2]);
    let y1 = x.mul_add(p[3], p[4]).mul_add(x, p[5]);
    let y2 = x.mul_add(p[6], p[7]).mul_add(x, p[8]);
    let y = y.mul_add(x3, y1).mul_add(x3, y2);
    let y = y.mul_add(x3, e * f(LOG_LN2_LO));
    x = x2.mul_add(-0.5, x) + y;
    e.mul_add(f(LOG_LN2_HI), x)
}

/// XLA CPU's f32 `log1p`.
fn xla_log1p_f32(x: f32) -> f32 {
    if x.abs() < f(LOG1P_SMALL) {
        let x2 = x * x;
        let zero = x * 0.0;
        let horner = |c: &[u32; 7]| {
            c[1..]
                .iter()
                .fold(zero + f(c[0]), |a, &k| a.mul_add(x, f(k)))
        };
        let t = (x * x2) * (horner(&LOG1P_NUM) / horner(&LOG1P_DEN));
        x + x2.mul_add(-0.5, t)
    } else {
        xla_log_f32(x + 1.0)
    }
}

/// `erf_inv` bit for bit as JAX computes it on the CPU (XLA's f32 decomposition).
pub fn erf_inv_f32(x: f32) -> f32 {
    let l = xla_log1p_f32(x * -x);
    let small = l > -5.0;
    let (w, c) = if small {
        (-2.5 - l, &ERF_INV_LT5)
    } else {
        ((-l).sqrt() - 3.0, &ERF_INV_GE5)
    };
    let p = c[2..]
        .iter()
        .fold(f(c[0]).mul_add(w, f(c[1])), |p, &k| w.mul_add(p, f(k)));
    x * if x.abs() == 1.0 { f32::INFINITY } else { p }
}

/// `2 / sqrt(pi)`, the derivative of erf at 0.
const TWO_OVER_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;

/// erf(x) for `0 <= x <= 1`: `2/sqrt(pi) exp(-x^2) sum_n 2^n x^(2n+1) / (1·3···(2n+1))`, a series
/// of positive terms (no cancellation; about 25 terms at x = 1).
fn erf_series(x: f64) -> f64 {
    let x2 = x * x;
    let (mut term, mut sum) = (x, x);
    for n in 1..200 {
        term *= 2.0 * x2 / (2 * n + 1) as f64;
        sum += term;
        if term <= sum * 1e-17 {
            break;
        }
    }
    TWO_OVER_SQRT_PI * (-x2).exp() * sum
}

/// erfc(x) for `x >= 0`: `1 - erf` below 1 (erfc(1) ~ 0.16, so under 3 bits are lost), above it
/// Laplace's continued fraction `exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))`
/// evaluated with the modified Lentz method (~190 terms at x = 1, ~30 at x = 3).
fn erfc_pos(x: f64) -> f64 {
    if x < 1.0 {
        return 1.0 - erf_series(x);
    }
    let tiny = 1e-300;
    let (mut f, mut c, mut d) = (x, x, 0.0f64);
    for k in 1..1000 {
        let a = k as f64 / 2.0;
        d = x + a * d;
        d = if d == 0.0 { 1.0 / tiny } else { 1.0 / d };
        c = x + a / c;
        if c == 0.0 {
            c = tiny;
        }
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() <= 1e-16 {
            break;
        }
    }
    (-x * x).exp() / std::f64::consts::PI.sqrt() / f
}

/// `erf_inv` in double precision (the host-only f64 dtype): Newton's method on erf from the f32
/// result (or, where |y| rounds to 1 in f32, from the tail asymptote `x^2 = -ln(sqrt(pi) x (1 - y))`).
/// Above |y| = 1/2 it solves `erfc(x) = 1 - |y|` (exact in f64) so that the tail keeps its relative
/// precision. Within 4 ulps of a 40-digit reference (mpmath) on 300 points over (-1, 1), the
/// tail to 1 - 2^-53 included.
pub fn erf_inv_f64(y: f64) -> f64 {
    let a = y.abs();
    if a.is_nan() || a > 1.0 {
        return f64::NAN;
    }
    if a == 1.0 {
        return f64::INFINITY.copysign(y);
    }
    if a == 0.0 {
        return y;
    }
    let mut x = erf_inv_f32(a as f32) as f64;
    let t = 1.0 - a;
    if !x.is_finite() {
        x = (-t.ln()).sqrt();
        for _ in 0..4 {
            x = (-(t * std::f64::consts::PI.sqrt() * x).ln()).sqrt();
        }
    }
    for _ in 0..50 {
        let slope = TWO_OVER_SQRT_PI * (-x * x).exp();
        let dx = if a <= 0.5 {
            (a - erf_series(x)) / slope
        } else {
            (erfc_pos(x) - t) / slope
        };
        x += dx;
        if dx.abs() <= 1e-16 * x.abs() {
            break;
        }
    }
    x.copysign(y)
}

/// `shaders/lib/erf_inv.wgsl`: the template of [`ERF_INV_WGSL`], its constants `{{P0}}`..
/// filled from the CPU code's.
const ERF_INV_TEMPLATE: &str = include_str!("../../shaders/lib/erf_inv.wgsl").trim_ascii_end();

/// WGSL of [`erf_inv_f32`] (`berfinv`), with `bfma` where the CPU code has `mul_add` and the
/// correctly rounded `bdiv`/`bsqrt` for `/` and `sqrt`: the same bits on every device.
static ERF_INV_WGSL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let k = |b: u32| format!("bitcast<f32>({b:#010x}u)");
    let p = LOG_P.map(k);
    let horner = |c: &[u32; 7]| {
        let mut s = format!("(z + {})", k(c[0]));
        for &ci in &c[1..] {
            s = format!("bfma({s}, x, {})", k(ci));
        }
        s
    };
    let mut poly = format!(
        "bfma(select({}, {}, lt), w, select({}, {}, lt))",
        k(ERF_INV_GE5[0]),
        k(ERF_INV_LT5[0]),
        k(ERF_INV_GE5[1]),
        k(ERF_INV_LT5[1])
    );
    for i in 2..9 {
        poly = format!(
            "bfma(w, {poly}, select({}, {}, lt))",
            k(ERF_INV_GE5[i]),
            k(ERF_INV_LT5[i])
        );
    }
    let names: Vec<String> = (0..LOG_P.len()).map(|i| format!("P{i}")).collect();
    let mut pairs: Vec<(&str, String)> = names.iter().map(String::as_str).zip(p).collect();
    pairs.extend([
        ("SQH", k(LOG_SQRT_HALF)),
        ("LO", k(LOG_LN2_LO)),
        ("HI", k(LOG_LN2_HI)),
        ("SMALL", k(LOG1P_SMALL)),
        ("NUM", horner(&LOG1P_NUM)),
        ("DEN", horner(&LOG1P_DEN)),
        ("POLY", poly),
    ]);
    let pairs: Vec<(&str, &str)> = pairs.iter().map(|(n, v)| (*n, v.as_str())).collect();
    crate::wgsl::fill(ERF_INV_TEMPLATE, &pairs)
});

/// `fma(a, b, c)`: `a * b + c` with one rounding (float operands of one shape and dtype: f32, or
/// the host-only f64).
pub(crate) fn fma_infer(ins: &[&crate::trace::graph::Aval]) -> Result<crate::trace::graph::Aval> {
    for b in &ins[1..] {
        if b.shape != ins[0].shape {
            return Err(Error::ShapeMismatchBinaryOp {
                op: "fma",
                lhs: ins[0].shape.clone(),
                rhs: b.shape.clone(),
            });
        }
    }
    if let Some(b) = ins.iter().find(|a| !a.dtype.is_float()) {
        return Err(Error::BadDType {
            op: "fma",
            dtype: b.dtype,
            hint: "fma takes f32 operands: cast them first",
            shapes: vec![],
        });
    }
    if let Some(b) = ins[1..].iter().find(|a| a.dtype != ins[0].dtype) {
        return Err(Error::DTypeMismatch {
            op: "fma",
            lhs: ins[0].dtype,
            rhs: b.dtype,
            shapes: vec![],
        });
    }
    Ok(ins[0].clone())
}

/// CPU rule of `fma`.
pub(crate) fn fma_eval(a: Scalar, b: Scalar, c: Scalar) -> Scalar {
    match (a, b, c) {
        (Scalar::F32(a), Scalar::F32(b), Scalar::F32(c)) => Scalar::F32(a.mul_add(b, c)),
        (Scalar::F64(a), Scalar::F64(b), Scalar::F64(c)) => Scalar::F64(a.mul_add(b, c)),
        _ => a,
    }
}

/// Cast rule: every dtype converts to every other. Float → int truncates toward zero and saturates
/// (WGSL and Rust `as` agree); int → bool is `!= 0`.
pub fn cast_wgsl(from: DType, to: DType, x: &str) -> String {
    match (from, to) {
        (a, b) if a == b => x.to_string(),
        (_, DType::Bool) => match from {
            // NaN is true (`!= 0`): not `!=`, which naga writes as an ordered compare.
            DType::F32 => format!("(!({x} == 0.0))"),
            DType::I32 => format!("({x} != 0i)"),
            _ => format!("({x} != 0u)"),
        },
        // A float 0 from the kernel's run-time zero (see `wgsl::const_wgsl`): a literal one lets
        // compilers fold `select(0, 1, b) * inf` to `select(0, inf, b)`.
        (DType::Bool, DType::F32) => format!("select(bitcast<f32>(bzero), 1.0, {x})"),
        (DType::Bool, t) => format!(
            "select({}, {}, {x})",
            Scalar::Bool(false).cast(t).wgsl_literal(),
            Scalar::Bool(true).cast(t).wgsl_literal()
        ),
        // Saturate like Rust `as` (NaN → 0, tested by bits): WGSL's own conversion clamps to the
        // nearest f32 below the integer limit, e.g. 3e9 → 2147483520.
        (DType::F32, DType::I32) => format!(
            "select(select(select(i32({x}), 2147483647i, {x} >= 2147483648.0), i32(-2147483647 - 1), {x} < -2147483648.0), 0i, {})",
            isnan_wgsl(x)
        ),
        // WGSL f32 -> u32 of a negative value saturates to 0, like Rust; NaN gives 0 too.
        (DType::F32, DType::U32) => format!(
            "select(select(u32({x}), 4294967295u, {x} >= 4294967296.0), 0u, {x} <= 0.0 || {})",
            isnan_wgsl(x)
        ),
        // Through the run-time zero: llvmpipe GL folds `i32(f32(x))` to `x`, skipping the
        // rounding to f32 (16777217 must come back as 16777216, as in JAX).
        (DType::I32 | DType::U32, DType::F32) => {
            format!("bitcast<f32>(bitcast<u32>(f32({x})) | bzero)")
        }
        (_, t) => format!("{}({x})", t.wgsl()),
    }
}

/// `select(pred, on_true, on_false)` in WGSL (note WGSL's argument order: false value first).
pub fn select_wgsl(pred: &str, t: &str, f: &str) -> String {
    format!("select({f}, {t}, {pred})")
}

// ---- batching rule ------------------------------------------------------------------------------

/// Elementwise primitives batch by giving every operand the batch axis (broadcasting the unbatched
/// ones) and applying the same primitive: it does not care about shapes.
fn batch(op: &ElementwiseOp, ins: &[Batched], ctx: &BatchCtx<'_>) -> Batched {
    super::apply_batched(super::Prim::Elementwise(op.clone()), ins, ctx.size)
}

// ---- VJP rule -----------------------------------------------------------------------------------

/// Zeros of `t`'s shape and dtype.
fn zero(t: &Tensor) -> Tensor {
    Tensor::zeros(t.shape(), t.dtype())
}

/// The cotangents of `max`/`min`: the winner (`a_wins`, `b_wins`) takes the gradient; ties
/// split it evenly (JAX's balanced rule).
fn max_min_vjp(
    a_wins: &Tensor,
    b_wins: &Tensor,
    a: &Tensor,
    b: &Tensor,
    ct: &Tensor,
) -> (Tensor, Tensor) {
    let half = Tensor::full(Scalar::F32(0.5).cast(a.dtype()), a.shape());
    let ones = Tensor::ones(a.shape(), a.dtype());
    let tie = a.eq(b).where_(&half, &zero(a));
    // Each operand gets its own share (JAX's rule): where a NaN is involved neither operand wins
    // nor ties, and both get 0.
    let share = |wins: &Tensor| wins.where_(&ones, &tie);
    (ct * &share(a_wins), ct * &share(b_wins))
}

/// Derivatives of the elementwise primitives (float operands, f32 or f64; integer and bool ones get
/// none). Constants take the operand's dtype.
fn vjp(op: &ElementwiseOp, ins: &[Tensor], out: &Tensor, ct: &Tensor) -> Cotangents {
    let float = |t: &Tensor| t.dtype().is_float();
    match op {
        ElementwiseOp::Unary(op) => {
            let x = &ins[0];
            vec![if float(x) {
                op.vjp_rule(x, out, ct)
            } else {
                None
            }]
        }
        ElementwiseOp::Binary(op) => {
            let (a, b) = (&ins[0], &ins[1]);
            if !float(a) {
                return vec![None, None];
            }
            match op.vjp_rule(a, b, out, ct) {
                Some((ga, gb)) => vec![Some(ga), Some(gb)],
                None => vec![None, None],
            }
        }
        ElementwiseOp::Select => {
            let (p, t) = (&ins[0], &ins[1]);
            if !float(t) {
                return vec![None, None, None];
            }
            let z = zero(ct);
            vec![None, Some(p.where_(ct, &z)), Some(p.where_(&z, ct))]
        }
        ElementwiseOp::Fma => {
            let (a, b) = (&ins[0], &ins[1]);
            vec![Some(ct * b), Some(ct * a), Some(ct.clone())]
        }
        ElementwiseOp::Cast(_) => {
            let x = &ins[0];
            if !float(x) {
                vec![None]
            } else if float(out) {
                // f32 <-> f64: the cotangent goes back in the operand's dtype.
                vec![Some(ct.cast(x.dtype()))]
            } else {
                vec![Some(zeros_like(x))]
            }
        }
        // Constants have no operands.
        ElementwiseOp::Full { .. } | ElementwiseOp::Iota { .. } => vec![],
    }
}

// ---- the family -----------------------------------------------------------------------------------

/// The elementwise primitives: every operand has the result's shape (broadcasts are explicit
/// `broadcast_in_dim`s, as in JAX); `full` and `iota` have no operands.
#[derive(Clone, Debug, PartialEq)]
pub enum ElementwiseOp {
    Unary(UnaryOp),
    Binary(BinaryOp),
    /// `select(pred, on_true, on_false)`, all of one shape; pred is bool.
    Select,
    /// `fma(a, b, c)`: `a * b + c` rounded once (f32, or the host-only f64; all of one shape and
    /// dtype).
    Fma,
    Cast(DType),
    /// A constant array filled with one value.
    Full {
        value: Scalar,
        shape: Vec<usize>,
    },
    /// `0, 1, 2, ...` along `axis`, broadcast over the other axes.
    Iota {
        dtype: DType,
        shape: Vec<usize>,
        axis: usize,
    },
}

fn same_shape(op: &'static str, a: &Aval, b: &Aval) -> Result<()> {
    if a.shape != b.shape {
        return Err(Error::ShapeMismatchBinaryOp {
            op,
            lhs: a.shape.clone(),
            rhs: b.shape.clone(),
        });
    }
    Ok(())
}

impl Rules for ElementwiseOp {
    fn name(&self) -> &'static str {
        match self {
            ElementwiseOp::Unary(op) => op.name(),
            ElementwiseOp::Binary(op) => op.name(),
            ElementwiseOp::Select => "select",
            ElementwiseOp::Fma => "fma",
            ElementwiseOp::Cast(_) => "convert_element_type",
            ElementwiseOp::Full { .. } => "full",
            ElementwiseOp::Iota { .. } => "iota",
        }
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElementwiseOp::Unary(_)
            | ElementwiseOp::Binary(_)
            | ElementwiseOp::Select
            | ElementwiseOp::Fma => Ok(()),
            ElementwiseOp::Cast(t) => write!(f, "[new_dtype={t}]"),
            ElementwiseOp::Full { value, shape } => write!(f, "[value={value} shape={shape:?}]"),
            ElementwiseOp::Iota { dtype, shape, axis } => {
                write!(f, "[dtype={dtype} shape={shape:?} dimension={axis}]")
            }
        }
    }

    fn arity(&self) -> Option<usize> {
        Some(match self {
            ElementwiseOp::Full { .. } | ElementwiseOp::Iota { .. } => 0,
            ElementwiseOp::Unary(_) | ElementwiseOp::Cast(_) => 1,
            ElementwiseOp::Binary(_) => 2,
            ElementwiseOp::Select | ElementwiseOp::Fma => 3,
        })
    }

    fn result_count(&self) -> usize {
        1
    }

    fn infer(&self, ins: &[&Aval]) -> Result<Vec<Aval>> {
        let out = match self {
            ElementwiseOp::Unary(op) => {
                Aval::new(ins[0].shape.clone(), op.out_dtype(ins[0].dtype)?)
            }
            ElementwiseOp::Binary(op) => {
                same_shape(op.name(), ins[0], ins[1])?;
                Aval::new(
                    ins[0].shape.clone(),
                    op.out_dtype(ins[0].dtype, ins[1].dtype)?,
                )
            }
            ElementwiseOp::Select => {
                if ins[0].dtype != DType::Bool {
                    return Err(Error::BadDType {
                        op: "select (predicate)",
                        dtype: ins[0].dtype,
                        hint: "the predicate must be bool: compare, or cast to bool",
                        shapes: vec![],
                    });
                }
                same_shape("select", ins[0], ins[1])?;
                same_shape("select", ins[1], ins[2])?;
                if ins[1].dtype != ins[2].dtype {
                    return Err(Error::DTypeMismatch {
                        op: "select",
                        lhs: ins[1].dtype,
                        rhs: ins[2].dtype,
                        shapes: vec![],
                    });
                }
                ins[1].clone()
            }
            ElementwiseOp::Fma => fma_infer(ins)?,
            ElementwiseOp::Cast(t) => Aval::new(ins[0].shape.clone(), *t),
            ElementwiseOp::Full { value, shape } => Aval::new(shape.clone(), value.dtype()),
            ElementwiseOp::Iota { dtype, shape, axis } => {
                if *axis >= shape.len() {
                    return Err(Error::BadAxis {
                        op: "iota",
                        axis: *axis as i64,
                        rank: shape.len(),
                        shape: shape.clone(),
                    });
                }
                Aval::new(shape.clone(), *dtype)
            }
        };
        Ok(vec![out])
    }

    fn eval_cpu(&self, ins: &[&HostArray], outs: &[Aval]) -> Result<Vec<HostArray>> {
        let out = &outs[0];
        let map = |f: &dyn Fn(usize) -> Scalar| HostArray {
            shape: out.shape.clone(),
            data: HostData::from_scalars(out.dtype, (0..out.size()).map(f)),
        };
        let r = match self {
            ElementwiseOp::Unary(op) => map(&|i| op.eval(ins[0].data.get(i))),
            ElementwiseOp::Binary(op) => map(&|i| op.eval(ins[0].data.get(i), ins[1].data.get(i))),
            ElementwiseOp::Select => map(&|i| {
                if ins[0].data.get(i) == Scalar::Bool(true) {
                    ins[1].data.get(i)
                } else {
                    ins[2].data.get(i)
                }
            }),
            ElementwiseOp::Fma => {
                map(&|i| fma_eval(ins[0].data.get(i), ins[1].data.get(i), ins[2].data.get(i)))
            }
            ElementwiseOp::Cast(t) => map(&|i| ins[0].data.get(i).cast(*t)),
            ElementwiseOp::Full { value, shape } => HostArray::full_checked(*value, shape),
            ElementwiseOp::Iota { dtype, shape, axis } => {
                let st = crate::host::strides(shape);
                map(&|i| Scalar::U32(((i / st[*axis]) % shape[*axis].max(1)) as u32).cast(*dtype))
            }
        };
        Ok(vec![r])
    }

    fn lowering(&self) -> Lowering<'_> {
        match self {
            ElementwiseOp::Unary(_)
            | ElementwiseOp::Binary(_)
            | ElementwiseOp::Select
            | ElementwiseOp::Fma
            | ElementwiseOp::Cast(_) => Lowering::Elementwise,
            ElementwiseOp::Full { .. } | ElementwiseOp::Iota { .. } => Lowering::Constant,
        }
    }

    fn emit_wgsl(&self, em: &mut Emitter<'_>, ins: &[Var], idx: &[String]) -> Option<Emitted> {
        let in_dt = |em: &Emitter<'_>, k: usize| em.g.aval(ins[k]).dtype;
        Some(match self {
            ElementwiseOp::Full { value, .. } => Emitted::Value(crate::wgsl::const_wgsl(*value)),
            ElementwiseOp::Iota { dtype, axis, .. } => {
                Emitted::Value(cast_wgsl(DType::U32, *dtype, &idx[*axis]))
            }
            ElementwiseOp::Unary(op) => {
                let a = em.value(ins[0], idx);
                let dt = in_dt(em, 0);
                Emitted::Expr(op.wgsl(dt, &a, &mut em.helpers))
            }
            ElementwiseOp::Binary(op) => {
                let a = em.value(ins[0], idx);
                let b = em.value(ins[1], idx);
                let dt = in_dt(em, 0);
                Emitted::Expr(op.wgsl(dt, &a, &b, &mut em.helpers))
            }
            ElementwiseOp::Select => {
                let p = em.value(ins[0], idx);
                let a = em.value(ins[1], idx);
                let b = em.value(ins[2], idx);
                Emitted::Expr(select_wgsl(&p, &a, &b))
            }
            ElementwiseOp::Fma => {
                let a = em.value(ins[0], idx);
                let b = em.value(ins[1], idx);
                let c = em.value(ins[2], idx);
                em.helpers.push(FMA_F32);
                Emitted::Expr(format!("bfma({a}, {b}, {c})"))
            }
            ElementwiseOp::Cast(t) => {
                let a = em.value(ins[0], idx);
                let dt = in_dt(em, 0);
                Emitted::Expr(cast_wgsl(dt, *t, &a))
            }
        })
    }

    fn batch(&self, ins: &[Batched], ctx: &BatchCtx<'_>) -> Result<Vec<Batched>> {
        single_batch(batch(self, ins, ctx))
    }

    fn vjp(&self, ins: &[Tensor], outs: &[Tensor], cts: &[Option<Tensor>]) -> Result<Cotangents> {
        single_vjp(ins, cts, |ct| vjp(self, ins, &outs[0], ct))
    }

    fn has_effect(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod table_tests {
    use super::*;

    /// Every WGSL library of the family (`shaders/lib/`) parses and validates with naga, with the
    /// libraries it calls.
    #[test]
    fn shader_libraries_are_naga_valid() {
        use crate::wgsl::assert_library_valid as check;
        check("fma", &[FMA_F32]);
        check("div_sqrt", &[DIV_SQRT_F32]);
        check("int_div_i32", &[INT_DIV_I32]);
        check("int_div_u32", &[INT_DIV_U32]);
        check("fmod", &[FMOD_F32]);
        check("pow", &[POW_F32]);
        check("tanh", &[TANH_F32]);
        check("log", &[LOG_F32]);
        check("erf_inv", &[FMA_F32, DIV_SQRT_F32, ERF_INV_WGSL.as_str()]);
    }

    /// The rows are the registry: names are unique, and every op's class agrees with its dtype
    /// rule on f32 and bool.
    #[test]
    fn every_row_has_a_unique_name_and_a_consistent_class() {
        let mut names: Vec<&str> = UnaryOp::ALL.iter().map(|o| o.name()).collect();
        names.extend(BinaryOp::ALL.iter().map(|o| o.name()));
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate op names: {names:?}");
        assert_eq!(UnaryOp::ALL.len(), 21);
        assert_eq!(BinaryOp::ALL.len(), 16);
        for &op in UnaryOp::ALL {
            let (f, b) = (op.out_dtype(DType::F32), op.out_dtype(DType::Bool));
            match op.class() {
                OpClass::Numeric => assert!(f.is_ok() && b.is_err(), "{op:?}"),
                OpClass::Float => assert!(f.is_ok() && op.out_dtype(DType::I32).is_err()),
                OpClass::Logical => assert!(f.is_err() && b.is_ok(), "{op:?}"),
                OpClass::Predicate => assert_eq!(b.ok(), Some(DType::Bool), "{op:?}"),
            }
        }
        for &op in BinaryOp::ALL {
            let f = op.out_dtype(DType::F32, DType::F32);
            let b = op.out_dtype(DType::Bool, DType::Bool);
            match op.class() {
                OpClass::Numeric => assert!(f.is_ok() && b.is_err(), "{op:?}"),
                OpClass::Float => {
                    assert!(f.is_ok() && op.out_dtype(DType::I32, DType::I32).is_err())
                }
                OpClass::Logical => assert!(f.is_err() && b.is_ok(), "{op:?}"),
                OpClass::Predicate => assert_eq!(f.ok(), Some(DType::Bool), "{op:?}"),
            }
        }
    }
}
