//! Epilogues: what happens to an accumulator between the last FMA and the store, as data.

use crate::config::FusedPattern;
use serde::{Deserialize, Serialize};

/// `sqrt(2)`, the divisor inside Burn's exact GELU.
pub const SQRT_2: f64 = std::f64::consts::SQRT_2;
/// `sqrt(2 / pi)`, the scale inside Burn's tanh-approximate GELU.
pub const SQRT_2_OVER_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2;

/// What is applied to the accumulator (after the bias, if any) before the store.
///
/// Each activation is computed in f32 with the same operations, in the same order, as the ops
/// Burn 0.21 emits for it, so special values (NaN, ±inf, ±0) come out as Burn's do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Epilogue {
    /// `x <= 0 ? 0 : x`, which keeps NaN like Burn's `relu` (`mask_fill(x, x <= 0, 0)`).
    Relu,
    /// Nothing: a plain matmul (a weight gradient `xᵀ · dy`), or a Linear without activation.
    Identity,
    /// ReLU's backward on `dy · Wᵀ`: `gate <= 0 ? 0 : x`, where the gate is the forward's
    /// pre-activation (Burn's `mask_fill(dx, pre <= 0, 0)`; a NaN gate keeps `x`).
    ReluGrad,
    /// Exact GELU, `x · (erf(x / √2) + 1) / 2` (Burn's `gelu`).
    Gelu,
    /// Tanh GELU, `x · (tanh(√(2/π) · (x + 0.044715 · x³)) + 1) · 0.5` (Burn's
    /// `gelu_approximate`).
    GeluTanh,
    /// SiLU, `x · exp(-ln(exp(-x) + 1))` (Burn's `silu`: `x · sigmoid(x)`).
    Silu,
    /// LeakyReLU, `x < 0 ? x · slope : x`, with the slope a run-time scalar.
    LeakyRelu,
    /// `clamp(x, min, max)` (ReLU6 is `clamp(x, 0, 6)`), bounds as run-time scalars.
    Clamp,
    /// GELU's backward on `dy · Wᵀ`: `gelu'(gate) · x`, the gate the forward's pre-activation,
    /// with the derivative of tanh GELU that Burn 0.21's `gelu_backward` uses for both GELUs
    /// (its ops, in its order: see [`Gate::Gelu`]).
    GeluGrad,
    /// [`Epilogue::ReluGrad`] of a gradient that first passed back through Burn's dropout:
    /// the gate applied to `(x · scale) · mask` (the run-time `scale` is `1 / (1 - p)`, the
    /// mask the forward's `random_like` tensor).
    ReluGradDropout,
    /// [`Epilogue::GeluGrad`] of a gradient that first passed back through Burn's dropout, as
    /// [`Epilogue::ReluGradDropout`].
    GeluGradDropout,
    /// SiLU's backward on `dy · Wᵀ` as Burn's `Autodiff` computes it for `x · sigmoid(x)`:
    /// the product's two gradients, the second through a sigmoid recomputed from the gate `x`
    /// (the forward's pre-activation), with the forward's saved sigmoid `s` as a second
    /// gate-shaped operand (the `mask` slot): see [`Gate::Silu`].
    SiluGrad,
    /// Tanh GELU's backward on `dy · Wᵀ` as Burn's `Autodiff` composes it from
    /// `gelu_approximate`'s ops: the gate `x` (the forward's pre-activation), the saved
    /// `tanh(..) + 1` in the `mask` slot and the saved input of the tanh as a third gate-shaped
    /// operand (the `aux` slot): see [`Gate::GeluTanh`] and decision record 0028.
    GeluTanhGrad,
    /// LeakyReLU's backward on `dy · Wᵀ` as Burn's `Autodiff` computes it for
    /// `mask_where(x, x < 0, x · slope)`: `mask_where`'s two gradients (the second scaled by the
    /// run-time slope) added, the gate the forward's saved bool mask `x < 0` (decision record
    /// 0029): see [`Gate::LeakyRelu`].
    LeakyReluGrad,
    /// SwiGLU's gate-projection backward on `dy · Wᵀ` (`Autodiff` of
    /// `silu(x · W₁) ⊙ (x · W₃)`): the product's gradient `(dy · Wᵀ) ⊙ b` (`b` the up projection,
    /// the `aux` slot), then [`Epilogue::SiluGrad`]'s at the gate, its saved sigmoid in the
    /// `mask` slot (decision record 0030).
    SwigluGrad,
    /// SwiGLU's forward, `silu(x · W₁ + bias) ⊙ (x · W₃)` (Llama's FFN before its down
    /// projection): [`Epilogue::Silu`], rounded to the storage type as Burn stores `silu`, then
    /// multiplied by the up projection `x · W₃` (the `aux` slot, which the step computes first:
    /// [`Up`](crate::plan::Up)) as Burn's `mul` (decision record 0031).
    Swiglu,
}

impl Epilogue {
    /// The pattern name used in stats and logs (a Linear without activation is `linear`, see
    /// [`FusedLinear::pattern`](crate::plan::FusedLinear::pattern)).
    pub fn pattern(&self) -> FusedPattern {
        match self {
            Epilogue::Relu => FusedPattern::LinearRelu,
            Epilogue::Identity => FusedPattern::Matmul,
            Epilogue::ReluGrad | Epilogue::ReluGradDropout => FusedPattern::MatmulReluGrad,
            Epilogue::GeluGrad | Epilogue::GeluGradDropout => FusedPattern::MatmulGeluGrad,
            Epilogue::SiluGrad => FusedPattern::MatmulSiluGrad,
            Epilogue::GeluTanhGrad => FusedPattern::MatmulGeluTanhGrad,
            Epilogue::LeakyReluGrad => FusedPattern::MatmulLeakyReluGrad,
            Epilogue::SwigluGrad => FusedPattern::MatmulSwigluGrad,
            Epilogue::Swiglu => FusedPattern::LinearSwiglu,
            Epilogue::Gelu => FusedPattern::LinearGelu,
            Epilogue::GeluTanh => FusedPattern::LinearGeluTanh,
            Epilogue::Silu => FusedPattern::LinearSilu,
            Epilogue::LeakyRelu => FusedPattern::LinearLeakyRelu,
            Epilogue::Clamp => FusedPattern::LinearClamp,
        }
    }

    /// The activation the kernels apply.
    pub fn activation(&self) -> Activation {
        match self {
            Epilogue::Relu => Activation::Relu,
            Epilogue::Identity
            | Epilogue::ReluGrad
            | Epilogue::GeluGrad
            | Epilogue::ReluGradDropout
            | Epilogue::GeluGradDropout
            | Epilogue::SiluGrad
            | Epilogue::GeluTanhGrad
            | Epilogue::LeakyReluGrad
            | Epilogue::SwigluGrad => Activation::None,
            Epilogue::Gelu => Activation::Gelu,
            Epilogue::GeluTanh => Activation::GeluTanh,
            Epilogue::Silu | Epilogue::Swiglu => Activation::Silu,
            Epilogue::LeakyRelu => Activation::LeakyRelu,
            Epilogue::Clamp => Activation::Clamp,
        }
    }

    /// Whether the epilogue reads a gate tensor: an activation's backward, gated by the
    /// forward's pre-activation.
    pub fn gated(&self) -> bool {
        self.gate() != Gate::None
    }

    /// What the epilogue does with its gate.
    pub fn gate(&self) -> Gate {
        match self {
            Epilogue::ReluGrad | Epilogue::ReluGradDropout => Gate::Relu,
            Epilogue::GeluGrad | Epilogue::GeluGradDropout => Gate::Gelu,
            Epilogue::SiluGrad | Epilogue::SwigluGrad => Gate::Silu,
            Epilogue::GeluTanhGrad => Gate::GeluTanh,
            Epilogue::LeakyReluGrad => Gate::LeakyRelu,
            _ => Gate::None,
        }
    }

    /// Whether the epilogue reads a second gate-shaped tensor (the `mask` operand): dropout's
    /// mask, SiLU's saved sigmoid, or tanh GELU's saved `tanh(..) + 1`.
    pub fn masked(&self) -> bool {
        self.dropout() || self.gate().reads_saved()
    }

    /// Whether the epilogue reads a third gate-shaped tensor (the `aux` operand): tanh GELU's
    /// saved tanh input, or SwiGLU's up projection (forward and backward).
    pub fn has_aux(&self) -> bool {
        self.gate() == Gate::GeluTanh || self.product()
    }

    /// Whether the activated value is multiplied by the `aux` operand (SwiGLU's forward: the
    /// product after SiLU; its backward: the product's gradient, before the gate).
    pub fn product(&self) -> bool {
        matches!(self, Epilogue::Swiglu | Epilogue::SwigluGrad)
    }

    /// Whether the step computes its `aux` operand itself, as a second matmul of its left
    /// operand (SwiGLU's up projection, [`Up`](crate::plan::Up)).
    pub fn has_up(&self) -> bool {
        *self == Epilogue::Swiglu
    }

    /// Whether the accumulator is first scaled and multiplied by a mask tensor (dropout's
    /// backward, before the gate).
    pub fn dropout(&self) -> bool {
        matches!(self, Epilogue::ReluGradDropout | Epilogue::GeluGradDropout)
    }

    /// The values the scalars of Burn's form must have for the kernel to compute the same
    /// function, in the order the activation's e-graph node lists them (the kernels hard-code
    /// them; a plan checks them before every execution). Relu's and relu-grad's scalars (the
    /// threshold and the fill value) are all zero and are checked as such by the plan.
    pub fn constants(&self) -> &'static [f64] {
        match self {
            Epilogue::Gelu => &[SQRT_2, 1.0, 2.0],
            Epilogue::GeluTanh => &[3.0, 0.044715, SQRT_2_OVER_PI, 1.0, 0.5],
            Epilogue::Silu | Epilogue::Swiglu => &[-1.0, 1.0, -1.0],
            Epilogue::LeakyRelu => &[0.0],
            Epilogue::GeluGrad | Epilogue::GeluGradDropout => &GELU_GRAD_CONSTANTS,
            Epilogue::SiluGrad | Epilogue::SwigluGrad => &SILU_GRAD_CONSTANTS,
            Epilogue::GeluTanhGrad => &GELU_TANH_GRAD_CONSTANTS,
            Epilogue::Relu
            | Epilogue::Identity
            | Epilogue::ReluGrad
            | Epilogue::ReluGradDropout
            | Epilogue::LeakyReluGrad
            | Epilogue::Clamp => &[],
        }
    }

    /// How many run-time scalars the kernel reads after the constants: LeakyReLU's slope (also
    /// its backward's), clamp's min and max, dropout's scale.
    pub fn parameters(&self) -> usize {
        match self {
            Epilogue::LeakyRelu
            | Epilogue::LeakyReluGrad
            | Epilogue::ReluGradDropout
            | Epilogue::GeluGradDropout => 1,
            Epilogue::Clamp => 2,
            _ => 0,
        }
    }
}

/// The scalars of Burn 0.21's `gelu_backward` (`burn-backend`'s `ActivationOps`), in the order
/// of the `gelu-grad` node: the power 3 of `powi_scalar(x, 3)`, its four constants, then the
/// `-1` of `neg`, the `1` added to it, and the two halves.
pub const GELU_GRAD_CONSTANTS: [f64; 9] = [
    3.0, 0.0356774, 0.797885, 0.0535161, 0.398942, -1.0, 1.0, 0.5, 0.5,
];

/// The scalars of SiLU's backward under Burn 0.21's `Autodiff`, in the order of the
/// `fused-matmul-silu-grad` node: the recomputed sigmoid's (`neg` as `mul_scalar(-1)`, the
/// `1` added, the second `neg`), then `sigmoid_backward`'s `neg` and the `1` added to it.
pub const SILU_GRAD_CONSTANTS: [f64; 5] = [-1.0, 1.0, -1.0, -1.0, 1.0];

/// The scalars of tanh GELU's backward under Burn 0.21's `Autodiff`, in the order of the
/// `fused-matmul-gelu-tanh-grad` node: the forward's `0.5` (its `mul_scalar`'s backward), then
/// `tanh`'s backward (`neg` as `mul_scalar(-1)`, the `1` added), the forward's `√(2/π)` and
/// `0.044715`, and the `3` of `powf_scalar`'s backward (`mul_scalar(x · x, 3)`).
pub const GELU_TANH_GRAD_CONSTANTS: [f64; 6] = [0.5, -1.0, 1.0, SQRT_2_OVER_PI, 0.044715, 3.0];

/// What a backward epilogue does with its gate `g` (the forward's pre-activation, read element
/// for element) and the accumulator `x` (`dy · Wᵀ`). The values are the codes of the CUDA
/// kernels' `GATE_*` macros (`cuda/hypatia.cuh`; a test checks that the two agree).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u32)]
pub enum Gate {
    /// No gate.
    None = 0,
    /// ReLU's backward: `g <= 0 ? 0 : x` (Burn's `mask_fill(x, g <= 0, 0)`; a NaN gate keeps
    /// `x`).
    Relu = 1,
    /// GELU's backward as Burn 0.21 computes it (the tanh approximation's derivative, also for
    /// exact GELU): with `t = tanh(0.0356774·g³ + 0.797885·g)`,
    /// `(t·0.5 + ((0.0535161·g³ + 0.398942·g) · (-(t·t) + 1) + 0.5)) · x`.
    Gelu = 2,
    /// SiLU's backward as Burn 0.21's `Autodiff` computes it for `x · sigmoid(x)`, with `s`
    /// the forward's saved sigmoid (the epilogue's `mask` operand) and
    /// `σ = exp(-ln(exp(-g) + 1))` recomputed (as `sigmoid`'s backward does):
    /// `x·s + (σ · (-σ + 1)) · (x·g)`. The kernels read `s` where dropout reads its mask.
    Silu = 3,
    /// Tanh GELU's backward as Burn 0.21's `Autodiff` composes it from `gelu_approximate`'s
    /// ops, with `u` the forward's saved `tanh(i) + 1` (the `mask` operand) and `i` the saved
    /// tanh input (the `aux` operand), `t = tanh(i)` recomputed (as `tanh`'s backward does):
    /// with `h = x·0.5`, `d = (h·g) · (-(t·t) + 1) · √(2/π)`,
    /// `(d + h·u) + (d · 0.044715) · ((g·g) · 3)`.
    GeluTanh = 4,
    /// LeakyReLU's backward as Burn 0.21's `Autodiff` computes it for
    /// `mask_where(x, x < 0, x · slope)`, with the gate `g` the forward's saved mask `x < 0` (a
    /// bool tensor, read as its storage's integer: nonzero is true) and `a` the slope (the
    /// run-time `alpha`): `(g ? 0 : x) + (g ? x : 0) · a`, `mask_where`'s two gradients against
    /// zeros, the second through `mul_scalar`'s backward.
    LeakyRelu = 5,
}

impl Gate {
    /// The code the CUDA kernels compile in as `GATE`.
    pub fn code(&self) -> u32 {
        *self as u32
    }

    /// Whether the gate is a bool tensor (LeakyReLU's saved mask) rather than one of the
    /// output's float type.
    pub fn is_bool(&self) -> bool {
        *self == Gate::LeakyRelu
    }

    /// Whether the gate's backward reads the `mask` operand as a saved value (SiLU's sigmoid,
    /// tanh GELU's `tanh + 1`).
    pub fn reads_saved(&self) -> bool {
        matches!(self, Gate::Silu | Gate::GeluTanh)
    }
}

/// The function a kernel applies before the store, a compile-time switch of its epilogue.
/// The values are the codes of the CUDA kernels' `ACT_*` macros (`cuda/hypatia.cuh`; a test
/// checks that the two agree).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u32)]
pub enum Activation {
    /// Nothing.
    None = 0,
    /// Burn's relu.
    Relu = 1,
    /// Exact GELU.
    Gelu = 2,
    /// Tanh GELU.
    GeluTanh = 3,
    /// SiLU.
    Silu = 4,
    /// LeakyReLU with slope `alpha`.
    LeakyRelu = 5,
    /// `clamp(x, alpha, beta)`.
    Clamp = 6,
}

impl Activation {
    /// The code the CUDA kernels compile in as `ACT`.
    pub fn code(&self) -> u32 {
        *self as u32
    }
}

/// Comptime switches of the epilogue, shared by every kernel that stores one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EpilogueFlags {
    /// Add the bias row.
    pub has_bias: bool,
    /// Write the pre-activation to `pre`.
    pub write_pre: bool,
    /// The activation applied after the bias.
    pub activation: Activation,
    /// What is done with the gate (an activation's backward).
    pub gate: Gate,
    /// Scale the accumulator by `alpha` and multiply it by the mask before the gate
    /// (dropout's backward).
    pub dropout: bool,
    /// Multiply the activated value by `aux`, before the gate (SwiGLU, forward and backward).
    pub product: bool,
    /// Write partial column sums of the stored output (a bias gradient, see
    /// [`sum_rows`](crate::kernel::sum_rows)).
    pub row_sums: bool,
}

impl EpilogueFlags {
    /// The flags of `epilogue` with these optional tensors.
    pub fn new(epilogue: Epilogue, has_bias: bool, write_pre: bool) -> Self {
        Self {
            has_bias,
            write_pre,
            activation: epilogue.activation(),
            gate: epilogue.gate(),
            dropout: epilogue.dropout(),
            product: epilogue.product(),
            row_sums: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activation_codes_are_the_cuda_kernels_act_macros() {
        let source = include_str!("../cuda/hypatia.cuh");
        let define = |name: &str| -> Option<u32> {
            let line = (source.lines()).find(|l| l.starts_with(&format!("#define ACT_{name} ")))?;
            line.split_whitespace()
                .nth(2)?
                .trim_end_matches('u')
                .parse()
                .ok()
        };
        let named = [
            ("RELU", Activation::Relu),
            ("GELU", Activation::Gelu),
            ("GELU_TANH", Activation::GeluTanh),
            ("SILU", Activation::Silu),
            ("LEAKY_RELU", Activation::LeakyRelu),
            ("CLAMP", Activation::Clamp),
        ];
        for (name, activation) in named {
            assert_eq!(define(name), Some(activation.code()), "ACT_{name}");
        }
        assert_eq!(define("NONE"), Some(Activation::None.code()), "ACT_NONE");
        let gates = [
            ("GATE_NONE", Gate::None),
            ("GATE_RELU", Gate::Relu),
            ("GATE_GELU", Gate::Gelu),
            ("GATE_SILU", Gate::Silu),
            ("GATE_GELU_TANH", Gate::GeluTanh),
            ("GATE_LEAKY_RELU", Gate::LeakyRelu),
        ];
        for (name, gate) in gates {
            let line = (source.lines()).find(|l| l.starts_with(&format!("#define {name} ")));
            let code = line.and_then(|l| l.split_whitespace().nth(2));
            assert_eq!(code, Some(format!("{}u", gate.code()).as_str()), "{name}");
        }
    }
}
