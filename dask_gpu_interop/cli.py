"""``dask-gpu-interop``: the package's commands."""

from __future__ import annotations

import importlib
import importlib.util
import json
import time

import click

from .cli_options import cluster_options
from .deploy_cli import COMMANDS as DEPLOY_COMMANDS
from .deploy_cli import connect, connection_options

# Sub-commands that live with their pipelines, imported only when used.
LAZY_COMMANDS = {
    "mortgage": ("dask_gpu_interop.pipelines.mortgage.cli", "mortgage"),
    "ecg": ("dask_gpu_interop.pipelines.ecg.cli", "ecg"),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted([*super().list_commands(ctx), *self._available()])

    def _available(self):
        return [
            name for name, (module, _) in LAZY_COMMANDS.items()
            if importlib.util.find_spec(module.rsplit(".", 1)[0]) is not None
        ]

    def get_command(self, ctx, name):
        if name in LAZY_COMMANDS and name in self._available():
            module, attr = LAZY_COMMANDS[name]
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup)
@click.version_option(package_name="dask-gpu-interop")
def main():
    """One coherent GPU data-science machine out of a Dask cluster of GPUs."""


@main.command()
@cluster_options
@click.option("--rows", type=click.IntRange(min=1000), default=1_000_000, show_default=True)
def demo(cluster, rows):
    """A mixed cuDF/pandas -> PyTorch -> XGBoost workload with the memory report."""
    from .cluster import cluster_client
    from .demo import run

    with cluster_client(**cluster) as (client, device):
        click.echo(f"cluster: {len(client.scheduler_info()['workers'])} workers, device={device}")
        result = run(client, device, rows=rows)
    click.echo(f"steps:    {result['steps']}")
    click.echo(f"rows:     {result['rows']:,}")
    click.echo(f"prepare:  {result['prepare_s']:.2f} s")
    click.echo(f"train:    {result['train_s']:.2f} s (XGBoost, 20 rounds)")
    click.echo(f"train AUC {result['train_auc']:.4f}")
    click.echo("memory:")
    click.echo(str(result["memory"]))


@main.command()
@connection_options
@click.option("--watch", type=click.FloatRange(min=0.5), default=None, metavar="SECONDS",
              help="Refresh every SECONDS until interrupted.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def report(scheduler, scheduler_file, tls_dir, watch, as_json):
    """Print the GPU memory report of a running cluster."""
    from .memory.report import memory_report

    with connect(scheduler, scheduler_file, tls_dir, timeout="10s") as client:
        while True:
            rep = memory_report(client)
            if as_json:
                click.echo(json.dumps(rep, default=str, indent=1))
            else:
                if watch:
                    click.clear()
                    click.echo(time.strftime("%H:%M:%S"))
                click.echo(str(rep))
            if not watch:
                return
            time.sleep(watch)


for _command in DEPLOY_COMMANDS:  # tls make|env|show, wait-for-workers, memory-plot
    main.add_command(_command)


if __name__ == "__main__":
    main()
