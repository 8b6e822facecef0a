//! Which execution a fused step gets on a device: one tiled kernel, the tensor-core engine, or
//! split.
//!
//! The tiled kernel runs on plain units; it is all a device without matrix units (lavapipe,
//! most integrated GPUs) gets. Where the device has matrix units for the dtype, the step runs on
//! the [tensor-core engine](super::tensor_core), which autotunes per problem over the tiled
//! kernel, Burn's own matmul, cubek-matmul tilings and (on Hopper) Hypatia's `wgmma` kernel, so
//! the choice is measured, never assumed. On every device a step whose ops Burn's fused matmul
//! could run also races it ([`RacePolicy`]): on lavapipe that hands most shapes to Burn.

use super::chain::ChainProblem;
use super::{Epilogue, LinearProblem, Profile};
use burn_backend::DType;
use cubecl::prelude::*;
use std::sync::atomic::{AtomicU8, Ordering};

/// How one fused step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Execution {
    /// One launch: tiled matmul with the epilogue in registers.
    Tiled,
    /// The tensor-core engine: its autotuned fastest candidate for the whole linear.
    TensorCore,
    /// The inner backend's matmul ops, then Hypatia's bias + activation kernel.
    Split,
}

impl Execution {
    /// A distinct bit per execution, for sets of them.
    pub(crate) fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// Override of the automatic choice (tests and benchmarks compare the two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecutionPolicy {
    /// Choose per problem and device (the default).
    Auto,
    /// Always one tiled launch.
    Tiled,
    /// Always the tensor-core engine.
    TensorCore,
    /// Always split.
    Split,
}

static POLICY: Setting<ExecutionPolicy> = Setting::new(
    "HYPATIA_EXECUTION",
    "execution",
    &[
        (ExecutionPolicy::Auto, "auto"),
        (ExecutionPolicy::Tiled, "tiled"),
        (ExecutionPolicy::TensorCore, "tensor-core"),
        (ExecutionPolicy::Split, "split"),
    ],
);

/// Sets the policy for the whole process. Without a call,
/// `HYPATIA_EXECUTION=tiled|tensor-core|split|auto` decides, and `Auto` if unset.
pub fn set_execution_policy(policy: ExecutionPolicy) {
    POLICY.set(policy);
}

/// The policy in force.
pub fn execution_policy() -> ExecutionPolicy {
    POLICY.get()
}

/// A process-wide policy: the last value set, else its environment variable (read once), else
/// its first choice. Each choice is a policy and the name the variable gives it.
struct Setting<P: 'static> {
    /// The index of the policy in force in `choices` (`u8::MAX`: not read yet).
    index: AtomicU8,
    var: &'static str,
    /// What the policy is about, for error messages.
    what: &'static str,
    choices: &'static [(P, &'static str)],
}

impl<P: Copy + PartialEq> Setting<P> {
    const fn new(
        var: &'static str,
        what: &'static str,
        choices: &'static [(P, &'static str)],
    ) -> Self {
        Self {
            index: AtomicU8::new(u8::MAX),
            var,
            what,
            choices,
        }
    }

    fn set(&self, policy: P) {
        let index = self.choices.iter().position(|(p, _)| *p == policy);
        self.index
            .store(index.unwrap_or(0) as u8, Ordering::Relaxed);
    }

    /// The policy `name` names.
    fn parse(&self, name: &str) -> Result<P, String> {
        let choices = self.choices;
        (choices.iter().find(|(_, n)| *n == name))
            .map(|(policy, _)| *policy)
            .ok_or_else(|| {
                let names: Vec<_> = choices.iter().map(|(_, n)| *n).collect();
                format!("unknown {} policy {name:?} (one of {names:?})", self.what)
            })
    }

    fn get(&self) -> P {
        let index = self.index.load(Ordering::Relaxed) as usize;
        if let Some((policy, _)) = self.choices.get(index) {
            return *policy;
        }
        let var = std::env::var(self.var).unwrap_or_default();
        let index = (self.choices.iter().position(|(_, name)| *name == var)).unwrap_or(0);
        self.index.store(index as u8, Ordering::Relaxed);
        self.choices[index].0
    }
}

/// Whether the inner backend's matmul runs `dtype` on matrix units (cmma or mma) here.
///
/// For f32 that is TF32; CubeCL does not always list a TF32 configuration, so any matrix unit
/// for f16 counts too: on the H100 Burn's f32 matmul beat the unit kernel from 1024×784×2048
/// on (0.64x and 0.42x at 2048³, 2026-11-22), and its results differ from exact f32 by TF32
/// rounding.
pub fn has_matrix_units<R: Runtime>(client: &ComputeClient<R>, dtype: DType) -> bool {
    let storage: StorageType = dtype.into();
    let half: StorageType = DType::F16.into();
    let matmul = &client.properties().features.matmul;
    matmul
        .cmma
        .iter()
        .chain(matmul.mma.iter())
        .any(|config| config.a_type == storage || (dtype == DType::F32 && config.a_type == half))
}

/// The execution for `problem` with `epilogue` on `client`'s device under the current policy.
///
/// Without matrix units a plain matmul ([`Epilogue::Identity`]) is split, which is Burn's own
/// matmul and nothing else: the unit kernel has no epilogue pass to save there.
pub fn choose_execution<R: Runtime>(
    problem: &LinearProblem,
    epilogue: Epilogue,
    client: &ComputeClient<R>,
) -> Execution {
    match execution_policy() {
        ExecutionPolicy::Tiled => Execution::Tiled,
        ExecutionPolicy::TensorCore => Execution::TensorCore,
        ExecutionPolicy::Split => Execution::Split,
        ExecutionPolicy::Auto => {
            if exact_f32(problem.dtype) {
                // Every engine candidate but the tiled kernel multiplies f32 as TF32.
                Execution::Tiled
            } else if has_matrix_units(client, problem.dtype) {
                Execution::TensorCore
            } else if epilogue == Epilogue::Identity {
                Execution::Split
            } else {
                Execution::Tiled
            }
        }
    }
}

/// How Hypatia's own kernels multiply f32 on a device with matrix units.
///
/// Burn's f32 matmul on CUDA runs on tensor cores as TF32 (cubek-matmul rounds f32 operands to
/// TF32's 10-bit mantissa whenever a tensor-core kernel runs), so TF32 is what a Burn user's f32
/// model computes today, and it is the default here too. `Exact` runs every f32 step Hypatia
/// claims on the tiled kernel's f32 FMAs instead (no engine, no race against Burn's TF32 side):
/// results within f32 rounding of a float64 reference, at plain-unit speed. Ops Hypatia does not
/// claim run on Burn as before. Devices without matrix units (lavapipe) compute exact f32
/// either way. Decision record 0001.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F32Precision {
    /// Tensor cores, TF32 operands, f32 accumulation (the default).
    Tf32,
    /// f32 FMAs.
    Exact,
}

static F32_PRECISION: Setting<F32Precision> = Setting::new(
    "HYPATIA_F32",
    "f32 precision",
    &[(F32Precision::Tf32, "tf32"), (F32Precision::Exact, "exact")],
);

/// Sets the f32 precision for the whole process. Without a call, `HYPATIA_F32=tf32|exact`
/// decides, and `Tf32` if unset.
pub fn set_f32_precision(precision: F32Precision) {
    F32_PRECISION.set(precision);
}

/// The f32 precision in force.
pub fn f32_precision() -> F32Precision {
    F32_PRECISION.get()
}

/// Whether steps in `dtype` must multiply exact f32 ([`F32Precision::Exact`]).
pub fn exact_f32(dtype: DType) -> bool {
    dtype == DType::F32 && f32_precision() == F32Precision::Exact
}

impl core::str::FromStr for F32Precision {
    type Err = String;

    /// A precision by the name `HYPATIA_F32` takes: `tf32` or `exact`.
    fn from_str(name: &str) -> Result<Self, String> {
        F32_PRECISION.parse(name)
    }
}

/// Which element types the tensor-core engine offers Hypatia's Hopper kernel for (CUDA builds).
/// Its autotune still picks per problem among the candidates offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WgmmaOffer {
    /// f16, bf16, and f32 as TF32 (the default; decision record 0001). Under
    /// [`F32Precision::Exact`] no f32 step reaches the engine.
    Auto,
    /// f16 and bf16 only: f32 runs on the engine's other candidates (cubek's `mma.sync` TF32
    /// tilings, Burn's matmul, the tiled kernel).
    Half,
    /// None: a Hopper GPU measures what a device without `wgmma` (an A100, an RTX card) gets.
    Off,
}

static WGMMA_OFFER: Setting<WgmmaOffer> = Setting::new(
    "HYPATIA_WGMMA",
    "wgmma",
    &[
        (WgmmaOffer::Auto, "auto"),
        (WgmmaOffer::Half, "half"),
        (WgmmaOffer::Off, "off"),
    ],
);

/// The offer in force: `HYPATIA_WGMMA=auto|half|off`, `Auto` if unset. No setter: the engine
/// builds its candidate list once per process, so the variable is read once, before it.
pub fn wgmma_offer() -> WgmmaOffer {
    WGMMA_OFFER.get()
}

impl core::str::FromStr for WgmmaOffer {
    type Err = String;

    /// An offer by the name `HYPATIA_WGMMA` takes: `auto`, `half` or `off`.
    fn from_str(name: &str) -> Result<Self, String> {
        WGMMA_OFFER.parse(name)
    }
}

/// Whether a run of fused layers becomes one MLP-chain launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainPolicy {
    /// Where the kernel takes the sizes and the device's [`Profile`] predicts it faster than
    /// one launch per layer (the default), and no per-layer execution is forced.
    Auto,
    /// Wherever the kernel takes the sizes (tests, benchmarks).
    Always,
    /// Never: every layer runs its own launch.
    Never,
}

static CHAIN_POLICY: Setting<ChainPolicy> = Setting::new(
    "HYPATIA_CHAIN",
    "chain",
    &[
        (ChainPolicy::Auto, "auto"),
        (ChainPolicy::Always, "always"),
        (ChainPolicy::Never, "never"),
    ],
);

/// Sets the chain policy for the whole process. Without a call,
/// `HYPATIA_CHAIN=auto|always|never` decides, and `Auto` if unset.
pub fn set_chain_policy(policy: ChainPolicy) {
    CHAIN_POLICY.set(policy);
}

/// The chain policy in force.
pub fn chain_policy() -> ChainPolicy {
    CHAIN_POLICY.get()
}

/// Whether `chain` (accepted by [`check_chain`](super::chain::check_chain)) runs as one launch
/// on `client`'s device under the current policies.
pub fn choose_chain<R: Runtime>(chain: &ChainProblem, client: &ComputeClient<R>) -> bool {
    match chain_policy() {
        ChainPolicy::Always => true,
        ChainPolicy::Never => false,
        ChainPolicy::Auto => {
            execution_policy() == ExecutionPolicy::Auto
                && Profile::for_device(has_matrix_units(client, chain.dtype)).prefers_chain(chain)
        }
    }
}

/// Whether a fused step is raced against Burn's own way of running the same ops.
///
/// burn-fusion keys plans on relative shapes, so the plan cannot know whether its kernel beats
/// Burn's at the real ones. Where Burn's `MatmulFuser` takes a step's matmul and the step's ops
/// after it, the step holds that optimization too, times both at each new real shape (after one warm-up run of each) and
/// runs the faster from then on (see `runtime::race`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RacePolicy {
    /// Race wherever no execution is forced, on every device: Hypatia's kernel replaces Burn's
    /// matmul there, so there the never-slower promise is measured (the default). On a CPU
    /// through lavapipe, where no Hypatia kernel beats Burn's fused matmul, this hands those
    /// steps to Burn (`benches/results/lavapipe.md`).
    Auto,
    /// Race every step that has Burn's alternative, also under a forced execution policy.
    Always,
    /// Always run Burn's alternative where a step has one (benchmarks, tests).
    Burn,
    /// Never race: Hypatia's kernels run every step.
    Never,
}

static RACE_POLICY: Setting<RacePolicy> = Setting::new(
    "HYPATIA_RACE",
    "race",
    &[
        (RacePolicy::Auto, "auto"),
        (RacePolicy::Always, "always"),
        (RacePolicy::Burn, "burn"),
        (RacePolicy::Never, "never"),
    ],
);

/// Sets the race policy for the whole process. Without a call,
/// `HYPATIA_RACE=auto|always|burn|never` decides, and `Auto` if unset.
pub fn set_race_policy(policy: RacePolicy) {
    RACE_POLICY.set(policy);
}

/// The race policy in force.
pub fn race_policy() -> RacePolicy {
    RACE_POLICY.get()
}

impl core::str::FromStr for RacePolicy {
    type Err = String;

    /// A policy by the name `HYPATIA_RACE` takes: `auto`, `always`, `burn` or `never`.
    fn from_str(name: &str) -> Result<Self, String> {
        RACE_POLICY.parse(name)
    }
}

/// When the launches of a block Hypatia ran are handed to the device.
///
/// CubeCL 0.10 hands tasks to its device thread in batches of 32 (`cubecl-common`'s device
/// channel): a launch waits in the client's buffer until the buffer fills or something blocks
/// on the device. burn-fusion hands ops to its own thread the same way. So after a sync the GPU
/// idles until about a step's worth of tasks has been recorded and run through both threads:
/// on an H100, 0.6-0.93 ms before the first kernel of each training batch of the
/// 8192:1024:4096:1024 MLP, whose step's kernels take 1.65 ms (`tools/timeline.py` over
/// `tools/kernel_timeline.cu`'s trace, `benches/results/nvidia-h100-train.md`).
///
/// Flushing is not free: it fills the buffer with no-op tasks, so burn-fusion's thread waits
/// for CubeCL's thread to finish its batch before it can queue the next launch. Where the host
/// is the bottleneck, that wait is the step's: the same H100 run measured the flush at
/// -2.4 % per step on that MLP and +15-58 % on the host-bound 1024:784:2048:10 one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushPolicy {
    /// Flush a block whose kernels are predicted (by the device [`Profile`]) to keep the GPU
    /// busy for at least [`AUTO_FLUSH_MIN_GPU_US`]: then the GPU, not the host, bounds the
    /// step, and starting it early pays. A block that ran an MLP-chain launch (a small-batch
    /// forward, whose caller waits for it next) is flushed too when the device thread has run
    /// every earlier flush (`runtime::pace`). The default.
    Auto,
    /// Launches wait in CubeCL's buffer, as Burn's own do.
    Never,
    /// After each block Hypatia runs, its launches go to the device thread at once: the buffer
    /// is padded with no-op tasks (`DeviceHandle::flush_queue`, which does not wait).
    Blocks,
    /// As [`Auto`](Self::Auto), and every smaller block is flushed when the device thread has
    /// run every earlier flush (`runtime::pace`), chain launch or not. Not measured in
    /// training.
    Paced,
}

/// The predicted GPU time (µs) of a block's fused kernels from which [`FlushPolicy::Auto`]
/// flushes it: about what the host takes to record one training step of an MLP (0.38-0.45 ms
/// on the H100 machines, `bench_train`'s "before the sync"). A block of less GPU work than
/// that leaves the GPU waiting on the host anyway, and the flush only makes the host wait.
pub const AUTO_FLUSH_MIN_GPU_US: f64 = 500.0;

impl FlushPolicy {
    /// Whether a block whose fused kernels are predicted to take `gpu_us` is flushed whether or
    /// not the device thread is busy.
    pub fn flushes(self, gpu_us: f64) -> bool {
        match self {
            Self::Auto | Self::Paced => gpu_us >= AUTO_FLUSH_MIN_GPU_US,
            Self::Never => false,
            Self::Blocks => true,
        }
    }
}

static FLUSH_POLICY: Setting<FlushPolicy> = Setting::new(
    "HYPATIA_FLUSH",
    "flush",
    &[
        (FlushPolicy::Auto, "auto"),
        (FlushPolicy::Never, "never"),
        (FlushPolicy::Blocks, "blocks"),
        (FlushPolicy::Paced, "paced"),
    ],
);

/// Sets the flush policy for the whole process. Without a call, `HYPATIA_FLUSH=auto|never|blocks|paced`
/// decides, and `Auto` if unset.
pub fn set_flush_policy(policy: FlushPolicy) {
    FLUSH_POLICY.set(policy);
}

/// The flush policy in force.
pub fn flush_policy() -> FlushPolicy {
    FLUSH_POLICY.get()
}

impl core::str::FromStr for FlushPolicy {
    type Err = String;

    /// A policy by the name `HYPATIA_FLUSH` takes: `auto`, `never`, `blocks` or `paced`.
    fn from_str(name: &str) -> Result<Self, String> {
        FLUSH_POLICY.parse(name)
    }
}

/// How Hypatia's backends wait in `Backend::sync`: burn-fusion's thread for CubeCL's device
/// thread (see `runtime::sync`), and `Hypatia<B>`'s caller for burn-fusion's thread (see
/// `runtime::submit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPolicy {
    /// [`Spin`](Self::Spin) on machines of at least `runtime::sync::SPIN_MIN_CORES` cores
    /// while CubeCL's profiling log is off, else [`Park`](Self::Park) (the default).
    Auto,
    /// Ask CubeCL's device thread for its fence without blocking, and queue the caller's
    /// `sync` on burn-fusion's thread without blocking; each waiter spins on its answer for up
    /// to `runtime::sync::SPIN` before parking.
    Spin,
    /// Burn's own waits, which park burn-fusion's thread and the caller at once.
    Park,
}

static SYNC_POLICY: Setting<SyncPolicy> = Setting::new(
    "HYPATIA_SYNC",
    "sync",
    &[
        (SyncPolicy::Auto, "auto"),
        (SyncPolicy::Spin, "spin"),
        (SyncPolicy::Park, "park"),
    ],
);

/// Sets the sync policy for the whole process. Without a call, `HYPATIA_SYNC=auto|spin|park`
/// decides, and `Auto` if unset.
pub fn set_sync_policy(policy: SyncPolicy) {
    SYNC_POLICY.set(policy);
}

/// The sync policy in force.
pub fn sync_policy() -> SyncPolicy {
    SYNC_POLICY.get()
}

impl core::str::FromStr for SyncPolicy {
    type Err = String;

    /// A policy by the name `HYPATIA_SYNC` takes: `auto`, `spin` or `park`.
    fn from_str(name: &str) -> Result<Self, String> {
        SYNC_POLICY.parse(name)
    }
}

/// When `Hypatia<B>` hands the ops it records to burn-fusion's thread (see `runtime::submit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitPolicy {
    /// [`Eager`](Self::Eager) on machines of at least `runtime::sync::SPIN_MIN_CORES` cores,
    /// else [`Batched`](Self::Batched) (the default).
    Auto,
    /// After each op, so burn-fusion's thread fuses the ops while the caller records the next
    /// ones, instead of all of them once the caller syncs.
    Eager,
    /// Ops wait in burn-fusion's queue until it fills (32 tasks) or the caller syncs or reads,
    /// as under Burn's `Fusion`.
    Batched,
    /// After an op, when burn-fusion's thread has run every earlier flush (`runtime::pace`):
    /// as [`Eager`](Self::Eager), but the caller never waits for a busy thread to take the
    /// queue; ops recorded meanwhile go with the next flush. The caller records faster, but
    /// more is left for burn-fusion's thread at the `sync`: on the H100 a small forward took
    /// longer than under `Eager` (`benches/results/nvidia-h100-chain.md`, fourth session).
    Paced,
}

static SUBMIT_POLICY: Setting<SubmitPolicy> = Setting::new(
    "HYPATIA_SUBMIT",
    "submit",
    &[
        (SubmitPolicy::Auto, "auto"),
        (SubmitPolicy::Eager, "eager"),
        (SubmitPolicy::Batched, "batched"),
        (SubmitPolicy::Paced, "paced"),
    ],
);

/// Sets the submit policy for the whole process. Without a call,
/// `HYPATIA_SUBMIT=auto|eager|batched|paced` decides, and `Auto` if unset.
pub fn set_submit_policy(policy: SubmitPolicy) {
    SUBMIT_POLICY.set(policy);
}

/// The submit policy in force.
pub fn submit_policy() -> SubmitPolicy {
    SUBMIT_POLICY.get()
}

impl core::str::FromStr for SubmitPolicy {
    type Err = String;

    /// A policy by the name `HYPATIA_SUBMIT` takes: `auto`, `eager`, `batched` or `paced`.
    fn from_str(name: &str) -> Result<Self, String> {
        SUBMIT_POLICY.parse(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_defaults_to_its_first_name_then_keeps_what_is_set() {
        static SETTING: Setting<char> = Setting::new(
            "HYPATIA_TEST_NEVER_SET",
            "test",
            &[('a', "a"), ('b', "b"), ('c', "c")],
        );
        assert_eq!(SETTING.get(), 'a');
        SETTING.set('c');
        assert_eq!(SETTING.get(), 'c');
        SETTING.set('b');
        assert_eq!(SETTING.get(), 'b');
    }

    /// Each of `names` parses to the policy at its index in `policies`; `unknown` does not parse.
    fn assert_parses<P>(names: &[&str], policies: &[P], unknown: &str)
    where
        P: core::str::FromStr<Err = String> + PartialEq + core::fmt::Debug,
    {
        let parsed: Vec<P> = names.iter().map(|name| name.parse().unwrap()).collect();
        assert_eq!(parsed, policies);
        assert!(unknown.parse::<P>().is_err());
    }

    #[test]
    fn race_policies_parse_by_their_env_names() {
        use RacePolicy::*;
        assert_parses(
            &["auto", "always", "burn", "never"],
            &[Auto, Always, Burn, Never],
            "fast",
        );
    }

    #[test]
    fn flush_policies_parse_by_their_env_names() {
        use FlushPolicy::*;
        assert_parses(
            &["auto", "never", "blocks", "paced"],
            &[Auto, Never, Blocks, Paced],
            "always",
        );
    }

    #[test]
    fn submit_policies_parse_by_their_env_names() {
        use SubmitPolicy::*;
        assert_parses(
            &["auto", "eager", "batched", "paced"],
            &[Auto, Eager, Batched, Paced],
            "lazy",
        );
    }

    #[test]
    fn f32_precisions_parse_by_their_env_names() {
        use F32Precision::*;
        assert_parses(&["tf32", "exact"], &[Tf32, Exact], "fp32");
    }

    #[test]
    fn wgmma_offers_parse_by_their_env_names() {
        use WgmmaOffer::*;
        assert_parses(&["auto", "half", "off"], &[Auto, Half, Off], "tf32");
    }

    #[test]
    fn exact_f32_concerns_f32_only() {
        let before = f32_precision();
        set_f32_precision(F32Precision::Exact);
        let exact = [DType::F32, DType::F16, DType::BF16].map(exact_f32);
        set_f32_precision(F32Precision::Tf32);
        let tf32 = exact_f32(DType::F32);
        set_f32_precision(before);
        assert_eq!(exact, [true, false, false]);
        assert!(!tf32);
    }

    #[test]
    fn auto_flushes_only_blocks_that_keep_the_gpu_busy() {
        // The two MLPs the H100 measured: a step of 1024:784:2048:10 is ~56 µs of matrix work
        // at the Hopper profile's rate, one of 8192:1024:4096:1024 ~1.9 ms.
        let hopper = Profile::hopper();
        let step = |spec: [usize; 4]| {
            let [m, d_in, hidden, d_out] = spec;
            let layers = [(d_in, hidden), (hidden, hidden), (hidden, d_out)];
            // Forward, input gradient and weight gradient: three matmuls of each layer's size.
            (layers.iter())
                .map(|&(k, n)| 3.0 * hopper.gpu_time(m, k, n, DType::BF16))
                .sum::<f64>()
        };
        let (small, large) = (step([1024, 784, 2048, 10]), step([8192, 1024, 4096, 1024]));
        assert!(!FlushPolicy::Auto.flushes(small), "{small} µs flushed");
        assert!(FlushPolicy::Auto.flushes(large), "{large} µs not flushed");
        // Paced flushes a small block only when the device thread is idle (`runtime::pace`).
        assert!(
            !FlushPolicy::Paced.flushes(small),
            "{small} µs flushed while busy"
        );
        assert!(FlushPolicy::Paced.flushes(large), "{large} µs not flushed");
        for gpu_us in [small, large] {
            assert!(!FlushPolicy::Never.flushes(gpu_us));
            assert!(FlushPolicy::Blocks.flushes(gpu_us));
        }
    }
}
