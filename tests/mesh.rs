//! Meshes and shardings (`Mesh`, `PartitionSpec`, `NamedSharding`, `device_put`, `shard_map` over a
//! mesh) on a 2 × 2 mesh of four Vulkan devices and on a 2 × 2 mesh of two Vulkan and two GL
//! devices: placement of blocks, collectives over one axis of a 2-D mesh, a Megatron-style MLP and
//! multi-head attention split over `"data"` × `"model"` (forward and `grad` against the one-device
//! program on the cpu device, i.e. the reference interpreter), and the typed errors.
//!
//! Expected blocks and collective results are derived on the host with index loops from the
//! definition (device `i` of a `("data", 2) × ("model", 2)` mesh sits at `(i / 2, i % 2)`). Moving
//! values (placement, gathers, axis_index) is compared exactly; f32 sums with `Tol::REDUCE`.

mod common;

use brigade::{
    Array, DType, Device, Error, HostArray, Mesh, NamedSharding, P, PartitionSpec, Tensor,
    all_gather, axis_index, device_put, grad, jit, pmap, pmax, psum, psum_axes, psum_scatter,
    shard_map,
};
use common::{Tol, assert_close, device_guard, devices_with, host, rand_f32, rand_f32_in};

/// The 2 × 2 meshes every test runs on.
const LAYOUTS: [&str; 2] = ["vulkan:4", "vulkan:2,gl:2"];

fn for_each_mesh(mut body: impl FnMut(&str, &Mesh)) {
    for layout in LAYOUTS {
        let devs = devices_with(layout);
        assert_eq!(devs.len(), 4, "layout {layout}: {devs:?}");
        let _guard = devs.iter().find_map(device_guard);
        let mesh = Mesh::new(&devs, &[("data", 2), ("model", 2)])
            .unwrap_or_else(|e| panic!("{layout}: {e}"));
        body(layout, &mesh);
    }
}

fn cpu() -> Device {
    devices_with("cpu:1")[0].clone()
}

/// Values of a row-major f32 array.
fn vals(a: &Array) -> Vec<f32> {
    a.to_vec::<f32>().expect("read f32")
}

/// The block of the row-major `shape` array `x` with rows `r0..r0+nr`, columns `c0..c0+nc`.
fn block(x: &[f32], shape: [usize; 2], r0: usize, nr: usize, c0: usize, nc: usize) -> Vec<f32> {
    (r0..r0 + nr)
        .flat_map(|r| (c0..c0 + nc).map(move |c| x[r * shape[1] + c]))
        .collect()
}

#[test]
fn device_put_places_each_block_where_the_spec_says() {
    for_each_mesh(|layout, mesh| {
        let shape = [4usize, 8];
        let x = rand_f32(&shape, 11);
        let xv = vals(&x);
        // (spec, rows split into, block row index of device (d, m), cols split, block col index)
        type Pick = fn(usize, usize) -> usize;
        let cases: [(PartitionSpec, usize, Pick, usize, Pick); 5] = [
            (P!["data", "model"], 2, |d, _| d, 2, |_, m| m),
            (P!["model"], 2, |_, m| m, 1, |_, _| 0),
            (
                P![None, ("data", "model")],
                1,
                |_, _| 0,
                4,
                |d, m| d * 2 + m,
            ),
            (P![("model", "data")], 4, |d, m| m * 2 + d, 1, |_, _| 0),
            (P![], 1, |_, _| 0, 1, |_, _| 0),
        ];
        for (spec, rs, rpick, cs, cpick) in cases {
            let s = NamedSharding::new(mesh, spec.clone()).unwrap();
            let y = device_put(&x, &s).unwrap_or_else(|e| panic!("{layout} {spec}: {e}"));
            assert_eq!(y.shape(), &shape, "{layout} {spec}");
            assert_eq!(vals(&y), xv, "{layout} {spec}: gathered value");
            assert_eq!(y.sharding().as_ref(), Some(&s), "{layout} {spec}");
            let shards = y.shards().expect("sharded");
            assert_eq!(shards.len(), 4);
            for (i, b) in shards.iter().enumerate() {
                let (d, m) = (i / 2, i % 2);
                let (nr, nc) = (shape[0] / rs, shape[1] / cs);
                assert_eq!(b.shape(), &[nr, nc], "{layout} {spec} device {i}");
                assert_eq!(b.device(), Some(&mesh.devices()[i]), "{layout} {spec}");
                let want = block(&xv, shape, rpick(d, m) * nr, nr, cpick(d, m) * nc, nc);
                assert_eq!(vals(b), want, "{layout} {spec}: block of device {i}");
            }
            // Placing it again the same way is free: the same blocks.
            let again = device_put(&y, &s).unwrap();
            for (a, b) in again.shards().unwrap().iter().zip(shards) {
                assert_eq!(
                    a.wgpu_buffer().unwrap().buffer,
                    b.wgpu_buffer().unwrap().buffer,
                    "{layout} {spec}: re-placing moved data"
                );
            }
        }
    });
}

#[test]
fn collectives_over_one_axis_of_a_2d_mesh() {
    for_each_mesh(|layout, mesh| {
        let shape = [4usize, 6];
        let x = rand_f32(&shape, 5);
        let xv = vals(&x);
        let f = shard_map(|a: &[Tensor]| {
            let x = &a[0];
            let idx = &(&axis_index("data") * 10) + &axis_index("model");
            vec![
                psum(x, "model"),
                psum(x, "data"),
                psum_axes(x, &["data", "model"]),
                all_gather(x, "data", 0, true),
                psum_scatter(x, "model", 0, true),
                idx.reshape(&[1]),
            ]
        })
        .mesh(mesh)
        .in_specs(&[P!["data", "model"]])
        .out_specs(&[
            P!["data", None],
            P![None, "model"],
            P![],
            P![None, "model"],
            P![("data", "model"), None],
            P![("data", "model")],
        ]);
        let y = f
            .call(std::slice::from_ref(&x))
            .unwrap_or_else(|e| panic!("{layout}: {e}"));
        let at = |r: usize, c: usize| xv[r * 6 + c] as f64;
        // psum over "model": the two column blocks of each row block added, [4, 3].
        let over_model: Vec<f64> = (0..4)
            .flat_map(|r| (0..3).map(move |c| at(r, c) + at(r, c + 3)))
            .collect();
        // psum over "data": the two row blocks added, [2, 6].
        let over_data: Vec<f64> = (0..2)
            .flat_map(|r| (0..6).map(move |c| at(r, c) + at(r + 2, c)))
            .collect();
        let over_both: Vec<f64> = (0..2)
            .flat_map(|r| {
                (0..3).map(move |c| at(r, c) + at(r, c + 3) + at(r + 2, c) + at(r + 2, c + 3))
            })
            .collect();
        let want = |v: Vec<f64>, shape: &[usize]| {
            HostArray::from_vec(v.into_iter().map(|x| x as f32).collect::<Vec<_>>(), shape).unwrap()
        };
        let ctx = |what: &str| format!("{layout}: {what}");
        assert_close(
            &host(&y[0]),
            &want(over_model.clone(), &[4, 3]),
            Tol::REDUCE,
            &ctx("psum model"),
        );
        assert_close(
            &host(&y[1]),
            &want(over_data, &[2, 6]),
            Tol::REDUCE,
            &ctx("psum data"),
        );
        assert_close(
            &host(&y[2]),
            &want(over_both, &[2, 3]),
            Tol::REDUCE,
            &ctx("psum both"),
        );
        // Gathering the row blocks over "data" gives every device its whole column block back.
        assert_eq!(vals(&y[3]), xv, "{layout}: all_gather over data");
        // Device (d, m) keeps row m of its data group's model-sum: row d * 2 + m of over_model.
        assert_close(
            &host(&y[4]),
            &want(over_model, &[4, 3]),
            Tol::REDUCE,
            &ctx("psum_scatter model"),
        );
        assert_eq!(
            y[5].to_vec::<i32>().unwrap(),
            vec![0, 1, 10, 11],
            "{layout}: axis_index"
        );
        // Every collective reads the argument, and psum_axes over both axes is one collective over
        // all four devices: one host round trip for the whole program.
        assert_eq!(
            f.stage_count(std::slice::from_ref(&x)).unwrap().1,
            1,
            "{layout}: exchanges"
        );
        let chain = shard_map(|a: &[Tensor]| vec![pmax(&pmax(&a[0], "model"), "data")])
            .mesh(mesh)
            .in_specs(&[P!["data", "model"]])
            .out_specs(&[P![]]);
        assert_eq!(chain.stage_count(std::slice::from_ref(&x)).unwrap().1, 1);
        let want_max: Vec<f32> = (0..6)
            .map(|k| {
                let (r, c) = (k / 3, k % 3);
                [at(r, c), at(r, c + 3), at(r + 2, c), at(r + 2, c + 3)]
                    .into_iter()
                    .fold(f64::MIN, f64::max) as f32
            })
            .collect();
        assert_eq!(
            vals(&chain.call(std::slice::from_ref(&x)).unwrap()[0]),
            want_max,
            "{layout}: pmax over both axes"
        );
        // A dimension split over both axes with "model" outermost: row block m * 2 + d.
        let g = shard_map(|a: &[Tensor]| vec![&a[0] * 2.0 + axis_index("model").cast(DType::F32)])
            .mesh(mesh)
            .in_specs(&[P![("model", "data"), None]])
            .out_specs(&[P![("model", "data"), None]]);
        let want_g: Vec<f32> = (0..24)
            .map(|i| xv[i] * 2.0 + ((i / 6) / 2) as f32)
            .collect();
        for (how, got) in [
            ("call", g.call(std::slice::from_ref(&x))),
            (
                "emulate",
                g.emulate(&mesh.devices()[0], std::slice::from_ref(&x)),
            ),
        ] {
            let got = got.unwrap_or_else(|e| panic!("{layout}: {how}: {e}"));
            assert_eq!(
                vals(&got[0]),
                want_g,
                "{layout}: ('model', 'data') rows, {how}"
            );
        }
        // The same program emulated on one device (one vmap per mesh axis) gives the same arrays.
        let em = f
            .emulate(&mesh.devices()[0], std::slice::from_ref(&x))
            .unwrap_or_else(|e| panic!("{layout}: emulate: {e}"));
        assert_eq!(em.len(), y.len());
        for (k, (e, r)) in em.iter().zip(&y).enumerate() {
            assert_eq!(e.shape(), r.shape(), "{layout}: emulated output {k}");
            assert_eq!(e.dtype(), r.dtype(), "{layout}: emulated output {k}");
            assert_close(
                &host(e),
                &host(r),
                Tol::REDUCE,
                &ctx(&format!("emulated output {k}")),
            );
        }
    });
}

/// The MLP `relu(x w1) w2` and its loss `sum((y - t)^2) / batch`, on one device.
fn mlp(x: &Tensor, w1: &Tensor, w2: &Tensor) -> Tensor {
    x.matmul(w1).relu().matmul(w2)
}

#[test]
fn megatron_mlp_matches_one_device_forward_and_grad() {
    let (b, d, h, o) = (8usize, 6, 8, 5);
    let x = rand_f32(&[b, d], 1);
    let t = rand_f32(&[b, o], 2);
    let w1 = rand_f32(&[d, h], 3);
    let w2 = rand_f32(&[h, o], 4);
    // The one-device program, on the cpu device (the reference interpreter).
    let one = jit(move |a: &[Tensor]| {
        let loss = |p: &[Tensor]| {
            let y = mlp(&p[2], &p[0], &p[1]);
            vec![(&y - &p[3]).square().sum_all() / b as f32]
        };
        let g = grad(loss).argnums(&[0, 1]).apply(&[
            a[0].clone(),
            a[1].clone(),
            a[2].clone(),
            a[3].clone(),
        ]);
        vec![mlp(&a[2], &a[0], &a[1]), g[0].clone(), g[1].clone()]
    })
    .on(&cpu());
    let want = one
        .call(&[w1.clone(), w2.clone(), x.clone(), t.clone()])
        .expect("one-device MLP");
    for_each_mesh(|layout, mesh| {
        let n_model = mesh.axis_size("model").unwrap() as f32;
        // Per device: w1's column block, w2's row block, a block of the batch. The model-split
        // partial products meet in one psum over "model". `grad` differentiates the sum over all
        // devices of each device's value (JAX's pmap / check_vma=False rule: psum transposes to
        // psum), so each device counts its share: its rows' loss over the model devices that
        // all compute it.
        let step = shard_map(move |a: &[Tensor]| {
            let loss = |p: &[Tensor]| {
                let y = psum(&p[2].matmul(&p[0]).relu().matmul(&p[1]), "model");
                vec![(&y - &p[3]).square().sum_all() / (b as f32 * n_model)]
            };
            let g = grad(loss).argnums(&[0, 1]).apply(&[
                a[0].clone(),
                a[1].clone(),
                a[2].clone(),
                a[3].clone(),
            ]);
            let y = psum(&a[2].matmul(&a[0]).relu().matmul(&a[1]), "model");
            // Weights are replicated over "data": their gradient sums the data blocks.
            vec![y, psum(&g[0], "data"), psum(&g[1], "data")]
        })
        .mesh(mesh)
        .in_specs(&[
            P![None, "model"],
            P!["model", None],
            P!["data", None],
            P!["data", None],
        ])
        .out_specs(&[P!["data", None], P![None, "model"], P!["model", None]]);
        let got = step
            .call(&[w1.clone(), w2.clone(), x.clone(), t.clone()])
            .unwrap_or_else(|e| panic!("{layout}: {e}"));
        let em = step
            .emulate(
                &mesh.devices()[0],
                &[w1.clone(), w2.clone(), x.clone(), t.clone()],
            )
            .unwrap_or_else(|e| panic!("{layout}: emulate: {e}"));
        for (k, what) in ["y", "d loss / d w1", "d loss / d w2"].iter().enumerate() {
            assert_close(
                &host(&got[k]),
                &host(&want[k]),
                Tol::REDUCE,
                &format!("{layout}: {what}"),
            );
            assert_close(
                &host(&em[k]),
                &host(&want[k]),
                Tol::REDUCE,
                &format!("{layout}: {what}, emulated on one device"),
            );
        }
        // Two stages cut at the collectives, so the forward psum, its transpose and the data psums
        // each cross the host once (a program that skipped one would not match above either).
        let (_, exchanges) = step
            .stage_count(&[w1.clone(), w2.clone(), x.clone(), t.clone()])
            .unwrap();
        assert!(exchanges >= 2, "{layout}: {exchanges} exchanges");
    });
}

/// Multi-head self-attention over `x` [batch, seq, dim] with `heads` heads of width `dh`:
/// `softmax(q k^T / sqrt(dh)) v`, heads joined, then the output projection.
fn attention(
    x: &Tensor,
    wq: &Tensor,
    wk: &Tensor,
    wv: &Tensor,
    wo: &Tensor,
    heads: usize,
    dh: usize,
) -> Tensor {
    let (b, s) = (x.shape()[0] as i64, x.shape()[1] as i64);
    let split = |w: &Tensor| {
        x.matmul(w)
            .reshape(&[b, s, heads as i64, dh as i64])
            .transpose(&[0, 2, 1, 3])
    };
    let (q, k, v) = (split(wq), split(wk), split(wv));
    let scores = &q.matmul(&k.transpose(&[0, 1, 3, 2])) * (1.0 / (dh as f32).sqrt());
    let ctx = scores.softmax(-1).matmul(&v);
    ctx.transpose(&[0, 2, 1, 3])
        .reshape(&[b, s, (heads * dh) as i64])
        .matmul(wo)
}

#[test]
fn attention_heads_split_over_model_match_one_device() {
    let (b, s, dim, heads, dh) = (4usize, 5, 8, 4, 3);
    let x = rand_f32(&[b, s, dim], 21);
    let r = rand_f32(&[b, s, dim], 22);
    let w: Vec<Array> = (0..4)
        .map(|k| {
            let shape = if k < 3 {
                [dim, heads * dh]
            } else {
                [heads * dh, dim]
            };
            // Scaled by 1/sqrt(fan-in), as initializations are, so softmax is not saturated.
            rand_f32_in(&shape, 30 + k, -0.35, 0.35)
        })
        .collect();
    // Loss: a fixed random projection of the output, so every output entry has its own weight.
    let one = jit(move |a: &[Tensor]| {
        let loss = |p: &[Tensor]| {
            vec![(&attention(&p[4], &p[0], &p[1], &p[2], &p[3], heads, dh) * &p[5]).sum_all()]
        };
        let g = grad(loss).argnums(&[0, 1, 2, 3]).apply(a);
        let mut out = vec![attention(&a[4], &a[0], &a[1], &a[2], &a[3], heads, dh)];
        out.extend(g);
        out
    })
    .on(&cpu());
    let mut args = w.clone();
    args.push(x.clone());
    args.push(r.clone());
    let want = one.call(&args).expect("one-device attention");
    for_each_mesh(|layout, mesh| {
        let local_heads = heads / mesh.axis_size("model").unwrap();
        let n_model = mesh.axis_size("model").unwrap() as f32;
        let f = shard_map(move |a: &[Tensor]| {
            // Each model device runs its heads; the output projection's row blocks meet in a psum.
            let out = |p: &[Tensor]| {
                psum(
                    &attention(&p[4], &p[0], &p[1], &p[2], &p[3], local_heads, dh),
                    "model",
                )
            };
            let loss = |p: &[Tensor]| vec![(&out(p) * &p[5]).sum_all() / n_model];
            let g = grad(loss).argnums(&[0, 1, 2, 3]).apply(a);
            let mut outs = vec![out(a)];
            outs.extend(g.iter().map(|g| psum(g, "data")));
            outs
        })
        .mesh(mesh)
        .in_specs(&[
            P![None, "model"],
            P![None, "model"],
            P![None, "model"],
            P!["model", None],
            P!["data"],
            P!["data"],
        ])
        .out_specs(&[
            P!["data"],
            P![None, "model"],
            P![None, "model"],
            P![None, "model"],
            P!["model", None],
        ]);
        let got = f.call(&args).unwrap_or_else(|e| panic!("{layout}: {e}"));
        for (k, what) in ["output", "d wq", "d wk", "d wv", "d wo"]
            .iter()
            .enumerate()
        {
            assert_close(
                &host(&got[k]),
                &host(&want[k]),
                Tol::REDUCE,
                &format!("{layout}: attention {what}"),
            );
        }
    });
}

#[test]
fn mesh_and_sharding_errors_are_typed() {
    let devs = devices_with("vulkan:4");
    // Sizes that do not multiply to the device count; the message names both and what fits.
    let e = Mesh::new(&devs, &[("data", 3), ("model", 2)]).expect_err("3×2 over 4");
    assert!(matches!(e, Error::BadSharding { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("multiply to 6") && msg.contains("4 devices") && msg.contains("2×2"),
        "{msg}"
    );
    let e = Mesh::new(&devs, &[("data", 2), ("data", 2)]).expect_err("repeated name");
    assert!(e.to_string().contains("'data' appears twice"), "{e}");
    let twice = vec![devs[0].clone(), devs[0].clone()];
    let e = Mesh::new(&twice, &[("data", 2)]).expect_err("repeated device");
    assert!(e.to_string().contains("positions 0 and 1"), "{e}");

    let mesh = Mesh::new(&devs, &[("data", 2), ("model", 2)]).unwrap();
    let e = NamedSharding::new(&mesh, P!["batch"]).expect_err("unknown axis");
    assert!(
        matches!(e, Error::BadSharding { .. })
            && e.to_string().contains("'batch'")
            && e.to_string().contains("'data', 'model'"),
        "{e}"
    );
    let e = NamedSharding::new(&mesh, P!["data", "data"]).expect_err("axis twice");
    assert!(e.to_string().contains("'data' twice"), "{e}");

    // A dimension its axes do not divide: the sizes and the padding that works.
    let x = rand_f32(&[6, 4], 3);
    let s = NamedSharding::new(&mesh, P![("data", "model")]).unwrap();
    let e = device_put(&x, &s).expect_err("6 rows over 4");
    match &e {
        Error::UnevenShard {
            dim: 0,
            size: 6,
            parts: 4,
            pad: 8,
            ..
        } => {}
        other => panic!("want UnevenShard 6 over 4 padded to 8, got {other:?}"),
    }
    assert!(e.to_string().contains("pad it to 8"), "{e}");
    let s = NamedSharding::new(&mesh, P![None, None, "data"]).unwrap();
    let e = device_put(&x, &s).expect_err("spec longer than rank");
    assert!(e.to_string().contains("rank 2"), "{e}");

    let id = |a: &[Tensor]| vec![a[0].clone()];
    let call = |p: brigade::Parallel<_>| p.call(std::slice::from_ref(&x)).expect_err("refused");
    let e = call(shard_map(id).mesh(&mesh).out_specs(&[P![]]));
    assert!(e.to_string().contains("in_specs is required"), "{e}");
    let e = call(shard_map(id).mesh(&mesh).in_specs(&[P!["data"]]));
    assert!(e.to_string().contains("out_specs is required"), "{e}");
    let e = call(
        shard_map(id)
            .mesh(&mesh)
            .in_specs(&[P!["data"], P![]])
            .out_specs(&[P![]]),
    );
    assert!(e.to_string().contains("2 entries but 1 arguments"), "{e}");
    let e = call(
        shard_map(id)
            .mesh(&mesh)
            .axis_name("i")
            .in_specs(&[P!["data"]])
            .out_specs(&[P!["data"]]),
    );
    assert!(e.to_string().contains("replaces axis_name"), "{e}");
    let e = call(
        pmap(id)
            .mesh(&mesh)
            .in_specs(&[P!["data"]])
            .out_specs(&[P!["data"]]),
    );
    assert!(e.to_string().contains("use shard_map"), "{e}");
    // An output that differs along "model" cannot leave "model" out of its spec.
    let e = call(
        shard_map(id)
            .mesh(&mesh)
            .in_specs(&[P!["data", "model"]])
            .out_specs(&[P!["data"]]),
    );
    let msg = e.to_string();
    assert!(
        msg.contains("'model'") && msg.contains("argument 0"),
        "{msg}"
    );
    // psum over "model" makes it identical there: accepted, and the value is the model sum.
    let ok = shard_map(|a: &[Tensor]| vec![psum(&a[0], "model")])
        .mesh(&mesh)
        .in_specs(&[P!["data", "model"]])
        .out_specs(&[P!["data"]])
        .call(std::slice::from_ref(&x))
        .unwrap();
    assert_eq!(ok[0].shape(), &[6 / 2 * 2, 2]);

    // An array spread over devices outside the mesh is not moved silently.
    let small = Mesh::new(&devs[..2], &[("data", 2)]).unwrap();
    let other = device_put(
        &x,
        &NamedSharding::new(&Mesh::new(&devs[2..], &[("data", 2)]).unwrap(), P!["data"]).unwrap(),
    )
    .unwrap();
    let e = shard_map(id)
        .mesh(&small)
        .in_specs(&[P!["data"]])
        .out_specs(&[P!["data"]])
        .call(std::slice::from_ref(&other))
        .expect_err("other mesh");
    assert!(
        e.to_string().contains("not all in the mesh") && e.to_string().contains("device_put"),
        "{e}"
    );
    // device_put moves it explicitly, and then it runs.
    let moved = device_put(&other, &NamedSharding::new(&small, P!["data"]).unwrap()).unwrap();
    let y = shard_map(id)
        .mesh(&small)
        .in_specs(&[P!["data"]])
        .out_specs(&[P!["data"]])
        .call(&[moved])
        .unwrap();
    assert_eq!(vals(&y[0]), vals(&x));
}

#[test]
fn one_axis_outputs_are_named_shardings_and_feed_a_mesh_in_place() {
    let devs = devices_with("vulkan:4");
    let x = rand_f32(&[8, 3], 9);
    // shard_map over the four devices (one axis): blocks of two rows each.
    let y = shard_map(|a: &[Tensor]| vec![&a[0] * 2.0])
        .devices(&devs)
        .call(std::slice::from_ref(&x))
        .unwrap()
        .remove(0);
    let s = y.sharding().expect("sharded");
    assert_eq!(s.mesh().devices(), &devs[..]);
    assert_eq!(s.mesh().axes(), &[("shard".to_string(), 4)]);
    assert_eq!(s.spec(), &P!["shard"]);
    // The same placement over a mesh whose axis has another name: used in place, nothing uploaded.
    let mesh = Mesh::new(&devs, &[("data", 4)]).unwrap();
    let f = shard_map(|a: &[Tensor]| vec![&a[0] + 1.0])
        .mesh(&mesh)
        .in_specs(&[P!["data"]])
        .out_specs(&[P!["data"]]);
    f.call(std::slice::from_ref(&y)).unwrap(); // compile first
    let before = brigade::counters();
    let z = f.call(std::slice::from_ref(&y)).unwrap().remove(0);
    let moved = brigade::counters().since(&before);
    assert_eq!(moved.bytes_uploaded, 0, "the blocks were moved: {moved:?}");
    let want: Vec<f32> = vals(&x).iter().map(|v| v * 2.0 + 1.0).collect();
    assert_eq!(vals(&z), want);
    // pmap's stacked outputs describe the same placement (one entry of axis 0 per device).
    let p = pmap(|a: &[Tensor]| vec![&a[0] * 3.0])
        .devices(&devs)
        .call(&[rand_f32(&[4, 5], 10)])
        .unwrap()
        .remove(0);
    assert_eq!(p.sharding().unwrap().spec(), &P!["shard"]);
}

/// `vmap` of a mesh `shard_map` (JAX's `vmap(shard_map(f, mesh, …))`): the batch axis is a new,
/// unsplit dimension of every block, so the Megatron forward over 3 stacked weight sets (batch
/// axis 0 of w1, axis 2 of w2, shared x) equals the one-device program on each set, stacked at
/// the requested output axis; collectives still combine devices example by example.
#[test]
fn vmap_of_a_mesh_shard_map_batches_every_block() {
    let (nb, b, d, h, o) = (3usize, 8usize, 6, 8, 5);
    let x = rand_f32(&[b, d], 21);
    let w1 = rand_f32(&[nb, d, h], 22);
    let w2 = rand_f32(&[h, o, nb], 23);
    let one = jit(|a: &[Tensor]| vec![mlp(&a[0], &a[1], &a[2])]).on(&cpu());
    let (w1v, w2v, xv) = (vals(&w1), vals(&w2), vals(&x));
    // Example e stacked at output axis 1: want[r, e, c] = mlp(x, w1[e], w2[.., .., e])[r, c].
    let mut want = vec![0f32; b * nb * o];
    for e in 0..nb {
        let w1e = Array::from_vec(w1v[e * d * h..(e + 1) * d * h].to_vec(), &[d, h]).unwrap();
        let w2e: Vec<f32> = (0..h * o).map(|k| w2v[k * nb + e]).collect();
        let w2e = Array::from_vec(w2e, &[h, o]).unwrap();
        let xa = Array::from_vec(xv.clone(), &[b, d]).unwrap();
        let y = vals(&one.call(&[xa, w1e, w2e]).unwrap()[0]);
        for r in 0..b {
            for c in 0..o {
                want[(r * nb + e) * o + c] = y[r * o + c];
            }
        }
    }
    let want = HostArray::from_vec(want, &[b, nb, o]).unwrap();
    for_each_mesh(|layout, mesh| {
        let f =
            shard_map(|a: &[Tensor]| vec![psum(&a[0].matmul(&a[1]).relu().matmul(&a[2]), "model")])
                .mesh(mesh)
                .in_specs(&[P!["data", None], P![None, "model"], P!["model", None]])
                .out_specs(&[P!["data", None]])
                .vmap(&[None, Some(0), Some(2)], &[Some(1)], None);
        let y = f
            .call(&[x.clone(), w1.clone(), w2.clone()])
            .unwrap_or_else(|e| panic!("{layout}: {e}"));
        assert_eq!(y[0].shape(), &[b, nb, o], "{layout}");
        // The batch dimension is not split: rows over "data", examples whole on every device.
        assert_eq!(
            y[0].sharding().unwrap().spec(),
            &P!["data", None, None],
            "{layout}"
        );
        assert_close(&host(&y[0]), &want, Tol::REDUCE, &format!("{layout}: vmap"));
    });
}
