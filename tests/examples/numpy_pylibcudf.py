"""A stand-in for the few pylibcudf calls examples/mortgage/features_gpu.py makes, on NumPy.

It lets a machine without a GPU check that the pylibcudf code computes what features.py's
NumPy code does: each call follows libcudf's documented meaning (nulls included, where the
code relies on them), in a line or two of NumPy. The GPU tests run the real library.
"""

from __future__ import annotations

import enum
import sys
import types
import warnings

import numpy as np

TypeId = enum.Enum("TypeId", "BOOL8 INT8 INT32 INT64 FLOAT32 FLOAT64")
_NUMPY = {TypeId.BOOL8: np.bool_, TypeId.INT8: np.int8, TypeId.INT32: np.int32,
          TypeId.INT64: np.int64, TypeId.FLOAT32: np.float32, TypeId.FLOAT64: np.float64}


class DataType:
    def __init__(self, type_id):
        self._id = type_id

    def id(self):
        return self._id

    def __eq__(self, other):
        return isinstance(other, DataType) and other._id == self._id

    def __hash__(self):
        return hash(self._id)


def _type_of(dtype) -> DataType:
    return DataType(next(t for t, d in _NUMPY.items() if np.dtype(d) == np.dtype(dtype)))


class Scalar:
    def __init__(self, value, dtype: DataType):
        self.value, self._type = value, dtype

    @classmethod
    def from_py(cls, value, dtype):
        assert isinstance(value, {TypeId.BOOL8: bool, TypeId.FLOAT32: float,
                                  TypeId.FLOAT64: float}.get(dtype.id(), int)), (value, dtype)
        return cls(value, dtype)

    def type(self):
        return self._type

    def to_py(self):
        return self.value

    def is_valid(self):
        return True


class Column:
    def __init__(self, values, valid=None):
        self.values = np.asarray(values)
        self.valid = None if valid is None or valid.all() else np.asarray(valid, bool)

    @classmethod
    def from_array(cls, array):
        return cls(np.array(array))

    @classmethod
    def from_scalar(cls, scalar, size):
        return cls(np.full(size, scalar.value, _NUMPY[scalar.type().id()]))

    def size(self):
        return len(self.values)

    def type(self):
        return _type_of(self.values.dtype)

    def null_count(self):
        return 0 if self.valid is None else int((~self.valid).sum())

    def validity(self):
        return np.ones(len(self.values), bool) if self.valid is None else self.valid


class Table:
    def __init__(self, columns):
        self._columns = list(columns)

    def columns(self):
        return list(self._columns)

    def num_rows(self):
        return self._columns[0].size() if self._columns else 0


def _value(x):
    return x.value if isinstance(x, Scalar) else x.values


def _valid(x):
    return x.validity() if isinstance(x, Column) else True


_BINARY = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "EQUAL": np.equal,
           "NOT_EQUAL": np.not_equal, "LESS": np.less, "GREATER": np.greater,
           "GREATER_EQUAL": np.greater_equal, "LOGICAL_AND": np.logical_and,
           "LOGICAL_OR": np.logical_or}
BinaryOperator = enum.Enum("BinaryOperator", list(_BINARY))


def binary_operation(lhs, rhs, op, dtype):
    for side in (lhs, rhs):  # libcudf needs a scalar of the column's type
        assert isinstance(side, Column) or side.type() in (lhs.type(), rhs.type())
    out = _BINARY[op.name](_value(lhs), _value(rhs)).astype(_NUMPY[dtype.id()])
    return Column(out, np.broadcast_to(_valid(lhs) & _valid(rhs), out.shape))


def cast(column, dtype):
    return Column(column.values.astype(_NUMPY[dtype.id()]), column.valid)


def is_nan(column):
    return Column(np.isnan(column.values))


OutOfBoundsPolicy = enum.Enum("OutOfBoundsPolicy", "NULLIFY DONT_CHECK")


def gather(table, rows, policy):
    at = rows.values
    inside = (at >= 0) & (at < table.num_rows())
    if policy is OutOfBoundsPolicy.DONT_CHECK:
        assert inside.all(), "a gather out of bounds without NULLIFY"
    safe = np.where(inside, at, 0)
    return Table([Column(c.values[safe], c.validity()[safe] & inside) for c in table.columns()])


def scatter(source, rows, target):
    out = []
    for s, t in zip(source.columns(), target.columns(), strict=True):
        values, valid = t.values.copy(), t.validity().copy()
        values[rows.values], valid[rows.values] = s.values, s.validity()
        out.append(Column(values, valid))
    return Table(out)


def slice_(column, indices):
    return [Column(column.values[a:b], column.validity()[a:b])
            for a, b in zip(indices[::2], indices[1::2], strict=True)]


def copy_if_else(lhs, rhs, mask):
    pick = mask.values.astype(bool) & mask.validity()
    values = np.where(pick, _value(lhs), _value(rhs))
    return Column(values, np.where(pick, _valid(lhs), _valid(rhs)))


Order = enum.Enum("Order", "ASCENDING DESCENDING")
NullOrder = enum.Enum("NullOrder", "BEFORE AFTER")
NullEquality = enum.Enum("NullEquality", "EQUAL UNEQUAL")
NanEquality = enum.Enum("NanEquality", "ALL_EQUAL UNEQUAL")


def _keys(table):
    for column in table.columns():
        assert column.null_count() == 0, "the code sorts and searches columns without nulls"
    return [c.values for c in table.columns()]


def stable_sorted_order(table, orders, nulls):
    return Column(np.lexsort(_keys(table)[::-1]).astype(np.int32))


def lower_bound(haystack, needles, orders, nulls):
    (hay,), (need,) = _keys(haystack), _keys(needles)
    return Column(np.searchsorted(hay, need, side="left").astype(np.int32))


def contains(haystack, needles):
    return Column(np.isin(needles.values, haystack.values))


def clamp(column, low, high):
    return Column(np.clip(column.values, low.value, high.value), column.valid)


def replace_nulls(column, replacement):
    return Column(np.where(column.validity(), column.values, replacement.value))


ScanType = enum.Enum("ScanType", "INCLUSIVE EXCLUSIVE")


def _aggregation(name):
    return lambda: name


def reduce_(column, aggregation, dtype):
    return Scalar({"all": np.all, "any": np.any}[aggregation](column.values).item(), dtype)


def scan(column, aggregation, kind):
    assert aggregation == "sum" and kind is ScanType.INCLUSIVE
    return Column(np.cumsum(column.values).astype(column.values.dtype))


def sequence(size, init, step):
    return Column(init.value + step.value * np.arange(size, dtype=_NUMPY[init.type().id()]))


def repeat(table, count):
    return Table([Column(np.repeat(c.values, count)) for c in table.columns()])


def apply_retention_mask(table, mask):
    keep = mask.values.astype(bool) & mask.validity()
    return Table([Column(c.values[keep], c.validity()[keep]) for c in table.columns()])


def apply_boolean_mask(table, mask):  # its name before, deprecated as in cuDF 26
    warnings.warn("apply_boolean_mask is deprecated; use apply_retention_mask", FutureWarning,
                  stacklevel=2)
    return apply_retention_mask(table, mask)


def concatenate(columns):
    return Column(np.concatenate([c.values for c in columns]),
                  np.concatenate([c.validity() for c in columns]))


def make_empty_column(dtype):
    return Column(np.empty(0, _NUMPY[dtype.id()]))


def module() -> types.ModuleType:
    """The stand-in, as a module with pylibcudf's submodules."""
    plc = types.ModuleType("pylibcudf")
    plc.DataType, plc.TypeId, plc.Scalar, plc.Column, plc.Table = (
        DataType, TypeId, Scalar, Column, Table)
    parts = {
        "binaryop": {"BinaryOperator": BinaryOperator, "binary_operation": binary_operation},
        "unary": {"cast": cast, "is_nan": is_nan},
        "copying": {"OutOfBoundsPolicy": OutOfBoundsPolicy, "gather": gather,
                    "scatter": scatter, "slice": slice_, "copy_if_else": copy_if_else},
        "types": {"Order": Order, "NullOrder": NullOrder, "NullEquality": NullEquality,
                  "NanEquality": NanEquality},
        "search": {"lower_bound": lower_bound, "contains": contains},
        "sorting": {"stable_sorted_order": stable_sorted_order},
        "replace": {"clamp": clamp, "replace_nulls": replace_nulls},
        "reduce": {"reduce": reduce_, "scan": scan, "ScanType": ScanType},
        "aggregation": {name: _aggregation(name) for name in ("all", "any", "sum")},
        "filling": {"sequence": sequence, "repeat": repeat},
        "stream_compaction": {"apply_boolean_mask": apply_boolean_mask,
                              "apply_retention_mask": apply_retention_mask},
        "concatenate": {"concatenate": concatenate},
        "column_factories": {"make_empty_column": make_empty_column},
    }
    for name, members in parts.items():
        part = types.ModuleType(f"pylibcudf.{name}")
        part.__dict__.update(members)
        setattr(plc, name, part)
    return plc


def install(monkeypatch) -> types.ModuleType:
    """Put the stand-in in ``sys.modules`` as pylibcudf and return a fresh copy of
    examples.mortgage.features_gpu made with it, which ``from . import features_gpu`` finds;
    both go when the test ends."""
    import importlib.util

    import examples.mortgage

    name = "examples.mortgage.features_gpu"
    monkeypatch.setitem(sys.modules, "pylibcudf", module())
    spec = importlib.util.find_spec(name)
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    monkeypatch.setitem(sys.modules, name, fresh)
    monkeypatch.setattr(examples.mortgage, "features_gpu", fresh, raising=False)
    return fresh
