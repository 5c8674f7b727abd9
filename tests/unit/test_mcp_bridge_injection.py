"""Where injected context goes (B12)."""

from __future__ import annotations

import pytest

from gateway.injection import ContextBlock, inject

BLOCKS = [ContextBlock("Docs", "alpha"), ContextBlock("Resource docs://index", "beta")]
TEXT = "## Docs\nalpha\n\n## Resource docs://index\nbeta"


# R: B12
def test_context_is_appended_to_a_string_last_user_message() -> None:
    request = {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}
    assert inject(request, BLOCKS) == {
        "model": "m",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": f"q\n\n{TEXT}"}],
    }
    assert request["messages"][1]["content"] == "q"


# R: B12
def test_context_is_appended_as_a_text_part_to_a_list_of_parts() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:x"}}
    request = {"messages": [{"role": "user", "content": [{"type": "text", "text": "q"}, image]}]}
    assert inject(request, BLOCKS)["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "q"}, image, {"type": "text", "text": TEXT}]}
    ]


# R: B12
def test_the_last_user_message_is_completed_even_when_later_messages_follow() -> None:
    request = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
            {"role": "tool", "tool_call_id": "1", "content": "r"},
        ]
    }
    messages = inject(request, BLOCKS)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[0]["content"] == f"q\n\n{TEXT}"


# R: B12
def test_without_a_user_message_the_block_forms_a_user_message_of_its_own() -> None:
    request = {"messages": [{"role": "system", "content": "s"}]}
    assert inject(request, BLOCKS)["messages"] == [{"role": "system", "content": "s"}, {"role": "user", "content": TEXT}]


# R: B12
def test_an_empty_user_message_receives_the_block_without_a_leading_gap_and_no_user_message_is_added() -> None:
    request = {"messages": [{"role": "user", "content": ""}]}
    assert inject(request, BLOCKS)["messages"] == [{"role": "user", "content": TEXT}]


# R: B12
@pytest.mark.parametrize(
    "roles",
    [
        ["user"],
        ["system", "user", "assistant"],
        ["user", "assistant", "tool"],
        ["system", "assistant"],
        ["assistant", "tool"],
        ["system"],
        ["user", "assistant", "user", "assistant", "tool", "tool"],
    ],
)
def test_injection_never_leaves_two_consecutive_user_messages_whatever_the_last_message_is(roles: list[str]) -> None:
    request = {"messages": [{"role": role, "content": role} for role in roles]}
    messages = inject(request, BLOCKS)["messages"]
    out = [m["role"] for m in messages]
    assert all(not (a == b == "user") for a, b in zip(out, out[1:]))
    assert sum(TEXT in str(m["content"]) for m in messages) == 1
    assert out == (roles if "user" in roles else [*roles, "user"])


# R: B12
def test_no_blocks_leave_the_request_unchanged() -> None:
    request = {"messages": [{"role": "user", "content": "q"}]}
    assert inject(request, []) is request
