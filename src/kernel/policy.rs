//! Which execution a fused step gets on a device: one tiled kernel, the tensor-core engine, or
//! split.
//!
//! The tiled kernel runs on plain units. Measured on an H100 (2026-11-22,
//! `examples/bench_linear`, medians): it beats Burn's `Cuda` at 256×256×512 (f32 1.40x,
//! f16 1.07x, bf16 1.08x) and loses from 1024×784×2048 on (f32 0.75x, f16 0.30x, bf16 0.31x),
//! where tensor cores win. So where the device has matrix units for the dtype and the problem is
//! larger than [`UNIT_KERNEL_MAX_FLOPS`], the step runs on the [tensor-core
//! engine](super::tensor_core): an autotuned matmul (Burn's own among its candidates), then one
//! Hypatia kernel for bias + activation.

use super::LinearProblem;
use burn_backend::DType;
use cubecl::prelude::*;
use std::sync::atomic::{AtomicU8, Ordering};

/// Largest problem (2·m·n·k FLOPs) the unit kernel takes on a device with matrix units.
pub const UNIT_KERNEL_MAX_FLOPS: f64 = 1.0e8;

/// How one fused step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Execution {
    /// One launch: tiled matmul with the epilogue in registers.
    Tiled,
    /// The tensor-core engine's matmul, then Hypatia's bias + activation kernel.
    TensorCore,
    /// The inner backend's matmul ops, then Hypatia's bias + activation kernel.
    Split,
}

/// Override of the automatic choice (tests and benchmarks compare the two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecutionPolicy {
    /// Choose per problem and device (the default).
    Auto,
    /// Always one tiled launch.
    Tiled,
    /// Always the tensor-core engine.
    TensorCore,
    /// Always split.
    Split,
}

static POLICY: AtomicU8 = AtomicU8::new(u8::MAX);

/// Sets the policy for the whole process. Without a call,
/// `HYPATIA_EXECUTION=tiled|tensor-core|split|auto` decides, and `Auto` if unset.
pub fn set_execution_policy(policy: ExecutionPolicy) {
    POLICY.store(policy as u8, Ordering::Relaxed);
}

/// The policy in force.
pub fn execution_policy() -> ExecutionPolicy {
    match POLICY.load(Ordering::Relaxed) {
        0 => ExecutionPolicy::Auto,
        1 => ExecutionPolicy::Tiled,
        2 => ExecutionPolicy::TensorCore,
        3 => ExecutionPolicy::Split,
        _ => {
            let policy = match std::env::var("HYPATIA_EXECUTION").as_deref() {
                Ok("tiled") => ExecutionPolicy::Tiled,
                Ok("tensor-core") => ExecutionPolicy::TensorCore,
                Ok("split") => ExecutionPolicy::Split,
                _ => ExecutionPolicy::Auto,
            };
            set_execution_policy(policy);
            policy
        }
    }
}

/// Whether the inner backend's matmul runs `dtype` on matrix units (cmma or mma) here.
///
/// For f32 that is TF32; CubeCL does not always list a TF32 configuration, so any matrix unit
/// for f16 counts too: on the H100 Burn's f32 matmul beat the unit kernel from 1024×784×2048
/// on (0.64x and 0.42x at 2048³, 2026-11-22), and its results differ from exact f32 by TF32
/// rounding.
pub fn has_matrix_units<R: Runtime>(client: &ComputeClient<R>, dtype: DType) -> bool {
    let storage: StorageType = dtype.into();
    let half: StorageType = DType::F16.into();
    let matmul = &client.properties().features.matmul;
    matmul
        .cmma
        .iter()
        .chain(matmul.mma.iter())
        .any(|config| config.a_type == storage || (dtype == DType::F32 && config.a_type == half))
}

/// The execution for `problem` on `client`'s device under the current policy.
pub fn choose_execution<R: Runtime>(
    problem: &LinearProblem,
    client: &ComputeClient<R>,
) -> Execution {
    match execution_policy() {
        ExecutionPolicy::Tiled => Execution::Tiled,
        ExecutionPolicy::TensorCore => Execution::TensorCore,
        ExecutionPolicy::Split => Execution::Split,
        ExecutionPolicy::Auto => {
            if problem.flops() > UNIT_KERNEL_MAX_FLOPS && has_matrix_units(client, problem.dtype) {
                Execution::TensorCore
            } else {
                Execution::Tiled
            }
        }
    }
}
