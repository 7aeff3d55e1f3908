"""A GPU cluster on SLURM from Python, with dask-jobqueue: the scheduler runs in this process
(on the login or a head node), and every SLURM job is one node running `dask cuda worker`
(one worker per GPU) with the dask_gpu_interop preload. TLS with certificates made for it.

    pip install dask-jobqueue "dask-gpu-interop[cuda13]"
    python deploy/slurm/jobqueue_example.py --nodes 2 --queue gpu --account myproject

Needs dask-jobqueue 0.8.2 or later (``worker_command``). Print ``cluster.job_script()`` to see
the batch script each job runs before scaling.
"""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

PRELOAD = ["--preload", "dask_gpu_interop.preload", "--gpu-pool-size", "0.8"]


def all_roles_security(tls_dir: Path):
    """One Security for this process and its jobs: the scheduler runs here with the scheduler
    certificate; dask-jobqueue passes the worker's files to each job as --tls-* options."""
    from distributed import Security

    from dask_gpu_interop import tls

    if not (tls_dir / tls.CA_FILE).exists():
        tls.make_certificates(tls_dir, hostnames=[socket.gethostname()])
    files = tls.files(tls_dir)
    return Security(
        require_encryption=True,
        tls_ca_file=str(files.ca_file),
        **{
            f"tls_{role}_{kind}": str(getattr(files, kind)(role))
            for role in tls.ROLES
            for kind in ("cert", "key")
        },
    )


def make_cluster(
    *,
    queue: str | None = None,
    account: str | None = None,
    gpus_per_node: int = 4,
    cpus_per_node: int = 32,
    memory_per_node: str = "256G",
    walltime: str = "01:00:00",
    interface: str | None = None,
    tls_dir: Path = Path("~/.dask-gpu-interop/tls").expanduser(),
    prologue: tuple[str, ...] = (),
):
    """A SLURMCluster whose jobs each run one `dask cuda worker` with the preload."""
    from dask.utils import format_bytes, parse_bytes
    from dask_jobqueue import SLURMCluster

    # jobqueue's cores/memory are what each worker process gets (--nthreads, --memory-limit);
    # `dask cuda worker` starts one worker per GPU, so the node's share is split by GPU here,
    # and job_cpu/job_mem ask SLURM for the whole node's.
    return SLURMCluster(
        queue=queue,
        account=account,
        cores=1,                        # threads per GPU worker: one, as dask-cuda does
        memory=format_bytes(parse_bytes(memory_per_node) // gpus_per_node).replace(" ", ""),
        processes=1,                    # one `dask cuda worker` per job
        job_cpu=cpus_per_node,
        job_mem=memory_per_node,
        walltime=walltime,
        job_extra_directives=[f"--gpus-per-node={gpus_per_node}", "--exclusive"],
        worker_command="dask_cuda.cli",  # `python -m dask_cuda.cli` is `dask cuda worker`
        worker_extra_args=PRELOAD,
        interface=interface,            # e.g. "ib0": scheduler and workers on InfiniBand
        security=all_roles_security(Path(tls_dir)),
        # The dashboard stays on this machine's localhost: ssh -L 8787:localhost:8787 <this host>
        scheduler_options={"dashboard_address": "127.0.0.1:8787"},
        job_script_prologue=list(prologue),  # e.g. ["module load cuda", "source ~/venv/bin/activate"]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=4)
    parser.add_argument("--queue")
    parser.add_argument("--account")
    parser.add_argument("--interface")
    parser.add_argument("--print-job-script", action="store_true", help="print it and exit")
    args = parser.parse_args()

    from distributed import Client

    from dask_gpu_interop import memory_report

    cluster = make_cluster(
        queue=args.queue, account=args.account, gpus_per_node=args.gpus_per_node,
        interface=args.interface,
    )
    with cluster:
        if args.print_job_script:
            print(cluster.job_script())
            return
        cluster.scale(jobs=args.nodes)
        with Client(cluster) as client:
            client.wait_for_workers(args.nodes * args.gpus_per_node, timeout=1800)
            print(memory_report(client))


if __name__ == "__main__":
    main()
