//! Planning hand-built windows: every form Burn 0.21 emits for Linear + relu, and near misses.
use crate::FusedPattern;

use super::{Claim, Plan, PlanOptions, Reason, Step, plan_window};
use crate::capture::fixtures::{IrBuilder, T};
use crate::capture::{OpKind, Window};
use crate::kernel::Epilogue;
use crate::rewrite::Limits;
use burn_ir::{TensorId, TensorStatus};

/// Forward patterns only, as on a device without matrix units.
const OPTIONS: PlanOptions = PlanOptions {
    plain_matmuls: false,
    relu_grads: true,
    linear_relus: true,
    activations: true,
    linears: false,
    chains: true,
    bias_grads: true,
};

fn plan(ir: &IrBuilder, outputs: &[T]) -> Claim {
    plan_window(&ir.window(outputs), &Limits::default(), OPTIONS).claim
}

fn fused(claim: Claim) -> Plan {
    match claim {
        Claim::Fused(plan) => plan,
        Claim::Declined(reason) => panic!("expected a fused plan, declined: {reason:?}"),
    }
}

fn id(t: T) -> TensorId {
    TensorId::new(t.0)
}

/// x, w, b of a `[m, k] x [k, n]` Linear with bias, as a module holds them.
fn operands(ir: &mut IrBuilder, x_shape: &[usize]) -> (T, T, T) {
    let k = *x_shape.last().unwrap();
    (ir.input(x_shape), ir.param(&[k, 65]), ir.param(&[65]))
}

/// `relu(linear(x, w, b))` on fresh [`operands`]: x, w, b and the activation.
fn linear_relu(ir: &mut IrBuilder, x_shape: &[usize]) -> (T, T, T, T) {
    let (x, w, b) = operands(ir, x_shape);
    let pre = ir.linear(x, w, Some(b));
    (x, w, b, ir.relu(pre))
}

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

/// `Drop(id)` of a tensor with `id`, as burn-fusion records a freed tensor.
fn drop_op(id: u64) -> burn_ir::OperationIr {
    burn_ir::OperationIr::Drop(burn_ir::TensorIr {
        id: TensorId::new(id),
        shape: burn_std::Shape::from(vec![3]),
        status: TensorStatus::ReadWrite,
        dtype: burn_backend::DType::F32,
    })
}

/// The ops of `ir` with `drops` inserted: `(position, id)`, positions in the original ops.
fn window_with_drops(ir: &IrBuilder, outputs: &[T], drops: &[(usize, u64)]) -> Window {
    let mut window = Window::new();
    for (index, op) in ir.ops(outputs).iter().enumerate() {
        for &(_, id) in drops.iter().filter(|(at, _)| *at == index) {
            window.push(&drop_op(id));
        }
        window.push(op);
    }
    window
}

#[test]
fn stray_drops_in_any_order_plan_as_one_window() {
    let mut ir = IrBuilder::new();
    let (x, w, _, y) = linear_relu(&mut ir, &[17, 33]);
    let bare = ir.window(&[y]);
    let a = window_with_drops(&ir, &[y], &[(0, 100), (2, 101)]);
    let b = window_with_drops(&ir, &[y], &[(0, 101), (0, 100), (4, 102)]);
    let (ca, cb) = (a.canonical(), b.canonical());
    let canonical_bare = bare.canonical();
    assert_eq!(ca.window.ops(), canonical_bare.window.ops());
    assert_eq!(cb.window.ops(), canonical_bare.window.ops());
    assert_eq!(ca.key(OPTIONS), canonical_bare.key(OPTIONS));
    assert_eq!(cb.key(OPTIONS), canonical_bare.key(OPTIONS));
    let other = PlanOptions {
        relu_grads: false,
        ..OPTIONS
    };
    assert_ne!(
        ca.key(OPTIONS),
        ca.key(other),
        "options are part of the key"
    );
    assert_eq!(ca.ops, [1, 2, 4, 5, 6]);

    let compact = fused(plan_window(&ca.window, &Limits::default(), OPTIONS).claim);
    for (window, canonical) in [(&a, &ca), (&b, &cb)] {
        let on_window = compact.on_window(canonical);
        assert_eq!(on_window.len, window.len());
        // Every op of the prefix runs exactly once: a drop as Burn's op, the rest fused.
        let mut runs: Vec<usize> = on_window
            .steps
            .iter()
            .flat_map(|step| match step {
                Step::Run(index) | Step::BiasGrad(index) => vec![*index],
                Step::Fused(fused) => fused.ops.clone(),
            })
            .collect();
        runs.sort_unstable();
        assert_eq!(runs, (0..window.len()).collect::<Vec<_>>());
        for step in on_window.fused() {
            assert!(
                step.ops
                    .iter()
                    .all(|&i| window.ops()[i].kind != OpKind::Bookkeeping)
            );
            assert!(step.matmul_ops.iter().all(|i| step.ops.contains(i)));
            assert_eq!((step.x.id, step.w.id, step.out), (id(x), id(w), id(y)));
        }
    }
}

#[test]
fn drops_of_window_tensors_are_planned() {
    let mut ir = IrBuilder::new();
    let (x, .., y) = linear_relu(&mut ir, &[17, 33]);
    // Dropping x (which the matmul reads) is part of the window's dataflow: it stays.
    let window = window_with_drops(&ir, &[y], &[(2, x.0)]);
    let canonical = window.canonical();
    assert_eq!(canonical.window.len(), window.len());
    assert_eq!(canonical.ops, (0..window.len()).collect::<Vec<_>>());
}

#[test]
fn canonical_windows_plan_on_the_ids_they_came_from() {
    // The same Linear + relu after ten other tensors (ids shifted by 10, dims renumbered).
    let mut ir = IrBuilder::new();
    for _ in 0..10 {
        ir.input(&[5, 7]);
    }
    let (.., y) = linear_relu(&mut ir, &[17, 33]);
    let window = ir.window(&[y]);
    let canonical = window.canonical();
    let planned = fused(plan_window(&canonical.window, &Limits::default(), OPTIONS).claim);
    assert_eq!(planned.on_window(&canonical), fused(plan(&ir, &[y])));
}

#[test]
fn options_turn_linear_relu_off() {
    let mut ir = IrBuilder::new();
    let (.., y) = linear_relu(&mut ir, &[17, 33]);
    let off = PlanOptions {
        linear_relus: false,
        ..OPTIONS
    };
    let planned = plan_window(&ir.window(&[y]), &Limits::default(), off).claim;
    assert_eq!(planned, Claim::Declined(Reason::NoMatch));
}

#[test]
fn dumps_record_the_claim_and_every_alternative() {
    let mut ir = IrBuilder::new();
    let (.., y) = linear_relu(&mut ir, &[17, 33]);
    let window = ir.window(&[y]);
    let (planned, dump) = super::dump::explain_window(&window, &Limits::default(), OPTIONS);
    assert_eq!(planned.claim, plan(&ir, &[y]));
    assert_eq!(dump.claim, planned.claim);
    assert_eq!(dump.window.len(), window.len());
    assert!(dump.window[0].contains("= matmul("), "{:?}", dump.window);
    // Roots: the matmul, the bias add, then relu's mask_fill; the relu's class holds the fused
    // node and the unfused `mask-fill`, which costs more.
    assert_eq!(dump.alternatives.len(), 3, "{:?}", dump.alternatives);
    let relu = &dump.alternatives[2];
    assert_eq!(relu.tensor, window.ops().last().unwrap().out().id.value());
    let cheapest = &relu.terms[0];
    assert!(
        cheapest.term.starts_with("(fused-linear-relu"),
        "{cheapest:?}"
    );
    let unfused = relu.terms.iter().find(|t| t.term.starts_with("(mask-fill"));
    assert!(unfused.is_some_and(|t| t.cost > cheapest.cost), "{relu:?}");
    assert!(relu.terms.windows(2).all(|p| p[0].cost <= p[1].cost));
    assert!(dump.egraph.nodes >= dump.egraph.classes && dump.egraph.classes > 0);
    assert_eq!(dump.egraph.stop_reason, "Saturated");

    let dir = std::env::temp_dir().join(format!("hypatia-dump-test-{}", std::process::id()));
    let json = dump.write(&dir, 0xabc).unwrap();
    assert_eq!(json.file_name().unwrap(), "window-0000000000000abc.json");
    let read = super::dump::Dump::read(&json).unwrap();
    assert_eq!(read.claim, dump.claim);
    assert_eq!(read.alternatives.len(), dump.alternatives.len());
    assert!(read.dot.starts_with("digraph") && read.dot.contains("fused-linear-relu"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn dumps_say_why_a_window_was_declined() {
    let mut ir = IrBuilder::new();
    let (.., y) = linear_relu(&mut ir, &[17, 33]);
    let off = PlanOptions {
        linear_relus: false,
        ..OPTIONS
    };
    let (_, dump) = super::dump::explain_window(&ir.window(&[y]), &Limits::default(), off);
    assert_eq!(dump.claim, Claim::Declined(Reason::NoMatch));
    let json = serde_json::to_string(&dump).unwrap();
    assert!(json.contains("\"Declined\":\"NoMatch\""), "{json}");
}

#[test]
fn claims_linear_with_relu_applied_twice() {
    let mut ir = IrBuilder::new();
    let (.., once) = linear_relu(&mut ir, &[17, 33]);
    let twice = ir.relu(once);
    let plan = fused(plan(&ir, &[twice]));
    // Both relus fold into the one kernel: it writes the outer relu's output.
    assert_eq!(plan.len, ir.window(&[twice]).len());
    let steps: Vec<_> = plan.fused().collect();
    assert_eq!(steps.len(), 1, "{plan:?}");
    assert_eq!(steps[0].out, id(twice));
    assert_eq!(steps[0].pre, None);
}

/// The single fused step of `claim`, with its plan.
fn single_step(claim: Claim) -> (Plan, crate::plan::FusedLinear) {
    let plan = fused(claim);
    let steps: Vec<_> = plan.fused().cloned().collect();
    assert_eq!(steps.len(), 1, "{plan:?}");
    (plan, steps[0].clone())
}

/// Each activation Burn emits, on a Linear with and without bias, at rank 2 and 3: one step
/// with the activation's epilogue covering every op, its constants guarded in order and its
/// run-time parameters handed to the kernel.
#[test]
fn claims_every_activation_with_and_without_bias() {
    type Build = fn(&mut IrBuilder, T) -> T;
    let activations: [(Epilogue, Build, usize); 5] = [
        (Epilogue::Gelu, IrBuilder::gelu, 5),
        (Epilogue::GeluTanh, IrBuilder::gelu_tanh, 8),
        (Epilogue::Silu, IrBuilder::silu, 9),
        (Epilogue::LeakyRelu, IrBuilder::leaky_relu, 3),
        (Epilogue::Clamp, IrBuilder::clamp, 1),
    ];
    for (epilogue, activation, activation_ops) in activations {
        for (bias, x_shape) in [
            (true, &[17, 33][..]),
            (false, &[17, 33]),
            (true, &[2, 5, 33]),
        ] {
            let mut ir = IrBuilder::new();
            let (x, w, b) = operands(&mut ir, x_shape);
            let pre = ir.linear(x, w, bias.then_some(b));
            let y = activation(&mut ir, pre);
            let linear_ops = ir.window(&[y]).len() - activation_ops;
            let case = format!("{epilogue:?}, bias {bias}, x {x_shape:?}");
            let (plan, step) = single_step(plan(&ir, &[y]));
            assert_eq!(step.epilogue, epilogue, "{case}");
            assert_eq!(plan.len, linear_ops + activation_ops, "{case}");
            assert_eq!(step.ops.len(), plan.len, "{case}");
            assert_eq!(step.bias.map(|r| r.id), bias.then_some(id(b)), "{case}");
            assert_eq!(step.out, id(y), "{case}");
            assert_eq!(
                step.pre, None,
                "{case}: nothing reads the pre-activation later"
            );
            let guarded: Vec<f64> = plan.guards.iter().map(|g| g.value).collect();
            assert_eq!(guarded, epilogue.constants(), "{case}");
            assert_eq!(step.params.len(), epilogue.parameters(), "{case}");
            let mut ids: Vec<u64> = plan.guards.iter().map(|g| g.id).collect();
            ids.extend(&step.params);
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(
                ids.len(),
                epilogue.constants().len() + epilogue.parameters(),
                "{case}: every scalar of the activation is a guard or a parameter"
            );
        }
    }
}

/// The scalars map to their roles: GELU's `√2`, `1`, `2` are the div, add and div scalars.
#[test]
fn gelu_guards_name_its_scalars() {
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let pre = ir.linear(x, w, Some(b));
    let y = ir.gelu(pre);
    let (plan, _) = single_step(plan(&ir, &[y]));
    let guards: Vec<(u64, f64)> = plan.guards.iter().map(|g| (g.id, g.value)).collect();
    assert_eq!(
        guards,
        [(0, crate::kernel::SQRT_2), (1, 1.0), (2, 2.0)],
        "scalar ids in op order: div_scalar, add_scalar, div_scalar"
    );
}

/// LeakyReLU's slope is a parameter read at run time, its threshold a guard.
#[test]
fn leaky_relu_slope_is_a_parameter() {
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let pre = ir.linear(x, w, Some(b));
    let y = ir.leaky_relu(pre);
    let (plan, step) = single_step(plan(&ir, &[y]));
    assert_eq!(plan.guards.len(), 1);
    assert_eq!((plan.guards[0].id, plan.guards[0].value), (0, 0.0));
    assert_eq!(step.params, [1]);
}

/// Under `Autodiff` the pre-activation is kept for the backward: the step writes it.
#[test]
fn activations_write_a_kept_pre_activation() {
    for activation in [IrBuilder::gelu, IrBuilder::silu, IrBuilder::clamp] {
        for bias in [true, false] {
            let mut ir = IrBuilder::new();
            let (x, w, b) = operands(&mut ir, &[17, 33]);
            let pre = ir.linear(x, w, bias.then_some(b));
            ir.keep(pre);
            let y = activation(&mut ir, pre);
            let (_, step) = single_step(plan(&ir, &[y]));
            assert_eq!(step.pre, Some(id(pre)), "bias {bias}");
        }
    }
}

/// SiLU on bf16 casts to f32 and back around the sigmoid; it still fuses.
#[test]
fn claims_silu_in_bf16() {
    let mut ir = IrBuilder::new().with_dtype(burn_backend::DType::BF16);
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let pre = ir.linear(x, w, Some(b));
    let y = ir.silu(pre);
    let (_, step) = single_step(plan(&ir, &[y]));
    assert_eq!(step.epilogue, Epilogue::Silu);
}

/// A relu on a Linear without bias fuses (`relu(x · w)`).
#[test]
fn claims_relu_without_bias() {
    let mut ir = IrBuilder::new();
    let (x, w, _) = operands(&mut ir, &[17, 33]);
    let pre = ir.linear(x, w, None);
    let y = ir.relu(pre);
    let (plan, step) = single_step(plan(&ir, &[y]));
    assert_eq!(step.epilogue, Epilogue::Relu);
    assert_eq!(step.bias, None);
    assert_eq!(plan.len, 3);
    assert_eq!(step.matmul_out, id(pre));
}

/// A Linear without activation is claimed where plain matmuls are (devices with matrix units):
/// the bias add runs in the epilogue.
#[test]
fn claims_linear_without_activation_where_plain_matmuls_are() {
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let y = ir.linear(x, w, Some(b));
    // With plain matmuls on too: the Linear covers the matmul, which is not claimed alone.
    let options = PlanOptions {
        linears: true,
        plain_matmuls: true,
        ..OPTIONS
    };
    let claim = plan_window(&ir.window(&[y]), &Limits::default(), options).claim;
    let (plan, step) = single_step(claim);
    assert_eq!(step.epilogue, Epilogue::Identity);
    assert_eq!(step.pattern(), FusedPattern::Linear);
    assert_eq!(step.bias.map(|r| r.id), Some(id(b)));
    assert_eq!(step.out, id(y));
    assert_eq!(plan.len, 3);
}

/// A GELU whose input is not the Linear's output (another tensor) does not fuse, and the
/// activations are off with `activations: false`.
#[test]
fn declines_activation_near_misses() {
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let pre = ir.linear(x, w, Some(b));
    let other = ir.input(&[17, 65]);
    let half = ir.mul(pre, other);
    let y = ir.gelu(half);
    assert_eq!(plan(&ir, &[y]), Claim::Declined(Reason::NoMatch));

    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let pre = ir.linear(x, w, Some(b));
    let y = ir.gelu(pre);
    let off = PlanOptions {
        activations: false,
        ..OPTIONS
    };
    let claim = plan_window(&ir.window(&[y]), &Limits::default(), off).claim;
    assert_eq!(claim, Claim::Declined(Reason::NoMatch));
}

/// One layer of Burn's backward of Linear + ReLU on `dy` of `shape` (`[.., m, 8]`, the layer
/// above's output gradient) through `w2` `[6, 8]`: `dpre = mask_fill(dy · w2ᵀ, pre <= 0, 0)`,
/// then the layer's weight gradient `xᵀ · dpre` (rank 2) and its bias gradient, `sum_dim` over
/// every leading dim then `reshape`. Returns (dpre, db, dW, the sums).
fn relu_backward_layer(ir: &mut IrBuilder, shape: &[usize]) -> (T, T, Option<T>, Vec<T>) {
    let rank = shape.len();
    let mut hidden = shape.to_vec();
    hidden[rank - 1] = 6;
    let dy = ir.input(shape);
    let w2 = ir.param(&[6, 8]);
    let pre = ir.param(&hidden);
    let wt = ir.swap_dims(w2, 0, 1);
    let dx = ir.matmul(dy, wt);
    let mask = ir.lower_equal_zero(pre);
    let dpre = ir.mask_fill(dx, mask);
    let dw = (rank == 2).then(|| {
        let x = ir.param(&[shape[0], 5]);
        let xt = ir.swap_dims(x, 0, 1);
        ir.matmul(xt, dpre)
    });
    let mut sums = Vec::new();
    let mut summed = dpre;
    for axis in 0..rank - 1 {
        summed = ir.sum_dim(summed, axis);
        sums.push(summed);
    }
    let db = ir.reshape(summed, &[6]);
    (dpre, db, dw, sums)
}

/// The block index of the op producing `t`.
fn producer(ir: &IrBuilder, outputs: &[T], t: T) -> usize {
    ir.window(outputs).find_producer(id(t)).expect("produced")
}

/// Every matmul claimed, as on a device with matrix units.
const CLAIM_MATMULS: PlanOptions = PlanOptions {
    plain_matmuls: true,
    ..OPTIONS
};

fn plan_with(ir: &IrBuilder, outputs: &[T], options: PlanOptions) -> Plan {
    fused(plan_window(&ir.window(outputs), &Limits::default(), options).claim)
}

#[test]
fn relu_backward_produces_its_bias_gradient() {
    for shape in [vec![17, 8], vec![3, 5, 8]] {
        let mut ir = IrBuilder::new();
        let (dpre, db, dw, sums) = relu_backward_layer(&mut ir, &shape);
        let outputs: Vec<T> = [Some(db), dw].into_iter().flatten().collect();
        let plan = plan_with(&ir, &outputs, CLAIM_MATMULS);
        let gated = plan
            .fused()
            .find(|s| s.epilogue == Epilogue::ReluGrad)
            .expect("relu's backward is fused");
        assert_eq!(gated.out, id(dpre));
        let grad = gated.bias_grad.as_ref().expect("its bias gradient too");
        assert_eq!(grad.out, id(*sums.last().unwrap()), "{shape:?}");
        let sum_ops: Vec<usize> = sums.iter().map(|&t| producer(&ir, &outputs, t)).collect();
        assert_eq!(grad.ops, sum_ops, "{shape:?}");
        // The first sum frees the step's output there; a rank-3 intermediate is freed by the
        // second.
        assert!(
            grad.reads
                .iter()
                .all(|r| r.status == TensorStatus::ReadWrite)
        );
        assert_eq!(grad.reads[0].id, id(dpre));
        for op in &sum_ops {
            let at = |wanted: &Step| plan.steps.iter().position(|s| s == wanted);
            assert!(
                at(&Step::BiasGrad(*op))
                    > plan
                        .steps
                        .iter()
                        .position(|s| matches!(s, Step::Fused(f) if f.out == id(dpre)))
            );
            assert_eq!(
                at(&Step::Run(*op)),
                None,
                "a sum runs only as a bias-gradient step"
            );
        }
        assert!(plan.len > *sum_ops.last().unwrap());
    }
}

#[test]
fn bias_gradients_follow_the_option() {
    let mut ir = IrBuilder::new();
    let (.., db, dw, sums) = relu_backward_layer(&mut ir, &[17, 8]);
    let outputs = [db, dw.unwrap()];
    let off = PlanOptions {
        bias_grads: false,
        ..CLAIM_MATMULS
    };
    let plan = plan_with(&ir, &outputs, off);
    assert!(plan.fused().all(|s| s.bias_grad.is_none()));
    let sum = producer(&ir, &outputs, sums[0]);
    assert!(!plan.steps.contains(&Step::BiasGrad(sum)));
}

#[test]
fn a_bias_gradient_does_not_pull_unclaimed_ops_into_the_claim() {
    // Without plain matmuls the weight gradient between the gated step and its sum is Burn's:
    // the claim ends before it, and the sum stays Burn's too.
    let mut ir = IrBuilder::new();
    let (.., db, dw, sums) = relu_backward_layer(&mut ir, &[17, 8]);
    let outputs = [db, dw.unwrap()];
    let plan = plan_with(&ir, &outputs, OPTIONS);
    assert!(plan.fused().all(|s| s.bias_grad.is_none()));
    assert!(plan.len <= producer(&ir, &outputs, sums[0]));
    // A sum right after the claimed ops extends the claim by itself.
    let mut ir = IrBuilder::new();
    let (.., db, _, sums) = relu_backward_layer(&mut ir, &[3, 5, 8]);
    let plan = plan_with(&ir, &[db], OPTIONS);
    let last = producer(&ir, &[db], *sums.last().unwrap());
    assert_eq!(plan.len, last + 1);
    assert!(plan.fused().any(|s| s.bias_grad.is_some()));
}

#[test]
fn a_sum_that_is_not_a_bias_gradient_stays_burns() {
    // Over the last dim (a row sum), and a rank-3 sum whose intermediate is read elsewhere.
    let mut ir = IrBuilder::new();
    let (dpre, ..) = relu_backward_layer(&mut ir, &[17, 8]);
    let rows = ir.sum_dim(dpre, 1);
    let planned = plan_with(&ir, &[rows], CLAIM_MATMULS);
    let gated = planned
        .fused()
        .find(|s| s.epilogue == Epilogue::ReluGrad)
        .unwrap();
    assert_eq!(
        gated.bias_grad.as_ref().map(|g| g.ops.len()),
        Some(1),
        "axis 0 only"
    );

    let mut ir = IrBuilder::new();
    let (.., db, _, sums) = relu_backward_layer(&mut ir, &[3, 5, 8]);
    ir.keep(sums[0]);
    let plan = plan_with(&ir, &[db], CLAIM_MATMULS);
    let gated = plan
        .fused()
        .find(|s| s.epilogue == Epilogue::ReluGrad)
        .unwrap();
    assert_eq!(gated.bias_grad, None);
}

/// The backward of a Linear without activation (an MLP's output layer) on `dy` `[m, 8]` from
/// the loss: `dx = dy · wᵀ`, the weight gradient `xᵀ · dy` and the bias gradient, `sum_dim`
/// of `dy` then `reshape`. Returns (dy, dW, the sum, db).
fn linear_backward_layer(ir: &mut IrBuilder, m: usize) -> (T, T, T, T) {
    let dy = ir.input(&[m, 8]);
    let w = ir.param(&[6, 8]);
    let wt = ir.swap_dims(w, 0, 1);
    let _dx = ir.matmul(dy, wt);
    let x = ir.param(&[m, 6]);
    let xt = ir.swap_dims(x, 0, 1);
    let dw = ir.matmul(xt, dy);
    let sum = ir.sum_dim(dy, 0);
    let db = ir.reshape(sum, &[8]);
    (dy, dw, sum, db)
}

#[test]
fn a_weight_gradient_sums_its_right_operand_for_the_bias_gradient() {
    let mut ir = IrBuilder::new();
    let (dy, dw, sum, db) = linear_backward_layer(&mut ir, 17);
    let outputs = [dw, db];
    let plan = plan_with(&ir, &outputs, CLAIM_MATMULS);
    let step = plan
        .fused()
        .find(|s| s.out == id(dw))
        .expect("the weight gradient is fused");
    assert_eq!(step.w.id, id(dy));
    let grad = step.bias_grad.as_ref().expect("it sums dy too");
    assert!(grad.of_rhs);
    assert_eq!(grad.out, id(sum));
    assert_eq!(grad.ops, vec![producer(&ir, &outputs, sum)]);
    assert_eq!(grad.reads[0].id, id(dy));
    assert_eq!(
        plan.fused().filter(|s| s.bias_grad.is_some()).count(),
        1,
        "one step produces the sum"
    );
    assert!(plan.steps.contains(&Step::BiasGrad(grad.ops[0])));

    // Off with the option, and where the sum is over the last dim (not a bias gradient).
    let off = PlanOptions {
        bias_grads: false,
        ..CLAIM_MATMULS
    };
    assert!(
        plan_with(&ir, &outputs, off)
            .fused()
            .all(|s| s.bias_grad.is_none())
    );
    let mut ir = IrBuilder::new();
    let dy = ir.input(&[17, 8]);
    let x = ir.param(&[17, 6]);
    let xt = ir.swap_dims(x, 0, 1);
    let dw = ir.matmul(xt, dy);
    let rows = ir.sum_dim(dy, 1);
    let plan = plan_with(&ir, &[dw, rows], CLAIM_MATMULS);
    assert!(plan.fused().all(|s| s.bias_grad.is_none()));
}

#[test]
fn a_relu_backward_sum_stays_with_the_gated_step() {
    // The weight gradient `xᵀ · dpre` reads the gated step's output as its right operand; the
    // sum of `dpre` is the gated step's, never the weight gradient's too.
    let mut ir = IrBuilder::new();
    let (dpre, db, dw, _) = relu_backward_layer(&mut ir, &[17, 8]);
    let plan = plan_with(&ir, &[db, dw.unwrap()], CLAIM_MATMULS);
    let with_grads: Vec<_> = plan.fused().filter(|s| s.bias_grad.is_some()).collect();
    assert_eq!(with_grads.len(), 1);
    assert_eq!(with_grads[0].out, id(dpre));
    assert!(!with_grads[0].bias_grad.as_ref().unwrap().of_rhs);
}
