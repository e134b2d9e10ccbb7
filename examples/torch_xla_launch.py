"""A PyTorch/XLA multiprocess script: `torch_xla.launch` runs `_fn` once per device.

    CPU_NUM_DEVICES=2 python -m lazyxla.compat examples/torch_xla_launch.py

Under lazyxla each call is a process of its own with one host device (xmp.spawn); they
exchange their results with `xm.rendezvous` and check the ordinals."""
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def _fn(index: int, scale: float) -> None:
    t = torch.full((2,), float(index) * scale, device=torch_xla.device())
    got = xm.rendezvous("values", str(t.cpu().tolist()).encode())
    assert (xr.world_size(), xm.get_ordinal(), xm.get_local_ordinal()) == (len(got), index, index)
    assert [g.decode() for g in got] == [str([i * scale] * 2) for i in range(len(got))]
    xm.master_print(f"{len(got)} processes exchanged {[g.decode() for g in got]}")


if __name__ == "__main__":
    torch_xla.launch(_fn, args=(3.0,))
