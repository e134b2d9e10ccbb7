"""An optax optimizer updating a torch model's parameters in place, inside one step graph.

Run it: `python -m lazyxla.examples.optax_step`. The forward and backward are torch;
the update is optax's Adam, called with `lx.call_jax` on the parameters, their
gradients and the optimizer state (a pytree of lazy tensors). `p.copy_(new)` writes
the result into each parameter, so the whole step (forward, backward, Adam) is one
compiled graph and the parameters' buffers are donated in place at `lx.sync()`.
"""
from __future__ import annotations

import optax
import torch

import lazyxla as lx

TX = optax.adam(1e-2)


def adam_step(params, grads, state):
    """One optax update: (new parameters, new optimizer state)."""
    updates, state = TX.update(grads, state, params)
    return optax.apply_updates(params, updates), state


def train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int) -> list[float]:
    params = list(model.parameters())
    state = lx.call_jax(TX.init, [p.detach() for p in params])
    lx.sync()   # the state starts as device data: every step then has one and the same graph
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        with torch.no_grad():
            new, state = lx.call_jax(adam_step, params, [p.grad for p in params], state)
            for p, n in zip(params, new):
                p.copy_(n)
                p.grad = None
        lx.sync()
        losses.append(loss.item())
    return losses


def main() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).to(lx.device())
    x, y = torch.randn(64, 16).to(lx.device()), torch.randn(64, 1).to(lx.device())
    print("losses:", train(model, x, y, 5))
    print("compiles:", lx.metrics.counter_value("UncachedCompile"))


if __name__ == "__main__":
    main()
