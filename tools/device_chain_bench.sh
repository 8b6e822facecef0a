#!/bin/bash
# The grid chain kernel alone (tools/chain_bench.cu): GPU µs per launch of 784→512→512→10 bf16
# at batch 1, 8 and 32, for each kernel source in KERNELS and rows per work item in ROWS_LIST.
# Needs only nvcc on the device (no Rust binaries). EXTRA_KERNELS: more kernel sources to copy
# beside it (another version, to compare). Prints one line per (kernel, rows, m).
set -u
cp src/kernel/chain/grid_chain.cu tools/chain_bench.cu tools/bench_timing.cuh ${EXTRA_KERNELS:-} /tmp/
cd /tmp
for K in ${KERNELS:-grid_chain.cu}; do
  for R in ${ROWS_LIST:-1 2 4 8 16}; do
    nvcc -O3 -std=c++17 -arch=sm_90a -DROWS=$R -DKERNEL="\"$K\"" chain_bench.cu -o cb_${K%.cu}_$R 2> cb_${K%.cu}_$R.log &
  done
done
wait
for m in ${BATCHES:-1 8 32}; do
  for K in ${KERNELS:-grid_chain.cu}; do
    for R in ${ROWS_LIST:-1 2 4 8 16}; do
      [ $R -gt $m ] && [ $R -ne 1 ] && continue
      [ -x cb_${K%.cu}_$R ] || { echo "$K rows=$R: build failed"; head -5 cb_${K%.cu}_$R.log; continue; }
      timeout 30 ./cb_${K%.cu}_$R $m ${LAUNCHES:-2000}
    done
  done
done
