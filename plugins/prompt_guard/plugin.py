"""The prompt_guard plugin (P1, P2, P4, B11, B13): scores every item before the model reads it.

`inspect` receives tool results, prefetch results and resources (and, when configured, the
client's messages through `before_model`). In `enforce` mode a block raises `GuardBlocked`,
whose message names this inspector, the server, the source and the rule ids, never the text.
In `monitor` mode a block is logged as one JSON line on the `toolgate.guard` logger and
counted, and the request goes on.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from pathlib import Path
from typing import Any

from gateway.content import message_text
from gateway.errors import GuardBlocked
from gateway.tracing import span
from gateway.plugins import (
    AnswerFilter, ChatRequest, ChatResponse, Hold, InspectItem, Plugin, PluginContext, PluginEnv, ToolCall,
)
from plugins.prompt_guard.answer_egress import EgressFilter, neutralise_answer
from plugins.prompt_guard.classifier import DEFAULT_MODEL, LinearModel
from plugins.prompt_guard.config import PromptGuardConfig
from plugins.prompt_guard.firewall import judge, safe_name, spotlight
from plugins.prompt_guard.metrics import GuardMetrics, guard_metrics
from plugins.prompt_guard.rulepack import DEFAULT_RULES, load_rules
from plugins.prompt_guard.scanner import NEURAL_ID, ONNX_ID, Guard, GuardSettings, Verdict

log = logging.getLogger("toolgate.guard")

THREAD_SCAN_CHARS = 64 * 1024
"""Texts longer than this are scanned in a worker thread so the event loop stays responsive
(every text is, when an ONNX model is configured: a transformer takes milliseconds per window)."""


def _path(value: str | None, default: Path, base_dir: Path | None) -> Path:
    """A configured file path; a relative one is read from the config file's folder."""
    if value is None:
        return default
    path = Path(value)
    return base_dir / path if base_dir is not None and not path.is_absolute() else path


def build_guard(config: PromptGuardConfig, base_dir: Path | None = None, native: bool = True) -> Guard:
    """Load the rule pack and the classifier a config names and build the scanner.

    Relative `rules_file` / `classifier_model` paths are read from `base_dir` (the folder of
    the YAML config) when it is known, else from the working directory. `native=False` keeps
    to the pure-Python scorer even where the compiled one is built (benchmarks, tests).

    An `onnx_model` is loaded (and `onnxruntime` imported) only when it is configured and
    neither `detectors.classifier: false` nor `disabled_rules: [classifier.onnx]` turns it off."""
    rules = load_rules(_path(config.rules_file, DEFAULT_RULES, base_dir)) if config.detectors.rules else []
    model = None
    if config.detectors.classifier:
        model = LinearModel.load(_path(config.classifier_model, DEFAULT_MODEL, base_dir), native)
    neural = None
    if config.detectors.neural and NEURAL_ID not in config.disabled_rules:
        from plugins.prompt_guard.neural import SHIPPED_MODELS, shared_detector

        model_dir = _path(config.neural.model_dir, SHIPPED_MODELS[config.neural.model], base_dir).resolve()
        neural = shared_detector(model_dir, config.neural.max_windows, config.neural.threshold)
    onnx = None
    spec = config.onnx_model
    if spec is not None and config.detectors.classifier and ONNX_ID not in config.disabled_rules:
        from plugins.prompt_guard.onnx_backend import OnnxClassifier

        onnx = OnnxClassifier.load(
            _path(spec.path, Path(spec.path), base_dir), _path(spec.tokenizer, Path(spec.tokenizer), base_dir),
            spec.max_tokens, spec.injection_label, spec.weight,
        )
    settings = GuardSettings(
        threshold=config.threshold,
        max_scan_bytes=config.max_scan_bytes,
        rules=config.detectors.rules,
        heuristics=config.detectors.heuristics,
        classifier=config.detectors.classifier,
        neural=config.detectors.neural,
    )
    combination = None
    if neural is not None and model is not None and "classifier" not in config.disabled_rules:
        from plugins.prompt_guard.combination import for_models

        combination = for_models(getattr(neural, "onnx_sha256", None),
                                 _path(config.classifier_model, DEFAULT_MODEL, base_dir))
    return Guard(rules, model, settings, config.disabled_rules, native, onnx, neural, combination)


class PromptGuardPlugin(Plugin):
    """Inspector node of a route's chain; see the module docstring."""

    def __init__(self, config: PromptGuardConfig) -> None:
        self.config = config
        self.id = config.id
        self._guard: Guard | None = None
        self._base_dir: Path | None = None
        self._metrics: GuardMetrics | None = None
        self.counts: dict[str, int] = {"allow": 0, "block": 0, "monitor_block": 0}
        """Verdicts seen by this node (also exported as Prometheus counters once started)."""

    @property
    def guard(self) -> Guard:
        """The scanner, built on first use (rules and model files are read only then)."""
        if self._guard is None:
            self._guard = build_guard(self.config, self._base_dir)
        return self._guard

    async def start(self, env: PluginEnv) -> None:
        """Load rules and model now (so a bad file fails start-up) and register metrics."""
        self._base_dir = env.base_dir
        _ = self.guard
        self._metrics = guard_metrics(env.metrics)

    async def inspect(self, ctx: PluginContext, item: InspectItem) -> None:
        """Score one item; raise `GuardBlocked` in enforce mode when it is blocked. A span (O3)
        carries the verdict, the score and the kind of source, never the text."""
        attributes = {"toolgate.plugin": self.id, "toolgate.guard.source_kind": item.kind, "toolgate.mcp.server": item.server}
        with span("guard scan", attributes) as current:
            await self._inspect(ctx, item, current)

    async def _inspect(self, ctx: PluginContext, item: InspectItem, current: Any) -> None:
        if any(entry.covers(item.server, item.source) for entry in self.config.allow):
            self._count("allow", item.kind, current)
            return
        started = time.perf_counter()
        guard = self.guard
        if len(item.text) > THREAD_SCAN_CHARS or guard.onnx is not None or guard.neural is not None:
            verdict = await asyncio.to_thread(guard.scan, item.text)
        else:
            verdict = guard.scan(item.text)
        if self._metrics is not None:
            self._metrics.latency.labels(self.id).observe(time.perf_counter() - started)
        current.set_attribute("toolgate.guard.score", float(verdict.score))
        if not verdict.blocked:
            self._count("allow", item.kind, current)
            return
        enforce = self.config.mode == "enforce"
        firewall = self.config.firewall
        if enforce and firewall.enabled and item.kind != "client_message" and verdict.score < firewall.block_threshold:
            # T6: below the refusal threshold the item taints the rest of the request instead
            ctx.provenance.flag(item.server, item.source, verdict.score)
            self._count("flag", item.kind, current)
            self._log(ctx, item, verdict, "flag")
            return
        self._count("block" if enforce else "monitor_block", item.kind, current)
        self._log(ctx, item, verdict, "block" if enforce else "monitor_block")
        if enforce:
            raise GuardBlocked(
                inspector=self.id, server=item.server, source=item.source,
                rules=list(verdict.rules), score=verdict.score,
            )

    async def before_model(self, ctx: PluginContext, request: ChatRequest) -> ChatRequest:
        """With `inspect_client_messages`, scan the client's own messages of the chosen roles."""
        if self.config.inspect_client_messages:
            for message in request.get("messages", []):
                role = message.get("role") if isinstance(message, dict) else None
                if role in self.config.client_roles:
                    text = message_text(message.get("content"))
                    if text:
                        await self.inspect(ctx, InspectItem("client_message", "client", str(role), text))
        return request

    def _count(self, verdict: str, kind: str, current: Any) -> None:
        current.set_attribute("toolgate.guard.verdict", verdict)
        self.counts[verdict] = self.counts.get(verdict, 0) + 1
        if self._metrics is not None:
            self._metrics.verdicts.labels(self.id, verdict, kind).inc()

    async def check_tool_call(self, ctx: PluginContext, call: ToolCall) -> Hold | None:
        """The firewall's decision (T3, T6); in monitor mode a hold is logged and counted only."""
        if not self.config.firewall.enabled:
            return None
        hold = judge(call, ctx.provenance, self.config.firewall)
        if hold is None:
            return None
        enforce = self.config.mode == "enforce"
        outcome = "held" if enforce else "monitor_held"
        tool = "(client tool)" if call.client else safe_name(call.name)  # the model names client tools: bounded labels
        if self._metrics is not None:
            self._metrics.holds.labels(self.id, call.server, tool, hold.code, outcome).inc()
        record = {
            "event": "guard_hold", "guard": self.id, "mode": self.config.mode, "outcome": outcome,
            "server": call.server, "tool": safe_name(call.name), "rule": hold.code,
            "arguments": sorted({safe_name(str(name)) for name in call.arguments})[:32],
            "confirmable": hold.confirm_seconds is not None and ctx.conversation_key is not None,
            "request_id": ctx.request_id, "route": ctx.route,
        }
        log.warning("guard %s: %s/%s (%s)", outcome, call.server, safe_name(call.name), hold.code, extra=record)
        return hold if enforce else None

    def present(self, ctx: PluginContext, item: InspectItem, text: str) -> str:
        """With `firewall.spotlight: delimit`, untrusted text reaches the model between markers that
        carry a random id of this request (an injection cannot close them), with a line saying it
        is data (T6). Off by default: it costs tokens and helps only models that heed it."""
        if self.config.firewall.spotlight != "delimit" or not self.config.firewall.enabled or item.kind == "client_message":
            return text
        marker = ctx.state.setdefault(f"prompt_guard:{self.id}:marker", secrets.token_hex(6))
        return spotlight(text, marker, f"{item.kind} from {item.server}/{item.source}")

    async def after_model(self, ctx: PluginContext, request: ChatRequest, response: ChatResponse) -> ChatResponse:
        """Links and images in the answer that would carry data out are neutralised (T5)."""
        if self._egress_on:
            neutralise_answer(response, ctx.provenance, self.config.firewall.egress, self._count_egress)
        return response

    def answer_filter(self, ctx: PluginContext) -> AnswerFilter | None:
        """The same as `after_model`, on a streamed answer (T5)."""
        if not self._egress_on:
            return None
        return EgressFilter(ctx.provenance, self.config.firewall.egress, self._count_egress)

    @property
    def _egress_on(self) -> bool:
        firewall = self.config.firewall
        return firewall.enabled and firewall.egress.enabled and self.config.mode == "enforce"

    def _count_egress(self, kind: str, reason: str) -> None:
        if self._metrics is not None:
            self._metrics.egress.labels(self.id, kind, reason).inc()
        log.warning("guard neutralised a %s in the answer (%s)", kind, reason,
                    extra={"event": "guard_egress", "guard": self.id, "kind": kind, "reason": reason})

    def _log(self, ctx: PluginContext, item: InspectItem, verdict: Verdict, outcome: str) -> None:
        record = {
            "event": "guard_verdict",
            "guard": self.id,
            "mode": self.config.mode,
            "verdict": outcome,
            "kind": item.kind,
            "server": item.server,
            "source": item.source,
            "score": verdict.score,
            "rules": list(verdict.rules),
            "truncated": verdict.truncated,
            "chars": len(item.text),
            "request_id": ctx.request_id,
            "route": ctx.route,
        }
        # the record's fields become top-level keys of the JSON log line (gateway.logs), not a string in `message`
        log.warning("guard %s: %s from %s/%s", record["verdict"], item.kind, item.server, item.source, extra=record)
