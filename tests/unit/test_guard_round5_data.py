"""Round-5 guard training data: the builder's rows are balanced, deterministic, carry spans that
hold the injected wording, and no round-5 wording comes from the round-4 held-out material
(P7: held-out sources are never seen in training). The held-out modules are only imported here
and compared programmatically; a failure names round-5 items, never held-out text."""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from typing import Any

import pytest

from training.round5 import build_round5
from training.round5 import fragments_train as f5
from training.round6.build_round6 import strings_in

PLACEHOLDER = re.compile(r"\{\w+\}")
WORDINGS = {("injection", "en"): f5.INJ_EN, ("injection", "fr"): f5.INJ_FR, ("injection", "uk"): f5.INJ_UK,
            ("benign", "en"): f5.BENIGN_EN, ("benign", "fr"): f5.BENIGN_FR, ("benign", "uk"): f5.BENIGN_UK}


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return build_round5.build()


def _segments(template: str) -> list[str]:
    """The literal pieces of `template` between its placeholders, in order."""
    return [text for text, _, _, _ in string.Formatter().parse(template) if text.strip()]


def _holds(text: str, template: str) -> bool:
    """Whether `text` holds `template` filled with any values (its literal pieces, in order)."""
    at = 0
    for seg in _segments(template):
        at = text.find(seg, at)
        if at < 0:
            return False
        at += len(seg)
    return True


def _json_string(piece: str) -> list[str]:
    """`piece` decoded, if it is a JSON string literal."""
    try:
        value = json.loads(piece)
    except ValueError:
        return []
    return [value] if isinstance(value, str) else []


def _grams(text: str, n: int = 8) -> set[str]:
    words = re.findall(r"\w+", text.lower())
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def test_rows_are_balanced_in_three_languages_and_shaped_for_training(rows: list[dict[str, Any]]) -> None:
    assert len(rows) == 2400
    assert Counter(r["label"] for r in rows) == {"injection": 1200, "benign": 1200}
    assert Counter((r["lang"], r["label"]) for r in rows) == {(lang, label): 400 for lang in ("en", "fr", "uk")
                                                                for label in ("injection", "benign")}
    for row in rows:
        if row["label"] == "injection":
            assert set(row) == {"text", "label", "source", "kind", "lang", "span"}
        else:
            assert set(row) <= {"text", "label", "source", "kind", "lang", "focus"}
        assert row["source"] == "r5-handwritten" and row["kind"] == "tool_output"
        assert 100 <= len(row["text"]) <= 2500
        assert not PLACEHOLDER.search(row["text"]), row["text"]  # every placeholder filled


def test_the_builder_is_deterministic(rows: list[dict[str, Any]]) -> None:
    assert build_round5.build() == rows


def test_each_span_holds_one_injection_wording_and_benign_rows_hold_none(rows: list[dict[str, Any]]) -> None:
    templates = [(lang, i, t) for (label, lang), ts in WORDINGS.items() if label == "injection"
                 for i, t in enumerate(ts)]
    longest = [max(_segments(t), key=len) for _, _, t in templates]
    used: set[tuple[str, int]] = set()
    for row in rows:
        if row["label"] == "injection":
            start, end = row["span"]
            piece = row["text"][start:end]
            assert piece.strip() and len(piece) < 600
            forms = [piece, piece.replace('""', '"')] + _json_string(piece)  # as is, CSV- or JSON-quoted
            hits = [(lang, i) for lang, i, t in templates if any(_holds(f, t) for f in forms)]
            assert hits, piece
            used.update(hits)
        else:
            assert not any(seg in row["text"] for seg in longest), row["text"]
    # every hand-written injection wording is used at least once
    assert used == {(lang, i) for lang, i, _ in templates}


def test_at_least_150_distinct_wordings_per_language_and_label() -> None:
    for key, wordings in WORDINGS.items():
        assert len(set(wordings)) == len(wordings) >= 150, key
    injections = {w for (label, _), ws in WORDINGS.items() if label == "injection" for w in ws}
    assert not injections & {w for (label, _), ws in WORDINGS.items() if label == "benign" for w in ws}


def test_hard_benign_sentences_sit_in_benign_and_injected_documents(rows: list[dict[str, Any]]) -> None:
    benign = [t for (label, _), ts in WORDINGS.items() if label == "benign" for t in ts]
    with_benign = Counter(r["label"] for r in rows if any(_holds(r["text"], t) for t in benign))
    assert with_benign["benign"] >= 0.5 * 1200 and with_benign["injection"] >= 0.15 * 1200
    # a benign row's `focus` is the range of its hard benign sentence
    focused = [r for r in rows if "focus" in r]
    assert len(focused) >= 0.5 * 1200
    for row in focused:
        piece = row["text"][row["focus"][0]:row["focus"][1]]
        forms = [piece, piece.replace('""', '"')] + _json_string(piece)
        assert any(_holds(f, t) for f in forms for t in benign), piece


def test_no_round5_wording_or_address_comes_from_the_round4_heldout_material() -> None:
    # R: P7
    from training.round4 import fragments_heldout, redteam

    held = [s for mod in (fragments_heldout, redteam) for name, v in vars(mod).items()
            if not name.startswith("__") for s in strings_in(v)]
    held += [r["text"] for r in redteam.rows()]
    held_lower = [h.lower() for h in held if len(h.split()) >= 5]
    held_grams = set().union(*(_grams(h) for h in held))
    clashes = []
    for key, wordings in WORDINGS.items():
        for i, wording in enumerate(wordings):
            low = wording.lower()
            if any(low in h or h in low for h in held_lower) or _grams(wording) & held_grams:
                clashes.append((key, i))  # names the round-5 item only
    assert not clashes
    # addresses and wrappers (dictionary values; the keys are language names): the message shows round-5 items
    held_contacts = set(strings_in(list(fragments_heldout.ATTACKER.values())))
    assert not [a for a in strings_in(list(f5.CONTACTS.values())) if a in held_contacts]
    held_wrappers = set(strings_in(list(fragments_heldout.WRAP_HELDOUT.values())))
    assert not [w for w in strings_in(list(f5.WRAP.values())) if w != "{inj}" and w in held_wrappers]


def test_composed_rows_share_no_eight_word_sequence_with_the_round4_heldout_material(
        rows: list[dict[str, Any]]) -> None:
    # R: P7
    from training.round4 import fragments_heldout, redteam

    held = [s for mod in (fragments_heldout, redteam) for name, v in vars(mod).items()
            if not name.startswith("__") for s in strings_in(v)] + [r["text"] for r in redteam.rows()]
    held_grams = set().union(*(_grams(h) for h in held))
    shared_rows = [i for i, r in enumerate(rows) if _grams(r["text"]) & held_grams]
    assert not shared_rows, f"{len(shared_rows)} round-5 rows, first indices {shared_rows[:5]}"
