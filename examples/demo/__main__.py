"""``python -m examples.demo``: the mixed-framework workload with the memory report."""

if not __package__:  # run as a file (python examples/demo): its package cannot be imported
    import os
    import sys

    _ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(f"run the example as a module from the checkout's root: cd {_ROOT} && "
             "python -m examples.demo")


import click

from dask_gpu_interop import cluster_client, cluster_workers, without_xgboost_rank_lines
from dask_gpu_interop.cluster.options import cluster_options

from .demo import run


@click.command()
@cluster_options
@click.option("--rows", type=click.IntRange(min=1000), default=1_000_000, show_default=True,
              help="Rows of synthetic features, spread over the partitions.")
def demo(cluster, rows):
    """A mixed cuDF/pandas -> PyTorch -> XGBoost workload with the memory report."""
    # XGBoost's "got rank" lines dropped from the workers' output: entered before they start
    with without_xgboost_rank_lines(), cluster_client(**cluster) as (client, device):
        click.echo(f"cluster: {len(cluster_workers(client))} workers, device={device}")
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
