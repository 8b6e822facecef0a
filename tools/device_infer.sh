#!/bin/bash
# One device call for issue 5's small-batch target: bench_infer (Hypatia, Burn, CubeBackend)
# and PyTorch eager on the same MLP, batches and protocol; then bench_linear at 2048³ (the
# shape where claiming a Linear alone once made Linear + activation slower). Binaries in
# .device/infer/infer.tgz, unpacked into /tmp/infer. Autotune starts cold each call (about
# 3-5 minutes of it for the small shapes of one dtype).
set -u
mkdir -p /tmp/infer && tar xzf .device/infer/infer.tgz -C /tmp/infer && cp tools/cubecl.toml /tmp/infer/
cd /tmp/infer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
D=${DTYPES:-f32,bf16}
./bench_infer --dtypes $D --batches ${BATCHES:-1,8,32} --json $OUT/infer.json ${ARGS:-} 2> $OUT/infer.err | tee $OUT/infer.txt
[ -n "${NO_TORCH:-}" ] || python3 torch_infer.py --dtypes $D --batches ${BATCHES:-1,8,32} | tee $OUT/torch.txt | grep -v '^json'
for act in ${LINEAR_ACTS:-}; do
  ./bench_linear --dtypes bf16 --shapes 2048x2048x2048 --runs 10 --activation $act 2>&1 | tee -a $OUT/linear.txt
done
