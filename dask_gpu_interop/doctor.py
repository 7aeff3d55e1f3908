"""What a user needs to know before blaming the code: the machine, its GPU stack, and what will
share a worker's memory, one line per item with a verdict and the fix.

    dask-gpu-interop doctor                       this machine
    dask-gpu-interop doctor --scheduler ADDRESS   this machine and every worker

Nothing here creates a CUDA context or imports a GPU library: versions come from the installed
packages' metadata, the GPUs and the driver from NVML.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
from dataclasses import asdict, dataclass

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"

# Distribution names by what they provide (the first one installed is reported).
PACKAGES = {
    "numpy": ("numpy",), "pandas": ("pandas",), "dask": ("dask",),
    "distributed": ("distributed",), "rmm": ("rmm-cu13", "rmm-cu12", "rmm"),
    "cudf": ("cudf-cu13", "cudf-cu12", "cudf"), "dask-cuda": ("dask-cuda",),
    "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"), "numba": ("numba",),
    "numba-cuda": ("numba-cuda",), "torch": ("torch",), "xgboost": ("xgboost",),
    "jax": ("jax",), "ucxx": ("ucxx-cu13", "ucxx-cu12", "ucxx"),
    "distributed-ucxx": ("distributed-ucxx-cu13", "distributed-ucxx-cu12", "distributed-ucxx"),
    "nvidia-ml-py": ("nvidia-ml-py", "pynvml"),
}

# How each framework shares the worker's memory resource, by the plugin's mode.
SHARING = {
    "cupy": ("shares the worker's resource (CuPy's allocator set to RMM)", None),
    "numba": ("shares the worker's resource (an external memory manager on RMM)", None),
    "cudf": ("shares the worker's resource (cuDF allocates through RMM)", None),
    "torch": ("shares the worker's resource (RMM's allocator; in async mode the same CUDA "
              "pool)", None),
    "xgboost": ("shares the pool in async mode only: its PyPI wheels have no RMM",
                "GPUMemoryPlugin(async_alloc=True) and training under "
                "xgboost.config_context(**dask_gpu_interop.xgboost_config(client))"),
    "jax": ("stays outside (JAX has no external allocator): capped, no preallocation",
            "jax_memory_fraction= caps its share"),
}


@dataclass
class Check:
    item: str
    verdict: str  # ok, warn, fail, info
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"  {self.verdict:<4}  {self.item:<22} {self.detail}"
        return text + (f"  -> {self.fix}" if self.fix else "")


def version(name: str) -> str | None:
    """The installed version of a package (by any of its distribution names), or None."""
    for dist in PACKAGES.get(name, (name,)):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _numbers(text: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text or "")[:3])


def known_bad(versions: dict[str, str | None]) -> list[Check]:
    """Combinations known to break, from the installed versions (the rules are data)."""
    out = []
    numba_cuda, numpy = versions.get("numba-cuda"), versions.get("numpy")
    if numba_cuda and numpy and _numbers(numba_cuda) <= (0, 30, 99) and _numbers(numpy) >= (2, 5):
        out.append(Check("numba-cuda + NumPy", FAIL,
                         f"numba-cuda {numba_cuda} breaks on NumPy {numpy} (seen on an H200)",
                         "pip install 'numpy<2.5', or a newer numba-cuda"))
    if versions.get("dask-cuda") and versions.get("distributed"):
        dask_cuda, distributed = _numbers(versions["dask-cuda"]), _numbers(versions["distributed"])
        if dask_cuda[:2] == (26, 10) and distributed[:2] > (2026, 7):
            out.append(Check("dask-cuda + distributed", WARN,
                             f"dask-cuda {versions['dask-cuda']} pins distributed 2026.7.1, "
                             f"{versions['distributed']} is installed",
                             "pip install 'distributed==2026.7.1' 'dask==2026.7.1'"))
    return out


def _gpus() -> tuple[list[Check], int]:
    try:
        import pynvml
    except ImportError:
        return [Check("GPUs", INFO, "NVML is not installed: GPUs not listed",
                      "pip install nvidia-ml-py")], 0
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return [Check("GPUs", INFO, f"no NVIDIA driver here ({err}): CPU workers only",
                      "install the NVIDIA driver to use GPUs")], 0
    try:
        return _devices(pynvml)
    except (pynvml.NVMLError, AttributeError) as err:  # an older or partial NVML
        return [Check("GPUs", WARN, f"NVML could not describe the GPUs: {err}",
                      "update the driver or nvidia-ml-py")], 0


# The NVML calls made, for the test that checks them against the installed nvidia-ml-py.
NVML_CALLS = ("nvmlInit", "nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion_v2",
              "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetMemoryInfo",
              "nvmlDeviceGetName", "nvmlDeviceGetNvLinkState", "NVMLError")


def _devices(pynvml) -> tuple[list[Check], int]:
    checks = [Check("driver", INFO, f"{_text(pynvml.nvmlSystemGetDriverVersion())}, CUDA "
                                    f"{_cuda(pynvml.nvmlSystemGetCudaDriverVersion_v2())}")]
    count = pynvml.nvmlDeviceGetCount()
    for index in range(count):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        links = 0
        for link in range(18):
            try:
                links += pynvml.nvmlDeviceGetNvLinkState(handle, link) == 1
            except pynvml.NVMLError:
                break
        checks.append(Check(f"GPU {index}", OK, f"{_text(pynvml.nvmlDeviceGetName(handle))}, "
                            f"{memory.total / 2**30:.0f} GiB, {memory.free / 2**30:.0f} GiB free, "
                            f"{links} NVLink links up"))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        checks.append(Check("CUDA_VISIBLE_DEVICES", INFO, repr(visible)))
    return checks, count


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda(number: int) -> str:
    return f"{number // 1000}.{number % 1000 // 10}"


def checks() -> list[dict]:
    """This process's machine, as plain data (run on workers by :func:`report`)."""
    found: list[Check] = [Check("host", INFO, f"{platform.node()}, Python "
                                              f"{platform.python_version()}, {os.cpu_count()} CPUs")]
    gpus, count = _gpus()
    found += gpus
    versions = {name: version(name) for name in PACKAGES}
    stack = [f"{name} {v}" for name, v in versions.items() if v]
    found.append(Check("packages", INFO, ", ".join(stack)))
    if count:
        missing = [name for name in ("rmm", "cudf", "cupy", "dask-cuda") if not versions[name]]
        found.append(Check("GPU stack", FAIL if missing else OK,
                           f"missing {', '.join(missing)}" if missing else "RMM, cuDF, CuPy and "
                           "dask-cuda installed",
                           "pip install 'dask-gpu-interop[cuda13]' (or [cuda12])" if missing else ""))
    if count:
        for framework, (how, fix) in SHARING.items():
            if versions.get(framework):
                found.append(Check(f"memory: {framework}", OK if fix is None else INFO, how,
                                   fix or ""))
    else:
        found.append(Check("memory", INFO, "no GPU: the plugin leaves this machine's workers "
                                           "alone"))
    ucx = versions["distributed-ucxx"] and versions["ucxx"]
    found.append(Check("UCX", OK if ucx else INFO,
                       "distributed-ucxx installed: protocol='ucx' (NVLink, InfiniBand)" if ucx
                       else "not installed: workers talk over TCP",
                       "" if ucx else "pip install 'dask-gpu-interop[cuda13]' for protocol='ucx'"))
    found += _config_conflicts()
    found += known_bad(versions)
    return [asdict(c) for c in found]


def _config_conflicts() -> list[Check]:
    from .memory import conflicts

    setting = conflicts.ucxx_pool_size()
    if setting:
        return [Check("RMM owners", FAIL, f"dask config {setting}: distributed-ucxx makes its "
                      "own RMM pool", "unset it and give GPUMemoryPlugin(pool_size=...)")]
    return []


def _worker_checks(dask_worker=None) -> list[dict]:
    out = checks()
    from .memory import conflicts

    options = conflicts.dask_cuda_rmm_options(dask_worker) if dask_worker is not None else []
    if options:
        out.append(asdict(Check("RMM owners", FAIL, f"dask-cuda's {', '.join(options)} beside "
                                "the plugin: two owners of one GPU's memory",
                                "drop dask-cuda's rmm_* options and give them to the plugin")))
    return out


def report(client=None) -> dict[str, list[dict]]:
    """``{"this machine": checks, worker address: checks, ...}``."""
    out = {"this machine": checks()}
    if client is not None:
        out.update(client.run(_worker_checks))
    return out


def lines(found: dict[str, list[dict]]) -> list[str]:
    out = []
    for where, items in found.items():
        out.append(where)
        out += [Check(**item).line() for item in items]
    verdicts = [item["verdict"] for items in found.values() for item in items]
    out.append(f"{verdicts.count(FAIL)} to fix, {verdicts.count(WARN)} to check")
    return out
