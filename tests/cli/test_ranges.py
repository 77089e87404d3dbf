"""Profiler ranges (NVTX) end to end. Usage: test_ranges.py PIPELINE_RUN SOURCE_ROOT COLLECTOR

COLLECTOR is tests/cli/nvtx_record.c built as a library: with
NVTX_INJECTION64_PATH naming it, as Nsight Systems and Nsight Compute name
theirs, every range the program pushes or pops becomes a line of
NVTX_RECORD_FILE. Checked: each thread's ranges nest (no pop without a push,
none left open); a step's range holds the optimizer's; every task of the
schedule has its range (F and B, or F, I and W of each micro-batch and
stage) on the thread that ran it; every unit's forward and backward (input
and weight parts, recomputation) sit inside their task's range; the loss
inside the last stage's forwards; the test set's passes inside
"evaluate", --generate's inside "generate"; the run's results are those of a run
without ranges; PP_NVTX=off loads no collector, on without one runs, a bad
value is refused. Exits 77 when the build has no NVTX (COLLECTOR empty).
"""
import os
import subprocess
import sys

from cli_common import BIN, TINY, TMP, check, jload, run, run_tests, write

COLLECTOR = os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] else ""
if not COLLECTOR:
    print("test_ranges: built without NVTX (no nvtx3 headers): skipped")
    sys.exit(77)

RESNET = TINY  # resnet18 on 2 stages, gpipe, 2 micro-batches, 2 steps

write("ranges-corpus.txt", "".join("A byte-level model reads every character. "[i % 42]
                                   for i in range(4000)))
GPT2 = write("ranges-gpt2.yaml", """\
model: {name: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 16}
batch: {size: 4, micro_batches: 2}
schedule: zbh1
optimizer: {type: adamw, lr: 0.001}
data: {format: text, file: ranges-corpus.txt}
eval: {file: ranges-corpus.txt}
seed: 5
steps: 2
stages:
  - {device: cpu:0, layers: [wte, wpe, h.0], recompute: always}
  - {device: cpu:1, layers: [h.1, ln_f, lm_head]}
""")


def record(plan, name, env_extra=None, collector=True, args=("--json",), text=True):
    """Runs plan (with args) with the collector (and env_extra); returns (result, lines)."""
    path = os.path.join(TMP, name + ".rec")
    if os.path.exists(path):
        os.remove(path)
    env = dict(os.environ)
    env.pop("PP_NVTX", None)
    env.pop("NVTX_INJECTION64_PATH", None)
    if collector:
        env["NVTX_INJECTION64_PATH"] = COLLECTOR
    env["NVTX_RECORD_FILE"] = path
    env.update(env_extra or {})
    r = subprocess.run([BIN, plan, *args], capture_output=True, text=text, env=env, cwd=TMP,
                       timeout=240)
    lines = open(path).read().splitlines() if os.path.exists(path) else []
    return r, lines


def parse(lines):
    """(ranges, problems): each range as (thread, name, parents: the names
    open on its thread when it was pushed, outermost first, open: the names
    open on any thread then; the file's lines are in the order of the
    calls); problems: pops with nothing open, ranges left open, lines not
    understood."""
    stacks, out, problems = {}, [], []
    for ln in lines:
        parts = ln.split(" ", 2)
        if parts[0] == "push" and len(parts) == 3:
            st = stacks.setdefault(parts[1], [])
            out.append((parts[1], parts[2], tuple(st),
                        {n for other in stacks.values() for n in other}))
            st.append(parts[2])
        elif parts[0] == "pop" and len(parts) == 2:
            st = stacks.setdefault(parts[1], [])
            if st:
                st.pop()
            else:
                problems.append(f"pop on thread {parts[1]} with no range open")
        else:
            problems.append(f"line not understood: {ln!r}")
    for t, st in stacks.items():
        if st:
            problems.append(f"thread {t} left {st} open")
    return out, problems


def ranges(lines, outside=None):
    """parse's ranges as (thread, name, parents) and its problems; with
    outside (a name), the ranges pushed on any thread while a range of that
    name was open are left out, and those ranges too (another thread's work
    is inside it by time, not by nesting: a CPU stream's tasks run on the
    stream's thread)."""
    out, problems = parse(lines)
    return [(t, n, par) for t, n, par, now in out
            if outside is None or (n != outside and outside not in now)], problems


def during(lines, name):
    """The names of the ranges pushed, on any thread, while a range called
    name was open."""
    return [n for _, n, _par, now in parse(lines)[0] if name in now]


def losses(r):
    return jload(r.stdout).get("losses")


def inside(rs, name, parent_prefix):
    """how many ranges called name have an enclosing range starting with parent_prefix"""
    return sum(1 for _, n, par in rs if n == name and any(p.startswith(parent_prefix) for p in par))


def count(rs, name):
    return sum(1 for _, n, _p in rs if n == name)


def test_resnet():
    plain = run(RESNET, "--json", env={k: v for k, v in os.environ.items()
                                       if k not in ("PP_NVTX", "NVTX_INJECTION64_PATH")})
    r, lines = record(RESNET, "resnet")
    check(r.returncode == 0, f"resnet with the collector: exit {r.returncode} {r.stderr[-400:]!r}")
    rs, problems = ranges(lines)
    check(len(rs) > 100 and not problems,
          f"resnet: {len(rs)} ranges, nesting per thread: {problems[:3]}")
    check(losses(r) == losses(plain) and losses(plain),
          f"resnet: the losses with ranges are those without: {losses(r)} {losses(plain)}")
    # the step's range on the calling thread, the optimizer inside it
    for step in (0, 1):
        tops = [t for t, n, par in rs if n == f"step {step}" and not par]
        check(len(tops) == 1, f"resnet: one outermost 'step {step}' range: {tops}")
    check(inside(rs, "optimizer", "step ") == 2, "resnet: the optimizer inside each step")
    # every task: F and B of 2 micro-batches on 2 stages, each step, each on one thread
    for s in (0, 1):
        for mb in (0, 1):
            for k in "FB":
                name = f"{k}{mb} stage{s}"
                threads = {t for t, n, _p in rs if n == name}
                check(count(rs, name) == 2 and len(threads) == 1,
                      f"resnet: {name} twice (2 steps) on one thread: {count(rs, name)}, "
                      f"{len(threads)} threads")
    stage_thread = {s: {t for t, n, _p in rs if n == f"F0 stage{s}"} for s in (0, 1)}
    check(stage_thread[0] != stage_thread[1], "resnet: the stages' tasks on their own threads")
    # units inside their stage's tasks: 2 steps x 2 micro-batches each
    for unit, s in (("conv1", 0), ("layer2.1", 0), ("layer3.0", 1), ("fc", 1)):
        check(inside(rs, f"{unit} forward", "F") == 4 and inside(rs, f"{unit} backward", "B") == 4,
              f"resnet: {unit}'s forward and backward inside F and B tasks, 4 each: "
              f"{inside(rs, unit + ' forward', 'F')}, {inside(rs, unit + ' backward', 'B')}")
        check(all(t in stage_thread[s] for t, n, _p in rs if n == f"{unit} forward"),
              f"resnet: {unit} forward on stage {s}'s thread")
    check(inside(rs, "loss", "F") == 4 and
          all(t in stage_thread[1] for t, n, _p in rs if n == "loss"),
          "resnet: the loss inside the last stage's forwards, once a micro-batch")
    check(any(n.startswith("copy act") for _, n, _p in rs),
          "resnet: the activations' copies between the stages have ranges")


def test_gpt2():
    ck = os.path.join(TMP, "ranges-gpt2.safetensors")
    r, lines = record(GPT2, "gpt2", args=("--json", "--save", ck))
    check(r.returncode == 0, f"gpt2 with the collector: exit {r.returncode} {r.stderr[-400:]!r}")
    rs, problems = ranges(lines, outside="evaluate")  # the training steps
    check(len(rs) > 50 and not problems, f"gpt2: {len(rs)} ranges, nesting: {problems[:3]}")
    # zbh1 splits the backward: I and W tasks, and the units' input and weight parts
    for s in (0, 1):
        for k in "FIW":
            check(count(rs, f"{k}1 stage{s}") == 2, f"gpt2: {k}1 stage{s} once a step")
    check(inside(rs, "lm_head backward input", "I") == 4 and
          inside(rs, "lm_head backward weight", "W") == 4,
          "gpt2: the head's input and weight parts inside I and W tasks")
    check(inside(rs, "h.1 forward", "F") == 4, "gpt2: h.1's forward inside F tasks")
    # stage 0 recomputes: its units' forwards run again inside its backward tasks
    check(inside(rs, "h.0 recompute", "I") == 4 and inside(rs, "wte recompute", "I") == 4,
          f"gpt2: stage 0's recomputation inside its I tasks: "
          f"{inside(rs, 'h.0 recompute', 'I')}, {inside(rs, 'wte recompute', 'I')}")
    check(inside(rs, "h.0 forward", "F") == 4, "gpt2: stage 0's forwards inside F tasks")
    # the test set after training: its own range, outermost on its thread, and
    # while it is open its forward tasks (no backward) and their losses
    ev = [par for _, n, par in ranges(lines)[0] if n == "evaluate"]
    inner = during(lines, "evaluate")
    check(ev == [()] and "F0 stage1" in inner and "h.1 forward" in inner and "loss" in inner and
          not any(n[0] in "BIW" and " stage" in n for n in inner),
          f"gpt2: one outermost 'evaluate' range, the test set's forwards and losses while it "
          f"is open: {ev} {sorted(set(inner))[:12]}")
    r, lines = record(GPT2, "generate", args=("--load", ck, "--generate", "A", "--tokens", "3",
                                             "--temperature", "0"), text=False)
    rs, problems = ranges(lines)
    inner = during(lines, "generate")
    check(r.returncode == 0 and not problems and count(rs, "generate") == 1 and
          inner.count("lm_head forward") == 3 and inner.count("h.0 forward") == 3,
          f"--generate: one 'generate' range, a forward of every unit a token while it is "
          f"open: {r.returncode} {count(rs, 'generate')} {inner.count('lm_head forward')} "
          f"{problems[:2]} {r.stderr[-300:]!r}")


def test_env():
    plain = run(RESNET, "--json", env={k: v for k, v in os.environ.items()
                                       if k not in ("PP_NVTX", "NVTX_INJECTION64_PATH")})
    r, lines = record(RESNET, "off", {"PP_NVTX": "off"})
    check(r.returncode == 0 and not lines and losses(r) == losses(plain),
          f"PP_NVTX=off: no range reaches the collector ({len(lines)} lines), same losses")
    r, lines = record(RESNET, "zero", {"PP_NVTX": "0"})
    check(r.returncode == 0 and not lines, f"PP_NVTX=0: none ({len(lines)} lines)")
    r, lines = record(RESNET, "on-alone", {"PP_NVTX": "on"}, collector=False)
    check(r.returncode == 0 and not lines and losses(r) == losses(plain),
          f"PP_NVTX=on without a collector: runs, same losses: {r.returncode} {r.stderr[-300:]!r}")
    r, lines = record(RESNET, "bad", {"PP_NVTX": "maybe"})
    check(r.returncode != 0 and "PP_NVTX=maybe" in r.stderr and "expected auto, on or off"
          in r.stderr, f"PP_NVTX=maybe refused by name: {r.returncode} {r.stderr[-300:]!r}")


run_tests("ranges", [test_resnet, test_gpt2, test_env])
