"""The all-to-all's tasks as a graph (:func:`dask_gpu_interop.shuffle`): one layer per task
kind and worker, each task pinned to the worker its :class:`.plan.Plan` gives it, with the
batch tasks (:func:`build_graph`) or the direct exchange (:func:`build_direct_graph`)."""

from __future__ import annotations

from . import tasks
from .plan import Plan

#: The task prefix of every task of the all-to-all: ``gpu-shuffle-split``, ``-batch``,
#: ``-output`` (the memory report's per-task view groups by these; dask's ``key_split`` would
#: drop an eight-letter word starting with a-f, such as "assemble", as if it were hex).
PREFIX = "gpu-shuffle"


def _restricted(worker: str, priority: int = 0) -> dict:
    """Annotations that run a task on ``worker`` and nowhere else (before the tasks of lower
    ``priority`` that are ready at the same time)."""
    return {"workers": [worker], "allow_other_workers": False,
            **({"priority": priority} if priority else {})}


def build_graph(plan: Plan, inputs: list, token: str, on: list, casts: dict,
                ignore_index: bool):
    """The all-to-all as a ``HighLevelGraph`` (a layer per task kind and worker, annotated
    with that worker), and the output partitions' keys in order.

    ``inputs`` are the input partitions (futures, or any key the scheduler knows) in order.
    Each source worker splits its input groups (:meth:`Plan.input_groups`); one batch per
    split group and destination output group takes what the split holds for it; each output
    partition of a destination's output group is concatenated from every batch bound for
    that group. In steps (``plan.step_bytes``), a batch is a copy, and the batches of a split
    run before the next split, so that each split (and its inputs) is freed as soon as its
    batches exist; in one step per worker a batch is a view of the split.
    """
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    split_name, batch_name, output_name = (
        f"{PREFIX}-{step}-{token}" for step in ("split", "batch", "output"))
    copy = plan.step_bytes is not None
    groups = {s: plan.input_groups(s) for s in plan.sources}
    runs = {d: plan.output_groups(d) for d in plan.destinations}
    layers, dependencies = {}, {}
    batch_layers = set()
    for s in plan.sources:
        worker = plan.workers[s]
        name = f"{split_name}-on-{s}"
        layers[name] = MaterializedLayer(
            {(split_name, s, g): (tasks.split, [inputs[i] for i in group], on, casts,
                                  plan.npartitions, ignore_index)
             for g, group in enumerate(groups[s])},
            annotations=_restricted(worker))  # fmt: skip
        dependencies[name] = set()
        batches = f"{batch_name}-from-{s}"
        layers[batches] = MaterializedLayer(
            {(batch_name, s, g, d, h): (tasks.batch, (split_name, s, g), first, stop, copy)
             for g in range(len(groups[s])) for d in plan.destinations
             for h, (first, stop) in enumerate(runs[d])},
            annotations=_restricted(worker, priority=int(copy)))  # fmt: skip
        dependencies[batches] = {name}
        batch_layers.add(batches)
    for d in plan.destinations:
        outputs = f"{output_name}-on-{d}"
        layers[outputs] = MaterializedLayer(
            {(output_name, j): (tasks.output, [(batch_name, s, g, d, h)
                                               for s in plan.sources
                                               for g in range(len(groups[s]))],
                                j - first, ignore_index)
             for h, (first, stop) in enumerate(runs[d]) for j in range(first, stop)},
            annotations=_restricted(plan.workers[d]))  # fmt: skip
        dependencies[outputs] = set(batch_layers)
    keys = [(output_name, j) for j in range(plan.npartitions)]
    return HighLevelGraph(layers, dependencies), keys


def build_direct_graph(plan: Plan, inputs: list, token: str, on: list, casts: dict,
                       ignore_index: bool, timeout: float | None = None):
    """The all-to-all with the direct exchange (:mod:`.inbox`), as a ``HighLevelGraph``, and
    the output partitions' keys in order: one ``gpu-shuffle-send`` task per source worker (its
    split, and its batches sent, each taken within ``timeout`` seconds; keys
    :func:`send_keys`), and one ``gpu-shuffle-output`` per output partition, on its worker,
    which depends on every send (their small receipts): once they all ended, its batches are
    all in its worker's inbox. In one step per worker only."""
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    from . import inbox

    if plan.step_bytes is not None:
        raise ValueError("the direct exchange takes one step per worker")
    send_name, output_name = f"{inbox.SEND}-{token}", f"{PREFIX}-output-{token}"
    runs = {d: plan.output_groups(d) for d in plan.destinations}
    targets = [(f"{d}/{h}", plan.workers[d], first, stop)
               for d in plan.destinations for h, (first, stop) in enumerate(runs[d])]
    layers, dependencies = {}, {}
    for s in plan.sources:
        name = f"{send_name}-on-{s}"
        layers[name] = MaterializedLayer(
            {(send_name, s): (inbox.split_and_send, [inputs[i] for i in plan.inputs_on(s)],
                              on, casts, plan.npartitions, ignore_index, token, s,
                              plan.workers[s], targets, timeout)},
            annotations=_restricted(plan.workers[s]))  # fmt: skip
        dependencies[name] = set()
    sources = tuple(plan.sources)
    sends = [(send_name, s) for s in sources]
    for d in plan.destinations:
        name = f"{output_name}-on-{d}"
        layers[name] = MaterializedLayer(
            {(output_name, j): (inbox.output_from_inbox, token, f"{d}/{h}", j - first,
                                stop - first, ignore_index, j, sources, *sends)
             for h, (first, stop) in enumerate(runs[d]) for j in range(first, stop)},
            annotations=_restricted(plan.workers[d]))  # fmt: skip
        dependencies[name] = {f"{send_name}-on-{s}" for s in sources}
    keys = [(output_name, j) for j in range(plan.npartitions)]
    return HighLevelGraph(layers, dependencies), keys


def _lineage(graph, keys: list, plan: Plan, token: str, direct: bool) -> list:
    """The shuffle's keys that the scheduler keeps once it ended: the output partitions, and
    what it would compute again to make one that is lost (the batch tasks and splits; with
    the direct exchange, the sends, which every output partition depends on)."""
    if not direct:
        return [key for layer in graph.layers.values() for key in layer]
    return list(keys) + send_keys(plan, token)


def send_keys(plan: Plan, token: str) -> list:
    """The keys of the direct exchange's send tasks (:func:`build_direct_graph`), which the
    client watches beside the output partitions, so that a failed send is named as such."""
    from .inbox import SEND

    return [(f"{SEND}-{token}", s) for s in plan.sources]
