#!/usr/bin/env python3
"""tutorial.py - the PyTorch model-parallel tutorial's experiment, timed, next
to pipeline-run's --sweep-split of the same cut.

The models are the tutorial's ("Single-Machine Model Parallel Best
Practices"), with its two device names made parameters:
  ModelParallelResNet50     seq1 = conv1, bn1, relu, maxpool, layer1, layer2
                            on dev0; seq2 = layer3, layer4, avgpool and fc
                            on dev1; no pipelining.
  PipelineParallelResNet50  the same, forward split into micro-batches of
                            split_size with the tutorial's split/next loop.
  single                    torchvision's resnet50 on dev0 (the tutorial's
                            single-GPU baseline).
Training as the tutorial's train(): num_classes 1000, batch 120, 128x128,
nn.MSELoss against one-hot labels (scatter_), SGD lr 0.001, and with
--data tutorial (default) fresh inputs drawn on the host every batch and
moved with .to(); --data device draws one batch once, resident on the
devices. fp32 with TF32 off, cudnn.benchmark left at its default (off).

Timing: --warmup batches, then --repeat runs of --number batches each (the
tutorial's timeit.repeat(number=1, repeat=10) over train() of 3 batches),
each run timed with CUDA events (one device waits for the other before the
end event); a run's time / number is one sample; the median and the minimum
over runs are reported.

Devices: --devices auto uses cuda:0,cuda:1 when two GPUs are visible, else
cuda:0 for both (cpu when there is no GPU); or name them: cuda:0,cuda:1.

Outputs: --csv FILE (one row per model and split), and with --ours FILE
(pipeline-run --sweep-split ... --json output; may be repeated) a combined
table on stdout: split | ours images/s | tutorial images/s | ratio, also
written as CSV with --combined FILE. Exit status 1 if any measurement failed.

Usage: tutorial.py [--splits 1,3,5,8,10,12,20,40,60] [--batch 120]
                   [--size 128] [--classes 1000] [--warmup 2] [--number 3]
                   [--repeat 5] [--devices auto] [--data tutorial|device]
                   [--no-single] [--csv FILE] [--ours FILE]... [--combined FILE]
"""
import argparse
import csv
import gc
import json
import sys
import traceback

import torch
import torch.nn as nn
import torch.optim as optim
import torchvision.models as models
from torchvision.models.resnet import Bottleneck, ResNet

sys.dont_write_bytecode = True  # importing torch_common leaves no __pycache__
from torch_common import Timer, ieee_fp32, median_min, parse_devices


class ModelParallelResNet50(ResNet):
    """The tutorial's ModelParallelResNet50, devices as parameters."""

    def __init__(self, dev0, dev1, num_classes=1000):
        super().__init__(Bottleneck, [3, 4, 6, 3], num_classes=num_classes)
        self.dev0, self.dev1 = dev0, dev1
        self.seq1 = nn.Sequential(
            self.conv1,
            self.bn1,
            self.relu,
            self.maxpool,
            self.layer1,
            self.layer2,
        ).to(dev0)
        self.seq2 = nn.Sequential(
            self.layer3,
            self.layer4,
            self.avgpool,
        ).to(dev1)
        self.fc.to(dev1)

    def forward(self, x):
        x = self.seq2(self.seq1(x).to(self.dev1))
        return self.fc(x.view(x.size(0), -1))


class PipelineParallelResNet50(ModelParallelResNet50):
    """The tutorial's PipelineParallelResNet50, devices as parameters."""

    def __init__(self, dev0, dev1, split_size=20, num_classes=1000):
        super().__init__(dev0, dev1, num_classes=num_classes)
        self.split_size = split_size

    def forward(self, x):
        splits = iter(x.split(self.split_size, dim=0))
        s_next = next(splits)
        s_prev = self.seq1(s_next).to(self.dev1)
        ret = []

        for s_next in splits:
            # A. s_prev runs on dev1
            s_prev = self.seq2(s_prev)
            ret.append(self.fc(s_prev.view(s_prev.size(0), -1)))

            # B. s_next runs on dev0, which can run concurrently with A
            s_prev = self.seq1(s_next).to(self.dev1)

        s_prev = self.seq2(s_prev)
        ret.append(self.fc(s_prev.view(s_prev.size(0), -1)))

        return torch.cat(ret)


def trainer(model, dev_in, dev_out, batch, size, classes, data):
    """The tutorial's train() loop body as a function of no arguments."""
    model.train(True)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(model.parameters(), lr=0.001)
    one_hot_indices = torch.LongTensor(batch).random_(0, classes).view(batch, 1)
    fixed = None
    if data == "device":
        fixed = (torch.randn(batch, 3, size, size).to(dev_in),
                 torch.zeros(batch, classes).scatter_(1, one_hot_indices, 1).to(dev_out))

    def step():
        if fixed is None:
            # generate random inputs and labels
            inputs = torch.randn(batch, 3, size, size)
            labels = torch.zeros(batch, classes).scatter_(1, one_hot_indices, 1)
        else:
            inputs, labels = fixed
        # run forward pass
        optimizer.zero_grad()
        outputs = model(inputs.to(dev_in))
        # run backward pass
        labels = labels.to(outputs.device)
        loss_fn(outputs, labels).backward()
        optimizer.step()

    return step


def measure(build, a, dev0, dev1, out_dev):
    """Builds a model, trains warmup + repeat x number batches; (median, min) ms per batch."""
    torch.manual_seed(1)
    model = build()
    step = trainer(model, dev0, out_dev, a.batch, a.size, a.classes, a.data)
    timer = Timer(torch, [dev0, dev1])
    for _ in range(a.warmup):
        step()
    samples = []
    for _ in range(a.repeat):
        timer.start()
        for _ in range(a.number):
            step()
        samples.append(timer.stop() / a.number)
    del model, step
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return median_min(samples)


def load_ours(paths):
    """split_size -> (images_per_s, step_ms) from pipeline-run sweep JSON files."""
    ours = {}
    for p in paths:
        try:
            with open(p) as f:
                j = json.load(f)
            for r in j.get("sweep", []):
                ours[int(r["split_size"])] = (float(r["images_per_s"]), float(r["step_ms"]))
        except (OSError, ValueError, KeyError, TypeError) as e:
            print("tutorial.py: cannot read %s: %s" % (p, e), file=sys.stderr)
    return ours


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--splits", default="1,3,5,8,10,12,20,40,60")
    ap.add_argument("--batch", type=int, default=120)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--number", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--devices", default="auto")
    ap.add_argument("--data", choices=("tutorial", "device"), default="tutorial")
    ap.add_argument("--no-single", action="store_true")
    ap.add_argument("--csv")
    ap.add_argument("--ours", action="append", default=[])
    ap.add_argument("--combined")
    a = ap.parse_args()
    splits = [int(s) for s in a.splits.split(",") if s.strip()]

    precision = ieee_fp32(torch)
    dev0, dev1 = parse_devices(a.devices, torch)
    gpu = torch.cuda.get_device_name(torch.device(dev0)) if dev0.startswith("cuda") else "cpu"
    print("torch %s; %s; dev0 %s, dev1 %s (%s); batch %d, %dx%d, %d classes; data %s; "
          "%d warm-up, %d runs of %d batches" % (torch.__version__, precision, dev0, dev1, gpu,
                                                 a.batch, a.size, a.size, a.classes, a.data,
                                                 a.warmup, a.repeat, a.number), flush=True)

    runs = []   # (model, split, micro_batches, median_ms, min_ms) or error
    failed = 0

    def run(name, split, build, out_dev):
        nonlocal failed
        try:
            med, mn = measure(build, a, dev0, dev1, out_dev)
        except Exception as e:  # one failure (e.g. out of memory) must not end the sweep
            failed += 1
            traceback.print_exc()
            print("%-26s split %4d: FAILED: %s" % (name, split, str(e).splitlines()[0]
                                                    if str(e) else type(e).__name__), flush=True)
            runs.append((name, split, None, None))
            return
        runs.append((name, split, med, mn))
        print("%-26s split %4d: %8.2f ms/batch (min %.2f), %8.1f images/s" % (
            name, split, med, mn, a.batch * 1000.0 / med), flush=True)

    run("ModelParallelResNet50", a.batch,
        lambda: ModelParallelResNet50(dev0, dev1, num_classes=a.classes), dev1)
    if not a.no_single:
        run("single", a.batch, lambda: models.resnet50(num_classes=a.classes).to(dev0), dev0)
    for s in splits:
        run("PipelineParallelResNet50", s,
            lambda s=s: PipelineParallelResNet50(dev0, dev1, split_size=s,
                                                 num_classes=a.classes), dev1)

    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["model", "split_size", "micro_batches", "dev0", "dev1", "batch", "size",
                        "data", "step_ms_median", "step_ms_min", "images_per_s", "runs",
                        "batches_per_run"])
            for name, split, med, mn in runs:
                w.writerow([name, split, -(-a.batch // split), dev0, dev1, a.batch, a.size,
                            a.data, "%.3f" % med if med else "", "%.3f" % mn if mn else "",
                            "%.2f" % (a.batch * 1000.0 / med) if med else "", a.repeat,
                            a.number])

    if a.ours or a.combined:
        ours = load_ours(a.ours)
        tut = {s: med for name, s, med, _ in runs if name == "PipelineParallelResNet50"}
        mp = [med for name, _, med, _ in runs if name == "ModelParallelResNet50"][0]
        single = [med for name, _, med, _ in runs if name == "single"]
        rows = []
        for s in sorted(set(splits) | set(ours) | {a.batch}):
            t_med = tut.get(s, mp if s == a.batch else None)
            o = ours.get(s)
            o_ips = o[0] if o else None
            t_ips = a.batch * 1000.0 / t_med if t_med else None
            ratio = o_ips / t_ips if o_ips and t_ips else None
            label = "no pipelining" if s == a.batch else ""
            rows.append((s, -(-a.batch // s), o_ips, t_ips, ratio, label))

        def fmt(v, f="%.1f"):
            return f % v if v is not None else "-"

        print()
        print("ResNet-50 cut after layer2, batch %d, %dx%d, %s -> %s (%s); images/s "
              "(ours: pipeline-run median step; tutorial: %s data)" % (
                  a.batch, a.size, a.size, dev0, dev1, gpu, a.data))
        print("%10s %13s %12s %16s %8s" % ("split size", "micro-batches", "ours img/s",
                                            "tutorial img/s", "ratio"))
        for s, m, o_ips, t_ips, ratio, label in rows:
            print("%10d %13d %12s %16s %8s  %s" % (s, m, fmt(o_ips), fmt(t_ips),
                                                  fmt(ratio, "%.2f"), label))
        if mp:
            print("tutorial ModelParallelResNet50 (no pipelining): %.1f images/s" % (
                a.batch * 1000.0 / mp))
        if single and single[0]:
            print("torchvision resnet50 on %s alone (the tutorial's baseline): %.1f images/s" % (
                dev0, a.batch * 1000.0 / single[0]))
        if a.combined:
            with open(a.combined, "w", newline="") as f:
                w = csv.writer(f, lineterminator="\n")
                w.writerow(["split_size", "micro_batches", "ours_images_per_s",
                            "tutorial_images_per_s", "ratio", "note"])
                for s, m, o_ips, t_ips, ratio, label in rows:
                    w.writerow([s, m, fmt(o_ips, "%.2f") if o_ips else "",
                                fmt(t_ips, "%.2f") if t_ips else "",
                                fmt(ratio, "%.4f") if ratio else "", label])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
