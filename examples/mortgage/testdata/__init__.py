"""Test data for the mortgage example: synthetic Fannie Mae files, apart from the pipeline.

``generate`` simulates loans and writes their files in either real layout, for the tests, the
benchmarks and the ``generate`` command. The ETL and the training never import it: they read
any files of those layouts.
"""
