"""Out-of-range sampling parameters and non-web image URLs are refused, not passed on (issue 32, N5;
A1, A2, A3, G6).

`max_output_tokens: -1`, `temperature: "hot"`, `max_tokens: 10**30` and `file:///` image URLs
reached the upstream. Each is now a 400 that names the field, in all three client APIs, and the
scripted upstream receives nothing; the values the APIs document still pass."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.support.gateway import running_gateway, simple_config
from tests.support.http_server import ServerThread, serve
from tests.support.upstream import ScriptedUpstream

USER = [{"role": "user", "content": "hello"}]
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    scripted = ScriptedUpstream()
    with serve(scripted.app) as server:
        scripted.url = server.url  # type: ignore[attr-defined]
        yield scripted


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream) -> Iterator[ServerThread]:
    with running_gateway(simple_config(upstream.url)) as server:  # type: ignore[attr-defined]
        yield server


@pytest.fixture(autouse=True)
def fresh(upstream: ScriptedUpstream) -> None:
    upstream.requests.clear()


def post(gateway: ServerThread, path: str, body: dict[str, Any] | bytes) -> httpx2.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx2.post(gateway.url + path, content=raw, headers=JSON, timeout=30)


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "assistant", "messages": USER, **extra}


def image_chat(url: str) -> dict[str, Any]:
    return chat(messages=[{"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                                       {"type": "image_url", "image_url": {"url": url}}]}])


def responses(**extra: Any) -> dict[str, Any]:
    return {"model": "assistant", "input": "hello", **extra}


def image_response(url: str) -> dict[str, Any]:
    return responses(input=[{"role": "user", "content": [{"type": "input_image", "image_url": url}]}])


def messages(**extra: Any) -> dict[str, Any]:
    return {"model": "assistant", "max_tokens": 16, "messages": USER, **extra}


def image_message(source: dict[str, Any]) -> dict[str, Any]:
    return messages(messages=[{"role": "user", "content": [{"type": "image", "source": source}]}])


OPENAI_CASES = [
    ("/v1/chat/completions", chat(temperature="hot"), "temperature", "'temperature' must be a number from 0 to 2"),
    ("/v1/chat/completions", chat(temperature=2.5), "temperature", "'temperature' must be a number from 0 to 2"),
    ("/v1/chat/completions", chat(temperature=True), "temperature", "'temperature' must be a number from 0 to 2"),
    ("/v1/chat/completions", b'{"model": "assistant", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}',
     "temperature", "'temperature' must be a number from 0 to 2"),
    ("/v1/chat/completions", chat(top_p=-0.1), "top_p", "'top_p' must be a number from 0 to 1"),
    ("/v1/chat/completions", chat(max_tokens=10**30), "max_tokens", "'max_tokens' must be an integer from 1 to 1048576"),
    ("/v1/chat/completions", chat(max_tokens=-1), "max_tokens", "'max_tokens' must be an integer from 1 to 1048576"),
    ("/v1/chat/completions", chat(max_completion_tokens=2.5), "max_completion_tokens",
     "'max_completion_tokens' must be an integer from 1 to 1048576"),
    ("/v1/chat/completions", chat(presence_penalty=3), "presence_penalty", "'presence_penalty' must be a number from -2 to 2"),
    ("/v1/chat/completions", chat(frequency_penalty="x"), "frequency_penalty", "'frequency_penalty' must be a number from -2 to 2"),
    ("/v1/chat/completions", chat(logit_bias={"50256": 500}), "logit_bias",
     "'logit_bias' must be an object of token ids to integers from -100 to 100"),
    ("/v1/chat/completions", chat(top_logprobs=21), "top_logprobs", "'top_logprobs' must be an integer from 0 to 20"),
    ("/v1/chat/completions", chat(seed=1.5), "seed", f"'seed' must be an integer from {-(2**63)} to {2**63 - 1}"),
    ("/v1/chat/completions", chat(stop=["a", 5]), "stop", "'stop' must be a string or an array of at most 4 strings"),
    ("/v1/chat/completions", image_chat("file:///etc/passwd"), "messages[0].content[1].image_url.url",
     "'messages[0].content[1].image_url.url' must be a https: or http: or data: URL (got a 'file' URL)"),
    ("/v1/chat/completions", image_chat("gopher://127.0.0.1:6379/_INFO"), "messages[0].content[1].image_url.url",
     "'messages[0].content[1].image_url.url' must be a https: or http: or data: URL (got a 'gopher' URL)"),
    ("/v1/chat/completions", image_chat("/etc/passwd"), "messages[0].content[1].image_url.url",
     "'messages[0].content[1].image_url.url' must be a https: or http: or data: URL (got no URL scheme)"),
    ("/v1/chat/completions", image_chat("https:///etc/passwd"), "messages[0].content[1].image_url.url",
     "'messages[0].content[1].image_url.url' must be a URL with a host"),
    ("/v1/responses", responses(max_output_tokens=-1), "max_output_tokens",
     "'max_output_tokens' must be an integer from 1 to 1048576"),
    ("/v1/responses", responses(temperature="hot"), "temperature", "'temperature' must be a number from 0 to 2"),
    ("/v1/responses", responses(top_p=2), "top_p", "'top_p' must be a number from 0 to 1"),
    ("/v1/responses", image_response("file:///etc/passwd"), "input[0].content[0].image_url",
     "'input[0].content[0].image_url' must be a https: or http: or data: URL (got a 'file' URL)"),
]


@pytest.mark.parametrize(("path", "body", "field", "message"), OPENAI_CASES)
def test_out_of_range_parameters_and_non_web_image_urls_get_400_naming_the_field(
    gateway: ServerThread, upstream: ScriptedUpstream, path: str, body: dict[str, Any] | bytes, field: str, message: str
) -> None:
    # R: A3, A1, G6
    response = post(gateway, path, body)
    assert (response.status_code, response.json()) == (
        400, {"error": {"message": message, "type": "invalid_request_error", "code": "invalid_request", "param": field}})
    assert upstream.requests == []


MESSAGES_CASES = [
    (messages(temperature=1.5), "'temperature' must be a number from 0 to 1"),
    (messages(temperature="hot"), "'temperature' must be a number from 0 to 1"),
    (messages(max_tokens=10**30), "'max_tokens' must be an integer from 1 to 1048576"),
    (messages(top_p=-1), "'top_p' must be a number from 0 to 1"),
    (image_message({"type": "url", "url": "file:///etc/passwd"}),
     "'messages[0].content[0].source.url' must be a https: or http: URL (got a 'file' URL)"),
    (image_message({"type": "url", "url": "data:image/png;base64,iVBORw0KGgo="}),
     "'messages[0].content[0].source.url' must be a https: or http: URL (got a 'data' URL)"),
    (image_message({"type": "base64", "media_type": "text/html,<script>", "data": "AAAA"}),
     "'messages[0].content[0].source.media_type' must be one of image/jpeg, image/png, image/gif, image/webp"),
]


@pytest.mark.parametrize(("body", "message"), MESSAGES_CASES)
def test_the_messages_api_refuses_them_in_its_own_shape(
    gateway: ServerThread, upstream: ScriptedUpstream, body: dict[str, Any], message: str
) -> None:
    # R: A2, G6
    response = post(gateway, "/v1/messages", body)
    assert (response.status_code, response.json()) == (
        400, {"type": "error", "error": {"type": "invalid_request_error", "message": message}})
    assert upstream.requests == []


PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


def test_the_documented_ranges_and_web_or_inline_images_still_reach_the_upstream(gateway: ServerThread, upstream: ScriptedUpstream) -> None:
    # R: A1, A2, A3
    edges = chat(temperature=2, top_p=0, max_tokens=1, presence_penalty=-2, frequency_penalty=2.0, seed=-1,
                 logit_bias={"50256": -100}, logprobs=True, top_logprobs=20, stop="END")
    sent = [
        post(gateway, "/v1/chat/completions", edges),
        post(gateway, "/v1/chat/completions", image_chat("https://example.com/cat.png")),
        post(gateway, "/v1/chat/completions", image_chat(PNG)),
        post(gateway, "/v1/responses", responses(temperature=0, top_p=1, max_output_tokens=1048576)),
        post(gateway, "/v1/responses", image_response("HTTP://example.com/cat.png")),
        post(gateway, "/v1/messages", messages(temperature=1, top_p=0.5)),
        post(gateway, "/v1/messages", image_message({"type": "url", "url": "https://example.com/cat.png"})),
        post(gateway, "/v1/messages", image_message({"type": "base64", "media_type": "image/png", "data": PNG.split(",")[1]})),
    ]
    assert [r.status_code for r in sent] == [200] * 8
    received = upstream.requests
    assert {k: received[0][k] for k in ("temperature", "top_p", "max_tokens", "logit_bias", "top_logprobs", "stop")} == {
        "temperature": 2, "top_p": 0, "max_tokens": 1, "logit_bias": {"50256": -100}, "top_logprobs": 20, "stop": "END"}
    assert received[2]["messages"][-1]["content"][1]["image_url"]["url"] == PNG
    assert (received[3]["temperature"], received[3]["max_tokens"]) == (0, 1048576)
    assert received[7]["messages"][-1]["content"][0]["image_url"]["url"] == PNG
