//! The tiled matmul kernel without tensor cores (the path lavapipe and every GPU can run).
//!
//! Why a kernel of our own rather than a `MatmulArgs` over cubek-matmul: the epilogue must
//! write two outputs (the activation, and the pre-activation when autodiff keeps it), read the
//! bias through its own strides, and keep NaN; cubek's single `view_out` hook would need a
//! custom output view for the second tensor. This kernel is also the unit-only fallback that
//! lavapipe needs. Measured on an H100 (decision record 0007) it is faster than
//! Burn's whole Linear+ReLU path only where launches dominate (256×256×512: 1.40x f32, 1.07x f16)
//! and 2.5–12x slower than Burn's tensor-core matmul beyond; [`choose_execution`](crate::execute::choose_execution) therefore
//! splits large problems on such devices.
//!
//! ```text
//!            TILE_N = 64 columns
//!        +----+----+ .. +----+        one cube: 16 x 16 units, each owns a
//!  TILE_M| u00| u01|    | u0F|        UNIT_M x UNIT_N = 4 x 4 block of the
//!   = 64 +----+----+ .. +----+        64 x 64 output tile; lhs [64 x 16] and
//!        | .. |    |    |    |        rhs [16 x 64] K-slices are staged in
//!        +----+----+ .. +----+        shared memory as f32.
//! ```

use super::{KernelDType, StageTile, stage_tile};
use crate::kernel::{EpilogueFlags, TILE_M, TILE_N, store_epilogue};
use cubecl::prelude::*;

/// Depth of one staged K-slice.
pub const TILE_K: usize = 16;
/// Rows per unit.
pub const UNIT_M: usize = 4;
/// Columns per unit.
pub const UNIT_N: usize = 4;
/// Units along x (columns) and y (rows).
pub const CUBE_SIDE: usize = 16;

/// `out = epilogue(lhs · rhs + bias)`, and `pre = lhs · rhs + bias` when `write_pre`.
///
/// The operands and outputs have the output's rank; broadcast batch dims have stride 0. `bias`
/// is a rank-1 view of length `n`, `gate` (of type `G`: `F`, or a bool's storage integer),
/// `mask` and `aux` the `[rows, n]` views [`store_epilogue()`] reads; absent
/// tensors (per `flags`) are dummies. Accumulates in f32 whatever the storage type. With
/// `flags.row_sums`, each unit writes the column sums of its [`UNIT_M`] stored rows to
/// `row_sums`, a row-major `[batch · m_tiles · CUBE_SIDE, n]` buffer of partial rows (see
/// [`sum_rows`](crate::kernel::sum_rows)).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub fn fused_linear_kernel<F: Float, G: Numeric>(
    lhs: &Tensor<F>,
    rhs: &Tensor<F>,
    bias: &Tensor<F>,
    gate: &Tensor<G>,
    mask: &Tensor<F>,
    aux: &Tensor<F>,
    out: &mut Tensor<F>,
    pre: &mut Tensor<F>,
    row_sums: &mut Tensor<f32>,
    alpha: f32,
    beta: f32,
    #[comptime] flags: EpilogueFlags,
    #[define(F, G)] _dtypes: [KernelDType; 2],
) {
    let rank = out.rank();
    let m = out.shape(rank - 2);
    let n = out.shape(rank - 1);
    let k = lhs.shape(rank - 1);

    // Batch offsets: decompose the cube's z index over the output's batch dims.
    let mut batch = CUBE_POS_Z as usize;
    let mut lhs_offset = 0usize;
    let mut rhs_offset = 0usize;
    let mut out_offset = 0usize;
    for i in 0..rank - 2 {
        let dim = rank - 3 - i;
        let coord = batch % out.shape(dim);
        batch /= out.shape(dim);
        lhs_offset += coord * lhs.stride(dim);
        rhs_offset += coord * rhs.stride(dim);
        out_offset += coord * out.stride(dim);
    }

    let lhs_view = View::new(lhs_offset, lhs.stride(rank - 2), lhs.stride(rank - 1), m, k);
    let rhs_view = View::new(rhs_offset, rhs.stride(rank - 2), rhs.stride(rank - 1), k, n);

    let unit_x = UNIT_POS_X as usize;
    let unit_y = UNIT_POS_Y as usize;
    let unit = unit_y * CUBE_SIDE + unit_x;
    let row_base = CUBE_POS_Y as usize * TILE_M;
    let col_base = CUBE_POS_X as usize * TILE_N;

    let mut tile_lhs = stage_tile(TILE_M * TILE_K);
    let mut tile_rhs = stage_tile(TILE_K * TILE_N);
    let mut acc = Array::<f32>::new(UNIT_M * UNIT_N);
    #[unroll]
    for i in 0..UNIT_M * UNIT_N {
        acc[i] = 0.0f32;
    }
    let mut lhs_regs = Array::<f32>::new(UNIT_M);
    let mut rhs_regs = Array::<f32>::new(UNIT_N);

    let num_k_tiles = k.div_ceil(TILE_K);
    for k_tile in 0..num_k_tiles {
        let k_base = k_tile * TILE_K;
        // 256 units stage 1024 values of each operand: 4 each, zero-padded at the edges.
        #[unroll]
        for i in 0..(TILE_M * TILE_K) / (CUBE_SIDE * CUBE_SIDE) {
            let index = unit + i * CUBE_SIDE * CUBE_SIDE;

            stage::<F>(
                lhs,
                &lhs_view,
                row_base,
                k_base,
                &mut tile_lhs,
                index,
                TILE_K,
            );
            stage::<F>(
                rhs,
                &rhs_view,
                k_base,
                col_base,
                &mut tile_rhs,
                index,
                TILE_N,
            );
        }
        sync_cube();

        #[unroll]
        for kk in 0..TILE_K {
            #[unroll]
            for i in 0..UNIT_M {
                lhs_regs[i] = tile_lhs[(unit_y * UNIT_M + i) * TILE_K + kk];
            }
            #[unroll]
            for j in 0..UNIT_N {
                rhs_regs[j] = tile_rhs[kk * TILE_N + unit_x * UNIT_N + j];
            }
            #[unroll]
            for i in 0..UNIT_M {
                #[unroll]
                for j in 0..UNIT_N {
                    acc[i * UNIT_N + j] += lhs_regs[i] * rhs_regs[j];
                }
            }
        }
        sync_cube();
    }

    let out_stride_m = out.stride(rank - 2);
    let out_stride_n = out.stride(rank - 1);
    // Reuses the rhs registers: the column sums of this unit's rows.
    #[unroll]
    for j in 0..UNIT_N {
        rhs_regs[j] = 0.0f32;
    }
    #[unroll]
    for i in 0..UNIT_M {
        let row = row_base + unit_y * UNIT_M + i;
        #[unroll]
        for j in 0..UNIT_N {
            let col = col_base + unit_x * UNIT_N + j;
            if row < m && col < n {
                let offset = out_offset + row * out_stride_m + col * out_stride_n;
                rhs_regs[j] += store_epilogue::<F, G>(
                    acc[i * UNIT_N + j],
                    col,
                    offset,
                    bias,
                    gate,
                    mask,
                    aux,
                    out,
                    pre,
                    alpha,
                    beta,
                    flags,
                );
            }
        }
    }
    if flags.row_sums {
        let block = (CUBE_POS_Z * CUBE_COUNT_Y + CUBE_POS_Y) as usize * CUBE_SIDE + unit_y;
        #[unroll]
        for j in 0..UNIT_N {
            let col = col_base + unit_x * UNIT_N + j;
            if col < n {
                row_sums[block * n + col] = rhs_regs[j];
            }
        }
    }
}

/// Where a matrix of an operand lies: its first element, its strides, its bounds.
#[derive(CubeType, Clone, Copy)]
struct View {
    offset: usize,
    stride_row: usize,
    stride_col: usize,
    rows: usize,
    cols: usize,
}

#[cube]
impl View {
    fn new(offset: usize, stride_row: usize, stride_col: usize, rows: usize, cols: usize) -> View {
        View {
            offset,
            stride_row,
            stride_col,
            rows,
            cols,
        }
    }
}

/// Stages element `index` of a `cols`-wide tile in shared memory, as f32: the tile's
/// `[row, col]` is `src`'s `[row0 + row, col0 + col]` in `view`, zero past its bounds.
#[cube]
fn stage<F: Float>(
    src: &Tensor<F>,
    view: &View,
    row0: usize,
    col0: usize,
    tile: &mut StageTile,
    index: usize,
    #[comptime] cols: usize,
) {
    let row = index / cols;
    let col = index % cols;
    let global_row = row0 + row;
    let global_col = col0 + col;
    let mut value = 0.0f32;
    if global_row < view.rows && global_col < view.cols {
        value = f32::cast_from(
            src[view.offset + global_row * view.stride_row + global_col * view.stride_col],
        );
    }
    tile[row * cols + col] = value;
}
