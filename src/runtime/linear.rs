//! [`LinearOptimization`]: runs a [`Plan`] — fused kernels, or Burn's ops where they can't run.

use super::HypatiaRuntime;
use crate::fallback::{FallbackReason, run_unfused};
use crate::kernel::tensor_core::tensor_core_linear;
use crate::kernel::{
    Execution, Operand, check_linear, choose_execution, launch_bias_activation, launch_fused_linear,
};
use crate::plan::{FusedLinear, Plan, Step, TensorRef};
use crate::stats;
use burn_cubecl::CubeRuntime;
use burn_cubecl_fusion::CubeFusionHandle;
use burn_fusion::stream::{Context, OrderedExecution, ScalarId};
use burn_ir::{ScalarIr, TensorIr, TensorStatus};
use std::marker::PhantomData;
use std::sync::Arc;

/// Executes a [`Plan`] on a device.
pub struct LinearOptimization<R: CubeRuntime> {
    plan: Arc<Plan>,
    device_key: String,
    _runtime: PhantomData<R>,
}

impl<R: CubeRuntime> LinearOptimization<R> {
    /// An optimization running `plan` on `device`.
    pub fn new(plan: impl Into<Arc<Plan>>, device: R::Device) -> Self {
        Self {
            plan: plan.into(),
            device_key: stats::device_key(&device),
            _runtime: PhantomData,
        }
    }

    /// The plan it runs.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Runs the plan: each fused step as one kernel, unless its checks fail, then its ops.
    pub fn execute(
        &mut self,
        context: &mut Context<CubeFusionHandle<R>>,
        execution: &OrderedExecution<HypatiaRuntime<R>>,
    ) {
        if let Err(reason) = check_zero_scalars(&self.plan, context) {
            for step in self.plan.fused() {
                self.record_fallback(step, &reason);
            }
            run_unfused(0..self.plan.len, context, execution);
            return;
        }
        for step in &self.plan.steps {
            match step {
                Step::Run(index) => run_unfused([*index], context, execution),
                Step::Fused(fused) => match run_fused(fused, context, execution) {
                    Ok(Execution::Tiled) => stats::record(&self.device_key, |s| {
                        stats::pattern(s, fused.epilogue.pattern()).executed += 1
                    }),
                    Ok(Execution::TensorCore) => stats::record(&self.device_key, |s| {
                        stats::pattern(s, fused.epilogue.pattern()).tensor_core += 1
                    }),
                    Ok(Execution::Split) => stats::record(&self.device_key, |s| {
                        stats::pattern(s, fused.epilogue.pattern()).split += 1
                    }),
                    Err(reason) => {
                        self.record_fallback(fused, &reason);
                        run_unfused(fused.ops.iter().copied(), context, execution);
                    }
                },
            }
        }
    }

    fn record_fallback(&self, step: &FusedLinear, reason: &FallbackReason) {
        log::debug!(
            "hypatia: {} fell back to Burn's ops: {reason}",
            step.epilogue.pattern()
        );
        stats::record(&self.device_key, |s| {
            let pattern = stats::pattern(s, step.epilogue.pattern());
            *pattern
                .fallbacks
                .entry(reason.key().to_string())
                .or_default() += 1;
        });
    }
}

/// Relu's threshold and fill value are scalar ids in the plan; they must be zero now.
fn check_zero_scalars<H>(plan: &Plan, context: &Context<H>) -> Result<(), FallbackReason> {
    for &id in &plan.zero_scalars {
        let value = match context.scalars.get(&ScalarId { value: id }) {
            Some(ScalarIr::Float(v)) => *v,
            Some(ScalarIr::Int(v)) => *v as f64,
            Some(ScalarIr::UInt(v)) => *v as f64,
            Some(ScalarIr::Bool(_)) | None => f64::NAN,
        };
        if value != 0.0 {
            return Err(FallbackReason::NonZeroScalar { id, value });
        }
    }
    Ok(())
}

fn real_tensor<H>(context: &Context<H>, id: &burn_ir::TensorId) -> TensorIr {
    context
        .tensors
        .get(id)
        .cloned()
        .expect("every tensor of a claimed block is in the context")
}

/// One fused step, tiled or split; on `Err` nothing was launched and no handle was touched.
fn run_fused<R: CubeRuntime>(
    step: &FusedLinear,
    context: &mut Context<CubeFusionHandle<R>>,
    execution: &OrderedExecution<HypatiaRuntime<R>>,
) -> Result<Execution, FallbackReason> {
    let inputs: Vec<(TensorRef, TensorIr)> = [Some(step.x), Some(step.w), step.bias]
        .into_iter()
        .flatten()
        .map(|r| (r, real_tensor(context, &r.id)))
        .collect();
    let out = real_tensor(context, &step.out);
    let bias = step.bias.map(|_| &inputs[2].1);
    let problem = check_linear(
        (&inputs[0].1.shape, inputs[0].1.dtype),
        (&inputs[1].1.shape, inputs[1].1.dtype),
        bias.map(|t| (t.shape.as_ref(), t.dtype)),
    )?;
    if problem.out_shape.as_slice() != out.shape.as_ref() {
        return Err(crate::kernel::KernelError::IncompatibleShapes {
            lhs: inputs[0].1.shape.to_vec(),
            rhs: inputs[1].1.shape.to_vec(),
            bias: bias.map(|t| t.shape.to_vec()),
        }
        .into());
    }
    let operand = |context: &mut Context<CubeFusionHandle<R>>, tensor: &TensorIr| Operand {
        handle: context
            .handles
            .get_handle(&tensor.id, &TensorStatus::ReadOnly),
        shape: tensor.shape.to_vec(),
    };
    let client = context
        .handles
        .get_handle_ref(&inputs[0].1.id)
        .expect("operands of a claimed block are materialised")
        .client
        .clone();
    let kind = choose_execution(&problem, &client);
    let (outputs, consumed) = match kind {
        Execution::Tiled => {
            let operands: Vec<Operand<R>> =
                inputs.iter().map(|(_, t)| operand(context, t)).collect();
            let outputs = launch_fused_linear(
                &problem,
                &operands[0],
                &operands[1],
                operands.get(2),
                step.epilogue,
                step.pre.is_some(),
            );
            (outputs, &inputs[..])
        }
        Execution::TensorCore => {
            let operands: Vec<Operand<R>> =
                inputs.iter().map(|(_, t)| operand(context, t)).collect();
            let outputs = tensor_core_linear(
                &problem,
                &operands[0],
                &operands[1],
                operands.get(2),
                step.epilogue,
                step.pre.is_some(),
            );
            (outputs, &inputs[..])
        }
        Execution::Split => {
            // The inner backend's matmul (its ops consume x and w as Burn would), then the
            // epilogue kernel over its output, which nothing else reads.
            run_unfused(step.matmul_ops.iter().copied(), context, execution);
            let matmul_out = real_tensor(context, &step.matmul_out);
            let matmul_out = Operand {
                handle: context
                    .handles
                    .get_handle(&matmul_out.id, &TensorStatus::ReadWrite),
                shape: matmul_out.shape.to_vec(),
            };
            let bias = bias.map(|t| operand(context, t));
            let outputs = launch_bias_activation(
                &matmul_out,
                bias.as_ref(),
                step.epilogue,
                step.pre.is_some(),
            )
            .expect("check_linear accepted this bias for this output");
            (outputs, &inputs[2..])
        }
    };
    // Release the handles whose last reader was this step (once each: x may also be w).
    let mut released = Vec::new();
    for (reference, tensor) in consumed {
        if reference.status == TensorStatus::ReadWrite && !released.contains(&tensor.id) {
            context
                .handles
                .get_handle(&tensor.id, &TensorStatus::ReadWrite);
            released.push(tensor.id);
        }
    }
    context.handles.register_handle(out.id, outputs.out);
    if let (Some(pre), Some(handle)) = (step.pre, outputs.pre) {
        let pre = real_tensor(context, &pre);
        context.handles.register_handle(pre.id, handle);
    }
    Ok(kind)
}
