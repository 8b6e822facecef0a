//! How the engine runs [`LinearArgs`]: Burn's matmul or a cubek tiling followed by the split
//! epilogue pass, the tiled unit kernel, and the autotune key.

use super::Inputs;
use crate::kernel::{
    Epilogue, EpilogueInputs, F32Math, LinearArgs, is_aligned, is_contiguous,
    launch_bias_activation_into, launch_fused_linear_into,
};
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;

/// Largest problem (FLOPs) the tiled unit kernel is tuned on: beyond it, it always lost.
const TILED_MAX_FLOPS: f64 = 1.0e9;
impl<R: CubeRuntime> LinearArgs<R> {
    /// Whether the epilogue does nothing: the matmul may write `out` directly.
    fn is_plain(&self) -> bool {
        self.epilogue == Epilogue::Identity
            && self.bias.is_none()
            && self.pre.is_none()
            && self.bias_grad.is_none()
    }

    /// Calls `launch` with the epilogue and its bias, gate, mask and aux as kernel operands.
    fn with_epilogue<T>(&self, launch: impl FnOnce(EpilogueInputs<'_, R>) -> T) -> T {
        let (bias, gate, mask, aux) = (
            self.bias.as_ref().map(Self::operand),
            self.gate.as_ref().map(Self::operand),
            self.mask.as_ref().map(Self::operand),
            self.aux.as_ref().map(Self::operand),
        );
        launch(EpilogueInputs {
            epilogue: self.epilogue,
            bias: bias.as_ref(),
            gate: gate.as_ref(),
            mask: mask.as_ref(),
            aux: aux.as_ref(),
            params: self.params,
            bias_grad: self.bias_grad.is_some(),
        })
    }

    /// Runs `matmul` into a scratch buffer, then Hypatia's bias + activation kernel into the
    /// outputs (straight into `out` when there is nothing to apply).
    pub(super) fn split(
        &self,
        matmul: impl FnOnce(Inputs<R>) -> Result<(), String>,
    ) -> Result<(), String> {
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

    /// The autotune key's `m` ([`LinearProblem::key_rows`](crate::kernel::LinearProblem::key_rows)).
    /// A candidate that declines by size reads this, never the exact `m`, so that it declines
    /// every problem of a key or none (a choice replayed on a problem its candidate declines
    /// would panic in CubeCL's tuner).
    pub(super) fn key_rows(&self) -> usize {
        self.problem().key_rows()
    }

    /// Whether the problem is too small for the engine's tensor-core tilings
    /// ([`LinearProblem::is_small`](crate::kernel::LinearProblem::is_small)); read by the key's
    /// rows, so a whole key declines or none. Under the default policy such a problem never
    /// reaches the engine (it runs the tiled kernel); a forced engine still tunes Burn's matmul
    /// against the tiled kernel there.
    pub(super) fn below_tilings(&self) -> Result<(), String> {
        match self.problem().is_small() {
            true => Err("too small for a tensor-core tiling".into()),
            false => Ok(()),
        }
    }

    /// Whether a TF32 candidate may run this problem: not in f32 under [`F32Math::Burn`].
    pub(super) fn tf32_allowed(&self) -> Result<(), String> {
        if self.x.dtype == burn_backend::DType::F32 && self.choices.f32 == F32Math::Burn {
            // Hypatia's TF32 kernels: 6.6e-4 from float64, Burn's matmul 1.6e-5 at 2048³
            // (decision record 0014).
            return Err("f32 follows Burn's matmul here (f32 = \"burn\")".into());
        }
        Ok(())
    }

    /// The tiled unit kernel, whole linear in one launch.
    pub(super) fn tiled(&self) -> Result<(), String> {
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
            "m{} n{} k{} {:?} x{} w{} b{} p{} g{}{} {:?}{} {:?} {:?}{}",
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
            // Tanh GELU's saved tanh input, read as the gate is (keys without one unchanged).
            self.aux
                .as_ref()
                .map_or(String::new(), |a| format!(" a{}", layout(a))),
            self.epilogue,
            if self.bias_grad.is_some() { " db" } else { "" },
            self.choices.wgmma,
            self.choices.f32,
            // Which candidates apply is part of the key: a choice cached under another rule
            // would replay a candidate that now declines (CubeCL's tuner panics then).
            if self.below_tilings().is_err() {
                " small"
            } else {
                ""
            },
        )
    }
}
