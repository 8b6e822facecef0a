//! f16 Linear+ReLU in its own test binary (process): Burn 0.21 fixes a device's float dtype at
//! the first tensor created on it, so f16 cannot share a process with the f32 suite.
#![allow(dead_code)] // the shared helpers serve several binaries

#[path = "suite/chain_properties.rs"]
mod chain_properties;
#[path = "suite/check.rs"]
mod check;
#[path = "suite/common.rs"]
mod common;
#[path = "suite/model.rs"]
mod model;
#[path = "suite/properties.rs"]
mod properties;

#[test]
fn matches_burn_in_f16() {
    check::check_half::<burn::tensor::f16>();
}

#[test]
fn mlp_chains_match_burn_in_f16() {
    check::check_half_chain::<burn::tensor::f16>();
}

/// Property cases in f16 (`tests/suite/properties.rs`, `chain_properties.rs`): Linear+ReLU
/// forward and backward, and chained MLPs.
#[test]
fn properties_hold_in_f16() {
    use burn::prelude::Backend;
    use burn::tensor::f16;
    type P = common::PlainOf<f16>;
    type H = common::FusedOf<f16>;
    if !P::supports_dtype(&common::device(), burn::tensor::DType::F16) {
        eprintln!("skipped: this device has no f16 arithmetic");
        return;
    }
    let forward = properties::check_forward::<f16, P, H>(12);
    let backward = properties::check_backward::<f16, P, H>(6);
    let chains = chain_properties::check_chains::<f16, P, H>(6);
    eprintln!("cases where Burn differs from float64: {forward:?} {backward:?} {chains:?}");
}
