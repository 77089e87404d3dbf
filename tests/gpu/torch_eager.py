#!/usr/bin/env python3
"""torch_eager.py - PyTorch eager training steps of torchvision's resnet50,
the reference pipeline-run's fp32 throughput is compared with.

One process, one device: SGD (lr 0.1, momentum 0.9, weight decay 1e-4),
cross-entropy, BN in training mode, a fixed random batch resident on the
device, fp32 with TF32 off (or on, with --precision tf32). After --warmup steps, each of --steps steps is
timed alone (CUDA events on CUDA, perf_counter on the CPU); prints a human
line and, last, one JSON line:
  {"images_per_s", "step_ms": {"median", "min"}, "batch", "size",
   "cudnn_benchmark", "precision", "peak_gib", "device", "torch"}

Usage: torch_eager.py [--batch 128] [--size 224] [--steps 20] [--warmup 5]
                      [--cudnn-benchmark 0|1] [--device cuda:0] [--precision fp32|tf32]
"""
import argparse
import json
import sys

import torch
import torchvision

sys.dont_write_bytecode = True  # importing torch_common leaves no __pycache__
from torch_common import Timer, fp32_math, median_min


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--cudnn-benchmark", type=int, choices=(0, 1), default=0)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--precision", choices=("fp32", "tf32"), default="fp32")
    a = ap.parse_args()

    precision = fp32_math(torch, "tf32" if a.precision == "tf32" else "ieee")
    torch.backends.cudnn.benchmark = bool(a.cudnn_benchmark)
    dev = torch.device(a.device)
    torch.manual_seed(1)
    model = torchvision.models.resnet50(num_classes=1000).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(a.batch, 3, a.size, a.size, device=dev)
    y = torch.randint(0, 1000, (a.batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    timer = Timer(torch, [a.device])
    times = []
    for _ in range(a.steps):
        timer.start()
        step()
        times.append(timer.stop())
    med, mn = median_min(times)
    peak = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else 0.0
    print("torch %s, %s, cudnn.benchmark=%d, %s" % (torch.__version__, a.device,
                                                   a.cudnn_benchmark, precision))
    print("%.1f ms/step (min %.1f), %.0f img/s, peak %.1f GiB" % (
        med, mn, a.batch * 1000.0 / med, peak))
    print(json.dumps({"images_per_s": a.batch * 1000.0 / med,
                      "step_ms": {"median": med, "min": mn}, "batch": a.batch, "size": a.size,
                      "cudnn_benchmark": a.cudnn_benchmark, "precision": precision,
                      "peak_gib": peak, "device": a.device, "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
