//! Round-2 probe (temporary, untracked).
mod common;
use brigade::numpy as jnp;
use brigade::optim::{Adam, Sgd};
use brigade::{Array, ConvOptions, DType, Device, Padding, Tensor, Window, WindowOp, grad, jit, vmap};
use brigade::nn;
use brigade::ops::DotDims;
use std::io::Write;

const D: &str = "/tmp/round2";

fn load(name: &str) -> Array {
    let meta = std::fs::read_to_string(format!("{D}/in/{name}.meta")).unwrap();
    let mut it = meta.split_whitespace();
    let dt = it.next().unwrap().to_string();
    let shape: Vec<usize> = it.map(|s| s.parse().unwrap()).collect();
    let bytes = std::fs::read(format!("{D}/in/{name}.bin")).unwrap();
    match dt.as_str() {
        "float32" => Array::from_vec(bytes.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<f32>>(), &shape).unwrap(),
        "int32" => Array::from_vec(bytes.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<i32>>(), &shape).unwrap(),
        _ => panic!("{dt}"),
    }
}

fn save(dev: &str, name: &str, a: &Array) {
    let dir = format!("{D}/out/{dev}");
    std::fs::create_dir_all(&dir).unwrap();
    let v: Vec<f64> = match a.dtype() {
        DType::F32 => a.to_vec::<f32>().unwrap().into_iter().map(|x| x as f64).collect(),
        DType::F64 => a.to_vec::<f64>().unwrap(),
        DType::I32 => a.to_vec::<i32>().unwrap().into_iter().map(|x| x as f64).collect(),
        DType::U32 => a.to_vec::<u32>().unwrap().into_iter().map(|x| x as f64).collect(),
        DType::Bool => a.to_vec::<bool>().unwrap().into_iter().map(|x| x as u8 as f64).collect(),
        #[allow(unreachable_patterns)]
        d => panic!("{d:?}"),
    };
    let mut f = std::fs::File::create(format!("{dir}/{name}.bin")).unwrap();
    for x in &v {
        f.write_all(&x.to_le_bytes()).unwrap();
    }
    let shape: Vec<String> = a.shape().iter().map(|s| s.to_string()).collect();
    std::fs::write(format!("{dir}/{name}.meta"), format!("{:?} {}", a.dtype(), shape.join(" "))).unwrap();
}

fn err(dev: &str, case: &str, e: String) {
    let dir = format!("{D}/out/{dev}");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(format!("{dir}/{case}.err"), &e).unwrap();
    eprintln!("ERROR {dev} {case}: {e}");
}

fn run_jit<F: Fn(&[Tensor]) -> Vec<Tensor>>(dev: &Device, dn: &str, case: &str, ins: &[&str], f: F) {
    let args: Vec<Array> = ins.iter().map(|n| load(n)).collect();
    let t = std::time::Instant::now();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| jit(f).on(dev).call(&args)));
    match r {
        Ok(Ok(outs)) => {
            for (i, o) in outs.iter().enumerate() {
                save(dn, &format!("{case}_{i}"), o)
            }
        }
        Ok(Err(e)) => err(dn, case, format!("{e}")),
        Err(p) => err(dn, case, format!("PANIC {:?}", p.downcast_ref::<String>().cloned().or(p.downcast_ref::<&str>().map(|s| s.to_string())))),
    }
    eprintln!("{dn} {case} {:?}", t.elapsed());
}

fn run_grad<F: Fn(&[Tensor]) -> Vec<Tensor>>(dev: &Device, dn: &str, case: &str, ins: &[&str], argnums: &[usize], off: usize, f: F) {
    let args: Vec<Array> = ins.iter().map(|n| load(n)).collect();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| grad(f).argnums(argnums).on(dev).call(&args)));
    match r {
        Ok(Ok(outs)) => {
            for (i, o) in outs.iter().enumerate() {
                save(dn, &format!("{case}_{}", i + off), o)
            }
        }
        Ok(Err(e)) => err(dn, case, format!("grad: {e}")),
        Err(p) => err(dn, case, format!("grad PANIC {:?}", p.downcast_ref::<String>().cloned().or(p.downcast_ref::<&str>().map(|s| s.to_string())))),
    }
}

fn conv_opts() -> Vec<(&'static str, ConvOptions)> {
    let o = ConvOptions::new;
    vec![
        ("c1", o(&[2, 1], Padding::Same).rhs_dilation(&[1, 2]).feature_group_count(2)),
        ("c2", o(&[1, 2], Padding::Explicit(vec![(2, 1), (0, 2)])).lhs_dilation(&[2, 1]).feature_group_count(4).dimension_numbers("NHWC", "HWIO", "NHWC")),
        ("c3", o(&[3], Padding::Explicit(vec![(-2, 3)])).rhs_dilation(&[3]).lhs_dilation(&[2])),
        ("c4", o(&[2, 2, 2], Padding::Same)),
        ("c5", o(&[1, 1], Padding::Same).dimension_numbers("NHWC", "OIHW", "NCHW")),
        ("c6", o(&[3, 3], Padding::Same)),
        ("c7", o(&[2, 3], Padding::Explicit(vec![(2, 2), (0, 1)])).lhs_dilation(&[2, 2]).rhs_dilation(&[2, 1]).feature_group_count(3)),
    ]
}

fn all_cases(dev: &Device, dn: &str, only: &str) {
    let want = |g: &str| only.is_empty() || only.split(',').any(|o| o == g);
    if want("conv") {
        for (c, opts) in conv_opts() {
            let (x, k) = (format!("{c}_x"), format!("{c}_k"));
            let o2 = opts.clone();
            run_jit(dev, dn, c, &[&x, &k], move |a| vec![a[0].conv_general_dilated(&a[1], &opts)]);
            run_grad(dev, dn, c, &[&x, &k], &[0, 1], 1, move |a| {
                let y = a[0].conv_general_dilated(&a[1], &o2);
                vec![(&y * &y).sum_all() * 0.5]
            });
        }
    }
    if want("pool") {
        let same = Padding::Same;
        run_jit(dev, dn, "p1", &["p1_x"], |a| vec![nn::max_pool(&a[0], &[3, 2], &[2, 2], &Padding::Same, nn::Layout::Nchw)]);
        run_grad(dev, dn, "p1", &["p1_x", "p1_w"], &[0], 1, |a| vec![(&nn::max_pool(&a[0], &[3, 2], &[2, 2], &Padding::Same, nn::Layout::Nchw) * &a[1]).sum_all()]);
        let _ = same;
        run_jit(dev, dn, "p2", &["p2_x"], |a| vec![
            nn::avg_pool(&a[0], &[3, 3], &[2, 1], &Padding::Same, nn::Layout::Nhwc, true),
            Tensor::scalar(0.0f32),
            nn::avg_pool(&a[0], &[3, 3], &[2, 1], &Padding::Same, nn::Layout::Nhwc, false),
        ]);
        run_grad(dev, dn, "p2g1", &["p2_x", "p2_w"], &[0], 0, |a| vec![(&nn::avg_pool(&a[0], &[3, 3], &[2, 1], &Padding::Same, nn::Layout::Nhwc, true) * &a[1]).sum_all()]);
        run_grad(dev, dn, "p2g3", &["p2_x", "p2_w"], &[0], 0, |a| vec![(&nn::avg_pool(&a[0], &[3, 3], &[2, 1], &Padding::Same, nn::Layout::Nhwc, false) * &a[1]).sum_all()]);
        run_jit(dev, dn, "p3", &["p3_x"], |a| vec![nn::max_pool(&a[0], &[2], &[3], &Padding::Valid, nn::Layout::Nchw)]);
        run_grad(dev, dn, "p3", &["p3_x"], &[0], 1, |a| {
            let w = Tensor::iota(DType::F32, &[8], 0).reshape(&[1, 2, 4]) + 1.0;
            vec![(&nn::max_pool(&a[0], &[2], &[3], &Padding::Valid, nn::Layout::Nchw) * &w).sum_all()]
        });
        let win = || {
            let mut w = Window::new(&[1, 1, 2, 3], &[1, 1, 2, 1], &[(0, 0), (0, 0), (1, 2), (0, 1)]);
            w.base_dilation = vec![1, 1, 2, 1];
            w.window_dilation = vec![1, 1, 1, 2];
            w
        };
        run_jit(dev, dn, "p4", &["p4_x"], move |a| vec![a[0].reduce_window_dilated(WindowOp::Sum, &win()), Tensor::scalar(0.0f32), a[0].reduce_window_dilated(WindowOp::Max, &win())]);
        run_grad(dev, dn, "p4", &["p4_x"], &[0], 1, move |a| { let y = a[0].reduce_window_dilated(WindowOp::Sum, &win()); vec![(&y * &y).sum_all()] });
        run_jit(dev, dn, "p5", &["p5_x"], |a| vec![nn::max_pool(&a[0], &[2, 2], &[2, 2], &Padding::Same, nn::Layout::Nhwc)]);
        let win6 = || {
            let mut w = Window::new(&[1, 1, 3, 3], &[1, 1, 1, 1], &[(0, 0), (0, 0), (1, 1), (1, 1)]);
            w.window_dilation = vec![1, 1, 2, 2];
            w
        };
        run_jit(dev, dn, "p6", &["p6_x"], move |a| vec![a[0].reduce_window_dilated(WindowOp::Max, &win6())]);
        run_grad(dev, dn, "p6", &["p6_x"], &[0], 1, move |a| {
            let y = a[0].reduce_window_dilated(WindowOp::Max, &win6());
            let w = Tensor::iota(DType::F32, &[16], 0).reshape(&[1, 1, 4, 4]);
            vec![(&y * &w).sum_all()]
        });
    }
    if want("optim") {
        let gs = ["o_p", "o_g0", "o_g1", "o_g2", "o_g3", "o_g4"];
        run_jit(dev, dn, "o_adam", &gs, |a| {
            let opt = Adam::new(0.01);
            let mut p = vec![a[0].clone()];
            let mut s = opt.init(&p);
            for i in 0..5 { (p, s) = opt.update(&p, &[a[1 + i].clone()], &s); }
            vec![p[0].clone(), s.m[0].clone(), s.v[0].clone()]
        });
        run_jit(dev, dn, "o_sgdm", &gs, |a| {
            let opt = Sgd::with_momentum(0.1, 0.9);
            let mut p = vec![a[0].clone()];
            let mut s = opt.init(&p);
            for i in 0..5 { (p, s) = opt.update(&p, &[a[1 + i].clone()], &s); }
            vec![p[0].clone(), s.velocity[0].clone()]
        });
        run_jit(dev, dn, "o_sgd", &gs, |a| {
            let opt = Sgd::new(0.1);
            let mut p = vec![a[0].clone()];
            let mut s = opt.init(&p);
            for i in 0..5 { (p, s) = opt.update(&p, &[a[1 + i].clone()], &s); }
            vec![p[0].clone()]
        });
    }
    if want("red") {
        run_jit(dev, dn, "r1", &["r1_x"], |a| { let x = &a[0]; vec![x.sum(-1i64, true), x.mean([0, 1], true), x.max(0i64, false), x.argmax(1, false), x.argmin(-1, false), x.min([-1, -2], false)] });
        run_jit(dev, dn, "r2", &["r2_x"], |a| { let x = &a[0]; vec![x.sum(0i64, false), x.mean(-2i64, true), x.argmax(0, false), x.max(-2i64, true)] });
        run_jit(dev, dn, "r3", &["r3_x"], |a| { let x = &a[0]; vec![x.sum([0, 2], true), x.max([-1, 0], false), x.mean([-3, -1], false), x.argmax(1, false)] });
        run_jit(dev, dn, "r4", &["r4_x"], |a| {
            let x = &a[0];
            let m = x.mean_all();
            let d = x - &m;
            let m1 = x.mean(1i64, true);
            let d1 = x - &m1;
            vec![m.clone(), (&d * &d).mean_all(), x.mean(1i64, false), (&d1 * &d1).mean(1i64, true)]
        });
        run_jit(dev, dn, "r5", &["r5_x"], |a| vec![a[0].sum_all(), a[0].mean_all()]);
        run_jit(dev, dn, "r6", &["r6_x"], |a| vec![a[0].argmax(1, false), a[0].argmin(1, false)]);
    }
    if want("mm") {
        run_jit(dev, dn, "m", &["m_a", "m_b", "m_at", "m_bt", "m_l3", "m_r3", "m_a4", "m_b4", "m_v", "m_ai", "m_bi"], |a| {
            let dg = a[4].dot_general(&a[5], DotDims { lhs_contract: vec![0], rhs_contract: vec![2], lhs_batch: vec![1], rhs_batch: vec![1] });
            vec![a[0].matmul(&a[1]), a[2].t().matmul(&a[1]), a[0].matmul(&a[3].t()), dg, a[6].matmul(&a[7]), a[8].matmul(&a[1]), a[0].matmul(&a[8]), a[9].matmul(&a[10])]
        });
        run_grad(dev, dn, "m", &["m_l3", "m_r3"], &[0, 1], 8, |a| {
            let dg = a[0].dot_general(&a[1], DotDims { lhs_contract: vec![0], rhs_contract: vec![2], lhs_batch: vec![1], rhs_batch: vec![1] });
            vec![(&dg * &dg).sum_all() * 0.5]
        });
    }
    if want("layout") {
        let layout = |a: &[Tensor]| -> Vec<Tensor> {
            let (x, z) = (&a[0], &a[1]);
            let y = x.broadcast_in_dim(&[4, 3, 5, 6], &[1, 2]);
            let s = y.slice(&[1, 0, 1, 2], &[4, 3, 5, 6], Some(&[2, 1, 2, 3]));
            let o1 = &(&s.transpose(&[3, 1, 0, 2]) * 2.0) + 1.0;
            let p = x.pad_interior(&[1, 0], &[0, 2], &[2, 1], -1.0f32);
            let o2 = p.t().slice(&[0, 1], &[11, 8], Some(&[2, 3])).reshape(&[-1]);
            let zs = z.slice(&[0, 1, 0], &[4, 6, 5], Some(&[3, 2, 1])).slice(&[0, 0, 2], &[2, 3, 3], None).reshape(&[2, 3]);
            let o3 = Tensor::concatenate(&[&x.t(), &zs], 0);
            let o4 = z.transpose(&[2, 0, 1]).reshape(&[5, 24]).slice(&[0, 3], &[5, 20], Some(&[1, 4]));
            let o5 = x.reshape(&[3, 1, 5]).broadcast_to(&[3, 4, 5]).transpose(&[2, 0, 1]).slice(&[1, 0, 0], &[5, 3, 4], Some(&[2, 1, 1]));
            vec![o1, o2, o3, o4, o5]
        };
        run_jit(dev, dn, "l", &["l_x", "l_z"], layout);
        run_grad(dev, dn, "l", &["l_x", "l_z"], &[0, 1], 5, move |a| {
            let outs = layout(a);
            let mut tot = Tensor::scalar(0.0f32);
            for (i, o) in outs.iter().enumerate() { tot = &tot + &(o.sin().sum_all() * (i as f32 + 1.0)); }
            vec![tot]
        });
    }
    if want("einsum") {
        let ins = ["e_sq", "e_3a", "e_3b", "e_b", "e_k1", "e_k2", "e_c1", "e_c2", "e_c3", "e_8a", "e_8b", "e_9", "e_13", "e_v"];
        run_jit(dev, dn, "e", &ins, |a| {
            let [sq, a3, b3, bb, k1, k2, c1, c2, c3, a8, b8, e9, e13, v] = [&a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6], &a[7], &a[8], &a[9], &a[10], &a[11], &a[12], &a[13]];
            let e9t = e9.transpose(&[2, 0, 1]);
            let c1t = c1.t();
            vec![
                jnp::einsum("ii->i", &[sq]), jnp::einsum("ii", &[sq]), jnp::einsum("...ij,...jk->...ik", &[a3, b3]), jnp::einsum("bii->bi", &[bb]),
                jnp::einsum("ijk,kji->", &[k1, k2]), jnp::einsum("ab,bc,cd->ad", &[c1, c2, c3]), jnp::einsum("ij,jk", &[c1, c2]), jnp::einsum("...i,...i", &[a8, b8]),
                jnp::einsum("iij->j", &[e9]), jnp::einsum("ii,i->i", &[sq, v]), jnp::einsum("i,i,i->i", &[v, v, v]), jnp::einsum("ij,ij->", &[c1, c1]),
                jnp::einsum("iji->j", &[e13]), jnp::einsum("ba,ab", &[&c1t, c1]), jnp::einsum("i,j->ji", &[v, b8]), jnp::einsum("iji->ij", &[e13]), jnp::einsum("jii->ij", &[&e9t]),
            ]
        });
        run_grad(dev, dn, "eg", &["e_sq", "e_9", "e_13"], &[0, 1, 2], 0, |a| {
            let t1 = (&jnp::einsum("ii->i", &[&a[0]]) * &Tensor::iota(DType::F32, &[5], 0)).sum_all();
            let b = jnp::einsum("iij->j", &[&a[1]]);
            let c = jnp::einsum("iji->ij", &[&a[2]]);
            vec![&(&t1 + &(&b * &b).sum_all()) + &(&c * &c).sum_all()]
        });
    }
    if want("numpy") {
        run_jit(dev, dn, "n", &["n_x", "n_b", "n_big", "n_z", "n_i", "n_lo", "n_hi", "n_h"], |a| {
            let [x, b, big, z, xi, lo, hi, h] = [&a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6], &a[7]];
            let x0 = x.slice(&[0, 0, 0], &[1, 3, 4], None).reshape(&[3, 4]);
            vec![
                jnp::cumsum(x, -2), jnp::cumsum(x, None), jnp::cumsum(&b.cast(DType::Bool), 1), jnp::cumsum(big, 0), jnp::cumprod(z, 0), jnp::cumprod(z, None),
                Tensor::scalar(0.0f32), Tensor::scalar(0.0f32),
                jnp::clip(x, 0.5, -0.5), jnp::clip(xi, 0.5, None), jnp::clip(&x0, lo, hi), h.round(),
                jnp::any(&xi.gt(&Tensor::scalar(3i32)), 0i64, true), jnp::all(&xi.ne(&Tensor::scalar(0i32)), -1i64, false),
                jnp::cumsum(xi, 0), jnp::cumsum(x, 0).slice(&[0, 0, 0], &[4, 5, 6], None),
            ]
        });
        run_grad(dev, dn, "ng6", &["n_x", "n_w"], &[0], 0, |a| vec![(&jnp::cumsum(&a[0], 1) * &a[1]).sum_all()]);
        run_grad(dev, dn, "ng7", &["n_z"], &[0], 0, |a| vec![jnp::cumprod(&a[0], 1).sum_all()]);
    }
    if want("mx2") {
        run_grad(dev, dn, "mx2", &["mx2_x"], &[0], 0, |a| vec![a[0].reduce_window(WindowOp::Max, &[1, 1, 3], &[1, 1, 1], &[(0, 0), (0, 0), (0, 0)]).sum_all()]);
        run_grad(dev, dn, "mx2m", &["mx2_x"], &[0], 0, |a| vec![a[0].reduce_window(WindowOp::Min, &[1, 1, 3], &[1, 1, 1], &[(0, 0), (0, 0), (0, 0)]).sum_all()]);
    }
    if want("more") {
        let f1 = |a: &[Tensor]| vec![a[0].conv_general_dilated(&a[1], &ConvOptions::new(&[1, 2], Padding::Same).feature_group_count(2).dimension_numbers("NHWC", "HWIO", "NHWC"))];
        run_jit(dev, dn, "v1", &["v1_x", "v1_k"], move |a| vmap(f1).in_axes(&[Some(0), Some(0)]).apply(a));
        run_grad(dev, dn, "v1", &["v1_x", "v1_k"], &[0, 1], 1, move |a| { let y = vmap(f1).in_axes(&[Some(0), Some(0)]).apply(a).remove(0); vec![(&y * &y).sum_all() * 0.5] });
        run_jit(dev, dn, "v2", &["v2_x", "v1_k"], move |a| vmap(f1).in_axes(&[None, Some(0)]).out_axes(&[Some(1)]).apply(a));
        let f3 = |a: &[Tensor]| vec![a[0].conv_general_dilated(&a[1], &ConvOptions::new(&[1], Padding::Same).rhs_dilation(&[2]).feature_group_count(2))];
        run_jit(dev, dn, "v3", &["v3_x", "v3_k"], move |a| vmap(f3).in_axes(&[Some(1), None]).apply(a));
        let mp = |a: &[Tensor]| vec![nn::max_pool(&a[0], &[3, 2], &[2, 2], &Padding::Same, nn::Layout::Nchw)];
        run_jit(dev, dn, "v4", &["v4_x"], move |a| vmap(mp).in_axes(&[Some(2)]).apply(a));
        run_grad(dev, dn, "v4", &["v4_x"], &[0], 1, move |a| {
            let y = vmap(mp).in_axes(&[Some(2)]).apply(a).remove(0);
            let w = Tensor::iota(DType::F32, &[y.size()], 0).cos().reshape(&y.shape().iter().map(|&s| s as i64).collect::<Vec<_>>());
            vec![(&y * &w).sum_all()]
        });
        run_jit(dev, dn, "mx", &["mx_x"], |a| vec![nn::max_pool(&a[0], &[3], &[1], &Padding::Valid, nn::Layout::Nchw)]);
        run_grad(dev, dn, "mx", &["mx_x"], &[0], 1, |a| { let w = Tensor::iota(DType::F32, &[7], 0) + 1.0; vec![(&nn::max_pool(&a[0], &[3], &[1], &Padding::Valid, nn::Layout::Nchw) * &w.reshape(&[1, 1, 7])).sum_all()] });
        run_jit(dev, dn, "ep", &["ep_x"], |a| vec![nn::max_pool(&a[0], &[5], &[1], &Padding::Valid, nn::Layout::Nchw)]);
        run_jit(dev, dn, "c9", &["c9_x", "c9_k"], |a| vec![a[0].conv(&a[1], &[1, 1], Padding::Valid)]);
        run_jit(dev, dn, "c8", &["c9_k", "c9_k"], |a| vec![a[0].conv_general_dilated(&a[1], &ConvOptions::new(&[1, 1], Padding::Same).lhs_dilation(&[2, 2]))]);
        let dgm = DotDims { lhs_contract: vec![2, 3], rhs_contract: vec![0, 3], lhs_batch: vec![0], rhs_batch: vec![2] };
        let dgm2 = dgm.clone();
        run_jit(dev, dn, "mt", &["mt_l", "mt_r"], move |a| vec![a[0].dot_general(&a[1], dgm.clone())]);
        run_grad(dev, dn, "mt", &["mt_l", "mt_r"], &[0, 1], 1, move |a| { let y = a[0].dot_general(&a[1], dgm2.clone()); vec![(&y * &y).sum_all() * 0.5] });
        run_grad(dev, dn, "mg", &["mg_a", "mg_b"], &[0, 1], 0, |a| { let y = a[0].matmul(&a[1]); vec![(&y * &y).sum_all() * 0.5] });
        run_grad(dev, dn, "eg2", &["eg2_a", "eg2_b"], &[0, 1], 0, |a| { let y = jnp::einsum("...ij,...jk->...ik", &[&a[0], &a[1]]); vec![(&y * &y).sum_all() * 0.5] });
        run_jit(dev, dn, "e2", &["e2_a", "e2_b", "e2_c", "e2_d", "e2_e"], |a| {
            let ar = Tensor::iota(DType::F32, &[2], 0);
            vec![jnp::einsum("i...j,j...->i...", &[&a[0], &a[1]]), jnp::einsum("...ii->...i", &[&a[2]]), jnp::einsum("...ij,j->...i", &[&a[3], &a[4]]), jnp::einsum("...ii", &[&a[2]]), jnp::einsum("i...,i->...", &[&a[3], &ar])]
        });
        run_jit(dev, dn, "r7", &["r7_x", "r7_y"], |a| vec![a[0].argmax(1, false), a[0].argmin(1, false), a[0].max(1i64, false), a[1].argmax(0, false), a[1].argmin(0, false), a[1].min(0i64, false)]);
        run_jit(dev, dn, "r8", &["r8_x"], |a| vec![a[0].mean(1i64, false), a[0].sum(0i64, false), a[0].prod(1i64, false)]);
        run_jit(dev, dn, "r9", &["r9_x"], |a| vec![a[0].prod(1i64, false), a[0].prod(0i64, false).slice(&[0], &[10], None)]);
        run_jit(dev, dn, "cs", &["cs_x"], |a| vec![jnp::cumsum(&a[0], 0), jnp::cumsum(&a[0], -1), jnp::cumsum(&a[0].slice(&[0, 0], &[1, 3], None), 0)]);
        run_jit(dev, dn, "cc", &["cc_x"], |a| { let e = Tensor::zeros(&[3, 0], DType::F32); let s = a[0].slice(&[0, 0], &[3, 4], Some(&[1, 2])); vec![Tensor::concatenate(&[&a[0], &e, &s], 1)] });
    }
}

#[test]
fn probe() {
    unsafe { std::env::set_var("XDG_RUNTIME_DIR", "/tmp/xdg-rt") };
    let only = std::env::var("PROBE_ONLY").unwrap_or_default();
    let devs = std::env::var("PROBE_DEVS").unwrap_or("vulkan,gl,cpu".into());
    for dn in devs.split(',') {
        let dev = common::runtime_with(&format!("{dn}:1")).devices()[0].clone();
        eprintln!("== {dn}: {}", dev.info());
        all_cases(&dev, dn, &only);
    }
}
