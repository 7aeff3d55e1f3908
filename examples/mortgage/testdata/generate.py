"""Test data: synthetic Fannie Mae loan files in either real layout, at any size.

The classic layout (``perf/Performance_*``, ``acq/Acquisition_*``, ``names.csv``) or the
current one (``2007Q3.csv``: one 108-column file per quarter, written in parts and joined), or
both from the same loans (``layout="both"``: ``classic/`` and ``current/``).

Every file is a pure function of (seed, quarter, part): one task writes one file, holding at
most one part's loans in memory, so 100 GB takes more tasks, not more memory, and the bytes do
not depend on how many workers ran them. The numbers follow the real data where it matters to
the pipeline and the model: rates by vintage, FICO/LTV/DTI distributions, ~15 sellers, 50+
states, amortizing balances (blank for the first six months), the servicer on the first row
only, delinquencies that cure, get modified, or end in foreclosure, prepayments driven by
rates, and a default risk that rises with low FICO, high LTV, high DTI and crisis vintages.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import math
import os
import shutil
import signal
import time
from dataclasses import dataclass, field

import numpy as np

from .. import output, schema

# pandas and pyarrow are imported by the functions that write text, so that the commands can
# build and check a Spec before the cluster starts without them.

# Average note rate of the loans Fannie Mae bought, by vintage year (approximate).
NOTE_RATE = {
    1999: 7.3, 2000: 8.1, 2001: 7.0, 2002: 6.5, 2003: 5.6, 2004: 5.7, 2005: 5.8, 2006: 6.5,
    2007: 6.5, 2008: 6.2, 2009: 5.1, 2010: 4.8, 2011: 4.6, 2012: 3.8, 2013: 4.0, 2014: 4.4,
    2015: 4.1, 2016: 3.9, 2017: 4.3, 2018: 4.7, 2019: 4.2, 2020: 3.3, 2021: 3.1, 2022: 5.0,
    2023: 6.8, 2024: 6.9, 2025: 6.7,
}
# Median original balance (anchors, interpolated) and the conforming loan limit.
MEDIAN_UPB = {1999: 105_000, 2003: 135_000, 2007: 170_000, 2010: 180_000, 2015: 200_000,
              2020: 250_000, 2025: 300_000}
LOAN_LIMIT = {1999: 240_000, 2000: 252_700, 2001: 275_000, 2002: 300_700, 2003: 322_700,
              2004: 333_700, 2005: 359_650, 2006: 417_000, 2017: 424_100, 2018: 453_100,
              2019: 484_350, 2020: 510_400, 2021: 548_250, 2022: 647_200, 2023: 726_200,
              2024: 766_550}
# Default risk of a vintage (underwriting and the house prices it met), and stress by year.
VINTAGE_RISK = {2003: 0.8, 2004: 1.1, 2005: 1.6, 2006: 2.2, 2007: 2.5, 2008: 1.6, 2009: 0.5,
                2014: 0.6}
STRESS = {2007: 1.3, 2008: 2.2, 2009: 2.8, 2010: 2.4, 2011: 1.8, 2012: 1.4, 2013: 1.1, 2020: 1.8}
REFI_YEARS = {2001, 2002, 2003, 2009, 2010, 2011, 2012, 2020, 2021}

SELLER_WEIGHTS = dict(zip(schema.SELLERS, [
    .20, .15, .08, .10, .05, .04, .04, .03, .02, .02, .04, .04, .02, .02, .15], strict=True))
# state: (share of loans in %, first and last 3-digit ZIP, metro area codes)
STATES = {
    "CA": (12, 900, 961, (31080, 41860, 40140, 41740, 40900)), "TX": (7, 750, 799, (19100, 26420, 12420, 41700)),
    "FL": (7, 320, 349, (33100, 45300, 36740, 27260)), "IL": (5, 600, 629, (16980,)),
    "NY": (4.5, 100, 149, (35620, 15380, 40380)), "PA": (4, 150, 196, (37980, 38300)),
    "NC": (3.2, 270, 289, (16740, 39580)), "MI": (3.2, 480, 499, (19820, 24340)),
    "GA": (3.1, 300, 319, (12060,)), "WA": (3, 980, 994, (42660, 44060)),
    "OH": (3, 430, 459, (17460, 18140, 17140)), "VA": (2.9, 220, 246, (47900, 47260)),
    "AZ": (2.9, 850, 865, (38060, 46060)), "WI": (2.7, 530, 549, (33340, 31540)),
    "NJ": (2.7, 70, 89, (35620, 37980)), "MA": (2.4, 10, 27, (14460, 49340)),
    "MO": (2.3, 630, 658, (41180, 28140)), "MD": (2.3, 206, 219, (12580, 47900)),
    "CO": (2.1, 800, 816, (19740, 17820)), "TN": (2.1, 370, 385, (34980, 32820)),
    "AL": (2, 350, 369, (13820,)), "MN": (2, 550, 567, (33460,)), "OR": (2, 970, 979, (38900,)),
    "IN": (1.8, 460, 479, (26900,)), "UT": (1.6, 840, 847, (41620,)),
    "SC": (1.5, 290, 299, (16700, 24860)), "KY": (1.1, 400, 427, (31140,)),
    "LA": (1.1, 700, 714, (35380,)), "CT": (1.0, 60, 69, (25540, 14860)),
    "OK": (0.9, 730, 749, (36420,)), "IA": (0.9, 500, 528, (19780,)),
    "NV": (0.9, 889, 898, (29820,)), "KS": (0.8, 660, 679, (48620,)), "AR": (0.6, 716, 729, ()),
    "MS": (0.5, 386, 397, ()), "NE": (0.5, 680, 693, (36540,)), "NM": (0.5, 870, 884, (10740,)),
    "ID": (0.5, 832, 838, (14260,)), "NH": (0.5, 30, 38, ()), "HI": (0.4, 967, 968, (46520,)),
    "ME": (0.4, 39, 49, ()), "MT": (0.3, 590, 599, ()), "DE": (0.3, 197, 199, ()),
    "RI": (0.3, 28, 29, (39300,)), "WV": (0.3, 247, 268, ()), "SD": (0.2, 570, 577, ()),
    "ND": (0.15, 580, 588, ()), "VT": (0.15, 50, 59, ()), "WY": (0.15, 820, 831, ()),
    "AK": (0.15, 995, 999, ()), "DC": (0.15, 200, 205, (47900,)), "PR": (0.1, 6, 9, ()),
    "GU": (0.02, 969, 969, ()), "VI": (0.01, 8, 8, ()),
}
assert set(STATES) == set(schema.STATES)

_PART_LOANS = 10_000
_LOAN_ID_BASE = 100_000_000_000
_QUARTER_IDS = MAX_LOANS_PER_QUARTER = 10_000_000  # loans per quarter at most


def _by_year(table: dict, year: int):
    """The table's value for ``year``: the latest anchor at or before it (or the first)."""
    keys = sorted(table)
    eligible = [k for k in keys if k <= year]
    return table[eligible[-1] if eligible else keys[0]]


def _interpolated(table: dict, year: float) -> float:
    keys = sorted(table)
    return float(np.interp(year, keys, [table[k] for k in keys]))


@dataclass(frozen=True)
class Spec:
    """What to generate. Validated when built; everything else derives from it."""

    first_year: int = 2006
    last_year: int = 2007
    loans_per_quarter: int = 1000
    seed: int = 0
    end_year: int | None = None  # last reporting year (through December); default last_year + 3
    loans_per_part: int = _PART_LOANS

    def __post_init__(self):
        if not 1999 <= self.first_year <= self.last_year <= 2025:
            raise ValueError(
                f"years {self.first_year}-{self.last_year}: give vintages within 1999-2025, "
                "first <= last"
            )
        if not 1 <= self.loans_per_quarter <= _QUARTER_IDS:
            raise ValueError(f"loans_per_quarter={self.loans_per_quarter}: 1 to {_QUARTER_IDS:,}")
        if self.loans_per_part < 1:
            raise ValueError(f"loans_per_part={self.loans_per_part}: must be at least 1")
        if self.end_year is not None and not self.last_year <= self.end_year <= 2030:
            raise ValueError(
                f"end_year={self.end_year}: the reporting must end between the last vintage "
                f"({self.last_year}) and 2030"
            )

    @property
    def end_month(self) -> int:
        year = self.end_year if self.end_year is not None else min(self.last_year + 3, 2030)
        return year * 12 + 11

    @property
    def quarters(self) -> list[tuple[int, int]]:
        return [(y, q) for y in range(self.first_year, self.last_year + 1) for q in range(1, 5)]

    @property
    def parts_per_quarter(self) -> int:
        return math.ceil(self.loans_per_quarter / self.loans_per_part)

    def part_loans(self, part: int) -> tuple[int, int]:
        first = part * self.loans_per_part
        return first, min(self.loans_per_quarter, first + self.loans_per_part)


# ---------------------------------------------------------------------------------------------
# Loans at acquisition


def _choice(rng, options: dict, size: int):
    keys = list(options)
    p = np.asarray([options[k] for k in keys], dtype=float)
    return np.asarray(keys, dtype=object)[rng.choice(len(keys), size=size, p=p / p.sum())]


def loans(spec: Spec, year: int, quarter: int, part: int) -> dict[str, np.ndarray]:
    """The acquisition fields of one part's loans, plus what the simulation needs."""
    first, stop = spec.part_loans(part)
    n = stop - first
    rng = np.random.default_rng([spec.seed, year, quarter, part, 0])
    quarter_index = (year - 1990) * 4 + quarter - 1
    loan_id = _LOAN_ID_BASE + quarter_index * _QUARTER_IDS + np.arange(first, stop)

    late = year >= 2009
    channel = _choice(rng, {"R": .5, "C": .3, "B": .2} if late else
                      {"C": .45, "R": .38, "B": .17}, n)
    seller = _choice(rng, SELLER_WEIGHTS, n)
    fico_shift = -8 if 2005 <= year <= 2008 else 18 if 2009 <= year <= 2013 else 10 if late else -4
    fico = np.clip(np.round(600 + 230 * rng.beta(2.6, 2.0, n) + fico_shift), 600, 830)
    ltv = np.round(17 + 80 * rng.beta(3.0, 1.4, n))
    spike, low = rng.random(n), 0.0
    for value, share in ((80, .28), (90, .06), (95, .06), (75, .05), (70, .03)):
        ltv = np.where((spike >= low) & (spike < low + share), value, ltv)
        low += share
    cltv = np.minimum(ltv + np.where(rng.random(n) < .15, rng.integers(5, 20, n), 0), 105)
    dti_shift = 2 if 2005 <= year <= 2008 else -3 if 2009 <= year <= 2013 else 0
    dti = np.clip(np.round(rng.normal(36 + dti_shift, 11, n)), 3, 64)
    dti = np.where(rng.random(n) < .03, np.nan, dti)
    borrowers = rng.choice([1, 2, 3, 4], size=n, p=[.47, .52, .008, .002])
    term = rng.choice([360, 180, 240, 120, 300], size=n, p=[.83, .11, .04, .01, .01])
    rate = (NOTE_RATE[min(max(year, 1999), 2025)] + rng.normal(0, .38, n)
            + .004 * (730 - fico) - .5 * (term <= 180))
    rate = np.clip(np.round(rate * 8) / 8, 2.0, 12.0)
    limit = _by_year(LOAN_LIMIT, year) * np.where(rng.random(n) < .02, 1.5, 1.0)
    upb = np.exp(rng.normal(np.log(_interpolated(MEDIAN_UPB, year)), .56, n))
    upb = np.clip(np.round(upb / 1000) * 1000, 15_000, np.floor(limit / 1000) * 1000)
    quarter_start = year * 12 + 3 * (quarter - 1)
    orig = quarter_start + rng.choice([-2, -1, 0, 1, 2], size=n, p=[.05, .18, .30, .27, .20])
    first_pay = orig + rng.choice([2, 1], size=n, p=[.9, .1])
    purpose = _choice(rng, {"P": .3, "C": .25, "R": .45} if year in REFI_YEARS else
                      {"P": .45, "C": .37, "R": .18}, n)
    fthb = np.where((purpose == "P") & (rng.random(n) < .27), "Y", "N").astype(object)
    fthb[rng.random(n) < .0003] = "U"
    ptype = _choice(rng, {"SF": .74, "PU": .14, "CO": .10, "MH": .013, "CP": .007}, n)
    units = rng.choice([1, 2, 3, 4], size=n, p=[.973, .021, .003, .003])
    occupancy = _choice(rng, {"P": .86, "I": .086, "S": .054}, n)
    state = _choice(rng, {s: v[0] for s, v in STATES.items()}, n)
    low = np.asarray([STATES[s][1] for s in state])
    high = np.asarray([STATES[s][2] for s in state])
    zip3 = low + np.floor(rng.random(n) * (high - low + 1)).astype(int)
    msa = np.asarray([_msa(s, z, u) for s, z, u in zip(state, zip3, rng.random(n), strict=True)], float)
    mi = np.select([ltv <= 80, ltv <= 85, ltv <= 90, ltv <= 95], [np.nan, 12, 25, 30], 35)
    mi = np.where((ltv > 80) & (ltv <= 85) & (rng.random(n) < .3), 6, mi)
    mi_type = np.where(np.isnan(mi), np.nan, np.where(rng.random(n) < .9, 1, 2))
    co_fico = np.clip(np.round(fico + rng.normal(0, 45, n)), 600, 830)
    co_fico = np.where((borrowers >= 2) & (rng.random(n) > .05), co_fico, np.nan)
    relocation = np.where(rng.random(n) < .006, "Y", "N").astype(object)

    risk = (-.025 * (fico - 730) + .045 * (ltv - 78) + .03 * np.nan_to_num(dti - 35)
            + np.log(_by_year(VINTAGE_RISK, year)) + .25 * (occupancy == "I")
            + .15 * (purpose == "C") + rng.normal(0, .3, n))
    servicer = np.where(rng.random(n) < .8, seller, _choice(rng, SELLER_WEIGHTS, n))
    return dict(
        loan_id=loan_id, orig_channel=channel, seller_name=seller, orig_interest_rate=rate,
        orig_upb=upb, orig_loan_term=term, orig_date=orig, first_pay_date=first_pay,
        orig_ltv=ltv, orig_cltv=cltv, num_borrowers=borrowers, dti=dti,
        borrower_credit_score=fico, first_home_buyer=fthb, loan_purpose=purpose,
        property_type=ptype, num_units=units, occupancy_status=occupancy, property_state=state,
        zip=zip3, mortgage_insurance_percent=mi, product_type=np.full(n, "FRM", dtype=object),
        coborrow_credit_score=co_fico, mortgage_insurance_type=mi_type,
        relocation_mortgage_indicator=relocation,
        # for the simulation only
        risk=risk, msa=msa, servicer=servicer,
    )


def _msa(state: str, zip3: int, u: float) -> float:
    metros = STATES[state][3]
    if u < .15:
        return 0.0
    if metros and u < .8:
        return float(metros[int((u - .15) / .65 * len(metros))])
    return float(10_000 + 20 * ((zip3 * 37) % 1950))


# ---------------------------------------------------------------------------------------------
# Monthly performance


def _payment_factor(rate: np.ndarray, n: np.ndarray) -> np.ndarray:
    r = rate / 1200
    return r / (1 - (1 + r) ** -np.maximum(n, 1))


def _after_payments(balance, rate, n, k):
    """The balance after ``k`` scheduled payments on a level-payment schedule of ``n`` left."""
    r = rate / 1200
    growth = (1 + r) ** k
    payment = balance * _payment_factor(rate, n)
    return np.maximum(balance * growth - payment * (growth - 1) / r, 0.0)


PREPAID, REPURCHASED, FORECLOSED, MATURED = 1, 2, 3, 4
FORECLOSURE_CODES = {"09": .65, "03": .25, "02": .10}


def simulate(spec: Spec, year: int, quarter: int, part: int, attrs: dict) -> dict[str, np.ndarray]:
    """One row per loan and reporting month, in (loan, month) order."""
    rng = np.random.default_rng([spec.seed, year, quarter, part, 1])
    n = attrs["loan_id"].size
    start = attrs["first_pay_date"] - 1  # the first reporting month, loan age 0
    balance = attrs["orig_upb"].astype(float).copy()
    rate = attrs["orig_interest_rate"].astype(float).copy()
    left = attrs["orig_loan_term"].astype(float).copy()  # scheduled payments left
    maturity = attrs["first_pay_date"] + attrs["orig_loan_term"] - 1
    status = np.zeros(n, dtype=np.int64)
    modified = np.zeros(n, dtype=bool)
    alive = np.ones(n, dtype=bool)
    risk = np.exp(attrs["risk"])
    rows: dict[str, list] = {k: [] for k in (
        "i", "month", "age", "status", "balance", "rate", "left", "maturity", "modified",
        "event", "active")}

    for month in range(int(start.min()), spec.end_month + 1):
        idx = np.flatnonzero(alive & (start <= month))
        if idx.size == 0:
            if month > start.max():
                break
            continue
        age = month - start[idx]
        calendar = month // 12
        d = status[idx]
        u = rng.random(idx.size)
        event = np.zeros(idx.size, dtype=np.int8)
        active = np.zeros(idx.size, dtype=bool)  # servicing activity this month
        seasoning = np.minimum(1.0, .25 + age / 24)
        p_dq = np.minimum(.25, .0018 * risk[idx] * STRESS.get(calendar, 1.0) * seasoning)
        market = NOTE_RATE[min(max(calendar, 1999), 2025)]
        p_pre = np.minimum(.1, .003 + .03 / (1 + np.exp(-3 * (rate[idx] - market - .6))))
        p_rep = .0002
        current, behind = (d == 0) & (age >= 1), (d >= 1) & (age >= 1)
        pays = np.zeros(idx.size, dtype=np.int64)  # scheduled payments made this month

        # current loans: prepay, repurchase, miss a payment, or pay
        prepay = current & (u < p_pre)
        repurchase = current & ~prepay & (u < p_pre + p_rep)
        miss = current & ~prepay & ~repurchase & (u < p_pre + p_rep + p_dq)
        pay = current & ~prepay & ~repurchase & ~miss
        event[prepay], event[repurchase] = PREPAID, REPURCHASED
        d = np.where(miss, 1, d)
        pays[pay] = 1

        # delinquent loans: cure (catch up), modification, foreclosure, roll or stay
        p_cure = np.select([d == 1, d == 2, d < 6], [.5, .3, .1], .04)
        p_mod = np.where(d >= 3, .06 if calendar >= 2009 else .01, 0.0)
        p_end = np.where(d >= 6, .05, 0.0) + np.where(d >= 48, 1.0, 0.0)
        p_roll = np.select([d == 1, d == 2], [.4, .55], .8)
        cure = behind & (u < p_cure)
        mod = behind & ~cure & (u < p_cure + p_mod)
        end = behind & ~cure & ~mod & (u < p_cure + p_mod + p_end)
        roll = behind & ~cure & ~mod & ~end & (u < p_cure + p_mod + p_end
                                               + (1 - p_cure - p_mod - p_end) * p_roll)
        pays[cure] = d[cure] + 1
        event[end] = FORECLOSED
        active[cure | mod] = True
        i_mod = idx[mod]
        if i_mod.size:
            rate[i_mod] = np.maximum(2.0, np.round((rate[i_mod] - rng.uniform(1, 3, i_mod.size))
                                                   * 8) / 8)
            left[i_mod] = 480
            maturity[i_mod] = month + 480
            modified[i_mod] = True
        d = np.where(cure | mod, 0, np.where(roll, d + 1, d))

        paying = pays > 0
        i_pay = idx[paying]
        k = np.minimum(pays[paying], left[i_pay])
        balance[i_pay] = np.round(_after_payments(balance[i_pay], rate[i_pay], left[i_pay], k), 2)
        left[i_pay] -= k
        matured = np.zeros(idx.size, dtype=bool)
        matured[paying] = left[i_pay] <= 0
        event[matured] = MATURED
        balance[idx[matured]] = 0.0
        status[idx] = d

        rows["i"].append(idx)
        rows["month"].append(np.full(idx.size, month))
        rows["age"].append(age)
        rows["status"].append(d.copy())
        rows["balance"].append(balance[idx].copy())
        rows["rate"].append(rate[idx].copy())
        rows["left"].append(left[idx].copy())
        rows["maturity"].append(maturity[idx].copy())
        rows["modified"].append(modified[idx].copy())
        rows["event"].append(event)
        rows["active"].append(active)
        alive[idx[event > 0]] = False

    out = {k: np.concatenate(v) if v else np.zeros(0) for k, v in rows.items()}
    order = np.lexsort((out["month"], out["i"]))
    return {k: v[order] for k, v in out.items()}


# ---------------------------------------------------------------------------------------------
# Writing the files


def _texts(values: list[str], numbers: np.ndarray, mask: np.ndarray | None = None):
    """A dictionary-encoded Arrow array: few distinct strings, written fast; blank where
    ``mask``."""
    import pyarrow as pa

    if mask is not None and not mask.any():
        mask = None
    return pa.DictionaryArray.from_arrays(
        pa.array(np.asarray(numbers).astype(np.int32), mask=mask),
        pa.array(values, type=pa.string()),
    )


def month_text(number: int, day: bool = False, compact: bool = False) -> str:
    """A month number as ``MM/YYYY``, ``MM/01/YYYY`` with ``day``, or the current layout's
    ``MMYYYY`` with ``compact`` (the inverse of ``schema.month_number``)."""
    year, month = divmod(int(number), 12)
    if compact:
        return f"{month + 1:02d}{year:04d}"
    return f"{month + 1:02d}/01/{year:04d}" if day else f"{month + 1:02d}/{year:04d}"


def _month_texts(months: np.ndarray, day: bool, mask: np.ndarray | None = None,
                 compact: bool = False):
    """Month numbers as ``MM/YYYY`` (or ``MM/01/YYYY``, or ``MMYYYY`` with ``compact``);
    blank where ``mask``."""
    months = np.asarray(months, dtype=np.int64)
    valid = months if mask is None else months[~mask]
    low = int(valid.min()) if valid.size else 0
    high = int(valid.max()) if valid.size else 0
    values = [month_text(m, day=day, compact=compact) for m in range(low, high + 1)]
    return _texts(values, np.clip(months - low, 0, high - low), mask)


def _codes(strings: np.ndarray, vocabulary: list[str] | None = None):
    """Strings (None: blank) as a dictionary array; every value must be in ``vocabulary``."""
    import pandas as pd
    import pyarrow as pa

    return pa.array(pd.Categorical(strings, categories=vocabulary))


def _floats(values: np.ndarray):
    import pyarrow as pa

    values = np.asarray(values, dtype=float)
    nan = np.isnan(values)
    return pa.array(values, mask=nan if nan.any() else None)


def _ints(values: np.ndarray):
    import pyarrow as pa

    values = np.asarray(values, dtype=float)
    nan = np.isnan(values)
    return pa.array(np.nan_to_num(values).astype(np.int64), mask=nan if nan.any() else None)


def _whole_floats(values: np.ndarray, mask: np.ndarray | None = None):
    """Integral values written the way the real files do ("360.0")."""
    values = np.asarray(values, dtype=np.int64)
    low = int(values.min()) if values.size else 0
    high = int(values.max()) if values.size else 0
    return _texts([f"{v}.0" for v in range(low, high + 1)], values - low, mask)


def _write(table_columns: dict, sink, mode: str = "wb") -> int:
    """Write the columns as pipe-delimited text to ``sink`` (a path or a file); bytes written."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    table = pa.table(table_columns)
    if not isinstance(sink, str):
        before = sink.tell()
        if table.num_rows:
            pacsv.write_csv(table, sink, pacsv.WriteOptions(
                include_header=False, delimiter="|", quoting_style="none"))
        return sink.tell() - before
    with open(sink, mode) as f:
        return _write(table_columns, f)


def acquisition_columns(attrs: dict, compact: bool = False) -> dict:
    zip_text = np.asarray([f"{z:03d}" for z in range(1000)], dtype=object)
    return {
        "loan_id": attrs["loan_id"],
        "orig_channel": _codes(attrs["orig_channel"]),
        "seller_name": _codes(attrs["seller_name"]),
        "orig_interest_rate": _floats(attrs["orig_interest_rate"]),
        "orig_upb": _ints(attrs["orig_upb"]),
        "orig_loan_term": _ints(attrs["orig_loan_term"]),
        "orig_date": _month_texts(attrs["orig_date"], day=False, compact=compact),
        "first_pay_date": _month_texts(attrs["first_pay_date"], day=False, compact=compact),
        "orig_ltv": _ints(attrs["orig_ltv"]),
        "orig_cltv": _ints(attrs["orig_cltv"]),
        "num_borrowers": _ints(attrs["num_borrowers"]),
        "dti": _ints(attrs["dti"]),
        "borrower_credit_score": _ints(attrs["borrower_credit_score"]),
        "first_home_buyer": _codes(attrs["first_home_buyer"]),
        "loan_purpose": _codes(attrs["loan_purpose"]),
        "property_type": _codes(attrs["property_type"]),
        "num_units": _ints(attrs["num_units"]),
        "occupancy_status": _codes(attrs["occupancy_status"]),
        "property_state": _codes(attrs["property_state"]),
        "zip": _codes(zip_text[attrs["zip"]], [f"{z:03d}" for z in range(1000)]),
        "mortgage_insurance_percent": _ints(attrs["mortgage_insurance_percent"]),
        "product_type": _codes(attrs["product_type"]),
        "coborrow_credit_score": _ints(attrs["coborrow_credit_score"]),
        "mortgage_insurance_type": _ints(attrs["mortgage_insurance_type"]),
        "relocation_mortgage_indicator": _codes(attrs["relocation_mortgage_indicator"]),
    }


def performance_columns(attrs: dict, rows: dict, rng, compact: bool = False) -> dict:
    """The classic performance columns; ``compact``: dates as ``MMYYYY`` and statuses of two
    characters, as the current layout writes them (the same values, the same draws)."""
    import pandas as pd

    i, month, event = rows["i"], rows["month"], rows["event"]
    n = i.size
    first_row = np.ones(n, dtype=bool)
    first_row[1:] = i[1:] != i[:-1]
    terminal = event > 0
    foreclosed = event == FORECLOSED
    hidden = rows["age"] < 6  # the real files leave the balance blank for six months
    upb = np.where(hidden & ~terminal, np.nan, rows["balance"])
    codes = ["01", "02", "03", "06", "09"]
    code = np.zeros(n, dtype=np.int32)
    code[event == REPURCHASED] = codes.index("06")
    code[foreclosed] = rng.choice([codes.index(c) for c in FORECLOSURE_CODES],
                                  size=int(foreclosed.sum()), p=list(FORECLOSURE_CODES.values()))
    status = np.where(terminal, np.where(foreclosed, -1, -2), rows["status"])
    sellers = list(schema.SELLERS)
    servicer = pd.Categorical(attrs["servicer"], categories=sellers).codes[i]
    yes_no = ["N", "Y"]
    count = int(foreclosed.sum())
    base = rows["balance"][foreclosed]
    mi = ~np.isnan(attrs["mortgage_insurance_percent"][i[foreclosed]])

    def on_foreclosure(values, share=1.0):
        out = np.full(n, np.nan)
        out[foreclosed] = np.where(rng.random(count) < share, np.round(values, 2), np.nan)
        return _floats(out)

    return {
        "loan_id": attrs["loan_id"][i],
        "monthly_reporting_period": _month_texts(month, day=True, compact=compact),
        "servicer": _texts(sellers, servicer, ~first_row),
        "interest_rate": _floats(rows["rate"]),
        "current_actual_upb": _floats(upb),
        "loan_age": _whole_floats(rows["age"]),
        "remaining_months_to_legal_maturity": _whole_floats(rows["maturity"] - month),
        "adj_remaining_months_to_maturity": _whole_floats(np.where(terminal, 0, rows["left"])),
        "maturity_date": _month_texts(rows["maturity"], day=False, compact=compact),
        "msa": _whole_floats(attrs["msa"][i]),
        "current_loan_delinquency_status": _statuses(status, compact),
        "mod_flag": _texts(yes_no, rows["modified"]),
        "zero_balance_code": _texts(codes, code, ~terminal),
        "zero_balance_effective_date": _month_texts(month, day=False, mask=~terminal,
                                                    compact=compact),
        "last_paid_installment_date": _month_texts(month - rows["status"] - 1, True,
                                                   mask=~foreclosed, compact=compact),
        "foreclosed_after": _month_texts(month, day=True, mask=~foreclosed, compact=compact),
        "disposition_date": _month_texts(month + rng.integers(1, 19, n), day=True,
                                         mask=~foreclosed, compact=compact),
        "foreclosure_costs": on_foreclosure(base * rng.uniform(.02, .08, count)),
        "prop_preservation_and_repair_costs": on_foreclosure(base * rng.uniform(.01, .06, count)),
        "asset_recovery_costs": on_foreclosure(rng.uniform(500, 3000, count), .5),
        "misc_holding_expenses": on_foreclosure(rng.normal(0, 1500, count), .7),
        "holding_taxes": on_foreclosure(base * rng.uniform(.01, .05, count)),
        "net_sale_proceeds": on_foreclosure(base * rng.uniform(.3, .9, count)),
        "credit_enhancement_proceeds": on_foreclosure(
            np.where(mi, base * rng.uniform(.05, .25, count), np.nan)),
        "repurchase_make_whole_proceeds": _floats(np.full(n, np.nan)),
        "other_foreclosure_proceeds": on_foreclosure(rng.uniform(0, 2000, count), .3),
        "non_interest_bearing_upb": _floats(np.full(n, np.nan)),
        "principal_forgiveness_upb": _floats(np.full(n, np.nan)),
        "repurchase_make_whole_proceeds_flag": _texts(yes_no, event == REPURCHASED, ~terminal),
        "foreclosure_principal_write_off_amount": _floats(np.full(n, np.nan)),
        "servicing_activity_indicator": _texts(yes_no, rows["active"], hidden | terminal),
    }


def _statuses(status: np.ndarray, compact: bool):
    """Delinquency statuses: integers (classic), or two characters (current: "00", "01")."""
    status = status.astype(np.int64)
    if not compact or status.size == 0:
        return status
    low, high = int(status.min()), int(status.max())
    return _texts([f"{v:02d}" for v in range(low, high + 1)], status - low)


def current_columns(attrs: dict, rows: dict, rng) -> dict:
    """The current layout's 108 columns: each row's performance fields and its loan's
    acquisition fields; the columns the classic layout lacks are blank."""
    import pyarrow as pa

    perf = performance_columns(attrs, rows, rng, compact=True)
    acq = acquisition_columns(attrs, compact=True)
    rows_of_loans = pa.array(rows["i"])
    n = rows["i"].size
    out = {}
    classic_of = {current: classic for classic, current in schema.CURRENT_NAME.items()}
    for name in schema.CURRENT_COLUMNS:
        classic = classic_of.get(name)
        if classic in perf:
            out[name] = perf[classic]
        elif classic in acq:
            out[name] = pa.array(acq[classic]).take(rows_of_loans)
        else:
            out[name] = pa.nulls(n, pa.string())
    return out


def acquisition_path(directory: str, year: int, quarter: int) -> str:
    return os.path.join(directory, "acq", f"Acquisition_{year}Q{quarter}.txt")


def performance_path(directory: str, year: int, quarter: int) -> str:
    return os.path.join(directory, "perf", f"Performance_{year}Q{quarter}.txt")


def write_acquisition(directory: str, spec: Spec, year: int, quarter: int) -> tuple[str, int, int]:
    """One quarter's acquisition file (one task); returns (path, bytes, rows)."""
    path = acquisition_path(directory, year, quarter)
    written = 0
    for part in range(spec.parts_per_quarter):
        attrs = loans(spec, year, quarter, part)
        written += _write(acquisition_columns(attrs), path, "wb" if part == 0 else "ab")
    return path, written, spec.loans_per_quarter


def current_path(directory: str, year: int, quarter: int) -> str:
    return os.path.join(directory, f"{year}Q{quarter}.csv")


def write_part(roots: dict, spec: Spec, year: int, quarter: int, part: int) -> dict:
    """One part of a quarter's loans in each layout of ``roots`` (one task): a part of the
    quarter's classic performance file or current-layout file (joined after by
    :func:`join_parts`); ``{layout: (path, bytes, rows)}``."""
    attrs = loans(spec, year, quarter, part)
    rows = simulate(spec, year, quarter, part, attrs)
    out = {}
    for layout, root in roots.items():
        rng = np.random.default_rng([spec.seed, year, quarter, part, 2])  # same draws in both
        if layout == "classic":
            path = f"{performance_path(root, year, quarter)}.part{part}"
            columns = performance_columns(attrs, rows, rng)
        else:
            path = f"{current_path(root, year, quarter)}.part{part}"
            columns = current_columns(attrs, rows, rng)
        out[layout] = (path, _write(columns, path), int(rows["i"].size))
    return out


def join_parts(path: str, parts: list[dict], layout: str) -> tuple[str, int]:
    """A quarter's file from its part files, in order (one task): one file per quarter, as
    Fannie Mae publishes them."""
    sources = [written[layout][0] for written in parts]
    with open(path, "wb") as out:
        for source in sources:
            with open(source, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 24)
            os.remove(source)
    return path, os.path.getsize(path)


def write_names(directory: str) -> str:
    path = os.path.join(directory, "names.csv")
    with open(path, "w", encoding="utf-8") as f:
        f.write("seller_name|new\n")
        for name, short in schema.SELLERS.items():
            f.write(f"{name}|{short}\n")
    return path


LAYOUTS = (*schema.DATASET_LAYOUTS, "both")


@dataclass
class Generated:
    directory: str
    layout: str
    performance: list[str]  # classic performance files
    acquisition: list[str]  # classic acquisition files
    current: list[str]  # the current layout's quarter files
    names: str | None
    bytes: int  # of every layout written
    rows: int
    loans: int
    seconds: float
    spec: Spec = field(repr=False, default=None)

    def directory_of(self, layout: str) -> str:
        """Where the files of ``layout`` are ("classic" or "current")."""
        return os.path.join(self.directory, layout) if self.layout == "both" else self.directory

    def moved(self, old: str, new: str) -> Generated:
        """The same dataset, its files moved from directory ``old`` to ``new``."""
        def there(path):
            return None if path is None else os.path.join(new, os.path.relpath(path, old))

        return dataclasses.replace(
            self, directory=new, performance=list(map(there, self.performance)),
            acquisition=list(map(there, self.acquisition)), current=list(map(there, self.current)),
            names=there(self.names))


def _roots(directory: str, layout: str) -> dict[str, str]:
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}: choose one of {', '.join(LAYOUTS)}")
    if layout == "both":
        return {name: os.path.join(directory, name) for name in ("classic", "current")}
    return {layout: directory}


def check_directory(directory: str, overwrite: bool = False, layout: str = "classic") -> None:
    """Raise ValueError unless ``directory`` is new or empty, or holds a dataset an earlier
    run wrote and ``overwrite`` allows replacing it (nothing else is ever replaced)."""
    _roots(directory, layout)
    output.check(directory, what="generated dataset", overwrite=overwrite)


def _prepare(staging: str, layout: str) -> dict[str, str]:
    roots = _roots(staging, layout)
    for name, root in roots.items():
        os.makedirs(root, exist_ok=True)
        if name == "classic":
            for sub in ("perf", "acq"):
                os.makedirs(os.path.join(root, sub))
    return roots


def space_needed(spec: Spec, layout: str = "classic") -> int:
    """Bytes of disk that generating ``spec`` takes: the files of every layout, plus the
    largest quarter twice over while its parts are joined (estimated on a sample)."""
    layouts = ("classic", "current") if layout == "both" else (layout,)
    total = sum(_bytes_per_loan(spec.first_year, spec.last_year, spec.end_year, spec.seed, name)
                for name in layouts) * spec.loans_per_quarter
    return int(total * len(spec.quarters) * 1.05 + total)


def space_bound(spec: Spec, layout: str) -> int:
    """More bytes than generating ``spec`` can take: every loan reported every month from its
    vintage's first month to the end, at a kibibyte a line in each layout (the lines are a few
    hundred bytes), twice over for the joins."""
    months = spec.end_month - spec.first_year * 12 + 1
    layouts = 2 if layout == "both" else 1
    return 2 * layouts * 1024 * months * spec.loans_per_quarter * len(spec.quarters)


def check_space(directory: str, spec: Spec, layout: str = "classic") -> None:
    """Raise OSError when the disk under ``directory`` lacks the space ``spec`` needs."""
    existing = os.path.abspath(directory)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    free = shutil.disk_usage(existing).free
    if free > space_bound(spec, layout):  # room for certain: no sample needed
        return
    needed = space_needed(spec, layout)
    if needed > free:
        from dask.utils import format_bytes

        raise OSError(
            f"{directory}: the dataset needs about {format_bytes(needed)} of disk and "
            f"{existing} has {format_bytes(free)} free: give a smaller --size (or fewer "
            "--loans-per-quarter or --years), or another place")


def generate(directory: str, spec: Spec | None = None, *, layout: str = "classic",
             overwrite: bool = False, progress: bool = False,
             processes: int | None = None) -> Generated:
    """Write ``spec``'s dataset under ``directory`` in ``layout`` ("classic", "current" or
    "both"), one task per file part.

    Runs on the current Dask client when there is one (the files are written by the workers:
    ``directory`` must be visible to them), else on local threads; with ``processes``, in a
    pool of that many local processes (at most one per file part), whatever the client.
    """
    spec = spec or Spec()
    directory = os.path.abspath(directory)
    _roots(directory, layout)
    with output.Staged(directory, what="generated dataset", overwrite=overwrite) as staging:
        made = _generate(staging, spec, layout, progress, processes)
    return made.moved(staging, directory)


def _generate(directory: str, spec: Spec, layout: str, progress: bool,
              processes: int | None = None) -> Generated:
    import dask

    roots = _prepare(directory, layout)
    started = time.perf_counter()
    parts = {(y, q): [dask.delayed(write_part, pure=False)(roots, spec, y, q, p)
                      for p in range(spec.parts_per_quarter)] for y, q in spec.quarters}
    tasks = [part for quarter in parts.values() for part in quarter]
    acquisitions, classic, current = [], [], []
    if "classic" in roots:
        acquisitions = [dask.delayed(write_acquisition, pure=False)(roots["classic"], spec, y, q)
                        for y, q in spec.quarters]
        classic = [dask.delayed(join_parts, pure=False)(
            performance_path(roots["classic"], y, q), parts[y, q], "classic")
            for y, q in spec.quarters]
    if "current" in roots:
        current = [dask.delayed(join_parts, pure=False)(
            current_path(roots["current"], y, q), parts[y, q], "current")
            for y, q in spec.quarters]
    everything = [*acquisitions, *classic, *current, *tasks]
    if processes:
        results = dask.compute(*everything, scheduler="processes",
                               num_workers=max(1, min(processes, len(tasks))),
                               initializer=_exit_on_interrupt)
    elif progress:
        results = _compute_with_progress(everything)
    else:
        results = dask.compute(*everything)
    results = list(results)
    acq = [results.pop(0) for _ in acquisitions]
    classic = [results.pop(0) for _ in classic]
    current = [results.pop(0) for _ in current]
    written = results
    names = [write_names(root) for root in roots.values()][-1]
    any_layout = next(iter(roots))
    return Generated(
        directory=directory,
        layout=layout,
        performance=[r[0] for r in classic],
        acquisition=[r[0] for r in acq],
        current=[r[0] for r in current],
        names=names if layout != "both" else None,
        bytes=sum(r[1] for r in acq + classic + current),
        rows=sum(w[any_layout][2] for w in written),
        loans=spec.loans_per_quarter * len(spec.quarters),
        seconds=time.perf_counter() - started,
        spec=spec,
    )


def _exit_on_interrupt() -> None:
    """In a pool process: a terminal's Ctrl-C ends it at once, without a traceback (the command
    that started the pool stops and says so)."""
    signal.signal(signal.SIGINT, _exit_now)


def _exit_now(signum, frame) -> None:
    os._exit(128 + signum)


def _compute_with_progress(tasks):
    import dask

    from ..progress import current_client, wait

    client = current_client()
    if client is None:
        return dask.compute(*tasks)
    futures = client.compute(tasks)
    wait(futures, "files written")
    return client.gather(futures)


def loans_for_size(target_bytes: int, first_year: int, last_year: int,
                   end_year: int | None = None, seed: int = 0, layout: str = "classic") -> int:
    """Loans per quarter that make about ``target_bytes`` of files in ``layout`` (measured on
    a sample; with "both", of each layout's files: the larger, current one); ValueError when
    a quarter cannot hold them."""
    per_loan = _bytes_per_loan(first_year, last_year, end_year, seed,
                               "classic" if layout == "classic" else "current")
    quarters = 4 * (last_year - first_year + 1)
    loans = max(1, int(target_bytes / (per_loan * quarters)))
    if loans > MAX_LOANS_PER_QUARTER:
        from dask.utils import format_bytes

        raise ValueError(
            f"{format_bytes(target_bytes)} takes about {loans:,} loans in each of {quarters} "
            f"quarters, and a quarter holds at most {MAX_LOANS_PER_QUARTER:,}: give a smaller "
            "size or more --years")
    return loans


@functools.lru_cache(maxsize=16)
def _bytes_per_loan(first_year: int, last_year: int, end_year: int | None, seed: int,
                    layout: str) -> float:
    """Bytes of files a loan makes in ``layout`` ("classic" or "current"), on a sample."""
    sample = Spec(first_year, last_year, loans_per_quarter=400, seed=seed, end_year=end_year)
    per_loan = []
    for year in sorted({first_year, (first_year + last_year) // 2, last_year}):
        attrs = loans(sample, year, 2, 0)
        rows = simulate(sample, year, 2, 0, attrs)
        buffer = io.BytesIO()
        if layout == "classic":
            _write(performance_columns(attrs, rows, np.random.default_rng(0)), buffer)
            _write(acquisition_columns(attrs), buffer)
        else:
            _write(current_columns(attrs, rows, np.random.default_rng(0)), buffer)
        per_loan.append(buffer.tell() / attrs["loan_id"].size)
    return float(np.mean(per_loan))
