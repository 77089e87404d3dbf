"""seq_check.py - a sequential model of every layer type against torch.nn.

Usage: /usr/bin/python3 seq_check.py PIPELINE_RUN [--keep DIR]

The model (1-channel 16x16 images, 5 classes), in torch.nn terms:
  c1  Conv2d(1, 6, 3, padding=1)        b1  BatchNorm2d(6)      r1 ReLU
  p1  MaxPool2d(3, stride=2, padding=1)  c2  Conv2d(6, 8, 3, bias=False)
  s1  Sigmoid                            a1  AvgPool2d(2, padding=1)
  fl  Flatten                            f1  Linear(128, 12)     b2 BatchNorm1d(12)
  r2  ReLU                               f2  Linear(12, 5)
on three stages (cpu:0: c1..p1, cpu:1: c2..fl, cpu:2: f1..f2), 1F1B, batch 8 in
two micro-batches of 4, SGD with momentum and weight decay. Parameter names are
nn.Sequential's with these module names ("c1.weight", "b1.running_mean", ...).

(a) One step from PyTorch's initialisation (batch-norm affine parameters and
    running statistics perturbed so every tensor matters), loaded with --load:
    our checkpoint against PyTorch float64 from the same weights, per tensor,
    within FACTOR of float32 PyTorch's own error (plus FLOOR); the loss within
    LOSS_RTOL; num_batches_tracked equal.
(b) Our checkpoint loads into the torch.nn.Sequential with
    load_state_dict(strict=True) (names, shapes, dtypes).
(c) Evaluation: --eval-only on the step-1 weights gives the test loss and
    accuracy of the same model in eval() mode (running statistics).
(d) Initialisation: our own initial weights (seed 1, no --load, saved after a
    step with learning rate 0) follow
    PyTorch's defaults: conv and linear weights and biases uniform within
    +-1/sqrt(fan_in) with the uniform's standard deviation, batch norm 1/0;
    with `init: normal` and init_std, weights normal(0, std) and biases 0.

Exit status: 0 pass, 1 fail, 77 skip (no torch/numpy).
"""

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import OrderedDict

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # the project's tests must not require PyTorch
    print(f"skip: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from crosscheck import CHECKS, check, rel_err, write_idx  # noqa: E402

CLASSES, BATCH, SPLIT, IMAGE = 5, 8, 4, 16
LR, MOMENTUM, WD = 0.05, 0.9, 1e-4
FACTOR, FLOOR, LOSS_RTOL = 10.0, 1e-6, 1e-5

LAYERS = """\
    - {name: c1, type: conv, out_channels: 6, kernel: 3, padding: 1}
    - {name: b1, type: batchnorm}
    - {name: r1, type: relu}
    - {name: p1, type: maxpool, kernel: 3, stride: 2, padding: 1}
    - {name: c2, type: conv, out_channels: 8, kernel: 3, bias: false}
    - {name: s1, type: sigmoid}
    - {name: a1, type: avgpool, kernel: 2, padding: 1}
    - {name: fl, type: flatten}
    - {name: f1, type: linear, out_features: 12}
    - {name: b2, type: batchnorm}
    - {name: r2, type: relu}
    - {name: f2, type: linear, out_features: 5}
"""

PLAN = """\
model:
  name: sequential
  in_channels: 1
{init}  layers:
{layers}batch:
  size: {batch}
  split_size: {split}
schedule: 1f1b
optimizer:
  type: sgd
  lr: {lr}
  momentum: {momentum}
  weight_decay: {wd}
data:
  format: idx
  images: images.idx
  labels: labels.idx
eval:
  images: test-images.idx
  labels: test-labels.idx
  batch_size: 6
seed: 1
steps: 1
stages:
  - device: cpu:0
    layers: [c1, b1, r1, p1]
  - device: cpu:1
    layers: [c2, s1, a1, fl]
  - device: cpu:2
    layers: [f1, b2, r2, f2]
"""






def net():
    return nn.Sequential(OrderedDict([
        ("c1", nn.Conv2d(1, 6, 3, padding=1)), ("b1", nn.BatchNorm2d(6)), ("r1", nn.ReLU()),
        ("p1", nn.MaxPool2d(3, stride=2, padding=1)), ("c2", nn.Conv2d(6, 8, 3, bias=False)),
        ("s1", nn.Sigmoid()), ("a1", nn.AvgPool2d(2, padding=1)), ("fl", nn.Flatten()),
        ("f1", nn.Linear(128, 12)), ("b2", nn.BatchNorm1d(12)), ("r2", nn.ReLU()),
        ("f2", nn.Linear(12, CLASSES))]))


def make_init(seed):
    torch.manual_seed(seed)
    m = net()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for mod in m:
            if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
                c = mod.num_features
                mod.weight.copy_(1.0 + 0.2 * torch.randn(c, generator=g))
                mod.bias.copy_(0.1 * torch.randn(c, generator=g))
                mod.running_mean.copy_(0.1 * torch.randn(c, generator=g))
                mod.running_var.copy_(1.0 + 0.2 * torch.rand(c, generator=g))
                mod.num_batches_tracked.fill_(3)
    return {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}


def build(state, dtype):
    m = net()
    m.load_state_dict({k: torch.from_numpy(np.array(state[k])) for k in m.state_dict()},
                      strict=True)
    return m.to(dtype)


def torch_step(state, dtype, x, y):
    m = build(state, dtype).train()
    opt = torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    xt, yt = torch.from_numpy(x).to(dtype), torch.from_numpy(y).long()
    total = 0.0
    for i in range(0, len(x), SPLIT):
        loss = F.cross_entropy(m(xt[i:i + SPLIT]), yt[i:i + SPLIT], reduction="sum") / len(x)
        loss.backward()
        total += float(loss.detach())
    opt.step()
    return ({k: v.detach().numpy().astype(np.float64) if v.is_floating_point() else v.numpy()
             for k, v in m.state_dict().items()}, total)




def run(exe, work, *args):
    cmd = [exe, os.path.join(work, "plan.yaml"), "--json", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=work)
    if r.returncode != 0:
        print("command failed:", " ".join(cmd))
        print(r.stderr)
        raise SystemExit(1)
    return json.loads(r.stdout)


def write_plan(work, init="", lr=LR, momentum=MOMENTUM, wd=WD):
    with open(os.path.join(work, "plan.yaml"), "w") as f:
        f.write(PLAN.format(init=init, layers=LAYERS, batch=BATCH, split=SPLIT, lr=lr,
                            momentum=momentum, wd=wd))


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    exe = os.path.abspath(sys.argv[1])
    keep = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--keep" else None
    work = keep or tempfile.mkdtemp(prefix="seq_check.")
    if not keep:
        atexit.register(shutil.rmtree, work, True)  # gone on any exit
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(7)
    u8 = rng.integers(0, 256, size=(BATCH, IMAGE, IMAGE), dtype=np.uint8)
    labels = rng.integers(0, CLASSES, size=BATCH, dtype=np.uint8)
    tu8 = rng.integers(0, 256, size=(15, IMAGE, IMAGE), dtype=np.uint8)
    tlabels = rng.integers(0, CLASSES, size=15, dtype=np.uint8)
    write_idx(os.path.join(work, "images.idx"), u8)
    write_idx(os.path.join(work, "labels.idx"), labels)
    write_idx(os.path.join(work, "test-images.idx"), tu8)
    write_idx(os.path.join(work, "test-labels.idx"), tlabels)
    x = (u8.astype(np.float32) / np.float32(255.0)).reshape(BATCH, 1, IMAGE, IMAGE)
    tx = (tu8.astype(np.float32) / np.float32(255.0)).reshape(15, 1, IMAGE, IMAGE)
    y = labels.astype(np.int64)
    write_plan(work)

    # (a) one step from the same weights
    init = make_init(3)
    st.save(os.path.join(work, "init.safetensors"), init)
    js = run(exe, work, "--load", "init.safetensors", "--save", "step1.safetensors",
             "--weights-only")
    ours, _ = st.load(os.path.join(work, "step1.safetensors"))
    ref64, loss64 = torch_step(init, torch.float64, x, y)
    ref32, loss32 = torch_step(init, torch.float32, x, y)
    print(f"{'tensor':24s} {'ours fp32':>10s} {'torch fp32':>10s}")
    worst = 0.0
    for name in sorted(ref64):
        if name.endswith("num_batches_tracked"):
            check(name in ours and int(ours[name]) == int(ref64[name]),
                  f"{name} = {int(ours.get(name, -1))}, PyTorch {int(ref64[name])}")
            continue
        if name not in ours:
            check(False, f"{name} missing from our checkpoint")
            continue
        before = init[name].astype(np.float64)
        eo, et = rel_err(ours[name], ref64[name], before), rel_err(ref32[name], ref64[name],
                                                                   before)
        print(f"{name:24s} {eo:10.2e} {et:10.2e}")
        worst = max(worst, eo / max(et, 1e-30))
        check(eo <= FACTOR * et + FLOOR, f"{name}: error {eo:.2e} within {FACTOR:g}x torch "
                                         f"fp32's {et:.2e} (+{FLOOR:g})")
    loss = js["losses"][0]
    rel = abs(loss - loss64) / abs(loss64)
    check(rel <= LOSS_RTOL, f"loss: ours {loss:.7f}, torch fp64 {loss64:.7f}, fp32 {loss32:.7f} "
                            f"(rel. error {rel:.1e})")

    # (b) our checkpoint in torch.nn.Sequential
    m = net()
    try:
        m.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in ours.items()},
                          strict=True)
        check(True, f"torch.nn.Sequential load_state_dict(strict=True) takes our {len(ours)} "
                    "tensors")
    except RuntimeError as e:
        check(False, f"load_state_dict(strict=True): {e}")

    # (c) evaluation of the step-1 weights against eval() mode
    ev = run(exe, work, "--load", "step1.safetensors", "--eval-only")
    m64 = build(ours, torch.float64).eval()
    with torch.no_grad():
        out = m64(torch.from_numpy(tx).double())
        tl = float(F.cross_entropy(out, torch.from_numpy(tlabels.astype(np.int64))))
        acc = float((out.argmax(1).numpy() == tlabels).mean())
    e = ev["eval"]
    check(abs(e["loss"] - tl) <= 1e-5 * abs(tl) and abs(e["accuracy"] - acc) < 1e-9,
          f"eval: ours loss {e['loss']:.7f} acc {e['accuracy']:.4f}, torch eval() "
          f"{tl:.7f} {acc:.4f}")

    # (d) our initialisation: PyTorch's defaults, then normal(std); a step with
    # learning rate 0 saves the initial weights
    write_plan(work, lr=0.0, momentum=0.0, wd=0.0)
    run(exe, work, "--steps", "1", "--save", "own.safetensors", "--weights-only")
    own, _ = st.load(os.path.join(work, "own.safetensors"))
    write_plan(work, init="  init: normal\n  init_std: 0.05\n", lr=0.0, momentum=0.0, wd=0.0)
    run(exe, work, "--steps", "1", "--save", "normal.safetensors", "--weights-only")
    nrm, _ = st.load(os.path.join(work, "normal.safetensors"))
    fan_in = {"c1": 9, "c2": 54, "f1": 128, "f2": 12}
    for layer, fi in fan_in.items():
        w = own[layer + ".weight"].astype(np.float64).ravel()
        bound = 1.0 / np.sqrt(fi)
        sd = bound / np.sqrt(3.0)
        check(np.max(np.abs(w)) <= bound and abs(np.std(w) - sd) < 0.25 * sd,
              f"default init {layer}.weight: max {np.max(np.abs(w)):.3f} <= {bound:.3f}, "
              f"std {np.std(w):.3f} ~ {sd:.3f}")
        wn = nrm[layer + ".weight"].astype(np.float64).ravel()
        check(abs(np.std(wn) - 0.05) < 0.35 * 0.05 and abs(np.mean(wn)) < 0.03,
              f"normal(0.05) init {layer}.weight: mean {np.mean(wn):.4f}, std {np.std(wn):.4f}")
    check("c2.bias" not in own, "c2 has no bias (bias: false)")
    check(all(abs(own[k]).max() > 0 for k in ("c1.bias", "f1.bias", "f2.bias")),
          "default init: biases uniform, not zero")
    check(all(float(np.max(np.abs(nrm[k]))) == 0.0 for k in ("c1.bias", "f1.bias", "f2.bias")),
          "normal init: biases 0")
    check(all(np.all(own[k] == 1.0) for k in ("b1.weight", "b2.weight")) and
          all(np.all(own[k] == 0.0) for k in ("b1.bias", "b2.bias")),
          "batch norm starts at weight 1, bias 0")

    print(f"\nworst ratio ours/torch fp32: {worst:.2f}")
    print("seq_check: " + ("FAILED: " + "; ".join(CHECKS.failed) if CHECKS.failed else "all passed"))
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
