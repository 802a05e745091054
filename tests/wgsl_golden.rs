//! The generated WGSL, pinned: a fixed corpus of programs (every primitive family, the tour's
//! programs, transforms, three limit sets) is lowered without a device, and every launch's label,
//! workgroup count and WGSL hash is compared with the committed manifest
//! `tests/data/wgsl_manifest.txt`. A refactor of the code generator that claims to change nothing
//! proves it here: the manifest stays as it is.
//!
//! ```sh
//! cargo test --test wgsl_golden                              # compare with the manifest
//! BRIGADE_BLESS=1 cargo test --test wgsl_golden              # rewrite it (an intended change)
//! BRIGADE_DUMP_WGSL=/tmp/after cargo test --test wgsl_golden # also write every text, for diff -r
//! ```
//!
//! With `BRIGADE_DUMP_WGSL=DIR` the corpus test writes `DIR/<limits>/<program>/<launch>-<label>.wgsl`
//! (the first line gives the workgroups), so `diff -r` of a dump made before a change and one made
//! after shows the texts that differ. In a program run (not this test) the same variable makes
//! `Device::kernel` write every kernel it is given (see `scripts/wgsl_dump.sh`); the last test here
//! checks that on every GPU device.
//!
//! Lowering here uses `brigade::lower::lower`, whose matmul kernels are the heuristic's choice (what
//! a device uses with `BRIGADE_MATMUL_TUNE=off`), so nothing depends on the machine.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use brigade::device::{DUMP_WGSL_ENV, DeviceLimits};
use brigade::lower::stages::split_stages;
use brigade::lower::{Program, lower};
use brigade::nn::{Layout, avg_pool, max_pool};
use brigade::ops::DotDims;
use brigade::optim::{Adam, AdamState};
use brigade::{
    Array, Axes, ConvOptions, DType, Graph, Padding, ScanOptions, TakeMode, Tensor, cond,
    fori_loop, grad, jit, pmap, pmean, psum, random, scan, scan_with, select, shard_map, switch,
    value_and_grad, vmap,
};
use common::*;

const MANIFEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/wgsl_manifest.txt");
const BLESS_ENV: &str = "BRIGADE_BLESS";

/// 64-bit FNV-1a, the hash of `BRIGADE_DUMP_WGSL`'s file names (so a manifest line names the file
/// a program run dumps for that text). Written here because std's `DefaultHasher` is not stable
/// across Rust releases, and the manifest must mean the same on every toolchain.
fn fnv1a64(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in text.as_bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

// ---- the corpus ---------------------------------------------------------------------------------

type Build = Box<dyn Fn() -> brigade::Result<Vec<Graph>>>;

/// A named program: one graph (a `jit`), or the stages of a parallel program.
struct Case {
    name: String,
    build: Build,
    /// An op applied to every dtype, some of which it refuses: the manifest records the refusal
    /// (so a dtype newly refused or accepted shows too), and the corpus check allows it.
    may_fail: bool,
}

fn jit_case(
    cases: &mut Vec<Case>,
    name: impl Into<String>,
    f: impl Fn(&[Tensor]) -> Vec<Tensor> + Clone + 'static,
    args: Vec<Array>,
) {
    cases.push(Case {
        name: name.into(),
        build: Box::new(move || Ok(vec![jit(f.clone()).graph(&args)?])),
        may_fail: false,
    });
}

/// [`jit_case`] for an op tried on every dtype (see [`Case::may_fail`]).
fn dtype_case(
    cases: &mut Vec<Case>,
    name: impl Into<String>,
    f: impl Fn(&[Tensor]) -> Vec<Tensor> + Clone + 'static,
    args: Vec<Array>,
) {
    jit_case(cases, name, f, args);
    cases.last_mut().expect("just pushed").may_fail = true;
}

/// A `pmap` / `shard_map` program, traced for two cpu devices (no GPU needed) and cut into its
/// stages, each lowered like a `jit` program (what every GPU device of the map would run).
fn parallel_case<G>(
    cases: &mut Vec<Case>,
    name: impl Into<String>,
    make: impl Fn() -> brigade::Parallel<G> + 'static,
    args: Vec<Array>,
) where
    G: Fn(&[Tensor]) -> Vec<Tensor> + 'static,
{
    cases.push(Case {
        name: name.into(),
        build: Box::new(move || {
            let g = make().devices(&devices_with("cpu:2")).graph(&args)?;
            Ok(split_stages(&g)
                .stages
                .into_iter()
                .map(|s| s.graph)
                .collect())
        }),
        may_fail: false,
    });
}

type Unary = fn(&Tensor) -> Tensor;
type Binary = fn(&Tensor, &Tensor) -> Tensor;

const DTYPES: [DType; 4] = [DType::F32, DType::I32, DType::U32, DType::Bool];

fn elementwise(cases: &mut Vec<Case>) {
    let unaries: [(&str, Unary); 21] = [
        ("neg", Tensor::neg),
        ("abs", Tensor::abs),
        ("exp", Tensor::exp),
        ("log", Tensor::log),
        ("sqrt", Tensor::sqrt),
        ("rsqrt", Tensor::rsqrt),
        ("sin", Tensor::sin),
        ("cos", Tensor::cos),
        ("tanh", Tensor::tanh),
        ("sigmoid", Tensor::sigmoid),
        ("relu", Tensor::relu),
        ("square", Tensor::square),
        ("sign", Tensor::sign),
        ("floor", Tensor::floor),
        ("ceil", Tensor::ceil),
        ("round", Tensor::round),
        ("not", Tensor::not),
        ("is_nan", Tensor::is_nan),
        ("is_inf", Tensor::is_inf),
        ("is_finite", Tensor::is_finite),
        ("nan_to_num", Tensor::nan_to_num_default),
    ];
    let binaries: [(&str, Binary); 18] = [
        ("add", Tensor::add),
        ("sub", Tensor::sub),
        ("mul", Tensor::mul),
        ("div", Tensor::div),
        ("pow", Tensor::pow),
        ("max", Tensor::maximum),
        ("min", Tensor::minimum),
        ("rem", Tensor::rem),
        ("floor_divide", Tensor::floor_divide),
        ("remainder", Tensor::remainder),
        ("eq", Tensor::eq),
        ("ne", Tensor::ne),
        ("lt", Tensor::lt),
        ("le", Tensor::le),
        ("gt", Tensor::gt),
        ("ge", Tensor::ge),
        ("and", Tensor::and),
        ("or", Tensor::or),
    ];
    for dt in DTYPES {
        for (name, op) in unaries {
            // 35 elements: vec4 body plus a tail; 4096: whole vec4s only.
            for shape in [&[7usize, 5][..], &[4096]] {
                dtype_case(
                    cases,
                    format!("{name} {dt}{shape:?}"),
                    move |x| vec![op(&x[0])],
                    vec![rand_of(dt, shape, 1)],
                );
            }
        }
        for (name, op) in binaries {
            let pairs: [(&[usize], &[usize]); 4] = [
                (&[3, 4], &[3, 4]),
                (&[3, 4], &[4]),
                (&[], &[4, 5]),
                (&[3, 1], &[1, 4]),
            ];
            for (a, b) in pairs {
                dtype_case(
                    cases,
                    format!("{name} {dt}{a:?} {dt}{b:?}"),
                    move |x| vec![op(&x[0], &x[1])],
                    vec![rand_of(dt, a, 2), rand_of(dt, b, 3)],
                );
            }
        }
        for to in DTYPES {
            dtype_case(
                cases,
                format!("cast {dt} -> {to}"),
                move |x| vec![x[0].cast(to)],
                vec![rand_of(dt, &[6, 5], 4)],
            );
        }
        dtype_case(
            cases,
            format!("select {dt}"),
            |x| vec![select(&x[0], &x[1], &x[2]), x[0].where_(&x[2], &x[1])],
            vec![
                rand_of(DType::Bool, &[2, 3], 5),
                rand_of(dt, &[3], 6),
                rand_of(dt, &[], 7),
            ],
        );
        dtype_case(
            cases,
            format!("full/iota/arange {dt}"),
            move |x| {
                vec![
                    &Tensor::iota(dt, &[3, 4], 1) + &x[0],
                    Tensor::full(brigade::Scalar::F32(2.0).cast(dt), &[3, 4]),
                    Tensor::arange(12).cast(dt).reshape(&[3, 4]),
                ]
            },
            vec![rand_of(dt, &[3, 4], 8)],
        );
    }
    jit_case(
        cases,
        "powf and nan_to_num with values",
        |x| {
            vec![
                x[0].powf(2.5),
                x[0].nan_to_num(1.5, Some(9.0), None),
                (x[0].exp() * 3.0 + 1.0).sqrt() - x[0].sigmoid(),
            ]
        },
        vec![rand_f32(&[9, 7], 9)],
    );
    jit_case(
        cases,
        "fused mixed dtypes",
        |x| {
            let m = x[0].gt(&x[1].cast(DType::F32));
            vec![
                select(&m, &x[0], &(&x[0] * -1.0)),
                m.cast(DType::I32) + 1i32,
            ]
        },
        vec![rand_f32(&[17, 3], 10), rand_i32(&[3], 11, -2, 2)],
    );
    jit_case(
        cases,
        "twelve inputs (cut to the binding limit)",
        |x| {
            let mut acc = x[0].clone();
            for (i, t) in x.iter().enumerate().skip(1) {
                acc = if i % 2 == 0 { &acc + t } else { &acc * t };
            }
            vec![acc]
        },
        (0..12).map(|i| rand_f32(&[3, 4], 40 + i)).collect(),
    );
    jit_case(
        cases,
        "small value used twice is recomputed",
        |x| {
            let e = (&x[0] * 3.0).exp();
            vec![&e + 1.0, e.sum(0i64, false)]
        },
        vec![rand_f32(&[5, 4], 12)],
    );
    jit_case(
        cases,
        "large value used twice is stored",
        |x| {
            let e = ((&x[0] * 3.0).exp() * 2.0 + 1.0).tanh().sin();
            vec![&e + 1.0, e.sum(0i64, false)]
        },
        vec![rand_f32(&[5, 4], 13)],
    );
    jit_case(
        cases,
        "elementwise over 5M elements (2-d grid)",
        |x| vec![(&x[0] * 2.0).exp()],
        vec![rand_f32(&[5_000_000], 14)],
    );
}

fn layout(cases: &mut Vec<Case>) {
    for dt in [DType::F32, DType::I32, DType::Bool] {
        let x = || rand_of(dt, &[2, 3, 4], 20);
        jit_case(
            cases,
            format!("reshape {dt}"),
            |a| vec![a[0].reshape(&[6, 4]), a[0].reshape(&[-1])],
            vec![x()],
        );
        jit_case(
            cases,
            format!("transpose {dt}"),
            |a| vec![a[0].transpose(&[2, 0, 1]), a[0].transpose(&[0, 2, 1])],
            vec![x()],
        );
        jit_case(
            cases,
            format!("transpose then reshape {dt}"),
            |a| vec![a[0].transpose(&[1, 0, 2]).reshape(&[-1])],
            vec![x()],
        );
        jit_case(
            cases,
            format!("broadcast {dt}"),
            |a| {
                vec![
                    a[0].broadcast_to(&[5, 2, 3, 4]),
                    a[0].broadcast_in_dim(&[2, 7, 3, 4], &[0, 2, 3]),
                    a[0].expand_dims(1).squeeze(&[1]),
                ]
            },
            vec![x()],
        );
        jit_case(
            cases,
            format!("slice {dt}"),
            |a| {
                vec![
                    a[0].slice(&[0, 1, 1], &[2, 3, 4], Some(&[1, 1, 2])),
                    a[0].slice_axis(-1, 1, 3),
                ]
            },
            vec![x()],
        );
        jit_case(
            cases,
            format!("concatenate/stack {dt}"),
            |a| {
                vec![
                    Tensor::concatenate(&[&a[0], &a[1], &a[0]], 1),
                    Tensor::stack(&[&a[0], &a[0]], 0),
                ]
            },
            vec![x(), rand_of(dt, &[2, 5, 4], 21)],
        );
        jit_case(
            cases,
            format!("pad {dt}"),
            |a| {
                let v = brigade::Scalar::F32(1.0).cast(a[0].dtype());
                vec![
                    a[0].pad(&[1, 0, 2], &[0, 1, 1], v),
                    a[0].pad_interior(&[0, 1, 0], &[1, 1, 1], &[1, 0, 2], v),
                ]
            },
            vec![x()],
        );
        jit_case(
            cases,
            format!("take {dt}"),
            |a| {
                vec![
                    a[0].index_take(&a[1], 0),
                    a[0].index_take(&a[2], -1),
                    a[0].take_mode(&a[1], 1, TakeMode::Clip),
                    a[0].take_mode(&a[2], 2, TakeMode::Wrap),
                    a[0].take_mode(&a[1], 2, TakeMode::Fill),
                ]
            },
            vec![x(), rand_i32(&[2, 2], 22, -3, 3), rand_u32(&[5], 23, 0, 4)],
        );
    }
    jit_case(
        cases,
        "one_hot i32 and u32",
        |a| vec![a[0].one_hot(5), a[1].one_hot(3)],
        vec![rand_i32(&[2, 3], 24, 0, 5), rand_u32(&[4], 25, 0, 3)],
    );
    jit_case(
        cases,
        "forty-way concatenate (split into a tree)",
        |x| {
            let refs: Vec<&Tensor> = x.iter().collect();
            vec![Tensor::concatenate(&refs, 0)]
        },
        (0..40)
            .map(|i| rand_f32(&[1 + i % 3, 2], 100 + i as u64))
            .collect(),
    );
    jit_case(
        cases,
        "layout chain fused into arithmetic",
        |x| {
            let a = (&x[0] * 2.0)
                .t()
                .reshape(&[-1])
                .slice(&[1], &[12], Some(&[2]));
            let b = Tensor::concatenate(&[&a, &x[1].exp()], 0).pad(&[1], &[1], 0.0f32);
            vec![
                b.index_take(&x[2], 0).sum_all(),
                b.max(0i64, true).broadcast_to(&[2, 1]),
            ]
        },
        vec![
            rand_f32(&[3, 4], 26),
            rand_f32(&[4], 27),
            rand_i32(&[5], 28, 0, 8),
        ],
    );
}

fn reductions(cases: &mut Vec<Case>) {
    for dt in [DType::F32, DType::I32, DType::U32, DType::Bool] {
        for (rname, r) in [
            (
                "sum",
                (|t, a, k| t.sum(a, k)) as fn(&Tensor, i64, bool) -> Tensor,
            ),
            ("prod", |t, a, k| t.prod(a, k)),
            ("max", |t, a, k| t.max(a, k)),
            ("min", |t, a, k| t.min(a, k)),
        ] {
            // bool has sum (a count) and prod, no order.
            if dt == DType::Bool && matches!(rname, "max" | "min") {
                continue;
            }
            for axis in [0i64, 1, 2] {
                jit_case(
                    cases,
                    format!("{rname}({axis}) {dt}"),
                    move |x| vec![r(&x[0], axis, false), r(&x[0], axis, true)],
                    vec![rand_of(dt, &[4, 6, 10], 30)],
                );
            }
        }
        jit_case(
            cases,
            format!("full reductions {dt}"),
            |x| {
                vec![
                    x[0].sum(Axes::All, false),
                    x[0].sum(vec![0i64, 2], true),
                    x[0].prod(Axes::All, false),
                ]
            },
            vec![rand_of(dt, &[4, 6, 10], 31)],
        );
        if dt == DType::Bool {
            continue;
        }
        jit_case(
            cases,
            format!("full max/min {dt}"),
            |x| vec![x[0].max(Axes::All, false), x[0].min(vec![1i64, 2], true)],
            vec![rand_of(dt, &[4, 6, 10], 36)],
        );
        jit_case(
            cases,
            format!("argmax/argmin {dt}"),
            |x| {
                vec![
                    x[0].argmax(0, false),
                    x[0].argmin(-1, true),
                    x[0].argmax(1, false),
                ]
            },
            vec![rand_of(dt, &[4, 6, 10], 32)],
        );
    }
    jit_case(
        cases,
        "mean, sum_all, initial",
        |x| {
            vec![
                x[0].mean(0, false),
                x[0].mean_all(),
                x[0].sum_all(),
                x[0].max_initial(1, false, 0.5f32),
                x[0].min_initial(Axes::All, false, -0.5f32),
            ]
        },
        vec![rand_f32(&[8, 9], 33)],
    );
    jit_case(
        cases,
        "softmax family",
        |x| {
            vec![
                x[0].softmax(1),
                x[0].log_softmax(0),
                x[0].logsumexp(Axes::All, false),
                x[0].logsumexp(1, true),
            ]
        },
        vec![rand_f32(&[6, 33], 34)],
    );
    for (i, shape) in [&[100_000usize][..], &[3, 40_000], &[5000, 3], &[4096]]
        .into_iter()
        .enumerate()
    {
        jit_case(
            cases,
            format!("long reductions f32{shape:?}"),
            |x| {
                vec![
                    x[0].sum(0i64, false),
                    x[0].max(-1i64, true),
                    x[0].sum_all(),
                    x[0].argmax(0, false),
                ]
            },
            vec![rand_f32(shape, 35 + i as u64)],
        );
        jit_case(
            cases,
            format!("long reductions i32{shape:?}"),
            |x| vec![x[0].sum(0i64, false), x[0].min(Axes::All, false)],
            vec![rand_i32(shape, 40 + i as u64, -5, 5)],
        );
    }
    jit_case(
        cases,
        "column reduction over 70 000 columns",
        |x| vec![x[0].sum(0i64, false), x[0].max(0i64, false)],
        vec![rand_f32(&[4, 70_000], 45)],
    );
}

fn matmuls(cases: &mut Vec<Case>) {
    let shapes: [(&[usize], &[usize]); 12] = [
        (&[4, 8], &[8, 4]),
        (&[3, 5], &[5, 7]),
        (&[64, 256], &[256, 128]),
        (&[256, 256], &[256, 256]),
        (&[33, 7], &[7, 33]),
        (&[2, 3, 8], &[2, 8, 12]),
        (&[2, 1, 3, 5], &[4, 5, 7]),
        (&[8, 64, 64], &[8, 64, 64]),
        (&[5], &[5, 3]),
        (&[3, 5], &[5]),
        (&[5], &[5]),
        (&[1, 1000], &[1000, 1]),
    ];
    for (a, b) in shapes {
        jit_case(
            cases,
            format!("matmul f32{a:?} @ {b:?}"),
            |x| vec![x[0].matmul(&x[1])],
            vec![rand_f32(a, 50), rand_f32(b, 51)],
        );
    }
    for dt in [DType::I32, DType::U32] {
        jit_case(
            cases,
            format!("matmul {dt}"),
            |x| vec![x[0].matmul(&x[1])],
            vec![rand_of(dt, &[6, 9], 52), rand_of(dt, &[9, 4], 53)],
        );
    }
    jit_case(
        cases,
        "matmul with transposed operands",
        |x| {
            vec![
                x[0].t().matmul(&x[1]),
                x[2].matmul(&x[3].t()),
                x[0].t().matmul(&x[3].t()),
            ]
        },
        vec![
            rand_f32(&[128, 64], 54),
            rand_f32(&[128, 96], 55),
            rand_f32(&[32, 128], 56),
            rand_f32(&[48, 128], 64),
        ],
    );
    let d = DotDims {
        lhs_contract: vec![2],
        rhs_contract: vec![0],
        lhs_batch: vec![1],
        rhs_batch: vec![1],
    };
    jit_case(
        cases,
        "dot_general batch in the middle",
        move |x| vec![x[0].dot_general(&x[1], d.clone())],
        vec![rand_f32(&[3, 2, 5], 57), rand_f32(&[5, 2, 4], 58)],
    );
    jit_case(
        cases,
        "matmul with fused prologue and epilogue",
        |x| vec![((&x[0] * 2.0).matmul(&x[1].exp()) + &x[2]).tanh()],
        vec![
            rand_f32(&[48, 40], 59),
            rand_f32(&[40, 24], 60),
            rand_f32(&[24], 61),
        ],
    );
    jit_case(
        cases,
        "70 000 small batched matmuls",
        |x| vec![x[0].matmul(&x[1])],
        vec![rand_f32(&[70_000, 4, 4], 62), rand_f32(&[70_000, 4, 4], 63)],
    );
}

fn control(cases: &mut Vec<Case>) {
    jit_case(
        cases,
        "cond",
        |x| {
            cond(
                &x[0].sum_all().gt(&Tensor::scalar(0.0f32)),
                |o| vec![o[0].exp(), o[1].sum_all()],
                |o| vec![&o[0] * 2.0, o[1].max(Axes::All, false)],
                &[x[0].clone(), x[1].clone()],
            )
        },
        vec![rand_f32(&[4, 5], 70), rand_f32(&[7], 71)],
    );
    jit_case(
        cases,
        "switch over three branches",
        |x| {
            let b0 = |o: &[Tensor]| vec![&o[0] + 1.0];
            let b1 = |o: &[Tensor]| vec![o[0].softmax(-1)];
            let b2 = |o: &[Tensor]| vec![o[0].t().reshape(&[4, 5]).neg()];
            switch(&x[1], &[&b0, &b1, &b2], &[x[0].clone()])
        },
        vec![
            rand_f32(&[4, 5], 72),
            Array::from_vec(vec![1i32], &[]).unwrap(),
        ],
    );
    jit_case(
        cases,
        "scan: running sum and products",
        |x| {
            let (carry, ys) = scan(
                |c, xs| {
                    let n = &c[0] + &xs[0];
                    (vec![n.clone()], vec![&n * &xs[0]])
                },
                &[Tensor::zeros(&[5], DType::F32)],
                &[x[0].clone()],
            );
            vec![carry[0].clone(), ys[0].clone()]
        },
        vec![rand_f32(&[6, 5], 73)],
    );
    jit_case(
        cases,
        "scan in reverse with a length",
        |x| {
            let (carry, ys) = scan_with(
                |c, _| (vec![c[0].tanh() * 0.5], vec![c[0].sum_all()]),
                &[x[0].clone()],
                &[],
                ScanOptions {
                    length: Some(4),
                    reverse: true,
                },
            );
            vec![carry[0].clone(), ys[0].clone()]
        },
        vec![rand_f32(&[3, 3], 74)],
    );
    jit_case(
        cases,
        "fori_loop with the counter",
        |x| {
            fori_loop(
                0,
                5,
                |i, c| vec![&c[0] * 0.9 + i.cast(DType::F32), c[1].matmul(&c[1]) * 0.1],
                &[x[0].clone(), x[1].clone()],
            )
        },
        vec![rand_f32(&[8], 75), rand_f32(&[4, 4], 76)],
    );
    jit_case(
        cases,
        "fori_loop without the counter",
        |x| fori_loop(0, 3, |_, c| vec![c[0].softmax(-1)], &[x[0].clone()]),
        vec![rand_f32(&[3, 8], 77)],
    );
    jit_case(
        cases,
        "nested scans",
        |x| {
            let (c, _) = scan(
                |c, xs| {
                    let (inner, _) = scan(
                        |d, ys| (vec![&d[0] + &ys[0]], vec![]),
                        &[c[0].clone()],
                        &[xs[0].clone()],
                    );
                    (inner, vec![])
                },
                &[Tensor::zeros(&[4], DType::F32)],
                &[x[0].clone()],
            );
            c
        },
        vec![rand_f32(&[3, 2, 4], 78)],
    );
}

fn randomness(cases: &mut Vec<Case>) {
    jit_case(
        cases,
        "random samplers",
        |x| {
            let keys = random::split(&x[0], 4);
            let k = |i: usize| keys.slice(&[i, 0], &[i + 1, 2], None).reshape(&[2]);
            vec![
                random::random_bits(&k(0), &[3, 5]),
                random::uniform(&k(1), &[7, 3], -1.0, 2.0),
                random::normal(&k(2), &[1000]),
                random::bernoulli(&k(3), 0.3, &[4, 4]),
                random::randint(&random::fold_in(&x[0], 9), &[6], -3, 10),
            ]
        },
        vec![Array::from_vec(vec![0u32, 42], &[2]).unwrap()],
    );
    jit_case(
        cases,
        "random keys from a seed, fold_in by a tensor, permutation",
        |x| {
            let key = random::key(1234);
            vec![
                random::fold_in_tensor(&key, &x[0]),
                random::permutation(&key, 16),
            ]
        },
        vec![Array::from_vec(vec![5u32], &[]).unwrap()],
    );
    jit_case(
        cases,
        "sort, argsort along axis 0, top_k, two-key lax.sort",
        |x| {
            let (v, i) = x[0].top_k(3);
            let mut out = vec![x[0].sort(-1), x[0].argsort(0), v, i];
            out.extend(brigade::ops::sort::sort(
                &[x[1].clone(), x[0].clone()],
                1,
                2,
            ));
            out
        },
        vec![
            Array::from_vec((0..35).map(|i| ((i * 7) % 11) as f32).collect(), &[5, 7]).unwrap(),
            Array::from_vec((0..35).map(|i| i % 3).collect::<Vec<i32>>(), &[5, 7]).unwrap(),
        ],
    );
}

fn transforms(cases: &mut Vec<Case>) {
    let row_softmax = |r: &[Tensor]| vec![r[0].softmax(-1), r[0].matmul(&r[1])];
    cases.push(Case {
        name: "vmap: row softmax and vector-matrix product".into(),
        build: Box::new(move || {
            Ok(vec![
                vmap(row_softmax)
                    .in_axes(&[Some(0), None])
                    .graph(&[rand_f32(&[16, 8], 80), rand_f32(&[8, 3], 81)])?,
            ])
        }),
        may_fail: false,
    });
    cases.push(Case {
        name: "vmap of cond and scan".into(),
        build: Box::new(|| {
            let f = |r: &[Tensor]| {
                let c = cond(
                    &r[0].sum_all().gt(&Tensor::scalar(0.0f32)),
                    |o| vec![o[0].exp()],
                    |o| vec![o[0].neg()],
                    &[r[0].clone()],
                );
                let (s, _) = scan(
                    |c, xs| (vec![&c[0] + &xs[0]], vec![]),
                    &[Tensor::zeros(&[], DType::F32)],
                    &[r[0].clone()],
                );
                vec![c[0].clone(), s[0].clone()]
            };
            Ok(vec![vmap(f).graph(&[rand_f32(&[5, 6], 82)])?])
        }),
        may_fail: false,
    });
    cases.push(Case {
        name: "vmap of vmap of matmul".into(),
        build: Box::new(|| {
            let inner = |a: &[Tensor]| vec![a[0].matmul(&a[1])];
            let outer = move |a: &[Tensor]| vmap(inner).apply(a);
            Ok(vec![vmap(outer).graph(&[
                rand_f32(&[2, 3, 4, 5], 83),
                rand_f32(&[2, 3, 5, 6], 84),
            ])?])
        }),
        may_fail: false,
    });
    let g = |name: &'static str,
             f: fn(&[Tensor]) -> Vec<Tensor>,
             argnums: &'static [usize],
             args: fn() -> Vec<Array>| Case {
        name: format!("grad: {name}"),
        build: Box::new(move || Ok(vec![grad(f).argnums(argnums).graph(&args())?])),
        may_fail: false,
    };
    cases.push(g(
        "tanh(x*w) summed",
        |a| vec![(&a[0] * &a[1]).tanh().sum_all()],
        &[0, 1],
        || vec![rand_f32(&[6, 7], 85), rand_f32(&[7], 86)],
    ));
    cases.push(g(
        "softmax cross-entropy through a matmul",
        |a| {
            let logits = a[1].matmul(&a[0]);
            vec![-(logits.log_softmax(-1) * &a[2]).sum_all()]
        },
        &[0],
        || {
            vec![
                rand_f32(&[8, 5], 87),
                rand_f32(&[12, 8], 88),
                rand_f32(&[12, 5], 89),
            ]
        },
    ));
    cases.push(g(
        "layout ops (slice, concatenate, pad, take, transpose)",
        |a| {
            let s = a[0].slice(&[1, 0], &[4, 6], Some(&[1, 2]));
            let c = Tensor::concatenate(&[&s, &a[0].slice(&[0, 1], &[2, 4], None)], 0);
            let p = c.pad(&[1, 0], &[0, 2], 0.0f32).t();
            vec![(p.index_take(&a[1], 0).square().sum_all()) + p.max(Axes::All, false)]
        },
        &[0],
        || vec![rand_f32(&[5, 6], 90), rand_i32(&[3], 91, 0, 5)],
    ));
    cases.push(g(
        "max, logsumexp and mean reductions",
        |a| {
            vec![
                a[0].max(1, false).sum_all()
                    + a[0].logsumexp(0, false).mean_all()
                    + a[0].mean(1, true).square().sum_all(),
            ]
        },
        &[0],
        || vec![rand_f32(&[6, 9], 92)],
    ));
    cases.push(g(
        "through a scan and a cond",
        |a| {
            let (c, ys) = scan(
                |c, xs| {
                    let n = (&c[0] * &xs[0]).tanh();
                    (vec![n.clone()], vec![n.sum_all()])
                },
                &[a[1].clone()],
                &[a[0].clone()],
            );
            let out = cond(
                &ys[0].sum_all().gt(&Tensor::scalar(0.0f32)),
                |o| vec![o[0].exp().sum_all()],
                |o| vec![o[0].sum_all()],
                &[c[0].clone()],
            );
            vec![out[0].clone() + ys[0].sum_all()]
        },
        &[0, 1],
        || vec![rand_f32(&[4, 3], 93), rand_f32(&[3], 94)],
    ));
    cases.push(Case {
        name: "value_and_grad of fori_loop".into(),
        build: Box::new(|| {
            let f = |a: &[Tensor]| {
                let out = fori_loop(0, 4, |_, c| vec![(&c[0] * 1.1).sin()], &[a[0].clone()]);
                vec![out[0].sum_all()]
            };
            Ok(vec![value_and_grad(f).graph(&[rand_f32(&[10], 95)])?])
        }),
        may_fail: false,
    });
    cases.push(Case {
        name: "vmap of grad (per-example gradients)".into(),
        build: Box::new(|| {
            let loss = |a: &[Tensor]| vec![a[0].matmul(&a[1]).square().sum_all()];
            let per_example = move |a: &[Tensor]| grad(loss).apply(a);
            Ok(vec![
                vmap(per_example)
                    .in_axes(&[None, Some(0)])
                    .graph(&[rand_f32(&[4], 96), rand_f32(&[16, 4], 97)])?,
            ])
        }),
        may_fail: false,
    });
}

// The tour's programs (examples/tour.rs and the chapters it includes), at the shapes its quick
// run uses. Copied rather than included: the examples' model functions are private to them.

const HIDDEN: usize = 32;

fn mlp_forward(p: &[Tensor], x: &Tensor) -> Tensor {
    let h = (x.matmul(&p[0]) + &p[1]).tanh();
    h.matmul(&p[2]) + &p[3]
}

fn mlp_loss(p: &[Tensor], x: &Tensor, y: &Tensor) -> Tensor {
    let logp = mlp_forward(p, x).log_softmax(-1);
    -(&logp * &y.one_hot(10).cast(DType::F32)).sum_all() / x.shape()[0] as f32
}

fn particles_step(s: &[Tensor]) -> Vec<Tensor> {
    let n = s[0].shape()[0];
    let p = s[0].slice_axis(1, 0, 2);
    let v = s[0].slice_axis(1, 2, 4);
    let d = &p.expand_dims(0) - &p.expand_dims(1);
    let r2 = (&d * &d).sum(2, false) + 0.01;
    let inv = r2.rsqrt();
    let w = &(&inv * &inv) * &inv * (1.0 / n as f32);
    let a = (&d * &w.expand_dims(2)).sum(1, false);
    let v2 = &v + &(a * 0.002);
    let p2 = &p + &(&v2 * 0.002);
    vec![Tensor::concatenate(&[&p2, &v2], 1)]
}

fn tour(cases: &mut Vec<Case>) {
    let x = || rand_f32(&[64, 256], 100);
    jit_case(
        cases,
        "tour: fused chain",
        |a| vec![((&a[0] * 0.5 + 0.25).exp() - 1.0).tanh() * &a[0]],
        vec![x()],
    );
    jit_case(
        cases,
        "tour: row softmax + argmax",
        |a| vec![a[0].softmax(-1), a[0].argmax(-1, false)],
        vec![x()],
    );
    jit_case(
        cases,
        "tour: dense layer",
        |a| vec![(a[0].matmul(&a[1]) + &a[2]).relu()],
        vec![x(), rand_f32(&[256, 128], 101), rand_f32(&[128], 102)],
    );
    jit_case(
        cases,
        "tour: mean / logsumexp over axes",
        |a| vec![a[0].mean(0, false), a[0].logsumexp(1, true)],
        vec![x()],
    );
    jit_case(
        cases,
        "tour: sum of squares of 1M elements",
        |a| vec![a[0].square().sum_all()],
        vec![rand_f32(&[1 << 20], 103)],
    );
    jit_case(
        cases,
        "tour: particles step (512)",
        particles_step,
        vec![rand_f32(&[512, 4], 104)],
    );
    jit_case(
        cases,
        "tour: model-parallel stage (tanh layer)",
        |a| vec![(a[0].matmul(&a[1]) + &a[2]).tanh()],
        vec![
            rand_f32(&[64, 256], 105),
            rand_f32(&[256, 256], 106),
            rand_f32(&[256], 107),
        ],
    );
    jit_case(
        cases,
        "tour: device-planning layer",
        |a| {
            let n = a[0].shape()[0] as i64;
            let v = a[0].reshape(&[n, 1]);
            vec![v.matmul(&v.reshape(&[1, n])).softmax(-1)]
        },
        vec![rand_f32(&[256], 108)],
    );
    jit_case(
        cases,
        "tour: MLP predict",
        |a| vec![mlp_forward(&a[..4], &a[4]).argmax(-1, false)],
        vec![
            rand_f32(&[64, HIDDEN], 109),
            rand_f32(&[HIDDEN], 110),
            rand_f32(&[HIDDEN, 10], 111),
            rand_f32(&[10], 112),
            rand_f32(&[357, 64], 113),
        ],
    );
    // The data-parallel training step on two devices: value_and_grad, pmean, Adam.
    parallel_case(
        cases,
        "tour: data-parallel training step (pmap, 2 devices)",
        || {
            let opt = Adam::new(0.01);
            pmap(move |a: &[Tensor]| {
                let (x, y) = (&a[15], &a[16]);
                let vg = value_and_grad(|q: &[Tensor]| vec![mlp_loss(&q[..4], &q[4], &q[5])])
                    .argnums(&[0, 1, 2, 3])
                    .apply(&[
                        a[0].clone(),
                        a[1].clone(),
                        a[2].clone(),
                        a[3].clone(),
                        x.clone(),
                        y.clone(),
                    ]);
                let grads: Vec<Tensor> = vg[1..5].iter().map(|g| pmean(g, "batch")).collect();
                let state = AdamState::from_slice(&a[4..15], 4).expect("Adam state");
                let (params, state) = opt.update(&a[..4], &grads, &state);
                let mut out = params;
                out.extend(state.to_vec());
                out.push(pmean(&vg[0], "batch"));
                out
            })
            .axis_name("batch")
        },
        {
            let shapes: [&[usize]; 4] = [&[64, HIDDEN], &[HIDDEN], &[HIDDEN, 10], &[10]];
            let mut args = Vec::new();
            for _ in 0..3 {
                for s in shapes {
                    let mut full = vec![2];
                    full.extend_from_slice(s);
                    args.push(rand_f32(&full, 114));
                }
            }
            for _ in 0..3 {
                args.push(rand_f32(&[2], 115));
            }
            args.push(rand_f32(&[2, 120, 64], 116));
            args.push(rand_i32(&[2, 120], 117, 0, 10));
            args
        },
    );
    parallel_case(
        cases,
        "tour: row-split matmul (shard_map, 2 devices)",
        || shard_map(|x: &[Tensor]| vec![x[0].matmul(&x[1])]).in_axes(&[Some(0), None]),
        vec![rand_f32(&[512, 64], 118), rand_f32(&[64, 512], 119)],
    );
    parallel_case(
        cases,
        "tour: pmap(grad(loss)) (2 devices)",
        || {
            let loss = |p: &[Tensor]| vec![p[1].matmul(&p[0]).square().mean_all()];
            pmap(move |p: &[Tensor]| grad(loss).apply(p)).in_axes(&[None, Some(0)])
        },
        vec![rand_f32(&[4, 1], 120), rand_f32(&[2, 512, 4], 121)],
    );
    parallel_case(
        cases,
        "tour: centring by psum (pmap, 2 devices)",
        || pmap(|a: &[Tensor]| vec![&a[0] - &(psum(&a[0], "i") / 2.0)]).axis_name("i"),
        vec![rand_f32(&[2, 6], 122)],
    );
}

/// Convolutions (the implicit-GEMM kernel in its layouts, strides, dilations and groups) and
/// pooling (reduce_window, and select_and_scatter_add through max_pool's gradient).
fn windows(cases: &mut Vec<Case>) {
    jit_case(
        cases,
        "conv NCHW/OIHW 3x3 SAME, stride 1 and 2",
        |x| {
            vec![
                x[0].conv(&x[1], &[1, 1], Padding::Same),
                x[0].conv(&x[1], &[2, 2], Padding::Same),
            ]
        },
        vec![rand_f32(&[2, 3, 9, 8], 150), rand_f32(&[4, 3, 3, 3], 151)],
    );
    jit_case(
        cases,
        "conv NHWC/HWIO, dilations, feature groups",
        |x| {
            let o = ConvOptions::new(&[1, 2], Padding::Explicit(vec![(1, 0), (2, 1)]))
                .lhs_dilation(&[2, 1])
                .rhs_dilation(&[1, 2])
                .dimension_numbers("NHWC", "HWIO", "NHWC")
                .feature_group_count(2);
            vec![x[0].conv_general_dilated(&x[1], &o)]
        },
        vec![rand_f32(&[1, 7, 6, 4], 152), rand_f32(&[2, 3, 2, 6], 153)],
    );
    jit_case(
        cases,
        "max_pool and avg_pool 2x2, NCHW and NHWC",
        |x| {
            vec![
                max_pool(&x[0], &[2, 2], &[2, 2], &Padding::Valid, Layout::Nchw),
                avg_pool(&x[0], &[3, 3], &[1, 1], &Padding::Same, Layout::Nhwc, false),
            ]
        },
        vec![rand_f32(&[2, 3, 8, 6], 154)],
    );
    cases.push(Case {
        name: "grad: conv then max_pool (conv VJPs, select_and_scatter_add)".into(),
        build: Box::new(|| {
            let loss = |a: &[Tensor]| {
                let y = a[0].conv(&a[1], &[1, 1], Padding::Same).tanh();
                vec![max_pool(&y, &[2, 2], &[2, 2], &Padding::Valid, Layout::Nchw).sum_all()]
            };
            Ok(vec![grad(loss).argnums(&[0, 1]).graph(&[
                rand_f32(&[2, 2, 6, 6], 155),
                rand_f32(&[3, 2, 3, 3], 156),
            ])?])
        }),
        may_fail: false,
    });
}

fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    elementwise(&mut cases);
    layout(&mut cases);
    reductions(&mut cases);
    matmuls(&mut cases);
    control(&mut cases);
    randomness(&mut cases);
    windows(&mut cases);
    transforms(&mut cases);
    tour(&mut cases);
    cases
}

// ---- lowering and the manifest ------------------------------------------------------------------

/// wgpu's defaults, the downlevel set (4 storage buffers per stage, 256 invocations), and a small
/// set like the embedding tests' lowered device (4 buffers, 64 workgroups per dimension, 8 MiB
/// bindings): kernels cut to the binding limit, grids folded into 2-d and 3-d.
fn limit_sets() -> Vec<(&'static str, DeviceLimits)> {
    let mut small = DeviceLimits::from_wgpu(&wgpu::Limits::default());
    small.max_storage_buffers_per_shader_stage = 4;
    small.max_compute_workgroups_per_dimension = 64;
    small.max_storage_buffer_binding_size = 8 << 20;
    small.max_buffer_size = 16 << 20;
    vec![
        ("default", DeviceLimits::from_wgpu(&wgpu::Limits::default())),
        (
            "downlevel",
            DeviceLimits::from_wgpu(&wgpu::Limits::downlevel_defaults()),
        ),
        ("small", small),
    ]
}

/// One lowered program: its launches, or why there are none.
struct Lowered {
    program: String,
    may_fail: bool,
    launches: Result<Vec<brigade::lower::Launch>, String>,
}

/// Every (limit set, case, stage) of the corpus, lowered.
fn lower_corpus(cases: &[Case]) -> Vec<Lowered> {
    let sets = limit_sets();
    let mut out = Vec::new();
    for case in cases {
        let graphs = (case.build)();
        for (lname, limits) in &sets {
            let base = format!("{lname}/{}", case.name);
            match &graphs {
                Err(e) => out.push(Lowered {
                    program: base,
                    may_fail: case.may_fail,
                    launches: Err(format!("tracing failed: {e}")),
                }),
                Ok(gs) => {
                    for (i, g) in gs.iter().enumerate() {
                        let program = if gs.len() == 1 {
                            base.clone()
                        } else {
                            format!("{base} [stage {i}]")
                        };
                        let launches = lower(g, limits)
                            .map(|p: Program| p.launches)
                            .map_err(|e| format!("lowering failed: {e}"));
                        out.push(Lowered {
                            program,
                            may_fail: case.may_fail,
                            launches,
                        });
                    }
                }
            }
        }
    }
    out
}

/// The manifest's lines of one program, without the program name: `launch | label | workgroups |
/// hash`, or one line saying why it has no kernels.
fn entry_lines(l: &Lowered) -> Vec<String> {
    match &l.launches {
        Err(e) => {
            let kind = e.split(':').next().unwrap_or("failed");
            vec![format!("- | ({kind}) | - | -")]
        }
        Ok(ls) if ls.is_empty() => vec!["- | (no kernels) | - | -".into()],
        Ok(ls) => ls
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let [x, y, z] = k.workgroups;
                format!(
                    "{i} | {} | {x}x{y}x{z} | {:016x}",
                    k.label,
                    fnv1a64(&k.wgsl)
                )
            })
            .collect(),
    }
}

type Manifest = BTreeMap<String, Vec<String>>;

fn manifest_of(lowered: &[Lowered]) -> Manifest {
    let mut m = Manifest::new();
    for l in lowered {
        assert!(
            !l.program.contains(" | ") && !l.program.contains('\n'),
            "program name {:?} would break the manifest's format",
            l.program
        );
        let prev = m.insert(l.program.clone(), entry_lines(l));
        assert!(prev.is_none(), "two programs named {:?}", l.program);
    }
    m
}

const HEADER: &str = "\
# The WGSL brigade generates for the corpus of tests/wgsl_golden.rs: one line per kernel launch,
#   program | launch index | kernel label | workgroups | FNV-1a 64 of the WGSL text
# (the hash is also the one in BRIGADE_DUMP_WGSL's file names). A program without kernels says why.
# Regenerate after an intended change of the generated code, and commit the result:
#   BRIGADE_BLESS=1 cargo test --test wgsl_golden
";

fn render(m: &Manifest) -> String {
    let mut s = HEADER.to_string();
    for (program, lines) in m {
        for line in lines {
            let _ = writeln!(s, "{program} | {line}");
        }
    }
    s
}

fn parse(text: &str) -> Manifest {
    let mut m = Manifest::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (program, rest) = line.split_once(" | ").unwrap_or((line, ""));
        m.entry(program.to_string())
            .or_default()
            .push(rest.to_string());
    }
    m
}

/// A name safe on every file system (what `BRIGADE_DUMP_WGSL` files are called).
fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `DIR/<limits>/<program>/<launch>-<label>.wgsl`, the first line naming the workgroups.
fn dump_texts(dir: &Path, lowered: &[Lowered]) {
    for l in lowered {
        let Ok(ls) = &l.launches else { continue };
        let (limits, program) = l.program.split_once('/').unwrap_or(("", &l.program));
        let pdir = dir.join(safe(limits)).join(safe(program));
        std::fs::create_dir_all(&pdir).unwrap_or_else(|e| panic!("{}: {e}", pdir.display()));
        for (i, k) in ls.iter().enumerate() {
            let file = pdir.join(format!("{i:02}-{}.wgsl", safe(&k.label)));
            let body = format!("// workgroups {:?}\n{}", k.workgroups, k.wgsl);
            std::fs::write(&file, body).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        }
    }
}

/// The differences between the committed manifest and the current one, one block per program.
fn differences(want: &Manifest, got: &Manifest) -> Vec<String> {
    let names: BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    let mut out = Vec::new();
    for name in names {
        match (want.get(name), got.get(name)) {
            (Some(w), Some(g)) if w == g => {}
            (Some(w), Some(g)) => {
                let mut s = format!("program `{name}` changed:");
                for i in 0..w.len().max(g.len()) {
                    let (a, b) = (w.get(i), g.get(i));
                    if a != b {
                        let show = |x: Option<&String>| x.map_or("(none)".into(), |x| x.clone());
                        let _ = write!(
                            s,
                            "\n    launch {i}: manifest {}\n              now      {}",
                            show(a),
                            show(b)
                        );
                    }
                }
                out.push(s);
            }
            (Some(_), None) => out.push(format!(
                "program `{name}` is in the manifest but no longer in the corpus"
            )),
            (None, Some(g)) => out.push(format!(
                "program `{name}` is new (not in the manifest): {}",
                g.join("; ")
            )),
            (None, None) => {}
        }
    }
    out
}

#[test]
fn generated_wgsl_matches_the_manifest() {
    let cases = corpus();
    let lowered = lower_corpus(&cases);
    let got = manifest_of(&lowered);
    // Dumped first, so that every failure below can be looked at.
    if let Some(dir) = std::env::var_os(DUMP_WGSL_ENV).filter(|v| !v.is_empty()) {
        dump_texts(Path::new(&dir), &lowered);
        eprintln!(
            "wrote every kernel's WGSL under {}",
            Path::new(&dir).display()
        );
    }

    let kernels: usize = lowered
        .iter()
        .map(|l| l.launches.as_ref().map_or(0, Vec::len))
        .sum();
    eprintln!(
        "{} cases, {} programs, {kernels} kernels",
        cases.len(),
        got.len()
    );
    // The corpus must not shrink by accident: an empty corpus would match an empty manifest.
    assert!(
        cases.len() > 300 && kernels > 1500,
        "the corpus shrank: {} cases, {kernels} kernels",
        cases.len()
    );
    // Every family traces and lowers under the default limits (a corpus entry that fails is not
    // pinning any WGSL).
    let failed: Vec<String> = lowered
        .iter()
        .filter(|l| l.program.starts_with("default/") && !l.may_fail)
        .filter_map(|l| {
            l.launches
                .as_ref()
                .err()
                .map(|e| format!("{}: {e}", l.program))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "corpus programs that do not lower with wgpu's default limits:\n{}",
        failed.join("\n")
    );

    // The same programs traced and lowered again give the same text: nothing depends on HashMap
    // order (std seeds every map differently, so a second pass draws other orders).
    let again = manifest_of(&lower_corpus(&cases));
    let unstable = differences(&got, &again);
    assert!(
        unstable.is_empty(),
        "the generated WGSL differs between two lowerings of the same program in one process \
         (order-dependent code generation):\n{}",
        unstable.join("\n")
    );

    let text = render(&got);
    if std::env::var_os(BLESS_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
        std::fs::write(MANIFEST, &text).unwrap_or_else(|e| panic!("writing {MANIFEST}: {e}"));
        eprintln!(
            "{BLESS_ENV}: wrote {MANIFEST} ({} lines)",
            text.lines().count()
        );
        return;
    }
    let want_text = std::fs::read_to_string(MANIFEST).unwrap_or_else(|e| {
        panic!(
            "cannot read {MANIFEST}: {e}. Create it with `{BLESS_ENV}=1 cargo test --test wgsl_golden`"
        )
    });
    let diffs = differences(&parse(&want_text), &got);
    if !diffs.is_empty() {
        let shown = diffs.len().min(25);
        panic!(
            "the generated WGSL differs from {MANIFEST} in {} program(s){}:\n\n{}\n\n\
             If the change is intended, rewrite the manifest and commit it:\n    \
             {BLESS_ENV}=1 cargo test --test wgsl_golden\n\
             To see the texts, dump them (into fresh directories) here and in a checkout of the \
             commit before the change (e.g. `git worktree add /tmp/before HEAD~1`), then diff:\n    \
             {DUMP_WGSL_ENV}=/tmp/wgsl-after cargo test --test wgsl_golden generated\n    \
             (cd /tmp/before && {DUMP_WGSL_ENV}=/tmp/wgsl-before cargo test --test wgsl_golden generated)\n    \
             diff -r /tmp/wgsl-before /tmp/wgsl-after",
            diffs.len(),
            if shown < diffs.len() {
                format!(" (the first {shown} shown)")
            } else {
                String::new()
            },
            diffs[..shown].join("\n")
        );
    }
}

#[test]
fn the_manifest_format_round_trips_and_reports_changes() {
    let lowered = vec![
        Lowered {
            program: "default/a".into(),
            may_fail: false,
            launches: Ok(vec![]),
        },
        Lowered {
            program: "small/b".into(),
            may_fail: false,
            launches: Err("lowering failed: too big".into()),
        },
    ];
    let m = manifest_of(&lowered);
    assert_eq!(parse(&render(&m)), m);
    assert_eq!(
        m["small/b"],
        vec!["- | (lowering failed) | - | -".to_string()]
    );
    let mut changed = m.clone();
    *changed.get_mut("default/a").unwrap() = vec!["0 | k | 1x1x1 | 0123456789abcdef".into()];
    changed.remove("small/b");
    let d = differences(&m, &changed);
    assert_eq!(d.len(), 2, "{d:?}");
    assert!(
        d[0].contains("`default/a` changed") && d[0].contains("launch 0"),
        "{d:?}"
    );
    assert!(
        d[1].contains("`small/b` is in the manifest but no longer"),
        "{d:?}"
    );
    // FNV-1a's published vectors (the dump's file names use the same hash).
    assert_eq!(fnv1a64("a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a64("foobar"), 0x8594_4171_f739_67e8);
}

// ---- BRIGADE_DUMP_WGSL in a program run ---------------------------------------------------------

/// The programs the dump test runs: an elementwise chain, a row reduction, a small matmul (too
/// small for the tuning search, so every device uses the heuristic's kernel).
fn dump_program(x: &[Tensor]) -> Vec<Tensor> {
    vec![
        (&x[0] * 1.75 + 0.5).tanh(),
        x[0].softmax(-1),
        x[0].matmul(&x[1]),
    ]
}

fn dump_args() -> Vec<Array> {
    vec![rand_f32(&[9, 12], 130), rand_f32(&[12, 5], 131)]
}

/// Run by [`device_dump_writes_every_kernel_a_program_uses`] in a child process with
/// `BRIGADE_DUMP_WGSL` set (the variable is read once per process). On its own it just checks the
/// program's results on every GPU device.
#[test]
#[ignore = "run by device_dump_writes_every_kernel_a_program_uses in a child process"]
fn dump_child_runs_programs_on_every_gpu() {
    let args = dump_args();
    check_on_all(dump_program, &args, Tol::REDUCE);
    // A second run hits the caches: still one file per kernel.
    check_on_all(dump_program, &args, Tol::REDUCE);
}

#[test]
fn device_dump_writes_every_kernel_a_program_uses() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("brigade-wgsl-dump-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "dump_child_runs_programs_on_every_gpu",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DUMP_WGSL_ENV, &dir)
        .env("BRIGADE_MATMUL_TUNE", "off")
        .output()
        .expect("running the test binary again");
    assert!(
        out.status.success(),
        "the child run failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "the child ran no test:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // Every file is `<label>-<hash of its text>.wgsl`; no temporary file is left.
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        let text = std::fs::read_to_string(e.path()).unwrap();
        let stem = name
            .strip_suffix(".wgsl")
            .unwrap_or_else(|| panic!("{name}: not a .wgsl file"));
        let (_, hash) = stem
            .rsplit_once('-')
            .unwrap_or_else(|| panic!("{name}: no hash"));
        assert_eq!(hash, format!("{:016x}", fnv1a64(&text)), "{name}");
        files.insert(name, text);
    }
    // ... and holds every kernel each GPU device ran: what `program` lowers for that device.
    let mut expected = 0;
    for dev in gpu_devices() {
        let p = jit(dump_program).program(&dump_args(), &dev).unwrap();
        assert!(
            p.launches.len() >= 3,
            "{}: {} launches",
            dev.name(),
            p.launches.len()
        );
        for l in &p.launches {
            let mut label = safe(&l.label);
            label.truncate(120);
            let name = format!("{label}-{:016x}.wgsl", fnv1a64(&l.wgsl));
            assert_eq!(
                files.get(&name),
                Some(&l.wgsl),
                "{}: kernel `{}` was not dumped as {name}; the directory holds {:?}",
                dev.name(),
                l.label,
                files.keys().collect::<Vec<_>>()
            );
            expected += 1;
        }
    }
    assert!(
        expected >= 6,
        "checked {expected} kernels on the GPU devices"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
