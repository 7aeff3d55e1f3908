"""Which shuffle dask's own ``shuffle``, ``merge`` and ``groupby`` use on a GPU cluster.

With a distributed client running and pyarrow installed, dask picks its p2p shuffle unless the
dask config key ``dataframe.shuffle.method`` says otherwise. P2P turns every partition into an
Arrow table in host memory, cuDF partitions too: the data leaves the GPUs, and a shuffle of
cuDF frames runs many times slower than dask's task shuffle, which keeps each piece a cuDF
frame, moved between workers by the "cuda" serializers (device to device over UCX).

dask reads the key on the client, when it turns a frame's expression into tasks, and accepts
only its own method names there and in ``shuffle_method=``: no other shuffle can be plugged
in. :func:`dask_gpu_interop.shuffle` and :func:`dask_gpu_interop.shuffle_merge` are called
directly instead; this module only chooses among dask's own methods.
"""

from __future__ import annotations

import dask

#: The dask config key dask's DataFrame operations read their default shuffle from.
KEY = "dataframe.shuffle.method"


def shuffle_config(device: str = "gpu") -> dict:
    """The dask config that keeps dask's own shuffles of cuDF frames on the GPUs.

    dask's p2p shuffle, its default whenever a distributed client runs, moves every partition
    through host memory as Arrow tables; its task shuffle keeps cuDF partitions on the
    devices. :func:`cluster_client` applies this for its block when the workers have GPUs.
    With a client of your own, apply it yourself, for the process or for a block.

    Parameters
    ----------
    device : {"gpu", "cpu"}
        The workers' device: on CPUs dask's own choice is kept (nothing to set).

    Returns
    -------
    dict
        ``{"dataframe.shuffle.method": "tasks"}`` for GPUs; ``{}`` for CPUs, or where a
        method is set already (by you, in dask config or ``DASK_DATAFRAME__SHUFFLE__METHOD``),
        which is then kept. A method passed to a call (``shuffle_method="p2p"``) wins over
        either.

    Raises
    ------
    ValueError
        ``device`` is neither "gpu" nor "cpu".

    Examples
    --------
    >>> import dask
    >>> from dask_gpu_interop import shuffle_config
    >>> with dask.config.set({"dataframe.shuffle.method": None}):
    ...     shuffle_config()
    {'dataframe.shuffle.method': 'tasks'}
    >>> with dask.config.set({"dataframe.shuffle.method": "p2p"}):
    ...     shuffle_config()
    {}
    >>> dask.config.set(shuffle_config())  # for this process  # doctest: +SKIP
    >>> with dask.config.set(shuffle_config()):  # for a block  # doctest: +SKIP
    ...     joined = left.merge(right, on="key")
    """
    if device not in ("gpu", "cpu"):
        raise ValueError(f"device={device!r}: choose gpu or cpu")
    if device == "cpu" or dask.config.get(KEY, None) is not None:
        return {}
    return {KEY: "tasks"}
