//! The epilogue as CubeCL device code: every CubeCL kernel (tiled, split, chain) stores
//! through these functions, so each activation is written once.

use super::{Activation, EpilogueFlags, Gate, SQRT_2_OVER_PI};
use cubecl::prelude::*;

/// [`SQRT_2`](super::SQRT_2) as the kernels divide by it (Burn's scalar, converted to f32).
const GELU_DIVISOR: f32 = std::f32::consts::SQRT_2;
/// [`SQRT_2_OVER_PI`] as the kernels multiply by it.
const GELU_TANH_SCALE: f32 = SQRT_2_OVER_PI as f32;

/// Burn's relu on an f32 accumulator: NaN compares false, so it passes through.
#[cube]
pub fn relu_keep_nan(value: f32) -> f32 {
    select(value <= 0.0f32, 0.0f32, value)
}

/// `activation(value)` in f32, as Burn's ops compute it (see [`Epilogue`](super::Epilogue)). `alpha` and `beta`
/// are the run-time parameters (LeakyReLU's slope, clamp's bounds).
#[cube]
pub fn activate(value: f32, alpha: f32, beta: f32, #[comptime] activation: Activation) -> f32 {
    let mut out = value;
    if comptime![activation == Activation::Relu] {
        out = relu_keep_nan(value);
    }
    if comptime![activation == Activation::Gelu] {
        let inner = Erf::erf(value / GELU_DIVISOR) + 1.0f32;
        out = value * inner / 2.0f32;
    }
    if comptime![activation == Activation::GeluTanh] {
        let cube = f32::powf(value, 3.0f32) * 0.044715f32;
        let inner = f32::tanh((value + cube) * GELU_TANH_SCALE) + 1.0f32;
        out = value * inner * 0.5f32;
    }
    if comptime![activation == Activation::Silu] {
        let sigmoid = f32::exp(-f32::ln(f32::exp(-value) + 1.0f32));
        out = value * sigmoid;
    }
    if comptime![activation == Activation::LeakyRelu] {
        out = select(value < 0.0f32, value * alpha, value);
    }
    if comptime![activation == Activation::Clamp] {
        out = clamp(value, alpha, beta);
    }
    out
}

/// An activation's backward at the forward's pre-activation `gate` (LeakyReLU's: its saved
/// mask, nonzero where true), applied to `value` (`dy · Wᵀ`), in f32, with Burn's ops in
/// Burn's order (see [`Gate`]). `saved` is SiLU's saved sigmoid or tanh GELU's saved
/// `tanh + 1` (read from the `mask` operand), `aux` tanh GELU's saved tanh input (the `aux`
/// operand), `alpha` LeakyReLU's slope; the other gates read none of them.
#[cube]
pub fn gate_grad(
    value: f32,
    gate: f32,
    saved: f32,
    aux: f32,
    alpha: f32,
    #[comptime] kind: Gate,
) -> f32 {
    let mut out = value;
    if comptime![kind == Gate::Relu] {
        out = select(gate <= 0.0f32, 0.0f32, value);
    }
    if comptime![kind == Gate::Gelu] {
        // burn-backend's `gelu_backward`: x3 = powi(x, 3) (a `powf_scalar`), four scaled
        // terms, tanh, sech = -(tanh²) + 1, then y · grad.
        let cube = f32::powf(gate, 3.0f32);
        let inner1 = cube * 0.0356774f32 + gate * 0.797885f32;
        let inner2 = cube * 0.0535161f32 + gate * 0.398942f32;
        let tanh = f32::tanh(inner1);
        let sech = -(tanh * tanh) + 1.0f32;
        let y = tanh * 0.5f32 + (inner2 * sech + 0.5f32);
        out = y * value;
    }
    if comptime![kind == Gate::Silu] {
        // Burn's `Autodiff` of `x · sigmoid(x)`: mul's gradients `grad · s` and `grad · x`,
        // the second through `sigmoid_backward` of a sigmoid recomputed from x (burn-backend's
        // `sigmoid`, `sigmoid_backward`), then the two added.
        let sigmoid = f32::exp(-f32::ln(f32::exp(-gate) + 1.0f32));
        let derivative = sigmoid * (-sigmoid + 1.0f32);
        out = value * saved + derivative * (value * gate);
    }
    if comptime![kind == Gate::GeluTanh] {
        // Burn's `Autodiff` of `gelu_approximate`'s ops (decision record 0028): the last
        // `mul_scalar`'s and `mul`'s gradients, then `tanh`'s (t recomputed from its saved
        // input, as its backward does), the scale's, the add's and `powf_scalar`'s
        // (`mul_scalar(x · x, 3)`), summed in the order `Autodiff` adds them.
        let half = value * 0.5f32;
        let tanh = f32::tanh(aux);
        let inner = half * gate * (-(tanh * tanh) + 1.0f32) * GELU_TANH_SCALE;
        out = inner + half * saved + inner * 0.044715f32 * (gate * gate * 3.0f32);
    }
    if comptime![kind == Gate::LeakyRelu] {
        // `mask_where`'s gradients against zeros, the second scaled by `mul_scalar`'s
        // backward, then added (decision record 0029); one of the two terms is a zero.
        let negative = gate != 0.0f32;
        out = select(negative, 0.0f32, value) + select(negative, value, 0.0f32) * alpha;
    }
    out
}

/// The index in a `[rows, n]` tensor whose rows may be pitched (row stride `stride(0)`) of
/// the element at contiguous `offset`'s row and column `col`.
#[cube]
fn pitched_at<T: CubePrimitive>(tensor: &Tensor<T>, offset: usize, col: usize) -> usize {
    offset / tensor.shape(1) * tensor.stride(0) + col
}

/// `value` rounded to the storage type `F`, back in f32.
#[cube]
pub(crate) fn round<F: Float>(value: f32) -> f32 {
    f32::cast_from(F::cast_from(value))
}

/// The store of every kernel: adds the bias of column `col`, writes the pre-activation when
/// `write_pre`, applies the activation or the gate's backward (after dropout's, with its
/// `mask`), writes `out`. `out` and `pre` are contiguous with the output's shape and written
/// at `offset`; `gate` and `mask` are `[rows, n]` through their row strides (rows may be
/// pitched), read at `offset`'s row and `col`, as is `aux`. The gate's type `G` is `F`, or
/// a bool's storage integer for a [bool gate](Gate::is_bool). Returns the value stored, as
/// f32 (what a sum over the stored output adds up).
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn store_epilogue<F: Float, G: Numeric>(
    accumulator: f32,
    col: usize,
    offset: usize,
    bias: &Tensor<F>,
    gate: &Tensor<G>,
    mask: &Tensor<F>,
    aux: &Tensor<F>,
    out: &mut Tensor<F>,
    pre: &mut Tensor<F>,
    alpha: f32,
    beta: f32,
    #[comptime] flags: EpilogueFlags,
) -> f32 {
    // Rounded where Burn rounds (decision record 0027): its matmul stores the product in the
    // storage type, and each op after it rounds its own result (identity in f32).
    let mut value = round::<F>(accumulator);
    if flags.has_bias {
        value += f32::cast_from(bias[col * bias.stride(0)]);
    }
    if flags.write_pre {
        pre[offset] = F::cast_from(value);
    }
    value = activate(value, alpha, beta, flags.activation);
    if flags.dropout {
        // Burn's dropout backward: `mul_scalar(grad, 1 / (1 - p))`, then `mul(.., mask)`.
        value = round::<F>(value * alpha);
        value = round::<F>(value * f32::cast_from(mask[pitched_at(mask, offset, col)]));
    }
    if flags.product {
        // SwiGLU's `mul(silu(a), b)` (the activation stored first, as Burn's `silu` is), or its
        // backward's `mul(grad, b)`, the product's gradient for `silu(a)`.
        let factor = f32::cast_from(aux[pitched_at(aux, offset, col)]);
        value = round::<F>(round::<F>(value) * factor);
    }
    if comptime![flags.gate != Gate::None] {
        let mut saved = 0.0f32;
        let mut aux_value = 0.0f32;
        if comptime![flags.gate.reads_saved()] {
            saved = f32::cast_from(mask[pitched_at(mask, offset, col)]);
        }
        if comptime![flags.gate == Gate::GeluTanh] {
            aux_value = f32::cast_from(aux[pitched_at(aux, offset, col)]);
        }
        let at = pitched_at(gate, offset, col);
        value = gate_grad(
            value,
            f32::cast_from(gate[at]),
            saved,
            aux_value,
            alpha,
            flags.gate,
        );
    }
    let stored = F::cast_from(value);
    out[offset] = stored;
    f32::cast_from(stored)
}
