#!/bin/bash
# The test binaries built with --features cuda, run on the device machine (TESTS picks a subset).
set -u
TESTS=${TESTS:-hopper lib half_f16 half_bf16}
cd .device && tar xzf tests.tgz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in $TESTS; do
  ./$t --test-threads=1 > $OUT/tests_$t.txt 2>&1
  echo "$t: $(grep -E '^test result' $OUT/tests_$t.txt)"
  grep -E -A12 "FAILED|panicked" $OUT/tests_$t.txt | head -40
done
