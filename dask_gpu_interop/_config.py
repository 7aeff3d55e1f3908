"""Load the package's defaults into dask's config, so users override them the dask way."""

from __future__ import annotations

import pathlib

import dask.config
import yaml

_DEFAULTS = pathlib.Path(__file__).with_name("gpu-interop.yaml")


def load_defaults() -> None:
    with _DEFAULTS.open() as f:
        defaults = yaml.safe_load(f)
    dask.config.update_defaults(defaults)


def get(key: str):
    """``dask.config.get`` under ``gpu-interop.``."""
    return dask.config.get(f"gpu-interop.{key}")
