//! `debug_print`: lines from inside `jit`, `pmap` (per device, tagged with device and axis index,
//! in device order), `vmap`, `grad` and eager code, captured with `capture_debug_prints`; the
//! printed numbers are computed on the host from the inputs; prints inside control flow are a
//! typed error.

mod common;

use brigade::{
    Array, Error, Tensor, axis_index, capture_debug_prints, cond, debug_print, grad, jit, pmap,
    psum, scan, vmap,
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
}

#[test]
fn prints_inside_control_flow_are_refused() {
    let x = Array::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
    let e = jit(|a: &[Tensor]| {
        cond(
            &a[0].sum_all().gt(&Tensor::scalar(0.0f32)),
            |o| {
                debug_print("{}", &[&o[0]]);
                vec![o[0].clone()]
            },
            |o| vec![o[0].clone()],
            &a[..1],
        )
    })
    .call(std::slice::from_ref(&x))
    .unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Unsupported {
                op: "debug_print",
                ..
            }
        ) && e.to_string().contains("cond"),
        "{e}"
    );
    let e = jit(|a: &[Tensor]| {
        let (c, _) = scan(
            |c: &[Tensor], x: &[Tensor]| {
                debug_print("{}", &[&x[0]]);
                (vec![&c[0] + &x[0]], vec![])
            },
            &[Tensor::scalar(0.0f32)],
            &a[..1],
        );
        c
    })
    .call(&[x])
    .unwrap_err();
    assert!(e.to_string().contains("scan"), "{e}");
}
