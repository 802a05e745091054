//! Finite differences in f64 for gradient checks (the precision argument is in tests/grad.rs's
//! module comment): the f32 arguments of a loss are widened exactly to f64 and the same closure
//! is evaluated by `jit` on the `cpu` device (whose executor tests/cpu_backend.rs checks against the
//! reference interpreter), which computes f64 in f64; an f32 gradient must match within [`FD`].

use brigade::{Array, DType, HostArray, Tensor, jit};

use super::{Tol, assert_close, devices_with, host};

/// f32 gradient vs f64 central differences: 1e-5 relative, 1e-5 absolute.
pub const FD: Tol = Tol {
    rtol: 1e-5,
    atol: 1e-5,
};
/// Finite-difference step in f64 (inputs have scale ~1; see the module comment).
pub const EPS: f64 = 1e-5;

/// The f64 values of an array.
pub fn vals64(a: &Array) -> Vec<f64> {
    host(a).to_vec::<f64>().unwrap()
}

/// The f32 values of an array.
pub fn vals(a: &Array) -> Vec<f32> {
    host(a).to_vec::<f32>().unwrap()
}

/// An f32 argument widened (exactly) to f64; other arguments (indices, predicates) unchanged.
pub fn widen(a: &Array) -> Array {
    if a.dtype() != DType::F32 {
        return a.clone();
    }
    let v: Vec<f64> = vals(a).into_iter().map(f64::from).collect();
    Array::from_vec(v, a.shape()).unwrap()
}

/// Central differences in f64 of the scalar `loss` with respect to every element of argument `k`:
/// the f32 arguments are widened to f64 and the same closure is evaluated by the reference
/// interpreter (`jit` on the cpu device), which computes f64 in f64. See the module comment for
/// the precision.
pub fn central_diff(loss: &dyn Fn(&[Tensor]) -> Vec<Tensor>, args: &[Array], k: usize) -> Vec<f64> {
    let j = jit(loss).on(&devices_with("cpu:1")[0]);
    let wide: Vec<Array> = args.iter().map(widen).collect();
    let base = vals64(&wide[k]);
    let shape = args[k].shape().to_vec();
    let eval = |v: Vec<f64>| -> f64 {
        let mut a = wide.clone();
        a[k] = Array::from_vec(v, &shape).unwrap();
        let out = j
            .call(&a)
            .unwrap_or_else(|e| panic!("reference loss evaluation in f64: {e}"));
        assert_eq!(
            out[0].dtype(),
            DType::F64,
            "the loss must be computed in f64 from f64 arguments (does it cast to f32?)"
        );
        vals64(&out[0])[0]
    };
    (0..base.len())
        .map(|i| {
            let mut p = base.clone();
            let mut m = base.clone();
            p[i] += EPS;
            m[i] -= EPS;
            let h = p[i] - m[i];
            (eval(p) - eval(m)) / h
        })
        .collect()
}

/// An f32 gradient against f64 central differences, within [`FD`].
pub fn assert_fd(got: &HostArray, fd: &[f64], context: &str) {
    assert_eq!(got.dtype(), DType::F32, "{context}: the gradient is f32");
    let wide = HostArray::from_vec(got.to_f64(), &got.shape).unwrap();
    let want =
        HostArray::from_vec(fd.to_vec(), &got.shape).unwrap_or_else(|e| panic!("{context}: {e}"));
    assert_close(&wide, &want, FD, context);
}
