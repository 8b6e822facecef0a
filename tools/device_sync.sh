#!/bin/bash
# Issue 5's small-batch latency with Hypatia's spinning `sync` (host::sync): the CUDA tests
# of the sync policies and the MLP chain, then REPEAT rounds of bench_infer under
# HYPATIA_SYNC=spin and park (Burn's own path beside Hypatia in each process) and PyTorch eager,
# interleaved so that each round sees the machine in one state. Binaries (lib test binary,
# bench_infer, torch_infer.py, and any test binaries BIN_TESTS names) in .device/sync/sync.tgz;
# run from the repo root. BIN_TESTS: space-separated `binary:filter` (e.g. `hopper:grid_chain
# half_bf16:`), each run with --test-threads=1 before the lib tests.
set -u
bash tools/device_cache.sh restore
mkdir -p .device/sync/bin && tar xzf .device/sync/sync.tgz -C .device/sync/bin && cp tools/cubecl.toml .device/sync/bin/
cd .device/sync/bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
nproc | sed 's/^/cores: /' | tee -a $OUT/device.txt
for entry in ${BIN_TESTS:-}; do
  bin=${entry%%:*}; filter=${entry#*:}
  timeout ${TESTS_TIMEOUT:-300} ./$bin --test-threads=1 $filter > $OUT/$bin.txt 2>&1
  echo "$bin $filter: $(grep -E '^test result' $OUT/$bin.txt)"
  grep -E -A12 "FAILED|panicked" $OUT/$bin.txt | head -40
done
TESTS=${TESTS-suite::sync suite::mlp}
if [ -n "$TESTS" ]; then
  timeout ${TESTS_TIMEOUT:-300} ./lib --test-threads=1 $TESTS > $OUT/tests.txt 2>&1
  echo "lib $TESTS: $(grep -E '^test result' $OUT/tests.txt)"
  grep -E -A12 "FAILED|panicked" $OUT/tests.txt | head -40
fi
for rep in $(seq ${REPEAT:-3}); do
  for sync in ${SYNCS:-spin park}; do
    echo "== round $rep HYPATIA_SYNC=$sync" | tee -a $OUT/infer.txt
    HYPATIA_SYNC=$sync ./bench_infer --dtypes bf16 --batches ${BATCHES:-1,8,32} --backends hypatia,burn 2>> $OUT/infer.err | tee -a $OUT/infer.txt
  done
  echo "== round $rep PyTorch eager" | tee -a $OUT/torch.txt
  python3 torch_infer.py --dtypes bf16 --batches ${BATCHES:-1,8,32} 2>&1 | tee -a $OUT/torch.txt | grep -v '^json'
done
