//! The MLP-chain kernel: up to [`MAX_CHAIN_LAYERS`] Linear layers in one launch, the hidden
//! activations kept in shared memory.
//!
//! Small-batch inference of a small MLP is bound by launches and host time, not by FLOPs: at
//! batch 1 a 784→512→512→10 forward is 0.7 MFLOP and 1.3 MB of bf16 weights. One cube per
//! block of [`ChainFlags::rows`] rows runs every layer: it stages its input rows in shared
//! memory as f32, and for each layer and each pass of [`CHAIN_COLS`] output columns its 256
//! units split the `k` loop four ways (coalesced weight reads along `n`), sum the four partials
//! through shared memory, add the bias, apply the activation, round to the storage type (as
//! Burn's layer-by-layer path stores each hidden tensor) and write the next layer's input into
//! the other shared buffer. Only the last layer writes global memory.
//!
//! ```text
//!  x rows --stage--> h_a --layer 0--> h_b --layer 1--> h_a ... --last layer--> out
//!            (shared, f32, rows x width each; weights and biases read from global memory)
//! ```
//!
//! The bounds ([`check_chain`]) keep both buffers within 48 KiB of shared memory; beyond them a
//! plan runs its layers one launch each, which is also faster there (see `choose_chain` in the
//! runtime).

use super::{Activation, Epilogue, KernelError, LinearOutputs, Operand, activate, alloc};
use burn_backend::{DType, Shape};
use burn_std::Strides;
use cubecl::prelude::*;

/// Units per cube.
pub const CHAIN_UNITS: usize = 256;
/// Output columns one pass computes (one per unit of a slice).
pub const CHAIN_COLS: usize = 64;
/// Slices the `k` loop of a pass is split into.
pub const CHAIN_SLICES: usize = CHAIN_UNITS / CHAIN_COLS;
/// Layers one launch runs; a longer chain runs in several launches.
pub const MAX_CHAIN_LAYERS: usize = 4;
/// Widest layer input or hidden output the shared buffers hold.
pub const MAX_CHAIN_WIDTH: usize = 1024;
/// Most rows one cube runs.
pub const MAX_CHAIN_ROWS: usize = 4;
/// Most rows a chain launch takes: beyond, every cube re-reads every weight and the per-layer
/// tensor-core kernels win.
pub const MAX_CHAIN_M: usize = 64;

/// Compile-time layout of one chain launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChainFlags {
    /// Layers in this launch (1 to [`MAX_CHAIN_LAYERS`]).
    pub layers: u32,
    /// Whether layer `i` adds a bias.
    pub bias: [bool; MAX_CHAIN_LAYERS],
    /// The activation of layer `i`.
    pub activation: [Activation; MAX_CHAIN_LAYERS],
    /// Row length of the shared buffers: every layer input width, rounded up to [`CHAIN_COLS`].
    pub width: u32,
    /// Rows per cube.
    pub rows: u32,
}

/// `out = act_L(.. act_0(x · w0 + b0) .. · wL + bL)` for rows `rows·CUBE_POS_X ..`.
///
/// `x` is `[m, k0]` through its strides; `w_i` is `[k_i, n_i]` through its strides, `b_i` a
/// rank-1 view of length `n_i`; unused layers and biases are dummies. `out` is `[m, n_L]`
/// contiguous.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub fn mlp_chain_kernel<F: Float>(
    x: &Tensor<F>,
    w0: &Tensor<F>,
    b0: &Tensor<F>,
    w1: &Tensor<F>,
    b1: &Tensor<F>,
    w2: &Tensor<F>,
    b2: &Tensor<F>,
    w3: &Tensor<F>,
    b3: &Tensor<F>,
    out: &mut Tensor<F>,
    #[comptime] flags: ChainFlags,
    #[define(F)] _dtype: StorageType,
) {
    let rows = comptime![flags.rows as usize];
    let width = comptime![flags.width as usize];
    let m = x.shape(0);
    let k0 = x.shape(1);
    let row_base = CUBE_POS_X as usize * rows;
    let unit = UNIT_POS as usize;

    let mut h_a = SharedMemory::<f32>::new(rows * width);
    let mut h_b = SharedMemory::<f32>::new(rows * width);
    let mut partial = SharedMemory::<f32>::new(CHAIN_SLICES * rows * CHAIN_COLS);

    // Stage the cube's input rows (zero past `m`).
    let mut index = unit;
    while index < rows * k0 {
        let r = index / k0;
        let k = index % k0;
        let row = row_base + r;
        let mut value = 0.0f32;
        if row < m {
            value = f32::cast_from(x[row * x.stride(0) + k * x.stride(1)]);
        }
        h_a[r * width + k] = value;
        index += CHAIN_UNITS;
    }
    sync_cube();

    let layers = comptime![flags.layers];
    chain_layer::<F>(
        &h_a,
        &mut h_b,
        &mut partial,
        w0,
        b0,
        out,
        row_base,
        m,
        rows,
        width,
        comptime![flags.bias[0]],
        comptime![flags.activation[0]],
        comptime![layers == 1],
    );
    if comptime![layers > 1] {
        chain_layer::<F>(
            &h_b,
            &mut h_a,
            &mut partial,
            w1,
            b1,
            out,
            row_base,
            m,
            rows,
            width,
            comptime![flags.bias[1]],
            comptime![flags.activation[1]],
            comptime![layers == 2],
        );
    }
    if comptime![layers > 2] {
        chain_layer::<F>(
            &h_a,
            &mut h_b,
            &mut partial,
            w2,
            b2,
            out,
            row_base,
            m,
            rows,
            width,
            comptime![flags.bias[2]],
            comptime![flags.activation[2]],
            comptime![layers == 3],
        );
    }
    if comptime![layers > 3] {
        chain_layer::<F>(
            &h_b,
            &mut h_a,
            &mut partial,
            w3,
            b3,
            out,
            row_base,
            m,
            rows,
            width,
            comptime![flags.bias[3]],
            comptime![flags.activation[3]],
            true,
        );
    }
}

/// One layer: `src` (rows × k, f32) times `w`, bias and activation, into `dst` (hidden, rounded
/// to `F`) or, for the last layer, into `out`. Ends with the cube synchronised.
#[cube]
#[allow(clippy::too_many_arguments)]
fn chain_layer<F: Float>(
    src: &SharedMemory<f32>,
    dst: &mut SharedMemory<f32>,
    partial: &mut SharedMemory<f32>,
    w: &Tensor<F>,
    b: &Tensor<F>,
    out: &mut Tensor<F>,
    row_base: usize,
    m: usize,
    #[comptime] rows: usize,
    #[comptime] width: usize,
    #[comptime] has_bias: bool,
    #[comptime] activation: Activation,
    #[comptime] last: bool,
) {
    let k = w.shape(0);
    let n = w.shape(1);
    let (stride_k, stride_n) = (w.stride(0), w.stride(1));
    let unit = UNIT_POS as usize;
    let col_in = unit % CHAIN_COLS;
    let slice = unit / CHAIN_COLS;
    let passes = n.div_ceil(CHAIN_COLS);
    let mut acc = Array::<f32>::new(rows);

    for pass in 0..passes {
        let col = pass * CHAIN_COLS + col_in;
        #[unroll]
        for r in 0..rows {
            acc[r] = 0.0f32;
        }
        if col < n {
            let w_col = col * stride_n;
            // Four independent weight loads in flight per unit.
            let step = CHAIN_SLICES * 4;
            let mut kk = slice;
            while kk + CHAIN_SLICES * 3 < k {
                let v0 = f32::cast_from(w[kk * stride_k + w_col]);
                let v1 = f32::cast_from(w[(kk + CHAIN_SLICES) * stride_k + w_col]);
                let v2 = f32::cast_from(w[(kk + CHAIN_SLICES * 2) * stride_k + w_col]);
                let v3 = f32::cast_from(w[(kk + CHAIN_SLICES * 3) * stride_k + w_col]);
                #[unroll]
                for r in 0..rows {
                    let h = r * width + kk;
                    acc[r] += src[h] * v0
                        + src[h + CHAIN_SLICES] * v1
                        + src[h + CHAIN_SLICES * 2] * v2
                        + src[h + CHAIN_SLICES * 3] * v3;
                }
                kk += step;
            }
            while kk < k {
                let v = f32::cast_from(w[kk * stride_k + w_col]);
                #[unroll]
                for r in 0..rows {
                    acc[r] += src[r * width + kk] * v;
                }
                kk += CHAIN_SLICES;
            }
        }
        #[unroll]
        for r in 0..rows {
            partial[(slice * rows + r) * CHAIN_COLS + col_in] = acc[r];
        }
        sync_cube();

        let mut pair = unit;
        while pair < rows * CHAIN_COLS {
            let r = pair / CHAIN_COLS;
            let c = pair % CHAIN_COLS;
            let col = pass * CHAIN_COLS + c;
            if col < n {
                let mut value = 0.0f32;
                #[unroll]
                for s in 0..CHAIN_SLICES {
                    value += partial[(s * rows + r) * CHAIN_COLS + c];
                }
                if comptime![has_bias] {
                    value += f32::cast_from(b[col * b.stride(0)]);
                }
                value = activate(value, 0.0f32, 0.0f32, activation);
                if comptime![last] {
                    let row = row_base + r;
                    if row < m {
                        out[row * out.stride(0) + col] = F::cast_from(value);
                    }
                } else {
                    dst[r * width + col] = f32::cast_from(F::cast_from(value));
                }
            }
            pair += CHAIN_UNITS;
        }
        sync_cube();
    }
}

/// What one layer of a chain reads: its weight `[.., k, n]` (leading dims 1), its bias (a row
/// of `n`) and its epilogue.
#[derive(Clone, Debug)]
pub struct ChainLayer<'a, R: Runtime> {
    /// The weight.
    pub w: &'a Operand<R>,
    /// The bias.
    pub bias: Option<&'a Operand<R>>,
    /// [`Epilogue::Relu`] or [`Epilogue::Identity`].
    pub epilogue: Epilogue,
}

/// A validated chain launch.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainProblem {
    /// Rows (the product of the input's leading dims).
    pub m: usize,
    /// `k0`, then each layer's `n`.
    pub widths: Vec<usize>,
    /// The output's shape: the input's leading dims, then the last layer's `n`.
    pub out_shape: Vec<usize>,
    /// The element type of every operand.
    pub dtype: DType,
}

impl ChainProblem {
    /// Rows per cube: the smallest power of two covering `m`, at most [`MAX_CHAIN_ROWS`].
    pub fn rows(&self) -> usize {
        self.m.next_power_of_two().min(MAX_CHAIN_ROWS)
    }

    /// Cubes of one launch.
    pub fn cubes(&self) -> usize {
        self.m.div_ceil(self.rows())
    }

    /// Bytes of weights one launch reads (every cube reads every weight).
    pub fn weight_bytes(&self) -> usize {
        let elements: usize = self.widths.windows(2).map(|w| w[0] * (w[1] + 1)).sum();
        elements * self.dtype.size()
    }

    /// Floating-point operations: `2·m·Σ k_i·n_i`.
    pub fn flops(&self) -> f64 {
        let macs: usize = self.widths.windows(2).map(|w| w[0] * w[1]).sum();
        2.0 * self.m as f64 * macs as f64
    }
}

/// Whether `epilogue` can end a chain layer.
pub fn chains(epilogue: Epilogue) -> bool {
    matches!(epilogue, Epilogue::Relu | Epilogue::Identity)
}

/// Checks that the chain kernel runs `x` through `layers` (weight shape, bias shape, epilogue),
/// without touching the device.
///
/// # Errors
/// [`KernelError::UnsupportedDtype`] or [`KernelError::IncompatibleShapes`] for what no
/// kernel runs, [`KernelError::OutsideChainBounds`] for what only the per-layer kernels run.
pub fn check_chain(
    x: (&[usize], &[usize], DType),
    layers: &[(&[usize], Option<&[usize]>, DType, Epilogue)],
) -> Result<ChainProblem, KernelError> {
    let (shape, strides, dtype) = x;
    let outside = |what: &str| KernelError::OutsideChainBounds(what.to_string());
    let supported = matches!(dtype, DType::F32 | DType::F16 | DType::BF16);
    if let Some(&(_, bias, other, _)) = layers
        .iter()
        .find(|l| !supported || l.2 != dtype)
        .or((!supported).then(|| &layers[0]))
    {
        return Err(KernelError::UnsupportedDtype {
            lhs: dtype,
            rhs: other,
            bias: bias.map(|_| other),
        });
    }
    if layers.is_empty() || layers.len() > MAX_CHAIN_LAYERS {
        return Err(outside("layer count"));
    }
    let (&k0, lead) = shape.split_last().ok_or_else(|| outside("rank"))?;
    // The input's leading dims must collapse into one row index.
    let rank = shape.len();
    let collapses = (0..rank.saturating_sub(2))
        .all(|i| shape[i] == 1 || strides[i] == strides[i + 1] * shape[i + 1] || shape[i + 1] == 1);
    if rank < 2 || !collapses {
        return Err(outside("input layout"));
    }
    let m: usize = lead.iter().product();
    let mut widths = vec![k0];
    for &(w, bias, _, epilogue) in layers {
        let incompatible = || KernelError::IncompatibleShapes {
            lhs: vec![m, *widths.last().unwrap_or(&0)],
            rhs: w.to_vec(),
            bias: bias.map(<[usize]>::to_vec),
        };
        let r = w.len();
        if r < 2 || w[..r - 2].iter().any(|&d| d != 1) || w[r - 2] != *widths.last().unwrap() {
            return Err(incompatible());
        }
        let n = w[r - 1];
        if let Some(bias) = bias {
            let (last, rest) = bias.split_last().ok_or_else(incompatible)?;
            if *last != n || rest.iter().any(|&d| d != 1) {
                return Err(incompatible());
            }
        }
        if !chains(epilogue) {
            return Err(outside("epilogue"));
        }
        widths.push(n);
    }
    if m == 0 || widths.contains(&0) {
        return Err(KernelError::Empty {
            m,
            n: *widths.last().unwrap(),
            batch: 1,
        });
    }
    if m > MAX_CHAIN_M {
        return Err(outside("rows"));
    }
    // Every layer input lives in shared memory; the last output goes to global memory.
    if widths[..widths.len() - 1]
        .iter()
        .any(|&w| w > MAX_CHAIN_WIDTH)
    {
        return Err(outside("width"));
    }
    let mut out_shape = lead.to_vec();
    out_shape.push(*widths.last().unwrap());
    Ok(ChainProblem {
        m,
        widths,
        out_shape,
        dtype,
    })
}

/// Runs a chain that [`check_chain`] accepted into a new contiguous output.
pub fn launch_mlp_chain<R: Runtime>(
    problem: &ChainProblem,
    x: &Operand<R>,
    layers: &[ChainLayer<'_, R>],
) -> LinearOutputs<R> {
    let out = alloc(&x.handle, &problem.out_shape, problem.dtype);
    let client = x.handle.client.clone();
    let n_last = *problem.widths.last().expect("a chain has layers");
    let rows = problem.rows();
    let width = problem.widths[..problem.widths.len() - 1]
        .iter()
        .max()
        .expect("a chain has an input")
        .next_multiple_of(CHAIN_COLS);

    let view = |handle: &burn_cubecl_fusion::CubeFusionHandle<R>,
                shape: [usize; 2],
                strides: [usize; 2]| {
        let mut handle = handle.clone();
        handle.strides = Strides::new(&strides);
        handle.into_tensor_arg(Shape::from(shape.to_vec()))
    };
    let x_strides = &x.handle.strides;
    let rank = x.shape.len();
    // Rows step by the stride of the innermost leading dim that is not 1.
    let row_stride = (0..rank - 1)
        .rev()
        .find(|&i| x.shape[i] != 1)
        .map_or(0, |i| x_strides[i]);
    let x_arg = view(
        &x.handle,
        [problem.m, problem.widths[0]],
        [row_stride, x_strides[rank - 1]],
    );
    let dummy = || alloc(&x.handle, &[1], problem.dtype).into_tensor_arg(Shape::from(vec![1]));
    let mut flags = ChainFlags {
        layers: layers.len() as u32,
        bias: [false; MAX_CHAIN_LAYERS],
        activation: [Activation::None; MAX_CHAIN_LAYERS],
        width: width as u32,
        rows: rows as u32,
    };
    let mut args: Vec<(TensorArg<R>, TensorArg<R>)> = Vec::new();
    for (i, layer) in layers.iter().enumerate() {
        let (k, n) = (problem.widths[i], problem.widths[i + 1]);
        let s = &layer.w.handle.strides;
        let r = s.len();
        let w = view(&layer.w.handle, [k, n], [s[r - 2], s[r - 1]]);
        let b = match layer.bias {
            Some(bias) => {
                let stride = *bias.handle.strides.last().unwrap_or(&1);
                view(&bias.handle, [n, 1], [stride, 1])
            }
            None => dummy(),
        };
        flags.bias[i] = layer.bias.is_some();
        flags.activation[i] = layer.epilogue.activation();
        args.push((w, b));
    }
    while args.len() < MAX_CHAIN_LAYERS {
        args.push((dummy(), dummy()));
    }
    let mut args = args.into_iter();
    let mut next = || args.next().expect("padded to MAX_CHAIN_LAYERS");
    let ((w0, b0), (w1, b1), (w2, b2), (w3, b3)) = (next(), next(), next(), next());
    let out_arg = view(&out, [problem.m, n_last], [n_last, 1]);
    mlp_chain_kernel::launch::<R>(
        &client,
        CubeCount::Static(problem.cubes() as u32, 1, 1),
        CubeDim::new_1d(CHAIN_UNITS as u32),
        x_arg,
        w0,
        b0,
        w1,
        b1,
        w2,
        b2,
        w3,
        b3,
        out_arg,
        flags,
        problem.dtype.into(),
    );
    LinearOutputs {
        out,
        pre: None,
        shape: problem.out_shape.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(w: &[usize], bias: bool) -> (&[usize], Option<&[usize]>, DType, Epilogue) {
        let bias: Option<&[usize]> = bias.then_some(&w[w.len() - 1..]);
        (w, bias, DType::F32, Epilogue::Relu)
    }

    #[test]
    fn accepts_a_small_mlp_and_sizes_its_launch() {
        let problem = check_chain(
            (&[2, 3, 784], &[2352, 784, 1], DType::F32),
            &[
                layer(&[784, 512], true),
                layer(&[1, 512, 512], false),
                layer(&[512, 10], true),
            ],
        )
        .unwrap();
        assert_eq!(problem.m, 6);
        assert_eq!(problem.out_shape, vec![2, 3, 10]);
        assert_eq!(problem.widths, vec![784, 512, 512, 10]);
        assert_eq!((problem.rows(), problem.cubes()), (4, 2));
    }

    #[test]
    fn refuses_what_only_the_per_layer_kernels_run() {
        let too_wide = check_chain(
            (&[1, 2048], &[2048, 1], DType::F32),
            &[layer(&[2048, 8], true)],
        );
        assert_eq!(too_wide.unwrap_err().key(), "outside-chain-bounds");
        let too_tall = check_chain((&[65, 8], &[8, 1], DType::F32), &[layer(&[8, 8], true)]);
        assert_eq!(too_tall.unwrap_err().key(), "outside-chain-bounds");
        let mismatch = check_chain(
            (&[1, 8], &[8, 1], DType::F32),
            &[layer(&[8, 4], true), layer(&[5, 4], true)],
        );
        assert_eq!(mismatch.unwrap_err().key(), "incompatible-shapes");
        let gelu = check_chain(
            (&[1, 8], &[8, 1], DType::F32),
            &[(&[8, 4], None, DType::F32, Epilogue::Gelu)],
        );
        assert_eq!(gelu.unwrap_err().key(), "outside-chain-bounds");
    }
}
