"""gateway/json_bytes.py (issue 35): orjson's bytes mean what json.dumps wrote, and what orjson
refuses is written as json.dumps wrote it."""

from __future__ import annotations

import json

import pytest

from gateway.json_bytes import json_bytes


def test_the_same_json_values_as_json_dumps_in_utf_8() -> None:
    value = {"model": "m", "choices": [{"delta": {"content": "héllo ✓ 😀"}, "n": 1, "x": 0.5, "ok": None}]}
    assert json.loads(json_bytes(value)) == value
    assert "😀".encode() in json_bytes(value)  # UTF-8, not \\u escapes


def test_what_orjson_refuses_is_written_as_json_dumps_wrote_it() -> None:
    assert json_bytes({1: "a"}) == json.dumps({1: "a"}, ensure_ascii=False).encode()  # a non-string key
    assert json.loads(json_bytes({"seed": 10**30})) == {"seed": 10**30}  # an integer past 64 bits, exact
    lone = {"text": "\ud800"}  # json.loads lets a lone surrogate through in an escape
    assert json_bytes(lone, ascii=True) == json.dumps(lone).encode()  # the upstream body: escaped, as before
    with pytest.raises(UnicodeEncodeError):  # an answer to the client: fails as json.dumps(...).encode() did
        json_bytes(lone)


def test_default_turns_other_objects_into_json() -> None:
    from pathlib import PurePosixPath

    assert json.loads(json_bytes({"at": PurePosixPath("/tmp/x")}, default=str)) == {"at": "/tmp/x"}
    with pytest.raises(TypeError):
        json_bytes({"at": PurePosixPath("/tmp/x")})


def test_read_json_reads_what_json_loads_reads_and_refuses_what_it_refuses() -> None:
    from gateway.json_bytes import read_json

    for raw in (b'{"choices": [{"delta": {"content": "h\\u00e9 \\ud83d\\ude00"}}], "created": 1733400000}',
                b'{"seed": 123456789012345678901234}', b'{"x": NaN}', b'{"text": "\\ud800"}', b"\xef\xbb\xbf[1]"):
        assert repr(read_json(raw)) == repr(json.loads(raw))  # repr: NaN != NaN
    for raw in (b"{bad", b'{"a": 1', b"\xff"):
        with pytest.raises(ValueError):
            read_json(raw)
