#!/bin/bash
# The integration test binaries built with --features cuda, run on the device machine.
set -u
cd .device && tar xzf tests.tgz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in lib half_f16 half_bf16; do
  ./$t --test-threads=1 > $OUT/tests_$t.txt 2>&1
  echo "$t: $(grep -E '^test result' $OUT/tests_$t.txt)"
  grep -E "FAILED|panicked" $OUT/tests_$t.txt | head -5
done
