"""bf16_check.py - pipeline-run's bf16 mixed precision against PyTorch's
torch.autocast("cpu", dtype=torch.bfloat16), both measured against float64.

Usage: /usr/bin/python3 bf16_check.py PIPELINE_RUN [--keep DIR]

crosscheck.py's setting (ResNet-50, 10 classes, 3x64x64 IDX images, batch 8
in micro-batches of 4, SGD lr 0.01 momentum 0.9 weight decay 1e-4, a
torchvision initialisation with perturbed batch norms) with `precision: bf16`,
in 1, 2 and 4 stages:

- the 1-, 2- and 4-stage runs save bitwise equal checkpoints (steps 1 and 2);
- step 1 from torchvision's weights, and step 2 (momentum in use) from our
  step-1 weights and momentum buffers, are compared with the same step in
  PyTorch float64 (the reference) and in PyTorch float32 under bf16 autocast
  (PyTorch's own mixed precision). The error of a tensor is
  max|x - ref64| / max|ref64 - before| (the error of what the step changed;
  momentum buffers: / max|ref64|), the maximum over each group (network part x
  tensor kind). Ours must be within FACTOR (3) of PyTorch bf16's error in every
  group, plus FLOOR for groups at fp32 rounding level;
- the losses of --json are within FACTOR of PyTorch bf16's loss error plus
  LOSS_FLOOR, one bf16 step (2^-7) relative: a single scalar's error is
  dominated by chance, unlike the per-group maxima above;
- the checkpoints keep fp32 master weights under torchvision's names
  (load_state_dict(strict=True)), num_batches_tracked counted as in fp32.

Exit status: 0 pass, 1 fail, 2 usage, 77 skip (no torch/torchvision/numpy).
"""

import json
import os
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import torchvision  # noqa: F401
except ImportError as e:  # the project's tests must not require PyTorch
    print(f"skip: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crosscheck as cc  # noqa: E402
import st  # noqa: E402

FACTOR = 3.0
FLOOR = 1e-5
LOSS_FLOOR = 2.0 ** -7

LAYOUTS = {
    1: """\
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1, layer2, layer3, layer4, avgpool, fc]
""",
    2: """\
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1, layer2]
  - device: cpu:1
    layers: [layer3, layer4, avgpool, fc]
""",
    4: """\
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1]
  - device: cpu:1
    layers: [layer2, layer3.0]
  - device: cpu:2
    layers: [layer3.1, layer3.2, layer3.3, layer3.4, layer3.5]
  - device: cpu:3
    layers: [layer4, avgpool, fc]
""",
}


def plan_text(stages):
    text = cc.PLAN.format(classes=cc.CLASSES, batch=cc.BATCH, split=cc.SPLIT, lr=cc.LR,
                          momentum=cc.MOMENTUM, wd=cc.WD, mean=json.dumps(cc.MEAN),
                          std=json.dumps(cc.STD))
    text = text.replace("schedule: 1f1b\n", "schedule: 1f1b\nprecision: bf16\n")
    return text[:text.index("stages:\n") + len("stages:\n")] + LAYOUTS[stages]


def torch_step(state, dtype, x, y, autocast):
    """cc.torch_step, optionally with the forward and loss under bf16 autocast."""
    m = cc.build(state, dtype)
    opt = torch.optim.SGD(m.parameters(), lr=cc.LR, momentum=cc.MOMENTUM, weight_decay=cc.WD)
    for name, p in m.named_parameters():
        if cc.MOM_PREFIX + name in state:
            opt.state[p]["momentum_buffer"] = torch.from_numpy(
                state[cc.MOM_PREFIX + name].copy()).to(dtype)
    opt.zero_grad(set_to_none=True)
    xt = torch.from_numpy(x).to(dtype)
    yt = torch.from_numpy(y).long()
    total = 0.0
    for i in range(0, len(x), cc.SPLIT):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = m(xt[i:i + cc.SPLIT])
            loss = F.cross_entropy(out.float() if autocast else out, yt[i:i + cc.SPLIT],
                                   reduction="sum") / len(x)
        loss.backward()
        total += float(loss.detach())
    opt.step()
    out = {k: v.detach().numpy().astype(np.float64) if v.is_floating_point() else v.numpy()
           for k, v in m.state_dict().items()}
    for name, p in m.named_parameters():
        out[cc.MOM_PREFIX + name] = opt.state[p]["momentum_buffer"].numpy().astype(np.float64)
    return out, total


def compare(title, ours, ref64, refbf, before):
    """Per-group table of ours and torch bf16 autocast against ref64."""
    groups = {}
    for name in sorted(ref64):
        if name.endswith("num_batches_tracked"):
            continue
        b = None if name.startswith(cc.MOM_PREFIX) else before[name].astype(np.float64)
        if name not in ours:
            cc.check(False, f"{title}: {name} missing from our checkpoint")
            continue
        eo = cc.rel_err(ours[name], ref64[name], b)
        et = cc.rel_err(refbf[name], ref64[name], b)
        a = groups.setdefault(cc.group_of(name), [0.0, 0.0, 0, ""])
        if eo >= a[0]:
            a[0], a[3] = eo, name
        a[1] = max(a[1], et)
        a[2] += 1
    print(f"\n{title}: max relative error vs PyTorch float64 per group")
    print(f"{'part':16s} {'kind':16s} {'n':>3s} {'ours bf16':>10s} {'torch bf16':>10s} "
          f"{'ratio':>6s}  worst tensor (ours)")
    for (part, kind), (eo, et, cnt, wname) in sorted(groups.items()):
        ratio = eo / et if et > 0 else 0.0
        print(f"{part:16s} {kind:16s} {cnt:3d} {eo:10.2e} {et:10.2e} {ratio:6.2f}  {wname}")
    bad = [(g, v) for g, v in sorted(groups.items()) if v[0] > FACTOR * v[1] + FLOOR]
    worst = max(groups.items(), key=lambda kv: kv[1][0] / max(kv[1][1], 1e-30))
    eo_all = max(v[0] for v in groups.values())
    et_all = max(v[1] for v in groups.values())
    cc.check(not bad, f"{title}: every group within {FACTOR:g}x torch bf16 autocast (+{FLOOR:g}); "
                      f"worst ratio {worst[1][0] / max(worst[1][1], 1e-30):.2f} "
                      f"({' '.join(worst[0])}); overall max error ours {eo_all:.2e}, "
                      f"torch bf16 {et_all:.2e}"
             + "".join(f"; {' '.join(g)}: {v[0]:.2e} vs {v[1]:.2e}" for g, v in bad))


def check_loss(title, ours, ref64, refbf):
    rel = abs(ours - ref64) / abs(ref64)
    relbf = abs(refbf - ref64) / abs(ref64)
    cc.check(rel <= FACTOR * relbf + LOSS_FLOOR,
             f"{title}: ours {ours:.7f}, torch fp64 {ref64:.7f}, torch bf16 {refbf:.7f} "
             f"(rel. error ours {rel:.1e}, torch bf16 {relbf:.1e})")


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
        tmp = tempfile.TemporaryDirectory(prefix="pp-bf16-")
        work = tmp.name
    path = lambda name: os.path.join(work, name)  # noqa: E731

    rng = np.random.default_rng(7)
    images = rng.integers(0, 256, size=(2 * cc.BATCH, 3, cc.IMAGE, cc.IMAGE), dtype=np.uint8)
    labels = rng.integers(0, cc.CLASSES, size=(2 * cc.BATCH,), dtype=np.uint8)
    cc.write_idx(path("images.idx"), images)
    cc.write_idx(path("labels.idx"), labels)
    x = cc.normalise(images)
    y = labels.astype(np.int64)
    x0, y0, x1, y1 = x[:cc.BATCH], y[:cc.BATCH], x[cc.BATCH:], y[cc.BATCH:]
    init = cc.make_init(1)
    st.save(path("init.safetensors"), init)

    # ours in 1, 2 and 4 stages: step 1 (with momentum) and two steps
    results = {}
    for s in (1, 2, 4):
        with open(path("plan.yaml"), "w") as f:
            f.write(plan_text(s))
        run = cc.Runner(exe, work)
        j1, ours1, _ = run(path("init.safetensors"), 1, path(f"step1-{s}.safetensors"), False)
        j2, ours2, _ = run(path("init.safetensors"), 2, path(f"step2-{s}.safetensors"), False)
        results[s] = (j1, ours1, j2, ours2)
    j1, ours1, j2, ours2 = results[1]
    for s in (2, 4):
        for step, (a, b) in ((1, (ours1, results[s][1])), (2, (ours2, results[s][3]))):
            diff = [k for k in a if k not in b or a[k].tobytes() != b[k].tobytes()]
            cc.check(not diff and len(a) == len(b),
                     f"{s} stages, step {step}: checkpoint bitwise equal to 1 stage"
                     + (f" (differ: {diff[:3]})" if diff else ""))
        cc.check(results[s][2]["losses"] == j2["losses"],
                 f"{s} stages: losses {results[s][2]['losses']} equal 1 stage's")

    # step 1 from torchvision's weights
    ref64, loss64 = torch_step(init, torch.float64, x0, y0, False)
    refbf, lossbf = torch_step(init, torch.float32, x0, y0, True)
    cc.check(sorted(ours1) == sorted(ref64) and
             all(ours1[k].dtype == (np.int64 if k.endswith("num_batches_tracked") else np.float32)
                 for k in ours1),
             "step-1 checkpoint: fp32 master weights and momentum, torchvision's names")
    compare("step 1 (from torchvision)", ours1, ref64, refbf, init)
    cc.check_tracked("step 1", ours1, 3 + cc.BATCH // cc.SPLIT)
    check_loss("step 1 loss", j1["losses"][0], loss64, lossbf)

    # step 2 (momentum in use) from our step-1 state
    ref64b, loss64b = torch_step(ours1, torch.float64, x1, y1, False)
    refbfb, lossbfb = torch_step(ours1, torch.float32, x1, y1, True)
    compare("step 2 (from our step-1 weights and momentum)", ours2, ref64b, refbfb, ours1)
    check_loss("step 2 loss", j2["losses"][1], loss64b, lossbfb)
    weights = {k: v for k, v in ours2.items() if not k.startswith(cc.MOM_PREFIX)}
    cc.check_torchvision_layout("step-2 checkpoint (weights)", weights)
    return 1 if cc.failures else 0


if __name__ == "__main__":
    rc = main()
    if rc != 2:
        print(f"\n{len(cc.failures)} failure(s)" if rc else "\nall checks passed")
    sys.exit(rc)
