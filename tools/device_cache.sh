#!/bin/bash
# Carries CubeCL's autotune results and compiled PTX between device calls (each fresh machine
# starts bare), so only the first call pays for tuning and NVRTC. Run on the device machine from
# anywhere under the repo, with tools/cubecl.toml beside the binaries.
# `restore` (before a run): .device/cache.tar.xz -> target/.
# `save` (after): target/{autotune,cuda} -> $OUT/cache.tar.xz; copy that into .device/ here.
set -u
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null || (cd "$(dirname "$0")/.." && pwd))
case "$1" in
  restore) mkdir -p "$ROOT/target" && [ -f "$ROOT/.device/cache.tar.xz" ] && tar xJf "$ROOT/.device/cache.tar.xz" -C "$ROOT/target" ;;
  save) [ -d "$ROOT/target" ] && (cd "$ROOT/target" && ls && tar cJf "$OUT/cache.tar.xz" --exclude='release' --exclude='debug' . && ls -la "$OUT/cache.tar.xz") ;;
esac
true
