//! The names `matmul.rs` takes from its parent where CubeCL 0.10 and 0.11 differ: the Burn 0.22
//! line (`burn-0.22/src/kernel.rs`) compiles the same `matmul.rs` against its own (decision
//! record 0020).

use cubecl::prelude::*;

/// A staged K-slice in shared memory, as f32.
pub type StageTile = SharedMemory<f32>;
/// The launch argument a `#[define(F)]` kernel takes for `F`.
pub type KernelDType = StorageType;

/// A [`StageTile`] of `len` values.
#[cube]
pub fn stage_tile(#[comptime] len: usize) -> StageTile {
    SharedMemory::<f32>::new(len)
}
