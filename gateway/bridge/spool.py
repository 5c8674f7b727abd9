"""The audit spool (O4): audit records the store could not take, kept on local disk until it can.

A folder of append-only segment files, one JSON record a line (`<number>.jsonl`, the number 20
digits so names sort as numbers). Records are read back oldest segment first, each segment in line
order, which is the order they were appended in — except that `prepend` writes a segment numbered
before every other one, for a batch that was taken before the spooled records were (audit.py).

- **Kept means fsynced.** `append`/`prepend` write whole lines, then `fsync` the file (and the
  folder when they made the file): a record counts as kept only after that returns.
- **A crash mid-write** leaves at most a torn last line in the segment being written; reading skips
  a last line that is not a whole JSON record (it was never acknowledged as kept). New records always
  go to a new segment after a restart, never after a torn line.
- **Bounded**: the segment files together stay within `max_bytes`; records that do not fit are
  returned to the caller (which counts and logs them as dropped, `spool_full`).
- **One writer**: one process (one replica) owns a folder, held with an exclusive `flock` on its
  `lock` file while open (a second process is refused: `SpoolInUse`); all calls come from its
  event loop thread (audit.py), so there is no other locking. Each replica needs its own folder.

Nothing here talks to the store: the writer reads a segment (`oldest`), writes its records, and
`remove`s it. A segment written to the store and then lost before its removal is written again on
the next replay; the store skips the records it has (`AuditRecord.record_id`), so nothing is doubled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from gateway.bridge.records import AuditRecord

log = logging.getLogger("toolgate.bridge.audit")

FIRST_NUMBER = 10**12
"""The number of a fresh spool's first segment; `prepend` counts down from the lowest, so there is room."""

SEGMENT_BYTES = 4 * 1024 * 1024
"""A segment is closed for appends past this size (a replay reads one segment at a time)."""

_SUFFIX = ".jsonl"


@dataclasses.dataclass(frozen=True)
class Segment:
    """One segment file and the records read from it."""

    path: Path
    records: list[AuditRecord]


def encode(record: AuditRecord) -> bytes:
    """One record as one line (`seq` is not kept: the store gives it)."""
    fields = dataclasses.asdict(record)
    fields.pop("seq", None)
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


def decode(lines: bytes) -> tuple[list[AuditRecord], int]:
    """The records of a segment's bytes and how many lines were skipped: a torn last line (no
    newline: a crash while it was written) is skipped silently, and so is — counted, for a log
    line — a whole line that is not a record (the file was damaged)."""
    records: list[AuditRecord] = []
    bad = 0
    complete, _, _torn = lines.rpartition(b"\n")
    for line in complete.split(b"\n") if complete else []:
        try:
            fields: dict[str, Any] = json.loads(line)
            records.append(AuditRecord(**fields))
        except (ValueError, TypeError):
            bad += 1
    return records, bad


class SpoolInUse(RuntimeError):
    """Another process holds the spool's folder (two replicas or workers given the same path)."""


class AuditSpool:
    """The spool in `folder`, at most `max_bytes` of segment files. `open()` before use."""

    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self._sizes: dict[int, int] = {}
        self._tail: tuple[int, IO[bytes]] | None = None
        self._lock: IO[bytes] | None = None

    def open(self) -> None:
        """Create the folder if needed, hold it (`SpoolInUse` if another process does) and find
        the segments a previous run left."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if self._lock is None:
            lock = (self.folder / "lock").open("ab")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                raise SpoolInUse(f"bridge.auditSpool.path: {self.folder} is in use by another process; "
                                 "give each replica (and each worker) a spool folder of its own") from None
            self._lock = lock
        self._sizes = {}
        for path in self.folder.glob("*" + _SUFFIX):
            if path.stem.isdigit():
                self._sizes[int(path.stem)] = path.stat().st_size
        if self._sizes:
            log.warning("audit spool %s holds %d byte(s) of records from an earlier run; they are written "
                        "when the store can be reached", self.folder, self.bytes)

    def close(self) -> None:
        """Close the segment being appended to (what was appended is on disk already) and let
        the folder go."""
        self._close_tail()
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()

    def _close_tail(self) -> None:
        tail, self._tail = self._tail, None
        if tail is not None:
            tail[1].close()

    @property
    def bytes(self) -> int:
        """The size of every segment file together."""
        return sum(self._sizes.values())

    def pending(self) -> bool:
        """Does the spool hold records?"""
        return bool(self._sizes)

    def append(self, records: Sequence[AuditRecord]) -> list[AuditRecord]:
        """Keep `records` after every record kept so far (fsynced before this returns); the records
        that did not fit within `max_bytes`, in order, are returned (not kept)."""
        lines, left = self._fitting(records)
        if lines:
            number, file = self._appendable(len(lines))
            before = self._sizes[number]
            try:
                file.write(lines)
                file.flush()
                os.fsync(file.fileno())
            except OSError:  # a full disk: nothing of this append is kept — cut back what was written
                self._tail = None
                with contextlib.suppress(OSError):
                    file.close()
                self._cut(number, before)
                raise
            self._sizes[number] += len(lines)
        return left

    def _cut(self, number: int, size: int) -> None:
        """Cut segment `number` back to `size` bytes after a failed write (whole lines written before
        the failure would otherwise be read back, though the caller was told none were kept); if even
        that fails, its size on disk is counted and new appends go to a new segment."""
        path = self._path(number)
        try:
            os.truncate(path, size)
            self._sizes[number] = size
        except OSError:
            with contextlib.suppress(OSError):
                self._sizes[number] = path.stat().st_size
        if self._sizes.get(number) == 0:
            path.unlink(missing_ok=True)
            self._sizes.pop(number, None)

    def prepend(self, records: Sequence[AuditRecord]) -> list[AuditRecord]:
        """Keep `records` before every record kept so far (a segment of its own, fsynced); those that
        did not fit are returned."""
        lines, left = self._fitting(records)
        if lines:
            number = min(self._sizes, default=FIRST_NUMBER) - 1
            self._write_new(number, lines)
        return left

    def oldest(self) -> Segment | None:
        """The first segment and its records (None when the spool is empty). If it is the segment
        being appended to, appends move to a new one first, so the segment read does not change."""
        if not self._sizes:
            return None
        number = min(self._sizes)
        if self._tail is not None and self._tail[0] == number:
            self._close_tail()
        path = self._path(number)
        records, bad = decode(path.read_bytes())
        if bad:
            log.error("audit spool %s: %d damaged line(s) skipped", path, bad)
        return Segment(path, records)

    def remove(self, segment: Segment) -> None:
        """Forget a segment whose records the store has (the file is deleted)."""
        number = int(segment.path.stem)
        segment.path.unlink(missing_ok=True)
        self._sizes.pop(number, None)
        _fsync_folder(self.folder)

    def _fitting(self, records: Sequence[AuditRecord]) -> tuple[bytes, list[AuditRecord]]:
        room = self.max_bytes - self.bytes
        kept: list[bytes] = []
        for i, record in enumerate(records):
            line = encode(record)
            if len(line) > room:
                return b"".join(kept), list(records[i:])
            kept.append(line)
            room -= len(line)
        return b"".join(kept), []

    def _appendable(self, size: int) -> tuple[int, IO[bytes]]:
        if self._tail is not None and self._sizes.get(self._tail[0], 0) + size > SEGMENT_BYTES:
            self._close_tail()
        if self._tail is None:  # a new segment after every other: never after a torn line of an earlier run
            number = max(self._sizes, default=FIRST_NUMBER - 1) + 1
            file = self._path(number).open("ab")
            _fsync_folder(self.folder)
            self._sizes[number] = 0
            self._tail = (number, file)
        return self._tail

    def _write_new(self, number: int, lines: bytes) -> None:
        file = self._path(number).open("xb")  # never an existing file
        try:
            with file:
                file.write(lines)
                file.flush()
                os.fsync(file.fileno())
        except OSError:
            self._sizes[number] = 0
            self._cut(number, 0)  # nothing of a failed write is kept
            raise
        _fsync_folder(self.folder)
        self._sizes[number] = len(lines)

    def _path(self, number: int) -> Path:
        return self.folder / f"{number:020d}{_SUFFIX}"


def _fsync_folder(folder: Path) -> None:
    """Make a file's creation or removal durable (its folder's entry)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
