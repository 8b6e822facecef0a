//! Column sums over rows: the bias gradient `db = Σ_rows dpre` of a ReLU backward.
//!
//! A fused kernel that produces the bias gradient writes, from its epilogue, one partial row of
//! f32 column sums per block of output rows it owns (the tiled kernel 4 rows per unit, the
//! Hopper kernel 16 rows per warp). [`sum_rows`] then adds those partial rows up. An engine
//! candidate without such an epilogue (Burn's matmul then Hypatia's epilogue kernel) hands its
//! output to [`sum_rows`] instead: one more pass over the output, as Burn's `sum_dim` makes.

use crate::kernel::alloc;
use burn_backend::DType;
use burn_cubecl_fusion::CubeFusionHandle;
use cubecl::prelude::*;

/// Columns per cube of [`column_sum_kernel`].
const COLUMNS: usize = 32;
/// Units per column: each sums every `LANES`-th row of its chunk.
const LANES: usize = 8;
/// Rows one cube sums while more than [`FINAL_ROWS`] are left: a pass writes one partial row
/// per chunk. Short chunks keep many cubes in flight and each unit's loop short: with one
/// final pass over up to 1024 rows, the Hopper kernel's 512 partial rows of a 8192 × 4096
/// output took 28-31 µs (128 cubes, 64 dependent loads per unit; H100, CubeCL's profiler).
const CHUNK: usize = 64;
/// Most rows the last pass sums in one chunk.
const FINAL_ROWS: usize = 64;

/// `out[c, col] = Σ input[r, col]` over the rows `r` of chunk `c` (`chunk` rows each, the last
/// one cut at `rows`), for `input` `[rows, n]` row-major. Sums in f32.
#[cube(launch)]
pub fn column_sum_kernel<I: Float, O: Float>(
    input: &Tensor<I>,
    out: &mut Tensor<O>,
    rows: usize,
    n: usize,
    chunk: usize,
    #[define(I, O)] _dtypes: [StorageType; 2],
) {
    let x = UNIT_POS_X as usize;
    let lane = UNIT_POS_Y as usize;
    let col = CUBE_POS_X as usize * COLUMNS + x;
    let first = CUBE_POS_Y as usize * chunk;
    let last = min(first + chunk, rows);
    let mut sum = 0.0f32;
    if col < n {
        for row in range_stepped(first + lane, last, LANES) {
            sum += f32::cast_from(input[row * n + col]);
        }
    }
    let mut lanes = SharedMemory::<f32>::new(COLUMNS * LANES);
    lanes[lane * COLUMNS + x] = sum;
    sync_cube();
    if lane == 0 && col < n {
        let mut total = 0.0f32;
        #[unroll]
        for l in 0..LANES {
            total += lanes[l * COLUMNS + x];
        }
        out[CUBE_POS_Y as usize * n + col] = O::cast_from(total);
    }
}

/// Writes `Σ_rows input` into `out` (`n` contiguous elements of any float dtype), for `input`
/// `[rows, n]` contiguous: f32 partial rows, or an output itself.
pub fn sum_rows<R: Runtime>(
    input: &CubeFusionHandle<R>,
    rows: usize,
    n: usize,
    out: &CubeFusionHandle<R>,
) {
    let mut input = input.clone();
    let mut rows = rows;
    while rows > FINAL_ROWS {
        let chunks = rows.div_ceil(CHUNK);
        let partial = alloc(&input, &[chunks, n], DType::F32);
        launch_sum(&input, &partial, rows, n, CHUNK, chunks);
        input = partial;
        rows = chunks;
    }
    launch_sum(&input, out, rows, n, rows.max(1), 1);
}

fn launch_sum<R: Runtime>(
    input: &CubeFusionHandle<R>,
    out: &CubeFusionHandle<R>,
    rows: usize,
    n: usize,
    chunk: usize,
    chunks: usize,
) {
    let flat = |handle: &CubeFusionHandle<R>, len: usize| {
        let mut handle = handle.clone();
        handle.strides = burn_std::Strides::new(&[1]);
        handle.into_tensor_arg(burn_backend::Shape::from(vec![len]))
    };
    column_sum_kernel::launch::<R>(
        &input.client,
        CubeCount::Static(n.div_ceil(COLUMNS) as u32, chunks as u32, 1),
        CubeDim::new_2d(COLUMNS as u32, LANES as u32),
        flat(input, rows * n),
        flat(out, chunks * n),
        rows,
        n,
        chunk,
        [input.dtype.into(), out.dtype.into()],
    );
}

/// Writes `Σ_rows out` (`out` contiguous of `shape`) into `bias_grad`: a second pass, for the
/// executions whose epilogue does not sum (see [`sum_rows`]).
pub fn sum_output_rows<R: Runtime>(
    out: &CubeFusionHandle<R>,
    shape: &[usize],
    bias_grad: &CubeFusionHandle<R>,
) {
    let n = *shape.last().unwrap_or(&1);
    let rows = shape.iter().product::<usize>() / n.max(1);
    sum_rows(out, rows, n, bias_grad);
}
