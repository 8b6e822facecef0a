#!/usr/bin/env python3
"""Where a benchmark's GPU time goes between syncs, from tools/device/cuda/kernel_timeline.cu's CSV.

The stretch between two synchronizing driver calls that waited for the GPU (at least --wait-us:
a benchmark's sync; CubeCL also waits on fences of its own that are long done) is one interval
(a timed batch of bench_train, one single step, ...). Per interval: its wall time (previous
sync's return to this sync's return), the GPU span (first kernel's start to the last one's end), the time the GPU was
busy, and its idle gaps, split into those where the next kernel had not been launched yet (the
GPU waited on the host) and the rest (launch latency between dependent kernels). Intervals are
grouped by backend (Hypatia's if any kernel is Hypatia's) and kernel count; each group with at
least --min repeats prints its medians, and the largest Hypatia group its biggest gaps and its
time per kernel name.

With --sequence N, also each GPU event of the Hypatia intervals of N kernels in launch order,
with its median duration over those intervals (to tell apart launches of one kernel name,
such as a training step's eight `hypatia_wgmma_linear` matmuls).

    python3 tools/device/py/timeline.py timeline.csv [--min 3] [--wait-us 50] [--sequence 21]
"""

import argparse
import collections
import csv
import statistics

SYNCS = ("Synchronize", "cuMemcpyDtoH_v2", "cuMemcpyDtoH")


def load(path):
    gpu, api = [], []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if len(row) < 5:
                continue
            kind, start, end, corr = row[0], int(row[1]), int(row[2]), int(row[3])
            name = ",".join(row[4:])
            (api if kind == "A" else gpu).append((start, end, corr, name, kind))
    gpu.sort()
    api.sort()
    return gpu, api


def intervals(gpu, api, wait_ns):
    launch_end = {corr: end for start, end, corr, name, _ in api}
    syncs = [a for a in api if any(s in a[3] for s in SYNCS) and a[1] - a[0] >= wait_ns]
    out, g, prev = [], 0, None
    for sync in syncs:
        if prev is None:
            prev = sync
            continue
        begin, finish = prev[1], sync[1]
        events = []
        while g < len(gpu) and gpu[g][0] <= finish:
            if gpu[g][0] >= begin:
                events.append(gpu[g])
            g += 1
        prev = sync
        if not events:
            continue
        busy, gaps, late, last_end = 0, [], 0, events[0][0]
        for i, (start, end, corr, name, _) in enumerate(events):
            if start > last_end:
                gap = start - last_end
                # The GPU waited on the host if this launch returned just before (or after)
                # the GPU ran out of work.
                waited = launch_end.get(corr, 0) >= last_end - 2000
                gaps.append((gap, waited, events[i - 1][3], name))
                late += gap if waited else 0
            busy += max(0, end - max(start, last_end))
            last_end = max(last_end, end)
        kernels = [e for e in events if e[4] == "K"]
        out.append({
            "backend": "hypatia" if any("hypatia" in e[3] for e in kernels) else "burn",
            "kernels": len(kernels),
            "events": events,
            "wall": finish - begin,
            "lead": events[0][0] - begin,
            "span": last_end - events[0][0],
            "busy": busy,
            "gaps": gaps,
            "idle": sum(g[0] for g in gaps),
            "late": late,
            "tail": finish - last_end,
        })
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--min", type=int, default=3)
    p.add_argument("--wait-us", type=float, default=50.0)
    p.add_argument("--sequence", type=int, default=0)
    args = p.parse_args()
    gpu, api = load(args.csv)
    ivs = intervals(gpu, api, args.wait_us * 1e3)
    groups = collections.defaultdict(list)
    for iv in ivs:
        groups[(iv["backend"], iv["kernels"])].append(iv)
    us = lambda ns: ns / 1e3
    print(f"{len(gpu)} GPU events, {len(api)} driver calls, {len(ivs)} intervals")
    print("backend  kernels  n   wall_us   lead_us   span_us   busy_us   idle_us  "
          "waited_host_us  gaps  tail_us")
    for (backend, kernels), items in sorted(groups.items()):
        if len(items) < args.min or kernels < 2:
            continue
        med = lambda key: statistics.median(iv[key] for iv in items)
        ngaps = statistics.median(len(iv["gaps"]) for iv in items)
        print(f"{backend:<8} {kernels:>7} {len(items):>3} {us(med('wall')):>9.1f} "
              f"{us(med('lead')):>9.1f} {us(med('span')):>9.1f} {us(med('busy')):>9.1f} "
              f"{us(med('idle')):>9.1f} {us(med('late')):>15.1f} {ngaps:>5.0f} "
              f"{us(med('tail')):>8.1f}")
    for backend in ("hypatia", "burn"):
        cands = [(len(v), k) for k, v in groups.items() if k[0] == backend and len(v) >= args.min]
        if not cands:
            continue
        _, key = max(cands, key=lambda c: (c[1][1], c[0]))
        items = groups[key]
        iv = sorted(items, key=lambda iv: iv["wall"])[len(items) // 2]
        print(f"\n{backend}, {key[1]} kernels, the median batch: its 12 longest gaps (us)")
        for gap, waited, before, after in sorted(iv["gaps"], reverse=True)[:12]:
            print(f"  {us(gap):8.1f} {'host' if waited else 'dep '}  {before[:40]} -> {after[:40]}")
        per_name = collections.defaultdict(lambda: [0, 0])
        for start, end, _, name, _ in iv["events"]:
            short = name.split("(")[0][:60]
            per_name[short][0] += end - start
            per_name[short][1] += 1
        print(f"{backend}: GPU time per kernel name in that batch (us, launches)")
        for name, (t, n) in sorted(per_name.items(), key=lambda kv: -kv[1][0])[:15]:
            print(f"  {us(t):9.1f} {n:4d}  {name}")
    seq = groups.get(("hypatia", args.sequence), [])
    if seq:
        print(f"\nhypatia, {args.sequence} kernels: each event in order, median over {len(seq)} (us)")
        for i, event in enumerate(seq[0]["events"]):
            times = [iv["events"][i][1] - iv["events"][i][0] for iv in seq if len(iv["events"]) > i]
            print(f"  {i:3d} {us(statistics.median(times)):9.1f}  {event[3].split('(')[0][:60]}")


if __name__ == "__main__":
    main()
