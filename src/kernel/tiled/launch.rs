//! Host side of the tiled kernel: lay out operands, allocate outputs, launch.

use super::{CUBE_SIDE, bias_activation_kernel, fused_linear_kernel};
use crate::kernel::{
    EpilogueInputs, KernelError, LinearOutputs, LinearProblem, MAX_CUBES_PER_AXIS, Operand, TILE_M,
    TILE_N, alloc, bias_grad_shape, row_stride, sum_output_rows,
};
use burn_backend::{DType, Shape};
use burn_cubecl_fusion::CubeFusionHandle;
use burn_std::Strides;
use cubecl::prelude::*;

/// A tensor argument of rank `rank`: leading dims padded with size 1, and every size-1 dim
/// read with stride 0 so batch broadcasting needs no branch in the kernel.
fn broadcast_arg<R: Runtime>(operand: &Operand<R>, rank: usize) -> TensorArg<R> {
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

/// Launches `out = epilogue(lhs · rhs + bias)` (and `pre = lhs · rhs + bias` if `write_pre`)
/// for a `problem` that [`check_linear`](crate::kernel::check_linear) accepted for these operands.
pub fn launch_fused_linear<R: Runtime>(
    problem: &LinearProblem,
    lhs: &Operand<R>,
    rhs: &Operand<R>,
    epilogue: EpilogueInputs<'_, R>,
    write_pre: bool,
) -> LinearOutputs<R> {
    let outputs = Outputs::alloc(&lhs.handle, &problem.out_shape, problem.dtype, write_pre);
    let bias_grad = (epilogue.bias_grad).then(|| {
        alloc(
            &lhs.handle,
            &bias_grad_shape(&problem.out_shape),
            problem.dtype,
        )
    });
    launch_fused_linear_into(
        problem,
        lhs,
        rhs,
        epilogue,
        outputs.out,
        outputs.pre,
        bias_grad,
    )
}

/// [`launch_fused_linear`] into given contiguous outputs of `problem.out_shape` (and
/// `bias_grad` of [`bias_grad_shape`], summed in the epilogue's pass).
pub fn launch_fused_linear_into<R: Runtime>(
    problem: &LinearProblem,
    lhs: &Operand<R>,
    rhs: &Operand<R>,
    epilogue: EpilogueInputs<'_, R>,
    out: CubeFusionHandle<R>,
    pre: Option<CubeFusionHandle<R>>,
    bias_grad: Option<CubeFusionHandle<R>>,
) -> LinearOutputs<R> {
    let shape = problem.out_shape.clone();
    let rank = shape.len();
    let (m, n) = (shape[rank - 2], shape[rank - 1]);
    let client = lhs.handle.client.clone();
    let write_pre = pre.is_some();
    let outputs = Outputs::new(out, pre, &shape, problem.dtype);

    let cube_count = CubeCount::Static(
        n.div_ceil(TILE_N) as u32,
        m.div_ceil(TILE_M) as u32,
        problem.batch as u32,
    );
    // One partial row of column sums per unit row of every cube (see `fused_linear_kernel`).
    let partial_rows = problem.batch * m.div_ceil(TILE_M) * CUBE_SIDE;
    let partials =
        (bias_grad.as_ref()).map(|_| alloc(&outputs.out, &[partial_rows, n], DType::F32));
    let mut flags = epilogue.flags(write_pre);
    flags.row_sums = partials.is_some();
    let cube_dim = CubeDim::new_2d(CUBE_SIDE as u32, CUBE_SIDE as u32);
    fused_linear_kernel::launch::<R>(
        &client,
        cube_count,
        cube_dim,
        broadcast_arg(lhs, rank),
        broadcast_arg(rhs, rank),
        outputs.bias_arg(epilogue.bias, n),
        outputs.gate_arg(epilogue.gate),
        outputs.gate_arg(epilogue.mask),
        outputs.gate_arg(epilogue.aux),
        outputs.out_arg(),
        outputs.pre_arg(),
        outputs.partials_arg(partials.as_ref(), partial_rows * n),
        epilogue.params[0],
        epilogue.params[1],
        flags,
        [
            problem.dtype.into(),
            outputs.gate_dtype(epilogue.gate).into(),
        ],
    );
    if let (Some(partials), Some(bias_grad)) = (&partials, &bias_grad) {
        crate::kernel::sum_rows(partials, partial_rows, n, bias_grad);
    }
    outputs.finish(bias_grad)
}

/// The split execution's epilogue: `out = epilogue(input + bias)` over a matmul output that
/// the inner backend computed.
///
/// # Errors
/// [`KernelError::IncompatibleShapes`] if the bias is not a row of `input`'s last dim.
pub fn launch_bias_activation<R: Runtime>(
    input: &Operand<R>,
    epilogue: EpilogueInputs<'_, R>,
    write_pre: bool,
) -> Result<LinearOutputs<R>, KernelError> {
    let shape = input.shape.clone();
    let n = *shape.last().unwrap_or(&0);
    if let Some(b) = epilogue.bias
        && (b.shape.last() != Some(&n) || b.shape.iter().rev().skip(1).any(|&d| d != 1))
    {
        return Err(KernelError::IncompatibleShapes {
            lhs: shape,
            rhs: vec![],
            bias: Some(b.shape.clone()),
        });
    }
    let outputs = Outputs::alloc(&input.handle, &shape, input.handle.dtype, write_pre);
    let bias_grad = (epilogue.bias_grad)
        .then(|| alloc(&input.handle, &bias_grad_shape(&shape), input.handle.dtype));
    Ok(launch_bias_activation_into(
        input,
        epilogue,
        outputs.out,
        outputs.pre,
        bias_grad,
    ))
}

/// [`launch_bias_activation`] into given contiguous outputs of `input`'s shape (and
/// `bias_grad` of [`bias_grad_shape`], summed in a second pass), for a bias that is a row of
/// `input`'s last dim.
pub fn launch_bias_activation_into<R: Runtime>(
    input: &Operand<R>,
    epilogue: EpilogueInputs<'_, R>,
    out: CubeFusionHandle<R>,
    pre: Option<CubeFusionHandle<R>>,
    bias_grad: Option<CubeFusionHandle<R>>,
) -> LinearOutputs<R> {
    let shape = input.shape.clone();
    let n = *shape.last().unwrap_or(&0);
    let write_pre = pre.is_some();
    let len: usize = shape.iter().product();
    let outputs = Outputs::new(out, pre, &shape, input.handle.dtype);
    let cube_dim = CubeDim::new_1d(256);
    let cubes = len.div_ceil(256);
    let cube_count = CubeCount::Static(
        cubes.min(MAX_CUBES_PER_AXIS) as u32,
        cubes.div_ceil(MAX_CUBES_PER_AXIS) as u32,
        1,
    );
    bias_activation_kernel::launch::<R>(
        &input.handle.client,
        cube_count,
        cube_dim,
        input
            .handle
            .clone()
            .into_tensor_arg(Shape::from(shape.clone())),
        outputs.bias_arg(epilogue.bias, n),
        outputs.gate_arg(epilogue.gate),
        outputs.gate_arg(epilogue.mask),
        outputs.gate_arg(epilogue.aux),
        outputs.out_arg(),
        outputs.pre_arg(),
        epilogue.params[0],
        epilogue.params[1],
        epilogue.flags(write_pre),
        [
            input.handle.dtype.into(),
            outputs.gate_dtype(epilogue.gate).into(),
        ],
    );
    if let Some(bias_grad) = &bias_grad {
        sum_output_rows(&outputs.out, &shape, bias_grad);
    }
    outputs.finish(bias_grad)
}

/// Output buffers of one launch, and the argument plumbing shared by both kernels.
struct Outputs<R: Runtime> {
    out: CubeFusionHandle<R>,
    pre: Option<CubeFusionHandle<R>>,
    shape: Vec<usize>,
    dtype: DType,
}

impl<R: Runtime> Outputs<R> {
    fn alloc(like: &CubeFusionHandle<R>, shape: &[usize], dtype: DType, write_pre: bool) -> Self {
        let pre = write_pre.then(|| alloc(like, shape, dtype));
        Self::new(alloc(like, shape, dtype), pre, shape, dtype)
    }

    fn new(
        out: CubeFusionHandle<R>,
        pre: Option<CubeFusionHandle<R>>,
        shape: &[usize],
        dtype: DType,
    ) -> Self {
        Self {
            out,
            pre,
            shape: shape.to_vec(),
            dtype,
        }
    }

    /// Absent tensors are bound to a one-element dummy: wgpu rejects one buffer bound twice.
    fn dummy(&self) -> TensorArg<R> {
        alloc(&self.out, &[1], self.dtype).into_tensor_arg(Shape::from(vec![1]))
    }

    /// The bias as a rank-1 view of length `n` through its last stride.
    fn bias_arg(&self, bias: Option<&Operand<R>>, n: usize) -> TensorArg<R> {
        match bias {
            Some(bias) => {
                let mut handle = bias.handle.clone();
                let stride = *handle.strides.last().unwrap_or(&1);
                handle.strides = Strides::new(&[stride]);
                handle.into_tensor_arg(Shape::from(vec![n]))
            }
            None => self.dummy(),
        }
    }

    /// The gate (or dropout's mask) as `[rows, n]` through its row stride ([`check_gate`]
    /// accepted it): the epilogue reads it at the output's row and column.
    fn gate_arg(&self, gate: Option<&Operand<R>>) -> TensorArg<R> {
        let Some(gate) = gate else {
            return self.dummy();
        };
        let n = *self.shape.last().unwrap_or(&1);
        let rows = self.shape.iter().product::<usize>() / n.max(1);
        let stride = row_stride(&gate.shape, &gate.handle.strides).unwrap_or(n);
        let mut handle = gate.handle.clone();
        handle.strides = Strides::new(&[stride, 1]);
        handle.into_tensor_arg(Shape::from(vec![rows, n]))
    }

    /// The gate's storage type: the output's when absent (its dummy is of that type).
    fn gate_dtype(&self, gate: Option<&Operand<R>>) -> DType {
        gate.map_or(self.dtype, |gate| gate.handle.dtype)
    }

    fn out_arg(&self) -> TensorArg<R> {
        self.out
            .clone()
            .into_tensor_arg(Shape::from(self.shape.clone()))
    }

    fn pre_arg(&self) -> TensorArg<R> {
        match &self.pre {
            Some(pre) => pre.clone().into_tensor_arg(Shape::from(self.shape.clone())),
            None => self.dummy(),
        }
    }

    /// The partial column sums (f32, `len` elements), or an f32 dummy.
    fn partials_arg(&self, partials: Option<&CubeFusionHandle<R>>, len: usize) -> TensorArg<R> {
        match partials {
            Some(partials) => partials.clone().into_tensor_arg(Shape::from(vec![len])),
            None => alloc(&self.out, &[1], DType::F32).into_tensor_arg(Shape::from(vec![1])),
        }
    }

    fn finish(self, bias_grad: Option<CubeFusionHandle<R>>) -> LinearOutputs<R> {
        LinearOutputs {
            out: self.out,
            pre: self.pre,
            bias_grad,
            shape: self.shape,
        }
    }
}
