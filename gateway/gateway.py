"""The running gateway: upstream clients and one plugin chain per route, built from a Config."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from random import Random

import httpx2

from gateway.auth import Authenticator
from gateway.chain import Chain
from gateway.config import Config, RouteConfig, UpstreamConfig, fallback_order
from gateway.limits.gate import build_limits
from gateway.metrics import GatewayMetrics
from gateway.plugins import PluginEnv
from gateway.registry import build_plugin
from gateway.secrets import SecretSet, resolve_secret
from gateway.upstream.base import Upstream
from gateway.upstream.breaker import Breaker
from gateway.upstream.deployments import Deployment, Deployments, Pool
from gateway.upstream.demo import DemoUpstream
from gateway.upstream.inspect import InspectUpstream
from gateway.upstream.litellm_upstream import LiteLLMUpstream, import_litellm
from gateway.upstream.openai_compat import OpenAICompatUpstream


@dataclass
class Route:
    config: RouteConfig
    upstream: Upstream
    chain: Chain

    @property
    def upstream_model(self) -> str:
        return self.config.upstream_model or self.config.model


def _upstream(config: UpstreamConfig, base: Config, http: httpx2.AsyncClient, secrets: SecretSet) -> Upstream:
    key = resolve_secret(config.api_key, base.base_dir, secrets) if config.api_key else None
    if config.kind == "openai":
        assert config.api_base is not None
        return OpenAICompatUpstream(config.name, config.api_base, key, config.timeout_seconds, http)
    if config.kind == "litellm":
        return LiteLLMUpstream(config.name, config.api_base, key, config.timeout_seconds)
    if config.kind == "demo":
        return DemoUpstream(config.name)
    return InspectUpstream(config.name)


def _deployments(route: RouteConfig, upstreams: dict[str, Upstream], metrics: GatewayMetrics, random: Callable[[], float]) -> Deployments:
    """The route's `Upstream`: its deployments (one for the single-upstream form), with breakers (O1)."""
    pool = Pool(route.model, [
        Deployment(upstreams[d.upstream], d.model, d.weight, d.timeout_seconds,
                   Breaker(route.cooldown_after_failures, route.cooldown_seconds))
        for d in route.deployment_list()
    ], route.retries)
    return Deployments(pool, metrics.upstream_calls, retry_after_tool_calls=route.retry_after_tool_calls, random=random)


class Gateway:
    """Everything a request needs, built once at start-up (secrets resolved here)."""

    def __init__(self, config: Config, random: Callable[[], float] | None = None) -> None:
        """`random`: the draws that spread calls over a route's deployments (default: a fresh
        `random.Random()`; a seeded one makes the spread repeatable)."""
        self.config = config
        random = random or Random().random
        self.secrets = SecretSet()
        self.metrics = GatewayMetrics(user_labels=config.server.metrics_user_labels)
        self.http = httpx2.AsyncClient(
            timeout=httpx2.Timeout(120, connect=10),
            # Idle connections go after 2 s, before the model server's own keep-alive (uvicorn,
            # vLLM: 5 s) can close one under a request just being sent (a 502 for the client).
            limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=200, keepalive_expiry=2.0),
        )
        self.ready = False
        self.auth = Authenticator(config.auth, config.base_dir, self.secrets)
        # O2: a concurrency slot outlives its request by at most a minute (a replica that died holding it)
        self.limits = build_limits(config.limits, config.base_dir, self.secrets, self.metrics.registry,
                                   hold_seconds=config.server.request_timeout_seconds + 60)
        upstreams = {u.name: _upstream(u, config, self.http, self.secrets) for u in config.upstreams}
        self._upstreams = list(upstreams.values())
        composites = {r.model: _deployments(r, upstreams, self.metrics, random) for r in config.routes}
        fallbacks = {r.model: r.fallbacks for r in config.routes}
        for model, composite in composites.items():
            composite.fallbacks = [composites[f].pool for f in fallback_order(model, fallbacks)]
        self.routes: dict[str, Route] = {
            r.model: Route(r, composites[r.model], Chain(r.model, [build_plugin(p) for p in r.plugins], self.metrics))
            for r in config.routes
        }

    async def start(self) -> None:
        await self.auth.start(self.http)
        await self.limits.start()
        if any(u.kind == "litellm" for u in self.config.upstreams):
            await asyncio.to_thread(import_litellm)  # seconds of import, at start-up and off the loop
        for name, route in self.routes.items():
            env = PluginEnv(http=self.http, metrics=self.metrics.registry, route=name, base_dir=self.config.base_dir, secrets=self.secrets)
            await route.chain.start(env)

    async def stop(self) -> None:
        """Stop every chain, then close the shared HTTP client whatever happened."""
        try:
            for route in self.routes.values():
                await route.chain.stop()
        finally:
            await self.limits.close()
            for upstream in self._upstreams:  # their own connections (the lean HTTP client's)
                await upstream.aclose()
            await self.http.aclose()
