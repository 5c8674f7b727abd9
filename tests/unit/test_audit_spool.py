"""The audit spool (O4): its file format (whole fsynced lines, a torn last line after a crash
skipped, order kept, bounded) and the audit writer over it with a real SQLite store that fails,
or commits and then fails (the acknowledgement lost), on command."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gateway.bridge.audit import AuditWriter
from gateway.config import ConfigError, load_config
from gateway.bridge.records import AuditQuery, AuditRecord
from gateway.bridge.spool import AuditSpool, SpoolInUse, encode
from gateway.bridge.store_factory import open_store
from gateway.bridge.store_sqlite import SqliteStore
from tests.support import postgres
from tests.support.config_files import place, write


def record(n: int, record_id: str | None = None) -> AuditRecord:
    return AuditRecord(float(n), "mcp.tool_call", "alice", None, "tools__echo", "federation", False, {"id": n},
                       "success", 1.0, record_id=record_id if record_id is not None else f"r-{n}")


def ids(records: Sequence[AuditRecord]) -> list[int]:
    return [r.args["id"] for r in records]


def drain(spool: AuditSpool) -> list[AuditRecord]:
    """Every record in the spool, oldest first, removing each segment read."""
    found: list[AuditRecord] = []
    while (segment := spool.oldest()) is not None:
        found += segment.records
        spool.remove(segment)
    return found


def test_records_come_back_in_the_order_they_were_appended_and_a_prepended_batch_first(tmp_path: Path) -> None:
    # R: O4
    spool = AuditSpool(tmp_path, max_bytes=1 << 20)
    spool.open()
    assert spool.append([record(3), record(4)]) == []
    assert spool.append([record(5)]) == []
    assert spool.prepend([record(1), record(2)]) == []
    assert spool.pending()
    assert ids(drain(spool)) == [1, 2, 3, 4, 5]
    assert not spool.pending() and list(tmp_path.glob("*.jsonl")) == []


def test_a_spool_survives_a_restart_and_new_records_go_after_the_old_ones(tmp_path: Path) -> None:
    # R: O4
    first = AuditSpool(tmp_path, max_bytes=1 << 20)
    first.open()
    first.append([record(1), record(2)])
    first.close()  # the process ends (a crash lets the folder go too; what was appended is on disk)
    second = AuditSpool(tmp_path, max_bytes=1 << 20)
    second.open()
    second.append([record(3)])
    assert ids(drain(second)) == [1, 2, 3]


def test_a_torn_last_line_left_by_a_crash_is_skipped_and_later_records_are_not_spoiled_by_it(tmp_path: Path) -> None:
    # R: O4
    first = AuditSpool(tmp_path, max_bytes=1 << 20)
    first.open()
    first.append([record(1), record(2)])
    (segment,) = list(tmp_path.glob("*.jsonl"))
    with segment.open("ab") as file:  # a crash in the middle of writing record 3's line
        file.write(encode(record(3))[:25])
    first.close()
    second = AuditSpool(tmp_path, max_bytes=1 << 20)
    second.open()
    second.append([record(4)])
    assert ids(drain(second)) == [1, 2, 4]


def test_the_spool_keeps_what_fits_within_its_bound_and_returns_the_rest(tmp_path: Path) -> None:
    # R: O4
    line = len(encode(record(1)))
    spool = AuditSpool(tmp_path, max_bytes=3 * line + line // 2)
    spool.open()
    left = spool.append([record(1), record(2), record(3), record(4), record(5)])
    assert ids(left) == [4, 5]
    assert spool.bytes <= spool.max_bytes
    assert ids(spool.prepend([record(0)])) == [0]
    assert ids(drain(spool)) == [1, 2, 3]
    assert spool.append([record(6)]) == []  # room again once replayed


def _open_spool(folder: str, answer: "multiprocessing.Queue[str]") -> None:
    try:
        AuditSpool(Path(folder), max_bytes=1 << 20).open()
        answer.put("opened")
    except SpoolInUse as exc:
        answer.put(str(exc))


def test_a_second_process_is_refused_a_spool_folder_in_use_and_may_take_it_once_it_is_let_go(tmp_path: Path) -> None:
    # R: O4
    spool = AuditSpool(tmp_path, max_bytes=1 << 20)
    spool.open()
    context = multiprocessing.get_context("spawn")
    for expected in ("is in use by another process", "opened"):
        answer: multiprocessing.Queue[str] = context.Queue()
        other = context.Process(target=_open_spool, args=(str(tmp_path), answer))
        other.start()
        other.join(60)
        text = answer.get(timeout=10)
        assert expected in text, text
        spool.close()


class FlakyStore(SqliteStore):
    """A real SQLite store whose audit appends fail while `down` is set; with `lose_ack`, the next
    append is committed and then fails, as when the acknowledgement of a committed batch is lost."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.down = False
        self.lose_ack = False
        self.failures = 0

    async def append_audit(self, records: Sequence[AuditRecord]) -> None:
        if self.down:
            self.failures += 1
            raise ConnectionResetError("store down")
        await super().append_audit(records)
        if self.lose_ack:
            self.lose_ack = False
            self.failures += 1
            raise ConnectionResetError("acknowledgement lost")


async def stored(store: SqliteStore) -> list[AuditRecord]:
    return list(reversed(await store.query_audit(AuditQuery(actor_id=None, limit=100_000))))


async def test_records_the_store_refused_are_written_from_the_spool_in_order_and_once_when_it_returns(tmp_path: Path) -> None:
    # R: O4, F5
    store = FlakyStore(tmp_path / "audit.db")
    await store.open()
    registry = CollectorRegistry()
    writer = AuditWriter(store, queue_size=10_000, registry=registry, spool=AuditSpool(tmp_path / "spool", 1 << 20))
    writer.start()
    for n in range(0, 10):
        writer.submit(record(n, record_id=None))
    await asyncio.wait_for(writer.flushed(), timeout=10)
    store.down = True
    for n in range(10, 300):
        writer.submit(record(n, record_id=None))
        if n % 50 == 0:
            await asyncio.sleep(0)  # let the writer take some while others keep coming
    await asyncio.wait_for(writer._queue.join(), timeout=10)
    assert store.failures >= 1 and (tmp_path / "spool").is_dir() and any((tmp_path / "spool").glob("*.jsonl"))
    store.lose_ack = True  # the first replayed batch is committed but reported failed: replayed again
    store.down = False
    for n in range(300, 320):
        writer.submit(record(n, record_id=None))
    await asyncio.wait_for(writer.flushed(), timeout=30)
    await writer.stop()
    rows = await stored(store)
    assert ids(rows) == list(range(320))  # every record, once, in order of seq
    assert registry.get_sample_value("toolgate_audit_dropped_total", {"reason": "store_error"}) is None
    assert registry.get_sample_value("toolgate_audit_spool_bytes") == 0
    await store.close()


async def test_a_full_queue_spills_into_the_spool_in_order_instead_of_dropping(tmp_path: Path) -> None:
    # R: O4
    store = FlakyStore(tmp_path / "audit.db")
    await store.open()
    registry = CollectorRegistry()
    writer = AuditWriter(store, queue_size=4, registry=registry, spool=AuditSpool(tmp_path / "spool", 1 << 20))
    writer.start()
    for n in range(100):  # no await: the writer cannot take any, the queue of 4 overflows
        writer.submit(record(n, record_id=None))
    await asyncio.wait_for(writer.flushed(), timeout=30)
    await writer.stop()
    assert ids(await stored(store)) == list(range(100))
    assert registry.get_sample_value("toolgate_audit_dropped_total", {"reason": "queue_full"}) is None
    await store.close()


async def test_only_a_full_spool_drops_records_and_counts_them(tmp_path: Path) -> None:
    # R: O4
    store = FlakyStore(tmp_path / "audit.db")
    await store.open()
    store.down = True
    registry = CollectorRegistry()
    line = len(encode(record(1, record_id="x" * 40)))  # about the size of a writer-given id's line
    writer = AuditWriter(store, queue_size=1000, registry=registry, spool=AuditSpool(tmp_path / "spool", 64 * 1024))
    writer.start()
    for n in range(2 * 64 * 1024 // line):
        writer.submit(record(n, record_id=None))
    await asyncio.wait_for(writer._queue.join(), timeout=10)
    dropped = registry.get_sample_value("toolgate_audit_dropped_total", {"reason": "spool_full"}) or 0
    kept = registry.get_sample_value("toolgate_audit_spooled_total")
    assert dropped > 0 and kept is not None and kept + dropped == 2 * 64 * 1024 // line
    store.down = False
    await asyncio.wait_for(writer.flushed(), timeout=30)
    await writer.stop()
    assert ids(await stored(store)) == list(range(int(kept)))  # the oldest were kept, the newest dropped
    await store.close()


async def test_a_writer_started_over_a_spool_left_by_an_earlier_run_writes_it_first(tmp_path: Path) -> None:
    # R: O4
    store = FlakyStore(tmp_path / "audit.db")
    await store.open()
    store.down = True
    first = AuditWriter(store, queue_size=100, registry=CollectorRegistry(), spool=AuditSpool(tmp_path / "spool", 1 << 20))
    first.start()
    for n in range(5):
        first.submit(record(n, record_id=None))
    await asyncio.wait_for(first._queue.join(), timeout=10)
    await first.stop()  # the store never came back during this run
    store.down = False
    second = AuditWriter(store, queue_size=100, registry=CollectorRegistry(), spool=AuditSpool(tmp_path / "spool", 1 << 20))
    second.start()
    second.submit(record(5, record_id=None))
    await asyncio.wait_for(second.flushed(), timeout=30)
    await second.stop()
    assert ids(await stored(store)) == list(range(6))
    await store.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_a_batch_written_twice_is_stored_once_in_its_order_on_either_store(kind: str, tmp_path: Path) -> None:
    # R: O4, S1
    async with contextlib.AsyncExitStack() as stack:
        database = str(tmp_path / "audit.db")
        if kind == "postgresql":
            database = await stack.enter_async_context(postgres.fresh_database())
        store = open_store(database, tmp_path)
        await store.open()
        stack.push_async_callback(store.close)
        await store.append_audit([record(1), record(2)])
        await store.append_audit([record(1), record(2), record(3), record(4)])  # replayed after a lost acknowledgement
        await store.append_audit([record(5)])
        rows = list(reversed(await store.query_audit(AuditQuery(actor_id=None))))
        assert ids(rows) == [1, 2, 3, 4, 5]
        assert [r.seq for r in rows] == sorted(r.seq for r in rows)


def test_a_bad_spool_setting_stops_start_up_naming_its_key(tmp_path: Path) -> None:
    # R: O4
    path = write(tmp_path, """
upstreams: [{name: u, kind: inspect}]
routes: [{model: m, upstream: u}]
bridge:
  auditSpool: {path: "", maxBytes: 1000, keep: forever}
  storeDownAtStart: wait
""")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    problems = caught.value.problems
    assert f"{place(path, 'maxBytes')}: bridge.auditSpool.maxBytes: Input should be greater than or equal to 65536" in problems
    assert f"{place(path, 'keep')}: bridge.auditSpool.keep: unknown key 'keep'; the keys here: path, maxBytes" in problems
    assert any(p.startswith(f"{place(path, 'path')}: bridge.auditSpool.path: String should have at least 1 character")
               for p in problems), problems
    assert any(p.startswith(f"{place(path, 'storeDownAtStart')}: bridge.storeDownAtStart: Input should be 'exit' or 'serve'")
               for p in problems), problems


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 64 KiB tmpfs: a real disk that fills up (needs root and mount, as on our machines)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and permission to mount a tmpfs (a disk that fills up)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


async def test_records_a_full_disk_refuses_are_counted_as_unwritable_not_as_a_full_spool(tmp_path: Path, small_disk: Path) -> None:
    # R: O4 -- the spool's bound (1 MiB) is not reached: the disk (64 KiB) is; operators see which
    store = FlakyStore(tmp_path / "audit.db")
    await store.open()
    store.down = True
    registry = CollectorRegistry()
    writer = AuditWriter(store, queue_size=10_000, registry=registry, spool=AuditSpool(small_disk / "spool", 1024 * 1024))
    writer.start()
    line = len(encode(record(1, record_id="x" * 40)))
    total = 2 * 64 * 1024 // line
    for n in range(total):
        writer.submit(record(n, record_id=None))
    await asyncio.wait_for(writer._queue.join(), timeout=10)
    unwritable = registry.get_sample_value("toolgate_audit_dropped_total", {"reason": "spool_unwritable"}) or 0
    kept = registry.get_sample_value("toolgate_audit_spooled_total") or 0
    assert unwritable > 0 and kept > 0 and kept + unwritable == total
    assert registry.get_sample_value("toolgate_audit_dropped_total", {"reason": "spool_full"}) is None
    store.down = False
    await asyncio.wait_for(writer.flushed(), timeout=30)
    await writer.stop()
    assert len(await stored(store)) == kept  # what the spool did keep reaches the store
    await store.close()


@pytest.mark.parametrize(("database", "spool", "warned"), [
    ("postgresql://toolgate@db:5432/toolgate", None, True),
    ("postgresql://toolgate@db:5432/toolgate", {"path": "/var/lib/toolgate/audit-spool"}, False),
    ("bridge.db", None, False),  # SQLite: the store is a local file, never away while the gateway serves
])
def test_start_up_warns_when_a_postgresql_audit_log_has_no_spool(database, spool, warned) -> None:
    # R: O4
    from gateway.bridge.config import BridgeConfig
    from gateway.bridge.service import unspooled_warning

    config = BridgeConfig.model_validate({"enabled": True, "database": database, **({"auditSpool": spool} if spool else {})})
    message = unspooled_warning(config)
    assert (message is not None) == warned
    if message is not None:
        assert "bridge.auditSpool is not set" in message and "10000" in message
