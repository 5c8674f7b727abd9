"""The tool loop (B1, B2, G7): call the model, run the gateway's tool calls, call it again.

Plain code fed by callables (`TurnIO`): it imports no HTTP or MCP code. Tool failures reach the
model as tool results; only gateway failures (refusals, upstream errors) raise.

Streaming: every round is streamed from the upstream. Text deltas reach the client as they come;
tool-call deltas are held back until the round ends. A round that calls gateway tools is executed
and followed by another round; no intermediate `finish_reason: tool_calls` reaches the client.
A round that calls client tools (G7) ends the response with those calls.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

CAP_MESSAGE = "not executed: the gateway's limit of consecutive tool calls was reached"
UNKNOWN_TOOL = "the tool failed: no tool named {name!r} is offered here"
"""What the model reads for a call to a name that is neither a gateway tool nor the client's (B3)."""


@dataclass
class TurnIO:
    """The loop's view of the world."""

    complete: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
    stream: Callable[[dict[str, Any]], AsyncIterator[list[dict[str, Any]]]]
    """One streamed turn, as batches of chunks (what arrived together)."""
    call_tool: Callable[[str, str], Awaitable[str]]
    """(exposed tool name, JSON arguments) → the text the model reads."""
    gateway_tools: frozenset[str]
    max_tool_calls: int
    client_tools: frozenset[str] = frozenset()
    """The names the client sent in `tools`: calls to them go back to the client (G7)."""
    answers_unknown: bool = False
    """True on a route that runs tools: a call to any other name (a tool outside a filter, one
    this request could not list, a made-up one) is answered with `UNKNOWN_TOOL`, not run and not
    handed to the client (B3). A route without tool plugins passes the model's calls through."""
    check_client_calls: Callable[[list[dict[str, Any]]], Awaitable[dict[str, str]]] | None = None
    """The firewall's look at the model's calls to client tools before they go back (T3): call id
    → the tool error the model reads instead, for each call it holds."""


@dataclass
class LoopStats:
    tool_calls: int = 0
    rounds: int = 0
    cap_reached: bool = False
    usage: dict[str, int] = field(default_factory=dict)

    def add_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = usage.get(key)
            if isinstance(value, int):
                self.usage[key] = self.usage.get(key, 0) + value

    def summary(self) -> dict[str, Any]:
        return {"tool_calls": self.tool_calls, "rounds": self.rounds, "tool_cap_reached": self.cap_reached}


def _arguments(value: Any) -> str:
    """Arguments as the JSON text OpenAI specifies; a model that sent an object gets it encoded."""
    if isinstance(value, str):
        return value
    if value is None:
        return "{}"
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return "{}"


def normalise_calls(calls: Any) -> list[dict[str, Any]]:
    """The model's tool calls in the shape OpenAI clients and upstreams require: entries that are
    not objects or carry no string name (nobody could run them) are dropped; a missing id is
    generated (the tool message must answer an id); arguments become JSON text."""
    if not isinstance(calls, list):
        return []
    out = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        fn = call.get("function") if isinstance(call.get("function"), dict) else {}
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            continue
        call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else f"call_{uuid.uuid4().hex[:24]}"
        out.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": _arguments(fn.get("arguments"))}})
    return out


def _split_calls(calls: list[dict[str, Any]], io: TurnIO) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the calls the gateway answers, the client's calls)."""

    def ours(name: str) -> bool:
        return name in io.gateway_tools or (io.answers_unknown and name not in io.client_tools)

    mine = [c for c in calls if ours(c["function"]["name"])]
    theirs = [c for c in calls if not ours(c["function"]["name"])]
    return mine, theirs


async def _held_client_calls(
    io: TurnIO, mine: list[dict[str, Any]], theirs: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, str]]:
    """Client calls the firewall holds join the gateway's round, answered with their tool error
    (the model reads why); the rest still go back to the client (T3)."""
    if not theirs or io.check_client_calls is None:
        return mine, theirs, {}
    answered = await io.check_client_calls(theirs)
    if not answered:
        return mine, theirs, {}
    return mine + [c for c in theirs if c["id"] in answered], [c for c in theirs if c["id"] not in answered], answered


async def _run_round(
    io: TurnIO, stats: LoopStats, messages: list[dict[str, Any]], message: dict[str, Any], calls: list[dict[str, Any]],
    answered: dict[str, str] | None = None,
) -> None:
    """Execute one round's gateway calls concurrently (each counts toward the cap) and append
    the assistant message and one tool message per call. `answered` calls are not run: their
    text is already known (client calls the firewall held)."""
    remaining = max(io.max_tool_calls - stats.tool_calls, 0)
    run, refused = calls[:remaining], calls[remaining:]

    async def one(call: dict[str, Any]) -> str:
        name = call["function"]["name"]
        if answered and call["id"] in answered:
            return answered[call["id"]]
        if name not in io.gateway_tools:
            return UNKNOWN_TOOL.format(name=name[:64])
        return await io.call_tool(name, call["function"]["arguments"] or "{}")

    results: list[str] = []
    if run:
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(one(call)) for call in run]
        except* Exception as eg:  # a refusal or gateway failure in one call cancels the others
            raise eg.exceptions[0] from None
        results = [t.result() for t in tasks]
    stats.tool_calls += len(run)
    messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": calls})
    for call, text in zip(calls, results + [CAP_MESSAGE] * len(refused)):
        messages.append({"role": "tool", "tool_call_id": call.get("id"), "content": text})
    if stats.tool_calls >= io.max_tool_calls:
        stats.cap_reached = True


def _turn_body(body: dict[str, Any], messages: list[dict[str, Any]], stats: LoopStats) -> dict[str, Any]:
    turn = {**body, "messages": messages}
    if stats.cap_reached and body.get("tools"):
        turn["tool_choice"] = "none"  # the last call: tools disabled so the client gets an answer (B2)
    return turn


async def run_completion(body: dict[str, Any], io: TurnIO) -> tuple[dict[str, Any], LoopStats]:
    """Non-streaming: the final `chat.completion`, usage summed over every upstream call (G1)."""
    stats = LoopStats()
    messages = list(body["messages"])
    while True:
        response = await io.complete(_turn_body(body, messages, stats))
        stats.rounds += 1
        stats.add_usage(response.get("usage"))
        choice = response["choices"][0]
        message = choice["message"]
        mine, theirs = _split_calls(normalise_calls(message.get("tool_calls")), io)
        mine, theirs, answered = await _held_client_calls(io, mine, theirs)
        if theirs:  # G7: the client's own tool calls end the loop and go back to the client
            message["tool_calls"] = theirs
            choice["finish_reason"] = "tool_calls"
        if theirs or not mine or stats.cap_reached:
            if not theirs:  # nothing for the client to run: gateway calls past the cap, or malformed ones
                message.pop("tool_calls", None)
                if choice.get("finish_reason") == "tool_calls":
                    choice["finish_reason"] = "stop"
            if stats.usage:
                response["usage"] = {**(response.get("usage") or {}), **stats.usage}
            return response, stats
        await _run_round(io, stats, messages, message, mine, answered)


class _ChunkAccumulator:
    """Rebuilds tool calls from streamed deltas (id and name first, arguments in fragments)."""

    def __init__(self) -> None:
        self.calls: dict[int, dict[str, Any]] = {}
        self.content: list[str] = []

    def add(self, delta: dict[str, Any]) -> None:
        if isinstance(delta.get("content"), str):
            self.content.append(delta["content"])
        parts = delta.get("tool_calls")
        for part in parts if isinstance(parts, list) else []:
            if not isinstance(part, dict):
                continue
            index = part.get("index") if isinstance(part.get("index"), int) else 0
            call = self.calls.setdefault(index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
            if isinstance(part.get("id"), str) and part["id"]:
                call["id"] = part["id"]
            fn = part.get("function") if isinstance(part.get("function"), dict) else {}
            if isinstance(fn.get("name"), str):
                call["function"]["name"] += fn["name"]
            if fn.get("arguments") is not None:
                call["function"]["arguments"] += _arguments(fn["arguments"])

    def message(self) -> dict[str, Any]:
        return {"role": "assistant", "content": "".join(self.content) or None}

    def tool_calls(self) -> list[dict[str, Any]]:
        return normalise_calls([self.calls[i] for i in sorted(self.calls)])


async def run_stream(
    body: dict[str, Any], io: TurnIO, include_usage: bool, stats: LoopStats | None = None
) -> AsyncGenerator[list[dict[str, Any]], None]:
    """Streaming: yields the batches of chunks the client receives (one write each); the last
    batch is an `Ending`: the finishing chunk, which carries a `toolgate` summary, and the usage.
    `stats`, when given, is filled in as the loop goes (the caller reads usage and tool calls)."""
    stats = stats if stats is not None else LoopStats()
    messages = list(body["messages"])
    head: dict[str, Any] | None = None
    role_sent = False
    while True:
        acc = _ChunkAccumulator()
        finish: str | None = None
        async for batch in io.stream(_turn_body(body, messages, stats)):
            out: list[dict[str, Any]] = []
            for chunk in batch:
                stats.add_usage(chunk.get("usage"))
                choices = chunk.get("choices") or []
                if not choices:
                    continue
                if head is None:
                    head = {k: chunk[k] for k in ("id", "object", "created", "model") if k in chunk}
                choice = choices[0] if isinstance(choices[0], dict) else {}
                delta = dict(choice["delta"]) if isinstance(choice.get("delta"), dict) else {}
                acc.add(delta)
                finish = choice.get("finish_reason") or finish
                delta.pop("tool_calls", None)
                if role_sent:
                    delta.pop("role", None)
                if delta.get("content") or (delta.get("role") and not role_sent):
                    role_sent = role_sent or "role" in delta
                    out.append({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
            if out:
                yield out
        stats.rounds += 1
        mine, theirs = _split_calls(acc.tool_calls(), io)
        mine, theirs, answered = await _held_client_calls(io, mine, theirs)
        if mine and not theirs and not stats.cap_reached:
            await _run_round(io, stats, messages, acc.message(), mine, answered)
            continue
        yield _ending(head, theirs, finish, stats, include_usage)
        return


class Ending(list[dict[str, Any]]):
    """The last batch of a stream (an explicit value: the writer ends the stream with it, in the
    same write)."""


def _ending(
    head: dict[str, Any] | None, client_calls: list[dict[str, Any]], finish: str | None, stats: LoopStats, include_usage: bool
) -> Ending:
    """The chunks that end a streamed response: the client's tool calls (G7), the finish reason
    with the loop's summary, and the summed usage when the client asked for it."""
    base = {**(head or {}), "object": "chat.completion.chunk"}
    chunks = []
    if client_calls:
        calls = [{**copy.deepcopy(c), "index": i} for i, c in enumerate(client_calls)]
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": None}]})
        finish = "tool_calls"
    elif finish == "tool_calls" or finish is None:
        finish = "stop"
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "toolgate": stats.summary()})
    if include_usage:
        # the SDK's CompletionUsage has three required counts, even when the upstream reported none
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, **stats.usage}
        chunks.append({**base, "choices": [], "usage": usage})
    return Ending(chunks)
