//! `B::sync` under each sync policy: it returns `Ok` once the queued work has run, from
//! several threads at once, the results are Burn's, and the policy decides which wait runs.

use super::check::linear_relu_matches_burn;
use super::common::*;
use hypatia::kernel::SyncPolicy;
use hypatia::runtime::sync::SPIN_MIN_CORES;

const THREADS: usize = 3;
const SYNCS: usize = 4;

fn spin_syncs() -> u64 {
    hypatia::stats(&device()).host.spin_syncs
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
        let _sync = SyncGuard::set(policy);
        let before = spin_syncs();
        let threads: Vec<_> = (0..THREADS)
            .map(|t| std::thread::spawn(move || forwards_and_syncs(t)))
            .collect();
        for thread in threads {
            thread.join().expect("a thread's syncs");
        }
        assert_eq!(spin_syncs() - before, spun, "{policy:?} on {cores} cores");
    }
}
