//! Fallback: run claimed ops exactly as Burn would, one by one, on the inner backend.
//!
//! Used when a plan cannot run as fused (a scalar guard fails, a shape the kernel does not
//! take, a kernel that failed to compile or launch, a result that [`verify`](super::verify) mode rejected):
//! the block was claimed, so Hypatia owes it an execution. Each op's own closure (what
//! `Fusion` registered) runs on the inner backend, so results are Burn's bit for bit.
//!
//! Errors the device reports go back to the user as Burn would report them: at the next
//! `B::sync` or tensor read, as an [`ExecutionError`] (kept by `defer_error` until then).

use super::verify::Mismatch;
use burn_backend::ExecutionError;
use burn_fusion::FusionRuntime;
use burn_fusion::stream::{Context, OrderedExecution};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

/// Why a claimed plan (or one of its steps) ran Burn's ops instead of the fused kernel.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FallbackReason {
    /// A scalar of the claimed ops did not have the value the fused activation assumes (e.g.
    /// `clamp_min(x, 0.5)` has relu's shape but not its threshold).
    #[error("scalar {id} is {value}, the fused activation needs {expected}")]
    ScalarMismatch {
        /// Relative scalar id.
        id: u64,
        /// Its value at run time.
        value: f64,
        /// The value the fused kernel computes with.
        expected: f64,
    },
    /// The kernel refused the real shapes or types.
    #[error("kernel: {0}")]
    Kernel(#[from] crate::kernel::KernelError),
    /// The device could not compile or launch the fused kernel (checked at a step's first
    /// execution); the step runs Burn's ops from then on.
    #[error("the fused kernel failed to launch: {0}")]
    Launch(String),
    /// [`verify`](super::verify) mode found the fused result differing from Burn's ops; the step runs Burn's
    /// ops from then on.
    #[error("{0}")]
    Mismatch(Box<Mismatch>),
}

impl FallbackReason {
    /// A short stable name, used as a key in [`FusionStats`](crate::FusionStats).
    pub fn key(&self) -> &'static str {
        match self {
            FallbackReason::ScalarMismatch { .. } => "scalar-mismatch",
            FallbackReason::Kernel(error) => error.key(),
            FallbackReason::Launch(_) => "launch-failed",
            FallbackReason::Mismatch(_) => "verify-mismatch",
        }
    }

    /// Whether the step should not try its kernel again: a failure of the kernel itself, not
    /// of this execution's inputs.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            FallbackReason::Launch(_) | FallbackReason::Mismatch(_)
        )
    }
}

/// Runs block ops `indices` (in that order) through their unfused closures.
pub fn run_unfused<H: FusionRuntime>(
    indices: impl IntoIterator<Item = usize>,
    context: &mut Context<H::FusionHandle>,
    execution: &OrderedExecution<H>,
) {
    for index in indices {
        execution
            .operation_within_optimization(index)
            .execute(&mut context.handles);
    }
}

/// Errors waiting for the user's next sync or read, per device key.
fn deferred() -> &'static Mutex<HashMap<String, Vec<String>>> {
    static DEFERRED: OnceLock<Mutex<HashMap<String, Vec<String>>>> = OnceLock::new();
    DEFERRED.get_or_init(Default::default)
}

/// Set while any error waits, so that reads skip the lock when none does (the usual case).
static ANY_DEFERRED: AtomicBool = AtomicBool::new(false);

/// Keeps `reason` for the user: the next `B::sync(device)` or tensor read on `device` returns
/// it as an [`ExecutionError`], where Burn reports device errors. The stream itself runs on
/// (with Burn's results), so nothing is left half-executed.
pub(crate) fn defer_error(device_key: &str, reason: String) {
    let mut map = deferred()
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    map.entry(device_key.to_string()).or_default().push(reason);
    ANY_DEFERRED.store(true, Ordering::Release);
}

/// The errors [`defer_error`] kept for `device`, as one [`ExecutionError`], and forgets them.
pub(crate) fn take_deferred<D: cubecl::device::Device>(device: &D) -> Option<ExecutionError> {
    if !ANY_DEFERRED.load(Ordering::Acquire) {
        return None;
    }
    let mut map = deferred()
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    let reasons = map.remove(&crate::stats::device_key(device))?;
    ANY_DEFERRED.store(!map.is_empty(), Ordering::Release);
    Some(ExecutionError::WithContext {
        reason: reasons.join("\n"),
    })
}
