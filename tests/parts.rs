//! Arrays larger than one wgpu buffer (`max_buffer_size`), driven with small arrays: every device
//! of a runtime built with `max_buffer(256 KiB)` and `max_binding(64 KiB)` (Vulkan and GL) stores
//! an array of a MiB or so in several buffers (parts of 256 KiB) and binds it in segments that
//! never straddle two parts. Transfers, copies, every kernel family and collectives run on such
//! arrays and agree with the CPU reference.

mod common;

use brigade::device::{MAX_BUFFER_ENV, bucket_size, parse_max_binding};
use brigade::nn::{self, Layout};
use brigade::{Array, Device, Error, Padding, Runtime, Tensor, grad, jit, pmap, psum};
use common::*;

/// The forced binding limit: 16 384 f32 per segment.
const BINDING: u64 = 64 << 10;
/// The forced buffer limit: an array over 65 536 f32 is stored in parts.
const BUFFER: u64 = 256 << 10;

/// A Vulkan and a GL device with both limits forced.
fn devices() -> Vec<Device> {
    runtime_forced("vulkan:1,gl:1", BINDING, Some(BUFFER))
        .devices()
        .to_vec()
}

/// `check_on` over the forced devices, after checking that the program stores an array in parts
/// and that no segment it binds straddles two parts (or exceeds the binding limit).
fn check_parted<F>(f: F, args: &[Array], tol: Tol)
where
    F: Fn(&[Tensor]) -> Vec<Tensor> + Clone,
{
    let devs = devices();
    let p = jit(f.clone()).program(args, &devs[0]).unwrap();
    let part = devs[0].limits().part_bytes();
    assert_eq!(part, BUFFER);
    let parted = |s: usize| p.slot_bytes[s] > BUFFER;
    assert!(
        (0..p.slot_bytes.len()).any(parted),
        "no array of the program is over the buffer limit: {:?}",
        p.slot_bytes
    );
    for l in &p.launches {
        for (v, &s) in l.views.iter().zip(&l.slots) {
            let Some(v) = v else { continue };
            assert!(
                v.size <= BINDING && v.offset % 256 == 0,
                "{}: {v:?}",
                l.label
            );
            if parted(s) {
                assert_eq!(
                    v.offset / part,
                    (v.offset + v.size - 1) / part,
                    "{}: {v:?} straddles two parts",
                    l.label
                );
            }
        }
    }
    check_on(&devs, f, args, tol);
}

#[test]
fn the_override_lowers_the_buffer_limit() {
    for dev in devices() {
        let l = dev.limits();
        assert_eq!(
            (l.max_buffer_size, l.max_storage_buffer_binding_size),
            (BUFFER, BINDING),
            "{}",
            dev.name()
        );
        assert_eq!((l.part_bytes(), l.segment_bytes()), (BUFFER, BINDING));
    }
    // A buffer limit below the binding limit lowers the binding limit too.
    let l = runtime_forced("vulkan:1", 1 << 20, Some(128 << 10)).devices()[0].limits();
    assert_eq!(
        (l.max_buffer_size, l.max_storage_buffer_binding_size),
        (128 << 10, 128 << 10)
    );
    // It never raises a device's own limit.
    let own = devices_with("vulkan:1")[0].limits().max_buffer_size;
    let huge = runtime_forced("vulkan:1", 1 << 50, Some(1 << 50)).devices()[0].limits();
    assert_eq!(huge.max_buffer_size, own);
    for bad in [0, 1001, 100] {
        let r = pollster::block_on(
            Runtime::builder()
                .layout_str("vulkan:1")
                .max_buffer(bad)
                .allow_cpu_fallback(false)
                .build(),
        );
        match r {
            Err(Error::BadDeviceSpec { spec, .. }) => {
                assert!(spec.contains(&format!("max_buffer({bad})")), "{spec}")
            }
            other => panic!(
                "max_buffer({bad}): expected BadDeviceSpec, got {:?}",
                other.err()
            ),
        }
    }
    assert_eq!(parse_max_binding("256K").unwrap(), BUFFER);
}

#[test]
fn the_override_from_the_environment() {
    let out = run_child_test("env_child", &[(MAX_BUFFER_ENV, "128K")]);
    assert!(out.contains("env_child ok"), "{out}");
    let out = run_child_test("env_child", &[(MAX_BUFFER_ENV, "lots")]);
    assert!(out.contains("env_child refused"), "{out}");
}

/// Run by `the_override_from_the_environment` in a child process.
#[test]
fn env_child() {
    let Ok(v) = std::env::var(MAX_BUFFER_ENV) else {
        return; // run as a plain test: nothing to check here
    };
    let r = pollster::block_on(
        Runtime::builder()
            .layout_str("vulkan:1")
            .allow_cpu_fallback(false)
            .build(),
    );
    match (v.as_str(), r) {
        ("128K", Ok(rt)) => {
            assert_eq!(rt.devices()[0].limits().max_buffer_size, 128 << 10);
            println!("env_child ok");
        }
        ("lots", Err(Error::BadDeviceSpec { spec, detail })) => {
            assert!(spec.contains(MAX_BUFFER_ENV), "{spec}");
            assert!(detail.contains("environment variable"), "{detail}");
            println!("env_child refused");
        }
        (v, r) => panic!("{MAX_BUFFER_ENV}={v}: {:?}", r.map(|_| ())),
    }
}

/// Uploads and reads of arrays in parts are exact, free their memory, and the app gets every
/// part's wgpu buffer (the whole-array export says to take the parts).
#[test]
fn transfers_of_arrays_in_parts() {
    // A runtime of its own: other tests' buffers would move the memory figures.
    for dev in runtime_forced("gl:1,vulkan:1", BINDING, Some(BUFFER)).devices() {
        let _g = device_guard(dev);
        let before = dev.memory_stats().bytes_in_use;
        for x in [
            rand_f32(&[300_001], 3),
            rand_i32(&[70_001, 3], 4, -1000, 1000),
        ] {
            let d = x.to_device(dev).unwrap();
            let bytes = x.size() as u64 * 4;
            assert!(dev.memory_stats().bytes_in_use >= before + bytes);
            assert_eq!(
                host(&d),
                host(&x),
                "{}: read back {:?}",
                dev.name(),
                x.shape()
            );
            match d.wgpu_buffer() {
                Err(e @ Error::BadBuffer { .. }) => {
                    let m = e.to_string();
                    assert!(
                        m.contains("wgpu_buffer_parts") && m.contains(&bytes.to_string()),
                        "{m}"
                    );
                }
                other => panic!("{}: expected BadBuffer, got {other:?}", dev.name()),
            }
            let parts = d.wgpu_buffer_parts().unwrap();
            assert_eq!(parts.len() as u64, bytes.div_ceil(BUFFER), "{}", dev.name());
            assert_eq!(parts.iter().map(|p| p.size).sum::<u64>(), bytes);
            assert!(parts.iter().all(|p| p.size <= BUFFER && p.offset == 0));
        }
        // read_into copies part by part into the caller's slice.
        let x = rand_f32(&[300_001], 5);
        let mut into = vec![0.0f32; 300_001];
        x.to_device(dev).unwrap().read_into(&mut into).unwrap();
        assert_eq!(into, x.to_vec::<f32>().unwrap(), "{}", dev.name());
        assert_eq!(dev.memory_stats().bytes_in_use, before, "{}", dev.name());
    }
}

#[test]
fn fused_elementwise_over_parts() {
    let (a, b) = (rand_f32(&[301, 1001], 5), rand_f32(&[301, 1001], 6));
    check_parted(
        |t: &[Tensor]| vec![((&t[0] * 1.5 + 2.0).tanh() * &t[1]).exp()],
        &[a, b],
        Tol::TRANS,
    );
}

#[test]
fn reductions_over_parts() {
    let x = rand_f32(&[301, 1001], 7);
    check_parted(
        |t: &[Tensor]| {
            vec![
                t[0].sum([0], false),
                t[0].sum([1], false),
                t[0].max([0, 1], false),
                t[0].argmax(1, false),
            ]
        },
        &[x],
        Tol::REDUCE,
    );
}

#[test]
fn matmul_over_parts() {
    let (a, b) = (rand_f32(&[700, 300], 8), rand_f32(&[300, 500], 9));
    check_parted(
        |t: &[Tensor]| vec![t[0].matmul(&t[1]), t[0].transpose(&[1, 0]).matmul(&t[0])],
        &[a, b],
        Tol::REDUCE,
    );
}

#[test]
fn layout_ops_and_copies_over_parts() {
    let (a, b) = (rand_f32(&[301, 1001], 10), rand_f32(&[150, 1001], 11));
    check_parted(
        |t: &[Tensor]| {
            vec![
                t[0].transpose(&[1, 0]),
                Tensor::concatenate(&[&t[0], &t[1]], 0),
                t[0].slice(&[3, 0], &[290, 1001], None),
                t[0].slice(&[0, 5], &[301, 1000], Some(&[2, 3])),
            ]
        },
        &[a, b],
        Tol::EXACT,
    );
}

#[test]
fn sorts_over_parts() {
    let x = rand_f32(&[600, 501], 12);
    check_parted(|t: &[Tensor]| vec![t[0].argsort(1)], &[x], Tol::EXACT);
    // One sort row over the binding: its merge-sort state (16 chunks of 64 KiB) is in parts.
    let row = rand_f32(&[100_003], 16);
    check_parted(
        |t: &[Tensor]| vec![t[0].argsort(0), t[0].sort(0)],
        &[row],
        Tol::EXACT,
    );
}

/// Windows and convolutions run over blocks of the batch whose ranges may cross parts (staged).
#[test]
fn pooling_and_convolutions_over_parts() {
    // NCHW input of 131 x [3, 29, 23] (1 MiB), result 131 x [8, 27, 21] (2.3 MiB).
    let x = rand_f32(&[131, 3, 29, 23], 14);
    let w = rand_f32(&[8, 3, 3, 3], 15);
    check_parted(
        |t: &[Tensor]| {
            vec![
                nn::max_pool(&t[0], &[3, 3], &[2, 1], &Padding::Same, Layout::Nchw),
                t[0].conv(&t[1], &[1, 1], Padding::Valid),
            ]
        },
        &[x.clone(), w.clone()],
        Tol::REDUCE,
    );
    // Both gradients (the kernel's sums per-block partials over the batch).
    check_parted(
        |t: &[Tensor]| {
            grad(|p: &[Tensor]| {
                let y = p[0].conv(&p[1], &[1, 1], Padding::Same).tanh();
                vec![(&y * &y).sum_all()]
            })
            .argnums(&[0, 1])
            .apply(t)
        },
        &[x, w],
        // The kernel gradient sums 131 x 29 x 23 (87 377) products per element in f32 (the
        // reference in f64); results reach 180, so an absolute 1e-3 is 6e-6 of the largest.
        Tol {
            rtol: 1e-4,
            atol: 1e-3,
        },
    );
}

/// A collective over shards stored in parts: every device's psum equals the host sum.
#[test]
fn psum_of_shards_in_parts() {
    let devs = runtime_forced("vulkan:2", BINDING, Some(BUFFER))
        .devices()
        .to_vec();
    let _g = devs.iter().find_map(device_guard);
    let x = rand_f32(&[2, 300_001], 13);
    let out = pmap(|t: &[Tensor]| vec![psum(&(&t[0] * 2.0), "i")])
        .axis_name("i")
        .devices(&devs)
        .call(std::slice::from_ref(&x))
        .unwrap();
    let xs = host(&x).to_f64();
    let n = 300_001;
    let got = host(&out[0]).to_f64();
    assert_eq!(got.len(), 2 * n);
    for d in 0..2 {
        for i in 0..n {
            let want = 2.0 * (xs[i] + xs[n + i]);
            let g = got[d * n + i];
            assert!(
                (g - want).abs() <= 1e-5 * want.abs().max(1.0),
                "device {d} element {i}: {g} vs {want}"
            );
        }
    }
}

/// The memory budget counts an array in parts, and one over the budget is a typed OutOfMemory.
#[test]
fn the_budget_counts_parts() {
    let dev = runtime_forced("gl:1", BINDING, Some(BUFFER)).devices()[0].clone();
    let _g = device_guard(&dev);
    dev.set_memory_limit(Some(1 << 20));
    let r = dev.alloc(2 << 20);
    dev.set_memory_limit(None);
    match r {
        Err(e @ Error::OutOfMemory { .. }) => assert!(e.to_string().contains("2 MiB"), "{e}"),
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    // Within the budget an array over the buffer limit is made of parts, each counted as any
    // buffer is (its pool bucket): 256 KiB, 256 KiB and the 175 712-byte tail's bucket.
    let before = dev.memory_stats().bytes_in_use;
    let b = dev.alloc(700_000).unwrap();
    assert!(b.is_parted());
    let tail = bucket_size(700_000 - 2 * BUFFER, BUFFER);
    assert!((175_712..BUFFER).contains(&tail), "{tail}");
    assert_eq!(dev.memory_stats().bytes_in_use, before + 2 * BUFFER + tail);
    drop(b);
    assert_eq!(dev.memory_stats().bytes_in_use, before);
    // The parts went back to the pool: a second array of that size reuses all three.
    let reused = dev.pool_stats().reused;
    let c = dev.alloc(700_000).unwrap();
    assert!(c.is_parted());
    assert_eq!(dev.pool_stats().reused, reused + 3, "{}", dev.name());
}
