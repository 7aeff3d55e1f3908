"""The errors the plugin raises on workers; they travel back to the caller of register_plugin."""


class GPUMemorySetupError(RuntimeError):
    """The plugin could not (or would not) set up the worker's memory resource.

    The worker's previous resource is left as it was. The message says what to change.
    """
