"""What a local cluster's worker processes leave to the process that started them
(dask_gpu_interop.worker._interrupts): the failed heartbeat at the cluster's end is not logged
there, other worker errors are; nothing changes in the client's own process."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import logging, multiprocessing, sys

def child():
    from dask_gpu_interop.worker import _interrupts

    class Worker:
        pass

    _interrupts.dask_setup(Worker())
    log = logging.getLogger("distributed.worker")
    try:
        raise OSError("Stream is closed")
    except OSError:
        log.exception("Failed to communicate with scheduler during heartbeat.")
        log.exception("Unexpected exception during heartbeat. Closing worker.")

if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, format="%(message)s")
    if sys.argv[1] == "worker":
        p = multiprocessing.get_context("fork").Process(target=child)
        p.start(); p.join()
    else:
        child()
"""


def _logged(where: str) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, where], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_worker_process_leaves_out_the_failed_heartbeat_and_keeps_other_errors():
    logged = _logged("worker")
    assert "Failed to communicate with scheduler" not in logged
    assert "Unexpected exception during heartbeat" in logged and "Traceback" in logged


def test_the_clients_own_process_keeps_every_message():
    logged = _logged("client")
    assert "Failed to communicate with scheduler" in logged
