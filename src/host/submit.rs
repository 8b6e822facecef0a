//! How `Hypatia<B>` hands recorded ops to burn-fusion's thread, and waits for them.
//!
//! Under Burn's `Fusion`, an op is queued for burn-fusion's thread, which looks at nothing
//! until 32 tasks are queued or the caller syncs or reads. A small forward (784→512→512→10
//! is about a dozen tasks) is then fused, run and waited for only after the caller's `sync`,
//! and the caller parks on a one-shot channel until burn-fusion's thread wakes it.
//! [`HypatiaFusion`](crate::backend::HypatiaFusion) changes both, under the
//! [`SubmitPolicy`] and [`SyncPolicy`] in force:
//! - [`submitted`], after each op, flushes the queue so burn-fusion's thread fuses the ops
//!   while the caller records the next ones;
//! - [`fusion_sync`] queues burn-fusion's own `sync` and spins on its answer before parking.
//! - [`collective_recorded`], after an all-reduce, has burn-fusion's and CubeCL's threads launch
//!   it at once, whatever the recording thread does next (decision record 0010).
//!
//! Both need a task of Hypatia's on burn-fusion's thread: `Waiter`, a service of that
//! thread's stage (CubeCL runs every service of a device and stage on one thread, in order).

use super::pace::Pace;
use super::sync::{Answer, Reply, SPIN_MIN_CORES, auto_spins};
use crate::config::{CollectivePolicy, SubmitPolicy, SyncPolicy};
use crate::stats;
use burn_backend::{Backend, ExecutionError};
use burn_cubecl::CubeRuntime;
use burn_cubecl::fusion::FusionCubeRuntime;
use burn_fusion::client::GlobalFusionClient;
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use cubecl::device::{Device, DeviceId, DeviceService, DeviceServiceStage, ServerUtilitiesHandle};
use cubecl::device_handle::DeviceHandle;
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// A service of no state on burn-fusion's stage of a device: its tasks run on burn-fusion's
/// thread, after the ops queued before them.
struct Waiter;

impl DeviceService for Waiter {
    fn init(device: DeviceId) -> Self {
        // CubeCL starts a service on the thread that runs its tasks.
        FUSION_THREAD_OF.with(|of| of.set(Some(device)));
        Waiter
    }

    fn utilities(&self) -> ServerUtilitiesHandle {
        Arc::new(())
    }

    fn stage() -> DeviceServiceStage {
        DeviceServiceStage::Upstream
    }
}

/// The started `Waiter` of each device, with the pace of burn-fusion's thread there.
type Waiters = Vec<(DeviceId, DeviceHandle<Waiter>, &'static Pace)>;
static WAITERS: RwLock<Waiters> = RwLock::new(Vec::new());
/// `WAITERS.len()`, read without the lock on every op (see [`submitted`]).
static DEVICES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The device this thread last named in an op (see [`start`]): the one whose queue
    /// [`submitted`] flushes, where Hypatia runs on several.
    static NAMED: Cell<Option<DeviceId>> = const { Cell::new(None) };
    /// The device whose burn-fusion thread this is, if it is one (its `Waiter` started here).
    static FUSION_THREAD_OF: Cell<Option<DeviceId>> = const { Cell::new(None) };
}

/// The `Waiter` of `device`, if Hypatia started one there and the caller is not burn-fusion's
/// thread of `device` itself: a task of Hypatia's runs there (a queued collective sync does),
/// and a task it queued for its own thread would borrow the running task's service again,
/// which CubeCL refuses with a panic. Every caller then does what Burn does, on that thread.
fn waiter(device: DeviceId) -> Option<DeviceHandle<Waiter>> {
    if FUSION_THREAD_OF.with(Cell::get) == Some(device) {
        return None;
    }
    let waiters = WAITERS.read().unwrap_or_else(|p| p.into_inner());
    (waiters.iter().find(|(id, ..)| *id == device)).map(|(_, handle, _)| handle.clone())
}

/// The policy [`SubmitPolicy::Auto`] stands for here, with Hypatia started on `devices`
/// devices.
fn submit_mode(devices: usize, policy: SubmitPolicy) -> SubmitPolicy {
    static CORES: OnceLock<bool> = OnceLock::new();
    match policy {
        SubmitPolicy::Auto => {
            let cores = *CORES.get_or_init(|| {
                std::thread::available_parallelism().map_or(1, usize::from) >= SPIN_MIN_CORES
            });
            // Several devices: burn-train's DDP hung under eager flushes and ran batched
            // (decision record 0003).
            if cores && devices <= 1 {
                SubmitPolicy::Eager
            } else {
                SubmitPolicy::Batched
            }
        }
        policy => policy,
    }
}

/// Starts, once per device, the services `Hypatia<B>` needs on burn-fusion's thread there:
/// called before each op that names a device (every tensor is created by one), so it runs
/// before burn-fusion queues anything for Hypatia there.
///
/// CubeCL 0.10 starts a service by queueing its start on the device's thread and waiting for
/// it while it holds a lock (`CHANNELS`) that every service handle takes, a compute client's
/// too. A task on that thread that loads a compute client (a new stream's fusers do, Burn's
/// and Hypatia's alike) then waits for the starting thread, which waits for it: a deadlock.
/// Burn alone never meets it (one fusion service per device); with Hypatia's beside Burn's,
/// the first use of either while the other's ops are queued did. So, on the caller's thread,
/// before Hypatia's first op on `device`:
/// 1. Burn's own fusion service is started (or found): a later `Wgpu`/`Cuda` tensor then
///    starts nothing while Hypatia's ops are queued;
/// 2. burn-fusion's thread is waited for (Burn's service runs a no-op task), without the lock,
///    so the Burn ops queued so far have created their streams;
/// 3. Hypatia's fusion service and its `Waiter` start on the idle thread.
///
/// A task on that thread cannot start them instead: the thread's services are borrowed while
/// one runs. Other threads that queue Burn ops between 2 and 3 can still meet the race.
pub fn start<R: CubeRuntime, H: FusionRuntime<FusionDevice = R::Device>>(device: &R::Device) {
    super::stream::configure();
    let id = device.to_id();
    NAMED.with(|named| named.set(Some(id)));
    let started = |waiters: &Waiters| waiters.iter().any(|(known, ..)| *known == id);
    // Every tensor-creating op comes here: a read lock and a scan, no handle cloned.
    if started(&WAITERS.read().unwrap_or_else(|p| p.into_inner())) {
        return;
    }
    let mut waiters = WAITERS.write().unwrap_or_else(|p| p.into_inner());
    if !started(&waiters) {
        let burn = GlobalFusionClient::<FusionCubeRuntime<R>>::load(device);
        burn.sync(|| ());
        let _ = GlobalFusionClient::<H>::load(device);
        let pace = Pace::of(id, Waiter::stage());
        waiters.push((id, DeviceHandle::<Waiter>::new(id), pace));
        DEVICES.store(waiters.len(), Ordering::Relaxed);
    }
}

/// Called after each op `HypatiaFusion` records: under an eager or paced [`SubmitPolicy`],
/// flushes burn-fusion's queue of the device the calling thread last named (each device with
/// a `Waiter`, where it named none), without waiting; paced, only where that thread has run the
/// earlier flushes.
///
/// One device only: a flush makes the flushing thread wait until that device's thread takes
/// its queue (`host::pace`), so flushing every device would tie each DDP worker thread to the
/// other devices' threads. A thread that records on a device other than the one it last named
/// leaves that device's ops queued, as [`SubmitPolicy::Batched`] does: only when they run
/// changes, never what.
pub fn submitted(policy: SubmitPolicy) {
    let paced = match submit_mode(DEVICES.load(Ordering::Relaxed), policy) {
        SubmitPolicy::Batched => return,
        mode => mode == SubmitPolicy::Paced,
    };
    let named = NAMED.with(Cell::get);
    let waiters = WAITERS.read().unwrap_or_else(|p| p.into_inner());
    for (_, handle, pace) in waiters.iter().filter(|(id, ..)| flushes(named, *id)) {
        if paced {
            pace.flush_if_idle(handle);
        } else {
            handle.flush_queue();
        }
    }
}

/// Whether [`submitted`] flushes `device`'s queue for a thread that last named `named`.
fn flushes(named: Option<DeviceId>, device: DeviceId) -> bool {
    named.is_none_or(|named| named == device)
}

/// After `HypatiaFusion` records a collective (an all-reduce) on `device`, from any thread:
/// burn-fusion's thread there runs the recording thread's stream, which launches the
/// collective into CubeCL's queue, then flushes that queue so the GPU starts it. Neither
/// thread waits on the other.
///
/// Both queues otherwise hold a task until 32 are queued or their caller blocks, and neither
/// Burn 0.21 nor CubeCL 0.10 flushes them after an all-reduce (burn-fusion's
/// `ensure_collective_init` means to, but tests the wrong way). Under burn-train's DDP, a
/// device's thread can then block on burn-train's metric channel (one slot) while its
/// all-reduce waits unlaunched, and the metric thread waits on another device's GPU, which
/// waits inside NCCL for this device's part: a deadlock (decision record 0010).
pub fn collective_recorded<R: CubeRuntime, B: FusionBackend>(
    device: &B::Device,
    policy: CollectivePolicy,
) {
    if policy == CollectivePolicy::Lazy {
        return;
    }
    // No waiter: Hypatia has no tensor on `device` (see [`start`]), so nothing of its waits
    // there; or the caller is burn-fusion's thread (see [`waiter`]).
    let Some(handle) = waiter(device.to_id()) else {
        return;
    };
    // Both found here, not on burn-fusion's thread: a handle's look-up takes the lock a
    // starting service holds while it waits for that thread (see [`start`]).
    let client = burn_fusion::get_client::<B>(device);
    let cubecl = DeviceHandle::<R::Server>::new(device.to_id());
    handle.submit(move |_: &mut Waiter| {
        // The task runs under the recording thread's stream: `sync` drains that stream.
        // Non-blocking: CubeCL's thread may be inside NCCL's communicator start-up, which
        // waits for the other devices' collectives.
        client.sync(move || cubecl.flush_queue());
    });
    handle.flush_queue();
}

/// burn-train's wait, after a DDP backward pass, for the reduced gradients
/// (`DistributedBackend::sync_collective` on `device`) under [`CollectivePolicy::Queued`]: a
/// task on burn-fusion's thread of the device, run under the caller's stream, does what
/// `Fusion<B>::sync_collective` does (drain that stream, then make the GPU stream wait for
/// NCCL's), while the caller goes on recording. Returns `false`, having done nothing, under
/// another policy, where Hypatia has no tensor on `device`, or on burn-fusion's thread there:
/// the caller then syncs as Burn does.
///
/// Safe to queue: burn-fusion's thread runs its tasks in order, so the GPU stream's wait for
/// NCCL is issued before any op the caller records next, and after every all-reduce of the
/// step, each of which [`collective_recorded`] queued before burn-backend's gradient-sync
/// server let the caller reach this sync (decision record 0011).
pub fn collective_synced<B: FusionBackend>(
    device: &B::Device,
    sync: fn(&B::Device),
    policy: CollectivePolicy,
) -> bool {
    if policy != CollectivePolicy::Queued {
        return false;
    }
    let Some(handle) = waiter(device.to_id()) else {
        return false;
    };
    stats::record(&stats::device_key(device), |s| s.host.queued_syncs += 1);
    let target = device.clone();
    handle.submit(move |_: &mut Waiter| sync(&target));
    handle.flush_queue();
    true
}

/// `Fusion<B>::sync`: under a spinning [`SyncPolicy`], queued as a task of burn-fusion's thread
/// with the caller spinning on its answer (up to `host::sync::SPIN`, then parked), instead
/// of parking at once on burn-fusion's one-shot channel. The same drain and the same inner
/// `sync` run, on the caller's stream.
pub fn fusion_sync<B: FusionBackend>(
    device: &B::Device,
    policy: SyncPolicy,
) -> Result<(), ExecutionError> {
    // Burn's sync may be the program's first call: CubeCL starts here then.
    super::stream::configure();
    let spins = match policy {
        SyncPolicy::Auto => auto_spins(),
        SyncPolicy::Spin => true,
        SyncPolicy::Park => false,
    };
    // No waiter: no tensor was created on `device` through `HypatiaFusion` (see [`start`]), or
    // this is burn-fusion's thread there.
    let handle = match waiter(device.to_id()) {
        Some(handle) if spins => handle,
        _ => return Fusion::<B>::sync(device),
    };
    stats::record(&stats::device_key(device), |s| s.host.caller_spins += 1);
    let answer = Arc::new(Answer::new());
    let reply = Reply(answer.clone());
    let target = device.clone();
    handle.submit(move |_: &mut Waiter| reply.send(Fusion::<B>::sync(&target)));
    handle.flush_queue();
    answer.wait().unwrap_or_else(|| {
        Err(ExecutionError::WithContext {
            reason: "burn-fusion's thread dropped Hypatia's sync request".into(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under the default policy, Hypatia on several devices hands ops over batched (decision
    /// record 0003); an explicit policy is kept.
    #[test]
    fn auto_submits_batched_on_several_devices() {
        assert_eq!(submit_mode(2, SubmitPolicy::Auto), SubmitPolicy::Batched);
        assert_eq!(submit_mode(4, SubmitPolicy::Auto), SubmitPolicy::Batched);
        for explicit in [
            SubmitPolicy::Eager,
            SubmitPolicy::Paced,
            SubmitPolicy::Batched,
        ] {
            assert_eq!(submit_mode(2, explicit), explicit);
        }
    }

    /// A thread that named a device flushes that device's queue only; one that named none
    /// flushes every device's.
    #[test]
    fn a_thread_flushes_the_device_it_named() {
        let (a, b) = (DeviceId::new(0, 0), DeviceId::new(0, 1));
        assert!(flushes(Some(a), a));
        assert!(!flushes(Some(a), b));
        assert!(flushes(None, a) && flushes(None, b));
    }
}
