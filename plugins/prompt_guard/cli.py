"""`toolgate guard eval FILE.jsonl` (P4): score a labelled JSONL file with a guard's settings.

    toolgate guard eval data.jsonl [--config toolgate.yaml] [--route MODEL] [--json]
                                   [--predictions OUT.jsonl]

Rows are `{"text", "label": "injection"|"benign"}` with optional `source` and `kind`. Without
`--config` the default settings are used; with it, those of the first prompt_guard node (of the
route `--route` names, if given). `--json` prints the metrics as one JSON object; `--predictions`
writes `{"verdict", "score", "rules"}` per input row, in input order. Exit status: 0 when the
file was evaluated, 2 on bad input or config.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from plugins.prompt_guard.classifier import ModelError
from plugins.prompt_guard.config import PromptGuardConfig
from plugins.prompt_guard.evaluation import EvalInputError, evaluate, format_report, load_rows, prediction_line
from plugins.prompt_guard.rulepack import RulePackError

EXIT_BAD_INPUT = 2


class CliError(Exception):
    """A problem reported to the user as one line on stderr."""


def guard_config(path: str | None, route: str | None,
                 load_config: Callable[[str], Any]) -> tuple[PromptGuardConfig, Path | None]:
    """The guard settings to evaluate (defaults, or the first prompt_guard node of a config)
    and the folder relative paths in them are read from."""
    if path is None:
        if route is not None:
            raise CliError("--route needs --config")
        return PromptGuardConfig(type="prompt_guard"), None
    try:
        config = load_config(path)
    except ValueError as exc:  # gateway.config.ConfigError: one line per problem
        raise CliError(str(exc)) from None
    routes = [r for r in config.routes if route is None or r.model == route]
    if not routes:
        raise CliError(f"{path}: no route with model {route!r}")
    for r in routes:
        for node in r.plugins:
            if isinstance(node, PromptGuardConfig):
                return node, config.base_dir
    where = f"route {route!r}" if route else "any route"
    raise CliError(f"{path}: {where} has no prompt_guard plugin")


def run_eval(args: argparse.Namespace) -> int:
    """The `guard eval` command; returns the exit status."""
    from plugins.prompt_guard.plugin import build_guard

    try:
        config, base_dir = guard_config(args.config, args.route, args.load_config)
        guard = build_guard(config, base_dir)
        rows = load_rows(args.file)
    except (CliError, EvalInputError, RulePackError, ModelError) as exc:
        print(f"toolgate guard eval: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    report = evaluate(guard, rows)
    if args.predictions:
        try:
            with open(args.predictions, "w", encoding="utf-8") as out:
                out.writelines(prediction_line(v) + "\n" for v in report.predictions)
        except OSError as exc:
            print(f"toolgate guard eval: cannot write {args.predictions}: {exc.strerror}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if args.json:
        data: dict[str, Any] = {"file": args.file, "guard": config.id, "threshold": config.threshold,
                                "scorer": guard.backend, "neural": _neural(guard), **report.to_json()}
        print(json.dumps(data, sort_keys=True))
    else:
        print(f"{args.file}: {len(rows)} rows, guard {config.id!r}, threshold {config.threshold}, "
              f"{guard.backend} scorer, neural detector: {_neural(guard) or 'off'}\n")
        print(format_report(report))
    return 0


def _neural(guard: Any) -> str | None:
    """Which neural model the guard runs (folder and threshold) and whether it is combined with the
    n-gram model and read as a cascade (`combination.json` fits the shipped pair only), or None when
    it is off."""
    detector = guard.neural
    if detector is None:
        return None
    how = ("combined with the n-gram model, read as a cascade" if guard.combination is not None
           else "no fitted combination: read whole, the n-gram model only ranking where it reads")
    return f"{detector.source} (threshold {detector.threshold:.3f}; {how})"


def register(subparsers: Any, load_config: Callable[[str], Any]) -> None:
    """Add `guard eval` to the top-level `toolgate` sub-parsers (`load_config`: the gateway's)."""
    guard = subparsers.add_parser("guard", help="prompt_guard tools")
    commands = guard.add_subparsers(dest="guard_command", required=True)
    ev = commands.add_parser("eval", help="score a labelled JSONL file: precision, recall, FPR, misses")
    ev.add_argument("file", help='JSONL rows {"text", "label": "injection"|"benign", ["source"], ["kind"]}')
    ev.add_argument("--config", help="toolgate YAML config; uses its first prompt_guard node")
    ev.add_argument("--route", help="with --config: take the prompt_guard node of this route (model name)")
    ev.add_argument("--json", action="store_true", help="print the metrics as one JSON object")
    ev.add_argument("--predictions", metavar="OUT.jsonl", help="write one verdict per input row, in order")
    ev.set_defaults(func=run_eval, load_config=load_config)


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (`python -m plugins.prompt_guard.cli guard eval …`): the one place this
    module reaches for the gateway's config loader itself (the gateway never imports it from here)."""
    from gateway.config import load_config

    parser = argparse.ArgumentParser(prog="toolgate")
    register(parser.add_subparsers(dest="command", required=True), load_config)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
