//! `B::sync` under each sync and submit policy: it returns `Ok` once the queued work has run,
//! from several threads at once, the results are Burn's, and the policy decides which waits
//! spin (burn-fusion's thread on CubeCL's, and the caller on burn-fusion's).

use super::check::{burn_tolerance, linear_relu_matches_burn};
use super::common::*;
use burn::tensor::DType;
use hypatia::config::{SubmitPolicy, SyncPolicy};
use hypatia::host::sync::SPIN_MIN_CORES;

const THREADS: usize = 3;
const SYNCS: usize = 4;

/// (spinning syncs of burn-fusion's thread, of the caller) so far.
fn spins() -> (u64, u64) {
    let host = hypatia::stats(&device()).host;
    (host.spin_syncs, host.caller_spins)
}

fn run_threads() {
    let threads: Vec<_> = (0..THREADS)
        .map(|t| std::thread::spawn(move || forwards_and_syncs(t)))
        .collect();
    for thread in threads {
        thread.join().expect("a thread's syncs");
    }
}

/// One thread's Linear + ReLU forwards, each followed by a `sync`, then compared with Burn's.
fn forwards_and_syncs(thread: usize) {
    let (m, k, n) = (17, 33, 9);
    let w = data(40 + thread as u64, &[k, n], 0.3);
    let b = data(50 + thread as u64, &[n], 1.0);
    for i in 0..SYNCS {
        linear_relu_matches_burn(&data((100 * thread + i) as u64, &[m, k], 1.0), &w, &b);
    }
}

#[test]
fn every_sync_policy_waits_from_several_threads() {
    let _serial = serial();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let syncs = (THREADS * SYNCS) as u64;
    for (policy, spun) in [
        (SyncPolicy::Spin, syncs),
        (SyncPolicy::Park, 0),
        (
            SyncPolicy::Auto,
            if cores >= SPIN_MIN_CORES { syncs } else { 0 },
        ),
    ] {
        let _sync = ConfigGuard::set(|c| c.sync = policy);
        let before = spins();
        run_threads();
        let after = spins();
        let what = format!("{policy:?} on {cores} cores");
        assert_eq!(after.0 - before.0, spun, "burn-fusion's thread, {what}");
        assert_eq!(after.1 - before.1, spun, "the callers, {what}");
    }
}

/// Ops handed to burn-fusion's thread one by one or in Burn's batches give Burn's results,
/// under a spinning and a parking `sync`.
#[test]
fn every_submit_policy_gives_burns_results_from_several_threads() {
    let _serial = serial();
    for submit in [
        SubmitPolicy::Eager,
        SubmitPolicy::Batched,
        SubmitPolicy::Paced,
        SubmitPolicy::Auto,
    ] {
        for sync in [SyncPolicy::Spin, SyncPolicy::Park] {
            let _submit = ConfigGuard::set(|c| c.submit = submit);
            let _sync = ConfigGuard::set(|c| c.sync = sync);
            run_threads();
        }
    }
}

/// Executions of claimed blocks on the test device so far.
fn executions() -> u64 {
    hypatia::stats(&device()).host.executions
}

/// On a thread of its own (a stream no other test's op is queued on): records a Linear + ReLU
/// on `Fused` from inputs made of `seed`, runs `then` with the device and the executions
/// before it, reads the output, and checks it against Burn's. Returns what `then` returned.
fn linear_relu_then<T: Send + 'static>(
    seed: u64,
    then: impl FnOnce(&burn::tensor::Device<Fused>, u64) -> T + Send + 'static,
) -> T {
    use burn::tensor::Tensor;
    use burn::tensor::activation::relu;
    use burn::tensor::module::linear;
    let (x, w, b) = (
        data(seed, &[17, 33], 1.0),
        data(seed + 1, &[33, 9], 0.3),
        data(seed + 2, &[9], 1.0),
    );
    let inputs = (x.clone(), w.clone(), b.clone());
    let (result, out) = std::thread::spawn(move || {
        let device = device();
        let (x, w, b) = inputs;
        let out = relu(linear(
            Tensor::<Fused, 2>::from_data(x, &device),
            Tensor::from_data(w, &device),
            Some(Tensor::<Fused, 1>::from_data(b, &device)),
        ));
        let result = then(&device, executions());
        (result, out.into_data())
    })
    .join()
    .expect("the recording thread");
    let device = device();
    let reference = relu(linear(
        Tensor::<Plain, 2>::from_data(x, &device),
        Tensor::from_data(w, &device),
        Some(Tensor::from_data(b, &device)),
    ));
    assert_close(&out, &reference.into_data(), burn_tolerance(DType::F32));
    result
}

/// Waits up to 60 s (lavapipe, 2 cores) for burn-fusion's thread to run a claimed block after
/// `before` executions; the executions then.
fn executions_after(before: u64) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while executions() == before && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    executions()
}

/// What a gradient-sync thread does under DDP: it records an op and leaves it, never syncing.
/// Under Burn's batched hand-over the op waits in the queues; `collective_recorded` (decision
/// record 0010) makes burn-fusion's thread run that thread's stream, and Hypatia's claimed
/// Linear + ReLU then runs without any sync, with Burn's result.
#[test]
fn a_recorded_collective_runs_its_threads_ops_without_a_sync() {
    use hypatia::config::CollectivePolicy;
    let _serial = serial();
    let _submit = ConfigGuard::set(|c| c.submit = SubmitPolicy::Batched);
    for policy in [CollectivePolicy::Lazy, CollectivePolicy::Push] {
        let (before, after) = linear_relu_then(61, move |device, before| {
            hypatia::host::submit::collective_recorded::<
                Runtime,
                hypatia::HypatiaBackend<Runtime, f32, i32, u32>,
            >(device, policy);
            if policy == CollectivePolicy::Lazy {
                // Nothing flushes: a second is long enough to see it stay queued.
                std::thread::sleep(std::time::Duration::from_secs(1));
                (before, executions())
            } else {
                (before, executions_after(before))
            }
        });
        match policy {
            CollectivePolicy::Lazy => assert_eq!(after, before, "lazy: the op stays queued"),
            _ => assert!(after > before, "push: the op ran"),
        }
    }
}

/// Where and under which stream the queued collective sync of the next test ran.
static QUEUED_SYNC: std::sync::Mutex<Option<(std::thread::ThreadId, String)>> =
    std::sync::Mutex::new(None);

/// The calling thread and its stream.
fn here() -> (std::thread::ThreadId, String) {
    let stream = burn_backend::StreamId::current();
    (std::thread::current().id(), format!("{stream:?}"))
}

/// burn-train's collective sync after a DDP backward pass, queued (decision record 0011):
/// under `queued` the caller does not wait, and burn-fusion's thread runs the sync under the
/// caller's stream, which runs the caller's queued Linear + ReLU with Burn's result; under
/// `push` nothing is queued and the caller syncs itself. The sync is `Hypatia<B>`'s under the
/// spinning policy (the default on four cores or more): on burn-fusion's own thread it must
/// sync there, not queue a task for that thread and wait for it.
#[test]
fn a_queued_collective_sync_runs_on_burn_fusions_thread_under_the_callers_stream() {
    use burn::tensor::backend::Backend;
    use hypatia::config::CollectivePolicy;
    let _serial = serial();
    let _submit = ConfigGuard::set(|c| c.submit = SubmitPolicy::Batched);
    let _spin = ConfigGuard::set(|c| c.sync = SyncPolicy::Spin);
    fn sync(device: &burn::tensor::Device<Fused>) {
        *QUEUED_SYNC.lock().unwrap() = Some(here());
        Fused::sync(device).expect("the queued sync");
    }
    for policy in [CollectivePolicy::Push, CollectivePolicy::Queued] {
        *QUEUED_SYNC.lock().unwrap() = None;
        let (queued, before, after, caller) = linear_relu_then(71, move |device, before| {
            let queued = hypatia::host::submit::collective_synced::<
                hypatia::HypatiaBackend<Runtime, f32, i32, u32>,
            >(device, sync, policy);
            let after = if queued {
                executions_after(before)
            } else {
                before
            };
            (queued, before, after, here())
        });
        let ran = QUEUED_SYNC.lock().unwrap().clone();
        match policy {
            CollectivePolicy::Queued => {
                assert!(queued, "queued: the sync is queued");
                assert!(
                    after > before,
                    "queued: the caller's op ran without its sync"
                );
                let (thread, stream) = ran.expect("queued: the sync ran");
                assert_ne!(thread, caller.0, "queued: on burn-fusion's thread");
                assert_eq!(stream, caller.1, "queued: under the caller's stream");
            }
            _ => {
                assert!(!queued, "{policy:?}: the caller syncs itself");
                assert_eq!(ran, None, "{policy:?}: nothing queued");
            }
        }
    }
}
