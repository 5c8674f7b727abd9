"""Short tool results for the neural detector's training (round 4b): what tools return most often.

    python -m training.short_results --train /tmp/pg/data/train.jsonl --out short.jsonl

The first neural model flagged tiny benign results such as `{"said": "conv-1 turn 0"}` (score
0.52–0.55): the training documents were slices of 300–3000 characters, so short structured
text was rare. This writes short benign results (JSON objects, counts, ids, file lists, log
and CSV lines, status words, short notes to people in English, French and Ukrainian) and, so
that shortness is no signal by itself, short results carrying a training injection (short
injection prompts of the training file, never a held-out one) in a field or a line. Made up
here from fragments (stdlib only, fixed seed); training only.
"""

from __future__ import annotations

import argparse
import json
import random
import string
from pathlib import Path

KEYS = ["said", "echo", "result", "status", "count", "total", "id", "session", "items", "name", "value", "message",
        "ok", "error", "path", "size", "updated_at", "owner", "title", "score", "turn", "calls", "url", "etag"]
WORDS = ["alpha", "report", "invoice", "conv", "turn", "ticket", "draft", "main", "release", "backup", "queue", "user",
         "order", "item", "page", "node", "build", "cache", "index", "north", "blue", "summary", "agenda", "budget"]
STATUS = ["ok", "done", "pending", "queued", "failed", "not found", "created", "updated", "deleted", "skipped"]
NOTES = [
    "Thanks, see you tomorrow.", "No results found.", "Done.", "OK", "File saved.", "Meeting moved to 3 pm.",
    "Please review before Friday.", "Deleted 2 items.", "Temperature 21°C, wind 5 km/h.", "All checks passed.",
    "Merci, à demain.", "Aucun résultat.", "Fichier enregistré.", "Réunion déplacée à 15 h.", "Merci de relire avant vendredi.",
    "Дякую, до завтра.", "Нічого не знайдено.", "Файл збережено.", "Зустріч перенесено на 15:00.", "Перевірте, будь ласка, до п'ятниці.",
]


def _token(rng: random.Random) -> str:
    kind = rng.randrange(6)
    if kind == 0:
        return f"{rng.choice(WORDS)}-{rng.randint(0, 999)} {rng.choice(WORDS)} {rng.randint(0, 20)}"
    if kind == 1:
        return "".join(rng.choices(string.hexdigits.lower(), k=rng.choice([8, 12, 32])))
    if kind == 2:
        return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z"
    if kind == 3:
        return f"/srv/{rng.choice(WORDS)}/{rng.choice(WORDS)}_{rng.randint(1, 99)}.{rng.choice(['txt', 'json', 'csv', 'md'])}"
    if kind == 4:
        return rng.choice(STATUS)
    return rng.choice(NOTES)


def _value(rng: random.Random) -> object:
    roll = rng.random()
    if roll < 0.35:
        return rng.randint(0, 10_000)
    if roll < 0.45:
        return rng.choice([True, False, None])
    if roll < 0.55:
        return [_token(rng) for _ in range(rng.randint(1, 4))]
    return _token(rng)


def benign(rng: random.Random) -> str:
    """One short benign tool result."""
    shape = rng.randrange(6)
    if shape == 0:
        return json.dumps({k: _value(rng) for k in rng.sample(KEYS, rng.randint(1, 5))}, ensure_ascii=False)
    if shape == 1:
        return str(rng.randint(0, 100_000)) if rng.random() < 0.5 else _token(rng)
    if shape == 2:
        return "\n".join(_token(rng) for _ in range(rng.randint(2, 6)))
    if shape == 3:
        return "\n".join(f"{rng.choice(KEYS)}={_token(rng)}" for _ in range(rng.randint(1, 5)))
    if shape == 4:
        header = ",".join(rng.sample(KEYS, 3))
        return header + "\n" + "\n".join(",".join(str(_value(rng)) for _ in range(3)) for _ in range(rng.randint(1, 4)))
    return f"[{_token(rng)}] {rng.choice(['INFO', 'WARN', 'DEBUG'])} {rng.choice(NOTES)}"


def injected(rng: random.Random, injections: list[str]) -> tuple[str, list[int]]:
    """One short result carrying a training injection, with its span."""
    text = rng.choice(injections).strip()
    if rng.random() < 0.5:
        data = {k: _value(rng) for k in rng.sample(KEYS, rng.randint(0, 3))}
        key = rng.choice(["message", "note", "result", "description", "comment"])
        data[key] = "\0"
        out = json.dumps(data, ensure_ascii=False)
        encoded = json.dumps(text, ensure_ascii=False)[1:-1]
        at = out.index("\\u0000")
        out = out.replace("\\u0000", encoded, 1)
        return out, [at, at + len(encoded)]
    head = benign(rng) + "\n" if rng.random() < 0.6 else ""
    return head + text, [len(head), len(head) + len(text)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, required=True, help="train.jsonl of build_data.py (its short injection prompts)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--benign", type=int, default=2000)
    parser.add_argument("--injected", type=int, default=1000)
    args = parser.parse_args()
    rng = random.Random(17)
    injections = []
    with args.train.open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if row["label"] == "injection" and row["kind"] == "prompt" and 20 <= len(row["text"]) <= 240:
                injections.append(row["text"])
    with args.out.open("w", encoding="utf-8") as out:
        for _ in range(args.benign):
            row = {"text": benign(rng), "label": "benign", "source": "short-results", "kind": "tool_output"}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
        for _ in range(args.injected):
            text, span = injected(rng, injections)
            row = {"text": text, "label": "injection", "source": "short-results", "kind": "tool_output", "span": span}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{args.benign} benign, {args.injected} injected short results ({len(injections)} injection prompts) -> {args.out}")


if __name__ == "__main__":
    main()
