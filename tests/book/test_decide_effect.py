"""The book's one rule for an effect: reproduces at z ≥ 3, does not reproduce when the upper bound is below the
resolution, undecided otherwise. Checked on hand-made cases and, over many inputs, against the rule's
definition written out as intervals."""
import math

import pytest
from hypothesis import given, strategies as st

from lib.book import Z_FINDING, decide_effect


def test_hand_made_cases():
    assert decide_effect(0.5, 0.1, resolution=0.05).reproduces is True          # z = 5
    assert decide_effect(0.25, 0.1, resolution=0.05).reproduces is None         # z = 2.5: undecided
    assert decide_effect(0.01, 0.001, resolution=0.05).reproduces is False      # real but below resolution
    assert decide_effect(-0.3, 0.05, resolution=0.05).reproduces is False       # the opposite sign
    assert decide_effect(0.0, 0.0, resolution=0.05).reproduces is False         # identical models
    assert decide_effect(0.2, 0.0, resolution=0.05).reproduces is True          # exact and above the resolution
    assert "cannot tell" in decide_effect(0.0, 0.1, resolution=0.05).reason


def test_the_threshold_is_three_se():
    assert Z_FINDING == 3.0
    assert decide_effect(0.31, 0.1, resolution=0.01).reproduces is True
    assert decide_effect(0.29, 0.1, resolution=0.01).reproduces is None


@pytest.mark.parametrize("bad", [dict(estimate=math.nan, se=0.1), dict(estimate=0.1, se=-1.0),
                                 dict(estimate=0.1, se=math.inf)])
def test_refuses_non_finite_or_negative_se(bad):
    with pytest.raises(ValueError, match="se"):
        decide_effect(**bad, resolution=0.1)


def test_refuses_a_resolution_that_is_not_positive():
    with pytest.raises(ValueError, match="resolution"):
        decide_effect(0.1, 0.1, resolution=0.0)


finite = st.floats(-10, 10, allow_nan=False)


@given(finite, st.floats(0, 5, allow_nan=False), st.floats(1e-3, 5, allow_nan=False))
def test_three_ways_as_intervals(estimate, se, resolution):
    effect = decide_effect(estimate, se, resolution=resolution)
    low, high = estimate - 3 * se, estimate + 3 * se
    if high < resolution:
        assert effect.reproduces is False and effect.reason is None
    elif low > 0:
        assert effect.reproduces is True and effect.reason is None
    else:
        assert effect.reproduces is None and low <= 0 and high >= resolution and effect.reason
    # Measured exactly, an effect counts exactly when it reaches the resolution.
    assert decide_effect(estimate, 0.0, resolution=resolution).reproduces == (estimate >= resolution)
