//! [`Plan`], [`Step`] and [`FusedLinear`].

use crate::capture::{Canonical, CapturedOp};
use crate::config::FusedPattern;
use crate::kernel::Epilogue;
use burn_ir::{TensorId, TensorStatus};
use serde::{Deserialize, Serialize};

/// A tensor read by a fused step, with its status at the step's last read.
///
/// `ReadWrite` means the step is the last reader: the handle is released after the launch.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorRef {
    /// Relative id (the context maps it to the real tensor).
    pub id: TensorId,
    /// Status at the last read inside the step.
    pub status: TensorStatus,
}

/// One fused `epilogue(x · w + bias)`: a Linear + activation, a relu-backward `dy · Wᵀ`
/// gated by the pre-activation, or a plain matmul (a weight gradient).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedLinear {
    /// Left operand `[.., m, k]`.
    pub x: TensorRef,
    /// Right operand `[.., k, n]` (Burn's Linear stores it `[d_in, d_out]`).
    pub w: TensorRef,
    /// Row bias `[.., n]` with every other dim 1.
    pub bias: Option<TensorRef>,
    /// The gate of a backward epilogue ([`Epilogue::gated`]): the forward's pre-activation,
    /// output-shaped.
    pub gate: Option<TensorRef>,
    /// Dropout's mask ([`Epilogue::dropout`]: the forward's `random_like` tensor) or SiLU's
    /// saved sigmoid ([`Epilogue::SiluGrad`]) or tanh GELU's saved `tanh + 1`
    /// ([`Epilogue::GeluTanhGrad`]), output-shaped.
    #[serde(default)]
    pub mask: Option<TensorRef>,
    /// Tanh GELU's saved tanh input ([`Epilogue::has_aux`]), output-shaped.
    #[serde(default)]
    pub aux: Option<TensorRef>,
    /// The activation's output.
    pub out: TensorId,
    /// The pre-activation, when something outside the step still reads it (autodiff does).
    pub pre: Option<TensorId>,
    /// What is applied before the store.
    pub epilogue: Epilogue,
    /// Relative scalar ids of the epilogue's run-time parameters ([`Epilogue::parameters`]),
    /// read at each execution.
    pub params: Vec<u64>,
    /// The block ops this step replaces, in block order (run them to fall back).
    pub ops: Vec<usize>,
    /// The ops among `ops` that compute the matmul side of the bias add, in block order: the
    /// split execution runs these as Burn would, then applies the epilogue to `matmul_out`.
    pub matmul_ops: Vec<usize>,
    /// The matmul-side tensor the bias add reads.
    pub matmul_out: TensorId,
    /// The step may run in one MLP-chain launch with the fused step before it, whose `out` is
    /// this step's `x` (see `kernel::chain`).
    #[serde(default)]
    pub chained: bool,
    /// The bias gradient that the step also produces: `Σ_rows out` (relu's backward, where the
    /// block sums the step's output over every dim but the last), or `Σ_rows w` (a weight
    /// gradient `xᵀ · dy` whose `dy` the block also sums: a Linear's without activation).
    /// (Boxed: most steps have none.)
    #[serde(default)]
    pub bias_grad: Option<Box<BiasGrad>>,
    /// The ops among `ops` that compute, from the written pre-activation alone, values kept
    /// after the block (SiLU's sigmoid under `Autodiff`): after its kernel the step runs them
    /// as Burn's ops (decision record 0023). Empty unless `pre` is written.
    #[serde(default)]
    pub recomputed: Vec<usize>,
    /// SwiGLU's up projection ([`Epilogue::has_up`]), which the step computes before its
    /// epilogue reads it as `aux`. (Boxed: most steps have none.)
    #[serde(default)]
    pub up: Option<Box<Up>>,
}

/// The up projection `x · w` of a SwiGLU step: a second matmul of the step's left operand,
/// whose output the epilogue multiplies in (decision record 0031).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Up {
    /// The up projection's weight, shaped as the step's `w`.
    pub w: TensorRef,
    /// `x · w`.
    pub out: TensorId,
    /// Something after the step reads `out` (`Autodiff` keeps it for the product's backward):
    /// the step writes it.
    pub kept: bool,
    /// The ops among the step's computing `out` (the matmul and the weight's views), in block
    /// order: a split execution runs them as Burn's ops.
    pub ops: Vec<usize>,
}

/// A bias gradient produced by a fused step: Burn's `sum_dim` ops over every dim of the step's
/// output but the last (one for a rank-2 output, one per leading dim for a rank-3 one), or, with
/// [`BiasGrad::of_rhs`], the one `sum_dim` over the rows of the step's rank-2 right operand.
///
/// The ops stay in the plan as [`Step::BiasGrad`] at their own positions: when the step ran its
/// kernel they are skipped (releasing what they would have released there), otherwise (Burn's
/// side of a race, a fallback) they run as Burn's ops, so the other readers of the step's output
/// still find it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BiasGrad {
    /// The last `sum_dim`'s output, shaped `[1, .., 1, n]`.
    pub out: TensorId,
    /// The `sum_dim` ops, in block order.
    pub ops: Vec<usize>,
    /// Each op's input, with its status there: what skipping the op releases.
    pub reads: Vec<TensorRef>,
    /// The sums are over the step's right operand `w` (rank 2, one op), not its output: a
    /// second pass over `w` after the kernel, which Burn's strided `sum_dim` is far slower at.
    #[serde(default)]
    pub of_rhs: bool,
}

/// One step of a plan.
// Plans are made once a window and their steps read in place at each execution: a fused
// step inline saves a pointer chase per step where `Run`'s unused bytes cost nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Step {
    /// Run block op `index` as Burn would (a view or an op between fused steps).
    Run(usize),
    /// Run a fused kernel.
    Fused(FusedLinear),
    /// Block op `index`, a `sum_dim` of a fused step's [`BiasGrad`]: skipped if that step's
    /// kernel produced the sum, else run as Burn would.
    BiasGrad(usize),
}

/// What Hypatia's optimization runs for a claimed block prefix.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Steps in an order that respects the block's dataflow.
    pub steps: Vec<Step>,
    /// Number of block ops claimed (a prefix of the block).
    pub len: usize,
    /// Scalars that must have a given value for the fused activations to equal Burn's ops
    /// (relu's threshold and fill value, GELU's constants, ...); checked before every execution.
    pub guards: Vec<ScalarGuard>,
}

/// A run-time check of one scalar of the claimed ops.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScalarGuard {
    /// Relative scalar id.
    pub id: u64,
    /// The value it must have (equal within 1e-6 relative, as f32 and f64 spellings of a
    /// constant differ there).
    pub value: f64,
}

impl Plan {
    /// This plan grown over the rest of the block `ops` (as fed), when that rest is views and
    /// bookkeeping and ends in a drop (autodiff freeing what a backward pass used): the
    /// rest runs as Burn's ops after the steps, and the plan then covers the whole block.
    ///
    /// burn-fusion stores a plan that covers its whole block to run as soon as the block's ops
    /// are queued, and finds it again at a sync; a plan that leaves a tail waits for the ops
    /// that followed it when it was explored (the next training step's, or a sync, which then
    /// explores the block again).
    ///
    /// The plan must have been made on a window holding the tail's views (a stray drop aside):
    /// the planner then declined any step whose insides they read.
    pub fn with_free_tail(&self, ops: &[CapturedOp]) -> Option<Plan> {
        ops.last()?
            .is_drop()
            .then(|| self.with_views(ops))
            .flatten()
    }

    /// This plan grown over the rest of the block `ops` (as fed), when that rest is views and
    /// bookkeeping: the rest runs as Burn's ops after the steps.
    ///
    /// Views of a claim's own outputs (the `reshape` of a bias gradient after its `sum_dim`, of
    /// `dx` to the input's shape) belong to the claim: left out, they open the next block, where
    /// Burn's elementwise fuser holds them open while later ops are queued, and the ops after
    /// the claim are grouped, and laid out, otherwise than on Burn (decision record 0026).
    ///
    /// The plan must have been made on a window holding the tail's views (a stray drop aside):
    /// the planner then declined any step whose insides they read.
    pub fn with_views(&self, ops: &[CapturedOp]) -> Option<Plan> {
        let tail = ops.get(self.len..)?;
        (!tail.is_empty() && tail.iter().all(|op| op.kind.is_free())).then(|| Plan {
            steps: (self.steps.iter().cloned())
                .chain((self.len..ops.len()).map(Step::Run))
                .collect(),
            len: ops.len(),
            guards: self.guards.clone(),
        })
    }
}

impl ScalarGuard {
    /// Whether `actual` passes.
    pub fn holds(&self, actual: f64) -> bool {
        (actual - self.value).abs() <= 1e-6 * self.value.abs()
    }
}

impl FusedLinear {
    /// The pattern name used in stats and logs: the epilogue's, or `linear` for a Linear
    /// without activation.
    pub fn pattern(&self) -> FusedPattern {
        match (self.epilogue, &self.bias) {
            (Epilogue::Identity, Some(_)) => FusedPattern::Linear,
            (epilogue, _) => epilogue.pattern(),
        }
    }

    /// The tensors the step reads, in kernel order: x, w, then bias, gate, mask, aux and the
    /// up projection's weight when present.
    pub fn operands(&self) -> impl Iterator<Item = TensorRef> + '_ {
        [
            Some(self.x),
            Some(self.w),
            self.bias,
            self.gate,
            self.mask,
            self.aux,
            self.up.as_ref().map(|up| up.w),
        ]
        .into_iter()
        .flatten()
    }
}

impl Plan {
    /// This plan, made for `canonical`'s window, on the window it came from: op indices and
    /// tensor ids mapped back. The left-out ops inside the claimed prefix (stray drops) run
    /// first, as Burn's ops.
    pub fn on_window(&self, canonical: &Canonical) -> Plan {
        let kept = &canonical.ops;
        let len = self.len.checked_sub(1).map_or(0, |last| kept[last] + 1);
        let ops = |ops: &[usize]| ops.iter().map(|&i| kept[i]).collect::<Vec<_>>();
        let tensor = |id: TensorId| canonical.tensor(id);
        let reference = |r: TensorRef| TensorRef {
            id: tensor(r.id),
            ..r
        };
        let left_out = (0..len).filter(|i| kept.binary_search(i).is_err());
        let steps = left_out
            .map(Step::Run)
            .chain(self.steps.iter().map(|step| match step {
                Step::Run(index) => Step::Run(kept[*index]),
                Step::BiasGrad(index) => Step::BiasGrad(kept[*index]),
                Step::Fused(fused) => Step::Fused(FusedLinear {
                    x: reference(fused.x),
                    w: reference(fused.w),
                    bias: fused.bias.map(reference),
                    gate: fused.gate.map(reference),
                    mask: fused.mask.map(reference),
                    aux: fused.aux.map(reference),
                    out: tensor(fused.out),
                    pre: fused.pre.map(tensor),
                    epilogue: fused.epilogue,
                    params: fused.params.clone(),
                    ops: ops(&fused.ops),
                    matmul_ops: ops(&fused.matmul_ops),
                    matmul_out: tensor(fused.matmul_out),
                    chained: fused.chained,
                    bias_grad: fused.bias_grad.as_ref().map(|grad| {
                        Box::new(BiasGrad {
                            out: tensor(grad.out),
                            ops: ops(&grad.ops),
                            reads: grad.reads.iter().copied().map(reference).collect(),
                            of_rhs: grad.of_rhs,
                        })
                    }),
                    recomputed: ops(&fused.recomputed),
                    up: fused.up.as_ref().map(|up| {
                        Box::new(Up {
                            w: reference(up.w),
                            out: tensor(up.out),
                            kept: up.kept,
                            ops: ops(&up.ops),
                        })
                    }),
                }),
            }))
            .collect();
        Plan {
            steps,
            len,
            guards: self.guards.clone(),
        }
    }

    /// The fused steps that run as one MLP-chain launch where the sizes allow: runs of two or
    /// more consecutive steps, each after the first [`FusedLinear::chained`], as ranges of
    /// step indices of at most `max` steps.
    pub fn chains(&self, max: usize) -> Vec<std::ops::Range<usize>> {
        let chained = |i: usize| matches!(&self.steps[i], Step::Fused(f) if f.chained);
        let mut chains = Vec::new();
        let mut start = 0;
        while start < self.steps.len() {
            let mut end = start + 1;
            let leads = matches!(self.steps[start], Step::Fused(_));
            while leads && end < self.steps.len() && end - start < max && chained(end) {
                end += 1;
            }
            if end - start >= 2 {
                chains.push(start..end);
            }
            start = end;
        }
        chains
    }

    /// The fused steps.
    pub fn fused(&self) -> impl Iterator<Item = &FusedLinear> {
        self.steps.iter().filter_map(|step| match step {
            Step::Fused(fused) => Some(fused),
            Step::Run(_) | Step::BiasGrad(_) => None,
        })
    }
}
