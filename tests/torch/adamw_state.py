"""adamw_state.py - torch.optim.AdamW's per-parameter state under our
checkpoint names (docs/CHECKPOINTS.md): optimizer.exp_avg.NAME,
optimizer.exp_avg_sq.NAME (the moments) and optimizer.step.NAME (the step
count). Shared by recipe_check.py and gpt2_check.py."""

import numpy as np
import torch

PREFIXES = ("optimizer.exp_avg.", "optimizer.exp_avg_sq.", "optimizer.step.")


def load(opt, names, state, dtype):
    """Gives opt (an AdamW over the parameters of names, {parameter: name})
    the state of every parameter that state holds, in dtype, the moments on
    their parameter's device (the step counts stay on the CPU, as AdamW keeps
    them)."""
    for p, n in names.items():
        if PREFIXES[0] + n in state:
            moment = lambda k: torch.from_numpy(state[k + n].copy()).to(  # noqa: E731
                device=p.device, dtype=dtype)
            opt.state[p] = {"step": torch.tensor(float(state[PREFIXES[2] + n])),
                            "exp_avg": moment(PREFIXES[0]), "exp_avg_sq": moment(PREFIXES[1])}


def save(out, opt, names):
    """Adds opt's state to out under our names: the moments in float64, the
    step counts as int64 scalars."""
    for p, n in names.items():
        s = opt.state[p]
        out[PREFIXES[0] + n] = s["exp_avg"].cpu().contiguous().numpy().astype(np.float64)
        out[PREFIXES[1] + n] = s["exp_avg_sq"].cpu().contiguous().numpy().astype(np.float64)
        out[PREFIXES[2] + n] = np.array(int(s["step"]), dtype=np.int64)
