"""The shipped compose file's PostgreSQL roles, for real (issue 32, finding 7: the replicas
connected as PostgreSQL's superuser, so a compromised replica could disable the audit log's
append-only trigger).

A throwaway cluster with password auth over TCP, as the postgres image has; the shipped
deploy/postgres-init.sh run as the image runs it (its superuser, over the Unix socket); the
compose file's `migrate` command run as written against it; then the replicas' role, as
deploy/toolgate.yaml names it, uses the store and can touch neither the audit rows nor the trigger.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import yaml

from gateway.bridge.records import AuditQuery, AuditRecord, ConnectionRecord
from gateway.bridge.store_postgres import PostgresStore
from tests.support import postgres

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
TOOLGATE = Path(sys.executable).with_name("toolgate")


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return data


def _on(url: str, port: int) -> str:
    """`url` with its host and port replaced by the throwaway cluster's."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@{postgres.HOST}:{port}"))


def _container_path(service: dict[str, Any], host_file: str) -> str:
    """Where `service` mounts deploy/`host_file`."""
    for volume in service["volumes"]:
        source, target, *_ = volume.split(":")
        if source == f"./{host_file}":
            return str(target)
    raise AssertionError(f"{host_file} is not mounted")


@pytest.fixture
def cluster() -> Iterator[postgres.Cluster]:
    made = postgres.Cluster(password="superuser-password")
    try:
        yield made
    finally:
        made.close()


def test_the_compose_roles_keep_the_audit_log_out_of_the_replicas_reach(cluster: postgres.Cluster) -> None:
    # R: S1, S3, F5 -- the replicas' role owns nothing; only the migration role owns the trigger
    services = _compose()["services"]
    passwords = {"TOOLGATE_OWNER_PASSWORD": "owner-password-1", "TOOLGATE_DB_PASSWORD": "replica-password-2"}
    # the image runs what is mounted in /docker-entrypoint-initdb.d/, as its superuser, on first start
    assert _container_path(services["postgres"], "postgres-init.sh").startswith("/docker-entrypoint-initdb.d/")
    assert set(passwords) <= set(services["postgres"]["environment"])
    init = subprocess.run(
        ["sh", str(DEPLOY / "postgres-init.sh")], capture_output=True, text=True, timeout=60,
        env={**os.environ, **passwords, "POSTGRES_USER": postgres.USER, "PGHOST": cluster.socket_dir,
             "PGPORT": str(cluster.port), "PATH": f"{postgres.BIN}:{os.environ['PATH']}"},
    )
    assert init.returncode == 0, init.stderr
    assert passwords["TOOLGATE_OWNER_PASSWORD"] not in init.stdout + init.stderr

    # `migrate`, as the compose file runs it: the owner's URL, its password in PGPASSWORD
    migrate = services["migrate"]
    command = list(migrate["command"])
    owner_url = _on(command[command.index("--database") + 1], cluster.port)
    command[command.index("--database") + 1] = owner_url
    command[command.index("--config") + 1] = str(DEPLOY / "toolgate.yaml")
    assert command[:3] == ["toolgate", "bridge", "migrate"]
    assert migrate["environment"]["PGPASSWORD"] == "${TOOLGATE_OWNER_PASSWORD:?set TOOLGATE_OWNER_PASSWORD}"
    environment = {name: f"value-of-{name.lower()}" for name in migrate["environment"]}
    environment.update(passwords, PGPASSWORD=passwords["TOOLGATE_OWNER_PASSWORD"])
    done = subprocess.run([str(TOOLGATE), *command[1:]], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **environment})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "schema up to date" in done.stdout

    # the replicas: deploy/toolgate.yaml's database and password reference
    bridge = yaml.safe_load((DEPLOY / "toolgate.yaml").read_text())["bridge"]
    assert bridge["databasePassword"] == "env:TOOLGATE_DB_PASSWORD"
    assert services["gateway-1"]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
    replica_url = _on(bridge["database"], cluster.port)
    assert urlsplit(replica_url).username != urlsplit(owner_url).username
    asyncio.run(_the_replicas_role_uses_the_store_and_nothing_more(replica_url, owner_url, passwords))


async def _the_replicas_role_uses_the_store_and_nothing_more(replica_url: str, owner_url: str,
                                                             passwords: dict[str, str]) -> None:
    store = PostgresStore(replica_url, password=passwords["TOOLGATE_DB_PASSWORD"])
    await store.open()  # the schema is current: the role that owns nothing may start
    try:
        await store.upsert_connection(ConnectionRecord("gh", "alice", "http://h/mcp"))
        await store.append_audit([AuditRecord(1.0, "mcp.tool_call", "alice", None, "gh__search", "federation", False, {},
                                              "success", 1.0)])
        conn = await asyncpg.connect(replica_url, password=passwords["TOOLGATE_DB_PASSWORD"])
        try:
            owners = await conn.fetch("SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'")
            assert [row["tableowner"] for row in owners] == [urlsplit(owner_url).username]
            assert not await conn.fetchval("SELECT rolsuper OR rolcreaterole OR rolcreatedb FROM pg_roles"
                                           " WHERE rolname = current_user")
        finally:
            await conn.close()
        await postgres.assert_audit_untouchable(replica_url, passwords["TOOLGATE_DB_PASSWORD"])
        assert [r.status for r in await store.query_audit(AuditQuery(actor_id="alice"))] == ["success"]
    finally:
        await store.close()
