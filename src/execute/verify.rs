//! Verify mode (the prototype's "dual mode"): while it is on, the first execution of every
//! fused step also runs Burn's unfused ops and compares the two results.
//!
//! The user then reads Burn's results, so verification never changes what a model computes.
//! A difference beyond [`tolerance`] (or a NaN / ±Inf where the other has none) makes the step
//! run Burn's ops from then on and is recorded in [`FusionStats`](crate::FusionStats) under
//! the fallback key `verify-mismatch`; [`VerifyMode::Strict`] also returns it as an error from
//! the next `B::sync` or tensor read on the device, the way Burn reports device errors.
//!
//! The configuration's `verify` key turns it on ([`VerifyMode`], `HYPATIA_VERIFY=strict`):
//!
//! ```
//! use hypatia::config::{VerifyMode, config, set_config, update_config};
//! let before = update_config(|c| c.verify = VerifyMode::Strict);
//! assert_eq!(config().verify, VerifyMode::Strict);
//! set_config(before);
//! ```

use super::FallbackReason;
use super::context::real_tensor;
pub use crate::config::VerifyMode;
use crate::kernel::LinearOutputs;
use crate::plan::FusedLinear;
use burn_backend::{DType, ExecutionError, Shape};
use burn_cubecl::{CubeBackend, CubeRuntime};
use burn_cubecl_fusion::CubeFusionHandle;
use burn_fusion::stream::Context;
use burn_ir::{BackendIr, TensorHandle, TensorIr, TensorStatus};

/// The largest accepted `|fused − burn|`, relative to `max(1, max |burn|)`.
///
/// Both sides accumulate in f32 in different orders and round the product, then each op after
/// it, to the storage type (decision record 0027; a fused activation rounds once), so they
/// differ by a few units of the storage type's roundoff;
/// on devices whose f32 matmul runs TF32 (`tf32`), by TF32's. A real fault (a lost bias, a
/// wrong gate, a stale tile) is off by O(1).
pub fn tolerance(dtype: DType, tf32: bool) -> f64 {
    match dtype {
        DType::F32 if tf32 => 5e-3,
        DType::F16 => 4e-3,
        DType::BF16 => 2e-2,
        _ => 1e-4,
    }
}

/// How far a fused result is from Burn's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Difference {
    /// Largest `|fused − burn|` over elements finite in both.
    pub max_abs: f64,
    /// `max_abs / max(1, max |burn|)`: what [`tolerance`] bounds.
    pub max_rel: f64,
    /// The first element where one side is NaN or ±Inf and the other is not the same.
    pub nonfinite: Option<usize>,
}

impl Difference {
    /// Compares `fused` with `burn`, element by element.
    ///
    /// ```
    /// use hypatia::execute::verify::Difference;
    /// let d = Difference::between(&[1.0, f32::NAN, 4.0], &[1.0, f32::NAN, 2.0]);
    /// assert_eq!((d.max_abs, d.max_rel, d.nonfinite), (2.0, 1.0, None)); // 2 / max(1, |2|)
    /// let d = Difference::between(&[0.0, 0.0], &[0.0, f32::NAN]);
    /// assert_eq!(d.nonfinite, Some(1)); // relu(NaN) must stay NaN
    /// ```
    pub fn between(fused: &[f32], burn: &[f32]) -> Self {
        let mut difference = Self::default();
        let mut scale = 1.0f64;
        for (i, (&a, &b)) in fused.iter().zip(burn).enumerate() {
            if a.is_finite() && b.is_finite() {
                difference.max_abs = difference.max_abs.max((a as f64 - b as f64).abs());
                scale = scale.max((b as f64).abs());
            } else if a.is_nan() != b.is_nan() || (!a.is_nan() && a != b) {
                difference.nonfinite.get_or_insert(i);
            }
        }
        if fused.len() != burn.len() {
            difference
                .nonfinite
                .get_or_insert(fused.len().min(burn.len()));
        }
        difference.max_rel = difference.max_abs / scale;
        difference
    }

    /// Whether the two agree within `tolerance` with the same NaN / ±Inf.
    pub fn within(&self, tolerance: f64) -> bool {
        self.nonfinite.is_none() && self.max_rel <= tolerance
    }
}

/// A fused step whose result differed from Burn's ops.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error(
    "hypatia verify: {pattern} differs from Burn's ops in its {tensor} (x {x:?} · w {w:?} -> \
     {shape:?}, {dtype:?}): max abs error {:.3e}, max rel error {:.3e}, tolerance {tolerance:.1e}{}",
    difference.max_abs,
    difference.max_rel,
    difference.nonfinite.map(|i| format!(", NaN/Inf differ at element {i}")).unwrap_or_default()
)]
pub struct Mismatch {
    /// The pattern (`linear-relu`, `matmul-relu-grad`, `matmul`).
    pub pattern: crate::config::FusedPattern,
    /// Which output: `output` or `pre-activation`.
    pub tensor: &'static str,
    /// Left operand shape.
    pub x: Vec<usize>,
    /// Right operand shape.
    pub w: Vec<usize>,
    /// Output shape.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// How far apart the two were.
    pub difference: Difference,
    /// The bound it broke.
    pub tolerance: f64,
}

/// The values of a device tensor (any float dtype, any strides), as f32.
pub(crate) fn read<R: CubeRuntime>(
    handle: CubeFusionHandle<R>,
    shape: &[usize],
) -> Result<Vec<f32>, ExecutionError> {
    use burn_backend::ops::FloatTensorOps;
    type Reader<R> = CubeBackend<R, f32, i32, u8>;
    let tensor = <Reader<R> as BackendIr>::float_tensor(TensorHandle {
        handle,
        shape: Shape::from(shape.to_vec()),
    });
    let data = burn_std::future::block_on(Reader::<R>::float_into_data(tensor))?;
    data.convert::<f32>()
        .into_vec::<f32>()
        .map_err(|error| ExecutionError::WithContext {
            reason: format!("{error:?}"),
        })
}

/// Compares the fused outputs (and SwiGLU's up projection, where the step writes it) with
/// Burn's, which the step's ops have just registered. A bias
/// gradient, whose `sum_dim` ops run later, is compared with the column sums of Burn's output
/// (in f64, on the host).
pub(crate) fn compare<R: CubeRuntime>(
    step: &FusedLinear,
    [x, w]: [&TensorIr; 2],
    outputs: LinearOutputs<R>,
    up: Option<CubeFusionHandle<R>>,
    context: &mut Context<CubeFusionHandle<R>>,
    tf32: bool,
) -> Result<(), FallbackReason> {
    let out = real_tensor(context, &step.out);
    let mismatch = |tensor, shape: &[usize], difference, tolerance| {
        FallbackReason::Mismatch(Box::new(Mismatch {
            pattern: step.pattern(),
            tensor,
            x: x.shape.to_vec(),
            w: w.shape.to_vec(),
            shape: shape.to_vec(),
            dtype: out.dtype,
            difference,
            tolerance,
        }))
    };
    let read = |handle, shape: &[usize]| {
        read(handle, shape).map_err(|e| FallbackReason::Launch(e.to_string()))
    };
    let tolerance = tolerance(out.dtype, tf32);
    let mut burn_out = None;
    let pairs = [
        (Some(step.out), Some(outputs.out), "output"),
        (step.pre, outputs.pre, "pre-activation"),
        (step.up.as_ref().map(|up| up.out), up, "up projection"),
    ];
    for (id, fused, tensor) in pairs {
        let (Some(id), Some(fused)) = (id, fused) else {
            continue;
        };
        let burn = real_tensor(context, &id);
        let burn_handle = context
            .handles
            .get_handle(&burn.id, &TensorStatus::ReadOnly);
        #[allow(unused_mut)]
        let mut fused = read(fused, &burn.shape)?;
        #[cfg(test)]
        if super::injected() == super::Fault::WrongResult {
            fused[0] += 1.0;
        }
        let burn_values = read(burn_handle, &burn.shape)?;
        let difference = Difference::between(&fused, &burn_values);
        if !difference.within(tolerance) {
            return Err(mismatch(tensor, &burn.shape, difference, tolerance));
        }
        if id == step.out {
            burn_out = Some(burn_values);
        }
    }
    // What the bias gradient sums: Burn's output, or the right operand.
    let summed = match &step.bias_grad {
        Some(grad) if grad.of_rhs => {
            let handle = context.handles.get_handle(&w.id, &TensorStatus::ReadOnly);
            Some((read(handle, &w.shape)?, w.shape.to_vec()))
        }
        _ => burn_out.map(|values| (values, out.shape.to_vec())),
    };
    if let (Some(fused), Some((values, summed_shape))) = (outputs.bias_grad, summed) {
        let n = *summed_shape.last().unwrap_or(&1);
        let mut sums = vec![0.0f64; n];
        for (i, value) in values.iter().enumerate() {
            sums[i % n] += *value as f64;
        }
        let sums: Vec<f32> = sums.into_iter().map(|v| v as f32).collect();
        let shape = crate::kernel::bias_grad_shape(&summed_shape);
        let difference = Difference::between(&read(fused, &shape)?, &sums);
        if !difference.within(tolerance) {
            return Err(mismatch("bias gradient", &shape, difference, tolerance));
        }
    }
    Ok(())
}
