//! The fused Linear+ReLU kernel against Burn's own ops, through `Hypatia<B>` and `B`.
//!
//! Every case runs the decorated backend first on poisoned memory, then the plain one.

use super::check::*;
use super::common::*;
use burn::tensor::DType;

#[test]
fn matches_burn_f32_on_odd_and_tile_shapes() {
    check::<Plain, Fused, 2>(SHAPES);
}

#[test]
fn matches_burn_on_rank_three_input() {
    let cases = [
        Case {
            lead: &[3],
            ..case(17, 33, 65)
        },
        Case {
            lead: &[2],
            ..case(1, 5, 7)
        },
    ];
    check::<Plain, Fused, 3>(&cases);
    let cases = [Case {
        lead: &[2, 3],
        ..case(9, 10, 11)
    }];
    check::<Plain, Fused, 4>(&cases);
}

#[test]
fn matches_burn_on_transposed_operands() {
    let cases = [
        Case {
            transpose_w: true,
            ..case(17, 33, 65)
        },
        Case {
            transpose_x: true,
            ..case(17, 33, 65)
        },
        Case {
            transpose_x: true,
            transpose_w: true,
            ..case(33, 17, 9)
        },
        Case {
            lead: &[2],
            transpose_x: true,
            ..case(9, 10, 11)
        },
    ];
    check::<Plain, Fused, 2>(&cases[..3]);
    check::<Plain, Fused, 3>(&cases[3..]);
}

#[test]
fn keeps_nan_and_inf_like_burn() {
    let cases = [
        Case {
            specials: true,
            ..case(17, 33, 65)
        },
        Case {
            specials: true,
            ..case(4, 8, 3)
        },
    ];
    check::<Plain, Fused, 2>(&cases);
}

#[test]
fn split_execution_matches_burn() {
    let _policy = PolicyGuard::set(hypatia::kernel::ExecutionPolicy::Split);
    let split = |s: &hypatia::FusionStats| s.patterns.get("linear-relu").map_or(0, |p| p.split);
    // Split runs the inner backend's matmul: its precision is Burn's.
    let tol = burn_tolerance(DType::F32);
    let cases = [
        case(17, 33, 65),
        Case {
            transpose_w: true,
            specials: true,
            ..case(9, 8, 7)
        },
    ];
    check_with::<Plain, Fused, 2>(&cases, split, tol);
    let cases = [
        Case {
            lead: &[3],
            ..case(17, 33, 65)
        },
        Case {
            lead: &[2],
            ..case(1, 5, 7)
        },
    ];
    check_with::<Plain, Fused, 3>(&cases, split, tol);
}

#[test]
fn tensor_core_execution_matches_burn() {
    let _policy = PolicyGuard::set(hypatia::kernel::ExecutionPolicy::TensorCore);
    let engine =
        |s: &hypatia::FusionStats| s.patterns.get("linear-relu").map_or(0, |p| p.tensor_core);
    // Without matrix units (lavapipe) the engine's autotune keeps Burn's matmul; on CUDA it
    // picks a cubek tiling on tensor cores (TF32 for f32, like Burn).
    let tol = burn_tolerance(DType::F32);
    let cases = [
        case(17, 33, 65),
        case(128, 64, 256),
        Case {
            transpose_w: true,
            specials: true,
            ..case(9, 8, 7)
        },
    ];
    check_with::<Plain, Fused, 2>(&cases, engine, tol);
    let cases = [
        Case {
            lead: &[3],
            ..case(17, 33, 65)
        },
        Case {
            transpose_x: true,
            lead: &[2],
            ..case(65, 130, 67)
        },
    ];
    check_with::<Plain, Fused, 3>(&cases, engine, tol);
}
