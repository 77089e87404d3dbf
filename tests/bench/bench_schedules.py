#!/usr/bin/env python3
"""bench_schedules.py - every schedule on the delay model with F = I = W per
device (examples/plans/delay-zero-bubble.yaml: 4 CPU devices, 8 micro-batches,
40 ms per pass and device), measured against its closed form
(docs/SCHEDULES.md; `--simulate` predicts exactly the closed forms for these
costs), torch's Looped BFS order (from its file) against ours, and with
--resnet50 the ResNet-50 CPU table (step time and peak memory per schedule).
Prints figures and asserts nothing.

Usage: bench_schedules.py PIPELINE_RUN SOURCE_ROOT [--steps N] [--resnet50]"""
import csv
import os
import subprocess
import sys
import tempfile

BIN, ROOT = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
STEPS = sys.argv[sys.argv.index("--steps") + 1] if "--steps" in sys.argv else "5"
ALL = "gpipe,1f1b,interleaved1f1b,loopedbfs,interleavedzb,zbh1,zbh2,zbv,dualpipev"
TMP = tempfile.mkdtemp(prefix="pp-bench-sched-")


def sweep(plan, *extra):
    out = os.path.join(TMP, "sweep.csv")
    cmd = [BIN, plan, "--sweep-schedule", ALL, "--csv", out, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr}")
    with open(out) as f:
        return {row["schedule"]: row for row in csv.DictReader(f)}


def delay_table():
    plan = os.path.join(ROOT, "examples", "plans", "delay-zero-bubble.yaml")
    closed = sweep(plan, "--simulate")
    measured = sweep(plan, "--steps", STEPS)
    print(f"delay model, 4 devices, 8 micro-batches, F = I = W = 40 ms per device "
          f"({STEPS} steps, median after the first)")
    print(f"{'schedule':16s} {'stages':>6s} {'closed form ms':>14s} {'measured ms':>11s} "
          f"{'error':>7s} {'bubble':>7s} {'closed bubble':>13s}")
    best = None
    for name in ALL.split(","):
        c, m = closed[name], measured[name]
        cf, ms = float(c["step_ms"]), float(m["step_ms"])
        print(f"{name:16s} {c['stages']:>6s} {cf:14.1f} {ms:11.1f} {100 * (ms / cf - 1):+6.1f}% "
              f"{100 * float(m['bubble_frac']):6.1f}% {100 * float(c['bubble_frac']):12.1f}%")
        b = float(m["bubble_frac"])
        best = (b, name) if best is None or b < best[0] else best
    print(f"best measured bubble: {100 * best[0]:.1f}% ({best[1]})")


def looped_bfs(rounds=3):
    """torch's ScheduleLoopedBFS-pp4-v2-m8 file against our loopedbfs on the same
    plan, alternating (ours, torch's, ...) so that background load hits both
    alike; the median over rounds of each run's median step."""
    import json
    src = open(os.path.join(ROOT, "examples", "plans", "delay-zero-bubble.yaml")).read()
    looped = src.replace("  - device: cpu:3\n  - device: cpu:3\n  - device: cpu:2\n"
                         "  - device: cpu:1\n  - device: cpu:0\n",
                         "  - device: cpu:3\n  - device: cpu:0\n  - device: cpu:1\n"
                         "  - device: cpu:2\n  - device: cpu:3\n")
    torch_file = os.path.join(ROOT, "tests", "schedules", "torch", "ScheduleLoopedBFS-pp4-v2-m8.csv")
    runs = {"ours (loopedbfs)": "loopedbfs", "torch's file": "{file: \"%s\"}" % torch_file}
    steps = {label: [] for label in runs}
    bubbles = {label: [] for label in runs}
    for _ in range(rounds):
        for label, schedule in runs.items():
            path = os.path.join(TMP, "bfs.yaml")
            with open(path, "w") as f:
                f.write(looped.replace("schedule: zbv", f"schedule: {schedule}"))
            r = subprocess.run([BIN, path, "--steps", STEPS, "--json"], capture_output=True,
                               text=True)
            if r.returncode != 0:
                sys.exit(f"{label}: exit {r.returncode}\n{r.stderr}")
            o = json.loads(r.stdout)
            steps[label].append(o["step_ms"]["median"])
            bubbles[label].append(o["bubble_frac"])
    print(f"\nLooped BFS, pp4 v2 m8 (closed form 1140 ms): torch's order (backwards from the last "
          f"micro-batch) and ours, {rounds} alternating rounds")
    for label in runs:
        s, b = sorted(steps[label]), sorted(bubbles[label])
        print(f"{label:18s} step {s[len(s) // 2]:8.1f} ms (runs {', '.join(f'{x:.1f}' for x in steps[label])})"
              f"  bubble {100 * b[len(b) // 2]:5.1f}%")


def resnet50_table():
    plan = os.path.join(ROOT, "examples", "plans", "resnet50-cpu-schedules.yaml")
    measured = sweep(plan, "--steps", STEPS)
    print(f"\nResNet-50 (cifar stem, 32x32, batch 16 = 8 micro-batches) on 4 CPU devices, "
          f"{STEPS} steps")
    print(f"{'schedule':16s} {'stages':>6s} {'step ms':>9s} {'bubble':>7s} {'peak MiB':>9s} "
          f"in flight per stage")
    for name in ALL.split(","):
        m = measured[name]
        peak = max(int(x) for x in m["peak_bytes"].split(";")) / 2**20
        print(f"{name:16s} {m['stages']:>6s} {float(m['step_ms']):9.1f} "
              f"{100 * float(m['bubble_frac']):6.1f}% {peak:9.1f} {m['in_flight']}")


delay_table()
looped_bfs()
if "--resnet50" in sys.argv:
    resnet50_table()
