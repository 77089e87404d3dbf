#!/usr/bin/env python3
"""Writes the shared library's linker version script: the functions declared
in the public headers are exported, every other symbol stays local.

usage: export_map.py OUTPUT HEADER...
"""
import re
import sys

COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
# A function name followed by its parameter list; "pp_status (*fn)(" is a
# function-pointer member, not a declaration.
DECL = re.compile(r"\b(pp_[a-z0-9_]+)\s*\((?!\s*\*)")


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__.strip())
    names = set()
    for path in argv[2:]:
        with open(path, encoding="utf-8") as f:
            text = COMMENT.sub(" ", f.read())
        names.update(DECL.findall(text))
    if not names:
        sys.exit("export_map.py: no function declared in the headers given")
    body = "".join("    %s;\n" % n for n in sorted(names))
    with open(argv[1], "w", encoding="utf-8") as f:
        f.write("PIPELINE_RUN_0 {\n  global:\n%s  local:\n    *;\n};\n" % body)


if __name__ == "__main__":
    main(sys.argv)
