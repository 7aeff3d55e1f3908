"""The worker preload, with real ``dask worker`` processes: its options, dask-cuda's flag, and
bad options stopping the worker with a clear message."""

import os
import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from distributed import Client

from dask_gpu_interop import GPUMemoryPlugin
from dask_gpu_interop.cluster.options import given_memory
from dask_gpu_interop.memory.config import OPTIONS
from dask_gpu_interop.preload import PREFIX, dask_setup
from tests.dask_cuda_stand_ins import start_in_process_worker, write_preload

DASK = [sys.executable, "-m", "dask"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def scheduler():
    port = free_port()
    proc = subprocess.Popen(
        [*DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    address = f"tcp://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.3)
    yield address
    proc.terminate()
    proc.wait(30)


def start_worker(scheduler, *argv, nanny=True):
    args = [*DASK, "worker", scheduler, "--no-dashboard", "--nthreads", "1"]
    if not nanny:
        args.append("--no-nanny")
    return subprocess.Popen(
        [*args, "--preload", "dask_gpu_interop.preload", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""},
    )


def test_worker_starts_with_options_and_dask_cudas_flag(scheduler):
    worker = start_worker(
        scheduler, "--gpu-pool-size", "0.8", "--gpu-managed", "--gpu-frameworks", "cupy,torch",
        "--create-cuda-context",
    )
    try:
        with Client(scheduler, timeout=30) as client:
            client.wait_for_workers(1, timeout=60)
            names = client.run(lambda dask_worker: sorted(dask_worker.plugins))
            expected = GPUMemoryPlugin(pool_size="0.8", managed=True, frameworks=["cupy", "torch"])
            assert [expected.name in n for n in names.values()] == [True]
            # the client registering the same configuration is then a no-op on that worker
            client.register_plugin(expected)
    finally:
        worker.terminate()
        worker.communicate(timeout=60)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--gpu-pool-size", "-5"], "--gpu-pool-size '-5': a size must be more than zero"),
        (["--gpu-pool-size", "banana"], "bad option: --gpu-pool-size 'banana': not a size"),
        (["--gpu-managed", "--gpu-async-alloc"],
         "--gpu-managed and --gpu-async-alloc cannot be combined"),
        (["--gpu-frameworks", "tensorflow"],
         "--gpu-frameworks 'tensorflow': unknown framework 'tensorflow'"),
        (["--gpu-release-threshold", "1GB"],
         "--gpu-release-threshold applies only to the CUDA async pool: pass --gpu-async-alloc"),
        (["--gpu-pool-szie", "5"], "No such option '--gpu-pool-szie'"),
    ],
)
def test_bad_option_stops_the_worker_with_the_reason(scheduler, argv, words):
    worker = start_worker(scheduler, *argv)
    out, _ = worker.communicate(timeout=90)
    assert worker.returncode != 0
    assert words in out
    # in the flags' words only: not also as the plugin's keyword arguments
    assert "pool_size" not in out and "async_alloc" not in out and "release_threshold" not in out


@pytest.mark.parametrize("argv, env, words", [
    (["--gpu-pool-size", "banana"], {}, "--gpu-pool-size 'banana': not a size"),
    (["--gpu-managed", "--gpu-async-alloc"], {}, "cannot be combined"),
    (["--gpu-pool-szie", "5"], {}, "No such option '--gpu-pool-szie'"),
    ([], {"DASK_GPU_INTEROP__MEMORY__POOL_SIZE": "banana"},
     "DASK_GPU_INTEROP__MEMORY__POOL_SIZE=banana: not a size"),
])
def test_a_bad_option_stops_the_command_before_any_worker_process(scheduler, argv, env, words):
    """``dask worker`` parses the preload's arguments itself: a bad one ends the command there,
    in one error line, and no worker process starts to fail (with the nanny's tracebacks)."""
    started = time.monotonic()
    worker = subprocess.Popen(
        [*DASK, "worker", scheduler, "--no-dashboard", "--nthreads", "1", "--preload",
         "dask_gpu_interop.preload", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env={**os.environ, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "", **env})
    out, _ = worker.communicate(timeout=90)
    assert worker.returncode == 2, out
    (error,) = [line for line in out.splitlines() if line.startswith("Error: ")]
    assert error.startswith("Error: dask_gpu_interop.preload: ") and words in error, out
    assert "Traceback" not in out and "Nanny" not in out and "Start worker" not in out, out
    assert len(out.splitlines()) <= 5, out
    assert time.monotonic() - started < 30


def test_argv_round_trip_gives_the_same_configuration():
    plugin = GPUMemoryPlugin(
        pool_size="0.5", maximum_pool_size="64GB", managed=True, frameworks=["cupy"],
        statistics=False, spill=True, log_directory="/tmp/rmm-logs", jax_memory_fraction=0.3,
    )
    argv = plugin.config.argv(PREFIX)
    ctx = dask_setup.make_context("dask_setup", argv, allow_extra_args=False)
    params = dict(ctx.params)
    again = GPUMemoryPlugin(force=params.pop("gpu_force"), **given_memory(params))
    assert again.name == plugin.name


def test_every_memory_option_has_a_preload_flag():
    flags = {opt for param in dask_setup.params for opt in param.opts}
    for spec in OPTIONS:
        assert f"--gpu-{spec.key}" in flags, spec.name


def test_help_lists_the_options():
    result = CliRunner().invoke(dask_setup, ["--help"])
    assert result.exit_code == 0
    for flag in ("--gpu-pool-size", "--gpu-managed", "--gpu-async-alloc", "--create-cuda-context"):
        assert flag in result.output


def test_with_a_scheduler_file_the_options_come_from_the_environment(tmp_path):
    """How SLURM and dask-jobqueue start workers: ``--scheduler-file`` and no preload flags
    (dask-cuda would take a flag after the preload for the scheduler's address), the options
    from dask config in the environment."""
    scheduler_file = tmp_path / "scheduler.json"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "",
           "DASK_GPU_INTEROP__MEMORY__POOL_SIZE": "0.5",
           "DASK_GPU_INTEROP__MEMORY__MANAGED": "True"}
    scheduler = subprocess.Popen(
        [*DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
         "--scheduler-file", str(scheduler_file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        deadline = time.time() + 60
        while not scheduler_file.exists() and time.time() < deadline:
            time.sleep(0.2)
        worker = subprocess.Popen(
            [*DASK, "worker", "--scheduler-file", str(scheduler_file), "--no-dashboard",
             "--nthreads", "1", "--preload", "dask_gpu_interop.preload"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        with Client(scheduler_file=str(scheduler_file), timeout=30) as client:
            client.wait_for_workers(1, timeout=60)
            names = list(client.run(lambda dask_worker: sorted(dask_worker.plugins)).values())
        expected = GPUMemoryPlugin(pool_size="0.5", managed=True).name
        assert expected in names[0]
    finally:
        for process in (worker, scheduler):
            if process is not None:
                process.terminate()
                process.communicate(timeout=60)


def test_a_bad_option_in_the_environment_stops_the_worker_with_its_name(scheduler):
    worker = subprocess.Popen(
        [*DASK, "worker", scheduler, "--no-dashboard", "--nthreads", "1", "--no-nanny",
         "--preload", "dask_gpu_interop.preload"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "",
             "DASK_GPU_INTEROP__MEMORY__POOL_SIZE": "banana"})
    out, _ = worker.communicate(timeout=90)
    assert worker.returncode != 0
    assert "bad option: DASK_GPU_INTEROP__MEMORY__POOL_SIZE=banana: not a size" in out
    assert "--gpu-pool-size" not in out and "pool_size" not in out


def test_dask_cudas_preload_after_ours_gets_only_its_own_flag(tmp_path, monkeypatch):
    """As ``dask cuda worker --preload dask_gpu_interop.preload --gpu-pool-size 0.5`` starts a
    worker: dask-cuda's preload comes after ours with the same arguments, and would refuse
    ours (a stand-in for it here, shaped as dask-cuda's)."""
    from dask_gpu_interop.worker import gpu_start

    monkeypatch.syspath_prepend(str(tmp_path))
    write_preload(tmp_path, "probe_dask_cuda_initialize")
    monkeypatch.setattr(gpu_start, "DASK_CUDA_PRELOAD", "probe_dask_cuda_initialize")
    plugins = start_in_process_worker(
        ["dask_gpu_interop.preload", "probe_dask_cuda_initialize"],
        ["--gpu-pool-size", "0.5", "--create-cuda-context"])
    assert sys.modules.pop("probe_dask_cuda_initialize").seen == [True]
    assert GPUMemoryPlugin(pool_size="0.5").name in plugins


def test_the_preload_parses_its_flags_once_into_the_workers_plugin(monkeypatch):
    """In the worker, the flags read by the preload's command are the plugin it sets up: no
    second parse of them in ``dask_setup``."""
    from dask_gpu_interop import MemoryConfig

    parses = []
    parse = MemoryConfig.from_options.__func__
    monkeypatch.setattr(MemoryConfig, "from_options", classmethod(
        lambda cls, **options: parses.append(options) or parse(cls, **options)))
    plugins = start_in_process_worker(["dask_gpu_interop.preload"], ["--gpu-pool-size", "0.5"])
    assert parses == [{"pool_size": "0.5"}]
    assert GPUMemoryPlugin(pool_size="0.5").name in plugins


def test_a_bad_flag_stops_a_worker_that_no_command_checked():
    """A worker given the preload's flags by a program (no ``dask worker`` to check them
    first): distributed would log the preload's error and start the worker without its memory
    setup; it stops instead, saying why."""
    with pytest.raises(SystemExit, match=r"dask_gpu_interop.preload: bad option: "
                                         r"--gpu-pool-size 'banana': not a size"):
        start_in_process_worker(["dask_gpu_interop.preload"], ["--gpu-pool-size", "banana"])
