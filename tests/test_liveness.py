"""lazyxla/distributed/liveness.py on a stand-in key-value store: a process that ends
normally is finished, not lost, for the others, and its beater is joined before the
interpreter finalizes; a process whose heartbeat stops is named lost."""
from __future__ import annotations

import time

from lazyxla.distributed.liveness import Watchdog


class KeyValueStore:
    """The two calls of JAX's distributed client the watchdog makes."""

    def __init__(self) -> None:
        self.store: dict = {}

    def key_value_set(self, key: str, value: str, allow_overwrite: bool = False) -> None:
        self.store[key] = value

    def key_value_try_get(self, key: str) -> str:
        if key not in self.store:
            raise RuntimeError(f"NOT_FOUND: {key}")
        return self.store[key]


def pair(timeout: float = 1.0) -> tuple:
    kv = KeyValueStore()
    verdicts: list = []
    dogs = [Watchdog(kv, p, 2, "127.0.0.1:1", timeout) for p in range(2)]
    for dog in dogs:
        dog._fail = verdicts.append   # the real one exits the process
        dog.start()
    return kv, dogs, verdicts


def test_a_finished_process_is_not_taken_for_lost():
    kv, (first, second), verdicts = pair()
    time.sleep(0.5)
    first.stop()
    assert not first._threads[0].is_alive()   # the beater is joined, not left in a call
    assert kv.store["lazyxla/heartbeat/0"] == "done"
    time.sleep(2.5)   # beyond the timeout: the second would have named the first by now
    assert verdicts == [] and second._finished == {0}
    second.stop()


def test_a_process_whose_heartbeat_stops_is_named():
    kv, (first, second), verdicts = pair()
    time.sleep(0.5)
    first._halt.set()   # beats no more, and never says done: as if killed
    first._stop.set()
    deadline = time.monotonic() + 30
    while not verdicts and time.monotonic() < deadline:
        time.sleep(0.05)
    assert verdicts == ["process 0 of 2 sent no heartbeat for 1 s"]
    second.stop()
