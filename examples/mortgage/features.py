"""The classic notebook's transformations, on one partition: pandas or cuDF through the same
code, except where cuDF's general operations cost most on a GPU (the per-loan features and the
float32 feature columns), which CuPy kernels do; the GPU tests compare both exactly.

Every loan is whole inside one partition (the reader splits files at loan boundaries), so the
per-loan features and the forward-looking label need no shuffle between workers.

The label: for a row at month T, ``delinquency_12`` is 1 when among the loan's rows in months
T..T+11 the delinquency status exceeds 3 or the unpaid balance is exactly 0. The notebook
computes it with twelve group-by passes over shifted windows; here one reverse running
minimum gives, for every row, the month of the loan's next "bad" row, in one pass (on the
GPU, one thread per row looks at the loan's rows of the next twelve months).
"""

from __future__ import annotations

import functools

from . import schema
from .backend import array_module
from .stages import stage

_LOAN_SHIFT = 2**20  # month numbers (year * 12 + month) are far below 2**20
_NEVER = 2**62
STATUS = "current_loan_delinquency_status"
PERIOD = "monthly_reporting_period"


def _on_device(data) -> bool:
    """Whether ``data`` (a frame or a column) is cuDF's."""
    return type(data).__module__.startswith("cudf")


def _bad(perf):
    """Rows that make the label 1 for the twelve months that end with them."""
    # filled: a blank balance is not 0, and cuDF's | would propagate the null
    balance = filled(perf["current_actual_upb"], -1)
    return (perf[STATUS] > schema.LABEL_STATUS_ABOVE) | (balance == 0)


def _sorted_by_loan_and_month(frame) -> bool:
    """True when rows are in strictly increasing (loan, month) order (as in the real files)."""
    if len(frame) < 2:
        return True
    if _on_device(frame):  # CuPy on the columns: cuDF's diff and checks cost more than this
        loan, month = _ids(frame["loan_id"], -1), frame[PERIOD].values
        later = (loan[1:] > loan[:-1]) | ((loan[1:] == loan[:-1]) & (month[1:] > month[:-1]))
        return bool(later.all())
    loan = frame["loan_id"].diff().iloc[1:]
    month = frame[PERIOD].diff().iloc[1:]
    return bool(((loan > 0) | ((loan == 0) & (month > 0))).all())


def performance_features(perf):
    """Add ever_30/90/180 (int8), delinquency_30/90/180 (first month at 30/90/180+ days behind,
    a float32 month number, missing when never) and the label delinquency_12 (int8)."""
    with stage("order"):
        work = perf.reset_index(drop=True)
        in_order = _sorted_by_loan_and_month(work)
        if not in_order:  # bad rows last among equal (loan, month), so that the rows before
            work = work.assign(_bad=_bad(work).astype("int8"))  # them see them
            work = work.sort_values(["loan_id", PERIOD, "_bad"]).drop(columns="_bad")
    with stage("label"):
        status = work[STATUS]
        label, run = (_label_on_device if _on_device(work) else _label)(work)

    with stage("per loan"):
        per_loan = _per_loan(work, status, run)
    for name, values in per_loan.items():  # work is this function's own frame: no copy
        work[name] = values
    work[schema.LABEL] = label.astype("int8")
    if not in_order:
        work = work.sort_index()
    return work


def _label(work):
    """(label as booleans, each row's loan's place among the chunk's loans: 0, 1, ...) of rows
    in (loan, month) order: one reverse running minimum of "loan, month of a bad row"."""
    month = work[PERIOD].astype("int64")
    new_loan = filled(work["loan_id"].diff(), 1) != 0
    run = new_loan.astype("int64").cumsum()  # 1, 2, ...: the loan's place in the chunk
    key = run * _LOAN_SHIFT + month
    next_bad = key.where(_bad(work), _NEVER).iloc[::-1].cummin().iloc[::-1]
    label = (next_bad.values - key.values) < schema.LABEL_WINDOW
    return label, run.values - 1


_LABEL_SOURCE = r"""
extern "C" __global__ void label_rows(
        const long long* loan, const int* month, const int* status, const double* balance,
        signed char* label, const long long rows, const int status_above, const int window) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows) return;
    const long long id = loan[i];
    const int last = month[i] + window;  // rows in (loan, month) order: look ahead, not back
    signed char bad = 0;
    for (long long j = i; j < rows && loan[j] == id && month[j] < last; ++j) {
        if (status[j] > status_above || balance[j] == 0.0) { bad = 1; break; }
    }
    label[i] = bad;
}
"""


@functools.cache
def _label_kernel():
    import cupy

    return cupy.RawKernel(_LABEL_SOURCE, "label_rows")


def _label_on_device(work):
    """``_label`` on a cuDF frame, by one CUDA thread per row that looks at the loan's rows of
    the next twelve months (at most a dozen in the real files' monthly rows): 1.6 ms for a
    0.9 GiB chunk on an H200, where cuDF's scans and shifts took 10.5 ms
    (benchmarks/results/mortgage-stages-gpu-dense-variants2-1xH200.md)."""
    import cupy
    import numpy as np

    loan = _ids(work["loan_id"], -1)
    rows = len(loan)
    new_loan = cupy.ones(rows, dtype=cupy.int64)
    if rows > 1:
        new_loan[1:] = loan[1:] != loan[:-1]
    run = cupy.cumsum(new_loan) - 1
    month = work[PERIOD].values.astype(cupy.int32, copy=False)
    status = filled(work[STATUS], schema.MISSING).values.astype(cupy.int32, copy=False)
    balance = filled(work["current_actual_upb"], -1).values.astype(cupy.float64, copy=False)
    label = cupy.empty(rows, dtype=cupy.int8)
    if rows:
        threads = 256
        _label_kernel()(((rows + threads - 1) // threads,), (threads,),
                        (loan, month, status, balance, label, np.int64(rows),
                         np.int32(schema.LABEL_STATUS_ABOVE), np.int32(schema.LABEL_WINDOW)))
    return label.view(cupy.bool_), run


def _per_loan(work, status, run) -> dict:
    """ever_* and delinquency_* of every row: one group-by over the loans, then each loan's
    values gathered to its rows (``run``: the loan's place among the chunk's sorted loans)."""
    if _on_device(work):
        return _per_loan_on_device(work, status, run)
    months = {f"_m{name}": work[PERIOD].where(status >= threshold)
              for name, threshold in schema.THRESHOLDS.items()}
    frame = work[["loan_id"]].assign(_worst=status, **months)
    aggregations = {"_worst": "max", **{name: "min" for name in months}}
    loans = frame.groupby("loan_id", sort=True).agg(aggregations)  # in the rows' loan order
    del frame, months
    out = {}
    for name, threshold in schema.THRESHOLDS.items():
        out[f"ever_{name}"] = (loans["_worst"] >= threshold).astype("int8")
    for name in schema.THRESHOLDS:
        out[f"delinquency_{name}"] = loans[f"_m{name}"].astype("float32")
    return {name: values.take(run).reset_index(drop=True) for name, values in out.items()}


def _per_loan_on_device(work, status, run) -> dict:
    """``_per_loan`` on cuDF frames with CuPy: each loan's worst status and first month at
    each threshold by atomic max/min into one slot per loan (``run``), gathered back to the
    rows: the loans already have their slots, so nothing is sorted or hashed."""
    import cudf
    import cupy

    loans = int(run[-1]) + 1 if len(run) else 0
    status = filled(status, schema.MISSING).values.astype(cupy.int32, copy=False)
    month = work[PERIOD].values.astype(cupy.int32, copy=False)
    worst = cupy.full(loans, cupy.iinfo(cupy.int32).min, dtype=cupy.int32)
    cupy.maximum.at(worst, run, status)
    worst = worst[run]
    out = {f"ever_{name}": (worst >= threshold).astype(cupy.int8)
           for name, threshold in schema.THRESHOLDS.items()}
    never = cupy.iinfo(cupy.int32).max
    for name, threshold in schema.THRESHOLDS.items():
        first = cupy.full(loans, never, dtype=cupy.int32)
        cupy.minimum.at(first, run, cupy.where(status >= threshold, month, never))
        first = first[run]
        months = cupy.where(first == never, cupy.nan, first.astype(cupy.float32))
        out[f"delinquency_{name}"] = cudf.Series(months, nan_as_null=True)  # as the group-by's
    return out


def join_acquisition(perf, acq):
    """Each performance row with its loan's acquisition fields (missing when there are none);
    rows keep their order (a hash join may not)."""
    perf = perf.reset_index(drop=True).reset_index()  # the row number as column "index"
    joined = perf.merge(acq, on="loan_id", how="left")
    return joined.sort_values("index").drop(columns="index").reset_index(drop=True)


def last_mile(frame):
    """The feature table: the 45 features as float32 (missing: -1), the label as int32."""
    out = frame[list(schema.FEATURES)].astype("float32")
    out = out.fillna(schema.MISSING)
    out = out.where(out == out, schema.MISSING)  # NaN as well as null (cuDF keeps both)
    out[schema.LABEL] = frame[schema.LABEL].astype("int32")
    return out


def feature_table(perf, acq):
    """``last_mile(join_acquisition(perf, acq))``, built one column at a time.

    The wide joined frame never exists. ``perf`` is consumed: each of its columns is popped and
    written as a float32 array in one pass (one kernel on the GPU), so that (when nothing else
    holds ``perf``) its memory comes back as the table grows. Acquisition features are
    converted on the small acquisition frame into one block, then gathered to the rows by a
    single ``take``.
    """
    with stage("rows"):
        at = _acquisition_rows(perf["loan_id"], acq)
    xp = array_module(at)
    out = {}
    with stage("performance columns"):
        names = [name for name in schema.FEATURES if name in perf.columns]
        for start in range(0, len(names), CLEAN_GROUP):
            group = names[start:start + CLEAN_GROUP]
            columns = [perf.pop(name) for name in group]
            outs = [xp.empty(len(perf), dtype=xp.float32) for _ in group]
            _clean_columns(columns, outs)
            del columns
            out.update(zip(group, outs, strict=True))
        label = perf.pop(schema.LABEL).astype("int32").values
    with stage("acquisition columns"):
        names = [name for name in schema.FEATURES if name not in out]
        block = xp.empty((len(names), len(acq) + 1), dtype=xp.float32)
        _clean_columns([acq[name] for name in names], [block[i, : len(acq)]
                                                        for i in range(len(names))])
        block[:, len(acq)] = schema.MISSING  # the row of loans without an acquisition row
        gathered = xp.take(block, at, axis=1)  # C order: each feature's row is contiguous
        del block
        out.update(zip(names, gathered, strict=True))
    out = {name: out[name] for name in schema.FEATURES}
    out[schema.LABEL] = label
    if _on_device(perf):
        # No NaN is left: spare cuDF the NaN count (a reduction and a device sync) it runs on
        # every float array it is given (measured on a 293 MiB chunk: table 59 -> 37 ms).
        # Views made with pylibcudf were not faster than this constructor (2.1 vs 2.3 ms for
        # the 46 columns of a 0.9 GiB chunk: mortgage-stages-gpu-dense-variants2-1xH200.md).
        return type(perf)(out, nan_as_null=False)
    return type(perf)(out)


# Performance columns cleaned per kernel launch: their float32 copies are made a few at a time,
# each group's columns freed after it, so the table never holds all inputs and outputs at once.
CLEAN_GROUP = 8


def _clean_columns(columns: list, outs: list) -> None:
    """Write each feature column into its float32 array of ``outs``, missing (null or NaN) as
    -1. On the GPU one kernel does a whole group, reading each column's values and null mask
    where they lie: a kernel, a fill and cuDF's checks per column took 20.5 ms for a 0.9 GiB
    chunk's performance columns, one kernel per group 3.7 ms on an H200
    (benchmarks/results/mortgage-stages-gpu-dense-1xH200.md)."""
    if outs and type(outs[0]).__module__.startswith("cupy"):
        _clean_on_device(columns, outs)
        return
    for column, out in zip(columns, outs, strict=True):
        _clean_into(column, out)


def _clean_into(column, out):
    """One column into the NumPy float32 array ``out``, missing (null or NaN) as -1."""
    import numpy as np

    if isinstance(column.dtype, np.dtype):
        values = column.to_numpy()  # no copy
    else:  # pandas' nullable types: NA as NaN
        values = column.to_numpy(dtype=np.float32, na_value=np.nan)
    out[...] = values
    np.putmask(out, np.isnan(out), schema.MISSING)
    return out


# The column types the reader and the features make, as the kernel reads them.
_DEVICE_TYPES = {"float64": (0, "double"), "float32": (1, "float"), "int64": (2, "long long"),
                 "int32": (3, "int"), "int16": (4, "short"), "int8": (5, "signed char")}
_CLEAN_SOURCE = r"""
extern "C" __global__ void clean_features(
        const unsigned long long* heads, const unsigned long long* masks,
        const long long* offsets, const int* types, float* const* outs, const long long rows) {
    const int c = blockIdx.y;
    const unsigned long long head = heads[c];
    const unsigned int* mask = (const unsigned int*)masks[c];
    const long long offset = offsets[c];
    const int type = types[c];
    float* out = outs[c];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < rows;
         i += (long long)gridDim.x * blockDim.x) {
        const long long at = offset + i;
        bool missing = mask != 0 && !((mask[at >> 5] >> (at & 31)) & 1u);
        float y = 0.0f;
        if (!missing) {
            CASES
        }
        out[i] = missing ? MISSING_VALUE : y;
    }
}
"""


@functools.cache
def _clean_kernel():
    import cupy

    cases = "\n".join(
        f"if (type == {code}) {{ const {ctype} x = (({ctype} const*)head)[at]; "
        f"missing = x != x; y = (float)x; }}" for code, ctype in _DEVICE_TYPES.values())
    source = _CLEAN_SOURCE.replace("CASES", cases).replace(
        "MISSING_VALUE", f"{float(schema.MISSING)}f")
    return cupy.RawKernel(source, "clean_features")


def _clean_on_device(columns: list, outs: list) -> None:
    import cupy
    import numpy as np

    rows = len(outs[0])
    if any(len(column) != rows or len(out) != rows for column, out in zip(columns, outs,
                                                                          strict=True)):
        raise ValueError("every column and output must have the same length")
    views, heads, masks, offsets, types = [], [], [], [], []
    for column in columns:
        if str(column.dtype) not in _DEVICE_TYPES:
            raise TypeError(f"{column.name}: a {column.dtype} column is not a feature type "
                            f"({', '.join(_DEVICE_TYPES)})")
        view = column.to_pylibcudf()[0]
        views.append(view)  # alive until the kernel is queued
        mask = view.null_mask()
        heads.append(view.data().ptr if rows else 0)
        masks.append(mask.ptr if mask is not None and view.null_count() else 0)
        offsets.append(view.offset())
        types.append(_DEVICE_TYPES[str(column.dtype)][0])
    if not rows or not columns:
        return
    threads = 256
    blocks = min((rows + threads - 1) // threads, 4096)
    _clean_kernel()(
        (blocks, len(columns)), (threads,),
        (cupy.asarray(heads, dtype=cupy.uint64), cupy.asarray(masks, dtype=cupy.uint64),
         cupy.asarray(offsets, dtype=cupy.int64), cupy.asarray(types, dtype=cupy.int32),
         cupy.asarray([out.data.ptr for out in outs], dtype=cupy.uint64), np.int64(rows)))



def filled(column, value):
    """``column`` with its nulls as ``value`` (NaN stays NaN). On cuDF it goes straight to
    libcudf: cuDF's fillna first proves that the value fits the column, with reductions and
    a device sync each, about 2 ms a call on an H200 (a tenth of the feature table's time)."""
    if not _on_device(column):
        return column.fillna(value)
    import pylibcudf as plc

    values, metadata = column.to_pylibcudf()
    if not values.null_count():
        return column
    value = float(value) if column.dtype.kind == "f" else int(value)
    replaced = plc.replace.replace_nulls(values, plc.Scalar.from_py(value, values.type()))
    return type(column).from_pylibcudf(replaced, metadata)


def _ids(column, fill: int):
    """An int64 array of loan ids, nulls as ``fill``."""
    if _on_device(column):
        return filled(column, fill).astype("int64").values
    import numpy as np

    if isinstance(column.dtype, np.dtype):
        return column.to_numpy().astype(np.int64, copy=False)
    return column.to_numpy(dtype=np.int64, na_value=fill)


def _acquisition_rows(loan_id, acq):
    """For each performance row, the row of its loan in ``acq``; ``len(acq)`` for none (the
    first of equal ids when an id repeats)."""
    keys = _ids(loan_id, -1)
    xp = array_module(keys)
    ids = _ids(acq["loan_id"], -2)
    if len(ids) == 0:
        return xp.zeros(len(keys), dtype=xp.int64)
    order = xp.argsort(ids, kind="stable") if xp.__name__ == "numpy" else xp.argsort(ids)
    ordered = ids[order]
    at = xp.minimum(xp.searchsorted(ordered, keys), len(ids) - 1)
    return xp.where(ordered[at] == keys, order[at], len(ids))
