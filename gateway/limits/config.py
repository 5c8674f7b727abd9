"""The `limits:` config section (O2): where counters live, what happens when Redis fails, the rules
and the prices that turn token usage into spend."""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.secrets import SecretRef

Subject = Literal["key", "user", "org", "route"]
Period = Literal["hour", "day", "month"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Budget(_Strict):
    """Spend allowed per calendar period (UTC), computed from token usage × `limits.prices`."""

    usd: float = Field(gt=0, description="US dollars per period")
    period: Period = Field(default="day", description="hour, day or month (UTC calendar periods)")


class LimitRule(_Strict):
    """One rule: who it counts (`per`), optionally only on one route, and its limits."""

    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,64}$",
                             description="the `rule` label of toolgate_requests_limited_total; default: `per` (and `@route`)")
    per: Subject = Field(description="key (each API key, by its SHA-256), user, org or route")
    route: str | None = Field(default=None, description="only requests to this route (counted per `per` within it)")
    requests_per_minute: int | None = Field(default=None, ge=1, description="requests admitted per minute")
    tokens_per_minute: int | None = Field(default=None, ge=1, description="prompt + completion tokens, charged when a request ends")
    concurrent: int | None = Field(default=None, ge=1, description="requests in flight at once")
    budget: Budget | None = Field(default=None, description="spend allowed per period, priced by `limits.prices`")

    @model_validator(mode="after")
    def _some_limit(self) -> "LimitRule":
        if all(v is None for v in (self.requests_per_minute, self.tokens_per_minute, self.concurrent, self.budget)):
            raise ValueError("a rule needs at least one of requests_per_minute, tokens_per_minute, concurrent or budget")
        return self

    @property
    def label(self) -> str:
        """The rule's name in metrics, Redis keys and error messages."""
        return self.name or (f"{self.per}@{self.route}" if self.route else self.per)


class Price(_Strict):
    """US dollars per million tokens of one upstream model."""

    input_per_million: float = Field(ge=0, description="US dollars per million prompt tokens")
    output_per_million: float = Field(ge=0, description="US dollars per million completion tokens")


class LimitsConfig(_Strict):
    """Rate limits and budgets. Without `redis`, counters are per process (each replica counts alone)."""

    redis: str | None = Field(default=None, description="redis://host:port/db (or rediss://); unset: in-process counters")
    password: SecretRef | None = Field(default=None, description="Redis password (env:/file: reference)")
    username: str | None = Field(default=None, description="Redis ACL user (with `password`)")
    on_redis_error: Literal["open", "closed"] = Field(
        default="open", description="Redis unreachable: open lets the request pass (counted, logged); closed answers 503")
    key_prefix: str = Field(default="toolgate:", min_length=1, max_length=64, description="the start of every Redis key the counters use")
    timeout_seconds: float = Field(default=0.5, gt=0, le=30, description="one Redis call's budget (connect, then reply)")
    connections: int = Field(
        default=64, ge=1, le=10_000,
        description="most Redis connections one replica opens at once; a call waits for a free one "
                    "within timeout_seconds (a stalled Redis costs this many sockets, not one per request)")
    lease_share: float = Field(
        default=0.01, ge=0, le=0.1,
        description="share of a requests_per_minute limit one replica takes from Redis at once and admits "
                    "itself (gateway/limits/leases.py); only where it makes 2 or more; 0: a round trip per request")
    stale_seconds: float = Field(
        default=0.2, ge=0, le=5,
        description="how long a replica admits on its last reading of a tokens or budget counter (plus its own "
                    "charges) and keeps an unused lease; refusals always ask Redis; 0: every admission asks")
    rules: list[LimitRule] = Field(min_length=1, description="the limits; a request must pass every rule that applies to it")
    prices: dict[str, Price] = Field(default_factory=dict, description="by upstream model name")

    @field_validator("redis")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            raise ValueError("must be redis://host:port/db or rediss://host:port/db")
        if parts.password is not None:
            raise ValueError("holds a password: give it as limits.password (an env:/file: reference) instead")
        if parts.path not in ("", "/") and not re.fullmatch(r"/\d+", parts.path):
            raise ValueError("the path is the database number, e.g. redis://127.0.0.1:6379/0")
        return value

    @model_validator(mode="after")
    def _unique_names(self) -> "LimitsConfig":
        labels = [r.label for r in self.rules]
        twice = sorted({label for label in labels if labels.count(label) > 1})
        if twice:
            raise ValueError(f"rules {twice} share a name: give each rule its own 'name'")
        return self


def reference_problems(data: Any) -> list[tuple[str, str]]:
    """(dotted path, message) for a `limits` rule naming a route that does not exist, a budget on a
    route whose upstream model has no price (its spend would never count), and a `per: key` rule
    with `auth.mode: none` (every bearer string is accepted there, so the caller would choose its
    own counter). Read from the raw YAML data, beside gateway.config's own reference checks."""
    limits = data.get("limits") if isinstance(data, dict) else None
    if not isinstance(limits, dict) or not isinstance(limits.get("rules"), list):
        return []
    routes = {r.get("model"): r for r in data.get("routes") or [] if isinstance(r, dict)}
    prices = limits.get("prices") if isinstance(limits.get("prices"), dict) else {}
    auth = data.get("auth")
    auth_off = not isinstance(auth, dict) or auth.get("mode", "none") == "none"
    problems: list[tuple[str, str]] = []
    for i, rule in enumerate(limits["rules"]):
        if not isinstance(rule, dict):
            continue
        if auth_off and rule.get("per") == "key":
            problems.append((f"limits.rules.{i}.per", "with auth.mode none every bearer string is accepted, so a "
                             "per-key rule would count whatever string a caller sends (a new one each time is never "
                             "limited): use per: route, or turn authentication on"))
        route = rule.get("route")
        if route is not None and route not in routes:
            problems.append((f"limits.rules.{i}.route", f"names route {route!r}, which is not defined in 'routes'"))
            continue
        if rule.get("budget") is None:
            continue
        for name in [route] if route is not None else list(routes):
            for model in _priced_models(routes[name]):
                if model not in prices:
                    problems.append((f"limits.rules.{i}.budget",
                                     f"route {name!r} calls upstream model {model!r}, which has no entry in limits.prices"))
    return problems


def _priced_models(route: dict[str, Any]) -> list[str]:
    """The upstream models a route may call: each deployment's `model` when it lists deployments,
    else its `upstream_model` (default: its `model`)."""
    deployments = route.get("deployments")
    if isinstance(deployments, list):
        return [d["model"] for d in deployments if isinstance(d, dict) and isinstance(d.get("model"), str)]
    model = route.get("upstream_model") or route.get("model")
    return [model] if isinstance(model, str) else []
