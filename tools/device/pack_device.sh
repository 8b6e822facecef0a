#!/bin/bash
# Builds the CUDA benchmark binaries here and packs them into .device/ for the device tool
# (the tests: tools/device/cuda_suite.sh). BINS, FEATURES and PACK choose other examples, e.g. the
# Learner runs of tools/device/device_learner.sh:
#   BINS=train_multi_gpu FEATURES=cuda,distributed PACK=learner.tgz
set -eu
# The test build's target directory: the two builds share every dependency.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hypatia-cuda}
BINS=${BINS:-bench_linear bench_train bench_infer matmul_strategies cuda_source}
PACK=${PACK:-bins.tgz}
# shellcheck disable=SC2046 # one --example per binary
cargo build --release --features "${FEATURES:-cuda}" $(printf -- '--example %s ' $BINS)
mkdir -p .device
for bin in $BINS; do cp "$CARGO_TARGET_DIR/release/examples/$bin" .device/; done
# The files the binaries run beside go inside the pack: .device/ is git-ignored, so only what
# `carry` names reaches the device. Without cubecl.toml there, CubeCL keeps no PTX cache and
# every run compiles every kernel again (45-90 s a run on an H200).
cp ../shared/bench/torch_ref.py tools/device/torch_infer.py tools/device/cubecl.toml .device/
cd .device
strip $BINS
# shellcheck disable=SC2086 # one word per binary
tar czf "$PACK" $BINS torch_ref.py torch_infer.py cubecl.toml
rm -f $BINS
ls -la
