#!/bin/bash
# The benchmarks on the device machine, PyTorch beside them in the same call. Run from the repo
# root there, with .device/bins.tgz (tools/device/pack_device.sh, here) and, if carried,
# .device/cache.tar.xz (tools/device/device_cache.sh). STEPS, in order (default `linear-f32`):
#
#   linear-DTYPE   bench_linear (SHAPES) and torch_ref.py linear (f32 with --tf32, as Burn's
#                  f32 matmul runs)
#   train-DTYPE    bench_train (MLPS) and torch_ref.py train (f32 with --tf32)
#   infer-DTYPE    bench_infer (Hypatia, Burn, CubeBackend) and torch_infer.py (PyTorch eager)
#
# STEP@VAR=VALUE runs a step with one more variable (`linear-f32@HYPATIA_WGMMA=off`: what a GPU
# without wgmma gets); PyTorch runs once per benchmark and dtype. NO_TORCH=1 skips it,
# STEP_TIMEOUT bounds each Hypatia step (300 s). Each
# step's output goes to $OUT/STEP.txt (and .json, .err); its table is printed last. NO_SETUP=1
# skips unpacking and the cache restore, NO_SAVE=1 the cache save: for several of these side by
# side on other GPUs of one machine (CUDA_VISIBLE_DEVICES, NO_TORCH=1 on all but one per step)
# after one setup, as in device_learner.sh.
set -u
ROOT=$(pwd)
if [ -z "${NO_SETUP:-}" ]; then
  tar xzf .device/bins.tgz -C .device
  bash tools/device/device_cache.sh restore
fi
eval "$(bash tools/device/device_cache.sh env)"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
cd .device
for step in ${STEPS:-linear-f32}; do
  base=${step%%@*} extra=""
  [[ "$step" != *@* ]] || extra=${step#*@}
  kind=${base%%-*} dtype=${base#*-}
  tag=$(echo "$step" | tr '@=' '--')
  tf32=$([ "$dtype" = f32 ] && echo --tf32)
  bench=() torch=()
  case $kind in
    linear)
      bench=(./bench_linear --dtypes "$dtype" ${SHAPES:+--shapes "$SHAPES"})
      torch=(python3 torch_ref.py linear --dtypes "$dtype" $tf32 ${SHAPES:+--shapes "$SHAPES"}) ;;
    train)
      bench=(./bench_train --dtypes "$dtype" ${MLPS:+--mlps "$MLPS"})
      torch=(python3 torch_ref.py train --dtypes "$dtype" $tf32 ${MLPS:+--mlps "$MLPS"}) ;;
    infer)
      bench=(./bench_infer --dtypes "$dtype")
      torch=(python3 torch_infer.py --dtypes "$dtype") ;;
    *) echo "unknown step $step"; continue ;;
  esac
  # shellcheck disable=SC2086 # the extra variable is one word or none
  env $extra timeout "${STEP_TIMEOUT:-300}" "${bench[@]}" --json "$OUT/$tag.json" \
    >"$OUT/$tag.txt" 2>"$OUT/$tag.err" || echo "$step: stopped (rc $?), see $tag.err"
  # PyTorch once per benchmark and dtype: a variable of Hypatia's does not change it.
  if [ ${#torch[@]} -gt 0 ] && [ -z "${NO_TORCH:-}" ] && [[ " ${torch_done:-} " != *" $base "* ]]; then
    torch_done="${torch_done:-} $base"
    "${torch[@]}" >"$OUT/torch-$base.txt" 2>&1
    echo "== $base: PyTorch" && grep -v "^json" "$OUT/torch-$base.txt" | sed -E 's/ \(([0-9]+) TF\/s\)/(\1)/g'
  fi
  echo "== $step" && cat "$OUT/$tag.txt"
done
[ -n "${NO_SAVE:-}" ] || (cd "$ROOT" && bash tools/device/device_cache.sh save >/dev/null)
