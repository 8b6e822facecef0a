#!/bin/bash
# burn-train's Learner on the device machine: one-GPU throughput of Hypatia and Burn, and
# burn-train's multi-device strategies. Run from the repo root there, with .device/learner.tgz
# (BINS=train_multi_gpu FEATURES=cuda,distributed PACK=learner.tgz
# tools/device/run.sh pack, here) and, if carried, .device/cache.tar.xz
# (tools/device/lib/cache.sh).
#
# RUNS, in order, each `BACKEND:STRATEGY:DEVICES:BATCH[:SETTINGS]` (batch per device; SETTINGS:
# comma-separated `VAR=VALUE` for that run only), e.g. `hypatia:single:1:8192 burn:ddp:2:8192
# hypatia:ddp:2:8192:HYPATIA_SUBMIT=eager,HYPATIA_COLLECTIVE=queued`; DTYPE (bf16), EPOCHS (3),
# HIDDEN (4096), FEATURES and CLASSES (1024), STEPS (training steps per epoch on one device, 64: the
# synthetic set holds STEPS × 8192 samples whatever the batch), ARGS (more options of the example,
# e.g. `--stats`, or `--step-times`: each device's host time per step, tabled under its run),
# RUN_TIMEOUT (300 s). Each run's output goes to $OUT/RUN.txt, each line led by the seconds since
# the run started; a table of the last epoch's samples/s and every epoch's train loss is printed
# last (the first EPOCHS epochs: under `ddp` burn-train 0.21 logs an extra, empty one).
# NO_SETUP=1 skips unpacking and the cache restore, NO_SAVE=1 the cache save: for runs side by side
# on other GPUs (CUDA_VISIBLE_DEVICES) after one setup. THREADS=1 writes each run's busiest threads
# and each GPU's utilization every 5 s (tools/device/py/threads.py) to $OUT/RUN.threads: which thread
# or GPU bounds a step. BUDGET (s): runs not started by then are skipped, so a call ends inside its
# limit. PACK_LOGS=1 moves the logs into $OUT/logs.tgz (the device tool returns only a few files).
set -u
START=$(date +%s)
ROOT=$(pwd)
if [ -z "${NO_SETUP:-}" ]; then
  tar xzf .device/learner.tgz -C .device
  bash tools/device/lib/cache.sh restore
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
fi
# cudarc loads NCCL at run time: PyTorch's wheel carries it. NVLink multicast stays off.
NCCL_LIB=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="${NCCL_LIB:+$NCCL_LIB:}${LD_LIBRARY_PATH:-}" NCCL_NVLS_ENABLE=0
eval "$(bash tools/device/lib/cache.sh env)"
cd .device
samples=$(( ${STEPS:-64} * 8192 ))
# Each output line gets the seconds since the run started: when its first step came, and why.
stamp='import sys, time
t = time.time()
for line in sys.stdin: print(f"{time.time() - t:7.1f} {line}", end="")'

table=""
# One row of the table: the run, then its rate (or why it has none) and losses.
row() { table+="$(printf '%-28s %10s   %s' "$1" "$2" "${3:-}")"$'\n'; }
for run in ${RUNS:-hypatia:single:1:8192 burn:single:1:8192}; do
  IFS=: read -r backend strategy devices batch settings <<<"$run"
  if [ -n "${BUDGET:-}" ] && [ $(($(date +%s) - START)) -gt "$BUDGET" ]; then
    row "$run" skipped
    continue
  fi
  tag=$(echo "$run" | tr ':,=/' '-')
  # A run repeated in one call (or one $OUT) keeps its own log: `-2`, `-3`, ...
  n=2; base=$tag; while [ -e "$OUT/$tag.txt" ]; do tag=$base-$n; n=$((n + 1)); done
  # shellcheck disable=SC2046 # one word per setting
  env $(tr ',' ' ' <<<"${settings:-}") timeout "${RUN_TIMEOUT:-300}" ./train_multi_gpu --backend "$backend" --strategy "$strategy" \
    --devices "$devices" --batch-size "$batch" --dtype "${DTYPE:-bf16}" --data synthetic \
    --features "${FEATURES:-1024}" --classes "${CLASSES:-1024}" --hidden "${HIDDEN:-4096}" \
    --samples "$samples" --epochs "${EPOCHS:-3}" --cli --artifact-dir "/tmp/learner-$tag" ${ARGS:-} \
    > >(python3 -u -c "$stamp" >"$OUT/$tag.txt") 2>&1 &
  pid=$!
  if [ -n "${THREADS:-}" ]; then
    sleep 1 && python3 "$ROOT/tools/device/py/threads.py" "$(pgrep -n -P $pid)" 5 >"$OUT/$tag.threads" &
  fi
  wait $pid || echo "$run: stopped (rc $?), see $tag.txt"
  wait # the time stamps' and threads' writers
  # The report's rows: epoch, train loss, valid loss, valid accuracy, samples/s.
  rows=$(cut -c9- "$OUT/$tag.txt" | awk '/^epoch  train-loss/{on=1; next} on && /^ +[0-9]+ /{print}' | head -n "${EPOCHS:-3}")
  losses=$(echo "$rows" | awk '{printf "%s ", $2}')
  rate=$(echo "$rows" | tail -1 | awk '{print $5}')
  row "$run" "${rate:-?}" "$losses"
  # `--step-times`: each device's line (median / p90 ms of forward, backward, gap, step).
  table+="$(cut -c9- "$OUT/$tag.txt" | awk '/^step times/{on=1; next} on && / \/ /{print "    " $0; next} {on=0}')"
  [ "${table: -1}" = $'\n' ] || table+=$'\n'
done
echo "== ${DTYPE:-bf16}, hidden ${HIDDEN:-4096}, $samples samples/epoch; last epoch's samples/s, train loss per epoch"
printf '%s' "$table"
[ -n "${NO_SAVE:-}" ] || (cd "$ROOT" && bash tools/device/lib/cache.sh save >/dev/null)
if [ -n "${PACK_LOGS:-}" ]; then
  (cd "$OUT" && find . -maxdepth 1 \( -name '*.txt' -o -name '*.threads' \) ! -name device.txt -print0 |
    tar czf logs.tgz --remove-files --null -T -)
fi
