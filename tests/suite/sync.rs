//! `B::sync` under each sync and submit policy: it returns `Ok` once the queued work has run,
//! from several threads at once, the results are Burn's, and the policy decides which waits
//! spin (burn-fusion's thread on CubeCL's, and the caller on burn-fusion's).

use super::check::linear_relu_matches_burn;
use super::common::*;
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
