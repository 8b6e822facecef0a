//! Every activation's epilogue: its guarded constants and run-time parameters.

use super::*;

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

/// The Linears the activation tests build (bias or not, x's shape): with and without bias,
/// rank 2 and 3.
const LINEARS: [(bool, &[usize]); 3] = [(true, &[17, 33]), (false, &[17, 33]), (true, &[2, 5, 33])];

/// `linear(x, w, b)` on fresh [`operands`] of `x_shape`, with their bias where `bias`: the
/// bias operand and the pre-activation.
fn linear_of(ir: &mut IrBuilder, x_shape: &[usize], bias: bool) -> (T, T) {
    let (x, w, b) = operands(ir, x_shape);
    (b, ir.linear(x, w, bias.then_some(b)))
}

/// The one fused step of `activation(linear(x, w, b))` (x `[17, 33]`), built on `ir` (its
/// dtype).
fn activation_step(
    mut ir: IrBuilder,
    activation: fn(&mut IrBuilder, T) -> T,
) -> (Plan, crate::plan::FusedLinear) {
    let (_, pre) = linear_of(&mut ir, &[17, 33], true);
    let y = activation(&mut ir, pre);
    single_step(plan(&ir, &[y]))
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
        for (bias, x_shape) in LINEARS {
            let mut ir = IrBuilder::new();
            let (b, pre) = linear_of(&mut ir, x_shape, bias);
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
    let (plan, _) = activation_step(IrBuilder::new(), IrBuilder::gelu);
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
    let (plan, step) = activation_step(IrBuilder::new(), IrBuilder::leaky_relu);
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
            let (_, pre) = linear_of(&mut ir, &[17, 33], bias);
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
    let ir = IrBuilder::new().with_dtype(burn_backend::DType::BF16);
    let (_, step) = activation_step(ir, IrBuilder::silu);
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

/// `Autodiff`'s SiLU keeps its pre-activation (sigmoid's checkpoint, `mul`'s left operand) and
/// its sigmoid (`mul`'s right): the step writes the pre-activation, and the sigmoid's ops run
/// after its kernel as Burn's, from it (decision record 0023). With and without bias, rank 2
/// and 3.
#[test]
fn claims_silu_whose_sigmoid_is_kept() {
    for (bias, x_shape) in LINEARS {
        let mut ir = IrBuilder::new();
        let (_, pre) = linear_of(&mut ir, x_shape, bias);
        let sigmoid = ir.sigmoid(pre);
        let y = ir.mul(pre, sigmoid);
        ir.keep(pre);
        ir.keep(sigmoid);
        let case = format!("bias {bias}, x {x_shape:?}");
        let window = ir.window(&[y]);
        let (plan, step) = single_step(plan(&ir, &[y]));
        assert_eq!(step.epilogue, Epilogue::Silu, "{case}");
        assert_eq!(step.pre, Some(id(pre)), "{case}");
        assert_eq!(
            step.ops.len(),
            plan.len,
            "{case}: the step covers the window"
        );
        // The sigmoid's eight ops (two casts, three scalar ops, two exps, a log), in order,
        // the last making the kept sigmoid.
        assert_eq!(step.recomputed.len(), 8, "{case}: {step:?}");
        assert!(
            step.recomputed.iter().all(|i| step.ops.contains(i)),
            "{case}"
        );
        assert!(step.recomputed.is_sorted(), "{case}");
        let last = *step.recomputed.last().unwrap();
        assert_eq!(window.ops()[last].out().id, id(sigmoid), "{case}");
        let first = &window.ops()[step.recomputed[0]];
        assert_eq!(
            first.inputs[0].id,
            id(pre),
            "{case}: read from the pre-activation"
        );
    }
}

/// A value kept from a pre-activation nothing keeps (as `Autodiff` keeps LeakyReLU's mask, not
/// its input): the step writes the pre-activation for the recomputed ops alone (decision record
/// 0023).
#[test]
fn claims_kept_values_of_a_pre_activation_nothing_keeps() {
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let pre = ir.linear(x, w, Some(b));
    let sigmoid = ir.sigmoid(pre);
    let y = ir.mul(pre, sigmoid);
    ir.keep(sigmoid);
    let (_, step) = single_step(plan(&ir, &[y]));
    assert_eq!(step.epilogue, Epilogue::Silu);
    assert_eq!(step.pre, Some(id(pre)), "written for the recomputation");
    assert_eq!(step.recomputed.len(), 8, "{step:?}");
}

/// A kept value the pre-activation alone does not make stays a reason to decline: one of the
/// matmul's output before the bias.
#[test]
fn declines_kept_values_not_made_from_the_pre_activation() {
    let mut ir = IrBuilder::new();
    let (x, w, b) = operands(&mut ir, &[17, 33]);
    let out = ir.matmul(x, w);
    let kept = ir.sigmoid(out);
    ir.keep(kept);
    let b2 = ir.reshape(b, &[1, 65]);
    let pre = ir.add(out, b2);
    ir.keep(pre);
    let y = ir.silu(pre);
    assert_eq!(plan(&ir, &[y]), Claim::Declined(Reason::KeepsIntermediate));
}
