"""The benchmarks: each module measures a claim, run from the checkout's root as
``python -m benchmarks.NAME [options]``; benchmarks/README.md lists them by claim, with their
commands and results. ``common`` is the contract every one of them fills in."""
