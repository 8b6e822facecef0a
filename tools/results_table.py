#!/usr/bin/env python3
"""Markdown table of one device run: bench_linear's JSON beside torch_ref.py's JSON lines.

Usage: results_table.py bench.json torch.txt
Rows: shape and dtype; columns: Hypatia / Burn `Cuda` / `CubeBackend` / cuBLASLt RELU_BIAS in ms,
TFLOP/s, and the ratios "Hypatia vs Burn" (Burn ms / Hypatia ms) and "Hypatia / cuBLASLt"
(throughput ratio = cuBLASLt ms / Hypatia ms).
"""
import json
import sys

bench = json.load(open(sys.argv[1]))
torch = {}
for line in open(sys.argv[2]):
    if line.startswith("json "):
        r = json.loads(line[5:])
        torch[(r["dtype"], r["m"], r["k"], r["n"])] = r["ms"]

print("| M×K×N | dtype | path | Hypatia ms | Burn `Cuda` ms | `CubeBackend` ms | cuBLASLt RELU_BIAS ms "
      "| Hypatia TFLOP/s | Hypatia vs Burn | Hypatia / cuBLASLt |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in bench:
    t = torch.get((r["dtype"], r["m"], r["k"], r["n"]), {})
    rb = t.get("relu_bias")
    print(f"| {r['m']}×{r['k']}×{r['n']} | {r['dtype']} | {r['path']} | {r['hypatia_ms']:.4f} | "
          f"{r['burn_ms']:.4f} | {r['cube_ms']:.4f} | {rb:.4f} | {r['hypatia_tflops']:.1f} | "
          f"{r['burn_ms'] / r['hypatia_ms']:.2f}x | {rb / r['hypatia_ms']:.2f}x |"
          if rb else f"| {r['m']}×{r['k']}×{r['n']} | {r['dtype']} | {r['path']} | {r['hypatia_ms']:.4f} | "
          f"{r['burn_ms']:.4f} | {r['cube_ms']:.4f} | - | {r['hypatia_tflops']:.1f} | "
          f"{r['burn_ms'] / r['hypatia_ms']:.2f}x | - |")
