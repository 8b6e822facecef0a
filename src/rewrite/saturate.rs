//! [`saturate`]: the only caller of egg's `Runner`.

use super::{CostModel, TensorGraph, TensorLang, rules};
use egg::{Extractor, Id, RecExpr, Rewrite, Runner, StopReason};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Bounds on one equality-saturation run.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Maximum number of e-nodes.
    pub nodes: usize,
    /// Maximum number of rule iterations.
    pub iterations: usize,
    /// Maximum wall time.
    pub time: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            nodes: 10_000,
            iterations: 12,
            time: Duration::from_millis(50),
        }
    }
}

/// The result of one run: the saturated e-graph and why it stopped.
pub struct Saturated {
    /// The e-graph after rewriting.
    pub egraph: TensorGraph,
    /// Why the runner stopped (`Saturated` unless a limit was hit).
    pub stop_reason: StopReason,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl Saturated {
    /// The cheapest term of class `id` under [`CostModel`].
    pub fn find_best(&self, id: Id) -> (f64, RecExpr<TensorLang>) {
        Extractor::new(&self.egraph, CostModel).find_best(id)
    }
}

fn cached_rules() -> &'static [Rewrite<TensorLang, super::TensorAnalysis>] {
    static RULES: OnceLock<Vec<Rewrite<TensorLang, super::TensorAnalysis>>> = OnceLock::new();
    RULES.get_or_init(rules)
}

/// Runs every rule on `egraph` until saturation or a limit.
///
/// ```
/// use hypatia::rewrite::{Limits, TensorGraph, saturate};
/// let mut egraph = TensorGraph::default();
/// let root = egraph.add_expr(&"(mask-fill (add (matmul t1:f32:1x2 t2:f32:2x3) t3:f32:0x3) (le (add (matmul t1:f32:1x2 t2:f32:2x3) t3:f32:0x3) scalar:0) scalar:1)".parse().unwrap());
/// let saturated = saturate(egraph, &Limits::default());
/// assert_eq!(saturated.find_best(root).1.to_string(), "(fused-linear-relu t1:f32:1x2 t2:f32:2x3 t3:f32:0x3)");
/// ```
pub fn saturate(egraph: TensorGraph, limits: &Limits) -> Saturated {
    let start = Instant::now();
    let runner = Runner::default()
        .with_egraph(egraph)
        .with_node_limit(limits.nodes)
        .with_iter_limit(limits.iterations)
        .with_time_limit(limits.time)
        .run(cached_rules());
    let stop_reason = runner.stop_reason.clone().unwrap_or(StopReason::Saturated);
    Saturated {
        egraph: runner.egraph,
        stop_reason,
        elapsed: start.elapsed(),
    }
}
