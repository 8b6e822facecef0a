//! Capture + saturation + extraction + planning per window, on this machine's CPU.
//!
//! `cargo bench --bench rewrite`. No device: the rewrite stages are pure. After criterion's
//! report it prints the p50 and p99 of each window over 300 runs (issue 5 asks p99 ≤ 5 ms):
//! what one plan-cache miss costs the thread that runs burn-fusion's stream.

use burn_ir::OperationIr;
use criterion::{Criterion, criterion_group};
use hypatia::capture::Window;
use hypatia::capture::fixtures::{IrBuilder, T};
use hypatia::plan::{PlanOptions, plan_window};
use hypatia::rewrite::Limits;
use std::hint::black_box;
use std::time::Instant;

/// An MLP forward of `layers` Linear + activation layers, as Burn emits it.
fn mlp_forward(layers: usize, activation: fn(&mut IrBuilder, T) -> T) -> Vec<OperationIr> {
    let mut ir = IrBuilder::new();
    let mut x = ir.input(&[256, 784]);
    let mut d_in = 784;
    for _ in 0..layers {
        let (w, b) = (ir.param(&[d_in, 512]), ir.param(&[512]));
        let pre = ir.linear(x, w, Some(b));
        x = activation(&mut ir, pre);
        d_in = 512;
    }
    ir.ops(&[x])
}

/// The backward of `layers` Linear + ReLU layers: per layer `dx = relu'(pre) ⊙ dy · Wᵀ` and
/// `dW = xᵀ · dy`, as autodiff emits them.
fn mlp_backward(layers: usize) -> Vec<OperationIr> {
    let mut ir = IrBuilder::new();
    let mut dy = ir.input(&[256, 512]);
    let mut outputs = Vec::new();
    for _ in 0..layers {
        let (w, x, pre) = (
            ir.param(&[512, 512]),
            ir.input(&[256, 512]),
            ir.input(&[256, 512]),
        );
        let wt = ir.swap_dims(w, 0, 1);
        let dx = ir.matmul(dy, wt);
        let mask = ir.lower_equal_zero(pre);
        let xt = ir.swap_dims(x, 0, 1);
        outputs.push(ir.matmul(xt, dy));
        dy = ir.mask_fill(dx, mask);
    }
    outputs.push(dy);
    ir.ops(&outputs)
}

/// The windows timed, by name.
fn windows() -> Vec<(String, Vec<OperationIr>)> {
    let relu: fn(&mut IrBuilder, T) -> T = IrBuilder::relu;
    let gelu: fn(&mut IrBuilder, T) -> T = IrBuilder::gelu;
    let mut windows: Vec<(String, Vec<OperationIr>)> = [1, 3, 6]
        .into_iter()
        .map(|layers| {
            (
                format!("{layers}-layer relu mlp"),
                mlp_forward(layers, relu),
            )
        })
        .collect();
    windows.push(("3-layer gelu mlp".into(), mlp_forward(3, gelu)));
    windows.push(("2-layer relu backward".into(), mlp_backward(2)));
    windows
}

/// Capture (the window and its canonical form, op by op, as the fuser builds them) and plan.
fn capture_and_plan(ops: &[OperationIr], limits: &Limits, options: PlanOptions) {
    let mut window = Window::new();
    for op in ops {
        window.push(op);
    }
    let canonical = window.canonical();
    black_box(plan_window(&canonical.window, limits, options));
}

/// Options as on a device with matrix units: every pattern on.
fn options() -> PlanOptions {
    PlanOptions {
        plain_matmuls: true,
        linears: true,
        ..PlanOptions::default()
    }
}

fn bench_plan(c: &mut Criterion) {
    let limits = Limits::default();
    for (name, ops) in windows() {
        c.bench_function(&format!("capture+plan/{name} ({} ops)", ops.len()), |b| {
            b.iter(|| capture_and_plan(black_box(&ops), &limits, options()))
        });
    }
}

/// p50 and p99 of each window over 300 runs.
fn percentiles() {
    let limits = Limits::default();
    println!(
        "\n{:<28} {:>5} {:>10} {:>10}",
        "window", "ops", "p50 ms", "p99 ms"
    );
    let mut worst = 0.0f64;
    for (name, ops) in windows() {
        let mut times: Vec<f64> = (0..300)
            .map(|_| {
                let start = Instant::now();
                capture_and_plan(&ops, &limits, options());
                start.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let (p50, p99) = (times[150], times[297]);
        worst = worst.max(p99);
        println!("{name:<28} {:>5} {p50:>10.3} {p99:>10.3}", ops.len());
    }
    println!("worst p99: {worst:.3} ms (issue 5's bound: 5 ms)");
}

// No plots: their font lookup fails on machines without fonts (this one, CI).
criterion_group! {
    name = benches;
    config = Criterion::default().without_plots();
    targets = bench_plan
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    percentiles();
}
