//! Introspection: [`FusionStats`], per device, and the `log` lines that go with them.

pub use crate::config::FusedPattern;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::Duration;

/// Counters of one [`FusedPattern`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PatternStats {
    /// Distinct windows in which egg found the pattern and Hypatia planned it.
    pub matched: u64,
    /// Tiled kernel launches (one per step; for [`FusedPattern::MlpChain`], chain launches).
    pub tiled: u64,
    /// Steps run on the tensor-core engine: its autotuned fastest candidate for the whole
    /// linear (see `kernel::engine`).
    pub tensor_core: u64,
    /// Split executions: the inner backend's matmul, then Hypatia's bias + activation kernel
    /// (problems where the inner matmul is faster; see `execute::choose_execution`).
    pub split: u64,
    /// Steps run as one layer of an MLP-chain launch (see `kernel::chain`); the
    /// `mlp-chain` entry counts the launches in `executed`.
    pub chained: u64,
    /// Bias gradients (`Σ_rows` of a relu-backward step's output) the step's kernel produced,
    /// whose `sum_dim` ops were then skipped (see [`crate::plan::BiasGrad`]).
    pub bias_grads: u64,
    /// Steps whose result verify mode (`execute::verify`) compared with Burn's ops and
    /// found equal (the first execution of each step while verification is on).
    pub verified: u64,
    /// Plans that ran Burn's ops instead, by reason (checked at run time).
    pub fallbacks: BTreeMap<String, u64>,
    /// Real shapes at which a step was timed against Burn's own way of running its ops and
    /// a winner chosen (see `execute::race`).
    pub raced: u64,
    /// Executions of a step while its race at that shape was undecided (warm-up and timed
    /// runs, each between device syncs): a benchmark's warm-up is over when these stop.
    pub racing: u64,
    /// Steps run on Burn's side of the race (its fused matmul for their ops, or its matmul op
    /// for a lone matmul): while racing, and where it won. Not counted in [`Self::steps`]: no
    /// Hypatia kernel ran.
    pub burn_fused: u64,
}

impl PatternStats {
    /// Steps run on any of Hypatia's paths: tiled, tensor-core engine, split or MLP chain.
    pub fn steps(&self) -> u64 {
        self.tiled + self.tensor_core + self.split + self.chained
    }
}

/// Counters of the e-graph stage.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EggStats {
    /// Equality-saturation runs (distinct windows only: plans and rewrite results are cached).
    pub runs: u64,
    /// Total wall time of those runs, in microseconds.
    pub total_micros: u64,
    /// Longest single run, in microseconds.
    pub max_micros: u64,
    /// Runs stopped by a limit rather than saturation.
    pub limited: u64,
}

/// Host time Hypatia spent on the thread that runs burn-fusion's stream, in nanoseconds.
///
/// That thread records every op of the model and launches every kernel: time spent here is
/// time Burn's own path does not spend, so for small models (where the host bounds the step)
/// it is what Hypatia must win back in kernel time.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HostStats {
    /// In [`HypatiaFuser`](crate::runtime::HypatiaFuser): capturing ops, plan-cache lookups
    /// and e-graph runs.
    pub fuser_nanos: u64,
    /// Running claimed blocks: checks, autotune lookups, launches and the ops run as Burn's.
    pub execute_nanos: u64,
    /// Claimed blocks run.
    pub executions: u64,
    /// Of those, the blocks whose launches were handed to the device thread at once
    /// ([`FlushPolicy`](crate::config::FlushPolicy)).
    pub flushes: u64,
    /// `sync` calls that asked the device thread for its fence without blocking, and spun on
    /// the answer ([`SyncPolicy`](crate::config::SyncPolicy)).
    pub spin_syncs: u64,
    /// `Hypatia<B>::sync` calls whose caller spun on burn-fusion's answer instead of parking
    /// ([`SyncPolicy`](crate::config::SyncPolicy), `host::submit`).
    pub caller_spins: u64,
    /// DDP collective syncs queued on burn-fusion's thread instead of waited for
    /// ([`CollectivePolicy::Queued`](crate::config::CollectivePolicy::Queued)).
    pub queued_syncs: u64,
    /// Linear biases read through the row view made of them before, instead of a new reshape
    /// op (`Hypatia<B>::linear`, `backend::bias`).
    pub bias_views: u64,
}

/// What Hypatia did on one device since the process started (or since [`reset_stats`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FusionStats {
    /// Per pattern.
    pub patterns: PatternCounters,
    /// Windows that were not claimed, by [`Reason`](crate::plan::Reason) key.
    pub declined: BTreeMap<String, u64>,
    /// The e-graph stage.
    pub egg: EggStats,
    /// Host time spent in Hypatia.
    pub host: HostStats,
}

impl FusionStats {
    /// Steps of `pattern` Hypatia has run so far, on any of its paths: the tiled kernel, the
    /// tensor-core engine, a split or an MLP chain (see [`PatternStats`] for each).
    pub fn executed(&self, pattern: FusedPattern) -> u64 {
        self.patterns.get(pattern).map_or(0, PatternStats::steps)
    }

    /// Steps of every pattern Hypatia has run so far: zero when it fused nothing.
    pub fn executed_total(&self) -> u64 {
        self.patterns.values().map(PatternStats::steps).sum()
    }
}

/// [`PatternStats`] by [`FusedPattern`], for the patterns seen so far (serialised as a map
/// from pattern name).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct PatternCounters(BTreeMap<FusedPattern, PatternStats>);

impl PatternCounters {
    /// The counters of `pattern`, if it was seen.
    pub fn get(&self, pattern: FusedPattern) -> Option<&PatternStats> {
        self.0.get(&pattern)
    }

    /// The patterns seen, in [`FusedPattern`] order.
    pub fn keys(&self) -> impl Iterator<Item = FusedPattern> + '_ {
        self.0.keys().copied()
    }

    /// The counters of the patterns seen.
    pub fn values(&self) -> impl Iterator<Item = &PatternStats> {
        self.0.values()
    }

    /// Each pattern seen with its counters.
    pub fn iter(&self) -> impl Iterator<Item = (FusedPattern, &PatternStats)> {
        self.0.iter().map(|(p, s)| (*p, s))
    }

    fn entry(&mut self, pattern: FusedPattern) -> &mut PatternStats {
        self.0.entry(pattern).or_default()
    }
}

/// The counters of a pattern that was seen; panics (naming it) for one that was not.
impl core::ops::Index<FusedPattern> for PatternCounters {
    type Output = PatternStats;

    fn index(&self, pattern: FusedPattern) -> &PatternStats {
        self.get(pattern)
            .unwrap_or_else(|| panic!("no `{pattern}` step was seen on this device"))
    }
}

impl<'a> IntoIterator for &'a PatternCounters {
    type Item = (FusedPattern, &'a PatternStats);
    type IntoIter = Box<dyn Iterator<Item = Self::Item> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

fn registry() -> &'static Mutex<HashMap<String, FusionStats>> {
    static STATS: OnceLock<Mutex<HashMap<String, FusionStats>>> = OnceLock::new();
    STATS.get_or_init(Default::default)
}

/// Counters bumped on the caller's thread once per op or layer, where the registry's lock would
/// cost more than what they count: one relaxed atomic each, read into every snapshot.
#[derive(Debug, Default)]
pub(crate) struct Hot {
    bias_views: AtomicU64,
}

impl Hot {
    /// [`HostStats::bias_views`].
    pub(crate) fn bias_views(&'static self) -> &'static AtomicU64 {
        &self.bias_views
    }
}

/// The hot counters of each device key, leaked (one per device).
static HOT: Leaked<String, Hot> = RwLock::new(Vec::new());

/// The hot counters of `device` (a [`device_key`]).
pub(crate) fn hot(device: &str) -> &'static Hot {
    leaked(&HOT, device.to_string())
}

/// A registry of values made once per key and leaked, so that hot paths hold them as
/// `&'static` without reference counts (a few keys: one per device or device thread).
pub(crate) type Leaked<K, V> = RwLock<Vec<(K, &'static V)>>;

/// `key`'s value in `registry`, made (`Default`) and leaked the first time.
pub(crate) fn leaked<K: PartialEq, V: Default>(registry: &Leaked<K, V>, key: K) -> &'static V {
    let find = |all: &[(K, &'static V)]| all.iter().find(|(k, _)| *k == key).map(|e| e.1);
    if let Some(value) = find(&registry.read().unwrap_or_else(|p| p.into_inner())) {
        return value;
    }
    let mut all = registry.write().unwrap_or_else(|p| p.into_inner());
    if let Some(value) = find(&all) {
        return value;
    }
    let value: &'static V = Box::leak(Box::default());
    all.push((key, value));
    value
}

/// A device's key in the registry: its CubeCL id (`DeviceId { type_id, index_id }`), the same
/// whichever of the device's Burn spellings the caller holds (`CudaDevice::default()` and
/// `CudaDevice::new(0)` are one GPU).
pub(crate) fn device_key<D: cubecl::device::Device>(device: &D) -> String {
    format!("{:?}", device.to_id())
}

pub(crate) fn record(device: &str, update: impl FnOnce(&mut FusionStats)) {
    let mut stats = registry()
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    // Called on every execution: allocate the key only the first time.
    match stats.get_mut(device) {
        Some(device_stats) => update(device_stats),
        None => update(stats.entry(device.to_string()).or_default()),
    }
}

pub(crate) fn record_egg(device: &str, elapsed: Duration, limited: bool) {
    record(device, |stats| {
        let micros = elapsed.as_micros() as u64;
        stats.egg.runs += 1;
        stats.egg.total_micros += micros;
        stats.egg.max_micros = stats.egg.max_micros.max(micros);
        stats.egg.limited += limited as u64;
    });
}

pub(crate) fn pattern(stats: &mut FusionStats, pattern: FusedPattern) -> &mut PatternStats {
    stats.patterns.entry(pattern)
}

/// What Hypatia did on `device` so far: matches, fused launches, declines and fallbacks by
/// reason, and the e-graph runs.
///
/// Ops are lazy: call `B::sync(&device)` (or read a tensor) first so that queued work has run.
///
/// ```
/// # #[cfg(feature = "wgpu")] {
/// let stats = hypatia::stats(&burn::backend::wgpu::WgpuDevice::default());
/// println!("{}", serde_json::to_string(&stats).unwrap());
/// # }
/// ```
pub fn stats<D: cubecl::device::Device>(device: &D) -> FusionStats {
    let stats = registry()
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    let key = device_key(device);
    let mut snapshot = stats.get(&key).cloned().unwrap_or_default();
    snapshot.host.bias_views = hot(&key).bias_views.load(Ordering::Relaxed);
    snapshot
}

/// Clears the counters of `device`.
pub fn reset_stats<D: cubecl::device::Device>(device: &D) {
    let mut stats = registry()
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    let key = device_key(device);
    stats.remove(&key);
    hot(&key).bias_views.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pattern's name is the same in `Display`, serde and `FromStr`; an unknown name fails
    /// and lists the names.
    #[test]
    fn a_pattern_has_one_name() {
        for pattern in FusedPattern::ALL {
            let name = pattern.to_string();
            assert_eq!(name, pattern.name());
            assert_eq!(
                serde_json::to_string(&pattern).unwrap(),
                format!("\"{name}\"")
            );
            assert_eq!(name.parse::<FusedPattern>(), Ok(pattern));
        }
        let error = "linear-rleu".parse::<FusedPattern>().unwrap_err();
        assert!(
            error.contains("linear-relu") && error.contains("mlp-chain"),
            "{error}"
        );
    }

    /// Counters serialise as a map from pattern name; a pattern not seen counts 0.
    #[test]
    fn counters_are_keyed_by_pattern() {
        let mut stats = FusionStats::default();
        pattern(&mut stats, FusedPattern::LinearRelu).tiled += 2;
        pattern(&mut stats, FusedPattern::LinearRelu).split += 1;
        assert_eq!(stats.executed(FusedPattern::LinearRelu), 3);
        assert_eq!(stats.executed(FusedPattern::LinearGelu), 0);
        assert_eq!(stats.executed_total(), 3);
        let json = serde_json::to_value(&stats.patterns).unwrap();
        assert_eq!(json["linear-relu"]["tiled"], 2);
        assert_eq!(
            stats.patterns.keys().collect::<Vec<_>>(),
            [FusedPattern::LinearRelu]
        );
        pattern(&mut stats, FusedPattern::LinearGelu).chained += 4;
        assert_eq!(stats.executed_total(), 7);
    }
}
