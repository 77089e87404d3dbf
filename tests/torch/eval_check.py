"""eval_check.py - pipeline-run's evaluation against torchvision's model.eval().

Usage: /usr/bin/python3 eval_check.py PIPELINE_RUN

A ResNet-18 (cifar stem, 3 channels, 10 classes) with torchvision's
initialisation and perturbed batch-norm parameters and running statistics
(so that inference mode matters) is written as safetensors; 37 random 32x32
test images as IDX. `pipeline-run --eval-only --load` evaluates it in two
stages through the forward-only pipelined schedule, batch 8 in micro-batches
of 3 (so the last batch and micro-batch are partial); torchvision evaluates
the same weights in float64 and float32 with model.eval(). The mean test loss
must match float64 within 1e-5 relative (float32 PyTorch's own error is of
that order) and the accuracy exactly. Exit 77 without torch.
"""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import torchvision
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from crosscheck import write_idx  # noqa: E402

N, CLASSES = 37, 10

PLAN = """\
model: {name: resnet18, num_classes: 10, in_channels: 3, stem: cifar}
batch: {size: 8, split_size: 3}
data: {format: idx, images: images.idx, labels: labels.idx}
steps: 1
eval: {images: images.idx, labels: labels.idx, batch_size: 8}
stages:
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1, layer2]
  - device: cpu:1
    layers: [layer3, layer4, avgpool, fc]
"""


def cifar_resnet18():
    m = torchvision.models.resnet18(num_classes=CLASSES)
    m.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    torch.nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")
    m.maxpool = torch.nn.Identity()
    return m


def main():
    exe = sys.argv[1]
    torch.manual_seed(3)
    model = cifar_resnet18()
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                c = mod.num_features
                mod.weight.copy_(1.0 + 0.2 * torch.randn(c, generator=g))
                mod.bias.copy_(0.1 * torch.randn(c, generator=g))
                mod.running_mean.copy_(0.1 * torch.randn(c, generator=g))
                mod.running_var.copy_(1.0 + 0.3 * torch.rand(c, generator=g))
                mod.num_batches_tracked.fill_(5)
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, size=(N, 3, 32, 32), dtype=np.uint8)
    labels = rng.integers(0, CLASSES, size=(N,), dtype=np.uint8)
    work = tempfile.mkdtemp(prefix="pp-eval-")
    atexit.register(shutil.rmtree, work, True)  # gone on any exit
    write_idx(os.path.join(work, "images.idx"), images)
    write_idx(os.path.join(work, "labels.idx"), labels)
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    st.save(os.path.join(work, "weights.safetensors"), state)
    open(os.path.join(work, "plan.yaml"), "w").write(PLAN)
    r = subprocess.run([exe, os.path.join(work, "plan.yaml"), "--eval-only", "--load",
                        os.path.join(work, "weights.safetensors"), "--json"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(f"FAIL: pipeline-run exit {r.returncode}: {r.stderr}")
        return 1
    ours = json.loads(r.stdout)["eval"]
    x = torch.from_numpy(images.astype(np.float32) / np.float32(255.0))
    y = torch.from_numpy(labels.astype(np.int64))
    results = {}
    for name, dtype in (("float64", torch.float64), ("float32", torch.float32)):
        m = cifar_resnet18().to(dtype)
        m.load_state_dict(model.state_dict())
        m = m.to(dtype).eval()
        with torch.no_grad():
            logits = m(x.to(dtype))
        results[name] = (F.cross_entropy(logits, y).item(),
                         (logits.argmax(1) == y).double().mean().item())
    ref_loss, ref_acc = results["float64"]
    err_ours = abs(ours["loss"] - ref_loss) / ref_loss
    err_torch = abs(results["float32"][0] - ref_loss) / ref_loss
    ok_loss = err_ours <= 1e-5
    ok_acc = abs(ours["accuracy"] - ref_acc) < 1e-12
    print(("ok    " if ok_loss else "FAIL  ") + f"test loss ours {ours['loss']:.9f}, torch float64 "
          f"{ref_loss:.9f}: relative error {err_ours:.1e} (torch float32 {err_torch:.1e})")
    print(("ok    " if ok_acc else "FAIL  ") + f"accuracy ours {ours['accuracy']:.4f}, torch "
          f"{ref_acc:.4f} over {N} images")
    return 0 if ok_loss and ok_acc else 1


if __name__ == "__main__":
    sys.exit(main())
