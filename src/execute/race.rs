//! The race: a fused step against Burn's own way of running the same ops, per real shape.
//!
//! burn-fusion stores plans by *relative* shapes, so a plan made at one size replays at every
//! other, and the planner cannot know whether Hypatia's kernel beats Burn's at the real sizes
//! (in f32 on an H100 Burn's matmul with its fused epilogue won at 1024×784×2048; decision record 0007).
//! So where Burn's `MatmulFuser` takes a step's matmul and every op of the step after it, the
//! step also holds the `MatmulOptimization` Burn itself would have run for them, or, for a lone
//! matmul (which that fuser does not take), Burn's matmul op. The step's ops before its matmul
//! (views of an operand, such as a rank-3 Linear's weight reshape) run first, as Burn's ops.
//! The ops need not be adjacent in the block: a backward's ReLU gate comes a few ops after its
//! matmul, and Burn's fused matmul takes it as its epilogue, as it would if the ops were
//! adjacent, so Hypatia races the better of Burn's two ways of running them.
//!
//! A step that also produces a bias gradient (a relu backward, or a weight gradient summing its
//! `dy`) races with the gradient's sum on Hypatia's side only: Burn's side leaves it to the
//! `sum_dim` ops, which run later at their own positions. The comparison leans towards Burn, so
//! a step Hypatia keeps is faster than Burn's ops for it.
//!
//! At each new real shape both sides run once to warm up (compilation, autotune), then
//! [`SAMPLES`] times each, alternately, between device syncs; the faster by its best time runs
//! that shape from then on. Every run computes the step's real outputs, so the race costs a few
//! syncs per shape and nothing else.
//!
//! A race is the process's, not a step's: every step with the same [`Signature`] at the same
//! real shapes and strides on one device, in any plan, takes its turns in one race and keeps
//! its winner. A batch of equal Linears, which burn-fusion cuts into windows of a few steps
//! each and so into several plans, is decided within its first eight steps; raced step by step,
//! each of its steps would run Burn's side four times before deciding (on an H100 at
//! 8192×4096×4096 that made the first five batches 0.65 ms
//! a launch instead of 0.39).

use super::LinearOptimization;
use super::burn_path::{CubeStream, execute_burn_at, fuse_all};
use super::run_unfused;
use crate::config::{ExecutionPolicy, F32Precision, FusedPattern, HypatiaConfig, RacePolicy};
use crate::kernel::Epilogue;
use crate::plan::{FusedLinear, Plan, Step};
use crate::stats;
use burn_backend::DType;
use burn_cubecl::CubeRuntime;
use burn_cubecl_fusion::CubeFusionHandle;
use burn_cubecl_fusion::optim::CubeOptimization;
use burn_cubecl_fusion::optim::matmul::{MatmulFuser, MatmulOptimization, MatmulOptimizationState};
use burn_fusion::stream::{Context, OrderedExecution};
use burn_ir::{FloatOperationIr, OperationIr};
use cubecl::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

/// Timed runs of each side per shape, after one warm-up run each.
pub const SAMPLES: u32 = 3;

/// Who runs a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Hypatia's fused kernel (whatever execution the step chooses).
    Hypatia,
    /// Burn's fused matmul for the same ops.
    Burn,
}

/// One execution's turn: who runs, whether the run is timed, and whether it counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    /// Who runs.
    pub side: Side,
    /// Time it between two device syncs.
    pub timed: bool,
    /// The race is undecided: the run (warm-up or timed) is recorded towards the decision.
    pub counts: bool,
}

impl Turn {
    /// A run of `side` that is not timed and does not count: a decided or forced side.
    const fn settled(side: Side) -> Self {
        Self {
            side,
            timed: false,
            counts: false,
        }
    }
}

/// Most values a [`ShapeKey`] holds (x's and w's dims and strides together); a step with more
/// does not race.
const MAX_KEY: usize = 24;

/// A step's real shapes and strides: x's rank, x's dims, w's dims, then x's and w's strides.
/// Built on every execution of a racing step, so it lives on the stack; a race table allocates
/// a copy once per new shape.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ShapeKey {
    dims: [usize; MAX_KEY + 1],
    len: usize,
}

impl ShapeKey {
    /// The key of `x · w` with these strides, if its values fit.
    pub fn new(x: &[usize], w: &[usize], x_strides: &[usize], w_strides: &[usize]) -> Option<Self> {
        let len = 1 + x.len() + w.len() + x_strides.len() + w_strides.len();
        if len > MAX_KEY + 1 {
            return None;
        }
        let mut dims = [0; MAX_KEY + 1];
        dims[0] = x.len();
        let values = x.iter().chain(w).chain(x_strides).chain(w_strides);
        for (slot, &value) in dims[1..].iter_mut().zip(values) {
            *slot = value;
        }
        Some(Self { dims, len })
    }

    fn as_slice(&self) -> &[usize] {
        &self.dims[..self.len]
    }
}

/// What makes two fused steps run the same computation, apart from their real shapes: what
/// the kernel reads, applies and writes, the ops it replaces, and the dtype. Steps with equal
/// signatures share their races (see the module's docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Signature {
    epilogue: Epilogue,
    /// Bias, gate, dropout's mask, pre-activation output.
    operands: [bool; 4],
    /// The bias gradient it also produces: `Some(of_rhs)`.
    bias_grad: Option<bool>,
    ops: usize,
    dtype: DType,
}

impl Signature {
    /// The signature of `step` running in `dtype`.
    pub fn of(step: &FusedLinear, dtype: DType) -> Self {
        Self {
            epilogue: step.epilogue,
            operands: [
                step.bias.is_some(),
                step.gate.is_some(),
                step.mask.is_some(),
                step.pre.is_some(),
            ],
            bias_grad: step.bias_grad.as_ref().map(|grad| grad.of_rhs),
            ops: step.ops.len(),
            dtype,
        }
    }
}

/// One race of the process: a device, a step signature, Burn's side's form (ops before the
/// matmul, and whether Burn's fused matmul or its matmul op runs it), real shapes and strides.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RaceKey {
    device: String,
    signature: Signature,
    prefix: usize,
    burn_fused: bool,
    shape: Vec<usize>,
}

/// Every race of the process, decided or not.
static RACES: LazyLock<Mutex<HashMap<RaceKey, Race>>> = LazyLock::new(Default::default);

/// The race table, even if a thread panicked while holding it (a race is only a choice between
/// two correct sides).
fn races() -> std::sync::MutexGuard<'static, HashMap<RaceKey, Race>> {
    RACES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl core::fmt::Debug for ShapeKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.as_slice().fmt(f)
    }
}

/// The race at one real shape.
#[derive(Clone, Debug, Default)]
struct Race {
    /// Executions so far.
    runs: u32,
    /// Best timed run of each side.
    hypatia: Option<Duration>,
    burn: Option<Duration>,
    winner: Option<Side>,
}

impl Race {
    /// Run 0 warms Hypatia, run 1 warms Burn, then they alternate timed until decided.
    fn turn(&self) -> Turn {
        if let Some(side) = self.winner {
            return Turn::settled(side);
        }
        let side = if self.runs.is_multiple_of(2) {
            Side::Hypatia
        } else {
            Side::Burn
        };
        Turn {
            side,
            timed: self.runs >= 2,
            counts: true,
        }
    }

    /// Counts a run; returns the winner when this run decided the race.
    fn record(&mut self, turn: Turn, elapsed: Option<Duration>) -> Option<Side> {
        self.runs += 1;
        if let (true, Some(elapsed)) = (turn.timed, elapsed) {
            let best = match turn.side {
                Side::Hypatia => &mut self.hypatia,
                Side::Burn => &mut self.burn,
            };
            *best = Some(best.map_or(elapsed, |b| b.min(elapsed)));
        }
        if self.winner.is_none() && self.runs >= 2 + 2 * SAMPLES {
            // A tie keeps Hypatia's kernel: it is the one whose outputs the plan describes.
            let burn_faster = matches!((self.hypatia, self.burn), (Some(h), Some(b)) if b < h);
            let winner = if burn_faster {
                Side::Burn
            } else {
                Side::Hypatia
            };
            self.winner = Some(winner);
            return Some(winner);
        }
        None
    }

    /// The best times, in µs, for logs.
    fn micros(&self) -> [f64; 2] {
        [self.hypatia, self.burn].map(|d| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e6))
    }
}

/// Burn's way of running one step's ops, and the races it ran against the step.
pub struct Alternative<R: CubeRuntime> {
    /// Burn's fused matmul for them; `None` for a lone matmul, which Burn's `MatmulFuser` does
    /// not take (it is not ready without an epilogue op), so burn-fusion runs it as Burn's op.
    optimization: Option<MatmulOptimization<R>>,
    /// Block indices of the step's ops before its matmul, run first as Burn's ops.
    prefix: Vec<usize>,
    /// Block index of the step's matmul, which Burn's optimization runs alone when its own
    /// autotune prefers its unfused path.
    first_op: usize,
    /// The winners of the races this step has seen decided, by real shape: looked up without
    /// the process's lock.
    decided: HashMap<Vec<usize>, Side>,
    /// The device's name in the process's race table.
    device_key: String,
}

/// Serialisable form of an [`Alternative`].
#[derive(Serialize, Deserialize, Debug)]
pub struct AlternativeState {
    optimization: Option<MatmulOptimizationState>,
    #[serde(default)]
    prefix: Vec<usize>,
    first_op: usize,
}

impl<R: CubeRuntime> Alternative<R> {
    /// Burn's way of running the block ops `step_ops` (block order; `ops` are the block's
    /// relative ops, as the fuser was fed them), if Burn's `MatmulFuser` takes the step's
    /// matmul and every step op after it: its fused matmul, or for a lone matmul Burn's op.
    pub fn build(ops: &[OperationIr], step_ops: &[usize], device: &R::Device) -> Option<Self> {
        let matmul = |&i: &usize| {
            matches!(
                ops.get(i),
                Some(OperationIr::Float(_, FloatOperationIr::Matmul(_)))
            )
        };
        let at = step_ops.iter().position(matmul)?;
        let (prefix, fused) = step_ops.split_at(at);
        let optimization = match fused {
            [_matmul] => None,
            _ => match fuse_all(MatmulFuser::<R>::new(device.clone()), ops, fused)? {
                CubeOptimization::Matmul(optimization) => Some(optimization),
                _ => return None,
            },
        };
        Some(Self {
            optimization,
            prefix: prefix.to_vec(),
            first_op: fused[0],
            decided: HashMap::new(),
            device_key: crate::stats::device_key(device),
        })
    }

    /// Its state, for burn-fusion's optimization store.
    pub fn to_state(&self) -> AlternativeState {
        AlternativeState {
            optimization: self.optimization.as_ref().map(MatmulOptimization::to_state),
            prefix: self.prefix.clone(),
            first_op: self.first_op,
        }
    }

    /// Back from [`Self::to_state`].
    pub fn from_state(device: &R::Device, state: AlternativeState) -> Self {
        Self {
            optimization: (state.optimization)
                .map(|state| MatmulOptimization::from_state(device, state)),
            prefix: state.prefix,
            first_op: state.first_op,
            decided: HashMap::new(),
            device_key: crate::stats::device_key(device),
        }
    }

    /// The process's race this step takes part in at real shape `key`.
    fn race_key(&self, key: &ShapeKey, signature: Signature) -> RaceKey {
        RaceKey {
            device: self.device_key.clone(),
            signature,
            prefix: self.prefix.len(),
            burn_fused: self.optimization.is_some(),
            shape: key.as_slice().to_vec(),
        }
    }

    /// This execution's turn at real shape `key` of a step with `signature`, if the step races
    /// under `config`'s policies.
    pub fn turn(
        &mut self,
        key: &ShapeKey,
        signature: Signature,
        config: &HypatiaConfig,
    ) -> Option<Turn> {
        match config.race {
            RacePolicy::Never => return None,
            RacePolicy::Burn => return Some(Turn::settled(Side::Burn)),
            RacePolicy::Always => {}
            RacePolicy::Auto => {
                if config.execution != ExecutionPolicy::Auto {
                    return None;
                }
            }
        }
        if let Some(&side) = self.decided.get(key.as_slice()) {
            return Some(Turn::settled(side));
        }
        let race_key = self.race_key(key, signature);
        let turn = races().get(&race_key).map_or(
            Turn {
                side: Side::Hypatia,
                timed: false,
                counts: true,
            },
            Race::turn,
        );
        if !turn.counts {
            // Decided by another step: remember it here.
            self.decided.insert(race_key.shape, turn.side);
        }
        Some(turn)
    }

    /// Counts a run at `key` that [`Turn::counts`]; returns the winner when this run decided,
    /// with both best times (µs: Hypatia, Burn).
    pub fn record(
        &mut self,
        key: &ShapeKey,
        signature: Signature,
        turn: Turn,
        elapsed: Option<Duration>,
    ) -> Option<(Side, [f64; 2])> {
        let race_key = self.race_key(key, signature);
        let mut races = races();
        let race = races.entry(race_key).or_default();
        let winner = race.record(turn, elapsed)?;
        self.decided.insert(key.as_slice().to_vec(), winner);
        Some((winner, race.micros()))
    }

    /// Runs the step's ops as Burn would: the ops before its matmul, then Burn's optimization
    /// (or its matmul op).
    pub fn run<F: CubeStream<R>>(
        &mut self,
        context: &mut Context<CubeFusionHandle<R>>,
        execution: &OrderedExecution<F>,
    ) {
        run_unfused(self.prefix.iter().copied(), context, execution);
        match &mut self.optimization {
            Some(optimization) => execute_burn_at(optimization, self.first_op, context, execution),
            None => run_unfused([self.first_op], context, execution),
        }
    }
}

/// Burn's alternative for each step of `plan` (`None` where Burn's `MatmulFuser` would not take
/// the step's matmul and every step op after it). `ops` are the block's relative ops.
pub fn alternatives<R: CubeRuntime>(
    plan: &Plan,
    ops: &[OperationIr],
    device: &R::Device,
) -> Vec<Option<Alternative<R>>> {
    let build = |step: &Step| match step {
        Step::Fused(fused) => Alternative::build(ops, &fused.ops, device),
        Step::Run(_) | Step::BiasGrad(_) => None,
    };
    plan.steps.iter().map(build).collect()
}

/// Waits for the device's queue to drain and returns the time: the two ends of a timed run.
pub fn settle<R: Runtime>(client: &ComputeClient<R>) -> Instant {
    // An error here is the step's own or an earlier op's; either way it reaches the user at
    // the next sync or read, where the stream keeps it.
    let _ = cubecl::future::block_on(client.sync());
    Instant::now()
}

/// A step's race at this execution: its real shape, its turn, and the device to time on.
pub(super) struct RaceRun<R: CubeRuntime> {
    key: ShapeKey,
    signature: Signature,
    turn: Turn,
    pattern: FusedPattern,
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
        config: &HypatiaConfig,
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
        if x.dtype == DType::F32 && config.f32 == F32Precision::Exact {
            // Burn's side may multiply f32 as TF32: exact f32 everywhere is Hypatia's side
            // alone. Under the default Burn's side is Burn's own f32 (decision record 0014).
            return None;
        }
        let x_handle = context.handles.get_handle_ref(&x.id)?;
        // A weight made by the step's own views has no handle yet: its shape keys it.
        let w_strides = (context.handles.get_handle_ref(&w.id)).map_or(&[][..], |h| &h.strides);
        let key = ShapeKey::new(&x.shape, &w.shape, &x_handle.strides, w_strides)?;
        let signature = Signature::of(fused, x.dtype);
        let turn = alternative.turn(&key, signature, config)?;
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
        config: &HypatiaConfig,
    ) {
        let start = race.client.as_ref().map(settle);
        match race.turn.side {
            Side::Hypatia => self.run_step(index, context, execution, config),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run(race: &mut Race, times: [u64; 2]) -> Option<Side> {
        let turn = race.turn();
        let micros = match turn.side {
            Side::Hypatia => times[0],
            Side::Burn => times[1],
        };
        race.record(turn, Some(Duration::from_micros(micros)))
    }

    #[test]
    fn warms_each_side_then_alternates_timed_runs() {
        let race = &mut Race::default();
        let mut turns = Vec::new();
        for _ in 0..2 + 2 * SAMPLES {
            turns.push(race.turn());
            run(race, [10, 20]);
        }
        assert_eq!(
            turns[0],
            Turn {
                side: Side::Hypatia,
                timed: false,
                counts: true
            }
        );
        assert_eq!(
            turns[1],
            Turn {
                side: Side::Burn,
                timed: false,
                counts: true
            }
        );
        for (i, turn) in turns.iter().enumerate().skip(2) {
            assert!(turn.timed && turn.counts);
            let expected = if i % 2 == 0 {
                Side::Hypatia
            } else {
                Side::Burn
            };
            assert_eq!(turn.side, expected);
        }
    }

    #[test]
    fn the_faster_best_time_wins_and_runs_untimed_after() {
        for (times, winner) in [([10, 20], Side::Hypatia), ([30, 20], Side::Burn)] {
            let race = &mut Race::default();
            let decided: Vec<_> = (0..2 + 2 * SAMPLES)
                .filter_map(|_| run(race, times))
                .collect();
            assert_eq!(decided, vec![winner]);
            for _ in 0..4 {
                assert_eq!(
                    race.turn(),
                    Turn {
                        side: winner,
                        timed: false,
                        counts: false
                    }
                );
                assert_eq!(run(race, times), None);
            }
        }
    }

    #[test]
    fn warm_up_times_do_not_count() {
        // Burn's warm-up run is fast and Hypatia's slow (compilation), but the timed runs
        // say the opposite.
        let race = &mut Race::default();
        let warm = [(Side::Hypatia, 1000), (Side::Burn, 1)];
        for (side, micros) in warm {
            let turn = race.turn();
            assert_eq!(turn.side, side);
            race.record(turn, Some(Duration::from_micros(micros)));
        }
        let decided: Vec<_> = (0..2 * SAMPLES)
            .filter_map(|_| run(race, [10, 20]))
            .collect();
        assert_eq!(decided, vec![Side::Hypatia]);
    }

    #[test]
    fn a_tie_keeps_hypatia() {
        let race = &mut Race::default();
        let decided: Vec<_> = (0..2 + 2 * SAMPLES)
            .filter_map(|_| run(race, [15, 15]))
            .collect();
        assert_eq!(decided, vec![Side::Hypatia]);
    }
}
