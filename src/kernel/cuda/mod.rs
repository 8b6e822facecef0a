//! Hand-written CUDA C++ kernels: the Hopper `wgmma` kernel, the grid-wide MLP chain and the
//! TF32 transpose, for what CubeCL 0.10's frontend cannot express (`wgmma`, a grid barrier).
//!
//! [`Preamble`] writes every kernel's source: the shared header ([`HEADER`]), the
//! configuration's `#define`s and generated code, the kernel. A `CudaSource` is a kernel's
//! configuration, everything that changes its source; `launch_source` hands CubeCL the source
//! as a `CubeTask`: CubeCL compiles it with NVRTC for the device, caches it by the
//! configuration, and launches it on its own stream with its own memory, like any of its
//! kernels. Arguments go in CubeCL's order: the tensor maps, then the tensor maps' buffers and
//! the other buffers, then the parameters by value.

mod preamble;

pub use preamble::{HEADER, Preamble};

#[cfg(feature = "cuda")]
mod cubecl_launch;

#[cfg(feature = "cuda")]
pub(crate) use cubecl_launch::{CudaSource, is_cuda, launch_source, pack_words};
