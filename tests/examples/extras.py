"""What an install of the package brings: the distributions of an extra in pyproject.toml."""

from __future__ import annotations

import os
import re


def requirements_of(extra: str) -> set[str]:
    """The distributions ``pip install 'dask-gpu-interop[extra]'`` brings beside the core, its
    own ``dask-gpu-interop[...]`` entries followed; KeyError for an extra pyproject lacks."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    names, todo, seen = set(), [extra], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for requirement in extras[name]:
            own = re.fullmatch(r"dask-gpu-interop\[([^\]]+)\]", requirement.strip())
            if own:
                todo.extend(e.strip() for e in own.group(1).split(","))
            else:
                names.add(re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower())
    return names
