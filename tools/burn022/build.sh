#!/usr/bin/env bash
# Builds a burn-cuda program of Burn's 0.22 line (tools/burn022/probe) on a machine that reaches
# only the package registries: crates.io, PyPI and Debian's. Burn 0.22's CUDA backend links
# LLVM 23 through `tracel-llvm-bundler`, whose build script downloads a prebuilt LLVM from
# GitHub unless its install directory already holds the marker `.tracel-llvm-installed`. This
# script installs LLVM 23.1 from PyPI's static wheels instead (`mlc-llvm-static` and, for the
# NVPTX target, `mlc-llvm-static-extra-targets`: headers, static libraries and a
# self-contained `llvm-config`) into that directory, writes the marker, then builds.
#
#   tools/burn022/build.sh                      Burn 0.22.1, release build, then `probe --dry`
#   BURN=0.23.0-pre.1 tools/burn022/build.sh    another version (a copy of the probe)
#   PROFILE=dev tools/burn022/build.sh          a debug build (faster here, 890 MB binary)
#
# The stripped binary goes to .device/burn022/burn-VERSION (`BINS`), for the device calls
# (tools/device/run.sh burn022).
#
# Each step prints its seconds. The target dir is outside the clone (~/.cache/hypatia-burn022).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BURN=${BURN:-0.22.1}
PROFILE=${PROFILE:-release}
LLVM_WHEEL=23.1.1.post0 # LLVM 23.1.1; llvm-sys 231 and the bundler's 23.1.0-4 take any 23.1
BUNDLE=tracel-llvm-23.1.0-4 # tracel-llvm-bundler 23.1.0-4's directory name
DATA=${XDG_DATA_HOME:-$HOME/.local/share} # `dirs::data_local_dir()` on Linux
PREFIX=$DATA/tracel/$BUNDLE
WHEELS=${WHEELS:-$HOME/.cache/hypatia-burn022/wheels}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hypatia-burn022/target}
BINS=${BINS:-$(cd "$HERE/../.." && pwd)/.device/burn022} # git-ignored

step() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "== step $name: $((SECONDS - start)) s"
}

system_libs() {
  # llvm-config --system-libs: -lrt -ldl -lpthread -lm -lz -lzstd; the linker wants the
  # unversioned .so of zlib and zstd, which only their -dev packages install.
  local missing=()
  for lib in z zstd; do
    ls /usr/lib/*/lib$lib.so >/dev/null 2>&1 || missing+=("$([ $lib = z ] && echo zlib1g-dev || echo libzstd-dev)")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update && $SUDO apt-get install -y "${missing[@]}"
  fi
}

llvm() {
  if [ -f "$PREFIX/.tracel-llvm-installed" ]; then
    echo "LLVM already at $PREFIX"
    return
  fi
  mkdir -p "$WHEELS"
  python3 -m pip download --no-deps -d "$WHEELS" \
    "mlc-llvm-static==$LLVM_WHEEL" "mlc-llvm-static-extra-targets==$LLVM_WHEEL"
  local tmp
  tmp=$(mktemp -d)
  for wheel in "$WHEELS"/mlc_llvm_static-"$LLVM_WHEEL"-*.whl \
    "$WHEELS"/mlc_llvm_static_extra_targets-"$LLVM_WHEEL"-*.whl; do
    python3 -m zipfile -e "$wheel" "$tmp"
  done
  mkdir -p "$PREFIX"
  cp -r "$tmp/mlc_llvm_static/static/." "$PREFIX/"
  rm -rf "$tmp"
  chmod +x "$PREFIX/bin/llvm-config"
  "$PREFIX/bin/llvm-config" --targets-built | grep -qw NVPTX
  touch "$PREFIX/.tracel-llvm-installed"
  echo "LLVM $("$PREFIX/bin/llvm-config" --version) at $PREFIX"
}

build() {
  local dir=$HERE/probe
  if [ "$BURN" != 0.22.1 ]; then
    dir=$(mktemp -d)
    cp -r "$HERE/probe/." "$dir/"
    sed -i "s/\"=0.22.1\"/\"=$BURN\"/" "$dir/Cargo.toml"
    rm -f "$dir/Cargo.lock"
  fi
  local flags=()
  [ "$PROFILE" = release ] && flags=(--release)
  (cd "$dir" && cargo build "${flags[@]}")
  local bin=$CARGO_TARGET_DIR/$([ "$PROFILE" = release ] && echo release || echo debug)/burn022-probe
  "$bin" --dry && echo "burn $BURN"
  ls -la "$bin"
  # For the device (tools/device/run.sh burn022): stripped, one binary a version.
  mkdir -p "$BINS"
  strip -o "$BINS/burn-$BURN" "$bin"
  ls -la "$BINS/burn-$BURN"
}

step system-libs system_libs
step llvm llvm
step build build
