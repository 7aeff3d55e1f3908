"""README.md's first screen: what it is, code, why, and the two set-up commands; its links."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import dask_gpu_interop

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FIRST_SCREEN = "\n".join(README.splitlines()[:40])


def _first_python_block() -> str:
    return re.search(r"^```python\n(.*?)^```", README, re.S | re.M).group(1)


def test_the_first_screen_has_code_and_the_set_up_commands():
    assert "```python" in FIRST_SCREEN
    assert "<!-- setup" in FIRST_SCREEN and "<!-- /setup -->" in FIRST_SCREEN


def test_the_first_code_is_python_with_the_plugin_and_the_report_by_public_names():
    tree = ast.parse(_first_python_block())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "dask_gpu_interop" for alias in node.names}
    assert {"GPUMemoryPlugin", "memory_report"} <= imported
    assert imported <= set(dask_gpu_interop.__all__)
    calls = {node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
             for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert {"register_plugin", "GPUMemoryPlugin", "memory_report"} <= calls


def test_the_readme_links_only_to_files_that_exist():
    links = re.findall(r"\]\(((?!https?://|#)[^)#]+)(?:#[^)]*)?\)", README)
    assert "docs/compared-with-dask-cuda.md" in links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README.md links to {missing}"
