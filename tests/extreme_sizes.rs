//! Extreme size-like arguments never take the process down, wrap, or reach the shader generator:
//! each gives a typed error naming the value, or the right result. Also run in release
//! (`cargo test --release --features web --test extreme_sizes`, a step of scripts/test.sh), where
//! arithmetic wraps silently instead of panicking.
//!
//! The extreme values: 0, 1, 2^31, 2^32, 2^40, `i64::MAX`, `i64::MIN` (paddings), `usize::MAX`,
//! `u64::MAX`. Entry points covered, by the property tests (shape rules, traced: no device
//! needed) and by the device checks (Vulkan lavapipe, GL llvmpipe and the cpu device):
//! - `Tensor::conv_general_dilated` / `Tensor::conv` (`ConvOptions`: `window_strides`,
//!   `Padding::Explicit`, `Padding::Same`, `lhs_dilation`, `rhs_dilation`; kernel window sizes);
//! - `Tensor::reduce_window` / `Tensor::reduce_window_dilated` (`Window`: dims, strides, padding,
//!   base and window dilation), and through them `nn::max_pool` / `sum_pool` / `avg_pool`;
//! - `Tensor::pad` / `Tensor::pad_interior` (lo, hi, interior);
//! - `Mesh::new` (axis sizes);
//! - `RuntimeBuilder::max_buffer`, `RuntimeBuilder::max_binding`, `RuntimeBuilder::memory_limit`;
//! - `device::parse_memory_limit`, `device::parse_max_binding`;
//! - the `BRIGADE_*` variables read when a runtime is built (`BRIGADE_MEMORY_LIMIT`,
//!   `BRIGADE_MAX_BUFFER`, `BRIGADE_MAX_BINDING`, `BRIGADE_KERNEL_CACHE`,
//!   `BRIGADE_PROGRAM_CACHE`, `BRIGADE_MATMUL_TUNE`, `BRIGADE_MATMUL_TEXTURE`,
//!   `BRIGADE_REDUCE_SPREAD`, `BRIGADE_MAPPED_READS`), in a child process.

mod common;

use std::cell::RefCell;

use brigade::device::{Runtime, parse_max_binding, parse_memory_limit};
use brigade::ops::Window;
use brigade::{Array, ConvOptions, Device, Error, Mesh, Padding, Tensor, WindowOp, jit, nn};
use common::*;
use proptest::prelude::*;

/// The extreme sizes (as u64: the usize ones are the same on 64-bit targets).
const EXTREMES: [u64; 8] = [
    0,
    1,
    1 << 31,
    1 << 32,
    1 << 40,
    i64::MAX as u64,
    usize::MAX as u64,
    u64::MAX,
];

/// The extreme paddings (signed).
const PADS: [i64; 7] = [0, 1, 1 << 31, 1 << 32, 1 << 40, i64::MAX, i64::MIN];

/// A one-input op to check: its name, the op, and its exact output shape where it must succeed.
type Sized1 = (
    &'static str,
    Box<dyn Fn(&Tensor) -> Tensor>,
    Option<Vec<usize>>,
);

/// The largest value the kernels index with.
const KMAX: i128 = i32::MAX as i128;

/// `n` positions with `d - 1` holes between neighbours, exactly.
fn dilated(n: u64, d: u64) -> i128 {
    if n == 0 {
        0
    } else {
        (n as i128 - 1)
            .checked_mul(d as i128)
            .map_or(i128::MAX, |v| v + 1)
    }
}

/// Windows of `span` at `stride` over `padded` positions, exactly (JAX's shape rule).
fn windows(padded: i128, span: i128, stride: u64) -> i128 {
    if padded < span {
        0
    } else {
        (padded - span) / stride as i128 + 1
    }
}

/// The output shape of the one-output function `f` traced for `args`, or its error. Tracing
/// runs every shape rule and generates no WGSL.
fn traced_shape(f: impl Fn(&Tensor) -> Tensor, args: &[Array]) -> Result<Vec<usize>, Error> {
    let shape = RefCell::new(Vec::new());
    let g = jit(|xs: &[Tensor]| {
        let y = f(&xs[0]);
        *shape.borrow_mut() = y.shape().to_vec();
        vec![y]
    })
    .graph(args)?;
    let out = g.aval(g.outputs[0]).shape.clone();
    assert_eq!(out, *shape.borrow());
    Ok(out)
}

/// An error is typed, names a shape or size problem (never `Compile`: no WGSL was written) and
/// says which value.
fn assert_size_error(e: &Error, names: &[String], context: &str) {
    assert!(
        matches!(
            e,
            Error::BadShapeArg { .. }
                | Error::MatmulShape { .. }
                | Error::ShapeTooLarge { .. }
                | Error::BadSharding { .. }
                | Error::BadDeviceSpec { .. }
        ),
        "{context}: expected a typed size error, got {e:?}"
    );
    let msg = e.to_string();
    assert!(
        names.iter().any(|n| msg.contains(n.as_str())),
        "{context}: the message names none of {names:?}: {msg}"
    );
}

fn conv_input() -> (Array, Array) {
    (rand_f32(&[1, 3, 5, 4], 11), rand_f32(&[2, 3, 3, 2], 12))
}

/// Whether a conv axis is within what the kernels index (the test's statement of the bound).
fn conv_axis_fits(n: u64, w: u64, s: u64, ld: u64, rd: u64, lo: i64, hi: i64) -> bool {
    let di = dilated(n, ld);
    [
        s as i128,
        ld as i128,
        rd as i128,
        lo as i128,
        hi as i128,
        dilated(w, rd),
        di + (lo as i128).abs() + (hi as i128).abs(),
    ]
    .iter()
    .all(|v| v.abs() <= KMAX)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    /// `conv_general_dilated` with extreme strides, dilations and explicit paddings on the first
    /// spatial axis: the exact JAX shape, or a typed error naming the value.
    #[test]
    fn conv_extremes(
        s in prop::sample::select(&EXTREMES[..]),
        ld in prop::sample::select(&EXTREMES[..]),
        rd in prop::sample::select(&EXTREMES[..]),
        lo in prop::sample::select(&PADS[..]),
        hi in prop::sample::select(&PADS[..]),
    ) {
        let (x, k) = conv_input();
        let opts = ConvOptions::new(&[s as usize, 1], Padding::Explicit(vec![(lo, hi), (0, 0)]))
            .lhs_dilation(&[ld as usize, 1])
            .rhs_dilation(&[rd as usize, 1]);
        let got = traced_shape(|t| t.conv_general_dilated(&Tensor::from(k.clone()), &opts), std::slice::from_ref(&x));
        let padded = dilated(5, ld) + lo as i128 + hi as i128;
        let out = windows(padded, dilated(3, rd), s.max(1));
        let ok = s > 0 && ld > 0 && rd > 0 && padded >= 0
            && (conv_axis_fits(5, 3, s, ld, rd, lo, hi) || (s > KMAX as u64 && out <= 1
                && conv_axis_fits(5, 3, 1, ld, rd, lo, hi)));
        let context = format!("stride {s}, lhs_dilation {ld}, rhs_dilation {rd}, padding ({lo}, {hi})");
        match got {
            Ok(shape) => {
                prop_assert!(ok, "{context}: accepted as {shape:?}");
                prop_assert_eq!(shape, vec![1, 2, out as usize, 3], "{}", context);
            }
            Err(e) => {
                prop_assert!(!ok, "{context}: refused: {e}");
                let names = [s.to_string(), ld.to_string(), rd.to_string(), lo.to_string(),
                    hi.to_string(), "2147483647".into(), "at least 1".into(), "crops".into()];
                assert_size_error(&e, &names, &context);
            }
        }
    }

    /// `Padding::Same` with extreme strides and kernel dilations.
    #[test]
    fn conv_same_extremes(
        s in prop::sample::select(&EXTREMES[..]),
        rd in prop::sample::select(&EXTREMES[..]),
    ) {
        let (x, k) = conv_input();
        let opts = ConvOptions::new(&[s as usize, 1], Padding::Same).rhs_dilation(&[rd as usize, 1]);
        let got = traced_shape(|t| t.conv_general_dilated(&Tensor::from(k.clone()), &opts), std::slice::from_ref(&x));
        let context = format!("SAME, stride {s}, rhs_dilation {rd}");
        // SAME gives ceil(5 / stride) outputs, padding as much as the span needs.
        let span = dilated(3, rd);
        let fits = s > 0 && rd > 0 && rd as i128 <= KMAX && span <= KMAX
            && 5 + 2 * span <= KMAX;
        match got {
            Ok(shape) => {
                prop_assert!(fits, "{context}: accepted as {shape:?}");
                prop_assert_eq!(shape, vec![1, 2, 5u64.div_ceil(s) as usize, 4], "{}", context);
            }
            Err(e) => {
                prop_assert!(!fits || s == 0, "{context}: refused: {e}");
                let names = [s.to_string(), rd.to_string(), "2147483647".into(), "at least 1".into()];
                assert_size_error(&e, &names, &context);
            }
        }
    }

    /// `reduce_window_dilated` with extreme window, stride, paddings and dilations on one axis.
    #[test]
    fn reduce_window_extremes(
        w in prop::sample::select(&EXTREMES[..]),
        s in prop::sample::select(&EXTREMES[..]),
        lo in prop::sample::select(&EXTREMES[..]),
        hi in prop::sample::select(&EXTREMES[..]),
        bd in prop::sample::select(&EXTREMES[..]),
        wd in prop::sample::select(&EXTREMES[..]),
    ) {
        let x = rand_f32(&[6, 2], 21);
        let win = Window {
            dims: vec![w as usize, 1],
            strides: vec![s as usize, 1],
            padding: vec![(lo as usize, hi as usize), (0, 0)],
            base_dilation: vec![bd as usize, 1],
            window_dilation: vec![wd as usize, 1],
        };
        let got = traced_shape(|t| t.reduce_window_dilated(WindowOp::Max, &win), &[x]);
        let padded = dilated(6, bd) + lo as i128 + hi as i128;
        let span = dilated(w, wd);
        let out = windows(padded, span, s.max(1));
        let stride = if out > 1 { s as i128 } else { 1 };
        let ok = [w, s, bd, wd].iter().all(|&v| v > 0)
            && [w as i128, stride, out * stride, bd as i128, wd as i128, lo as i128, hi as i128,
                span, padded].iter().all(|&v| v <= KMAX);
        let context = format!("window {w}, stride {s}, padding ({lo}, {hi}), base_dilation {bd}, window_dilation {wd}");
        match got {
            Ok(shape) => {
                prop_assert!(ok, "{context}: accepted as {shape:?}");
                prop_assert_eq!(shape, vec![out as usize, 2], "{}", context);
            }
            Err(e) => {
                prop_assert!(!ok, "{context}: refused: {e}");
                let names = ["2147483647".to_string(), "at least 1".into()];
                assert_size_error(&e, &names, &context);
            }
        }
    }

    /// `pad_interior` with extreme lo, hi and interior padding.
    #[test]
    fn pad_extremes(
        lo in prop::sample::select(&EXTREMES[..]),
        hi in prop::sample::select(&EXTREMES[..]),
        interior in prop::sample::select(&EXTREMES[..]),
    ) {
        let x = rand_f32(&[3], 31);
        let got = traced_shape(
            |t| t.pad_interior(&[lo as usize], &[hi as usize], &[interior as usize], 0.0f32),
            &[x],
        );
        let want = 3u128 + 2 * interior as u128 + lo as u128 + hi as u128;
        let context = format!("pad lo {lo}, hi {hi}, interior {interior}");
        match got {
            Ok(shape) => prop_assert_eq!(shape.iter().map(|&d| d as u128).collect::<Vec<_>>(), vec![want], "{}", context),
            Err(e) => {
                prop_assert!(want > usize::MAX as u128 || want > KMAX as u128, "{context}: refused: {e}");
                assert_size_error(&e, &["overflow".into(), "too large".into(), "2147483647".into()], &context);
            }
        }
    }

    /// Pooling, layout and creation ops with an extreme size: the exact shape or a typed error
    /// (never a panic, never `Compile`).
    #[test]
    fn pooling_and_layout_extremes(v in prop::sample::select(&EXTREMES[..])) {
        let u = v as usize;
        let x = rand_f32(&[1, 1, 6], 41);
        let ops: [Sized1; 8] = [
            ("max_pool window", Box::new(move |t: &Tensor| nn::max_pool(t, &[u], &[1], &nn::Padding::Same, nn::Layout::Nchw)),
                (u > 0 && v as i128 + 5 <= KMAX).then_some(vec![1, 1, 6])),
            ("max_pool stride", Box::new(move |t: &Tensor| nn::max_pool(t, &[2], &[u], &nn::Padding::Same, nn::Layout::Nchw)),
                (u > 0).then(|| vec![1, 1, 6u64.div_ceil(v) as usize])),
            ("avg_pool stride", Box::new(move |t: &Tensor| nn::avg_pool(t, &[2], &[u], &nn::Padding::Valid, nn::Layout::Nchw, true)),
                (u > 0).then(|| vec![1, 1, (4 / v + 1) as usize])),
            ("sum_pool padding", Box::new(move |t: &Tensor| nn::sum_pool(t, &[2], &[1], &nn::Padding::Explicit(vec![(0, v.min(i64::MAX as u64) as i64)]), nn::Layout::Nchw)),
                (v.min(i64::MAX as u64) as i128 + 6 <= KMAX).then(|| vec![1, 1, 5 + v as usize])),
            ("broadcast_to", Box::new(move |t: &Tensor| t.broadcast_to(&[u, 1, 1, 6])), None),
            ("slice", Box::new(move |t: &Tensor| t.slice(&[0, 0, u], &[1, 1, u], None)), None),
            ("zeros", Box::new(move |_: &Tensor| Tensor::zeros(&[u, u], brigade::DType::F32)), None),
            ("iota", Box::new(move |_: &Tensor| Tensor::iota(brigade::DType::I32, &[u, 2], 0)), None),
        ];
        for (name, f, want) in ops {
            let context = format!("{name} with {v}");
            match (traced_shape(f, std::slice::from_ref(&x)), want) {
                (Ok(shape), Some(w)) => prop_assert_eq!(shape, w, "{}", context),
                (Ok(_), None) => {}
                (Err(e), Some(_)) => prop_assert!(false, "{context}: refused: {e}"),
                (Err(e), None) => prop_assert!(
                    !matches!(e, Error::Compile { .. } | Error::Wgpu { .. }),
                    "{context}: {e:?}"
                ),
            }
        }
    }

    /// `parse_memory_limit` / `parse_max_binding` with the extremes written out, with suffixes.
    #[test]
    fn byte_size_extremes(v in prop::sample::select(&EXTREMES[..]), suffix in prop::sample::select(&["", "B", "K", "MiB", "T"][..])) {
        let text = format!("{v}{suffix}");
        let shift = match suffix { "K" => 10, "MiB" => 20, "T" => 40, _ => 0 };
        let want = (v as u128) << shift;
        match parse_memory_limit(&text) {
            Ok(b) => prop_assert_eq!(b as u128, want, "{}", text),
            Err(e) => {
                prop_assert!(want == 0 || want > u64::MAX as u128, "{text}: {e}");
                assert_size_error(&e, std::slice::from_ref(&text), &text);
            }
        }
        match parse_max_binding(&text) {
            Ok(b) => prop_assert!(b as u128 == want && want.is_multiple_of(4) && want >= 256, "{text}: {b}"),
            Err(e) => assert_size_error(&e, std::slice::from_ref(&text), &text),
        }
    }
}

/// `Mesh::new` with axis sizes whose product overflows: refused, never wrapped to the device
/// count (`(2^62 + 1) × 4` wraps to 4 in 64 bits).
#[test]
fn mesh_axis_products() {
    let devs = devices_with("cpu:4");
    for axes in [
        [("a", usize::MAX), ("b", 2)],
        [("a", 1 << 32), ("b", 1 << 32)],
        [("a", (1 << 62) + 1), ("b", 4)],
        [("a", 0), ("b", 4)],
    ] {
        match Mesh::new(&devs, &axes) {
            Err(e) => assert_size_error(&e, &[axes[0].1.to_string()], &format!("{axes:?}")),
            Ok(_) => panic!("{axes:?} accepted for 4 devices"),
        }
    }
    for &a in &EXTREMES {
        let r = Mesh::new(&devs, &[("a", a as usize), ("b", 2)]);
        assert_eq!(r.is_ok(), a == 2, "a = {a}: {:?}", r.err());
    }
    let m = Mesh::new(&devs, &[("a", 2), ("b", 2)]).unwrap();
    assert_eq!(m.axis_size("b"), Some(2));
}

/// `max_buffer` / `max_binding` / `memory_limit` at the extremes: typed errors or the value.
#[test]
fn runtime_limit_extremes() {
    for &v in &EXTREMES {
        for which in ["max_buffer", "max_binding", "memory_limit"] {
            let b = Runtime::builder().layout_str("cpu:1");
            let b = match which {
                "max_buffer" => b.max_buffer(v),
                "max_binding" => b.max_binding(v),
                _ => b.memory_limit(v),
            };
            let r = pollster::block_on(b.build());
            let ok = if which == "memory_limit" {
                v > 0
            } else {
                v >= 256 && v % 4 == 0
            };
            match r {
                Ok(_) => assert!(ok, "{which}({v}) accepted"),
                Err(e) => {
                    assert!(!ok, "{which}({v}) refused: {e}");
                    assert_size_error(&e, &[v.to_string()], &format!("{which}({v})"));
                }
            }
        }
    }
}

/// An input that must be refused: its name, the function, and whether it takes the conv operands.
type Refused = (&'static str, Box<dyn Fn(&[Tensor]) -> Tensor>, bool);

/// The reported inputs on every device kind: errors before any WGSL, and the one-window results
/// computed, against sums written out here.
#[test]
fn extremes_on_devices() {
    let mut devices: Vec<Device> = vec![device_of("vulkan"), device_of("gl")];
    devices.extend(devices_with("cpu:1"));
    let (x, k) = conv_input();
    let (hx, hk) = (host(&x), host(&k));
    let (xv, kv) = (hx.to_f64(), hk.to_f64());
    // One window per axis: out[0, o, 0, 0] = sum over c, i < 3, j < 2 of x[0, c, i, j] * k[o, c, i, j].
    let want: Vec<f64> = (0..2)
        .map(|o| {
            let mut acc = 0.0;
            for c in 0..3 {
                for i in 0..3 {
                    for j in 0..2 {
                        acc += xv[(c * 5 + i) * 4 + j] * kv[((o * 3 + c) * 3 + i) * 2 + j];
                    }
                }
            }
            acc
        })
        .collect();
    let r = Array::from_vec(vec![3.0f32, -1.0, 7.0, 2.0, -5.0], &[5]).unwrap();
    let max_win = |dims: usize, strides: usize, pad: (usize, usize), wd: usize| Window {
        dims: vec![dims],
        strides: vec![strides],
        padding: vec![pad],
        base_dilation: vec![1],
        window_dilation: vec![wd],
    };
    let refused: Vec<Refused> = vec![
        (
            "conv padding (i64::MAX, i64::MAX)",
            Box::new(|t: &[Tensor]| {
                t[0].conv(
                    &t[1],
                    &[1, 1],
                    Padding::Explicit(vec![(i64::MAX, i64::MAX), (0, 0)]),
                )
            }),
            true,
        ),
        (
            "conv rhs_dilation 2^40",
            Box::new(|t: &[Tensor]| {
                t[0].conv_general_dilated(
                    &t[1],
                    &ConvOptions::new(&[], Padding::Valid).rhs_dilation(&[1 << 40, 1]),
                )
            }),
            true,
        ),
        (
            "reduce_window padding (usize::MAX, usize::MAX)",
            Box::new(move |t: &[Tensor]| {
                t[0].reduce_window_dilated(
                    WindowOp::Max,
                    &max_win(2, 1, (usize::MAX, usize::MAX), 1),
                )
            }),
            false,
        ),
        (
            "reduce_window window 2^40",
            Box::new(move |t: &[Tensor]| {
                t[0].reduce_window_dilated(WindowOp::Sum, &max_win(1 << 40, 1, (0, 0), 1))
            }),
            false,
        ),
        (
            "reduce_window window_dilation 2^40",
            Box::new(move |t: &[Tensor]| {
                t[0].reduce_window_dilated(WindowOp::Max, &max_win(2, 1, (0, 0), 1 << 40))
            }),
            false,
        ),
    ];
    for dev in &devices {
        let _g = device_guard(dev);
        let on = |a: &Array| a.to_device(dev).unwrap();
        for (name, f, conv) in &refused {
            let args = if *conv {
                vec![on(&x), on(&k)]
            } else {
                vec![on(&r)]
            };
            let e = jit(|t: &[Tensor]| vec![f(t)])
                .on(dev)
                .call(&args)
                .unwrap_err();
            assert_size_error(
                &e,
                &["2147483647".into()],
                &format!("{name} on {}", dev.name()),
            );
            // Eagerly too: the op fails, no kernel is made.
            let eager: Vec<Tensor> = args.iter().cloned().map(Tensor::from).collect();
            let e = f(&eager).to_array().unwrap_err();
            assert_size_error(
                &e,
                &["2147483647".into()],
                &format!("{name} eagerly on {}", dev.name()),
            );
        }
        // conv with strides usize::MAX: one window per axis, [1, 2, 1, 1].
        let y =
            jit(|t: &[Tensor]| vec![t[0].conv(&t[1], &[usize::MAX, usize::MAX], Padding::Valid)])
                .on(dev)
                .call(&[on(&x), on(&k)])
                .unwrap_or_else(|e| panic!("conv stride usize::MAX on {}: {e}", dev.name()));
        assert_eq!(y[0].shape(), &[1, 2, 1, 1], "on {}", dev.name());
        let got = host(&y[0]).to_f64();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "on {}: {got:?} vs {want:?}",
                dev.name()
            );
        }
        // reduce_window with stride usize::MAX: one window, max(3, -1) = 3.
        let y = jit(move |t: &[Tensor]| {
            vec![t[0].reduce_window_dilated(WindowOp::Max, &max_win(2, usize::MAX, (0, 0), 1))]
        })
        .on(dev)
        .call(&[on(&r)])
        .unwrap_or_else(|e| panic!("reduce_window stride usize::MAX on {}: {e}", dev.name()));
        assert_eq!(
            y[0].to_vec::<f32>().unwrap(),
            vec![3.0],
            "on {}",
            dev.name()
        );
    }
}

/// Bad values of the `BRIGADE_*` variables refuse the runtime, naming the variable (in a child
/// process: this one's environment is shared by its test threads).
#[test]
fn env_values_are_parsed_exactly() {
    let out = run_child_test("env_child", &[("BRIGADE_EXTREME_SIZES_CHILD", "1")]);
    assert!(out.contains("env_child ok"), "{out}");
}

/// The child of [`env_values_are_parsed_exactly`] (single-threaded: it sets variables).
#[test]
fn env_child() {
    if std::env::var("BRIGADE_EXTREME_SIZES_CHILD").is_err() {
        return; // run as a plain test: nothing to check here
    }
    let build = || pollster::block_on(Runtime::builder().layout_str("cpu:1").build());
    let cases: [(&str, &str, bool); 20] = [
        ("BRIGADE_KERNEL_CACHE", "abc", false),
        ("BRIGADE_KERNEL_CACHE", "-1", false),
        ("BRIGADE_KERNEL_CACHE", "0", false),
        ("BRIGADE_KERNEL_CACHE", "18446744073709551616", false),
        ("BRIGADE_KERNEL_CACHE", " 64 ", true),
        ("BRIGADE_PROGRAM_CACHE", "lots", false),
        ("BRIGADE_PROGRAM_CACHE", "32", true),
        ("BRIGADE_MEMORY_LIMIT", "1e3", false),
        ("BRIGADE_MEMORY_LIMIT", "18446744073709551615", true),
        ("BRIGADE_MEMORY_LIMIT", "16777216T", false),
        ("BRIGADE_MAX_BUFFER", "18446744073709551615", false),
        ("BRIGADE_MAX_BUFFER", "18446744073709551612", true),
        ("BRIGADE_MAX_BINDING", "18446744073709551615", false),
        ("BRIGADE_MATMUL_TUNE", "maybe", false),
        ("BRIGADE_MATMUL_TUNE", "OFF", true),
        ("BRIGADE_MATMUL_TEXTURE", "2", false),
        ("BRIGADE_REDUCE_SPREAD", "255", false),
        ("BRIGADE_REDUCE_SPREAD", "gpu", true),
        ("BRIGADE_MAPPED_READS", "no", false),
        ("BRIGADE_MAPPED_READS", "", true),
    ];
    for (var, value, ok) in cases {
        // SAFETY: this child runs one test on one thread (`run_child_test`).
        unsafe { std::env::set_var(var, value) };
        let r = build();
        unsafe { std::env::remove_var(var) };
        match r {
            Ok(_) => assert!(ok, "{var}={value:?} accepted"),
            Err(Error::BadDeviceSpec { spec, detail }) => {
                assert!(!ok, "{var}={value:?} refused: {spec}: {detail}");
                assert_eq!(spec, format!("{var}={value}"));
                assert!(detail.contains(var), "{detail}");
            }
            Err(e) => panic!("{var}={value:?}: expected BadDeviceSpec, got {e:?}"),
        }
    }
    println!("env_child ok");
}
