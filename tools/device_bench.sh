#!/bin/bash
# One device call for issue 3: GPU tests, the Linear+ReLU benchmark and PyTorch beside it.
# Run from the repo root on the device machine, with the binaries unpacked in .device/.
set -u
cd .device
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
if [ -x ./gpu_tests ]; then
  ./gpu_tests --test-threads=1 > $OUT/tests.txt 2>&1
  grep -E "^test result|FAILED|panicked" $OUT/tests.txt | head -5
fi
./bench_linear --json $OUT/bench.json ${BENCH_ARGS:-} > $OUT/bench.txt 2> $OUT/bench.err
python3 torch_ref.py linear --dtypes bf16,f16 ${TORCH_ARGS:-} > $OUT/torch.txt 2>&1
python3 torch_ref.py linear --dtypes f32 --tf32 ${TORCH_ARGS:-} >> $OUT/torch.txt 2>&1
grep -v "^json" $OUT/torch.txt | sed -E 's/ \(([0-9]+) TF\/s\)/(\1)/g'
cat $OUT/bench.txt
