//! The step loop: [`LinearOptimization`] runs a [`Plan`]'s steps in order — a chained run, a
//! raced step, or one fused step — and records what each execution established.

use super::burn_path::CubeStream;
use super::chain::ChainDecision;
use super::context::*;
use super::race::{Alternative, AlternativeState};
use super::step::*;
use super::{Execution, has_matrix_units};
use super::{FallbackReason, defer_error, run_unfused};
use crate::config::{FlushPolicy, HypatiaConfig, VerifyMode};
use crate::host::pace::Pace;
use crate::kernel::MAX_CHAIN_LAYERS;
use crate::plan::{FusedLinear, Plan, Step, TensorRef};
use crate::rewrite::Profile;
use crate::stats;
use burn_cubecl::CubeRuntime;
use burn_cubecl_fusion::CubeFusionHandle;
use burn_cubecl_fusion::optim::elemwise::{ElemwiseOptimization, ElemwiseOptimizationState};
use burn_fusion::stream::{Context, OrderedExecution};
use cubecl::Runtime;
use cubecl::device::{Device, DeviceService};
use cubecl::device_handle::DeviceHandle;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

/// Executes a [`Plan`] on a device.
pub struct LinearOptimization<R: CubeRuntime> {
    pub(super) plan: Arc<Plan>,
    pub(super) device_key: String,
    /// Per step of the plan: what its first executions established.
    pub(super) checks: Vec<StepCheck>,
    /// The plan's chained runs, and what their executions established.
    pub(super) chains: Vec<ChainCheck>,
    /// Per step of the plan: Burn's own way of running its ops, raced against it.
    pub(super) alternatives: Vec<Option<Alternative<R>>>,
    /// Per step of the plan: Burn's elementwise fusion of its recomputed ops, if it has any
    /// (see [`recompute_fused`](super::recompute_fused)).
    pub(super) recomputes: Vec<Option<ElemwiseOptimization<R>>>,
    /// This execution's `sum_dim` ops whose bias gradient a fused kernel already produced,
    /// each with its input (what skipping it releases).
    pub(super) summed: Vec<(usize, TensorRef)>,
    /// CubeCL's channel to the device thread, to hand it this block's launches at once (see
    /// [`FlushPolicy`]).
    pub(super) device_thread: DeviceHandle<<R as Runtime>::Server>,
    /// The device thread's flushes (see [`FlushPolicy`]).
    pub(super) pace: &'static Pace,
    /// The device's profile, once an execution has looked at the device.
    pub(super) profile: OnceLock<&'static Profile>,
    pub(super) _runtime: PhantomData<R>,
}

/// What is known of one chained run of steps of this optimization.
pub(super) struct ChainCheck {
    /// The steps.
    pub(super) range: Range<usize>,
    /// Its first launch and verification, as for a step.
    pub(super) check: StepCheck,
    /// The decision of its last execution, and the sizes and policies it was made for.
    pub(super) decision: ChainDecision,
}

/// What is known of one fused step of this optimization.
#[derive(Clone, Debug, Default)]
pub(super) struct StepCheck {
    /// The executions (bit `Execution as u8`) whose first launch was flushed without error.
    pub(super) launched: u8,
    /// Verify mode compared it with Burn's ops, and they matched.
    pub(super) verified: bool,
    /// A failure of the kernel itself: the step runs Burn's ops from now on.
    pub(super) broken: Option<FallbackReason>,
}

impl<R: CubeRuntime> LinearOptimization<R> {
    /// An optimization running `plan` on `device`.
    pub fn new(plan: impl Into<Arc<Plan>>, device: R::Device) -> Self {
        Self::with_burn_parts(plan, Vec::new(), Vec::new(), device)
    }

    /// An optimization running `plan` on `device`, racing its steps against Burn's
    /// `alternatives` and running their recomputed ops through Burn's `recomputes` (each one
    /// per step; missing ones are `None`).
    pub fn with_burn_parts(
        plan: impl Into<Arc<Plan>>,
        mut alternatives: Vec<Option<Alternative<R>>>,
        mut recomputes: Vec<Option<ElemwiseOptimization<R>>>,
        device: R::Device,
    ) -> Self {
        let plan: Arc<Plan> = plan.into();
        alternatives.resize_with(plan.steps.len(), || None);
        recomputes.resize_with(plan.steps.len(), || None);
        Self {
            alternatives,
            recomputes,
            checks: vec![StepCheck::default(); plan.steps.len()],
            chains: (plan.chains(MAX_CHAIN_LAYERS).into_iter())
                .map(|range| ChainCheck {
                    range,
                    check: StepCheck::default(),
                    decision: ChainDecision::default(),
                })
                .collect(),
            plan,
            device_key: stats::device_key(&device),
            device_thread: DeviceHandle::new(device.to_id()),
            pace: Pace::of(device.to_id(), <R::Server as DeviceService>::stage()),
            profile: OnceLock::new(),
            summed: Vec::new(),
            _runtime: PhantomData,
        }
    }

    /// The plan it runs.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Burn's alternatives of its steps, as states.
    pub fn alternative_states(&self) -> Vec<Option<AlternativeState>> {
        let state = |a: &Option<Alternative<R>>| a.as_ref().map(Alternative::to_state);
        self.alternatives.iter().map(state).collect()
    }

    /// Burn's fusions of its steps' recomputed ops, as states.
    pub fn recompute_states(&self) -> Vec<Option<ElemwiseOptimizationState>> {
        let state = |r: &Option<ElemwiseOptimization<R>>| r.as_ref().map(|r| r.to_state());
        self.recomputes.iter().map(state).collect()
    }

    /// Runs the plan under `config` (the configuration in force, read once for the whole
    /// execution by the caller): each fused step as one kernel, unless its checks fail, then
    /// its ops.
    pub fn execute<F: CubeStream<R>>(
        &mut self,
        context: &mut Context<CubeFusionHandle<R>>,
        execution: &OrderedExecution<F>,
        config: &HypatiaConfig,
    ) {
        let start = std::time::Instant::now();
        // Decided before the steps run: they may release the tensors whose shapes it reads.
        let policy = config.flush;
        let gpu_us = match policy {
            FlushPolicy::Auto | FlushPolicy::Paced => self.predicted_gpu_us(context, config),
            FlushPolicy::Never | FlushPolicy::Blocks => 0.0,
        };
        let flush = policy.flushes(gpu_us);
        let chained = self.run_steps(context, execution, config);
        // Without waiting: the device thread starts on this block's launches now, instead of
        // when 32 tasks have queued up behind them. A chain launch is a small-batch forward,
        // whose caller waits for it next: flushed when the thread is idle, so the kernel
        // starts while the caller's `sync` is still on its way.
        let paced = match policy {
            FlushPolicy::Paced => true,
            FlushPolicy::Auto => chained,
            FlushPolicy::Never | FlushPolicy::Blocks => false,
        };
        let flushed = match (flush, paced) {
            (true, true) => {
                self.pace.flush(&self.device_thread);
                true
            }
            (true, false) => {
                self.device_thread.flush_queue();
                true
            }
            (false, true) => self.pace.flush_if_idle(&self.device_thread),
            (false, false) => false,
        };
        let nanos = start.elapsed().as_nanos() as u64;
        stats::record(&self.device_key, |s| {
            s.host.execute_nanos += nanos;
            s.host.executions += 1;
            s.host.flushes += flushed as u64;
        });
    }

    /// The device profile's prediction of the GPU time of this execution's fused steps, µs
    /// (a step whose shapes are unknown counts 0); the profile is `config`'s, else the
    /// device's built-in one.
    pub(super) fn predicted_gpu_us(
        &self,
        context: &Context<CubeFusionHandle<R>>,
        config: &HypatiaConfig,
    ) -> f64 {
        let mut total = 0.0;
        for fused in self.plan.fused() {
            let [Some(x), Some(w)] = [fused.x, fused.w].map(|r| context.tensors.get(&r.id)) else {
                continue;
            };
            let Some([m, k, n]) = Profile::matmul_dims(x.shape.as_ref(), w.shape.as_ref()) else {
                continue;
            };
            let profile = *self.profile.get_or_init(|| {
                let matrix_units = (context.handles.get_handle_ref(&x.id))
                    .is_some_and(|handle| has_matrix_units(&handle.client, x.dtype));
                Profile::for_device(matrix_units, config.profile.as_deref())
            });
            total += profile.gpu_time(m, k, n, x.dtype);
        }
        total
    }

    /// Runs the plan's steps; returns whether an MLP-chain launch ran.
    pub(super) fn run_steps<F: CubeStream<R>>(
        &mut self,
        context: &mut Context<CubeFusionHandle<R>>,
        execution: &OrderedExecution<F>,
        config: &HypatiaConfig,
    ) -> bool {
        if let Err(reason) = check_guards(&self.plan, context) {
            for step in self.plan.fused() {
                record_fallback(&self.device_key, step, &reason);
            }
            run_unfused(0..self.plan.len, context, execution);
            return false;
        }
        self.summed.clear();
        let (mut index, mut chained) = (0, false);
        while index < self.plan.steps.len() {
            if let Some((end, launched)) = self.try_chain(index, context, execution, config) {
                (index, chained) = (end, chained || launched);
                continue;
            }
            match self.race_turn(index, context, config) {
                Some(race) => self.run_raced(index, race, context, execution, config),
                None => self.run_step(index, context, execution, config),
            }
            index += 1;
        }
        chained
    }

    /// Runs step `index` on Hypatia's side: its kernel, or Burn's ops where that cannot run.
    pub(super) fn run_step<F: CubeStream<R>>(
        &mut self,
        index: usize,
        context: &mut Context<CubeFusionHandle<R>>,
        execution: &OrderedExecution<F>,
        config: &HypatiaConfig,
    ) {
        let (step, check) = (&self.plan.steps[index], &mut self.checks[index]);
        let fused = match step {
            Step::Run(index) => {
                run_unfused([*index], context, execution);
                return;
            }
            Step::BiasGrad(index) => {
                match self.summed.iter().find(|(op, _)| op == index) {
                    Some((_, read)) => skip_sum(*read, context),
                    None => run_unfused([*index], context, execution),
                }
                return;
            }
            Step::Fused(fused) => fused,
        };
        let outcome = match &check.broken {
            Some(reason) => {
                run_unfused(fused.ops.iter().copied(), context, execution);
                Err(reason.clone())
            }
            None => {
                let verify = if check.verified {
                    VerifyMode::Off
                } else {
                    config.verify
                };
                let checks = Checks {
                    launched: check.launched,
                    verify,
                    device_key: &self.device_key,
                    config,
                };
                let recompute = self.recomputes[index].as_ref();
                run_fused(fused, recompute, context, execution, checks)
            }
        };
        match outcome {
            Ok(ran) => {
                if ran.launched {
                    check.launched |= ran.kind.bit();
                }
                if let (true, Some(grad)) = (ran.summed, &fused.bias_grad) {
                    self.summed
                        .extend(grad.ops.iter().copied().zip(grad.reads.iter().copied()));
                }
                check.verified |= ran.verified;
                stats::record(&self.device_key, |s| {
                    let counters = stats::pattern(s, fused.pattern());
                    counters.verified += ran.verified as u64;
                    counters.bias_grads += ran.summed as u64;
                    match ran.kind {
                        Execution::Tiled => counters.tiled += 1,
                        Execution::TensorCore => counters.tensor_core += 1,
                        Execution::Split => counters.split += 1,
                    }
                });
            }
            Err(reason) => {
                if reason.is_permanent() && check.broken.is_none() {
                    report_broken(&self.device_key, fused, &reason, config.verify);
                    check.broken = Some(reason.clone());
                }
                record_fallback(&self.device_key, fused, &reason);
            }
        }
    }
}

pub(super) fn record_fallback(device_key: &str, step: &FusedLinear, reason: &FallbackReason) {
    log::debug!(
        "hypatia: {} fell back to Burn's ops: {reason}",
        step.pattern()
    );
    stats::record(device_key, |s| {
        let pattern = stats::pattern(s, step.pattern());
        *pattern
            .fallbacks
            .entry(reason.key().to_string())
            .or_default() += 1;
    });
}

/// A step's kernel failed to launch or disagreed with Burn's ops: said once, loudly; in
/// strict verify mode (`verify`) a mismatch also fails the user's next sync or read.
pub(super) fn report_broken(
    device_key: &str,
    step: &FusedLinear,
    reason: &FallbackReason,
    verify: VerifyMode,
) {
    log::warn!(
        "hypatia: {} runs Burn's ops from now on: {reason}",
        step.pattern()
    );
    if matches!(reason, FallbackReason::Mismatch(_)) && verify == VerifyMode::Strict {
        defer_error(device_key, reason.to_string());
    }
}
