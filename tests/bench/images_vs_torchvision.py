#!/usr/bin/env python3
"""The image loader against torchvision, and a pipeline fed from images.

    images_vs_torchvision.py BENCH_IMAGES PIPELINE_RUN [--images N] [--workers W]
                             [--repeats R] [--folder DIR] [--no-train]

1. Makes an image folder of N (default 512) ImageNet-sized JPEGs (500x375,
   quality 90, photo-like content, 10 classes; --folder DIR keeps them in
   DIR and reuses them when DIR already holds N) and prints images/s of
   decode + RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor +
   Normalize: ours (bench_images: 1 thread, then W threads) beside
   torchvision's DataLoader(ImageFolder) with 0 workers (the main process,
   one core) and with W worker processes, batch 64, the same files. The
   four are run in turn, R rounds (default 3), so that a machine's changing
   load falls on all of them alike; each round's figures are printed, then
   the medians and the ratios of the medians, per core and on all cores.
2. Trains ResNet-18 (cifar stem, batch 128 in 2 stages) on CPU devices from
   a folder of 2,560 32x32 PNGs (random_crop 32 padding 4, flip) and prints
   the share of the step spent waiting for data (the run's JSON data.wait_frac);
   --no-train skips it.
Needs /usr/bin/python3 with torch, torchvision, PIL and numpy (exit 77
without). Prints figures, asserts nothing.
"""
import json
import os
import statistics
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torchvision  # noqa: F401 (loader_torch uses it)
    from PIL import Image  # noqa: F401
except ImportError as e:
    print(f"images_vs_torchvision: skipped ({e})")
    sys.exit(77)

# the JPEG folders and torchvision's side, shared with the GPU runner's part
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
from loader_torch import make_jpegs, photo, torchvision_rate  # noqa: E402


def ours_rate(bench, root, n, threads):
    # the library links OpenBLAS, whose idle pool would spin beside the loader
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([bench, root, str(n), str(threads)], capture_output=True, text=True,
                         env=env).stdout
    for line in out.splitlines():
        if line.startswith("ours"):
            return float(line.split()[3])
    raise RuntimeError(f"bench_images printed no figure: {out}")


def opt(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def main():
    bench, exe = sys.argv[1], sys.argv[2]
    n = int(opt("--images", 512))
    workers = int(opt("--workers", os.cpu_count()))
    repeats = int(opt("--repeats", 3))
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="pp-bench-images-")
    try:
        rng = np.random.default_rng(0)
        root = opt("--folder", os.path.join(tmp, "jpeg"))
        size = make_jpegs(root, n, os.cpu_count())
        print(f"{n} JPEGs of 500x375, quality 90, {size / 1024:.0f} KiB on average; "
              f"{os.cpu_count()} cores; {repeats} rounds of the four, in turn")
        rows = {("ours", 1): [], ("torchvision", 0): [], ("ours", workers): [],
                ("torchvision", workers): []}
        for r in range(repeats):
            got = []
            for who, k in rows:
                v = (ours_rate(bench, root, 2 * n, k) if who == "ours"
                     else torchvision_rate(root, k, n))
                rows[(who, k)].append(v)
                got.append(f"{who} {k}: {v:.1f}")
            print(f"round {r + 1}: " + ", ".join(got) + " images/s")
        med = {key: statistics.median(v) for key, v in rows.items()}
        print(f"ours         1 thread   {med[('ours', 1)]:8.1f} images/s  (median; "
              f"{1e3 / med[('ours', 1)]:.2f} ms an image)")
        print(f"ours        {workers:2d} threads  {med[('ours', workers)]:8.1f} images/s  (median)")
        print(f"torchvision  0 workers  {med[('torchvision', 0)]:8.1f} images/s  (median; the "
              f"main process: one core)")
        print(f"torchvision {workers:2d} workers  {med[('torchvision', workers)]:8.1f} images/s  "
              f"(median)")
        print(f"per core: ours {med[('ours', 1)]:.1f} images/s, torchvision "
              f"{med[('torchvision', 0)]:.1f}: {med[('ours', 1)] / med[('torchvision', 0)]:.2f}x")
        print(f"all cores: ours {med[('ours', workers)]:.1f} images/s, torchvision "
              f"{med[('torchvision', workers)]:.1f}: "
              f"{med[('ours', workers)] / med[('torchvision', workers)]:.2f}x")
        if "--no-train" in sys.argv:
            return 0
        # 2. ResNet-18 fed from 32x32 PNGs
        png = os.path.join(tmp, "png32")
        for i in range(2560):
            d = os.path.join(png, f"c{i % 10}")
            os.makedirs(d, exist_ok=True)
            photo(32, 32, rng).save(os.path.join(d, f"{i:05d}.png"))
        plan = os.path.join(tmp, "resnet18-png.yaml")
        with open(plan, "w") as f:
            f.write(f"""model: {{name: resnet18, num_classes: 10, stem: cifar}}
batch: {{size: 128, split_size: 64}}
schedule: 1f1b
optimizer: {{lr: 0.05, momentum: 0.9}}
data:
  format: imagefolder
  root: {png}
  transforms: [{{random_crop: {{size: 32, padding: 4}}}}, {{horizontal_flip: 0.5}}]
  mean: [0.49, 0.48, 0.45]
  std: [0.25, 0.24, 0.26]
  shuffle: true
seed: 1
steps: 6
stages:
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1, layer2]
  - device: cpu:1
    layers: [layer3, layer4, avgpool, fc]
""")
        r = subprocess.run([exe, plan, "--json"], capture_output=True, text=True)
        if r.returncode == 0:
            j = json.loads(r.stdout)
            d = j["data"]
            print(f"resnet18 on 32x32 PNGs, batch 128: step {j['step_ms']['median']:.0f} ms, "
                  f"waiting for data {d['wait_ms']:.2f} ms ({100 * d['wait_frac']:.2f}% of the "
                  f"step; {d['workers']} threads, {d['prefetch']} batch ahead)")
        else:
            print(f"resnet18 on PNGs failed: {r.stderr[-400:]}")
    finally:
        shutil.rmtree(tmp, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
