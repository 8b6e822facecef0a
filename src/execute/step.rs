//! One fused step on Hypatia's side: the execution chosen for it (tiled, tensor-core engine,
//! split), its launch, its first-launch and verify checks, or Burn's ops where it cannot run.

use super::burn_path::{CubeStream, run_recomputed};
use super::context::*;
use super::verify::compare;
use super::{Execution, choose_execution, has_matrix_units};
use super::{FallbackReason, after_first_launch, before_first_launch, run_unfused};
use crate::config::{HypatiaConfig, VerifyMode};
use crate::kernel::EngineChoices;
use crate::kernel::engine::tensor_core_linear;
use crate::kernel::{
    Epilogue, EpilogueInputs, Gate, LinearOutputs, LinearProblem, Operand, check_gate,
    check_linear, launch_bias_activation, launch_fused_linear,
};
use crate::plan::{FusedLinear, TensorRef};
use burn_backend::DType;
use burn_cubecl::CubeRuntime;
use burn_cubecl_fusion::CubeFusionHandle;
use burn_cubecl_fusion::optim::elemwise::ElemwiseOptimization;
use burn_fusion::stream::{Context, OrderedExecution};
use burn_ir::{TensorIr, TensorStatus};

/// What a step's execution must check besides running.
#[derive(Clone, Copy)]
pub(super) struct Checks<'a> {
    /// The executions (bits) already launched once without error: others are flushed and
    /// checked after their first launch.
    pub(super) launched: u8,
    /// Compare with Burn's ops.
    pub(super) verify: VerifyMode,
    pub(super) device_key: &'a str,
    /// The configuration this execution runs under.
    pub(super) config: &'a HypatiaConfig,
}

/// How a step ran.
pub(super) struct Ran {
    pub(super) kind: Execution,
    /// A Hypatia kernel was launched (and, the first time for this execution, checked).
    pub(super) launched: bool,
    /// Verify mode compared it with Burn's ops, and they matched.
    pub(super) verified: bool,
    /// The kernel's bias gradient was kept: the step's `sum_dim` ops are skipped.
    pub(super) summed: bool,
}

/// Skips a `sum_dim` op of a [`BiasGrad`](crate::plan::BiasGrad) a fused kernel already
/// produced, releasing its input `read` as the op would have there (the step's output, where
/// the sum was its last reader; a rank-3 sum's intermediate was never made).
pub(super) fn skip_sum<H: Clone>(read: TensorRef, context: &mut Context<H>) {
    let id = real_tensor(context, &read.id).id;
    if read.status == TensorStatus::ReadWrite && context.handles.get_handle_ref(&id).is_some() {
        context.handles.get_handle(&id, &TensorStatus::ReadWrite);
    }
}

/// The tensors a fused launch produced, for the step's `out` and `pre`.
pub(super) struct Produced<R: CubeRuntime> {
    pub(super) outputs: LinearOutputs<R>,
    /// The ops still to run for Burn's results (all of the step's, or those after the split
    /// matmul), and the handles to release when the fused outputs are kept.
    pub(super) rest: Vec<usize>,
    pub(super) consumed: Vec<TensorRef>,
    /// This execution's first launch on this step: flushed and checked after it.
    pub(super) first_launch: bool,
    /// SwiGLU's up projection, where a Hypatia kernel computed it and the step writes it (it
    /// is kept).
    pub(super) up: Option<CubeFusionHandle<R>>,
}

/// One fused step, tiled, on the tensor-core engine or split. On `Err` the step ran as Burn's
/// ops instead (nothing fused was kept) and the reason says why.
pub(super) fn run_fused<R: CubeRuntime, F: CubeStream<R>>(
    step: &FusedLinear,
    recompute: Option<&ElemwiseOptimization<R>>,
    context: &mut Context<CubeFusionHandle<R>>,
    execution: &OrderedExecution<F>,
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
        compare(step, [&x, &w], produced.outputs, produced.up, context, tf32)?;
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
    if let (Some(up), Some(handle)) = (&step.up, produced.up) {
        let up = real_tensor(context, &up.out);
        context.handles.register_handle(up.id, handle);
    }
    // The values kept from the pre-activation alone, by Burn's ops (decision record 0023).
    run_recomputed(recompute, &step.recomputed, context, execution);
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
pub(super) fn sum_rhs<R: CubeRuntime>(
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
pub(super) fn launch<R: CubeRuntime, F: CubeStream<R>>(
    step: &FusedLinear,
    x: &TensorIr,
    w: &TensorIr,
    context: &mut Context<CubeFusionHandle<R>>,
    execution: &OrderedExecution<F>,
    checks: Checks<'_>,
) -> Result<Option<(Execution, Produced<R>)>, FallbackReason> {
    let bias = step.bias.map(|r| real_tensor(context, &r.id));
    let gate = step.gate.map(|r| real_tensor(context, &r.id));
    let mask = step.mask.map(|r| real_tensor(context, &r.id));
    let aux = step.aux.map(|r| real_tensor(context, &r.id));
    let up = step
        .up
        .as_deref()
        .map(|up| (up, real_tensor(context, &up.w.id)));
    let out = real_tensor(context, &step.out);
    let problem = check_linear(
        (&x.shape, x.dtype),
        (&w.shape, w.dtype),
        bias.as_ref().map(|t| (t.shape.as_ref(), t.dtype)),
    )?;
    let incompatible = |rhs: &TensorIr| crate::kernel::KernelError::IncompatibleShapes {
        lhs: x.shape.to_vec(),
        rhs: rhs.shape.to_vec(),
        bias: bias.as_ref().map(|t| t.shape.to_vec()),
    };
    if problem.out_shape.as_slice() != out.shape.as_ref() {
        return Err(incompatible(w).into());
    }
    // SwiGLU's up projection: `x · w_up`, of the output's shape.
    let up_problem = match &up {
        Some((_, w_up)) => {
            let up_problem = check_linear((&x.shape, x.dtype), (&w_up.shape, w_up.dtype), None)?;
            if up_problem.out_shape != problem.out_shape {
                return Err(incompatible(w_up).into());
            }
            Some(up_problem)
        }
        None => None,
    };
    let gate = gate.map(|t| operand(context, &t));
    let mask = mask.map(|t| operand(context, &t));
    let aux = aux.map(|t| operand(context, &t));
    if let Some(gate) = &gate {
        check_gate(
            gate,
            step.epilogue.gate(),
            &problem.out_shape,
            problem.dtype,
        )?;
    }
    for saved in mask.iter().chain(&aux) {
        check_gate(saved, Gate::None, &problem.out_shape, problem.dtype)?;
    }
    let client = context
        .handles
        .get_handle_ref(&x.id)
        .expect("operands of a claimed block are materialised")
        .client
        .clone();
    let config = checks.config;
    let kind = choose_execution(&problem, step.epilogue, &client, config);
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
        mask: mask.as_ref(),
        aux: aux.as_ref(),
        params: step_params(step, context),
        // A sum of `w` runs after the kernel (`sum_rhs`), not in its epilogue.
        bias_grad: step.bias_grad.as_ref().is_some_and(|grad| !grad.of_rhs),
    };
    let write_pre = step.pre.is_some();
    let produced = match kind {
        Execution::Tiled | Execution::TensorCore => {
            let (x, w) = (operand(context, x), operand(context, w));
            let linear = |problem: &LinearProblem, w: &Operand<R>, epilogue, write_pre| match kind {
                Execution::Tiled => launch_fused_linear(problem, &x, w, epilogue, write_pre),
                _ => {
                    let choices = EngineChoices::new(config, problem.f32_math(config));
                    let candidate = config.engine_candidate.as_deref();
                    tensor_core_linear(problem, &x, w, epilogue, write_pre, choices, candidate)
                }
            };
            // SwiGLU's up projection first, a plain matmul on the same kernel; the epilogue
            // reads it as its `aux` (decision record 0031).
            let up = (up.as_ref().zip(up_problem.as_ref())).map(|((_, w_up), up_problem)| {
                let w_up = operand(context, w_up);
                let plain = EpilogueInputs::new(Epilogue::Identity, None);
                Operand {
                    handle: linear(up_problem, &w_up, plain, false).out,
                    shape: up_problem.out_shape.clone(),
                    id: None,
                }
            });
            let aux = epilogue.aux.or(up.as_ref());
            let outputs = linear(&problem, &w, EpilogueInputs { aux, ..epilogue }, write_pre);
            Produced {
                outputs,
                rest: step.ops.clone(),
                consumed: step.operands().collect(),
                first_launch,
                up: up
                    .filter(|_| step.up.as_ref().is_some_and(|up| up.kept))
                    .map(|up| up.handle),
            }
        }
        Execution::Split => {
            // The inner backend's matmul (its ops consume x and w as Burn would; SwiGLU's up
            // projection's with them, in block order), then the epilogue kernel over its
            // output, which only the step's other ops read.
            let up_ops = step.up.as_ref().map_or(&[][..], |up| &up.ops);
            let mut matmuls: Vec<usize> = step.matmul_ops.iter().chain(up_ops).copied().collect();
            matmuls.sort_unstable();
            run_unfused(matmuls.iter().copied(), context, execution);
            let matmul_out = real_tensor(context, &step.matmul_out);
            let matmul_out = operand(context, &matmul_out);
            let up_out =
                (step.up.as_ref()).map(|up| operand(context, &real_tensor(context, &up.out)));
            let aux = epilogue.aux.or(up_out.as_ref());
            let outputs =
                launch_bias_activation(&matmul_out, EpilogueInputs { aux, ..epilogue }, write_pre)
                    .expect("check_linear accepted this bias for this output");
            let rest = step.ops.iter().copied();
            // An up projection nothing keeps is released as the step's last reader of it.
            let up_read = (step.up.as_ref())
                .filter(|up| !up.kept)
                .map(|up| TensorRef {
                    id: up.out,
                    status: TensorStatus::ReadWrite,
                });
            Produced {
                outputs,
                rest: rest.filter(|op| !matmuls.contains(op)).collect(),
                consumed: [step.bias, step.gate, step.mask, step.aux]
                    .into_iter()
                    .flatten()
                    .chain([TensorRef {
                        id: step.matmul_out,
                        status: TensorStatus::ReadWrite,
                    }])
                    .chain(up_read)
                    .collect(),
                first_launch,
                up: None,
            }
        }
    };
    Ok(Some((kind, produced)))
}
