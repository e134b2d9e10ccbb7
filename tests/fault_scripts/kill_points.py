"""Where the training scripts of tests/test_fault_kills.py kill themselves (SIGKILL: no
handler, no cleanup, as a lost machine), and their model and data.

--kill MODE:STEP, armed after training step STEP (1-based):
* between: right away, after the step and before its save (STEP is not a save step);
* write:   inside the save of STEP, after DCP wrote its first data file;
* commit:  inside the save of STEP, once the commit marker is on disk, before the rename.
"""
import argparse
import os
import signal

import torch


def arguments() -> argparse.Namespace:
    """The command line both training scripts take."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--interval", type=int, default=2)
    ap.add_argument("--kill", default="")
    ap.add_argument("--out", required=True)
    return ap.parse_args()


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def batch(step: int):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)


def train(model: torch.nn.Module, opt: torch.optim.Optimizer, dev, manager, start: int,
          args: argparse.Namespace, barrier=None) -> None:
    """Both scripts' loop: steps `start`..`args.steps` with a save after each (the manager
    keeps every `args.interval`-th), the kill armed before it, and the final parameters
    written to `args.out`. `barrier`: the script's own step barrier, if it writes one."""
    for step in range(start, args.steps):
        x, y = batch(step)
        loss = torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
        loss.backward()
        opt.step()
        opt.zero_grad()
        if barrier is not None:
            barrier()
        arm(args.kill, step + 1)
        manager.save(step + 1, {"model": model.state_dict(), "optim": opt.state_dict()})
    torch.save([p.detach().cpu() for p in model.parameters()], args.out)


def _die(*_args, **_kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


def arm(kill: str, step: int) -> None:
    if not kill:
        return
    mode, at = kill.split(":")
    if int(at) != step:
        return
    if mode == "between":
        _die()
    elif mode == "write":
        import torch.distributed.checkpoint.filesystem as fs
        original = fs._write_item

        def write_item(*args, **kwargs):
            result = original(*args, **kwargs)
            _die()
            return result
        fs._write_item = write_item
    elif mode == "commit":
        from lazyxla.spmd import commit
        rename = os.rename

        def rename_then_die(src, dst):
            if str(src).endswith(commit.TMP) and os.path.isfile(os.path.join(src, commit.MARKER)):
                _die()
            return rename(src, dst)
        commit.os.rename = rename_then_die
    else:
        raise ValueError(f"unknown kill mode {mode!r}")
