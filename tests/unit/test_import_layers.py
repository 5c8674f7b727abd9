"""Import layers (issue 37): the gateway's config imports the plugins' specs, so no plugin module may
import gateway.config (the plugin CLI gets the loader handed in, gateway/plugins.py `commands`);
only a stand-alone `main()` entry, which the gateway never reaches, may. And the Bridge's store
interface never imports the two stores that implement it (gateway/bridge/store_factory.py picks). Read from the source with
`ast`, every import counted wherever it sits (module level or inside a function)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def imports(path: Path) -> list[tuple[str, str | None]]:
    """(imported module, enclosing function name or None) for every import in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, str | None]] = []

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name)
                continue
            if isinstance(child, ast.Import):
                found.extend((alias.name, function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module:
                found.append((child.module, function))
            visit(child, function)

    visit(tree, None)
    return found


def test_no_plugin_module_imports_the_gateway_config_which_imports_the_plugins() -> None:
    # R: D5
    offenders = [
        f"{path.relative_to(REPO)} ({function or 'module level'})"
        for path in sorted((REPO / "plugins").rglob("*.py"))
        for module, function in imports(path)
        if module == "gateway.config" and function != "main"
    ]
    assert offenders == []


def test_the_store_interface_imports_neither_store_that_implements_it() -> None:
    # R: D5
    modules = {module for module, _ in imports(REPO / "gateway" / "bridge" / "store.py")}
    assert not modules & {"gateway.bridge.store_postgres", "gateway.bridge.store_sqlite"}


def test_the_ast_reader_sees_imports_inside_functions(tmp_path: Path) -> None:
    # R: D5 -- the check above can fail
    sample = tmp_path / "sample.py"
    sample.write_text("import os\n\ndef f():\n    from gateway.config import load_config\n")
    assert imports(sample) == [("os", None), ("gateway.config", "f")]
