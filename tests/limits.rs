//! Huge shapes and memory budgets: no size a user can write takes the
//! process down, and running out of device memory is a typed, recoverable error.
//!
//! - Every shape product is checked: a shape whose element count or byte size overflows is
//!   `Error::ShapeTooLarge` naming the shape, eagerly, under `jit` and in every shape rule.
//! - Host allocations sized by user input are fallible: `Error::OutOfMemory` on device `host`,
//!   naming the bytes.
//! - Inside `jit`, `full`/`iota` constants stay primitives the device computes: a huge one is the
//!   device's `Error::OverLimit` (naming the binding limit), never a host allocation.
//! - A per-device budget (`Runtime::builder().memory_limit`, `BRIGADE_MEMORY_LIMIT`) gives
//!   `Error::OutOfMemory` naming the bytes requested, in use and the limit, apart from `OverLimit`;
//!   after the arrays are dropped the device runs again, on Vulkan and GL.
//!
//! Each test counts the bad inputs it tries and prints `limits: <test>: <n> bad inputs`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use brigade::device::{MEMORY_LIMIT_ENV, Runtime, parse_memory_limit};
use brigade::{Array, DType, Device, Error, HostArray, Scalar, Tensor, jit};
use common::{
    Tol, assert_close, check_on, device_guard, devices_with, gpu_devices, host, run_child_test,
};

/// A bad-input counter per test, printed at the end of each test.
struct Tally {
    name: &'static str,
    n: AtomicUsize,
}

impl Tally {
    fn new(name: &'static str) -> Tally {
        Tally {
            name,
            n: AtomicUsize::new(0),
        }
    }
    fn bump(&self) {
        self.n.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        println!(
            "limits: {}: {} bad inputs",
            self.name,
            self.n.load(Ordering::Relaxed)
        );
    }
}

const TIB: usize = 1 << 40;

fn shape_too_large(t: &Tally, what: &str, r: brigade::Result<impl std::fmt::Debug>, shape: &str) {
    t.bump();
    match r {
        Err(e @ Error::ShapeTooLarge { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(shape),
                "{what}: the message should name the shape {shape}: {msg}"
            );
            assert!(e.is_user_error(), "{what}: ShapeTooLarge is a user error");
        }
        other => panic!("{what}: expected Error::ShapeTooLarge naming {shape}, got {other:?}"),
    }
}

/// `Error::OutOfMemory` on `device` whose message names every string of `names`.
fn out_of_memory(
    t: &Tally,
    what: &str,
    r: brigade::Result<impl std::fmt::Debug>,
    device: &str,
    names: &[String],
) {
    t.bump();
    match r {
        Err(e @ Error::OutOfMemory { .. }) => {
            let Error::OutOfMemory { device: d, .. } = &e else {
                unreachable!()
            };
            assert!(d.contains(device), "{what}: device {d:?}, want {device:?}");
            let msg = e.to_string();
            for n in names {
                assert!(
                    msg.contains(n.as_str()),
                    "{what}: the message should name {n:?}: {msg}"
                );
            }
        }
        other => panic!("{what}: expected Error::OutOfMemory on {device}, got {other:?}"),
    }
}

/// `Error::OverLimit` with `needed > limit`, naming its limit; returns the limit.
fn over_limit(t: &Tally, what: &str, r: brigade::Result<Vec<Array>>, dev: &Device) -> u64 {
    t.bump();
    match r {
        Err(e @ Error::OverLimit { .. }) => {
            let Error::OverLimit {
                needed,
                limit,
                limit_name,
                ..
            } = &e
            else {
                unreachable!()
            };
            assert!(needed > limit, "{what}: needed {needed} <= limit {limit}");
            // The first limit the program meets: a buffer's or a binding's bytes, or 32-bit
            // kernel indexing.
            let l = dev.limits();
            let binding = l.max_storage_buffer_binding_size.min(l.max_buffer_size);
            assert!(
                *limit == binding
                    || *limit == l.max_buffer_size
                    || *limit == u32::MAX as u64
                    || *limit == u32::MAX as u64 * 4,
                "{what} on {}: limit {limit} ({limit_name}), binding limit {binding}",
                dev.name()
            );
            assert!(!limit_name.is_empty(), "{what}: unnamed limit");
            let msg = e.to_string();
            assert!(
                msg.contains(limit_name) && msg.contains(&needed.to_string()),
                "{what}: {msg}"
            );
            *limit
        }
        other => panic!(
            "{what} on {}: expected Error::OverLimit, got {other:?}",
            dev.name()
        ),
    }
}

/// The error a tensor carries (an op that failed), as a Result.
fn tensor_result(t: Tensor) -> brigade::Result<Array> {
    t.to_array()
}

/// Small data with the values the issue names: NaN, ±inf, ±0 and ordinary numbers.
fn specials() -> Array {
    Array::from_vec(
        vec![
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1.5,
            -2.25,
            3.0,
        ],
        &[8],
    )
    .unwrap()
}

#[test]
fn overflowing_shapes_are_shape_too_large() {
    let t = Tally::new("overflowing_shapes_are_shape_too_large");
    let big = "[4294967296, 4294967296]";
    shape_too_large(
        &t,
        "from_vec",
        Array::from_vec(Vec::<f32>::new(), &[1 << 32, 1 << 32]),
        big,
    );
    shape_too_large(
        &t,
        "from_vec i32",
        Array::from_vec(vec![1i32], &[1 << 32, 1 << 32, 1]),
        "[4294967296, 4294967296, 1]",
    );
    // 2^62 elements fit in usize, but not their 2^64 bytes.
    shape_too_large(
        &t,
        "from_vec bytes",
        Array::from_vec(vec![1.0f32], &[1 << 62]),
        "[4611686018427387904]",
    );
    shape_too_large(
        &t,
        "host array",
        HostArray::new(vec![usize::MAX, 2], brigade::HostData::F32(vec![])),
        &format!("[{}, 2]", usize::MAX),
    );
    shape_too_large(
        &t,
        "Array::full",
        Array::full(true, &[1 << 32, 1 << 32]),
        big,
    );
    shape_too_large(
        &t,
        "HostArray::full",
        HostArray::full(Scalar::I32(7), &[1 << 33, 1 << 33]),
        "[8589934592, 8589934592]",
    );
    shape_too_large(
        &t,
        "zeros",
        tensor_result(Tensor::zeros(&[1 << 32, 1 << 32], DType::F32)),
        big,
    );
    shape_too_large(
        &t,
        "ones",
        tensor_result(Tensor::ones(&[usize::MAX], DType::I32)),
        &format!("[{}]", usize::MAX),
    );
    shape_too_large(
        &t,
        "iota",
        tensor_result(Tensor::iota(DType::U32, &[1 << 32, 1 << 32], 1)),
        big,
    );
    // A zero dimension makes any shape empty: that is fine, and the data length is checked.
    let e = Array::from_vec(vec![1.0f32, 2.0], &[1 << 40, 1 << 40, 0]).unwrap_err();
    t.bump();
    assert!(
        matches!(
            e,
            Error::DataLength {
                expected: 0,
                got: 2,
                ..
            }
        ),
        "{e:?}"
    );
    let empty = Array::from_vec(Vec::<f32>::new(), &[1 << 40, 1 << 40, 0]).unwrap();
    assert_eq!(empty.size(), 0);
    let z = Tensor::zeros(&[1 << 40, 0, 1 << 40], DType::F32);
    assert_eq!(z.to_array().unwrap().size(), 0);

    // Shape rules computed from user input: reshape, broadcast, pad, concatenate, dot.
    let x = Tensor::from(specials());
    shape_too_large(
        &t,
        "reshape",
        tensor_result(x.reshape(&[1 << 40, 1 << 40])),
        "[1099511627776, 1099511627776]",
    );
    shape_too_large(
        &t,
        "reshape -1",
        tensor_result(x.reshape(&[-1, 1 << 40, 1 << 40])),
        "[-1, 1099511627776, 1099511627776]",
    );
    shape_too_large(
        &t,
        "broadcast_to",
        tensor_result(x.broadcast_to(&[1 << 32, 1 << 32, 8])),
        "[4294967296, 4294967296, 8]",
    );
    shape_too_large(
        &t,
        "broadcast_in_dim",
        tensor_result(x.broadcast_in_dim(&[8, 1 << 61], &[0])),
        "[8, 2305843009213693952]",
    );
    shape_too_large(
        &t,
        "pad",
        tensor_result(x.pad(&[usize::MAX], &[1], 0.0f32)),
        "[8]",
    );
    shape_too_large(
        &t,
        "pad interior",
        tensor_result(x.pad_interior(&[0], &[0], &[1 << 62], 0.0f32)),
        "[8]",
    );
    // Inside jit shapes are abstract: huge operands exist there, and their combinations are checked.
    let huge_concat = jit(|_: &[Tensor]| {
        let part = Tensor::zeros(&[1 << 60], DType::I32);
        let parts: Vec<&Tensor> = std::iter::repeat_n(&part, 16).collect();
        vec![Tensor::concatenate(&parts, 0)]
    });
    shape_too_large(&t, "concatenate of 16 x 2^60", huge_concat.graph(&[]), "[");
    let bytes_concat = jit(|_: &[Tensor]| {
        let part = Tensor::zeros(&[1 << 60], DType::I32);
        vec![Tensor::concatenate(&[&part, &part, &part, &part], 0)]
    });
    shape_too_large(
        &t,
        "concatenate of 4 x 2^60 i32 (2^64 bytes)",
        bytes_concat.graph(&[]),
        "[4611686018427387904]",
    );
    let dot = jit(|_: &[Tensor]| {
        let a = Tensor::zeros(&[1 << 31, 4], DType::F32);
        let b = Tensor::zeros(&[4, 1 << 31], DType::F32);
        vec![a.matmul(&b)]
    });
    shape_too_large(&t, "matmul", dot.graph(&[]), "[2147483648, 2147483648]");
    let jit_zeros = jit(|_: &[Tensor]| vec![Tensor::zeros(&[1 << 32, 1 << 32], DType::F32)]);
    shape_too_large(&t, "jit zeros", jit_zeros.graph(&[]), big);
}

#[test]
fn huge_host_constants_are_host_out_of_memory() {
    let t = Tally::new("huge_host_constants_are_host_out_of_memory");
    let tib4 = (4 * TIB).to_string(); // 2^40 f32 elements
    out_of_memory(
        &t,
        "Array::full",
        Array::full(0.0f32, &[TIB]),
        "host",
        &[tib4.clone(), "[1099511627776]".into()],
    );
    out_of_memory(
        &t,
        "HostArray::full f64",
        HostArray::full(Scalar::F64(1.0), &[TIB]),
        "host",
        &[(8 * TIB).to_string()],
    );
    out_of_memory(
        &t,
        "Tensor::zeros",
        tensor_result(Tensor::zeros(&[TIB], DType::F32)),
        "host",
        std::slice::from_ref(&tib4),
    );
    out_of_memory(
        &t,
        "Tensor::ones bool",
        tensor_result(Tensor::ones(&[1 << 20, 1 << 20], DType::Bool)),
        "host",
        &[tib4.clone(), "[1048576, 1048576]".into()],
    );
    out_of_memory(
        &t,
        "Tensor::full",
        tensor_result(Tensor::full(f32::NAN, &[1 << 38, 4])),
        "host",
        std::slice::from_ref(&tib4),
    );
    out_of_memory(
        &t,
        "Tensor::iota 2^36",
        tensor_result(Tensor::iota(DType::I32, &[1 << 36], 0)),
        "host",
        &[(1usize << 38).to_string()],
    );
    out_of_memory(
        &t,
        "Tensor::arange",
        tensor_result(Tensor::arange(TIB)),
        "host",
        std::slice::from_ref(&tib4),
    );
    // The process is still fine: a small constant and arithmetic on it.
    let small = Tensor::full(2.5f32, &[3]).to_array().unwrap();
    assert_eq!(small.to_vec::<f32>().unwrap(), vec![2.5; 3]);
}

#[test]
fn jit_constants_are_computed_on_the_device() {
    let t = Tally::new("jit_constants_are_computed_on_the_device");
    // The constant is a primitive of the traced program, never host data.
    let f = jit(|x: &[Tensor]| vec![Tensor::zeros(&[TIB], DType::F32) + &x[0]]);
    let g = f.graph(&[Array::scalar(1.0f32)]).unwrap();
    assert!(g.consts.is_empty(), "no host constant: {g}");
    assert!(
        g.eqns.iter().any(|e| e.prim.name() == "full"),
        "a full primitive: {g}"
    );
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let x = Array::scalar(1.0f32);
        over_limit(
            &t,
            "jit zeros [2^40] + x",
            jit(|x: &[Tensor]| vec![Tensor::zeros(&[TIB], DType::F32) + &x[0]])
                .on(&dev)
                .call(std::slice::from_ref(&x)),
            &dev,
        );
        over_limit(
            &t,
            "jit iota [2^36]",
            jit(|_: &[Tensor]| vec![Tensor::iota(DType::I32, &[1 << 36], 0)])
                .on(&dev)
                .call(&[]),
            &dev,
        );
        // 4 GiB of f32 is within 32-bit indexing: it is stored in parts and computed in
        // segments (tests/parts.rs); under a memory budget it is a typed OutOfMemory before
        // anything is allocated.
        t.bump();
        dev.set_memory_limit(Some(64 << 20));
        let r = jit(|_: &[Tensor]| vec![Tensor::full(f32::INFINITY, &[1 << 30])])
            .on(&dev)
            .call(&[]);
        dev.set_memory_limit(None);
        assert!(
            matches!(&r, Err(Error::OutOfMemory { .. })),
            "jit full [2^30] f32 under a 64 MiB budget on {}: {:?}",
            dev.name(),
            r.map(|_| ())
        );
        over_limit(
            &t,
            "jit Array::full input broadcast to [2^40]",
            jit(|x: &[Tensor]| vec![x[0].broadcast_to(&[TIB])])
                .on(&dev)
                .call(std::slice::from_ref(&x)),
            &dev,
        );
        // Eagerly, a device array broadcast to a huge shape: the device refuses the output.
        let xd = specials().to_device(&dev).unwrap();
        t.bump();
        let e = Tensor::from(&xd)
            .broadcast_to(&[1 << 37, 8])
            .to_array()
            .unwrap_err();
        assert!(
            matches!(e, Error::OverLimit { .. }),
            "eager broadcast on {}: {e:?}",
            dev.name()
        );
        drop(xd);
    }
    // On the cpu device the reference interpreter runs the program: the host refuses it.
    let cpu = devices_with("cpu:1").remove(0);
    let x = Array::scalar(1.0f32);
    out_of_memory(
        &t,
        "jit zeros on cpu",
        jit(|x: &[Tensor]| vec![Tensor::zeros(&[TIB], DType::F32) + &x[0]])
            .on(&cpu)
            .call(std::slice::from_ref(&x)),
        "host",
        &[(4 * TIB).to_string()],
    );
    out_of_memory(
        &t,
        "jit iota on cpu",
        jit(|_: &[Tensor]| vec![Tensor::iota(DType::I32, &[1 << 36], 0)])
            .on(&cpu)
            .call(&[]),
        "host",
        &[(1usize << 38).to_string()],
    );
    // A constant that fits runs, and agrees with the reference on Vulkan, GL and the cpu device.
    let n = 1 << 18;
    let f = move |x: &[Tensor]| {
        let i = Tensor::iota(DType::F32, &[n, 8], 0);
        let y = &i * &x[0] + Tensor::zeros(&[n, 8], DType::F32);
        vec![y.slice(&[n - 3, 0], &[n, 8], None), y.sum(0, false)]
    };
    let mut devs = gpu_devices();
    devs.push(cpu);
    let want = check_on(&devs, f, &[specials()], Tol::REDUCE);
    // Row n-1 is (n-1)·x + 0: NaN, inf, -inf, +0, +0, 1.5 (n-1), ...
    let last = &want[0];
    let m = (n - 1) as f32;
    let row: Vec<f32> = (0..8)
        .map(|k| last.to_vec::<f32>().unwrap()[16 + k])
        .collect();
    assert!(row[0].is_nan() && row[1] == f32::INFINITY && row[2] == f32::NEG_INFINITY);
    // (n-1)·(±0) + (+0) is +0 for both signs (IEEE: -0 + +0 = +0).
    assert_eq!(row[3].to_bits(), 0.0f32.to_bits());
    assert_eq!(row[4].to_bits(), 0.0f32.to_bits());
    assert_eq!(&row[5..], &[1.5 * m, -2.25 * m, 3.0 * m]);
}

/// A runtime with a Vulkan and a GL device, each with a budget of `limit` bytes.
fn budget_runtime(limit: u64) -> Runtime {
    pollster::block_on(
        Runtime::builder()
            .layout_str("vulkan:1,gl:1")
            .allow_cpu_fallback(false)
            .memory_limit(limit)
            .build(),
    )
    .unwrap_or_else(|e| panic!("a budgeted runtime: {e}. {}", common::INSTALL))
}

fn upload_mib(dev: &Device, seed: u64) -> brigade::Result<Array> {
    Array::from_vec(common::f32s(1 << 18, seed, -3.0, 3.0), &[1 << 18])?.to_device(dev)
}

#[test]
fn a_memory_limit_gives_out_of_memory_and_the_device_recovers() {
    let t = Tally::new("a_memory_limit_gives_out_of_memory_and_the_device_recovers");
    const MIB: u64 = 1 << 20;
    let limit = 8 * MIB;
    let rt = budget_runtime(limit);
    assert_eq!(rt.devices().len(), 2);
    for dev in rt.devices() {
        let _g = device_guard(dev);
        let name = dev.name().to_string();
        assert_eq!(dev.memory_limit(), Some(limit), "{name}");
        assert_eq!(dev.memory_stats().limit, Some(limit));

        // Fill the device with 1 MiB arrays until the budget refuses one.
        let mut live = Vec::new();
        let err = loop {
            match upload_mib(dev, live.len() as u64) {
                Ok(a) => live.push(a),
                Err(e) => break e,
            }
            assert!(live.len() <= 8, "{name}: more than 8 MiB fit into 8 MiB");
        };
        assert_eq!(live.len(), 8, "{name}: 8 arrays of 1 MiB fit 8 MiB");
        out_of_memory(
            &t,
            "upload past the limit",
            Err::<(), _>(err),
            &name,
            &[
                format!("{} bytes", MIB),
                format!("{} bytes) are in use", 8 * MIB),
                format!("{limit} bytes"),
                MEMORY_LIMIT_ENV.to_string(),
            ],
        );
        let m = dev.memory_stats();
        assert!(
            m.bytes_total <= limit && m.peak_bytes <= limit,
            "{name}: {m}"
        );
        assert!(m.out_of_memory >= 1, "{name}: {m}");

        // A program whose output does not fit, jitted and eager: OutOfMemory, not OverLimit.
        let j = jit(|x: &[Tensor]| vec![&x[0] * 2.0 + 1.0]).on(dev);
        out_of_memory(
            &t,
            "jit output past the limit",
            j.call(&live[..1]),
            &name,
            &[format!("{limit} bytes")],
        );
        out_of_memory(
            &t,
            "eager op past the limit",
            tensor_result(Tensor::from(&live[0]).exp()),
            &name,
            &[format!("{limit} bytes")],
        );
        // More than the whole budget: still OutOfMemory (it would fit after a bigger budget),
        // past the buffer limit too (stored in parts); beyond 32-bit element indexing:
        // OverLimit (it can never fit).
        out_of_memory(
            &t,
            "alloc over the budget",
            dev.alloc(16 * MIB),
            &name,
            &[format!("{} bytes", 16 * MIB)],
        );
        t.bump();
        let parted = dev.alloc(dev.limits().max_buffer_size + 4).unwrap_err();
        assert!(
            matches!(parted, Error::OutOfMemory { .. }),
            "{name}: {parted:?}"
        );
        let over = dev.alloc(u32::MAX as u64 * 4 + 4).unwrap_err();
        assert!(matches!(over, Error::OverLimit { .. }), "{name}: {over:?}");

        // Drop everything: the memory is free again (the pool may keep free buffers, which count
        // against the budget and are released when an allocation needs the room).
        drop(live);
        let m = dev.memory_stats();
        assert_eq!(m.bytes_in_use, 0, "{name}: {m}");
        assert!(m.bytes_total <= limit, "{name}: {m}");
        drop(_g);

        // The device computes again, and agrees with the reference (NaN, ±inf, ±0 included).
        let x = Array::from_vec(
            [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0]
                .into_iter()
                .chain(common::f32s((1 << 18) - 5, 7, -3.0, 3.0))
                .collect(),
            &[1 << 18],
        )
        .unwrap();
        check_on(
            std::slice::from_ref(dev),
            |x: &[Tensor]| vec![&x[0] * 2.0 + 1.0, x[0].exp().sum_all()],
            &[x],
            Tol::REDUCE,
        );
    }
}

#[test]
fn the_pool_frees_held_buffers_before_refusing() {
    let t = Tally::new("the_pool_frees_held_buffers_before_refusing");
    const MIB: u64 = 1 << 20;
    let limit = 8 * MIB;
    let rt = budget_runtime(limit);
    for dev in rt.devices() {
        let _g = device_guard(dev);
        let name = dev.name();
        // Six 1 MiB buffers, dropped: the pool holds them (6 MiB of the budget).
        let bufs: Vec<_> = (0..6).map(|_| dev.alloc(MIB).unwrap()).collect();
        drop(bufs);
        let m = dev.memory_stats();
        assert_eq!((m.bytes_in_use, m.bytes_held), (0, 6 * MIB), "{name}: {m}");
        // A 4 MiB buffer needs room: held buffers are released, the allocation succeeds.
        let b = dev.alloc(4 * MIB).unwrap();
        let m = dev.memory_stats();
        assert_eq!(m.bytes_in_use, 4 * MIB, "{name}: {m}");
        assert!(m.bytes_total <= limit, "{name}: {m}");
        // The bucket of 3.5 MiB + 4 B is 4 MiB, which does not fit next to the 4.25 MiB in use;
        // the exact size does, and is what the buffer gets.
        let small = dev.alloc(MIB / 4).unwrap();
        let odd = (7 * MIB / 2) + 4;
        assert_eq!(brigade::device::bucket_size(odd, u64::MAX), 4 * MIB);
        let c = dev.alloc(odd).unwrap();
        assert_eq!(c.capacity(), odd, "{name}: the exact size");
        assert!(dev.memory_stats().bytes_total <= limit);
        out_of_memory(
            &t,
            "1 MiB with under 256 KiB left",
            dev.alloc(MIB),
            name,
            &[format!("{} bytes", MIB)],
        );
        drop((b, small, c));
        // Lowering the limit below what the pool holds frees held buffers; raising it works too.
        dev.set_memory_limit(Some(MIB));
        assert!(dev.memory_stats().bytes_total <= MIB);
        out_of_memory(
            &t,
            "after lowering the limit",
            dev.alloc(2 * MIB),
            name,
            &[],
        );
        dev.set_memory_limit(None);
        assert!(dev.alloc(16 * MIB).is_ok(), "{name}: unlimited again");
        dev.set_memory_limit(Some(limit));
    }
}

#[test]
fn memory_limit_values_are_checked() {
    let t = Tally::new("memory_limit_values_are_checked");
    for (text, want) in [
        ("1048576", 1u64 << 20),
        ("512M", 512 << 20),
        ("512MiB", 512 << 20),
        ("512mb", 512 << 20),
        ("2G", 2 << 30),
        (" 1.5GiB ", 3 << 29),
        ("64K", 64 << 10),
        ("1T", 1 << 40),
        ("4096B", 4096),
    ] {
        assert_eq!(parse_memory_limit(text).unwrap(), want, "{text:?}");
    }
    for text in [
        "",
        "lots",
        "0",
        "0M",
        "-1",
        "-1G",
        "12Q",
        "1.5.2G",
        "NaN",
        "inf",
        "1e400",
        "G",
        "99999999999T",
        "18446744073709551616",
        "+5M",
        "5 M B x",
    ] {
        t.bump();
        match parse_memory_limit(text) {
            Err(e @ Error::BadDeviceSpec { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("512M"),
                    "{text:?}: the message says how: {msg}"
                );
            }
            other => panic!("{text:?}: expected BadDeviceSpec, got {other:?}"),
        }
    }
    t.bump();
    let e = pollster::block_on(
        Runtime::builder()
            .layout_str("cpu:1")
            .memory_limit(0)
            .build(),
    )
    .err();
    assert!(
        matches!(&e, Some(Error::BadDeviceSpec { spec, .. }) if spec.contains("memory_limit")),
        "{e:?}"
    );
}

/// Run this test binary's `env_child` test in a child process with `BRIGADE_MEMORY_LIMIT=value`
/// (the environment of this multi-threaded process is not changed).
fn run_child(value: &str, mode: &str) -> String {
    run_child_test(
        "env_child",
        &[(MEMORY_LIMIT_ENV, value), ("BRIGADE_LIMITS_CHILD", mode)],
    )
}

#[test]
fn memory_limit_from_the_environment() {
    let t = Tally::new("memory_limit_from_the_environment");
    let text = run_child("3M", "good");
    assert!(text.contains("env_child good ok"), "{text}");
    t.bump();
    let text = run_child("three megabytes", "bad");
    assert!(text.contains("env_child bad ok"), "{text}");
}

/// Child half of [`memory_limit_from_the_environment`]. Run on its own (no child mode), it checks
/// that the builder's `memory_limit` takes precedence over whatever the environment says.
#[test]
fn env_child() {
    let build = |b: brigade::device::RuntimeBuilder| {
        pollster::block_on(b.layout_str("vulkan:1").allow_cpu_fallback(false).build())
    };
    match std::env::var("BRIGADE_LIMITS_CHILD").as_deref() {
        Ok("good") => {
            let rt = build(Runtime::builder()).unwrap();
            let dev = &rt.devices()[0];
            assert_eq!(dev.memory_limit(), Some(3 << 20));
            let e = dev.alloc(4 << 20).unwrap_err();
            assert!(matches!(e, Error::OutOfMemory { .. }), "{e:?}");
            assert!(e.to_string().contains(MEMORY_LIMIT_ENV), "{e}");
            let a = dev.alloc(2 << 20).unwrap();
            drop(a);
            println!("env_child good ok");
        }
        Ok("bad") => {
            let e = build(Runtime::builder()).err();
            match &e {
                Some(Error::BadDeviceSpec { spec, detail }) => {
                    assert!(spec.contains(MEMORY_LIMIT_ENV), "{spec}");
                    assert!(detail.contains("three megabytes"), "{detail}");
                }
                other => panic!("expected BadDeviceSpec, got {other:?}"),
            }
            println!("env_child bad ok");
        }
        _ => {
            let rt = build(Runtime::builder().memory_limit(5 << 20)).unwrap();
            assert_eq!(rt.devices()[0].memory_limit(), Some(5 << 20));
        }
    }
}

#[test]
fn readback_after_out_of_memory_keeps_values() {
    // Arrays made before an out-of-memory error keep their values, and reading them back allocates
    // no device memory (a staging buffer, outside the budget).
    let t = Tally::new("readback_after_out_of_memory_keeps_values");
    let rt = budget_runtime(2 << 20);
    for dev in rt.devices() {
        let _g = device_guard(dev);
        let x = specials();
        let a = x.to_device(dev).unwrap();
        let big = Array::from_vec(vec![1.0f32; 1 << 20], &[1 << 20]).unwrap();
        out_of_memory(
            &t,
            "4 MiB upload into 2 MiB",
            big.to_device(dev),
            dev.name(),
            &[format!("{} bytes", 4 << 20)],
        );
        assert_close(&host(&a), &host(&x), Tol::EXACT, dev.name());
    }
}

#[test]
fn huge_shapes_in_every_family_and_transform() {
    let t = Tally::new("huge_shapes_in_every_family_and_transform");
    let cpu = devices_with("cpu:1").remove(0);
    let x4 = Array::from_vec(vec![f32::NAN, f32::INFINITY, 0.0, -1.0], &[4]).unwrap();
    let graph = |f: &dyn Fn(&[Tensor]) -> Vec<Tensor>, args: &[Array]| jit(f).graph(args);
    // 2^60 f32 elements (2^62 bytes) exist abstractly; four of them along a new axis do not.
    shape_too_large(
        &t,
        "vmap of x + zeros[2^60]",
        brigade::vmap(|x: &[Tensor]| vec![&x[0] + Tensor::zeros(&[1 << 60], DType::F32)])
            .on(&cpu)
            .call(std::slice::from_ref(&x4)),
        "[4, 1152921504606846976]",
    );
    shape_too_large(
        &t,
        "vmap axis_size 2^62 over [4]",
        brigade::vmap(|x: &[Tensor]| vec![&x[0] * 2.0])
            .in_axes(&[None])
            .axis_size(1 << 62)
            .on(&cpu)
            .call(std::slice::from_ref(&x4)),
        "[4611686018427387904, 4]",
    );
    shape_too_large(
        &t,
        "grad through a huge broadcast",
        brigade::grad(|x: &[Tensor]| vec![x[0].broadcast_to(&[1 << 40, 1 << 40, 4]).sum_all()])
            .on(&cpu)
            .call(std::slice::from_ref(&x4)),
        "[1099511627776, 1099511627776, 4]",
    );
    shape_too_large(
        &t,
        "one_hot depth 2^40 of 2^40 labels",
        graph(
            &|_: &[Tensor]| vec![Tensor::arange(1 << 40).one_hot(1 << 40)],
            &[],
        ),
        "[1099511627776, 1099511627776]",
    );
    shape_too_large(
        &t,
        "random uniform [2^32, 2^32]",
        graph(
            &|_: &[Tensor]| {
                vec![brigade::random::uniform(
                    &brigade::random::key(0),
                    &[1 << 32, 1 << 32],
                    0.0,
                    1.0,
                )]
            },
            &[],
        ),
        "[4294967296, 4294967296]",
    );
    shape_too_large(
        &t,
        "take with [2^22, 2^20] indices of [8, 2^20]",
        graph(
            &|_: &[Tensor]| {
                let x = Tensor::zeros(&[8, 1 << 20], DType::F32);
                let i = Tensor::zeros(&[1 << 22, 1 << 20], DType::I32);
                vec![x.index_take(&i, 0)]
            },
            &[],
        ),
        "[4194304, 1048576, 1048576]",
    );
    shape_too_large(
        &t,
        "stack of 16 x [2^60] i32",
        graph(
            &|_: &[Tensor]| {
                let p = Tensor::zeros(&[1 << 60], DType::I32);
                let parts: Vec<&Tensor> = std::iter::repeat_n(&p, 16).collect();
                vec![Tensor::stack(&parts, 0)]
            },
            &[],
        ),
        "[",
    );
    shape_too_large(
        &t,
        "batched matmul [2^21, 2^21, 4] x [2^21, 4, 2^21]",
        graph(
            &|_: &[Tensor]| {
                let a = Tensor::zeros(&[1 << 21, 1 << 21, 4], DType::F32);
                let b = Tensor::zeros(&[1 << 21, 4, 1 << 21], DType::F32);
                vec![a.matmul(&b)]
            },
            &[],
        ),
        "[2097152, 2097152, 2097152]",
    );
    shape_too_large(
        &t,
        "outer product by broadcasting [2^32, 1] * [1, 2^32]",
        graph(
            &|_: &[Tensor]| {
                let a = Tensor::zeros(&[1 << 32, 1], DType::F32);
                let b = Tensor::zeros(&[1, 1 << 32], DType::F32);
                vec![&a * &b]
            },
            &[],
        ),
        "[4294967296, 4294967296]",
    );
    shape_too_large(
        &t,
        "cond branch with a huge constant",
        graph(
            &|x: &[Tensor]| {
                brigade::cond(
                    &x[0].sum_all().gt(&Tensor::scalar(0.0f32)),
                    |a: &[Tensor]| vec![&a[0] + Tensor::zeros(&[1 << 32, 1 << 32, 4], DType::F32)],
                    |a: &[Tensor]| vec![a[0].clone()],
                    &[x[0].clone()],
                )
            },
            std::slice::from_ref(&x4),
        ),
        "[4294967296, 4294967296, 4]",
    );
    // Small programs still run after all that.
    let y = jit(|x: &[Tensor]| vec![&x[0] * 2.0])
        .on(&cpu)
        .call(std::slice::from_ref(&x4))
        .unwrap();
    let v = y[0].to_vec::<f32>().unwrap();
    assert!(v[0].is_nan() && v[1] == f32::INFINITY && v[2] == 0.0 && v[3] == -2.0);
}

#[test]
fn pmap_over_budgeted_devices_reports_the_full_one() {
    let t = Tally::new("pmap_over_budgeted_devices_reports_the_full_one");
    const MIB: u64 = 1 << 20;
    let rt = budget_runtime(4 * MIB);
    let devs = rt.devices().to_vec();
    // The GL device (second) is filled to its budget; the Vulkan one is empty.
    let gl = &devs[1];
    let _g = device_guard(gl);
    let fill: Vec<Array> = (0..4).map(|i| upload_mib(gl, 100 + i).unwrap()).collect();
    let x = Array::from_vec(
        [f32::NAN, f32::NEG_INFINITY, 0.0, -0.0]
            .into_iter()
            .chain(common::f32s(2 * (1 << 16) - 4, 3, -3.0, 3.0))
            .collect(),
        &[2, 1 << 16],
    )
    .unwrap();
    let f = brigade::pmap(|a: &[Tensor]| vec![&a[0] * 2.0 + 1.0]).devices(&devs);
    out_of_memory(
        &t,
        "pmap with one full device",
        f.call(std::slice::from_ref(&x)),
        gl.name(),
        &[format!("{} bytes", 4 * MIB)],
    );
    drop(fill);
    // With the memory back, the same call runs on both devices and matches the host formula.
    let out = f.call(std::slice::from_ref(&x)).unwrap();
    let got = host(&out[0]);
    let want: Vec<f32> = x
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v * 2.0 + 1.0)
        .collect();
    common::assert_f32s(&got, &want, Tol::ARITH, "pmap after freeing");
}

#[test]
fn concurrent_allocations_never_exceed_the_budget() {
    let t = Tally::new("concurrent_allocations_never_exceed_the_budget");
    const MIB: u64 = 1 << 20;
    let limit = 8 * MIB;
    let rt = budget_runtime(limit);
    let dev = rt.devices()[0].clone(); // Vulkan: several threads at once
    let refused = AtomicUsize::new(0);
    let held: Vec<Vec<std::sync::Arc<brigade::device::DeviceBuffer>>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    for _ in 0..6 {
                        match dev.alloc(MIB) {
                            Ok(b) => mine.push(b),
                            Err(Error::OutOfMemory { .. }) => {
                                refused.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("unexpected error: {e}"),
                        }
                    }
                    mine
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let n: usize = held.iter().map(|v| v.len()).sum();
    let m = dev.memory_stats();
    assert_eq!(n, 8, "exactly 8 MiB of 1 MiB buffers fit: {m}");
    assert_eq!(refused.load(Ordering::Relaxed), 24 - 8);
    for _ in 0..16 {
        t.bump();
    }
    assert!(m.peak_bytes <= limit && m.bytes_total <= limit, "{m}");
    drop(held);
    assert_eq!(dev.memory_stats().bytes_in_use, 0);
    assert!(dev.alloc(limit).is_ok(), "the whole budget is free again");
}

#[test]
fn long_loops_with_stacked_outputs() {
    let t = Tally::new("long_loops_with_stacked_outputs");
    let x = Array::from_vec(vec![f32::NAN, f32::INFINITY, -0.0, 2.0], &[4]).unwrap();
    // ys of 2^62 iterations of a [4] value: 2^64 elements.
    let huge = |x: &[Tensor]| {
        let (_, ys) = brigade::scan_with(
            |c: &[Tensor], _: &[Tensor]| (vec![&c[0] + 1.0], vec![c[0].clone()]),
            &[x[0].clone()],
            &[],
            brigade::ScanOptions {
                length: Some(1 << 62),
                reverse: false,
            },
        );
        ys
    };
    shape_too_large(
        &t,
        "scan of length 2^62 stacking [4]",
        jit(huge).graph(std::slice::from_ref(&x)),
        "[4611686018427387904, 4]",
    );
    // 2^36 iterations of a [4] value: 4 TiB of ys, refused before the first iteration runs.
    let long = |x: &[Tensor]| {
        let (_, ys) = brigade::scan_with(
            |c: &[Tensor], _: &[Tensor]| (vec![&c[0] * 2.0], vec![c[0].clone()]),
            &[x[0].clone()],
            &[],
            brigade::ScanOptions {
                length: Some(1 << 36),
                reverse: false,
            },
        );
        ys
    };
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        over_limit(
            &t,
            "scan ys of 2^36 x [4]",
            jit(long).on(&dev).call(std::slice::from_ref(&x)),
            &dev,
        );
    }
    let cpu = devices_with("cpu:1").remove(0);
    out_of_memory(
        &t,
        "scan ys of 2^36 x [4] on cpu",
        jit(long).on(&cpu).call(std::slice::from_ref(&x)),
        "host",
        &[(1usize << 40).to_string()],
    );
}
