#!/usr/bin/env python3
"""san_classify.py - whose kernels compute-sanitizer's reports are in.

Reads compute-sanitizer output (racecheck, memcheck, synccheck, initcheck) and
sorts each report (an "========= Error: ..." or "========= Warning: ..." block)
by the kernels it names ("at KERNEL+0xOFFSET", in the report's first lines):
a report whose every kernel is a library's (cuDNN, cuBLAS/cuBLASLt, CUTLASS,
NCCL: the name patterns below) is the library's; any other is ours. A report
inside a library kernel (on an H200: 6 racecheck hazards at two fixed
offsets of cuDNN's sm90_xmma_dgrad_implicit_gemm kernel, shared memory
written and read within that one kernel) is in code we neither wrote nor
launch with our own parameters: it is reported as the library's, never
dropped, and does not count as our failure.

Prints one JSON line: {"reports", "ours", "library", "our_kernels",
"library_kernels"} (kernel names, first seen first, at most 5 each).
Usage: san_classify.py FILE [FILE...]; exit 0, 2 usage.
"""
import json
import re
import sys

# Library kernels: cuDNN's and cuBLAS's (xmma, sm80_/sm90_ prefixed, cudnn
# namespaces), CUTLASS's, NCCL's, cuDNN's precompiled and runtime-fused engines.
LIBRARY = re.compile(r"cudnn|cublas|cutlass|xmma|nccl|^sm\d+_|engines_precompiled|cask"
                     r"|fft2d_|implicit_convolve|explicit_convolve|bn_fw_|bn_bw_|pooling_",
                     re.IGNORECASE)
AT = re.compile(r"\bat (?:0x[0-9a-f]+ in )?(\S+?)\+0x[0-9a-f]+", re.IGNORECASE)


def reports(lines):
    """[[kernel names]] per report block."""
    out, cur = [], None
    for ln in lines:
        body = ln[len("========="):].strip() if ln.startswith("=========") else None
        if body is None:
            continue
        if re.match(r"(Error|Warning|Invalid|Race|Uninitialized|Barrier)\b", body):
            cur = []
            out.append(cur)
        elif not body or "SUMMARY" in body:
            cur = None
            continue
        if cur is not None:
            cur.extend(AT.findall(body))
    return out


def classify(lines):
    ours, lib, ok, lk = 0, 0, [], []
    for names in reports(lines):
        if names and all(LIBRARY.search(n) for n in names):
            lib += 1
            for n in names:
                if n not in lk:
                    lk.append(n)
        else:
            ours += 1
            for n in names or ["(no kernel named)"]:
                if n not in ok and not LIBRARY.search(n):
                    ok.append(n)
    return {"reports": ours + lib, "ours": ours, "library": lib, "our_kernels": ok[:5],
            "library_kernels": lk[:5]}


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    lines = []
    for p in argv[1:]:
        try:
            lines += open(p, errors="replace").read().splitlines()
        except OSError:
            pass
    print(json.dumps(classify(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
