//! [`LinearOptimization`]: runs a [`Plan`] — fused kernels, or Burn's ops where they can't run.

use super::HypatiaRuntime;
use super::chain::{ChainDecision, ChainRun, run_chain};
use super::pace::Pace;
use super::race::{Alternative, AlternativeState, ShapeKey, Side, Signature, Turn, settle};
use crate::config::{FlushPolicy, VerifyMode, config};
use crate::fallback::verify::{self, Difference, Mismatch};
use crate::fallback::{
    FallbackReason, after_first_launch, before_first_launch, defer_error, run_unfused,
};
use crate::kernel::chain::MAX_CHAIN_LAYERS;
use crate::kernel::tensor_core::tensor_core_linear;
use crate::kernel::{
    EpilogueInputs, Execution, LinearOutputs, Operand, Profile, check_gate, check_linear,
    choose_execution, has_matrix_units, launch_bias_activation, launch_fused_linear,
};
use crate::plan::{FusedLinear, Plan, Step, TensorRef};
use crate::stats;
use burn_backend::DType;
use burn_cubecl::CubeRuntime;
use burn_cubecl_fusion::CubeFusionHandle;
use burn_fusion::stream::{Context, OrderedExecution, ScalarId};
use burn_ir::{ScalarIr, TensorIr, TensorStatus};
use cubecl::Runtime;
use cubecl::device::{Device, DeviceService};
use cubecl::device_handle::DeviceHandle;
use cubecl::prelude::ComputeClient;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

/// Executes a [`Plan`] on a device.
pub struct LinearOptimization<R: CubeRuntime> {
    plan: Arc<Plan>,
    device_key: String,
    /// Per step of the plan: what its first executions established.
    checks: Vec<StepCheck>,
    /// The plan's chained runs, and what their executions established.
    chains: Vec<ChainCheck>,
    /// Per step of the plan: Burn's own way of running its ops, raced against it.
    alternatives: Vec<Option<Alternative<R>>>,
    /// This execution's `sum_dim` ops whose bias gradient a fused kernel already produced,
    /// each with its input (what skipping it releases).
    summed: Vec<(usize, TensorRef)>,
    /// CubeCL's channel to the device thread, to hand it this block's launches at once (see
    /// [`FlushPolicy`]).
    device_thread: DeviceHandle<<R as Runtime>::Server>,
    /// The device thread's flushes (see [`FlushPolicy`]).
    pace: &'static Pace,
    /// The device's profile, once an execution has looked at the device.
    profile: OnceLock<&'static Profile>,
    _runtime: PhantomData<R>,
}

/// What is known of one chained run of steps of this optimization.
struct ChainCheck {
    /// The steps.
    range: Range<usize>,
    /// Its first launch and verification, as for a step.
    check: StepCheck,
    /// The decision of its last execution, and the sizes and policies it was made for.
    decision: ChainDecision,
}

/// What is known of one fused step of this optimization.
#[derive(Clone, Debug, Default)]
struct StepCheck {
    /// The executions (bit `Execution as u8`) whose first launch was flushed without error.
    launched: u8,
    /// Verify mode compared it with Burn's ops, and they matched.
    verified: bool,
    /// A failure of the kernel itself: the step runs Burn's ops from now on.
    broken: Option<FallbackReason>,
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
    pub fn execute(
        &mut self,
        context: &mut Context<CubeFusionHandle<R>>,
        execution: &OrderedExecution<HypatiaRuntime<R>>,
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
    fn predicted_gpu_us(&self, context: &Context<CubeFusionHandle<R>>) -> f64 {
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
                Profile::for_device(matrix_units, &config())
            });
            total += profile.gpu_time(m, k, n, x.dtype);
        }
        total
    }

    /// Runs the plan's steps; returns whether an MLP-chain launch ran.
    fn run_steps(
        &mut self,
        context: &mut Context<CubeFusionHandle<R>>,
        execution: &OrderedExecution<HypatiaRuntime<R>>,
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
    fn run_step(
        &mut self,
        index: usize,
        context: &mut Context<CubeFusionHandle<R>>,
        execution: &OrderedExecution<HypatiaRuntime<R>>,
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
                        Execution::Tiled => counters.executed += 1,
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

/// A step's race at this execution: its real shape, its turn, and the device to time on.
struct RaceRun<R: CubeRuntime> {
    key: ShapeKey,
    signature: Signature,
    turn: Turn,
    pattern: &'static str,
    /// The device, when the run is timed.
    client: Option<ComputeClient<R>>,
}

impl<R: CubeRuntime> LinearOptimization<R> {
    /// Step `index`'s turn in its race against Burn's side, if it races now: it has an
    /// alternative, its kernel is not broken, and the policy races its dtype on this device.
    fn race_turn(
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
        if config().exact_f32(x.dtype) {
            // Burn's side multiplies f32 as TF32: exact f32 is Hypatia's side alone.
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

    fn alternative(&mut self, index: usize) -> &mut Alternative<R> {
        self.alternatives[index]
            .as_mut()
            .expect("a racing step has an alternative")
    }

    /// Runs step `index` on the side its race gives it, timing the run when the race asks.
    fn run_raced(
        &mut self,
        index: usize,
        race: RaceRun<R>,
        context: &mut Context<CubeFusionHandle<R>>,
        execution: &OrderedExecution<HypatiaRuntime<R>>,
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
    fn try_chain(
        &mut self,
        start: usize,
        context: &mut Context<CubeFusionHandle<R>>,
        execution: &OrderedExecution<HypatiaRuntime<R>>,
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
                    let chain = stats::pattern(s, CHAIN_PATTERN);
                    *chain.fallbacks.entry(reason.key().to_string()).or_default() += 1;
                });
                check.broken = Some(reason);
                return Some((range.end, false));
            }
        };
        check.launched |= Execution::Tiled.bit();
        check.verified |= verified;
        stats::record(&self.device_key, |s| {
            let chain = stats::pattern(s, CHAIN_PATTERN);
            chain.executed += 1;
            chain.verified += verified as u64;
            for step in &steps {
                stats::pattern(s, step.pattern()).chained += 1;
            }
        });
        Some((range.end, true))
    }
}

/// The pattern name of MLP-chain launches in [`FusionStats`](crate::FusionStats).
pub const CHAIN_PATTERN: &str = "mlp-chain";

fn record_fallback(device_key: &str, step: &FusedLinear, reason: &FallbackReason) {
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
fn report_broken(device_key: &str, step: &FusedLinear, reason: &FallbackReason) {
    log::warn!(
        "hypatia: {} runs Burn's ops from now on: {reason}",
        step.pattern()
    );
    if matches!(reason, FallbackReason::Mismatch(_)) && config().verify == VerifyMode::Strict {
        defer_error(device_key, reason.to_string());
    }
}

/// The value of relative scalar `id` in this execution's context (NaN when absent).
fn scalar_value<H>(context: &Context<H>, id: u64) -> f64 {
    match context.scalars.get(&ScalarId { value: id }) {
        Some(ScalarIr::Float(v)) => *v,
        Some(ScalarIr::Int(v)) => *v as f64,
        Some(ScalarIr::UInt(v)) => *v as f64,
        Some(ScalarIr::Bool(_)) | None => f64::NAN,
    }
}

/// The plan's scalars are ids; the values the fused activations assume must hold now.
fn check_guards<H>(plan: &Plan, context: &Context<H>) -> Result<(), FallbackReason> {
    for guard in &plan.guards {
        let value = scalar_value(context, guard.id);
        if !guard.holds(value) {
            return Err(FallbackReason::ScalarMismatch {
                id: guard.id,
                value,
                expected: guard.value,
            });
        }
    }
    Ok(())
}

/// The epilogue's run-time parameters of `step` in this execution (LeakyReLU's slope, clamp's
/// bounds), as the kernels read them.
fn step_params<H>(step: &FusedLinear, context: &Context<H>) -> [f32; 2] {
    let mut params = [0.0f32; 2];
    for (param, &id) in params.iter_mut().zip(&step.params) {
        *param = scalar_value(context, id) as f32;
    }
    params
}

/// `tensor`'s handle (left in place) and real shape, as a kernel operand.
pub(super) fn operand<R: CubeRuntime>(
    context: &mut Context<CubeFusionHandle<R>>,
    tensor: &TensorIr,
) -> Operand<R> {
    Operand {
        handle: context
            .handles
            .get_handle(&tensor.id, &TensorStatus::ReadOnly),
        shape: tensor.shape.to_vec(),
    }
}

/// Releases the handles whose last reader (`ReadWrite`) was a fused launch, once each (x may
/// also be w).
pub(super) fn release<H: Clone>(
    context: &mut Context<H>,
    consumed: impl IntoIterator<Item = TensorRef>,
) {
    let mut released = Vec::new();
    for reference in consumed {
        if reference.status == TensorStatus::ReadWrite && !released.contains(&reference.id) {
            let id = (context.tensors.get(&reference.id))
                .expect("every tensor of a claimed block is in the context")
                .id;
            context.handles.get_handle(&id, &TensorStatus::ReadWrite);
            released.push(reference.id);
        }
    }
}

pub(super) fn real_tensor<H>(context: &Context<H>, id: &burn_ir::TensorId) -> TensorIr {
    context
        .tensors
        .get(id)
        .cloned()
        .expect("every tensor of a claimed block is in the context")
}

/// What a step's execution must check besides running.
#[derive(Clone, Copy)]
struct Checks<'a> {
    /// The executions (bits) already launched once without error: others are flushed and
    /// checked after their first launch.
    launched: u8,
    /// Compare with Burn's ops.
    verify: VerifyMode,
    device_key: &'a str,
}

/// How a step ran.
struct Ran {
    kind: Execution,
    /// A Hypatia kernel was launched (and, the first time for this execution, checked).
    launched: bool,
    /// Verify mode compared it with Burn's ops, and they matched.
    verified: bool,
    /// The kernel's bias gradient was kept: the step's `sum_dim` ops are skipped.
    summed: bool,
}

/// Skips a `sum_dim` op of a [`BiasGrad`](crate::plan::BiasGrad) a fused kernel already
/// produced, releasing its input `read` as the op would have there (the step's output, where
/// the sum was its last reader; a rank-3 sum's intermediate was never made).
fn skip_sum<H: Clone>(read: TensorRef, context: &mut Context<H>) {
    let id = real_tensor(context, &read.id).id;
    if read.status == TensorStatus::ReadWrite && context.handles.get_handle_ref(&id).is_some() {
        context.handles.get_handle(&id, &TensorStatus::ReadWrite);
    }
}

/// The tensors a fused launch produced, for the step's `out` and `pre`.
struct Produced<R: CubeRuntime> {
    outputs: LinearOutputs<R>,
    /// The ops still to run for Burn's results (all of the step's, or those after the split
    /// matmul), and the handles to release when the fused outputs are kept.
    rest: Vec<usize>,
    consumed: Vec<TensorRef>,
    /// This execution's first launch on this step: flushed and checked after it.
    first_launch: bool,
}

/// One fused step, tiled, on the tensor-core engine or split. On `Err` the step ran as Burn's
/// ops instead (nothing fused was kept) and the reason says why.
fn run_fused<R: CubeRuntime>(
    step: &FusedLinear,
    context: &mut Context<CubeFusionHandle<R>>,
    execution: &OrderedExecution<HypatiaRuntime<R>>,
    checks: Checks<'_>,
) -> Result<Ran, FallbackReason> {
    let [x, w] = [step.x, step.w].map(|r| real_tensor(context, &r.id));
    let (kind, mut produced) = match launch(step, &x, &w, context, execution, checks) {
        Ok(Some(launched)) => launched,
        Ok(None) => {
            // Split with nothing to apply: the inner backend's matmul wrote the output.
            return Ok(Ran {
                kind: Execution::Split,
                launched: false,
                verified: false,
                summed: false,
            });
        }
        Err(reason) => {
            run_unfused(step.ops.iter().copied(), context, execution);
            return Err(reason);
        }
    };
    if step.bias_grad.as_ref().is_some_and(|grad| grad.of_rhs) {
        produced.outputs.bias_grad = sum_rhs(&w, context);
    }
    let client = produced.outputs.out.client.clone();
    if produced.first_launch
        && let Err(reason) = after_first_launch(&client)
    {
        run_unfused(produced.rest.iter().copied(), context, execution);
        return Err(reason);
    }
    if checks.verify != VerifyMode::Off {
        // Burn's ops produce the results the user reads; the fused ones are only compared.
        run_unfused(produced.rest.iter().copied(), context, execution);
        let tf32 = has_matrix_units(&client, DType::F32);
        compare(step, [&x, &w], produced.outputs, context, tf32)?;
        return Ok(Ran {
            kind,
            launched: true,
            verified: true,
            summed: false,
        });
    }
    release(context, produced.consumed);
    let outputs = produced.outputs;
    context
        .handles
        .register_handle(real_tensor(context, &step.out).id, outputs.out);
    if let (Some(pre), Some(handle)) = (step.pre, outputs.pre) {
        let pre = real_tensor(context, &pre);
        context.handles.register_handle(pre.id, handle);
    }
    let summed = match (&step.bias_grad, outputs.bias_grad) {
        (Some(grad), Some(handle)) => {
            let grad = real_tensor(context, &grad.out);
            context.handles.register_handle(grad.id, handle);
            true
        }
        _ => false,
    };
    Ok(Ran {
        kind,
        launched: true,
        verified: false,
        summed,
    })
}

/// `Σ_rows w` for a step whose [`BiasGrad::of_rhs`](crate::plan::BiasGrad::of_rhs): `w` is
/// rank 2, and summed where it is contiguous (else `None`, and Burn's `sum_dim` runs).
fn sum_rhs<R: CubeRuntime>(
    w: &TensorIr,
    context: &mut Context<CubeFusionHandle<R>>,
) -> Option<CubeFusionHandle<R>> {
    let [_, n] = w.shape.as_ref() else {
        return None;
    };
    let handle = operand(context, w).handle;
    if handle.strides.as_ref() != [*n, 1] {
        return None;
    }
    let sums = crate::kernel::alloc(&handle, &crate::kernel::bias_grad_shape(&w.shape), w.dtype);
    crate::kernel::sum_output_rows(&handle, &w.shape, &sums);
    Some(sums)
}

/// Validates the step and launches its kernels, leaving every handle of the context in place
/// (a split runs the inner backend's matmul ops first). `Ok(None)`: a split with no epilogue,
/// fully run. On `Err` nothing ran.
#[allow(clippy::type_complexity)]
fn launch<R: CubeRuntime>(
    step: &FusedLinear,
    x: &TensorIr,
    w: &TensorIr,
    context: &mut Context<CubeFusionHandle<R>>,
    execution: &OrderedExecution<HypatiaRuntime<R>>,
    checks: Checks<'_>,
) -> Result<Option<(Execution, Produced<R>)>, FallbackReason> {
    let bias = step.bias.map(|r| real_tensor(context, &r.id));
    let gate = step.gate.map(|r| real_tensor(context, &r.id));
    let out = real_tensor(context, &step.out);
    let problem = check_linear(
        (&x.shape, x.dtype),
        (&w.shape, w.dtype),
        bias.as_ref().map(|t| (t.shape.as_ref(), t.dtype)),
    )?;
    if problem.out_shape.as_slice() != out.shape.as_ref() {
        return Err(crate::kernel::KernelError::IncompatibleShapes {
            lhs: x.shape.to_vec(),
            rhs: w.shape.to_vec(),
            bias: bias.as_ref().map(|t| t.shape.to_vec()),
        }
        .into());
    }
    let gate = gate.map(|t| operand(context, &t));
    if let Some(gate) = &gate {
        check_gate(gate, &problem.out_shape, problem.dtype)?;
    }
    let client = context
        .handles
        .get_handle_ref(&x.id)
        .expect("operands of a claimed block are materialised")
        .client
        .clone();
    let kind = choose_execution(&problem, step.epilogue, &client, &config());
    if kind == Execution::Split && step.out == step.matmul_out {
        run_unfused(step.matmul_ops.iter().copied(), context, execution);
        return Ok(None);
    }
    let first_launch = checks.launched & kind.bit() == 0;
    if first_launch {
        before_first_launch(&client, checks.device_key);
    }
    let bias = bias.as_ref().map(|t| operand(context, t));
    let epilogue = EpilogueInputs {
        epilogue: step.epilogue,
        bias: bias.as_ref(),
        gate: gate.as_ref(),
        params: step_params(step, context),
        // A sum of `w` runs after the kernel (`sum_rhs`), not in its epilogue.
        bias_grad: step.bias_grad.as_ref().is_some_and(|grad| !grad.of_rhs),
    };
    let write_pre = step.pre.is_some();
    let produced = match kind {
        Execution::Tiled | Execution::TensorCore => {
            let launch = match kind {
                Execution::Tiled => launch_fused_linear,
                _ => tensor_core_linear,
            };
            let (x, w) = (operand(context, x), operand(context, w));
            Produced {
                outputs: launch(&problem, &x, &w, epilogue, write_pre),
                rest: step.ops.clone(),
                consumed: step.operands().collect(),
                first_launch,
            }
        }
        Execution::Split => {
            // The inner backend's matmul (its ops consume x and w as Burn would), then the
            // epilogue kernel over its output, which only the step's other ops read.
            run_unfused(step.matmul_ops.iter().copied(), context, execution);
            let matmul_out = real_tensor(context, &step.matmul_out);
            let matmul_out = operand(context, &matmul_out);
            let outputs = launch_bias_activation(&matmul_out, epilogue, write_pre)
                .expect("check_linear accepted this bias for this output");
            let rest = step.ops.iter().copied();
            Produced {
                outputs,
                rest: rest.filter(|op| !step.matmul_ops.contains(op)).collect(),
                consumed: [step.bias, step.gate]
                    .into_iter()
                    .flatten()
                    .chain([TensorRef {
                        id: step.matmul_out,
                        status: TensorStatus::ReadWrite,
                    }])
                    .collect(),
                first_launch,
            }
        }
    };
    Ok(Some((kind, produced)))
}

/// Compares the fused outputs with Burn's, which the step's ops have just registered. A bias
/// gradient, whose `sum_dim` ops run later, is compared with the column sums of Burn's output
/// (in f64, on the host).
pub(super) fn compare<R: CubeRuntime>(
    step: &FusedLinear,
    [x, w]: [&TensorIr; 2],
    outputs: LinearOutputs<R>,
    context: &mut Context<CubeFusionHandle<R>>,
    tf32: bool,
) -> Result<(), FallbackReason> {
    let out = real_tensor(context, &step.out);
    let mismatch = |tensor, shape: &[usize], difference, tolerance| {
        FallbackReason::Mismatch(Box::new(Mismatch {
            pattern: step.pattern(),
            tensor,
            x: x.shape.to_vec(),
            w: w.shape.to_vec(),
            shape: shape.to_vec(),
            dtype: out.dtype,
            difference,
            tolerance,
        }))
    };
    let read = |handle, shape: &[usize]| {
        verify::read(handle, shape).map_err(|e| FallbackReason::Launch(e.to_string()))
    };
    let tolerance = verify::tolerance(out.dtype, tf32);
    let mut burn_out = None;
    let pairs = [
        (Some(step.out), Some(outputs.out), "output"),
        (step.pre, outputs.pre, "pre-activation"),
    ];
    for (id, fused, tensor) in pairs {
        let (Some(id), Some(fused)) = (id, fused) else {
            continue;
        };
        let burn = real_tensor(context, &id);
        let burn_handle = context
            .handles
            .get_handle(&burn.id, &TensorStatus::ReadOnly);
        #[allow(unused_mut)]
        let mut fused = read(fused, &burn.shape)?;
        #[cfg(test)]
        if crate::fallback::injected() == crate::fallback::Fault::WrongResult {
            fused[0] += 1.0;
        }
        let burn_values = read(burn_handle, &burn.shape)?;
        let difference = Difference::between(&fused, &burn_values);
        if !difference.within(tolerance) {
            return Err(mismatch(tensor, &burn.shape, difference, tolerance));
        }
        if id == step.out {
            burn_out = Some(burn_values);
        }
    }
    // What the bias gradient sums: Burn's output, or the right operand.
    let summed = match &step.bias_grad {
        Some(grad) if grad.of_rhs => {
            let handle = context.handles.get_handle(&w.id, &TensorStatus::ReadOnly);
            Some((read(handle, &w.shape)?, w.shape.to_vec()))
        }
        _ => burn_out.map(|values| (values, out.shape.to_vec())),
    };
    if let (Some(fused), Some((values, summed_shape))) = (outputs.bias_grad, summed) {
        let n = *summed_shape.last().unwrap_or(&1);
        let mut sums = vec![0.0f64; n];
        for (i, value) in values.iter().enumerate() {
            sums[i % n] += *value as f64;
        }
        let sums: Vec<f32> = sums.into_iter().map(|v| v as f32).collect();
        let shape = crate::kernel::bias_grad_shape(&summed_shape);
        let difference = Difference::between(&read(fused, &shape)?, &sums);
        if !difference.within(tolerance) {
            return Err(mismatch("bias gradient", &shape, difference, tolerance));
        }
    }
    Ok(())
}
