//! `debug_print`: lines from inside `jit`, `pmap` (per device, tagged with device and axis index,
//! in device order), `vmap`, `grad` and eager code, captured with `capture_debug_prints`; the
//! printed numbers are computed on the host from the inputs; prints inside loops print per
//! iteration, inside cond branches only where the branch was taken.

mod common;

use brigade::{
    Array, Tensor, axis_index, capture_debug_prints, cond, debug_print, grad, jit, pmap, psum, vmap,
};
use common::{devices_with, gpu_devices};

/// How prints name a device: backend and position in its runtime.
fn tag(d: &brigade::Device) -> String {
    format!("{}:{}", d.info().backend, d.info().index)
}

#[test]
fn a_print_inside_jit_shows_the_device_and_the_values() {
    for dev in gpu_devices() {
        let f = jit(|a: &[Tensor]| {
            let y = &a[0] * 2.0;
            let n = y.sum_all();
            debug_print("y = {}, sum {}", &[&y, &n]);
            vec![y]
        })
        .on(&dev);
        let x = Array::from_vec(vec![1.0f32, 2.5, -3.0, 0.25], &[2, 2]).unwrap();
        let (out, lines) = capture_debug_prints(|| f.call(std::slice::from_ref(&x)));
        assert_eq!(
            out.unwrap()[0].to_vec::<f32>().unwrap(),
            vec![2.0, 5.0, -6.0, 0.5]
        );
        assert_eq!(
            lines,
            vec![format!("[{}] y = [[2, 5], [-6, 0.5]], sum 1.5", tag(&dev))]
        );
        // The print is part of the program: a second call prints again.
        let (_, again) = capture_debug_prints(|| f.call(std::slice::from_ref(&x)));
        assert_eq!(again, lines);
    }
}

#[test]
fn every_device_of_a_pmap_prints_in_device_order_with_its_axis_index() {
    let x: Vec<f32> = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    for layout in ["vulkan:3", "vulkan:2,gl:1", "cpu:3"] {
        let devs = devices_with(layout);
        let p = pmap(|a: &[Tensor]| {
            let total = psum(&a[0], "i");
            debug_print(
                "x = {} of total {} at {}",
                &[&a[0], &total, &axis_index("i")],
            );
            vec![&a[0] / &total]
        })
        .axis_name("i")
        .devices(&devs);
        let arg = Array::from_vec(x.clone(), &[3, 2]).unwrap();
        let (out, lines) = capture_debug_prints(|| p.call(std::slice::from_ref(&arg)));
        out.unwrap();
        // Column totals on the host: [1+3+5, 2+4+6].
        let want: Vec<String> = (0..3)
            .map(|d| {
                format!(
                    "[{} i={d}] x = [{}, {}] of total [9, 12] at {d}",
                    tag(&devs[d]),
                    x[2 * d],
                    x[2 * d + 1]
                )
            })
            .collect();
        assert_eq!(lines, want, "on {layout}");
        let (_, again) = capture_debug_prints(|| p.call(std::slice::from_ref(&arg)));
        assert_eq!(again, want, "stable order on {layout}");
    }
}

#[test]
fn prints_under_vmap_and_grad_and_eagerly() {
    let dev = gpu_devices()[0].clone();
    // vmap: one print of the whole batch.
    let v = vmap(|a: &[Tensor]| {
        let y = a[0].sum_all();
        debug_print("row sum {}", &[&y]);
        vec![y]
    })
    .on(&dev);
    let x = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let (_, lines) = capture_debug_prints(|| v.call(std::slice::from_ref(&x)).unwrap());
    assert_eq!(lines, vec![format!("[{}] row sum [3, 7]", tag(&dev))]);
    // grad: the forward value, printed once.
    let g = grad(|a: &[Tensor]| {
        let l = (&a[0] * &a[0]).sum_all();
        debug_print("loss {}", &[&l]);
        vec![l]
    })
    .on(&dev);
    let (got, lines) = capture_debug_prints(|| g.call(std::slice::from_ref(&x)).unwrap());
    assert_eq!(lines, vec![format!("[{}] loss 30", tag(&dev))]);
    assert_eq!(got[0].to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0, 8.0]);
    // Eagerly: at once.
    let ((), lines) = capture_debug_prints(|| {
        let t = Tensor::from(x.clone());
        debug_print("{} and {}", &[&t.sum_all(), &Tensor::scalar(7i32)]);
    });
    assert_eq!(lines, vec!["[eager] 10 and 7".to_string()]);
    // Eagerly inside a cond branch and a loop body: the program runs at once and prints.
    let ((), lines) = capture_debug_prints(|| {
        let t = Tensor::from(x.clone());
        let y = cond(
            &t.sum_all().gt(&Tensor::scalar(0.0f32)),
            |o| {
                debug_print("taken {}", &[&o[0].sum_all()]);
                vec![o[0].clone()]
            },
            |o| vec![o[0].neg()],
            std::slice::from_ref(&t),
        );
        assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
        let z = brigade::fori_loop(
            0,
            2,
            |i, v| {
                debug_print("i = {}", &[i]);
                vec![&v[0] * 2.0]
            },
            &[Tensor::scalar(1.0f32)],
        );
        assert_eq!(z[0].to_vec::<f32>().unwrap(), vec![4.0]);
    });
    assert_eq!(
        lines,
        vec![
            format!("[{}] taken 10", tag(&dev)),
            format!("[{}] i = 0", tag(&dev)),
            format!("[{}] i = 1", tag(&dev)),
        ]
    );
}

#[test]
fn prints_inside_loops_print_per_iteration_and_inside_conds_only_when_taken() {
    let dev = gpu_devices()[0].clone();
    // A reverse scan printing its carry each iteration, with a cond inside the body whose
    // branches print different things.
    let f = jit(|a: &[Tensor]| {
        let (c, _) = brigade::scan_with(
            |c: &[Tensor], x: &[Tensor]| {
                let s = &c[0] + &x[0];
                debug_print("step {}: {}", &[&x[1], &s]);
                let up = s.gt(&Tensor::scalar(4.0f32));
                let t = cond(
                    &up,
                    |o| {
                        debug_print("big {}", &[&o[0]]);
                        vec![&o[0] * 0.5]
                    },
                    |o| {
                        debug_print("small {}", &[&o[0]]);
                        vec![o[0].clone()]
                    },
                    std::slice::from_ref(&s),
                );
                (t, vec![])
            },
            &[Tensor::scalar(0.0f32)],
            &a[..2],
            brigade::ScanOptions {
                length: None,
                reverse: true,
            },
        );
        c
    })
    .on(&dev);
    let xs = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    let ids = Array::from_vec(vec![0i32, 1, 2, 3], &[4]).unwrap();
    let (out, lines) = capture_debug_prints(|| f.call(&[xs, ids]));
    // Host: iterate 3, 2, 1, 0: s = c + x; c = s > 4 ? s / 2 : s.
    let mut want = Vec::new();
    let mut c = 0.0f32;
    for (i, x) in [(3, 4.0f32), (2, 3.0), (1, 2.0), (0, 1.0)] {
        let s = c + x;
        want.push(format!("[{}] step {i}: {s}", tag(&dev)));
        if s > 4.0 {
            want.push(format!("[{}] big {s}", tag(&dev)));
            c = s * 0.5;
        } else {
            want.push(format!("[{}] small {s}", tag(&dev)));
            c = s;
        }
    }
    assert_eq!(out.unwrap()[0].to_vec::<f32>().unwrap(), vec![c]);
    // Iteration by iteration, in the order the loop ran.
    assert_eq!(lines, want);
    // Per device of a pmap: each device's own branch only.
    let devs = devices_with("vulkan:2");
    let p = pmap(|a: &[Tensor]| {
        let pos = a[0].sum_all().gt(&Tensor::scalar(0.0f32));
        cond(
            &pos,
            |o| {
                debug_print("positive {}", &[&o[0]]);
                vec![o[0].clone()]
            },
            |o| {
                debug_print("negative {}", &[&o[0]]);
                vec![o[0].neg()]
            },
            &a[..1],
        )
    })
    .axis_name("i")
    .devices(&devs);
    let x = Array::from_vec(vec![1.0f32, 2.0, -3.0, -4.0], &[2, 2]).unwrap();
    let (_, lines) = capture_debug_prints(|| p.call(&[x]).unwrap());
    assert_eq!(
        lines,
        vec![
            format!("[{} i=0] positive [1, 2]", tag(&devs[0])),
            format!("[{} i=1] negative [-3, -4]", tag(&devs[1])),
        ]
    );
}
