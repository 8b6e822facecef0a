//! f16 Linear+ReLU in its own test binary (process): Burn 0.21 fixes a device's float dtype at
//! the first tensor created on it, so f16 cannot share a process with the f32 suite.
#![allow(dead_code)] // the shared helpers serve several binaries

/// This binary's float type: the device's first tensor fixes it (Burn 0.21).
type Float = burn::tensor::f16;

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

#[test]
fn properties_hold_in_f16() {
    use burn::prelude::Backend;
    use burn::tensor::f16;
    if !common::PlainOf::<f16>::supports_dtype(&common::device(), burn::tensor::DType::F16) {
        eprintln!("skipped: this device has no f16 arithmetic");
        return;
    }
    let forward = properties::check_forward::<f16, common::PlainOf<f16>, common::FusedOf<f16>>(12);
    let backward = properties::check_backward::<f16, common::PlainOf<f16>, common::FusedOf<f16>>(6);
    eprintln!("cases where Burn differs from float64: {forward:?} {backward:?}");
}
