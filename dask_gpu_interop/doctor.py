"""What a user needs to know before blaming the code: the machine, its GPU stack, and what will
share a worker's memory, one line per item with a verdict and the fix.

    dask-gpu-interop doctor                       this machine
    dask-gpu-interop doctor --scheduler ADDRESS   this machine and every worker

The doctor process creates no CUDA context and imports no GPU library: versions come from the
installed packages' metadata, the GPUs and the driver from NVML. Whether each installed GPU
library loads is asked of a child Python process, one import at a time with a time limit, so a
missing shared library, a wheel for another CUDA, a crash or a hang is reported, not suffered.
On a worker, the memory plugin's state is read as the memory report reads it.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import os
import platform
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass

from dask.utils import format_bytes

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
                         f"numba-cuda {numba_cuda} breaks on NumPy {numpy}",
                         "pip install 'numpy<2.5', or a newer numba-cuda"))
    if versions.get("dask-cuda") and versions.get("distributed"):
        dask_cuda, distributed = _numbers(versions["dask-cuda"]), _numbers(versions["distributed"])
        if dask_cuda[:2] == (26, 10) and distributed[:2] > (2026, 7):
            out.append(Check("dask-cuda + distributed", WARN,
                             f"dask-cuda {versions['dask-cuda']} pins distributed 2026.7.1, "
                             f"{versions['distributed']} is installed",
                             "pip install 'distributed==2026.7.1' 'dask==2026.7.1'"))
    return out


def _gpus() -> tuple[list[Check], int, int | None]:
    """The driver and GPUs from NVML: lines, the GPU count, and the driver's CUDA major."""
    try:
        import pynvml
    except ImportError:
        return [Check("GPUs", INFO, "NVML is not installed: GPUs not listed",
                      "pip install nvidia-ml-py")], 0, None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return [Check("GPUs", INFO, f"no NVIDIA driver here ({err}): CPU workers only",
                      "install the NVIDIA driver to use GPUs")], 0, None
    try:
        return _devices(pynvml)
    except (pynvml.NVMLError, AttributeError) as err:  # an older or partial NVML
        return [Check("GPUs", WARN, f"NVML could not describe the GPUs: {err}",
                      "update the driver or nvidia-ml-py")], 0, None


# The NVML calls made, for the test that checks them against the installed nvidia-ml-py.
NVML_CALLS = ("nvmlInit", "nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion_v2",
              "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetMemoryInfo",
              "nvmlDeviceGetName", "nvmlDeviceGetNvLinkState", "NVMLError")


def _devices(pynvml) -> tuple[list[Check], int, int]:
    cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
    checks = [Check("driver", INFO, f"{_text(pynvml.nvmlSystemGetDriverVersion())}, CUDA "
                                    f"{_cuda(cuda)}")]
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
    return checks, count, cuda // 1000


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda(number: int) -> str:
    return f"{number // 1000}.{number % 1000 // 10}"


# The module that each installed GPU package must be able to import, in this order (a library
# before those built on it).
IMPORTS = {
    "rmm": "rmm", "cupy": "cupy", "numba-cuda": "numba.cuda", "cudf": "cudf",
    "dask-cuda": "dask_cuda", "ucxx": "ucxx", "distributed-ucxx": "distributed_ucxx",
    "torch": "torch", "xgboost": "xgboost",
}
EXTRAS = ("rmm", "cupy", "numba-cuda", "cudf", "dask-cuda", "ucxx", "distributed-ucxx")
IMPORT_TIMEOUT = 60.0  # seconds for one import before it counts as hung
HUNG = "the import did not finish within"

_MARK = "dask-gpu-interop-import "
_CHILD = f"""
import importlib, json, sys
sys.path[:] = json.loads(sys.argv[1])
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
        error = None
    except BaseException as err:  # its first line: the missing library, the CUDA error
        first = next((line for line in str(err).splitlines() if line.strip()), "")
        error = f"{{type(err).__name__}}: {{first.strip()}}"
    print({_MARK!r} + json.dumps([name, error]), flush=True)
"""


def import_errors(modules: list[str], timeout: float = IMPORT_TIMEOUT) -> dict[str, str | None]:
    """Import each module in a child Python process: ``{module: None, or what went wrong}``.

    One child imports them in turn; one that crashes the child or takes longer than
    ``timeout`` seconds is reported as such, and a new child goes on with the rest.
    """
    found: dict[str, str | None] = {}
    while len(found) < len(modules):
        found.update(_import_in_child([m for m in modules if m not in found], timeout))
    return found


def _import_in_child(modules: list[str], timeout: float) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(sys.path), *modules],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_read_lines, args=(child.stdout, lines), daemon=True).start()
    try:
        for module in modules:
            deadline = time.monotonic() + timeout
            while module not in found:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                if line is None:  # the child ended without a word on this module
                    found[module] = f"Python ended while importing it ({_ended(child.wait())})"
                elif line.startswith(_MARK):
                    name, error = json.loads(line[len(_MARK):])
                    found[name] = error
    except queue.Empty:
        found[module] = f"{HUNG} {timeout:g} s"
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    return found


def _read_lines(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _ended(code: int) -> str:
    if code < 0:
        return signal.Signals(-code).name
    return f"exit status {code}"


def _import_checks(versions: dict[str, str | None], cuda: int | None) -> list[Check]:
    """A fail line per installed GPU library that does not load, an ok line for the rest."""
    modules = {IMPORTS[name]: name for name in IMPORTS if versions.get(name)}
    if not modules:
        return []
    loaded, out = [], []
    for module, error in import_errors(list(modules), IMPORT_TIMEOUT).items():
        if error is None:
            loaded.append(module)
        elif error.startswith(HUNG):
            out.append(Check(f"import {module}", FAIL, error, "check the driver and GPUs with "
                             "nvidia-smi: an import that hangs usually waits on them"))
        else:
            out.append(Check(f"import {module}", FAIL, error, _reinstall(modules[module], cuda)))
    if loaded:
        out.insert(0, Check("imports", OK, ", ".join(loaded) + (" loads" if len(loaded) == 1
                                                                else " load")))
    return out


def _reinstall(package: str, cuda: int | None) -> str:
    """The fix for a GPU library that does not load: wheels built for the driver's CUDA."""
    if package not in EXTRAS:
        where = f"CUDA {cuda}" if cuda else "the CUDA version nvidia-smi shows"
        return f"reinstall {package} built for {where}"
    if cuda in (12, 13):
        return f"pip install --force-reinstall 'dask-gpu-interop[cuda{cuda}]' (the driver's CUDA)"
    return ("pip install --force-reinstall 'dask-gpu-interop[cuda13]' or '[cuda12]': the CUDA "
            "major that nvidia-smi shows")


# The packages a worker imports, by import name, whose compiled bytecode is looked for.
BYTECODE_PACKAGES = ("numpy", "pandas", "pyarrow", "dask", "distributed", "tornado", "rmm",
                     "cudf", "pylibcudf", "dask_cudf", "dask_cuda", "cupy", "numba",
                     "numba_cuda", "torch", "xgboost")


def without_bytecode(packages=BYTECODE_PACKAGES) -> dict[str, str]:
    """``{package: its folder}`` for each installed package whose top-level modules have no
    compiled bytecode (a ``.pyc`` where this Python looks for it), found without importing it."""
    found = {}
    for name in packages:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        folder = next(iter(spec.submodule_search_locations))
        try:
            sources = [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".py")]
        except OSError:
            continue
        if sources and not any(os.path.exists(importlib.util.cache_from_source(s))
                               for s in sources):
            found[name] = folder
    return found


def _bytecode_check(packages=BYTECODE_PACKAGES) -> list[Check]:
    """Packages without compiled bytecode: compiled from source by every process that imports
    them, each worker's included, where Python may not write the bytecode it compiles."""
    missing = without_bytecode(packages)
    if not missing:
        return []
    names = ", ".join(missing)
    if sys.dont_write_bytecode:
        why = "PYTHONDONTWRITEBYTECODE (or python -B) keeps Python from writing it"
    elif not all(os.access(folder, os.W_OK) for folder in missing.values()):
        why = "their folders are read-only to this process"
    else:
        return [Check("bytecode", INFO, f"{names}: not compiled yet; the first process to "
                                        "import them writes their bytecode")]
    folders = " ".join(sorted({os.path.dirname(f) for f in missing.values()}))
    return [Check("bytecode", WARN, f"{names}: no compiled bytecode, and {why}: every process, "
                                    "each worker's included, compiles them from source as it "
                                    "imports them",
                  f"python -m compileall -q -j 0 {folders} (as pip does at install)")]


def checks() -> list[dict]:
    """This process's machine, as plain data (run on workers by :func:`report`)."""
    found: list[Check] = [Check("host", INFO, f"{platform.node()}, Python "
                                              f"{platform.python_version()}, {os.cpu_count()} CPUs")]
    gpus, count, cuda = _gpus()
    found += gpus
    versions = {name: version(name) for name in PACKAGES}
    stack = [f"{name} {v}" for name, v in versions.items() if v]
    found.append(Check("packages", INFO, ", ".join(stack)))
    missing = [name for name in ("rmm", "cudf", "cupy", "dask-cuda") if not versions[name]]
    if count and missing:
        found.append(Check("GPU stack", FAIL, f"missing {', '.join(missing)}",
                           "pip install 'dask-gpu-interop[cuda13]' (or [cuda12])"))
    found += _import_checks(versions, cuda)
    found += _bytecode_check()
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


async def _worker_checks(dask_worker=None) -> list[dict]:
    # In a thread: the imports may take seconds, and the worker's event loop must go on.
    out = await asyncio.to_thread(checks)
    from .memory import conflicts

    options = conflicts.dask_cuda_rmm_options(dask_worker) if dask_worker is not None else []
    if options:
        out.append(asdict(Check("RMM owners", FAIL, f"dask-cuda's {', '.join(options)} beside "
                                "the plugin: two owners of one GPU's memory",
                                "drop dask-cuda's rmm_* options and give them to the plugin")))
    out.append(asdict(plugin_check(dask_worker)))
    return out


MODES = {"pool": "RMM pool", "managed": "managed memory", "async": "CUDA async pool"}


def plugin_check(dask_worker) -> Check:
    """Whether GPUMemoryPlugin set up this worker's memory, and in which mode."""
    from . import device
    from .memory import state
    from .memory.plugin import GPUMemoryPlugin

    registered = [plugin for plugin in getattr(dask_worker, "plugins", {}).values()
                  if isinstance(plugin, GPUMemoryPlugin)]
    item = "memory plugin"
    if device.gpu_count() == 0:
        if registered:
            mode = registered[-1].config.mode
            return Check(item, INFO, f"registered, {mode} mode ({MODES[mode]}); no GPU here: it "
                                     "leaves this worker alone")
        return Check(item, INFO, "not registered; no GPU here: the plugin would leave this "
                                 "worker alone")
    current = state.active()
    if current is None:
        if registered:
            return Check(item, WARN, "registered, but no memory resource is set up",
                         "read the worker's log for GPUMemoryPlugin's error")
        return Check(item, WARN, "not set up: each framework allocates on its own",
                     "register GPUMemoryPlugin or start workers with --preload "
                     "dask_gpu_interop.preload")
    plan = current.plan
    if current.mode == "async":
        sizes = (f"release threshold {format_bytes(plan.release_threshold)}"
                 if plan.release_threshold else "no release threshold")
    elif plan.initial:
        sizes = f"pool {format_bytes(plan.initial)} up to " + (
            format_bytes(plan.maximum) if plan.maximum else "the device")
    else:
        sizes = "no pool"
    detail = f"{current.mode} mode ({MODES[current.mode]}), {sizes}"
    if current.owner is None:
        return Check(item, WARN, f"removed, its {detail} kept while buffers are live",
                     "free those buffers, or restart the worker")
    return Check(item, OK, f"set up, {detail}")


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
