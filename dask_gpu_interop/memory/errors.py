"""The errors the plugin raises on workers; they travel back to the caller of register_plugin."""


class GPUMemorySetupError(RuntimeError):
    """The plugin could not (or would not) set up a worker's memory resource.

    A ``RuntimeError``, raised on the worker while it sets the plugin up, and so by
    ``client.register_plugin`` on the client (or, with the preload, it stops the worker with
    the same message). The worker's previous resource is left as it was, and a registration
    that failed is taken back so that it can be retried. The message names the worker and
    says what to change: a size that does not fit the device, a framework asked for that is
    not installed, RMM missing where there is a GPU, or another owner of the memory (dask-cuda's
    ``rmm_*`` options, distributed-ucxx's ``rmm.pool-size``, another configuration with live
    buffers, PyTorch already on its own allocator), which ``force=True`` replaces.

    See Also
    --------
    OptionError : options refused on the client, before any worker is touched.

    Examples
    --------
    >>> from dask_gpu_interop import GPUMemoryPlugin, GPUMemorySetupError
    >>> try:
    ...     client.register_plugin(GPUMemoryPlugin(pool_size="4TB"))
    ... except GPUMemorySetupError as err:
    ...     print(err)  # pool_size asks for 3.64 TiB, more than the device has on ...
    """
