//! `--step-times`: where each device's training thread spends a Learner step, on the host.
//!
//! burn-train calls [`TrainStep::step`](burn::train::TrainStep) once a batch on each device's
//! thread; the step records the forward pass, then `backward` (under DDP also the wait for
//! every device's gradients and the collective sync), and returns. What the thread does between
//! two steps (the optimizer step, handing the item to burn-train's metric thread, taking the
//! next batch) is the gap. Where a step is GPU-bound the three add up to the GPU's step time,
//! and the one that grows shows where the thread waits.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

static ON: AtomicBool = AtomicBool::new(false);
/// Per device: each step's (forward, backward, gap before it), in ms.
static TIMES: Mutex<BTreeMap<String, Vec<[f64; 3]>>> = Mutex::new(BTreeMap::new());

thread_local! {
    /// When this thread's last step returned.
    static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Starts recording.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Whether steps are recorded.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Records a step of `device` that started at `start`, its forward pass done at `forward`.
pub fn record(device: String, start: Instant, forward: Instant) {
    let end = Instant::now();
    let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
    // A thread's first step has no gap before it, and is left out.
    if let Some(last) = LAST.with(|last| last.replace(Some(end))) {
        let step = [ms(start, forward), ms(forward, end), ms(last, start)];
        TIMES.lock().unwrap().entry(device).or_default().push(step);
    }
}

/// A table of each device's steps: count, then the median and 90th percentile (ms) of the
/// forward pass, the backward pass and the gap before the step, and of their sum.
pub fn report() -> String {
    let times = TIMES.lock().unwrap();
    let mut out = String::from(
        "step times (ms, median / p90): device, steps, forward, backward, gap, step\n",
    );
    for (device, steps) in times.iter() {
        let column = |f: &dyn Fn(&[f64; 3]) -> f64| {
            let mut v: Vec<f64> = steps.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
            format!("{:.2} / {:.2}", at(0.5), at(0.9))
        };
        out += &format!(
            "{device}  {}  {}  {}  {}  {}\n",
            steps.len(),
            column(&|s| s[0]),
            column(&|s| s[1]),
            column(&|s| s[2]),
            column(&|s| s.iter().sum())
        );
    }
    out
}
