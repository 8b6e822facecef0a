#!/usr/bin/env bash
# The whole test suite built with `--features cuda`, run on a GPU machine in chunks that each
# end inside the device tool's 10-minute limit (book: Troubleshooting, "Running the tests on
# CUDA").
#
#   tools/cuda_suite.sh build            here: build every test binary, pack .device/suite.tgz
#   tools/cuda_suite.sh list             the chunks, in order
#   tools/cuda_suite.sh run [CHUNK ...]  on the GPU machine, from the repo root: the chunks
#                                        named (all, in order, if none); one line per chunk
#
# `run` unpacks .device/suite.tgz, restores CubeCL's autotune/PTX caches from
# .device/cache.tar.xz (tools/device_cache.sh), runs each chunk with `--test-threads=1
# --nocapture` (a chunk stopped by its limit shows how far it got) under
# `timeout $CHUNK_TIMEOUT` (default 540 s), appends its output to $OUT/suite.log (or
# .device/suite.log) and saves the caches to $OUT/cache.tar.xz: copy that to .device/ here
# for the next call. PROPTEST_CASES sets the property tests' case count (default: each test's);
# JOBS=N runs N chunks at once (default 1, in order).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

# name|binary|libtest arguments, the slowest first (with JOBS > 1 they start first).
# `lib-rest` skips what the other lib chunks run, so a new suite module runs there without
# being listed.
LIB_CHUNKS="suite::train suite::mlp suite::sync suite::race suite::replay suite::activations
suite::kernel suite::long_run suite::property_tests"
chunks() {
  local skips=""
  for m in $LIB_CHUNKS; do skips="$skips --skip $m"; done
  cat <<EOF
hopper-bf16|hopper|wgmma_linear_matches_f64_reference_bf16
hopper-f16|hopper|wgmma_linear_matches_f64_reference_f16
hopper|hopper|--skip wgmma_linear_matches_f64_reference
half_f16|half_f16|
half_bf16|half_bf16|
lib-train|lib|suite::train
lib-long-run|lib|suite::long_run
lib-prop-forward|lib|suite::property_tests::forward
lib-prop-backward|lib|suite::property_tests::backward
lib-rest|lib|$skips
lib-mlp|lib|suite::mlp suite::sync suite::race suite::replay
lib-kernels|lib|suite::activations suite::kernel
lib-prop-chains|lib|suite::property_tests::mlp_chains
startup|startup|
unit|hypatia|
EOF
}

build() {
  set -e
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hypatia-cuda}
  mkdir -p .device/suite
  cargo test --release --features cuda --lib --tests --no-run --message-format=json 2>/dev/null | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        shutil.copy(m["executable"], ".device/suite/" + m["target"]["name"])
'
  cp tools/cubecl.toml .device/suite/
  strip .device/suite/* 2>/dev/null || true
  tar czf .device/suite.tgz -C .device suite && rm -rf .device/suite
  ls -la .device/suite.tgz
}

# One chunk: its libtest run under `timeout`, its output to $LOGS/NAME.log, one line to stdout.
run_chunk() {
  local name=$1 bin=$2 args=$3 start=$SECONDS
  # shellcheck disable=SC2086 # the filters are separate arguments
  (cd .device/suite && timeout "$LIMIT" "./$bin" --test-threads=1 --nocapture $args) >"$LOGS/$name.log" 2>&1
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
  LIMIT=${CHUNK_TIMEOUT:-540}
  LOGS=$(mktemp -d)
  local log=${OUT:-$ROOT/.device}/suite.log jobs=${JOBS:-1} wanted=" $* " names=() failed=0
  tar xzf .device/suite.tgz -C .device
  bash tools/device_cache.sh restore
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  while IFS='|' read -r name bin args; do
    [ "$#" -eq 0 ] || [[ "$wanted" == *" $name "* ]] || continue
    names+=("$name")
    # JOBS > 1 runs that many chunks at once (separate processes on one GPU; CubeCL's cache
    # files are safe across processes): for correctness runs, never for timings.
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || failed=1; done
    run_chunk "$name" "$bin" "$args" &
  done < <(chunks)
  while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || failed=1; done
  for name in "${names[@]}"; do
    echo "=== $name" && cat "$LOGS/$name.log"
  done >>"$log"
  rm -rf "$LOGS"
  [ -z "${OUT:-}" ] || bash tools/device_cache.sh save >/dev/null
  return $failed
}

case "${1:-}" in
  build) build ;;
  list) chunks | cut -d'|' -f1,2,3 | tr '|' '\t' ;;
  run) shift; run "$@" ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
