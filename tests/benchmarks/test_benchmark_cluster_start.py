"""The cluster-start harness on CPUs: each variant is a program that reports its times, and the
table reads them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from benchmarks import cluster_start as bench


def test_every_variant_is_a_whole_program():
    for name, body in bench.VARIANTS.items():
        compile("import json\n" + bench.PRELUDE + textwrap.dedent(body) + bench.EPILOGUE,
                name, "exec")


def test_the_epilogue_reports_start_stop_and_cudf_ready():
    code = ("import json\n" + bench.PRELUDE + "ready = t0 + 1.5\nclosed = ready + 0.25\n"
            + bench.EPILOGUE)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    found = json.loads(out.stdout.split("RESULT ", 1)[1])
    assert found == {"start": 1.5, "stop": 0.25, "cudf": None}


def test_the_table_shows_medians_and_leaves_missing_figures_out():
    runs = {"LocalCUDACluster": [{"start": 6.0, "stop": 0.5, "cudf": None},
                                 {"start": 8.0, "stop": 0.7, "cudf": None},
                                 {"start": 7.0, "stop": 0.6, "cudf": None}],
            "cuDF imported during the start": [{"start": 11.0, "stop": 0.8, "cudf": 11.5}]}
    text = bench.markdown({"command": "python -m benchmarks.cluster_start", "commit": "abc",
                           "date": "today", "machine": {"gpus": ["H100"], "cpu": "16 cores"},
                           "runs": runs})
    assert "| LocalCUDACluster | 7.00 (6.00-8.00) s | - | 0.60 (0.50-0.70) s |" in text
    assert "| cuDF imported during the start | 11.00 (11.00-11.00) s | 11.50" in text
