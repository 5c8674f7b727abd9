"""Secret references (G8): `env:NAME` or `file:PATH`, never a literal value in the config.

Every resolved value is remembered in a `SecretSet` so logs, errors and results can be scrubbed of
it as a last line of defence (gateway.logs; the spellings found: gateway.secret_forms).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args

from pydantic import AfterValidator, BaseModel
from pydantic.fields import FieldInfo

from gateway.secret_forms import MIN_ENCODED_FORM, SecretIndex
from gateway.secret_forms import secret_forms as secret_forms  # the scrubbing rules live in gateway.secret_forms

M = TypeVar("M", bound=BaseModel)

_REF = re.compile(r"^(env:[A-Za-z_][A-Za-z0-9_]*|file:.+)$")


def _check_ref(value: str) -> str:
    if not _REF.match(value):
        raise ValueError("a secret reference: 'env:NAME' or 'file:PATH' (secrets are never written in the config)")
    return value


SecretRef = Annotated[str, AfterValidator(_check_ref)]
"""A config string that names where a secret lives. Typing a config field `SecretRef` is how the
gateway and every plugin declare a secret: `check` and start-up resolve exactly those fields."""


def _names_secret(annotation: Any) -> bool:
    if annotation == SecretRef:
        return True
    return any(_names_secret(arg) for arg in get_args(annotation) if arg is not type(None))


def is_secret_field(field: FieldInfo) -> bool:
    """True for a pydantic field typed `SecretRef` (alone, optional, or in a list)."""
    validators = [m for m in field.metadata if isinstance(m, AfterValidator)]
    return any(v.func is _check_ref for v in validators) or _names_secret(field.annotation)


class SecretError(ValueError):
    """A reference that cannot be resolved; the message names the reference, never a value."""


class SecretSet:
    """The secret values this process resolved, for scrubbing whatever leaves it: logs, errors,
    and what MCP servers send back (a server may echo the credential it was given, B4)."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._index: SecretIndex | None = None

    def add(self, value: str) -> None:
        """Remember a resolved secret (values under 4 characters are too short to search for). A
        header value with a scheme (`Bearer <token>`) is remembered with its credential alone too,
        which a server may echo on its own."""
        _, _, credential = value.partition(" ")
        for item in (value, credential.strip()) if len(credential.strip()) >= MIN_ENCODED_FORM else (value,):
            if len(item) >= 4 and item not in self._values:
                self._values.add(item)
                self._index = None

    def scrub(self, text: str) -> str:
        """`text` with every secret, in every form of `secret_forms`, replaced by `[redacted]`:
        case-folded, with separators between its characters, and through escapes too (the rules
        and what they cannot catch: gateway.secret_forms)."""
        if not self._values or not text:
            return text
        index = self._index
        if index is None:
            index = self._index = SecretIndex(self._values)
        return index.scrub(text)

    def scrub_json(self, value: Any) -> Any:
        """A JSON value (dicts, lists, strings: keys and values) with every string scrubbed."""
        if not self._values:
            return value
        stack: list[Any] = []
        root = self._scrub_item(value, stack)
        while stack:
            container = stack.pop()
            items = container.items() if isinstance(container, dict) else enumerate(container)
            updates = [(key, self._scrub_item(item, stack)) for key, item in items]
            if isinstance(container, dict):
                renamed = {k: v for k, v in updates}
                container.clear()
                container.update({self.scrub(k) if isinstance(k, str) else k: v for k, v in renamed.items()})
            else:
                for index, item in updates:
                    container[index] = item
        return root

    def scrub_model(self, model: M) -> M:
        """A pydantic model (an MCP result, a listing) with every string in it scrubbed; the same
        object when no secret occurs in it."""
        if not self._values:
            return model
        data = model.model_dump(mode="json", by_alias=True)
        scrubbed = self.scrub_json(data)
        if scrubbed == data:
            return model
        return type(model).model_validate(scrubbed)

    def _scrub_item(self, item: Any, stack: list[Any]) -> Any:
        if isinstance(item, str):
            return self.scrub(item)
        if isinstance(item, dict):
            copy: Any = dict(item)
        elif isinstance(item, list | tuple):
            copy = list(item)
        else:
            return item
        stack.append(copy)
        return copy

    def __len__(self) -> int:
        return len(self._values)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (alone, optional, in a list or a union)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


def _model_for(models: list[type[BaseModel]], data: dict[str, Any]) -> type[BaseModel] | None:
    """The one model for `data`: the only candidate, or the one whose `type` literal matches."""
    if len(models) == 1:
        return models[0]
    for model in models:
        field = model.model_fields.get("type")
        if field is not None and data.get("type") in get_args(field.annotation):
            return model
    return None


def unreadable_secrets(model: type[BaseModel], data: Any, base_dir: Path | None, loc: str = "") -> list[tuple[str, str]]:
    """(dotted path, message) for every secret reference in raw config `data` (shaped by `model`)
    that cannot be read now. It walks the raw data, so it reports even when other parts of the
    file do not validate; secrets are the fields typed `SecretRef`, in any model."""
    if not isinstance(data, dict):
        return []
    problems: list[tuple[str, str]] = []
    for name, field in model.model_fields.items():
        if name not in data:
            continue
        value, at = data[name], f"{loc}.{name}" if loc else name
        if is_secret_field(field):
            if isinstance(value, str) and _REF.match(value):  # a malformed reference is a schema problem
                try:
                    resolve_secret(value, base_dir)
                except SecretError as exc:
                    problems.append((at, str(exc)))
            continue
        models = _models_in(field.annotation)
        items = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for index, item in items:
            chosen = _model_for(models, item) if isinstance(item, dict) else None
            if chosen is not None:
                problems += unreadable_secrets(chosen, item, base_dir, at if index is None else f"{at}.{index}")
    return problems


def resolve_secret(ref: str, base_dir: Path | None = None, secrets: SecretSet | None = None) -> str:
    """Read the value behind `ref`; relative `file:` paths are read from `base_dir`."""
    _check_ref(ref)
    kind, _, name = ref.partition(":")
    if kind == "env":
        value = os.environ.get(name)
        if value is None or value == "":
            raise SecretError(f"environment variable {name} is not set (from {ref})")
    else:
        path = Path(name).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            value = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SecretError(f"cannot read secret file {path}: {exc.strerror}") from None
        if not value:
            raise SecretError(f"secret file {path} is empty")
    if secrets is not None:
        secrets.add(value)
    return value
