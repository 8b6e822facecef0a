//! The integration tests on the default `wgpu` backend (lavapipe on a CPU-only machine), or on
//! CUDA with `--features cuda`: one binary, so Burn's generic code is built once for them all
//! (decision record 0017). What needs a process of its own (f16 and bf16, start-up) runs in a
//! child process of this binary. The CUDA kernels' raw-buffer tests are `tests/hopper.rs`.

mod suite;
