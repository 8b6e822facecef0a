//! [`LinearOptimization`]: runs a [`Plan`] — fused kernels, or Burn's ops where they can't run.

use super::HypatiaRuntime;
use crate::fallback::{FallbackReason, run_unfused};
use crate::kernel::tensor_core::tensor_core_linear;
use crate::kernel::{
    EpilogueInputs, Execution, Operand, check_gate, check_linear, choose_execution,
    launch_bias_activation, launch_fused_linear,
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
        let start = std::time::Instant::now();
        self.run_steps(context, execution);
        let nanos = start.elapsed().as_nanos() as u64;
        stats::record(&self.device_key, |s| {
            s.host.execute_nanos += nanos;
            s.host.executions += 1;
        });
    }

    fn run_steps(
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
    let [x, w] = [step.x, step.w].map(|r| real_tensor(context, &r.id));
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
    let operand = |context: &mut Context<CubeFusionHandle<R>>, tensor: &TensorIr| Operand {
        handle: context
            .handles
            .get_handle(&tensor.id, &TensorStatus::ReadOnly),
        shape: tensor.shape.to_vec(),
    };
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
    let kind = choose_execution(&problem, step.epilogue, &client);
    let bias_operand = bias.as_ref().map(|t| operand(context, t));
    let epilogue = EpilogueInputs {
        epilogue: step.epilogue,
        bias: bias_operand.as_ref(),
        gate: gate.as_ref(),
    };
    let write_pre = step.pre.is_some();
    let (outputs, consumed): (_, Vec<TensorRef>) = match kind {
        Execution::Tiled | Execution::TensorCore => {
            let launch = match kind {
                Execution::Tiled => launch_fused_linear,
                _ => tensor_core_linear,
            };
            let (x, w) = (operand(context, &x), operand(context, &w));
            let outputs = launch(&problem, &x, &w, epilogue, write_pre);
            (outputs, step.operands().collect())
        }
        Execution::Split if step.out == step.matmul_out => {
            // Nothing to apply: the inner backend's matmul writes the output itself.
            run_unfused(step.matmul_ops.iter().copied(), context, execution);
            return Ok(kind);
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
            let outputs = launch_bias_activation(&matmul_out, epilogue, write_pre)
                .expect("check_linear accepted this bias for this output");
            (
                outputs,
                [step.bias, step.gate].into_iter().flatten().collect(),
            )
        }
    };
    // Release the handles whose last reader was this step (once each: x may also be w).
    let mut released = Vec::new();
    for reference in consumed {
        if reference.status == TensorStatus::ReadWrite && !released.contains(&reference.id) {
            let id = real_tensor(context, &reference.id).id;
            context.handles.get_handle(&id, &TensorStatus::ReadWrite);
            released.push(reference.id);
        }
    }
    context.handles.register_handle(out.id, outputs.out);
    if let (Some(pre), Some(handle)) = (step.pre, outputs.pre) {
        let pre = real_tensor(context, &pre);
        context.handles.register_handle(pre.id, handle);
    }
    Ok(kind)
}
