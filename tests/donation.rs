//! Memory you can plan: `Jit::donate_argnums` gives a donated argument's
//! buffer to an output (a parameter update needs no second copy), `Jit::memory_analysis` reports
//! arguments, outputs, temporaries and the peak from the buffer plan the call allocates, and a
//! donation the program cannot honour is a typed error. `pmap`/`shard_map` donate per device. On lavapipe (Vulkan) and llvmpipe (GL),
//! values compared with the CPU reference and between donating and plain calls bit for bit.

mod common;

use brigade::{
    Array, Error, HostArray, MemoryAnalysis, Mesh, P, Tensor, counters, jit, pmap, pmean, psum,
    shard_map,
};
use common::app::reference_of;
use common::{Tol, assert_close, device_guard, devices_with, f32s, gpu_devices, host};

/// One SGD step with a per-column bias: `p - 0.05 g + 0.01 b` (`b` broadcast over the rows).
fn sgd(a: &[Tensor]) -> Vec<Tensor> {
    vec![&a[0] - &a[1] * 0.05 + &a[2] * 0.01]
}

/// A test program: a plain function of its traced arguments.
type Program = fn(&[Tensor]) -> Vec<Tensor>;

fn bits(h: &HostArray) -> Vec<u32> {
    h.to_vec::<f32>()
        .unwrap()
        .into_iter()
        .map(f32::to_bits)
        .collect()
}

/// A parameter update loop `p = p - lr·g` over many steps, donating `p`: the output is written
/// into `p`'s own buffer (no buffer allocated per step, the device memory in use flat) and the
/// result is bit-identical to the non-donating loop and close to the CPU reference. Shapes cover
/// the vec4 kernel (rows a multiple of 4), the scalar-stored one (15 elements) and the
/// one-element-per-invocation one (3 elements).
#[test]
fn a_donated_parameter_update_allocates_nothing_per_step_and_matches_the_plain_loop() {
    // A runtime of its own: the pool counters below see only this test's work.
    for dev in devices_with("vulkan:1,gl:1") {
        let _g = device_guard(&dev);
        for (shape, steps) in [
            (vec![64usize, 36], 40usize),
            (vec![3, 5], 12),
            (vec![3], 12),
        ] {
            let n: usize = shape.iter().product();
            let cols = *shape.last().unwrap();
            let p0 = Array::from_vec(f32s(n, 1, -2.0, 2.0), &shape).unwrap();
            let g = Array::from_vec(f32s(n, 2, -1.0, 1.0), &shape)
                .unwrap()
                .to_device(&dev)
                .unwrap();
            let b = Array::from_vec(f32s(cols, 3, -1.0, 1.0), &[cols])
                .unwrap()
                .to_device(&dev)
                .unwrap();
            let plain = jit(sgd).on(&dev);
            let donating = jit(sgd).on(&dev).donate_argnums(&[0]);
            let m = donating
                .memory_analysis(&[p0.clone(), g.clone(), b.clone()])
                .unwrap();
            assert_eq!(m.donated, vec![(0, 0)], "{m}");
            // One kernel, updating p in place: it binds g, b and the output (p) only.
            let prog = donating
                .program(&[p0.clone(), g.clone(), b.clone()], &dev)
                .unwrap();
            assert_eq!(prog.launches.len(), 1);
            assert!(
                prog.launches[0].label.contains("_inplace"),
                "{}",
                prog.launches[0].label
            );
            assert_eq!(prog.launches[0].slots, vec![1, 2, 0]);

            let mut q = p0.to_device(&dev).unwrap();
            for _ in 0..steps {
                q = plain
                    .call(&[q.clone(), g.clone(), b.clone()])
                    .unwrap()
                    .remove(0);
            }
            let want_plain = host(&q);

            let mut p = p0.to_device(&dev).unwrap();
            // One warm-up step compiles; then count.
            let step = |p: Array| {
                donating
                    .call_donating(vec![p, g.clone(), b.clone()])
                    .unwrap()
                    .remove(0)
            };
            p = step(p);
            dev.wait().unwrap();
            let (pool, mem, work) = (dev.pool_stats(), dev.memory_stats(), counters());
            for _ in 1..steps {
                p = step(p);
            }
            dev.wait().unwrap();
            let (pool2, mem2, work2) = (dev.pool_stats(), dev.memory_stats(), counters());
            let work = work2.since(&work);
            assert_eq!(
                (work.donations_reused, work.donations_copied),
                ((steps - 1) as u64, 0),
                "{shape:?} on {}",
                dev.name()
            );
            assert_eq!(
                (pool2.created, pool2.reused),
                (pool.created, pool.reused),
                "{shape:?} on {}: a donated update takes no buffer from the pool ({pool} → {pool2})",
                dev.name()
            );
            assert_eq!(
                mem2.bytes_in_use,
                mem.bytes_in_use,
                "{shape:?} on {}",
                dev.name()
            );
            let got = host(&p);
            assert_eq!(
                bits(&got),
                bits(&want_plain),
                "{shape:?} on {}: donated and plain loops differ",
                dev.name()
            );
            // The CPU reference of the same loop.
            let mut r = host(&p0);
            let (gh, bh) = (host(&g), host(&b));
            for _ in 0..steps {
                r = reference_of(sgd, &[r, gh.clone(), bh.clone()]).remove(0);
            }
            assert_close(&got, &r, Tol::new(1e-5, 1e-5), "donated loop vs reference");
        }
    }
}

/// A donated array that is still held elsewhere (a clone kept by the caller, or a call with
/// borrowed arguments) keeps its values: the output gets a fresh buffer filled with a copy, and
/// the copy is counted. A host argument is uploaded into the call's own buffer, which the output
/// takes.
#[test]
fn a_donated_array_held_elsewhere_keeps_its_values() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let shape = [8usize, 12];
        let p = Array::from_vec(f32s(96, 4, -2.0, 2.0), &shape)
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let g = Array::from_vec(f32s(96, 5, -1.0, 1.0), &shape).unwrap();
        let b = Array::from_vec(f32s(12, 6, -1.0, 1.0), &[12]).unwrap();
        let before = host(&p);
        let want = reference_of(sgd, &[before.clone(), host(&g), host(&b)]).remove(0);
        let f = jit(sgd).on(&dev).donate_argnums(&[0]);

        let kept = p.clone();
        let c = counters();
        let out = f
            .call_donating(vec![p.clone(), g.clone(), b.clone()])
            .unwrap();
        let out2 = f.call(&[p.clone(), g.clone(), b.clone()]).unwrap();
        let work = counters().since(&c);
        assert_eq!((work.donations_reused, work.donations_copied), (0, 2));
        assert_close(&host(&out[0]), &want, Tol::ARITH, "copied donation");
        assert_eq!(bits(&host(&out2[0])), bits(&host(&out[0])));
        assert_eq!(
            bits(&host(&kept)),
            bits(&before),
            "the clone keeps its values"
        );
        assert_eq!(
            bits(&host(&p)),
            bits(&before),
            "the original keeps its values"
        );

        // A host argument: the upload is the call's own, so the output takes it.
        let c = counters();
        let out = f
            .call_donating(vec![Array::from_host_array(before.clone()).unwrap(), g, b])
            .unwrap();
        let work = counters().since(&c);
        assert_eq!((work.donations_reused, work.donations_copied), (1, 0));
        assert_close(&host(&out[0]), &want, Tol::ARITH, "donated upload");
    }
}

/// An output computed after the donated argument's last read takes its buffer without an
/// in-place kernel (`x @ w + 1`: the matmul reads `x`, the add writes the output); an argument
/// read at other positions than the one written (a transpose) or by a matmul writing the output
/// is not donated (reported in `unused_donations`), and the results stay right either way.
#[test]
fn donation_follows_the_last_read_and_refuses_unsafe_in_place_updates() {
    let n = 16;
    let x = Array::from_vec(f32s(n * n, 7, -1.0, 1.0), &[n, n]).unwrap();
    let w = Array::from_vec(f32s(n * n, 8, -1.0, 1.0), &[n, n]).unwrap();
    let cases: Vec<(&str, Program, bool)> = vec![
        (
            "x @ w + 1",
            |a: &[Tensor]| vec![a[0].matmul(&a[1]) + 1.0],
            true,
        ),
        (
            "transpose(x) * 2",
            |a: &[Tensor]| vec![a[0].transpose(&[1, 0]) * 2.0 + &a[1] * 0.0],
            false,
        ),
        ("x @ w", |a: &[Tensor]| vec![a[0].matmul(&a[1])], false),
    ];
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        for (name, f, donates) in &cases {
            let want = reference_of(f, &[host(&x), host(&w)]).remove(0);
            let j = jit(*f).on(&dev).donate_argnums(&[0]);
            let m = j.memory_analysis(&[x.clone(), w.clone()]).unwrap();
            if *donates {
                assert_eq!(m.donated, vec![(0, 0)], "{name}: {m}");
            } else {
                assert_eq!(m.donated, vec![], "{name}: {m}");
                assert_eq!(m.unused_donations, vec![0], "{name}: {m}");
            }
            let xd = x.to_device(&dev).unwrap();
            let out = j.call_donating(vec![xd, w.clone()]).unwrap();
            assert_close(&host(&out[0]), &want, Tol::REDUCE, name);
        }
    }
}

/// The same array at a donated position and at another one is a typed error naming both
/// positions (its buffer would be overwritten while the program still reads it), as is a donated
/// position past the arguments; nothing runs.
#[test]
fn donating_an_argument_used_twice_is_a_typed_error() {
    let dev = &gpu_devices()[0];
    let _g = device_guard(dev);
    let p = Array::from_vec(f32s(8, 9, -1.0, 1.0), &[8])
        .unwrap()
        .to_device(dev)
        .unwrap();
    let b = Array::from_vec(f32s(8, 10, -1.0, 1.0), &[8]).unwrap();
    let f = jit(sgd).on(dev).donate_argnums(&[1]);
    let before = host(&p);
    for result in [
        f.call(&[b.clone(), p.clone(), p.clone()]),
        f.call_donating(vec![b.clone(), p.clone(), p.clone()]),
    ] {
        match result {
            Err(e @ Error::BadDonation { .. }) => {
                let Error::BadDonation { donated, other, .. } = &e else {
                    unreachable!()
                };
                assert_eq!((*donated, *other), (1, Some(2)), "{e}");
                assert!(
                    e.to_string().contains("argument 1") && e.to_string().contains("argument 2"),
                    "{e}"
                );
                assert!(e.is_user_error());
            }
            other => panic!("expected BadDonation, got {other:?}"),
        }
    }
    assert_eq!(bits(&host(&p)), bits(&before));
    let g = jit(sgd).on(dev).donate_argnums(&[0, 3]);
    match g.call(&[p.clone(), b.clone(), b.clone()]) {
        Err(Error::BadDonation {
            donated: 3,
            other: None,
            detail,
        }) => assert!(detail.contains("3 argument(s)"), "{detail}"),
        other => panic!("expected BadDonation for position 3, got {other:?}"),
    }
}

/// `memory_analysis` against numbers derived by hand from the shapes: an elementwise chain fuses
/// into one kernel (arguments and output only), a matmul chain keeps its intermediate product as
/// a temporary, a two-pass reduction keeps its partial sums; donation lowers the peak by the
/// output it absorbs.
#[test]
fn memory_analysis_matches_hand_derived_numbers() {
    let dev = &gpu_devices()[0];
    let f4 = |shape: &[usize]| 4 * shape.iter().product::<usize>() as u64;

    // exp(2x + 1) · x, then sin: one fused kernel, 1000 floats in and out.
    let chain = |a: &[Tensor]| vec![((&a[0] * 2.0 + 1.0).exp() * &a[0]).sin()];
    let x = Array::from_vec(f32s(1000, 11, -1.0, 1.0), &[1000]).unwrap();
    let m = jit(chain)
        .on(dev)
        .memory_analysis(std::slice::from_ref(&x))
        .unwrap();
    let want = MemoryAnalysis {
        argument_bytes: 4000,
        output_bytes: 4000,
        alias_bytes: 0,
        constant_bytes: 0,
        temp_bytes: 0,
        peak_bytes: 8000,
        pool_peak_bytes: 2 * 4096,
        buffers: 2,
        donated: vec![],
        unused_donations: vec![],
    };
    assert_eq!(m, want, "{m}");
    let md = jit(chain)
        .on(dev)
        .donate_argnums(&[0])
        .memory_analysis(std::slice::from_ref(&x))
        .unwrap();
    assert_eq!(
        (
            md.alias_bytes,
            md.peak_bytes,
            md.pool_peak_bytes,
            md.buffers
        ),
        (4000, 4000, 4096, 1),
        "{md}"
    );
    assert!(
        md.to_string().contains("argument 0 donated to output 0"),
        "{md}"
    );

    // Shapes alone give the same analysis (no data made).
    let avals = [x.aval().clone()];
    assert_eq!(jit(chain).on(dev).memory_analysis_avals(&avals).unwrap(), m);

    // (a @ b) @ c: the product a @ b is a real temporary.
    let (sa, sb, sc) = ([32usize, 64], [64usize, 16], [16usize, 8]);
    let mm = |a: &[Tensor]| vec![a[0].matmul(&a[1]).matmul(&a[2])];
    let args = [
        Array::from_vec(f32s(32 * 64, 12, -1.0, 1.0), &sa).unwrap(),
        Array::from_vec(f32s(64 * 16, 13, -1.0, 1.0), &sb).unwrap(),
        Array::from_vec(f32s(16 * 8, 14, -1.0, 1.0), &sc).unwrap(),
    ];
    let m = jit(mm).on(dev).memory_analysis(&args).unwrap();
    let (arg, temp, out) = (f4(&sa) + f4(&sb) + f4(&sc), f4(&[32, 16]), f4(&[32, 8]));
    assert_eq!(
        (m.argument_bytes, m.temp_bytes, m.output_bytes, m.peak_bytes),
        (arg, temp, out, arg + temp + out),
        "{m}"
    );

    // The program analysed runs and is right.
    let _g = device_guard(dev);
    let on_dev: Vec<Array> = args.iter().map(|a| a.to_device(dev).unwrap()).collect();
    let f = jit(mm).on(dev);
    f.call(&on_dev).unwrap(); // compiles (and tunes) first
    dev.wait().unwrap();
    let out = f.call(&on_dev).unwrap();
    assert_close(
        &host(&out[0]),
        &reference_of(mm, &args.iter().map(host).collect::<Vec<_>>()).remove(0),
        Tol::REDUCE,
        "matmul chain",
    );
}

/// The analysis of a donating program reports which argument became which output, and an
/// argument nothing can take as unused; `Display` says both.
#[test]
fn memory_analysis_reports_donations() {
    let dev = &gpu_devices()[0];
    // Two updates of different sizes, and a donated argument no output matches.
    let f = |a: &[Tensor]| vec![&a[1] * 0.5, &a[0] + 1.0];
    let args = [
        Array::from_vec(f32s(40, 15, -1.0, 1.0), &[40]).unwrap(),
        Array::from_vec(f32s(12, 16, -1.0, 1.0), &[3, 4]).unwrap(),
        Array::from_vec(f32s(7, 17, -1.0, 1.0), &[7]).unwrap(),
    ];
    let m = jit(f)
        .on(dev)
        .donate_argnums(&[0, 1, 2])
        .memory_analysis(&args)
        .unwrap();
    assert_eq!(m.donated, vec![(1, 0), (0, 1)], "{m}");
    assert_eq!(m.unused_donations, vec![2], "{m}");
    assert_eq!(m.peak_bytes, 160 + 48 + 28, "{m}");
    // The cpu device reports the plan a GPU device would allocate, and runs donating calls.
    let cpu = &devices_with("cpu:1")[0];
    let on_cpu = jit(f).on(cpu).donate_argnums(&[0, 1, 2]);
    assert_eq!(on_cpu.memory_analysis(&args).unwrap(), m);
    let out = on_cpu.call_donating(args.to_vec()).unwrap();
    assert_close(
        &host(&out[1]),
        &reference_of(f, &[host(&args[0]), host(&args[1]), host(&args[2])])[1],
        Tol::EXACT,
        "cpu",
    );
    let text = m.to_string();
    assert!(
        text.contains("argument 1 donated to output 0") && text.contains("[2]"),
        "{text}"
    );
}

/// `pmap(..).donate_argnums(&[0])` on every device of a Vulkan pair and of a Vulkan + GL pair: a
/// replicated parameter update `p - 0.1 pmean(g) + 0.01 p` given up with `call_donating` is
/// computed into each device's own parameter shard (every device counts a reused donation
/// each step, none copied), bit-identical to the plain
/// loop and close to the host loop of the same update; a plain `call` of the donating map
/// copies instead and leaves the argument's values alone.
#[test]
fn a_donated_pmap_update_reuses_every_devices_shard() {
    let step_fn = |a: &[Tensor]| vec![&a[0] - pmean(&a[1], "d") * 0.1 + &a[0] * 0.01];
    // Runtimes of their own (the first test here counts the pool of "vulkan:1,gl:1").
    for layout in ["vulkan:2", "gl:1,vulkan:1"] {
        let devs = devices_with(layout);
        let n = devs.len();
        let _g = devs.iter().find_map(device_guard);
        let (rows, cols, steps) = (4usize, 6usize, 5usize);
        let p0 = HostArray::from_vec(f32s(rows * cols, 7, -2.0, 2.0), &[rows, cols]).unwrap();
        let g = Array::from_vec(f32s(n * rows * cols, 8, -1.0, 1.0), &[n, rows, cols]).unwrap();
        let map = |donate: bool| {
            let m = pmap(step_fn)
                .axis_name("d")
                .devices(&devs)
                .in_axes(&[None, Some(0)])
                .out_axes(&[None]);
            if donate { m.donate_argnums(&[0]) } else { m }
        };
        let (plain, donating) = (map(false), map(true));
        let mut q = Array::from_host_array(p0.clone()).unwrap();
        for _ in 0..steps {
            q = plain.call(&[q, g.clone()]).unwrap().remove(0);
        }
        let want_plain = host(&q);

        let mut p = Array::from_host_array(p0.clone()).unwrap();
        let c = counters();
        for _ in 0..steps {
            p = donating
                .call_donating(vec![p, g.clone()])
                .unwrap()
                .remove(0);
            assert_eq!(p.shards().map(<[Array]>::len), Some(n), "{layout}");
        }
        let work = counters().since(&c);
        assert_eq!(
            (work.donations_reused, work.donations_copied),
            ((steps * n) as u64, 0),
            "{layout}"
        );
        let got = host(&p);
        assert_eq!(
            bits(&got),
            bits(&want_plain),
            "{layout}: donated and plain loops differ"
        );
        // The same update on the host: the mean of the device gradients, in device order.
        let gh = host(&g).to_vec::<f32>().unwrap();
        let mut r = p0.to_vec::<f32>().unwrap();
        for _ in 0..steps {
            for (i, v) in r.iter_mut().enumerate() {
                let mean = (0..n).map(|d| gh[d * rows * cols + i]).sum::<f32>() / n as f32;
                *v = *v - mean * 0.1 + *v * 0.01;
            }
        }
        let r = HostArray::from_vec(r, &[rows, cols]).unwrap();
        assert_close(
            &got,
            &r,
            Tol::new(1e-5, 1e-5),
            &format!("{layout}: vs host loop"),
        );

        // Borrowed arguments: the donation is copied and the argument keeps its values.
        let kept = host(&p);
        let c = counters();
        let out = donating.call(&[p.clone(), g.clone()]).unwrap();
        let work = counters().since(&c);
        assert_eq!(
            (work.donations_reused, work.donations_copied),
            (0, n as u64),
            "{layout}"
        );
        assert_eq!(
            bits(&host(&p)),
            bits(&kept),
            "{layout}: the argument changed"
        );
        assert_ne!(bits(&host(&out[0])), bits(&kept), "{layout}: no update");
    }
}

/// `shard_map` over a 2 × 1 mesh with weights replicated and donated (a data-parallel step,
/// `w - 0.1 psum(xᵀ (x w - t)) / B`): each device's weight block takes the update; equal to the
/// plain map bit for bit. And the typed refusals: a donated position past the arguments, a
/// donated static argument, an array given twice.
#[test]
fn a_donated_mesh_step_and_the_refused_donations() {
    let devs = devices_with("vulkan:2");
    let _g = devs.iter().find_map(device_guard);
    let mesh = Mesh::new(&devs, &[("data", 2), ("model", 1)]).unwrap();
    let (b, d, o) = (8usize, 5usize, 3usize);
    let x = Array::from_vec(f32s(b * d, 11, -1.0, 1.0), &[b, d]).unwrap();
    let t = Array::from_vec(f32s(b * o, 12, -1.0, 1.0), &[b, o]).unwrap();
    let w0 = HostArray::from_vec(f32s(d * o, 13, -1.0, 1.0), &[d, o]).unwrap();
    let map = |donate: &[usize]| {
        shard_map(move |a: &[Tensor]| {
            let err = &a[1].matmul(&a[0]) - &a[2];
            let gw = psum(&a[1].transpose(&[1, 0]).matmul(&err), "data") / b as f32;
            vec![&a[0] - gw * 0.1]
        })
        .mesh(&mesh)
        .in_specs(&[P![], P!["data", None], P!["data", None]])
        .out_specs(&[P![]])
        .donate_argnums(donate)
    };
    let (plain, donating) = (map(&[]), map(&[0]));
    let (mut q, mut w) = (
        Array::from_host_array(w0.clone()).unwrap(),
        Array::from_host_array(w0.clone()).unwrap(),
    );
    let c = counters();
    for _ in 0..4 {
        q = plain.call(&[q, x.clone(), t.clone()]).unwrap().remove(0);
        w = donating
            .call_donating(vec![w, x.clone(), t.clone()])
            .unwrap()
            .remove(0);
    }
    let work = counters().since(&c);
    assert_eq!((work.donations_reused, work.donations_copied), (8, 0));
    assert_eq!(
        bits(&host(&w)),
        bits(&host(&q)),
        "donated and plain steps differ"
    );
    assert_ne!(bits(&host(&w)), bits(&w0), "no update");

    let err = map(&[3])
        .call(&[w.clone(), x.clone(), t.clone()])
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadDonation {
                donated: 3,
                other: None,
                ..
            }
        ),
        "{err}"
    );
    let err = map(&[0])
        .call(&[x.clone(), x.clone(), t.clone()])
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadDonation {
                donated: 0,
                other: Some(1),
                ..
            }
        ),
        "{err}"
    );
    let err = pmap(|a: &[Tensor]| vec![&a[0] * 2.0])
        .devices(&devs)
        .static_argnums(&[1])
        .donate_argnums(&[1])
        .call(&[g_of(&devs), Array::scalar(2.0f32)])
        .unwrap_err();
    assert!(
        matches!(err, Error::BadDonation { donated: 1, .. }) && err.to_string().contains("static"),
        "{err}"
    );
}

/// One row per device of `devs`.
fn g_of(devs: &[brigade::Device]) -> Array {
    Array::from_vec(f32s(devs.len() * 3, 14, -1.0, 1.0), &[devs.len(), 3]).unwrap()
}
