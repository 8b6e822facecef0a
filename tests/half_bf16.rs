//! bf16 Linear+ReLU in its own test binary (process): Burn 0.21 fixes a device's float dtype at
//! the first tensor created on it, so bf16 cannot share a process with the f32 suite.
#![allow(dead_code)] // the shared helpers serve several binaries

/// This binary's float type: the device's first tensor fixes it (Burn 0.21).
type Float = burn::tensor::bf16;

#[path = "suite/check.rs"]
mod check;
#[path = "suite/common.rs"]
mod common;
#[path = "suite/model.rs"]
mod model;

#[test]
fn matches_burn_in_bf16() {
    check::check_half::<burn::tensor::bf16>();
}

#[test]
fn mlp_chains_match_burn_in_bf16() {
    check::check_half_chain::<burn::tensor::bf16>();
}
