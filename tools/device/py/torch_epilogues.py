#!/usr/bin/env python3
"""PyTorch / cuBLASLt timings of Linear + GELU, beside bench_linear --activation gelu.

  gelu_bias   torch._addmm_activation(b, x, w.t(), use_gelu=True): cuBLASLt's GELU_BIAS
              epilogue (the tanh approximation), the anchor of issue 5's GELU target
  eager       F.gelu(F.linear(x, w, b))            (exact erf GELU, a separate kernel)
  eager_tanh  F.gelu(F.linear(x, w, b), approximate="tanh")

Usage: python3 torch_epilogues.py [--dtypes bf16] [--shapes 8192x4096x4096,...]
Prints one readable line and one "json " line per shape, like torch_ref.py.
"""
import argparse
import json

import torch
import torch.nn.functional as F
from triton.testing import do_bench

# The same operands as torch_ref.py's linear (packed beside it).
from torch_ref import linear_operands


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtypes", default="bf16")
    parser.add_argument("--shapes", default="2048x2048x2048,8192x4096x4096")
    args = parser.parse_args()
    for name, m, k, n, x, w, b in linear_operands(args):
        bench = lambda fn: do_bench(fn, warmup=25, rep=200, return_mode="median")
        t = {
            "gelu_bias": bench(lambda: torch._addmm_activation(b, x, w.t(), use_gelu=True)),
            "eager": bench(lambda: F.gelu(F.linear(x, w, b))),
            "eager_tanh": bench(lambda: F.gelu(F.linear(x, w, b), approximate="tanh")),
        }
        tflops = {key: 2 * m * k * n / (ms * 1e-3) / 1e12 for key, ms in t.items()}
        print(f"torch {name:>4} {m:>6}x{k:>6}x{n:>6}  "
              + "  ".join(f"{key}={ms:.4f}ms ({tflops[key]:.0f} TF/s)" for key, ms in t.items()))
        print("json " + json.dumps({"bench": "linear_gelu", "impl": "torch", "dtype": name,
                                    "m": m, "k": k, "n": n, "ms": t}))


if __name__ == "__main__":
    main()
