//! [`HypatiaFuser`]: feeds the window to capture → rewrite → plan and claims what it plans.

use super::HypatiaOptimization;
use crate::capture::{Canonical, CapturedOp, OpKind, Window};
use crate::config::{ExecutionPolicy, HypatiaConfig, Pattern, config};
use crate::execute::has_matrix_units;
use crate::execute::{LinearOptimization, race, recompute_fused};
use crate::kernel::Epilogue;
use crate::plan::{Claim, Plan, PlanOptions, Step, dump, plan_window};
use crate::stats;
use burn_backend::DType;
use burn_cubecl::CubeRuntime;
use burn_fusion::{FuserProperties, FuserStatus, OperationFuser};
use burn_ir::{OperationIr, TensorId};
use egg::StopReason;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Ops a window may hold before the fuser closes: bounds the e-graph and the wait for a match.
pub const MAX_WINDOW: usize = 64;
/// Window length past which the fuser closes at the next matmul, so that a long window ends
/// where a pattern begins rather than being cut inside one at [`MAX_WINDOW`]. A claim cut
/// inside a pattern (a Linear claimed, its activation left out) leaves the next window
/// starting mid-pattern, and in a stream of repeated layers every later window is then out of
/// phase with the stored ones: burn-fusion stops replaying its plans lazily and explores the
/// whole queue again at each sync (measured on lavapipe: `exploration completed: sync, 65/942
/// ops optimized`, then 65/877, ...).
const SOFT_WINDOW: usize = 48;
/// Ops a window may grow past its claim (or, before any claim, past its first matmul) before
/// the fuser closes. An open fuser keeps burn-fusion's block open, and a block that closes with
/// no ready fuser runs every op un-fused, so Hypatia must not hold ops it will not claim.
const PENDING: usize = 16;
/// Ops of an activation's derivative from its first op (GELU's `powi(pre, 3)`, the `cast` of
/// the sigmoid SiLU's backward recomputes, or the `tanh` tanh GELU's recomputes, of a tensor
/// made before the window) to its last
/// (`mul(y, grad)`, the sum of SiLU's two gradients): a window that has begun one may grow by
/// that much more, past the ops autodiff puts between the `dy · Wᵀ` matmul and the derivative
/// (the layer above's weight and bias gradients; decision record 0021).
const ACTIVATION_GRAD_OPS: usize = 16;
/// Score bonus over Burn's fusers (whose scores count fused ops): a fused matmul epilogue
/// saves more than any elementwise fusion of the same ops.
const SCORE_BONUS: u64 = 1 << 20;
/// Distinct windows whose rewrite result is remembered.
const CACHE_CAPACITY: usize = 4096;

/// Hypatia's [`OperationFuser`].
///
/// Open while the ops it is fed could belong to a Linear + activation; after each op that
/// can end an activation it plans the window (egg runs once per distinct window: results are
/// cached) and becomes ready with the longest block prefix it can run.
pub struct HypatiaFuser<R: CubeRuntime> {
    device: R::Device,
    /// Whether the device has matrix units (then Hypatia's engine may beat Burn's matmul).
    matrix_units: bool,
    window: Window,
    /// The ops as fed (relative), from which Burn's alternatives of the claimed steps are built.
    ops: Vec<OperationIr>,
    /// The window in canonical form, grown with it: the plan cache's key.
    canonical: Canonical,
    /// The device's key in [`stats`], formatted once.
    device_key: String,
    claim: Option<Arc<Plan>>,
    status: FuserStatus,
    /// Time spent in `fuse` since the last reset, for [`stats::HostStats`].
    busy: Duration,
}

impl<R: CubeRuntime> Clone for HypatiaFuser<R> {
    fn clone(&self) -> Self {
        Self {
            device: self.device.clone(),
            matrix_units: self.matrix_units,
            window: self.window.clone(),
            ops: self.ops.clone(),
            canonical: self.canonical.clone(),
            device_key: self.device_key.clone(),
            claim: self.claim.clone(),
            status: self.status,
            // The time so far is the original's to report.
            busy: Duration::ZERO,
        }
    }
}

impl<R: CubeRuntime> HypatiaFuser<R> {
    /// A fuser for `device`.
    pub fn new(device: R::Device) -> Self {
        let client = R::client(&device);
        Self {
            matrix_units: has_matrix_units(&client, DType::F16),
            device_key: stats::device_key(&device),
            device,
            window: Window::new(),
            ops: Vec::new(),
            canonical: Canonical::new(),
            claim: None,
            status: FuserStatus::Open,
            busy: Duration::ZERO,
        }
    }

    fn analyze(&mut self) {
        if let Some(plan) = self.plan_now()
            && self.claim.as_ref().is_none_or(|c| c.len < plan.len)
        {
            self.claim = Some(Arc::new(plan));
        }
    }

    /// After a drop that follows a claim: the claim grown over the window's free tail, if
    /// it has one (see [`Plan::with_free_tail`]), from a plan made with the tail's views in the
    /// window.
    fn claim_free_tail(&mut self) {
        let Some(plan) = self.plan_now() else {
            return;
        };
        if let Some(whole) = plan.with_free_tail(self.window.ops())
            && self.claim.as_ref().is_some_and(|c| c.len <= whole.len)
        {
            self.claim = Some(Arc::new(whole));
        }
    }

    /// After a view (`reshape`, `swap_dims`) right after the claim, of a tensor the claim
    /// computes: the claim grown over it (see [`Plan::with_views`]), from a plan made with the
    /// view in the window.
    fn claim_own_view(&mut self) {
        let ops = self.window.ops();
        let Some((index, op)) = ops.iter().enumerate().next_back() else {
            return;
        };
        let own = |claim: &Plan| {
            claim.len == index
                && matches!(op.kind, OpKind::Reshape | OpKind::SwapDims { .. })
                && (op.inputs.first())
                    .and_then(|x| self.window.find_producer(x.id))
                    .is_some_and(|producer| producer < claim.len)
        };
        if !self.claim.as_deref().is_some_and(own) {
            return;
        }
        if let Some(plan) = self.plan_now()
            && let Some(grown) = plan.with_views(self.window.ops())
        {
            self.claim = Some(Arc::new(grown));
        }
    }

    /// The window's plan, if it claims anything.
    fn plan_now(&self) -> Option<Plan> {
        let config = config();
        let forced = config.execution != ExecutionPolicy::Auto;
        let on = |pattern| !config.disabled(pattern);
        let options = PlanOptions {
            plain_matmuls: (self.matrix_units || forced) && on(Pattern::Matmul),
            // On every device: its race against Burn's fused matmul keeps it never slower.
            // Claiming the last Linear of an MLP lets a claim cover the whole forward, which
            // burn-fusion then replays at each sync instead of exploring again.
            linears: on(Pattern::Linear),
            relu_grads: on(Pattern::MatmulReluGrad),
            activation_grads: on(Pattern::MatmulActivationGrads),
            linear_relus: on(Pattern::LinearRelu),
            activations: on(Pattern::LinearActivations),
            chains: on(Pattern::MlpChain),
            bias_grads: on(Pattern::BiasGrad),
        };
        match plan_cached(&self.canonical, options, &self.device_key, &config) {
            Claim::Fused(plan) => Some(plan),
            Claim::Declined(_) => None,
        }
    }
}

impl<R: CubeRuntime> HypatiaFuser<R> {
    /// Whether op `index` may stay in the window as far as [`OpKind::Source`] goes: a source
    /// after a matmul of the window (a parameter made at its first use, inside a pattern), and
    /// the op after a source only if it reads the source as a matmul's operand or views it.
    /// A window's first op that is a source closes it at once; one read otherwise (a
    /// dropout's random mask, compared with its probability) closes it at that read.
    fn may_hold_source(&self, index: usize) -> bool {
        let ops = self.window.ops();
        let op = &ops[index];
        if op.kind == OpKind::Source {
            return ops[..index].iter().any(|o| o.kind == OpKind::Matmul);
        }
        match index.checked_sub(1).map(|i| &ops[i]) {
            Some(source) if source.kind == OpKind::Source => {
                matches!(
                    op.kind,
                    OpKind::Matmul | OpKind::Reshape | OpKind::SwapDims { .. }
                ) && op.inputs.iter().any(|t| t.id == source.out().id)
            }
            _ => true,
        }
    }

    /// Whether a later op could still give the window a longer claim: every claim begins with
    /// a matmul (after free views), and its ops follow within [`PENDING`] ops
    /// ([`ACTIVATION_GRAD_OPS`] more once a GELU or SiLU derivative has begun).
    ///
    /// A window led by bookkeeping (autodiff freeing the last step's tensors, in an order that
    /// varies) closes at once, as Burn's fusers do: burn-fusion then runs each drop as its own
    /// block, and the windows after it replay stored plans instead of being explored again.
    fn may_grow(&self) -> bool {
        let ops = self.window.ops();
        if ops.first().is_some_and(|op| op.kind == OpKind::Bookkeeping) {
            return false;
        }
        let Some(first) = ops.iter().position(|op| !op.kind.is_free()) else {
            return true;
        };
        let claimed = self.claim.as_ref().map_or(first + 1, |plan| plan.len);
        // A derivative's first op cubes (GELU) or casts (SiLU's recomputed sigmoid) the saved
        // pre-activation, or takes the tanh of tanh GELU's saved tanh input, made before the
        // window (a forward's tanh GELU cubes and takes its tanh, and its SiLU casts, tensors
        // of its own window).
        let derivative = ops[claimed.min(ops.len())..].iter().any(|op| {
            matches!(op.kind, OpKind::PowfScalar | OpKind::Cast | OpKind::Tanh)
                && (op.inputs.first()).is_some_and(|x| self.window.find_producer(x.id).is_none())
        });
        let pending = PENDING + if derivative { ACTIVATION_GRAD_OPS } else { 0 };
        self.window.starts_with_matmul() && ops.len() <= claimed + pending
    }

    /// Whether op `index` is a `mask_where` of LeakyReLU's backward: it masks against zeros
    /// made in the window, with a mask made before it (the forward's saved `x < 0`).
    fn masks_for_leaky_relu_grad(&self, index: usize) -> bool {
        let op = &self.window.ops()[index];
        let made_by = |i: usize, kind: OpKind| {
            (op.inputs.get(i))
                .and_then(|t| self.window.find_producer(t.id))
                .is_some_and(|p| self.window.ops()[p].kind == kind)
        };
        let saved_mask =
            (op.inputs.get(1)).is_some_and(|m| self.window.find_producer(m.id).is_none());
        op.kind == OpKind::MaskWhere
            && saved_mask
            && (made_by(0, OpKind::Zeros) || made_by(2, OpKind::Zeros))
    }

    /// Whether a drop of `freed` frees the weight of the claim's last step while that step is a
    /// bare Linear (no bias, no activation yet): a temporary `nn::Linear` dropped after its
    /// forward, whose activation may still come. Closing there would leave that activation to
    /// Burn's ops (where plain matmuls are claimed, a bare Linear is a claim of its own).
    fn frees_a_bare_linears_weight(&self, freed: TensorId) -> bool {
        let Some(last) = self.claim.as_ref().and_then(|plan| plan.fused().last()) else {
            return false;
        };
        // (A gate comes only with a backward epilogue.)
        let bare =
            last.bias.is_none() && last.bias_grad.is_none() && last.epilogue == Epilogue::Identity;
        bare && freed == last.w.id
    }

    /// Adds the time spent in `fuse` to the device's [`stats::HostStats`].
    fn report_busy(&mut self) {
        if !self.busy.is_zero() {
            let nanos = std::mem::take(&mut self.busy).as_nanos() as u64;
            stats::record(&self.device_key, |s| s.host.fuser_nanos += nanos);
        }
    }

    /// [`OperationFuser::fuse`] on an open fuser.
    fn fuse_open(&mut self, operation: &OperationIr) {
        self.window.push(operation);
        self.ops.push(operation.clone());
        let index = self.window.len() - 1;
        let op = &self.window.ops()[index];
        self.canonical.push(index, op);
        let kind = op.kind;
        let ends_activation = matches!(kind, OpKind::MaskFill | OpKind::MaskWhere);
        // A long window closes where the next layer's matmul begins, and that matmul stays
        // out of the claim (claimed alone, it would split its layer across two windows).
        let long_at_boundary = kind == OpKind::Matmul && self.window.len() > SOFT_WINDOW;
        // A drop after a claim (autodiff freeing what the block used) may let the claim take
        // the window's free tail, and so the whole block. Not an `Init`: a tensor from host
        // data (or a block burn-fusion merges in for the op that reads both) is followed by
        // the op that reads it.
        let freed_after_claim = op.is_drop() && self.claim.is_some();
        let freed = op.inputs.first().map(|t| t.id).filter(|_| op.is_drop());
        if kind.may_end_pattern() && !long_at_boundary {
            self.analyze();
        } else if freed_after_claim {
            self.claim_free_tail();
        } else {
            self.claim_own_view();
        }
        // A mask that completes no match means the leading matmul's pattern is not one
        // Hypatia runs (or is switched off): stop holding the block. Not one of LeakyReLU's
        // backward, whose two masks come before the sum that completes it.
        let unmatched_mask =
            ends_activation && self.claim.is_none() && !self.masks_for_leaky_relu_grad(index);
        // A claim of the whole block, ended by a free, is ready: closing now lets burn-fusion
        // run it at once instead of holding it for the ops that follow (the next step's
        // forward, or the user's sync). Not a bare Linear's whose weight it frees: its
        // activation may follow.
        let whole_block = freed_after_claim
            && (self.claim.as_ref()).is_some_and(|plan| plan.len == self.window.len())
            && !freed.is_some_and(|id| self.frees_a_bare_linears_weight(id));
        if !kind.is_pattern_kind()
            || !self.may_hold_source(index)
            || long_at_boundary
            || self.window.len() >= MAX_WINDOW
            || unmatched_mask
            || whole_block
            || !self.may_grow()
        {
            self.status = FuserStatus::Closed;
        }
    }
}

/// Planned windows by the hash of their ops; equal hashes are told apart by the ops.
type ClaimCache = Mutex<HashMap<u64, Vec<(PlanOptions, Vec<CapturedOp>, Claim)>>>;

/// Windows in the plan cache (all devices): one per distinct window seen, so it stops
/// growing once a training loop has shown all of its windows.
pub fn cached_windows() -> usize {
    let cache = cache().lock().unwrap_or_else(|p| p.into_inner());
    cache.values().map(Vec::len).sum()
}

fn cache() -> &'static ClaimCache {
    static CACHE: OnceLock<ClaimCache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Capture → rewrite → plan for one window, through the cache; counts stats on a miss.
///
/// The window is planned in canonical form (see [`Window::canonical`]), so training steps
/// that free their temporaries in a different order replay one cached plan.
fn plan_cached(
    canonical: &Canonical,
    options: PlanOptions,
    device: &str,
    config: &HypatiaConfig,
) -> Claim {
    let kept = &canonical.window;
    let on_window = |claim: &Claim| match claim {
        Claim::Fused(plan) => Claim::Fused(plan.on_window(canonical)),
        claim => claim.clone(),
    };
    let hash = canonical.key(options);
    {
        let cache = cache().lock().unwrap_or_else(|p| p.into_inner());
        let hit = cache.get(&hash).and_then(|entries| {
            entries
                .iter()
                .find(|(o, ops, _)| *o == options && ops.as_slice() == kept.ops())
        });
        if let Some((.., claim)) = hit {
            return on_window(claim);
        }
    }
    log::trace!("hypatia: planning window {:#?}", kept.ops());
    let planned = match &config.dump {
        None => plan_window(kept, &config.rewrite, options),
        Some(dir) => {
            let (planned, dump) = dump::explain_window(kept, &config.rewrite, options);
            match dump.write(dir, hash) {
                Ok(path) => log::debug!("hypatia: dumped window to {}", path.display()),
                Err(error) => log::warn!("hypatia: no dump written to {}: {error}", dir.display()),
            }
            planned
        }
    };
    let limited = !matches!(planned.stop_reason, StopReason::Saturated);
    stats::record_egg(device, planned.elapsed, limited);
    let claim = planned.claim;
    match &claim {
        Claim::Fused(plan) => {
            log::debug!(
                "hypatia: planned {} fused step(s) over {} op(s): {:?}",
                plan.fused().count(),
                plan.len,
                plan.steps
            );
            stats::record(device, |s| {
                for step in plan.fused() {
                    stats::pattern(s, step.pattern()).matched += 1;
                }
            });
        }
        Claim::Declined(reason) => {
            log::debug!(
                "hypatia: declined a window of {} op(s): {}",
                kept.len(),
                reason.key()
            );
            stats::record(device, |s| {
                *s.declined.entry(reason.key().to_string()).or_default() += 1
            });
        }
    }
    let mut cache = cache().lock().unwrap_or_else(|p| p.into_inner());
    if cache.len() >= CACHE_CAPACITY {
        cache.clear();
    }
    cache
        .entry(hash)
        .or_default()
        .push((options, kept.ops().to_vec(), claim.clone()));
    on_window(&claim)
}

/// burn-fusion feeds ops to clones of the fusers (one per block) and drops them after.
impl<R: CubeRuntime> Drop for HypatiaFuser<R> {
    fn drop(&mut self) {
        self.report_busy();
    }
}

impl<R: CubeRuntime> OperationFuser<HypatiaOptimization<R>> for HypatiaFuser<R> {
    fn fuse(&mut self, operation: &OperationIr) {
        if self.status == FuserStatus::Closed {
            return;
        }
        if self.window.is_empty() && {
            let config = config();
            Pattern::ALL.iter().all(|&p| config.disabled(p))
        } {
            // Nothing can be claimed: hold no block open (burn-fusion explores as without
            // Hypatia).
            self.status = FuserStatus::Closed;
            return;
        }
        let start = Instant::now();
        self.fuse_open(operation);
        self.busy += start.elapsed();
    }

    fn finish(&mut self) -> HypatiaOptimization<R> {
        let plan = self
            .claim
            .as_ref()
            .expect("finish is only called on a ready fuser");
        let alternatives = race::alternatives::<R>(plan, &self.ops, &self.device);
        let recomputes = (plan.steps.iter())
            .map(|step| match step {
                Step::Fused(fused) => recompute_fused(&self.ops, &fused.recomputed, &self.device),
                Step::Run(_) | Step::BiasGrad(_) => None,
            })
            .collect();
        HypatiaOptimization::Linear(LinearOptimization::with_burn_parts(
            plan.clone(),
            alternatives,
            recomputes,
            self.device.clone(),
        ))
    }

    fn reset(&mut self) {
        self.report_busy();
        self.window = Window::new();
        self.ops.clear();
        self.canonical = Canonical::new();
        self.claim = None;
        self.status = FuserStatus::Open;
    }

    fn status(&self) -> FuserStatus {
        self.status
    }

    fn properties(&self) -> FuserProperties {
        match &self.claim {
            Some(plan) => FuserProperties {
                score: SCORE_BONUS + plan.len as u64,
                ready: true,
            },
            None => FuserProperties {
                score: 0,
                ready: false,
            },
        }
    }

    fn len(&self) -> usize {
        self.claim.as_ref().map_or(0, |plan| plan.len)
    }

    fn clone_dyn(&self) -> Box<dyn OperationFuser<HypatiaOptimization<R>>> {
        Box::new(self.clone())
    }
}
