"""The examples use only the library's public names, so that a user can copy one out."""

import ast
import pathlib

import dask_gpu_interop

ROOT = pathlib.Path(__file__).resolve().parents[2]
PUBLIC_MODULES = {"dask_gpu_interop.convert", "dask_gpu_interop.worker.gpu_workers",
                  "dask_gpu_interop.cluster.options",
                  "dask_gpu_interop.preload", "dask_gpu_interop.tls", "dask_gpu_interop.serialize"}


def library_imports(path: pathlib.Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dask_gpu_interop"):
            yield node.module, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("dask_gpu_interop"):
                    yield alias.name, []


def test_examples_import_only_public_names():
    found = 0
    for path in sorted((ROOT / "examples").rglob("*.py")):
        for module, names in library_imports(path):
            found += 1
            if module == "dask_gpu_interop":
                private = [n for n in names if n not in dask_gpu_interop.__all__]
                assert not private, f"{path}: {private} are not public names of dask_gpu_interop"
            else:
                assert module in PUBLIC_MODULES, f"{path}: {module} is not a public module"
    assert found, "the examples import nothing from the library"
