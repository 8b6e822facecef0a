//! The choices of [`HypatiaConfig`](super::HypatiaConfig): one enum per policy, each spelt in
//! the file and its variable as its kebab-case name (`tensor-core`, `tf32`, ...).

use serde::{Deserialize, Serialize};

/// Override of the automatic choice (tests and benchmarks compare the two).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExecutionPolicy {
    /// Choose per problem and device (the default).
    #[default]
    Auto,
    /// Always one tiled launch.
    Tiled,
    /// Always the tensor-core engine.
    TensorCore,
    /// Always split.
    Split,
}

/// How Hypatia's own kernels multiply f32 on a device with matrix units (decision record 0014).
///
/// Burn 0.21's f32 matmul on CUDA is its autotune's pick per problem: tensor-core kernels only
/// for general problems with a side of 512 or more, and for smaller ones f32-FMA kernels timed
/// against tensor-core ones. Measured on an H200, its picks came within 1e-7 to 6.5e-4 of a
/// float64 reference (1.6e-5 at 2048³), where Hypatia's TF32 kernels came within 6.6e-4. The
/// default keeps Hypatia's f32 never further from float64 than Burn's: exact f32 FMAs below 512
/// on every side, Burn's own matmul (with Hypatia's fused epilogue) above. `Tf32` allows
/// Hypatia's TF32 kernels everywhere, as PyTorch's `allow_tf32` does (faster, and further from
/// float64); `Exact` runs every f32 step on f32 FMAs. Ops Hypatia does not claim run on Burn as
/// before. Devices without matrix units (lavapipe) compute exact f32 in every mode. Decision
/// record 0014.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum F32Precision {
    /// What Burn's matmul computes for the problem (the default).
    #[default]
    Burn,
    /// Hypatia's TF32 kernels wherever they are faster (opt-in).
    Tf32,
    /// f32 FMAs.
    Exact,
}

/// How one f32 problem multiplies, resolved from [`F32Precision`] and its shape
/// ([`HypatiaConfig::f32_math`](super::HypatiaConfig::f32_math)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum F32Math {
    /// f32 FMAs (the tiled kernel).
    Exact,
    /// Burn's own matmul (the engine's `burn` candidate, then Hypatia's epilogue) or f32 FMAs:
    /// none of Hypatia's TF32 kernels, whose error against float64 measured 25-40 times
    /// Burn's where Burn runs tensor cores (decision record 0014).
    Burn,
    /// TF32 on any candidate, truncating ones included.
    Tf32,
}

/// Which element types the tensor-core engine offers Hypatia's Hopper kernel for (CUDA builds).
/// Its autotune still picks per problem among the candidates offered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WgmmaOffer {
    /// f16, bf16, and f32 as TF32 (the default; decision records 0001, 0014). An f32 step that
    /// runs exact f32 ([`F32Precision`]) does not reach the engine.
    #[default]
    Auto,
    /// f16 and bf16 only: f32 runs on the engine's other candidates (cubek's `mma.sync` TF32
    /// tilings, Burn's matmul, the tiled kernel).
    Half,
    /// None: a Hopper GPU measures what a device without `wgmma` (an A100, an RTX card) gets.
    Off,
}

/// Whether a run of fused layers becomes one MLP-chain launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChainPolicy {
    /// Where the kernel takes the sizes and the device's [`Profile`](crate::rewrite::Profile) predicts it faster than
    /// one launch per layer (the default), and no per-layer execution is forced.
    #[default]
    Auto,
    /// Wherever the kernel takes the sizes (tests, benchmarks).
    Always,
    /// Never: every layer runs its own launch.
    Never,
}

/// Whether a fused step is raced against Burn's own way of running the same ops.
///
/// burn-fusion keys plans on relative shapes, so the plan cannot know whether its kernel beats
/// Burn's at the real ones. Where Burn's `MatmulFuser` takes a step's matmul and the step's ops
/// after it, the step holds that optimization too, times both at each new real shape (after one warm-up run of each) and
/// runs the faster from then on (see `execute::race`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RacePolicy {
    /// Race wherever no execution is forced, on every device: Hypatia's kernel replaces Burn's
    /// matmul there, so there the never-slower promise is measured (the default). On a CPU
    /// through lavapipe, where no Hypatia kernel beats Burn's fused matmul, this hands those
    /// steps to Burn (decision record 0007).
    #[default]
    Auto,
    /// Race every step that has Burn's alternative, also under a forced execution policy.
    Always,
    /// Always run Burn's alternative where a step has one (benchmarks, tests).
    Burn,
    /// Never race: Hypatia's kernels run every step.
    Never,
}

/// When the launches of a block Hypatia ran are handed to the device.
///
/// CubeCL 0.10 hands tasks to its device thread in batches of 32 (`cubecl-common`'s device
/// channel): a launch waits in the client's buffer until the buffer fills or something blocks
/// on the device. burn-fusion hands ops to its own thread the same way. So after a sync the GPU
/// idles until about a step's worth of tasks has been recorded and run through both threads:
/// on an H100, 0.6-0.93 ms before the first kernel of each training batch of the
/// 8192:1024:4096:1024 MLP, whose step's kernels take 1.65 ms (`tools/device/py/timeline.py` over
/// `tools/device/cuda/kernel_timeline.cu`'s trace; decision record 0006).
///
/// Flushing is not free: it fills the buffer with no-op tasks, so burn-fusion's thread waits
/// for CubeCL's thread to finish its batch before it can queue the next launch. Where the host
/// is the bottleneck, that wait is the step's: the same H100 run measured the flush at
/// -2.4 % per step on that MLP and +15-58 % on the host-bound 1024:784:2048:10 one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlushPolicy {
    /// Flush a block whose kernels are predicted (by the device [`Profile`](crate::rewrite::Profile)) to keep the GPU
    /// busy for at least [`AUTO_FLUSH_MIN_GPU_US`]: then the GPU, not the host, bounds the
    /// step, and starting it early pays. A block that ran an MLP-chain launch (a small-batch
    /// forward, whose caller waits for it next) is flushed too when the device thread has run
    /// every earlier flush (`host::pace`). The default.
    #[default]
    Auto,
    /// Launches wait in CubeCL's buffer, as Burn's own do.
    Never,
    /// After each block Hypatia runs, its launches go to the device thread at once: the buffer
    /// is padded with no-op tasks (`DeviceHandle::flush_queue`, which does not wait).
    Blocks,
    /// As [`Auto`](Self::Auto), and every smaller block is flushed when the device thread has
    /// run every earlier flush (`host::pace`), chain launch or not. Not measured in
    /// training.
    Paced,
}

/// How Hypatia's backends wait in `Backend::sync`: burn-fusion's thread for CubeCL's device
/// thread (see `host::sync`), and `Hypatia<B>`'s caller for burn-fusion's thread (see
/// `host::submit`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncPolicy {
    /// [`Spin`](Self::Spin) on machines of at least `host::sync::SPIN_MIN_CORES` cores
    /// while CubeCL's profiling log is off, else [`Park`](Self::Park) (the default).
    #[default]
    Auto,
    /// Ask CubeCL's device thread for its fence without blocking, and queue the caller's
    /// `sync` on burn-fusion's thread without blocking; each waiter spins on its answer for up
    /// to `host::sync::SPIN` before parking.
    Spin,
    /// Burn's own waits, which park burn-fusion's thread and the caller at once.
    Park,
}

/// When `Hypatia<B>` hands the ops it records to burn-fusion's thread (see `host::submit`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SubmitPolicy {
    /// [`Eager`](Self::Eager) on machines of at least `host::sync::SPIN_MIN_CORES` cores
    /// while Hypatia runs on one device, else [`Batched`](Self::Batched) (the default; decision
    /// record 0003).
    #[default]
    Auto,
    /// After each op, so burn-fusion's thread fuses the ops while the caller records the next
    /// ones, instead of all of them once the caller syncs. Each thread flushes the device it
    /// last named in an op. With several devices, a flush can leave a device's queue full while
    /// its thread waits in a collective, and DDP then hung (decision record 0003).
    Eager,
    /// Ops wait in burn-fusion's queue until it fills (32 tasks) or the caller syncs or reads,
    /// as under Burn's `Fusion`.
    Batched,
    /// After an op, when burn-fusion's thread has run every earlier flush (`host::pace`):
    /// as [`Eager`](Self::Eager), but the caller never waits for a busy thread to take the
    /// queue; ops recorded meanwhile go with the next flush. The caller records faster, but
    /// more is left for burn-fusion's thread at the `sync`: on the H100 a small forward took
    /// longer than under `Eager` (decision record 0006).
    Paced,
}

/// When a collective that `Hypatia<B>` records (burn-train's DDP gradient all-reduce) reaches
/// the GPU (see `host::submit::collective_recorded`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CollectivePolicy {
    /// At once: burn-fusion's and CubeCL's queues of the device are flushed behind it, so no
    /// device's NCCL call waits for that device's training thread (the default; decision
    /// record 0010).
    #[default]
    Push,
    /// When the queues fill or the device's thread syncs or reads, as under Burn's `Fusion`:
    /// DDP can then deadlock against burn-train's one-slot metric channel (decision record
    /// 0010).
    Lazy,
    /// As [`Push`](Self::Push), and the step's collective sync (burn-train's wait, after the
    /// backward pass, for the reduced gradients) is queued on burn-fusion's thread of the
    /// device instead of blocking the training thread until that thread has run the backward
    /// pass: the GPU waits for NCCL, the host records the optimizer step meanwhile (decision
    /// record 0011).
    Queued,
}

/// How many GPU streams CubeCL runs a device's kernels on (see `host::stream`; decision
/// record 0012).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuStreams {
    /// One: every kernel of a device runs in the order burn-fusion's thread launched it (the
    /// default). Hypatia sets CubeCL's `streaming.max_streams` to 1 before CubeCL starts,
    /// unless `cubecl.toml` sets it.
    #[default]
    One,
    /// CubeCL's own: a GPU stream per recording thread (up to `streaming.max_streams`). With
    /// CubeCL 0.10 a kernel reading a tensor another thread's stream wrote can run before that
    /// write: burn-train's Learner trained on wrong batches when its loader threads made them,
    /// on Burn's own backend too.
    PerThread,
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

/// What verification does (see `execute::verify`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VerifyMode {
    /// No check (the default): fused steps run alone.
    #[default]
    Off,
    /// Check; a difference is logged at `warn` level and the step falls back to Burn's ops.
    Warn,
    /// Check; a difference also fails the next sync or read on the device with the pattern,
    /// shapes and errors.
    Strict,
}

/// A pattern the fuser can be told to leave to Burn ([`HypatiaConfig::disable`](super::HypatiaConfig::disable)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    /// Plain matmuls (weight gradients, a Linear's matmul without bias or activation).
    Matmul,
    /// Linear + bias without activation.
    Linear,
    /// ReLU's backward `mask_fill(dy · Wᵀ, pre <= 0, 0)`.
    MatmulReluGrad,
    /// The backward of the activations other than ReLU (GELU's `gelu_backward(pre, dy · Wᵀ)`,
    /// SiLU's gradient of `x · sigmoid(x)`, tanh GELU's of `gelu_approximate`'s ops,
    /// LeakyReLU's of `mask_where(x, x < 0, x · slope)`, SwiGLU's of `silu(a) ⊙ b` for `a`).
    MatmulActivationGrads,
    /// Linear + bias + ReLU.
    LinearRelu,
    /// Linear + bias + the activations other than ReLU (GELU, SiLU, LeakyReLU, clamp, SwiGLU).
    LinearActivations,
    /// Runs of small layers as one MLP-chain launch.
    MlpChain,
    /// Bias gradients summed inside the gated or weight-gradient kernels.
    BiasGrad,
}

impl Pattern {
    /// Every pattern.
    pub const ALL: [Pattern; 8] = [
        Pattern::Matmul,
        Pattern::Linear,
        Pattern::MatmulReluGrad,
        Pattern::MatmulActivationGrads,
        Pattern::LinearRelu,
        Pattern::LinearActivations,
        Pattern::MlpChain,
        Pattern::BiasGrad,
    ];
}

/// Parses each choice by the name the file and its variable give it: `"never".parse()`.
macro_rules! by_name {
    ($($choice:ty),*) => {$(
        impl core::str::FromStr for $choice {
            type Err = String;

            fn from_str(name: &str) -> Result<Self, String> {
                use serde::de::IntoDeserializer;
                let name: serde::de::value::StrDeserializer<'_, serde::de::value::Error> =
                    name.into_deserializer();
                Self::deserialize(name).map_err(|e| e.to_string())
            }
        }
    )*};
}

by_name!(
    ExecutionPolicy,
    F32Precision,
    WgmmaOffer,
    ChainPolicy,
    RacePolicy,
    FlushPolicy,
    SyncPolicy,
    SubmitPolicy,
    CollectivePolicy,
    GpuStreams,
    VerifyMode,
    Pattern
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Each of `names` parses to the choice at its index in `choices`; `unknown` does not, and
    /// its error names every choice.
    fn assert_parses<P>(names: &[&str], choices: &[P], unknown: &str)
    where
        P: core::str::FromStr<Err = String> + PartialEq + core::fmt::Debug,
    {
        let parsed: Vec<P> = names.iter().map(|name| name.parse().unwrap()).collect();
        assert_eq!(parsed, choices);
        let error = unknown.parse::<P>().unwrap_err();
        for name in names {
            assert!(error.contains(&format!("`{name}`")), "{error}");
        }
    }

    #[test]
    fn choices_parse_by_their_names() {
        use ExecutionPolicy as E;
        let executions = [E::Auto, E::Tiled, E::TensorCore, E::Split];
        assert_parses(
            &["auto", "tiled", "tensor-core", "split"],
            &executions,
            "cube",
        );
        assert_parses(
            &["burn", "tf32", "exact"],
            &[F32Precision::Burn, F32Precision::Tf32, F32Precision::Exact],
            "fp32",
        );
        use WgmmaOffer as W;
        assert_parses(
            &["auto", "half", "off"],
            &[W::Auto, W::Half, W::Off],
            "tf32",
        );
        use ChainPolicy as C;
        assert_parses(
            &["auto", "always", "never"],
            &[C::Auto, C::Always, C::Never],
            "on",
        );
        use RacePolicy as R;
        let races = [R::Auto, R::Always, R::Burn, R::Never];
        assert_parses(&["auto", "always", "burn", "never"], &races, "fast");
        use FlushPolicy as F;
        let flushes = [F::Auto, F::Never, F::Blocks, F::Paced];
        assert_parses(&["auto", "never", "blocks", "paced"], &flushes, "always");
        use SyncPolicy as S;
        assert_parses(
            &["auto", "spin", "park"],
            &[S::Auto, S::Spin, S::Park],
            "wait",
        );
        use SubmitPolicy as U;
        let submits = [U::Auto, U::Eager, U::Batched, U::Paced];
        assert_parses(&["auto", "eager", "batched", "paced"], &submits, "lazy");
        use CollectivePolicy as L;
        assert_parses(
            &["push", "lazy", "queued"],
            &[L::Push, L::Lazy, L::Queued],
            "eager",
        );
        use GpuStreams as G;
        assert_parses(&["one", "per-thread"], &[G::One, G::PerThread], "many");
        use VerifyMode as V;
        assert_parses(
            &["off", "warn", "strict"],
            &[V::Off, V::Warn, V::Strict],
            "on",
        );
        use Pattern as P;
        let patterns = [
            P::Matmul,
            P::Linear,
            P::MatmulReluGrad,
            P::MatmulActivationGrads,
            P::LinearRelu,
            P::LinearActivations,
            P::MlpChain,
            P::BiasGrad,
        ];
        let names = [
            "matmul",
            "linear",
            "matmul-relu-grad",
            "matmul-activation-grads",
            "linear-relu",
            "linear-activations",
            "mlp-chain",
            "bias-grad",
        ];
        assert_parses(&names, &patterns, "relu");
    }

    #[test]
    fn auto_flushes_only_blocks_that_keep_the_gpu_busy() {
        // The two MLPs the H100 measured: a step of 1024:784:2048:10 is ~56 µs of matrix work
        // at the Hopper profile's rate, one of 8192:1024:4096:1024 ~1.9 ms.
        let hopper = crate::rewrite::Profile::hopper();
        let step = |spec: [usize; 4]| {
            let [m, d_in, hidden, d_out] = spec;
            let layers = [(d_in, hidden), (hidden, hidden), (hidden, d_out)];
            // Forward, input gradient and weight gradient: three matmuls of each layer's size.
            (layers.iter())
                .map(|&(k, n)| 3.0 * hopper.gpu_time(m, k, n, burn_backend::DType::BF16))
                .sum::<f64>()
        };
        let (small, large) = (step([1024, 784, 2048, 10]), step([8192, 1024, 4096, 1024]));
        assert!(!FlushPolicy::Auto.flushes(small), "{small} µs flushed");
        assert!(FlushPolicy::Auto.flushes(large), "{large} µs not flushed");
        // Paced flushes a small block only when the device thread is idle (`host::pace`).
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
