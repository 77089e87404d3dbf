#!/usr/bin/env python3
"""The training recipe (AdamW, gradient clipping, label smoothing, deferred
batch norm) in jobs of several processes, against one process.

Usage: test_mpi_recipe.py PIPELINE_RUN SOURCE_ROOT

- two_stage.yaml with the recipe in one process, and two_rank.yaml (stage 1
  on rank 1) with it under mpirun -np 2: the same losses, gradient norms
  (the norm adds every stage's sums in the model's order, rank 1's through
  rank 0) and checkpoint bits (AdamW's state gathered from rank 1);
- replicas_local.yaml (2 replicas over 2 processes) and the same replicas as
  threads of one process: the same bits and norms; against the plan without
  replicas the norms agree within 1e-6 (the replicas' gradients are summed
  before the norm and counted once: twice would be sqrt(2) times larger).
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
RECIPE = ("optimizer: {type: adamw, lr: 0.002, weight_decay: 0.05, clip_grad_norm: 0.5}\n"
          "loss: {label_smoothing: 0.1}\n")


CHECKS = Checks()
check = CHECKS.check


def run(*args, np=0):
    cmd = ["bash", *MPIRUN, str(np), BIN, *args] if np else [BIN, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


if not shutil.which("mpirun") and not shutil.which("mpiexec"):
    print("test_mpi_recipe: no mpirun: skipped", file=sys.stderr)
    sys.exit(77)
probe = run(os.path.join(HERE, "two_rank.yaml"), "--steps", "1", "--validate", np=2)
if "job has 1 process" in probe.stderr:
    print("test_mpi_recipe: built without MPI: skipped", file=sys.stderr)
    sys.exit(77)
TMP = tempfile.mkdtemp(prefix="pp-mpi-recipe-")


def recipe_plan(name, out, replace=()):
    """tests/mpi/NAME with the recipe: AdamW and clipping for the SGD line,
    label smoothing, deferred batch norm, two steps; replace: more edits"""
    with open(os.path.join(HERE, name)) as f:
        text = f.read()
    lines = [l for l in text.splitlines(True) if not l.startswith("optimizer:")]
    text = "".join(lines).replace("steps: 3\n", "steps: 2\n" + RECIPE)
    text = text.replace("split_size: 2}", "split_size: 2, deferred_batch_norm: true}")
    for a, b in replace:
        text = text.replace(a, b)
    p = os.path.join(TMP, out)
    with open(p, "w") as f:
        f.write(text)
    return p


def train(plan, save, np=0):
    r = run(plan, "--json", "--save", os.path.join(TMP, save), np=np)
    check(r.returncode == 0, f"{os.path.basename(plan)} np={np}: exit {r.returncode}\n"
          f"{r.stderr[-2000:]}")
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        return {}


def same(a, b):
    with open(os.path.join(TMP, a), "rb") as fa, open(os.path.join(TMP, b), "rb") as fb:
        return fa.read() == fb.read()


try:
    one = train(recipe_plan("two_stage.yaml", "one.yaml"), "one.st")
    two = train(recipe_plan("two_rank.yaml", "two.yaml"), "two.st", np=2)
    check(one.get("grad_norms") and one.get("grad_norms") == two.get("grad_norms")
          and one.get("losses") == two.get("losses"),
          f"2 ranks: losses and norms {two.get('grad_norms')}, one process {one.get('grad_norms')}")
    check(same("one.st", "two.st"), "2 ranks: the one process's checkpoint bits (AdamW state)")

    threads = recipe_plan("replicas_local.yaml", "threads.yaml", [("rank1:", "")])
    procs = recipe_plan("replicas_local.yaml", "procs.yaml")
    rt = train(threads, "rt.st")
    rp = train(procs, "rp.st", np=2)
    check(rt.get("grad_norms") and rt.get("grad_norms") == rp.get("grad_norms"),
          f"replicas: norms over processes {rp.get('grad_norms')}, threads {rt.get('grad_norms')}")
    check(same("rt.st", "rp.st"), "replicas over 2 processes: the bits of replicas in threads")
    n1, nr = one.get("grad_norms", [0])[0], rt.get("grad_norms", [0])[0]
    check(abs(nr - n1) <= 1e-6 * n1,
          f"replicas count the summed gradients once: norm {nr}, one process {n1}")
finally:
    shutil.rmtree(TMP, True)
CHECKS.summary("test_mpi_recipe")
sys.exit(CHECKS.exit_code())
