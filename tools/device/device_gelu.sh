#!/bin/bash
# One device call for issue 5's GELU target: bench_linear for bf16 with the GELU epilogues
# (exact and tanh) and ReLU on SHAPES, PyTorch's cuBLASLt GELU_BIAS and eager GELU beside it,
# then the Hopper kernel tests (every epilogue against float64; TEST_LIMIT seconds). Run from
# the repo root on the device machine, with the binaries packed in .device/ by
# tools/device/pack_device.sh and tools/device/cuda_suite.sh build. Writes at most 8 files to $OUT (the device tool's limit).
set -u
SHAPES=${SHAPES:-2048x2048x2048,8192x4096x4096}
cd .device && tar xzf bins.tgz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
python3 ../tools/device/torch_epilogues.py --dtypes bf16 --shapes $SHAPES > $OUT/torch_gelu.txt 2>&1
for act in gelu gelu-tanh relu; do
  echo "== $act" >> $OUT/bench.txt
  ./bench_linear --dtypes bf16 --shapes $SHAPES --activation $act --json $OUT/bench_$act.json \
    >> $OUT/bench.txt 2>> $OUT/bench.err
done
(cd .. && CHUNK_TIMEOUT=${TEST_LIMIT:-240} bash tools/device/cuda_suite.sh run hopper)
grep -v "^json" $OUT/torch_gelu.txt
cat $OUT/bench.txt
