//! The matmul kernel family: values against the CPU reference on every GPU device (odd shapes,
//! batches, transposed operands read in place, NaN/Inf), the lowering's in-place reads, and the
//! measured choice's disk cache across processes.

mod common;

use brigade::lower::lower;
use brigade::ops::DotDims;
use brigade::{Array, DeviceLimits, HostArray, Tensor, grad, jit, reference};
use common::{Tol, assert_close, check_on_all, gpu_devices, host, rand_f32, rand_i32};

/// Contractions of up to a few thousand terms (same bound as the other matmul tests).
const TOL: Tol = Tol::REDUCE;

fn matmul(x: &[Tensor]) -> Vec<Tensor> {
    vec![x[0].matmul(&x[1])]
}

#[test]
fn plain_and_batched_matmuls_match_the_reference_at_odd_and_aligned_sizes() {
    let shapes: &[(&[usize], &[usize])] = &[
        (&[1, 1], &[1, 1]),
        (&[3, 5], &[5, 7]),
        (&[33, 17], &[17, 65]),
        (&[7, 12], &[12, 20]),
        (&[9, 8], &[8, 12]), // n % 8 != 0: half of a two-vec4 column tile is off the edge
        (&[13, 24], &[24, 8]), // m % 8 != 0
        (&[4, 6, 8], &[4, 8, 12]),
        (&[3, 33, 20], &[3, 20, 44]),
        (&[160, 136], &[136, 144]), // large enough to be measured (>= 128^3 multiply-adds)
        (&[2, 130, 128], &[2, 128, 132]),
        (&[129, 255], &[255, 131]), // measured size, unaligned: generic kernel
    ];
    for (i, (a, b)) in shapes.iter().enumerate() {
        let args = [rand_f32(a, 10 + i as u64), rand_f32(b, 50 + i as u64)];
        check_on_all(matmul, &args, TOL);
    }
    // Integers take the generic kernel (wrapping, exact).
    let args = [rand_i32(&[5, 9], 1, -50, 50), rand_i32(&[9, 6], 2, -50, 50)];
    check_on_all(matmul, &args, Tol::EXACT);
}

#[test]
fn transposed_operands_match_the_reference() {
    // dA = dC @ B^T and dB = A^T @ dC of grad, aligned (tiled nt / tn kernels, read in place) and
    // not (generic kernel with strides, or a transpose copy), plain and batched.
    for (i, &(m, k, n)) in [
        (8usize, 12usize, 16usize),
        (12, 8, 20),
        (5, 7, 3),
        (16, 9, 8),
        (20, 16, 6),
        (136, 132, 140),
    ]
    .iter()
    .enumerate()
    {
        let s = 100 + 10 * i as u64;
        // A (m, k), B^T stored (n, k), A^T stored (k, m), B (k, n).
        let args = [
            rand_f32(&[m, k], s),
            rand_f32(&[n, k], s + 1),
            rand_f32(&[k, m], s + 2),
            rand_f32(&[k, n], s + 3),
        ];
        check_on_all(
            |x| {
                vec![
                    x[0].matmul(&x[1].t()),
                    x[2].t().matmul(&x[3]),
                    x[2].t().matmul(&x[1].t()),
                ]
            },
            &args,
            TOL,
        );
        // Batched: (2, m, k) @ (2, n, k)^T and (2, k, m)^T @ (2, k, n).
        let args = [
            rand_f32(&[2, m, k], s + 4),
            rand_f32(&[2, n, k], s + 5),
            rand_f32(&[2, k, m], s + 6),
            rand_f32(&[2, k, n], s + 7),
        ];
        check_on_all(
            |x| {
                vec![
                    x[0].matmul(&x[1].transpose(&[0, 2, 1])),
                    x[2].transpose(&[0, 2, 1]).matmul(&x[3]),
                ]
            },
            &args,
            TOL,
        );
    }
    // Contracting over the leading axes of both operands (A^T @ B written as a dot_general).
    let d = DotDims {
        lhs_contract: vec![0],
        rhs_contract: vec![0],
        lhs_batch: vec![],
        rhs_batch: vec![],
    };
    let args = [rand_f32(&[12, 8], 7), rand_f32(&[12, 16], 8)];
    check_on_all(
        move |x| vec![x[0].dot_general(&x[1], d.clone())],
        &args,
        TOL,
    );
}

#[test]
fn grad_of_matmul_matches_the_reference_formulas() {
    // d/dA sum((A @ B) * W) = W @ B^T, d/dB = A^T @ W.
    let (m, k, n) = (24, 16, 20);
    let args = [
        rand_f32(&[m, k], 1),
        rand_f32(&[k, n], 2),
        rand_f32(&[m, n], 3),
    ];
    let hosts: Vec<HostArray> = args.iter().map(host).collect();
    let formula = jit(|x: &[Tensor]| vec![x[2].matmul(&x[1].t()), x[0].t().matmul(&x[2])]);
    let want = reference::eval_graph(&formula.graph(&args).unwrap(), &hosts).unwrap();
    for dev in gpu_devices() {
        let _g = common::device_guard(&dev);
        let g = grad(|x: &[Tensor]| vec![x[0].matmul(&x[1]).mul(&x[2]).sum_all()])
            .argnums(&[0, 1])
            .on(&dev);
        let got = g.call(&args).unwrap();
        for (j, (o, w)) in got.iter().zip(&want).enumerate() {
            assert_close(&host(o), w, TOL, &format!("{} grad {j}", dev.name()));
        }
    }
}

/// A deterministic (rows, cols) f32 matrix as a vector.
fn values(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    common::f32s(rows * cols, seed, -1.0, 1.0)
}

/// The (cols, rows) transpose of a row-major (rows, cols) matrix.
fn transposed(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..cols * rows)
        .map(|i| v[(i % rows) * cols + i / rows])
        .collect()
}

#[test]
fn nan_and_inf_propagate_through_every_layout() {
    // One NaN in A poisons its row of C, one +Inf in B its column (others finite), as IEEE fma
    // chains do and as the reference does; 0 * Inf gives NaN.
    for &(m, k, n) in &[(8usize, 8usize, 8usize), (5, 7, 6), (136, 128, 132)] {
        let mut a = values(m, k, 11);
        let mut b = values(k, n, 12);
        a[k + 1] = f32::NAN; // row 1
        b[2 * n + 3] = f32::INFINITY; // row 2 of B, column 3
        a[2 * k + 2] = 0.0; // row 2 of A meets the Inf with a zero: NaN at (2, 3)
        for (i, row) in a.chunks_mut(k).enumerate() {
            if i != 2 && row[2] == 0.0 {
                row[2] = 0.5; // keep the other rows' products with the Inf infinite
            }
        }
        let at = transposed(&a, m, k);
        let bt = transposed(&b, k, n);
        let args = [
            Array::from_vec(a, &[m, k]).unwrap(),
            Array::from_vec(b, &[k, n]).unwrap(),
            Array::from_vec(at, &[k, m]).unwrap(),
            Array::from_vec(bt, &[n, k]).unwrap(),
        ];
        let outs = check_on_all(
            |x| {
                vec![
                    x[0].matmul(&x[1]),
                    x[0].matmul(&x[3].t()),
                    x[2].t().matmul(&x[1]),
                ]
            },
            &args,
            TOL,
        );
        let brigade::HostData::F32(c) = &outs[0].data else {
            unreachable!()
        };
        assert!(c[n..2 * n].iter().all(|v| v.is_nan()), "row 1 is NaN");
        assert!(c[2 * n + 3].is_nan(), "0 * Inf is NaN");
        assert!(c[3].is_infinite(), "column 3 is infinite");
    }
}

fn limits() -> DeviceLimits {
    DeviceLimits::from_wgpu(&wgpu::Limits::default())
}

/// Labels of the kernels `f` lowers to (heuristic choice).
fn launches(f: impl Fn(&[Tensor]) -> Vec<Tensor>, args: &[Array]) -> Vec<String> {
    let g = jit(f).graph(args).unwrap();
    lower(&g, &limits())
        .unwrap()
        .launches
        .iter()
        .map(|l| l.label.clone())
        .collect()
}

#[test]
fn transposed_operands_are_read_in_place_without_a_copy() {
    let a = rand_f32(&[8, 12], 1);
    let bt = rand_f32(&[16, 12], 2);
    let at = rand_f32(&[12, 8], 3);
    let b = rand_f32(&[12, 16], 4);
    let l = launches(|x| vec![x[0].matmul(&x[1].t())], &[a.clone(), bt.clone()]);
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(l[0].starts_with("matmul_t8x1k4_nt_f32"), "{l:?}");
    let l = launches(|x| vec![x[0].t().matmul(&x[1])], &[at.clone(), b.clone()]);
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(l[0].starts_with("matmul_t8x1k4_tn_f32"), "{l:?}");
    // Both transposed: B^T is copied (one kernel) and A^T read in place by the tn kernel.
    let l = launches(
        |x| vec![x[0].t().matmul(&x[1].t())],
        &[at.clone(), bt.clone()],
    );
    assert_eq!(l.len(), 2, "{l:?}");
    assert!(l[1].contains("_tn_"), "{l:?}");
    // Unaligned f32 (k = 7): the tiled kernels do not apply to the nt layout, the generic one reads
    // B^T in place.
    let l = launches(
        |x| vec![x[0].matmul(&x[1].t())],
        &[rand_f32(&[8, 7], 5), rand_f32(&[16, 7], 6)],
    );
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(l[0].starts_with("matmul_generic_nt"), "{l:?}");
    // A^T aligned for the nn kernel but not for tn (m = 6): the transpose is copied instead.
    let l = launches(
        |x| vec![x[0].t().matmul(&x[1])],
        &[rand_f32(&[12, 6], 7), rand_f32(&[12, 16], 8)],
    );
    assert_eq!(l.len(), 2, "{l:?}");
    assert!(l[1].starts_with("matmul_t8x1k4_nn"), "{l:?}");
    // grad of a matmul: dA = W @ B^T and dB = A^T @ W read B and A in place, no transpose copies.
    let w = rand_f32(&[8, 16], 9);
    let g = grad(|x: &[Tensor]| vec![x[0].matmul(&x[1]).mul(&x[2]).sum_all()]).argnums(&[0, 1]);
    let graph = g.graph(&[a, b, w]).unwrap();
    let p = lower(&graph, &limits()).unwrap();
    let mm: Vec<&str> = p
        .launches
        .iter()
        .map(|l| l.label.as_str())
        .filter(|l| l.starts_with("matmul"))
        .collect();
    let all: Vec<&str> = p.launches.iter().map(|l| l.label.as_str()).collect();
    assert_eq!(mm.len(), 2, "{all:?}");
    assert!(mm[0].contains("_nt_") && mm[1].contains("_tn_"), "{all:?}");
    // The cotangent, the two matmuls, and dB's transpose of grad's (16, 12) result (an identity
    // transpose around dA's result shares its buffer).
    assert_eq!(all.len(), 4, "{all:?}");
}

/// Set in the child processes of [`measured_choice_is_cached_on_disk_for_the_next_process`].
const CHILD_ENV: &str = "BRIGADE_TEST_MATMUL_TUNE_CHILD";

/// In a child process: run one measured-size matmul on the Vulkan device, check it, print the
/// process's tuning counts. In the parent's own run: nothing.
#[test]
fn tune_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let dev = common::device_of("vulkan");
    let args = [rand_f32(&[256, 256], 1), rand_f32(&[256, 256], 2)];
    let hosts: Vec<HostArray> = args.iter().map(host).collect();
    let want = reference::eval_graph(&jit(matmul).graph(&args).unwrap(), &hosts).unwrap();
    let t = std::time::Instant::now();
    let got = jit(matmul).on(&dev).call(&args).unwrap();
    let first_call = t.elapsed();
    assert_close(&host(&got[0]), &want[0], TOL, "tuned matmul");
    let s = brigade::device::tune_stats();
    println!(
        "TUNE searches={} disk_hits={} first_call_ms={}",
        s.searches,
        s.disk_hits,
        first_call.as_millis()
    );
}

#[test]
fn measured_choice_is_cached_on_disk_for_the_next_process() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("brigade-tune-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let run = |tune: &str| -> (u64, u64, u64) {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tune_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .env(brigade::device::CACHE_DIR_ENV, &dir)
            .env(brigade::device::TUNE_ENV, tune)
            .env("BRIGADE_DEVICES", "vulkan:1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("TUNE ").map(|(_, rest)| rest))
            .unwrap_or_else(|| panic!("no TUNE line in:\n{stdout}"));
        let field = |name: &str| -> u64 {
            line.split(' ')
                .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} in {line}"))
        };
        (
            field("searches"),
            field("disk_hits"),
            field("first_call_ms"),
        )
    };
    // Off: the heuristic, nothing searched or written.
    assert_eq!(run("off").0, 0);
    assert!(!dir.join(brigade::device::MATMUL_CACHE_FILE).exists());
    // First process: one search, written to disk.
    let (searches, disk_hits, first_ms) = run("on");
    assert_eq!((searches, disk_hits), (1, 0));
    let text = std::fs::read_to_string(dir.join(brigade::device::MATMUL_CACHE_FILE)).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.contains("f32 nn b0 m8 k8a8 n8"), "{text}");
    // Second process: the choice comes from disk, no search.
    let (searches, disk_hits, _) = run("on");
    assert_eq!((searches, disk_hits), (0, 1));
    println!("first call of a 256^3 matmul with the search: {first_ms} ms");
    // Loose bound (the target is 1 s on an idle machine; tests share the CPU).
    assert!(
        first_ms < 10_000,
        "first call with a search took {first_ms} ms"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The lowered matmul kernels write only inside C: run each one by hand with C bound in a larger
/// buffer whose tail holds a sentinel, on every GPU device. Small row counts (m < 4) once made the
/// tiled kernels believe M = 4; Vulkan dropped the extra row's writes at the end of an exact-size
/// buffer, WebGPU clamped them onto the last row.
#[test]
fn matmul_kernels_never_write_past_c() {
    use brigade::device::Dispatch;
    use brigade::{DType, HostData};
    const SENTINEL: f32 = 12345.5;
    const GUARD: usize = 64;
    let cases: &[(&[usize], &[usize], bool)] = &[
        (&[1, 4], &[4, 4], false),
        (&[2, 8], &[8, 12], false),
        (&[3, 8], &[8, 8], false),
        (&[2, 3, 8], &[2, 8, 8], false),
        (&[3, 8], &[8, 8], true), // B read transposed in place
        (&[5, 12], &[12, 8], false),
        (&[3, 5], &[5, 6], false), // generic kernel
    ];
    for (i, &(a, b, tb)) in cases.iter().enumerate() {
        let args = [rand_f32(a, 70 + i as u64), rand_f32(b, 80 + i as u64)];
        let f = move |x: &[Tensor]| {
            let rhs = if tb { x[1].t() } else { x[1].clone() };
            vec![x[0].matmul(&rhs)]
        };
        let g = jit(f).graph(&args).unwrap();
        let hosts: Vec<HostArray> = args.iter().map(host).collect();
        let want = reference::eval_graph(&g, &hosts).unwrap();
        let want = want[0].to_f64();
        for dev in gpu_devices() {
            let _g = common::device_guard(&dev);
            let p = lower(&g, dev.limits()).unwrap();
            assert_eq!(p.launches.len(), 1, "case {i}: one matmul launch");
            let l = &p.launches[0];
            let up = |a: &Array| {
                let v = host(a).to_f64().iter().map(|&v| v as f32).collect();
                dev.upload(&HostData::F32(v)).unwrap()
            };
            let (xa, xb) = (up(&args[0]), up(&args[1]));
            let c = dev
                .upload(&HostData::F32(vec![SENTINEL; want.len() + GUARD]))
                .unwrap();
            let buffers = l
                .slots
                .iter()
                .map(|&s| {
                    if s == p.input_slots[0] {
                        &*xa
                    } else if s == p.input_slots[1] {
                        &*xb
                    } else {
                        assert_eq!(s, p.output_slots[0], "case {i}: unexpected slot");
                        &*c
                    }
                })
                .collect();
            let k = dev.kernel(&l.label, &l.wgsl).unwrap();
            dev.run(&[Dispatch {
                kernel: &k,
                buffers,
                workgroups: l.workgroups,
            }])
            .unwrap();
            let HostData::F32(got) = dev
                .download_blocking(&c, DType::F32, want.len() + GUARD)
                .unwrap()
            else {
                unreachable!()
            };
            let what = format!("{} case {i} ({})", dev.name(), l.label);
            for (j, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "{what}: C[{j}] = {g}, want {w}"
                );
            }
            let past = &got[want.len()..];
            assert!(
                past.iter().all(|&v| v == SENTINEL),
                "{what}: wrote past C: {past:?}"
            );
        }
    }
}
