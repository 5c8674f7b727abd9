"""The `demo` upstream's script (D1): which tool it calls for which words, and what it answers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gateway.upstream.demo import Call, DemoUpstream, decide, own_text, questions

SEARCH = {"type": "function", "function": {
    "name": "search_docs", "description": "Search the toolgate documentation; returns the best matching pages.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
PAGE = {"type": "function", "function": {
    "name": "get_page", "description": "One documentation page by its slug (overview, quickstart, mcp-bridge, prompt-guard, sessions).",
    "parameters": {"type": "object", "properties": {"slug": {"type": "string"}}, "required": ["slug"]}}}
COUNT = {"type": "function", "function": {
    "name": "count_pages", "description": "Count the documentation pages.",
    "parameters": {"type": "object", "properties": {"limit": {"type": "integer"}}, "required": ["limit"]}}}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


# R: D1
def test_a_free_text_tool_takes_the_question_and_a_keyed_one_the_term_its_description_writes() -> None:
    assert decide({"messages": [_user("How does toolgate pool MCP sessions?")], "tools": [PAGE, SEARCH]})[0] == \
        Call("search_docs", {"query": "How does toolgate pool MCP sessions?"})
    assert decide({"messages": [_user("What does prompt_guard catch?")], "tools": [SEARCH, PAGE]})[0] == \
        Call("get_page", {"slug": "prompt-guard"})


# R: D1
def test_a_tool_whose_required_parameters_are_not_all_text_is_never_called() -> None:
    call, text = decide({"messages": [_user("count the documentation pages")], "tools": [COUNT]})
    assert call is None and "None of the tools offered (`count_pages`)" in text


# R: D1
def test_context_plugins_appended_is_not_read_as_the_users_question() -> None:
    content = "hello\n\n## Relevant documentation\nSearch the toolgate docs\n\n## Resource quickstart\nRun it"
    assert own_text(content) == "hello"
    call, text = decide({"messages": [_user(content)], "tools": [SEARCH]})
    assert call is None and text.endswith("Context the gateway added to your message: Relevant documentation; Resource quickstart.\n")


# R: D1, B2
def test_one_call_per_question_per_round_then_an_answer_or_a_stop_when_tools_are_disabled() -> None:
    asked = "Search the docs for sessions? And the quickstart page?"
    assert questions(asked) == ["Search the docs for sessions?", "And the quickstart page?"]
    first = decide({"messages": [_user(asked)], "tools": [SEARCH, PAGE]})[0]
    assert first == Call("search_docs", {"query": "Search the docs for sessions?"})
    after_one = [_user(asked), {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search_docs", "arguments": json.dumps(first.arguments)}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "[sessions] Sessions and conversations\n\n  A conversation   is identified"}]
    assert decide({"messages": after_one, "tools": [SEARCH, PAGE]})[0] == Call("search_docs", {"query": "And the quickstart page?"})
    call, text = decide({"messages": after_one, "tools": [SEARCH, PAGE], "tool_choice": "none"})
    assert call is None
    assert text.startswith('I called `search_docs` with {"query": "Search the docs for sessions?"}; it returned:\n'
                           "> [sessions] Sessions and conversations\n> A conversation is identified\n\n")
    assert "before I could make 1 more call(s)" in text


# R: D1
def test_a_long_result_is_quoted_shortened() -> None:
    messages = [_user("search the docs"), {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search_docs", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "word " * 200}]
    text = decide({"messages": messages, "tools": [SEARCH]})[1]
    quoted = text.splitlines()[1]
    assert quoted.startswith("> word word") and quoted.endswith(" …") and len(quoted) < 310


# R: D1, G1
def test_streamed_and_whole_turns_carry_the_same_tool_call() -> None:
    upstream = DemoUpstream("demo")
    body = {"model": "demo", "messages": [_user("search the docs")], "tools": [SEARCH]}
    whole = asyncio.run(upstream.complete(body))
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    assert whole["choices"][0]["message"]["tool_calls"][0]["function"] == {"name": "search_docs", "arguments": '{"query": "search the docs"}'}

    async def batches() -> list[dict[str, Any]]:
        return [chunk async for batch in upstream.stream(body) for chunk in batch]

    chunks = asyncio.run(batches())
    calls = [c["choices"][0]["delta"]["tool_calls"] for c in chunks if c["choices"] and "tool_calls" in c["choices"][0]["delta"]]
    assert calls[0][0]["function"] == {"name": "search_docs", "arguments": '{"query": "search the docs"}'}
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
    assert chunks[-1]["usage"]["completion_tokens"] > 0
