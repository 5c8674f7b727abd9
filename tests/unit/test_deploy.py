"""deploy/compose.yaml, the Dockerfile, deploy/haproxy.cfg and deploy/toolgate.yaml agree (S3):
services, ports, mounted files and health checks. No Docker daemon here: the files are read, the
gateway config is checked as `toolgate check` would, and HAProxy's own checker runs when installed."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from urllib.parse import urlsplit
from typing import Any

import pytest
import yaml

from gateway.config import load_checked
from tests.support import haproxy

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return data


def _dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of each Dockerfile instruction, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    rows = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(row.split(None, 1)[0].upper(), row.split(None, 1)[1]) for row in rows]


def _haproxy_servers() -> dict[str, set[str]]:
    """Backend → the `host:port` of each of its servers in deploy/haproxy.cfg."""
    servers: dict[str, set[str]] = {}
    backend = ""
    for line in (DEPLOY / "haproxy.cfg").read_text().splitlines():
        words = line.split()
        if words[:1] == ["backend"]:
            backend = words[1]
        elif words[:1] == ["server"]:
            servers.setdefault(backend, set()).add(words[2])
    return servers


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path → host path (relative to deploy/) of a service's file mounts."""
    out = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("."):
            out[target] = source
    return out


def test_compose_runs_three_gateway_replicas_haproxy_and_postgres() -> None:
    # R: S3
    services = _compose()["services"]
    assert set(services) == {"gateway-1", "gateway-2", "gateway-3", "migrate", "haproxy", "postgres"}
    gateways = [services[f"gateway-{i}"] for i in (1, 2, 3)]
    # one definition (a YAML anchor), three replicas; only their audit spool volumes differ
    assert all({**g, "volumes": None} == {**gateways[0], "volumes": None} for g in gateways)
    build = gateways[0]["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == ROOT / "Dockerfile"
    assert set(services["haproxy"]["depends_on"]) == {"gateway-1", "gateway-2", "gateway-3"}
    assert services["postgres"]["image"] == "postgres:15"


def test_haproxy_sends_to_exactly_the_compose_replicas_on_the_port_the_image_serves() -> None:
    # R: S2, S3
    services = _compose()["services"]
    replicas = {f"{name}:8080" for name in services if name.startswith("gateway-")}
    assert _haproxy_servers() == {"replicas": replicas, "bridge_mcp": replicas, "console": replicas}
    assert [a for i, a in _dockerfile() if i == "EXPOSE"] == ["8080"]
    cmd = shlex.split(next(a for i, a in _dockerfile() if i == "CMD").strip("[]").replace(",", " "))
    assert cmd[cmd.index("--port") + 1] == "8080" and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert services["gateway-1"]["expose"] == ["8080"]
    bind = next(line.split()[1] for line in (DEPLOY / "haproxy.cfg").read_text().splitlines() if line.strip().startswith("bind "))
    published = services["haproxy"]["ports"]
    assert bind == ":8080" and published == ["${TOOLGATE_PUBLISH_ADDRESS:-127.0.0.1}:8080:8080"]


def test_mounted_configs_exist_where_the_image_and_haproxy_read_them() -> None:
    # R: S3
    services = _compose()["services"]
    cmd = next(a for i, a in _dockerfile() if i == "CMD")
    config_path = re.search(r'"--config", "([^"]+)"', cmd)
    assert config_path is not None
    assert _mounts(services["gateway-1"]) == {config_path.group(1): "./toolgate.yaml"}
    assert _mounts(services["haproxy"]) == {"/usr/local/etc/haproxy/haproxy.cfg": "./haproxy.cfg"}
    for service in services.values():
        for source in _mounts(service).values():
            assert (DEPLOY / source).is_file(), source


def test_the_image_is_slim_runs_as_an_unprivileged_user_and_checks_readyz() -> None:
    # R: S3
    steps = _dockerfile()
    stages = [a for i, a in steps if i == "FROM"]
    assert len(stages) == 2 and all("-slim" in s for s in stages) and stages[0].endswith(" AS build")
    final = steps[max(n for n, (i, _) in enumerate(steps) if i == "FROM"):]
    users = [a for i, a in final if i == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert any(i == "COPY" and a.startswith("--from=build ") for i, a in final)  # no compiler in the image
    build = steps[:len(steps) - len(final)]
    assert any(i == "RUN" and "import plugins.prompt_guard._native" in a for i, a in build)  # the compiled scorer was built
    assert any(i == "HEALTHCHECK" and "/readyz" in a for i, a in final)
    assert "option httpchk GET /readyz" in (DEPLOY / "haproxy.cfg").read_text()


def test_the_replicas_config_passes_toolgate_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # R: S3, G8
    environment = _compose()["services"]["gateway-1"]["environment"]
    for name in environment:
        monkeypatch.setenv(name, f"test-value-of-{name.lower()}")
    config, problems = load_checked(str(DEPLOY / "toolgate.yaml"))
    assert problems == [] and config is not None
    assert (config.server.host, config.server.port) == ("0.0.0.0", 8080)


def test_haproxy_accepts_the_shipped_config() -> None:
    # R: S2
    result = subprocess.run([haproxy.require(), "-c", "-f", str(DEPLOY / "haproxy.cfg")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_deploy_docs_show_the_files_as_shipped() -> None:
    # R: S3
    docs = (ROOT / "docs" / "deploy.md").read_text()
    for name in ("compose.yaml", "haproxy.cfg"):
        assert (DEPLOY / name).read_text() in docs, f"docs/deploy.md shows an old deploy/{name}"


def test_the_replicas_share_the_compose_files_postgresql_as_a_role_that_owns_nothing() -> None:
    # R: S1, S3 -- the roles themselves are made and tried for real in tests/security/test_deploy_roles.py
    services = _compose()["services"]
    bridge = yaml.safe_load((DEPLOY / "toolgate.yaml").read_text())["bridge"]
    url = urlsplit(bridge["database"])
    init = (DEPLOY / "postgres-init.sh").read_text()
    assert (url.scheme, url.port, url.hostname, url.path) == ("postgresql", 5432, "postgres", "/toolgate")
    assert f"CREATE ROLE {url.username} LOGIN" in init and not re.search(rf"OWNER {url.username}\b", init)
    assert "POSTGRES_USER" not in services["postgres"]["environment"]  # the superuser is the image's `postgres`
    assert bridge["databasePassword"] == "env:TOOLGATE_DB_PASSWORD"
    assert "TOOLGATE_DB_PASSWORD" in services["gateway-1"]["environment"]
    migrate = services["migrate"]["command"]
    owner = urlsplit(migrate[migrate.index("--database") + 1])
    assert (owner.hostname, owner.port, owner.path) == ("postgres", 5432, "/toolgate") and owner.username != url.username
    assert f"CREATE DATABASE toolgate OWNER {owner.username};" in init


def test_each_replica_keeps_its_audit_spool_on_a_volume_of_its_own() -> None:
    # R: O4, S3 -- records waiting for PostgreSQL survive a container's restart, one folder per replica
    compose = _compose()
    bridge = yaml.safe_load((DEPLOY / "toolgate.yaml").read_text())["bridge"]
    spool = Path(bridge["auditSpool"]["path"])
    volumes = []
    for name in ("gateway-1", "gateway-2", "gateway-3"):
        named = [v.split(":") for v in compose["services"][name]["volumes"] if not v.startswith(".")]
        ((volume, target),) = named
        assert spool.is_relative_to(target) and volume in compose["volumes"]
        volumes.append(volume)
    assert len(set(volumes)) == 3
    assert bridge["storeDownAtStart"] == "serve"
