//! Start-up of `Hypatia<B>` beside Burn's `B` on one device, in each order, each in a fresh
//! process ([`in_child`]): CubeCL 0.10 starts a device service while holding a lock that a
//! queued stream's fusers take, and the second backend's first op used to deadlock there
//! (`host::submit::start` says how Hypatia avoids it). A hang fails the test after
//! [`LIMIT`] instead of blocking the suite.

use super::common::{Fused, Plain, in_child};
use burn::prelude::*;
use burn::tensor::activation::relu;
use std::time::Duration;

/// How long one child may take: device start, a few kernels compiled, two reads. A
/// deadlocked child never ends; a healthy one takes seconds (minutes on a loaded CPU).
const LIMIT: Duration = Duration::from_secs(300);
/// Which order the child process runs (`plain-first` or `hypatia-first`).
const ORDER: &str = "HYPATIA_STARTUP_ORDER";

/// A Linear + ReLU queued on `B`, with no read: its ops stay queued on burn-fusion's thread,
/// which creates the stream (and its fusers) while the caller goes on.
fn queue<B: Backend>(device: &B::Device) -> Tensor<B, 2> {
    let x = Tensor::<B, 2>::from_data([[1.0, -2.0, 3.0], [0.5, 0.25, -1.0]], device);
    let w = Tensor::<B, 2>::from_data([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0]], device);
    let b = Tensor::<B, 1>::from_data([0.5, -0.5], device);
    relu(x.matmul(w) + b.unsqueeze())
}

fn values<B: Backend>(y: Tensor<B, 2>) -> Vec<f32> {
    y.into_data().convert::<f32>().to_vec().unwrap()
}

/// The child: both backends' first ops back to back in `order`, then both results read.
#[test]
#[ignore = "run by `both_orders_start_without_a_hang`, one process per order"]
fn child() {
    let device = Default::default();
    let (plain, fused) = match std::env::var(ORDER).as_deref() {
        Ok("plain-first") => {
            let plain = queue::<Plain>(&device);
            (plain, queue::<Fused>(&device))
        }
        Ok("hypatia-first") => {
            let fused = queue::<Fused>(&device);
            (queue::<Plain>(&device), fused)
        }
        other => panic!("{ORDER} must be plain-first or hypatia-first, not {other:?}"),
    };
    let (plain, fused) = (values(plain), values(fused));
    assert_eq!(plain, vec![4.5, 0.0, 0.0, 0.75]);
    assert_eq!(fused, plain);
}

#[test]
fn both_orders_start_without_a_hang() {
    let failures: Vec<String> = ["plain-first", "hypatia-first"]
        .into_iter()
        .filter_map(|order| in_child("suite::startup::child", &[(ORDER, order)], LIMIT).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
