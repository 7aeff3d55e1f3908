"""The package imports no GPU library; framework hooks fire exactly when a module is imported."""

import ast
import subprocess
import sys
import textwrap

import pytest

from dask_gpu_interop import _imports

GPU_LIBRARIES = ("torch", "cupy", "numba", "rmm", "cudf", "xgboost", "jax", "pynvml", "cuda")


def run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_importing_the_package_imports_no_gpu_library():
    # distributed itself imports pynvml where it is installed (NVML, no CUDA context): the
    # package must load nothing more than that
    baseline = run(
        f"""
        import sys, distributed
        print(sorted({{m.split('.')[0] for m in sys.modules}} & set({GPU_LIBRARIES!r})))
        """
    )
    loaded = run(
        f"""
        import sys, dask_gpu_interop, dask_gpu_interop.preload, dask_gpu_interop.cli
        import dask_gpu_interop.cluster, dask_gpu_interop.cluster.options, dask_gpu_interop.convert
        import dask_gpu_interop.compat, dask_gpu_interop.tls
        print(sorted({{m.split('.')[0] for m in sys.modules}} & set({GPU_LIBRARIES!r})))
        """
    )
    assert loaded == baseline and set(ast.literal_eval(baseline)) <= {"pynvml"}


def test_the_library_does_not_import_the_examples():
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1] / "dask_gpu_interop"
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert "import examples" not in text and "from examples" not in text, path


def write_module(tmp_path, name, body="VALUE = 41\n"):
    (tmp_path / f"{name}.py").write_text(body)
    sys.path.insert(0, str(tmp_path))


def test_hook_fires_once_after_the_module_ran(tmp_path, monkeypatch):
    write_module(tmp_path, "hooked_mod_a", "VALUE = 41\n")
    seen = []
    _imports.when_imported("hooked_mod_a", lambda m: seen.append(m.VALUE))
    assert seen == [] and _imports.pending("hooked_mod_a")
    import hooked_mod_a

    assert seen == [41]
    # the real loader is back: the module looks as if no hook had been there
    assert type(hooked_mod_a.__loader__).__name__ == "SourceFileLoader"
    assert hooked_mod_a.__spec__.loader is hooked_mod_a.__loader__
    import importlib

    importlib.reload(hooked_mod_a)
    assert seen == [41]
    assert not _imports.pending("hooked_mod_a")


def test_already_imported_module_fires_at_once():
    seen = []
    _imports.when_imported("json", lambda m: seen.append(m.__name__))
    assert seen == ["json"]


def test_cancelled_hook_does_not_fire(tmp_path):
    write_module(tmp_path, "hooked_mod_b")
    seen = []

    def callback(module):
        seen.append(module)

    _imports.when_imported("hooked_mod_b", callback)
    _imports.cancel("hooked_mod_b", callback)
    import hooked_mod_b  # noqa: F401

    assert seen == []


def test_submodule_hook(tmp_path):
    package = tmp_path / "hooked_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "sub.py").write_text("X = 'sub'\n")
    sys.path.insert(0, str(tmp_path))
    seen = []
    _imports.when_imported("hooked_pkg.sub", lambda m: seen.append(m.X))
    import hooked_pkg  # noqa: F401

    assert seen == []
    import hooked_pkg.sub  # noqa: F401

    assert seen == ["sub"]


def test_a_failing_import_does_not_fire(tmp_path):
    write_module(tmp_path, "hooked_mod_c", "raise RuntimeError('broken module')\n")
    seen = []
    _imports.when_imported("hooked_mod_c", seen.append)
    with pytest.raises(RuntimeError, match="broken module"):
        import hooked_mod_c  # noqa: F401
    assert seen == []


@pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed",
)
def test_a_real_framework_imports_and_works_under_the_hook():
    out = run(
        """
        from dask_gpu_interop import _imports
        seen = []
        _imports.when_imported("torch", lambda m: seen.append(m.__version__))
        import torch
        print(len(seen), torch.ones(3).sum().item(), seen[0] == torch.__version__)
        """
    )
    assert out == "1 3.0 True"


SLOW_MODULE = """
import builtins, time
builtins.{name}_started.set()
time.sleep(0.5)
def get_option(name):
    return name == "spill"
"""


def test_a_module_another_thread_is_importing_is_waited_for_not_taken_half_made(tmp_path):
    # a background import (the workers' import_in_background) may still be running when the
    # code that reads the module's attributes asks for it
    (tmp_path / "slow_mod_for_loaded.py").write_text(SLOW_MODULE.format(name="slow_loaded"))
    out = run(
        f"""
        import builtins, sys, threading
        sys.path.insert(0, {str(tmp_path)!r})
        from dask_gpu_interop._imports import loaded
        print(loaded("slow_mod_for_loaded"))  # not imported: not imported here either
        builtins.slow_loaded_started = threading.Event()
        threading.Thread(target=__import__, args=("slow_mod_for_loaded",)).start()
        builtins.slow_loaded_started.wait()
        print(hasattr(sys.modules["slow_mod_for_loaded"], "get_option"))  # half made
        print(loaded("slow_mod_for_loaded").get_option("spill"))
        """
    )
    assert out.splitlines() == ["None", "False", "True"]


SLOW_CUDF = """
import builtins, os, time
builtins.slow_cudf_started.set()
time.sleep(3)
def get_option(name):
    return os.environ.get("CUDF_SPILL") == "on"
"""


def test_cudfs_spilling_is_read_while_a_background_import_of_cudf_runs(tmp_path):
    # a worker's GPU memory plugin asked cuDF for its option while the worker's background
    # import of cuDF was half way: the worker failed to start. cuDF's option then is what its
    # environment variable says, and the worker's start does not wait for the import.
    (tmp_path / "cudf.py").write_text(SLOW_CUDF)
    out = run(
        f"""
        import builtins, os, sys, threading
        sys.path.insert(0, {str(tmp_path)!r})
        from dask_gpu_interop._imports import _is_initializing, import_in_background, loaded
        from dask_gpu_interop.compat import cudf_spilled, cudf_spilling
        builtins.slow_cudf_started = threading.Event()
        os.environ["CUDF_SPILL"] = "on"
        import_in_background("cudf")
        builtins.slow_cudf_started.wait()
        print(cudf_spilling(), cudf_spilled())
        print(_is_initializing(sys.modules["cudf"]))  # answered while cuDF still imports
        print(loaded("cudf").get_option("spill"))  # once imported, cuDF's own option agrees
        """
    )
    assert out.splitlines() == ["True None", "True", "True"]


def test_a_hook_on_a_module_another_thread_is_importing_fires_once_it_is_whole(tmp_path):
    # a worker's memory plugin watches cuDF's import to bind it, while a background import of
    # cuDF may be under way already: its loader was found before the hook, so the hook waits
    (tmp_path / "slow_mod_for_hook.py").write_text(SLOW_MODULE.format(name="slow_hook"))
    (tmp_path / "slow_mod_failing.py").write_text(
        SLOW_MODULE.format(name="slow_failing") + "raise RuntimeError('broken')\n")
    out = run(
        f"""
        import builtins, sys, threading, time
        sys.path.insert(0, {str(tmp_path)!r})
        from dask_gpu_interop._imports import when_imported
        seen = []
        for name, module in (("slow_hook", "slow_mod_for_hook"),
                             ("slow_failing", "slow_mod_failing")):
            setattr(builtins, name + "_started", threading.Event())
            threading.Thread(target=__import__, args=(module,)).start()
            getattr(builtins, name + "_started").wait()
        when_imported("slow_mod_for_hook", lambda m: seen.append(m.get_option("spill")))
        when_imported("slow_mod_failing", lambda m: seen.append("failing"))
        print(seen)  # both still importing
        deadline = time.time() + 10
        while not seen and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        print(seen)
        """
    )
    assert out.splitlines() == ["[]", "[True]"]
