//! Compilation: the jit cache, fusion, naga validation of generated shaders (no device needed),
//! dispatch sizes above 65 535 workgroups, and buffers over the binding limit.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};

use brigade::device::DeviceLimits;
use brigade::lower::{Program, lower};
use brigade::ops::DotDims;
use brigade::{Array, DType, Error, Graph, Tensor, counters, jit};
use common::*;

// ---- (a) the jit cache --------------------------------------------------------------------------

#[test]
fn second_call_with_the_same_shapes_neither_traces_nor_compiles() {
    for dev in gpu_devices() {
        let _guard = device_guard(&dev);
        // A constant and shapes no other test uses, so the device's kernel cache cannot already
        // hold these shaders.
        let f = jit(|x: &[Tensor]| vec![(&x[0] * 1.234_567 + 0.5).tanh()]).on(&dev);
        let x = rand_f32(&[7, 13], 1);

        let c0 = counters();
        let y1 = f.call(std::slice::from_ref(&x)).unwrap();
        let first = counters().since(&c0);
        assert_eq!(first.traces, 1, "first call on {}: {first:?}", dev.name());
        assert_eq!(
            first.pipelines_created,
            1,
            "first call on {}: {first:?}",
            dev.name()
        );
        assert_eq!(
            first.dispatches,
            1,
            "first call on {}: {first:?}",
            dev.name()
        );

        let c1 = counters();
        let y2 = f.call(std::slice::from_ref(&x)).unwrap();
        let second = counters().since(&c1);
        assert_eq!(
            second.traces,
            0,
            "second call on {}: {second:?}",
            dev.name()
        );
        assert_eq!(
            second.pipelines_created,
            0,
            "second call on {}: {second:?}",
            dev.name()
        );
        assert_eq!(
            second.dispatches,
            1,
            "second call on {}: {second:?}",
            dev.name()
        );
        assert_eq!(host(&y1[0]), host(&y2[0]));

        // New shapes trace once (and compile their own kernel); then they are cached too.
        let z = rand_f32(&[13, 7], 2);
        let c2 = counters();
        f.call(std::slice::from_ref(&z)).unwrap();
        let third = counters().since(&c2);
        assert_eq!(third.traces, 1, "new shape on {}: {third:?}", dev.name());
        assert_eq!(
            third.pipelines_created,
            1,
            "new shape on {}: {third:?}",
            dev.name()
        );
        let c3 = counters();
        f.call(std::slice::from_ref(&z)).unwrap();
        f.call(std::slice::from_ref(&x)).unwrap();
        let fourth = counters().since(&c3);
        assert_eq!(
            (fourth.traces, fourth.pipelines_created),
            (0, 0),
            "cached shapes on {}: {fourth:?}",
            dev.name()
        );

        // A new dtype is a new signature.
        let c4 = counters();
        f.call(&[rand_i32(&[7, 13], 3, -5, 5)]).unwrap();
        assert_eq!(counters().since(&c4).traces, 1);

        // Device arrays as arguments (no upload) hit the same cache entry.
        let on_dev = x.to_device(&dev).unwrap();
        let c5 = counters();
        f.call(std::slice::from_ref(&on_dev)).unwrap();
        let fifth = counters().since(&c5);
        assert_eq!(
            (fifth.traces, fifth.pipelines_created, fifth.bytes_uploaded),
            (0, 0, 0),
            "device argument on {}: {fifth:?}",
            dev.name()
        );

        // Another jit of the same function traces again, but the device reuses the pipelines.
        let g = jit(|x: &[Tensor]| vec![(&x[0] * 1.234_567 + 0.5).tanh()]).on(&dev);
        let c6 = counters();
        g.call(std::slice::from_ref(&x)).unwrap();
        let sixth = counters().since(&c6);
        assert_eq!(
            (sixth.traces, sixth.pipelines_created),
            (1, 0),
            "second jit on {}: {sixth:?}",
            dev.name()
        );
    }
}

// ---- (b) fusion ---------------------------------------------------------------------------------

/// Six elementwise ops, two broadcasts (a row vector and scalars) and a transcendental.
fn chain(x: &[Tensor]) -> Vec<Tensor> {
    let (a, b) = (&x[0], &x[1]);
    vec![(((a * b + 1.0).tanh() - b).abs() + 0.5).sqrt() * 2.0 + a.sin()]
}

#[test]
fn an_elementwise_chain_with_broadcasts_is_one_kernel() {
    let args = [rand_f32(&[6, 9], 11), rand_f32(&[9], 12)];
    check_on_all(chain, &args, Tol::TRANS);
    for dev in gpu_devices() {
        let _guard = device_guard(&dev);
        let f = jit(chain).on(&dev);
        let g = f.graph(&args).unwrap();
        assert!(
            g.eqns.len() >= 10,
            "the chain records its ops and broadcasts:\n{g}"
        );
        let p = f.program(&args, &dev).unwrap();
        assert_eq!(
            p.launches.len(),
            1,
            "one fused kernel expected on {}, got {}:\n{}",
            dev.name(),
            p.launches.len(),
            labels(&p)
        );
        f.call(&args).unwrap();
        let c = counters();
        let y = f.call(&args).unwrap();
        let work = counters().since(&c);
        assert_eq!(work.dispatches, 1, "on {}: {work:?}", dev.name());
        assert_eq!(work.submits, 1, "on {}: {work:?}", dev.name());
        assert_eq!(y[0].shape(), &[6, 9]);
    }
}

#[test]
fn a_reduction_absorbs_its_elementwise_prologue() {
    let f = |x: &[Tensor]| vec![(&x[0] * &x[1] + 1.0).exp().sum_all()];
    let g = |x: &[Tensor]| vec![(&x[0] * &x[1] + 1.0).exp().sum(1i64, false)];
    let args = [
        rand_f32_in(&[8, 16], 21, -1.0, 1.0),
        rand_f32_in(&[16], 22, -1.0, 1.0),
    ];
    check_on_all(f, &args, Tol::REDUCE);
    check_on_all(g, &args, Tol::REDUCE);
    for dev in gpu_devices() {
        let _guard = device_guard(&dev);
        for (name, p) in [
            ("sum_all", jit(f).program(&args, &dev).unwrap()),
            ("sum(1)", jit(g).program(&args, &dev).unwrap()),
        ] {
            assert_eq!(
                p.launches.len(),
                1,
                "{name} on {}: {}",
                dev.name(),
                labels(&p)
            );
        }
        let j = jit(f).on(&dev);
        j.call(&args).unwrap();
        let c = counters();
        j.call(&args).unwrap();
        assert_eq!(counters().since(&c).dispatches, 1);
    }
    // A long reduction is shared by several workgroups and finished by a second kernel.
    let long = [
        rand_f32_in(&[2, 50_000], 23, -1.0, 1.0),
        rand_f32_in(&[50_000], 24, -1.0, 1.0),
    ];
    let dev = device_of("vulkan");
    let p = jit(g).program(&long, &dev).unwrap();
    assert_eq!(
        p.launches.len(),
        2,
        "cooperative two-pass reduction: {}",
        labels(&p)
    );
    check_on(&[dev], g, &long, Tol::REDUCE);
}

#[test]
fn small_values_used_twice_are_recomputed_large_ones_stored() {
    // A small `e` (2 ops) feeding two consumers is recomputed by each: no kernel stores it.
    let small = |x: &[Tensor]| {
        let e = (&x[0] * 3.0).exp();
        vec![&e + 1.0, e.sum(0i64, false)]
    };
    let args = [rand_f32(&[5, 4], 31)];
    check_on_all(small, &args, Tol::REDUCE);
    let p = jit(small).program(&args, &device_of("vulkan")).unwrap();
    assert_eq!(p.launches.len(), 2, "{}", labels(&p));
    // A larger one (6 ops) is stored once and read by both consumers.
    let large = |x: &[Tensor]| {
        let e = ((&x[0] * 3.0).exp() * 2.0 + 1.0).tanh().sin();
        vec![&e + 1.0, e.sum(0i64, false)]
    };
    check_on_all(large, &args, Tol::REDUCE);
    let p = jit(large).program(&args, &device_of("vulkan")).unwrap();
    assert_eq!(p.launches.len(), 3, "{}", labels(&p));
}

/// softmax and logsumexp along an axis take the kernels their math needs: the max, the sum of
/// `exp(x - max)` (the shift recomputed in the sum's loop, not stored), and the division or the
/// final `log(sum) + max`; with -inf rows and NaN the values still match the reference.
#[test]
fn softmax_and_logsumexp_are_three_kernels() {
    let mut xs = f32s(64 * 32, 35, -3.0, 3.0);
    xs[..32].fill(f32::NEG_INFINITY);
    xs[40] = f32::NAN;
    let args = [Array::from_vec(xs, &[64, 32]).unwrap()];
    let dev = device_of("vulkan");
    for (name, f) in [
        (
            "softmax",
            (|x: &[Tensor]| vec![x[0].softmax(1)]) as fn(&[Tensor]) -> Vec<Tensor>,
        ),
        ("logsumexp", |x: &[Tensor]| {
            vec![x[0].logsumexp(1i64, false)]
        }),
        ("log_softmax", |x: &[Tensor]| vec![x[0].log_softmax(1)]),
    ] {
        let p = jit(f).program(&args, &dev).unwrap();
        assert_eq!(p.launches.len(), 3, "{name}: {}", labels(&p));
        check_on_all(f, &args, Tol::REDUCE);
    }
}

/// The invocations per workgroup declared by `@workgroup_size(...)`.
fn workgroup_size(wgsl: &str) -> u64 {
    let start = wgsl.find("@workgroup_size(").expect("a compute shader") + "@workgroup_size(".len();
    let end = start + wgsl[start..].find(')').unwrap();
    wgsl[start..end]
        .split(',')
        .map(|d| d.trim().parse::<u64>().unwrap_or(1))
        .product()
}

fn labels(p: &Program) -> String {
    p.launches
        .iter()
        .map(|l| format!("{} {:?}", l.label, l.workgroups))
        .collect::<Vec<_>>()
        .join(", ")
}

// ---- (c) naga validation of generated shaders ---------------------------------------------------

type UnaryFn = fn(&Tensor) -> Tensor;
type ReduceFn = fn(&Tensor, i64, bool) -> Tensor;
type Case = (String, Box<dyn Fn(&[Tensor]) -> Vec<Tensor>>, Vec<Array>);

fn zeros(dt: DType, shape: &[usize]) -> Array {
    Array::full(brigade::Scalar::F32(0.0).cast(dt), shape).expect("a small host array")
}

fn case(
    name: impl Into<String>,
    f: impl Fn(&[Tensor]) -> Vec<Tensor> + 'static,
    args: Vec<Array>,
) -> Case {
    (name.into(), Box::new(f), args)
}

const DTYPES: [DType; 4] = [DType::F32, DType::I32, DType::U32, DType::Bool];
const SHAPES: &[&[usize]] = &[&[], &[1], &[5], &[2, 3], &[0, 3], &[2, 0, 3], &[4, 1, 5]];

/// Programs over every primitive, dtype and a spread of shapes. Cases whose tracing fails (an op
/// not defined for a dtype) are dropped: this sweep is about the shaders of valid programs.
fn sweep() -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    let unaries: [(&str, UnaryFn); 17] = [
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
    ];
    let binaries: [(&str, BinaryFn); 16] = [
        ("add", Tensor::add),
        ("sub", Tensor::sub),
        ("mul", Tensor::mul),
        ("div", Tensor::div),
        ("pow", Tensor::pow),
        ("max", Tensor::maximum),
        ("min", Tensor::minimum),
        ("rem", Tensor::rem),
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
        for &(name, op) in &unaries {
            let small: [&[usize]; 3] = [&[], &[2, 3], &[0, 3]];
            for s in small {
                cases.push(case(
                    format!("{name} {dt}{s:?}"),
                    move |x| vec![op(&x[0])],
                    vec![zeros(dt, s)],
                ));
            }
        }
        for &(name, op) in &binaries {
            let pairs: [(&[usize], &[usize]); 3] =
                [(&[2, 3], &[3]), (&[], &[4, 1]), (&[1, 5], &[2, 1])];
            for (a, b) in pairs {
                cases.push(case(
                    format!("{name} {dt}{a:?} {dt}{b:?}"),
                    move |x| vec![op(&x[0], &x[1])],
                    vec![zeros(dt, a), zeros(dt, b)],
                ));
            }
        }
        for to in DTYPES {
            cases.push(case(
                format!("cast {dt} -> {to}"),
                move |x| vec![x[0].cast(to), (x[0].cast(to)).cast(dt)],
                vec![zeros(dt, &[3, 2])],
            ));
        }
        cases.push(case(
            format!("select {dt}"),
            |x| vec![brigade::select(&x[0], &x[1], &x[2])],
            vec![zeros(DType::Bool, &[2, 3]), zeros(dt, &[3]), zeros(dt, &[])],
        ));
        for &s in SHAPES {
            let rank = s.len() as i64;
            cases.push(case(
                format!("transpose {dt}{s:?}"),
                move |x| vec![x[0].t()],
                vec![zeros(dt, s)],
            ));
            cases.push(case(
                format!("reshape {dt}{s:?}"),
                move |x| vec![x[0].reshape(&[-1]), x[0].t().reshape(&[-1])],
                vec![zeros(dt, s)],
            ));
            cases.push(case(
                format!("broadcast {dt}{s:?}"),
                |x| {
                    vec![
                        x[0].broadcast_to(
                            &[2].iter().chain(x[0].shape()).copied().collect::<Vec<_>>(),
                        ),
                    ]
                },
                vec![zeros(dt, s)],
            ));
            cases.push(case(
                format!("pad {dt}{s:?}"),
                move |x| {
                    let r = x[0].ndim();
                    vec![x[0].pad_interior(
                        &vec![1; r],
                        &vec![2; r],
                        &vec![1; r],
                        brigade::Scalar::F32(3.0).cast(x[0].dtype()),
                    )]
                },
                vec![zeros(dt, s)],
            ));
            if rank > 0 {
                cases.push(case(
                    format!("slice {dt}{s:?}"),
                    |x| {
                        let sh = x[0].shape().to_vec();
                        let start: Vec<usize> = sh.iter().map(|&d| d.min(1)).collect();
                        vec![x[0].slice(&start, &sh, Some(&vec![2; sh.len()]))]
                    },
                    vec![zeros(dt, s)],
                ));
                cases.push(case(
                    format!("concatenate {dt}{s:?}"),
                    |x| vec![Tensor::concatenate(&[&x[0], &x[0], &x[0]], -1)],
                    vec![zeros(dt, s)],
                ));
                cases.push(case(
                    format!("take {dt}{s:?}"),
                    |x| vec![x[0].index_take(&x[1], 0), x[0].index_take(&x[2], -1)],
                    vec![
                        zeros(dt, s),
                        zeros(DType::I32, &[2, 2]),
                        zeros(DType::U32, &[3]),
                    ],
                ));
                for ax in 0..rank {
                    for keep in [false, true] {
                        let reductions: [(&str, ReduceFn); 4] = [
                            ("sum", |t, a, k| t.sum(a, k)),
                            ("prod", |t, a, k| t.prod(a, k)),
                            ("max", |t, a, k| t.max(a, k)),
                            ("min", |t, a, k| t.min(a, k)),
                        ];
                        for (rname, r) in reductions {
                            cases.push(case(
                                format!("{rname}({ax}, {keep}) {dt}{s:?}"),
                                move |x| vec![r(&x[0], ax, keep)],
                                vec![zeros(dt, s)],
                            ));
                        }
                        cases.push(case(
                            format!("argmax/argmin({ax}, {keep}) {dt}{s:?}"),
                            move |x| vec![x[0].argmax(ax, keep), x[0].argmin(ax, keep)],
                            vec![zeros(dt, s)],
                        ));
                    }
                }
                cases.push(case(
                    format!("sum_all/mean {dt}{s:?}"),
                    |x| vec![x[0].sum_all(), x[0].mean_all()],
                    vec![zeros(dt, s)],
                ));
            }
        }
        // Long reductions (cooperative kernel, one and several parts).
        let long: [&[usize]; 4] = [&[4096], &[100_000], &[3, 40_000], &[5000, 3]];
        for s in long {
            cases.push(case(
                format!("long reductions {dt}{s:?}"),
                |x| {
                    vec![
                        x[0].sum(0i64, false),
                        x[0].max(0i64, false),
                        x[0].min(-1i64, true),
                        x[0].prod(brigade::Axes::All, false),
                    ]
                },
                vec![zeros(dt, s)],
            ));
        }
    }
    // Integer one-hot, softmax family, fused mixtures.
    for dt in [DType::I32, DType::U32] {
        cases.push(case(
            format!("one_hot {dt}"),
            |x| vec![x[0].one_hot(5)],
            vec![zeros(dt, &[2, 3])],
        ));
    }
    cases.push(case(
        "softmax family",
        |x| {
            vec![
                x[0].softmax(1),
                x[0].log_softmax(0),
                x[0].logsumexp(brigade::Axes::All, false),
            ]
        },
        vec![zeros(DType::F32, &[3, 4])],
    ));
    cases.push(case(
        "mixture",
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
            zeros(DType::F32, &[3, 4]),
            zeros(DType::F32, &[4]),
            zeros(DType::I32, &[5]),
        ],
    ));
    // Matmul: vec4 and generic kernels, batches, vectors, integers, empty operands.
    for dt in [DType::F32, DType::I32, DType::U32] {
        let shapes: [(&[usize], &[usize]); 11] = [
            (&[4, 8], &[8, 4]),
            (&[3, 5], &[5, 7]),
            (&[2, 3, 8], &[2, 8, 12]),
            (&[2, 1, 3, 5], &[4, 5, 7]),
            (&[5], &[5, 3]),
            (&[3, 5], &[5]),
            (&[5], &[5]),
            (&[1, 1], &[1, 1]),
            (&[3, 0], &[0, 4]),
            (&[0, 4], &[4, 4]),
            (&[33, 7], &[7, 33]),
        ];
        for (a, b) in shapes {
            cases.push(case(
                format!("matmul {dt}{a:?} @ {b:?}"),
                |x| vec![x[0].matmul(&x[1])],
                vec![zeros(dt, a), zeros(dt, b)],
            ));
        }
    }
    let d = DotDims {
        lhs_contract: vec![2],
        rhs_contract: vec![0],
        lhs_batch: vec![1],
        rhs_batch: vec![1],
    };
    cases.push(case(
        "dot_general batch in the middle",
        move |x| vec![x[0].dot_general(&x[1], d.clone())],
        vec![zeros(DType::F32, &[3, 2, 5]), zeros(DType::F32, &[5, 2, 4])],
    ));
    cases
}

/// Parse and validate one shader with naga, all validation flags and capabilities; also refuse
/// what browsers' stricter compilers reject and naga accepts: `bitcast<f32>` of a literal (an
/// inf/NaN constant is a shader-creation error in Chrome; brigade writes them via `bf32_bits`).
fn naga_check(wgsl: &str) -> Result<(), String> {
    for (i, _) in wgsl.match_indices("bitcast<f32>(") {
        let arg = wgsl[i + "bitcast<f32>(".len()..].trim_start();
        if arg.starts_with(|c: char| c.is_ascii_digit()) {
            let line = wgsl[..i].lines().count();
            return Err(format!(
                "line {line}: bitcast<f32> of a literal (browsers reject inf/NaN constants)"
            ));
        }
    }
    let module = naga::front::wgsl::parse_str(wgsl).map_err(|e| e.emit_to_string(wgsl))?;
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| e.emit_to_string(wgsl))?;
    Ok(())
}

fn limits_of(l: &wgpu::Limits) -> DeviceLimits {
    DeviceLimits::from_wgpu(l)
}

/// wgpu's default limits, a lavapipe-like set (48 storage buffers, as reported by Mesa) and
/// the downlevel set (4 storage buffers per stage: forces kernels to be cut).
fn limit_sets() -> Vec<(&'static str, DeviceLimits)> {
    let mut lavapipe = limits_of(&wgpu::Limits::default());
    lavapipe.max_storage_buffers_per_shader_stage = 48;
    lavapipe.max_storage_buffer_binding_size = 128 << 20;
    vec![
        ("wgpu defaults", limits_of(&wgpu::Limits::default())),
        ("lavapipe", lavapipe),
        ("downlevel", limits_of(&wgpu::Limits::downlevel_defaults())),
    ]
}

/// Lower `graph` and check every launch; failures (including panics) are described, not raised.
fn check_program(name: &str, graph: &Graph, limits: &DeviceLimits) -> Result<usize, String> {
    let p = match catch_unwind(AssertUnwindSafe(|| lower(graph, limits))) {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return Err(format!("{name}: lowering failed: {e}")),
        Err(panic) => {
            return Err(format!(
                "{name}: lowering PANICKED: {}",
                panic_message(&panic)
            ));
        }
    };
    let mut problems = Vec::new();
    for l in &p.launches {
        if let Err(e) = naga_check(&l.wgsl) {
            problems.push(format!(
                "{name}: kernel `{}` is invalid WGSL:\n{e}",
                l.label
            ));
        }
        if l.slots.len() > limits.max_storage_buffers_per_shader_stage as usize {
            problems.push(format!(
                "{name}: kernel `{}` binds {} buffers, the limit is {}",
                l.label,
                l.slots.len(),
                limits.max_storage_buffers_per_shader_stage
            ));
        }
        if l.workgroups
            .iter()
            .any(|&w| w > limits.max_compute_workgroups_per_dimension)
        {
            problems.push(format!(
                "{name}: kernel `{}` dispatches {:?} workgroups",
                l.label, l.workgroups
            ));
        }
    }
    if problems.is_empty() {
        Ok(p.launches.len())
    } else {
        Err(problems.join("\n"))
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "?".into())
}

#[test]
fn every_generated_shader_passes_naga_validation() {
    let cases = sweep();
    let mut failures = Vec::new();
    let (mut programs, mut shaders) = (0usize, 0usize);
    for (name, f, args) in &cases {
        let Ok(graph) = jit(|x: &[Tensor]| f(x)).graph(args) else {
            continue;
        };
        for (lname, limits) in limit_sets() {
            match check_program(&format!("{name} [{lname}]"), &graph, &limits) {
                Ok(n) => {
                    programs += 1;
                    shaders += n;
                }
                Err(e) => failures.push(e),
            }
        }
    }
    eprintln!(
        "{programs} programs, {shaders} shaders validated; {} failures",
        failures.len()
    );
    assert!(programs > 1000, "the sweep shrank: {programs} programs");
    assert!(
        failures.is_empty(),
        "{} of {} lowered programs are broken:\n\n{}",
        failures.len(),
        programs + failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn kernels_reading_many_buffers_are_cut_to_the_binding_limit() {
    // A sum of 12 inputs fuses into one kernel where 13 bindings are allowed, and is cut into
    // several kernels of at most 4 bindings on a downlevel device.
    let f = |x: &[Tensor]| {
        let mut acc = x[0].clone();
        for (i, t) in x.iter().enumerate().skip(1) {
            acc = if i % 2 == 0 { &acc + t } else { &acc * t };
        }
        vec![acc]
    };
    let args: Vec<Array> = (0..12).map(|i| rand_f32(&[3, 4], 40 + i)).collect();
    let graph = jit(f).graph(&args).unwrap();
    for (lname, limits) in limit_sets() {
        let p = lower(&graph, &limits).unwrap();
        check_program(lname, &graph, &limits).unwrap();
        let max = limits.max_storage_buffers_per_shader_stage as usize;
        if max >= 13 {
            assert_eq!(p.launches.len(), 1, "{lname}: {}", labels(&p));
        } else {
            assert!(
                p.launches.len() > 1 && p.launches.iter().all(|l| l.slots.len() <= max),
                "{lname}: {:?}",
                p.launches.iter().map(|l| l.slots.len()).collect::<Vec<_>>()
            );
        }
    }
    // And the cut program computes the same values (GL devices may allow as few as 8 bindings).
    check_on_all(f, &args, Tol::ARITH);
}

#[test]
fn concatenating_more_arrays_than_a_kernel_can_bind_is_split() {
    // 40 stored inputs exceed every binding limit (Vulkan 32, GL 16, downlevel 4): the concat is
    // split into a tree of smaller ones that each fit.
    let f = |x: &[Tensor]| {
        let refs: Vec<&Tensor> = x.iter().collect();
        vec![Tensor::concatenate(&refs, 0)]
    };
    let args: Vec<Array> = (0..40)
        .map(|i| rand_f32(&[1 + i % 3, 2], 100 + i as u64))
        .collect();
    let graph = jit(f).graph(&args).unwrap();
    for (lname, limits) in limit_sets() {
        let p = lower(&graph, &limits).unwrap_or_else(|e| panic!("{lname}: {e}"));
        let max = limits.max_storage_buffers_per_shader_stage as usize;
        assert!(
            p.launches.iter().all(|l| l.slots.len() <= max),
            "{lname}: {}",
            labels(&p)
        );
        check_program(lname, &graph, &limits).unwrap();
    }
    check_on_all(f, &args, Tol::EXACT);
}

// ---- (d) dispatches above 65 535 workgroups -----------------------------------------------------

#[test]
fn workgroup_counts_respect_a_small_per_dimension_limit() {
    let n = 20_000_000usize;
    let one = [rand_f32(&[1], 51)];
    let elementwise = jit(move |x: &[Tensor]| vec![(x[0].broadcast_to(&[n]) * 2.0 + 1.0).exp()])
        .graph(&one)
        .unwrap();
    let reduce = jit(move |x: &[Tensor]| {
        vec![
            x[0].broadcast_to(&[n, 2]).sum(1i64, false),
            x[0].broadcast_to(&[n, 2]).argmax(1, false),
        ]
    })
    .graph(&one)
    .unwrap();
    let wide = jit(move |x: &[Tensor]| vec![x[0].broadcast_to(&[300, 70_000]).sum(0i64, false)])
        .graph(&one)
        .unwrap();
    let long = jit(move |x: &[Tensor]| vec![x[0].broadcast_to(&[4, 5_000_000]).max(1i64, false)])
        .graph(&one)
        .unwrap();
    let batched = jit(|x: &[Tensor]| {
        vec![
            x[0].broadcast_to(&[70_000, 4, 4])
                .matmul(&x[0].broadcast_to(&[70_000, 4, 4])),
        ]
    })
    .graph(&one)
    .unwrap();
    for max_wg in [65_535u32, 4096, 1024] {
        let mut limits = limits_of(&wgpu::Limits::default());
        limits.max_compute_workgroups_per_dimension = max_wg;
        limits.max_storage_buffer_binding_size = 1 << 31;
        for (name, g, min_invocations) in [
            ("elementwise", &elementwise, n),
            ("row reductions", &reduce, n),
            ("column reduction", &wide, 70_000),
            ("long reduction", &long, 4),
            ("batched matmul", &batched, 70_000),
        ] {
            let p = lower(g, &limits).unwrap_or_else(|e| panic!("{name}: {e}"));
            for l in &p.launches {
                assert!(
                    l.workgroups.iter().all(|&w| w <= max_wg),
                    "{name} with at most {max_wg} per dimension: `{}` dispatches {:?}",
                    l.label,
                    l.workgroups
                );
            }
            // The main kernel covers every output (one tile per invocation for matmul, several
            // elements per invocation for vectorized elementwise kernels).
            let most = p
                .launches
                .iter()
                .map(|l| {
                    l.workgroups.iter().map(|&w| w as u64).product::<u64>()
                        * workgroup_size(&l.wgsl)
                        * elements_per_invocation(&l.wgsl)
                })
                .max()
                .unwrap();
            assert!(
                most >= min_invocations as u64,
                "{name}: {} launch too few invocations for {min_invocations} outputs",
                labels(&p)
            );
            check_program(name, g, &limits).unwrap();
        }
    }
}

/// The number `N` in the first `{key}Nu` of `wgsl`, if any.
fn constant_after(wgsl: &str, key: &str) -> Option<u64> {
    wgsl.find(key).map(|i| {
        let rest = &wgsl[i + key.len()..];
        rest[..rest.find('u').unwrap()].parse().unwrap()
    })
}

/// Output elements per invocation of a generated kernel: `let gb = gv * N;` in vectorized
/// elementwise kernels, times the groups each invocation computes (`rep < R`); `let gb = gi * N;`
/// in column reductions, over the parts their reduced range is split into (`part >= P`); else 1.
fn elements_per_invocation(wgsl: &str) -> u64 {
    if let Some(lanes) = constant_after(wgsl, "let gb = gi * ") {
        return (lanes / constant_after(wgsl, "part >= ").unwrap_or(1)).max(1);
    }
    constant_after(wgsl, "let gb = gv * ").unwrap_or(1)
        * constant_after(wgsl, "rep < ").unwrap_or(1)
}

/// Large outputs take several groups of 4 elements per invocation (2 from 2 * 256 * 256 groups, 4
/// from 4 * 256 * 256): every element matches the reference on both adapters, including a partial
/// final group, operands read along the last axis, broadcast rows and columns, NaN and infinities.
#[test]
fn elementwise_kernels_with_several_groups_per_invocation_match_the_reference() {
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        0.0,
        1e-40,
        -3.5,
    ];
    let with_specials = |shape: &[usize], seed: u64| {
        let mut v = f32s(numel(shape), seed, -4.0, 4.0);
        let n = v.len();
        for (k, s) in specials.iter().enumerate() {
            // At the start, in the middle and in the last group.
            for at in [k, n / 2 + k, n - 1 - k] {
                v[at] = *s;
            }
        }
        Array::from_vec(v, shape).unwrap()
    };
    let f = |a: &[Tensor]| {
        let body = brigade::select(&a[0].gt(&a[1]), &(&a[0] * &a[1]), &a[0].tanh());
        vec![&body + &a[2]]
    };
    for (shape, reps) in [
        (vec![524_291usize], 2u64),
        (vec![1024, 1028], 4),
        (vec![1031, 1021], 4),
    ] {
        let rank = shape.len();
        // x full; y a row (or a scalar) broadcast; z a column (or a scalar).
        let y_shape = if rank == 2 { vec![shape[1]] } else { vec![] };
        let z_shape = if rank == 2 { vec![shape[0], 1] } else { vec![] };
        let args = [
            with_specials(&shape, 81),
            rand_f32(&y_shape, 82),
            rand_f32(&z_shape, 83),
        ];
        let dev = device_of("vulkan");
        let p = jit(f).program(&args, &dev).unwrap();
        assert_eq!(
            p.launches.len(),
            1,
            "{shape:?}: one fused kernel: {}",
            labels(&p)
        );
        assert_eq!(
            constant_after(&p.launches[0].wgsl, "rep < "),
            Some(reps),
            "{shape:?}: groups per invocation"
        );
        check_on_all(f, &args, Tol::TRANS);
    }
}

#[test]
fn more_than_65535_workgroups_run_correctly_on_lavapipe() {
    // 17 000 000 > 65 535 * 256 elements. The elementwise kernel takes 4 per invocation, so its
    // grid fits in x; the per-row reduction (one invocation per output) needs a second dimension.
    let n = 17_000_000usize;
    let dev = device_of("vulkan");
    let xs: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 - 500.0).collect();
    let x = Array::from_vec(xs.clone(), &[n]).unwrap();
    let f = jit(|x: &[Tensor]| vec![&x[0] * 2.0 + 1.0]).on(&dev);
    let p = f.program(std::slice::from_ref(&x), &dev).unwrap();
    let w = p.launches[0].workgroups;
    assert!(
        w.iter().map(|&w| w as u64).product::<u64>()
            * 256
            * elements_per_invocation(&p.launches[0].wgsl)
            >= n as u64,
        "the launch does not cover {n} elements: {}",
        labels(&p)
    );
    let rows =
        jit(|x: &[Tensor]| vec![(&x[0] * 2.0).reshape(&[n as i64, 1]).sum(1i64, false)]).on(&dev);
    let pr = rows.program(std::slice::from_ref(&x), &dev).unwrap();
    assert!(
        pr.launches[0].workgroups[1] > 1,
        "expected a 2-D grid: {}",
        labels(&pr)
    );
    let sums = rows.call(std::slice::from_ref(&x)).unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    for i in [
        0,
        1,
        65_535 * 256 - 1,
        65_535 * 256,
        65_535 * 256 + 1,
        n - 1,
    ] {
        assert_eq!(sums[i], 2.0 * xs[i], "row {i}");
    }
    let y = f.call(&[x]).unwrap();
    let ys = y[0].to_vec::<f32>().unwrap();
    assert_eq!(ys.len(), n);
    let edge = 65_535 * 256;
    for i in [
        0,
        1,
        255,
        256,
        edge - 1,
        edge,
        edge + 1,
        edge + 300,
        16_777_216,
        16_777_217,
        n - 2,
        n - 1,
    ] {
        assert_eq!(ys[i], xs[i] * 2.0 + 1.0, "element {i}");
    }
    let mut r = Lcg::new(7);
    for _ in 0..1000 {
        let i = r.next_u32() as usize % n;
        assert_eq!(ys[i], xs[i] * 2.0 + 1.0, "element {i}");
    }
}

// ---- (e) buffers over the binding limit ----------------------------------------------------------

/// Expect `Error::OverLimit`; with `limit`, the limit it names must be that one (32-bit
/// indexing, for the largest array); without, any limit the request exceeds will do (binding size, 32-bit indexing).
fn expect_over_limit(
    what: &str,
    r: std::thread::Result<brigade::Result<Vec<Array>>>,
    limit: Option<u64>,
) {
    match r {
        Ok(Err(Error::OverLimit {
            needed,
            limit: l,
            limit_name,
            ..
        })) => {
            assert!(needed > l, "{what}: needed {needed} <= limit {l}");
            assert!(!limit_name.is_empty(), "{what}: unnamed limit");
            if let Some(limit) = limit {
                assert_eq!(l, limit, "{what}: {limit_name}");
            }
        }
        Ok(Err(e)) => panic!("{what}: expected Error::OverLimit, got another error: {e:?}"),
        Ok(Ok(a)) => panic!("{what}: expected Error::OverLimit, got {a:?}"),
        Err(p) => panic!(
            "{what}: PANICKED instead of returning Error::OverLimit: {}",
            panic_message(&p)
        ),
    }
}

#[test]
fn an_output_over_32_bit_indexing_is_an_over_limit_error() {
    for dev in gpu_devices() {
        // Over one binding arrays are bound in segments (tests/segments.rs), over one buffer
        // stored in parts (tests/parts.rs): what refuses is kernels' 32-bit element indexing.
        let limit = u32::MAX as u64;
        let n = limit as usize + 1_000_000;
        let one = rand_f32(&[1], 61);
        {
            let _guard = device_guard(&dev);
            let f = jit(move |x: &[Tensor]| vec![x[0].broadcast_to(&[n]) + 1.0]).on(&dev);
            expect_over_limit(
                &format!("broadcast output on {}", dev.name()),
                catch_unwind(AssertUnwindSafe(|| f.call(std::slice::from_ref(&one)))),
                Some(limit),
            );
        }
        // The device still works afterwards.
        check_on(
            std::slice::from_ref(&dev),
            |x: &[Tensor]| vec![&x[0] + 1.0],
            &[one],
            Tol::ARITH,
        );
    }
}

/// An input over the binding limit (within a buffer) is uploaded and computed in segments.
#[test]
fn an_input_over_the_binding_limit_runs_in_segments() {
    let dev = device_of("vulkan");
    let limit = dev.limits().max_storage_buffer_binding_size;
    let n = (limit / 4) as usize + 16;
    let big = Array::full(1.5f32, &[n]).expect("host memory for one binding");
    let f = jit(|x: &[Tensor]| vec![&x[0] * 2.0]).on(&dev);
    let y = f.call(std::slice::from_ref(&big)).unwrap();
    let (len, ok) = y[0]
        .read_with(|v: &[f32]| (v.len(), v.iter().all(|&x| x == 3.0)))
        .unwrap();
    assert_eq!(len, n);
    assert!(ok, "every element of 1.5 * 2 is 3");
}

#[test]
fn a_huge_matmul_is_an_over_limit_error_not_a_panic() {
    // Operands of 70 000 x 70 000 (4.9e9 elements, 19.6 GB) broadcast from a single element.
    let dev = device_of("vulkan");
    let one = rand_f32(&[1, 1], 71);
    let f = jit(|x: &[Tensor]| {
        vec![
            x[0].broadcast_to(&[70_000, 70_000])
                .matmul(&x[0].broadcast_to(&[70_000, 4])),
        ]
    })
    .on(&dev);
    expect_over_limit(
        "huge matmul",
        catch_unwind(AssertUnwindSafe(|| f.call(std::slice::from_ref(&one)))),
        None,
    );
}

#[test]
fn an_elementwise_result_of_more_than_4g_elements_is_an_over_limit_error() {
    let dev = device_of("vulkan");
    let one = rand_f32(&[1], 81);
    let f = jit(|x: &[Tensor]| vec![x[0].broadcast_to(&[5_000_000_000]) * 2.0]).on(&dev);
    expect_over_limit(
        "5e9-element output",
        catch_unwind(AssertUnwindSafe(|| f.call(std::slice::from_ref(&one)))),
        None,
    );
}

// ---- robustness: long programs --------------------------------------------------

/// Run the test `name` again in a child process with `BRIGADE_TEST_CHILD=name`, for checks whose
/// failure mode kills the process (a stack overflow aborts it).
fn run_in_child(name: &str) -> std::process::Output {
    let exe = std::env::current_exe().expect("the test binary");
    std::process::Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("BRIGADE_TEST_CHILD", name)
        .output()
        .expect("running the test binary again")
}

fn is_child(name: &str) -> bool {
    std::env::var("BRIGADE_TEST_CHILD").as_deref() == Ok(name)
}

fn tail(bytes: &[u8], lines: usize) -> String {
    let s = String::from_utf8_lossy(bytes);
    let v: Vec<&str> = s
        .lines()
        .filter(|l| !l.contains("wgpu_hal::gles::egl"))
        .collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// `steps` iterations of `c = sin(c * k_i) + 0.5`, summed (7 equations per step with the
/// broadcasts of the scalars).
fn long_chain(steps: usize) -> impl Fn(&[Tensor]) -> Vec<Tensor> {
    move |x: &[Tensor]| {
        let mut c = x[0].clone();
        for i in 0..steps {
            c = (&c * (1.0001 + i as f32 * 1e-6)).sin() + 0.5;
        }
        vec![c.sum_all()]
    }
}

#[test]
fn a_long_elementwise_chain_lowers_without_overflowing_the_stack() {
    // A loop of 2000 iterations unrolled by tracing (14 000 equations, all fusable) lowered on a
    // thread with the default 2 MiB stack of `std::thread::spawn`.
    const NAME: &str = "a_long_elementwise_chain_lowers_without_overflowing_the_stack";
    if is_child(NAME) {
        let t = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                let args = [rand_f32(&[100], 91)];
                let graph = jit(long_chain(2000)).graph(&args).unwrap();
                assert!(graph.eqns.len() >= 14_000);
                let limits = limits_of(&wgpu::Limits::default());
                let p = lower(&graph, &limits).unwrap();
                for l in &p.launches {
                    naga_check(&l.wgsl).unwrap();
                }
            })
            .unwrap();
        t.join().unwrap();
        return;
    }
    let out = run_in_child(NAME);
    assert!(
        out.status.success(),
        "lowering a 14 000-equation chain crashed the process ({}):\n{}",
        out.status,
        tail(&out.stderr, 8)
    );
}

#[test]
fn constants_made_inside_jit_are_computed_in_kernels_not_captured() {
    // one_hot compares against an iota as large as its output; full/arange make constants. None of
    // them may become captured data (uploaded per device): they are primitives in the graph.
    let f = |x: &[Tensor]| {
        let w = Tensor::full(0.5f32, &[4, 3]) + Tensor::arange(3).cast(DType::F32);
        vec![x[0].one_hot(3).matmul(&w.t())]
    };
    let idx = Array::from_vec(vec![2i32, 0, 1, 2, -1], &[5]).unwrap();
    let g = jit(f).graph(std::slice::from_ref(&idx)).unwrap();
    assert!(g.consts.is_empty(), "captured constants in:\n{g}");
    let printed = g.to_string();
    assert!(
        printed.contains("iota") && printed.contains("full"),
        "{printed}"
    );
    check_on_all(f, &[idx], Tol::EXACT);
}
