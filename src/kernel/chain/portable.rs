//! The portable MLP-chain kernel (CubeCL): one cube per block of rows runs every layer.

use crate::kernel::cube_epilogue::round;
use crate::kernel::{Activation, CHAIN_COLS, CHAIN_UNROLL, MAX_CHAIN_LAYERS, activate};
use cubecl::prelude::*;

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

    let mut ha = SharedMemory::<F>::new(rows * width);
    let mut hb = SharedMemory::<F>::new(rows * width);
    let mut sums = SharedMemory::<f32>::new(units * rows * vector);

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
        ha[r * width + k] = value;
        index += units;
    }
    sync_cube();

    let at = RowBlock { base: row_base, m };
    let layers = comptime![flags.layers];
    if comptime![layers > 1] {
        chain_layer::<F, NH>(&ha, &mut hb, &mut sums, w0, b0, out, at, flags, 0usize);
    }
    if comptime![layers > 2] {
        chain_layer::<F, NH>(&hb, &mut ha, &mut sums, w1, b1, out, at, flags, 1usize);
    }
    if comptime![layers > 3] {
        chain_layer::<F, NH>(&ha, &mut hb, &mut sums, w2, b2, out, at, flags, 2usize);
    }
    // The last layer reads the buffer the layer before it wrote.
    let last = comptime![layers as usize - 1];
    if comptime![last % 2 == 0] {
        chain_layer::<F, NL>(&ha, &mut hb, &mut sums, wl, bl, out, at, flags, last);
    } else {
        chain_layer::<F, NL>(&hb, &mut ha, &mut sums, wl, bl, out, at, flags, last);
    }
}

/// The rows of one cube: the first, and the problem's `m` (rows past it are padding).
#[derive(CubeType, Clone, Copy)]
struct RowBlock {
    base: usize,
    m: usize,
}

/// Layer `layer` of `flags`: `src` (rows × k) times `w`, its bias and activation, into `dst`
/// (the next layer's input) or, for the last layer, into `out` (rows from `at.base`, below
/// `at.m`). Unit `g + CHAIN_COLS·s` owns the column vector `g` of each pass and the `k` slice
/// `s`; it keeps [`CHAIN_UNROLL`] vector loads in flight. Ends with the cube synchronised.
#[cube]
#[allow(clippy::too_many_arguments)]
fn chain_layer<F: Float, N: Size>(
    src: &SharedMemory<F>,
    dst: &mut SharedMemory<F>,
    sums: &mut SharedMemory<f32>,
    w: &Tensor<Vector<F, N>>,
    b: &Tensor<Vector<F, N>>,
    out: &mut Tensor<F>,
    at: RowBlock,
    #[comptime] flags: ChainFlags,
    #[comptime] layer: usize,
) {
    let rows = comptime![flags.rows as usize];
    let width = comptime![flags.width as usize];
    let units = comptime![flags.units as usize];
    let has_bias = comptime![flags.bias[layer]];
    let activation = comptime![flags.activation[layer]];
    let last = comptime![layer + 1 == flags.layers as usize];
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
                sums[base + i] = v[i];
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
                        value += sums[((s * rows + r) * CHAIN_COLS + g) * n_vec + i];
                    }
                    if comptime![has_bias] {
                        // Burn adds the bias to the product stored in `F` (decision record
                        // 0027).
                        value = round::<F>(value) + bias_vec[i];
                    }
                    value = activate(value, 0.0f32, 0.0f32, activation);
                    let col = col_vec * n_vec + i;
                    if comptime![last] {
                        let row = at.base + r;
                        if row < at.m {
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
