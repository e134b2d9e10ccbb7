"""tests/helpers.py's answers to what differs when the suite runs on an accelerator: child
processes on the CPU, sockets tried rather than assumed, tolerances at the platform's
matmul precision (and nothing changed on CPU)."""
from __future__ import annotations

import os
import socket

import torch

import lazyxla as lx
import helpers


def test_child_env_puts_jax_on_the_cpu_and_this_checkout_first():
    env = helpers.child_env(XLA_FLAGS="--x")
    assert env["JAX_PLATFORMS"] == "cpu" and env["XLA_FLAGS"] == "--x"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == helpers.ROOT
    assert helpers.child_env(JAX_PLATFORMS="tpu")["JAX_PLATFORMS"] == "tpu"   # a caller may say otherwise


def test_sockets_are_tried(monkeypatch):

    def refuse(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(socket, "socket", refuse)
    reason = helpers.sockets_unavailable.__wrapped__()
    assert reason.startswith("this machine has no TCP sockets") and "jax.distributed, gloo" in reason


def test_matmul_tolerance_follows_the_platforms_precision(monkeypatch):
    expected = torch.tensor([[-50.0, 0.5], [2.0, 3.0]])
    monkeypatch.setattr(lx, "platform", lambda: "cpu")
    assert helpers.matmul_tolerance(expected, 1e-5, 1e-6) == {"rtol": 1e-5, "atol": 1e-6}   # CPU: float32
    monkeypatch.setattr(lx, "platform", lambda: "tpu")
    assert helpers.matmul_tolerance(expected, 1e-5, 1e-6) == {"rtol": 1.6e-2, "atol": 1.6e-2 * 50}
    assert helpers.matmul_tolerance(expected, 1e-5, 1e-6, level="high")["rtol"] == 1.6e-2
    assert helpers.matmul_tolerance(expected, 1e-5, 1e-6, level="highest") == {"rtol": 1e-5, "atol": 1e-6}


def test_platform_tolerance_widens_only_where_float32_math_is_inexact(monkeypatch):
    expected = torch.tensor([[-50.0, 0.5], [2.0, 3.0]])
    monkeypatch.setattr(lx, "platform", lambda: "cpu")
    assert helpers.platform_tolerance(expected, 1e-5, 1e-6) == {"rtol": 1e-5, "atol": 1e-6}
    monkeypatch.setattr(lx, "platform", lambda: "tpu")
    assert helpers.platform_tolerance(torch.tensor([1, 2]), 0, 0) == {"rtol": 0, "atol": 0}   # integers: exact
    assert helpers.platform_tolerance(expected, 1e-5, 1e-6) == {"rtol": 2e-4, "atol": 2e-4}   # "highest"
    previous = lx.set_matmul_precision("default")   # compat's starting level: one bf16 pass there
    try:
        assert helpers.platform_tolerance(expected, 1e-5, 1e-6) == {"rtol": 1.6e-2, "atol": 1.6e-2 * 50}
    finally:
        lx.set_matmul_precision(previous)
