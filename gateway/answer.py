"""The last touches on the model's answer, in every client API (T3, T4, T5).

- The answer's text passes the chain's answer filters (egress: links and images that would carry
  data out are neutralised) as it streams; a whole answer gets the same from `after_model`.
- Calls the firewall held are reported once the answer is written: in the `toolgate` summary
  (`held`: tool, arguments, reason, and the `confirm <code>` text where the person can confirm),
  and as a notice after the answer's text, so a person reading a plain chat UI sees the exact tool
  and arguments and how to run them. The notice is the gateway's, written after the model's text:
  arguments are shown as code (a link in them is never rendered) and names the model chose appear
  only when they are plain identifiers.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gateway.loop import Ending
from gateway.plugins import AnswerFilter, HeldCall

MAX_SHOWN_ARGUMENTS = 2000
"""Characters of a held call's arguments shown in the notice (the summary carries them whole)."""


def held_summary(held: list[HeldCall]) -> list[dict[str, Any]]:
    """The `toolgate.held` entries of a response."""
    return [
        {"tool": h.call.exposed, "arguments": h.call.arguments, "reason": h.hold.reason, "rule": h.hold.code,
         "confirm": h.confirm}
        for h in held
    ]


def held_notice(held: list[HeldCall]) -> str:
    """The text appended to the answer: each held call, why, and how to run it."""
    if not held:
        return ""
    lines = [f"[toolgate] {len(held)} tool call{'s' if len(held) > 1 else ''} not run: "
             "the request's context holds data from tools, which may carry instructions you did not give."]
    for h in held:
        shown = json.dumps(h.call.arguments, ensure_ascii=False)  # one line: newlines are escaped
        if len(shown) > MAX_SHOWN_ARGUMENTS:
            shown = shown[:MAX_SHOWN_ARGUMENTS] + " …"
        how = f" To run it, reply: {h.confirm}" if h.confirm else ""
        lines.append(f"- {_code(h.call.exposed)} {_code(shown)}: {h.hold.reason}.{how}")
    return "\n\n" + "\n".join(lines)


def _code(text: str) -> str:
    """`text` as a markdown code span (CommonMark: a fence longer than any backtick run inside), so
    a link or image in a held call's arguments is shown, never rendered or fetched (T5)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def finish_completion(completion: dict[str, Any], held: list[HeldCall]) -> dict[str, Any]:
    """A whole `chat.completion` with the held calls reported (summary and notice)."""
    if not held:
        return completion
    completion["toolgate"] = {**(completion.get("toolgate") or {}), "held": held_summary(held)}
    choices = completion.get("choices") or []
    if choices and isinstance(choices[0].get("message"), dict):
        message = choices[0]["message"]
        text = (message.get("content") or "").rstrip()
        notice = held_notice(held)
        message["content"] = text + notice if text else notice.lstrip()
    return completion


class AnswerStream:
    """Rewrites a stream's batches: content deltas through the filters; the `Ending` batch gets
    the filters' held-back text, the held calls' notice, and `held` in the summary."""

    def __init__(self, filters: list[AnswerFilter], held: list[HeldCall]) -> None:
        self._filters = filters
        self._held = held
        self._wrote_text = False

    def batch(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not self._filters and not (isinstance(batch, Ending) and self._held):
            self._wrote_text = self._wrote_text or any((_delta(c) or {}).get("content") for c in batch)
            return batch
        out = Ending() if isinstance(batch, Ending) else []
        for chunk in batch:
            delta = _delta(chunk)
            if delta is not None and isinstance(delta.get("content"), str) and self._filters:
                text = delta["content"]
                for f in self._filters:
                    text = f.feed(text)
                if not text and set(delta) <= {"content"}:
                    continue  # all of it held back for now
                chunk = {**chunk, "choices": [{**chunk["choices"][0], "delta": {**delta, "content": text}}]}
            if delta is not None and delta.get("content"):
                self._wrote_text = True
            out.append(chunk)
        if isinstance(batch, Ending):
            self._end(out)
        return out

    def _end(self, out: list[dict[str, Any]]) -> None:
        text = ""
        for index, f in enumerate(self._filters):
            rest = f.flush()
            for later in self._filters[index + 1:]:
                rest = later.feed(rest)
            text += rest
        notice = held_notice(self._held)
        text += notice if (text or self._wrote_text) else notice.lstrip()
        finish = next((c for c in out if c.get("choices") and c["choices"][0].get("finish_reason")), None)
        if finish is None:
            return
        if text:
            head = {k: v for k, v in finish.items() if k not in ("choices", "toolgate", "usage")}
            out.insert(out.index(finish), {**head, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})
        if self._held:
            finish["toolgate"] = {**(finish.get("toolgate") or {}), "held": held_summary(self._held)}


def _delta(chunk: dict[str, Any]) -> dict[str, Any] | None:
    choices = chunk.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict) and isinstance(choices[0].get("delta"), dict):
        delta: dict[str, Any] = choices[0]["delta"]
        return delta
    return None
