#!/bin/bash
# Hypatia's Hopper kernel alone (tools/wgmma_bench.cu) beside cuBLASLt, per training-step shape.
# Needs only nvcc and cuBLASLt on the device (no Rust binaries): ~1 minute for all builds.
#   VARIANTS: "name:kernel_file:BN:STAGES:TMA_STORE[:more -D flags, comma-separated]" ...
#             (kernel files beside src/kernel/hopper/wgmma_linear.cu or in EXTRA_KERNELS)
#   CASES:    "M:K:N:MODE:ACT:A_M_MAJOR:B_K_MAJOR" ... (default: the 8 matmuls of a bf16
#             8192:1024:4096:1024 training step, then 2048³ and 8192×4096×4096 with bias+relu)
# Prints one line per (case, variant).
set -u
DEFAULT_CASES="8192:1024:4096:pre:1:0:0 8192:4096:4096:pre:1:0:0 8192:4096:1024:bias:0:0:0
8192:1024:4096:gated:0:0:1 4096:8192:1024:none:0:1:0 8192:4096:4096:gated:0:0:1
4096:8192:4096:none:0:1:0 1024:8192:4096:none:0:1:0 2048:2048:2048:bias:1:0:0
8192:4096:4096:bias:1:0:0"
VARIANTS=${VARIANTS:-"base:wgmma_linear.cu:256:4:1:-DSUB=128"}  # the autotuned wide tiling
CASES=${CASES:-$DEFAULT_CASES}
W=/tmp/wgmma_bench
mkdir -p $W
cp src/kernel/hopper/wgmma_linear.cu tools/wgmma_bench.cu tools/bench_timing.cuh ${EXTRA_KERNELS:-} $W/
cd $W
# The inline-PTX wrapper src/kernel/hopper/mod.rs generates (wgmma_step), for one BN and layout.
gen_step() { # BN A_M_MAJOR B_K_MAJOR
  python3 - "$@" <<'PY'
import sys
bn, a, b = (int(v) for v in sys.argv[1:])
regs = bn // 2
outs = ", ".join(f"%{i}" for i in range(regs))
ops = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
print(f'__device__ __forceinline__ void wgmma_step(float (&d)[{regs}], u64 desc_a, u64 desc_b) {{\n'
      f'asm volatile("{{ .reg .pred p; setp.ne.b32 p, %{regs + 2}, 0; '
      f'wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.bf16.bf16 '
      f'{{{outs}}}, %{regs}, %{regs + 1}, p, 1, 1, {a}, {1 - b}; }}"\n'
      f': {ops}\n: "l"(desc_a), "l"(desc_b), "r"(1));\n}}')
PY
}
for v in $VARIANTS; do
  IFS=: read -r NAME FILE BN REST <<<"$v"
  for A in 0 1; do for B in 0 1; do
    d=inc_${BN}_${A}_${B}; mkdir -p $d; gen_step $BN $A $B > $d/wgmma_step.h
  done; done
done
combos=$(for c in $CASES; do IFS=: read -r M K N MODE ACT A B <<<"$c"; echo "$ACT:$A:$B"; done | sort -u)
for v in $VARIANTS; do
  IFS=: read -r NAME FILE BN STAGES TMA EXTRA <<<"$v"
  for combo in $combos; do
    IFS=: read -r ACT A B <<<"$combo"
    d=inc_${BN}_${A}_${B}
    flags="-DBN=$BN -DSTAGES=$STAGES -DTMA_STORE=$TMA -DACT=${ACT}u -DA_M_MAJOR=$A -DB_K_MAJOR=$B"
    flags="$flags -DKERNEL=\"$FILE\" -DVARIANT=\"$NAME\" ${EXTRA//,/ }"
    nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xptxas -v -I$d $flags wgmma_bench.cu -lcuda -lcublasLt \
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
