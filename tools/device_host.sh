#!/bin/bash
# One device call for issue 4: where a small MLP's training step spends its host time.
# bench_train (bf16, MLP) under switches that each take one part of Hypatia's path away, then
# a run that logs every kernel launch, to count launches per step for Hypatia and Burn.
# Run from the repo root on the device machine, with the binaries packed in .device/bins.tgz.
set -u
MLP=${MLP:-1024:784:2048:10}
cd .device && tar xzf bins.tgz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
run() {
  local name=$1; shift
  env "$@" ./bench_train --dtypes bf16 --mlps $MLP --runs 10 --steps 10 > $OUT/host_$name.txt 2> $OUT/host_$name.err
  echo "== $name ($*)"
  grep -E "ms per step|host time" $OUT/host_$name.err | sed 's/bench_train: //' | cut -c1-240
  tail -1 $OUT/host_$name.txt
}
run default
run no-patterns HYPATIA_DISABLE=linear-relu,matmul-relu-grad,matmul
run no-matmul HYPATIA_DISABLE=matmul
run only-tiled HYPATIA_ENGINE_CANDIDATE=tiled
run only-burn HYPATIA_ENGINE_CANDIDATE=burn
# Kernel launches: CubeCL logs each kernel it runs (no timing, no sync) on stderr; bench_train's
# markers delimit one steady-state step of each backend (its memory step).
mkdir -p klog
printf '[autotune]\ncache = "target"\n[profiling.logger]\nlevel = "minimal"\nstderr = true\n' > klog/cubecl.toml
(cd klog && ../bench_train --dtypes bf16 --mlps $MLP --runs 2 --steps 10 > $OUT/klog.txt 2> $OUT/klog.err)
python3 - $OUT/klog.err <<'PY'
import sys, collections
section, counts = None, collections.defaultdict(collections.Counter)
for line in open(sys.argv[1]):
    if line.startswith("bench_train: memory step:"):
        section = line.split()[-1]
    elif line.startswith("Executing") and section:
        counts[section][line.split("|")[0].split()[1]] += 1
for section, c in counts.items():
    if section == "end":
        continue
    print(f"== launches in one step, {section}: {sum(c.values())}")
    for name, n in c.most_common(12):
        print(f"  {n:4} {name}")
PY
