"""Sphinx configuration for the API page: ``sphinx-build -W -b html docs build/docs-html``.

The page is built from the package's docstrings (numpydoc style, read by napoleon). It builds on
a machine without a GPU: the package imports no GPU library, and those its modules would import
where they are used are mocked, in case a documented module ever imports one at its top.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the checkout's package, installed or not

project = "dask-gpu-interop"
author = "the dask-gpu-interop authors"
copyright = "the dask-gpu-interop authors"

try:
    from importlib.metadata import version as _version

    release = _version("dask-gpu-interop")
except Exception:
    release = "0+unknown"
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]

# Markdown pages (docs/zero-copy.md) are read on GitHub; the build reads reStructuredText only.
source_suffix = {".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]

autodoc_mock_imports = [
    "cudf",
    "cupy",
    "cuda",
    "dask_cuda",
    "dask_cudf",
    "jax",
    "jaxlib",
    "numba",
    "pylibcudf",
    "rmm",
    "torch",
    "ucxx",
    "distributed_ucxx",
    "xgboost",
]
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "signature"
autodoc_inherit_docstrings = False  # distributed's own docstrings are not this page's

napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

html_theme = "alabaster"
html_title = f"dask-gpu-interop {release}"


def _literal_blocks(app, what, name, obj, options, lines):
    """Module docstrings here show commands and file lists as a block indented under its
    paragraph, as help() and GitHub show them well; reStructuredText reads such a block as a
    quotation unless a ``::`` comes before it, so one is put there (doctests, lists and
    directives are left alone)."""
    if what != "module":
        return
    out = []
    for i, line in enumerate(lines):
        if (
            line.startswith(" ")
            and line.strip()
            and i >= 2
            and not lines[i - 1].strip()
            and lines[i - 2].strip()
            and not lines[i - 2].startswith(" ")
            and not lines[i - 2].rstrip().endswith("::")
            and not line.lstrip().startswith((">>>", "- ", "* ", ".. "))
        ):
            out[-1:] = ["", "::", ""]
        out.append(line)
    lines[:] = out


def setup(app):
    app.connect("autodoc-process-docstring", _literal_blocks)
