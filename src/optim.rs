//! Optimizers as plain functions over parameter collections (like optax): `init` makes the state,
//! `update` maps `(params, grads, state)` to `(params, state)`. Parameters, gradients and state are
//! ordinary tensors, so an update runs eagerly or inside `jit` / `pmap` (the whole training step as
//! one compiled program), and the state flattens to arrays for passing between calls.
//!
//! ```
//! use brigade::optim::Adam;
//! use brigade::{grad, Tensor};
//! // Minimize (w - 3)^2 with Adam.
//! let loss = grad(|a: &[Tensor]| vec![(&a[0] - 3.0).square().sum_all()]);
//! let opt = Adam::new(0.1);
//! let mut params = vec![Tensor::from_vec(vec![0.0f32], &[1])];
//! let mut state = opt.init(&params);
//! for _ in 0..300 {
//!     let g = loss.apply(&params);
//!     (params, state) = opt.update(&params, &g, &state);
//! }
//! let w = params[0].to_array()?.to_vec::<f32>()?[0];
//! assert!((w - 3.0).abs() < 1e-2, "{w}");
//! # Ok::<(), brigade::Error>(())
//! ```

use crate::dtype::DType;
use crate::tensor::Tensor;

/// Stochastic gradient descent, optionally with (heavy-ball) momentum:
/// `v = momentum · v + g; p = p - lr · v` (without momentum: `p = p - lr · g`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sgd {
    /// The learning rate.
    pub lr: f32,
    /// The momentum coefficient (0 for plain SGD).
    pub momentum: f32,
}

/// The state of [`Sgd`]: one velocity per parameter (empty without momentum).
#[derive(Clone)]
pub struct SgdState {
    /// One velocity per parameter, of its shape.
    pub velocity: Vec<Tensor>,
}

impl Sgd {
    /// Plain SGD with learning rate `lr`.
    pub fn new(lr: f32) -> Sgd {
        Sgd { lr, momentum: 0.0 }
    }
    /// SGD with momentum.
    pub fn with_momentum(lr: f32, momentum: f32) -> Sgd {
        Sgd { lr, momentum }
    }
    /// The state for `params`: zero velocities of their shapes.
    pub fn init(&self, params: &[Tensor]) -> SgdState {
        SgdState {
            velocity: if self.momentum == 0.0 {
                Vec::new()
            } else {
                params.iter().map(zeros_like).collect()
            },
        }
    }
    /// One step: new parameters and state.
    pub fn update(
        &self,
        params: &[Tensor],
        grads: &[Tensor],
        state: &SgdState,
    ) -> (Vec<Tensor>, SgdState) {
        if self.momentum == 0.0 {
            let p = params
                .iter()
                .zip(grads)
                .map(|(p, g)| p - &(g * self.lr))
                .collect();
            return (p, state.clone());
        }
        let v: Vec<Tensor> = state
            .velocity
            .iter()
            .zip(grads)
            .map(|(v, g)| &(v * self.momentum) + g)
            .collect();
        let p = params
            .iter()
            .zip(&v)
            .map(|(p, v)| p - &(v * self.lr))
            .collect();
        (p, SgdState { velocity: v })
    }
}

/// Adam (Kingma & Ba), as optax's `adam`: `m = b1·m + (1-b1)·g`, `v = b2·v + (1-b2)·g²`,
/// `p = p - lr · m̂ / (√v̂ + eps)` with the bias corrections `m̂ = m / (1 - b1^t)`,
/// `v̂ = v / (1 - b2^t)` at step `t` (counted from 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Adam {
    /// The learning rate.
    pub lr: f32,
    /// The decay of the first-moment estimate.
    pub b1: f32,
    /// The decay of the second-moment estimate.
    pub b2: f32,
    /// Added to the square root of the second moment, for stability.
    pub eps: f32,
}

/// The state of [`Adam`]: first and second moments per parameter, the step count, and `b1^t`,
/// `b2^t` (f32 scalar tensors, so that the state can live on a device inside a compiled step).
///
/// The powers are running products rather than `pow(b, t)`: multiplication rounds the same on
/// every adapter while `pow` implementations differ by an ulp, which `1 - b2^t` amplifies a
/// thousandfold — replicas of a data-parallel step on different adapters must stay bit-identical.
#[derive(Clone)]
pub struct AdamState {
    /// First-moment estimates, one per parameter.
    pub m: Vec<Tensor>,
    /// Second-moment estimates, one per parameter.
    pub v: Vec<Tensor>,
    /// The number of updates taken (an f32 scalar).
    pub step: Tensor,
    /// `b1` to the power of the step count.
    pub b1_pow: Tensor,
    /// `b2` to the power of the step count.
    pub b2_pow: Tensor,
}

impl AdamState {
    /// All state tensors in one list: `m..., v..., step, b1_pow, b2_pow` (to pass through `jit`).
    pub fn to_vec(&self) -> Vec<Tensor> {
        let mut out = self.m.clone();
        out.extend(self.v.iter().cloned());
        out.push(self.step.clone());
        out.push(self.b1_pow.clone());
        out.push(self.b2_pow.clone());
        out
    }
    /// The inverse of [`AdamState::to_vec`] for `n` parameters; None if the length is not `2n + 3`.
    pub fn from_slice(ts: &[Tensor], n: usize) -> Option<AdamState> {
        (ts.len() == 2 * n + 3).then(|| AdamState {
            m: ts[..n].to_vec(),
            v: ts[n..2 * n].to_vec(),
            step: ts[2 * n].clone(),
            b1_pow: ts[2 * n + 1].clone(),
            b2_pow: ts[2 * n + 2].clone(),
        })
    }
}

impl Adam {
    /// Adam with learning rate `lr` and the usual defaults `b1 = 0.9`, `b2 = 0.999`, `eps = 1e-8`.
    pub fn new(lr: f32) -> Adam {
        Adam {
            lr,
            b1: 0.9,
            b2: 0.999,
            eps: 1e-8,
        }
    }
    /// The state for `params`: zero moments of their shapes, step 0.
    pub fn init(&self, params: &[Tensor]) -> AdamState {
        AdamState {
            m: params.iter().map(zeros_like).collect(),
            v: params.iter().map(zeros_like).collect(),
            step: Tensor::full(0.0f32, &[]),
            b1_pow: Tensor::full(1.0f32, &[]),
            b2_pow: Tensor::full(1.0f32, &[]),
        }
    }
    /// One step: new parameters and state.
    pub fn update(
        &self,
        params: &[Tensor],
        grads: &[Tensor],
        state: &AdamState,
    ) -> (Vec<Tensor>, AdamState) {
        let t = &state.step + 1.0;
        let b1_pow = &state.b1_pow * self.b1;
        let b2_pow = &state.b2_pow * self.b2;
        let c1 = 1.0 - &b1_pow;
        let c2 = 1.0 - &b2_pow;
        let mut m = Vec::with_capacity(params.len());
        let mut v = Vec::with_capacity(params.len());
        let mut p = Vec::with_capacity(params.len());
        for ((x, g), (m0, v0)) in params.iter().zip(grads).zip(state.m.iter().zip(&state.v)) {
            let m1 = &(m0 * self.b1) + &(g * (1.0 - self.b1));
            let v1 = &(v0 * self.b2) + &(&(g * g) * (1.0 - self.b2));
            let m_hat = &m1 / &c1.broadcast_to(m1.shape());
            let v_hat = &v1 / &c2.broadcast_to(v1.shape());
            let step = &(&m_hat * self.lr) / &(&v_hat.sqrt() + self.eps);
            p.push(x - &step);
            m.push(m1);
            v.push(v1);
        }
        (
            p,
            AdamState {
                m,
                v,
                step: t,
                b1_pow,
                b2_pow,
            },
        )
    }
}

fn zeros_like(t: &Tensor) -> Tensor {
    Tensor::zeros(t.shape(), DType::F32)
}
