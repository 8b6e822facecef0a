#!/usr/bin/env python3
"""Compiles the hand-written CUDA kernels as CubeCL does, without a GPU: every configuration
of the Hopper kernel the engine offers and a spread of MLP-chain configurations, each written
by `examples/cuda_source.rs`, through NVRTC for sm_90a, then assembled by ptxas.

Setup (here, once): the NVRTC, runtime-header and ptxas wheels from PyPI, unpacked:
    pip download --no-deps -d /tmp/nv nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12
    (cd /tmp/nv && for w in *.whl; do unzip -qo "$w" -d x; done)
    cargo build --release --features cuda --example cuda_source
Usage: python3 tools/nvrtc_check.py [--cuda /tmp/nv/x/nvidia] [--gen target/release/examples/cuda_source]
                                   [--kernel-file FILE.cu] [--save DIR]
Prints one line per failing configuration and a count; exits 1 on any failure.
--kernel-file compiles an edited kernel (the `.cu` file of the configurations' kind) instead of
the one built into the generator; --save writes each configuration's PTX without its line
information, so that `diff -r` of two saves shows whether an edit changed any generated code.
"""
import argparse
import ctypes
import itertools
import os
import re
import subprocess
import sys
import tempfile


def nvrtc_ptx(lib, include, source):
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"k.cu", 0, None, None) == 0
    # CubeCL's options (cubecl-cuda's compute/context.rs).
    opts = [b"--gpu-architecture=sm_90a", f"--include-path={include}".encode(), b"-lineinfo"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    if rc != 0:
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        return None, log.value.decode()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(prog, ptx)
    return ptx.value.decode(), ""


def configurations(gen):
    # The engine's tilings, by name, from the crate itself.
    names = subprocess.run([gen, "tilings"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    acts = ["none", "relu", "gelu", "gelu-tanh", "silu", "leaky-relu", "clamp"]
    layouts = [(0, 0), (1, 0), (0, 1), (1, 1)]
    for i, name in enumerate(names):
        for dtype, act, (a, b) in itertools.product(["bf16", "f16", "f32"], acts, layouts):
            # TF32 wgmma reads K-major operands only (the host copies the others K-major).
            if dtype == "f32" and (a, b) != (0, 1):
                continue
            # Every activation and layout on the first tiling in bf16; elsewhere ReLU, with
            # the forward's and the backward's layouts.
            if (i or dtype != "bf16") and (act != "relu" or (a, b) not in [(0, 0), (0, 1)]):
                continue
            args = ["wgmma", "--dtype", dtype, "--tiling", name, "--act", act]
            yield args + ["--a-m-major"] * a + ["--b-k-major"] * b
    for dtype, (rows, mma), layers in itertools.product(
            ["bf16", "f16", "f32"], [(1, 0), (4, 0), (8, 0), (16, 1), (32, 1)], [1, 2, 3, 4]):
        if mma and dtype == "f32":
            continue
        # Every layer count on bf16; three layers elsewhere.
        if layers != 3 and dtype != "bf16":
            continue
        wide = "4" if dtype == "f32" else "8"
        per_layer = lambda hidden, last: ",".join([hidden] * (layers - 1) + [last])
        yield (["chain", "--dtype", dtype, "--rows", str(rows),
                "--vector", per_layer(wide, "2"), "--acts", per_layer("relu", "none"),
                "--bias", per_layer("1", "1")] + ["--mma"] * mma)


def kind_of(kernel_file):
    """`chain` for a copy of the grid-chain kernel (it defines `hypatia_grid_chain`), `wgmma`
    for one of the Hopper kernel."""
    with open(kernel_file) as f:
        return "chain" if "hypatia_grid_chain(" in f.read() else "wgmma"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cuda", default="/tmp/nv/x/nvidia")
    parser.add_argument("--gen", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", "target"), "release/examples/cuda_source"))
    parser.add_argument("--kernel-file", help="an edited .cu of the kernel being compiled")
    parser.add_argument("--save", help="a folder for each configuration's PTX, sans line info")
    args = parser.parse_args()
    if args.save:
        os.makedirs(args.save, exist_ok=True)
    edited_kind = kind_of(args.kernel_file) if args.kernel_file else None
    lib = ctypes.CDLL(os.path.join(args.cuda, "cuda_nvrtc/lib/libnvrtc.so.12"))
    include = os.path.join(args.cuda, "cuda_runtime/include")
    ptxas = os.path.join(args.cuda, "cuda_nvcc/bin/ptxas")
    failed = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for config in configurations(args.gen):
            total += 1
            # The edited file replaces only the kernel of its own kind (`chain` or `wgmma`).
            edit = (["--kernel-file", args.kernel_file]
                    if args.kernel_file and edited_kind == config[0] else [])
            source = subprocess.run([args.gen] + edit + config, capture_output=True, text=True,
                                    check=True).stdout
            ptx, log = nvrtc_ptx(lib, include, source)
            if ptx is not None and args.save:
                name = re.sub(r"[^A-Za-z0-9]+", "_", " ".join(config)) + ".ptx"
                with open(os.path.join(args.save, name), "w") as f:
                    f.write("".join(line for line in ptx.splitlines(keepends=True)
                                    if not line.lstrip().startswith((".loc", ".file"))))
            if ptx is not None:
                path = os.path.join(tmp, "k.ptx")
                with open(path, "w") as f:
                    f.write(ptx)
                run = subprocess.run([ptxas, "-arch=sm_90a", path, "-o", path + ".cubin"],
                                     capture_output=True, text=True)
                log = "" if run.returncode == 0 else "ptxas: " + run.stderr
            if log:
                failed += 1
                print(" ".join(config), "\n   ", log.strip()[:400])
    print(f"{total - failed} of {total} configurations compile for sm_90a")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
