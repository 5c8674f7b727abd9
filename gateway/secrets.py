"""Secret references (G8): `env:NAME` or `file:PATH`, never a literal value in the config.

Every resolved value is remembered in a `SecretSet` so logs can be scrubbed of it as a last line
of defence (gateway.logs).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, get_args

from pydantic import AfterValidator
from pydantic.fields import FieldInfo

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
    """The secret values this process resolved, for scrubbing output."""

    def __init__(self) -> None:
        self._values: set[str] = set()

    def add(self, value: str) -> None:
        if len(value) >= 4:
            self._values.add(value)

    def scrub(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, "[redacted]")
        return text

    def __len__(self) -> int:
        return len(self._values)


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
