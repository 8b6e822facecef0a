//! The execution context: what a step reads from burn-fusion's `Context` (real shapes,
//! scalars, handles) and what it gives back (released tensors).

use super::FallbackReason;
use crate::kernel::Operand;
use crate::plan::{FusedLinear, Plan, TensorRef};
use burn_cubecl::CubeRuntime;
use burn_cubecl_fusion::CubeFusionHandle;
use burn_fusion::stream::{Context, ScalarId};
use burn_ir::{ScalarIr, TensorIr, TensorStatus};

/// The value of relative scalar `id` in this execution's context (NaN when absent).
pub(crate) fn scalar_value<H>(context: &Context<H>, id: u64) -> f64 {
    match context.scalars.get(&ScalarId { value: id }) {
        Some(ScalarIr::Float(v)) => *v,
        Some(ScalarIr::Int(v)) => *v as f64,
        Some(ScalarIr::UInt(v)) => *v as f64,
        Some(ScalarIr::Bool(_)) | None => f64::NAN,
    }
}

/// The plan's scalars are ids; the values the fused activations assume must hold now.
pub(crate) fn check_guards<H>(plan: &Plan, context: &Context<H>) -> Result<(), FallbackReason> {
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
pub(crate) fn step_params<H>(step: &FusedLinear, context: &Context<H>) -> [f32; 2] {
    let mut params = [0.0f32; 2];
    for (param, &id) in params.iter_mut().zip(&step.params) {
        *param = scalar_value(context, id) as f32;
    }
    params
}

/// `tensor`'s handle (left in place) and real shape, as a kernel operand.
pub(crate) fn operand<R: CubeRuntime>(
    context: &mut Context<CubeFusionHandle<R>>,
    tensor: &TensorIr,
) -> Operand<R> {
    Operand {
        handle: context
            .handles
            .get_handle(&tensor.id, &TensorStatus::ReadOnly),
        shape: tensor.shape.to_vec(),
        id: Some(tensor.id.value()),
    }
}

/// Releases the handles whose last reader (`ReadWrite`) was a fused launch, once each (x may
/// also be w).
pub(crate) fn release<H: Clone>(
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
            #[cfg(feature = "cuda")]
            crate::kernel::hopper::forget(id.value());
            released.push(reference.id);
        }
    }
}

/// Tensor `id` as the context knows it now (its real shape, its status in this execution).
pub(crate) fn real_tensor<H>(context: &Context<H>, id: &burn_ir::TensorId) -> TensorIr {
    context
        .tensors
        .get(id)
        .cloned()
        .expect("every tensor of a claimed block is in the context")
}
