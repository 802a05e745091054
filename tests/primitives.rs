//! Every primitive on every GPU device (lavapipe and llvmpipe GL), against the CPU reference.
//!
//! Tolerances (see `common::Tol`):
//! - integer and bool results: exact, always;
//! - f32 layout ops, select, casts, neg/abs/relu/sign/floor/ceil/round, min/max, comparisons: exact
//!   (`Tol::EXACT`, only the sign of zero is ignored);
//! - f32 add/sub/mul/div/square/rem: `Tol::ARITH`, 1e-5 relative + 1e-6 absolute (WGSL allows 2.5 ULP
//!   for division; add/sub/mul are correctly rounded);
//! - f32 exp/log/sqrt/rsqrt/sin/cos/tanh/sigmoid/pow: `Tol::TRANS`, 1e-5 relative + 1e-6 absolute.
//!   WGSL only promises 3 + 2|x| ULP for exp, 3 ULP (2^-21 absolute near 1) for log and 2^-11
//!   absolute for sin/cos; measured on lavapipe/llvmpipe: exp 3 ULP on [-3, 3] growing to 3.8e-6
//!   relative at |x| = 88 (~4.3e-8·|x|), log 2.2e-7 absolute near 1, sin/cos/sqrt/rsqrt < 1 ULP,
//!   tanh 1.4e-7 absolute, pow 6.3e-7 relative (details at `Tol::TRANS`);
//! - reductions, matmul, softmax: `Tol::REDUCE` (1e-4 relative + 1e-4 absolute): f32 accumulation of up
//!   to a few hundred terms against the f64-accumulating reference. The 100 000-element sums use
//!   positive inputs so the relative bound is meaningful.
//!
//! f64 is host-only (GPU devices refuse it, see tests/errors.rs): the last section runs it on the
//! cpu device against Rust f64 arithmetic, exactly, or within 1e-14 relative for sums taken in
//! another order.

mod common;

use brigade::ops::{DotDims, ElementwiseOp, Prim};
use brigade::{Array, Aval, DType, Graph, HostArray, HostData, Scalar, Tensor, select};
use common::*;

type UnaryFn = fn(&Tensor) -> Tensor;

fn f32_arr(v: &[f32], shape: &[usize]) -> Array {
    Array::from_vec(v.to_vec(), shape).unwrap()
}
fn i32_arr(v: &[i32], shape: &[usize]) -> Array {
    Array::from_vec(v.to_vec(), shape).unwrap()
}
fn u32_arr(v: &[u32], shape: &[usize]) -> Array {
    Array::from_vec(v.to_vec(), shape).unwrap()
}
fn bool_arr(v: &[bool], shape: &[usize]) -> Array {
    Array::from_vec(v.to_vec(), shape).unwrap()
}

/// Random values with some special ones written over the first elements.
fn with_specials(shape: &[usize], seed: u64, lo: f32, hi: f32, specials: &[f32]) -> Array {
    let mut v = f32s(numel(shape), seed, lo, hi);
    for (d, s) in v.iter_mut().zip(specials) {
        *d = *s;
    }
    f32_arr(&v, shape)
}

fn unary(op: UnaryFn) -> impl Fn(&[Tensor]) -> Vec<Tensor> {
    move |x: &[Tensor]| vec![op(&x[0])]
}
fn binary(op: BinaryFn) -> impl Fn(&[Tensor]) -> Vec<Tensor> {
    move |x: &[Tensor]| vec![op(&x[0], &x[1])]
}

// ---- unary --------------------------------------------------------------------------------------

/// Ops defined on all reals, with their tolerance.
const UNARY_ALL_REALS: &[(&str, UnaryFn, Tol)] = &[
    ("neg", Tensor::neg, Tol::EXACT),
    ("abs", Tensor::abs, Tol::EXACT),
    ("exp", Tensor::exp, Tol::TRANS),
    ("sin", Tensor::sin, Tol::TRANS),
    ("cos", Tensor::cos, Tol::TRANS),
    ("tanh", Tensor::tanh, Tol::TRANS),
    ("sigmoid", Tensor::sigmoid, Tol::TRANS),
    ("relu", Tensor::relu, Tol::EXACT),
    ("square", Tensor::square, Tol::ARITH),
    ("sign", Tensor::sign, Tol::EXACT),
    ("floor", Tensor::floor, Tol::EXACT),
    ("ceil", Tensor::ceil, Tol::EXACT),
    ("round", Tensor::round, Tol::EXACT),
];

/// Ops that need positive inputs.
const UNARY_POSITIVE: &[(&str, UnaryFn, Tol)] = &[
    ("log", Tensor::log, Tol::TRANS),
    ("sqrt", Tensor::sqrt, Tol::TRANS),
    ("rsqrt", Tensor::rsqrt, Tol::TRANS),
];

#[test]
fn unary_f32_on_all_reals() {
    let specials = [
        0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1.0, -1.0, 2.0, -3.0,
    ];
    for &(name, op, tol) in UNARY_ALL_REALS {
        for (shape, x) in [
            (
                vec![4usize, 5],
                with_specials(&[4, 5], 11, -3.0, 3.0, &specials),
            ),
            (vec![], rand_f32(&[], 12)),
            (vec![1, 1], rand_f32(&[1, 1], 13)),
            (vec![0, 3], rand_f32(&[0, 3], 14)),
        ] {
            eprintln!("{name} {shape:?}");
            check_on_all(unary(op), &[x], tol);
        }
    }
}

#[test]
fn unary_f32_on_positive_inputs() {
    for &(name, op, tol) in UNARY_POSITIVE {
        for (shape, x) in [
            (
                vec![4usize, 5],
                with_specials(
                    &[4, 5],
                    21,
                    0.1,
                    4.0,
                    &[1.0, 4.0, 0.25, 1e-3, 1e3, 12345.0, 2.0],
                ),
            ),
            (vec![], rand_pos(&[], 22)),
            (vec![0], rand_pos(&[0], 23)),
        ] {
            eprintln!("{name} {shape:?}");
            check_on_all(unary(op), &[x], tol);
        }
    }
}

#[test]
fn unary_f32_edge_values() {
    // Round is half to even; floor/ceil of exact integers and of negatives; tanh and sigmoid
    // saturate without NaN for large |x|; exp underflows to 0.
    let x = f32_arr(
        &[
            0.5,
            1.5,
            2.5,
            3.5,
            -0.5,
            -1.5,
            -2.5,
            0.499_999_97,
            -0.499_999_97,
            3.7,
            -3.7,
            8_388_609.0,
            -8_388_609.0,
            20.0,
            -20.0,
            100.0,
            -100.0,
            1e30,
            -1e30,
            0.0,
        ],
        &[20],
    );
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].round(), t[0].floor(), t[0].ceil(), t[0].sign()],
        std::slice::from_ref(&x),
        Tol::EXACT,
    );
    assert_f32s(
        &got[0],
        &[
            0.0,
            2.0,
            2.0,
            4.0,
            -0.0,
            -2.0,
            -2.0,
            0.0,
            -0.0,
            4.0,
            -4.0,
            8_388_609.0,
            -8_388_609.0,
            20.0,
            -20.0,
            100.0,
            -100.0,
            1e30,
            -1e30,
            0.0,
        ],
        Tol::EXACT,
        "round (host)",
    );
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].tanh(), t[0].sigmoid()],
        std::slice::from_ref(&x),
        Tol::TRANS,
    );
    let xs = host(&x).to_vec::<f32>().unwrap();
    assert_f32s(
        &got[0],
        &xs.iter().map(|v| v.tanh()).collect::<Vec<_>>(),
        Tol::TRANS,
        "tanh (host)",
    );
    assert_f32s(
        &got[1],
        &xs.iter()
            .map(|v| 1.0 / (1.0 + (-v).exp()))
            .collect::<Vec<_>>(),
        Tol::TRANS,
        "sigmoid (host)",
    );
    let e = f32_arr(&[-100.0, -80.0, -10.0, 0.0, 10.0, 80.0], &[6]);
    check_on_all(unary(Tensor::exp), &[e], Tol::TRANS);
    let z = f32_arr(&[0.0, 1.0, 4.0, 1e-30, 1e30], &[5]);
    check_on_all(|t: &[Tensor]| vec![t[0].sqrt()], &[z], Tol::TRANS);
}

#[test]
fn unary_integer_ops() {
    let i = i32_arr(
        &[
            0,
            1,
            -1,
            7,
            -7,
            46_341,
            -46_341,
            i32::MAX,
            i32::MIN,
            123,
            -123,
            2,
        ],
        &[3, 4],
    );
    for (name, op) in [
        ("neg", Tensor::neg as UnaryFn),
        ("abs", Tensor::abs),
        ("relu", Tensor::relu),
        ("square", Tensor::square),
        ("sign", Tensor::sign),
        ("not", Tensor::not),
    ] {
        eprintln!("i32 {name}");
        check_on_all(unary(op), std::slice::from_ref(&i), Tol::EXACT);
        check_on_all(unary(op), &[rand_i32(&[], 31, -9, 9)], Tol::EXACT);
    }
    let u = u32_arr(&[0, 1, 2, 7, 65_536, 65_537, u32::MAX, 1 << 31], &[8]);
    for (name, op) in [
        ("neg", Tensor::neg as UnaryFn),
        ("abs", Tensor::abs),
        ("relu", Tensor::relu),
        ("square", Tensor::square),
        ("sign", Tensor::sign),
        ("not", Tensor::not),
    ] {
        eprintln!("u32 {name}");
        check_on_all(unary(op), std::slice::from_ref(&u), Tol::EXACT);
    }
    let b = bool_arr(&[true, false, false, true, true], &[5]);
    check_on_all(unary(Tensor::not), &[b], Tol::EXACT);
    check_on_all(unary(Tensor::not), &[rand_bool(&[0, 2], 1)], Tol::EXACT);
}

#[test]
fn float_only_unary_ops_promote_integers_to_f32() {
    let i = i32_arr(&[1, 2, 3, 4, 9, 16], &[2, 3]);
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].sqrt(), t[0].exp(), t[0].log(), t[0].floor()],
        &[i],
        Tol::TRANS,
    );
    assert!(got.iter().all(|h| h.dtype() == DType::F32));
    assert_f32s(
        &got[0],
        &[1.0, std::f32::consts::SQRT_2, 3f32.sqrt(), 2.0, 3.0, 4.0],
        Tol::TRANS,
        "sqrt of i32",
    );
    let b = bool_arr(&[true, false], &[2]);
    check_on_all(|t: &[Tensor]| vec![t[0].exp()], &[b], Tol::TRANS);
}

// ---- binary ---------------------------------------------------------------------------------------

const BINARY_F32: &[(&str, BinaryFn, Tol)] = &[
    ("add", Tensor::add, Tol::ARITH),
    ("sub", Tensor::sub, Tol::ARITH),
    ("mul", Tensor::mul, Tol::ARITH),
    ("div", Tensor::div, Tol::ARITH),
    ("max", Tensor::maximum, Tol::EXACT),
    ("min", Tensor::minimum, Tol::EXACT),
    ("rem", Tensor::rem, Tol::ARITH),
    ("eq", Tensor::eq, Tol::EXACT),
    ("ne", Tensor::ne, Tol::EXACT),
    ("lt", Tensor::lt, Tol::EXACT),
    ("le", Tensor::le, Tol::EXACT),
    ("gt", Tensor::gt, Tol::EXACT),
    ("ge", Tensor::ge, Tol::EXACT),
];

/// Shape pairs that broadcast (NumPy rules), including size-0, size-1 and rank-0 operands.
const BROADCAST_PAIRS: &[(&[usize], &[usize])] = &[
    (&[4, 5], &[4, 5]),
    (&[3, 4], &[4]),
    (&[2, 1, 3], &[4, 1]),
    (&[], &[2, 3]),
    (&[2, 3], &[]),
    (&[], &[]),
    (&[0, 3], &[1, 3]),
    (&[5, 1], &[1, 5]),
    (&[1], &[3, 1, 2]),
];

#[test]
fn binary_f32_every_op() {
    for &(name, op, tol) in BINARY_F32 {
        eprintln!("{name}");
        // Ties for the comparisons and min/max: equal values in a few places.
        let mut a = f32s(12, 41, -3.0, 3.0);
        let b = f32s(4, 42, -3.0, 3.0);
        a[1] = b[1];
        a[6] = b[2];
        check_on_all(binary(op), &[f32_arr(&a, &[3, 4]), f32_arr(&b, &[4])], tol);
        check_on_all(binary(op), &[rand_f32(&[], 43), rand_f32(&[2, 3], 44)], tol);
    }
}

#[test]
fn binary_f32_broadcasting_pairs() {
    for &(a, b) in BROADCAST_PAIRS {
        eprintln!("{a:?} {b:?}");
        check_on_all(
            binary(Tensor::add),
            &[rand_f32(a, 51), rand_f32(b, 52)],
            Tol::ARITH,
        );
        check_on_all(
            |t: &[Tensor]| vec![t[0].mul(&t[1]), t[1].lt(&t[0])],
            &[rand_f32(a, 53), rand_f32(b, 54)],
            Tol::ARITH,
        );
    }
}

#[test]
fn pow_f32() {
    // Positive bases with any exponent.
    check_on_all(
        binary(Tensor::pow),
        &[rand_pos(&[3, 4], 61), rand_f32(&[4], 62)],
        Tol::TRANS,
    );
    // Negative bases: defined (with the sign of the odd power) for integer exponents, NaN otherwise;
    // zero bases; zero exponents.
    let base = [
        -2.0, -2.0, -2.0, -2.0, -1.5, -3.0, 0.0, 0.0, 0.0, 2.0, -2.0, 5.0, 1.0, 0.5,
    ];
    let expo = [
        3.0, 2.0, -3.0, 0.5, -2.0, 0.0, 2.0, -1.0, 0.0, 10.0, 10.0, -1.0, 1e6, 3.5,
    ];
    let got = check_on_all(
        binary(Tensor::pow),
        &[f32_arr(&base, &[14]), f32_arr(&expo, &[14])],
        Tol::TRANS,
    );
    let want: Vec<f32> = base.iter().zip(&expo).map(|(b, e)| b.powf(*e)).collect();
    assert_f32s(&got[0], &want, Tol::TRANS, "pow (host powf)");
    // powf with a scalar exponent.
    check_on_all(
        |t: &[Tensor]| vec![t[0].powf(2.0), t[0].powf(-0.5), t[0].abs().powf(1.5)],
        &[rand_pos(&[5], 63)],
        Tol::TRANS,
    );
}

#[test]
fn rem_f32_has_the_sign_of_the_dividend() {
    let a = [7.5, -7.5, 7.5, -7.5, 1.0, -1.0, 5.25, 0.0, 3.0, -3.0];
    let b = [2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 0.5, 1.0, 1.5, 1.5];
    let got = check_on_all(
        binary(Tensor::rem),
        &[f32_arr(&a, &[10]), f32_arr(&b, &[10])],
        Tol::ARITH,
    );
    assert_f32s(
        &got[0],
        &[1.5, -1.5, 1.5, -1.5, 1.0, -1.0, 0.25, 0.0, 0.0, -0.0],
        Tol::ARITH,
        "rem (host)",
    );
}

/// i32 pairs covering truncating division by negative numbers, division by zero (XLA's rule:
/// x / 0 = -1, x % 0 = x), i32::MIN / -1 (= MIN, remainder 0) and wrapping overflow.
fn i32_pairs() -> (Array, Array) {
    let a = [
        7,
        -7,
        7,
        -7,
        0,
        5,
        -5,
        i32::MIN,
        i32::MIN,
        i32::MAX,
        i32::MAX,
        i32::MIN,
        1,
        -1,
        13,
        -13,
        100,
        46_341,
        6,
        -6,
    ];
    let b = [
        2, 2, -2, -2, 3, 0, 0, -1, 1, 1, -1, -1, 0, 3, 5, -5, 7, 46_341, -4, 4,
    ];
    (i32_arr(&a, &[4, 5]), i32_arr(&b, &[4, 5]))
}

#[test]
fn binary_i32_every_op() {
    let (a, b) = i32_pairs();
    // `rem` also has its own sign test below.
    for &(name, op) in &INT_BINARY_OPS {
        eprintln!("i32 {name}");
        check_on_all(binary(op), &[a.clone(), b.clone()], Tol::EXACT);
        // Broadcast a row of divisors (negative, zero) against a random matrix.
        check_on_all(
            binary(op),
            &[
                rand_i32(&[3, 4], 71, -50, 50),
                i32_arr(&[-3, 0, 2, -1], &[4]),
            ],
            Tol::EXACT,
        );
    }
    // The division rules, spelled out: truncation toward zero, x / 0 = -1, MIN / -1 = MIN.
    let got = check_on_all(|t: &[Tensor]| vec![t[0].div(&t[1])], &[a, b], Tol::EXACT);
    assert_eq!(
        got[0].to_vec::<i32>().unwrap(),
        vec![
            3,
            -3,
            -3,
            3,
            0,
            -1,
            -1,
            i32::MIN,
            i32::MIN,
            i32::MAX,
            -i32::MAX,
            i32::MIN,
            -1,
            0,
            2,
            2,
            14,
            1,
            -1,
            -1
        ]
    );
}

#[test]
fn rem_i32_has_the_sign_of_the_dividend() {
    // lax.rem / C: -7 % 2 = -1, 7 % -2 = 1; x % 0 = x (XLA); MIN % -1 = 0.
    let (a, b) = i32_pairs();
    let got = check_on_all(|t: &[Tensor]| vec![t[0].rem(&t[1])], &[a, b], Tol::EXACT);
    assert_eq!(
        got[0].to_vec::<i32>().unwrap(),
        vec![
            1, -1, 1, -1, 0, 5, -5, 0, 0, 0, 0, 0, 1, -1, 3, -3, 2, 0, 2, -2
        ]
    );
    check_on_all(
        binary(Tensor::rem),
        &[
            rand_i32(&[3, 4], 72, -50, 50),
            i32_arr(&[-3, 0, 2, -1], &[4]),
        ],
        Tol::EXACT,
    );
    let got = check_on_all(
        |t: &[Tensor]| vec![&t[0] % 4],
        &[i32_arr(&[7, -7, 9, 0], &[4])],
        Tol::EXACT,
    );
    assert_eq!(got[0].to_vec::<i32>().unwrap(), vec![3, -3, 1, 0]);
}

#[test]
fn binary_u32_every_op() {
    let a = u32_arr(
        &[7, 0, 5, u32::MAX, u32::MAX, 1 << 31, 100, 3, 65_536, 9],
        &[10],
    );
    let b = u32_arr(&[2, 3, 0, 1, 2, 1 << 31, 7, 0, 65_536, 10], &[10]);
    for &(name, op) in &INT_BINARY_OPS {
        eprintln!("u32 {name}");
        check_on_all(binary(op), &[a.clone(), b.clone()], Tol::EXACT);
    }
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].div(&t[1]), t[0].rem(&t[1]), t[1].sub(&t[0])],
        &[a, b],
        Tol::EXACT,
    );
    assert_eq!(
        got[0].to_vec::<u32>().unwrap(),
        vec![
            3,
            0,
            u32::MAX,
            u32::MAX,
            u32::MAX / 2,
            1,
            14,
            u32::MAX,
            1,
            0
        ]
    );
    assert_eq!(
        got[1].to_vec::<u32>().unwrap(),
        vec![1, 0, 5, 0, 1, 0, 2, 3, 0, 9]
    );
}

#[test]
fn binary_bool_logic_and_equality() {
    let a = bool_arr(&[true, true, false, false], &[4]);
    let b = bool_arr(&[true, false, true, false], &[4]);
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].and(&t[1]),
                t[0].or(&t[1]),
                t[0].eq(&t[1]),
                t[0].ne(&t[1]),
            ]
        },
        &[a, b],
        Tol::EXACT,
    );
    assert_eq!(
        got[0].to_vec::<bool>().unwrap(),
        vec![true, false, false, false]
    );
    assert_eq!(
        got[1].to_vec::<bool>().unwrap(),
        vec![true, true, true, false]
    );
    check_on_all(
        binary(Tensor::and),
        &[rand_bool(&[2, 3], 81), rand_bool(&[3], 82)],
        Tol::EXACT,
    );
}

#[test]
fn binary_bool_ordering() {
    // Comparisons are defined for every dtype (false < true, as in NumPy and the reference).
    let a = bool_arr(&[true, true, false, false], &[4]);
    let b = bool_arr(&[true, false, true, false], &[4]);
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].lt(&t[1]),
                t[0].le(&t[1]),
                t[0].gt(&t[1]),
                t[0].ge(&t[1]),
            ]
        },
        &[a, b],
        Tol::EXACT,
    );
    assert_eq!(
        got[0].to_vec::<bool>().unwrap(),
        vec![false, false, true, false]
    );
}

#[test]
fn scalar_operands_take_the_tensor_dtype() {
    let x = rand_f32(&[2, 3], 91);
    check_on_all(
        |t: &[Tensor]| {
            vec![
                &t[0] + 2.0,
                2.0 - &t[0],
                &t[0] * -1.5,
                &t[0] / 4.0,
                3.0 / &t[0],
                &t[0] % 1.25,
                -&t[0],
            ]
        },
        &[x],
        Tol::ARITH,
    );
    // JAX's weak typing: an integer literal takes the tensor's dtype (7 / 2 = 3), a float literal
    // promotes an integer tensor to f32 (7 / 2.0 = 3.5).
    let i = i32_arr(&[7, -7, 9, 0], &[4]);
    let got = check_on_all(
        |t: &[Tensor]| vec![&t[0] / 2, &t[0] * 3, 10 - &t[0], &t[0] / 2.0, &t[0] * 0.5],
        &[i],
        Tol::EXACT,
    );
    assert_eq!(got[0].dtype(), DType::I32);
    assert_eq!(got[0].to_vec::<i32>().unwrap(), vec![3, -3, 4, 0]);
    assert_eq!(got[2].to_vec::<i32>().unwrap(), vec![3, 17, 1, 10]);
    assert_eq!(got[3].dtype(), DType::F32);
    assert_eq!(got[3].to_vec::<f32>().unwrap(), vec![3.5, -3.5, 4.5, 0.0]);
    assert_eq!(got[4].to_vec::<f32>().unwrap(), vec![3.5, -3.5, 4.5, 0.0]);
}

// ---- select -------------------------------------------------------------------------------------

#[test]
fn select_and_where_broadcast() {
    // Predicate computed in the kernel, scalars on either side.
    check_on_all(
        |t: &[Tensor]| {
            vec![select(
                &t[0].gt(&Tensor::scalar(0.0f32)),
                &t[0],
                &Tensor::scalar(-1.0f32),
            )]
        },
        &[rand_f32(&[3, 4], 101)],
        Tol::EXACT,
    );
    // Broadcast predicate (4,), on_true (3,4), on_false (3,1).
    check_on_all(
        |t: &[Tensor]| vec![t[0].where_(&t[1], &t[2])],
        &[
            rand_bool(&[4], 102),
            rand_f32(&[3, 4], 103),
            rand_f32(&[3, 1], 104),
        ],
        Tol::EXACT,
    );
    // Every dtype as values, a rank-0 predicate and size-0 operands.
    for dt in [DType::I32, DType::U32, DType::Bool, DType::F32] {
        check_on_all(
            |t: &[Tensor]| vec![select(&t[0], &t[1], &t[2])],
            &[
                rand_bool(&[2, 3], 105),
                rand_of(dt, &[2, 3], 106),
                rand_of(dt, &[3], 107),
            ],
            Tol::EXACT,
        );
    }
    check_on_all(
        |t: &[Tensor]| vec![select(&t[0], &t[1], &t[2])],
        &[rand_bool(&[], 108), rand_f32(&[2], 109), rand_f32(&[], 110)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![select(&t[0], &t[1], &t[2])],
        &[
            rand_bool(&[0, 2], 111),
            rand_f32(&[2], 112),
            rand_f32(&[1], 113),
        ],
        Tol::EXACT,
    );
}

// ---- casts --------------------------------------------------------------------------------------

const DTYPES: [DType; 4] = [DType::F32, DType::I32, DType::U32, DType::Bool];

/// Inputs where every conversion is well defined (floats in the range of both integer types, not
/// too large to be exact in f32 after the round trip).
fn cast_input(dt: DType) -> Array {
    match dt {
        DType::F32 => f32_arr(
            &[
                0.0,
                0.3,
                1.0,
                1.7,
                2.5,
                99.99,
                65_535.9,
                1_000_000.5,
                7.0,
                3.0,
            ],
            &[2, 5],
        ),
        DType::I32 => i32_arr(
            &[0, 1, 2, 7, 100, 65_536, 1_000_000, 16_777_216, 5, 3],
            &[2, 5],
        ),
        DType::U32 => u32_arr(
            &[0, 1, 2, 7, 100, 65_536, 1_000_000, 16_777_216, 5, 3],
            &[2, 5],
        ),
        DType::Bool => bool_arr(
            &[
                true, false, true, true, false, false, true, false, true, true,
            ],
            &[2, 5],
        ),
        DType::F64 => Array::from_vec(
            vec![
                0.0,
                0.3,
                1.0,
                1.7,
                2.5,
                99.99,
                65_535.9,
                1_000_000.5,
                7.0,
                3.0,
            ],
            &[2, 5],
        )
        .unwrap(),
    }
}

#[test]
fn cast_between_every_pair_of_dtypes() {
    for from in DTYPES {
        for to in DTYPES {
            eprintln!("{from} -> {to}");
            let got = check_on_all(
                move |t: &[Tensor]| vec![t[0].cast(to)],
                &[cast_input(from)],
                Tol::EXACT,
            );
            assert_eq!(got[0].dtype(), to);
            // Fused after a computation, and on a rank-0 value.
            check_on_all(
                move |t: &[Tensor]| vec![t[0].abs().cast(to)],
                &[rand_of(
                    if from == DType::Bool {
                        DType::F32
                    } else {
                        from
                    },
                    &[],
                    121,
                )],
                Tol::EXACT,
            );
        }
    }
    // Negative values: f32 -> i32 truncates toward zero; i32 -> u32 wraps; i32 -> bool is != 0.
    let f = f32_arr(&[-0.5, -1.5, -2.7, -100.9, 3.9, -0.0], &[6]);
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].cast(DType::I32), t[0].cast(DType::Bool)],
        &[f],
        Tol::EXACT,
    );
    assert_eq!(got[0].to_vec::<i32>().unwrap(), vec![0, -1, -2, -100, 3, 0]);
    assert_eq!(
        got[1].to_vec::<bool>().unwrap(),
        vec![true, true, true, true, true, false]
    );
    let i = i32_arr(&[-1, -2, i32::MIN, i32::MAX, 0], &[5]);
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].cast(DType::U32),
                t[0].cast(DType::F32),
                t[0].cast(DType::Bool),
            ]
        },
        &[i],
        Tol::EXACT,
    );
    assert_eq!(
        got[0].to_vec::<u32>().unwrap(),
        vec![u32::MAX, u32::MAX - 1, 1 << 31, (1 << 31) - 1, 0]
    );
    let u = u32_arr(&[u32::MAX, 1 << 31, 0, 12], &[4]);
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].cast(DType::I32), t[0].cast(DType::F32)],
        &[u],
        Tol::EXACT,
    );
    assert_eq!(got[0].to_vec::<i32>().unwrap(), vec![-1, i32::MIN, 0, 12]);
}

/// Out-of-range floats: "float → int truncates toward zero and saturates" (Tensor::cast), like
/// Rust's `as` and the reference: 3e9 → i32::MAX, 5e9 → u32::MAX, -3e9 → i32::MIN, -1 → 0u.
fn saturation_inputs() -> Array {
    f32_arr(
        &[
            3e9,
            -3e9,
            1e20,
            -1e20,
            2_147_483_520.0,
            2_147_483_648.0,
            4_294_967_040.0,
            4_294_967_296.0,
            5e9,
            -1.0,
        ],
        &[10],
    )
}

#[test]
fn cast_f32_to_i32_saturates() {
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].cast(DType::I32)],
        &[saturation_inputs()],
        Tol::EXACT,
    );
    assert_eq!(
        got[0].to_vec::<i32>().unwrap(),
        vec![
            i32::MAX,
            i32::MIN,
            i32::MAX,
            i32::MIN,
            2_147_483_520,
            i32::MAX,
            i32::MAX,
            i32::MAX,
            i32::MAX,
            -1
        ]
    );
}

#[test]
fn cast_f32_to_u32_saturates() {
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].cast(DType::U32)],
        &[saturation_inputs()],
        Tol::EXACT,
    );
    assert_eq!(
        got[0].to_vec::<u32>().unwrap(),
        vec![
            3_000_000_000,
            0,
            u32::MAX,
            0,
            2_147_483_520,
            2_147_483_648,
            4_294_967_040,
            u32::MAX,
            u32::MAX,
            0
        ]
    );
}

#[test]
fn cast_int_to_float_rounds_to_nearest_even() {
    let i = i32_arr(
        &[
            16_777_217,
            16_777_219,
            -16_777_217,
            i32::MAX,
            i32::MIN,
            33_554_435,
        ],
        &[6],
    );
    let got = check_on_all(|t: &[Tensor]| vec![t[0].cast(DType::F32)], &[i], Tol::EXACT);
    assert_f32s(
        &got[0],
        &[
            16_777_216.0,
            16_777_220.0,
            -16_777_216.0,
            2_147_483_648.0,
            -2_147_483_648.0,
            33_554_436.0,
        ],
        Tol::EXACT,
        "i32 -> f32",
    );
}

// ---- constants ----------------------------------------------------------------------------------

#[test]
fn constants_full_zeros_ones_arange_iota() {
    // Built on the host, then combined with device data inside a jitted function.
    let x = rand_f32(&[2, 3], 131);
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                &t[0] + &Tensor::full(2.5f32, &[2, 3]),
                &t[0] * &Tensor::ones(&[3], DType::F32),
                t[0].add(&Tensor::zeros(&[2, 1], DType::F32)),
                t[0].add(&Tensor::iota(DType::F32, &[2, 3], 0)),
                t[0].add(&Tensor::iota(DType::F32, &[2, 3], 1)),
                Tensor::arange(5).add(&Tensor::full(1i32, &[])),
                Tensor::full(7u32, &[2, 2]),
                Tensor::full(true, &[3]).and(
                    &t[0]
                        .gt(&Tensor::scalar(0.0f32))
                        .slice(&[0, 0], &[1, 3], None)
                        .reshape(&[3]),
                ),
                Tensor::scalar(4.0f32),
            ]
        },
        std::slice::from_ref(&x),
        Tol::ARITH,
    );
    let xs = host(&x).to_vec::<f32>().unwrap();
    assert_f32s(
        &got[3],
        &xs.iter()
            .enumerate()
            .map(|(i, v)| v + (i / 3) as f32)
            .collect::<Vec<_>>(),
        Tol::ARITH,
        "x + iota axis 0",
    );
    assert_f32s(
        &got[4],
        &xs.iter()
            .enumerate()
            .map(|(i, v)| v + (i % 3) as f32)
            .collect::<Vec<_>>(),
        Tol::ARITH,
        "x + iota axis 1",
    );
    assert_eq!(got[5].to_vec::<i32>().unwrap(), vec![1, 2, 3, 4, 5]);
    assert_eq!(got[6].to_vec::<u32>().unwrap(), vec![7; 4]);
    assert_eq!(got[8].shape, Vec::<usize>::new());
    // The host values themselves.
    assert_eq!(Tensor::arange(4).to_vec::<i32>().unwrap(), vec![0, 1, 2, 3]);
    assert_eq!(
        Tensor::iota(DType::U32, &[2, 3], 1)
            .to_vec::<u32>()
            .unwrap(),
        vec![0, 1, 2, 0, 1, 2]
    );
    assert_eq!(
        Tensor::zeros(&[2], DType::Bool).to_vec::<bool>().unwrap(),
        vec![false, false]
    );
    assert_eq!(
        Tensor::ones(&[2], DType::I32).to_vec::<i32>().unwrap(),
        vec![1, 1]
    );
    assert_eq!(Tensor::full(1.5f32, &[0, 3]).shape(), &[0, 3]);
}

#[test]
fn full_and_iota_primitives_on_the_device() {
    // A graph with `full` and `iota` equations (user code gets them folded to host constants; lowering
    // and the kernels must still handle them): out = iota(axis) + full, per dtype.
    for dt in [DType::F32, DType::I32, DType::U32] {
        for (shape, axis) in [
            (vec![3usize, 4], 0usize),
            (vec![3, 4], 1),
            (vec![2, 1, 5], 2),
            (vec![0, 3], 1),
        ] {
            let mut g = Graph::default();
            let io = g.new_var(Aval::new(shape.clone(), dt));
            let fu = g.new_var(Aval::new(shape.clone(), dt));
            let out = g.new_var(Aval::new(shape.clone(), dt));
            let cmp = g.new_var(Aval::new(shape.clone(), DType::Bool));
            let iota_b = g.new_var(Aval::new(shape.clone(), DType::Bool));
            let push = |g: &mut Graph, prim: Prim, inputs: Vec<brigade::Var>, out: brigade::Var| {
                g.eqns
                    .push(brigade::trace::graph::Eqn::new(prim, inputs, out))
            };
            push(
                &mut g,
                Prim::Elementwise(ElementwiseOp::Iota {
                    dtype: dt,
                    shape: shape.clone(),
                    axis,
                }),
                vec![],
                io,
            );
            push(
                &mut g,
                Prim::Elementwise(ElementwiseOp::Full {
                    value: Scalar::F32(3.0).cast(dt),
                    shape: shape.clone(),
                }),
                vec![],
                fu,
            );
            push(
                &mut g,
                Prim::Elementwise(ElementwiseOp::Binary(brigade::ops::BinaryOp::Add)),
                vec![io, fu],
                out,
            );
            push(
                &mut g,
                Prim::Elementwise(ElementwiseOp::Binary(brigade::ops::BinaryOp::Lt)),
                vec![io, fu],
                cmp,
            );
            push(
                &mut g,
                Prim::Elementwise(ElementwiseOp::Iota {
                    dtype: DType::Bool,
                    shape: shape.clone(),
                    axis,
                }),
                vec![],
                iota_b,
            );
            g.outputs = vec![out, cmp, iota_b, fu];
            let want = brigade::reference::eval_graph(&g, &[]).unwrap();
            for dev in gpu_devices() {
                let p = brigade::lower::lower(&g, dev.limits())
                    .unwrap_or_else(|e| panic!("lowering {g}: {e}"));
                let got = run_program(&dev, &p, &[]);
                for (k, (o, w)) in got.iter().zip(&want).enumerate() {
                    assert_close(
                        o,
                        w,
                        Tol::EXACT,
                        &format!("on {}: output {k} of\n{g}", dev.name()),
                    );
                }
            }
        }
    }
}

// ---- reductions ---------------------------------------------------------------------------------

#[test]
fn reductions_over_axes() {
    let x = rand_f32(&[3, 4, 5], 141);
    let axes_cases: Vec<(brigade::Axes, bool)> = vec![
        (0i64.into(), false),
        (1i64.into(), true),
        ((-1i64).into(), false),
        ((-3i64).into(), true),
        ([0i64, 2].into(), false),
        ([1i64, 2].into(), true),
        ([0i64, 1, 2].into(), false),
        (brigade::Axes::All, true),
        (brigade::Axes::All, false),
    ];
    for (axes, keep) in axes_cases {
        eprintln!("{axes:?} keepdims={keep}");
        let a = axes.clone();
        check_on_all(
            move |t: &[Tensor]| {
                vec![
                    t[0].sum(a.clone(), keep),
                    t[0].mean(a.clone(), keep),
                    t[0].max(a.clone(), keep),
                    t[0].min(a.clone(), keep),
                ]
            },
            std::slice::from_ref(&x),
            Tol::REDUCE,
        );
        // Products of values near 1 stay in range.
        let a = axes.clone();
        check_on_all(
            move |t: &[Tensor]| vec![t[0].prod(a.clone(), keep)],
            &[rand_f32_in(&[3, 4, 5], 142, 0.5, 1.5)],
            Tol::REDUCE,
        );
    }
    // keepdims shapes.
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].sum(1i64, true),
                t[0].sum([0i64, 2], false),
                t[0].sum_all(),
            ]
        },
        std::slice::from_ref(&x),
        Tol::REDUCE,
    );
    assert_eq!(got[0].shape, vec![3, 1, 5]);
    assert_eq!(got[1].shape, vec![4]);
    assert_eq!(got[2].shape, Vec::<usize>::new());
}

#[test]
fn reductions_of_integers_bools_and_edge_shapes() {
    for (dt, x) in [
        (DType::I32, rand_i32(&[4, 6], 151, -1000, 1000)),
        (DType::U32, rand_u32(&[4, 6], 152, 0, 5000)),
    ] {
        eprintln!("{dt}");
        check_on_all(
            |t: &[Tensor]| {
                vec![
                    t[0].sum(0i64, false),
                    t[0].max(1i64, false),
                    t[0].min(-1i64, true),
                    t[0].sum_all(),
                    t[0].mean(1i64, false),
                ]
            },
            std::slice::from_ref(&x),
            Tol::REDUCE,
        );
        // Products wrap around like the device's 32-bit integers.
        check_on_all(
            |t: &[Tensor]| vec![t[0].prod(1i64, false)],
            std::slice::from_ref(&x),
            Tol::EXACT,
        );
    }
    // Sums of bools count them (as i32).
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].sum(1i64, false), t[0].sum_all()],
        &[bool_arr(&[true, false, true, true, true, false], &[2, 3])],
        Tol::EXACT,
    );
    assert_eq!(got[0].to_vec::<i32>().unwrap(), vec![2, 2]);
    assert_eq!(got[1].to_vec::<i32>().unwrap(), vec![4]);
    // Size-0 reductions give the identity (max/min have none, as jnp: they take an explicit
    // initial value, and without one they are an error, see tests/ieee.rs); reducing a size-1
    // axis is a copy; rank-0 sums.
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].sum(1i64, false),
                t[0].prod(1i64, false),
                t[0].max_initial(1i64, false, f32::NEG_INFINITY),
                t[0].min_initial(1i64, true, f32::INFINITY),
                t[0].sum(0i64, false),
            ]
        },
        &[rand_f32(&[3, 0], 153)],
        Tol::EXACT,
    );
    assert_f32s(&got[0], &[0.0; 3], Tol::EXACT, "sum over empty axis");
    assert_f32s(&got[1], &[1.0; 3], Tol::EXACT, "prod over empty axis");
    assert_f32s(
        &got[2],
        &[f32::NEG_INFINITY; 3],
        Tol::EXACT,
        "max over empty axis",
    );
    assert_eq!(got[4].shape, vec![0]);
    check_on_all(
        |t: &[Tensor]| vec![t[0].sum(1i64, false), t[0].max(0i64, true)],
        &[rand_f32(&[4, 1], 154)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].sum_all(), t[0].max(brigade::Axes::All, true)],
        &[rand_f32(&[], 155)],
        Tol::EXACT,
    );
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].max_initial(0i64, false, i32::MIN),
                t[0].min_initial(0i64, false, i32::MAX),
            ]
        },
        &[rand_i32(&[0, 2], 156, -5, 5)],
        Tol::EXACT,
    );
    assert_eq!(got[0].data, HostData::I32(vec![i32::MIN; 2]));
    assert_eq!(got[1].data, HostData::I32(vec![i32::MAX; 2]));
}

#[test]
fn reduction_with_elementwise_prologue() {
    check_on_all(
        |t: &[Tensor]| {
            vec![
                (&t[0] * &t[1] + 1.0).exp().sum(1i64, false),
                (&t[0] - &t[1]).abs().max(0i64, true),
                t[0].t().sum(0i64, false),
            ]
        },
        &[rand_f32(&[4, 6], 161), rand_f32(&[6], 162)],
        Tol::REDUCE,
    );
}

#[test]
fn argmax_argmin_with_ties() {
    // Ties keep the first index.
    let x = f32_arr(
        &[
            1.0, 3.0, 3.0, -2.0, -2.0, 0.0, 5.0, 5.0, 5.0, 5.0, -1.0, -1.0,
        ],
        &[3, 4],
    );
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].argmax(1, false),
                t[0].argmin(1, false),
                t[0].argmax(0, true),
                t[0].argmin(-2, false),
                t[0].argmax(-1, true),
            ]
        },
        std::slice::from_ref(&x),
        Tol::EXACT,
    );
    assert_eq!(got[0].to_vec::<i32>().unwrap(), vec![1, 2, 0]);
    assert_eq!(got[1].to_vec::<i32>().unwrap(), vec![3, 0, 2]);
    assert_eq!(got[2].shape, vec![1, 4]);
    assert_eq!(got[2].dtype(), DType::I32);
    let all_equal = f32_arr(&[2.0; 6], &[2, 3]);
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].argmax(1, false), t[0].argmin(0, false)],
        &[all_equal],
        Tol::EXACT,
    );
    assert_eq!(got[0].to_vec::<i32>().unwrap(), vec![0, 0]);
    for dt in [DType::I32, DType::U32] {
        check_on_all(
            |t: &[Tensor]| vec![t[0].argmax(0, false), t[0].argmin(2, false)],
            &[rand_of(dt, &[3, 2, 5], 171)],
            Tol::EXACT,
        );
    }
    // With a fused prologue, over a size-1 axis, and of a 1-D array (rank-0 result).
    check_on_all(
        |t: &[Tensor]| vec![(&t[0] * -1.0).argmax(1, false), t[0].argmax(0, false)],
        &[rand_f32(&[1, 7], 172)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].argmin(0, false)],
        &[rand_f32(&[9], 173)],
        Tol::EXACT,
    );
}

#[test]
fn long_reductions_use_the_cooperative_kernel() {
    // 100 000 elements to one output: several workgroups per output, then a second pass.
    let n = 100_000;
    let x = rand_pos(&[n], 181);
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].sum_all(),
                t[0].max(0i64, false),
                t[0].min(0i64, false),
                t[0].mean_all(),
            ]
        },
        std::slice::from_ref(&x),
        Tol::REDUCE,
    );
    let xs = host(&x).to_vec::<f32>().unwrap();
    let s: f64 = xs.iter().map(|&v| v as f64).sum();
    assert_f32s(&got[0], &[s as f32], Tol::REDUCE, "sum (host)");
    // Integers: exact, whatever the order of the partial sums.
    check_on_all(
        |t: &[Tensor]| vec![t[0].sum_all(), t[0].max(0i64, false)],
        &[rand_i32(&[n], 182, -1000, 1000)],
        Tol::EXACT,
    );
    // Three long rows (two parts each), with a prologue; a long column reduction over a strided axis.
    check_on_all(
        |t: &[Tensor]| vec![(&t[0] * 0.5).sum(1i64, false)],
        &[rand_pos(&[3, 40_000], 183)],
        Tol::REDUCE,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].sum(0i64, false), t[0].min(0i64, true)],
        &[rand_pos(&[5000, 3], 184)],
        Tol::REDUCE,
    );
    // Just above the cooperative threshold with one part.
    check_on_all(
        |t: &[Tensor]| vec![t[0].sum_all(), t[0].prod(0i64, false)],
        &[rand_f32_in(&[4096], 185, 0.999, 1.001)],
        Tol::REDUCE,
    );
}

/// Reductions that keep the last axis (a multiple of 4 long) take 4, 8 or 16 adjacent outputs per
/// invocation with `vec4` loads, and split the reduced range into parts when the outputs are few:
/// every op and 32-bit dtype, one part and several, 4, 8 and 16 outputs per invocation (last axes
/// of 12, 8 and 16+), several reduced axes, a kept middle axis, a prologue, NaN.
#[test]
fn column_reductions_take_several_outputs_per_invocation() {
    let dev = device_of("vulkan");
    let kernels = |f: fn(&[Tensor]) -> Vec<Tensor>, args: &[Array]| -> Vec<(String, String)> {
        let p = brigade::jit(f).program(args, &dev).unwrap();
        p.launches
            .iter()
            .map(|l| (l.label.clone(), l.wgsl.clone()))
            .collect()
    };
    // [4096, 64] over axis 0: 16 groups of 4 outputs, the 4096 rows in 32 parts of 128.
    let mut xs = f32s(4096 * 64, 191, -2.0, 2.0);
    xs[5 * 64 + 7] = f32::NAN;
    xs[4095 * 64 + 63] = f32::INFINITY;
    let x = f32_arr(&xs, &[4096, 64]);
    let k = kernels(|t| vec![t[0].sum(0i64, false)], std::slice::from_ref(&x));
    assert!(
        k[0].0.ends_with("_cols") && k[1].0.ends_with("_cols_parts"),
        "{k:?}"
    );
    assert!(k[0].1.contains("if (part >= 32u)"), "{}", k[0].1);
    check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].sum(0i64, false),
                t[0].max(0i64, false),
                t[0].min(0i64, true),
                (&t[0] * 0.25 + 1.0).sum(0i64, false),
            ]
        },
        std::slice::from_ref(&x),
        Tol::REDUCE,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].prod(0i64, false)],
        &[rand_f32_in(&[2048, 8], 192, 0.999, 1.001)],
        Tol::REDUCE,
    );
    // One part (111 reduced steps are too few to split), two reduced axes.
    let y = rand_pos(&[3, 37, 1024], 193);
    let k = kernels(
        |t| vec![t[0].sum(&[0i64, 1][..], false)],
        std::slice::from_ref(&y),
    );
    assert_eq!(k.len(), 1, "{k:?}");
    assert!(
        k[0].1
            .contains("out0[gi * 4u + 3u] = vec4<f32>(acc12, acc13, acc14, acc15);")
    );
    check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].sum(&[0i64, 1][..], false),
                t[0].max(&[0i64, 1][..], true),
            ]
        },
        std::slice::from_ref(&y),
        Tol::REDUCE,
    );
    // A kept middle axis: [1000, 2, 8] over axis 0 (16 outputs, 7 parts of 143 rows).
    check_on_all(
        |t: &[Tensor]| vec![t[0].sum(0i64, false), t[0].min(0i64, false)],
        &[rand_pos(&[1000, 2, 8], 194)],
        Tol::REDUCE,
    );
    // Integers: exact.
    check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].sum(0i64, false),
                t[0].max(0i64, false),
                t[0].min(1i64, false),
            ]
        },
        &[rand_i32(&[3000, 3, 12], 195, -100_000, 100_000)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].sum(0i64, false), t[0].max(0i64, false)],
        &[rand_u32(&[700, 16], 196, 0, 1 << 20)],
        Tol::EXACT,
    );
}

// ---- matmul -------------------------------------------------------------------------------------

fn mm(a: &[usize], b: &[usize], seed: u64) {
    eprintln!("matmul {a:?} @ {b:?}");
    check_on_all(
        |t: &[Tensor]| vec![t[0].matmul(&t[1])],
        &[
            rand_f32_in(a, seed, -1.0, 1.0),
            rand_f32_in(b, seed + 1, -1.0, 1.0),
        ],
        Tol::REDUCE,
    );
}

#[test]
fn matmul_2d() {
    mm(&[3, 5], &[5, 7], 191);
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].matmul(&t[1])],
        &[
            f32_arr(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]),
            f32_arr(&[1.0, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]),
        ],
        Tol::EXACT,
    );
    assert_f32s(
        &got[0],
        &[4.0, 5.0, 10.0, 11.0],
        Tol::EXACT,
        "small matmul (host)",
    );
}

#[test]
fn matmul_vectors() {
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].matmul(&t[1])],
        &[rand_f32(&[5], 201), rand_f32(&[5, 3], 202)],
        Tol::REDUCE,
    );
    assert_eq!(got[0].shape, vec![3]);
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].matmul(&t[1])],
        &[rand_f32(&[3, 5], 203), rand_f32(&[5], 204)],
        Tol::REDUCE,
    );
    assert_eq!(got[0].shape, vec![3]);
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].matmul(&t[1])],
        &[rand_f32(&[5], 205), rand_f32(&[5], 206)],
        Tol::REDUCE,
    );
    assert_eq!(got[0].shape, Vec::<usize>::new());
}

#[test]
fn matmul_batched_and_broadcast_batch() {
    mm(&[2, 3, 5], &[2, 5, 4], 211);
    mm(&[2, 3, 5], &[5, 4], 213);
    mm(&[3, 5], &[2, 5, 4], 215);
    mm(&[2, 1, 3, 5], &[4, 5, 7], 217);
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].matmul(&t[1])],
        &[rand_f32(&[2, 1, 3, 5], 219), rand_f32(&[4, 5, 7], 220)],
        Tol::REDUCE,
    );
    assert_eq!(got[0].shape, vec![2, 4, 3, 7]);
}

#[test]
fn matmul_odd_sizes() {
    let sizes = [
        (1, 1, 1),
        (1, 33, 1),
        (3, 5, 7),
        (7, 3, 5),
        (33, 7, 1),
        (5, 33, 3),
        (1, 7, 33),
        (33, 33, 33),
    ];
    for (i, &(m, k, n)) in sizes.iter().enumerate() {
        mm(&[m, k], &[k, n], 230 + 2 * i as u64);
    }
}

#[test]
fn matmul_128x256x64() {
    mm(&[128, 256], &[256, 64], 251);
}

#[test]
fn matmul_with_empty_contraction_or_rows() {
    // m = 0 gives an empty result; k = 0 gives zeros (generic and vec4-shaped n).
    check_on_all(
        |t: &[Tensor]| vec![t[0].matmul(&t[1])],
        &[rand_f32(&[0, 3], 263), rand_f32(&[3, 4], 264)],
        Tol::EXACT,
    );
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].matmul(&t[1])],
        &[rand_f32(&[3, 0], 265), rand_f32(&[0, 3], 266)],
        Tol::EXACT,
    );
    assert_f32s(&got[0], &[0.0; 9], Tol::EXACT, "k = 0, n = 3");
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].matmul(&t[1])],
        &[rand_f32(&[3, 0], 261), rand_f32(&[0, 4], 262)],
        Tol::EXACT,
    );
    assert_f32s(&got[0], &[0.0; 12], Tol::EXACT, "k = 0, n = 4");
}

#[test]
fn matmul_integer() {
    check_on_all(
        |t: &[Tensor]| vec![t[0].matmul(&t[1])],
        &[rand_i32(&[4, 6], 265, -9, 9), rand_i32(&[6, 5], 266, -9, 9)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].matmul(&t[1])],
        &[
            rand_u32(&[2, 3, 5], 267, 0, 9),
            rand_u32(&[5, 2], 268, 0, 9),
        ],
        Tol::EXACT,
    );
}

#[test]
fn matmul_inside_a_fused_program() {
    check_on_all(
        |t: &[Tensor]| {
            vec![
                ((&t[0] * 2.0).matmul(&t[1].t()) + &t[2])
                    .relu()
                    .sum(1i64, false),
            ]
        },
        &[
            rand_f32(&[4, 6], 271),
            rand_f32(&[5, 6], 272),
            rand_f32(&[5], 273),
        ],
        Tol::REDUCE,
    );
}

#[test]
fn dot_general_with_explicit_dimensions() {
    // Batch on a middle axis: (3, 2, 5) x (5, 2, 4) -> (2, 3, 4).
    let d = DotDims {
        lhs_contract: vec![2],
        rhs_contract: vec![0],
        lhs_batch: vec![1],
        rhs_batch: vec![1],
    };
    let got = check_on_all(
        move |t: &[Tensor]| vec![t[0].dot_general(&t[1], d.clone())],
        &[rand_f32(&[3, 2, 5], 281), rand_f32(&[5, 2, 4], 282)],
        Tol::REDUCE,
    );
    assert_eq!(got[0].shape, vec![2, 3, 4]);
    // Two contracting axes, no batch: (2, 3, 4) x (3, 4, 5) -> (2, 5).
    let d = DotDims {
        lhs_contract: vec![1, 2],
        rhs_contract: vec![0, 1],
        lhs_batch: vec![],
        rhs_batch: vec![],
    };
    let got = check_on_all(
        move |t: &[Tensor]| vec![t[0].dot_general(&t[1], d.clone())],
        &[rand_f32(&[2, 3, 4], 283), rand_f32(&[3, 4, 5], 284)],
        Tol::REDUCE,
    );
    assert_eq!(got[0].shape, vec![2, 5]);
    // Contract the first axis of both (x^T y) and an outer product (no contraction).
    let d = DotDims {
        lhs_contract: vec![0],
        rhs_contract: vec![0],
        lhs_batch: vec![],
        rhs_batch: vec![],
    };
    check_on_all(
        move |t: &[Tensor]| vec![t[0].dot_general(&t[1], d.clone())],
        &[rand_f32(&[6, 3], 285), rand_f32(&[6, 4], 286)],
        Tol::REDUCE,
    );
    let d = DotDims {
        lhs_contract: vec![],
        rhs_contract: vec![],
        lhs_batch: vec![],
        rhs_batch: vec![],
    };
    let got = check_on_all(
        move |t: &[Tensor]| vec![t[0].dot_general(&t[1], d.clone())],
        &[rand_f32(&[3], 287), rand_f32(&[4], 288)],
        Tol::ARITH,
    );
    assert_eq!(got[0].shape, vec![3, 4]);
}

// ---- layout -------------------------------------------------------------------------------------

#[test]
fn transpose_permutations() {
    let x = rand_f32(&[2, 3, 4], 291);
    for perm in [
        [0usize, 1, 2],
        [2, 1, 0],
        [1, 0, 2],
        [0, 2, 1],
        [2, 0, 1],
        [1, 2, 0],
    ] {
        eprintln!("{perm:?}");
        let got = check_on_all(
            move |t: &[Tensor]| vec![t[0].transpose(&perm)],
            std::slice::from_ref(&x),
            Tol::EXACT,
        );
        assert_eq!(
            got[0].shape,
            perm.iter().map(|&p| [2, 3, 4][p]).collect::<Vec<_>>()
        );
    }
    check_on_all(
        |t: &[Tensor]| vec![t[0].transpose(&[3, 1, 0, 2])],
        &[rand_i32(&[2, 1, 3, 2], 292, -9, 9)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].t(), (&t[0] + 1.0).t()],
        &[rand_f32(&[3, 5], 293)],
        Tol::ARITH,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].t()],
        &[rand_bool(&[4, 3], 294)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].t(), t[0].transpose(&[])],
        &[rand_f32(&[], 295)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].transpose(&[1, 0])],
        &[rand_f32(&[3, 0], 296)],
        Tol::EXACT,
    );
}

#[test]
fn reshape_including_inferred_axis() {
    let x = rand_f32(&[2, 3, 4], 301);
    for shape in [
        vec![4i64, 6],
        vec![-1],
        vec![3, -1],
        vec![2, -1, 2],
        vec![24, 1, 1],
        vec![1, 2, 12],
    ] {
        eprintln!("{shape:?}");
        let s = shape.clone();
        let got = check_on_all(
            move |t: &[Tensor]| vec![t[0].reshape(&s)],
            std::slice::from_ref(&x),
            Tol::EXACT,
        );
        assert_eq!(got[0].len(), 24);
    }
    // Reshape of a transposed (non-contiguous) and of a computed value.
    check_on_all(
        |t: &[Tensor]| vec![t[0].t().reshape(&[-1]), (&t[0] * 2.0).reshape(&[5, 3]).t()],
        &[rand_f32(&[3, 5], 302)],
        Tol::ARITH,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].reshape(&[3, 0]), t[0].reshape(&[0])],
        &[rand_f32(&[0, 3], 303)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].reshape(&[1, 1]), t[0].reshape(&[-1])],
        &[rand_i32(&[], 304, -5, 5)],
        Tol::EXACT,
    );
}

#[test]
fn broadcast_expand_squeeze() {
    check_on_all(
        |t: &[Tensor]| vec![t[0].broadcast_to(&[2, 3]), t[0].broadcast_to(&[4, 1, 3])],
        &[rand_f32(&[3], 311)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].broadcast_to(&[4, 3])],
        &[rand_f32(&[1, 3], 312)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].broadcast_to(&[2, 2]), t[0].broadcast_to(&[0, 2])],
        &[rand_i32(&[], 313, 1, 9)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].broadcast_to(&[2, 3, 4])],
        &[rand_bool(&[2, 1, 1], 314)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].broadcast_in_dim(&[3, 4], &[0]),
                t[0].broadcast_in_dim(&[2, 3, 4], &[1]),
            ]
        },
        &[rand_f32(&[3], 315)],
        Tol::EXACT,
    );
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].expand_dims(0),
                t[0].expand_dims(-1),
                t[0].expand_dims(1),
                t[0].expand_dims(0).squeeze(&[0]),
                t[0].expand_dims(2).squeeze(&[-1]),
            ]
        },
        &[rand_f32(&[2, 3], 316)],
        Tol::EXACT,
    );
    assert_eq!(got[0].shape, vec![1, 2, 3]);
    assert_eq!(got[1].shape, vec![2, 3, 1]);
    assert_eq!(got[2].shape, vec![2, 1, 3]);
    assert_eq!(got[3].shape, vec![2, 3]);
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].squeeze(&[0, 2]), t[0].squeeze(&[])],
        &[rand_f32(&[1, 4, 1], 317)],
        Tol::EXACT,
    );
    assert_eq!(got[0].shape, vec![4]);
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].squeeze(&[0, 1])],
        &[rand_f32(&[1, 1], 318)],
        Tol::EXACT,
    );
    assert_eq!(got[0].shape, Vec::<usize>::new());
}

#[test]
fn strided_slices() {
    let x = rand_f32(&[6, 7], 321);
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].slice(&[1, 0], &[6, 7], Some(&[2, 3])),
                t[0].slice(&[0, 2], &[6, 5], None),
                t[0].slice(&[5, 6], &[6, 7], Some(&[4, 4])),
                t[0].slice(&[2, 3], &[2, 7], None),
                t[0].slice_axis(-1, 1, 4),
                t[0].slice_axis(0, 3, 6),
                (&t[0] * 2.0).slice(&[0, 1], &[6, 7], Some(&[5, 2])),
            ]
        },
        std::slice::from_ref(&x),
        Tol::ARITH,
    );
    assert_eq!(got[0].shape, vec![3, 3]);
    assert_eq!(got[2].shape, vec![1, 1]);
    assert_eq!(got[3].shape, vec![0, 4]);
    let xs = host(&x).to_vec::<f32>().unwrap();
    assert_f32s(
        &got[0],
        &[
            xs[7], xs[10], xs[13], xs[21], xs[24], xs[27], xs[35], xs[38], xs[41],
        ],
        Tol::EXACT,
        "strided slice (host)",
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].slice(&[1], &[9], Some(&[3]))],
        &[rand_i32(&[9], 322, -9, 9)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].slice(&[], &[], None)],
        &[rand_f32(&[], 323)],
        Tol::EXACT,
    );
}

#[test]
fn concatenate_and_stack() {
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                Tensor::concatenate(&[&t[0], &t[1], &t[2]], 1),
                Tensor::concatenate(&[&t[1], &t[0]], -1),
            ]
        },
        &[
            rand_f32(&[2, 3], 331),
            rand_f32(&[2, 0], 332),
            rand_f32(&[2, 4], 333),
        ],
        Tol::EXACT,
    );
    assert_eq!(got[0].shape, vec![2, 7]);
    check_on_all(
        |t: &[Tensor]| vec![Tensor::concatenate(&[&t[0], &t[1], &t[2]], 0)],
        &[
            rand_i32(&[1, 3], 334, -9, 9),
            rand_i32(&[2, 3], 335, -9, 9),
            rand_i32(&[0, 3], 336, -9, 9),
        ],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![Tensor::concatenate(&[&t[0], &t[1]], -1)],
        &[rand_bool(&[2, 2], 337), rand_bool(&[2, 1], 338)],
        Tol::EXACT,
    );
    // Of computed operands, a single operand, and stacks.
    check_on_all(
        |t: &[Tensor]| {
            vec![
                Tensor::concatenate(&[&(&t[0] + 1.0), &t[1].exp(), &t[0].t().t()], 0),
                Tensor::concatenate(&[&t[0]], 0),
            ]
        },
        &[rand_f32(&[2, 3], 339), rand_f32(&[1, 3], 340)],
        Tol::TRANS,
    );
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                Tensor::stack(&[&t[0], &t[1], &t[2]], 1),
                Tensor::stack(&[&t[0], &t[1]], 0),
                Tensor::stack(&[&t[2]], -1),
            ]
        },
        &[
            rand_f32(&[2, 3], 341),
            rand_f32(&[2, 3], 342),
            rand_f32(&[2, 3], 343),
        ],
        Tol::EXACT,
    );
    assert_eq!(got[0].shape, vec![2, 3, 3]);
    assert_eq!(got[2].shape, vec![2, 3, 1]);
    check_on_all(
        |t: &[Tensor]| vec![Tensor::stack(&[&t[0], &t[1]], 0)],
        &[rand_f32(&[], 344), rand_f32(&[], 345)],
        Tol::EXACT,
    );
}

#[test]
fn pad_low_high_interior() {
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].pad(&[1, 0], &[2, 3], 7.5f32),
                t[0].pad_interior(&[0, 2], &[1, 0], &[1, 2], -1.0f32),
            ]
        },
        &[f32_arr(&[1.0, 2.0, 3.0, 4.0], &[2, 2])],
        Tol::EXACT,
    );
    assert_eq!(got[0].shape, vec![5, 5]);
    assert_f32s(
        &got[1],
        &[
            -1.0, -1.0, 1.0, -1.0, -1.0, 2.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 3.0,
            -1.0, -1.0, 4.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0,
        ],
        Tol::EXACT,
        "interior pad (host)",
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].pad_interior(&[2], &[1], &[3], 0i32)],
        &[rand_i32(&[3], 351, -9, 9)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].pad(&[1, 1], &[0, 1], true)],
        &[rand_bool(&[2, 2], 352)],
        Tol::EXACT,
    );
    // Size-0 and size-1 axes, a computed operand, and no padding at all.
    check_on_all(
        |t: &[Tensor]| vec![t[0].pad_interior(&[1, 0], &[1, 2], &[4, 4], 3.0f32)],
        &[rand_f32(&[0, 1], 353)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| {
            vec![
                (&t[0] * 2.0).pad(&[1, 1], &[1, 1], 0.0f32).sum_all(),
                t[0].pad(&[0, 0], &[0, 0], 0.0f32),
            ]
        },
        &[rand_f32(&[2, 3], 354)],
        Tol::REDUCE,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].pad(&[], &[], 1u32)],
        &[rand_u32(&[], 355, 1, 9)],
        Tol::EXACT,
    );
}

// ---- indexing -----------------------------------------------------------------------------------

#[test]
fn take_wraps_negative_and_clamps_out_of_range_indices() {
    let x = rand_f32(&[5, 3], 361);
    // 2-D indices along axis 0: -1 is the last row, -6 wraps once to -1 and clamps to 0, 7 clamps to 4.
    let idx = i32_arr(&[0, -1, 4, 7, -6, 2], &[3, 2]);
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].index_take(&t[1], 0)],
        &[x.clone(), idx],
        Tol::EXACT,
    );
    assert_eq!(got[0].shape, vec![3, 2, 3]);
    let xs = host(&x).to_vec::<f32>().unwrap();
    let rows = [0usize, 4, 4, 4, 0, 2];
    let want: Vec<f32> = rows
        .iter()
        .flat_map(|&r| xs[r * 3..r * 3 + 3].to_vec())
        .collect();
    assert_f32s(&got[0], &want, Tol::EXACT, "take (host)");
    // Along the last axis (negative axis), u32 indices (clamped), a rank-0 index, i32 data.
    check_on_all(
        |t: &[Tensor]| vec![t[0].index_take(&t[1], -1)],
        &[x.clone(), i32_arr(&[2, -2, -3, 3, -100, 100], &[2, 3])],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].index_take(&t[1], 0)],
        &[x.clone(), u32_arr(&[4, 0, 9, u32::MAX], &[4])],
        Tol::EXACT,
    );
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].index_take(&t[1], 1)],
        &[x.clone(), i32_arr(&[-1], &[])],
        Tol::EXACT,
    );
    assert_eq!(got[0].shape, vec![5]);
    check_on_all(
        |t: &[Tensor]| vec![t[0].index_take(&t[1], 1)],
        &[
            rand_i32(&[2, 4, 3], 362, -9, 9),
            i32_arr(&[3, 3, 0, -4, 1], &[5]),
        ],
        Tol::EXACT,
    );
    // Indices and data computed in the same kernel; empty index arrays.
    check_on_all(
        |t: &[Tensor]| vec![(&t[0] * 2.0).index_take(&(&t[1] + 1), 0)],
        &[x.clone(), i32_arr(&[0, 1, 2, 3], &[2, 2])],
        Tol::ARITH,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].index_take(&t[1], 0)],
        &[x, i32_arr(&[], &[0])],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].index_take(&t[1], 0)],
        &[rand_f32(&[0, 2], 363), i32_arr(&[], &[0, 3])],
        Tol::EXACT,
    );
}

#[test]
fn one_hot_encodes_classes() {
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].one_hot(4)],
        &[i32_arr(&[0, 2, -1, 5, 3, 1], &[2, 3])],
        Tol::EXACT,
    );
    assert_eq!(got[0].shape, vec![2, 3, 4]);
    assert_eq!(got[0].dtype(), DType::F32);
    // Out-of-range classes (negative or >= depth) give all-zero rows.
    assert_f32s(
        &got[0],
        &[
            1., 0., 0., 0., 0., 0., 1., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 1., 0., 1.,
            0., 0.,
        ],
        Tol::EXACT,
        "one_hot (host)",
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].one_hot(3), t[0].one_hot(1)],
        &[u32_arr(&[2, 0, 1, 7], &[4])],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].one_hot(5), t[0].one_hot(0)],
        &[i32_arr(&[3], &[])],
        Tol::EXACT,
    );
    // Matmul with a one-hot matrix picks rows.
    check_on_all(
        |t: &[Tensor]| vec![(&t[0] * &t[1].one_hot(3).sum(0i64, false)).sum_all()],
        &[rand_f32(&[3], 371), i32_arr(&[0, 2, 2], &[3])],
        Tol::REDUCE,
    );
}

// ---- softmax family -----------------------------------------------------------------------------

fn host_log_softmax(row: &[f32]) -> Vec<f32> {
    let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
    let lse = m + row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
    row.iter().map(|&v| (v as f64 - lse) as f32).collect()
}

#[test]
fn softmax_log_softmax_logsumexp() {
    let x = rand_f32(&[3, 5], 381);
    check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].softmax(1),
                t[0].softmax(0),
                t[0].log_softmax(-1),
                t[0].logsumexp(1i64, false),
                t[0].logsumexp(brigade::Axes::All, true),
                t[0].logsumexp([0i64, 1], false),
            ]
        },
        &[x],
        Tol::REDUCE,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].softmax(0), t[0].logsumexp(0i64, false)],
        &[rand_f32(&[1], 382)],
        Tol::REDUCE,
    );
}

#[test]
fn softmax_is_stable_for_large_inputs() {
    // A naive exp(x) / sum(exp(x)) overflows to inf / inf = NaN here.
    let rows: [[f32; 4]; 3] = [
        [1000.0, 1001.0, 1002.0, 999.0],
        [-1000.0, -1001.0, -1000.5, -1003.0],
        [88.0, 89.0, 0.0, -1000.0],
    ];
    let flat: Vec<f32> = rows.iter().flatten().copied().collect();
    let x = f32_arr(&flat, &[3, 4]);
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].softmax(1),
                t[0].log_softmax(1),
                t[0].logsumexp(1i64, false),
            ]
        },
        &[x],
        Tol::REDUCE,
    );
    let want_ls: Vec<f32> = rows.iter().flat_map(|r| host_log_softmax(r)).collect();
    let want_sm: Vec<f32> = want_ls.iter().map(|v| v.exp()).collect();
    let want_lse: Vec<f32> = rows.iter().map(|r| r[0] - host_log_softmax(r)[0]).collect();
    assert_f32s(&got[0], &want_sm, Tol::REDUCE, "softmax (host, stable)");
    assert_f32s(&got[1], &want_ls, Tol::REDUCE, "log_softmax (host, stable)");
    assert_f32s(&got[2], &want_lse, Tol::REDUCE, "logsumexp (host, stable)");
    assert!(
        got.iter().all(|h| h.to_f64().iter().all(|v| v.is_finite())),
        "non-finite values: {got:?}"
    );
}

#[test]
fn rank0_and_size0_programs_with_several_outputs() {
    // The identity, an input returned twice, a constant output and an empty output together.
    let got = check_on_all(
        |t: &[Tensor]| {
            vec![
                t[0].clone(),
                t[0].clone(),
                (&t[0] * 3.0).exp(),
                Tensor::scalar(2i32),
                t[1].sum(0i64, false),
                t[1].clone(),
            ]
        },
        &[rand_f32(&[], 391), rand_f32(&[0, 2], 392)],
        Tol::TRANS,
    );
    assert_eq!(got[4].shape, vec![2]);
    assert_eq!(got[3].data, brigade::HostData::I32(vec![2]));
    assert_f32s(&got[4], &[0.0, 0.0], Tol::EXACT, "sum over an empty axis");
    // A large captured constant (a graph constant, uploaded once per device) next to a scalar one.
    let t2 = rand_f32(&[3, 4], 393);
    check_on_all(
        move |t: &[Tensor]| vec![&t[0] * &Tensor::from(&t2) + 1.0, Tensor::from(&t2)],
        &[rand_f32(&[4], 394)],
        Tol::ARITH,
    );
}

#[test]
fn reductions_with_axes_in_any_order() {
    // Axes given out of order (or as negative numbers that normalize out of order) must reduce the
    // same axes as sorted ones: sum over [2, 0] of a (3, 4, 5) array has shape (4,).
    let x = rand_f32(&[3, 4, 5], 401);
    for axes in [vec![2i64, 0], vec![-1, -3], vec![2, 1], vec![1, 0, 2]] {
        eprintln!("{axes:?}");
        let a = axes.clone();
        check_on_all(
            move |t: &[Tensor]| vec![t[0].sum(a.clone(), false), t[0].max(a.clone(), true)],
            std::slice::from_ref(&x),
            Tol::REDUCE,
        );
    }
}

#[test]
fn size0_inner_dimensions() {
    // Arrays whose size-0 axis is not the first one: nothing to compute, but the kernels must still
    // compile (an index map that divides by a zero stride is a WGSL error).
    check_on_all(unary(Tensor::neg), &[rand_f32(&[2, 0, 3], 411)], Tol::EXACT);
    check_on_all(
        binary(Tensor::add),
        &[rand_f32(&[2, 0], 412), rand_f32(&[2, 1], 413)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].transpose(&[1, 0])],
        &[rand_f32(&[0, 3], 414)],
        Tol::EXACT,
    );
    check_on_all(
        |t: &[Tensor]| vec![t[0].sum(0i64, false)],
        &[rand_f32(&[2, 3, 0], 415)],
        Tol::EXACT,
    );
}

#[test]
fn rem_f32_is_exact_fmod() {
    // fmod is exact in floating point (the result is always representable), so the device must
    // agree with the reference even where the f32 quotient rounds to an integer (0.3 % 0.1 is
    // 7.45e-9 and -0.7 % 0.1 is -0.09999998, not 0) or exceeds 2^24 (1e10 % 3 is 1, not 0).
    let a = [0.3f32, 1e10, 1e10, -0.7, 100.0, 16_777_217.0 * 4.0];
    let b = [0.1f32, 3.0, -7.0, 0.1, 0.3, 3.0];
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x % y).collect();
    let got = check_on_all(
        binary(Tensor::rem),
        &[f32_arr(&a, &[6]), f32_arr(&b, &[6])],
        Tol::EXACT,
    );
    assert_f32s(&got[0], &want, Tol::EXACT, "fmod (host)");
}

#[test]
fn integer_inputs_to_logsumexp_and_log_softmax_compute_in_f32() {
    let x = i32_arr(&[1, -2, 3, 4, 0, -5], &[2, 3]);
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].logsumexp(1, false), t[0].log_softmax(-1)],
        &[x],
        Tol::TRANS,
    );
    assert_eq!(got[0].dtype(), DType::F32);
    let row = |r: [f64; 3]| {
        let m = r.iter().cloned().fold(f64::MIN, f64::max);
        (r.iter().map(|v| (v - m).exp()).sum::<f64>()).ln() + m
    };
    let want = [row([1.0, -2.0, 3.0]) as f32, row([4.0, 0.0, -5.0]) as f32];
    assert_f32s(&got[0], &want, Tol::TRANS, "logsumexp of i32 rows (host)");
}

// ---- f64: the host-only dtype, on the cpu device ----------------------------------------------
//
// GPU devices refuse f64 (tests/errors.rs); the reference interpreter and the cpu device compute
// it in double precision. Expected values are Rust f64 arithmetic on the same inputs, so every
// comparison below is exact or within a few f64 ulps, far below what an f32 computation gives.

/// The cpu device (the reference interpreter).
fn cpu_dev() -> brigade::Device {
    devices_with("cpu:1")[0].clone()
}

/// `n` f64 values in `[lo, hi)` at full double precision (62 random bits, not f32 values widened),
/// never zero.
fn f64s(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut r = Lcg::new(seed);
    (0..n)
        .map(|_| {
            let u = (r.next_u32() as f64 * 2f64.powi(31) + r.next_u32() as f64) / 2f64.powi(62);
            let x = lo + (hi - lo) * u;
            if x == 0.0 { hi / 2.0 } else { x }
        })
        .collect()
}

fn f64_arr(v: &[f64], shape: &[usize]) -> Array {
    Array::from_vec(v.to_vec(), shape).unwrap()
}

/// `f` under jit on the cpu device; every output read back to the host.
fn on_cpu(f: impl Fn(&[Tensor]) -> Vec<Tensor>, args: &[Array]) -> Vec<HostArray> {
    brigade::jit(f)
        .on(&cpu_dev())
        .call(args)
        .unwrap_or_else(|e| panic!("on the cpu device: {e}"))
        .iter()
        .map(host)
        .collect()
}

fn f64_vals(h: &HostArray) -> Vec<f64> {
    assert_eq!(h.dtype(), DType::F64, "an f64 result");
    h.to_vec::<f64>().unwrap()
}

/// At least one value that f32 cannot hold: the computation did not round through f32.
fn assert_not_f32(v: &[f64], what: &str) {
    assert!(
        v.iter().any(|&x| (x as f32) as f64 != x),
        "{what}: every value is an f32 value ({v:?}): computed in f32?"
    );
}

#[test]
fn f64_unary_ops_on_the_cpu_device_match_rust_f64() {
    type Case = (&'static str, UnaryFn, fn(f64) -> f64, f64, f64, bool);
    let cases: [Case; 16] = [
        ("neg", Tensor::neg, |x| -x, -3.0, 3.0, true),
        ("abs", Tensor::abs, f64::abs, -3.0, 3.0, true),
        ("exp", Tensor::exp, f64::exp, -3.0, 3.0, true),
        ("log", Tensor::log, f64::ln, 0.1, 4.0, true),
        ("sqrt", Tensor::sqrt, f64::sqrt, 0.1, 4.0, true),
        ("rsqrt", Tensor::rsqrt, |x| 1.0 / x.sqrt(), 0.1, 4.0, true),
        ("sin", Tensor::sin, f64::sin, -3.0, 3.0, true),
        ("cos", Tensor::cos, f64::cos, -3.0, 3.0, true),
        ("tanh", Tensor::tanh, f64::tanh, -3.0, 3.0, true),
        (
            "sigmoid",
            Tensor::sigmoid,
            |x| 1.0 / (1.0 + (-x).exp()),
            -3.0,
            3.0,
            true,
        ),
        ("relu", Tensor::relu, |x| x.max(0.0), -3.0, 3.0, true),
        ("square", Tensor::square, |x| x * x, -3.0, 3.0, true),
        ("sign", Tensor::sign, f64::signum, -3.0, 3.0, false),
        ("floor", Tensor::floor, f64::floor, -3.0, 3.0, false),
        ("ceil", Tensor::ceil, f64::ceil, -3.0, 3.0, false),
        (
            "round",
            Tensor::round,
            f64::round_ties_even,
            -3.0,
            3.0,
            false,
        ),
    ];
    for (k, (name, op, rust, lo, hi, not_f32)) in cases.into_iter().enumerate() {
        let x = f64s(16, 900 + k as u64, lo, hi);
        let got = f64_vals(&on_cpu(unary(op), &[f64_arr(&x, &[4, 4])])[0]);
        let want: Vec<f64> = x.iter().map(|&v| rust(v)).collect();
        assert_eq!(got, want, "{name} in f64");
        if not_f32 {
            assert_not_f32(&got, name);
        }
    }
    // Integers still go to f32 for transcendentals (like jnp); f64 stays f64.
    let got = on_cpu(unary(Tensor::exp), &[i32_arr(&[1, 2], &[2])]);
    assert_eq!(got[0].dtype(), DType::F32);
}

#[test]
fn f64_binary_ops_promotion_and_literals_on_the_cpu_device() {
    let n = 12;
    let a = f64s(n, 920, -3.0, 3.0);
    let mut b = f64s(n, 921, -3.0, 3.0);
    b[..3].copy_from_slice(&a[..3]); // some equal pairs for eq/le/ge
    let pos = f64s(n, 922, 0.2, 3.0);
    type Bin = fn(f64, f64) -> f64;
    let cases: [(&str, BinaryFn, Bin); 7] = [
        ("add", |x, y| x + y, |x, y| x + y),
        ("sub", |x, y| x - y, |x, y| x - y),
        ("mul", |x, y| x * y, |x, y| x * y),
        ("div", |x, y| x / y, |x, y| x / y),
        ("max", Tensor::maximum, f64::max),
        ("min", Tensor::minimum, f64::min),
        ("rem", Tensor::rem, |x, y| x % y),
    ];
    let args = [f64_arr(&a, &[3, 4]), f64_arr(&b, &[3, 4])];
    for (name, op, rust) in cases {
        let got = f64_vals(&on_cpu(binary(op), &args)[0]);
        let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &y)| rust(x, y)).collect();
        assert_eq!(got, want, "{name} in f64");
    }
    let got = f64_vals(
        &on_cpu(
            binary(Tensor::pow),
            &[f64_arr(&pos, &[12]), f64_arr(&b, &[12])],
        )[0],
    );
    let want: Vec<f64> = pos.iter().zip(&b).map(|(x, y)| x.powf(*y)).collect();
    assert_eq!(got, want, "pow in f64");
    assert_not_f32(&got, "pow");
    type Cmp = fn(&f64, &f64) -> bool;
    let cmps: [(&str, BinaryFn, Cmp); 4] = [
        ("eq", Tensor::eq, |x, y| x == y),
        ("lt", Tensor::lt, |x, y| x < y),
        ("le", Tensor::le, |x, y| x <= y),
        ("gt", Tensor::gt, |x, y| x > y),
    ];
    for (name, op, rust) in cmps {
        let got = on_cpu(binary(op), &args);
        let want: Vec<bool> = a.iter().zip(&b).map(|(x, y)| rust(x, y)).collect();
        assert!(
            want.contains(&true) && want.contains(&false),
            "{name}: both outcomes"
        );
        assert_eq!(got[0].to_vec::<bool>().unwrap(), want, "{name} in f64");
    }
    // f32 op f64 -> f64 (JAX with x64): the f32 operand is widened exactly, either side, with
    // broadcasting. A Rust literal is weakly typed: an f64 tensor keeps f64, and the f32 literal
    // is widened exactly (0.1f32 as f64, not 0.1).
    let c = f32s(4, 923, -3.0, 3.0);
    let got = on_cpu(
        |t: &[Tensor]| {
            vec![
                &t[0] + &t[1],
                &t[1] * &t[0],
                &t[1] * 0.1,
                2.0 - &t[1],
                t[1].gt(&Tensor::scalar(0.0f32)).where_(&t[1], &t[0]),
            ]
        },
        &[f32_arr(&c, &[4]), f64_arr(&b, &[3, 4])],
    );
    let bc = |i: usize| c[i % 4] as f64;
    let want_add: Vec<f64> = (0..n).map(|i| bc(i) + b[i]).collect();
    let want_mul: Vec<f64> = (0..n).map(|i| b[i] * bc(i)).collect();
    let want_lit: Vec<f64> = b.iter().map(|v| v * (0.1f32 as f64)).collect();
    let want_rsub: Vec<f64> = b.iter().map(|v| 2.0 - v).collect();
    let want_where: Vec<f64> = (0..n)
        .map(|i| if b[i] > 0.0 { b[i] } else { bc(i) })
        .collect();
    assert_eq!(f64_vals(&got[0]), want_add, "f32 [4] + f64 [3, 4]");
    assert_eq!(f64_vals(&got[1]), want_mul, "f64 [3, 4] * f32 [4]");
    assert_eq!(f64_vals(&got[2]), want_lit, "f64 * 0.1 literal");
    assert_eq!(f64_vals(&got[3]), want_rsub, "2.0 - f64");
    assert_eq!(f64_vals(&got[4]), want_where, "where(.., f64, f32)");
}

#[test]
fn f64_reductions_and_matmul_on_the_cpu_device() {
    let shape = [3, 4, 5];
    let x = f64s(60, 930, -2.0, 2.0);
    let got = on_cpu(
        |t: &[Tensor]| {
            vec![
                t[0].sum(2, false),
                t[0].prod([0, 2], false),
                t[0].max(1, false),
                t[0].min([0, 1, 2], false),
                t[0].mean(0, false),
            ]
        },
        &[f64_arr(&x, &shape)],
    );
    let at = |i: usize, j: usize, k: usize| x[(i * 4 + j) * 5 + k];
    let sum: Vec<f64> = (0..12)
        .map(|ij| (0..5).map(|k| at(ij / 4, ij % 4, k)).sum())
        .collect();
    let prod: Vec<f64> = (0..4)
        .map(|j| {
            (0..3)
                .flat_map(|i| (0..5).map(move |k| (i, k)))
                .map(|(i, k)| at(i, j, k))
                .product()
        })
        .collect();
    let max: Vec<f64> = (0..15)
        .map(|ik| {
            (0..4)
                .map(|j| at(ik / 5, j, ik % 5))
                .fold(f64::MIN, f64::max)
        })
        .collect();
    let min = x.iter().cloned().fold(f64::MAX, f64::min);
    let mean: Vec<f64> = (0..20)
        .map(|jk| (0..3).map(|i| at(i, jk / 5, jk % 5)).sum::<f64>() / 3.0)
        .collect();
    // Sums in another order than the interpreter's differ in the last bits only.
    let tight = Tol::new(1e-14, 1e-15);
    let want = |v: Vec<f64>, shape: &[usize]| HostArray::from_vec(v, shape).unwrap();
    assert_close(&got[0], &want(sum, &[3, 4]), tight, "sum axis 2 in f64");
    assert_close(&got[1], &want(prod, &[4]), tight, "prod axes [0, 2] in f64");
    assert_close(
        &got[2],
        &want(max, &[3, 5]),
        Tol::EXACT,
        "max axis 1 in f64",
    );
    assert_close(&got[3], &want(vec![min], &[]), Tol::EXACT, "min all in f64");
    assert_close(&got[4], &want(mean, &[4, 5]), tight, "mean axis 0 in f64");
    assert_not_f32(&f64_vals(&got[0]), "sum");
    // argmax/argmin tell apart values that f32 would round to one tie.
    let close = [1.0, 1.0 + 1e-12, 0.5, -2.0, -2.0 - 1e-12, 0.0];
    assert_eq!((close[0] as f32), (close[1] as f32), "the pair ties in f32");
    let got = on_cpu(
        |t: &[Tensor]| vec![t[0].argmax(1, false), t[0].argmin(1, false)],
        &[f64_arr(&close, &[2, 3])],
    );
    assert_eq!(got[0].to_vec::<i32>().unwrap(), vec![1, 2]);
    assert_eq!(got[1].to_vec::<i32>().unwrap(), vec![2, 1]);
    // matmul, plain and batched, against the triple loop in f64.
    let (m, k, n) = (3usize, 7usize, 4usize);
    let a = f64s(2 * m * k, 931, -1.5, 1.5);
    let b = f64s(k * n, 932, -1.5, 1.5);
    let got = on_cpu(
        |t: &[Tensor]| vec![t[0].matmul(&t[1])],
        &[f64_arr(&a, &[2, m, k]), f64_arr(&b, &[k, n])],
    );
    let want: Vec<f64> = (0..2 * m * n)
        .map(|p| {
            let (bi, i, j) = (p / (m * n), (p / n) % m, p % n);
            (0..k).map(|l| a[(bi * m + i) * k + l] * b[l * n + j]).sum()
        })
        .collect();
    assert_close(
        &got[0],
        &HostArray::from_vec(want, &[2, m, n]).unwrap(),
        tight,
        "matmul f64",
    );
    assert_not_f32(&f64_vals(&got[0]), "matmul");
}

#[test]
fn f64_layout_indexing_and_select_on_the_cpu_device() {
    let x = f64s(6, 940, -2.0, 2.0);
    let got = on_cpu(
        |t: &[Tensor]| {
            vec![
                t[0].t(),
                t[0].reshape(&[3, 2]).slice(&[1, 0], &[3, 2], None),
                t[0].pad(&[0, 1], &[1, 0], 0.25f32),
                Tensor::concatenate(&[&t[0], &t[0].neg()], 0),
                t[0].index_take(&t[1], 1),
                t[0].gt(&Tensor::scalar(0.0f64))
                    .where_(&t[0], &t[0].square()),
                t[0].broadcast_to(&[2, 2, 3]),
            ]
        },
        &[f64_arr(&x, &[2, 3]), i32_arr(&[2, -3, 1], &[3])],
    );
    let at = |i: usize, j: usize| x[i * 3 + j];
    assert_eq!(
        f64_vals(&got[0]),
        vec![at(0, 0), at(1, 0), at(0, 1), at(1, 1), at(0, 2), at(1, 2)]
    );
    assert_eq!(f64_vals(&got[1]), x[2..].to_vec());
    let mut padded = vec![0.25; 3 * 4];
    for i in 0..2 {
        for j in 0..3 {
            padded[i * 4 + j + 1] = at(i, j);
        }
    }
    assert_eq!(f64_vals(&got[2]), padded);
    let neg: Vec<f64> = x.iter().map(|v| -v).collect();
    assert_eq!(f64_vals(&got[3]), [x.clone(), neg].concat());
    assert_eq!(
        f64_vals(&got[4]),
        vec![at(0, 2), at(0, 0), at(0, 1), at(1, 2), at(1, 0), at(1, 1)]
    );
    let sel: Vec<f64> = x.iter().map(|&v| if v > 0.0 { v } else { v * v }).collect();
    assert_eq!(f64_vals(&got[5]), sel);
    assert_eq!(f64_vals(&got[6]), [x.clone(), x.clone()].concat());
}

#[test]
fn f64_casts_to_and_from_every_dtype() {
    // From every dtype to f64: exact.
    for from in DTYPES {
        let input = cast_input(from);
        let got = on_cpu(
            |t: &[Tensor]| vec![t[0].cast(DType::F64)],
            std::slice::from_ref(&input),
        );
        let want: Vec<f64> = host(&input).to_f64();
        assert_eq!(f64_vals(&got[0]), want, "{from} -> f64");
    }
    // From f64 to every dtype, with Rust's `as` (truncation toward zero, saturation, NaN -> 0)
    // and `!= 0` for bool: convert_element_type's rules, as for f32.
    let v = [
        0.3,
        -2.7,
        1e20,
        -1e20,
        3e9,
        -3e9,
        f64::NAN,
        -0.0,
        1e300,
        16_777_217.0,
    ];
    let got = on_cpu(
        |t: &[Tensor]| {
            vec![
                t[0].cast(DType::F32),
                t[0].cast(DType::I32),
                t[0].cast(DType::U32),
                t[0].cast(DType::Bool),
            ]
        },
        &[f64_arr(&v, &[10])],
    );
    let f: Vec<u32> = got[0]
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    let want_f: Vec<u32> = v.iter().map(|&x| (x as f32).to_bits()).collect();
    assert_eq!(f, want_f, "f64 -> f32 (round to nearest, 1e300 -> inf)");
    let want_i: Vec<i32> = v.iter().map(|&x| x as i32).collect();
    assert_eq!(got[1].to_vec::<i32>().unwrap(), want_i, "f64 -> i32");
    let want_u: Vec<u32> = v.iter().map(|&x| x as u32).collect();
    assert_eq!(got[2].to_vec::<u32>().unwrap(), want_u, "f64 -> u32");
    let want_b: Vec<bool> = v.iter().map(|&x| x != 0.0).collect();
    assert_eq!(got[3].to_vec::<bool>().unwrap(), want_b, "f64 -> bool");
    assert_eq!(
        want_i[2..6],
        [i32::MAX, i32::MIN, i32::MAX, i32::MIN],
        "saturates"
    );
    // The value casts of the cast test's inputs also hold for f64 (0.3 stays 0.3 until f32).
    let got = on_cpu(
        |t: &[Tensor]| vec![t[0].cast(DType::F32)],
        &[cast_input(DType::F64)],
    );
    let want: Vec<f32> = host(&cast_input(DType::F64))
        .to_f64()
        .iter()
        .map(|&x| x as f32)
        .collect();
    assert_eq!(got[0].to_vec::<f32>().unwrap(), want);
}

/// `prim` applied to `inputs` (all f64 of one shape) by the reference interpreter.
fn eval_prim_f64(prim: Prim, inputs: &[&[f64]]) -> Vec<f64> {
    let n = inputs[0].len();
    let mut g = Graph::default();
    let ins: Vec<brigade::Var> = inputs
        .iter()
        .map(|_| g.new_var(Aval::new(vec![n], DType::F64)))
        .collect();
    let out = g.new_var(Aval::new(vec![n], DType::F64));
    g.inputs = ins.clone();
    g.eqns.push(brigade::trace::graph::Eqn::new(prim, ins, out));
    g.outputs = vec![out];
    let hosts: Vec<HostArray> = inputs
        .iter()
        .map(|v| HostArray::from_vec(v.to_vec(), &[n]).unwrap())
        .collect();
    f64_vals(&brigade::reference::eval_graph(&g, &hosts).unwrap()[0])
}

#[test]
fn f64_erf_inv_and_fma_in_the_reference() {
    use brigade::ops::UnaryOp;
    let erf_inv = |y: &[f64]| {
        eval_prim_f64(
            Prim::Elementwise(ElementwiseOp::Unary(UnaryOp::ErfInv)),
            &[y],
        )
    };
    // Over (-1, 1), the tails included.
    let mut y = f64s(40, 950, -0.999, 0.999);
    y.extend([0.5, -0.9, 1.0 - 1e-9, -(1.0 - 1e-13), 1e-300]);
    let x = erf_inv(&y);
    // The same function as the f32 erf_inv (XLA's, bit-exact with JAX): within f32 precision.
    let y32: Vec<f32> = y.iter().map(|&v| v as f32).collect();
    let mut g = Graph::default();
    let i = g.new_var(Aval::new(vec![y.len()], DType::F32));
    let o = g.new_var(Aval::new(vec![y.len()], DType::F32));
    g.inputs = vec![i];
    g.eqns.push(brigade::trace::graph::Eqn::new(
        Prim::Elementwise(ElementwiseOp::Unary(UnaryOp::ErfInv)),
        vec![i],
        o,
    ));
    g.outputs = vec![o];
    let x32 = brigade::reference::eval_graph(
        &g,
        &[HostArray::from_vec(y32.clone(), &[y.len()]).unwrap()],
    )
    .unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    for k in 0..y.len() {
        if (y[k] as f32).abs() == 1.0 || y[k].abs() > 0.9999 {
            continue; // f32 rounds the argument to (or next to) 1: its erf_inv is of another point
        }
        // x32 is erf_inv of y rounded to f32: shift by the derivative times that rounding.
        let slope = std::f64::consts::PI.sqrt() / 2.0 * (x[k] * x[k]).exp();
        let shifted = x[k] + slope * (y32[k] as f64 - y[k]);
        assert!(
            (x32[k] as f64 - shifted).abs() <= 4e-7 * shifted.abs() + 1e-30,
            "erf_inv({}) = {} in f64 but {} in f32",
            y[k],
            x[k],
            x32[k]
        );
    }
    // Odd, and its derivative is sqrt(pi)/2 exp(erf_inv(y)^2): central differences with h = 1e-6
    // agree to ~1e-9 only when erf_inv is accurate to ~1e-15 (f64), not ~1e-7 (f32).
    let neg: Vec<f64> = y.iter().map(|v| -v).collect();
    let xn = erf_inv(&neg);
    assert!(x.iter().zip(&xn).all(|(a, b)| *a == -*b), "erf_inv is odd");
    let h = 1e-6;
    let inner: Vec<f64> = y.iter().copied().filter(|v| v.abs() < 0.99).collect();
    let up: Vec<f64> = inner.iter().map(|v| v + h).collect();
    let down: Vec<f64> = inner.iter().map(|v| v - h).collect();
    let (xi, xu, xd) = (erf_inv(&inner), erf_inv(&up), erf_inv(&down));
    for k in 0..inner.len() {
        let fd = (xu[k] - xd[k]) / (up[k] - down[k]);
        let d = std::f64::consts::PI.sqrt() / 2.0 * (xi[k] * xi[k]).exp();
        assert!(
            (fd - d).abs() <= 1e-8 * d,
            "erf_inv'({}) = {d}, central differences give {fd}",
            inner[k]
        );
    }
    // The edges.
    let e = erf_inv(&[1.0, -1.0, 0.0, 1.5]);
    assert_eq!(e[..3], [f64::INFINITY, f64::NEG_INFINITY, 0.0]);
    assert!(e[3].is_nan());
    // fma rounds once, in f64: (1 + 2^-30)(1 - 2^-30) - 1 is -2^-60 fused, 0 unfused.
    let (a, b, c) = (1.0 + 2f64.powi(-30), 1.0 - 2f64.powi(-30), -1.0);
    let mut av = f64s(7, 951, -2.0, 2.0);
    let mut bv = f64s(7, 952, -2.0, 2.0);
    let mut cv = f64s(7, 953, -2.0, 2.0);
    av.push(a);
    bv.push(b);
    cv.push(c);
    let got = eval_prim_f64(Prim::Elementwise(ElementwiseOp::Fma), &[&av, &bv, &cv]);
    let want: Vec<f64> = (0..8).map(|k| av[k].mul_add(bv[k], cv[k])).collect();
    assert_eq!(got, want, "fma in f64");
    assert_eq!(got[7], -(2f64.powi(-60)));
    assert_eq!(a * b + c, 0.0, "unfused, the product rounds to 1");
}

#[test]
fn eager_f64_ops_on_host_arrays_run_on_the_host() {
    // No jit, no device named: host f64 data is computed by the reference interpreter (a GPU
    // device would refuse it), and the result stays f64 on the host.
    let x = f64s(5, 960, -2.0, 2.0);
    let t = Tensor::from(f64_arr(&x, &[5]));
    let y = (t.exp() * 2.0 + &Tensor::from(f32_arr(&[0.5], &[1]))).sum_all();
    let a = y.to_array().unwrap();
    assert!(a.device().is_none(), "the result lives on the host");
    let want: f64 = x.iter().map(|v| v.exp() * 2.0 + 0.5).sum();
    let got = a.to_vec::<f64>().unwrap()[0];
    assert!((got - want).abs() <= 1e-15 * want.abs(), "{got} vs {want}");
}
