#!/usr/bin/env python3
"""kernel_table.py - kernels of one profiled step, grouped by family.

Reads what `ncu --csv --metrics gpu__time_duration.sum` printed (the details
page: a row per kernel and metric; or --page raw: a row per kernel, a column
per metric; other lines, such as ==PROF== messages or the program's own
output, are skipped) and prints the launch count and milliseconds per family,
the total, and last one JSON line:
  {"kernels", "total_ms", "families": {FAMILY: {"count", "ms"}},
   "top": [[NAME, FAMILY, COUNT, MS], ...] (the 15 longest kernel names),
   "other": [[NAME, COUNT, MS], ...] (the 10 longest of family other),
   "unmeasured": [[NAME, FAMILY, COUNT], ...], "ncu_errors": [LINE, ...],
   "step_ms", "busy_frac" (with --step-ms: total kernel ms / step ms)}

A kernel row whose time is not a finite number (ncu prints "nan" for a launch
that failed under it, with grid and block (0, 0, 0), as cuDNN's
bn_fw_tr_1C11_singleread did on an H200 when the driver reported
LaunchFailed) is not measured: it is counted in "kernels" and listed under
"unmeasured", never summed (one nan made every total nan), and the table
says so. ncu's ==ERROR== lines are kept in "ncu_errors": a profile that has
them is incomplete (the program was stopped), whatever the table shows.

Families, first match wins, on the kernel's name (lower case):
  conv wgrad, conv dgrad, conv fprop (cuDNN and CUTLASS convolution kernels
  and their helpers), batch norm, pooling, transpose/cast, gemm (cuBLAS),
  sgd, elementwise/relu/add, other (loss, anything unknown).

With --ranges RANGES, the same profile imported again with ncu's
--print-nvtx-rename kernel (each kernel named by the innermost profiler
range it was launched in: pipeline-run's units and passes, "h.3 forward",
"lm_head backward input", runtime/core/ranges.h), the kernels are joined by
their ID (or, where the IDs differ, by their order when the counts agree)
and also summed per range group, with each group's families:
  the unit's numbered parts folded ("h.3 forward" and "h.7 forward" are
  "h.* forward", "layer3.2 backward" is "layer3.* backward"); a task's
  kernels outside any unit ("F3 stage1") are "F stage1, outside units"; a
  step's outside any task "step, outside tasks"; copies "copies"; a kernel
  in no range (ncu leaves its name) "(no range)". The JSON line then has
  "ranges": {GROUP: {"count", "ms", "families": {FAMILY: ms}}} and
  "ranges_joined" (kernels matched) beside "ranges_by" ("id" or "order").

Usage: kernel_table.py NCU_OUTPUT [NCU_OUTPUT...] [--step-ms MS] [--csv FILE]
                       [--ranges RANGES]
  several files: the first that holds kernel rows is read (ncu's log file,
  then the captured stdout, say). --csv writes one row per kernel name.
Exit status: 0, 1 when no kernel row was found, 2 usage.
"""
import argparse
import csv
import json
import re
import sys

METRIC = "gpu__time_duration.sum"
UNIT_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0,
           "ms": 1.0, "second": 1e3, "s": 1e3}

# (family, pattern over the lower-case kernel name); the first match wins.
# Attention first: cuDNN's fused attention kernels name their direction as
# the convolutions do (..._sdpa_..._fprop_...); ours are forward_k, dq_k,
# dkv_k, delta_k (attention_tile.cuh) and their _mma_k forms
# (attention_tc.cuh: bf16, and f32 in 3xTF32).
FAMILIES = [
    ("attention", r"sdpa|fmha|flash|attention|attn|(^|[^a-z_])(forward|dq|dkv|delta)(_mma)?_k$"),
    ("conv wgrad", r"wgrad|backward_filter|bwd_filter|convolve_.*filter"),
    ("conv dgrad", r"dgrad|backward_data|bwd_data"),
    ("conv fprop", r"fprop|convolve|conv2d|conv_fwd|winograd|fft2d|fft_|computeoffsets"
                   r"|implicit_gemm|convolution"),
    ("batch norm", r"(^|[^a-z])bn_|batchnorm|batch_norm|bn_fw|bn_bw|welford"),
    ("pooling", r"pool|gap_(fwd|bwd)"),
    ("transpose/cast", r"transpose|nchwtonhwc|nhwctonchw|bf16_from_f32|f32_from_bf16|cast"
                       r"|convert|permute|tensor_transform|reorder"),
    ("gemm", r"gemm|gemv|splitkreduce|cublas|dot_kernel|matmul"),
    ("layer norm", r"(^|[^a-z])ln_|layernorm|layer_norm"),
    ("gelu", r"gelu"),
    ("loss", r"classifier|xent|cross_entropy|softmax|(^|[^a-z_])(rows|total)_k$"),
    ("embedding", r"embedding|(^|[^a-z])emb_|(^|[^a-z_])(gather|position)_k$"),
    ("bias grad", r"colsum|(^|[^a-z_])parts_add_k$"),
    ("padded copy", r"copy_pitched"),
    ("dropout", r"dropout"),
    ("adamw/clip", r"adamw|sumsq|scale_multi"),
    ("sgd", r"sgd|momentum|optimizer"),
    ("elementwise/relu/add", r"(^|[^a-z])ew_|elementwise|relu|add|accum|bias|scale|zero"
                             r"|fill|copy|axpy"),
]
ORDER = [f for f, _ in FAMILIES] + ["other"]
_compiled = [(f, re.compile(p)) for f, p in FAMILIES]


def base_name(name):
    """The function name of a kernel: no 'void', namespace, template or arguments."""
    n = name.strip()
    if n.startswith("void "):
        n = n[5:]
    depth, out = 0, []
    for ch in n:  # drop template arguments and the parameter list
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    n = "".join(out).strip()
    return n.rsplit("::", 1)[-1] or name


def short_name(name):
    """base_name, with the template arguments where the name alone says nothing
    (CUTLASS's and cuBLASLt's generic Kernel<...>)."""
    b = base_name(name)
    if len(b) > 8:
        return b
    n = name.strip()
    n = n[5:] if n.startswith("void ") else n
    cut = n.find("(")
    return (n[:cut] if cut > 0 else n).strip()


def family(name):
    b = base_name(name).lower()
    full = name.lower()
    for fam, rx in _compiled:
        if rx.search(b):
            return fam
    for fam, rx in _compiled:  # hints in namespaces and template arguments
        if rx.search(full):
            return fam
    return "other"


def number(text):
    """The value of a metric cell: a float (nan for "nan" or "n/a"), None when
    the cell is not a number at all (a units row)."""
    t = text.replace(",", "").strip()
    if t.lower() in ("nan", "n/a", "-nan", "inf", "-inf"):
        return float("nan")
    try:
        return float(t)
    except ValueError:
        return None


def measured(ms):
    return ms == ms and ms not in (float("inf"), float("-inf"))


def ncu_errors(paths):
    """ncu's ==ERROR== lines in the files, in order, without repeats."""
    out = []
    for p in paths:
        try:
            for ln in open(p, errors="replace"):
                ln = ln.strip()
                if ln.startswith("==ERROR==") and ln not in out:
                    out.append(ln)
        except OSError:
            pass
    return out


unknown_units = set()  # units of gpu__time_duration rows that could not be read


def read_rows(path):
    """[(kernel id, kernel name, ms)] from one ncu output file."""
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return []
    lines = [ln for ln in lines if ln.startswith('"')]
    rows = list(csv.reader(lines))
    kernels = {}
    i = 0
    while i < len(rows):
        head = rows[i]
        i += 1
        if "Kernel Name" not in head:
            continue
        col = {h: k for k, h in enumerate(head)}
        kid = col.get("ID")
        kname = col["Kernel Name"]
        if "Metric Name" in col and "Metric Value" in col:  # details page
            mname, mval, munit = col["Metric Name"], col["Metric Value"], col.get("Metric Unit")
            while i < len(rows) and "Kernel Name" not in rows[i]:
                r = rows[i]
                i += 1
                if len(r) <= max(mname, mval, kname) or r[mname] != METRIC:
                    continue
                v = number(r[mval])
                unit = r[munit].strip() if munit is not None and munit < len(r) else "nsecond"
                if v is not None and unit not in UNIT_MS:
                    unknown_units.add(unit)
                if v is None or unit not in UNIT_MS:
                    continue
                key = r[kid] if kid is not None else str(len(kernels))
                kernels[key] = (r[kname], v * UNIT_MS[unit])
        elif METRIC in col:  # raw page: a units row, then a row per kernel
            mcol, unit = col[METRIC], "nsecond"
            while i < len(rows) and "Kernel Name" not in rows[i]:
                r = rows[i]
                i += 1
                if len(r) <= max(mcol, kname):
                    continue
                v = number(r[mcol])
                if v is None:
                    unit = r[mcol].strip()
                    continue
                if unit not in UNIT_MS:
                    unknown_units.add(unit)
                    continue
                key = r[kid] if kid is not None else str(len(kernels))
                kernels[key] = (r[kname], v * UNIT_MS[unit])
    return [(k, n, ms) for k, (n, ms) in kernels.items()]


_UNIT_PASS = re.compile(r"^(\S+) (forward|recompute|backward|backward input|backward weight)$")
_TASK = re.compile(r"^([FBIW])\d+ stage(\d+)$")


def range_group(rname, kname):
    """The group of a kernel launched in range rname (kname: its own name)."""
    if rname is None or rname.strip() == "" or rname == kname:
        return "(no range)"
    r = rname.strip()
    m = _UNIT_PASS.match(r)
    if m:
        return "%s %s" % (re.sub(r"\.\d+(?=\.|$)", ".*", m.group(1)), m.group(2))
    m = _TASK.match(r)
    if m:
        return "%s stage%s, outside units" % (m.group(1), m.group(2))
    if re.match(r"^step -?\d+$", r):
        return "step, outside tasks"
    if r.startswith("copy "):
        return "copies"
    return re.sub(r" \d+$", "", r)  # "upload 3": "upload"


def join_ranges(rows, rrows):
    """[(group, family, ms)] of the measured kernels of rows, named by rrows;
    and how they were joined ("id", "order" or "none")."""
    by_id = {k: n for k, n, _ in rrows}
    if rows and all(k in by_id for k, _, _ in rows):
        named, how = [(by_id[k], n, ms) for k, n, ms in rows], "id"
    elif len(rows) == len(rrows):
        named, how = [(rn, n, ms) for (_, n, ms), (_, rn, _) in zip(rows, rrows)], "order"
    else:
        return [], "none"
    return [(range_group(rn, n), family(n), ms) for rn, n, ms in named if measured(ms)], how


def print_ranges(rows, rpath):
    """The table per range group; the JSON's "ranges" entries."""
    rrows = read_rows(rpath)
    joined, how = join_ranges(rows, rrows)
    out = {"ranges_by": how, "ranges_joined": len(joined), "ranges": {}}
    if not joined:
        print("ranges (%s): %d kernel rows against %d, not joined" % (rpath, len(rrows),
                                                                    len(rows)))
        return out
    groups = {}
    for g, f, ms in joined:
        e = groups.setdefault(g, {"count": 0, "ms": 0.0, "families": {}})
        e["count"] += 1
        e["ms"] += ms
        e["families"][f] = e["families"].get(f, 0.0) + ms
    total = sum(e["ms"] for e in groups.values())
    print("by range (%d kernels joined by %s):" % (len(joined), how))
    print("%-34s %7s %10s %7s  families (ms)" % ("range", "count", "ms", "share"))
    for g, e in sorted(groups.items(), key=lambda kv: -kv[1]["ms"]):
        fams = sorted(e["families"].items(), key=lambda kv: -kv[1])
        print("%-34s %7d %10.3f %6.1f%%  %s" % (
            g[:34], e["count"], e["ms"], 100.0 * e["ms"] / total if total else 0,
            ", ".join("%s %.3f" % (f, ms) for f, ms in fams[:4])))
    out["ranges"] = groups
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--step-ms", type=float)
    ap.add_argument("--csv")
    ap.add_argument("--ranges")
    a = ap.parse_args()
    rows, src = [], None
    for f in a.files:
        rows = read_rows(f)
        if rows:
            src = f
            break
    if not rows:
        print("kernel_table.py: no %s kernel rows in %s%s" % (
            METRIC, ", ".join(a.files),
            " (unknown units: %s)" % ", ".join(sorted(unknown_units)) if unknown_units else ""),
              file=sys.stderr)
        return 1
    fams = {f: [0, 0.0] for f in ORDER}
    names = {}
    lost = {}  # short name -> [family, launches] of rows without a time
    for _, name, ms in rows:
        fam = family(name)
        fams[fam][0] += 1
        if not measured(ms):
            e = lost.setdefault(short_name(name), [fam, 0])
            e[1] += 1
            continue
        fams[fam][1] += ms
        e = names.setdefault(short_name(name), [fam, 0, 0.0])
        e[1] += 1
        e[2] += ms
    total = sum(v[1] for v in fams.values())
    errors = ncu_errors(a.files)
    n_lost = sum(c for _, c in lost.values())
    print("kernels of one step (%s): %d launches, %.2f ms%s" % (
        src, len(rows), total,
        " (%d launch(es) not measured: ncu gave no time)" % n_lost if n_lost else ""))
    print("%-22s %7s %10s %7s" % ("family", "count", "ms", "share"))
    for f in ORDER:
        c, ms = fams[f]
        if c:
            print("%-22s %7d %10.3f %6.1f%%" % (f, c, ms, 100.0 * ms / total if total else 0))
    print("%-22s %7d %10.3f" % ("total", len(rows), total))
    top = sorted(names.items(), key=lambda kv: -kv[1][2])
    print("longest kernels:")
    for n, (f, c, ms) in top[:15]:
        print("  %9.3f ms %5d x  %-20s %s" % (ms, c, f, n[:110]))
    others = [(n, c, ms) for n, (f, c, ms) in top if f == "other"][:10]
    if others:
        print("longest of family other:")
        for n, c, ms in others:
            print("  %9.3f ms %5d x  %s" % (ms, c, n[:130]))
    for n, (f, c) in sorted(lost.items()):
        print("  not measured: %5d x  %-20s %s" % (c, f, n[:110]))
    for ln in errors:
        print("ncu: %s" % ln)
    out = {"kernels": len(rows), "total_ms": total,
           "families": {f: {"count": c, "ms": ms} for f, (c, ms) in fams.items() if c},
           "top": [[n, f, c, ms] for n, (f, c, ms) in top[:15]],
           "other": [[n, c, ms] for n, c, ms in others],
           "unmeasured": [[n, f, c] for n, (f, c) in sorted(lost.items())],
           "ncu_errors": errors}
    if a.ranges:
        out.update(print_ranges(rows, a.ranges))
    if a.step_ms:
        out["step_ms"] = a.step_ms
        out["busy_frac"] = total / a.step_ms
        print("GPU busy fraction: %.2f (%.2f ms of kernels / %.2f ms median step)" % (
            total / a.step_ms, total, a.step_ms))
    if a.csv:
        with open(a.csv, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["kernel", "family", "count", "ms"])
            for n, (f, c, ms) in top:
                w.writerow([n, f, c, "%.6f" % ms])
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
