"""lr_check.py - pp_lr_at against torch.optim.lr_scheduler.

Usage: /usr/bin/python3 lr_check.py LR_VALUES

For each schedule, LR_VALUES (tests/torch/lr_values.c) prints our learning
rate per period and PyTorch's scheduler, stepped once per period, gives its
own; they must agree within 1e-12 relative (PyTorch computes recursively in
double, so the last bits may differ). Exit 77 without torch.
"""
import subprocess
import sys

try:
    import torch
except ImportError:
    print("lr_check: no torch: skipped", file=sys.stderr)
    sys.exit(77)


def torch_values(make, lr, periods):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched = make(opt)
    out = []
    for _ in range(periods):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def cosine(total, warmup, start, eta_min):
    def make(opt):
        cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=eta_min)
        if warmup == 0:
            return cos
        lin = torch.optim.lr_scheduler.LinearLR(opt, start_factor=start, end_factor=1.0,
                                                total_iters=warmup)
        return torch.optim.lr_scheduler.SequentialLR(opt, [lin, cos], milestones=[warmup])
    return make


CASES = [
    ("constant", 0.1, 12, ["constant", "0.1"],
     lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 1.0)),
    ("step 30,60,80 x0.1", 0.1, 90, ["step", "0.1", "0.1", "30", "60", "80"],
     lambda o: torch.optim.lr_scheduler.MultiStepLR(o, [30, 60, 80], gamma=0.1)),
    ("StepLR(3, 0.5) as milestones", 0.05, 12, ["step", "0.05", "0.5", "3", "6", "9"],
     lambda o: torch.optim.lr_scheduler.StepLR(o, 3, gamma=0.5)),
    ("cosine 10", 0.1, 10, ["cosine", "0.1", "10", "0", "1", "0"], cosine(10, 0, 1.0, 0.0)),
    ("cosine 20, eta_min 1e-3", 0.2, 24, ["cosine", "0.2", "20", "0", "1", "0.001"],
     cosine(20, 0, 1.0, 0.001)),
    ("cosine 10, warm-up 2 from 0.1", 0.1, 10, ["cosine", "0.1", "10", "2", "0.1", "0"],
     cosine(10, 2, 0.1, 0.0)),
    ("cosine 90, warm-up 5 from 1/3", 0.4, 90,
     ["cosine", "0.4", "90", "5", repr(1.0 / 3.0), "0"], cosine(90, 5, 1.0 / 3.0, 0.0)),
]


def main():
    exe = sys.argv[1]
    failed = 0
    for name, lr, periods, args, make in CASES:
        ours = [float(v) for v in subprocess.run([exe, str(periods)] + args, check=True,
                                                 capture_output=True, text=True).stdout.split()]
        ref = torch_values(make, lr, periods)
        worst = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(ours, ref))
        ok = len(ours) == len(ref) and worst <= 1e-12
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'}  {name:32s} {periods:3d} periods, worst relative "
              f"difference {worst:.1e} (last lr ours {ours[-1]:.6g}, torch {ref[-1]:.6g})")
    print("all checks passed" if not failed else f"{failed} schedules differ")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
