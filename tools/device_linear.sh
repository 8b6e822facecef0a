#!/bin/bash
# Issue 3 (and 4) on the device, from a folder .device/lin carried with the binaries (bench_linear,
# hopper test binary, bench_train), cubecl.toml and torch_ref.py, this script copied in as run.sh.
# STEPS: ncu (GPU time of the wgmma kernel, NCU_SHAPES), kernel (hopper tests), bf16/f16/f32
# (bench_linear + torch_ref.py linear; SHAPES, CANDIDATES, NO_TORCH), train (bench_train; DTYPES, MLPS).
set -u
cd .device/lin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/device.txt
for step in ${STEPS:-ncu f16 f32}; do
  case $step in
    ncu)
      for s in ${NCU_SHAPES:-2048x2048x2048 8192x1024x4096}; do
        timeout ${NCU_TIMEOUT:-150} ncu --clock-control none --cache-control none --kernel-name regex:"wgmma" --launch-skip ${SKIP:-300} --launch-count 3 --section SpeedOfLight --section LaunchStats \
          ./bench_linear --dtypes bf16 --shapes $s --runs 3 --iters 10 > $OUT/ncu_$s.txt 2>&1
        echo "$s: $(grep -E 'Duration|Grid Size|Memory Throughput|Compute \(SM\)' $OUT/ncu_$s.txt | tr -s ' ' | tr '\n' ';' | cut -c1-600)"
      done ;;
    kernel)
      timeout ${KERNEL_TIMEOUT:-200} ./hopper --test-threads=1 ${KERNEL_TESTS:-wgmma} > $OUT/kernel.txt 2>&1
      echo "hopper ${KERNEL_TESTS:-wgmma}: $(grep -E '^test result' $OUT/kernel.txt)"
      grep -E -A20 "FAILED|panicked" $OUT/kernel.txt | head -40 ;;
    f16|f32|bf16)
      timeout ${BENCH_TIMEOUT:-300} ./bench_linear --dtypes $step ${SHAPES:+--shapes $SHAPES} ${CANDIDATES:+--candidates "$CANDIDATES"} --json $OUT/bench_$step.json > $OUT/bench_$step.txt 2> $OUT/bench_$step.err
      TF32=$([ "$step" = f32 ] && echo --tf32)
      [ -n "${NO_TORCH:-}" ] || python3 torch_ref.py linear --dtypes $step $TF32 ${SHAPES:+--shapes $SHAPES} > $OUT/torch_$step.txt 2>&1
      grep -v "^json" $OUT/torch_$step.txt | sed -E 's/ \(([0-9]+) TF\/s\)/(\1)/g'
      cat $OUT/bench_$step.txt ;;
    train)
      timeout ${TRAIN_TIMEOUT:-500} ./bench_train --dtypes ${DTYPES:-bf16} --mlps ${MLPS:-8192:1024:4096:1024} --runs ${RUNS:-5} --steps ${TSTEPS:-5} --json $OUT/train.json > $OUT/train.txt 2> $OUT/train.err
      [ -n "${NO_TORCH:-}" ] || python3 torch_ref.py train --dtypes ${DTYPES:-bf16} > $OUT/torch_train.txt 2>&1
      grep -v "^json" $OUT/torch_train.txt 2>/dev/null
      cat $OUT/train.txt; tail -3 $OUT/train.err ;;
  esac
done
