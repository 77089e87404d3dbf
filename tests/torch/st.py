"""st.py - a minimal safetensors reader and writer on numpy.

Format: 8 bytes N (unsigned little-endian), N bytes of JSON header
{"__metadata__": {...} (optional), "<name>": {"dtype", "shape",
"data_offsets": [begin, end]}}, then the raw little-endian data; offsets are
relative to the end of the header. The writer sorts tensors by name, lays the
data out in that order and pads the header with spaces to a multiple of 8.
Only the dtypes the project uses are supported (F64 too, for references).
"""

import json
import struct

import numpy as np

_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "U8": np.dtype("u1"),
}
_NAMES = {v: k for k, v in _DTYPES.items()}


def load(path):
    """Returns (tensors: dict name -> numpy array, metadata: dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} exceeds the file")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = memoryview(raw)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        dt = _DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if end - begin != count * dt.itemsize or end > len(data):
            raise ValueError(f"{path}: tensor {name}: bad data_offsets {begin}, {end}")
        out[name] = np.frombuffer(data[begin:end], dtype=dt).reshape(shape).copy()
    return out, meta


def save(path, tensors, metadata=None):
    """Writes dict name -> numpy array (sorted by name) to path."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in sorted(metadata.items())}
    blobs = []
    off = 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])
        dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
        if dt not in _NAMES:
            raise ValueError(f"tensor {name}: unsupported dtype {a.dtype}")
        b = np.ascontiguousarray(a, dtype=dt).tobytes()
        header[name] = {"dtype": _NAMES[dt], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
