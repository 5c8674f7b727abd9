"""Scrubbing benchmark (issue 32, remainder #9): what scrubbing a tool result costs, before and after.

    .venv/bin/python bench/scrub_bench.py [--before 0a1fc24] [--repeats 9]

`SecretSet.scrub` of the working tree ("after": case-folded, separator-free, rot13, base32, double
base64, escapes) beside the one of commit `--before` ("before": the exact forms only), loaded from
git in the same process. The same secrets in both: 6 like the test suite's (a random canary with a
role suffix, ~36 characters), or 100 of them. The texts hold no secret (the common case) unless
said: a JSON tool result (records with prose, URLs with `&`, `\\u` escapes of non-ASCII words) and
plain English-like prose, at 4 KB and 1 MB; the JSON result with one secret, spaced out, in the
middle; 1 MB built against the scrubber (near-misses of the secret with separators and escapes,
zero-padded references), which must take about as long as an ordinary 1 MB text; 1 MB of nothing
but the secret, spaced out or half escaped (every match replaced: the dearest case); and the same
JSON result parsed, scrubbed string by string (`scrub_json`, as MCP results are; the time to copy
it subtracted). Median of `--repeats` runs per row.

Writes its table between the `scrub` markers of bench/README.md (adds the section when missing).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import secrets
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.procs import measured_on, write_section  # noqa: E402
from gateway.secrets import SecretSet  # noqa: E402

WORDS = ("the tool returned a list of issues for the repository with their titles labels and authors "
         "café naïve 東京 résumé über").split()


def before_module(rev: str) -> types.ModuleType:
    """`gateway/secrets.py` as it was at `rev` (it imports nothing of the gateway)."""
    source = subprocess.run(["git", "show", f"{rev}:gateway/secrets.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType("secrets_before")
    exec(compile(source, f"{rev}:gateway/secrets.py", "exec"), module.__dict__)
    return module


def secret_values(count: int) -> list[str]:
    canary = "tgcanary-" + secrets.token_hex(8)
    return [f"{canary}-role{index}" for index in range(count)]


def prose(size: int, rng: random.Random) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


def tool_result(size: int, rng: random.Random) -> str:
    """A JSON tool result of about `size` characters (ensure_ascii: non-ASCII words as `\\u` escapes)."""
    records, length = [], 0
    while length < size:
        record = {
            "id": secrets.token_hex(8), "title": prose(40, rng), "body": prose(200, rng),
            "url": f"https://example.com/issues/{rng.randint(1, 99999)}?state=open&sort=updated",
            "created": "2026-12-05T07:40:43Z", "labels": ["bug", "p2"], "comments": rng.randint(0, 50),
        }
        text = json.dumps(record)
        records.append(text)
        length += len(text) + 2
    return ("[" + ", ".join(records) + "]")[:size]


def adversarial(size: int, secret: str) -> str:
    """Near-misses of `secret` (all but its last character, spaced, half of them escaped as
    zero-padded references), long separator runs and unfinished escapes, repeated to `size`."""
    head = secret[:-1]
    spaced = " ".join(head)
    escaped = "".join(f"&#x{ord(c):06x};" if i % 2 else c for i, c in enumerate(head))
    unit = f"{spaced} {'-' * 64} {escaped}&#x{'0' * 40} \\u00 %4 "
    return (unit * (size // len(unit) + 1))[:size]


def timed(scrub: Callable[[str], str], text: str, repeats: int) -> float:
    scrub(text)  # builds the index once, as the first call of a process does
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        scrub(text)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def fmt(ms: float) -> str:
    return f"{ms * 1000:.0f} µs" if ms < 1 else f"{ms:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", default="0a1fc24")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--readme", default=str(ROOT / "bench" / "README.md"))
    args = parser.parse_args()
    old = before_module(args.before)
    rng = random.Random(32)
    rows = []
    for count in (6, 100):
        values = secret_values(count)
        before, after = old.SecretSet(), SecretSet()
        for value in values:
            before.add(value)
            after.add(value)
        cases = [
            ("JSON tool result", "4 KB", tool_result(4096, rng)),
            ("JSON tool result", "1 MB", tool_result(1 << 20, rng)),
            ("prose", "4 KB", prose(4096, rng)),
            ("prose", "1 MB", prose(1 << 20, rng)),
        ]
        big = cases[1][2]
        cases.append(("JSON tool result, one secret spaced out", "1 MB",
                      big[: len(big) // 2] + " ".join(values[0]) + big[len(big) // 2:]))
        cases.append(("built against the scrubber", "1 MB", adversarial(1 << 20, values[0])))
        spaced = " ".join(values[0]) + " | "
        cases.append(("the secret spaced out, over and over", "1 MB", spaced * ((1 << 20) // len(spaced))))
        escaped = "".join(f"&#x{ord(c):x};" if i % 2 else c for i, c in enumerate(values[0])) + " "
        cases.append(("the secret half in HTML references, over and over", "1 MB",
                      escaped * ((1 << 20) // len(escaped))))
        for what, size, text in cases:
            was, now = timed(before.scrub, text, args.repeats), timed(after.scrub, text, args.repeats)
            caught = "yes" if "[redacted]" in after.scrub(text) else "no"
            rows.append(f"| {count} | {what} | {size} | {fmt(was)} | {fmt(now)} | {caught} |")
            print(rows[-1], flush=True)
        records = json.loads(tool_result(1 << 20, rng).rsplit("}, {", 1)[0] + "}]")
        was, now = (timed(lambda _: scrubbing.scrub_json(copy.deepcopy(records)), "", args.repeats)
                    - timed(lambda _: copy.deepcopy(records), "", args.repeats) for scrubbing in (before, after))
        rows.append(f"| {count} | structured result (`scrub_json`, {len(records)} records) "
                    f"| 1 MB | {fmt(was)} | {fmt(now)} | no |")
        print(rows[-1], flush=True)
    table = "\n".join([
        f"Measured {measured_on()}; before = `{args.before}`, after = {after_label()}; median of {args.repeats} runs.",
        "",
        "| secrets | text | size | before | after | after redacts |",
        "|---|---|---|---|---|---|",
        *rows,
    ])
    print(table)
    write_section("scrub", table, Path(args.readme), "scrubbing", SECTION.rstrip("\n"))

SECTION = """`python bench/scrub_bench.py [--before REV]`: `SecretSet.scrub` now beside the one of an
earlier commit, on tool results with no secret, with one, built against it and made only of it.
"""


def after_label() -> str:
    """The commit of the scrubber measured as "after", marked when the working tree changes it."""
    paths = ["gateway/secrets.py", "gateway/secret_forms.py"]
    commit = subprocess.run(["git", "log", "-1", "--format=%h", "--", *paths], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    changed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", *paths], cwd=ROOT).returncode != 0
    return f"`{commit}`" + (" with uncommitted changes" if changed else "")


if __name__ == "__main__":
    main()
