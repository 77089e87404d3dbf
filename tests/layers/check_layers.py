#!/usr/bin/env python3
"""check_layers.py SOURCE_ROOT [--lib LIBRARY.a] [--nm NM] [PUBLIC_HEADER...]

Four checks of the source tree's structure; fails (exit 1) on any problem.

1. The folder graph. Reads every `#include "..."` of the C, C++ and CUDA
   sources under the layer folders, resolves it (relative to the including
   file, then to the source root), and prints the graph between folders with
   the number of includes on each arrow. An arrow that runs up or sideways
   against the layering of docs/ARCHITECTURE.md section 2 is a problem:

       cli -> pipeline -> partitioner, models, streams -> runtime
       runtime: cpu, cuda, io, comm -> core; train -> io, core

   and so is a folder reaching into another through a header it may not use:
   partitioner knows models only through models/catalogue.h, and cli only
   through the public headers (the installed ones, given as arguments).

2. Includes inside a folder. (a) No circular include: the headers of one
   folder, including one another, form no cycle. (b) The files of a folder
   group into modules: X.c with X.h, X_internal.h and X_impl.h (a .c
   including its own headers is the normal pairing). A .c file including a
   header of another module of its folder is an arrow from its module to
   that one (it uses it); these arrows must form no cycle. A header that
   includes a header passes on declarations (types) and draws no arrow of
   (b), nor does a .c including an installed header (the folder's interface,
   whose functions any file of the folder may define).

3. Calls inside a folder. From the object files of the static library (its
   defined and undefined symbols, read with nm), the graph of which .c file
   uses a function or variable of which other .c file, per folder, must have
   no cycle: a lower file that must reach back up is handed a callback or a
   table. A cycle is reported with the symbols on each arrow:

       layering: call cycle in pipeline/: report.c -> step.c -> report.c
           (report.c -> step.c: pipe_x; step.c -> report.c: pipe_y)

   Skipped (with a note) when no library is given.

4. Tables of functions. A struct of two or more function pointers that
   make at least half its members (the rest: a name, flags) is a table, and its tag ends in `_ops` (pp_stream_ops,
   pp_comm_ops): one suffix for every table, so that a reader finds them.
"""
import os
import re
import subprocess
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
SOURCE_EXT = (".c", ".h", ".cu", ".cpp", ".in")
UNIT_EXT = (".c", ".cu", ".cpp")  # files that become objects
MAX_CYCLES = 50  # listed per folder and kind
STRUCT = re.compile(r"\bstruct\s+(\w+)\s*\{([^{}]*)\}", re.S)
FN_MEMBER = re.compile(r"\(\s*\*\s*\w+\s*\)\s*\(")


def folder(rel):
    parts = rel.split("/")
    if parts[0] == "runtime":
        return "runtime/" + parts[1] if len(parts) > 2 else "runtime"
    return parts[0]


def top(f):
    return f.split("/")[0]


def module(name):
    """The module a file of a folder belongs to: X.c, X.h, X_internal.h and
    X_impl.h are module X (version.h.in is version)."""
    base = name
    if base.endswith(".in"):
        base = base[:-3]
    base = os.path.splitext(base)[0]
    for suffix in ("_internal", "_impl"):
        if base.endswith(suffix) and len(base) > len(suffix):
            return base[:-len(suffix)]
    return base


def sources(root):
    """Every source file under the layer folders, as paths relative to root."""
    out = []
    for layer in LAYERS:
        for dirpath, _, names in os.walk(os.path.join(root, layer)):
            for name in sorted(names):
                if name.endswith(SOURCE_EXT):
                    out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(out)


def cycles(graph, limit=MAX_CYCLES):
    """The elementary cycles of graph ({node: set(node)}), each as a node list
    starting at its smallest node, in order; at most limit of them."""
    nodes = sorted(graph)
    found = []

    def dfs(start, node, path, on_path):
        for nxt in sorted(graph.get(node, ())):
            if len(found) >= limit:
                return
            if nxt == start:
                found.append(path + [start])
            elif nxt > start and nxt not in on_path and nxt in graph:
                on_path.add(nxt)
                dfs(start, nxt, path + [nxt], on_path)
                on_path.discard(nxt)

    for s in nodes:
        if len(found) >= limit:
            break
        dfs(s, s, [s], {s})
    return found


def describe(cycle, why, fmt):
    """'a -> b -> a (a -> b: x, y; b -> a: z)': the reasons for each arrow."""
    parts = []
    for a, b in zip(cycle, cycle[1:]):
        items = sorted(why[(a, b)])
        shown = ", ".join(items[:4]) + (f", ... ({len(items)} in all)" if len(items) > 4 else "")
        parts.append(fmt.format(a=a, b=b, items=shown))
    return " -> ".join(cycle) + "\n    (" + "; ".join(parts) + ")"


def report_cycles(kind, graphs, why, fmt, problems):
    """Each cycle of each folder's graph is a problem."""
    for d in sorted(graphs):
        for cyc in cycles(graphs[d]):
            where = d if d.endswith(")") or d.endswith("/") else d + "/"
            problems.append(f"{kind} cycle in {where}: " + describe(cyc, why[d], fmt))


def check_includes(root, files, public):
    """Checks 1 and 2. Returns (problems, folder edges, include count,
    {dir: module graph}, {dir: {(a, b): reasons}})."""
    edges, problems = {}, []
    graphs, why = {}, {}
    for rel in files:
        src = folder(rel)
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
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
            d = os.path.dirname(rel)
            if os.path.dirname(target) != d:
                continue
            name, tname = os.path.basename(rel), os.path.basename(target)
            if name.endswith(UNIT_EXT) and target in public:
                continue  # the folder's installed interface, not one file's
            if name.endswith(UNIT_EXT):
                a, b = module(name), module(tname)  # a file uses another module
            else:
                a, b = name, tname                  # a header passes on declarations
            kind = d + ("/" if name.endswith(UNIT_EXT) else "/ (headers)")
            g = graphs.setdefault(kind, {})
            g.setdefault(a, set())
            g.setdefault(b, set())
            if a != b:
                g[a].add(b)
                why.setdefault(kind, {}).setdefault((a, b), set()).add(
                    f"{name} includes {tname}")
    return problems, edges, graphs, why


def parse_nm(text):
    """{member: (defined, undefined)} from `nm -A --format=posix` output of an
    archive ("lib.a[member.o]: name type value size") or of objects
    ("member.o: name type ...")."""
    objs = {}
    for line in text.splitlines():
        head, sep, rest = line.partition(": ")
        if not sep:
            continue
        m = re.match(r".*\[([^\]]+)\]$", head)
        member = m.group(1) if m else os.path.basename(head)
        fields = rest.split()
        if len(fields) < 2:
            continue
        name, kind = fields[0], fields[1]
        defined, undefined = objs.setdefault(member, (set(), set()))
        if kind in ("U", "w", "v"):
            undefined.add(name)
        elif kind.isupper() or kind in ("u", "i"):
            defined.add(name)
    return objs


def check_calls(root, files, nm_text):
    """Check 3: {dir: file graph}, {dir: {(a, b): symbols}} of the calls
    between the .c files of each folder."""
    by_object = {}
    for rel in files:
        if rel.endswith(UNIT_EXT):
            by_object[rel.replace("/", "_") + ".o"] = rel
    objs = {by_object[m]: syms for m, syms in parse_nm(nm_text).items() if m in by_object}
    owner = {}
    for rel, (defined, _) in objs.items():
        for sym in defined:
            owner.setdefault(sym, []).append(rel)
    graphs, why = {}, {}
    for rel, (_, undefined) in sorted(objs.items()):
        d = os.path.dirname(rel)
        g = graphs.setdefault(d, {})
        a = os.path.basename(rel)
        g.setdefault(a, set())
        for sym in undefined:
            for other in owner.get(sym, ()):
                if other != rel and os.path.dirname(other) == d:
                    b = os.path.basename(other)
                    g[a].add(b)
                    g.setdefault(b, set())
                    why.setdefault(d, {}).setdefault((a, b), set()).add(sym)
    return graphs, why, len(objs)


def check_tables(root, files, problems):
    """Check 4: every struct mostly of function pointers is named *_ops."""
    n = 0
    for rel in files:
        with open(os.path.join(root, rel), errors="replace") as f:
            text = re.sub(r"/\*.*?\*/|//[^\n]*", "", f.read(), flags=re.S)
        for m in STRUCT.finditer(text):
            members = [d.strip() for d in m.group(2).split(";") if d.strip()]
            fns = sum(1 for d in members if FN_MEMBER.search(d))
            if fns < 2 or 2 * fns < len(members):
                continue
            n += 1
            if not m.group(1).endswith("_ops"):
                problems.append(f"{rel}: struct {m.group(1)} is a table of functions: "
                                f"name it {m.group(1)}_ops (or ..._ops)")
    return n


def run(root, public, nm_text):
    """All four checks; prints the graph and the problems. Returns 0 or 1."""
    files = sources(root)
    problems, edges, inc_graphs, inc_why = check_includes(root, files, public)
    n_tables = check_tables(root, files, problems)
    report_cycles("include", inc_graphs, inc_why, "{items}", problems)
    n_objects = None
    if nm_text is not None:
        call_graphs, call_why, n_objects = check_calls(root, files, nm_text)
        report_cycles("call", call_graphs, call_why, "{a} -> {b}: {items}", problems)
    order = {name: i for i, name in enumerate(reversed(LAYERS))}
    for (src, dst), n in sorted(edges.items(), key=lambda e: (order[top(e[0][0])], e[0])):
        if src != dst:
            print(f"{src:<14} -> {dst:<14} {n:4d}")
    for p in problems:
        print("layering: " + p, file=sys.stderr)
    if problems:
        return 1
    print(f"no arrow runs up ({sum(edges.values())} includes); no include cycle inside a folder")
    if n_objects is None:
        print("note: no library given (--lib), calls inside folders not checked")
    else:
        print(f"no call cycle inside a folder ({n_objects} objects)")
    print(f"every table of functions ends in _ops ({n_tables} tables)")
    return 0


def read_symbols(nm, lib):
    r = subprocess.run([nm, "-A", "--format=posix", lib], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"check_layers: {nm} {lib} failed: {r.stderr.strip()}")
    return r.stdout


def planted(tree, public=(), nm_text=None):
    """run() on a temporary tree {path: text}, quietly."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in tree.items():
            os.makedirs(os.path.join(tmp, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w") as f:
                f.write(text)
        saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = open(os.devnull, "w")
        try:
            return run(tmp, set(public), nm_text)
        finally:
            sys.stdout.close()
            sys.stdout, sys.stderr = saved


def self_test():
    """The checks must be able to fail, each on its own planted fault, and
    must pass a tree without one (a module's .c with its .h and _internal.h,
    a lower file used through its header)."""
    clean = {
        "streams/x.h": "",
        "streams/x_internal.h": '#include "x.h"\n',
        "streams/x.c": '#include "streams/x.h"\n#include "x_internal.h"\n#include "y.h"\n',
        "streams/y.h": "",
        "streams/y.c": '#include "y.h"\n',
        "runtime/core/tensor.h": "",
        "streams/z.c": '#include "runtime/core/tensor.h"\n',
    }
    calls = ("lib.a[streams_x.c.o]: pp_x T 0 10\nlib.a[streams_x.c.o]: pp_y U\n"
             "lib.a[streams_y.c.o]: pp_y T 0 10\nlib.a[streams_z.c.o]: pp_x U\n")
    cases = [
        ("a clean tree was refused", 0, clean, (), calls),
        ("an upward include was not reported", 1, {
            "runtime/core/tensor.h": '#include "models/unit.h"\n',  # runtime -> models: up
            "models/unit.h": '#include "runtime/core/tensor.h"\n',
        }, (), None),
        ("an include of a non-public header from cli/ was not reported", 1, {
            "runtime/core/tensor.h": "",
            "models/unit.h": '#include "runtime/core/tensor.h"\n',
            "cli/main.c": '#include "models/unit.h"\n',
        }, ("runtime/core/tensor.h",), None),
        ("a circular include between modules was not reported", 1, dict(clean, **{
            "streams/y.c": '#include "y.h"\n#include "x_internal.h"\n',  # y -> x -> y
        }), (), calls),
        ("two headers including each other were not reported", 1, dict(clean, **{
            "streams/x.h": '#include "y.h"\n', "streams/y.h": '#include "x.h"\n',
        }), (), calls),
        ("a call cycle inside a folder was not reported", 1, clean,
         (), calls + "lib.a[streams_y.c.o]: pp_x U\n"),  # y.c -> x.c -> y.c
        ("a table of functions not named *_ops was not reported", 1, dict(clean, **{
            "streams/y.h": "struct pp_y_vtable {\n    int (*run)(void *);\n"
                           "    void (*free)(void *);\n};\n",
        }), (), calls),
        ("a table named *_ops was refused", 0, dict(clean, **{
            "streams/y.h": "struct pp_y_ops {\n    int (*run)(void *);\n"
                           "    void (*free)(void *);\n};\nstruct pp_y { int n; void (*f)(void); };\n",
        }), (), calls),
    ]
    for what, want, tree, public, nm_text in cases:
        rc = planted(tree, public, nm_text)
        if rc != want:
            print(f"check_layers: self-test: {what}", file=sys.stderr)
            return 1
    return 0


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__.split("\n")[0], file=sys.stderr)
        return 2
    root = os.path.abspath(args.pop(0))
    lib, nm = None, "nm"
    public = set()
    while args:
        a = args.pop(0)
        if a == "--lib":
            lib = args.pop(0)
        elif a == "--nm":
            nm = args.pop(0)
        else:
            public.add(os.path.relpath(os.path.abspath(a), root))
    nm_text = read_symbols(nm, lib) if lib else None
    return run(root, public, nm_text)


if __name__ == "__main__":
    sys.exit(self_test() or main())
