#!/usr/bin/env python3
"""Jobs of several processes (mpirun -np N pipeline-run plan.yaml) against the
same plans in one process, on CPU devices of this machine.

Usage: test_mpi.py PIPELINE_RUN SOURCE_ROOT

- two_rank.yaml (stage 1 on rank 1) under 2 processes equals two_stage.yaml
  in one process bit for bit: losses and the checkpoint file (parameters,
  buffers and momentum, written by rank 0);
- three stages on ranks 0, 1, 0 (a rank holding two non-adjacent stages),
  the same;
- the 2-process checkpoint loads into 1 process and into 2, and training
  continues identically;
- plan errors: a rank outside the job exits 2 at FILE:LINE:COL from every
  rank (and in one process), a malformed rankN: prefix too, and CUDA devices
  next to another process are refused; --validate writes the rank back.
Exits 77 (skip) where mpirun is missing or the build has no MPI."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

BIN, ROOT = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
HERE = os.path.join(ROOT, "tests", "mpi")
MPIRUN = [os.path.join(ROOT, "tests", "comm", "mpirun.sh")]
failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print(f"FAIL: {what}", file=sys.stderr)


def run(*args, np=0, timeout=240):
    cmd = ["bash", *MPIRUN, str(np), BIN, *args] if np else [BIN, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


if not shutil.which("mpirun") and not shutil.which("mpiexec"):
    print("test_mpi: no mpirun: skipped", file=sys.stderr)
    sys.exit(77)
probe = run(os.path.join(HERE, "two_rank.yaml"), "--steps", "1", np=2)
if "rank 1" in probe.stderr and "job has 1 process" in probe.stderr:
    print("test_mpi: built without MPI: skipped", file=sys.stderr)
    sys.exit(77)

TMP = tempfile.mkdtemp(prefix="pp-mpi-")


def path(name):
    return os.path.join(TMP, name)


def plan_text(name):
    with open(os.path.join(HERE, name)) as f:
        return f.read()


def write(name, text):
    with open(path(name), "w") as f:
        f.write(text)
    return path(name)


def train(plan, np=0, extra=()):
    r = run(plan, "--json", *extra, np=np)
    check(r.returncode == 0, f"{os.path.basename(plan)} np={np} {' '.join(extra)}: exit "
          f"{r.returncode}\n{r.stderr[-3000:]}")
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        check(False, f"{plan}: no JSON on stdout: {r.stdout[-500:]!r}")
        return {}


def same_file(a, b, what):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        check(fa.read() == fb.read(), f"{what}: {a} and {b} differ")


# 1. Two stages over two processes, bit for bit.
one = train(os.path.join(HERE, "two_stage.yaml"), extra=("--save", path("one.st")))
two = train(os.path.join(HERE, "two_rank.yaml"), np=2, extra=("--save", path("two.st")))
check(one.get("losses") == two.get("losses") and len(one.get("losses", [])) == 3,
      f"losses: {one.get('losses')} vs {two.get('losses')}")
same_file(path("one.st"), path("two.st"), "checkpoint of 1 vs 2 processes")
check(two.get("ranks") == 2 and one.get("ranks") == 1, f"ranks {one.get('ranks')} {two.get('ranks')}")
check([s.get("rank") for s in two.get("stages", [])] == [0, 1], "stage ranks in JSON")
check(all(s.get("forward_ms", 0) > 0 and s.get("peak_bytes", 0) > 0 for s in two.get("stages", [])),
      "rank 0 reports the figures of rank 1's stage")

# 2. Three stages on ranks 0, 1, 0.
three = plan_text("two_stage.yaml").replace(
    "  - device: cpu:1\n    layers: [layer3, layer4, avgpool, fc]",
    "  - device: cpu:1\n    layers: [layer3]\n  - device: cpu:2\n    layers: [layer4, avgpool, fc]")
ref3 = train(write("three.yaml", three), extra=("--save", path("three.st")))
spread = three.replace("device: cpu:1", "device: rank1:cpu:0").replace("device: cpu:2",
                                                                        "device: cpu:1")
got3 = train(write("three_ranks.yaml", spread), np=2, extra=("--save", path("three_ranks.st")))
check(ref3.get("losses") == got3.get("losses"), f"3 stages on ranks 0,1,0: {got3.get('losses')}")
check(ref3.get("losses") == one.get("losses"), "3 stages equal 2 stages")
same_file(path("three.st"), path("three_ranks.st"), "checkpoint of ranks 0,1,0")

# 3. The 2-process checkpoint loads anywhere: one more step in 1 and in 2 processes.
a = train(os.path.join(HERE, "two_stage.yaml"), extra=("--load", path("two.st"), "--steps", "2"))
b = train(os.path.join(HERE, "two_rank.yaml"), np=2,
          extra=("--load", path("two.st"), "--steps", "2"))
check(a.get("losses") == b.get("losses") and len(a.get("losses", [])) == 2,
      f"after loading: {a.get('losses')} vs {b.get('losses')}")
check(a.get("losses", [0])[0] != one["losses"][0] if one.get("losses") else False,
      "the loaded run starts from the trained weights")

# 4. Plan errors.
bad = write("bad_rank.yaml", plan_text("two_rank.yaml").replace("rank1:cpu:0", "rank2:cpu:0"))
line, col = 12, 13
for np in (0, 2):
    r = run(bad, np=np, timeout=60)
    check(r.returncode == 2, f"rank 2 with np={np}: exit {r.returncode}: {r.stderr[-800:]}")
    check(f"{bad}:{line}:{col}: stage 1 is on rank 2" in r.stderr,
          f"rank 2 with np={np}: message {r.stderr[-800:]}")
r = run(os.path.join(HERE, "two_rank.yaml"))
check(r.returncode == 2 and "start it with mpirun -np 2" in r.stderr,
      f"two_rank.yaml in one process: {r.returncode} {r.stderr[-500:]}")
for spelled, msg in [("rankx:cpu:0", "a device of another process is written rankN:DEVICE"),
                     ("rank1cpu:0", "a device of another process is written rankN:DEVICE"),
                     ("rank99999:cpu:0", "rank 99999 is out of range"),
                     ("rank1:gpu:0", "")]:
    p = write("bad_syntax.yaml", plan_text("two_rank.yaml").replace("rank1:cpu:0", spelled))
    r = run(p, "--validate")
    check(r.returncode == 2 and re.search(rf"bad_syntax.yaml:{line}:{col}: .*{re.escape(msg)}",
                                          r.stderr),
          f"{spelled}: exit {r.returncode}: {r.stderr[-500:]}")
cuda = write("cuda_next.yaml", plan_text("two_rank.yaml").replace("rank1:cpu:0", "rank1:cuda:0"))
r = run(cuda, np=2, timeout=60)
check(r.returncode == 2 and f"{line}:{col}: stage 1 (cuda:0) exchanges with a stage of another "
      "process" in r.stderr, f"cuda next to another process: {r.returncode} {r.stderr[-800:]}")
r = run(os.path.join(HERE, "two_rank.yaml"), "--validate")
check(r.returncode == 0 and "- device: rank1:cpu:0" in r.stdout, f"--validate: {r.stdout[-400:]}")
r = run(os.path.join(HERE, "two_rank.yaml"), "--sweep-split", "2,4", np=2, timeout=60)
check(r.returncode == 2 and "--sweep-split runs in one process" in r.stderr,
      f"sweep in a job: {r.returncode} {r.stderr[-400:]}")

shutil.rmtree(TMP, ignore_errors=True)
print(f"test_mpi: {checks} checks, {failures} failed", file=sys.stderr)
sys.exit(1 if failures else 0)
