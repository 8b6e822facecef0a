//! From a rewritten window to a [`Claim`].

use super::cover::{Covered, bias_grad_ops, cover, find_bias_grad};
use super::{
    BiasGrad, Candidate, FusedLinear, Plan, ScalarGuard, Step, TensorRef, Up, find_candidates,
};
use crate::capture::Window;
use crate::kernel::Epilogue;
use crate::rewrite::{Limits, Saturated, saturate};
use crate::rewrite::{Lowered, lower};
use burn_ir::{TensorId, TensorStatus};
use serde::{Deserialize, Serialize};
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
    /// Claim GELU's, SiLU's, tanh GELU's, LeakyReLU's and SwiGLU's backward
    /// (`matmul-gelu-grad`, `matmul-silu-grad`, `matmul-gelu-tanh-grad`,
    /// `matmul-leaky-relu-grad`, `matmul-swiglu-grad`), the activations' other than relu's.
    pub activation_grads: bool,
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
    /// Let a backward step (relu's, GELU's) also produce the bias gradient the block sums
    /// from its output (`bias-grad`, see [`BiasGrad`]).
    pub bias_grads: bool,
}

impl PlanOptions {
    /// Everything but plain matmuls and plain Linears: what a device without matrix units
    /// claims (the [`Default`]).
    pub const DEFAULT: Self = Self {
        plain_matmuls: false,
        relu_grads: true,
        activation_grads: true,
        linear_relus: true,
        activations: true,
        linears: false,
        chains: true,
        bias_grads: true,
    };
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self::DEFAULT
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
        Epilogue::ReluGrad | Epilogue::ReluGradDropout => options.relu_grads,
        Epilogue::GeluGrad
        | Epilogue::GeluGradDropout
        | Epilogue::SiluGrad
        | Epilogue::GeluTanhGrad
        | Epilogue::LeakyReluGrad
        | Epilogue::SwigluGrad => options.activation_grads,
        Epilogue::Relu => options.linear_relus,
        Epilogue::Gelu
        | Epilogue::GeluTanh
        | Epilogue::Silu
        | Epilogue::LeakyRelu
        | Epilogue::Swiglu
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

/// Plans the candidates of one window: which prefix of the block to claim and how to run it.
/// With `bias_grads`, backward steps also produce the bias gradients summed from their
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
            a.bias_grad = a
                .candidate
                .epilogue
                .gated()
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
            // Nor may it read what the step's recomputed ops make after its kernel.
            let recomputed =
                |t: TensorId| (a.recomputed.iter()).any(|&i| window.ops()[i].out().id == t);
            if consumes || reads.iter().any(|&t| recomputed(t)) {
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
                // Relu's threshold and fill value (and a `full`'s value): all zero; a
                // run-time parameter (dropout's scale) is read, not guarded.
                Epilogue::Relu | Epilogue::ReluGrad | Epilogue::ReluGradDropout => guards.extend(
                    (ops.iter())
                        .flat_map(|&i| window.ops()[i].scalars.iter())
                        .filter(|id| !c.scalars[constants.len()..].contains(id))
                        .map(|&id| ScalarGuard { id, value: 0.0 }),
                ),
                _ => guards.extend(
                    (constants.iter().zip(&c.scalars))
                        .map(|(&value, &id)| ScalarGuard { id, value }),
                ),
            }
            let x = reference(c.x);
            let up = (c.up.zip(a.up.as_ref())).map(|(w, (out, ops, kept))| {
                Box::new(Up {
                    w: reference(w),
                    out: *out,
                    kept: *kept,
                    ops: ops.iter().copied().collect(),
                })
            });
            // A chained layer runs in its input's launch only right after the step making
            // that input, as its last reader, with nothing else kept from either.
            let chained = c.chained
                && c.gate.is_none()
                && a.pre.is_none()
                && x.status == TensorStatus::ReadWrite
                && matches!(steps.last(), Some(Step::Fused(prev))
                    if prev.out == c.x && prev.pre.is_none() && crate::kernel::chains(prev.epilogue)
                        && prev.gate.is_none());
            steps.push(Step::Fused(FusedLinear {
                x,
                w: reference(c.w),
                bias: c.bias.map(reference),
                gate: c.gate.map(reference),
                mask: c.mask.map(reference),
                aux: c.aux.map(reference),
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
                recomputed: a.recomputed.iter().copied().collect(),
                up,
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
