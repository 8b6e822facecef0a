//! Shared helpers: the two backends, seeded data and tolerant comparison.

use burn::prelude::*;
use burn::tensor::DType;
use hypatia::FusedPattern;

#[cfg(not(feature = "cuda"))]
mod backends {
    /// The plain Burn backend (its own fusion on) with float type `F`.
    pub type PlainOf<F> = burn::backend::Wgpu<F, i32>;
    pub type TestDevice = burn::backend::wgpu::WgpuDevice;
    pub type Runtime = cubecl::wgpu::WgpuRuntime;
}

#[cfg(feature = "cuda")]
mod backends {
    /// The plain Burn backend (its own fusion on) with float type `F`.
    pub type PlainOf<F> = burn::backend::Cuda<F, i32>;
    pub type TestDevice = burn::backend::cuda::CudaDevice;
    pub type Runtime = cubecl::cuda::CudaRuntime;
}

pub use backends::*;

/// The plain backend in f32.
pub type Plain = PlainOf<f32>;
/// The same backend decorated by Hypatia.
pub type Fused = hypatia::Hypatia<Plain>;
/// Hypatia over a bare `CubeBackend` (no Burn fusion underneath to begin with).
pub type FusedBare = hypatia::Hypatia<burn_cubecl::CubeBackend<Runtime, f32, i32, u32>>;
/// Decorated backend with float type `F`.
pub type FusedOf<F> = hypatia::Hypatia<PlainOf<F>>;

pub fn device() -> TestDevice {
    // `RUST_LOG=hypatia=debug` shows what was fused and why not.
    let _ = env_logger::builder().is_test(true).try_init();
    // Tests count Hypatia's kernel runs, so steps are not raced against Burn's fused matmul
    // (a timing decision) unless a test asks (`ConfigGuard`) or `HYPATIA_RACE` is set.
    static RACE_OFF: std::sync::Once = std::sync::Once::new();
    RACE_OFF.call_once(|| {
        if std::env::var("HYPATIA_RACE").is_err() {
            hypatia::config::update_config(|c| c.race = hypatia::config::RacePolicy::Never);
        }
    });
    TestDevice::default()
}

/// GELU's derivative at `g` as Burn 0.21's `gelu_backward` computes it (the tanh
/// approximation's, for both GELUs), in float64: the reference of the fused GELU backward.
#[allow(dead_code)] // not every test binary that includes this module checks it
pub fn gelu_grad_reference(g: f64) -> f64 {
    let g3 = g.powi(3);
    let t = (g3 * 0.0356774 + g * 0.797885).tanh();
    t * 0.5 + ((g3 * 0.0535161 + g * 0.398942) * (-(t * t) + 1.0) + 0.5)
}

/// SiLU's gradient at the pre-activation `x` applied to `dh`, as Burn 0.21's `Autodiff`
/// composes it from `x · sigmoid(x)`, in float64 and in its order (`dh · s` plus
/// `(σ · (1 - σ)) · (dh · x)`, so an infinite `x` gives NaN as Burn's does): the reference of
/// the fused SiLU backward.
#[allow(dead_code)] // not every test binary that includes this module checks it
pub fn silu_grad_reference(x: f64, dh: f64) -> f64 {
    silu_grad_with_saved(x, sigmoid_reference(x), dh)
}

/// [`silu_grad_reference`] with the forward's saved sigmoid `s` given (as a kernel reads it,
/// rounded to the dtype), σ recomputed from `x`.
#[allow(dead_code)] // not every test binary that includes this module checks it
pub fn silu_grad_with_saved(x: f64, s: f64, dh: f64) -> f64 {
    let sigmoid = sigmoid_reference(x);
    dh * s + (sigmoid * (-sigmoid + 1.0)) * (dh * x)
}

/// Tanh GELU's gradient at the pre-activation `x` applied to `dh`, as Burn 0.21's `Autodiff`
/// composes it from `gelu_approximate`'s ops, in float64 and in its order (with `h = dh / 2`
/// and `t` the tanh of `√(2/π) · (x + 0.044715 · x³)`: `d = ((h · x) · (1 - t²)) · √(2/π)`,
/// then `(d + h · (t + 1)) + (d · 0.044715) · (x² · 3)`): the reference of the fused tanh GELU
/// backward.
#[allow(dead_code)] // not every test binary that includes this module checks it
pub fn gelu_tanh_grad_reference(x: f64, dh: f64) -> f64 {
    let inner = gelu_tanh_inner(x);
    gelu_tanh_grad_with_saved(x, inner.tanh() + 1.0, inner, dh)
}

/// The input of tanh GELU's tanh, `√(2/π) · (x + 0.044715 · x³)`, in float64.
#[allow(dead_code)] // not every test binary that includes this module checks it
pub fn gelu_tanh_inner(x: f64) -> f64 {
    (x + x.powi(3) * 0.044715) * (2.0 / std::f64::consts::PI).sqrt()
}

/// [`gelu_tanh_grad_reference`] with the forward's saved `u = tanh(i) + 1` and tanh input `i`
/// given (as a kernel reads them, rounded to the dtype), `tanh(i)` recomputed.
#[allow(dead_code)] // not every test binary that includes this module checks it
pub fn gelu_tanh_grad_with_saved(x: f64, u: f64, i: f64, dh: f64) -> f64 {
    let t = i.tanh();
    let half = dh * 0.5;
    let d = ((half * x) * (-(t * t) + 1.0)) * (2.0 / std::f64::consts::PI).sqrt();
    (d + half * u) + (d * 0.044715) * ((x * x) * 3.0)
}

/// burn-backend's `sigmoid`, `exp(-ln(exp(-x) + 1))`, in float64.
#[allow(dead_code)] // not every test binary that includes this module checks it
pub fn sigmoid_reference(x: f64) -> f64 {
    (-(((-x).exp() + 1.0).ln())).exp()
}

/// Deterministic values in [-1, 1) (a 64-bit LCG; no dependency, same on every machine).
pub fn values(seed: u64, len: usize) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Seeded data of `shape`, scaled by `scale`.
pub fn data(seed: u64, shape: &[usize], scale: f32) -> TensorData {
    let len = shape.iter().product();
    TensorData::new(
        values(seed, len).into_iter().map(|v| v * scale).collect(),
        shape.to_vec(),
    )
}

/// Tolerance by dtype, relative to the largest reference magnitude.
pub fn tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F16 => 2e-3,
        DType::BF16 => 1e-2,
        _ => 1e-5,
    }
}

/// How close two trainings of one model stay, Hypatia's and Burn's: losses relative to
/// max(1, |loss|), parameters and predictions by [`assert_norm_close`]. Summation orders differ
/// (Hypatia's tiles against Burn's), so Adam steps compound rounding differences: a parameter
/// whose gradient is near zero can step either way. On CUDA Hypatia's f32 default is TF32,
/// which Burn's kernels are not at every shape (seen on an H100 after 100 steps: 2.4e-2).
pub fn train_tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F32 | DType::Flex32 if cfg!(feature = "cuda") => 5e-2,
        DType::F32 | DType::Flex32 => 1e-3,
        // bf16 and f16: Burn's guide model trained 12 steps in bf16 on an H200 came within
        // 2.1e-2 of Burn's predictions and 7.6e-3 of its parameters.
        _ => 5e-2,
    }
}

/// Asserts equal shapes, identical NaN / ±Inf positions, and finite values within `tol`
/// relative error (‖a − b‖∞ / max(1, ‖b‖∞)).
pub fn assert_close(actual: &TensorData, expected: &TensorData, tol: f32) {
    assert_close_at(actual, expected, tol, scale_of(expected));
}

/// The largest finite magnitude in `data`, and at least 1.
pub fn scale_of(data: &TensorData) -> f32 {
    let v: Vec<f32> = data.clone().convert::<f32>().to_vec().unwrap();
    (v.iter())
        .filter(|v| v.is_finite())
        .fold(1.0f32, |m, v| m.max(v.abs()))
}

/// [`assert_close`] with errors relative to `scale` (e.g. a matmul's, where an activation
/// shrinks its output).
pub fn assert_close_at(actual: &TensorData, expected: &TensorData, tol: f32, scale: f32) {
    assert_eq!(actual.shape, expected.shape, "shapes differ");
    let a: Vec<f32> = actual.clone().convert::<f32>().to_vec().unwrap();
    let b: Vec<f32> = expected.clone().convert::<f32>().to_vec().unwrap();
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        if y.is_nan() || x.is_nan() {
            assert!(x.is_nan() && y.is_nan(), "NaN mismatch at {i}: {x} vs {y}");
        } else if y.is_infinite() || x.is_infinite() {
            assert_eq!(x, y, "Inf mismatch at {i}");
        } else {
            assert!(
                (x - y).abs() <= tol * scale,
                "value mismatch at {i}: {x} vs {y} (tol {tol}, scale {scale})"
            );
        }
    }
}

/// Fills recently freed device memory with NaN so that an output element the kernel forgets
/// to write shows up as a mismatch rather than as a stale correct value.
pub fn poison<B: Backend>(elements: usize, device: &B::Device) {
    let nan = Tensor::<B, 1>::full([elements.max(1)], f32::NAN, device);
    let _ = nan.into_data();
}

/// `linear-relu` steps Hypatia ran so far on the test device (any path).
pub fn executed() -> u64 {
    hypatia::stats(&device()).executed(FusedPattern::LinearRelu)
}

/// Asserts ‖a − b‖₂ / ‖b‖₂ ≤ `tol` over the finite values, and identical NaN positions.
pub fn assert_norm_close(actual: &TensorData, expected: &TensorData, tol: f32) {
    let relative = norm_error(actual, expected);
    assert!(relative <= tol, "relative error {relative} > {tol}");
}

/// ‖a − b‖ / ‖b‖ over the finite values, after asserting equal shapes and NaN positions.
pub fn norm_error(actual: &TensorData, expected: &TensorData) -> f32 {
    assert_eq!(actual.shape, expected.shape, "shapes differ");
    let a: Vec<f32> = actual.clone().convert::<f32>().to_vec().unwrap();
    let b: Vec<f32> = expected.clone().convert::<f32>().to_vec().unwrap();
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.is_nan(), y.is_nan(), "NaN mismatch: {x} vs {y}");
        if x.is_finite() && y.is_finite() {
            diff += ((x - y) as f64).powi(2);
            norm += (*y as f64).powi(2);
        }
    }
    (diff.sqrt() / norm.sqrt().max(1e-30)) as f32
}

/// Held for the whole body of every test that runs ops on the device (`let _serial =
/// serial();` first): such tests run one at a time, the rest in parallel, so the suite runs
/// with the default thread count.
///
/// What these tests change or count is process-wide. The configuration: burn-fusion's thread
/// reads it and Burn's tensor API has no place to pass one, so a test of a policy through that
/// API changes the process's ([`ConfigGuard`]); tests of the choices themselves build a
/// `HypatiaConfig` and pass it (`src/execute/policy.rs`). The counters (`hypatia::stats`): a
/// test reads how many launches its own ops made. Burn's seed, which the learner and property
/// tests set to compare two backends on equal weights.
pub struct Serial(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

thread_local! {
    /// Whether this thread holds [`serial`]'s lock.
    static SERIAL_HELD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Takes the device tests' lock ([`Serial`]).
pub fn serial() -> Serial {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A failed test poisons the lock; its guards have put back the configuration already.
    let guard = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    SERIAL_HELD.set(true);
    Serial(guard)
}

impl Drop for Serial {
    fn drop(&mut self) {
        SERIAL_HELD.set(false);
    }
}

/// Changes the process's configuration until the guard drops, then puts back the one before,
/// even when an assertion fails. Only under [`serial`]: another test would run with this one's
/// configuration.
pub struct ConfigGuard(Option<hypatia::config::HypatiaConfig>);

impl ConfigGuard {
    pub fn set(change: impl FnOnce(&mut hypatia::config::HypatiaConfig)) -> Self {
        assert!(
            SERIAL_HELD.get(),
            "a test that changes the configuration holds `serial()` first"
        );
        let _ = device();
        Self(Some(hypatia::config::update_config(change)))
    }
}

impl Drop for ConfigGuard {
    fn drop(&mut self) {
        if let Some(before) = self.0.take() {
            hypatia::config::set_config(before);
        }
    }
}

/// MLP-chain launches Hypatia ran so far on the test device.
pub fn chain_launches() -> u64 {
    hypatia::stats(&device())
        .patterns
        .get(FusedPattern::MlpChain)
        .map_or(0, |p| p.tiled)
}

/// `path` (relative to the repository root): under the directory the crate was built in, or,
/// where the binary runs on a copy of the checkout elsewhere (a GPU machine), under the first
/// directory above the working directory that holds `tests/fixtures`.
#[allow(dead_code)] // not every test binary reads repository files
pub fn repo_file(path: &str) -> std::path::PathBuf {
    let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    if built.join(path).exists() {
        return built.join(path);
    }
    let cwd = std::env::current_dir().expect("a working directory");
    (cwd.ancestors())
        .find(|dir| dir.join("tests/fixtures").is_dir())
        .map_or_else(|| built.join(path), |root| root.join(path))
}

/// A backend `Autodiff` can wrap: with the `distributed` feature Burn's `Autodiff<B>` is an
/// `AutodiffBackend` only where `B` is also a `DistributedBackend`.
#[cfg(feature = "distributed")]
pub trait Differentiable: Backend + burn::tensor::backend::distributed::DistributedBackend {}
#[cfg(feature = "distributed")]
impl<B: Backend + burn::tensor::backend::distributed::DistributedBackend> Differentiable for B {}
/// A backend `Autodiff` can wrap.
#[cfg(not(feature = "distributed"))]
pub trait Differentiable: Backend {}
#[cfg(not(feature = "distributed"))]
impl<B: Backend> Differentiable for B {}

/// Names the test that a child process of this binary was started to run ([`in_child`]).
const CHILD: &str = "HYPATIA_TEST_CHILD";

/// Whether this process is the child [`in_child`] started for the test `name` (or for the
/// group of tests whose names `name` starts with).
pub fn is_child(name: &str) -> bool {
    std::env::var(CHILD).is_ok_and(|child| name.starts_with(&child))
}

/// Runs the test `name` (libtest's path, e.g. `suite::startup::child`) alone in a fresh process
/// of this test binary, with `envs` set, and waits at most `limit`; a `name` ending in `::` runs
/// every test of that module there, ignored ones too, one after another. A process of its own
/// is for what cannot share one with the f32 suite: a device's float dtype (Burn fixes it at
/// the first tensor), plans burn-fusion stored before a setting changed, a device's start-up.
/// `Err` says how the child ended when it did not pass in time; its output is printed either
/// way.
pub fn in_child(
    name: &str,
    envs: &[(&str, &str)],
    limit: std::time::Duration,
) -> Result<(), String> {
    use std::io::Read;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut command = std::process::Command::new(exe);
    let group = name.ends_with("::");
    if !group {
        command.arg("--exact");
    }
    command
        .args([name, "--include-ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD, name)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (key, value) in envs {
        command.env(key, value);
    }
    let mut child = command.spawn().map_err(|e| e.to_string())?;
    // Read both pipes while the child runs, so that a chatty child never blocks on a full one.
    fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    }
    let stdout = drain(child.stdout.take().expect("stdout is piped"));
    let stderr = drain(child.stderr.take().expect("stderr is piped"));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let text = stdout.join().unwrap_or_default() + &stderr.join().unwrap_or_default();
    println!("{text}");
    // The filter found the test, or tests (a renamed one would pass with none run).
    let ran = match group {
        true => !text.contains(" 0 passed"),
        false => text.contains(" 1 passed"),
    };
    match status {
        Some(status) if status.success() && ran => Ok(()),
        Some(status) => Err(format!("{name}: the child failed ({status})")),
        None => Err(format!("{name}: no result after {limit:?}: it hung")),
    }
}

/// Where the process [`from_a_process_of_its_own`] started writes what it ran, as MessagePack
/// (a diverged run's NaN loss arrives as NaN; JSON has no NaN).
const SIDE_OUT: &str = "HYPATIA_TEST_SIDE_OUT";

/// In the process [`from_a_process_of_its_own`] started: where the test writes what that
/// call returns ([`SideOut::write`]), having run that side alone. `None` in any other process.
pub fn side_out() -> Option<SideOut> {
    std::env::var_os(SIDE_OUT).map(|path| SideOut(path.into()))
}

/// The file a side run in a process of its own writes to ([`side_out`]).
pub struct SideOut(std::path::PathBuf);

impl SideOut {
    /// Writes `value` for the parent process to read.
    pub fn write<T: serde::Serialize>(self, value: &T) {
        let bytes = rmp_serde::to_vec(value).expect("the side's result serialises");
        std::fs::write(&self.0, bytes).expect("the side's result is written");
    }
}

/// Runs the current test again in a fresh process of this test binary, in which [`side_out`]
/// is `Some`: the test runs one side there (e.g. Burn's reference training) and writes its
/// result, which this returns. A reference run must be Burn as a user runs it, alone in its
/// process: Burn 0.21 keeps state per process that the first backend on a device settles for
/// every later one (the device's bool type, the fused-matmul autotune picks), so a Burn run
/// after Hypatia's in the same process is not the Burn a user runs (decision record 0032).
pub fn from_a_process_of_its_own<T: serde::de::DeserializeOwned>(limit: std::time::Duration) -> T {
    let thread = std::thread::current();
    // libtest runs each test on a thread named after the test's path.
    let name = thread
        .name()
        .expect("a test's thread is named after the test");
    let path = std::env::temp_dir().join(format!(
        "hypatia-side-{}-{}.msgpack",
        std::process::id(),
        name.replace("::", "-")
    ));
    let path_text = path.to_str().expect("a UTF-8 temporary path");
    if let Err(e) = in_child(name, &[(SIDE_OUT, path_text)], limit) {
        panic!("{e}");
    }
    let bytes = std::fs::read(&path).expect("the child wrote its result");
    let _ = std::fs::remove_file(&path);
    rmp_serde::from_slice(&bytes).expect("the child's result parses")
}
