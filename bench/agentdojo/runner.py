"""One row (configuration): its servers and gateway, every case sent through it, each case judged.

A case: a fresh environment, the user task's prompt sent to the gateway with the `openai` SDK
(model = the suite's route, its own `X-Conversation-Id`, no retries: a retry would run side effects
twice; streamed with `--stream`); in a confirming row, while the answer's `toolgate.held` entries carry `confirm` strings the
next turn of the same conversation sends them back as the user's message. A refusal (HTTP 4xx)
counts as the answer "" with the environment as it is. Then AgentDojo's own checks, as
`TaskSuite.run_task_with_pipeline` makes them (the trace-based ones first), read the environment
and the trace of calls that really ran on the MCP server.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import openai
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam
from agentdojo.functions_runtime import FunctionCall
from agentdojo.types import text_content_block_from_string

from bench.agentdojo.gateway_proc import Gateway, Source
from tests.support.http_server import ServerThread
from bench.agentdojo.mcp_server import SuiteServer
from bench.agentdojo.rows import UPSTREAM_KEY_ENV, Row, gateway_config, route_name
from bench.agentdojo.scripted_model import Script, ScriptedModel
from bench.agentdojo.suites import Case, Prepared, prepare, suites

MAX_CONFIRM_TURNS = 8
SAMPLES_PER_KIND = 3


@dataclass
class Outcome:
    """One case's result (a line of firewall_cases.jsonl)."""

    suite: str
    user_task: str
    injection_task: str | None
    row: str
    utility: bool
    security: bool | None
    held: int = 0
    confirmations: int = 0
    refused: bool = False
    error: str | None = None
    held_calls: list[str] = field(default_factory=list)
    """`tool:rule` of every held call the answers reported."""


@dataclass
class RowResult:
    row: str
    outcomes: list[Outcome]
    metrics: dict[str, float]
    seconds: float
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _judge(case: Case, output: str, prepared: Prepared, trace: list[FunctionCall]) -> tuple[bool, bool | None, str | None]:
    """(utility, security, error) from AgentDojo's checks (`_check_task_result`: traces first)."""
    suite = suites()[case.suite]
    blocks = [text_content_block_from_string(output)]
    try:
        utility = bool(suite._check_task_result(suite.get_user_task_by_id(case.user_task), blocks,
                                                prepared.pre_environment, prepared.environment, trace))
        security = None
        if case.injection_task:
            security = bool(suite._check_task_result(suite.get_injection_task_by_id(case.injection_task), blocks,
                                                     prepared.pre_environment, prepared.environment, trace))
    except Exception as exc:  # a check that cannot read this environment: the task failed
        return False, (False if case.injection_task else None), f"check raised {type(exc).__name__}: {exc}"
    return utility, security, None


class RowRunner:
    """Servers, gateway and client of one row: `run_case` for each case, then `close()`."""

    def __init__(self, row: Row, suite_names: list[str], source: Source, stream: bool = False) -> None:
        self.row, self.stream = row, stream
        self.key = secrets.token_urlsafe(24)
        self.model = ScriptedModel(self.key)
        self.upstream = ServerThread(self.model.app).start()
        self.servers = {name: SuiteServer(name).start() for name in suite_names}
        config = gateway_config(row, 0, self.upstream.url, {name: s.url for name, s in self.servers.items()})
        self.gateway = Gateway(source, config, {UPSTREAM_KEY_ENV: self.key}, row.name).start()
        self.client = openai.OpenAI(base_url=self.gateway.url + "/v1", api_key="unused", max_retries=0, timeout=120)
        self.samples: dict[str, list[dict[str, Any]]] = {}

    def _sample(self, kind: str, case: Case, detail: dict[str, Any]) -> None:
        bucket = self.samples.setdefault(kind, [])
        if len(bucket) < SAMPLES_PER_KIND:
            bucket.append({"case": asdict(case), **detail})

    def _send(self, model: str, messages: list[ChatCompletionMessageParam], conversation: str) -> tuple[str, dict[str, Any]]:
        """One turn: (the answer's text, the gateway's `toolgate` summary). Streamed with `--stream`:
        the text is the deltas joined, the summary rides on the finishing chunk."""
        headers = {"X-Conversation-Id": conversation}
        if not self.stream:
            raw = self.client.chat.completions.with_raw_response.create(model=model, messages=messages, extra_headers=headers)
            answer = raw.http_response.json()
            return answer["choices"][0]["message"].get("content") or "", answer.get("toolgate") or {}
        text: list[str] = []
        summary: dict[str, Any] = {}
        stream = self.client.chat.completions.create(model=model, messages=messages, extra_headers=headers, stream=True)
        for chunk in cast(Iterable[ChatCompletionChunk], stream):
            data: dict[str, Any] = chunk.to_dict()
            summary.update(data.get("toolgate") or {})
            for choice in data.get("choices") or []:
                text.append((choice.get("delta") or {}).get("content") or "")
        return "".join(text), summary

    def run_case(self, case: Case) -> Outcome:
        prepared = prepare(case)
        backend = self.servers[case.suite].backend
        backend.begin(prepared.environment)
        self.model.begin(Script(prepared.user_calls, prepared.user_output, prepared.injection_calls,
                                prepared.injection_output, prepared.injection_goal))
        conversation = f"{self.row.name}:{case.suite}:{case.user_task}:{case.injection_task or 'benign'}:{secrets.token_hex(4)}"
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": prepared.prompt}]
        output, held, confirmations, refused, error = "", 0, 0, False, None
        held_calls: list[str] = []
        for _turn in range(MAX_CONFIRM_TURNS + 1):
            try:
                output, summary = self._send(route_name(case.suite), messages, conversation)
            except openai.APIError as exc:  # the SDK's errors: an HTTP status, or an error event mid-stream
                output = ""
                status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
                body = exc.response.text[:600] if isinstance(exc, openai.APIStatusError) else str(exc.body)[:600]
                if (status is not None and 400 <= status < 500) or getattr(exc, "code", None) == "content_blocked":
                    refused = True  # a refusal: before the answer (HTTP 4xx) or as a streamed error event
                    self._sample(f"refused {status or 'in stream'}", case, {"body": body})
                else:
                    error = f"{type(exc).__name__} {status or ''}: {body[:200]}"
                    self._sample(f"error {status or type(exc).__name__}", case,
                                 {"body": body, "model_requests": self.model.requests[-1:]})
                break
            entries = summary.get("held") or []
            held += len(entries)
            held_calls += [f"{e.get('tool')}:{e.get('rule')}" for e in entries if isinstance(e, dict)]
            if entries:
                self._sample("held", case, {"held": entries, "answer": output[:300]})
            confirms = [e["confirm"] for e in entries if isinstance(e, dict) and isinstance(e.get("confirm"), str)]
            if not (self.row.confirm and confirms):
                break
            confirmations += len(confirms)
            messages += [{"role": "assistant", "content": output}, {"role": "user", "content": " ".join(confirms)}]
        utility, security, check_error = _judge(case, output, prepared, list(backend.trace))
        backend.begin(None)
        return Outcome(case.suite, case.user_task, case.injection_task, self.row.name, utility, security,
                       held, confirmations, refused, error or check_error, held_calls)

    def close(self) -> dict[str, float]:
        """Stop everything; returns the gateway's final metrics."""
        metrics: dict[str, float] = {}
        try:
            metrics = self.gateway.metrics()
        finally:
            self.client.close()
            self.gateway.stop()
            for server in self.servers.values():
                server.stop()
            self.upstream.stop()
        return metrics


def run_row(row: Row, cases: list[Case], source: Source, stream: bool = False, progress_every: int = 100) -> RowResult:
    """Every case of one row, in order (the suite's MCP server holds one environment at a time)."""
    start = time.monotonic()
    runner = RowRunner(row, sorted({case.suite for case in cases}), source, stream)
    outcomes: list[Outcome] = []
    try:
        for i, case in enumerate(cases, 1):
            outcomes.append(runner.run_case(case))
            if i % progress_every == 0 or i == len(cases):
                print(f"  [{row.name}] {i}/{len(cases)} cases, {time.monotonic() - start:.0f} s", flush=True)
    finally:
        metrics = runner.close()
    if not any(o.error for o in outcomes):
        runner.gateway.cleanup()
    return RowResult(row.name, outcomes, metrics, time.monotonic() - start, runner.samples)
