#!/usr/bin/env bash
# The CUDA gate: every chunk of the test suite (tools/device/run.sh suite, the user-model tests
# in f32 and bf16 among them) and Burn's own backend tests (tools/burn_tests) on `Hypatia<Cuda>`
# and on `Cuda`, in f32, f16 and bf16, as a fixed list of device calls that each end inside the
# device tool's 10-minute limit; then one table of passes, failures and hangs.
#
#   tools/device/run.sh gate build           here: the suite's and Burn's test binaries, packed
#                                             into .device/ (carry .device)
#   tools/device/run.sh gate calls           the device calls, one line each
#   tools/device/run.sh gate N               on the GPU machine, from the repo root: call N;
#                                             its result lines to $OUT/gate-N.txt
#   DEADLINE=S tools/device/run.sh gate N... calls N... in one device call, ending within S
#                                             seconds: each chunk's limit is what is left,
#                                             shared by the call's rounds of chunks; a call
#                                             with no time left marks its chunks not run;
#                                             then the table (several GPUs: run_all)
#   tools/device/run.sh gate table FILE...   here: the markdown table of those files (the
#                                             results file's "The CUDA gate" section)
#
# Each call restores CubeCL's caches from .device/cache.tar.xz and saves them to $OUT (copy
# that back into .device/ before the next call, as for `run.sh suite`). A chunk stopped by its
# limit counts as a hang: the gate passes when every line is a pass.
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT"

# call|how many at once|what: suite chunks, or `burn:BACKEND:FILTER` for Burn's tests on one
# backend. The slowest
# first; the groups come from the suite's last run (benches/results/nvidia-h200.md). Burn's
# whole suite compiles for longer than a call, and one backend's pack (40-49 MB) is all a call
# carries: calls 4 and 5 run the tests of what Hypatia claims (matmuls, linears, activations,
# linear algebra, pools), call 4 carrying .device/burn_tests-hypatia.tgz, call 5
# .device/burn_tests-burn.tgz. Call 6 trains the user models 200 steps beside Burn, one chunk at
# a time so that their step times are the GPU's alone. Call 7 has the two model chunks whose
# Burn runs, each in a fresh process (decision record 0032), compile and tune the most: beside
# call 3's eight others on a machine whose PTX cache was empty, they ran past 465 s.
calls() {
  cat <<'EOF'
1|14|hopper-bf16-0 hopper-bf16-1 hopper-f16-0 hopper-f16-1 hopper-tf32-0 hopper-tf32-1 half_f16-prop-forward half_bf16-prop-forward lib-prop-backward-0 lib-prop-backward-1 half_f16-prop-backward-0 half_bf16-prop-backward-0 lib-prop-gelu-backward lib-prop-silu-backward half_f16-prop-gelu-backward half_bf16-prop-gelu-backward half_f16-prop-silu-backward half_bf16-prop-silu-backward
2|16|half_f16-prop-backward-1 half_f16-prop-backward-2 half_bf16-prop-backward-1 half_bf16-prop-backward-2 half_f16-prop-chains half_bf16-prop-chains hopper-tiny-bf16 hopper-tiny-f16 hopper-tiny-f32 hopper half_f16 half_bf16 lib-long-run lib-prop-forward lib-prop-chains startup lib-prop-gelu-tanh-backward half_f16-prop-gelu-tanh-backward half_bf16-prop-gelu-tanh-backward lib-prop-leaky-relu-backward half_f16-prop-leaky-relu-backward half_bf16-prop-leaky-relu-backward lib-prop-swiglu-backward half_f16-prop-swiglu-backward half_bf16-prop-swiglu-backward lib-prop-swiglu-forward half_f16-prop-swiglu-forward half_bf16-prop-swiglu-forward
3|8|half_bf16-models half_bf16-models-guide lib-train lib-rest lib-mlp lib-kernels unit learner
4|7|burn:hypatia:lu:: activation cosine_similarity det:: matmul linear avgpool relu gelu silu
5|7|burn:burn:lu:: activation cosine_similarity det:: matmul linear avgpool relu gelu silu
6|1|lib-models-200 half_bf16-models-200
7|2|half_bf16-models-silu lib-train-models
EOF
}

# The line of call N (`N|jobs|what`), or exit naming the calls.
call_line() {
  calls | grep -m1 "^$1|" || { echo "no call $1 (tools/device/run.sh gate calls)" >&2; exit 2; }
}

build() {
  set -e
  bash tools/device/run.sh suite build
  bash tools/burn_tests/burn_tests.sh build cuda
}

run() {
  local n=$1 line jobs what
  line=$(call_line "$n") || exit 2
  IFS='|' read -r _ jobs what <<<"$line"
  local lines=${OUT:-$ROOT/.device}/gate-$n.txt
  if [[ "$what" == burn:* ]]; then
    # Burn's suites on the call's backend; its table's rows become gate lines (burn_tests.sh
    # report).
    local backend=${what#burn:}
    backend=${backend%%:*}
    # shellcheck disable=SC2086 # the filter is words
    BACKENDS=$backend JOBS=$jobs TIMEOUT=${CHUNK_TIMEOUT:-540} \
      bash tools/burn_tests/burn_tests.sh run ${what#burn:"$backend":} | tee "$lines.raw"
    python3 - "$lines.raw" >"$lines" <<'PY'
import sys
# burn_tests.sh's rows `| suite | backend | passed | failed | ignored | s |`; `table` compares
# the backends.
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) >= 4 and cells[2].isdigit() and cells[3].isdigit():
        print(f"burn-tests {cells[0]} on {cells[1]}: COUNT {cells[2]} passed; {cells[3]} failed")
PY
  else
    # shellcheck disable=SC2086 # one word per chunk
    JOBS=$jobs CHUNK_TIMEOUT=${CHUNK_TIMEOUT:-480} bash tools/device/run.sh suite run $what |
      grep -E '^[^ ]+: (PASS|FAIL)' | tee "$lines"
  fi
}

# One row a result line: PASS, FAIL, or a hang (a chunk its limit stopped); Burn's suites a row
# each, failing where Hypatia fails more of a suite's tests than Burn does.
table() {
  python3 - "$@" <<'PY'
import re, sys
lines = [l.rstrip("\n") for f in sys.argv[1:] for l in open(f)]
rows, counts = [], {}
for l in lines:
    m = re.match(r"burn-tests (\S+) on (\S+): COUNT (\d+) passed; (\d+) failed", l)
    if m:
        counts.setdefault(m[1], {})[m[2]] = (int(m[3]), int(m[4]))
        continue
    m = re.match(r"([^:]+): (PASS|FAIL)(?: rc=(\d+))? ?(.*)", l)
    if m:
        state = ("pass" if m[2] == "PASS" else "not run" if m[4].startswith("not run")
                 else "hang" if m[3] == "124" else "fail")
        rows.append((m[1], state, m[4]))
for suite, by in counts.items():
    h, b = by.get("hypatia"), by.get("burn")
    state = "pass" if h and b and h[1] <= b[1] else "fail"
    text = "; ".join(f"{k}: {p} passed, {f} failed" for k, (p, f) in sorted(by.items()))
    rows.append((f"Burn's {suite}", state, text))
print("| what | result | tests |\n|---|---|---|")
for what, state, text in rows:
    print(f"| {what} | {state if state == 'pass' else '**' + state + '**'} | {text} |")
n = {s: sum(r[1] == s for r in rows) for s in ("pass", "fail", "hang", "not run")}
print(f"\n{n['pass']} passed, {n['fail']} failed, {n['hang']} hung"
      + (f", {n['not run']} not run" if n["not run"] else ""))
PY
}

# Calls N... inside DEADLINE seconds (none: each chunk CHUNK_TIMEOUT, default 480): a chunk's
# limit is the time left (less 40 s to save the caches) over the call's rounds (its chunks
# over how many run at once), at most CHUNK_TIMEOUT. On a machine of several GPUs the suite's
# calls go to them in turn, each GPU running its calls one after another, all GPUs at once
# (Burn's tests, calls 4 and 5, carry packs of their own: a device call of their own).
run_all() {
  local gpus
  GATE_START=$SECONDS
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  if [ "${gpus:-0}" -gt 1 ] && [ $# -gt 1 ]; then
    run_on_gpus "$gpus" "$@"
  else
    run_calls "$@"
  fi
  [ -z "${DEADLINE:-}" ] || (cd "${OUT:-$ROOT/.device}" && table $(printf 'gate-%s.txt ' "$@"))
}

# The calls N... on GPUS GPUs: call i on GPU i mod GPUS, the binaries and caches unpacked once
# before and the caches saved once after; each call's log joins suite.log.
run_on_gpus() {
  local gpus=$1 out=${OUT:-$ROOT/.device} work i gpu
  shift
  if calls | grep -E "^($(tr ' ' '|' <<<"$*"))\|" | grep -q '|burn:'; then
    echo "Burn's tests (calls 4 and 5) run in a device call of their own"
    exit 2
  fi
  work=$(mktemp -d)
  tar xzf .device/suite.tgz -C .device
  bash tools/device/lib/cache.sh restore
  for ((gpu = 0; gpu < gpus; gpu++)); do
    local mine=()
    for ((i = gpu + 1; i <= $#; i += gpus)); do mine+=("${!i}"); done
    [ ${#mine[@]} -gt 0 ] || continue
    (
      mkdir -p "$work/$gpu"
      export CUDA_VISIBLE_DEVICES=$gpu SHARED=1 OUT=$work/$gpu
      run_calls "${mine[@]}" >"$work/$gpu/calls.log" 2>&1
      cp "$work/$gpu"/gate-*.txt "$out/"
    ) &
  done
  wait
  cat "$work"/*/calls.log
  cat "$work"/*/suite.log >>"$out/suite.log" 2>/dev/null
  [ -z "${OUT:-}" ] || bash tools/device/lib/cache.sh save >/dev/null
  rm -rf "$work"
}

run_calls() {
  local start=${GATE_START:-$SECONDS} n line jobs what words rounds left limit
  for n in "$@"; do
    if [ -z "${DEADLINE:-}" ]; then
      run "$n"
      continue
    fi
    line=$(call_line "$n") || exit 2
    IFS='|' read -r _ jobs what <<<"$line"
    words=$(wc -w <<<"$what")
    [[ "$what" == burn:* ]] && words=1 # one round of Burn's binaries
    rounds=$(((words + jobs - 1) / jobs))
    left=$((DEADLINE - (SECONDS - start) - 40))
    limit=$((left / rounds))
    [ "$limit" -le "${CHUNK_TIMEOUT:-480}" ] || limit=${CHUNK_TIMEOUT:-480}
    if [ "$limit" -lt 30 ]; then
      echo "gate $n: no time left"
      for chunk in $what; do echo "$chunk: FAIL rc=124 not run: no time left in the call"; done \
        >"${OUT:-$ROOT/.device}/gate-$n.txt"
      continue
    fi
    echo "gate $n: chunks' limit $limit s ($((SECONDS - start)) s after start)"
    CHUNK_TIMEOUT=$limit run "$n"
  done
}

case "${1:-}" in
  build) build ;;
  calls) calls | tr '|' '\t' ;;
  run) shift; run_all "${@:?call number}" ;;
  table) shift; table "$@" ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
esac
