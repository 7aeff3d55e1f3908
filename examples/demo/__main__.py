"""``python -m examples.demo``: the mixed-framework workload with the memory report."""

import click

from dask_gpu_interop import cluster_client
from dask_gpu_interop.options import cluster_options

from .demo import run


@click.command()
@cluster_options
@click.option("--rows", type=click.IntRange(min=1000), default=1_000_000, show_default=True,
              help="Rows of synthetic features, spread over the partitions.")
def demo(cluster, rows):
    """A mixed cuDF/pandas -> PyTorch -> XGBoost workload with the memory report."""
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


if __name__ == "__main__":
    demo(prog_name="python -m examples.demo")
