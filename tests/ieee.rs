//! IEEE-754 and JAX semantics on every device: NaN tests, literal zeros and
//! infinities inside `jit`, `tanh(NaN)`, NaN propagation through max/min (elementwise, reductions,
//! argmax/argmin, pmax/pmin) and reductions over empty axes.
//!
//! Every case runs on the CPU reference and on both CI adapters (lavapipe Vulkan and llvmpipe GL)
//! through `check_on_all`; the reference itself is held to values derived from IEEE-754 / JAX's
//! documented rules (`ieee_*` helpers below), so a reference that drifted could not hide a device
//! bug. The tables are op × input value (NaN of both signs, ±inf, ±0, subnormals, the f32 extremes,
//! integer-limit boundaries); each test prints how many cases it ran (a case is one input value
//! checked in one place: the reference, Vulkan or GL).
//!
//! What these found on Mesa (lavapipe and llvmpipe GL, Mesa 22.3): naga writes `!=` as an ordered
//! compare (false for NaN on Vulkan); Mesa folds `x * 0.0` and `0.0 / x` to 0, `x - x` to 0, drops
//! the store of `x / 0.0`, and evaluates `clamp(NaN, a, b)` as `a`; `ldexp` overflows above 2^127;
//! `log`/`log2` of subnormals are off by up to 4.

mod common;

use brigade::{
    Array, DType, Error, HostArray, HostData, Tensor, grad, jit, pmap, pmax, pmin, vmap,
};
use common::*;

/// Inputs every table uses: NaN of both signs, infinities, signed zeros, subnormals, the f32
/// extremes, integer-limit boundaries and ordinary values (round-half-even ties included).
fn specials() -> Vec<f32> {
    vec![
        f32::NAN,
        f32::from_bits(0xffc0_0000), // -NaN
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.5,
        -2.5,
        3.0,
        1e-40,              // subnormal
        -f32::from_bits(1), // the smallest subnormal, negative
        f32::MIN_POSITIVE,  // the smallest normal
        1e-7,
        100.0,
        -100.0,
        1e10,
        -1e10,
        3e38,
        -3e38,
        f32::MAX,
        f32::MIN,
        2147483648.0,  // 2^31: i32 saturates
        -2147483904.0, // the f32 below -2^31
        4294967296.0,  // 2^32: u32 saturates
    ]
}

/// A smaller set for binary tables (all pairs).
fn pair_values() -> Vec<f32> {
    vec![
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.5,
        -3.0,
        1e-40,
        3e38,
    ]
}

fn arr(v: &[f32]) -> Array {
    Array::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

fn f32s_of(h: &HostArray) -> Vec<f32> {
    match &h.data {
        HostData::F32(v) => v.clone(),
        d => panic!("expected f32 data, got {d:?}"),
    }
}

/// Same IEEE value: both NaN, or bit-identical (so the sign of zero counts).
fn same_bits(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

/// Assert `got` equals `want` element by element in the IEEE sense of [`same_bits`].
fn assert_ieee(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            same_bits(*g, *w),
            "{what}: element {i}: got {g:?} ({:#010x}), want {w:?} ({:#010x})\n got  {got:?}\n want {want:?}",
            g.to_bits(),
            w.to_bits()
        );
    }
}

type Unary = fn(&Tensor) -> Tensor;
/// An op under test and its IEEE-754 value.
type Lit = (&'static str, Unary, fn(f32) -> f32);

/// Run `op` on every special value: on the reference and both devices (check_on_all), and hold
/// the reference to `ieee` where given (the value IEEE-754 / JAX define). Returns the case count.
fn unary_table(name: &str, op: Unary, xs: &[f32], tol: Tol, ieee: Option<fn(f32) -> f32>) -> usize {
    let f = move |a: &[Tensor]| vec![op(&a[0])];
    let want = check_on_all(f, &[arr(xs)], tol);
    if let Some(ieee) = ieee {
        let w: Vec<f32> = xs.iter().map(|&x| ieee(x)).collect();
        assert_ieee(&f32s_of(&want[0]), &w, &format!("reference {name}"));
    }
    xs.len() * 3
}

fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a > b {
        a
    } else {
        b
    }
}

fn nan_min(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a < b {
        a
    } else {
        b
    }
}

// ---- item 1: NaN tests, casts, the public class predicates -----------------------------------------

#[test]
fn class_predicates_and_nan_to_num_follow_ieee_on_every_device() {
    let xs = specials();
    let mut cases = 0;
    let bool_of = |want: &HostArray| -> Vec<bool> {
        match &want.data {
            HostData::Bool(v) => v.clone(),
            d => panic!("expected bool data, got {d:?}"),
        }
    };
    type Pred = (&'static str, Unary, fn(f32) -> bool);
    let preds: [Pred; 5] = [
        ("is_nan", Tensor::is_nan, f32::is_nan),
        ("is_inf", Tensor::is_inf, f32::is_infinite),
        ("is_finite", Tensor::is_finite, f32::is_finite),
        // x != x is the classic NaN test: `ne` must not be an ordered compare.
        ("ne(x, x)", |t| t.ne(t), f32::is_nan),
        ("eq(x, x)", |t| t.eq(t), |x| !x.is_nan()),
    ];
    for (name, op, ieee) in preds {
        let want = check_on_all(move |a| vec![op(&a[0])], &[arr(&xs)], Tol::EXACT);
        let w: Vec<bool> = xs.iter().map(|&x| ieee(x)).collect();
        assert_eq!(bool_of(&want[0]), w, "reference {name}");
        cases += xs.len() * 3;
    }
    // Integer and bool inputs: never NaN or inf.
    let ints = Array::from_vec(vec![0i32, -1, i32::MAX, i32::MIN], &[4]).unwrap();
    for (name, op, _) in preds.iter().take(3) {
        let want = check_on_all(
            move |a| vec![op(&a[0])],
            std::slice::from_ref(&ints),
            Tol::EXACT,
        );
        let expect = *name == "is_finite";
        assert_eq!(bool_of(&want[0]), vec![expect; 4], "{name} of i32");
        cases += 4 * 3;
    }
    // nan_to_num with JAX's defaults and with explicit values.
    cases += unary_table(
        "nan_to_num_default",
        Tensor::nan_to_num_default,
        &xs,
        Tol::EXACT,
        Some(|x| {
            if x.is_nan() {
                0.0
            } else if x == f32::INFINITY {
                f32::MAX
            } else if x == f32::NEG_INFINITY {
                f32::MIN
            } else {
                x
            }
        }),
    );
    cases += unary_table(
        "nan_to_num(-1, 7, -7)",
        |t| t.nan_to_num(-1.0, Some(7.0), Some(-7.0)),
        &xs,
        Tol::EXACT,
        Some(|x| {
            if x.is_nan() {
                -1.0
            } else if x == f32::INFINITY {
                7.0
            } else if x == f32::NEG_INFINITY {
                -7.0
            } else {
                x
            }
        }),
    );
    // Eager (default device) agrees.
    let e = Tensor::from(arr(&[
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        2.0,
    ]));
    assert_eq!(
        e.is_nan().to_vec::<bool>().unwrap(),
        vec![true, false, false, false, false]
    );
    assert_eq!(
        e.is_finite().to_vec::<bool>().unwrap(),
        vec![false, false, false, true, true]
    );
    assert_ieee(
        &e.nan_to_num_default().to_vec::<f32>().unwrap(),
        &[0.0, f32::MAX, f32::MIN, -0.0, 2.0],
        "eager nan_to_num_default",
    );
    cases += 15;
    // The host-only f64 dtype (eager on the host): f64's own limits.
    let d = Tensor::from(
        Array::from_vec(
            vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e300],
            &[4],
        )
        .unwrap(),
    );
    assert_eq!(
        d.is_nan().to_vec::<bool>().unwrap(),
        vec![true, false, false, false]
    );
    assert_eq!(
        d.nan_to_num_default().to_vec::<f64>().unwrap(),
        vec![0.0, f64::MAX, f64::MIN, 1e300]
    );
    cases += 8;
    println!("ieee: class predicates and nan_to_num: {cases} cases");
}

#[test]
fn casts_of_nan_inf_and_limits_follow_rust_as_on_every_device() {
    let xs = specials();
    let mut cases = 0;
    // i32 and u32 saturate, NaN gives 0 (Rust `as`, the reference's rule); bool is `x != 0`, so
    // NaN is true.
    let want = check_on_all(
        |a| {
            vec![
                a[0].cast(DType::I32),
                a[0].cast(DType::U32),
                a[0].cast(DType::Bool),
                // and back to f32 from bool: 0 or 1
                a[0].cast(DType::Bool).cast(DType::F32) * f32::INFINITY,
            ]
        },
        &[arr(&xs)],
        Tol::EXACT,
    );
    let i: Vec<i32> = xs.iter().map(|&x| x as i32).collect();
    let u: Vec<u32> = xs.iter().map(|&x| x as u32).collect();
    let b: Vec<bool> = xs.iter().map(|&x| x != 0.0).collect();
    let inf: Vec<f32> = b
        .iter()
        .map(|&b| if b { f32::INFINITY } else { f32::NAN }) // 0 * inf = NaN
        .collect();
    assert_eq!(want[0].data, HostData::I32(i.clone()), "reference cast i32");
    assert_eq!(want[1].data, HostData::U32(u), "reference cast u32");
    assert_eq!(want[2].data, HostData::Bool(b), "reference cast bool");
    assert_ieee(&f32s_of(&want[3]), &inf, "reference bool -> f32 times inf");
    // The headline values, spelled out.
    assert_eq!((i[0], i[1], i[2], i[3]), (0, 0, i32::MAX, i32::MIN));
    cases += xs.len() * 4 * 3;
    println!("ieee: casts: {cases} cases");
}

// ---- items 1, 3, 4: unary ops over the special values ----------------------------------------------

#[test]
fn unary_ops_on_special_values_match_ieee_on_every_device() {
    let xs = specials();
    let mut cases = 0;
    // Ops whose IEEE result is exact (no rounding, or one correct rounding).
    let exact: [Lit; 8] = [
        ("neg", |t| -t, |x| -x),
        ("abs", Tensor::abs, f32::abs),
        ("relu", Tensor::relu, |x| {
            if x.is_nan() { x } else { x.max(0.0) }
        }),
        ("sign", Tensor::sign, |x| {
            if x.is_nan() {
                x
            } else if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        }),
        ("floor", Tensor::floor, f32::floor),
        ("ceil", Tensor::ceil, f32::ceil),
        ("round", Tensor::round, f32::round_ties_even),
        ("square", Tensor::square, |x| x * x),
    ];
    for (name, op, ieee) in exact {
        cases += unary_table(name, op, &xs, Tol::EXACT, Some(ieee));
    }
    // Transcendentals: special values exact (NaN, ±inf, ±0 results must match), others within
    // WGSL's accuracy. sin/cos only within [-100, 100] where WGSL bounds their error.
    let trig: Vec<f32> = xs
        .iter()
        .copied()
        .filter(|x| !x.is_finite() || x.abs() <= 100.0)
        .collect();
    type Trans = (&'static str, Unary, fn(f32) -> f32, bool);
    let trans: [Trans; 8] = [
        ("sqrt", Tensor::sqrt, f32::sqrt, false),
        ("tanh", Tensor::tanh, f32::tanh, false),
        ("exp", Tensor::exp, f32::exp, false),
        ("log", Tensor::log, f32::ln, false),
        ("rsqrt", Tensor::rsqrt, |x| 1.0 / x.sqrt(), false),
        (
            "sigmoid",
            Tensor::sigmoid,
            |x| 1.0 / (1.0 + (-x).exp()),
            false,
        ),
        ("sin", Tensor::sin, f32::sin, true),
        ("cos", Tensor::cos, f32::cos, true),
    ];
    for (name, op, ieee, small) in trans {
        let v = if small { &trig } else { &xs };
        // The reference computes these in f32 with Rust's std, held to IEEE at the special points.
        let want = check_on_all(move |a| vec![op(&a[0])], &[arr(v)], Tol::TRANS);
        let got = f32s_of(&want[0]);
        for (x, g) in v.iter().zip(&got) {
            let w = ieee(*x);
            if !w.is_finite() || w == 0.0 {
                assert!(
                    same_bits(*g, w),
                    "reference {name}({x:?}) = {g:?}, IEEE {w:?}"
                );
            }
        }
        cases += v.len() * 3;
    }
    // The reported bug: tanh(NaN) was -1 (clamp(NaN, -9, 9) gives -9 on Mesa).
    let want = check_on_all(
        |a| vec![a[0].tanh()],
        &[arr(&[f32::NAN, 1e30, -1e30])],
        Tol::EXACT,
    );
    assert_ieee(
        &f32s_of(&want[0]),
        &[f32::NAN, 1.0, -1.0],
        "tanh(NaN), tanh(±1e30)",
    );
    cases += 9;
    println!("ieee: unary ops: {cases} cases");
}

// ---- items 1, 4: binary ops over all pairs ------------------------------------------------------

#[test]
fn binary_ops_on_all_pairs_of_special_values_match_ieee_on_every_device() {
    let v = pair_values();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for &x in &v {
        for &y in &v {
            a.push(x);
            b.push(y);
        }
    }
    let (aa, bb) = (arr(&a), arr(&b));
    let mut cases = 0;
    type Bin = (&'static str, BinaryFn, fn(f32, f32) -> f32, Tol);
    let ops: [Bin; 7] = [
        ("add", Tensor::add, |x, y| x + y, Tol::EXACT),
        ("sub", Tensor::sub, |x, y| x - y, Tol::EXACT),
        ("mul", Tensor::mul, |x, y| x * y, Tol::EXACT),
        ("div", Tensor::div, |x, y| x / y, Tol::ARITH),
        ("rem", Tensor::rem, |x, y| x % y, Tol::EXACT),
        ("maximum", Tensor::maximum, nan_max, Tol::EXACT),
        ("minimum", Tensor::minimum, nan_min, Tol::EXACT),
    ];
    for (name, op, ieee, tol) in ops {
        let want = check_on_all(
            move |t| vec![op(&t[0], &t[1])],
            &[aa.clone(), bb.clone()],
            tol,
        );
        let got = f32s_of(&want[0]);
        let w: Vec<f32> = a.iter().zip(&b).map(|(&x, &y)| ieee(x, y)).collect();
        // maximum(-0, 0) may give either zero (IEEE leaves it open): compare zeros by value.
        for (k, (g, w)) in got.iter().zip(&w).enumerate() {
            let ok = same_bits(*g, *w) || (*g == 0.0 && *w == 0.0 && name.starts_with('m'));
            assert!(
                ok,
                "reference {name}({:?}, {:?}) = {g:?}, IEEE {w:?}",
                a[k], b[k]
            );
        }
        cases += a.len() * 3;
    }
    // pow: C/IEEE special cases (pow(x, 0) = 1 and pow(1, y) = 1 even for NaN, zeros and
    // infinities by sign and parity), approximate elsewhere.
    let want = check_on_all(
        |t| vec![t[0].pow(&t[1])],
        &[aa.clone(), bb.clone()],
        Tol::TRANS,
    );
    for (k, g) in f32s_of(&want[0]).iter().enumerate() {
        let w = a[k].powf(b[k]);
        if !w.is_finite() || w == 0.0 || w == 1.0 {
            assert!(
                same_bits(*g, w),
                "reference pow({:?}, {:?}) = {g:?}, IEEE {w:?}",
                a[k],
                b[k]
            );
        }
    }
    assert_eq!(f32s_of(&want[0])[v.len() * 5], 1.0, "pow(1, NaN) = 1");
    cases += a.len() * 3;
    // Comparisons: every ordered comparison with NaN is false, `ne` is true.
    type Cmp = (&'static str, BinaryFn, fn(f32, f32) -> bool);
    let cmps: [Cmp; 6] = [
        ("eq", Tensor::eq, |x, y| x == y),
        ("ne", Tensor::ne, |x, y| x != y),
        ("lt", Tensor::lt, |x, y| x < y),
        ("le", Tensor::le, |x, y| x <= y),
        ("gt", Tensor::gt, |x, y| x > y),
        ("ge", Tensor::ge, |x, y| x >= y),
    ];
    for (name, op, ieee) in cmps {
        let want = check_on_all(
            move |t| vec![op(&t[0], &t[1])],
            &[aa.clone(), bb.clone()],
            Tol::EXACT,
        );
        let w: Vec<bool> = a.iter().zip(&b).map(|(&x, &y)| ieee(x, y)).collect();
        assert_eq!(want[0].data, HostData::Bool(w), "reference {name}");
        cases += a.len() * 3;
    }
    println!("ieee: binary ops: {cases} cases");
}

// ---- item 2: literal zeros and infinities inside jit -----------------------------------------------

#[test]
fn literal_zeros_and_infinities_inside_jit_are_not_folded() {
    let xs = specials();
    let mut cases = 0;
    // x op literal and literal op x: Mesa folds x * 0.0 and 0.0 / x to 0 and drops the store of
    // x / 0.0 when the literal is a shader constant.
    let lits: [Lit; 14] = [
        ("x / 0", |t| t / 0.0, |x| x / 0.0),
        ("x / -0", |t| t / -0.0, |x| x / -0.0),
        ("x * 0", |t| t * 0.0, |x| x * 0.0),
        ("x * -0", |t| t * -0.0, |x| x * -0.0),
        ("0 / x", |t| 0.0 / t, |x| 0.0 / x),
        ("0 * x", |t| 0.0 * t, |x| 0.0 * x),
        ("x * inf", |t| t * f32::INFINITY, |x| x * f32::INFINITY),
        ("x + inf", |t| t + f32::INFINITY, |x| x + f32::INFINITY),
        ("x - inf", |t| t - f32::INFINITY, |x| x - f32::INFINITY),
        ("x * NaN", |t| t * f32::NAN, |x| x * f32::NAN),
        ("x + 0", |t| t + 0.0, |x| x + 0.0),
        ("x - 0", |t| t - 0.0, |x| x - 0.0),
        ("x + -0", |t| t + -0.0, |x| x + -0.0),
        ("inf / x", |t| f32::INFINITY / t, |x| f32::INFINITY / x),
    ];
    for (name, op, ieee) in lits {
        cases += unary_table(name, op, &xs, Tol::EXACT, Some(ieee));
    }
    // Constants combined with constants (both sides folded by the driver if inlined).
    let want = check_on_all(
        |a| {
            let z = Tensor::zeros(a[0].shape(), DType::F32);
            let inf = Tensor::full(f32::INFINITY, a[0].shape());
            vec![
                &z / &z,
                &inf * &z,
                &inf - &inf,
                &z * &a[0],
                // a zero from a bool cast, times inf
                a[0].gt(&z).cast(DType::F32) * f32::INFINITY,
            ]
        },
        &[arr(&xs)],
        Tol::EXACT,
    );
    let n = xs.len();
    assert_ieee(&f32s_of(&want[0]), &vec![f32::NAN; n], "0 / 0");
    assert_ieee(&f32s_of(&want[1]), &vec![f32::NAN; n], "inf * 0");
    assert_ieee(&f32s_of(&want[2]), &vec![f32::NAN; n], "inf - inf");
    let w: Vec<f32> = xs.iter().map(|&x| 0.0 * x).collect();
    assert_ieee(&f32s_of(&want[3]), &w, "zeros * x");
    let w: Vec<f32> = xs
        .iter()
        .map(|&x| if x > 0.0 { f32::INFINITY } else { f32::NAN })
        .collect();
    assert_ieee(&f32s_of(&want[4]), &w, "(x > 0) as f32 * inf");
    cases += n * 5 * 3;
    // The exact reports: [1, -1, 0] / 0.0 and a six-element version, on each device.
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let j = jit(|a: &[Tensor]| vec![&a[0] / 0.0]).on(&dev);
        let got = host(&j.call(&[arr(&[1.0, -1.0, 0.0])]).unwrap()[0]);
        assert_ieee(
            &f32s_of(&got),
            &[f32::INFINITY, f32::NEG_INFINITY, f32::NAN],
            dev.name(),
        );
        let six = [1.0, -1.0, 0.0, f32::INFINITY, f32::NAN, -2.0];
        let got = host(&j.call(&[arr(&six)]).unwrap()[0]);
        let w = [
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::INFINITY,
            f32::NAN,
            f32::NEG_INFINITY,
        ];
        assert_ieee(&f32s_of(&got), &w, dev.name());
        cases += 9;
    }
    // Eagerly too (the default device).
    let e = Tensor::from(arr(&[1.0, -1.0, 0.0])) / 0.0;
    assert_ieee(
        &e.to_vec::<f32>().unwrap(),
        &[f32::INFINITY, f32::NEG_INFINITY, f32::NAN],
        "eager [1, -1, 0] / 0",
    );
    cases += 3;
    println!("ieee: literals inside jit: {cases} cases");
}

// ---- item 4: NaN through reductions and argmax/argmin ----------------------------------------------

/// Rows with NaN at the start, middle, end, twice, none; infinities; all equal.
fn nan_rows(c: usize) -> Vec<Vec<f32>> {
    let base: Vec<f32> = (0..c).map(|i| ((i * 7919) % 13) as f32 - 6.0).collect();
    let with = |pos: &[usize], v: f32| {
        let mut r = base.clone();
        for &p in pos {
            r[p] = v;
        }
        r
    };
    vec![
        base.clone(),
        with(&[0], f32::NAN),
        with(&[c / 2], f32::NAN),
        with(&[c - 1], f32::NAN),
        with(&[c / 3, c - 2], f32::NAN),
        with(&[1, c / 2], f32::INFINITY),
        with(&[1, c / 2], f32::NEG_INFINITY),
        {
            let mut r = with(&[0], f32::INFINITY);
            r[c - 1] = f32::NEG_INFINITY; // sum: inf + -inf = NaN
            r
        },
        vec![f32::NEG_INFINITY; c],
        vec![-0.0; c],
    ]
}

fn first_nan_or(row: &[f32], better: fn(f32, f32) -> bool) -> i32 {
    if let Some(i) = row.iter().position(|x| x.is_nan()) {
        return i as i32;
    }
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if better(x, row[best]) {
            best = i;
        }
    }
    best as i32
}

#[test]
fn reductions_and_argreductions_propagate_nan_like_jnp_on_every_device() {
    let mut cases = 0;
    // 5 and 300 columns use the one-pass kernel; 5000 columns with few rows the cooperative one.
    for c in [5usize, 300, 5000] {
        let rows = nan_rows(c);
        let r = rows.len();
        let flat: Vec<f32> = rows.concat();
        let x = Array::from_vec(flat, &[r, c]).unwrap();
        let want = check_on_all(
            |a| {
                vec![
                    a[0].max(1, false),
                    a[0].min(1, false),
                    a[0].argmax(1, false),
                    a[0].argmin(1, false),
                    a[0].sum(1, false),
                ]
            },
            std::slice::from_ref(&x),
            Tol::REDUCE,
        );
        let fold = |f: fn(f32, f32) -> f32, init: f32| -> Vec<f32> {
            rows.iter()
                .map(|row| row.iter().fold(init, |a, &b| f(a, b)))
                .collect()
        };
        assert_ieee(
            &f32s_of(&want[0]),
            &fold(nan_max, f32::NEG_INFINITY),
            "reference max",
        );
        assert_ieee(
            &f32s_of(&want[1]),
            &fold(nan_min, f32::INFINITY),
            "reference min",
        );
        let am: Vec<i32> = rows
            .iter()
            .map(|row| first_nan_or(row, |x, b| x > b))
            .collect();
        let an: Vec<i32> = rows
            .iter()
            .map(|row| first_nan_or(row, |x, b| x < b))
            .collect();
        assert_eq!(
            want[2].data,
            HostData::I32(am),
            "reference argmax ({c} columns)"
        );
        assert_eq!(
            want[3].data,
            HostData::I32(an),
            "reference argmin ({c} columns)"
        );
        // Sums: NaN in, NaN out; inf + -inf = NaN; a row of -0.0 sums to -0.0 only if the
        // accumulation starts at -0: JAX (and XLA) start at +0, so +0.0.
        let sums = f32s_of(&want[4]);
        assert!(sums[1].is_nan() && sums[7].is_nan() && sums[5] == f32::INFINITY);
        assert!(
            same_bits(sums[9], 0.0),
            "sum of -0.0s is +0.0, got {:?}",
            sums[9]
        );
        cases += r * 5 * 3;
    }
    // A max over all axes of a 2-D array with one NaN.
    let mut v = vec![1.0f32; 64];
    v[37] = f32::NAN;
    let x = Array::from_vec(v, &[8, 8]).unwrap();
    let want = check_on_all(
        |a| vec![a[0].max(brigade::Axes::All, false), a[0].min(0, false)],
        &[x],
        Tol::EXACT,
    );
    assert!(f32s_of(&want[0])[0].is_nan());
    assert!(f32s_of(&want[1])[37 % 8].is_nan());
    cases += 9 * 3;
    println!("ieee: reductions: {cases} cases");
}

#[test]
fn pmax_and_pmin_propagate_nan_on_a_vulkan_gl_mesh() {
    let devs = gpu_devices();
    let n = devs.len();
    assert!(n >= 2, "a mesh of two adapters");
    // Shard k has NaN at column k, ±inf and zeros elsewhere.
    let cols = 6;
    let mut v = Vec::new();
    for k in 0..n {
        for c in 0..cols {
            v.push(match (c, k) {
                (c, k) if c == k => f32::NAN,
                (2, _) => f32::INFINITY * if k == 0 { 1.0 } else { -1.0 },
                (3, _) => {
                    if k == 0 {
                        -0.0
                    } else {
                        0.0
                    }
                }
                (c, k) => (c * 3 + k) as f32 - 5.0,
            });
        }
    }
    let x = Array::from_vec(v.clone(), &[n, cols]).unwrap();
    let f = pmap(|a: &[Tensor]| vec![pmax(&a[0], "i"), pmin(&a[0], "i")])
        .axis_name("i")
        .devices(&devs);
    let _guards: Vec<_> = devs.iter().filter_map(device_guard).collect();
    let out = f.call(&[x]).unwrap();
    let (mx, mn) = (host(&out[0]), host(&out[1]));
    let col = |c: usize| (0..n).map(|k| v[k * cols + c]).collect::<Vec<f32>>();
    let want_max: Vec<f32> = (0..cols)
        .map(|c| col(c).into_iter().fold(f32::NEG_INFINITY, nan_max))
        .collect();
    let want_min: Vec<f32> = (0..cols)
        .map(|c| col(c).into_iter().fold(f32::INFINITY, nan_min))
        .collect();
    let (gmax, gmin) = (f32s_of(&mx), f32s_of(&mn));
    for d in 0..n {
        for c in 0..cols {
            let (g, w) = (gmax[d * cols + c], want_max[c]);
            assert!(
                same_bits(g, w) || (g == 0.0 && w == 0.0),
                "pmax device {d} col {c}: {g:?} vs {w:?}"
            );
            let (g, w) = (gmin[d * cols + c], want_min[c]);
            assert!(
                same_bits(g, w) || (g == 0.0 && w == 0.0),
                "pmin device {d} col {c}: {g:?} vs {w:?}"
            );
        }
    }
    assert!(want_max[0].is_nan() && want_min[1].is_nan());
    println!("ieee: pmax/pmin: {} cases", 2 * n * cols);
}

// ---- item 5: empty reductions ---------------------------------------------------------------

#[test]
fn empty_reductions_sum_to_plus_zero_and_max_is_an_error() {
    let mut cases = 0;
    let x = Array::from_vec(Vec::<f32>::new(), &[3, 0]).unwrap();
    // Sum over the empty axis: +0.0 (not -0.0), prod 1; logsumexp -inf (initial=-inf, as JAX).
    let want = check_on_all(
        |a| {
            vec![
                a[0].sum(1, false),
                a[0].prod(1, false),
                a[0].max_initial(1, false, -5.0f32),
                a[0].min_initial(1, false, f32::INFINITY),
                a[0].logsumexp(1, false),
                a[0].softmax(1),
            ]
        },
        std::slice::from_ref(&x),
        Tol::EXACT,
    );
    assert_ieee(&f32s_of(&want[0]), &[0.0; 3], "empty sum is +0.0");
    assert_ieee(&f32s_of(&want[1]), &[1.0; 3], "empty prod is 1");
    assert_ieee(&f32s_of(&want[2]), &[-5.0; 3], "empty max_initial");
    assert_ieee(&f32s_of(&want[3]), &[f32::INFINITY; 3], "empty min_initial");
    assert_ieee(
        &f32s_of(&want[4]),
        &[f32::NEG_INFINITY; 3],
        "empty logsumexp",
    );
    assert_eq!(want[5].shape, vec![3, 0]);
    cases += 6 * 3;
    // On devices too the sum is +0.0 bit for bit (check_on_all compares zeros by value only).
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let j = jit(|a: &[Tensor]| vec![a[0].sum(1, false), a[0].sum(Axes::All, false)]).on(&dev);
        let out = j.call(std::slice::from_ref(&x)).unwrap();
        assert_ieee(&f32s_of(&host(&out[0])), &[0.0; 3], dev.name());
        assert_ieee(&f32s_of(&host(&out[1])), &[0.0], dev.name());
        cases += 2;
    }
    // max_initial with data: the initial value takes part; NaN still propagates.
    let y = arr(&[1.0, f32::NAN, 3.0]);
    let want = check_on_all(
        |a| {
            let r = a[0].reshape(&[1, 3]);
            vec![
                r.max_initial(1, false, 10.0f32),
                r.slice_axis(1, 0, 1).max_initial(1, false, 10.0f32),
            ]
        },
        &[y],
        Tol::EXACT,
    );
    assert!(f32s_of(&want[0])[0].is_nan());
    assert_eq!(f32s_of(&want[1]), vec![10.0]);
    cases += 2 * 3;
    // max/min over an empty axis: a typed error naming the shape, the axis and the fix; eagerly,
    // under jit, on i32 as on f32, and for every reduced axis set that includes the empty axis.
    let xi = Array::from_vec(Vec::<i32>::new(), &[0, 4]).unwrap();
    let calls: Vec<(&str, Array, Unary)> = vec![
        ("max axis 1", x.clone(), |t| t.max(1, false)),
        ("min axis -1", x.clone(), |t| t.min(-1, true)),
        ("max all", x.clone(), |t| t.max(Axes::All, false)),
        ("max i32 axis 0", xi.clone(), |t| t.max(0, false)),
        ("min i32 all", xi.clone(), |t| t.min(Axes::All, false)),
    ];
    for (what, a, op) in calls {
        let eager = op(&Tensor::from(a.clone()));
        let e = eager
            .error()
            .cloned()
            .unwrap_or_else(|| panic!("{what}: no error eagerly"));
        check_empty_error(&e, what, a.shape());
        let traced = jit(move |t: &[Tensor]| vec![op(&t[0])]).call(std::slice::from_ref(&a));
        let e = traced.expect_err(&format!("{what}: no error under jit"));
        check_empty_error(&e, what, a.shape());
        cases += 2;
    }
    // Reducing a non-empty axis of an array with another, empty, axis is fine (empty result).
    let ok = Tensor::from(x.clone()).max(0, false);
    assert!(
        ok.error().is_none(),
        "max over the non-empty axis 0 of [3, 0]"
    );
    assert_eq!(ok.shape(), &[0]);
    cases += 1;
    println!("ieee: empty reductions: {cases} cases");
}

use brigade::Axes;

fn check_empty_error(e: &Error, what: &str, shape: &[usize]) {
    match e {
        Error::BadShapeArg { shape: s, .. } => {
            assert_eq!(s, shape, "{what}: the error names the shape");
            let msg = e.to_string();
            assert!(
                msg.contains("size 0") && msg.contains("_initial"),
                "{what}: {msg}"
            );
        }
        other => panic!("{what}: expected BadShapeArg, got {other:?}"),
    }
}

// ---- transforms: vmap and grad of the new ops ---------------------------------------------------

#[test]
fn is_nan_and_nan_to_num_under_vmap_and_grad() {
    let mut cases = 0;
    let xs = specials();
    let n = xs.len();
    // vmap over rows of a [2, n] batch (second row reversed).
    let mut b = xs.clone();
    b.extend(xs.iter().rev());
    let batch = Array::from_vec(b.clone(), &[2, n]).unwrap();
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let f = vmap(|a: &[Tensor]| {
            vec![
                a[0].is_nan(),
                a[0].nan_to_num_default(),
                a[0].maximum(&a[0].slice_axis(0, 0, 1).broadcast_to(a[0].shape())),
            ]
        })
        .on(&dev);
        let out = f.call(std::slice::from_ref(&batch)).unwrap();
        let nans: Vec<bool> = b.iter().map(|x| x.is_nan()).collect();
        assert_eq!(
            host(&out[0]).data,
            HostData::Bool(nans),
            "vmap is_nan on {}",
            dev.name()
        );
        let fixed: Vec<f32> = b
            .iter()
            .map(|&x| {
                if x.is_nan() {
                    0.0
                } else {
                    x.clamp(f32::MIN, f32::MAX)
                }
            })
            .collect();
        assert_ieee(
            &f32s_of(&host(&out[1])),
            &fixed,
            &format!("vmap nan_to_num on {}", dev.name()),
        );
        // Row r: maximum(x, x[0] of that row): row 0 starts with NaN, so all NaN; row 1 starts
        // with 4294967296.0.
        let m = f32s_of(&host(&out[2]));
        assert!(m[..n].iter().all(|v| v.is_nan()), "vmap maximum row 0");
        let w: Vec<f32> = b[n..].iter().map(|&x| nan_max(x, b[n])).collect();
        assert_ieee(&m[n..], &w, "vmap maximum row 1");
        cases += 3 * 2 * n;
    }
    // grad: the cotangent passes where x is finite, 0 where it is NaN or ±inf (the selects'
    // rule), and is_nan has no derivative (it does not change the gradient of what it guards).
    let x = arr(&xs);
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let loss = |a: &[Tensor]| vec![(&a[0].nan_to_num_default() * 3.0).sum_all()];
        let g = grad(loss).on(&dev).call(std::slice::from_ref(&x)).unwrap();
        let w: Vec<f32> = xs
            .iter()
            .map(|x| if x.is_finite() { 3.0 } else { 0.0 })
            .collect();
        assert_ieee(
            &f32s_of(&host(&g[0])),
            &w,
            &format!("grad of nan_to_num on {}", dev.name()),
        );
        cases += n;
    }
    // max/min VJPs on finite data still split ties and pick the winner.
    let a = arr(&[1.0, 2.0, 3.0, -1.0]);
    let b2 = arr(&[2.0, 2.0, 1.0, -1.0]);
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let g = grad(|t: &[Tensor]| vec![t[0].maximum(&t[1]).sum_all()])
            .argnums(&[0, 1])
            .on(&dev)
            .call(&[a.clone(), b2.clone()])
            .unwrap();
        assert_eq!(f32s_of(&host(&g[0])), vec![0.0, 0.5, 1.0, 0.5]);
        assert_eq!(f32s_of(&host(&g[1])), vec![1.0, 0.5, 0.0, 0.5]);
        cases += 8;
    }
    println!("ieee: transforms: {cases} cases");
}

// ---- integer division and remainder by zero (XLA's rule: x / 0 = -1, x % 0 = x) -------------------

#[test]
fn integer_division_by_zero_and_overflow_follow_the_documented_rule_on_every_device() {
    let v = [0i32, 1, -1, 7, -7, i32::MAX, i32::MIN];
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for &x in &v {
        for &y in &v {
            a.push(x);
            b.push(y);
        }
    }
    let n = a.len();
    let (aa, bb) = (
        Array::from_vec(a.clone(), &[n]).unwrap(),
        Array::from_vec(b.clone(), &[n]).unwrap(),
    );
    let want = check_on_all(
        |t| {
            vec![
                &t[0] / &t[1],
                t[0].rem(&t[1]),
                t[0].maximum(&t[1]),
                t[0].ne(&t[1]),
            ]
        },
        &[aa, bb],
        Tol::EXACT,
    );
    // lax.div / lax.rem truncate toward zero; by zero the quotient is -1 (all bits set) and the
    // remainder the dividend, as XLA defines them; i32::MIN / -1 (which overflows) is i32::MIN,
    // remainder 0 (tests/jax_semantics.rs checks the same against JAX's own numbers).
    let overflow = |x: i32, y: i32| x == i32::MIN && y == -1;
    let div: Vec<i32> = a
        .iter()
        .zip(&b)
        .map(|(&x, &y)| match y {
            0 => -1,
            _ if overflow(x, y) => x,
            _ => x / y,
        })
        .collect();
    let rem: Vec<i32> = a
        .iter()
        .zip(&b)
        .map(|(&x, &y)| match y {
            0 => x,
            _ if overflow(x, y) => 0,
            _ => x % y,
        })
        .collect();
    let max: Vec<i32> = a.iter().zip(&b).map(|(&x, &y)| x.max(y)).collect();
    let ne: Vec<bool> = a.iter().zip(&b).map(|(&x, &y)| x != y).collect();
    assert_eq!(want[0].data, HostData::I32(div), "reference i32 div");
    assert_eq!(want[1].data, HostData::I32(rem), "reference i32 rem");
    assert_eq!(want[2].data, HostData::I32(max), "reference i32 max");
    assert_eq!(want[3].data, HostData::Bool(ne), "reference i32 ne");
    // u32: x / 0 = u32::MAX, x % 0 = x.
    let u = [0u32, 1, 7, u32::MAX];
    let (mut ua, mut ub) = (Vec::new(), Vec::new());
    for &x in &u {
        for &y in &u {
            ua.push(x);
            ub.push(y);
        }
    }
    let m = ua.len();
    let want = check_on_all(
        |t| vec![&t[0] / &t[1], t[0].rem(&t[1])],
        &[
            Array::from_vec(ua.clone(), &[m]).unwrap(),
            Array::from_vec(ub.clone(), &[m]).unwrap(),
        ],
        Tol::EXACT,
    );
    let div: Vec<u32> = ua
        .iter()
        .zip(&ub)
        .map(|(&x, &y)| x.checked_div(y).unwrap_or(u32::MAX))
        .collect();
    let rem: Vec<u32> = ua
        .iter()
        .zip(&ub)
        .map(|(&x, &y)| x.checked_rem(y).unwrap_or(x))
        .collect();
    assert_eq!(want[0].data, HostData::U32(div), "reference u32 div");
    assert_eq!(want[1].data, HostData::U32(rem), "reference u32 rem");
    println!("ieee: integer div/rem: {} cases", (4 * n + 2 * m) * 3);
}

// ---- NaN through batched reductions --------------------------------------------------------------

#[test]
fn batched_reductions_propagate_nan_per_example() {
    // vmap over 3 examples of [4, 5]: example 1 has a NaN, example 2 a +inf and a -inf.
    let mut v: Vec<f32> = (0..60).map(|i| (i % 11) as f32 - 5.0).collect();
    v[20 + 7] = f32::NAN;
    v[40 + 2] = f32::INFINITY;
    v[40 + 13] = f32::NEG_INFINITY;
    let x = Array::from_vec(v.clone(), &[3, 4, 5]).unwrap();
    let mut cases = 0;
    let f = |a: &[Tensor]| {
        vec![
            a[0].max(Axes::All, false),
            a[0].min(1, false),
            a[0].argmax(1, false),
            a[0].argmin(0, false),
            a[0].sum(Axes::All, false),
            a[0].logsumexp(1, false),
        ]
    };
    let want = common::batching::check_vmap(
        "nan reductions",
        f,
        &[Some(0)],
        &[Some(0)],
        &[x],
        Tol::REDUCE,
    );
    let mx = f32s_of(&want[0]);
    assert!(
        !mx[0].is_nan() && mx[1].is_nan() && mx[2] == f32::INFINITY,
        "{mx:?}"
    );
    let s = f32s_of(&want[4]);
    assert!(
        s[1].is_nan() && s[2].is_nan(),
        "NaN and inf + -inf sums: {s:?}"
    );
    // Example 1, row 1 holds the NaN at column 2: argmax along axis 1 (columns) of that row is 2.
    match &want[2].data {
        HostData::I32(am) => assert_eq!(am[4 + 1], 2, "argmax picks the NaN's column"),
        d => panic!("{d:?}"),
    }
    cases += 3 * 6 * 3;
    println!("ieee: batched reductions: {cases} cases");
}

// ---- NaN and inf through matmul ------------------------------------------------------------

#[test]
fn matmul_propagates_nan_and_inf_times_zero_on_every_device() {
    // Small magnitudes only (no overflow that depends on the summation order), with NaN, ±inf
    // and zeros placed so that some outputs see inf * 0, some inf + -inf, some nothing special.
    let vals = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.5,
        -2.0,
        0.25,
    ];
    let mut cases = 0;
    // 8 x 8 times 8 x 8 (the vec4 kernel) and 5 x 7 times 7 x 3 (the generic one).
    for (m, k, n) in [(8usize, 8usize, 8usize), (5, 7, 3)] {
        let a: Vec<f32> = (0..m * k)
            .map(|i| {
                if i % 5 == 0 {
                    vals[(i / 5) % 8]
                } else {
                    (i % 7) as f32 - 3.0
                }
            })
            .collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| {
                if i % 6 == 0 {
                    vals[(i / 6 + 3) % 8]
                } else {
                    (i % 4) as f32 - 1.5
                }
            })
            .collect();
        let want = check_on_all(
            |t| vec![t[0].matmul(&t[1])],
            &[
                Array::from_vec(a.clone(), &[m, k]).unwrap(),
                Array::from_vec(b.clone(), &[k, n]).unwrap(),
            ],
            Tol::REDUCE,
        );
        // The reference agrees with the IEEE sum of products (f64 is exact for these values).
        let got = f32s_of(&want[0]);
        for i in 0..m {
            for j in 0..n {
                let w: f64 = (0..k)
                    .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                    .sum();
                let g = got[i * n + j];
                assert!(
                    same_bits(g, w as f32) || (g == 0.0 && w == 0.0),
                    "({i}, {j}): {g} vs {w}"
                );
            }
        }
        assert!(got.iter().any(|v| v.is_nan()) && got.iter().any(|v| v.is_infinite()));
        cases += m * n * 3;
    }
    println!("ieee: matmul: {cases} cases");
}
