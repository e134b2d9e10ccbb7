"""A lost process is a clear error, soon.

Instead of JAX's coordination service aborting every process, lazyxla watches the
processes itself through the service's key-value store: a *beater* thread stores this
process's heartbeat counter every `interval` seconds (key `lazyxla/heartbeat/<process>`)
and reads the others'; a *judge* thread, which never blocks on the network, declares
process `p` lost when its counter has not moved for `timeout` seconds, or the coordinator
lost when this process's own key-value calls have failed for that long. On a loss the
judge prints the error to stderr, raises `ProcessLostError` in the main thread and, if the
process still runs `grace` seconds later, ends it with exit status `EXIT_STATUS`. Keep the
timeout well above the longest stretch of GIL-holding work (tens of seconds in production).

Design, measurements and limits: docs/reliability.md, "Dead hosts".
"""
from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading
import time
import traceback
from typing import Any, Optional

EXIT_STATUS = 75          # EX_TEMPFAIL: a restart may succeed
_KEY = "lazyxla/heartbeat/{}"
_DONE = "done"            # the heartbeat of a process that ended normally (Watchdog.stop)
_STOPPING = "stopping"    # the heartbeat of a process that stops on a loss it saw: the others' judges
                          # must blame the lost process, not the cascade (a peer that exits first)


def default_grace(timeout: float) -> float:
    """Seconds a process that raised `ProcessLostError` keeps running before it exits."""
    return min(10.0, float(timeout))


def backstop_seconds(timeout: float) -> int:
    """JAX's own heartbeat timeout, the backstop should the watchdog fail: well after the
    watchdog's latest exit (the timeout, the beats that announce the stop, the grace), so
    that a loaded machine never turns a named loss into JAX's abort (SIGABRT)."""
    return int(2 * (timeout + default_grace(timeout)) + 10)


class ProcessLostError(RuntimeError):
    """Another process of a multi-process run stopped (killed, crashed, or its host is
    unreachable); this process cannot go on. Restart all processes: they resume from the
    last committed checkpoint."""

    def __init__(self, message: Optional[str] = None) -> None:
        # raised in the main thread by class (PyThreadState_SetAsyncExc): the message is
        # the watchdog's
        super().__init__(message or (_THIS.watchdog.error if _THIS.watchdog is not None else None) or self.__doc__)


class Watchdog:
    """The beater and judge threads of one process (module docstring)."""

    def __init__(self, client: Any, process: int, count: int, coordinator: str, timeout: float,
                 grace: Optional[float] = None) -> None:
        self.client, self.process, self.count, self.coordinator = client, process, count, coordinator
        self.timeout = float(timeout)
        self.interval = max(0.05, min(1.0, self.timeout / 10))
        self.grace = default_grace(self.timeout) if grace is None else grace
        now = time.monotonic()
        self._seen = {p: (None, now) for p in range(count) if p != process}   # p -> (counter, when it moved)
        self._last_ok = now                       # the end of the last round of key-value calls that worked
        self._failing_since: Optional[float] = None   # the first failed round since then
        self._round_started: Optional[float] = None   # a round in progress (a call may hang)
        self._stop = threading.Event()       # no more judging
        self._halt = threading.Event()       # no more beating
        self._finished: set = set()          # processes whose heartbeat reads _DONE or _STOPPING
        self._announced = threading.Event()  # this process's _STOPPING is stored
        self.error: Optional[str] = None
        self.in_excepthook = False     # the main thread is ending on an uncaught error: leave it be
        self._main = threading.main_thread().ident
        self._threads = [threading.Thread(target=self._beat, name="lazyxla-heartbeat", daemon=True),
                         threading.Thread(target=self._judge, name="lazyxla-liveness", daemon=True)]

    def start(self) -> "Watchdog":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        """A normal exit (atexit, before JAX's shutdown barrier): stop judging, stop beating,
        and store `_DONE` as this process's heartbeat, which tells the others' judges that
        it finished rather than died while it waits for them at the barrier. The beater is
        joined here, while Python still runs: a daemon thread still inside a key-value call
        when the interpreter finalizes aborts the process when the call returns."""
        self._stop.set()
        self._halt.set()
        self._threads[0].join(timeout=self.timeout)
        try:
            self.client.key_value_set(_KEY.format(self.process), _DONE, allow_overwrite=True)
        except Exception:   # noqa: BLE001  (the coordinator is gone: the others' judges see that)
            pass

    def _beat(self) -> None:
        counter = 0
        while not self._halt.is_set():
            counter += 1
            self._round_started = time.monotonic()
            stopping = self.error is not None
            try:
                self.client.key_value_set(_KEY.format(self.process), _STOPPING if stopping else str(counter),
                                          allow_overwrite=True)
                if stopping:
                    self._announced.set()
                for p in self._seen:
                    try:
                        value = self.client.key_value_try_get(_KEY.format(p))
                    except Exception as e:   # not stored yet: NOT_FOUND
                        if "NOT_FOUND" not in str(e):
                            raise
                        continue
                    if value in (_DONE, _STOPPING):
                        self._finished.add(p)
                    elif value != self._seen[p][0]:
                        self._seen[p] = (value, time.monotonic())
                self._last_ok, self._failing_since = time.monotonic(), None
            except Exception:   # the coordinator is unreachable: the judge decides when it is lost
                if self._failing_since is None:
                    self._failing_since = time.monotonic()
            self._round_started = None
            self._halt.wait(self.interval)

    def _judge(self) -> None:
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            started, failing = self._round_started, self._failing_since
            if (failing is not None and now - failing > self.timeout) or \
                    (started is not None and now - started > self.timeout):
                self._fail(f"the coordinator (process 0 at {self.coordinator}) has not answered for "
                           f"{self.timeout:g} s")
                return
            # judged on what this process read: a beater of its own that could not run (a busy
            # machine) blames nobody
            lost = sorted(p for p, (_, moved) in self._seen.items()
                          if p not in self._finished and self._last_ok - moved > self.timeout)
            if lost:
                names = ", ".join(str(p) for p in lost)
                self._fail(f"process{'es' if len(lost) > 1 else ''} {names} of {self.count} sent no heartbeat "
                           f"for {self.timeout:g} s")
                return

    def _fail(self, what: str) -> None:
        self.error = (
            f"lazyxla: process {self.process} of {self.count} stops: {what} (killed, crashed, or its host "
            "is unreachable). A multi-process run cannot continue without it: restart all processes; "
            "a CheckpointManager resumes from the last committed checkpoint (latest_step()). The timeout "
            "is lx.distributed.initialize(heartbeat_timeout_seconds=...).")
        print(self.error, file=_stderr(), flush=True)
        # the beater stores _STOPPING on its next round; wait for it (bounded: the coordinator may
        # be what was lost) so that the main thread's exit cannot get there first
        self._announced.wait(2 * self.interval + 1)
        if self._main is not None and not self.in_excepthook:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._main), ctypes.py_object(ProcessLostError))
        time.sleep(self.grace)
        print(f"lazyxla: process {self.process} exits with status {EXIT_STATUS} (a lost process, above)",
              file=_stderr(), flush=True)
        os._exit(EXIT_STATUS)


class _ThisProcess:
    """This process's watchdog (once started) and the excepthook that was there before ours."""
    watchdog: Optional[Watchdog] = None
    previous_hook = sys.excepthook


_THIS = _ThisProcess()


def _stderr():
    """The process's real stderr: torch.distributed's excepthook points `sys.stderr` at a
    buffer while it runs the previous hook (ours), and this process may end inside it."""
    return sys.__stderr__ or sys.stderr
# what a collective says when its peer process went away (gloo over TCP)
_PEER_GONE = ("Connection reset by peer", "Connection closed by peer", "Connection refused", "Gloo")


def _excepthook(kind, value, tb) -> None:
    """An uncaught error that a lost peer explains (a collective failed: gloo reads a reset
    connection at once, before any heartbeat is missed): print it, wait for the judge's
    verdict and exit with it, instead of JAX's abort at its shutdown barrier."""
    watchdog = _THIS.watchdog
    lost = isinstance(value, ProcessLostError)
    if watchdog is None or not (lost or any(s in str(value) for s in _PEER_GONE)):
        return _THIS.previous_hook(kind, value, tb)
    watchdog.in_excepthook = True
    traceback.print_exception(kind, value, tb, file=_stderr())
    _stderr().flush()
    if lost:
        os._exit(EXIT_STATUS)    # JAX's shutdown barrier would wait for the lost process
    deadline = time.monotonic() + watchdog.timeout + 2 * watchdog.interval + 1
    while watchdog.error is None and time.monotonic() < deadline:
        time.sleep(watchdog.interval)
    if watchdog.error is None:
        print(f"lazyxla: process {watchdog.process}: a collective failed (above) but every process still "
              "sends heartbeats", file=_stderr(), flush=True)
    os._exit(EXIT_STATUS)   # the judge prints its verdict and exits first when it has one



def start(client: Any, process: int, count: int, coordinator: str, timeout: float) -> Watchdog:
    """Start this process's watchdog (once, from `lx.distributed.initialize`)."""
    watchdog = _THIS.watchdog = Watchdog(client, process, count, coordinator, timeout).start()
    atexit.register(watchdog.stop)
    _THIS.previous_hook, sys.excepthook = sys.excepthook, _excepthook
    return watchdog


def current() -> Optional[Watchdog]:
    return _THIS.watchdog
