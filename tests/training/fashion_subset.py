"""fashion_subset.py - examples/plans/fashion-mnist-resnet18.yaml on a subset:
one epoch over the first 1,500 Fashion-MNIST training images at batch 16,
evaluated on the first 500 test images, must learn: its loss falls and its
test accuracy is well above chance, 0.1 (at least 0.4; 0.534 measured, 0.525
on the first 1,000).

Usage: python3 fashion_subset.py PIPELINE_RUN SOURCE_ROOT [--train N] [--test N]
Exit 77 (skip) when Debian's dataset-fashion-mnist is not installed (the setup
step's --tests installs it).
"""
import atexit
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

DATA = "/usr/share/datasets/fashion-mnist"


def subset(src, dst, n):
    data = gzip.open(src).read()
    nd = data[3]
    dims = list(struct.unpack(">" + "I" * nd, data[4:4 + 4 * nd]))
    per = 1
    for d in dims[1:]:
        per *= d
    off = 4 + 4 * nd
    dims[0] = min(n, dims[0])
    with gzip.open(dst, "wb") as f:
        f.write(data[:4] + struct.pack(">" + "I" * nd, *dims) + data[off:off + dims[0] * per])


def main():
    exe, root = sys.argv[1], sys.argv[2]
    n_train = int(sys.argv[sys.argv.index("--train") + 1]) if "--train" in sys.argv else 1500
    n_test = int(sys.argv[sys.argv.index("--test") + 1]) if "--test" in sys.argv else 500
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print(f"fashion_subset: {DATA} missing (dataset-fashion-mnist): skipped", file=sys.stderr)
        return 77
    tmp = tempfile.mkdtemp(prefix="pp-fashion-")
    atexit.register(shutil.rmtree, tmp, True)  # gone on any exit
    plan = open(os.path.join(root, "examples", "plans", "fashion-mnist-resnet18.yaml")).read()
    for name, n in (("train", n_train), ("t10k", n_test)):
        for kind in ("images-idx3", "labels-idx1"):
            src = os.path.join(DATA, f"{name}-{kind}-ubyte.gz")
            dst = os.path.join(tmp, f"{name}-{kind}-ubyte.gz")
            subset(src, dst, n)
            plan = plan.replace(src, dst)
    plan = plan.replace("epochs: 10", "epochs: 1")
    # 1,500 images at batch 256 are 6 steps, too few for batch norm's running
    # statistics to settle; batch 16 gives the subset 94 (the first 3,000 at
    # batch 32, the same 94 steps at twice the cost, gave 0.528)
    plan = plan.replace("size: 256\n  split_size: 64", "size: 16\n  split_size: 8")
    plan = plan.replace("lr: 0.1\n", "lr: 0.05\n")
    # one epoch: no room for the plan's warm-up and cosine decay
    plan = plan.replace("lr_schedule: {type: cosine, warmup: 1, warmup_start_factor: 0.1}",
                        "lr_schedule: {type: constant}")
    path = os.path.join(tmp, "fashion-subset.yaml")
    open(path, "w").write(plan)
    t0 = time.time()
    r = subprocess.run([exe, path, "--json"], capture_output=True, text=True, timeout=1500)
    secs = time.time() - t0
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        print(f"FAIL: exit {r.returncode}", file=sys.stderr)
        return 1
    out = json.loads(r.stdout)
    ep = out["epochs"][-1]
    print(f"ResNet-18, 1 epoch of {n_train} Fashion-MNIST images on 2 CPU stages: train loss "
          f"{ep['train_loss']:.3f}, test loss {ep['test_loss']:.3f}, test accuracy "
          f"{ep['test_acc']:.3f} on {n_test} images; {ep['seconds']:.1f} s for the epoch "
          f"({ep['images_per_s']:.0f} images/s), {secs:.1f} s in all", file=sys.stderr)
    ok = ep["test_acc"] >= 0.4 and out["losses"][-1] < out["losses"][0]
    print("fashion_subset: " + ("learns" if ok else "FAIL: does not learn"), file=sys.stderr)
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
