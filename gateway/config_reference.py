"""The configuration reference, generated from the typed models (D3).

    json_schema()   # the JSON Schema of the YAML file, for editors (`toolgate schema`)
    markdown()      # docs/configuration.md (`toolgate schema --markdown`): every key, its type,
                    # default and meaning, one table per section, plugins and the Bridge included

Nothing here is written by hand: a key's meaning is its field's `description`, a section's intro
its model's docstring. tests/unit/test_config_reference.py fails when docs/configuration.md is
not what `markdown()` makes now.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from gateway.config import Config
from gateway.registry import REGISTRY
from gateway.secrets import SecretRef

REGENERATE = "toolgate schema --markdown > docs/configuration.md"
SCHEMA_URI = "https://json-schema.org/draft/2020-12/schema"


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) a YAML config must satisfy, for editors such as the YAML
    language server. Cross-references between sections (a route naming an upstream) and secret
    files are checked by `toolgate check`, not here."""
    schema = _by_tag(Config.model_json_schema(mode="validation"))
    schema["properties"].pop("base_dir", None)
    head = {"$schema": SCHEMA_URI, "title": "toolgate configuration",
            "description": "The YAML file of `toolgate serve --config` (docs/configuration.md)"}
    return {**head, **{key: value for key, value in schema.items() if key not in head}}


def _by_tag(node: Any) -> Any:
    """`node` with each discriminated `oneOf` (pydantic's plugin union, whose `discriminator` is
    an OpenAPI keyword validators ignore) as `if type is X then X's schema`: a validator then
    reports the problem inside the node the `type` names, not a guess among all of them, and an
    unknown `type` as not one of the types."""
    if isinstance(node, list):
        return [_by_tag(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _by_tag(value) for key, value in node.items()}
    discriminator = node.get("discriminator")
    if isinstance(discriminator, dict) and isinstance(discriminator.get("mapping"), dict) and "oneOf" in node:
        tag, mapping = discriminator["propertyName"], discriminator["mapping"]
        node.pop("oneOf")
        node.pop("discriminator")
        node.update({"type": "object", "required": [tag], "properties": {tag: {"enum": sorted(mapping)}},
                     "allOf": [{"if": {"properties": {tag: {"const": value}}}, "then": {"$ref": ref}}
                               for value, ref in sorted(mapping.items())]})
    return node


@dataclass
class _Section:
    path: str
    model: type[BaseModel]

    @property
    def anchor(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.path.lower()).strip("-") or "top-level"


class _Reference:
    """Sections in the order a reader meets them: each model once, at its first path."""

    def __init__(self) -> None:
        self.sections: list[_Section] = []
        self.seen: dict[type[BaseModel], _Section] = {}

    def visit(self, path: str, model: type[BaseModel]) -> _Section:
        if model in self.seen:
            return self.seen[model]
        section = _Section(path, model)
        self.seen[model] = section
        self.sections.append(section)
        for key, field in _fields(model):
            for child, suffix in _models_in(field.annotation):
                self.visit(_child_path(path, key, suffix, child), child)
        return section


def _fields(model: type[BaseModel]) -> list[tuple[str, FieldInfo]]:
    """(YAML key, field) of a model, excluded fields left out."""
    return [(field.alias or name, field) for name, field in model.model_fields.items() if not field.exclude]


def _plugin_type(model: type[BaseModel]) -> str | None:
    for spec in REGISTRY.values():
        if spec.config is model:
            return spec.type
    return None


def _child_path(path: str, key: str, suffix: str, child: type[BaseModel]) -> str:
    base = f"{path}.{key}" if path else key
    plugin = _plugin_type(child)
    return f"{base}[type={plugin}]" if plugin and suffix == "[]" else f"{base}{suffix}"


def _models_in(annotation: Any, suffix: str = "") -> list[tuple[type[BaseModel], str]]:
    """The models an annotation holds, with `[]` for each list they sit in."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0], suffix)
    if origin in (typing.Union, types.UnionType):
        return [found for arg in typing.get_args(annotation) for found in _models_in(arg, suffix)]
    if origin in (list, tuple, set, frozenset):
        return _models_in(typing.get_args(annotation)[0], suffix + "[]")
    if origin is dict:
        return _models_in(typing.get_args(annotation)[1], suffix + ".<name>")
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, suffix)]
    return []


def _type(annotation: Any, reference: _Reference) -> str:
    """An annotation as a reader of YAML would say it."""
    if annotation == SecretRef:
        return "secret reference (`env:NAME` or `file:PATH`)"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0], reference)
    if origin in (typing.Union, types.UnionType):
        parts = [_type(arg, reference) for arg in args if arg is not type(None)]
        optional = " or null" if type(None) in args else ""
        return " or ".join(dict.fromkeys(parts)) + optional
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{json.dumps(value)}`" for value in args) if len(args) > 1 else f"`{json.dumps(args[0])}`"
    if origin in (list, tuple, set, frozenset):
        return f"list of {_type(args[0], reference)}" if args else "list"
    if origin is dict:
        return f"mapping of {_type(args[0], reference)} to {_type(args[1], reference)}" if args else "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        section = reference.seen.get(annotation)
        plugin = _plugin_type(annotation)
        name = f"plugin `{plugin}`" if plugin else "mapping"
        return f"{name} ([{section.path}](#{section.anchor}))" if section else name
    names = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "path", type(None): "null"}
    if annotation in names:
        return names[annotation]
    return "any" if annotation is Any else getattr(annotation, "__name__", str(annotation))


_BOUNDS = (("gt", "> {}"), ("ge", "≥ {}"), ("lt", "< {}"), ("le", "≤ {}"), ("min_length", "at least {} long"),
           ("max_length", "at most {} long"), ("pattern", "matching `{}`"))


def _constraints(field: FieldInfo) -> str:
    found = []
    for item in field.metadata:
        for attr, text in _BOUNDS:
            value = getattr(item, attr, None)
            if value is not None:
                found.append(text.format(value))
    return f", {', '.join(found)}" if found else ""


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    else:
        value = field.default
    if value is PydanticUndefined or value is None:
        return "—"
    if isinstance(value, BaseModel):
        return "its defaults"
    if isinstance(value, (list, dict)) and not value:
        return f"`{json.dumps(value)}`"
    try:
        return f"`{json.dumps(value, default=str)}`"
    except (TypeError, ValueError):
        return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _intro(model: type[BaseModel]) -> str:
    doc = model.__dict__.get("__doc__")
    return inspect.cleandoc(doc) if isinstance(doc, str) and doc.strip() else ""


def markdown() -> str:
    """docs/configuration.md: a table per section (key, type, default, meaning)."""
    reference = _Reference()
    reference.visit("", Config)
    lines = [
        f"<!-- Generated from the typed models by `{REGENERATE}`; do not edit by hand. -->",
        "# Configuration reference",
        "",
        "Every key of the YAML file `toolgate serve --config` reads, with its type, default and meaning,",
        "generated from the typed models the gateway validates the file with (so it cannot drift:",
        "a test fails when this page is not what the models say). Unknown keys are errors, and",
        "`toolgate check --config PATH` names each problem with `file:line:column`.",
        "",
        "For editors: `toolgate schema > toolgate.schema.json` writes the JSON Schema, and a first line",
        "`# yaml-language-server: $schema=./toolgate.schema.json` in the config lets the YAML language",
        "server (VS Code's YAML extension, Neovim, …) complete and check keys as you type.",
        "",
        "Paths: `a.b` is key `b` in section `a`; `a[]` an item of list `a`; `a.<name>` an entry of",
        "mapping `a`; `plugins[type=x]` a plugin node of that `type`. Secret references are `env:NAME`",
        "or `file:PATH` (relative to the config's folder); a secret is never written in the file.",
        "",
        "Sections: " + ", ".join(f"[{s.path or 'top level'}](#{s.anchor})" for s in reference.sections),
        "",
    ]
    for section in reference.sections:
        title = section.path or "top level"
        lines += [f'<a id="{section.anchor}"></a>', "", f"## `{title}`" if section.path else "## Top level", ""]
        intro = _intro(section.model)
        if intro:
            lines += [intro, ""]
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for key, field in _fields(section.model):
            kind = _type(field.annotation, reference) + _constraints(field)
            lines.append(f"| `{key}` | {_cell(kind)} | {_cell(_default(field))} | {_cell(field.description or '')} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def undescribed() -> list[str]:
    """The keys whose field has no description (`section.key`), for whoever adds them."""
    reference = _Reference()
    reference.visit("", Config)
    return [f"{s.path}.{key}" if s.path else key for s in reference.sections for key, f in _fields(s.model) if not f.description]
