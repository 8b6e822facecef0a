#!/bin/bash
# The grid chain kernel alone (tools/chain_bench.cu): GPU µs per launch of 784→512→512→10 bf16
# at batch 1, 8 and 32, for each kernel source in KERNELS and rows per work item in ROWS_LIST.
# Needs only nvcc on the device (no Rust binaries). EXTRA_KERNELS: more kernel sources to copy
# beside it (another version, to compare). MMA_LIST: 0 (FMA items) and/or 1 (tensor-core
# items; their ROWS_LIST entries should be 16 or 32). Prints one line per (kernel, mma, rows, m).
set -u
cp src/kernel/chain/grid_chain.cu tools/chain_bench.cu tools/bench_timing.cuh ${EXTRA_KERNELS:-} /tmp/
cd /tmp
for K in ${KERNELS:-grid_chain.cu}; do
  for X in ${MMA_LIST:-0}; do
    for R in ${ROWS_LIST:-1 2 4 8 16}; do
      B=cb_${K%.cu}_${X}_$R
      [ $X = 1 ] && [ $R -lt 16 ] && continue
      nvcc -O3 -std=c++17 -arch=sm_90a -DROWS=$R -DMMA=$X -DMMA_TYPE=bf16 -DKERNEL="\"$K\"" chain_bench.cu -o $B 2> $B.log &
    done
  done
done
wait
for m in ${BATCHES:-1 8 32}; do
  for K in ${KERNELS:-grid_chain.cu}; do
    for X in ${MMA_LIST:-0}; do
      for R in ${ROWS_LIST:-1 2 4 8 16}; do
        B=cb_${K%.cu}_${X}_$R
        [ $X = 0 ] && [ $R -gt $m ] && [ $R -ne 1 ] && continue
        [ $X = 1 ] && [ $R -lt 16 ] && continue
        [ -x $B ] || { echo "$K mma=$X rows=$R: build failed"; head -20 $B.log; continue; }
        timeout 30 ./$B $m ${LAUNCHES:-2000}
      done
    done
  done
done
