#!/bin/bash
# Issue 5's MLP-chain kernel on the device: its CUDA tests, the device profile (calibrate), and
# small-batch latency with the chain on (auto, calibrated profile) and off, beside PyTorch eager.
# Binaries in .device/chain/chain.tgz (lib test binary, calibrate, bench_infer, torch_infer.py),
# unpacked into /tmp/chain. STEPS picks what runs: tests calibrate infer.
set -u
mkdir -p /tmp/chain && tar xzf .device/chain/chain.tgz -C /tmp/chain && cp tools/cubecl.toml /tmp/chain/
cd /tmp/chain
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
for step in ${STEPS:-tests calibrate infer}; do
  case $step in
    tests)
      ./lib --test-threads=1 ${TESTS:-suite::mlp} > $OUT/tests.txt 2>&1
      echo "lib ${TESTS:-suite::mlp}: $(grep -E '^test result' $OUT/tests.txt)"
      grep -E -A12 "FAILED|panicked" $OUT/tests.txt | head -40 ;;
    calibrate)
      ./calibrate --dtype bf16 --runs 200 --name "nvidia-h100 (calibrate, $(date -u +%F))" --out $OUT/profile.json 2>&1 | tee $OUT/calibrate.txt | grep -v '^[{}" ]'
      ./calibrate --dtype f32 --runs 100 --base $OUT/profile.json --out $OUT/profile.json 2>&1 | tee -a $OUT/calibrate.txt | grep -v '^[{}" ]'
      cat $OUT/profile.json ;;
    infer)
      D=${DTYPES:-bf16}
      [ -f $OUT/profile.json ] && export HYPATIA_PROFILE=$OUT/profile.json
      for chain in ${CHAINS:-auto never}; do
        echo "== HYPATIA_CHAIN=$chain"
        HYPATIA_CHAIN=$chain ./bench_infer --dtypes $D --batches ${BATCHES:-1,8,32} --backends ${BACKENDS:-hypatia,burn} --json $OUT/infer_$chain.json 2> $OUT/infer_$chain.err | tee $OUT/infer_$chain.txt
      done
      [ -n "${NO_TORCH:-}" ] || python3 torch_infer.py --dtypes $D --batches ${BATCHES:-1,8,32} | tee $OUT/torch.txt | grep -v '^json' ;;
    ncu)
      # The chain kernel's GPU time (L2 kept warm between launches, as in a real loop).
      for b in ${NCU_BATCHES:-1 32}; do
        HYPATIA_CHAIN=always timeout 120 ncu --cache-control none --kernel-name regex:mlp_chain --launch-skip 10 --launch-count 1 --section SpeedOfLight --section LaunchStats \
          ./bench_infer --dtypes bf16 --batches $b --backends hypatia --warmup 10 --runs 5 > $OUT/ncu_$b.txt 2>&1
        echo "batch $b: $(grep -E '^  mlp_chain' $OUT/ncu_$b.txt | head -1 | cut -c1-60) $(grep -E 'Duration|Registers Per|Block Size|Memory Throughput +Gbyte' $OUT/ncu_$b.txt | tr -s ' ' | tr '\n' ';')"
      done ;;
  esac
done
