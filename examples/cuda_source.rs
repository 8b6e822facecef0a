//! Writes the CUDA source of one configuration of Hypatia's hand-written kernels, as the crate
//! compiles it: the shared header, the configuration's `#define`s and generated code, the
//! kernel. The device benchmarks (`tools/device/run.sh wgmma-bench`,
//! `tools/device/run.sh chain-bench`) build from this text, so they time what the crate runs.
//!
//! ```sh
//! cargo run --release --features cuda --example cuda_source -- wgmma --bn 256 --store-cols 128 --tma-store > k.cu
//! cargo run --release --features cuda --example cuda_source -- chain --rows 8 > chain.cu
//! ```

use burn::tensor::DType;
use clap::{Parser, Subcommand, ValueEnum};
use hypatia::kernel::chain::grid::GridSource;
use hypatia::kernel::hopper::{
    WGMMA_FORCED_TILINGS, WGMMA_TF32_TILINGS, WGMMA_TILINGS, WgmmaElem, WgmmaSource, WgmmaTiling,
};
use hypatia::kernel::{Activation, Gate};
use std::path::PathBuf;

#[derive(Parser)]
#[command(about = "The CUDA source of one kernel configuration, on stdout")]
struct Args {
    #[command(subcommand)]
    kernel: Kernel,
    /// A kernel file to use in place of the crate's (an edited copy to compare).
    #[arg(long, global = true)]
    kernel_file: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Dtype {
    F16,
    Bf16,
    F32,
}

impl Dtype {
    fn burn(self) -> DType {
        match self {
            Dtype::F16 => DType::F16,
            Dtype::Bf16 => DType::BF16,
            Dtype::F32 => DType::F32,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Act {
    None,
    Relu,
    Gelu,
    GeluTanh,
    Silu,
    LeakyRelu,
    Clamp,
    /// ReLU's backward (a gate, no activation).
    ReluGrad,
    /// GELU's backward.
    GeluGrad,
    /// SiLU's backward (a gate and the saved sigmoid).
    SiluGrad,
}

impl Act {
    fn activation(self) -> Activation {
        match self {
            Act::None | Act::ReluGrad | Act::GeluGrad | Act::SiluGrad => Activation::None,
            Act::Relu => Activation::Relu,
            Act::Gelu => Activation::Gelu,
            Act::GeluTanh => Activation::GeluTanh,
            Act::Silu => Activation::Silu,
            Act::LeakyRelu => Activation::LeakyRelu,
            Act::Clamp => Activation::Clamp,
        }
    }

    fn gate(self) -> Gate {
        match self {
            Act::ReluGrad => Gate::Relu,
            Act::GeluGrad => Gate::Gelu,
            Act::SiluGrad => Gate::Silu,
            _ => Gate::None,
        }
    }
}

/// Every tiling the engine offers (tuned, TF32, forced), one name a line.
fn tilings() -> impl Iterator<Item = WgmmaTiling> {
    WGMMA_TILINGS
        .into_iter()
        .chain(WGMMA_TF32_TILINGS)
        .chain(WGMMA_FORCED_TILINGS)
}

#[derive(Subcommand)]
enum Kernel {
    /// The names of the engine's Hopper tilings, for `wgmma --tiling`.
    Tilings,
    /// The Hopper `wgmma` kernel (`src/kernel/hopper/wgmma_linear.cu`).
    Wgmma {
        #[arg(long, value_enum, default_value = "bf16")]
        dtype: Dtype,
        /// One of the engine's tilings by name (`tilings`), in place of the geometry flags.
        #[arg(long)]
        tiling: Option<String>,
        /// Columns per tile.
        #[arg(long, default_value_t = 256)]
        bn: u32,
        /// Rows per tile (64 or 128; a ping-pong consumer's own tiles).
        #[arg(long, default_value_t = 128)]
        rows: u32,
        /// Each consumer warpgroup on tiles of its own.
        #[arg(long)]
        pingpong: bool,
        #[arg(long, default_value_t = 4)]
        stages: u32,
        #[arg(long, default_value_t = 16)]
        group_m: u32,
        /// One CTA per tile instead of one per SM.
        #[arg(long)]
        not_persistent: bool,
        /// Stores through shared memory with TMA.
        #[arg(long)]
        tma_store: bool,
        /// Columns per staged store (default: bn).
        #[arg(long)]
        store_cols: Option<u32>,
        #[arg(long, value_enum, default_value = "relu")]
        act: Act,
        /// `x` read from `[k, m]` storage.
        #[arg(long)]
        a_m_major: bool,
        /// `w` read from `[n, k]` storage.
        #[arg(long)]
        b_k_major: bool,
    },
    /// The grid-wide MLP chain (`src/kernel/chain/grid_chain.cu`); the defaults are
    /// 784→512→512→10 with ReLU, ReLU, none and biases, in bf16.
    Chain {
        #[arg(long, value_enum, default_value = "bf16")]
        dtype: Dtype,
        /// Rows per work item.
        #[arg(long, default_value_t = 8)]
        rows: usize,
        /// Tensor-core work items (16 or 32 rows).
        #[arg(long)]
        mma: bool,
        /// The widest layer input rounded up to 16 (tensor-core items).
        #[arg(long, default_value_t = 784)]
        kp: usize,
        /// Columns per FMA work item, per layer.
        #[arg(long, value_delimiter = ',', default_value = "8,8,2")]
        vector: Vec<usize>,
        /// Each layer's activation.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "relu,relu,none"
        )]
        acts: Vec<Act>,
        /// Whether each layer adds a bias (0 or 1).
        #[arg(long, value_delimiter = ',', default_value = "1,1,1")]
        bias: Vec<u8>,
    },
}

fn main() {
    let args = Args::parse();
    let kernel = args.kernel_file.map(|path| {
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    });
    let source = match args.kernel {
        Kernel::Tilings => tilings().map(|t| t.name() + "\n").collect(),
        Kernel::Wgmma {
            dtype,
            tiling: named,
            bn,
            rows,
            pingpong,
            stages,
            group_m,
            not_persistent,
            tma_store,
            store_cols,
            act,
            a_m_major,
            b_k_major,
        } => {
            let tiling = match named {
                Some(name) => tilings()
                    .find(|t| t.name() == name)
                    .unwrap_or_else(|| panic!("no tiling named {name:?} (see `tilings`)")),
                None => WgmmaTiling {
                    rows,
                    bn,
                    pingpong,
                    stages,
                    group_m,
                    persistent: !not_persistent,
                    tma_store,
                    store_cols: store_cols.unwrap_or(bn),
                },
            };
            let source = WgmmaSource {
                tiling,
                elem: WgmmaElem::of(dtype.burn()).expect("every dtype here has a wgmma"),
                a_m_major,
                b_k_major,
                activation: act.activation(),
                gate: act.gate(),
                dropout: false,
                product: false,
                // CUDA stores bools as u8.
                bool_gate_bytes: act.gate().is_bool() as u8,
            };
            match &kernel {
                Some(kernel) => source.source_with(kernel),
                None => source.source(),
            }
        }
        Kernel::Chain {
            dtype,
            rows,
            mma,
            kp,
            vector,
            acts,
            bias,
        } => {
            let layers = vector.len();
            assert!(
                (1..=4).contains(&layers) && acts.len() == layers && bias.len() == layers,
                "--vector, --acts and --bias name the same 1 to 4 layers"
            );
            let pad = |i: usize| i < layers;
            let source = GridSource {
                dtype: dtype.burn(),
                layers,
                vector: std::array::from_fn(|i| if pad(i) { vector[i] } else { 1 }),
                activation: std::array::from_fn(|i| match pad(i) {
                    true => acts[i].activation(),
                    false => Activation::None,
                }),
                bias: std::array::from_fn(|i| pad(i) && bias[i] != 0),
                rows,
                mma,
                kp: if mma { kp } else { 0 },
            };
            match &kernel {
                Some(kernel) => source.source_with(kernel),
                None => source.source(),
            }
        }
    };
    print!("{source}");
}
