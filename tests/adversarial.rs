//! The adversarial suite: bad and extreme inputs across every op family, transform, collective,
//! layout string and limit, tried through the public API the way a hostile (or careless) user
//! would. Every case asserts the exact typed error (variant, the sizes its message names, and that it
//! counts as a user error) and that nothing panics: under `jit` on the Vulkan and the GL device, and
//! eagerly on each of them. The proptest at the end builds random invalid programs.
//!
//! Each test prints how many inputs it tried (`cargo test --test adversarial -- --nocapture`).

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};

use brigade::ops::DotDims;
use brigade::{
    Array, DType, Error, Runtime, TakeMode, Tensor, all_gather, all_to_all, cond, fori_loop, grad,
    jit, pmap, ppermute, psum, psum_scatter, random, scan, shard_map, switch, vmap,
};
use common::*;

type F = fn(&[Tensor]) -> Vec<Tensor>;

/// One bad input: the arguments, the program, the error it must give and what its message names.
struct Case {
    name: &'static str,
    args: fn() -> Vec<Array>,
    f: F,
    want: fn(&Error) -> bool,
    needles: &'static [&'static str],
    /// Whether the same program also fails eagerly (some errors exist only while tracing).
    eager: bool,
}

macro_rules! case {
    ($name:expr, [$($arg:expr),*], |$a:ident| $body:expr, $pat:pat, [$($needle:expr),*]) => {
        case!(@ $name, true, [$($arg),*], |$a| $body, $pat, [$($needle),*])
    };
    (trace_only $name:expr, [$($arg:expr),*], |$a:ident| $body:expr, $pat:pat, [$($needle:expr),*]) => {
        case!(@ $name, false, [$($arg),*], |$a| $body, $pat, [$($needle),*])
    };
    (@ $name:expr, $eager:expr, [$($arg:expr),*], |$a:ident| $body:expr, $pat:pat, [$($needle:expr),*]) => {
        Case {
            name: $name,
            args: || vec![$($arg),*],
            f: |$a: &[Tensor]| $body,
            want: |e| matches!(e, $pat),
            needles: &[$($needle),*],
            eager: $eager,
        }
    };
}

fn f(shape: &[usize]) -> Array {
    rand_f32(shape, 7 + shape.iter().sum::<usize>() as u64)
}
fn i(shape: &[usize]) -> Array {
    rand_i32(shape, 11, -5, 5)
}
fn u(shape: &[usize]) -> Array {
    rand_u32(shape, 13, 1, 9)
}
fn b(shape: &[usize]) -> Array {
    rand_bool(shape, 17)
}
fn s(v: f32) -> Tensor {
    Tensor::scalar(v)
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "?".into())
}

/// Checks `got` against the case: the variant, the needles, a user error.
fn check_error(c: &Case, how: &str, got: std::thread::Result<Result<(), Error>>) {
    let e = match got {
        Ok(Err(e)) => e,
        Ok(Ok(())) => panic!(
            "{} ({how}): expected an error, the program succeeded",
            c.name
        ),
        Err(p) => panic!("{} ({how}): PANICKED: {}", c.name, panic_message(&p)),
    };
    assert!((c.want)(&e), "{} ({how}): wrong error {e:?}", c.name);
    let msg = e.to_string();
    for n in c.needles {
        assert!(
            msg.contains(n),
            "{} ({how}): {n:?} is not in the message:\n{msg}",
            c.name
        );
    }
    assert!(
        e.is_user_error(),
        "{} ({how}): {e:?} should be a user error",
        c.name
    );
}

/// Runs every case under jit and eagerly on every GPU device; returns the number of checks.
fn run_cases(cases: &[Case]) -> usize {
    let mut checks = 0;
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let name = dev.name().to_string();
        for c in cases {
            let args = (c.args)();
            let j = jit(c.f).on(&dev);
            let got = catch_unwind(AssertUnwindSafe(|| j.call(&args).map(|_| ())));
            check_error(c, &format!("jit on {name}"), got);
            checks += 1;
            if c.eager {
                let got = catch_unwind(AssertUnwindSafe(|| {
                    let ts: Vec<Tensor> = args
                        .iter()
                        .map(|a| a.to_device(&dev).map(Tensor::from))
                        .collect::<Result<_, _>>()?;
                    for t in (c.f)(&ts) {
                        t.to_array()?;
                    }
                    Ok(())
                }));
                check_error(c, &format!("eager on {name}"), got);
                checks += 1;
            }
        }
    }
    checks
}

fn report(what: &str, inputs: usize, checks: usize) {
    println!("adversarial {what}: {inputs} bad inputs, {checks} checks, every one a typed error");
}

// ---- elementwise -----------------------------------------------------------------------------------

/// Every binary op against operands that do not broadcast, and operands of different dtypes.
#[test]
fn binary_ops_shape_and_dtype_mismatches() {
    type B = fn(&Tensor, &Tensor) -> Tensor;
    let ops: [(&str, B); 16] = [
        ("add", |a, b| a.add(b)),
        ("sub", |a, b| a.sub(b)),
        ("mul", |a, b| a.mul(b)),
        ("div", |a, b| a.div(b)),
        ("pow", |a, b| a.pow(b)),
        ("max", |a, b| a.maximum(b)),
        ("min", |a, b| a.minimum(b)),
        ("rem", |a, b| a.rem(b)),
        ("eq", |a, b| a.eq(b)),
        ("ne", |a, b| a.ne(b)),
        ("lt", |a, b| a.lt(b)),
        ("le", |a, b| a.le(b)),
        ("gt", |a, b| a.gt(b)),
        ("ge", |a, b| a.ge(b)),
        ("and", |a, b| a.and(b)),
        ("or", |a, b| a.or(b)),
    ];
    let mut inputs = 0;
    let mut checks = 0;
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        for (name, op) in ops {
            // Shapes that do not broadcast: the error names both shapes and the op.
            for (l, r) in [
                (vec![3, 4], vec![5]),
                (vec![2, 3], vec![3, 2]),
                (vec![4], vec![2, 3]),
            ] {
                let (x, y) = (f(&l), f(&r));
                let eager = Tensor::from(x.to_device(&dev).unwrap())
                    .binary_for_test(op, &Tensor::from(y.to_device(&dev).unwrap()));
                let e = eager.to_array().unwrap_err();
                assert_eq!(
                    e,
                    Error::ShapeMismatchBinaryOp {
                        op: name,
                        lhs: l.clone(),
                        rhs: r.clone()
                    },
                    "{name} eager on {}",
                    dev.name()
                );
                let j = jit(move |a: &[Tensor]| vec![op(&a[0], &a[1])]).on(&dev);
                let e = j.call(&[x, y]).unwrap_err();
                assert!(
                    matches!(&e, Error::ShapeMismatchBinaryOp { op, lhs, rhs } if *op == name && *lhs == l && *rhs == r),
                    "{name} under jit on {}: {e:?}",
                    dev.name()
                );
                inputs += 1;
                checks += 2;
            }
            // Mixed dtypes (f32 with i32, i32 with u32): a dtype mismatch naming both.
            for (x, y, dl, dr) in [
                (f(&[3]), i(&[3]), "f32", "i32"),
                (i(&[3]), u(&[3]), "i32", "u32"),
                (u(&[2, 2]), f(&[2, 2]), "u32", "f32"),
            ] {
                let j = jit(move |a: &[Tensor]| vec![op(&a[0], &a[1])]).on(&dev);
                let e = j.call(&[x, y]).unwrap_err();
                assert!(
                    matches!(&e, Error::DTypeMismatch { op, .. } if *op == name),
                    "{name}: {e:?}"
                );
                let msg = e.to_string();
                assert!(msg.contains(dl) && msg.contains(dr), "{msg}");
                inputs += 1;
                checks += 1;
            }
        }
    }
    report("binary ops", inputs / 2, checks);
}

/// Extension used by the table above: a binary op given as a function pointer.
trait BinaryForTest {
    fn binary_for_test(&self, op: fn(&Tensor, &Tensor) -> Tensor, o: &Tensor) -> Tensor;
}
impl BinaryForTest for Tensor {
    fn binary_for_test(&self, op: fn(&Tensor, &Tensor) -> Tensor, o: &Tensor) -> Tensor {
        op(self, o)
    }
}

#[test]
fn elementwise_dtype_errors() {
    let cases = [
        case!(
            "and of floats",
            [f(&[3]), f(&[3])],
            |a| vec![a[0].and(&a[1])],
            Error::BadDType {
                op: "and",
                dtype: DType::F32,
                ..
            },
            ["and", "f32", "compare first"]
        ),
        case!(
            "or of floats",
            [f(&[2, 2]), f(&[2, 2])],
            |a| vec![a[0].or(&a[1])],
            Error::BadDType { op: "or", .. },
            ["or", "f32"]
        ),
        case!(
            "not of a float",
            [f(&[3])],
            |a| vec![a[0].not()],
            Error::BadDType { op: "not", .. },
            ["not", "f32"]
        ),
        case!(
            "pow of i32",
            [i(&[3]), i(&[3])],
            |a| vec![a[0].pow(&a[1])],
            Error::BadDType {
                op: "pow",
                dtype: DType::I32,
                ..
            },
            ["pow", "i32", "cast to f32"]
        ),
        case!(
            "pow of u32",
            [u(&[3]), u(&[3])],
            |a| vec![a[0].pow(&a[1])],
            Error::BadDType {
                op: "pow",
                dtype: DType::U32,
                ..
            },
            ["u32"]
        ),
        case!(
            "add of bools",
            [b(&[4]), b(&[4])],
            |a| vec![&a[0] + &a[1]],
            Error::BadDType {
                op: "add",
                dtype: DType::Bool,
                ..
            },
            ["add", "bool"]
        ),
        case!(
            "mul of bools",
            [b(&[4]), b(&[4])],
            |a| vec![&a[0] * &a[1]],
            Error::BadDType {
                op: "mul",
                dtype: DType::Bool,
                ..
            },
            ["bool"]
        ),
        case!(
            "div of bools",
            [b(&[2]), b(&[2])],
            |a| vec![&a[0] / &a[1]],
            Error::BadDType { op: "div", .. },
            ["bool"]
        ),
        case!(
            "sub of bools",
            [b(&[2]), b(&[2])],
            |a| vec![a[0].sub(&a[1])],
            Error::BadDType { op: "sub", .. },
            ["bool"]
        ),
        case!(
            "rem of bools",
            [b(&[2]), b(&[2])],
            |a| vec![a[0].rem(&a[1])],
            Error::BadDType { op: "rem", .. },
            ["bool"]
        ),
        case!(
            "neg of a bool",
            [b(&[3])],
            |a| vec![a[0].neg()],
            Error::BadDType {
                op: "neg",
                dtype: DType::Bool,
                ..
            },
            ["neg", "bool"]
        ),
        case!(
            "abs of a bool",
            [b(&[3])],
            |a| vec![a[0].abs()],
            Error::BadDType { op: "abs", .. },
            ["abs", "bool"]
        ),
        case!(
            "relu of a bool",
            [b(&[3])],
            |a| vec![a[0].relu()],
            Error::BadDType { op: "relu", .. },
            ["bool"]
        ),
        case!(
            "square of a bool",
            [b(&[3])],
            |a| vec![a[0].square()],
            Error::BadDType { op: "square", .. },
            ["bool"]
        ),
        case!(
            "sign of a bool",
            [b(&[3])],
            |a| vec![a[0].sign()],
            Error::BadDType { op: "sign", .. },
            ["bool"]
        ),
        case!(
            "floor_divide of bools",
            [b(&[3]), b(&[3])],
            |a| vec![a[0].floor_divide(&a[1])],
            Error::BadDType { op: "div", .. },
            ["bool"]
        ),
        case!(
            "remainder f32 by i32",
            [f(&[3]), i(&[3])],
            |a| vec![a[0].remainder(&a[1])],
            Error::DTypeMismatch { op: "rem", .. },
            ["f32", "i32"]
        ),
        case!(
            "select with an f32 predicate",
            [f(&[3]), f(&[3]), f(&[3])],
            |a| vec![a[0].where_(&a[1], &a[2])],
            Error::BadDType { .. },
            ["f32"]
        ),
        case!(
            "select with an i32 predicate",
            [i(&[3]), f(&[3]), f(&[3])],
            |a| vec![a[0].where_(&a[1], &a[2])],
            Error::BadDType { .. },
            ["i32"]
        ),
        case!(
            "select of mixed dtypes",
            [b(&[3]), f(&[3]), i(&[3])],
            |a| vec![a[0].where_(&a[1], &a[2])],
            Error::DTypeMismatch { .. },
            ["f32", "i32"]
        ),
        case!(
            "select of shapes that do not broadcast",
            [b(&[3]), f(&[4]), f(&[3])],
            |a| vec![a[0].where_(&a[1], &a[2])],
            Error::ShapeMismatchBinaryOp { .. },
            ["[3]", "[4]"]
        ),
        case!(
            "u32 plus an f32 array",
            [u(&[3]), f(&[3])],
            |a| vec![&a[0] + &a[1]],
            Error::DTypeMismatch { op: "add", .. },
            ["u32", "f32"]
        ),
    ];
    let n = run_cases(&cases);
    report("elementwise dtypes", cases.len(), n);
}

// ---- reductions ------------------------------------------------------------------------------------

#[test]
fn reduction_errors() {
    let cases = [
        case!(
            "sum axis 2 of rank 2",
            [f(&[2, 3])],
            |a| vec![a[0].sum(2i64, false)],
            Error::BadAxis {
                op: "reduce_sum",
                axis: 2,
                rank: 2,
                ..
            },
            ["axis 2", "rank 2", "[2, 3]"]
        ),
        case!(
            "sum axis -3 of rank 2",
            [f(&[2, 3])],
            |a| vec![a[0].sum(-3i64, false)],
            Error::BadAxis { axis: -3, .. },
            ["axis -3"]
        ),
        case!(
            "prod axis 9",
            [f(&[4])],
            |a| vec![a[0].prod(9i64, true)],
            Error::BadAxis {
                op: "reduce_prod",
                ..
            },
            ["axis 9"]
        ),
        case!(
            "max axis 5",
            [f(&[2, 2])],
            |a| vec![a[0].max(5i64, false)],
            Error::BadAxis {
                op: "reduce_max",
                ..
            },
            ["axis 5"]
        ),
        case!(
            "min axis -9",
            [f(&[2, 2])],
            |a| vec![a[0].min(-9i64, false)],
            Error::BadAxis {
                op: "reduce_min",
                ..
            },
            ["axis -9"]
        ),
        case!(
            "mean axis 3",
            [f(&[2, 2, 2])],
            |a| vec![a[0].mean(3i64, false)],
            Error::BadAxis { .. },
            ["axis 3"]
        ),
        case!(
            "sum over a repeated axis",
            [f(&[2, 3])],
            |a| vec![a[0].sum([0i64, 0], false)],
            Error::BadShapeArg { .. },
            ["repeated"]
        ),
        case!(
            "sum over an axis named twice (0 and -2)",
            [f(&[2, 3])],
            |a| vec![a[0].sum([0i64, -2], false)],
            Error::BadShapeArg { .. },
            ["repeated"]
        ),
        case!(
            "sum of a scalar over axis 0",
            [f(&[])],
            |a| vec![a[0].sum(0i64, false)],
            Error::BadAxis { rank: 0, .. },
            ["rank 0"]
        ),
        case!(
            "argmax axis 2",
            [f(&[2, 3])],
            |a| vec![a[0].argmax(2, false)],
            Error::BadAxis { .. },
            ["axis 2"]
        ),
        case!(
            "argmin axis -4",
            [f(&[2, 3])],
            |a| vec![a[0].argmin(-4, false)],
            Error::BadAxis { .. },
            ["axis -4"]
        ),
        case!(
            "argmax of an empty axis",
            [f(&[2, 0])],
            |a| vec![a[0].argmax(1, false)],
            Error::BadShapeArg { .. },
            ["[2, 0]"]
        ),
        case!(
            "argmin of an empty axis",
            [f(&[0, 3])],
            |a| vec![a[0].argmin(0, false)],
            Error::BadShapeArg { .. },
            ["[0, 3]"]
        ),
        case!(
            "softmax axis 3",
            [f(&[2, 3])],
            |a| vec![a[0].softmax(3)],
            Error::BadAxis { .. },
            ["axis 3"]
        ),
        case!(
            "log_softmax axis -3",
            [f(&[2, 3])],
            |a| vec![a[0].log_softmax(-3)],
            Error::BadAxis { .. },
            ["axis -3"]
        ),
        case!(
            "logsumexp axis 7",
            [f(&[5])],
            |a| vec![a[0].logsumexp(7i64, false)],
            Error::BadAxis { .. },
            ["axis 7"]
        ),
        case!(
            "sum of bools over a bad axis",
            [b(&[3])],
            |a| vec![a[0].sum(1i64, false)],
            Error::BadAxis { .. },
            ["axis 1"]
        ),
    ];
    let n = run_cases(&cases);
    report("reductions", cases.len(), n);
}

// ---- layout ----------------------------------------------------------------------------------------

#[test]
fn layout_errors() {
    let cases = [
        case!(
            "reshape 6 into 4",
            [f(&[2, 3])],
            |a| vec![a[0].reshape(&[4])],
            Error::BadReshape {
                from_n: 6,
                to_n: 4,
                ..
            },
            ["[2, 3]", "6 elements", "[4]"]
        ),
        case!(
            "reshape with two -1",
            [f(&[2, 3])],
            |a| vec![a[0].reshape(&[-1, -1])],
            Error::BadReshape { .. } | Error::BadShapeArg { .. },
            ["-1"]
        ),
        case!(
            "reshape -1 that does not divide",
            [f(&[2, 3])],
            |a| vec![a[0].reshape(&[-1, 4])],
            Error::BadReshape { .. } | Error::BadShapeArg { .. },
            ["4"]
        ),
        case!(
            "reshape to a negative size",
            [f(&[2, 3])],
            |a| vec![a[0].reshape(&[-2, 3])],
            Error::BadReshape { .. } | Error::BadShapeArg { .. },
            ["-2"]
        ),
        case!(
            "reshape a non-empty array to zero elements",
            [f(&[2])],
            |a| vec![a[0].reshape(&[0])],
            Error::BadReshape {
                from_n: 2,
                to_n: 0,
                ..
            },
            ["2 elements"]
        ),
        case!(
            "transpose with a short permutation",
            [f(&[2, 3, 4])],
            |a| vec![a[0].transpose(&[1, 0])],
            Error::BadShapeArg {
                op: "transpose",
                ..
            },
            ["[2, 3, 4]"]
        ),
        case!(
            "transpose with a repeated axis",
            [f(&[2, 3])],
            |a| vec![a[0].transpose(&[0, 0])],
            Error::BadShapeArg {
                op: "transpose",
                ..
            },
            ["[2, 3]"]
        ),
        case!(
            "transpose with an axis out of range",
            [f(&[2, 3])],
            |a| vec![a[0].transpose(&[0, 2])],
            Error::BadShapeArg {
                op: "transpose",
                ..
            },
            ["[2, 3]"]
        ),
        case!(
            "broadcast [3] to [4]",
            [f(&[3])],
            |a| vec![a[0].broadcast_to(&[4])],
            Error::BadShapeArg { .. } | Error::ShapeMismatchBinaryOp { .. },
            ["[3]", "[4]"]
        ),
        case!(
            "broadcast [2, 3] to the lower rank [3]",
            [f(&[2, 3])],
            |a| vec![a[0].broadcast_to(&[3])],
            Error::BadShapeArg { .. } | Error::ShapeMismatchBinaryOp { .. },
            ["[2, 3]"]
        ),
        case!(
            "broadcast [2, 3] to [3, 3]",
            [f(&[2, 3])],
            |a| vec![a[0].broadcast_to(&[3, 3])],
            Error::BadShapeArg { .. } | Error::ShapeMismatchBinaryOp { .. },
            ["[2, 3]", "[3, 3]"]
        ),
        case!(
            "broadcast_in_dim with too few dims",
            [f(&[2, 3])],
            |a| vec![a[0].broadcast_in_dim(&[2, 3, 4], &[0])],
            Error::BadShapeArg { .. },
            ["[2, 3]"]
        ),
        case!(
            "broadcast_in_dim with dims out of order",
            [f(&[2, 3])],
            |a| vec![a[0].broadcast_in_dim(&[3, 2], &[1, 0])],
            Error::BadShapeArg { .. },
            ["[2, 3]"]
        ),
        case!(
            "broadcast_in_dim to a dim out of range",
            [f(&[2])],
            |a| vec![a[0].broadcast_in_dim(&[2, 2], &[5])],
            Error::BadShapeArg { .. },
            ["[2]"]
        ),
        case!(
            "expand_dims axis 3 of rank 1",
            [f(&[4])],
            |a| vec![a[0].expand_dims(3)],
            Error::BadAxis {
                op: "expand_dims",
                ..
            },
            ["axis 3"]
        ),
        case!(
            "expand_dims axis -3 of rank 1",
            [f(&[4])],
            |a| vec![a[0].expand_dims(-3)],
            Error::BadAxis {
                op: "expand_dims",
                ..
            },
            ["axis -3"]
        ),
        case!(
            "squeeze an axis of size 3",
            [f(&[1, 3])],
            |a| vec![a[0].squeeze(&[1])],
            Error::BadShapeArg { op: "squeeze", .. },
            ["size 3"]
        ),
        case!(
            "squeeze a repeated axis",
            [f(&[1, 3])],
            |a| vec![a[0].squeeze(&[0, 0])],
            Error::BadShapeArg { op: "squeeze", .. },
            ["repeated", "[1, 3]"]
        ),
        case!(
            "squeeze one axis named twice (0 and -2)",
            [f(&[1, 3])],
            |a| vec![a[0].squeeze(&[0, -2])],
            Error::BadShapeArg { op: "squeeze", .. },
            ["repeated"]
        ),
        case!(
            "squeeze axis out of range",
            [f(&[1, 3])],
            |a| vec![a[0].squeeze(&[2])],
            Error::BadAxis { op: "squeeze", .. },
            ["axis 2"]
        ),
        case!(
            "slice with start after limit",
            [f(&[5])],
            |a| vec![a[0].slice(&[3], &[2], None)],
            Error::BadShapeArg { op: "slice", .. },
            ["[5]"]
        ),
        case!(
            "slice past the end",
            [f(&[5])],
            |a| vec![a[0].slice(&[0], &[6], None)],
            Error::BadShapeArg { op: "slice", .. },
            ["[5]"]
        ),
        case!(
            "slice of the wrong rank",
            [f(&[2, 3])],
            |a| vec![a[0].slice(&[0], &[1], None)],
            Error::BadShapeArg { op: "slice", .. },
            ["[2, 3]"]
        ),
        case!(
            "slice with stride 0",
            [f(&[5])],
            |a| vec![a[0].slice(&[0], &[4], Some(&[0]))],
            Error::BadShapeArg { op: "slice", .. },
            ["[5]"]
        ),
        case!(
            "slice_axis on a bad axis",
            [f(&[5])],
            |a| vec![a[0].slice_axis(1, 0, 1)],
            Error::BadAxis { .. },
            ["axis 1"]
        ),
        case!(
            "slice_axis past the end",
            [f(&[5, 2])],
            |a| vec![a[0].slice_axis(0, 2, 9)],
            Error::BadShapeArg { .. },
            ["[5, 2]"]
        ),
        case!(
            "concatenate ranks 1 and 2",
            [f(&[3]), f(&[3, 1])],
            |a| vec![Tensor::concatenate(&[&a[0], &a[1]], 0)],
            Error::BadShapeArg {
                op: "concatenate",
                ..
            },
            ["[3]"]
        ),
        case!(
            "concatenate mismatched off-axis sizes",
            [f(&[2, 3]), f(&[2, 4])],
            |a| vec![Tensor::concatenate(&[&a[0], &a[1]], 0)],
            Error::BadShapeArg {
                op: "concatenate",
                ..
            },
            ["[2, 3]", "[2, 4]"]
        ),
        case!(
            "concatenate nothing",
            [],
            |_a| vec![Tensor::concatenate(&[], 0)],
            Error::BadShapeArg {
                op: "concatenate",
                ..
            },
            ["concatenate"]
        ),
        case!(
            "concatenate along axis 2 of rank 2",
            [f(&[2, 3]), f(&[2, 3])],
            |a| vec![Tensor::concatenate(&[&a[0], &a[1]], 2)],
            Error::BadAxis { .. },
            ["axis 2"]
        ),
        case!(
            "concatenate f32 with i32",
            [f(&[2]), i(&[2])],
            |a| vec![Tensor::concatenate(&[&a[0], &a[1]], 0)],
            Error::DTypeMismatch { .. },
            ["f32", "i32"]
        ),
        case!(
            "stack different shapes",
            [f(&[2]), f(&[3])],
            |a| vec![Tensor::stack(&[&a[0], &a[1]], 0)],
            Error::BadShapeArg { .. },
            ["[2]", "[3]"]
        ),
        case!(
            "stack nothing",
            [],
            |_a| vec![Tensor::stack(&[], 0)],
            Error::BadShapeArg { .. },
            ["stack"]
        ),
        case!(
            "stack along axis 3 of rank-1 parts",
            [f(&[2]), f(&[2])],
            |a| vec![Tensor::stack(&[&a[0], &a[1]], 3)],
            Error::BadAxis { .. },
            ["axis 3"]
        ),
        case!(
            "pad with too few entries",
            [f(&[2, 3])],
            |a| vec![a[0].pad(&[1], &[1], 0.0f32)],
            Error::BadShapeArg { op: "pad", .. },
            ["[2, 3]"]
        ),
        case!(
            "pad_interior with too many entries",
            [f(&[3])],
            |a| vec![a[0].pad_interior(&[0], &[0], &[1, 1], 0.0f32)],
            Error::BadShapeArg { op: "pad", .. },
            ["[3]"]
        ),
    ];
    let n = run_cases(&cases);
    report("layout", cases.len(), n);
}

// ---- dot, indexing, random -------------------------------------------------------------------------

#[test]
fn dot_indexing_and_random_errors() {
    let cases = [
        case!(
            "matmul [2,3] @ [4,5]",
            [f(&[2, 3]), f(&[4, 5])],
            |a| vec![a[0].matmul(&a[1])],
            Error::MatmulShape { .. },
            ["[2, 3]", "[4, 5]"]
        ),
        case!(
            "matmul of vectors of different lengths",
            [f(&[3]), f(&[4])],
            |a| vec![a[0].matmul(&a[1])],
            Error::MatmulShape { .. },
            ["[3]", "[4]"]
        ),
        case!(
            "batched matmul with different batches",
            [f(&[2, 3, 4]), f(&[3, 4, 5])],
            |a| vec![a[0].matmul(&a[1])],
            Error::MatmulShape { .. } | Error::ShapeMismatchBinaryOp { .. },
            ["[2, 3, 4]"]
        ),
        case!(
            "matmul of a scalar",
            [f(&[]), f(&[3])],
            |a| vec![a[0].matmul(&a[1])],
            Error::MatmulShape { .. } | Error::BadShapeArg { .. },
            ["[]"]
        ),
        case!(
            "matmul f32 by i32",
            [f(&[2, 2]), i(&[2, 2])],
            |a| vec![a[0].matmul(&a[1])],
            Error::DTypeMismatch { .. },
            ["f32", "i32"]
        ),
        case!(
            "dot_general contracting sizes 3 and 4",
            [f(&[2, 3]), f(&[4, 2])],
            |a| vec![a[0].dot_general(
                &a[1],
                DotDims {
                    lhs_contract: vec![1],
                    rhs_contract: vec![0],
                    lhs_batch: vec![],
                    rhs_batch: vec![]
                }
            )],
            Error::MatmulShape { .. },
            ["[2, 3]", "[4, 2]"]
        ),
        case!(
            "dot_general contracting an axis out of range",
            [f(&[2, 3]), f(&[3, 2])],
            |a| vec![a[0].dot_general(
                &a[1],
                DotDims {
                    lhs_contract: vec![5],
                    rhs_contract: vec![0],
                    lhs_batch: vec![],
                    rhs_batch: vec![]
                }
            )],
            Error::MatmulShape { .. } | Error::BadAxis { .. },
            ["5"]
        ),
        case!(
            "dot_general with unequal contract lists",
            [f(&[2, 3]), f(&[3, 2])],
            |a| vec![a[0].dot_general(
                &a[1],
                DotDims {
                    lhs_contract: vec![1],
                    rhs_contract: vec![],
                    lhs_batch: vec![],
                    rhs_batch: vec![]
                }
            )],
            Error::MatmulShape { .. },
            ["[2, 3]"]
        ),
        case!(
            "take with f32 indices",
            [f(&[4]), f(&[2])],
            |a| vec![a[0].index_take(&a[1], 0)],
            Error::BadDType {
                op: "take (indices)",
                ..
            },
            ["f32", "cast"]
        ),
        case!(
            "take along axis 1 of a vector",
            [f(&[4]), i(&[2])],
            |a| vec![a[0].index_take(&a[1], 1)],
            Error::BadAxis { op: "take", .. },
            ["axis 1"]
        ),
        case!(
            "take from an empty axis",
            [f(&[0, 2]), i(&[3])],
            |a| vec![a[0].index_take(&a[1], 0)],
            Error::BadShapeArg { op: "take", .. },
            ["size 0"]
        ),
        case!(
            "take_mode fill with bool indices",
            [f(&[4]), b(&[2])],
            |a| vec![a[0].take_mode(&a[1], 0, TakeMode::Fill)],
            Error::BadDType {
                op: "take (indices)",
                ..
            },
            ["bool"]
        ),
        case!(
            "take_mode clip on a bad axis",
            [f(&[4]), i(&[2])],
            |a| vec![a[0].take_mode(&a[1], -2, TakeMode::Clip)],
            Error::BadAxis { .. },
            ["axis -2"]
        ),
        case!(
            "one_hot of floats",
            [f(&[3])],
            |a| vec![a[0].one_hot(4)],
            Error::BadDType { op: "one_hot", .. },
            ["f32"]
        ),
        case!(
            "random bits from an f32 key",
            [f(&[2])],
            |a| vec![random::random_bits(&a[0], &[3])],
            Error::BadDType { .. } | Error::BadShapeArg { .. },
            ["f32"]
        ),
        case!(
            "random bits from a key of 3 words",
            [u(&[3])],
            |a| vec![random::random_bits(&a[0], &[3])],
            Error::BadShapeArg { .. } | Error::BadDType { .. },
            ["[3]"]
        ),
        case!(
            "uniform with a key of 3 words",
            [u(&[3])],
            |a| vec![random::uniform(&a[0], &[2], 0.0, 1.0)],
            Error::BadShapeArg { .. } | Error::BadDType { .. },
            ["[3]"]
        ),
    ];
    let n = run_cases(&cases);
    report("dot, indexing, random", cases.len(), n);
}

// ---- control flow and tracing ----------------------------------------------------------------------

#[test]
fn control_flow_and_tracing_errors() {
    let cases = [
        case!(
            "cond on an f32 predicate",
            [f(&[3])],
            |a| cond(
                &a[0].sum_all(),
                |o| vec![o[0].clone()],
                |o| vec![o[0].neg()],
                &a[..1]
            ),
            Error::BadDType { op: "cond", .. },
            ["bool"]
        ),
        case!(
            "cond on a vector predicate",
            [f(&[3])],
            |a| cond(
                &a[0].gt(&s(0.0)),
                |o| vec![o[0].clone()],
                |o| vec![o[0].neg()],
                &a[..1]
            ),
            Error::BadShapeArg { .. } | Error::BadDType { .. },
            ["[3]"]
        ),
        case!(
            "cond whose on_true has another shape",
            [f(&[2, 3])],
            |a| cond(
                &a[0].sum_all().gt(&s(0.0)),
                |o| vec![o[0].sum(0i64, false)],
                |o| vec![o[0].clone()],
                &a[..1]
            ),
            Error::BranchMismatch { branch: 1, .. },
            ["on_true returns (f32[3])", "on_false returns (f32[2,3])"]
        ),
        case!(
            "cond whose branches differ in dtype",
            [f(&[2])],
            |a| cond(
                &a[0].sum_all().gt(&s(0.0)),
                |o| vec![o[0].cast(DType::I32)],
                |o| vec![o[0].clone()],
                &a[..1]
            ),
            Error::BranchMismatch { .. },
            ["on_true", "i32[2]", "on_false"]
        ),
        case!(
            "cond whose branches differ in count",
            [f(&[2])],
            |a| cond(
                &a[0].sum_all().gt(&s(0.0)),
                |o| vec![o[0].clone(), o[0].clone()],
                |o| vec![o[0].clone()],
                &a[..1]
            ),
            Error::BranchMismatch { .. },
            ["on_true", "on_false"]
        ),
        case!(
            "switch on an f32 index",
            [f(&[2])],
            |a| switch(
                &a[0].sum_all(),
                &[&|o: &[Tensor]| vec![o[0].clone()]],
                &a[..1]
            ),
            Error::BadDType { .. },
            ["f32"]
        ),
        case!(
            "switch with no branches",
            [f(&[2])],
            |a| switch(&Tensor::scalar(0i32), &[], &a[..1]),
            Error::BadShapeArg { op: "switch", .. },
            ["no branches"]
        ),
        case!(
            "switch whose branch 2 disagrees",
            [f(&[2])],
            |a| switch(
                &Tensor::scalar(1i32),
                &[
                    &|o: &[Tensor]| vec![o[0].clone()],
                    &|o: &[Tensor]| vec![o[0].neg()],
                    &|o: &[Tensor]| vec![o[0].sum_all()]
                ],
                &a[..1]
            ),
            Error::BranchMismatch { branch: 2, .. },
            ["branch 2 returns (f32[])", "branch 0"]
        ),
        case!(
            "scan whose carry changes shape",
            [f(&[3]), f(&[4, 3])],
            |a| scan(
                |c, x| (vec![(&c[0] + &x[0]).sum_all()], vec![]),
                &a[..1],
                &a[1..]
            )
            .0,
            Error::CarryMismatch { op: "scan", .. },
            ["f32[3]", "f32[]"]
        ),
        case!(
            "scan whose carry changes dtype",
            [f(&[3]), f(&[4, 3])],
            |a| scan(
                |c, x| (vec![(&c[0] + &x[0]).cast(DType::I32)], vec![]),
                &a[..1],
                &a[1..]
            )
            .0,
            Error::CarryMismatch { .. },
            ["i32[3]"]
        ),
        case!(
            "scan over xs of different lengths",
            [f(&[3]), f(&[4, 3]), f(&[5, 3])],
            |a| scan(
                |c, x| (vec![&(&c[0] + &x[0]) + &x[1]], vec![]),
                &a[..1],
                &a[1..]
            )
            .0,
            Error::BadShapeArg { op: "scan", .. },
            ["4", "5"]
        ),
        case!(
            "fori_loop whose carry changes",
            [f(&[2])],
            |a| fori_loop(
                0,
                3,
                |_, c| vec![Tensor::concatenate(&[&c[0], &c[0]], 0)],
                &a[..1]
            ),
            Error::CarryMismatch { .. },
            ["f32[2]", "f32[4]"]
        ),
        case!(trace_only "reading a traced value", [f(&[2])], |a| vec![Tensor::scalar(a[0].to_vec::<f32>().map(|v| v[0]).unwrap_or(f32::NAN))], Error::TracedValue { .. }, ["cond"]),
    ];
    let n = run_cases(&cases);
    report("control flow and tracing", cases.len(), n);
}

/// A traced tensor kept after its jit finished and used later: TraceMismatch naming the trace,
/// eagerly and inside a second jit, even where the shapes would not broadcast.
#[test]
fn a_leaked_tracer_is_a_trace_mismatch() {
    use std::cell::RefCell;
    let mut checks = 0;
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let leak: RefCell<Option<Tensor>> = RefCell::new(None);
        let j = jit(|a: &[Tensor]| {
            *leak.borrow_mut() = Some(a[0].clone());
            vec![&a[0] * 2.0]
        })
        .named("leaky")
        .on(&dev);
        let x = f(&[3]);
        let y = j.call(std::slice::from_ref(&x)).unwrap();
        let want: Vec<f32> = x.to_vec::<f32>().unwrap().iter().map(|v| v * 2.0).collect();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), want, "the leaky jit itself");
        let leaked = leak.borrow().clone().unwrap();
        let other = Tensor::from(f(&[4]).to_device(&dev).unwrap());
        for (what, t) in [
            ("leaked + [4]", &leaked + &other),
            ("leaked * 2", &leaked * 2.0),
            ("leaked.exp()", leaked.exp()),
            ("leaked.sum_all()", leaked.sum_all()),
            ("leaked.reshape", leaked.reshape(&[3, 1])),
        ] {
            let e = t.to_array().unwrap_err();
            assert!(
                matches!(&e, Error::TraceMismatch { .. }),
                "{what} on {}: {e:?}",
                dev.name()
            );
            assert!(e.to_string().contains("leaky"), "{e}");
            assert!(e.is_user_error());
            checks += 1;
        }
        let inner = leaked.clone();
        let e = jit(move |a: &[Tensor]| vec![&a[0] + &inner])
            .on(&dev)
            .call(&[f(&[3])])
            .unwrap_err();
        assert!(matches!(&e, Error::TraceMismatch { .. }), "{e:?}");
        checks += 1;
    }
    report("leaked tracers", 6, checks);
}

// ---- transforms ------------------------------------------------------------------------------------

#[test]
fn transform_errors() {
    let dev = device_of("vulkan");
    let mut n = 0;
    let mut expect =
        |what: &str, r: brigade::Result<Vec<Array>>, ok: fn(&Error) -> bool, needles: &[&str]| {
            let e = match r {
                Err(e) => e,
                Ok(v) => panic!("{what}: expected an error, got {v:?}"),
            };
            assert!(ok(&e), "{what}: {e:?}");
            let msg = e.to_string();
            for k in needles {
                assert!(msg.contains(k), "{what}: {k:?} not in {msg}");
            }
            assert!(e.is_user_error(), "{what}: {e:?}");
            n += 1;
        };
    let sq = |a: &[Tensor]| vec![(&a[0] * &a[0]).sum_all()];
    let add = |a: &[Tensor]| vec![&a[0] + &a[1]];
    expect(
        "vmap in_axes arity",
        vmap(add)
            .in_axes(&[Some(0)])
            .on(&dev)
            .call(&[f(&[3, 2]), f(&[3, 2])]),
        |e| matches!(e, Error::BadParallelArg { .. } | Error::Arity { .. }),
        &["in_axes"],
    );
    expect(
        "vmap in_axes past the rank",
        vmap(add)
            .in_axes(&[Some(2), Some(0)])
            .on(&dev)
            .call(&[f(&[3, 2]), f(&[3, 2])]),
        |e| matches!(e, Error::BadAxis { .. } | Error::BadParallelArg { .. }),
        &["2"],
    );
    expect(
        "vmap mapped sizes disagree",
        vmap(add).on(&dev).call(&[f(&[3, 2]), f(&[4, 2])]),
        |e| matches!(e, Error::MappedSizeMismatch { .. }),
        &["3", "4"],
    );
    expect(
        "vmap of nothing mapped",
        vmap(add)
            .in_axes(&[None, None])
            .on(&dev)
            .call(&[f(&[2]), f(&[2])]),
        |e| matches!(e, Error::NothingMapped { .. }),
        &["axis_size"],
    );
    expect(
        "vmap axis_size disagrees",
        vmap(add)
            .axis_size(5)
            .on(&dev)
            .call(&[f(&[3, 2]), f(&[3, 2])]),
        |e| matches!(e, Error::AxisSizeMismatch { .. }),
        &["5", "3"],
    );
    expect(
        "vmap out_axes past the rank",
        vmap(add)
            .out_axes(&[Some(3)])
            .on(&dev)
            .call(&[f(&[3, 2]), f(&[3, 2])]),
        |e| matches!(e, Error::BadAxis { .. } | Error::BadParallelArg { .. }),
        &["3"],
    );
    expect(
        "vmap of a scalar argument",
        vmap(add).on(&dev).call(&[f(&[]), f(&[])]),
        |e| matches!(e, Error::BadAxis { .. } | Error::BadParallelArg { .. }),
        &["0"],
    );
    expect(
        "grad of a vector output",
        grad(|a: &[Tensor]| vec![&a[0] * 2.0])
            .on(&dev)
            .call(&[f(&[3])]),
        |e| matches!(e, Error::NotDifferentiable { .. }),
        &["[3]"],
    );
    expect(
        "grad of an i32 output",
        grad(|a: &[Tensor]| vec![a[0].cast(DType::I32).sum_all()])
            .on(&dev)
            .call(&[f(&[3])]),
        |e| matches!(e, Error::NotDifferentiable { .. }),
        &["i32"],
    );
    expect(
        "grad with respect to an i32 argument",
        grad(|a: &[Tensor]| vec![a[0].cast(DType::F32).sum_all()])
            .on(&dev)
            .call(&[i(&[3])]),
        |e| matches!(e, Error::NotDifferentiable { .. }),
        &["i32"],
    );
    expect(
        "grad argnums out of range",
        grad(sq).argnums(&[3]).on(&dev).call(&[f(&[3])]),
        |e| matches!(e, Error::NotDifferentiable { .. }),
        &["3"],
    );
    expect(
        "grad of two outputs without has_aux",
        grad(|a: &[Tensor]| vec![a[0].sum_all(), a[0].sum_all()])
            .on(&dev)
            .call(&[f(&[3])]),
        |e| matches!(e, Error::NotDifferentiable { .. }),
        &["has_aux"],
    );
    expect(
        "grad of a bad program",
        grad(|a: &[Tensor]| vec![a[0].reshape(&[5]).sum_all()])
            .on(&dev)
            .call(&[f(&[3])]),
        |e| matches!(e, Error::BadReshape { .. }),
        &["[3]", "[5]"],
    );
    expect(
        "vmap of a bad program",
        vmap(|a: &[Tensor]| vec![a[0].matmul(&a[0])])
            .on(&dev)
            .call(&[f(&[2, 3, 4])]),
        |e| matches!(e, Error::MatmulShape { .. }),
        &["[3, 4]"],
    );
    expect(
        "vmap(grad) of a vector output",
        vmap(|a: &[Tensor]| grad(|b: &[Tensor]| vec![&b[0] * 2.0]).apply(a))
            .on(&dev)
            .call(&[f(&[2, 3])]),
        |e| matches!(e, Error::NotDifferentiable { .. }),
        &["[3]"],
    );
    report("transforms", n, n);
}

// ---- parallel maps and collectives -----------------------------------------------------------------

#[test]
fn parallel_and_collective_errors() {
    let devs = devices_with("vulkan:2");
    let mut n = 0;
    let mut expect =
        |what: &str, r: brigade::Result<Vec<Array>>, ok: fn(&Error) -> bool, needles: &[&str]| {
            let e = match catch_unwind(AssertUnwindSafe(|| r)) {
                Ok(Err(e)) => e,
                Ok(Ok(v)) => panic!("{what}: expected an error, got {v:?}"),
                Err(p) => panic!("{what}: PANICKED {}", panic_message(&p)),
            };
            assert!(ok(&e), "{what}: {e:?}");
            let msg = e.to_string();
            for k in needles {
                assert!(msg.contains(k), "{what}: {k:?} not in {msg}");
            }
            assert!(e.is_user_error(), "{what}: {e:?}");
            n += 1;
        };
    let id = |a: &[Tensor]| vec![a[0].clone()];
    expect(
        "pmap of 3 entries on 2 devices",
        pmap(id).devices(&devs).call(&[f(&[3, 2])]),
        |e| {
            matches!(
                e,
                Error::TooManyShards {
                    shards: 3,
                    devices: 2,
                    ..
                }
            )
        },
        &["pad the batch from 3 to 4", "(2, 2, ...)"],
    );
    expect(
        "pmap of 4 entries on 2 devices",
        pmap(id).devices(&devs).call(&[f(&[4, 2])]),
        |e| matches!(e, Error::TooManyShards { .. }),
        &["shard_map", "2 blocks of 2"],
    );
    expect(
        "pmap of an empty axis",
        pmap(id).devices(&devs).call(&[f(&[0, 2])]),
        |e| matches!(e, Error::BadParallelArg { .. }),
        &["size 0"],
    );
    expect(
        "shard_map of 5 rows on 2 devices",
        shard_map(id).devices(&devs).call(&[f(&[5, 2])]),
        |e| {
            matches!(
                e,
                Error::IndivisibleSplit {
                    size: 5,
                    devices: 2,
                    pad: 6,
                    ..
                }
            )
        },
        &["5 rows", "pad to 6"],
    );
    expect(
        "pmap mapped sizes disagree",
        pmap(|a: &[Tensor]| vec![&a[0] + &a[1]])
            .devices(&devs)
            .call(&[f(&[2, 3]), f(&[1, 3])]),
        |e| matches!(e, Error::MappedSizeMismatch { .. }),
        &["2", "1"],
    );
    expect(
        "pmap axis_size disagrees",
        pmap(id).axis_size(1).devices(&devs).call(&[f(&[2, 3])]),
        |e| matches!(e, Error::AxisSizeMismatch { .. }),
        &["axis_size is 1"],
    );
    expect(
        "pmap of nothing mapped",
        pmap(id).in_axes(&[None]).devices(&devs).call(&[f(&[2, 3])]),
        |e| matches!(e, Error::NothingMapped { .. }),
        &["axis_size"],
    );
    expect(
        "pmap in_axes arity",
        pmap(id)
            .in_axes(&[Some(0), Some(0)])
            .devices(&devs)
            .call(&[f(&[2, 3])]),
        |e| matches!(e, Error::BadParallelArg { .. } | Error::Arity { .. }),
        &["in_axes"],
    );
    expect(
        "pmap in_axes past the rank",
        pmap(id)
            .in_axes(&[Some(4)])
            .devices(&devs)
            .call(&[f(&[2, 3])]),
        |e| matches!(e, Error::BadParallelArg { .. } | Error::BadAxis { .. }),
        &["4"],
    );
    expect(
        "pmap static_argnums out of range",
        pmap(id)
            .static_argnums(&[5])
            .devices(&devs)
            .call(&[f(&[2, 3])]),
        |e| matches!(e, Error::BadParallelArg { .. }),
        &["5"],
    );
    expect(
        "pmap on no devices",
        pmap(id).devices(&[]).call(&[f(&[2, 3])]),
        |e| matches!(e, Error::BadParallelArg { .. } | Error::NoDevice(_)),
        &["device"],
    );
    expect(
        "psum over an unbound axis",
        pmap(|a: &[Tensor]| vec![psum(&a[0], "j")])
            .axis_name("i")
            .devices(&devs)
            .call(&[f(&[2, 3])]),
        |e| matches!(e, Error::UnboundAxis { .. }),
        &["'j'", "'i'"],
    );
    expect(
        "psum outside any pmap",
        jit(|a: &[Tensor]| vec![psum(&a[0], "i")]).call(&[f(&[2])]),
        |e| matches!(e, Error::UnboundAxis { .. }),
        &["'i'"],
    );
    expect(
        "psum of bools",
        pmap(|a: &[Tensor]| vec![psum(&a[0], "i")])
            .axis_name("i")
            .devices(&devs)
            .call(&[b(&[2, 3])]),
        |e| matches!(e, Error::BadDType { .. }),
        &["bool"],
    );
    expect(
        "out_axes None of a varying output",
        pmap(|a: &[Tensor]| vec![&a[0] * 2.0])
            .out_axes(&[None])
            .devices(&devs)
            .call(&[f(&[2, 3])]),
        |e| matches!(e, Error::VaryingOutput { .. }),
        &["psum"],
    );
    expect(
        "all_gather along axis 3",
        pmap(|a: &[Tensor]| vec![all_gather(&a[0], "i", 3, false)])
            .axis_name("i")
            .devices(&devs)
            .call(&[f(&[2, 3])]),
        |e| matches!(e, Error::BadCollective { .. }),
        &["[3]"],
    );
    expect(
        "psum_scatter of 3 over 2",
        pmap(|a: &[Tensor]| vec![psum_scatter(&a[0], "i", 0, true)])
            .axis_name("i")
            .devices(&devs)
            .call(&[f(&[2, 3])]),
        |e| matches!(e, Error::BadCollective { .. }),
        &["3"],
    );
    expect(
        "ppermute with a source twice",
        pmap(|a: &[Tensor]| vec![ppermute(&a[0], "i", &[(0, 1), (0, 0)])])
            .axis_name("i")
            .devices(&devs)
            .call(&[f(&[2, 3])]),
        |e| matches!(e, Error::BadCollective { .. }),
        &["source twice"],
    );
    expect(
        "ppermute to shard 7 of 2",
        pmap(|a: &[Tensor]| vec![ppermute(&a[0], "i", &[(0, 7)])])
            .axis_name("i")
            .devices(&devs)
            .call(&[f(&[2, 3])]),
        |e| matches!(e, Error::BadCollective { .. }),
        &["7"],
    );
    expect(
        "all_to_all of 3 over 2",
        pmap(|a: &[Tensor]| vec![all_to_all(&a[0], "i", 0, 0, true)])
            .axis_name("i")
            .devices(&devs)
            .call(&[f(&[2, 3])]),
        |e| matches!(e, Error::BadCollective { .. }),
        &["3"],
    );
    expect(
        "a bad op inside pmap",
        pmap(|a: &[Tensor]| vec![a[0].reshape(&[7])])
            .devices(&devs)
            .call(&[f(&[2, 3])]),
        |e| matches!(e, Error::BadReshape { .. }),
        &["[3]", "[7]"],
    );
    report("parallel maps and collectives", n, n);
}

// ---- layout strings and runtime options ------------------------------------------------------------

#[test]
fn device_layout_strings_and_builder_options() {
    let bad = [
        "vulkan:x",
        "vulkan:-1",
        "vulkan:0",
        "nosuch",
        "nosuch:2",
        ":2",
        "vulkan:2:3",
        ",",
        "vulkan,,gl",
        "cpu:abc",
        "99999999999999999999999",
        "vulkan:99999999999999999999",
        "vulkan:1e3",
        "vulkan: 2x",
        "-3",
        "0",
    ];
    let mut n = 0;
    for spec in bad {
        let got = catch_unwind(|| {
            pollster::block_on(
                Runtime::builder()
                    .layout_str(spec)
                    .allow_cpu_fallback(false)
                    .build(),
            )
        });
        match got {
            Ok(Err(Error::BadDeviceSpec { spec: s, detail })) => {
                assert_eq!(s, spec, "the error names the layout it refused");
                assert!(!detail.is_empty());
            }
            Ok(Err(e)) => panic!("layout {spec:?}: want BadDeviceSpec, got {e:?}"),
            Ok(Ok(rt)) => panic!(
                "layout {spec:?} was accepted: {:?}",
                rt.devices()
                    .iter()
                    .map(|d| d.name().to_string())
                    .collect::<Vec<_>>()
            ),
            Err(p) => panic!("layout {spec:?} PANICKED: {}", panic_message(&p)),
        }
        n += 1;
    }
    type Opt = fn(brigade::device::RuntimeBuilder) -> brigade::device::RuntimeBuilder;
    let opts: [(&str, Opt); 3] = [
        ("devices_per_adapter(0)", |b| b.devices_per_adapter(0)),
        ("subset([99])", |b| b.subset(&[99])),
        ("backends([\"nope\"])", |b| b.backends(&["nope"])),
    ];
    for (what, opt) in opts {
        let got = pollster::block_on(opt(Runtime::builder().allow_cpu_fallback(false)).build());
        assert!(
            matches!(&got, Err(Error::BadDeviceSpec { .. })),
            "{what}: {:?}",
            got.as_ref().map(|_| ())
        );
        n += 1;
    }
    report("layout strings and options", n, n);
}

// ---- host data and limits --------------------------------------------------------------------------

#[test]
fn host_data_and_limit_errors() {
    let mut n = 0;
    let mut count = |ok: bool, what: &str| {
        assert!(ok, "{what}");
        n += 1;
    };
    let e = Array::from_vec(vec![1.0f32; 5], &[2, 3]).unwrap_err();
    count(
        matches!(
            e,
            Error::DataLength {
                expected: 6,
                got: 5,
                ..
            }
        ),
        "from_vec 5 for [2,3]",
    );
    let e = Array::from_vec(vec![1.0f32; 7], &[2, 3]).unwrap_err();
    count(
        matches!(
            e,
            Error::DataLength {
                expected: 6,
                got: 7,
                ..
            }
        ),
        "from_vec 7 for [2,3]",
    );
    let e = Array::from_vec(Vec::<f32>::new(), &[1]).unwrap_err();
    count(
        matches!(
            e,
            Error::DataLength {
                expected: 1,
                got: 0,
                ..
            }
        ),
        "from_vec empty for [1]",
    );
    let x = Array::from_vec(vec![1.5f32, 2.5], &[2]).unwrap();
    count(
        matches!(
            x.to_vec::<i32>(),
            Err(Error::BadDType { .. }) | Err(Error::DTypeMismatch { .. })
        ),
        "f32 read as i32",
    );
    count(
        matches!(x.item(), Err(Error::BadShapeArg { .. })),
        "item of two elements",
    );
    // Arrays over 32-bit element indexing: OverLimit naming the limit, never a wgpu panic. (Over
    // one binding they are bound in segments, over one buffer stored in parts: tests/segments.rs,
    // tests/parts.rs.)
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let limit = u32::MAX as u64;
        let n_elems = (limit + 1024) as usize;
        let big = jit(move |_a: &[Tensor]| vec![Tensor::full(1.0f32, &[n_elems])])
            .on(&dev)
            .call(&[])
            .unwrap_err();
        count(
            matches!(&big, Error::OverLimit { .. }),
            &format!(
                "a constant over the buffer limit on {}: {big:?}",
                dev.name()
            ),
        );
        assert!(big.to_string().contains(&limit.to_string()), "{big}");
        let e = jit(move |a: &[Tensor]| vec![a[0].broadcast_to(&[n_elems / 2, 2])])
            .on(&dev)
            .call(&[f(&[2])])
            .unwrap_err();
        count(
            matches!(&e, Error::OverLimit { .. }),
            &format!("a broadcast over the limit on {}: {e:?}", dev.name()),
        );
        // The device is still fine afterwards.
        let y = jit(|a: &[Tensor]| vec![&a[0] + 1.0])
            .on(&dev)
            .call(&[f(&[3])])
            .unwrap();
        assert_eq!(y[0].shape(), &[3]);
    }
    report("host data and limits", n, n);
}

// ---- random invalid programs -----------------------------------------------------------------------

mod invalid_programs {
    use super::*;
    use proptest::prelude::*;

    /// A valid step of a random program (applied to whatever the previous step made).
    #[derive(Clone, Debug)]
    enum Step {
        Exp,
        AddSelf,
        SumLast,
        Transpose,
        Flatten,
        MulScalar(f32),
    }

    /// The one bad step injected into the program, and the error it must give.
    #[derive(Clone, Debug)]
    enum Bad {
        Axis(i64),
        Reshape(usize),
        Perm,
        Broadcast,
        Matmul,
        Concat,
        Squeeze,
        Slice,
        DType,
    }

    fn step(t: &Tensor, s: &Step) -> Tensor {
        match s {
            Step::Exp => t.tanh(),
            Step::AddSelf => t + t,
            Step::SumLast if t.ndim() > 1 => t.sum(-1i64, false),
            Step::SumLast => t.clone(),
            Step::Transpose if t.ndim() == 2 => t.t(),
            Step::Transpose => t.clone(),
            Step::Flatten => t.reshape(&[-1]),
            Step::MulScalar(v) => t * *v,
        }
    }

    fn bad(t: &Tensor, b: &Bad) -> Tensor {
        let r = t.ndim() as i64;
        match b {
            Bad::Axis(k) => t.sum(r + k, false),
            Bad::Reshape(k) => t.reshape(&[(t.size() + k) as i64]),
            Bad::Perm => t.transpose(&vec![0; t.ndim().max(2)]),
            Bad::Broadcast => t.reshape(&[-1]).broadcast_to(&[]),
            Bad::Matmul => t
                .reshape(&[1, -1])
                .matmul(&Tensor::ones(&[t.size() + 1, 2], DType::F32)),
            Bad::Concat => Tensor::concatenate(
                &[
                    &t.reshape(&[1, -1]),
                    &Tensor::ones(&[1, t.size() + 2, 1], DType::F32),
                ],
                0,
            ),
            Bad::Squeeze => t.reshape(&[1, -1]).squeeze(&[0, 0]),
            Bad::Slice => t.reshape(&[-1]).slice(&[0], &[t.size() + 1], None),
            Bad::DType => t.and(t),
        }
    }

    fn matches_bad(e: &Error, b: &Bad) -> bool {
        match b {
            Bad::Axis(_) => matches!(e, Error::BadAxis { .. }),
            Bad::Reshape(_) => matches!(e, Error::BadReshape { .. }),
            Bad::Perm | Bad::Squeeze | Bad::Slice => matches!(e, Error::BadShapeArg { .. }),
            Bad::Broadcast => matches!(
                e,
                Error::BadShapeArg { .. } | Error::ShapeMismatchBinaryOp { .. }
            ),
            Bad::Matmul => matches!(e, Error::MatmulShape { .. }),
            Bad::Concat => matches!(e, Error::BadShapeArg { .. }),
            Bad::DType => matches!(e, Error::BadDType { .. }),
        }
    }

    fn arb_step() -> impl Strategy<Value = Step> {
        prop_oneof![
            Just(Step::Exp),
            Just(Step::AddSelf),
            Just(Step::SumLast),
            Just(Step::Transpose),
            Just(Step::Flatten),
            (-4.0f32..4.0).prop_map(Step::MulScalar),
        ]
    }

    fn arb_bad() -> impl Strategy<Value = Bad> {
        prop_oneof![
            (0i64..4).prop_map(Bad::Axis),
            (1usize..5).prop_map(Bad::Reshape),
            Just(Bad::Perm),
            Just(Bad::Broadcast),
            Just(Bad::Matmul),
            Just(Bad::Concat),
            Just(Bad::Squeeze),
            Just(Bad::Slice),
            Just(Bad::DType),
        ]
    }

    /// The wrapper the program runs under.
    #[derive(Clone, Copy, Debug)]
    enum Under {
        Jit,
        Vmap,
        Grad,
        Eager,
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]
        #[test]
        fn a_random_invalid_program_is_a_typed_error(
            rows in 1usize..4,
            cols in 1usize..5,
            before in proptest::collection::vec(arb_step(), 0..4),
            bad_step in arb_bad(),
            after in proptest::collection::vec(arb_step(), 0..3),
            under in prop_oneof![Just(Under::Jit), Just(Under::Vmap), Just(Under::Grad), Just(Under::Eager)],
        ) {
            let dev = device_of("vulkan");
            let (b1, b2, bs) = (before.clone(), after.clone(), bad_step.clone());
            let prog = move |a: &[Tensor]| {
                let mut t = a[0].clone();
                for s in &b1 { t = step(&t, s); }
                t = bad(&t, &bs);
                for s in &b2 { t = step(&t, s); }
                vec![t.sum_all()]
            };
            let x = rand_f32(&[rows, cols], (rows * 7 + cols) as u64);
            let got = catch_unwind(AssertUnwindSafe(|| match under {
                Under::Jit => jit(prog.clone()).on(&dev).call(std::slice::from_ref(&x)).map(|_| ()),
                Under::Vmap => vmap(prog.clone()).on(&dev).call(&[rand_f32(&[2, rows, cols], 3)]).map(|_| ()),
                Under::Grad => grad(prog.clone()).on(&dev).call(std::slice::from_ref(&x)).map(|_| ()),
                Under::Eager => {
                    let t = Tensor::from(x.to_device(&dev)?);
                    prog(&[t])[0].to_array().map(|_| ())
                }
            }));
            let e = match got {
                Ok(Err(e)) => e,
                Ok(Ok(())) => return Err(TestCaseError::fail(format!("{under:?} {before:?} {bad_step:?} {after:?}: no error"))),
                Err(p) => return Err(TestCaseError::fail(format!("{under:?} {before:?} {bad_step:?}: PANIC {}", panic_message(&p)))),
            };
            prop_assert!(matches_bad(&e, &bad_step), "{:?} {:?} {:?}: {:?}", under, before, bad_step, e);
            prop_assert!(e.is_user_error(), "{:?}", e);
            prop_assert!(!e.to_string().is_empty());
        }
    }
}

/// Bad inputs never poison a device: after a failed call, a good one on the same device works.
#[test]
fn every_device_is_still_usable_after_a_bad_call() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let j = jit(|a: &[Tensor]| vec![a[0].reshape(&[5])]).on(&dev);
        assert!(j.call(&[f(&[3])]).is_err());
        let ok = jit(|a: &[Tensor]| vec![(&a[0] * 3.0).sum_all()]).on(&dev);
        let x = f(&[3]);
        let got = ok.call(std::slice::from_ref(&x)).unwrap()[0]
            .to_vec::<f32>()
            .unwrap()[0];
        let want: f32 = x.to_vec::<f32>().unwrap().iter().map(|v| v * 3.0).sum();
        assert!(
            (got - want).abs() <= 1e-5 * want.abs().max(1.0),
            "{} on {}",
            got,
            dev.name()
        );
    }
}

// ---- extreme values with JAX's semantics -----------------------------------------------------------

/// `take_mode` with indices far out of range (and `i32::MIN`/`MAX`): each mode gives what
/// `jnp.take(mode=...)` gives, on every device and on the reference.
#[test]
fn take_modes_on_indices_out_of_range() {
    let xs: Vec<f32> = vec![1.5, -2.5, 3.25, 4.0, -5.5];
    let n = xs.len() as i64;
    let idx: Vec<i32> = vec![0, 4, 5, -1, -5, -6, 17, -17, i32::MAX, i32::MIN, 2, -3];
    let x = Array::from_vec(xs.clone(), &[5]).unwrap();
    let ix = Array::from_vec(idx.clone(), &[12]).unwrap();
    for (mode, pick) in [
        (
            TakeMode::Fill,
            (|k: i64, n: i64| (-n..n).contains(&k).then(|| k.rem_euclid(n)))
                as fn(i64, i64) -> Option<i64>,
        ),
        (TakeMode::Clip, |k, n| Some(k.clamp(0, n - 1))),
        (TakeMode::Wrap, |k, n| Some(k.rem_euclid(n))),
    ] {
        let want: Vec<f32> = idx
            .iter()
            .map(|&k| pick(k as i64, n).map_or(f32::NAN, |j| xs[j as usize]))
            .collect();
        let got = check_on_all(
            move |a: &[Tensor]| vec![a[0].take_mode(&a[1], 0, mode)],
            &[x.clone(), ix.clone()],
            Tol::EXACT,
        );
        assert_close(
            &got[0],
            &want_host(&[12], want),
            Tol::EXACT,
            &format!("{mode:?}"),
        );
    }
    // Rows of a matrix by u32 indices, fill: a missing row is all fill values (i32::MIN for i32).
    let m = Array::from_vec((1..=6).collect::<Vec<i32>>(), &[3, 2]).unwrap();
    let ui = Array::from_vec(vec![2u32, 3, u32::MAX, 0], &[4]).unwrap();
    let got = check_on_all(
        |a: &[Tensor]| vec![a[0].take_mode(&a[1], 0, TakeMode::Fill)],
        &[m, ui],
        Tol::EXACT,
    );
    let mn = i32::MIN;
    assert_eq!(
        got[0].to_vec::<i32>().unwrap(),
        vec![5, 6, mn, mn, mn, mn, 1, 2]
    );
}

fn want_host(shape: &[usize], v: Vec<f32>) -> brigade::HostArray {
    brigade::HostArray::new(shape.to_vec(), brigade::HostData::F32(v)).unwrap()
}

/// Python's `//` and `%` (jnp.floor_divide / jnp.remainder) beside lax.div / lax.rem, on every
/// sign combination, exact multiples, zero dividends and, for floats, ±inf and NaN operands.
#[test]
fn floor_divide_and_remainder_follow_python() {
    let a: Vec<i32> = vec![7, -7, 7, -7, 6, -6, 0, 1, -1, i32::MAX, i32::MIN + 1, 5];
    let b: Vec<i32> = vec![2, 2, -2, -2, 3, 3, 5, 7, 7, -1, 3, i32::MAX];
    let floor = |x: i32, y: i32| (x as f64 / y as f64).floor() as i32;
    let want_q: Vec<i32> = a.iter().zip(&b).map(|(&x, &y)| floor(x, y)).collect();
    let want_r: Vec<i32> = a
        .iter()
        .zip(&b)
        .map(|(&x, &y)| (x as i64 - y as i64 * floor(x, y) as i64) as i32)
        .collect();
    let args = [
        Array::from_vec(a.clone(), &[12]).unwrap(),
        Array::from_vec(b.clone(), &[12]).unwrap(),
    ];
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].floor_divide(&t[1]), t[0].remainder(&t[1])],
        &args,
        Tol::EXACT,
    );
    assert_eq!(got[0].to_vec::<i32>().unwrap(), want_q);
    assert_eq!(got[1].to_vec::<i32>().unwrap(), want_r);

    // Floats: the remainder has the divisor's sign; x % ±inf is x when the signs agree, else ±inf
    // (Python's math); NaN in gives NaN out.
    let inf = f32::INFINITY;
    let fa: Vec<f32> = vec![7.5, -7.5, 7.5, -7.5, 6.0, -0.5, 3.0, f32::NAN, 1.0];
    let fb: Vec<f32> = vec![2.0, 2.0, -2.0, -2.0, 3.0, inf, inf, 2.0, f32::NAN];
    let want_q: Vec<f32> = vec![3.0, -4.0, -4.0, 3.0, 2.0, -1.0, 0.0, f32::NAN, f32::NAN];
    let want_r: Vec<f32> = vec![1.5, 0.5, -0.5, -1.5, 0.0, inf, 3.0, f32::NAN, f32::NAN];
    let args = [
        Array::from_vec(fa, &[9]).unwrap(),
        Array::from_vec(fb, &[9]).unwrap(),
    ];
    let got = check_on_all(
        |t: &[Tensor]| vec![t[0].floor_divide(&t[1]), t[0].remainder(&t[1])],
        &args,
        Tol::EXACT,
    );
    assert_close(
        &got[0],
        &want_host(&[9], want_q),
        Tol::EXACT,
        "floor_divide f32",
    );
    assert_close(
        &got[1],
        &want_host(&[9], want_r),
        Tol::EXACT,
        "remainder f32",
    );
}

/// Odd but legal inputs: empty arrays, zero-length loops, clamped indices, zero-size random
/// draws, contractions over nothing. Each gives JAX's answer (derived here) on every device.
#[test]
fn odd_but_legal_inputs_give_jaxs_answers() {
    let mut n = 0;
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let run = |f: F, args: &[Array]| -> Vec<Array> {
            jit(f)
                .on(&dev)
                .call(args)
                .unwrap_or_else(|e| panic!("on {}: {e}", dev.name()))
        };
        let empty = |shape: &[usize]| Array::from_vec(Vec::<f32>::new(), shape).unwrap();
        // No arguments, no outputs; no arguments, a constant output.
        assert!(run(|_a| vec![], &[]).is_empty());
        let c = run(|_a| vec![Tensor::scalar(1.5f32)], &[]);
        assert_eq!(c[0].to_vec::<f32>().unwrap(), vec![1.5]);
        // A contraction over k = 0 is all zeros (the empty sum), mean of nothing is NaN.
        let m = run(
            |a| vec![a[0].matmul(&a[1])],
            &[empty(&[2, 0]), empty(&[0, 3])],
        );
        assert_eq!(m[0].to_vec::<f32>().unwrap(), vec![0.0; 6]);
        let mean = run(|a| vec![a[0].mean_all()], &[empty(&[0])]);
        assert!(mean[0].to_vec::<f32>().unwrap()[0].is_nan());
        // Zero-size results keep their shapes.
        let z = run(
            |a| {
                vec![
                    a[0].cast(DType::I32).one_hot(0),
                    random::split(&random::key(0), 0),
                    a[1].index_take(&Tensor::from_vec(Vec::<i32>::new(), &[0]), 0),
                    a[1].sum(1i64, false),
                ]
            },
            &[f(&[2]), empty(&[0, 2])],
        );
        let shapes: Vec<&[usize]> = z.iter().map(|a| a.shape()).collect();
        assert_eq!(shapes, vec![&[2, 0][..], &[0, 2], &[0, 2], &[0]]);
        // A loop that runs no iteration returns its init; switch clamps its index.
        let x = f(&[3]);
        let xs = x.to_vec::<f32>().unwrap();
        let l = run(
            |a| {
                let none = fori_loop(5, 0, |_, c| vec![&c[0] * 2.0], &a[..1]);
                let neg = |o: &[Tensor]| vec![o[0].neg()];
                let sq = |o: &[Tensor]| vec![o[0].square()];
                let hi = switch(&Tensor::scalar(99i32), &[&neg, &sq], &a[..1]);
                let lo = switch(&Tensor::scalar(-5i32), &[&neg, &sq], &a[..1]);
                vec![none[0].clone(), hi[0].clone(), lo[0].clone()]
            },
            std::slice::from_ref(&x),
        );
        assert_eq!(l[0].to_vec::<f32>().unwrap(), xs);
        let sq: Vec<f32> = xs.iter().map(|v| v * v).collect();
        let neg: Vec<f32> = xs.iter().map(|v| -v).collect();
        assert_eq!(l[1].to_vec::<f32>().unwrap(), sq);
        assert_eq!(l[2].to_vec::<f32>().unwrap(), neg);
        // randint with minval > maxval gives minval (JAX raises maxval to minval + 1).
        let r = run(|_a| vec![random::randint(&random::key(3), &[5], 5, 2)], &[]);
        assert_eq!(r[0].to_vec::<i32>().unwrap(), vec![5; 5]);
        n += 7;
    }
    // ppermute with an empty permutation: every shard receives zeros, as in JAX.
    let devs = devices_with("vulkan:2");
    let p = pmap(|a: &[Tensor]| vec![ppermute(&a[0], "i", &[])])
        .axis_name("i")
        .devices(&devs)
        .call(&[f(&[2, 3])])
        .unwrap();
    assert_eq!(p[0].to_vec::<f32>().unwrap(), vec![0.0; 6]);
    println!(
        "adversarial odd but legal inputs: {} inputs, each JAX's answer",
        n + 1
    );
}
