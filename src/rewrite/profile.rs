//! [`Profile`]: what a device's kernels cost, measured, and the predictions made from it.
//!
//! A roofline with launch costs: a launch costs its host and launch time, plus the larger of
//! its FLOPs over the measured throughput and its bytes over the measured bandwidth. The
//! portable MLP-chain kernel is modelled per cube (one cube streams every weight for its
//! rows), since it runs few cubes; CUDA's grid-wide chain kernel by waves of work items per
//! layer ([`GridCost`]). The numbers come from `examples/calibrate.rs` on the device; a
//! profile is plain data (serde), loaded from the file the configuration's `profile` key
//! names (`HYPATIA_PROFILE=<file.json>`) or chosen by device kind.
//!
//! ```
//! use hypatia::kernel::{ChainLimits, ChainProblem, Epilogue, check_chain};
//! use hypatia::rewrite::Profile;
//! use burn_backend::DType;
//! let profile = Profile::hopper();
//! let mlp = |m: usize, widths: &'static [[usize; 2]]| {
//!     let layers: Vec<_> =
//!         widths.iter().map(|w| (&w[..], None, DType::BF16, Epilogue::Relu)).collect();
//!     let x = [m, widths[0][0]];
//!     check_chain((&x, &[x[1], 1], DType::BF16), &layers, ChainLimits::PORTABLE).unwrap()
//! };
//! // Four narrow layers at batch 1: one launch beats four.
//! let narrow = mlp(1, &[[64, 64]; 4]);
//! assert!(profile.chain_time(&narrow) < profile.layers_time(&narrow));
//! // 784→512→512→10: one cube streaming 1.3 MB loses to three launches on all 132 SMs.
//! let mnist = mlp(1, &[[784, 512], [512, 512], [512, 10]]);
//! assert!(profile.chain_time(&mnist) > profile.layers_time(&mnist));
//! // CUDA's grid-wide kernel spreads each layer over every SM: there one launch wins.
//! let grid = ChainProblem { grid: true, ..mnist };
//! assert!(profile.chain_time(&grid) < profile.layers_time(&grid));
//! ```

use crate::kernel::{ChainProblem, grid_item};
use burn_backend::DType;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Measured costs of one device (times in microseconds, rates per microsecond).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Where the numbers come from (device and date).
    pub name: String,
    /// Host and launch time of one fused layer step (the engine's or the tiled kernel's
    /// launch path, plus Hypatia's per-step checks).
    pub step_us: f64,
    /// Host and launch time of one MLP-chain launch.
    pub chain_launch_us: f64,
    /// Matrix throughput of the per-layer kernels, MFLOP per µs, for 16-bit floats.
    pub half_mflop_per_us: f64,
    /// The same for f32.
    pub f32_mflop_per_us: f64,
    /// Device memory bandwidth, bytes per µs.
    pub bytes_per_us: f64,
    /// Weight bytes one chain cube streams per µs.
    pub chain_cube_bytes_per_us: f64,
    /// FLOPs one chain cube does per µs (plain f32 units).
    pub chain_cube_mflop_per_us: f64,
    /// Cubes that run at once (streaming multiprocessors).
    pub parallel_cubes: usize,
    /// The grid-wide chain kernel's costs, where it runs (CUDA).
    #[serde(default)]
    pub grid: Option<GridCost>,
}

/// What the grid-wide MLP-chain kernel (CUDA) costs: each layer's work items (up to 8 rows ×
/// one 16-byte vector of columns) run [`Profile::parallel_cubes`] at a time, and each such
/// wave ends when the next layer may start or the next wave.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GridCost {
    /// Host and launch time of one launch, µs.
    pub launch_us: f64,
    /// Time of one wave of a layer's work items (loads, reduction, waiting for the layer), µs.
    pub wave_us: f64,
}

impl Profile {
    /// NVIDIA H100 80GB HBM3 (132 SMs): `examples/calibrate.rs` through the device tool,
    /// rounded (decision record 0005).
    pub fn hopper() -> Self {
        Self {
            name: "nvidia-h100 (calibrate, 2026-11-24)".into(),
            step_us: 42.0,
            chain_launch_us: 96.0,
            half_mflop_per_us: 638.0,
            f32_mflop_per_us: 54.0,
            bytes_per_us: 1_690_000.0,
            chain_cube_bytes_per_us: 26_700.0,
            chain_cube_mflop_per_us: 0.072,
            parallel_cubes: 132,
            // The grid-wide chain kernel, calibrated on an H100 (decision record 0005).
            grid: Some(GridCost {
                launch_us: 80.0,
                wave_us: 2.6,
            }),
        }
    }

    /// A CPU through lavapipe: `cargo run --release --example calibrate -- --dtype f32` on this
    /// project's 2-core build machine, rounded (16-bit floats do not run there).
    pub fn lavapipe() -> Self {
        Self {
            name: "lavapipe, 2 cores (calibrate, 2026-11-24)".into(),
            step_us: 1815.0,
            chain_launch_us: 2415.0,
            half_mflop_per_us: 0.0022,
            f32_mflop_per_us: 0.0022,
            bytes_per_us: 765.0,
            chain_cube_bytes_per_us: 356.0,
            chain_cube_mflop_per_us: 0.00026,
            parallel_cubes: 2,
            grid: None,
        }
    }

    /// The profile in force for a device with (`matrix_units`) or without tensor cores: `file`
    /// (the configuration's `profile` key) if it reads (each file read once), else the
    /// built-in one.
    pub fn for_device(matrix_units: bool, file: Option<&Path>) -> &'static Profile {
        type Files = Mutex<HashMap<PathBuf, Option<&'static Profile>>>;
        static FILES: OnceLock<Files> = OnceLock::new();
        static HOPPER: OnceLock<Profile> = OnceLock::new();
        static LAVAPIPE: OnceLock<Profile> = OnceLock::new();
        let file = file.and_then(|path| {
            let mut files =
                (FILES.get_or_init(Default::default).lock()).unwrap_or_else(|e| e.into_inner());
            *files.entry(path.to_path_buf()).or_insert_with(|| {
                match std::fs::read_to_string(path)
                    .map_err(|e| e.to_string())
                    .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()))
                {
                    // One leak per distinct file: profiles are few and live for the process.
                    Ok(profile) => Some(&*Box::leak(Box::new(profile))),
                    Err(error) => {
                        log::warn!("hypatia: profile {} not used: {error}", path.display());
                        None
                    }
                }
            })
        });
        match (file, matrix_units) {
            (Some(profile), _) => profile,
            (None, true) => HOPPER.get_or_init(Profile::hopper),
            (None, false) => LAVAPIPE.get_or_init(Profile::lavapipe),
        }
    }

    fn mflop_per_us(&self, dtype: DType) -> f64 {
        match dtype {
            DType::F16 | DType::BF16 => self.half_mflop_per_us,
            _ => self.f32_mflop_per_us,
        }
    }

    /// Predicted µs of one fused layer `m × k × n` run alone (its own launch).
    pub fn layer_time(&self, m: usize, k: usize, n: usize, dtype: DType) -> f64 {
        self.step_us + self.gpu_time(m, k, n, dtype)
    }

    /// Predicted µs the GPU spends on one fused layer `m × k × n`: its FLOPs at the matrix
    /// throughput or its bytes at the memory bandwidth, whichever takes longer (no launch).
    pub fn gpu_time(&self, m: usize, k: usize, n: usize, dtype: DType) -> f64 {
        let flops = 2.0 * (m * k * n) as f64;
        let bytes = ((m * k + k * n + 2 * m * n + n) * dtype.size()) as f64;
        (flops / 1e6 / self.mflop_per_us(dtype)).max(bytes / self.bytes_per_us)
    }

    /// `[m, k, n]` of `x · w` from their shapes: `x`'s leading dims fold into `m`.
    pub fn matmul_dims(x: &[usize], w: &[usize]) -> Option<[usize; 3]> {
        let (&k, lead) = x.split_last()?;
        Some([lead.iter().product(), k, *w.last()?])
    }

    /// Predicted µs of the chain's layers, one launch each.
    pub fn layers_time(&self, chain: &ChainProblem) -> f64 {
        (chain.widths.windows(2))
            .map(|w| self.layer_time(chain.m, w[0], w[1], chain.dtype))
            .sum()
    }

    /// Predicted µs of the chain as one MLP-chain launch: on the grid-wide kernel, waves of
    /// work items per layer; otherwise each cube streams every weight and computes its rows.
    pub fn chain_time(&self, chain: &ChainProblem) -> f64 {
        if let (true, Some(grid)) = (chain.grid, self.grid) {
            let layers = chain.widths[1..].iter();
            let waves: f64 = layers
                .filter_map(|&n| self.grid_layer_time(chain.m, n, chain.dtype))
                .sum();
            return grid.launch_us + waves;
        }
        let layers = chain.widths.windows(2);
        let stream: f64 = layers
            .map(|w| self.chain_layer_time(chain.m, chain.rows, w[0], w[1], chain.dtype))
            .sum();
        self.chain_launch_us + stream
    }

    /// Predicted µs one `k × n` layer adds to a chain launch over `m` rows, `rows` a cube:
    /// each cube streams the layer's weights and bias and computes its rows, and the cubes run
    /// [`Profile::parallel_cubes`] at a time.
    pub fn chain_layer_time(&self, m: usize, rows: usize, k: usize, n: usize, dtype: DType) -> f64 {
        let bytes = (k * (n + 1) * dtype.size()) as f64;
        let flops = 2.0 * (rows * k * n) as f64;
        let cube =
            (bytes / self.chain_cube_bytes_per_us).max(flops / 1e6 / self.chain_cube_mflop_per_us);
        let waves = m.div_ceil(rows).div_ceil(self.parallel_cubes.max(1)) as f64;
        waves * cube
    }

    /// Predicted µs one layer of `n` outputs over `m` rows adds to a grid-wide chain launch:
    /// its waves of work items (`grid_item`). `None` where
    /// the grid-wide kernel does not run.
    pub fn grid_layer_time(&self, m: usize, n: usize, dtype: DType) -> Option<f64> {
        let grid = self.grid?;
        // The grid figures are measured on sm_90, where half types take tensor-core items.
        let item = grid_item(m, dtype, true);
        let items = n.div_ceil(item.columns) * m.div_ceil(item.rows);
        Some(items.div_ceil(self.parallel_cubes.max(1)) as f64 * grid.wave_us)
    }

    /// Whether `chain` should run as one launch.
    pub fn prefers_chain(&self, chain: &ChainProblem) -> bool {
        self.chain_time(chain) < self.layers_time(chain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mlp(m: usize, widths: &[usize]) -> ChainProblem {
        ChainProblem {
            m,
            widths: widths.to_vec(),
            out_shape: vec![m, *widths.last().unwrap()],
            dtype: DType::BF16,
            rows: m.next_power_of_two().min(4),
            units: 1024,
            grid: false,
        }
    }

    #[test]
    fn narrow_layers_chain_and_wide_ones_do_not() {
        for profile in [Profile::hopper(), Profile::lavapipe()] {
            assert!(
                profile.prefers_chain(&mlp(1, &[64, 64, 64, 64])),
                "{}",
                profile.name
            );
            assert!(
                profile.prefers_chain(&mlp(32, &[64, 64, 64, 64])),
                "{}",
                profile.name
            );
            // 1024-wide square layers at 64 rows: 16 cubes each stream 6 MiB of weights.
            let wide = mlp(64, &[1024, 1024, 1024, 1024]);
            assert!(!profile.prefers_chain(&wide), "{}", profile.name);
        }
        // Measured on the H100: the 784→512→512→10 MLP runs faster layer by layer on one
        // cube per row block, and faster chained on the grid-wide kernel.
        let mnist = mlp(1, &[784, 512, 512, 10]);
        assert!(!Profile::hopper().prefers_chain(&mnist));
        let grid = ChainProblem {
            grid: true,
            ..mnist
        };
        assert!(Profile::hopper().prefers_chain(&grid));
        assert!(!Profile::lavapipe().prefers_chain(&ChainProblem {
            grid: true,
            ..mlp(64, &[1024; 5])
        }));
    }

    #[test]
    fn grid_waves_grow_with_rows_and_width() {
        let profile = Profile::hopper();
        let time = |m, widths: &[usize]| {
            profile.chain_time(&ChainProblem {
                grid: true,
                ..mlp(m, widths)
            })
        };
        // 64 16-byte column vectors of bf16 per 512-wide layer: one wave each at 1 row.
        let wave = profile.grid.unwrap().wave_us;
        let launch = profile.grid.unwrap().launch_us;
        assert_eq!(time(1, &[784, 512, 512, 10]), launch + 3.0 * wave);
        // 64 rows on tensor cores: 2 row groups of 32 × 128 groups of 8 columns of a 1024-wide
        // layer = 2 waves of 132.
        assert_eq!(time(64, &[1024, 1024]), launch + 2.0 * wave);
        // 4 rows: FMA items of 4 rows, 128 vectors = one wave.
        assert_eq!(time(4, &[1024, 1024]), launch + wave);
    }

    #[test]
    fn profiles_round_trip_through_json() {
        let profile = Profile::lavapipe();
        let json = serde_json::to_string(&profile).unwrap();
        assert_eq!(serde_json::from_str::<Profile>(&json).unwrap(), profile);
    }
}
