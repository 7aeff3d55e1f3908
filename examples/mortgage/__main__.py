"""``python -m examples.mortgage``: the whole job; ``generate`` and ``etl`` on their own."""

from .cli import mortgage

mortgage(prog_name="python -m examples.mortgage")
