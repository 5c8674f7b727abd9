"""Start a real gateway (create_app under uvicorn on port 0) from a config dict."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import openai

from gateway.app import create_app
from gateway.config import parse_config
from tests.support import canary
from tests.support.http_server import ServerThread, serve


@contextmanager
def running_gateway(config: dict[str, Any], base_dir: Path | None = None, port: int = 0) -> Iterator[ServerThread]:
    """`with running_gateway({...}) as gw: gw.url` — lifespan runs, so plugins are started."""
    app = create_app(parse_config(config, "test-config", base_dir or Path(".")))
    with serve(app, port=port) as server:
        yield server


def client(server: ServerThread, api_key: str = "unused", **headers: str) -> openai.OpenAI:
    """The official SDK pointed at the gateway, retries off so faults are seen as they are."""
    return openai.OpenAI(base_url=server.url + "/v1", api_key=api_key, max_retries=0, default_headers=headers or None, timeout=30)


METRICS_ACCESS = ("metrics_public", "metrics_auth", "metrics_token")


def simple_config(upstream_url: str, plugins: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    """One `openai` upstream at `upstream_url` and one route `assistant` with `plugins`. The
    upstream's key is the canary (`canary.UPSTREAM_KEY`, by reference), which the scripted upstream
    checks it receives. `/metrics` is opened (`server.metrics_public`), as an operator scraping on
    loopback would, unless `server` says how it is guarded (tests/security/test_metrics_access.py
    checks the default)."""
    config: dict[str, Any] = {
        "upstreams": [{"name": "scripted", "kind": "openai", "api_base": upstream_url + "/v1", "api_key": canary.UPSTREAM_KEY_REF}],
        "routes": [{"model": "assistant", "upstream": "scripted", "upstream_model": "scripted-model", "plugins": plugins or []}],
    }
    config.update(extra)
    server = dict(config.get("server", {}))
    if not any(key in server for key in METRICS_ACCESS):
        config["server"] = {**server, "metrics_public": True}
    return config


def ready(url: str) -> bool:
    """Does a gateway at `url` answer `/readyz` with 200 now? (For `wait_until` on a process.)"""
    try:
        return httpx2.get(url + "/readyz", timeout=1).status_code == 200
    except httpx2.HTTPError:
        return False
