//! The backward of ReLU, GELU and SiLU: the gated `dy · Wᵀ` step with its bias gradient, and weight
//! gradients.

use super::*;

/// One layer of Burn's backward of Linear + ReLU on `dy` of `shape` (`[.., m, 8]`, the layer
/// above's output gradient) through `w2` `[6, 8]`: `dpre = mask_fill(dy · w2ᵀ, pre <= 0, 0)`,
/// then the layer's weight gradient `xᵀ · dpre` (rank 2) and its bias gradient, `sum_dim` over
/// every leading dim then `reshape`. Returns (dpre, db, dW, the sums).
fn relu_backward_layer(ir: &mut IrBuilder, shape: &[usize]) -> (T, T, Option<T>, Vec<T>) {
    backward_layer(ir, shape, Epilogue::ReluGrad)
}

/// Burn's dropout backward on `grad`: `mul(mul_scalar(grad, 1 / (1 - p)), mask)`, the mask a
/// tensor of the forward's.
fn dropout_backward(ir: &mut IrBuilder, grad: T) -> T {
    let mask = ir.param(&ir.shape(grad));
    let scaled = ir.mul_scalar(grad);
    ir.mul(scaled, mask)
}

/// [`relu_backward_layer`] with the backward of `epilogue`'s activation (relu's mask fill or
/// GELU's `gelu_backward(pre, dy · w2ᵀ)`, or SiLU's gradient with its saved sigmoid).
fn backward_layer(
    ir: &mut IrBuilder,
    shape: &[usize],
    epilogue: Epilogue,
) -> (T, T, Option<T>, Vec<T>) {
    let rank = shape.len();
    let mut hidden = shape.to_vec();
    hidden[rank - 1] = 6;
    let dy = ir.input(shape);
    let w2 = ir.param(&[6, 8]);
    let pre = ir.param(&hidden);
    let wt = ir.swap_dims(w2, 0, 1);
    let mut dx = ir.matmul(dy, wt);
    if epilogue.dropout() {
        dx = dropout_backward(ir, dx);
    }
    let dpre = match epilogue {
        Epilogue::ReluGrad | Epilogue::ReluGradDropout => {
            let mask = ir.lower_equal_zero(pre);
            ir.mask_fill(dx, mask)
        }
        Epilogue::GeluGrad | Epilogue::GeluGradDropout => ir.gelu_backward(pre, dx),
        Epilogue::SiluGrad => {
            let saved = ir.param(&hidden);
            ir.silu_backward(pre, saved, dx)
        }
        other => panic!("{other:?} is no backward"),
    };
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
fn a_backward_produces_its_bias_gradient() {
    let epilogues = [
        Epilogue::ReluGrad,
        Epilogue::GeluGrad,
        Epilogue::ReluGradDropout,
        Epilogue::GeluGradDropout,
        Epilogue::SiluGrad,
    ];
    let cases = epilogues
        .into_iter()
        .flat_map(|e| [(e, vec![17, 8]), (e, vec![3, 5, 8])]);
    for (epilogue, shape) in cases {
        let mut ir = IrBuilder::new();
        let (dpre, db, dw, sums) = backward_layer(&mut ir, &shape, epilogue);
        let outputs: Vec<T> = [Some(db), dw].into_iter().flatten().collect();
        let plan = plan_with(&ir, &outputs, CLAIM_MATMULS);
        let gated = plan
            .fused()
            .find(|s| s.epilogue == epilogue)
            .unwrap_or_else(|| panic!("{epilogue:?} {shape:?} is not fused: {plan:?}"));
        assert_eq!(gated.out, id(dpre));
        // GELU's derivative: its whole chain of ops is the step's, its constants guarded.
        if epilogue.gate() == crate::kernel::Gate::Gelu {
            assert_eq!(plan.guards.len(), 9, "{:?}", plan.guards);
            let derivative = producer(&ir, &outputs, dpre);
            assert!(gated.ops.len() >= 16 && gated.ops.contains(&derivative));
        }
        // SiLU's: the recomputed sigmoid and its derivative are the step's, five constants
        // guarded, the saved sigmoid an operand.
        if epilogue == Epilogue::SiluGrad {
            assert_eq!(plan.guards.len(), 5, "{:?}", plan.guards);
            assert!(gated.ops.len() >= 14, "{:?}", gated.ops);
        }
        // Dropout's scale is read at run time, never guarded; its mask is an operand.
        assert_eq!(gated.params.len(), epilogue.dropout() as usize);
        assert_eq!(gated.mask.is_some(), epilogue.masked());
        assert!(plan.guards.iter().all(|g| !gated.params.contains(&g.id)));
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

#[test]
fn activation_backwards_follow_their_option() {
    for epilogue in [Epilogue::GeluGrad, Epilogue::SiluGrad] {
        let mut ir = IrBuilder::new();
        let (dpre, db, dw, _) = backward_layer(&mut ir, &[17, 8], epilogue);
        let outputs = [db, dw.unwrap()];
        let off = PlanOptions {
            activation_grads: false,
            ..CLAIM_MATMULS
        };
        let plan = plan_with(&ir, &outputs, off);
        assert!(plan.fused().all(|s| s.epilogue != epilogue));
        assert!(plan.fused().all(|s| s.out != id(dpre)), "{plan:?}");
    }
}
