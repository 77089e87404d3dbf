#!/usr/bin/env python3
"""What a run writes and what it continues: the folders of its outputs made or
checked before the first step (a missing one or a folder named as a file
refused, sweeps' and -o's too), --steps past the plan's epochs, what is not
written said (--plot, --optimize --json), --resume auto with --save and with
{step} in a folder, a mid-epoch resume's header, signals ending the modes
that train no steps and stopping --sweep-schedule (the schedules that
finished written), a checkpoint that cannot be written (training
goes on, exit 1, --save still written), a failed step's "not saved" line,
--resume auto choosing this plan's run among another run's files (or refusing,
naming the difference), --resume FILE naming the settings it changes, the
header of a resumed run (plan steps count from the start, --steps N are N
more), --sweep-split's checkpoints per split size, --validate reading the
schedule's file as a run does (also with PP_MEMORY_CHECK=off), the schedule's
note on stderr, options given twice, the delay model's whole backward
defaulting to its parts, and a checkpoint whose folder cannot be synced after
its rename (FSYNC_FAIL, fsync_fail.c: in place, counted by keep), and a
sweep's CSV whose write fails (the file that was there left as it was).
Usage: test_runs.py PIPELINE_RUN [FSYNC_FAIL]"""
import atexit
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import Checks  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
FSYNC_FAIL = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None
TMP = tempfile.mkdtemp(prefix="pp-runs-")
atexit.register(shutil.rmtree, TMP, True)


CHECKS = Checks()
check = CHECKS.check


def run(*args, env=None):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300, cwd=TMP,
                          env={**os.environ, **(env or {})})


def write(name, text):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def plan(name, steps=6, lr=0.05, extra="", batch="{size: 4, split_size: 2}",
         schedule="gpipe"):
    return write(name, f"""\
model: {{name: resnet18, num_classes: 10, stem: cifar}}
batch: {batch}
schedule: {schedule}
optimizer: {{type: sgd, lr: {lr}, momentum: 0.9}}
data: {{format: synthetic, image_size: [8, 8]}}
steps: {steps}
{extra}stages:
  - {{device: cpu:0, layers: [conv1, bn1, relu, layer1, layer2]}}
  - {{device: cpu:1, layers: [layer3, layer4, avgpool, fc]}}
""")


def files(folder):
    path = os.path.join(TMP, folder)
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def test_output_folders():
    """A missing folder is made for the series and --save; a file in the way
    of an output's folder is refused before the first step."""
    p = plan("folders.yaml", extra='checkpoint: {path: "ck1/sub/ck-{step}.safetensors", every: 2}\n')
    r = run(p, "--save", "out1/deeper/final.safetensors")
    check(r.returncode == 0, f"missing folders are made: {r.stderr}")
    check("made folder ck1/sub/ for checkpoint.path" in r.stderr and
          "made folder out1/deeper/ for --save" in r.stderr, f"and said: {r.stderr}")
    check(files("ck1/sub") == ["ck-2.safetensors", "ck-4.safetensors", "ck-6.safetensors"],
          f"the series: {files('ck1/sub')}")
    check(os.path.isfile(os.path.join(TMP, "out1/deeper/final.safetensors")), "--save written")
    write("afile", "x")
    for opt in ("--save", "--trace", "--metrics"):
        r = run(p, opt, "afile/x")
        check(r.returncode == 2 and f"pipeline-run: {opt}: afile: not a folder" in r.stderr and
              "saved" not in r.stderr, f"{opt} under a file: {r.returncode} {r.stderr}")
    q = plan("folders2.yaml", extra='checkpoint: {path: "afile/ck-{step}.safetensors"}\n')
    r = run(q)
    check(r.returncode == 2 and "folders2.yaml:7:13: checkpoint.path: afile: not a folder" in
          r.stderr, f"the series under a file: {r.stderr}")
    r = run(q, "--validate")
    check(r.returncode == 2 and "checkpoint.path: afile: not a folder" in r.stderr,
          f"--validate finds it: {r.stderr}")
    r = run(p, "--validate")
    check(r.returncode == 0 and not os.path.isdir(os.path.join(TMP, "ck1x")),
          f"--validate makes nothing: {r.stderr}")


def epochs_plan(name, epochs=2, extra=""):
    """2 steps an epoch (8 samples, batch 4), a test set of 4."""
    return write(name, f"""\
model: {{name: resnet18, num_classes: 10, stem: cifar}}
batch: {{size: 4, split_size: 2}}
schedule: gpipe
optimizer: {{type: sgd, lr: 0.01, momentum: 0.9}}
data: {{format: synthetic, image_size: [8, 8], samples: 8}}
eval: {{format: synthetic, samples: 4, batch_size: 4}}
epochs: {epochs}
{extra}stages:
  - {{device: cpu:0, layers: [conv1, bn1, relu, layer1, layer2]}}
  - {{device: cpu:1, layers: [layer3, layer4, avgpool, fc]}}
""")


def test_outputs_refused_first():
    """An output into a missing folder, or naming a folder, is refused before
    anything runs, exit 2, naming the path and why: training's --trace,
    --metrics, --plot and --save, the sweeps' --csv and --svg."""
    p = plan("missing.yaml", steps=2)
    e = epochs_plan("missing-e.yaml")
    os.makedirs(os.path.join(TMP, "afolder"), exist_ok=True)
    cases = [((p, "--trace", "nodir/t.json"), "--trace: nodir: no such folder"),
             ((p, "--metrics", "nodir/m.csv"), "--metrics: nodir: no such folder"),
             ((e, "--plot", "nodir/p.svg"), "--plot: nodir: no such folder"),
             ((p, "--save", "afolder"), "--save: afolder: is a folder"),
             ((p, "--trace", "afolder"), "--trace: afolder: is a folder"),
             ((p, "--sweep-split", "2", "--csv", "nodir/s.csv"), "--csv: nodir: no such folder"),
             ((p, "--sweep-schedule", "gpipe", "--svg", "nodir/s.svg"),
              "--svg: nodir: no such folder"),
             ((p, "--sweep-split", "2", "--svg", "afolder"), "--svg: afolder: is a folder")]
    for args, want in cases:
        r = run(*args)
        check(r.returncode == 2 and f"pipeline-run: {want}" in r.stderr and
              "step" not in r.stderr, f"{args[1:]}: {r.returncode} {r.stderr}")


def test_steps_past_epochs():
    """--steps past the plan's last epoch: every epoch in order in --json and
    on the --plot's axis, the partial last one too."""
    e = epochs_plan("past.yaml", epochs=2)
    r = run(e, "--steps", "7", "--json", "--plot", "past.svg")
    rows = json.loads(r.stdout).get("epochs", []) if r.returncode == 0 else []
    check([(x["epoch"], x.get("partial", False)) for x in rows] ==
          [(1, False), (2, False), (3, False), (4, True)], f"epochs: {rows} {r.stderr}")
    svg = open(os.path.join(TMP, "past.svg")).read() if r.returncode == 0 else ""
    ticks = re.findall(r'<text x="([-0-9.]+)" y="[^"]+" text-anchor="middle">(\d+)</text>', svg)
    check([t[1] for t in ticks] == ["1", "2", "3", "4"] and
          all(float(a[0]) < float(b[0]) for a, b in zip(ticks, ticks[1:])) and
          float(ticks[0][0]) >= 0, f"the plot's epochs: {ticks}")


def test_nothing_dropped_silently():
    """--plot of a run that ends no epoch says it writes nothing; --optimize
    --json without -o writes the best plan beside the text (stdout is the
    JSON's), and -o into a missing folder is refused before the search."""
    e = epochs_plan("noplot.yaml", extra='checkpoint: {path: "ck8/ck-{epoch}.safetensors"}\n')
    r = run(e)
    check(r.returncode == 0, f"the run: {r.stderr}")
    r = run(e, "--resume", "auto", "--plot", "noplot.svg")
    check(r.returncode == 0 and "pipeline-run: --plot: noplot.svg not written: this run ended no "
          "epoch" in r.stderr, f"a finished run's --plot: {r.stderr}")
    d = write("opt.yaml", """\
model: {name: delay, num_classes: 4, forward_ms: 2, backward_ms: 4}
batch: {size: 8, split_size: 2}
schedule: 1f1b
data: {format: synthetic, image_size: [4, 4]}
steps: 1
stages:
  - {device: cpu:0}
  - {device: cpu:1}
""")
    r = run(d, "--optimize", "--json")
    try:
        out = json.loads(r.stdout)
    except ValueError:
        out = None
    check(r.returncode == 0 and out is not None and "the best plan (candidate 1" in r.stderr and
          "stages:\n  - device: cpu:0" in r.stderr, f"--optimize --json: {r.stderr}")
    r = run(d, "--optimize", "-o", "nodir/best.yaml")
    check(r.returncode == 2 and "pipeline-run: -o: nodir: no such folder" in r.stderr and
          "searching" not in r.stderr, f"-o into a missing folder: {r.stderr}")


def test_failed_checkpoint():
    """A checkpoint that cannot be written is not a failed step: the run goes
    on, writes the later ones and --save, says so, and exits 1."""
    p = plan("failing.yaml", extra='checkpoint: {path: "ck2/ck-{step}.safetensors", every: 2}\n')
    os.makedirs(os.path.join(TMP, "ck2/ck-4.safetensors"))  # a folder where the file goes
    r = run(p, "--save", "ck2/final.safetensors")
    check(r.returncode == 1, f"exit 1: {r.returncode}")
    check("ck2/ck-4.safetensors: a folder, not a file" in r.stderr and
          "the checkpoint after step 4 was not written; training goes on" in r.stderr,
          f"the failure said: {r.stderr}")
    check("saved ck2/ck-6.safetensors" in r.stderr and
          "saved ck2/final.safetensors after step 6" in r.stderr,
          f"later checkpoints and --save written: {r.stderr}")
    check("1 checkpoint of the series could not be written (the first after step 4); training "
          "went on" in r.stderr and "half-updated" not in r.stderr, f"summed up: {r.stderr}")


def fsync_fails(path, at):
    """The environment in which the at-th fsync of path (or of its temporary files) fails."""
    asan = [o for o in (os.environ.get("ASAN_OPTIONS"), "verify_asan_link_order=0") if o]
    return {"LD_PRELOAD": FSYNC_FAIL, "PP_FSYNC_FAIL_PATH": os.path.realpath(path),
            "PP_FSYNC_FAIL_AT": str(at),
            "ASAN_OPTIONS": ":".join(asan)}  # (the interposer is loaded before ASan's runtime)


def test_unsynced_checkpoint():
    """A save whose folder cannot be synced after the rename (the third fsync of
    the series' folder fails) leaves its file in place: the run says so, goes
    on and exits 1, and keep counts that file, so the newest `keep` files stay."""
    if not FSYNC_FAIL:
        print("test_unsynced_checkpoint: skipped (no fsync_fail module given)")
        return
    p = plan("unsynced.yaml",
             extra='checkpoint: {path: "ck10/ck-{step}.safetensors", every: 1, keep: 2}\n')
    r = run(p, env=fsync_fails(os.path.join(TMP, "ck10"), 3))
    check(r.returncode == 1 and "ck10/ck-3.safetensors: cannot sync directory" in r.stderr and
          "the checkpoint after step 3 is in place but its folder was not synced (it may not "
          "survive a crash); training goes on" in r.stderr, f"the failure said: {r.stderr}")
    check(files("ck10") == ["ck-5.safetensors", "ck-6.safetensors"],
          f"keep: 2 counts the unsynced file: {files('ck10')}")
    check("1 checkpoint of the series is in place but not synced (the first after step 3): it "
          "may not survive a crash; training went on" in r.stderr and
          "could not be written" not in r.stderr, f"summed up apart: {r.stderr}")


def test_failed_save_leaves_no_folder():
    """A save into a {step} folder that fails before its rename (the sync of
    its temporary file) leaves no empty folder behind; the run goes on."""
    if not FSYNC_FAIL:
        print("test_failed_save_leaves_no_folder: skipped (no fsync_fail module given)")
        return
    p = plan("nofolder.yaml", steps=3,
             extra='checkpoint: {path: "ck11/{step}/model.safetensors", every: 1}\n')
    os.makedirs(os.path.join(TMP, "ck11"))
    r = run(p, env=fsync_fails(os.path.join(TMP, "ck11/2/model.safetensors"), 1))
    check(r.returncode == 1 and "the checkpoint after step 2 was not written" in r.stderr and
          "1 checkpoint of the series could not be written (the first after step 2)" in r.stderr,
          f"the failure said: {r.stderr}")
    check(files("ck11") == ["1", "3"], f"no empty folder 2: {files('ck11')}")


def test_tables_written_whole():
    """A sweep's --csv and --svg are written beside their names and moved into
    place: a write that fails (here the fsync of the CSV's temporary file)
    leaves the file that was there as it was, and no temporary; exit 1.
    --optimize -o likewise (exit 2). A name that is a symbolic link stays
    one (to nothing: written through it; to a file: the file replaced)."""
    if not FSYNC_FAIL:
        print("test_tables_written_whole: skipped (no fsync_fail module given)")
        return
    p = write("whole.yaml", """\
model: {name: delay, num_classes: 4, forward_ms: 1, backward_ms: 2}
batch: {size: 8, split_size: 2}
schedule: 1f1b
data: {format: synthetic, image_size: [4, 4]}
steps: 1
stages:
  - {device: cpu:0}
  - {device: cpu:1}
""")
    old = write("whole.csv", "the previous table\n")
    r = run(p, "--sweep-split", "2,4", "--csv", "whole.csv", "--svg", "whole.svg",
            env=fsync_fails(old, 1))
    check(r.returncode == 1 and "whole.csv.tmp-" in r.stderr and "Input/output error" in r.stderr
          and "pipeline-run: cannot write whole.csv" in r.stderr, f"the failure said: {r.stderr}")
    check(open(old).read() == "the previous table\n" and
          not [f for f in os.listdir(TMP) if f.startswith("whole.csv.tmp-")] and
          open(os.path.join(TMP, "whole.svg")).read().endswith("</svg>\n"),
          f"the CSV as it was, no temporary, the SVG written: {sorted(os.listdir(TMP))}")
    # a symbolic link is written through, not replaced (as /dev/stdout must be)
    link = os.path.join(TMP, "link.csv")
    os.symlink("linked.csv", link)
    r = run(p, "--sweep-split", "2", "--csv", "link.csv")
    check(r.returncode == 0 and os.path.islink(link) and
          open(os.path.join(TMP, "linked.csv")).read().startswith("split_size,"),
          f"--csv through a link: {r.returncode} {os.path.islink(link)} {r.stderr}")
    # --optimize -o likewise: a failed write leaves the plan that was there
    kept = write("kept.yaml", "# the previous plan\n")
    r = run(p, "--optimize", "-o", "kept.yaml", env=fsync_fails(kept, 1))
    check(r.returncode == 2 and "kept.yaml.tmp-" in r.stderr and
          "pipeline-run: cannot write kept.yaml" in r.stderr, f"--optimize -o: {r.stderr}")
    check(open(kept).read() == "# the previous plan\n" and
          not [f for f in os.listdir(TMP) if f.startswith("kept.yaml.tmp-")],
          f"the plan as it was, no temporary: {sorted(os.listdir(TMP))}")
    # and a link to a file stays a link, the file it leads to taking the plan
    os.symlink("kept.yaml", os.path.join(TMP, "kept-link.yaml"))
    r = run(p, "--optimize", "-o", "kept-link.yaml")
    check(r.returncode == 0 and os.path.islink(os.path.join(TMP, "kept-link.yaml")) and
          "stages:" in open(kept).read(), f"--optimize -o through a link: {r.stderr}")


def test_failed_step_not_saved():
    """A step that fails (here the first, out of memory) leaves the model
    half-updated: --save says it writes nothing."""
    p = plan("oom.yaml", steps=2)
    text = open(p).read().replace("{device: cpu:0,", "{device: cpu:0, memory: 6MiB,")
    p = write("oom.yaml", text)
    r = run(p, "--save", "oom.safetensors", env={"PP_MEMORY_CHECK": "off"})
    check(r.returncode == 1 and "out of memory" in r.stderr, f"step 1 fails: {r.stderr}")
    check("pipeline-run: oom.safetensors not saved: step 1 failed, and a failed step leaves "
          "the model half-updated" in r.stderr, f"and says so: {r.stderr}")
    check(not os.path.exists(os.path.join(TMP, "oom.safetensors")), "nothing saved")


def test_resume_auto_other_run():
    """--resume auto continues this plan's run, never another's files under the
    same names; with only another run's files it refuses, naming the difference."""
    series = 'checkpoint: {path: "ck3/ck-{step}.safetensors", every: 4}\n'
    a = plan("runa.yaml", steps=12, extra=series)
    r = run(a)
    check(r.returncode == 0 and files("ck3") == ["ck-12.safetensors", "ck-4.safetensors",
                                                "ck-8.safetensors"], f"run a: {files('ck3')}")
    b = plan("runb.yaml", steps=12, lr=0.02, extra=series)
    r = run(b, "--resume", "auto")
    check(r.returncode == 2, f"only another run's files: refused ({r.returncode})")
    check("ck3/ck-12.safetensors: written by another run (its optimizer.lr differs from the "
          "plan's)" in r.stderr and "optimizer.lr: 0.05 in the checkpoint, 0.02 in the plan" in
          r.stderr and "no checkpoint of this plan's run" in r.stderr, f"named: {r.stderr}")
    r = run(b, "--steps", "5")  # a fresh run of plan b beside a's files
    check(r.returncode == 0 and "ck-4.safetensors" in files("ck3"), f"run b: {r.stderr}")
    r = run(b, "--resume", "auto", "--steps", "1")
    check(r.returncode == 0 and "resuming ck3/ck-5.safetensors after step 5" in r.stderr,
          f"b's own newest, not a's ck-12: {r.stderr}")
    r = run(b, "--resume", "ck3/ck-12.safetensors", "--steps", "1")
    check(r.returncode == 0 and "note: ck3/ck-12.safetensors continues under" in r.stderr and
          "optimizer.lr: 0.05 in the checkpoint, 0.02 in the plan" in r.stderr,
          f"a file named on purpose: allowed, its changes said: {r.stderr}")


def test_resume_auto_newest_with_save():
    """--resume auto --save FILE takes the newest file by step among the series
    and --save's, wherever --save's file stands among them."""
    series = 'checkpoint: {path: "ck6/ck-{step}.safetensors", every: 2}\n'
    p = plan("newest.yaml", steps=6, extra=series)
    r = run(p, "--steps", "2", "--save", "ck6final.safetensors")
    check(r.returncode == 0, f"first start: {r.stderr}")
    r = run(p, "--resume", "auto")  # the series goes on to step 6; --save's file stays at 2
    check(r.returncode == 0 and files("ck6")[-1] == "ck-6.safetensors", f"{files('ck6')}")
    r = run(p, "--resume", "auto", "--save", "ck6final.safetensors", "--steps", "1")
    check(r.returncode == 0 and "resuming ck6/ck-6.safetensors after step 6" in r.stderr,
          f"the series' newer file, not --save's older one: {r.stderr}")
    r = run(p, "--resume", "auto", "--save", "ck6final.safetensors", "--steps", "1")
    check(r.returncode == 0 and "resuming ck6final.safetensors after step 7" in r.stderr,
          f"--save's file when it is the newest: {r.stderr}")


def test_step_in_folder():
    """A {step} in a folder's name: the series is found there by --resume auto,
    keep and the fresh run's warning, the temporaries of a killed save are
    removed, and keep removes the folders it empties."""
    series = 'checkpoint: {path: "ck7/{step}/model.safetensors", every: 2, keep: 2}\n'
    p = plan("infolder.yaml", steps=6, extra=series)
    r = run(p, "--steps", "4")
    check(r.returncode == 0 and files("ck7") == ["2", "4"], f"{files('ck7')} {r.stderr}")
    os.makedirs(os.path.join(TMP, "ck7/6"))
    write("ck7/6/model.safetensors.tmp-a1B2c3", "partial")
    r = run(p, "--resume", "auto")
    check(r.returncode == 0 and "resuming ck7/4/model.safetensors after step 4" in r.stderr,
          f"--resume auto finds the series: {r.stderr}")
    check("removed ck7/6/model.safetensors.tmp-a1B2c3" in r.stderr and
          files("ck7/6") == ["model.safetensors"], f"the temporary removed: {r.stderr}")
    check(files("ck7") == ["4", "6"], f"keep: 2 counts the earlier files, and the emptied "
          f"folder goes: {files('ck7')}")
    r = run(p, "--steps", "1")
    check(r.returncode == 0 and "2 checkpoint files of an earlier run match checkpoint.path "
          "(newest: ck7/6/model.safetensors, step 6)" in r.stderr, f"the warning: {r.stderr}")


def test_resumed_header():
    """The plan's steps count from the start of the run, --steps N are N more:
    the first line says which steps run."""
    series = 'checkpoint: {path: "ck4/ck-{step}.safetensors", every: 2}\n'
    p = plan("hdr.yaml", steps=6, extra=series)
    run(p, "--steps", "2")
    r = run(p, "--resume", "auto")
    check("4 steps (steps 3 to 6: the plan's steps: 6 count from the start)" in r.stderr,
          f"resumed under the plan's steps: {r.stderr}")
    r = run(p, "--resume", "auto", "--steps", "3")
    check("3 steps (--steps 3 more: steps 7 to 9; the plan's steps: 6 count from the start)"
          in r.stderr, f"resumed with --steps: {r.stderr}")


def test_resumed_header_mid_epoch():
    """Resumed inside an epoch, the first lines name the step within it and
    the steps that run."""
    e = epochs_plan("mid.yaml", extra='checkpoint: {path: "ck9/ck-{epoch}.safetensors"}\n')
    r = run(e, "--steps", "1")
    check(r.returncode == 0 and files("ck9") == ["ck-0+1.safetensors"], f"{r.stderr}")
    r = run(e, "--resume", "auto", "--steps", "1")
    check("resuming ck9/ck-0+1.safetensors after step 1 (1 of the 2 steps of epoch 1 of 2)"
          in r.stderr and "1 step (--steps 1: the last 1 of the 2 steps of epoch 1 of 2, then "
          "the test set)" in r.stderr, f"mid-epoch: {r.stderr}")
    r = run(e, "--resume", "auto", "--steps", "2")
    check("resuming ck9/ck-1.safetensors after step 2 (the end of epoch 1 of 2)" in r.stderr,
          f"at an epoch's end: {r.stderr}")


def test_sweep_checkpoints():
    """Each split size of a sweep writes its checkpoints in a folder of its own,
    the last step's too as a training run does, and --resume auto under the
    plan is not confused by them."""
    series = 'checkpoint: {path: "ck5/ck-{step}.safetensors", every: 2}\n'
    p = plan("sweep.yaml", steps=2, extra=series)
    r = run(p, "--sweep-split", "2,4", "--steps", "3")
    check(r.returncode == 0, f"the sweep runs: {r.stderr}")
    check(files("ck5/split-2") == ["ck-2.safetensors", "ck-3.safetensors"] and
          files("ck5/split-4") == ["ck-2.safetensors", "ck-3.safetensors"] and
          not os.path.exists(os.path.join(TMP, "ck5/ck-2.safetensors")),
          f"one folder per size: {files('ck5')}")
    r = run(p, "--resume", "auto")
    check(r.returncode == 0 and "no checkpoint to resume from" in r.stderr,
          f"the plan's own series is untouched: {r.stderr}")


def until_line(pr, text):
    """Reads pr's stderr up to the first line holding text; returns what it read."""
    seen = ""
    for line in pr.stderr:
        seen += line
        if text in line:
            break
    return seen


def test_signal_ends_other_modes():
    """Modes with no step to stop after end at once on SIGINT or SIGTERM, exit
    130 or 143, instead of finishing their work (here --optimize measuring
    unit times), writing nothing."""
    p = write("measure.yaml", """\
model: {name: resnet50, num_classes: 10}
batch: {size: 8, split_size: 2}
schedule: 1f1b
data: {format: synthetic, image_size: [64, 64]}
steps: 1
stages:
  - {device: cpu:0, layers: [conv1, bn1, relu, maxpool, layer1, layer2]}
  - {device: cpu:1, layers: [layer3, layer4, avgpool, fc]}
""")
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        pr = subprocess.Popen([BIN, p, "--optimize", "-o", "best.yaml"], cwd=TMP, text=True,
                              env={**os.environ, "PP_PROFILE_CACHE": "off"},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        seen = until_line(pr, "measure.yaml: searching cuts")  # then it measures
        t0 = time.monotonic()
        pr.send_signal(sig)
        out, err = pr.communicate(timeout=60)
        check(pr.returncode == code and time.monotonic() - t0 < 1.5 and
              not os.path.exists(os.path.join(TMP, "best.yaml")),
              f"--optimize stopped by {sig.name}: {pr.returncode} {seen + err}")


def test_signal_stops_sweep_schedule():
    """--sweep-schedule stops after the step in flight on SIGINT or SIGTERM,
    exit 130 or 143, and writes the schedules that finished (table, CSV, SVG,
    JSON, which names the signal), as --sweep-split writes its sizes: here
    gpipe, not the 1f1b it was starting nor the zbh1 after it. Stopped before
    any schedule finished, it leaves the CSV and SVG that were there. (3 steps
    a schedule: the signal lands before the last step of the one in flight.)"""
    p = write("slow.yaml", """\
model: {name: delay, num_classes: 4, forward_ms: 50, backward_ms: 100}
batch: {size: 8, split_size: 2}
schedule: 1f1b
data: {format: synthetic, image_size: [4, 4]}
steps: 2
stages:
  - {device: cpu:0}
  - {device: cpu:1}
  - {device: cpu:2}
""")
    csv_path, svg_path = os.path.join(TMP, "s.csv"), os.path.join(TMP, "s.svg")
    for sig, code, json_out in ((signal.SIGINT, 130, True), (signal.SIGTERM, 143, False)):
        for f in (csv_path, svg_path):
            if os.path.exists(f):
                os.remove(f)
        pr = subprocess.Popen([BIN, p, "--sweep-schedule", "gpipe,1f1b,zbh1", "--steps", "3",
                               "--csv", "s.csv", "--svg", "s.svg"] + ["--json"] * json_out,
                              cwd=TMP, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = until_line(pr, "schedule 1f1b\n")
        pr.send_signal(sig)
        out, err = pr.communicate(timeout=60)
        err = seen + err
        check(pr.returncode == code and "schedule zbh1" not in err and
              f"pipeline-run: interrupted by {sig.name}" in err,
              f"--sweep-schedule stopped by {sig.name}: {pr.returncode} {err}")
        rows = list(csv.DictReader(open(csv_path))) if os.path.exists(csv_path) else None
        svg = open(svg_path).read() if os.path.exists(svg_path) else ""
        check(rows is not None and [r["schedule"] for r in rows] == ["gpipe"] and
              ">gpipe<" in svg and ">1f1b<" not in svg and svg.endswith("</svg>\n"),
              f"{sig.name}: CSV and SVG of the schedules that finished: {rows} {svg[-300:]!r}")
        table = err if json_out else out
        check(re.search(r"^gpipe +3 ", table, re.M) and not re.search(r"^1f1b ", table, re.M),
              f"{sig.name}: the table of the schedules that finished: {table!r}")
        if json_out:
            doc = json.loads(out or "{}")
            names = [r.get("schedule") for r in doc.get("schedules", [])]
            check(names == ["gpipe"] and doc.get("interrupted") == "SIGINT",
                  f"{sig.name}: the JSON's schedules, and what stopped them: {out!r}")
    # stopped before any schedule finished: the CSV and SVG there stay
    for f in (csv_path, svg_path):
        write(f, "the previous one\n")
    pr = subprocess.Popen([BIN, p, "--sweep-schedule", "gpipe,1f1b", "--steps", "3",
                           "--csv", "s.csv", "--svg", "s.svg", "--json"],
                          cwd=TMP, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = until_line(pr, "schedule gpipe\n")
    pr.send_signal(signal.SIGTERM)
    out, err = pr.communicate(timeout=60)
    err = seen + err
    doc = json.loads(out or "{}")
    check(pr.returncode == 143 and "pipeline-run: no schedule finished: s.csv and s.svg not "
          "written" in err and doc.get("schedules") == [] and doc.get("interrupted") == "SIGTERM",
          f"stopped in the first schedule: {pr.returncode} {err} {out!r}")
    check(all(open(f).read() == "the previous one\n" for f in (csv_path, svg_path)),
          "stopped in the first schedule: the CSV and SVG there stay")


def test_signal_stops_sweep_split():
    """--sweep-split likewise: SIGTERM while the second size runs writes the
    first (CSV, SVG, JSON naming the signal), exit 143; SIGINT in the first
    size leaves the CSV and SVG that were there, exit 130."""
    p = write("slow-split.yaml", """\
model: {name: delay, num_classes: 4, forward_ms: 50, backward_ms: 100}
batch: {size: 8, split_size: 2}
schedule: 1f1b
data: {format: synthetic, image_size: [4, 4]}
steps: 2
stages:
  - {device: cpu:0}
  - {device: cpu:1}
""")
    csv_path, svg_path = os.path.join(TMP, "sp.csv"), os.path.join(TMP, "sp.svg")
    for f in (csv_path, svg_path):
        write(f, "the previous one\n")
    for sig, code, after in ((signal.SIGINT, 130, "split_size 2 "),
                             (signal.SIGTERM, 143, "split_size 4 ")):
        pr = subprocess.Popen([BIN, p, "--sweep-split", "2,4,8", "--steps", "3", "--csv", "sp.csv",
                               "--svg", "sp.svg", "--json"],
                              cwd=TMP, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = until_line(pr, after)
        pr.send_signal(sig)
        out, err = pr.communicate(timeout=60)
        err = seen + err
        doc = json.loads(out or "{}")
        sizes = [r.get("split_size") for r in doc.get("sweep", [])]
        want = [] if sig == signal.SIGINT else [2]
        check(pr.returncode == code and sizes == want and doc.get("interrupted") == sig.name and
              "split_size 8 " not in err, f"{sig.name}: {pr.returncode} {sizes} {err}")
        if sig == signal.SIGINT:
            check("pipeline-run: no split size finished: sp.csv and sp.svg not written" in err and
                  all(open(f).read() == "the previous one\n" for f in (csv_path, svg_path)),
                  f"stopped in the first size, the files there stay: {err}")
        else:
            rows = list(csv.DictReader(open(csv_path)))
            check([r["split_size"] for r in rows] == ["2"] and
                  open(svg_path).read().endswith("</svg>\n"), f"the first size's CSV: {rows}")


def test_validate_reads_schedule_file():
    """--validate and --memory read and check the schedule's file as a run
    does, whatever PP_MEMORY_CHECK says."""
    good = "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"
    cases = {
        "typo": ("0F0,0F1,0B0,0B1\n1F0,1X0,1F1,1B1\n", "typo.csv:2:2: unknown action '1X0'"),
        "missing": ("0F0,0F1,0B0,0B1\n1F0,1B0,1F1\n", "missing.csv:2:3: missing 1B1 (for 1F1 "
                    "here)"),
        "deadlock": ("0F0,0B0,0F1,0B1\n1F0,1F1,1B1,1B0\n", "deadlock.csv:1:2: deadlock"),
        "fewer": ("0F0,0B0\n1F0,1B0\n", "fewer.csv:1:1: the program is written for 1 "
                  "micro-batch but the batch has 2"),
        "blank": (good + "\n\n", None),
    }
    for name, (text, want) in cases.items():
        write(f"{name}.csv", text)
        p = plan(f"sched-{name}.yaml", schedule=f"{{file: {name}.csv}}")
        for opt in ("--validate", "--memory", "--simulate", "--print-schedule"):
            for env in ({}, {"PP_MEMORY_CHECK": "off"}):
                r = run(p, opt, env=env)
                ok = r.returncode == 0 if want is None else r.returncode == 2 and want in r.stderr
                check(ok, f"{name} {opt} {env}: {r.returncode} {r.stderr}")


def test_schedule_note():
    """A run says how a built-in fitted its stages (the note of SCHEDULES.md 4)."""
    p = write("note.yaml", """\
model: {name: resnet18, num_classes: 10, stem: cifar}
batch: {size: 6, split_size: 2}
schedule: 1f1b
data: {format: synthetic, image_size: [8, 8]}
steps: 1
stages:
  - {device: cpu:0, layers: [conv1, bn1, relu, layer1]}
  - {device: cpu:1, layers: [layer2]}
  - {device: cpu:0, layers: [layer3]}
  - {device: cpu:1, layers: [layer4, avgpool, fc]}
""")
    r = run(p)
    check(r.returncode == 0 and "note: 1f1b: 4 stages on 2 devices as 0,1,0,1 run as its "
          "order over one device per stage, merged per device" in r.stderr, f"{r.stderr}")
    r = run(p, "--optimize", "-o", "best.yaml")
    check("for 4 stages over 2 devices" in r.stderr, f"--optimize counts devices: {r.stderr}")


def test_options_once():
    """Nothing is silently ignored: an option given twice is refused, and
    --sweep-schedule names the training schedules only."""
    p = plan("once.yaml")
    for args, want in ((("--steps", "2", "--steps", "3"), "--steps given twice ('2', then '3')"),
                       (("--steps=2", "--steps", "3"), "--steps given twice ('2', then '3')"),
                       (("--json", "--json"), "--json given twice: give it once"),
                       (("--validate", "-o", "a", "-o", "b"), "-o given twice ('a', then 'b')")):
        r = run(p, *args)
        check(r.returncode == 2 and want in r.stderr, f"{args}: {r.stderr}")
    r = run(p, "--sweep-schedule", "forward")
    check(r.returncode == 2 and r.stderr.startswith(
        "pipeline-run: --sweep-schedule: 'forward' is not a training schedule: expected one of "
        "gpipe, 1f1b, interleaved1f1b, loopedbfs, interleavedzb, zbh1, zbh2, zbv, dualpipev\n"),
        f"--sweep-schedule forward: {r.stderr!r}")


def test_delay_backward_from_parts():
    """With I and W given and no backward_ms, every schedule is timed with
    B = I + W: 1F1B's closed form (m + S - 1)(F + B)."""
    p = write("delayparts.yaml", """\
model: {name: delay, forward_ms: 4, backward_input_ms: 4, backward_weight_ms: 4}
batch: {size: 8, split_size: 1}
schedule: 1f1b
steps: 1
stages:
  - {device: cpu:0}
  - {device: cpu:1}
""")
    r = run(p, "--simulate", "--json")
    sim = json.loads(r.stdout) if r.returncode == 0 else {}
    check(abs(sim.get("predicted_step_ms", 0) - 9 * 12) < 1e-6, f"1f1b: {r.stdout} {r.stderr}")


for t in (test_output_folders, test_outputs_refused_first, test_steps_past_epochs,
          test_nothing_dropped_silently,
          test_failed_checkpoint, test_unsynced_checkpoint, test_failed_save_leaves_no_folder,
          test_tables_written_whole,
          test_failed_step_not_saved,
          test_resume_auto_other_run,
          test_resume_auto_newest_with_save, test_resumed_header, test_resumed_header_mid_epoch,
          test_step_in_folder,
          test_sweep_checkpoints, test_signal_ends_other_modes, test_signal_stops_sweep_schedule,
          test_signal_stops_sweep_split,
          test_validate_reads_schedule_file, test_schedule_note, test_options_once,
          test_delay_backward_from_parts):
    t()
CHECKS.summary("test_runs")
sys.exit(CHECKS.exit_code())
