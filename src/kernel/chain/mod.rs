//! The MLP-chain kernel: up to [`MAX_CHAIN_LAYERS`] Linear layers in one launch, the hidden
//! activations kept in shared memory.
//!
//! Small-batch inference of a small MLP is bound by launches and host time, not by FLOPs: at
//! batch 1 a 784→512→512→10 forward is 0.7 MFLOP and 1.3 MB of bf16 weights. One cube per
//! block of [`ChainFlags::rows`] rows runs every layer: it stages its input rows in shared
//! memory, and for each layer and each pass of [`CHAIN_COLS`] column vectors (up to 16 bytes of
//! weights each, read along `n`) its units split the `k` loop into `units / CHAIN_COLS`
//! slices, keep [`CHAIN_UNROLL`] vector loads in flight, sum the slices' partials through
//! shared memory, add the bias, apply the activation, round to the storage type (as Burn's
//! layer-by-layer path stores each hidden tensor) and write the next layer's input into the
//! other shared buffer. Only the last layer writes global memory.
//!
//! ```text
//!  x rows --stage--> h_a --layer 0--> h_b --layer 1--> h_a ... --last layer--> out
//!            (shared, storage type, rows x width each; weights and biases from global memory)
//! ```
//!
//! The bounds ([`check_chain`]) keep the buffers within the device's shared memory (48 KiB at
//! most). One SM streams every weight, so this kernel wins only where launches cost more than
//! that stream: narrow layers at small batch (measured in
//! `benches/results/nvidia-h100-chain.md`). On CUDA the same chains run on the grid-wide
//! kernel instead (module `grid`, CUDA C++): each layer spread over every SM, the layers
//! separated by a grid-wide wait, which CubeCL's own frontend cannot express.
//! [`choose_chain`](super::choose_chain) predicts either from the device's
//! [`Profile`](super::Profile), and a chain it declines runs layer by layer.

#[cfg(feature = "cuda")]
pub mod grid;

use super::{Activation, Epilogue, KernelError, LinearOutputs, OperandRef, activate, alloc};
use burn_backend::{DType, Shape};
use burn_std::Strides;
use cubecl::prelude::*;

/// Column vectors one pass computes (one per unit of a slice).
pub const CHAIN_COLS: usize = 64;
/// Weight loads each unit has in flight: the kernel streams weights from L2 with one cube per
/// row block, so its speed is the bytes it keeps in flight (units × this × element size).
pub const CHAIN_UNROLL: usize = 8;
/// Most bytes of shared memory a chain launch uses (CUDA's default per-block limit; a device
/// with less, such as many wgpu adapters, sets its own).
pub const MAX_CHAIN_SHARED: usize = 48 * 1024;
/// Layers one launch runs; a longer chain runs in several launches.
pub const MAX_CHAIN_LAYERS: usize = 4;
/// Widest layer input or hidden output the shared buffers hold.
pub const MAX_CHAIN_WIDTH: usize = 1024;
/// Most rows one cube runs.
pub const MAX_CHAIN_ROWS: usize = 4;
/// Most rows a chain launch takes: beyond, every cube re-reads every weight and the per-layer
/// tensor-core kernels win.
pub const MAX_CHAIN_M: usize = 64;

/// Rows of one FMA work item of the grid-wide kernel (CUDA; its threads keep rows × vector
/// accumulators in registers). Here, not in `grid`, because the cost model predicts the
/// kernel on every build.
pub const GRID_ROWS: usize = 8;

/// The fewest rows for which the grid-wide kernel's work items use tensor cores (half types
/// on sm_80 or later). Measured on an H100 (`benches/results/nvidia-h100-chain.md`,
/// 2026-11-26, 784→512→512→10 bf16): from 6 rows on they win (11.2 µs against 11.6 at 6
/// rows, 11.9 against 18.0 at 32); at 1, 2 and 4 rows the FMA items do (9.5, 10.0 and 10.6 µs
/// against 11.0-11.2).
pub const GRID_MMA_MIN_M: usize = 5;

/// One work item of the grid-wide kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GridItem {
    /// Rows of the item.
    pub rows: usize,
    /// Columns of the item (FMA items: at most one 16-byte vector; the weights may allow
    /// fewer).
    pub columns: usize,
    /// Whether the item runs on tensor cores (`mma.sync` m16n8k16, 8 columns, 16 or 32 rows).
    pub mma: bool,
}

/// The grid-wide work item over `m` rows of `dtype`, where `mma` says whether the device has
/// `dtype`'s m16n8k16 tensor-core product (see [`GRID_MMA_MIN_M`]).
pub fn grid_item(m: usize, dtype: DType, mma: bool) -> GridItem {
    let half = matches!(dtype, DType::BF16 | DType::F16);
    if mma && half && m >= GRID_MMA_MIN_M {
        // 16-row items up to 32 rows (one wave of 128 at 32 rows × 512 columns), 32 beyond.
        let rows = if m <= 32 { 16 } else { 32 };
        return GridItem {
            rows,
            columns: 8,
            mma: true,
        };
    }
    GridItem {
        rows: m.next_power_of_two().min(GRID_ROWS),
        columns: (16 / dtype.size()).max(1),
        mma: false,
    }
}

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
    /// Units per cube (a multiple of [`CHAIN_COLS`]): `units / CHAIN_COLS` slices split `k`.
    pub units: u32,
    /// The larger of the two vector sizes (the partial sums' stride).
    pub vector: u32,
}

/// `out = act_L(.. act_0(x · w0 + b0) .. · wL + bL)` for rows `rows·CUBE_POS_X ..`.
///
/// `x` is `[m, k0]` through its strides. The hidden layers' weights `w0..w2` are `[k_i, n_i]`
/// read as vectors of `NH` elements along `n` (contiguous rows), their biases likewise; the last
/// layer's `wl`, `bl` as vectors of `NL`. Unused layers and biases are dummies. `out` is
/// `[m, n_L]` contiguous.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub fn mlp_chain_kernel<F: Float, NH: Size, NL: Size>(
    x: &Tensor<F>,
    w0: &Tensor<Vector<F, NH>>,
    b0: &Tensor<Vector<F, NH>>,
    w1: &Tensor<Vector<F, NH>>,
    b1: &Tensor<Vector<F, NH>>,
    w2: &Tensor<Vector<F, NH>>,
    b2: &Tensor<Vector<F, NH>>,
    wl: &Tensor<Vector<F, NL>>,
    bl: &Tensor<Vector<F, NL>>,
    out: &mut Tensor<F>,
    #[comptime] flags: ChainFlags,
    #[define(F)] _dtype: StorageType,
) {
    let rows = comptime![flags.rows as usize];
    let width = comptime![flags.width as usize];
    let units = comptime![flags.units as usize];
    let vector = comptime![flags.vector as usize];
    let m = x.shape(0);
    let k0 = x.shape(1);
    let row_base = CUBE_POS_X as usize * rows;
    let unit = UNIT_POS as usize;

    let mut h_a = SharedMemory::<F>::new(rows * width);
    let mut h_b = SharedMemory::<F>::new(rows * width);
    let mut partial = SharedMemory::<f32>::new(units * rows * vector);

    // Stage the cube's input rows (zero past `m`).
    let mut index = unit;
    while index < rows * k0 {
        let r = index / k0;
        let k = index % k0;
        let row = row_base + r;
        let mut value = F::from_int(0);
        if row < m {
            value = x[row * x.stride(0) + k * x.stride(1)];
        }
        h_a[r * width + k] = value;
        index += units;
    }
    sync_cube();

    let layers = comptime![flags.layers];
    let last = comptime![layers as usize - 1];
    let (bias, act) = (flags.bias, flags.activation);
    if comptime![layers > 1] {
        chain_layer::<F, NH>(
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
            units,
            comptime![bias[0]],
            comptime![act[0]],
            false,
        );
    }
    if comptime![layers > 2] {
        chain_layer::<F, NH>(
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
            units,
            comptime![bias[1]],
            comptime![act[1]],
            false,
        );
    }
    if comptime![layers > 3] {
        chain_layer::<F, NH>(
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
            units,
            comptime![bias[2]],
            comptime![act[2]],
            false,
        );
    }
    // The last layer reads the buffer the layer before it wrote.
    if comptime![last % 2 == 0] {
        chain_layer::<F, NL>(
            &h_a,
            &mut h_b,
            &mut partial,
            wl,
            bl,
            out,
            row_base,
            m,
            rows,
            width,
            units,
            comptime![bias[last]],
            comptime![act[last]],
            true,
        );
    } else {
        chain_layer::<F, NL>(
            &h_b,
            &mut h_a,
            &mut partial,
            wl,
            bl,
            out,
            row_base,
            m,
            rows,
            width,
            units,
            comptime![bias[last]],
            comptime![act[last]],
            true,
        );
    }
}

/// One layer: `src` (rows × k) times `w`, bias and activation, into `dst` (the next layer's
/// input) or, for the last layer, into `out`. Unit `g + CHAIN_COLS·s` owns the column vector `g`
/// of each pass and the `k` slice `s`; it keeps [`CHAIN_UNROLL`] vector loads in flight. Ends
/// with the cube synchronised.
#[cube]
#[allow(clippy::too_many_arguments)]
fn chain_layer<F: Float, N: Size>(
    src: &SharedMemory<F>,
    dst: &mut SharedMemory<F>,
    partial: &mut SharedMemory<f32>,
    w: &Tensor<Vector<F, N>>,
    b: &Tensor<Vector<F, N>>,
    out: &mut Tensor<F>,
    row_base: usize,
    m: usize,
    #[comptime] rows: usize,
    #[comptime] width: usize,
    #[comptime] units: usize,
    #[comptime] has_bias: bool,
    #[comptime] activation: Activation,
    #[comptime] last: bool,
) {
    let slices = comptime![units / CHAIN_COLS];
    let n_vec = N::value();
    let k = w.shape(0);
    let n = w.shape(1);
    // Row stride in vectors (the launch checked it divides).
    let stride_k = w.stride(0) / n_vec;
    let unit = UNIT_POS as usize;
    let group = unit % CHAIN_COLS;
    let slice = unit / CHAIN_COLS;
    let vectors = n / n_vec;
    let passes = vectors.div_ceil(CHAIN_COLS);
    let mut acc = Array::<Vector<f32, N>>::new(rows);
    let mut loaded = Array::<Vector<F, N>>::new(CHAIN_UNROLL);

    for pass in 0..passes {
        let col_vec = pass * CHAIN_COLS + group;
        #[unroll]
        for r in 0..rows {
            acc[r] = Vector::<f32, N>::new(0.0f32);
        }
        if col_vec < vectors {
            let mut kk = slice;
            while kk + slices * (CHAIN_UNROLL - 1) < k {
                #[unroll]
                for j in 0..CHAIN_UNROLL {
                    loaded[j] = w[(kk + j * slices) * stride_k + col_vec];
                }
                #[unroll]
                for j in 0..CHAIN_UNROLL {
                    let weights = Vector::<f32, N>::cast_from(loaded[j]);
                    #[unroll]
                    for r in 0..rows {
                        let h = f32::cast_from(src[r * width + kk + j * slices]);
                        acc[r] += weights * Vector::<f32, N>::new(h);
                    }
                }
                kk += slices * CHAIN_UNROLL;
            }
            while kk < k {
                let weights = Vector::<f32, N>::cast_from(w[kk * stride_k + col_vec]);
                #[unroll]
                for r in 0..rows {
                    let h = f32::cast_from(src[r * width + kk]);
                    acc[r] += weights * Vector::<f32, N>::new(h);
                }
                kk += slices;
            }
        }
        #[unroll]
        for r in 0..rows {
            let base = ((slice * rows + r) * CHAIN_COLS + group) * n_vec;
            let v = acc[r];
            #[unroll]
            for i in 0..n_vec {
                partial[base + i] = v[i];
            }
        }
        sync_cube();

        // One unit per (row, column vector) of the pass sums the slices' partials.
        let mut pair = unit;
        while pair < rows * CHAIN_COLS {
            let r = pair / CHAIN_COLS;
            let g = pair % CHAIN_COLS;
            let col_vec = pass * CHAIN_COLS + g;
            if col_vec < vectors {
                let mut bias_vec = Vector::<f32, N>::new(0.0f32);
                if comptime![has_bias] {
                    bias_vec = Vector::<f32, N>::cast_from(b[col_vec]);
                }
                #[unroll]
                for i in 0..n_vec {
                    let mut value = 0.0f32;
                    #[unroll]
                    for s in 0..slices {
                        value += partial[((s * rows + r) * CHAIN_COLS + g) * n_vec + i];
                    }
                    if comptime![has_bias] {
                        value += bias_vec[i];
                    }
                    value = activate(value, 0.0f32, 0.0f32, activation);
                    let col = col_vec * n_vec + i;
                    if comptime![last] {
                        let row = row_base + r;
                        if row < m {
                            out[row * out.stride(0) + col] = F::cast_from(value);
                        }
                    } else {
                        dst[r * width + col] = F::cast_from(value);
                    }
                }
            }
            pair += units;
        }
        sync_cube();
    }
}

/// What one layer of a chain reads: its weight `[.., k, n]` (leading dims 1), its bias (a row
/// of `n`) and its epilogue.
#[derive(Clone, Debug)]
pub struct ChainLayer<'a, R: Runtime> {
    /// The weight.
    pub w: OperandRef<'a, R>,
    /// The bias.
    pub bias: Option<OperandRef<'a, R>>,
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
    /// Rows per cube: a power of two covering `m` where it fits, at most [`MAX_CHAIN_ROWS`].
    pub rows: usize,
    /// Units per cube.
    pub units: usize,
    /// Whether it runs on the grid-wide kernel (module `grid`, CUDA only): every layer over
    /// the whole GPU instead of one cube per block of rows.
    pub grid: bool,
}

/// What a device allows one chain launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainLimits {
    /// Most units per cube the kernel uses: 512 on GPUs (at 1024 the compiler has 32 registers
    /// a unit and spills the loads in flight: ncu on the H100), 256 elsewhere.
    pub units: usize,
    /// Shared memory bytes a cube may use.
    pub shared_bytes: usize,
    /// Widest vector load (elements).
    pub max_vector: usize,
    /// Whether the device runs the grid-wide chain kernel (CUDA only).
    pub grid: bool,
}

impl ChainLimits {
    /// 256 units and 32 KiB: what every device Hypatia runs on allows.
    pub const PORTABLE: Self = Self {
        units: 256,
        shared_bytes: 32 * 1024,
        max_vector: 4,
        grid: false,
    };

    /// The limits of `client`'s device.
    pub fn of<R: Runtime>(client: &ComputeClient<R>) -> Self {
        let hardware = &client.properties().hardware;
        let gpu = hardware.num_streaming_multiprocessors.is_some();
        let units = if gpu && hardware.max_units_per_cube >= 512 && hardware.max_cube_dim.0 >= 512 {
            512
        } else {
            256
        };
        Self {
            units,
            shared_bytes: hardware.max_shared_memory_size.min(MAX_CHAIN_SHARED),
            max_vector: hardware.max_vector_size.max(1),
            grid: Self::grid_kernel(client),
        }
    }
}

impl ChainLimits {
    #[cfg(feature = "cuda")]
    fn grid_kernel<R: Runtime>(client: &ComputeClient<R>) -> bool {
        grid::supported(client)
    }

    #[cfg(not(feature = "cuda"))]
    fn grid_kernel<R: Runtime>(_client: &ComputeClient<R>) -> bool {
        false
    }
}

impl ChainProblem {
    /// Cubes of one launch.
    pub fn cubes(&self) -> usize {
        self.m.div_ceil(self.rows)
    }

    /// Row length of the shared buffers.
    pub fn width(&self) -> usize {
        let inputs = &self.widths[..self.widths.len() - 1];
        inputs
            .iter()
            .max()
            .map_or(0, |w| w.next_multiple_of(CHAIN_COLS))
    }

    /// Shared memory bytes of a launch with `rows` rows per cube and `units` units.
    fn shared_bytes(&self, rows: usize, units: usize, vector: usize) -> usize {
        let hidden = 2 * rows * self.width() * self.dtype.size();
        let partial = units * rows * vector * 4;
        hidden + partial
    }

    /// The widest vector (elements) the launch may read weights with: 16 bytes, within the
    /// device's limit.
    fn max_vector(&self, limits: ChainLimits) -> usize {
        (16 / self.dtype.size()).min(limits.max_vector).max(1)
    }
}

/// One layer as [`check_chain`] sees it: weight shape, bias shape, element type, epilogue.
pub type LayerShape<'a> = (&'a [usize], Option<&'a [usize]>, DType, Epilogue);

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
    layers: &[LayerShape<'_>],
    limits: ChainLimits,
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
    let mut problem = ChainProblem {
        m,
        widths,
        out_shape,
        dtype,
        rows: 1,
        units: limits.units,
        grid: limits.grid,
    };
    // The most rows per cube, then the most units, that fit in shared memory.
    let most = m.next_power_of_two().min(MAX_CHAIN_ROWS);
    let vector = problem.max_vector(limits);
    let fits = [4, 2, 1]
        .into_iter()
        .filter(|&rows| rows <= most)
        .flat_map(|rows| [512, 256].map(|units| (rows, units)))
        .filter(|&(_, units)| units <= limits.units)
        .find(|&(rows, units)| problem.shared_bytes(rows, units, vector) <= limits.shared_bytes);
    (problem.rows, problem.units) = fits.ok_or_else(|| outside("shared memory"))?;
    Ok(problem)
}

/// The widest vector (at most `most` elements) that reads `layers` along `n`: it divides every
/// `n` and row stride, the weights and biases are contiguous along `n`, and every buffer starts
/// on a multiple of the vector's bytes.
fn vector_for<R: Runtime>(layers: &[ChainLayer<'_, R>], most: usize, size: usize) -> usize {
    let aligned = |operand: OperandRef<'_, R>, bytes: usize| {
        (operand.handle.handle.offset_start.unwrap_or(0) as usize).is_multiple_of(bytes)
    };
    let fits = |v: usize| {
        layers.iter().all(|layer| {
            let strides = &layer.w.handle.strides;
            let r = strides.len();
            let n = layer.w.shape[layer.w.shape.len() - 1];
            let bias_ok = layer.bias.is_none_or(|b| {
                b.handle.strides.last().is_none_or(|&s| s == 1) && aligned(b, v * size)
            });
            n % v == 0
                && strides[r - 1] == 1
                && strides[r - 2] % v == 0
                && aligned(layer.w, v * size)
                && bias_ok
        })
    };
    [8, 4, 2, 1]
        .into_iter()
        .find(|&v| v <= most && fits(v))
        .unwrap_or(1)
}

/// The distance between the rows of `x` ([`check_chain`] accepted its layout): the stride of
/// the innermost leading dim that is not 1.
fn row_stride<R: Runtime>(x: OperandRef<'_, R>) -> usize {
    let rank = x.shape.len();
    (0..rank - 1)
        .rev()
        .find(|&i| x.shape[i] != 1)
        .map_or(0, |i| x.handle.strides[i])
}

/// Runs a chain that [`check_chain`] accepted with `limits` into a new contiguous output.
pub fn launch_mlp_chain<R: Runtime>(
    problem: &ChainProblem,
    limits: ChainLimits,
    x: OperandRef<'_, R>,
    layers: &[ChainLayer<'_, R>],
) -> LinearOutputs<R> {
    #[cfg(feature = "cuda")]
    if problem.grid {
        match grid::launch(problem, x, layers) {
            Ok(outputs) => return outputs,
            Err(reason) => {
                log::warn!("hypatia: grid-wide chain not run ({reason}): one cube per row block")
            }
        }
    }
    let out = alloc(x.handle, &problem.out_shape, problem.dtype);
    let client = x.handle.client.clone();
    let n_last = *problem.widths.last().expect("a chain has layers");
    let size = problem.dtype.size();
    let most = problem.max_vector(limits);
    let (hidden, last) = layers.split_at(layers.len() - 1);
    let vector_hidden = if hidden.is_empty() {
        1
    } else {
        vector_for(hidden, most, size)
    };
    let vector_last = vector_for(last, most, size);

    let view = |handle: &burn_cubecl_fusion::CubeFusionHandle<R>,
                shape: [usize; 2],
                strides: [usize; 2]| {
        let mut handle = handle.clone();
        handle.strides = Strides::new(&strides);
        handle.into_tensor_arg(Shape::from(shape.to_vec()))
    };
    let x_strides = &x.handle.strides;
    let rank = x.shape.len();
    let row_stride = row_stride(x);
    let x_arg = view(
        x.handle,
        [problem.m, problem.widths[0]],
        [row_stride, x_strides[rank - 1]],
    );
    let dummy = || alloc(x.handle, &[8], problem.dtype).into_tensor_arg(Shape::from(vec![8]));
    let mut flags = ChainFlags {
        layers: layers.len() as u32,
        bias: [false; MAX_CHAIN_LAYERS],
        activation: [Activation::None; MAX_CHAIN_LAYERS],
        width: problem.width() as u32,
        rows: problem.rows as u32,
        units: problem.units as u32,
        vector: vector_hidden.max(vector_last) as u32,
    };
    let mut args: Vec<(TensorArg<R>, TensorArg<R>)> = Vec::new();
    for (i, layer) in layers.iter().enumerate() {
        let (k, n) = (problem.widths[i], problem.widths[i + 1]);
        let s = &layer.w.handle.strides;
        let r = s.len();
        let w = view(layer.w.handle, [k, n], [s[r - 2], s[r - 1]]);
        let b = match layer.bias {
            Some(bias) => view(bias.handle, [n, 1], [1, 1]),
            None => dummy(),
        };
        flags.bias[i] = layer.bias.is_some();
        flags.activation[i] = layer.epilogue.activation();
        args.push((w, b));
    }
    let (wl, bl) = args.pop().expect("a chain has layers");
    while args.len() < MAX_CHAIN_LAYERS - 1 {
        args.push((dummy(), dummy()));
    }
    let mut args = args.into_iter();
    let mut next = || args.next().expect("padded");
    let ((w0, b0), (w1, b1), (w2, b2)) = (next(), next(), next());
    let out_arg = view(&out, [problem.m, n_last], [n_last, 1]);
    mlp_chain_kernel::launch::<R>(
        &client,
        CubeCount::Static(problem.cubes() as u32, 1, 1),
        CubeDim::new_1d(problem.units as u32),
        vector_hidden,
        vector_last,
        x_arg,
        w0,
        b0,
        w1,
        b1,
        w2,
        b2,
        wl,
        bl,
        out_arg,
        flags,
        problem.dtype.into(),
    );
    LinearOutputs {
        out,
        pre: None,
        bias_grad: None,
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
    fn grid_items_take_tensor_cores_from_five_half_rows() {
        let fma = |rows, columns| GridItem {
            rows,
            columns,
            mma: false,
        };
        let mma = |rows| GridItem {
            rows,
            columns: 8,
            mma: true,
        };
        assert_eq!(grid_item(1, DType::BF16, true), fma(1, 8));
        assert_eq!(grid_item(4, DType::F16, true), fma(4, 8));
        assert_eq!(grid_item(5, DType::F16, true), mma(16));
        assert_eq!(grid_item(8, DType::BF16, true), mma(16));
        assert_eq!(grid_item(32, DType::F16, true), mma(16));
        assert_eq!(grid_item(33, DType::BF16, true), mma(32));
        // f32 keeps its FMA items (tensor cores would round it to tf32), and so does a
        // device without the product.
        assert_eq!(grid_item(32, DType::F32, true), fma(8, 4));
        assert_eq!(grid_item(32, DType::BF16, false), fma(8, 8));
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
            ChainLimits::PORTABLE,
        )
        .unwrap();
        assert_eq!(problem.m, 6);
        assert_eq!(problem.out_shape, vec![2, 3, 10]);
        assert_eq!(problem.widths, vec![784, 512, 512, 10]);
        // 4 rows of 832 f32 twice (26 KiB) and 4 × 256 × 4 partials would be 42 KiB: two rows.
        assert_eq!(
            (problem.rows, problem.cubes(), problem.width()),
            (2, 3, 832)
        );
        // 4 rows of 1024 f32 twice (32 KiB) leave 16 KiB of partials: 256 units of 4 rows of
        // 4-wide vectors, not 512.
        let limits = ChainLimits {
            units: 512,
            shared_bytes: MAX_CHAIN_SHARED,
            max_vector: 4,
            grid: false,
        };
        let x = (&[6, 1024][..], &[1024, 1][..], DType::F32);
        let wide = check_chain(x, &[layer(&[1024, 1024], true)], limits).unwrap();
        assert_eq!((wide.rows, wide.units, wide.cubes()), (4, 256, 2));
        let x = (&[1, 1024][..], &[1024, 1][..], DType::F32);
        let one = check_chain(x, &[layer(&[1024, 1024], true)], limits).unwrap();
        assert_eq!((one.rows, one.units), (1, 512));
    }

    #[test]
    fn refuses_what_only_the_per_layer_kernels_run() {
        let too_wide = check_chain(
            (&[1, 2048], &[2048, 1], DType::F32),
            &[layer(&[2048, 8], true)],
            ChainLimits::PORTABLE,
        );
        assert_eq!(too_wide.unwrap_err().key(), "outside-chain-bounds");
        let too_tall = check_chain(
            (&[65, 8], &[8, 1], DType::F32),
            &[layer(&[8, 8], true)],
            ChainLimits::PORTABLE,
        );
        assert_eq!(too_tall.unwrap_err().key(), "outside-chain-bounds");
        let mismatch = check_chain(
            (&[1, 8], &[8, 1], DType::F32),
            &[layer(&[8, 4], true), layer(&[5, 4], true)],
            ChainLimits::PORTABLE,
        );
        assert_eq!(mismatch.unwrap_err().key(), "incompatible-shapes");
        let gelu = check_chain(
            (&[1, 8], &[8, 1], DType::F32),
            &[(&[8, 4], None, DType::F32, Epilogue::Gelu)],
            ChainLimits::PORTABLE,
        );
        assert_eq!(gelu.unwrap_err().key(), "outside-chain-bounds");
    }
}
