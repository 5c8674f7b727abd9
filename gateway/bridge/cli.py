"""`toolgate bridge validate GRAPH.json`, `toolgate bridge migrate --config PATH` and
`toolgate audit list --config PATH ...` (G10, F5, F8, S1).

`register(subparsers)` adds both groups to the top-level `toolgate` parser.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import get_args

from gateway.bridge.audit_api import parse_time
from gateway.bridge.records import AuditAction, AuditQuery, AuditRecord
from gateway.bridge.config import BridgeConfig
from gateway.bridge.store import BridgeStore, StoreUnavailable, is_postgres, sqlite_path
from gateway.bridge.store_factory import open_store
from gateway.bridge.validation import GraphInvalid, parse_graph
from gateway.config import load_checked


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `bridge validate` and `audit list` to the `toolgate` command."""
    bridge = subparsers.add_parser("bridge", help="Bridge tools").add_subparsers(dest="bridge_command", required=True)
    validate = bridge.add_parser("validate", help="check a pipeline graph (F8); one line per problem")
    validate.add_argument("graph", help="path of the graph JSON")
    validate.set_defaults(func=validate_command)
    migrate = bridge.add_parser("migrate", help="create or upgrade the Bridge database's schema, then exit (S1)")
    migrate.add_argument("--config", required=True, help="the gateway's YAML config (names the Bridge database)")
    migrate.add_argument("--database", default=None,
                         help="another database URL, e.g. the schema owner's postgresql://owner@host/db "
                              "(its password from PGPASSWORD or ~/.pgpass)")
    migrate.set_defaults(func=migrate_command)

    audit = subparsers.add_parser("audit", help="the Bridge's audit log").add_subparsers(dest="audit_command", required=True)
    listing = audit.add_parser("list", help="list audit records, newest first")
    listing.add_argument("--config", required=True, help="the gateway's YAML config (names the Bridge database)")
    listing.add_argument("--user", default=None, help="only this actor (user id)")
    listing.add_argument("--since", default=None, help="from this time (ISO 8601 or epoch seconds)")
    listing.add_argument("--until", default=None, help="before this time (ISO 8601 or epoch seconds)")
    listing.add_argument("--action", default=None, choices=list(get_args(AuditAction)))
    listing.add_argument("--resource", default=None, help="tool or pipeline name")
    listing.add_argument("--status", default=None, choices=["success", "failure"])
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(func=audit_list_command)


def validate_command(args: argparse.Namespace) -> int:
    """Exit 0 and print `valid`, or exit 1 with one line per problem on stderr."""
    try:
        data = json.loads(Path(args.graph).read_text(encoding="utf-8"))
    except OSError as exc:
        print(f"{args.graph}: cannot read: {exc.strerror}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as exc:
        print(f"{args.graph}: not valid JSON: {exc}", file=sys.stderr)
        return 1
    try:
        graph = parse_graph(data)
    except GraphInvalid as exc:
        for problem in exc.problems:
            print(f"{args.graph}: {problem.message}", file=sys.stderr)
        return 1
    print(f"valid ({len(graph.nodes)} nodes, {len(graph.edges)} edges, {len(graph.pipelines)} pipelines)")
    return 0


def audit_list_command(args: argparse.Namespace) -> int:
    """Print the records of the config's Bridge database that match the filters."""
    config, problems = load_checked(args.config, secrets=False)
    for problem in problems:
        print(problem, file=sys.stderr)
    if config is None:
        return 2
    if config.bridge is None:
        print(f"{args.config}: no 'bridge' section", file=sys.stderr)
        return 2
    try:
        query = AuditQuery(
            actor_id=args.user, since=parse_time(args.since), until=parse_time(args.until),
            action=args.action, resource=args.resource, status=args.status, limit=args.limit,
        )
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if not is_postgres(config.bridge.database):
        path = sqlite_path(config.bridge.database, config.base_dir)
        if path != ":memory:" and not Path(path).exists():
            print(f"{path}: no Bridge database yet", file=sys.stderr)
            return 2
    try:
        records = asyncio.run(_query(_store(config.bridge, config.base_dir), query))
    except StoreUnavailable as exc:
        print(str(exc), file=sys.stderr)
        return 2
    for record in records:
        print(json.dumps(record.public()) if args.json else _line(record))
    return 0


def migrate_command(args: argparse.Namespace) -> int:
    """Open the config's Bridge database (or `--database`), which brings its schema up to date."""
    config, problems = load_checked(args.config)
    for problem in problems:
        print(problem, file=sys.stderr)
    if config is None or problems:
        return 2
    if config.bridge is None:
        print(f"{args.config}: no 'bridge' section", file=sys.stderr)
        return 2
    settings = config.bridge
    if args.database is not None:
        try:
            settings = BridgeConfig.model_validate({"database": args.database})
        except ValueError as exc:
            print(f"--database: {exc}", file=sys.stderr)
            return 2
    try:
        asyncio.run(_migrate(_store(settings, config.base_dir)))
    except StoreUnavailable as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(f"{settings.database.split('@')[-1]}: schema up to date")
    return 0


def _store(settings: BridgeConfig, base_dir: Path) -> BridgeStore:
    return open_store(settings.database, base_dir, password=settings.databasePassword, pool_size=1)


async def _migrate(store: BridgeStore) -> None:
    await store.open()
    await store.close()


async def _query(store: BridgeStore, query: AuditQuery) -> list[AuditRecord]:
    await store.open()
    try:
        return await store.query_audit(query)
    finally:
        await store.close()


def _line(record: AuditRecord) -> str:
    when = datetime.fromtimestamp(record.ts, timezone.utc).isoformat(timespec="milliseconds")
    flag = " mutating" if record.mutating else ""
    return (
        f"{when} {record.status:<7} {record.action} {record.resource} {record.scope} "
        f"actor={record.actor_id} {record.duration_ms:.1f}ms{flag} args={json.dumps(record.args)}"
    )
