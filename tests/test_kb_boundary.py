"""The knowledge base reads the database only through state's public face: no module of
``recrawler/kb`` imports state's SQL, its backends or a database driver (search's SQL is state's
read role; kb embeds, ranks and fuses)."""

from __future__ import annotations

import ast
from pathlib import Path

import recrawler.kb

KB = Path(recrawler.kb.__file__).parent
#: what kb may import of state: its face and its records
ALLOWED = {"recrawler.state", "recrawler.state.records"}
DRIVERS = {"sqlite3", "psycopg", "psycopg_pool"}


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in *path*, at any depth (a function's lazy ones too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return found


def test_kb_imports_no_state_internals_and_no_driver() -> None:
    modules = sorted(KB.glob("*.py"))
    assert len(modules) > 10
    wrong = [
        f"{path.name}:{line} {module}"
        for path in modules
        for line, module in imported(path)
        if (module.startswith("recrawler.state") and module not in ALLOWED)
        or module.split(".", 1)[0] in DRIVERS
    ]
    assert wrong == []
