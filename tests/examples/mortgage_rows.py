"""What several of the mortgage tests use: the sample's rows as plain text fields, the sample in
the current layout, a table in one row order, a dataset with an acquisition row moved, a
generated dataset of one year."""

from __future__ import annotations

import glob
import os
import shutil

import dask
import pandas as pd

from examples.mortgage import files, schema
from examples.mortgage.testdata import generate as gen


def raw_lines(paths):
    rows = []
    for path in sorted(paths, key=files._natural):
        with open(path) as f:
            rows += [line.rstrip("\n").split("|") for line in f if line.strip()]
    return rows


def to_current_layout(perf_path, acq_path, out):
    """The real sample rewritten in the current layout, field by field (its columns are
    Fannie Mae's; the fields the classic files lack are blank)."""
    acq = {row[0]: row for row in raw_lines([acq_path])}
    where = {name: schema.CURRENT_COLUMNS.index(current)
             for name, current in schema.CURRENT_NAME.items()}
    lines = []
    for row in raw_lines([perf_path]):
        fields = [""] * len(schema.CURRENT_COLUMNS)
        values = dict(zip(schema.PERFORMANCE.names, row, strict=True))
        values.update(zip(schema.ACQUISITION.names[1:], acq[row[0]][1:], strict=True))
        for name, text in values.items():
            if schema.kind_of(name) in (schema.PERIOD, schema.DATE) and text:
                text = text[:2] + text[-4:]  # MM/DD/YYYY, MM/YYYY -> MMYYYY
            if name == "current_loan_delinquency_status" and text.isdigit():
                text = f"{int(text):02d}"
            fields[where[name]] = text
        lines.append("|".join(fields))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return str(out)


def sorted_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows in one order whatever the partitions: by every column."""
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def move_acquisition_row(source: str, target: str) -> tuple[int, int]:
    """A copy of the classic data at ``target`` whose first 2006Q2 loan has its acquisition
    row in 2006Q1's file instead; (that loan, its performance rows)."""
    shutil.copytree(source, target)
    q2 = os.path.join(target, "acq", "Acquisition_2006Q2.txt")
    with open(q2) as f:
        lines = f.readlines()
    with open(q2, "w") as f:
        f.writelines(lines[1:])
    with open(os.path.join(target, "acq", "Acquisition_2006Q1.txt"), "a") as f:
        f.write(lines[0])
    loan = lines[0].split("|", 1)[0]
    rows = sum(line.startswith(loan + "|")
               for path in glob.glob(os.path.join(target, "perf", "Performance_2006Q2*"))
               for line in open(path))
    return int(loan), rows


def generated_dataset(directory, loans_per_quarter: int):
    """``directory``, once it holds a generated dataset of 2007's loans made in this process."""
    with dask.config.set(scheduler="synchronous"):
        gen.generate(str(directory), gen.Spec(2007, 2007, loans_per_quarter=loans_per_quarter))
    return directory
