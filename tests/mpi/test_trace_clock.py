#!/usr/bin/env python3
"""Traces and gradient-sum times of jobs of several processes (mpirun -np N
pipeline-run plan.yaml --trace FILE), on CPU devices of this machine.

Usage: test_trace_clock.py PIPELINE_RUN SOURCE_ROOT

- two_rank.yaml (stage 1 on rank 1) under 2 processes: run.json and
  run.rank1.json are on one time base (rank 0's clock): each file's
  otherData gives its rank, its clock offset to rank 0 and the offset's
  uncertainty (0 and 0 on rank 0, a bound below 50 ms on rank 1); in every
  step, stage 1's first forward (rank 1) starts after stage 0's first
  forward (rank 0) ends, and stage 1's last backward ends before stage 0's
  last backward starts (the activation goes 0 -> 1, its gradient 1 -> 0),
  within the uncertainty; no span starts before the origin;
- a one-process run's trace is as before: no otherData, times from the
  first step's start;
- grads_ms per stage: > 0 for every stage with replicas (buckets summed
  during the backward, and one allreduce after it with --grad-allreduce
  whole), a "grads ms" column in the summary table; absent without
  replicas.
Exits 77 (skip) where mpirun is missing or the build has no MPI."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

BIN, ROOT = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
HERE = os.path.join(ROOT, "tests", "mpi")
MPIRUN = [os.path.join(ROOT, "tests", "comm", "mpirun.sh")]


CHECKS = Checks()
check = CHECKS.check


def run(*args, np=0, timeout=240):
    cmd = ["bash", *MPIRUN, str(np), BIN, *args] if np else [BIN, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


if not shutil.which("mpirun") and not shutil.which("mpiexec"):
    print("test_trace_clock: no mpirun: skipped", file=sys.stderr)
    sys.exit(77)
probe = run(os.path.join(HERE, "two_rank.yaml"), "--steps", "1", np=2)
if "rank 1" in probe.stderr and "job has 1 process" in probe.stderr:
    print("test_trace_clock: built without MPI: skipped", file=sys.stderr)
    sys.exit(77)

TMP = tempfile.mkdtemp(prefix="pp-trace-")


def path(name):
    return os.path.join(TMP, name)


def train(plan, np=0, extra=()):
    r = run(plan, "--json", *extra, np=np)
    check(r.returncode == 0, f"{os.path.basename(plan)} np={np} {' '.join(extra)}: exit "
          f"{r.returncode}\n{r.stderr[-3000:]}")
    try:
        return json.loads(r.stdout), r.stderr
    except json.JSONDecodeError:
        check(False, f"{plan}: no JSON on stdout: {r.stdout[-500:]!r}")
        return {}, r.stderr


def load(name):
    try:
        with open(path(name)) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        check(False, f"trace {name}: {e}")
        return {}


def spans(trace, step):
    return {e["name"]: e for e in trace.get("traceEvents", [])
            if e.get("ph") == "X" and e["args"]["step"] == step}


# 1. Two stages on two ranks: one time base.
steps = 3
train(os.path.join(HERE, "two_rank.yaml"), np=2, extra=("--trace", path("run.json")))
t0, t1 = load("run.json"), load("run.rank1.json")
c0, c1 = t0.get("otherData", {}), t1.get("otherData", {})
check(c0.get("rank") == 0 and c0.get("clock_offset_us") == 0 and
      c0.get("clock_uncertainty_us") == 0, f"rank 0's clock data: {c0}")
unc = c1.get("clock_uncertainty_us", -1)
check(c1.get("rank") == 1 and c1.get("clock_reference_rank") == 0 and
      isinstance(c1.get("clock_offset_us"), (int, float)) and 0 <= unc < 50e3,
      f"rank 1's clock data: {c1}")
unc = max(unc, 0)
for step in range(steps):
    a, b = spans(t0, step), spans(t1, step)
    f0, f1 = a.get("F0 stage0"), b.get("F0 stage1")
    last = max((int(n[1:].split()[0]) for n in a if n.startswith("B") and n.endswith("stage0")),
               default=-1)
    b0, b1 = a.get(f"B{last} stage0"), b.get(f"B{last} stage1")
    check(f0 and f1 and b0 and b1 and "F0 stage1" not in a and "F0 stage0" not in b,
          f"step {step}: rank 0 spans {sorted(a)}, rank 1 spans {sorted(b)}")
    if not (f0 and f1 and b0 and b1):
        continue
    check(f1["ts"] + unc >= f0["ts"] + f0["dur"],
          f"step {step}: stage 1's first forward on rank 1 starts at {f1['ts']} us, before "
          f"stage 0's on rank 0 ends ({f0['ts'] + f0['dur']} us, uncertainty {unc} us)")
    check(b1["ts"] + b1["dur"] <= b0["ts"] + unc,
          f"step {step}: stage 1's last backward on rank 1 ends at {b1['ts'] + b1['dur']} us, "
          f"after stage 0's on rank 0 starts ({b0['ts']} us, uncertainty {unc} us)")
for name, t in [("run.json", t0), ("run.rank1.json", t1)]:
    ts = [e["ts"] for e in t.get("traceEvents", []) if e.get("ph") == "X"]
    check(ts and min(ts) >= 0, f"{name}: a span before the job's origin ({min(ts or [0])} us)")

# 2. One process: the trace as it was (times from the first step, no otherData).
train(os.path.join(HERE, "two_stage.yaml"), extra=("--trace", path("one.json")))
one = load("one.json")
check(sorted(one) == ["displayTimeUnit", "traceEvents"], f"one process: keys {sorted(one)}")
ts = [e["ts"] for e in one.get("traceEvents", []) if e.get("ph") == "X"]
check(ts and 0 <= min(ts) < 1e6, f"one process: first span at {min(ts or [-1])} us")

# 3. grads_ms: the time of each stage's gradient sum over the replicas.
for extra in [(), ("--grad-allreduce", "whole")]:
    rep, err = train(os.path.join(HERE, "replicas_local.yaml"), np=2, extra=extra)
    got = [s.get("grads_ms") for s in rep.get("stages", [])]
    check(len(got) == 2 and all(isinstance(g, (int, float)) and g > 0 for g in got),
          f"replicas {' '.join(extra)}: grads_ms {got}")
    check("grads ms" in err, f"replicas {' '.join(extra)}: no grads ms column:\n{err[-1500:]}")
two, err = train(os.path.join(HERE, "two_rank.yaml"), np=2)
check(two.get("stages") and all("grads_ms" not in s for s in two["stages"]),
      f"no replicas: grads_ms in {two.get('stages')}")
check("grads ms" not in err, "no replicas: a grads ms column")

shutil.rmtree(TMP, ignore_errors=True)
CHECKS.summary("test_trace_clock")
sys.exit(CHECKS.exit_code())
