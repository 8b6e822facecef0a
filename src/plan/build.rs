//! From a rewritten window to a [`Claim`].

use super::{BiasGrad, FusedLinear, Plan, ScalarGuard, Step, TensorRef};
use crate::capture::{Lowered, OpKind, Window, lower};
use crate::kernel::Epilogue;
use crate::rewrite::{CostModel, Limits, Saturated, TensorLang, is_no_bias, saturate};
use burn_ir::{TensorId, TensorStatus};
use egg::{Extractor, Id};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeSet, HashSet};

/// Why a window was not claimed (a decision, not an error).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Reason {
    /// Extraction chose no fused node.
    NoMatch,
    /// The block starts (after views) with an op other than a matmul; Burn's fusers take the
    /// leading ops, and Hypatia sees the rest in a later window.
    NotAtBlockStart,
    /// A value inside the pattern (the matmul output, the mask) is read by something else.
    KeepsIntermediate,
    /// An operand of the fused node is a value the fused kernels never write.
    InputNotMaterialized,
    /// Two matches share ops.
    Overlap,
    /// An op between a match's first op and its end reads the match's operands or insides.
    InterleavedRead,
}

impl Reason {
    /// A short stable name, used as a key in [`FusionStats`](crate::FusionStats).
    pub fn key(&self) -> &'static str {
        match self {
            Reason::NoMatch => "no-match",
            Reason::NotAtBlockStart => "not-at-block-start",
            Reason::KeepsIntermediate => "keeps-intermediate",
            Reason::InputNotMaterialized => "input-not-materialized",
            Reason::Overlap => "overlap",
            Reason::InterleavedRead => "interleaved-read",
        }
    }
}

/// The outcome of planning one window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Claim {
    /// Claim a block prefix and run this plan.
    Fused(Plan),
    /// Leave the window to Burn.
    Declined(Reason),
}

/// A planned window, with what the e-graph run cost.
pub struct Planned {
    /// The decision.
    pub claim: Claim,
    /// Why egg's runner stopped.
    pub stop_reason: egg::StopReason,
    /// Wall time of lowering, saturation, extraction and planning.
    pub elapsed: std::time::Duration,
}

/// What a device lets the planner claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PlanOptions {
    /// Claim plain matmuls (weight gradients, a Linear without activation). Worth it where
    /// Hypatia's engine can beat Burn's matmul (matrix units); elsewhere such a claim would
    /// only run Burn's matmul and keep Burn's matmul fusion from the ops around it.
    pub plain_matmuls: bool,
    /// Claim relu's backward (`matmul-relu-grad`).
    pub relu_grads: bool,
    /// Claim Linear + relu (`linear-relu`).
    pub linear_relus: bool,
    /// Claim Linear + GELU, tanh GELU, SiLU, LeakyReLU or clamp (`linear-gelu`, ...).
    pub activations: bool,
    /// Claim a Linear without activation (`linear`, the bias add in the epilogue): like a plain
    /// matmul, worth it only where Hypatia's engine can beat Burn's matmul, whose own fusion
    /// already takes the bias add.
    pub linears: bool,
    /// Let consecutive forward layers run as one MLP-chain launch (`mlp-chain`) where the run
    /// time sizes fit and the cost model predicts it faster.
    pub chains: bool,
    /// Let a relu-backward step also produce the bias gradient the block sums from its output
    /// (`bias-grad`, see [`BiasGrad`]).
    pub bias_grads: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self {
            plain_matmuls: false,
            relu_grads: true,
            linear_relus: true,
            activations: true,
            linears: false,
            chains: true,
            bias_grads: true,
        }
    }
}

/// Capture → rewrite → plan for one window: lower it, saturate under `limits`, extract, plan.
///
/// Pure (no device, no global state): the fuser caches its result per distinct window.
pub fn plan_window(window: &Window, limits: &Limits, options: PlanOptions) -> Planned {
    plan_window_with(window, limits, options, |_, _| ()).0
}

/// [`plan_window`], then `inspect` on the lowered window and its saturated e-graph (what a
/// [plan dump](super::dump) reports). `elapsed` does not include `inspect`.
pub(crate) fn plan_window_with<T>(
    window: &Window,
    limits: &Limits,
    options: PlanOptions,
    inspect: impl FnOnce(&Lowered, &Saturated) -> T,
) -> (Planned, T) {
    let start = std::time::Instant::now();
    let mut lowered = lower(window);
    let saturated = saturate(std::mem::take(&mut lowered.egraph), limits);
    let mut candidates = find_candidates(window, &lowered, &saturated);
    candidates.retain(|c| match c.epilogue {
        Epilogue::Identity if c.bias.is_some() => options.linears,
        Epilogue::Identity => options.plain_matmuls,
        Epilogue::ReluGrad => options.relu_grads,
        Epilogue::Relu => options.linear_relus,
        Epilogue::Gelu
        | Epilogue::GeluTanh
        | Epilogue::Silu
        | Epilogue::LeakyRelu
        | Epilogue::Clamp => options.activations,
    });
    if !options.chains {
        candidates.iter_mut().for_each(|c| c.chained = false);
    }
    let claim = build_plan(window, &candidates, options.bias_grads);
    let elapsed = start.elapsed();
    let inspected = inspect(&lowered, &saturated);
    let planned = Planned {
        claim,
        stop_reason: saturated.stop_reason,
        elapsed,
    };
    (planned, inspected)
}

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
    /// The gate of a relu backward.
    pub gate: Option<TensorId>,
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
    fn operands(&self) -> impl Iterator<Item = TensorId> + '_ {
        [Some(self.x), Some(self.w), self.bias, self.gate]
            .into_iter()
            .flatten()
    }
}

/// The roots whose cheapest term is a fused node: those with an activation first, then Linears
/// alone, then plain matmuls (a smaller pattern inside a larger one is then an overlap), each
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
            // Relu's backward reads a gate where the others read a bias (or `no-bias`).
            let third = children.get(2).copied();
            let (bias, gate) = match epilogue {
                Epilogue::ReluGrad => (None, third),
                _ => (third.filter(|&b| !is_no_bias(egraph, b)), None),
            };
            // The class of the Linear the node applies its activation to (its pre-activation).
            let linear = third
                .filter(|_| epilogue != Epilogue::ReluGrad)
                .and_then(|b| egraph.lookup(TensorLang::Linear([x, w, b])));
            let scalars: Option<Vec<u64>> = children
                .get(3..)
                .unwrap_or_default()
                .iter()
                .map(|&class| scalar_id(egraph, class))
                .collect();
            let chained = node.is_chained();
            Some((
                *root,
                epilogue,
                [x, w],
                [bias, gate],
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
                matches!(window.ops()[p].kind, OpKind::Opaque | OpKind::Bookkeeping)
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
            |(root, epilogue, [x, w], [bias, gate], linear, scalars, chained)| {
                // An absent operand stays absent; a present one must name a window tensor.
                let optional =
                    |class: Option<Id>| class.map(tensor_of).map_or(Some(None), |t| t.map(Some));
                Some(Candidate {
                    root,
                    x: tensor_of(x)?,
                    w: tensor_of(w)?,
                    bias: optional(bias)?,
                    gate: optional(gate)?,
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
        (a.x, a.w, a.bias, a.gate, a.epilogue, &a.scalars)
            == (b.x, b.w, b.bias, b.gate, b.epilogue, &b.scalars)
    };
    // Larger patterns first: an activation, then a Linear alone, then a plain matmul.
    let rank = |c: &Candidate| match (c.epilogue, c.bias) {
        (Epilogue::Identity, Some(_)) => 1,
        (Epilogue::Identity, None) => 2,
        _ => 0,
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

/// A candidate with the block ops it covers.
struct Covered {
    candidate: Candidate,
    ops: BTreeSet<usize>,
    pre: Option<TensorId>,
    /// The matmul side of the bias add and the covered ops computing it.
    matmul_out: TensorId,
    matmul_ops: BTreeSet<usize>,
    /// The block position the step runs at (see [`position`]).
    position: usize,
    /// The bias gradient summed from the step's output, if it produces one.
    bias_grad: Option<BiasGrad>,
}

impl Covered {
    fn operands(&self) -> impl Iterator<Item = TensorId> + '_ {
        self.candidate.operands()
    }

    fn intermediates<'a>(&'a self, window: &'a Window) -> impl Iterator<Item = TensorId> + 'a {
        self.ops
            .iter()
            .map(|&i| window.ops()[i].out().id)
            .filter(|t| *t != self.candidate.root && Some(*t) != self.pre)
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
fn cover(window: &Window, candidate: &Candidate) -> Result<Covered, Reason> {
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
        // The mask fill's tensor input is the matmul side.
        Epilogue::ReluGrad => {
            let fill = window
                .find_producer(candidate.root)
                .ok_or(Reason::NoMatch)?;
            let side = through_matmul(window.ops()[fill].inputs[0].id);
            (None, side.ok_or(Reason::NoMatch)?)
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
    for &index in &ops {
        let value = window.ops()[index].out().id;
        if value == candidate.root {
            continue;
        }
        let read_outside = window
            .find_readers(value)
            .any(|reader| !ops.contains(&reader));
        let kept = window.find_last_status(value, &ops_list) == Some(TensorStatus::ReadOnly);
        if (read_outside || kept) && Some(value) != pre {
            return Err(Reason::KeepsIntermediate);
        }
    }
    let pre_kept = pre.filter(|&p| {
        window.find_readers(p).any(|reader| !ops.contains(&reader))
            || window.find_last_status(p, &ops_list) == Some(TensorStatus::ReadOnly)
    });
    Ok(Covered {
        position: position(window, candidate, &ops),
        candidate: candidate.clone(),
        ops,
        pre: pre_kept,
        matmul_out,
        matmul_ops,
        bias_grad: None,
    })
}

/// The `sum_dim` ops that sum `root` (a relu-backward step's output) over every dim but the
/// last, if the block has them: one per leading dim, in order, each intermediate sum read only
/// by the next and freed by it, so only the last one's output lives on.
fn find_bias_grad(window: &Window, root: TensorId) -> Option<BiasGrad> {
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
fn bias_grad_ops(accepted: &[Covered]) -> BTreeSet<usize> {
    accepted
        .iter()
        .filter_map(|a| a.bias_grad.as_ref())
        .flat_map(|grad| grad.ops.iter().copied())
        .collect()
}

/// Plans the candidates of one window: which prefix of the block to claim and how to run it.
/// With `bias_grads`, relu-backward steps also produce the bias gradients summed from their
/// outputs, where the plan stays valid with them.
pub fn build_plan(window: &Window, candidates: &[Candidate], bias_grads: bool) -> Claim {
    let claim = build_plan_with(window, candidates, bias_grads);
    match claim {
        Claim::Declined(_) if bias_grads => build_plan_with(window, candidates, false),
        claim => claim,
    }
}

fn build_plan_with(window: &Window, candidates: &[Candidate], bias_grads: bool) -> Claim {
    let mut first_decline = None;
    let mut accepted: Vec<Covered> = Vec::new();
    for candidate in candidates {
        match cover(window, candidate) {
            Ok(covered) if accepted.iter().any(|a| !a.ops.is_disjoint(&covered.ops)) => {
                first_decline.get_or_insert(Reason::Overlap);
            }
            Ok(covered) => accepted.push(covered),
            Err(reason) => {
                first_decline.get_or_insert(reason);
            }
        }
    }
    // A match may not read another match's insides: the fused kernels never write them.
    loop {
        let insides: HashSet<TensorId> = accepted
            .iter()
            .flat_map(|a| a.intermediates(window))
            .collect();
        let before = accepted.len();
        accepted.retain(|a| a.operands().all(|t| !insides.contains(&t)));
        if accepted.len() == before {
            break;
        }
        first_decline.get_or_insert(Reason::InputNotMaterialized);
    }
    if accepted.is_empty() {
        return Claim::Declined(first_decline.unwrap_or(Reason::NoMatch));
    }
    let covered: BTreeSet<usize> = accepted
        .iter()
        .flat_map(|a| a.ops.iter().copied())
        .collect();
    if bias_grads {
        for a in accepted.iter_mut() {
            a.bias_grad = (a.candidate.epilogue == Epilogue::ReluGrad)
                .then(|| find_bias_grad(window, a.candidate.root))
                .flatten()
                // Its sums run (or are skipped) at their own positions, after the step.
                .filter(|grad| grad.ops.iter().all(|&op| op >= a.position));
        }
        // A weight gradient `xᵀ · dy` whose `dy` is also summed over its rows (a Linear
        // without activation, such as an MLP's output layer: no relu-backward step sums it)
        // sums `dy` after its kernel. Rank 2 only: a rank-3 `dy` reaches the matmul reshaped.
        let mut taken = bias_grad_ops(&accepted);
        for a in accepted.iter_mut() {
            let c = &a.candidate;
            if a.bias_grad.is_some()
                || c.epilogue != Epilogue::Identity
                || c.bias.is_some()
                || c.gate.is_some()
            {
                continue;
            }
            a.bias_grad = find_bias_grad(window, c.w)
                .filter(|grad| {
                    grad.ops.len() == 1
                        && grad
                            .ops
                            .iter()
                            .all(|&op| op >= a.position && !taken.contains(&op))
                })
                .map(|grad| BiasGrad {
                    of_rhs: true,
                    ..grad
                });
            taken.extend(a.bias_grad.iter().flat_map(|grad| grad.ops.iter().copied()));
        }
        // Sums past the prefix the steps claim may extend it only over themselves: an op in
        // between would leave Burn's fusers to run as a single op here. (On lavapipe a claim
        // that also took the first layer's weight-gradient matmul this way changed the blocks
        // burn-fusion cut after it, and the next forward's Linear+ReLU was no longer fused.)
        let end = covered.last().expect("not empty") + 1;
        let sums = bias_grad_ops(&accepted);
        let last = sums.last().copied().unwrap_or(0);
        if (end..last).any(|i| !sums.contains(&i)) {
            for a in accepted.iter_mut() {
                let extends = |grad: &BiasGrad| grad.ops.iter().any(|&op| op >= end);
                if a.bias_grad.as_ref().is_some_and(extends) {
                    a.bias_grad = None;
                }
            }
        }
    }
    let sums = bias_grad_ops(&accepted);
    // Ops before the first step run as Burn's ops, one by one. A window that begins with a
    // matmul keeps its leading ops (a weight gradient whose pattern is off, a bias gradient):
    // burn-fusion's block already holds them, and declining would run the whole block
    // un-fused. Any other leading op is left to Burn's fusers.
    if !window.starts_with_matmul() {
        return Claim::Declined(Reason::NotAtBlockStart);
    }
    let len = covered.last().max(sums.last()).expect("not empty") + 1;
    if let Err(reason) = check_interleaved(window, &accepted, &covered, len) {
        return Claim::Declined(reason);
    }
    Claim::Fused(assemble(window, &accepted, &covered, &sums, len))
}

/// Ops run between fused steps must not read insides, nor free operands a pending step still
/// needs.
fn check_interleaved(
    window: &Window,
    accepted: &[Covered],
    covered: &BTreeSet<usize>,
    len: usize,
) -> Result<(), Reason> {
    let insides: HashSet<TensorId> = accepted
        .iter()
        .flat_map(|a| a.intermediates(window))
        .collect();
    for index in (0..len).filter(|i| !covered.contains(i)) {
        let reads: Vec<TensorId> = window.ops()[index].inputs.iter().map(|t| t.id).collect();
        if reads.iter().any(|t| insides.contains(t)) {
            return Err(Reason::InterleavedRead);
        }
        // A step runs at its position: an op before it may read its operands, but not as
        // their last reader (that would free them first).
        let op = &window.ops()[index];
        let pending = accepted.iter().filter(|a| index < a.position);
        for a in pending {
            let consumes = op
                .inputs
                .iter()
                .any(|t| t.status == TensorStatus::ReadWrite && a.operands().any(|o| o == t.id));
            if consumes {
                return Err(Reason::InterleavedRead);
            }
        }
    }
    Ok(())
}

fn assemble(
    window: &Window,
    accepted: &[Covered],
    covered: &BTreeSet<usize>,
    sums: &BTreeSet<usize>,
    len: usize,
) -> Plan {
    let mut steps = Vec::new();
    let mut guards = Vec::new();
    // An op left to Burn that reads only tensors made before the block, none of them for the
    // last time (a row view of a parameter's bias that `backend::bias` keeps for later
    // forwards), runs first: in its place between two fused layers it would keep them from one
    // MLP-chain launch. Nothing before it can change what it reads.
    let hoisted: BTreeSet<usize> = (0..len)
        .filter(|i| !covered.contains(i) && !sums.contains(i))
        .filter(|&i| {
            let op = &window.ops()[i];
            !op.is_drop()
                && !op.inputs.is_empty()
                && (op.inputs.iter()).all(|t| {
                    t.status == TensorStatus::ReadOnly && window.find_producer(t.id).is_none()
                })
        })
        .collect();
    steps.extend(hoisted.iter().map(|&index| Step::Run(index)));
    for index in 0..len {
        // Each step at its earliest position, before the op there (in a backward pass the
        // ops after a gradient matmul read its operands, and the last of them frees them).
        for a in accepted.iter().filter(|a| a.position == index) {
            let ops: Vec<usize> = a.ops.iter().copied().collect();
            let reference = |id: TensorId| TensorRef {
                id,
                status: window
                    .find_last_status(id, &ops)
                    .unwrap_or(TensorStatus::ReadOnly),
            };
            let c = &a.candidate;
            let constants = c.epilogue.constants();
            match c.epilogue {
                // Relu's threshold and fill value (and a `full`'s value): all zero.
                Epilogue::Relu | Epilogue::ReluGrad => guards.extend(
                    (ops.iter())
                        .flat_map(|&i| window.ops()[i].scalars.iter())
                        .map(|&id| ScalarGuard { id, value: 0.0 }),
                ),
                _ => guards.extend(
                    (constants.iter().zip(&c.scalars))
                        .map(|(&value, &id)| ScalarGuard { id, value }),
                ),
            }
            let x = reference(c.x);
            // A chained layer runs in its input's launch only right after the step making
            // that input, as its last reader, with nothing else kept from either.
            let chained = c.chained
                && c.gate.is_none()
                && a.pre.is_none()
                && x.status == TensorStatus::ReadWrite
                && matches!(steps.last(), Some(Step::Fused(prev))
                    if prev.out == c.x && prev.pre.is_none() && crate::kernel::chain::chains(prev.epilogue)
                        && prev.gate.is_none());
            steps.push(Step::Fused(FusedLinear {
                x,
                w: reference(c.w),
                bias: c.bias.map(reference),
                gate: c.gate.map(reference),
                out: c.root,
                pre: a.pre,
                epilogue: c.epilogue,
                params: c
                    .scalars
                    .get(constants.len()..)
                    .unwrap_or_default()
                    .to_vec(),
                ops,
                matmul_ops: a.matmul_ops.iter().copied().collect(),
                matmul_out: a.matmul_out,
                chained,
                bias_grad: a.bias_grad.clone().map(Box::new),
            }));
        }
        if sums.contains(&index) {
            steps.push(Step::BiasGrad(index));
        } else if !covered.contains(&index) && !hoisted.contains(&index) {
            steps.push(Step::Run(index));
        }
    }
    Plan { steps, len, guards }
}
