//! Reads of device arrays: mapped in place on unified-memory adapters (lavapipe Vulkan), through
//! a staging copy elsewhere (llvmpipe GL): values, odd sizes, threads reading and dispatching on
//! the same array, reads of arrays a pending kernel writes, long read loops in bounded memory.

mod common;

use brigade::device::MAPPED_READS_ENV;
use brigade::{Array, DType, HostData, Tensor, jit};
use common::*;

/// Lengths around the interesting edges: one element, odd counts, a 64 KiB bucket boundary, and
/// over a MiB with an odd tail.
const SIZES: [usize; 6] = [1, 3, 255, 16_385, 65_537, (1 << 20) + 5];

/// Which devices map their reads: lavapipe (device type cpu) has MAPPABLE_PRIMARY_BUFFERS; wgpu's
/// GL backend has not, so GL keeps the staging path.
#[test]
fn vulkan_maps_reads_and_gl_stages_them() {
    assert!(
        device_of("vulkan").maps_reads(),
        "lavapipe (a cpu-type adapter with MAPPABLE_PRIMARY_BUFFERS) should map reads"
    );
    assert!(
        !device_of("gl").maps_reads(),
        "GL has no mappable storage buffers"
    );
}

/// Every dtype at every size survives upload and read, through `to_host`, `to_vec` and
/// `read_into`, on every GPU device (so both the mapped and the staged path).
#[test]
fn every_dtype_round_trips_at_odd_sizes() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        for (k, &n) in SIZES.iter().enumerate() {
            let seed = 100 + k as u64;
            let datas = [
                HostData::F32(f32s(n, seed, -1e6, 1e6)),
                HostData::I32(i32s(n, seed, i32::MIN, i32::MAX)),
                HostData::U32(u32s(n, seed, 0, u32::MAX)),
                HostData::Bool(bools(n, seed)),
            ];
            for data in datas {
                let what = format!("{} x{n} on {}", data.dtype(), dev.name());
                let a = Array::from_host_array(brigade::HostArray {
                    shape: vec![n],
                    data: data.clone(),
                })
                .unwrap()
                .to_device(&dev)
                .unwrap();
                assert_eq!(a.to_host().unwrap().data, data, "to_host of {what}");
                match &data {
                    HostData::F32(v) => {
                        let mut out = vec![0.5f32; n];
                        a.read_into(&mut out).unwrap();
                        assert!(out.iter().zip(v).all(|(x, y)| x.to_bits() == y.to_bits()));
                        assert_eq!(&a.to_vec::<f32>().unwrap(), v, "to_vec of {what}");
                        let same = a.read_with(|s: &[f32]| {
                            s.len() == n && s.iter().zip(v).all(|(x, y)| x.to_bits() == y.to_bits())
                        });
                        assert!(same.unwrap(), "read_with of {what}");
                    }
                    HostData::I32(v) => {
                        let mut out = vec![7i32; n];
                        a.read_into(&mut out).unwrap();
                        assert_eq!(&out, v, "read_into of {what}");
                        assert_eq!(
                            &a.read_with(|s: &[i32]| s.to_vec()).unwrap(),
                            v,
                            "read_with of {what}"
                        );
                    }
                    HostData::U32(v) => {
                        let mut out = vec![7u32; n];
                        a.read_into(&mut out).unwrap();
                        assert_eq!(&out, v, "read_into of {what}");
                        assert_eq!(
                            &a.read_with(|s: &[u32]| s.to_vec()).unwrap(),
                            v,
                            "read_with of {what}"
                        );
                    }
                    HostData::Bool(v) => {
                        let mut out: Vec<bool> = v.iter().map(|b| !b).collect();
                        a.read_into(&mut out).unwrap();
                        assert_eq!(&out, v, "read_into of {what}");
                        // Not viewable in place (4 bytes per bool on the device): converted.
                        assert_eq!(
                            &a.read_with(|s: &[bool]| s.to_vec()).unwrap(),
                            v,
                            "read_with of {what}"
                        );
                    }
                    HostData::F64(_) => unreachable!(),
                }
            }
        }
    }
}

/// Kernel outputs at odd sizes, read back and compared with the reference interpreter, on every
/// GPU device: a fused f32 chain with NaN/inf inputs, an i32 and a bool output.
#[test]
fn kernel_outputs_read_back_like_the_reference() {
    for &n in &SIZES {
        let mut x = f32s(n, 7, -4.0, 4.0);
        if n >= 3 {
            x[0] = f32::NAN;
            x[1] = f32::INFINITY;
            x[2] = -0.0;
        }
        let x = Array::from_vec(x, &[n]).unwrap();
        let i = rand_i32(&[n], 8, -1000, 1000);
        check_on_all(
            |a: &[Tensor]| {
                vec![
                    (&a[0] * 1.5 + 2.0).exp().tanh(),
                    &a[1] * 3 - 1,
                    a[0].is_nan(),
                ]
            },
            &[x, i],
            Tol::TRANS,
        );
    }
}

/// Two threads on the same arrays at once: one reads `x` (to_vec and read_into) over and over,
/// the other dispatches kernels that take `x` as input and reads their results. A mapped `x`
/// must hold the dispatches back, never fail them. Every value is checked.
#[test]
fn threads_read_and_dispatch_on_the_same_array() {
    let dev = device_of("vulkan");
    let n = 300_001;
    let xs = f32s(n, 11, -2.0, 2.0);
    let x = Array::from_vec(xs.clone(), &[n])
        .unwrap()
        .to_device(&dev)
        .unwrap();
    let want: Vec<f32> = xs.iter().map(|v| v * 2.0 - 1.0).collect();
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut out = vec![0.0f32; n];
            for k in 0..60 {
                if k % 2 == 0 {
                    x.read_into(&mut out).unwrap();
                    assert!(out == xs, "read_into of x, round {k}");
                } else {
                    assert!(x.to_vec::<f32>().unwrap() == xs, "to_vec of x, round {k}");
                }
            }
        });
        let dispatcher = s.spawn(|| {
            let f = jit(|a: &[Tensor]| vec![&a[0] * 2.0 - 1.0]).on(&dev);
            for k in 0..60 {
                let y = f.call(std::slice::from_ref(&x)).unwrap();
                // Sometimes read at once, sometimes after a second dispatch that also reads x.
                if k % 3 == 0 {
                    let z = f.call(std::slice::from_ref(&x)).unwrap();
                    assert!(z[0].to_vec::<f32>().unwrap() == want, "z, round {k}");
                }
                assert!(y[0].to_vec::<f32>().unwrap() == want, "y, round {k}");
            }
        });
        let second_reader = s.spawn(|| {
            for k in 0..60 {
                let h = x.to_host().unwrap();
                assert!(
                    h.data == HostData::F32(xs.clone()),
                    "second reader, round {k}"
                );
            }
        });
        reader.join().unwrap();
        dispatcher.join().unwrap();
        second_reader.join().unwrap();
    });
    assert_eq!(dev.last_error(), None);
}

/// A read issued right after a long kernel was submitted (no wait in between) sees the kernel's
/// result: the map waits for the work that writes the buffer.
#[test]
fn reads_wait_for_the_pending_kernel_writing_the_array() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let n = 1 << 20;
        let xs = f32s(n, 21, 0.5, 1.5);
        let x = Array::from_vec(xs.clone(), &[n]).unwrap();
        // Twelve dependent steps: long enough that a read not waiting would see stale memory.
        let f = jit(|a: &[Tensor]| {
            let mut t = a[0].clone();
            for _ in 0..12 {
                t = (&t * 1.001 + 0.25).sqrt();
            }
            vec![t]
        })
        .on(&dev);
        let graph = jit(|a: &[Tensor]| {
            let mut t = a[0].clone();
            for _ in 0..12 {
                t = (&t * 1.001 + 0.25).sqrt();
            }
            vec![t]
        })
        .graph(std::slice::from_ref(&x))
        .unwrap();
        let want = brigade::reference::eval_graph(&graph, &[x.host().unwrap().clone()]).unwrap();
        let HostData::F32(want) = &want[0].data else {
            panic!("f32 expected")
        };
        for round in 0..3 {
            let y = f.call(std::slice::from_ref(&x)).unwrap();
            let got = y[0].to_vec::<f32>().unwrap();
            let worst = got
                .iter()
                .zip(want)
                .map(|(a, b)| ((a - b).abs() / b.abs().max(1e-6)) as f64)
                .fold(0.0, f64::max);
            assert!(
                worst < 1e-5,
                "on {}, round {round}: rel err {worst}",
                dev.name()
            );
        }
    }
}

/// Thousands of reads of the same and of fresh arrays keep device memory and host memory flat:
/// no staging buffer or mapping is leaked per read.
#[test]
fn many_reads_stay_in_bounded_memory() {
    // Devices of their own: the pool counts of the shared ones move with the other tests.
    for dev in devices_with("vulkan:1,gl:1") {
        let _g = device_guard(&dev);
        let n = 1 << 18; // 1 MiB
        let xs = f32s(n, 31, -1.0, 1.0);
        let x = Array::from_vec(xs.clone(), &[n])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let f = jit(|a: &[Tensor]| vec![&a[0] + 1.0]).on(&dev);
        let mut out = vec![0.0f32; n];
        let round = |k: usize, out: &mut Vec<f32>| {
            x.read_into(out).unwrap();
            assert!(*out == xs, "round {k}");
            let y = f.call(std::slice::from_ref(&x)).unwrap();
            let v = y[0].to_vec::<f32>().unwrap();
            assert_eq!(v[k % n], xs[k % n] + 1.0, "round {k}");
        };
        for k in 0..20 {
            round(k, &mut out);
        }
        let mem0 = dev.memory_stats();
        let created0 = dev.pool_stats().created;
        let rss0 = rss_bytes();
        for k in 20..1000 {
            round(k, &mut out);
        }
        let mem1 = dev.memory_stats();
        assert_eq!(
            dev.pool_stats().created,
            created0,
            "on {}: reads created buffers",
            dev.name()
        );
        assert!(
            mem1.bytes_total <= mem0.bytes_total,
            "on {}: {mem0} -> {mem1}",
            dev.name()
        );
        if let (Some(a), Some(b)) = (rss0, rss_bytes()) {
            // 980 rounds of two 1 MiB reads: leaking one read a round would be ~1 GiB, two ~2 GiB.
            // (The bound is loose: other tests of this binary allocate in parallel.)
            assert!(
                b < a + (512 << 20),
                "on {}: resident memory grew {} MiB over 980 rounds",
                dev.name(),
                (b - a) >> 20
            );
        }
    }
}

/// Resident set size of this process (Linux), for leak checks.
fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// A raw `Device::download` still copies when it is called (staging), also on a device that maps
/// array reads: a write after the call does not change what it returns. Mixed with array reads of
/// the same buffer's array.
#[test]
fn raw_downloads_keep_their_copy_at_call_time() {
    let dev = device_of("vulkan");
    let a: Vec<u32> = (0..1000).map(|i| i * 3 + 1).collect();
    let b: Vec<u32> = (0..1000).map(|i| i ^ 0x5555).collect();
    let buf = dev.upload(&HostData::U32(a.clone())).unwrap();
    let pending = dev.download(&buf, DType::U32, 1000);
    dev.write(&buf, &HostData::U32(b.clone())).unwrap();
    assert_eq!(pollster::block_on(pending).unwrap(), HostData::U32(a));
    assert_eq!(
        dev.download_blocking(&buf, DType::U32, 1000).unwrap(),
        HostData::U32(b.clone())
    );
    let arr = Array::from_vec(b.clone(), &[1000])
        .unwrap()
        .to_device(&dev)
        .unwrap();
    let all = pollster::block_on(brigade::device::download_all(&[
        (dev.clone(), buf.clone(), DType::U32, 1000),
        (dev.clone(), buf.clone(), DType::U32, 10),
    ]))
    .unwrap();
    assert_eq!(all[0], HostData::U32(b.clone()));
    assert_eq!(all[1], HostData::U32(b[..10].to_vec()));
    assert_eq!(arr.to_vec::<u32>().unwrap(), b);
}

/// The same array twice in one sharded read (a replicated pmap result is read once; a stacked
/// one reads every shard): one map per buffer, every part right.
#[test]
fn sharded_reads_on_mapped_devices() {
    let devs = devices_with("vulkan:2");
    let n = 4099;
    let xs = f32s(2 * n, 41, -3.0, 3.0);
    let x = Array::from_vec(xs.clone(), &[2, n]).unwrap();
    let y = brigade::pmap(|a: &[Tensor]| vec![&a[0] * 2.0, a[0].sum(0, false)])
        .devices(&devs)
        .call(&[x])
        .unwrap();
    let got = y[0].to_vec::<f32>().unwrap();
    assert!(got.iter().zip(&xs).all(|(g, v)| *g == v * 2.0));
    let mut out = vec![0.0f32; 2 * n];
    y[0].read_into(&mut out).unwrap();
    assert_eq!(out, got);
    let sums = y[1].to_vec::<f32>().unwrap();
    for d in 0..2 {
        let want: f64 = xs[d * n..(d + 1) * n].iter().map(|&v| v as f64).sum();
        assert!(
            (sums[d] as f64 - want).abs() < 1e-2,
            "{} vs {want}",
            sums[d]
        );
    }
}

/// With `BRIGADE_MAPPED_READS=off` no device maps reads and everything reads the same (checked
/// in a child process, since the variable is read when devices are requested).
#[test]
fn mapped_reads_can_be_turned_off() {
    if std::env::var_os("BRIGADE_TEST_CHILD").is_some() {
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_with_mapped_reads_off", "--nocapture"])
        .env(MAPPED_READS_ENV, "off")
        .env("BRIGADE_TEST_CHILD", "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}

#[test]
fn child_with_mapped_reads_off() {
    if std::env::var_os("BRIGADE_TEST_CHILD").is_none() {
        return;
    }
    let dev = device_of("vulkan");
    assert!(!dev.maps_reads());
    let xs = f32s(1001, 51, -1.0, 1.0);
    let x = Array::from_vec(xs.clone(), &[1001])
        .unwrap()
        .to_device(&dev)
        .unwrap();
    let y = jit(|a: &[Tensor]| vec![&a[0] * 2.0])
        .on(&dev)
        .call(&[x])
        .unwrap();
    let got = y[0].to_vec::<f32>().unwrap();
    assert!(got.iter().zip(&xs).all(|(g, v)| *g == v * 2.0));
}

/// `read_with` hands the closure the data in place: on lavapipe (mapped reads) the array's own
/// buffer, elsewhere the staging copy. Work inside the closure that needs the mapped buffer (a
/// kernel reading the array, a second read of it) is refused with a typed error naming
/// `read_with`, never left waiting; work on other arrays goes through; after the closure the same
/// work succeeds. Also: host and sharded arrays, and the element type checked against the dtype.
#[test]
fn read_with_views_in_place_and_refuses_work_that_would_wait_for_it() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let name = dev.name().to_string();
        let n = 70_001;
        let xs = f32s(n, 61, -5.0, 5.0);
        let x = Array::from_vec(xs.clone(), &[n])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let other = Array::from_vec(f32s(n, 62, -1.0, 1.0), &[n])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let f = jit(|a: &[Tensor]| vec![&a[0] * 2.0 - 1.0]).on(&dev);
        let (sum, inner_same, inner_other, inner_read) = x
            .read_with(|s: &[f32]| {
                let sum: f64 = s.iter().map(|&v| v as f64).sum();
                // Touch the results inside the closure, so a lazily failing call shows too.
                let same = f
                    .call(std::slice::from_ref(&x))
                    .and_then(|y| y[0].to_vec::<f32>());
                let oth = f
                    .call(std::slice::from_ref(&other))
                    .and_then(|y| y[0].to_vec::<f32>());
                let again = x.to_vec::<f32>();
                (sum, same, oth, again)
            })
            .unwrap();
        let want: f64 = xs.iter().map(|&v| v as f64).sum();
        assert!(
            (sum - want).abs() < 1e-6 * n as f64,
            "sum on {name}: {sum} vs {want}"
        );
        let want_other: Vec<f32> = other
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v * 2.0 - 1.0)
            .collect();
        assert_eq!(
            inner_other.unwrap(),
            want_other,
            "other array inside read_with on {name}"
        );
        let doubled: Vec<f32> = xs.iter().map(|v| v * 2.0 - 1.0).collect();
        if dev.maps_reads() {
            for (what, r) in [
                ("a kernel reading it", inner_same.map(|_| ())),
                ("a second read", inner_read.map(|_| ())),
            ] {
                match r {
                    Err(brigade::Error::Transfer { detail, .. }) => {
                        assert!(detail.contains("read_with"), "{what} on {name}: {detail}")
                    }
                    other => panic!(
                        "{what} inside read_with on {name}: want a Transfer error, got {other:?}"
                    ),
                }
            }
        } else {
            // Through a staging copy, the array itself is free to use meanwhile.
            assert_eq!(
                inner_same.unwrap(),
                doubled,
                "kernel inside read_with on {name}"
            );
            assert_eq!(
                inner_read.unwrap(),
                xs,
                "second read inside read_with on {name}"
            );
        }
        // Afterwards everything works again.
        let y = f.call(std::slice::from_ref(&x)).unwrap();
        assert_eq!(
            y[0].to_vec::<f32>().unwrap(),
            doubled,
            "after read_with on {name}"
        );
        // The element type must be the dtype's.
        match x.read_with(|s: &[i32]| s.len()) {
            Err(brigade::Error::DTypeMismatch {
                op: "read_with", ..
            }) => {}
            other => panic!("i32 view of an f32 array on {name}: {other:?}"),
        }
    }
    // Host arrays and sharded ones.
    let h = Array::from_vec(vec![3i32, -4, 5], &[3]).unwrap();
    assert_eq!(h.read_with(|s: &[i32]| s.iter().sum::<i32>()).unwrap(), 4);
    let devs = devices_with("vulkan:2");
    let xs = f32s(2 * 513, 63, -2.0, 2.0);
    let y = brigade::pmap(|a: &[Tensor]| vec![&a[0] + 1.0])
        .devices(&devs)
        .call(&[Array::from_vec(xs.clone(), &[2, 513]).unwrap()])
        .unwrap();
    let got = y[0].read_with(|s: &[f32]| s.to_vec()).unwrap();
    assert!(
        got.iter().zip(&xs).all(|(g, v)| *g == v + 1.0),
        "sharded read_with"
    );
}
