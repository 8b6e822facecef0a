//! Epilogues: what happens to an accumulator between the last FMA and the store.

use cubecl::prelude::*;
use serde::{Deserialize, Serialize};

/// What is applied to the accumulator (after the bias, if any) before the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Epilogue {
    /// `x <= 0 ? 0 : x`, which keeps NaN like Burn's `relu` (`mask_fill(x, x <= 0, 0)`).
    Relu,
    /// Nothing: a plain matmul (a weight gradient `xᵀ · dy`).
    Identity,
    /// ReLU's backward on `dy · Wᵀ`: `gate <= 0 ? 0 : x`, where the gate is the forward's
    /// pre-activation (Burn's `mask_fill(dx, pre <= 0, 0)`; a NaN gate keeps `x`).
    ReluGrad,
}

impl Epilogue {
    /// The pattern name used in stats and logs.
    pub fn pattern(&self) -> &'static str {
        match self {
            Epilogue::Relu => "linear-relu",
            Epilogue::Identity => "matmul",
            Epilogue::ReluGrad => "matmul-relu-grad",
        }
    }

    /// Whether the forward relu is applied.
    pub fn relu(&self) -> bool {
        matches!(self, Epilogue::Relu)
    }

    /// Whether a gate tensor zeroes the output where it is `<= 0`.
    pub fn gated(&self) -> bool {
        matches!(self, Epilogue::ReluGrad)
    }
}

/// Burn's relu on an f32 accumulator: NaN compares false, so it passes through.
#[cube]
pub fn relu_keep_nan(value: f32) -> f32 {
    select(value <= 0.0f32, 0.0f32, value)
}

/// Comptime switches of the epilogue, shared by every kernel that stores one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EpilogueFlags {
    /// Add the bias row.
    pub has_bias: bool,
    /// Write the pre-activation to `pre`.
    pub write_pre: bool,
    /// Apply relu (keeping NaN).
    pub relu: bool,
    /// Zero where `gate <= 0` (relu's backward).
    pub gated: bool,
}

impl EpilogueFlags {
    /// The flags of `epilogue` with these optional tensors.
    pub fn new(epilogue: Epilogue, has_bias: bool, write_pre: bool) -> Self {
        Self {
            has_bias,
            write_pre,
            relu: epilogue.relu(),
            gated: epilogue.gated(),
        }
    }
}

/// The store of every kernel: adds the bias of column `col`, writes the pre-activation when
/// `write_pre`, applies the activation or the gate, writes `out`. `out`, `pre` and `gate` are
/// contiguous with the output's shape and all read or written at `offset`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn store_epilogue<F: Float>(
    accumulator: f32,
    col: usize,
    offset: usize,
    bias: &Tensor<F>,
    gate: &Tensor<F>,
    out: &mut Tensor<F>,
    pre: &mut Tensor<F>,
    #[comptime] flags: EpilogueFlags,
) {
    let mut value = accumulator;
    if flags.has_bias {
        value += f32::cast_from(bias[col * bias.stride(0)]);
    }
    if flags.write_pre {
        pre[offset] = F::cast_from(value);
    }
    if flags.relu {
        value = relu_keep_nan(value);
    }
    if flags.gated {
        value = select(f32::cast_from(gate[offset]) <= 0.0f32, 0.0f32, value);
    }
    out[offset] = F::cast_from(value);
}

/// `out = epilogue(input + bias)` (and `pre = input + bias` when `write_pre`), elementwise.
///
/// The split execution's second half: `input` is the inner backend's matmul output, read
/// through its strides (a swapped view is fine); `out`, `pre` and `gate` are contiguous with
/// the same shape; `bias` is a rank-1 view of the last dim. Absent tensors are dummies.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub fn bias_activation_kernel<F: Float>(
    input: &Tensor<F>,
    bias: &Tensor<F>,
    gate: &Tensor<F>,
    out: &mut Tensor<F>,
    pre: &mut Tensor<F>,
    #[comptime] flags: EpilogueFlags,
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
    store_epilogue::<F>(value, col, index, bias, gate, out, pre, flags);
}
