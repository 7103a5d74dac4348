"""Test tiers: which parameters of a parametrized test run in the default tier."""
from __future__ import annotations

import pytest


def default_tier(values, keep) -> list:
    """`values` as pytest params; those not in `keep` marked slow (make test-all runs them)."""
    return [pytest.param(v, id=str(v)) if v in keep else pytest.param(v, id=str(v), marks=pytest.mark.slow)
            for v in values]
