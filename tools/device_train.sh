#!/bin/bash
# One device call for issue 4: the training-step benchmark (DTYPES, MLPS as bench_train's
# --dtypes and --mlps) and PyTorch eager's step beside it. Run from the repo root on the device
# machine, with the binaries packed in .device/bins.tgz (tools/pack_device.sh).
set -u
DTYPES=${DTYPES:-f32,bf16}
cd .device && tar xzf bins.tgz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
./bench_train --dtypes $DTYPES ${MLPS:+--mlps "$MLPS"} --json $OUT/train.json > $OUT/train.txt 2> $OUT/train.err
python3 torch_ref.py train --dtypes $DTYPES > $OUT/torch_train.txt 2>&1
grep -v "^json" $OUT/torch_train.txt
cat $OUT/train.txt
tail -5 $OUT/train.err
