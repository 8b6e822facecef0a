//! Device memory as CubeCL's allocator sees it, for the examples' memory figures.

use cubecl::Runtime;

/// `(bytes in use, bytes reserved)` on `device`: what live tensors hold, and the pages the
/// allocator holds for them (at least as much; pages stay reserved after their tensors are
/// freed, until a cleanup).
pub fn usage<R: Runtime>(device: &R::Device) -> (u64, u64) {
    R::client(device)
        .memory_usage()
        .map_or((0, 0), |u| (u.bytes_in_use, u.bytes_reserved))
}

/// Gives the allocator's free pages back to the device, so that the pages it reserves during
/// the next work show that work's peak, which a sample of the bytes in use between steps
/// cannot see (the backward's temporaries are freed before it ends). Page-granular:
/// temporaries that fit in the free part of pages still holding live tensors add nothing, so
/// a small model's step can show 0. Returns the usage after the cleanup.
pub fn cleanup<R: Runtime>(device: &R::Device) -> (u64, u64) {
    R::client(device).memory_cleanup();
    // `memory_usage` waits on the device thread, which runs the cleanup first.
    usage::<R>(device)
}

/// Bytes as MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}
