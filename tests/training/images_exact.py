#!/usr/bin/env python3
"""images_exact.py - image folders train to the bits of the formats they can
equal.

Usage: images_exact.py PIPELINE_RUN SOURCE_ROOT

1. Fashion-MNIST as a PNG image folder (lossless; class folders "class0" to
   "class9", files named by their index, so the folder's order is by class,
   then index) and the same images as IDX files written in that order: with
   no transforms and shuffling on, --dump-data gives the same tensors for
   every step checked, and six steps of a two-stage LeNet save the same
   tensors (parameters and momentum; the metadata names each plan's data).
2. An MPI job of 2 ranks (stage 1 on rank 1) on a JPEG image folder with
   random_resized_crop and flips saves the same checkpoint bytes as the same
   stages in one process (skipped where mpirun is missing).
3. Replicas in one process read their pieces of the global batch: two
   replicas of a one-stage plan save the bits of two replicas over two MPI
   processes (skipped without mpirun).

Exit 77 (skip) when Debian's dataset-fashion-mnist or PIL is missing.
"""
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
N = 600


CHECKS = Checks()
check = CHECKS.check


def idx_read(path):
    data = gzip.open(path).read()
    nd = data[3]
    dims = struct.unpack(">" + "I" * nd, data[4:4 + 4 * nd])
    return dims, data[4 + 4 * nd:]


def idx_write(path, dims, payload):
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, len(dims)]) + struct.pack(">" + "I" * len(dims), *dims) + payload)


PLAN = """model:
  name: sequential
  num_classes: 10
  in_channels: {channels}
  layers:
    - {{name: conv1, type: conv, out_channels: 6, kernel: 5}}
    - {{name: relu1, type: relu}}
    - {{name: pool1, type: maxpool, kernel: 2}}
    - {{name: flatten, type: flatten}}
    - {{name: fc, type: linear, out_features: 10}}
batch:
  size: 50
  split_size: 25
schedule: 1f1b
optimizer: {{lr: 0.05, momentum: 0.9}}
data:
{data}
  shuffle: true
seed: 5
steps: 6
{replicas}stages:
  - device: {dev0}
    layers: [conv1, relu1, pool1]
  - device: {dev1}
    layers: [flatten, fc]
"""


def run(exe, *args, np=0, root=None):
    cmd = [exe, *args]
    if np:
        cmd = ["bash", os.path.join(root, "tests", "comm", "mpirun.sh"), str(np)] + cmd
    env = dict(os.environ, PP_IMAGE_INDEX_CACHE="off")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    return {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
            for k, v in head.items()}


def main():
    exe, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    try:
        import numpy as np
        from PIL import Image
    except ImportError as e:
        print(f"images_exact: skipped ({e})")
        return 77
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print(f"images_exact: {DATA} missing (dataset-fashion-mnist): skipped")
        return 77
    tmp = tempfile.mkdtemp(prefix="pp-images-exact-")
    try:
        (n_all, h, w), pixels = idx_read(os.path.join(DATA, "train-images-idx3-ubyte.gz"))
        _, labels = idx_read(os.path.join(DATA, "train-labels-idx1-ubyte.gz"))
        imgs = np.frombuffer(pixels, np.uint8)[:N * h * w].reshape(N, h, w)
        labs = np.frombuffer(labels, np.uint8)[:N]
        folder = os.path.join(tmp, "fashion")
        for c in range(10):
            os.makedirs(os.path.join(folder, f"class{c}"))
        for i in range(N):
            Image.fromarray(imgs[i], "L").save(os.path.join(folder, f"class{labs[i]}",
                                                            f"{i:05d}.png"))
        order = sorted(range(N), key=lambda i: (labs[i], i))
        idx_img, idx_lab = os.path.join(tmp, "images.idx"), os.path.join(tmp, "labels.idx")
        idx_write(idx_img, (N, h, w), imgs[order].tobytes())
        idx_write(idx_lab, (N,), labs[order].tobytes())
        plans = {}
        for kind, data in (("idx", f"  format: idx\n  images: {idx_img}\n  labels: {idx_lab}"),
                           ("folder", f"  format: imagefolder\n  root: {folder}")):
            plans[kind] = os.path.join(tmp, f"{kind}.yaml")
            with open(plans[kind], "w") as f:
                f.write(PLAN.format(channels=1, data=data, replicas="", dev0="cpu:0",
                                    dev1="cpu:1"))
        # 1. the same inputs, step by step, and the same bits after training
        for step in ("0", "5", "11", "12"):
            outs = {}
            for kind in plans:
                outs[kind] = os.path.join(tmp, f"dump-{kind}-{step}.st")
                r = run(exe, plans[kind], "--dump-data", step, "-o", outs[kind])
                check(r.returncode == 0, f"dump {kind} step {step}: {r.stderr[-300:]}")
            if all(os.path.exists(p) for p in outs.values()):
                check(tensors(outs["idx"]) == tensors(outs["folder"]),
                      f"step {step}: the folder's inputs differ from the IDX files'")
        saves = {}
        for kind in plans:
            saves[kind] = os.path.join(tmp, f"{kind}.safetensors")
            r = run(exe, plans[kind], "--save", saves[kind])
            check(r.returncode == 0, f"train {kind}: {r.stderr[-400:]}")
        if all(os.path.exists(p) for p in saves.values()):
            # the tensors (the metadata names each plan's data, which differs)
            a, b = tensors(saves["idx"]), tensors(saves["folder"])
            same = a == b and len(a) > 4
            check(same, "the PNG folder trained to other bits than the IDX files")
            print(f"images_exact: Fashion-MNIST ({N} images) as PNG folder and as IDX: "
                  f"{'the same' if same else 'DIFFERENT'} bits in all {len(a)} tensors after "
                  f"6 steps")
        # 2. two ranks against one process, on JPEGs with random transforms
        jpegs = os.path.join(tmp, "jpegs")
        rng = np.random.default_rng(0)
        for c in range(10):
            os.makedirs(os.path.join(jpegs, f"c{c}"))
            for i in range(12):
                a = rng.integers(0, 256, (30 + i, 36, 3), dtype=np.uint8)
                Image.fromarray(a).save(os.path.join(jpegs, f"c{c}", f"{i}.jpg"), quality=85)
        data = (f"  format: imagefolder\n  root: {jpegs}\n  transforms: "
                "[{random_resized_crop: 28}, {horizontal_flip: 0.5}]\n  mean: [0.5, 0.5, 0.5]\n"
                "  std: [0.25, 0.25, 0.25]")
        variants = {"one": ("", "cpu:0", "cpu:1", 0), "two": ("", "cpu:0", "rank1:cpu:0", 2),
                    "rep-local": ("replicas: 2\n", "[cpu:0, cpu:0]", "[cpu:1, cpu:1]", 0),
                    "rep-mpi": ("replicas: 2\n", "[cpu:0, rank2:cpu:0]",
                                "[rank1:cpu:0, rank3:cpu:0]", 4)}
        got = {}
        for name, (rep, d0, d1, np_) in variants.items():
            p = os.path.join(tmp, f"jpeg-{name}.yaml")
            with open(p, "w") as f:
                f.write(PLAN.format(channels=3, data=data, replicas=rep, dev0=d0, dev1=d1))
            out = os.path.join(tmp, f"jpeg-{name}.safetensors")
            r = run(exe, p, "--save", out, np=np_, root=root)
            if r.returncode == 77:
                print(f"images_exact: {name}: no mpirun, skipped")
                continue
            check(r.returncode == 0, f"jpeg {name}: {r.stderr[-400:]}")
            if os.path.exists(out):
                got[name] = open(out, "rb").read()
        for a, b in (("one", "two"), ("rep-local", "rep-mpi")):
            if a in got and b in got:
                check(got[a] == got[b], f"JPEG folder: {a} and {b} saved different bits")
                print(f"images_exact: JPEG folder, {a} vs {b}: "
                      f"{'the same' if got[a] == got[b] else 'DIFFERENT'} checkpoint bits")
    finally:
        shutil.rmtree(tmp, True)
    CHECKS.summary("images_exact")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
