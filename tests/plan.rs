//! `brigade::plan`: bytes per example measured from the compiled buffer plan, the per-device cap
//! from the binding limit, and the cap is tight on a real device.

mod common;

use brigade::{Array, Aval, DType, Error, Tensor, jit, plan, vmap};

/// y = 2x + 1 on f32[features]: the batched program holds the input and the output (the constant
/// is a scalar), so exactly 2 · 4 · features bytes per example, the largest buffer 4 · features.
#[test]
fn plan_measures_memory_per_example_and_caps_by_the_binding_limit() {
    let dev = common::device_of("vulkan");
    let features = 4096;
    let f = |a: &[Tensor]| vec![&a[0] * 2.0 + 1.0];
    let p = plan(f, &[Aval::new(vec![features], DType::F32)], 1_000_000, &dev).unwrap();
    assert_eq!(p.bytes_per_sample, 2 * 4 * features as u64, "{p}");
    assert_eq!(p.largest_buffer_per_sample, 4 * features as u64, "{p}");
    let limit = dev.limits().max_array_bytes();
    assert_eq!(p.binding_limit, limit);
    assert_eq!(p.batch_cap as u64, limit / (4 * features as u64), "{p}");
    assert_eq!(p.devices_needed, 1_000_000usize.div_ceil(p.batch_cap));
    // The cap runs (every buffer within one binding).
    let batched = vmap(f).on(&dev);
    let fits = common::rand_f32(&[p.batch_cap, features], 5);
    let out = batched.call(std::slice::from_ref(&fits)).unwrap();
    let (x, y) = (common::host(&fits).to_f64(), common::host(&out[0]).to_f64());
    for i in (0..x.len()).step_by(4099) {
        assert!((y[i] - (2.0 * x[i] + 1.0)).abs() < 1e-5, "element {i}");
    }
    // One example more is over one binding: elementwise kernels bind it in segments.
    let over = common::rand_f32(&[p.batch_cap + 1, features], 6);
    let out = batched.call(std::slice::from_ref(&over)).unwrap();
    let (x, y) = (common::host(&over).to_f64(), common::host(&out[0]).to_f64());
    for i in (0..x.len()).step_by(4099).chain([x.len() - 1]) {
        assert!((y[i] - (2.0 * x[i] + 1.0)).abs() < 1e-5, "element {i}");
    }
}

/// Fixed memory (a weight shared by every example) is separated from per-example memory, and a
/// function whose buffers do not grow with the batch needs one device.
#[test]
fn plan_separates_fixed_memory_and_handles_no_growth() {
    let dev = common::device_of("vulkan");
    let w = common::rand_f32(&[64, 1024], 7);
    let f = move |a: &[Tensor]| vec![a[0].matmul(&Tensor::from(w.clone()))];
    let p = plan(f, &[Aval::new(vec![64], DType::F32)], 5000, &dev).unwrap();
    // Per example at least the 64-float input and the 1024-float output (the compiled plan may
    // hold an intermediate copy too), the largest buffer exactly the output row; fixed: exactly
    // the 64×1024 weight.
    let io = (64 + 1024) * 4;
    assert!(
        p.bytes_per_sample >= io && p.bytes_per_sample <= 3 * io,
        "{p}"
    );
    assert_eq!(p.largest_buffer_per_sample, 1024 * 4, "{p}");
    assert_eq!(p.bytes_fixed, 64 * 1024 * 4, "{p}");
    assert_eq!(p.devices_needed, 5000usize.div_ceil(p.batch_cap));
    let constant = |_: &[Tensor]| vec![Tensor::full(3.0f32, &[8])];
    let c = plan(constant, &[Aval::new(vec![4], DType::F32)], 10, &dev).unwrap();
    assert_eq!(c.largest_buffer_per_sample, 4 * 8, "{c}");
    match plan(constant, &[Aval::new(vec![4], DType::F32)], 0, &dev) {
        Err(Error::BadParallelArg { op: "plan", .. }) => {}
        other => panic!("expected BadParallelArg for an empty batch, got {other:?}"),
    }
}

/// With a memory budget the cap is also the largest batch whose call fits it as the pool
/// allocates (buckets where they fit, exact sizes where only those do), and it is tight on a
/// device with that budget: the cap runs, one more example is refused with the typed
/// out-of-memory error.
/// A budget below one example is `OutOfMemory` from `plan` itself.
#[test]
fn plan_caps_the_batch_by_the_memory_budget() {
    let features = 4096;
    let f = |a: &[Tensor]| vec![&a[0] * 2.0 + 1.0];
    let example = [Aval::new(vec![features], DType::F32)];
    // A runtime of its own: the budget set here touches no other test's device.
    for dev in common::devices_with("vulkan:1,gl:1") {
        let _g = common::device_guard(&dev);
        let budget = 1u64 << 20;
        dev.set_memory_limit(Some(budget));
        let p = plan(f, &example, 1000, &dev).unwrap();
        let cap = p.budget_cap.expect("a budget gives a cap");
        assert_eq!(p.memory_budget, Some(budget), "{p}");
        assert_eq!(p.batch_cap, cap.min(p.binding_cap), "{p}");
        assert_eq!(p.devices_needed, 1000usize.div_ceil(p.batch_cap), "{p}");
        // Between the batches whose exact sizes and whose pool buckets fill the budget.
        let analysis = |b: usize| {
            let x = Array::full(1.0f32, &[b, features]).unwrap();
            jit(f).on(&dev).memory_analysis(&[x]).unwrap()
        };
        assert!(analysis(cap).peak_bytes <= budget, "{p}");
        assert!(analysis(cap + 1).pool_peak_bytes > budget, "{p}");
        assert_eq!(
            p.per_device.argument_bytes,
            (1000usize.div_ceil(p.devices_needed) * features * 4) as u64,
            "{p}"
        );
        assert!(p.to_string().contains("memory budget"), "{p}");
        // Runs at the cap under the budget; one more example does not fit.
        let batched = vmap(f).on(&dev);
        let fits = common::rand_f32(&[cap, features], 8);
        let out = batched.call(std::slice::from_ref(&fits)).unwrap();
        let (x, y) = (common::host(&fits).to_f64(), common::host(&out[0]).to_f64());
        for i in (0..x.len()).step_by(997) {
            assert!((y[i] - (2.0 * x[i] + 1.0)).abs() < 1e-5, "element {i}");
        }
        drop(out);
        let over = common::rand_f32(&[cap + 1, features], 9);
        match batched.call(std::slice::from_ref(&over)) {
            Err(Error::OutOfMemory { .. }) => {}
            other => panic!("expected OutOfMemory at the cap + 1, got {other:?}"),
        }
        // Too small for one example.
        dev.set_memory_limit(Some(4 * features as u64));
        match plan(f, &example, 10, &dev) {
            Err(Error::OutOfMemory { detail, .. }) => {
                assert!(detail.contains("one example"), "{detail}")
            }
            other => panic!("expected OutOfMemory for a budget below one example, got {other:?}"),
        }
        dev.set_memory_limit(None);
        let free = plan(f, &example, 1000, &dev).unwrap();
        assert_eq!((free.budget_cap, free.batch_cap), (None, free.binding_cap));
    }
}
