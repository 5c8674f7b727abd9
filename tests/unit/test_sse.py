"""Reading an upstream's server-sent events (G1)."""

from gateway.upstream.openai_compat import SseEvents


def test_events_split_across_reads_are_joined_and_comments_skipped() -> None:
    # R: G1
    events = SseEvents()
    assert events.feed(b'data: {"a"') == []
    assert events.feed(b': 1}\n\n: keep-alive\n\ndata: {"b": 2}\n\ndata: [DO') == [b'{"a": 1}', b'{"b": 2}']
    assert events.feed(b"NE]\n\n") == [b"[DONE]"]


def test_crlf_line_ends_and_multi_line_data_are_understood() -> None:
    # R: G1
    events = SseEvents()
    assert events.feed(b"event: x\r\ndata: {\r\ndata: \"c\": 3}\r\n\r") == []
    assert events.feed(b"\n") == [b'{\n"c": 3}']
