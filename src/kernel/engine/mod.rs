//! The tensor-core matmul engine: cubek-matmul kernels with tilings that Burn's selector does not
//! propose, chosen per problem and device by autotune (cached on disk by CubeCL), with Burn's own
//! autotuned matmul as one of the candidates, so the choice is never slower than Burn's.
//!
//! Why these tilings (NVIDIA H100, bf16 4096³, `examples/matmul_strategies`):
//! Burn's autotune settled on 0.818 ms (168 TFLOP/s); a forced 128×256×32 stage of 8 planes of
//! 64×64 on `mma.sync` with swizzled shared memory and TMA loads ran 0.662 ms (208 TFLOP/s).
//! CubeCL 0.10 has no `wgmma`, which is what cuBLAS uses on Hopper (~750 TFLOP/s there).

mod args;
mod tiling;

pub use crate::kernel::LinearArgs;
pub use tiling::{Loading, TILINGS, Tiling, matmul_problem};

use crate::kernel::{
    EngineChoices, EpilogueInputs, LinearOutputs, LinearProblem, Operand, alloc, bias_grad_shape,
};
use burn_backend::DType;
use burn_cubecl::CubeRuntime;
use burn_cubecl::kernel::matmul::{MatmulStrategy, matmul};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl_fusion::CubeFusionHandle;
use burn_std::{Metadata, Shape, Strides};
use cubecl::tune::{LocalTuner, Tunable, TunableSet, local_tuner};
use std::sync::atomic::{AtomicUsize, Ordering};
use tiling::launch_tiling;

type Inputs<R> = (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>);

type Candidate<R> = Box<dyn Fn(LinearArgs<R>) -> Result<(), String> + Send + Sync>;

/// One way the engine can run a linear.
struct Entry<R: CubeRuntime> {
    name: String,
    /// Whether autotune times it; the others run only when forced by name.
    tuned: bool,
    /// Whether it is a tensor-core tiling, which declines problems too small for one
    /// ([`LinearProblem::is_small`](crate::kernel::LinearProblem::is_small)).
    tiling: bool,
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
            tiling: false,
            run: Box::new(run),
        }
    }

    /// A tensor-core tiling: declines a problem too small for it before it runs.
    fn tiling(self) -> Self {
        Self {
            tiling: true,
            ..self
        }
    }

    /// Runs it on `args`; `size_gate`: as the engine does, declining a small problem first
    /// when it is a tiling.
    fn call(&self, args: LinearArgs<R>, size_gate: bool) -> Result<(), String> {
        if self.tiling && size_gate {
            args.below_tilings()?;
        }
        (self.run)(args)
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
        list.push(
            Entry::tuned(tiling.name(), move |args: LinearArgs<R>| {
                args.tf32_allowed()?;
                args.split(|inputs| launch_tiling(&tiling, inputs))
            })
            .tiling(),
        );
    }
    #[cfg(feature = "cuda")]
    {
        use super::hopper::{WGMMA_FORCED_TILINGS, WGMMA_TF32_TILINGS, WGMMA_TILINGS, launch};
        use crate::config::WgmmaOffer;
        // Each tiling declines what it is not offered (`args.choices.wgmma`), the element types it
        // does not fit, and a TF32 tiling anything but f32.
        let entry = |name: String, tiling, f32_only: bool| {
            Entry::tuned(name, move |args: LinearArgs<R>| {
                if args.choices.wgmma == WgmmaOffer::Off {
                    return Err("not offered (HYPATIA_WGMMA=off)".into());
                }
                args.tf32_allowed()?;
                let f32 = args.x.dtype == DType::F32;
                if f32 && args.choices.wgmma == WgmmaOffer::Half {
                    return Err("f32 is not offered (HYPATIA_WGMMA=half)".into());
                }
                if f32_only && !f32 {
                    return Err("a TF32 tiling".into());
                }
                launch(tiling, &args)
            })
            .tiling()
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

/// The name of every candidate the engine has on runtime `R`, autotuned or run only when
/// forced by name.
pub fn candidate_names<R: CubeRuntime>() -> Vec<String> {
    candidates::<R>()
        .into_iter()
        .map(|entry| entry.name)
        .collect()
}

/// Runs the candidate called `name` on `args`: `Some(Err(reason))` where it declines the
/// problem, `None` if there is no such candidate. With `size_gate` a tensor-core tiling
/// declines a problem too small for it, as it does under autotune; without, it runs whatever
/// it can (the property tests check each kernel at every size that way).
pub fn run_candidate<R: CubeRuntime>(
    name: &str,
    args: LinearArgs<R>,
    size_gate: bool,
) -> Option<Result<(), String>> {
    let (index, entry) = candidates::<R>()
        .into_iter()
        .enumerate()
        .find(|(_, entry)| entry.name == name)?;
    let result = entry.call(args, size_gate);
    if result.is_ok() {
        LAST.store(index, Ordering::Relaxed);
    }
    Some(result)
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
        let name = entry.name.clone();
        set = set.with(Tunable::new(&name, move |args: LinearArgs<R>| {
            entry.call(args, true)?;
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
/// candidate for this problem on this device, into new contiguous buffers, under `choices`
/// (f32 as `choices.f32` says: a candidate that cannot round that way declines); `candidate`
/// names one that runs instead of autotune's choice, where it applies
/// ([`HypatiaConfig::engine_candidate`](crate::config::HypatiaConfig::engine_candidate)).
pub fn tensor_core_linear<R: CubeRuntime>(
    problem: &LinearProblem,
    x: &Operand<R>,
    w: &Operand<R>,
    epilogue: EpilogueInputs<'_, R>,
    write_pre: bool,
    choices: EngineChoices,
    candidate: Option<&str>,
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
    let w_id = w.id;
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
        mask: epilogue
            .mask
            .map(|m| tensor(m.handle.clone(), m.shape.clone())),
        aux: epilogue
            .aux
            .map(|a| tensor(a.handle.clone(), a.shape.clone())),
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
        w_id,
        choices,
    };
    let outputs = LinearOutputs {
        out: args.out.clone().into(),
        pre: args.pre.clone().map(Into::into),
        bias_grad: args.bias_grad.clone().map(Into::into),
        shape: problem.out_shape.clone(),
    };
    if let Some(name) = candidate {
        match run_candidate(name, args.clone(), true) {
            Some(Ok(())) => return outputs,
            Some(Err(reason)) => {
                log::warn!("hypatia: engine candidate `{name}` declined: {reason}")
            }
            None => panic!(
                "hypatia: engine-candidate `{name}` is none of this device's {:?}",
                candidate_names::<R>()
            ),
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
