//! Running a run of chained plan steps as one [MLP-chain launch](crate::kernel::chain).

use super::HypatiaRuntime;
use super::linear::{compare, operand, real_tensor, release};
use crate::fallback::verify::VerifyMode;
use crate::fallback::{FallbackReason, after_first_launch, before_first_launch, run_unfused};
use crate::kernel::chain::{ChainLayer, ChainLimits, check_chain, launch_mlp_chain};
use crate::kernel::{choose_chain, has_matrix_units};
use crate::plan::FusedLinear;
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

/// Runs `steps` (a plan's chained run: each step's `x` is the previous step's `out`) as one
/// launch, if the kernel takes the real sizes and the cost model prefers it.
pub(super) fn run_chain<R: CubeRuntime>(
    steps: &[&FusedLinear],
    context: &mut Context<CubeFusionHandle<R>>,
    execution: &OrderedExecution<HypatiaRuntime<R>>,
    first_launch: bool,
    verify: VerifyMode,
    device_key: &str,
) -> ChainRun {
    let x = real_tensor(context, &steps[0].x.id);
    let weights: Vec<TensorIr> = steps
        .iter()
        .map(|s| real_tensor(context, &s.w.id))
        .collect();
    let biases: Vec<Option<TensorIr>> = (steps.iter())
        .map(|s| s.bias.map(|b| real_tensor(context, &b.id)))
        .collect();
    let Some(x_handle) = context.handles.get_handle_ref(&x.id) else {
        return ChainRun::PerLayer;
    };
    let client = x_handle.client.clone();
    let strides = x_handle.strides.to_vec();
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
        return ChainRun::PerLayer;
    }
    let limits = ChainLimits::of(&client);
    let Ok(problem) = check_chain((&x.shape, &strides, x.dtype), &shapes, limits) else {
        return ChainRun::PerLayer;
    };
    let last = steps[steps.len() - 1];
    if !choose_chain(&problem, &client)
        || real_tensor(context, &last.out).shape.as_ref() != problem.out_shape.as_slice()
    {
        return ChainRun::PerLayer;
    }
    // Only the fallbacks below run the steps' own ops.
    let all_ops = || steps.iter().flat_map(|s| s.ops.iter().copied());
    if first_launch {
        before_first_launch(&client, device_key);
    }
    let x_operand = operand(context, &x);
    let w_operands: Vec<_> = weights.iter().map(|w| operand(context, w)).collect();
    let b_operands: Vec<_> = (biases.iter())
        .map(|b| b.as_ref().map(|b| operand(context, b)))
        .collect();
    let layers: Vec<ChainLayer<'_, R>> = (steps.iter().zip(&w_operands).zip(&b_operands))
        .map(|((step, w), b)| ChainLayer {
            w,
            bias: b.as_ref(),
            epilogue: step.epilogue,
        })
        .collect();
    let outputs = launch_mlp_chain(&problem, limits, &x_operand, &layers);
    if first_launch && let Err(reason) = after_first_launch(&client) {
        run_unfused(all_ops(), context, execution);
        return ChainRun::Failed(reason);
    }
    if verify != VerifyMode::Off {
        // Burn's ops produce what the user reads; the chain's output is only compared.
        run_unfused(all_ops(), context, execution);
        let tf32 = has_matrix_units(&client, DType::F32);
        let last_w = &weights[weights.len() - 1];
        return match compare(last, [&x, last_w], outputs, context, tf32) {
            Ok(()) => ChainRun::Ran { verified: true },
            Err(reason) => ChainRun::Failed(reason),
        };
    }
    // Release what the chain read last: the input and every weight and bias (the hidden
    // activations between layers never existed).
    let hidden: Vec<_> = steps[..steps.len() - 1].iter().map(|s| s.out).collect();
    let read = steps.iter().flat_map(|step| step.operands());
    release(context, read.filter(|r| !hidden.contains(&r.id)));
    context
        .handles
        .register_handle(real_tensor(context, &last.out).id, outputs.out);
    ChainRun::Ran { verified: false }
}
