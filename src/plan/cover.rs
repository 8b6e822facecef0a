//! Which block ops a candidate covers, where in the block its step can run, and the bias
//! gradients summed from its output.

use super::{BiasGrad, Candidate, Reason, TensorRef};
use crate::capture::{OpKind, Window};
use crate::kernel::Epilogue;
use burn_ir::{TensorId, TensorStatus};
use std::collections::{BTreeSet, HashSet};

/// A candidate with the block ops it covers.
pub(super) struct Covered {
    pub(super) candidate: Candidate,
    pub(super) ops: BTreeSet<usize>,
    pub(super) pre: Option<TensorId>,
    /// The matmul side of the bias add and the covered ops computing it.
    pub(super) matmul_out: TensorId,
    pub(super) matmul_ops: BTreeSet<usize>,
    /// The block position the step runs at (see [`position`]).
    pub(super) position: usize,
    /// The bias gradient summed from the step's output, if it produces one.
    pub(super) bias_grad: Option<BiasGrad>,
    /// The covered ops that compute values kept after the block from the pre-activation
    /// alone (see [`recomputed`]).
    pub(super) recomputed: BTreeSet<usize>,
    /// SwiGLU's up projection: its output, the covered ops computing it, and whether it is
    /// kept after the step (then the step writes it).
    pub(super) up: Option<(TensorId, BTreeSet<usize>, bool)>,
}

impl Covered {
    pub(super) fn operands(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.candidate.operands()
    }

    pub(super) fn intermediates<'a>(
        &'a self,
        window: &'a Window,
    ) -> impl Iterator<Item = TensorId> + 'a {
        // What the recomputed ops make is materialised by them, as Burn's ops; a kept up
        // projection by the step.
        let written_up = (self.up.as_ref()).and_then(|(out, _, kept)| kept.then_some(*out));
        (self.ops.iter())
            .filter(|i| !self.recomputed.contains(i))
            .map(|&i| window.ops()[i].out().id)
            .filter(move |t| {
                *t != self.candidate.root && Some(*t) != self.pre && Some(*t) != written_up
            })
    }
}

/// The window ops computing `from` out of `operands`.
fn producers(
    window: &Window,
    from: TensorId,
    operands: &HashSet<TensorId>,
) -> Result<BTreeSet<usize>, Reason> {
    let mut ops = BTreeSet::new();
    let mut stack = vec![from];
    while let Some(tensor) = stack.pop() {
        if operands.contains(&tensor) {
            continue;
        }
        let producer = window
            .find_producer(tensor)
            .ok_or(Reason::InputNotMaterialized)?;
        if !window.ops()[producer].kind.is_lowered() {
            return Err(Reason::InputNotMaterialized);
        }
        if ops.insert(producer) {
            stack.extend(window.ops()[producer].inputs.iter().map(|t| t.id));
        }
    }
    Ok(ops)
}

/// The earliest block position a step covering `ops` can run at: after every operand's producer,
/// and after every other reader of an operand that the step frees (its last reader).
fn position(window: &Window, candidate: &Candidate, ops: &BTreeSet<usize>) -> usize {
    let ops_list: Vec<usize> = ops.iter().copied().collect();
    let produced = candidate
        .operands()
        .filter_map(|t| window.find_producer(t))
        .map(|p| p + 1);
    let released = candidate
        .operands()
        .filter(|&t| window.find_last_status(t, &ops_list) == Some(TensorStatus::ReadWrite))
        .flat_map(|t| window.find_readers(t).collect::<Vec<_>>())
        .filter(|i| !ops.contains(i))
        .map(|i| i + 1);
    produced.chain(released).max().unwrap_or(0)
}

/// The ops between `candidate`'s operands and its root, and the pre-activation to keep.
///
/// A bias whose row view (its reshape in the block) lives on after the block is read as that
/// view: the reshape stays Burn's op, run before the step. That is a Linear's bias the second
/// time a model runs it, when `backend::bias` keeps the view for the forwards after.
pub(super) fn cover(window: &Window, candidate: &Candidate) -> Result<Covered, Reason> {
    match cover_ops(window, candidate) {
        Err(Reason::KeepsIntermediate) => match kept_bias_view(window, candidate) {
            Some(view) => cover_ops(
                window,
                &Candidate {
                    bias: Some(view),
                    ..candidate.clone()
                },
            ),
            None => Err(Reason::KeepsIntermediate),
        },
        covered => covered,
    }
}

/// The row view of `candidate`'s bias that the window makes (its reshape, which the
/// candidate's add reads: the rewrite checked it is a row) and keeps after it.
fn kept_bias_view(window: &Window, candidate: &Candidate) -> Option<TensorId> {
    let bias = candidate.bias?;
    let operands: HashSet<TensorId> = candidate.operands().collect();
    let ops = producers(window, candidate.root, &operands).ok()?;
    let view = (ops.iter().map(|&i| &window.ops()[i]))
        .find(|op| op.kind == OpKind::Reshape && op.inputs.first().is_some_and(|t| t.id == bias))?
        .out()
        .id;
    let readers: Vec<usize> = window.find_readers(view).collect();
    (window.find_last_status(view, &readers) == Some(TensorStatus::ReadOnly)).then_some(view)
}

fn cover_ops(window: &Window, candidate: &Candidate) -> Result<Covered, Reason> {
    let operands: HashSet<TensorId> = candidate.operands().collect();
    let ops = producers(window, candidate.root, &operands)?;
    let ops_list: Vec<usize> = ops.iter().copied().collect();
    let through_matmul = |t: TensorId| {
        let chain = producers(window, t, &operands).ok()?;
        let has_matmul = chain
            .iter()
            .any(|&i| window.ops()[i].kind == OpKind::Matmul);
        has_matmul.then_some((t, chain))
    };
    let (pre, (matmul_out, matmul_ops)) = match candidate.epilogue {
        // SiLU's gradient reads the matmul twice (`g · s`, `g · x`), tanh GELU's reads its
        // half twice, LeakyReLU's masks it twice: the side is the matmul's own output. SwiGLU's
        // reads its product with the up projection twice, and the up projection's gradient
        // (`dy · Wᵀ ⊙ silu(a)`, Burn's op) reads the matmul itself: the step writes it as the
        // pre-activation where it is kept.
        epilogue @ (Epilogue::SiluGrad
        | Epilogue::GeluTanhGrad
        | Epilogue::LeakyReluGrad
        | Epilogue::SwigluGrad) => {
            let matmul = (ops.iter())
                .find(|&&i| window.ops()[i].kind == OpKind::Matmul)
                .ok_or(Reason::NoMatch)?;
            let out = window.ops()[*matmul].out().id;
            let pre = epilogue.product().then_some(out);
            (pre, (out, producers(window, out, &operands)?))
        }
        // A backward: the root's input computed through a matmul (relu's mask fill's tensor,
        // the `grad` GELU's derivative multiplies) is the matmul side.
        epilogue if epilogue.gated() => {
            let side_of = |t: TensorId| {
                let op = window.find_producer(t).ok_or(Reason::NoMatch)?;
                (window.ops()[op].inputs.iter())
                    .find_map(|t| through_matmul(t.id))
                    .ok_or(Reason::NoMatch)
            };
            let mut side = side_of(candidate.root)?;
            // Dropout's backward (`mul(mul_scalar(dy · Wᵀ, scale), mask)`) is the epilogue's
            // too: the matmul side is the product under its two ops.
            if epilogue.dropout() {
                side = side_of(side_of(side.0)?.0)?;
            }
            (None, side)
        }
        Epilogue::Identity if candidate.bias.is_none() => (None, (candidate.root, ops.clone())),
        // A Linear: its output (computed by a covered op) is the pre-activation. With a bias,
        // the matmul side is the bias add's input computed through a matmul.
        _ => {
            let linear = (candidate.linear.iter())
                .find(|t| window.find_producer(**t).is_some_and(|p| ops.contains(&p)))
                .copied()
                .ok_or(Reason::NoMatch)?;
            let side = match candidate.bias {
                Some(_) => {
                    let add = window.find_producer(linear).ok_or(Reason::NoMatch)?;
                    let add = &window.ops()[add];
                    (add.kind == OpKind::Add)
                        .then(|| add.inputs.iter().find_map(|t| through_matmul(t.id)))
                        .flatten()
                }
                None => through_matmul(linear),
            };
            let pre = (linear != candidate.root).then_some(linear);
            (pre, side.ok_or(Reason::NoMatch)?)
        }
    };
    let is_kept = |value: TensorId| {
        window
            .find_readers(value)
            .any(|reader| !ops.contains(&reader))
            || window.find_last_status(value, &ops_list) == Some(TensorStatus::ReadOnly)
    };
    let up = match candidate.up {
        Some(weight) => {
            let (out, up_ops) = up_projection(window, candidate.root, weight, &operands)?;
            Some((out, up_ops, is_kept(out)))
        }
        None => None,
    };
    let up_out = up.as_ref().map(|(out, ..)| *out);
    let pre_kept = pre.filter(|&p| is_kept(p));
    let mut recomputed = BTreeSet::new();
    for &index in &ops {
        let value = window.ops()[index].out().id;
        if value == candidate.root || Some(value) == pre || Some(value) == up_out || !is_kept(value)
        {
            continue;
        }
        let ops = pre
            .and_then(|pre| from_pre(window, value, pre, &ops))
            .ok_or(Reason::KeepsIntermediate)?;
        // Where nothing keeps the pre-activation, the step writes it only for values computed
        // from it (LeakyReLU's mask under `Autodiff`); a kept view of an operand (a bias
        // reshape) leaves the step to decline as before.
        let reads_pre = |&i: &usize| window.ops()[i].inputs.iter().any(|t| Some(t.id) == pre);
        if pre_kept.is_none() && !ops.iter().any(reads_pre) {
            return Err(Reason::KeepsIntermediate);
        }
        recomputed.extend(ops);
    }
    // The step writes the pre-activation where something after it reads it, and where the
    // values it keeps are recomputed from it though nothing keeps it: burn-fusion frees it
    // after the block, as the last of the block's ops to read it says (decision record 0023).
    let pre_written = pre_kept.or(pre.filter(|_| !recomputed.is_empty()));
    Ok(Covered {
        position: position(window, candidate, &ops),
        candidate: candidate.clone(),
        ops,
        pre: pre_written,
        matmul_out,
        matmul_ops,
        bias_grad: None,
        recomputed,
        up,
    })
}

/// SwiGLU's up projection in the product at `root`: the factor computed by a matmul that reads
/// the up projection's `weight` (through its views), and the ops computing it.
fn up_projection(
    window: &Window,
    root: TensorId,
    weight: TensorId,
    operands: &HashSet<TensorId>,
) -> Result<(TensorId, BTreeSet<usize>), Reason> {
    let product = window.find_producer(root).ok_or(Reason::NoMatch)?;
    let reads_weight = |&i: &usize| window.ops()[i].inputs.iter().any(|t| t.id == weight);
    (window.ops()[product].inputs.iter())
        .find_map(|factor| {
            let ops = producers(window, factor.id, operands).ok()?;
            let matmuls = (ops.iter()).filter(|&&i| window.ops()[i].kind == OpKind::Matmul);
            // The matmul reads the weight itself, or a view of it.
            (ops.iter().any(reads_weight) && matmuls.count() == 1).then_some((factor.id, ops))
        })
        .ok_or(Reason::NoMatch)
}

/// The covered ops computing `value` from the kept pre-activation `pre` and tensors made
/// before the window alone, if it is so computed: Burn's autodiff keeps such a value (SiLU's
/// sigmoid, for `mul`'s backward), and Burn's ops can compute it after the step from the
/// pre-activation the step writes, exactly as they would have (decision record 0023).
fn from_pre(
    window: &Window,
    value: TensorId,
    pre: TensorId,
    covered: &BTreeSet<usize>,
) -> Option<BTreeSet<usize>> {
    let mut ops = BTreeSet::new();
    let mut stack = vec![value];
    while let Some(tensor) = stack.pop() {
        let producer = window.find_producer(tensor)?;
        // Made in the window by an op the step does not cover (so before it), or through the
        // matmul: not the pre-activation's alone.
        let op = &window.ops()[producer];
        if !covered.contains(&producer) || op.kind == OpKind::Matmul {
            return None;
        }
        if !ops.insert(producer) {
            continue;
        }
        for input in &op.inputs {
            // Run after the step, the op must not free what it reads from outside: the step
            // released its operands already.
            match window.find_producer(input.id) {
                _ if input.id == pre => {}
                None if input.status == TensorStatus::ReadOnly => {}
                None => return None,
                Some(_) => stack.push(input.id),
            }
        }
    }
    Some(ops)
}

/// The `sum_dim` ops that sum `root` (a relu-backward step's output) over every dim but the
/// last, if the block has them: one per leading dim, in order, each intermediate sum read only
/// by the next and freed by it, so only the last one's output lives on.
pub(super) fn find_bias_grad(window: &Window, root: TensorId) -> Option<BiasGrad> {
    // Its rank from the op that makes it, or (an operand made before the window) a reader.
    let rank = match window.find_producer(root) {
        Some(producer) => window.ops()[producer].out().shape.len(),
        None => window
            .find_readers(root)
            .flat_map(|i| window.ops()[i].inputs.iter())
            .find(|t| t.id == root)?
            .shape
            .len(),
    };
    let mut ops = Vec::new();
    let mut reads = Vec::new();
    let mut summed = root;
    for axis in 0..rank.checked_sub(1)? {
        let mut readers = window.find_readers(summed);
        let sum = if axis == 0 {
            readers.find(|&i| window.ops()[i].kind == OpKind::SumDim { axis })?
        } else {
            let only = readers.next()?;
            let freed = window.find_last_status(summed, &[only]) == Some(TensorStatus::ReadWrite);
            if readers.next().is_some() || !freed {
                return None;
            }
            (window.ops()[only].kind == OpKind::SumDim { axis }).then_some(only)?
        };
        ops.push(sum);
        reads.push(TensorRef {
            id: summed,
            status: window.find_last_status(summed, &[sum])?,
        });
        summed = window.ops()[sum].out().id;
    }
    Some(BiasGrad {
        out: summed,
        ops,
        reads,
        of_rhs: false,
    })
}

/// The `sum_dim` ops of the steps' bias gradients.
pub(super) fn bias_grad_ops(accepted: &[Covered]) -> BTreeSet<usize> {
    accepted
        .iter()
        .filter_map(|a| a.bias_grad.as_ref())
        .flat_map(|grad| grad.ops.iter().copied())
        .collect()
}
