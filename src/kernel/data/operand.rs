//! Operands and outputs: device handles with their real shapes, what an epilogue reads, what a
//! launch produced.

use super::{Epilogue, EpilogueFlags};
use burn_backend::DType;
use burn_cubecl_fusion::CubeFusionHandle;
use burn_std::Strides;
use cubecl::prelude::*;

/// One operand: a device handle and its real shape (strides live in the handle).
#[derive(Clone, Debug)]
pub struct Operand<R: Runtime> {
    /// The device buffer, dtype and strides.
    pub handle: CubeFusionHandle<R>,
    /// The real shape.
    pub shape: Vec<usize>,
    /// The tensor's burn-fusion id, where the caller has one: its contents never change, so a
    /// kernel may keep a copy of it in another layout under this id (decision record 0009).
    pub id: Option<u64>,
}

impl<R: Runtime> Operand<R> {
    /// This operand, borrowed.
    pub fn as_ref(&self) -> OperandRef<'_, R> {
        OperandRef {
            handle: &self.handle,
            shape: &self.shape,
        }
    }
}

/// An [`Operand`] read in place: a replayed MLP chain borrows its handles and shapes from
/// burn-fusion's context instead of cloning them (each clone takes shared reference counts).
#[derive(Debug)]
pub struct OperandRef<'a, R: Runtime> {
    /// The device buffer, dtype and strides.
    pub handle: &'a CubeFusionHandle<R>,
    /// The real shape.
    pub shape: &'a [usize],
}

impl<R: Runtime> Clone for OperandRef<'_, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R: Runtime> Copy for OperandRef<'_, R> {}

/// What one fused launch produced.
#[derive(Debug)]
pub struct LinearOutputs<R: Runtime> {
    /// The activation, contiguous.
    pub out: CubeFusionHandle<R>,
    /// The pre-activation, when asked for.
    pub pre: Option<CubeFusionHandle<R>>,
    /// `Σ_rows out`, shaped `[1, .., 1, n]` (the output's rank), when
    /// [`EpilogueInputs::bias_grad`] asked for it.
    pub bias_grad: Option<CubeFusionHandle<R>>,
    /// Shape of `out` and `pre`.
    pub shape: Vec<usize>,
}

/// The shape of [`LinearOutputs::bias_grad`] for an output of `shape`: every dim but the last
/// summed, and kept as 1 (Burn's `sum_dim` keeps the dims).
pub fn bias_grad_shape(shape: &[usize]) -> Vec<usize> {
    let mut summed = vec![1; shape.len()];
    if let (Some(last), Some(n)) = (summed.last_mut(), shape.last()) {
        *last = *n;
    }
    summed
}

pub(crate) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// A contiguous uninitialised buffer of `shape` on `like`'s device.
pub fn alloc<R: Runtime>(
    like: &CubeFusionHandle<R>,
    shape: &[usize],
    dtype: DType,
) -> CubeFusionHandle<R> {
    let bytes = shape.iter().product::<usize>() * dtype.size();
    CubeFusionHandle {
        client: like.client.clone(),
        handle: like.client.empty(bytes),
        device: like.device.clone(),
        dtype,
        strides: Strides::new(&contiguous_strides(shape)),
        qparams: None,
    }
}

/// The tensors an epilogue reads besides the accumulator.
#[derive(Clone, Copy, Debug)]
pub struct EpilogueInputs<'a, R: Runtime> {
    /// What is applied.
    pub epilogue: Epilogue,
    /// A row of `n` added first.
    pub bias: Option<&'a Operand<R>>,
    /// The gate of a backward epilogue ([`Epilogue::gated`]), of the output's shape, rows
    /// contiguous or pitched (see [`check_gate`](super::check_gate)).
    pub gate: Option<&'a Operand<R>>,
    /// Dropout's mask ([`Epilogue::dropout`]) or SiLU's saved sigmoid (tanh GELU's saved
    /// `tanh + 1`), laid out as the gate.
    pub mask: Option<&'a Operand<R>>,
    /// Tanh GELU's saved tanh input or SwiGLU's up projection ([`Epilogue::has_aux`]), laid
    /// out as the gate.
    pub aux: Option<&'a Operand<R>>,
    /// The run-time parameters of the activation ([`Epilogue::parameters`]): LeakyReLU's
    /// slope, clamp's min and max, dropout's scale; unused entries are zero.
    pub params: [f32; 2],
    /// Also sum the stored output over its rows ([`LinearOutputs::bias_grad`]): the bias
    /// gradient of relu's backward, from the same pass where the kernel can.
    pub bias_grad: bool,
}

impl<'a, R: Runtime> EpilogueInputs<'a, R> {
    /// `epilogue` with a bias and no gate.
    pub fn new(epilogue: Epilogue, bias: Option<&'a Operand<R>>) -> Self {
        Self {
            epilogue,
            bias,
            gate: None,
            mask: None,
            aux: None,
            params: [0.0; 2],
            bias_grad: false,
        }
    }

    /// With the activation's run-time parameters.
    pub fn with_params(self, params: [f32; 2]) -> Self {
        Self { params, ..self }
    }

    pub(crate) fn flags(&self, write_pre: bool) -> EpilogueFlags {
        EpilogueFlags::new(self.epilogue, self.bias.is_some(), write_pre)
    }

    /// With [`Self::bias_grad`] set to `bias_grad`.
    pub fn with_bias_grad(self, bias_grad: bool) -> Self {
        Self { bias_grad, ..self }
    }
}
