//! Integration tests on the default `wgpu` backend (lavapipe on a CPU-only machine).

mod suite;
