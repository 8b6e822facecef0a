//! K-major copies for TF32 `wgmma`, which reads both operands K-major only: a tiled transpose
//! of 4-byte elements ([`transpose.cu`](../../../src/kernel/hopper/transpose.cu)).

use crate::kernel::cuda::{CudaSource, Preamble, launch_source, pack_words};
use burn_cubecl::CubeRuntime;
use burn_cubecl::tensor::CubeTensor;
use burn_std::{Metadata, Shape, Strides};
use cubecl::server::{KernelArguments, MetadataBindingInfo};

const SOURCE: &str = include_str!("transpose.cu");

/// The one configuration of the transpose kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Transpose;

impl CudaSource for Transpose {
    const ENTRY_POINT: &'static str = "hypatia_transpose";
    const DEBUG_NAME: &'static str = "hypatia::kernel::hopper::transpose";

    fn threads(&self) -> u32 {
        256
    }

    fn shared_bytes(&self) -> usize {
        0
    }

    fn source(&self) -> String {
        Preamble::new().finish(SOURCE)
    }
}

/// A new contiguous `[cols, rows]` tensor holding the transpose of `tensor`'s `[rows, cols]`
/// matrix of 4-byte elements whose rows are `pitch` elements apart (leading dims, if any, of
/// size 1: the result keeps `tensor`'s rank).
pub(crate) fn transposed<R: CubeRuntime>(
    tensor: &CubeTensor<R>,
    [rows, cols, pitch]: [usize; 3],
) -> Result<CubeTensor<R>, String> {
    if tensor.dtype.size() != 4 {
        return Err("the transpose moves 4-byte elements".into());
    }
    if [rows, cols, pitch].iter().any(|&d| d > u32::MAX as usize) {
        return Err("matrix larger than 32-bit indexing".into());
    }
    let client = tensor.client.clone();
    let rank = tensor.meta.shape().len();
    let mut shape = vec![1; rank];
    let mut strides = vec![rows * cols; rank];
    shape[rank - 2..].copy_from_slice(&[cols, rows]);
    strides[rank - 2..].copy_from_slice(&[rows, 1]);
    let out = CubeTensor::new(
        client.clone(),
        client.empty(rows * cols * 4),
        Metadata::new(Shape::from(shape), Strides::new(&strides)),
        tensor.device.clone(),
        tensor.dtype,
    );
    let tiles = rows.div_ceil(32) * cols.div_ceil(32);
    let mut args = KernelArguments::new();
    args.buffers = vec![
        tensor.handle.clone().binding(),
        out.handle.clone().binding(),
    ];
    let data = pack_words(&[rows as u32, cols as u32, pitch as u32, rows as u32]);
    let len = data.len();
    args.info = MetadataBindingInfo::new(data, len);
    launch_source(&client, Transpose, tiles as u32, args)?;
    Ok(out)
}
