"""The tool loop with a scripted model and fake tools (B1, B2, G1, G7)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.errors import GuardBlocked
from gateway.loop import CAP_MESSAGE, TurnIO, run_completion, run_stream


def completion(content: str | None = None, calls: list[tuple[str, dict[str, Any]]] | None = None, usage: int = 3) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, (n, a) in enumerate(calls)
        ]
    return {"id": "x", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": usage, "completion_tokens": 1, "total_tokens": usage + 1}}


def as_chunks(resp: dict[str, Any]) -> list[dict[str, Any]]:
    msg = resp["choices"][0]["message"]
    chunks = [{"id": "x", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": msg["content"] or ""}}]}]
    for i, call in enumerate(msg.get("tool_calls") or []):
        chunks.append({"id": "x", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, "id": call["id"], "function": {"name": call["function"]["name"], "arguments": ""}}]}}]})
        chunks.append({"id": "x", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, "function": {"arguments": call["function"]["arguments"]}}]}}]})
    chunks.append({"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": resp["choices"][0]["finish_reason"]}]})
    chunks.append({"id": "x", "choices": [], "usage": resp["usage"]})
    return chunks


class Script:
    def __init__(self, *turns: dict[str, Any]) -> None:
        self.turns = list(turns)
        self.bodies: list[dict[str, Any]] = []
        self.tool_log: list[tuple[str, str]] = []

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(json.loads(json.dumps(body)))
        return self.turns.pop(0)

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
        self.bodies.append(json.loads(json.dumps(body)))
        for chunk in as_chunks(self.turns.pop(0)):
            yield [chunk]

    async def call_tool(self, name: str, arguments: str) -> str:
        self.tool_log.append((name, arguments))
        return f"result of {name}"

    def io(self, gateway: set[str], cap: int = 10) -> TurnIO:
        return TurnIO(self.complete, self.stream, self.call_tool, frozenset(gateway), cap)


BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "search"}}]}


async def test_gateway_tool_result_is_fed_back_and_the_model_called_again() -> None:
    # R: B1, G1
    script = Script(completion(calls=[("search", {"q": "x"})]), completion("done"))
    response, stats = await run_completion(dict(BODY), script.io({"search"}))
    assert response["choices"][0]["message"] == {"role": "assistant", "content": "done"}
    assert script.tool_log == [("search", '{"q": "x"}')]
    assert script.bodies[1]["messages"][-1] == {"role": "tool", "tool_call_id": "c0", "content": "result of search"}
    assert script.bodies[1]["messages"][-2]["tool_calls"][0]["function"]["name"] == "search"
    assert response["usage"] == {"prompt_tokens": 6, "completion_tokens": 2, "total_tokens": 8}
    assert (stats.tool_calls, stats.rounds, stats.cap_reached) == (1, 2, False)


async def test_cap_counts_parallel_calls_and_ends_with_a_tool_less_call() -> None:
    # R: B2
    script = Script(completion(calls=[("search", {"q": "1"}), ("search", {"q": "2"}), ("search", {"q": "3"})]), completion("final"))
    response, stats = await run_completion(dict(BODY), script.io({"search"}, cap=2))
    assert [a for _, a in script.tool_log] == ['{"q": "1"}', '{"q": "2"}']
    tool_messages = [m for m in script.bodies[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["result of search", "result of search", CAP_MESSAGE]
    assert script.bodies[1]["tool_choice"] == "none"
    assert response["choices"][0]["message"]["content"] == "final"
    assert stats.cap_reached is True


async def test_parallel_calls_of_one_turn_run_concurrently() -> None:
    # R: B2
    both_started = asyncio.Event()
    started = 0

    async def call_tool(name: str, arguments: str) -> str:
        nonlocal started
        started += 1
        if started == 2:
            both_started.set()
        await asyncio.wait_for(both_started.wait(), 5)  # deadlocks unless the calls overlap
        return "ok"

    script = Script(completion(calls=[("search", {}), ("search", {})]), completion("done"))
    io = TurnIO(script.complete, script.stream, call_tool, frozenset({"search"}), 10)
    response, stats = await run_completion(dict(BODY), io)
    assert stats.tool_calls == 2 and response["choices"][0]["message"]["content"] == "done"


async def test_client_tool_calls_go_back_to_the_client() -> None:
    # R: G7
    script = Script(completion(calls=[("client_fn", {"a": 1})]))
    response, stats = await run_completion(dict(BODY), script.io({"search"}))
    choice = response["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["client_fn"]
    assert script.tool_log == [] and stats.tool_calls == 0


async def test_gateway_and_client_tools_in_one_request() -> None:
    # R: G7
    script = Script(completion(calls=[("search", {})]), completion(calls=[("client_fn", {})]))
    response, stats = await run_completion(dict(BODY), script.io({"search"}))
    assert script.tool_log == [("search", "{}")]
    assert response["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "client_fn"
    assert response["usage"]["total_tokens"] == 8


async def test_a_refusal_in_a_tool_call_stops_the_loop() -> None:
    # R: B13
    async def refuse(name: str, arguments: str) -> str:
        raise GuardBlocked(inspector="guard", server="docs", source=name, rules=["r1"], score=0.9)

    script = Script(completion(calls=[("search", {})]), completion("never"))
    io = TurnIO(script.complete, script.stream, refuse, frozenset({"search"}), 10)
    with pytest.raises(GuardBlocked):
        await run_completion(dict(BODY), io)
    assert len(script.bodies) == 1


async def test_streaming_hides_tool_rounds_and_sums_usage() -> None:
    # R: G1, B1
    script = Script(completion(calls=[("search", {"q": "x"})], usage=4), completion("the answer", usage=5))
    chunks = [c async for batch in run_stream(dict(BODY, stream=True), script.io({"search"}), include_usage=True) for c in batch]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0].get("finish_reason")]
    assert finishes == ["stop"]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "the answer"
    assert not any("tool_calls" in c["choices"][0]["delta"] for c in chunks if c["choices"])
    assert chunks[-1]["usage"] == {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    assert chunks[-2]["toolgate"] == {"tool_calls": 1, "rounds": 2, "tool_cap_reached": False}


async def test_streaming_returns_client_tool_calls_with_finish_reason_tool_calls() -> None:
    # R: G7
    script = Script(completion(calls=[("client_fn", {"a": 1})]))
    chunks = [c async for batch in run_stream(dict(BODY, stream=True), script.io({"search"}), include_usage=False) for c in batch]
    calls = [c["choices"][0]["delta"]["tool_calls"] for c in chunks if c["choices"] and "tool_calls" in c["choices"][0]["delta"]]
    assert calls == [[{"id": "c0", "type": "function", "function": {"name": "client_fn", "arguments": '{"a": 1}'}, "index": 0}]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def _raw(calls: Any, content: str | None = None) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "tool_calls": calls}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


async def test_malformed_gateway_tool_calls_are_repaired_not_a_crash() -> None:
    # R: B1
    calls = [
        {"type": "function", "function": {"name": "search", "arguments": {"q": "x"}}},  # no id, object arguments
        "not a call",
        {"id": "c2", "function": None},
    ]
    script = Script(_raw(calls), completion("done"))
    response, stats = await run_completion(dict(BODY), script.io({"search"}))
    assert response["choices"][0]["message"] == {"role": "assistant", "content": "done"}
    assert script.tool_log == [("search", '{"q": "x"}')]
    sent = script.bodies[1]["messages"]
    call_id = sent[-2]["tool_calls"][0]["id"]
    assert call_id.startswith("call_")
    assert sent[-2]["tool_calls"] == [{"id": call_id, "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}]
    assert sent[-1] == {"role": "tool", "tool_call_id": call_id, "content": "result of search"}


async def test_client_tool_call_with_object_arguments_and_no_id_reaches_the_client_well_formed() -> None:
    # R: G7
    script = Script(_raw([{"function": {"name": "lookup", "arguments": {"k": 1}}}, {"id": "c1", "function": {"name": ["search"]}}]))
    response, _ = await run_completion(dict(BODY), script.io({"search"}))
    calls = response["choices"][0]["message"]["tool_calls"]
    assert calls == [{"id": calls[0]["id"], "type": "function", "function": {"name": "lookup", "arguments": '{"k": 1}'}}]
    assert calls[0]["id"].startswith("call_")
    assert response["choices"][0]["finish_reason"] == "tool_calls"
    assert script.tool_log == []


async def test_tool_calls_that_are_not_a_list_end_the_loop_without_them() -> None:
    # R: B1
    script = Script(_raw("garbage", content="hi"))
    response, _ = await run_completion(dict(BODY), script.io({"search"}))
    assert response["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
    assert response["choices"][0]["finish_reason"] == "stop"


async def test_streamed_malformed_tool_call_deltas_do_not_crash() -> None:
    # R: B1, G1
    async def stream(body: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
        yield [{"id": "x", "choices": ["bad"]},
               {"id": "x", "choices": [{"index": 0, "delta": "bad"}]},
               {"id": "x", "choices": [{"index": 0, "delta": {"tool_calls": ["bad", {"index": None, "function": {"name": 5}}, {"index": None, "function": {"name": "lookup", "arguments": {"a": 1}}}]}}]},
               {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]

    script = Script()
    io = TurnIO(script.complete, stream, script.call_tool, frozenset({"search"}), 10)
    batches = [b async for b in run_stream(dict(BODY), io, include_usage=False)]
    calls = batches[-1][0]["choices"][0]["delta"]["tool_calls"]
    assert [(c["index"], c["type"], c["function"]) for c in calls] == [(0, "function", {"name": "lookup", "arguments": '{"a": 1}'})]
    assert calls[0]["id"].startswith("call_")
    assert batches[-1][1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_streamed_usage_chunk_has_every_count_even_when_the_upstream_sent_none() -> None:
    # R: G1
    async def stream(body: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
        yield [{"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}]

    script = Script()
    io = TurnIO(script.complete, stream, script.call_tool, frozenset(), 10)
    batches = [b async for b in run_stream(dict(BODY), io, include_usage=True)]
    assert batches[-1][-1]["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
