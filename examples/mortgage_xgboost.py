"""The RAPIDS mortgage notebook in one file: loans -> features -> XGBoost on Dask.
On the same files, ``python -m examples.mortgage`` gives the same table and test AUC."""

import argparse
import glob
import os
import re

import dask
import dask.dataframe as dd
import fsspec
import xgboost
from xgboost import dask as dxgb

import dask_gpu_interop

SAMPLE = os.path.join(os.path.dirname(__file__), "mortgage", "data", "2007Q3-sample")

PERFORMANCE = [  # the fields of a line, in order (the files have no header line)
    "loan_id", "monthly_reporting_period", "servicer", "interest_rate",
    "current_actual_upb", "loan_age", "remaining_months_to_legal_maturity",
    "adj_remaining_months_to_maturity", "maturity_date", "msa",
    "current_loan_delinquency_status", "mod_flag", "zero_balance_code",
    "zero_balance_effective_date", "last_paid_installment_date", "foreclosed_after",
    "disposition_date", "foreclosure_costs", "prop_preservation_and_repair_costs",
    "asset_recovery_costs", "misc_holding_expenses", "holding_taxes",
    "net_sale_proceeds", "credit_enhancement_proceeds",
    "repurchase_make_whole_proceeds", "other_foreclosure_proceeds",
    "non_interest_bearing_upb", "principal_forgiveness_upb",
    "repurchase_make_whole_proceeds_flag", "foreclosure_principal_write_off_amount",
    "servicing_activity_indicator",
]
ACQUISITION = [
    "loan_id", "orig_channel", "seller_name", "orig_interest_rate", "orig_upb",
    "orig_loan_term", "orig_date", "first_pay_date", "orig_ltv", "orig_cltv",
    "num_borrowers", "dti", "borrower_credit_score", "first_home_buyer", "loan_purpose",
    "property_type", "num_units", "occupancy_status", "property_state", "zip",
    "mortgage_insurance_percent", "product_type", "coborrow_credit_score",
    "mortgage_insurance_type", "relocation_mortgage_indicator",
]
# The 45 features: every column but the ids, the dates and the seller's name.
IDS = ["loan_id", "monthly_reporting_period", "seller_name", "foreclosed_after"]
FEATURES = [c for c in PERFORMANCE + ACQUISITION if c not in IDS and "_date" not in c]
LABEL = "delinquency_12"
CATEGORIES = {  # a category's code: its position in its list; else the list's length
    "orig_channel": ["B", "C", "R", "T"],
    "first_home_buyer": ["N", "U", "Y"],
    "loan_purpose": ["C", "P", "R", "U"],
    "property_type": ["CO", "CP", "MH", "PU", "SF"],
    "occupancy_status": ["I", "P", "S", "U"],
    "property_state": [
        "AK", "AL", "AR", "AZ", "CA", "CO", "CT", "DC", "DE", "FL", "GA", "GU", "HI",
        "IA", "ID", "IL", "IN", "KS", "KY", "LA", "MA", "MD", "ME", "MI", "MN", "MO",
        "MS", "MT", "NC", "ND", "NE", "NH", "NJ", "NM", "NV", "NY", "OH", "OK", "OR",
        "PA", "PR", "RI", "SC", "SD", "TN", "TX", "UT", "VA", "VI", "VT", "WA", "WI",
        "WV", "WY",
    ],
    "product_type": ["FRM"],
    "relocation_mortgage_indicator": ["N", "Y"],
    "mod_flag": ["N", "Y"],
    "zero_balance_code": ["01", "02", "03", "06", "09", "15", "16", "96", "97", "98"],
    "repurchase_make_whole_proceeds_flag": ["N", "Y"],
    "servicing_activity_indicator": ["N", "Y"],
}
SELLERS = {  # a servicer's code: its short name's place among names.csv's, or these
    "BANK OF AMERICA, N.A.": "Bank of America", "WELLS FARGO BANK, N.A.": "Wells Fargo",
    "JPMORGAN CHASE BANK, NATIONAL ASSOCIATION": "JP Morgan Chase", "OTHER": "Other",
    "PROVIDENT FUNDING ASSOCIATES, L.P.": "Provident", "CITIMORTGAGE, INC.": "Citi",
    "FLAGSTAR CAPITAL MARKETS CORPORATION": "Flagstar", "QUICKEN LOANS INC.": "Quicken",
    "GMAC MORTGAGE, LLC": "GMAC", "U.S. BANK N.A.": "US Bank", "PNC BANK, N.A.": "PNC",
    "SUNTRUST MORTGAGE INC.": "SunTrust", "FIFTH THIRD BANK": "Fifth Third",
    "FIRST TENNESSEE BANK NATIONAL ASSOCIATION": "First Tennessee",
    "AMTRUST BANK": "AmTrust",
}
PARAMS = {  # the notebook's, less XGBoost's defaults; reg:linear made logistic
    "objective": "binary:logistic", "eval_metric": "auc", "tree_method": "hist",
    "grow_policy": "depthwise", "max_depth": 8, "max_leaves": 2**8, "eta": 0.1,
    "gamma": 0.1, "alpha": 0.9, "min_child_weight": 30, "scale_pos_weight": 2,
}


def data_files(data):
    """{quarter: ([performance files], [acquisition files])}, and names.csv or None."""
    paths = []
    for pattern in data:  # folders (with all they hold), files, or globs of them
        for item in glob.glob(pattern) or [pattern]:
            paths += [item, *glob.glob(os.path.join(item, "**"), recursive=True)]
    quarters = {}
    seen = {}  # each data file by its name: a name met twice is a copy
    for path in sorted(set(filter(os.path.isfile, paths))):
        found = re.search(r"(Performance|Acquisition)_(\d{4}Q[1-4])[^/]*$", path)
        if not found:
            continue
        if seen.setdefault(name := os.path.basename(path), path) != path:
            raise ValueError(f"{path} and {seen[name]}: one file twice; give it once")
        columns = ACQUISITION if found[1] == "Acquisition" else PERFORMANCE
        with fsspec.open(path, "rb", compression="infer") as file:  # as read_csv will
            fields = file.readline(100_000).split(b"|")
        if len(fields) != len(columns) or not fields[0].isdigit():
            first = "Parquet" if fields[0].startswith(b"PAR1") else repr(fields[0][:30])
            raise ValueError(f"{path} starts with {first}, not {len(columns)} '|'-"
                             "separated fields: give the classic layout's files")
        quarters.setdefault(found[2], ([], []))[columns is ACQUISITION].append(path)
    names = sorted(p for p in paths if os.path.basename(p) == "names.csv")
    return dict(sorted(quarters.items())), (names[0] if names else None)


def vocabularies(names_csv):
    """Each category's {value: code}; the servicer's through names.csv."""
    names = SELLERS
    if names_csv:  # a header line, then lines of "seller name|short name"
        with open(names_csv, encoding="utf-8", errors="replace") as file:
            pairs = [line.split("|") for line in file.read().splitlines()[1:] if line]
        if not pairs or any(len(pair) != 2 for pair in pairs):
            raise ValueError(f"{names_csv}: give a header line, then a line 'seller "
                             "name|short name' for each seller ('|'-separated)")
        names = {seller.strip(): short.strip() for seller, short in pairs}
    shorts = sorted(set(names.values()))
    servicer = {name: shorts.index(names.get(name, name)) for name in [*names, *shorts]}
    return {"servicer": servicer, **{c: {v: i for i, v in enumerate(values)}
                                     for c, values in CATEGORIES.items()}}


def feature_table(part, vocabulary):
    """Rows joined to their loans -> loan id, 45 features (float32, missing: -1), label
    (int32): 1 if within 12 months the loan is over 90 days behind or its balance 0."""
    period = part["monthly_reporting_period"]  # MM/DD/YYYY or MM/YYYY
    year = period.str.slice(-4).astype("int32")
    month = year * 12 + period.str.slice(0, 2).astype("int32") - 1
    part = part.assign(month=month).sort_values(["loan_id", "month"])
    status = part["current_loan_delinquency_status"]
    bad = (status > 3).fillna(False) | (part["current_actual_upb"] == 0).fillna(False)
    # each row's next bad row (this one or later): the loan's, where the ids agree
    next_month = part["month"].where(bad).bfill()
    next_loan = part["loan_id"].where(bad).bfill()
    soon = (next_loan == part["loan_id"]) & (next_month - part["month"] < 12)
    columns = {c: part[c] for c in FEATURES}
    for c, codes in vocabulary.items():  # a category's code; others: len, blank: -1
        other = len(set(codes.values()))
        columns[c] = part[c].map(codes).fillna(other).where(part[c].notna(), -1)
    table = part[["loan_id"]].assign(**columns)
    table = table.astype(dict.fromkeys(FEATURES, "float32")).fillna(-1)
    return table.assign(**{LABEL: soon.fillna(False).astype("int32")})


def quarter_table(perf_files, acq_files, vocabulary):
    """A quarter's feature table, a partition per performance file."""
    types = {c: "str" if c in vocabulary else "float64" for c in FEATURES}
    types |= {"loan_id": "int64", "monthly_reporting_period": "str"}
    frames = []
    for paths, columns in [(perf_files, PERFORMANCE), (acq_files, ACQUISITION)]:
        used = {c: types[c] for c in columns if c in types}  # categories, dates: text
        # dask's read_csv, on cuDF or pandas by the backend setting; X: status unknown
        frames.append(dd.read_csv(paths, sep="|", header=None, names=columns,
                                  usecols=list(used), dtype=used, na_values=["X", "XX"],
                                  blocksize=None))  # a partition per file
    # the quarter's loans in one partition, joined to each performance partition
    loans = frames[1].repartition(npartitions=1)
    joined = frames[0].merge(loans, how="left", on="loan_id")
    meta = {"loan_id": "int64", **dict.fromkeys(FEATURES, "float32"), LABEL: "int32"}
    # the same function on every partition, pandas or cuDF
    return joined.map_partitions(feature_table, vocabulary, meta=meta)


def spread(client, table, workers):
    """``table``, partition i on worker i (modulo their number), one at least each."""
    table = table.repartition(npartitions=max(table.npartitions, len(workers)))
    # each partition computed (or moved) onto its worker, and kept there
    placed = [client.compute(part, workers=[workers[i % len(workers)]],
                             allow_other_workers=False)
              for i, part in enumerate(table.to_delayed())]
    # a dask frame of those partitions, where they are
    return dd.from_delayed(placed, meta=table._meta, verify_meta=False)


def run(client, device, quarters, vocabulary, rounds):
    """The feature tables, then XGBoost trained on them; the test AUC."""
    # dask's dataframes of cuDF partitions on GPUs, pandas ones on CPUs
    dask.config.set({"dataframe.backend": "cudf" if device == "gpu" else "pandas"})
    tables = {q: quarter_table(*files, vocabulary) for q, files in quarters.items()}
    test = tables.pop(max(quarters))  # the latest quarter is the test set
    train = dd.concat(list(tables.values())) if tables else None  # the others
    if not tables:  # one quarter: each partition's last fifth of rows is the test set
        train = test.map_partitions(lambda p: p.iloc[:len(p) - len(p) // 5])
        test = test.map_partitions(lambda p: p.iloc[len(p) - len(p) // 5:])
    # the workers in the order of their XGBoost ranks, no more than there are partitions
    workers = dask_gpu_interop.cluster_workers(client)
    ranked = sorted(workers, key=lambda a: f"[xgboost.dask-{workers[a]['name']}]:{a}")
    ranked = ranked[:train.npartitions]
    # XGBoost takes its memory from the workers' pools
    with xgboost.config_context(**dask_gpu_interop.xgboost_config(client)):
        # no task moves to another worker: each trains on the partitions placed there
        with dask_gpu_interop.without_work_stealing(client):
            train = spread(client, train, ranked)
            test = spread(client, test, ranked)
            # the rows, and the delinquent rows, of each set
            rows = dask.compute(train[LABEL].count(), train[LABEL].sum(),
                                test[LABEL].count(), test[LABEL].sum())
            print(f"features: {rows[0]:,} training rows, {rows[2]:,} test rows")
            if 0 in rows or rows[1] == rows[0] or rows[3] == rows[2]:
                raise SystemExit("the training or test rows hold one class only (the "
                                 "AUC needs both): give more loans")
            # XGBoost's matrices: each worker's rows, binned
            dtrain = dxgb.DaskQuantileDMatrix(client, train[FEATURES], train[LABEL])
            dtest = dxgb.DaskQuantileDMatrix(client, test[FEATURES], test[LABEL],
                                             ref=dtrain)  # binned as training's
        params = {**PARAMS, "device": "cuda" if device == "gpu" else "cpu"}
        # each worker trains on its matrices' rows; one model comes back
        output = dxgb.train(client, params, dtrain, num_boost_round=rounds,
                            evals=[(dtest, "test")], verbose_eval=False)
    auc = output["history"]["test"]["auc"][-1]
    print(f"training on {device}: {rounds} rounds; test AUC {auc:.4f}")
    return auc


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", help="folders, files or globs of the data")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--device", choices=["gpu", "cpu", "auto"], default="auto")
    local_or_started = parser.add_mutually_exclusive_group()
    local_or_started.add_argument("--workers", type=int, help="default: a GPU each")
    local_or_started.add_argument("--scheduler", help="a started cluster's address")
    args = parser.parse_args(argv)
    try:  # every bad input: one line saying what to change, before anything starts
        quarters, names_csv = data_files(args.data or [SAMPLE])
        vocabulary = vocabularies(names_csv)
    except ValueError as err:
        parser.error(str(err))
    if not quarters or not all(all(files) for files in quarters.values()):
        given = " ".join(args.data or ["not given, and no sample beside this file"])
        lacking = [q for q, f in quarters.items() if not all(f)] or ["any quarter"]
        parser.error(f"--data {given}: no pair of Performance_YYYYQn* and Acquisition_"
                     f"YYYYQn* files for {', '.join(lacking)}; give the classic layout")
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give 1 or more")
    try:
        with dask_gpu_interop.cluster_client(  # --scheduler's cluster, or a local one
                args.scheduler, device=args.device, n_workers=args.workers,
                memory={"async_alloc": True}) as (client, device):  # a pool a GPU
            auc = run(client, device, quarters, vocabulary, args.rounds)
            print(dask_gpu_interop.memory_report(client))  # each GPU's pool
    except dask_gpu_interop.ClusterError as err:  # no GPU, no scheduler there, ...
        parser.error(err.message(flags=""))
    return auc


if __name__ == "__main__":
    main()
