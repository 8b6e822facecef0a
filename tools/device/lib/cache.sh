#!/bin/bash
# Carries CubeCL's autotune results and compiled PTX, and the driver's machine code compiled from
# that PTX (target/nv, where `env` points CUDA_CACHE_PATH), between device calls (each
# fresh machine starts bare), so only the first call pays for tuning, NVRTC and the driver's
# compile. Run on the device machine from anywhere under the repo, with tools/device/cubecl.toml
# beside the binaries.
# `restore` (before a run): .device/cache.tar.xz and .device/nv-cache.tar.xz -> target/.
# `env`: the exports that point the driver's cache at target/nv; a script runs
# `eval "$(bash tools/device/lib/cache.sh env)"` before its first CUDA process.
# `save` (after): target/{autotune,cuda} -> $OUT/cache.tar.xz, target/nv -> $OUT/nv-cache.tar.xz
# (xz on every core: it runs in a call's last seconds); copy them into .device/ here and carry
# both.
#
# CubeCL keys compiled PTX by kernel name and compile-time settings, not by source: PTX saved
# by another build would run that build's kernels. So the cache holds the id of the binaries
# (.device/*.tgz) that made it, and `restore` keeps the PTX only for the same binaries; the
# autotune results (which candidate is fastest) are kept either way. A pack's id is that of the
# kernels' source (`id`, written beside it as NAME.id): every kernel, Hypatia's and Burn's, comes
# from src/ and the locked dependencies, none from tests/ or examples/, so binaries rebuilt for a
# change of tests alone keep the PTX. A pack without an id file is identified by its bytes.
# `id` (here): the id of the kernels' source in this working tree.
set -u
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null || (cd "$(dirname "$0")/../../.." && pwd))
build_id() {
  for pack in "$ROOT"/.device/*.tgz; do
    [ -f "$pack" ] || continue
    if [ -f "${pack%.tgz}.id" ]; then cat "${pack%.tgz}.id"; else md5sum <"$pack" | cut -d' ' -f1; fi
  done | sort -u | md5sum | cut -d' ' -f1
}
case "$1" in
  id)
    cd "$ROOT" && git ls-files -z -- src Cargo.lock | xargs -0 md5sum | md5sum | cut -d' ' -f1 ;;
  env)
    # Without its cache a fresh machine's driver compiles each kernel's PTX again before the
    # kernel's first launch: 2.6 s of a one-epoch Learner run at hidden 8192 (benches/results/
    # nvidia-h200.md, "burn-train's Learner"), more where a call runs many shapes. It
    # holds 256 MiB by default, and held 249 MiB after a few runs of one call: past its limit it
    # drops entries and compiles them again.
    echo "export CUDA_CACHE_PATH=${CUDA_CACHE_PATH:-$ROOT/target/nv} CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}" ;;
  restore)
    mkdir -p "$ROOT/target" && [ -f "$ROOT/.device/cache.tar.xz" ] || exit 0
    tar xJf "$ROOT/.device/cache.tar.xz" -C "$ROOT/target"
    [ -f "$ROOT/.device/nv-cache.tar.xz" ] && tar xJf "$ROOT/.device/nv-cache.tar.xz" -C "$ROOT/target"
    if [ "$(cat "$ROOT/target/build-id" 2>/dev/null)" != "$(build_id)" ]; then
      # The driver's code goes too: after a rebuild its cache grew from 8.3 to 14.3 MB packed
      # (much of the new PTX differed), near the size the device tool returns.
      echo "device_cache: other binaries made this cache; its autotune results kept, its PTX and machine code dropped"
      rm -rf "$ROOT/target/cuda" "$ROOT/target/nv"
    fi
    # CubeCL keeps autotune results per device index. On a machine of identical GPUs, device 0's
    # results serve the others: without them each further GPU tunes every shape in its first
    # step, and under DDP the other GPUs wait for it in the first all-reduce.
    names=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)
    if [ -n "$names" ] && [ "$(sort -u <<<"$names" | wc -l)" = 1 ]; then
      for dir in "$ROOT"/target/autotune/*/device-0-0-cuda "$ROOT"/target/tune/*/autotune/*/device-0-0-cuda; do
        [ -d "$dir" ] || continue
        for i in $(seq 1 $(($(wc -l <<<"$names") - 1))); do
          mkdir -p "${dir%0-cuda}$i-cuda" && cp "$dir"/* "${dir%0-cuda}$i-cuda/"
        done
      done
    fi ;;
  save)
    # The device tool returns files of up to 16 MiB each: the driver's code goes in a file of
    # its own, and whatever would pass 15 MiB is left out (the PTX before the autotune results).
    [ -d "$ROOT/target" ] && build_id >"$ROOT/target/build-id" && cd "$ROOT/target" || exit 0
    pack() { # FILE, then tar's arguments
      local file=$1; shift
      XZ_OPT="-T0" tar cJf "$OUT/$file" "$@" && [ "$(stat -c %s "$OUT/$file")" -le $((15 * 1024 * 1024)) ]
    }
    skip=(--exclude=./release --exclude=./debug --exclude=./nv)
    pack cache.tar.xz "${skip[@]}" . ||
      { echo "device_cache: PTX left out (past 15 MiB)"; pack cache.tar.xz "${skip[@]}" --exclude=./cuda .; }
    if [ -d nv ] && ! pack nv-cache.tar.xz nv; then
      echo "device_cache: the driver's code left out (past 15 MiB)"
      rm -f "$OUT/nv-cache.tar.xz"
    fi
    ls -la "$OUT"/*cache.tar.xz ;;
esac
true
