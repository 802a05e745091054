//! Random programs (proptest): shapes of rank 0–3 with dims in {0, 1, 2, 3, 5}, broadcasting pairs,
//! chains of unary/binary ops, reductions, transposes, reshapes, slices, pads, concatenations,
//! selects and several outputs — each jitted and compared with the reference on every GPU device.
//!
//! Steps are interpreted against the current shape (an axis is `raw % rank`, and so on), so any
//! generated sequence is a valid program and shrinking stays meaningful. Values stay in safe
//! domains: transcendental ops see squashed arguments (`tanh` first) or `abs() + c`, divisions
//! divide by `abs() + 1`, and max/min/argmax never reduce an empty axis.
//!
//! The runs are deterministic (fixed RNG seed) unless `PROPTEST_RNG_SEED` is set; `PROPTEST_CASES`
//! overrides the number of cases (24 by default, to keep CI time sane on 2 cores).

mod common;

use brigade::{Array, DType, Tensor, select};
use common::*;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

const DIMS: [usize; 5] = [0, 1, 2, 3, 5];
/// Steps that would make an array larger than this are skipped.
const MAX_ELEMENTS: usize = 1500;
const MAX_RANK: usize = 4;

#[derive(Clone, Debug)]
enum Step {
    /// A unary op (index into the list in `unary`).
    Unary(u8),
    /// A binary op with a constant operand whose shape is derived from the current one by `mask`
    /// (see `derive_shape`).
    Binary {
        op: u8,
        mask: u8,
        seed: u16,
    },
    /// A binary op with the second input of the program, when its shape broadcasts.
    WithInput(u8),
    /// sum / max / min / mean / argmax over one axis.
    Reduce {
        op: u8,
        axis: u8,
        keepdims: bool,
    },
    /// sum / max over the axes whose bit is set in `bits`, listed in decreasing order when `reverse`.
    ReduceAxes {
        max: bool,
        bits: u8,
        reverse: bool,
    },
    /// Sum over all axes.
    ReduceAll,
    Transpose(u8),
    /// Flatten, un-flatten to another factorization, expand_dims or squeeze.
    Reshape(u8),
    Slice {
        axis: u8,
        start: u8,
        len: u8,
        stride: u8,
    },
    Pad {
        axis: u8,
        lo: u8,
        hi: u8,
        interior: u8,
    },
    Concat {
        axis: u8,
        seed: u16,
    },
    /// `select(cur > 0, cur, other)`.
    Select {
        mask: u8,
        seed: u16,
    },
    /// Add the current value to the outputs (it then has two uses and is stored).
    Emit,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..12).prop_map(Step::Unary),
        4 => (0u8..6, any::<u8>(), any::<u16>()).prop_map(|(op, mask, seed)| Step::Binary { op, mask, seed }),
        2 => (0u8..6).prop_map(Step::WithInput),
        3 => (0u8..5, any::<u8>(), any::<bool>()).prop_map(|(op, axis, keepdims)| Step::Reduce { op, axis, keepdims }),
        1 => (any::<bool>(), any::<u8>(), any::<bool>()).prop_map(|(max, bits, reverse)| Step::ReduceAxes { max, bits, reverse }),
        1 => Just(Step::ReduceAll),
        2 => any::<u8>().prop_map(Step::Transpose),
        2 => any::<u8>().prop_map(Step::Reshape),
        2 => (any::<u8>(), 0u8..4, 0u8..6, 1u8..4).prop_map(|(axis, start, len, stride)| Step::Slice { axis, start, len, stride }),
        1 => (any::<u8>(), 0u8..3, 0u8..3, 0u8..2).prop_map(|(axis, lo, hi, interior)| Step::Pad { axis, lo, hi, interior }),
        1 => (any::<u8>(), any::<u16>()).prop_map(|(axis, seed)| Step::Concat { axis, seed }),
        1 => (any::<u8>(), any::<u16>()).prop_map(|(mask, seed)| Step::Select { mask, seed }),
        1 => Just(Step::Emit),
    ]
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop::sample::select(DIMS.to_vec()), 0..=3)
}

/// A shape that broadcasts with `s`: bit i (i < 4) of `mask` sets axis i to 1; bit 4 drops the
/// leading axis; bit 5 stretches a size-1 axis of `s` to 3 (so `s` broadcasts up); bit 6 adds a
/// leading axis of 2.
fn derive_shape(s: &[usize], mask: u8) -> Vec<usize> {
    let mut d: Vec<usize> = s
        .iter()
        .enumerate()
        .map(|(i, &n)| if i < 4 && mask & (1 << i) != 0 { 1 } else { n })
        .collect();
    if mask & 0x20 != 0 {
        if let Some(i) = s.iter().position(|&n| n == 1) {
            d[i] = 3;
        }
    }
    if mask & 0x10 != 0 && !d.is_empty() {
        d.remove(0);
    }
    if mask & 0x40 != 0 && mask & 0x10 == 0 && d.len() < MAX_RANK {
        d.insert(0, 2);
    }
    d
}

fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let da = if i + a.len() >= n {
                a[i + a.len() - n]
            } else {
                1
            };
            let db = if i + b.len() >= n {
                b[i + b.len() - n]
            } else {
                1
            };
            if da == db || db == 1 {
                Some(da)
            } else if da == 1 {
                Some(db)
            } else {
                None
            }
        })
        .collect()
}

fn fits(shape: &[usize]) -> bool {
    shape.len() <= MAX_RANK && numel(shape) <= MAX_ELEMENTS
}

/// Unary ops with bounded, smooth results on bounded inputs (f32), or integer ops (i32: every
/// op wraps like the device's 32-bit integers).
fn unary(op: u8, x: &Tensor) -> Tensor {
    if x.dtype() == DType::I32 {
        return match op % 6 {
            0 => x.neg(),
            1 => x.abs(),
            2 => x.not(),
            3 => x.relu(),
            4 => x.sign(),
            _ => (x % 100).square(),
        };
    }
    match op {
        0 => x.neg(),
        1 => x.abs(),
        2 => (x.tanh() * 3.0).sin(),
        3 => (x.tanh() * 3.0).cos(),
        4 => x.tanh(),
        5 => x.sigmoid(),
        6 => x.relu(),
        7 => (x.tanh() * 2.0).exp(),
        8 => (x.abs() + 1.0).log(),
        9 => (x.abs() + 0.25).sqrt(),
        10 => (x.abs() + 0.5).rsqrt(),
        _ => x.tanh().square(),
    }
}

fn binary(op: u8, a: &Tensor, b: &Tensor) -> Tensor {
    if a.dtype() == DType::I32 {
        // Division and remainder by any value, zero and negative numbers included.
        return match op {
            0 => a + b,
            1 => a - b,
            2 => a.div(b),
            3 => a.rem(b),
            4 => a.and(b).maximum(&a.or(b)),
            _ => a.minimum(&(b * 3)),
        };
    }
    match op {
        0 => a + b,
        1 => a - b,
        2 => a * &b.tanh(),
        3 => a / &(b.abs() + 1.0),
        4 => a.maximum(b),
        _ => a.minimum(b),
    }
}

fn constant(dtype: DType, shape: &[usize], seed: u16) -> Tensor {
    match dtype {
        DType::I32 => Tensor::from(rand_i32(shape, 1000 + seed as u64, -20, 20)),
        _ => Tensor::from(rand_f32(shape, 1000 + seed as u64)),
    }
}

/// Apply one step; steps that do not fit the current shape leave it unchanged.
fn apply(step: &Step, cur: Tensor, input: &Tensor, outs: &mut Vec<Tensor>) -> Tensor {
    let s = cur.shape().to_vec();
    let r = s.len();
    match *step {
        Step::Unary(op) => unary(op, &cur),
        Step::Binary { op, mask, seed } => {
            let o = derive_shape(&s, mask);
            match broadcast(&s, &o) {
                Some(out) if fits(&out) => binary(op, &cur, &constant(cur.dtype(), &o, seed)),
                _ => cur,
            }
        }
        Step::WithInput(op) => match broadcast(&s, input.shape()) {
            Some(out) if fits(&out) => binary(op, &cur, input),
            _ => cur,
        },
        Step::Reduce { op, axis, keepdims } => {
            if r == 0 {
                return cur;
            }
            let ax = (axis as usize % r) as i64;
            let empty = s[ax as usize] == 0;
            match op {
                0 => cur.sum(ax, keepdims),
                1 if !empty => cur.max(ax, keepdims),
                2 if !empty => cur.min(ax, keepdims),
                3 if !empty && cur.dtype() == DType::F32 => cur.mean(ax, keepdims),
                4 if !empty => cur.argmax(ax, keepdims).cast(cur.dtype()),
                _ => cur.sum(ax, keepdims),
            }
        }
        Step::ReduceAxes { max, bits, reverse } => {
            let mut axes: Vec<i64> = (0..r)
                .filter(|&i| bits & (1 << i) != 0)
                .map(|i| i as i64)
                .collect();
            if reverse {
                axes.reverse();
            }
            let empty = axes.iter().any(|&a| s[a as usize] == 0);
            if max && !empty {
                cur.max(axes, false)
            } else {
                cur.sum(axes, bits & 0x80 != 0)
            }
        }
        Step::ReduceAll => cur.sum_all(),
        Step::Transpose(p) => {
            let mut perm: Vec<usize> = (0..r).collect();
            // The p-th permutation in a simple enumeration: rotate, then maybe swap the first two.
            if r > 1 {
                perm.rotate_left(p as usize % r);
                if p & 0x80 != 0 {
                    perm.swap(0, 1);
                }
            }
            cur.transpose(&perm)
        }
        Step::Reshape(k) => match k % 4 {
            0 => cur.reshape(&[-1]),
            1 if r >= 2 => {
                // Merge the last two axes.
                let mut t: Vec<i64> = s[..r - 2].iter().map(|&d| d as i64).collect();
                t.push((s[r - 2] * s[r - 1]) as i64);
                cur.reshape(&t)
            }
            2 if r < MAX_RANK => cur.expand_dims((k as usize / 4 % (r + 1)) as i64),
            _ => match s.iter().position(|&d| d == 1) {
                Some(a) => cur.squeeze(&[a as i64]),
                None if (1..MAX_RANK).contains(&r) => {
                    // Split the first axis into (n, 1) and move the 1 to the end.
                    let mut t: Vec<i64> = s.iter().map(|&d| d as i64).collect();
                    t.push(1);
                    cur.reshape(&t)
                }
                None => cur,
            },
        },
        Step::Slice {
            axis,
            start,
            len,
            stride,
        } => {
            if r == 0 {
                return cur;
            }
            let ax = axis as usize % r;
            let st = (start as usize).min(s[ax]);
            let lim = (st + len as usize).min(s[ax]);
            let mut start_v = vec![0; r];
            let mut limit_v = s.clone();
            let mut stride_v = vec![1; r];
            start_v[ax] = st;
            limit_v[ax] = lim;
            stride_v[ax] = stride as usize;
            cur.slice(&start_v, &limit_v, Some(&stride_v))
        }
        Step::Pad {
            axis,
            lo,
            hi,
            interior,
        } => {
            if r == 0 {
                return cur;
            }
            let ax = axis as usize % r;
            let (mut l, mut h, mut i) = (vec![0; r], vec![0; r], vec![0; r]);
            l[ax] = lo as usize;
            h[ax] = hi as usize;
            i[ax] = interior as usize;
            let mut out = s.clone();
            out[ax] += l[ax] + h[ax] + s[ax].saturating_sub(1) * i[ax];
            if !fits(&out) {
                return cur;
            }
            cur.pad_interior(&l, &h, &i, -0.5f32)
        }
        Step::Concat { axis, seed } => {
            if r == 0 {
                return cur;
            }
            let ax = axis as usize % r;
            let mut other = s.clone();
            other[ax] = [0, 1, 2][seed as usize % 3];
            let mut out = s.clone();
            out[ax] = 2 * s[ax] + other[ax];
            if !fits(&out) {
                return cur;
            }
            Tensor::concatenate(
                &[&cur, &constant(cur.dtype(), &other, seed), &cur.neg()],
                ax as i64,
            )
        }
        Step::Select { mask, seed } => {
            let o = derive_shape(&s, mask);
            match broadcast(&s, &o) {
                Some(out) if fits(&out) => select(
                    &cur.gt(&Tensor::scalar(0.0f32).cast(cur.dtype())),
                    &cur,
                    &constant(cur.dtype(), &o, seed),
                ),
                _ => cur,
            }
        }
        Step::Emit => {
            outs.push(cur.clone());
            cur
        }
    }
}

fn program(steps: &[Step]) -> impl Fn(&[Tensor]) -> Vec<Tensor> + '_ {
    move |x: &[Tensor]| {
        let mut outs = Vec::new();
        let mut cur = &x[0] + &x[1];
        for st in steps {
            cur = apply(st, cur, &x[1], &mut outs);
        }
        outs.push(cur);
        outs
    }
}

fn config() -> ProptestConfig {
    let default = ProptestConfig::default();
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(24),
        rng_seed: if std::env::var("PROPTEST_RNG_SEED").is_ok() {
            default.rng_seed
        } else {
            RngSeed::Fixed(0x00b1_9ade)
        },
        // Every case compiles kernels on two software drivers: keep shrinking short.
        max_shrink_iters: 64,
        failure_persistence: None,
        ..default
    }
}

/// Compare on every device with an absolute tolerance scaled by the largest reference value of
/// each output: f32 programs of up to ~15 steps accumulate a few ulp per step, and intermediate
/// values can be larger than the final ones (cancellation). Integer outputs compare exactly.
fn check(steps: &[Step], args: &[Array]) {
    let want = check_on_all_scaled(program(steps), args);
    assert!(!want.is_empty());
}

fn check_on_all_scaled<F: Fn(&[Tensor]) -> Vec<Tensor>>(
    f: F,
    args: &[Array],
) -> Vec<brigade::HostArray> {
    let hosts: Vec<_> = args.iter().map(host).collect();
    let graph = brigade::jit(&f)
        .graph(args)
        .unwrap_or_else(|e| panic!("tracing failed: {e}"));
    let want = brigade::reference::eval_graph(&graph, &hosts).unwrap();
    for dev in gpu_devices() {
        let _guard = device_guard(&dev);
        let outs = brigade::jit(&f)
            .on(&dev)
            .call(args)
            .unwrap_or_else(|e| panic!("on {}: {e}\n{graph}", dev.name()));
        assert_eq!(outs.len(), want.len());
        for (k, (o, w)) in outs.iter().zip(&want).enumerate() {
            let scale = w
                .to_f64()
                .iter()
                .filter(|v| v.is_finite())
                .fold(1.0f64, |m, v| m.max(v.abs()));
            let tol = Tol::new(2e-4, 2e-4 * scale);
            assert_close(
                &host(o),
                w,
                tol,
                &format!("on {}: output {k} of\n{graph}\n", dev.name()),
            );
        }
    }
    want
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_programs_match_the_reference(a in shape(), mask in any::<u8>(), steps in prop::collection::vec(step(), 1..10), seed in any::<u16>()) {
        let b = derive_shape(&a, mask);
        let args = [rand_f32(&a, seed as u64), rand_f32(&b, seed as u64 + 1)];
        check(&steps, &args);
    }

    #[test]
    fn random_integer_programs_match_the_reference_exactly(a in shape(), mask in any::<u8>(), steps in prop::collection::vec(step(), 1..10), seed in any::<u16>()) {
        let b = derive_shape(&a, mask);
        let args = [rand_i32(&a, seed as u64, -50, 50), rand_i32(&b, seed as u64 + 1, -9, 9)];
        check(&steps, &args);
    }

    #[test]
    fn random_elementwise_chains_fuse_into_one_kernel(a in shape(), mask in any::<u8>(), ops in prop::collection::vec((0u8..12, 0u8..6), 1..8)) {
        // Unary/binary chains over the two inputs (broadcasting) are one kernel and agree with the
        // reference.
        let b = derive_shape(&a, mask);
        let f = |x: &[Tensor]| {
            let mut cur = x[0].clone();
            for &(u, bop) in &ops {
                cur = binary(bop, &unary(u, &cur), &x[1]);
            }
            vec![cur]
        };
        let args = [rand_f32(&a, 7), rand_f32(&b, 8)];
        check_on_all_scaled(f, &args);
        let dev = device_of("vulkan");
        let p = brigade::jit(f).program(&args, &dev).unwrap();
        prop_assert_eq!(p.launches.len(), 1, "{:?}", p.launches.iter().map(|l| l.label.clone()).collect::<Vec<_>>());
    }
}

/// A fixed, longer program touching every kind of step (a smoke test independent of the RNG).
#[test]
fn a_long_fixed_program() {
    let steps = vec![
        Step::Unary(7),
        Step::Binary {
            op: 2,
            mask: 0b0100_0001,
            seed: 3,
        },
        Step::Emit,
        Step::Transpose(1),
        Step::Slice {
            axis: 1,
            start: 1,
            len: 4,
            stride: 2,
        },
        Step::Pad {
            axis: 0,
            lo: 1,
            hi: 2,
            interior: 1,
        },
        Step::Concat { axis: 2, seed: 5 },
        Step::Reshape(1),
        Step::Select {
            mask: 0b10,
            seed: 9,
        },
        Step::Emit,
        Step::Reduce {
            op: 4,
            axis: 1,
            keepdims: true,
        },
        Step::WithInput(3),
        Step::Reduce {
            op: 3,
            axis: 0,
            keepdims: false,
        },
        Step::Reshape(2),
        Step::ReduceAll,
    ];
    check(&steps, &[rand_f32(&[2, 3, 5], 1), rand_f32(&[3, 1], 2)]);
}
