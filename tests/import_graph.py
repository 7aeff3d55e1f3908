"""The import graph of a package of this repository, read from its source: which of its modules
each one imports (imports inside functions included: one there still closes a circle when the
function runs), and the circles in it."""

from __future__ import annotations

import ast
import pathlib


def modules(package: pathlib.Path) -> dict[str, pathlib.Path]:
    """Each module of the package at ``package`` (a folder), by its dotted name."""
    found = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(module: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``module`` imports (anywhere in it), leaving out its own
    packages (Python imports those first anyway)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in known else base)
    ancestors = {module.rsplit(".", n)[0] for n in range(1, module.count(".") + 1)}
    return {t for t in targets if t in known and t != module and t not in ancestors}


def import_graph(package: pathlib.Path) -> dict[str, set[str]]:
    """Each module of the package at ``package`` and the package's modules it imports."""
    known = modules(package)
    return {name: imports(name, path, set(known)) for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each circle once, from its alphabetically first module."""
    found = []

    def walk(start, node, path):
        for nxt in sorted(graph[node]):
            if nxt == start:
                found.append([*path, start])
            elif nxt > start and nxt not in path:
                walk(start, nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, start, [start])
    return found
