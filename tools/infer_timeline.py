#!/usr/bin/env python3
"""Where one small-batch forward's time goes around its kernel, from tools/kernel_timeline.cu's CSV
of a `bench_infer --backends hypatia` run (one kernel per forward: the MLP chain).

Per launch of a kernel whose name contains --kernel: the previous synchronizing call's return
(the last forward's empty sync: about when this forward's recording began), the launch call,
the kernel on the GPU, the fence's record and the sync that waited for it. Prints the medians
(µs) of each stretch and, for the median forward, the driver calls from its launch to its sync.

    python3 tools/infer_timeline.py timeline.csv [--kernel hypatia_grid_chain]
"""

import argparse
import bisect
import csv
import statistics


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv")
    parser.add_argument("--kernel", default="hypatia_grid_chain")
    parser.add_argument("--skip", type=int, default=50, help="first launches left out (warm-up)")
    args = parser.parse_args()
    kernels, api = [], []
    with open(args.csv, newline="") as f:
        for row in csv.reader(f):
            if len(row) < 5:
                continue
            kind, start, end, corr, name = row[0], int(row[1]), int(row[2]), int(row[3]), ",".join(row[4:])
            if kind == "A":
                api.append((start, end, corr, name))
            elif kind == "K" and args.kernel in name:
                kernels.append((start, end, corr, name))
    api.sort()
    kernels.sort()
    launches = {corr: (start, end) for start, end, corr, name in api if "Launch" in name}
    syncs = [(end, start) for start, end, corr, name in api if "Synchronize" in name]
    sync_ends = [s[0] for s in syncs]
    records = [start for start, end, corr, name in api if name.startswith("cuEventRecord")]
    rows = []
    for start, end, corr, _ in kernels[args.skip:]:
        if corr not in launches:
            continue
        l_start, l_end = launches[corr]
        i = bisect.bisect_right(sync_ends, l_start) - 1
        j = bisect.bisect_left(sync_ends, end)
        r = bisect.bisect_left(records, l_end)
        if i < 0 or j >= len(syncs) or r >= len(records):
            continue
        prev_end, sync = sync_ends[i], syncs[j]
        rows.append({
            "before launch": l_start - prev_end,
            "launch call": l_end - l_start,
            "launch to kernel": start - l_end,
            "kernel": end - start,
            "fence record - kernel end": records[r] - end,
            "kernel end to sync return": sync[0] - end,
            "sync call": sync[0] - sync[1],
            "total": sync[0] - prev_end,
            "_at": (prev_end, sync[0]),
        })
    if not rows:
        print("no launches of", args.kernel)
        return
    print(f"{len(rows)} forwards; medians, µs:")
    for key in rows[0]:
        if key.startswith("_"):
            continue
        values = [r[key] / 1e3 for r in rows]
        print(f"  {key:<28} {statistics.median(values):8.2f}  (p10 {sorted(values)[len(values) // 10]:.2f},"
              f" p90 {sorted(values)[len(values) * 9 // 10]:.2f})")
    median = sorted(rows, key=lambda r: r["total"])[len(rows) // 2]
    begin, finish = median["_at"]
    print("the median forward's driver calls (µs from the previous sync's return, duration):")
    for start, end, corr, name in api:
        if begin <= start <= finish:
            print(f"  {(start - begin) / 1e3:8.2f} {(end - start) / 1e3:7.2f}  {name}")


if __name__ == "__main__":
    main()
