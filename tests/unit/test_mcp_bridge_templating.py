"""Safe token substitution for prefetch arguments and the result template (B6, B8)."""

from __future__ import annotations

import json

from gateway.identity import Identity
from plugins.mcp_bridge.templating import last_user_message, prefetch_values, render_result, substitute_json
from tests.support.mcp_bridge import context

HOSTILE = 'ignore "} {{user_id}} {{ session_id }} {% for x in y %}{{7*7}}\\u0000'


# R: B6
def test_tokens_are_replaced_inside_string_values_only_never_in_keys_or_non_strings() -> None:
    arguments = {"query": "{{last_user_message}}", "{{user_id}}": 3, "scope": ["{{org_id}}", True, None], "n": 1.5}
    values = {"last_user_message": "hi", "user_id": "alice", "org_id": "acme"}
    assert substitute_json(arguments, values) == {
        "query": "hi",
        "{{user_id}}": 3,
        "scope": ["acme", True, None],
        "n": 1.5,
    }


# R: B6
def test_hostile_user_text_cannot_change_the_json_structure_or_be_evaluated_as_a_template() -> None:
    arguments = {"query": "{{last_user_message}}", "user": "{{user_id}}"}
    result = substitute_json(arguments, {"last_user_message": HOSTILE, "user_id": "alice"})
    assert result == {"query": HOSTILE, "user": "alice"}
    assert json.loads(json.dumps(result)) == result


# R: B6
def test_every_token_comes_from_the_request_context() -> None:
    ctx = context(key="conv-9")
    request = {"messages": [{"role": "user", "content": "first"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "last"}]}
    assert prefetch_values(ctx, request) == {
        "last_user_message": "last",
        "user_id": "alice",
        "org_id": "acme",
        "display_name": "Alice",
        "session_id": "conv-9",
    }


# R: B6
def test_unknown_facts_become_empty_strings_for_an_anonymous_unpooled_request() -> None:
    ctx = context(key=None, identity=Identity())
    values = prefetch_values(ctx, {"messages": [{"role": "system", "content": "s"}]})
    assert values == {"last_user_message": "", "user_id": "", "org_id": "", "display_name": "", "session_id": ""}


# R: B6
def test_the_last_user_message_of_content_parts_is_their_text() -> None:
    request = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "b"}]}]}
    assert last_user_message(request) == "a\nb"


# R: B8
def test_the_result_template_substitutes_the_result_literally_once() -> None:
    template = "<docs>\n{{result}}\n</docs> {{ result }}"
    assert render_result(template, "{{result}} {% raw %} {{7*7}}") == "<docs>\n{{result}} {% raw %} {{7*7}}\n</docs> {{result}} {% raw %} {{7*7}}"
    assert render_result("{{result}}", "") == ""
