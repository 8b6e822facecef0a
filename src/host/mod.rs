//! Host-side stream plumbing: how the caller's thread, burn-fusion's thread and CubeCL's
//! device thread hand work to each other.
//!
//! [`sync`] is the backend's wait for the device, without parking burn-fusion's thread at once;
//! [`submit`] is how the caller's thread hands ops to burn-fusion's thread and waits for them;
//! [`pace`] keeps those hand-offs, and Hypatia's launches to CubeCL's thread, from waiting on a
//! busy thread; [`stream`] runs a device's kernels on one GPU stream.

pub mod pace;
pub mod stream;
pub mod submit;
pub mod sync;
