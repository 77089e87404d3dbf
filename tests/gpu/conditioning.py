"""conditioning.py - how far PyTorch's own fp32 ResNet step is from float64.

Usage: python3 conditioning.py [--device cuda:0|cpu] [--threads N] [--check] [--quick]

The CUDA tests compare our CUDA step with our CPU step. How close two correct
fp32 implementations can be depends on the step's conditioning, which this
measures on PyTorch alone: for each setting (model, stem, batch, image size,
zero_init_residual) one training step's parameter gradients in float32 (on
the CPU and, with --device cuda:N, on the GPU with TF32 off) against the same
step in float64 on the CPU, per tensor max|g - g64| / max|g64|, the median
and the worst over tensors; and the yardstick the tests use instead of
float64 (tests/cuda/nudge.h): the float32 CPU step from weights each moved
one ulp, against the unmoved one.

Prints one line per setting; the last line names the median and worst of the
first setting (test_cuda_step's: ResNet-50, cifar stem, batch 4, 32x32) for
run-all.sh's table. --check (the test suite's torch_conditioning): the
yardstick must stand in for float64, its median and worst within a factor of
FACTOR of fp32's error against float64 in every setting (or both below
FLOOR), else exit 1. --quick: the settings of batch 4 at 32x32 only (the
CUDA step tests', both initialisations, and ResNet-18's), the test suite's;
the GPU run takes all five. Exit status 0, 1, or 77 without torch or
torchvision.
"""
import argparse
import sys

try:
    import torch
    import torchvision
except ImportError:
    print("conditioning: torch or torchvision missing: skipped")
    sys.exit(77)

FACTOR, FLOOR = 5.0, 1e-5

SETTINGS = [  # model, stem, batch, size, zero_init_residual
    ("resnet50", "cifar", 4, 32, False),
    ("resnet50", "cifar", 4, 32, True),
    ("resnet50", "cifar", 16, 32, False),
    ("resnet50", "imagenet", 8, 64, False),
    ("resnet18", "cifar", 4, 32, False),
]


def model(arch, stem, zero):
    torch.manual_seed(5)
    m = getattr(torchvision.models, arch)(num_classes=10, zero_init_residual=zero)
    if stem == "cifar":
        m.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        m.maxpool = torch.nn.Identity()
    return m.train()


def grads(setting, x, y, dtype, device="cpu", nudge=False):
    arch, stem, _, _, zero = setting
    m = model(arch, stem, zero).to(dtype).to(device)
    if nudge:
        gen = torch.Generator().manual_seed(9)
        with torch.no_grad():
            for p in m.parameters():
                up = torch.randint(0, 2, p.shape, generator=gen).to(device).bool()
                moved = torch.where(up, torch.nextafter(p, torch.full_like(p, float("inf"))),
                                    torch.nextafter(p, torch.full_like(p, float("-inf"))))
                p.copy_(torch.where(p == 0, p, moved))
    loss = torch.nn.functional.cross_entropy(m(x.to(dtype).to(device)), y.to(device))
    loss.backward()
    return {n: p.grad.detach().double().cpu() for n, p in m.named_parameters()}


def spread(a, ref):
    e = sorted(((a[n] - ref[n]).abs().max().item() / max(ref[n].abs().max().item(), 1e-30), n)
               for n in ref)
    return e[len(e) // 2][0], e[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda")
    if cuda:
        if not torch.cuda.is_available():
            print("conditioning: no CUDA device: skipped")
            return 77
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    first, bad, first_cuda = None, [], ""
    settings = [s for s in SETTINGS if not args.quick or (s[2], s[3]) == (4, 32)]
    for setting in settings:
        arch, stem, b, s, zero = setting
        torch.manual_seed(1)
        x = torch.randn(b, 3, s, s, dtype=torch.float64)
        y = torch.randint(0, 10, (b,))
        g64 = grads(setting, x, y, torch.float64)
        g32 = grads(setting, x, y, torch.float32)
        med, worst = spread(g32, g64)
        nmed, nworst = spread(grads(setting, x, y, torch.float32, nudge=True), g32)
        line = (f"{arch} {stem} batch {b} {s}x{s} zero_init_residual={zero}: fp32 cpu vs "
                f"float64 median {med:.1e} worst {worst[0]:.1e} ({worst[1]}); nudge median "
                f"{nmed:.1e} worst {nworst[0]:.1e}")
        if cuda:
            gc = grads(setting, x, y, torch.float32, args.device)
            cmed, cworst = spread(gc, g32)
            line += f"; fp32 {args.device} vs cpu median {cmed:.1e} worst {cworst[0]:.1e}"
            if not first_cuda:
                first_cuda = f"; {args.device} against cpu: median {cmed:.1e}, worst {cworst[0]:.1e}"
        print(line, flush=True)
        if first is None:
            first = (med, worst[0], nmed, nworst[0])
        for what, yard, ref in (("median", nmed, med), ("worst", nworst[0], worst[0])):
            if max(yard, ref) >= FLOOR and not (ref / FACTOR <= yard <= ref * FACTOR):
                bad.append(f"{arch} {stem} batch {b} zero_init_residual={zero}: nudge {what} "
                           f"{yard:.1e} against fp32's {ref:.1e}")
    print(f"PyTorch fp32 ResNet-50 step (cifar stem, batch 4, 32x32) against float64: median "
          f"{first[0]:.1e}, worst {first[1]:.1e} per tensor; one-ulp nudge: median "
          f"{first[2]:.1e}, worst {first[3]:.1e}{first_cuda}")
    if args.check:
        for line in bad:
            print("FAIL  the nudge does not stand in for float64: " + line)
        print(f"conditioning: {len(settings)} settings, {len(bad)} failed")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
