//! Host side of the fused kernel: validate, lay out operands, allocate outputs, launch.

use super::tiled::{CUBE_SIDE, TILE_M, TILE_N, fused_linear_kernel};
use super::{Epilogue, EpilogueFlags, KernelError, bias_activation_kernel};
use burn_backend::{DType, Shape};
use burn_cubecl_fusion::CubeFusionHandle;
use burn_std::Strides;
use cubecl::prelude::*;

/// Cubes one launch may have along an axis (CUDA's y/z limit; wgpu's default is the same).
const MAX_CUBES_PER_AXIS: usize = 65_535;

/// One operand: a device handle and its real shape (strides live in the handle).
#[derive(Clone, Debug)]
pub struct Operand<R: Runtime> {
    /// The device buffer, dtype and strides.
    pub handle: CubeFusionHandle<R>,
    /// The real shape.
    pub shape: Vec<usize>,
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

/// Writes `Σ_rows out` (`out` contiguous of `shape`) into `bias_grad`: a second pass, for the
/// executions whose epilogue does not sum (see [`super::sum_rows`]).
pub fn sum_output_rows<R: Runtime>(
    out: &CubeFusionHandle<R>,
    shape: &[usize],
    bias_grad: &CubeFusionHandle<R>,
) {
    let n = *shape.last().unwrap_or(&1);
    let rows = shape.iter().product::<usize>() / n.max(1);
    super::sum_rows(out, rows, n, bias_grad);
}

/// A validated problem: everything the launch needs, nothing allocated yet.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearProblem {
    /// Output shape `[batch.., m, n]`.
    pub out_shape: Vec<usize>,
    /// Element type of every operand and output.
    pub dtype: DType,
    /// Product of the batch dims.
    pub batch: usize,
    /// The shared dim.
    pub k: usize,
}

impl LinearProblem {
    /// Floating-point operations of the matmul: `2·batch·m·n·k`.
    pub fn flops(&self) -> f64 {
        2.0 * self.out_shape.iter().product::<usize>() as f64 * self.k as f64
    }
}

/// Checks that `lhs · rhs (+ bias)` is a problem the kernel runs, without touching the device.
///
/// # Errors
/// A [`KernelError`] naming the first thing the kernel does not support.
pub fn check_linear(
    lhs: (&[usize], DType),
    rhs: (&[usize], DType),
    bias: Option<(&[usize], DType)>,
) -> Result<LinearProblem, KernelError> {
    let dtype = lhs.1;
    let supported = matches!(dtype, DType::F32 | DType::F16 | DType::BF16);
    if !supported || rhs.1 != dtype || bias.is_some_and(|b| b.1 != dtype) {
        return Err(KernelError::UnsupportedDtype {
            lhs: lhs.1,
            rhs: rhs.1,
            bias: bias.map(|b| b.1),
        });
    }
    let incompatible = || KernelError::IncompatibleShapes {
        lhs: lhs.0.to_vec(),
        rhs: rhs.0.to_vec(),
        bias: bias.map(|b| b.0.to_vec()),
    };
    let out_shape = matmul_out_shape(lhs.0, rhs.0).ok_or_else(incompatible)?;
    let n = out_shape[out_shape.len() - 1];
    if let Some((shape, _)) = bias {
        let (last, rest) = shape.split_last().ok_or_else(incompatible)?;
        if *last != n || rest.iter().any(|&d| d != 1) || shape.len() > out_shape.len() {
            return Err(incompatible());
        }
    }
    let m = out_shape[out_shape.len() - 2];
    let batch: usize = out_shape[..out_shape.len() - 2].iter().product();
    if m == 0 || n == 0 || batch == 0 {
        return Err(KernelError::Empty { m, n, batch });
    }
    let cubes = [n.div_ceil(TILE_N), m.div_ceil(TILE_M), batch];
    if let Some(&cubes) = cubes.iter().find(|&&c| c > MAX_CUBES_PER_AXIS) {
        return Err(KernelError::GridTooLarge {
            cubes,
            limit: MAX_CUBES_PER_AXIS,
        });
    }
    Ok(LinearProblem {
        out_shape,
        dtype,
        batch,
        k: lhs.0[lhs.0.len() - 1],
    })
}

/// Broadcast matmul output shape with real dims; `None` if `k` or a batch dim disagrees.
fn matmul_out_shape(lhs: &[usize], rhs: &[usize]) -> Option<Vec<usize>> {
    let (lr, rr) = (lhs.len(), rhs.len());
    if lr < 2 || rr < 2 || lhs[lr - 1] != rhs[rr - 2] {
        return None;
    }
    let rank = lr.max(rr);
    let padded = |shape: &[usize], i: usize| {
        let pad = rank - shape.len();
        if i < pad { 1 } else { shape[i - pad] }
    };
    let mut out: Vec<usize> = (0..rank - 2)
        .map(|i| match (padded(lhs, i), padded(rhs, i)) {
            (a, b) if a == b => Some(a),
            (1, b) => Some(b),
            (a, 1) => Some(a),
            _ => None,
        })
        .collect::<Option<_>>()?;
    out.extend([lhs[lr - 2], rhs[rr - 1]]);
    Some(out)
}

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

fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
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
    /// The gate of [`Epilogue::ReluGrad`], of the output's shape, rows contiguous or pitched
    /// (see [`check_gate`]).
    pub gate: Option<&'a Operand<R>>,
    /// The run-time parameters of the activation ([`Epilogue::parameters`]): LeakyReLU's
    /// slope, clamp's min and max; unused entries are zero.
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
            params: [0.0; 2],
            bias_grad: false,
        }
    }

    /// With the activation's run-time parameters.
    pub fn with_params(self, params: [f32; 2]) -> Self {
        Self { params, ..self }
    }

    fn flags(&self, write_pre: bool) -> EpilogueFlags {
        EpilogueFlags::new(self.epilogue, self.bias.is_some(), write_pre)
    }

    /// With [`Self::bias_grad`] set to `bias_grad`.
    pub fn with_bias_grad(self, bias_grad: bool) -> Self {
        Self { bias_grad, ..self }
    }
}

/// Checks that `gate` can gate an output of `out_shape` and `dtype`: same shape and dtype,
/// read as rows of the last dim ([`row_stride`]): contiguous, or with rows padded to a pitch,
/// as CubeCL's CUDA runtime allocates tensors whose rows are not a multiple of its alignment.
///
/// # Errors
/// [`KernelError::UnsupportedGate`] naming what differs.
pub fn check_gate<R: Runtime>(
    gate: &Operand<R>,
    out_shape: &[usize],
    dtype: DType,
) -> Result<(), KernelError> {
    let rows = row_stride(&gate.shape, &gate.handle.strides);
    if gate.shape != out_shape || gate.handle.dtype != dtype || rows.is_none() {
        return Err(KernelError::UnsupportedGate {
            shape: gate.shape.clone(),
            out: out_shape.to_vec(),
        });
    }
    Ok(())
}

/// The distance between rows of a tensor read as rows of its last dim: its last stride is 1
/// and its leading dims collapse into one row index of that stride (contiguous, or rows padded
/// to a pitch). `None` for any other layout.
///
/// ```
/// use hypatia::kernel::row_stride;
/// assert_eq!(row_stride(&[2, 3, 33], &[99, 33, 1]), Some(33)); // contiguous
/// assert_eq!(row_stride(&[2, 3, 33], &[192, 64, 1]), Some(64)); // rows pitched to 256 bytes
/// assert_eq!(row_stride(&[3, 1, 33], &[64, 64, 1]), Some(64)); // a 1 between
/// assert_eq!(row_stride(&[33, 2], &[1, 33]), None); // transposed
/// assert_eq!(row_stride(&[2, 3, 33], &[200, 64, 1]), None); // batches apart
/// ```
pub fn row_stride(shape: &[usize], strides: &[usize]) -> Option<usize> {
    let (&n, lead) = shape.split_last()?;
    if n > 1 && strides.get(lead.len()) != Some(&1) {
        return None;
    }
    let (mut stride, mut rows) = (None, 1);
    for (&dim, &at) in lead.iter().zip(strides).rev().filter(|(dim, _)| **dim != 1) {
        let row = *stride.get_or_insert(at);
        if row < n || at != row * rows {
            return None;
        }
        rows *= dim;
    }
    Some(stride.unwrap_or(n))
}

/// Launches `out = epilogue(lhs · rhs + bias)` (and `pre = lhs · rhs + bias` if `write_pre`)
/// for a `problem` that [`check_linear`] accepted for these operands.
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
        outputs.out_arg(),
        outputs.pre_arg(),
        outputs.partials_arg(partials.as_ref(), partial_rows * n),
        epilogue.params[0],
        epilogue.params[1],
        flags,
        problem.dtype.into(),
    );
    if let (Some(partials), Some(bias_grad)) = (&partials, &bias_grad) {
        super::sum_rows(partials, partial_rows, n, bias_grad);
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
        outputs.out_arg(),
        outputs.pre_arg(),
        epilogue.params[0],
        epilogue.params[1],
        epilogue.flags(write_pre),
        input.handle.dtype.into(),
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

    /// The gate as `[rows, n]` through its row stride ([`check_gate`] accepted it): the
    /// epilogue reads it at the output's row and column.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_broadcast_batch_and_bias() {
        let problem = check_linear(
            (&[2, 3, 4], DType::F32),
            (&[4, 5], DType::F32),
            Some((&[5], DType::F32)),
        );
        assert_eq!(problem.unwrap().out_shape, vec![2, 3, 5]);
        let problem = check_linear(
            (&[2, 3, 4], DType::F32),
            (&[1, 4, 5], DType::F32),
            Some((&[1, 1, 5], DType::F32)),
        );
        assert_eq!(problem.unwrap().batch, 2);
    }

    #[test]
    fn rejects_what_the_kernel_cannot_run() {
        let err = check_linear((&[3, 4], DType::F32), (&[5, 6], DType::F32), None).unwrap_err();
        assert_eq!(err.key(), "incompatible-shapes");
        let err = check_linear(
            (&[3, 4], DType::F32),
            (&[4, 6], DType::F32),
            Some((&[2, 6], DType::F32)),
        )
        .unwrap_err();
        assert_eq!(err.key(), "incompatible-shapes");
        let err = check_linear((&[3, 4], DType::F64), (&[4, 6], DType::F64), None).unwrap_err();
        assert_eq!(err.key(), "unsupported-dtype");
        let err = check_linear((&[0, 4], DType::F32), (&[4, 6], DType::F32), None).unwrap_err();
        assert_eq!(err.key(), "empty");
    }
}
