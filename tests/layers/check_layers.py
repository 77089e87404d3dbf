#!/usr/bin/env python3
"""check_layers.py SOURCE_ROOT [PUBLIC_HEADER...] - the folder dependency graph.

Reads every `#include "..."` of the C, C++ and CUDA sources under the layer
folders, resolves it (relative to the including file, then to the source
root), and prints the graph between folders with the number of includes on
each arrow. Fails (exit 1) when an arrow runs up or sideways against the
layering of ARCHITECTURE.md section 2:

    cli -> pipeline -> partitioner, models, streams -> runtime
    runtime: cpu, cuda, io, comm -> core; train -> io, core

and when a folder reaches into another through a header it may not use:
partitioner knows models only through models/catalogue.h, and cli only
through the public headers (the installed ones, given as arguments).
"""
import os
import re
import sys

LAYERS = ["runtime", "models", "streams", "partitioner", "pipeline", "cli"]
# Which top-level folders each folder may include from (besides itself).
ALLOWED = {
    "runtime": set(),
    "models": {"runtime"},
    "streams": {"runtime"},
    "partitioner": {"runtime", "models"},
    "pipeline": {"runtime", "models", "streams", "partitioner"},
    "cli": {"runtime", "models", "streams", "partitioner", "pipeline"},
}
# Inside runtime/: every room sits on core; the optimizer names its state as
# checkpoint tensors (train -> io).
RUNTIME_ALLOWED = {
    "runtime/core": set(),
    "runtime/cpu": {"runtime/core"},
    "runtime/cuda": {"runtime/core"},
    "runtime/io": {"runtime/core"},
    "runtime/comm": {"runtime/core"},
    "runtime/train": {"runtime/core", "runtime/io"},
    "runtime": {"runtime/core"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder(rel):
    parts = rel.split("/")
    if parts[0] == "runtime":
        return "runtime/" + parts[1] if len(parts) > 2 else "runtime"
    return parts[0]


def top(f):
    return f.split("/")[0]


def self_test():
    """The check must be able to fail: a tree with an upward arrow."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in {
            "runtime/core/tensor.h": '#include "models/unit.h"\n',  # runtime -> models: up
            "models/unit.h": '#include "runtime/core/tensor.h"\n',
            "cli/main.c": '#include "models/unit.h"\n',              # not public
        }.items():
            os.makedirs(os.path.join(tmp, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w") as f:
                f.write(text)
        saved = sys.argv, sys.stdout, sys.stderr
        sys.argv = ["check", tmp, os.path.join(tmp, "runtime/core/tensor.h")]
        sys.stdout = sys.stderr = open(os.devnull, "w")
        try:
            rc = main()
        finally:
            sys.stdout.close()
            sys.argv, sys.stdout, sys.stderr = saved
    if rc != 1:
        print("check_layers: self-test: an upward arrow was not reported", file=sys.stderr)
        return 1
    return 0


def main():
    root = os.path.abspath(sys.argv[1])
    public = {os.path.relpath(os.path.abspath(p), root) for p in sys.argv[2:]}
    edges = {}
    problems = []
    for layer in LAYERS:
        for dirpath, _, names in os.walk(os.path.join(root, layer)):
            for name in sorted(names):
                if not name.endswith((".c", ".h", ".cu", ".cpp", ".in")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                src = folder(rel)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for inc in INCLUDE.findall(text):
                    local = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
                    target = local if os.path.exists(os.path.join(root, local)) else inc
                    if target.endswith("version.h") and target.startswith("runtime/"):
                        target = "runtime/version.h"  # generated in the build tree
                    elif not os.path.exists(os.path.join(root, target)):
                        continue  # system or generated header outside the layers
                    dst = folder(target)
                    edges[(src, dst)] = edges.get((src, dst), 0) + 1
                    st, dt = top(src), top(dst)
                    if st != dt and dt not in ALLOWED[st]:
                        problems.append(f"{rel}: includes {target} ({st} -> {dt} runs up or sideways)")
                    if st == dt == "runtime" and src != dst and dst not in RUNTIME_ALLOWED[src]:
                        problems.append(f"{rel}: includes {target} ({src} -> {dst})")
                    if st == "partitioner" and dt == "models" and target != "models/catalogue.h":
                        problems.append(f"{rel}: includes {target} (partitioner sees models only "
                                        "through models/catalogue.h)")
                    if st == "cli" and dt != "cli" and public and target not in public \
                            and target != "runtime/version.h":
                        problems.append(f"{rel}: includes {target}, which is not a public header")
    order = {name: i for i, name in enumerate(reversed(LAYERS))}
    for (src, dst), n in sorted(edges.items(), key=lambda e: (order[top(e[0][0])], e[0])):
        if src != dst:
            print(f"{src:<14} -> {dst:<14} {n:4d}")
    for p in problems:
        print("layering: " + p, file=sys.stderr)
    if problems:
        return 1
    print(f"no arrow runs up ({sum(edges.values())} includes)")
    return 0


if __name__ == "__main__":
    sys.exit(self_test() or main())
