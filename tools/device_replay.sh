#!/bin/bash
# Issue 5: the chain's remembered decision (execute::chain), A/B against the build
# before it. Per round, one bench_infer process per binary in BINS (Hypatia beside Burn, bf16,
# batches 1/8/32), then PyTorch eager; then, unless TIMELINE=0, each binary once more at batch 8
# (Hypatia alone) under tools/kernel_timeline.cu, read by tools/infer_timeline.py. Binaries in
# .device/eager/eager.tgz (lib, hopper, bench_infer, bench_infer_old, torch_infer.py,
# cubecl.toml); run from the repo root.
set -u
ROOT=$PWD
bash tools/device_cache.sh restore
cd .device/eager && tar xzf eager.tgz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
nproc | sed 's/^/cores: /' | tee -a $OUT/device.txt
for t in ${TESTS-lib:suite::mlp lib:suite::sync hopper:grid_chain}; do
  IFS=: read bin filter <<< "$t"
  timeout ${TESTS_TIMEOUT:-300} ./$bin --test-threads=1 $filter > $OUT/tests-$bin-${filter//:/_}.txt 2>&1
  echo "$bin $filter: $(grep -E '^test result' $OUT/tests-$bin-${filter//:/_}.txt)"
  grep -E -A12 "FAILED|panicked" $OUT/tests-$bin-${filter//:/_}.txt | head -30
done
BINS=${BINS:-"old:bench_infer_old new:bench_infer"}
echo "round/build batch hypatia burn vs-burn host-hy sync-hy fus/exe/med"
for rep in $(seq ${REPEAT:-4}); do
  for entry in $BINS; do
    IFS=: read name bin <<< "$entry"
    ./$bin --dtypes bf16 --batches ${BATCHES:-1,8,32} --backends hypatia,burn --no-header 2>> $OUT/infer.err \
      | awk -v n="$rep/$name" '{s=""; for (i = 13; i <= NF; i++) if ($i !~ /[a-z]/) s = s $i; print n, $2, $4, $5, $7, $8, $10, s}' \
      | tee -a $OUT/rounds.txt
  done
  python3 torch_infer.py --dtypes bf16 --batches ${BATCHES:-1,8,32} 2>&1 | grep -v '^json' \
    | awk -v n="$rep/torch" '{print n, $5, $7}' | tee -a $OUT/rounds.txt
done
if [ "${TIMELINE:-1}" = 1 ]; then
  for entry in $BINS; do
    IFS=: read name bin <<< "$entry"
    echo "== timeline $name (batch 8, Hypatia alone, under CUPTI)"
    TIMELINE=$OUT/timeline-$name.csv bash $ROOT/tools/device_timeline.sh ./$bin --dtypes bf16 --batches 8 \
      --backends hypatia --no-header 2>> $OUT/timeline.err | awk '{print "bench:", $4, "ms"}'
    python3 $ROOT/tools/infer_timeline.py $OUT/timeline-$name.csv > $OUT/timeline-$name.txt
    head -12 $OUT/timeline-$name.txt
  done
fi
cd $ROOT && bash tools/device_cache.sh save > /dev/null
