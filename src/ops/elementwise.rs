//! Elementwise primitives: unary and binary maps, select, cast, and the constant leaves `full`/`iota`.
//!
//! Every op here declares, in one place, its dtype rule, its CPU reference (scalar functions, exact
//! in f32 like the device, except where noted) and its WGSL lowering (an expression over operand
//! expressions). Shapes are equal for all operands: broadcasting is made explicit by the tracer with
//! `broadcast_in_dim`, as in JAX. Batching (vmap) of an elementwise op is trivially elementwise; its VJP
//! rules arrive with the `grad` transform.

use crate::dtype::{DType, Scalar};
use crate::error::{Error, Result};

/// Unary elementwise operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Relu,
    Square,
    Sign,
    Floor,
    Ceil,
    /// Round half to even, like `jnp.round` and WGSL `round`.
    Round,
    /// Logical not for bool, bitwise not for integers.
    Not,
}

/// Binary elementwise operations on operands of equal shape and dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// Float division; integer division truncates toward zero (`lax.div`). Integer x / 0 gives x (WGSL rule).
    Div,
    /// Float only. `pow(x, y)` for negative `x` is defined when `y` is an integer, NaN otherwise.
    Pow,
    Max,
    Min,
    /// Remainder with the sign of the dividend (C `fmod`, `lax.rem`). Integer x % 0 gives 0 (WGSL rule).
    Rem,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// Logical and for bool, bitwise and for integers.
    And,
    /// Logical or for bool, bitwise or for integers.
    Or,
}

impl UnaryOp {
    pub fn name(self) -> &'static str {
        use UnaryOp::*;
        match self {
            Neg => "neg",
            Abs => "abs",
            Exp => "exp",
            Log => "log",
            Sqrt => "sqrt",
            Rsqrt => "rsqrt",
            Sin => "sin",
            Cos => "cos",
            Tanh => "tanh",
            Sigmoid => "sigmoid",
            Relu => "relu",
            Square => "square",
            Sign => "sign",
            Floor => "floor",
            Ceil => "ceil",
            Round => "round",
            Not => "not",
        }
    }
    /// True for transcendental and rounding ops that only exist for floats.
    pub fn float_only(self) -> bool {
        use UnaryOp::*;
        matches!(
            self,
            Exp | Log | Sqrt | Rsqrt | Sin | Cos | Tanh | Sigmoid | Floor | Ceil | Round
        )
    }
    /// Dtype rule: the result has the operand's dtype.
    pub fn out_dtype(self, x: DType) -> Result<DType> {
        let ok = match self {
            UnaryOp::Not => matches!(x, DType::Bool | DType::I32 | DType::U32),
            op if op.float_only() => x == DType::F32,
            _ => x != DType::Bool,
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
    /// CPU reference.
    pub fn eval(self, x: Scalar) -> Scalar {
        use UnaryOp::*;
        match x {
            Scalar::F32(v) => Scalar::F32(match self {
                Neg => -v,
                Abs => v.abs(),
                Exp => v.exp(),
                Log => v.ln(),
                Sqrt => v.sqrt(),
                Rsqrt => 1.0 / v.sqrt(),
                Sin => v.sin(),
                Cos => v.cos(),
                Tanh => v.tanh(),
                Sigmoid => 1.0 / (1.0 + (-v).exp()),
                Relu => v.max(0.0),
                Square => v * v,
                Sign => {
                    if v > 0.0 {
                        1.0
                    } else if v < 0.0 {
                        -1.0
                    } else {
                        v
                    }
                }
                Floor => v.floor(),
                Ceil => v.ceil(),
                Round => v.round_ties_even(),
                Not => v,
            }),
            Scalar::I32(v) => Scalar::I32(match self {
                Neg => v.wrapping_neg(),
                Abs => v.wrapping_abs(),
                Relu => v.max(0),
                Square => v.wrapping_mul(v),
                Sign => v.signum(),
                Not => !v,
                _ => v,
            }),
            Scalar::U32(v) => Scalar::U32(match self {
                Neg => v.wrapping_neg(),
                Square => v.wrapping_mul(v),
                Sign => (v > 0) as u32,
                Not => !v,
                _ => v,
            }),
            Scalar::Bool(v) => Scalar::Bool(if self == Not { !v } else { v }),
        }
    }
    /// WGSL expression for operand expression `x` of dtype `dt`.
    pub fn wgsl(self, dt: DType, x: &str) -> String {
        use UnaryOp::*;
        match (self, dt) {
            (Neg, DType::U32) => format!("(0u - {x})"),
            (Neg, _) => format!("(-{x})"),
            (Abs, DType::U32) => x.to_string(),
            (Abs, _) => format!("abs({x})"),
            (Exp, _) => format!("exp({x})"),
            (Log, _) => format!("log({x})"),
            (Sqrt, _) => format!("sqrt({x})"),
            (Rsqrt, _) => format!("(1.0 / sqrt({x}))"),
            (Sin, _) => format!("sin({x})"),
            (Cos, _) => format!("cos({x})"),
            // tanh in WGSL overflows to NaN for large |x| on some drivers; clamp the argument (tanh(±9) is ±1 in f32).
            (Tanh, _) => format!("tanh(clamp({x}, -9.0, 9.0))"),
            (Sigmoid, _) => format!("(1.0 / (1.0 + exp(-{x})))"),
            (Relu, DType::F32) => format!("max({x}, 0.0)"),
            (Relu, DType::I32) => format!("max({x}, 0i)"),
            (Relu, _) => x.to_string(),
            (Square, _) => format!("({x} * {x})"),
            (Sign, DType::U32) => format!("select(0u, 1u, {x} > 0u)"),
            (Sign, _) => format!("sign({x})"),
            (Floor, _) => format!("floor({x})"),
            (Ceil, _) => format!("ceil({x})"),
            (Round, _) => format!("round({x})"),
            (Not, DType::Bool) => format!("(!{x})"),
            (Not, _) => format!("(~{x})"),
        }
    }
}

impl BinaryOp {
    pub fn name(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Add => "add",
            Sub => "sub",
            Mul => "mul",
            Div => "div",
            Pow => "pow",
            Max => "max",
            Min => "min",
            Rem => "rem",
            Eq => "eq",
            Ne => "ne",
            Lt => "lt",
            Le => "le",
            Gt => "gt",
            Ge => "ge",
            And => "and",
            Or => "or",
        }
    }
    pub fn is_comparison(self) -> bool {
        use BinaryOp::*;
        matches!(self, Eq | Ne | Lt | Le | Gt | Ge)
    }
    /// Dtype rule: operands share a dtype; comparisons give bool, the rest keep the dtype.
    pub fn out_dtype(self, a: DType, b: DType) -> Result<DType> {
        use BinaryOp::*;
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
        match self {
            _ if self.is_comparison() => Ok(DType::Bool),
            And | Or if a == DType::F32 => {
                bad("and/or are logical (bool) or bitwise (integers); compare first, e.g. x.gt(0)")
            }
            And | Or => Ok(a),
            Pow if a != DType::F32 => bad("cast to f32 first"),
            _ if a == DType::Bool => bad("cast the bool arrays to f32 or i32 first, or use and/or"),
            _ => Ok(a),
        }
    }
    /// CPU reference.
    pub fn eval(self, a: Scalar, b: Scalar) -> Scalar {
        use BinaryOp::*;
        if self.is_comparison() {
            let r = match (a, b) {
                (Scalar::F32(x), Scalar::F32(y)) => cmp(self, x, y),
                (Scalar::I32(x), Scalar::I32(y)) => cmp(self, x, y),
                (Scalar::U32(x), Scalar::U32(y)) => cmp(self, x, y),
                (Scalar::Bool(x), Scalar::Bool(y)) => cmp(self, x, y),
                _ => false,
            };
            return Scalar::Bool(r);
        }
        match (a, b) {
            (Scalar::F32(x), Scalar::F32(y)) => Scalar::F32(match self {
                Add => x + y,
                Sub => x - y,
                Mul => x * y,
                Div => x / y,
                Pow => pow_f32(x, y),
                Max => x.max(y),
                Min => x.min(y),
                Rem => x % y,
                _ => x,
            }),
            (Scalar::I32(x), Scalar::I32(y)) => Scalar::I32(match self {
                Add => x.wrapping_add(y),
                Sub => x.wrapping_sub(y),
                Mul => x.wrapping_mul(y),
                Div => {
                    if y == 0 || (x == i32::MIN && y == -1) {
                        x
                    } else {
                        x / y
                    }
                }
                Rem => {
                    if y == 0 || (x == i32::MIN && y == -1) {
                        0
                    } else {
                        x % y
                    }
                }
                Max => x.max(y),
                Min => x.min(y),
                And => x & y,
                Or => x | y,
                _ => x,
            }),
            (Scalar::U32(x), Scalar::U32(y)) => Scalar::U32(match self {
                Add => x.wrapping_add(y),
                Sub => x.wrapping_sub(y),
                Mul => x.wrapping_mul(y),
                Div => x.checked_div(y).unwrap_or(x),
                Rem => x.checked_rem(y).unwrap_or(0),
                Max => x.max(y),
                Min => x.min(y),
                And => x & y,
                Or => x | y,
                _ => x,
            }),
            (Scalar::Bool(x), Scalar::Bool(y)) => Scalar::Bool(match self {
                And => x && y,
                Or => x || y,
                _ => x,
            }),
            _ => a,
        }
    }
    /// WGSL expression. `helpers` collects helper functions the expression needs (emitted once per shader).
    pub fn wgsl(self, dt: DType, a: &str, b: &str, helpers: &mut Vec<&'static str>) -> String {
        use BinaryOp::*;
        match self {
            Add => format!("({a} + {b})"),
            Sub => format!("({a} - {b})"),
            Mul => format!("({a} * {b})"),
            Div | Rem if dt.is_int() => {
                helpers.push(if dt == DType::I32 {
                    INT_DIV_I32
                } else {
                    INT_DIV_U32
                });
                let f = if self == Div { "bdiv" } else { "brem" };
                format!("{f}_{}({a}, {b})", dt.wgsl())
            }
            Div => format!("({a} / {b})"),
            Rem => {
                helpers.push(FMOD_F32);
                format!("bfmod({a}, {b})")
            }
            Pow => {
                helpers.push(POW_F32);
                format!("bpow({a}, {b})")
            }
            Max => format!("max({a}, {b})"),
            Min => format!("min({a}, {b})"),
            Lt | Le | Gt | Ge if dt == DType::Bool => {
                // WGSL orders only numbers: compare bools as 0/1.
                let (a, b) = (
                    format!("select(0u, 1u, {a})"),
                    format!("select(0u, 1u, {b})"),
                );
                BinaryOp::wgsl(self, DType::U32, &a, &b, helpers)
            }
            Eq => format!("({a} == {b})"),
            Ne => format!("({a} != {b})"),
            Lt => format!("({a} < {b})"),
            Le => format!("({a} <= {b})"),
            Gt => format!("({a} > {b})"),
            Ge => format!("({a} >= {b})"),
            And if dt == DType::Bool => format!("({a} && {b})"),
            Or if dt == DType::Bool => format!("({a} || {b})"),
            And => format!("({a} & {b})"),
            Or => format!("({a} | {b})"),
        }
    }
}

fn cmp<T: PartialOrd>(op: BinaryOp, x: T, y: T) -> bool {
    match op {
        BinaryOp::Eq => x == y,
        BinaryOp::Ne => x != y,
        BinaryOp::Lt => x < y,
        BinaryOp::Le => x <= y,
        BinaryOp::Gt => x > y,
        _ => x >= y,
    }
}

/// `pow` with the sign rules of `jnp.power` for negative bases and integer exponents.
fn pow_f32(x: f32, y: f32) -> f32 {
    x.powf(y)
}

// Integer division and remainder guarded the way WGSL defines them (x / 0 = x, x % 0 = 0),
// written out so every backend agrees with the CPU reference.
const INT_DIV_I32: &str = "fn bdiv_i32(a: i32, b: i32) -> i32 { if (b == 0i || (a == i32(-2147483647 - 1) && b == -1i)) { return a; } return a / b; }
fn brem_i32(a: i32, b: i32) -> i32 { if (b == 0i || (a == i32(-2147483647 - 1) && b == -1i)) { return 0i; } return a - b * (a / b); }";
const INT_DIV_U32: &str =
    "fn bdiv_u32(a: u32, b: u32) -> u32 { if (b == 0u) { return a; } return a / b; }
fn brem_u32(a: u32, b: u32) -> u32 { if (b == 0u) { return 0u; } return a % b; }";
// Exact C fmod: subtract y·2^k for k from the exponent gap down to 0. Each subtraction is exact
// (t <= r < 2t, Sterbenz), unlike a - b*trunc(a/b), which loses the result when a/b rounds.
const FMOD_F32: &str = "fn bfmod(a: f32, b: f32) -> f32 {
    let x = abs(a);
    let y = abs(b);
    if (!(y > 0.0) || !(x <= 3.40282347e38) || !(y <= 3.40282347e38)) {
        if (y > 3.40282347e38 && x <= 3.40282347e38) { return a; }
        return bitcast<f32>(0x7fc00000u);
    }
    if (x < y) { return a; }
    var k: i32 = max(i32((bitcast<u32>(x) >> 23u) & 0xffu) - i32((bitcast<u32>(y) >> 23u) & 0xffu), 0);
    while (k > 0 && ldexp(y, k) > x) { k = k - 1; }
    while (k < 254 && ldexp(y, k + 1) <= x) { k = k + 1; }
    var r = x;
    for (var j: i32 = k; j >= 0; j = j - 1) {
        let t = ldexp(y, j);
        if (r >= t) { r = r - t; }
    }
    return select(r, -r, a < 0.0);
}";
// WGSL's pow is only defined for x >= 0; this one follows IEEE pow for the cases users meet.
const POW_F32: &str = "fn bpow(x: f32, y: f32) -> f32 {
    if (y == 0.0) { return 1.0; }
    let ax = abs(x);
    var r: f32;
    if (ax == 0.0) { r = select(bitcast<f32>(0x7f800000u), 0.0, y > 0.0); } else { r = exp2(y * log2(ax)); }
    if (x < 0.0) {
        if (floor(y) != y) { return bitcast<f32>(0x7fc00000u); }
        if (abs(y % 2.0) == 1.0) { r = -r; }
    }
    return r;
}";

/// Cast rule: every dtype converts to every other. Float → int truncates toward zero and saturates
/// (WGSL and Rust `as` agree); int → bool is `!= 0`.
pub fn cast_wgsl(from: DType, to: DType, x: &str) -> String {
    match (from, to) {
        (a, b) if a == b => x.to_string(),
        (_, DType::Bool) => match from {
            DType::F32 => format!("({x} != 0.0)"),
            DType::I32 => format!("({x} != 0i)"),
            _ => format!("({x} != 0u)"),
        },
        (DType::Bool, t) => format!(
            "select({}, {}, {x})",
            Scalar::Bool(false).cast(t).wgsl_literal(),
            Scalar::Bool(true).cast(t).wgsl_literal()
        ),
        // WGSL f32 -> u32 of a negative value saturates to 0, like Rust.
        // Saturate like Rust `as` (NaN → 0): WGSL's own conversion clamps to the nearest f32 below
        // the integer limit, e.g. 3e9 → 2147483520.
        (DType::F32, DType::I32) => format!(
            "select(select(select(i32({x}), 2147483647i, {x} >= 2147483648.0), i32(-2147483647 - 1), {x} < -2147483648.0), 0i, {x} != {x})"
        ),
        (DType::F32, DType::U32) => {
            format!("select(select(u32({x}), 4294967295u, {x} >= 4294967296.0), 0u, !({x} > 0.0))")
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
pub(crate) fn batch(
    prim: &super::Prim,
    ins: &[super::Batched],
    ctx: &super::BatchCtx<'_>,
) -> super::Batched {
    let full: Vec<crate::tensor::Tensor> =
        ins.iter().map(|b| super::with_batch(b, ctx.size)).collect();
    let refs: Vec<&crate::tensor::Tensor> = full.iter().collect();
    (crate::tensor::Tensor::apply(prim.clone(), &refs), true)
}

// ---- VJP rule -----------------------------------------------------------------------------------

/// Derivatives of the elementwise primitives (float operands; integer and bool ones get none).
pub(crate) fn vjp(
    prim: &super::Prim,
    ins: &[crate::tensor::Tensor],
    out: &crate::tensor::Tensor,
    ct: &crate::tensor::Tensor,
) -> super::Cotangents {
    use super::{Prim, zeros_like};
    use crate::tensor::Tensor;
    let float = |t: &Tensor| t.dtype() == DType::F32;
    let zero = |t: &Tensor| Tensor::zeros(t.shape(), t.dtype());
    match prim {
        Prim::Unary(op) => {
            let x = &ins[0];
            if !float(x) {
                return vec![None];
            }
            use UnaryOp::*;
            let g = match op {
                Neg => -ct,
                Abs => ct * &x.sign(),
                Exp => ct * out,
                Log => ct / x,
                Sqrt => ct / &(out * 2.0),
                // d/dx x^-1/2 = -1/2 · x^-1/2 / x
                Rsqrt => &(ct * out) * -0.5 / x,
                Sin => ct * &x.cos(),
                Cos => -(ct * &x.sin()),
                Tanh => ct * &(1.0 - out * out),
                Sigmoid => ct * &(out * &(1.0 - out)),
                Relu => x.gt(&zero(x)).where_(ct, &zero(x)),
                Square => ct * &(x * 2.0),
                Sign | Floor | Ceil | Round => zeros_like(x),
                Not => return vec![None],
            };
            vec![Some(g)]
        }
        Prim::Binary(op) => {
            let (a, b) = (&ins[0], &ins[1]);
            if !float(a) {
                return vec![None, None];
            }
            use BinaryOp::*;
            let (ga, gb) = match op {
                Add => (ct.clone(), ct.clone()),
                Sub => (ct.clone(), -ct),
                Mul => (ct * b, ct * a),
                Div => (ct / b, -(ct * out) / b),
                Pow => {
                    // d/da = b · a^(b-1); d/db = out · log a (0 where a == 0, as JAX)
                    let da = b * &a.pow(&(b - 1.0));
                    let loga = a.eq(&zero(a)).where_(&zero(a), &a.log());
                    (ct * &da, ct * &(out * &loga))
                }
                Max | Min => {
                    // The winner takes the gradient; ties split it evenly (JAX's balanced rule).
                    let wins = if *op == Max { a.gt(b) } else { a.lt(b) };
                    let half = Tensor::full(0.5f32, a.shape());
                    let ones = Tensor::full(1.0f32, a.shape());
                    let share = wins.where_(&ones, &a.eq(b).where_(&half, &zero(a)));
                    (ct * &share, ct * &(1.0 - &share))
                }
                Rem => {
                    // a - b·trunc(a/b): d/da = 1, d/db = -trunc(a/b)
                    let q = a / b;
                    let trunc = &q.sign() * &q.abs().floor();
                    (ct.clone(), -(ct * &trunc))
                }
                Eq | Ne | Lt | Le | Gt | Ge | And | Or => return vec![None, None],
            };
            vec![Some(ga), Some(gb)]
        }
        Prim::Select => {
            let (p, t) = (&ins[0], &ins[1]);
            if !float(t) {
                return vec![None, None, None];
            }
            let z = zero(ct);
            vec![None, Some(p.where_(ct, &z)), Some(p.where_(&z, ct))]
        }
        Prim::Cast(_) => {
            let x = &ins[0];
            if !float(x) {
                vec![None]
            } else if float(out) {
                vec![Some(ct.clone())]
            } else {
                vec![Some(zeros_like(x))]
            }
        }
        _ => vec![],
    }
}
