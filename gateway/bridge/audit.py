"""The audit log writer (F5, O4): fire-and-forget through a bounded queue drained by one task.

`submit` never waits and never raises. Each record gets an id (`AuditRecord.record_id`) when it is
queued, so the store can tell a record it has from a new one.

The task writes batches of up to `_BATCH` records, one store write each (one transaction on
SQLite, one hop to its thread; one round trip on PostgreSQL). A record taken within `LINGER`
seconds of the last write waits for more to join its batch until `LINGER` after that write, so a
busy Bridge writes once per `LINGER` rather than once per call; a record after a quiet spell is
written at once; a full batch, `flushed()` and `stop()` cut the wait short.

Without a spool (`bridge.auditSpool` unset), a full queue or a failing store drops the record and
counts it in `toolgate_audit_dropped_total` on the registry the service was given.

With a spool (spool.py), nothing is dropped while the spool has room:

- a batch the store refuses (or cannot be reached for) is kept in the spool, fsynced, and from
  then on every new record goes to the spool behind it, so order is kept;
- while the spool holds records, the writer replays it to the store, oldest segment first, with a
  growing pause between tries (`RETRY_FIRST` doubling up to `RETRY_MOST` seconds), and goes back
  to writing straight to the store once it is empty;
- a full in-memory queue moves what it holds, then the new record, into the spool at once;
- records the spool has no room for are dropped, counted (`spool_full`) and logged; records it
  cannot write (the disk full or failing before `maxBytes` is reached) likewise (`spool_unwritable`);
- a spool left by an earlier run is replayed when the writer starts.

Spool writes happen on the event loop thread (one fsync per batch, only while the store is
failing), which keeps every record's place in the order without locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import uuid
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.bridge.records import AuditRecord
from gateway.bridge.spool import AuditSpool
from gateway.bridge.store import BridgeStore
from gateway.metrics import metric

log = logging.getLogger("toolgate.bridge.audit")

_BATCH = 256

LINGER = 0.05
"""Seconds after a store write during which a new batch waits for more records (unless it fills
up, is flushed or the writer stops)."""

RETRY_FIRST = 0.2
"""Seconds before the first replay after a store failure; doubled after each failed replay."""

RETRY_MOST = 5.0
"""The longest pause between replays while the store stays unreachable."""


class AuditWriter:
    """Queue in front of `store.append_audit`; `start()` runs the drain task, `stop()` flushes it.
    With `spool`, records the store cannot take wait there (module docstring)."""

    def __init__(
        self, store: BridgeStore, *, queue_size: int, registry: CollectorRegistry, spool: AuditSpool | None = None,
        linger: float = LINGER,
    ) -> None:
        self._store = store
        self._linger = linger
        self._hurry = asyncio.Event()
        """Set when the batch being gathered should be written now (full, flushed, stopping)."""
        self._last_write = float("-inf")
        """When (the loop's clock) the last batch was taken for the store."""
        self._flushing = 0
        self._spool = spool
        self._queue: asyncio.Queue[AuditRecord] = asyncio.Queue(maxsize=queue_size)
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._ids = itertools.count(1)
        self._run_id = uuid.uuid4().hex[:16]
        self._retry = RETRY_FIRST
        self._next_try = 0.0
        self._spool_idle = asyncio.Event()
        self.dropped = metric(registry, Counter, "toolgate_audit_dropped", "Audit records dropped (queue full or store failing)", ["reason"])
        self.written = metric(registry, Counter, "toolgate_audit_written", "Audit records written to the store")
        self.spooled = metric(registry, Counter, "toolgate_audit_spooled", "Audit records kept in the spool for later")
        self.spool_bytes = metric(registry, Gauge, "toolgate_audit_spool_bytes", "Bytes of audit records waiting in the spool")

    def start(self) -> None:
        """Start draining the queue (and replaying a spool left by an earlier run) in a background task."""
        if self._task is None:
            self._stopped = False
            if self._spool is not None:
                self._spool.open()
                self._gauge()
            self._task = asyncio.create_task(self._drain(), name="toolgate-audit-writer")

    async def stop(self, timeout: float = 5.0) -> None:
        """Write what is queued (within `timeout`), then end the task. Never hangs on a stuck store:
        at the deadline what is still queued goes to the spool (kept for the next start) or, without
        one, is dropped and counted (`shutdown`)."""
        task, self._task = self._task, None
        self._stopped = True
        self._hurry.set()
        if task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        left: list[AuditRecord] = []
        while not self._queue.empty():
            left.append(self._queue.get_nowait())
            self._queue.task_done()
        if left:
            if self._spool is not None:
                self._keep(left)
            else:
                self.dropped.labels(reason="shutdown").inc(len(left))
                log.warning("audit writer stopped with %d record(s) unwritten; dropped", len(left))
        if self._spool is not None:
            self._spool.close()

    def submit(self, record: AuditRecord) -> None:
        """Queue a record without waiting. When the queue is full the spool takes it (after what the
        queue holds); without a spool, or when the writer has stopped, it is dropped and counted."""
        if self._stopped:
            self.dropped.labels(reason="stopped").inc()
            return
        if record.record_id is None:
            record = dataclasses.replace(record, record_id=f"{self._run_id}-{next(self._ids)}")
        try:
            self._queue.put_nowait(record)
            if self._queue.qsize() >= _BATCH:
                self._hurry.set()
        except asyncio.QueueFull:
            if self._spool is None:
                self.dropped.labels(reason="queue_full").inc()
                return
            queued = []
            while not self._queue.empty():
                queued.append(self._queue.get_nowait())
                self._queue.task_done()
            self._keep([*queued, record])
            self._hurry.set()  # the batch being gathered (older than these) is written now

    async def flushed(self) -> None:
        """Wait until every record submitted so far was written, spooled or dropped (for tests and
        shutdown); with a spool, also until the spool is empty (the store has every record). The
        batch being gathered meanwhile is written without waiting out `LINGER`."""
        self._flushing += 1
        self._hurry.set()
        try:
            await self._queue.join()
        finally:
            self._flushing -= 1
        if self._spool is not None:
            while self._spool.pending():
                self._spool_idle.clear()
                await self._spool_idle.wait()

    def _keep(self, records: Sequence[AuditRecord], *, first: bool = False) -> None:
        """Put `records` in the spool (before everything in it with `first`); count what did not fit."""
        assert self._spool is not None
        try:
            left = self._spool.prepend(records) if first else self._spool.append(records)
        except OSError as exc:  # the disk is full or failing: not the spool's own bound
            self.dropped.labels(reason="spool_unwritable").inc(len(records))
            log.error("audit spool %s cannot be written (%s): %d record(s) dropped", self._spool.folder, exc, len(records))
            self._gauge()
            return
        kept = len(records) - len(left)
        if kept:
            self.spooled.inc(kept)
        if left:
            self.dropped.labels(reason="spool_full").inc(len(left))
            log.error("audit spool %s is full (%d of %d bytes): %d record(s) dropped", self._spool.folder,
                      self._spool.bytes, self._spool.max_bytes, len(left))
        self._gauge()

    def _gauge(self) -> None:
        if self._spool is not None:
            self.spool_bytes.set(self._spool.bytes)

    async def _drain(self) -> None:
        while True:
            if self._spool is not None and self._spool.pending():
                await self._spooling()
                continue
            batch = [await self._queue.get()]
            if self._spilled():  # the queue overflowed into the spool before this record was taken: it goes behind
                self._keep(batch)
                self._queue.task_done()
                continue
            try:
                await self._gather()
                # what was queued after an overflow into the spool (meanwhile) is newer than the spool: left for it
                while len(batch) < _BATCH and not self._queue.empty() and not self._spilled():
                    batch.append(self._queue.get_nowait())
                await self._store.append_audit(batch)
            except asyncio.CancelledError:  # stopped while the batch was gathered or the store was still writing
                if self._spool is not None:
                    self._keep(batch, first=True)
                else:
                    self.dropped.labels(reason="shutdown").inc(len(batch))
                raise
            except Exception as exc:  # a broken store must never reach a call: keep or count, and go on
                if self._spool is not None:
                    # taken before anything spooled meanwhile (a full queue): it goes first
                    self._keep(batch, first=True)
                    self._failed(exc, len(batch))
                else:
                    self.dropped.labels(reason="store_error").inc(len(batch))
                    log.warning("audit store failed; %d record(s) dropped: %s", len(batch), type(exc).__name__)
            else:
                self.written.inc(len(batch))
            finally:
                for _ in batch:
                    self._queue.task_done()

    def _spilled(self) -> bool:
        return self._spool is not None and self._spool.pending()

    async def _gather(self) -> None:
        """Let more records join the batch: until `LINGER` seconds after the last store write, less
        when it fills up, is flushed, the writer stops or the queue overflows into the spool
        (`_hurry`). A record after a quiet spell (no write within `LINGER`) is written at once, so
        an idle Bridge's records are readable as soon as they were before batching."""
        self._hurry.clear()
        loop = asyncio.get_running_loop()
        wait = self._last_write + self._linger - loop.time()
        if wait > 0 and not (self._stopped or self._flushing or self._queue.qsize() >= _BATCH - 1):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._hurry.wait()
        self._last_write = loop.time()

    async def _spooling(self) -> None:
        """One step while the spool holds records: new records join it; when the pause is over, it
        is replayed; else wait for a record or the end of the pause."""
        assert self._spool is not None
        batch: list[AuditRecord] = []
        if self._queue.empty():
            if asyncio.get_running_loop().time() >= self._next_try:
                await self._replay()
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(self._next_try):
                    batch.append(await self._queue.get())
        while not self._queue.empty():
            batch.append(self._queue.get_nowait())
        if batch:
            try:
                self._keep(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()

    async def _replay(self) -> None:
        """Write the oldest segment to the store and remove it; on failure, pause longer."""
        assert self._spool is not None
        segment = self._spool.oldest()
        if segment is None:
            return
        try:
            for start in range(0, len(segment.records), _BATCH):
                await self._store.append_audit(segment.records[start:start + _BATCH])
        except Exception as exc:  # kept in the spool: tried again after the pause
            self._failed(exc, 0)
            return
        self._spool.remove(segment)
        self.written.inc(len(segment.records))
        self._retry = RETRY_FIRST
        self._next_try = 0.0
        self._gauge()
        if not self._spool.pending():
            log.info("audit spool %s replayed: every kept record is in the store", self._spool.folder)
            self._spool_idle.set()

    def _failed(self, exc: Exception, spooled: int) -> None:
        """The store failed: replay after a pause that grows while it keeps failing."""
        self._next_try = asyncio.get_running_loop().time() + self._retry
        if spooled:
            log.warning("audit store failed (%s); %d record(s) kept in the spool, replayed in %.1fs",
                        type(exc).__name__, spooled, self._retry)
        self._retry = min(self._retry * 2, RETRY_MOST)
