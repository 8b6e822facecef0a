//! f16 and bf16 on Hypatia as on Burn: Linear+ReLU, MLP chains, the property suites, and (bf16)
//! the user models. Burn 0.21 fixes a device's float dtype at the first tensor created on it, so
//! they run in a child process of this binary ([`in_child`]) while the f32 suite goes on in this
//! one: [`f16_in_a_process_of_its_own`] runs every f16 test in one (which compiles their shared
//! kernels once), likewise bf16. Each test alone (`--exact suite::half::f16::matches_burn
//! --include-ignored`, as the CUDA suite's chunks run them) starts a process of its own.

use super::check::{self, Properties};
use super::common::{in_child, is_child, serial};
use super::user_models;
use std::time::Duration;

/// How long one child may take: f16's tests take minutes on lavapipe; one that never ends fails
/// here instead of blocking the suite.
const LIMIT: Duration = Duration::from_secs(2400);

/// Every f16 test, one after another, in one child process.
#[test]
fn f16_in_a_process_of_its_own() {
    if let Err(e) = in_child("suite::half::f16::", &[], LIMIT) {
        panic!("{e}");
    }
}

/// Every bf16 test, one after another, in one child process.
#[test]
fn bf16_in_a_process_of_its_own() {
    if let Err(e) = in_child("suite::half::bf16::", &[], LIMIT) {
        panic!("{e}");
    }
}

/// Runs `body` as the test `name` in a child process: the one its group's test started, or
/// one of its own.
fn isolated(name: &str, body: impl FnOnce()) {
    // libtest names a test by its path without the crate: `suite::half::f16::…`.
    let name = name.split_once("::").map_or(name, |(_, rest)| rest);
    if is_child(name) {
        let _serial = serial();
        body();
    } else if let Err(e) = in_child(name, &[], LIMIT) {
        panic!("{e}");
    }
}

/// One module of tests for the dtype `$dtype`: the twelve every half dtype runs, then `$name`s of
/// its own, each test named and run in a process of its own.
macro_rules! half_tests {
    ($dtype:ident $(, $(#[$attr:meta])* $name:ident => $body:expr)* $(,)?) => {
        mod $dtype {
            #[allow(unused_imports)]
            use super::*;
            type F = burn::tensor::$dtype;
            half_tests!(@each
                matches_burn => check::check_half::<F>(),
                rounds_where_burn_rounds => check::check_half_rounding::<F>(),
                mlp_chains_match_burn => check::check_half_chain::<F>(),
                forward_properties_hold => check::check_half_properties::<F>(Properties::Forward),
                backward_properties_hold => check::check_half_properties::<F>(Properties::Backward),
                gelu_backward_properties_hold => check::check_half_properties::<F>(Properties::GeluBackward),
                silu_backward_properties_hold => check::check_half_properties::<F>(Properties::SiluBackward),
                gelu_tanh_backward_properties_hold => check::check_half_properties::<F>(Properties::GeluTanhBackward),
                leaky_relu_backward_properties_hold => check::check_half_properties::<F>(Properties::LeakyReluBackward),
                swiglu_backward_properties_hold => check::check_half_properties::<F>(Properties::SwigluBackward),
                swiglu_forward_properties_hold => check::check_half_properties::<F>(Properties::SwigluForward),
                chain_properties_hold => check::check_half_properties::<F>(Properties::Chains),
                $($(#[$attr])* $name => $body),*
            );
        }
    };
    (@each $($(#[$attr:meta])* $name:ident => $body:expr),* $(,)?) => {
        $(
            $(#[$attr])*
            #[test]
            #[ignore = "run by its dtype's `…_in_a_process_of_its_own`, or alone with --include-ignored"]
            fn $name() {
                isolated(concat!(module_path!(), "::", stringify!($name)), || $body);
            }
        )*
    };
}

half_tests!(f16);

// Burn's guide model, a Transformer encoder classifier (with dropout and without), a SiLU
// classifier and a Llama-style decoder layer (`tests/suite/user_models.rs`) train in bf16
// only: it is what such models train in.
half_tests!(bf16,
    guide_trains_as_on_burn => models(user_models::guide_trains_as_on_burn::<F>),
    encoder_trains_as_on_burn => models(user_models::encoder_trains_as_on_burn::<F>),
    bert_trains_as_on_burn => models(user_models::bert_trains_as_on_burn::<F>),
    silu_mlp_trains_as_on_burn => models(user_models::silu_mlp_trains_as_on_burn::<F>),
    gelu_tanh_mlp_trains_as_on_burn => models(user_models::gelu_tanh_mlp_trains_as_on_burn::<F>),
    leaky_relu_mlp_trains_as_on_burn => models(user_models::leaky_relu_mlp_trains_as_on_burn::<F>),
    llama_trains_as_on_burn => models(user_models::llama_trains_as_on_burn::<F>),
    // 200 steps beside Burn without its fusion, which only CUDA builds have.
    #[cfg(feature = "cuda")]
    models_train_200_steps_as_on_burn => models(user_models::trains_200_steps_as_on_burn::<F>),
);

/// Runs a user model's test where the device has bf16 arithmetic.
fn models(test: fn()) {
    if check::has_arithmetic::<burn::tensor::bf16>() {
        test();
    }
}
