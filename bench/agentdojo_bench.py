"""AgentDojo v1.2 through the real gateway with a worst-case scripted model (issue 31, SPEC T7).

    bash bench/setup_agentdojo_venv.sh          # once: bench/.agentdojo-venv (gateway + agentdojo==0.1.35)
    bench/.agentdojo-venv/bin/python bench/agentdojo_bench.py [--rows off,detector] [--suites banking] [--limit N]

Rows (configurations): off, detector, enforce, enforce+trusted, enforce+confirm (the default), and
enforce+trusted+text when named. Each row runs in a process of its own with its own gateway
subprocess (`toolgate serve`), one MCP server per suite and the scripted model, all on loopback;
`--jobs` rows run at once. Per row: the 97 user tasks without injection (benign utility) and the
629 (user task, injection task) pairs under AgentDojo's `important_instructions` attack (attack
success rate, utility under attack); enforce+confirm runs the pairs only with --confirm-attacks.
A full run (all suites, every default row, no --limit, no --stream) writes
bench/results/firewall.md and firewall_cases.jsonl; another run prints only, unless --out is given.
`--gateway-commit REV` measures that commit (exported) instead of the work tree.

Rows 2-5 need the firewall's config keys. On a gateway without them (`toolgate check` refuses
`firewall:`), row `detector` runs as the old `mode: enforce` and the others are skipped, with a note.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Python puts this script's folder (bench/) first on the path, where `agentdojo` would name our
# bench/agentdojo package instead of AgentDojo itself: the repository root goes there instead.
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() not in (ROOT / "bench", ROOT)]

try:
    import agentdojo  # noqa: F401  (AgentDojo itself, not bench/agentdojo)
except ImportError:
    sys.exit("agentdojo is not installed here: run `bash bench/setup_agentdojo_venv.sh`, then "
             "`bench/.agentdojo-venv/bin/python bench/agentdojo_bench.py`")

from bench.agentdojo import report  # noqa: E402
from bench.agentdojo.gateway_proc import Source, export_commit, firewall_available  # noqa: E402
from bench.agentdojo.rows import EXTRA_ROWS, LEGACY_DETECTOR, ROWS, Row  # noqa: E402
from bench.agentdojo.runner import RowResult, run_row  # noqa: E402
from bench.agentdojo.suites import ATTACK, SUITES, cases  # noqa: E402
from bench.agentdojo.trusted import verify_all  # noqa: E402


def _work(row: Row, suite_names: list[str], limit: int | None, source: Source, confirm_attacks: bool,
          stream: bool) -> RowResult:
    """One row, in a worker process."""
    benign, attacks = cases(suite_names, limit)
    if not row.attacks and not confirm_attacks:
        attacks = []
    return run_row(row, benign + attacks, source, stream)


def _options(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suites", default=",".join(SUITES), help="comma-separated (default: all four)")
    parser.add_argument("--rows", default=",".join(ROWS),
                        help="comma-separated of: " + ", ".join({**ROWS, **EXTRA_ROWS}) + " (default: all but the last)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N benign tasks and N pairs per suite")
    parser.add_argument("--jobs", type=int, default=3, help="rows run at once, each a process (default 3)")
    parser.add_argument("--gateway-venv", default=sys.prefix, help="the venv whose bin/toolgate runs (default: this one)")
    parser.add_argument("--gateway-commit", default=None, metavar="REV",
                        help="run the gateway of this commit (exported with git archive) instead of the work tree")
    parser.add_argument("--confirm-attacks", action="store_true", help="also run the 629 pairs in enforce+confirm")
    parser.add_argument("--stream", action="store_true", help="the client streams every request (SSE)")
    parser.add_argument("--out", type=Path, default=None, help="results file (default: bench/results/firewall.md on a full run)")
    args = parser.parse_args(argv)
    args.suite_list = [s for s in args.suites.split(",") if s]
    args.row_list = [r for r in args.rows.split(",") if r]
    unknown = [s for s in args.suite_list if s not in SUITES] + [r for r in args.row_list if r not in ROWS and r not in EXTRA_ROWS]
    if unknown:
        parser.error(f"unknown suite or row: {', '.join(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _options(argv)
    start = time.monotonic()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    source = Source(Path(args.gateway_venv))
    if args.gateway_commit:
        source = export_commit(source.venv, args.gateway_commit)
    verify_all(args.suite_list)
    benign, attacks = cases(args.suite_list, args.limit)
    print(f"AgentDojo v1.2, attack {ATTACK}: {len(benign)} user tasks, {len(attacks)} security pairs "
          f"(suites {', '.join(args.suite_list)})", flush=True)

    notes: list[str] = []
    has_firewall, problems = firewall_available(source)
    rows: list[Row] = []
    for name in args.row_list:
        row = {**ROWS, **EXTRA_ROWS}[name]
        if row.firewall and not has_firewall:
            if name == "detector":
                rows.append(LEGACY_DETECTOR)
                notes.append("Row `detector` ran as `{type: prompt_guard, mode: enforce}` without the `firewall` key: "
                             "this gateway does not know the key yet, so its enforce mode is the detector alone.")
            else:
                notes.append(f"Row `{name}` not run: this gateway has no tool-call firewall yet "
                             f"(`toolgate check`: {'; '.join(problems)[:300]}).")
            continue
        rows.append(row)
    for note in notes:
        print(note, flush=True)

    results: list[RowResult] = []
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs), mp_context=context) as pool:
        futures = {pool.submit(_work, row, args.suite_list, args.limit, source, args.confirm_attacks, args.stream): row for row in rows}
        for future in concurrent.futures.as_completed(futures):
            result = future.result()
            print(f"row {result.row}: {len(result.outcomes)} cases in {result.seconds:.0f} s", flush=True)
            results.append(result)
    order = [row.name for row in rows]
    results.sort(key=lambda r: order.index(r.row))
    seconds = time.monotonic() - start
    outcomes = [o for r in results for o in r.outcomes]
    print(report.table(outcomes, order, args.suite_list))
    print(f"wall time {seconds / 60:.1f} min")
    for result in results:
        for kind, samples in result.samples.items():
            print(f"[{result.row}] {kind}: e.g. {samples[0]}"[:1500])

    full = args.limit is None and set(args.suite_list) == set(SUITES) and set(ROWS) <= set(args.row_list) and not args.stream
    out = args.out or (ROOT / "bench" / "results" / "firewall.md" if full else None)
    if out is not None:
        command = "bench/.agentdojo-venv/bin/python bench/agentdojo_bench.py " + shlex.join(argv if argv is not None else sys.argv[1:])
        header = [f"AgentDojo v1.2 (agentdojo 0.1.35), attack `{ATTACK}` (its default user name, Emma Johnson; model "
                  f"name \"GPT-4\"). Gateway {report.gateway_revision(ROOT, source)}, run as `toolgate serve` subprocesses, one per "
                  "configuration; the scripted model obeys every injection (see bench/agentdojo/scripted_model.py). The client "
                  + ("streams every request." if args.stream else "does not stream.")]
        header += [f"- `{row.name}`: {row.description}; prompt_guard node: " + (f"`{row.guard}`" if row.guard else "none") for row in rows]
        report.write_markdown(out, date=date, command=command.strip(), seconds=seconds, header=header, results=results,
                              rows=order, suites=args.suite_list, notes=notes)
        report.write_cases(out.with_name(out.stem + "_cases.jsonl"), outcomes)
        print(f"wrote {out} and {out.stem}_cases.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
