"""The OpenAI-compatible surface through the real app, driven by the official `openai` SDK."""

from __future__ import annotations

import json

import httpx2
import openai
import pytest

from tests.support.gateway import client, running_gateway, simple_config
from tests.support.upstream import Reply, ScriptedUpstream
from tests.support.waiting import wait_until

USER = [{"role": "user", "content": "What is toolgate?"}]


def test_non_streaming_completion_round_trips_through_the_sdk(upstream: ScriptedUpstream) -> None:
    # R: G1
    with running_gateway(simple_config(upstream.url)) as gw:
        response = client(gw).chat.completions.create(model="assistant", messages=USER, temperature=0.2)
    assert response.choices[0].message.content == "Hello from the scripted model."
    assert response.usage is not None and response.usage.total_tokens == 15
    sent = upstream.requests[0]
    assert sent["model"] == "scripted-model" and sent["messages"] == USER and sent["temperature"] == 0.2


def test_streaming_completion_arrives_as_sse_chunks_ending_with_done(upstream: ScriptedUpstream) -> None:
    # R: G1
    with running_gateway(simple_config(upstream.url)) as gw:
        stream = client(gw).chat.completions.create(
            model="assistant", messages=USER, stream=True, stream_options={"include_usage": True}
        )
        chunks = list(stream)
        raw = httpx2.post(gw.url + "/v1/chat/completions", json={"model": "assistant", "messages": USER, "stream": True}).text
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip() == "Hello from the scripted model."
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 15
    assert raw.rstrip().endswith("data: [DONE]")
    assert '"usage"' not in raw.split("data: [DONE]")[0].splitlines()[-2]  # no usage chunk unless asked


def test_models_lists_every_route(upstream: ScriptedUpstream) -> None:
    # R: G1
    config = simple_config(upstream.url)
    config["routes"].append({"model": "second", "upstream": "scripted"})
    with running_gateway(config) as gw:
        models = client(gw).models.list()
    assert sorted(m.id for m in models.data) == ["assistant", "second"]


def test_a_model_is_retrieved_by_id_and_an_unknown_one_is_a_404(upstream: ScriptedUpstream) -> None:
    # R: A3
    with running_gateway(simple_config(upstream.url)) as gw:
        model = client(gw).models.retrieve("assistant")
        with pytest.raises(openai.NotFoundError) as caught:
            client(gw).models.retrieve("nope")
    assert (model.id, model.object, model.owned_by) == ("assistant", "model", "toolgate")
    assert "model 'nope' is not served here" in caught.value.message


def test_every_content_part_the_openai_schema_allows_is_accepted(upstream: ScriptedUpstream) -> None:
    # R: A3
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "Rules."}]},
        {"role": "user", "content": [{"type": "text", "text": "Look"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                                     {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}},
                                     {"type": "file", "file": {"file_id": "f-1"}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Hm"}, {"type": "refusal", "refusal": "No."}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "done"}]},
    ]
    with running_gateway(simple_config(upstream.url)) as gw:
        client(gw).chat.completions.create(model="assistant", messages=messages)  # type: ignore[arg-type]
    assert upstream.requests[0]["messages"] == messages


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "must be a JSON object"),
        (json.dumps({"model": "assistant"}).encode(), 400, "'messages' is required"),
        (json.dumps({"model": "assistant", "messages": "hi"}).encode(), 400, "'messages' must be a non-empty array"),
        (json.dumps({"model": "assistant", "messages": [{"content": "x"}]}).encode(), 400, "'messages[0]' must be an object"),
        (json.dumps({"model": 3, "messages": USER}).encode(), 400, "'model' is required"),
        (json.dumps({"model": "assistant", "messages": USER, "stream": "yes"}).encode(), 400, "'stream' must be a boolean"),
        (json.dumps({"model": "nope", "messages": USER}).encode(), 404, "model 'nope' is not served here"),
        (json.dumps({"model": "assistant", "messages": USER, "n": 2, "stream": True}).encode(), 400, "'n' must be 1"),
        (json.dumps({"model": "assistant", "messages": [{"role": "wizard", "content": "hi"}]}).encode(), 400,
         "'messages[0].role' is 'wizard'; expected one of system, developer, user, assistant, tool, function"),
        (json.dumps({"model": "assistant", "messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}).encode(),
         400, "'messages[0].content[0].type' is 'image_url'; a system message takes content parts of type text"),
        (json.dumps({"model": "assistant", "messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]}).encode(), 400,
         "'messages[0].content[0].text' must be a string"),
        (json.dumps({"model": "assistant", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}).encode(),
         400, "'messages[0].content[0].image_url.url' must be a string"),
        (json.dumps({"model": "assistant", "messages": [{"role": "user", "content": [{"text": "no type"}]}]}).encode(), 400,
         "'messages[0].content[0]' must be an object with a string 'type'"),
        (json.dumps({"model": "assistant", "messages": [{"role": "user", "content": 7}]}).encode(), 400,
         "'messages[0].content' must be a string or an array of content parts"),
        (json.dumps({"model": "assistant", "messages": [{"role": "user"}]}).encode(), 400, "'messages[0].content' is required"),
        (json.dumps({"model": "assistant", "messages": [{"role": "tool", "content": "x"}]}).encode(), 400,
         "'messages[0].tool_call_id' is required"),
    ],
)
def test_bad_requests_get_an_openai_error_envelope(upstream: ScriptedUpstream, body: bytes, status: int, fragment: str) -> None:
    # R: G6, A3
    with running_gateway(simple_config(upstream.url)) as gw:
        response = httpx2.post(gw.url + "/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code", "param"}
    assert fragment in error["message"]
    assert upstream.requests == []


def test_oversized_body_is_refused_with_413(upstream: ScriptedUpstream) -> None:
    # R: G6
    config = simple_config(upstream.url, server={"max_body_bytes": 2048})
    big = [{"role": "user", "content": "x" * 4096}]
    with running_gateway(config) as gw:
        with pytest.raises(openai.APIStatusError) as caught:
            client(gw).chat.completions.create(model="assistant", messages=big)
    assert caught.value.status_code == 413
    assert "limit of 2048" in caught.value.message or "limit is 2048" in caught.value.message


def test_unknown_path_and_method_get_the_envelope_too(upstream: ScriptedUpstream) -> None:
    # R: G6
    with running_gateway(simple_config(upstream.url)) as gw:
        missing = httpx2.get(gw.url + "/v1/nothing")
        wrong = httpx2.get(gw.url + "/v1/chat/completions")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("reply", "status", "fragment"),
    [
        (Reply(status=429, error_message="slow down"), 429, "upstream 'scripted' is rate limiting requests: slow down"),
        (Reply(status=500), 502, "upstream 'scripted' failed (HTTP 500)"),
        (Reply(status=503), 502, "upstream 'scripted' failed (HTTP 503)"),
        (Reply(status=401), 502, "refused the gateway's credentials"),
        (Reply(status=400, error_message="context too long"), 400, "context too long"),
        (Reply(raw=b"<html>oops</html>"), 502, "not JSON"),
        (Reply(raw=b'{"unexpected": true}'), 502, "not a chat completion"),
    ],
)
def test_upstream_failures_map_to_the_right_status(upstream: ScriptedUpstream, reply: Reply, status: int, fragment: str) -> None:
    # R: G5, G6
    upstream.push(reply)
    with running_gateway(simple_config(upstream.url)) as gw:
        with pytest.raises(openai.APIStatusError) as caught:
            client(gw).chat.completions.create(model="assistant", messages=USER)
    assert caught.value.status_code == status
    assert fragment in caught.value.message


def test_upstream_that_hangs_gives_504(upstream: ScriptedUpstream) -> None:
    # R: G5
    upstream.push(Reply(hang=True))
    config = simple_config(upstream.url)
    config["upstreams"][0]["timeout_seconds"] = 0.5
    with running_gateway(config) as gw:
        with pytest.raises(openai.APIStatusError) as caught:
            client(gw).chat.completions.create(model="assistant", messages=USER)
    upstream.release.set()
    assert caught.value.status_code == 504
    assert "upstream 'scripted' did not answer within 0.5s" in caught.value.message


def test_unreachable_upstream_gives_502_naming_it() -> None:
    # R: G5
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with running_gateway(simple_config(dead)) as gw:
        with pytest.raises(openai.APIStatusError) as caught:
            client(gw).chat.completions.create(model="assistant", messages=USER)
    assert caught.value.status_code == 502
    assert "upstream 'scripted' is unreachable" in caught.value.message


def test_stream_cut_by_the_upstream_ends_with_an_error_event(upstream: ScriptedUpstream) -> None:
    # R: G1, G6
    upstream.push(Reply(content="one two three four", cut_stream_after=3))
    with running_gateway(simple_config(upstream.url)) as gw:
        with pytest.raises(openai.APIError) as caught:
            list(client(gw).chat.completions.create(model="assistant", messages=USER, stream=True))
    assert "ended the stream without [DONE]" in str(caught.value)


def test_stream_error_before_the_first_byte_keeps_its_status(upstream: ScriptedUpstream) -> None:
    # R: G5
    upstream.push(Reply(status=429))
    with running_gateway(simple_config(upstream.url)) as gw:
        with pytest.raises(openai.RateLimitError):
            list(client(gw).chat.completions.create(model="assistant", messages=USER, stream=True))


def test_metadata_conversation_id_is_not_forwarded_upstream(upstream: ScriptedUpstream) -> None:
    # R: G4
    with running_gateway(simple_config(upstream.url)) as gw:
        client(gw).chat.completions.create(model="assistant", messages=USER, metadata={"conversation_id": "abc", "team": "x"})
    assert upstream.requests[0]["metadata"] == {"team": "x"}


def test_client_disconnect_mid_stream_cancels_the_upstream_request(upstream: ScriptedUpstream) -> None:
    # R: G1
    upstream.push(Reply(content="one two three four", hang_stream_after=3))
    with running_gateway(simple_config(upstream.url)) as gw:
        with httpx2.stream("POST", gw.url + "/v1/chat/completions", json={"model": "assistant", "messages": USER, "stream": True}) as response:
            first = next(response.iter_lines())
        # the client has gone; the gateway must drop its upstream stream, not wait for it
        assert upstream.stream_closed.wait(10), "the upstream stream was not closed after the client left"
        counted = wait_until(lambda: 'toolgate_requests_total{route="assistant",status="499"} 1.0' in httpx2.get(gw.url + "/metrics").text)
    assert first.startswith("data: ")
    assert upstream.release.is_set() is False
    assert counted, "a client that left mid-stream is counted as status 499"


def test_stream_that_stalls_after_the_first_byte_ends_at_the_request_deadline(upstream: ScriptedUpstream) -> None:
    # R: G1, G5
    upstream.push(Reply(content="one two three four", hang_stream_after=2))
    config = simple_config(upstream.url, server={"request_timeout_seconds": 1})
    config["upstreams"][0]["timeout_seconds"] = 60
    with running_gateway(config) as gw:
        with pytest.raises(openai.APIError) as caught:
            list(client(gw).chat.completions.create(model="assistant", messages=USER, stream=True))
    upstream.release.set()
    assert "longer than server.request_timeout_seconds (1s)" in str(caught.value)
