//! `Jit::encode` / `encode_into`: a program recorded into the app's own command encoder, next to
//! the app's commands, submitted once by the app; on lavapipe Vulkan and llvmpipe GL.

mod common;

use brigade::{Array, DType, Device, Error, HostArray, Tensor, jit};
use common::app::{map_read, reference_of, staging, step};
use common::{Tol, assert_close, device_guard, devices_with, f32s, gpu_devices, host};
use wgpu::BufferUsages as U;

fn encoder(dev: &Device) -> wgpu::CommandEncoder {
    dev.wgpu()
        .unwrap()
        .0
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("app frame"),
        })
}

#[test]
fn encode_and_the_apps_copy_go_in_one_submission() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let n = 128usize;
        let x = Array::from_vec(f32s(n, 1, -2.0, 2.0), &[n])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let want = reference_of(step, &[host(&x)]);
        let f = jit(step).on(&dev).output_usages(U::VERTEX);
        let mut enc = encoder(&dev);
        let before = brigade::counters();
        let y = f.encode(&mut enc, std::slice::from_ref(&x)).unwrap();
        let work = brigade::counters().since(&before);
        assert_eq!(work.submits, 0, "encode submitted on {}", dev.name());
        assert_eq!((work.bytes_uploaded, work.bytes_downloaded), (0, 0));
        assert!(work.dispatches > 0);
        let view = y[0].wgpu_buffer().unwrap();
        assert!(view.buffer.usage().contains(U::VERTEX));
        let out = staging(&dev, view.size);
        enc.copy_buffer_to_buffer(&view.buffer, view.offset, &out, 0, view.size);
        dev.wgpu().unwrap().1.submit([enc.finish()]);
        let got = map_read(&dev, &out);
        assert_close(
            &HostArray::from_vec(got, &[n]).unwrap(),
            &want[0],
            Tol::new(1e-5, 1e-5),
            &format!("encoded program on {}", dev.name()),
        );
        // After the submit brigade reads the output too.
        assert_close(
            &y[0].to_host().unwrap(),
            &want[0],
            Tol::new(1e-5, 1e-5),
            "read",
        );
    }
}

#[test]
fn encode_into_steps_an_app_buffer_every_frame() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let n = 300usize;
        let data = f32s(n, 2, -1.0, 1.0);
        let (wdev, queue) = dev.wgpu().unwrap();
        let buf = wdev.create_buffer(&wgpu::BufferDescriptor {
            label: Some("positions"),
            size: n as u64 * 4,
            usage: U::STORAGE | U::VERTEX | U::COPY_SRC | U::COPY_DST,
            mapped_at_creation: false,
        });
        queue.write_buffer(&buf, 0, bytemuck::cast_slice(&data));
        let x = Array::from_wgpu_buffer(&dev, buf.clone(), 0, &[n], DType::F32).unwrap();
        let f = jit(step).on(&dev);
        let mut want = HostArray::from_vec(data, &[n]).unwrap();
        let out = staging(&dev, n as u64 * 4);
        let mut moved = brigade::Counters::default();
        for frame in 0..10 {
            let mut enc = encoder(&dev);
            let before = brigade::counters();
            f.encode_into(&mut enc, std::slice::from_ref(&x), std::slice::from_ref(&x))
                .unwrap();
            if frame > 0 {
                let w = brigade::counters().since(&before);
                moved.bytes_uploaded += w.bytes_uploaded;
                moved.bytes_downloaded += w.bytes_downloaded;
                moved.submits += w.submits;
            }
            if frame == 9 {
                // The app's own copy of the updated buffer, after the step, same encoder.
                enc.copy_buffer_to_buffer(&buf, 0, &out, 0, n as u64 * 4);
            }
            queue.submit([enc.finish()]);
            want = reference_of(step, &[want]).remove(0);
        }
        assert_eq!(
            (moved.bytes_uploaded, moved.bytes_downloaded, moved.submits),
            (0, 0, 0),
            "brigade moved bytes or submitted between frames on {}",
            dev.name()
        );
        assert_close(
            &HostArray::from_vec(map_read(&dev, &out), &[n]).unwrap(),
            &want,
            Tol::new(1e-4, 1e-5),
            &format!("10 encoded in-place steps on {}", dev.name()),
        );
    }
}

#[test]
fn encoding_host_arguments_uploads_them_before_the_submission() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let x = Array::from_vec(f32s(40, 3, -1.0, 1.0), &[40]).unwrap();
        let want = reference_of(step, &[host(&x)]);
        let mut enc = encoder(&dev);
        let before = brigade::counters();
        let y = jit(step).on(&dev).encode(&mut enc, &[x]).unwrap();
        assert_eq!(brigade::counters().since(&before).bytes_uploaded, 160);
        dev.wgpu().unwrap().1.submit([enc.finish()]);
        assert_close(
            &y[0].to_host().unwrap(),
            &want[0],
            Tol::new(1e-5, 1e-5),
            "uploaded arg",
        );
    }
}

#[test]
fn programs_that_need_a_host_step_say_to_use_call() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let x = Array::from_vec(f32s(8, 4, -1.0, 1.0), &[8])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let printing = jit(|a: &[Tensor]| {
            brigade::debug_print("x = {}", &[&a[0]]);
            vec![&a[0] + 1.0]
        })
        .on(&dev);
        let long = jit(|a: &[Tensor]| {
            brigade::fori_loop(0, 5000, |_, c| vec![&c[0] * 0.5 + 1.0], &[a[0].clone()])
        })
        .on(&dev);
        let mut enc = encoder(&dev);
        match printing.encode(&mut enc, std::slice::from_ref(&x)) {
            Err(e @ Error::Unsupported { .. }) => {
                let m = e.to_string();
                assert!(m.contains("debug_print") && m.contains("`call`"), "{m}");
            }
            other => panic!("encoding a print: {other:?}"),
        }
        match long.encode(&mut enc, std::slice::from_ref(&x)) {
            Err(e @ Error::Unsupported { .. }) => {
                let m = e.to_string();
                assert!(m.contains("4096") && m.contains("`call`"), "{m}");
            }
            other => panic!("encoding a long loop: {other:?}"),
        }
        // Nothing was recorded: the encoder still finishes and submits cleanly, and `call` runs
        // the long loop (fixed point 2).
        dev.wgpu().unwrap().1.submit([enc.finish()]);
        let y = long.call(std::slice::from_ref(&x)).unwrap();
        assert!(
            y[0].to_vec::<f32>()
                .unwrap()
                .iter()
                .all(|v| (v - 2.0).abs() < 1e-5)
        );
    }
}

#[test]
fn brigade_work_before_the_apps_submit_does_not_reuse_encoded_buffers() {
    for dev in gpu_devices() {
        let _g = device_guard(&dev);
        let n = 512usize;
        // Several kernels: temporaries that a later call of the same shapes would take from the
        // pool if the encoded ones had gone back to it.
        let chain = |a: &[Tensor]| {
            let t = (&a[0] * 1.5).exp() - a[0].mean_all();
            let u = t.sin() * &a[0];
            vec![&u + u.sum_all() * 0.001]
        };
        let x = Array::from_vec(f32s(n, 5, -1.0, 1.0), &[n])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let other = Array::from_vec(f32s(n, 6, -1.0, 1.0), &[n])
            .unwrap()
            .to_device(&dev)
            .unwrap();
        let f = jit(chain).on(&dev);
        f.call(std::slice::from_ref(&x)).unwrap(); // compiled, pool warm
        let mut enc = encoder(&dev);
        let y = f.encode(&mut enc, std::slice::from_ref(&x)).unwrap();
        drop(x); // the app's commands still read its buffer
        // brigade runs (and finishes) the same program on other data before the app submits.
        let z = f.call(std::slice::from_ref(&other)).unwrap();
        let z_host = z[0].to_host().unwrap();
        dev.wgpu().unwrap().1.submit([enc.finish()]);
        let want_x = reference_of(
            chain,
            &[HostArray::from_vec(f32s(n, 5, -1.0, 1.0), &[n]).unwrap()],
        );
        let want_o = reference_of(chain, &[host(&other)]);
        assert_close(
            &y[0].to_host().unwrap(),
            &want_x[0],
            Tol::new(1e-4, 1e-4),
            "encoded result",
        );
        assert_close(
            &z_host,
            &want_o[0],
            Tol::new(1e-4, 1e-4),
            "the call in between",
        );
        assert_close(
            &z[0].to_host().unwrap(),
            &want_o[0],
            Tol::new(1e-4, 1e-4),
            "after the submit",
        );
    }
}

/// An app encoder of `dev`'s wgpu device, submitted inside a validation scope there: the wgpu
/// error of the submit, if any.
fn submit_scoped(dev: &Device, enc: wgpu::CommandEncoder) -> Option<wgpu::Error> {
    let (wdev, queue) = dev.wgpu().unwrap();
    let scope = wdev.push_error_scope(wgpu::ErrorFilter::Validation);
    queue.submit([enc.finish()]);
    pollster::block_on(scope.pop())
}

fn expect_not_computed<T: std::fmt::Debug>(r: brigade::Result<T>, what: &str) {
    match r {
        Err(e @ Error::NotComputed { .. }) => {
            let m = e.to_string();
            assert!(m.contains("submit") && m.contains("device.wgpu()"), "{m}");
        }
        other => panic!("{what}: expected NotComputed, got {other:?}"),
    }
}

#[test]
fn outputs_of_an_encode_that_never_ran_are_an_error_not_stale_data() {
    // Two devices of one wgpu instance per backend: the program on the first, the app's encoder
    // from the second, whose submit wgpu refuses.
    for layout in ["vulkan:2", "gl:2"] {
        let pair = devices_with(layout);
        let _g = device_guard(&pair[0]);
        let (dev, other) = (&pair[0], &pair[1]);
        let data = vec![1.0f32, 2.0, 3.0];
        let x = Array::from_vec(data.clone(), &[3])
            .unwrap()
            .to_device(dev)
            .unwrap();
        let f = jit(|a: &[Tensor]| vec![&a[0] * 2.0]).on(dev);
        let twice: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
        // Warm: the output buffer of a call of the same size goes back to the pool, and holds
        // the right values, so a stale read could look right: the copies below start over.
        assert_eq!(
            f.call(std::slice::from_ref(&x)).unwrap()[0]
                .to_vec::<f32>()
                .unwrap(),
            twice
        );

        let mut enc = encoder(other);
        let y = f.encode(&mut enc, std::slice::from_ref(&x)).unwrap();
        let err = submit_scoped(other, enc);
        assert!(
            err.is_some(),
            "wgpu took another device's commands on {layout}"
        );
        expect_not_computed(y[0].to_vec::<f32>(), "read after a failed submit");
        let mut out = vec![0.0f32; 3];
        expect_not_computed(y[0].read_into(&mut out), "read_into");
        expect_not_computed(f.call(&y), "a call given the output");

        // Never submitted (the encoder dropped, or not yet submitted): the same error.
        let mut enc = encoder(dev);
        let z = f.encode(&mut enc, std::slice::from_ref(&x)).unwrap();
        expect_not_computed(z[0].to_host(), "read before the submit");
        drop(enc);
        expect_not_computed(z[0].to_host(), "read after dropping the encoder");

        // Submitted on the right device: the values, from the first read on.
        let mut enc = encoder(dev);
        let w = f.encode(&mut enc, std::slice::from_ref(&x)).unwrap();
        assert!(submit_scoped(dev, enc).is_none());
        assert_eq!(w[0].to_vec::<f32>().unwrap(), twice, "on {layout}");
        assert_eq!(
            f.call(&w).unwrap()[0].to_vec::<f32>().unwrap(),
            vec![4.0, 8.0, 12.0]
        );
    }
}

#[test]
fn encode_into_allocates_nothing_once_its_frames_run() {
    // A runtime of its own in this test binary: no other test allocates on its devices.
    for dev in devices_with("vulkan:1,gl:1") {
        let _g = device_guard(&dev);
        let n = 96usize;
        let data = f32s(n, 7, -1.0, 1.0);
        let (wdev, queue) = dev.wgpu().unwrap();
        let buf = wdev.create_buffer(&wgpu::BufferDescriptor {
            label: Some("positions"),
            size: n as u64 * 4,
            usage: U::STORAGE | U::VERTEX | U::COPY_SRC | U::COPY_DST,
            mapped_at_creation: false,
        });
        queue.write_buffer(&buf, 0, bytemuck::cast_slice(&data));
        let x = Array::from_wgpu_buffer(&dev, buf, 0, &[n], DType::F32).unwrap();
        // In place: the output is computed into a temporary and copied into x.
        let f = jit(step).on(&dev);
        let mut want = HostArray::from_vec(data, &[n]).unwrap();
        let mut created = Vec::new();
        for _ in 0..8 {
            let before = dev.pool_stats().created;
            let mut enc = encoder(&dev);
            f.encode_into(&mut enc, std::slice::from_ref(&x), std::slice::from_ref(&x))
                .unwrap();
            queue.submit([enc.finish()]);
            created.push(dev.pool_stats().created - before);
            want = reference_of(step, &[want]).remove(0);
        }
        // The first frames fill the pool (one frame's temporaries may still be in flight when
        // the next is encoded); after that every frame reuses them.
        assert!(created[0] > 0, "{created:?}");
        assert_eq!(
            created[3..].iter().sum::<u64>(),
            0,
            "buffers created per frame on {}: {created:?}",
            dev.name()
        );
        assert_close(
            &x.to_host().unwrap(),
            &want,
            Tol::new(1e-4, 1e-5),
            &format!("8 encoded in-place steps on {}", dev.name()),
        );
    }
}
