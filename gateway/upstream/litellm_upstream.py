"""Providers that are not OpenAI-compatible, through litellm (imported on first use only)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

from gateway.errors import ContextWindowExceeded, GatewayError, UpstreamBadRequest, UpstreamError, UpstreamRateLimited, UpstreamTimeout
from gateway.upstream.base import check_chunk, check_completion


def import_litellm() -> Any:
    """litellm, imported on first use (seconds and ~200 MB), with its network look-ups off."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price list from the internet
    try:
        import litellm
    except ImportError:
        raise UpstreamError("upstream kind 'litellm' needs the extra: pip install 'toolgate[litellm]'") from None
    litellm.suppress_debug_info = True
    return litellm


class LiteLLMUpstream:
    """`litellm.acompletion(model=<upstream_model>, api_base=..., api_key=...)`."""

    def __init__(self, name: str, api_base: str | None, api_key: str | None, timeout: float) -> None:
        self.name = name
        self._api_base = api_base
        self._api_key = api_key
        self._timeout = timeout

    def _error(self, exc: Exception) -> GatewayError:
        status = getattr(exc, "status_code", None)
        kind = type(exc).__name__
        if "Timeout" in kind or status == 408:
            return UpstreamTimeout(f"upstream '{self.name}' did not answer within {self._timeout:g}s")
        if status == 429:
            return UpstreamRateLimited(f"upstream '{self.name}' is rate limiting requests")
        if "ContextWindowExceeded" in kind:
            return ContextWindowExceeded(f"upstream '{self.name}' rejected the request as longer than its context window", status=400)
        if status in (400, 413, 422):
            return UpstreamBadRequest(f"upstream '{self.name}' rejected the request (HTTP {status})", status=status)
        if "Connection" in kind:
            return UpstreamError(f"upstream '{self.name}' is unreachable (connection failed)")
        return UpstreamError(f"upstream '{self.name}' failed ({kind}{f', HTTP {status}' if status else ''})")

    def _kwargs(self, body: dict[str, Any]) -> dict[str, Any]:
        # no hidden retries: the client decides, and 429s stay visible (G5)
        return {**body, "api_base": self._api_base, "api_key": self._api_key, "timeout": self._timeout, "max_retries": 0, "num_retries": 0}

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        litellm = import_litellm()
        try:
            response = await litellm.acompletion(**self._kwargs({**body, "stream": False}))
        except Exception as exc:  # litellm raises its own tree; mapped in one place
            raise self._error(exc) from None
        return check_completion(self.name, response.model_dump(exclude_none=True))

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[list[dict[str, Any]]]:
        litellm = import_litellm()
        try:
            response = await litellm.acompletion(**self._kwargs({**body, "stream": True}))
            async for chunk in response:
                yield [check_chunk(self.name, chunk.model_dump(exclude_none=True))]
        except GatewayError:
            raise
        except Exception as exc:
            raise self._error(exc) from None

    async def aclose(self) -> None:
        """litellm keeps its own clients."""
