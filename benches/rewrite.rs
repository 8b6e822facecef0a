//! Capture + saturation + extraction + planning per window, on this machine's CPU.
//!
//! `cargo bench --bench rewrite`. No device: the rewrite stages are pure.

use criterion::{Criterion, criterion_group, criterion_main};
use hypatia::capture::Window;
use hypatia::capture::fixtures::IrBuilder;
use hypatia::plan::{PlanOptions, plan_window};
use hypatia::rewrite::Limits;
use std::hint::black_box;

/// An MLP forward of `layers` Linear + ReLU layers, as Burn emits it.
fn mlp_window(layers: usize) -> Window {
    let mut ir = IrBuilder::new();
    let mut x = ir.input(&[256, 784]);
    let mut d_in = 784;
    for _ in 0..layers {
        let (w, b) = (ir.param(&[d_in, 512]), ir.param(&[512]));
        let pre = ir.linear(x, w, Some(b));
        x = ir.relu(pre);
        d_in = 512;
    }
    ir.window(&[x])
}

fn bench_plan(c: &mut Criterion) {
    let limits = Limits::default();
    for layers in [1, 3] {
        let window = mlp_window(layers);
        c.bench_function(&format!("plan_window/{layers}-layer mlp"), |b| {
            b.iter(|| plan_window(black_box(&window), &limits, PlanOptions::default()))
        });
    }
}

criterion_group!(benches, bench_plan);
criterion_main!(benches);
