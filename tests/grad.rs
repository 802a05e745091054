//! Reverse-mode differentiation: `grad`, `value_and_grad`, `vjp`.
//!
//! Every primitive's VJP rule is checked against central finite differences in f64: the loss is
//! `sum(op(x) * r)` with a fixed pseudo-random `r` (so every output element matters), its f32
//! gradient is computed by `grad(..).on(vulkan).call`, and the differences
//! `(L(x + eps e_i) - L(x - eps e_i)) / (2 eps)` evaluate the same loss closure with its f32
//! arguments widened (exactly) to f64, by `jit(loss)` on the `cpu` device (`cpu:1` layout), whose
//! reference interpreter computes `DType::F64` in f64. Constants the closures build in f32 (the
//! weights `r`, literals, pad values) are widened exactly by dtype promotion, so both sides
//! differentiate the same function.
//!
//! Tolerance [`FD`]: `|grad - fd| <= 1e-5 + 1e-5 * |fd|`, from the two error sources.
//! - The f64 differences, eps = 1e-5: truncation `eps^2 / 6 * |d^3 L|` with `|d^3 L| <= ~800` on
//!   the domains used (the largest: pow with base 0.5 and exponent -2, `b (b-1) (b-2) a^(b-3)` =
//!   768; rsqrt at 0.3: 127), i.e. <= 1.3e-8; plus the rounding of L (a few f64 ulps of at most
//!   ~100 summed terms, ~1e-14) divided by 2 eps: ~5e-10. So the differences are exact to ~2e-8,
//!   three orders below the tolerance: the check measures the f32 gradient alone. (eps = 1e-5 is
//!   near the optimum `(3 * rounding / |d^3 L|)^(1/3)`; inputs are kept away from kinks by far more
//!   than eps: relu/abs/sign at 0, max/min/argmax near-ties, rem near a/b integer, log/sqrt/rsqrt/pow
//!   near 0.)
//! - The f32 gradient: each term of a gradient element passes through at most ~10 f32 roundings of
//!   at most ~4 ulps each (arithmetic is correctly rounded; lavapipe's transcendentals are within a
//!   few ulps, see `Tol::TRANS`), ~2.4e-6 relative, and the terms of one element cancel by at most
//!   a few times on this data: `|grad - exact| <= 1e-5 * (1 + |grad|)`. Measured on lavapipe, the
//!   worst cases over every check here are 6.3e-7 absolute (broadcast_in_dim into exp, |fd| up to
//!   5) and 2e-7 relative to 1 + |fd| (log_softmax): a 50x margin. The linear rules (add, sum,
//!   layout ops) agree to 1e-11.
//!
//! A wrong rule (a lost term, factor or sign) is off by O(|grad|), far outside. Ties (max/min, both
//! binary and reductions) are compared with the analytic even split instead, and GPU-vs-reference
//! gradients use `Tol::REDUCE`.

mod common;

use brigade::ops::DotDims;
use brigade::{
    Array, DType, Device, Error, HostArray, TakeMode, Tensor, all_gather, all_to_all, grad, jit,
    pmap, pmax, pmean, ppermute, psum, psum_scatter, select, value_and_grad, vjp, vmap,
};
use common::fd::{EPS, assert_fd, central_diff, vals64, widen};
use common::*;

/// f32 gradient vs f64 central differences (derived in the module comment): 1e-5 relative,
/// 1e-5 absolute.
/// Analytic expectations involving GPU transcendentals (sin, cos, tanh) and short sums: well above
/// their few-ulp errors, far below any wrong formula.
const ANALYTIC: Tol = Tol {
    rtol: 1e-4,
    atol: 1e-5,
};

// ---- helpers ------------------------------------------------------------------------------------

type Loss = Box<dyn Fn(&[Tensor]) -> Vec<Tensor>>;
type UnaryFn = fn(&Tensor) -> Tensor;
/// Per-device expected gradients from per-device inputs and weights (host values).
type Want<'a> = dyn Fn(&[Vec<f32>], &[Vec<f32>]) -> Vec<Vec<f32>> + 'a;

/// The reference-interpreter device.
fn cpu() -> Device {
    devices_with("cpu:1")[0].clone()
}

fn vulkan() -> Device {
    device_of("vulkan")
}

fn vals(a: &Array) -> Vec<f32> {
    host(a).to_vec::<f32>().unwrap()
}

fn hvals(h: &HostArray) -> Vec<f32> {
    h.to_vec::<f32>().unwrap()
}

fn arr(v: Vec<f32>, shape: &[usize]) -> Array {
    Array::from_vec(v, shape).unwrap()
}

fn iarr(v: Vec<i32>, shape: &[usize]) -> Array {
    Array::from_vec(v, shape).unwrap()
}

/// The weights `r` of `sum(y * r)` for an output of `shape`, on the host (in [-1, 1)).
fn weights_host(shape: &[usize], seed: u64) -> Vec<f32> {
    f32s(numel(shape), seed, -1.0, 1.0)
}

/// `sum(y * r)` with `r = weights_host(y.shape(), seed)`: every element of `y` matters.
fn weighted_sum(y: &Tensor, seed: u64) -> Tensor {
    let r = Tensor::from_vec(weights_host(y.shape(), seed), y.shape());
    (y * &r).sum_all()
}

/// The scalar loss `sum(op(args) * r)`.
fn weighted(op: impl Fn(&[Tensor]) -> Tensor + 'static, seed: u64) -> Loss {
    Box::new(move |a: &[Tensor]| vec![weighted_sum(&op(a), seed)])
}

/// `n` values with magnitudes in `[lo, hi)` and both signs (at least `lo` away from zero).
fn signed(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mag = f32s(n, seed, lo, hi);
    let sign = bools(n, seed.wrapping_add(7919));
    mag.into_iter()
        .zip(sign)
        .map(|(m, s)| if s { m } else { -m })
        .collect()
}

/// `n` distinct values spaced `min(0.25, 3 / n)` apart (a shuffled arithmetic sequence around 0,
/// shifted off zero): no near-ties within the finite-difference step.
fn distinct(n: usize, seed: u64) -> Vec<f32> {
    let mut idx: Vec<usize> = (0..n).collect();
    let mut r = Lcg::new(seed);
    for i in (1..n).rev() {
        let j = r.next_u32() as usize % (i + 1);
        idx.swap(i, j);
    }
    let step = (3.0 / n as f32).min(0.25);
    idx.iter()
        .map(|&k| (k as f32 - n as f32 / 2.0) * step + 0.05)
        .collect()
}

/// `grad(loss).argnums(argnums)` on the Vulkan device against central differences of `loss` on
/// the reference, for every argument in `argnums`. Returns the gradients (host).
fn check_fd(
    name: &str,
    loss: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
    args: &[Array],
    argnums: &[usize],
) -> Vec<HostArray> {
    let dev = vulkan();
    let g = grad(loss)
        .argnums(argnums)
        .on(&dev)
        .call(args)
        .unwrap_or_else(|e| panic!("{name}: grad failed: {e}"));
    assert_eq!(g.len(), argnums.len(), "{name}: one gradient per argnum");
    let mut out = Vec::new();
    for (gk, &k) in g.iter().zip(argnums) {
        assert_eq!(gk.shape(), args[k].shape(), "{name}: shape of d/d arg {k}");
        assert_eq!(gk.dtype(), DType::F32, "{name}: dtype of d/d arg {k}");
        let fd = central_diff(loss, args, k);
        assert!(
            fd.iter().any(|v| v.abs() > 1e-2),
            "{name}: the finite differences w.r.t. argument {k} are all ~0: the check would be vacuous"
        );
        let h = host(gk);
        assert_fd(
            &h,
            &fd,
            &format!("{name}: d/d arg {k} on vulkan vs f64 central differences"),
        );
        out.push(h);
    }
    out
}

/// Unary op cases: `check_fd` of `sum(op(x) * r)` for x of shape [3, 4] in the op's domain.
fn check_unary(name: &str, op: UnaryFn, x: Vec<f32>, seed: u64) {
    let loss = weighted(move |a| op(&a[0]), seed);
    check_fd(name, &loss, &[arr(x, &[3, 4])], &[0]);
}

/// Output position of input element `i` of `shape` after reducing `axes` (flattened).
fn reduced_index(i: usize, shape: &[usize], axes: &[usize]) -> usize {
    let idx = brigade::host::unravel(i, shape);
    let mut o = 0;
    for (a, (&ix, &d)) in idx.iter().zip(shape).enumerate() {
        if !axes.contains(&a) {
            o = o * d + ix;
        }
    }
    o
}

// ---- 1. every VJP rule against central differences ------------------------------------------------

#[test]
fn unary_rules_match_finite_differences() {
    let n = 12;
    check_unary("neg", |x| -x, f32s(n, 1, -2.0, 2.0), 101);
    check_unary("abs", Tensor::abs, signed(n, 2, 0.2, 2.0), 102);
    check_unary("exp", Tensor::exp, f32s(n, 3, -2.0, 2.0), 103);
    check_unary("log", Tensor::log, f32s(n, 4, 0.3, 3.0), 104);
    check_unary("sqrt", Tensor::sqrt, f32s(n, 5, 0.3, 3.0), 105);
    check_unary("rsqrt", Tensor::rsqrt, f32s(n, 6, 0.3, 3.0), 106);
    check_unary("sin", Tensor::sin, f32s(n, 7, -3.0, 3.0), 107);
    check_unary("cos", Tensor::cos, f32s(n, 8, -3.0, 3.0), 108);
    check_unary("tanh", Tensor::tanh, f32s(n, 9, -2.0, 2.0), 109);
    check_unary("sigmoid", Tensor::sigmoid, f32s(n, 10, -3.0, 3.0), 110);
    check_unary("relu", Tensor::relu, signed(n, 11, 0.2, 2.0), 111);
    check_unary("square", Tensor::square, f32s(n, 12, -2.0, 2.0), 112);
    // Compositions of several unary rules.
    check_unary(
        "log(1 + exp(x)) * sin(x)",
        |x| &(x.exp() + 1.0).log() * &x.sin(),
        f32s(n, 13, -2.0, 2.0),
        113,
    );
}

#[test]
fn piecewise_constant_ops_have_zero_gradients() {
    // loss = sum((op(x) + x) * r): the op contributes nothing, so the gradient is exactly r (a rule
    // that passed the cotangent through, or failed to, would give 2r or an error).
    let shape = [3, 4];
    let x = arr(f32s(12, 20, -3.0, 3.0), &shape);
    let r = weights_host(&shape, 120);
    let ops: [(&str, UnaryFn); 4] = [
        ("sign", Tensor::sign),
        ("floor", Tensor::floor),
        ("ceil", Tensor::ceil),
        ("round", Tensor::round),
    ];
    for (name, op) in ops {
        let loss = weighted(move |a| op(&a[0]) + &a[0], 120);
        let g = grad(&loss)
            .on(&vulkan())
            .call(std::slice::from_ref(&x))
            .unwrap();
        assert_f32s(&host(&g[0]), &r, Tol::ARITH, name);
    }
    // f32 -> i32 -> f32 casts: no gradient flows through the integer value.
    let loss = weighted(|a| a[0].cast(DType::I32).cast(DType::F32) + &a[0], 120);
    let g = grad(&loss)
        .on(&vulkan())
        .call(std::slice::from_ref(&x))
        .unwrap();
    assert_f32s(&host(&g[0]), &r, Tol::ARITH, "cast f32 -> i32 -> f32");
    // f32 -> f32 cast: the identity (Tensor::cast records no primitive for it).
    let loss = weighted(|a| a[0].cast(DType::F32) * 3.0, 120);
    let g = grad(&loss).on(&vulkan()).call(&[x]).unwrap();
    let want: Vec<f32> = r.iter().map(|v| v * 3.0).collect();
    assert_f32s(&host(&g[0]), &want, Tol::ARITH, "cast f32 -> f32");
}

#[test]
fn binary_rules_match_finite_differences() {
    let shape = [3, 4];
    let n = 12;
    let a = arr(f32s(n, 30, -2.0, 2.0), &shape);
    let b = arr(f32s(n, 31, -2.0, 2.0), &shape);
    let b_nonzero = arr(signed(n, 32, 0.5, 2.0), &shape);
    type Bin = fn(&Tensor, &Tensor) -> Tensor;
    let cases: [(&str, Bin, &Array); 4] = [
        ("add", |x, y| x + y, &b),
        ("sub", |x, y| x - y, &b),
        ("mul", |x, y| x * y, &b),
        ("div", |x, y| x / y, &b_nonzero),
    ];
    for (k, (name, op, rhs)) in cases.into_iter().enumerate() {
        let loss = weighted(move |t| op(&t[0], &t[1]), 130 + k as u64);
        check_fd(name, &loss, &[a.clone(), rhs.clone()], &[0, 1]);
    }
    // pow with a positive base, both operands.
    let base = arr(f32s(n, 33, 0.5, 2.5), &shape);
    let expo = arr(f32s(n, 34, -2.0, 2.0), &shape);
    let loss = weighted(|t| t[0].pow(&t[1]), 135);
    check_fd("pow", &loss, &[base, expo], &[0, 1]);
    // max / min away from ties: b = a + an offset of at least 0.2 in magnitude.
    let av = f32s(n, 35, -2.0, 2.0);
    let off = signed(n, 36, 0.2, 1.0);
    let bv: Vec<f32> = av.iter().zip(&off).map(|(x, o)| x + o).collect();
    let (a2, b2) = (arr(av, &shape), arr(bv, &shape));
    let loss = weighted(|t| t[0].maximum(&t[1]), 137);
    check_fd("max", &loss, &[a2.clone(), b2.clone()], &[0, 1]);
    let loss = weighted(|t| t[0].minimum(&t[1]), 138);
    check_fd("min", &loss, &[a2, b2], &[0, 1]);
    // Broadcasting operands: the broadcast's VJP sums the cotangent back.
    let col = arr(f32s(3, 37, -2.0, 2.0), &[3, 1]);
    let row = arr(f32s(4, 38, -2.0, 2.0), &[4]);
    let loss = weighted(|t| &(&t[0] * &t[1]) + &t[0].exp(), 139);
    check_fd("mul [3,1] * [4]", &loss, &[col, row], &[0, 1]);
}

#[test]
fn rem_matches_finite_differences_away_from_jumps() {
    // a = b * (k + f) with an integer k in [-2, 2] and a fraction f in [0.2, 0.8]: a / b stays at
    // least 0.1 away from an integer under the finite-difference steps, where rem jumps.
    let n = 12;
    let bv = signed(n, 40, 0.8, 1.6);
    let k = i32s(n, 41, -2, 2);
    let f = f32s(n, 42, 0.2, 0.8);
    let av: Vec<f32> = (0..n)
        .map(|i| {
            let q = k[i] as f32 + if k[i] < 0 { -f[i] } else { f[i] };
            bv[i] * q
        })
        .collect();
    let loss = weighted(|t| t[0].rem(&t[1]), 140);
    let g = check_fd(
        "rem",
        &loss,
        &[arr(av.clone(), &[3, 4]), arr(bv.clone(), &[3, 4])],
        &[0, 1],
    );
    // And the analytic rule: d/da = r, d/db = -trunc(a / b) r.
    let r = weights_host(&[3, 4], 140);
    let want_b: Vec<f32> = (0..n).map(|i| -(av[i] / bv[i]).trunc() * r[i]).collect();
    assert_f32s(&g[0], &r, Tol::ARITH, "rem d/da");
    assert_f32s(&g[1], &want_b, Tol::ARITH, "rem d/db");
}

#[test]
fn max_and_min_split_exact_ties_evenly() {
    // Elementwise: at a == b each operand gets half of the cotangent (JAX's balanced rule).
    let av = vec![1.0f32, 2.0, -0.5, 3.0, 0.25, -2.0];
    let bv = vec![1.0f32, 1.0, -0.5, 4.0, 0.25, -3.0];
    let shape = [2, 3];
    let r = weights_host(&shape, 150);
    let args = [arr(av.clone(), &shape), arr(bv.clone(), &shape)];
    for (name, is_max) in [("max", true), ("min", false)] {
        let loss = if is_max {
            weighted(|t| t[0].maximum(&t[1]), 150)
        } else {
            weighted(|t| t[0].minimum(&t[1]), 150)
        };
        let g = grad(&loss)
            .argnums(&[0, 1])
            .on(&vulkan())
            .call(&args)
            .unwrap();
        let share = |x: f32, y: f32| {
            let wins = if is_max { x > y } else { x < y };
            if x == y {
                0.5
            } else if wins {
                1.0
            } else {
                0.0
            }
        };
        let ga: Vec<f32> = (0..6).map(|i| r[i] * share(av[i], bv[i])).collect();
        let gb: Vec<f32> = (0..6).map(|i| r[i] * share(bv[i], av[i])).collect();
        assert_f32s(&host(&g[0]), &ga, Tol::ARITH, &format!("{name} ties d/da"));
        assert_f32s(&host(&g[1]), &gb, Tol::ARITH, &format!("{name} ties d/db"));
    }
}

#[test]
fn select_rule_matches_finite_differences() {
    let shape = [3, 4];
    let pred = rand_bool(&shape, 50);
    let t = arr(f32s(12, 51, -2.0, 2.0), &shape);
    let f = arr(f32s(12, 52, -2.0, 2.0), &shape);
    let loss = weighted(|a| select(&a[0], &(&a[1] * &a[1]), &a[2].sin()), 150);
    check_fd("select", &loss, &[pred, t.clone(), f.clone()], &[1, 2]);
    // A predicate computed from the differentiated value itself (away from the switch at 0).
    let x = arr(signed(12, 53, 0.2, 2.0), &shape);
    let loss = weighted(
        |a| {
            a[0].gt(&Tensor::scalar(0.0f32))
                .where_(&a[0].exp(), &(&a[0] * -2.0))
        },
        151,
    );
    check_fd("where(x > 0, exp x, -2x)", &loss, &[x], &[0]);
}

#[test]
fn reduction_rules_match_finite_differences() {
    let shape = [2, 3, 4];
    let x = arr(distinct(24, 60), &shape);
    let xp = arr(signed(24, 61, 0.5, 1.5), &shape);
    let cases: Vec<(&str, Loss, &Array)> = vec![
        (
            "sum axes [0, 2]",
            weighted(|a| a[0].sum([0, 2], false), 160),
            &x,
        ),
        (
            "sum axis 1 keepdims",
            weighted(|a| a[0].sum(1, true), 161),
            &x,
        ),
        ("sum all", weighted(|a| a[0].sum_all(), 172), &x),
        ("prod axis 1", weighted(|a| a[0].prod(1, false), 162), &xp),
        (
            "prod axes [0, 2]",
            weighted(|a| a[0].prod([0, 2], false), 163),
            &xp,
        ),
        (
            "max axes [0, 2]",
            weighted(|a| a[0].max([0, 2], false), 164),
            &x,
        ),
        (
            "max axis 1 keepdims",
            weighted(|a| a[0].max(1, true), 165),
            &x,
        ),
        ("max all", weighted(|a| a[0].max([0, 1, 2], false), 166), &x),
        ("min axis 2", weighted(|a| a[0].min(2, false), 167), &x),
        (
            "min axes [1, 2]",
            weighted(|a| a[0].min([1, 2], false), 168),
            &x,
        ),
        ("mean axis 1", weighted(|a| a[0].mean(1, false), 169), &x),
        ("mean all", weighted(|a| a[0].mean_all(), 170), &x),
        (
            "mean axes [0, 2] of squares",
            weighted(|a| (&a[0] * &a[0]).mean([0, 2], true), 171),
            &x,
        ),
    ];
    for (name, loss, arg) in &cases {
        check_fd(name, loss, &[(*arg).clone()], &[0]);
    }
}

#[test]
fn max_and_min_reductions_share_ties_evenly() {
    // Ties inside a reduced group share the group's cotangent evenly; derived on the host.
    let shape = [2, 2, 3];
    // Rows along axis 2: [1, 3, 3], [-1, 3, 0.5], [2, 2, 2], [0, -4, -4].
    let xv = vec![
        1.0f32, 3.0, 3.0, -1.0, 3.0, 0.5, 2.0, 2.0, 2.0, 0.0, -4.0, -4.0,
    ];
    let x = arr(xv.clone(), &shape);
    for (name, axes, is_max) in [
        ("max axis 2", vec![2usize], true),
        ("max axes [0, 2]", vec![0, 2], true),
        ("min axis 2", vec![2], false),
        ("min axes [1, 2]", vec![1, 2], false),
    ] {
        let ax: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
        let ax2 = ax.clone();
        let loss = weighted(
            move |a| {
                if is_max {
                    a[0].max(ax.clone(), false)
                } else {
                    a[0].min(ax.clone(), false)
                }
            },
            180,
        );
        let g = grad(&loss)
            .on(&vulkan())
            .call(std::slice::from_ref(&x))
            .unwrap();
        // Host: the extreme of each group, the number of elements attaining it, the share.
        let groups = numel(&shape) / axes.iter().map(|&a| shape[a]).product::<usize>();
        let mut best = vec![if is_max { f32::MIN } else { f32::MAX }; groups];
        for (i, &v) in xv.iter().enumerate() {
            let o = reduced_index(i, &shape, &axes);
            best[o] = if is_max {
                best[o].max(v)
            } else {
                best[o].min(v)
            };
        }
        let mut count = vec![0f32; groups];
        for (i, &v) in xv.iter().enumerate() {
            let o = reduced_index(i, &shape, &axes);
            if v == best[o] {
                count[o] += 1.0;
            }
        }
        assert!(
            count.iter().any(|&c| c > 1.0),
            "{name}: the data should contain ties ({ax2:?})"
        );
        let r = weights_host(&[groups], 180);
        let want: Vec<f32> = xv
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let o = reduced_index(i, &shape, &axes);
                if v == best[o] { r[o] / count[o] } else { 0.0 }
            })
            .collect();
        assert_f32s(&host(&g[0]), &want, Tol::ARITH, name);
    }
}

#[test]
fn prod_gradient_with_a_zero_factor() {
    // d/dx_j prod(x) = prod of the other factors, also when x_j == 0 (JAX gives
    // grad(prod)([0, 2, 3]) = [6, 0, 0]); derived on the host without dividing.
    let xv = vec![0.0f32, 2.0, 3.0, 1.5, -2.0, 0.5];
    let x = arr(xv.clone(), &[2, 3]);
    let loss = weighted(|a| a[0].prod(1, false), 185);
    let g = grad(&loss).on(&vulkan()).call(&[x]).unwrap();
    let r = weights_host(&[2], 185);
    let want: Vec<f32> = (0..6)
        .map(|i| {
            let row = i / 3;
            let others: f32 = (0..3)
                .filter(|&j| row * 3 + j != i)
                .map(|j| xv[row * 3 + j])
                .product();
            r[row] * others
        })
        .collect();
    assert_f32s(&host(&g[0]), &want, Tol::ARITH, "prod with a zero factor");
}

#[test]
fn matmul_and_dot_general_rules_match_finite_differences() {
    let cases: Vec<(&str, Vec<usize>, Vec<usize>)> = vec![
        ("matmul [3,4] @ [4,5]", vec![3, 4], vec![4, 5]),
        (
            "batched matmul [2,3,4] @ [2,4,2]",
            vec![2, 3, 4],
            vec![2, 4, 2],
        ),
        (
            "broadcast matmul [2,3,4] @ [4,2]",
            vec![2, 3, 4],
            vec![4, 2],
        ),
        ("vector matmul [4] @ [4,3]", vec![4], vec![4, 3]),
    ];
    for (k, (name, ls, rs)) in cases.into_iter().enumerate() {
        let l = arr(f32s(numel(&ls), 70 + k as u64, -1.5, 1.5), &ls);
        let r = arr(f32s(numel(&rs), 80 + k as u64, -1.5, 1.5), &rs);
        let loss = weighted(|t| t[0].matmul(&t[1]), 190 + k as u64);
        check_fd(name, &loss, &[l, r], &[0, 1]);
    }
    // dot_general with a non-leading batch axis on the rhs and two contracting axes paired out of
    // order: lhs [B=2, M=3, K1=2, K2=3], rhs [K2=3, B=2, N=2, K1=2] -> [2, 3, 2].
    let l = arr(f32s(36, 90, -1.5, 1.5), &[2, 3, 2, 3]);
    let r = arr(f32s(24, 91, -1.5, 1.5), &[3, 2, 2, 2]);
    let dims = DotDims {
        lhs_contract: vec![2, 3],
        rhs_contract: vec![3, 0],
        lhs_batch: vec![0],
        rhs_batch: vec![1],
    };
    let loss = weighted(move |t| t[0].dot_general(&t[1], dims.clone()), 195);
    let g = check_fd("dot_general batch + 2 contracting", &loss, &[l, r], &[0, 1]);
    assert_eq!(g[0].shape, vec![2, 3, 2, 3]);
    assert_eq!(g[1].shape, vec![3, 2, 2, 2]);
}

#[test]
fn layout_rules_match_finite_differences() {
    let x234 = arr(f32s(24, 100, -2.0, 2.0), &[2, 3, 4]);
    let x31 = arr(f32s(3, 101, -2.0, 2.0), &[3, 1]);
    let x57 = arr(f32s(35, 102, -2.0, 2.0), &[5, 7]);
    let x23 = arr(f32s(6, 103, -2.0, 2.0), &[2, 3]);
    let cases: Vec<(&str, Loss, &Array)> = vec![
        (
            "transpose [2,0,1]",
            weighted(|a| a[0].transpose(&[2, 0, 1]), 200),
            &x234,
        ),
        (
            "reshape [4, -1]",
            weighted(|a| a[0].reshape(&[4, -1]).sin(), 201),
            &x234,
        ),
        (
            "broadcast_to [3,1] -> [2,3,4]",
            weighted(|a| a[0].broadcast_to(&[2, 3, 4]).sin(), 202),
            &x31,
        ),
        (
            "broadcast_in_dim [3,1] -> [3,2,4] dims [0,2]",
            weighted(|a| a[0].broadcast_in_dim(&[3, 2, 4], &[0, 2]).exp(), 203),
            &x31,
        ),
        (
            "broadcast_in_dim [3,1] -> [3,1,2] dims [0,1] (size-1 kept)",
            weighted(|a| a[0].broadcast_in_dim(&[3, 1, 2], &[0, 1]).square(), 204),
            &x31,
        ),
        (
            "slice strides [2,3]",
            weighted(|a| a[0].slice(&[1, 0], &[5, 7], Some(&[2, 3])), 205),
            &x57,
        ),
        (
            "slice strides [3,2] short of the end",
            weighted(
                |a| a[0].slice(&[0, 1], &[4, 6], Some(&[3, 2])).square(),
                206,
            ),
            &x57,
        ),
        (
            "pad lo [1,0] hi [2,1] interior [1,2]",
            weighted(
                |a| a[0].pad_interior(&[1, 0], &[2, 1], &[1, 2], 0.5f32).sin(),
                207,
            ),
            &x23,
        ),
        (
            "expand_dims + squeeze",
            weighted(|a| a[0].expand_dims(1).exp().squeeze(&[1]), 208),
            &x23,
        ),
    ];
    for (name, loss, arg) in &cases {
        check_fd(name, loss, &[(*arg).clone()], &[0]);
    }
    // concatenate of three operands of different widths along axis 1.
    let a = arr(f32s(2, 104, -2.0, 2.0), &[2, 1]);
    let b = arr(f32s(6, 105, -2.0, 2.0), &[2, 3]);
    let c = arr(f32s(4, 106, -2.0, 2.0), &[2, 2]);
    let loss = weighted(
        |t| Tensor::concatenate(&[&t[0], &t[1].sin(), &t[2]], 1).square(),
        209,
    );
    check_fd("concatenate 3 operands", &loss, &[a, b, c], &[0, 1, 2]);
}

#[test]
fn take_and_one_hot_rules_match_finite_differences() {
    let x = arr(f32s(15, 110, -2.0, 2.0), &[5, 3]);
    // Repeated and negative indices along axis 0: index -1 is row 4, -5 is row 0.
    let idx0 = iarr(vec![0, -1, 2, 2, 2, -5], &[2, 3]);
    let loss = weighted(|a| a[0].index_take(&a[1], 0).sin(), 210);
    let g = check_fd(
        "take axis 0 (repeated, negative)",
        &loss,
        &[x.clone(), idx0],
        &[0],
    );
    // Row 1 and row 3 are never taken: their gradient is exactly zero.
    let gv = hvals(&g[0]);
    assert!(
        gv[3..6].iter().chain(&gv[9..12]).all(|&v| v == 0.0),
        "{gv:?}"
    );
    // Along axis 1 (with -1 and a repeat), and a scalar index.
    let idx1 = iarr(vec![2, -1, 0, 2], &[4]);
    let loss = weighted(|a| a[0].index_take(&a[1], 1).square(), 211);
    check_fd("take axis 1", &loss, &[x.clone(), idx1], &[0]);
    let idx_s = iarr(vec![-2], &[]);
    let loss = weighted(|a| a[0].index_take(&a[1], 1).exp(), 212);
    check_fd("take scalar index", &loss, &[x, idx_s], &[0]);
    // one_hot of an index computed from x (argmax: distinct values, so FD does not move it): no
    // gradient through the indices; the gradient is one_hot(argmax) * r.
    let xd = arr(distinct(12, 113), &[3, 4]);
    let loss = weighted(|a| &a[0].argmax(1, false).one_hot(4) * &a[0], 213);
    check_fd("one_hot(argmax x) * x", &loss, &[xd], &[0]);
}

/// The reference device and every GPU device (Vulkan lavapipe, GL llvmpipe).
fn all_devices() -> Vec<Device> {
    let mut d = gpu_devices();
    d.push(cpu());
    d
}

/// `take`'s gradient is JAX's for `x[i]`: a gather in `PROMISE_IN_BOUNDS` mode, whose forward
/// clamps an out-of-range index but whose transpose (a scatter-add) drops its update. Expected
/// values derived by hand, and printed by JAX 0.10.2 (`jax.grad(lambda x: jnp.sum(x[i] * w))`):
///
/// - x = [1, 2, 3, 4] (n = 4), i = [0, 0, 2, -1, 7, -9], w = [1, 2, 3, 4, 5, 6]. The forward reads
///   [x0, x0, x2, x3, x3 (7 clamped), x0 (-9 -> -5, clamped)] = [1, 1, 3, 4, 4, 1], so the loss is
///   1 + 2 + 9 + 16 + 20 + 6 = 54. The gradient keeps the indices in [-4, 4): 0 (w 1), 0 (w 2),
///   2 (w 3), -1 -> 3 (w 4); 7 and -9 drop. dx = [1 + 2, 0, 3, 4] = [3, 0, 3, 4] (the old rule
///   scattered the clamped ones too: [9, 0, 3, 9]).
/// - u32 i = [1, u32::MAX, 9], w = [1, 2, 3]: only 1 is below n = 4: dx = [0, 1, 0, 0].
/// - Axis 1 of X = 1..=12 as [3, 4], I = [[3, -5], [4, -4]], W[r, a, b] = 4 r + 2 a + b + 1: in row
///   r, I[0,0] = 3 (w 4r + 1) goes to column 3, I[1,1] = -4 -> 0 (w 4r + 4) to column 0, -5 and 4
///   drop: dX[r] = [4r + 4, 0, 0, 4r + 1] = [[4, 0, 0, 1], [8, 0, 0, 5], [12, 0, 0, 9]].
/// - `take_mode` keeps `jnp.take(mode=...)`'s gradients: Clip reads [0, 0, 2, 0, 3, 0] ->
///   [1 + 2 + 4 + 6, 0, 3, 5] = [13, 0, 3, 5]; Wrap reads [0, 0, 2, 3, 3, 3] -> [3, 0, 3, 15]; Fill
///   masks 7 and -9 -> [3, 0, 3, 4].
#[test]
fn take_gradient_drops_out_of_range_indices_like_jax() {
    let devs = all_devices();
    let x = arr(vec![1.0, 2.0, 3.0, 4.0], &[4]);
    let i = iarr(vec![0, 0, 2, -1, 7, -9], &[6]);
    let w = arr(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[6]);
    let got = check_on(
        &devs,
        |a: &[Tensor]| {
            let loss = |m: Option<TakeMode>| {
                move |t: &[Tensor]| {
                    let y = match m {
                        None => t[0].index_take(&t[1], 0),
                        Some(m) => t[0].take_mode(&t[1], 0, m),
                    };
                    vec![(&y * &t[2]).sum_all()]
                }
            };
            let mut out = value_and_grad(loss(None)).apply(a);
            for m in [TakeMode::Clip, TakeMode::Wrap, TakeMode::Fill] {
                out.extend(grad(loss(Some(m))).apply(a));
            }
            out
        },
        &[x.clone(), i, w],
        Tol::EXACT,
    );
    assert_eq!(hvals(&got[0]), vec![54.0], "x[i] . w");
    assert_eq!(hvals(&got[1]), vec![3.0, 0.0, 3.0, 4.0], "grad x[i]");
    assert_eq!(hvals(&got[2]), vec![13.0, 0.0, 3.0, 5.0], "grad take clip");
    assert_eq!(hvals(&got[3]), vec![3.0, 0.0, 3.0, 15.0], "grad take wrap");
    assert_eq!(hvals(&got[4]), vec![3.0, 0.0, 3.0, 4.0], "grad take fill");

    let iu = Array::from_vec(vec![1u32, u32::MAX, 9], &[3]).unwrap();
    let wu = arr(vec![1.0, 2.0, 3.0], &[3]);
    let got = check_on(
        &devs,
        |a: &[Tensor]| {
            grad(|t: &[Tensor]| vec![(&t[0].index_take(&t[1], 0) * &t[2]).sum_all()]).apply(a)
        },
        &[x, iu, wu],
        Tol::EXACT,
    );
    assert_eq!(hvals(&got[0]), vec![0.0, 1.0, 0.0, 0.0], "grad x[u32 i]");

    let x2 = arr((1..=12).map(|v| v as f32).collect(), &[3, 4]);
    let i2 = iarr(vec![3, -5, 4, -4], &[2, 2]);
    let w2 = arr((1..=12).map(|v| v as f32).collect(), &[3, 2, 2]);
    let got = check_on(
        &devs,
        |a: &[Tensor]| {
            grad(|t: &[Tensor]| vec![(&t[0].index_take(&t[1], 1) * &t[2]).sum_all()]).apply(a)
        },
        &[x2, i2, w2],
        Tol::EXACT,
    );
    assert_eq!(
        hvals(&got[0]),
        vec![4.0, 0.0, 0.0, 1.0, 8.0, 0.0, 0.0, 5.0, 12.0, 0.0, 0.0, 9.0],
        "grad X[:, I]"
    );
}

/// The same rule under `vmap(grad)` and `grad(vmap)`, with `x`, the indices or both batched
/// (JAX 0.10.2 gives the same numbers for both orders). Examples X = [[1, 2, 3, 4], [5, 6, 7, 8]],
/// I = [[0, 4, -1], [-5, 3, 9]], W = [[1, 2, 3], [4, 5, 6]]:
/// - both batched: example 0 keeps 0 (w 1) and -1 -> 3 (w 3), drops 4: [1, 0, 0, 3]; example 1
///   keeps 3 (w 5), drops -5 (< -4) and 9: [0, 0, 0, 5]. The forward clamps within each
///   example: [[x0, x3, x3], [x4, x7, x7]] = [[1, 4, 4], [5, 8, 8]], loss 1 + 8 + 12 + 20 + 40 + 48.
/// - shared x, batched I: the two examples' gradients add up: [1, 0, 0, 8].
/// - batched X, shared i = [0, 0, 2, -1, 7, -9] with W2 = [[1..=6], [7..=12]]: [3, 0, 3, 4] as in
///   the unbatched test, and [7 + 8, 0, 9, 10] = [15, 0, 9, 10].
/// - both batched, u32 I = [[1, u32::MAX, 9], [3, 4, 0]]: [0, 1, 0, 0] and [6, 0, 0, 4] (4 drops).
#[test]
fn take_gradient_drops_out_of_range_indices_under_vmap() {
    let devs = all_devices();
    let xb = arr(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[2, 4]);
    let ib = iarr(vec![0, 4, -1, -5, 3, 9], &[2, 3]);
    let wb = arr(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let x1 = arr(vec![1.0, 2.0, 3.0, 4.0], &[4]);
    let i1 = iarr(vec![0, 0, 2, -1, 7, -9], &[6]);
    let w2 = arr((1..=12).map(|v| v as f32).collect(), &[2, 6]);
    let iu = Array::from_vec(vec![1u32, u32::MAX, 9, 3, 4, 0], &[2, 3]).unwrap();
    fn dot(t: &[Tensor]) -> Vec<Tensor> {
        vec![(&t[0].index_take(&t[1], 0) * &t[2]).sum_all()]
    }
    fn taken(t: &[Tensor]) -> Vec<Tensor> {
        vec![t[0].index_take(&t[1], 0)]
    }
    const B: Option<usize> = Some(0);
    let got = check_on(
        &devs,
        |a: &[Tensor]| {
            let (xb, ib, wb, x1, i1, w2, iu) = (&a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6]);
            let per_example = |axes: &'static [Option<usize>], t: Vec<Tensor>| {
                vmap(|u: &[Tensor]| grad(dot).apply(u))
                    .in_axes(axes)
                    .apply(&t)
                    .remove(0)
            };
            let of_vmap = |axes: &'static [Option<usize>], t: Vec<Tensor>| {
                grad(move |u: &[Tensor]| {
                    let y = vmap(taken).in_axes(&axes[..2]).apply(&u[..2]).remove(0);
                    vec![(&y * &u[2]).sum_all()]
                })
                .apply(&t)
                .remove(0)
            };
            let both = vec![xb.clone(), ib.clone(), wb.clone()];
            let idx = vec![x1.clone(), ib.clone(), wb.clone()];
            let xs = vec![xb.clone(), i1.clone(), w2.clone()];
            let both_u = vec![xb.clone(), iu.clone(), wb.clone()];
            vec![
                per_example(&[B, B, B], both.clone()),
                of_vmap(&[B, B], both.clone()),
                vmap(taken).apply(&both[..2]).remove(0),
                per_example(&[None, B, B], idx.clone()).sum(0i64, false),
                of_vmap(&[None, B], idx),
                per_example(&[B, None, B], xs.clone()),
                of_vmap(&[B, None], xs),
                per_example(&[B, B, B], both_u.clone()),
                of_vmap(&[B, B], both_u),
            ]
        },
        &[xb, ib, wb, x1, i1, w2, iu],
        Tol::EXACT,
    );
    let both = vec![1.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 5.0];
    assert_eq!(hvals(&got[0]), both, "vmap(grad), both batched");
    assert_eq!(hvals(&got[1]), both, "grad(vmap), both batched");
    assert_eq!(
        hvals(&got[2]),
        vec![1.0, 4.0, 4.0, 5.0, 8.0, 8.0],
        "vmap forward"
    );
    assert_eq!(
        hvals(&got[3]),
        vec![1.0, 0.0, 0.0, 8.0],
        "vmap(grad), indices batched"
    );
    assert_eq!(
        hvals(&got[4]),
        vec![1.0, 0.0, 0.0, 8.0],
        "grad(vmap), indices batched"
    );
    let xs = vec![3.0, 0.0, 3.0, 4.0, 15.0, 0.0, 9.0, 10.0];
    assert_eq!(hvals(&got[5]), xs, "vmap(grad), x batched");
    assert_eq!(hvals(&got[6]), xs, "grad(vmap), x batched");
    let u = vec![0.0, 1.0, 0.0, 0.0, 6.0, 0.0, 0.0, 4.0];
    assert_eq!(hvals(&got[7]), u, "vmap(grad), both batched, u32");
    assert_eq!(hvals(&got[8]), u, "grad(vmap), both batched, u32");
}

#[test]
fn softmax_family_rules_match_finite_differences() {
    let x = arr(f32s(24, 120, -2.0, 2.0), &[2, 3, 4]);
    let cases: Vec<(&str, Loss)> = vec![
        ("softmax axis -1", weighted(|a| a[0].softmax(-1), 220)),
        ("softmax axis 1", weighted(|a| a[0].softmax(1), 221)),
        (
            "log_softmax axis -1",
            weighted(|a| a[0].log_softmax(-1), 222),
        ),
        ("log_softmax axis 0", weighted(|a| a[0].log_softmax(0), 223)),
        (
            "logsumexp axes [0, 2]",
            weighted(|a| a[0].logsumexp([0, 2], false), 224),
        ),
        (
            "logsumexp all",
            weighted(|a| a[0].logsumexp([0, 1, 2], false), 225),
        ),
        (
            "logsumexp axis 1 keepdims",
            weighted(|a| a[0].logsumexp(1, true), 226),
        ),
    ];
    for (name, loss) in &cases {
        check_fd(name, loss, std::slice::from_ref(&x), &[0]);
    }
}

// ---- 2. GPU gradients against the reference -------------------------------------------------------

/// An MLP classifier's mean cross-entropy: args [w1, b1, w2, b2, x, flat label index].
fn mlp_loss(a: &[Tensor]) -> Vec<Tensor> {
    let h = (a[4].matmul(&a[0]) + &a[1]).tanh();
    let logits = h.matmul(&a[2]) + &a[3];
    let logp = logits.log_softmax(-1).reshape(&[-1]);
    vec![-logp.index_take(&a[5], 0).mean_all()]
}

fn mlp_args() -> Vec<Array> {
    let (b, d, h, c) = (8usize, 5usize, 6usize, 3usize);
    let labels = i32s(b, 130, 0, c as i32 - 1);
    let flat: Vec<i32> = labels
        .iter()
        .enumerate()
        .map(|(i, &l)| (i * c) as i32 + l)
        .collect();
    vec![
        rand_f32_in(&[d, h], 131, -0.8, 0.8),
        rand_f32_in(&[h], 132, -0.5, 0.5),
        rand_f32_in(&[h, c], 133, -0.8, 0.8),
        rand_f32_in(&[c], 134, -0.5, 0.5),
        rand_f32_in(&[b, d], 135, -1.5, 1.5),
        iarr(flat, &[b]),
    ]
}

#[test]
fn mlp_gradients_on_every_gpu_match_the_reference() {
    let args = mlp_args();
    let argnums = [0, 1, 2, 3];
    let want = grad(mlp_loss)
        .argnums(&argnums)
        .on(&cpu())
        .call(&args)
        .expect("reference grad");
    let want: Vec<HostArray> = want.iter().map(host).collect();
    // The reference gradient itself against central differences.
    for (w, &k) in want.iter().zip(&argnums) {
        let fd = central_diff(&mlp_loss, &args, k);
        assert_fd(w, &fd, &format!("MLP reference d/d arg {k} vs f64 FD"));
    }
    let devs = gpu_devices();
    assert!(devs.len() >= 2, "expected a Vulkan and a GL device");
    for dev in &devs {
        let _guard = device_guard(dev);
        let got = value_and_grad(mlp_loss)
            .argnums(&argnums)
            .on(dev)
            .call(&args)
            .unwrap_or_else(|e| panic!("on {}: {e}", dev.name()));
        assert_eq!(got.len(), 1 + argnums.len());
        let loss_ref = jit(mlp_loss).on(&cpu()).call(&args).unwrap();
        assert_close(
            &host(&got[0]),
            &host(&loss_ref[0]),
            Tol::REDUCE,
            &format!("MLP loss on {}", dev.name()),
        );
        for (k, (g, w)) in got[1..].iter().zip(&want).enumerate() {
            assert_close(
                &host(g),
                w,
                Tol::REDUCE,
                &format!("MLP d/d arg {k} on {}", dev.name()),
            );
        }
    }
}

// ---- 3. grad of grad ----------------------------------------------------------------------------

#[test]
fn second_derivatives_of_elementwise_functions() {
    let xv = f32s(6, 140, -2.0, 2.0);
    let x = arr(xv.clone(), &[6]);
    let dev = vulkan();
    // d/dx sum(grad(sum(x^3))) = d/dx sum(3 x^2) = 6x.
    let d1 = grad(|a: &[Tensor]| vec![(&(&a[0] * &a[0]) * &a[0]).sum_all()]);
    let d2 = grad(|a: &[Tensor]| vec![d1.apply(a)[0].sum_all()]);
    let got = d2.on(&dev).call(std::slice::from_ref(&x)).unwrap();
    let want: Vec<f32> = xv.iter().map(|v| 6.0 * v).collect();
    assert_f32s(&host(&got[0]), &want, Tol::ARITH, "d2/dx2 x^3");
    // sin'' = -sin.
    let s1 = grad(|a: &[Tensor]| vec![a[0].sin().sum_all()]);
    let s2 = grad(|a: &[Tensor]| vec![s1.apply(a)[0].sum_all()]);
    let got = s2.on(&dev).call(std::slice::from_ref(&x)).unwrap();
    let want: Vec<f32> = xv.iter().map(|v| -v.sin()).collect();
    assert_f32s(&host(&got[0]), &want, ANALYTIC, "d2/dx2 sin");
    // Third derivative of sum(x^4 / 4): 6x (grad of grad of grad).
    let q1 = grad(|a: &[Tensor]| vec![(a[0].square().square() * 0.25).sum_all()]);
    let q2 = grad(|a: &[Tensor]| vec![q1.apply(a)[0].sum_all()]);
    let q3 = grad(|a: &[Tensor]| vec![q2.apply(a)[0].sum_all()]);
    let got = q3.on(&dev).call(&[x]).unwrap();
    let want: Vec<f32> = xv.iter().map(|v| 6.0 * v).collect();
    assert_f32s(&host(&got[0]), &want, Tol::ARITH, "d3/dx3 x^4/4");
}

/// f(w, x) = sum(tanh(x @ w) * r) + 0.5 * sum(w^2 * softplus-ish term): a matmul-based loss.
fn hvp_loss(a: &[Tensor]) -> Vec<Tensor> {
    let y = a[1].matmul(&a[0]).tanh();
    vec![weighted_sum(&y, 240) + (a[0].square() * &a[0].sigmoid()).sum_all()]
}

#[test]
fn hessian_vector_product_matches_finite_differences_of_the_gradient() {
    let w = rand_f32_in(&[3, 2], 141, -1.0, 1.0);
    let x = rand_f32_in(&[4, 3], 142, -1.0, 1.0);
    let v = rand_f32_in(&[3, 2], 143, -1.0, 1.0);
    let df = grad(hvp_loss);
    // hvp(v) = grad_w(sum(grad_w f(w, x) * v)).
    let hvp = grad(|a: &[Tensor]| {
        let g = df.apply(&a[..2]);
        vec![(&g[0] * &a[2]).sum_all()]
    });
    let args = [w.clone(), x.clone(), v.clone()];
    let got = hvp.on(&vulkan()).call(&args).unwrap();
    let got_ref = grad(|a: &[Tensor]| {
        let g = df.apply(&a[..2]);
        vec![(&g[0] * &a[2]).sum_all()]
    })
    .on(&cpu())
    .call(&args)
    .unwrap();
    assert_close(
        &host(&got[0]),
        &host(&got_ref[0]),
        Tol::REDUCE,
        "hvp vulkan vs reference",
    );
    // Central differences in f64 of the gradient along v, on the reference. `grad` takes f32
    // arguments; the f64 gradient is the pullback of `vjp` (the same VJP rules, in f64), staged
    // into a jit on the cpu device.
    let grad64 = jit(|a: &[Tensor]| {
        let (ys, pullback) = vjp(hvp_loss, a).expect("vjp of the loss in f64");
        pullback
            .apply(&[Tensor::ones(&[], ys[0].dtype())])
            .expect("pullback in f64")
    })
    .on(&cpu());
    let (w64, x64, v64) = (vals64(&widen(&w)), widen(&x), vals64(&widen(&v)));
    let g_at = |sign: f64| -> Vec<f64> {
        let wv: Vec<f64> = w64
            .iter()
            .zip(&v64)
            .map(|(a, b)| a + sign * EPS * b)
            .collect();
        let g = grad64
            .call(&[Array::from_vec(wv, &[3, 2]).unwrap(), x64.clone()])
            .unwrap();
        assert_eq!(g[0].dtype(), DType::F64, "the gradient along v is f64");
        vals64(&g[0])
    };
    let (gp, gm) = (g_at(1.0), g_at(-1.0));
    let fd: Vec<f64> = gp
        .iter()
        .zip(&gm)
        .map(|(p, m)| (p - m) / (2.0 * EPS))
        .collect();
    assert!(
        fd.iter().any(|v| v.abs() > 1e-2),
        "vacuous HVP check: {fd:?}"
    );
    assert_fd(
        &host(&got[0]),
        &fd,
        "hvp vs f64 central differences of the gradient",
    );
}

// ---- 4. value_and_grad, has_aux, argnums ----------------------------------------------------------

#[test]
fn value_and_grad_with_aux_passes_aux_through() {
    let xv = distinct(6, 150);
    let x = arr(xv.clone(), &[2, 3]);
    let f = |a: &[Tensor]| vec![a[0].square().sum_all(), &a[0] * 3.0, a[0].argmax(1, false)];
    let out = value_and_grad(f)
        .has_aux(true)
        .on(&vulkan())
        .call(std::slice::from_ref(&x))
        .unwrap();
    assert_eq!(out.len(), 4, "[value, grad, aux0, aux1]");
    let value: f32 = xv.iter().map(|v| v * v).sum();
    assert_f32s(&host(&out[0]), &[value], Tol::REDUCE, "value");
    let g: Vec<f32> = xv.iter().map(|v| 2.0 * v).collect();
    assert_f32s(&host(&out[1]), &g, Tol::ARITH, "grad");
    let aux0: Vec<f32> = xv.iter().map(|v| 3.0 * v).collect();
    assert_f32s(&host(&out[2]), &aux0, Tol::ARITH, "aux 0 (f32)");
    let aux1: Vec<i32> = xv
        .chunks(3)
        .map(|row| {
            let mut best = 0;
            for (j, v) in row.iter().enumerate() {
                if *v > row[best] {
                    best = j;
                }
            }
            best as i32
        })
        .collect();
    assert_eq!(out[3].dtype(), DType::I32);
    assert_eq!(out[3].to_vec::<i32>().unwrap(), aux1, "aux 1 (i32 argmax)");
    // grad with has_aux: [grad, aux...] without the value.
    let out = grad(f).has_aux(true).on(&vulkan()).call(&[x]).unwrap();
    assert_eq!(out.len(), 3, "[grad, aux0, aux1]");
    assert_f32s(&host(&out[0]), &g, Tol::ARITH, "grad (has_aux)");
    assert_f32s(&host(&out[1]), &aux0, Tol::ARITH, "aux 0 (grad)");
    assert_eq!(out[2].to_vec::<i32>().unwrap(), aux1);
}

#[test]
fn argnums_give_one_gradient_per_argument_in_order() {
    let av = f32s(4, 160, -2.0, 2.0);
    let bv = f32s(4, 161, -2.0, 2.0);
    let args = [arr(av.clone(), &[4]), arr(bv.clone(), &[4])];
    // f(a, b) = sum(a * b + a^2): d/da = b + 2a, d/db = a.
    let f = |t: &[Tensor]| vec![(&(&t[0] * &t[1]) + &t[0].square()).sum_all()];
    let ga: Vec<f32> = av.iter().zip(&bv).map(|(a, b)| b + 2.0 * a).collect();
    let g = grad(f).argnums(&[0, 1]).on(&vulkan()).call(&args).unwrap();
    assert_eq!(g.len(), 2);
    assert_f32s(&host(&g[0]), &ga, Tol::ARITH, "d/da");
    assert_f32s(&host(&g[1]), &av, Tol::ARITH, "d/db");
    // Reversed argnums: gradients come back in argnums order.
    let g = grad(f).argnums(&[1, 0]).on(&vulkan()).call(&args).unwrap();
    assert_f32s(&host(&g[0]), &av, Tol::ARITH, "argnums [1, 0]: d/db first");
    assert_f32s(&host(&g[1]), &ga, Tol::ARITH, "argnums [1, 0]: d/da second");
    // Default argnums: only the first argument.
    let g = grad(f).on(&vulkan()).call(&args).unwrap();
    assert_eq!(g.len(), 1);
    assert_f32s(&host(&g[0]), &ga, Tol::ARITH, "default argnums");
}

/// `stop_gradient` (JAX's `lax.stop_gradient`): the value unchanged, no gradient.
#[test]
fn stop_gradient_passes_values_and_blocks_gradients() {
    use brigade::stop_gradient;
    // Forward: the operand's bits, stored (an alias of the input) or fused into a kernel.
    let special = [
        1.5f32,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -2.25,
    ];
    let x = arr(special.to_vec(), &[6]);
    let got = check_on_all(
        |a: &[Tensor]| vec![stop_gradient(&a[0]), &stop_gradient(&(&a[0] * 2.0)) - 1.0],
        std::slice::from_ref(&x),
        Tol::EXACT,
    );
    for (g, w) in hvals(&got[0]).iter().zip(special) {
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "stop_gradient({w}) = {g}"
        );
    }
    // Gradients, on every GPU and the reference device, derived by hand at x = [1, -2, 0.5]:
    // d/dx sum(x * sg(x)) = sg(x) = x (2x without the stop); d/dx sum(sg(x)^2 + 3x) = 3;
    // under vmap the same per example.
    let x = arr(vec![1.0, -2.0, 0.5], &[3]);
    let product = |a: &[Tensor]| vec![(&a[0] * &stop_gradient(&a[0])).sum_all()];
    let square = |a: &[Tensor]| {
        let s = stop_gradient(&a[0]);
        vec![(&(&s * &s) + &(&a[0] * 3.0)).sum_all()]
    };
    let vmapped = |a: &[Tensor]| {
        let y = vmap(|t: &[Tensor]| vec![&t[0] * &stop_gradient(&t[0])]).apply(a);
        vec![y[0].sum_all()]
    };
    for dev in all_devices() {
        let _guard = device_guard(&dev);
        let g = grad(product)
            .on(&dev)
            .call(std::slice::from_ref(&x))
            .unwrap();
        assert_f32s(
            &host(&g[0]),
            &[1.0, -2.0, 0.5],
            Tol::EXACT,
            &format!("x sg(x) on {}", dev.name()),
        );
        let g = grad(square)
            .on(&dev)
            .call(std::slice::from_ref(&x))
            .unwrap();
        assert_f32s(
            &host(&g[0]),
            &[3.0; 3],
            Tol::EXACT,
            &format!("sg(x)^2 + 3x on {}", dev.name()),
        );
        let g = grad(vmapped)
            .on(&dev)
            .call(std::slice::from_ref(&x))
            .unwrap();
        assert_f32s(
            &host(&g[0]),
            &[1.0, -2.0, 0.5],
            Tol::EXACT,
            &format!("vmap on {}", dev.name()),
        );
    }
    // Second order: d/dx of grad(x^2 sg(x)) = d/dx (2x sg(x)) = 2 sg(x) = 2x.
    let inner = |a: &[Tensor]| {
        grad(|t: &[Tensor]| vec![(&(&t[0] * &t[0]) * &stop_gradient(&t[0])).sum_all()]).apply(a)
    };
    let g = grad(move |a: &[Tensor]| vec![inner(a)[0].sum_all()])
        .on(&vulkan())
        .call(std::slice::from_ref(&x))
        .unwrap();
    assert_f32s(&host(&g[0]), &[2.0, -4.0, 1.0], Tol::EXACT, "grad of grad");
    // Integers carry no gradient: returned as they are, nothing recorded.
    let f = |a: &[Tensor]| vec![stop_gradient(&a[1]), stop_gradient(&a[0])];
    let args = [x, iarr(vec![3, -1], &[2])];
    let graph = jit(f).graph(&args).unwrap().to_string();
    assert_eq!(graph.matches("stop_gradient").count(), 1, "{graph}");
    let got = check_on_all(f, &args, Tol::EXACT);
    assert_eq!(got[0].dtype(), DType::I32);
}

#[test]
fn arguments_that_do_not_affect_the_output_get_zeros() {
    let a = arr(f32s(4, 170, -2.0, 2.0), &[4]);
    let b = arr(f32s(6, 171, -2.0, 2.0), &[2, 3]);
    let c = iarr(vec![3, -1], &[2]);
    let f = |t: &[Tensor]| vec![t[0].sin().sum_all()];
    let g = value_and_grad(f)
        .argnums(&[0, 1])
        .on(&vulkan())
        .call(&[a.clone(), b, c])
        .unwrap();
    let av = vals(&a);
    let value: f32 = av.iter().map(|v| v.sin()).sum();
    assert_f32s(&host(&g[0]), &[value], ANALYTIC, "value");
    let cos: Vec<f32> = av.iter().map(|v| v.cos()).collect();
    assert_f32s(&host(&g[1]), &cos, ANALYTIC, "d/da");
    assert_eq!(g[2].shape(), &[2, 3]);
    assert_f32s(&host(&g[2]), &[0.0; 6], Tol::EXACT, "d/db (unused)");
    // A constant output: every gradient is zero, the value is the constant.
    let k = |_: &[Tensor]| vec![Tensor::scalar(2.5f32)];
    let g = value_and_grad(k).on(&vulkan()).call(&[a]).unwrap();
    assert_f32s(&host(&g[0]), &[2.5], Tol::EXACT, "constant value");
    assert_f32s(
        &host(&g[1]),
        &[0.0; 4],
        Tol::EXACT,
        "gradient of a constant",
    );
    // The loss is the (scalar) argument itself: gradient 1.
    let s = arr(vec![-0.75], &[]);
    let g = grad(|t: &[Tensor]| vec![t[0].clone()])
        .on(&vulkan())
        .call(&[s])
        .unwrap();
    assert_f32s(&host(&g[0]), &[1.0], Tol::EXACT, "identity");
}

// ---- 5. composition with jit, vmap, pmap, collectives ----------------------------------------------

/// loss(w, x, y) = mean((tanh(x @ w) - y)^2) for one example (x [3], y [2]) or a batch.
fn regression_loss(a: &[Tensor]) -> Vec<Tensor> {
    let d = a[1].matmul(&a[0]).tanh() - &a[2];
    vec![d.square().mean_all()]
}

#[test]
fn grad_inside_jit() {
    let w = rand_f32_in(&[3, 2], 180, -1.0, 1.0);
    let x = rand_f32_in(&[5, 3], 181, -1.0, 1.0);
    let y = rand_f32_in(&[5, 2], 182, -1.0, 1.0);
    let args = [w, x, y];
    let df = grad(regression_loss).argnums(&[0, 2]);
    let j = jit(|a: &[Tensor]| {
        let g = df.apply(a);
        vec![&g[0] * 2.0, g[1].clone()]
    });
    let got = j.on(&vulkan()).call(&args).unwrap();
    let want = df.on(&cpu()).call(&args).unwrap();
    let w2: Vec<f32> = vals(&want[0]).iter().map(|v| v * 2.0).collect();
    assert_f32s(&host(&got[0]), &w2, Tol::REDUCE, "jit(2 * grad) d/dw");
    assert_close(
        &host(&got[1]),
        &host(&want[1]),
        Tol::REDUCE,
        "jit(grad) d/dy",
    );
}

#[test]
fn vmap_of_grad_gives_per_example_gradients() {
    let (b, d) = (5usize, 3usize);
    let w = rand_f32_in(&[d, 2], 190, -1.0, 1.0);
    let x = rand_f32_in(&[b, d], 191, -1.0, 1.0);
    let y = rand_f32_in(&[b, 2], 192, -1.0, 1.0);
    let df = grad(regression_loss);
    let per_example = vmap(|a: &[Tensor]| df.apply(a))
        .in_axes(&[None, Some(0), Some(0)])
        .on(&vulkan())
        .call(&[w.clone(), x.clone(), y.clone()])
        .unwrap();
    assert_eq!(per_example[0].shape(), &[b, d, 2]);
    let got = vals(&per_example[0]);
    let (xv, yv) = (vals(&x), vals(&y));
    let single = grad(regression_loss).on(&cpu());
    for i in 0..b {
        let xi = arr(xv[i * d..(i + 1) * d].to_vec(), &[d]);
        let yi = arr(yv[i * 2..(i + 1) * 2].to_vec(), &[2]);
        let gi = single.call(&[w.clone(), xi, yi]).unwrap();
        let h = HostArray::from_vec(got[i * d * 2..(i + 1) * d * 2].to_vec(), &[d, 2]).unwrap();
        assert_close(&h, &host(&gi[0]), Tol::REDUCE, &format!("example {i}"));
    }
}

#[test]
fn pmap_of_grad_with_pmean_matches_the_full_batch_gradient() {
    let devs = devices_with("vulkan:2");
    let (n, per, d) = (devs.len(), 3usize, 3usize);
    assert_eq!(n, 2);
    let w = rand_f32_in(&[d, 2], 200, -1.0, 1.0);
    let xv = f32s(n * per * d, 201, -1.0, 1.0);
    let yv = f32s(n * per * 2, 202, -1.0, 1.0);
    let df = grad(regression_loss);
    let out = pmap(|a: &[Tensor]| {
        let g = df.apply(a);
        vec![pmean(&g[0], "i")]
    })
    .axis_name("i")
    .in_axes(&[None, Some(0), Some(0)])
    .devices(&devs)
    .call(&[
        w.clone(),
        arr(xv.clone(), &[n, per, d]),
        arr(yv.clone(), &[n, per, 2]),
    ])
    .unwrap();
    assert_eq!(out[0].shape(), &[n, d, 2]);
    let full = grad(regression_loss)
        .on(&cpu())
        .call(&[w, arr(xv, &[n * per, d]), arr(yv, &[n * per, 2])])
        .unwrap();
    let want = vals(&full[0]);
    let got = vals(&out[0]);
    for k in 0..n {
        let h = HostArray::from_vec(got[k * d * 2..(k + 1) * d * 2].to_vec(), &[d, 2]).unwrap();
        assert_f32s(
            &h,
            &want,
            Tol::REDUCE,
            &format!("device {k}: pmean of grads"),
        );
    }
}

/// On each layout: per device d, `grad(sum(coll(x_d) * r_d))` inside pmap against `want(xs, rs)`
/// (per-device host values). `x_shape`/`r_shape` are the per-device shapes.
fn check_collective_grad(
    name: &str,
    coll: &dyn Fn(&Tensor) -> Tensor,
    x_shape: &[usize],
    r_shape: &[usize],
    want: &Want<'_>,
) {
    for layout in ["cpu:3", "vulkan:3"] {
        let devs = devices_with(layout);
        let n = devs.len();
        assert_eq!(n, 3);
        let (nx, nr) = (numel(x_shape), numel(r_shape));
        let xv = distinct(n * nx, 210);
        let rv = f32s(n * nr, 211, -1.0, 1.0);
        let mut xs_shape = vec![n];
        xs_shape.extend_from_slice(x_shape);
        let mut rs_shape = vec![n];
        rs_shape.extend_from_slice(r_shape);
        let out = pmap(|a: &[Tensor]| {
            grad(|b: &[Tensor]| vec![(coll(&b[0]) * &b[1]).sum_all()]).apply(a)
        })
        .axis_name("i")
        .devices(&devs)
        .call(&[arr(xv.clone(), &xs_shape), arr(rv.clone(), &rs_shape)])
        .unwrap_or_else(|e| panic!("{name} on {layout}: {e}"));
        assert_eq!(out[0].shape(), xs_shape.as_slice(), "{name} on {layout}");
        let xs: Vec<Vec<f32>> = xv.chunks(nx).map(<[f32]>::to_vec).collect();
        let rs: Vec<Vec<f32>> = rv.chunks(nr).map(<[f32]>::to_vec).collect();
        let w: Vec<f32> = want(&xs, &rs).concat();
        assert!(w.iter().any(|v| *v != 0.0), "{name}: vacuous expectation");
        assert_f32s(
            &host(&out[0]),
            &w,
            Tol::ARITH,
            &format!("{name} on {layout}: per-device gradient"),
        );
    }
}

#[test]
fn grad_through_psum_and_pmean() {
    // loss_d = sum(psum(x) * r_d): every device's x reaches every device, so dx_d = sum_e r_e.
    let sum_r = |_: &[Vec<f32>], rs: &[Vec<f32>]| {
        let s: Vec<f32> = (0..rs[0].len())
            .map(|k| rs.iter().map(|r| r[k]).sum())
            .collect();
        vec![s; rs.len()]
    };
    check_collective_grad("psum", &|t| psum(t, "i"), &[2, 3], &[2, 3], &sum_r);
    let mean_r = |_: &[Vec<f32>], rs: &[Vec<f32>]| {
        let n = rs.len() as f32;
        let s: Vec<f32> = (0..rs[0].len())
            .map(|k| rs.iter().map(|r| r[k]).sum::<f32>() / n)
            .collect();
        vec![s; rs.len()]
    };
    check_collective_grad("pmean", &|t| pmean(t, "i"), &[4], &[4], &mean_r);
}

#[test]
fn grad_through_all_gather_and_psum_scatter() {
    // all_gather untiled on axis 0: y_d = stack_e x_e, so dx_e = sum_d r_d[e].
    let (m, c) = (2usize, 3usize);
    check_collective_grad(
        "all_gather untiled",
        &|t| all_gather(t, "i", 0, false),
        &[m, c],
        &[3, m, c],
        &|_, rs| {
            (0..3)
                .map(|e| {
                    (0..m * c)
                        .map(|k| rs.iter().map(|r| r[e * m * c + k]).sum())
                        .collect()
                })
                .collect()
        },
    );
    // all_gather tiled on axis 1: y_d = concat_e x_e along columns ([m, 3c]).
    check_collective_grad(
        "all_gather tiled axis 1",
        &|t| all_gather(t, "i", 1, true),
        &[m, c],
        &[m, 3 * c],
        &|_, rs| {
            (0..3)
                .map(|e| {
                    (0..m * c)
                        .map(|k| {
                            let (i, j) = (k / c, k % c);
                            rs.iter().map(|r| r[i * 3 * c + e * c + j]).sum()
                        })
                        .collect()
                })
                .collect()
        },
    );
    // psum_scatter untiled: x_e [3, c], y_d = sum_e x_e[d], so dx_e[d] = r_d.
    check_collective_grad(
        "psum_scatter untiled",
        &|t| psum_scatter(t, "i", 0, false),
        &[3, c],
        &[c],
        &|_, rs| vec![rs.concat(); 3],
    );
    // psum_scatter tiled: x_e [3m, c], y_d = sum_e x_e[d*m..(d+1)*m]: dx_e = concat_d r_d.
    check_collective_grad(
        "psum_scatter tiled",
        &|t| psum_scatter(t, "i", 0, true),
        &[3 * m, c],
        &[m, c],
        &|_, rs| vec![rs.concat(); 3],
    );
}

#[test]
fn grad_through_ppermute() {
    // Non-cyclic: 0 -> 1, 1 -> 2; device 0 receives zeros. dx_src = r_dst, device 2 sends nothing.
    check_collective_grad(
        "ppermute 0->1->2",
        &|t| ppermute(t, "i", &[(0, 1), (1, 2)]),
        &[2, 2],
        &[2, 2],
        &|_, rs| vec![rs[1].clone(), rs[2].clone(), vec![0.0; 4]],
    );
    // Cyclic shift backwards: d -> d - 1.
    check_collective_grad(
        "ppermute cyclic",
        &|t| ppermute(t, "i", &[(0, 2), (1, 0), (2, 1)]),
        &[3],
        &[3],
        &|_, rs| vec![rs[2].clone(), rs[0].clone(), rs[1].clone()],
    );
}

#[test]
fn grad_through_all_to_all() {
    let n = 3usize;
    // Untiled, split 0 / concat 1: x_j [n, m] -> y_i [m, n] with y_i[k, j] = x_j[i, k];
    // dx_j[i, k] = r_i[k, j].
    let m = 2usize;
    check_collective_grad(
        "all_to_all untiled split 0 concat 1",
        &|t| all_to_all(t, "i", 0, 1, false),
        &[n, m],
        &[m, n],
        &|_, rs| {
            (0..n)
                .map(|j| {
                    (0..n * m)
                        .map(|p| {
                            let (i, k) = (p / m, p % m);
                            rs[i][k * n + j]
                        })
                        .collect()
                })
                .collect()
        },
    );
    // Tiled, split 0 / concat 1: x_j [n c, m] -> y_i [c, n m] with
    // y_i[a, j m + k] = x_j[i c + a, k]; dx_j[i c + a, k] = r_i[a, j m + k].
    let c = 2usize;
    check_collective_grad(
        "all_to_all tiled split 0 concat 1",
        &|t| all_to_all(t, "i", 0, 1, true),
        &[n * c, m],
        &[c, n * m],
        &|_, rs| {
            (0..n)
                .map(|j| {
                    (0..n * c * m)
                        .map(|p| {
                            let (row, k) = (p / m, p % m);
                            let (i, a) = (row / c, row % c);
                            rs[i][a * n * m + j * m + k]
                        })
                        .collect()
                })
                .collect()
        },
    );
}

#[test]
fn grad_through_pmax_follows_the_psum_convention() {
    // psum's rule (checked above) makes each device's gradient that of the total loss
    // T = sum_d loss_d. For pmax, T = sum(max_e x_e * sum_d r_d), so dT/dx_e = [x_e is the max] *
    // sum_d r_d (distinct values: no ties).
    check_collective_grad("pmax", &|t| pmax(t, "i"), &[4], &[4], &|xs, rs| {
        (0..xs.len())
            .map(|e| {
                (0..4)
                    .map(|k| {
                        let best = xs.iter().map(|x| x[k]).fold(f32::MIN, f32::max);
                        if xs[e][k] == best {
                            rs.iter().map(|r| r[k]).sum()
                        } else {
                            0.0
                        }
                    })
                    .collect()
            })
            .collect()
    });
}

// ---- 6. vjp ---------------------------------------------------------------------------------------

#[test]
fn vjp_of_a_non_scalar_function_with_given_cotangents() {
    let dev = vulkan();
    let put = |a: Array| Tensor::from(a.to_device(&dev).unwrap());
    let (av, bv) = (f32s(6, 220, -1.5, 1.5), f32s(12, 221, -1.5, 1.5));
    let (c1v, c2v) = (f32s(8, 222, -1.0, 1.0), f32s(6, 223, -1.0, 1.0));
    let f = |t: &[Tensor]| vec![t[0].matmul(&t[1]), t[0].sin()];
    let (ys, pb) = vjp(
        f,
        &[put(arr(av.clone(), &[2, 3])), put(arr(bv.clone(), &[3, 4]))],
    )
    .unwrap();
    assert_eq!(ys.len(), 2);
    // Host: y0 = a @ b, y1 = sin a; da = c1 @ b^T + c2 * cos a, db = a^T @ c1.
    let y0: Vec<f32> = (0..8)
        .map(|p| {
            (0..3)
                .map(|k| av[(p / 4) * 3 + k] * bv[k * 4 + p % 4])
                .sum()
        })
        .collect();
    assert_f32s(&host(&ys[0].to_array().unwrap()), &y0, Tol::REDUCE, "y0");
    let y1: Vec<f32> = av.iter().map(|v| v.sin()).collect();
    assert_f32s(&host(&ys[1].to_array().unwrap()), &y1, ANALYTIC, "y1");
    let da: Vec<f32> = (0..6)
        .map(|p| {
            let (i, k) = (p / 3, p % 3);
            (0..4).map(|j| c1v[i * 4 + j] * bv[k * 4 + j]).sum::<f32>() + c2v[p] * av[p].cos()
        })
        .collect();
    let db: Vec<f32> = (0..12)
        .map(|p| {
            let (k, j) = (p / 4, p % 4);
            (0..2).map(|i| av[i * 3 + k] * c1v[i * 4 + j]).sum()
        })
        .collect();
    let cts = [
        put(arr(c1v.clone(), &[2, 4])),
        put(arr(c2v.clone(), &[2, 3])),
    ];
    let g = pb.apply(&cts).unwrap();
    assert_eq!(g.len(), 2);
    assert_f32s(&host(&g[0].to_array().unwrap()), &da, Tol::REDUCE, "vjp da");
    assert_f32s(&host(&g[1].to_array().unwrap()), &db, Tol::REDUCE, "vjp db");
    // The pullback is reusable and linear: cotangents scaled by -2 give -2x the result; a zero
    // cotangent for the second output drops its term.
    let scaled: Vec<Tensor> = cts.iter().map(|c| c * -2.0).collect();
    let g2 = pb.apply(&scaled).unwrap();
    let da2: Vec<f32> = da.iter().map(|v| v * -2.0).collect();
    assert_f32s(
        &host(&g2[0].to_array().unwrap()),
        &da2,
        Tol::REDUCE,
        "vjp -2 da",
    );
    let g3 = pb
        .apply(&[cts[0].clone(), Tensor::zeros(&[2, 3], DType::F32)])
        .unwrap();
    let da3: Vec<f32> = (0..6)
        .map(|p| {
            let (i, k) = (p / 3, p % 3);
            (0..4).map(|j| c1v[i * 4 + j] * bv[k * 4 + j]).sum()
        })
        .collect();
    assert_f32s(
        &host(&g3[0].to_array().unwrap()),
        &da3,
        Tol::REDUCE,
        "vjp da, zero ct 2",
    );
    assert_f32s(
        &host(&g3[1].to_array().unwrap()),
        &db,
        Tol::REDUCE,
        "vjp db, zero ct 2",
    );
}

#[test]
fn vjp_gives_integer_inputs_zero_cotangents() {
    let xv = f32s(8, 230, -2.0, 2.0);
    let x = Tensor::from(arr(xv.clone(), &[4, 2]));
    let idx = Tensor::from(iarr(vec![3, -1, 0], &[3]));
    let (ys, pb) = vjp(|t: &[Tensor]| vec![t[0].index_take(&t[1], 0)], &[x, idx]).unwrap();
    assert_eq!(ys[0].shape(), &[3, 2]);
    let ct = vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    let g = pb.apply(&[Tensor::from_vec(ct.clone(), &[3, 2])]).unwrap();
    // Rows 3 and -1 (= 3) both scatter into row 3; row 0 gets the last; rows 1, 2 nothing.
    let want = vec![5.0f32, 6.0, 0.0, 0.0, 0.0, 0.0, 1.0 + 3.0, 2.0 + 4.0];
    assert_f32s(
        &host(&g[0].to_array().unwrap()),
        &want,
        Tol::ARITH,
        "take cotangent",
    );
    assert_eq!(g[1].dtype(), DType::I32);
    assert_eq!(g[1].shape(), &[3]);
    assert_eq!(g[1].to_vec::<i32>().unwrap(), vec![0, 0, 0]);
}

#[test]
fn vjp_refuses_mismatched_cotangents() {
    let x = Tensor::from(arr(f32s(6, 240, -2.0, 2.0), &[2, 3]));
    let (_, pb) = vjp(|t: &[Tensor]| vec![t[0].t().exp(), t[0].sum_all()], &[x]).unwrap();
    // Wrong shape for output 0 ([3, 2]).
    let e = pb
        .apply(&[Tensor::zeros(&[2, 3], DType::F32), Tensor::scalar(1.0f32)])
        .expect_err("a [2, 3] cotangent for a [3, 2] output must be refused");
    assert!(
        matches!(e, Error::NotDifferentiable { op: "vjp", .. }),
        "{e:?}"
    );
    assert_mentions(&e, &["cotangent 0", "[2, 3]", "[3, 2]"]);
    // Wrong dtype for output 1.
    let e = pb
        .apply(&[Tensor::zeros(&[3, 2], DType::F32), Tensor::scalar(1i32)])
        .expect_err("an i32 cotangent for an f32 output must be refused");
    assert!(
        matches!(e, Error::NotDifferentiable { op: "vjp", .. }),
        "{e:?}"
    );
    assert_mentions(&e, &["cotangent 1", "i32", "f32"]);
    // Wrong number of cotangents.
    let e = pb
        .apply(&[Tensor::zeros(&[3, 2], DType::F32)])
        .expect_err("one cotangent for two outputs must be refused");
    assert!(matches!(e, Error::Arity { .. }), "{e:?}");
    assert!(e.is_user_error());
}

// ---- 7. errors ------------------------------------------------------------------------------------

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

fn grad_error(g: brigade::Grad<impl Fn(&[Tensor]) -> Vec<Tensor>>, args: &[Array]) -> Error {
    match g.on(&vulkan()).call(args) {
        Err(e) => e,
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

#[test]
fn grad_of_a_non_scalar_output_is_refused() {
    let x = rand_f32(&[3], 250);
    let e = grad_error(grad(|a: &[Tensor]| vec![&a[0] * 2.0]), &[x]);
    assert!(
        matches!(e, Error::NotDifferentiable { op: "grad", .. }),
        "{e:?}"
    );
    assert_mentions(&e, &["grad", "scalar f32", "f32 [3]", "vjp"]);
}

#[test]
fn grad_of_an_integer_output_is_refused() {
    let x = rand_f32(&[3], 251);
    let e = grad_error(
        value_and_grad(|a: &[Tensor]| vec![a[0].cast(DType::I32).sum_all()]),
        &[x],
    );
    assert!(
        matches!(
            e,
            Error::NotDifferentiable {
                op: "value_and_grad",
                ..
            }
        ),
        "{e:?}"
    );
    assert_mentions(&e, &["value_and_grad", "scalar f32", "i32 []"]);
}

#[test]
fn grad_with_respect_to_an_integer_argument_is_refused() {
    let x = rand_f32(&[3], 252);
    let k = rand_i32(&[2], 253, -3, 3);
    let e = grad_error(
        grad(|a: &[Tensor]| vec![a[0].sum_all()]).argnums(&[0, 1]),
        &[x, k],
    );
    assert!(matches!(e, Error::NotDifferentiable { .. }), "{e:?}");
    assert_mentions(&e, &["argument 1", "i32 [2]", "f32"]);
}

#[test]
fn argnums_out_of_range_is_refused() {
    let x = rand_f32(&[3], 254);
    let y = rand_f32(&[3], 255);
    let e = grad_error(
        grad(|a: &[Tensor]| vec![(&a[0] * &a[1]).sum_all()]).argnums(&[2]),
        &[x, y],
    );
    assert!(matches!(e, Error::NotDifferentiable { .. }), "{e:?}");
    assert_mentions(&e, &["argument 2", "only 2 arguments"]);
}

#[test]
fn multiple_outputs_without_has_aux_are_refused() {
    let x = rand_f32(&[3], 256);
    let e = grad_error(
        grad(|a: &[Tensor]| vec![a[0].sum_all(), a[0].exp()]),
        std::slice::from_ref(&x),
    );
    assert!(matches!(e, Error::NotDifferentiable { .. }), "{e:?}");
    assert_mentions(&e, &["2 outputs", "has_aux"]);
    // The same error surfaces through an enclosing jit.
    let j = jit(|a: &[Tensor]| grad(|b: &[Tensor]| vec![b[0].sum_all(), b[0].exp()]).apply(a));
    let e = j.on(&vulkan()).call(&[x]).expect_err("jit(grad) must fail");
    assert!(matches!(e, Error::NotDifferentiable { .. }), "{e:?}");
    assert_mentions(&e, &["2 outputs", "has_aux"]);
}
