"""The one YAML reader for files operators write (G8, D4): data, where each key sits, and no
silently dropped keys.

    document = read_yaml(path)          # YamlProblem for a file that cannot be read or is not YAML
    document.data                       # what yaml.safe_load would return
    document.where("routes.0.plugins")  # "path:7:5", the nearest written ancestor when absent
    document.duplicates                 # every key written twice in one mapping, both places named

A mapping that names a key twice is valid YAML to PyYAML, which keeps the last value: a second
`plugins:` in a route silently replaced the first (and its enforce-mode guard). So every mapping
node is walked once before the data is built, recording the mark of each key and value by its
dotted path (the path pydantic errors use) and every key given twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class Position:
    """A place in a YAML file, 1-based as editors count."""

    line: int
    column: int

    @classmethod
    def of(cls, mark: yaml.Mark) -> "Position":
        return cls(mark.line + 1, mark.column + 1)


@dataclass(frozen=True)
class Duplicate:
    """A key written twice in one mapping: `path` is the key's dotted path."""

    path: str
    key: str
    first: Position
    again: Position


class YamlProblem(Exception):
    """A file that cannot be read or parsed; `problem` is one line naming the file and the place."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


@dataclass
class YamlDocument:
    """A parsed YAML file: its data, the position of every key (or list item) by dotted path, and
    the keys it gives twice."""

    source: str
    data: Any
    positions: dict[str, Position] = field(default_factory=dict)
    duplicates: list[Duplicate] = field(default_factory=list)

    def position(self, dotted: str) -> Position | None:
        """Where `dotted` is written, or its nearest written ancestor (a missing key is reported
        at the mapping that lacks it); None for an empty document."""
        parts = dotted.split(".") if dotted else []
        while parts:
            found = self.positions.get(".".join(parts))
            if found is not None:
                return found
            parts.pop()
        return self.positions.get("")

    def where(self, dotted: str) -> str:
        """`source:line:column` of `dotted` (see `position`), or just `source`."""
        found = self.position(dotted)
        return f"{self.source}:{found.line}:{found.column}" if found else self.source

    def duplicate_problems(self, path_text: Callable[[str], str] = str) -> list[str]:
        """One line per key given more than once, `source:line:column: path: ...` naming both places;
        `path_text` writes the dotted path for people (gateway.config_problems.readable_path)."""
        return [
            f"{self.source}:{d.again.line}:{d.again.column}: {path_text(d.path)}: key {d.key!r} is given more than once in this mapping "
            f"(first at {self.source}:{d.first.line}:{d.first.column}); YAML would keep only the last one and drop the "
            "others silently: remove or merge them"
            for d in self.duplicates
        ]


def parse_yaml(text: str, source: str) -> YamlDocument:
    """Parse `text` (named `source` in messages) as one YAML document with positions and duplicates."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        document = YamlDocument(source, None)
        if node is not None:
            _walk(loader, node, "", None, document, set())
            document.data = loader.construct_document(node)
        return document
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
        raise YamlProblem(f"{at}: (yaml): not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    finally:
        loader.dispose()


def read_yaml(path: str | Path) -> YamlDocument:
    """Read and parse the YAML file at `path` (UTF-8)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise YamlProblem(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise YamlProblem(f"{path}: not UTF-8 text (byte {exc.start})") from None
    return parse_yaml(text, str(path))


def _walk(loader: yaml.SafeLoader, node: Node, path: str, key_mark: yaml.Mark | None, document: YamlDocument,
          seen: set[int]) -> None:
    """Record where `node` (at dotted `path`) is written, then its children. A node reached again
    through an alias is not walked again (anchors may nest or recurse)."""
    document.positions[path] = Position.of(key_mark or node.start_mark)
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            _walk(loader, item, _join(path, str(index)), None, document, seen)
    elif isinstance(node, MappingNode):
        pairs = [(_key(loader, k), k, v) for k, v in node.value if k.tag != MERGE_TAG]  # `<<: *base` keys yield to these
        last = {key: index for index, (key, _, _) in enumerate(pairs) if key is not None}
        first: dict[Any, yaml.Mark] = {}
        for index, (key, key_node, value_node) in enumerate(pairs):
            if key is None:
                continue
            child = _join(path, str(key))
            if key in first:
                document.duplicates.append(Duplicate(child, str(key), Position.of(first[key]), Position.of(key_node.start_mark)))
            else:
                first[key] = key_node.start_mark
            if last[key] == index:  # the value the data keeps is the one positions point into
                _walk(loader, value_node, child, key_node.start_mark, document, seen)


def _key(loader: yaml.SafeLoader, node: Node) -> Any:
    """A scalar key as the data will hold it (`1` and `01` are the same key); None for other keys
    (construction refuses the unhashable ones with its own error)."""
    if not isinstance(node, ScalarNode):
        return None
    return loader.construct_object(node)


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part
