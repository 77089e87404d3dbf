#!/usr/bin/env python3
"""The pipeline-run program's memory and planner options: --memory (the table,
its JSON, exit 2 over a cap), predicted_peak_bytes in the training JSON, a
cap refused before anything runs, recompute keys, --optimize with and
without --memory-limit and -o (the plan written runs), and the exact errors
of bad limits and option combinations (exit 2).
Usage: test_fit_cli.py PIPELINE_RUN"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="pp-fit-cli-")
ENV = {**os.environ, "PP_PROFILE_CACHE": os.path.join(TMP, "unit-times.json")}


CHECKS = Checks()
check = CHECKS.check


def run(*args, env=None):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=600,
                          env=env or ENV)


def write(name, text):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text)
    return path


TINY = write("tiny.yaml", """\
model: {name: resnet18, num_classes: 10, stem: cifar}
batch: {size: 8, split_size: 2}
schedule: gpipe
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
data: {format: synthetic, image_size: [16, 16]}
steps: 2
stages:
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1, layer2]
  - device: cpu:1
    layers: [layer3, layer4, avgpool, fc]
""")

DELAY = write("delay.yaml", """\
model: {name: delay, num_classes: 4, forward_ms: [2, 4], backward_ms: [4, 8]}
batch: {size: 8, split_size: 1}
data: {format: synthetic, image_size: [4, 4]}
steps: 2
stages:
  - device: cpu:0
  - device: cpu:1
""")


def test_memory():
    r = run(TINY, "--memory")
    check(r.returncode == 0 and "predicted memory per stage" in r.stdout and
          "fits: every device's predicted peak is within its cap" in r.stdout,
          f"--memory: {r.returncode} {r.stdout} {r.stderr}")
    r = run(TINY, "--memory", "--json")
    j = json.loads(r.stdout or "{}")
    stages = j.get("stages", [])
    check(r.returncode == 0 and len(stages) == 2 and j.get("fits") is True and
          all(s["predicted_peak_bytes"] > s["params"] > 0 for s in stages) and
          stages[0]["in_flight"] == 4, f"--memory --json: {r.stdout}")
    # the training report carries the prediction beside the measurement
    r = run(TINY, "--json", "--steps", "2")
    j = json.loads(r.stdout or "{}")
    for s in j.get("stages", []):
        err = abs(s["predicted_peak_bytes"] - s["peak_bytes"]) / s["peak_bytes"]
        check(err <= 0.10, f"predicted_peak_bytes within 10% of peak_bytes: {s}")
    check(len(j.get("stages", [])) == 2, f"training JSON: {r.stderr}")
    # --simulate prints the memory table too
    r = run(TINY, "--simulate")
    check(r.returncode == 0 and "predicted memory per stage" in r.stdout, "--simulate memory")


def test_caps():
    # the new user's plan: stage 2 on cpu:0 capped, stage 0 on cpu:0 not
    shared = write("shared.yaml", """\
model: {name: resnet18, num_classes: 10}
batch: {size: 8, split_size: 2}
optimizer: {momentum: 0.9}
data: {format: synthetic, image_size: [64, 64]}
steps: 1
stages:
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1]
  - device: cpu:1
    layers: [layer2, layer3]
  - device: cpu:0
    memory: 20MiB
    layers: [layer4, avgpool, fc]
""")
    for opt in [[], ["--validate"], ["--memory"]]:
        r = run(shared, *opt)
        check(r.returncode == 2 and re.search(
            r"shared.yaml:12:13: stage 2 \(cpu:0\): predicted peak .* exceeds the memory cap of "
            r"cpu:0, 20.0 MiB \(20971520 bytes\); would fit: ", r.stderr) is not None,
            f"shared cap {opt}: {r.returncode} {r.stderr}")
    conflict = write("conflict.yaml", open(shared).read().replace(
        "    layers: [layer2, layer3]", "    layers: [layer2, layer3]").replace(
        "  - device: cpu:0\n    layers: [conv1", "  - device: cpu:0\n    memory: 1GiB\n    layers: [conv1"))
    r = run(conflict, "--validate")
    check(r.returncode == 2 and "conflict.yaml:13:13: stage 2 caps cpu:0 at 20MiB but stage 0 caps "
          "it at 1GiB: a device has one memory figure" in r.stderr, f"conflicting caps: {r.stderr}")
    bad = write("badrec.yaml", open(TINY).read().replace("schedule: gpipe", "schedule: gpipe\nrecompute: yes"))
    r = run(bad, "--validate")
    check(r.returncode == 2 and "badrec.yaml:4:12: unknown recompute 'yes' (expected never, "
          "except_last or always)" in r.stderr, f"bad recompute: {r.stderr}")
    rec = write("rec.yaml", open(TINY).read().replace(
        "  - device: cpu:0\n", "  - device: cpu:0\n    recompute: always\n"))
    r = run(rec, "--validate")
    check(r.returncode == 0 and "    recompute: always\n" in r.stdout, f"stage recompute: {r.stderr}")


def test_bad_options():
    cases = [
        (["--optimize", "--memory-limit", "12XB"], "--memory-limit: '12XB' is not a size (e.g. "
         "12GiB, 512MiB, 8GB or a byte count)"),
        (["--optimize", "--memory-limit", "0"], "--memory-limit: '0' is out of range (1 byte to "
         "1 EiB)"),
        (["--optimize", "--memory-limit"], "option --memory-limit needs a value"),
        (["-o", "x.yaml"], "-o needs --optimize"),
        (["--memory-limit", "1GiB"], "--memory-limit needs --optimize"),
        (["--optimize", "--steps", "3"], "--optimize runs nothing and writes a plan: it does not "
         "combine with --steps"),
        (["--optimize", "--simulate"], "--optimize runs nothing and writes a plan: it does not "
         "combine with --simulate"),
        (["--memory", "--validate"], "--validate and --memory exclude each other"),
    ]
    for args, msg in cases:
        r = run(TINY, *args)
        check(r.returncode == 2 and msg in r.stderr, f"{args}: {r.returncode} {r.stderr}")


def test_optimize():
    out = os.path.join(TMP, "best-delay.yaml")
    r = run(DELAY, "--optimize", "-o", out)
    check(r.returncode == 0 and os.path.exists(out) and "wrote " + out in r.stderr and
          "candidates (schedule x split size) fit" in r.stdout, f"--optimize -o: {r.stderr}")
    r = run(out, "--json")
    check(r.returncode == 0 and len(json.loads(r.stdout or "{}").get("losses", [])) == 2,
          f"the written plan runs: {r.stderr}")
    r = run(DELAY, "--optimize", "--json")
    j = json.loads(r.stdout or "{}")
    check(r.returncode == 0 and j.get("candidates") and
          j["candidates"][0]["step_ms"] <= j["candidates"][-1]["step_ms"], f"--optimize --json: {r.stdout}")
    # a limit nothing meets: exit 2, saying so
    r = run(TINY, "--optimize", "--memory-limit", "64KiB")
    check(r.returncode == 2 and re.search(r"tiny.yaml: nothing fits within --memory-limit 65536 "
                                          r"bytes \(\d+ candidates tried\); the closest: ",
                                          r.stderr) is not None, f"nothing fits: {r.stderr}")
    # a limit under the default plan's peaks: the plan written runs under it
    r = run(TINY, "--memory", "--json")
    peaks = [s["predicted_peak_bytes"] for s in json.loads(r.stdout)["stages"]]
    limit = int(0.8 * max(peaks))
    best = os.path.join(TMP, "best-tiny.yaml")
    r = run(TINY, "--optimize", "--memory-limit", str(limit), "-o", best)
    check(r.returncode == 0 and f"memory: {limit}" in open(best).read() if os.path.exists(best)
          else False, f"--optimize --memory-limit: {r.stderr}")
    r = run(best, "--json", "--steps", "2")
    j = json.loads(r.stdout or "{}")
    check(r.returncode == 0 and all(s["peak_bytes"] <= limit for s in j.get("stages", [{}])),
          f"the plan under the limit runs within it: {r.stderr}")
    r = run(TINY, "--optimize")
    check(r.returncode == 0 and "unit times: " in r.stderr and "stages:" in r.stdout,
          f"--optimize prints the plan: {r.stderr}")


for t in [test_memory, test_caps, test_bad_options, test_optimize]:
    t()
shutil.rmtree(TMP, True)
CHECKS.summary("fit cli")
sys.exit(CHECKS.exit_code())
