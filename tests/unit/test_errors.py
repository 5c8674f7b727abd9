"""The one error renderer (G6): every error class in the OpenAI envelope (or a dialect's shape),
scrubbed of every resolved secret, on the gateway's routes and the Bridge's alike."""

from __future__ import annotations

import json

import pytest
from starlette.requests import Request

from gateway import errors
from gateway.api.messages import MessagesDialect
from gateway.bridge.api_support import rendered
from gateway.errors import BadRequest, GatewayError, error_response
from gateway.secrets import SecretSet
from tests.support import canary

CLASSES = sorted((c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, GatewayError)), key=lambda c: c.__name__)


def secrets() -> SecretSet:
    found = SecretSet()
    found.add(canary.UPSTREAM_KEY)
    return found


@pytest.mark.parametrize("kind", [c for c in CLASSES if c not in (errors.GuardBlocked,)], ids=lambda c: c.__name__)
def test_every_error_class_renders_the_same_envelope_with_its_status(kind: type[GatewayError]) -> None:
    # R: G6
    response = error_response(kind("went wrong"), secrets().scrub)
    body = json.loads(response.body)
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "code", "param"}
    assert body["error"]["message"] == "went wrong" and response.status_code == kind.status
    assert (response.headers.get("www-authenticate") == "Bearer") == (kind.status == 401)


def test_a_secret_in_an_error_message_is_scrubbed_in_every_shape() -> None:
    # R: G6, A2
    exc = BadRequest(f"upstream said {canary.UPSTREAM_KEY} is wrong")
    for shape in (errors.openai_error, MessagesDialect().error_body):
        text = error_response(exc, secrets().scrub, shape).body.decode()
        assert canary.CANARY not in text and "[redacted]" in text


async def test_the_bridges_rest_routes_render_through_the_same_scrubbing_renderer() -> None:
    # R: G6, F12
    async def leaky(request: Request) -> None:
        raise BadRequest(f"connection refused key {canary.UPSTREAM_KEY}")

    endpoint = rendered(leaky, secrets().scrub)  # type: ignore[arg-type]
    response = await endpoint(Request({"type": "http", "method": "GET", "path": "/", "headers": []}))
    assert response.status_code == 400
    assert json.loads(response.body)["error"]["message"] == "connection refused key [redacted]"
