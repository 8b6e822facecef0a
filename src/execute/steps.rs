//! The step loop: [`LinearOptimization`] runs a [`Plan`]'s steps in order — a chained run, a
//! raced step, or one fused step — and records what each execution established.

use super::burn::CubeStream;
use super::chain::{ChainDecision, ChainRun, run_chain};
use super::context::*;
use super::race::{Alternative, AlternativeState, ShapeKey, Side, Signature, Turn, settle};
use super::step::*;
use super::{Execution, has_matrix_units};
use crate::config::{F32Precision, FlushPolicy, VerifyMode, config};
use crate::fallback::{FallbackReason, defer_error, run_unfused};
use crate::host::pace::Pace;
use crate::kernel::MAX_CHAIN_LAYERS;
use crate::plan::{FusedLinear, Plan, Step, TensorRef};
use crate::rewrite::Profile;
use crate::stats;
use burn_backend::DType;
use burn_cubecl::CubeRuntime;
use burn_cubecl_fusion::CubeFusionHandle;
use burn_fusion::stream::{Context, OrderedExecution};
use cubecl::Runtime;
use cubecl::device::{Device, DeviceService};
use cubecl::device_handle::DeviceHandle;
use cubecl::prelude::ComputeClient;
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
        Self::with_alternatives(plan, Vec::new(), device)
    }

    /// An optimization running `plan` on `device`, racing its steps against Burn's
    /// `alternatives` (one per step; missing ones are `None`).
    pub fn with_alternatives(
        plan: impl Into<Arc<Plan>>,
        mut alternatives: Vec<Option<Alternative<R>>>,
        device: R::Device,
    ) -> Self {
        let plan: Arc<Plan> = plan.into();
        alternatives.resize_with(plan.steps.len(), || None);
        Self {
            alternatives,
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

    /// Runs the plan: each fused step as one kernel, unless its checks fail, then its ops.
    pub fn execute<F: CubeStream<R>>(
        &mut self,
        context: &mut Context<CubeFusionHandle<R>>,
        execution: &OrderedExecution<F>,
    ) {
        let start = std::time::Instant::now();
        // Decided before the steps run: they may release the tensors whose shapes it reads.
        let policy = config().flush;
        let gpu_us = match policy {
            FlushPolicy::Auto | FlushPolicy::Paced => self.predicted_gpu_us(context),
            FlushPolicy::Never | FlushPolicy::Blocks => 0.0,
        };
        let flush = policy.flushes(gpu_us);
        let chained = self.run_steps(context, execution);
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
    /// (a step whose shapes are unknown counts 0).
    pub(super) fn predicted_gpu_us(&self, context: &Context<CubeFusionHandle<R>>) -> f64 {
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
                Profile::for_device(matrix_units, config().profile.as_deref())
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
            if let Some((end, launched)) = self.try_chain(index, context, execution) {
                (index, chained) = (end, chained || launched);
                continue;
            }
            match self.race_turn(index, context) {
                Some(race) => self.run_raced(index, race, context, execution),
                None => self.run_step(index, context, execution),
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
                    config().verify
                };
                let checks = Checks {
                    launched: check.launched,
                    verify,
                    device_key: &self.device_key,
                };
                run_fused(fused, context, execution, checks)
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
                    report_broken(&self.device_key, fused, &reason);
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
/// strict verify mode a mismatch also fails the user's next sync or read.
pub(super) fn report_broken(device_key: &str, step: &FusedLinear, reason: &FallbackReason) {
    log::warn!(
        "hypatia: {} runs Burn's ops from now on: {reason}",
        step.pattern()
    );
    if matches!(reason, FallbackReason::Mismatch(_)) && config().verify == VerifyMode::Strict {
        defer_error(device_key, reason.to_string());
    }
}

/// A step's race at this execution: its real shape, its turn, and the device to time on.
pub(super) struct RaceRun<R: CubeRuntime> {
    key: ShapeKey,
    signature: Signature,
    turn: Turn,
    pattern: crate::FusedPattern,
    /// The device, when the run is timed.
    client: Option<ComputeClient<R>>,
}

impl<R: CubeRuntime> LinearOptimization<R> {
    /// Step `index`'s turn in its race against Burn's side, if it races now: it has an
    /// alternative, its kernel is not broken, and the policy races its dtype on this device.
    pub(super) fn race_turn(
        &mut self,
        index: usize,
        context: &Context<CubeFusionHandle<R>>,
    ) -> Option<RaceRun<R>> {
        let Step::Fused(fused) = &self.plan.steps[index] else {
            return None;
        };
        if self.checks[index].broken.is_some() {
            return None;
        }
        let alternative = self.alternatives.get_mut(index)?.as_mut()?;
        let [x, w] = [fused.x, fused.w].map(|r| {
            (context.tensors.get(&r.id)).expect("every tensor of a claimed block is in the context")
        });
        if x.dtype == DType::F32 && config().f32 == F32Precision::Exact {
            // Burn's side may multiply f32 as TF32: exact f32 everywhere is Hypatia's side
            // alone. Under the default Burn's side is Burn's own f32 (decision record 0014).
            return None;
        }
        let x_handle = context.handles.get_handle_ref(&x.id)?;
        // A weight made by the step's own views has no handle yet: its shape keys it.
        let w_strides = (context.handles.get_handle_ref(&w.id)).map_or(&[][..], |h| &h.strides);
        let key = ShapeKey::new(&x.shape, &w.shape, &x_handle.strides, w_strides)?;
        let signature = Signature::of(fused, x.dtype);
        let turn = alternative.turn(&key, signature)?;
        Some(RaceRun {
            key,
            signature,
            turn,
            pattern: fused.pattern(),
            client: turn.timed.then(|| x_handle.client.clone()),
        })
    }

    pub(super) fn alternative(&mut self, index: usize) -> &mut Alternative<R> {
        self.alternatives[index]
            .as_mut()
            .expect("a racing step has an alternative")
    }

    /// Runs step `index` on the side its race gives it, timing the run when the race asks.
    pub(super) fn run_raced<F: CubeStream<R>>(
        &mut self,
        index: usize,
        race: RaceRun<R>,
        context: &mut Context<CubeFusionHandle<R>>,
        execution: &OrderedExecution<F>,
    ) {
        let start = race.client.as_ref().map(settle);
        match race.turn.side {
            Side::Hypatia => self.run_step(index, context, execution),
            Side::Burn => self.alternative(index).run(context, execution),
        }
        let elapsed =
            (race.client.as_ref().zip(start)).map(|(client, start)| settle(client) - start);
        let decided = race
            .turn
            .counts
            .then(|| {
                self.alternative(index)
                    .record(&race.key, race.signature, race.turn, elapsed)
            })
            .flatten();
        if let Some((winner, [hypatia, burn])) = decided {
            log::debug!(
                "hypatia: {} at {:?} runs {} from now on ({hypatia:.1} µs Hypatia, {burn:.1} µs Burn's side)",
                race.pattern,
                race.key,
                match winner {
                    Side::Hypatia => "Hypatia's kernel",
                    Side::Burn => "Burn's side",
                }
            );
        }
        if race.turn.counts || race.turn.side == Side::Burn {
            stats::record(&self.device_key, |s| {
                let counters = stats::pattern(s, race.pattern);
                counters.racing += race.turn.counts as u64;
                counters.raced += decided.is_some() as u64;
                counters.burn_fused += (race.turn.side == Side::Burn) as u64;
            });
        }
    }
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
        let first_launch = check.launched == 0;
        let verify = if check.verified {
            VerifyMode::Off
        } else {
            config().verify
        };
        let outcome = run_chain(
            &steps,
            context,
            execution,
            first_launch,
            verify,
            &self.device_key,
            &mut chain.decision,
        );
        let verified = match outcome {
            ChainRun::PerLayer => return None,
            ChainRun::Ran { verified } => verified,
            ChainRun::Failed(reason) => {
                log::warn!("hypatia: mlp-chain runs layer by layer from now on: {reason}");
                if matches!(reason, FallbackReason::Mismatch(_))
                    && config().verify == VerifyMode::Strict
                {
                    defer_error(&self.device_key, reason.to_string());
                }
                stats::record(&self.device_key, |s| {
                    let chain = stats::pattern(s, crate::FusedPattern::MlpChain);
                    *chain.fallbacks.entry(reason.key().to_string()).or_default() += 1;
                });
                check.broken = Some(reason);
                return Some((range.end, false));
            }
        };
        check.launched |= Execution::Tiled.bit();
        check.verified |= verified;
        stats::record(&self.device_key, |s| {
            let chain = stats::pattern(s, crate::FusedPattern::MlpChain);
            chain.tiled += 1;
            chain.verified += verified as u64;
            for step in &steps {
                stats::pattern(s, step.pattern()).chained += 1;
            }
        });
        Some((range.end, true))
    }
}
