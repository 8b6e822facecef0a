//! The property tests in f32 (f16 and bf16 run in `tests/suite/half.rs`, each test in a process of its own).

use super::chain_properties::check_chains;
use super::common::{Fused, Plain, serial};
use super::properties::{
    Act, Forward, check_backward, check_backward_of, check_forward, check_forward_of,
};

#[test]
fn forward_f32_matches_burn() {
    let _serial = serial();
    let burn_wrong = check_forward::<f32, Plain, Fused>(24);
    eprintln!("cases where Burn differs from float64: {burn_wrong:?}");
}

#[test]
fn backward_f32_matches_burn() {
    let _serial = serial();
    let burn_wrong = check_backward::<f32, Plain, Fused>(12);
    eprintln!("cases where Burn differs from float64: {burn_wrong:?}");
}

#[test]
fn gelu_backward_f32_matches_burn() {
    let _serial = serial();
    let burn_wrong = check_backward_of::<f32, Plain, Fused>(8, Act::Gelu, false);
    eprintln!("cases where Burn differs from float64: {burn_wrong:?}");
}

#[test]
fn silu_backward_f32_matches_burn() {
    let _serial = serial();
    let burn_wrong = check_backward_of::<f32, Plain, Fused>(6, Act::Silu, false);
    eprintln!("cases where Burn differs from float64: {burn_wrong:?}");
}

#[test]
fn gelu_tanh_backward_f32_matches_burn() {
    let _serial = serial();
    let burn_wrong = check_backward_of::<f32, Plain, Fused>(6, Act::GeluTanh, false);
    eprintln!("cases where Burn differs from float64: {burn_wrong:?}");
}

#[test]
fn backward_through_dropout_f32_matches_burn() {
    let _serial = serial();
    for act in [Act::Relu, Act::Gelu] {
        let burn_wrong = check_backward_of::<f32, Plain, Fused>(4, act, true);
        eprintln!("{act:?}: cases where Burn differs from float64: {burn_wrong:?}");
    }
}

#[test]
fn mlp_chains_f32_match_burn() {
    let _serial = serial();
    let burn_wrong = check_chains::<f32, Plain, Fused>(12);
    eprintln!("cases where Burn differs from float64: {burn_wrong:?}");
}

#[test]
fn leaky_relu_backward_f32_matches_burn() {
    let _serial = serial();
    let burn_wrong = check_backward_of::<f32, Plain, Fused>(6, Act::LeakyRelu, false);
    eprintln!("cases where Burn differs from float64: {burn_wrong:?}");
}

#[test]
fn swiglu_backward_f32_matches_burn() {
    let _serial = serial();
    let burn_wrong = check_backward_of::<f32, Plain, Fused>(6, Act::Swiglu, false);
    eprintln!("cases where Burn differs from float64: {burn_wrong:?}");
}

#[test]
fn swiglu_forward_f32_matches_burn() {
    let _serial = serial();
    let burn_wrong = check_forward_of::<f32, Plain, Fused>(8, Forward::Swiglu);
    eprintln!("cases where Burn differs from float64: {burn_wrong:?}");
}
