"""lenet_fashion.py - the seeds' LeNet recipes on Fashion-MNIST in PyTorch,
the reference pipeline-run's examples/plans/fashion-mnist-lenet*.yaml are
compared with.

Usage: /usr/bin/python3 lenet_fashion.py [--recipe mnist|d2l] [--epochs N]
           [--data DIR] [--threads N] [--json]

Recipes (as the plans describe them):
  mnist  conv 5x5 20, max pool 2, ReLU, conv 5x5 50, max pool 2, ReLU,
         linear 800->500, ReLU, linear 500->10; PyTorch's default init;
         SGD lr 0.1 momentum 0.9; batch 256.
  d2l    conv 3x3 20, ReLU, avg pool 2, conv 5x5 50, ReLU, avg pool 2,
         linear 800->128, ReLU, linear 128->10; normal(0, 0.01) init, zero
         biases; SGD lr 0.2; batch 256.
Pixels are u8/255 (no normalisation), the training set reshuffled every
epoch, the last partial batch trained. Each epoch: train loss (mean over
samples), test loss and top-1 accuracy (model.eval()), seconds and
images/s of training. Exit status 77 without torch or numpy.
"""
import argparse
import gzip
import json
import os
import struct
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn as nn
except ImportError as e:  # pragma: no cover
    print(f"lenet_fashion: {e}: skipped", file=sys.stderr)
    sys.exit(77)


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not a u8 IDX file")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def lenet(recipe):
    if recipe == "mnist":
        return nn.Sequential(
            nn.Conv2d(1, 20, 5), nn.MaxPool2d(2), nn.ReLU(),
            nn.Conv2d(20, 50, 5), nn.MaxPool2d(2), nn.ReLU(),
            nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10))
    net = nn.Sequential(
        nn.Conv2d(1, 20, 3), nn.ReLU(), nn.AvgPool2d(2),
        nn.Conv2d(20, 50, 5), nn.ReLU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(800, 128), nn.ReLU(), nn.Linear(128, 10))
    for m in net:
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.normal_(m.weight, 0.0, 0.01)
            nn.init.zeros_(m.bias)
    return net


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", choices=["mnist", "d2l"], default="mnist")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    d = a.data
    xtr = torch.from_numpy(read_idx(os.path.join(d, "train-images-idx3-ubyte.gz")).copy())
    ytr = torch.from_numpy(read_idx(os.path.join(d, "train-labels-idx1-ubyte.gz")).astype(np.int64))
    xte = torch.from_numpy(read_idx(os.path.join(d, "t10k-images-idx3-ubyte.gz")).copy())
    yte = torch.from_numpy(read_idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz")).astype(np.int64))
    xtr = xtr.float().div_(255).unsqueeze(1)
    xte = xte.float().div_(255).unsqueeze(1)
    net = lenet(a.recipe)
    lr, momentum = (0.1, 0.9) if a.recipe == "mnist" else (0.2, 0.0)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    loss_fn = nn.CrossEntropyLoss()
    batch = 256
    epochs = []
    for epoch in range(1, a.epochs + 1):
        net.train()
        t0 = time.perf_counter()
        order = torch.randperm(len(xtr))
        total = 0.0
        for i in range(0, len(xtr), batch):
            idx = order[i:i + batch]
            opt.zero_grad()
            loss = loss_fn(net(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        secs = time.perf_counter() - t0
        net.eval()
        with torch.no_grad():
            test_loss, correct = 0.0, 0
            for i in range(0, len(xte), 1000):
                out = net(xte[i:i + 1000])
                test_loss += nn.functional.cross_entropy(out, yte[i:i + 1000],
                                                         reduction="sum").item()
                correct += (out.argmax(1) == yte[i:i + 1000]).sum().item()
        row = {"epoch": epoch, "train_loss": total / len(xtr), "test_loss": test_loss / len(xte),
               "test_acc": correct / len(xte), "seconds": secs, "images_per_s": len(xtr) / secs}
        epochs.append(row)
        if not a.json:
            print(f"epoch {epoch:2d}  train loss {row['train_loss']:.4f}  test loss "
                  f"{row['test_loss']:.4f}  test acc {row['test_acc']:.4f}  {secs:6.1f} s  "
                  f"{row['images_per_s']:.0f} img/s", flush=True)
    if a.json:
        print(json.dumps({"recipe": a.recipe, "threads": torch.get_num_threads(),
                          "torch": torch.__version__, "epochs": epochs}))


if __name__ == "__main__":
    main()
