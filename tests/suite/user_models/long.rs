//! 200 training steps of Burn's guide model, the Transformer encoder and the SiLU classifier on
//! `Autodiff<Hypatia<B>>`, on `Autodiff<B>`, and on Burn's `CubeBackend` without Burn's
//! fusion. Over that many Adam steps any two kernel choices' trajectories part (rounding grows
//! into whole steps of parameters), so what must agree is what a user reads off a training:
//! its final loss and its accuracy on data it never trained on. Hypatia's distance from Burn
//! may be twice Burn's own (Burn against Burn without its fusion, each kernel as legitimate as
//! the other), or a floor by dtype where Burn's spread is narrower. Each step's time is
//! printed beside Burn's: speed lives in benchmarks, not in assertions.

use super::*;

/// Steps each training runs.
const STEPS: usize = 200;
/// The final loss is the mean of the last steps' losses.
const LAST: usize = 20;
/// Steps left out of the time comparison: the first ones compile and autotune.
const WARM_UP: usize = 10;
/// The accuracy's floor: five points of 100 samples.
const ACCURACY_FLOOR: f32 = 0.05;

/// What a user reads off a training.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    loss: f32,
    accuracy: f32,
}

impl Outcome {
    fn of(run: &Run) -> Self {
        let last = &run.losses[run.losses.len() - LAST..];
        Self {
            loss: last.iter().sum::<f32>() / LAST as f32,
            accuracy: run.accuracy,
        }
    }

    /// The loss's distance relative to `other`'s (at least 1), and the accuracy's.
    fn from(&self, other: &Self) -> (f32, f32) {
        (
            (self.loss - other.loss).abs() / other.loss.abs().max(1.0),
            (self.accuracy - other.accuracy).abs(),
        )
    }
}

/// `values` from step `WARM_UP` on, sorted.
fn sorted_after_warm_up(values: &[f64]) -> Vec<f64> {
    let mut values = values[WARM_UP..].to_vec();
    values.sort_by(f64::total_cmp);
    values
}

/// The `q`-quantile of `sorted`.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// A training's step times over a reference step time (Burn's median step), from step
/// `WARM_UP` on: what "every step within 2x Burn's step time" reads.
struct StepTimes {
    median: f64,
    p90: f64,
    /// The slowest step's ratio and its index.
    worst: (f64, usize),
    /// Steps over twice the reference.
    over_twice: usize,
}

impl StepTimes {
    fn against(seconds: &[f64], reference: f64) -> Self {
        let ratios: Vec<f64> = seconds.iter().map(|s| s / reference).collect();
        let sorted = sorted_after_warm_up(&ratios);
        let worst = (ratios.iter().enumerate().skip(WARM_UP))
            .map(|(step, &ratio)| (ratio, step))
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .expect("steps after the warm-up");
        Self {
            median: quantile(&sorted, 0.5),
            p90: quantile(&sorted, 0.9),
            worst,
            over_twice: sorted.iter().filter(|&&r| r > 2.0).count(),
        }
    }
}

impl core::fmt::Display for StepTimes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "median {:.2}, p90 {:.2}, worst {:.2} (step {}), over 2x {}",
            self.median, self.p90, self.worst.0, self.worst.1, self.over_twice
        )
    }
}

/// Trains `name` `STEPS` steps on Hypatia, Burn and Burn without its fusion (`bare`, CUDA
/// only), prints their outcomes and step times, and asserts Hypatia's outcome is within
/// twice Burn's spread, or the floor.
fn trains_long_as_on_burn<F: burn_cubecl::FloatElement>(
    name: &str,
    train_fused: fn(usize) -> Run,
    train_plain: fn(usize) -> Run,
    train_bare: Option<fn(usize) -> Run>,
) {
    let train_bare = train_bare.expect("Burn without its fusion (CUDA builds)");
    let before = fused_steps();
    let fused = train_fused(STEPS);
    assert!(fused_steps() > before, "{name}: Hypatia fused no step");
    let plain = train_plain(STEPS);
    let bare = train_bare(STEPS);
    let [h, b, s] = [&fused, &plain, &bare].map(Outcome::of);
    let (loss, accuracy) = h.from(&b);
    let (spread_loss, spread_accuracy) = s.from(&b);
    let loss_floor = match F::dtype() {
        DType::F32 => 2e-2,
        _ => 5e-2,
    };
    let allowed_loss = f32::max(loss_floor, 2.0 * spread_loss);
    let allowed_accuracy = f32::max(ACCURACY_FLOOR, 2.0 * spread_accuracy);
    let median = |run: &Run| quantile(&sorted_after_warm_up(&run.seconds), 0.5);
    let burn_median = median(&plain);
    let steps = |run: &Run| StepTimes::against(&run.seconds, burn_median);
    let [on_hypatia, on_burn] = [&fused, &plain].map(steps);
    eprintln!(
        "{name} in {:?}, {STEPS} steps: final loss {:.4} / {:.4} / {:.4} (Hypatia / Burn / \
         Burn without its fusion), accuracy {:.2} / {:.2} / {:.2}; from Burn: Hypatia {loss:.1e}, \
         {accuracy:.2} (allowed {allowed_loss:.1e}, {allowed_accuracy:.2}), Burn without its \
         fusion {spread_loss:.1e}, {spread_accuracy:.2}; ms a step after {WARM_UP} (median): \
         {:.2} / {:.2} / {:.2}; a step over Burn's median step: Hypatia {on_hypatia}, Burn \
         {on_burn}",
        F::dtype(),
        h.loss,
        b.loss,
        s.loss,
        h.accuracy,
        b.accuracy,
        s.accuracy,
        median(&fused) * 1e3,
        burn_median * 1e3,
        median(&bare) * 1e3,
    );
    assert!(
        b.loss < plain.losses[0],
        "{name} learns on Burn: {:?}",
        plain.losses
    );
    assert!(
        loss <= allowed_loss,
        "{name}: final loss {h:?} on Hypatia, {b:?} on Burn: {loss} > {allowed_loss}"
    );
    assert!(
        accuracy <= allowed_accuracy,
        "{name}: accuracy {h:?} on Hypatia, {b:?} on Burn: {accuracy} > {allowed_accuracy}"
    );
}

/// Burn's guide model, the Transformer encoder (dropout 0.1) and the SiLU classifier train
/// 200 steps in `F` to Burn's final loss and accuracy (CUDA: Burn without its fusion sets the
/// spread).
pub fn trains_200_steps_as_on_burn<F: burn_cubecl::FloatElement>() {
    trains_long_as_on_burn::<F>(
        "guide",
        train_guide::<Autodiff<FusedOf<F>>>,
        train_guide::<Autodiff<PlainOf<F>>>,
        bare!(train_guide, F),
    );
    trains_long_as_on_burn::<F>(
        "encoder",
        train_encoder::<Autodiff<FusedOf<F>>>,
        train_encoder::<Autodiff<PlainOf<F>>>,
        bare!(train_encoder, F),
    );
    trains_long_as_on_burn::<F>(
        "silu-mlp",
        train_silu_mlp::<Autodiff<FusedOf<F>>>,
        train_silu_mlp::<Autodiff<PlainOf<F>>>,
        bare!(train_silu_mlp, F),
    );
}
