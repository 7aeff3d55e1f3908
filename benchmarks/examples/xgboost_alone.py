"""XGBoost alone on the mortgage ``etl`` command's output: the whole job's matrix and training
done without Dask or the ETL, the reference the job is measured against.

    python -m benchmarks.examples.xgboost_alone --features OUT --figures ETL.json [--rounds 100]
        [--json PATH]

One process on one GPU: a ``QuantileDMatrix`` from a ``DataIter`` over the Parquet part files
the ``etl`` command wrote into ``OUT`` (read by cuDF, the job's 45 float32 features and its
label), the training matrix from every quarter but the latest and the test matrix from the
latest (quantized with the training matrix's cuts), then 100 rounds of the job's parameters
evaluated on both, as the job does. cuDF and XGBoost allocate from CUDA's async pool, as the
job's workers do. ``ETL.json`` is what the ``etl`` command's ``--json`` wrote: it names each
part file's quarter. Prints, and writes with ``--json``: the matrices' and the training's
seconds, the test AUC and the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def parts(features: str, quarters: list) -> tuple[list[str], list[str]]:
    """(training files, test files): the latest quarter's part files to test."""
    from examples.mortgage.etl import PART_FILE

    paths = [os.path.join(features, PART_FILE.format(i)) for i in range(len(quarters))]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise SystemExit(f"--features {features}: no {os.path.basename(missing[0])}; give the "
                         "folder the etl command wrote with these figures")
    latest = max(q for q in quarters if q is not None)
    return ([p for p, q in zip(paths, quarters, strict=True) if q != latest],
            [p for p, q in zip(paths, quarters, strict=True) if q == latest])


def parse(argv=None) -> argparse.Namespace:
    """The arguments (``argv``, or this process's); nothing runs."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.examples.xgboost_alone",
                                     description=__doc__.strip().split("\n\n")[0])
    parser.add_argument("--features", required=True, help="the etl command's --out folder")
    parser.add_argument("--figures", required=True, help="the etl command's --json file")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--json", default=None)
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse(argv)
    with open(args.figures) as f:
        quarters = json.load(f)["etl"]["quarters"]
    train_files, test_files = parts(args.features, quarters)

    started = time.perf_counter()
    import cudf
    import rmm
    import xgboost

    from examples.mortgage import schema, train

    rmm.mr.set_current_device_resource(rmm.mr.CudaAsyncMemoryResource())
    features = list(schema.FEATURES)

    class Files(xgboost.DataIter):
        def __init__(self, paths):
            self.paths, self.position = paths, 0
            super().__init__(release_data=True)

        def next(self, input_data) -> bool:
            if self.position == len(self.paths):
                return False
            frame = cudf.read_parquet(self.paths[self.position])
            input_data(data=frame[features].astype("float32"), label=frame[schema.LABEL])
            self.position += 1
            return True

        def reset(self) -> None:
            self.position = 0

    imported = time.perf_counter()
    params = {**train.PARAMS, "device": "cuda"}
    with xgboost.config_context(use_cuda_async_pool=True):
        dtrain = xgboost.QuantileDMatrix(Files(train_files))
        dtest = xgboost.QuantileDMatrix(Files(test_files), ref=dtrain)
        built = time.perf_counter()
        history: dict = {}
        xgboost.train(params, dtrain, num_boost_round=args.rounds,
                      evals=[(dtrain, "train"), (dtest, "test")], evals_result=history,
                      verbose_eval=False)
        done = time.perf_counter()
    result = {"imports": imported - started, "matrix": built - imported,
              "training": done - built, "auc": float(history["test"]["auc"][-1]),
              "train_rows": int(dtrain.num_row()), "test_rows": int(dtest.num_row())}
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
    return result


if __name__ == "__main__":
    main()
