"""recipe_check.py - the training recipe against PyTorch: AdamW with gradient
clipping, label smoothing and weight-decay groups, and top-5 accuracy.

Usage: /usr/bin/python3 recipe_check.py PIPELINE_RUN [--keep DIR]

A ResNet-18 (cifar stem, 10 classes, 3x16x16 IDX images) on two stages, batch
8 in micro-batches of 4, with
  optimizer: {type: adamw, lr 1e-3, betas [0.9, 0.95], eps 1e-8,
              weight_decay 0.05, norm_weight_decay 0, bias_weight_decay 0.01,
              clip_grad_norm 1.0}
  loss: {label_smoothing: 0.1}
PyTorch runs the same semantics: micro-batches one after the other,
CrossEntropyLoss(label_smoothing=0.1, reduction sum) / B, gradients
accumulated, clip_grad_norm_(max_norm 1.0) over every parameter, then one
torch.optim.AdamW step whose parameter groups are torchvision's
set_weight_decay (train.py's --norm-weight-decay 0 --bias-weight-decay 0.01:
the custom key "bias" first, a batch norm's biases included, then the batch
norms' other parameters, then the rest), in float64 and float32.

- Step 1 from a torchvision initialisation (perturbed batch norms, --load),
  step 2 from our step-1 weights and AdamW state (exp_avg, exp_avg_sq, step:
  one step from equal states, as crosscheck.py argues). The error of a
  tensor is max|x - ref64| / max|ref64 - before| (state: / max|ref64|), the
  maximum per group (network part x tensor kind); ours must be within FACTOR
  (3) of PyTorch float32's own error in every group, plus FLOOR for groups at
  fp32 rounding level. AdamW divides each gradient element by its own
  magnitude, so an element whose gradient is near eps turns the gradient's
  rounding (ours is the smaller: see exp_avg's rows) into an update error
  many times larger, and which tensor holds such an element is chance:
  PyTorch float32's error is therefore the largest over its plain run, its
  channels_last run and two runs from the weights moved one ulp each (up or
  down at random; tests/gpu/conditioning.py's yardstick), as bf16_check.py
  takes the largest loss error over nudged runs. The step counts saved are 1
  and 2 for every parameter.
- The gradient norm of --json (before clipping) within FACTOR of PyTorch
  float32's error against float64's (the same runs; at least 1e-6
  relative), and clipping active (norm above 1); the losses within 1e-4 of
  float64's.
- Each parameter takes its group's decay: the step-1 run again with
  norm_weight_decay 0.05 changes the batch norms' weights by lr * 0.05 * w
  (to rounding) and nothing else by a bit (their biases take
  bias_weight_decay first, as torchvision's custom key "bias" does).
- Top-5: --eval-only on 64 test images gives torchvision's top-5 accuracy
  (the label among the five largest float64 logits, ties to the lower class;
  samples whose fifth and sixth logits lie within 1e-4 are not counted) and
  top-1 accuracy, and the summary prints it.
Exit status: 0 pass, 1 fail, 2 usage, 77 skip (no torch/torchvision/numpy).
"""

import json
import os
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
import crosscheck as cc  # noqa: E402
import adamw_state  # noqa: E402
import st  # noqa: E402
from eval_check import cifar_resnet18  # noqa: E402

CLASSES, BATCH, SPLIT, IMAGE, TEST = 10, 8, 4, 16, 64
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.95), 1e-8, 0.05
NORM_WD, BIAS_WD, CLIP, SMOOTH = 0.0, 0.01, 1.0, 0.1
FACTOR, FLOOR = 3.0, 1e-5
PREFIXES = adamw_state.PREFIXES

PLAN = f"""\
model: {{name: resnet18, num_classes: {CLASSES}, in_channels: 3, stem: cifar}}
batch: {{size: {BATCH}, split_size: {SPLIT}}}
schedule: 1f1b
optimizer:
  type: adamw
  lr: {LR}
  betas: [{BETAS[0]}, {BETAS[1]}]
  eps: {EPS}
  weight_decay: {WD}
  norm_weight_decay: {NORM_WD}
  bias_weight_decay: {BIAS_WD}
  clip_grad_norm: {CLIP}
loss: {{label_smoothing: {SMOOTH}}}
data: {{format: idx, images: images.idx, labels: labels.idx, shuffle: false}}
eval: {{images: test-images.idx, labels: test-labels.idx, batch_size: 16}}
seed: 1
steps: 1
stages:
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1, layer2]
  - device: cpu:1
    layers: [layer3, layer4, avgpool, fc]
"""


def model():
    return cifar_resnet18()


def make_init(seed):
    return cc.make_init(seed, model)


def param_groups(m):
    """torchvision's set_weight_decay with norm_weight_decay and the custom key "bias"."""
    groups = {"bias": [], "norm": [], "other": []}
    for mod in m.modules():
        for name, p in mod.named_parameters(recurse=False):
            if name == "bias":
                groups["bias"].append(p)
            elif isinstance(mod, torch.nn.BatchNorm2d):
                groups["norm"].append(p)
            else:
                groups["other"].append(p)
    return [{"params": groups["bias"], "weight_decay": BIAS_WD},
            {"params": groups["norm"], "weight_decay": NORM_WD},
            {"params": groups["other"], "weight_decay": WD}]


def moved(state, seed):
    """state with every parameter moved one ulp of float32, up or down at random"""
    rng = np.random.default_rng(seed)
    out = dict(state)
    for k, v in state.items():
        if v.dtype == np.float32 and not k.startswith("optimizer.") and "running_" not in k:
            out[k] = np.nextafter(v, np.where(rng.random(v.shape) < 0.5, np.inf, -np.inf),
                                  dtype=np.float32)
    return out


def torch_step(state, dtype, x, y, layout=torch.contiguous_format):
    """One step of our semantics in PyTorch from state (weights, and AdamW
    state when it holds optimizer.*); returns (state after, in float64, with
    the AdamW state under our names; the loss; the norm before clipping)."""
    m = model()
    m.load_state_dict({k: torch.from_numpy(state[k].copy()) for k in m.state_dict()}, strict=True)
    m = m.to(dtype).to(memory_format=layout).train()
    opt = torch.optim.AdamW(param_groups(m), lr=LR, betas=BETAS, eps=EPS)
    names = {p: n for n, p in m.named_parameters()}
    adamw_state.load(opt, names, state, dtype)
    opt.zero_grad(set_to_none=True)
    xt = torch.from_numpy(x).to(dtype).contiguous(memory_format=layout)
    yt = torch.from_numpy(y).long()
    total = 0.0
    for i in range(0, len(x), SPLIT):
        loss = F.cross_entropy(m(xt[i:i + SPLIT]), yt[i:i + SPLIT], label_smoothing=SMOOTH,
                               reduction="sum") / len(x)
        loss.backward()
        total += float(loss.detach())
    norm = float(torch.nn.utils.clip_grad_norm_(m.parameters(), CLIP))
    opt.step()
    out = {k: v.detach().contiguous().numpy().astype(np.float64) if v.is_floating_point()
           else v.numpy() for k, v in m.state_dict().items()}
    adamw_state.save(out, opt, names)
    return out, total, norm


def group_of(name):
    state = next((p for p in PREFIXES if name.startswith(p)), "")
    base = name[len(state):]
    part = base.split(".")[0]
    part = "stem" if part in ("conv1", "bn1") else part
    leaf = base.rsplit(".", 1)[1]
    owner = base.rsplit(".", 1)[0].rsplit(".", 1)[-1]
    kind = ("fc." + leaf if part == "fc" else "conv.weight"
            if owner.startswith("conv") or ".downsample.0." in base else "bn." + leaf)
    return (state.split(".")[1] + " " + part if state else part), kind


def torch32(state, x, y):
    """PyTorch float32's runs: plain, channels_last, from weights moved one ulp
    (the states after the step, and the gradient norms)"""
    runs = [torch_step(state, torch.float32, x, y),
            torch_step(state, torch.float32, x, y, torch.channels_last),
            torch_step(moved(state, 5), torch.float32, x, y),
            torch_step(moved(state, 6), torch.float32, x, y)]
    return [r[0] for r in runs], [r[2] for r in runs]


def check_norm(title, ours, ref64, norms32):
    """the gradient norm within FACTOR of PyTorch float32's largest error (1e-6 at least)"""
    err32 = max(abs(n - ref64) for n in norms32)
    cc.check(abs(ours - ref64) <= FACTOR * err32 + 1e-6 * ref64,
             f"{title} gradient norm {ours:.7f}, torch fp64 {ref64:.7f} (rel. error "
             f"{abs(ours - ref64) / ref64:.1e}, torch fp32's {err32 / ref64:.1e})")


def compare(title, ours, ref64, runs32, before):
    """Per-group table of ours and PyTorch float32 (the largest error of its
    runs) against ref64; asserts FACTOR."""
    groups = {}
    for name in sorted(ref64):
        if name.endswith("num_batches_tracked") or name.startswith(PREFIXES[2]):
            continue
        if name not in ours:
            cc.check(False, f"{title}: {name} missing from our checkpoint")
            continue
        b = None if name.startswith("optimizer.") else before[name].astype(np.float64)
        eo = cc.rel_err(ours[name], ref64[name], b)
        et = max(cc.rel_err(r[name], ref64[name], b) for r in runs32)
        a = groups.setdefault(group_of(name), [0.0, 0.0, 0, ""])
        if eo >= a[0]:
            a[0], a[3] = eo, name
        a[1] = max(a[1], et)
        a[2] += 1
    print(f"\n{title}: max relative error vs PyTorch float64 per group")
    print(f"{'part':22s} {'kind':12s} {'n':>3s} {'ours fp32':>10s} {'torch fp32':>10s} "
          f"{'ratio':>6s}  worst tensor (ours)")
    for (part, kind), (eo, et, cnt, wname) in sorted(groups.items()):
        print(f"{part:22s} {kind:12s} {cnt:3d} {eo:10.2e} {et:10.2e} "
              f"{eo / et if et > 0 else 0:6.2f}  {wname}")
    bad = [(g, v) for g, v in sorted(groups.items()) if v[0] > FACTOR * v[1] + FLOOR]
    worst = max(groups.items(), key=lambda kv: kv[1][0] / max(kv[1][1], 1e-30))
    cc.check(not bad, f"{title}: every group within {FACTOR:g}x torch fp32 (+{FLOOR:g}); worst "
                      f"ratio {worst[1][0] / max(worst[1][1], 1e-30):.2f} ({' '.join(worst[0])})"
             + "".join(f"; {' '.join(g)}: {v[0]:.2e} vs {v[1]:.2e}" for g, v in bad))


def check_steps(title, ours, want):
    steps = {k: int(v) for k, v in ours.items() if k.startswith(PREFIXES[2])}
    cc.check(len(steps) == 62 and set(steps.values()) == {want},
             f"{title}: {len(steps)} step counts, all {want}")


def run(exe, work, *args):
    r = subprocess.run([exe, os.path.join(work, "plan.yaml"), "--json", *args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr)
        raise SystemExit(f"pipeline-run {' '.join(args)} failed")
    return json.loads(r.stdout), r.stderr


def top5(logits, labels):
    """(top-5 hits, top-1 hits, ambiguous samples) with our tie rule"""
    hits5 = hits1 = amb = 0
    for z, lab in zip(logits, labels):
        rank = int(np.sum((z > z[lab]) | ((z == z[lab]) & (np.arange(len(z)) < lab))))
        srt = np.sort(z)[::-1]
        if abs(srt[4] - srt[5]) < 1e-4 and abs(z[lab] - srt[4]) < 1e-4:
            amb += 1
            continue
        hits5 += rank < 5
        hits1 += rank < 1
    return hits5, hits1, amb


def main():
    if len(sys.argv) not in (2, 4) or (len(sys.argv) == 4 and sys.argv[2] != "--keep"):
        print(__doc__)
        return 2
    exe = os.path.abspath(sys.argv[1])
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    tmp = None if len(sys.argv) == 4 else tempfile.TemporaryDirectory(prefix="pp-recipe-")
    work = sys.argv[3] if tmp is None else tmp.name
    os.makedirs(work, exist_ok=True)
    path = lambda name: os.path.join(work, name)  # noqa: E731
    rng = np.random.default_rng(11)
    images = rng.integers(0, 256, size=(2 * BATCH, 3, IMAGE, IMAGE), dtype=np.uint8)
    labels = rng.integers(0, CLASSES, size=(2 * BATCH,), dtype=np.uint8)
    test_images = rng.integers(0, 256, size=(TEST, 3, IMAGE, IMAGE), dtype=np.uint8)
    test_labels = rng.integers(0, CLASSES, size=(TEST,), dtype=np.uint8)
    for name, a in (("images", images), ("labels", labels), ("test-images", test_images),
                    ("test-labels", test_labels)):
        cc.write_idx(path(name + ".idx"), a)
    with open(path("plan.yaml"), "w") as f:
        f.write(PLAN)
    x = (images.astype(np.float32) / np.float32(255.0))
    y = labels.astype(np.int64)
    init = make_init(3)
    st.save(path("init.safetensors"), init)

    # step 1 from torchvision's weights
    j1, _ = run(exe, work, "--load", path("init.safetensors"), "--save", path("s1.safetensors"))
    ours1, _ = st.load(path("s1.safetensors"))
    ref64, loss64, norm64 = torch_step(init, torch.float64, x[:BATCH], y[:BATCH])
    runs32, norms32 = torch32(init, x[:BATCH], y[:BATCH])
    cc.check(sorted(ours1) == sorted(ref64),
             f"step-1 checkpoint: {len(init)} tensors + AdamW's state under optimizer.exp_avg., "
             f"optimizer.exp_avg_sq., optimizer.step. ({len(ours1)} in all)")
    compare("step 1 (from torchvision)", ours1, ref64, runs32, init)
    check_steps("step 1", ours1, 1)
    check_norm("step 1", j1["grad_norms"][0], norm64, norms32)
    cc.check(norm64 > CLIP, f"step 1 clips: the norm {norm64:.4f} is above {CLIP}")
    cc.check(abs(j1["losses"][0] - loss64) <= 1e-4 * abs(loss64),
             f"step 1 loss {j1['losses'][0]:.7f}, torch fp64 {loss64:.7f}")
    # the decay groups: another norm_weight_decay moves the batch norms' weights alone
    with open(path("plan.yaml"), "w") as f:
        f.write(PLAN.replace(f"norm_weight_decay: {NORM_WD}", "norm_weight_decay: 0.05"))
    run(exe, work, "--load", path("init.safetensors"), "--save", path("s1n.safetensors"))
    with open(path("plan.yaml"), "w") as f:
        f.write(PLAN)
    other, _ = st.load(path("s1n.safetensors"))
    bn_w = [k for k in other if k.endswith(".weight") and ("bn" in k or "downsample.1" in k)
            and not k.startswith("optimizer.")]
    # each weight moves by lr * 0.05 * w before the update, to two roundings of w
    moved_w = max(float(np.max(np.abs((other[k].astype(np.float64) - ours1[k])
                                      + LR * 0.05 * init[k].astype(np.float64))
                               / np.maximum(np.abs(init[k]), 1e-30))) for k in bn_w)
    same = [k for k in other if k not in bn_w and other[k].tobytes() != ours1[k].tobytes()]
    cc.check(len(bn_w) == 20 and moved_w < 2.4e-7 and not same,
             f"norm_weight_decay moves the {len(bn_w)} batch-norm weights by lr * decay * w "
             f"(within {moved_w:.1e} w of it) and nothing else"
             + (f" (also {same[:3]})" if same else ""))

    # step 2 from our step-1 state
    j2, _ = run(exe, work, "--load", path("s1.safetensors"), "--save", path("s2.safetensors"))
    ours2, _ = st.load(path("s2.safetensors"))
    ref64b, loss64b, norm64b = torch_step(ours1, torch.float64, x[BATCH:], y[BATCH:])
    runs32b, norms32b = torch32(ours1, x[BATCH:], y[BATCH:])
    compare("step 2 (from our step-1 weights and AdamW state)", ours2, ref64b, runs32b, ours1)
    check_steps("step 2", ours2, 2)
    check_norm("step 2", j2["grad_norms"][0], norm64b, norms32b)
    cc.check(abs(j2["losses"][0] - loss64b) <= 1e-4 * abs(loss64b),
             f"step 2 loss {j2['losses'][0]:.7f}, torch fp64 {loss64b:.7f}")

    # top-5 of an evaluation against torchvision's eval() in float64
    je, text = run(exe, work, "--eval-only", "--load", path("s2.safetensors"))
    m = model()
    m.load_state_dict({k: torch.from_numpy(ours2[k].copy()) for k in m.state_dict()}, strict=True)
    m = m.double().eval()
    with torch.no_grad():
        xt = torch.from_numpy(test_images.astype(np.float32) / np.float32(255.0)).double()
        logits = m(xt).numpy()
    hits5, hits1, amb = top5(logits, test_labels.astype(np.int64))
    ours5, ours_1 = je["eval"]["top5_accuracy"] * TEST, je["eval"]["accuracy"] * TEST
    cc.check(abs(ours5 - hits5) <= amb and abs(ours_1 - hits1) <= amb and 0 < hits5 < TEST,
             f"top-5: ours {ours5:.0f} of {TEST}, torchvision {hits5} ({amb} ambiguous); "
             f"top-1 ours {ours_1:.0f}, torchvision {hits1}")
    cc.check("top-5" in text, "the evaluation line prints top-5")
    return cc.CHECKS.exit_code()


if __name__ == "__main__":
    rc = main()
    if rc != 2:
        cc.CHECKS.summary("recipe_check")
    sys.exit(rc)
