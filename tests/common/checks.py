"""checks.py - the counted checks of the Python test scripts.

A script makes one Checks, calls its check(cond, what) for each expectation
and ends with its summary line and exit status:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
    from checks import Checks  # noqa: E402

    CHECKS = Checks()
    check = CHECKS.check
    ...
    CHECKS.summary("test_runs")
    sys.exit(CHECKS.exit_code())

check() counts the check and prints a failed one as "FAIL: what". With
verbose=True it prints every check instead, "ok    what" or "FAIL  what"
(the PyTorch cross-checks do; tests/gpu/parts/gpt2.sh counts gpt2_check.py's
ok lines). Every line goes to stream, stderr unless another is given.
summary(name) prints "NAME: N checks, M failed" there; exit_code() is 1 when
a check failed, else 0.

The folder is imported relative to the script (tests/AREA/x.py -> ../common),
and tests/gpu/bundle.sh copies it into the GPU bundle as common/, beside gpu/
and torch/, so the same line imports it there. Its own folder, not tests/:
tests/ on the module path would make tests/torch importable as the package
`torch` where PyTorch is not installed, and the cross-checks would not skip.
"""
import sys


class Checks:
    def __init__(self, verbose=False, stream=None):
        self.verbose = verbose
        self.stream = stream if stream is not None else sys.stderr
        self.count = 0
        self.failed = []  # the messages of the failed checks, in order

    def check(self, cond, what):
        """Counts one check (cond true: passed); prints it when it failed, or always when verbose."""
        self.count += 1
        if not cond:
            self.failed.append(what)
        if self.verbose:
            print(f"{'ok    ' if cond else 'FAIL  '}{what}", file=self.stream)
        elif not cond:
            print(f"FAIL: {what}", file=self.stream)

    def summary(self, name):
        """Prints 'NAME: N checks, M failed'."""
        print(f"{name}: {self.count} checks, {len(self.failed)} failed", file=self.stream)

    def exit_code(self):
        """1 when a check failed, else 0."""
        return 1 if self.failed else 0
