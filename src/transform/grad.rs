//! Reverse-mode differentiation: [`grad`], [`value_and_grad`] and [`vjp`] (JAX's), and
//! [`stop_gradient`].
//!
//! The function is traced on its arguments' shapes, then evaluated forward by re-emitting every
//! equation through ordinary tensor operations (keeping each intermediate value), and the
//! cotangents flow backward through each primitive's VJP rule (`Prim::vjp`, declared next to each
//! primitive family in `src/ops/`). Because the backward pass is made of ordinary primitives, it is
//! staged into any enclosing `jit`, `pmap` or `vmap` trace, and can be differentiated again
//! (`grad(grad(f))`, Hessian-vector products).
//!
//! This module holds the user-facing builders; linearizing and pulling back are the reverse-mode
//! interpreter in `crate::transform::ad`, which the VJP rules of higher-order primitives call too.

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::exec::CompileCache;
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Graph};
use crate::transform::ad::{Linearized, linearize};

/// A function differentiated by [`grad`] or [`value_and_grad`].
///
/// On native platforms a `Grad` is `Send + Sync` when its function is: one differentiated function
/// may be applied or called from several threads at once (its compiled programs are cached like
/// [`crate::Jit`]'s, behind a lock held only to look up and insert).
pub struct Grad<F> {
    f: F,
    label: String,
    argnums: Vec<usize>,
    has_aux: bool,
    with_value: bool,
    device: Option<crate::Device>,
    compiled: CompileCache,
}

/// The gradient of a scalar function (JAX's `jax.grad`): `grad(f).apply(args)` returns
/// `d f(args)[0] / d args[i]` for each `i` in `argnums` (default `[0]`). With `has_aux`, `f`'s other
/// outputs are auxiliary values returned after the gradients.
///
/// ```
/// use brigade::{grad, Array, Tensor};
/// // d/dx sum(x^2 + 3x) = 2x + 3
/// let df = grad(|a: &[Tensor]| vec![(&a[0] * &a[0] + &a[0] * 3.0).sum_all()]);
/// let x = Array::from_vec(vec![1.0f32, -2.0, 0.5], &[3])?;
/// assert_eq!(df.call(&[x])?[0].to_vec::<f32>()?, vec![5.0, -1.0, 4.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn grad<F>(f: F) -> Grad<F>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    Grad {
        f,
        label: "grad".into(),
        argnums: vec![0],
        has_aux: false,
        with_value: false,
        device: None,
        compiled: CompileCache::new(),
    }
}

/// Like [`grad`], returning the function's value first (JAX's `jax.value_and_grad`):
/// `[value, grads..., aux...]`.
pub fn value_and_grad<F>(f: F) -> Grad<F>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let mut g = grad(f);
    g.with_value = true;
    g.label = "value_and_grad".into();
    g
}

impl<F> Grad<F>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    /// Differentiate with respect to these arguments (default `[0]`).
    pub fn argnums(mut self, nums: &[usize]) -> Self {
        self.argnums = nums.to_vec();
        self
    }
    /// `f` returns `[loss, aux...]`: the aux outputs are passed through, not differentiated.
    pub fn has_aux(mut self, yes: bool) -> Self {
        self.has_aux = yes;
        self
    }
    /// Name used in messages and kernel labels.
    pub fn named(mut self, label: &str) -> Self {
        self.label = label.to_string();
        self
    }
    /// Run [`Grad::call`] on this device.
    pub fn on(mut self, device: &crate::Device) -> Self {
        self.device = Some(device.clone());
        self
    }

    /// Apply to tensors (composable inside `jit`, `pmap`, `vmap`, `grad`). Returns
    /// `[value (value_and_grad only), one gradient per argnum, aux...]`; errors come back as a
    /// failed tensor and fail the enclosing trace.
    pub fn apply(&self, args: &[Tensor]) -> Vec<Tensor> {
        match self.apply_inner(args) {
            Ok(v) => v,
            Err(e) => vec![Tensor::failed_here(e)],
        }
    }

    /// Call on arrays: forward and backward are compiled as one program per signature.
    pub fn call(&self, args: &[Array]) -> Result<Vec<Array>> {
        self.compiled.call(
            &self.label,
            &|ts| self.apply(ts),
            self.device.as_ref(),
            args,
        )
    }

    /// Number of argument signatures whose compiled programs [`Self::call`] holds (at most the
    /// [`crate::Device::program_cache_capacity`] of the device it last compiled for).
    pub fn programs_cached(&self) -> usize {
        self.compiled.len()
    }

    /// The compiled program for these arguments (what [`Self::call`] runs).
    pub fn graph(&self, args: &[Array]) -> Result<Graph> {
        Ok(self
            .compiled
            .executable(&self.label, &|ts| self.apply(ts), args, None)?
            .graph
            .clone())
    }

    fn apply_inner(&self, args: &[Tensor]) -> Result<Vec<Tensor>> {
        let op = if self.with_value {
            "value_and_grad"
        } else {
            "grad"
        };
        for &k in &self.argnums {
            let Some(a) = args.get(k) else {
                return Err(Error::NotDifferentiable {
                    op,
                    detail: format!(
                        "argnums names argument {k} but only {} arguments were given",
                        args.len()
                    ),
                });
            };
            if a.dtype() != DType::F32 {
                return Err(Error::NotDifferentiable {
                    op,
                    detail: format!(
                        "argument {k} is {} {:?}: gradients are taken with respect to f32 arguments; cast it, or leave it out of argnums",
                        a.dtype(),
                        a.shape()
                    ),
                });
            }
        }
        let lin = linearize(&self.label, &self.f, args)?;
        let outs = lin.outputs();
        let Some(loss) = outs.first() else {
            return Err(Error::NotDifferentiable {
                op,
                detail: "the function returned no output".into(),
            });
        };
        if !self.has_aux && outs.len() > 1 {
            return Err(Error::NotDifferentiable {
                op,
                detail: format!(
                    "the function returned {} outputs; grad needs one scalar (use has_aux(true) to pass the others through)",
                    outs.len()
                ),
            });
        }
        if loss.dtype() != DType::F32 || !loss.shape().is_empty() {
            return Err(Error::NotDifferentiable {
                op,
                detail: format!(
                    "grad needs a scalar f32 output, got {} {:?}: reduce it first (sum, mean), or use vjp for non-scalar outputs",
                    loss.dtype(),
                    loss.shape()
                ),
            });
        }
        let mut cts = vec![None; outs.len()];
        cts[0] = Some(Tensor::full(1.0f32, &[]));
        let in_cts = lin.backward(&cts);
        let mut result = Vec::new();
        if self.with_value {
            result.push(loss.clone());
        }
        for &k in &self.argnums {
            result.push(
                in_cts[k]
                    .clone()
                    .unwrap_or_else(|| Tensor::zeros(args[k].shape(), DType::F32)),
            );
        }
        result.extend(outs.into_iter().skip(1));
        Ok(result)
    }
}

/// `x`, as a constant to differentiation (JAX's `jax.lax.stop_gradient`): the value passes
/// unchanged (bit for bit), but no cotangent flows back through it, so `grad` treats it as a
/// constant. Integer and bool tensors carry no gradient anyway and are returned as they are.
///
/// ```
/// use brigade::{grad, stop_gradient, Array, Tensor};
/// // d/dx sum(x * stop_gradient(x)) = stop_gradient(x) = x, where sum(x * x) would give 2x.
/// let df = grad(|a: &[Tensor]| vec![(&a[0] * &stop_gradient(&a[0])).sum_all()]);
/// let x = Array::from_vec(vec![1.0f32, -2.0, 0.5], &[3])?;
/// assert_eq!(df.call(&[x])?[0].to_vec::<f32>()?, vec![1.0, -2.0, 0.5]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn stop_gradient(x: &Tensor) -> Tensor {
    if x.dtype().is_float() {
        crate::ops::ad_util::stop_gradient(x)
    } else {
        x.clone()
    }
}

/// The pullback of [`vjp`]: maps cotangents of the outputs to cotangents of the inputs.
pub struct Vjp {
    lin: Linearized,
    inputs: Vec<Aval>,
}

/// Evaluate `f` at `primals` and return its outputs with the pullback (JAX's `jax.vjp`).
///
/// ```
/// use brigade::{vjp, Tensor};
/// let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]);
/// let (y, pullback) = vjp(|a: &[Tensor]| vec![&a[0] * &a[0]], &[x])?;
/// let ct = Tensor::from_vec(vec![1.0f32, 10.0], &[2]);
/// let dx = pullback.apply(&[ct])?;
/// assert_eq!(dx[0].to_array()?.to_vec::<f32>()?, vec![2.0, 40.0]);
/// assert_eq!(y[0].to_array()?.to_vec::<f32>()?, vec![1.0, 4.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn vjp<F>(f: F, primals: &[Tensor]) -> Result<(Vec<Tensor>, Vjp)>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let lin = linearize("vjp", &f, primals)?;
    let outs = lin.outputs();
    let inputs = primals
        .iter()
        .map(|t| Aval::new(t.shape().to_vec(), t.dtype()))
        .collect();
    Ok((outs, Vjp { lin, inputs }))
}

impl Vjp {
    /// Cotangents of the inputs (zeros where none flows; integer inputs get zeros too) given one
    /// cotangent per output, each shaped like its output.
    pub fn apply(&self, cts: &[Tensor]) -> Result<Vec<Tensor>> {
        let outs = self.lin.outputs();
        if cts.len() != outs.len() {
            return Err(Error::Arity {
                what: "vjp cotangents".into(),
                expected: outs.len(),
                got: cts.len(),
            });
        }
        for (i, (c, o)) in cts.iter().zip(&outs).enumerate() {
            if c.shape() != o.shape() || c.dtype() != o.dtype() {
                return Err(Error::NotDifferentiable {
                    op: "vjp",
                    detail: format!(
                        "cotangent {i} is {} {:?} but output {i} is {} {:?}: give one cotangent per output, shaped like it",
                        c.dtype(),
                        c.shape(),
                        o.dtype(),
                        o.shape()
                    ),
                });
            }
        }
        let cts: Vec<Option<Tensor>> = cts.iter().cloned().map(Some).collect();
        let got = self.lin.backward(&cts);
        Ok(self
            .inputs
            .iter()
            .zip(got)
            .map(|(a, c)| c.unwrap_or_else(|| Tensor::zeros(&a.shape, a.dtype)))
            .collect())
    }
}
