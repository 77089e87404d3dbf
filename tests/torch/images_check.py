#!/usr/bin/env python3
"""Image folders against torchvision (0.14, on PIL images) and PIL (9.4).

    images_check.py IMAGE_PROBE

IMAGE_PROBE is tests/torch/image_probe (the runtime/io code on the command
line). Checks, with files made here by PIL:
  1. the class list and the samples (path, label) of a folder equal
     torchvision's ImageFolder's: nested folders, two links to a folder, every
     extension in mixed case, files that are not images;
  2. decoding: every kind of file (JPEG RGB, gray, CMYK; PNG RGB, RGBA, L, LA,
     P, P with transparency, 16-bit gray, 1-bit; WebP, BMP (24-bit and
     palette as PIL writes them; bmp_check.py has every other layout), TIFF (RGBA with
     either alpha, 16-bit too, LA, CMYK, 16-bit gray, palette, the 8
     orientations; in separate planes RGBA with either alpha, RGBA and RGB of
     16 bits, LA, CMYK of 8 and 16 bits), PPM, PGM;
     PPM and PGM of other maxima than 255, 16-bit and plain)
     gives PIL's Image.open(f).convert("RGB") and .convert("L") pixels; a
     JPEG cut less than 4 KB after an EXIF thumbnail is refused by both;
  3. random_resized_crop's boxes: 100,000 draws of ours against 100,000 of
     RandomResizedCrop.get_params on a 500x375 and a 400x40 image: two-sample
     Kolmogorov-Smirnov tests of the area fraction and the log aspect ratio
     (p > 0.01), and the fallback taken as often (two-proportion test, p >
     0.01);
  4. the same boxes and flips give torchvision's pixels (F.resized_crop to
     224x224, F.hflip) on a 500x375 JPEG (quality 90) and PNG: mean absolute
     difference within 1/255 and max within 3/255 (the figures printed);
  5. Resize(256) + CenterCrop(224): the same sizes and boxes for many image
     sizes, and the same pixels on the JPEG and the PNG.
Exits 77 (skipped) without torch, torchvision, PIL or numpy.
"""
import io
import math
import os
import struct
import subprocess
import sys
import tempfile
import zlib

try:
    import numpy as np
    import torch
    import torchvision
    from PIL import Image
    from torchvision import datasets
    from torchvision import transforms as T
    from torchvision.transforms import functional as F
except ImportError as e:
    print(f"images_check: skipped ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

PROBE = sys.argv[1]


CHECKS = Checks(stream=sys.stdout)
check = CHECKS.check


def probe(*args, raw=False):
    r = subprocess.run([PROBE, *map(str, args)], capture_output=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"image_probe {' '.join(map(str, args))}: {r.stderr.decode()}")
    return r.stdout if raw else r.stdout.decode()


def picture(w, h, seed=0):
    """A smooth photo-like RGB picture with detail (JPEG-friendly)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.stack([
        128 + 100 * np.sin(x / 17.0 + seed) * np.cos(y / 23.0),
        128 + 90 * np.sin((x + y) / 29.0),
        128 + 80 * np.cos(x / 11.0 - y / 31.0),
    ], axis=2)
    img += rng.normal(0, 12, img.shape)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def ks_p(a, b):
    """Two-sample Kolmogorov-Smirnov test: p-value (asymptotic)."""
    a, b = np.sort(a), np.sort(b)
    allv = np.concatenate([a, b])
    d = np.max(np.abs(np.searchsorted(a, allv, side="right") / len(a)
                      - np.searchsorted(b, allv, side="right") / len(b)))
    en = math.sqrt(len(a) * len(b) / (len(a) + len(b)))
    lam = (en + 0.12 + 0.11 / en) * d
    p = 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return d, min(max(p, 0.0), 1.0)


def two_prop_p(k1, n1, k2, n2):
    p = (k1 + k2) / (n1 + n2)
    if p in (0.0, 1.0):
        return 1.0
    z = abs(k1 / n1 - k2 / n2) / math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    return math.erfc(z / math.sqrt(2))


def check_index(tmp):
    root = os.path.join(tmp, "tree")
    files = ["b/2.png", "b/10.PNG", "b/x/1.jpg", "b/x y/0.JPEG", "b/x-y/5.jpeg", "b/notes.txt",
             "a/z.webp", "a/a.TIF", "a/q.tiff", "a b/k.bmp", "a b/.jpg", "a b/sub/p.pgm",
             "a b/sub/r.PPM", "a b/sub/q.ppm.gz", "c/deep/er/est/1.png", "c/deep/0.png"]
    for f in files:
        os.makedirs(os.path.dirname(os.path.join(root, f)), exist_ok=True)
        with open(os.path.join(root, f), "wb") as fh:
            fh.write(b"x")
    os.makedirs(os.path.join(tmp, "elsewhere"), exist_ok=True)
    with open(os.path.join(tmp, "elsewhere", "m.png"), "wb") as fh:
        fh.write(b"x")
    os.symlink(os.path.join(tmp, "elsewhere"), os.path.join(root, "b", "linked"))
    os.symlink(os.path.join(tmp, "elsewhere"), os.path.join(root, "b", "linked again"))
    os.symlink(os.path.join(tmp, "elsewhere"), os.path.join(root, "d-linked-class"))
    ds = datasets.ImageFolder(root)
    out = probe("index", root).splitlines()
    classes = [l.split("\t", 1)[1] for l in out if l.startswith("class\t")]
    samples = [(l.split("\t", 1)[1], int(l.split("\t", 1)[0])) for l in out
               if not l.startswith("class\t")]
    want = [(os.path.relpath(p, root), y) for p, y in ds.samples]
    check(classes == ds.classes, f"classes {classes} != torchvision's {ds.classes}")
    check(samples == want, f"samples differ:\n ours {samples}\n torchvision {want}")
    print(f"index: {len(classes)} classes, {len(samples)} samples, as ImageFolder")


def tiff_bytes(px, photometric, extra=None, planar=1, deflate=True):
    """A little-endian TIFF of px (H x W x S, uint8 or uint16) in strips of 8
    rows, its samples interleaved (planar 1) or in separate planes (2): the
    header, the strips, the tags' arrays, then the directory."""
    h, w, spp = px.shape
    planes = [px] if planar == 1 else [px[:, :, k:k + 1] for k in range(spp)]
    out = bytearray(8)
    offsets, counts = [], []
    for plane in planes:
        for y in range(0, h, 8):
            raw = np.ascontiguousarray(plane[y:y + 8]).astype("<u%d" % px.itemsize).tobytes()
            strip = zlib.compress(raw) if deflate else raw
            offsets.append(len(out))
            counts.append(len(strip))
            out += strip
    tags = [(256, "I", [w]), (257, "I", [h]), (258, "H", [8 * px.itemsize] * spp),
            (259, "H", [8 if deflate else 1]), (262, "H", [photometric]), (273, "I", offsets),
            (277, "H", [spp]), (278, "I", [8]), (279, "I", counts), (284, "H", [planar])]
    if extra is not None:
        tags.append((338, "H", [extra]))
    entries = b""
    for tag, fmt, values in tags:
        value = struct.pack("<%d%s" % (len(values), fmt), *values)
        if len(value) > 4:  # the array elsewhere, its offset here
            out += bytes(len(out) % 2)
            at = len(out)
            out += value
            value = struct.pack("<I", at)
        entry = struct.pack("<HHI", tag, 3 if fmt == "H" else 4, len(values))
        entries += entry + value.ljust(4, b"\0")
    out += bytes(len(out) % 2)
    out[:8] = b"II*\0" + struct.pack("<I", len(out))
    return bytes(out + struct.pack("<H", len(tags)) + entries + bytes(4))


def make_kinds(tmp):
    """Files of every kind: (name, path)."""
    base = picture(61, 47, seed=3)
    rgba = base.copy()
    rgba.putalpha(Image.fromarray((np.arange(61 * 47) % 256).reshape(47, 61).astype(np.uint8)))
    pal = base.convert("P", palette=Image.ADAPTIVE, colors=40)
    pal_t = pal.copy()
    pal_t.info["transparency"] = 3
    g16 = Image.fromarray((np.arange(61 * 47).reshape(47, 61) * 37 % 700).astype(np.int32), "I")
    kinds = {
        "rgb.jpg": (base, {"quality": 90}),
        "rgb444.jpg": (base, {"quality": 95, "subsampling": 0}),
        "gray.jpg": (base.convert("L"), {"quality": 90}),
        "cmyk.jpg": (base.convert("CMYK"), {"quality": 90}),
        "progressive.jpg": (base, {"quality": 85, "progressive": True}),
        "rgb.png": (base, {}),
        "rgba.png": (rgba, {}),
        "l.png": (base.convert("L"), {}),
        "la.png": (base.convert("LA"), {}),
        "p.png": (pal, {}),
        "pt.png": (pal_t, {"transparency": 3}),
        "i16.png": (g16, {}),
        "one.png": (base.convert("1"), {}),
        "rgb.webp": (base, {"lossless": True}),
        "lossy.webp": (base, {"quality": 80}),
        "rgb.bmp": (base, {}),
        "p.bmp": (pal, {}),
        "rgb.tif": (base, {}),
        "rgb.ppm": (base, {}),
        "l.pgm": (base.convert("L"), {}),
    }
    paths = []
    for name, (im, kw) in kinds.items():
        p = os.path.join(tmp, name)
        im.save(p, **kw)
        paths.append((name, p))
    # TIFF: alpha (unassociated, as PIL writes it, also compressed; associated) dropped
    # without premultiplying, CMYK, 16-bit gray, every orientation (PIL's exif_transpose)
    g16 = Image.fromarray((np.arange(61 * 47).reshape(47, 61) * 37 % 700).astype(np.uint16))
    cmyk = Image.fromarray(np.random.default_rng(4).integers(0, 256, (47, 61, 4), np.uint8), "CMYK")
    tiffs = {"rgba.tif": (rgba, {}), "rgba-lzw.tif": (rgba, {"compression": "tiff_lzw"}),
             "la.tif": (rgba.convert("LA"), {}), "cmyk.tif": (cmyk, {}),
             "l.tif": (base.convert("L"), {"compression": "tiff_adobe_deflate"}),
             "g16.tif": (g16, {}), "p.tif": (pal, {})}
    tiffs.update({f"orient{k}.tif": (base, {"tiffinfo": {274: k}}) for k in range(2, 9)})
    for name, (im, kw) in tiffs.items():
        paths.append((name, os.path.join(tmp, name)))
        im.save(paths[-1][1], **kw)
    data = open(os.path.join(tmp, "rgba.tif"), "rb").read()  # ExtraSamples: 2 -> 1
    k = data.index(bytes.fromhex("5201030001000000020000"))
    paths.append(("rgba-assoc.tif", os.path.join(tmp, "rgba-assoc.tif")))
    with open(paths[-1][1], "wb") as f:
        f.write(data[:k + 8] + b"\x01" + data[k + 9:])
    # TIFF in separate planes (deflated, as PIL's libtiff reader reads them right;
    # one 8-bit file plain): RGBA of either alpha, RGBA and RGB of 16 bits, LA,
    # CMYK of 8 and 16 bits; and RGBA of 16 bits with associated alpha
    # interleaved. The colours as stored (16 bits: the high byte), associated
    # alpha divided out, alpha dropped
    rng = np.random.default_rng(6)
    px8 = rng.integers(0, 256, (47, 61, 4), np.uint8)
    px8[0, :3, 3] = (0, 255, 1)
    px16 = rng.integers(0, 65536, (47, 61, 4)).astype(np.uint16)
    px16[0, :3, 3] = (0, 65535, 300)
    for name, px, photo, extra, planar, deflate in (
            ("rgba-planes.tif", px8, 2, 2, 2, True),
            ("rgba-planes-plain.tif", px8, 2, 2, 2, False),
            ("rgba-assoc-planes.tif", px8, 2, 1, 2, True),
            ("rgba16-planes.tif", px16, 2, 2, 2, True),
            ("rgb16-planes.tif", px16[:, :, :3], 2, None, 2, True),
            ("la-planes.tif", px8[:, :, 2:], 1, 2, 2, True),
            ("cmyk-planes.tif", px8, 5, None, 2, True),
            ("cmyk16-planes.tif", px16, 5, None, 2, True),
            ("rgba16-assoc.tif", px16, 2, 1, 1, True)):
        paths.append((name, os.path.join(tmp, name)))
        with open(paths[-1][1], "wb") as f:
            f.write(tiff_bytes(px, photo, extra, planar, deflate))
    # PGM and PPM of other maxima than 255, raw and plain: PIL rounds v / maxval * 255
    # half to even; a PGM past 255 is its mode I (v / maxval * 65535), clipped
    rng = np.random.default_rng(5)
    for name, magic, maxval, c in (("g6.pgm", "P5", 6, 1), ("rgb6.ppm", "P6", 6, 3),
                                   ("g1000.pgm", "P5", 1000, 1), ("g16.pgm", "P5", 65535, 1),
                                   ("rgb16.ppm", "P6", 65535, 3), ("rgb1000.ppm", "P6", 1000, 3),
                                   ("g6plain.pgm", "P2", 6, 1), ("g9plain.ppm", "P3", 9, 3)):
        v = rng.integers(0, maxval + 1, (47, 61, c))
        v[0, :8, 0] = np.arange(8) * maxval // 7  # every value of the small maxima
        head = f"{magic}\n61 47\n{maxval}\n".encode()
        if magic in ("P2", "P3"):
            body = "\n".join(" ".join(map(str, row.ravel())) for row in v).encode() + b"\n"
        else:
            body = v.astype(">u2" if maxval > 255 else "u1").tobytes()
        paths.append((name, os.path.join(tmp, name)))
        with open(paths[-1][1], "wb") as f:
            f.write(head + body)
    # a CMYK JPEG without its Adobe segment (FF EE): PIL reads it inverted all the same
    data = open(os.path.join(tmp, "cmyk.jpg"), "rb").read()
    k = data.index(b"\xff\xee")
    data = data[:k] + data[k + 2 + int.from_bytes(data[k + 2:k + 4], "big"):]
    paths.append(("cmyk-no-adobe.jpg", os.path.join(tmp, "cmyk-no-adobe.jpg")))
    with open(paths[-1][1], "wb") as f:
        f.write(data)
    return paths


def check_decoding(tmp):
    for name, p in make_kinds(tmp):
        pil = Image.open(p)
        pil.load()  # the size after the load (TIFF's orientation applied)
        w, h = pil.size
        for c, mode in ((3, "RGB"), (1, "L")):
            want = np.asarray(Image.open(p).convert(mode)).reshape(h, w, c)
            got = np.frombuffer(probe("pixels", p, c, 0, 0, w, h, w, h, 0, raw=True),
                                np.uint8).reshape(h, w, c)
            diff = np.abs(got.astype(int) - want.astype(int))
            check(diff.max() == 0, f"{name} as {mode}: max difference {diff.max()} from PIL's "
                  f"convert (mean {diff.mean():.3f})")
    print("decoding: every kind of file equals PIL's convert('RGB') and convert('L')")


def check_truncated(tmp):
    """A JPEG after an EXIF thumbnail (IFD1's JPEGInterchangeFormat), cut in its
    scan less than 4 KB after the thumbnail's end of image: PIL refuses it
    (LOAD_TRUNCATED_IMAGES off), and so do we, a box above the cut too."""
    main, thumb = io.BytesIO(), io.BytesIO()
    picture(64, 64, seed=8).save(main, "JPEG", quality=90)
    picture(16, 16, seed=9).save(thumb, "JPEG", quality=70)
    main, thumb = main.getvalue(), thumb.getvalue()
    at = 8 + 6 + 2 + 2 * 12 + 4  # the thumbnail, after the TIFF header, IFD0 and IFD1
    tiff = (b"II*\0" + struct.pack("<IHI", 8, 0, 14) + struct.pack("<H", 2)
            + struct.pack("<HHII", 0x201, 4, 1, at) + struct.pack("<HHII", 0x202, 4, 1, len(thumb))
            + bytes(4) + thumb)
    app1 = b"\xff\xe1" + struct.pack(">H", 2 + 6 + len(tiff)) + b"Exif\0\0" + tiff
    whole = main[:2] + app1 + main[2:]
    cut = whole[:len(app1) + len(main) // 2]
    check(len(cut) - (2 + len(app1)) < 4096, "the cut is not within 4 KB of the thumbnail")
    path = os.path.join(tmp, "exif-cut.jpg")
    with open(path, "wb") as f:
        f.write(cut)
    try:
        Image.open(path).convert("RGB")
        pil = "decodes it"
    except OSError as e:
        pil = f"refuses it ({e})"
    check(pil.startswith("refuses"), f"exif-cut.jpg: PIL {pil}")
    for box in ((0, 0, 8, 8), (0, 0, 64, 64)):
        r = subprocess.run([PROBE, "pixels", path, *map(str, (3, *box, box[2], box[3], 0))],
                           capture_output=True, check=False)
        check(r.returncode != 0 and b"truncated" in r.stderr,
              f"exif-cut.jpg, box {box}: ours rc {r.returncode} {r.stderr.decode().strip()}")
    print(f"truncated: a JPEG cut after an EXIF thumbnail: PIL {pil.split(' (')[0]}, and we do")


def draws_torch(w, h, n, scale, ratio):
    img = Image.new("RGB", (w, h))
    torch.manual_seed(0)
    out = np.empty((n, 4), np.int64)
    for k in range(n):
        i, j, hh, ww = T.RandomResizedCrop.get_params(img, scale, ratio)
        out[k] = (j, i, ww, hh)
    return out


def fallback_torch(boxes, w, h, ratio):
    """Whether each box is the central fallback's (torchvision does not say)."""
    in_ratio = w / h
    if in_ratio < min(ratio):
        fw, fh = w, int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        fw, fh = int(round(h * max(ratio))), h
    else:
        fw, fh = w, h
    fx, fy = (w - fw) // 2, (h - fh) // 2
    return (boxes[:, 0] == fx) & (boxes[:, 1] == fy) & (boxes[:, 2] == fw) & (boxes[:, 3] == fh)


def check_distribution():
    n = 100000
    scale, ratio = (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0)
    for w, h in ((500, 375), (400, 40)):
        theirs = draws_torch(w, h, n, scale, ratio)
        lines = probe("rrc", w, h, n, 1, *scale, *ratio).split("\n")
        ours = np.array([list(map(int, l.split())) for l in lines if l], np.int64)
        fb_ours = int(ours[:, 4].sum())
        ours = ours[:, :4]
        fb_theirs = int(fallback_torch(theirs, w, h, ratio).sum())
        # the same fallback rule: boxes of ours flagged as fallback are the central ones
        for name, f in (("area fraction", lambda b: b[:, 2] * b[:, 3] / (w * h)),
                        ("log aspect ratio", lambda b: np.log(b[:, 2] / b[:, 3]))):
            d, p = ks_p(f(ours), f(theirs))
            print(f"rrc {w}x{h}: {name}: KS D = {d:.4f}, p = {p:.3f}")
            check(p > 0.01, f"rrc {w}x{h}: {name} differs from torchvision's (p = {p:.4f})")
        pf = two_prop_p(fb_ours, n, fb_theirs, n)
        print(f"rrc {w}x{h}: fallback {fb_ours} ours, {fb_theirs} torchvision's of {n} "
              f"(p = {pf:.3f})")
        check(pf > 0.01, f"rrc {w}x{h}: fallback taken {fb_ours} vs {fb_theirs} times")
        inside = ((ours[:, 0] >= 0) & (ours[:, 1] >= 0) & (ours[:, 0] + ours[:, 2] <= w)
                  & (ours[:, 1] + ours[:, 3] <= h)).all()
        check(bool(inside), f"rrc {w}x{h}: a box outside the image")


def check_pixels(tmp):
    big = picture(500, 375, seed=7)
    files = [("jpeg", os.path.join(tmp, "big.jpg")), ("png", os.path.join(tmp, "big.png"))]
    big.save(files[0][1], quality=90)
    big.save(files[1][1])
    torch.manual_seed(1)
    rrc = T.RandomResizedCrop(224)
    for kind, path in files:
        img = Image.open(path).convert("RGB")
        worst_mean, worst_max = 0.0, 0
        for k in range(24):
            i, j, h, w = rrc.get_params(img, rrc.scale, rrc.ratio)
            flip = k % 2
            want = F.resized_crop(img, i, j, h, w, [224, 224], T.InterpolationMode.BILINEAR)
            if flip:
                want = F.hflip(want)
            want = np.asarray(want).astype(int)
            got = np.frombuffer(probe("pixels", path, 3, j, i, w, h, 224, 224, flip, raw=True),
                                np.uint8).reshape(224, 224, 3).astype(int)
            diff = np.abs(got - want)
            worst_mean, worst_max = max(worst_mean, diff.mean()), max(worst_max, int(diff.max()))
        print(f"pixels {kind}: 24 random resized crops (half flipped): worst mean |diff| "
              f"{worst_mean:.4f}/255, worst max {worst_max}/255")
        check(worst_mean <= 1.0 and worst_max <= 3,
              f"pixels {kind}: mean {worst_mean:.3f}, max {worst_max} (limits 1 and 3)")
        want = np.asarray(T.Compose([T.Resize(256), T.CenterCrop(224)])(img)).astype(int)
        got = np.frombuffer(probe("sample", path, 3, "resize:256", "center_crop:224", raw=True),
                            np.uint8).reshape(224, 224, 3).astype(int)
        d = np.abs(got - want)
        print(f"pixels {kind}: Resize(256) + CenterCrop(224): mean |diff| {d.mean():.4f}/255, "
              f"max {d.max()}/255")
        check(d.mean() <= 1.0 and d.max() <= 3, f"eval pixels {kind}: max {d.max()}")


def check_eval_boxes():
    sizes = [(500, 375), (375, 500), (333, 256), (640, 427), (257, 1000), (225, 227), (1024, 683),
             (300, 300), (999, 301), (256, 999)]
    for w, h in sizes:
        resized = F.resize(Image.new("L", (w, h)), 256)
        rw, rh = resized.size
        coords = Image.fromarray((np.arange(rh)[:, None] * 65536 + np.arange(rw)[None, :])
                                 .astype(np.int32), "I")
        crop = np.asarray(F.center_crop(coords, 224))
        ty, tx = divmod(int(crop[0, 0]), 65536)
        ours = list(map(int, probe("eval", w, h, 256, 224).split()))
        check(ours == [rw, rh, tx, ty, 224, 224],
              f"eval {w}x{h}: ours {ours}, torchvision's {[rw, rh, tx, ty, 224, 224]}")
    print(f"eval boxes: Resize(256) + CenterCrop(224) the same for {len(sizes)} sizes")


def main():
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, PIL "
          f"{Image.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        check_index(tmp)
        check_decoding(tmp)
        check_truncated(tmp)
        check_pixels(tmp)
    check_eval_boxes()
    check_distribution()
    CHECKS.summary("images_check")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
