"""Hypothesis profiles for the unit tests.

``dev`` (default) keeps local runs quick; CI selects ``ci`` with ``HYPOTHESIS_PROFILE=ci``.
No deadlines: the machine is shared, and tests never assert wall-clock time.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "dev", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    derandomize=False,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
