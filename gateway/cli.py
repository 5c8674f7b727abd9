"""`toolgate`: serve the gateway, check a config, print its schema or reference (D3), and the tools of
the plugins and the Bridge (G10)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from gateway import __version__
from gateway.config import Config, is_loopback, load_checked, load_config, remote_without_auth

log = logging.getLogger("toolgate.serve")


def _report(problems: list[str]) -> None:
    for problem in problems:
        print(problem, file=sys.stderr)


def _check(args: argparse.Namespace) -> int:
    if (args.path is None) == (args.config is None):
        print("toolgate check: give the config file once, as PATH or --config PATH", file=sys.stderr)
        return 2
    path = args.path or args.config
    config, problems = load_checked(path)
    _report(problems)
    if config is None or problems:
        return 1
    print(f"{path}: ok ({len(config.routes)} route(s), {len(config.upstreams)} upstream(s))")
    return 0


def _schema(args: argparse.Namespace) -> int:
    import json

    from gateway.config_reference import json_schema, markdown

    sys.stdout.write(markdown() if args.markdown else json.dumps(json_schema(), indent=2) + "\n")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.app import create_app
    from gateway.logs import configure_logging

    config, problems = load_checked(args.config)
    _report(problems)
    if config is None or problems:
        return 2
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    if config.auth.mode == "none" and not is_loopback(host) and not config.server.allow_remote_without_auth:
        _report([f"toolgate serve: --host {remote_without_auth(host)}"])
        return 2
    configure_logging(config.server.log_level)
    app = create_app(config)
    configure_logging(config.server.log_level, app.state.gateway.secrets)
    if config.auth.mode == "none":
        scope = "loopback only" if is_loopback(host) else "NOT loopback: server.allow_remote_without_auth is set"
        log.warning("auth is off (auth.mode: none): every caller is served anonymously; listening on %s:%s (%s)", host, port, scope)
    uvicorn.run(app, host=host, port=port, **server_options(config))
    return 0


def server_options(config: Config) -> dict[str, Any]:
    """uvicorn's settings from `server`: our logging, no access log or WebSockets, and the idle
    keep-alive (uvicorn's own 5 s races a load balancer reusing the connection: HAProxy saw the
    gateway close connections it had just sent a request on)."""
    return {"log_config": None, "access_log": False, "ws": "none", "timeout_keep_alive": config.server.keep_alive_seconds}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolgate", description="An OpenAI-compatible LLM gateway with MCP tools.")
    parser.add_argument("--version", action="version", version=f"toolgate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", required=True, help="path of the YAML config")
    serve.add_argument("--host", default=None, help="bind address (default: server.host, 127.0.0.1); with auth.mode none,"
                       " loopback only unless server.allow_remote_without_auth")
    serve.add_argument("--port", type=int, default=None, help="port (default: server.port, 8080)")
    serve.set_defaults(func=_serve)

    check = sub.add_parser("check", help="validate a config file; one line per problem, file:line:column first")
    check.add_argument("path", nargs="?", default=None, help="the YAML config to check")
    check.add_argument("--config", default=None, help="the same, as an option (like serve's)")
    check.set_defaults(func=_check)

    schema = sub.add_parser("schema", help="print the config's JSON Schema (for editors), or with --markdown its reference")
    schema.add_argument("--markdown", action="store_true", help="the reference page instead (docs/configuration.md)")
    schema.set_defaults(func=_schema)

    for register in _registrars():
        register(sub, load_config)
    return parser


def _registrars() -> list[Callable[[Any, Callable[[str], Any]], None]]:
    """The sub-command groups of the plugins (declared in their specs) and the Bridge."""
    from gateway.bridge.cli import register as register_bridge
    from gateway.registry import REGISTRY

    return [spec.commands for spec in REGISTRY.values() if spec.commands is not None] + [
        lambda sub, _load: register_bridge(sub)]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
