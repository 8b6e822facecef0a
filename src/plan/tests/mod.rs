//! Planning hand-built windows: every form Burn 0.21 emits for Linear + relu, and near misses.

mod activations;
mod backward;
mod linear_relu;
mod windows;

use crate::config::FusedPattern;

use super::{Claim, Plan, PlanOptions, Reason, Step, plan_window};
use crate::capture::fixtures::{IrBuilder, T};
use crate::capture::{OpKind, Window};
use crate::kernel::Epilogue;
use crate::rewrite::Limits;
use burn_ir::{TensorId, TensorStatus};

/// The default options, as on a device without matrix units.
const OPTIONS: PlanOptions = PlanOptions::DEFAULT;

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
