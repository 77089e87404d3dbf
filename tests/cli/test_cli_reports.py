#!/usr/bin/env python3
"""End-to-end tests of what the pipeline-run program reports about its runs:
--simulate, the JSON's keys and types, traces, --sweep-split (tables, CSV, SVG; failed
sizes and the whole list checked first; a list out of order), schedules
(--print-schedule, programs from files, bad programs, --sweep-schedule).
Usage: test_cli_reports.py PIPELINE_RUN SOURCE_ROOT"""
import csv
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

sys.dont_write_bytecode = True  # importing the shared helpers leaves no __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_common import (BIN, DELAY, ROOT, TMP, check, jload, run,  # noqa: E402
                        run_tests, short_data, timing_check, write)


def test_simulate():
    r = run(DELAY, "--simulate", "--json")
    check(r.returncode == 0, f"--simulate: exit {r.returncode} {r.stderr}")
    o = json.loads(r.stdout)
    # uniform stages, no copy cost: (m + S - 1)(f + b) = (4 + 2) * 6 ms
    check(abs(o["predicted_step_ms"] - 36.0) < 1e-6, f"--simulate step {o['predicted_step_ms']}")
    check(abs(o["bubble_frac_predicted"] - 2 / 6) < 1e-9, "--simulate bubble (S-1)/(m+S-1)")


def test_json_and_trace():
    trace = os.path.join(TMP, "trace.json")
    r = run(DELAY, "--json", "--trace", trace)
    check(r.returncode == 0, f"--json: exit {r.returncode} {r.stderr}")
    o = json.loads(r.stdout)
    types = {"plan": str, "model": str, "schedule": str, "precision": str, "batch_size": int,
             "split_size": int,
             "micro_batches": int, "steps": int, "step_ms": dict, "images_per_s": float,
             "predicted_step_ms": float, "bubble_frac": float, "bubble_frac_predicted": float,
             "losses": list, "stages": list, "copies": dict}
    for k, t in types.items():
        check(k in o and isinstance(o[k], t), f"JSON key {k} of type {t.__name__}: {o.get(k)!r}")
    check(o["micro_batches"] == 4 and o["steps"] == 3 and len(o["losses"]) == 3, "JSON counts")
    check(set(o["step_ms"]) == {"median", "min", "max"}, "step_ms keys")
    check(o["step_ms"]["min"] <= o["step_ms"]["median"] <= o["step_ms"]["max"], "step_ms order")
    check(set(o["copies"]) == {"bytes", "ms"} and o["copies"]["bytes"] > 0, "copies")
    check(len(o["stages"]) == 3, "three stages")
    # CPU stages: the graphs switch is not applicable, whatever it says
    check(o.get("cuda_graphs") == {"mode": "n/a", "captured": 0, "replayed": 0, "launches": 0,
                                   "refused": None}, f"cuda_graphs {o.get('cuda_graphs')}")
    r2 = run(DELAY, "--json", "--steps", "2", "--cuda-graphs", "on")
    check(r2.returncode == 0 and json.loads(r2.stdout)["cuda_graphs"]["mode"] == "n/a",
          f"--cuda-graphs on with CPU stages: exit {r2.returncode}")
    for s in o["stages"]:
        for k in ("device", "layers", "params", "forward_ms", "backward_ms", "busy_frac",
                  "peak_bytes"):
            check(k in s, f"stage key {k}")
        # sleeps overshoot on a loaded machine or under sanitizers, never undershoot:
        # the floors always, the ceilings where PP_TIMING_CHECKS=1 asks (7.1 and
        # 8.9 ms were measured in a sanitizer build beside another build's tests,
        # 6.8 and 4.0 on a CI runner beside other jobs)
        check(2 <= s["forward_ms"] and 4 <= s["backward_ms"],
              f"delay stage times {s['forward_ms']}, {s['backward_ms']} under the delays")
        timing_check(s["forward_ms"] < 6.5 and s["backward_ms"] < 8.5,
                     f"delay stage times {s['forward_ms']}, {s['backward_ms']}")
    # steady state (6 ms per micro-batch per stage): (4 + 3 - 1) * 6 = 36 ms
    check(30 < o["predicted_step_ms"], f"predicted {o['predicted_step_ms']}")
    # the prediction simulates the stage times the JSON reports, whatever the
    # machine's load: no stage does its 4 forwards and 4 backwards in less, nor
    # does the first micro-batch's way through every stage and back take less
    fb = [s["forward_ms"] + s["backward_ms"] for s in o["stages"]]
    bound = max(o["micro_batches"] * max(fb), sum(fb))
    check(o["predicted_step_ms"] >= bound * (1 - 1e-9),
          f"predicted {o['predicted_step_ms']} below the stage times' bound {bound}")
    timing_check(o["predicted_step_ms"] < 50, f"predicted {o['predicted_step_ms']}")
    timing_check(abs(o["step_ms"]["median"] - o["predicted_step_ms"]) < 0.25 * o["predicted_step_ms"],
                 f"measured {o['step_ms']['median']} vs predicted {o['predicted_step_ms']}")
    with open(trace) as f:
        t = json.load(f)
    events = t["traceEvents"] if isinstance(t, dict) else t
    names = [e.get("name", "") for e in events if e.get("ph") == "X"]
    for stage in range(3):
        for kind in "FB":
            check(any(re.fullmatch(f"{kind}\\d+ stage{stage}", n) for n in names),
                  f"trace has {kind} events of stage {stage}")
    check(any("copy" in n for n in names), "trace shows copies")
    check(all("ts" in e and "dur" in e for e in events if e.get("ph") == "X"), "X events timed")


def test_sweep():
    csv_path, svg_path = os.path.join(TMP, "s.csv"), os.path.join(TMP, "s.svg")
    # 4 steps: the first is excluded, the median of three is robust to one
    # step slowed by another test's work on the same cores
    r = run(DELAY, "--sweep-split", "1,2,4,8", "--steps", "4", "--csv", csv_path, "--svg",
            svg_path)
    check(r.returncode == 0, f"--sweep-split: exit {r.returncode} {r.stderr}")
    check("split_size" in r.stdout and r.stdout.count("\n") >= 5, "sweep table printed")
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    check([int(r["split_size"]) for r in rows] == [1, 2, 4, 8], "CSV rows per split size")
    check([int(r["micro_batches"]) for r in rows] == [8, 4, 2, 1], "CSV micro-batch counts")
    for row in rows:
        m = int(row["micro_batches"])
        step, pred = float(row["step_ms"]), float(row["predicted_step_ms"])
        check(0 <= float(row["bubble_frac"]) < 1, f"CSV measured bubble for m={m}")
        timing_check(abs(step - pred) < 0.25 * pred,
                     f"CSV step {step} vs predicted {pred} for m={m}")
        # the prediction stands on the stage costs measured in the run: equal
        # stages give 2 / (m + 2); a loaded machine skews them by a few points
        pb = float(row["bubble_frac_predicted"])
        check(abs(pb - 2 / (m + 2)) < 0.12, f"CSV predicted bubble {pb:.3f} for m={m}")
        if abs(pb - 2 / (m + 2)) >= 0.05:
            print(f"cli_reports: predicted bubble {pb:.3f} for m={m}, {2 / (m + 2):.3f} with equal"
                  " stage costs", file=sys.stderr)
    pbs = [float(r["bubble_frac_predicted"]) for r in rows]  # m = 8, 4, 2, 1
    check(all(a < b for a, b in zip(pbs, pbs[1:])), f"predicted bubble falls with m: {pbs}")
    root = ET.parse(svg_path).getroot()
    check(root.tag.endswith("svg"), "SVG root")
    check(len(root.findall(".//{http://www.w3.org/2000/svg}polyline")) >= 2, "SVG series")
    check(b"images/s" in open(svg_path, "rb").read(), "SVG axis label")
    r = run(DELAY, "--sweep-split", "16")
    check(r.returncode == 2 and "exceeds the batch size" in r.stderr, "sweep split > batch")


def test_sweep_past_failure():
    """a split size that cannot run (batch norm over one value per channel at layer4) is
    marked in the table, CSV, SVG and JSON, and the sweep goes on"""
    data = os.path.join(ROOT, "tests", "plan", "data")
    plan = write("sweepfail.yaml", open(os.path.join(ROOT, "tests", "plan", "resnet50_idx.yaml"))
                 .read().replace("data/", os.path.join(data, "")))
    csv_path, svg_path = os.path.join(TMP, "fail.csv"), os.path.join(TMP, "fail.svg")
    r = run(plan, "--device-map", "cuda:*=cpu", "--sweep-split", "1,2", "--steps", "1",
            "--csv", csv_path, "--svg", svg_path, "--json")
    check(r.returncode == 0, f"sweep past a failing split: exit {r.returncode} {r.stderr}")
    rows = list(csv.DictReader(open(csv_path))) if os.path.exists(csv_path) else []
    check(len(rows) == 2 and rows[0]["error"].endswith("needs at least 2 to train: choose "
                                                       "another split")
          and rows[0]["step_ms"] == "" and rows[1]["error"] == ""
          and float(rows[1]["images_per_s"]) > 0, f"CSV rows: {rows}")
    check("failed: batch 2 split by 1" in r.stderr, f"table marks the failed split: {r.stderr}")
    sweep = json.loads(r.stdout or "{}").get("sweep", [])
    check(len(sweep) == 2 and "error" in sweep[0] and "images_per_s" in sweep[1], f"JSON: {sweep}")
    svg = ET.parse(svg_path).getroot() if os.path.exists(svg_path) else None
    check(svg is not None and "failed" in ET.tostring(svg, encoding="unicode"), "SVG marks it")
    r = run(plan, "--device-map", "cuda:*=cpu", "--sweep-split", "1", "--steps", "1")
    check(r.returncode == 1, f"a sweep where every split fails: exit {r.returncode}")


def test_schedules():
    """--print-schedule, a program from a file, bad programs (exit 2, never a
    hang), --sweep-schedule run and simulated, the JSON's schedule keys."""
    r = subprocess.run([BIN, DELAY, "--print-schedule"], capture_output=True, timeout=60)
    check(r.returncode == 0, f"--print-schedule: exit {r.returncode} {r.stderr}")
    check(r.stdout == b"0F0,0F1,0F2,0B0,0F3,0B1,0B2,0B3\r\n1F0,1F1,1B0,1F2,1B1,1F3,1B2,1B3\r\n"
          b"2F0,2B0,2F1,2B1,2F2,2B2,2F3,2B3\r\n", f"1f1b program: {r.stdout!r}")
    r = run(DELAY, "--print-schedule=comms")
    check(r.returncode == 0 and r.stdout.startswith("0F0,0SEND_F0,0F1,0SEND_F1"),
          f"--print-schedule=comms: {r.stdout[:60]!r}")
    # the printed program, edited to zbh1's order by hand, runs from a file
    prog = write("own.csv", "0F0,0F1,0F2,0I0,0W0,0F3,0I1,0W1,0I2,0W2,0I3,0W3\r\n"
                 "1F0,1F1,1I0,1F2,1I1,1W0,1F3,1I2,1W1,1I3,1W2,1W3\r\n"
                 "2F0,2I0,2F1,2I1,2W0,2F2,2I2,2W1,2F3,2I3,2W2,2W3\r\n")
    own = write("own.yaml", open(DELAY).read().replace("schedule: 1f1b", "schedule: {file: own.csv}"))
    r = run(own, "--json", "--steps", "2")
    check(r.returncode == 0, f"program file: exit {r.returncode} {r.stderr}")
    if r.returncode == 0:
        o = json.loads(r.stdout)
        check(o["schedule"] == "file" and o["devices"] == 3, f"JSON schedule {o['schedule']}")
        for s in o["stages"]:
            check({"schedule_device", "in_flight", "bubble_predicted", "input_ms",
                   "weight_ms"} <= set(s), f"stage keys {sorted(s)}")
        check([s["in_flight"] for s in o["stages"]] == [3, 3, 2],
              f"in-flight per stage {[s['in_flight'] for s in o['stages']]}")
    # bad programs: the place and the problem, exit 2, quickly
    bad = {
        "0F0,0X0\r\n": "own.csv:1:2: unknown action '0X0'",
        "0F0,0F1,0F2,0F3,0B0,0B1,0B2,0B3\r\n1F0,1F1,1F2,1F3,1B0,1B1,1B2,1B3\r\n"
        "2F0,2F1,2F2,2F3,2B0,2B1,2B2\r\n": "own.csv:3:4: missing 2B3 (for 2F3 here)",
        "0F0,0F1,0F2,0F3,0B0,0B1,0B2,0B3\r\n1F0,1F1,1F2,1F3,1B0,1B1,1B2,1B3\r\n"
        "2F0,2F1,2F2,2F3,2B0,2B1,2B2,2B3,0B3\r\n": "own.csv:3:9: 0B3 on device 2, but stage 0 is "
        "placed on device 0",
        "0F0,0F1,0F2,0F3,0B0,0B1,0B2,0B3\r\n1F0,1F1,1F2,1F3,1B0,1B1,1B2,1B3\r\n"
        "2F1,2F0,2F2,2F3,2B0,2B1,2B2,2B3\r\n": None,  # any order that runs, runs
        "0F0,0F1,0F2,0F3,0B0,0B1,0B2,0B3\r\n1F0,1B0,1F1,1F2,1F3,1B1,1B2,1B3\r\n"
        "2F1,2F0,2B0,2F2,2F3,2B1,2B2,2B3\r\n": "own.csv:1:5: deadlock with blocking receives: "
        "device 0 waits at 0B0 for 1B0 of device 1; device 1 waits at 1B0 for 2B0 of device 2; "
        "device 2 waits at 2F1 for 1F1 of device 1",
    }
    for text, want in bad.items():
        write("own.csv", text)
        t0 = time.time()
        r = run(own, "--steps", "1", timeout=60)
        if want is None:
            check(r.returncode == 0, f"a valid order: exit {r.returncode} {r.stderr}")
        else:
            check(r.returncode == 2 and want in r.stderr, f"bad program {want!r}: exit "
                  f"{r.returncode} {r.stderr}")
        check(time.time() - t0 < 30, "a bad program is refused quickly")
    # --sweep-schedule: simulated (the closed forms) and run
    csv_path, svg_path = os.path.join(TMP, "ss.csv"), os.path.join(TMP, "ss.svg")
    r = run(DELAY, "--sweep-schedule", "gpipe,1f1b,zbh1,zbv,dualpipev", "--simulate", "--csv",
            csv_path, "--svg", svg_path, "--json")
    check(r.returncode == 0, f"--sweep-schedule --simulate: exit {r.returncode} {r.stderr}")
    if r.returncode == 0:
        o = json.loads(r.stdout)
        rows = {s["schedule"]: s for s in o["schedules"]}
        # per device F = 2, B = 4 (I = W = 2), 3 devices, 4 micro-batches (dualpipev runs
        # its order for 6 without two, as its note says)
        for name, step in {"gpipe": 36, "1f1b": 36, "zbh1": 28, "zbv": 26, "dualpipev": 30}.items():
            check(abs(rows[name]["step_ms"] - step) < 1e-6, f"{name} predicted {rows[name]}")
        check("without micro-batches 4..5" in rows["dualpipev"].get("note", ""), "padding note")
        check(rows["zbv"]["stages"] == 6 and rows["zbv"]["in_flight"] == [4, 4, 4, 3, 2, 1],
              f"zbv stages and in flight {rows['zbv']}")
        with open(csv_path) as f:
            crow = list(csv.DictReader(f))
        check([c["schedule"] for c in crow] == ["gpipe", "1f1b", "zbh1", "zbv", "dualpipev"],
              "sweep CSV rows")
        check(ET.parse(svg_path).getroot().tag.endswith("svg"), "sweep SVG")
    r = run(DELAY, "--sweep-schedule", "1f1b,zbh2,interleavedzb", "--steps", "3")
    check(r.returncode == 0 and "zbh2" in r.stdout and "interleavedzb" in r.stdout,
          f"--sweep-schedule run: exit {r.returncode} {r.stderr}")
    r = run(DELAY, "--print-schedule=all")
    check(r.returncode == 2 and "is not comms" in r.stderr, "--print-schedule=all")
    r = run(DELAY, "--sweep-schedule", "gpipe", "--sweep-split", "2")
    check(r.returncode == 2 and "runs alone or with --simulate" in r.stderr, "two sweeps")
    r = run(DELAY, "--sweep-schedule", "gpipe,zigzag")
    check(r.returncode == 2 and "'zigzag' is not a training schedule" in r.stderr,
          f"bad sweep list: {r.stderr}")
    r = run(write("zbv_looped.yaml", open(DELAY).read().replace("schedule: 1f1b",
                                                                 "schedule: zbv")), "--steps", "1")
    check(r.returncode == 2 and "schedule zbv runs two stages per device in a V" in r.stderr,
          f"zbv on one stage per device: {r.stderr}")


def test_sweep_whole_list():
    """the whole --sweep-split list is checked before anything runs (exit 2 naming the size,
    no output); a size that fails while training is a failed row, the sweep goes on and
    writes the table, CSV, SVG and JSON"""
    csv_path, svg_path = os.path.join(TMP, "w.csv"), os.path.join(TMP, "w.svg")
    for sizes in ("1,2,4,8,16", "16,1,2"):
        r = run(DELAY, "--sweep-split", sizes, "--csv", csv_path, "--svg", svg_path, "--json")
        check(r.returncode == 2 and "--sweep-split: split size 16 exceeds the batch size 8 "
              "(nothing ran)" in r.stderr and "split_size 1 (" not in r.stderr and
              r.stdout == "" and not os.path.exists(csv_path), f"{sizes}: {r.stderr}")
    # 13 samples in batches of 8: the second step's batch of 5 is cut into 4 + 1 by split 4
    # and 2 + 2 + 1 by split 2, a 1-sample micro-batch that batch norm at layer4 (1x1)
    # cannot train on; split 3 cuts it into 3 + 2
    img, lab = short_data(13)
    plan = write("tail.yaml", f"""\
model: {{name: resnet18, num_classes: 4, in_channels: 1}}
batch: {{size: 8, split_size: 2}}
data: {{format: idx, images: {img}, labels: {lab}}}
epochs: 1
stages:
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1, layer2]
  - device: cpu:1
    layers: [layer3, layer4, avgpool, fc]
""")
    r = run(plan, "--sweep-split", "2,3,4", "--steps", "2", "--csv", csv_path, "--svg", svg_path,
            "--json")
    check(r.returncode == 0, f"sweep past a run-time failure: {r.returncode} {r.stderr}")
    rows = list(csv.DictReader(open(csv_path))) if os.path.exists(csv_path) else []
    check([row["split_size"] for row in rows] == ["2", "3", "4"] and
          all("training batch norm needs more than one value" in rows[i]["error"] for i in (0, 2))
          and rows[1]["error"] == "" and float(rows[1]["images_per_s"]) > 0, f"CSV: {rows}")
    sweep = jload(r.stdout).get("sweep", [])
    check(len(sweep) == 3 and "error" in sweep[2] and "images_per_s" in sweep[1], f"JSON {sweep}")
    check(os.path.exists(svg_path) and "failed" in open(svg_path).read(), "SVG marks the failures")


def test_sweep_unsorted():
    """a list out of order: the sizes run, and the table, CSV and JSON list them, in the
    list's order; the chart's lines join them by increasing split size"""
    csv_path, svg_path = os.path.join(TMP, "u.csv"), os.path.join(TMP, "u.svg")
    r = run(DELAY, "--sweep-split", "8,2,4,1", "--steps", "1", "--csv", csv_path, "--svg",
            svg_path, "--json")
    check(r.returncode == 0, f"--sweep-split 8,2,4,1: exit {r.returncode} {r.stderr}")
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    check([int(row["split_size"]) for row in rows] == [8, 2, 4, 1], f"CSV in list order: {rows}")
    sweep = jload(r.stdout).get("sweep", [])
    check([row.get("split_size") for row in sweep] == [8, 2, 4, 1], f"JSON in list order {sweep}")
    root = ET.parse(svg_path).getroot()
    lines = root.findall(".//{http://www.w3.org/2000/svg}polyline")
    xs = [[float(p.split(",")[0]) for p in line.get("points").split()] for line in lines]
    check(len(xs) == 3 and all(len(x) == 4 and x == sorted(x) for x in xs),
          f"SVG lines by increasing split size: {xs}")


run_tests("cli_reports", [
    test_simulate,
    test_json_and_trace,
    test_sweep,
    test_sweep_past_failure,
    test_schedules,
    test_sweep_whole_list,
    test_sweep_unsorted,
])
