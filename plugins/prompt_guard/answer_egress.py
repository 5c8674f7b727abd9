"""Egress (T5) applied to the model's answer: the request's provenance in, the answer rewritten.

`plugins.prompt_guard.egress` decides what a link or image in a text may carry; this module feeds
it the request's context as it grows (tool results arrive while the answer streams) and applies it
to a whole `chat.completion` or to a stream's text deltas.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.plugins import AnswerFilter
from gateway.provenance import Provenance
from plugins.prompt_guard.config import EgressSettings
from plugins.prompt_guard.egress import EgressContext, EgressPolicy, Neutralised, StreamingNeutraliser, neutralise

Counter = Callable[[str, str], None]
"""Called once per neutralised link or image: (kind, reason)."""


def policy_of(settings: EgressSettings) -> EgressPolicy:
    return EgressPolicy(allowed_hosts=tuple(settings.allowed_hosts), images=settings.images)


class _Context:
    """An `EgressContext` kept in step with a request's provenance."""

    def __init__(self, provenance: Provenance) -> None:
        self._provenance = provenance
        self._seen = len(provenance.segments)
        self.context = EgressContext(provenance.texts(False), provenance.texts(True))

    def sync(self) -> EgressContext:
        segments = self._provenance.segments
        for segment in segments[self._seen:]:
            if not segment.trusted:
                self.context.add_untrusted(segment.raw)
        self._seen = len(segments)
        return self.context


def _report(done: list[Neutralised], count: Counter) -> None:
    for item in done:
        count(item.kind, item.reason)


def neutralise_answer(response: dict[str, Any], provenance: Provenance, settings: EgressSettings, count: Counter) -> None:
    """Rewrite the answer text of a whole `chat.completion` in place."""
    choices = response.get("choices") or []
    message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("content"), str):
        return
    text, done = neutralise(message["content"], policy_of(settings), _Context(provenance).context)
    message["content"] = text
    _report(done, count)


class EgressFilter(AnswerFilter):
    """The same over a streamed answer; the context is re-read before each delta."""

    def __init__(self, provenance: Provenance, settings: EgressSettings, count: Counter) -> None:
        self._context = _Context(provenance)
        self._stream = StreamingNeutraliser(policy_of(settings), self._context.context)
        self._count = count
        self._reported = 0

    def feed(self, text: str) -> str:
        self._context.sync()
        out = self._stream.feed(text)
        self._report()
        return out

    def flush(self) -> str:
        self._context.sync()
        out = self._stream.flush()
        self._report()
        return out

    def _report(self) -> None:
        done = self._stream.neutralised[self._reported:]
        self._reported += len(done)
        _report(list(done), self._count)
