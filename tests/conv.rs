//! `conv_general_dilated`: the GPU kernel (implicit GEMM) against the CPU reference on both
//! adapters, the reference and the gradients against vectors printed by JAX 0.10.2
//! (`scripts/jax_conv_vectors.py` → `tests/data/jax_conv.rs`), the VJP rules against f64 finite
//! differences, the batching rules against per-example evaluation, and the typed errors.
//!
//! Tolerances: forward outputs are sums of at most ~60 f32 products of values in [-1, 1) (the
//! reference accumulates in f64), so `Tol::REDUCE` (1e-4 relative and absolute) leaves a wide
//! margin over the ~1e-6 observed while any wrong tap or lost term is off by O(0.1). JAX computes
//! in f32 too (precision HIGHEST), so its vectors are compared with the same tolerance. Gradients
//! against f64 central differences use `common::fd::FD` (see tests/grad.rs for the argument).

mod common;
#[path = "data/jax_conv.rs"]
mod jax;

use brigade::ops::{ConvDims, ConvParams};
use brigade::{Array, ConvOptions, DType, Error, HostArray, Padding, Tensor, grad, jit};
use common::batching::check_vmap;
use common::fd::{assert_fd, central_diff};
use common::*;

/// One convolution to check.
#[derive(Clone)]
struct Case {
    name: &'static str,
    x: Vec<usize>,
    k: Vec<usize>,
    opts: ConvOptions,
}

fn case(name: &'static str, x: &[usize], k: &[usize], opts: ConvOptions) -> Case {
    Case {
        name,
        x: x.to_vec(),
        k: k.to_vec(),
        opts,
    }
}

fn cases() -> Vec<Case> {
    let o = ConvOptions::new;
    vec![
        case("1d plain", &[2, 3, 9], &[5, 3, 3], o(&[], Padding::Valid)),
        case(
            "1d NWC stride 2 same",
            &[3, 10, 2],
            &[4, 2, 6],
            o(&[2], Padding::Same).dimension_numbers("NWC", "WIO", "NWC"),
        ),
        case(
            "1d lhs dilation, negative padding",
            &[1, 2, 6],
            &[3, 2, 2],
            o(&[1], Padding::Explicit(vec![(2, -1)])).lhs_dilation(&[3]),
        ),
        case(
            "2d NCHW valid",
            &[2, 3, 6, 5],
            &[4, 3, 3, 2],
            o(&[], Padding::Valid),
        ),
        case(
            "2d NCHW strided same, rhs dilation",
            &[2, 3, 7, 6],
            &[6, 3, 3, 2],
            o(&[2, 2], Padding::Same).rhs_dilation(&[1, 2]),
        ),
        case(
            "2d NHWC HWIO explicit, both dilations",
            &[1, 5, 4, 3],
            &[2, 3, 3, 5],
            o(&[1, 2], Padding::Explicit(vec![(1, 2), (0, 1)]))
                .lhs_dilation(&[2, 1])
                .rhs_dilation(&[1, 2])
                .dimension_numbers("NHWC", "HWIO", "NHWC"),
        ),
        case(
            "2d groups 2",
            &[2, 4, 5, 5],
            &[6, 2, 2, 3],
            o(&[1, 1], Padding::Same).feature_group_count(2),
        ),
        case(
            "2d depthwise NHWC",
            &[2, 5, 6, 4],
            &[3, 3, 1, 4],
            o(&[2, 1], Padding::Same)
                .dimension_numbers("NHWC", "HWIO", "NHWC")
                .feature_group_count(4),
        ),
        case(
            "2d mixed layouts",
            &[3, 2, 5, 4],
            &[3, 3, 3, 7],
            o(&[1, 1], Padding::Explicit(vec![(1, 1), (0, 0)]))
                .dimension_numbers("CNHW", "IHWO", "NHWC"),
        ),
        case(
            "3d NCDHW",
            &[1, 2, 4, 5, 3],
            &[3, 2, 2, 3, 2],
            o(&[1, 2, 1], Padding::Explicit(vec![(1, 0), (1, 1), (0, 1)])),
        ),
        case(
            "3d NDHWC groups, dilation",
            &[2, 4, 3, 5, 4],
            &[2, 2, 2, 2, 4],
            o(&[1, 1, 2], Padding::Valid)
                .rhs_dilation(&[2, 1, 1])
                .dimension_numbers("NDHWC", "DHWIO", "NDHWC")
                .feature_group_count(2),
        ),
    ]
}

fn conv_of(opts: &ConvOptions) -> impl Fn(&[Tensor]) -> Vec<Tensor> + '_ {
    move |a: &[Tensor]| vec![a[0].conv_general_dilated(&a[1], opts)]
}

fn args_of(c: &Case, seed: u64) -> Vec<Array> {
    vec![
        rand_f32_in(&c.x, seed, -1.0, 1.0),
        rand_f32_in(&c.k, seed + 1, -1.0, 1.0),
    ]
}

#[test]
fn gpu_matches_reference_on_both_adapters() {
    for (i, c) in cases().iter().enumerate() {
        let want = check_on_all(conv_of(&c.opts), &args_of(c, 10 + i as u64), Tol::REDUCE);
        assert!(
            want[0].to_f64().iter().any(|v| v.abs() > 0.1),
            "{}: the reference output is ~0: the check would be vacuous",
            c.name
        );
    }
}

#[test]
fn tile_edges_and_single_outputs() {
    // Rows (batch x positions) and columns (features per group) not multiples of the register
    // tile, a 1x1 output, a 1x1 kernel, and more output features than one column tile.
    let o = ConvOptions::new;
    for c in [
        case(
            "one output",
            &[1, 2, 3, 3],
            &[1, 2, 3, 3],
            o(&[], Padding::Valid),
        ),
        case(
            "1x1 kernel",
            &[3, 5, 3, 1],
            &[9, 5, 1, 1],
            o(&[], Padding::Valid),
        ),
        case("odd rows", &[1, 1, 7], &[3, 1, 1], o(&[2], Padding::Same)),
        case(
            "many features",
            &[1, 3, 4, 4],
            &[13, 3, 2, 2],
            o(&[], Padding::Valid),
        ),
    ] {
        check_on_all(conv_of(&c.opts), &args_of(&c, 3), Tol::REDUCE);
    }
}

// ---- JAX vectors -------------------------------------------------------------------------------

struct JaxCase {
    name: &'static str,
    specs: [&'static str; 3],
    strides: &'static [usize],
    padding: &'static [(i64, i64)],
    padding_kind: &'static str,
    lhs_dilation: &'static [usize],
    rhs_dilation: &'static [usize],
    groups: usize,
    data: [(&'static [u32], &'static [usize]); 6],
}

/// One [`JaxCase`] per configuration of `tests/data/jax_conv.rs`, from its `PREFIX_*` constants.
mod jax_consts {
    use super::JaxCase;
    use super::jax::*;

    macro_rules! def {
        ($f:ident, $name:literal, $specs:ident, $strides:ident, $pad:ident, $kind:ident, $ld:ident, $rd:ident, $g:ident,
         $x:ident, $xs:ident, $k:ident, $ks:ident, $y:ident, $ys:ident, $ct:ident, $cts:ident, $dx:ident, $dxs:ident, $dk:ident, $dks:ident) => {
            #[allow(non_snake_case)]
            pub fn $f() -> JaxCase {
                JaxCase {
                    name: $name,
                    specs: $specs,
                    strides: $strides,
                    padding: $pad,
                    padding_kind: $kind,
                    lhs_dilation: $ld,
                    rhs_dilation: $rd,
                    groups: $g,
                    data: [
                        ($x, $xs),
                        ($k, $ks),
                        ($y, $ys),
                        ($ct, $cts),
                        ($dx, $dxs),
                        ($dk, $dks),
                    ],
                }
            }
        };
    }

    def!(
        NCHW_SAME,
        "NCHW same",
        NCHW_SAME_SPECS,
        NCHW_SAME_STRIDES,
        NCHW_SAME_PADDING,
        NCHW_SAME_PADDING_IS_STRING,
        NCHW_SAME_LHS_DILATION,
        NCHW_SAME_RHS_DILATION,
        NCHW_SAME_GROUPS,
        NCHW_SAME_X,
        NCHW_SAME_X_SHAPE,
        NCHW_SAME_K,
        NCHW_SAME_K_SHAPE,
        NCHW_SAME_Y,
        NCHW_SAME_Y_SHAPE,
        NCHW_SAME_CT,
        NCHW_SAME_CT_SHAPE,
        NCHW_SAME_DX,
        NCHW_SAME_DX_SHAPE,
        NCHW_SAME_DK,
        NCHW_SAME_DK_SHAPE
    );
    def!(
        NHWC_GROUPS,
        "NHWC groups",
        NHWC_GROUPS_SPECS,
        NHWC_GROUPS_STRIDES,
        NHWC_GROUPS_PADDING,
        NHWC_GROUPS_PADDING_IS_STRING,
        NHWC_GROUPS_LHS_DILATION,
        NHWC_GROUPS_RHS_DILATION,
        NHWC_GROUPS_GROUPS,
        NHWC_GROUPS_X,
        NHWC_GROUPS_X_SHAPE,
        NHWC_GROUPS_K,
        NHWC_GROUPS_K_SHAPE,
        NHWC_GROUPS_Y,
        NHWC_GROUPS_Y_SHAPE,
        NHWC_GROUPS_CT,
        NHWC_GROUPS_CT_SHAPE,
        NHWC_GROUPS_DX,
        NHWC_GROUPS_DX_SHAPE,
        NHWC_GROUPS_DK,
        NHWC_GROUPS_DK_SHAPE
    );
    def!(
        NWC_STRIDED,
        "NWC strided",
        NWC_STRIDED_SPECS,
        NWC_STRIDED_STRIDES,
        NWC_STRIDED_PADDING,
        NWC_STRIDED_PADDING_IS_STRING,
        NWC_STRIDED_LHS_DILATION,
        NWC_STRIDED_RHS_DILATION,
        NWC_STRIDED_GROUPS,
        NWC_STRIDED_X,
        NWC_STRIDED_X_SHAPE,
        NWC_STRIDED_K,
        NWC_STRIDED_K_SHAPE,
        NWC_STRIDED_Y,
        NWC_STRIDED_Y_SHAPE,
        NWC_STRIDED_CT,
        NWC_STRIDED_CT_SHAPE,
        NWC_STRIDED_DX,
        NWC_STRIDED_DX_SHAPE,
        NWC_STRIDED_DK,
        NWC_STRIDED_DK_SHAPE
    );
    def!(
        NHWC_VALID,
        "NHWC valid",
        NHWC_VALID_SPECS,
        NHWC_VALID_STRIDES,
        NHWC_VALID_PADDING,
        NHWC_VALID_PADDING_IS_STRING,
        NHWC_VALID_LHS_DILATION,
        NHWC_VALID_RHS_DILATION,
        NHWC_VALID_GROUPS,
        NHWC_VALID_X,
        NHWC_VALID_X_SHAPE,
        NHWC_VALID_K,
        NHWC_VALID_K_SHAPE,
        NHWC_VALID_Y,
        NHWC_VALID_Y_SHAPE,
        NHWC_VALID_CT,
        NHWC_VALID_CT_SHAPE,
        NHWC_VALID_DX,
        NHWC_VALID_DX_SHAPE,
        NHWC_VALID_DK,
        NHWC_VALID_DK_SHAPE
    );
    def!(
        NCDHW_DEPTHWISE,
        "NCDHW depthwise",
        NCDHW_DEPTHWISE_SPECS,
        NCDHW_DEPTHWISE_STRIDES,
        NCDHW_DEPTHWISE_PADDING,
        NCDHW_DEPTHWISE_PADDING_IS_STRING,
        NCDHW_DEPTHWISE_LHS_DILATION,
        NCDHW_DEPTHWISE_RHS_DILATION,
        NCDHW_DEPTHWISE_GROUPS,
        NCDHW_DEPTHWISE_X,
        NCDHW_DEPTHWISE_X_SHAPE,
        NCDHW_DEPTHWISE_K,
        NCDHW_DEPTHWISE_K_SHAPE,
        NCDHW_DEPTHWISE_Y,
        NCDHW_DEPTHWISE_Y_SHAPE,
        NCDHW_DEPTHWISE_CT,
        NCDHW_DEPTHWISE_CT_SHAPE,
        NCDHW_DEPTHWISE_DX,
        NCDHW_DEPTHWISE_DX_SHAPE,
        NCDHW_DEPTHWISE_DK,
        NCDHW_DEPTHWISE_DK_SHAPE
    );
}

fn jax_cases() -> Vec<JaxCase> {
    vec![
        jax_consts::NCHW_SAME(),
        jax_consts::NHWC_GROUPS(),
        jax_consts::NWC_STRIDED(),
        jax_consts::NHWC_VALID(),
        jax_consts::NCDHW_DEPTHWISE(),
    ]
}

fn bits(data: &[u32], shape: &[usize]) -> HostArray {
    let v: Vec<f32> = data.iter().map(|&b| f32::from_bits(b)).collect();
    HostArray::from_vec(v, shape).unwrap()
}

impl JaxCase {
    fn opts(&self) -> ConvOptions {
        let padding = match self.padding_kind {
            "SAME" => Padding::Same,
            "VALID" => Padding::Valid,
            _ => Padding::Explicit(self.padding.to_vec()),
        };
        ConvOptions::new(self.strides, padding)
            .lhs_dilation(self.lhs_dilation)
            .rhs_dilation(self.rhs_dilation)
            .dimension_numbers(self.specs[0], self.specs[1], self.specs[2])
            .feature_group_count(self.groups)
    }
    fn host(&self, i: usize) -> HostArray {
        bits(self.data[i].0, self.data[i].1)
    }
    fn array(&self, i: usize) -> Array {
        common::batching::to_array(&self.host(i))
    }
}

#[test]
fn padding_resolves_as_jax() {
    for c in jax_cases() {
        let p = c
            .opts()
            .params(c.data[0].1, c.data[1].1)
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
        assert_eq!(p.padding, c.padding, "{}: padding", c.name);
    }
}

#[test]
fn forward_and_grads_match_jax_on_both_adapters() {
    for c in jax_cases() {
        let opts = c.opts();
        let (x, k, ct) = (c.array(0), c.array(1), c.array(3));
        // Forward: reference and both adapters against JAX.
        let want = check_on_all(conv_of(&opts), &[x.clone(), k.clone()], Tol::REDUCE);
        assert_close(
            &want[0],
            &c.host(2),
            Tol::REDUCE,
            &format!("{}: reference vs JAX", c.name),
        );
        // Gradients of sum(conv(x, k) * ct): the VJP with cotangent ct.
        let loss =
            |a: &[Tensor]| vec![(&a[0].conv_general_dilated(&a[1], &opts) * &a[2]).sum_all()];
        for dev in gpu_devices() {
            let _g = device_guard(&dev);
            let g = grad(&loss)
                .argnums(&[0, 1])
                .on(&dev)
                .call(&[x.clone(), k.clone(), ct.clone()])
                .unwrap_or_else(|e| panic!("{} on {}: grad failed: {e}", c.name, dev.name()));
            for (j, want) in [(0usize, c.host(4)), (1, c.host(5))] {
                assert_close(
                    &host(&g[j]),
                    &want,
                    Tol::REDUCE,
                    &format!("{} on {}: d/d {} vs JAX", c.name, dev.name(), ["x", "k"][j]),
                );
            }
        }
    }
}

// ---- gradients vs finite differences -----------------------------------------------------------

#[test]
fn grads_match_f64_finite_differences() {
    let o = ConvOptions::new;
    let fd_cases = [
        case(
            "strided, padded, dilated",
            &[2, 2, 6, 5],
            &[3, 2, 2, 3],
            o(&[2, 1], Padding::Explicit(vec![(1, 2), (2, 0)]))
                .lhs_dilation(&[1, 2])
                .rhs_dilation(&[2, 1]),
        ),
        case(
            "grouped NHWC same",
            &[1, 4, 5, 4],
            &[3, 2, 2, 4],
            o(&[2, 2], Padding::Same)
                .dimension_numbers("NHWC", "HWIO", "NHWC")
                .feature_group_count(2),
        ),
        case(
            "1d padding larger than the window",
            &[2, 1, 5],
            &[2, 1, 2],
            o(&[3], Padding::Explicit(vec![(3, 4)])),
        ),
    ];
    let dev = device_of("vulkan");
    for (i, c) in fd_cases.iter().enumerate() {
        let opts = c.opts.clone();
        let shape_of = |a: &[Array]| {
            let j = jit(conv_of(&opts));
            let g = j.graph(a).unwrap();
            g.aval(g.outputs[0]).shape.clone()
        };
        let mut args = args_of(c, 40 + i as u64);
        let ys = shape_of(&args);
        args.push(rand_f32_in(&ys, 90 + i as u64, -1.0, 1.0));
        let loss =
            |a: &[Tensor]| vec![(&a[0].conv_general_dilated(&a[1], &opts) * &a[2]).sum_all()];
        let g = grad(&loss)
            .argnums(&[0, 1])
            .on(&dev)
            .call(&args)
            .unwrap_or_else(|e| panic!("{}: grad failed: {e}", c.name));
        for (k, gk) in g.iter().enumerate() {
            let fd = central_diff(&loss, &args, k);
            assert!(
                fd.iter().any(|v| v.abs() > 1e-2),
                "{}: finite differences w.r.t. argument {k} are all ~0",
                c.name
            );
            assert_fd(
                &host(gk),
                &fd,
                &format!(
                    "{}: d/d arg {k} on vulkan vs f64 central differences",
                    c.name
                ),
            );
        }
    }
}

// ---- batching ----------------------------------------------------------------------------------

#[test]
fn vmap_matches_per_example() {
    let opts = ConvOptions::new(&[2, 1], Padding::Same)
        .rhs_dilation(&[1, 2])
        .feature_group_count(2);
    let nhwc = ConvOptions::new(&[1, 1], Padding::Valid).dimension_numbers("NHWC", "HWIO", "NHWC");
    let f = conv_of(&opts);
    let g = conv_of(&nhwc);
    // x [2, 4, 5, 5] and k [6, 2, 2, 3] per example; a batch of 3.
    let xb = rand_f32_in(&[3, 2, 4, 5, 5], 1, -1.0, 1.0);
    let kb = rand_f32_in(&[3, 6, 2, 2, 3], 2, -1.0, 1.0);
    let x = rand_f32_in(&[2, 4, 5, 5], 3, -1.0, 1.0);
    let k = rand_f32_in(&[6, 2, 2, 3], 4, -1.0, 1.0);
    check_vmap(
        "x batched",
        &f,
        &[Some(0), None],
        &[Some(0)],
        &[xb.clone(), k],
        Tol::REDUCE,
    );
    check_vmap(
        "k batched",
        &f,
        &[None, Some(0)],
        &[Some(0)],
        &[x, kb.clone()],
        Tol::REDUCE,
    );
    check_vmap(
        "both batched",
        &f,
        &[Some(0), Some(0)],
        &[Some(0)],
        &[xb, kb],
        Tol::REDUCE,
    );
    // NHWC with the batch axis in the middle of the input and at the end of the output.
    let xm = rand_f32_in(&[2, 4, 3, 5, 3], 5, -1.0, 1.0);
    let km = rand_f32_in(&[2, 2, 3, 4, 4], 6, -1.0, 1.0);
    check_vmap(
        "NHWC x axis 1",
        &g,
        &[Some(1), None],
        &[Some(3)],
        &[xm.clone(), rand_f32_in(&[2, 2, 3, 4], 7, -1.0, 1.0)],
        Tol::REDUCE,
    );
    check_vmap(
        "NHWC both, k axis 4",
        &g,
        &[Some(1), Some(4)],
        &[Some(0)],
        &[xm, km],
        Tol::REDUCE,
    );
}

// ---- errors and printing -----------------------------------------------------------------------

fn err_of(x: &[usize], k: &[usize], opts: &ConvOptions, dt: DType) -> Error {
    let x = Tensor::ones(x, dt);
    let k = Tensor::ones(k, dt);
    let y = x.conv_general_dilated(&k, opts);
    y.error()
        .cloned()
        .unwrap_or_else(|| panic!("expected an error, got shape {:?}", y.shape()))
}

/// A window longer than the (padded) input fits nowhere: JAX 0.10.2 gives an empty spatial axis,
/// `conv_general_dilated(ones((1, 3, 2, 5)), ones((4, 3, 3, 3)), (1, 1), 'VALID').shape ==
/// (1, 4, 0, 3)`, and zero gradients for both operands; so does brigade, on both adapters and the
/// reference.
#[test]
fn a_window_longer_than_the_input_gives_an_empty_axis_as_jax() {
    let valid = ConvOptions::new(&[], Padding::Valid);
    let args = [rand_f32(&[1, 3, 2, 5], 70), rand_f32(&[4, 3, 3, 3], 71)];
    let out = check_on_all(conv_of(&valid), &args, Tol::EXACT);
    assert_eq!(out[0].shape, vec![1, 4, 0, 3]);
    let loss = |a: &[Tensor]| {
        vec![
            (a[0].conv_general_dilated(&a[1], &ConvOptions::new(&[], Padding::Valid)) * 2.0)
                .sum_all(),
        ]
    };
    let grads = check_on_all(
        move |a: &[Tensor]| grad(loss).argnums(&[0, 1]).apply(a),
        &args,
        Tol::EXACT,
    );
    for (g, want) in grads.iter().zip([&[1usize, 3, 2, 5][..], &[4, 3, 3, 3]]) {
        assert_eq!(g.shape, want.to_vec());
        assert!(g.to_f64().iter().all(|&v| v == 0.0), "{g:?}");
    }
}

#[test]
fn typed_errors_name_shapes_and_fix() {
    let valid = ConvOptions::new(&[], Padding::Valid);
    let e = err_of(&[1, 3, 5, 5], &[4, 2, 3, 3], &valid, DType::F32);
    let m = e.to_string();
    assert!(matches!(e, Error::MatmulShape { .. }), "{m}");
    assert!(
        m.contains("[1, 3, 5, 5]")
            && m.contains("[4, 2, 3, 3]")
            && m.contains("feature_group_count"),
        "{m}"
    );

    let e = err_of(
        &[1, 4, 5, 5],
        &[3, 2, 3, 3],
        &valid.clone().feature_group_count(2),
        DType::F32,
    );
    assert!(e.to_string().contains("multiple of 2"), "{e}");

    // Padding that crops more than the input has is refused, as JAX refuses it.
    let crop = ConvOptions::new(&[], Padding::Explicit(vec![(-2, -2), (0, 0)]));
    let e = err_of(&[1, 3, 3, 5], &[4, 3, 1, 1], &crop, DType::F32);
    assert!(e.to_string().contains("crops more than"), "{e}");

    let e = err_of(&[1, 3, 5], &[4, 3, 3, 3], &valid, DType::F32);
    assert!(e.to_string().contains("same rank"), "{e}");

    let e = err_of(&[1, 3, 5, 5], &[4, 3, 3, 3], &valid, DType::I32);
    assert!(matches!(e, Error::BadDType { .. }), "{e}");
    assert!(e.to_string().contains("f32"), "{e}");

    let x = Tensor::ones(&[1, 3, 5, 5], DType::F32);
    let k = Tensor::ones(&[4, 3, 3, 3], DType::F64);
    let e = x.conv(&k, &[], Padding::Valid).error().cloned().unwrap();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");

    let e = err_of(
        &[1, 3, 5, 5],
        &[4, 3, 3, 3],
        &valid.clone().dimension_numbers("NCHW", "OIH", "NCHW"),
        DType::F32,
    );
    assert!(matches!(e, Error::BadShapeArg { .. }), "{e}");

    let e = err_of(
        &[1, 3, 5, 5],
        &[4, 3, 3, 3],
        &ConvOptions::new(&[2], Padding::Valid),
        DType::F32,
    );
    assert!(e.to_string().contains("one per spatial dimension"), "{e}");

    let e = err_of(
        &[1, 3, 5, 5],
        &[4, 3, 3, 3],
        &ConvOptions::new(&[], Padding::Same).lhs_dilation(&[2, 2]),
        DType::F32,
    );
    assert!(e.to_string().contains("Padding::Explicit"), "{e}");

    // f64 runs on the cpu device only; on a GPU device the error names the fix.
    let dev = device_of("vulkan");
    let f = conv_of(&valid);
    let args = [
        common::fd::widen(&rand_f32(&[1, 2, 4, 4], 1)),
        common::fd::widen(&rand_f32(&[2, 2, 2, 2], 2)),
    ];
    let e = jit(&f).on(&dev).call(&args).unwrap_err();
    assert!(e.to_string().contains("f64"), "{e}");
}

#[test]
fn prints_like_jax() {
    let c = &cases()[5];
    let g = jit(conv_of(&c.opts)).graph(&args_of(c, 1)).unwrap();
    let text = g.to_string();
    assert!(
        text.contains("conv_general_dilated[window_strides=[1, 2] padding=[(1, 2), (0, 1)] lhs_dilation=[2, 1] rhs_dilation=[1, 2] dimension_numbers=ConvDimensionNumbers(lhs_spec=[0, 3, 1, 2], rhs_spec=[3, 2, 0, 1], out_spec=[0, 3, 1, 2]) feature_group_count=1"),
        "{text}"
    );
    // The primitive's parameters are public for those who build them directly.
    let p = ConvParams::plain(2);
    assert_eq!(p.dims, ConvDims::channels_first(2));
}

#[test]
fn second_order_and_per_example_grads() {
    // The VJP rules are convolutions (and a gather for the flip), so they differentiate and batch
    // again: d/dk of sum(dx^2), dx the input gradient, against f64 finite differences, and
    // per-example kernel gradients (vmap of grad, as data-parallel training computes them)
    // against per-example evaluation.
    let opts = ConvOptions::new(&[2], Padding::Explicit(vec![(1, 2)])).rhs_dilation(&[2]);
    let inner = |a: &[Tensor]| vec![(&a[0].conv_general_dilated(&a[1], &opts) * &a[2]).sum_all()];
    let second = |a: &[Tensor]| {
        let dx = grad(&inner).argnums(&[0]).apply(a);
        vec![dx[0].square().sum_all()]
    };
    let args = vec![
        rand_f32_in(&[2, 2, 7], 1, -1.0, 1.0),
        rand_f32_in(&[4, 2, 2], 2, -1.0, 1.0),
        rand_f32_in(&[2, 4, 4], 3, -1.0, 1.0),
    ];
    let dev = device_of("vulkan");
    let g = grad(&second)
        .argnums(&[1])
        .on(&dev)
        .call(&args)
        .unwrap_or_else(|e| panic!("second-order grad: {e}"));
    // sum(dx^2) is quadratic in k (dx is linear in k), so central differences are exact for any
    // step: a step of 0.5 in f32 on the cpu device leaves only f32 rounding (~1e-6 relative),
    // and `Tol::REDUCE` fails any wrong second-order rule, which is off by O(|grad|). (The f64
    // differences of common::fd cannot be used: the inner grad takes f32 arguments only.)
    let cpu = jit(&second).on(&devices_with("cpu:1")[0]);
    let k0 = common::fd::vals(&args[1]);
    let eval = |k: Vec<f32>| -> f64 {
        let mut a = args.clone();
        a[1] = Array::from_vec(k, &[4, 2, 2]).unwrap();
        common::fd::vals(&cpu.call(&a).unwrap()[0])[0] as f64
    };
    let fd: Vec<f32> = (0..k0.len())
        .map(|i| {
            let (mut p, mut m) = (k0.clone(), k0.clone());
            p[i] += 0.5;
            m[i] -= 0.5;
            (eval(p) - eval(m)) as f32
        })
        .collect();
    assert!(
        fd.iter().any(|v| v.abs() > 1e-2),
        "vacuous second-order check"
    );
    assert_f32s(
        &host(&g[0]),
        &fd,
        Tol::REDUCE,
        "d/dk sum(dx^2) on vulkan vs exact central differences",
    );

    let per_example = |a: &[Tensor]| grad(&inner).argnums(&[1]).apply(a);
    let xb = rand_f32_in(&[3, 2, 2, 7], 4, -1.0, 1.0);
    let ctb = rand_f32_in(&[3, 2, 4, 4], 5, -1.0, 1.0);
    check_vmap(
        "per-example kernel grads",
        per_example,
        &[Some(0), None, Some(0)],
        &[Some(0)],
        &[xb, args[1].clone(), ctb],
        Tol::REDUCE,
    );
}
