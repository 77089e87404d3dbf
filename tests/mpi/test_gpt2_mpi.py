#!/usr/bin/env python3
"""GPT-2 over two processes (mpirun -np 2 pipeline-run plan.yaml): the token
embedding on rank 0 and the output head tied to it on rank 1 (its copy's
gradient travels to rank 0 after the backward, the updated weight back before
the next forward) against the same two stages in one process.

Usage: test_gpt2_mpi.py PIPELINE_RUN

- three steps: the losses and the checkpoint file (written by rank 0: the
  embedding once, no copy of it) bit for bit, with and without
  recomputation, and with dropout 0.1 and recomputation (each rank draws
  the masks of the samples it runs);
- the checkpoint loads into the job, and --generate there prints the text one
  process prints.
Exits 77 (skip) where mpirun is missing or the build has no MPI."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIRUN = [os.path.join(ROOT, "tests", "comm", "mpirun.sh")]


CHECKS = Checks(verbose=True)
check = CHECKS.check


def run(*args, np=0, timeout=240, text=True):
    cmd = ["bash", *MPIRUN, str(np), BIN, *args] if np else [BIN, *args]
    return subprocess.run(cmd, capture_output=True, text=text, timeout=timeout)


if not shutil.which("mpirun") and not shutil.which("mpiexec"):
    print("test_gpt2_mpi: no mpirun: skipped", file=sys.stderr)
    sys.exit(77)

TMP = tempfile.mkdtemp(prefix="pp-gpt2-mpi-")
with open(os.path.join(TMP, "corpus.txt"), "w") as f:
    f.write("".join("the pipeline passes the tokens from rank to rank. "[i % 50] for i in range(6000)))

PLAN = """\
model: {{name: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 24,
        dropout: {dropout}}}
batch: {{size: 8, micro_batches: 4}}
schedule: 1f1b
recompute: {recompute}
optimizer: {{type: sgd, lr: 0.1, momentum: 0.9}}
data: {{format: text, file: corpus.txt, shuffle: true}}
seed: 11
steps: 3
stages:
  - {{device: cpu:0, layers: [wte, wpe, h.0]}}
  - {{device: {second}, layers: [h.1, ln_f, lm_head]}}
"""


def plan(name, second, recompute="never", dropout=0.0):
    p = os.path.join(TMP, name)
    with open(p, "w") as f:
        f.write(PLAN.format(second=second, recompute=recompute, dropout=dropout))
    return p


def train(p, np=0, extra=()):
    r = run(p, "--json", *extra, np=np)
    check(r.returncode == 0, f"{os.path.basename(p)} np={np}: exit {r.returncode}\n"
          f"{r.stderr[-2000:]}")
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        return {}


probe = run(plan("probe.yaml", "rank1:cpu:0"), "--steps", "1", np=2)
if "job has 1 process" in probe.stderr:
    print("test_gpt2_mpi: built without MPI: skipped", file=sys.stderr)
    sys.exit(77)

for rec, dropout in (("never", 0.0), ("always", 0.0), ("always-dropout", 0.1)):
    mode = rec.split("-")[0]
    one = plan(f"one-{rec}.yaml", "cpu:1", mode, dropout)
    two = plan(f"two-{rec}.yaml", "rank1:cpu:0", mode, dropout)
    a = train(one, extra=("--save", os.path.join(TMP, f"one-{rec}.st")))
    b = train(two, np=2, extra=("--save", os.path.join(TMP, f"two-{rec}.st")))
    check(a.get("losses") and a.get("losses") == b.get("losses"),
          f"recompute {rec}: losses of 1 process {a.get('losses')} and 2 {b.get('losses')}")
    with open(os.path.join(TMP, f"one-{rec}.st"), "rb") as fa, \
            open(os.path.join(TMP, f"two-{rec}.st"), "rb") as fb:
        check(fa.read() == fb.read(), f"recompute {rec}: the checkpoint bytes of 1 and 2 "
              "processes")

gen = ("--load", os.path.join(TMP, "one-never.st"), "--generate", "the ", "--tokens", "40",
       "--temperature", "0.9", "--seed", "5")
g1 = run(plan("g1.yaml", "cpu:1"), *gen, text=False)  # sampled bytes: any of 256
g2 = run(plan("g2.yaml", "rank1:cpu:0"), *gen, np=2, text=False)
check(g1.returncode == 0 and g2.returncode == 0 and g1.stdout == g2.stdout and
      len(g1.stdout) == 45, f"--generate under 2 processes prints what 1 prints: "
      f"{g1.stdout!r} vs {g2.stdout!r} {g2.stderr[-500:]!r}")

shutil.rmtree(TMP, ignore_errors=True)
CHECKS.summary("test_gpt2_mpi")
sys.exit(CHECKS.exit_code())
