#!/usr/bin/env python3
"""End-to-end tests of what the pipeline-run program accepts and refuses
before it runs: --help and --version, bad arguments and every option alone and in pairs
(the option table of docs/CLI.md), bad plans and data at their FILE:LINE:COL, --validate
(round trips, --json, device maps, cuDNN's tensor limit), docs/CLI.md's section per
option. Usage: test_cli_options.py PIPELINE_RUN SOURCE_ROOT"""
import os
import re
import struct
import sys
import zlib

sys.dont_write_bytecode = True  # importing the shared helpers leaves no __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_common import (DELAY, PLANS, ROOT, TINY, TMP, check, jload,  # noqa: E402
                        run, run_tests, short_data, write)


def test_help_version():
    r = run("--help")
    check(r.returncode == 0 and all(shown(o).split("=")[0] in r.stdout for o in OPTION_ARGS),
          "--help lists every option")
    check("143 stopped by SIGTERM" in r.stdout and "130 stopped by SIGINT" in r.stdout and
          "naming both" in r.stdout, "--help: signals' exit statuses, refused combinations")
    r = run("--version")
    want = os.environ.get("PP_PROJECT_VERSION")  # set by meson; any x.y.z when run by hand
    check(r.returncode == 0 and (r.stdout.strip() == f"pipeline-run {want}" if want else
                                 re.match(r"pipeline-run \d+\.\d+\.\d+$", r.stdout.strip())),
          f"--version prints the project's version ({want}): {r.stdout.strip()!r}")


def test_bad_arguments():
    cases = [
        ([], "missing PLAN"),
        ([DELAY, "--bogus"], "unknown option"),
        ([DELAY, "--steps", "abc"], "--steps"),
        ([DELAY, "--steps", "0"], "--steps"),
        ([DELAY, "--steps"], "needs a value"),
        ([DELAY, "--csv", "x.csv"], "--csv needs --sweep-split"),
        ([DELAY, "--sweep-split", "1,x"], "--sweep-split"),
        ([DELAY, "--sweep-split", "2,4,2"], "--sweep-split: '2,4,2' names a size twice"),
        ([DELAY, "--sweep-split", ",".join(["1000"] * 120)],
         "--sweep-split: the list is longer than 511 characters"),
        ([DELAY, "--sweep-schedule", "gpipe,1f1b,gpipe"],
         "--sweep-schedule: 'gpipe,1f1b,gpipe' names a schedule twice"),
        ([DELAY, "--resume", "a/" * 2100 + "x"], "--resume: a path of 4201 characters is longer"),
        ([DELAY, "--validate", "--simulate"], "exclude"),
        ([DELAY, "extra.yaml"], "unexpected argument"),
        ([DELAY, "--device-map", "cuda:0"], "device"),
        ([DELAY, "--cuda-graphs", "maybe"], "--cuda-graphs"),
        ([os.path.join(TMP, "missing.yaml")], "missing.yaml"),
    ]
    for args, fragment in cases:
        r = run(*args)
        check(r.returncode == 2, f"{args}: exit {r.returncode}, want 2 ({r.stderr.strip()})")
        check(fragment in r.stderr, f"{args}: message {r.stderr.strip()!r} lacks {fragment!r}")


def test_bad_plans():
    cases = [
        ("model: {name: resnet51}\n", 1, 15),
        ("model: {name: resnet50}\nbatch: {size: 8, split_size: 3}\nstages:\n"
         "  - device: cpu:0\n    layers: [conv1, bn1, relu, maxpool, layer1, layer2, layer3, layer4, avgpool]\n",
         5, 73),
        ("model: {name: resnet50}\nbatch: {size: 8, split_size: 3}\nbogus: 1\nstages:\n"
         "  - device: cpu:0\n    layers: [conv1]\n", 3, 1),
    ]
    for i, (text, line, col) in enumerate(cases):
        path = write(f"bad{i}.yaml", text)
        r = run(path)
        check(r.returncode == 2, f"bad plan {i}: exit {r.returncode}")
        m = re.search(re.escape(path) + r":(\d+):(\d+): ", r.stderr)
        check(m is not None, f"bad plan {i}: no FILE:LINE:COL in {r.stderr!r}")
        if m:
            check((int(m.group(1)), int(m.group(2))) == (line, col),
                  f"bad plan {i}: position {m.group(1)}:{m.group(2)}, want {line}:{col}")
    # a GPU plan on a machine without one: exit 2 at the device node, unless a GPU exists
    r = run(os.path.join(PLANS, "resnet50-2gpu.yaml"), "--steps", "1", timeout=600)
    if r.returncode != 0:
        check(r.returncode == 2, f"cuda plan without GPU: exit {r.returncode}")
        check(re.search(r"resnet50-2gpu.yaml:\d+:\d+: .*cuda:0", r.stderr) is not None,
              f"cuda plan without GPU: message {r.stderr!r}")


def tiny_png(path, w=8, h=6):
    """A w x h gray PNG (the plan checks need real images; no PIL here)."""
    raw = b"".join(b"\0" + bytes((x * 30 + y * 7) % 256 for x in range(w)) for y in range(h))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data)))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def example_path(name):
    """An example plan to run here: an image folder plan gets a copy beside two
    small folders of the layout it names (imagenet/train, imagenet/val)."""
    path = os.path.join(PLANS, name)
    if "imagefolder" not in name:
        return path
    for split in ("train", "val"):
        for c in ("n01440764", "n01443537"):
            os.makedirs(os.path.join(TMP, "imagenet", split, c), exist_ok=True)
            tiny_png(os.path.join(TMP, "imagenet", split, c, "a.png"))
    return write(name, open(path).read())


def test_validate_roundtrip():
    for name in sorted(os.listdir(PLANS)):
        path = example_path(name)
        r = run(path, "--validate")
        check(r.returncode == 0, f"--validate {name}: exit {r.returncode}: {r.stderr}")
        again = write("again-" + name, r.stdout)
        r2 = run(again, "--validate")
        check(r2.returncode == 0 and r2.stdout == r.stdout,
              f"--validate {name}: the printed plan does not parse back to itself")
    for m in ("cuda:*=cpu", "cuda=cpu"):
        r = run(os.path.join(PLANS, "resnet50-2gpu.yaml"), "--validate", "--device-map", m)
        check(r.returncode == 0 and "cpu:0" in r.stdout and "cpu:1" in r.stdout
              and "cuda" not in r.stdout, f"--device-map {m} remaps every stage")
    r = run(os.path.join(PLANS, "resnet50-2gpu.yaml"), "--validate", "--device-map", "cuda:9=cpu:0")
    check(r.returncode == 2 and "device map names cuda:9, which the plan does not use (its "
          "devices: cuda:0, cuda:1)" in r.stderr, f"--device-map of a device not in the plan: "
          f"{r.stderr}")
    r = run(os.path.join(PLANS, "auto-balance-cpu.yaml"), "--validate")
    check(r.returncode == 0 and r.stdout.count("device:") == 2 and "auto" not in r.stdout,
          "stages: auto resolves to explicit stages")


def test_cudnn_limit():
    """a micro-batch whose activations cuDNN cannot describe (over 2^31 - 1 elements) is refused
    when the plan is resolved, naming the stage, layer and limit and the split size that fits"""
    text = """\
model: {name: resnet50}
batch: {size: 4096, split_size: %d}
data: {format: synthetic, image_size: [224, 224]}
stages:
  - device: cuda:0
    layers: [conv1, bn1, relu, maxpool, layer1, layer2]
  - device: cuda:1
    layers: [layer3, layer4, avgpool, fc]
"""
    r = run(write("cudnn-limit.yaml", text % 4096), "--validate")
    check(r.returncode == 2 and re.search(
        r"cudnn-limit.yaml:2:8: stage 0 \(cuda:0\): conv1 holds 802816 elements per sample, "
        r"3288334336 in a micro-batch of 4096: over cuDNN's limit of 2147483647 elements per "
        r"tensor; lower batch.split_size to at most 2674", r.stderr) is not None,
          f"cuDNN tensor limit: exit {r.returncode} {r.stderr}")
    check(run(write("cudnn-fits.yaml", text % 2674), "--validate").returncode == 0,
          "split_size 2674 fits")
    check(run(write("cudnn-over.yaml", text % 2675), "--validate").returncode == 2,
          "split_size 2675 does not")
    r = run(write("cudnn-cpu.yaml", text % 4096), "--validate", "--device-map", "cuda:*=cpu")
    check(r.returncode == 0, f"the limit is cuDNN's: CPU stages have none: {r.stderr}")


# The option table of docs/CLI.md (cli/options.c): the kinds of run each option works in
# (t training, v --validate, s --simulate, m --memory, w --sweep-split, k --sweep-schedule,
# e --eval-only, o --optimize, p --print-schedule, f --verify, g --show-data, x --dump-data,
# n --generate) and what it needs (any one of).
# "--resume=auto" is --resume auto (its messages say "--resume auto").
OPTION_ARGS = {"--steps": ["2"], "--validate": [], "--simulate": [], "--sweep-split": ["1,2"],
               "--eval-only": [], "--json": [], "--trace": ["t.json"], "--load": ["l.st"],
               "--save": ["s.st"], "--weights-only": [], "--resume": ["r.st"],
               "--device-map": ["cuda=cpu"], "--cuda-graphs": ["on"], "--csv": ["c.csv"],
               "--svg": ["s.svg"], "--metrics": ["m.csv"], "--plot": ["p.svg"],
               "--layout": ["nchw"], "--grad-allreduce": ["whole"], "--memory": [],
               "--optimize": [], "--memory-limit": ["1GiB"], "-o": ["best.yaml"],
               "--print-schedule": [], "--sweep-schedule": ["gpipe,1f1b"],
               "--verify": ["c.safetensors"], "--resume=auto": [], "--show-data": ["4"],
               "--dump-data": ["0"], "--generate": ["Hi"], "--tokens": ["5"],
               "--temperature": ["0.5"], "--top-k": ["3"], "--seed": ["2"],
               "--no-kv-cache": []}
OPTION_RUNS = {"--steps": "twk", "--validate": "v", "--simulate": "sk", "--sweep-split": "w",
               "--eval-only": "e", "--json": "tvsmwkeo", "--trace": "t", "--load": "twen",
               "--save": "t", "--weights-only": "t", "--resume": "t",
               "--device-map": "tvsmwkeopfgxn", "--cuda-graphs": "tw", "--csv": "wk",
               "--svg": "wk",
               "--metrics": "t", "--plot": "t", "--layout": "twek", "--grad-allreduce": "tw",
               "--memory": "m", "--optimize": "o", "--memory-limit": "o", "-o": "ogx",
               "--print-schedule": "p", "--sweep-schedule": "k", "--verify": "f",
               "--resume=auto": "t", "--show-data": "g", "--dump-data": "x", "--generate": "n",
               "--tokens": "n", "--temperature": "n", "--top-k": "n", "--seed": "n",
               "--no-kv-cache": "n"}
OPTION_NEEDS = {"--eval-only": ["--load"], "--weights-only": ["--save"],
                "--csv": ["--sweep-split", "--sweep-schedule"],
                "--svg": ["--sweep-split", "--sweep-schedule"],
                "--memory-limit": ["--optimize"],
                "-o": ["--optimize", "--show-data", "--dump-data"], "--generate": ["--load"],
                "--tokens": ["--generate"], "--temperature": ["--generate"],
                "--top-k": ["--generate"], "--seed": ["--generate"],
                "--no-kv-cache": ["--generate"]}
# the options that choose the kind, in the order in which they speak when two are given
OPTION_KINDS = {"--verify": "f", "--optimize": "o", "--show-data": "g", "--dump-data": "x",
                "--print-schedule": "p",
                "--sweep-schedule": "k", "--validate": "v", "--simulate": "s", "--memory": "m",
                "--sweep-split": "w", "--eval-only": "e", "--generate": "n"}
OPTION_NAMES = {"--resume=auto": "--resume auto"}


def shown(o):
    return OPTION_NAMES.get(o, o)


def option_refusal(opts):
    """The options a refusal of opts names, or None when they go together."""
    kinds = sorted((o for o in opts if o in OPTION_KINDS), key=list(OPTION_KINDS).index)
    for k in kinds[1:]:
        if OPTION_KINDS[kinds[0]] not in OPTION_RUNS[k]:
            return kinds[0], k
    for r in ("--resume", "--resume=auto"):
        if r in opts and "--load" in opts:
            return shown(r), "--load"
    kind = OPTION_KINDS[kinds[0]] if kinds else "t"
    for o in opts:
        if kind not in OPTION_RUNS[o]:
            return (shown(o), kinds[0]) if kinds else (shown(o), *OPTION_NEEDS[o])
    for o in opts:
        if o in OPTION_NEEDS and not any(n in opts for n in OPTION_NEEDS[o]):
            return (shown(o), *OPTION_NEEDS[o])
    return None


def test_option_table():
    """every option alone and every pair: refused (exit 2, both options named) exactly where
    the table says, else past the check (to the plan, here a missing file); then what depends
    on the plan: --plot needs epochs, --grad-allreduce replicas"""
    missing = os.path.join(TMP, "no-such-plan.yaml")
    names = list(OPTION_ARGS)
    combos = [(a,) for a in names] + [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
                                      if {a, b} != {"--resume", "--resume=auto"}]
    refused = 0
    for opts in combos:
        args = [x for o in opts for x in [o] + OPTION_ARGS[o]]
        r = run(missing, *args)
        want = option_refusal(opts)
        if want:
            refused += 1
            check(r.returncode == 2 and all(w in r.stderr for w in want) and
                  "no-such-plan" not in r.stderr,
                  f"{' '.join(args)}: want a refusal naming {want}: {r.returncode} {r.stderr!r}")
        else:
            check(r.returncode == 2 and "no-such-plan.yaml" in r.stderr,
                  f"{' '.join(args)}: want the options accepted: {r.returncode} {r.stderr!r}")
    check(refused > 60, f"only {refused} refused combinations")
    r = run(DELAY, "--plot", os.path.join(TMP, "x.svg"))
    check(r.returncode == 2 and re.search(r"delay\.yaml:5:8: --plot draws one point per epoch, "
                                          r"and the plan gives steps", r.stderr) is not None
          and not os.path.exists(os.path.join(TMP, "x.svg")), f"--plot on steps: {r.stderr}")
    r = run(DELAY, "--grad-allreduce", "whole")
    check(r.returncode == 2 and "--grad-allreduce" in r.stderr and "no replicas" in r.stderr,
          f"--grad-allreduce without replicas: {r.stderr}")
    outs = [os.path.join(TMP, f) for f in ("m.csv", "t.json", "s.safetensors")]
    r = run(DELAY, "--sweep-split", "2,4", "--metrics", outs[0], "--trace", outs[1], "--save",
            outs[2])
    check(r.returncode == 2 and re.search(r"--(metrics|trace|save) and --sweep-split exclude each "
                                          r"other", r.stderr) is not None
          and not any(os.path.exists(o) for o in outs), f"sweep with outputs: {r.stderr}")


def test_validate_json():
    """--validate --json: one JSON object of the resolved plan on stdout, the YAML on stderr"""
    r = run(DELAY, "--validate", "--json")
    o = jload(r.stdout)
    yaml_text = run(DELAY, "--validate").stdout
    check(r.returncode == 0 and o.get("valid") is True and o.get("micro_batches") == 4 and
          o.get("steps") == 3 and [s["device"] for s in o.get("stages", [])] ==
          ["cpu:0", "cpu:1", "cpu:2"] and o.get("resolved") == yaml_text and
          yaml_text in r.stderr, f"--validate --json: {r.returncode} {r.stdout!r}")
    r = run(TINY, "--validate", "--json")
    o = jload(r.stdout)
    check([s["layers"] for s in o.get("stages", [])] ==
          [["conv1", "bn1", "relu", "maxpool", "layer1", "layer2"],
           ["layer3", "layer4", "avgpool", "fc"]], f"stage layers: {o.get('stages')}")


def test_data_against_model():
    """--validate reads the IDX headers and labels: 1-channel images with in_channels 3, a
    label count that differs from the images', labels beyond num_classes: exit 2 at the
    data key"""
    img, lab = short_data(12, h=12, name="v")
    _, lab11 = short_data(11, h=12, name="v11")
    _, lab6 = short_data(12, h=12, classes=6, name="v6")
    base = f"""\
model: {{name: resnet18, num_classes: 4, in_channels: 1, stem: cifar}}
batch: {{size: 4, split_size: 2}}
data: {{format: idx,
        images: {img},
        labels: {lab}}}
eval: {{images: {img}, labels: {lab}}}
stages:
  - device: cpu:0
    layers: [conv1, bn1, relu, maxpool, layer1, layer2, layer3, layer4, avgpool, fc]
"""
    r = run(write("v-ok.yaml", base), "--validate")
    check(r.returncode == 0, f"the valid data plan: {r.stderr}")
    cases = [("channels", base.replace("in_channels: 1", "in_channels: 3"), 4, 17,
              "holds 1-channel images (12x12) but model.in_channels is 3"),
             ("count", base.replace(f"labels: {lab}}}\neval", f"labels: {lab11}}}\neval"), 5,
              17, "holds 11 labels but"),
             ("range", base.replace(f"labels: {lab}}}\neval", f"labels: {lab6}}}\neval"), 5,
              17, "label 4 of sample 4 is not below model.num_classes 4"),
             ("eval range", base.replace(f"labels: {lab}}}\nstages", f"labels: {lab6}}}\nstages"),
              6, 26 + len(img), "eval.labels:")]
    for what, text, line, col, fragment in cases:
        path = write(f"v-{what.replace(' ', '-')}.yaml", text)
        r = run(path, "--validate")
        check(r.returncode == 2 and f"{path}:{line}:{col}: " in r.stderr and fragment in r.stderr,
              f"{what}: {r.returncode} {r.stderr!r}")


def test_docs():
    """docs/RUNNING.md's mpirun example with four ranks says --oversubscribe where the machine has fewer
    cores; docs/CLI.md has a section per option"""
    readme = open(os.path.join(ROOT, "docs", "RUNNING.md")).read()
    at = readme.find("mpirun -np 4")
    check(at >= 0 and "--oversubscribe" in readme[at - 600:at + 600],
          "RUNNING.md's mpirun -np 4 mentions --oversubscribe")
    cli_md = open(os.path.join(ROOT, "docs", "CLI.md")).read()
    for o in map(shown, OPTION_ARGS):
        check(re.search(rf"^### .*`{re.escape(o)}\b", cli_md, re.M) is not None,
              f"docs/CLI.md section {o}")


run_tests("cli_options", [
    test_help_version,
    test_bad_arguments,
    test_bad_plans,
    test_validate_roundtrip,
    test_cudnn_limit,
    test_option_table,
    test_validate_json,
    test_data_against_model,
    test_docs,
])
