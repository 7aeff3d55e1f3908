"""The example applications' benchmarks: each module measures the mortgage or the ECG
application (its commands, their stages, their scaling), not the library, run from the
checkout's root as ``python -m benchmarks.examples.NAME [options]``. They fill in the same
contract as the library's benchmarks (``benchmarks.common``) and write to the same results
folder; benchmarks/README.md lists their claims apart from the library's."""
