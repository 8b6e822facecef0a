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
#[path = "suite/user_models.rs"]
mod user_models;

use common::serial;

#[test]
fn matches_burn_in_bf16() {
    let _serial = serial();
    check::check_half::<burn::tensor::bf16>();
}

#[test]
fn mlp_chains_match_burn_in_bf16() {
    let _serial = serial();
    check::check_half_chain::<burn::tensor::bf16>();
}

/// Property cases in bf16 (`tests/suite/properties.rs`, `chain_properties.rs`), one suite a test.
#[test]
fn forward_properties_hold_in_bf16() {
    let _serial = serial();
    check::check_half_properties::<burn::tensor::bf16>(check::Properties::Forward);
}

#[test]
fn backward_properties_hold_in_bf16() {
    let _serial = serial();
    check::check_half_properties::<burn::tensor::bf16>(check::Properties::Backward);
}

#[test]
fn chain_properties_hold_in_bf16() {
    let _serial = serial();
    check::check_half_properties::<burn::tensor::bf16>(check::Properties::Chains);
}

/// Burn's guide model (`tests/suite/user_models.rs`) trains in bf16 on Hypatia as on Burn.
#[test]
fn user_models_train_as_on_burn_in_bf16_guide() {
    let _serial = serial();
    if check::has_arithmetic::<burn::tensor::bf16>() {
        user_models::guide_trains_as_on_burn::<burn::tensor::bf16>();
    }
}

/// A Transformer encoder classifier (`tests/suite/user_models.rs`) trains in bf16 on Hypatia as
/// on Burn.
#[test]
fn user_models_train_as_on_burn_in_bf16_encoder() {
    let _serial = serial();
    if check::has_arithmetic::<burn::tensor::bf16>() {
        user_models::encoder_trains_as_on_burn::<burn::tensor::bf16>();
    }
}

/// A Llama-style decoder layer (`tests/suite/user_models.rs`) trains in bf16 on Hypatia as on
/// Burn.
#[test]
fn user_models_train_as_on_burn_in_bf16_llama() {
    let _serial = serial();
    if check::has_arithmetic::<burn::tensor::bf16>() {
        user_models::llama_trains_as_on_burn::<burn::tensor::bf16>();
    }
}
