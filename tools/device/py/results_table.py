#!/usr/bin/env python3
"""Markdown table of one device run: bench_linear's JSON beside torch_ref.py's JSON lines.

Usage: results_table.py bench.json torch.txt [bench.json torch.txt ...]
Rows: shape and dtype; columns: Hypatia / Hypatia's engine without Burn's stream / Burn `Cuda` /
`CubeBackend` / cuBLASLt RELU_BIAS in ms, Hypatia's TFLOP/s, and the ratios "Hypatia vs Burn"
(Burn ms / Hypatia ms) and "Hypatia / cuBLASLt" (throughput ratio = cuBLASLt ms / Hypatia ms).
"""
import json
import sys

print("| M×K×N | dtype | path | Hypatia ms | engine ms | Burn `Cuda` ms | `CubeBackend` ms "
      "| cuBLASLt RELU_BIAS ms | Hypatia TFLOP/s | Hypatia vs Burn | Hypatia / cuBLASLt |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
args = sys.argv[1:]
for bench_path, torch_path in zip(args[::2], args[1::2]):
    torch = {}
    for line in open(torch_path):
        if line.startswith("json "):
            r = json.loads(line[5:])
            torch[(r["dtype"], r["m"], r["k"], r["n"])] = r["ms"]
    for r in json.load(open(bench_path)):
        rb = torch.get((r["dtype"], r["m"], r["k"], r["n"]), {}).get("relu_bias")
        engine = f"{r['engine_ms']:.4f}" if r.get("engine_ms") else "-"
        hy = r["hypatia_ms"]
        lt = f"{rb:.4f}" if rb else "-"
        vs_lt = f"{rb / hy:.2f}x" if rb else "-"
        print(f"| {r['m']}×{r['k']}×{r['n']} | {r['dtype']} | {r['path']} | {r['hypatia_ms']:.4f} | "
              f"{engine} | {r['burn_ms']:.4f} | {r['cube_ms']:.4f} | "
              f"{lt} | {r['hypatia_tflops']:.1f} | {r['burn_ms'] / hy:.2f}x | {vs_lt} |")
