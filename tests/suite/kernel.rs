//! The fused Linear+ReLU kernel against Burn's own ops, through `Hypatia<B>` and `B`.
//!
//! Every case runs the decorated backend first on poisoned memory, then the plain one.

use super::check::*;
use super::common::*;
use burn::tensor::DType;
use hypatia::FusedPattern;

#[test]
fn matches_burn_f32_on_odd_and_tile_shapes() {
    let _serial = serial();
    check::<Plain, Fused, 2>(SHAPES);
}

#[test]
fn matches_burn_on_rank_three_input() {
    let _serial = serial();
    let cases = [case(17, 33, 65).lead(&[3]), case(1, 5, 7).lead(&[2])];
    check::<Plain, Fused, 3>(&cases);
    let cases = [case(9, 10, 11).lead(&[2, 3])];
    check::<Plain, Fused, 4>(&cases);
}

#[test]
fn matches_burn_on_transposed_operands() {
    let _serial = serial();
    let cases = [
        case(17, 33, 65).transposed_w(),
        case(17, 33, 65).transposed_x(),
        case(33, 17, 9).transposed_x().transposed_w(),
        case(9, 10, 11).lead(&[2]).transposed_x(),
    ];
    check::<Plain, Fused, 2>(&cases[..3]);
    check::<Plain, Fused, 3>(&cases[3..]);
}

#[test]
fn keeps_nan_and_inf_like_burn() {
    let _serial = serial();
    let cases = [
        case(17, 33, 65).with_specials(),
        case(4, 8, 3).with_specials(),
    ];
    check::<Plain, Fused, 2>(&cases);
}

/// Linear+ReLU under the forced execution `policy` (split or the tensor-core engine) against
/// Burn, at rank 2 and rank 3; each case must have run that way. Split and the engine run (or
/// race) the inner backend's matmul, so their precision is Burn's.
fn forced_execution_matches_burn(
    policy: hypatia::config::ExecutionPolicy,
    rank_two: &[Case],
    rank_three: &[Case],
) {
    use hypatia::config::ExecutionPolicy;
    let ran: fn(&hypatia::FusionStats) -> u64 = match policy {
        ExecutionPolicy::Split => |s| {
            s.patterns
                .get(FusedPattern::LinearRelu)
                .map_or(0, |p| p.split)
        },
        ExecutionPolicy::TensorCore => |s| {
            s.patterns
                .get(FusedPattern::LinearRelu)
                .map_or(0, |p| p.tensor_core)
        },
        other => panic!("no counter for {other:?}"),
    };
    let _policy = ConfigGuard::set(|c| c.execution = policy);
    let tol = burn_tolerance(DType::F32);
    check_with::<Plain, Fused, 2>(rank_two, ran, tol);
    check_with::<Plain, Fused, 3>(rank_three, ran, tol);
}

#[test]
fn split_execution_matches_burn() {
    let _serial = serial();
    let rank_two = [
        case(17, 33, 65),
        case(9, 8, 7).transposed_w().with_specials(),
    ];
    let rank_three = [case(17, 33, 65).lead(&[3]), case(1, 5, 7).lead(&[2])];
    let policy = hypatia::config::ExecutionPolicy::Split;
    forced_execution_matches_burn(policy, &rank_two, &rank_three);
}

/// Without matrix units (lavapipe) the engine's autotune keeps Burn's matmul; on CUDA it picks a
/// cubek tiling on tensor cores (TF32 for f32, like Burn).
#[test]
fn tensor_core_execution_matches_burn() {
    let _serial = serial();
    let rank_two = [
        case(17, 33, 65),
        case(128, 64, 256),
        case(9, 8, 7).transposed_w().with_specials(),
    ];
    let rank_three = [
        case(17, 33, 65).lead(&[3]),
        case(65, 130, 67).transposed_x().lead(&[2]),
    ];
    let policy = hypatia::config::ExecutionPolicy::TensorCore;
    forced_execution_matches_burn(policy, &rank_two, &rank_three);
}

/// `mask_fill(a · b, gate <= 0, 0)` (relu's backward) with `gate` a window of rows of a wider
/// tensor: rows `pitch` apart, as CubeCL's CUDA runtime allocates tensors whose rows are not a
/// multiple of its alignment (33 f32 are padded to 64). On every forced execution the gated
/// step must run as Hypatia's and equal float64 and Burn's: such a gate fell back to Burn's ops
/// (`unsupported-gate`), and a gate read at the output's offset instead of its row's is wrong.
#[test]
fn relu_grad_reads_a_pitched_gate() {
    let _serial = serial();
    use burn::prelude::*;
    use hypatia::config::ExecutionPolicy;
    let device = device();
    let dtype = DType::F32;
    let client = <Runtime as cubecl::Runtime>::client(&device);
    let mut policies = vec![ExecutionPolicy::Tiled, ExecutionPolicy::Split];
    if hypatia::execute::has_matrix_units(&client, dtype) {
        policies.push(ExecutionPolicy::TensorCore);
    }
    let pitch = 64;
    for policy in policies {
        let _policy = ConfigGuard::set(|c| c.execution = policy);
        for lead in [&[17][..], &[1], &[40]] {
            let (k, n) = (9, 33);
            let rows: usize = lead.iter().product();
            let gated = |gate: &[f32], a: &[f32], b: &[f32]| -> Vec<f64> {
                let mut out = vec![0.0f64; rows * n];
                for (i, o) in out.iter_mut().enumerate() {
                    let (r, c) = (i / n, i % n);
                    let dot = (0..k)
                        .map(|l| a[r * k + l] as f64 * b[l * n + c] as f64)
                        .sum();
                    let g = gate[r * pitch + c];
                    *o = if g <= 0.0 { 0.0 } else { dot };
                }
                out
            };
            let a = values(11, rows * k);
            let b = values(12, k * n);
            let mut wide = values(13, rows * pitch);
            for (at, special) in [(3, f32::NAN), (pitch + 4, 0.0), (2 * pitch, -0.0)] {
                if at < wide.len() {
                    wide[at] = special;
                }
            }
            let reference = gated(&wide, &a, &b);
            let run = |fused: bool| -> TensorData {
                macro_rules! on {
                    ($B:ty, $D:literal) => {{
                        let shape = |last: usize| -> [usize; $D] {
                            core::array::from_fn(|i| if i + 1 == $D { last } else { lead[i] })
                        };
                        let a = TensorData::new(a.clone(), shape(k));
                        let a = Tensor::<$B, $D>::from_data(a, &device);
                        let b = TensorData::new(b.clone(), [k, n]);
                        let b = Tensor::<$B, 2>::from_data(b, &device).unsqueeze::<$D>();
                        let wide = TensorData::new(wide.clone(), shape(pitch));
                        let gate =
                            Tensor::<$B, $D>::from_data(wide, &device).slice_dim($D - 1, 0..n);
                        a.matmul(b)
                            .mask_fill(gate.lower_equal_elem(0.0), 0.0)
                            .into_data()
                    }};
                }
                match fused {
                    true => on!(Fused, 2),
                    false => on!(Plain, 2),
                }
            };
            poison::<Fused>(1 << 16, &device);
            let before = hypatia::stats(&device).executed(FusedPattern::MatmulReluGrad);
            let actual = run(true);
            let stats = hypatia::stats(&device);
            assert_eq!(
                stats.executed(FusedPattern::MatmulReluGrad) - before,
                1,
                "{policy:?} {lead:?}: {:?}",
                stats.patterns.get(FusedPattern::MatmulReluGrad)
            );
            let expected = run(false);
            let reference = TensorData::new(
                reference.iter().map(|&v| v as f32).collect(),
                expected.shape.clone(),
            );
            let tolerance = super::check::burn_tolerance(dtype);
            // Which execution a failure below belongs to, and (under the tensor-core engine)
            // which candidate ran last.
            eprintln!(
                "{policy:?} {lead:?}: engine's last candidate {:?}",
                hypatia::kernel::engine::last_candidate::<Runtime>()
            );
            assert_close(&actual, &reference, tolerance);
            assert_close(&actual, &expected, tolerance);
        }
    }
}

/// The engine's autotune key tells apart problems that one candidate declines and another
/// takes: CubeCL's tuner replays a key's choice and panics if that candidate declines. A
/// choice tuned with a contiguous gate (the Hopper kernel takes it) must not replay on a
/// pitched one (it declines), nor one tuned with the Hopper kernel offered f32 after it no
/// longer is (an H100 panicked there, `HYPATIA_WGMMA=half` after a run with it offered).
#[test]
fn engine_keys_part_problems_a_candidate_declines() {
    let _serial = serial();
    use burn_cubecl::tensor::CubeTensor;
    use burn_std::{Metadata, Shape, Strides};
    use hypatia::config::{WeightCopies, WgmmaOffer};
    use hypatia::kernel::Epilogue;
    use hypatia::kernel::engine::LinearArgs;
    use hypatia::kernel::{EngineChoices, F32Math};
    let device = device();
    let client = <Runtime as cubecl::Runtime>::client(&device);
    let tensor = |shape: [usize; 2], strides: [usize; 2]| {
        let len = (shape[0] - 1) * strides[0] + (shape[1] - 1) * strides[1] + 1;
        CubeTensor::<Runtime>::new(
            client.clone(),
            client.empty(len * 4),
            Metadata::new(Shape::from(shape.to_vec()), Strides::new(&strides)),
            device.clone(),
            DType::F32,
        )
    };
    let (k, n) = (64, 96);
    let args = |m: usize, gate_pitch: usize| LinearArgs::<Runtime> {
        x: tensor([m, k], [k, 1]),
        w: tensor([k, n], [n, 1]),
        w_id: None,
        bias: None,
        out: tensor([m, n], [n, 1]),
        pre: None,
        epilogue: Epilogue::ReluGrad,
        gate: Some(tensor([m, n], [gate_pitch, 1])),
        mask: None,
        aux: None,
        params: [0.0; 2],
        bias_grad: None,
        // Whatever `HYPATIA_WGMMA` says: each offer is set here.
        choices: EngineChoices {
            f32: F32Math::Burn,
            wgmma: WgmmaOffer::Auto,
            weight_copies: WeightCopies::default(),
        },
    };
    let contiguous = args(40, n).key();
    let rows = "rows within a power of two share a key";
    assert_eq!(contiguous, args(33, n).key(), "{rows}");
    let pitched = "a pitched gate has a key of its own";
    assert_ne!(contiguous, args(40, 128).key(), "{pitched}");
    let base = args(40, n).choices;
    let truncating = LinearArgs {
        choices: EngineChoices {
            f32: F32Math::Tf32,
            ..base
        },
        ..args(40, n)
    };
    assert_ne!(contiguous, truncating.key(), "so has each TF32 rounding");
    let half = LinearArgs {
        choices: EngineChoices {
            wgmma: WgmmaOffer::Half,
            ..base
        },
        ..args(40, n)
    };
    assert_ne!(contiguous, half.key(), "so has each wgmma offer");
}
