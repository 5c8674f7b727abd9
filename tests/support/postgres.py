"""Real PostgreSQL for the tests (S1, S2): a fresh database on the server this machine runs, or a
throwaway cluster of our own that a test can stop and start.

- `SERVER`: the PostgreSQL 15 already running at 127.0.0.1:5432 (trust auth, user postgres), on CI
  and here. `fresh_database()` makes a database with a random name on it and drops it after.
- `Cluster`: Debian's `initdb`/`pg_ctl` (`/usr/lib/postgresql/15/bin`) run as the `postgres` user
  (`runuser -u postgres`) in a temporary folder, listening on a free loopback port; `stop()` and
  `start()` it to take the database away from a running gateway.

`require()` / `require_cluster()` skip a test when the piece is missing, or fail it under
`TOOLGATE_REQUIRE_POSTGRES=1` (set by `.ci/run`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from tests.support.faults import free_port

HOST, PORT, USER = "127.0.0.1", 5432, "postgres"
SERVER = f"postgresql://{USER}@{HOST}:{PORT}"
BIN = Path("/usr/lib/postgresql/15/bin")


def _missing(message: str) -> None:
    if os.environ.get("TOOLGATE_REQUIRE_POSTGRES") == "1":
        pytest.fail(message)
    pytest.skip(message)


def require() -> str:
    """The running server's base URL; else skip (or fail under TOOLGATE_REQUIRE_POSTGRES=1)."""
    try:
        with socket.create_connection((HOST, PORT), timeout=2):
            pass
    except OSError:
        _missing(f"needs PostgreSQL at {HOST}:{PORT} (trust auth, user {USER})")
    return SERVER


async def create_database(server: str = SERVER) -> str:
    """A new empty database on `server`; its URL."""
    name = f"toolgate_test_{secrets.token_hex(6)}"
    conn = await asyncpg.connect(server + "/postgres")
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return f"{server}/{name}"


async def drop_database(url: str) -> None:
    """Drop the database of `url` (ending its sessions first)."""
    server, _, name = url.rpartition("/")
    conn = await asyncpg.connect(server + "/postgres")
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def fresh_database() -> AsyncIterator[str]:
    """A database on the running server for one test; dropped after."""
    url = await create_database(require())
    try:
        yield url
    finally:
        await drop_database(url)


@contextlib.contextmanager
def fresh_database_sync() -> Iterator[str]:
    """`fresh_database` for code that runs no event loop (fixtures starting processes)."""
    url = asyncio.run(create_database(require()))
    try:
        yield url
    finally:
        asyncio.run(drop_database(url))


def scalar(url: str, sql: str, password: str | None = None) -> object:
    """The first value of `sql`'s first row, from code that may run inside an event loop (in a thread)."""
    async def fetch() -> object:
        conn = await asyncpg.connect(url, password=password)
        try:
            return await conn.fetchval(sql)
        finally:
            await conn.close()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, fetch()).result(timeout=30)


def require_cluster() -> None:
    """Skip (or fail) unless a cluster of our own can be made: Debian's binaries, and either the
    `postgres` user or root to run them as that user."""
    if not (BIN / "initdb").is_file() or not (BIN / "pg_ctl").is_file():
        _missing(f"needs Debian's PostgreSQL 15 binaries in {BIN} (package postgresql-15)")
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        _missing("needs the `postgres` user (Debian's postgresql package makes it)")
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != "postgres":
        _missing("needs root (to run the cluster as `postgres` with runuser) or the postgres user")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        _missing("needs runuser (util-linux)")


class Cluster:
    """A throwaway PostgreSQL cluster on a free loopback port, started at once. Trust auth; with
    `password`, connections over TCP must give it (scram-sha-256) and only the Unix socket trusts."""

    def __init__(self, password: str | None = None) -> None:
        require_cluster()
        self._dir = tempfile.mkdtemp(prefix="toolgate-pg-")
        folder = Path(self._dir)
        self.data = folder / "data"
        self.log = folder / "postgres.log"
        self.port = free_port()
        self.url = f"postgresql://{USER}@{HOST}:{self.port}/postgres"
        user = pwd.getpwnam("postgres")
        os.chown(folder, user.pw_uid, user.pw_gid)
        auth = ["--auth=trust"]
        if password is not None:
            secret = folder / "pwfile"
            secret.write_text(password + "\n")
            os.chown(secret, user.pw_uid, user.pw_gid)
            auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={secret}"]
        self._as_postgres(BIN / "initdb", "-D", str(self.data), *auth, "--username", USER, "-E", "UTF8")
        self.start()

    @property
    def socket_dir(self) -> str:
        """Where the server's Unix socket is (`PGHOST` for psql): connections there are trusted."""
        return self._dir

    def _as_postgres(self, *command: str | Path) -> None:
        args = [str(c) for c in command]
        if os.geteuid() == 0:
            args = ["runuser", "-u", "postgres", "--", *args]
        done = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=self._dir)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}\n{self.log_tail()}")

    def start(self) -> None:
        """Start the server and wait until it accepts connections (`pg_ctl -w`)."""
        options = f"-p {self.port} -k {self._dir} -c listen_addresses={HOST} -c fsync=off"
        self._as_postgres(BIN / "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60",
                          "start")

    def stop(self) -> None:
        """Stop the server (fast mode: sessions are ended at once)."""
        self._as_postgres(BIN / "pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def create_database(self, name: str) -> str:
        """A database on this cluster (made over the Unix socket, which trusts); its URL over TCP."""
        self._as_postgres(BIN / "psql", "-h", self._dir, "-p", str(self.port), "-U", USER, "-d", "postgres",
                          "-v", "ON_ERROR_STOP=1", "-c", f'CREATE DATABASE "{name}"')
        return f"postgresql://{USER}@{HOST}:{self.port}/{name}"

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def close(self) -> None:
        """Stop the server if it runs and remove its folder."""
        try:
            if self.running():
                self.stop()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


AUDIT_TAMPERING = (
    "UPDATE audit SET status = 'failure'", "DELETE FROM audit", "TRUNCATE audit",
    "ALTER TABLE audit DISABLE TRIGGER audit_append_only", "DROP TABLE audit",
    "DROP FUNCTION toolgate_audit_append_only() CASCADE",
)
"""What a role that does not own the schema must be refused on the audit log (S1, F5)."""


async def assert_audit_untouchable(url: str, password: str | None = None) -> None:
    """Every statement of `AUDIT_TAMPERING`, run as `url`'s role, is refused by privileges."""
    conn = await asyncpg.connect(url, password=password)
    try:
        for sql in AUDIT_TAMPERING:
            with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied|must be owner"):
                await conn.execute(sql)
    finally:
        await conn.close()
