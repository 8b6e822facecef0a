#!/bin/bash
# Builds the CUDA benchmark binaries here and packs them into .device/ for the device tool
# (the tests: tools/cuda_suite.sh).
set -eu
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hypatia-target}
cargo build --release --features cuda --example bench_linear --example matmul_strategies --example bench_train
cp "$CARGO_TARGET_DIR"/release/examples/{bench_linear,matmul_strategies,bench_train} .device/
cp ../shared/bench/torch_ref.py tools/device_*.sh tools/cubecl.toml .device/
cd .device
strip bench_linear matmul_strategies bench_train
tar czf bins.tgz bench_linear matmul_strategies bench_train
rm -f bench_linear matmul_strategies bench_train
ls -la
