"""Config files written for a test, and where in them `toolgate check` should point (D4)."""

from __future__ import annotations

from pathlib import Path


def write(tmp_path: Path, text: str, name: str = "toolgate.yaml") -> Path:
    """`text` written to `tmp_path/name`; its path."""
    path = tmp_path / name
    path.write_text(text)
    return path


def place(path: Path, needle: str, occurrence: int = 1) -> str:
    """`path:line:column` of the `occurrence`-th `needle` in the file (what `check` names, D4)."""
    text = path.read_text()
    offset = -1
    for _ in range(occurrence):
        offset = text.index(needle, offset + 1)
    line = text.count("\n", 0, offset) + 1
    return f"{path}:{line}:{offset - (text.rfind(chr(10), 0, offset) + 1) + 1}"
