"""The Hypothesis profile shared by the unit tests, and the seed strategy they draw from.

Importing this module registers the "book" profile and loads it, or the profile named by the
HYPOTHESIS_PROFILE environment variable. ``derandomize=True`` makes every run draw the same
examples, so a failure seen once is seen again. The "unit" profile (make test-unit, the inner
loop) draws a third as many examples where a test does not set its own number; make test draws
them all.
"""
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

settings.register_profile(
    "book",
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("unit", parent=settings.get_profile("book"), max_examples=20)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "book"))

# Seeds for torch.manual_seed / torch.Generator, so that each example's tensors are reproducible.
SEEDS = st.integers(min_value=0, max_value=2**31 - 1)
