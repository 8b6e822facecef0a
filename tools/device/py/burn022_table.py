#!/usr/bin/env python3
"""Markdown tables of one `tools/device/run.sh burn022` call: Burn 0.22/0.23's own `Cuda` beside
Hypatia and Burn on 0.21 (bench_linear, bench_train) and PyTorch (torch_ref.py).

Usage: burn022_table.py OUT
OUT holds burn-VERSION-DTYPE.txt (tools/burn022's program: `linear DTYPE MxKxN MS HOST_MS`,
`train DTYPE B:I:H:O MS HOST_MS`), linear-DTYPE.json and train-DTYPE.json (the 0.21 benchmarks)
and torch-linear-DTYPE.txt, torch-train-DTYPE.txt (json lines). ms; "x" columns are the other's
ms over Hypatia's (above 1: Hypatia faster).
"""
import glob
import json
import os
import re
import sys

out = sys.argv[1]
newer = {}  # (kind, dtype, shape) -> {version: ms}
for path in sorted(glob.glob(os.path.join(out, "burn-*.txt"))):
    version = re.match(r"burn-(.+)-(bf16|f16|f32)\.txt", os.path.basename(path))[1]
    for line in open(path):
        f = line.split()
        if len(f) == 5 and f[0] in ("linear", "train"):
            newer.setdefault((f[0], f[1], f[2]), {})[version] = float(f[3])
versions = sorted({v for row in newer.values() for v in row})


def torch_rows(name):
    rows = {}
    for path in glob.glob(os.path.join(out, f"torch-{name}-*.txt")):
        for line in open(path):
            if line.startswith("json "):
                rows[len(rows)] = json.loads(line[5:])
    return rows.values()


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return []


def cell(ms):
    return f"{ms:.4f}" if ms else "-"


def ratio(other, hypatia):
    return f"{other / hypatia:.2f}x" if other and hypatia else "-"


linear_torch = {(r["dtype"], f"{r['m']}x{r['k']}x{r['n']}"): r["ms"].get("relu_bias")
                for r in torch_rows("linear")}
train_torch = {(r["dtype"], r["mlp"]): r["ms"] for r in torch_rows("train")}
heads = " | ".join(f"Burn {v}" for v in versions)
print(f"| M×K×N | dtype | Hypatia (0.21) | Burn 0.21 | {heads} | cuBLAS(Lt) "
      f"| {' | '.join(f'{v} / Hypatia' for v in versions)} | cuBLAS(Lt) / Hypatia |")
print("|---|---|---|---|" + "---|" * (2 * len(versions) + 2))
for dtype in ("bf16", "f16", "f32"):
    for r in load(os.path.join(out, f"linear-{dtype}.json")):
        shape = f"{r['m']}x{r['k']}x{r['n']}"
        ours = newer.get(("linear", dtype, shape), {})
        lt = linear_torch.get((dtype, shape))
        hy = r["hypatia_ms"]
        print(f"| {shape.replace('x', '×')} | {dtype} | {hy:.4f} | {r['burn_ms']:.4f} | "
              + " | ".join(cell(ours.get(v)) for v in versions) + f" | {cell(lt)} | "
              + " | ".join(ratio(ours.get(v), hy) for v in versions) + f" | {ratio(lt, hy)} |")
print()
print(f"| MLP step | dtype | Hypatia (0.21) | Burn 0.21 | {heads} | PyTorch eager "
      f"| {' | '.join(f'{v} / Hypatia' for v in versions)} | PyTorch / Hypatia |")
print("|---|---|---|---|" + "---|" * (2 * len(versions) + 2))
for dtype in ("bf16", "f16", "f32"):
    for r in load(os.path.join(out, f"train-{dtype}.json")):
        ours = newer.get(("train", dtype, r["mlp"]), {})
        pt = train_torch.get((dtype, r["mlp"]))
        hy = r["hypatia_ms"]
        print(f"| {r['mlp']} | {dtype} | {hy:.4f} | {r['burn_ms']:.4f} | "
              + " | ".join(cell(ours.get(v)) for v in versions) + f" | {cell(pt)} | "
              + " | ".join(ratio(ours.get(v), hy) for v in versions) + f" | {ratio(pt, hy)} |")
