#!/usr/bin/env python3
"""ImageNet-sized JPEG folders, and torchvision's DataLoader over them.

    loader_torch.py make ROOT N [--procs P] [--seed S]
        N JPEGs of 500x375 (quality 90, photo-like content) in 10 class
        folders under ROOT (kept when ROOT already holds N), made by P
        processes; prints {"images": N, "kib": mean size} as JSON.
    loader_torch.py rate ROOT [--workers W] [--images N] [--size S]
        images/s of torchvision's DataLoader(ImageFolder) with
        RandomResizedCrop(S) + RandomHorizontalFlip + ToTensor + Normalize,
        batch 64, W worker processes (0: the main process, one core), N
        images after one warm-up batch; prints JSON.

Used by tests/gpu/parts/part11.sh (the loader part of run-all.sh) and by
tests/bench/images_vs_torchvision.py. Needs numpy and PIL (make), torch and
torchvision (rate).
"""
import json
import multiprocessing
import os
import shutil
import sys
import time


def photo(w, h, rng):
    """A photo-like RGB picture: smooth colour waves with noise."""
    import numpy as np
    from PIL import Image
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    f = rng.uniform(5, 40, 6)
    img = np.stack([128 + 90 * np.sin(x / f[0] + y / f[1]), 128 + 80 * np.cos(x / f[2] - y / f[3]),
                    128 + 70 * np.sin((x + y) / f[4]) * np.cos(x / f[5])], axis=2)
    img += rng.normal(0, 14, img.shape)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def _make_some(args):
    import numpy as np
    root, first, last, seed = args
    for i in range(first, last):
        rng = np.random.default_rng([seed, i])
        d = os.path.join(root, f"class{i % 10}")
        os.makedirs(d, exist_ok=True)
        photo(500, 375, rng).save(os.path.join(d, f"{i:05d}.JPEG"), quality=90)


def make_jpegs(root, n, procs=1, seed=0):
    """n JPEGs in root (kept when root already holds n); their mean size in bytes."""
    have = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".JPEG")]
    if len(have) != n:
        shutil.rmtree(root, True)
        os.makedirs(root)
        chunk = (n + 4 * procs - 1) // (4 * procs)
        jobs = [(root, a, min(n, a + chunk), seed) for a in range(0, n, chunk)]
        if procs > 1:
            with multiprocessing.Pool(procs) as pool:
                pool.map(_make_some, jobs)
        else:
            for j in jobs:
                _make_some(j)
        have = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
    return sum(os.path.getsize(p) for p in have) / n


def torchvision_rate(root, workers, n, size=224):
    """images/s of torchvision's DataLoader over root (see the top of this file)."""
    import torch
    from torchvision import datasets, transforms as T
    tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = datasets.ImageFolder(root, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers,
                                     persistent_workers=workers > 0)
    it = iter(dl)
    next(it)  # warm-up (workers started)
    done, t0 = 0, time.perf_counter()
    while done < n:
        try:
            x, _ = next(it)
        except StopIteration:
            it = iter(dl)
            continue
        done += x.shape[0]
    return done / (time.perf_counter() - t0)


def opt(argv, name, default):
    return argv[argv.index(name) + 1] if name in argv else default


def main(argv):
    if len(argv) < 3 or argv[1] not in ("make", "rate"):
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[2]
    if argv[1] == "make":
        n = int(argv[3])
        kib = make_jpegs(root, n, int(opt(argv, "--procs", 1)), int(opt(argv, "--seed", 0))) / 1024
        print(json.dumps({"images": n, "kib": round(kib, 1)}))
        return 0
    import torch
    torch.set_num_threads(1)
    workers = int(opt(argv, "--workers", 0))
    rate = torchvision_rate(root, workers, int(opt(argv, "--images", 512)),
                            int(opt(argv, "--size", 224)))
    print(json.dumps({"workers": workers, "images_per_s": round(rate, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
