"""YAML rule packs (P3): ids, word patterns, literals and weights, matched in linear time.

A pattern is a sequence of *slots* over the normalised word tokens, never a regex:

- `ignore` — one word; `previous|prior|above` — any of these words;
- `instruction*` — a word starting with `instruction`;
- a trailing `?` makes a slot optional (`all?`);
- `*` allows up to 3 arbitrary words before the next slot, `~N` up to N (N ≤ 8).

`literals` are plain substrings of the normalised text (`[system]`). Matching first lists the
tokens any rule can accept, with their positions (one pass), looks patterns up by their least
common required word, keeps those whose required words all occur, and checks each position of
their first words (the first slot must be plain words) with a bounded number of steps, so the
cost is linear in the text with no way to backtrack catastrophically (P5). The compiled
`RuleMatcher` (setup.py; optional) runs the same search in C.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from itertools import compress, count
from pathlib import Path
from typing import Any

from gateway.yaml_document import YamlProblem, parse_yaml
from plugins.prompt_guard.normalize import TOKEN_TABLE, normalize

try:  # the optional compiled matchers (setup.py): the same matches, several times faster
    from plugins.prompt_guard._native import LiteralFinder, RuleMatcher
except ImportError:  # pragma: no cover - depends on the install having had a C compiler
    LiteralFinder = RuleMatcher = None

MAX_SLOTS = 12
MAX_GAP = 8
COMMON = frozenset(
    b"a an the i me my we us our you your yours he she it its they them this that these those is are was "
    b"were be been am do does did dont don t not no yes if then else when what whats which who how why "
    b"to of in on at by for from with as and or but so all any some every each only just now new more "
    b"can could will would should must may might have has had get got make made use run call show print "
    b"send give tell say write output return see let go take put add keep find start stop end before after "
    b"instead first next last other here there up out about into over".split()
)
"""Everyday words; a pattern is looked up by its least common required slot, not by these."""


class RulePackError(ValueError):
    """A rule pack that cannot be used; the message names the file and the rule."""


@dataclass(frozen=True)
class Slot:
    """One position of a pattern."""

    words: frozenset[bytes]
    prefixes: tuple[bytes, ...]
    optional: bool
    gap: int
    """How many arbitrary words may come before this slot."""

    def accepts(self, token: bytes) -> bool:
        return token in self.words or (bool(self.prefixes) and token.startswith(self.prefixes))


@dataclass(frozen=True)
class Rule:
    """A rule of the pack: it fires when any of its patterns or literals matches."""

    id: str
    weight: float
    description: str
    patterns: tuple[tuple[Slot, ...], ...]
    literals: tuple[str, ...]


def compile_pattern(source: str, where: str) -> tuple[Slot, ...]:
    """Compile one pattern string into slots; raise `RulePackError` on bad syntax."""
    slots: list[Slot] = []
    gap = 0
    for part in source.lower().split():
        if part == "*" or (part.startswith("~") and part[1:].isdigit()):
            gap += 3 if part == "*" else int(part[1:])
            continue
        optional = part.endswith("?")
        part = part.rstrip("?").strip("()")
        words: set[bytes] = set()
        prefixes: list[bytes] = []
        for alt in part.split("|"):
            if not alt or not alt.rstrip("*").replace("_", "").isalnum():
                raise RulePackError(f"{where}: bad word {alt!r} in pattern {source!r}")
            word = normalize(alt.rstrip("*")).encode()
            (prefixes.append(word) if alt.endswith("*") else words.add(word))
        slots.append(Slot(frozenset(words), tuple(prefixes), optional, gap))
        gap = 0
    if not slots or gap:
        raise RulePackError(f"{where}: pattern {source!r} must start and end with a word")
    first = slots[0]
    if first.optional or first.prefixes or first.gap:
        raise RulePackError(f"{where}: pattern {source!r} must start with plain words (no *, ?)")
    if len(slots) > MAX_SLOTS or sum(s.gap for s in slots) > MAX_GAP:
        raise RulePackError(f"{where}: pattern {source!r} is too long (≤{MAX_SLOTS} words, ≤{MAX_GAP} gap)")
    return tuple(slots)


def _match_rest(slots: Sequence[Slot], k: int, positions: Sequence[int], words: Sequence[bytes], j: int,
                pos: int) -> bool:
    """True when slots[k:] match from token `pos` on. The text is given *sparsely*: `words[i]`
    is the token at `positions[i]`, listed only for the tokens some rule can accept, and `j` is
    the first entry at or after `pos`. Bounded: gaps and slots are capped."""
    if k == len(slots):
        return True
    slot = slots[k]
    end = pos + slot.gap + 1
    i = j
    while i < len(positions) and positions[i] < end:
        if slot.accepts(words[i]) and _match_rest(slots, k + 1, positions, words, i + 1, positions[i] + 1):
            return True
        i += 1
    return slot.optional and _match_rest(slots, k + 1, positions, words, j, pos)


def literal_pattern(literals: Iterable[str]) -> str:
    """One regex that finds any of `literals`, written as a trie (`<(?:<sys>>|\\|im_start…)`).

    At each position the engine follows one branch per character instead of trying every
    literal in turn, and a longer literal wins over its own prefix (an optional tail is
    greedy), as in a longest-first alternation. Plain literals only: linear time (P5)."""
    trie: dict[str, dict] = {}
    for literal in literals:
        node = trie
        for char in literal:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node: dict[str, dict]) -> str:
        alts = [re.escape(char) + build(child) for char, child in sorted(node.items()) if char]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return "(?:" + body + ")?" if "" in node else body

    return build(trie)


class LiteralSearch:
    """Finds which of a set of plain literals occur in normalised text, leftmost-longest and
    non-overlapping, in one pass: the trie regex of `literal_pattern`, or the compiled
    `LiteralFinder`, which scans the UTF-8 bytes the same way (same hits)."""

    def __init__(self, literals: Iterable[str], native: bool = True) -> None:
        self.literals = sorted(set(literals))
        encoded = [lit.encode("utf-8", "surrogatepass") for lit in self.literals]
        self._finder = LiteralFinder(encoded) if native and LiteralFinder is not None and all(encoded) else None
        self._regex = re.compile(literal_pattern(self.literals)) if self._finder is None else None

    @property
    def backend(self) -> str:
        """`native` when the compiled finder is in use, else `python`."""
        return "python" if self._finder is None else "native"

    def find(self, norm: str, data: bytes | None = None) -> set[str]:
        """The literals found in `norm` (`data`: the same text as UTF-8, when the caller has it)."""
        if self._finder is not None:
            found = self._finder.find(norm.encode("utf-8", "surrogatepass") if data is None else data)
            return {self.literals[i] for i in found}
        return set(self._regex.findall(norm))  # type: ignore[union-attr]  # built when there is no finder


class RulePack:
    """A loaded, compiled rule pack; `match` returns the rules that fire on a text."""

    def __init__(self, rules: Iterable[Rule], disabled: Iterable[str] = (), native: bool = True) -> None:
        self.all_rules = {r.id: r for r in rules}
        unknown = sorted(set(disabled) - self.all_rules.keys())
        if unknown:
            raise RulePackError(f"disabled_rules names unknown rule ids: {', '.join(unknown)}")
        self.rules = [r for r in self.all_rules.values() if r.id not in set(disabled)]
        # gate word -> patterns whose least common required slot holds it
        self._gates: dict[bytes, list[int]] = {}
        self._patterns: list[tuple[Rule, tuple[Slot, ...], tuple[frozenset[bytes], ...]]] = []
        for rule in self.rules:
            for pattern in rule.patterns:
                required = tuple(s.words for s in pattern if not s.optional and not s.prefixes)
                gate = min(required, key=lambda ws: (len(ws & COMMON), len(ws)))
                for word in gate:
                    self._gates.setdefault(word, []).append(len(self._patterns))
                self._patterns.append((rule, pattern, required))
        self._words = frozenset(w for rule in self.rules for p in rule.patterns for s in p for w in s.words)
        self._literals = [(lit, r) for r in self.rules for lit in r.literals]
        self._prefixes = tuple(sorted({x for r in self.rules for p in r.patterns for s in p for x in s.prefixes}))
        self._matcher = self._compiled() if native else None

    @property
    def backend(self) -> str:
        """`native` when the compiled matcher is in use, else `python`."""
        return "python" if self._matcher is None else "native"

    @property
    def native_matcher(self) -> Any:
        """The compiled matcher (for a combined pass with the classifier), or None."""
        return self._matcher

    def rules_at(self, indexes: Iterable[int], literal_hits: Collection[str] = ()) -> list[Rule]:
        """The rules the compiled matcher reported by index, plus those with a literal hit."""
        return self._with_literals({self.rules[i].id for i in indexes}, literal_hits)

    def match_text(self, normalized: bytes, literal_hits: Collection[str] = ()) -> list[Rule]:
        """`match` on the tokens of UTF-8 normalised text (by the compiled matcher when there
        is one: it runs the same search as `_match_rest` over the same tokens)."""
        if self._matcher is None:
            return self.match(normalized.translate(TOKEN_TABLE).split(), literal_hits)
        return self.rules_at(self._matcher.match(normalized), literal_hits)

    def _compiled(self) -> Any:
        """The compiled matcher of the enabled rules, or None without the extension (or for a
        pack it cannot hold: more than 32 prefixes)."""
        if RuleMatcher is None or len(self._prefixes) > 32:
            return None
        words = sorted(self._words)
        ids = {w: i for i, w in enumerate(words)}
        bits = {p: 1 << i for i, p in enumerate(self._prefixes)}
        patterns = [
            (index, [(sorted(ids[w] for w in s.words), sum(bits[p] for p in set(s.prefixes)), s.optional, s.gap)
                     for s in pattern])
            for index, rule in enumerate(self.rules) for pattern in rule.patterns
        ]
        try:
            return RuleMatcher(TOKEN_TABLE, words, self._prefixes, patterns)
        except ValueError:
            return None

    @property
    def literals(self) -> set[str]:
        """Every literal of the enabled rules (the scanner finds them all in one pass)."""
        return {lit for lit, _ in self._literals}

    def match(self, tokens: Sequence[bytes], literal_hits: Collection[str] = ()) -> list[Rule]:
        """Rules firing on the normalised `tokens` and the `literal_hits` found in the text,
        each once, in pack order."""
        words, prefixes = self._words, self._prefixes
        positions = [i for i, t in enumerate(tokens) if t in words or (prefixes and t.startswith(prefixes))]
        return self._match(positions, [tokens[i] for i in positions], literal_hits)

    def _match(self, positions: list[int], words: list[bytes], literal_hits: Collection[str]) -> list[Rule]:
        fired: dict[str, Rule] = {}
        present = self._words.intersection(words)
        live: dict[bytes, list[tuple[Rule, tuple[Slot, ...]]]] = {}
        disjoint = present.isdisjoint
        for index in sorted({i for word in self._gates.keys() & present for i in self._gates[word]}):
            rule, pattern, required = self._patterns[index]
            # Only patterns whose every required word occurs somewhere can match at all.
            if rule.id not in fired and not any(map(disjoint, required)):
                for word in pattern[0].words & present:
                    live.setdefault(word, []).append((rule, pattern))
        if live:
            for j in compress(count(), map(live.__contains__, words)):
                for rule, pattern in live[words[j]]:
                    if rule.id not in fired and _match_rest(pattern, 1, positions, words, j + 1, positions[j] + 1):
                        fired[rule.id] = rule
        return self._with_literals(fired.keys(), literal_hits)

    def _with_literals(self, fired: Collection[str], literal_hits: Collection[str]) -> list[Rule]:
        """The rules in `fired` and those with a literal among `literal_hits`, in pack order."""
        ids = set(fired) | {rule.id for lit, rule in self._literals if lit in literal_hits}
        return [r for r in self.rules if r.id in ids]


def parse_rules(data: Any, source: str) -> list[Rule]:
    """Validate the YAML structure of a pack and compile its rules."""
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise RulePackError(f"{source}: expected a mapping with a 'rules' list")
    rules: list[Rule] = []
    seen: set[str] = set()
    for i, raw in enumerate(data["rules"]):
        where = f"{source}: rules.{i}"
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            raise RulePackError(f"{where}: each rule needs an 'id'")
        extra = set(raw) - {"id", "weight", "description", "patterns", "literals"}
        if extra:
            raise RulePackError(f"{where}: unknown keys {sorted(extra)}")
        rid, weight = raw["id"], raw.get("weight")
        if rid in seen:
            raise RulePackError(f"{where}: duplicate id {rid!r}")
        if not isinstance(weight, (int, float)) or not 0 < weight <= 1:
            raise RulePackError(f"{where} ({rid}): 'weight' must be a number in (0, 1]")
        patterns = tuple(compile_pattern(str(p), f"{where} ({rid})") for p in raw.get("patterns") or [])
        literals = tuple(normalize_literal(str(lit)) for lit in raw.get("literals") or [])
        if not patterns and not literals:
            raise RulePackError(f"{where} ({rid}): needs 'patterns' or 'literals'")
        seen.add(rid)
        rules.append(Rule(rid, float(weight), str(raw.get("description", "")), patterns, literals))
    return rules


def normalize_literal(literal: str) -> str:
    """Literals are matched against normalised text, so normalise them the same way."""
    return normalize(literal)


def load_rules(path: str | Path) -> list[Rule]:
    """Read and compile a YAML pack from `path`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RulePackError(f"{path}: cannot read rule pack: {exc.strerror}") from None
    try:
        document = parse_yaml(text, str(path))  # the gateway's one YAML reader: a key given twice is refused, not dropped
    except YamlProblem as exc:
        raise RulePackError(exc.problem) from None
    if document.duplicates:
        raise RulePackError("; ".join(document.duplicate_problems()))
    return parse_rules(document.data, str(path))


DEFAULT_RULES = Path(__file__).resolve().parent / "rules" / "default.yaml"
"""The pack shipped inside the package (`plugins/prompt_guard/rules/default.yaml`), so a wheel carries it."""
