//! `HypatiaFuser` in burn-fusion's search: it stays open only while a claim is still possible.
//! An open fuser keeps burn-fusion's block open, and a block that ends with no ready fuser runs
//! every one of its ops un-fused; so holding ops it will never claim makes a model slower.

use super::common::*;
use burn::tensor::DType;
use burn_fusion::{FuserStatus, OperationFuser};
use hypatia::HypatiaFuser;
use hypatia::capture::fixtures::{IrBuilder, T};

/// Feeds the ops of `ir` (up to `outputs`) one by one; returns the status after each.
fn feed(ir: &IrBuilder, outputs: &[T]) -> (HypatiaFuser<Runtime>, Vec<FuserStatus>) {
    let mut fuser = HypatiaFuser::<Runtime>::new(device());
    let statuses = ir
        .ops(outputs)
        .iter()
        .map(|op| {
            fuser.fuse(op);
            fuser.status()
        })
        .collect();
    (fuser, statuses)
}

fn linear_operands(ir: &mut IrBuilder) -> (T, T, T) {
    (ir.input(&[17, 33]), ir.param(&[33, 65]), ir.param(&[65]))
}

/// `relu(x · w + b)` on fresh operands.
fn linear_relu(ir: &mut IrBuilder) -> T {
    let (x, w, b) = linear_operands(ir);
    let pre = ir.linear(x, w, Some(b));
    ir.relu(pre)
}

#[test]
fn stays_open_through_a_linear_relu_and_is_ready_at_its_end() {
    let _serial = serial();
    let mut ir = IrBuilder::new();
    let y = linear_relu(&mut ir);
    let (fuser, statuses) = feed(&ir, &[y]);
    assert!(
        statuses.iter().all(|s| *s == FuserStatus::Open),
        "{statuses:?}"
    );
    assert!(fuser.properties().ready);
    assert_eq!(fuser.len(), 5);
}

#[test]
fn closes_on_a_window_that_does_not_start_with_a_matmul() {
    let _serial = serial();
    let mut ir = IrBuilder::new();
    let (x, w, b) = linear_operands(&mut ir);
    let x2 = ir.add(x, x);
    let pre = ir.linear(x2, w, Some(b));
    let y = ir.relu(pre);
    let (fuser, statuses) = feed(&ir, &[y]);
    assert_eq!(statuses[0], FuserStatus::Closed, "{statuses:?}");
    assert!(!fuser.properties().ready);
}

/// A builder in float64, which Hypatia never claims (not even a plain matmul on a device with
/// matrix units): what the fuser does with ops it will not claim, on every device.
fn unclaimed() -> IrBuilder {
    IrBuilder::new().with_dtype(DType::F64)
}

#[test]
fn closes_when_a_mask_completes_no_match() {
    let _serial = serial();
    // relu of another tensor after a matmul: the matmul's pattern cannot end any more.
    let mut ir = unclaimed();
    let (x, w, _) = linear_operands(&mut ir);
    let z = ir.input(&[17, 65]);
    let out = ir.matmul(x, w);
    let y = ir.relu(z);
    let (fuser, statuses) = feed(&ir, &[out, y]);
    assert_eq!(statuses[..2], [FuserStatus::Open; 2], "{statuses:?}");
    assert_eq!(statuses[2], FuserStatus::Closed, "{statuses:?}");
    assert!(!fuser.properties().ready);
}

#[test]
fn closes_when_no_claim_comes_within_the_pending_ops() {
    let _serial = serial();
    // A matmul followed by a long run of views that lead nowhere.
    let mut ir = unclaimed();
    let (x, w, _) = linear_operands(&mut ir);
    let mut out = ir.matmul(x, w);
    for _ in 0..40 {
        out = ir.swap_dims(out, 0, 1);
    }
    let (fuser, statuses) = feed(&ir, &[out]);
    let closed = statuses
        .iter()
        .position(|s| *s == FuserStatus::Closed)
        .expect("closes");
    assert!((2..=20).contains(&closed), "closed after op {closed}");
    assert!(!fuser.properties().ready);
}

#[test]
fn a_long_window_closes_where_a_layer_begins() {
    let _serial = serial();
    // Twelve Linear + ReLU layers (five ops each): longer than the fuser holds. It must close
    // on a layer's first op with a claim of whole layers; a claim cut inside a layer would
    // leave the next window out of phase with the stored ones (see `SOFT_WINDOW`).
    let mut ir = IrBuilder::new();
    let mut x = ir.input(&[17, 33]);
    for _ in 0..12 {
        let (w, b) = (ir.param(&[33, 33]), ir.param(&[33]));
        let pre = ir.linear(x, w, Some(b));
        x = ir.relu(pre);
    }
    let ops = ir.ops(&[x]);
    assert_eq!(ops.len(), 60);
    let (fuser, statuses) = feed(&ir, &[x]);
    let closed = statuses
        .iter()
        .position(|s| *s == FuserStatus::Closed)
        .expect("closes before the stream ends");
    assert!(
        closed < hypatia::runtime::MAX_WINDOW,
        "closed after op {closed}"
    );
    assert!(
        matches!(
            ops[closed],
            burn_ir::OperationIr::Float(_, burn_ir::FloatOperationIr::Matmul(_))
        ),
        "closed on op {closed}: {:?}",
        ops[closed]
    );
    assert!(fuser.properties().ready);
    assert_eq!(
        fuser.len(),
        closed,
        "claims every op before the closing matmul"
    );
    assert_eq!(fuser.len() % 5, 0, "claims whole layers");
}

/// A tensor of id `id` as bookkeeping names it.
fn named(id: u64) -> burn_ir::TensorIr {
    burn_ir::TensorIr {
        id: burn_ir::TensorId::new(id),
        shape: vec![1].into(),
        status: burn_ir::TensorStatus::ReadWrite,
        dtype: DType::F32,
    }
}

/// Autodiff's drop of `t`, a tensor of the window.
fn drop_of(t: T) -> burn_ir::OperationIr {
    burn_ir::OperationIr::Drop(named(t.0))
}

/// A drop of a tensor no op of the window touches (one the block held before the window).
fn stray_drop() -> burn_ir::OperationIr {
    burn_ir::OperationIr::Drop(named(10_000))
}

/// `relu(x · w + b)`, then a view of its output, which joins the claim.
fn linear_relu_viewed() -> (HypatiaFuser<Runtime>, T) {
    let mut ir = IrBuilder::new();
    let y = linear_relu(&mut ir);
    let flat = ir.reshape(y, &[17 * 65]);
    let (fuser, statuses) = feed(&ir, &[flat]);
    assert!(
        statuses.iter().all(|s| *s == FuserStatus::Open),
        "{statuses:?}"
    );
    assert_eq!(fuser.len(), 6);
    (fuser, flat)
}

#[test]
fn views_of_what_a_claim_computes_join_it() {
    let _serial = serial();
    // Burn's backward of a Linear + ReLU whose input was a reshaped image (the guide model:
    // conv → pool → flatten → Linear): the gated `dy · w2ᵀ`, the bias gradient's `sum_dim`,
    // then its `reshape` and the `reshape` of the gradient back to the image's shape. Left out
    // of the claim, the two views open the next block, where Burn's elementwise fuser holds
    // them open while the ops after them are queued, and those ops then run grouped (and their
    // outputs laid out) otherwise than on Burn (decision record 0026).
    let mut ir = IrBuilder::new();
    let dy = ir.input(&[17, 10]);
    let w2 = ir.param(&[64, 10]);
    let pre = ir.param(&[17, 64]);
    let wt = ir.swap_dims(w2, 0, 1);
    let dx = ir.matmul(dy, wt);
    let mask = ir.lower_equal_zero(pre);
    let dpre = ir.mask_fill(dx, mask);
    let sum = ir.sum_dim(dpre, 0);
    let db = ir.reshape(sum, &[64]);
    let image = ir.reshape(dpre, &[17, 4, 4, 4]);
    let ops = ir.ops(&[db, image]);
    let (fuser, statuses) = feed(&ir, &[db, image]);
    assert!(
        statuses.iter().all(|s| *s == FuserStatus::Open),
        "{statuses:?}"
    );
    assert!(fuser.properties().ready);
    assert_eq!(fuser.len(), ops.len(), "the claim takes both views");
}

#[test]
fn a_view_of_a_tensor_from_before_the_claim_stays_out() {
    let _serial = serial();
    // The next layer's transposed weight (or any view of a tensor the claim did not compute)
    // may begin the next match: it is not the claim's.
    let mut ir = IrBuilder::new();
    let y = linear_relu(&mut ir);
    let w = ir.param(&[65, 9]);
    let wt = ir.swap_dims(w, 0, 1);
    let (fuser, _) = feed(&ir, &[y, wt]);
    assert_eq!(fuser.len(), 5);
}

#[test]
fn a_drop_after_a_whole_claim_and_views_closes_with_the_whole_block_claimed() {
    let _serial = serial();
    // Linear + ReLU, a view of its output, then autodiff's drop (of the view, or of a tensor
    // the block holds that the window never read): nothing more can join the claim, and a
    // claim of the whole block runs as soon as burn-fusion has queued it (a claim leaving a
    // tail waits for the ops that followed it when it was explored).
    for drop in [drop_of, |_| stray_drop()] {
        let (mut fuser, flat) = linear_relu_viewed();
        fuser.fuse(&drop(flat));
        assert_eq!(fuser.status(), FuserStatus::Closed);
        assert!(fuser.properties().ready);
        assert_eq!(fuser.len(), 7, "the claim takes the view and the drop");
    }
}

#[test]
fn an_init_after_a_whole_claim_leaves_it_open() {
    let _serial = serial();
    // An `Init` after a claim is what burn-fusion feeds when it merges another block (a bias
    // from host data) into this one for the op that reads both: closing there would refuse
    // the merge, and the Linear would lose its epilogue.
    let (mut fuser, _) = linear_relu_viewed();
    let init = burn_ir::InitOperationIr { out: named(10_001) };
    fuser.fuse(&burn_ir::OperationIr::Init(init));
    assert_eq!(fuser.status(), FuserStatus::Open);
    assert_eq!(fuser.len(), 6);
}

#[test]
fn a_drop_after_an_unclaimed_op_leaves_the_claim_as_it_was() {
    let _serial = serial();
    // An op past the claim that is not a view may still start or feed a later match: the
    // drop neither grows the claim over it nor closes the fuser.
    let mut ir = IrBuilder::new();
    let y = linear_relu(&mut ir);
    let doubled = ir.add(y, y);
    let (mut fuser, _) = feed(&ir, &[doubled]);
    fuser.fuse(&drop_of(doubled));
    assert_eq!(fuser.status(), FuserStatus::Open);
    assert_eq!(fuser.len(), 5);
}

/// The first forward of a freshly made `nn::SwiGlu`: Burn makes the up projection's weight at
/// its first use, a `Random` between SiLU and `x · W₃`, and the window holds it (run as Burn's
/// op, the same draw as on Burn) so that the block is still one `linear-swiglu` step, equal to
/// Burn's forward.
#[test]
fn a_fresh_swiglus_first_forward_is_one_fused_step() {
    use burn::nn::SwiGluConfig;
    use burn::prelude::*;
    let _serial = serial();
    let device = device();
    fn forward<B: Backend>(device: &B::Device) -> TensorData {
        B::seed(device, 23);
        let swiglu = SwiGluConfig::new(32, 88).init::<B>(device);
        let x = Tensor::<B, 3>::from_data(data(7, &[2, 9, 32], 1.0), device);
        swiglu.forward(x).into_data()
    }
    let executed = || hypatia::stats(&device).executed(hypatia::FusedPattern::LinearSwiglu);
    let before = executed();
    let fused = forward::<Fused>(&device);
    let stats = hypatia::stats(&device);
    assert_eq!(
        executed() - before,
        1,
        "{:?}; declined {:?}",
        stats.patterns,
        stats.declined
    );
    assert_close(
        &fused,
        &forward::<Plain>(&device),
        train_tolerance(DType::F32),
    );
}
