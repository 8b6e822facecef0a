//! f16 and bf16 on Hypatia as on Burn: Linear+ReLU, MLP chains, the property suites, and (bf16)
//! the user models. Burn 0.21 fixes a device's float dtype at the first tensor created on it, so
//! each test runs alone in a child process of this binary ([`in_child`]) while the f32 suite
//! goes on in this one.

use super::check::{self, Properties};
use super::common::{in_child, is_child, serial};
use super::user_models;
use std::time::Duration;

/// How long one child may take: the slowest, f16's backward properties, takes minutes on
/// lavapipe; one that never ends fails here instead of blocking the suite.
const LIMIT: Duration = Duration::from_secs(2400);

/// Runs `body` as the test `name` in a child process of its own (this process starts it).
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

/// One module of tests for the dtype `$dtype`: the five every half dtype runs, then `$name`s of
/// its own, each test named and run in a process of its own.
macro_rules! half_tests {
    ($dtype:ident $(, $name:ident => $body:expr)* $(,)?) => {
        mod $dtype {
            #[allow(unused_imports)]
            use super::*;
            type F = burn::tensor::$dtype;
            half_tests!(@each
                matches_burn => check::check_half::<F>(),
                mlp_chains_match_burn => check::check_half_chain::<F>(),
                forward_properties_hold => check::check_half_properties::<F>(Properties::Forward),
                backward_properties_hold => check::check_half_properties::<F>(Properties::Backward),
                chain_properties_hold => check::check_half_properties::<F>(Properties::Chains),
                $($name => $body),*
            );
        }
    };
    (@each $($name:ident => $body:expr),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                isolated(concat!(module_path!(), "::", stringify!($name)), || $body);
            }
        )*
    };
}

half_tests!(f16);

// Burn's guide model, a Transformer encoder classifier and a Llama-style decoder layer
// (`tests/suite/user_models.rs`) train in bf16 only: it is what such models train in.
half_tests!(bf16,
    guide_trains_as_on_burn => models(user_models::guide_trains_as_on_burn::<F>),
    encoder_trains_as_on_burn => models(user_models::encoder_trains_as_on_burn::<F>),
    llama_trains_as_on_burn => models(user_models::llama_trains_as_on_burn::<F>),
);

/// Runs a user model's test where the device has bf16 arithmetic.
fn models(test: fn()) {
    if check::has_arithmetic::<burn::tensor::bf16>() {
        test();
    }
}
