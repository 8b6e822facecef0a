//! # Hypatia on Burn 0.22 (proof of the port)
//!
//! Burn 0.22 has no backend type to decorate: fusers are registered. One line before the
//! first tensor makes Burn's own `Device::wgpu`/`Device::cuda` run a matched
//! `relu(x · w + b)` as Hypatia's fused kernel (decision record 0020, issue 70):
//!
//! ```no_run
//! use burn::tensor::{Device, DeviceKind, Tensor, activation::relu};
//! hypatia::register().expect("before the first tensor");
//! let device = Device::wgpu(DeviceKind::DefaultDevice);
//! let x = Tensor::<2>::ones([8, 4], &device);
//! let w = Tensor::<2>::ones([4, 3], &device);
//! let b = Tensor::<1>::ones([3], &device);
//! let y = relu(x.matmul(w) + b.unsqueeze()); // one fused kernel
//! # let _ = y;
//! ```
//!
//! The stages, as in the 0.21 crate: [`fuser`] matches the op stream (here by hand, for the one
//! pattern: the e-graph stages come over with the port), [`operation`] runs a match, and
//! [`kernel`] holds the 0.21 crate's epilogue and tiled kernel, compiled from its sources.

#![warn(missing_docs)]

#[allow(dead_code)]
#[path = "../../src/config/fused_pattern.rs"]
mod fused_pattern;
/// What the shared kernel sources name in the 0.21 crate's `config`.
mod config {
    pub use super::fused_pattern::FusedPattern;
}
pub mod fuser;
pub mod kernel;
pub mod operation;

pub use operation::{counts, set_claiming};

use burn_cubecl::CubeDevice;
use burn_cubecl::fusion::{CubeFuser, OptimizationProvider, RegistryError};

/// Burn's registry entry: one [`fuser::LinearReluFuser`] per execution stream.
pub struct Provider;

impl OptimizationProvider for Provider {
    type Operation = operation::LinearRelu;

    fn fuser(&self, _device: &CubeDevice) -> CubeFuser {
        fuser::LinearReluFuser::boxed()
    }
}

/// Registers Hypatia's fuser with Burn's fusion, for every stream created after it.
///
/// # Errors
/// Burn's [`RegistryError`] once its fusion service runs (a tensor was made before), or when
/// Hypatia is registered already.
pub fn register() -> Result<(), RegistryError> {
    burn_cubecl::fusion::register(Provider)
}
