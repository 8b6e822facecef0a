//! The kernels, from the 0.21 crate's own sources: its epilogue (as data and as CubeCL device
//! code) and its tiled matmul compile here from the same files (`#[path]`), against CubeCL
//! 0.11, with the two names below that the lines spell apart. Only the launch is this line's
//! own ([`launch_linear`]).

#[allow(dead_code, unused_imports)]
#[path = "../../src/kernel/data/epilogue.rs"]
mod epilogue;

#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../src/kernel/cube_epilogue.rs"]
mod cube_epilogue;

#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../src/kernel/tiled/matmul.rs"]
mod matmul;

// The names the shared `matmul.rs` takes from its parent, as CubeCL 0.11 spells them (the
// 0.21 crate's `kernel::tiled::cubecl_line` spells them for CubeCL 0.10).
#[allow(missing_docs)] // #[cube] generates an undocumented expand module.
mod cubecl_line {
    use cubecl::prelude::*;

    /// A staged K-slice in shared memory, as f32.
    pub type StageTile = Shared<[f32]>;
    /// The launch argument a `#[define(F)]` kernel takes for `F`.
    pub type KernelDType = ElemType;

    /// A [`StageTile`] of `len` values.
    #[cube]
    pub fn stage_tile(#[comptime] len: usize) -> StageTile {
        Shared::<[f32]>::new_slice(len)
    }
}
use cubecl::prelude::*;
pub use cubecl_line::*;

use cube_epilogue::store_epilogue;
pub use epilogue::{Activation, Epilogue, EpilogueFlags, Gate, SQRT_2, SQRT_2_OVER_PI};
use matmul::{CUBE_SIDE, fused_linear_kernel};

/// Output rows per cube (the 0.21 crate's `kernel::TILE_M`).
pub const TILE_M: usize = 64;
/// Output columns per cube (the 0.21 crate's `kernel::TILE_N`).
pub const TILE_N: usize = 64;

use burn_backend::{DType, Shape};
use burn_cubecl_fusion::CubeFusionHandle;
use burn_std::Strides;

/// A tensor of the fused step as the kernel reads it: its handle and its real shape.
pub struct Operand {
    /// The buffer and its strides.
    pub handle: CubeFusionHandle,
    /// The shape the IR states for this execution.
    pub shape: Vec<usize>,
}

/// A tensor argument of rank `rank`: leading dims padded with size 1, and every size-1 dim
/// read with stride 0 so that batch broadcasting needs no branch in the kernel (as the 0.21
/// crate's `tiled::launch` does).
fn broadcast_arg(operand: &Operand, rank: usize) -> TensorArg {
    let pad = rank - operand.shape.len();
    let mut shape = vec![1; pad];
    shape.extend(&operand.shape);
    let mut strides = vec![0; pad];
    strides.extend(operand.handle.strides.iter().copied());
    for (stride, dim) in strides.iter_mut().zip(&shape) {
        if *dim == 1 {
            *stride = 0;
        }
    }
    let mut handle = operand.handle.clone();
    handle.strides = Strides::new(&strides);
    handle.into_tensor_arg(Shape::from(shape))
}

/// Row-major strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Strides {
    let strides: Vec<usize> = (0..shape.len())
        .map(|i| shape[i + 1..].iter().product())
        .collect();
    Strides::new(&strides)
}

/// A contiguous buffer of `shape` and `dtype` on `like`'s device.
fn alloc(like: &CubeFusionHandle, shape: &[usize], dtype: DType) -> CubeFusionHandle {
    let len: usize = shape.iter().product();
    let handle = like.client.empty(len.max(1) * dtype.size());
    CubeFusionHandle {
        client: like.client.clone(),
        handle,
        device: like.device.clone(),
        dtype,
        strides: contiguous_strides(shape),
        tiles: None,
        qparams: None,
    }
}

/// `epilogue(x · w + b)` into a new contiguous tensor of `out_shape`: the 0.21 crate's tiled
/// kernel, one cube per 64 × 64 output tile and batch.
pub fn launch_linear(
    x: &Operand,
    w: &Operand,
    bias: Option<&Operand>,
    out_shape: &[usize],
    epilogue: Epilogue,
) -> CubeFusionHandle {
    let dtype = x.handle.dtype;
    let rank = out_shape.len();
    let (m, n) = (out_shape[rank - 2], out_shape[rank - 1]);
    let batch: usize = out_shape[..rank - 2].iter().product();
    let out = alloc(&x.handle, out_shape, dtype);
    // Absent tensors get one-element dummies of their own: wgpu rejects one buffer bound twice.
    let dummy = || alloc(&x.handle, &[1], dtype).into_tensor_arg(Shape::from(vec![1]));
    let bias_arg = match bias {
        Some(b) => {
            let mut handle = b.handle.clone();
            handle.strides = Strides::new(&[*b.handle.strides.last().unwrap_or(&1)]);
            handle.into_tensor_arg(Shape::from(vec![n]))
        }
        None => dummy(),
    };
    let flags = EpilogueFlags::new(epilogue, bias.is_some(), false);
    let cube_count = CubeCount::Static(
        n.div_ceil(TILE_N) as u32,
        m.div_ceil(TILE_M) as u32,
        batch as u32,
    );
    let cube_dim = CubeDim::new_2d(CUBE_SIDE as u32, CUBE_SIDE as u32);
    let row_sums = alloc(&x.handle, &[1], DType::F32).into_tensor_arg(Shape::from(vec![1]));
    fused_linear_kernel::launch(
        &x.handle.client,
        cube_count,
        cube_dim,
        broadcast_arg(x, rank),
        broadcast_arg(w, rank),
        bias_arg,
        dummy(),
        dummy(),
        dummy(),
        out.clone().into_tensor_arg(Shape::from(out_shape.to_vec())),
        dummy(),
        row_sums,
        0.0,
        0.0,
        flags,
        // No gate: the dummy gate is of the output's type.
        [burn_backend::cubecl::dtype_to_storage_type(dtype); 2],
    );
    out
}
