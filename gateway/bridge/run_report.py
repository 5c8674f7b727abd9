"""What a pipeline run reports of its nodes (C5), bounded and scrubbed, for the three readers:

- the editor's `POST /bridges/{id}/run` answer: every node of the plan with its status, reason,
  duration, and the values it took and gave (`public_nodes`), each value at most `VALUE_CHARS`
  characters of JSON text, else cut to a string ending in `…[cut: <n> bytes in all]`;
- the audit record (`mcp.pipeline_call`, `args["$run"]`): status, reason and duration per node and
  the run's duration, no values (`audit_run`);
- the run history (`GET /bridges/{id}/runs`), read back from those audit records (`run_entry`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import mcp_types as types

from gateway.bridge.records import AuditRecord, iso_utc
from gateway.bridge.runner import NodeRun, RunTrace, bounded_reason

VALUE_CHARS = 16 * 1024
"""The most JSON text a node's input or output is shown with; more is cut (C5)."""

Scrub = Callable[[str], str]


def bounded_value(value: Any, scrub: Scrub, chars: int = VALUE_CHARS) -> Any:
    """`value` as the editor is shown it: scrubbed of every secret the gateway holds; over `chars`
    characters of JSON text, that text's beginning with a marker instead."""
    if value is None:
        return None
    text = json.dumps(value, default=str, ensure_ascii=False)
    cleaned = scrub(text)
    if len(cleaned) <= chars:
        try:
            return json.loads(cleaned)
        except ValueError:  # a replacement broke the JSON (it never should): shown as text
            return cleaned
    return cut_text(cleaned, chars, len(text.encode("utf-8")))


def cut_text(text: str, chars: int, whole: int | None = None) -> str:
    """`text` itself within `chars` characters, else its beginning and `…[cut: <n> bytes in all]`."""
    if len(text) <= chars:
        return text
    return f"{text[:chars]}…[cut: {whole if whole is not None else len(text.encode('utf-8'))} bytes in all]"


def _duration(ms: float | None) -> float | None:
    return round(ms, 3) if ms is not None else None


def public_node(entry: NodeRun, scrub: Scrub) -> dict[str, Any]:
    """One node of a run as the editor's run answer shows it."""
    return {
        "id": entry.id, "kind": entry.kind, "tool": entry.tool, "connectionId": entry.connection_id,
        "status": entry.status, "reason": scrub(entry.reason) if entry.reason is not None else None,
        "durationMs": _duration(entry.duration_ms),
        "input": bounded_value(entry.input, scrub), "output": bounded_value(entry.output, scrub),
    }


def public_nodes(trace: RunTrace | None, scrub: Scrub) -> list[dict[str, Any]]:
    """Every node of the run's plan, in plan order (none when the pipeline could not be planned)."""
    return [public_node(entry, scrub) for entry in trace.nodes.values()] if trace is not None else []


def audit_run(trace: RunTrace | None, scrub: Scrub, result: types.CallToolResult) -> dict[str, Any]:
    """The audit form of a run: its duration, per node status, reason and duration, and for a
    failed run its message (`node <id> (<tool>) failed: <reason>`, bounded)."""
    nodes = []
    for entry in trace.nodes.values() if trace is not None else ():
        summary = entry.summary()
        if summary["reason"] is not None:
            summary["reason"] = scrub(summary["reason"])
        nodes.append(summary)
    run: dict[str, Any] = {"durationMs": _duration(trace.duration_ms) if trace is not None else None, "nodes": nodes}
    if result.is_error:
        text = "\n".join(p.text for p in result.content if isinstance(p, types.TextContent))
        run["reason"] = scrub(bounded_reason(text))
    return run


def run_entry(record: AuditRecord) -> dict[str, Any]:
    """One run of the history, from its `mcp.pipeline_call` record (the reason: the failed run's
    message, `node <id> (<tool>) failed: <reason>`)."""
    run = record.args.get("$run") if isinstance(record.args.get("$run"), dict) else {}
    nodes = [n for n in run.get("nodes", []) if isinstance(n, dict)]
    reason = run.get("reason") if record.status == "failure" else None
    return {
        "at": iso_utc(record.ts), "pipeline": record.resource, "isError": record.status == "failure",
        "durationMs": run["durationMs"] if run.get("durationMs") is not None else round(record.duration_ms, 3),
        "reason": reason,
        "nodes": [{"id": n.get("id"), "status": n.get("status"), "reason": n.get("reason"),
                   "durationMs": n.get("durationMs")} for n in nodes],
        "caller": record.actor_id,
    }
