"""How a config problem is told to an operator (D4): the path as names, and "did you mean".

    readable_path(data, "routes.0.plugins.1.comand")  # "routes[demo].plugins[docs].comand"
    schema_problem(config_model, error)               # (dotted path, message) of one pydantic error
    did_you_mean("inspekt", ["inspect", "openai"])    # "; did you mean 'inspect'?"

Dotted paths (0-based, what pydantic and `YamlDocument.where` use) stay the key for positions;
messages show the readable form: a list item by its name (a route by `model`, a plugin node by
its id, an API key by `user_id`, anything else by `name` or `id`) when that name is unique in its
list, else `#n` counting from 1.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from gateway.registry import PLUGIN_TYPES, REGISTRY, plugin_id

NAME_KEYS: dict[str, str] = {"routes": "model", "upstreams": "name", "api_keys": "user_id"}
"""The key that names an item, for lists whose items are not named by `name` or `id`."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`; did you mean 'x'?` for the closest of `choices`, or '' when none is close."""
    close = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _item_name(key: str, item: Any) -> str | None:
    if not isinstance(item, dict):
        return None
    if key == "plugins":
        name = plugin_id(item)
    else:
        name = item.get(NAME_KEYS.get(key, "name"), item.get("id"))
    return name if isinstance(name, str) and name and not any(c in name for c in "[]. ") else None


def readable_path(data: Any, dotted: str) -> str:
    """`dotted` with each list index written as the item's unique name, else as `#n` from 1."""
    if not dotted or dotted == "(top level)":
        return dotted
    out: list[str] = []
    node, key = data, ""
    for part in dotted.split("."):
        if isinstance(node, list) and part.isdigit():
            index = int(part)
            item = node[index] if index < len(node) else None
            name = _item_name(key, item)
            names = [_item_name(key, other) for other in node]
            out[-1] += f"[{name}]" if name is not None and names.count(name) == 1 else f"[#{index + 1}]"
            node = item
            continue
        out.append(part)
        key = part
        node = node.get(part) if isinstance(node, dict) else None
    return ".".join(out)


def dotted_loc(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as the YAML path (union tags and validator names left out)."""
    parts = [str(p) for p in loc if p not in PLUGIN_TYPES and not str(p).startswith("function-")]
    return ".".join(parts) or "(top level)"


def _models(annotation: Any) -> list[Any]:
    """The types an annotation admits, unwrapped from Annotated, Optional and unions."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for arg in typing.get_args(annotation) for t in _models(arg)]
    return [annotation]


def _step(candidates: list[Any], part: Any) -> list[Any]:
    """The types at `part` below each of `candidates`."""
    out: list[Any] = []
    for candidate in candidates:
        origin = typing.get_origin(candidate)
        if isinstance(part, int) and origin in (list, tuple, set, frozenset):
            out += _models(typing.get_args(candidate)[0])
        elif isinstance(part, str) and origin is dict:
            out += _models(typing.get_args(candidate)[1])
        elif isinstance(part, str) and isinstance(candidate, type) and issubclass(candidate, BaseModel):
            if part in PLUGIN_TYPES and candidate is REGISTRY[part].config:
                out.append(candidate)  # the union member a discriminated plugin node was read as
                continue
            for name, field in candidate.model_fields.items():
                if part in (name, field.alias):
                    out += _models(field.annotation)
    return out


def model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose field `loc` names (the last part being that field), when it is one model."""
    candidates: list[Any] = [root]
    parts = [p for p in loc[:-1] if not str(p).startswith("function-")]
    for index, part in enumerate(parts):
        if part in PLUGIN_TYPES and index > 0:
            candidates = [REGISTRY[part].config]
            continue
        candidates = _step(candidates, part)
    models = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
    return models[0] if len(models) == 1 else None


def keys_of(model: type[BaseModel]) -> list[str]:
    """The keys a model reads from YAML (aliases where given), excluded fields left out."""
    return [field.alias or name for name, field in model.model_fields.items() if not field.exclude]


def schema_problem(root: type[BaseModel], error: Any) -> tuple[str, str]:
    """(dotted path, message) for one pydantic error, pydantic's wording replaced where an
    operator needs more: an unknown plugin type or key names the closest known one."""
    loc = tuple(error["loc"])
    dotted = dotted_loc(loc)
    message = str(error["msg"]).removeprefix("Value error, ")
    kind = error.get("type")
    if kind == "union_tag_invalid" and _in_plugins(loc):
        tag = str((error.get("ctx") or {}).get("tag"))
        message = f"unknown plugin type {tag!r}{did_you_mean(tag, PLUGIN_TYPES)} (the types: {', '.join(sorted(PLUGIN_TYPES))})"
        return f"{dotted}.type", message
    if kind == "union_tag_not_found" and _in_plugins(loc):
        return dotted, f"a plugin node needs a 'type': one of {', '.join(sorted(PLUGIN_TYPES))}"
    if kind == "extra_forbidden":
        key = str(loc[-1])
        model = model_at(root, loc)
        if model is not None:
            known = keys_of(model)
            hint = did_you_mean(key, known)
            if not hint and len(known) <= 12:
                hint = f"; the keys here: {', '.join(known)}"
            return dotted, f"unknown key {key!r}{hint}"
        return dotted, f"unknown key {key!r}"
    return dotted, message


def _in_plugins(loc: tuple[Any, ...]) -> bool:
    return len(loc) >= 2 and loc[-2] == "plugins" and isinstance(loc[-1], int)
