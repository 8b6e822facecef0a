//! The check of a fused step's first launch: did the device compile and launch the kernel?
//!
//! CubeCL launches asynchronously and keeps a launch's error on the stream until the next
//! flush or sync. So the first launch of each step is bracketed by flushes: an error before
//! it is someone else's (kept for the user), an error after it is the kernel's (the step
//! falls back). Later launches of the step are not flushed: they cost what a launch costs.

use super::FallbackReason;
use cubecl::prelude::*;

/// Before a step's first launch: errors already on the stream belong to earlier ops, so
/// they are kept for the user's next sync or read (see [`super::defer_error`]).
pub(crate) fn before_first_launch<R: Runtime>(client: &ComputeClient<R>, device_key: &str) {
    if let Err(error) = client.flush() {
        super::defer_error(device_key, error.to_string());
    }
}

/// After the first launch: an error now is the kernel's (compilation, resources, launch).
pub(crate) fn after_first_launch<R: Runtime>(
    client: &ComputeClient<R>,
) -> Result<(), FallbackReason> {
    let flushed = client.flush();
    #[cfg(test)]
    if injected() == Fault::Launch {
        return Err(FallbackReason::Launch("injected fault".into()));
    }
    flushed.map_err(|error| FallbackReason::Launch(error.to_string()))
}

/// A fault tests inject into every fused step's first execution.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// None: the default.
    None = 0,
    /// The launch fails, as a kernel that does not compile would.
    Launch = 1,
    /// The kernel's result is off by one in its first element (seen by verify mode only).
    WrongResult = 2,
}

#[cfg(test)]
static FAULT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Injects `fault` into every fused step's first execution until reset with [`Fault::None`].
#[cfg(test)]
pub(crate) fn inject_fault(fault: Fault) {
    FAULT.store(fault as u8, std::sync::atomic::Ordering::SeqCst);
}

#[cfg(test)]
pub(crate) fn injected() -> Fault {
    match FAULT.load(std::sync::atomic::Ordering::SeqCst) {
        1 => Fault::Launch,
        2 => Fault::WrongResult,
        _ => Fault::None,
    }
}
