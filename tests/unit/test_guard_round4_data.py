"""Round-4 guard data: the committed held-out files are what the builder makes, and they share
nothing with the training material (P7: held-out sources are never seen in training)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from training.round4 import build_round4, fragments_heldout, fragments_train, redteam

BENCH = Path(__file__).resolve().parents[2] / "bench" / "data"
KINDS = {"code", "web", "file", "email", "ticket", "chat", "calendar", "notice", "tool_output", "doc"}


def _lines(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _grams(text: str, n: int = 8) -> set[str]:
    words = re.findall(r"\w+", text.lower())
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def _strings(module: object, names: tuple[str, ...]) -> set[str]:
    out: set[str] = set()
    for name in names:
        value = getattr(module, name)
        for item in value.values() if isinstance(value, dict) else [value]:
            if isinstance(item, list):
                out |= {s for s in item if isinstance(s, str)}
    return out


@pytest.mark.parametrize(("name", "rows"), [
    # R: P7
    ("guard_heldout_multilingual.jsonl", lambda: build_round4.multilingual("heldout", seed=51, per_lang=170)),
    ("guard_heldout_redteam.jsonl", redteam.rows),
])
def test_committed_heldout_files_are_exactly_what_the_builder_makes(
        name: str, rows: Callable[[], list[dict[str, Any]]]) -> None:
    expected = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows())
    assert (BENCH / name).read_text(encoding="utf-8") == expected


@pytest.mark.parametrize("name", ["guard_heldout_multilingual.jsonl", "guard_heldout_techdocs.jsonl",
                                  "guard_heldout_redteam.jsonl"])
def test_every_heldout_row_has_text_label_source_kind_and_lang(name: str) -> None:
    rows = _lines(BENCH / name)
    assert rows
    for row in rows:
        assert set(row) == {"text", "label", "source", "kind", "lang"}
        assert row["label"] in ("benign", "injection") and row["kind"] in KINDS and row["text"].strip()


def test_redteam_slice_has_forty_injections_and_forty_lookalikes_in_the_issue_languages() -> None:
    rows = _lines(BENCH / "guard_heldout_redteam.jsonl")
    injections = [r for r in rows if r["label"] == "injection"]
    assert len(injections) >= 40 and len(rows) - len(injections) >= 40
    assert {"ja", "zh", "ru", "ar", "hi"} <= {r["lang"] for r in injections}


def test_heldout_fragments_share_no_injection_wrapper_or_attacker_address_with_training() -> None:
    # R: P7
    train_inj = set(fragments_train.INJ_EN + fragments_train.INJ_FR + fragments_train.INJ_UK)
    held_inj = set(fragments_heldout.INJ_EN + fragments_heldout.INJ_FR + fragments_heldout.INJ_UK)
    assert not train_inj & held_inj
    train_wraps = {w for ws in fragments_train.WRAP_TRAIN.values() for w in ws} - {"{inj}"}
    held_wraps = {w for ws in fragments_heldout.WRAP_HELDOUT.values() for w in ws} - {"{inj}"}
    assert not train_wraps & held_wraps
    train_addr = {a for v in build_round4.TRAIN_ATTACKER.values() for a in v}
    assert not train_addr & {a for v in fragments_heldout.ATTACKER.values() for a in v}
    lines = ("FR", "UK", "FR_POOLS", "UK_POOLS")
    assert len(_strings(fragments_train, lines) & _strings(fragments_heldout, lines)) <= 1  # "Madame, Monsieur,"


def test_no_eight_word_sequence_of_the_heldout_files_occurs_in_the_composed_training_rows() -> None:
    # R: P7 (the technical slices need the wheels and are checked when the data are built)
    train = build_round4.multilingual("train", seed=41, per_lang=460) + build_round4.awareness(seed=43)
    seen = set().union(*(_grams(r["text"]) for r in train))
    for name in ("guard_heldout_multilingual.jsonl", "guard_heldout_redteam.jsonl"):
        shared = {g for r in _lines(BENCH / name) for g in _grams(r["text"])} & seen
        assert not shared, (name, sorted(shared)[:5])
