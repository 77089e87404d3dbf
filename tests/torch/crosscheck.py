"""crosscheck.py - pipeline-run against PyTorch/torchvision, weights both ways.

Usage: python3 crosscheck.py PIPELINE_RUN [--keep DIR]

(a) torchvision -> pipeline-run. A torchvision ResNet-50 (10 classes, its own
    initialisation with BN affine parameters and running statistics perturbed
    so that every tensor matters) is written as safetensors and loaded by
    pipeline-run, which trains STEPS steps on a plan with two stages (cpu:0,
    cpu:1), 1F1B, two micro-batches, SGD with momentum and weight decay, on an
    IDX data set written here (uint8, normalised with mean/std by both sides
    the same way). The same steps run in PyTorch in float32 and in float64:
    micro-batches fed one after the other, loss_i = CE summed over the
    micro-batch / B, gradients accumulated, BN in training mode (running
    statistics updated per micro-batch), one SGD step per mini-batch.
    Every tensor of our checkpoint is compared with the float64 result: the
    error of a tensor is max|ours - ref| / max|ref - initial| (the error of
    its update, the part a step computes; for BN running statistics the same),
    reported per group (stage part x tensor kind) next to float32 PyTorch's own
    error against float64. Ours must be within FACTOR of PyTorch fp32's in
    every group; num_batches_tracked must be equal; the losses of --json must
    match PyTorch's to a relative 1e-4.
(b) pipeline-run -> torchvision. The checkpoint we saved with --weights-only
    loads into torchvision with load_state_dict(strict=True), every name,
    shape and dtype as torchvision's; in training mode on the next batch it
    gives (float64) the loss our run printed for that step, which our run
    computed from those same weights.

Exit status: 0 pass, 1 fail, 77 skip (no torch/torchvision/numpy).
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import torchvision
except ImportError as e:  # the project's tests must not require PyTorch
    print(f"skip: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

CLASSES = 10
BATCH = 8
SPLIT = 4
IMAGE = 64
STEPS = int(os.environ.get("CC_STEPS", "2"))
LR, MOMENTUM, WD = float(os.environ.get("CC_LR", "0.05")), 0.9, 1e-4
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
FACTOR = 10.0
LOSS_RTOL = 1e-4

PLAN = """\
model:
  name: resnet50
  num_classes: {classes}
  in_channels: 3
  stem: imagenet
batch:
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
  shuffle: false
  mean: {mean}
  std: {std}
seed: 1
steps: {steps}
stages:
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1, layer2]
  - device: cpu:1
    layers: [layer3, layer4, avgpool, fc]
"""

failures = []


def check(ok, msg):
    print(("ok    " if ok else "FAIL  ") + msg)
    if not ok:
        failures.append(msg)


def write_idx(path, arr):
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, arr.ndim]))
        f.write(struct.pack(">" + "I" * arr.ndim, *arr.shape))
        f.write(arr.tobytes())


def normalise(u8):
    """Exactly the data source's float32 lookup: (v / 255 - mean) / std."""
    v = u8.astype(np.float32) / np.float32(255.0)
    m = np.array(MEAN, dtype=np.float32).reshape(1, 3, 1, 1)
    s = np.array(STD, dtype=np.float32).reshape(1, 3, 1, 1)
    return (v - m) / s


def make_model(seed):
    torch.manual_seed(seed)
    m = torchvision.models.resnet50(num_classes=CLASSES)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                c = mod.num_features
                mod.weight.copy_(1.0 + 0.2 * torch.randn(c, generator=g))
                mod.bias.copy_(0.1 * torch.randn(c, generator=g))
                mod.running_mean.copy_(0.1 * torch.randn(c, generator=g))
                mod.running_var.copy_(1.0 + 0.2 * torch.rand(c, generator=g))
                mod.num_batches_tracked.fill_(3)
    return m


def state_np(model):
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def torch_train(state, dtype, x_all, y_all, steps, first_step=0):
    """Our semantics in PyTorch; returns (state dict of numpy, losses)."""
    m = torchvision.models.resnet50(num_classes=CLASSES)
    m.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()}, strict=True)
    m = m.to(dtype)
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    losses = []
    for step in range(first_step, first_step + steps):
        opt.zero_grad(set_to_none=True)
        x = torch.from_numpy(x_all[step * BATCH:(step + 1) * BATCH]).to(dtype)
        y = torch.from_numpy(y_all[step * BATCH:(step + 1) * BATCH]).long()
        total = 0.0
        for i in range(0, BATCH, SPLIT):
            out = m(x[i:i + SPLIT])
            loss = F.cross_entropy(out, y[i:i + SPLIT], reduction="sum") / BATCH
            loss.backward()
            total += float(loss.detach())
        opt.step()
        losses.append(total)
    return state_np(m), losses


def torch_loss(state, dtype, x, y):
    """Training-mode forward loss of a state on one mini-batch (micro-batched)."""
    m = torchvision.models.resnet50(num_classes=CLASSES)
    m.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()}, strict=True)
    m = m.to(dtype).train()
    total = 0.0
    with torch.no_grad():
        for i in range(0, BATCH, SPLIT):
            out = m(torch.from_numpy(x[i:i + SPLIT]).to(dtype))
            total += float(F.cross_entropy(out, torch.from_numpy(y[i:i + SPLIT]).long(),
                                           reduction="sum") / BATCH)
    return total


def group_of(name):
    """(part, kind): stem/layerN/fc x conv/downsample/bn.weight/.../fc."""
    part = name.split(".")[0]
    if part in ("conv1", "bn1"):
        part = "stem"
    leaf = name.rsplit(".", 1)[1]
    owner = name.rsplit(".", 1)[0].rsplit(".", 1)[-1]
    if part == "fc":
        kind = "fc." + leaf
    elif ".downsample.0." in name:
        kind = "downsample.conv"
    elif owner.startswith("conv"):
        kind = "conv.weight"
    else:
        kind = "bn." + leaf
    return part, kind


def rel_update_err(x, ref, init):
    scale = np.max(np.abs(ref - init))
    if scale == 0:
        scale = np.max(np.abs(ref))
    if scale == 0:
        return float(np.max(np.abs(x - ref)))
    return float(np.max(np.abs(x.astype(np.float64) - ref)) / scale)


def run_ours(exe, work, load, save, steps):
    cmd = [exe, os.path.join(work, "plan.yaml"), "--load", load, "--steps", str(steps),
           "--save", save, "--weights-only", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print("command:", " ".join(cmd))
        print(r.stderr)
        raise SystemExit(1)
    return json.loads(r.stdout)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    exe = os.path.abspath(sys.argv[1])
    keep = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--keep" else None
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    tmp = None
    if keep:
        os.makedirs(keep, exist_ok=True)
        work = keep
    else:
        tmp = tempfile.TemporaryDirectory(prefix="pp-torch-")
        work = tmp.name

    rng = np.random.default_rng(7)
    n = BATCH * (STEPS + 1)
    images = rng.integers(0, 256, size=(n, 3, IMAGE, IMAGE), dtype=np.uint8)
    labels = rng.integers(0, CLASSES, size=(n,), dtype=np.uint8)
    write_idx(os.path.join(work, "images.idx"), images)
    write_idx(os.path.join(work, "labels.idx"), labels)
    with open(os.path.join(work, "plan.yaml"), "w") as f:
        f.write(PLAN.format(classes=CLASSES, batch=BATCH, split=SPLIT, lr=LR, momentum=MOMENTUM,
                            wd=WD, mean=json.dumps(MEAN), std=json.dumps(STD), steps=STEPS))
    x = normalise(images)
    y = labels.astype(np.int64)

    init = state_np(make_model(1))
    init_path = os.path.join(work, "init.safetensors")
    st.save(init_path, init)
    init64 = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in init.items()}

    # ---- (a) torchvision -> ours: STEPS steps on both sides ----
    out_path = os.path.join(work, "out.safetensors")
    summary = run_ours(exe, work, init_path, out_path, STEPS)
    ours, _ = st.load(out_path)
    ref64, loss64 = torch_train(init, torch.float64, x, y, STEPS)
    ref32, loss32 = torch_train(init, torch.float32, x, y, STEPS)

    check(sorted(ours) == sorted(init), f"our checkpoint has torchvision's {len(init)} names")
    groups = {}
    for name in sorted(init):
        if name.endswith("num_batches_tracked"):
            continue
        g = group_of(name)
        e_ours = rel_update_err(ours[name], ref64[name], init64[name])
        e_t32 = rel_update_err(ref32[name], ref64[name], init64[name])
        a = groups.setdefault(g, [0.0, 0.0, 0, ""])
        if e_ours > a[0]:
            a[0], a[3] = e_ours, name
        a[1] = max(a[1], e_t32)
        a[2] += 1
    print(f"\nmax relative error of the update after {STEPS} steps vs PyTorch float64 "
          f"(max|x-ref64| / max|ref64-initial| per tensor, max over the group)")
    print(f"{'part':7s} {'kind':20s} {'n':>3s} {'ours fp32':>10s} {'torch fp32':>10s} "
          f"{'ratio':>6s}  worst tensor (ours)")
    worst_ratio = 0.0
    for (part, kind), (eo, et, cnt, wname) in sorted(groups.items()):
        ratio = eo / et if et > 0 else float("inf") if eo > 0 else 1.0
        worst_ratio = max(worst_ratio, ratio)
        print(f"{part:7s} {kind:20s} {cnt:3d} {eo:10.2e} {et:10.2e} {ratio:6.2f}  {wname}")
    print()
    for (part, kind), (eo, et, _, wname) in sorted(groups.items()):
        check(eo <= FACTOR * et + 1e-12,
              f"{part} {kind}: ours {eo:.2e} <= {FACTOR:g} x torch fp32 {et:.2e}")
    for name in sorted(init):
        if name.endswith("num_batches_tracked"):
            want = int(ref64[name].reshape(-1)[0])
            got = ours[name]
            if got.dtype != np.int64 or int(got.reshape(-1)[0]) != want:
                check(False, f"{name}: {got.dtype} {got.reshape(-1)} != int64 {want}")
                break
    else:
        check(True, f"num_batches_tracked int64 = {int(ref64['bn1.num_batches_tracked'])} "
                    f"everywhere (3 + {STEPS} steps x {BATCH // SPLIT} micro-batches)")
    losses = summary["losses"]
    for s in range(STEPS):
        rel = abs(losses[s] - loss64[s]) / abs(loss64[s])
        rel32 = abs(loss32[s] - loss64[s]) / abs(loss64[s])
        check(rel <= LOSS_RTOL, f"loss[{s}] ours {losses[s]:.7f} torch fp64 {loss64[s]:.7f} "
                                f"torch fp32 {loss32[s]:.7f} (rel ours {rel:.1e}, torch fp32 "
                                f"{rel32:.1e})")

    # ---- (b) ours -> torchvision: strict load, same loss, one more step ----
    ck1 = os.path.join(work, "step1.safetensors")
    s1 = run_ours(exe, work, init_path, ck1, 1)
    saved, _ = st.load(ck1)
    tv = torchvision.models.resnet50(num_classes=CLASSES).state_dict()
    bad = [k for k in tv if k not in saved or tuple(saved[k].shape) != tuple(tv[k].shape)
           or saved[k].dtype != tv[k].numpy().dtype]
    check(not bad and len(saved) == len(tv),
          f"step-1 checkpoint: {len(saved)} tensors, names/shapes/dtypes as torchvision's"
          + (f" (mismatch: {bad[:3]})" if bad else ""))
    m = torchvision.models.resnet50(num_classes=CLASSES)
    try:
        m.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in saved.items()}, strict=True)
        check(True, "load_state_dict(strict=True) accepts our checkpoint")
    except RuntimeError as e:
        check(False, f"load_state_dict(strict=True): {e}")
    xb, yb = x[BATCH:2 * BATCH], y[BATCH:2 * BATCH]
    l64 = torch_loss(saved, torch.float64, xb, yb)
    rel = abs(l64 - losses[1]) / abs(l64)
    check(rel <= LOSS_RTOL, f"our step-1 weights in torchvision: loss on batch 1 {l64:.7f}, "
                            f"ours printed {losses[1]:.7f} (rel {rel:.1e})")
    check(abs(s1["losses"][0] - losses[0]) == 0, "1-step and 2-step runs agree on loss[0] bitwise")
    return 1 if failures else 0


if __name__ == "__main__":
    rc = main()
    print(f"\n{len(failures)} failure(s)" if rc else "\nall checks passed")
    sys.exit(rc)
