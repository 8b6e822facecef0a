//! `Backend::sync` for Hypatia's backend: the inner backend's wait, without parking burn-fusion's
//! thread on the way.
//!
//! Under burn-fusion, `B::sync` runs on burn-fusion's thread: it drains the queued ops, then
//! calls the inner backend's `sync`, which asks CubeCL's device thread for a fence with
//! `submit_blocking`. That parks burn-fusion's thread on a one-shot channel until the device
//! thread has run every queued launch and recorded the fence, and the device thread then wakes
//! it. On the sandboxed H100 and H200 device machines (decision record 0006), a
//! `sync` with nothing queued took 5-12 µs less without that park, about half the GPU time of
//! a small MLP's whole forward.
//!
//! [`sync`] hands the device thread the same request without blocking, and spins on the answer
//! for up to [`SPIN`] before it parks. The fence is then waited on exactly as Burn waits on it.
//! Spinning needs a core of its own: by default ([`SyncPolicy::Auto`]) it parks at once, as Burn
//! does, on machines of fewer than [`SPIN_MIN_CORES`] cores (on a 2-core machine the spin would
//! take a core from lavapipe's own threads), and while CubeCL's profiling log is on (its
//! summaries print at `ComputeClient::sync`).

use crate::config::SyncPolicy;
use crate::stats;
use burn_backend::ExecutionError;
use burn_cubecl::CubeRuntime;
use cubecl::config::profiling::ProfilingLogLevel;
use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};
use cubecl::device::Device;
use cubecl::device_handle::DeviceHandle;
use cubecl::server::ServerError;
use cubecl::stream_id::StreamId;
use cubecl_runtime::server::ComputeServer;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long [`sync`] spins on the device thread's answer before it parks.
pub const SPIN: Duration = Duration::from_micros(100);

/// The fewest cores on which [`sync`] spins.
pub const SPIN_MIN_CORES: usize = 4;

/// Waits until every op queued on `device` by this thread's stream has run, as
/// `CubeBackend::sync` does; `policy` says whether it spins or parks.
pub fn sync<R: CubeRuntime>(device: &R::Device, policy: SyncPolicy) -> Result<(), ExecutionError> {
    let spin = match policy {
        SyncPolicy::Auto => auto_spins(),
        SyncPolicy::Spin => true,
        SyncPolicy::Park => false,
    };
    let fence = match spin {
        true => {
            let fence = request_fence::<R>(device);
            stats::record(&stats::device_key(device), |s| s.host.spin_syncs += 1);
            fence
        }
        false => R::client(device).sync(),
    };
    cubecl::future::block_on(fence).map_err(|err| ExecutionError::WithContext {
        reason: format!("{err}"),
    })
}

/// Whether [`SyncPolicy::Auto`] spins: on enough cores, and while CubeCL's profiling log is off
/// (`ComputeClient::sync` prints its summaries, so then Burn's path is taken).
pub(super) fn auto_spins() -> bool {
    static SPINS: OnceLock<bool> = OnceLock::new();
    *SPINS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let profiling = CubeClRuntimeConfig::get().profiling.logger.level;
        cores >= SPIN_MIN_CORES && matches!(profiling, ProfilingLogLevel::Disabled)
    })
}

type Fence = cubecl::future::DynFut<Result<(), ServerError>>;

/// The device thread's fence for this thread's stream, asked for without blocking.
fn request_fence<R: CubeRuntime>(device: &R::Device) -> Fence {
    let handle = DeviceHandle::<R::Server>::new(device.to_id());
    let answer = Arc::new(Answer::new());
    let reply = Reply(answer.clone());
    // The same request `ComputeClient::sync` makes, on the same stream.
    let stream = StreamId::current();
    handle.submit(move |server: &mut R::Server| reply.send(server.sync(stream)));
    handle.flush_queue();
    answer.wait().unwrap_or_else(|| {
        Box::pin(async {
            Err(ServerError::Generic {
                reason: "the device thread dropped Hypatia's sync request".into(),
                backtrace: Default::default(),
            })
        })
    })
}

/// A one-shot answer its receiver spins on, then parks for.
pub(super) struct Answer<T> {
    state: AtomicU8,
    value: Mutex<Option<T>>,
    receiver: Thread,
}

const PENDING: u8 = 0;
const SENT: u8 = 1;
/// The task was dropped unrun, or panicked, before sending.
const LOST: u8 = 2;

impl<T> Answer<T> {
    pub(super) fn new() -> Self {
        Self {
            state: AtomicU8::new(PENDING),
            value: Mutex::new(None),
            receiver: std::thread::current(),
        }
    }

    /// The value sent, or `None` when the [`Reply`] was dropped unsent.
    pub(super) fn wait(&self) -> Option<T> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            match self.state.load(Ordering::Acquire) {
                SENT => {
                    let value = self.value.lock().unwrap_or_else(|p| p.into_inner()).take();
                    return Some(value.expect("a sent answer holds its value"));
                }
                LOST => return None,
                _ => {}
            }
            spins += 1;
            // Reading the clock costs more than a spin: every 64 spins only.
            if !spins.is_multiple_of(64) || start.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                // Woken by `Reply`; the timeout only guards against a missed wake-up.
                std::thread::park_timeout(Duration::from_millis(1));
            }
        }
    }

    fn finish(&self, state: u8) {
        self.state.store(state, Ordering::Release);
        self.receiver.unpark();
    }
}

/// The other thread's side of an [`Answer`]; dropped unsent, it says the answer is lost.
pub(super) struct Reply<T>(pub(super) Arc<Answer<T>>);

impl<T> Reply<T> {
    pub(super) fn send(self, value: T) {
        *self.0.value.lock().unwrap_or_else(|p| p.into_inner()) = Some(value);
        self.0.finish(SENT);
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        if self.0.state.load(Ordering::Acquire) == PENDING {
            self.0.finish(LOST);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready() -> Fence {
        Box::pin(async { Ok(()) })
    }

    /// Sends from another thread after `delay`; returns what the receiver got and how long
    /// it waited.
    fn answered_after(delay: Duration, send: bool) -> (Result<(), ServerError>, Duration) {
        let answer = Arc::new(Answer::new());
        let reply = Reply(answer.clone());
        let start = Instant::now();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(delay);
            match send {
                true => reply.send(ready()),
                false => drop(reply),
            }
        });
        let result = match answer.wait() {
            Some(fence) => cubecl::future::block_on(fence),
            None => Err(ServerError::Generic {
                reason: "the device thread dropped Hypatia's sync request".into(),
                backtrace: Default::default(),
            }),
        };
        let waited = start.elapsed();
        sender.join().unwrap();
        (result, waited)
    }

    #[test]
    fn an_answer_sent_during_the_spin_is_taken() {
        let (result, _) = answered_after(Duration::ZERO, true);
        assert!(result.is_ok());
    }

    /// Past the spin the receiver parks; it returns with the answer, and not before it.
    #[test]
    fn an_answer_sent_after_the_spin_reaches_the_parked_receiver() {
        let delay = SPIN * 20;
        let (result, waited) = answered_after(delay, true);
        assert!(result.is_ok());
        assert!(waited >= delay, "returned before the answer: {waited:?}");
    }

    #[test]
    fn a_reply_dropped_unsent_is_an_error_not_a_hang() {
        let (result, _) = answered_after(SPIN * 5, false);
        let error = result.expect_err("a lost answer").to_string();
        assert!(error.contains("dropped Hypatia's sync request"), "{error}");
    }
}
