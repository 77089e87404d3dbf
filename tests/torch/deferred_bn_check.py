"""deferred_bn_check.py - deferred batch-norm statistics against PyTorch's
BatchNorm2d over the whole mini-batch.

Usage: /usr/bin/python3 deferred_bn_check.py PIPELINE_RUN [--keep DIR]

A ResNet-18 (cifar stem, 10 classes, 3x16x16 IDX images, a torchvision
initialisation with perturbed running statistics) trains one step of batch 8
with `batch.deferred_batch_norm: true`, in micro-batches of 1, 2, 4 and 8,
on two stages. For each split size PyTorch runs the same micro-batches one
after the other in training mode (each normalised by its own statistics);
a hook keeps every batch norm's input of every micro-batch, and the
reference running statistics are those of nn.BatchNorm2d over the whole
mini-batch of those inputs: (1 - 0.1) * running + 0.1 * (mean, unbiased
variance) in float64.

- every batch norm's running mean and variance within fp32 rounding of the
  reference (max error / max |reference| <= 1e-5; PyTorch float32's own
  activations differ from ours by float rounding too), for every split size;
- the first batch norm (bn1) sees the same input whatever the split: its
  running statistics equal, within 1e-6 relative, torch.nn.BatchNorm2d's
  after one float32 forward of the whole mini-batch, for every split size;
- num_batches_tracked counts one per step (PyTorch's over the mini-batch),
  not one per micro-batch;
- without deferral (split 2) bn1's statistics are those of two updates, which
  differ from the deferred ones by far more than rounding (the option acts).
Exit status: 0 pass, 1 fail, 2 usage, 77 skip (no torch/torchvision/numpy).
"""

import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:  # the project's tests must not require PyTorch
    print(f"skip: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crosscheck as cc  # noqa: E402
import recipe_check as rc  # noqa: E402
import st  # noqa: E402

BATCH, IMAGE, TRACKED = 8, 16, 5
PLAN = """\
model: {{name: resnet18, num_classes: 10, in_channels: 3, stem: cifar}}
batch: {{size: 8, split_size: {split}, deferred_batch_norm: {deferred}}}
schedule: 1f1b
optimizer: {{type: sgd, lr: 0.1, momentum: 0.9}}
data: {{format: idx, images: images.idx, labels: labels.idx, shuffle: false}}
seed: 1
steps: 1
stages:
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1, layer2]
  - device: cpu:1
    layers: [layer3, layer4, avgpool, fc]
"""


def reference(init, x, split):
    """Every batch norm's running statistics over the whole mini-batch of the
    inputs it sees when the micro-batches of `split` run one after another."""
    m = rc.model()
    m.load_state_dict({k: torch.from_numpy(init[k].copy()) for k in m.state_dict()}, strict=True)
    m = m.float().train()
    seen = {}
    hooks = [mod.register_forward_pre_hook(
        lambda mod, inp, name=name: seen.setdefault(name, []).append(inp[0].detach().double()))
        for name, mod in m.named_modules() if isinstance(mod, torch.nn.BatchNorm2d)]
    with torch.no_grad():
        for i in range(0, len(x), split):
            m(torch.from_numpy(x[i:i + split]))
    for h in hooks:
        h.remove()
    out = {}
    for name, parts in seen.items():
        a = torch.cat(parts)
        mean = a.mean(dim=(0, 2, 3))
        var = a.var(dim=(0, 2, 3), unbiased=True)
        out[name + ".running_mean"] = 0.9 * init[name + ".running_mean"] + 0.1 * mean.numpy()
        out[name + ".running_var"] = 0.9 * init[name + ".running_var"] + 0.1 * var.numpy()
    return out


def run(exe, work, split, deferred):
    with open(os.path.join(work, "plan.yaml"), "w") as f:
        f.write(PLAN.format(split=split, deferred="true" if deferred else "false"))
    save = os.path.join(work, f"s{split}{'d' if deferred else ''}.safetensors")
    r = subprocess.run([exe, os.path.join(work, "plan.yaml"), "--load",
                        os.path.join(work, "init.safetensors"), "--save", save],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr)
        raise SystemExit(f"pipeline-run failed (split {split})")
    return st.load(save)[0]


def main():
    if len(sys.argv) not in (2, 4) or (len(sys.argv) == 4 and sys.argv[2] != "--keep"):
        print(__doc__)
        return 2
    exe = os.path.abspath(sys.argv[1])
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    tmp = None if len(sys.argv) == 4 else tempfile.TemporaryDirectory(prefix="pp-dbn-")
    work = sys.argv[3] if tmp is None else tmp.name
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(13)
    images = rng.integers(0, 256, size=(BATCH, 3, IMAGE, IMAGE), dtype=np.uint8)
    cc.write_idx(os.path.join(work, "images.idx"), images)
    cc.write_idx(os.path.join(work, "labels.idx"), rng.integers(0, 10, BATCH, dtype=np.uint8))
    x = images.astype(np.float32) / np.float32(255.0)
    init = rc.make_init(4)
    for k in init:
        if k.endswith("num_batches_tracked"):
            init[k] = np.array(TRACKED - 1, dtype=np.int64)
    st.save(os.path.join(work, "init.safetensors"), init)

    # torch.nn.BatchNorm2d's own statistics of the stem's batch norm over the whole batch
    m = rc.model()
    m.load_state_dict({k: torch.from_numpy(init[k].copy()) for k in m.state_dict()}, strict=True)
    m.train()
    with torch.no_grad():
        m.bn1(m.conv1(torch.from_numpy(x)))
    bn1_torch = (m.bn1.running_mean.numpy(), m.bn1.running_var.numpy())

    for split in (1, 2, 4, 8):
        ours = run(exe, work, split, True)
        ref = reference(init, x, split)
        worst, wname = 0.0, ""
        for name, want in ref.items():
            e = float(np.max(np.abs(ours[name] - want)) / np.max(np.abs(want)))
            if e >= worst:
                worst, wname = e, name
        cc.check(len(ref) == 40 and worst <= 1e-5,
                 f"split {split}: the {len(ref)} running statistics within {worst:.1e} of "
                 f"BatchNorm2d's over the whole mini-batch (worst {wname})")
        e1 = max(float(np.max(np.abs(ours["bn1." + k] - t) / np.abs(t)))
                 for k, t in zip(("running_mean", "running_var"), bn1_torch))
        cc.check(e1 <= 1e-6, f"split {split}: bn1's running statistics within {e1:.1e} of "
                             f"torch.nn.BatchNorm2d's on the whole mini-batch")
        tracked = {int(v) for k, v in ours.items() if k.endswith("num_batches_tracked")}
        cc.check(tracked == {TRACKED}, f"split {split}: num_batches_tracked {sorted(tracked)}, "
                                       f"{TRACKED} (one per step)")
    plain = run(exe, work, 2, False)
    d = float(np.max(np.abs(plain["bn1.running_var"] - bn1_torch[1]) / np.abs(bn1_torch[1])))
    cc.check(d > 1e-4, f"without deferral bn1's running variance is {d:.1e} away (two updates)")
    return cc.CHECKS.exit_code()


if __name__ == "__main__":
    rc_ = main()
    if rc_ != 2:
        cc.CHECKS.summary("deferred_bn_check")
    sys.exit(rc_)
