//! The portable MLP-chain kernel (CubeCL): one cube per block of rows runs every layer.

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
