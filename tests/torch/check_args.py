"""check_args.py - the command line and work folder the GPT-2 cross-checks
share (gpt2_check.py, gpt2_bf16_check.py): PIPELINE_RUN [--keep DIR]
[--device-map MAP], PyTorch on at most two threads, and the folder the
check writes its files in (DIR kept, else a temporary one)."""

import os
import tempfile

import torch


class Args:
    """exe: pipeline-run's absolute path; work: the work folder;
    device_map: ["--device-map", MAP] or []; tmp: the temporary folder's
    handle (None with --keep), alive as long as this object."""

    def __init__(self, exe, work, device_map, tmp):
        self.exe, self.work, self.device_map, self.tmp = exe, work, device_map, tmp


def parse(argv, usage, prefix):
    """The arguments of argv (sys.argv), or None after printing usage (the
    caller's __doc__) when they are not PIPELINE_RUN and the options above;
    prefix names the temporary folder."""
    args = argv[2:]
    opts = dict(zip(args[::2], args[1::2]))
    if len(argv) < 2 or len(args) % 2 or any(k not in ("--keep", "--device-map")
                                             for k in opts):
        print(usage)
        return None
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    device_map = ["--device-map", opts["--device-map"]] if "--device-map" in opts else []
    tmp = None
    if "--keep" in opts:
        work = opts["--keep"]
        os.makedirs(work, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix=prefix)
        work = tmp.name
    return Args(os.path.abspath(argv[1]), work, device_map, tmp)
