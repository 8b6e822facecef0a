//! [`saturate`]: the only caller of egg's `Runner`.

use super::{CostModel, TensorAnalysis, TensorGraph, TensorLang, rules};
pub use crate::config::Limits;
use egg::{Extractor, Id, RecExpr, Rewrite, Runner, StopReason};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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

fn cached_rules() -> &'static [Rewrite<TensorLang, TensorAnalysis>] {
    static RULES: OnceLock<Vec<Rewrite<TensorLang, TensorAnalysis>>> = OnceLock::new();
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
    saturate_with(egraph, limits, cached_rules())
}

/// [`saturate`] with another rule set: [`rules()`](super::rules) plus a rule being written, for
/// example (the book's "Writing your own rewrite rule" chapter).
///
/// ```
/// use egg::rewrite;
/// use hypatia::rewrite::{Limits, TensorGraph, rules, saturate_with};
/// let mut my_rules = rules();
/// my_rules.push(rewrite!("relu-idempotent"; "(relu (relu ?x))" => "(relu ?x)"));
/// let mut egraph = TensorGraph::default();
/// let root = egraph.add_expr(&"(relu (relu t1:f32:1x3))".parse().unwrap());
/// let saturated = saturate_with(egraph, &Limits::default(), &my_rules);
/// assert_eq!(saturated.find_best(root).1.to_string(), "(relu t1:f32:1x3)");
/// ```
pub fn saturate_with(
    egraph: TensorGraph,
    limits: &Limits,
    rules: &[Rewrite<TensorLang, TensorAnalysis>],
) -> Saturated {
    let start = Instant::now();
    let runner = Runner::default()
        .with_egraph(egraph)
        .with_node_limit(limits.nodes)
        .with_iter_limit(limits.iterations)
        .with_time_limit(limits.time)
        .run(rules);
    let stop_reason = runner.stop_reason.clone().unwrap_or(StopReason::Saturated);
    Saturated {
        egraph: runner.egraph,
        stop_reason,
        elapsed: start.elapsed(),
    }
}
