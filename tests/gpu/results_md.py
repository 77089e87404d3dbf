#!/usr/bin/env python3
"""results_md.py - writes a run-all.sh results folder as results.md, in the
form of the project's GPU results notes: a title naming the commit, the GPU
and the date; the machine (GPU, driver, the libraries loaded, PyTorch); the
precision; then one section per kind of row (versions, correctness, speed,
host, memory, diagnostics), every figure with its verdict and the command
that printed it; last, what did not run or failed.

Usage: results_md.py RESULTS_DIR --command CMD [--commit C] [--gpu NAME]
                     [--driver V] [--ngpu N] [--elapsed S] [--precision TEXT]
                     [--batch B] [--size S] [--dry]
Reads RESULTS_DIR/rows.tsv (part, section, what, result, figure, command),
invocations.tsv (part, command line, seconds, commit: one line per run-all.sh
invocation into the folder), gpu-versions.out (its last line, JSON) and
python.txt when present; writes RESULTS_DIR/results.md and prints its path.
"""
import argparse
import datetime
import json
import os

TITLES = [
    ("versions", "Versions"),
    ("correctness", "Correctness"),
    ("speed", "Speed"),
    ("host", "Host waits, allocations and launches per steady step"),
    ("memory", "Memory"),
    ("diagnostics", "Diagnostics"),
    ("other", "Other"),
]
BAD = ("FAIL", "MISSING", "SKIPPED", "BELOW", "ABOVE")


def read_rows(path):
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 5:
                continue
            part, section, what, result, figure = parts[:5]
            cmd = parts[5] if len(parts) > 5 else ""
            rows.append({"part": part.replace("part ", ""), "section": section, "what": what,
                         "result": result, "figure": figure, "cmd": cmd})
    return rows


def versions(res):
    try:
        with open(os.path.join(res, "gpu-versions.out"), encoding="utf-8") as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return {}


def text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def code(cmd):
    return "`" + cmd.replace("`", "'") + "`"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("res")
    ap.add_argument("--command", required=True)
    ap.add_argument("--commit", default="")
    ap.add_argument("--gpu", default="none")
    ap.add_argument("--driver", default="none")
    ap.add_argument("--ngpu", default="0")
    ap.add_argument("--elapsed", default="?")
    ap.add_argument("--precision", default="")
    ap.add_argument("--batch", default="128")
    ap.add_argument("--size", default="224")
    ap.add_argument("--dry", action="store_true")
    a = ap.parse_args()

    rows = read_rows(os.path.join(a.res, "rows.tsv"))
    v = versions(a.res)
    date = datetime.date.today().isoformat()
    commit = a.commit or "an unknown commit (no commit.txt in the bundle)"
    out = []
    out.append("# GPU results: what %s did on %s (%s)" % (commit, a.gpu, date))
    out.append("")
    if a.dry:
        out.append("> DRY RUN ON THE CPU (--dry-run-cpu): every device mapped to cpu:0, tiny "
                   "sizes; the figures mean nothing.")
        out.append("")
    runs = []
    try:
        with open(os.path.join(a.res, "invocations.tsv"), encoding="utf-8") as f:
            for line in f:
                p = line.rstrip("\n").split("\t")
                if len(p) >= 4:
                    runs.append("part %s: `%s` (%s s, commit %s)" % (p[0], p[1], p[2], p[3]))
    except OSError:
        pass
    if len(runs) > 1:
        out.append("Measured at commit %s on %s by %d invocations of tests/gpu/run-all.sh into "
                   "one results folder:" % (commit, date, len(runs)))
        out.append("")
        out.extend("- " + r for r in runs)
    else:
        out.append("Measured at commit %s on %s: `%s` (%s s)." % (commit, date, a.command,
                                                                 a.elapsed))
    out.append("")
    out.append("Every figure below comes with the command that printed it, run from the bundle "
               "folder with the library path run-all.sh prints under \"libraries\".")
    out.append("")
    lib = ", ".join("%s %s" % (k, v[k]) for k in ("runtime", "cudnn", "cublas", "cublaslt", "nccl")
                    if k in v)
    gpus = ", ".join("%s (sm_%s, %s GiB)" % (g["name"], g["sm"], g["mem_gib"])
                     for g in v.get("gpus", []))
    py = text(os.path.join(a.res, "python.txt")).replace("\n", "; ")
    out.append("Machine: %s GPU(s) visible%s, driver %s%s%s." % (
        a.ngpu, (": " + gpus) if gpus else "", a.driver,
        ("; loaded: CUDA " + lib) if lib else "", ("; " + py) if py else ""))
    if a.precision:
        out.append("")
        out.append("Precision: " + a.precision)
    for key, title in TITLES:
        sec = [r for r in rows if r["section"] == key]
        if not sec:
            continue
        out.append("")
        if key == "speed":
            out.append("## %s (ResNet-50 at batch %s, %sx%s unless a row says otherwise; "
                       "medians of timed steps)" % (title, a.batch, a.size, a.size))
            out.append("")
            out.append("| part | run | result | figure |")
            out.append("| --- | --- | --- | --- |")
            for r in sec:
                out.append("| %s | %s | %s | %s |" % (r["part"], r["what"].strip(), r["result"],
                                                      r["figure"].replace("|", "/")))
            cmds = []
            for r in sec:
                if r["cmd"] and r["cmd"] not in cmds:
                    cmds.append(r["cmd"])
            if cmds:
                out.append("")
                out.append("Commands (in the order of the rows):")
                out.append("")
                for c in cmds:
                    out.append("- " + code(c))
            continue
        out.append("## " + title)
        out.append("")
        for r in sec:
            out.append("- part %s, %s: **%s**: %s" % (r["part"], r["what"].strip(), r["result"],
                                                    r["figure"]))
            if r["cmd"]:
                out.append("  " + code(r["cmd"]))
    bad = [r for r in rows if r["result"].startswith(BAD)]
    out.append("")
    out.append("## Not run, failed or below a goal")
    out.append("")
    if not bad:
        out.append("Nothing: every row ran and met its goal.")
    for r in bad:
        out.append("- part %s, %s: %s (%s)" % (r["part"], r["what"].strip(), r["result"],
                                              r["figure"]))
    path = os.path.join(a.res, "results.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    print(path)


if __name__ == "__main__":
    main()
