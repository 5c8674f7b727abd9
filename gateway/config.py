"""The gateway's one YAML file, typed (G8).

`load_config(path)` returns a `Config` or raises `ConfigError` whose `.problems` lists every
problem as `file:line:column: path: what was expected` (D4), the path naming list items by their
names (`routes[demo].plugins[docs].command`, gateway.config_problems) and the message the closest
known name for a misspelt one; a key given twice in one mapping is one of them
(gateway.yaml_document reads every operator's YAML file).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.bridge.config import BridgeConfig
from gateway.config_problems import did_you_mean, readable_path, schema_problem
from gateway.limits.config import LimitsConfig
from gateway.limits.config import reference_problems as limits_problems
from gateway.registry import PluginConfig, plugin_id
from gateway.secrets import SecretRef, unreadable_secrets
from gateway.tracing import TelemetryConfig
from gateway.yaml_document import YamlDocument, YamlProblem, read_yaml


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerSettings(_Strict):
    host: str = Field(default="127.0.0.1", description="bind address; with `auth.mode: none` only a loopback one, unless"
                      " `allow_remote_without_auth`")
    allow_remote_without_auth: bool = Field(
        default=False, description="with `auth.mode: none`, serve a non-loopback address anyway (anyone who reaches it"
        " is served, its tools and upstream keys included)",
    )
    port: int = Field(default=8080, ge=0, le=65535, description="TCP port to listen on (0: any free port)")
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, description="larger bodies get 413")
    request_timeout_seconds: float = Field(default=600, gt=0, description="budget for one request, tool rounds included")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="the least severe JSON log line written to standard error")
    metrics_auth: bool = Field(
        default=False, description="GET /metrics also accepts any credential that `auth` accepts (e.g. an API key for the scraper)"
    )
    metrics_token: SecretRef | None = Field(
        default=None, description="GET /metrics accepts this token as `Authorization: Bearer` (env:/file: reference)"
    )
    metrics_public: bool = Field(
        default=False, description="GET /metrics is served to anyone who reaches the port; default: it needs"
        " `metrics_token` or (with `metrics_auth`) a credential `auth` accepts",
    )
    metrics_user_labels: bool = Field(
        default=False, description="toolgate_tokens_total's `user` label names the user; default: `-` (no per-user counts)"
    )
    body_timeout_seconds: float = Field(default=30, gt=0, description="a request body must arrive within this; else 408")
    max_header_bytes: int = Field(default=32 * 1024, ge=1024, description="request headers larger in all get 431")
    keep_alive_seconds: float = Field(
        default=75, gt=0,
        description="an idle client connection is kept open this long: longer than a load balancer keeps an idle"
        " connection to reuse (HAProxy, nginx: 60 s or less), so it never sends a request on one the gateway is closing",
    )

    @model_validator(mode="after")
    def _metrics_open_or_guarded(self) -> "ServerSettings":
        if self.metrics_public and (self.metrics_auth or self.metrics_token is not None):
            raise ValueError("metrics_public serves /metrics to anyone, so metrics_auth and metrics_token would never be"
                             " asked for: set metrics_public, or a credential, not both")
        return self


class ApiKey(_Strict):
    """One API key: its value by reference (`key`) or its SHA-256 hex digest (`key_sha256`)."""

    key: SecretRef | None = Field(default=None, description="the key itself, by reference (`env:NAME` or `file:PATH`)")
    key_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$",
                                   description="instead of `key`: the SHA-256 hex digest of the key (`sha256sum`)")
    user_id: str | None = Field(default=None, description="the identity's user: pools, audit records, per-user limits")
    org_id: str | None = Field(default=None, description="the identity's organisation (conversation keys, org-owned Bridge connections, per-org limits)")
    display_name: str | None = Field(default=None, description="a name for people (console, audit)")
    email: str | None = Field(default=None, description="the identity's email address")

    @model_validator(mode="after")
    def _one_of(self) -> "ApiKey":
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError("exactly one of 'key' (env:/file: reference) or 'key_sha256' (hex digest)")
        return self


class ClaimMap(_Strict):
    """Which token claims become the caller's identity (G3)."""

    user_claim: str = Field(default="sub", description="the claim that becomes `user_id`")
    org_claim: str = Field(default="org_id", description="the claim that becomes `org_id`")
    name_claim: str = Field(default="name", description="the claim that becomes `display_name`")
    email_claim: str = Field(default="email", description="the claim that becomes `email`")


class JwtSettings(ClaimMap):
    """JWT verification: an HMAC `secret`, a PEM `public_key`, or a `jwks_url` (fetched at start, and again for a key id it lacks, as for `oauth`)."""

    secret: SecretRef | None = Field(default=None, description="an HMAC key (HS256), by reference")
    public_key: SecretRef | None = Field(default=None, description="a PEM public key (RS/ES/PS/EdDSA), by reference")
    jwks_url: str | None = Field(default=None, description="a JWKS document's URL; keys are picked by the token's `kid`")
    algorithms: list[str] = Field(default_factory=lambda: ["HS256", "RS256", "ES256"],
                                  description="the signature algorithms a token may use")
    audience: str | None = Field(default=None, description="the token's `aud` must name this (needed with `mode: jwt`)")
    issuer: str | None = Field(default=None, description="the token's `iss` must be this (needed with `mode: jwt`)")

    @model_validator(mode="after")
    def _one_of(self) -> "JwtSettings":
        if sum(x is not None for x in (self.secret, self.public_key, self.jwks_url)) != 1:
            raise ValueError("exactly one of 'secret', 'public_key' or 'jwks_url'")
        return self


ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class OAuthScopes(_Strict):
    """Scopes an access token must carry, per resource (F16); also what the metadata advertises."""

    mcp: list[str] = Field(default_factory=list, description="on /mcp and /mcp/<bridgeId>")
    v1: list[str] = Field(default_factory=list, description="on the model API (/v1/...)")


class ConsoleClient(_Strict):
    """The console as a client of the authorization server (C1): sign-in by authorization code +
    PKCE, redirect URI `<public_url>/console/callback` registered at the issuer."""

    client_id: str = Field(min_length=1, description="the console's client id at the issuer")
    client_secret: SecretRef | None = Field(default=None, description="a confidential client (client_secret_basic); none: a public client")
    scopes: list[str] = Field(default_factory=lambda: ["openid", "email", "profile"], description="asked at sign-in; 'openid' is always sent")


class OAuthSettings(ClaimMap):
    """OAuth at the edge (F16): the gateway as a resource server of an external authorization server.

    Resources are `<public_url>/mcp`, `<public_url>/mcp/<bridgeId>` and `<public_url>/v1` (and the
    gateway as a whole, `<public_url>`); an access token is accepted where its `aud` names the
    resource or one that contains it."""

    issuer: str = Field(pattern=r"^https?://[^?#\s]+$", description="the authorization server's issuer identifier")
    public_url: str = Field(description="this gateway's origin as clients reach it, e.g. https://gw.example.com")
    jwks_url: str | None = Field(default=None, pattern=r"^https?://\S+$", description="default: `jwks_uri` of the issuer's metadata")
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "PS256", "ES256", "EdDSA"], min_length=1,
                                  description="the public-key signature algorithms an access token may use")
    scopes: OAuthScopes = Field(default_factory=OAuthScopes, description="the scopes each resource asks of a token")
    leeway_seconds: float = Field(default=30, ge=0, le=300, description="clock skew allowed on exp/nbf/iat")
    console: ConsoleClient | None = Field(default=None, description="sign the console in through this issuer")

    @field_validator("public_url")
    @classmethod
    def _origin(cls, value: str) -> str:
        origin = value.rstrip("/")
        if not re.fullmatch(r"https?://[^/?#\s]+", origin):
            raise ValueError("must be this gateway's origin as clients reach it (scheme://host[:port]), without a path")
        return origin

    @model_validator(mode="after")
    def _asymmetric(self) -> "OAuthSettings":
        refused = [a for a in self.algorithms if a not in ASYMMETRIC_ALGORITHMS]
        if refused:
            raise ValueError(f"algorithms {refused} are not public-key signatures; use some of {list(ASYMMETRIC_ALGORITHMS)}")
        return self


class AuthConfig(_Strict):
    """`mode`: who may call. `oauth` (F16) stands beside `api_keys` (a key or an access token) or
    alone (`mode: oauth`, access tokens only)."""

    mode: Literal["none", "api_keys", "jwt", "oauth"] = Field(
        default="none", description="`none`: no credential, anonymous callers (loopback only, unless"
        " `server.allow_remote_without_auth`); `api_keys`: a key of `api_keys` (or, with `oauth`, an access token);"
        " `jwt`: a JWT `jwt` verifies; `oauth`: an access token of `oauth`'s issuer")
    api_keys: list[ApiKey] = Field(default_factory=list, description="the keys `mode: api_keys` accepts")
    jwt: JwtSettings | None = Field(default=None, description="how `mode: jwt` verifies tokens")
    oauth: OAuthSettings | None = Field(default=None, description="the authorization server whose access tokens are accepted")

    @model_validator(mode="after")
    def _mode_needs(self) -> "AuthConfig":
        if self.mode == "api_keys" and not self.api_keys:
            raise ValueError("mode 'api_keys' needs at least one entry in 'api_keys'")
        if self.mode == "jwt" and self.jwt is None:
            raise ValueError("mode 'jwt' needs a 'jwt' section")
        if self.mode == "jwt" and self.jwt is not None and (not self.jwt.audience or not self.jwt.issuer):
            # without them any token the key signed is accepted, whoever it was issued for
            raise ValueError("mode 'jwt' needs 'jwt.audience' and 'jwt.issuer' (the token's 'aud' and 'iss' must match them)")
        if self.mode == "oauth" and self.oauth is None:
            raise ValueError("mode 'oauth' needs an 'oauth' section (issuer, public_url)")
        if self.oauth is not None and self.mode not in ("oauth", "api_keys"):
            raise ValueError("an 'oauth' section works with mode 'oauth' (access tokens) or 'api_keys' (keys and access tokens)")
        return self


class UpstreamConfig(_Strict):
    """Where models live. `openai`: any OpenAI-compatible base (fast path); `litellm`: any
    provider litellm knows (imported lazily); `inspect`: echoes what the model would receive;
    `demo`: a scripted model that calls an offered tool and answers from its result (no key)."""

    name: str = Field(pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$", description="what routes call it by")
    kind: Literal["openai", "litellm", "inspect", "demo"] = Field(description="how it is reached (see above)")
    api_base: str | None = Field(default=None, description="the API's base URL, e.g. http://127.0.0.1:11434/v1 (needed by `openai`)")
    api_key: SecretRef | None = Field(default=None, description="the upstream's key, by reference; never sent to clients or logged")
    timeout_seconds: float = Field(default=120, gt=0, description="the longest wait for each read of an upstream call (connecting: at most 10 s); then 504")

    @model_validator(mode="after")
    def _base(self) -> "UpstreamConfig":
        if self.kind == "openai" and not self.api_base:
            raise ValueError("kind 'openai' needs 'api_base' (e.g. http://127.0.0.1:11434/v1)")
        return self


class DeploymentConfig(_Strict):
    """One place a route's calls can go (O1): an upstream and the model it is asked for."""

    upstream: str = Field(description="the name of an entry of `upstreams`")
    model: str = Field(min_length=1, description="the model name sent to that upstream")
    weight: float = Field(default=1, gt=0, description="share of the route's calls, relative to the other deployments'")
    timeout_seconds: float | None = Field(
        default=None, gt=0, description="an answer (a stream: its first chunk) must come within this, else the call is"
        " retried elsewhere; default: the upstream's own timeout",
    )


class RouteConfig(_Strict):
    """A model clients ask for. Its calls go to one `upstream` (as `upstream_model`), or are
    spread over `deployments` (not both); either way failures are retried and cooled down (O1)."""

    model: str = Field(min_length=1, description="the model name clients send")
    upstream: str | None = Field(default=None, description="the one upstream (or list `deployments` instead)")
    upstream_model: str | None = Field(default=None, description="model name sent upstream; default: `model`")
    deployments: list[DeploymentConfig] = Field(
        default_factory=list, description="several upstream+model pairs the calls are spread over by weight, instead of `upstream`",
    )
    retries: int = Field(default=2, ge=0, le=10, description="a 429/5xx/timeout/connection failure is retried on another"
                         " deployment at most this many times (within server.request_timeout_seconds)")
    retry_after_tool_calls: bool = Field(
        default=False, description="also retry (or fall back) an upstream call that follows gateway tool calls of the same request",
    )
    cooldown_after_failures: int = Field(default=3, ge=1, description="a deployment failing this many calls in a row cools down")
    cooldown_seconds: float = Field(default=30, gt=0, description="how long a deployment cools down before one call probes it back")
    fallbacks: list[str] = Field(
        default_factory=list, description="models of other routes whose deployments are tried, in order, when this route's"
        " are exhausted, or at once on a context-window error",
    )
    plugins: list[PluginConfig] = Field(default_factory=list, description="the chain every request of this route passes"
                                        " through, in this order; each node told apart by `type`")

    @model_validator(mode="after")
    def _one_form(self) -> "RouteConfig":
        if (self.upstream is None) == (not self.deployments):
            raise ValueError("give either 'upstream' (one upstream) or 'deployments' (a list), not both and not neither")
        if self.deployments and self.upstream_model is not None:
            raise ValueError("'upstream_model' goes with 'upstream'; each deployment names its own 'model'")
        return self

    def deployment_list(self) -> list[DeploymentConfig]:
        """The route's deployments; the single-upstream form is one deployment of weight 1."""
        if self.deployments:
            return self.deployments
        assert self.upstream is not None
        return [DeploymentConfig(upstream=self.upstream, model=self.upstream_model or self.model)]


class Config(_Strict):
    """The gateway's YAML file: where it listens, who may call, the models it serves and the plugins
    on their way, the Bridge, limits and traces."""

    server: ServerSettings = Field(default_factory=ServerSettings, description="the HTTP server: address, sizes, timeouts, /metrics access")
    auth: AuthConfig = Field(default_factory=AuthConfig, description="who may call (G3)")
    upstreams: list[UpstreamConfig] = Field(min_length=1, description="the model endpoints routes send calls to")
    routes: list[RouteConfig] = Field(min_length=1, description="the models clients ask for, each with its upstream and plugin chain")
    bridge: BridgeConfig | None = Field(default=None, description="the Bridge: MCP federation endpoint, pipelines and console (F); off by default")
    limits: LimitsConfig | None = Field(default=None, description="rate limits and budgets (O2); none by default")
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig, description="OpenTelemetry traces (OTLP); off by default")
    base_dir: Path = Field(default=Path("."), exclude=True, description="folder of the YAML file")


def _entries(data: Any, key: str) -> list[tuple[int, dict[str, Any]]]:
    """(index, mapping) of each mapping in the list `data[key]` (what is not one is skipped)."""
    items = data.get(key) if isinstance(data, dict) else None
    return [(i, item) for i, item in enumerate(items) if isinstance(item, dict)] if isinstance(items, list) else []


def reference_problems(data: Any) -> list[tuple[str, str]]:
    """(dotted path, message) for every reference between sections that does not hold.

    Read from the raw YAML data, so `check` reports these with the schema problems in one pass."""
    problems: list[tuple[str, str]] = []

    def duplicates(values: list[Any]) -> set[Any]:
        return {v for v in values if values.count(v) > 1}

    upstreams = _entries(data, "upstreams")
    names = [u.get("name") for _, u in upstreams]
    for i, upstream in upstreams:
        if upstream.get("name") in duplicates(names):
            problems.append((f"upstreams.{i}.name", f"upstream name {upstream['name']!r} is used more than once"))
    routes = _entries(data, "routes")
    models = [r.get("model") for _, r in routes]
    for i, route in routes:
        if route.get("model") in duplicates(models):
            problems.append((f"routes.{i}.model", f"route model {route['model']!r} is used more than once"))
        known = [n for n in names if isinstance(n, str)]
        if isinstance(route.get("upstream"), str) and route["upstream"] not in names:
            problems.append((f"routes.{i}.upstream", f"names upstream {route['upstream']!r}, which is not defined in 'upstreams'"
                             + did_you_mean(route["upstream"], known)))
        for j, deployment in _entries(route, "deployments"):
            if isinstance(deployment.get("upstream"), str) and deployment["upstream"] not in names:
                problems.append((f"routes.{i}.deployments.{j}.upstream",
                                 f"names upstream {deployment['upstream']!r}, which is not defined in 'upstreams'"
                                 + did_you_mean(deployment["upstream"], known)))
        plugins = _entries(route, "plugins")
        ids = [plugin_id(p) for _, p in plugins]
        for j, plugin in plugins:
            if plugin_id(plugin) in duplicates(ids):
                problems.append((f"routes.{i}.plugins.{j}.id", f"plugin id {plugin_id(plugin)!r} is used more than once in this chain"))
    problems += fallback_problems(routes)
    problems += limits_problems(data)
    server = data.get("server") if isinstance(data, dict) else None
    auth = data.get("auth") if isinstance(data, dict) else None
    mode = auth.get("mode", "none") if isinstance(auth, dict) else "none"
    if isinstance(server, dict) and server.get("metrics_auth") is True and mode == "none":
        problems.append(("server.metrics_auth", "needs a credential to check: set auth.mode to api_keys, jwt or oauth"))
    if mode == "none" and isinstance(server, dict) and isinstance(server.get("host"), str):
        if not is_loopback(server["host"]) and server.get("allow_remote_without_auth") is not True:
            problems.append(("server.host", remote_without_auth(server["host"])))
    return problems


def fallback_problems(routes: list[tuple[int, dict[str, Any]]]) -> list[tuple[str, str]]:
    """Fallbacks (O1) that name no route, or that lead back to the route they start from."""
    problems: list[tuple[str, str]] = []
    graph: dict[str, list[str]] = {}
    models = {route["model"] for _, route in routes if isinstance(route.get("model"), str)}
    for _, route in routes:
        fallbacks = route.get("fallbacks")
        if isinstance(route.get("model"), str) and isinstance(fallbacks, list):
            graph[route["model"]] = [f for f in fallbacks if isinstance(f, str)]
    for i, route in routes:
        fallbacks = route.get("fallbacks")
        if not isinstance(route.get("model"), str) or not isinstance(fallbacks, list):
            continue
        for k, name in enumerate(fallbacks):
            if isinstance(name, str) and name not in models:
                problems.append((f"routes.{i}.fallbacks.{k}", f"names route {name!r}, which is not defined in 'routes'"
                                 + did_you_mean(name, models)))
        cycle = _cycle_from(route["model"], graph)
        if cycle:
            problems.append((f"routes.{i}.fallbacks", "fallbacks lead back to this route: " + " -> ".join(cycle)))
    return problems


def _cycle_from(start: str, graph: dict[str, list[str]]) -> list[str] | None:
    """A path of fallbacks from `start` back to `start`, if there is one."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, []):
            if nxt == start:
                return path + [nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


def fallback_order(model: str, routes: dict[str, list[str]]) -> list[str]:
    """The routes `model` falls back to, in the order tried: each listed fallback, followed by
    its own fallbacks (depth first), each route once and never `model` itself."""
    order: list[str] = []

    def visit(name: str) -> None:
        for nxt in routes.get(name, []):
            if nxt != model and nxt not in order and nxt in routes:
                order.append(nxt)
                visit(nxt)

    visit(model)
    return order


def is_loopback(host: str) -> bool:
    """Is `host` a loopback bind address (`localhost`, 127.0.0.0/8, ::1)? A name other than
    `localhost` may resolve anywhere, so it is not."""
    host = host.strip().removeprefix("[").removesuffix("]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def remote_without_auth(host: str) -> str:
    """Why a non-loopback bind address is refused while auth is off, and the way out."""
    return (f"{host!r} is not a loopback address and auth.mode is 'none': anyone who reaches it would use this gateway, "
            "its tools and its upstream keys; set auth.mode (api_keys, jwt or oauth), bind 127.0.0.1, or set "
            "server.allow_remote_without_auth: true to serve it anyway")


class ConfigError(ValueError):
    """A config that cannot be served; `problems` holds one line per problem (its text: one per line).
    A ValueError, so plugin commands handed `load_config` catch it without importing this module."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def parse_config(data: Any, source: str = "<config>", base_dir: Path | None = None,
                 document: YamlDocument | None = None) -> Config:
    """Validate already-parsed YAML/JSON data. With the `document` it was read from, every problem
    names `file:line:column` and keys given twice are problems too (D4); without, just `source`.
    Paths name list items by their names (gateway.config_problems)."""
    at: Callable[[str], str] = document.where if document is not None else (lambda dotted: source)
    if not isinstance(data, dict):
        raise ConfigError([f"{at('')}: (top level): expected a mapping of sections"])
    duplicates = document.duplicate_problems(lambda dotted: readable_path(data, dotted)) if document is not None else []
    references = [_problem(at, data, path, message) for path, message in reference_problems(data)]
    try:
        config = Config.model_validate({**data, "base_dir": base_dir or Path(".")})
    except ValidationError as exc:
        schema = [_problem(at, data, *schema_problem(Config, err)) for err in exc.errors()]
        raise ConfigError(duplicates + schema + references) from None  # every problem in one pass (A4)
    if duplicates or references:
        raise ConfigError(duplicates + references)
    return config


def _problem(at: Callable[[str], str], data: Any, dotted: str, message: str) -> str:
    return f"{at(dotted)}: {readable_path(data, dotted)}: {message}"


def _read_yaml(path: Path) -> YamlDocument:
    try:
        return read_yaml(path)
    except YamlProblem as exc:
        raise ConfigError([exc.problem]) from None


def load_config(path: str | Path) -> Config:
    """The config in the YAML file at `path`, or `ConfigError` listing every problem with its place."""
    path = Path(path)
    document = _read_yaml(path)
    return parse_config(document.data, str(path), path.parent.resolve(), document)


def load_checked(path: str | Path, *, secrets: bool = True) -> tuple[Config | None, list[str]]:
    """The config and every problem with it in one pass — keys given twice, schema, references
    between sections, and (with `secrets`) references that cannot be read — each as
    `file:line:column: dotted.path: message`, for commands that print problems and exit."""
    path = Path(path)
    try:
        document = _read_yaml(path)
    except ConfigError as exc:
        return None, exc.problems
    base_dir = path.parent.resolve()
    found = unreadable_secrets(Config, document.data, base_dir) if secrets else []
    unreadable = [_problem(document.where, document.data, at, message) for at, message in found]
    try:
        config = parse_config(document.data, str(path), base_dir, document)
    except ConfigError as exc:
        return None, exc.problems + unreadable
    return config, unreadable
