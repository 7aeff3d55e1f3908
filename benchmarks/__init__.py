"""The benchmarks: each module measures a claim of the library, run from the checkout's root as
``python -m benchmarks.NAME [options]``; ``benchmarks.examples`` holds those of the example
applications. benchmarks/README.md lists both by claim, with their commands and results.
``common`` is the contract every one of them fills in."""
