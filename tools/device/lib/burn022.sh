#!/usr/bin/env bash
# Burn's newer line beside Hypatia on 0.21, in one device call (issue 70): the Burn 0.22/0.23
# programs of tools/burn022 (`relu(x · w + b)` at SHAPES and the MLP training step, Burn's own
# `Cuda` with its fusion and autotune), then bench_linear and bench_train (Hypatia, Burn 0.21)
# beside PyTorch (lib/bench.sh), for each of DTYPES; last, one table.
#
# Here: tools/burn022/build.sh (and BURN=0.23.0-pre.1 tools/burn022/build.sh), then
#   XZ_OPT="--lzma2=preset=9e,dict=1536MiB" tar cJf .device/burn022.tar.xz -C .device burn022
#       (xz with a dictionary wider than one binary: the two lines' binaries share LLVM and
#       pack together into 43 MB, where each alone takes 32; not a .tgz: the cache's build id
#       names the 0.21 binaries only)
#   tools/device/run.sh pack
# There: tools/device/run.sh burn022     (carry .device; SHAPES, MLP, DTYPES, STEP_TIMEOUT)
set -u
ROOT=$(pwd)
SHAPES=${SHAPES:-256x256x512,1024x784x2048,2048x2048x2048,8192x1024x4096,8192x4096x4096}
MLP=${MLP:-8192:1024:4096:1024}
DTYPES=${DTYPES:-bf16 f32}
OUT=${OUT:-$ROOT/.device/out}
mkdir -p "$OUT" /tmp/burn022
tar xJf .device/burn022.tar.xz -C /tmp
# Each Burn line runs in a folder of its own: its CubeCL keeps its caches apart from 0.21's.
for bin in /tmp/burn022/burn-*; do
  version=${bin##*/burn-}
  for dtype in $DTYPES; do
    start=$SECONDS
    (cd /tmp/burn022 && timeout "${STEP_TIMEOUT:-240}" "$bin" --dtype "$dtype" --shapes "$SHAPES" \
      --mlp "$MLP" --runs "${RUNS:-20}") >"$OUT/burn-$version-$dtype.txt" 2>"$OUT/burn-$version-$dtype.err" ||
      echo "burn $version $dtype: stopped (rc $?), see burn-$version-$dtype.err"
    echo "== burn $version $dtype ($((SECONDS - start)) s)" && cat "$OUT/burn-$version-$dtype.txt"
  done
done
steps=""
for dtype in $DTYPES; do steps="$steps linear-$dtype train-$dtype"; done
SHAPES=$SHAPES MLPS=$MLP STEPS=$steps bash tools/device/lib/bench.sh >"$OUT/bench.log" 2>&1
tail -40 "$OUT/bench.log"
python3 tools/device/py/burn022_table.py "$OUT"
