#!/usr/bin/env python3
"""Reads a BURN_FUSION_LOG=full trace of bench_train on stdin and prints, per backend section
(split at bench_train's stderr markers), how many executions ran and how many ops ran un-fused."""
import re, sys
sections, name = {}, None
for line in sys.stdin:
    m = re.match(r"bench_train: (.*)", line)
    if m:
        name = m.group(1).strip()
        sections[name] = {"traces": 0, "unfused_ops": 0, "unfused_blocks": 0, "fused_blocks": 0, "max_unfused": 0}
        continue
    if name is None:
        continue
    s = sections[name]
    if line.startswith("fusion trace"):
        s["traces"] += 1
    m = re.search(r"▸ un-fused \((\d+) op", line)
    if m:
        n = int(m.group(1))
        s["unfused_ops"] += n
        s["unfused_blocks"] += 1
        s["max_unfused"] = max(s["max_unfused"], n)
    if "▸ fused" in line:
        s["fused_blocks"] += 1
for name, s in sections.items():
    print(f"{name:<40} " + " ".join(f"{k}={v}" for k, v in s.items()))
