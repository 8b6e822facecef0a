//! How many GPU streams a device's kernels run on: one, under [`GpuStreams::One`] (decision
//! record 0012).
//!
//! CubeCL gives each thread that records ops a GPU stream of its own (by its `StreamId`, up to
//! `streaming.max_streams`, 128 by default), and is meant to order a kernel after another
//! stream's write of its input. With CubeCL 0.10 on CUDA that order fails for a tensor made on
//! one thread and used on another: burn-train's data loader threads make each batch and the
//! training thread uses it, and on one H200 the Learner trained on wrong batches, on Burn's own
//! `Cuda` as on Hypatia. With one GPU stream, a device's kernels run in the order burn-fusion's
//! thread launches them, which is right: the same Learner then trained as it does with the
//! batches made on the training thread, at the same speed.
//!
//! CubeCL reads the setting once, when it starts a device's server, so [`configure`] runs before
//! every `Hypatia<B>` call that may start one.

use crate::config::{GpuStreams, config};
use cubecl::config::streaming::StreamingConfig;
use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};
use std::sync::{Arc, Once};

/// Under [`GpuStreams::One`], sets CubeCL's `streaming.max_streams` to 1 for every device server
/// started from now on, unless `cubecl.toml` (or `burn.toml`'s `[cubecl]`) sets another value
/// than CubeCL's default. Once per process; an atomic load after that.
///
/// Where CubeCL's configuration was read before Hypatia's first call (a `Cuda` tensor made
/// first, say), a server started then keeps its streams: that is logged at `warn` level.
pub fn configure() {
    static ONCE: Once = Once::new();
    // The one configuration read in `host`: once per process, before CubeCL starts a device.
    ONCE.call_once(|| {
        if config().gpu_streams != GpuStreams::One {
            return;
        }
        let started = CubeClRuntimeConfig::storage().lock().is_some();
        // Loads `cubecl.toml` and CubeCL's variables, as CubeCL would.
        let mut cubecl = (*CubeClRuntimeConfig::get()).clone();
        if cubecl.streaming.max_streams != StreamingConfig::default().max_streams {
            return;
        }
        cubecl.streaming.max_streams = 1;
        *CubeClRuntimeConfig::storage().lock() = Some(Arc::new(cubecl));
        if started {
            log::warn!(
                "hypatia: CubeCL started before Hypatia's first call; a device it started then \
                 keeps a GPU stream per thread (decision record 0012)"
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After [`configure`], a device server CubeCL starts runs one GPU stream (the default
    /// policy, and no `cubecl.toml` in this crate).
    #[test]
    fn configure_leaves_cubecl_one_gpu_stream() {
        configure();
        assert_eq!(CubeClRuntimeConfig::get().streaming.max_streams, 1);
    }
}
