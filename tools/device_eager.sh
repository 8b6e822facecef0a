#!/bin/bash
# Issue 5's small-batch latency with Hypatia<B>'s submission and sync policies
# (host::submit): the CUDA tests of the policies and the MLP chain, then REPEAT rounds of
# bench_infer under the default policies (HYPATIA_SUBMIT=auto: eager on this machine) and
# under HYPATIA_SUBMIT=batched, Burn beside Hypatia in each process, and PyTorch eager; then
# bench_train's small MLP under both submit policies (TRAIN=0 skips it). Binaries in
# .device/eager/eager.tgz (lib, bench_infer, bench_train, torch_infer.py, torch_ref.py); run from the
# repo root.
set -u
bash tools/device_cache.sh restore
cd .device/eager && tar xzf eager.tgz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
nproc | sed 's/^/cores: /' | tee -a $OUT/device.txt
TESTS=${TESTS-suite::sync suite::mlp}
if [ -n "$TESTS" ]; then
  timeout ${TESTS_TIMEOUT:-300} ./lib --test-threads=1 $TESTS > $OUT/tests.txt 2>&1
  echo "lib $TESTS: $(grep -E '^test result' $OUT/tests.txt)"
  grep -E -A12 "FAILED|panicked" $OUT/tests.txt | head -40
fi
for rep in $(seq ${REPEAT:-3}); do
  for submit in ${SUBMITS:-auto batched}; do
    echo "== round $rep HYPATIA_SUBMIT=$submit"
    HYPATIA_SUBMIT=$submit ./bench_infer --dtypes bf16 --batches ${BATCHES:-1,8,32} --backends hypatia,burn 2>> $OUT/infer.err | grep -v "^widths"
  done
  echo "== round $rep PyTorch eager"
  python3 torch_infer.py --dtypes bf16 --batches ${BATCHES:-1,8,32} 2>&1 | grep -v '^json'
done
if [ "${TRAIN:-1}" = 1 ]; then
  for submit in auto batched; do
    echo "== train HYPATIA_SUBMIT=$submit"
    HYPATIA_SUBMIT=$submit ./bench_train --dtypes bf16 --mlps ${MLPS:-1024:784:2048:10} 2>> $OUT/train.err | tail -3
  done
fi
