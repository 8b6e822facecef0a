//! Plan dumps: what the planner saw and chose, written for each distinct window it plans.
//!
//! Set the configuration's `dump` key (`HYPATIA_DUMP=<dir>`) and every window the fuser plans (once
//! per distinct window: a plan-cache hit writes nothing) leaves two files in `<dir>`:
//!
//! - `window-<key>.dot`: the saturated e-graph in Graphviz dot (`dot -Tsvg` renders it);
//! - `window-<key>.json`: a [`Dump`]: the window's ops, the [`Claim`] (the chosen plan or why
//!   the window was declined) and, for each op that can end a fused pattern, the cost of every
//!   alternative term in its e-class, cheapest first.
//!
//! `<key>` is the plan-cache key (the window in canonical form and the [`PlanOptions`]), so the
//! same window dumps to the same name in every run. Dumping runs only when egg runs, never on
//! a replay; a file that cannot be written is logged and skipped.
//!
//! ```
//! use hypatia::capture::fixtures::IrBuilder;
//! use hypatia::plan::{Claim, PlanOptions, dump::explain_window};
//! use hypatia::rewrite::Limits;
//!
//! // relu(x·W + b), as Burn's nn::Linear and relu emit it.
//! let mut ir = IrBuilder::new();
//! let (x, w, b) = (ir.input(&[8, 4]), ir.param(&[4, 3]), ir.param(&[3]));
//! let pre = ir.linear(x, w, Some(b));
//! let y = ir.relu(pre);
//! let options = PlanOptions::default();
//! let (planned, dump) = explain_window(&ir.window(&[y]), &Limits::default(), options);
//! assert!(matches!(planned.claim, Claim::Fused(_)));
//! // The relu's e-class holds the fused node and Burn's ops; the fused node is cheapest.
//! let relu = dump.alternatives.last().unwrap();
//! assert!(relu.terms[0].term.starts_with("(fused-linear-relu"));
//! assert!(relu.terms[0].cost < relu.terms.last().unwrap().cost);
//! assert!(dump.dot.starts_with("digraph"));
//! //! ```

use super::build::plan_window_with;
use super::{Claim, PlanOptions, Planned};
use crate::capture::Window;
use crate::rewrite::Lowered;
use crate::rewrite::{CostModel, Limits, Saturated, TensorLang};
use egg::{CostFunction, Extractor, Language, RecExpr};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Terms listed per e-class: an e-class can hold many equal forms (`add` commuted, ...).
const MAX_TERMS: usize = 12;

/// Everything a dump records about one planned window (the `.json` file; the `.dot` file is
/// [`Dump::dot`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Dump {
    /// The window's ops in canonical form, one line each (`t5:[1,2] = matmul(t3:[1,4], ..)`).
    pub window: Vec<String>,
    /// What the planner may claim on this device.
    pub options: PlanOptions,
    /// The decision: a plan (steps in block order) or why the window was declined.
    pub claim: Claim,
    /// For each op that can end a fused pattern, in window order, its e-class's terms.
    pub alternatives: Vec<Alternatives>,
    /// How the e-graph run went.
    pub egraph: EgraphSummary,
    /// The saturated e-graph in Graphviz dot (written to its own file, not to the JSON).
    #[serde(skip)]
    pub dot: String,
}

/// The alternative terms computing one tensor, cheapest first.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Alternatives {
    /// The tensor (canonical relative id) these terms compute.
    pub tensor: u64,
    /// One term per e-node of the tensor's e-class (children at their cheapest), by cost.
    pub terms: Vec<Costed>,
}

/// One term and its cost under [`CostModel`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Costed {
    /// The term, as an s-expression.
    pub term: String,
    /// Its cost (tree cost: a shared child counts once per use).
    pub cost: f64,
}

/// Size and outcome of the equality-saturation run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EgraphSummary {
    /// E-classes after saturation.
    pub classes: usize,
    /// E-nodes after saturation.
    pub nodes: usize,
    /// Why egg stopped (`Saturated` unless a limit was hit).
    pub stop_reason: String,
    /// Lowering, saturation, extraction and planning, in microseconds.
    pub micros: u64,
}

/// [`plan_window`](super::plan_window), and a [`Dump`] of what it saw: the same claim.
pub fn explain_window(window: &Window, limits: &Limits, options: PlanOptions) -> (Planned, Dump) {
    let (planned, (alternatives, classes, nodes, dot)) =
        plan_window_with(window, limits, options, |lowered, saturated| {
            let egraph = &saturated.egraph;
            (
                alternatives(lowered, saturated),
                egraph.number_of_classes(),
                egraph.total_number_of_nodes(),
                egraph.dot().to_string(),
            )
        });
    let dump = Dump {
        window: window.ops().iter().map(ToString::to_string).collect(),
        options,
        claim: planned.claim.clone(),
        alternatives,
        egraph: EgraphSummary {
            classes,
            nodes,
            stop_reason: format!("{:?}", planned.stop_reason),
            micros: planned.elapsed.as_micros() as u64,
        },
        dot,
    };
    (planned, dump)
}

/// Every e-node of each root's class as a term whose children are their cheapest terms.
fn alternatives(lowered: &Lowered, saturated: &Saturated) -> Vec<Alternatives> {
    let egraph = &saturated.egraph;
    let extractor = Extractor::new(egraph, CostModel);
    lowered
        .roots
        .iter()
        .map(|root| {
            let class = &egraph[lowered.class_of[root]];
            let mut terms: Vec<Costed> = class
                .nodes
                .iter()
                .map(|node| {
                    let term: RecExpr<TensorLang> =
                        node.build_recexpr(|id| extractor.find_best_node(id).clone());
                    Costed {
                        cost: CostModel.cost_rec(&term),
                        term: term.to_string(),
                    }
                })
                .collect();
            terms.sort_by(|a, b| a.cost.total_cmp(&b.cost).then(a.term.cmp(&b.term)));
            terms.truncate(MAX_TERMS);
            Alternatives {
                tensor: root.value(),
                terms,
            }
        })
        .collect()
}

impl Dump {
    /// Writes `window-<key>.json` and `window-<key>.dot` into `dir` (created if missing);
    /// returns the JSON file's path.
    pub fn write(&self, dir: &Path, key: u64) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let json = dir.join(format!("window-{key:016x}.json"));
        std::fs::write(&json, serde_json::to_string_pretty(self)?)?;
        std::fs::write(json.with_extension("dot"), &self.dot)?;
        Ok(json)
    }

    /// Reads a dump written by [`Dump::write`] (its `.dot` file too, when present).
    pub fn read(json: &Path) -> std::io::Result<Dump> {
        let mut dump: Dump = serde_json::from_str(&std::fs::read_to_string(json)?)?;
        dump.dot = std::fs::read_to_string(json.with_extension("dot")).unwrap_or_default();
        Ok(dump)
    }
}
