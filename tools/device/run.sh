#!/usr/bin/env bash
# The device runner: everything that runs on the GPU machine, or packs for it, is one command of
# this script (tools/device/README.md says what each does and which table it reproduces).
#
# Here (this machine, with Rust):
#   run.sh pack                 the benchmark examples, the PyTorch scripts and cubecl.toml
#                               into .device/bins.tgz (BINS, FEATURES, PACK choose others)
#   run.sh pack-learner         examples/train_multi_gpu (cuda, distributed): .device/learner.tgz
#   run.sh suite build          every test binary: .device/suite.tgz
#   run.sh gate build           the suite's binaries and Burn's tests (tools/burn_tests)
#   run.sh gate calls           the gate's device calls, one a line
#   run.sh gate table FILE...   the gate's table from the calls' result files
#   run.sh suite list           the suite's chunks
#
# There (the GPU machine, from the repository root; carry .device):
#   run.sh bench STEP...        benchmarks beside PyTorch (lib/bench.sh: linear-, train-, ffn-,
#                               swiglu-, cold-, infer-, gelu-DTYPE, precision; STEP@VAR=VALUE)
#   run.sh suite CHUNK...       the CUDA test suite's chunks (all if none)
#   run.sh gate N...            device calls N... of the CUDA gate (DEADLINE=S: all inside S s)
#   run.sh learner              burn-train's Learner runs (RUNS, lib/learner.sh)
#   run.sh wgmma-bench          the Hopper kernel alone beside cuBLASLt (nvcc)
#   run.sh chain-bench          the grid chain kernel alone (nvcc)
#   run.sh timeline CMD...      CMD under a CUPTI trace; py/timeline.py reads it
#   run.sh cache restore|save|env|id   CubeCL's and the driver's caches between calls (id: here)
#   run.sh burn022              Burn 0.22/0.23's own Cuda beside Hypatia on 0.21 (lib/burn022.sh)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hypatia-cuda}

# Examples built --release with FEATURES into .device/PACK with the files they run beside:
# .device/ is git-ignored, so only what `carry` names reaches the device. Without cubecl.toml
# there, CubeCL keeps no PTX cache and every run compiles every kernel again.
pack() {
  set -e
  local bins=${BINS:-bench_linear bench_train bench_infer matmul_strategies cuda_source f32_precision}
  # shellcheck disable=SC2046 # one --example per binary
  cargo build --release --features "${FEATURES:-cuda}" $(printf -- '--example %s ' $bins)
  mkdir -p .device
  for bin in $bins; do cp "$CARGO_TARGET_DIR/release/examples/$bin" .device/; done
  cp "$HERE"/py/torch_*.py "$HERE/cubecl.toml" .device/
  cd .device
  # shellcheck disable=SC2086 # one word per binary
  strip $bins
  # shellcheck disable=SC2086
  tar czf "${PACK:-bins.tgz}" $bins torch_*.py cubecl.toml
  bash "$HERE/lib/cache.sh" id >"$(basename "${PACK:-bins.tgz}" .tgz).id"
  # shellcheck disable=SC2086
  rm -f $bins torch_*.py
  ls -la "${PACK:-bins.tgz}"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  pack) pack ;;
  pack-learner) BINS=train_multi_gpu FEATURES=cuda,distributed PACK=learner.tgz pack ;;
  bench) STEPS="${*:-${STEPS:-linear-f32}}" exec bash "$HERE/lib/bench.sh" ;;
  suite)
    case "${1:-run}" in
      build | list) exec bash "$HERE/lib/suite.sh" "$@" ;;
      run) shift; exec bash "$HERE/lib/suite.sh" run "$@" ;;
      *) exec bash "$HERE/lib/suite.sh" run "$@" ;;
    esac ;;
  gate)
    case "${1:-}" in
      build | calls | table) exec bash "$HERE/lib/gate.sh" "$@" ;;
      *) exec bash "$HERE/lib/gate.sh" run "$@" ;;
    esac ;;
  learner) exec bash "$HERE/lib/learner.sh" ;;
  wgmma-bench) exec bash "$HERE/lib/wgmma_bench.sh" ;;
  chain-bench) exec bash "$HERE/lib/chain_bench.sh" ;;
  timeline) exec bash "$HERE/lib/timeline.sh" "$@" ;;
  cache) exec bash "$HERE/lib/cache.sh" "$@" ;;
  burn022) exec bash "$HERE/lib/burn022.sh" ;;
  *) sed -n '2,28p' "$0"; exit 2 ;;
esac
