//! The fused Linear+ReLU kernel against Burn's own ops, through `Hypatia<B>` and `B`.
//!
//! Every case runs the decorated backend first on poisoned memory, then the plain one.

use super::common::*;
use burn::prelude::*;
use burn::tensor::activation::relu;
use burn::tensor::{DType, Element, f16};

/// One Linear+ReLU problem.
#[derive(Clone, Copy, Debug)]
struct Case {
    /// Leading dims of x, then m; x is `[lead.., m, k]`.
    lead: &'static [usize],
    m: usize,
    k: usize,
    n: usize,
    /// x is stored `[.., k, m]` and transposed (a strided view).
    transpose_x: bool,
    /// w is stored `[n, k]` and transposed, as a `[out, in]` layout would be.
    transpose_w: bool,
    /// Put NaN and ±Inf into x.
    specials: bool,
}

const fn case(m: usize, k: usize, n: usize) -> Case {
    Case {
        lead: &[],
        m,
        k,
        n,
        transpose_x: false,
        transpose_w: false,
        specials: false,
    }
}

fn forward<B: Backend, const D: usize>(case: &Case, device: &B::Device) -> TensorData {
    let mut x_shape: Vec<usize> = case.lead.to_vec();
    if case.transpose_x {
        x_shape.extend([case.k, case.m]);
    } else {
        x_shape.extend([case.m, case.k]);
    }
    let mut x = data(11, &x_shape, 1.0);
    if case.specials {
        let mut v: Vec<f32> = x.to_vec().unwrap();
        let len = v.len();
        v[0] = f32::NAN;
        v[len / 2] = f32::INFINITY;
        v[len - 1] = f32::NEG_INFINITY;
        x = TensorData::new(v, x_shape.clone());
    }
    let x = Tensor::<B, D>::from_data(x.convert_dtype(B::FloatElem::dtype()), device);
    let x = if case.transpose_x {
        x.swap_dims(D - 2, D - 1)
    } else {
        x
    };
    let w_shape = if case.transpose_w {
        [case.n, case.k]
    } else {
        [case.k, case.n]
    };
    let w = Tensor::<B, 2>::from_data(
        data(12, &w_shape, 0.5).convert_dtype(B::FloatElem::dtype()),
        device,
    );
    let w = if case.transpose_w { w.transpose() } else { w };
    let b = Tensor::<B, 1>::from_data(
        data(13, &[case.n], 0.5).convert_dtype(B::FloatElem::dtype()),
        device,
    );
    let w = w.unsqueeze::<D>();
    let b = b.unsqueeze::<D>();
    relu(x.matmul(w) + b).into_data()
}

fn check<P: Backend, H: Backend<Device = P::Device>, const D: usize>(cases: &[Case]) {
    let _ = device();
    let device = P::Device::default();
    let before = executed();
    for case in cases {
        let out_len = case.lead.iter().product::<usize>() * case.m * case.n;
        poison::<H>(out_len, &device);
        let actual = forward::<H, D>(case, &device);
        let expected = forward::<P, D>(case, &device);
        let tol = tolerance(P::FloatElem::dtype());
        eprintln!("checking {case:?}");
        assert_close(&actual, &expected, tol);
    }
    assert_eq!(
        executed() - before,
        cases.len() as u64,
        "every case must run the fused kernel: {:?}",
        hypatia::stats(&device)
    );
}

const SHAPES: &[Case] = &[
    case(1, 1, 1),
    case(17, 33, 65),
    case(64, 64, 64),
    case(65, 130, 67),
    case(128, 3, 257),
    case(5, 300, 1),
];

#[test]
fn matches_burn_f32_on_odd_and_tile_shapes() {
    check::<Plain, Fused, 2>(SHAPES);
}

#[test]
fn matches_burn_f16_where_supported() {
    let device = device();
    if !Plain::supports_dtype(&device, DType::F16) {
        eprintln!("skipped: this device has no f16 arithmetic (lavapipe does not); run on CUDA");
        return;
    }
    check::<PlainOf<f16>, FusedOf<f16>, 2>(SHAPES);
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
    for c in &cases[..3] {
        check::<Plain, Fused, 2>(std::slice::from_ref(c));
    }
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
