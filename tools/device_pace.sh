#!/bin/bash
# Issue 5: paced flushes (host::pace). Per round, bench_infer (Hypatia beside Burn) in one
# process per entry of CONFIGS (name:HYPATIA_SUBMIT:HYPATIA_FLUSH), then PyTorch eager. The
# default CONFIGS is the experiment of the fourth session's call 5, on a build whose FlushPolicy::Auto did not
# flush small blocks yet:
#   old    HYPATIA_SUBMIT=eager HYPATIA_FLUSH=auto   (stop 38's defaults)
#   submit HYPATIA_SUBMIT=paced HYPATIA_FLUSH=auto   (burn-fusion's queue paced)
#   flush  HYPATIA_SUBMIT=eager HYPATIA_FLUSH=paced  (CubeCL's queue paced after each block)
#   both   HYPATIA_SUBMIT=paced HYPATIA_FLUSH=paced
# Since then Auto flushes chain blocks paced: CONFIGS="default:auto:auto never:auto:never" compares
# the defaults with stop 38's behaviour. Then bench_train's small MLP under both submit policies, each timing --flushes auto,paced in
# one process (TRAIN=0 skips it), and the CUDA tests in TESTS. Binaries in
# .device/eager/eager.tgz (lib, bench_infer, bench_train, torch_infer.py); run from the repo root.
set -u
bash tools/device_cache.sh restore
cd .device/eager && tar xzf eager.tgz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
nproc | sed 's/^/cores: /' | tee -a $OUT/device.txt
TESTS=${TESTS-}
if [ -n "$TESTS" ]; then
  timeout ${TESTS_TIMEOUT:-300} ./lib --test-threads=1 $TESTS > $OUT/tests.txt 2>&1
  echo "lib $TESTS: $(grep -E '^test result' $OUT/tests.txt)"
  grep -E -A12 "FAILED|panicked" $OUT/tests.txt | head -40
fi
echo "config  batch  hypatia  burn  vs-burn  host-hy  sync-hy  fus/exe/med"
for rep in $(seq ${REPEAT:-3}); do
  for config in ${CONFIGS:-old:eager:auto submit:paced:auto flush:eager:paced both:paced:paced}; do
    IFS=: read name submit flush <<< "$config"
    HYPATIA_SUBMIT=$submit HYPATIA_FLUSH=$flush ./bench_infer --dtypes bf16 --batches ${BATCHES:-1,8,32} \
      --backends hypatia,burn --no-header 2>> $OUT/infer.err \
      | awk -v n="$rep/$name" '{s=""; for (i = 13; i <= NF; i++) if ($i !~ /[a-z]/) s = s $i; print n, $2, $4, $5, $7, $8, $10, s}'
  done
  python3 torch_infer.py --dtypes bf16 --batches ${BATCHES:-1,8,32} 2>&1 | grep -v '^json' \
    | awk -v n="$rep/torch" '{print n, $5, $7}'
done
if [ "${TRAIN:-1}" = 1 ]; then
  for submit in eager paced; do
    echo "== train HYPATIA_SUBMIT=$submit --flushes auto,paced"
    HYPATIA_SUBMIT=$submit ./bench_train --dtypes bf16 --mlps ${MLPS:-1024:784:2048:10} \
      --flushes auto,paced 2>> $OUT/train.err | tail -4
  done
fi
cd ../.. && bash tools/device_cache.sh save > /dev/null
