"""One way to reach a running cluster: ``cluster.running.connect`` (an address or a scheduler
file, TLS, a timeout, one message when no scheduler answers), used by the examples and the
commands alike."""

import contextlib
import json
import re
import threading
import time

import pytest
from click.testing import CliRunner

from dask_gpu_interop import ClusterError
from dask_gpu_interop.cli import main
from dask_gpu_interop.cluster.running import connect

NOBODY = "tcp://127.0.0.1:1"  # nothing listens on port 1


def scheduler_file(tmp_path, address):
    path = tmp_path / "scheduler.json"
    path.write_text(json.dumps({"type": "Scheduler", "address": address}))
    return str(path)


def test_an_address_or_a_scheduler_file_reaches_the_same_scheduler(cpu_cluster, tmp_path):
    address = cpu_cluster.scheduler_address
    with connect(address) as client:
        assert client.scheduler.address == address
    with connect(scheduler_file=scheduler_file(tmp_path, address)) as client:
        assert client.scheduler.address == address


@pytest.mark.parametrize("where", [{}, {"scheduler": NOBODY, "scheduler_file": "s.json"}])
def test_one_of_address_and_scheduler_file(where):
    with pytest.raises(ValueError, match="give one of scheduler= .* or scheduler_file="):
        connect(**where)


def test_no_scheduler_at_the_address():
    with pytest.raises(ClusterError) as info:
        connect(NOBODY, timeout="1s")
    assert str(info.value) == (
        f"no scheduler answered at {NOBODY}: nothing listens there; check the address, or "
        "start one (python -m dask scheduler)")


def test_no_scheduler_at_the_address_in_the_file(tmp_path):
    path = scheduler_file(tmp_path, NOBODY)
    with pytest.raises(ClusterError, match=re.escape(
            f"no scheduler answered at {NOBODY} (the address in {path}): nothing listens")):
        connect(scheduler_file=path, timeout="1s")


def test_the_commands_say_the_same_when_no_scheduler_answers(tmp_path):
    path = scheduler_file(tmp_path, NOBODY)
    for where, words in (
            (["--scheduler", NOBODY], f"no scheduler answered at {NOBODY}: nothing listens"),
            (["--scheduler-file", path],
             f"no scheduler answered at {NOBODY} (the address in {path}): nothing listens")):
        result = CliRunner().invoke(main, ["wait-for-workers", "-n", "1", "--timeout", "1",
                                           *where])
        assert result.exit_code == 1, result.output
        assert f"Error: {words}" in result.output
        assert "check the address, or start one (python -m dask scheduler)" in result.output


def test_the_commands_report_through_a_scheduler_file(cpu_cluster, tmp_path):
    path = scheduler_file(tmp_path, cpu_cluster.scheduler_address)
    result = CliRunner().invoke(main, ["report", "--scheduler-file", path, "--json"])
    assert result.exit_code == 0, result.output
    assert set(json.loads(result.output)) == set(cpu_cluster.scheduler_info["workers"])


def test_the_commands_take_one_of_scheduler_and_scheduler_file(tmp_path):
    result = CliRunner().invoke(
        main, ["report", "--scheduler", NOBODY, "--scheduler-file", str(tmp_path / "s.json")])
    assert result.exit_code == 2
    assert "give one of --scheduler ADDRESS or --scheduler-file FILE" in result.output


def test_every_command_that_reaches_a_cluster_has_the_same_connection_options():
    wanted = {"--scheduler", "--scheduler-file", "--tls"}
    for name in ("report", "doctor", "wait-for-workers", "memory-plot"):
        flags = {flag for param in main.commands[name].params for flag in param.opts}
        assert wanted <= flags, name


def _bounded(call, seconds):
    """``call()``'s exception, failing the test if it has not ended after ``seconds``."""
    found = []

    def run():
        try:
            call()
        except Exception as err:  # noqa: BLE001 - what it raised is what is checked
            found.append(err)

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting after {seconds} s"
    (err,) = found
    return err, time.monotonic() - started


def test_something_that_is_not_a_scheduler_is_refused_within_the_timeout():
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"tcp://127.0.0.1:{server.server_address[1]}"
    try:
        err, seconds = _bounded(lambda: connect(address, timeout="2s"), 20)
    finally:
        server.shutdown()
        server.server_close()
    assert isinstance(err, ClusterError), repr(err)
    assert str(err).startswith(f"no Dask scheduler answered at {address} (")
    assert seconds < 10


def test_a_web_server_that_answers_at_once_is_refused_in_one_line():
    """A web server answers what it cannot read (nginx: 400, then it closes): distributed
    reads that answer's first bytes as the length of a frame, and fails allocating exabytes."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    try:
        err, _ = _bounded(lambda: connect(address, timeout="5s"), 20)
    finally:
        listener.close()
    assert isinstance(err, ClusterError), repr(err)
    assert str(err).startswith(f"no Dask scheduler answered at {address} (what answered speaks "
                               "another protocol, a web server's perhaps): check the host")


def test_a_web_address_is_refused_at_once():
    with pytest.raises(ClusterError, match=r"^http://127.0.0.1:8787/status is a web address: "
                       r"give the scheduler's own, tcp://HOST:PORT"):
        connect("http://127.0.0.1:8787/status")


def test_tls_settings_with_a_plain_tcp_address_are_refused_at_once(cpu_cluster, tmp_path):
    from dask_gpu_interop import tls

    security = tls.security(tls.make_certificates(tmp_path / "certs").directory, "client")
    with pytest.raises(ClusterError, match=r"is a plain tcp:// address, and the TLS settings "
                       r"given require encryption .*give the scheduler's tls:// address"):
        connect(cpu_cluster.scheduler_address, security=security)


def test_a_worker_s_address_is_not_taken_for_the_scheduler_s(cpu_cluster):
    worker = sorted(cpu_cluster.scheduler_info["workers"])[0]
    err, _ = _bounded(lambda: connect(worker, timeout="5s"), 20)
    assert isinstance(err, ClusterError), repr(err)
    assert "it answered as Worker, not a scheduler" in str(err)


@pytest.mark.parametrize("content, words", [
    (None, "no scheduler file at"), ("{}", "holds no scheduler address (KeyError"),
    ("not json", "holds no scheduler address (JSONDecodeError")])
def test_a_missing_or_broken_scheduler_file_is_refused_at_once(tmp_path, content, words):
    path = tmp_path / "scheduler.json"
    if content is not None:
        path.write_text(content)
    err, seconds = _bounded(lambda: connect(scheduler_file=str(path)), 20)
    assert isinstance(err, ClusterError) and words in str(err), repr(err)
    assert seconds < 5


def test_a_report_watching_a_scheduler_that_dies_ends_in_one_line(tmp_path):
    import os
    import signal
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", str(port), "--no-dashboard"], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    report = None
    try:
        _wait_until_listening(port, 60)
        report = subprocess.Popen(
            [sys.executable, "-m", "dask_gpu_interop.cli", "report", "--scheduler", address,
             "--watch", "0.5"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert report.stdout.readline()  # the first report's time
        scheduler.send_signal(signal.SIGKILL)
        started = time.monotonic()
        rest, _ = report.communicate(timeout=60)
        seconds = time.monotonic() - started
    finally:
        for process in (scheduler, report):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(30)
    assert report.returncode == 1, rest
    assert f"Error: the scheduler at {address} stopped answering" in rest, rest
    assert "Traceback" not in rest, rest
    assert seconds < 30


def _wait_until_listening(port, seconds):
    import socket

    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, f"nothing listens at port {port}"
            time.sleep(0.2)


def test_ctrl_c_ends_a_watched_report_quietly(cpu_cluster):
    import os
    import signal
    import subprocess
    import sys

    report = subprocess.Popen(
        [sys.executable, "-m", "dask_gpu_interop.cli", "report", "--scheduler",
         cpu_cluster.scheduler_address, "--watch", "0.5"], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert report.stdout.readline()  # the first report's time
        report.send_signal(signal.SIGINT)  # how a watch ends
        rest, _ = report.communicate(timeout=30)
    finally:
        if report.poll() is None:
            report.kill()
            report.wait(30)
    assert report.returncode == 0, rest
    assert "Traceback" not in rest and "Aborted" not in rest, rest
