//! Epilogues: what happens to an accumulator between the last FMA and the store.

use cubecl::prelude::*;
use serde::{Deserialize, Serialize};

/// The activation applied after the bias, before the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Epilogue {
    /// `x <= 0 ? 0 : x`, which keeps NaN like Burn's `relu` (`mask_fill(x, x <= 0, 0)`).
    Relu,
}

impl Epilogue {
    /// The pattern name used in stats and logs.
    pub fn pattern(&self) -> &'static str {
        match self {
            Epilogue::Relu => "linear-relu",
        }
    }
}

/// Burn's relu on an f32 accumulator: NaN compares false, so it passes through.
#[cube]
pub fn relu_keep_nan(value: f32) -> f32 {
    select(value <= 0.0f32, 0.0f32, value)
}

/// The store of both kernels: adds the bias of column `col`, writes the pre-activation when
/// `write_pre`, applies the activation, writes `out`; both outputs at `offset`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn store_epilogue<F: Float>(
    accumulator: f32,
    col: usize,
    offset: usize,
    bias: &Tensor<F>,
    out: &mut Tensor<F>,
    pre: &mut Tensor<F>,
    #[comptime] has_bias: bool,
    #[comptime] write_pre: bool,
    #[comptime] relu: bool,
) {
    let mut value = accumulator;
    if has_bias {
        value += f32::cast_from(bias[col * bias.stride(0)]);
    }
    if write_pre {
        pre[offset] = F::cast_from(value);
    }
    if relu {
        value = relu_keep_nan(value);
    }
    out[offset] = F::cast_from(value);
}

/// `out = act(input + bias)` (and `pre = input + bias` when `write_pre`), elementwise.
///
/// The split execution's second half: `input` is the inner backend's matmul output, read
/// through its strides (a swapped view is fine); `out` and `pre` are contiguous with the same
/// shape; `bias` is a rank-1 view of the last dim (a dummy when `has_bias` is false).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub fn bias_activation_kernel<F: Float>(
    input: &Tensor<F>,
    bias: &Tensor<F>,
    out: &mut Tensor<F>,
    pre: &mut Tensor<F>,
    #[comptime] has_bias: bool,
    #[comptime] write_pre: bool,
    #[comptime] relu: bool,
    #[define(F)] _dtype: StorageType,
) {
    let index = ABSOLUTE_POS;
    if index >= out.len() {
        terminate!();
    }
    let rank = out.rank();
    let mut rest = index;
    let mut offset = 0usize;
    for i in 0..rank {
        let dim = rank - 1 - i;
        offset += (rest % out.shape(dim)) * input.stride(dim);
        rest /= out.shape(dim);
    }
    let col = index % out.shape(rank - 1);
    let value = f32::cast_from(input[offset]);
    store_epilogue::<F>(value, col, index, bias, out, pre, has_bias, write_pre, relu);
}
