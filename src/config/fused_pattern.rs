//! The fused patterns: what a fused step is, by the name stats, logs and plan dumps give it.
//! Here, beside the switches that turn patterns on ([`Pattern`](super::Pattern)), because every
//! stage names them and this module imports nothing of the crate.

use serde::Serialize;

/// What a fused step is, as [`FusionStats`](crate::FusionStats) counts it: `FusedPattern::LinearRelu` is shown and
/// serialised as `linear-relu`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum FusedPattern {
    /// Linear + bias without activation.
    Linear,
    /// Linear (with or without bias) + ReLU.
    LinearRelu,
    /// Linear + GELU (erf).
    LinearGelu,
    /// Linear + GELU (tanh approximation).
    LinearGeluTanh,
    /// Linear + SiLU.
    LinearSilu,
    /// Linear + LeakyReLU.
    LinearLeakyRelu,
    /// SwiGLU's forward: Linear + SiLU times a second matmul of the same input (Llama's FFN).
    LinearSwiglu,
    /// Linear + clamp (ReLU6 among them).
    LinearClamp,
    /// A plain matmul: a weight gradient, or a Linear without bias or activation.
    Matmul,
    /// ReLU's backward `mask_fill(dy · Wᵀ, pre <= 0, 0)`.
    MatmulReluGrad,
    /// GELU's backward `gelu_backward(pre, dy · Wᵀ)`.
    MatmulGeluGrad,
    /// SiLU's backward: `Autodiff`'s gradient of `x · sigmoid(x)` through `dy · Wᵀ`.
    MatmulSiluGrad,
    /// Tanh GELU's backward: `Autodiff`'s gradient of `gelu_approximate`'s ops through
    /// `dy · Wᵀ`.
    MatmulGeluTanhGrad,
    /// LeakyReLU's backward: `Autodiff`'s gradient of `mask_where(x, x < 0, x · slope)` through
    /// `dy · Wᵀ`.
    MatmulLeakyReluGrad,
    /// SwiGLU's gate-projection backward: `Autodiff`'s gradient of `silu(a) ⊙ b` for `a`
    /// through `dy · Wᵀ`.
    MatmulSwigluGrad,
    /// A run of layers as one MLP-chain launch (each layer also counts as `chained` in its
    /// own pattern).
    MlpChain,
}

impl FusedPattern {
    /// Every pattern.
    pub const ALL: [FusedPattern; 16] = [
        FusedPattern::Linear,
        FusedPattern::LinearRelu,
        FusedPattern::LinearGelu,
        FusedPattern::LinearGeluTanh,
        FusedPattern::LinearSilu,
        FusedPattern::LinearLeakyRelu,
        FusedPattern::LinearSwiglu,
        FusedPattern::LinearClamp,
        FusedPattern::Matmul,
        FusedPattern::MatmulReluGrad,
        FusedPattern::MatmulGeluGrad,
        FusedPattern::MatmulSiluGrad,
        FusedPattern::MatmulGeluTanhGrad,
        FusedPattern::MatmulLeakyReluGrad,
        FusedPattern::MatmulSwigluGrad,
        FusedPattern::MlpChain,
    ];

    /// The name stats, logs and JSON use: `linear-relu`.
    pub fn name(&self) -> &'static str {
        match self {
            FusedPattern::Linear => "linear",
            FusedPattern::LinearRelu => "linear-relu",
            FusedPattern::LinearGelu => "linear-gelu",
            FusedPattern::LinearGeluTanh => "linear-gelu-tanh",
            FusedPattern::LinearSilu => "linear-silu",
            FusedPattern::LinearLeakyRelu => "linear-leaky-relu",
            FusedPattern::LinearSwiglu => "linear-swiglu",
            FusedPattern::LinearClamp => "linear-clamp",
            FusedPattern::Matmul => "matmul",
            FusedPattern::MatmulReluGrad => "matmul-relu-grad",
            FusedPattern::MatmulGeluGrad => "matmul-gelu-grad",
            FusedPattern::MatmulSiluGrad => "matmul-silu-grad",
            FusedPattern::MatmulGeluTanhGrad => "matmul-gelu-tanh-grad",
            FusedPattern::MatmulLeakyReluGrad => "matmul-leaky-relu-grad",
            FusedPattern::MatmulSwigluGrad => "matmul-swiglu-grad",
            FusedPattern::MlpChain => "mlp-chain",
        }
    }
}

impl core::fmt::Display for FusedPattern {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.pad(self.name())
    }
}

/// Parses a pattern by its name; an unknown name is an error that lists the names.
impl core::str::FromStr for FusedPattern {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        (FusedPattern::ALL.into_iter().find(|p| p.name() == name)).ok_or_else(|| {
            let names: Vec<&str> = FusedPattern::ALL.iter().map(|p| p.name()).collect();
            format!(
                "unknown pattern `{name}`, expected one of: {}",
                names.join(", ")
            )
        })
    }
}
