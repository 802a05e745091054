//! Arrays larger than one storage binding, driven with small arrays: every device of a runtime
//! built with `max_binding(64 KiB)` (Vulkan and GL) holds arrays of a few hundred KiB in one
//! buffer and binds them in segments. Transfers and elementwise kernels run on them and agree with
//! the CPU reference; the families not segmented yet refuse them with a typed `OverLimit` that
//! names the array, the limit and the family.

mod common;

use brigade::device::{MAX_BINDING_ENV, parse_max_binding};
use brigade::{Array, DType, Error, HostArray, Runtime, Tensor, jit};
use common::segments::*;
use common::*;

#[test]
fn the_override_lowers_the_binding_limit_and_checks_its_value() {
    for dev in devices() {
        let l = dev.limits();
        assert_eq!(l.max_storage_buffer_binding_size, LIMIT, "{}", dev.name());
        assert!(l.max_buffer_size > 1 << 20, "{}: {l:?}", dev.name());
        assert!(dev.info().to_string().contains("64 KiB"), "{}", dev.info());
    }
    // It never raises a device's own limit.
    let own = devices_with("vulkan:1")[0]
        .limits()
        .max_storage_buffer_binding_size;
    let huge = runtime_max_binding("vulkan:1", 1 << 50).devices()[0].limits();
    assert_eq!(huge.max_storage_buffer_binding_size, own);
    // Values: the memory-limit syntax, a multiple of 4, at least 256 bytes.
    assert_eq!(parse_max_binding("64K").unwrap(), 64 << 10);
    assert_eq!(parse_max_binding(" 1MiB ").unwrap(), 1 << 20);
    assert_eq!(parse_max_binding("1024").unwrap(), 1024);
    for (bad, says) in [
        ("0", "0 bytes"),
        ("1001", "1000 or 1004"),
        ("128", "at least 256"),
        ("lots", "not a number"),
        ("-4K", "sign"),
    ] {
        match parse_max_binding(bad) {
            Err(Error::BadDeviceSpec { spec, detail }) => {
                assert_eq!(spec, bad);
                assert!(detail.contains(says), "{bad}: {detail}");
            }
            other => panic!("{bad}: expected BadDeviceSpec, got {other:?}"),
        }
    }
    for bad in [0, 1001, 100] {
        let r = pollster::block_on(
            Runtime::builder()
                .layout_str("vulkan:1")
                .max_binding(bad)
                .allow_cpu_fallback(false)
                .build(),
        );
        match r {
            Err(Error::BadDeviceSpec { spec, .. }) => {
                assert!(spec.contains(&format!("max_binding({bad})")), "{spec}")
            }
            other => panic!(
                "max_binding({bad}): expected BadDeviceSpec, got {:?}",
                other.err()
            ),
        }
    }
}

/// Run this binary's `env_child` in a child process with `BRIGADE_MAX_BINDING=value`.
fn run_child(value: &str, mode: &str) -> String {
    run_child_test(
        "env_child",
        &[(MAX_BINDING_ENV, value), ("BRIGADE_SEGMENTS_CHILD", mode)],
    )
}

#[test]
fn the_override_from_the_environment() {
    assert!(run_child("96K", "good").contains("env_child good ok"));
    assert!(run_child("96 kilobytes", "bad").contains("env_child bad ok"));
}

/// Child half of [`the_override_from_the_environment`]; on its own (no child mode) it checks that
/// the builder's value takes precedence.
#[test]
fn env_child() {
    let build = |b: brigade::device::RuntimeBuilder| {
        pollster::block_on(b.layout_str("vulkan:1").allow_cpu_fallback(false).build())
    };
    match std::env::var("BRIGADE_SEGMENTS_CHILD").as_deref() {
        Ok("good") => {
            let rt = build(Runtime::builder()).unwrap();
            let l = rt.devices()[0].limits();
            assert_eq!(l.max_storage_buffer_binding_size, 96 << 10);
            println!("env_child good ok");
        }
        Ok("bad") => match build(Runtime::builder()).err() {
            Some(Error::BadDeviceSpec { spec, detail }) => {
                assert!(spec.contains(MAX_BINDING_ENV), "{spec}");
                assert!(detail.contains("96 kilobytes"), "{detail}");
                println!("env_child bad ok");
            }
            other => panic!("expected BadDeviceSpec, got {other:?}"),
        },
        _ => {
            let rt = build(Runtime::builder().max_binding(32 << 10)).unwrap();
            assert_eq!(
                rt.devices()[0].limits().max_storage_buffer_binding_size,
                32 << 10
            );
        }
    }
}

#[test]
fn transfers_of_arrays_over_the_binding_limit() {
    let devs = devices();
    let n = numel(&ODD);
    let data = f32s(n, 11, -3.0, 3.0);
    let x = Array::from_vec(data.clone(), &ODD).unwrap();
    for dev in &devs {
        let _g = device_guard(dev);
        let before = dev.memory_stats().bytes_in_use;
        let d = x.to_device(dev).unwrap();
        // The budget counts the whole array (one buffer, bound in segments).
        assert!(
            dev.memory_stats().bytes_in_use >= before + 4 * n as u64,
            "{}: {}",
            dev.name(),
            dev.memory_stats()
        );
        assert_eq!(d.to_vec::<f32>().unwrap(), data, "{}: to_vec", dev.name());
        let mut out = vec![0f32; n];
        d.read_into(&mut out).unwrap();
        assert_eq!(out, data, "{}: read_into", dev.name());
        let (first, last) = d.read_with(|v: &[f32]| (v[0], v[n - 1])).unwrap();
        assert_eq!((first, last), (data[0], data[n - 1]));
        let h = d.to_host().unwrap();
        assert_eq!(h.shape, ODD.to_vec());
        let p = brigade::device_put(&x, dev).unwrap();
        assert_eq!(
            p.to_vec::<f32>().unwrap(),
            data,
            "{}: device_put",
            dev.name()
        );
    }
    // Device to device, both ways.
    let (vk, gl) = (&devs[0], &devs[1]);
    let on_vk = x.to_device(vk).unwrap();
    let on_gl = {
        let _g = device_guard(gl);
        on_vk.to_device(gl).unwrap()
    };
    {
        let _g = device_guard(gl);
        assert_eq!(on_gl.to_vec::<f32>().unwrap(), data, "vulkan -> gl");
    }
    let back = {
        let _g = device_guard(gl);
        on_gl.to_device(vk).unwrap()
    };
    assert_eq!(back.to_vec::<f32>().unwrap(), data, "gl -> vulkan");
    // Integers and booleans too.
    let ints = i32s(70_001, 12, -1000, 1000);
    let bools = bools(70_001, 13);
    for dev in &devs {
        let _g = device_guard(dev);
        let i = Array::from_vec(ints.clone(), &[70_001])
            .unwrap()
            .to_device(dev)
            .unwrap();
        assert_eq!(i.to_vec::<i32>().unwrap(), ints);
        let b = Array::from_vec(bools.clone(), &[70_001])
            .unwrap()
            .to_device(dev)
            .unwrap();
        assert_eq!(b.to_vec::<bool>().unwrap(), bools);
    }
}

#[test]
fn fused_elementwise_over_segments_matches_the_reference() {
    let a = rand_f32(&ODD, 21);
    let b = rand_f32_in(&ODD, 22, 0.5, 4.0);
    // Same-shape operands, unary and binary ops in one kernel.
    check_segmented(
        |x: &[Tensor]| vec![(&x[0] * &x[1] + x[0].sin()) / (x[1].abs() + 1.0)],
        &[a.clone(), b.clone()],
        Tol::TRANS,
    );
    // Broadcast operands smaller than the limit are bound whole: a row and a column.
    let row = rand_f32(&[ODD[1]], 23);
    let col = rand_f32(&[ODD[0], 1], 24);
    check_segmented(
        |x: &[Tensor]| vec![&x[0] * &x[2] + &x[1] - &x[3]],
        &[a.clone(), row, b.clone(), col],
        Tol::ARITH,
    );
    // The vec4 paths: rows a multiple of 4, a broadcast row, two outputs.
    let v = rand_f32(&VEC, 25);
    let vrow = rand_f32(&[VEC[1]], 26);
    check_segmented(
        |x: &[Tensor]| vec![(&x[0] + &x[1]).exp(), x[0].maximum(&x[1])],
        &[v, vrow],
        Tol::TRANS,
    );
    // Comparisons and selects: a boolean output and a select between large operands.
    check_segmented(
        |x: &[Tensor]| {
            let m = x[0].gt(&x[1]);
            vec![m.where_(&x[0], &(&x[1] * 2.0)), m]
        },
        &[a.clone(), b],
        Tol::EXACT,
    );
    // Integers, and a 1-D length that is odd.
    let i = rand_i32(&[70_001], 27, -50_000, 50_000);
    let j = rand_i32(&[70_001], 28, -50_000, 50_000);
    check_segmented(
        |x: &[Tensor]| vec![&x[0] * &x[1] - &x[0], x[0].cast(DType::F32)],
        &[i, j],
        Tol::EXACT,
    );
    // Computed constants (iota, full) and random numbers over segments.
    check_segmented(
        |x: &[Tensor]| {
            let k = brigade::random::key(7);
            vec![
                Tensor::iota(DType::F32, &ODD, 1) * &x[0] + Tensor::full(0.5f32, &ODD),
                brigade::random::uniform(&k, &[70_001], -1.0, 1.0),
            ]
        },
        &[a],
        Tol::ARITH,
    );
}

#[test]
fn segmented_outputs_feed_the_next_call() {
    let devs = devices();
    let a = rand_f32(&ODD, 31);
    let want: Vec<f32> = host(&a)
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|x| (x * 2.0 + 1.0) * 3.0)
        .collect();
    for dev in &devs {
        let _g = device_guard(dev);
        let f = jit(|x: &[Tensor]| vec![&x[0] * 2.0 + 1.0]).on(dev);
        let g = jit(|x: &[Tensor]| vec![&x[0] * 3.0]).on(dev);
        let y = f.call(std::slice::from_ref(&a)).unwrap();
        let z = g.call(&y).unwrap();
        let got = z[0].to_vec::<f32>().unwrap();
        assert_close(
            &HostArray::from_vec(got, &ODD).unwrap(),
            &HostArray::from_vec(want.clone(), &ODD).unwrap(),
            Tol::ARITH,
            dev.name(),
        );
    }
}

/// Narrow rows (61 f32): blocks of 256 rows fit the 64 KiB binding. 73 261 f32, 286 KiB.
const TALL: [usize; 2] = [1201, 61];

#[test]
fn reductions_over_blocks_match_the_reference() {
    let a = rand_f32(&TALL, 51);
    let b = rand_f32(&TALL, 52);
    // Along rows (blocks of rows), over the first axis and over everything (partials combined),
    // with an elementwise prologue that becomes a segmented kernel of its own.
    check_segmented(
        |x: &[Tensor]| {
            vec![
                x[0].sum(1i64, false),
                (&x[0] * &x[1]).exp().max(0i64, false),
                x[0].sum_all(),
                x[1].mean(&[0i64, 1][..], false),
            ]
        },
        &[a.clone(), b.clone()],
        Tol::REDUCE,
    );
    // Flat and odd: 70 001 elements.
    check_segmented(
        |x: &[Tensor]| vec![x[0].sum_all(), x[0].max(0i64, false)],
        &[rand_f32(&[70_001], 53)],
        Tol::REDUCE,
    );
    // Integers and arg-reductions along rows.
    check_segmented(
        |x: &[Tensor]| vec![x[0].sum(1i64, false), x[0].argmax(1, false)],
        &[rand_i32(&TALL, 54, -1000, 1000)],
        Tol::EXACT,
    );
    check_segmented(|x: &[Tensor]| vec![x[0].argmax(1, false)], &[b], Tol::EXACT);
}

#[test]
fn matmuls_over_row_blocks_match_the_reference() {
    let a = rand_f32(&TALL, 61);
    let w = rand_f32(&[TALL[1], 7], 62);
    // A and C cut into row blocks, B bound whole.
    check_segmented(
        |x: &[Tensor]| vec![x[0].matmul(&x[1])],
        &[a.clone(), w.clone()],
        Tol::REDUCE,
    );
    // B over the limit too: row blocks of A and C, the contraction in chunks of 64 rows of B
    // (200 = 3 x 64 + 8), summed through a temporary: [300, 200] x [200, 150].
    check_segmented(
        |x: &[Tensor]| vec![x[0].matmul(&x[1])],
        &[rand_f32(&[300, 200], 65), rand_f32(&[200, 150], 66)],
        Tol::REDUCE,
    );
    // An odd number of chunks (the first sum lands in C, not the temporary): k = 130.
    check_segmented(
        |x: &[Tensor]| vec![x[0].matmul(&x[1])],
        &[rand_f32(&[300, 130], 67), rand_f32(&[130, 150], 68)],
        Tol::REDUCE,
    );
    // A batched matmul cut along the batch: 300 x [8, 16] x [16, 8].
    check_segmented(
        |x: &[Tensor]| vec![x[0].matmul(&x[1])],
        &[rand_f32(&[300, 8, 16], 63), rand_f32(&[300, 16, 8], 64)],
        Tol::REDUCE,
    );
    // Batched matmuls whose 64 entries exceed one binding: one matmul per entry, concatenated
    // along the batch (21 entries of 4 680 bytes in A), and entries each over the limit
    // themselves (2 x [150, 131] in A, 78 600 bytes each: cut again into row blocks).
    check_segmented(
        |x: &[Tensor]| vec![x[0].matmul(&x[1])],
        &[rand_f32(&[21, 39, 30], 69), rand_f32(&[21, 30, 17], 70)],
        Tol::REDUCE,
    );
    check_segmented(
        |x: &[Tensor]| vec![x[0].matmul(&x[1])],
        &[rand_f32(&[2, 150, 131], 73), rand_f32(&[2, 131, 9], 74)],
        Tol::REDUCE,
    );
    // A gradient step on the large operand: loss, its gradient (dY @ W^T, row blocks again), an
    // update (the gradient of W, over the 1201 rows, is in tests/segments_layout.rs).
    check_segmented(
        |x: &[Tensor]| {
            let g = brigade::grad(|p: &[Tensor]| {
                let y = p[0].matmul(&p[1]).tanh();
                vec![(&y * &y).sum_all()]
            })
            .argnums(&[0])
            .apply(x);
            vec![&x[0] - &(&g[0] * 0.01)]
        },
        &[a, w],
        Tol::REDUCE,
    );
}

#[test]
fn slices_and_concatenations_are_buffer_copies() {
    let a = rand_f32(&ODD, 71);
    let b = rand_f32(&[100, ODD[1]], 72);
    check_segmented(
        |x: &[Tensor]| {
            vec![
                // Whole rows: one run; a block: one run per row, then an elementwise kernel.
                x[0].slice(&[3, 0], &[250, ODD[1]], None),
                x[0].slice(&[10, 5], &[20, 200], None) * 2.0,
                // Along rows, along columns (one run per row and operand), and stacked.
                Tensor::concatenate(&[&x[0], &x[1]], 0),
                Tensor::concatenate(&[&x[1], &(&x[1] + 1.0)], 1),
                Tensor::stack(&[&x[1], &x[1]], 0),
            ]
        },
        &[a, b],
        Tol::EXACT,
    );
}

#[test]
fn sorts_along_the_leading_axis_run_on_transposed_keys() {
    // Each row of such a sort is a strided column: the keys are transposed (a remap over
    // segments), sorted along their last axis over blocks of rows, and the indices transposed
    // back. Ties (small integers) check the stable order; a 3-d array moves axis 0 last.
    let ties: Vec<f32> = i32s(numel(&ODD), 41, -4, 4)
        .into_iter()
        .map(|v| v as f32)
        .collect();
    check_segmented(
        |x: &[Tensor]| {
            vec![
                x[0].argsort(0),
                x[0].sort(0),
                brigade::numpy::argsort(&x[0], Some(0), true),
                x[1].argsort(0),
            ]
        },
        &[
            Array::from_vec(ties, &ODD).unwrap(),
            rand_f32(&[301, 3, 90], 42),
        ],
        Tol::EXACT,
    );
}

/// pmap over a Vulkan and a GL device with the forced limit: every shard over one binding, a
/// segmented elementwise body, a blocked matmul, and `psum` (host-mediated: shards are read back
/// and written whole) on them; equal to the reference of the whole computation.
#[test]
fn pmap_and_psum_over_segmented_shards() {
    let devs = devices();
    let x = rand_f32(&[2, TALL[0], TALL[1]], 81);
    let w = rand_f32(&[TALL[1], 5], 82);
    let p = brigade::pmap(|a: &[Tensor]| {
        let y = (&a[0] * 0.5).tanh();
        vec![brigade::psum(&y, "i"), brigade::psum(&y.matmul(&a[1]), "i")]
    })
    .axis_name("i")
    .in_axes(&[Some(0), None])
    .devices(&devs);
    let outs = {
        let _g = device_guard(&devs[1]);
        p.call(&[x.clone(), w.clone()]).unwrap()
    };
    // The reference: the same sums on the host.
    let want = jit(|a: &[Tensor]| {
        let y = (&a[0] * 0.5).tanh();
        let s = y.sum(0i64, false);
        let m = y.matmul(&a[1]).sum(0i64, false);
        vec![Tensor::stack(&[&s, &s], 0), Tensor::stack(&[&m, &m], 0)]
    })
    .on(&devices_with("cpu:1")[0])
    .call(&[x, w])
    .unwrap();
    let _g = device_guard(&devs[1]);
    for (k, (o, w)) in outs.iter().zip(&want).enumerate() {
        assert_close(&host(o), &host(w), Tol::REDUCE, &format!("output {k}"));
    }
}

/// A kernel over an array larger than one binding binds views of the array's buffer, which the
/// read gate must see as that buffer: while `read_with` holds it mapped (lavapipe maps reads in
/// place), the same kernel inside the closure is refused with the typed error naming
/// `read_with`, and one from another thread waits for the read to end (wgpu rejects a submit
/// that uses a mapped buffer) and then agrees with the host-computed values.
#[test]
fn segmented_kernels_wait_for_a_mapped_read_of_their_input() {
    let dev = devices()[0].clone();
    assert!(
        dev.maps_reads(),
        "{}: lavapipe maps reads in place",
        dev.name()
    );
    let _g = device_guard(&dev);
    let n = ODD[0] * ODD[1];
    let xs = f32s(n, 71, -3.0, 3.0);
    let x = Array::from_vec(xs.clone(), &ODD)
        .unwrap()
        .to_device(&dev)
        .unwrap();
    let f = jit(|a: &[Tensor]| vec![&a[0] * 2.0 - 1.0]).on(&dev);
    let want: Vec<f32> = xs.iter().map(|v| v * 2.0 - 1.0).collect();
    // Compiled before the read, so that the other thread submits while the buffer is mapped.
    assert_eq!(
        f.call(std::slice::from_ref(&x)).unwrap()[0]
            .to_vec::<f32>()
            .unwrap(),
        want
    );
    let program = jit(|a: &[Tensor]| vec![&a[0] * 2.0 - 1.0])
        .program(std::slice::from_ref(&x), &dev)
        .unwrap();
    assert!(
        program.launches.iter().any(|l| !l.views.is_empty()),
        "the kernel binds views of its input's buffer"
    );
    // The read signals the other thread, which answers just before it calls the kernel; the
    // read then holds the buffer mapped for 300 ms more.
    let (start_tx, start_rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let ((inside, released), (y, done)) = std::thread::scope(|sc| {
        let (f, x) = (&f, &x);
        let other = sc.spawn(move || {
            start_rx.recv().unwrap();
            ready_tx.send(()).unwrap();
            let y = f
                .call(std::slice::from_ref(x))
                .and_then(|y| y[0].to_vec::<f32>());
            (y, std::time::Instant::now())
        });
        let read = x
            .read_with(|s: &[f32]| {
                assert_eq!(s.len(), n);
                start_tx.send(()).unwrap();
                ready_rx.recv().unwrap();
                let inside = f
                    .call(std::slice::from_ref(x))
                    .and_then(|y| y[0].to_vec::<f32>());
                std::thread::sleep(std::time::Duration::from_millis(300));
                (inside, std::time::Instant::now())
            })
            .unwrap();
        (read, other.join().unwrap())
    });
    match inside {
        Err(Error::Transfer { detail, .. }) => assert!(detail.contains("read_with"), "{detail}"),
        other => {
            panic!("a segmented kernel inside read_with: want a Transfer error, got {other:?}")
        }
    }
    assert_eq!(y.unwrap(), want, "the other thread's kernel");
    assert!(
        done >= released,
        "the other thread's kernel finished while the read held its input"
    );
}
