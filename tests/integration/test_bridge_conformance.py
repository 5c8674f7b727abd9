"""The official MCP conformance suite (0.1.12) against its own fixture server, directly and through
the Bridge (one connection, `prefix: ""`): every scenario the fixture passes directly must pass
through the Bridge too, judged strictly (tests/support/conformance.py). Needs Node.js."""

from __future__ import annotations

from pathlib import Path

from gateway.bridge.config import BridgeConfig
from tests.support.bridge_servers import anonymous, bridge_app
from tests.support.conformance import ConformanceFixture, run_suite
from tests.support.http_server import serve


def test_every_scenario_the_fixture_passes_directly_passes_through_the_bridge(tmp_path: Path) -> None:
    # R: F13, F14, F15
    fixture = ConformanceFixture().start()
    try:
        direct = run_suite(fixture.url, tmp_path / "direct")
        config = BridgeConfig.model_validate(
            {
                "database": "conformance.db",
                "allowedHosts": ["127.0.0.1:*", "localhost:*"],  # dns-rebinding-protection checks the Bridge itself
                "connections": [{"id": "fixture", "owner": "anonymous", "endpoint": fixture.url, "prefix": ""}],
            }
        )
        with serve(bridge_app(config, tmp_path, authenticate=anonymous).app) as bridge:
            bridged = run_suite(f"{bridge.url}/mcp", tmp_path / "bridged")
    finally:
        fixture.stop()
    passed_directly = {name for name, v in direct.items() if v.passed}
    lost = {name: bridged[name].reasons for name in sorted(passed_directly) if not bridged[name].passed}
    assert len(direct) >= 32 and len(passed_directly) >= 29, {n: v.reasons for n, v in direct.items() if not v.passed}
    assert lost == {}, "scenarios the fixture passes but the Bridge does not"
