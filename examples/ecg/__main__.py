"""``python -m examples.ecg``: heartbeat outliers in an ECG on a Dask cluster."""

if not __package__:  # run as a file (python examples/ecg): its package cannot be imported
    import os
    import sys

    _ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(f"run the example as a module from the checkout's root: cd {_ROOT} && "
             "python -m examples.ecg")


from dask_gpu_interop.cluster.options import prepare_from_command_line

# what the local cluster of the command line will use starts now, and works while the
# command imports the rest and reads its input
prepare_from_command_line()

from ..command import run  # noqa: E402
from .cli import ecg  # noqa: E402

run(ecg, "python -m examples.ecg")
