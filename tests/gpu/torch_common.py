"""torch_common.py - what the PyTorch side of the GPU benchmarks shares.

- fp32_math() / ieee_fp32(): fp32 with or without TF32 for cuBLAS and cuDNN,
  through the settings this PyTorch has (fp32_precision "ieee" or "tf32" from
  2.9 on, allow_tf32 before), and a one-line description of the effective
  state.
- Timer: elapsed milliseconds of a region, with CUDA events on CUDA devices
  (several devices: the first waits for the others' work before its end
  event) and perf_counter on the CPU.
- parse_devices(): "auto" | "cpu" | "cuda:0[,cuda:1]" into two device names.
- compiled(), timed_steps(): a model through torch.compile, and a training
  step's warm-up (a compiled model compiles in its first) and its timed
  runs; precision_name(), time_training() and failed(): what torch_eager.py
  and torch_gpt2.py share around them (the precision's description, the
  training step timed with its peak memory, the failure's JSON line).

Only reads and sets per-process PyTorch flags; never touches the GPU's own
settings.
"""
import json
import statistics
import sys
import time


def fp32_math(torch, mode="ieee"):
    """How fp32 matmuls and convolutions compute: "ieee" turns TF32 off, "tf32"
    allows it; returns a description of the effective state."""
    tf32 = mode == "tf32"
    done = []
    if hasattr(torch.backends, "fp32_precision"):
        try:
            torch.backends.fp32_precision = mode
            torch.backends.cuda.matmul.fp32_precision = mode
            torch.backends.cudnn.fp32_precision = mode
            torch.backends.cudnn.conv.fp32_precision = mode
            done.append("fp32_precision: matmul %s, cudnn.conv %s" % (
                torch.backends.cuda.matmul.fp32_precision,
                torch.backends.cudnn.conv.fp32_precision))
        except (AttributeError, RuntimeError, ValueError) as e:
            done.append("fp32_precision failed (%s)" % e)
    if not done or "failed" in done[0]:
        try:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
            done.append("allow_tf32: matmul %s, cudnn %s" % (
                torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))
        except (AttributeError, RuntimeError, ValueError) as e:
            done.append("allow_tf32 failed (%s)" % e)
            return "TF32 UNKNOWN (" + "; ".join(done) + ")"
    return ("TF32 on (" if tf32 else "TF32 off (") + "; ".join(done) + ")"


def ieee_fp32(torch):
    """Turns TF32 off for matmul and convolution; returns a description."""
    return fp32_math(torch, "ieee")


def parse_devices(spec, torch):
    """Two device names for the tutorial's seq1 and seq2."""
    if spec == "auto":
        if not torch.cuda.is_available():
            return "cpu", "cpu"
        return ("cuda:0", "cuda:1") if torch.cuda.device_count() >= 2 else ("cuda:0", "cuda:0")
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if len(parts) == 1:
        return parts[0], parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    raise ValueError("--devices: expected one or two devices, got %r" % spec)


class Timer:
    """Times a region on the given devices: start(), then stop() -> ms."""

    def __init__(self, torch, devices):
        self.torch = torch
        self.cuda = [torch.device(d) for d in dict.fromkeys(devices)
                     if torch.device(d).type == "cuda"]

    def start(self):
        if self.cuda:
            self.a = self.torch.cuda.Event(enable_timing=True)
            self.a.record(self.torch.cuda.current_stream(self.cuda[0]))
        else:
            self.t0 = time.perf_counter()

    def stop(self):
        torch = self.torch
        if not self.cuda:
            return (time.perf_counter() - self.t0) * 1e3
        first = torch.cuda.current_stream(self.cuda[0])
        for d in self.cuda[1:]:
            e = torch.cuda.Event()
            e.record(torch.cuda.current_stream(d))
            first.wait_event(e)
        b = torch.cuda.Event(enable_timing=True)
        b.record(first)
        b.synchronize()
        return self.a.elapsed_time(b)


def median_min(values):
    return statistics.median(values), min(values)


class CompileFailed(Exception):
    """torch.compile is missing or failed, at once or in a warm-up step: args
    (what, why)."""


def compiled(torch, model):
    """model through torch.compile; CompileFailed where this PyTorch cannot."""
    if not hasattr(torch, "compile"):
        raise CompileFailed("torch.compile unavailable",
                            "torch %s has no torch.compile (2.0 or later)" % torch.__version__)
    try:
        return torch.compile(model)
    except Exception as e:  # noqa: BLE001 - any failure is reported, not raised
        raise CompileFailed("torch.compile failed", "%s: %s" % (type(e).__name__, e)) from e


def timed_steps(torch, step, device, steps, warmup, compiled):
    """Runs step() warmup times (at least 2 when compiled: the first compiles),
    then steps times, each timed alone (Timer). Returns (median ms, min ms,
    the first warm-up step's seconds when compiled, else None); a compiled
    model's failing warm-up step raises CompileFailed, others raise."""
    dev = torch.device(device)
    compile_s = None
    for i in range(max(warmup, 2) if compiled else warmup):
        t0 = time.perf_counter()
        try:
            step()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
        except Exception as e:  # noqa: BLE001
            if not compiled:
                raise
            raise CompileFailed("torch.compile failed in warm-up step %d" % (i + 1),
                               "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0]
                                           if str(e).strip() else "")) from e
        if i == 0 and compiled:
            compile_s = time.perf_counter() - t0
    timer = Timer(torch, [device])
    times = []
    for _ in range(steps):
        timer.start()
        step()
        times.append(timer.stop())
    med, mn = median_min(times)
    return med, mn, compile_s


def precision_name(torch, precision):
    """Sets fp32 math for precision ("fp32", "tf32", "bf16": autocast over
    IEEE fp32) and describes it."""
    name = fp32_math(torch, "tf32" if precision == "tf32" else "ieee")
    return "bf16 autocast; outside it " + name if precision == "bf16" else name


def time_training(torch, model, opt, loss, a):
    """Training steps of model (through torch.compile with a.compile): zero
    the gradients, loss(net) (under bf16 autocast with a.precision bf16),
    its backward and opt.step(), timed by timed_steps on a.device (a.steps
    after a.warmup). Returns (median ms, min ms, compile seconds or None,
    peak GiB on CUDA, else 0); CompileFailed when torch.compile fails."""
    net = compiled(torch, model) if a.compile else model
    dev = torch.device(a.device)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            value = loss(net)
        value.backward()
        opt.step()

    med, mn, compile_s = timed_steps(torch, step, a.device, a.steps, a.warmup, a.compile)
    peak = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else 0.0
    return med, mn, compile_s, peak


def failed(torch, script, fields, what, err):
    """Reports a failure (torch.compile): a JSON line of fields with "error",
    "torch" and the reason, the reason as the last stderr line; returns 3,
    the exit status."""
    msg = "%s: %s" % (what, err)
    print(json.dumps(dict({"error": msg}, **fields, torch=torch.__version__)))
    sys.stdout.flush()
    print(script + ": " + msg.replace("\n", " ")[:400], file=sys.stderr)
    return 3
