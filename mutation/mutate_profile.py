"""A pytest plugin of mutation runs: the "mutate" hypothesis profile.

``mutation/run.py`` loads it (``-p mutate_profile``) and selects the profile, before the tests'
``conftest.py`` loads the profile ``HYPOTHESIS_PROFILE`` names. It is the "ci" profile —
derandomized, no example database, so a mutant's verdict is reproducible — with 50 examples
instead of 200: each mutant runs the tests again, and a quarter of the examples keeps
``make mutate`` within minutes. A mutant only a later example would kill is reported as
surviving, never the other way: the report errs on the strict side.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "mutate",
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
