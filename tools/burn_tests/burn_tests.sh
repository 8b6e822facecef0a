#!/usr/bin/env bash
# Burn 0.21.0's own backend test suite (crates/burn-backend-tests: tensor and autodiff, plus the
# f16 suites and bf16 copies of them on CUDA) run on `Hypatia<B>` and on Burn's `B` alone, so that
# what fails on Hypatia and not on Burn shows (book: Troubleshooting, "Burn's own backend tests").
#
#   tools/burn_tests/burn_tests.sh setup [BURN_DIR]  here: assemble the harness from a Burn checkout
#                                              at v0.21.0 (else download its source from GitHub)
#   tools/burn_tests/burn_tests.sh build [cuda]      here: build both backends' test binaries (wgpu,
#                                              or cuda: then packed, .device/burn_tests-BACKEND.tgz)
#   tools/burn_tests/burn_tests.sh run [FILTER ...]  here or on the GPU machine (from the repo root):
#                                              every binary on each backend built or carried,
#                                              a table and the tests that fail on one backend only
#   tools/burn_tests/burn_tests.sh report [LOGS]     that table again, from a logs folder (e.g. the
#                                              logs of two device calls, one a backend, together)
#
# HARNESS (default ~/.cache/hypatia-burn-tests) holds the assembled crate, the binaries and the
# logs; CARGO_TARGET_DIR defaults to the crate's own (~/.cache/hypatia-target for wgpu,
# ~/.cache/hypatia-cuda for cuda) so the backends build once. `run` runs JOBS binaries at once
# (default 1), each on TEST_THREADS threads (default 2) for at most TIMEOUT seconds (default
# 1800), of the backends BACKENDS names (default "hypatia burn"). On the GPU machine it takes
# the binaries from those backends' packs (a warm machine keeps an earlier call's pack: only
# the named ones are unpacked and run), restores and saves CubeCL's caches as
# tools/device/run.sh suite does, and leaves the table and the logs under $OUT.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/tools/burn_tests"
HARNESS=${HARNESS:-$HOME/.cache/hypatia-burn-tests}
TAG=v0.21.0
# Test binaries, by suite file: Burn's, then this harness's bf16 copies of its f16 suites.
SUITES="tensor autodiff tensor_f16 autodiff_f16 tensor_bf16 autodiff_bf16 memory_cleaning"

setup() {
  local src=${1:-}
  rm -rf "$HARNESS/crate" && mkdir -p "$HARNESS/crate/src"
  if [ -z "$src" ]; then
    src="$HARNESS/burn-$TAG"
    if [ ! -d "$src" ]; then
      mkdir -p "$src"
      curl -fsSL "https://github.com/tracel-ai/burn/archive/refs/tags/$TAG.tar.gz" |
        tar xz -C "$src" --strip-components=1 --wildcards '*/crates/burn-backend-tests/tests'
    fi
  fi
  cp -r "$src/crates/burn-backend-tests/tests" "$HARNESS/crate/"
  local tests="$HARNESS/crate/tests"
  # The backend under test replaces Burn's `Dispatch`; the CubeCL-internal suite stays Burn's.
  cp "$HERE/backend.rs" "$tests/common/backend.rs"
  cp "$HERE/autodiff.rs" "$tests/common/autodiff.rs"
  rm -rf "$tests/cubecl" "$tests/cubecl.rs"
  # `Dispatch::default_quant_scheme` is Dispatch's own; backend.rs has the generic one.
  grep -rl 'TestBackend::default_quant_scheme' "$tests" |
    xargs sed -i 's/TestBackend::default_quant_scheme(&device)/crate::default_quant_scheme(\&device)/g'
  # Burn's f16 suites, copied for bf16 (the dtype Hypatia's users train in), CUDA only.
  for suite in tensor autodiff; do
    sed -e 's/burn_tensor::f16/burn_tensor::bf16/' \
      -e '/feature = "\(vulkan\|rocm\|metal\|flex\)"/d' \
      "$tests/${suite}_f16.rs" >"$tests/${suite}_bf16.rs"
  done
  sed "s|@HYPATIA@|$ROOT|" "$HERE/Cargo.toml.in" >"$HARNESS/crate/Cargo.toml"
  echo 'pub use burn_tensor_testgen::might_panic;' >"$HARNESS/crate/src/lib.rs"
  echo "harness at $HARNESS/crate (Burn's tests from $src)"
}

# Builds one backend's binaries into $HARNESS/bin/BACKEND.
build_one() {
  local backend=$1 cuda=$2 features
  features="std,quantization,cube,fusion"
  [ "$backend" = hypatia ] && features="$features,hypatia"
  [ -n "$cuda" ] && features="$features,cuda"
  mkdir -p "$HARNESS/bin/$backend"
  (cd "$HARNESS/crate" && cargo test --release --no-default-features --features "$features" \
    --tests --no-run --message-format=json-render-diagnostics) |
    python3 "$ROOT/tools/test_binaries.py" "$HARNESS/bin/$backend"
}

build() {
  local cuda=${1:-}
  [ -d "$HARNESS/crate" ] || setup
  if [ -n "$cuda" ]; then
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hypatia-cuda}
  else
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hypatia-target}
  fi
  rm -rf "$HARNESS/bin"
  build_one hypatia "$cuda"
  build_one burn "$cuda"
  [ -z "$cuda" ] || pack
  ls "$HARNESS"/bin/*
}

# One pack a backend (the device tool carries 64 MiB a call): .device/burn_tests-BACKEND.tgz.
pack() {
  mkdir -p "$ROOT/.device"
  for backend in hypatia burn; do
    strip "$HARNESS/bin/$backend"/* 2>/dev/null || true
    # xz: gzip's packs are too large to carry (each binary holds CubeCL and Burn's kernels).
    XZ_OPT="-9" tar cJf "$ROOT/.device/burn_tests-$backend.tgz" -C "$HARNESS" "bin/$backend" &
  done
  wait
  ls -la "$ROOT"/.device/burn_tests-*.tgz
}

# One binary on one backend: its log, its table row and its failed tests' names under $LOGS.
run_one() {
  local suite=$1 backend=$2 start=$SECONDS res
  shift 2
  local log="$LOGS/$suite-$backend.log"
  # Mesa's shader cache off: with it, the backend run second reuses the first one's lavapipe
  # compiles and looks several times faster. Every run compiles all it runs.
  (cd "$BINS" && MESA_SHADER_CACHE_DISABLE=true \
    timeout "${TIMEOUT:-1800}" "./$backend/$suite" --test-threads="${TEST_THREADS:-2}" "$@") \
    >"$log" 2>&1 || true
  res=$(grep -E '^test result' "$log" | tail -1) || true
  if [ -z "$res" ]; then
    echo "| $suite | $backend | did not finish | | | $((SECONDS - start)) |"
  else
    echo "$res" | sed -E "s/.* ([0-9]+) passed; ([0-9]+) failed; ([0-9]+) ignored.*/| $suite | $backend | \1 | \2 | \3 | $((SECONDS - start)) |/"
  fi >"$LOGS/$suite-$backend.row"
  grep -E '^test .* \.\.\. FAILED$' "$log" | sed 's/^test //; s/ \.\.\. FAILED$//' | sort \
    >"$LOGS/$suite-$backend.failed" || true
}

# The table of a logs folder (rows of one or several runs), and the tests that fail on one
# backend only.
report() {
  local logs=$1 suite
  printf '| suite | backend | passed | failed | ignored | s |\n|---|---|---|---|---|---|\n'
  for suite in $SUITES; do cat "$logs/$suite"-{hypatia,burn}.row 2>/dev/null || true; done
  for suite in $SUITES; do
    [ -f "$logs/$suite-hypatia.failed" ] && [ -f "$logs/$suite-burn.failed" ] || continue
    comm -23 "$logs/$suite-hypatia.failed" "$logs/$suite-burn.failed" | sed "s/^/hypatia only: $suite: /"
    comm -13 "$logs/$suite-hypatia.failed" "$logs/$suite-burn.failed" | sed "s/^/burn only: $suite: /"
  done
}

run() {
  local on_device="" suite backend pack
  BINS="$HARNESS/bin"
  if ls "$ROOT"/.device/burn_tests-*.tgz >/dev/null 2>&1 && command -v nvidia-smi >/dev/null; then
    on_device=1
    BINS="$ROOT/.device/burn_tests/bin"
    mkdir -p "$ROOT/.device/burn_tests"
    rm -rf "$BINS"
    for backend in ${BACKENDS:-hypatia burn}; do
      pack="$ROOT/.device/burn_tests-$backend.tgz"
      [ ! -f "$pack" ] || tar xJf "$pack" -C "$ROOT/.device/burn_tests"
    done
    mkdir -p "$BINS"
    cp "$ROOT/tools/device/cubecl.toml" "$BINS/"
    bash "$ROOT/tools/device/lib/cache.sh" restore
    eval "$(bash "$ROOT/tools/device/lib/cache.sh" env)"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  fi
  LOGS=$HARNESS/logs
  [ -z "${OUT:-}" ] || LOGS=$(mktemp -d)
  mkdir -p "$LOGS"
  # JOBS binaries at once (default 1), each on TEST_THREADS threads.
  for suite in $SUITES; do
    for backend in ${BACKENDS:-hypatia burn}; do
      [ -x "$BINS/$backend/$suite" ] || continue
      while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-1}" ]; do wait -n || true; done
      run_one "$suite" "$backend" "$@" &
    done
  done
  wait
  if [ -n "${OUT:-}" ]; then
    # The device tool brings back a few files: the logs go as one archive.
    tar cJf "$OUT/burn_tests-logs.tar.xz" -C "$LOGS" .
    report "$LOGS" >"$OUT/burn_tests.md"
  fi
  [ -z "$on_device" ] || bash "$ROOT/tools/device/lib/cache.sh" save >/dev/null
  report "$LOGS"
}

case "${1:-}" in
  setup) shift; setup "$@" ;;
  build) shift; build "$@" ;;
  run) shift; run "$@" ;;
  pack) pack ;;
  report) shift; report "${1:-$HARNESS/logs}" ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
esac
