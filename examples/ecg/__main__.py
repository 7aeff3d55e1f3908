"""``python -m examples.ecg``: heartbeat outliers in an ECG on a Dask cluster."""

if not __package__:  # run as a file (python examples/ecg): its package cannot be imported
    import os
    import sys

    _ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(f"run the example as a module from the checkout's root: cd {_ROOT} && "
             "python -m examples.ecg")


from ..command import run
from .cli import ecg

run(ecg, "python -m examples.ecg")
