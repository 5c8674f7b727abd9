"""The audit writer's batches (issue 35: fewer store writes per call): records gathered for up to
`LINGER` into one store write, in order, with nothing lost when a batch fails — on both stores."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gateway.bridge.audit import _BATCH, AuditWriter
from gateway.bridge.records import AuditQuery, AuditRecord
from gateway.bridge.spool import AuditSpool
from gateway.bridge.store import BridgeStore
from tests.support.stores import KINDS, opened_store

LONG = 30.0
"""A linger no test waits out: a batch is written when it fills up, is flushed or the writer stops."""


def record(n: int) -> AuditRecord:
    return AuditRecord(float(n), "mcp.tool_call", "alice", None, "tools__echo", "federation", False, {"id": n},
                       "success", 1.0)


class Batches:
    """The real store in front of which the writer writes; notes each batch it is given and fails
    the ones whose number (from 0) is in `failing`, before writing them."""

    def __init__(self, store: BridgeStore, failing: Sequence[int] = ()) -> None:
        self.store = store
        self.sizes: list[int] = []
        self.failing = set(failing)
        self.written = asyncio.Event()

    async def append_audit(self, records: Sequence[AuditRecord]) -> None:
        number = len(self.sizes)
        self.sizes.append(len(records))
        if number in self.failing:
            raise ConnectionResetError("store down")
        await self.store.append_audit(records)
        self.written.set()


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BridgeStore]:
    async with opened_store(request.param, tmp_path) as db:
        yield db


async def stored(store: BridgeStore) -> list[int]:
    rows = await store.query_audit(AuditQuery(actor_id=None, limit=100_000))
    return [r.args["id"] for r in reversed(rows)]  # oldest first, by seq


def writer_over(batches: Batches, registry: CollectorRegistry, *, linger: float = LONG, spool: AuditSpool | None = None,
                queue_size: int = 10_000) -> AuditWriter:
    return AuditWriter(batches, queue_size=queue_size, registry=registry, spool=spool, linger=linger)  # type: ignore[arg-type]


async def burst(writer: AuditWriter, total: int) -> None:
    """Start `writer`, submit records 0 … `total` - 1 at once, and stop it once every one was
    written, spooled or dropped."""
    writer.start()
    for n in range(total):
        writer.submit(record(n))
    await asyncio.wait_for(writer.flushed(), timeout=30)
    await writer.stop()


async def test_records_arriving_one_by_one_are_written_as_one_batch_in_order(store: BridgeStore) -> None:
    # R: F5 -- one store write for many calls, each record once, in the order submitted; the first,
    # after a quiet spell, is written at once
    batches = Batches(store)
    writer = writer_over(batches, CollectorRegistry())
    writer.start()
    for n in range(40):
        writer.submit(record(n))
        await asyncio.sleep(0)  # the writer runs between calls, as it does between requests
    await asyncio.wait_for(writer.flushed(), timeout=10)
    await writer.stop()
    assert batches.sizes == [1, 39]
    assert await stored(store) == list(range(40))


async def test_a_record_after_a_quiet_spell_is_written_at_once_without_a_flush(store: BridgeStore) -> None:
    # R: F5 -- an idle Bridge's record is readable as soon as before batching (a console user who
    # made a connection and opens the audit log finds it); only a record close behind a write waits
    batches = Batches(store)
    writer = writer_over(batches, CollectorRegistry())
    writer.start()
    writer.submit(record(1))
    await asyncio.wait_for(batches.written.wait(), timeout=10)  # LONG linger: not waited out
    assert batches.sizes == [1] and await stored(store) == [1]
    writer.submit(record(2))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert batches.sizes == [1]  # within the linger of the last write: it waits for company
    await asyncio.wait_for(writer.flushed(), timeout=10)
    await writer.stop()
    assert batches.sizes == [1, 1] and await stored(store) == [1, 2]


async def test_a_burst_is_written_in_full_batches_without_waiting_out_the_linger(store: BridgeStore) -> None:
    # R: F5
    batches = Batches(store)
    registry = CollectorRegistry()
    writer = writer_over(batches, registry)
    total = 2 * _BATCH + 88
    # full batches go at once; only the last (not full) one waits for the flush
    await burst(writer, total)
    assert batches.sizes == [_BATCH, _BATCH, 88]
    assert await stored(store) == list(range(total))
    assert registry.get_sample_value("toolgate_audit_written_total") == total


async def test_a_lone_record_is_written_after_the_linger_without_a_flush(store: BridgeStore) -> None:
    # R: F5 -- nothing waits for company forever
    batches = Batches(store)
    writer = writer_over(batches, CollectorRegistry(), linger=0.05)
    writer.start()
    writer.submit(record(1))
    await asyncio.wait_for(batches.written.wait(), timeout=10)
    await writer.stop()
    assert batches.sizes == [1] and await stored(store) == [1]


async def test_stopping_writes_the_batch_being_gathered(store: BridgeStore) -> None:
    # R: F5
    batches = Batches(store)
    registry = CollectorRegistry()
    writer = writer_over(batches, registry)
    writer.start()
    for n in range(3):
        writer.submit(record(n))
        await asyncio.sleep(0)
    await asyncio.wait_for(writer.stop(timeout=10), timeout=20)
    assert await stored(store) == [0, 1, 2]
    assert registry.get_sample_value("toolgate_audit_dropped_total", {"reason": "shutdown"}) is None


async def test_a_failed_batch_is_kept_in_the_spool_and_every_record_lands_once_in_order(store: BridgeStore, tmp_path: Path) -> None:
    # R: O4 -- the store fails in the middle of a run of batches: nothing counted kept is lost
    batches = Batches(store, failing=[1])
    registry = CollectorRegistry()
    writer = writer_over(batches, registry, spool=AuditSpool(tmp_path / "spool", 1 << 20))
    total = 3 * _BATCH
    await burst(writer, total)
    assert batches.sizes[:2] == [_BATCH, _BATCH]  # the second is the one refused
    assert await stored(store) == list(range(total))
    assert registry.get_sample_value("toolgate_audit_spooled_total") == total - _BATCH  # the refused batch and what followed
    assert registry.get_sample_value("toolgate_audit_written_total") == total
    assert registry.get_sample_value("toolgate_audit_dropped_total", {"reason": "store_error"}) is None


async def test_without_a_spool_a_failed_batch_is_counted_dropped_and_the_rest_written(store: BridgeStore) -> None:
    # R: F5 -- written + dropped = submitted; what is counted written is in the store
    batches = Batches(store, failing=[1])
    registry = CollectorRegistry()
    writer = writer_over(batches, registry)
    total = 3 * _BATCH
    await burst(writer, total)
    assert await stored(store) == [*range(_BATCH), *range(2 * _BATCH, total)]
    assert registry.get_sample_value("toolgate_audit_written_total") == 2 * _BATCH
    assert registry.get_sample_value("toolgate_audit_dropped_total", {"reason": "store_error"}) == _BATCH


async def test_an_overflow_while_a_batch_is_gathered_keeps_the_order(store: BridgeStore, tmp_path: Path) -> None:
    # R: O4 -- the batch taken before the overflow is older than what the overflow spooled
    batches = Batches(store)
    writer = writer_over(batches, CollectorRegistry(), spool=AuditSpool(tmp_path / "spool", 1 << 20), queue_size=4)
    writer.start()
    writer.submit(record(0))
    await asyncio.sleep(0)  # the writer takes record 0 and gathers
    for n in range(1, 10):  # the queue of 4 overflows into the spool
        writer.submit(record(n))
    await asyncio.wait_for(writer.flushed(), timeout=30)
    await writer.stop()
    assert await stored(store) == list(range(10))


async def test_an_overflow_before_the_writer_takes_its_record_keeps_the_order(store: BridgeStore, tmp_path: Path) -> None:
    # R: O4 -- the record the writer then takes is newer than what the overflow spooled: it goes behind
    batches = Batches(store)
    writer = writer_over(batches, CollectorRegistry(), spool=AuditSpool(tmp_path / "spool", 1 << 20), queue_size=4)
    writer.start()
    writer.submit(record(-1))
    await asyncio.wait_for(writer.flushed(), timeout=10)  # the writer now waits for the next record
    for n in range(6):  # wakes the writer with record 0; 0-4 overflow into the spool before it runs; 5 is queued
        writer.submit(record(n))
    await asyncio.wait_for(writer.flushed(), timeout=30)
    await writer.stop()
    assert await stored(store) == list(range(-1, 6))
