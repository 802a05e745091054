//! The `cpu` device's executor (`brigade::cpu::eval_graph`) against the reference interpreter
//! (`brigade::reference::eval_graph`, the oracle), on random programs and inputs full of NaN, ±inf,
//! ±0, subnormals and integer extremes.
//!
//! Tolerances:
//! - elementwise ops (unary, binary, select, fma, cast), layout ops, max/min/prod reductions,
//!   argmax/argmin, integer reductions and integer matmul: the same bits (NaN payloads included);
//! - sums: `|got - want| <= 2^-23·|want| + 1e-12·Σ|x|` for f32 results (one f32 rounding of an f64
//!   sum taken in another order), `1e-13·Σ|x|` for f64 ones, where `Σ|x|` is the reference's sum of
//!   the absolute values of the same group;
//! - float matmul: `|got - want| <= 2·k·ε·(|a||b|)_ij + ε_min` with ε = 2^-24 (f32) or 2^-53 (f64):
//!   the GEMM accumulates in the operands' precision, the interpreter in f64. NaN must match NaN,
//!   infinities must be equal.
//!
//! The last section runs jit / vmap / grad / pmap / scan through the cpu device and compares with the
//! reference evaluation of the same traced programs.

mod common;

use brigade::ops::{
    ArgOp, BinaryOp, DotDims, ElementwiseOp, LayoutOp, Prim, ReduceOp, ReductionOp, UnaryOp,
};
use brigade::trace::graph::Eqn;
use brigade::{Array, Aval, DType, Graph, HostArray, HostData, Scalar, Tensor, Var, jit};
use common::*;

// ---- helpers ------------------------------------------------------------------------------------

/// A graph built equation by equation, each result's aval from the primitive's own shape rule.
#[derive(Default)]
struct Builder {
    g: Graph,
}

impl Builder {
    fn input(&mut self, shape: &[usize], dtype: DType) -> Var {
        let v = self.g.new_var(Aval::new(shape.to_vec(), dtype));
        self.g.inputs.push(v);
        v
    }
    /// Add `prim(ins)` if its shape/dtype rule accepts the operands.
    fn try_op(&mut self, prim: Prim, ins: &[Var]) -> Option<Var> {
        let avals: Vec<&Aval> = ins.iter().map(|v| self.g.aval(*v)).collect();
        let out = prim.infer(&avals).ok()?;
        let o = self.g.new_var(out);
        self.g.eqns.push(Eqn::new(prim, ins.to_vec(), o));
        Some(o)
    }
    fn op(&mut self, prim: Prim, ins: &[Var]) -> Var {
        let p = prim.clone();
        self.try_op(prim, ins)
            .unwrap_or_else(|| panic!("{p} rejected its operands"))
    }
}

/// Run both executors on `g`.
fn both(g: &Graph, inputs: &[HostArray]) -> (Vec<HostArray>, Vec<HostArray>) {
    let want = brigade::reference::eval_graph(g, inputs)
        .unwrap_or_else(|e| panic!("reference failed: {e}\n{g}"));
    let got = brigade::cpu::eval_graph(g, inputs)
        .unwrap_or_else(|e| panic!("cpu executor failed: {e}\n{g}"));
    assert_eq!(got.len(), want.len());
    (got, want)
}

/// The same shape, dtype and bits (floats by their bit patterns: NaN payloads and the sign of
/// zero count).
fn assert_bits(got: &HostArray, want: &HostArray, ctx: &str) {
    assert_eq!(got.shape, want.shape, "{ctx}: shape");
    assert_eq!(got.dtype(), want.dtype(), "{ctx}: dtype");
    let bad = match (&got.data, &want.data) {
        (HostData::F32(a), HostData::F32(b)) => a
            .iter()
            .zip(b)
            .position(|(x, y)| x.to_bits() != y.to_bits())
            .map(|i| {
                format!(
                    "at {i}: {:?} ({:#x}) vs {:?} ({:#x})",
                    a[i],
                    a[i].to_bits(),
                    b[i],
                    b[i].to_bits()
                )
            }),
        (HostData::F64(a), HostData::F64(b)) => a
            .iter()
            .zip(b)
            .position(|(x, y)| x.to_bits() != y.to_bits())
            .map(|i| format!("at {i}: {:?} vs {:?}", a[i], b[i])),
        (a, b) => (a != b).then(|| {
            let i = (0..a.len()).find(|&i| a.get(i) != b.get(i)).unwrap_or(0);
            format!("at {i}: {:?} vs {:?}", a.get(i), b.get(i))
        }),
    };
    if let Some(b) = bad {
        panic!("{ctx}: got != reference {b}");
    }
}

/// `|got - want| <= rel·|want| + bound[i]` per element (NaN matches NaN, infinities equal).
fn assert_within(got: &HostArray, want: &HostArray, rel: f64, bound: &[f64], ctx: &str) {
    assert_eq!(got.shape, want.shape, "{ctx}: shape");
    assert_eq!(got.dtype(), want.dtype(), "{ctx}: dtype");
    let (g, w) = (got.to_f64(), want.to_f64());
    for i in 0..g.len() {
        let (a, b) = (g[i], w[i]);
        let ok = if b.is_nan() {
            a.is_nan()
        } else if b.is_infinite() {
            a == b
        } else {
            (a - b).abs() <= rel * b.abs() + bound[i]
        };
        assert!(
            ok,
            "{ctx}: at {i}: got {a:e}, want {b:e} (bound {:e})",
            bound[i]
        );
    }
}

/// f32 values: random in [-4, 4] with about one in three replaced by a special value.
fn special_f32s(n: usize, seed: u64) -> Vec<f32> {
    const SPECIAL: [f32; 16] = [
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1e-40,
        -3e-39,
        f32::MIN_POSITIVE,
        f32::MAX,
        -f32::MAX,
        1.0,
        -1.0,
        0.5,
        -2.5,
        1e10,
    ];
    let mut r = Lcg::new(seed);
    f32s(n, seed ^ 0x5eed, -4.0, 4.0)
        .into_iter()
        .map(|v| {
            if r.next_u32().is_multiple_of(3) {
                SPECIAL[(r.next_u32() % 16) as usize]
            } else {
                v
            }
        })
        .collect()
}

fn special_i32s(n: usize, seed: u64) -> Vec<i32> {
    const SPECIAL: [i32; 6] = [i32::MIN, i32::MAX, -1, 0, 1, 2];
    let mut r = Lcg::new(seed);
    i32s(n, seed ^ 0x1, -100, 100)
        .into_iter()
        .map(|v| {
            if r.next_u32().is_multiple_of(3) {
                SPECIAL[(r.next_u32() % 6) as usize]
            } else {
                v
            }
        })
        .collect()
}

fn special_u32s(n: usize, seed: u64) -> Vec<u32> {
    const SPECIAL: [u32; 4] = [u32::MAX, 0, 1, 0x8000_0000];
    let mut r = Lcg::new(seed);
    u32s(n, seed ^ 0x2, 0, 200)
        .into_iter()
        .map(|v| {
            if r.next_u32().is_multiple_of(3) {
                SPECIAL[(r.next_u32() % 4) as usize]
            } else {
                v
            }
        })
        .collect()
}

/// Host data of `dtype` with specials.
fn special(dtype: DType, shape: &[usize], seed: u64) -> HostArray {
    let n = numel(shape);
    let data = match dtype {
        DType::F32 => HostData::F32(special_f32s(n, seed)),
        DType::F64 => HostData::F64(
            special_f32s(n, seed)
                .into_iter()
                .map(|v| v as f64 * 1.000_000_1)
                .collect(),
        ),
        DType::I32 => HostData::I32(special_i32s(n, seed)),
        DType::U32 => HostData::U32(special_u32s(n, seed)),
        DType::Bool => HostData::Bool(bools(n, seed)),
    };
    HostArray::new(shape.to_vec(), data).unwrap()
}

const DTYPES: [DType; 5] = [DType::F32, DType::F64, DType::I32, DType::U32, DType::Bool];

// ---- elementwise --------------------------------------------------------------------------------

fn elementwise_prims() -> Vec<Prim> {
    // Every unary and binary op the registry declares (a new op is tested without editing here).
    let mut p: Vec<Prim> = UnaryOp::ALL
        .iter()
        .map(|&x| Prim::Elementwise(ElementwiseOp::Unary(x)))
        .collect();
    p.extend(
        BinaryOp::ALL
            .iter()
            .map(|&x| Prim::Elementwise(ElementwiseOp::Binary(x))),
    );
    p.extend([
        Prim::Elementwise(ElementwiseOp::Select),
        Prim::Elementwise(ElementwiseOp::Fma),
    ]);
    p.extend(DTYPES.map(|x| Prim::Elementwise(ElementwiseOp::Cast(x))));
    p
}

/// Random elementwise programs over every dtype: each step picks a primitive and operands at
/// random among the values so far, kept when the primitive's rule accepts them; every value is an
/// output. Bit-exact.
#[test]
fn random_elementwise_programs_match_the_interpreter_bit_for_bit() {
    let prims = elementwise_prims();
    let sizes = [0usize, 1, 3, 17, 64, 1000];
    for seed in 0..60u64 {
        let mut r = Lcg::new(seed * 7 + 1);
        let shape = if seed % 5 == 4 {
            vec![2, 3, 5]
        } else {
            vec![sizes[seed as usize % sizes.len()]]
        };
        let mut b = Builder::default();
        let mut vars = Vec::new();
        let mut inputs = Vec::new();
        for (k, dt) in [
            DType::F32,
            DType::F32,
            DType::F64,
            DType::I32,
            DType::U32,
            DType::Bool,
        ]
        .into_iter()
        .enumerate()
        {
            vars.push(b.input(&shape, dt));
            inputs.push(special(dt, &shape, seed * 31 + k as u64));
        }
        let mut added = 0;
        while added < 24 {
            let prim = prims[r.next_u32() as usize % prims.len()].clone();
            let n = prim.arity().unwrap_or(1);
            let ins: Vec<Var> = (0..n)
                .map(|_| vars[r.next_u32() as usize % vars.len()])
                .collect();
            if let Some(v) = b.try_op(prim, &ins) {
                vars.push(v);
                added += 1;
            }
        }
        b.g.outputs = vars.clone();
        let (got, want) = both(&b.g, &inputs);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_bits(g, w, &format!("seed {seed} value {k}\n{}", b.g));
        }
    }
}

/// Random programs whose intermediate values die inside the program (so results are written into
/// dying operands' buffers) and which read broadcast scalars (kept unmaterialized): only the last
/// values are outputs. Bit-exact.
#[test]
fn random_chains_with_broadcast_scalars_match_the_interpreter_bit_for_bit() {
    let prims = elementwise_prims();
    for seed in 0..80u64 {
        let mut r = Lcg::new(seed * 13 + 5);
        let shape = if seed % 3 == 0 {
            vec![4, 50]
        } else {
            vec![1 + (seed as usize * 37) % 300]
        };
        let mut b = Builder::default();
        let mut vars = Vec::new();
        let mut inputs = Vec::new();
        for (k, dt) in [DType::F32, DType::F32, DType::F64, DType::I32, DType::Bool]
            .into_iter()
            .enumerate()
        {
            vars.push(b.input(&shape, dt));
            inputs.push(special(dt, &shape, seed * 17 + k as u64));
        }
        // Scalars broadcast to the shape (a literal's form in traced programs), and a constant.
        for (k, dt) in [DType::F32, DType::F64, DType::I32].into_iter().enumerate() {
            let s = b.input(&[], dt);
            inputs.push(special(dt, &[], seed * 19 + k as u64));
            let dims: Vec<usize> = vec![];
            vars.push(b.op(
                Prim::Layout(LayoutOp::BroadcastInDim {
                    shape: shape.clone(),
                    dims,
                }),
                &[s],
            ));
        }
        let c = b.g.new_var(Aval::new(vec![], DType::F32));
        b.g.consts.push((
            c,
            HostArray::from_vec(vec![special_f32s(1, seed)[0]], &[]).unwrap(),
        ));
        vars.push(b.op(
            Prim::Layout(LayoutOp::BroadcastInDim {
                shape: shape.clone(),
                dims: vec![],
            }),
            &[c],
        ));
        // Each step mostly reads the newest values, so most die at their next use.
        let mut added = 0;
        while added < 30 {
            let prim = prims[r.next_u32() as usize % prims.len()].clone();
            let n = prim.arity().unwrap_or(1);
            let ins: Vec<Var> = (0..n)
                .map(|_| {
                    let back = (r.next_u32() % 4) as usize;
                    if r.next_u32().is_multiple_of(4) {
                        vars[r.next_u32() as usize % vars.len()]
                    } else {
                        vars[vars.len() - 1 - back.min(vars.len() - 1)]
                    }
                })
                .collect();
            if let Some(v) = b.try_op(prim, &ins) {
                vars.push(v);
                added += 1;
            }
        }
        b.g.outputs = vars[vars.len() - 3..].to_vec();
        let (got, want) = both(&b.g, &inputs);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_bits(g, w, &format!("seed {seed} output {k}\n{}", b.g));
        }
    }
}

/// Every unary and binary op on every dtype it accepts, on a long input (several threads).
#[test]
fn every_elementwise_op_on_long_inputs_is_bit_exact() {
    let n = 200_003;
    for dt in DTYPES {
        let (x, y) = (special(dt, &[n], 11), special(dt, &[n], 12));
        let p = special(DType::Bool, &[n], 13);
        for prim in elementwise_prims() {
            let mut b = Builder::default();
            let (vx, vy, vp) = (
                b.input(&[n], dt),
                b.input(&[n], dt),
                b.input(&[n], DType::Bool),
            );
            let ins: Vec<Var> = match prim.arity() {
                Some(1) => vec![vx],
                Some(2) => vec![vx, vy],
                _ if prim == Prim::Elementwise(ElementwiseOp::Select) => vec![vp, vx, vy],
                _ => vec![vx, vy, vx],
            };
            let Some(o) = b.try_op(prim.clone(), &ins) else {
                continue;
            };
            b.g.outputs = vec![o];
            let (got, want) = both(&b.g, &[x.clone(), y.clone(), p.clone()]);
            assert_bits(&got[0], &want[0], &format!("{prim} on {dt}[{n}]"));
        }
    }
}

// ---- layout -------------------------------------------------------------------------------------

#[test]
fn layout_ops_match_the_interpreter() {
    for (k, dt) in DTYPES.into_iter().enumerate() {
        let x = special(dt, &[3, 4, 5], 40 + k as u64);
        let cases: Vec<Prim> = vec![
            Prim::Layout(LayoutOp::Transpose {
                perm: vec![2, 0, 1],
            }),
            Prim::Layout(LayoutOp::Transpose {
                perm: vec![1, 2, 0],
            }),
            Prim::Layout(LayoutOp::Transpose {
                perm: vec![0, 2, 1],
            }),
            Prim::Layout(LayoutOp::Transpose {
                perm: vec![0, 1, 2],
            }),
            Prim::Layout(LayoutOp::Slice {
                start: vec![1, 0, 2],
                limit: vec![3, 4, 5],
                stride: vec![1, 2, 2],
            }),
            Prim::Layout(LayoutOp::Slice {
                start: vec![0, 1, 0],
                limit: vec![3, 3, 5],
                stride: vec![2, 1, 1],
            }),
            Prim::Layout(LayoutOp::Slice {
                start: vec![2, 2, 2],
                limit: vec![2, 4, 5],
                stride: vec![1, 1, 1],
            }),
            Prim::Layout(LayoutOp::BroadcastInDim {
                shape: vec![2, 3, 4, 5],
                dims: vec![1, 2, 3],
            }),
            Prim::Layout(LayoutOp::BroadcastInDim {
                shape: vec![3, 4, 6, 5],
                dims: vec![0, 1, 3],
            }),
            Prim::Layout(LayoutOp::Pad {
                lo: vec![1, 0, 2],
                hi: vec![0, 3, 1],
                interior: vec![0, 1, 2],
                value: Scalar::F32(-7.5).cast(dt),
            }),
            Prim::Layout(LayoutOp::Reshape { shape: vec![20, 3] }),
        ];
        for prim in cases {
            let mut b = Builder::default();
            let v = b.input(&[3, 4, 5], dt);
            let o = b.op(prim.clone(), &[v]);
            b.g.outputs = vec![o];
            let (got, want) = both(&b.g, std::slice::from_ref(&x));
            assert_bits(&got[0], &want[0], &format!("{prim} on {dt}"));
        }
        // Broadcasts of a scalar and of a size-1 axis, and a concatenation along each axis.
        let s = special(dt, &[1, 5], 50 + k as u64);
        let mut b = Builder::default();
        let v = b.input(&[1, 5], dt);
        let o1 = b.op(
            Prim::Layout(LayoutOp::BroadcastInDim {
                shape: vec![4, 3, 5],
                dims: vec![1, 2],
            }),
            &[v],
        );
        let o2 = b.op(
            Prim::Layout(LayoutOp::BroadcastInDim {
                shape: vec![3, 5],
                dims: vec![0, 1],
            }),
            &[v],
        );
        b.g.outputs = vec![o1, o2];
        let (got, want) = both(&b.g, std::slice::from_ref(&s));
        for i in 0..2 {
            assert_bits(&got[i], &want[i], &format!("broadcast {i} on {dt}"));
        }
        for axis in 0..3 {
            let mut shape2 = vec![3, 4, 5];
            shape2[axis] = 2;
            let y = special(dt, &shape2, 60 + axis as u64);
            let mut b = Builder::default();
            let (vx, vy) = (b.input(&[3, 4, 5], dt), b.input(&shape2, dt));
            let o = b.op(Prim::Layout(LayoutOp::Concatenate { axis }), &[vx, vy, vx]);
            b.g.outputs = vec![o];
            let (got, want) = both(&b.g, &[x.clone(), y]);
            assert_bits(
                &got[0],
                &want[0],
                &format!("concatenate axis {axis} on {dt}"),
            );
        }
    }
}

#[test]
fn empty_shapes_match_the_interpreter() {
    for dt in DTYPES {
        let x = special(dt, &[0, 3], 70);
        let mut b = Builder::default();
        let v = b.input(&[0, 3], dt);
        let mut outs = vec![
            b.op(Prim::Layout(LayoutOp::Transpose { perm: vec![1, 0] }), &[v]),
            b.op(
                Prim::Layout(LayoutOp::BroadcastInDim {
                    shape: vec![2, 0, 3],
                    dims: vec![1, 2],
                }),
                &[v],
            ),
            b.op(Prim::Elementwise(ElementwiseOp::Cast(DType::F32)), &[v]),
            b.op(
                Prim::Layout(LayoutOp::Pad {
                    lo: vec![1, 0],
                    hi: vec![1, 1],
                    interior: vec![0, 0],
                    value: Scalar::I32(3).cast(dt),
                }),
                &[v],
            ),
        ];
        for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min] {
            for axes in [vec![0], vec![1], vec![0, 1]] {
                if let Some(o) = b.try_op(Prim::Reduction(ReductionOp::Reduce { op, axes }), &[v]) {
                    outs.push(o);
                }
            }
        }
        b.g.outputs = outs;
        let (got, want) = both(&b.g, std::slice::from_ref(&x));
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_bits(g, w, &format!("empty value {k} on {dt}\n{}", b.g));
        }
    }
}

// ---- reductions ---------------------------------------------------------------------------------

/// Every reduction over every axis subset of a few shapes (long rows included, which use several
/// threads), every dtype; argmax/argmin along each axis.
#[test]
fn reductions_match_the_interpreter() {
    let shapes: [&[usize]; 6] = [
        &[3, 4, 5],
        &[2, 300_000],
        &[300_000, 2],
        &[7],
        &[1, 6, 1],
        &[4, 0, 3],
    ];
    for (si, shape) in shapes.iter().enumerate() {
        let r = shape.len();
        for (k, dt) in [DType::F32, DType::F64, DType::I32, DType::U32]
            .into_iter()
            .enumerate()
        {
            // Finite values for the sums' error bounds, specials for the others.
            let plain = match dt {
                DType::F32 => {
                    HostArray::from_vec(f32s(numel(shape), 80 + k as u64, -3.0, 3.0), shape)
                        .unwrap()
                }
                DType::F64 => {
                    let v: Vec<f64> = f32s(numel(shape), 81, -3.0, 3.0)
                        .into_iter()
                        .map(|v| v as f64 / 3.0)
                        .collect();
                    HostArray::from_vec(v, shape).unwrap()
                }
                d => special(d, shape, 82),
            };
            let wild = special(dt, shape, 90 + si as u64);
            for mask in 0..(1u32 << r) {
                let axes: Vec<usize> = (0..r).filter(|a| mask & (1 << a) != 0).collect();
                for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min] {
                    let ctx = format!("{op:?} over {axes:?} of {dt}{shape:?}");
                    let mut b = Builder::default();
                    let v = b.input(shape, dt);
                    let o = b.op(
                        Prim::Reduction(ReductionOp::Reduce {
                            op,
                            axes: axes.clone(),
                        }),
                        &[v],
                    );
                    let exact = op != ReduceOp::Sum || !dt.is_float();
                    if exact {
                        b.g.outputs = vec![o];
                        for x in [&plain, &wild] {
                            let (got, want) = both(&b.g, std::slice::from_ref(x));
                            assert_bits(&got[0], &want[0], &ctx);
                        }
                    } else {
                        // Σ|x| per group, by the reference, bounds the sum's rounding.
                        let a = b.op(Prim::Elementwise(ElementwiseOp::Unary(UnaryOp::Abs)), &[v]);
                        let s = b.op(
                            Prim::Reduction(ReductionOp::Reduce {
                                op: ReduceOp::Sum,
                                axes: axes.clone(),
                            }),
                            &[a],
                        );
                        b.g.outputs = vec![o, s];
                        let (got, want) = both(&b.g, std::slice::from_ref(&plain));
                        let (rel, k) = if dt == DType::F32 {
                            (2f64.powi(-23), 1e-12)
                        } else {
                            (0.0, 1e-13)
                        };
                        let bound: Vec<f64> = want[1].to_f64().iter().map(|s| k * s).collect();
                        assert_within(&got[0], &want[0], rel, &bound, &ctx);
                        // With NaN and infinities: NaN where the reference has NaN, equal infinities.
                        let mut b2 = Builder::default();
                        let v2 = b2.input(shape, dt);
                        let o2 = b2.op(
                            Prim::Reduction(ReductionOp::Reduce {
                                op,
                                axes: axes.clone(),
                            }),
                            &[v2],
                        );
                        b2.g.outputs = vec![o2];
                        let (got, want) = both(&b2.g, std::slice::from_ref(&wild));
                        let (g, w) = (got[0].to_f64(), want[0].to_f64());
                        for i in 0..g.len() {
                            if !w[i].is_finite() || !g[i].is_finite() {
                                assert!(
                                    (w[i].is_nan() && g[i].is_nan()) || w[i] == g[i],
                                    "{ctx} with specials at {i}: got {}, want {}",
                                    g[i],
                                    w[i]
                                );
                            }
                        }
                    }
                }
            }
            if numel(shape) > 0 {
                for axis in 0..r {
                    for op in [ArgOp::ArgMax, ArgOp::ArgMin] {
                        let mut b = Builder::default();
                        let v = b.input(shape, dt);
                        let o = b.op(Prim::Reduction(ReductionOp::ArgReduce { op, axis }), &[v]);
                        b.g.outputs = vec![o];
                        let (got, want) = both(&b.g, std::slice::from_ref(&wild));
                        assert_bits(
                            &got[0],
                            &want[0],
                            &format!("{op:?} axis {axis} of {dt}{shape:?}"),
                        );
                    }
                }
            }
        }
    }
}

// ---- matmul -------------------------------------------------------------------------------------

fn dims(lc: &[usize], rc: &[usize], lb: &[usize], rb: &[usize]) -> DotDims {
    DotDims {
        lhs_contract: lc.to_vec(),
        rhs_contract: rc.to_vec(),
        lhs_batch: lb.to_vec(),
        rhs_batch: rb.to_vec(),
    }
}

/// `(lhs shape, rhs shape, dims)`: plain, transposed, batched (leading and trailing batch axes),
/// several contracted axes (one order that is a strided run, one that needs a gather), vectors,
/// and empty m, k, n.
fn dot_cases() -> Vec<(Vec<usize>, Vec<usize>, DotDims)> {
    vec![
        (vec![5, 7], vec![7, 3], dims(&[1], &[0], &[], &[])),
        (vec![7, 5], vec![7, 3], dims(&[0], &[0], &[], &[])),
        (vec![5, 7], vec![3, 7], dims(&[1], &[1], &[], &[])),
        (vec![7, 5], vec![3, 7], dims(&[0], &[1], &[], &[])),
        (vec![2, 5, 7], vec![2, 7, 3], dims(&[2], &[1], &[0], &[0])),
        (vec![5, 7, 2], vec![7, 3, 2], dims(&[1], &[0], &[2], &[2])),
        (
            vec![2, 3, 5, 4],
            vec![3, 4, 6, 2],
            dims(&[1, 3], &[0, 1], &[0], &[3]),
        ),
        (
            vec![4, 5, 3],
            vec![3, 6, 4],
            dims(&[2, 0], &[0, 2], &[], &[]),
        ),
        (
            vec![2, 3, 4, 5],
            vec![5, 4, 3],
            dims(&[3, 2], &[0, 1], &[], &[]),
        ),
        (vec![7], vec![7], dims(&[0], &[0], &[], &[])),
        (vec![7], vec![7, 4], dims(&[0], &[0], &[], &[])),
        (vec![3, 2], vec![4, 5], dims(&[], &[], &[], &[])),
        (vec![0, 7], vec![7, 3], dims(&[1], &[0], &[], &[])),
        (vec![5, 0], vec![0, 3], dims(&[1], &[0], &[], &[])),
        (vec![5, 7], vec![7, 0], dims(&[1], &[0], &[], &[])),
        (vec![67, 130], vec![130, 45], dims(&[1], &[0], &[], &[])),
        (
            vec![3, 40, 70],
            vec![70, 3, 50],
            dims(&[2], &[0], &[0], &[1]),
        ),
    ]
}

#[test]
fn float_matmul_matches_the_interpreter_within_rounding() {
    for (ci, (ls, rs, d)) in dot_cases().into_iter().enumerate() {
        for dt in [DType::F32, DType::F64] {
            let ctx = format!("case {ci}: {dt}{ls:?} x {dt}{rs:?} {d:?}");
            let k: usize = d.lhs_contract.iter().map(|&a| ls[a]).product();
            let eps = if dt == DType::F32 {
                2f64.powi(-24)
            } else {
                2f64.powi(-53)
            };
            let mut b = Builder::default();
            let (vl, vr) = (b.input(&ls, dt), b.input(&rs, dt));
            let o = b.op(Prim::DotGeneral(d.clone()), &[vl, vr]);
            let (al, ar) = (
                b.op(Prim::Elementwise(ElementwiseOp::Unary(UnaryOp::Abs)), &[vl]),
                b.op(Prim::Elementwise(ElementwiseOp::Unary(UnaryOp::Abs)), &[vr]),
            );
            let s = b.op(Prim::DotGeneral(d.clone()), &[al, ar]);
            b.g.outputs = vec![o, s];
            let make = |shape: &[usize], seed: u64| {
                let v = f32s(numel(shape), seed, -2.0, 2.0);
                match dt {
                    DType::F32 => HostArray::from_vec(v, shape).unwrap(),
                    _ => HostArray::from_vec(
                        v.into_iter().map(|x| x as f64 / 3.0).collect::<Vec<f64>>(),
                        shape,
                    )
                    .unwrap(),
                }
            };
            let inputs = [make(&ls, 100 + ci as u64), make(&rs, 200 + ci as u64)];
            let (got, want) = both(&b.g, &inputs);
            let bound: Vec<f64> = want[1]
                .to_f64()
                .iter()
                .map(|s| 2.0 * k as f64 * eps * s + 1e-30)
                .collect();
            assert_within(&got[0], &want[0], 0.0, &bound, &ctx);
            // NaN and infinities propagate like the interpreter's (no overflow: |x| <= 4).
            let mut wild = inputs.clone();
            for (w, v) in wild.iter_mut().zip([f32::NAN, f32::INFINITY]) {
                if w.len() > 2 {
                    match &mut w.data {
                        HostData::F32(x) => x[1] = v,
                        HostData::F64(x) => x[1] = v as f64,
                        _ => {}
                    }
                }
            }
            let (got, want) = both(&b.g, &wild);
            assert_within(
                &got[0],
                &want[0],
                0.0,
                &bound.iter().map(|_| f64::INFINITY).collect::<Vec<_>>(),
                &format!("{ctx} with NaN/inf"),
            );
        }
    }
}

#[test]
fn integer_matmul_wraps_like_the_interpreter() {
    for (ci, (ls, rs, d)) in dot_cases().into_iter().enumerate() {
        for dt in [DType::I32, DType::U32] {
            let mut b = Builder::default();
            let (vl, vr) = (b.input(&ls, dt), b.input(&rs, dt));
            let o = b.op(Prim::DotGeneral(d.clone()), &[vl, vr]);
            b.g.outputs = vec![o];
            let inputs = [
                special(dt, &ls, 300 + ci as u64),
                special(dt, &rs, 400 + ci as u64),
            ];
            let (got, want) = both(&b.g, &inputs);
            assert_bits(
                &got[0],
                &want[0],
                &format!("case {ci}: {dt}{ls:?} x {dt}{rs:?}"),
            );
        }
    }
}

/// A 256² f32 matmul (the GEMM's threaded, packed path) within rounding.
#[test]
fn large_f32_matmul_is_within_rounding() {
    let n = 256;
    let mut b = Builder::default();
    let (vl, vr) = (b.input(&[n, n], DType::F32), b.input(&[n, n], DType::F32));
    let d = dims(&[1], &[0], &[], &[]);
    let o = b.op(Prim::DotGeneral(d.clone()), &[vl, vr]);
    let (al, ar) = (
        b.op(Prim::Elementwise(ElementwiseOp::Unary(UnaryOp::Abs)), &[vl]),
        b.op(Prim::Elementwise(ElementwiseOp::Unary(UnaryOp::Abs)), &[vr]),
    );
    let s = b.op(Prim::DotGeneral(d), &[al, ar]);
    b.g.outputs = vec![o, s];
    let inputs = [
        HostArray::from_vec(f32s(n * n, 1, -1.0, 1.0), &[n, n]).unwrap(),
        HostArray::from_vec(f32s(n * n, 2, -1.0, 1.0), &[n, n]).unwrap(),
    ];
    let (got, want) = both(&b.g, &inputs);
    let bound: Vec<f64> = want[1]
        .to_f64()
        .iter()
        .map(|s| 2.0 * n as f64 * 2f64.powi(-24) * s)
        .collect();
    assert_within(&got[0], &want[0], 0.0, &bound, "256x256 f32 matmul");
}

// ---- errors -------------------------------------------------------------------------------------

#[test]
fn bad_inputs_are_the_interpreters_errors() {
    let mut b = Builder::default();
    let v = b.input(&[3], DType::F32);
    let o = b.op(Prim::Elementwise(ElementwiseOp::Unary(UnaryOp::Exp)), &[v]);
    b.g.outputs = vec![o];
    let wrong_shape = HostArray::from_vec(vec![1.0f32; 4], &[4]).unwrap();
    let wrong_dtype = HostArray::from_vec(vec![1i32; 3], &[3]).unwrap();
    for bad in [vec![], vec![wrong_shape], vec![wrong_dtype]] {
        let want = brigade::reference::eval_graph(&b.g, &bad).unwrap_err();
        let got = brigade::cpu::eval_graph(&b.g, &bad).unwrap_err();
        assert_eq!(got.to_string(), want.to_string());
    }
}

// ---- through the cpu device ---------------------------------------------------------------------

fn cpu_device() -> brigade::Device {
    devices_with("cpu:1")[0].clone()
}

/// `f` on the cpu device against the reference evaluation of its traced program.
fn on_cpu_vs_reference<F>(f: F, args: &[Array], tol: Tol, ctx: &str)
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let graph = jit(&f).graph(args).unwrap();
    let hosts: Vec<HostArray> = args.iter().map(host).collect();
    let want = brigade::reference::eval_graph(&graph, &hosts).unwrap();
    let got = run_on(&cpu_device(), &f, args);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_close(g, w, tol, ctx);
    }
}

#[test]
fn jit_vmap_grad_pmap_and_loops_on_the_cpu_device_match_the_reference() {
    let x = rand_f32(&[8, 16], 1);
    let w = rand_f32(&[16, 4], 2);
    // jit: an MLP layer with a softmax.
    on_cpu_vs_reference(
        |a: &[Tensor]| {
            let h = a[0].matmul(&a[1]).tanh();
            vec![h.softmax(-1), h.sum(vec![0], false), h.argmax(1, false)]
        },
        &[x.clone(), w.clone()],
        Tol::REDUCE,
        "jit",
    );
    // grad of a squared loss.
    on_cpu_vs_reference(
        |a: &[Tensor]| {
            let loss = |p: &[Tensor]| vec![p[0].matmul(&p[1]).square().mean_all()];
            brigade::grad(loss).apply(a)
        },
        &[x.clone(), w.clone()],
        Tol::REDUCE,
        "grad",
    );
    // vmap of a matrix-vector product over the rows of x.
    on_cpu_vs_reference(
        |a: &[Tensor]| {
            let wt = a[1].clone();
            brigade::vmap(move |r: &[Tensor]| vec![r[0].matmul(&wt).exp()]).apply(&a[..1])
        },
        &[x.clone(), w.clone()],
        Tol::REDUCE,
        "vmap",
    );
    // A fori_loop whose body runs on the cpu executor.
    on_cpu_vs_reference(
        |a: &[Tensor]| {
            brigade::fori_loop(
                0,
                5,
                |_, c| {
                    vec![
                        c[0].matmul(&c[1]).tanh().matmul(&c[1].transpose(&[1, 0])) * 0.5,
                        c[1].clone(),
                    ]
                },
                &[a[0].clone(), a[1].clone()],
            )
        },
        &[x.clone(), w.clone()],
        Tol::REDUCE,
        "fori_loop",
    );
    // pmap over two cpu devices, with a psum.
    let devs = devices_with("cpu:2");
    let xs = rand_f32(&[2, 4, 16], 3);
    let out = brigade::pmap(|a: &[Tensor]| vec![brigade::psum(&a[0].matmul(&a[1]).exp(), "i")])
        .axis_name("i")
        .devices(&devs)
        .in_axes(&[Some(0), None])
        .call(&[xs.clone(), w.clone()])
        .unwrap();
    let want = {
        let g = jit(|a: &[Tensor]| vec![a[0].matmul(&a[1]).exp().sum(vec![0], false)])
            .graph(&[xs.clone(), w.clone()])
            .unwrap();
        brigade::reference::eval_graph(&g, &[host(&xs), host(&w)]).unwrap()
    };
    let got = host(&out[0]);
    for d in 0..2 {
        let shard = HostArray::from_vec(
            got.to_vec::<f32>().unwrap()[d * 16..(d + 1) * 16].to_vec(),
            &[4, 4],
        )
        .unwrap();
        assert_close(&shard, &want[0], Tol::REDUCE, &format!("pmap shard {d}"));
    }
}
