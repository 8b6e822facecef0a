#!/bin/bash
# Hypatia's Hopper kernel alone (tools/device/cuda/wgmma_bench.cu) beside cuBLASLt, per training-step
# shape, built with nvcc from the source the crate compiles (`cuda_source`, packed in
# .device/bins.tgz by tools/device/run.sh pack). No Burn or CubeCL on the device: ~1 minute
# for all builds. Run from the repo root on the device machine.
#   VARIANTS: "name:kernel_file:cuda_source flags, comma-separated" ... (kernel_file `-` for
#             the crate's wgmma_linear.cu, else a file in EXTRA_KERNELS, e.g. an edited copy)
#   CASES:    "M:K:N:MODE:ACT:A_M_MAJOR:B_K_MAJOR" ... (ACT 0: none, 1: relu, 2: relu's
#             backward, for MODE gated; default: the 8
#             matmuls of a bf16 8192:1024:4096:1024 training step, then 2048³ and
#             8192×4096×4096 with bias+relu)
# Prints one line per (case, variant).
set -u
DEFAULT_CASES="8192:1024:4096:pre:1:0:0 8192:4096:4096:pre:1:0:0 8192:4096:1024:bias:0:0:0
8192:1024:4096:gated:2:0:1 4096:8192:1024:none:0:1:0 8192:4096:4096:gated:2:0:1
4096:8192:4096:none:0:1:0 1024:8192:4096:none:0:1:0 2048:2048:2048:bias:1:0:0
8192:4096:4096:bias:1:0:0"
# The autotuned wide tiling, `wgmma 128x256 s4 g16 persistent tma-store/128` (names have spaces,
# which VARIANTS cannot carry: its flags, as `cuda_source tilings` lists the engine's).
VARIANTS=${VARIANTS:-"base:-:--bn,256,--stages,4,--store-cols,128,--tma-store"}
CASES=${CASES:-$DEFAULT_CASES}
[ -x .device/cuda_source ] || tar xzf .device/bins.tgz -C .device cuda_source
GEN=$(pwd)/.device/cuda_source
W=/tmp/wgmma_bench
mkdir -p $W
cp tools/device/cuda/wgmma_bench.cu tools/device/cuda/bench_timing.cuh ${EXTRA_KERNELS:-} $W/
cd $W
combos=$(for c in $CASES; do IFS=: read -r M K N MODE ACT A B <<<"$c"; echo "$ACT:$A:$B"; done | sort -u)
for v in $VARIANTS; do
  IFS=: read -r NAME FILE FLAGS <<<"$v"
  for combo in $combos; do
    IFS=: read -r ACT A B <<<"$combo"
    act=$(case $ACT in 1) echo relu ;; 2) echo relu-grad ;; *) echo none ;; esac)
    layout=$([ "$A" = 1 ] && echo --a-m-major)" "$([ "$B" = 1 ] && echo --b-k-major)
    kernel=$([ "$FILE" = - ] || echo "--kernel-file $FILE")
    src=k_${NAME}_$ACT$A$B.cu
    # shellcheck disable=SC2086 # flags are words
    "$GEN" wgmma ${FLAGS//,/ } --act $act $layout $kernel > $src || { echo "$NAME: no source"; continue; }
    nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xptxas -v \
      -DKERNEL="\"$src\"" -DVARIANT="\"$NAME\"" wgmma_bench.cu -lcuda -lcublasLt \
      -o wb_${NAME}_$ACT$A$B > wb_${NAME}_$ACT$A$B.log 2>&1 &
  done
done
wait
for c in $CASES; do
  IFS=: read -r M K N MODE ACT A B <<<"$c"
  for v in $VARIANTS; do
    NAME=${v%%:*}
    b=wb_${NAME}_$ACT$A$B
    [ -x $b ] || { echo "$NAME: build failed"; head -5 $b.log; continue; }
    timeout 60 ./$b $M $K $N $MODE ${LAUNCHES:-20}
  done
done
