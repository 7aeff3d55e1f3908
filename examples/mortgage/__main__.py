"""``python -m examples.mortgage``: the whole job; ``generate`` and ``etl`` on their own."""

if not __package__:  # run as a file (python examples/mortgage): its package cannot be imported
    import os
    import sys

    _ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(f"run the example as a module from the checkout's root: cd {_ROOT} && "
             "python -m examples.mortgage")


from ..command import run
from .cli import mortgage

run(mortgage, "python -m examples.mortgage")
