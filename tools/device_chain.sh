#!/bin/bash
# Issue 5's MLP-chain kernel on the device: its CUDA tests, the device profile (calibrate), and
# small-batch latency with the chain on (auto, calibrated profile) and off, beside PyTorch eager.
# Binaries in .device/chain/chain.tgz (lib and hopper test binaries, calibrate, bench_infer,
# torch_infer.py), unpacked into /tmp/chain. STEPS picks what runs: kernel tests calibrate infer
# ncu.
set -u
mkdir -p /tmp/chain && tar xzf .device/chain/chain.tgz -C /tmp/chain && cp tools/cubecl.toml /tmp/chain/
cd /tmp/chain
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
for step in ${STEPS:-kernel tests calibrate infer}; do
  case $step in
    kernel)
      timeout ${KERNEL_TIMEOUT:-150} ./hopper --test-threads=1 ${KERNEL_TESTS:-grid_chain} > $OUT/kernel.txt 2>&1
      echo "hopper ${KERNEL_TESTS:-grid_chain}: $(grep -E '^test result' $OUT/kernel.txt)"
      grep -E -A20 "FAILED|panicked" $OUT/kernel.txt | head -60 ;;
    tests)
      timeout ${TESTS_TIMEOUT:-240} ./lib --test-threads=1 ${TESTS:-suite::mlp} > $OUT/tests.txt 2>&1
      echo "lib ${TESTS:-suite::mlp}: $(grep -E '^test result' $OUT/tests.txt)"
      grep -E -A12 "FAILED|panicked" $OUT/tests.txt | head -40 ;;
    calibrate)
      ./calibrate --dtype bf16 --runs 200 --name "nvidia-h100 (calibrate, $(date -u +%F))" --out $OUT/profile.json 2>&1 | tee $OUT/calibrate.txt | grep -v '^[{}" ]'
      ./calibrate --dtype f32 --runs 100 --base $OUT/profile.json --out $OUT/profile.json 2>&1 | tee -a $OUT/calibrate.txt | grep -v '^[{}" ]'
      cat $OUT/profile.json ;;
    infer)
      D=${DTYPES:-bf16}
      [ -f $OUT/profile.json ] && export HYPATIA_PROFILE=$OUT/profile.json
      # REPEAT rounds of every chain setting, then PyTorch: processes differ by ±20%, so the
      # rounds show the spread. One file each (the device tool fetches at most 8).
      for rep in $(seq ${REPEAT:-1}); do
        for chain in ${CHAINS:-auto never}; do
          echo "== round $rep HYPATIA_CHAIN=$chain" | tee -a $OUT/infer.txt
          HYPATIA_CHAIN=$chain ./bench_infer --dtypes $D --batches ${BATCHES:-1,8,32} --backends ${BACKENDS:-hypatia,burn} 2>> $OUT/infer.err | tee -a $OUT/infer.txt
        done
        [ -n "${NO_TORCH:-}" ] || python3 torch_infer.py --dtypes $D --batches ${BATCHES:-1,8,32} 2>&1 | tee -a $OUT/torch.txt | grep -v '^json'
      done ;;
    ncu)
      # The chain kernel's GPU time (L2 kept warm between launches, as in a real loop).
      for b in ${NCU_BATCHES:-1 32}; do
        HYPATIA_CHAIN=always timeout 120 ncu --cache-control none --clock-control none --kernel-name regex:"mlp_chain|grid_chain" --launch-skip 10 --launch-count 1 --section SpeedOfLight --section LaunchStats \
          ./bench_infer --dtypes bf16 --batches $b --backends hypatia --warmup 10 --runs 5 > $OUT/ncu_$b.txt 2>&1
        echo "batch $b: $(grep -E "^  (mlp_chain|hypatia_grid_chain)" $OUT/ncu_$b.txt | head -1 | cut -c1-60) $(grep -E 'Duration|Registers Per|Block Size|Memory Throughput +Gbyte' $OUT/ncu_$b.txt | tr -s ' ' | tr '\n' ';')"
      done ;;
  esac
done
