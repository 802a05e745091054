//! Zero-copy buffer sharing with an app's own wgpu code: export (`Array::wgpu_buffer`), extra
//! output usages, import (`Array::from_wgpu_buffer`) and `Jit::call_into`, on lavapipe Vulkan and
//! llvmpipe GL. The app side (buffers, writes, copies, maps) uses wgpu directly, as an app would.

mod common;

use brigade::{Array, DType, Device, Error, HostArray, Tensor, jit};
use common::app::{adapter_of, app_read, reference_of, step};
use common::{Tol, assert_close, device_guard, devices_with, f32s, gpu_devices, host};
use wgpu::BufferUsages as U;

/// An app buffer of `bytes` bytes with `usage`, filled with `data` from `offset` by the app
/// (`queue.write_buffer`).
fn app_buffer(dev: &Device, bytes: u64, usage: U, offset: u64, data: &[f32]) -> wgpu::Buffer {
    let (wdev, queue) = dev.wgpu().expect("a GPU device");
    let buf = wdev.create_buffer(&wgpu::BufferDescriptor {
        label: Some("app buffer"),
        size: bytes,
        usage,
        mapped_at_creation: false,
    });
    if !data.is_empty() {
        queue.write_buffer(&buf, offset, bytemuck::cast_slice(data));
    }
    buf
}

const APP: U = U::STORAGE
    .union(U::VERTEX)
    .union(U::COPY_SRC)
    .union(U::COPY_DST);

#[test]
fn an_exported_output_holds_the_result_for_the_app() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let x = Array::from_vec(f32s(192, 1, -2.0, 2.0), &[64, 3]).unwrap();
        let f = jit(step).on(&dev);
        let y = f.call(std::slice::from_ref(&x)).unwrap();
        let want = reference_of(step, &[host(&x)]);
        let view = y[0].wgpu_buffer().unwrap();
        assert_eq!(view.size, 192 * 4, "on {}", dev.name());
        let got = app_read(&dev, &view.buffer, view.offset, view.size);
        assert_close(
            &HostArray::from_vec(got, &[64, 3]).unwrap(),
            &want[0],
            Tol::new(1e-5, 1e-5),
            &format!("exported bytes on {}", dev.name()),
        );
        // Reading it through brigade copies instead of mapping, with the same values.
        assert_close(
            &y[0].to_host().unwrap(),
            &want[0],
            Tol::new(1e-5, 1e-5),
            "read",
        );
        // Host and sharded arrays have no buffer: the error names the fix.
        match x.wgpu_buffer() {
            Err(e @ Error::BadBuffer { .. }) => {
                assert!(e.to_string().contains("to_device"), "{e}")
            }
            other => panic!("exporting a host array: {other:?}"),
        }
    }
}

#[test]
fn an_exported_buffer_is_never_handed_to_another_array() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let f = jit(|x: &[Tensor]| vec![&x[0] + 1.0]).on(&dev);
        let x = Array::from_vec(f32s(300, 2, -1.0, 1.0), &[300])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let y = f.call(std::slice::from_ref(&x)).unwrap().remove(0);
        let view = y.wgpu_buffer().unwrap();
        let want = y.to_vec::<f32>().unwrap();
        let in_use = dev.pool_stats().buffers_in_use;
        drop(y); // brigade lets go; the app still holds `view`
        assert_eq!(
            dev.pool_stats().buffers_in_use,
            in_use - 1,
            "on {}",
            dev.name()
        );
        // Calls of the same size would reuse a pooled buffer of that bucket: not this one.
        for k in 0..4 {
            let z = f
                .call(&[Array::full(k as f32 * 100.0, &[300]).unwrap()])
                .unwrap();
            assert_eq!(z[0].to_vec::<f32>().unwrap()[0], k as f32 * 100.0 + 1.0);
        }
        let got = app_read(&dev, &view.buffer, view.offset, view.size);
        assert_eq!(
            got,
            want,
            "the exported buffer was overwritten on {}",
            dev.name()
        );
    }
}

#[test]
fn outputs_get_the_usages_asked_for() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let x = Array::from_vec(f32s(8, 3, -1.0, 1.0), &[4, 2]).unwrap();
        let plain = jit(step).on(&dev).call(std::slice::from_ref(&x)).unwrap();
        assert!(
            !plain[0]
                .wgpu_buffer()
                .unwrap()
                .buffer
                .usage()
                .contains(U::VERTEX)
        );
        let f = jit(step).on(&dev).output_usages(U::VERTEX | U::INDEX);
        let y = f.call(std::slice::from_ref(&x)).unwrap();
        let usage = y[0].wgpu_buffer().unwrap().buffer.usage();
        assert!(
            usage.contains(U::VERTEX | U::INDEX | U::STORAGE | U::COPY_SRC),
            "{usage:?} on {}",
            dev.name()
        );
        assert_close(
            &y[0].to_host().unwrap(),
            &reference_of(step, &[host(&x)])[0],
            Tol::new(1e-5, 1e-5),
            "vertex output",
        );
        // Usages brigade cannot give: a typed error naming the allowed ones.
        let bad = jit(step)
            .on(&dev)
            .output_usages(U::MAP_WRITE)
            .call(std::slice::from_ref(&x));
        match bad {
            Err(e @ Error::BadBuffer { .. }) => {
                assert!(
                    e.to_string()
                        .contains("VERTEX, INDEX, UNIFORM and INDIRECT"),
                    "{e}"
                )
            }
            other => panic!("MAP_WRITE output usage: {other:?}"),
        }
        assert!(matches!(
            dev.set_output_usages(U::MAP_WRITE | U::VERTEX),
            Err(Error::BadBuffer { .. })
        ));
    }
}

#[test]
fn a_device_default_applies_to_every_output() {
    // A runtime of its own: the default changes what every program on the device makes.
    for dev in devices_with("vulkan:1,gl:1") {
        let _g = device_guard(&dev);
        dev.set_output_usages(U::UNIFORM).unwrap();
        assert_eq!(dev.output_usages(), U::UNIFORM);
        let x = Array::from_vec(f32s(16, 4, -1.0, 1.0), &[16]).unwrap();
        let y = jit(step)
            .on(&dev)
            .output_usages(U::VERTEX)
            .call(&[x])
            .unwrap();
        let usage = y[0].wgpu_buffer().unwrap().buffer.usage();
        assert!(
            usage.contains(U::UNIFORM | U::VERTEX),
            "{usage:?} on {}",
            dev.name()
        );
        dev.set_output_usages(U::empty()).unwrap();
    }
}

#[test]
fn an_imported_app_buffer_is_an_input_and_an_output() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let align = u64::from(
            dev.wgpu()
                .unwrap()
                .0
                .limits()
                .min_storage_buffer_offset_alignment,
        );
        let n = 96usize;
        let data = f32s(n, 5, -3.0, 3.0);
        // The array starts at `align` inside a bigger buffer, with app data around it.
        let bytes = align * 2 + n as u64 * 4 + 64;
        let sentinel = vec![7.5f32; (bytes / 4) as usize];
        let buf = app_buffer(&dev, bytes, APP, 0, &sentinel);
        dev.wgpu()
            .unwrap()
            .1
            .write_buffer(&buf, align, bytemuck::cast_slice(&data));
        let x = Array::from_wgpu_buffer(&dev, buf.clone(), align, &[n], DType::F32).unwrap();
        assert_eq!(
            x.to_vec::<f32>().unwrap(),
            data,
            "reading an import on {}",
            dev.name()
        );
        let want = reference_of(step, &[HostArray::from_vec(data.clone(), &[n]).unwrap()]);
        let y = jit(step).on(&dev).call(std::slice::from_ref(&x)).unwrap();
        assert_close(
            &y[0].to_host().unwrap(),
            &want[0],
            Tol::new(1e-5, 1e-5),
            "import as input",
        );
        // An output written into another app buffer.
        let out_buf = app_buffer(&dev, n as u64 * 4, APP, 0, &vec![-1.0; n]);
        let out = Array::from_wgpu_buffer(&dev, out_buf.clone(), 0, &[n], DType::F32).unwrap();
        jit(step)
            .on(&dev)
            .call_into(std::slice::from_ref(&x), std::slice::from_ref(&out))
            .unwrap();
        let got = app_read(&dev, &out_buf, 0, n as u64 * 4);
        assert_close(
            &HostArray::from_vec(got, &[n]).unwrap(),
            &want[0],
            Tol::new(1e-5, 1e-5),
            &format!("call_into an app buffer on {}", dev.name()),
        );
        // The app's bytes around the imported range are untouched.
        let whole = app_read(&dev, &buf, 0, bytes);
        let (lo, hi) = ((align / 4) as usize, (align / 4) as usize + n);
        assert!(whole[..lo].iter().chain(&whole[hi..]).all(|&v| v == 7.5));
        assert_eq!(&whole[lo..hi], &data[..]);
    }
}

#[test]
fn an_in_place_update_is_right_for_ten_steps_and_moves_no_bytes() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let n = 200usize;
        let (p0, v0) = (f32s(n, 6, -1.0, 1.0), f32s(n, 7, -0.5, 0.5));
        let buf_p = app_buffer(&dev, n as u64 * 4, APP, 0, &p0);
        let buf_v = app_buffer(&dev, n as u64 * 4, APP, 0, &v0);
        let p = Array::from_wgpu_buffer(&dev, buf_p.clone(), 0, &[n], DType::F32).unwrap();
        let v = Array::from_wgpu_buffer(&dev, buf_v, 0, &[n], DType::F32).unwrap();
        let sim = |a: &[Tensor]| {
            let vel = &a[1] - &a[0] * 0.1 - a[0].mean_all() * 0.05;
            vec![&a[0] + &vel * 0.5, vel]
        };
        let f = jit(sim).on(&dev);
        let mut want = vec![
            HostArray::from_vec(p0.clone(), &[n]).unwrap(),
            HostArray::from_vec(v0.clone(), &[n]).unwrap(),
        ];
        // Compiled once (the first call) before counting.
        f.call_into(&[p.clone(), v.clone()], &[p.clone(), v.clone()])
            .unwrap();
        want = reference_of(sim, &want);
        let before = brigade::counters();
        for _ in 1..10 {
            f.call_into(&[p.clone(), v.clone()], &[p.clone(), v.clone()])
                .unwrap();
            want = reference_of(sim, &want);
        }
        let moved = brigade::counters().since(&before);
        assert_eq!(
            (moved.bytes_uploaded, moved.bytes_downloaded),
            (0, 0),
            "bytes moved between steps on {}",
            dev.name()
        );
        let got = app_read(&dev, &buf_p, 0, n as u64 * 4);
        assert_close(
            &HostArray::from_vec(got, &[n]).unwrap(),
            &want[0],
            Tol::new(1e-4, 1e-5),
            &format!("positions after 10 in-place steps on {}", dev.name()),
        );
        assert_close(
            &v.to_host().unwrap(),
            &want[1],
            Tol::new(1e-4, 1e-5),
            "velocities",
        );
        // One input, one output, the same brigade array.
        let x = Array::from_vec(f32s(n, 8, -2.0, 2.0), &[n])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let mut w = host(&x);
        let g = jit(step).on(&dev);
        for _ in 0..10 {
            g.call_into(std::slice::from_ref(&x), std::slice::from_ref(&x))
                .unwrap();
            w = reference_of(step, &[w]).remove(0);
        }
        assert_close(&x.to_host().unwrap(), &w, Tol::new(1e-4, 1e-5), "x = f(x)");
    }
}

#[test]
fn call_into_copies_identity_and_repeated_outputs() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let x = Array::from_vec(f32s(10, 9, -1.0, 1.0), &[10])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let outs: Vec<Array> = (0..3)
            .map(|_| Array::full(0.0f32, &[10]).unwrap().to_device(&dev).unwrap())
            .collect();
        let f = jit(|a: &[Tensor]| {
            let y = &a[0] * 3.0;
            vec![a[0].clone(), y.clone(), y]
        })
        .on(&dev);
        f.call_into(std::slice::from_ref(&x), &outs).unwrap();
        let xs = x.to_vec::<f32>().unwrap();
        assert_eq!(
            outs[0].to_vec::<f32>().unwrap(),
            xs,
            "identity on {}",
            dev.name()
        );
        let tripled: Vec<f32> = xs.iter().map(|v| v * 3.0).collect();
        assert_eq!(outs[1].to_vec::<f32>().unwrap(), tripled);
        assert_eq!(outs[2].to_vec::<f32>().unwrap(), tripled);
        // An identity program writing into its own input: a copy within one buffer, which
        // wgpu refuses, goes through a temporary; the values stay.
        let id = jit(|a: &[Tensor]| vec![a[0].clone(), &a[1] + 1.0]).on(&dev);
        let z = outs[1].clone();
        id.call_into(&[x.clone(), z.clone()], &[x.clone(), z.clone()])
            .unwrap();
        assert_eq!(
            x.to_vec::<f32>().unwrap(),
            xs,
            "identity in place on {}",
            dev.name()
        );
        let plus: Vec<f32> = tripled.iter().map(|v| v + 1.0).collect();
        assert_eq!(z.to_vec::<f32>().unwrap(), plus);
    }
}

#[test]
fn call_into_refuses_outputs_that_do_not_match() {
    let devs = gpu_devices();
    for dev in &devs {
        let _g = device_guard(dev);
        let f = jit(step).on(dev);
        let x = Array::from_vec(f32s(6, 10, -1.0, 1.0), &[6])
            .unwrap()
            .to_device(dev)
            .unwrap();
        let good = Array::full(0.0f32, &[6]).unwrap().to_device(dev).unwrap();
        let wrong_shape = Array::full(0.0f32, &[3, 2])
            .unwrap()
            .to_device(dev)
            .unwrap();
        let wrong_dtype = Array::full(0i32, &[6]).unwrap().to_device(dev).unwrap();
        let on_host = Array::full(0.0f32, &[6]).unwrap();
        assert!(matches!(
            f.call_into(std::slice::from_ref(&x), &[good.clone(), good.clone()]),
            Err(Error::Arity {
                expected: 1,
                got: 2,
                ..
            })
        ));
        for (bad, needle) in [
            (&wrong_shape, "[6]"),
            (&wrong_dtype, "dtype"),
            (&on_host, "to_device"),
        ] {
            match f.call_into(std::slice::from_ref(&x), std::slice::from_ref(bad)) {
                Err(e @ Error::BadBuffer { .. }) => assert!(e.to_string().contains(needle), "{e}"),
                other => panic!("call_into with {bad:?}: {other:?}"),
            }
        }
        let other = devs.iter().find(|d| *d != dev).expect("two GPU devices");
        let elsewhere = {
            let _g2 = (other.info().backend != dev.info().backend).then(|| device_guard(other));
            Array::full(0.0f32, &[6]).unwrap().to_device(other).unwrap()
        };
        match f.call_into(std::slice::from_ref(&x), &[elsewhere]) {
            Err(e @ Error::BadBuffer { .. }) => {
                assert!(e.to_string().contains("lives on device"), "{e}")
            }
            other => panic!("call_into another device's array: {other:?}"),
        }
        let two = jit(|a: &[Tensor]| vec![&a[0] + 1.0, &a[0] - 1.0]).on(dev);
        match two.call_into(std::slice::from_ref(&x), &[good.clone(), good.clone()]) {
            Err(e @ Error::BadBuffer { .. }) => {
                assert!(e.to_string().contains("share one buffer"), "{e}")
            }
            other => panic!("one array for two outputs: {other:?}"),
        }
    }
}

#[test]
fn bad_imports_are_typed_errors_naming_the_fix() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let limits = dev.wgpu().unwrap().0.limits();
        let align = u64::from(limits.min_storage_buffer_offset_alignment);
        let import = |buf: &wgpu::Buffer, offset: u64, shape: &[usize], dtype: DType| {
            Array::from_wgpu_buffer(&dev, buf.clone(), offset, shape, dtype)
        };
        let expect = |r: brigade::Result<Array>, needles: &[&str]| match r {
            Err(e @ Error::BadBuffer { .. }) => {
                let m = e.to_string();
                for n in needles {
                    assert!(m.contains(n), "{m} should name {n}");
                }
            }
            other => panic!("expected BadBuffer naming {needles:?}, got {other:?}"),
        };
        let vertex_only = app_buffer(&dev, 1024, U::VERTEX | U::COPY_DST | U::COPY_SRC, 0, &[]);
        expect(import(&vertex_only, 0, &[16], DType::F32), &["STORAGE"]);
        let ok = app_buffer(&dev, align * 4, APP, 0, &[]);
        expect(
            import(&ok, 4, &[4], DType::F32),
            &["min_storage_buffer_offset_alignment", &align.to_string()],
        );
        // 4 * align bytes from offset align need more than the buffer holds.
        let n = align as usize;
        expect(
            import(&ok, align, &[n], DType::F32),
            &[
                &(align * 4).to_string(),
                &format!("{}", 4 * align),
                "offset",
            ],
        );
        // Past 32-bit element indexing: OverLimit; larger than the buffer: BadBuffer.
        let huge = u32::MAX as usize + 1;
        assert!(matches!(
            import(&ok, 0, &[huge], DType::F32),
            Err(Error::OverLimit { .. })
        ));
        let over = (limits.max_buffer_size as usize) / 4 + 1;
        expect(
            import(&ok, 0, &[over], DType::F32),
            &[&(over as u64 * 4).to_string(), &(align * 4).to_string()],
        );
        assert!(matches!(
            import(&ok, 0, &[4], DType::F64),
            Err(Error::BadDType { .. })
        ));
        // A correct import of the same buffer works.
        assert_eq!(import(&ok, align, &[4], DType::I32).unwrap().shape(), &[4]);
    }
}

#[test]
fn a_buffer_of_another_device_or_a_lost_device_is_refused() {
    // Two wgpu devices on one adapter: a buffer of one cannot be bound on the other.
    let pair = devices_with("vulkan:2");
    let foreign = app_buffer(&pair[1], 256, APP, 0, &[1.0; 64]);
    match Array::from_wgpu_buffer(&pair[0], foreign.clone(), 0, &[64], DType::F32) {
        Err(e @ Error::BadBuffer { .. }) => {
            assert!(e.to_string().contains("another wgpu device"), "{e}")
        }
        other => panic!("a buffer of another device: {other:?}"),
    }
    // The buffer is fine on its own device.
    let own = Array::from_wgpu_buffer(&pair[1], foreign, 0, &[64], DType::F32).unwrap();
    assert_eq!(own.to_vec::<f32>().unwrap(), vec![1.0; 64]);
    let lost = devices_with("vulkan:3").remove(2);
    let buf = app_buffer(&lost, 256, APP, 0, &[]);
    let y = Array::from_vec(f32s(64, 8, -1.0, 1.0), &[64])
        .unwrap()
        .to_device(&lost)
        .unwrap();
    lost.destroy();
    assert!(matches!(
        Array::from_wgpu_buffer(&lost, buf, 0, &[64], DType::F32),
        Err(Error::DeviceLost { .. })
    ));
    // Exporting an array of the destroyed device: a typed loss, not a dead handle.
    assert!(matches!(y.wgpu_buffer(), Err(Error::DeviceLost { .. })));
}

/// A buffer of `n` floats made by `wdev`, mapped at creation and filled with `data` there.
fn mapped_buffer(wdev: &wgpu::Device, data: &[f32]) -> wgpu::Buffer {
    let buf = wdev.create_buffer(&wgpu::BufferDescriptor {
        label: Some("mapped at creation"),
        size: data.len() as u64 * 4,
        usage: APP,
        mapped_at_creation: true,
    });
    buf.slice(..)
        .get_mapped_range_mut()
        .unwrap()
        .copy_from_slice(bytemuck::cast_slice(data));
    buf
}

#[test]
fn a_mapped_buffer_or_one_of_another_instance_is_refused_without_a_panic() {
    let data = f32s(64, 9, -2.0, 2.0);
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let (wdev, _) = dev.wgpu().unwrap();
        // Still mapped: refused, naming unmap; once unmapped, the data written while mapped.
        let buf = mapped_buffer(wdev, &data);
        match Array::from_wgpu_buffer(&dev, buf.clone(), 0, &[64], DType::F32) {
            Err(e @ Error::BadBuffer { .. }) => {
                let m = e.to_string();
                assert!(m.contains("mapped") && m.contains("unmap()"), "{m}")
            }
            other => panic!("a mapped buffer on {}: {other:?}", dev.name()),
        }
        buf.unmap();
        let x = Array::from_wgpu_buffer(&dev, buf, 0, &[64], DType::F32).unwrap();
        assert_eq!(x.to_vec::<f32>().unwrap(), data, "on {}", dev.name());

        // The app's own device, from its own wgpu instance, with no error handler of its own
        // (wgpu's default one panics on an error). Its buffer ids start where brigade's do, so
        // wgpu would take the id for one of brigade's buffers (or panic) if brigade handed it
        // to its device.
        let backend = match dev.info().backend.as_str() {
            "gl" => wgpu::Backends::GL,
            _ => wgpu::Backends::VULKAN,
        };
        let (_instance, adapter) = adapter_of(backend);
        let (app_dev, app_queue) =
            pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor::default())).unwrap();
        let app_buf = app_dev.create_buffer(&wgpu::BufferDescriptor {
            label: Some("the app's buffer"),
            size: 256,
            usage: APP,
            mapped_at_creation: false,
        });
        app_queue.write_buffer(&app_buf, 0, bytemuck::cast_slice(&data));
        match Array::from_wgpu_buffer(&dev, app_buf.clone(), 0, &[64], DType::F32) {
            Err(e @ Error::BadBuffer { .. }) => {
                let m = e.to_string();
                assert!(
                    m.contains("another wgpu device") && m.contains("from_wgpu"),
                    "{m}"
                )
            }
            other => panic!("another instance's buffer on {}: {other:?}", dev.name()),
        }
        // So is one of that device mapped at creation (the mapped check comes first).
        assert!(matches!(
            Array::from_wgpu_buffer(&dev, mapped_buffer(&app_dev, &data), 0, &[64], DType::F32),
            Err(Error::BadBuffer { .. })
        ));
        // The probe left the buffer usable: on its own device, attached, it holds the data.
        let info = adapter.get_info();
        let attached = Device::from_wgpu(info, app_dev.clone(), app_queue.clone()).unwrap();
        let own = Array::from_wgpu_buffer(&attached, app_buf, 0, &[64], DType::F32).unwrap();
        assert_eq!(own.to_vec::<f32>().unwrap(), data, "on {}", dev.name());
        // And brigade's device still computes right.
        let y = jit(|a: &[Tensor]| vec![&a[0] * 2.0])
            .on(&dev)
            .call(std::slice::from_ref(&x))
            .unwrap();
        let twice: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), twice);
    }
}

#[test]
fn call_into_a_program_that_prints_still_prints() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let x = Array::from_vec(vec![1.0f32, 2.0, 3.0], &[3])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let f = jit(|a: &[Tensor]| {
            let y = &a[0] * 2.0;
            brigade::debug_print("y = {}", &[&y]);
            vec![y]
        })
        .on(&dev);
        let ((), lines) = brigade::capture_debug_prints(|| {
            f.call_into(std::slice::from_ref(&x), std::slice::from_ref(&x))
                .unwrap()
        });
        assert_eq!(
            x.to_vec::<f32>().unwrap(),
            vec![2.0, 4.0, 6.0],
            "on {}",
            dev.name()
        );
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("y = [2") && lines[0].contains('6'),
            "{lines:?}"
        );
    }
}
