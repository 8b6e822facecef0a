#!/bin/bash
# Carries CubeCL's autotune results and compiled PTX between device calls (each fresh machine
# starts bare), so only the first call pays for tuning and NVRTC. Run on the device machine from
# anywhere under the repo, with tools/device/cubecl.toml beside the binaries.
# `restore` (before a run): .device/cache.tar.xz -> target/.
# `save` (after): target/{autotune,cuda} -> $OUT/cache.tar.xz (xz on every core: it runs in a
# call's last seconds; the autotune results alone if PTX would make it too large to come back);
# copy that into .device/ here.
#
# CubeCL keys compiled PTX by kernel name and compile-time settings, not by source: PTX saved
# by another build would run that build's kernels. So the cache holds the id of the binaries
# (.device/*.tgz) that made it, and `restore` keeps the PTX only for the same binaries; the
# autotune results (which candidate is fastest) are kept either way.
set -u
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null || (cd "$(dirname "$0")/../.." && pwd))
build_id() { cat "$ROOT"/.device/*.tgz 2>/dev/null | md5sum | cut -d' ' -f1; }
case "$1" in
  restore)
    mkdir -p "$ROOT/target" && [ -f "$ROOT/.device/cache.tar.xz" ] || exit 0
    tar xJf "$ROOT/.device/cache.tar.xz" -C "$ROOT/target"
    if [ "$(cat "$ROOT/target/build-id" 2>/dev/null)" != "$(build_id)" ]; then
      echo "device_cache: other binaries made this cache; its autotune results kept, its PTX dropped"
      rm -rf "$ROOT/target/cuda"
    fi
    # CubeCL keeps autotune results per device index. On a machine of identical GPUs, device 0's
    # results serve the others: without them each further GPU tunes every shape in its first
    # step, and under DDP the other GPUs wait for it in the first all-reduce.
    names=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)
    if [ -n "$names" ] && [ "$(sort -u <<<"$names" | wc -l)" = 1 ]; then
      for dir in "$ROOT"/target/autotune/*/device-0-0-cuda; do
        for i in $(seq 1 $(($(wc -l <<<"$names") - 1))); do
          mkdir -p "${dir%0-cuda}$i-cuda" && cp "$dir"/* "${dir%0-cuda}$i-cuda/"
        done
      done
    fi ;;
  save)
    # The device tool returns files of up to 16 MiB: past that, the autotune results alone.
    [ -d "$ROOT/target" ] && build_id >"$ROOT/target/build-id" &&
      (cd "$ROOT/target" && XZ_OPT="-T0" tar cJf "$OUT/cache.tar.xz" --exclude='release' --exclude='debug' . &&
        if [ "$(stat -c %s "$OUT/cache.tar.xz")" -gt $((15 * 1024 * 1024)) ]; then
          echo "device_cache: PTX left out (the cache would pass 15 MiB)"
          XZ_OPT="-T0" tar cJf "$OUT/cache.tar.xz" --exclude='release' --exclude='debug' --exclude='./cuda' .
        fi && ls -la "$OUT/cache.tar.xz") ;;
esac
true
