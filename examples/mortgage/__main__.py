"""``python -m examples.mortgage``: the whole job; ``generate`` and ``etl`` on their own."""

if not __package__:  # run as a file (python examples/mortgage): its package cannot be imported
    import os
    import sys

    _ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(f"run the example as a module from the checkout's root: cd {_ROOT} && "
             "python -m examples.mortgage")


from dask_gpu_interop.cluster.options import prepare_from_command_line

# what the local cluster of the command line will use starts now, and works while the
# command imports the rest, plans its input and checks it
prepare_from_command_line()

from ..command import run  # noqa: E402
from .cli import mortgage  # noqa: E402

run(mortgage, "python -m examples.mortgage")
