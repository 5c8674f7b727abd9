"""What an audit record keeps of a call's arguments and whether the call writes (F4)."""

from __future__ import annotations

from gateway.bridge.audit_args import is_mutating, reduce_args
from tests.support import canary


def test_identifiers_are_kept_and_everything_else_is_type_and_length() -> None:
    # R: F4
    args = {
        "owner": "acme", "repo": "site", "path": "src/app.py", "query": "bug label:p1", "cloudId": "c-1",
        "issueId": 42, "body": "Please fix " * 10, "labels": ["a", "b"], "options": {"x": 1}, "draft": True,
    }
    assert reduce_args(args) == {
        "owner": "acme", "repo": "site", "path": "src/app.py", "query": "bug label:p1", "cloudId": "c-1",
        "issueId": 42, "body": {"type": "string", "length": 110}, "labels": {"type": "array", "length": 2},
        "options": {"type": "object", "length": 1}, "draft": {"type": "boolean"},
    }


def test_secrets_never_survive_even_under_identifier_keys() -> None:
    # R: F4, B4
    args = {
        "token": "abc", "api_key": "k", "query": "ghp_" + "a" * 36, "id": "Bearer xyz",
        "repo": "sk-" + "b" * 30, "owner": canary.CONNECTION_TOKEN,
    }
    reduced = reduce_args(args, scrub=lambda text: text.replace(canary.CONNECTION_TOKEN, "[redacted]"))
    assert reduced == {
        "token": {"type": "string", "length": 3}, "api_key": {"type": "string", "length": 1},
        "query": {"type": "string", "length": 40}, "id": {"type": "string", "length": 10},
        "repo": {"type": "string", "length": 33}, "owner": {"type": "string", "length": len(canary.CONNECTION_TOKEN)},
    }


def test_long_identifier_values_are_reduced_too() -> None:
    # R: F4
    assert reduce_args({"query": "word " * 100}) == {"query": {"type": "string", "length": 500}}


def test_writing_tools_are_mutating_and_reading_tools_are_not() -> None:
    # R: F4
    for name in ("create_issue", "updatePage", "delete-branch", "merge_pull_request", "gh__push_files", "addComment"):
        assert is_mutating(name), name
    for name in ("search_repositories", "get_file_contents", "list_issues", "gh__read_page", "created_by_me_report"):
        assert not is_mutating(name), name
