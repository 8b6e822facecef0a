//! The tensor-core matmul engine: cubek-matmul kernels with tilings that Burn's selector does not
//! propose, chosen per problem and device by autotune (cached on disk by CubeCL), with Burn's own
//! autotuned matmul as one of the candidates, so the choice is never slower than Burn's.
//!
//! Why these tilings (NVIDIA H100, bf16 4096³, `examples/matmul_strategies`, 2026-11-22):
//! Burn's autotune settled on 0.818 ms (168 TFLOP/s); a forced 128×256×32 stage of 8 planes of
//! 64×64 on `mma.sync` with swizzled shared memory and TMA loads ran 0.662 ms (208 TFLOP/s).
//! CubeCL 0.10 has no `wgmma`, which is what cuBLAS uses on Hopper (~750 TFLOP/s there).

use super::{
    Epilogue, EpilogueInputs, LinearOutputs, LinearProblem, Operand, alloc, bias_grad_shape,
    launch_bias_activation_into, launch_fused_linear_into,
};
use burn_backend::DType;
use burn_cubecl::CubeRuntime;
use burn_cubecl::kernel::matmul::{MatmulStrategy, matmul};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl_fusion::CubeFusionHandle;
use burn_std::{Metadata, Shape, Strides};
use cubecl::prelude::*;
use cubecl::tune::{LocalTuner, Tunable, TunableSet, local_tuner};
use cubek_matmul::components::global::{InputLoadFlow, LoadFlows};
use cubek_matmul::components::stage::PartitionBuffering;
use cubek_matmul::components::tile::TileMatmulKind;
use cubek_matmul::definition::{
    MatmulElems, MatmulGlobalElems, MatmulProblem, MatmulSetupError, TilingBlueprint, TilingScheme,
};
use cubek_matmul::launch::Strategy;
use cubek_matmul::routines::{BlueprintStrategy, select_swizzle};
use cubek_std::cube_count::{CubeCountStrategy, GlobalOrder, HypercubeBlueprint, SmAllocation};
use cubek_std::{InputBinding, PartitionSize, StageSize, SwizzleModes, TileSize};
use std::sync::atomic::{AtomicUsize, Ordering};

/// How a stage is loaded and pipelined (cubek-matmul's global matmul families).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loading {
    /// TMA loads by dedicated producer planes, double-buffered.
    SpecializedTma,
    /// TMA loads, one stage.
    SimpleTma,
    /// Plain loads by every plane, double-buffered (works for any strides).
    DoubleCyclic,
}

/// One tiling the engine may run: instruction kind, loading, and sizes in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tiling {
    /// `Mma` (manual `mma.sync`, `ldmatrix`) or `Cmma` (wmma fragments).
    pub kind: TileMatmulKind,
    /// Loading and pipelining.
    pub loading: Loading,
    /// Output rows × columns one plane (warp) computes.
    pub plane: (u32, u32),
    /// Planes per stage along m and n.
    pub planes: (u32, u32),
    /// Stage depth along k.
    pub k: u32,
    /// XOR-swizzled shared memory (`Mma` only).
    pub swizzle: bool,
}

const fn tiling(
    kind: TileMatmulKind,
    loading: Loading,
    plane: (u32, u32),
    planes: (u32, u32),
    k: u32,
    swizzle: bool,
) -> Tiling {
    Tiling {
        kind,
        loading,
        plane,
        planes,
        k,
        swizzle,
    }
}

/// The tilings tuned over, fastest first as measured on the H100 at 4096³ bf16.
pub const TILINGS: [Tiling; 7] = {
    use Loading::*;
    use TileMatmulKind::{Cmma, Mma};
    [
        tiling(Mma, SpecializedTma, (64, 64), (2, 4), 32, true),
        tiling(Mma, SimpleTma, (64, 64), (2, 2), 64, true),
        tiling(Mma, SpecializedTma, (64, 64), (2, 2), 64, true),
        tiling(Cmma, SpecializedTma, (64, 64), (2, 2), 64, false),
        tiling(Mma, SpecializedTma, (128, 32), (1, 4), 32, true),
        tiling(Mma, SimpleTma, (32, 64), (2, 2), 64, true),
        tiling(Mma, DoubleCyclic, (128, 32), (1, 4), 32, true),
    ]
};

impl Tiling {
    /// A short name, e.g. `mma specialized-tma 128x256x32 (64x64) swz`.
    pub fn name(&self) -> String {
        let loading = match self.loading {
            Loading::SpecializedTma => "specialized-tma",
            Loading::SimpleTma => "simple-tma",
            Loading::DoubleCyclic => "double-cyclic",
        };
        format!(
            "{} {loading} {}x{}x{} ({}x{}){}",
            format!("{:?}", self.kind).to_lowercase(),
            self.plane.0 * self.planes.0,
            self.plane.1 * self.planes.1,
            self.k,
            self.plane.0,
            self.plane.1,
            if self.swizzle { " swz" } else { "" }
        )
    }

    /// The instruction shape for `elem` (`tf32` has k = 8).
    fn instruction(&self, elem: StorageType) -> (u32, u32, u32) {
        let k = if elem.size() == 4 { 8 } else { 16 };
        match self.kind {
            TileMatmulKind::Mma => (16, 8, k),
            _ => (16, 16, k),
        }
    }

    /// The forced blueprint for `problem` on `client`'s device.
    pub fn blueprint<R: Runtime>(
        &self,
        problem: &MatmulProblem,
        client: &ComputeClient<R>,
    ) -> TilingBlueprint {
        let elem = problem.global_dtypes.lhs;
        let (tm, tn, tk) = self.instruction(elem);
        let scheme = TilingScheme::builder()
            .with_tile_size(TileSize::new(tm, tn, tk))
            .with_partition_size(PartitionSize::new(
                self.plane.0 / tm,
                self.plane.1 / tn,
                self.k / tk,
            ))
            .with_stage_size(StageSize::new(self.planes.0, self.planes.1, 1))
            .build()
            .expect("every size is set");
        let cube_count_strategy = match client.properties().hardware.num_streaming_multiprocessors {
            Some(num_sms) => CubeCountStrategy::Sm {
                num_sms,
                sm_usage: SmAllocation::Exact,
                cubes_first: true,
            },
            None => CubeCountStrategy::FromProblem,
        };
        let hypercube = HypercubeBlueprint::builder()
            .global_order(GlobalOrder::SwizzleRow(4))
            .cube_count_strategy(cube_count_strategy)
            .build();
        let plane_dim = client.properties().hardware.plane_size_max.max(1);
        let mut builder = TilingBlueprint::builder(self.kind, scheme, plane_dim, problem)
            .partition_buffering(PartitionBuffering::Double)
            .hypercube_blueprint(hypercube);
        if self.loading == Loading::SpecializedTma {
            builder = builder.load_specialization_config(LoadFlows {
                lhs: InputLoadFlow::LoadOnly,
                rhs: InputLoadFlow::LoadOnly,
            });
        }
        if self.swizzle {
            let vector = 16 / elem.size();
            builder = builder.shared_swizzle(SwizzleModes {
                lhs: select_swizzle(scheme.elements_per_stage_along_k() as usize, elem, vector),
                rhs: select_swizzle(scheme.elements_per_stage_along_n() as usize, elem, vector),
                ..Default::default()
            });
        }
        builder.build()
    }

    /// The cubek-matmul strategy running this tiling on `problem`.
    pub fn strategy<R: Runtime>(
        &self,
        problem: &MatmulProblem,
        client: &ComputeClient<R>,
    ) -> Strategy {
        let blueprint = self.blueprint(problem, client);
        let mma = self.kind == TileMatmulKind::Mma;
        match (self.loading, mma) {
            (Loading::SpecializedTma, true) => {
                Strategy::SpecializedTmaMma(BlueprintStrategy::Forced(blueprint))
            }
            (Loading::SpecializedTma, false) => {
                Strategy::SpecializedTmaCmma(BlueprintStrategy::Forced(blueprint))
            }
            (Loading::SimpleTma, true) => {
                Strategy::SimpleTmaMma(BlueprintStrategy::Forced(blueprint))
            }
            (Loading::SimpleTma, false) => {
                Strategy::SimpleTmaCmma(BlueprintStrategy::Forced(blueprint))
            }
            (Loading::DoubleCyclic, true) => {
                Strategy::DoubleCyclicMma(BlueprintStrategy::Forced(blueprint))
            }
            (Loading::DoubleCyclic, false) => {
                Strategy::DoubleCyclicCmma(BlueprintStrategy::Forced(blueprint))
            }
        }
    }
}

/// The cubek-matmul problem of `lhs · rhs` (same rank, batch dims broadcast).
pub fn matmul_problem(
    lhs: &TensorBinding<impl Runtime>,
    rhs: &TensorBinding<impl Runtime>,
    out: &TensorBinding<impl Runtime>,
    elem: StorageType,
) -> Result<MatmulProblem, MatmulSetupError> {
    MatmulProblem::from_shapes_and_strides(
        lhs.shape.clone(),
        rhs.shape.clone(),
        out.shape.clone(),
        lhs.strides.clone(),
        rhs.strides.clone(),
        out.strides.clone(),
        MatmulGlobalElems {
            lhs: elem,
            rhs: elem,
            out: elem,
        },
        AddressType::U32,
        None,
        None,
    )
}

/// Operands and outputs of one linear on the engine: every candidate writes `out` (and `pre`).
#[derive(Clone, Debug)]
pub struct LinearArgs<R: CubeRuntime> {
    /// Input, padded to the output's rank.
    pub x: CubeTensor<R>,
    /// Weight `[.., k, n]`, padded to the output's rank.
    pub w: CubeTensor<R>,
    /// Bias, a row of `n`.
    pub bias: Option<CubeTensor<R>>,
    /// Activation output, contiguous.
    pub out: CubeTensor<R>,
    /// Pre-activation output, contiguous, when asked for.
    pub pre: Option<CubeTensor<R>>,
    /// What the epilogue applies after the bias.
    pub epilogue: Epilogue,
    /// The gate of [`Epilogue::ReluGrad`]: the output's shape, rows contiguous or pitched
    /// (the Hopper kernel takes only contiguous ones).
    pub gate: Option<CubeTensor<R>>,
    /// The activation's run-time parameters (see [`EpilogueInputs::params`]).
    pub params: [f32; 2],
    /// `Σ_rows out` ([`LinearOutputs::bias_grad`]), contiguous, when asked for.
    pub bias_grad: Option<CubeTensor<R>>,
}

/// Largest problem (FLOPs) the tiled unit kernel is tuned on: beyond it, it always lost.
const TILED_MAX_FLOPS: f64 = 1.0e9;

impl<R: CubeRuntime> LinearArgs<R> {
    fn operand(tensor: &CubeTensor<R>) -> Operand<R> {
        Operand {
            handle: tensor.clone().into(),
            shape: tensor.meta.shape().to_vec(),
        }
    }

    fn problem(&self) -> LinearProblem {
        let shape = self.out.meta.shape().to_vec();
        let x = self.x.meta.shape();
        LinearProblem {
            batch: shape[..shape.len() - 2].iter().product(),
            k: x[x.len() - 1],
            out_shape: shape,
            dtype: self.out.dtype,
        }
    }

    /// Whether the epilogue does nothing: the matmul may write `out` directly.
    fn is_plain(&self) -> bool {
        self.epilogue == Epilogue::Identity
            && self.bias.is_none()
            && self.pre.is_none()
            && self.bias_grad.is_none()
    }

    /// Calls `launch` with the epilogue and its bias and gate as kernel operands.
    fn with_epilogue<T>(&self, launch: impl FnOnce(EpilogueInputs<'_, R>) -> T) -> T {
        let (bias, gate) = (
            self.bias.as_ref().map(Self::operand),
            self.gate.as_ref().map(Self::operand),
        );
        launch(EpilogueInputs {
            epilogue: self.epilogue,
            bias: bias.as_ref(),
            gate: gate.as_ref(),
            params: self.params,
            bias_grad: self.bias_grad.is_some(),
        })
    }

    /// Runs `matmul` into a scratch buffer, then Hypatia's bias + activation kernel into the
    /// outputs (straight into `out` when there is nothing to apply).
    fn split(&self, matmul: impl FnOnce(Inputs<R>) -> Result<(), String>) -> Result<(), String> {
        if self.is_plain() {
            return matmul((self.x.clone(), self.w.clone(), self.out.clone()));
        }
        let product = CubeTensor::new_contiguous(
            self.out.client.clone(),
            self.out.device.clone(),
            self.out.meta.shape().clone(),
            self.out
                .client
                .empty(self.out.meta.shape().num_elements() * self.out.dtype.size()),
            self.out.dtype,
        );
        matmul((self.x.clone(), self.w.clone(), product.clone()))?;
        self.with_epilogue(|epilogue| {
            launch_bias_activation_into(
                &Self::operand(&product),
                epilogue,
                self.out.clone().into(),
                self.pre.clone().map(Into::into),
                self.bias_grad.clone().map(Into::into),
            )
        });
        Ok(())
    }

    /// Rows of the output, rounded up to a power of two: the autotune key's `m`. A candidate
    /// that declines by size reads this, never the exact `m`, so that it declines every
    /// problem of a key or none (a choice replayed on a problem its candidate declines would
    /// panic in CubeCL's tuner).
    fn key_rows(&self) -> usize {
        let shape = self.out.meta.shape();
        shape[..shape.len() - 1]
            .iter()
            .product::<usize>()
            .next_power_of_two()
    }

    /// The tiled unit kernel, whole linear in one launch.
    fn tiled(&self) -> Result<(), String> {
        let problem = self.problem();
        let n = self.out.meta.shape()[self.out.meta.shape().len() - 1];
        if 2.0 * (self.key_rows() * problem.k * n) as f64 > TILED_MAX_FLOPS {
            return Err("larger than the unit kernel is tuned on".into());
        }
        self.with_epilogue(|epilogue| {
            launch_fused_linear_into(
                &problem,
                &Self::operand(&self.x),
                &Self::operand(&self.w),
                epilogue,
                self.out.clone().into(),
                self.pre.clone().map(Into::into),
                self.bias_grad.clone().map(Into::into),
            )
        });
        Ok(())
    }

    /// The autotune key: exact `n` and `k` (a model's weights), `m` by power of two, and every
    /// property that decides whether a candidate applies (layouts and alignment of every
    /// operand and the gate, outputs, which dtypes the Hopper kernel is offered). Two problems
    /// of one key must be accepted by the same candidates: CubeCL's tuner replays a key's
    /// choice and panics if it declines.
    pub fn key(&self) -> String {
        let shape = self.out.meta.shape();
        let layout = |t: &CubeTensor<R>| {
            let (shape, strides) = (t.meta.shape(), t.meta.strides());
            let r = shape.len();
            format!(
                "{:?}/{}/{}{}",
                &strides[r - 2..],
                is_contiguous(shape, strides),
                shape[..r - 2].iter().all(|&d| d == 1),
                if is_aligned(t) { "a" } else { "u" }
            )
        };
        format!(
            "m{} n{} k{} {:?} x{} w{} b{} p{} g{} {:?}{} {:?}",
            self.key_rows(),
            shape[shape.len() - 1],
            self.problem().k,
            self.out.dtype,
            layout(&self.x),
            layout(&self.w),
            self.bias
                .as_ref()
                .map_or("-".into(), |b| format!("{:?}", b.meta.strides().last())),
            self.pre.is_some(),
            self.gate.as_ref().map_or("-".into(), layout),
            self.epilogue,
            if self.bias_grad.is_some() { " db" } else { "" },
            crate::config::config().wgmma,
        )
    }
}

/// Whether `tensor` starts on 16 bytes (TMA's and vector loads' requirement).
pub(crate) fn is_aligned<R: CubeRuntime>(tensor: &CubeTensor<R>) -> bool {
    tensor.handle.offset_start.unwrap_or(0).is_multiple_of(16)
}

/// Whether `strides` are row-major for `shape` (size-1 dims may have any stride).
pub(crate) fn is_contiguous(shape: &[usize], strides: &[usize]) -> bool {
    let mut expected = 1;
    for (&dim, &stride) in shape.iter().zip(strides).rev() {
        if dim != 1 && stride != expected {
            return false;
        }
        expected *= dim;
    }
    true
}

type Inputs<R> = (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>);

/// Whether `tensor` reads one batch for several of `out`'s: a batch dim of 1, or of stride 0,
/// where `out`'s is larger.
fn broadcast_batch<R: CubeRuntime>(tensor: &CubeTensor<R>, out: &[usize]) -> bool {
    let (shape, strides) = (tensor.meta.shape(), tensor.meta.strides());
    let batch = out.len().saturating_sub(2);
    (0..batch.min(shape.len().saturating_sub(2)))
        .any(|i| out[i] > 1 && (shape[i] != out[i] || strides[i] == 0))
}

/// Launches one tiling into `out`.
fn launch_tiling<R: CubeRuntime>(
    tiling: &Tiling,
    (lhs, rhs, out): Inputs<R>,
) -> Result<(), String> {
    let tma = tiling.loading != Loading::DoubleCyclic;
    if tma
        && [&lhs, &rhs]
            .iter()
            .any(|t| broadcast_batch(t, out.meta.shape()))
    {
        // On the H100 every TMA tiling hung (f16, x [3, 17, 33] · w [65, 33]ᵀ, w's batch of 1
        // broadcast); the cyclic one ran (tests/half_f16.rs, `matches_burn_in_f16`).
        return Err("TMA tilings do not take a broadcast batch".into());
    }
    let elem: StorageType = lhs.dtype.into();
    let client = lhs.client.clone();
    let (lhs, rhs, out) = (lhs.binding(), rhs.binding(), out.binding());
    let problem = matmul_problem(&lhs, &rhs, &out, elem).map_err(|e| format!("{e:?}"))?;
    let strategy = tiling.strategy(&problem, &client);
    let mut dtypes = MatmulElems::from_globals(&problem.global_dtypes);
    cubek_matmul::launch::launch_ref(
        &strategy,
        &client,
        InputBinding::new(lhs, elem),
        InputBinding::new(rhs, elem),
        out,
        &mut dtypes,
    )
    .map_err(|e| format!("{e:?}"))
}

type Candidate<R> = Box<dyn Fn(LinearArgs<R>) -> Result<(), String> + Send + Sync>;

/// One way the engine can run a linear.
struct Entry<R: CubeRuntime> {
    name: String,
    /// Whether autotune times it; the others run only when forced by name.
    tuned: bool,
    run: Candidate<R>,
}

impl<R: CubeRuntime> Entry<R> {
    fn tuned(
        name: String,
        run: impl Fn(LinearArgs<R>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name,
            tuned: true,
            run: Box::new(run),
        }
    }
}

/// Every way the engine can run a linear. Burn's own matmul (then Hypatia's epilogue kernel)
/// first: it always runs, so it is the fallback, and every other candidate only wins where it
/// measured faster.
fn candidates<R: CubeRuntime>() -> Vec<Entry<R>> {
    let mut list = vec![
        Entry::tuned("burn".into(), |args: LinearArgs<R>| {
            args.split(|(lhs, rhs, out)| {
                let dtype = out.dtype;
                matmul(lhs, rhs, Some(out), MatmulStrategy::default(), dtype)
                    .map(|_| ())
                    .map_err(|e| format!("{e:?}"))
            })
        }),
        Entry::tuned("tiled".into(), |args: LinearArgs<R>| args.tiled()),
    ];
    for tiling in TILINGS {
        list.push(Entry::tuned(tiling.name(), move |args: LinearArgs<R>| {
            args.split(|inputs| launch_tiling(&tiling, inputs))
        }));
    }
    #[cfg(feature = "cuda")]
    if crate::config::config().wgmma != crate::config::WgmmaOffer::Off {
        use super::hopper::{WGMMA_FORCED_TILINGS, WGMMA_TF32_TILINGS, WGMMA_TILINGS, launch};
        // Each tiling declines the element types it does not fit, f32 unless offered, and a
        // TF32 tiling anything but f32.
        let entry = |name: String, tiling, f32_only: bool| {
            Entry::tuned(name, move |args: LinearArgs<R>| {
                let f32 = args.x.dtype == DType::F32;
                if f32 && crate::config::config().wgmma == crate::config::WgmmaOffer::Half {
                    return Err("f32 is not offered (HYPATIA_WGMMA=half)".into());
                }
                if f32_only && !f32 {
                    return Err("a TF32 tiling".into());
                }
                launch(tiling, &args)
            })
        };
        for tiling in WGMMA_TILINGS {
            list.push(entry(tiling.name(), tiling, false));
        }
        for tiling in WGMMA_TF32_TILINGS {
            list.push(entry(format!("{} tf32", tiling.name()), tiling, true));
        }
        for tiling in WGMMA_FORCED_TILINGS {
            list.push(Entry {
                tuned: false,
                ..entry(tiling.name(), tiling, false)
            });
        }
    }
    list
}

/// Index in [`candidates`] of the candidate that ran last (`usize::MAX`: none yet).
static LAST: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The engine candidate that ran the last linear on runtime `R`, e.g. `"wgmma 128x256 s4"`:
/// after autotune has settled, the one it chose. For benchmarks and logs.
pub fn last_candidate<R: CubeRuntime>() -> Option<String> {
    let index = LAST.load(Ordering::Relaxed);
    candidates::<R>()
        .into_iter()
        .nth(index)
        .map(|entry| entry.name)
}

fn tunables<R: CubeRuntime>() -> TunableSet<String, LinearArgs<R>, ()> {
    let mut set = TunableSet::new_cloning_inputs(|args: &LinearArgs<R>| args.key());
    for (index, entry) in candidates::<R>().into_iter().enumerate() {
        if !entry.tuned {
            continue;
        }
        let run = entry.run;
        set = set.with(Tunable::new(&entry.name, move |args: LinearArgs<R>| {
            run(args)?;
            LAST.store(index, Ordering::Relaxed);
            Ok::<(), String>(())
        }));
    }
    set
}

fn tensor<R: CubeRuntime>(handle: CubeFusionHandle<R>, shape: Vec<usize>) -> CubeTensor<R> {
    CubeTensor::new(
        handle.client.clone(),
        handle.handle.clone(),
        Metadata::new(Shape::from(shape), handle.strides.clone()),
        handle.device.clone(),
        handle.dtype,
    )
}

/// `epilogue(x · w + bias)` (and the pre-activation if `write_pre`) on the engine's fastest
/// candidate for this problem on this device, into new contiguous buffers.
pub fn tensor_core_linear<R: CubeRuntime>(
    problem: &LinearProblem,
    x: &Operand<R>,
    w: &Operand<R>,
    epilogue: EpilogueInputs<'_, R>,
    write_pre: bool,
) -> LinearOutputs<R> {
    static TUNER: LocalTuner<String, cubecl::CubeTuneId> = local_tuner!();
    let rank = problem.out_shape.len();
    // Same rank for both operands: leading dims of size 1 (stride irrelevant).
    let padded = |operand: &Operand<R>| {
        let pad = rank - operand.shape.len();
        let mut shape = vec![1; pad];
        shape.extend(&operand.shape);
        let mut strides = vec![0; pad];
        strides.extend(operand.handle.strides.iter().copied());
        let mut handle = operand.handle.clone();
        handle.strides = Strides::new(&strides);
        tensor(handle, shape)
    };
    let (x, w) = (padded(x), padded(w));
    let client = x.client.clone();
    let device = x.device.clone();
    let new_output = || {
        let handle = alloc(&x.clone().into(), &problem.out_shape, problem.dtype);
        tensor(handle, problem.out_shape.clone())
    };
    let args = LinearArgs {
        bias: epilogue
            .bias
            .map(|b| tensor(b.handle.clone(), b.shape.clone())),
        gate: epilogue
            .gate
            .map(|g| tensor(g.handle.clone(), g.shape.clone())),
        out: new_output(),
        pre: write_pre.then(new_output),
        epilogue: epilogue.epilogue,
        params: epilogue.params,
        bias_grad: epilogue.bias_grad.then(|| {
            let shape = bias_grad_shape(&problem.out_shape);
            tensor(alloc(&x.clone().into(), &shape, problem.dtype), shape)
        }),
        x,
        w,
    };
    let outputs = LinearOutputs {
        out: args.out.clone().into(),
        pre: args.pre.clone().map(Into::into),
        bias_grad: args.bias_grad.clone().map(Into::into),
        shape: problem.out_shape.clone(),
    };
    if let Some(name) = crate::config::config().engine_candidate.clone() {
        match candidates::<R>()
            .into_iter()
            .enumerate()
            .find(|(_, entry)| entry.name == name)
        {
            Some((index, entry)) => match (entry.run)(args.clone()) {
                Ok(()) => {
                    LAST.store(index, Ordering::Relaxed);
                    return outputs;
                }
                Err(reason) => log::warn!("hypatia: engine candidate `{name}` declined: {reason}"),
            },
            None => {
                let names: Vec<_> = candidates::<R>().into_iter().map(|e| e.name).collect();
                panic!("hypatia: engine-candidate `{name}` is none of this device's {names:?}");
            }
        }
    }
    let set = TUNER.init(tunables::<R>);
    TUNER.execute(
        &cubecl::CubeTuneId::new::<R>(&client, &device),
        &client,
        set,
        args,
    );
    outputs
}

/// Whether the engine runs `dtype` (it needs f16, bf16 or f32 inputs).
pub fn supports(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16 | DType::F32)
}
