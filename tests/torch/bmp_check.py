#!/usr/bin/env python3
"""BMP files of every layout against PIL 9.4 (runtime/io/codec_bmp.c).

    bmp_check.py IMAGE_PROBE

IMAGE_PROBE is tests/torch/image_probe. The files are written here byte by
byte (PIL writes few of these layouts):
  1. read as PIL reads them: the pixels of convert("RGB") and convert("L")
     of palettes of 1, 4 and 8 bits (short palettes, whose indices past them
     are grays; black and white; a gray ramp; OS/2's 12-byte header with
     3-byte entries), 16 bits (5-5-5, bit fields 5-6-5 and 5-5-5), 24 bits
     (plain and bit fields), 32 bits (plain, and each of PIL's six bit-field
     layouts, alpha dropped), every information header (12, 40, 64, 108, 124
     bytes), rows top down, bfOffBits 0 and pointing at the palette, the last
     row without its padding, RLE8 and RLE4 (encoded and absolute runs, ends
     of line, a run cut at its row's end, the other compression's nibbles,
     an absolute run cut by the file's end after the pixels it needs);
  2. refused as PIL refuses them, with our message: other header sizes,
     depths, compressions and bit fields, files cut in their pixels, RLE of
     24 bits, palettes past 65536 colours, RLE cut before its end;
  3. read otherwise than PIL, as docs/RUNNING.md lists: PIL's gray-palette
     shortcut at depths it misreads (a single black colour too), RLE deltas,
     odd absolute RLE4 runs, RLE ended early, palettes of more than 256
     colours: our pixels are the
     specification's (each index through the palette), and PIL's are not.
Exits 77 (skipped) without PIL or numpy.
"""
import io
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from PIL import Image
except ImportError as e:
    print(f"bmp_check: skipped ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

PROBE = sys.argv[1]
CHECKS = Checks(stream=sys.stdout)
check = CHECKS.check
W, H = 61, 47  # odd: rows are padded, 1- and 4-bit rows end inside a byte


def pack(idx, bpp):
    """Rows of indices (file order) packed MSB first and padded to 4 bytes."""
    h, w = idx.shape
    stride = (w * bpp + 31) // 32 * 4
    out = []
    for r in idx:
        if bpp == 8:
            b = r.astype(np.uint8).tobytes()
        elif bpp == 4:
            v = np.append(r, 0) if w % 2 else r
            b = (v[0::2] << 4 | v[1::2]).astype(np.uint8).tobytes()
        else:
            b = np.packbits(r.astype(np.uint8)).tobytes()
        out.append(b + bytes(stride - len(b)))
    return b"".join(out)


def bmp(w, h, bpp, body, *, info=40, comp=0, palette=None, used=None, masks=None,
        top_down=False, offset=None, entry=None, height_word=None):
    """A BMP: the headers, the palette (RGB triples; entry bytes each) and body."""
    entry = entry or (3 if info == 12 else 4)
    pal = b""
    for rgb in palette if palette is not None else []:
        pal += bytes(rgb[::-1]) + bytes(entry - 3)
    if info == 12:
        ih = struct.pack("<IHHHH", 12, w, h, 1, bpp)
    else:
        hh = height_word if height_word is not None else (-h if top_down else h)
        ih = struct.pack("<IiiHHIIiiII", info, w, hh, 1, bpp, comp, len(body), 2835, 2835,
                         len(palette) if used is None and palette is not None else used or 0, 0)
        if info > 40:
            ih += struct.pack("<4I", *(list(masks or ()) + [0, 0, 0, 0])[:4])
            ih += bytes(info - len(ih))
    mk = struct.pack("<3I", *masks[:3]) if info == 40 and comp == 3 else b""
    start = 14 + len(ih) + len(mk) + len(pal)
    off = start if offset is None else offset
    rest = ih + mk + pal + body
    return b"BM" + struct.pack("<IHHI", 14 + len(rest), 0, 0, off) + rest


def pil_pixels(data, mode):
    try:
        return np.asarray(Image.open(io.BytesIO(data)).convert(mode))
    except Exception as e:  # noqa: BLE001 (PIL raises several kinds)
        return f"{type(e).__name__}: {e}"


def ours(path, c, w, h):
    r = subprocess.run([PROBE, "pixels", path, *map(str, (c, 0, 0, w, h, w, h, 0))],
                       capture_output=True, check=False)
    if r.returncode != 0:
        return r.stderr.decode().strip()
    return np.frombuffer(r.stdout, np.uint8).reshape(h, w, c)


def rgb_to_l(a):
    """PIL's L of RGB: (R 19595 + G 38470 + B 7471 + 0x8000) >> 16."""
    a = a.astype(np.int64)
    return ((a[..., 0] * 19595 + a[..., 1] * 38470 + a[..., 2] * 7471 + 0x8000) >> 16)


rng = np.random.default_rng(11)


def colours(n):
    return [tuple(int(v) for v in rng.integers(0, 256, 3)) for _ in range(n)]


def layouts_as_pil():
    """(name, bytes, w, h) of files PIL reads, as we must."""
    out = []
    for bpp, used, n_idx in ((1, None, 2), (4, None, 16), (8, None, 256), (4, 5, 16),
                             (8, 40, 256), (1, 1, 2)):
        idx = rng.integers(0, n_idx, (H, W))
        pal = colours(used or 1 << bpp)
        out.append((f"pal{bpp}-{used or 'all'}.bmp",
                    bmp(W, H, bpp, pack(idx, bpp), palette=pal, used=used), W, H))
    idx = rng.integers(0, 2, (H, W))
    out.append(("bw1.bmp", bmp(W, H, 1, pack(idx, 1), palette=[(0, 0, 0), (255, 255, 255)]), W, H))
    idx = rng.integers(0, 256, (H, W))
    out.append(("gray8.bmp", bmp(W, H, 8, pack(idx, 8), palette=[(i, i, i) for i in range(256)]),
                W, H))
    out.append(("gray8-40.bmp", bmp(W, H, 8, pack(idx, 8),
                                    palette=[(i, i, i) for i in range(40)]), W, H))
    idx = rng.integers(0, 16, (H, W))
    out.append(("pal4-top.bmp", bmp(W, H, 4, pack(idx, 4), palette=colours(16), top_down=True),
                W, H))
    out.append(("pal4-v5.bmp", bmp(W, H, 4, pack(idx, 4), palette=colours(16), info=124), W, H))
    out.append(("pal4-off0.bmp", bmp(W, H, 4, pack(idx, 4), palette=colours(16), offset=0), W, H))
    # bfOffBits at the palette: PIL moves it on by 4 bytes a colour
    out.append(("pal4-offpal.bmp", bmp(W, H, 4, pack(idx, 4), palette=colours(16), offset=54),
                W, H))
    idx = rng.integers(0, 256, (H, W))
    out.append(("os2-8.bmp", bmp(W, H, 8, pack(idx, 8), info=12, palette=colours(256)), W, H))
    idx = rng.integers(0, 16, (H, W))
    out.append(("os2-4-off0.bmp", bmp(W, H, 4, pack(idx, 4), info=12, palette=colours(16),
                                      offset=0), W, H))
    # 24 and 32 bits: random bytes in every position (X and A too)
    stride24 = (W * 3 + 3) // 4 * 4
    body24 = rng.integers(0, 256, H * stride24, np.uint8).tobytes()
    body32 = rng.integers(0, 256, H * W * 4, np.uint8).tobytes()
    out += [("rgb24.bmp", bmp(W, H, 24, body24), W, H),
            ("rgb24-top-v4.bmp", bmp(W, H, 24, body24, info=108, top_down=True), W, H),
            ("rgb24-os2v2.bmp", bmp(W, H, 24, body24, info=64), W, H),
            ("rgb24-os2.bmp", bmp(W, H, 24, body24, info=12), W, H),
            ("rgb24-bf.bmp", bmp(W, H, 24, body24, comp=3, masks=(0xFF0000, 0xFF00, 0xFF)), W, H),
            ("rgb24-off0.bmp", bmp(W, H, 24, body24, offset=0), W, H),
            ("rgb32.bmp", bmp(W, H, 32, body32), W, H),
            ("bgrx32-bf40.bmp", bmp(W, H, 32, body32, comp=3, masks=(0xFF0000, 0xFF00, 0xFF)),
             W, H),
            ("xbgr32-bf40.bmp", bmp(W, H, 32, body32, comp=3,
                                    masks=(0xFF000000, 0xFF0000, 0xFF00)), W, H)]
    for name, masks in (("bgrx", (0xFF0000, 0xFF00, 0xFF, 0)),
                        ("xbgr", (0xFF000000, 0xFF0000, 0xFF00, 0)),
                        ("abgr", (0xFF000000, 0xFF0000, 0xFF00, 0xFF)),
                        ("rgba", (0xFF, 0xFF00, 0xFF0000, 0xFF000000)),
                        ("bgra", (0xFF0000, 0xFF00, 0xFF, 0xFF000000)),
                        ("zero", (0, 0, 0, 0))):
        for info in (108, 124):
            out.append((f"{name}32-v{info}.bmp", bmp(W, H, 32, body32, info=info, comp=3,
                                                     masks=masks, top_down=info == 124), W, H))
    # 16 bits: 5-5-5 (the top bit at random), bit fields 5-6-5 and 5-5-5
    body16 = rng.integers(0, 256, H * (W * 2 + 2), np.uint8).tobytes()
    out += [("rgb555.bmp", bmp(W, H, 16, body16), W, H),
            ("rgb555-os2.bmp", bmp(W, H, 16, body16, info=12), W, H),
            ("rgb565.bmp", bmp(W, H, 16, body16, comp=3, masks=(0xF800, 0x7E0, 0x1F),
                               top_down=True), W, H),
            ("bf555-v5-off0.bmp", bmp(W, H, 16, body16, info=124, comp=3,
                                      masks=(0x7C00, 0x3E0, 0x1F), offset=0), W, H)]
    # the last row without its padding (PIL needs its pixels only)
    cut = [("pal1", 1, 2), ("pal4", 4, 16), ("pal8", 8, 256)]
    for name, bpp, n_idx in cut:
        idx = rng.integers(0, n_idx, (H, W))
        data = bmp(W, H, bpp, pack(idx, bpp), palette=colours(n_idx))
        pad = (W * bpp + 31) // 32 * 4 - (W * bpp + 7) // 8
        out.append((f"{name}-nopad.bmp", data[:len(data) - pad], W, H))
    data = bmp(W, H, 24, body24)
    out.append(("rgb24-nopad.bmp", data[:len(data) - (stride24 - 3 * W)], W, H))
    out += rle_files()
    return out


def rle8_encode(idx, top_down=False):
    """idx (image rows) as RLE8: encoded runs, absolute runs of even counts,
    an end of line per row, an end of bitmap."""
    rows = idx if top_down else idx[::-1]
    out = bytearray()
    for r in rows:
        x, w = 0, len(r)
        while x < w:
            k = 1
            while x + k < w and r[x + k] == r[x] and k < 255:
                k += 1
            if k >= 3 or w - x < 4:
                out += bytes([k, r[x]])
                x += k
            else:
                k = min(w - x, 6) // 2 * 2
                out += bytes([0, k]) + bytes(int(v) for v in r[x:x + k])
                x += k
        out += b"\0\0"
    return bytes(out + b"\0\1")


def rle4_encode(idx):
    """idx as RLE4 (bottom up): pairs of nibbles in encoded runs of up to 8
    pixels, absolute runs of 4, a first run past the row's end."""
    out = bytearray()
    for j, r in enumerate(idx[::-1]):
        x, w = 0, len(r)
        if j == 0:  # PIL cuts a run at its row's end
            out += bytes([w + 9, r[0] << 4 | r[1]])
            out += b"\0\0"
            continue
        while x < w:
            if x + 4 <= w and j % 2:
                v = r[x:x + 4]
                out += bytes([0, 4, v[0] << 4 | v[1], v[2] << 4 | v[3]])
                x += 4
            else:
                k = min(w - x, 8)
                a, b = r[x], r[x + 1] if x + 1 < w else 0
                out += bytes([k, a << 4 | b])
                # what the run decodes to, so the test's image says what is there
                r[x:x + k] = [a if i % 2 == 0 else b for i in range(k)]
                x += k
        out += b"\0\0"
    return bytes(out + b"\0\1")


def rle_files():
    out = []
    idx = rng.integers(0, 5, (H, W))
    idx[:, 10:30] = 3  # long runs
    for top in (False, True):
        out.append((f"rle8{'-top' if top else ''}.bmp",
                    bmp(W, H, 8, rle8_encode(idx, top), comp=1, palette=colours(5), used=5,
                        top_down=top), W, H))
    gray = [(i, i, i) for i in range(8)]
    out.append(("rle8-gray.bmp", bmp(W, H, 8, rle8_encode(idx), comp=1, palette=gray), W, H))
    # the other compression's unit: RLE8 in a 4-bit file, RLE4 in an 8-bit one
    out.append(("rle8-in-4.bmp", bmp(W, H, 4, rle8_encode(idx), comp=1, palette=colours(16)),
                W, H))
    idx4 = rng.integers(0, 16, (H, W))
    body = rle4_encode(idx4)
    out.append(("rle4.bmp", bmp(W, H, 4, body, comp=2, palette=colours(16)), W, H))
    out.append(("rle4-in-8.bmp", bmp(W, H, 8, body, comp=2, palette=colours(256)), W, H))
    # an absolute run cut by the file's end after the last pixels it needs
    out.append(("rle8-abs-cut.bmp", bmp(4, 1, 8, bytes([0, 6, 1, 0, 1, 0]), comp=1,
                                        palette=colours(2)), 4, 1))
    out.append(("rle4-abs-cut.bmp", bmp(4, 1, 4, bytes([0, 8, 0x10, 0x10]), comp=2,
                                        palette=colours(2)), 4, 1))
    return out


def refused():
    """(name, bytes, what our message says) of files PIL refuses too."""
    idx = rng.integers(0, 16, (4, 5))
    good = bmp(5, 4, 4, pack(idx, 4), palette=colours(16))
    body24 = bytes(4 * 16)
    body32 = bytes(4 * 20)
    out = [("head52.bmp", b"BM" + good[2:14] + struct.pack("<I", 52) + good[18:],
            "an information header of 52 bytes"),
           ("bpp2.bmp", good[:28] + struct.pack("<H", 2) + good[30:], "2 bits a pixel"),
           ("bpp0.bmp", good[:28] + struct.pack("<H", 0) + good[30:], "0 bits a pixel"),
           ("jpeg.bmp", bmp(5, 4, 24, body24, comp=4), "compression 4 with 24 bits"),
           ("png.bmp", bmp(5, 4, 24, body24, comp=5), "compression 5 with 24 bits"),
           ("alphabf.bmp", bmp(5, 4, 32, body32, comp=6), "compression 6 with 32 bits"),
           ("bf8.bmp", bmp(5, 4, 8, bytes(32), comp=3, palette=colours(4),
                           masks=(0xFF0000, 0xFF00, 0xFF)),
            "compression 3 with 8 bits"),
           ("bf24.bmp", bmp(5, 4, 24, body24, comp=3, masks=(0xFF, 0xFF00, 0xFF0000)),
            "24 bits a pixel in bit fields red 0xff, green 0xff00, blue 0xff0000"),
           ("bf32.bmp", bmp(5, 4, 32, body32, comp=3, masks=(0xFF00, 0xFF0000, 0xFF000000, 0xFF),
                            info=108), "32 bits a pixel in bit fields red 0xff00"),
           ("bf16.bmp", bmp(5, 4, 16, body24, comp=3, masks=(0xF00, 0xF0, 0xF)),
            "16 bits a pixel in bit fields red 0xf00"),
           ("rle24.bmp", bmp(5, 4, 24, b"\5\1\0\1", comp=1), "compression 1 with 24 bits"),
           ("colours.bmp", bmp(5, 4, 8, bytes(32), palette=colours(4), used=70000),
            "a palette of 70000 colours"),
           ("cut24.bmp", bmp(5, 4, 24, body24)[:-4], "truncated (5 x 4 pixels of 24 bits"),
           ("cut4.bmp", good[:-3], "truncated (5 x 4 pixels of 4 bits"),
           ("rle-cut.bmp", bmp(5, 4, 8, b"\5\1\0\0\5\2", comp=1, palette=colours(4)),
            "truncated (the RLE data ends"),
           ("rle-none.bmp", bmp(5, 4, 8, b"", comp=1, palette=colours(4)),
            "truncated (no RLE data")]
    return out


def differing():
    """(name, bytes, w, h, the specification's RGB) of files PIL misreads or
    refuses, as docs/RUNNING.md lists them."""
    out = []

    def spec(idx, pal):
        """The image of idx, given in the file's rows (bottom up)."""
        lut = np.array([pal[i] if i < len(pal) else (i, i, i) for i in range(256)], np.uint8)
        return lut[idx][::-1]

    # PIL's gray-palette shortcut at the depths it misreads
    bw, black = [(0, 0, 0), (255, 255, 255)], [(0, 0, 0)]
    for name, bpp, pal, n_idx in (("bw4", 4, bw, 2), ("bw8", 8, bw, 2),
                                  ("ramp4", 4, [(i, i, i) for i in range(16)], 16),
                                  ("black1", 1, black, 2), ("black4", 4, black, 2),
                                  ("ramp1", 1, [(i, i, i) for i in range(3)], 2)):
        idx = rng.integers(0, n_idx, (H, W))
        out.append((f"{name}.bmp", bmp(W, H, bpp, pack(idx, bpp), palette=pal), W, H,
                    spec(idx, pal)))
    pal = colours(4)
    # 4 x 3, bottom up: a row, a delta (2 right, 1 up) then 2 pixels, end
    body = bytes([4, 1, 0, 0, 0, 2, 2, 1, 2, 3, 0, 1])
    rows = np.zeros((3, 4), np.int64)
    rows[0] = 1
    rows[2, 2:] = 3
    out.append(("rle-delta.bmp", bmp(4, 3, 8, body, comp=1, palette=pal), 4, 3,
                spec(rows, pal)))
    # RLE4, absolute runs of 3 and 5 nibbles (padded to 2 bytes)
    body = bytes([0, 3, 0x12, 0x30, 0, 0, 0, 5, 0x21, 0x32, 0x10, 0, 0, 0, 0, 1])
    rows = np.array([[1, 2, 3, 0, 0], [2, 1, 3, 2, 1]])
    out.append(("rle4-odd.bmp", bmp(5, 2, 4, body, comp=2, palette=pal), 5, 2,
                spec(rows, pal)))
    # ended early by its end of bitmap: the rest index 0
    body = bytes([4, 2, 0, 0, 0, 1])
    rows = np.zeros((3, 4), np.int64)
    rows[0] = 2
    out.append(("rle-eob.bmp", bmp(4, 3, 8, body, comp=1, palette=pal), 4, 3,
                spec(rows, pal)))
    pal300 = colours(300)
    for bpp in (4, 8):
        idx = rng.integers(0, 1 << bpp, (H, W))
        out.append((f"pal{bpp}-300.bmp", bmp(W, H, bpp, pack(idx, bpp), palette=pal300), W, H,
                    spec(idx, pal300)))
    return out


def main():
    with tempfile.TemporaryDirectory() as tmp:
        def write(name, data):
            p = os.path.join(tmp, name)
            with open(p, "wb") as f:
                f.write(data)
            return p

        files = layouts_as_pil()
        for name, data, w, h in files:
            p = write(name, data)
            for c, mode in ((3, "RGB"), (1, "L")):
                want = pil_pixels(data, mode)
                check(not isinstance(want, str), f"{name}: PIL does not read it: {want}")
                got = ours(p, c, w, h)
                if isinstance(got, str) or isinstance(want, str):
                    check(False, f"{name} as {mode}: {got}")
                    continue
                diff = np.abs(got.reshape(want.shape).astype(int) - want.astype(int))
                check(diff.max() == 0, f"{name} as {mode}: max difference {diff.max()} from "
                      f"PIL's (mean {diff.mean():.3f})")
        print(f"as PIL: {len(files)} files of every layout give PIL's convert('RGB') and "
              "convert('L')")
        bad = refused()
        for name, data, says in bad:
            p = write(name, data)
            pil = pil_pixels(data, "RGB")
            check(isinstance(pil, str), f"{name}: PIL reads it")
            got = ours(p, 3, 1, 1)
            check(isinstance(got, str) and says in got, f"{name}: ours {got!r}, not '{says}'")
        print(f"refused: {len(bad)} files PIL refuses, refused with the reason")
        other = differing()
        for name, data, w, h, want in other:
            p = write(name, data)
            got = ours(p, 3, w, h)
            if isinstance(got, str):
                check(False, f"{name}: {got}")
                continue
            check(np.array_equal(got, want), f"{name}: not the specification's pixels")
            gl = ours(p, 1, w, h)
            check(not isinstance(gl, str) and np.array_equal(gl[..., 0], rgb_to_l(want)),
                  f"{name}: L not the specification's")
            pil = pil_pixels(data, "RGB")
            check(isinstance(pil, str) or not np.array_equal(pil, want),
                  f"{name}: PIL reads it right now: docs/RUNNING.md's list is out of date")
        print(f"otherwise than PIL: {len(other)} files read as the specification says "
              "(PIL misreads or refuses each)")
    CHECKS.summary("bmp_check")
    return CHECKS.exit_code()


if __name__ == "__main__":
    sys.exit(main())
