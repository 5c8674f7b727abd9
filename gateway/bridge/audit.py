"""The audit log writer (F5): fire-and-forget through a bounded queue drained by one task.

`submit` never waits and never raises: a full queue or a failing store drops the record and
counts it in `toolgate_audit_dropped_total` on the registry the service was given.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import CollectorRegistry, Counter

from gateway.bridge.records import AuditRecord
from gateway.bridge.store import BridgeStore
from gateway.metrics import metric

log = logging.getLogger("toolgate.bridge.audit")

_BATCH = 256


class AuditWriter:
    """Queue in front of `store.append_audit`; `start()` runs the drain task, `stop()` flushes it."""

    def __init__(self, store: BridgeStore, *, queue_size: int, registry: CollectorRegistry) -> None:
        self._store = store
        self._queue: asyncio.Queue[AuditRecord] = asyncio.Queue(maxsize=queue_size)
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self.dropped = metric(registry, Counter, "toolgate_audit_dropped", "Audit records dropped (queue full or store failing)", ["reason"])
        self.written = metric(registry, Counter, "toolgate_audit_written", "Audit records written to the store")

    def start(self) -> None:
        """Start draining the queue in a background task."""
        if self._task is None:
            self._stopped = False
            self._task = asyncio.create_task(self._drain(), name="toolgate-audit-writer")

    async def stop(self, timeout: float = 5.0) -> None:
        """Write what is queued (within `timeout`), then end the task. Never hangs on a stuck store:
        what is still queued or being written at the deadline is dropped and counted (`shutdown`)."""
        task, self._task = self._task, None
        self._stopped = True
        if task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        left = 0
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()
            left += 1
        if left:
            self.dropped.labels(reason="shutdown").inc(left)
            log.warning("audit writer stopped with %d record(s) unwritten; dropped", left)

    def submit(self, record: AuditRecord) -> None:
        """Queue a record without waiting; when the queue is full (or the writer has stopped) the
        record is dropped and counted."""
        if self._stopped:
            self.dropped.labels(reason="stopped").inc()
            return
        try:
            self._queue.put_nowait(record)
        except asyncio.QueueFull:
            self.dropped.labels(reason="queue_full").inc()

    async def flushed(self) -> None:
        """Wait until every record submitted so far was written or dropped (for tests and shutdown)."""
        await self._queue.join()

    async def _drain(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < _BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._store.append_audit(batch)
            except asyncio.CancelledError:  # stopped while the store was still writing
                self.dropped.labels(reason="shutdown").inc(len(batch))
                raise
            except Exception as exc:  # a broken store must never reach a call: count and go on
                self.dropped.labels(reason="store_error").inc(len(batch))
                log.warning("audit store failed; %d record(s) dropped: %s", len(batch), type(exc).__name__)
            else:
                self.written.inc(len(batch))
            finally:
                for _ in batch:
                    self._queue.task_done()
