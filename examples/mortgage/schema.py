"""The Fannie Mae files in both layouts, and the feature table: one place says what each
column is, how it is read and what it becomes, so that the reader, the ETL and the tests agree.

The **classic** layout of the RAPIDS notebook has ``Acquisition_*`` files (25 columns, a row per
loan) and ``Performance_*`` files (31 columns, a row per loan and month); the **current** one
Fannie Mae publishes today has one 108-column file per quarter, a row per loan and month with
the loan's origination fields repeated. Dates become month numbers (``year * 12 + month - 1``),
the same on pandas and cuDF, and categorical fields codes of fixed vocabularies, the same in
every partition.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Kinds of column: how a field is read and checked.
ID = "id"  # loan id: a required integer
PERIOD = "period"  # the reporting month: a required date
DATE = "date"  # MM/YYYY or MM/DD/YYYY, may be blank
NUMBER = "number"  # a decimal number, may be blank
STATUS = "status"  # delinquency status: an integer, blank or X/XX (unknown)
CATEGORY = "category"  # a short code or a name, may be blank


@dataclass(frozen=True)
class Table:
    """One of the classic layout's two files: its columns in file order, and their kinds."""

    name: str
    kinds: dict[str, str]

    @property
    def names(self) -> list[str]:
        return list(self.kinds)

    def __len__(self) -> int:
        return len(self.kinds)


def _table(name: str, spec: str) -> Table:
    return Table(name, dict(item.split(":") for item in spec.split()))


PERFORMANCE = _table("performance", """
    loan_id:id monthly_reporting_period:period servicer:category interest_rate:number
    current_actual_upb:number loan_age:number remaining_months_to_legal_maturity:number
    adj_remaining_months_to_maturity:number maturity_date:date msa:number
    current_loan_delinquency_status:status mod_flag:category zero_balance_code:category
    zero_balance_effective_date:date last_paid_installment_date:date foreclosed_after:date
    disposition_date:date foreclosure_costs:number prop_preservation_and_repair_costs:number
    asset_recovery_costs:number misc_holding_expenses:number holding_taxes:number
    net_sale_proceeds:number credit_enhancement_proceeds:number
    repurchase_make_whole_proceeds:number other_foreclosure_proceeds:number
    non_interest_bearing_upb:number principal_forgiveness_upb:number
    repurchase_make_whole_proceeds_flag:category foreclosure_principal_write_off_amount:number
    servicing_activity_indicator:category
""")

ACQUISITION = _table("acquisition", """
    loan_id:id orig_channel:category seller_name:category orig_interest_rate:number
    orig_upb:number orig_loan_term:number orig_date:date first_pay_date:date orig_ltv:number
    orig_cltv:number num_borrowers:number dti:number borrower_credit_score:number
    first_home_buyer:category loan_purpose:category property_type:category num_units:number
    occupancy_status:category property_state:category zip:number
    mortgage_insurance_percent:number product_type:category coborrow_credit_score:number
    mortgage_insurance_type:number relocation_mortgage_indicator:category
""")

assert len(PERFORMANCE) == 31 and len(ACQUISITION) == 25

# Per-loan intermediates of the classic notebook; computed, then dropped by the last-mile step.
EVER = ("ever_30", "ever_90", "ever_180")
FIRST_DELINQUENCY = ("delinquency_30", "delinquency_90", "delinquency_180")
THRESHOLDS = {"30": 1, "90": 3, "180": 6}  # months behind for 30/90/180 days
LABEL = "delinquency_12"
LABEL_WINDOW = 12  # months T..T+11
LABEL_STATUS_ABOVE = 3  # the label's rule: status > 3, or an unpaid balance of exactly 0

# What the last-mile step drops (the classic notebook's list): ids, dates, intermediates.
DROPPED = (
    "loan_id", "orig_date", "first_pay_date", "seller_name", "monthly_reporting_period",
    "last_paid_installment_date", "maturity_date", *EVER, *FIRST_DELINQUENCY,
    "zero_balance_effective_date", "foreclosed_after", "disposition_date",
)

FEATURES: tuple[str, ...] = tuple(
    name for name in PERFORMANCE.names + ACQUISITION.names[1:] if name not in DROPPED
)
assert len(FEATURES) == 45, len(FEATURES)

# Delinquency status fields that mean "unknown" in the real files; read as missing.
STATUS_UNKNOWN = ("X", "XX")
MISSING = -1  # what missing values become in the feature table (the notebook's fill)

# Closed vocabularies (Fannie Mae's glossary). Codes: position here; a value outside the list
# gets len(list) ("other"); a blank gets MISSING.
STATES = tuple(sorted("""
    AK AL AR AZ CA CO CT DC DE FL GA GU HI IA ID IL IN KS KY LA MA MD ME MI MN MO MS MT NC ND NE
    NH NJ NM NV NY OH OK OR PA PR RI SC SD TN TX UT VA VI VT WA WI WV WY
""".split()))
VOCABULARIES: dict[str, tuple[str, ...]] = {
    "orig_channel": ("B", "C", "R", "T"),
    "first_home_buyer": ("N", "U", "Y"),
    "loan_purpose": ("C", "P", "R", "U"),
    "property_type": ("CO", "CP", "MH", "PU", "SF"),
    "occupancy_status": ("I", "P", "S", "U"),
    "property_state": STATES,
    "product_type": ("FRM",),
    "relocation_mortgage_indicator": ("N", "Y"),
    "mod_flag": ("N", "Y"),
    "zero_balance_code": ("01", "02", "03", "06", "09", "15", "16", "96", "97", "98"),
    "repurchase_make_whole_proceeds_flag": ("N", "Y"),
    "servicing_activity_indicator": ("N", "Y"),
}
# Open vocabularies: institution names, mapped through names.csv to short names first.
NAMED = ("seller_name", "servicer")

# Sellers of the era and their short names: the names mapping when no names.csv is given (the
# test data's sellers).
SELLERS: dict[str, str] = {
    "BANK OF AMERICA, N.A.": "Bank of America",
    "WELLS FARGO BANK, N.A.": "Wells Fargo",
    "JPMORGAN CHASE BANK, NATIONAL ASSOCIATION": "JP Morgan Chase",
    "CITIMORTGAGE, INC.": "Citi",
    "GMAC MORTGAGE, LLC": "GMAC",
    "SUNTRUST MORTGAGE INC.": "SunTrust",
    "PNC BANK, N.A.": "PNC",
    "FLAGSTAR CAPITAL MARKETS CORPORATION": "Flagstar",
    "AMTRUST BANK": "AmTrust",
    "FIRST TENNESSEE BANK NATIONAL ASSOCIATION": "First Tennessee",
    "U.S. BANK N.A.": "US Bank",
    "QUICKEN LOANS INC.": "Quicken",
    "PROVIDENT FUNDING ASSOCIATES, L.P.": "Provident",
    "FIFTH THIRD BANK": "Fifth Third",
    "OTHER": "Other",
}

_DATE = re.compile(r"^(\d{2})(?:/(?:\d{2}/)?)?(\d{4})$")


def month_number(text: str) -> int | None:
    """``"MM/YYYY"``, ``"MM/DD/YYYY"`` (classic) or ``"MMYYYY"`` (current) ->
    ``year * 12 + month - 1``; None if not a date."""
    match = _DATE.match(text)
    month, year = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    return year * 12 + month - 1 if 1 <= month <= 12 else None


def vocabulary(column: str, names: dict[str, str] | None = None) -> tuple[str, ...]:
    """The values whose positions are the codes of ``column`` in the feature table
    (institutions: the sorted short names of the names mapping)."""
    if column in NAMED:
        return tuple(sorted(set((names or SELLERS).values())))
    return VOCABULARIES[column]


def category_code(column: str, value: str | None, names: dict[str, str] | None = None) -> int:
    """The code of one raw ``value`` of a categorical ``column`` (the reference definition)."""
    if value is None or value == "":
        return MISSING
    if column in NAMED:
        value = (names or SELLERS).get(value, value)
    vocab = vocabulary(column, names)
    return vocab.index(value) if value in vocab else len(vocab)


def parse_years(text: str) -> tuple[int, int]:
    """Vintages: ``"2007"`` or ``"2000-2016"`` -> (first, last)."""
    try:
        first, _, last = text.partition("-")
        return int(first), int(last or first)
    except ValueError:
        raise ValueError(f"years={text!r}: write a year (2007) or a range (2000-2016)") from None


def quarter_of(path: str) -> str | None:
    """``"2007Q3"`` for ``.../Performance_2007Q3.txt_0``, ``.../Acquisition_2007Q3.txt`` or
    ``.../2007Q3.csv``."""
    match = re.search(r"(\d{4})[Qq]([1-4])", path.rsplit("/", 1)[-1])  # 2007q3 too
    return f"{match.group(1)}Q{match.group(2)}" if match else None


# ---------------------------------------------------------------------------------------------
# The current layout (Fannie Mae's Single-Family Loan Performance files since 2020)

CURRENT_COLUMNS: tuple[str, ...] = tuple("""
    POOL_ID LOAN_ID ACT_PERIOD CHANNEL SELLER SERVICER MASTER_SERVICER ORIG_RATE CURR_RATE
    ORIG_UPB ISSUANCE_UPB CURRENT_UPB ORIG_TERM ORIG_DATE FIRST_PAY LOAN_AGE REM_MONTHS
    ADJ_REM_MONTHS MATR_DT OLTV OCLTV NUM_BO DTI CSCORE_B CSCORE_C FIRST_FLAG PURPOSE PROP
    NO_UNITS OCC_STAT STATE MSA ZIP MI_PCT PRODUCT PPMT_FLG IO FIRST_PAY_IO MNTHS_TO_AMTZ_IO
    DLQ_STATUS PMT_HISTORY MOD_FLAG MI_CANCEL_FLAG Zero_Bal_Code ZB_DTE LAST_UPB RPRCH_DTE
    CURR_SCHD_PRNCPL TOT_SCHD_PRNCPL UNSCHD_PRNCPL_CURR LAST_PAID_INSTALLMENT_DATE
    FORECLOSURE_DATE DISPOSITION_DATE FORECLOSURE_COSTS PROPERTY_PRESERVATION_AND_REPAIR_COSTS
    ASSET_RECOVERY_COSTS MISCELLANEOUS_HOLDING_EXPENSES_AND_CREDITS
    ASSOCIATED_TAXES_FOR_HOLDING_PROPERTY NET_SALES_PROCEEDS CREDIT_ENHANCEMENT_PROCEEDS
    REPURCHASES_MAKE_WHOLE_PROCEEDS OTHER_FORECLOSURE_PROCEEDS NON_INTEREST_BEARING_UPB
    PRINCIPAL_FORGIVENESS_AMOUNT ORIGINAL_LIST_START_DATE ORIGINAL_LIST_PRICE
    CURRENT_LIST_START_DATE CURRENT_LIST_PRICE ISSUE_SCOREB ISSUE_SCOREC CURR_SCOREB
    CURR_SCOREC MI_TYPE SERV_IND CURRENT_PERIOD_MODIFICATION_LOSS_AMOUNT
    CUMULATIVE_MODIFICATION_LOSS_AMOUNT CURRENT_PERIOD_CREDIT_EVENT_NET_GAIN_OR_LOSS
    CUMULATIVE_CREDIT_EVENT_NET_GAIN_OR_LOSS HOMEREADY_PROGRAM_INDICATOR
    FORECLOSURE_PRINCIPAL_WRITE_OFF_AMOUNT RELOCATION_MORTGAGE_INDICATOR
    ZERO_BALANCE_CODE_CHANGE_DATE LOAN_HOLDBACK_INDICATOR LOAN_HOLDBACK_EFFECTIVE_DATE
    DELINQUENT_ACCRUED_INTEREST PROPERTY_INSPECTION_WAIVER_INDICATOR
    HIGH_BALANCE_LOAN_INDICATOR ARM_5_YR_INDICATOR ARM_PRODUCT_TYPE
    MONTHS_UNTIL_FIRST_PAYMENT_RESET MONTHS_BETWEEN_SUBSEQUENT_PAYMENT_RESET
    INTEREST_RATE_CHANGE_DATE PAYMENT_CHANGE_DATE ARM_INDEX ARM_CAP_STRUCTURE
    INITIAL_INTEREST_RATE_CAP PERIODIC_INTEREST_RATE_CAP LIFETIME_INTEREST_RATE_CAP MARGIN
    BALLOON_INDICATOR PLAN_NUMBER FORBEARANCE_INDICATOR
    HIGH_LOAN_TO_VALUE_HLTV_REFINANCE_OPTION_INDICATOR DEAL_NAME RE_PROCS_FLAG ADR_TYPE
    ADR_COUNT ADR_UPB
""".split())
assert len(CURRENT_COLUMNS) == 108

# Each classic column and its name in the current layout (Fannie Mae's own mapping).
CURRENT_NAME: dict[str, str] = dict(item.split(":") for item in """
    loan_id:LOAN_ID monthly_reporting_period:ACT_PERIOD servicer:SERVICER
    interest_rate:CURR_RATE current_actual_upb:CURRENT_UPB loan_age:LOAN_AGE
    remaining_months_to_legal_maturity:REM_MONTHS adj_remaining_months_to_maturity:ADJ_REM_MONTHS
    maturity_date:MATR_DT msa:MSA current_loan_delinquency_status:DLQ_STATUS mod_flag:MOD_FLAG
    zero_balance_code:Zero_Bal_Code zero_balance_effective_date:ZB_DTE
    last_paid_installment_date:LAST_PAID_INSTALLMENT_DATE foreclosed_after:FORECLOSURE_DATE
    disposition_date:DISPOSITION_DATE foreclosure_costs:FORECLOSURE_COSTS
    prop_preservation_and_repair_costs:PROPERTY_PRESERVATION_AND_REPAIR_COSTS
    asset_recovery_costs:ASSET_RECOVERY_COSTS
    misc_holding_expenses:MISCELLANEOUS_HOLDING_EXPENSES_AND_CREDITS
    holding_taxes:ASSOCIATED_TAXES_FOR_HOLDING_PROPERTY net_sale_proceeds:NET_SALES_PROCEEDS
    credit_enhancement_proceeds:CREDIT_ENHANCEMENT_PROCEEDS
    repurchase_make_whole_proceeds:REPURCHASES_MAKE_WHOLE_PROCEEDS
    other_foreclosure_proceeds:OTHER_FORECLOSURE_PROCEEDS
    non_interest_bearing_upb:NON_INTEREST_BEARING_UPB
    principal_forgiveness_upb:PRINCIPAL_FORGIVENESS_AMOUNT
    repurchase_make_whole_proceeds_flag:RE_PROCS_FLAG
    foreclosure_principal_write_off_amount:FORECLOSURE_PRINCIPAL_WRITE_OFF_AMOUNT
    servicing_activity_indicator:SERV_IND orig_channel:CHANNEL seller_name:SELLER
    orig_interest_rate:ORIG_RATE orig_upb:ORIG_UPB orig_loan_term:ORIG_TERM orig_date:ORIG_DATE
    first_pay_date:FIRST_PAY orig_ltv:OLTV orig_cltv:OCLTV num_borrowers:NUM_BO dti:DTI
    borrower_credit_score:CSCORE_B first_home_buyer:FIRST_FLAG loan_purpose:PURPOSE
    property_type:PROP num_units:NO_UNITS occupancy_status:OCC_STAT property_state:STATE zip:ZIP
    mortgage_insurance_percent:MI_PCT product_type:PRODUCT coborrow_credit_score:CSCORE_C
    mortgage_insurance_type:MI_TYPE relocation_mortgage_indicator:RELOCATION_MORTGAGE_INDICATOR
""".split())
assert set(CURRENT_NAME) == set(PERFORMANCE.names) | set(ACQUISITION.names)
assert set(CURRENT_NAME.values()) <= set(CURRENT_COLUMNS)

# What the ETL reads of each table: the ids, the reporting month, and the features.
PERFORMANCE_READ = tuple(c for c in PERFORMANCE.names
                         if c in ("loan_id", "monthly_reporting_period") or c in FEATURES)
ACQUISITION_READ = tuple(c for c in ACQUISITION.names if c == "loan_id" or c in FEATURES)


_KINDS = {**PERFORMANCE.kinds, **ACQUISITION.kinds}


def kind_of(column: str) -> str:
    """The kind of a classic column (``ID``, ``PERIOD``, ``NUMBER``, ...)."""
    return _KINDS[column]


@dataclass(frozen=True)
class Layout:
    """How one kind of file lays out the classic columns it holds."""

    name: str  # "classic-performance", "classic-acquisition" or "current"
    names: tuple[str, ...]  # every field of a line, in file order (the file's own names)
    classic: dict[str, str]  # classic column -> its name in this file

    @property
    def fields(self) -> int:
        return len(self.names)

    @property
    def loan_field(self) -> int:
        """The position of the loan id on a line."""
        return self.names.index(self.classic["loan_id"])


CLASSIC_PERFORMANCE = Layout("classic-performance", tuple(PERFORMANCE.names),
                             {c: c for c in PERFORMANCE.names})
CLASSIC_ACQUISITION = Layout("classic-acquisition", tuple(ACQUISITION.names),
                             {c: c for c in ACQUISITION.names})
CURRENT = Layout("current", CURRENT_COLUMNS, dict(CURRENT_NAME))
LAYOUTS = (CLASSIC_PERFORMANCE, CLASSIC_ACQUISITION, CURRENT)
# A dataset's layout by name: the classic split files, or the current 108-column ones.
DATASET_LAYOUTS = ("classic", "current")
