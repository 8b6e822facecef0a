#!/bin/bash
# Builds the CUDA example and test binaries here and packs them into .device/ for the device tool.
set -eu
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/hypatia-target}
cargo build --release --features cuda --example bench_linear --example matmul_strategies --example bench_train
cargo test --release --features cuda --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        shutil.copy(m["executable"], ".device/" + m["target"]["name"])
'
cp "$CARGO_TARGET_DIR"/release/examples/{bench_linear,matmul_strategies,bench_train} .device/
cp ../shared/bench/torch_ref.py tools/device_*.sh tools/cubecl.toml .device/
cd .device
strip bench_linear matmul_strategies bench_train hopper lib half_f16 half_bf16
tar czf bins.tgz bench_linear matmul_strategies bench_train && tar czf tests.tgz hopper lib half_f16 half_bf16
rm -f bench_linear matmul_strategies bench_train hopper lib half_f16 half_bf16
ls -la
