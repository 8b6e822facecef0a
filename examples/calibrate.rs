//! Measures this device's [`hypatia::rewrite::Profile`]: what a fused layer launch, an MLP-chain
//! launch (on CUDA the grid-wide kernel's launch and waves, elsewhere a chain cube's weight
//! stream) and the per-layer kernels cost here, from forwards of small MLPs through
//! `Hypatia<B>` (medians of `--runs` forward + `sync`). Writes the profile as JSON for
//! `HYPATIA_PROFILE`, and prints each measurement.
//!
//! ```text
//! cargo run --release --features cuda --example calibrate -- --dtype bf16 --out profile.json
//! cargo run --release --features cuda --example calibrate -- --dtype f32 --base profile.json --out profile.json
//! ```
//!
//! One dtype per process (Burn 0.21 fixes a device's float type at its first tensor): a bf16 or
//! f16 run sets every field but the f32 throughput, an f32 run with `--base` only that one, an
//! f32 run without (a device without 16-bit floats, lavapipe) every field but the 16-bit one.

use burn::prelude::*;
use clap::Parser;
use hypatia::FusedPattern;
use hypatia::config::{ChainPolicy, update_config};
use hypatia::kernel::ChainLimits;
use hypatia::rewrite::{GridCost, Profile};
use std::time::Instant;

#[allow(dead_code)] // the per-dtype plumbing is bench_infer's and bench_train's
#[path = "common/bench.rs"]
mod bench;
#[path = "common/device.rs"]
mod device;
use bench::runtime::*;
use bench::{Mlp, median};

#[derive(Parser, Debug)]
struct Args {
    /// f32, f16 or bf16.
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Timed forwards per measurement.
    #[arg(long, default_value_t = 200)]
    runs: usize,
    /// A profile to start from (its other fields are kept).
    #[arg(long)]
    base: Option<std::path::PathBuf>,
    /// Where to write the profile.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// The profile's name (device and date).
    #[arg(long, default_value = "calibrated")]
    name: String,
}

/// Median µs of one forward + sync of an MLP of `widths` at `batch` rows, with `chain` policy,
/// and MLP-chain launches and chained steps per forward.
fn time<B: Backend>(widths: &[usize], batch: usize, chain: ChainPolicy, runs: usize) -> Timing {
    update_config(|c| c.chain = chain);
    let device = B::Device::default();
    let model = Mlp::<B>::new(widths, &device);
    let x = Tensor::<B, 2>::random([batch, widths[0]], Default::default(), &device);
    for _ in 0..runs.div_ceil(4).max(20) {
        drop(model.forward(x.clone()));
        B::sync(&device).expect("sync");
    }
    let before = hypatia::stats(&device);
    let us: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            let y = model.forward(x.clone());
            B::sync(&device).expect("sync");
            drop(y);
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    let after = hypatia::stats(&device);
    let count =
        |f: &dyn Fn(&hypatia::FusionStats) -> u64| (f(&after) - f(&before)) as f64 / runs as f64;
    let launches = count(&|s| {
        s.patterns
            .get(FusedPattern::MlpChain)
            .map_or(0, |p| p.tiled)
    });
    let chained = count(&|s| s.patterns.values().map(|p| p.chained).sum());
    update_config(|c| c.chain = ChainPolicy::Auto);
    Timing {
        us: median(us),
        launches,
        chained,
    }
}

struct Timing {
    us: f64,
    launches: f64,
    chained: f64,
}

fn calibrate<F: burn_cubecl::FloatElement>(args: &Args, mut profile: Profile) -> Profile {
    type H<F> = hypatia::Hypatia<PlainOf<F>>;
    let runs = args.runs;
    let size = F::dtype().size();
    let narrow = |layers: usize| vec![64; layers + 1];
    let t = |widths: &[usize], batch, chain| time::<H<F>>(widths, batch, chain, runs);
    let report = |what: &str, timing: &Timing| {
        println!(
            "{what:<44} {:>9.1} us  chain launches {:.1}, chained steps {:.1}",
            timing.us, timing.launches, timing.chained
        );
    };
    let big = t(&[2048, 2048], 2048, ChainPolicy::Never);
    report("1 layer 2048x2048x2048", &big);
    let one = t(&narrow(1), 1, ChainPolicy::Never);
    report("1 layer 1x64x64", &one);
    let half = F::dtype() != burn::tensor::DType::F32;
    let matmul = 2.0 * 2048f64.powi(3) / 1e6 / (big.us - one.us).max(1.0);
    if half {
        profile.half_mflop_per_us = matmul;
    } else {
        profile.f32_mflop_per_us = matmul;
    }
    if half || args.base.is_none() {
        // One window each (a 16-layer model spans several, and burn-fusion explores again
        // the forwards whose claims do not cover the whole queue).
        let four = t(&narrow(4), 1, ChainPolicy::Never);
        report("4 layers 1x64x64, one launch each", &four);
        profile.step_us = (four.us - one.us) / 3.0;
        let base = one.us - profile.step_us;
        let chained = t(&narrow(4), 1, ChainPolicy::Always);
        report("4 layers 1x64x64, chained", &chained);
        let wide = t(&[1024; 5], 1, ChainPolicy::Always);
        report("4 layers 1x1024x1024, chained", &wide);
        let client = <Runtime as cubecl::Runtime>::client(&Default::default());
        if ChainLimits::of(&client).grid {
            // The grid-wide kernel: 4 waves of 1024-wide items at 1 row, 8 a layer at 64 rows.
            let tall = t(&[1024; 5], 64, ChainPolicy::Always);
            report("4 layers 64x1024x1024, chained", &tall);
            let wave_us = ((tall.us - wide.us) / 28.0).max(0.1);
            profile.grid = Some(GridCost {
                launch_us: (wide.us - base - 4.0 * wave_us).max(1.0),
                wave_us,
            });
        } else {
            profile.chain_launch_us = chained.us - base;
            let wide4 = t(&[1024; 5], 4, ChainPolicy::Always);
            report("4 layers 4x1024x1024, chained", &wide4);
            let bytes = (4 * 1024 * 1025 * size) as f64;
            profile.chain_cube_bytes_per_us = bytes / (wide.us - chained.us).max(1.0);
            let flops = 2.0 * 4.0 * 4.0 * 1024.0 * 1024.0;
            profile.chain_cube_mflop_per_us = flops / 1e6 / (wide4.us - chained.us).max(1.0);
            profile.grid = None;
        }
        let stream = t(&[4096, 4096], 1, ChainPolicy::Never);
        report("1 layer 1x4096x4096", &stream);
        profile.bytes_per_us = (4096 * 4096 * size) as f64 / (stream.us - one.us).max(1.0);
        profile.name = args.name.clone();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        profile.parallel_cubes = (client.properties().hardware)
            .num_streaming_multiprocessors
            .map_or(cores, |sms| sms as usize);
    }
    profile
}

fn main() {
    let args = Args::parse();
    device::require_device();
    let base = match &args.base {
        Some(path) => serde_json::from_str(&std::fs::read_to_string(path).expect("read --base"))
            .expect("a profile"),
        None => Profile::hopper(),
    };
    use burn::tensor::{bf16, f16};
    let profile = match args.dtype.as_str() {
        "f32" => calibrate::<f32>(&args, base),
        "f16" => calibrate::<f16>(&args, base),
        "bf16" => calibrate::<bf16>(&args, base),
        other => panic!("unknown dtype {other}"),
    };
    let json = serde_json::to_string_pretty(&profile).expect("serialise");
    println!("{json}");
    if let Some(path) = &args.out {
        std::fs::write(path, json).expect("write --out");
    }
}
