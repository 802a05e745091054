//! The texture matmul (`shaders/matmul_texture.wgsl`: A and B copied into rgba32float textures,
//! read with `textureLoad`), selected natively with `BRIGADE_MATMUL_TEXTURE=on` as the browser
//! selects it by default: values against the CPU reference on every GPU device (lavapipe Vulkan,
//! llvmpipe GL), which programs take it, and the shapes that keep the buffer kernels.
//!
//! Its own test binary: the variable is read when a program is compiled, so every test here sets
//! it (to the same value) before compiling anything.

mod common;

use brigade::{Array, Device, Tensor, jit};
use common::{Tol, check_on_all, gpu_devices, rand_f32};

/// Contractions of up to a few hundred terms (same bound as the other matmul tests).
const TOL: Tol = Tol::REDUCE;

fn textures_on() {
    // SAFETY: every test of this binary sets the same value, before any device work.
    unsafe { std::env::set_var(brigade::device::TEXTURE_ENV, "on") };
}

/// The labels of the matmul kernels `f` compiles to on `dev` for `args`.
fn matmul_labels<F: Fn(&[Tensor]) -> Vec<Tensor>>(
    f: F,
    args: &[Array],
    dev: &Device,
) -> Vec<String> {
    let _guard = common::device_guard(dev);
    let p = jit(f)
        .program(args, dev)
        .unwrap_or_else(|e| panic!("on {}: {e}", dev.name()));
    p.launches
        .iter()
        .map(|l| l.label.clone())
        .filter(|l| l.starts_with("matmul_"))
        .collect()
}

fn matmul(x: &[Tensor]) -> Vec<Tensor> {
    vec![x[0].matmul(&x[1])]
}

#[test]
fn texture_matmuls_match_the_reference_plain_and_batched() {
    textures_on();
    let shapes: &[(&[usize], &[usize])] = &[
        (&[8, 64], &[64, 64]),
        (&[1, 64], &[64, 128]), // one row: seven of the eight rows of a block clamped
        (&[13, 128], &[128, 64]), // m % 8 != 0
        (&[100, 192], &[192, 320]), // several workgroups in both directions, partial ones
        (&[3, 17, 64], &[3, 64, 64]), // batched: texture rows of every batch stacked
        (&[2, 40, 128], &[2, 128, 192]),
        (&[130, 256], &[256, 576]), // large enough to be measured without the variable
    ];
    for (i, (a, b)) in shapes.iter().enumerate() {
        let args = [rand_f32(a, 300 + i as u64), rand_f32(b, 400 + i as u64)];
        for dev in gpu_devices() {
            let labels = matmul_labels(matmul, &args, &dev);
            assert!(
                labels.len() == 1 && labels[0].starts_with("matmul_tex8x8_nn_f32"),
                "on {}: {a:?} @ {b:?} compiled to {labels:?}, not the texture kernel",
                dev.name()
            );
        }
        check_on_all(matmul, &args, TOL);
    }
}

#[test]
fn chained_and_repeated_texture_matmuls_in_one_program() {
    textures_on();
    // (A @ B) @ C reads an intermediate buffer as a texture; A @ B + A @ D runs two dispatches
    // that use the same cached textures within one submission (the copy before each dispatch
    // must land after the one before it has read them).
    let args = [
        rand_f32(&[24, 64], 1),
        rand_f32(&[64, 128], 2),
        rand_f32(&[128, 64], 3),
        rand_f32(&[64, 128], 4),
    ];
    let f = |x: &[Tensor]| {
        let ab = x[0].matmul(&x[1]);
        vec![
            ab.matmul(&x[2]),
            x[0].matmul(&x[1]).add(&x[0].matmul(&x[3])),
        ]
    };
    for dev in gpu_devices() {
        let labels = matmul_labels(f, &args, &dev);
        assert!(
            labels.len() >= 3 && labels.iter().all(|l| l.starts_with("matmul_tex8x8")),
            "on {}: {labels:?}",
            dev.name()
        );
    }
    check_on_all(f, &args, TOL);
    // And again: the second call reuses the textures the first one made.
    check_on_all(f, &args, TOL);
}

#[test]
fn shapes_the_textures_cannot_take_keep_the_buffer_kernels() {
    textures_on();
    // k or n not a multiple of 64 (a copied row must be a multiple of 256 bytes), integers, an
    // operand read transposed in place: the buffer kernels, same values.
    let cases: Vec<(Vec<Array>, &str)> = vec![
        (
            vec![rand_f32(&[16, 48], 5), rand_f32(&[48, 64], 6)],
            "k % 64",
        ),
        (
            vec![rand_f32(&[16, 64], 7), rand_f32(&[64, 96], 8)],
            "n % 64",
        ),
        (vec![rand_f32(&[5, 7], 9), rand_f32(&[7, 3], 10)], "odd"),
    ];
    for (args, why) in &cases {
        for dev in gpu_devices() {
            let labels = matmul_labels(matmul, args, &dev);
            assert!(
                labels.iter().all(|l| !l.starts_with("matmul_tex")),
                "on {}: {why}: {labels:?}",
                dev.name()
            );
        }
        check_on_all(matmul, args, TOL);
    }
    // A^T @ B with A stored (k, m): read in place by the tiled tn kernel, not copied to a texture.
    let args = [rand_f32(&[64, 32], 11), rand_f32(&[64, 64], 12)];
    let tn = |x: &[Tensor]| vec![x[0].t().matmul(&x[1])];
    for dev in gpu_devices() {
        let labels = matmul_labels(tn, &args, &dev);
        assert!(
            labels.len() == 1 && labels[0].contains("_tn_"),
            "on {}: {labels:?}",
            dev.name()
        );
    }
    check_on_all(tn, &args, TOL);
    // Integers: the generic kernel.
    let args = [
        common::rand_i32(&[8, 64], 13, -20, 20),
        common::rand_i32(&[64, 64], 14, -20, 20),
    ];
    check_on_all(matmul, &args, Tol::EXACT);
}

#[test]
fn textures_over_the_device_limit_keep_the_buffer_kernel() {
    textures_on();
    // B is (batch * k) texels high: past every adapter's max_texture_dimension_2d here (lavapipe
    // and llvmpipe: 16384) once batch * k > 16384. A batch of 65 of (4, 256) @ (256, 64).
    for dev in gpu_devices() {
        let (wgpu_dev, _) = dev.wgpu().expect("a GPU device");
        let max = wgpu_dev.limits().max_texture_dimension_2d as usize;
        let batch = max / 256 + 1;
        let args = [
            rand_f32(&[batch, 4, 256], 15),
            rand_f32(&[batch, 256, 64], 16),
        ];
        let labels = matmul_labels(matmul, &args, &dev);
        assert!(
            labels.len() == 1 && !labels[0].starts_with("matmul_tex"),
            "on {}: {batch} x 256 rows of B over {max}: {labels:?}",
            dev.name()
        );
        common::check_on(std::slice::from_ref(&dev), matmul, &args, TOL);
    }
}

/// Cached operand textures count as memory in use under the device's budget: a first product
/// adds its output and its two textures (the bytes of A and of B as rgba32f) to `bytes_in_use`,
/// a second one of the same shapes only its output; a product whose textures do not fit the
/// memory limit is a typed `OutOfMemory` naming the texture (not a wgpu error), and the device
/// runs it once the limit is lifted.
#[test]
fn cached_textures_count_in_the_memory_budget() {
    textures_on();
    // A runtime of its own: the memory figures below see only this test's work.
    for dev in common::devices_with("gl:1,vulkan:1") {
        let on = |a: &[usize], seed| rand_f32(a, seed).to_device(&dev).unwrap();
        let (a, b) = (on(&[64, 256], 21), on(&[256, 512], 22));
        let (a_bytes, b_bytes, c_bytes) = (64 * 256 * 4, 256 * 512 * 4, 64 * 512 * 4);
        let f = jit(matmul).on(&dev);
        let labels = matmul_labels(matmul, &[a.clone(), b.clone()], &dev);
        assert!(labels[0].starts_with("matmul_tex"), "{labels:?}");
        let guard = common::device_guard(&dev);
        dev.wait().unwrap();
        let before = dev.memory_stats().bytes_in_use;
        let c1 = f.call(&[a.clone(), b.clone()]).unwrap();
        dev.wait().unwrap();
        let first = dev.memory_stats().bytes_in_use - before;
        assert_eq!(first, c_bytes + a_bytes + b_bytes, "on {}", dev.name());
        let c2 = f.call(&[a.clone(), b.clone()]).unwrap();
        dev.wait().unwrap();
        let second = dev.memory_stats().bytes_in_use - before - first;
        assert_eq!(
            second,
            c_bytes,
            "on {}: the textures are reused",
            dev.name()
        );
        assert_eq!(
            common::host(&c1[0]).to_vec::<f32>().unwrap(),
            common::host(&c2[0]).to_vec::<f32>().unwrap()
        );

        // New shapes, new textures (1 MiB together): over a limit 64 KiB above what is in use.
        let (a2, b2) = (on(&[64, 512], 23), on(&[512, 256], 24));
        let in_use = dev.memory_stats().bytes_in_use;
        dev.set_memory_limit(Some(in_use + c_bytes));
        let err = f.call(&[a2.clone(), b2.clone()]).unwrap_err();
        dev.set_memory_limit(None);
        let msg = err.to_string();
        assert!(
            matches!(err, brigade::Error::OutOfMemory { .. })
                && msg.contains("rgba32f texture")
                && msg.contains("memory limit"),
            "on {}: {msg}",
            dev.name()
        );
        drop(guard);
        common::check_on(std::slice::from_ref(&dev), matmul, &[a2, b2], TOL);
    }
}
