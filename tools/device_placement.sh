#!/bin/bash
# Issue 5: whether the slow bench_infer processes (0.075-0.084 ms against 0.061-0.068 ms for
# the 784->512->512->10 forward) come from where the process's threads run. Prints the CPU
# topology, then runs Hypatia's bench_infer in processes placed by the scheduler (with a snapshot
# of the CPU of each thread), on distinct physical cores, and on SMT siblings; PyTorch eager
# beside them. Binaries in .device/eager/eager.tgz; run from the repo root.
set -u
bash tools/device_cache.sh restore
cd .device/eager && tar xzf eager.tgz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA)" | tee -a $OUT/device.txt
for c in /sys/devices/system/cpu/cpu[0-9]*; do
  echo "$(basename $c)=$(cat $c/topology/thread_siblings_list)"
done | sort -V | tr '\n' ' ' | tee -a $OUT/device.txt; echo
# One logical CPU of each physical core, and the cores whose siblings are all listed.
firsts=$(for c in /sys/devices/system/cpu/cpu[0-9]*; do cut -d, -f1 $c/topology/thread_siblings_list | cut -d- -f1; done | sort -un)
distinct=$(echo $firsts | tr ' ' '\n' | head -4 | paste -sd,)
pairs=$(for f in $(echo $firsts | tr ' ' '\n' | head -2); do cat /sys/devices/system/cpu/cpu$f/topology/thread_siblings_list; done | paste -sd,)
echo "distinct cores: $distinct; SMT pairs: $pairs"
RUNS=${RUNS:-1500}
bench() {
  local label=$1; shift
  "$@" ./bench_infer --dtypes bf16 --batches 1,8,32 --backends hypatia --runs $RUNS --no-header \
    > $OUT/p_$label.txt 2>> $OUT/p.err &
  local pid=$!
  : > $OUT/snap_$label.txt
  while kill -0 $pid 2> /dev/null; do
    ps -L -o psr=,comm= -p $pid 2> /dev/null | sort -k2 | awk '{printf "%s@%s ", $2, $1}' >> $OUT/snap_$label.txt
    echo >> $OUT/snap_$label.txt
    sleep 0.3
  done
  wait $pid
  printf "%-12s %s | %s\n" "$label" "$(awk '{s=$4; for (i = 12; i <= NF; i++) if ($i !~ /[a-z]/) s = s " " $i; printf "%s; ", s}' $OUT/p_$label.txt)" \
    "$(grep DSU $OUT/snap_$label.txt | tail -1 | tr ' ' '\n' | grep -E 'bench|DS' | paste -sd' ')"
}
echo "label        ms / exec us fus/exe per batch 1,8,32 | thread@cpu late in the run"
for r in $(seq ${REPEAT:-6}); do bench default$r; done
for r in 1 2 3; do bench distinct$r taskset -c $distinct; done
for r in 1 2 3; do bench smt$r taskset -c $pairs; done
for r in 1 2; do echo "torch $(python3 torch_infer.py --dtypes bf16 --batches 1,8,32 2>&1 | grep -v '^json' | tail -3 | awk '{printf "%s ", $0}')"; done
cd ../.. && bash tools/device_cache.sh save > /dev/null
