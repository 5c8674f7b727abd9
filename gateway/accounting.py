"""What one client request came to (A4): counted in the metrics, carried by the access log line."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.api.dialect import token_counts
from gateway.metrics import NO_USER_LABEL, GatewayMetrics

NO_ROUTE = "none"
"""The route label of a request refused before its route was known (auth, body, validation,
unknown model): the client's model name never becomes a label."""

CHARS_PER_TOKEN = 4
"""The usual rule of thumb for English text with GPT-style tokenizers (OpenAI's own guidance)."""

RECORD_KEY = "toolgate.request"
"""Where the record lives in the ASGI scope, for the access log line (gateway.app)."""


@dataclass
class RequestRecord:
    """Filled in while a request runs; `finish` counts it once."""

    api: str
    route: str = NO_ROUTE
    user: str | None = None
    status: int = 500
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0
    deployment: str | None = None
    """`upstream/model` of the deployment that produced the final answer (O1); None when no
    upstream answered (a refusal, or every deployment failed)."""
    usage_estimated: bool = False
    """True when the tokens are `estimate_usage`'s, not the upstream's (a client that left mid-stream)."""

    def estimate_usage(self, messages: Any, streamed_chars: int) -> None:
        """Tokens for a stream the client left before the upstream's usage chunk came: the upstream
        still did (and billed) the work, so limits and metrics charge ≈ `CHARS_PER_TOKEN` characters a
        token of the messages as sent and of the answer streamed so far, rather than nothing."""
        if self.prompt_tokens or self.completion_tokens:
            return
        sent = len(json.dumps(messages, ensure_ascii=False, separators=(",", ":")))
        self.prompt_tokens = -(-sent // CHARS_PER_TOKEN)
        self.completion_tokens = -(-streamed_chars // CHARS_PER_TOKEN)
        self.usage_estimated = True

    def take_usage(self, usage: Any, tool_calls: int) -> None:
        """The summed usage of every upstream call (G1) and the gateway tool calls run."""
        self.prompt_tokens, self.completion_tokens = token_counts(usage)
        self.tool_calls = tool_calls

    def fields(self) -> dict[str, Any]:
        """The access log line's fields."""
        return {
            "api": self.api, "route": self.route, "user": self.user, "status": self.status,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens, "tool_calls": self.tool_calls,
            "deployment": self.deployment, **({"usage_estimated": True} if self.usage_estimated else {}),
        }

    def finish(self, metrics: GatewayMetrics, seconds: float) -> None:
        """Count the request, its latency and its tokens (by route, and by user when the metrics
        carry users: `GatewayMetrics.user_labels`)."""
        metrics.child(metrics.requests, self.route, str(self.status)).inc()
        metrics.child(metrics.latency, self.route).observe(seconds)
        user = (self.user or "anonymous") if metrics.user_labels else NO_USER_LABEL
        if self.prompt_tokens:
            metrics.child(metrics.tokens, self.route, user, "prompt").inc(self.prompt_tokens)
        if self.completion_tokens:
            metrics.child(metrics.tokens, self.route, user, "completion").inc(self.completion_tokens)
