//! f16 Linear+ReLU in its own test binary (process): Burn 0.21 fixes a device's float dtype at
//! the first tensor created on it, so f16 cannot share a process with the f32 suite.
#![allow(dead_code)] // the shared helpers serve several binaries

#[path = "suite/check.rs"]
mod check;
#[path = "suite/common.rs"]
mod common;

#[test]
fn matches_burn_in_f16() {
    check::check_half::<burn::tensor::f16>();
}
