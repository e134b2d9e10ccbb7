"""lazyxla/distributed/liveness.py on a stand-in key-value store: a process that ends
normally is finished, not lost, for the others, and its beater is joined before the
interpreter finalizes; a process whose heartbeat stops is named lost; one that stops on a
loss it saw is not blamed by the others for the cascade."""
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


def pair(timeout: float = 1.0, count: int = 2) -> tuple:
    kv = KeyValueStore()
    verdicts: list = []
    dogs = [Watchdog(kv, p, count, "127.0.0.1:1", timeout) for p in range(count)]
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


def test_a_process_stopping_on_a_loss_is_not_blamed_for_it():
    """Process 2 dies; process 1 sees it first and stops (its heartbeat then stays still, as
    when it exits); process 0, slower to judge, names 2 alone."""
    kv, (zero, one, two), _ = pair(count=3)
    zero._fail = lambda what: None          # judged below, after the cascade
    zero._stop.set()
    time.sleep(0.5)
    two._halt.set()
    two._stop.set()
    one.error = "process 2 of 3 sent no heartbeat for 1 s"   # what one's _fail sets first
    assert one._announced.wait(5)
    assert kv.store["lazyxla/heartbeat/1"] == "stopping"
    one._halt.set()
    time.sleep(1.5)                            # beyond the timeout for both
    lost = sorted(p for p, (_, moved) in zero._seen.items()
                  if p not in zero._finished and zero._last_ok - moved > zero.timeout)
    assert lost == [2] and zero._finished == {1}
    zero._halt.set()
