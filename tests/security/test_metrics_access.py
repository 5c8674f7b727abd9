"""`/metrics` is not public by default and names no user unless told (issue 32, remainder #4).

The probe read `/metrics` anonymously through the shipped load balancer and found token counts
per user. Now a scrape needs the metrics token (`server.metrics_token`) or, with
`server.metrics_auth`, a credential `auth` accepts, unless the operator opens it
(`server.metrics_public`); token counts carry the user only with `server.metrics_user_labels`.
"""

from __future__ import annotations

import secrets
from typing import Any

import httpx2
import pytest

from gateway.config import ConfigError, parse_config
from tests.support import canary
from tests.support.gateway import client, running_gateway, simple_config
from tests.support.upstream import Reply, ScriptedUpstream

TOKEN_ENV = "TOOLGATE_TEST_METRICS_TOKEN"
KEYS = {"mode": "api_keys", "api_keys": [{"key": canary.ALICE_KEY_REF, "user_id": "alice", "org_id": "acme"},
                                          {"key": canary.BOB_KEY_REF, "user_id": "bob", "org_id": "beta"}]}
USER = [{"role": "user", "content": "hello"}]


def config_with(upstream_url: str, server: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    """The tests' config with exactly `server` (None: no server section, every default)."""
    config = simple_config(upstream_url, **extra)
    config.pop("server", None)
    if server is not None:
        config["server"] = server
    return config


@pytest.fixture
def metrics_token(monkeypatch: pytest.MonkeyPatch) -> str:
    token = "scrape-" + secrets.token_urlsafe(24)
    monkeypatch.setenv(TOKEN_ENV, token)
    return token


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.mark.parametrize("auth", [None, KEYS], ids=["auth-off", "api-keys"])
def test_metrics_refuse_an_anonymous_scrape_by_default(upstream: ScriptedUpstream, auth: dict[str, Any] | None) -> None:
    # R: G9 (issue 32: /metrics was public by default)
    extra = {"auth": auth} if auth else {}
    with running_gateway(config_with(upstream.url, None, **extra)) as gw:
        anonymous = httpx2.get(gw.url + "/metrics")
        users_key = httpx2.get(gw.url + "/metrics", headers=bearer(canary.ALICE_KEY))  # a user's key is no scraper's
    for refused in (anonymous, users_key):
        assert refused.status_code == 401 and "toolgate_" not in refused.text
        assert "server.metrics_token" in refused.json()["error"]["message"]


def test_the_metrics_token_opens_metrics_and_nothing_else_does(upstream: ScriptedUpstream, metrics_token: str) -> None:
    # R: G9
    config = config_with(upstream.url, {"metrics_token": f"env:{TOKEN_ENV}"}, auth=KEYS)
    with running_gateway(config) as gw:
        scraper = httpx2.get(gw.url + "/metrics", headers=bearer(metrics_token))
        wrong = httpx2.get(gw.url + "/metrics", headers=bearer(metrics_token + "x"))
        users_key = httpx2.get(gw.url + "/metrics", headers=bearer(canary.ALICE_KEY))
        not_elsewhere = httpx2.get(gw.url + "/v1/models", headers=bearer(metrics_token))
    assert scraper.status_code == 200 and "toolgate_requests" in scraper.text and metrics_token not in scraper.text
    assert wrong.status_code == 401 and users_key.status_code == 401
    assert not_elsewhere.status_code == 401  # the scraper's token is not an API key


def test_the_metrics_token_works_with_auth_off(upstream: ScriptedUpstream, metrics_token: str) -> None:
    # R: G9
    with running_gateway(config_with(upstream.url, {"metrics_token": f"env:{TOKEN_ENV}"})) as gw:
        anonymous = httpx2.get(gw.url + "/metrics")
        scraper = httpx2.get(gw.url + "/metrics", headers=bearer(metrics_token))
    assert anonymous.status_code == 401 and scraper.status_code == 200


def test_an_operator_can_open_metrics(upstream: ScriptedUpstream) -> None:
    # R: G9
    with running_gateway(config_with(upstream.url, {"metrics_public": True}, auth=KEYS)) as gw:
        anonymous = httpx2.get(gw.url + "/metrics")
    assert anonymous.status_code == 200 and "toolgate_requests" in anonymous.text


def test_opening_metrics_and_asking_a_credential_for_them_is_a_config_error() -> None:
    # R: G9 -- an open /metrics would silently never ask for the token
    with pytest.raises(ConfigError) as raised:
        parse_config(config_with("http://127.0.0.1:9", {"metrics_public": True, "metrics_token": f"env:{TOKEN_ENV}"}))
    assert any("server: " in p and "not both" in p for p in raised.value.problems)


@pytest.mark.parametrize(("user_labels", "users"), [(None, {"-"}), (True, {"alice", "bob"})], ids=["default", "enabled"])
def test_token_counts_name_users_only_when_enabled(upstream: ScriptedUpstream, user_labels: bool | None, users: set[str]) -> None:
    # R: G9 (issue 32: per-user token counts were readable by whoever reached /metrics)
    upstream.push(Reply(content="a", usage=(10, 5)), Reply(content="b", usage=(20, 7)))
    server: dict[str, Any] = {"metrics_public": True} | ({"metrics_user_labels": user_labels} if user_labels is not None else {})
    with running_gateway(config_with(upstream.url, server, auth=KEYS)) as gw:
        client(gw, canary.ALICE_KEY).chat.completions.create(model="assistant", messages=USER)  # type: ignore[arg-type]
        client(gw, canary.BOB_KEY).chat.completions.create(model="assistant", messages=USER)  # type: ignore[arg-type]
        text = httpx2.get(gw.url + "/metrics").text
    labelled = {line.split('user="', 1)[1].split('"', 1)[0] for line in text.splitlines() if line.startswith("toolgate_tokens_total{")}
    assert labelled == users
    assert ('user="alice"' in text) is (user_labels is True)
