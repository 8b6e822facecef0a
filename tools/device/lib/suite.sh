#!/usr/bin/env bash
# The whole test suite built with `--features cuda`, run on a GPU machine in chunks that each
# end inside the device tool's 10-minute limit (book: Troubleshooting, "Running the tests on
# CUDA").
#
#   tools/device/run.sh suite build            here: build every test binary, pack .device/suite.tgz
#   tools/device/run.sh suite list             the chunks, in order
#   tools/device/run.sh suite run [CHUNK ...]  on the GPU machine, from the repo root: the chunks
#                                        named, in that order (all, in list order, if none);
#                                        CHUNK@VAR=VALUE adds a variable; one line per chunk
#
# `run` unpacks .device/suite.tgz, restores CubeCL's autotune/PTX caches from
# .device/cache.tar.xz (tools/device/lib/cache.sh), runs each chunk with `--test-threads=1
# --nocapture` (one test's output after another: a chunk stopped by its limit shows how far it
# got) under `timeout $CHUNK_TIMEOUT` (default 480 s: a 10-minute call also restores and saves the
# caches), appends its output to $OUT/suite.log (or .device/suite.log) and saves the caches to
# $OUT/cache.tar.xz: copy that to .device/ here for the next call (check it with `xz -t`).
# PROPTEST_CASES sets the property tests' case count (default: each test's); JOBS=N runs N
# chunks at once (default 1, in order).
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT"

# name|binary|libtest arguments|environment, the slowest first (with JOBS > 1 they start
# first). `lib-rest` skips what the other lib chunks run, so a new suite module runs there
# without being listed. The wgmma reference tests compile a kernel per tiling and case (NVRTC,
# seconds each): HYPATIA_TEST_SHARD splits their tilings over processes. Each backward property
# case is a new shape that a cold process compiles and autotunes for one to three minutes: those
# suites run as processes of a few cases each, each from its own seed.
LIB_CHUNKS="suite::train suite::mlp suite::sync suite::race suite::replay suite::activations
suite::kernel suite::long_run suite::property_tests suite::half suite::startup suite::learner"
chunks() {
  local skips=""
  for m in $LIB_CHUNKS; do skips="$skips --skip $m"; done
  cat <<EOF
hopper-bf16-0|hopper|--exact wgmma_linear_matches_f64_reference_bf16|HYPATIA_TEST_SHARD=0/2
hopper-bf16-1|hopper|--exact wgmma_linear_matches_f64_reference_bf16|HYPATIA_TEST_SHARD=1/2
hopper-f16-0|hopper|--exact wgmma_linear_matches_f64_reference_f16|HYPATIA_TEST_SHARD=0/2
hopper-f16-1|hopper|--exact wgmma_linear_matches_f64_reference_f16|HYPATIA_TEST_SHARD=1/2
hopper-tf32-0|hopper|--exact wgmma_linear_matches_f64_reference_tf32|HYPATIA_TEST_SHARD=0/2
hopper-tf32-1|hopper|--exact wgmma_linear_matches_f64_reference_tf32|HYPATIA_TEST_SHARD=1/2
hopper-tiny-bf16|hopper|--exact engine_candidates_on_tiny_problems_bf16
hopper-tiny-f16|hopper|--exact engine_candidates_on_tiny_problems_f16
hopper-tiny-f32|hopper|--exact engine_candidates_on_tiny_problems_f32
half_f16-prop-forward|lib|--exact suite::half::f16::forward_properties_hold --include-ignored
half_bf16-prop-forward|lib|--exact suite::half::bf16::forward_properties_hold --include-ignored
half_f16-prop-backward-0|lib|--exact suite::half::f16::backward_properties_hold --include-ignored|PROPTEST_CASES=2 PROPTEST_RNG_SEED=1
half_f16-prop-backward-1|lib|--exact suite::half::f16::backward_properties_hold --include-ignored|PROPTEST_CASES=2 PROPTEST_RNG_SEED=2
half_f16-prop-backward-2|lib|--exact suite::half::f16::backward_properties_hold --include-ignored|PROPTEST_CASES=2 PROPTEST_RNG_SEED=3
half_bf16-prop-backward-0|lib|--exact suite::half::bf16::backward_properties_hold --include-ignored|PROPTEST_CASES=2 PROPTEST_RNG_SEED=1
half_bf16-prop-backward-1|lib|--exact suite::half::bf16::backward_properties_hold --include-ignored|PROPTEST_CASES=2 PROPTEST_RNG_SEED=2
half_bf16-prop-backward-2|lib|--exact suite::half::bf16::backward_properties_hold --include-ignored|PROPTEST_CASES=2 PROPTEST_RNG_SEED=3
half_f16-prop-gelu-backward|lib|--exact suite::half::f16::gelu_backward_properties_hold --include-ignored|PROPTEST_CASES=3
half_bf16-prop-gelu-backward|lib|--exact suite::half::bf16::gelu_backward_properties_hold --include-ignored|PROPTEST_CASES=3
half_f16-prop-silu-backward|lib|--exact suite::half::f16::silu_backward_properties_hold --include-ignored|PROPTEST_CASES=3
half_bf16-prop-silu-backward|lib|--exact suite::half::bf16::silu_backward_properties_hold --include-ignored|PROPTEST_CASES=3
lib-prop-gelu-backward|lib|suite::property_tests::gelu_backward|PROPTEST_CASES=4
lib-prop-silu-backward|lib|suite::property_tests::silu_backward|PROPTEST_CASES=4
half_f16-prop-gelu-tanh-backward|lib|--exact suite::half::f16::gelu_tanh_backward_properties_hold --include-ignored|PROPTEST_CASES=3
half_bf16-prop-gelu-tanh-backward|lib|--exact suite::half::bf16::gelu_tanh_backward_properties_hold --include-ignored|PROPTEST_CASES=3
lib-prop-gelu-tanh-backward|lib|suite::property_tests::gelu_tanh_backward|PROPTEST_CASES=4
half_f16-prop-leaky-relu-backward|lib|--exact suite::half::f16::leaky_relu_backward_properties_hold --include-ignored|PROPTEST_CASES=3
half_bf16-prop-leaky-relu-backward|lib|--exact suite::half::bf16::leaky_relu_backward_properties_hold --include-ignored|PROPTEST_CASES=3
lib-prop-leaky-relu-backward|lib|suite::property_tests::leaky_relu_backward|PROPTEST_CASES=4
half_f16-prop-swiglu-backward|lib|--exact suite::half::f16::swiglu_backward_properties_hold --include-ignored|PROPTEST_CASES=3
half_bf16-prop-swiglu-backward|lib|--exact suite::half::bf16::swiglu_backward_properties_hold --include-ignored|PROPTEST_CASES=3
lib-prop-swiglu-backward|lib|suite::property_tests::swiglu_backward|PROPTEST_CASES=4
half_f16-prop-swiglu-forward|lib|--exact suite::half::f16::swiglu_forward_properties_hold --include-ignored|PROPTEST_CASES=3
half_bf16-prop-swiglu-forward|lib|--exact suite::half::bf16::swiglu_forward_properties_hold --include-ignored|PROPTEST_CASES=3
lib-prop-swiglu-forward|lib|suite::property_tests::swiglu_forward|PROPTEST_CASES=4
lib-prop-backward-0|lib|suite::property_tests::backward|PROPTEST_CASES=6 PROPTEST_RNG_SEED=1
lib-prop-backward-1|lib|suite::property_tests::backward|PROPTEST_CASES=6 PROPTEST_RNG_SEED=2
half_f16-prop-chains|lib|--exact suite::half::f16::chain_properties_hold --include-ignored
half_bf16-prop-chains|lib|--exact suite::half::bf16::chain_properties_hold --include-ignored
hopper|hopper|--skip wgmma_linear_matches_f64_reference --skip engine_candidates_on_tiny_problems
half_f16|lib|suite::half::f16::matches_burn suite::half::f16::rounds_where_burn_rounds suite::half::f16::mlp_chains_match_burn --include-ignored
half_bf16|lib|suite::half::bf16::matches_burn suite::half::bf16::rounds_where_burn_rounds suite::half::bf16::mlp_chains_match_burn --include-ignored
half_bf16-models|lib|suite::half::bf16::encoder_trains suite::half::bf16::bert_trains --include-ignored
half_bf16-models-guide|lib|suite::half::bf16::guide_trains --include-ignored
half_bf16-models-silu|lib|suite::half::bf16::silu_mlp_trains suite::half::bf16::gelu_tanh_mlp_trains suite::half::bf16::leaky_relu_mlp_trains suite::half::bf16::llama_trains --include-ignored
lib-train-models|lib|suite::train::a_ suite::train::burns_guide suite::train::user_model_steps
lib-train|lib|suite::train --skip suite::train::a_ --skip suite::train::burns_guide --skip suite::train::user_model_steps
lib-long-run|lib|suite::long_run --skip suite::long_run::user_models
lib-models-200|lib|suite::long_run::user_models
half_bf16-models-200|lib|suite::half::bf16::models_train_200 --include-ignored
lib-prop-forward|lib|suite::property_tests::forward
lib-rest|lib|$skips
lib-mlp|lib|suite::mlp suite::sync suite::race suite::replay
lib-kernels|lib|suite::activations suite::kernel
lib-prop-chains|lib|suite::property_tests::mlp_chains
startup|lib|suite::startup::
learner|lib-distributed|suite::learner::
unit|hypatia|
EOF
}

build() {
  set -e
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hypatia-cuda}
  mkdir -p .device/suite
  # Compiler messages go to the terminal; the artifacts' paths, from cargo's JSON, to Python.
  set -o pipefail
  cargo test --release --features cuda --lib --tests --no-run --message-format=json-render-diagnostics |
    python3 tools/test_binaries.py .device/suite
  # The learner chunk's binary has Burn's collectives (`distributed`); the others have not, since
  # under it `Autodiff<B>` differentiates only backends with collectives, and the float64
  # reference (`NdArray<f64>`, tests/suite/user_models/float64.rs) has none.
  mkdir -p .device/suite-distributed
  cargo test --release --features cuda,distributed --test lib --no-run --message-format=json-render-diagnostics |
    python3 tools/test_binaries.py .device/suite-distributed
  mv .device/suite-distributed/lib .device/suite/lib-distributed && rm -rf .device/suite-distributed
  cp tools/device/cubecl.toml .device/suite/
  strip .device/suite/* 2>/dev/null || true
  tar czf .device/suite.tgz -C .device suite && rm -rf .device/suite
  bash tools/device/lib/cache.sh id >.device/suite.id
  ls -la .device/suite.tgz
}

# One chunk: its libtest run under `timeout`, its output to $LOGS/NAME.log, one line to stdout.
run_chunk() {
  local name=$1 bin=$2 args=$3 vars=$4 start=$SECONDS
  # Each chunk runs in a folder of its own whose cubecl.toml gives it an autotune cache of its
  # own (under target/tune/, carried like the rest of target/): Burn's fused-matmul autotune key
  # leaves out the vector size, which the trace's narrowest element type sets, so a pick that
  # another binary's process made can be a kernel this one's trace cannot launch (book:
  # Troubleshooting, "Burn's own failures"). The compiled PTX stays shared.
  local dir=".device/suite/run-${name//[^A-Za-z0-9_-]/_}"
  mkdir -p "$dir"
  printf '[autotune]\ncache = { file = "%s" }\n\n[compilation]\ncache = "target"\n' \
    "$ROOT/target/tune/${dir##*/run-}" >"$dir/cubecl.toml"
  # shellcheck disable=SC2086 # the filters and variables are separate words
  (cd "$dir" && env $vars timeout "$LIMIT" "../$bin" --test-threads=1 --nocapture $args) \
    >"$LOGS/$name.log" 2>&1
  local rc=$? summary
  summary=$(grep -E '^test result' "$LOGS/$name.log" | tail -1 | sed 's/test result: //; s/; finished.*//')
  if [ "$rc" -eq 0 ]; then
    echo "$name: PASS $summary ($((SECONDS - start)) s)"
  else
    [ "$rc" -eq 124 ] && summary="stopped at ${LIMIT} s"
    echo "$name: FAIL rc=$rc $summary ($((SECONDS - start)) s)"
    grep -E '^test .* FAILED$|panicked at' "$LOGS/$name.log" | head -8 | sed 's/^/    /'
  fi
  return "$rc"
}

run() {
  LIMIT=${CHUNK_TIMEOUT:-480}
  LOGS=$(mktemp -d)
  local log=${OUT:-$ROOT/.device}/suite.log jobs=${JOBS:-1} names=() failed=0
  # Under the gate's calls on several GPUs at once (SHARED set) the caller unpacked the
  # binaries and the caches once, and saves the caches once: none of the calls rewrites files
  # another is running or reading.
  if [ -z "${SHARED:-}" ]; then
    tar xzf .device/suite.tgz -C .device
    bash tools/device/lib/cache.sh restore
  fi
  eval "$(bash tools/device/lib/cache.sh env)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  [ "$#" -gt 0 ] || set -- $(chunks | cut -d'|' -f1)
  for want in "$@"; do
    # NAME@VAR=VALUE runs chunk NAME with one more variable (e.g. lib-kernels@HYPATIA_WGMMA=tf32).
    local base=${want%%@*} extra="" line name bin args vars
    [[ "$want" != *@* ]] || extra=${want#*@}
    if ! line=$(chunks | grep -m1 "^$base|"); then
      echo "$want: FAIL no such chunk (tools/device/run.sh suite list)"
      failed=1
      continue
    fi
    IFS='|' read -r name bin args vars <<<"$line"
    names+=("$want")
    # JOBS > 1 runs that many chunks at once (separate processes on one GPU; CubeCL's cache
    # files are safe across processes): for correctness runs, never for timings.
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || failed=1; done
    run_chunk "$want" "$bin" "$args" "$vars $extra" &
  done
  while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || failed=1; done
  for name in "${names[@]}"; do
    echo "=== $name" && cat "$LOGS/$name.log"
  done >>"$log"
  rm -rf "$LOGS"
  [ -z "${OUT:-}" ] || [ -n "${SHARED:-}" ] || bash tools/device/lib/cache.sh save >/dev/null
  return $failed
}

case "${1:-}" in
  build) build ;;
  list) chunks | tr '|' '\t' ;;
  run) shift; run "$@" ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
