#!/bin/bash
# One device call for issue 3: the Linear+ReLU benchmark for one dtype (DTYPE=bf16|f16|f32;
# SHAPES and CANDIDATES as bench_linear's --shapes and --candidates) and
# PyTorch beside it (f32 with TF32, as Burn's f32 matmul uses). Tests: tools/cuda_suite.sh.
# Run from the repo root on the device machine, with the binaries packed in .device/bins.tgz.
set -u
DTYPE=${DTYPE:-bf16}
cd .device && tar xzf bins.tgz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
./bench_linear --dtypes $DTYPE ${SHAPES:+--shapes "$SHAPES"} --candidates "${CANDIDATES:-}" --json $OUT/bench_$DTYPE.json > $OUT/bench_$DTYPE.txt 2> $OUT/bench_$DTYPE.err
TF32=$([ "$DTYPE" = f32 ] && echo --tf32)
python3 torch_ref.py linear --dtypes $DTYPE $TF32 > $OUT/torch_$DTYPE.txt 2>&1
grep -v "^json" $OUT/torch_$DTYPE.txt | sed -E 's/ \(([0-9]+) TF\/s\)/(\1)/g'
cat $OUT/bench_$DTYPE.txt
