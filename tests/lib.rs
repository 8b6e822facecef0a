//! Integration tests on the default `wgpu` backend (lavapipe on a CPU-only machine).

/// This binary's float type: the device's first tensor fixes it (Burn 0.21).
type Float = f32;

mod suite;
