//! One test per bad input: the exact error variant, a message that names the shapes (or dtypes),
//! and no panic, both eagerly (concrete tensors) and under `jit` (the call returns the error).

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};

use brigade::{Array, DType, Error, HostArray, HostData, Tensor, jit, select};
use common::*;

/// The error of `f` traced and called under `jit` on the Vulkan device. Panics (with the panic's
/// message) if the call panics, and if it succeeds.
fn jit_error(f: impl Fn(&[Tensor]) -> Vec<Tensor>, args: &[Array]) -> Error {
    let dev = device_of("vulkan");
    let j = jit(f).on(&dev);
    match catch_unwind(AssertUnwindSafe(|| j.call(args))) {
        Ok(Err(e)) => e,
        Ok(Ok(outs)) => panic!("expected an error, the call returned {outs:?}"),
        Err(p) => panic!(
            "the jit call PANICKED instead of returning an error: {}",
            panic_message(&p)
        ),
    }
}

/// The error carried by an eagerly computed tensor.
fn eager_error(f: impl FnOnce() -> Tensor) -> Error {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(t) => match t.to_array() {
            Err(e) => e,
            Ok(a) => panic!("expected an error, got {a:?}"),
        },
        Err(p) => panic!(
            "the eager op PANICKED instead of failing: {}",
            panic_message(&p)
        ),
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "?".into())
}

fn zeros(shape: &[usize]) -> Array {
    full(0.0f32, shape)
}

/// A small host array of `shape` filled with `v` (`Array::full` can only fail for huge shapes).
fn full(v: impl Into<brigade::Scalar>, shape: &[usize]) -> Array {
    Array::full(v, shape).expect("a small host array")
}

fn assert_mentions(e: &Error, needles: &[&str]) {
    let msg = e.to_string();
    for n in needles {
        assert!(
            msg.contains(n),
            "{n:?} is not in the message of {e:?}:\n{msg}"
        );
    }
    assert!(e.is_user_error(), "{e:?} should count as a user error");
}

#[test]
fn binary_op_shape_mismatch() {
    let check = |e: Error| {
        assert_eq!(
            e,
            Error::ShapeMismatchBinaryOp {
                op: "add",
                lhs: vec![3, 4],
                rhs: vec![5]
            }
        );
        assert_mentions(&e, &["add", "[3, 4]", "[5]"]);
    };
    check(jit_error(
        |x| vec![&x[0] + &x[1]],
        &[zeros(&[3, 4]), zeros(&[5])],
    ));
    check(eager_error(|| {
        Tensor::from(zeros(&[3, 4])) + Tensor::from(zeros(&[5]))
    }));
    // The first error wins and propagates through later ops.
    check(jit_error(
        |x| vec![((&x[0] + &x[1]) * 2.0).exp().sum_all()],
        &[zeros(&[3, 4]), zeros(&[5])],
    ));
}

#[test]
fn select_shape_mismatch_and_non_bool_predicate() {
    let e = jit_error(
        |x| vec![select(&x[0], &x[1], &x[2])],
        &[full(true, &[2]), zeros(&[3]), zeros(&[])],
    );
    assert!(
        matches!(&e, Error::ShapeMismatchBinaryOp { op: "select", .. }),
        "{e:?}"
    );
    assert_mentions(&e, &["[2]", "[3]"]);
    let e = jit_error(
        |x| vec![select(&x[0], &x[1], &x[1])],
        &[zeros(&[2]), zeros(&[2])],
    );
    assert!(
        matches!(
            e,
            Error::BadDType {
                dtype: DType::F32,
                ..
            }
        ),
        "{e:?}"
    );
    assert_mentions(&e, &["select", "f32", "bool"]);
}

#[test]
fn matmul_inner_dimension_mismatch() {
    let check = |e: Error| {
        match &e {
            Error::MatmulShape {
                op: "matmul",
                lhs,
                rhs,
                ..
            } => assert_eq!(
                (lhs.as_slice(), rhs.as_slice()),
                (&[2usize, 3][..], &[4usize, 5][..])
            ),
            other => panic!("expected MatmulShape, got {other:?}"),
        }
        assert_mentions(&e, &["[2, 3]", "[4, 5]", "3", "4"]);
    };
    check(jit_error(
        |x| vec![x[0].matmul(&x[1])],
        &[zeros(&[2, 3]), zeros(&[4, 5])],
    ));
    check(eager_error(|| {
        Tensor::from(zeros(&[2, 3])).matmul(&Tensor::from(zeros(&[4, 5])))
    }));
    // Batch axes that do not broadcast, a rank-0 operand.
    let e = jit_error(
        |x| vec![x[0].matmul(&x[1])],
        &[zeros(&[2, 3, 4]), zeros(&[3, 4, 5])],
    );
    assert!(matches!(e, Error::MatmulShape { .. }), "{e:?}");
    assert_mentions(&e, &["[2, 3, 4]", "[3, 4, 5]"]);
    let e = jit_error(|x| vec![x[0].matmul(&x[1])], &[zeros(&[]), zeros(&[3])]);
    assert!(matches!(e, Error::MatmulShape { .. }), "{e:?}");
}

#[test]
fn dot_general_dimension_mismatch() {
    let d = brigade::ops::DotDims {
        lhs_contract: vec![1],
        rhs_contract: vec![1],
        lhs_batch: vec![],
        rhs_batch: vec![],
    };
    let e = jit_error(
        move |x| vec![x[0].dot_general(&x[1], d.clone())],
        &[zeros(&[2, 3]), zeros(&[3, 4])],
    );
    assert!(
        matches!(
            e,
            Error::MatmulShape {
                op: "dot_general",
                ..
            }
        ),
        "{e:?}"
    );
    assert_mentions(&e, &["[2, 3]", "[3, 4]"]);
}

#[test]
fn reduction_axis_out_of_range() {
    let e = jit_error(|x| vec![x[0].sum(3i64, false)], &[zeros(&[2, 3])]);
    assert!(
        matches!(
            e,
            Error::BadAxis {
                axis: 3,
                rank: 2,
                ..
            }
        ),
        "{e:?}"
    );
    assert_mentions(&e, &["axis 3", "rank 2", "[2, 3]"]);
    let e = jit_error(|x| vec![x[0].sum(-3i64, true)], &[zeros(&[2, 3])]);
    assert!(
        matches!(
            e,
            Error::BadAxis {
                axis: -3,
                rank: 2,
                ..
            }
        ),
        "{e:?}"
    );
    assert_mentions(&e, &["-3", "[2, 3]"]);
    let e = eager_error(|| Tensor::from(zeros(&[2, 3])).max([0i64, 5], false));
    assert!(matches!(e, Error::BadAxis { axis: 5, .. }), "{e:?}");
    let e = jit_error(|x| vec![x[0].argmax(2, false)], &[zeros(&[2, 3])]);
    assert!(matches!(e, Error::BadAxis { axis: 2, .. }), "{e:?}");
    let e = jit_error(|x| vec![x[0].softmax(-3)], &[zeros(&[2, 3])]);
    assert!(matches!(e, Error::BadAxis { axis: -3, .. }), "{e:?}");
    // Any reduction over an axis of a rank-0 array.
    let e = jit_error(|x| vec![x[0].sum(0i64, false)], &[zeros(&[])]);
    assert!(
        matches!(
            e,
            Error::BadAxis {
                axis: 0,
                rank: 0,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn repeated_reduction_axes() {
    let e = jit_error(|x| vec![x[0].sum([1i64, -1], false)], &[zeros(&[2, 3])]);
    assert!(matches!(e, Error::BadShapeArg { .. }), "{e:?}");
    assert_mentions(&e, &["repeated", "[2, 3]"]);
}

#[test]
fn argmax_over_an_empty_axis() {
    let e = jit_error(|x| vec![x[0].argmax(1, false)], &[zeros(&[2, 0])]);
    assert!(
        matches!(e, Error::BadShapeArg { op: "argmax", .. }),
        "{e:?}"
    );
    assert_mentions(&e, &["[2, 0]", "empty"]);
}

#[test]
fn impossible_reshape() {
    let e = jit_error(|x| vec![x[0].reshape(&[4, 2])], &[zeros(&[2, 3])]);
    assert_eq!(
        e,
        Error::BadReshape {
            from: vec![2, 3],
            from_n: 6,
            to: vec![4, 2],
            to_n: 8
        }
    );
    assert_mentions(&e, &["[2, 3]", "[4, 2]", "6", "8"]);
    let e = eager_error(|| Tensor::from(zeros(&[2, 3])).reshape(&[5]));
    assert!(matches!(e, Error::BadReshape { .. }), "{e:?}");
    // -1 that cannot be inferred, and two -1.
    let e = jit_error(|x| vec![x[0].reshape(&[4, -1])], &[zeros(&[2, 3])]);
    assert!(
        matches!(e, Error::BadShapeArg { op: "reshape", .. }),
        "{e:?}"
    );
    assert_mentions(&e, &["[2, 3]", "[4, -1]", "6 elements"]);
    let e = jit_error(|x| vec![x[0].reshape(&[-1, -1])], &[zeros(&[2, 3])]);
    assert!(
        matches!(e, Error::BadShapeArg { op: "reshape", .. }),
        "{e:?}"
    );
    assert_mentions(&e, &["[-1, -1]", "[2, 3]"]);
}

#[test]
fn reshape_with_an_uninferable_minus_one_names_the_requested_shape() {
    // The user asked for [4, -1]; a message about "[4, 0] (0 elements)" describes a request
    // nobody made.
    let e = jit_error(|x| vec![x[0].reshape(&[4, -1])], &[zeros(&[2, 3])]);
    assert_mentions(&e, &["[2, 3]", "-1"]);
}

#[test]
fn operand_dtype_mismatch() {
    let check = |e: Error| {
        assert_eq!(
            e,
            Error::DTypeMismatch {
                op: "add",
                lhs: DType::F32,
                rhs: DType::I32,
                shapes: vec![vec![3], vec![3]],
            }
        );
        assert_mentions(&e, &["add", "f32", "i32", "cast", "[3] and [3]"]);
    };
    check(jit_error(
        |x| vec![&x[0] + &x[1]],
        &[zeros(&[3]), full(1i32, &[3])],
    ));
    check(eager_error(|| {
        Tensor::from(zeros(&[3])) + Tensor::from(full(1i32, &[3]))
    }));
    let e = jit_error(
        |x| vec![Tensor::concatenate(&[&x[0], &x[1]], 0)],
        &[zeros(&[3]), full(1u32, &[3])],
    );
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "concatenate",
                ..
            }
        ),
        "{e:?}"
    );
    let e = jit_error(
        |x| vec![x[0].matmul(&x[1])],
        &[zeros(&[2, 3]), full(1i32, &[3, 2])],
    );
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e:?}");
}

#[test]
fn pow_on_integers_is_a_bad_dtype() {
    let e = jit_error(
        |x| vec![x[0].pow(&x[1])],
        &[full(2i32, &[3]), full(3i32, &[3])],
    );
    assert!(
        matches!(
            e,
            Error::BadDType {
                op: "pow",
                dtype: DType::I32,
                ..
            }
        ),
        "{e:?}"
    );
    assert_mentions(&e, &["pow", "i32", "f32"]);
}

#[test]
fn arithmetic_on_bools_is_a_bad_dtype() {
    // lax.add/sub/div/neg reject bools as JAX does (lax.max/min are or/and, see jax_semantics.rs).
    for (name, op) in [
        ("add", Tensor::add as fn(&Tensor, &Tensor) -> Tensor),
        ("div", Tensor::div),
        ("sub", Tensor::sub),
    ] {
        let e = jit_error(
            move |x| vec![op(&x[0], &x[1])],
            &[full(true, &[2]), full(false, &[2])],
        );
        assert!(
            matches!(
                e,
                Error::BadDType {
                    dtype: DType::Bool,
                    ..
                }
            ),
            "{name}: {e:?}"
        );
        assert_mentions(&e, &[name, "bool"]);
    }
    let e = jit_error(|x| vec![x[0].neg()], &[full(true, &[2])]);
    assert!(
        matches!(
            e,
            Error::BadDType {
                op: "neg",
                dtype: DType::Bool,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn not_on_floats_is_a_bad_dtype() {
    let e = jit_error(|x| vec![x[0].not()], &[zeros(&[2])]);
    assert!(
        matches!(
            e,
            Error::BadDType {
                op: "not",
                dtype: DType::F32,
                ..
            }
        ),
        "{e:?}"
    );
    assert_mentions(&e, &["not", "f32"]);
}

#[test]
fn logical_and_or_on_floats_is_a_bad_dtype() {
    // and/or are logical for bool and bitwise for integers; floats have neither.
    for (name, op) in [
        ("and", Tensor::and as fn(&Tensor, &Tensor) -> Tensor),
        ("or", Tensor::or),
    ] {
        let e = jit_error(
            move |x| vec![op(&x[0], &x[1])],
            &[zeros(&[2, 3]), zeros(&[3])],
        );
        assert!(
            matches!(
                e,
                Error::BadDType {
                    dtype: DType::F32,
                    ..
                }
            ),
            "{name} on f32 should be BadDType, got {e:?}"
        );
        assert_mentions(&e, &[name, "f32"]);
    }
}

#[test]
fn reading_a_traced_value_inside_jit() {
    let e = jit_error(
        |x| {
            // Reading the data of a traced tensor is the error; the function goes on and returns.
            let r = x[0].to_array();
            assert!(
                matches!(r, Err(Error::TracedValue { .. })),
                "to_array inside jit: {r:?}"
            );
            vec![&x[0] * 2.0]
        },
        &[zeros(&[2, 3])],
    );
    match &e {
        Error::TracedValue { shape, dtype, .. } => {
            assert_eq!((shape.as_slice(), *dtype), (&[2usize, 3][..], DType::F32))
        }
        other => panic!("expected TracedValue, got {other:?}"),
    }
    assert_mentions(&e, &["[2, 3]", "cond", "select", "where_"]);
    // to_vec goes through the same check.
    let e = jit_error(
        |x| {
            let _ = x[0].to_vec::<f32>();
            vec![x[0].clone()]
        },
        &[zeros(&[4])],
    );
    assert!(matches!(e, Error::TracedValue { .. }), "{e:?}");
}

#[test]
fn take_with_float_indices() {
    let e = jit_error(
        |x| vec![x[0].index_take(&x[1], 0)],
        &[zeros(&[5, 3]), full(1.0f32, &[2])],
    );
    assert!(
        matches!(
            e,
            Error::BadDType {
                dtype: DType::F32,
                ..
            }
        ),
        "{e:?}"
    );
    assert_mentions(&e, &["take", "f32", "i32"]);
    let e = jit_error(
        |x| vec![x[0].index_take(&x[1], 2)],
        &[zeros(&[5, 3]), full(1i32, &[2])],
    );
    assert!(matches!(e, Error::BadAxis { axis: 2, .. }), "{e:?}");
    let e = jit_error(
        |x| vec![x[0].index_take(&x[1], 0)],
        &[zeros(&[0, 3]), full(1i32, &[2])],
    );
    assert!(matches!(e, Error::BadShapeArg { op: "take", .. }), "{e:?}");
    assert_mentions(&e, &["[0, 3]"]);
}

#[test]
fn one_hot_of_floats() {
    let e = jit_error(|x| vec![x[0].one_hot(3)], &[zeros(&[4])]);
    assert!(
        matches!(
            e,
            Error::BadDType {
                op: "one_hot",
                dtype: DType::F32,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn concatenate_mismatched_shapes() {
    let e = jit_error(
        |x| vec![Tensor::concatenate(&[&x[0], &x[1]], 0)],
        &[zeros(&[2, 3]), zeros(&[2, 4])],
    );
    assert!(
        matches!(
            e,
            Error::BadShapeArg {
                op: "concatenate",
                ..
            }
        ),
        "{e:?}"
    );
    assert_mentions(&e, &["[2, 3]", "[2, 4]", "axis 0"]);
    let e = jit_error(
        |x| vec![Tensor::concatenate(&[&x[0], &x[1]], 1)],
        &[zeros(&[2, 3]), zeros(&[3])],
    );
    assert!(
        matches!(
            e,
            Error::BadShapeArg {
                op: "concatenate",
                ..
            }
        ),
        "{e:?}"
    );
    let e = jit_error(
        |x| vec![Tensor::concatenate(&[&x[0], &x[1]], 2)],
        &[zeros(&[2, 3]), zeros(&[2, 3])],
    );
    assert!(matches!(e, Error::BadAxis { axis: 2, .. }), "{e:?}");
    let e = eager_error(|| Tensor::concatenate(&[], 0));
    assert!(
        matches!(
            e,
            Error::BadShapeArg {
                op: "concatenate",
                ..
            }
        ),
        "{e:?}"
    );
    let e = jit_error(
        |x| vec![Tensor::stack(&[&x[0], &x[1]], 0)],
        &[zeros(&[2]), zeros(&[3])],
    );
    // stack names the shapes it was given, not the expanded ones concatenate would see.
    assert!(matches!(e, Error::BadShapeArg { op: "stack", .. }), "{e:?}");
    assert_mentions(&e, &["[2]", "[3]"]);
}

#[test]
fn transpose_with_a_bad_permutation() {
    for perm in [vec![0usize, 0], vec![0], vec![0, 2], vec![1, 0, 2]] {
        let p = perm.clone();
        let e = jit_error(move |x| vec![x[0].transpose(&p)], &[zeros(&[2, 3])]);
        assert!(
            matches!(
                e,
                Error::BadShapeArg {
                    op: "transpose",
                    ..
                }
            ),
            "{perm:?}: {e:?}"
        );
        assert_mentions(&e, &[&format!("{perm:?}"), "[2, 3]", "permutation"]);
    }
}

#[test]
fn slice_out_of_bounds() {
    let e = jit_error(
        |x| vec![x[0].slice(&[0, 1], &[2, 5], None)],
        &[zeros(&[2, 3])],
    );
    assert!(matches!(e, Error::BadShapeArg { op: "slice", .. }), "{e:?}");
    assert_mentions(&e, &["[2, 3]", "axis 1", "5"]);
    // start > limit, zero stride, wrong number of entries, slice_axis past the end.
    let e = jit_error(
        |x| vec![x[0].slice(&[2, 0], &[1, 3], None)],
        &[zeros(&[2, 3])],
    );
    assert!(matches!(e, Error::BadShapeArg { op: "slice", .. }), "{e:?}");
    let e = jit_error(
        |x| vec![x[0].slice(&[0, 0], &[2, 3], Some(&[1, 0]))],
        &[zeros(&[2, 3])],
    );
    assert!(matches!(e, Error::BadShapeArg { op: "slice", .. }), "{e:?}");
    let e = jit_error(|x| vec![x[0].slice(&[0], &[2], None)], &[zeros(&[2, 3])]);
    assert!(matches!(e, Error::BadShapeArg { op: "slice", .. }), "{e:?}");
    let e = eager_error(|| Tensor::from(zeros(&[2, 3])).slice_axis(0, 1, 7));
    assert!(matches!(e, Error::BadShapeArg { op: "slice", .. }), "{e:?}");
    let e = jit_error(|x| vec![x[0].slice_axis(2, 0, 1)], &[zeros(&[2, 3])]);
    assert!(matches!(e, Error::BadAxis { .. }), "{e:?}");
}

#[test]
fn squeeze_of_an_axis_that_is_not_1() {
    let e = jit_error(|x| vec![x[0].squeeze(&[0])], &[zeros(&[3, 1])]);
    assert!(
        matches!(e, Error::BadShapeArg { op: "squeeze", .. }),
        "{e:?}"
    );
    assert_mentions(&e, &["[3, 1]", "axis 0", "size 3"]);
    let e = jit_error(|x| vec![x[0].squeeze(&[2])], &[zeros(&[3, 1])]);
    assert!(matches!(e, Error::BadAxis { axis: 2, .. }), "{e:?}");
    let e = jit_error(|x| vec![x[0].expand_dims(3)], &[zeros(&[3, 1])]);
    assert!(matches!(e, Error::BadAxis { axis: 3, .. }), "{e:?}");
}

#[test]
fn broadcast_to_an_incompatible_shape() {
    let e = jit_error(|x| vec![x[0].broadcast_to(&[2, 4])], &[zeros(&[3])]);
    assert!(
        matches!(
            e,
            Error::BadShapeArg {
                op: "broadcast_in_dim",
                ..
            }
        ),
        "{e:?}"
    );
    assert_mentions(&e, &["[3]", "[2, 4]"]);
    let e = jit_error(|x| vec![x[0].broadcast_to(&[3])], &[zeros(&[2, 3])]);
    assert!(
        matches!(
            e,
            Error::BadShapeArg {
                op: "broadcast_to",
                ..
            }
        ),
        "{e:?}"
    );
    assert_mentions(&e, &["[2, 3]", "[3]"]);
}

#[test]
fn pad_with_the_wrong_number_of_entries() {
    let e = jit_error(|x| vec![x[0].pad(&[1], &[1], 0.0f32)], &[zeros(&[2, 3])]);
    assert!(matches!(e, Error::BadShapeArg { op: "pad", .. }), "{e:?}");
    assert_mentions(&e, &["[2, 3]"]);
}

#[test]
fn array_from_vec_with_the_wrong_length() {
    let e = Array::from_vec(vec![1.0f32, 2.0, 3.0], &[2, 2]).unwrap_err();
    assert_eq!(
        e,
        Error::DataLength {
            shape: vec![2, 2],
            expected: 4,
            got: 3
        }
    );
    assert_mentions(&e, &["[2, 2]", "3", "4"]);
    let e = HostArray::new(vec![0, 5], HostData::I32(vec![1])).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DataLength {
                expected: 0,
                got: 1,
                ..
            }
        ),
        "{e:?}"
    );
    let e = eager_error(|| Tensor::from_vec(vec![true; 5], &[2, 3]));
    assert!(
        matches!(
            e,
            Error::DataLength {
                expected: 6,
                got: 5,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn reference_evaluation_with_wrong_inputs() {
    let g = jit(|x: &[Tensor]| vec![&x[0] + 1.0])
        .graph(&[zeros(&[2])])
        .unwrap();
    let e = brigade::reference::eval_graph(&g, &[]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Arity {
                expected: 1,
                got: 0,
                ..
            }
        ),
        "{e:?}"
    );
    let e =
        brigade::reference::eval_graph(&g, &[HostArray::from_vec(vec![1.0f32; 3], &[3]).unwrap()])
            .unwrap_err();
    assert!(matches!(e, Error::BadShapeArg { .. }), "{e:?}");
    assert_mentions(&e, &["[3]", "f32[2]"]);
}

#[test]
fn to_vec_with_the_wrong_element_type() {
    let a = Array::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let e = a.to_vec::<i32>().unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                lhs: DType::F32,
                rhs: DType::I32,
                ..
            }
        ),
        "{e:?}"
    );
    let gl = device_of("gl");
    let _guard = device_guard(&gl);
    let on_dev = a.to_device(&gl).unwrap();
    let e = on_dev.to_vec::<bool>().unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                lhs: DType::F32,
                rhs: DType::Bool,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn a_malformed_hand_built_graph_is_an_error_not_a_panic() {
    use brigade::ops::{BinaryOp, ElementwiseOp, Prim};
    use brigade::trace::graph::{Aval, Eqn, Graph, Var};
    let f32v = |shape: &[usize]| Aval::new(shape.to_vec(), DType::F32);
    // Uses variable 1 before anything defines it.
    let mut g = Graph::default();
    let a = g.new_var(f32v(&[2]));
    let b = g.new_var(f32v(&[2]));
    let c = g.new_var(f32v(&[2]));
    g.inputs = vec![a];
    g.eqns.push(Eqn::new(
        Prim::Elementwise(ElementwiseOp::Binary(BinaryOp::Add)),
        vec![a, b],
        c,
    ));
    g.outputs = vec![c];
    let x = brigade::HostArray::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let e = brigade::reference::eval_graph(&g, std::slice::from_ref(&x)).unwrap_err();
    assert!(e.to_string().contains("before it is defined"), "{e}");
    // A result declared with the wrong shape.
    let mut g = Graph::default();
    let a = g.new_var(f32v(&[2]));
    let c = g.new_var(f32v(&[3]));
    g.inputs = vec![a];
    g.eqns.push(Eqn::new(
        Prim::Elementwise(ElementwiseOp::Binary(BinaryOp::Mul)),
        vec![a, a],
        c,
    ));
    g.outputs = vec![c];
    let e = brigade::reference::eval_graph(&g, std::slice::from_ref(&x)).unwrap_err();
    assert!(e.to_string().contains("declared f32[3]"), "{e}");
    let limits = brigade::DeviceLimits::from_wgpu(&wgpu::Limits::default());
    assert!(brigade::lower::lower(&g, &limits).is_err());
    // Output never defined.
    let mut g = Graph::default();
    let a = g.new_var(f32v(&[2]));
    g.inputs = vec![a];
    g.outputs = vec![Var(7)];
    assert!(brigade::reference::eval_graph(&g, std::slice::from_ref(&x)).is_err());
}

/// The fix every f64-on-a-GPU error names.
const F64_FIX: [&str; 4] = [
    "f64",
    "WGSL has no f64",
    ".cast(DType::F32)",
    "BRIGADE_DEVICES=cpu",
];

fn assert_f64_refused(e: &Error, op: &str, shape: &[usize]) {
    match e {
        Error::BadDType {
            op: got_op,
            dtype: DType::F64,
            shapes,
            ..
        } => {
            assert_eq!(*got_op, op, "{e:?}");
            assert_eq!(shapes, &vec![shape.to_vec()], "{e:?}");
        }
        _ => panic!("expected BadDType for f64, got {e:?}"),
    }
    assert_mentions(e, &F64_FIX);
    assert_mentions(e, &[&format!("{shape:?}")]);
}

#[test]
fn f64_values_in_a_gpu_program_are_a_bad_dtype() {
    // An f64 stretch inside an f32 program: the lowering names the first f64 value's shape.
    let f = |x: &[Tensor]| vec![x[0].cast(DType::F64).exp().cast(DType::F32)];
    let x = Array::from_vec(vec![0.5f32, -1.0, 2.0, 0.25, 1.5, -0.75], &[2, 3]).unwrap();
    assert_f64_refused(
        &jit_error(f, std::slice::from_ref(&x)),
        "running on a GPU device",
        &[2, 3],
    );
    // An f64 argument.
    let y = Array::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[4]).unwrap();
    assert_f64_refused(
        &jit_error(|x| vec![&x[0] * 2.0], &[y]),
        "running on a GPU device",
        &[4],
    );
    // Eagerly, on data that lives on the GPU.
    let dev = device_of("vulkan");
    let on_dev = x.to_device(&dev).unwrap();
    assert_f64_refused(
        &eager_error(|| Tensor::from(&on_dev).cast(DType::F64)),
        "running on a GPU device",
        &[2, 3],
    );
    // Inside control flow: a loop body and a cond branch holding an f64 intermediate.
    let looped = |a: &[Tensor]| {
        brigade::fori_loop(
            0,
            3,
            |_, v| vec![v[0].cast(DType::F64).sin().cast(DType::F32)],
            &a[..1],
        )
    };
    assert_f64_refused(
        &jit_error(looped, std::slice::from_ref(&x)),
        "running on a GPU device",
        &[2, 3],
    );
    let branched = |a: &[Tensor]| {
        brigade::cond(
            &a[0].sum_all().gt(&Tensor::scalar(0.0f32)),
            |b| vec![b[0].cast(DType::F64).exp().cast(DType::F32)],
            |b| vec![b[0].clone()],
            &a[..1],
        )
    };
    assert_f64_refused(
        &jit_error(branched, std::slice::from_ref(&x)),
        "running on a GPU device",
        &[2, 3],
    );
    let cpu = devices_with("cpu:1")[0].clone();
    let got = jit(looped).on(&cpu).call(std::slice::from_ref(&x)).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    let want: Vec<f32> = x
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|&v| (0..3).fold(v, |v, _| (v as f64).sin() as f32))
        .collect();
    assert_eq!(got, want, "the loop with an f64 body on the cpu device");
    // The fix the message names works: the same program on the cpu device.
    let got = jit(f).on(&cpu).call(&[x]).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    let want: Vec<f32> = [0.5f64, -1.0, 2.0, 0.25, 1.5, -0.75]
        .iter()
        .map(|v| v.exp() as f32)
        .collect();
    assert_eq!(got, want);
}

#[test]
fn uploading_f64_to_a_gpu_device_is_a_bad_dtype() {
    let dev = device_of("vulkan");
    let a = Array::from_vec(vec![1.5f64, -2.0, 3.25, 0.5, 8.0, -1.0], &[3, 2]).unwrap();
    let e = match catch_unwind(AssertUnwindSafe(|| a.to_device(&dev))) {
        Ok(Err(e)) => e,
        Ok(Ok(on_dev)) => panic!("an f64 array was uploaded: {on_dev:?}"),
        Err(p) => panic!("to_device PANICKED: {}", panic_message(&p)),
    };
    assert_f64_refused(&e, "uploading to a GPU device", &[3, 2]);
    // The device's own upload, which sees no shape, names the element count.
    let e = dev
        .upload(&HostData::F64(vec![1.0, 2.0, 3.0]))
        .map(|_| ())
        .unwrap_err();
    assert_f64_refused(&e, "uploading to a GPU device", &[3]);
    // The cpu device holds f64 on the host.
    let cpu = devices_with("cpu:1")[0].clone();
    assert_eq!(
        a.to_device(&cpu).unwrap().to_vec::<f64>().unwrap(),
        vec![1.5, -2.0, 3.25, 0.5, 8.0, -1.0]
    );
}
