#!/bin/bash
# Experiment: Hypatia's forward with burn-fusion's queue flushed after each layer and/or a
# `sync` that spins (bench_infer --eager), beside Burn in each process, and PyTorch eager, in
# REPEAT interleaved rounds. Binaries in .device/eager (bench_infer, torch_infer.py).
set -u
bash tools/device_cache.sh restore
cd .device/eager
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
nproc | sed 's/^/cores: /' | tee -a $OUT/device.txt
grep -m1 "model name" /proc/cpuinfo | tee -a $OUT/device.txt
for rep in $(seq ${REPEAT:-3}); do
  for eager in ${MODES:-none spin flush both}; do
    echo "== round $rep eager=$eager"
    HYPATIA_SYNC=${SYNC:-spin} ./bench_infer --dtypes bf16 --batches ${BATCHES:-1,8,32} --backends hypatia,burn --eager $eager 2>> $OUT/infer.err | grep -v "^widths"
  done
  echo "== round $rep PyTorch eager"
  python3 torch_infer.py --dtypes bf16 --batches ${BATCHES:-1,8,32} 2>&1 | grep -v '^json'
done
