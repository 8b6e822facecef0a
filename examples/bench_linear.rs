//! Linear + bias + activation (ReLU by default, `--activation gelu` etc.) forward: `Hypatia<B>` vs Burn's `B` (its fusion on) vs `CubeBackend`
//! (no fusion), in one process. Medians of `--runs` timed batches of about 1e13 FLOPs (at
//! least `--iters` launches), every output kept alive until `sync`, after a warm-up that lets
//! autotune settle. Prints a table and, with `--json`, writes one record per shape and dtype.
//! `engine` is Hypatia's engine called directly on `CubeBackend` buffers (no op stream);
//! `host` is the time to hand one launch to the backend (Burn's stream may defer the work
//! until `sync`, so it is a lower bound of the host's cost). `fuser` and `blocks` are
//! Hypatia's own host time per launch on burn-fusion's thread, in µs over the timed batches
//! (`hypatia::stats`' `host`): its fuser (capture, plan lookups) and its claimed blocks
//! (checks, launches, Burn's ops it runs); the rest of that thread's time is burn-fusion's.
//!
//! ```text
//! cargo run --release --features cuda --example bench_linear -- --dtypes bf16 --json out.json
//! ```

use burn::prelude::*;
use burn::tensor::Element;
use burn::tensor::activation;
use clap::Parser;
use std::time::Instant;

#[path = "common/bench.rs"]
mod bench;
#[path = "common/device.rs"]
mod device;
use bench::runtime::*;
use bench::{PerDtype, median, run_table};

type Bare<F> = burn_cubecl::CubeBackend<Runtime, F, i32, u8>;

#[derive(Parser, Debug)]
struct Args {
    /// Element types, comma separated: f32, f16, bf16.
    #[arg(long, default_value = "f32,f16,bf16")]
    dtypes: String,
    /// Shapes as MxKxN, comma separated.
    #[arg(
        long,
        default_value = "256x256x512,1024x784x2048,2048x2048x2048,8192x1024x4096,8192x4096x1024,8192x4096x4096,16384x8192x8192"
    )]
    shapes: String,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Leave out the table header (used for the per-dtype child processes).
    #[arg(long)]
    no_header: bool,
    /// Fewest launches per timed batch.
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// Timed batches (the median is reported).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Also time Hypatia forced onto these tensor-core engine candidates, comma separated
    /// (e.g. `wgmma 128x256 s4 g1,wgmma 128x256 s4 g16 persistent`): one line each.
    #[arg(long, default_value = "")]
    candidates: String,
    /// The activation after the Linear: relu, gelu, gelu-tanh, silu.
    #[arg(long, default_value = "relu")]
    activation: String,
}

impl Args {
    /// The activation as Burn's API applies it.
    fn activate<B: Backend>(&self, y: Tensor<B, 2>) -> Tensor<B, 2> {
        match self.activation.as_str() {
            "relu" => activation::relu(y),
            "gelu" => activation::gelu(y),
            "gelu-tanh" => activation::gelu_approximate(y),
            "silu" => activation::silu(y),
            other => panic!("unknown activation {other}"),
        }
    }

    /// The epilogue Hypatia runs it with.
    fn epilogue(&self) -> hypatia::kernel::Epilogue {
        use hypatia::kernel::Epilogue;
        match self.activation.as_str() {
            "relu" => Epilogue::Relu,
            "gelu" => Epilogue::Gelu,
            "gelu-tanh" => Epilogue::GeluTanh,
            "silu" => Epilogue::Silu,
            other => panic!("unknown activation {other}"),
        }
    }
}

/// Medians over timed batches: wall time per launch until `sync`, and the host's share of it
/// (time to enqueue a launch: when it is close to `ms`, the host, not the GPU, sets the pace).
#[derive(Clone, Copy)]
struct Timing {
    ms: f64,
    host_ms: f64,
    /// Launches in the timed batches.
    launches: usize,
}

/// Launches per timed batch: about 1e13 FLOPs (15 ms at 650 TFLOP/s), at least `--iters` and
/// at most 500, so that a fixed cost per batch (about 0.3 ms through Burn's fusion stream in
/// one H100 run, `benches/results/nvidia-h100.md`) is spread over many launches.
fn iters(m: usize, k: usize, n: usize, args: &Args) -> usize {
    ((1e13 / (2.0 * (m * k * n) as f64)) as usize).clamp(args.iters, 500)
}

/// Times `step`, keeping every output alive until `sync` has returned; `warmed` runs between
/// the warm-up and the timed batches.
fn measure<O>(
    iters: usize,
    runs: usize,
    step: impl Fn() -> O,
    sync: impl Fn(),
    warmed: impl FnOnce(),
) -> Timing {
    let batch = || {
        let start = Instant::now();
        let outs: Vec<_> = (0..iters).map(|_| step()).collect();
        let host = start.elapsed().as_secs_f64();
        sync();
        let elapsed = start.elapsed().as_secs_f64();
        drop(outs);
        (elapsed * 1e3 / iters as f64, host * 1e3 / iters as f64)
    };
    for _ in 0..3 {
        batch();
    }
    warmed();
    let (ms, host): (Vec<f64>, Vec<f64>) = (0..runs).map(|_| batch()).unzip();
    Timing {
        ms: median(ms),
        host_ms: median(host),
        launches: iters * runs,
    }
}

/// `x [m, k]`, `w [k, n]`, `b [n]` on backend `B`, with fixed pseudo-random values.
fn inputs<B: Backend>(m: usize, k: usize, n: usize) -> (Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 1>) {
    let device = B::Device::default();
    let dtype = B::FloatElem::dtype();
    let rand = |shape: Vec<usize>, seed: u64| {
        let len: usize = shape.iter().product();
        let mut s = seed;
        let v: Vec<f32> = (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect();
        TensorData::new(v, shape).convert_dtype(dtype)
    };
    let x = Tensor::<B, 2>::from_data(rand(vec![m, k], 1), &device);
    assert_eq!(x.dtype(), dtype, "one float dtype per process (Burn 0.21)");
    let w = Tensor::<B, 2>::from_data(rand(vec![k, n], 2), &device);
    let b = Tensor::<B, 1>::from_data(rand(vec![n], 3), &device);
    (x, w, b)
}

/// One Linear+ReLU on backend `B`, through Burn's tensor API; `warmed` as for [`measure`].
fn time<B: Backend>(m: usize, k: usize, n: usize, args: &Args, warmed: impl FnOnce()) -> Timing {
    let (x, w, b) = inputs::<B>(m, k, n);
    let device = x.device();
    measure(
        iters(m, k, n, args),
        args.runs,
        || args.activate(x.clone().matmul(w.clone()) + b.clone().unsqueeze()),
        || B::sync(&device).expect("sync"),
        warmed,
    )
}

/// Hypatia's tensor-core engine called directly on `CubeBackend` buffers: the same kernels
/// without Burn's op stream, so `hypatia - engine` is what the stream and the plan cost.
fn time_engine<F: burn_cubecl::FloatElement>(m: usize, k: usize, n: usize, args: &Args) -> Timing {
    use hypatia::kernel::engine::tensor_core_linear;
    use hypatia::kernel::{EngineChoices, EpilogueInputs, Operand, check_linear};
    let (x, w, b) = inputs::<Bare<F>>(m, k, n);
    let device = x.device();
    let operand = |t: burn_cubecl::tensor::CubeTensor<Runtime>| Operand {
        shape: t.meta.shape().to_vec(),
        handle: t.into(),
        id: None,
    };
    let dtype = F::dtype();
    let problem = check_linear((&[m, k], dtype), (&[k, n], dtype), Some((&[n], dtype)))
        .expect("a linear the engine runs");
    let config = hypatia::config::config();
    let choices = EngineChoices::new(&config, problem.f32_math(&config));
    let (x, w, b) = (
        operand(x.into_primitive().tensor()),
        operand(w.into_primitive().tensor()),
        operand(b.into_primitive().tensor()),
    );
    measure(
        iters(m, k, n, args),
        args.runs,
        || {
            let epilogue = EpilogueInputs::new(args.epilogue(), Some(&b));
            let candidate = config.engine_candidate.as_deref();
            tensor_core_linear(&problem, &x, &w, epilogue, false, choices, candidate)
        },
        || Bare::<F>::sync(&device).expect("sync"),
        || (),
    )
}

/// One row of the table.
#[derive(serde::Serialize, serde::Deserialize)]
struct Row {
    m: usize,
    k: usize,
    n: usize,
    dtype: String,
    /// The activation after the Linear.
    #[serde(default)]
    activation: String,
    hypatia_ms: f64,
    burn_ms: f64,
    cube_ms: f64,
    hypatia_tflops: f64,
    burn_tflops: f64,
    /// How Hypatia ran the step: `tiled`, `tensor-core: <candidate>` or `split`.
    path: String,
    /// Milliseconds of Hypatia forced onto each `--candidates` entry.
    #[serde(default)]
    candidates: Vec<(String, f64)>,
    /// Hypatia's engine called directly on `CubeBackend` buffers (no op stream).
    #[serde(default)]
    engine_ms: f64,
    /// Host milliseconds to enqueue one launch: Hypatia, Burn, the engine alone.
    #[serde(default)]
    host_ms: [f64; 3],
    /// Hypatia's own host µs per launch on burn-fusion's thread: its fuser, its claimed blocks.
    #[serde(default)]
    hypatia_host_us: [f64; 2],
}

fn run<F: burn_cubecl::FloatElement>(args: &Args, rows: &mut Vec<Row>) {
    let device = burn::tensor::Device::<PlainOf<F>>::default();
    let dtype = format!("{:?}", F::dtype()).to_lowercase();
    for shape in args.shapes.split(',') {
        let dims: Vec<usize> = shape
            .split('x')
            .map(|d| d.parse().expect("MxKxN"))
            .collect();
        let (m, k, n) = (dims[0], dims[1], dims[2]);
        let before = hypatia::stats(&device);
        let mut warm = None;
        let hypatia_t = time::<hypatia::Hypatia<PlainOf<F>>>(m, k, n, args, || {
            warm = Some(hypatia::stats(&device).host);
        });
        let hypatia = hypatia_t.ms;
        let after = hypatia::stats(&device);
        let warm = warm.expect("measure runs `warmed`");
        let per_launch = |nanos: u64| nanos as f64 * 1e-3 / hypatia_t.launches as f64;
        let hypatia_host_us = [
            per_launch(after.host.fuser_nanos - warm.fuser_nanos),
            per_launch(after.host.execute_nanos - warm.execute_nanos),
        ];
        let count = |s: &hypatia::FusionStats, f: fn(&hypatia::PatternStats) -> u64| {
            s.patterns.get(args.epilogue().pattern()).map_or(0, f)
        };
        let path = [
            (
                "tiled",
                count(&after, |p| p.tiled) - count(&before, |p| p.tiled),
            ),
            (
                "tensor-core",
                count(&after, |p| p.tensor_core) - count(&before, |p| p.tensor_core),
            ),
            (
                "split",
                count(&after, |p| p.split) - count(&before, |p| p.split),
            ),
            // Burn's own fused matmul, where the race against it measured it faster.
            (
                "burn-fused",
                count(&after, |p| p.burn_fused) - count(&before, |p| p.burn_fused),
            ),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, _)| match name {
            // The engine's autotuned choice, e.g. `tensor-core: wgmma 128x256 s4`.
            "tensor-core" => format!(
                "{name}: {}",
                hypatia::kernel::engine::last_candidate::<Runtime>().unwrap_or_default()
            ),
            _ => name.to_string(),
        })
        .collect::<Vec<_>>()
        .join("+");
        let mut candidates = Vec::new();
        for name in args.candidates.split(',').filter(|c| !c.is_empty()) {
            // A forced candidate is Hypatia's kernel: not raced against Burn's fused matmul.
            let before = hypatia::config::update_config(|c| {
                c.race = hypatia::config::RacePolicy::Never;
                c.engine_candidate = Some(name.to_string());
            });
            let ms = time::<hypatia::Hypatia<PlainOf<F>>>(m, k, n, args, || ()).ms;
            hypatia::config::set_config(before);
            let ran = hypatia::kernel::engine::last_candidate::<Runtime>().unwrap_or_default();
            let note = if ran == name {
                String::new()
            } else {
                format!(" (declined: ran {ran})")
            };
            println!("  {shape:<16} {dtype:>5} {ms:>10.4}  {name}{note}");
            candidates.push((name.to_string(), ms));
        }
        let engine = time_engine::<F>(m, k, n, args);
        let burn_t = time::<PlainOf<F>>(m, k, n, args, || ());
        let burn = burn_t.ms;
        let cube = time::<Bare<F>>(m, k, n, args, || ()).ms;
        let tflops = |ms: f64| 2.0 * (m * k * n) as f64 / (ms * 1e-3) / 1e12;
        println!(
            "{shape:<18} {dtype:>5} {hypatia:>10.4} {:>10.4} {burn:>10.4} {cube:>10.4} {:>8.1} {:>8.1} {:>7.2}x {:>7.4} {:>7.4} {:>6.1} {:>6.1}  {path}",
            engine.ms,
            tflops(hypatia),
            tflops(burn),
            burn / hypatia,
            hypatia_t.host_ms,
            burn_t.host_ms,
            hypatia_host_us[0],
            hypatia_host_us[1],
        );
        rows.push(Row {
            m,
            k,
            n,
            dtype: dtype.clone(),
            activation: args.activation.clone(),
            hypatia_ms: hypatia,
            burn_ms: burn,
            cube_ms: cube,
            hypatia_tflops: tflops(hypatia),
            burn_tflops: tflops(burn),
            path,
            candidates,
            engine_ms: engine.ms,
            host_ms: [hypatia_t.host_ms, burn_t.host_ms, engine.host_ms],
            hypatia_host_us,
        });
    }
}

impl PerDtype<Row> for Args {
    fn run<F: burn_cubecl::FloatElement>(&self, rows: &mut Vec<Row>) {
        run::<F>(self, rows)
    }
}

fn main() {
    let args = Args::parse();
    device::require_device();
    let columns = "M x K x N:<18|dtype:5|hypatia:10|engine:10|burn:10|cube:10|TF/s hy:8|TF/s bu:8|vs burn:8|host hy:7|host bu:7|fuser:6|blocks:6|path";
    let json = args.json.as_deref();
    run_table(&args, &args.dtypes, args.no_header, columns, json);
}
