//! The fused nodes extraction chose, as candidates for steps, with their operands as window
//! tensors.

use crate::capture::{OpKind, Window};
use crate::kernel::Epilogue;
use crate::rewrite::Lowered;
use crate::rewrite::{CostModel, Saturated, TensorLang, is_no_bias};
use burn_ir::TensorId;
use egg::{Extractor, Id};
use std::cmp::Reverse;
use std::collections::HashSet;

/// A fused node chosen by extraction, with its operands as window tensors.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The output (a `mask_fill` / `mask_where` output, or a matmul's).
    pub root: TensorId,
    /// Left operand.
    pub x: TensorId,
    /// Right operand.
    pub w: TensorId,
    /// Bias.
    pub bias: Option<TensorId>,
    /// The gate of a backward (the forward's pre-activation).
    pub gate: Option<TensorId>,
    /// Dropout's mask, read before the gate ([`Epilogue::dropout`]), or SiLU's saved sigmoid
    /// ([`Epilogue::masked`]).
    pub mask: Option<TensorId>,
    /// Tanh GELU's saved tanh input or SwiGLU's backward's up projection
    /// ([`Epilogue::has_aux`]).
    pub aux: Option<TensorId>,
    /// SwiGLU's up-projection weight ([`Epilogue::has_up`]): the step computes `x · up` and
    /// reads it as its `aux`.
    pub up: Option<TensorId>,
    /// The window tensors equal to `x · w (+ bias)` before the activation (one of them is
    /// the pattern's pre-activation); empty for relu's backward and a plain matmul.
    pub linear: Vec<TensorId>,
    /// The activation's scalar ids: its constants, then its run-time parameters.
    pub scalars: Vec<u64>,
    /// What is applied.
    pub epilogue: Epilogue,
    /// Extraction chose a `chain-*` node: the layer may join the launch of the layer that
    /// produces `x`.
    pub chained: bool,
}

impl Candidate {
    pub(super) fn operands(&self) -> impl Iterator<Item = TensorId> + '_ {
        [
            Some(self.x),
            Some(self.w),
            self.bias,
            self.gate,
            self.mask,
            self.aux,
            self.up,
        ]
        .into_iter()
        .flatten()
    }
}

/// The roots whose cheapest term is a fused node: SwiGLU's, those with an activation, then
/// Linears alone, then plain matmuls (a smaller pattern inside a larger one is then an overlap), each
/// group in window order, except that roots computing the same fused node come latest first.
pub fn find_candidates(
    window: &Window,
    lowered: &Lowered,
    saturated: &Saturated,
) -> Vec<Candidate> {
    let extractor = Extractor::new(&saturated.egraph, CostModel);
    let egraph = &saturated.egraph;
    let raw: Vec<_> = lowered
        .roots
        .iter()
        .filter_map(|root| {
            let node = extractor.find_best_node(lowered.class_of[root]);
            let (epilogue, children) = node.fused()?;
            let [x, w] = [children[0], children[1]];
            // A backward reads a gate where the others read a bias (or `no-bias`).
            let third = children.get(2).copied();
            let (bias, gate) = match epilogue.gated() {
                true => (None, third),
                false => (third.filter(|&b| !is_no_bias(egraph, b)), None),
            };
            // The class of the Linear the node applies its activation to (its pre-activation).
            let linear = third
                .filter(|_| !epilogue.gated())
                .and_then(|b| egraph.lookup(TensorLang::Linear([x, w, b])));
            // Dropout's mask (or a saved value) is the fourth child, tanh GELU's saved tanh
            // input (or SwiGLU's up projection) the fifth, SwiGLU's up-projection weight the
            // fourth of its forward; the scalars follow.
            let up = epilogue.has_up().then(|| children[3]);
            let mask = epilogue.masked().then(|| children[3]);
            let aux = (epilogue.has_aux() && up.is_none()).then(|| children[4]);
            let operands = [mask, aux, up].iter().filter(|c| c.is_some()).count();
            let scalars: Option<Vec<u64>> = children
                .get(3 + operands..)
                .unwrap_or_default()
                .iter()
                .map(|&class| scalar_id(egraph, class))
                .collect();
            let chained = node.is_chained();
            Some((
                *root,
                epilogue,
                [x, w],
                [bias, gate, mask, aux, up],
                linear,
                scalars?,
                chained,
            ))
        })
        .collect();
    let roots: HashSet<TensorId> = raw.iter().map(|(root, ..)| *root).collect();
    // An operand class may hold several window tensors: prefer one that is certainly
    // materialised (read from outside the window, or another match's output).
    let tensor_of = |class| {
        let tensors = lowered.find_tensors(egraph, class);
        let is_leaf = |t: &TensorId| {
            window.find_producer(*t).is_none_or(|p| {
                matches!(
                    window.ops()[p].kind,
                    OpKind::Opaque | OpKind::Bookkeeping | OpKind::Source
                )
            })
        };
        let leaf = tensors.iter().find(|t| is_leaf(t));
        leaf.or_else(|| tensors.iter().find(|t| roots.contains(t)))
            .or(tensors.first())
            .copied()
    };
    let candidates: Vec<Candidate> = raw
        .into_iter()
        .filter_map(
            |(root, epilogue, [x, w], [bias, gate, mask, aux, up], linear, scalars, chained)| {
                // An absent operand stays absent; a present one must name a window tensor.
                let optional =
                    |class: Option<Id>| class.map(tensor_of).map_or(Some(None), |t| t.map(Some));
                Some(Candidate {
                    root,
                    x: tensor_of(x)?,
                    w: tensor_of(w)?,
                    bias: optional(bias)?,
                    gate: optional(gate)?,
                    mask: optional(mask)?,
                    aux: optional(aux)?,
                    up: optional(up)?,
                    linear: linear
                        .map_or_else(Vec::new, |class| lowered.find_tensors(egraph, class)),
                    scalars,
                    epilogue,
                    chained,
                })
            },
        )
        .collect();
    // Roots given the same fused node (`relu(relu(..))` after `relu-idempotent`): the latest
    // covers the most ops, so it is tried first, and the earlier ones only if it cannot be
    // claimed (its intermediates are read elsewhere).
    let same = |a: &Candidate, b: &Candidate| {
        (
            a.x, a.w, a.bias, a.gate, a.mask, a.aux, a.up, a.epilogue, &a.scalars,
        ) == (
            b.x, b.w, b.bias, b.gate, b.mask, b.aux, b.up, b.epilogue, &b.scalars,
        )
    };
    // Larger patterns first: SwiGLU's (two matmuls and an activation), an activation, then a
    // Linear alone, then a plain matmul.
    let rank = |c: &Candidate| match (c.epilogue, c.bias) {
        _ if c.up.is_some() => 0,
        (Epilogue::Identity, Some(_)) => 2,
        (Epilogue::Identity, None) => 3,
        _ => 1,
    };
    let order: Vec<(u8, usize, Reverse<usize>)> = (candidates.iter().enumerate())
        .map(|(i, c)| {
            let group = candidates.iter().position(|d| same(c, d)).unwrap_or(i);
            (rank(c), group, Reverse(i))
        })
        .collect();
    let mut ordered: Vec<_> = order.into_iter().zip(candidates).collect();
    ordered.sort_by_key(|(key, _)| *key);
    ordered.into_iter().map(|(_, c)| c).collect()
}

fn scalar_id(egraph: &crate::rewrite::TensorGraph, class: Id) -> Option<u64> {
    egraph[class].nodes.iter().find_map(|node| match node {
        TensorLang::Scalar(leaf) => Some(leaf.0),
        _ => None,
    })
}
