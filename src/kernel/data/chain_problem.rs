//! An MLP chain as data: its layers, its limits on a device, and the check that sizes one
//! launch ([`check_chain`]); also the grid-wide kernel's work item, which the cost model
//! predicts on every build.

use super::{Epilogue, KernelError, OperandRef};
use burn_backend::DType;
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
/// on sm_80 or later). Measured on an H100 (784→512→512→10 bf16, decision record 0005): from 6 rows on they win (11.2 µs against 11.6 at 6
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
    pub(crate) fn shared_bytes(&self, rows: usize, units: usize, vector: usize) -> usize {
        let hidden = 2 * rows * self.width() * self.dtype.size();
        let partial = units * rows * vector * 4;
        hidden + partial
    }

    /// The widest vector (elements) the launch may read weights with: 16 bytes, within the
    /// device's limit.
    pub(crate) fn max_vector(&self, limits: ChainLimits) -> usize {
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
