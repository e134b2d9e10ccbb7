"""The background half of the device loader: fetch batches, upload them, keep order.

One fetch thread reads the host loader into a bounded host queue; `transfer_threads`
threads take batches from it and upload them. Batch i is uploaded only while fewer
than `prefetch` batches after the one the consumer last took are on the device or on
their way, so at most `prefetch` batches wait on the device; results are handed out in
the loader's order whatever thread finished first. An exception, in the host loader
or in an upload, takes the place of its batch: the consumer receives every batch
before it, then the exception, then the end.

Shut-down: `close()` (the consumer broke out, the iterator was collected, the
interpreter exits) wakes every thread; each ends at its next wait, after the batch it
is uploading, if any. A fetch thread blocked inside the host loader's `next()` ends
when that call returns (it is a daemon thread, so it never holds up exit). The threads
hold this object, never the consumer's iterator, so dropping the iterator collects it.
"""
from __future__ import annotations

import collections
import threading
import weakref
from typing import Any, Callable, Iterator, Optional

_OK, _ERROR = "ok", "error"

# pipelines not closed yet, closed at exit before the runtime's own exit handler
_open: "weakref.WeakSet[Pipeline]" = weakref.WeakSet()


class Pipeline:
    def __init__(self, batches: Iterator, upload: Callable[[Any], Any], *, prefetch: int,
                 host_prefetch: int, transfer_threads: int, name: str = "lazyxla-loader") -> None:
        self._cond = threading.Condition()
        self._host: collections.deque = collections.deque()   # (index, host batch)
        self._results: dict[int, tuple[str, Any]] = {}
        self._host_cap = host_prefetch
        self._prefetch = prefetch
        self._next = 0                    # index of the batch the consumer takes next
        self._end: Optional[int] = None   # number of batches, once the host loader ended
        self._closed = False
        self._upload = upload
        self._threads = [threading.Thread(target=self._fetch, args=(batches,), name=f"{name}-fetch", daemon=True)]
        self._threads += [threading.Thread(target=self._transfer, name=f"{name}-transfer-{i}", daemon=True)
                          for i in range(transfer_threads)]
        _open.add(self)
        for t in self._threads:
            t.start()

    # -- threads ----------------------------------------------------------------------

    def _fetch(self, batches: Iterator) -> None:
        index = 0
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._closed or len(self._host) < self._host_cap)
                    if self._closed:
                        return
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                except BaseException as e:   # noqa: BLE001  (handed to the consumer in order)
                    with self._cond:
                        self._results[index] = (_ERROR, e)
                        index += 1
                    return
                with self._cond:
                    self._host.append((index, batch))
                    index += 1
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._end = index
                self._cond.notify_all()

    def _ready_to_upload(self) -> bool:
        return bool(self._host) and self._host[0][0] < self._next + self._prefetch

    def _transfer(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._ready_to_upload()
                                    or (not self._host and self._end is not None))
                if self._closed or not self._host:
                    return
                index, batch = self._host.popleft()
                self._cond.notify_all()
            try:
                result = (_OK, self._upload(batch))
            except BaseException as e:   # noqa: BLE001  (handed to the consumer in order)
                result = (_ERROR, e)
            del batch
            with self._cond:
                if self._closed:
                    return
                self._results[index] = result
                self._cond.notify_all()

    # -- consumer ---------------------------------------------------------------------

    def _available(self) -> bool:
        if self._next in self._results:
            return True
        # the end: every batch before it was handed out
        return self._end is not None and self._next >= self._end

    def next(self) -> Any:
        """The next device batch in order; StopIteration at the end; a batch's exception."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._available())
            if self._closed or self._next not in self._results:
                raise StopIteration
            kind, value = self._results.pop(self._next)
            self._next += 1
            self._cond.notify_all()
        if kind is _ERROR:
            self.close()
            raise value
        return value

    def close(self, timeout: Optional[float] = 10.0) -> None:
        """Stop every thread; with a timeout, wait that long for them to end."""
        with self._cond:
            self._closed = True
            self._results.clear()
            self._host.clear()
            self._cond.notify_all()
        _open.discard(self)
        if timeout is None:
            return
        me = threading.current_thread()
        for t in self._threads:
            if t is not me:
                t.join(timeout)


def close_all(timeout: float = 10.0) -> None:
    """Close every open pipeline (registered to run at interpreter exit)."""
    for p in list(_open):
        p.close(timeout)
