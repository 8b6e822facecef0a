//! One training step (forward, MSE loss, backward) of a model, `--model`:
//! - `mlp` (default): Linear-ReLU-Linear-ReLU-Linear, `--mlps` as `batch:d_in:hidden:d_out`;
//! - `ffn-gelu`: a BERT-style feed-forward block, Linear → GELU → Linear with biases;
//! - `swiglu`: a Llama-style one, `W2 · (silu(x · W1) ⊙ (x · W3))`, Linears without bias;
//!
//! the two FFNs with `--mlps` as `tokens:d_model:d_ff` (defaults: BERT-base's 16384:768:3072,
//! Llama-7B's 8192:4096:11008). `Autodiff<Hypatia<B>>` vs `Autodiff<B>` (Burn's fusion on), side by side in one process per
//! dtype. Medians of `--runs` timed batches of `--steps` steps, every gradient kept alive until
//! `sync`, after a warm-up that lets autotune settle; the two backends' batches alternate, so
//! the machine's drift (clocks, other load) hits both alike. Memory, over one step each: the
//! device's bytes in use at the step's high points (after the forward, with the activations
//! autodiff keeps, and after the backward, with every gradient) above what was in use before
//! the step, and the peak: the allocator's pages reserved after the step above those reserved
//! after a cleanup just before it (temporaries freed inside the backward count there; page-
//! granular, so 0 where they fit in pages the model's tensors already hold). With `--single N`,
//! also the latency of N single steps, each settled first and synced after (a loop that reads
//! its loss every step).
//!
//! ```text
//! cargo run --release --features cuda --example bench_train -- --dtypes f32,bf16 --json out.json
//! cargo run --release --features cuda --example bench_train -- --model swiglu --dtypes bf16
//! ```

use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::Element;
use burn::tensor::backend::AutodiffBackend;
use clap::Parser;
use hypatia::FusedPattern;
use hypatia::config::{FlushPolicy, RacePolicy, update_config};
use std::time::Instant;

#[path = "common/bench.rs"]
mod bench;
#[path = "common/device.rs"]
mod device;
use bench::runtime::*;
use bench::{Mlp, PerDtype, median, run_table};
#[path = "common/memory.rs"]
mod memory;

#[derive(Parser, Debug)]
struct Args {
    /// Element types, comma separated: f32, f16, bf16.
    #[arg(long, default_value = "f32,bf16")]
    dtypes: String,
    /// The model: mlp, ffn-gelu or swiglu.
    #[arg(long, default_value = "mlp")]
    model: Model,
    /// Shapes, comma separated: batch:d_in:hidden:d_out for the MLP, tokens:d_model:d_ff for
    /// the FFNs (default: the model's own).
    #[arg(long)]
    mlps: Option<String>,
    /// Steps per timed batch.
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// Timed batches (the median is reported).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Leave out the table header (used for the per-dtype child processes).
    #[arg(long)]
    no_header: bool,
    /// Also time this many single steps each, every one settled first (the last step's
    /// gradients dropped and the device synced) and synced after, as a loop that reads its loss
    /// every step runs: the step's latency, its launch and sync edges included.
    #[arg(long, default_value_t = 0)]
    single: usize,
    /// Race policies to time in turn in this one process, comma separated (auto, always,
    /// burn, never; see `hypatia::config::RacePolicy`). Without it, `HYPATIA_RACE` decides.
    #[arg(long)]
    races: Option<String>,
    /// Flush policies to time in turn in this one process, comma separated (auto, never, blocks; see
    /// `hypatia::config::FlushPolicy`). Without it, `HYPATIA_FLUSH` decides.
    #[arg(long)]
    flushes: Option<String>,
    /// Time to the first step instead (issue 67): this one backend alone in the process (the
    /// first shape, the first dtype), its first three steps each settled and synced, the first
    /// from the process's start. Run it in fresh processes, with and without CubeCL's and the
    /// driver's caches (`tools/device/run.sh bench cold-DTYPE`).
    #[arg(long)]
    cold: Option<Side>,
}

/// The backend `--cold` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Side {
    /// `Autodiff<Hypatia<B>>`.
    Hypatia,
    /// `Autodiff<B>`.
    Burn,
}

/// When `main` began: `--cold` counts from it.
static START: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

/// `--cold`: `side`'s first steps on `spec`, alone in this process.
fn cold<F: burn_cubecl::FloatElement>(model: Model, spec: &[usize], label: &str, side: Side) {
    let dtype = format!("{:?}", F::dtype()).to_lowercase();
    let mut bench = match side {
        Side::Hypatia => bench::<Autodiff<hypatia::Hypatia<PlainOf<F>>>>(model, spec, 1),
        Side::Burn => bench::<Autodiff<PlainOf<F>>>(model, spec, 1),
    };
    let built = START.elapsed().as_secs_f64();
    let (first, _) = (bench.single)();
    let at = START.elapsed().as_secs_f64();
    // Where the first step's host time went on Hypatia's side: capture, plan lookups and
    // e-graph runs (the fuser), and the claimed blocks (their kernels' compilation and
    // autotune, Burn's side of each race included). The rest of the step is Burn's ops.
    let hypatia_share = match side {
        Side::Hypatia => {
            let device = burn::tensor::Device::<PlainOf<F>>::default();
            let host = hypatia::stats(&device).host;
            format!(
                ", of it Hypatia's fuser {:.3} s and claimed blocks {:.3} s",
                host.fuser_nanos as f64 * 1e-9,
                host.execute_nanos as f64 * 1e-9
            )
        }
        Side::Burn => String::new(),
    };
    let (second, _) = (bench.single)();
    let (third, _) = (bench.single)();
    println!(
        "cold {side:?} {label} {dtype}: first step done {at:.2} s after start (device, model and \
         data {built:.2} s; the step {:.2} s{hypatia_share}), then {second:.3} ms, {third:.3} ms",
        first / 1e3,
    );
}

/// A comma-separated list of `flag`'s policies; `[None]` without the flag (the environment
/// variable decides).
fn policies<P: std::str::FromStr<Err = String>>(list: Option<&str>, flag: &str) -> Vec<Option<P>> {
    let Some(list) = list else {
        return vec![None];
    };
    let policy = |name: &str| name.parse().unwrap_or_else(|e| panic!("{flag}: {e}"));
    list.split(',').map(|name| Some(policy(name))).collect()
}

/// The models `--model` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Model {
    /// Linear-ReLU-Linear-ReLU-Linear.
    Mlp,
    /// Linear → GELU → Linear, with biases (BERT's feed-forward block).
    FfnGelu,
    /// `W2 · (silu(x · W1) ⊙ (x · W3))`, without biases (Llama's feed-forward block).
    Swiglu,
}

impl Model {
    /// The default shapes: the seeds' two MLPs, BERT-base's and Llama-7B's FFNs.
    fn default_shapes(self) -> &'static str {
        match self {
            Model::Mlp => "1024:784:2048:10,8192:1024:4096:1024",
            Model::FfnGelu => "16384:768:3072",
            Model::Swiglu => "8192:4096:11008",
        }
    }

    /// (rows, d_in, d_out) of the step's input and target.
    fn io(self, spec: &[usize]) -> (usize, usize, usize) {
        match self {
            Model::Mlp => (spec[0], spec[1], spec[3]),
            Model::FfnGelu | Model::Swiglu => (spec[0], spec[1], spec[1]),
        }
    }

    /// FLOPs of one step: the forward's matmuls, and twice them backward.
    fn flops(self, spec: &[usize]) -> f64 {
        let products = match self {
            Model::Mlp => spec[0] * (spec[1] * spec[2] + spec[2] * spec[2] + spec[2] * spec[3]),
            Model::FfnGelu => spec[0] * 2 * spec[1] * spec[2],
            Model::Swiglu => spec[0] * 3 * spec[1] * spec[2],
        };
        6.0 * products as f64
    }

    /// What Hypatia fuses in a step: forward Linear + activation, the activation's gradient,
    /// plain matmuls.
    fn patterns(self) -> [FusedPattern; 3] {
        match self {
            Model::Mlp => [
                FusedPattern::LinearRelu,
                FusedPattern::MatmulReluGrad,
                FusedPattern::Matmul,
            ],
            Model::FfnGelu => [
                FusedPattern::LinearGelu,
                FusedPattern::MatmulGeluGrad,
                FusedPattern::Matmul,
            ],
            Model::Swiglu => [
                FusedPattern::LinearSilu,
                FusedPattern::MatmulSiluGrad,
                FusedPattern::Matmul,
            ],
        }
    }
}

/// A model of `--model`, written as Burn users write it.
#[allow(clippy::large_enum_variant)] // one per backend, built once
enum Net<B: burn::prelude::Backend> {
    Mlp(Mlp<B>),
    FfnGelu {
        up: nn::Linear<B>,
        down: nn::Linear<B>,
    },
    Swiglu {
        gate: nn::Linear<B>,
        up: nn::Linear<B>,
        down: nn::Linear<B>,
    },
}

impl<B: burn::prelude::Backend> Net<B> {
    fn new(model: Model, spec: &[usize], device: &B::Device) -> Self {
        let linear = |i, o, bias| nn::LinearConfig::new(i, o).with_bias(bias).init(device);
        match model {
            Model::Mlp => Net::Mlp(Mlp::new(&[spec[1], spec[2], spec[2], spec[3]], device)),
            Model::FfnGelu => Net::FfnGelu {
                up: linear(spec[1], spec[2], true),
                down: linear(spec[2], spec[1], true),
            },
            Model::Swiglu => Net::Swiglu {
                gate: linear(spec[1], spec[2], false),
                up: linear(spec[1], spec[2], false),
                down: linear(spec[2], spec[1], false),
            },
        }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        use burn::tensor::activation::{gelu, silu};
        match self {
            Net::Mlp(mlp) => mlp.forward(x),
            Net::FfnGelu { up, down } => down.forward(gelu(up.forward(x))),
            Net::Swiglu { gate, up, down } => {
                down.forward(silu(gate.forward(x.clone())) * up.forward(x))
            }
        }
    }
}

/// One backend's training step on one model, ready to time.
struct Bench {
    /// Runs `--steps` steps, syncs once: (ms per step, ms per step before the sync).
    batch: Box<dyn FnMut() -> (f64, f64)>,
    /// One settled step, synced: (ms, ms of it before the sync).
    single: Box<dyn FnMut() -> (f64, f64)>,
    /// One step: MiB in use at its high points above what was in use before, and MiB of pages
    /// reserved after it above those reserved after a cleanup (its peak).
    memory: Box<dyn FnMut() -> (f64, f64)>,
}

/// Builds `Autodiff<B>`'s model and data for `spec` and returns its [`Bench`].
fn bench<B: AutodiffBackend>(model: Model, spec: &[usize], steps: usize) -> Bench
where
    B::Device: Into<<Runtime as cubecl::Runtime>::Device> + Clone,
{
    let (batch, d_in, d_out) = model.io(spec);
    let device = B::Device::default();
    let model = std::rc::Rc::new(Net::<B>::new(model, spec, &device));
    let normal = burn::tensor::Distribution::Normal(0.0, 1.0);
    let x = Tensor::<B, 2>::random([batch, d_in], normal, &device);
    let dtype = B::FloatElem::dtype();
    assert_eq!(x.dtype(), dtype, "one float dtype per process (Burn 0.21)");
    let target = Tensor::<B, 2>::random([batch, d_out], normal, &device);
    let loss = move || {
        (model.forward(x.clone()) - target.clone())
            .powi_scalar(2)
            .mean()
    };
    let sync = {
        let device = device.clone();
        move || B::sync(&device).expect("sync")
    };
    // Step time, and the host's share of it: the time to record and launch `n` steps before
    // the sync (when it is close to the step time, the step is bound by the host, not the GPU).
    // Shared by the batches and the single steps, so both run the one model.
    let steps_ms = std::rc::Rc::new({
        let (loss, sync) = (loss.clone(), sync.clone());
        move |n: usize| {
            let start = Instant::now();
            let grads: Vec<_> = (0..n).map(|_| loss().backward()).collect();
            let host = start.elapsed().as_secs_f64() * 1e3 / n as f64;
            sync();
            let ms = start.elapsed().as_secs_f64() * 1e3 / n as f64;
            drop(grads);
            (ms, host)
        }
    });
    let batch_ms = {
        let steps_ms = steps_ms.clone();
        move || steps_ms(steps)
    };
    let single = {
        let sync = sync.clone();
        move || {
            sync();
            steps_ms(1)
        }
    };
    let memory_device: <Runtime as cubecl::Runtime>::Device = device.into();
    let memory = move || {
        sync();
        let (before, reserved_before) = memory::cleanup::<Runtime>(&memory_device);
        let loss = loss();
        sync();
        let (forward, _) = memory::usage::<Runtime>(&memory_device);
        let grads = loss.backward();
        sync();
        let (backward, reserved) = memory::usage::<Runtime>(&memory_device);
        drop(grads);
        (
            memory::mib(forward.max(backward).saturating_sub(before)),
            memory::mib(reserved.saturating_sub(reserved_before)),
        )
    };
    Bench {
        batch: Box::new(batch_ms),
        single: Box::new(single),
        memory: Box::new(memory),
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Row {
    /// The model (`--model`); "mlp" in rows written before it existed.
    #[serde(default = "mlp")]
    model: String,
    mlp: String,
    dtype: String,
    /// The race policy in force (`--races`), or "env" where `HYPATIA_RACE` decided.
    #[serde(default)]
    race: String,
    /// The flush policy in force (`--flushes`), or "env" where `HYPATIA_FLUSH` decided.
    #[serde(default)]
    flush: String,
    hypatia_ms: f64,
    burn_ms: f64,
    hypatia_mib: f64,
    burn_mib: f64,
    /// Peak of a step: MiB of allocator pages reserved above those left after a cleanup.
    #[serde(default)]
    hypatia_peak_mib: f64,
    #[serde(default)]
    burn_peak_mib: f64,
    /// Fused steps per training step: forward linear-relu, relu gradients, plain matmuls.
    fused_per_step: [f64; 3],
}

fn run<F: burn_cubecl::FloatElement>(args: &Args, rows: &mut Vec<Row>) {
    let device = burn::tensor::Device::<PlainOf<F>>::default();
    let dtype = format!("{:?}", F::dtype()).to_lowercase();
    let shapes = args.mlps.as_deref().unwrap_or(args.model.default_shapes());
    for mlp in shapes.split(',') {
        let spec: Vec<usize> = mlp
            .split(':')
            .map(|d| {
                d.parse()
                    .expect("batch:d_in:hidden:d_out or tokens:d_model:d_ff")
            })
            .collect();
        let arity = if args.model == Model::Mlp { 4 } else { 3 };
        assert_eq!(
            spec.len(),
            arity,
            "{mlp}: {arity} sizes for {:?}",
            args.model
        );
        if let Some(side) = args.cold {
            return cold::<F>(args.model, &spec, mlp, side);
        }
        let patterns = args.model.patterns();
        // Per pattern: Hypatia's kernel runs, and the runs of Burn's fused matmul the race chose.
        let count = || {
            let stats = hypatia::stats(&device);
            let burn_side = |p: FusedPattern| stats.patterns.get(p).map_or(0, |p| p.burn_fused);
            patterns.map(|p| (stats.executed(p), burn_side(p)))
        };
        let model = args.model;
        let mut hypatia = bench::<Autodiff<hypatia::Hypatia<PlainOf<F>>>>(model, &spec, args.steps);
        let mut burn = bench::<Autodiff<PlainOf<F>>>(model, &spec, args.steps);
        let races = policies::<RacePolicy>(args.races.as_deref(), "--races");
        let flushes = policies::<FlushPolicy>(args.flushes.as_deref(), "--flushes");
        let combos = races
            .iter()
            .flat_map(|r| flushes.iter().map(move |f| (*r, *f)));
        for (race, flush) in combos {
            update_config(|c| {
                c.race = race.unwrap_or(c.race);
                c.flush = flush.unwrap_or(c.flush);
            });
            let name = |p: Option<String>| p.unwrap_or("env".to_string()).to_lowercase();
            let race = name(race.map(|r| format!("{r:?}")));
            let flush = name(flush.map(|f| format!("{f:?}")));
            // The label names the policies this process times in turn.
            let tags: Vec<String> = [
                args.races.is_some().then(|| race.clone()),
                args.flushes.is_some().then(|| format!("flush {flush}")),
            ]
            .into_iter()
            .flatten()
            .collect();
            let label = if tags.is_empty() {
                mlp.to_string()
            } else {
                format!("{mlp} [{}]", tags.join(", "))
            };
            // Warm-up until autotune settles and no race runs (each race syncs the device
            // around its runs; plans, and so races, can appear a few batches in), then timed
            // batches alternating between the two (each going first in turn), so drift in the
            // machine's state hits both alike.
            let racing = || {
                let stats = hypatia::stats(&device);
                stats.patterns.values().map(|p| p.racing).sum::<u64>()
            };
            // Each warm-up batch's seconds go to stderr as it ends: a cold process (compilation,
            // autotune, races) shows where its time goes even if it is stopped before a row.
            for warmup in 0.. {
                let before = racing();
                let start = Instant::now();
                (hypatia.batch)();
                let hypatia_s = start.elapsed().as_secs_f64();
                (burn.batch)();
                let burn_s = start.elapsed().as_secs_f64() - hypatia_s;
                eprintln!(
                    "bench_train: {label} {dtype}: warm-up batch {warmup} ({:.1} s after start): \
                     Hypatia {hypatia_s:.2} s, Burn {burn_s:.2} s, {} runs of undecided races",
                    START.elapsed().as_secs_f64(),
                    racing().saturating_sub(before)
                );
                if warmup >= 2 && racing() == before || warmup == 50 {
                    break;
                }
            }
            let (mut hypatia_runs, mut burn_runs) = (Vec::new(), Vec::new());
            let (before, host_before) = (count(), hypatia::stats(&device).host);
            for run in 0..args.runs {
                if run % 2 == 0 {
                    hypatia_runs.push((hypatia.batch)());
                    burn_runs.push((burn.batch)());
                } else {
                    burn_runs.push((burn.batch)());
                    hypatia_runs.push((hypatia.batch)());
                }
            }
            let (after, host) = (count(), hypatia::stats(&device).host);
            let steps = (args.runs * args.steps) as f64;
            let per_step = |after: u64, before: u64| (after - before) as f64 / steps;
            let fused_per_step = [0, 1, 2].map(|i| per_step(after[i].0, before[i].0));
            let burn_side_per_step = [0, 1, 2].map(|i| per_step(after[i].1, before[i].1));
            let medians = |runs: Vec<(f64, f64)>| {
                let (ms, host): (Vec<f64>, Vec<f64>) = runs.into_iter().unzip();
                (median(ms), median(host))
            };
            let ((hypatia_ms, hypatia_host), (burn_ms, burn_host)) =
                (medians(hypatia_runs), medians(burn_runs));
            let egg = hypatia::stats(&device).egg;
            eprintln!(
                "bench_train: {label} {dtype}: ms per step (of it before the sync, recording and launching): \
                 Hypatia {hypatia_ms:.4} ({hypatia_host:.4}), Burn {burn_ms:.4} ({burn_host:.4})"
            );
            eprintln!(
                "bench_train: {label} {dtype}: Hypatia's host time per timed step: fuser {:.1} us, \
                 executing {:.1} us ({:.1} blocks, {:.1} of them flushed); e-graph runs in all \
                 {} ({} us); steps on Burn's side of the race per step {burn_side_per_step:?}",
                per_step(host.fuser_nanos, host_before.fuser_nanos) / 1e3,
                per_step(host.execute_nanos, host_before.execute_nanos) / 1e3,
                per_step(host.executions, host_before.executions),
                per_step(host.flushes, host_before.flushes),
                egg.runs,
                egg.total_micros,
            );
            if args.single > 0 {
                let (mut hypatia_single, mut burn_single) = (Vec::new(), Vec::new());
                for _ in 0..args.single {
                    hypatia_single.push((hypatia.single)());
                    burn_single.push((burn.single)());
                }
                let ((hy, hy_host), (bu, bu_host)) =
                    (medians(hypatia_single), medians(burn_single));
                eprintln!(
                    "bench_train: {label} {dtype}: one settled step + sync, ms (of it before the \
                     sync): Hypatia {hy:.4} ({hy_host:.4}), Burn {bu:.4} ({bu_host:.4}), \
                     Hypatia / Burn {:.2}x",
                    bu / hy
                );
            }
            // One step each, after the timing: the markers on stderr delimit one steady-state
            // step of each backend in logs such as CubeCL's kernel log or BURN_FUSION_LOG.
            eprintln!("bench_train: memory step: hypatia");
            let (hypatia_mib, hypatia_peak_mib) = (hypatia.memory)();
            eprintln!("bench_train: memory step: burn");
            let (burn_mib, burn_peak_mib) = (burn.memory)();
            eprintln!("bench_train: memory step: end");
            let flops = model.flops(&spec);
            let tflops = |ms: f64| flops / (ms * 1e-3) / 1e12;
            println!(
                "{label:<22} {dtype:>5} {hypatia_ms:>9.4} {burn_ms:>9.4} {:>7.2}x {:>7.1} {:>7.1} {hypatia_mib:>9.1} {burn_mib:>9.1} {hypatia_peak_mib:>9.1} {burn_peak_mib:>9.1}  {:.1}/{:.1}/{:.1}",
                burn_ms / hypatia_ms,
                tflops(hypatia_ms),
                tflops(burn_ms),
                fused_per_step[0],
                fused_per_step[1],
                fused_per_step[2],
            );
            rows.push(Row {
                model: format!("{model:?}").to_lowercase(),
                mlp: mlp.to_string(),
                dtype: dtype.clone(),
                race,
                flush,
                hypatia_ms,
                burn_ms,
                hypatia_mib,
                burn_mib,
                hypatia_peak_mib,
                burn_peak_mib,
                fused_per_step,
            });
        }
    }
}

fn mlp() -> String {
    "mlp".to_string()
}

impl PerDtype<Row> for Args {
    fn run<F: burn_cubecl::FloatElement>(&self, rows: &mut Vec<Row>) {
        run::<F>(self, rows)
    }
}

fn main() {
    std::sync::LazyLock::force(&START);
    device::require_device();
    // RUST_LOG=hypatia=debug shows what each window planned or why it was declined.
    env_logger::init();
    let args = Args::parse();
    let columns = if args.model == Model::Mlp {
        "batch:d_in:hidden:d_out:<22|dtype:5|hypatia:9|burn:9|vs burn:8|TF/s hy:7|TF/s bu:7|MiB hy:9|MiB bu:9|peak hy:9|peak bu:9|fused/step (linear-relu/relu-grad/matmul)"
    } else {
        "tokens:d_model:d_ff:<22|dtype:5|hypatia:9|burn:9|vs burn:8|TF/s hy:7|TF/s bu:7|MiB hy:9|MiB bu:9|peak hy:9|peak bu:9|fused/step (linear-act/act-grad/matmul)"
    };
    let json = args.json.as_deref();
    // `--cold` prints one line a backend, no table.
    let no_header = args.no_header || args.cold.is_some();
    run_table(&args, &args.dtypes, no_header, columns, json);
}
