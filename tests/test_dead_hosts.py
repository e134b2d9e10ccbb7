"""A process killed mid-training (docs/reliability.md, "Dead hosts"): every other process
raises `ProcessLostError` naming it and exits with status 75 within the heartbeat timeout
set through `lx.distributed.initialize` (the deadline asserted is a generous multiple of
it); a restart of all processes resumes from the last committed checkpoint and ends with
an uninterrupted run's parameters. On 127.0.0.1 here; tests/test_multihost.py does the same
across network namespaces."""
from __future__ import annotations

import os
import signal
import sys
import time

import pytest
import torch

from multihost import HERE, Hosts

WORKER = os.path.join(HERE, "fault_scripts", "dp_worker.py")
HEARTBEAT = 10                      # seconds, lx.distributed.initialize(heartbeat_timeout_seconds=); a busy
                                    # 2-core machine must not starve a process for that long
DEADLINE = 3 * HEARTBEAT + 30       # the watchdog: timeout, then at most min(10 s, timeout) of grace


def start(hosts: Hosts, logs, ckpt, devices: int, *extra: str) -> list:
    port = hosts.port()
    coordinator = f"{hosts.addresses[0]}:{port}"
    return [hosts.popen(i, [sys.executable, WORKER, "--coordinator", coordinator, "--dist-port", str(port + 1),
                            "--processes", str(hosts.count), "--process-id", str(i), "--ckpt", str(ckpt),
                            "--heartbeat", str(HEARTBEAT), *extra], f"{logs}/p{i}", devices)
            for i in range(hosts.count)]


def wait_all(procs: list, timeout: float) -> list:
    """(return code, monotonic time it ended) of each process; kills those still running
    after `timeout` (their code is then None)."""
    ended: list = [None] * len(procs)
    deadline = time.monotonic() + timeout
    while any(e is None for e in ended) and time.monotonic() < deadline:
        for i, p in enumerate(procs):
            if ended[i] is None and p.poll() is not None:
                ended[i] = (p.returncode, time.monotonic())
        time.sleep(0.05)
    for i, p in enumerate(procs):
        if ended[i] is None:
            p.kill()
            p.wait()
            ended[i] = (None, time.monotonic())
    return ended


def read(logs, i: int, kind: str) -> str:
    with open(f"{logs}/p{i}.{kind}") as f:
        return f.read()


def check_lost(hosts: Hosts, logs, ckpt, devices: int, victim: int) -> float:
    """Kill `victim` after step 3 of a long run; every other process must end non-zero with
    the lost process named. Returns the slowest one's seconds after the victim died."""
    procs = start(hosts, logs, ckpt, devices, "--steps", "100000", "--interval", "1000000",
                  "--die", f"{victim}:3")
    ended = wait_all(procs, 240)
    code, died = ended[victim]
    assert code == -signal.SIGKILL, read(logs, victim, "err")[-3000:]
    slowest = 0.0
    for i, (code, when) in enumerate(ended):
        if i == victim:
            continue
        err = read(logs, i, "err")
        assert code is not None and code != 0, f"process {i} did not stop:\n{err[-3000:]}"
        if victim != 0:
            # the coordinator survives: lazyxla's watchdog names the process
            assert code == 75, err[-3000:]
            assert f"process {victim} of {hosts.count} sent no heartbeat for {HEARTBEAT} s" in err, err[-3000:]
        else:
            # the coordinator died: JAX's client aborts at once (SIGABRT), or lazyxla's
            # watchdog is first
            assert ("leader task was preempted/died" in err
                    or f"the coordinator (process 0 at {hosts.addresses[0]}" in err), err[-3000:]
        slowest = max(slowest, when - died)
    assert slowest < DEADLINE
    return slowest


@pytest.mark.slow
@pytest.mark.parametrize("victim", [1, 0], ids=["worker", "coordinator"])
def test_lost_process_is_named_and_the_others_exit(tmp_path, victim):
    with Hosts(2, netns=False) as hosts:
        check_lost(hosts, tmp_path, tmp_path / "ckpt", 2, victim)


def run_to_end(hosts: Hosts, logs, ckpt, devices: int, *extra: str) -> list:
    procs = start(hosts, logs, ckpt, devices, "--steps", "8", "--interval", "2", *extra)
    ended = wait_all(procs, 240)
    return [(code, read(logs, i, "out"), read(logs, i, "err")) for i, (code, _) in enumerate(ended)]


@pytest.mark.slow
def test_restart_of_all_processes_resumes_from_the_last_commit(tmp_path):
    with Hosts(2, netns=False) as hosts:
        for name in ("ref", "killed", "resumed"):
            (tmp_path / name).mkdir()
        reference = run_to_end(hosts, tmp_path / "ref", tmp_path / "ref" / "ckpt", 2,
                               "--out", str(tmp_path / "ref.pt"))
        assert all(code == 0 for code, _, _ in reference), reference[0][2][-3000:]
        killed = run_to_end(hosts, tmp_path / "killed", tmp_path / "ckpt", 2, "--die", "1:5")
        assert [code for code, _, _ in killed] == [75, -signal.SIGKILL], killed[0][2][-3000:]
        resumed = run_to_end(hosts, tmp_path / "resumed", tmp_path / "ckpt", 2, "--out", str(tmp_path / "out.pt"))
        assert all(code == 0 for code, _, _ in resumed), resumed[0][2][-3000:]
        assert all("START 4 [2, 4]" in out for _, out, _ in resumed)
    for got, want in zip(torch.load(tmp_path / "out.pt"), torch.load(tmp_path / "ref.pt")):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=0)


@pytest.mark.slow
def test_sigterm_to_one_process_saves_all_at_one_step(tmp_path):
    """JAX's preemption sync: the notice one process gets reaches all, which save the same
    step (the one after the largest any had reached) and stop; a restart resumes there."""
    with Hosts(2, netns=False) as hosts:
        (tmp_path / "a").mkdir()
        procs = start(hosts, tmp_path / "a", tmp_path / "ckpt", 2, "--steps", "100000", "--interval", "1000000",
                      "--preempt", "1:3")
        ended = wait_all(procs, 240)
        outs = [read(tmp_path / "a", i, "out") for i in range(2)]
        assert [code for code, _ in ended] == [0, 0], read(tmp_path / "a", 0, "err")[-3000:]
        stops = [next(ln for ln in out.splitlines() if ln.startswith("PREEMPTED ")) for out in outs]
        assert stops[0] == stops[1]
        step = int(stops[0].split()[1])
        assert step > 3 and stops[0] == f"PREEMPTED {step} [{step}]"
        (tmp_path / "b").mkdir()
        resumed = start(hosts, tmp_path / "b", tmp_path / "ckpt", 2, "--steps", str(step + 2))
        assert [code for code, _ in wait_all(resumed, 240)] == [0, 0]
        assert f"START {step} [{step}]" in read(tmp_path / "b", 0, "out")
