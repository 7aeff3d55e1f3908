"""The RAPIDS mortgage notebook in one file: Fannie Mae loans -> features -> XGBoost on Dask.

    python examples/mortgage_xgboost.py                       # the real 2007Q3 sample
    python examples/mortgage_xgboost.py --data DIR --device gpu

Reads the classic layout (``Performance_*``, ``Acquisition_*`` files, ``names.csv``) with dask's
own ``read_csv``: cuDF partitions on GPUs, pandas ones on CPUs, by dask's ``dataframe.backend``
setting; every step below runs on either. A file is a partition: a loan's months are all in one
performance file, so its label needs no shuffle. The label ``delinquency_12`` of a month is 1
when within it and the next eleven the loan is more than 90 days behind or its balance is 0
(the notebook's per-loan ``ever_*`` and ``delinquency_*`` columns are left out: it drops them
before training). ``python -m examples.mortgage`` is the full application, same definitions.
"""

import argparse
import glob
import os
import re
import time

import dask
import dask.dataframe as dd
from distributed import Client, LocalCluster

from dask_gpu_interop import (
    GPUMemoryPlugin,
    cluster_workers,
    memory_report,
    resolve_device,
    without_work_stealing,
    xgboost_config,
)

SAMPLE = os.path.join(os.path.dirname(__file__), "mortgage", "data", "2007Q3-sample")
PERFORMANCE = """loan_id monthly_reporting_period servicer interest_rate current_actual_upb
    loan_age remaining_months_to_legal_maturity adj_remaining_months_to_maturity maturity_date msa
    current_loan_delinquency_status mod_flag zero_balance_code zero_balance_effective_date
    last_paid_installment_date foreclosed_after disposition_date foreclosure_costs
    prop_preservation_and_repair_costs asset_recovery_costs misc_holding_expenses holding_taxes
    net_sale_proceeds credit_enhancement_proceeds repurchase_make_whole_proceeds
    other_foreclosure_proceeds non_interest_bearing_upb principal_forgiveness_upb
    repurchase_make_whole_proceeds_flag foreclosure_principal_write_off_amount
    servicing_activity_indicator""".split()
ACQUISITION = """loan_id orig_channel seller_name orig_interest_rate orig_upb orig_loan_term
    orig_date first_pay_date orig_ltv orig_cltv num_borrowers dti borrower_credit_score
    first_home_buyer loan_purpose property_type num_units occupancy_status property_state zip
    mortgage_insurance_percent product_type coborrow_credit_score mortgage_insurance_type
    relocation_mortgage_indicator""".split()
DROPPED = """loan_id monthly_reporting_period seller_name orig_date first_pay_date maturity_date
    last_paid_installment_date zero_balance_effective_date foreclosed_after disposition_date"""
FEATURES = [c for c in PERFORMANCE + ACQUISITION[1:] if c not in DROPPED.split()]  # 45
LABEL = "delinquency_12"
# Codes of categories: a value's position in its list; outside the list, its length; blank, -1.
VOCABULARIES = {c: v.split() for c, v in {
    "orig_channel": "B C R T", "first_home_buyer": "N U Y", "loan_purpose": "C P R U",
    "property_type": "CO CP MH PU SF", "occupancy_status": "I P S U", "product_type": "FRM",
    "zero_balance_code": "01 02 03 06 09 15 16 96 97 98", "property_state": """AK AL AR AZ CA
    CO CT DC DE FL GA GU HI IA ID IL IN KS KY LA MA MD ME MI MN MO MS MT NC ND NE NH NJ NM NV
    NY OH OK OR PA PR RI SC SD TN TX UT VA VI VT WA WI WV WY""",
    **dict.fromkeys(["mod_flag", "repurchase_make_whole_proceeds_flag",
                     "servicing_activity_indicator", "relocation_mortgage_indicator"], "N Y"),
}.items()}
# names.csv's sellers and their short names, for data without one (the shared sample).
SELLERS = dict(pair.strip().split("=") for pair in """BANK OF AMERICA, N.A.=Bank of America;
    WELLS FARGO BANK, N.A.=Wells Fargo; JPMORGAN CHASE BANK, NATIONAL ASSOCIATION=JP Morgan Chase;
    CITIMORTGAGE, INC.=Citi; GMAC MORTGAGE, LLC=GMAC; SUNTRUST MORTGAGE INC.=SunTrust;
    PNC BANK, N.A.=PNC; FLAGSTAR CAPITAL MARKETS CORPORATION=Flagstar; AMTRUST BANK=AmTrust;
    FIRST TENNESSEE BANK NATIONAL ASSOCIATION=First Tennessee; U.S. BANK N.A.=US Bank;
    QUICKEN LOANS INC.=Quicken; PROVIDENT FUNDING ASSOCIATES, L.P.=Provident;
    FIFTH THIRD BANK=Fifth Third; OTHER=Other""".split(";"))
# The notebook's parameters, its reg:linear objective made binary:logistic.
PARAMS = {"max_depth": 8, "max_leaves": 2**8, "alpha": 0.9, "eta": 0.1, "gamma": 0.1,
          "subsample": 1, "reg_lambda": 1, "scale_pos_weight": 2, "min_child_weight": 30,
          "grow_policy": "depthwise", "objective": "binary:logistic", "tree_method": "hist",
          "eval_metric": "auc"}


def quarter_files(data):
    """{quarter: (performance files, acquisition files)} under ``data``, and names.csv's path."""
    found = {}
    for path in sorted(glob.glob(os.path.join(data, "**", "*_????Q?*"), recursive=True)):
        if match := re.match(r"(Performance|Acquisition)_(\d{4}Q[1-4])", os.path.basename(path)):
            found.setdefault(match[2], ([], []))[match[1] == "Acquisition"].append(path)
    names = glob.glob(os.path.join(data, "**", "names.csv"), recursive=True)
    return dict(sorted(found.items())), (names[0] if names else None)


def vocabularies(names_csv):
    """Each categorical column's codes: {value: code}, the servicer's through names.csv."""
    names = SELLERS
    if names_csv:
        with open(names_csv, encoding="utf-8") as f:
            lines = f.read().splitlines()[1:]  # a header line, then "seller name|short name"
        names = {k.strip(): v.strip() for k, v in (line.split("|") for line in lines if line)}
    short = sorted(set(names.values()))
    servicer = {n: short.index(s) for n, s in ({s: s for s in short} | names).items()}
    return {"servicer": servicer, **{c: {v: i for i, v in enumerate(values)}
                                     for c, values in VOCABULARIES.items()}}


def codes(series, vocabulary):
    """A column of categories as their codes (see VOCABULARIES), on pandas or cuDF."""
    size = len(set(vocabulary.values()))
    return series.map(vocabulary).fillna(size).where(series.notna(), -1)


def feature_table(part, vocabulary):
    """One partition of performance rows joined to their acquisition fields -> the loan id, the
    45 features as float32 (missing: -1) and the label as int32, rows in (loan, month) order."""
    period = part["monthly_reporting_period"]  # MM/DD/YYYY or MM/YYYY
    month = period.str.slice(-4).astype("int32") * 12 + period.str.slice(0, 2).astype("int32") - 1
    part = part.assign(month=month).sort_values(["loan_id", "month"])
    status, upb = part["current_loan_delinquency_status"], part["current_actual_upb"]
    bad = (status > 3).fillna(False) | (upb == 0).fillna(False)  # a blank is neither
    # each row's next bad row, this one or later: the loan's own when the loan ids agree
    next_month, next_loan = part["month"].where(bad).bfill(), part["loan_id"].where(bad).bfill()
    soon = ((next_loan == part["loan_id"]) & (next_month - part["month"] < 12)).fillna(False)
    columns = {c: codes(part[c], vocabulary[c]) if c in vocabulary else part[c] for c in FEATURES}
    table = part[["loan_id"]].assign(**columns).astype(dict.fromkeys(FEATURES, "float32"))
    return table.fillna(-1).assign(**{LABEL: soon.astype("int32")})


def quarter_table(perf_files, acq_files, vocabulary):
    """A quarter's feature table: dask's read_csv (cuDF or pandas by dask's backend setting),
    a partition per file, each joined to the quarter's acquisition rows (one partition)."""
    def read(paths, names):  # categories and dates as text, numbers as float64
        types = {"loan_id": "int64", "monthly_reporting_period": "str"}
        kept = {c: types.get(c, "str" if c in vocabulary else "float64") for c in names
                if c in types or c in FEATURES}
        return dd.read_csv(paths, sep="|", header=None, names=names, usecols=list(kept),
                           dtype=kept, na_values=["X", "XX"], blocksize=None)

    joined = read(perf_files, PERFORMANCE).merge(read(acq_files, ACQUISITION), how="left",
                                                 on="loan_id")
    meta = {"loan_id": "int64", **dict.fromkeys(FEATURES, "float32"), LABEL: "int32"}
    return joined.map_partitions(feature_table, vocabulary, meta=meta)


def spread(client, table, workers):
    """``table`` with partition i on ``workers[i % len(workers)]``, one at least each:
    xgboost.dask trains each worker on the partitions it holds."""
    table = table.repartition(npartitions=max(table.npartitions, len(workers)))
    placed = [client.compute(part, workers=[workers[i % len(workers)]],
                             allow_other_workers=False)
              for i, part in enumerate(table.to_delayed())]
    return dd.from_delayed(placed, meta=table._meta, verify_meta=False)


def start_cluster(device, workers):
    """dask-cuda's cluster (a worker per GPU), or one of processes with no GPU in sight."""
    if device == "gpu":
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(n_workers=workers)
    return LocalCluster(n_workers=workers or 2, env={"CUDA_VISIBLE_DEVICES": ""})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["gpu", "cpu", "auto"], default="auto")
    parser.add_argument("--data", default=SAMPLE, help="classic-layout files (default: a sample)")
    parser.add_argument("--holdout", help="the quarter to test on (default: the latest)")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--workers", type=int, help="default: a GPU each, or 2 processes")
    args = parser.parse_args(argv)
    quarters, names_csv = quarter_files(args.data)
    if not quarters or any(not perf or not acq for perf, acq in quarters.values()):
        parser.error(f"--data {args.data}: give a folder of classic-layout files, Performance_"
                     "YYYYQn* and Acquisition_YYYYQn* of each quarter (unpacked)")
    holdout = args.holdout or max(quarters)
    if holdout not in quarters:
        parser.error(f"--holdout {holdout}: the data has quarters {', '.join(quarters)}")
    try:
        device = resolve_device(args.device)
    except RuntimeError as err:  # no GPU, or no GPU stack
        parser.error(str(err))
    backend = {"dataframe.backend": "cudf" if device == "gpu" else "pandas"}
    with (dask.config.set(backend), start_cluster(device, args.workers) as cluster,
          Client(cluster) as client):
        # one memory pool on each GPU that cuDF, CuPy and XGBoost share (CPU workers: nothing)
        client.register_plugin(GPUMemoryPlugin(async_alloc=True))
        auc = run(client, device, quarters, holdout, vocabularies(names_csv), args.rounds)
        print(memory_report(client))
    return auc


def run(client, device, quarters, holdout, vocabulary, rounds):
    """The feature tables, then XGBoost trained on them; the test AUC."""
    import xgboost
    from xgboost import dask as dxgb

    started = time.perf_counter()
    tables = {q: quarter_table(*files, vocabulary) for q, files in quarters.items()}
    test = tables.pop(holdout)
    if tables:
        train = dd.concat(list(tables.values()))
    else:  # one quarter: every fifth loan held out
        held = test["loan_id"] % 5 == 0
        train, test = test[~held], test[held]
    train, test = dask.persist(train, test)
    rows = dask.compute(train.shape[0], test.shape[0])
    print(f"features: {rows[0]:,} training rows, {rows[1]:,} test rows ({holdout}) in "
          f"{time.perf_counter() - started:.2f} s on {device}")
    started = time.perf_counter()
    # the workers in the order of their XGBoost ranks, which go by the workers' names
    workers = cluster_workers(client)
    ranked = sorted(workers, key=lambda a: f"[xgboost.dask-{workers[a]['name']}]:{a}")
    with xgboost.config_context(**xgboost_config(client)):  # XGBoost in the workers' pool
        # no task moves to another worker: each trains on the partitions placed there
        with without_work_stealing(client):
            train, test = spread(client, train, ranked), spread(client, test, ranked)
            dtrain = dxgb.DaskQuantileDMatrix(client, train[FEATURES], train[LABEL])
            dtest = dxgb.DaskQuantileDMatrix(client, test[FEATURES], test[LABEL], ref=dtrain)
        params = {**PARAMS, "device": "cuda" if device == "gpu" else "cpu"}
        output = dxgb.train(client, params, dtrain, num_boost_round=rounds,
                            evals=[(dtest, "test")], verbose_eval=False)
    auc = output["history"]["test"]["auc"][-1]
    print(f"training: {rounds} rounds in {time.perf_counter() - started:.2f} s; test AUC {auc:.4f}")
    return auc


if __name__ == "__main__":
    main()
