//! `dot_general`: contraction over paired axes with batch axes, the primitive behind `matmul`.
//!
//! Output axes are: batch axes, then the free axes of lhs, then the free axes of rhs (as in XLA).
//! The device lowering transposes/reshapes operands into (batch, m, k) × (batch, k, n) and runs the
//! matmul kernel family of `src/ops/matmul/kernel.rs` (member measured per adapter, `device/tune.rs`).

pub(crate) mod kernel;

use std::fmt;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::host::{HostArray, HostData, strides, unravel};
use crate::ops::rules::{Emitted, Lowering, Rules, single_batch, single_vjp};
use crate::ops::{BatchCtx, Batched, Cotangents};
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Var};
use crate::wgsl::Emitter;

/// Dimension numbers of a `dot_general`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DotDims {
    pub lhs_contract: Vec<usize>,
    pub rhs_contract: Vec<usize>,
    pub lhs_batch: Vec<usize>,
    pub rhs_batch: Vec<usize>,
}

impl DotDims {
    pub fn lhs_free(&self, rank: usize) -> Vec<usize> {
        (0..rank)
            .filter(|i| !self.lhs_contract.contains(i) && !self.lhs_batch.contains(i))
            .collect()
    }
    pub fn rhs_free(&self, rank: usize) -> Vec<usize> {
        (0..rank)
            .filter(|i| !self.rhs_contract.contains(i) && !self.rhs_batch.contains(i))
            .collect()
    }
}

/// Shape and dtype rule.
pub fn dot_shape(
    lhs: &[usize],
    rhs: &[usize],
    dims: &DotDims,
    lt: DType,
    rt: DType,
) -> Result<Vec<usize>> {
    let err = |detail: String| {
        Err(Error::MatmulShape {
            op: "dot_general",
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
            detail,
        })
    };
    if lt != rt {
        return Err(Error::DTypeMismatch {
            op: "dot_general",
            lhs: lt,
            rhs: rt,
            shapes: vec![],
        });
    }
    if lt == DType::Bool {
        return Err(Error::BadDType {
            op: "dot_general",
            dtype: lt,
            hint: "cast to f32 or i32 first",
            shapes: vec![],
        });
    }
    if dims.lhs_contract.len() != dims.rhs_contract.len()
        || dims.lhs_batch.len() != dims.rhs_batch.len()
    {
        return err("contracting and batch axis lists must pair up".into());
    }
    let all_l: Vec<usize> = dims
        .lhs_contract
        .iter()
        .chain(&dims.lhs_batch)
        .copied()
        .collect();
    let all_r: Vec<usize> = dims
        .rhs_contract
        .iter()
        .chain(&dims.rhs_batch)
        .copied()
        .collect();
    for (all, rank, side) in [(&all_l, lhs.len(), "lhs"), (&all_r, rhs.len(), "rhs")] {
        let mut s = all.clone();
        s.sort_unstable();
        s.dedup();
        if s.len() != all.len() || s.iter().any(|&a| a >= rank) {
            return err(format!(
                "{side} axes {all:?} must be distinct and below rank {rank}"
            ));
        }
    }
    for (&a, &b) in dims.lhs_contract.iter().zip(&dims.rhs_contract) {
        if lhs[a] != rhs[b] {
            return err(format!(
                "contracted lhs axis {a} has size {} but rhs axis {b} has {}",
                lhs[a], rhs[b]
            ));
        }
    }
    for (&a, &b) in dims.lhs_batch.iter().zip(&dims.rhs_batch) {
        if lhs[a] != rhs[b] {
            return err(format!(
                "batch lhs axis {a} has size {} but rhs axis {b} has {}",
                lhs[a], rhs[b]
            ));
        }
    }
    let mut out: Vec<usize> = dims.lhs_batch.iter().map(|&a| lhs[a]).collect();
    out.extend(dims.lhs_free(lhs.len()).iter().map(|&a| lhs[a]));
    out.extend(dims.rhs_free(rhs.len()).iter().map(|&a| rhs[a]));
    Ok(out)
}

/// CPU reference (f64 accumulation for floats, wrapping for integers).
pub(crate) fn dot_cpu(
    l: &HostArray,
    r: &HostArray,
    dims: &DotDims,
    out_shape: &[usize],
) -> HostArray {
    let (lf, rf) = (dims.lhs_free(l.shape.len()), dims.rhs_free(r.shape.len()));
    let (ls, rs) = (strides(&l.shape), strides(&r.shape));
    let kshape: Vec<usize> = dims.lhs_contract.iter().map(|&a| l.shape[a]).collect();
    let nk: usize = kshape.iter().product();
    let nb = dims.lhs_batch.len();
    let n: usize = out_shape.iter().product();
    let dt = l.dtype();
    let mut fv = Vec::new();
    let mut iv: Vec<u32> = Vec::new();
    for o in 0..n {
        let oi = unravel(o, out_shape);
        let mut lbase = 0;
        let mut rbase = 0;
        for j in 0..nb {
            lbase += ls[dims.lhs_batch[j]] * oi[j];
            rbase += rs[dims.rhs_batch[j]] * oi[j];
        }
        for (j, &a) in lf.iter().enumerate() {
            lbase += ls[a] * oi[nb + j];
        }
        for (j, &a) in rf.iter().enumerate() {
            rbase += rs[a] * oi[nb + lf.len() + j];
        }
        let mut accf = 0f64;
        let mut acci = 0u32;
        for k in 0..nk {
            let ki = unravel(k, &kshape);
            let lo = lbase
                + dims
                    .lhs_contract
                    .iter()
                    .zip(&ki)
                    .map(|(&a, &i)| ls[a] * i)
                    .sum::<usize>();
            let ro = rbase
                + dims
                    .rhs_contract
                    .iter()
                    .zip(&ki)
                    .map(|(&a, &i)| rs[a] * i)
                    .sum::<usize>();
            if dt.is_float() {
                accf += l.data.get_f64(lo) * r.data.get_f64(ro);
            } else {
                acci = acci.wrapping_add(
                    l.data
                        .get(lo)
                        .to_bits()
                        .wrapping_mul(r.data.get(ro).to_bits()),
                );
            }
        }
        if dt.is_float() {
            fv.push(accf);
        } else {
            iv.push(acci);
        }
    }
    let data = match dt {
        DType::F32 => HostData::F32(fv.into_iter().map(|v| v as f32).collect()),
        DType::F64 => HostData::F64(fv),
        DType::I32 => HostData::I32(iv.into_iter().map(|v| v as i32).collect()),
        _ => HostData::U32(iv),
    };
    HostArray {
        shape: out_shape.to_vec(),
        data,
    }
}

// ---- batching rule ------------------------------------------------------------------------------

/// `dot_general` batches as one more batch axis when both operands are batched; when only one is,
/// its batch axis is a free axis of that operand, moved to the front of the result afterwards
/// (results are ordered batch axes, lhs free axes, rhs free axes).
fn batch(d: &DotDims, ins: &[super::Batched], _ctx: &super::BatchCtx<'_>) -> super::Batched {
    use crate::tensor::Tensor;
    let ((l, lb), (r, rb)) = (&ins[0], &ins[1]);
    let up =
        |v: &[usize], by: bool| -> Vec<usize> { v.iter().map(|a| a + usize::from(by)).collect() };
    let mut dims = DotDims {
        lhs_contract: up(&d.lhs_contract, *lb),
        rhs_contract: up(&d.rhs_contract, *rb),
        lhs_batch: up(&d.lhs_batch, *lb),
        rhs_batch: up(&d.rhs_batch, *rb),
    };
    if *lb && *rb {
        dims.lhs_batch.insert(0, 0);
        dims.rhs_batch.insert(0, 0);
        return (Tensor::apply(super::Prim::DotGeneral(dims), &[l, r]), true);
    }
    let out = Tensor::apply(super::Prim::DotGeneral(dims.clone()), &[l, r]);
    let nb = dims.lhs_batch.len();
    // Where the batch axis landed: the first lhs free axis, or the first rhs free axis.
    let at = if *lb {
        nb
    } else {
        nb + dims.lhs_free(l.ndim()).len()
    };
    (super::move_axis(&out, at, 0), true)
}

// ---- VJP rule -----------------------------------------------------------------------------------

/// `dot_general` transposes: the cotangent of each operand is a `dot_general` of the result's
/// cotangent with the other operand (contracting the other operand's free axes, batching the batch
/// axes), transposed back into the operand's axis order.
fn vjp(
    d: &DotDims,
    ins: &[crate::tensor::Tensor],
    ct: &crate::tensor::Tensor,
) -> super::Cotangents {
    use crate::tensor::Tensor;
    let (l, r) = (&ins[0], &ins[1]);
    if !l.dtype().is_float() {
        return vec![None, None];
    }
    let (lr, rr) = (l.ndim(), r.ndim());
    let (lf, rf) = (d.lhs_free(lr), d.rhs_free(rr));
    let nb = d.lhs_batch.len();
    let ct_batch: Vec<usize> = (0..nb).collect();
    let ct_lfree: Vec<usize> = (nb..nb + lf.len()).collect();
    let ct_rfree: Vec<usize> = (nb + lf.len()..nb + lf.len() + rf.len()).collect();
    // One side: contract ct's `other_free` axes with the other operand's free axes.
    let side = |other: &Tensor,
                other_batch: &[usize],
                other_free: &[usize],
                ct_other_free: &[usize],
                own_batch: &[usize],
                own_free: &[usize],
                own_contract: &[usize],
                other_contract: &[usize],
                own_rank: usize|
     -> Tensor {
        let g = ct.dot_general(
            other,
            DotDims {
                lhs_contract: ct_other_free.to_vec(),
                rhs_contract: other_free.to_vec(),
                lhs_batch: ct_batch.clone(),
                rhs_batch: other_batch.to_vec(),
            },
        );
        // g axes: batch, ct's axes of our free axes, then the other operand's remaining (contracted)
        // axes in increasing order: each pairs with one of our contracted axes.
        let mut remaining: Vec<usize> = other_contract.to_vec();
        remaining.sort_unstable();
        let mut order: Vec<usize> = own_batch.to_vec();
        order.extend_from_slice(own_free);
        for o in remaining {
            let k = other_contract.iter().position(|&c| c == o).unwrap_or(0);
            order.push(own_contract[k]);
        }
        let perm: Vec<usize> = (0..own_rank)
            .map(|a| order.iter().position(|&v| v == a).unwrap_or(a))
            .collect();
        g.transpose(&perm)
    };
    let gl = side(
        r,
        &d.rhs_batch,
        &rf,
        &ct_rfree,
        &d.lhs_batch,
        &lf,
        &d.lhs_contract,
        &d.rhs_contract,
        lr,
    );
    let gr = side(
        l,
        &d.lhs_batch,
        &lf,
        &ct_lfree,
        &d.rhs_batch,
        &rf,
        &d.rhs_contract,
        &d.lhs_contract,
        rr,
    );
    vec![Some(gl), Some(gr)]
}

// ---- the family -----------------------------------------------------------------------------------

/// `dot_general` is the family's one primitive; its dimension numbers are its parameters.
impl Rules for DotDims {
    fn name(&self) -> &'static str {
        "dot_general"
    }

    fn fmt_params(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[contract=({:?}, {:?}) batch=({:?}, {:?})]",
            self.lhs_contract, self.rhs_contract, self.lhs_batch, self.rhs_batch
        )
    }

    fn arity(&self) -> Option<usize> {
        Some(2)
    }

    fn result_count(&self) -> usize {
        1
    }

    fn infer(&self, ins: &[&Aval]) -> Result<Vec<Aval>> {
        Ok(vec![Aval::new(
            dot_shape(
                &ins[0].shape,
                &ins[1].shape,
                self,
                ins[0].dtype,
                ins[1].dtype,
            )?,
            ins[0].dtype,
        )])
    }

    fn eval_cpu(&self, ins: &[&HostArray], outs: &[Aval]) -> Result<Vec<HostArray>> {
        Ok(vec![dot_cpu(ins[0], ins[1], self, &outs[0].shape)])
    }

    fn lowering(&self) -> Lowering<'_> {
        Lowering::Matmul(self)
    }

    fn emit_wgsl(&self, _em: &mut Emitter<'_>, _ins: &[Var], _idx: &[String]) -> Option<Emitted> {
        // Matmuls have kernels of their own (`kernel`).
        None
    }

    fn batch(&self, ins: &[Batched], ctx: &BatchCtx<'_>) -> Result<Vec<Batched>> {
        single_batch(batch(self, ins, ctx))
    }

    fn vjp(&self, ins: &[Tensor], _outs: &[Tensor], cts: &[Option<Tensor>]) -> Result<Cotangents> {
        single_vjp(ins, cts, |ct| vjp(self, ins, ct))
    }

    fn has_effect(&self) -> bool {
        false
    }
}
