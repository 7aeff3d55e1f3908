"""Every mistake a user can make at the command line, answered: one message that names what
was wrong and what to do, the exit code, no traceback, within a time limit. One row per case
seen; add a row for each new one."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from distributed import LocalCluster

from dask_gpu_interop import tls

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "examples", "mortgage", "data", "2007Q3-sample")
DEMO = ["-m", "examples.demo", "--device", "cpu", "--workers", "1", "--rows", "2000"]
MORTGAGE = ["-m", "examples.mortgage", "--device", "cpu", "--workers", "1"]
ETL = ["-m", "examples.mortgage", "etl", "--device", "cpu", "--workers", "1", "--data", SAMPLE,
       "--out", "{out}"]
CLI = ["-m", "dask_gpu_interop.cli"]
ECG = ["-m", "examples.ecg", "--device", "cpu", "--workers", "1", "--rate", "360"]
NO_TORCH = importlib.util.find_spec("torch") is None


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    words = d / "words.csv"
    words.write_text("ecg\n" + "\n".join(["hello", "world"] * 50) + "\n")
    values = [f"{v:.4f}" for v in np.sin(np.arange(5000) / 10)]
    values[2500] = "oops"
    one_bad = d / "one-bad.csv"
    one_bad.write_text("\n".join(values) + "\n")
    noise = d / "noise.csv"
    np.savetxt(noise, np.random.default_rng(0).standard_normal(360 * 120), fmt="%.4f")
    with open(os.path.join(SAMPLE, "Performance_2007Q3.txt_0")) as f:
        lines = f.readlines()[:200]
    lines[41] = lines[41].replace("|", "|junk|", 1)
    dirty = d / "dirty"
    dirty.mkdir()
    (dirty / "Performance_2007Q3.txt_0").write_text("".join(lines))
    (dirty / "Acquisition_2007Q3.txt").write_text(
        open(os.path.join(SAMPLE, "Acquisition_2007Q3.txt")).read())
    empty = d / "no-certificates"
    empty.mkdir()
    with _http_server() as http, _answering_web_server() as web, \
            LocalCluster(n_workers=0, dashboard_address=None) as tcp:
        yield {"words": str(words), "one_bad": str(one_bad), "noise": str(noise),
               "dirty": str(dirty), "out": str(d / "out"), "http": http, "web": web,
               "tcp": tcp.scheduler_address,
               "tls_to_tcp": tcp.scheduler_address.replace("tcp://", "tls://"),
               "certs": str(tls.make_certificates(d / "certs").directory),
               "no_certs": str(empty), "missing": str(d / "no-scheduler.json")}


@contextlib.contextmanager
def _http_server():
    """``python -m http.server`` in a thread: something that listens, and is no scheduler."""
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def _answering_web_server():
    """A web server that answers what it cannot read at once, as nginx does (400, then it
    closes): something that listens, answers, and is no scheduler."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed: the tests are done
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nServer: nginx\r\nContent-Length: 0"
                             b"\r\nConnection: close\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


CASES = [
    # (id, argv, exit code, words the output must hold, seconds at most)
    ("pool size not a size", [*DEMO, "--pool-size", "banana"], 2,
     "--pool-size 'banana': not a size", 20),
    ("pool size 2.5", [*DEMO, "--pool-size", "2.5"], 2,
     "a number above 1 is read as bytes and must be whole", 20),
    ("pool size -1", [*DEMO, "--pool-size", "-1"], 2, "a size must be more than zero", 20),
    ("managed and async", [*DEMO, "--managed", "--async-alloc"], 2,
     "--managed and --async-alloc cannot be combined", 20),
    ("ucx without GPUs", [*DEMO, "--protocol", "ucx"], 2, "--protocol 'ucx' is for GPU", 20),
    ("gpu without a GPU", ["-m", "examples.demo", "--device", "gpu"], 2,
     "no CUDA GPU is visible", 20),
    ("no scheduler there", [*DEMO, "--scheduler", "tcp://127.0.0.1:1"], 1,
     "no scheduler answered at tcp://127.0.0.1:1", 30),
    ("report of no scheduler", ["-m", "dask_gpu_interop.cli", "report", "--scheduler",
                                "tcp://127.0.0.1:1"], 1, "no scheduler answered", 30),
    ("an HTTP server, not a scheduler", [*CLI, "report", "--scheduler", "{http}"], 1,
     "no Dask scheduler answered at tcp://127.0.0.1:", 30),
    ("etl to an HTTP server", [*ETL, "--scheduler", "{http}"], 1,
     "no Dask scheduler answered at tcp://127.0.0.1:", 30),
    ("the job to an HTTP server", [*MORTGAGE, "--data", SAMPLE, "--scheduler", "{http}"], 1,
     "the scheduler's, not its dashboard's or a worker's", 30),
    ("a thousand workers", [*DEMO, "--workers", "1000"], 2,
     "--workers 1000 is more than this machine holds: at most", 20),
    ("a thousand workers for the ETL", [*ETL, "--workers", "1000"], 2,
     "--workers 1000 is more than this machine holds", 20),
    ("tls without certificates", [*DEMO, "--protocol", "tls"], 2,
     "--protocol 'tls' needs certificates for the scheduler, the workers and the client", 20),
    ("report of no scheduler file", [*CLI, "report", "--scheduler-file", "{missing}"], 1,
     "no scheduler file at", 20),
    ("doctor of no scheduler file", [*CLI, "doctor", "--scheduler-file", "{missing}"], 1,
     "no scheduler file at", 30),
    ("memory-plot of no scheduler file", [*CLI, "memory-plot", "--scheduler-file", "{missing}",
                                          "--png", "{out}.png"], 1, "no scheduler file at", 20),
    ("tls:// to a TCP scheduler", [*CLI, "report", "--scheduler", "{tls_to_tcp}", "--tls",
                                   "{certs}"], 1, "the protocol (tcp:// or tls://", 30),
    ("tls:// without TLS settings", [*CLI, "report", "--scheduler", "{tls_to_tcp}"], 1,
     "is a tls:// address and no TLS settings are given", 20),
    ("--tls on a folder without certificates", [*CLI, "report", "--scheduler", "{tcp}",
                                                "--tls", "{no_certs}"], 1,
     "lacks ca.pem, client.pem, client-key.pem. Make the certificates first", 20),
    ("a host that does not exist", [*CLI, "report", "--scheduler", "nosuchhost.invalid:8786"],
     1, "no host named nosuchhost.invalid is known here", 30),
    ("options before the command", ["-m", "examples.mortgage", "--data", SAMPLE, "etl",
                                    "--out", "{out}"], 2,
     "--data given before 'etl': a command's options go after it", 20),
    ("a memory plot into no folder", [*DEMO, "--memory-plot", "/nonexistent/dir/m.png"], 2,
     "/nonexistent/dir/m.png: the folder /nonexistent/dir does not exist", 20),
    ("memory-plot into no folder", [*CLI, "memory-plot", "--scheduler", "{tcp}", "--png",
                                    "/nonexistent/dir/m.png"], 2,
     "the folder /nonexistent/dir does not exist", 20),
    ("the example run as a file", ["examples/mortgage/__main__.py"], 1,
     f"run the example as a module from the checkout's root: cd {ROOT} && python -m "
     "examples.mortgage", 20),
    ("tls make under a file", [*CLI, "tls", "make", "{words}/certs"], 1,
     "words.csv is a file, not a folder", 20),
    ("generate on no scheduler", ["-m", "examples.mortgage", "generate", "--out", "{out}",
                                  "--scheduler", "tcp://127.0.0.1:1"], 1,
     "no scheduler answered at tcp://127.0.0.1:1", 30),
    ("XGBoost's device as a parameter", [*MORTGAGE, "--data", SAMPLE, "--xgb-param",
                                         "device=cuda"], 2,
     "device=cuda: XGBoost trains on the workers' device, which --device chooses", 20),
    ("local options with a running cluster", [*DEMO, "--scheduler", "{tcp}", "--workers", "3",
                                              "--threads-per-worker", "2"], 1,
     "note: --workers, --threads-per-worker are for a local cluster; the running cluster", 30),
    ("a running cluster without workers", [*ETL, "--scheduler", "{tcp}"], 1,
     "no worker has joined the scheduler at tcp://127.0.0.1:", 30),
    ("a working folder with data given", [*MORTGAGE, "--data", SAMPLE, "--workdir", "{out}"],
     2, "--workdir is where the job generates its data, and with --data it generates none", 20),
    ("partition size 10", [*MORTGAGE, "--partition-size", "10"], 2, "give at least 1MiB", 20),
    ("holdout the only quarter", [*MORTGAGE, "--data", SAMPLE, "--holdout", "2007Q3"], 2,
     "is the only quarter of the data, so nothing is left to train on", 20),
    ("a bad row", ["-m", "examples.mortgage", "etl", "--device", "cpu", "--workers", "1",
                   "--data", "{dirty}", "--out", "{out}"], 1,
     "Performance_2007Q3.txt_0:42: expected 31 fields, found 32", 60),
    ("an ECG of words", [*ECG, "--csv", "{words}", "--out", "{out}"], 1,
     "words.csv:2: 'hello' is not a number", 60),
    ("one bad ECG value", [*ECG, "--csv", "{one_bad}", "--out", "{out}"], 1,
     "one-bad.csv:2501: 'oops' is not a number", 60),
    ("an ECG of noise", [*ECG, "--csv", "{noise}", "--out", "{out}"], 0,
     "warning: these detections do not look like a heartbeat", 180),
    ("inproc between worker processes", [*DEMO, "--protocol", "inproc"], 2,
     "--protocol 'inproc' connects workers in this process only", 20),
    ("inproc for the ETL", [*ETL, "--protocol", "inproc"], 2,
     "add --no-processes, or use --protocol 'tcp'", 20),
    ("inproc for the ECG", [*ECG, "--protocol", "inproc", "--out", "{out}"], 2,
     "--protocol 'inproc' connects workers in this process only", 20),
    ("a web server that answers", [*CLI, "report", "--scheduler", "{web}"], 1,
     "what answered speaks another protocol, a web server's perhaps", 20),
    ("doctor of a web server that answers", [*CLI, "doctor", "--scheduler", "{web}"], 1,
     "what answered speaks another protocol", 60),
    ("the job to a web server that answers", [*MORTGAGE, "--data", SAMPLE, "--scheduler",
                                              "{web}"], 1, "speaks another protocol", 30),
    ("the ECG to a web server that answers", [*ECG, "--scheduler", "{web}", "--out", "{out}"],
     1, "speaks another protocol", 30),
    ("an http:// address", [*CLI, "doctor", "--scheduler", "http://127.0.0.1:8787/status"], 1,
     "http://127.0.0.1:8787/status is a web address: give the scheduler's own", 30),
    ("etl to an http:// address", [*ETL[:-1], "{out}-web", "--scheduler",
                                   "http://127.0.0.1:8787"], 1, "is a web address", 30),
    ("--tls to a TCP scheduler", [*CLI, "report", "--scheduler", "{tcp}", "--tls", "{certs}"], 1,
     "is a plain tcp:// address, and the TLS settings given require encryption", 20),
    ("doctor --tls to a TCP scheduler", [*CLI, "doctor", "--scheduler", "{tcp}", "--tls",
                                         "{certs}"], 1, "give the scheduler's tls:// address",
     60),
    ("waiting for a scheduler file that never comes", [*CLI, "wait-for-workers",
                                                       "--scheduler-file", "{missing}", "-n",
                                                       "1", "--timeout", "2"], 1,
     "waiting up to 2 s for the scheduler to write", 20),
    ("a scheduler file in no folder", [*CLI, "wait-for-workers", "--scheduler-file",
                                       "/nonexistent/dir/s.json", "-n", "1"], 1,
     "the folder /nonexistent/dir does not exist", 20),
    ("fewer workers than waited for", [*CLI, "wait-for-workers", "--scheduler", "{tcp}", "-n",
                                       "2", "--timeout", "2"], 1,
     "only 0 of 2 workers joined within 2 s: start more, or wait longer (--timeout)", 30),
    ("the package run as a command", ["-m", "dask_gpu_interop", "report", "--scheduler",
                                      "tcp://127.0.0.1:1"], 1,
     "no scheduler answered at tcp://127.0.0.1:1", 30),
]


@pytest.mark.parametrize("argv, code, words, limit", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_each_mistake_gets_one_clear_answer(files, argv, code, words, limit):
    if "gpu" in argv and _has_gpu():
        pytest.skip("this machine has a GPU")
    if "examples.ecg" in argv and NO_TORCH:
        pytest.skip("the ECG example needs PyTorch")
    argv = [a.format(**files) for a in argv]
    started = time.monotonic()
    out = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                         timeout=limit + 60, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    seconds = time.monotonic() - started
    text = out.stdout + out.stderr
    assert out.returncode == code, text[-3000:]
    assert words in text, text[-3000:]
    assert "Traceback" not in text and "Compute Failed" not in text, text[-3000:]
    assert seconds < limit, f"{seconds:.1f} s"


def _has_gpu() -> bool:
    from dask_gpu_interop import device

    return device.gpu_count() > 0
