"""crosscheck.py - pipeline-run against PyTorch/torchvision, weights both ways.

Usage: /usr/bin/python3 crosscheck.py PIPELINE_RUN [--keep DIR]

The plan: ResNet-50 (10 classes, imagenet stem) on two stages (cpu:0: stem,
layer1, layer2; cpu:1: layer3, layer4, avgpool, fc), 1F1B, batch 8 in two
micro-batches of 4, SGD (lr, momentum 0.9, weight decay 1e-4), IDX data
written here (uint8 3x64x64, normalised (u8/255 - mean)/std in float32 exactly
as the data source does). PyTorch runs the same semantics: micro-batches fed
one after the other, loss_i = CE summed over the micro-batch / B, gradients
accumulated, BN in training mode (running statistics updated per micro-batch),
one torch.optim.SGD step per mini-batch; in float32 and in float64.

(a) torchvision -> pipeline-run. A torchvision initialisation (BN affine
    parameters and running statistics perturbed so that every tensor matters)
    is written as safetensors and loaded with --load.
    Step 1: our checkpoint after one step (with the momentum buffers) against
    PyTorch float64 from the same weights. Step 2 (momentum in use): our
    checkpoint after two steps against one PyTorch float64 step started from
    our step-1 weights and momentum buffers (one step from equal states: the
    loss surface of a small-batch BN net amplifies rounding differences
    chaotically over several steps, in float32 PyTorch as much as here).
    The error of a tensor is max|x - ref64| / max|ref64 - before| (the error of
    what the step changed; for momentum buffers, max|x - ref64| / max|ref64|),
    reported as the maximum over each group (network part x tensor kind) next
    to float32 PyTorch's own error against the same float64 reference. Ours
    must be within FACTOR of PyTorch fp32's in every group, plus an absolute
    floor for groups whose error is at rounding level. num_batches_tracked
    must be equal (I64), the losses of --json within LOSS_RTOL of float64.
    Resume: --load of the step-1 checkpoint (with optimizer state) and one
    more step must reproduce the two-step run bitwise.
(b) pipeline-run -> torchvision. The checkpoints we save with --weights-only
    load into torchvision with load_state_dict(strict=True), every name, shape
    and dtype as torchvision's own state_dict; in training mode on the next
    batch our step-1 weights give (float64) the loss our run printed for step 2,
    which it computed from those same weights. (pipeline-run has no evaluation
    mode, so logits are compared through that training-mode loss.)

Exit status: 0 pass, 1 fail, 2 usage, 77 skip (no torch/torchvision/numpy).
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
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

CLASSES = 10
BATCH = 8
SPLIT = 4
IMAGE = 64
LR, MOMENTUM, WD = 0.01, 0.9, 1e-4
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
FACTOR = 10.0
FLOOR = 1e-5        # absolute allowance for groups at rounding level (e.g. fc.bias)
LOSS_RTOL = 1e-4
MOM_PREFIX = "optimizer.momentum."

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
steps: 1
stages:
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1, layer2]
  - device: cpu:1
    layers: [layer3, layer4, avgpool, fc]
"""


CHECKS = Checks(verbose=True, stream=sys.stdout)
check = CHECKS.check


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


def make_init(seed, model=None):
    """A torchvision initialisation (of model(), default ResNet-50) with its
    batch norms perturbed so that every tensor matters."""
    torch.manual_seed(seed)
    m = model() if model else torchvision.models.resnet50(num_classes=CLASSES)
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
    return {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}


def build(state, dtype):
    """A torchvision ResNet-50 in training mode holding the weights of state."""
    m = torchvision.models.resnet50(num_classes=CLASSES)
    m.load_state_dict({k: torch.from_numpy(state[k].copy()) for k in m.state_dict()},
                      strict=True)
    return m.to(dtype).train()


def torch_step(state, dtype, x, y):
    """One step of our semantics in PyTorch from state (weights and, when it
    holds optimizer.momentum.*, momentum buffers). Returns (state after the
    step with its momentum buffers, in float64, and the loss)."""
    m = build(state, dtype)
    opt = torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    for name, p in m.named_parameters():
        if MOM_PREFIX + name in state:
            opt.state[p]["momentum_buffer"] = torch.from_numpy(
                state[MOM_PREFIX + name].copy()).to(dtype)
    opt.zero_grad(set_to_none=True)
    xt = torch.from_numpy(x).to(dtype)
    yt = torch.from_numpy(y).long()
    total = 0.0
    for i in range(0, len(x), SPLIT):
        loss = F.cross_entropy(m(xt[i:i + SPLIT]), yt[i:i + SPLIT], reduction="sum") / len(x)
        loss.backward()
        total += float(loss.detach())
    opt.step()
    out = {k: v.detach().numpy().astype(np.float64) if v.is_floating_point() else v.numpy()
           for k, v in m.state_dict().items()}
    for name, p in m.named_parameters():
        out[MOM_PREFIX + name] = opt.state[p]["momentum_buffer"].numpy().astype(np.float64)
    return out, total


def torch_loss(state, dtype, x, y):
    """Training-mode loss of a state on one mini-batch (micro-batched)."""
    m = build(state, dtype)
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(x), SPLIT):
            out = m(torch.from_numpy(x[i:i + SPLIT]).to(dtype))
            total += float(F.cross_entropy(out, torch.from_numpy(y[i:i + SPLIT]).long(),
                                           reduction="sum") / len(x))
    return total


def group_of(name):
    """(part, kind): part stem/layer1..4/fc/momentum, kind conv/bn.*/fc.*."""
    mom = name.startswith(MOM_PREFIX)
    if mom:
        name = name[len(MOM_PREFIX):]
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
    return ("momentum " + part if mom else part), kind


def rel_err(x, ref, before):
    """max|x - ref| / max|ref - before| (before None: / max|ref|)."""
    diff = float(np.max(np.abs(x.astype(np.float64) - ref)))
    scale = float(np.max(np.abs(ref - before))) if before is not None else 0.0
    if scale == 0.0:
        scale = float(np.max(np.abs(ref)))
    return diff / scale if scale > 0 else diff


def compare(title, ours, ref64, ref32, before):
    """Per-group table of ours and torch fp32 against ref64; asserts FACTOR."""
    groups = {}
    for name in sorted(ref64):
        if name.endswith("num_batches_tracked"):
            continue
        b = None if name.startswith(MOM_PREFIX) else before[name].astype(np.float64)
        if name not in ours:
            check(False, f"{title}: {name} missing from our checkpoint")
            continue
        eo = rel_err(ours[name], ref64[name], b)
        et = rel_err(ref32[name], ref64[name], b)
        a = groups.setdefault(group_of(name), [0.0, 0.0, 0, ""])
        if eo >= a[0]:
            a[0], a[3] = eo, name
        a[1] = max(a[1], et)
        a[2] += 1
    print(f"\n{title}: max relative error vs PyTorch float64 per group")
    print(f"{'part':16s} {'kind':16s} {'n':>3s} {'ours fp32':>10s} {'torch fp32':>10s} "
          f"{'ratio':>6s}  worst tensor (ours)")
    for (part, kind), (eo, et, cnt, wname) in sorted(groups.items()):
        ratio = eo / et if et > 0 else 0.0
        print(f"{part:16s} {kind:16s} {cnt:3d} {eo:10.2e} {et:10.2e} {ratio:6.2f}  {wname}")
    bad = [(g, v) for g, v in sorted(groups.items()) if v[0] > FACTOR * v[1] + FLOOR]
    worst = max(groups.items(), key=lambda kv: kv[1][0] / max(kv[1][1], 1e-30))
    check(not bad, f"{title}: every group within {FACTOR:g}x torch fp32 (+{FLOOR:g}); worst "
                   f"ratio {worst[1][0] / max(worst[1][1], 1e-30):.2f} ({' '.join(worst[0])})"
          + "".join(f"; {' '.join(g)}: {v[0]:.2e} vs {v[1]:.2e}" for g, v in bad))


def check_tracked(title, ours, want):
    names = [k for k in ours if k.endswith("num_batches_tracked")]
    bad = [k for k in names if ours[k].dtype != np.int64 or ours[k].shape != ()
           or int(ours[k]) != want]
    check(len(names) == 53 and not bad,
          f"{title}: num_batches_tracked is an I64 scalar = {want} in all {len(names)} BN layers"
          + (f" (wrong: {bad[0]} = {ours[bad[0]]!r})" if bad else ""))


def check_loss(title, ours, ref64, ref32):
    rel = abs(ours - ref64) / abs(ref64)
    rel32 = abs(ref32 - ref64) / abs(ref64)
    check(rel <= LOSS_RTOL, f"{title}: ours {ours:.7f}, torch fp64 {ref64:.7f}, fp32 "
                            f"{ref32:.7f} (rel. error ours {rel:.1e}, torch fp32 {rel32:.1e})")


def check_torchvision_layout(title, saved):
    tv = torchvision.models.resnet50(num_classes=CLASSES).state_dict()
    bad = [k for k in tv if k not in saved or tuple(saved[k].shape) != tuple(tv[k].shape)
           or saved[k].dtype != tv[k].numpy().dtype]
    extra = [k for k in saved if k not in tv]
    check(not bad and not extra,
          f"{title}: {len(saved)} tensors with torchvision's names, shapes and dtypes"
          + (f" (mismatch {bad[:3]}, extra {extra[:3]})" if bad or extra else ""))
    m = torchvision.models.resnet50(num_classes=CLASSES)
    try:
        m.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in saved.items()}, strict=True)
        check(True, f"{title}: torchvision load_state_dict(strict=True) accepts it")
    except RuntimeError as e:
        check(False, f"{title}: load_state_dict(strict=True): {e}")


class Runner:
    """Runs pipeline-run on work/plan.yaml; extra: more arguments (--device-map)."""

    def __init__(self, exe, work, extra=()):
        self.exe, self.work, self.extra = exe, work, list(extra)

    def __call__(self, load, steps, save, weights_only):
        cmd = [self.exe, os.path.join(self.work, "plan.yaml"), "--load", load,
               "--steps", str(steps), "--save", save, "--json"] + self.extra
        if weights_only:
            cmd.append("--weights-only")
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print("command failed:", " ".join(cmd))
            print(r.stderr)
            raise SystemExit(1)
        tensors, meta = st.load(save)
        return json.loads(r.stdout), tensors, meta


def main():
    if len(sys.argv) not in (2, 4) or (len(sys.argv) == 4 and sys.argv[2] != "--keep"):
        print(__doc__)
        return 2
    exe = os.path.abspath(sys.argv[1])
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    tmp = None
    if len(sys.argv) == 4:
        work = sys.argv[3]
        os.makedirs(work, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="pp-torch-")
        work = tmp.name
    path = lambda name: os.path.join(work, name)  # noqa: E731

    rng = np.random.default_rng(7)
    images = rng.integers(0, 256, size=(2 * BATCH, 3, IMAGE, IMAGE), dtype=np.uint8)
    labels = rng.integers(0, CLASSES, size=(2 * BATCH,), dtype=np.uint8)
    write_idx(path("images.idx"), images)
    write_idx(path("labels.idx"), labels)
    with open(path("plan.yaml"), "w") as f:
        f.write(PLAN.format(classes=CLASSES, batch=BATCH, split=SPLIT, lr=LR, momentum=MOMENTUM,
                            wd=WD, mean=json.dumps(MEAN), std=json.dumps(STD)))
    x = normalise(images)
    y = labels.astype(np.int64)
    x0, y0, x1, y1 = x[:BATCH], y[:BATCH], x[BATCH:], y[BATCH:]
    run = Runner(exe, work)

    init = make_init(1)
    st.save(path("init.safetensors"), init)

    # ---- (a) step 1 from torchvision's weights ----
    j1, ours1, meta1 = run(path("init.safetensors"), 1, path("step1.safetensors"), False)
    ref64, loss64 = torch_step(init, torch.float64, x0, y0)
    ref32, loss32 = torch_step(init, torch.float32, x0, y0)
    check(sorted(ours1) == sorted(ref64),
          f"step-1 checkpoint: {len(init)} torchvision tensors + "
          f"{len(ref64) - len(init)} momentum buffers under {MOM_PREFIX}*")
    check(meta1.get("pipeline-run.steps") == "1", "step-1 checkpoint metadata: 1 step done")
    compare("step 1 (from torchvision)", ours1, ref64, ref32, init)
    check_tracked("step 1", ours1, 3 + BATCH // SPLIT)
    check_loss("step 1 loss (--json losses[0])", j1["losses"][0], loss64, loss32)

    # ---- (a) step 2, momentum in use, from our step-1 state ----
    j2, ours2, _ = run(path("init.safetensors"), 2, path("step2.safetensors"), True)
    start = {k: v for k, v in ours1.items()}
    ref64b, loss64b = torch_step(start, torch.float64, x1, y1)
    ref32b, loss32b = torch_step(start, torch.float32, x1, y1)
    ref64b = {k: v for k, v in ref64b.items() if not k.startswith(MOM_PREFIX)}
    compare("step 2 (from our step-1 weights and momentum)", ours2, ref64b, ref32b, ours1)
    check_tracked("step 2", ours2, 3 + 2 * BATCH // SPLIT)
    check(j2["losses"][0] == j1["losses"][0], "two-step run repeats the one-step loss bitwise")
    check_loss("step 2 loss (--json losses[1])", j2["losses"][1], loss64b, loss32b)

    # ---- (a) resume: step-1 checkpoint + one step == two steps, bitwise ----
    _, resumed, _ = run(path("step1.safetensors"), 1, path("resumed.safetensors"), True)
    diff = [k for k in ours2 if k not in resumed or ours2[k].tobytes() != resumed[k].tobytes()]
    check(not diff and len(resumed) == len(ours2),
          "resume from the step-1 checkpoint reproduces the two-step run bitwise"
          + (f" (differ: {diff[:3]})" if diff else ""))

    # ---- (b) ours -> torchvision ----
    _, w1, _ = run(path("init.safetensors"), 1, path("step1-weights.safetensors"), True)
    check_torchvision_layout("step-1 --weights-only checkpoint", w1)
    check_torchvision_layout("step-2 --weights-only checkpoint", ours2)
    l64 = torch_loss(w1, torch.float64, x1, y1)
    rel = abs(l64 - j2["losses"][1]) / abs(l64)
    check(rel <= LOSS_RTOL, f"our step-1 weights in torchvision (train mode, second batch): loss "
                            f"{l64:.7f}; ours printed {j2['losses'][1]:.7f} (rel {rel:.1e})")
    return CHECKS.exit_code()


if __name__ == "__main__":
    rc = main()
    if rc != 2:
        CHECKS.summary("crosscheck")
    sys.exit(rc)
