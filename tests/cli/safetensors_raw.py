"""safetensors_raw.py - a safetensors file read with the standard library
alone: (metadata, {name: (dtype, shape, raw bytes)}). Shared by the cli
tests that read what --dump-data writes."""
import json
import struct


def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", {})
    out = {}
    for name, t in head.items():
        b, e = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], raw[8 + n + b:8 + n + e])
    return meta, out
