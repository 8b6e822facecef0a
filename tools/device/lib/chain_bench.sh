#!/bin/bash
# The grid chain kernel alone (tools/device/cuda/chain_bench.cu): GPU µs per launch of 784→512→512→10
# bf16 at batch 1, 8 and 32, for each kernel in KERNELS and rows per work item in ROWS_LIST,
# built with nvcc from the source the crate compiles (`cuda_source`, packed in .device/bins.tgz
# by tools/device/run.sh pack). Run from the repo root on the device machine.
# KERNELS: `-` (the crate's grid_chain.cu) and/or files in EXTRA_KERNELS (another version, to
# compare). MMA_LIST: 0 (FMA items) and/or 1 (tensor-core items; their ROWS_LIST entries should
# be 16 or 32). Prints one line per (kernel, mma, rows, m).
set -u
[ -x .device/cuda_source ] || tar xzf .device/bins.tgz -C .device cuda_source
GEN=$(pwd)/.device/cuda_source
cp tools/device/cuda/chain_bench.cu tools/device/cuda/bench_timing.cuh ${EXTRA_KERNELS:-} /tmp/
cd /tmp
name() { [ "$1" = - ] && echo grid_chain || basename "${1%.cu}"; }
for K in ${KERNELS:--}; do
  kernel=$([ "$K" = - ] || echo "--kernel-file $K")
  for X in ${MMA_LIST:-0}; do
    for R in ${ROWS_LIST:-1 2 4 8 16}; do
      [ $X = 1 ] && [ $R -lt 16 ] && continue
      B=cb_$(name $K)_${X}_$R
      mma=$([ $X = 1 ] && echo --mma)
      # shellcheck disable=SC2086 # flags are words
      "$GEN" chain --rows $R $mma $kernel > $B.cu || { echo "$B: no source"; continue; }
      nvcc -O3 -std=c++17 -arch=sm_90a -DKERNEL="\"$B.cu\"" chain_bench.cu -o $B 2> $B.log &
    done
  done
done
wait
for m in ${BATCHES:-1 8 32}; do
  for K in ${KERNELS:--}; do
    for X in ${MMA_LIST:-0}; do
      for R in ${ROWS_LIST:-1 2 4 8 16}; do
        B=cb_$(name $K)_${X}_$R
        [ $X = 0 ] && [ $R -gt $m ] && [ $R -ne 1 ] && continue
        [ $X = 1 ] && [ $R -lt 16 ] && continue
        [ -x $B ] || { echo "$B: build failed"; head -20 $B.log; continue; }
        timeout 30 ./$B $m ${LAUNCHES:-2000}
      done
    done
  done
done
