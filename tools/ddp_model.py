#!/usr/bin/env python3
"""A model of one burn-train 0.21 DDP step on N GPUs, to see what bounds its scaling.

What it models (decision record 0013), from the sources:
- each device's training thread records a step's forward, then its backward, then waits until
  every device has registered its gradients (burn-backend's gradient-sync server launches an
  all-reduce only then), records the optimizer step, and hands its `ClassificationOutput` to
  burn-train's metric thread: one mutex and a channel of one slot that all devices share
  (`ddp/epoch.rs`, `metric/processor/async_wrapper.rs`);
- each GPU runs what its thread launched, in order; an all-reduce runs when every GPU has
  reached it;
- the metric thread takes one item at a time, reads it (cubecl-cuda copies it behind every
  kernel launched on that device so far and waits: `read_async`), then spends C ms of CPU on
  it (`ItemLazy::sync`, the accuracy and loss metrics).

`--own-step` makes a read wait only for its own step's kernels: what the GPUs would run if that
read did not wait for the kernels launched after it.

    python3 tools/ddp_model.py                   # the measured 16-class, hidden 4096,4096 step
    python3 tools/ddp_model.py --gpu-ms 25       # a step of 25 ms on one GPU
"""

import argparse

DT = 0.005  # ms a tick


class Gpu:
    """A device's GPU stream: launched kernels, run in order."""

    def __init__(self):
        self.queue = []  # [name, ms left, step]
        self.busy = 0.0

    def launch(self, name, ms, step):
        self.queue.append([name, ms, step])

    def last(self):
        return self.queue[-1] if self.queue else None

    def done(self, kernel):
        return not any(k is kernel for k in self.queue)


def simulate(devices, gpu_ms, host_ms, metric_ms, own_step, steps):
    """Returns (ms a step, each GPU's busy fraction)."""
    # The one-GPU step split as measured: forward a third, backward the rest with its all-reduce.
    forward, all_reduce, optimizer = gpu_ms / 3, 0.3, 0.2
    backward = gpu_ms - forward - all_reduce - optimizer
    record = {"forward": host_ms * 0.3, "backward": host_ms * 0.35, "optimizer": host_ms * 0.35}
    gpus = [Gpu() for _ in range(devices)]
    threads = [{"phase": "forward", "left": record["forward"], "step": 0} for _ in range(devices)]
    registered = [-1] * devices
    slot, mutex = [], None
    metric = None  # [device, phase, kernel waited for or ms left]
    handed = [0] * devices
    t = 0.0
    while min(handed) < steps:
        for d, th in enumerate(threads):
            phase, step = th["phase"], th["step"]
            if phase in ("forward", "backward", "optimizer"):
                th["left"] -= DT
                if th["left"] > 0:
                    continue
                if phase == "forward":
                    gpus[d].launch("forward", forward, step)
                    th.update(phase="backward", left=record["backward"])
                elif phase == "backward":
                    gpus[d].launch("backward", backward, step)
                    registered[d] = step
                    if min(registered) == step:  # the last to register: the server launches
                        for gpu in gpus:  # every device's all-reduce at once
                            gpu.launch("all-reduce", all_reduce, step)
                    th["phase"] = "gradients"
                else:
                    gpus[d].launch("optimizer", optimizer, step)
                    th["phase"] = "hand over"
            elif phase == "gradients" and min(registered) >= step:
                th.update(phase="optimizer", left=record["optimizer"])
            elif phase == "hand over" and mutex in (None, d):
                mutex = d
                if not slot:
                    slot.append((d, step))
                    mutex = None
                    handed[d] += 1
                    th.update(phase="forward", left=record["forward"], step=step + 1)
        if metric is None and slot:
            d, step = slot.pop(0)
            if own_step:
                own = (k for k in gpus[d].queue if k[0] == "optimizer" and k[2] == step)
                waited = next(own, None)
            else:
                waited = gpus[d].last()
            metric = [d, "read", waited]
        if metric is not None:
            d, phase, state = metric
            if phase == "read" and (state is None or gpus[d].done(state)):
                metric[1:] = ["metrics", metric_ms]
            elif phase == "metrics":
                metric[2] -= DT
                if metric[2] <= 0:
                    metric = None
        heads = [(g.queue[0][0], g.queue[0][2]) if g.queue else None for g in gpus]
        for gpu in gpus:
            if not gpu.queue:
                continue
            kernel = gpu.queue[0]
            if kernel[0] == "all-reduce" and any(h != ("all-reduce", kernel[2]) for h in heads):
                continue  # NCCL waits for every GPU
            kernel[1] -= DT
            gpu.busy += DT
            if kernel[1] <= 0:
                gpu.queue.pop(0)
        t += DT
    return t / steps, [g.busy / t for g in gpus]


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--gpu-ms", type=float, default=7.4, help="a step's GPU time on one GPU")
    p.add_argument("--host-ms", type=float, default=0.8, help="a step's recording time")
    p.add_argument("--metric-ms", type=float, default=2.0, help="metric thread CPU ms an item")
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--own-step", action="store_true", help="a read waits only for its own step")
    a = p.parse_args()
    one, _ = simulate(1, a.gpu_ms, a.host_ms, a.metric_ms, a.own_step, a.steps)
    many, busy = simulate(a.devices, a.gpu_ms, a.host_ms, a.metric_ms, a.own_step, a.steps)
    print(f"one GPU {one:.2f} ms a step; {a.devices} GPUs {many:.2f} ms a device's step, "
          f"{a.devices * one / many:.2f}x one GPU, GPUs {min(busy):.0%}-{max(busy):.0%} busy")


if __name__ == "__main__":
    main()
