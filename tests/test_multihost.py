"""Several "hosts" as network namespaces joined by a bridge (tests/multihost.py; root and
`ip netns` needed, else skipped): each process in its own namespace with its own address,
`lx.distributed.initialize` given the coordinator's address on that network.

* the SPMD data-parallel example trains across 2 and 4 hosts with one eager process's losses;
* a host killed mid-training, or cut off the network, stops every other one non-zero with
  the lost process named, within a deadline derived from the heartbeat timeout.
"""
from __future__ import annotations

import copy
import json
import os
import signal
import sys
import time

import pytest
import torch

from multihost import Hosts
from test_dead_hosts import DEADLINE, HEARTBEAT, check_lost, read, start, wait_all

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("count", [2, 4])
def test_spmd_example_trains_across_namespace_hosts_with_eager_losses(tmp_path, count):
    from lazyxla.examples import spmd_data_parallel as example
    steps, batch = 3, 16
    with Hosts(count, netns=True) as hosts:
        coordinator = f"{hosts.addresses[0]}:{hosts.port()}"
        procs = [hosts.popen(i, [sys.executable, "-m", "lazyxla.examples.spmd_data_parallel", "--coordinator",
                                 coordinator, "--processes", str(count), "--process-id", str(i), "--steps",
                                 str(steps), "--batch", str(batch), "--timeout", "120"], f"{tmp_path}/p{i}", 2)
                 for i in range(count)]
        ended = wait_all(procs, 300)
    w = example._workload(batch)
    eager = example._train(w, copy.deepcopy(w.model), steps)
    for i, (code, _) in enumerate(ended):
        assert code == 0, read(tmp_path, i, "err")[-3000:]
        line = next(ln for ln in read(tmp_path, i, "out").splitlines() if ln.startswith(example._TAG))
        report = json.loads(line[len(example._TAG):])
        assert (report["process"], report["of"], report["devices"]) == (i, count, 2 * count)
        assert report["global_read"] and report["minibatch"]
        torch.testing.assert_close(torch.tensor(report["losses"]), torch.tensor(eager), rtol=1e-4, atol=0)


def test_killed_host_of_four_stops_the_others(tmp_path):
    with Hosts(4, netns=True) as hosts:
        check_lost(hosts, tmp_path, tmp_path / "ckpt", 1, victim=2)


def test_host_cut_off_the_network_stops_everyone(tmp_path):
    with Hosts(2, netns=True) as hosts:
        procs = start(hosts, tmp_path, tmp_path / "ckpt", 2, "--steps", "100000", "--interval", "1000000")
        deadline = time.monotonic() + 180
        while "STEP 3 " not in read(tmp_path, 1, "out"):
            assert time.monotonic() < deadline and procs[1].poll() is None, read(tmp_path, 1, "err")[-3000:]
            time.sleep(0.1)
        hosts.cut(1)
        cut = time.monotonic()
        ended = wait_all(procs, 120)
    err0, err1 = read(tmp_path, 0, "err"), read(tmp_path, 1, "err")
    assert ended[0][0] == 75, err0[-3000:]
    assert f"process 1 of 2 sent no heartbeat for {HEARTBEAT} s" in err0
    # the host cut off loses the coordinator: lazyxla's watchdog or JAX's client stops it
    assert ended[1][0] not in (None, 0), err1[-3000:]
    assert "the coordinator (process 0" in err1 or "leader task" in err1 or "heartbeat" in err1, err1[-3000:]
    assert max(when for _, when in ended) - cut < DEADLINE
