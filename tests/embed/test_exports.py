#!/usr/bin/env python3
"""The shared library exports exactly the functions its public headers
declare: each one is defined (no declaration without a body), and nothing
internal leaks (kernels, backends, models, the parser).

usage: test_exports.py LIBRARY.so VERSION_SCRIPT
"""
import re
import subprocess
import sys


def main(lib, script):
    with open(script, encoding="utf-8") as f:
        text = f.read()
    declared = set(re.findall(r"^\s+(pp_[a-z0-9_]+);$", text, re.M))
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    exported = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] != "A":  # "A": the version node itself
            exported[parts[2].split("@")[0]] = parts[1]
    failures = 0
    for name in sorted(declared - exported.keys()):
        print("declared in a public header but not exported: %s" % name)
        failures += 1
    for name in sorted(exported.keys() - declared):
        print("exported but not declared in a public header: %s (%s)" % (name, exported[name]))
        failures += 1
    for name in sorted(declared & exported.keys()):
        if exported[name] not in ("T", "W", "i"):
            print("%s is exported as '%s', not as a function" % (name, exported[name]))
            failures += 1
    print("%d public functions, %d exported symbols, %d problems"
          % (len(declared), len(exported), failures))
    return 1 if failures or not declared else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip())
    sys.exit(main(sys.argv[1], sys.argv[2]))
