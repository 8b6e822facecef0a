//! Running a run of chained plan steps as one [MLP-chain launch](crate::kernel::chain).
//!
//! The decision (does the kernel take these sizes and layouts, does the cost model prefer one
//! launch) is made once per [`ChainKey`] and kept in a [`ChainDecision`]: a replayed small-batch
//! forward, whose whole latency is a few tens of microseconds of host time, only builds the
//! key, compares it and launches, reading its operands in place.

use super::burn_path::CubeStream;
use super::context::{real_tensor, release};
use super::step::Checks;
use super::verify::{VerifyMode, compare};
use super::{Execution, LinearOptimization, choose_chain, has_matrix_units};
use super::{FallbackReason, after_first_launch, before_first_launch, defer_error, run_unfused};
use crate::config::{ChainPolicy, ExecutionPolicy, FusedPattern, HypatiaConfig};
use crate::kernel::OperandRef;
use crate::kernel::chain::launch_mlp_chain;
use crate::kernel::{ChainLayer, ChainLimits, ChainProblem, check_chain};
use crate::plan::{FusedLinear, Step};
use crate::stats;
use burn_backend::DType;
use burn_cubecl::CubeRuntime;
use burn_cubecl_fusion::CubeFusionHandle;
use burn_fusion::stream::{Context, OrderedExecution};
use burn_ir::TensorIr;

/// How a chain's execution went.
pub(super) enum ChainRun {
    /// One launch ran every layer; `verified` when verify mode compared it with Burn's ops.
    Ran { verified: bool },
    /// The sizes or the cost model want one launch per layer: nothing ran.
    PerLayer,
    /// The chain kernel failed (launch or verification); the steps ran as Burn's ops.
    Failed(FallbackReason),
}

/// Everything a chain's decision reads, as numbers: the policies in force, then per tensor
/// (the input, each weight and bias, the output) its dtype, shape and strides. Built into a
/// buffer reused from one execution to the next, so a replay allocates nothing for it.
#[derive(Debug, Default)]
struct ChainKey(Vec<usize>);

impl ChainKey {
    /// Fills the key for `steps` in `context`; `false` when a tensor or handle is missing
    /// (then nothing is decided, nor remembered).
    fn fill<R: CubeRuntime>(
        &mut self,
        steps: &[&FusedLinear],
        context: &Context<CubeFusionHandle<R>>,
        config: &HypatiaConfig,
    ) -> bool {
        let key = &mut self.0;
        key.clear();
        key.push(policy_number(config.chain, config.execution));
        let last = steps[steps.len() - 1].out;
        let weights = steps
            .iter()
            .flat_map(|s| [Some(s.w.id), s.bias.map(|b| b.id)]);
        let tensors = std::iter::once(Some(steps[0].x.id)).chain(weights);
        for id in tensors.chain([Some(last)]) {
            let Some(id) = id else {
                key.push(usize::MAX);
                continue;
            };
            let Some(tensor) = context.tensors.get(&id) else {
                return false;
            };
            key.extend([dtype_number(tensor.dtype), tensor.shape.len()]);
            key.extend(tensor.shape.iter());
            // The output is not made yet: its shape is all the decision reads of it.
            if id == last {
                continue;
            }
            let Some(handle) = context.handles.get_handle_ref(&tensor.id) else {
                return false;
            };
            key.extend(handle.strides.iter());
        }
        true
    }
}

/// The chain kernels' dtypes apart; every other dtype is one number, which no chain takes.
fn dtype_number(dtype: DType) -> usize {
    match dtype {
        DType::F32 => 1,
        DType::F16 => 2,
        DType::BF16 => 3,
        _ => 0,
    }
}

fn policy_number(chain: ChainPolicy, execution: ExecutionPolicy) -> usize {
    (chain as usize) << 8 | execution as usize
}

/// A chain's decision for the last key it was made for.
#[derive(Debug)]
struct ChainMemo {
    key: Vec<usize>,
    /// The launch to make; `None`: one launch per layer.
    launch: Option<(ChainProblem, ChainLimits)>,
}

/// What one chained run of a plan decided at its last execution, and the buffer the next
/// execution's key is built in.
#[derive(Debug, Default)]
pub(super) struct ChainDecision {
    key: ChainKey,
    memo: Option<ChainMemo>,
}

impl ChainDecision {
    /// The launch `steps` make at their real sizes in `context`, decided anew only when the
    /// key differs from the last execution's; `None`: one launch per layer.
    fn launch<R: CubeRuntime>(
        &mut self,
        steps: &[&FusedLinear],
        context: &Context<CubeFusionHandle<R>>,
        config: &HypatiaConfig,
    ) -> Option<&(ChainProblem, ChainLimits)> {
        if !self.key.fill(steps, context, config) {
            return None;
        }
        if self.memo.as_ref().is_none_or(|memo| memo.key != self.key.0) {
            self.memo = Some(ChainMemo {
                key: self.key.0.clone(),
                launch: decide(steps, context, config),
            });
        }
        self.memo.as_ref()?.launch.as_ref()
    }
}

/// Runs `steps` (a plan's chained run: each step's `x` is the previous step's `out`) as one
/// launch, if the kernel takes the real sizes and the cost model prefers it (`decision`
/// remembers that from the chain's last execution).
pub(super) fn run_chain<R: CubeRuntime, F: CubeStream<R>>(
    steps: &[&FusedLinear],
    context: &mut Context<CubeFusionHandle<R>>,
    execution: &OrderedExecution<F>,
    checks: Checks<'_>,
    decision: &mut ChainDecision,
) -> ChainRun {
    let Some((problem, limits)) = decision.launch(steps, context, checks.config) else {
        return ChainRun::PerLayer;
    };
    let (first_launch, verify, device_key) =
        (checks.launched == 0, checks.verify, checks.device_key);
    let checked = first_launch || verify != VerifyMode::Off;
    let (outputs, client) = {
        // The operands, read in place (`fill` found every tensor and handle).
        let read = |id| {
            let tensor: &TensorIr = context.tensors.get(&id).expect("filled the key");
            let handle = (context.handles.get_handle_ref(&tensor.id)).expect("filled the key");
            OperandRef {
                handle,
                shape: tensor.shape.as_ref(),
            }
        };
        let x = read(steps[0].x.id);
        let client = checked.then(|| x.handle.client.clone());
        if first_launch && let Some(client) = &client {
            before_first_launch(client, device_key);
        }
        let layers: Vec<ChainLayer<'_, R>> = (steps.iter())
            .map(|step| ChainLayer {
                w: read(step.w.id),
                bias: step.bias.map(|b| read(b.id)),
                epilogue: step.epilogue,
            })
            .collect();
        (launch_mlp_chain(problem, *limits, x, &layers), client)
    };
    let last = steps[steps.len() - 1];
    // Only the fallbacks below run the steps' own ops.
    let all_ops = || steps.iter().flat_map(|s| s.ops.iter().copied());
    if let Some(client) = &client {
        if first_launch && let Err(reason) = after_first_launch(client) {
            run_unfused(all_ops(), context, execution);
            return ChainRun::Failed(reason);
        }
        if verify != VerifyMode::Off {
            // Burn's ops produce what the user reads; the chain's output is only compared.
            let x = real_tensor(context, &steps[0].x.id);
            let last_w = real_tensor(context, &last.w.id);
            run_unfused(all_ops(), context, execution);
            let tf32 = has_matrix_units(client, DType::F32);
            return match compare(last, [&x, &last_w], outputs, None, context, tf32) {
                Ok(()) => ChainRun::Ran { verified: true },
                Err(reason) => ChainRun::Failed(reason),
            };
        }
    }
    // Release what the chain read last: the input and every weight and bias (the hidden
    // activations between layers never existed).
    let hidden = |id| steps[..steps.len() - 1].iter().any(|s| s.out == id);
    let read = steps.iter().flat_map(|step| step.operands());
    release(context, read.filter(|r| !hidden(r.id)));
    let out = context.tensors.get(&last.out).expect("filled the key").id;
    context.handles.register_handle(out, outputs.out);
    ChainRun::Ran { verified: false }
}

/// Whether `steps` run as one launch at their real sizes: the kernel's bounds, the layouts it
/// reads and the cost model; the launch's problem if so.
fn decide<R: CubeRuntime>(
    steps: &[&FusedLinear],
    context: &Context<CubeFusionHandle<R>>,
    config: &HypatiaConfig,
) -> Option<(ChainProblem, ChainLimits)> {
    let x = real_tensor(context, &steps[0].x.id);
    let weights: Vec<TensorIr> = steps
        .iter()
        .map(|s| real_tensor(context, &s.w.id))
        .collect();
    let biases: Vec<Option<TensorIr>> = (steps.iter())
        .map(|s| s.bias.map(|b| real_tensor(context, &b.id)))
        .collect();
    let x_handle = context.handles.get_handle_ref(&x.id)?;
    let client = &x_handle.client;
    let shapes: Vec<_> = (steps.iter().zip(&weights).zip(&biases))
        .map(|((step, w), b)| {
            let bias = b.as_ref().map(|b| b.shape.as_ref());
            (w.shape.as_ref(), bias, w.dtype, step.epilogue)
        })
        .collect();
    // Outside the kernel's bounds (or not a chain at all): each step checks its own shapes.
    // The kernel reads weight rows and biases as contiguous vectors.
    let contiguous_n = |tensor: &TensorIr| {
        (context.handles.get_handle_ref(&tensor.id))
            .is_some_and(|h| h.strides.last().is_none_or(|&s| s == 1))
    };
    let layouts = weights.iter().chain(biases.iter().flatten());
    if !layouts.into_iter().all(contiguous_n) {
        return None;
    }
    let limits = ChainLimits::of(client);
    let problem = check_chain((&x.shape, &x_handle.strides, x.dtype), &shapes, limits).ok()?;
    let last = steps[steps.len() - 1];
    let out_shape = context.tensors.get(&last.out).map(|t| t.shape.as_ref());
    (choose_chain(&problem, client, config) && out_shape == Some(problem.out_shape.as_slice()))
        .then_some((problem, limits))
}

impl<R: CubeRuntime> LinearOptimization<R> {
    /// Runs the chained run starting at step `start` as one launch, if there is one and it
    /// runs; returns the index after it, and whether the launch ran (`false`: it failed and the
    /// steps ran as Burn's ops). `None`: run the steps one by one.
    pub(super) fn try_chain<F: CubeStream<R>>(
        &mut self,
        start: usize,
        context: &mut Context<CubeFusionHandle<R>>,
        execution: &OrderedExecution<F>,
        config: &HypatiaConfig,
    ) -> Option<(usize, bool)> {
        let chain = self.chains.iter_mut().find(|c| c.range.start == start)?;
        let (range, check) = (&chain.range, &mut chain.check);
        if check.broken.is_some() {
            return None;
        }
        let steps: Vec<&FusedLinear> = self.plan.steps[range.clone()]
            .iter()
            .filter_map(|step| match step {
                Step::Fused(fused) => Some(fused),
                Step::Run(_) | Step::BiasGrad(_) => None,
            })
            .collect();
        let checks = Checks {
            launched: check.launched,
            verify: match check.verified {
                true => VerifyMode::Off,
                false => config.verify,
            },
            device_key: &self.device_key,
            config,
        };
        let outcome = run_chain(&steps, context, execution, checks, &mut chain.decision);
        let verified = match outcome {
            ChainRun::PerLayer => return None,
            ChainRun::Ran { verified } => verified,
            ChainRun::Failed(reason) => {
                log::warn!("hypatia: mlp-chain runs layer by layer from now on: {reason}");
                if matches!(reason, FallbackReason::Mismatch(_))
                    && config.verify == VerifyMode::Strict
                {
                    defer_error(&self.device_key, reason.to_string());
                }
                stats::record(&self.device_key, |s| {
                    let chain = stats::pattern(s, FusedPattern::MlpChain);
                    *chain.fallbacks.entry(reason.key().to_string()).or_default() += 1;
                });
                check.broken = Some(reason);
                return Some((range.end, false));
            }
        };
        check.launched |= Execution::Tiled.bit();
        check.verified |= verified;
        stats::record(&self.device_key, |s| {
            let chain = stats::pattern(s, FusedPattern::MlpChain);
            chain.tiled += 1;
            chain.verified += verified as u64;
            for step in &steps {
                stats::pattern(s, step.pattern()).chained += 1;
            }
        });
        Some((range.end, true))
    }
}
