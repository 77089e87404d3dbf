#!/usr/bin/env python3
"""torch_eager.py - PyTorch training steps of torchvision's resnet50, the
reference pipeline-run's throughput is compared with.

One process, one device: SGD (lr 0.1, momentum 0.9, weight decay 1e-4),
cross-entropy, BN in training mode, a fixed random batch resident on the
device. Precision: fp32 with TF32 off, or on with --precision tf32, or
--precision bf16: forward and loss under torch.autocast(DEVICE_TYPE,
dtype=torch.bfloat16), fp32 master weights and optimizer (what autocast
leaves in fp32 runs with TF32 off). --channels-last puts the model and the
input in torch.channels_last; --compile runs the model through
torch.compile (compiled during the warm-up steps, at least 2; the time of
the first step is reported as compile_s). After --warmup steps, each of
--steps steps is timed alone (CUDA events on CUDA, perf_counter on the CPU);
prints a human line and, last, one JSON line:
  {"images_per_s", "step_ms": {"median", "min"}, "batch", "size",
   "cudnn_benchmark", "precision", "autocast", "channels_last", "compile",
   "compile_s", "peak_gib", "device", "torch"}
When torch.compile is unavailable or fails, the last stderr line says why,
the JSON line carries "error" and the exit status is 3.

Usage: torch_eager.py [--batch 128] [--size 224] [--steps 20] [--warmup 5]
                      [--cudnn-benchmark 0|1] [--device cuda:0]
                      [--precision fp32|tf32|bf16] [--channels-last] [--compile]
"""
import argparse
import json
import sys

import torch
import torchvision

sys.dont_write_bytecode = True  # importing torch_common leaves no __pycache__
from torch_common import CompileFailed, failed, precision_name, time_training


def fail(a, what, err):
    """Reports a failure (compile): exit status 3 (torch_common.failed)."""
    return failed(torch, "torch_eager.py", {
        "batch": a.batch, "size": a.size, "precision": a.precision,
        "channels_last": a.channels_last, "compile": a.compile, "device": a.device}, what, err)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--cudnn-benchmark", type=int, choices=(0, 1), default=0)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()

    precision = precision_name(torch, a.precision)
    torch.backends.cudnn.benchmark = bool(a.cudnn_benchmark)
    dev = torch.device(a.device)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    torch.manual_seed(1)
    model = torchvision.models.resnet50(num_classes=1000).to(dev, memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(a.batch, 3, a.size, a.size, device=dev).contiguous(memory_format=fmt)
    y = torch.randint(0, 1000, (a.batch,), device=dev)
    try:
        med, mn, compile_s, peak = time_training(torch, model, opt,
                                                 lambda net: loss_fn(net(x), y), a)
    except CompileFailed as e:
        return fail(a, *e.args)
    print("torch %s, %s, cudnn.benchmark=%d, %s%s%s" % (
        torch.__version__, a.device, a.cudnn_benchmark, precision,
        ", channels_last" if a.channels_last else "",
        ", torch.compile (first step %.1f s)" % compile_s if a.compile else ""))
    print("%.1f ms/step (min %.1f), %.0f img/s, peak %.1f GiB" % (
        med, mn, a.batch * 1000.0 / med, peak))
    print(json.dumps({"images_per_s": a.batch * 1000.0 / med,
                      "step_ms": {"median": med, "min": mn}, "batch": a.batch, "size": a.size,
                      "cudnn_benchmark": a.cudnn_benchmark, "precision": precision,
                      "autocast": "bf16" if a.precision == "bf16" else None,
                      "channels_last": a.channels_last, "compile": a.compile,
                      "compile_s": compile_s, "peak_gib": peak, "device": a.device,
                      "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
