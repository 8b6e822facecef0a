//! bf16 Linear+ReLU in its own test binary (process): Burn 0.21 fixes a device's float dtype at
//! the first tensor created on it, so bf16 cannot share a process with the f32 suite.
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
fn matches_burn_in_bf16() {
    check::check_half::<burn::tensor::bf16>();
}

#[test]
fn mlp_chains_match_burn_in_bf16() {
    check::check_half_chain::<burn::tensor::bf16>();
}

/// Property cases in bf16 (`tests/suite/properties.rs`, `chain_properties.rs`): Linear+ReLU
/// forward and backward, and chained MLPs.
#[test]
fn properties_hold_in_bf16() {
    use burn::prelude::Backend;
    use burn::tensor::bf16;
    type P = common::PlainOf<bf16>;
    type H = common::FusedOf<bf16>;
    if !P::supports_dtype(&common::device(), burn::tensor::DType::BF16) {
        eprintln!("skipped: this device has no bf16 arithmetic");
        return;
    }
    let forward = properties::check_forward::<bf16, P, H>(12);
    let backward = properties::check_backward::<bf16, P, H>(6);
    let chains = chain_properties::check_chains::<bf16, P, H>(6);
    eprintln!("cases where Burn differs from float64: {forward:?} {backward:?} {chains:?}");
}
