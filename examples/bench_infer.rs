//! Small-batch MLP inference latency (issue 5's target): one forward of
//! Linear-ReLU-Linear-ReLU-Linear and a `sync`, on `Hypatia<B>`, Burn's `B` (its fusion on) and
//! `CubeBackend` (no fusion), side by side in one process per dtype. Each forward is timed
//! alone, from the first op to the end of the `sync` (what a caller waiting for one prediction
//! sees), right after an untimed empty `sync` of its own backend (`--idle-us` times it after
//! other work instead: decision record 0024); the three backends take turns, so drift in the
//! machine's state hits all alike.
//! Medians (and p90) of `--runs` forwards after `--warmup` untimed ones.
//!
//! ```text
//! cargo run --release --features cuda --example bench_infer -- --dtypes f32,bf16 --json out.json
//! python3 tools/device/py/torch_infer.py --dtypes f32,bf16      # PyTorch eager, the same protocol
//! ```

use burn::prelude::*;
use burn::tensor::Element;
use clap::Parser;
use std::time::Instant;

#[path = "common/bench.rs"]
mod bench;
#[path = "common/device.rs"]
mod device;
use bench::runtime::*;
use bench::{Mlp, PerDtype, median, run_table};

type Bare<F> = burn_cubecl::CubeBackend<Runtime, F, i32, u8>;

#[derive(Parser, Debug)]
struct Args {
    /// Element types, comma separated: f32, f16, bf16.
    #[arg(long, default_value = "f32,bf16")]
    dtypes: String,
    /// Layer widths d_in:hidden:...:d_out.
    #[arg(long, default_value = "784:512:512:10")]
    widths: String,
    /// Batch sizes, comma separated.
    #[arg(long, default_value = "1,8,32")]
    batches: String,
    /// Untimed forwards per backend first (autotune, plan cache).
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    /// Timed forwards per backend.
    #[arg(long, default_value_t = 300)]
    runs: usize,
    /// Which backends to time, comma separated: hypatia, burn, cube (the others print 0).
    #[arg(long, default_value = "hypatia,burn,cube")]
    backends: String,
    /// Host time spent elsewhere before each timed forward, µs (spinning). With 0, each timed
    /// forward follows an untimed empty `sync` of its own backend, so burn-fusion's and
    /// CubeCL's device threads are awake, as in back-to-back inference; idle longer, CubeCL
    /// 0.10's device threads go to sleep in 150 µs steps, and the next forward waits for them
    /// (decision record 0024).
    #[arg(long, default_value_t = 0)]
    idle_us: u64,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Leave out the table header (used for the per-dtype child processes).
    #[arg(long)]
    no_header: bool,
}

/// A backend ready to time: called with `true`, one forward + sync; with `false`, a sync alone.
type Timed = Box<dyn FnMut(bool) -> (f64, f64)>;

/// One backend's forward + sync, returning (total ms, ms before the sync); a call with
/// `forward` false times a `sync` with nothing queued (the floor of every forward).
fn forward<B: Backend>(widths: &[usize], batch: usize) -> Timed {
    let device = B::Device::default();
    let model = Mlp::<B>::new(widths, &device);
    let normal = burn::tensor::Distribution::Normal(0.0, 1.0);
    let x = Tensor::<B, 2>::random([batch, widths[0]], normal, &device);
    assert_eq!(
        x.dtype(),
        B::FloatElem::dtype(),
        "one float dtype per process (Burn 0.21)"
    );
    Box::new(move |forward| {
        let start = Instant::now();
        let y = forward.then(|| model.forward(x.clone()));
        let host = start.elapsed().as_secs_f64() * 1e3;
        B::sync(&device).expect("sync");
        let ms = start.elapsed().as_secs_f64() * 1e3;
        drop(y);
        (ms, host)
    })
}

/// The median and 90th percentile of `v`.
fn summary(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[(v.len() * 9 / 10).min(v.len() - 1)])
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Row {
    widths: String,
    batch: usize,
    dtype: String,
    /// Median ms of one forward + sync: Hypatia, Burn (fusion on), CubeBackend.
    ms: [f64; 3],
    /// 90th percentile ms, same order.
    p90_ms: [f64; 3],
    /// Median ms before the sync (recording and launching), same order.
    host_ms: [f64; 3],
    /// Median ms of a `sync` with nothing queued, same order.
    sync_ms: [f64; 3],
    /// Hypatia's host microseconds per forward: in its fuser and executing its claimed blocks
    /// (means), and the median forward's execution.
    hypatia_host_us: [f64; 3],
    /// Hypatia's fused steps per forward, by pattern.
    fused_per_forward: Vec<(String, f64)>,
}

impl PerDtype<Row> for Args {
    fn run<F: burn_cubecl::FloatElement>(&self, rows: &mut Vec<Row>) {
        run::<F>(self, rows)
    }
}

/// The rows of float type `F`: one per batch size.
fn run<F: burn_cubecl::FloatElement>(args: &Args, rows: &mut Vec<Row>) {
    let device = burn::tensor::Device::<PlainOf<F>>::default();
    let dtype = format!("{:?}", F::dtype()).to_lowercase();
    let widths: Vec<usize> = args
        .widths
        .split(':')
        .map(|d| d.parse().expect("d_in:hidden:...:d_out"))
        .collect();
    for batch in args.batches.split(',') {
        let batch: usize = batch.parse().expect("a batch size");
        let mut backends: [Timed; 3] = [
            forward::<hypatia::Hypatia<PlainOf<F>>>(&widths, batch),
            forward::<PlainOf<F>>(&widths, batch),
            forward::<Bare<F>>(&widths, batch),
        ];
        let enabled = ["hypatia", "burn", "cube"].map(|name| args.backends.contains(name));
        for _ in 0..args.warmup {
            for (f, _) in backends.iter_mut().zip(enabled).filter(|(_, on)| *on) {
                f(true);
            }
        }
        let before = hypatia::stats(&device);
        let mut times: [Vec<(f64, f64)>; 3] = Default::default();
        let mut syncs: [Vec<f64>; 3] = Default::default();
        // Hypatia's execution time of each forward (the counters are read outside the timing).
        let mut executes = Vec::with_capacity(args.runs);
        let execute_nanos = || hypatia::stats(&device).host.execute_nanos;
        for run in 0..args.runs {
            // Each backend goes first in turn.
            for i in 0..3 {
                let b = (run + i) % 3;
                if !enabled[b] {
                    times[b].push((0.0, 0.0));
                    syncs[b].push(0.0);
                    continue;
                }
                // Each backend from the same state: awake, or idle as long as `idle_us` says
                // (whatever ran before, another backend's forward included).
                match args.idle_us {
                    0 => {
                        let _ = backends[b](false);
                    }
                    idle => {
                        let until = Instant::now() + std::time::Duration::from_micros(idle);
                        while Instant::now() < until {
                            std::hint::spin_loop();
                        }
                    }
                }
                let executed = (b == 0).then(execute_nanos);
                times[b].push(backends[b](true));
                if let Some(executed) = executed {
                    executes.push((execute_nanos() - executed) as f64 / 1e3);
                }
                syncs[b].push(backends[b](false).0);
            }
        }
        let after = hypatia::stats(&device);
        let per_forward = |a: u64, b: u64| (a - b) as f64 / args.runs as f64 / 1e3;
        let host_us = [
            per_forward(after.host.fuser_nanos, before.host.fuser_nanos),
            per_forward(after.host.execute_nanos, before.host.execute_nanos),
            if executes.is_empty() {
                0.0
            } else {
                median(executes)
            },
        ];
        let sync_ms = syncs.map(median);
        let fused_per_forward = after
            .patterns
            .iter()
            .map(|(name, p)| {
                let was = (before.patterns.get(name)).map_or(0, hypatia::PatternStats::steps);
                (
                    name.to_string(),
                    (p.steps() - was) as f64 / args.runs as f64,
                )
            })
            .filter(|(_, n)| *n > 0.0)
            .collect::<Vec<_>>();
        let stats = times.map(|t| {
            let (ms, host): (Vec<f64>, Vec<f64>) = t.into_iter().unzip();
            let (median_ms, p90) = summary(ms);
            (median_ms, p90, median(host))
        });
        let ms = stats.map(|s| s.0);
        let fused = fused_per_forward
            .iter()
            .map(|(name, n)| format!("{name} {n:.1}"))
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "{:<16} {batch:>5} {dtype:>5} {:>9.4} {:>9.4} {:>9.4} {:>8.2}x {:>9.4} {:>9.4} {:>7.4} {:>7.4} {:>7.4} {:>6.1}/{:>5.1}/{:<5.1}  {fused}",
            args.widths,
            ms[0],
            ms[1],
            ms[2],
            ms[1] / ms[0],
            stats[0].2,
            stats[1].2,
            sync_ms[0],
            sync_ms[1],
            sync_ms[2],
            host_us[0],
            host_us[1],
            host_us[2],
        );
        rows.push(Row {
            widths: args.widths.clone(),
            batch,
            dtype: dtype.clone(),
            ms,
            p90_ms: stats.map(|s| s.1),
            host_ms: stats.map(|s| s.2),
            sync_ms,
            hypatia_host_us: host_us,
            fused_per_forward,
        });
    }
}

fn main() {
    device::require_device();
    env_logger::init();
    let args = Args::parse();
    let columns = "widths:<16|batch:5|dtype:5|hypatia:9|burn:9|cube:9|vs burn:9|host hy:9|host bu:9|sync hy:7|sync bu:7|sync cu:7|hy us fus/exe/med:18|fused per forward";
    let json = args.json.as_deref();
    run_table(&args, &args.dtypes, args.no_header, columns, json);
}
