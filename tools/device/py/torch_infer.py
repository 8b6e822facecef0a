#!/usr/bin/env python3
"""PyTorch eager latency of one small-MLP forward, beside bench_infer (issue 5's target).

Model: Linear(784, 512) -> ReLU -> Linear(512, 512) -> ReLU -> Linear(512, 10) (widths from
--widths), eager, under torch.inference_mode(). Protocol as bench_infer's: each forward is timed
alone on the host clock, from the call to the end of torch.cuda.synchronize(); median and p90
of --runs forwards after --warmup untimed ones.

Usage: python3 torch_infer.py [--dtypes f32,bf16] [--batches 1,8,32] [--widths 784:512:512:10]
Prints one readable line and one "json " line per (dtype, batch).
"""
import argparse
import json
import time

import torch

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtypes", default="f32,bf16")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--widths", default="784:512:512:10")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    widths = [int(w) for w in args.widths.split(":")]
    for name in args.dtypes.split(","):
        dt = DTYPES[name]
        layers = []
        for i, (a, b) in enumerate(zip(widths, widths[1:])):
            layers.append(torch.nn.Linear(a, b))
            if i + 2 < len(widths):
                layers.append(torch.nn.ReLU())
        model = torch.nn.Sequential(*layers).to("cuda", dt)
        for batch in (int(b) for b in args.batches.split(",")):
            x = torch.randn(batch, widths[0], device="cuda", dtype=dt)
            times = []
            with torch.inference_mode():
                for i in range(args.warmup + args.runs):
                    start = time.perf_counter()
                    y = model(x)
                    torch.cuda.synchronize()
                    if i >= args.warmup:
                        times.append((time.perf_counter() - start) * 1e3)
                    del y
            times.sort()
            med, p90 = times[len(times) // 2], times[len(times) * 9 // 10]
            print(f"torch eager {args.widths} batch {batch:>3} {name:>5}: {med:.4f} ms (p90 {p90:.4f})")
            print("json " + json.dumps({"widths": args.widths, "batch": batch, "dtype": name,
                                        "eager_ms": med, "eager_p90_ms": p90}))


if __name__ == "__main__":
    main()
