"""Test tiers: which parameters of a parametrized test run in the default tier. The others run in the slow tier
(`make test-all`: default_tier) or in CI's extended tier (`make test-extended`: every_nth)."""
from __future__ import annotations

import pytest


def default_tier(values, keep) -> list:
    """`values` as pytest params; those not in `keep` marked slow (make test-all runs them)."""
    return [pytest.param(v, id=str(v)) if v in keep else pytest.param(v, id=str(v), marks=pytest.mark.slow)
            for v in values]


def every_nth(values, n: int, ids=None) -> list:
    """`values` as pytest params (a value may already be a pytest.param); the default tier runs every n-th, the first
    included, and CI's extended tier (`make test-extended`) the others."""
    out = []
    for i, value in enumerate(values):
        param = value if isinstance(value, type(pytest.param(0))) else pytest.param(
            *(value if isinstance(value, tuple) else (value,)), id=ids(value) if ids else None)
        if i % n:
            param = pytest.param(*param.values, id=param.id, marks=[*param.marks, pytest.mark.extended])
        out.append(param)
    return out
