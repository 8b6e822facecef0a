#!/bin/bash
# The benchmarks on the device machine, PyTorch beside them in the same call. Run from the repo
# root there, with .device/bins.tgz (tools/device/run.sh pack, here) and, if carried,
# .device/cache.tar.xz (tools/device/lib/cache.sh). STEPS, in order (default `linear-f32`):
#
#   linear-DTYPE   bench_linear (SHAPES) and torch_ref.py linear (f32 with --tf32, as Burn's
#                  f32 matmul runs)
#   train-DTYPE    bench_train (MLPS) and torch_ref.py train (f32 with --tf32)
#   ffn-DTYPE      bench_train --model ffn-gelu (FFNS, tokens:d_model:d_ff; BERT-base's) and
#                  torch_ffn.py (eager and torch.compile; f32 with --tf32)
#   swiglu-DTYPE   the same for --model swiglu (Llama-7B's), and torch_ffn.py's SwiGLU forward
#   cold-DTYPE     time to the first training step (bench_train --cold, MLPS' first, default the
#                  large MLP): Hypatia, then Burn, each in a fresh process from empty CubeCL and
#                  driver caches of its own, then in a second process with them warm
#   infer-DTYPE    bench_infer (Hypatia, Burn, CubeBackend) and torch_infer.py (PyTorch eager)
#   gelu-DTYPE     bench_linear with the GELU epilogues (erf, tanh) and ReLU (SHAPES, default
#                  2048³ and 8192×4096×4096), and torch_epilogues.py (cuBLASLt's GELU_BIAS)
#   precision      f32_precision: what Burn's f32 matmul and Hypatia's default compute against
#                  float64, per shape and layout (races off, so Hypatia's own kernel runs)
#
# STEP@VAR=VALUE runs a step with one more variable (`linear-f32@HYPATIA_WGMMA=off`: what a GPU
# without wgmma gets); PyTorch runs once per benchmark and dtype. NO_TORCH=1 skips it,
# STEP_TIMEOUT bounds each Hypatia step (300 s). Each step's output goes to $OUT/STEP.txt (and
# .json, .err); its table is printed last. NO_SETUP=1 skips unpacking and the cache restore,
# NO_SAVE=1 the cache save: for several of these side by side on other GPUs of one machine
# (CUDA_VISIBLE_DEVICES, NO_TORCH=1 on all but one per step) after one setup, as in lib/learner.sh.
set -u
ROOT=$(pwd)
if [ -z "${NO_SETUP:-}" ]; then
  tar xzf .device/bins.tgz -C .device
  bash tools/device/lib/cache.sh restore
fi
eval "$(bash tools/device/lib/cache.sh env)"
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
      bench=(./bench_linear --dtypes "$dtype" ${SHAPES:+--shapes "$SHAPES"} --json "$OUT/$tag.json")
      torch=(python3 torch_ref.py linear --dtypes "$dtype" $tf32 ${SHAPES:+--shapes "$SHAPES"}) ;;
    train)
      bench=(./bench_train --dtypes "$dtype" ${MLPS:+--mlps "$MLPS"} --json "$OUT/$tag.json")
      torch=(python3 torch_ref.py train --dtypes "$dtype" $tf32 ${MLPS:+--mlps "$MLPS"}) ;;
    ffn | swiglu)
      model=$([ "$kind" = ffn ] && echo ffn-gelu || echo swiglu)
      bench=(./bench_train --model "$model" --dtypes "$dtype" ${FFNS:+--mlps "$FFNS"} --json "$OUT/$tag.json")
      torch=(python3 torch_ffn.py --model "$model" --dtypes "$dtype" $tf32 ${FFNS:+--shapes "$FFNS"}) ;;
    cold)
      # A folder of its own with a Cargo.toml: CubeCL's `target` caches go under it. CubeCL
      # logs each NVRTC compilation and each autotune key decided to stderr, which
      # py/cold_log.py stamps with the time and sums up under the process's line.
      cold=$(mktemp -d) && touch "$cold/Cargo.toml" && cp cubecl.toml "$cold/"
      printf '\n[compilation.logger]\nlevel = "basic"\nstderr = true\n\n[autotune.logger]\nlevel = "minimal"\nstderr = true\n' \
        >>"$cold/cubecl.toml"
      for side in hypatia burn; do
        rm -rf "$cold/target"
        for round in cold warm; do
          echo "-- $side, $round caches" >>"$OUT/$tag.txt"
          log="$OUT/$tag-$side-$round.log"
          # shellcheck disable=SC2086
          (cd "$cold" && env CUDA_CACHE_PATH="$cold/target/nv" $extra timeout "${STEP_TIMEOUT:-300}" \
            "$ROOT/.device/bench_train" --cold $side --dtypes "$dtype" --mlps "${MLPS:-8192:1024:4096:1024}" \
            2>&1 >>"$OUT/$tag.txt") | python3 "$ROOT/tools/device/py/cold_log.py" stamp >"$log"
          rc=${PIPESTATUS[0]}
          [ "$rc" -eq 0 ] || echo "$step $side $round: stopped (rc $rc)" >>"$OUT/$tag.txt"
          python3 "$ROOT/tools/device/py/cold_log.py" summary "$log" >>"$OUT/$tag.txt"
        done
      done ;;
    infer)
      bench=(./bench_infer --dtypes "$dtype" --json "$OUT/$tag.json")
      torch=(python3 torch_infer.py --dtypes "$dtype") ;;
    gelu)
      gelu_shapes=${SHAPES:-2048x2048x2048,8192x4096x4096}
      for act in gelu gelu-tanh relu; do
        # shellcheck disable=SC2086
        env $extra timeout "${STEP_TIMEOUT:-300}" ./bench_linear --dtypes "$dtype" --shapes "$gelu_shapes" \
          --activation $act --json "$OUT/$tag-$act.json" >>"$OUT/$tag.txt" 2>>"$OUT/$tag.err"
      done
      torch=(python3 torch_epilogues.py --dtypes "$dtype" --shapes "$gelu_shapes") ;;
    precision)
      bench=(env HYPATIA_RACE=never ./f32_precision ${SHAPES:+--shapes "$SHAPES"}) ;;
    *) echo "unknown step $step"; continue ;;
  esac
  # shellcheck disable=SC2086 # the extra variable is one word or none
  [ ${#bench[@]} -eq 0 ] || env $extra timeout "${STEP_TIMEOUT:-300}" "${bench[@]}" \
    >"$OUT/$tag.txt" 2>"$OUT/$tag.err" || echo "$step: stopped (rc $?), see $tag.err"
  # PyTorch once per benchmark and dtype: a variable of Hypatia's does not change it.
  if [ ${#torch[@]} -gt 0 ] && [ -z "${NO_TORCH:-}" ] && [[ " ${torch_done:-} " != *" $base "* ]]; then
    torch_done="${torch_done:-} $base"
    "${torch[@]}" >"$OUT/torch-$base.txt" 2>&1
    echo "== $base: PyTorch" && grep -v "^json" "$OUT/torch-$base.txt" | sed -E 's/ \(([0-9]+) TF\/s\)/(\1)/g'
  fi
  echo "== $step" && cat "$OUT/$tag.txt"
done
[ -n "${NO_SAVE:-}" ] || (cd "$ROOT" && bash tools/device/lib/cache.sh save >/dev/null)
