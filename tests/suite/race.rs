//! The race of a fused step against Burn's own fused matmul for its ops (`hypatia::execute::race`):
//! whichever side runs, the results are Burn's, and each real shape is decided once.

use super::check::{burn_tolerance, linear_relu_matches_burn};
use super::common::*;
use super::train::{grad_tolerance, gradients};
use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::DType;
use burn::tensor::activation::relu;
use burn::tensor::module::linear;
use hypatia::FusedPattern;
use hypatia::config::{ExecutionPolicy, RacePolicy};
use hypatia::execute::race::SAMPLES;

/// What a pattern's counters say: Hypatia's kernel runs, Burn's fused-matmul runs, races decided.
fn counters(pattern: FusedPattern) -> [u64; 3] {
    let stats = hypatia::stats(&device());
    let p = stats.patterns.get(pattern).cloned().unwrap_or_default();
    [p.steps(), p.burn_fused, p.raced]
}

/// Steps of a Linear's forms (`linear-relu`, and `linear` or `matmul` for a Linear cut from
/// its epilogue) run on either side of a race.
fn linear_steps() -> u64 {
    let stats = hypatia::stats(&device());
    ([
        FusedPattern::LinearRelu,
        FusedPattern::Linear,
        FusedPattern::Matmul,
    ]
    .iter())
    .filter_map(|name| stats.patterns.get(*name))
    .map(|p| p.steps() + p.burn_fused)
    .sum()
}

fn delta(before: [u64; 3], pattern: FusedPattern) -> [u64; 3] {
    let now = counters(pattern);
    [0, 1, 2].map(|i| now[i] - before[i])
}

/// The Linear forms a race can take, through `nn::Linear`'s own function: with bias and ReLU,
/// without bias, and without activation.
fn forms<B: Backend, const D: usize>(
    x: &TensorData,
    w: &TensorData,
    b: &TensorData,
) -> [TensorData; 3] {
    let device = Default::default();
    let x = || Tensor::<B, D>::from_data(x.clone(), &device);
    let w = || Tensor::<B, 2>::from_data(w.clone(), &device);
    let b = || Some(Tensor::<B, 1>::from_data(b.clone(), &device));
    [
        relu(linear(x(), w(), b())).into_data(),
        relu(linear(x(), w(), None)).into_data(),
        linear(x(), w(), b()).into_data(),
    ]
}

/// Burn's side, forced, on every form at odd sizes (rank 2 and 3, NaN and ±Inf in the input):
/// Burn's results, and no Hypatia kernel ran where Burn's fused matmul takes the step's ops.
#[test]
fn burns_side_gives_burns_results_on_every_form() {
    let _serial = serial();
    let _race = ConfigGuard::set(|c| c.race = RacePolicy::Burn);
    let (k, n) = (33, 65);
    let w = data(2, &[k, n], 0.2);
    let b = data(3, &[n], 1.0);
    let patterns = [FusedPattern::LinearRelu, FusedPattern::Linear];
    let before = patterns.map(counters);
    for m in [1, 17] {
        let mut x = data(1 + m as u64, &[m, k], 1.0);
        if m == 17 {
            let mut values: Vec<f32> = x.to_vec().unwrap();
            values[5] = f32::NAN;
            values[40] = f32::INFINITY;
            values[70] = f32::NEG_INFINITY;
            x = TensorData::new(values, [m, k]);
        }
        poison::<Fused>(m * n * 4, &device());
        let fused = forms::<Fused, 2>(&x, &w, &b);
        let plain = forms::<Plain, 2>(&x, &w, &b);
        for (f, p) in fused.iter().zip(&plain) {
            assert_close(f, p, 1e-5);
        }
    }
    // No Hypatia kernel ran, and Burn's side ran `on_burn` ReLU-form steps in all so far.
    let burn_side_ran = |on_burn: u64, sizes: &str| {
        let [relu, plain] = [0, 1].map(|i| delta(before[i], patterns[i]));
        assert_eq!(
            relu[0] + plain[0],
            0,
            "{sizes}: no Hypatia kernel ran: {relu:?} {plain:?}"
        );
        assert_eq!(
            relu[1], on_burn,
            "{sizes}: Burn's side ran both ReLU forms: {relu:?}"
        );
        [relu, plain]
    };
    // Only the ReLU forms' Burn-side runs are counted; for the bias-only form (a `linear`
    // step) `burn_side_ran` checks that no Hypatia kernel ran.
    let [relu, plain] = burn_side_ran(4, "rank 2, both sizes");
    assert_eq!(relu[2] + plain[2], 0, "a forced side decides no race");
    // A rank-3 Linear reshapes its weight to rank 3 before the matmul: Burn's side runs that
    // view as Burn's op, then Burn's fused matmul for the rest of the step.
    let x = data(9, &[2, 17, k], 1.0);
    let fused = forms::<Fused, 3>(&x, &w, &b);
    for (f, p) in fused.iter().zip(&forms::<Plain, 3>(&x, &w, &b)) {
        assert_close(f, p, 1e-5);
    }
    burn_side_ran(6, "rank 3");
}

/// A measured race: every execution, timed or not, gives Burn's results; the shape is decided
/// once, after each side's warm-up and `SAMPLES` timed runs; a new real shape (same plan)
/// races again.
#[test]
fn a_race_decides_each_real_shape_once() {
    let _serial = serial();
    let _race = ConfigGuard::set(|c| c.race = RacePolicy::Always);
    let (k, n) = (31, 47);
    let w = data(20, &[k, n], 0.2);
    let b = data(21, &[n], 1.0);
    let run = |m: usize, seed: u64| linear_relu_matches_burn(&data(seed, &[m, k], 1.0), &w, &b);
    let runs = 2 + 2 * SAMPLES as usize;
    for (m, races) in [(19, 1), (23, 2)] {
        let before = counters(FusedPattern::LinearRelu);
        for seed in 0..runs + 3 {
            run(m, 100 + seed as u64);
        }
        let [hypatia, burn, raced] = delta(before, FusedPattern::LinearRelu);
        assert_eq!(raced, 1, "batch {m} decided once ({races} shapes so far)");
        assert_eq!(
            hypatia + burn,
            (runs + 3) as u64,
            "one side ran each execution"
        );
        assert!(
            hypatia > SAMPLES as u64 && burn > SAMPLES as u64,
            "both sides ran: {hypatia} {burn}"
        );
    }
}

/// The default policy races on every device, also without matrix units (lavapipe), where
/// Hypatia's tiled kernel replaces Burn's matmul: a new real shape is decided once, and every
/// execution gives Burn's results. Before, `Auto` raced only where the device had matrix units.
#[test]
fn the_default_policy_races_on_every_device() {
    let _serial = serial();
    let _race = ConfigGuard::set(|c| c.race = RacePolicy::Auto);
    let (m, k, n) = (21, 37, 29);
    let w = data(30, &[k, n], 0.2);
    let b = data(31, &[n], 1.0);
    let runs = 2 + 2 * SAMPLES as usize + 2;
    let before = counters(FusedPattern::LinearRelu);
    for seed in 0..runs {
        linear_relu_matches_burn(&data(40 + seed as u64, &[m, k], 1.0), &w, &b);
    }
    let [hypatia, burn, raced] = delta(before, FusedPattern::LinearRelu);
    assert_eq!(raced, 1, "the shape was raced and decided once");
    assert_eq!(hypatia + burn, runs as u64, "one side ran each execution");
    assert!(burn >= 1, "Burn's side ran at least its warm-up: {burn}");
}

/// Equal Linears queued before one read, which burn-fusion takes a few to a window (a plan of
/// several steps, and plans of other lengths at the batch's ends), take their turns in one
/// race: it is decided once, within the first `2 + 2 * SAMPLES` of them, and the later ones
/// run the winner without timing. Linears of another form (here without bias, interleaved
/// with them) are another computation: they race on their own.
#[test]
fn equal_steps_share_one_race() {
    let _serial = serial();
    let _race = ConfigGuard::set(|c| c.race = RacePolicy::Always);
    let (m, k, n) = (13, 29, 43);
    // Each form gets a race's runs and then some.
    let launches = 2 * (2 + 2 * SAMPLES as usize + 3);
    let w = data(50, &[k, n], 0.2);
    let b = data(51, &[n], 1.0);
    let xs: Vec<_> = (0..launches)
        .map(|i| data(52 + i as u64, &[m, k], 1.0))
        .collect();
    let with_bias = |i: usize| i.is_multiple_of(2);
    let device = Default::default();
    let plain: Vec<_> = (xs.iter().enumerate())
        .map(|(i, x)| {
            let (x, w, b) = inputs::<Plain>(x, &w, &b);
            relu(linear(x, w, with_bias(i).then_some(b))).into_data()
        })
        .collect();
    // Every input uploaded first (an upload ends a window), then every launch queued before
    // the first read. Each step has a bias tensor of its own: a bias reused from step to step
    // would be read through its kept row view from its third use on (`backend::bias`), a
    // third form of step with a race of its own.
    let run = |count: usize| {
        let (_, w, _) = inputs::<Fused>(&xs[0], &w, &b);
        let xs: Vec<_> = (xs[..count].iter())
            .map(|x| Tensor::<Fused, 2>::from_data(x.clone(), &device))
            .collect();
        let bs: Vec<_> = (0..count)
            .map(|_| Tensor::<Fused, 1>::from_data(b.clone(), &device))
            .collect();
        let queued: Vec<_> = (xs.into_iter().zip(bs).enumerate())
            .map(|(i, (x, b))| relu(linear(x, w.clone(), with_bias(i).then_some(b))))
            .collect();
        for (f, p) in queued.into_iter().zip(&plain) {
            assert_close(&f.into_data(), p, burn_tolerance(DType::F32));
        }
    };
    let (before, steps) = (counters(FusedPattern::LinearRelu), linear_steps());
    run(launches);
    let [hypatia, burn, raced] = delta(before, FusedPattern::LinearRelu);
    assert_eq!(
        raced, 2,
        "one race per form for {launches} steps of two forms"
    );
    // burn-fusion may cut a window inside a step: its search stops at `max_blocks` (5)
    // independent blocks, here at a bias's reshape, which each step's own bias makes a block of
    // its own. Where plain matmuls are claimed (devices with matrix units), the step's matmul
    // then runs as a `matmul` step, and its bias and ReLU as Burn's ops in the next window.
    assert_eq!(
        linear_steps() - steps,
        launches as u64,
        "one side ran each step"
    );
    assert!(
        hypatia > 2 * SAMPLES as u64 && burn > 2 * SAMPLES as u64,
        "both sides ran their turns: {hypatia} {burn}"
    );
    // The next batch finds both races decided: none of its steps counts towards a race.
    let racing = || hypatia::stats(&device).patterns[FusedPattern::LinearRelu].racing;
    let before = racing();
    run(6);
    assert_eq!(racing(), before, "a decided race runs its winner untimed");
}

/// `x`, `w` and `b` on backend `B`.
fn inputs<B: Backend>(
    x: &TensorData,
    w: &TensorData,
    b: &TensorData,
) -> (Tensor<B, 2>, Tensor<B, 2>, Tensor<B, 1>) {
    let device = Default::default();
    (
        Tensor::from_data(x.clone(), &device),
        Tensor::from_data(w.clone(), &device),
        Tensor::from_data(b.clone(), &device),
    )
}

/// Training steps race too (the forward's Linear+ReLU, the backward's gated matmul and weight
/// gradients): under `Autodiff`, gradients equal Burn's whichever side ran.
#[test]
fn raced_backward_matches_burn() {
    let _serial = serial();
    for policy in [RacePolicy::Always, RacePolicy::Burn] {
        let _race = ConfigGuard::set(|c| c.race = policy);
        let before =
            counters(FusedPattern::LinearRelu)[1] + counters(FusedPattern::MatmulReluGrad)[1];
        for step in 0..2 + 2 * SAMPLES as u64 + 1 {
            let x = data(30 + step, &[17, 33], 1.0);
            let w = data(31, &[33, 65], 0.2);
            let b = data(32, &[65], 1.0);
            let fused = grads::<Autodiff<Fused>>(&x, &w, &b);
            let plain = grads::<Autodiff<Plain>>(&x, &w, &b);
            for (f, p) in fused.iter().zip(&plain) {
                assert_close(f, p, grad_tolerance().max(1e-4));
            }
        }
        let after =
            counters(FusedPattern::LinearRelu)[1] + counters(FusedPattern::MatmulReluGrad)[1];
        assert!(after > before, "{policy:?}: Burn's side ran some steps");
    }
}

/// A deeper backward, with every matmul claimed: each layer's gated `dy · Wᵀ` takes its ReLU
/// gate a few ops after its matmul, and the weight gradients read a transposed view made
/// outside the step. Burn's side, forced, runs every one of those steps and gives Burn's
/// gradients.
#[test]
fn burns_side_runs_every_backward_step() {
    let _serial = serial();
    let _race = ConfigGuard::set(|c| c.race = RacePolicy::Burn);
    let _policy = ConfigGuard::set(|c| c.execution = ExecutionPolicy::Tiled);
    let patterns = [FusedPattern::MatmulReluGrad, FusedPattern::Matmul];
    let before = patterns.map(counters);
    let widths = [33, 65, 17, 9];
    for batch in [1, 17] {
        let x = data(40 + batch as u64, &[batch, widths[0]], 1.0);
        let target = data(41, &[batch, widths[3]], 1.0);
        let fused = gradients::<Autodiff<Fused>, 2>(widths, x.clone(), target.clone());
        let plain = gradients::<Autodiff<Plain>, 2>(widths, x, target);
        for (f, p) in fused.iter().zip(&plain) {
            assert_close(f, p, grad_tolerance());
        }
    }
    let [gated, matmul] = [0, 1].map(|i| delta(before[i], patterns[i]));
    assert_eq!(gated[0], 0, "no gated Hypatia kernel ran: {gated:?}");
    assert_eq!(
        gated[1], 4,
        "Burn's side ran both layers' gated steps, twice: {gated:?}"
    );
    assert!(
        matmul[1] > 0,
        "Burn's side ran weight gradients: {matmul:?}"
    );
}

/// Gradients of x, w and b through relu(x·w + b)·v summed.
fn grads<B: burn::tensor::backend::AutodiffBackend>(
    x: &TensorData,
    w: &TensorData,
    b: &TensorData,
) -> [TensorData; 3] {
    let device = Default::default();
    let x = Tensor::<B, 2>::from_data(x.clone(), &device).require_grad();
    let w = Tensor::<B, 2>::from_data(w.clone(), &device).require_grad();
    let b = Tensor::<B, 1>::from_data(b.clone(), &device).require_grad();
    let v = Tensor::<B, 2>::from_data(data(33, &[65, 5], 1.0), &device);
    let loss = relu(linear(x.clone(), w.clone(), Some(b.clone())))
        .matmul(v)
        .sum();
    let g = loss.backward();
    [
        x.grad(&g).unwrap().into_data(),
        w.grad(&g).unwrap().into_data(),
        b.grad(&g).unwrap().into_data(),
    ]
}
