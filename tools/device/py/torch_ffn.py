#!/usr/bin/env python3
"""PyTorch's side of bench_train's feed-forward blocks (issue 69): one training step (forward,
MSE loss, backward) of
  ffn-gelu  Linear -> GELU -> Linear, with biases (BERT's block), tokens:d_model:d_ff
  swiglu    W2 . (silu(x . W1) * (x . W3)), Linears without bias (Llama's block)
in PyTorch eager and under torch.compile (Inductor, default mode), CUDA-event medians
(triton's do_bench), as torch_ref.py times the MLP step. Also the SwiGLU forward alone, eager:
the two cuBLASLt GEMMs and the elementwise product Hypatia's fused forward is held against.

  python3 torch_ffn.py --model swiglu [--dtypes bf16,f32] [--shapes 8192:4096:11008] [--tf32]

Prints readable lines and 'json ' lines.
"""
import argparse, json, time
import torch
import torch.nn.functional as F
from triton.testing import do_bench

from torch_ref import mse_step

DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
SHAPES = {"ffn-gelu": "16384:768:3072", "swiglu": "8192:4096:11008"}


class FfnGelu(torch.nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.up, self.down = torch.nn.Linear(d, f), torch.nn.Linear(f, d)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class SwiGlu(torch.nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.gate = torch.nn.Linear(d, f, bias=False)
        self.up = torch.nn.Linear(d, f, bias=False)
        self.down = torch.nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(SHAPES), required=True)
    p.add_argument("--dtypes", default="bf16,f32")
    p.add_argument("--shapes", default=None)
    p.add_argument("--tf32", action="store_true", help="allow TF32 for f32 matmuls")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    for name in a.dtypes.split(","):
        dt = DT[name]
        for spec in (a.shapes or SHAPES[a.model]).split(","):
            tokens, d, f = (int(v) for v in spec.split(":"))
            net = (FfnGelu if a.model == "ffn-gelu" else SwiGlu)(d, f).cuda().to(dt)
            x = torch.randn(tokens, d, device="cuda", dtype=dt)
            target = torch.randn(tokens, d, device="cuda", dtype=dt)
            matmuls = 2 if a.model == "ffn-gelu" else 3
            flops = 6.0 * tokens * d * f * matmuls
            tag = f"{name}{' tf32' if a.tf32 else ''}"
            rows = {"eager": net}
            t0 = time.time()
            rows["torch_compile"] = torch.compile(net)
            for impl, model in rows.items():
                step = mse_step(model, x, target)
                for _ in range(3):
                    step()
                torch.cuda.synchronize()
                ms = do_bench(step, warmup=25, rep=200, return_mode="median")
                extra = f" (compile+warm {time.time() - t0:.1f} s)" if impl == "torch_compile" else ""
                print(f"torch {tag:>9} {a.model} {spec} {impl:>13} step {ms:.4f} ms "
                      f"({flops / (ms * 1e-3) / 1e12:.0f} TF/s){extra}")
                print("json " + json.dumps({"bench": "ffn_train_step", "model": a.model, "impl": impl,
                                            "dtype": name, "tf32": a.tf32, "shape": spec, "ms": ms}))
            if a.model == "swiglu":
                with torch.inference_mode():
                    ms = do_bench(lambda: F.silu(x @ net.gate.weight.t()) * (x @ net.up.weight.t()),
                                  warmup=25, rep=200, return_mode="median")
                print(f"torch {tag:>9} swiglu {spec} forward silu(x.W1)*(x.W3) eager {ms:.4f} ms")
                print("json " + json.dumps({"bench": "swiglu_forward", "impl": "eager", "dtype": name,
                                            "tf32": a.tf32, "shape": spec, "ms": ms}))


if __name__ == "__main__":
    main()
