//! The split execution's second half: bias + activation over the inner backend's matmul.

use crate::kernel::{EpilogueFlags, store_epilogue};
use cubecl::prelude::*;

/// `out = epilogue(input + bias)` (and `pre = input + bias` when `write_pre`), elementwise.
///
/// The split execution's second half: `input` is the inner backend's matmul output, read
/// through its strides (a swapped view is fine); `out` and `pre` are contiguous with the same
/// shape, `gate` (of type `G`: `F`, or a bool's storage integer), `mask` and `aux` their
/// `[rows, n]` views (see [`store_epilogue()`]); `bias` is a rank-1 view of the
/// last dim. Absent tensors are dummies.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub fn bias_activation_kernel<F: Float, G: Numeric>(
    input: &Tensor<F>,
    bias: &Tensor<F>,
    gate: &Tensor<G>,
    mask: &Tensor<F>,
    aux: &Tensor<F>,
    out: &mut Tensor<F>,
    pre: &mut Tensor<F>,
    alpha: f32,
    beta: f32,
    #[comptime] flags: EpilogueFlags,
    #[define(F, G)] _dtypes: [StorageType; 2],
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
    store_epilogue::<F, G>(
        value, col, index, bias, gate, mask, aux, out, pre, alpha, beta, flags,
    );
}
