#!/usr/bin/env python3
"""check_docs.py SOURCE_ROOT PIPELINE_RUN

Checks that the reference documents say what the code does; fails (exit 1)
listing every offender.

a. Plan keys (docs/PLAN.md against partitioner/*.c).
   The parser accepts a mapping's keys through one function,
   pp_walk_map(w, node, WHAT, KEYS, N, found), which refuses any key not in
   the array KEYS. Extraction, from the C text:
     1. split each partitioner/*.c into its function definitions (a line at
        column 0 that names the function and its parameters, `{` at column 0,
        the body up to the next `}` at column 0);
     2. in each function, find the calls of pp_walk_map and the string
        arrays `static const char *const keys[...] = {"a", "b", ...};`
        declared in it (a call must pass `keys`, and a function with a call
        must declare exactly one such array: anything else stops the check,
        so the extractor is updated instead of silently skipping a section);
     3. name the mapping by the call's WHAT argument (a string literal:
        "batch", "optimizer.lr_schedule", ...), or, where WHAT is built at
        run time ("stage %d"), by the function that walks it; SECTIONS below
        turns that into the dotted prefix of the keys (stages[], devices[],
        model.layers[]). A call whose mapping is not in SECTIONS stops the
        check, too.
   The accepted keys are then prefix + "." + key (the root's keys bare).
   Fewer than MIN_KEYS keys or MIN_MAPPINGS mappings fails the check: the
   extraction is broken, not the documents.
   docs/PLAN.md's keys are the first column of its key tables: markdown
   tables whose header's first cell is `key`, each row's first cell a key in
   backticks (`batch.split_size`). Every accepted key must appear there, and
   every key there must be accepted.

b. Options (docs/CLI.md against `pipeline-run --help`).
   The options --help lists are the option lines of its "options:" block:
   lines indented by two spaces that start with `-`; each names one option,
   with its aliases (`-h, --help`); a value (`--steps N`, `--print-schedule[=comms]`)
   is not part of the name. An option counts as documented in docs/CLI.md
   when one of its spellings appears in backticks in a heading line
   (`### \`--steps N\``) or in the first cell of a table row
   (`| \`--csv\`, \`--svg\` | ...`). Every listed option must be documented,
   and every option documented that way must be listed.

c. Examples. Every fenced ```yaml block of docs/PLAN.md that is a whole plan
   (a top-level `model:` and `stages:`) is written to a file in a temporary
   folder and must pass `pipeline-run FILE --validate` (exit 0), unless the
   nearest non-blank line before its fence is `<!-- no-validate -->`
   (examples of errors, or of files this check cannot provide).

d. Paths and links. In docs/*.md and README.md, every path into the source
   tree named with a file's extension (`examples/plans/gpt2-fortunes.yaml`,
   `runtime/cuda/dense.c`, `tests/gpu/run-all.sh`; not a glob such as
   `runtime/io/checkpoint*.c`, nor a path under another folder such as
   `build/tests/...`, a build output) must exist, except the files the build
   generates (GENERATED); every relative markdown link `[..](FILE#anchor)`
   must reach a file, and its anchor a heading of that file (GitHub's rule:
   lowercase, punctuation but `-` and `_` dropped, spaces as `-`, `-1`, `-2`
   for repeats).

Before all that, a self-check: a key planted in a copy of the documented
keys, a key removed from it, and an option planted in a copy of CLI.md's
text must each be reported by the same comparisons, and a missing path, a
missing file and missing anchors planted in a text must each be reported,
so the check cannot pass vacuously.
"""
import os
import re
import subprocess
import sys
import tempfile

MIN_KEYS = 60
MIN_MAPPINGS = 10

# The mapping a pp_walk_map call walks -> the dotted prefix of its keys. Keyed
# by the call's WHAT string literal, or by the function for a WHAT built at
# run time.
SECTIONS = {
    "the plan": "",
    "model": "model",
    "walk_layer": "model.layers[]",
    "batch": "batch",
    "optimizer": "optimizer",
    "optimizer.lr_schedule": "optimizer.lr_schedule",
    "loss": "loss",
    "data": "data",
    "data.tokenizer": "data.tokenizer",
    "eval": "eval",
    "walk_transforms": "transforms[]",
    "random_resized_crop": "transforms[].random_resized_crop",
    "random_crop": "transforms[].random_crop",
    "checkpoint": "checkpoint",
    "schedule": "schedule",
    "walk_explicit": "stages[]",
    "a devices entry": "devices[]",
}

FUNC_RE = re.compile(r"^[A-Za-z_][^\n;{}]*?\b(\w+)\(([^()]*)\)\s*\n\{\n(.*?)\n\}", re.S | re.M)
CALL_RE = re.compile(r"\bpp_walk_map\(\s*\w+\s*,\s*[^,]+,\s*([^,]+?)\s*,\s*(\w+)\s*,")
KEYS_RE = re.compile(r"static\s+const\s+char\s*\*\s*const\s+keys\s*\[[^\]]*\]\s*=\s*\{(.*?)\}\s*;",
                     re.S)
STR_RE = re.compile(r'"((?:[^"\\]|\\.)*)"')

PATH_RE = re.compile(r"(?<![\w./-])((?:\.ci|cli|docs|examples|models|partitioner|pipeline|runtime|"
                     r"streams|tests)/[\w./-]*\.(?:c|cc|csv|cu|cuh|h|json|md|py|sh|txt|yaml|yml))"
                     r"(?![\w*/-])")
LINK_RE = re.compile(r"\]\(([^)\s]+)\)")
# files the build writes (meson's configure_file), named by the docs
GENERATED = {"runtime/version.h"}


class ExtractError(Exception):
    pass


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def parser_keys(root):
    """The plan keys the parser accepts, as a set of dotted paths, and the
    number of mappings they came from."""
    folder = os.path.join(root, "partitioner")
    keys, mappings = set(), 0
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".c"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            text = strip_comments(f.read())
        if "pp_walk_map(" not in text:
            continue
        calls_seen = 0
        for fm in FUNC_RE.finditer(text):
            func, body = fm.group(1), fm.group(3)
            calls = CALL_RE.findall(body)
            if not calls:
                continue
            arrays = KEYS_RE.findall(body)
            if len(arrays) != 1:
                raise ExtractError("%s: %s() calls pp_walk_map but declares %d keys arrays "
                                   "(expected one): update check_docs.py" %
                                   (name, func, len(arrays)))
            names = STR_RE.findall(arrays[0])
            if not names:
                raise ExtractError("%s: %s(): empty keys array" % (name, func))
            for what, arr in calls:
                calls_seen += 1
                if arr != "keys":
                    raise ExtractError("%s: %s() passes %s to pp_walk_map, not keys: update "
                                       "check_docs.py" % (name, func, arr))
                lit = STR_RE.fullmatch(what)
                section = lit.group(1) if lit else func
                if section not in SECTIONS:
                    raise ExtractError("%s: %s() walks a mapping check_docs.py does not know "
                                       "(%s): add it to SECTIONS" % (name, func, what))
                prefix = SECTIONS[section]
                mappings += 1
                for k in names:
                    keys.add(prefix + "." + k if prefix else k)
        if calls_seen != len(CALL_RE.findall(text)):
            raise ExtractError("%s: found %d pp_walk_map calls inside functions, the text has "
                               "more: update check_docs.py" % (name, calls_seen))
    return keys, mappings


def table_first_cells(text, header_first=None):
    """First cells of the rows of markdown tables (header and separator rows
    skipped); with header_first, only tables whose header's first cell is
    that word. Yields (line number, cell)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("|") and i + 1 < len(lines) and \
                re.match(r"^\|\s*:?-{3,}", lines[i + 1].strip()):
            head = line.strip("|").split("|")[0].strip().strip("`").lower()
            take = header_first is None or head == header_first
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                if take:
                    cell = lines[i].strip()[1:].split("|")[0].strip()
                    yield i + 1, cell
                i += 1
            continue
        i += 1


def doc_keys(text):
    """The keys of PLAN.md's key tables: {key: line}."""
    out = {}
    for line, cell in table_first_cells(text, "key"):
        m = re.fullmatch(r"`([^`]+)`", cell)
        out[m.group(1) if m else cell] = line
    return out


def compare_keys(accepted, documented):
    problems = []
    for k in sorted(accepted - set(documented)):
        problems.append("docs/PLAN.md: plan key `%s` is accepted by the parser but not in a "
                        "key table" % k)
    for k in sorted(set(documented) - accepted):
        problems.append("docs/PLAN.md:%d: `%s` is in a key table but the parser does not "
                        "accept it" % (documented[k], k))
    return problems


OPT_TOKEN = re.compile(r"^(--?[A-Za-z][A-Za-z0-9-]*)")


def help_options(help_text):
    """The options --help lists: a list of sets of spellings."""
    opts, inside = [], False
    for line in help_text.split("\n"):
        if line.startswith("options:"):
            inside = True
            continue
        if inside and line and not line.startswith(" "):
            break
        if not inside or not re.match(r"^  -", line):
            continue
        spellings = set()
        for part in re.split(r",\s*", line.strip().split("  ")[0]):
            m = OPT_TOKEN.match(part.strip())
            if m:
                spellings.add(m.group(1))
        if not spellings:
            continue
        same = [o for o in opts if o & spellings]  # (--resume FILE, --resume auto)
        if same:
            same[0] |= spellings
        else:
            opts.append(spellings)
    return opts


def cli_documented(text):
    """Options CLI.md documents: {spelling: line}, from backticked spans in
    heading lines and in the first cell of table rows."""
    out = {}
    in_fence = False
    for n, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        spans = []
        if line.startswith("#"):
            spans = re.findall(r"`([^`]+)`", line)
        elif line.strip().startswith("|"):
            spans = re.findall(r"`([^`]+)`", line.strip()[1:].split("|")[0])
        for s in spans:
            m = OPT_TOKEN.match(s.strip())
            if m:
                out.setdefault(m.group(1), n)
    return out


def compare_options(listed, documented):
    problems = []
    known = set().union(*listed) if listed else set()
    for spellings in listed:
        if not spellings & set(documented):
            problems.append("docs/CLI.md: option %s is listed by --help but not documented "
                            "(a heading or a table row's first cell, in backticks)" %
                            ", ".join(sorted(spellings, key=len, reverse=True)))
    for s in sorted(set(documented) - known):
        problems.append("docs/CLI.md:%d: documents %s, which --help does not list" %
                        (documented[s], s))
    return problems


def yaml_blocks(text):
    """Fenced ```yaml blocks: (line of the fence, body, marked no-validate)."""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        if re.match(r"^\s*```ya?ml\s*$", lines[i]):
            start = i
            indent = len(lines[i]) - len(lines[i].lstrip())
            j = i - 1
            while j >= 0 and not lines[j].strip():
                j -= 1
            skip = j >= 0 and lines[j].strip() == "<!-- no-validate -->"
            i += 1
            body = []
            while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
                body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
                i += 1
            out.append((start + 1, "\n".join(body) + "\n", skip))
        i += 1
    return out


def check_examples(text, exe):
    problems, checked = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for line, body, skip in yaml_blocks(text):
            whole = re.search(r"^model:", body, re.M) and re.search(r"^stages:", body, re.M)
            if not whole or skip:
                continue
            checked += 1
            path = os.path.join(tmp, "plan-line%d.yaml" % line)
            with open(path, "w", encoding="utf-8") as f:
                f.write(body)
            r = subprocess.run([exe, path, "--validate"], cwd=tmp, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
            if r.returncode != 0:
                msg = (r.stderr.strip() or r.stdout.strip()).replace(path, "<example>")
                problems.append("docs/PLAN.md:%d: the yaml example does not validate (exit %d):"
                                "\n    %s" % (line, r.returncode, msg.replace("\n", "\n    ")))
    return problems, checked


def heading_anchors(text):
    """The anchors GitHub gives a markdown text's headings (outside fences)."""
    anchors, seen, fence = set(), {}, False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        m = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        k = seen.get(slug, 0)
        seen[slug] = k + 1
        anchors.add(slug if k == 0 else "%s-%d" % (slug, k))
    return anchors


def check_paths(root, name, text, read=None):
    """(problems, paths named, relative links) of the document root/name whose
    text is given; read(path) gives another document's text (None if it does
    not exist)."""
    if read is None:
        def read(path):
            if not os.path.isfile(path):
                return None
            with open(path, encoding="utf-8") as f:
                return f.read()
    problems, paths, links = [], 0, 0
    for m in PATH_RE.finditer(text):
        paths += 1
        path = m.group(1)
        if path not in GENERATED and not os.path.exists(os.path.join(root, path)):
            line = text.count("\n", 0, m.start()) + 1
            problems.append("%s:%d: names %s, which does not exist" % (name, line, path))
    here = os.path.dirname(os.path.join(root, name))
    for m in LINK_RE.finditer(text):
        link = m.group(1)
        if re.match(r"[a-z]+:", link):
            continue
        links += 1
        line = text.count("\n", 0, m.start()) + 1
        base, _, anchor = link.partition("#")
        target = os.path.normpath(os.path.join(here, base)) if base else os.path.join(root, name)
        if base and not os.path.exists(target):
            problems.append("%s:%d: links to %s, which does not exist" % (name, line, base))
            continue
        if anchor and target.endswith(".md"):
            other = text if not base else read(target)
            if other is not None and anchor not in heading_anchors(other):
                problems.append("%s:%d: links to %s, whose headings have no #%s" %
                                (name, line, base or name, anchor))
    return problems, paths, links


def docs_paths(root):
    """check_paths over docs/*.md and README.md: (problems, paths named, links)."""
    names = sorted("docs/" + f for f in os.listdir(os.path.join(root, "docs"))
                   if f.endswith(".md")) + ["README.md"]
    problems, paths, links = [], 0, 0
    for name in names:
        with open(os.path.join(root, name), encoding="utf-8") as f:
            text = f.read()
        p, n_paths, n_links = check_paths(root, name, text)
        problems += p
        paths += n_paths
        links += n_links
    return problems, paths, links


def self_check(accepted, documented, listed, cli_text, root):
    """The comparisons must report what is planted in copies of the docs."""
    fails = []
    planted = dict(documented)
    planted["batch.zz_selfcheck"] = 0
    if not any("batch.zz_selfcheck" in p for p in compare_keys(accepted, planted)):
        fails.append("self-check: a key planted in PLAN.md's key list was not reported")
    if documented:
        gone = dict(documented)
        k = sorted(gone)[0]
        del gone[k]
        if not any("`%s`" % k in p for p in compare_keys(accepted, gone)):
            fails.append("self-check: a key removed from PLAN.md's key list was not reported")
    text = cli_text + "\n\n### `--zz-selfcheck FILE`\n\n| `--zz-other` | x |\n| --- | --- |\n" \
                      "| `--zz-row` | y |\n"
    probs = compare_options(listed, cli_documented(text))
    for o in ("--zz-selfcheck", "--zz-row"):
        if not any(o in p for p in probs):
            fails.append("self-check: option %s planted in CLI.md's text was not reported" % o)
    if listed:
        first = sorted(listed[0])[0]
        doc = {s: 1 for spell in listed[1:] for s in spell}
        if not any(first in p for p in compare_options(listed, doc)):
            fails.append("self-check: an undocumented option was not reported")
    planted = ("See `examples/plans/zz-selfcheck.yaml`, [a](zz-selfcheck.md), "
               "[b](#zz-selfcheck) and [c](PLAN.md#zz-selfcheck).\n# Real\n[d](#real)\n")
    probs, _, _ = check_paths(root, "docs/SELFCHECK.md", planted,
                        read=lambda path: "# Plan\n" if path.endswith("PLAN.md") else None)
    for what in ("examples/plans/zz-selfcheck.yaml", "to zz-selfcheck.md",
                 "SELFCHECK.md, whose", "PLAN.md, whose"):
        if not any(what in p for p in probs):
            fails.append("self-check: a broken path or link (%s) planted in a text was not "
                         "reported" % what)
    if len(probs) != 4:
        fails.append("self-check: %d problems reported in the planted text, 4 expected: %s" %
                     (len(probs), "; ".join(probs)))
    return fails


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: check_docs.py SOURCE_ROOT PIPELINE_RUN\n")
        return 2
    root, exe = sys.argv[1], os.path.abspath(sys.argv[2])
    problems = []

    try:
        accepted, mappings = parser_keys(root)
    except ExtractError as e:
        print("docs: key extraction failed: %s" % e)
        return 1
    print("docs: the parser accepts %d keys in %d mappings" % (len(accepted), mappings))
    if len(accepted) < MIN_KEYS or mappings < MIN_MAPPINGS:
        print("docs: key extraction found too few keys (%d, at least %d) or mappings (%d, at "
              "least %d): the extractor is broken" % (len(accepted), MIN_KEYS, mappings,
                                                     MIN_MAPPINGS))
        return 1

    plan_path = os.path.join(root, "docs", "PLAN.md")
    plan_text = ""
    if not os.path.exists(plan_path):
        problems.append("docs/PLAN.md is missing")
    else:
        with open(plan_path, encoding="utf-8") as f:
            plan_text = f.read()
    documented = doc_keys(plan_text)
    print("docs: docs/PLAN.md's key tables name %d keys" % len(documented))
    problems += compare_keys(accepted, documented)

    r = subprocess.run([exe, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=60)
    listed = help_options(r.stdout)
    print("docs: --help lists %d options" % len(listed))
    if len(listed) < 10:
        print("docs: read too few options from --help (%d): the reader is broken" % len(listed))
        return 1
    cli_path = os.path.join(root, "docs", "CLI.md")
    cli_text = ""
    if not os.path.exists(cli_path):
        problems.append("docs/CLI.md is missing")
    else:
        with open(cli_path, encoding="utf-8") as f:
            cli_text = f.read()
        problems += compare_options(listed, cli_documented(cli_text))

    fails = self_check(accepted, documented, listed, cli_text, root)
    for f_ in fails:
        print("docs: " + f_)
    if fails:
        return 1

    ex_problems, checked = check_examples(plan_text, exe)
    print("docs: %d whole-plan examples in docs/PLAN.md validated" % checked)
    problems += ex_problems

    path_problems, paths, links = docs_paths(root)
    print("docs: %d paths and %d relative links in docs/ and README.md checked" % (paths, links))
    problems += path_problems

    for p in problems:
        print(p)
    print("docs: %s (%d problem%s)" % ("FAIL" if problems else "ok", len(problems),
                                      "" if len(problems) == 1 else "s"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
