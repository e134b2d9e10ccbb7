"""Processes on "hosts" for the multi-process tests: all on 127.0.0.1, or each in its own
network namespace joined to the others by a bridge (`ip netns`, root only), with an
address 10.77.<net>.<i+1> of its own. Everything created is removed on exit.

    with Hosts(4, netns=True) as hosts:        # skips the test when namespaces are unavailable
        procs = [hosts.popen(i, [sys.executable, ...]) for i in range(4)]
"""
from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
from typing import Optional

import pytest

from helpers import child_env, sockets_unavailable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


_SERIAL = itertools.count()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def netns_unavailable() -> Optional[str]:
    """Why network namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed"
    name = f"lxprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


class Hosts:
    def __init__(self, count: int, netns: bool) -> None:
        self.count, self.netns = count, netns
        tag = f"{os.getpid() % 10000}{next(_SERIAL) % 100}"   # unique on this machine while it runs
        self._net = 1 + int(tag) % 250
        self._bridge = f"lxb{tag}"
        self._names = [f"lxh{tag}-{i}" for i in range(count)]
        self._made: list = []
        self.addresses = ([f"10.77.{self._net}.{i + 1}" for i in range(count)] if netns
                          else ["127.0.0.1"] * count)

    def __enter__(self) -> "Hosts":
        reason = sockets_unavailable()
        if reason:
            pytest.skip(reason)
        if not self.netns:
            return self
        reason = netns_unavailable()
        if reason:
            pytest.skip(reason)
        try:
            _ip("link", "add", self._bridge, "type", "bridge")
            self._made.append(("link", "del", self._bridge))
            _ip("link", "set", self._bridge, "up")
            for i, ns in enumerate(self._names):
                veth = f"{self._bridge}v{i}"
                _ip("netns", "add", ns)
                self._made.append(("netns", "del", ns))
                _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
                self._made.append(("link", "del", veth))   # not always removed with the namespace
                _ip("link", "set", veth, "master", self._bridge)
                _ip("link", "set", veth, "up")
                _ip("-n", ns, "addr", "add", f"{self.addresses[i]}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        while self._made:     # veths and namespaces first, the bridge last
            subprocess.run(["ip", *self._made.pop()], capture_output=True)

    def cut(self, i: int) -> None:
        """Take host `i` off the network (its link to the bridge down): a lost host that
        sends nothing, not even a connection reset."""
        _ip("link", "set", f"{self._bridge}v{i}", "down")

    def port(self) -> int:
        """A port for the coordinator: any port is free in a fresh namespace."""
        return 29400 + os.getpid() % 500 if self.netns else free_port()

    def popen(self, i: int, argv: list, log: str, devices: int = 1, **env) -> subprocess.Popen:
        """Start `argv` on host `i`, on `devices` forced CPU devices, importing this lazyxla;
        its output goes to `log`.out and `log`.err."""
        environ = child_env(XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", PYTHONWARNINGS="ignore",
                            PYTHONPATH=os.pathsep.join([os.path.join(HERE, "fault_scripts"), child_env()["PYTHONPATH"]]),
                            **env)
        prefix = ["ip", "netns", "exec", self._names[i]] if self.netns else []
        if self.netns:   # torch.distributed's gloo (DCP) would advertise 127.0.0.1, the host name's address
            environ["GLOO_SOCKET_IFNAME"] = "eth0"
        with open(f"{log}.out", "w") as out, open(f"{log}.err", "w") as err:
            return subprocess.Popen(prefix + argv, env=environ, cwd=ROOT, stdout=out, stderr=err)
