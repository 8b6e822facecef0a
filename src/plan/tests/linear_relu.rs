//! Linear + ReLU in each form Burn emits, chains of layers, and the near misses declined.

use super::*;

#[test]
fn claims_linear_relu_with_bias() {
    let mut ir = IrBuilder::new();
    let (x, w, b, y) = linear_relu(&mut ir, &[17, 33]);
    let plan = fused(plan(&ir, &[y]));
    assert_eq!(plan.len, 5);
    assert_eq!(plan.steps.len(), 1);
    let step = plan.fused().next().unwrap();
    assert_eq!(
        (step.x.id, step.w.id, step.bias.unwrap().id),
        (id(x), id(w), id(b))
    );
    assert_eq!(step.out, id(y));
    assert_eq!(
        step.pre, None,
        "nothing reads the pre-activation after the window"
    );
    assert_eq!(step.x.status, TensorStatus::ReadWrite);
    assert_eq!(step.w.status, TensorStatus::ReadOnly);
    assert_eq!(
        plan.guards.len(),
        2,
        "relu's threshold and fill value are guarded"
    );
}

#[test]
fn claims_bias_reshaped_before_the_matmul() {
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let b2 = ir.reshape(b, &[1, 65]);
    let out = ir.matmul(x, w);
    let pre = ir.add(out, b2);
    let y = ir.relu(pre);
    assert_eq!(fused(plan(&ir, &[y])).len, 5);
}

#[test]
fn claims_bias_on_the_left_of_the_add() {
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let out = ir.matmul(x, w);
    let b2 = ir.reshape(b, &[1, 65]);
    let pre = ir.add(b2, out);
    let y = ir.relu(pre);
    let plan = fused(plan(&ir, &[y]));
    assert_eq!(plan.fused().next().unwrap().bias.unwrap().id, id(b));
}

#[test]
fn claims_rank_three_input() {
    let mut ir = IrBuilder::new();
    let (x, w, b, y) = linear_relu(&mut ir, &[4, 17, 33]);
    let plan = fused(plan(&ir, &[y]));
    assert_eq!(plan.len, 6);
    let step = plan.fused().next().unwrap();
    assert_eq!(
        (step.x.id, step.w.id, step.bias.unwrap().id),
        (id(x), id(w), id(b))
    );
}

#[test]
fn claims_relu_written_as_clamp_min() {
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let pre = ir.linear(x, w, Some(b));
    let y = ir.clamp_min(pre);
    assert_eq!(fused(plan(&ir, &[y])).guards.len(), 2);
}

#[test]
fn claims_relu_written_as_max_pair_with_zeros() {
    for full in [false, true] {
        let mut ir = IrBuilder::new();
        let (x, w, b) = operands(&mut ir, &[17, 33]);
        let pre = ir.linear(x, w, Some(b));
        let y = ir.max_pair_zeros(pre, full);
        let plan = fused(plan(&ir, &[y]));
        assert_eq!(plan.len, 6);
        assert_eq!(plan.guards.len(), full as usize);
    }
}

#[test]
fn writes_the_pre_activation_when_autodiff_keeps_it() {
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let pre = ir.linear(x, w, Some(b));
    ir.keep(pre);
    let y = ir.relu(pre);
    let plan = fused(plan(&ir, &[y]));
    assert_eq!(plan.fused().next().unwrap().pre, Some(id(pre)));
}

#[test]
fn chains_two_layers_in_one_plan() {
    let mut ir = IrBuilder::new();
    let (x, w1, b1) = operands(&mut ir, &[17, 33]);
    let (w2, b2) = (ir.param(&[65, 65]), ir.param(&[65]));
    let h = ir.linear(x, w1, Some(b1));
    let h = ir.relu(h);
    let y = ir.linear(h, w2, Some(b2));
    let y = ir.relu(y);
    let plan = fused(plan(&ir, &[y]));
    assert_eq!(plan.len, 10);
    let steps: Vec<_> = plan.fused().collect();
    assert_eq!(steps.len(), 2);
    assert_eq!(
        steps[1].x.id, steps[0].out,
        "layer 2 reads layer 1's fused output"
    );
}

#[test]
fn claims_up_to_a_trailing_linear_without_activation() {
    let mut ir = IrBuilder::new();
    let (x, w1, b1) = operands(&mut ir, &[17, 33]);
    let (w2, b2) = (ir.param(&[65, 10]), ir.param(&[10]));
    let h = ir.linear(x, w1, Some(b1));
    let h = ir.relu(h);
    let y = ir.linear(h, w2, Some(b2));
    assert_eq!(
        fused(plan(&ir, &[y])).len,
        5,
        "the last Linear is left to Burn"
    );
}

#[test]
fn runs_a_view_between_fused_ops() {
    let mut ir = IrBuilder::new();
    let x = ir.input(&[17, 33]);
    let w_t = ir.param(&[65, 33]); // stored transposed: the matmul reads it through strides
    let b = ir.param(&[65]);
    let b_row = ir.reshape(b, &[1, 65]);
    let w = ir.swap_dims(w_t, 0, 1);
    let out = ir.matmul(x, w);
    let pre = ir.add(out, b_row);
    let y = ir.relu(pre);
    let plan = fused(plan(&ir, &[y]));
    assert_eq!(plan.len, 6);
    assert!(
        plan.steps.contains(&Step::Run(1)),
        "swap_dims runs as Burn's view: {:?}",
        plan.steps
    );
    assert_eq!(plan.fused().next().unwrap().w.id, id(w));
}

#[test]
fn runs_a_leading_matmul_no_pattern_claims() {
    // The tail of a backward pass (a weight gradient, plain matmuls off) and the next step's
    // forward in one block: burn-fusion's block already holds the gradient, so declining would
    // run every op of it un-fused.
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let dy = ir.input(&[17, 65]);
    let x_t = ir.swap_dims(x, 0, 1);
    let dw = ir.matmul(x_t, dy);
    let pre = ir.linear(x, w, Some(b));
    let y = ir.relu(pre);
    let plan = fused(plan(&ir, &[dw, y]));
    assert_eq!(plan.len, 7);
    assert_eq!(plan.fused().count(), 1);
    assert!(
        plan.steps.contains(&Step::Run(0)) && plan.steps.contains(&Step::Run(1)),
        "the gradient runs as Burn's ops: {:?}",
        plan.steps
    );
    assert_eq!(plan.fused().next().unwrap().out, id(y));
}

#[test]
fn claims_burns_vecmat_swap_of_tensor_matmul() {
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[4, 1, 33]);
    let w3 = ir.reshape(w, &[1, 33, 65]);
    let b3 = ir.reshape(b, &[1, 1, 65]);
    let out = ir.tensor_matmul(x, w3); // swap_dims, matmul, swap_dims
    let pre = ir.add(out, b3);
    let y = ir.relu(pre);
    let plan = fused(plan(&ir, &[y]));
    assert_eq!(plan.len, 8);
    let step = plan.fused().next().unwrap();
    assert_eq!((step.x.id, step.w.id), (id(x), id(w)));
}

#[test]
fn declines_relu_of_a_different_tensor() {
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let other = ir.input(&[17, 65]);
    let pre = ir.linear(x, w, Some(b));
    let mask = ir.lower_equal_zero(other);
    let y = ir.mask_fill(pre, mask);
    assert_eq!(plan(&ir, &[y]), Claim::Declined(Reason::NoMatch));
}

#[test]
fn declines_a_bias_of_the_wrong_shape() {
    let mut ir = IrBuilder::new();
    let x = ir.input(&[17, 33]);
    let w = ir.param(&[33, 65]);
    let column = ir.param(&[17, 1]); // broadcasts along columns, not rows
    let out = ir.matmul(x, w);
    let pre = ir.add(out, column);
    let y = ir.relu(pre);
    assert_eq!(plan(&ir, &[y]), Claim::Declined(Reason::NoMatch));
}

#[test]
fn declines_the_add_of_a_full_tensor() {
    let mut ir = IrBuilder::new();
    let x = ir.input(&[17, 33]);
    let w = ir.param(&[33, 65]);
    let full = ir.input(&[17, 65]); // a residual, not a bias
    let out = ir.matmul(x, w);
    let pre = ir.add(out, full);
    let y = ir.relu(pre);
    assert_eq!(plan(&ir, &[y]), Claim::Declined(Reason::NoMatch));
}

#[test]
fn declines_when_the_matmul_output_is_read_elsewhere() {
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let out = ir.matmul(x, w);
    ir.keep(out);
    let b2 = ir.reshape(b, &[1, 65]);
    let pre = ir.add(out, b2);
    let y = ir.relu(pre);
    assert_eq!(plan(&ir, &[y]), Claim::Declined(Reason::KeepsIntermediate));
}

#[test]
fn declines_a_window_that_starts_with_another_op() {
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let x = ir.exp(x);
    let pre = ir.linear(x, w, Some(b));
    let y = ir.relu(pre);
    assert_eq!(plan(&ir, &[y]), Claim::Declined(Reason::NotAtBlockStart));
}

#[test]
fn declines_float64() {
    let mut ir = IrBuilder::new().with_dtype(burn_backend::DType::F64);
    let (.., y) = linear_relu(&mut ir, &[17, 33]);
    assert_eq!(plan(&ir, &[y]), Claim::Declined(Reason::NoMatch));
}

#[test]
fn declines_linear_without_activation() {
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let y = ir.linear(x, w, Some(b));
    assert_eq!(plan(&ir, &[y]), Claim::Declined(Reason::NoMatch));
}

#[test]
fn plans_serialise_and_replay_identically() {
    let mut ir = IrBuilder::new();
    let (.., y) = linear_relu(&mut ir, &[17, 33]);
    let plan = fused(plan(&ir, &[y]));
    let json = serde_json::to_string(&plan).unwrap();
    let back: Plan = serde_json::from_str(&json).unwrap();
    assert_eq!(back, plan);
}
