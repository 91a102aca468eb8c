"""The one threshold test (``attnreg.thresholds``) and its three users: the studies' checks, the
ledger's thresholds and the benchmark limits judge the same way on both sides of a limit."""

from __future__ import annotations

import math

import pytest

from attnreg.bench.limits import Limit, judge
from attnreg.thresholds import Threshold, check, passes

CASES = [
    (1.0, "<=", 2.0, True),
    (2.0, "<=", 2.0, True),
    (2.0000001, "<=", 2.0, False),
    (3.0, ">=", 2.0, True),
    (1.9999999, ">=", 2.0, False),
    (-math.inf, "<=", 2.0, False),
    (math.inf, ">=", 2.0, False),
    (math.nan, "<=", 2.0, False),
    (math.nan, ">=", 2.0, False),
]


@pytest.mark.parametrize(("value", "op", "limit", "expected"), CASES)
def test_every_user_judges_alike(value, op, limit, expected):
    assert passes(value, op, limit) is expected
    assert check("c", value, op, limit)["passed"] is expected
    assert Threshold(op, limit, "a test").passes(value) is expected
    assert judge([Limit("c", op, limit, "")], {"c": value})[0]["passed"] is expected


def test_a_missing_value_fails_and_a_bad_op_is_refused():
    assert check("c", None, "<=", 1.0) == {
        "check": "c",
        "value": None,
        "op": "<=",
        "limit": 1.0,
        "passed": False,
    }
    for build in (
        lambda: check("c", 1.0, "<", 1.0),
        lambda: Threshold("==", 1.0, "origin"),
        lambda: Limit("c", "<", 1.0, ""),
    ):
        with pytest.raises(ValueError, match="op: unknown value"):
            build()
