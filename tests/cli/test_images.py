#!/usr/bin/env python3
"""pipeline-run on image folders (data: {format: imagefolder}), end to end.

Usage: test_images.py PIPELINE_RUN  (run by Debian's /usr/bin/python3, which
has PIL and numpy to write the fixtures; exits 77 without them)

- the bad-input table of docs/PLAN.md, each row a case: a truncated JPEG, an
  empty file, a corrupt JPEG, a text file named .jpg, an unsupported format
  (GIF named .png), an image too large to decode, an image of another size
  with no transform fixing the size, a random_crop larger than its image (each
  exit 1, naming the file, the step and the cause); a folder with no class,
  a class with no image, a missing root, a root that is a file, more class
  folders than model.num_classes (each exit 2 at FILE:LINE:COL, with and
  without --validate); on_bad_image: skip (exit 0, the report counts it and
  names the file); a checkpoint section still saves after a bad image stops
  the run; a test folder whose classes are not the training folder's (exit
  2);
- a training run reports the loader's line and JSON `data`;
- --show-data writes a PNG grid (every pixel of a tall sample's tile
  right); --dump-data STEP and eval:K write the exact inputs (equal to a
  second dump; labels and files as the folder has them) for an image folder,
  IDX and synthetic data; eval takes cifar10 and synthetic test sets;
- --validate writes imagefolder sections back, and the written plan
  validates again;
- data.drop_last leaves an epoch's short last batch out; data.workers and
  data.prefetch change no bit of a run.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

try:
    import numpy as np
    from PIL import Image
except ImportError as e:
    print(f"test_images: skipped ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_raw  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="pp-images-")


CHECKS = Checks()
check = CHECKS.check


def run(*args, timeout=300, **env_extra):
    env = dict(os.environ, PP_IMAGE_INDEX_CACHE=os.path.join(TMP, "index-cache"))
    env.update(env_extra)
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def picture(w, h, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 7 + seed * 40) % 256, (y * 5 + seed * 13) % 256,
                    (x + y) * 3 % 256], axis=2).astype(np.float64)
    img += rng.normal(0, 8, img.shape)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def make_folder(name, classes=3, per_class=4, size=(40, 30)):
    root = os.path.join(TMP, name)
    for c in range(classes):
        os.makedirs(os.path.join(root, f"c{c}"), exist_ok=True)
        for i in range(per_class):
            im = picture(size[0] + i, size[1] + c, seed=c * 10 + i)
            ext = "jpg" if i % 2 == 0 else "png"
            im.save(os.path.join(root, f"c{c}", f"{i}.{ext}"), quality=90)
    return root


PLAN = """model:
  name: sequential
  num_classes: {classes}
  in_channels: 3
  layers:
    - {{name: conv, type: conv, out_channels: 4, kernel: 3}}
    - {{name: pool, type: global_avgpool}}
    - {{name: flatten, type: flatten}}
    - {{name: fc, type: linear, out_features: {classes}}}
batch:
  size: {batch}
  split_size: {split}
optimizer: {{lr: 0.05}}
data:
  format: imagefolder
  root: {root}
  transforms: {transforms}
  mean: [0.5, 0.5, 0.5]
  std: [0.25, 0.25, 0.25]
{extra}seed: 2
steps: {steps}
{tail}stages:
  - device: cpu:0
    layers: [conv, pool]
  - device: cpu:1
    layers: [flatten, fc]
"""


def plan(name, root, classes=3, batch=12, split=6, steps=1,
         transforms="[{random_resized_crop: 16}, {horizontal_flip: 0.5}]", extra="", tail=""):
    path = os.path.join(TMP, name + ".yaml")
    with open(path, "w") as f:
        f.write(PLAN.format(classes=classes, batch=batch, split=split, steps=steps, root=root,
                            transforms=transforms, extra=extra, tail=tail))
    return path


GAP_PLAN = """model:
  name: sequential
  in_channels: 3
  num_classes: {classes}
  layers:
    - {{name: gap, type: global_avgpool}}
    - {{name: fc, type: linear, out_features: {classes}}}
batch: {{size: {batch}, split_size: {batch}}}
data:
  format: imagefolder
  root: {root}
  transforms: {transforms}
  workers: 1
{extra}seed: 5
stages:
  - device: cpu:0
    layers: [gap, fc]
"""


def gap_plan(name, root, classes=2, batch=1, transforms="[]", extra=""):
    """A plan whose model takes images of any size (global_avgpool first)."""
    path = os.path.join(TMP, name + ".yaml")
    with open(path, "w") as f:
        f.write(GAP_PLAN.format(classes=classes, batch=batch, root=root, transforms=transforms,
                                extra=extra))
    return path


def png_header_only(w, h):
    """A PNG whose header claims w x h pixels (its data is missing)."""
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk
            + struct.pack(">I", zlib.crc32(chunk)))


def bad_file(kind, path):
    good = os.path.join(TMP, "good.jpg")
    picture(40, 30, 99).save(good, quality=90)
    data = open(good, "rb").read()
    if kind == "truncated":
        data = data[:len(data) // 2]
    elif kind == "empty":
        data = b""
    elif kind == "corrupt":
        k = data.index(b"\xff\xc0")
        data = data[:k + 4] + bytes([99]) + data[k + 5:]
    elif kind == "text":
        data = b"this is not a picture\n"
    elif kind == "gif":
        buf = os.path.join(TMP, "x.gif")
        picture(8, 8, 1).save(buf)
        data = open(buf, "rb").read()
    elif kind == "huge":
        data = png_header_only(30000, 30000)
    elif kind == "huge-ppm":
        data = b"P6\n20000 20000\n255\n" + bytes(64)
    elif kind == "fifo":  # no writer: opening it to read must not block the run
        os.remove(path)
        os.mkfifo(path)
        return
    with open(path, "wb") as f:
        f.write(data)


def test_bad_images():
    cases = [  # (kind, file name, words in the message)
        ("truncated", "c1/0.jpg", "truncated"),
        ("empty", "c1/0.jpg", "empty"),
        ("corrupt", "c1/0.jpg", "corrupt JPEG"),
        ("text", "c1/0.jpg", "not an image"),
        ("gif", "c1/1.png", "not an image"),
        ("huge", "c1/1.png", "too large"),
        ("huge-ppm", "c1/1.png", "too large"),
        ("fifo", "c1/0.jpg", "not a regular file"),
    ]
    for kind, rel, words in cases:
        root = make_folder(f"bad-{kind}")
        bad_file(kind, os.path.join(root, rel))
        r = run(plan(f"bad-{kind}", root))
        check(r.returncode == 1, f"{kind}: exit {r.returncode}, wanted 1: {r.stderr[-300:]}")
        check(os.path.join(root, rel) in r.stderr and words in r.stderr
              and "step 0" in r.stderr, f"{kind}: message lacks the file, step or "
              f"'{words}': {r.stderr[-400:]}")
        # skipped: the run goes on, and the report says so
        r = run(plan(f"skip-{kind}", root, extra="  on_bad_image: skip\n"))
        out = r.stdout + r.stderr
        check(r.returncode == 0 and "1 bad image skipped" in out and rel in out,
              f"{kind} skipped: exit {r.returncode}: {out[-400:]}")
    # another size with no transform fixing it
    root = make_folder("sizes")
    r = run(plan("sizes", root, transforms="[{horizontal_flip: 0.5}]"))
    check(r.returncode == 1 and "fixes the size" in r.stderr and "c0/1.png" in r.stderr,
          f"sizes: exit {r.returncode}: {r.stderr[-300:]}")
    # random_resized_crop's fallback box of 0 columns (ratio 0.001 on 40x30 images): a bad
    # image naming the box; skipped, 64 in a row stop the run, naming the last one's problem
    r = run(plan("thin-box", root, transforms="[{random_resized_crop: {size: 8, ratio: "
                                              "[0.001, 0.001]}}]"))
    check(r.returncode == 1 and "random_resized_crop's box on this" in r.stderr and
          "is 0x" in r.stderr, f"a box of 0 columns: exit {r.returncode}: {r.stderr[-300:]}")
    r = run(plan("thin-box-skip", root, transforms="[{random_resized_crop: {size: 8, ratio: "
                                                   "[0.001, 0.001]}}]",
                 extra="  on_bad_image: skip\n"))
    check(r.returncode == 1 and "64 bad images in a row from sample" in r.stderr and
          "(the last: " in r.stderr and "random_resized_crop's box" in r.stderr,
          f"every image bad, skipped: exit {r.returncode}: {r.stderr[-400:]}")
    # random_crop larger than the image
    r = run(plan("bigcrop", root, transforms="[{random_crop: 64}]"))
    check(r.returncode == 1 and "random_crop of 64x64" in r.stderr,
          f"random_crop: exit {r.returncode}: {r.stderr[-300:]}")
    # a checkpoint section still saves the last whole step
    root = make_folder("late-bad", per_class=8)
    bad_file("text", os.path.join(root, "c2", "7.png"))
    ck = os.path.join(TMP, "late-{step}.safetensors")
    p = plan("late-bad", root, batch=12, steps=3,
             tail=f"checkpoint:\n  every: 10\n  path: {ck}\n")
    r = run(p)
    check(r.returncode == 1 and "step 1" in r.stderr and "c2/7.png" in r.stderr,
          f"late bad image: exit {r.returncode}: {r.stderr[-300:]}")
    check(os.path.exists(ck.replace("{step}", "1")),
          f"late bad image: the checkpoint of step 1 was not written: {r.stderr[-300:]}")


def test_plan_errors():
    good = make_folder("plan-good")
    empty_root = os.path.join(TMP, "no-classes")
    os.makedirs(empty_root, exist_ok=True)
    no_images = make_folder("no-images")
    os.makedirs(os.path.join(no_images, "c9"))
    with open(os.path.join(no_images, "c9", "notes.txt"), "w") as f:
        f.write("x")
    a_file = os.path.join(TMP, "a-file")
    open(a_file, "w").close()
    cases = [
        ("no class", empty_root, 3, "no class folder"),
        ("class without images", no_images, 10, "class 'c9' has no image file"),
        ("missing root", os.path.join(TMP, "missing"), 3, "cannot open"),
        ("root is a file", a_file, 3, "is a file, not a folder"),
        ("too many classes", good, 2, "3 class folders but model.num_classes is 2"),
    ]
    for what, root, classes, words in cases:
        p = plan("plan-" + what.replace(" ", "-"), root, classes=classes)
        for extra in ([], ["--validate"]):
            r = run(p, *extra)
            check(r.returncode == 2 and f"{p}:" in r.stderr and words in r.stderr,
                  f"{what} {extra}: exit {r.returncode}: {r.stderr[-300:]}")
    # a test folder whose classes are not the training folder's
    other = make_folder("other-classes")
    os.rename(os.path.join(other, "c2"), os.path.join(other, "c3"))
    p = plan("plan-eval-classes", good, classes=4,
             tail=f"eval:\n  format: imagefolder\n  root: {other}\n"
                  "  transforms: [{center_crop: 16}]\n")
    r = run(p)
    check(r.returncode == 2 and "class 2 is 'c3'" in r.stderr and f"{p}:" in r.stderr,
          f"eval classes: exit {r.returncode}: {r.stderr[-300:]}")
    # a bad transform and key
    p = plan("plan-bad-transform", good, transforms="[{spin: 90}]")
    r = run(p, "--validate")
    check(r.returncode == 2 and "spin" in r.stderr, f"bad transform: {r.stderr[-300:]}")
    p = plan("plan-idx-key", good, extra="  images: x.idx\n")
    r = run(p, "--validate")
    check(r.returncode == 2 and "data.images applies only to format idx" in r.stderr,
          f"foreign key: {r.stderr[-300:]}")
    # the index cache's bound is not a size
    p = plan("plan-cache-bound", good)
    r = run(p, "--validate", PP_IMAGE_INDEX_CACHE_MAX="lots")
    check(r.returncode == 2 and re.search(re.escape(p) + r":\d+:\d+: data.root: "
                                          r"PP_IMAGE_INDEX_CACHE_MAX='lots': expected a size",
                                          r.stderr), f"cache bound: {r.stderr[-300:]}")
    r = run(p, "--validate", PP_IMAGE_INDEX_CACHE_MAX="64KiB")
    check(r.returncode == 0, f"cache bound 64KiB: {r.stderr[-300:]}")


def test_index_cache():
    """A folder of 10,000 images has its index cached: indexed and cached, then read from
    the cache, each said by the summary; a write evicts an index used least recently."""
    root = make_folder("ten-thousand", per_class=2)
    first = os.path.join(root, "c0", "0.jpg")
    for i in range(10000 - 6):
        os.link(first, os.path.join(root, f"c{i % 3}", f"x{i:05d}.jpg"))
    cache = os.path.join(TMP, "bounded-index-cache")
    os.makedirs(cache)
    p = plan("ten-thousand", root, transforms="[{center_crop: 16}]")
    said = []
    for k in range(2):
        r = run(p, PP_IMAGE_INDEX_CACHE=cache)
        check(r.returncode == 0, f"run {k}: exit {r.returncode}: {r.stderr[-300:]}")
        said += [line for line in r.stdout.splitlines() if "10000 images" in line]
    idx = [f for f in os.listdir(cache) if f.endswith(".idx")]
    path = os.path.join(cache, idx[0]) if len(idx) == 1 else "?"
    check(len(said) == 2 and re.fullmatch(
        r"data         10000 images in 3 classes \(the folder\), indexed in \d+\.\d\d s and "
        r"cached \(" + re.escape(path) + r"\)", said[0]) and said[1].startswith(
        "data         10000 images in 3 classes (the folder) from the image index cache in ")
        and said[1].endswith(f"({path})"), f"the index lines: {said}, {idx}")
    # another index, used two hours ago, evicted by the next write over the bound
    old = os.path.join(cache, "0123456789abcdef.idx")
    with open(old, "wb") as f:
        f.write(b"\0" * 200000)
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    if os.path.exists(path):
        os.remove(path)
    r = run(p, "--json", PP_IMAGE_INDEX_CACHE=cache, PP_IMAGE_INDEX_CACHE_MAX="300KB")
    ix = json.loads(r.stdout).get("data", {}).get("indexed", {}) if r.returncode == 0 else {}
    check(ix.get("cached") and ix.get("evicted") == {"files": 1, "bytes": 200000}
          and not os.path.exists(old) and os.path.exists(path), f"eviction: {ix}")
    r = run(p, PP_IMAGE_INDEX_CACHE=cache)
    check(r.returncode == 0 and "evicted" not in r.stdout, "a read evicts nothing")
    os.remove(path)
    with open(old, "wb") as f:
        f.write(b"\0" * 200000)
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    r = run(p, PP_IMAGE_INDEX_CACHE=cache, PP_IMAGE_INDEX_CACHE_MAX="300KB")
    check("data         1 file (0.2 MB) evicted from the image index cache, the least recently "
          "used, to keep it within PP_IMAGE_INDEX_CACHE_MAX\n" in r.stdout,
          f"the eviction line: {r.stdout[-500:]}")


def test_run_report_and_views():
    root = make_folder("views")
    val = make_folder("views-val", per_class=2)
    p = plan("views", root, steps=2, extra="  workers: 2\n  prefetch: 2\n  shuffle: true\n",
             tail=f"eval:\n  format: imagefolder\n  root: {val}\n"
                  f"  transforms: [{{resize: 18}}, {{center_crop: 16}}]\n  batch_size: 4\n")
    r = run(p, "--json")
    check(r.returncode == 0, f"run: exit {r.returncode}: {r.stderr[-400:]}")
    if r.returncode == 0:
        j = json.loads(r.stdout)
        d = j.get("data", {})
        check(d.get("workers") == 2 and d.get("prefetch") == 2 and "wait_ms" in d
              and d.get("bad_images") == 0, f"JSON data: {d}")
        check("data         2 threads, 2 batches ahead" in r.stderr, "the data line")
        check("test" in r.stderr, "the test set was evaluated")
        # both folders' indexes: too small to be cached
        ix, ev = d.get("indexed", {}), d.get("eval_indexed", {})
        check(ix.get("images") == 12 and ix.get("classes") == 3 and not ix.get("cached")
              and not ix.get("from_cache") and ix.get("cache") is None
              and ix.get("evicted") == {"files": 0, "bytes": 0}, f"JSON data.indexed: {ix}")
        check(ev.get("images") == 6 and ev.get("classes") == 3, f"JSON eval_indexed: {ev}")
        check(re.search(r"data         12 images in 3 classes \(the folder\), indexed in "
                        r"\d+\.\d\d s\n", r.stderr) and
              "data         6 images in 3 classes (the test set's folder), indexed in" in r.stderr,
              f"the index lines: {r.stderr[-600:]}")
    # --validate writes the sections back; the written plan validates again
    r = run(p, "--validate")
    check(r.returncode == 0 and "format: imagefolder" in r.stdout and "center_crop" in r.stdout,
          f"validate: {r.stdout[-400:]} {r.stderr[-300:]}")
    again = os.path.join(TMP, "views-again.yaml")
    with open(again, "w") as f:
        f.write(r.stdout)
    r2 = run(again, "--validate")
    check(r2.returncode == 0 and r2.stdout == r.stdout, f"validate again: {r2.stderr[-300:]}")
    # --show-data
    png = os.path.join(TMP, "grid.png")
    r = run(p, "--show-data", "9", "-o", png)
    check(r.returncode == 0 and os.path.exists(png), f"--show-data: {r.stderr[-300:]}")
    if os.path.exists(png):
        im = Image.open(png)
        check(im.size[0] > 3 * 96 and im.size[1] > 3 * 96, f"--show-data: size {im.size}")
    # --dump-data: twice the same bytes; files and labels as the folder has them
    for which in ("1", "eval:1"):
        a, b = os.path.join(TMP, "d-a.st"), os.path.join(TMP, "d-b.st")
        ra, rb = run(p, "--dump-data", which, "-o", a), run(p, "--dump-data", which, "-o", b)
        check(ra.returncode == 0 and rb.returncode == 0, f"--dump-data {which}: {ra.stderr}")
        if ra.returncode == 0:
            check(open(a, "rb").read() == open(b, "rb").read(), f"--dump-data {which} differs")
            meta, tensors = read_safetensors(a)
            paths = json.loads(meta["paths"])
            n = 12 if which == "1" else 2
            check(len(paths) == n and tensors["images"][1] == [n, 3, 16, 16],
                  f"--dump-data {which}: {len(paths)} paths, images {tensors['images'][1]}")
            labels = np.frombuffer(tensors["labels"][2], np.int32)
            check(all(int(path.split("/")[0][1:]) == int(y) for path, y in zip(paths, labels)),
                  f"--dump-data {which}: labels {labels} do not match files {paths}")
    r = run(p, "--dump-data", "eval:9", "-o", os.path.join(TMP, "none.st"))
    check(r.returncode == 2 and "batches of 4" in r.stderr, f"eval:9: {r.stderr[-300:]}")
    r = run(p, "--show-data", "4")
    check(r.returncode == 2 and "needs -o" in r.stderr, f"--show-data without -o: {r.stderr}")


def test_skipped_names():
    """on_bad_image: skip. --dump-data names the file whose pixels and label are in the
    batch (the good image that replaced a bad one); with no transform fixing the size, it
    comes from the first image that decodes, and a clear error when none of them does."""
    def folder(name, files):
        root = os.path.join(TMP, name)
        for rel, what in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            if isinstance(what, bytes):
                with open(os.path.join(root, rel), "wb") as f:
                    f.write(what)
            else:
                what.save(os.path.join(root, rel))
        return root

    def dump(name, root, transforms):
        out = os.path.join(TMP, name + ".st")
        r = run(gap_plan(name, root, batch=4, transforms=transforms,
                         extra="  on_bad_image: skip\n"), "--dump-data", "0", "-o", out)
        check(r.returncode == 0, f"{name}: exit {r.returncode}: {r.stderr[-300:]}")
        if r.returncode != 0:
            return None, None, None
        meta, tensors = read_safetensors(out)
        images = np.frombuffer(tensors["images"][2], np.float32).reshape(tensors["images"][1])
        return json.loads(meta["paths"]), list(np.frombuffer(tensors["labels"][2], np.int32)), \
            images

    root = folder("named", {"a/0.png": picture(20, 20, 1), "a/1.jpg": b"garbage",
                            "b/2.png": picture(20, 20, 2), "b/3.png": picture(20, 20, 3)})
    paths, labels, images = dump("named", root, "[{center_crop: 16}]")
    if paths is not None:
        check(paths == ["a/0.png", "b/2.png", "b/2.png", "b/3.png"] and labels == [0, 1, 1, 1]
              and (images[1] == images[2]).all(),
              f"a replaced image: paths {paths}, labels {labels}")
    root = folder("first-bad", {"a/0.jpg": b"", "a/1.png": picture(8, 8, 1),
                                "b/2.png": picture(8, 8, 2), "b/3.png": picture(8, 8, 3)})
    paths, labels, images = dump("first-bad", root, "[]")
    if paths is not None:
        check(paths == ["a/1.png", "a/1.png", "b/2.png", "b/3.png"] and labels == [0, 0, 1, 1]
              and images.shape == (4, 3, 8, 8),
              f"a bad first image: paths {paths}, labels {labels}, shape {images.shape}")
    root = folder("all-bad", {"a/0.jpg": b"", "b/1.png": b"no picture"})
    r = run(gap_plan("all-bad", root, extra="  on_bad_image: skip\n"), "--validate")
    check(r.returncode == 2 and "none of the first 2 does" in r.stderr
          and "a/0.jpg: not an image" in r.stderr, f"no image decodes: {r.stderr[-300:]}")


def test_show_data_tall():
    """--show-data on samples 16384 x 10 (each tile 100 x 163840 pixels, row times height
    past 2^31): every pixel of a uniform gray sample's tile comes out the same."""
    root = os.path.join(TMP, "tall")
    for c in ("a", "b"):
        os.makedirs(os.path.join(root, c))
        Image.new("RGB", (8, 8), (128, 128, 128)).save(os.path.join(root, c, "0.png"))
    png = os.path.join(TMP, "tall.png")
    r = run(gap_plan("tall", root, transforms="[{resize: [16384, 10]}]"), "--show-data", "1",
            "-o", png)
    check(r.returncode == 0, f"--show-data of a tall sample: {r.stderr[-300:]}")
    if r.returncode == 0:
        tile = np.asarray(Image.open(png).convert("RGB"))[4:4 + 163840, 4:4 + 100]
        odd = np.argwhere((tile != tile[0, 0]).any(axis=2))
        check(tile.shape == (163840, 100, 3) and len(odd) == 0,
              f"--show-data of a tall sample: tile {tile.shape}, {len(odd)} pixels unlike "
              f"the first {tile[0, 0]}, from (row, column) {odd[:1]}")


def test_drop_last():
    """12 samples in batches of 5: 3 steps an epoch, 2 with drop_last (whole batches)."""
    root = make_folder("drop")
    for drop, steps in (("", 3), ("  drop_last: true\n", 2)):
        p = plan("drop" + str(steps), root, batch=5, split=5, extra=drop)
        with open(p) as f:
            text = f.read().replace("steps: 1\n", "epochs: 1\n")
        with open(p, "w") as f:
            f.write(text)
        r = run(p)
        check(r.returncode == 0 and f"(1 epoch of {steps})" in r.stderr,
              f"drop_last '{drop.strip()}': {r.stderr[:300]}")


def test_loader_settings():
    """Threads and batches ahead change nothing: 2 epochs of 12 samples in batches of 5
    (a short last batch each epoch, so read-ahead windows are dropped and read again)
    save the same bytes with 1 thread and 1 batch ahead as with 3 threads and 3 ahead."""
    root = make_folder("loader")
    saved = []
    for extra in ("  workers: 1\n  prefetch: 1\n  shuffle: true\n",
                  "  workers: 3\n  prefetch: 3\n  shuffle: true\n"):
        p = plan("loader" + extra[11], root, batch=5, split=5, extra=extra)
        with open(p) as f:
            text = f.read().replace("steps: 1\n", "epochs: 2\n")
        with open(p, "w") as f:
            f.write(text)
        out = os.path.join(TMP, f"loader{len(saved)}.safetensors")
        r = run(p, "--save", out)
        check(r.returncode == 0, f"loader settings: {r.stderr[-300:]}")
        saved.append(open(out, "rb").read() if os.path.exists(out) else b"")
    check(saved[0] == saved[1] and saved[0], "1 thread, 1 ahead and 3 threads, 3 ahead differ")


read_safetensors = safetensors_raw.read


def test_other_formats():
    """eval takes cifar10 and synthetic test sets; --dump-data reads every format."""
    cifar = os.path.join(TMP, "test_batch.bin")
    rng = np.random.default_rng(3)
    rec = np.concatenate([rng.integers(0, 3, (20, 1)), rng.integers(0, 256, (20, 3072))], axis=1)
    rec.astype(np.uint8).tofile(cifar)
    root = make_folder("fmt", size=(36, 36))
    for name, ev in (("cifar", f"eval:\n  format: cifar10\n  files: [{cifar}]\n  batch_size: 8\n"),
                     ("synth", "eval:\n  format: synthetic\n  image_size: 32\n  samples: 10\n"
                               "  num_classes: 3\n")):
        p = plan("fmt-" + name, root, classes=10, transforms="[{center_crop: 32}]", tail=ev)
        r = run(p)
        check(r.returncode == 0 and "test " in r.stdout, f"eval {name}: {r.stderr[-400:]}")
        out = os.path.join(TMP, f"fmt-{name}.st")
        r = run(p, "--dump-data", "eval:0", "-o", out)
        check(r.returncode == 0, f"--dump-data eval:0 of {name}: {r.stderr[-300:]}")
        if r.returncode == 0:
            meta, _ = read_safetensors(out)
            first = json.loads(meta["paths"])[0]
            want = "cifar10 sample 0" if name == "cifar" else "synthetic sample 0"
            check(first == want, f"{name}: first path {first}")


def main():
    try:
        test_bad_images()
        test_plan_errors()
        test_run_report_and_views()
        test_index_cache()
        test_other_formats()
        test_show_data_tall()
        test_skipped_names()
        test_drop_last()
        test_loader_settings()
    finally:
        shutil.rmtree(TMP, True)
    CHECKS.summary("test_images")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
