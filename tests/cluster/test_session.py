"""cluster_client's mistakes, as a new user makes them in a notebook: each said in one line,
before anything connects or starts."""

from __future__ import annotations

import warnings

import click
import pytest
from click.testing import CliRunner

from dask_gpu_interop import cluster_client, memory_report
from dask_gpu_interop.cluster.options import cluster_options
from dask_gpu_interop.cluster.session import LocalOnlyWarning


def test_the_yielded_pair_used_as_the_client_says_to_unpack_it(cpu_cluster):
    with cluster_client(cpu_cluster.scheduler_address) as session:
        client, device = session  # unpacked as ever
        assert device == "cpu" and session.client is client
        with pytest.raises(AttributeError, match=r"cluster_client yields \(client, device\), "
                           r"and 'submit' is the client's: unpack it, `with "
                           r"cluster_client\(\.\.\.\) as \(client, device\):`, then "
                           r"client\.submit"):
            session.submit(sum, [1, 2])
        with pytest.raises(TypeError, match=r"memory_report\(\) takes the cluster's Client, not "
                           r"the \(client, device\) that cluster_client yields: unpack it"):
            memory_report(session)


@pytest.mark.parametrize("scheduler, words", [
    ("cluster", r"scheduler= takes the scheduler's address, not a LocalCluster: pass its "
                r"scheduler_address"),
    ("client", r"scheduler= takes the scheduler's address, not a Client: use that client as it "
               r"is, or pass client.scheduler.address"),
    (8786, r"scheduler=8786: give the scheduler's address as a string, such as "
           r"'tcp://127.0.0.1:8786'"),
])
def test_a_scheduler_that_is_no_address_is_named_with_the_fix(cpu_cluster, cpu_client, scheduler,
                                                              words):
    given = {"cluster": cpu_cluster, "client": cpu_client}.get(scheduler, scheduler)
    with pytest.raises(TypeError, match=words):
        cluster_client(given).__enter__()


@pytest.mark.parametrize("scheduler", [None, "tcp://127.0.0.1:1"])
def test_security_that_is_no_security_is_named_with_the_fix(scheduler):
    with pytest.raises(TypeError, match=r"security= takes a distributed.Security, not a str: "
                       r"for the certificates of `dask-gpu-interop tls make DIR`"):
        cluster_client(scheduler, device="cpu", security="/tmp/certs").__enter__()


def test_local_options_with_a_running_cluster_are_said_to_go_unused(cpu_cluster):
    address = cpu_cluster.scheduler_address
    with pytest.warns(LocalOnlyWarning, match=rf"n_workers, protocol are for a local cluster; "
                      rf"the running cluster at {address} keeps the workers it has"):
        with cluster_client(address, n_workers=4, protocol="ucx"):
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("error", LocalOnlyWarning)
        with cluster_client(address):  # nothing of a local cluster given: nothing said
            pass


def test_the_commands_say_it_once_in_their_flags_words(cpu_cluster):
    @click.command()
    @cluster_options
    def command(cluster):
        with cluster_client(**cluster):
            pass

    address = cpu_cluster.scheduler_address
    with warnings.catch_warnings():
        warnings.simplefilter("error", LocalOnlyWarning)
        result = CliRunner().invoke(command, ["--scheduler", address, "--workers", "3",
                                              "--protocol", "inproc"])
    assert result.exit_code == 0, result.output
    assert result.output == (f"note: --workers, --protocol are for a local cluster; the running "
                             f"cluster at {address} keeps the workers it has\n")
