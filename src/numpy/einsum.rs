//! `jnp.einsum`, lowered to `dot_general`, transposes, reshapes, strided slices and sums.

use super::{Operand, first_error, promote_dtype};
use crate::dtype::DType;
use crate::error::Error;
use crate::ops::DotDims;
use crate::tensor::Tensor;

const OP: &str = "einsum";

/// An index of the subscripts: a letter's code point, or `ELLIPSIS + k` for the k-th axis of the
/// broadcast `...` (counted from the left of the widest ellipsis, so ellipses align on the right).
type Label = u32;
const ELLIPSIS: Label = 1 << 16;

fn label_name(l: Label) -> String {
    if l >= ELLIPSIS {
        format!("'...' axis {}", l - ELLIPSIS)
    } else {
        format!("'{}'", char::from_u32(l).unwrap_or('?'))
    }
}

/// One term of the subscripts: letters and at most one ellipsis.
enum Item {
    Letter(Label),
    Ellipsis,
}

fn parse_term(term: &str) -> Result<Vec<Item>, String> {
    let cs: Vec<char> = term.chars().collect();
    let mut items = Vec::new();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        if c == '.' {
            let dots = cs.get(i + 1) == Some(&'.') && cs.get(i + 2) == Some(&'.');
            if !dots || items.iter().any(|it| matches!(it, Item::Ellipsis)) {
                return Err(format!(
                    "term {term:?}: '.' must be part of one '...' (at most one per term)"
                ));
            }
            items.push(Item::Ellipsis);
            i += 3;
            continue;
        }
        if !c.is_ascii_alphabetic() {
            return Err(format!(
                "term {term:?}: {c:?} is not an index; indices are the letters a-z and A-Z, ',' separates operands, '->' comes before the output and '...' stands for broadcast axes"
            ));
        }
        items.push(Item::Letter(c as Label));
        i += 1;
    }
    Ok(items)
}

/// The parsed subscripts: each operand's index per axis, the output's indices, and the size of
/// every index (after broadcasting size 1 against larger sizes).
struct Spec {
    inputs: Vec<Vec<Label>>,
    output: Vec<Label>,
    sizes: Vec<(Label, usize)>,
}

impl Spec {
    fn size(&self, l: Label) -> usize {
        self.sizes
            .iter()
            .find(|(m, _)| *m == l)
            .map(|&(_, s)| s)
            .unwrap_or(1)
    }
}

fn parse(subscripts: &str, shapes: &[Vec<usize>]) -> Result<Spec, String> {
    let s: String = subscripts.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, out) = match s.split_once("->") {
        Some((l, o)) if o.contains("->") => {
            return Err(format!(
                "'->' appears more than once (in {l:?}->{o:?}); there is one output"
            ));
        }
        Some((l, o)) => (l, Some(o)),
        None => (s.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    let parsed: Vec<Vec<Item>> = terms
        .iter()
        .map(|t| parse_term(t))
        .collect::<Result<_, _>>()?;
    if terms.len() != shapes.len() {
        return Err(format!(
            "{} operand terms but {} operands were given",
            terms.len(),
            shapes.len()
        ));
    }
    // How many axes each operand's ellipsis covers, and the widest.
    let mut n_ell = Vec::with_capacity(shapes.len());
    for (k, (items, shape)) in parsed.iter().zip(shapes).enumerate() {
        let letters = items
            .iter()
            .filter(|it| matches!(it, Item::Letter(_)))
            .count();
        let has_ell = letters < items.len();
        let rank = shape.len();
        if (has_ell && rank < letters) || (!has_ell && rank != letters) {
            return Err(format!(
                "operand {k} has rank {rank} (shape {shape:?}) but its term {:?} names {letters} axes{}",
                terms[k],
                if has_ell { " plus '...'" } else { "" }
            ));
        }
        n_ell.push(rank - letters);
    }
    let width = n_ell.iter().copied().max().unwrap_or(0);
    let mut inputs = Vec::with_capacity(shapes.len());
    for (items, &ne) in parsed.iter().zip(&n_ell) {
        let mut labels = Vec::new();
        for it in items {
            match it {
                Item::Letter(l) => labels.push(*l),
                Item::Ellipsis => {
                    labels.extend((width - ne..width).map(|k| ELLIPSIS + k as Label));
                }
            }
        }
        inputs.push(labels);
    }
    // Sizes: equal, or 1 broadcast against the other (as jnp.einsum allows).
    let mut sizes: Vec<(Label, usize, usize)> = Vec::new(); // (label, size, operand it came from)
    for (k, (labels, shape)) in inputs.iter().zip(shapes).enumerate() {
        for (&l, &d) in labels.iter().zip(shape) {
            match sizes.iter_mut().find(|(m, _, _)| *m == l) {
                None => sizes.push((l, d, k)),
                Some(e) if e.1 == d || d == 1 => {}
                Some(e) if e.1 == 1 => *e = (l, d, k),
                Some(e) => {
                    return Err(format!(
                        "index {} has size {} in operand {} but size {d} in operand {k} (sizes must be equal, or 1 to broadcast)",
                        label_name(l),
                        e.1,
                        e.2
                    ));
                }
            }
        }
    }
    let output = match out {
        Some(o) => {
            let mut labels = Vec::new();
            for it in parse_term(o)? {
                match it {
                    Item::Ellipsis => labels.extend((0..width).map(|k| ELLIPSIS + k as Label)),
                    Item::Letter(l) => {
                        if labels.contains(&l) {
                            return Err(format!(
                                "output index {} appears more than once in {o:?}",
                                label_name(l)
                            ));
                        }
                        if !inputs.iter().any(|ls| ls.contains(&l)) {
                            return Err(format!(
                                "output index {} does not appear in any operand's term",
                                label_name(l)
                            ));
                        }
                        labels.push(l);
                    }
                }
            }
            labels
        }
        None => {
            // numpy's implicit output: the broadcast axes, then the letters used exactly once,
            // in code-point order (uppercase before lowercase).
            let mut labels: Vec<Label> = (0..width).map(|k| ELLIPSIS + k as Label).collect();
            let mut once: Vec<Label> = Vec::new();
            for l in inputs.iter().flatten().filter(|&&l| l < ELLIPSIS) {
                let count = inputs.iter().flatten().filter(|&&m| m == *l).count();
                if count == 1 {
                    once.push(*l);
                }
            }
            once.sort_unstable();
            labels.extend(once);
            labels
        }
    };
    Ok(Spec {
        inputs,
        output,
        sizes: sizes.into_iter().map(|(l, d, _)| (l, d)).collect(),
    })
}

/// An operand on its way through the contraction: the tensor and the index of each of its axes.
struct Term {
    t: Tensor,
    labels: Vec<Label>,
}

impl Term {
    /// Drop the axes of size 1 whose index is larger elsewhere: broadcasting them is the same as
    /// the operand not having the index at all.
    fn squeeze_broadcast(self, spec: &Spec) -> Term {
        let shape = self.t.shape().to_vec();
        let keep: Vec<usize> = (0..shape.len())
            .filter(|&i| !(shape[i] == 1 && spec.size(self.labels[i]) != 1))
            .collect();
        if keep.len() == shape.len() {
            return self;
        }
        let new_shape: Vec<i64> = keep.iter().map(|&i| shape[i] as i64).collect();
        Term {
            t: self.t.reshape(&new_shape),
            labels: keep.iter().map(|&i| self.labels[i]).collect(),
        }
    }
    /// Take the diagonal of every index repeated within this operand (`ii->i`): move the two axes
    /// last, merge them, and keep every `(n + 1)`-th element with a strided slice.
    fn diagonals(mut self) -> Term {
        loop {
            let rep = (0..self.labels.len()).find_map(|p| {
                (p + 1..self.labels.len())
                    .find(|&q| self.labels[q] == self.labels[p])
                    .map(|q| (p, q))
            });
            let Some((p, q)) = rep else {
                return self;
            };
            let shape = self.t.shape().to_vec();
            let n = shape[p];
            let others: Vec<usize> = (0..shape.len()).filter(|&i| i != p && i != q).collect();
            let mut perm = others.clone();
            perm.extend([p, q]);
            let mut merged: Vec<i64> = others.iter().map(|&i| shape[i] as i64).collect();
            merged.push((n * n) as i64);
            let moved = if perm.iter().enumerate().all(|(i, &k)| i == k) {
                self.t.clone()
            } else {
                self.t.transpose(&perm)
            };
            let flat = moved.reshape(&merged);
            let r = merged.len();
            let start = vec![0; r];
            let mut limit: Vec<usize> = merged.iter().map(|&d| d as usize).collect();
            let mut stride = vec![1; r];
            limit[r - 1] = n * n;
            // Element (k, k) of an n x n block sits at k * (n + 1).
            stride[r - 1] = n + 1;
            let diag = flat.slice(&start, &limit, Some(&stride));
            let label = self.labels[p];
            self.labels = others.iter().map(|&i| self.labels[i]).collect();
            self.labels.push(label);
            self.t = diag;
        }
    }
    /// Sum out the indices that `keep` rejects.
    fn sum_unless(self, keep: impl Fn(Label) -> bool) -> Term {
        let axes: Vec<i64> = (0..self.labels.len())
            .filter(|&i| !keep(self.labels[i]))
            .map(|i| i as i64)
            .collect();
        if axes.is_empty() {
            return self;
        }
        Term {
            t: self.t.sum(axes.clone(), false),
            labels: self
                .labels
                .iter()
                .enumerate()
                .filter(|(i, _)| !axes.contains(&(*i as i64)))
                .map(|(_, &l)| l)
                .collect(),
        }
    }
    /// This term's axes permuted into the order of `order` (which holds exactly its labels).
    fn transpose_to(self, order: &[Label]) -> Term {
        let perm: Vec<usize> = order
            .iter()
            .map(|l| {
                self.labels
                    .iter()
                    .position(|m| m == l)
                    .expect("label present")
            })
            .collect();
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return self;
        }
        Term {
            t: self.t.transpose(&perm),
            labels: order.to_vec(),
        }
    }
}

/// Contract `a` with `b`, keeping the indices in `later` (needed by the output or a later operand).
/// Shared indices that are kept become `dot_general` batch axes, the others are contracted; with
/// nothing to contract the product is an elementwise multiply with broadcasting (an outer product
/// or a Hadamard product), which fuses with its neighbours instead of running a matmul kernel.
fn contract(a: Term, b: Term, later: &[Label]) -> Term {
    // Indices of one side that neither the other side nor anything later needs: sum them first.
    let a = a.sum_unless(|l| b.labels.contains(&l) || later.contains(&l));
    let b = b.sum_unless(|l| a.labels.contains(&l) || later.contains(&l));
    let shared: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| b.labels.contains(l))
        .collect();
    let (batch, contracted): (Vec<Label>, Vec<Label>) =
        shared.iter().partition(|l| later.contains(l));
    if contracted.is_empty() {
        // Result axes: a's, then b's own; each side reshaped to that rank with 1s, then multiplied.
        let mut labels = a.labels.clone();
        labels.extend(b.labels.iter().copied().filter(|l| !a.labels.contains(l)));
        let b_order: Vec<Label> = labels
            .iter()
            .copied()
            .filter(|l| b.labels.contains(l))
            .collect();
        let b = b.transpose_to(&b_order);
        let dims_of = |t: &Term| -> Vec<i64> {
            labels
                .iter()
                .map(|l| match t.labels.iter().position(|m| m == l) {
                    Some(i) => t.t.shape()[i] as i64,
                    None => 1,
                })
                .collect()
        };
        let (sa, sb) = (dims_of(&a), dims_of(&b));
        return Term {
            t: a.t.reshape(&sa).mul(&b.t.reshape(&sb)),
            labels,
        };
    }
    let pos = |t: &Term, ls: &[Label]| -> Vec<usize> {
        ls.iter()
            .map(|l| t.labels.iter().position(|m| m == l).expect("label present"))
            .collect()
    };
    let dims = DotDims {
        lhs_contract: pos(&a, &contracted),
        rhs_contract: pos(&b, &contracted),
        lhs_batch: pos(&a, &batch),
        rhs_batch: pos(&b, &batch),
    };
    let mut labels = batch.clone();
    labels.extend(a.labels.iter().copied().filter(|l| !shared.contains(l)));
    labels.extend(b.labels.iter().copied().filter(|l| !shared.contains(l)));
    Term {
        t: a.t.dot_general(&b.t, dims),
        labels,
    }
}

/// `jnp.einsum(subscripts, *operands)`: Einstein summation over any number of operands.
///
/// `subscripts` names each operand's axes with letters (`a-z`, `A-Z`), operands separated by
/// `,`, and optionally the output after `->` (`"ij,jk->ik"`). Without `->` the output is
/// numpy's implicit one: the `...` axes, then every letter that appears exactly once, in
/// code-point order (`"ij,jk"` is `"ij,jk->ik"`, `"ba"` is `"ba->ab"`, a transpose). An index
/// that does not reach the output is summed, whether it is shared (a contraction) or belongs
/// to one operand only (`"ij->i"`); an index repeated within one operand takes the diagonal
/// (`"ii->i"`, and `"ii"` is the trace); letters absent from both sides' other terms give outer
/// products (`"i,j->ij"`); `...` stands for broadcast axes, aligned on the right and
/// broadcast across operands like numpy's (summed if the output has no `...`). Sizes must agree
/// per index, except that a size of 1 broadcasts, as in `jnp.einsum`.
///
/// Operands promote to a common dtype with JAX's rules ([`result_type`](super::result_type));
/// bools are contracted in i32 and compared with zero (an "or of ands", as JAX's bool einsum).
///
/// **How it is computed.** Each operand first loses its broadcast size-1 axes, takes its
/// diagonals (a transpose, a reshape and a strided slice: no mask, no gather) and sums the
/// indices no other operand and not the output needs. Then the operands are contracted **left
/// to right**, pairwise: indices shared by the two and needed later become `dot_general` batch
/// axes, shared ones not needed later are contracted, and a pair with nothing to contract is an
/// elementwise product. Left to right is predictable and right for chains written in order
/// (`"ij,jk,kl->il"`); order the operands so that early pairs stay small (JAX searches for a
/// cheap order with opt_einsum, brigade does not). A last transpose gives the output order.
/// So `"bij,bjk->bik"` is one `dot_general` with a batch axis and nothing else, and `jit`,
/// `grad` and `vmap` work through these primitives.
///
/// Errors are [`Error::BadSubscripts`]: a character that is not an index, a stray `.` or second
/// `...`, two `->`, a number of terms different from the number of operands, a term naming more
/// or fewer axes than its operand's rank, an index whose sizes differ between operands (both
/// sizes named), an output index that no operand has, or one repeated in the output.
///
/// ```
/// use brigade::{Tensor, numpy as jnp};
/// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
/// let b = Tensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]);
/// let c = jnp::einsum("ij,jk->ik", &[&a, &b]);
/// assert_eq!(c.to_vec::<f32>()?, vec![4.0, 5.0, 10.0, 11.0]);
/// // Implicit output: "ij,jk" is "ij,jk->ik"; "ij->" sums everything; "ii" is the trace.
/// assert_eq!(jnp::einsum("ij,jk", &[&a, &b]).to_vec::<f32>()?, c.to_vec::<f32>()?);
/// assert_eq!(jnp::einsum("ij->", &[&a]).to_vec::<f32>()?, vec![21.0]);
/// assert_eq!(jnp::einsum("ii", &[&c]).to_vec::<f32>()?, vec![15.0]);
/// // Batched matmul over broadcast leading axes.
/// let x = Tensor::ones(&[4, 2, 3], brigade::DType::F32);
/// assert_eq!(jnp::einsum("...ij,jk->...ik", &[&x, &b]).shape(), &[4, 2, 2]);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn einsum(subscripts: &str, operands: &[&Tensor]) -> Tensor {
    if let Some(f) = first_error(operands) {
        return f;
    }
    let fail = |detail: String| {
        let e = Error::BadSubscripts {
            op: OP,
            subscripts: subscripts.to_string(),
            shapes: operands.iter().map(|t| t.shape().to_vec()).collect(),
            detail,
        };
        match operands.first() {
            Some(t) => t.fail_with(e),
            None => Tensor::failed_here(e),
        }
    };
    let shapes: Vec<Vec<usize>> = operands.iter().map(|t| t.shape().to_vec()).collect();
    let spec = match parse(subscripts, &shapes) {
        Ok(s) => s,
        Err(detail) => return fail(detail),
    };
    if operands.is_empty() {
        return fail("einsum needs at least one operand".into());
    }
    let ops: Vec<Operand> = operands.iter().map(|t| Operand::Tensor(t)).collect();
    let dt = promote_dtype(&ops);
    // dot_general has no bool form: count in i32, then "any" is "count != 0".
    let cdt = if dt == DType::Bool { DType::I32 } else { dt };
    let terms: Vec<Term> = operands
        .iter()
        .zip(&spec.inputs)
        .map(|(t, labels)| {
            Term {
                t: t.cast(cdt),
                labels: labels.clone(),
            }
            .squeeze_broadcast(&spec)
            .diagonals()
        })
        .collect();
    // Sum, in each operand, the indices that neither the output nor another operand has.
    let labels: Vec<Vec<Label>> = terms.iter().map(|t| t.labels.clone()).collect();
    let terms: Vec<Term> = terms
        .into_iter()
        .enumerate()
        .map(|(k, t)| {
            t.sum_unless(|l| {
                spec.output.contains(&l)
                    || labels
                        .iter()
                        .enumerate()
                        .any(|(j, ls)| j != k && ls.contains(&l))
            })
        })
        .collect();
    let mut pending: std::collections::VecDeque<Term> = terms.into();
    let mut acc = pending.pop_front().expect("at least one operand");
    while let Some(next) = pending.pop_front() {
        let later: Vec<Label> = pending
            .iter()
            .flat_map(|t| t.labels.iter().copied())
            .chain(spec.output.iter().copied())
            .collect();
        acc = contract(acc, next, &later);
    }
    let acc = acc.sum_unless(|l| spec.output.contains(&l));
    let out = acc.transpose_to(&spec.output).t;
    if dt == DType::Bool {
        out.ne(&Tensor::scalar(0i32))
    } else {
        out
    }
}
